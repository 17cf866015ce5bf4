//! Every transition of a message's life, one round at a time, on the [`Harness`]: exact
//! assertions on what the store holds, what Stats says and what was sent, with the clock
//! moved by hand. Nothing here sleeps or opens a socket.

use super::harness::{Harness, START_MS, config};
use super::{Command, NewMessage, Refusal};
use hookd_core::breaker::BreakerState;
use hookd_core::destination::Destination;
use hookd_core::push::{RetryAfter, Verdict};
use hookd_core::scope::TenantId;
use hookd_storage::store::{EndpointRecord, MessageRecord, State};

fn failed(status: u16) -> Verdict {
    Verdict::Retry {
        status,
        outcome: hookd_core::outcome::AttemptOutcome::HttpError,
        error: format!("HTTP {status}"),
        retry_after: None,
    }
}

const OK: Verdict = Verdict::Delivered { status: 200 };

#[test]
fn enqueue_stores_a_pending_message_that_a_receive_leases() {
    let mut h = Harness::new();
    let id = h.enqueue("q", b"hello");
    let m = h.stored(id).expect("stored");
    assert_eq!(
        (m.entry.state, m.entry.due_ms, m.entry.attempts),
        (State::Pending, START_MS, 0)
    );
    assert_eq!(m.record.payload, b"hello");
    assert_eq!(h.dest("queue:q").pending, 1);

    let got = h.receive("q", 10, 30_000);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].id, got[0].attempt, got[0].lease.attempt),
        (id, 1, 1)
    );
    assert_eq!(got[0].lease_deadline_ms, START_MS + 30_000);
    let m = h.stored(id).expect("stored");
    assert_eq!(
        (
            m.entry.state,
            m.entry.due_ms,
            m.entry.attempts,
            m.entry.since_ms
        ),
        (State::Leased, START_MS + 30_000, 1, START_MS)
    );
    let q = h.dest("queue:q");
    assert_eq!((q.pending, q.in_flight), (0, 1));
    // Leased: nobody else gets it.
    assert!(h.receive("q", 10, 30_000).is_empty());
}

#[test]
fn a_delayed_message_becomes_ready_at_its_time_and_not_before() {
    let mut h = Harness::new();
    let mut m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"later");
    m.delay_ms = 500;
    let id = h.enqueue_message(m).expect("enqueued").id;
    assert_eq!(h.stored(id).map(|m| m.entry.due_ms), Some(START_MS + 500));
    h.advance(499);
    assert!(h.receive("q", 1, 1_000).is_empty());
    h.advance(1);
    assert_eq!(h.receive("q", 1, 1_000).len(), 1);
}

#[test]
fn ack_completes_keeping_the_attempts_not_the_payload() {
    let mut h = Harness::new();
    let id = h.enqueue("q", b"x");
    let lease = h.receive("q", 1, 30_000)[0].lease;
    h.advance(250);
    assert_eq!(h.ack(&[lease]), Ok(1));
    assert!(h.stored(id).is_none(), "record and schedule row removed");
    let done = h.done(id).expect("a done row");
    assert!(done.acked_at(1));
    assert_eq!((done.payload_size, done.completed_ms), (1, START_MS + 250));
    let q = h.dest("queue:q");
    assert_eq!((q.in_flight, q.delivered_last_hour), (0, 1));
    assert_eq!(q.latency_last_hour.count, 1);
    // Acked again (a retry whose answer was lost): the same answer.
    assert_eq!(h.ack(&[lease]), Ok(1));
    assert_eq!(h.dest("queue:q").delivered_last_hour, 1, "counted once");
}

#[test]
fn nack_retries_with_full_jitter_backoff_then_dead_letters() {
    let mut h = Harness::new();
    let id = h.enqueue("q", b"x");
    for attempt in 1..=3u32 {
        let got = h.receive("q", 1, 30_000);
        assert_eq!(got.len(), 1, "attempt {attempt} is ready");
        assert_eq!(got[0].attempt, attempt);
        let outcome = h.nack(got[0].lease, 0).expect("nacked");
        if attempt == 3 {
            assert_eq!(
                outcome.next_attempt_ms, None,
                "the last attempt dead-letters"
            );
            break;
        }
        let due = outcome.next_attempt_ms.expect("a retry");
        // uniform(0, min(cap, base * 2^(n-1))): 100 ms, then 200 ms.
        let ceiling = 100 << (attempt - 1);
        assert!(due - h.now() <= ceiling, "{} over {ceiling}", due - h.now());
        let m = h.stored(id).expect("stored");
        assert_eq!((m.entry.state, m.entry.due_ms), (State::Retry, due));
        let q = h.dest("queue:q");
        if due > h.now() {
            assert_eq!((q.awaiting_retry, q.in_flight), (1, 0));
            h.advance(due - h.now() - 1);
            assert!(h.receive("q", 1, 30_000).is_empty(), "not before its time");
            h.advance(1);
        }
    }
    let m = h.stored(id).expect("a dead letter keeps its record");
    assert_eq!((m.entry.state, m.entry.attempts), (State::Dead, 3));
    assert_eq!(h.outcomes(id), ["nacked", "nacked", "nacked"]);
    let q = h.dest("queue:q");
    assert_eq!((q.dead_letter, q.awaiting_retry, q.pending), (1, 0, 0));
    assert_eq!(q.failed_last_hour, 1);
}

#[test]
fn nack_with_a_delay_waits_exactly_that_long() {
    let mut h = Harness::new();
    h.enqueue("q", b"x");
    let lease = h.receive("q", 1, 30_000)[0].lease;
    let outcome = h.nack(lease, 5_000).expect("nacked");
    assert_eq!(outcome.next_attempt_ms, Some(START_MS + 5_000));
    h.advance(4_999);
    assert!(h.receive("q", 1, 30_000).is_empty());
    h.advance(1);
    assert_eq!(h.receive("q", 1, 30_000)[0].attempt, 2);
    // The old lease is no longer the message's.
    assert!(matches!(
        h.nack(lease, 0),
        Err(Refusal::LeaseExpired { current: 2, .. })
    ));
}

#[test]
fn an_expired_lease_is_retried_and_its_ack_refused() {
    let mut h = Harness::new();
    let id = h.enqueue("q", b"x");
    let lease = h.receive("q", 1, 1_000)[0].lease;
    h.advance(999);
    assert_eq!(h.state(id), Some(State::Leased));
    h.advance(1);
    assert_eq!(h.state(id), Some(State::Retry));
    assert_eq!(h.outcomes(id), ["lease_expired"]);
    assert_eq!(
        h.ack(&[lease]),
        Err(Refusal::LeaseExpired { lease, current: 1 }.at(0))
    );
    // Ack is all-or-nothing: a good lease beside an expired one is not acknowledged.
    let other = h.enqueue("q", b"y");
    let good = h
        .receive("q", 5, 30_000)
        .into_iter()
        .find(|m| m.id == other)
        .expect("leased")
        .lease;
    assert!(h.ack(&[good, lease]).is_err());
    assert_eq!(h.state(other), Some(State::Leased));
}

#[test]
fn a_lease_expiring_on_the_last_attempt_dead_letters() {
    let mut h = Harness::new();
    let mut m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"x");
    m.max_attempts = 1;
    let id = h.enqueue_message(m).expect("enqueued").id;
    h.receive("q", 1, 1_000);
    h.advance(1_000);
    assert_eq!(h.state(id), Some(State::Dead));
    assert_eq!(h.dest("queue:q").dead_letter, 1);
}

#[test]
fn replay_makes_dead_letters_pending_with_fresh_attempts() {
    let mut h = Harness::new();
    let mut m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"x");
    m.max_attempts = 1;
    let id = h.enqueue_message(m).expect("enqueued").id;
    let lease = h.receive("q", 1, 1_000)[0].lease;
    h.nack(lease, 0).expect("nacked");
    assert_eq!(h.state(id), Some(State::Dead));

    let live = h.enqueue("q", b"live");
    assert_eq!(
        h.replay(vec![live], None),
        Err(Refusal::NotDeadLetter { id: live }.at(0))
    );
    let unknown = hookd_core::ids::MessageId(7);
    assert_eq!(
        h.replay(vec![id, unknown], None),
        Err(Refusal::NoMessage { id: unknown }.at(1)),
        "all or nothing"
    );
    assert_eq!(h.state(id), Some(State::Dead));

    assert_eq!(h.replay(vec![id], None), Ok(1));
    let m = h.stored(id).expect("stored");
    assert_eq!((m.entry.state, m.entry.attempts), (State::Pending, 0));
    assert_eq!(h.outcomes(id), ["nacked", "replayed"]);
    let q = h.dest("queue:q");
    assert_eq!((q.dead_letter, q.pending), (0, 2));
    let again = h.receive("q", 5, 1_000);
    assert!(again.iter().any(|m| m.id == id && m.attempt == 1));
}

