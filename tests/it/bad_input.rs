//! Every bad input gets the right status, a message naming the field, and stores nothing.

use std::time::Duration;

use hookd_client::{Client, Event, pb};
use tonic::Code;

use crate::harness::{TestServer, code, message};

async fn assert_nothing_stored(c: &mut Client) {
    let total = c.stats().await.unwrap().total.unwrap();
    assert_eq!(
        total.pending + total.in_flight + total.awaiting_retry + total.dead_letter,
        0,
        "{total:?}"
    );
}

#[tokio::test]
async fn enqueue_rejects_bad_fields_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;

    let cases: Vec<(pb::EnqueueRequest, Code, &str)> = vec![
        (
            pb::EnqueueRequest::default(),
            Code::InvalidArgument,
            "destination:",
        ),
        (
            Event::to_queue("", b"x".to_vec()).into_request(),
            Code::InvalidArgument,
            "queue: must not be empty",
        ),
        (
            Event::to_endpoint("", b"x".to_vec()).into_request(),
            Code::InvalidArgument,
            "endpoint: must not be empty",
        ),
        (
            Event::to_endpoint("ghost", b"x".to_vec()).into_request(),
            Code::NotFound,
            "endpoint: no endpoint named \"ghost\"",
        ),
        (
            Event::to_url("not-a-url", b"x".to_vec()).into_request(),
            Code::InvalidArgument,
            "url: malformed URL",
        ),
        (
            Event::to_url("ftp://example.com/x", b"x".to_vec()).into_request(),
            Code::InvalidArgument,
            "url: scheme",
        ),
        (
            Event::to_queue("q", vec![0u8; (1 << 20) + 1]).into_request(),
            Code::InvalidArgument,
            "payload: 1048577 bytes is over the limit",
        ),
        (
            Event::to_queue("q", b"x".to_vec())
                .idempotency_key("k".repeat(257))
                .into_request(),
            Code::InvalidArgument,
            "idempotency_key:",
        ),
        (
            Event::to_queue("q", b"x".to_vec())
                .header("bad name", "v")
                .into_request(),
            Code::InvalidArgument,
            "headers[\"bad name\"]",
        ),
        (
            Event::to_queue("q", b"x".to_vec())
                .max_attempts(1_000)
                .into_request(),
            Code::InvalidArgument,
            "max_attempts:",
        ),
        (
            Event::to_queue("q", b"x".to_vec())
                .event_type("order\ncreated")
                .into_request(),
            Code::InvalidArgument,
            "event_type: character",
        ),
    ];
    for (request, want, text) in cases {
        let err = c.raw().enqueue(request).await.unwrap_err();
        assert_eq!(err.code(), want, "{}", err.message());
        assert!(
            err.message().contains(text),
            "{:?} does not contain {text:?}",
            err.message()
        );
    }
    // A payload at exactly the limit is fine.
    c.enqueue(Event::to_queue("q", vec![7u8; 1 << 20]))
        .await
        .unwrap();
    let got = c
        .receive("q", 1, Duration::from_secs(5), None)
        .await
        .unwrap();
    assert_eq!(got[0].payload.len(), 1 << 20);
    c.ack([got[0].lease_id.clone()]).await.unwrap();
    assert_nothing_stored(&mut c).await;
    server.stop().await;
}

#[tokio::test]
async fn batch_over_the_limit_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let events = (0..1_001).map(|i| Event::to_queue("q", vec![i as u8]));
    let err = c.enqueue_batch(events).await.unwrap_err();
    assert_eq!(code(&err), Code::InvalidArgument);
    assert!(
        message(&err).starts_with("events: 1001 events is over the limit of 1000"),
        "{}",
        message(&err)
    );
    assert_nothing_stored(&mut c).await;
    server.stop().await;
}

