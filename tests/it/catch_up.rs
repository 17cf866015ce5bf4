//! Catch-up for receivers (issue #53, 3): a receiver that was down pulls its endpoint's
//! events after a cursor, each signed as its delivery is; with a tenant token over gRPC and
//! HTTP/JSON, or with no token at all, its request signed with the endpoint's secret. The
//! cursor is a message id: it stays good across a restart of hookd.

use hookd_client::{Client, Event, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};

use crate::harness::{TestServer, test_config};
use crate::sink::{Reply, Sink};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn page(c: &mut Client, after: &str, size: u32) -> pb::ListEndpointEventsResponse {
    c.raw()
        .list_endpoint_events(pb::ListEndpointEventsRequest {
            endpoint: "acme".into(),
            after: after.into(),
            page_size: size,
        })
        .await
        .unwrap()
        .into_inner()
}

/// Each event is signed as its delivery: the receiver's own check passes.
fn verify(e: &pb::EndpointEvent) {
    let secret = hookd_core::signing::Secret::parse(SECRET).unwrap();
    let id = &e.headers["webhook-id"];
    let timestamp: u64 = e.headers["webhook-timestamp"].parse().unwrap();
    assert_eq!(
        hookd_core::signing::signature_header(&[secret], id, timestamp, &e.payload).as_deref(),
        Some(e.headers["webhook-signature"].as_str()),
        "{e:?}"
    );
    assert_eq!(id, &e.id);
}

/// `GET path` signed with `secret` at `timestamp` (Unix s), as a receiver signs it.
async fn signed_get(
    http: std::net::SocketAddr,
    path: &str,
    secret: &str,
    timestamp: u64,
) -> crate::rest::Answer {
    let key = hookd_core::signing::Secret::parse(secret).unwrap();
    let signature = hookd_core::signing::signature_header(&[key], path, timestamp, b"").unwrap();
    let ts = timestamp.to_string();
    crate::rest::call_with(
        http,
        "GET",
        path,
        &[
            ("webhook-timestamp", &ts),
            ("webhook-signature", &signature),
        ],
        "",
    )
    .await
}

#[tokio::test]
async fn a_receiver_that_was_down_pulls_what_it_missed_signed_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.breaker.failure_threshold = 1_000;
    config.delivery.breaker.slow_failure_threshold = 1_000;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    // The receiver is down: every attempt fails, and each event is a dead letter.
    let sink = Sink::start(Reply::Status(503)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "acme".into(),
        url: sink.url("/hook"),
        secrets: vec![SECRET.into()],
        catch_up: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let id = c
            .enqueue(
                Event::to_endpoint("acme", format!("{{\"n\":{i}}}"))
                    .max_attempts(1)
                    .event_type("order.paid"),
            )
            .await
            .unwrap()
            .id;
        crate::harness::dead_lettered(&mut c, &id).await;
        ids.push(id);
        server.advance(1).await;
    }
    // Pages of two, oldest first, each event signed.
    let first = page(&mut c, "", 2).await;
    let got: Vec<&str> = first.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(got, [ids[0].as_str(), ids[1].as_str()]);
    assert!(first.more);
    for e in &first.events {
        verify(e);
        assert_eq!(e.state, pb::MessageState::DeadLetter as i32);
        assert_eq!(e.headers["webhook-event-type"], "order.paid");
        assert_eq!(e.attempts, 1);
    }
    assert_eq!(first.events[0].payload, b"{\"n\":0}");
    assert_eq!(first.next_cursor, ids[1]);

    // hookd restarts; the cursor goes on where it was.
    let server = server.restart().await;
    let mut c = server.client().await;
    let second = page(&mut c, &first.next_cursor, 2).await;
    let got: Vec<&str> = second.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(got, [ids[2].as_str(), ids[3].as_str()]);
    second.events.iter().for_each(verify);
    let last = page(&mut c, &second.next_cursor, 2).await;
    assert_eq!(last.events.len(), 1);
    assert_eq!(last.events[0].id, ids[4]);
    assert!(!last.more);
    // Nothing after the last: the same cursor back.
    let none = page(&mut c, &last.next_cursor, 2).await;
    assert!(none.events.is_empty() && !none.more);
    assert_eq!(none.next_cursor, ids[4]);

    // HTTP/JSON with the API's token (none configured here), the same page.
    let answer = crate::rest::get(
        server.http,
        &format!(
            "/v1/endpoints/acme/events?after={}&pageSize=2",
            first.next_cursor
        ),
    )
    .await;
    assert_eq!(answer.status(), 200, "{answer:?}");
    assert_eq!(answer.json()["events"][0]["id"], ids[2].as_str());

    // No token: the request signed with the endpoint's secret.
    let now = server.clock.now_ms() / 1_000;
    let path = format!("/catch-up/default/acme?after={}&page_size=10", ids[2]);
    let answer = signed_get(server.http, &path, SECRET, now).await;
    assert_eq!(answer.status(), 200, "{answer:?}");
    let events = answer.json()["events"].as_array().unwrap().clone();
    let got: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(got, [ids[3].as_str(), ids[4].as_str()]);
    // Refused alike, saying nothing more: another secret, a stale time, another path
    // than the one signed, an unknown endpoint or tenant.
    let other = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
    for (path, secret, at) in [
        (path.clone(), other, now),
        (path.clone(), SECRET, now - 301),
        ("/catch-up/default/nobody".to_owned(), SECRET, now),
        ("/catch-up/nobody/acme".to_owned(), SECRET, now),
    ] {
        let answer = signed_get(server.http, &path, secret, at).await;
        assert_eq!(answer.status(), 401, "{path}: {answer:?}");
    }
    let key = hookd_core::signing::Secret::parse(SECRET).unwrap();
    let signed_for = hookd_core::signing::signature_header(&[key], &path, now, b"").unwrap();
    let moved = crate::rest::call_with(
        server.http,
        "GET",
        "/catch-up/default/acme?after=&page_size=10",
        &[
            ("webhook-timestamp", &now.to_string()),
            ("webhook-signature", &signed_for),
        ],
        "",
    )
    .await;
    assert_eq!(moved.status(), 401, "another query than the one signed");

    // An endpoint without catch-up: refused, naming why.
    c.put_endpoint(pb::Endpoint {
        name: "acme".into(),
        url: sink.url("/hook"),
        secrets: vec![SECRET.into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let e = c
        .raw()
        .list_endpoint_events(pb::ListEndpointEventsRequest {
            endpoint: "acme".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().starts_with("endpoint:"), "{e:?}");
    let answer = signed_get(server.http, &path, SECRET, now).await;
    assert_eq!(answer.status(), 401);
    // Bad input names its field.
    for (request, field) in [
        (
            pb::ListEndpointEventsRequest {
                endpoint: "acme".into(),
                after: "nope".into(),
                ..Default::default()
            },
            "after",
        ),
        (
            pb::ListEndpointEventsRequest {
                endpoint: "acme".into(),
                page_size: 1_001,
                ..Default::default()
            },
            "page_size",
        ),
    ] {
        let e = c.raw().list_endpoint_events(request).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().starts_with(field), "{e:?}");
    }
    server.stop().await;
}