#[test]
fn replay_by_destination_takes_every_dead_letter_of_it() {
    let mut h = Harness::new();
    let ids: Vec<_> = (0..3)
        .map(|i| {
            let mut m = h.message(Destination::queue(TenantId::DEFAULT, "q"), &[i]);
            m.max_attempts = 1;
            h.enqueue_message(m).expect("enqueued").id
        })
        .collect();
    for m in h.receive("q", 10, 30_000) {
        h.nack(m.lease, 0).expect("nacked");
    }
    assert_eq!(h.dest("queue:q").dead_letter, 3);
    assert_eq!(
        h.replay(Vec::new(), Some(Destination::queue(TenantId::DEFAULT, "q"))),
        Ok(3)
    );
    assert!(ids.iter().all(|id| h.state(*id) == Some(State::Pending)));
    assert_eq!(
        h.replay(
            Vec::new(),
            Some(Destination::endpoint(TenantId::DEFAULT, "gone"))
        ),
        Err(Refusal::EndpointGone {
            name: "gone".into()
        })
    );
}

#[test]
fn idempotency_key_within_its_window_returns_the_original() {
    let mut h = Harness::new();
    let keyed = |h: &Harness, payload: &[u8]| {
        let now = h.now();
        let record = MessageRecord {
            payload: payload.to_vec(),
            idempotency_key: "k".into(),
            created_ms: now,
            ..Default::default()
        };
        NewMessage::from_record(
            hookd_core::ids::MessageId::generate(now),
            Destination::queue(TenantId::DEFAULT, "q"),
            record,
            0,
            0,
        )
    };
    let first = h.enqueue_message(keyed(&h, b"1")).expect("enqueued");
    assert!(!first.duplicate);
    h.advance(24 * 3_600_000 - 1);
    let again = h.enqueue_message(keyed(&h, b"2")).expect("enqueued");
    assert_eq!((again.id, again.duplicate), (first.id, true));
    assert_eq!(h.dest("queue:q").pending, 1, "stored once");
    // Scoped per destination: the same key elsewhere is another message.
    let mut elsewhere = keyed(&h, b"3");
    elsewhere = NewMessage::from_record(
        elsewhere.id,
        Destination::queue(TenantId::DEFAULT, "other"),
        MessageRecord {
            idempotency_key: "k".into(),
            ..Default::default()
        },
        0,
        0,
    );
    assert!(!h.enqueue_message(elsewhere).expect("enqueued").duplicate);
    // Past the window the key is free again.
    h.advance(2);
    let later = h.enqueue_message(keyed(&h, b"4")).expect("enqueued");
    assert!(!later.duplicate);
    assert_ne!(later.id, first.id);
}

#[test]
fn enqueue_to_an_unknown_endpoint_is_refused_and_stores_nothing() {
    let mut h = Harness::new();
    let m = h.message(Destination::endpoint(TenantId::DEFAULT, "ghost"), b"x");
    let id = m.id;
    assert_eq!(
        h.enqueue_message(m),
        Err(Refusal::UnknownEndpoint {
            name: "ghost".into()
        })
    );
    assert!(h.stored(id).is_none());
}

#[test]
fn a_long_poll_is_answered_by_the_enqueue_that_fills_it_or_empty_at_its_end() {
    let mut h = Harness::new();
    let mut waiting = h.receive_waiting("lp", 5_000);
    assert!(waiting.try_recv().is_err(), "nothing ready: it waits");
    // Counted in the total, whatever page of destinations is asked for.
    let stats = h
        .call(|reply| Command::Stats {
            tenant: None,
            after: None,
            limit: 0,
            whole: true,
            reply,
        })
        .expect("stats");
    assert_eq!(stats.total.waiting_receives, 1);
    let id = h.enqueue("lp", b"x");
    let got = waiting.try_recv().expect("answered in the enqueue's round");
    assert_eq!(got.expect("leased")[0].id, id);

    let mut waiting = h.receive_waiting("lp", 5_000);
    h.advance(4_999);
    assert!(waiting.try_recv().is_err());
    h.advance(1);
    assert_eq!(
        waiting.try_recv().expect("answered").map(|v| v.len()),
        Ok(0)
    );
}

#[test]
fn push_success_completes_the_message() {
    let mut h = Harness::new();
    h.endpoint("e", 4);
    let id = h.enqueue_to_endpoint("e", b"x");
    let sent = h.sent();
    assert_eq!(sent.len(), 1, "handed out after the commit that stored it");
    assert_eq!((sent[0].id, sent[0].attempt), (id, 1));
    assert_eq!(sent[0].url, "https://e.example/hook");
    assert_eq!(h.dest("endpoint:e").in_flight, 1);
    // In flight is memory only: the message is still pending on disk.
    assert_eq!(h.state(id), Some(State::Pending));
    h.report(&sent[0], OK);
    assert!(h.stored(id).is_none());
    assert_eq!(h.outcomes(id), ["delivered"]);
    let e = h.dest("endpoint:e");
    assert_eq!((e.in_flight, e.delivered_last_hour), (0, 1));
    let push = e.push.expect("a push destination");
    assert_eq!(
        (push.attempts_last_hour, push.success_rate_last_hour),
        (1, 1.0)
    );
}

#[test]
fn push_failure_is_retried_after_backoff_then_dead_lettered() {
    let mut h = Harness::new();
    h.endpoint("e", 4);
    let id = h.enqueue_to_endpoint("e", b"x");
    for attempt in 1..=3 {
        let sent = h.sent();
        assert_eq!(sent.len(), 1, "attempt {attempt}");
        assert_eq!(sent[0].attempt, attempt);
        h.report(&sent[0], failed(503));
        if attempt < 3 {
            let m = h.stored(id).expect("stored");
            assert_eq!((m.entry.state, m.entry.attempts), (State::Retry, attempt));
            let wait = m.entry.due_ms - h.now();
            assert!(wait <= 100 << (attempt - 1));
            if wait > 0 {
                h.advance(wait - 1);
                assert!(h.sent().is_empty(), "not before its retry time");
            }
            h.advance(1);
        }
    }
    assert_eq!(h.state(id), Some(State::Dead));
    assert_eq!(h.outcomes(id), ["http_error", "http_error", "http_error"]);
}

#[test]
fn a_permanent_answer_or_a_refused_address_dead_letters_at_once() {
    let mut h = Harness::new();
    h.endpoint("e", 4);
    let a = h.enqueue_to_endpoint("e", b"a");
    let b = h.enqueue_to_endpoint("e", b"b");
    let sent = h.sent();
    assert_eq!(sent.len(), 2);
    let (da, db) = if sent[0].id == a {
        (&sent[0], &sent[1])
    } else {
        (&sent[1], &sent[0])
    };
    assert_eq!(db.id, b);
    h.report(
        da,
        Verdict::Permanent {
            status: 400,
            error: "HTTP 400".into(),
        },
    );
    h.report(
        db,
        Verdict::Refused {
            error: "address refused".into(),
        },
    );
    assert_eq!(h.state(a), Some(State::Dead));
    assert_eq!(h.outcomes(a), ["rejected"]);
    assert_eq!(h.state(b), Some(State::Dead));
    assert_eq!(h.outcomes(b), ["refused"]);
    let push = h.dest("endpoint:e").push.expect("push");
    assert_eq!(push.breaker, BreakerState::Closed, "a 400 proves it is up");
}

#[test]
fn gone_disables_the_endpoint_until_it_is_put_again() {
    let mut h = Harness::new();
    h.endpoint("e", 4);
    let a = h.enqueue_to_endpoint("e", b"a");
    let sent = h.sent();
    h.report(
        &sent[0],
        Verdict::Permanent {
            status: 410,
            error: "HTTP 410".into(),
        },
    );
    assert_eq!(h.state(a), Some(State::Dead));
    let stored = h
        .engine
        .store
        .endpoint(TenantId::DEFAULT, "e")
        .expect("read")
        .expect("kept");
    assert!(stored.disabled && stored.disabled_reason.contains("410"));
    assert_eq!((stored.disabled_ms), h.now());
    let waiting = h.enqueue_to_endpoint("e", b"b");
    assert!(h.sent().is_empty(), "a disabled endpoint gets nothing");
    assert_eq!(
        h.state(waiting),
        Some(State::Pending),
        "but nothing is dropped"
    );
    h.endpoint("e", 4);
    let sent = h.sent();
    assert_eq!(sent.iter().map(|d| d.id).collect::<Vec<_>>(), [waiting]);
}

#[test]
fn an_attempt_never_reported_is_given_up_at_its_deadline() {
    let mut h = Harness::new();
    h.put_endpoint(EndpointRecord {
        name: "e".into(),
        url: "https://e.example/".into(),
        timeout_ms: 1_000,
        ..Default::default()
    });
    let id = h.enqueue_to_endpoint("e", b"x");
    let lost = h.sent();
    assert_eq!(lost.len(), 1);
    // The attempt's timeout plus 30 s of grace.
    h.advance(30_999);
    assert_eq!(h.dest("endpoint:e").in_flight, 1);
    h.advance(1);
    assert_eq!(h.outcomes(id), ["delivery_lost"]);
    assert_eq!(h.state(id), Some(State::Retry));
    // Its late report changes nothing.
    h.report(&lost[0], OK);
    assert_eq!(h.state(id), Some(State::Retry));
}

