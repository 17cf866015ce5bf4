//! Graceful restart with pending, delayed, retrying and leased messages.

use std::time::Duration;

use hookd_client::Event;
use tonic::Code;

use crate::harness::{TestServer, code};

#[tokio::test]
async fn restart_keeps_pending_delayed_and_leased_messages() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    for i in 0..5u8 {
        c.enqueue(Event::to_queue("s", vec![i])).await.unwrap();
    }
    c.enqueue(Event::to_queue("s", b"delayed".to_vec()).delay(Duration::from_secs(60)))
        .await
        .unwrap();
    let leased = c
        .receive("s", 2, Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(leased.len(), 2);
    let retrying = c
        .receive("s", 1, Duration::from_secs(30), None)
        .await
        .unwrap()
        .remove(0);
    let nack = c
        .nack(
            retrying.lease_id.clone(),
            Some(Duration::from_secs(10)),
            "later",
        )
        .await
        .unwrap();

    let server = server.restart().await;
    let mut c = server.client().await;
    let stats = c.stats_by_destination().await.unwrap();
    let s = &stats["queue:s"];
    assert_eq!(
        (s.pending, s.in_flight, s.awaiting_retry),
        (3, 2, 1),
        "{s:?}"
    );

    // The two ready ones come out; the delayed one and the retry wait for their time.
    let ready = c
        .receive("s", 10, Duration::from_secs(120), None)
        .await
        .unwrap();
    assert_eq!(ready.len(), 2);

    // A lease taken before the restart can still be acknowledged before its deadline...
    assert_eq!(c.ack([leased[0].lease_id.clone()]).await.unwrap(), 1);
    // ...and one left alone comes back once it expires.
    server.advance(30_000).await;
    let stats = c.stats_by_destination().await.unwrap();
    assert_eq!(stats["queue:s"].in_flight, 2, "the 2 leased after restart");
    server.advance(3_000).await;
    let again = c
        .receive("s", 10, Duration::from_secs(30), None)
        .await
        .unwrap();
    let ids: Vec<_> = again.iter().map(|m| m.id.clone()).collect();
    assert!(
        ids.contains(&leased[1].id),
        "expired lease redelivered: {ids:?}"
    );
    assert!(
        ids.contains(&retrying.id),
        "retry due at {}",
        nack.next_attempt_unix_ms
    );
    let stale = c.ack([leased[1].lease_id.clone()]).await.unwrap_err();
    assert_eq!(code(&stale), Code::FailedPrecondition);

    server.advance(60_000).await;
    let delayed = c
        .receive("s", 10, Duration::from_secs(30), None)
        .await
        .unwrap();
    assert!(delayed.iter().any(|m| m.payload == b"delayed"));
    server.stop().await;
}
