//! Enqueue to a pull queue, then Receive / Ack; batches; long polls.

use std::time::Duration;

use hookd_client::{Event, pb};

use crate::harness::{TestServer, eventually};

const VIS: Duration = Duration::from_secs(30);

#[tokio::test]
async fn enqueue_receive_ack() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;

    let sent = c
        .enqueue(
            Event::to_queue("jobs", b"hello".to_vec())
                .event_type("greeting")
                .header("x-trace", "abc"),
        )
        .await
        .unwrap();
    assert!(!sent.duplicate);

    let got = c.receive("jobs", 10, VIS, None).await.unwrap();
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(m.id, sent.id);
    assert_eq!(m.payload, b"hello");
    assert_eq!(m.event_type, "greeting");
    assert_eq!(m.headers.get("x-trace").map(String::as_str), Some("abc"));
    assert_eq!(m.attempt, 1);
    assert!(!m.idempotency_key.is_empty(), "the client generates a key");

    // Leased: nobody else gets it.
    assert!(c.receive("jobs", 10, VIS, None).await.unwrap().is_empty());
    let view = c.get_message(&sent.id).await.unwrap();
    assert_eq!(view.state, pb::MessageState::InFlight as i32);

    assert_eq!(c.ack([m.lease_id.clone()]).await.unwrap(), 1);
    let stats = c.stats_by_destination().await.unwrap();
    let q = &stats["queue:jobs"];
    assert_eq!((q.pending, q.in_flight, q.awaiting_retry), (0, 0, 0));
    assert_eq!(q.delivered_last_hour, 1);
    assert_eq!(q.latency_last_hour.as_ref().unwrap().count, 1);

    // Polling a queue nobody has used answers empty and creates nothing.
    assert!(c.receive("ghost", 10, VIS, None).await.unwrap().is_empty());
    assert!(
        !c.stats_by_destination()
            .await
            .unwrap()
            .contains_key("queue:ghost")
    );
    server.stop().await;
}

#[tokio::test]
async fn batch_results_in_order_and_bad_event_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;

    let events = vec![
        Event::to_queue("b", b"0".to_vec()),
        Event::to_queue("", b"1".to_vec()),
        Event::to_endpoint("nope", b"2".to_vec()),
        Event::to_queue("b", b"3".to_vec()),
    ];
    let results = c.enqueue_batch(events).await.unwrap();
    assert_eq!(results.len(), 4);
    let ok = |i: usize| matches!(results[i].result, Some(pb::enqueue_result::Result::Ok(_)));
    assert!(ok(0) && ok(3));
    match &results[1].result {
        Some(pb::enqueue_result::Result::Error(e)) => {
            assert_eq!(e.code, tonic::Code::InvalidArgument as i32);
            assert!(e.message.starts_with("events[1].queue"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    match &results[2].result {
        Some(pb::enqueue_result::Result::Error(e)) => {
            assert_eq!(e.code, tonic::Code::NotFound as i32);
            assert!(e.message.contains("events[2].endpoint"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    let got = c.receive("b", 10, VIS, None).await.unwrap();
    let payloads: Vec<_> = got.iter().map(|m| m.payload.clone()).collect();
    assert_eq!(
        payloads,
        vec![b"0".to_vec(), b"3".to_vec()],
        "FIFO, and only the good ones"
    );
    server.stop().await;
}

#[tokio::test]
async fn long_poll_wakes_on_enqueue_and_times_out_empty() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;

    let mut waiter = server.client().await;
    let poll = tokio::spawn(async move {
        waiter
            .receive("lp", 5, VIS, Some(Duration::from_secs(20)))
            .await
    });
    // The event is sent once the Receive is waiting in the engine, so the wake path is
    // what is tested (not a Receive that found the event already there).
    waiting_receives(&mut c, 1).await;
    let sent = c
        .enqueue(Event::to_queue("lp", b"x".to_vec()))
        .await
        .unwrap();
    let got = poll.await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, sent.id);
    waiting_receives(&mut c, 0).await;

    let mut waiter = server.client().await;
    let poll = tokio::spawn(async move {
        waiter
            .receive("lp", 5, VIS, Some(Duration::from_secs(5)))
            .await
    });
    waiting_receives(&mut c, 1).await;
    assert!(!poll.is_finished(), "waits while nothing is ready");
    // Its wait ends in the round that sees the injected clock pass it.
    server.advance(4_999).await;
    assert_eq!(stats_of(&mut c).await.waiting_receives, 1);
    server.advance(1).await;
    assert!(poll.await.unwrap().unwrap().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn delayed_message_is_not_ready_before_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.enqueue(Event::to_queue("d", b"later".to_vec()).delay(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(c.receive("d", 1, VIS, None).await.unwrap().is_empty());
    assert_eq!(
        c.stats_by_destination().await.unwrap()["queue:d"].pending,
        1
    );
    server.advance(59_999).await;
    assert!(c.receive("d", 1, VIS, None).await.unwrap().is_empty());
    server.advance(1).await;
    assert_eq!(c.receive("d", 1, VIS, None).await.unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn receive_stays_within_a_default_client_message_size() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    // Six 1 MiB payloads: more than a 4 MiB gRPC message holds.
    c.enqueue_batch((0..6u8).map(|i| Event::to_queue("big", vec![i; 1 << 20])))
        .await
        .unwrap();
    let first = c.receive("big", 100, VIS, None).await.unwrap();
    assert_eq!(first.len(), 3, "3 MiB of payload per Receive");
    let rest = c.receive("big", 100, VIS, None).await.unwrap();
    assert_eq!(rest.len(), 3);
    // Order kept: the one that did not fit came first next time.
    assert_eq!(rest[0].payload[0], 3);
    server.stop().await;
}

async fn stats_of(c: &mut hookd_client::Client) -> pb::DestinationStats {
    c.stats_by_destination()
        .await
        .unwrap()
        .remove("queue:lp")
        .unwrap_or_default()
}

/// Waits (bounded) until `n` long polls of queue `lp` are waiting in the engine.
async fn waiting_receives(c: &mut hookd_client::Client, n: u64) {
    eventually(
        "long polls waiting",
        async || stats_of(c).await.waiting_receives,
        |&w| w == n,
    )
    .await;
}
