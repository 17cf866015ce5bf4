//! OpenTelemetry: a hookd process configured by the standard `OTEL_*` variables exports
//! its spans over OTLP/gRPC to a collector in the test (a `TraceService` server on
//! 127.0.0.1:0, from opentelemetry-proto's generated code): the producer's `traceparent`
//! (gRPC metadata, the HTTP/JSON API's header, an ingest request's header) is the parent
//! of hookd's call span, whose children are the durable write and each push attempt; the
//! endpoint gets the attempt's span as its `traceparent`. With tracing off (the default),
//! the producer's context passes through to the endpoint unchanged.

use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use sha2::Digest as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::TestServer;
use crate::sink::{Reply, Sink};
use hookd_client::Client;
use hookd_proto::v1 as pb;

/// Receives OTLP trace exports and keeps them.
#[derive(Clone, Default)]
struct Collector {
    got: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.got.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    /// Serves on 127.0.0.1:0; its address.
    async fn start(&self) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let service = TraceServiceServer::new(self.clone());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        addr
    }

    fn spans(&self) -> Vec<Span> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }

    fn service_names(&self) -> Vec<String> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| &r.resource_spans)
            .filter_map(|r| r.resource.as_ref())
            .flat_map(|r| &r.attributes)
            .filter(|kv| kv.key == "service.name")
            .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    }

    /// Waits (real time, at most 15 s: the exporter's batches go every 50 ms here) until
    /// a span `pred` accepts has arrived.
    async fn wait_for(&self, what: &str, pred: impl Fn(&Span) -> bool) -> Span {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(span) = self.spans().into_iter().find(&pred) {
                return span;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {what} span within 15 s; got {:#?}",
                self.spans()
                    .iter()
                    .map(|s| (s.name.clone(), hex(&s.trace_id)))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<AnyValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.clone())
}

/// A producer's trace context: trace id `trace` (32 hex), its span `parent` (16 hex).
fn traceparent(trace: &str, parent: &str) -> String {
    format!("00-{trace}-{parent}-01")
}

/// Enqueue with `traceparent` in the call's metadata.
async fn enqueue_traced(client: &mut Client, event: pb::EnqueueRequest, parent: &str) -> String {
    let mut request = tonic::Request::new(event);
    request
        .metadata_mut()
        .insert("traceparent", parent.parse().unwrap());
    client.raw().enqueue(request).await.unwrap().into_inner().id
}

/// One HTTP/1.1 request; the status code.
async fn http_post(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> u16 {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!("POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).await.unwrap();
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_with_the_producers_context() {
    let collector = Collector::default();
    let otlp = collector.start().await;
    let sink = Sink::start(Reply::Status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let extra: Vec<OsString> = vec![
        "--allow-destination".into(),
        format!("127.0.0.1/32:{}", sink.addr().port()).into(),
    ];
    let hookd = hookd_testkit::ChildHookd::spawn_env(
        std::path::Path::new(env!("CARGO_BIN_EXE_hookd-under-test")),
        dir.path(),
        &extra,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}")),
            ("OTEL_BSP_SCHEDULE_DELAY", "50".into()),
            ("OTEL_SERVICE_NAME", "hookd-under-test".into()),
        ],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let mut client = Client::connect(hookd.grpc.clone()).await.unwrap();

    // gRPC: the producer's context in the call's metadata; a push to the sink.
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let producer = "b7ad6b7169203331";
    let id = enqueue_traced(
        &mut client,
        pb::EnqueueRequest {
            destination: Some(pb::enqueue_request::Destination::Url(sink.url("/hook"))),
            payload: b"{}".to_vec(),
            ..Default::default()
        },
        &traceparent(trace, producer),
    )
    .await;
    let delivered = sink.wait_for(1).await;
    let sent = delivered[0].headers["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(
        parts[1], trace,
        "the endpoint gets the producer's trace: {sent}"
    );
    assert_ne!(
        parts[2], producer,
        "as a child of hookd's attempt span: {sent}"
    );

    let enqueue = collector
        .wait_for("hookd.enqueue", |s| {
            s.name == "hookd.enqueue" && hex(&s.trace_id) == trace
        })
        .await;
    assert_eq!(hex(&enqueue.parent_span_id), producer);
    assert_eq!(
        attribute(&enqueue, "messaging.message.id"),
        Some(AnyValue::StringValue(id.clone()))
    );
    let write = collector
        .wait_for("hookd.durable_write", |s| {
            s.name == "hookd.durable_write" && s.parent_span_id == enqueue.span_id
        })
        .await;
    assert!(write.end_time_unix_nano >= write.start_time_unix_nano);
    let attempt = collector
        .wait_for("hookd.deliver", |s| {
            s.name == "hookd.deliver" && hex(&s.trace_id) == trace
        })
        .await;
    assert_eq!(attempt.parent_span_id, enqueue.span_id);
    assert_eq!(
        hex(&attempt.span_id),
        parts[2],
        "the span the endpoint was told of"
    );
    assert_eq!(
        attribute(&attempt, "http.response.status_code"),
        Some(AnyValue::IntValue(204))
    );
    assert_eq!(
        attribute(&attempt, "hookd.attempt"),
        Some(AnyValue::IntValue(1))
    );

    // The HTTP/JSON API: the header, through the same call.
    let json_trace = "11111111111111111111111111111111";
    let status = http_post(
        hookd.http,
        "/v1/messages",
        &[
            ("content-type", "application/json"),
            ("traceparent", &traceparent(json_trace, "2222222222222222")),
        ],
        r#"{"queue":"jobs","payload":"e30="}"#,
    )
    .await;
    assert_eq!(status, 200);
    let json_call = collector
        .wait_for("hookd.enqueue over HTTP/JSON", |s| {
            s.name == "hookd.enqueue" && hex(&s.trace_id) == json_trace
        })
        .await;
    assert_eq!(hex(&json_call.parent_span_id), "2222222222222222");
    // A pull consumer gets the context too: hookd's call span as the parent.
    let leased = client
        .receive("jobs", 1, Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(
        leased[0].headers["traceparent"],
        traceparent(json_trace, &hex(&json_call.span_id))
    );

    // Ingest: a webhook with the sender's context.
    let token = "tok-otel";
    client
        .raw()
        .put_source(pb::PutSourceRequest {
            source: Some(pb::Source {
                name: "internal".into(),
                scheme: "none".into(),
                bearer_sha256: vec![hex(&sha2::Sha256::digest(token))],
                route: Some(pb::source::Route::Queue("inbound".into())),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let ingest_trace = "33333333333333333333333333333333";
    let status = http_post(
        hookd.ingest,
        "/in/internal",
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Bearer {token}")),
            (
                "traceparent",
                &traceparent(ingest_trace, "4444444444444444"),
            ),
        ],
        r#"{"kind":"x"}"#,
    )
    .await;
    assert_eq!(status, 202);
    let received = collector
        .wait_for("hookd.ingest", |s| {
            s.name == "hookd.ingest" && hex(&s.trace_id) == ingest_trace
        })
        .await;
    assert_eq!(hex(&received.parent_span_id), "4444444444444444");
    assert_eq!(
        attribute(&received, "http.response.status_code"),
        Some(AnyValue::IntValue(202))
    );
    collector
        .wait_for("the ingest's durable write", |s| {
            s.name == "hookd.durable_write" && s.parent_span_id == received.span_id
        })
        .await;
    assert!(
        collector
            .service_names()
            .iter()
            .all(|n| n == "hookd-under-test"),
        "{:?}",
        collector.service_names()
    );
    hookd.stop(Duration::from_secs(10)).await.unwrap();
}

#[tokio::test]
async fn with_tracing_off_the_producers_context_reaches_the_endpoint_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut client = server.client().await;
    let parent = traceparent("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    enqueue_traced(
        &mut client,
        pb::EnqueueRequest {
            destination: Some(pb::enqueue_request::Destination::Url(sink.url("/hook"))),
            payload: b"{}".to_vec(),
            ..Default::default()
        },
        &parent,
    )
    .await;
    let got = sink.wait_for(1).await;
    assert_eq!(got[0].headers["traceparent"], parent.as_str());
    // An event that names its own traceparent keeps it.
    let own = traceparent("55555555555555555555555555555555", "6666666666666666");
    enqueue_traced(
        &mut client,
        pb::EnqueueRequest {
            destination: Some(pb::enqueue_request::Destination::Url(sink.url("/hook"))),
            payload: b"{}".to_vec(),
            headers: [("traceparent".to_owned(), own.clone())].into(),
            ..Default::default()
        },
        &parent,
    )
    .await;
    let got = sink.wait_for(2).await;
    assert_eq!(got[1].headers["traceparent"], own.as_str());
    server.stop().await;
}
