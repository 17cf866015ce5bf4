//! Nack, lease expiry with backoff, max attempts -> dead letter -> replay.
//! Test config: base 100 ms, cap 1 s, 3 attempts; full jitter, so waiting the cap always
//! suffices and waiting nothing never does (unless the draw is 0, which tests tolerate).

use std::time::Duration;

use hookd_client::{Event, pb, queue};
use tonic::Code;

use crate::harness::{TestServer, code};

const VIS: Duration = Duration::from_secs(10);

#[tokio::test]
async fn nack_retries_after_backoff_then_dead_letters_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let sent = c
        .enqueue(Event::to_queue("r", b"p".to_vec()))
        .await
        .unwrap();

    for attempt in 1..=3u32 {
        let got = c.receive("r", 1, VIS, None).await.unwrap();
        assert_eq!(got.len(), 1, "attempt {attempt}");
        assert_eq!(got[0].attempt, attempt);
        let nack = c
            .nack(got[0].lease_id.clone(), None, format!("boom {attempt}"))
            .await
            .unwrap();
        if attempt < 3 {
            assert!(!nack.dead_lettered);
            let view = c.get_message(&sent.id).await.unwrap();
            assert_eq!(view.attempts, attempt);
            assert_eq!(view.last_error, format!("boom {attempt}"));
            // Full jitter within min(cap, base * 2^(n-1)).
            let ceiling = (100u64 << (attempt - 1)).min(1_000);
            let delay = nack.next_attempt_unix_ms - server.clock_now();
            assert!(delay <= ceiling, "delay {delay} over ceiling {ceiling}");
            server.advance(ceiling).await;
        } else {
            assert!(nack.dead_lettered);
        }
    }
    assert!(c.receive("r", 1, VIS, None).await.unwrap().is_empty());
    let view = c.get_message(&sent.id).await.unwrap();
    assert_eq!(view.state, pb::MessageState::DeadLetter as i32);
    assert_eq!(view.history.len(), 3);
    assert!(view.history.iter().all(|a| a.outcome == "nacked"));

    let dl = c.list_dead_letters(Some(queue("r")), 10, "").await.unwrap();
    assert_eq!(dl.dead_letters.len(), 1);
    assert_eq!(dl.dead_letters[0].id, sent.id);
    assert_eq!(dl.dead_letters[0].last_error, "boom 3");
    assert_eq!(
        c.stats_by_destination().await.unwrap()["queue:r"].dead_letter,
        1
    );

    assert_eq!(c.replay([sent.id.clone()]).await.unwrap(), 1);
    let got = c.receive("r", 1, VIS, None).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].attempt, 1, "replay gives a fresh attempt budget");
    assert!(
        c.list_dead_letters(None, 10, "")
            .await
            .unwrap()
            .dead_letters
            .is_empty()
    );
    // Replaying something that is not a dead letter changes nothing.
    let err = c.replay([sent.id.clone()]).await.unwrap_err();
    assert_eq!(code(&err), Code::FailedPrecondition);
    c.ack([got[0].lease_id.clone()]).await.unwrap();
    server.stop().await;
}

#[tokio::test]
async fn expired_lease_is_retried_with_backoff_and_its_ack_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.enqueue(Event::to_queue("l", b"p".to_vec()))
        .await
        .unwrap();
    let first = c
        .receive("l", 1, Duration::from_millis(500), None)
        .await
        .unwrap()
        .remove(0);

    server.advance(499).await;
    assert!(
        c.receive("l", 1, VIS, None).await.unwrap().is_empty(),
        "lease still held"
    );
    server.advance(1).await;
    let stats = c.stats_by_destination().await.unwrap();
    // Expired: either waiting for its retry, or (jitter drew 0) ready again.
    assert_eq!(stats["queue:l"].in_flight, 0);
    assert_eq!(
        stats["queue:l"].awaiting_retry + stats["queue:l"].pending,
        1
    );
    server.advance(100).await; // the first retry's ceiling
    let second = c.receive("l", 1, VIS, None).await.unwrap().remove(0);
    assert_eq!(second.attempt, 2);

    let err = c.ack([first.lease_id.clone()]).await.unwrap_err();
    assert_eq!(code(&err), Code::FailedPrecondition);
    assert_eq!(c.ack([second.lease_id.clone()]).await.unwrap(), 1);
    // Completed: the payload is gone, the attempts are kept for completed_retention_secs.
    let view = c.get_message(&second.id).await.unwrap();
    assert_eq!(view.state, pb::MessageState::Delivered as i32);
    assert_eq!(view.completed_unix_ms, server.clock_now());
    let outcomes: Vec<&str> = view.history.iter().map(|a| a.outcome.as_str()).collect();
    assert_eq!(outcomes, ["lease_expired", "acked"]);
    assert_eq!(view.history[1].number, 2);
    assert_eq!(view.payload_size, first.payload.len() as u64);
    // ...and forgotten after it (24 h by default).
    server.advance(24 * 3600 * 1000).await;
    let err = c.get_message(&second.id).await.unwrap_err();
    assert_eq!(code(&err), Code::NotFound);
    server.stop().await;
}

