//! The log as the message heap (`hookd_storage::store::heap`), through the engine: a
//! record is read back from its segment, a completed message's payload stays readable
//! while retention keeps its segment, and a segment pinned by a few live messages is
//! compacted (their records copied forward, the segment deleted) without a byte changing.

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_storage::pipeline::Retention;
use hookd_storage::store::Kept;

use crate::harness::{self, Harness};

/// Segments of about 4 KiB, so a few dozen messages fill several.
const SEGMENT: u64 = 4 << 10;

fn harness(retention: Retention) -> Harness {
    let mut config = harness::config();
    config.log_retention = retention;
    config.checkpoint_interval_ms = 1_000;
    Harness::with_segments(config, SEGMENT)
}

/// The log's segment files, by first position.
fn segments(h: &Harness) -> Vec<u64> {
    let mut out: Vec<u64> = std::fs::read_dir(h.dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_prefix("wal-")?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect();
    out.sort_unstable();
    out
}

/// Enqueues and acknowledges `n` messages of `size` bytes to queue `q`: log to fill
/// segments with, none of it live.
fn churn(h: &mut Harness, n: usize, size: usize) {
    for i in 0..n {
        h.enqueue("churn", &vec![i as u8; size]);
        let leased = h.receive("churn", 1, 30_000);
        assert_eq!(h.ack(&[leased[0].lease]), Ok(1));
    }
}

/// A checkpoint (and the reclaim after it) is due: the clock moves past the interval and
/// a round writes something.
fn checkpoint(h: &mut Harness, ms: u64) {
    h.advance(ms);
    churn(h, 1, 10);
}

fn kept(h: &Harness, id: MessageId) -> Option<Vec<u8>> {
    match h.engine.store.completed_record(id).expect("a read") {
        Kept::Record(r) => Some(r.payload),
        Kept::Expired => None,
    }
}

#[test]
fn a_completed_messages_payload_reads_back_until_retention_lets_its_segment_go() {
    let mut h = harness(Retention {
        ms: 60_000,
        bytes: u64::MAX,
    });
    let payload = b"kept after its ack".to_vec();
    let id = h.enqueue("q", &payload);
    let leased = h.receive("q", 1, 30_000);
    // Read back from the log (the round that stored it is applied: redb points to it).
    assert_eq!(leased[0].payload, payload);
    assert_eq!(h.ack(&[leased[0].lease]), Ok(1));
    assert_eq!(kept(&h, id).as_deref(), Some(&payload[..]));
    // More log, closed segments, checkpoints: within retention, nothing goes.
    churn(&mut h, 60, 200);
    checkpoint(&mut h, 2_000);
    assert!(segments(&h).len() > 2, "{:?}", segments(&h));
    assert_eq!(segments(&h)[0], 0, "the first segment is kept");
    assert_eq!(kept(&h, id).as_deref(), Some(&payload[..]));
    let stats = h.stats().storage;
    assert_eq!(stats.log_deleted_segments, 0);
    assert!(stats.log_segments > 2);
    // Past retention: the segments nothing live points into go, and the payload with them.
    checkpoint(&mut h, 61_000);
    assert_eq!(kept(&h, id), None, "expired");
    assert_ne!(segments(&h)[0], 0, "{:?}", segments(&h));
    let stats = h.stats().storage;
    assert!(stats.log_deleted_segments > 0 && stats.log_freed_bytes > 0);
    // The summary outlives the payload (completed_retention_secs).
    assert!(h.done(id).is_some());
}

#[test]
fn a_segment_pinned_by_a_few_live_messages_is_compacted_and_their_bytes_stay_the_same() {
    let mut h = harness(Retention {
        ms: 1_000,
        bytes: u64::MAX,
    });
    let slow: Vec<u8> = (0..=255u8).collect();
    let pinned = h.enqueue("slow", &slow);
    let other = h.message(
        Destination::queue(TenantId::DEFAULT, "slow"),
        b"another live one",
    );
    let other = h.enqueue_message(other).unwrap().id;
    churn(&mut h, 60, 200);
    let before = segments(&h);
    assert!(before.len() > 3, "{before:?}");
    // Out of retention: the first segment is pinned by two small live records, so it is
    // compacted; the sweep copies them forward, and the next reclaim deletes it.
    checkpoint(&mut h, 2_000);
    let stats = h.stats().storage;
    assert_eq!(stats.log_compacting_segments, 1, "{stats:?}");
    assert!(stats.log_reclaimable_bytes >= SEGMENT);
    h.advance(300);
    assert_eq!(h.stats().storage.log_compacted_records, 2);
    checkpoint(&mut h, 2_000);
    assert_ne!(segments(&h)[0], 0, "the compacted segment is deleted");
    // Both read back byte for byte from where they moved.
    assert_eq!(h.stored(other).unwrap().record.payload, b"another live one");
    let leased = h.receive("slow", 10, 30_000);
    let got: Vec<_> = leased.iter().map(|l| (l.id, l.payload.clone())).collect();
    assert!(got.contains(&(pinned, slow.clone())), "{got:?}");
    assert!(
        got.contains(&(other, b"another live one".to_vec())),
        "{got:?}"
    );
    // And after a restart of the file (a fresh reopen replays nothing new).
    let stats = h.stats().storage;
    assert_eq!(stats.log_compacting_segments, 0);
}