#[test]
fn an_open_breaker_sends_nothing_then_exactly_one_probe() {
    let mut h = Harness::new();
    h.endpoint("e", 10);
    for i in 0..5u8 {
        h.enqueue_to_endpoint("e", &[i]);
    }
    let first = h.sent();
    assert_eq!(first.len(), 5);
    for d in &first[..3] {
        h.report(d, failed(500));
    }
    let push = h.dest("endpoint:e").push.expect("push");
    let BreakerState::Open { until_ms } = push.breaker else {
        panic!("3 failures open it: {:?}", push.breaker);
    };
    assert_eq!(until_ms, h.now() + 10_000);
    // The two still out come back; retries come due; nothing goes while open.
    for d in &first[3..] {
        h.report(d, failed(500));
    }
    h.advance(9_999);
    assert!(h.sent().is_empty(), "nothing while open");
    h.advance(1);
    let probe = h.sent();
    assert_eq!(probe.len(), 1, "exactly one probe, with 5 messages ready");
    h.advance(5_000);
    assert!(h.sent().is_empty(), "nothing else while the probe is out");
    h.report(&probe[0], failed(500));
    let push = h.dest("endpoint:e").push.expect("push");
    assert_eq!(
        push.breaker_cooldown_ms, 20_000,
        "a failed probe doubles it"
    );
    h.advance(20_000);
    let probe = h.sent();
    assert_eq!(probe.len(), 1);
    h.report(&probe[0], OK);
    assert_eq!(
        h.dest("endpoint:e").push.map(|p| p.breaker),
        Some(BreakerState::Closed)
    );
    assert_eq!(h.sent().len(), 4, "closed: the rest go at once");
}

#[test]
fn retry_after_holds_the_endpoint_until_then() {
    let mut h = Harness::new();
    h.endpoint("e", 4);
    let a = h.enqueue_to_endpoint("e", b"a");
    let sent = h.sent();
    h.report(
        &sent[0],
        Verdict::Retry {
            status: 429,
            outcome: hookd_core::outcome::AttemptOutcome::HttpError,
            error: "HTTP 429".into(),
            retry_after: Some(RetryAfter::Seconds(30)),
        },
    );
    let b = h.enqueue_to_endpoint("e", b"b");
    h.advance(29_999);
    assert!(
        h.sent().is_empty(),
        "paused: neither the retry nor the new one"
    );
    h.advance(1);
    let mut ids: Vec<_> = h.sent().into_iter().map(|d| d.id).collect();
    ids.sort();
    let mut want = vec![a, b];
    want.sort();
    assert_eq!(ids, want);
}

#[test]
fn a_failed_commit_answers_unavailable_and_sends_nothing() {
    let mut h = Harness::new();
    h.endpoint("e", 4);
    let mut health = h.engine.health.serving.subscribe();
    h.faults.fail_syncs(true);
    let m = h.message(Destination::endpoint(TenantId::DEFAULT, "e"), b"x");
    let id = m.id;
    assert!(matches!(h.enqueue_message(m), Err(Refusal::Unavailable(_))));
    assert!(
        h.sent().is_empty(),
        "never POST an event that is not durable"
    );
    assert!(!*health.borrow_and_update(), "health is pushed at once");
    // Even with the disk back, this process writes no more (redb needs a reopen).
    h.faults.fail_syncs(false);
    let again = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"y");
    assert!(matches!(
        h.enqueue_message(again),
        Err(Refusal::Unavailable(_))
    ));
    // The refused event's round was applied to redb, but no read shows it: a read waits
    // for the log to hold what it would see, and the log has failed.
    let read = h.engine.store.message(id).map(|m| m.is_some());
    assert!(read.is_err(), "{read:?}");
}

#[test]
fn a_round_that_writes_nothing_commits_nothing() {
    let mut h = Harness::new();
    h.enqueue("q", b"x");
    let before = h.stats().storage.commits_per_s;
    // Stats, an empty receive of an unknown queue, a clock tick: reads only.
    h.receive("nobody", 1, 1_000);
    h.advance(1);
    let after = h.stats().storage.commits_per_s;
    assert_eq!(before, after);
}

#[test]
fn the_log_grows_with_writes_and_a_checkpoint_is_due_by_time() {
    let mut h = Harness::new();
    let interval = h.engine.config.checkpoint_interval_ms;
    h.enqueue("q", b"first");
    let s = h.stats().storage;
    assert!(s.log_bytes > 0, "{s:?}");
    assert!(s.log_since_checkpoint_bytes > 0, "{s:?}");
    let logged = s.log_since_checkpoint_bytes;
    h.enqueue("q", b"second");
    assert!(h.stats().storage.log_since_checkpoint_bytes > logged);
    // Once the interval has passed, the next applied round checkpoints: nothing waits to
    // be replayed, and the checkpoint's age starts again.
    h.clock.advance(interval);
    h.enqueue("q", b"third");
    let s = h.stats().storage;
    assert_eq!(s.log_since_checkpoint_bytes, 0, "{s:?}");
    assert_eq!(s.checkpoint_age_ms, 0, "{s:?}");
    // The file records the log position it holds: every record so far.
    assert!(h.engine.store.applied().unwrap() >= logged);
}

#[test]
fn config_used_by_the_harness_is_what_the_tests_assume() {
    let c = config();
    assert_eq!((c.retry.max_attempts, c.retry.base_ms), (3, 100));
    assert_eq!(c.push.breaker.failure_threshold, 3);
}

mod counts {
    //! The index's per-destination counters are kept up to date on every transition (so
    //! Stats never scans messages); here they are checked against a recount of every live
    //! message after each step of random work.

    use proptest::prelude::*;

    use super::super::harness::Harness;
    use super::super::index::LiveState;
    use hookd_core::ids::LeaseId;

    #[derive(Debug, Clone)]
    enum Op {
        Enqueue {
            queue: u8,
            delay_ms: u64,
        },
        Receive {
            queue: u8,
            max: usize,
            visibility_ms: u64,
        },
        Ack {
            nth: usize,
        },
        Nack {
            nth: usize,
            delay_ms: u64,
        },
        Advance {
            ms: u64,
        },
        LongPoll {
            queue: u8,
            wait_ms: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3u8, prop_oneof![Just(0u64), 1..500u64])
                .prop_map(|(queue, delay_ms)| Op::Enqueue { queue, delay_ms }),
            (0..3u8, 1..4usize, 1..2_000u64).prop_map(|(queue, max, visibility_ms)| {
                Op::Receive {
                    queue,
                    max,
                    visibility_ms,
                }
            }),
            (0..8usize).prop_map(|nth| Op::Ack { nth }),
            (0..8usize, prop_oneof![Just(0u64), 1..300u64])
                .prop_map(|(nth, delay_ms)| Op::Nack { nth, delay_ms }),
            (1..1_500u64).prop_map(|ms| Op::Advance { ms }),
            (0..3u8, 1..1_000u64).prop_map(|(queue, wait_ms)| Op::LongPoll { queue, wait_ms }),
        ]
    }

    fn check(h: &Harness) -> Result<(), TestCaseError> {
        let index = &h.engine.index;
        for (d, dest) in index.dests.iter() {
            let (mut pending, mut retry, mut in_flight, mut live) = (0, 0, 0, 0);
            for f in dest.fresh.iter() {
                live += 1;
                pending += 1;
                prop_assert!(
                    !index.live.contains_key(&f.id()),
                    "{} is fresh and in live",
                    f.id()
                );
            }
            for (id, l) in index.live.iter().filter(|(_, l)| l.dest == d) {
                live += 1;
                match l.state {
                    LiveState::Scheduled if l.attempts > 0 => retry += 1,
                    LiveState::Scheduled | LiveState::Ready | LiveState::Queued => pending += 1,
                    LiveState::Leased => in_flight += 1,
                }
                if l.state == LiveState::Ready {
                    prop_assert!(dest.ready.contains(id), "{id} is ready but not queued");
                }
            }
            prop_assert_eq!(
                (
                    dest.counts.pending,
                    dest.counts.awaiting_retry,
                    dest.counts.in_flight
                ),
                (pending, retry, in_flight),
                "{}",
                dest.key
            );
            prop_assert_eq!(dest.live_ids.len() + dest.fresh.len(), live, "{}", dest.key);
        }
        let waiters: usize = index.dests.iter().map(|(_, d)| d.waiters.len()).sum();
        prop_assert_eq!(index.waiting(), waiters as u64);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn counters_always_equal_a_recount(ops in proptest::collection::vec(op(), 1..40)) {
            let mut h = Harness::new();
            let mut leases: Vec<LeaseId> = Vec::new();
            let mut polls = Vec::new();
            for op in ops {
                match op {
                    Op::Enqueue { queue, delay_ms } => {
                        let mut m = h.message(
                            hookd_core::destination::Destination::queue(hookd_core::scope::TenantId::DEFAULT, format!("q{queue}")),
                            b"x",
                        );
                        m.delay_ms = delay_ms;
                        h.enqueue_message(m).expect("enqueued");
                    }
                    Op::Receive { queue, max, visibility_ms } => {
                        let got = h.receive(&format!("q{queue}"), max, visibility_ms);
                        leases.extend(got.into_iter().map(|m| m.lease));
                    }
                    Op::Ack { nth } => {
                        if !leases.is_empty() {
                            let lease = leases.remove(nth % leases.len());
                            let _ = h.ack(&[lease]);
                        }
                    }
                    Op::Nack { nth, delay_ms } => {
                        if !leases.is_empty() {
                            let lease = leases.remove(nth % leases.len());
                            let _ = h.nack(lease, delay_ms);
                        }
                    }
                    Op::Advance { ms } => h.advance(ms),
                    // Kept waiting (or served) by the engine; its answer is not read.
                    Op::LongPoll { queue, wait_ms } => {
                        polls.push(h.receive_waiting(&format!("q{queue}"), wait_ms));
                    }
                }
                check(&h)?;
            }
        }
    }
}

