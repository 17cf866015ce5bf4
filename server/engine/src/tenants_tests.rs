//! Tenants through the engine (issue #51): two tenants with objects of the same names never
//! meet. A tenant's queue, endpoint, idempotency keys, leases and dead letters are its own:
//! the other tenant's calls answer as if they did not exist, also across a restart.

use super::harness::Harness;
use super::{Command, Refusal, ReplayRequest};
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_storage::store::{EndpointRecord, State};

const A: TenantId = TenantId::DEFAULT;
const B: TenantId = TenantId(7);

fn receive(h: &mut Harness, tenant: TenantId, queue: &str) -> Vec<super::Leased> {
    h.call(|reply| Command::Receive {
        queue: Destination::queue(tenant, queue),
        max: 10,
        visibility_ms: 30_000,
        wait_ms: 0,
        reply,
    })
    .expect("receive")
}

/// The refusal itself, out of the place in a batch it names.
fn bare<T: std::fmt::Debug>(answer: Result<T, Refusal>) -> Refusal {
    match answer {
        Err(Refusal::At { refusal, .. }) => *refusal,
        Err(refusal) => refusal,
        Ok(v) => panic!("answered {v:?}"),
    }
}

fn enqueue(h: &mut Harness, to: Destination, payload: &[u8], key: &str) -> MessageId {
    let mut m = h.message(to, payload);
    m.idempotency_key = key.into();
    h.enqueue_message(m).expect("enqueued").id
}

#[test]
fn two_tenants_with_the_same_names_never_meet() {
    let mut h = Harness::new();
    // Tenant B's endpoint `e`; tenant A has none of that name.
    let put = h.call(|reply| Command::PutEndpoint {
        tenant: B,
        endpoint: Box::new(EndpointRecord {
            name: "e".into(),
            url: "https://b.example/hook".into(),
            max_in_flight: 4,
            ..Default::default()
        }),
        reply,
    });
    assert!(put.expect("stored").created);
    let refused = h.enqueue_message(h.message(Destination::endpoint(A, "e"), b"x"));
    assert!(
        matches!(refused, Err(Refusal::UnknownEndpoint { .. })),
        "{refused:?}"
    );

    // The same queue name and idempotency key in each: two messages, neither a duplicate.
    let a = enqueue(&mut h, Destination::queue(A, "q"), b"a", "k");
    let b = enqueue(&mut h, Destination::queue(B, "q"), b"b", "k");
    assert_ne!(a, b);
    let again = h.message(Destination::queue(B, "q"), b"b2");
    let mut again = again;
    again.idempotency_key = "k".into();
    let again = h.enqueue_message(again).expect("answered");
    assert!(again.duplicate && again.id == b, "{again:?}");

    // Each tenant's Receive gets its own message only.
    let got_a = receive(&mut h, A, "q");
    let got_b = receive(&mut h, B, "q");
    assert_eq!(got_a.iter().map(|l| l.id).collect::<Vec<_>>(), [a]);
    assert_eq!(got_b.iter().map(|l| l.id).collect::<Vec<_>>(), [b]);

    // A's Ack or Nack of B's lease: not in flight (nothing says it exists); B's own works.
    let lease_b = got_b[0].lease;
    let acked = h.call(|reply| Command::Ack {
        tenant: A,
        leases: vec![lease_b],
        reply,
    });
    assert!(matches!(bare(acked), Refusal::NotInFlight { id } if id == b));
    let nacked = h.call(|reply| Command::Nack {
        tenant: A,
        lease: lease_b,
        delay_ms: 0,
        reason: String::new(),
        reply,
    });
    assert!(matches!(bare(nacked), Refusal::NotInFlight { id } if id == b));
    let acked = h.call(|reply| Command::Ack {
        tenant: B,
        leases: vec![lease_b],
        reply,
    });
    assert_eq!(acked.expect("B acks its own"), 1);
    // Acknowledged once more by A (a retry): still not A's to know about.
    let acked = h.call(|reply| Command::Ack {
        tenant: A,
        leases: vec![lease_b],
        reply,
    });
    assert!(matches!(bare(acked), Refusal::NotInFlight { id } if id == b));

    // A dead letter of B's: A cannot replay or purge it by id.
    let mut dead = h.message(Destination::queue(B, "dead"), b"poison");
    dead.max_attempts = 1;
    let dead = h.enqueue_message(dead).expect("enqueued").id;
    let leased = receive(&mut h, B, "dead");
    let nacked = h.call(|reply| Command::Nack {
        tenant: B,
        lease: leased[0].lease,
        delay_ms: 0,
        reason: "poison".into(),
        reply,
    });
    assert!(nacked.is_ok(), "{nacked:?}");
    assert_eq!(h.state(dead), Some(State::Dead));
    let replay = |tenant| ReplayRequest {
        tenant,
        ids: vec![dead],
        destination: None,
        limit: 10,
        strict: true,
        per_s: 0.0,
    };
    let replayed = h.call(|reply| Command::Replay {
        request: replay(A),
        reply,
    });
    assert!(matches!(bare(replayed), Refusal::NoMessage { id } if id == dead));
    let purged = h.call(|reply| Command::Purge {
        tenant: A,
        ids: vec![dead],
        reply,
    });
    assert_eq!(purged.expect("answered"), 0);
    assert_eq!(h.state(dead), Some(State::Dead), "still B's dead letter");
    let store = &h.engine.store;
    let (listed_a, _) = store.dead_summaries(A, None, 100).expect("read");
    let (listed_b, _) = store.dead_summaries(B, None, 100).expect("read");
    assert!(listed_a.is_empty(), "{listed_a:?}");
    assert_eq!(listed_b.iter().map(|d| d.id).collect::<Vec<_>>(), [dead]);
    let replayed = h.call(|reply| Command::Replay {
        request: replay(B),
        reply,
    });
    assert_eq!(replayed.expect("B replays its own").replayed, 1);

    // Each tenant's figures under its own key.
    let stats = h.stats();
    let keys: Vec<&str> = stats
        .destinations
        .iter()
        .map(|d| d.destination.as_str())
        .collect();
    assert!(
        keys.contains(&"queue:q") && keys.contains(&"7/queue:q"),
        "{keys:?}"
    );

    // After a restart, B's endpoint is still B's and A still has none.
    let mut h = h.restarted();
    assert!(h.engine.endpoints.get(B, "e").is_some());
    assert!(h.engine.endpoints.get(A, "e").is_none());
    let refused = h.enqueue_message(h.message(Destination::endpoint(A, "e"), b"x"));
    assert!(matches!(refused, Err(Refusal::UnknownEndpoint { .. })));
    assert!(
        h.enqueue_message(h.message(Destination::endpoint(B, "e"), b"x"))
            .is_ok()
    );
    // And B's queue message (acknowledged) is not A's to receive; A's is still leased.
    assert!(receive(&mut h, B, "q").is_empty());
}