#[tokio::test]
async fn ack_and_nack_of_unknown_or_expired_leases() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;

    let err = c.ack(Vec::<String>::new()).await.unwrap_err();
    assert_eq!(code(&err), Code::InvalidArgument);
    assert!(message(&err).starts_with("lease_ids:"));
    let err = c.ack(["garbage".to_owned()]).await.unwrap_err();
    assert_eq!(code(&err), Code::InvalidArgument);
    assert!(message(&err).starts_with("lease_ids[0]:"));
    let unknown = format!("{}.1", uuid::Uuid::now_v7());
    let err = c.ack([unknown.clone()]).await.unwrap_err();
    assert_eq!(code(&err), Code::NotFound);
    assert!(message(&err).starts_with("lease_ids[0]:"));
    let err = c.nack(unknown, None, "").await.unwrap_err();
    assert_eq!(code(&err), Code::NotFound);
    assert!(message(&err).starts_with("lease_id:"));

    // All-or-nothing: one expired lease in the list and nothing is acknowledged.
    c.enqueue(Event::to_queue("a", b"1".to_vec()))
        .await
        .unwrap();
    c.enqueue(Event::to_queue("a", b"2".to_vec()))
        .await
        .unwrap();
    let m1 = c
        .receive("a", 1, Duration::from_millis(100), None)
        .await
        .unwrap()
        .remove(0);
    let m2 = c
        .receive("a", 1, Duration::from_secs(60), None)
        .await
        .unwrap()
        .remove(0);
    server.advance(100).await;
    let err = c
        .ack([m2.lease_id.clone(), m1.lease_id.clone()])
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::FailedPrecondition);
    assert!(
        message(&err).starts_with("lease_ids[1]:"),
        "{}",
        message(&err)
    );
    assert_eq!(
        c.stats_by_destination().await.unwrap()["queue:a"].in_flight,
        1,
        "m2 still leased"
    );
    assert_eq!(c.ack([m2.lease_id.clone()]).await.unwrap(), 1);
    // A retried Ack (its first answer lost) is answered as acknowledged again, alone or
    // with others, and after a restart too.
    assert_eq!(
        c.ack([m2.lease_id.clone()]).await.unwrap(),
        1,
        "acking twice"
    );
    server.advance(100).await; // m1's retry (backoff at most 100 ms) is due
    let m3 = c
        .receive("a", 1, Duration::from_secs(60), None)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(m3.id, m1.id, "m1's lease expired, so it comes again");
    assert_eq!(
        c.ack([m2.lease_id.clone(), m3.lease_id.clone()])
            .await
            .unwrap(),
        2
    );
    // m1's first lease expired before m1 was acknowledged at attempt 2: still refused,
    // so a consumer can tell "someone else finished it" from "my Ack went through".
    let err = c.ack([m1.lease_id.clone()]).await.unwrap_err();
    assert_eq!(code(&err), Code::FailedPrecondition, "{}", message(&err));
    assert!(
        message(&err).contains("completed at attempt 2"),
        "{}",
        message(&err)
    );
    let server = server.restart().await;
    let mut c = server.client().await;
    assert_eq!(c.ack([m2.lease_id, m3.lease_id]).await.unwrap(), 2);
    server.stop().await;
}

#[tokio::test]
async fn receive_and_admin_calls_validate_their_fields() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let bad_receive = [
        (
            pb::ReceiveRequest {
                queue: String::new(),
                ..Default::default()
            },
            "queue:",
        ),
        (
            pb::ReceiveRequest {
                queue: "q".into(),
                max_messages: 5_000,
                ..Default::default()
            },
            "max_messages:",
        ),
        (
            pb::ReceiveRequest {
                queue: "q".into(),
                visibility_timeout_ms: 13 * 3600 * 1000,
                ..Default::default()
            },
            "visibility_timeout_ms:",
        ),
        (
            pb::ReceiveRequest {
                queue: "q".into(),
                wait_ms: 61_000,
                ..Default::default()
            },
            "wait_ms:",
        ),
    ];
    for (request, field) in bad_receive {
        let err = c.raw().receive(request).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().starts_with(field), "{}", err.message());
    }
    let err = c.get_message("nope").await.unwrap_err();
    assert_eq!(code(&err), Code::InvalidArgument);
    assert!(message(&err).starts_with("id:"));
    let err = c
        .get_message(uuid::Uuid::now_v7().to_string())
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::NotFound);

    let err = c
        .put_endpoint(pb::Endpoint {
            name: "e".into(),
            url: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::InvalidArgument);
    assert!(
        message(&err).starts_with("endpoint.url:"),
        "{}",
        message(&err)
    );
    let err = c.list_dead_letters(None, 5_000, "").await.unwrap_err();
    assert!(message(&err).starts_with("page_size:"));
    let err = c.list_dead_letters(None, 10, "xyz").await.unwrap_err();
    assert!(message(&err).starts_with("page_token:"));
    let err = c
        .raw()
        .replay_dead_letters(pb::ReplayDeadLettersRequest::default())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = c
        .replay([uuid::Uuid::now_v7().to_string()])
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::NotFound);
    assert!(message(&err).starts_with("ids[0]:"));
    assert_nothing_stored(&mut c).await;
    server.stop().await;
}
