//! The HTTP/JSON API (`/v1/...` on the HTTP listener) against a real hookd: writes through
//! it are the gRPC calls' (durable when answered, seen by gRPC clients and delivered to a
//! real receiver), errors are the gRPC statuses mapped to HTTP and name the field, the
//! scopes are the gRPC scopes, and Watch is a stream of Server-Sent Events. The OpenAPI
//! document is tested by a generated client (`tests/python/openapi_client.py`, opt-in
//! with Python, in python.rs).

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use hookd_client::Event;

use crate::harness::{TestServer, eventually};
use crate::security::{AGENT, OPS, READER, secured};
use crate::sink::{Reply, Sink};

/// An HTTP answer: status, headers (names lowercased), body.
#[derive(Debug)]
pub(crate) struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }

    pub(crate) fn status(&self) -> u16 {
        self.status
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The error's message, after checking the error body's shape and codes.
    pub(crate) fn error(&self, http: u16, grpc: &str) -> String {
        assert_eq!(self.status, http, "{}", self.body);
        let body = self.json();
        assert_eq!(body["error"]["code"], http, "{body}");
        assert_eq!(body["error"]["status"], grpc, "{body}");
        body["error"]["message"].as_str().unwrap().to_owned()
    }
}

/// One request over a fresh connection (`connection: close`).
async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: Option<&str>,
) -> Answer {
    let mut head = format!("{method} {path} HTTP/1.1\r\nconnection: close\r\n");
    if !extra.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str("host: 127.0.0.1\r\n");
    }
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = body.unwrap_or("");
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut rx, mut tx) = tcp.into_split();
    // Written beside the read: hookd may answer (413) before it has read the body, and
    // then closes the connection, so a write that fails is not the test's failure.
    let request = [head.into_bytes(), body.as_bytes().to_vec()].concat();
    let writer = tokio::spawn(async move {
        let _ = tx.write_all(&request).await;
        tx
    });
    let mut raw = Vec::new();
    let mut chunk = vec![0; 64 << 10];
    loop {
        match rx.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
        }
    }
    drop(writer.await);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {raw}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

const JSON: (&str, &str) = ("content-type", "application/json");

/// A JSON request with `extra` headers (an `authorization`, say).
pub(crate) async fn call_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> Answer {
    let mut headers = vec![JSON];
    headers.extend_from_slice(extra);
    call(addr, method, path, &headers, Some(body)).await
}

pub(crate) async fn post(addr: SocketAddr, path: &str, body: Value) -> Answer {
    call(addr, "POST", path, &[JSON], Some(&body.to_string())).await
}

pub(crate) async fn put(addr: SocketAddr, path: &str, body: Value) -> Answer {
    call(addr, "PUT", path, &[JSON], Some(&body.to_string())).await
}

pub(crate) async fn get(addr: SocketAddr, path: &str) -> Answer {
    call(addr, "GET", path, &[], None).await
}