mod destinations {
    //! Destinations have a lifecycle: one that holds no message, dead letter, waiting
    //! Receive or endpoint is idle; the most recently idle keep their statistics, the rest
    //! are forgotten, so names a client makes up do not accumulate.

    use std::sync::{Arc, Weak};

    use super::super::Command;
    use super::super::harness::Harness;
    use super::super::index::IDLE_KEPT;
    use super::OK;
    use hookd_core::destination::Destination;

    fn env_count(name: &str, default: usize) -> usize {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    #[test]
    fn a_million_long_polled_names_leave_nothing_behind() {
        let names = env_count("HOOKD_CHURN_NAMES", 1_000_000);
        let mut h = Harness::new();
        h.enqueue("steady", b"x");
        let baseline = h.engine.index.destinations();
        let mut replies = Vec::with_capacity(10_000);
        for chunk in 0..names.div_ceil(10_000) {
            let mut commands = Vec::with_capacity(10_000);
            for i in 0..10_000.min(names - chunk * 10_000) {
                let (reply, rx) = tokio::sync::oneshot::channel();
                replies.push(rx);
                commands.push(Command::Receive {
                    queue: Destination::queue(
                        hookd_core::scope::TenantId::DEFAULT,
                        format!("made-up-{chunk}-{i}"),
                    ),
                    max: 1,
                    visibility_ms: 1_000,
                    wait_ms: 1,
                    reply,
                });
            }
            h.engine.round(commands);
            // Each round's waits end a millisecond later, and with them the names.
            h.advance(1);
            for mut rx in replies.drain(..) {
                assert_eq!(rx.try_recv().map(|r| r.map(|v| v.len())), Ok(Ok(0)));
            }
            let held = h.engine.index.destinations();
            assert!(held <= baseline + IDLE_KEPT, "{held} destinations held");
        }
        assert_eq!(h.engine.wheel.len(), 0, "no timer left behind");
        let stats = h.stats();
        assert_eq!(stats.storage.destinations as usize, baseline + IDLE_KEPT);
        assert_eq!(stats.total.pending, 1);
        // The steady queue is busy, so it was never forgotten.
        assert_eq!(h.receive("steady", 1, 1_000).len(), 1);
    }

    #[test]
    fn url_origins_are_forgotten_with_their_pools_once_delivered() {
        let origins = env_count("HOOKD_CHURN_ORIGINS", 20_000);
        let mut h = Harness::new();
        let mut targets: Vec<Weak<hookd_core::push::Target>> = Vec::new();
        for chunk in 0..origins.div_ceil(1_000) {
            let messages = (0..1_000.min(origins - chunk * 1_000))
                .map(|i| {
                    h.message(
                        Destination::url(
                            hookd_core::scope::TenantId::DEFAULT,
                            format!("https://o{chunk}-{i}.example/hook"),
                        ),
                        b"x",
                    )
                })
                .collect();
            let results = h.call(|reply| Command::Enqueue {
                messages,
                bytes: 0,
                reply,
            });
            assert!(results.iter().all(Result::is_ok));
            let sent = h.sent();
            targets.extend(sent.iter().map(|d| Arc::downgrade(&d.target)));
            h.report_all(&sent, OK);
            assert!(h.engine.index.destinations() <= IDLE_KEPT + 1_000);
        }
        assert_eq!(targets.len(), origins);
        assert_eq!(h.engine.index.destinations(), IDLE_KEPT.min(origins));
        let alive = targets.iter().filter(|t| t.strong_count() > 0).count();
        assert_eq!(
            alive,
            IDLE_KEPT.min(origins),
            "forgotten origins free their pools"
        );
        assert_eq!(h.stats().total.delivered_last_hour as usize, origins);
    }

    /// Issue #26, 13: 50,000 ad-hoc URL origins whose messages were dead-lettered held
    /// 980 MB for the dead-letter retention. Past `IDLE_KEPT`, an origin holding only dead
    /// letters keeps its key and counts; its statistics and pool go, and come back when a
    /// replay uses it.
    #[test]
    fn dead_lettered_url_origins_shed_their_pools_and_keep_their_dead_letters() {
        let origins = env_count("HOOKD_CHURN_ORIGINS", 3_000);
        let rss = || {
            std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                })
                .unwrap_or(0)
        };
        let rss_before = rss();
        let mut h = Harness::new();
        let mut targets: Vec<Weak<hookd_core::push::Target>> = Vec::new();
        let mut first = None;
        for chunk in 0..origins.div_ceil(1_000) {
            let messages = (0..1_000.min(origins - chunk * 1_000))
                .map(|i| {
                    let mut m = h.message(
                        Destination::url(
                            hookd_core::scope::TenantId::DEFAULT,
                            format!("https://d{chunk}-{i}.example/hook"),
                        ),
                        b"x",
                    );
                    m.max_attempts = 1;
                    m
                })
                .collect();
            let results = h.call(|reply| Command::Enqueue {
                messages,
                bytes: 0,
                reply,
            });
            let ids: Vec<_> = results.into_iter().map(|r| r.expect("stored").id).collect();
            first.get_or_insert(ids[0]);
            let sent = h.sent();
            targets.extend(sent.iter().map(|d| Arc::downgrade(&d.target)));
            h.report_all(
                &sent,
                hookd_core::push::Verdict::Permanent {
                    status: 410,
                    error: "HTTP 410".into(),
                },
            );
        }
        assert_eq!(targets.len(), origins);
        let stats = h.stats();
        assert_eq!(
            stats.total.dead_letter as usize, origins,
            "every dead letter kept"
        );
        assert_eq!(
            h.engine.index.destinations(),
            origins,
            "every origin's counts kept"
        );
        let alive = targets.iter().filter(|t| t.strong_count() > 0).count();
        assert!(
            alive <= IDLE_KEPT,
            "{alive} of {origins} dead-lettered origins still hold their pools"
        );
        assert!(
            h.engine
                .index
                .dests
                .iter()
                .all(|(_, d)| d.push.is_some() || d.counts.dead == 1)
        );
        // Issue #49, 7: a shed origin keeps its key and counts, and its statistics take no
        // heap (they took about 6 KB each: 20,000 refused origins held 220 MB for the 14
        // days of their dead letters).
        let shed: Vec<usize> = h
            .engine
            .index
            .dests
            .iter()
            .filter(|(_, d)| d.push.is_none())
            .map(|(_, d)| d.activity.heap_bytes())
            .collect();
        assert!(shed.len() >= origins - IDLE_KEPT, "{} shed", shed.len());
        eprintln!(
            "{origins} dead-lettered origins, {} shed: RSS grew {} KiB",
            shed.len(),
            rss().saturating_sub(rss_before)
        );
        assert!(
            shed.iter().all(|b| *b == 0),
            "shed origins' statistics hold {} bytes",
            shed.iter().sum::<usize>()
        );
        // A replay brings the oldest origin's push state back, and delivers.
        let id = first.expect("enqueued");
        let replay = super::super::ReplayRequest {
            ids: vec![id],
            limit: 1,
            ..Default::default()
        };
        let done = h.call(|reply| Command::Replay {
            request: replay,
            reply,
        });
        assert_eq!(done.map(|d| d.replayed), Ok(1));
        let sent = h.sent();
        assert_eq!(sent.len(), 1, "the replayed message is sent again");
        h.report(&sent[0], OK);
        assert_eq!(h.stats().total.dead_letter as usize, origins - 1);
    }

    #[test]
    fn metrics_gauges_show_the_heaviest_by_name_and_sum_the_rest() {
        let mut h = Harness::new();
        // 150 queues; queue i holds i % 7 + 1 messages (ties broken by name).
        for i in 0..150 {
            for _ in 0..(i % 7 + 1) {
                h.enqueue(&format!("g{i:03}"), b"x");
            }
        }
        let all: Vec<hookd_metrics::DestinationGauges> = (0..150)
            .map(|i| hookd_metrics::DestinationGauges {
                destination: format!("queue:g{i:03}"),
                pending: (i % 7 + 1) as u64,
                ..Default::default()
            })
            .collect();
        let names = |v: &[hookd_metrics::DestinationGauges]| {
            v.iter()
                .map(|d| (d.destination.clone(), d.pending))
                .collect::<Vec<_>>()
        };
        // Read whole, in slices smaller and larger than the bound, and in slices of one:
        // the same series each time.
        for (max, chunk) in [
            (100, 4_096),
            (100, 7),
            (100, 130),
            (100, 1),
            (3, 2),
            (0, 10),
        ] {
            let want = hookd_metrics::bound(all.clone(), max);
            let got = h.gauges(max, chunk);
            assert_eq!(names(&got), names(&want), "max {max}, slices of {chunk}");
            let total: u64 = got.iter().map(|d| d.pending).sum();
            assert_eq!(total, (0..150).map(|i| (i % 7 + 1) as u64).sum::<u64>());
        }
        // Fewer than the bound: every one, in key order.
        for chunk in [4_096, 9] {
            let few = h.gauges(1_000, chunk);
            assert_eq!(few.len(), 150);
            assert!(few.windows(2).all(|w| w[0].destination < w[1].destination));
        }
    }

    #[test]
    fn busy_dead_lettered_and_configured_destinations_are_kept() {
        let mut h = Harness::new();
        for name in ["configured", "deleted"] {
            h.endpoint(name, 1);
            h.enqueue_to_endpoint(name, b"x");
            let sent = h.sent();
            h.report(&sent[0], OK);
        }
        h.call(|reply| Command::DeleteEndpoint {
            tenant: hookd_core::scope::TenantId::DEFAULT,
            name: "deleted".into(),
            reply,
        })
        .expect("deleted");
        let mut m = h.message(
            Destination::queue(hookd_core::scope::TenantId::DEFAULT, "dead"),
            b"x",
        );
        m.max_attempts = 1;
        h.enqueue_message(m).expect("enqueued");
        let lease = h.receive("dead", 1, 1_000)[0].lease;
        h.nack(lease, 0).expect("nacked");
        h.enqueue("busy", b"x");
        // Push IDLE_KEPT + 10 idle names through, oldest first; the three above stay.
        for i in 0..IDLE_KEPT + 10 {
            h.enqueue(&format!("idle-{i}"), b"x");
        }
        let mut receives = Vec::new();
        let commands = (0..IDLE_KEPT + 10)
            .map(|i| {
                let (reply, rx) = tokio::sync::oneshot::channel();
                receives.push(rx);
                Command::Receive {
                    queue: Destination::queue(
                        hookd_core::scope::TenantId::DEFAULT,
                        format!("idle-{i}"),
                    ),
                    max: 1,
                    visibility_ms: 1_000,
                    wait_ms: 0,
                    reply,
                }
            })
            .collect();
        h.engine.round(commands);
        for (i, mut rx) in receives.into_iter().enumerate() {
            let lease = rx.try_recv().expect("answered").expect("leased")[0].lease;
            // One Ack each, in order, so they become idle oldest first.
            h.ack(&[lease]).unwrap_or_else(|e| panic!("idle-{i}: {e}"));
        }
        let held: Vec<String> = h
            .stats()
            .destinations
            .into_iter()
            .map(|d| d.destination)
            .collect();
        for kept in ["endpoint:configured", "queue:dead", "queue:busy"] {
            assert!(held.iter().any(|k| k == kept), "{kept} was forgotten");
        }
        assert!(
            !held.iter().any(|k| k == "queue:idle-0"),
            "the oldest idle went"
        );
        assert!(
            held.iter()
                .any(|k| k == &format!("queue:idle-{}", IDLE_KEPT + 9))
        );
        assert!(
            !held.iter().any(|k| k == "endpoint:deleted"),
            "a deleted endpoint's destination is idle like any other"
        );
        assert_eq!(held.len(), 3 + IDLE_KEPT);
        // A forgotten queue comes back, empty, when used again.
        h.enqueue("idle-0", b"again");
        assert_eq!(h.dest("queue:idle-0").pending, 1);
    }

    #[test]
    fn stats_pages_through_destinations_in_key_order_with_complete_totals() {
        let mut h = Harness::new();
        for i in 0..25 {
            h.enqueue(&format!("q{i:02}"), b"x");
        }
        let page = |h: &mut Harness, after: Option<String>| {
            h.call(|reply| Command::Stats {
                tenant: None,
                after,
                limit: 10,
                whole: true,
                reply,
            })
            .expect("stats")
        };
        let first = page(&mut h, None);
        assert_eq!(first.total.pending, 25, "totals cover every destination");
        let keys: Vec<_> = first
            .destinations
            .iter()
            .map(|d| d.destination.clone())
            .collect();
        assert_eq!(keys.first().map(String::as_str), Some("queue:q00"));
        assert_eq!(keys.len(), 10);
        assert_eq!(first.next_page.as_deref(), Some("queue:q09"));
        let second = page(&mut h, first.next_page);
        assert_eq!(second.destinations[0].destination, "queue:q10");
        let third = page(&mut h, second.next_page);
        assert_eq!(third.destinations.len(), 5);
        assert_eq!(third.next_page, None);
    }
}