fn create(h: &mut Harness, name: &str) -> Result<super::Tenant, Refusal> {
    h.call(|reply| Command::PutTenant {
        record: Box::new(hookd_storage::store::TenantRecord {
            name: name.into(),
            ..Default::default()
        }),
        create: true,
        reply,
    })
}

fn delete(h: &mut Harness, name: &str, force: bool) -> Result<super::TenantDeleted, Refusal> {
    h.call(|reply| Command::DeleteTenant {
        name: name.into(),
        force,
        reply,
    })
}

/// Tenants are made, changed and deleted through the engine; a number is never given
/// twice; deleting one with live messages needs force, and takes its endpoints and its
/// live and dead messages with it.
#[test]
fn tenants_are_made_changed_and_deleted_and_a_number_is_never_given_twice() {
    let mut h = Harness::new();
    let acme = create(&mut h, "acme").expect("made");
    assert_eq!(acme.id, TenantId(1));
    assert!(matches!(
        create(&mut h, "acme"),
        Err(Refusal::TenantExists { .. })
    ));
    let updated = h
        .call(|reply| Command::PutTenant {
            record: Box::new(hookd_storage::store::TenantRecord {
                name: "acme".into(),
                display_name: "Acme Corp".into(),
                ..Default::default()
            }),
            create: false,
            reply,
        })
        .expect("updated");
    assert_eq!(
        (updated.id, updated.record.display_name.as_str()),
        (acme.id, "Acme Corp")
    );
    assert_eq!(updated.record.created_ms, acme.record.created_ms);
    let missing = h.call(|reply| Command::PutTenant {
        record: Box::new(hookd_storage::store::TenantRecord {
            name: "nobody".into(),
            ..Default::default()
        }),
        create: false,
        reply,
    });
    assert!(matches!(missing, Err(Refusal::NoTenant { .. })));
    let directory = h.engine.tenants.shared();
    let snapshot = directory.read().expect("readable").clone();
    assert_eq!(
        snapshot.named("acme").map(|t| t.id),
        Some(acme.id),
        "published after the commit"
    );
    assert!(snapshot.named("default").is_some());

    // Its objects and messages.
    let put = h.call(|reply| Command::PutEndpoint {
        tenant: acme.id,
        endpoint: Box::new(EndpointRecord {
            name: "e".into(),
            url: "https://acme.example/hook".into(),
            ..Default::default()
        }),
        reply,
    });
    assert!(put.is_ok());
    let live: Vec<MessageId> = (0..5)
        .map(|i| enqueue(&mut h, Destination::queue(acme.id, "q"), &[i], ""))
        .collect();
    let mut dead = h.message(Destination::queue(acme.id, "d"), b"poison");
    dead.max_attempts = 1;
    let dead = h.enqueue_message(dead).expect("enqueued").id;
    let leased = receive(&mut h, acme.id, "d");
    let nacked = h.call(|reply| Command::Nack {
        tenant: acme.id,
        lease: leased[0].lease,
        delay_ms: 0,
        reason: String::new(),
        reply,
    });
    assert!(nacked.is_ok());
    let kept = enqueue(&mut h, Destination::queue(A, "q"), b"default's", "");

    assert!(matches!(
        delete(&mut h, "acme", false),
        Err(Refusal::TenantBusy { live: 5, .. })
    ));
    assert!(matches!(
        delete(&mut h, "default", true),
        Err(Refusal::DefaultTenant)
    ));
    let removed = delete(&mut h, "acme", true).expect("deleted");
    assert_eq!((removed.messages, removed.objects), (6, 1));
    for id in live.iter().chain([&dead]) {
        assert!(h.stored(*id).is_none(), "{id} removed");
    }
    assert!(h.stored(kept).is_some(), "another tenant's message stays");
    assert!(h.engine.endpoints.get(acme.id, "e").is_none());
    let snapshot = directory.read().expect("readable").clone();
    assert!(snapshot.named("acme").is_none());
    assert!(matches!(
        delete(&mut h, "acme", true),
        Err(Refusal::NoTenant { .. })
    ));

    // The name is free again, under a new number, with nothing of the old one's; so after
    // a restart, where the tombstone keeps the number taken.
    let again = create(&mut h, "acme").expect("made again");
    assert_eq!(again.id, TenantId(2));
    assert!(receive(&mut h, again.id, "q").is_empty());
    let mut h = h.restarted();
    let snapshot = h.engine.tenants.shared().read().expect("readable").clone();
    assert_eq!(snapshot.named("acme").map(|t| t.id), Some(TenantId(2)));
    assert_eq!(snapshot.len(), 2, "default and the new acme");
    assert_eq!(create(&mut h, "beta").expect("made").id, TenantId(3));
    let store = &h.engine.store;
    let objects = store.objects(acme.id, hookd_core::scope::Kind::Endpoint);
    assert!(objects.expect("read").is_empty());
}

