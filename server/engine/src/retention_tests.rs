//! Retention per tenant and per destination (issue #53, 4), on the harness's manual clock:
//! a queue's shorter retention forgets its completed messages before the server's would,
//! a longer one keeps them past it, and a tenant's applies to destinations that set none.

use super::Command;
use super::harness::Harness;
use hookd_core::scope::TenantId;
use hookd_storage::store::Kept;

const MINUTE: u64 = 60_000;
const HOUR: u64 = 60 * MINUTE;

fn queue(h: &mut Harness, name: &str, retention_secs: u64) {
    let def = super::QueueDef {
        name: name.into(),
        fifo: None,
        description: String::new(),
        retention_secs,
    };
    h.call(|reply| Command::PutQueue {
        tenant: TenantId::DEFAULT,
        def: Box::new(def),
        reply,
    })
    .expect("put queue");
}

/// Enqueued to `name`, received and acked: completed.
fn completed(h: &mut Harness, name: &str) -> hookd_core::ids::MessageId {
    let id = h.enqueue(name, format!("payload of {name}").as_bytes());
    let leased = h.receive(name, 1, 30_000);
    assert_eq!(leased.len(), 1);
    h.ack(&[leased[0].lease]).expect("ack");
    id
}

/// Moves the clock `ms` in steps of a minute (each a round: the sweep's passes start
/// once a minute).
fn pass(h: &mut Harness, ms: u64) {
    let steps = ms.div_ceil(MINUTE);
    for _ in 0..steps {
        h.advance(MINUTE);
    }
    // A pass may take a few steps.
    for _ in 0..4 {
        h.advance(1_000);
    }
}

fn kept(h: &Harness, id: hookd_core::ids::MessageId) -> (bool, bool) {
    let summary = h.done(id).is_some();
    let payload = matches!(h.engine.store.completed_record(id), Ok(Kept::Record(_)));
    (summary, payload)
}

#[test]
fn a_destinations_retention_forgets_sooner_or_keeps_longer_than_the_servers() {
    // The server keeps completed messages 24 h (summary and payload). Small segments, so
    // the one holding these payloads closes and would be deleted at the server's 24 h.
    let mut h = Harness::with_segments(super::harness::config(), 2 << 10);
    queue(&mut h, "short", 120);
    queue(&mut h, "long", 3 * 24 * 3_600);
    let short = completed(&mut h, "short");
    let long = completed(&mut h, "long");
    let plain = completed(&mut h, "plain");
    for _ in 0..40 {
        completed(&mut h, "filler");
    }
    for id in [short, long, plain] {
        assert_eq!(kept(&h, id), (true, true), "{id}");
    }
    // Two minutes on: the short queue's is gone, summary and payload; the rest stay.
    pass(&mut h, 3 * MINUTE);
    assert_eq!(kept(&h, short), (false, false));
    assert_eq!(kept(&h, long), (true, true));
    assert_eq!(kept(&h, plain), (true, true));
    // Past the server's 24 h: the plain queue's is gone, the long one's kept.
    pass(&mut h, 24 * HOUR);
    assert_eq!(kept(&h, plain), (false, false));
    assert_eq!(
        kept(&h, long),
        (true, true),
        "kept past the server's retention"
    );
    // Past its own three days: gone too.
    pass(&mut h, 2 * 24 * HOUR);
    assert_eq!(kept(&h, long), (false, false));
}

#[test]
fn a_tenants_retention_applies_where_its_destination_sets_none() {
    let mut h = Harness::new();
    let update = super::TenantDef {
        name: "default".into(),
        retention_secs: 300,
        ..Default::default()
    };
    h.call(|reply| Command::PutTenant {
        record: Box::new(update.into_record()),
        create: false,
        reply,
    })
    .expect("tenant");
    queue(&mut h, "own", 2 * 3_600);
    let tenants = completed(&mut h, "plain");
    let own = completed(&mut h, "own");
    pass(&mut h, 6 * MINUTE);
    assert_eq!(kept(&h, tenants), (false, false), "the tenant's 5 minutes");
    assert_eq!(kept(&h, own), (true, true), "the queue's own 2 hours");
    pass(&mut h, 2 * HOUR);
    assert_eq!(kept(&h, own), (false, false));
}

/// A purge (issue #53, 4) deletes the search index's rows that carry the event's values
/// (its event id, its idempotency key) with its bytes, and leaves another message's.
#[test]
fn a_purge_takes_the_index_rows_that_carry_the_events_values() {
    use hookd_core::destination::Destination;
    use hookd_storage::store::MessageRecord;
    let mut h = Harness::new();
    let mut ids = Vec::new();
    for n in 0..2 {
        let now = h.now();
        let record = MessageRecord {
            payload: format!("payload {n}").into_bytes(),
            created_ms: now,
            event_id: format!("evt-customer-{n}"),
            idempotency_key: format!("key-customer-{n}"),
            ..Default::default()
        };
        let m = super::NewMessage::from_record(
            hookd_core::ids::MessageId::generate(now),
            Destination::queue(TenantId::DEFAULT, "q"),
            record,
            0,
            0,
        );
        ids.push(h.enqueue_message(m).expect("enqueued").id);
    }
    let leased = h.receive("q", 2, 30_000);
    let leases: Vec<_> = leased.iter().map(|l| l.lease).collect();
    h.ack(&leases).expect("ack");
    // A checkpoint, so the index rows are in redb.
    h.advance(20_000);
    let before = h.engine.store.search_rows().expect("rows");
    let erased = h.call(|reply| Command::Erase {
        tenant: TenantId::DEFAULT,
        ids: vec![ids[0]],
        reply,
    });
    assert_eq!(erased.expect("erase").erased, 1);
    // The next checkpoint, then its reclaim overwrites the record and drops its rows.
    h.advance(20_000);
    h.advance(20_000);
    let after = h.engine.store.search_rows().expect("rows");
    assert_eq!(
        before - after,
        2,
        "its event id's and its key's rows: {before} -> {after}"
    );
    assert_eq!(h.engine.pipeline.syncer.scrub_progress().records, 1);
}
