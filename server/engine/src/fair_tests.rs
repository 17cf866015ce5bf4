//! Push attempts shared between tenants (issue #52, `fair.rs`): a tenant whose every
//! attempt hangs cannot keep another's waiting, tenants at once share by weight, and a
//! deleted tenant's attempts are counted out.

use super::harness::{Harness, config};
use super::{Command, Tenant};
use hookd_core::destination::Destination;
use hookd_core::push::{Delivery, Verdict};
use hookd_core::scope::TenantId;
use hookd_storage::store::{EndpointRecord, TenantRecord};

/// A harness whose hookd holds at most `budget` push attempts at once.
fn harness(budget: u64) -> Harness {
    let mut c = config();
    c.push.max_attempts_in_flight = budget;
    Harness::with(c)
}

fn tenant(h: &mut Harness, name: &str, weight: u32) -> TenantId {
    let made: Tenant = h
        .call(|reply| Command::PutTenant {
            record: Box::new(TenantRecord {
                name: name.into(),
                weight,
                ..Default::default()
            }),
            create: true,
            reply,
        })
        .expect("made");
    made.id
}

fn endpoint_record(name: &str, paused: bool) -> EndpointRecord {
    EndpointRecord {
        name: name.into(),
        url: format!("https://{name}.example/hook"),
        max_in_flight: 64,
        paused,
        ..Default::default()
    }
}

fn endpoint(h: &mut Harness, tenant: TenantId, name: &str) {
    h.call(|reply| Command::PutEndpoint {
        tenant,
        endpoint: Box::new(endpoint_record(name, false)),
        reply,
    })
    .expect("stored");
}

fn send(h: &mut Harness, tenant: TenantId, endpoint: &str, n: usize) {
    for i in 0..n {
        let m = h.message(Destination::endpoint(tenant, endpoint), &[i as u8]);
        h.enqueue_message(m).expect("enqueued");
    }
}

fn of(sent: &[Delivery], tenant: TenantId) -> usize {
    sent.iter()
        .filter(|d| d.target.share.tenant == tenant.0)
        .count()
}

#[test]
fn a_tenant_whose_attempts_all_hang_cannot_keep_another_waiting() {
    let mut h = harness(8);
    let noisy = tenant(&mut h, "noisy", 1);
    let quiet = tenant(&mut h, "quiet", 1);
    for e in ["h1", "h2", "h3", "h4"] {
        endpoint(&mut h, noisy, e);
        send(&mut h, noisy, e, 50);
    }
    endpoint(&mut h, quiet, "e");
    // Alone, the noisy tenant takes the whole budget with its first endpoint; each endpoint
    // after it may still start its part of the tenant's cap (8/2, 8/3, 8/4), so that one
    // endpoint's hanging attempts do not keep its tenant's others waiting either. None of
    // them ever answers.
    let hanging = h.sent();
    assert_eq!(of(&hanging, noisy), 8 + 4 + 2 + 2);
    assert_eq!(h.engine.index.push_flight.total(), 16);
    // The quiet tenant's events go at once, past the budget: it is under its share (4).
    send(&mut h, quiet, "e", 3);
    let mut quiet_sent = h.sent();
    assert_eq!((of(&quiet_sent, quiet), of(&quiet_sent, noisy)), (3, 0));
    // Up to its share, and no further while the budget is out.
    send(&mut h, quiet, "e", 5);
    let sent = h.sent();
    assert_eq!((of(&sent, quiet), of(&sent, noisy)), (1, 0));
    quiet_sent.extend(sent);
    assert_eq!(h.engine.index.push_flight.of(quiet), 4);
    // One of the noisy tenant's attempts ends: with 19 out (over the budget) and the
    // noisy tenant over its share and its endpoints over their parts of it (4 / 4), its
    // next waits; the quiet tenant's attempts ending let the quiet tenant's waiting ones go.
    h.report(&hanging[0], Verdict::Delivered { status: 200 });
    assert!(h.sent().is_empty());
    assert_eq!(h.engine.index.push_flight.of(noisy), 15);
    h.report_all(&quiet_sent[..2], Verdict::Delivered { status: 200 });
    let sent = h.sent();
    assert_eq!((of(&sent, quiet), of(&sent, noisy)), (2, 0));
}