#[test]
fn a_tenants_stats_carry_its_destinations_alerts_only() {
    use hookd_core::alerts::AlertConfig;
    let mut config = super::harness::config();
    config.alerts = AlertConfig {
        evaluate_every_secs: 1,
        queue_depth_warning: 1,
        queue_depth_critical: 100,
        ..Default::default()
    };
    let mut h = Harness::with(config);
    let acme = create(&mut h, "acme").expect("made").id;
    for _ in 0..2 {
        h.enqueue_message(h.message(Destination::queue(acme, "q"), b"a"))
            .expect("acme's");
        h.enqueue_message(h.message(Destination::queue(A, "d"), b"d"))
            .expect("default's");
    }
    h.advance(1_000);
    let alerts = |h: &mut Harness, tenant: TenantId| -> Vec<(String, String)> {
        let stats = h
            .call(|reply| Command::Stats {
                tenant: Some(tenant),
                after: None,
                limit: 10,
                whole: true,
                reply,
            })
            .expect("stats");
        stats
            .alerts
            .iter()
            .filter(|a| a.level != "ok")
            .map(|a| (a.alert.to_owned(), a.destination.clone()))
            .collect()
    };
    let key = Destination::queue(acme, "q").key();
    assert_eq!(alerts(&mut h, acme), [("queue_depth".to_owned(), key)]);
    // Default's own, and not the whole hookd's totals ("*").
    assert_eq!(
        alerts(&mut h, A),
        [("queue_depth".to_owned(), "queue:d".to_owned())]
    );
    // The whole hookd's Stats have every one, and the totals'.
    let all: Vec<String> = h
        .stats()
        .alerts
        .iter()
        .filter(|a| a.alert == "queue_depth" && a.level != "ok")
        .map(|a| a.destination.clone())
        .collect();
    assert_eq!(all.len(), 3, "{all:?}");
}
