//! A publish through the engine: one delivery per subscriber, one record, one event id;
//! the idempotency key over the whole fan-out; a subscriber whose endpoint is gone left
//! out; a watermark of one subscriber refusing the whole publish.

use super::harness::Harness;
use super::{Fanout, NewMessage, Subscriber};
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::push::Verdict;
use hookd_core::scope::TenantId;
use hookd_storage::store::State;

fn publish(h: &Harness, key: &str, subscribers: &[Destination]) -> NewMessage {
    let now = h.now();
    let (first, rest) = subscribers.split_first().expect("a subscriber");
    let mut m = h.message(first.clone(), b"{\"ticket\":7}");
    m.idempotency_key = key.into();
    m.fanout = Some(Box::new(Fanout {
        event_id: MessageId::generate(now),
        scope: "tticket.classified".into(),
        also: rest
            .iter()
            .map(|d| Subscriber::new(MessageId::generate(now), d.clone()))
            .collect(),
    }));
    m
}

#[test]
fn a_publish_stores_one_delivery_per_subscriber_sharing_its_event() {
    let mut h = Harness::new();
    h.endpoint("billing", 8);
    h.endpoint("crm", 8);
    let subscribers = [
        Destination::endpoint(TenantId::DEFAULT, "billing"),
        Destination::queue(TenantId::DEFAULT, "audit"),
        Destination::endpoint(TenantId::DEFAULT, "crm"),
        // Deleted since it subscribed: left out, not an error.
        Destination::endpoint(TenantId::DEFAULT, "gone"),
    ];
    let m = publish(&h, "evt-1", &subscribers);
    let event = m.fanout.as_ref().map(|f| f.event_id).unwrap();
    let answer = h.enqueue_message(m).expect("published");
    assert_eq!(answer.id, event);
    assert!(!answer.duplicate);
    assert_eq!(answer.deliveries.len(), 3);
    // Each delivery is a message of its own destination, with the event's id.
    for (id, dest) in answer.deliveries.iter().zip(["ebilling", "qaudit", "ecrm"]) {
        let stored = h.stored(*id).expect("stored");
        assert_eq!(stored.record.destination, dest);
        assert_eq!(stored.record.event_id, event.to_string());
        assert_eq!(stored.record.payload, b"{\"ticket\":7}");
        assert_eq!(stored.entry.state, State::Pending);
    }
    // Both endpoints get an attempt carrying the event id; the queue a lease.
    let sent = h.sent();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|d| d.event_id == event.to_string()));
    let leased = h.receive("audit", 10, 30_000);
    assert_eq!(leased.len(), 1);
    assert_eq!(leased[0].event_id, event.to_string());
    // Each with its own fate: one delivered, one retried.
    h.report(&sent[0], Verdict::Delivered { status: 200 });
    h.report(
        &sent[1],
        Verdict::Retry {
            status: 503,
            outcome: hookd_core::outcome::AttemptOutcome::HttpError,
            error: "HTTP 503".into(),
            retry_after: None,
        },
    );
    assert!(h.done(sent[0].id).is_some());
    assert_eq!(h.state(sent[1].id), Some(State::Retry));
    // The same key again: the whole fan-out is a duplicate, nothing more is stored.
    let again = h
        .enqueue_message(publish(&h, "evt-1", &subscribers))
        .expect("answered");
    assert!(again.duplicate);
    assert_eq!(again.id, event);
    // Answered as the original was: its deliveries and their count.
    assert_eq!(again.deliveries, answer.deliveries);
    assert_eq!(again.subscribers, answer.subscribers);
    assert!(h.sent().is_empty());
    // After a restart every delivery reads back with its own destination.
    let ids = answer.deliveries.clone();
    let h = h.restarted();
    assert_eq!(
        h.stored(ids[1]).map(|m| m.record.destination),
        Some("qaudit".into())
    );
    assert_eq!(
        h.stored(ids[2]).map(|m| m.record.destination),
        Some("ecrm".into())
    );
}

#[test]
fn no_live_subscriber_stores_nothing_and_claims_no_key() {
    let mut h = Harness::new();
    let answer = h
        .enqueue_message(publish(
            &h,
            "k",
            &[Destination::endpoint(TenantId::DEFAULT, "gone")],
        ))
        .expect("answered");
    assert!(answer.deliveries.is_empty() && !answer.duplicate);
    assert_eq!(h.stats().total.pending, 0);
    // The key was not taken: once a subscriber exists, the same key stores.
    h.endpoint("gone", 1);
    let answer = h
        .enqueue_message(publish(
            &h,
            "k",
            &[Destination::endpoint(TenantId::DEFAULT, "gone")],
        ))
        .expect("answered");
    assert_eq!(answer.deliveries.len(), 1);
}