/// Dead letters of queue `q`, one per payload, each after its single attempt.
fn dead_letters(h: &mut Harness, n: u8) -> Vec<hookd_core::ids::MessageId> {
    bury(h, "q", n)
}

/// Buries `n` messages of queue `queue` (each dies at its one attempt); their ids.
fn bury(h: &mut Harness, queue: &str, n: u8) -> Vec<hookd_core::ids::MessageId> {
    let ids: Vec<_> = (0..n)
        .map(|i| {
            let mut m = h.message(Destination::queue(TenantId::DEFAULT, queue), &[i]);
            m.max_attempts = 1;
            h.enqueue_message(m).expect("enqueued").id
        })
        .collect();
    for m in h.receive(queue, usize::from(n), 30_000) {
        h.nack(m.lease, 0).expect("nacked");
    }
    assert_eq!(h.dest(&format!("queue:{queue}")).dead_letter, u64::from(n));
    ids
}

#[test]
fn a_paced_replay_makes_its_messages_due_one_by_one() {
    let mut h = Harness::new();
    let ids = dead_letters(&mut h, 3);
    let start = h.now();
    // 10 a second: due at +0, +100 and +200 ms, durably (the schedule rows say so).
    let done = h.replay_paced(ids.clone(), None, 10.0).expect("replayed");
    assert_eq!(done.replayed, 3);
    assert_eq!(done.last_due_ms, start + 200);
    let dues: Vec<u64> = ids
        .iter()
        .map(|id| h.stored(*id).expect("stored").entry.due_ms)
        .collect();
    assert_eq!(dues, [start, start + 100, start + 200]);
    assert_eq!(h.receive("q", 10, 30_000).len(), 1, "only the first is due");
    h.advance(99);
    assert!(h.receive("q", 10, 30_000).is_empty());
    h.advance(1);
    assert_eq!(h.receive("q", 10, 30_000).len(), 1);
    h.advance(100);
    assert_eq!(h.receive("q", 10, 30_000).len(), 1);
    assert_eq!(h.dest("queue:q").dead_letter, 0);
}

#[test]
fn purge_deletes_dead_letters_and_skips_everything_else() {
    let mut h = Harness::new();
    let ids = dead_letters(&mut h, 3);
    let live = h.enqueue("q", b"live");
    assert_eq!(h.purge(vec![ids[0], ids[1], ids[1], live]), 2);
    assert!(h.stored(ids[0]).is_none(), "payload and attempts are gone");
    assert!(h.outcomes(ids[0]).is_empty());
    assert_eq!(h.state(ids[2]), Some(State::Dead));
    assert_eq!(
        h.state(live),
        Some(State::Pending),
        "a live message is not purged"
    );
    assert_eq!(h.dest("queue:q").dead_letter, 1);
    assert_eq!(h.purge(vec![ids[0]]), 0, "a purged id is skipped");
    // A replay by filter skips purged ids instead of failing (not strict)...
    let lenient = super::ReplayRequest {
        ids: vec![ids[0], ids[2]],
        limit: 10,
        ..Default::default()
    };
    let done = h.call(|reply| Command::Replay {
        request: lenient,
        reply,
    });
    assert_eq!(done.map(|d| d.replayed), Ok(1));
}

#[test]
fn a_paused_endpoint_holds_its_messages_through_a_put_until_resumed() {
    let mut h = Harness::new();
    h.endpoint("e", 4);
    assert_eq!(
        h.pause("nope", Some("x")).map(|_| ()),
        Err(Refusal::UnknownEndpoint {
            name: "nope".into()
        })
    );
    let paused = h.pause("e", Some("receiver deploy")).expect("paused");
    assert!(paused.paused && paused.paused_reason == "receiver deploy");
    assert_eq!(paused.paused_ms, h.now());
    let a = h.enqueue_to_endpoint("e", b"a");
    assert!(h.sent().is_empty(), "a paused endpoint gets nothing");
    assert_eq!(h.state(a), Some(State::Pending), "nothing is dropped");
    // Editing the endpoint keeps the pause.
    h.endpoint("e", 8);
    assert!(h.sent().is_empty());
    let stored = h
        .engine
        .store
        .endpoint(TenantId::DEFAULT, "e")
        .expect("read")
        .expect("kept");
    assert!(stored.paused, "durable, and kept by PutEndpoint");
    let resumed = h.pause("e", None).expect("resumed");
    assert!(!resumed.paused && resumed.paused_reason.is_empty());
    let sent = h.sent();
    assert_eq!(sent.iter().map(|d| d.id).collect::<Vec<_>>(), [a]);
}

