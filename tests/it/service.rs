//! Endpoints CRUD, stats, gRPC health and reflection, and the HTTP /healthz.

use std::time::Duration;

use hookd_client::{Event, pb};
use tonic::Code;

use crate::harness::{TestServer, code};

#[tokio::test]
async fn endpoints_crud_and_enqueue_to_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let put = c
        .put_endpoint(pb::Endpoint {
            name: "billing".into(),
            url: "https://billing.example/hooks".into(),
            max_attempts: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(put.created);
    let again = c
        .put_endpoint(pb::Endpoint {
            name: "billing".into(),
            url: "https://billing.example/v2".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!again.created);
    let got = c
        .raw()
        .get_endpoint(pb::GetEndpointRequest {
            name: "billing".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.endpoint.unwrap().url, "https://billing.example/v2");
    let list = c
        .raw()
        .list_endpoints(pb::ListEndpointsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.endpoints.len(), 1);

    let sent = c
        .enqueue(Event::to_endpoint("billing", b"{}".to_vec()))
        .await
        .unwrap();
    let view = c.get_message(&sent.id).await.unwrap();
    // billing.example does not resolve here: the push attempt fails and is retried.
    assert!(
        [
            pb::MessageState::Pending as i32,
            pb::MessageState::AwaitingRetry as i32
        ]
        .contains(&view.state),
        "{view:?}"
    );
    assert_eq!(
        view.max_attempts, 3,
        "endpoint put without max_attempts takes the server default"
    );

    let err = c
        .raw()
        .delete_endpoint(pb::DeleteEndpointRequest {
            name: "billing".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::FailedPrecondition,
        "still has a live message"
    );
    let err = c
        .raw()
        .delete_endpoint(pb::DeleteEndpointRequest {
            name: "ghost".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // Survives restart.
    let server = server.restart().await;
    let mut c = server.client().await;
    let list = c
        .raw()
        .list_endpoints(pb::ListEndpointsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.endpoints[0].name, "billing");
    let s = &c.stats_by_destination().await.unwrap()["endpoint:billing"];
    assert_eq!(s.pending + s.awaiting_retry + s.in_flight, 1, "{s:?}");
    server.stop().await;
}

#[tokio::test]
async fn stats_count_rates_and_oldest_age() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.enqueue_batch((0..30u8).map(|i| Event::to_queue("st", vec![i])))
        .await
        .unwrap();
    server.advance(2_000).await;
    let stats = c.stats().await.unwrap();
    let total = stats.total.unwrap();
    assert_eq!(total.pending, 30);
    assert!(
        (total.enqueue_rate_per_s - 0.5).abs() < 1e-9,
        "30 over the last minute"
    );
    assert!(total.oldest_pending_age_ms >= 2_000);

    let got = c
        .receive("st", 10, Duration::from_secs(30), None)
        .await
        .unwrap();
    server.advance(40).await;
    c.ack(got.iter().map(|m| m.lease_id.clone())).await.unwrap();
    let s = &c.stats_by_destination().await.unwrap()["queue:st"];
    assert_eq!((s.pending, s.in_flight), (20, 0));
    assert_eq!(s.delivered_last_hour, 10);
    let lat = s.latency_last_hour.as_ref().unwrap();
    assert_eq!(lat.count, 10);
    assert!((2_000.0..=2_100.0).contains(&lat.p50_ms), "{lat:?}");
    assert_eq!(s.latency_last_24h.as_ref().unwrap().count, 10);
    server.advance(3_600_000).await;
    let s = &c.stats_by_destination().await.unwrap()["queue:st"];
    assert_eq!(s.delivered_last_hour, 0);
    assert_eq!(s.latency_last_hour.as_ref().unwrap().count, 0);
    assert_eq!(s.latency_last_24h.as_ref().unwrap().count, 10);
    server.stop().await;
}

#[tokio::test]
async fn health_reflection_and_healthz() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;

    let channel = tonic::transport::Endpoint::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    for service in ["", "hookd.v1.Hookd"] {
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            status.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }

    use tonic_reflection::pb::{v1, v1alpha};
    let mut r1 = v1::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let req = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let mut stream = r1
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    let resp = stream.message().await.unwrap().unwrap();
    let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
        resp.message_response
    else {
        panic!("{resp:?}");
    };
    assert!(
        list.service.iter().any(|s| s.name == "hookd.v1.Hookd"),
        "{list:?}"
    );

    let mut ra = v1alpha::server_reflection_client::ServerReflectionClient::new(channel);
    let req = v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
        ),
    };
    let mut stream = ra
        .server_reflection_info(tokio_stream::iter([req]))
        .await
        .unwrap()
        .into_inner();
    assert!(stream.message().await.unwrap().is_some());

    let body = server.healthz().await;
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.ends_with("ok\n"));
    server.stop().await;
}

#[tokio::test]
async fn get_message_shows_attempt_history() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let sent = c
        .enqueue(Event::to_queue("h", b"p".to_vec()).event_type("t"))
        .await
        .unwrap();
    let m = c
        .receive("h", 1, Duration::from_secs(5), None)
        .await
        .unwrap()
        .remove(0);
    c.nack(m.lease_id, Some(Duration::from_secs(1)), "downstream 503")
        .await
        .unwrap();
    let view = c.get_message(&sent.id).await.unwrap();
    assert_eq!(view.state, pb::MessageState::AwaitingRetry as i32);
    assert_eq!(view.attempts, 1);
    assert_eq!(view.next_attempt_unix_ms, server.clock_now() + 1_000);
    assert_eq!(view.history.len(), 1);
    assert_eq!(view.history[0].outcome, "nacked");
    assert_eq!(view.history[0].error, "downstream 503");
    assert_eq!(view.event_type, "t");
    let err = c.get_message("not-an-id").await.unwrap_err();
    assert_eq!(code(&err), Code::InvalidArgument);
    server.stop().await;
}
