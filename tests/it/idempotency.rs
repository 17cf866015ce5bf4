//! Idempotency keys: a duplicate within the window returns the original id, also after a
//! restart; keys are scoped per destination and expire after the retention.

use hookd_client::Event;

use crate::harness::TestServer;

#[tokio::test]
async fn duplicate_returns_original_also_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let first = c
        .enqueue(Event::to_queue("i", b"a".to_vec()).idempotency_key("order-1"))
        .await
        .unwrap();
    let again = c
        .enqueue(Event::to_queue("i", b"a".to_vec()).idempotency_key("order-1"))
        .await
        .unwrap();
    assert!(!first.duplicate);
    assert!(again.duplicate);
    assert_eq!(again.id, first.id);
    // Same key, other destination: a different event.
    let other = c
        .enqueue(Event::to_queue("i2", b"a".to_vec()).idempotency_key("order-1"))
        .await
        .unwrap();
    assert!(!other.duplicate);

    // Two URLs of one origin are two destinations: the same key does not collide.
    let u1 = c
        .enqueue(Event::to_url("https://example.com/a", b"x".to_vec()).idempotency_key("k"))
        .await
        .unwrap();
    let u2 = c
        .enqueue(Event::to_url("https://example.com/b", b"x".to_vec()).idempotency_key("k"))
        .await
        .unwrap();
    assert!(!u2.duplicate);
    assert_ne!(u1.id, u2.id);

    // Duplicates inside one batch (one commit) are caught too.
    let results = c
        .enqueue_batch([
            Event::to_queue("i", b"b".to_vec()).idempotency_key("order-2"),
            Event::to_queue("i", b"b".to_vec()).idempotency_key("order-2"),
        ])
        .await
        .unwrap();
    let ids: Vec<_> = results
        .iter()
        .map(|r| match &r.result {
            Some(hookd_client::pb::enqueue_result::Result::Ok(ok)) => (ok.id.clone(), ok.duplicate),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids[0].0, ids[1].0);
    assert_eq!((ids[0].1, ids[1].1), (false, true));

    let server = server.restart().await;
    let mut c = server.client().await;
    let after = c
        .enqueue(Event::to_queue("i", b"a".to_vec()).idempotency_key("order-1"))
        .await
        .unwrap();
    assert!(after.duplicate);
    assert_eq!(after.id, first.id);
    // Only the two originals are queued.
    let got = c
        .receive("i", 10, std::time::Duration::from_secs(5), None)
        .await
        .unwrap();
    assert_eq!(got.len(), 2);

    // After the retention (24 h by default) the key is forgotten, and swept.
    server.advance(24 * 3600 * 1000 + 1).await;
    let fresh = c
        .enqueue(Event::to_queue("i", b"a".to_vec()).idempotency_key("order-1"))
        .await
        .unwrap();
    assert!(!fresh.duplicate);
    assert_ne!(fresh.id, first.id);
    server.stop().await;
}