#[test]
fn tenants_waiting_at_once_share_the_budget_by_weight() {
    let mut h = harness(8);
    let a = tenant(&mut h, "a", 3);
    let b = tenant(&mut h, "b", 1);
    // Both endpoints paused, with plenty waiting; then both resumed in one round.
    for (t, name) in [(a, "ea"), (b, "eb")] {
        h.call(|reply| Command::PutEndpoint {
            tenant: t,
            endpoint: Box::new(endpoint_record(name, true)),
            reply,
        })
        .expect("stored");
        send(&mut h, t, name, 20);
    }
    assert!(h.sent().is_empty());
    let (tx_a, _ra) = tokio::sync::oneshot::channel();
    let (tx_b, _rb) = tokio::sync::oneshot::channel();
    h.engine.round(vec![
        Command::Pause {
            tenant: a,
            name: "ea".into(),
            pause: None,
            reply: tx_a,
        },
        Command::Pause {
            tenant: b,
            name: "eb".into(),
            pause: None,
            reply: tx_b,
        },
    ]);
    let sent = h.sent();
    // Up to half of B (4) what is ready goes in turn (a's destination came first); from
    // then on by shares of 8 at weights 3 : 1, 6 and 2.
    assert_eq!((of(&sent, a), of(&sent, b)), (6, 2), "{sent:?}");
    let flight = |h: &Harness| {
        let f = &h.engine.index.push_flight;
        (f.of(a), f.of(b))
    };
    let (of_a, of_b): (Vec<&Delivery>, Vec<&Delivery>) =
        sent.iter().partition(|d| d.target.share.tenant == a.0);
    // What an attempt ending frees goes back to its tenant, under its share: b's to b...
    h.report(of_b[0], Verdict::Delivered { status: 200 });
    let next = h.sent();
    assert_eq!((of(&next, a), of(&next, b)), (0, 1));
    // ...and a's to a.
    h.report(of_a[0], Verdict::Delivered { status: 200 });
    let next = h.sent();
    assert_eq!((of(&next, a), of(&next, b)), (1, 0));
    assert_eq!(flight(&h), (6, 2));
}

#[test]
fn a_deleted_tenants_attempts_are_counted_out() {
    let mut h = harness(8);
    let gone = tenant(&mut h, "gone", 1);
    endpoint(&mut h, gone, "e");
    send(&mut h, gone, "e", 3);
    assert_eq!(h.sent().len(), 3);
    assert_eq!(h.engine.index.push_flight.of(gone), 3);
    h.call(|reply| Command::DeleteTenant {
        name: "gone".into(),
        force: true,
        reply,
    })
    .expect("deleted");
    assert_eq!(h.engine.index.push_flight.total(), 0);
}

#[test]
fn a_weight_change_reaches_the_targets_without_rebuilding_them() {
    let mut h = harness(8);
    let t = tenant(&mut h, "t", 2);
    endpoint(&mut h, t, "e");
    send(&mut h, t, "e", 1);
    let sent = h.sent();
    assert_eq!(sent[0].target.share.weight(), 2);
    let _: Tenant = h
        .call(|reply| Command::PutTenant {
            record: Box::new(TenantRecord {
                name: "t".into(),
                weight: 5,
                ..Default::default()
            }),
            create: false,
            reply,
        })
        .expect("updated");
    assert_eq!(sent[0].target.share.weight(), 5);
    // An update naming no weight keeps it.
    let kept: Tenant = h
        .call(|reply| Command::PutTenant {
            record: Box::new(TenantRecord {
                name: "t".into(),
                ..Default::default()
            }),
            create: false,
            reply,
        })
        .expect("updated");
    assert_eq!(kept.record.weight, 5);
}