#[test]
fn dead_letters_are_deleted_after_their_retention() {
    let mut h = Harness::new();
    let old = dead_letters(&mut h, 2);
    h.advance(24 * 3_600_000);
    let mut m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"young");
    m.max_attempts = 1;
    let young = h.enqueue_message(m).expect("enqueued").id;
    let lease = h.receive("q", 1, 30_000)[0].lease;
    h.nack(lease, 0).expect("nacked");
    assert_eq!(h.dest("queue:q").dead_letter, 3);
    // 14 days after the first two died (the harness's retention), then a sweep.
    h.advance(13 * 24 * 3_600_000 - 1);
    assert_eq!(h.dest("queue:q").dead_letter, 3, "not a moment early");
    h.advance(1_000);
    assert!(
        old.iter().all(|id| h.stored(*id).is_none()),
        "payload and attempts gone"
    );
    assert_eq!(h.state(young), Some(State::Dead));
    assert_eq!(h.dest("queue:q").dead_letter, 1);
}

/// The dead-letter retention sweep reads the index only when a dead letter can have
/// expired (it is by destination, not by time, so a pass reads it all): no dead letter is
/// read until the oldest one's retention ends; that pass deletes it and keeps the younger
/// ones, which go at the next pass: at their expiry, but at least an hour after the last
/// pass (the most one outlives its retention), so a stream of burials cannot make passes
/// run back to back.
#[test]
fn the_dead_letter_sweep_reads_nothing_until_one_can_expire() {
    const MINUTE: u64 = 60_000;
    const RETENTION: u64 = 14 * 24 * 60 * MINUTE;
    let mut h = Harness::new();
    bury(&mut h, "early", 200);
    h.advance(10 * MINUTE);
    bury(&mut h, "late", 200);
    let read = h.engine.housekeeping.dead.read;
    // Up to a moment before the early ones' retention ends: 100 rounds, nothing read.
    for _ in 0..100 {
        h.advance((RETENTION - 10 * MINUTE - 1_000) / 100);
    }
    assert_eq!(
        h.engine.housekeeping.dead.read, read,
        "a sweep read dead letters none of which could have expired"
    );
    assert_eq!(h.dest("queue:early").dead_letter, 200);
    h.advance(1_001);
    for _ in 0..10 {
        h.advance(25);
    }
    assert!(h.engine.housekeeping.dead.read >= read + 400);
    assert_eq!(h.dest("queue:early").dead_letter, 0, "past their retention");
    assert_eq!(h.dest("queue:late").dead_letter, 200, "ten minutes younger");
    // Their retention ends ten minutes later, but the next pass is an hour after this one.
    let read = h.engine.housekeeping.dead.read;
    h.advance(30 * MINUTE);
    assert_eq!(h.engine.housekeeping.dead.read, read);
    assert_eq!(h.dest("queue:late").dead_letter, 200);
    h.advance(31 * MINUTE);
    for _ in 0..10 {
        h.advance(25);
    }
    assert_eq!(
        h.dest("queue:late").dead_letter,
        0,
        "deleted at the next pass"
    );
}

/// Alerts on the engine's own figures, on the manual clock: queue depth and dead letters
/// across both levels and back, per destination and in total, each change in Stats and
/// delivered to the notify endpoint through the push path.
#[test]
fn alerts_follow_the_figures_and_are_delivered_to_the_notify_endpoint() {
    use hookd_core::alerts::{AlertConfig, NotifyConfig, NotifyFormat};
    let mut config = config();
    config.alerts = AlertConfig {
        evaluate_every_secs: 1,
        queue_depth_warning: 2,
        queue_depth_critical: 4,
        dead_letters_warning: 0,
        dead_letters_critical: 1,
        dead_letter_growth_warning: 100,
        dead_letter_growth_critical: 100,
        notify: vec![NotifyConfig {
            endpoint: "ops".into(),
            format: NotifyFormat::Hookd,
            routing_key: None,
        }],
        ..Default::default()
    };
    let mut h = Harness::with(config);
    h.endpoint("ops", 16);
    let level = |h: &mut Harness, alert: &str, dest: &str| -> String {
        h.stats()
            .alerts
            .iter()
            .find(|a| a.alert == alert && a.destination == dest)
            .map_or("ok".into(), |a| a.level.to_owned())
    };
    let notified = |h: &mut Harness| -> Vec<serde_json::Value> {
        let sent = h.sent();
        let bodies = sent
            .iter()
            .map(|d| serde_json::from_slice(&d.payload).expect("JSON"))
            .collect();
        h.report_all(&sent, Verdict::Delivered { status: 204 });
        bodies
    };

    for _ in 0..3 {
        h.enqueue("q", b"x");
    }
    h.advance(1_000);
    assert_eq!(level(&mut h, "queue_depth", "queue:q"), "warning");
    assert_eq!(level(&mut h, "queue_depth", "*"), "warning");
    let sent = notified(&mut h);
    assert_eq!(
        sent.len(),
        2,
        "one per change (queue:q and the total): {sent:?}"
    );
    assert!(
        sent.iter()
            .all(|b| b["alert"] == "queue_depth" && b["level"] == "warning")
    );

    for _ in 0..2 {
        h.enqueue("q", b"x");
    }
    h.advance(1_000);
    assert_eq!(level(&mut h, "queue_depth", "queue:q"), "critical");
    let sent = notified(&mut h);
    assert!(
        sent.iter()
            .any(|b| b["destination"] == "queue:q" && b["previous"] == "warning")
    );
    let since = h
        .stats()
        .alerts
        .iter()
        .find(|a| a.alert == "queue_depth" && a.destination == "queue:q")
        .map(|a| (a.since_ms, a.value));
    assert_eq!(since, Some((h.now(), 5.0)));

    // Consumed: back to ok, and the resolution is sent too.
    let leased = h.receive("q", 10, 30_000);
    let leases: Vec<_> = leased.iter().map(|m| m.lease).collect();
    h.ack(&leases).expect("acked");
    h.advance(1_000);
    assert_eq!(level(&mut h, "queue_depth", "queue:q"), "ok");
    let sent = notified(&mut h);
    assert!(
        sent.iter()
            .any(|b| b["destination"] == "queue:q" && b["level"] == "ok")
    );

    // Dead letters: one is over 0 (warning)... two is over 1 (critical).
    let mut m = h.message(Destination::queue(TenantId::DEFAULT, "d"), b"x");
    m.max_attempts = 1;
    h.enqueue_message(m).expect("enqueued");
    let lease = h.receive("d", 1, 30_000)[0].lease;
    h.nack(lease, 0).expect("nacked");
    h.advance(1_000);
    assert_eq!(level(&mut h, "dead_letters", "queue:d"), "warning");
    let mut m = h.message(Destination::queue(TenantId::DEFAULT, "d"), b"y");
    m.max_attempts = 1;
    h.enqueue_message(m).expect("enqueued");
    let lease = h.receive("d", 1, 30_000)[0].lease;
    h.nack(lease, 0).expect("nacked");
    h.advance(1_000);
    assert_eq!(level(&mut h, "dead_letters", "queue:d"), "critical");
    assert_eq!(level(&mut h, "dead_letters", "*"), "critical");
    notified(&mut h);
    // The notify endpoint's own messages do not alert about themselves.
    assert_eq!(level(&mut h, "queue_depth", "endpoint:ops"), "ok");
}

/// The level of `alert` for `dest` in Stats ("ok" when not kept).
fn alert_level(h: &mut Harness, alert: &str, dest: &str) -> String {
    h.stats()
        .alerts
        .iter()
        .find(|a| a.alert == alert && a.destination == dest)
        .map_or("ok".into(), |a| a.level.to_owned())
}