#[tokio::test]
async fn lease_expiry_on_last_attempt_dead_letters_with_reason() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let sent = c
        .enqueue(Event::to_queue("x", b"p".to_vec()).max_attempts(1))
        .await
        .unwrap();
    c.receive("x", 1, Duration::from_millis(200), None)
        .await
        .unwrap();
    server.advance(200).await;
    let dl = c.list_dead_letters(Some(queue("x")), 10, "").await.unwrap();
    assert_eq!(dl.dead_letters.len(), 1);
    assert_eq!(dl.dead_letters[0].id, sent.id);
    assert!(dl.dead_letters[0].last_error.contains("visibility timeout"));
    server.stop().await;
}

#[tokio::test]
async fn nack_with_explicit_delay_and_replay_by_destination() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    for i in 0..3 {
        c.enqueue(Event::to_queue("n", vec![i]).max_attempts(1))
            .await
            .unwrap();
    }
    let got = c.receive("n", 3, VIS, None).await.unwrap();
    assert_eq!(got.len(), 3);
    for m in &got {
        assert!(
            c.nack(m.lease_id.clone(), Some(Duration::from_secs(5)), "")
                .await
                .unwrap()
                .dead_lettered
        );
    }
    // Paging through the dead letters, 2 per page.
    let p1 = c.list_dead_letters(None, 2, "").await.unwrap();
    assert_eq!(p1.dead_letters.len(), 2);
    assert!(!p1.next_page_token.is_empty());
    let p2 = c
        .list_dead_letters(None, 2, p1.next_page_token)
        .await
        .unwrap();
    assert_eq!(p2.dead_letters.len(), 1);
    assert!(p2.next_page_token.is_empty());

    let replayed = c
        .raw()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            destination: Some(queue("n")),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .replayed;
    assert_eq!(replayed, 3);
    // Paced at the default dead_letters.replay_rate_per_s (100/s): due 10 ms apart.
    assert_eq!(c.receive("n", 10, VIS, None).await.unwrap().len(), 1);
    server.advance(20).await;
    assert_eq!(c.receive("n", 10, VIS, None).await.unwrap().len(), 2);

    // An explicit Nack delay is honoured exactly.
    c.enqueue(Event::to_queue("n2", b"p".to_vec()))
        .await
        .unwrap();
    let m = c.receive("n2", 1, VIS, None).await.unwrap().remove(0);
    c.nack(m.lease_id, Some(Duration::from_secs(5)), "later")
        .await
        .unwrap();
    server.advance(4_999).await;
    assert!(c.receive("n2", 1, VIS, None).await.unwrap().is_empty());
    server.advance(1).await;
    assert_eq!(c.receive("n2", 1, VIS, None).await.unwrap().len(), 1);
    server.stop().await;
}

#[tokio::test]
async fn a_message_can_carry_its_own_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    // The server default ceiling after the first failure is 100 ms; these events say 50.
    // Under the default, ten draws would all land at or below 50 with probability 2^-10.
    let events = (0..10u8).map(|i| {
        Event::to_queue("own", vec![i])
            .retry_backoff(Duration::from_millis(50), Duration::from_millis(50))
    });
    c.enqueue_batch(events).await.unwrap();
    let got = c.receive("own", 10, VIS, None).await.unwrap();
    assert_eq!(got.len(), 10);
    for m in got {
        let nack = c.nack(m.lease_id, None, "again").await.unwrap();
        let delay = nack.next_attempt_unix_ms - server.clock_now();
        assert!(
            delay <= 50,
            "delay {delay} over the message's own cap of 50 ms"
        );
    }
    let err = c
        .enqueue(
            Event::to_queue("own", b"x".to_vec())
                .retry_backoff(Duration::from_millis(500), Duration::from_millis(100)),
        )
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::InvalidArgument);
    assert!(crate::harness::message(&err).starts_with("retry_cap_ms:"));
    server.stop().await;
}