pub(crate) fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn json_writes_are_the_grpc_writes_durable_delivered_and_seen_by_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let http = server.http;
    let sink = Sink::start(Reply::Status(204)).await;

    // An endpoint put over JSON (the body is the Endpoint; the name comes from the path).
    let put = call(
        http,
        "PUT",
        "/v1/endpoints/orders",
        &[JSON],
        Some(&json!({"url": sink.url("/hook"), "maxAttempts": 2}).to_string()),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(put.json()["created"], true);
    assert_eq!(put.json()["endpoint"]["name"], "orders");
    // proto3's JSON mapping: 64-bit integers are strings, defaults are written out.
    assert!(put.json()["endpoint"]["createdUnixMs"].is_string());
    assert_eq!(put.json()["endpoint"]["paused"], false);

    // Enqueued over JSON, with headers and an idempotency key; delivered by push.
    let payload = br#"{"order":42}"#;
    let body = json!({
        "endpoint": "orders",
        "payload": b64(payload),
        "eventType": "order.created",
        "idempotencyKey": "order-42",
        "headers": {"x-tenant": "acme"},
    });
    let first = post(http, "/v1/messages", body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(first.json()["duplicate"], false);
    let again = post(http, "/v1/messages", body).await;
    assert_eq!(again.json()["id"], id.as_str());
    assert_eq!(again.json()["duplicate"], true);

    let got = sink.wait_for(1).await;
    assert_eq!(&got[0].body[..], payload);
    assert_eq!(got[0].headers["x-tenant"], "acme");
    assert_eq!(got[0].headers["webhook-id"], id.as_str());

    // The gRPC API sees the same message, and so does GetMessage over JSON.
    let mut client = server.client().await;
    let message = client.get_message(&id).await.unwrap();
    assert_eq!(message.payload, payload);
    let state = eventually(
        "the delivery recorded",
        async || get(http, &format!("/v1/messages/{id}")).await.json(),
        |m| m["state"] == "MESSAGE_STATE_DELIVERED",
    )
    .await;
    assert_eq!(state["history"].as_array().unwrap().len(), 1, "{state}");

    // A pull queue: enqueued over gRPC, received and acknowledged over JSON.
    client
        .enqueue(Event::to_queue("jobs", b"job-1".to_vec()))
        .await
        .unwrap();
    let received = post(
        http,
        "/v1/queues/jobs/receive",
        json!({"maxMessages": 10, "waitMs": "2000"}),
    )
    .await;
    assert_eq!(received.status, 200, "{}", received.body);
    let messages = received.json()["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["payload"], b64(b"job-1"));
    let lease = messages[0]["leaseId"].as_str().unwrap().to_owned();
    let acked = post(http, "/v1/leases/ack", json!({"leaseIds": [lease]})).await;
    assert_eq!(acked.json()["acked"], 1, "{}", acked.body);

    // Stats by query parameters (JSON names or the .proto's).
    let stats = get(http, "/v1/stats?pageSize=10").await.json();
    let keys: Vec<&str> = stats["destinations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["destination"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"endpoint:orders"), "{keys:?}");
    assert_eq!(get(http, "/v1/stats?page_size=10").await.status, 200);

    // The document is served, and is the committed one.
    let served = get(http, "/v1/openapi.json").await;
    assert_eq!(served.status, 200);
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../proto/hookd/v1/openapi.json"
    ))
    .unwrap();
    assert_eq!(
        served.json(),
        serde_json::from_str::<Value>(&committed).unwrap()
    );
    server.stop().await;
}

/// A JSON payload goes as `data`, without base64: the receiver gets the text as sent
/// (a 30-digit number, an escape, `1.10` and the spacing untouched), and GetMessage and
/// Receive show it back as JSON beside the exact payload.
#[tokio::test]
async fn json_payloads_go_as_data_and_reach_the_receiver_as_sent() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let http = server.http;
    let sink = Sink::start(Reply::Status(204)).await;
    let put = put(
        http,
        "/v1/endpoints/orders",
        json!({"url": sink.url("/hook")}),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.body);

    let data = r#"{"id": 123456789012345678901234567890, "note": "caf\u00e9", "x": 1.10}"#;
    let body =
        format!(r#"{{"endpoint": "orders", "eventType": "order.created", "data": {data} }}"#);
    let sent = call_with(http, "POST", "/v1/messages", &[], &body).await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    let id = sent.json()["id"].as_str().unwrap().to_owned();
    let got = sink.wait_for(1).await;
    assert_eq!(std::str::from_utf8(&got[0].body).unwrap(), data);
    assert_eq!(got[0].headers["content-type"], "application/json");

    let shown = get(http, &format!("/v1/messages/{id}")).await.json();
    assert_eq!(shown["data"]["note"], "caf\u{e9}", "{shown}");
    assert_eq!(shown["payload"], b64(data.as_bytes()));

    // A batch: each event may take data; a queue's consumer sees it as JSON too.
    let batch = call_with(
        http,
        "POST",
        "/v1/messages/batch",
        &[],
        r#"{"events": [{"queue": "jobs", "data": [1, {"k": true}]}, {"queue": "jobs", "payload": "aGk="}]}"#,
    )
    .await;
    assert_eq!(batch.status, 200, "{}", batch.body);
    let received = post(http, "/v1/queues/jobs/receive", json!({"maxMessages": 10})).await;
    let messages = received.json()["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 2, "{}", received.body);
    assert_eq!(messages[0]["data"], json!([1, {"k": true}]));
    assert!(messages[1].get("data").is_none(), "hi is not JSON");

    // Both forms at once is refused, naming the fields; nothing is stored.
    let both = call_with(
        http,
        "POST",
        "/v1/messages/batch",
        &[],
        r#"{"events": [{"queue": "jobs", "data": 1}, {"queue": "jobs", "payload": "aGk=", "data": {}}]}"#,
    )
    .await;
    let message = both.error(400, "INVALID_ARGUMENT");
    assert!(
        message.starts_with("events[1].data: ") && message.contains("not both"),
        "{message}"
    );
    let stats = server.client().await.stats().await.unwrap();
    assert_eq!(
        stats.total.unwrap().pending,
        0,
        "the refused batch stored something"
    );
    server.stop().await;
}

#[tokio::test]
async fn json_errors_are_the_grpc_statuses_and_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let http = server.http;

    // The service's own validation, as gRPC answers it.
    let empty = post(
        http,
        "/v1/messages",
        json!({"queue": "", "payload": "aGk="}),
    )
    .await;
    assert_eq!(
        empty.error(400, "INVALID_ARGUMENT"),
        "queue: must not be empty"
    );
    let id = "01890a5d-ac96-774b-bcce-b302099a8057";
    let missing = get(http, &format!("/v1/messages/{id}")).await;
    assert!(missing.error(404, "NOT_FOUND").contains(id));
    let busy = call(http, "DELETE", "/v1/endpoints/nope", &[], None).await;
    assert!(
        busy.error(404, "NOT_FOUND").starts_with("name:"),
        "{busy:?}"
    );

    // Decoding: the JSON path of the field at fault.
    let unknown = post(http, "/v1/messages", json!({"queue": "q", "bogus": 1})).await;
    assert!(unknown.error(400, "INVALID_ARGUMENT").contains("bogus"));
    let typed = post(
        http,
        "/v1/messages/batch",
        json!({"events": [{"queue": "q"}, {"queue": "q", "headers": {"a": 5}}]}),
    )
    .await;
    assert!(
        typed
            .error(400, "INVALID_ARGUMENT")
            .starts_with("events[1].headers.a:"),
        "{typed:?}"
    );
    let not_json = call(http, "POST", "/v1/messages", &[JSON], Some("{")).await;
    assert!(not_json.error(400, "INVALID_ARGUMENT").starts_with("body:"));
    let query = get(http, "/v1/dead-letters?pageSize=x").await;
    assert!(query.error(400, "INVALID_ARGUMENT").contains("pageSize"));
    let no_field = get(http, "/v1/stats?colour=red").await;
    assert!(no_field.error(400, "INVALID_ARGUMENT").contains("colour"));
    let clash = call(
        http,
        "PUT",
        "/v1/endpoints/a",
        &[JSON],
        Some(r#"{"name":"b","url":"https://example.com/"}"#),
    )
    .await;
    assert!(
        clash
            .error(400, "INVALID_ARGUMENT")
            .starts_with("endpoint.name:")
    );

    // HTTP's own refusals.
    let form = call(
        http,
        "POST",
        "/v1/messages",
        &[("content-type", "text/plain")],
        Some(r#"{"queue":"q"}"#),
    )
    .await;
    assert_eq!(form.status, 415, "{}", form.body);
    let wrong = call(http, "PATCH", "/v1/endpoints/a", &[], None).await;
    assert_eq!(wrong.status, 405);
    assert_eq!(wrong.header("allow"), Some("PUT, GET, DELETE"));
    let nowhere = get(http, "/v1/nothing-here").await;
    assert!(nowhere.error(404, "NOT_FOUND").contains("openapi.json"));
    // Larger than twice the largest gRPC message: 413 before it is decoded.
    let huge = format!(r#"{{"queue":"q","payload":"{}"}}"#, "A".repeat(64 << 20));
    let too_big = call(http, "POST", "/v1/messages", &[JSON], Some(&huge)).await;
    assert_eq!(too_big.status, 413, "{}", too_big.body);
    // Nothing of the above was stored.
    let stats = server.client().await.stats().await.unwrap();
    assert_eq!(stats.total.unwrap_or_default().pending, 0);

    // Without [auth], a Host naming a domain is refused (DNS rebinding), as for /metrics.
    let rebound = call(
        http,
        "GET",
        "/v1/stats",
        &[("host", "attacker.example:7701")],
        None,
    )
    .await;
    assert!(rebound.error(403, "PERMISSION_DENIED").contains("Host"));
    server.stop().await;
}

#[tokio::test]
async fn json_calls_need_the_grpc_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        secured(dir.path(), ""),
        hookd_core::clock::ManualClock::new(0),
    )
    .await;
    let http = server.http;
    let bearer = |t: &str| format!("Bearer {t}");
    let enqueue = r#"{"queue":"q","payload":"aGk="}"#;

    let anonymous = call(http, "POST", "/v1/messages", &[JSON], Some(enqueue)).await;
    anonymous.error(401, "UNAUTHENTICATED");
    assert_eq!(anonymous.header("www-authenticate"), Some("Bearer"));
    let reader = bearer(READER);
    let refused = call(
        http,
        "POST",
        "/v1/messages",
        &[JSON, ("authorization", &reader)],
        Some(enqueue),
    )
    .await;
    assert!(
        refused.error(403, "PERMISSION_DENIED").contains("enqueue"),
        "{refused:?}"
    );
    let agent = bearer(AGENT);
    let stored = call(
        http,
        "POST",
        "/v1/messages",
        &[JSON, ("authorization", &agent)],
        Some(enqueue),
    )
    .await;
    assert_eq!(stored.status, 200, "{}", stored.body);
    let stats = call(
        http,
        "GET",
        "/v1/stats",
        &[("authorization", &reader)],
        None,
    )
    .await;
    assert_eq!(stats.status, 200, "{}", stats.body);
    let not_admin = call(
        http,
        "DELETE",
        "/v1/endpoints/x",
        &[("authorization", &agent)],
        None,
    )
    .await;
    not_admin.error(403, "PERMISSION_DENIED");
    let ops = bearer(OPS);
    let admin = call(
        http,
        "DELETE",
        "/v1/endpoints/x",
        &[("authorization", &ops)],
        None,
    )
    .await;
    admin.error(404, "NOT_FOUND");
    // With [auth], any Host is answered (the token is the check); the document is public.
    let document = call(
        http,
        "GET",
        "/v1/openapi.json",
        &[("host", "hookd.internal.example")],
        None,
    )
    .await;
    assert_eq!(document.status, 200);
    server.stop().await;
}

#[tokio::test]
async fn watch_is_a_stream_of_server_sent_events() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut tcp = tokio::net::TcpStream::connect(server.http).await.unwrap();
    tcp.write_all(b"GET /v1/events?destination.queue=jobs HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(tcp).lines();
    let status = lines.next_line().await.unwrap().unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let mut content_type = String::new();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-type:") {
            content_type = v.trim().to_owned();
        }
    }
    assert_eq!(content_type, "text/event-stream");

    // An event of another destination is filtered out; this one's ack is streamed.
    let mut client = server.client().await;
    client
        .enqueue(Event::to_queue("other", b"x".to_vec()))
        .await
        .unwrap();
    let id = client
        .enqueue(Event::to_queue("jobs", b"y".to_vec()))
        .await
        .unwrap()
        .id;
    let leased = client
        .receive("jobs", 1, Duration::from_secs(30), None)
        .await
        .unwrap();
    client.ack(vec![leased[0].lease_id.clone()]).await.unwrap();
    let event = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let line = lines.next_line().await.unwrap().unwrap();
            if let Some(data) = line.strip_prefix("data: ") {
                return serde_json::from_str::<Value>(data).unwrap();
            }
        }
    })
    .await
    .expect("no event within 15 s");
    assert_eq!(event["kind"], "acked", "{event}");
    assert_eq!(event["destination"], "queue:jobs");
    assert_eq!(event["messageId"], id.as_str());
    server.stop().await;
}