/// Every alert the pure tests walk through both levels is also fed by the engine's own
/// figures: oldest pending, success rate, attempt p95, delivery latency, consumer rate and
/// dead-letter growth, each driven on the manual clock.
#[test]
fn every_alert_is_fed_by_the_engines_own_figures() {
    let mut config = config();
    config.retry.max_attempts = 1;
    config.alerts = hookd_core::alerts::AlertConfig {
        evaluate_every_secs: 1,
        success_rate_min_attempts: 4,
        consumer_rate_min_enqueued: 4,
        attempt_p95_warning_ms: 1,
        attempt_p95_critical_ms: 5,
        ..Default::default()
    };
    let mut h = Harness::with(config);

    // Oldest pending: 30 min, then 2 h.
    let old = h.enqueue("old", b"x");
    h.advance(1_801_000);
    assert_eq!(
        alert_level(&mut h, "oldest_pending", "queue:old"),
        "warning"
    );
    h.advance(5_400_000);
    assert_eq!(
        alert_level(&mut h, "oldest_pending", "queue:old"),
        "critical"
    );
    assert_eq!(alert_level(&mut h, "oldest_pending", "*"), "critical");
    let lease = h.receive("old", 1, 30_000)[0].lease;
    h.ack(&[lease]).expect("acked");
    h.advance(1_000);
    assert_eq!(alert_level(&mut h, "oldest_pending", "queue:old"), "ok");
    let _ = old;

    // Success rate 3 of 4 (< 95 %) and the attempts' p95 (2 ms > 1 ms).
    h.endpoint("e", 16);
    for _ in 0..4 {
        h.enqueue_to_endpoint("e", b"x");
    }
    let sent = h.sent();
    h.report_all(&sent[..3], Verdict::Delivered { status: 200 });
    h.report(
        &sent[3],
        Verdict::Permanent {
            status: 422,
            error: "HTTP 422".into(),
        },
    );
    h.advance(1_000);
    assert_eq!(
        alert_level(&mut h, "success_rate", "endpoint:e"),
        "critical"
    );
    assert_eq!(alert_level(&mut h, "attempt_p95", "endpoint:e"), "warning");
    // ...and the one dead letter is growth.
    assert_eq!(
        alert_level(&mut h, "dead_letter_growth", "endpoint:e"),
        "warning"
    );

    // Delivery latency: 2.5 s from enqueue to ack (> 2 s), then an average over 5 s.
    h.enqueue("slow", b"a");
    h.advance(2_500);
    let lease = h.receive("slow", 1, 30_000)[0].lease;
    h.ack(&[lease]).expect("acked");
    h.advance(1_000);
    assert_eq!(
        alert_level(&mut h, "delivery_latency", "queue:slow"),
        "warning"
    );
    h.enqueue("slow", b"b");
    h.advance(9_000);
    let lease = h.receive("slow", 1, 30_000)[0].lease;
    h.ack(&[lease]).expect("acked");
    h.advance(1_000);
    assert_eq!(
        alert_level(&mut h, "delivery_latency", "queue:slow"),
        "critical"
    );

    // Consumer rate: nothing of 4 completed (< 25 %), then 1 of 4 (< 50 %), then 2 of 4.
    for _ in 0..4 {
        h.enqueue("c", b"x");
    }
    h.advance(1_000);
    assert_eq!(alert_level(&mut h, "consumer_rate", "queue:c"), "critical");
    let leases: Vec<_> = h.receive("c", 4, 600_000).iter().map(|m| m.lease).collect();
    h.ack(&leases[..1]).expect("acked");
    h.advance(1_000);
    assert_eq!(alert_level(&mut h, "consumer_rate", "queue:c"), "warning");
    h.ack(&leases[1..2]).expect("acked");
    h.advance(1_000);
    assert_eq!(alert_level(&mut h, "consumer_rate", "queue:c"), "ok");

    // Dead-letter growth: 10 new ones in 15 min is critical; none for 15 min is ok.
    for _ in 0..10 {
        h.enqueue("d", b"x");
    }
    for m in h.receive("d", 10, 30_000) {
        h.nack(m.lease, 0).expect("nacked");
    }
    h.advance(1_000);
    assert_eq!(
        alert_level(&mut h, "dead_letter_growth", "queue:d"),
        "critical"
    );
    h.advance(16 * 60_000);
    assert_eq!(alert_level(&mut h, "dead_letter_growth", "queue:d"), "ok");
}

/// An evaluation of many destinations goes in bounded steps, one per sweep (250 ms), and
/// reaches every destination.
#[test]
fn alert_evaluation_of_many_destinations_goes_in_steps() {
    let mut config = config();
    config.alerts = hookd_core::alerts::AlertConfig {
        evaluate_every_secs: 60,
        queue_depth_warning: 0,
        queue_depth_critical: 100,
        ..Default::default()
    };
    let mut h = Harness::with(config);
    for i in 0..1_200 {
        h.enqueue(&format!("q{i:04}"), b"x");
    }
    let warned = |h: &mut Harness| {
        h.stats()
            .alerts
            .iter()
            .filter(|a| a.alert == "queue_depth" && a.destination.starts_with("queue:"))
            .count()
    };
    h.advance(60_000);
    let first = warned(&mut h);
    assert!(first > 0 && first < 1_200, "one step, not all: {first}");
    let mut steps = 1;
    while warned(&mut h) < 1_200 {
        h.advance(250);
        steps += 1;
        assert!(steps < 10, "the evaluation stalled at {}", warned(&mut h));
    }
    assert_eq!(steps, 3, "1,200 destinations in steps of 512");
}

/// The seed's practice at small scale: 10 messages per destination, soft mark at 8.
fn marked() -> Harness {
    let mut c = config();
    c.backpressure = hookd_core::backpressure::BackpressureConfig {
        destination_max_messages: 10,
        destination_max_bytes: 1 << 20,
        max_messages: 15,
        max_bytes: 1 << 20,
        ..Default::default()
    };
    Harness::with(c)
}

#[test]
fn watermarks_throttle_between_the_marks_and_refuse_at_the_hard_mark_until_messages_leave() {
    let mut h = marked();
    let mut throttles = Vec::new();
    for _ in 0..10 {
        let m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"x");
        throttles.push(
            h.enqueue_message(m)
                .expect("below the hard mark")
                .throttle_ms,
        );
    }
    // 1..=7 held after the enqueue: no hint; 8 (the soft mark) 100 ms, rising to 1 s at 10.
    assert_eq!(throttles, [0, 0, 0, 0, 0, 0, 0, 100, 550, 1_000]);
    let size = h
        .message(Destination::queue(TenantId::DEFAULT, "q"), b"x")
        .record
        .len() as u64;
    let d = h.dest("queue:q");
    assert_eq!(d.backpressure, hookd_core::backpressure::Level::Hard);
    assert_eq!(d.live_bytes, 10 * size);

    // The 11th is refused and stores nothing.
    let m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"x");
    let refused = m.id;
    let Err(Refusal::OverMark(over)) = h.enqueue_message(m) else {
        panic!("not refused at the hard mark");
    };
    assert_eq!(
        (over.held, over.limit, over.retry_after_ms),
        (10, 10, 1_000)
    );
    assert!(h.stored(refused).is_none());
    // Another destination still takes events, up to the global mark (15).
    for _ in 0..5 {
        h.enqueue("other", b"y");
    }
    let m = h.message(Destination::queue(TenantId::DEFAULT, "third"), b"z");
    assert!(matches!(
        h.enqueue_message(m),
        Err(Refusal::OverMark(hookd_core::backpressure::OverMark {
            scope: hookd_core::backpressure::Scope::All,
            ..
        }))
    ));
    // Delivering makes room again.
    let leased = h.receive("q", 3, 30_000);
    h.ack(&leased.iter().map(|l| l.lease).collect::<Vec<_>>())
        .expect("acked");
    let d = h.dest("queue:q");
    assert_eq!((d.pending + d.in_flight, d.live_bytes), (7, 7 * size));
    let m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"x");
    assert!(h.enqueue_message(m).is_ok());
}

#[test]
fn at_the_hard_mark_a_resend_of_a_stored_event_is_still_its_duplicate() {
    let mut h = marked();
    let keyed = |h: &Harness, key: &str| {
        let now = h.now();
        let record = MessageRecord {
            payload: b"x".to_vec(),
            idempotency_key: key.into(),
            created_ms: now,
            ..Default::default()
        };
        let id = hookd_core::ids::MessageId::generate(now);
        NewMessage::from_record(id, Destination::queue(TenantId::DEFAULT, "q"), record, 0, 0)
    };
    let first = h.enqueue_message(keyed(&h, "k0")).expect("stored").id;
    for i in 1..10 {
        h.enqueue_message(keyed(&h, &format!("k{i}")))
            .expect("stored");
    }
    let again = h
        .enqueue_message(keyed(&h, "k0"))
        .expect("a duplicate, not a refusal");
    assert_eq!((again.id, again.duplicate), (first, true));
    assert!(matches!(
        h.enqueue_message(keyed(&h, "new")),
        Err(Refusal::OverMark(_))
    ));
}

#[test]
fn inside_the_disk_reserve_new_events_and_endpoints_are_refused_but_acks_and_deletes_go_through() {
    let headroom = std::sync::Arc::new(hookd_storage::disk::Headroom::new(100, 0.0));
    let mut c = config();
    c.headroom = headroom.clone();
    let mut h = Harness::with(c);
    let space = |available: u64| hookd_storage::disk::Space {
        available,
        total: 10 << 30,
        fsize_limit: None,
    };
    headroom.record(space(1 << 30));
    let id = h.enqueue("q", b"kept");
    h.endpoint("e", 4);
    assert_eq!(headroom.record(space(99 << 20)), Some(true));

    let m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"new");
    let refused = m.id;
    let Err(r @ Refusal::DiskFull { .. }) = h.enqueue_message(m) else {
        panic!("not refused inside the reserve");
    };
    assert!(r.to_string().contains("reserve"), "{r}");
    assert_eq!(r.retry_after_ms(), Some(5_000));
    assert!(h.stored(refused).is_none());
    let put = h.call(|reply| Command::PutEndpoint {
        tenant: hookd_core::scope::TenantId::DEFAULT,
        endpoint: Box::new(EndpointRecord {
            name: "new".into(),
            url: "http://127.0.0.1:9/".into(),
            ..Default::default()
        }),
        reply,
    });
    assert!(matches!(put, Err(Refusal::DiskFull { .. })));
    // What frees space still works: a lease and its ack, an endpoint's deletion.
    let leased = h.receive("q", 1, 30_000);
    assert_eq!(leased[0].id, id);
    assert_eq!(h.ack(&[leased[0].lease]), Ok(1));
    let deleted = h.call(|reply| Command::DeleteEndpoint {
        tenant: hookd_core::scope::TenantId::DEFAULT,
        name: "e".into(),
        reply,
    });
    assert_eq!(deleted, Ok(()));
    // Space back: accepted again, with nothing to restart.
    assert_eq!(headroom.record(space(1 << 30)), Some(false));
    h.enqueue("q", b"after");
}

