//! Which log segments go, and which are compacted (the log is the message heap: see
//! `store::heap`).
//!
//! A segment may be deleted only once every record in it is applied and checkpointed (it
//! ends at or before the checkpoint: a restart never replays it) and no live message's
//! record is in it (its row in `segments` counts none, or it has no row: nothing ever
//! pointed into it). Of those, a segment goes once its newest message is older than
//! `retention`, or, oldest first, while the log is over `retention_bytes`. Until then the
//! payloads of completed messages in it stay readable (GetMessage).
//!
//! A segment that would go but for a few live messages (retrying for days, dead letters)
//! is compacted: when its live records are at most a quarter of it, the engine writes them
//! again (into the current segment, through the log like any change), the apply stage
//! moves their pointers, and the emptied segment goes at a later reclaim. So the log's
//! disk use stays within `retention_bytes`, plus the live messages' records, plus at most
//! three times the live records held in segments kept because copying them would not pay
//! (more than a quarter live), plus the segments not yet checkpointed.

use crate::store::SegmentRow;
use crate::wal::Lsn;

/// A segment is compacted when its live records are at most `1 / COMPACT_RATIO` of it.
pub(crate) const COMPACT_RATIO: u64 = 4;

/// How long and how much the log keeps of what is no longer live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// A completed message's payload stays readable at least this long after the newest
    /// message of its segment was created...
    pub ms: u64,
    /// ...while the log's segments stay within this many bytes (oldest go first).
    pub bytes: u64,
}

/// What a reclaim decides, and the log's figures at that moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Segments to delete (their first positions).
    pub delete: Vec<Lsn>,
    /// Segments whose live records are to be copied forward.
    pub compact: Vec<Lsn>,
    /// The log's bytes before the deletions.
    pub log_bytes: u64,
    /// Bytes the deletions free.
    pub freed_bytes: u64,
    /// Bytes compaction would free (the compacted segments' bytes).
    pub reclaimable_bytes: u64,
    /// The first position still kept, and the newest creation time of its messages (what
    /// GetMessage can still show the payload of): 0 if unknown.
    pub kept_from: Lsn,
    pub kept_from_ms: u64,
    /// Live messages' records, in bytes.
    pub live_bytes: u64,
}

/// Decides a reclaim. `segments`: every segment (first position, bytes), in order, the
/// current one last; `rows`: the `segments` table; `checkpointed`: the log position the
/// last checkpoint made durable in redb.
pub fn plan(
    segments: &[(Lsn, u64)],
    rows: &[(Lsn, SegmentRow)],
    checkpointed: Lsn,
    now_ms: u64,
    retention: Retention,
) -> Plan {
    let row = |start: Lsn| {
        rows.binary_search_by_key(&start, |r| r.0)
            .ok()
            .map(|i| rows[i].1)
    };
    let mut out = Plan {
        log_bytes: segments.iter().map(|s| s.1).sum(),
        live_bytes: rows.iter().map(|r| r.1.live_bytes).sum(),
        ..Plan::default()
    };
    let mut total = out.log_bytes;
    let mut kept = None;
    for (i, &(start, len)) in segments.iter().enumerate() {
        // Closed and checkpointed: the next segment starts at or before the checkpoint.
        let closed = segments
            .get(i + 1)
            .is_some_and(|next| next.0 <= checkpointed);
        // No row: no record in it was ever pointed to.
        let (r, pointed) = row(start).map_or((SegmentRow::default(), false), |r| (r, true));
        let expired = !pointed || now_ms.saturating_sub(r.newest_ms) >= retention.ms;
        let over = total > retention.bytes;
        if closed && (expired || over) {
            if r.live == 0 {
                out.delete.push(start);
                out.freed_bytes += len;
                total -= len;
                continue;
            }
            if r.live_bytes.saturating_mul(COMPACT_RATIO) <= len {
                out.compact.push(start);
                out.reclaimable_bytes += len;
            }
        }
        kept.get_or_insert((start, r.newest_ms));
    }
    (out.kept_from, out.kept_from_ms) = kept.unwrap_or_default();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(live: u64, live_bytes: u64, newest_ms: u64) -> SegmentRow {
        SegmentRow {
            live,
            live_bytes,
            newest_ms,
        }
    }

    const DAY: Retention = Retention {
        ms: 86_400_000,
        bytes: u64::MAX,
    };

    #[test]
    fn a_segment_goes_only_when_closed_checkpointed_unpinned_and_out_of_retention() {
        let segs = [(0, 100), (100, 100), (200, 100), (300, 50)];
        let now = 100_000_000;
        let old = now - DAY.ms;
        let rows = [
            (0, row(0, 0, old)),
            (100, row(1, 10, old)),
            (200, row(0, 0, old)),
            (300, row(0, 0, old)),
        ];
        // Checkpointed at 250: segment 200 is not closed (300 > 250).
        let p = plan(&segs, &rows, 250, now, DAY);
        assert_eq!(p.delete, vec![0]);
        assert_eq!(p.compact, vec![100], "10 live bytes of 100: compacted");
        assert_eq!(p.freed_bytes, 100);
        // Checkpointed at 300: 200 goes too; 300 (the current one) never.
        let p = plan(&segs, &rows, 300, now, DAY);
        assert_eq!(p.delete, vec![0, 200]);
        // Within retention: nothing goes, nothing is compacted.
        let p = plan(&segs, &rows, 300, old + 1, DAY);
        assert!(p.delete.is_empty() && p.compact.is_empty());
        assert_eq!((p.kept_from, p.kept_from_ms), (0, old));
        // No row: nothing ever pointed into it (a segment of an older format).
        let p = plan(&segs, &[], 300, 0, DAY);
        assert_eq!(p.delete, vec![0, 100, 200]);
    }

    #[test]
    fn over_the_byte_budget_the_oldest_unpinned_go_first_and_a_busy_segment_is_not_copied() {
        let segs = [(0, 100), (100, 100), (200, 100), (300, 100), (400, 10)];
        let now = 1_000;
        let rows = [
            (0, row(0, 0, now)),
            (100, row(5, 60, now)),
            (200, row(0, 0, now)),
            (300, row(0, 0, now)),
        ];
        let budget = Retention {
            ms: u64::MAX,
            bytes: 250,
        };
        let p = plan(&segs, &rows, 400, now, budget);
        // 410 bytes: 0 goes (310), 100 is pinned and 60% live (kept, not compacted),
        // 200 goes (210 <= 250): 300 stays.
        assert_eq!(p.delete, vec![0, 200]);
        assert!(p.compact.is_empty());
        assert_eq!(p.kept_from, 100);
        assert_eq!(p.live_bytes, 60);
    }
}