#[tokio::test]
async fn a_full_destination_is_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    // Destinations hold at most 64 KiB of live messages.
    let server = TestServer::with_small_marks(dir.path()).await;
    let payload = b64(&[b'x'; 15 << 10]);
    let mut refused = None;
    for _ in 0..20 {
        let answer = post(
            server.http,
            "/v1/messages",
            json!({"queue": "full", "payload": payload}),
        )
        .await;
        if answer.status != 200 {
            refused = Some(answer);
            break;
        }
    }
    let refused = refused.expect("20 x 15 KiB into a 64 KiB destination were all taken");
    let message = refused.error(429, "RESOURCE_EXHAUSTED");
    assert!(message.contains("destination_max_bytes"), "{message}");
    let retry_ms: u64 = refused.json()["error"]["retryAfterMs"]
        .as_str()
        .expect("retryAfterMs")
        .parse()
        .unwrap();
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(retry_after, retry_ms.div_ceil(1000).max(1));
    server.stop().await;
}

#[tokio::test]
async fn a_body_that_does_not_arrive_is_408_and_frees_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::harness::test_config(dir.path());
    config.connections.request_body_timeout_ms = 300;
    let server = TestServer::start_with(
        config,
        hookd_core::clock::ManualClock::new(hookd_core::clock::Clock::now_ms(
            &hookd_core::clock::SystemClock,
        )),
    )
    .await;
    let mut tcp = tokio::net::TcpStream::connect(server.http).await.unwrap();
    // 100 bytes announced, 10 sent, and then nothing.
    tcp.write_all(
        b"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"queue\":",
    )
    .await
    .unwrap();
    let mut head = vec![0; 12];
    tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut head))
        .await
        .expect("no answer within 10 s")
        .unwrap();
    assert_eq!(&head, b"HTTP/1.1 408");
    // The next call is answered.
    let stats = get(server.http, "/v1/stats").await;
    assert_eq!(stats.status, 200, "{}", stats.body);
    server.stop().await;
}