/// Issue #26, 5: between two probes of free space, the bytes accepted count against it: a
/// burst that would write past the reserve before the next probe is refused, not written
/// into a full disk.
#[test]
fn a_burst_between_two_probes_cannot_eat_the_reserve() {
    let headroom = std::sync::Arc::new(hookd_storage::disk::Headroom::new(24, 0.0));
    let mut c = config();
    c.headroom = headroom.clone();
    let mut h = Harness::with(c);
    // 40 MiB above the reserve at the last probe; no probe again during the burst.
    headroom.record(hookd_storage::disk::Space {
        available: (24 + 40) << 20,
        total: 1 << 30,
        fsize_limit: None,
    });
    let payload = vec![7u8; 1 << 20];
    let mut stored = 0u64;
    let refusal = loop {
        let m = h.message(Destination::queue(TenantId::DEFAULT, "q"), &payload);
        match h.enqueue_message(m) {
            Ok(_) => stored += 1,
            Err(r) => break r,
        }
        assert!(stored < 200, "200 MiB accepted on 40 MiB of room");
    };
    assert!(matches!(refusal, Refusal::DiskFull { .. }), "{refusal}");
    // Each accepted byte is written twice (log, then redb) before a checkpoint.
    assert!(
        (2 * stored) << 20 <= 40 << 20,
        "{stored} MiB accepted on 40 MiB of room"
    );
    assert!(stored >= 15, "refused too early: {stored} MiB");
    // A fresh probe starts the count again (the bytes of the interval before it still
    // count once, for what the pipeline may not have written yet when it measured).
    headroom.record(hookd_storage::disk::Space {
        available: 1 << 30,
        total: 1 << 30,
        fsize_limit: None,
    });
    h.enqueue("q", b"after");
}

/// Issue #26, 6: a file-size limit is named as the cause, not "0 bytes free".
#[test]
fn a_file_size_limit_refusal_names_the_limit() {
    let headroom = std::sync::Arc::new(hookd_storage::disk::Headroom::new(24, 0.0));
    let mut c = config();
    c.headroom = headroom.clone();
    let mut h = Harness::with(c);
    headroom.record(hookd_storage::disk::Space {
        available: 0,
        total: 1 << 40,
        fsize_limit: Some(40 << 20),
    });
    let m = h.message(Destination::queue(TenantId::DEFAULT, "q"), b"x");
    let r = h.enqueue_message(m).unwrap_err().to_string();
    assert!(
        r.contains("file-size limit") && r.contains(&(40u64 << 20).to_string()),
        "{r}"
    );
}

/// The idempotency sweep reads its table in budgeted slices, several steps for a large
/// table (the next step 25 ms after one that stopped at its budget): every key past its
/// retention is forgotten all the same, and none earlier.
#[test]
fn idempotency_keys_past_their_retention_are_all_forgotten_step_by_step() {
    let mut h = Harness::new();
    let keys: Vec<String> = (0..3_000).map(|i| format!("key-{i:04}")).collect();
    for chunk in keys.chunks(500) {
        claim_keys(&mut h, chunk);
    }
    let resend = |h: &mut Harness, key: &str| {
        let mut m = h.message(Destination::queue(TenantId::DEFAULT, "k"), b"again");
        m.idempotency_key = key.to_owned();
        h.enqueue_message(m).expect("enqueued").duplicate
    };
    // A moment before the retention ends, sweeps (many steps) leave every key.
    h.advance(24 * 3_600_000 - 5_000);
    for _ in 0..100 {
        h.advance(25);
    }
    assert!(resend(&mut h, "key-0000") && resend(&mut h, "key-2999"));
    h.advance(2_500 + 1);
    for _ in 0..400 {
        h.advance(25);
    }
    assert_eq!(
        idempotency_rows(&h),
        0,
        "every row past its retention is removed"
    );
    for key in &keys {
        assert!(!resend(&mut h, key), "{key} was not forgotten");
    }
}

/// Rows of the idempotency table redb holds (the harness applies each round at once).
fn idempotency_rows(h: &Harness) -> usize {
    let rows = h.engine.store.dump().expect("a read");
    rows.iter().filter(|(t, _, _)| *t == "idempotency").count()
}

/// Claims `keys` as idempotency keys in one round, each for the first time.
fn claim_keys(h: &mut Harness, keys: &[String]) {
    let messages = keys
        .iter()
        .map(|k| {
            let mut m = h.message(Destination::queue(TenantId::DEFAULT, "k"), b"x");
            m.idempotency_key = k.clone();
            m
        })
        .collect();
    let results = h.call(|reply| Command::Enqueue {
        messages,
        bytes: 0,
        reply,
    });
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|e| !e.duplicate))
    );
}

/// The idempotency sweep reads its table only when a key can have expired (the keys have
/// no index by time, so a pass reads them all): after a pass, the rounds of the rest of
/// the oldest key's retention read no key; the pass at its expiry removes the keys past
/// theirs and keeps the rest, which go at the next pass, a tenth of the retention later.
#[test]
fn the_idempotency_sweep_reads_no_key_until_one_can_expire() {
    const HOUR: u64 = 3_600_000;
    let mut h = Harness::new();
    let keys = |prefix: &str| {
        (0..500)
            .map(|i| format!("{prefix}-{i}"))
            .collect::<Vec<_>>()
    };
    claim_keys(&mut h, &keys("early"));
    h.advance(HOUR);
    claim_keys(&mut h, &keys("late"));
    let read = h.engine.housekeeping.idempotency.read;
    assert!(read >= 500, "the pass at start read the early keys: {read}");
    // Up to a moment before the early keys' retention ends: 100 rounds, no key read.
    for _ in 0..100 {
        h.advance((23 * HOUR - 1_000) / 100);
    }
    assert_eq!(
        h.engine.housekeeping.idempotency.read, read,
        "a sweep read keys none of which could have expired"
    );
    assert_eq!(idempotency_rows(&h), 1_000);
    // Their expiry: a pass removes them and keeps the late keys.
    h.advance(1_001);
    for _ in 0..10 {
        h.advance(25);
    }
    assert!(h.engine.housekeeping.idempotency.read >= read + 1_000);
    assert_eq!(
        idempotency_rows(&h),
        500,
        "the early keys are removed, the late kept"
    );
    // The late keys expire an hour later, but passes are a tenth of the retention apart.
    let read = h.engine.housekeeping.idempotency.read;
    h.advance(HOUR + 10_000);
    assert_eq!(h.engine.housekeeping.idempotency.read, read);
    assert_eq!(idempotency_rows(&h), 500);
    h.advance(24 * HOUR / 10);
    for _ in 0..10 {
        h.advance(25);
    }
    assert_eq!(
        idempotency_rows(&h),
        0,
        "the late keys are removed at the next pass"
    );
}

/// A restart rebuilds the two tiers of the index from the store: the never-attempted
/// backlog as fresh entries with their records' sizes (from the pointers: the byte
/// watermarks hold at once), a leased message in `live`; the backlog still goes out oldest
/// first.
#[test]
fn a_restart_recovers_the_backlog_as_fresh_entries_with_their_sizes() {
    let mut h = Harness::new();
    // A millisecond apart: a restart orders by id, and ids of one millisecond are random.
    let ids: Vec<_> = (0..6)
        .map(|i| {
            h.advance(1);
            h.enqueue("q", &vec![b'x'; 10 + i])
        })
        .collect();
    let leased = h.receive("q", 1, 30_000);
    assert_eq!(leased[0].id, ids[0]);
    let before = h.dest("queue:q");
    assert_eq!((before.pending, before.in_flight), (5, 1));
    assert!(before.live_bytes > 0);

    let mut h = h.restarted();
    let after = h.dest("queue:q");
    assert_eq!(
        (after.pending, after.in_flight, after.live_bytes),
        (before.pending, before.in_flight, before.live_bytes)
    );
    let index = &h.engine.index;
    let d = index.find("queue:q").expect("recovered");
    let fresh: Vec<_> = index.dests[d].fresh.iter().map(|f| f.id()).collect();
    assert_eq!(fresh, ids[1..]);
    assert_eq!(index.live.keys().copied().collect::<Vec<_>>(), [ids[0]]);
    let got: Vec<_> = h.receive("q", 10, 30_000).iter().map(|l| l.id).collect();
    assert_eq!(got, ids[1..]);
}
