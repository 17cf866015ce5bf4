//! The engine's view of the tables: redb's last applied snapshot plus the overlay of
//! writes not applied yet (`overlay.rs`), and the row operations the engine composes.
//! Only the engine thread holds a [`Tables`]; [`Apply`] is the apply stage's (and
//! recovery's) side, which performs log records on redb.
//!
//! Every method that changes a row records the change in the overlay and in the round's
//! [`RowLog`] (the record the write-ahead log makes durable), and marks that the round
//! wrote something ([`Tables::wrote`]). The tables themselves are private, so no write
//! can bypass that: the engine's view, the log and (after the apply stage) redb cannot
//! disagree about a round.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use prost::Message;
use redb::{ReadOnlyTable, ReadTransaction, ReadableTable, Table, WriteTransaction};

use super::heap::{Heap, Pointer, SegmentRow, Stored};
use super::overlay::{Overlay, Seen};
use super::records::{
    AttemptRecord, DoneRecord, EndpointRecord, HistoryRecord, LaneRow, MessageRecord, ScheduleEntry,
};
use super::rowlog::{Change, RowLog, TableId};
use super::seal::open;
use super::{
    ATTEMPTS, CATALOG, DEAD, DONE, HISTORY, IDEMPOTENCY, LANES, MESSAGES, RETAINED, SCHEDULE,
    SCRUBS, SEGMENTS, StoreError, catalog_key, dead_key, dead_key_id, dead_prefix,
};
use crate::wal::Lsn;
use hookd_core::ids::MessageId;
use hookd_core::scope::{Kind, ObjectRef, TenantId};

/// Up to `scan` rows of a byte-keyed table (the overlay in front) after `cursor`, and the
/// cursor to continue from (`None`: the table's end was reached).
fn rows_after(
    overlay: &Overlay,
    id: TableId,
    table: &ReadOnlyTable<&'static [u8], &'static [u8]>,
    cursor: Option<&[u8]>,
    scan: usize,
) -> Result<Scanned, StoreError> {
    let lower = cursor.map_or(Bound::Unbounded, Bound::Excluded);
    let base =
        table
            .range::<&[u8]>((lower, Bound::Unbounded))?
            .map(|row| -> Result<_, StoreError> {
                let (k, v) = row?;
                let value = open(id, k.value(), v.value())?.to_vec();
                Ok((k.value().to_vec(), value))
            });
    let rows = overlay.merge(id, (lower, Bound::Unbounded), base, scan)?;
    let last = (rows.len() >= scan)
        .then(|| rows.last().map(|(k, _)| k.clone()))
        .flatten();
    Ok((rows, last))
}

/// Rows (key, value) of a scan, and where the next one continues.
type Scanned = (Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>);

/// What one step of a sweep by age (the idempotency keys', the lanes') did.
#[derive(Debug)]
pub struct RowSweep {
    /// Rows it looked at.
    pub read: usize,
    /// Rows past their retention it removed.
    pub removed: usize,
    /// The time of the oldest row it kept (none kept: `None`).
    pub oldest_kept_ms: Option<u64>,
    /// Where the pass continues (`None`: it is complete).
    pub cursor: Option<Vec<u8>>,
}

/// What one step of the dead-letter retention sweep did.
#[derive(Debug)]
pub struct DeadSweep {
    /// Dead letters it looked at.
    pub read: usize,
    /// Those past their retention it deleted: destination key, id.
    pub removed: Vec<(String, MessageId)>,
    /// When the oldest one it kept was dead-lettered (none kept: `None`).
    pub oldest_kept_ms: Option<u64>,
    /// Where the pass continues (`None`: it is complete).
    pub cursor: Option<Vec<u8>>,
}

/// Every table of redb's snapshot, with the overlay in front.
pub struct Tables<'a> {
    messages: ReadOnlyTable<u128, &'static [u8]>,
    schedule: ReadOnlyTable<u128, &'static [u8]>,
    history: ReadOnlyTable<u128, &'static [u8]>,
    attempts: ReadOnlyTable<&'static [u8], &'static [u8]>,
    done: ReadOnlyTable<u128, &'static [u8]>,
    dead: ReadOnlyTable<&'static [u8], &'static [u8]>,
    idempotency: ReadOnlyTable<&'static [u8], &'static [u8]>,
    retained: ReadOnlyTable<u128, &'static [u8]>,
    lanes: ReadOnlyTable<&'static [u8], &'static [u8]>,
    catalog: ReadOnlyTable<&'static [u8], &'static [u8]>,
    overlay: &'a mut Overlay,
    /// Where records that redb only points to are read from.
    heap: Heap,
    /// Every change, in order, for the write-ahead log (empty: the round wrote nothing).
    log: RowLog,
}

impl std::fmt::Debug for Tables<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tables")
    }
}

fn id_key(id: MessageId) -> [u8; 16] {
    id.0.to_be_bytes()
}

/// A u128-keyed row of redb's snapshot, or of the overlay in front of it.
fn get_u128(
    overlay: &Overlay,
    table: TableId,
    base: &ReadOnlyTable<u128, &'static [u8]>,
    id: MessageId,
) -> Result<Option<Vec<u8>>, StoreError> {
    match overlay.get(table, &id_key(id)) {
        Seen::Put(v) => Ok(Some(v.to_vec())),
        Seen::Removed => Ok(None),
        Seen::Unknown => match base.get(id.0)? {
            Some(v) => Ok(Some(open(table, &id_key(id), v.value())?.to_vec())),
            None => Ok(None),
        },
    }
}

fn get_bytes(
    overlay: &Overlay,
    table: TableId,
    base: &ReadOnlyTable<&'static [u8], &'static [u8]>,
    key: &[u8],
) -> Result<Option<Vec<u8>>, StoreError> {
    match overlay.get(table, key) {
        Seen::Put(v) => Ok(Some(v.to_vec())),
        Seen::Removed => Ok(None),
        Seen::Unknown => match base.get(key)? {
            Some(v) => Ok(Some(open(table, key, v.value())?.to_vec())),
            None => Ok(None),
        },
    }
}

impl<'a> Tables<'a> {
    /// The engine's view for one round: `txn` is a snapshot taken after every round the
    /// overlay no longer holds was applied.
    pub fn open(
        txn: &ReadTransaction,
        overlay: &'a mut Overlay,
        heap: &Heap,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            messages: txn.open_table(MESSAGES)?,
            schedule: txn.open_table(SCHEDULE)?,
            history: txn.open_table(HISTORY)?,
            attempts: txn.open_table(ATTEMPTS)?,
            done: txn.open_table(DONE)?,
            dead: txn.open_table(DEAD)?,
            idempotency: txn.open_table(IDEMPOTENCY)?,
            retained: txn.open_table(RETAINED)?,
            lanes: txn.open_table(LANES)?,
            catalog: txn.open_table(CATALOG)?,
            overlay,
            heap: heap.clone(),
            log: RowLog::default(),
        })
    }

    /// Whether any row changed since these tables were opened: the round must then be
    /// logged before anyone is told of the change.
    pub fn wrote(&self) -> bool {
        !self.log.is_empty()
    }

    /// The round's changes, encoded for the write-ahead log (empty if none).
    pub fn into_log(self) -> Vec<u8> {
        self.log.into_bytes()
    }

    fn put(&mut self, table: TableId, key: &[u8], value: &[u8]) {
        self.overlay.put(table, key, value);
        self.log.put(table, key, value);
    }

    fn remove(&mut self, table: TableId, key: &[u8]) {
        self.overlay.remove(table, key);
        self.log.remove(table, key);
    }

    /// Stores a new message: its encoded [`MessageRecord`] and its schedule row.
    pub fn insert_message(
        &mut self,
        id: MessageId,
        record: &[u8],
        entry: &ScheduleEntry,
    ) -> Result<(), StoreError> {
        let key = id_key(id);
        self.put(TableId::Messages, &key, record);
        self.put(TableId::Schedule, &key, &entry.encode());
        Ok(())
    }

    /// Stores a fan-out's further delivery `id`: the record of `source` (put by this round
    /// with [`Tables::insert_message`]; its encoded bytes are `source_record`) for
    /// `entry.destination`. The log record names the source instead of holding the record
    /// again, so the payload is written once however many subscribers share it; the apply
    /// stage points this message's row at the source's bytes (see `heap`).
    pub fn insert_copy(
        &mut self,
        id: MessageId,
        source: MessageId,
        source_record: &[u8],
        entry: &ScheduleEntry,
    ) -> Result<(), StoreError> {
        self.copy(id, source, source_record, entry.destination.as_bytes());
        self.put(TableId::Schedule, &id_key(id), &entry.encode());
        Ok(())
    }

    /// Message `id`'s record is `source`'s (`source_record`) for `destination`: the same
    /// copy in the overlay (the record held once, see `Overlay::share`) as in the log.
    fn copy(&mut self, id: MessageId, source: MessageId, source_record: &[u8], destination: &[u8]) {
        self.overlay.share(source.0, source_record);
        self.put(
            TableId::Messages,
            &id_key(id),
            &super::heap::copy_of(source.0, destination),
        );
    }

    /// A live message's record: from the overlay while its round is not applied, else
    /// from the log, where redb points (see `heap`).
    pub fn record(&self, id: MessageId) -> Result<Option<MessageRecord>, StoreError> {
        match self.record_bytes(id)? {
            Some(v) => Ok(Some(MessageRecord::decode(v.as_slice())?)),
            None => Ok(None),
        }
    }

    /// A live message's encoded record (`None`: no such message).
    fn record_bytes(&self, id: MessageId) -> Result<Option<Vec<u8>>, StoreError> {
        match self.overlay.get(TableId::Messages, &id_key(id)) {
            Seen::Put(v) => match super::heap::parse_copy(v) {
                Some((source, destination)) => match self.overlay.shared(source) {
                    Some(record) => Ok(Some(super::heap::with_destination(
                        record.to_vec(),
                        destination,
                    ))),
                    None => Err(StoreError::Corrupt(format!(
                        "message {id} is a copy of a record the overlay no longer holds"
                    ))),
                },
                None => Ok(Some(v.to_vec())),
            },
            Seen::Removed => Ok(None),
            Seen::Unknown => match self.messages.get(id.0)? {
                Some(v) => {
                    let value = open(TableId::Messages, &id_key(id), v.value())?;
                    match self.heap.resolve(value)? {
                        Some(bytes) => Ok(Some(bytes)),
                        // A live message's segment is kept until its pointer moves.
                        None => Err(StoreError::Corrupt(format!(
                            "the log segment holding live message {id}'s record is gone"
                        ))),
                    }
                }
                None => Ok(None),
            },
        }
    }

    /// The size of a message's encoded record (what the byte watermarks count).
    pub fn record_len(&self, id: MessageId) -> Result<u32, StoreError> {
        match self.overlay.get(TableId::Messages, &id_key(id)) {
            Seen::Put(v) => {
                let len = super::heap::parse_copy(v)
                    .and_then(|(source, _)| self.overlay.shared(source))
                    .map_or(v.len(), <[u8]>::len);
                Ok(u32::try_from(len).unwrap_or(u32::MAX))
            }
            Seen::Removed => Ok(0),
            Seen::Unknown => match self.messages.get(id.0)? {
                Some(v) => Ok(Stored::of(open(TableId::Messages, &id_key(id), v.value())?)?.len()),
                None => Ok(0),
            },
        }
    }

    /// One step of a compaction pass: among up to `scan` live messages after `cursor` (in
    /// id order), those whose record lies in one of `segments` are written again (their
    /// record goes into this round's log record, and the apply stage moves their pointer
    /// there). How many moved, and where the pass continues (`None`: it is complete).
    pub fn relocate(
        &mut self,
        segments: &[Lsn],
        cursor: Option<MessageId>,
        scan: usize,
    ) -> Result<(usize, Option<MessageId>), StoreError> {
        let lower = cursor.map_or(Bound::Unbounded, |c| Bound::Excluded(c.0));
        let mut moved = 0;
        let mut last = None;
        let mut seen = 0;
        let mut found = Vec::new();
        for row in self.messages.range((lower, Bound::Unbounded))? {
            let (k, v) = row?;
            let id = MessageId(k.value());
            seen += 1;
            last = Some(id);
            let value = open(TableId::Messages, &id_key(id), v.value())?;
            if let Some(p) = Stored::of(value)?.pointer()
                && segments.contains(&p.segment)
            {
                found.push((id, p));
            }
            if seen >= scan {
                break;
            }
        }
        // A record shared by a fan-out's deliveries is copied once per pass step: the
        // first delivery found takes the record, the others become copies of it.
        let mut copied: HashMap<(Lsn, u64), (MessageId, Vec<u8>)> = HashMap::new();
        for (id, p) in found {
            // Removed or rewritten by a round not yet applied: nothing to move.
            if !matches!(
                self.overlay.get(TableId::Messages, &id_key(id)),
                Seen::Unknown
            ) {
                continue;
            }
            if let Some((source, record)) = copied.get(&(p.segment, p.offset)) {
                let (source, record) = (*source, record.clone());
                let destination = match self.schedule_row(id)? {
                    Some(e) => e.destination,
                    None => self.record(id)?.map(|r| r.destination).unwrap_or_default(),
                };
                self.copy(id, source, &record, destination.as_bytes());
                moved += 1;
                continue;
            }
            if let Some(bytes) = self.record_bytes(id)? {
                self.put(TableId::Messages, &id_key(id), &bytes);
                copied.insert((p.segment, p.offset), (id, bytes));
                moved += 1;
            }
        }
        Ok((moved, if seen >= scan { last } else { None }))
    }

    /// A message's schedule row, if it has one (live or dead; not completed).
    pub fn schedule_row(&self, id: MessageId) -> Result<Option<ScheduleEntry>, StoreError> {
        match get_u128(self.overlay, TableId::Schedule, &self.schedule, id)? {
            Some(v) => ScheduleEntry::decode(&v).map(Some),
            None => Ok(None),
        }
    }

    /// A live message's schedule row; its absence is corruption.
    pub fn schedule(&self, id: MessageId) -> Result<ScheduleEntry, StoreError> {
        self.schedule_row(id)?.ok_or_else(|| {
            StoreError::Corrupt(format!("message {id} is live but has no schedule row"))
        })
    }

    pub fn put_schedule(&mut self, id: MessageId, entry: &ScheduleEntry) -> Result<(), StoreError> {
        self.put(TableId::Schedule, &id_key(id), &entry.encode());
        Ok(())
    }

    /// A message's format-2 `history` row, if it still has one.
    fn legacy_history(&self, id: MessageId) -> Result<Option<HistoryRecord>, StoreError> {
        match get_u128(self.overlay, TableId::History, &self.history, id)? {
            Some(v) => Ok(Some(HistoryRecord::decode(v.as_slice())?)),
            None => Ok(None),
        }
    }

    /// A message's `attempts` rows as the engine sees them: (key, value), oldest first.
    fn attempt_rows(&self, id: MessageId) -> Result<Vec<super::overlay::Row>, StoreError> {
        let (first, last) = super::attempt_range(id);
        let base = self
            .attempts
            .range(first.as_slice()..=last.as_slice())?
            .map(|row| -> Result<_, StoreError> {
                let (k, v) = row?;
                let value = open(TableId::Attempts, k.value(), v.value())?.to_vec();
                Ok((k.value().to_vec(), value))
            });
        self.overlay.merge(
            TableId::Attempts,
            (Bound::Included(&first[..]), Bound::Included(&last[..])),
            base,
            usize::MAX,
        )
    }

    /// A message's finished attempts.
    pub fn history(&self, id: MessageId) -> Result<HistoryRecord, StoreError> {
        Ok(self.history_and_keys(id)?.0)
    }

    /// A message's finished attempts, and the keys of its `attempts` rows (one read).
    fn history_and_keys(&self, id: MessageId) -> Result<(HistoryRecord, Vec<Vec<u8>>), StoreError> {
        let rows = self.attempt_rows(id)?;
        let mut keys = Vec::with_capacity(rows.len());
        let mut attempts = Vec::with_capacity(rows.len());
        for (key, value) in rows {
            attempts.push(AttemptRecord::decode(value.as_slice())?);
            keys.push(key);
        }
        let history = HistoryRecord::assemble(self.legacy_history(id)?, attempts);
        Ok((history, keys))
    }

    /// Records a finished attempt: one row appended (and the oldest removed beyond
    /// [`MAX_HISTORY`]); the rest of the history is not rewritten (finding F4: every
    /// attempt rewrote it whole). A format-2 `history` row is folded into rows first.
    pub fn push_attempt(
        &mut self,
        id: MessageId,
        attempt: AttemptRecord,
    ) -> Result<(), StoreError> {
        let mut rows = self.attempt_rows(id)?;
        if let Some(legacy) = self.legacy_history(id)? {
            // Once per message: its old row becomes rows, in front of any it has.
            let mut seq = match rows.first() {
                Some((k, _)) => attempt_seq(k)?,
                None => u32::MAX / 2,
            };
            for old in legacy.attempts.iter().rev() {
                seq -= 1;
                let key = super::attempt_key(id, seq);
                self.put(TableId::Attempts, &key, &old.encode_to_vec());
                rows.insert(0, (key, Vec::new()));
            }
            self.remove(TableId::History, &id_key(id));
        }
        let next = match rows.last() {
            Some((k, _)) => attempt_seq(k)?.saturating_add(1),
            None => u32::MAX / 2,
        };
        self.put(
            TableId::Attempts,
            &super::attempt_key(id, next),
            &attempt.bounded().encode_to_vec(),
        );
        // Keep the last MAX_HISTORY (this one included).
        let excess = (rows.len() + 1).saturating_sub(super::records::MAX_HISTORY);
        for (key, _) in rows.iter().take(excess) {
            self.remove(TableId::Attempts, key);
        }
        Ok(())
    }

    /// Erases a message that is no longer live (a purge, issue #53 4): its record's bytes
    /// are overwritten in the log once it is checkpointed (the apply stage turns this into
    /// a `scrubs` row, see `scrub`), and its retained pointer goes now. Call after its
    /// other rows are removed (`messages` first: the apply stage moves that pointer to
    /// `retained`, where this finds it).
    pub fn erase(&mut self, id: MessageId) {
        let key = id_key(id);
        // Only in the log: the overlay never holds an `erased` row.
        self.log.put(TableId::Erased, &key, &[]);
        self.remove(TableId::Retained, &key);
    }

    /// Up to `limit` completed messages (id, summary) after `cursor`, created before
    /// `before_ms`, in id order (rows this round removed are left out).
    pub fn done_after(
        &self,
        cursor: Option<MessageId>,
        before_ms: u64,
        limit: usize,
    ) -> Result<Vec<(MessageId, DoneRecord)>, StoreError> {
        let lower = cursor.map_or(Bound::Unbounded, |c| Bound::Excluded(c.0));
        let upper = Bound::Excluded(u128::from(before_ms) << 80);
        let mut out = Vec::new();
        for row in self.done.range::<u128>((lower, upper))? {
            let (k, v) = row?;
            let id = MessageId(k.value());
            let key = id_key(id);
            let value = match self.overlay.get(TableId::Done, &key) {
                Seen::Removed => continue,
                Seen::Put(v) => v.to_vec(),
                Seen::Unknown => open(TableId::Done, &key, v.value())?.to_vec(),
            };
            out.push((id, DoneRecord::decode(value.as_slice())?));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    /// Forgets a completed message's payload pointer (its `retained` row), if it has one.
    pub fn forget_retained(&mut self, id: MessageId) -> Result<(), StoreError> {
        let key = id_key(id);
        let present = match self.overlay.get(TableId::Retained, &key) {
            Seen::Removed => false,
            Seen::Put(_) => true,
            Seen::Unknown => self.retained.get(id.0)?.is_some(),
        };
        if present {
            self.remove(TableId::Retained, &key);
        }
        Ok(())
    }

    /// Removes a completed message's summary (its `done` row).
    pub fn remove_done(&mut self, id: MessageId) {
        self.remove(TableId::Done, &id_key(id));
    }

    /// Removes a completed message entirely (its idempotency key stays until it expires).
    pub fn remove_message(&mut self, id: MessageId) -> Result<(), StoreError> {
        let keys: Vec<Vec<u8>> = self.attempt_rows(id)?.into_iter().map(|(k, _)| k).collect();
        self.remove_rows(id, &keys);
        Ok(())
    }

    /// A message's rows: record, schedule, a format-2 history row, and these attempt rows.
    fn remove_rows(&mut self, id: MessageId, attempt_keys: &[Vec<u8>]) {
        let key = id_key(id);
        self.remove(TableId::Messages, &key);
        self.remove(TableId::Schedule, &key);
        self.remove(TableId::History, &key);
        for row in attempt_keys {
            self.remove(TableId::Attempts, row);
        }
    }

    /// Removes a completed message and keeps what `done` makes of its history (metadata
    /// and attempts) in its place; the history is read once, for both.
    pub fn complete(
        &mut self,
        id: MessageId,
        done: impl FnOnce(HistoryRecord) -> DoneRecord,
    ) -> Result<(), StoreError> {
        let (history, keys) = self.history_and_keys(id)?;
        let done = done(history);
        self.remove_rows(id, &keys);
        self.put(TableId::Done, &id_key(id), &done.encode_to_vec());
        Ok(())
    }

    /// A completed message's record, while it is kept.
    pub fn done(&self, id: MessageId) -> Result<Option<DoneRecord>, StoreError> {
        match get_u128(self.overlay, TableId::Done, &self.done, id)? {
            Some(v) => Ok(Some(DoneRecord::decode(v.as_slice())?)),
            None => Ok(None),
        }
    }

    /// Forgets up to `limit` completed messages created before `before_ms`; how many.
    pub fn sweep_done(&mut self, before_ms: u64, limit: usize) -> Result<usize, StoreError> {
        // UUIDv7: the top 48 bits are the creation time in ms.
        let bound = u128::from(before_ms) << 80;
        let bound_key = bound.to_be_bytes();
        let base = self
            .done
            .range(..bound)?
            .map(|row| -> Result<_, StoreError> {
                let (k, _) = row?;
                Ok((k.value().to_be_bytes().to_vec(), Vec::new()))
            });
        let expired = self.overlay.merge(
            TableId::Done,
            (Bound::Unbounded, Bound::Excluded(&bound_key[..])),
            base,
            limit,
        )?;
        for (key, _) in &expired {
            self.remove(TableId::Done, key);
        }
        Ok(expired.len())
    }

    /// Forgets up to `limit` retained pointers (completed messages' payloads) of messages
    /// created before `before_ms`; how many.
    pub fn sweep_retained(&mut self, before_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let bound = u128::from(before_ms) << 80;
        let mut keys = Vec::new();
        for row in self.retained.range(..bound)? {
            let (k, _) = row?;
            let key = k.value().to_be_bytes();
            if matches!(self.overlay.get(TableId::Retained, &key), Seen::Removed) {
                continue;
            }
            keys.push(key);
            if keys.len() >= limit {
                break;
            }
        }
        for key in &keys {
            self.remove(TableId::Retained, key);
        }
        Ok(keys.len())
    }

    /// Moves a live message to the dead-letter index.
    pub fn bury(
        &mut self,
        id: MessageId,
        dest_key: &str,
        entry: &ScheduleEntry,
    ) -> Result<(), StoreError> {
        self.remove(TableId::Schedule, &id_key(id));
        self.put(TableId::Dead, &dead_key(dest_key, id), &entry.encode());
        Ok(())
    }

    /// Takes a message out of the dead-letter index; its dead row, if it was there.
    pub fn unbury(
        &mut self,
        id: MessageId,
        dest_key: &str,
    ) -> Result<Option<ScheduleEntry>, StoreError> {
        let key = dead_key(dest_key, id);
        let Some(value) = get_bytes(self.overlay, TableId::Dead, &self.dead, &key)? else {
            return Ok(None);
        };
        let entry = ScheduleEntry::decode(&value)?;
        self.remove(TableId::Dead, &key);
        Ok(Some(entry))
    }

    /// Ids of up to `limit` dead letters of one destination.
    pub fn dead_of(&self, dest_key: &str, limit: usize) -> Result<Vec<MessageId>, StoreError> {
        let prefix = dead_prefix(dest_key);
        let base = self
            .dead
            .range(prefix.as_slice()..)?
            .map(|row| -> Result<_, StoreError> {
                let (k, _) = row?;
                Ok((k.value().to_vec(), Vec::new()))
            })
            .take_while(|row| row.as_ref().map_or(true, |(k, _)| k.starts_with(&prefix)));
        let rows = self.overlay.merge(
            TableId::Dead,
            (Bound::Included(prefix.as_slice()), Bound::Unbounded),
            base,
            usize::MAX,
        )?;
        rows.iter()
            .take_while(|(k, _)| k.starts_with(&prefix))
            .take(limit)
            .map(|(k, _)| dead_key_id(k))
            .collect()
    }

    /// The message `scoped_key` names, if it was recorded at or after `not_before_ms`.
    pub fn idempotent_original(
        &self,
        scoped_key: &[u8],
        not_before_ms: u64,
    ) -> Result<Option<Original>, StoreError> {
        if let Some(old) = get_bytes(
            self.overlay,
            TableId::Idempotency,
            &self.idempotency,
            scoped_key,
        )? {
            let (original, created) = decode_idempotency(&old)?;
            if created >= not_before_ms {
                return Ok(Some(original));
            }
        }
        Ok(None)
    }

    /// Records that `scoped_key` names message `id`, unless it already names a message
    /// recorded at or after `not_before_ms`: then nothing changes and that earlier one is
    /// returned.
    pub fn claim_idempotency_key(
        &mut self,
        scoped_key: &[u8],
        id: MessageId,
        created_ms: u64,
        not_before_ms: u64,
    ) -> Result<Option<Original>, StoreError> {
        self.claim(scoped_key, id, None, created_ms, not_before_ms)
    }

    /// [`Tables::claim_idempotency_key`] for a publish: the row also keeps how many
    /// deliveries it stores and the ids of the first of them (at most
    /// [`MAX_KEPT_DELIVERY_IDS`]), so a duplicate is answered as the original was.
    pub fn claim_publish_key(
        &mut self,
        scoped_key: &[u8],
        event: MessageId,
        deliveries: (u32, &[MessageId]),
        created_ms: u64,
        not_before_ms: u64,
    ) -> Result<Option<Original>, StoreError> {
        self.claim(
            scoped_key,
            event,
            Some(deliveries),
            created_ms,
            not_before_ms,
        )
    }

    /// `deliveries`: a publish's count and its first ids.
    fn claim(
        &mut self,
        scoped_key: &[u8],
        id: MessageId,
        deliveries: Option<(u32, &[MessageId])>,
        created_ms: u64,
        not_before_ms: u64,
    ) -> Result<Option<Original>, StoreError> {
        if let Some(original) = self.idempotent_original(scoped_key, not_before_ms)? {
            return Ok(Some(original));
        }
        let mut v = Vec::with_capacity(28);
        v.extend_from_slice(&id.0.to_be_bytes());
        v.extend_from_slice(&created_ms.to_be_bytes());
        if let Some((count, ids)) = deliveries {
            v.extend_from_slice(&count.to_be_bytes());
            for d in ids.iter().take(MAX_KEPT_DELIVERY_IDS) {
                v.extend_from_slice(&d.0.to_be_bytes());
            }
        }
        self.put(TableId::Idempotency, scoped_key, &v);
        Ok(None)
    }

    /// One step of the idempotency sweep: looks at up to `scan` keys after `cursor` and
    /// forgets those recorded before `before_ms`. Keys are random, so there is no
    /// time-ordered index to range over; an incremental pass keeps each round short
    /// instead, and lookups ignore expired keys anyway, so the sweep only reclaims space.
    pub fn sweep_idempotency(
        &mut self,
        cursor: Option<&[u8]>,
        before_ms: u64,
        scan: usize,
    ) -> Result<RowSweep, StoreError> {
        let (rows, last) = rows_after(
            self.overlay,
            TableId::Idempotency,
            &self.idempotency,
            cursor,
            scan,
        )?;
        let mut step = RowSweep {
            read: rows.len(),
            removed: 0,
            oldest_kept_ms: None,
            cursor: last,
        };
        for (key, value) in &rows {
            let (_, created) = decode_idempotency(value)?;
            if created < before_ms {
                self.remove(TableId::Idempotency, key);
                step.removed += 1;
            } else {
                step.oldest_kept_ms = Some(step.oldest_kept_ms.map_or(created, |o| o.min(created)));
            }
        }
        Ok(step)
    }

    /// Deletes dead letters dead-lettered before `before_ms` among up to `scan` rows of the
    /// dead-letter index after `cursor` (the index is by destination, not by time).
    pub fn sweep_dead(
        &mut self,
        cursor: Option<&[u8]>,
        before_ms: u64,
        scan: usize,
    ) -> Result<DeadSweep, StoreError> {
        let (rows, last) = rows_after(self.overlay, TableId::Dead, &self.dead, cursor, scan)?;
        let mut step = DeadSweep {
            read: rows.len(),
            removed: Vec::new(),
            oldest_kept_ms: None,
            cursor: last,
        };
        for (key, value) in &rows {
            let entry = ScheduleEntry::decode(value)?;
            if entry.since_ms < before_ms {
                let id = dead_key_id(key)?;
                self.remove(TableId::Dead, key);
                self.remove_message(id)?;
                step.removed.push((super::dead_key_destination(key)?, id));
            } else {
                step.oldest_kept_ms = Some(
                    step.oldest_kept_ms
                        .map_or(entry.since_ms, |o| o.min(entry.since_ms)),
                );
            }
        }
        Ok(step)
    }

    /// Stores `object`'s record in the catalog (replacing what it held).
    pub fn put_object(&mut self, object: &ObjectRef, record: &[u8]) {
        self.put(TableId::Catalog, &catalog_key(object), record);
    }

    pub fn remove_object(&mut self, object: &ObjectRef) {
        self.remove(TableId::Catalog, &catalog_key(object));
    }

    /// Every object of a tenant's, as this round sees the catalog (its own changes too).
    pub fn objects_of(&self, tenant: TenantId) -> Result<Vec<ObjectRef>, StoreError> {
        self.objects_in(tenant, None)
    }

    /// A tenant's objects of one kind, as this round sees the catalog.
    pub fn objects_of_kind(
        &self,
        tenant: TenantId,
        kind: Kind,
    ) -> Result<Vec<ObjectRef>, StoreError> {
        self.objects_in(tenant, Some(kind))
    }

    fn objects_in(
        &self,
        tenant: TenantId,
        kind: Option<Kind>,
    ) -> Result<Vec<ObjectRef>, StoreError> {
        let (first, end) = super::catalog_range(tenant, kind);
        let range = (
            Bound::Included(first.as_slice()),
            Bound::Excluded(end.as_slice()),
        );
        let base = self.catalog.range::<&[u8]>(range)?.map(|row| {
            let (k, v) = row.map_err(StoreError::from)?;
            let value = open(TableId::Catalog, k.value(), v.value())?.to_vec();
            Ok::<_, StoreError>((k.value().to_vec(), value))
        });
        let rows = self
            .overlay
            .merge(TableId::Catalog, range, base, usize::MAX)?;
        rows.iter()
            .map(|(key, _)| super::keys::catalog_object(key))
            .collect()
    }

    pub fn put_endpoint(
        &mut self,
        tenant: TenantId,
        endpoint: &EndpointRecord,
    ) -> Result<(), StoreError> {
        let object = ObjectRef::new(tenant, Kind::Endpoint, &endpoint.name);
        self.put_object(&object, &endpoint.encode_to_vec());
        Ok(())
    }

    pub fn remove_endpoint(&mut self, tenant: TenantId, name: &str) -> Result<(), StoreError> {
        self.remove_object(&ObjectRef::new(tenant, Kind::Endpoint, name));
        Ok(())
    }

    /// An ingest source's definition (its JSON, secrets sealed), under its name.
    pub fn put_source(&mut self, name: &str, spec: &[u8]) {
        self.put_object(&ObjectRef::new(TenantId::DEFAULT, Kind::Source, name), spec);
    }

    pub fn remove_source(&mut self, name: &str) {
        self.remove_object(&ObjectRef::new(TenantId::DEFAULT, Kind::Source, name));
    }

    /// A subscription's definition, under its name.
    pub fn put_subscription(&mut self, name: &str, spec: &[u8]) {
        let object = ObjectRef::new(TenantId::DEFAULT, Kind::Subscription, name);
        self.put_object(&object, spec);
    }

    pub fn remove_subscription(&mut self, name: &str) {
        self.remove_object(&ObjectRef::new(TenantId::DEFAULT, Kind::Subscription, name));
    }

    /// A FIFO lane's row ([`super::lane_key`]); a lane never used has the default (no
    /// number handed out, not blocked).
    pub fn lane(&self, key: &[u8]) -> Result<LaneRow, StoreError> {
        match get_bytes(self.overlay, TableId::Lanes, &self.lanes, key)? {
            Some(v) => LaneRow::decode(&v),
            None => Ok(LaneRow::default()),
        }
    }

    pub fn put_lane(&mut self, key: &[u8], row: &LaneRow) {
        self.put(TableId::Lanes, key, &row.encode());
    }

    /// One step of the lanes sweep: looks at up to `scan` rows after `cursor`; a row whose
    /// lane `held` says is in use (it holds messages or is blocked) stays; one with no time
    /// of use (format 8) gets `now_ms`; one last used before `before_ms` is removed (its
    /// key's next message is number 1 again).
    pub fn sweep_lanes(
        &mut self,
        cursor: Option<&[u8]>,
        before_ms: u64,
        now_ms: u64,
        scan: usize,
        held: &dyn Fn(&[u8]) -> bool,
    ) -> Result<RowSweep, StoreError> {
        let (rows, last) = rows_after(self.overlay, TableId::Lanes, &self.lanes, cursor, scan)?;
        let mut step = RowSweep {
            read: rows.len(),
            removed: 0,
            oldest_kept_ms: None,
            cursor: last,
        };
        for (key, value) in &rows {
            let mut row = LaneRow::decode(value)?;
            let kept_at = if held(key) {
                now_ms
            } else {
                match row.used_ms {
                    None => {
                        row.used_ms = Some(now_ms);
                        self.put_lane(key, &row);
                        now_ms
                    }
                    Some(used) if used < before_ms => {
                        self.remove(TableId::Lanes, key);
                        step.removed += 1;
                        continue;
                    }
                    Some(used) => used,
                }
            };
            step.oldest_kept_ms = Some(step.oldest_kept_ms.map_or(kept_at, |o| o.min(kept_at)));
        }
        Ok(step)
    }
}

/// The write side of the tables: performs log records on redb (the apply stage, and
/// recovery's replay).
pub(crate) struct Apply<'txn> {
    messages: Table<'txn, u128, &'static [u8]>,
    schedule: Table<'txn, u128, &'static [u8]>,
    history: Table<'txn, u128, &'static [u8]>,
    attempts: Table<'txn, &'static [u8], &'static [u8]>,
    done: Table<'txn, u128, &'static [u8]>,
    dead: Table<'txn, &'static [u8], &'static [u8]>,
    idempotency: Table<'txn, &'static [u8], &'static [u8]>,
    catalog: Table<'txn, &'static [u8], &'static [u8]>,
    lanes: Table<'txn, &'static [u8], &'static [u8]>,
    retained: Table<'txn, u128, &'static [u8]>,
    segments: Table<'txn, &'static [u8], &'static [u8]>,
    scrubs: Table<'txn, &'static [u8], &'static [u8]>,
    /// The search index's rows of what is performed (see `search`).
    index: super::search::Indexer<'txn>,
    /// Changes to the segments' rows made by the records performed so far, written by
    /// [`Apply::finish`]: (live, bytes, newest ms) per segment.
    counts: BTreeMap<Lsn, (i64, i64, u64)>,
}

/// Where a log record lies: its segment's first position, and the offset of its payload
/// (after the frame's header) from the segment's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordAt {
    pub(crate) segment: Lsn,
    pub(crate) offset: u64,
}

impl RecordAt {
    /// The record whose frame is at `lsn` in the segment that starts at `segment`.
    pub(crate) fn frame(segment: Lsn, lsn: Lsn) -> Self {
        Self {
            segment,
            offset: lsn - segment + crate::wal::HEADER as u64,
        }
    }
}

impl std::fmt::Debug for Apply<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Apply")
    }
}

impl<'txn> Apply<'txn> {
    /// Every table, opened (and created, in a new file) in `txn`; the search index's rows
    /// of what is performed are written into its table by [`Apply::finish`].
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self, StoreError> {
        Self::opened(txn, true)
    }

    /// The same, but [`Apply::finish`] answers the search index's rows instead of writing
    /// them (the apply stage's: see `search::Pending`).
    pub(crate) fn open_deferred(txn: &'txn WriteTransaction) -> Result<Self, StoreError> {
        Self::opened(txn, false)
    }

    fn opened(txn: &'txn WriteTransaction, index_rows: bool) -> Result<Self, StoreError> {
        let search = txn.open_table(super::search::SEARCH)?;
        Ok(Self {
            messages: txn.open_table(MESSAGES)?,
            schedule: txn.open_table(SCHEDULE)?,
            history: txn.open_table(HISTORY)?,
            attempts: txn.open_table(ATTEMPTS)?,
            done: txn.open_table(DONE)?,
            dead: txn.open_table(DEAD)?,
            idempotency: txn.open_table(IDEMPOTENCY)?,
            catalog: txn.open_table(CATALOG)?,
            lanes: txn.open_table(LANES)?,
            retained: txn.open_table(RETAINED)?,
            segments: txn.open_table(SEGMENTS)?,
            scrubs: txn.open_table(SCRUBS)?,
            index: super::search::Indexer {
                table: index_rows.then_some(search),
                rows: Vec::new(),
            },
            counts: BTreeMap::new(),
        })
    }

    /// Performs the changes of a log record; how many. Blind puts and removals (see
    /// `rowlog` for why a second replay is harmless), except that a message's record
    /// becomes a pointer into the log when `at` says where the record lies (see `heap`):
    /// without it (tests replaying bare records), the record is stored inline.
    pub(crate) fn replay(
        &mut self,
        record: &[u8],
        at: Option<RecordAt>,
    ) -> Result<usize, StoreError> {
        let decoded = super::rowlog::decode(record)?;
        // A change a hookd of format 9 or older logged to `endpoints`, `sources` or
        // `subscriptions` (a log from before the upgrade) is the change of tenant
        // `default`'s object in the catalog, sealed and written below like any other.
        let moved = decoded
            .iter()
            .map(into_catalog_key)
            .collect::<Result<Vec<_>, StoreError>>()?;
        let changes: Vec<Change<'_>> = decoded
            .iter()
            .zip(&moved)
            .map(|(change, moved)| match (*change, moved) {
                (Change::Put(_, _, value), Some(key)) => Change::Put(TableId::Catalog, key, value),
                (Change::Remove(..), Some(key)) => Change::Remove(TableId::Catalog, key),
                (change, None) => change,
            })
            .collect();
        let id = |key: &[u8]| -> Result<u128, StoreError> {
            <[u8; 16]>::try_from(key)
                .map(u128::from_be_bytes)
                .map_err(|_| StoreError::Corrupt("log record: a message key".into()))
        };
        // The records this log record holds, for its copies (a fan-out's deliveries).
        let mut records: HashMap<u128, &[u8]> = HashMap::new();
        for change in &changes {
            match *change {
                Change::Put(TableId::Messages, key, value) => {
                    if let Some((source, destination)) = super::heap::parse_copy(value) {
                        let Some(&shared) = records.get(&source) else {
                            return Err(StoreError::Corrupt(
                                "log record: a copy of a record it does not hold".into(),
                            ));
                        };
                        self.index.message(id(key)?, shared, Some(destination))?;
                        match at {
                            Some(at) => {
                                let pointer = Pointer::to(at.segment, at.offset, record, shared);
                                self.put_message(
                                    id(key)?,
                                    key,
                                    shared,
                                    Some((pointer, Some(destination))),
                                )?;
                            }
                            None => {
                                let inline =
                                    super::heap::with_destination(shared.to_vec(), destination);
                                self.put_message(id(key)?, key, &inline, None)?;
                            }
                        }
                        continue;
                    }
                    records.insert(id(key)?, value);
                    self.index.message(id(key)?, value, None)?;
                    let pointer =
                        at.map(|at| (Pointer::to(at.segment, at.offset, record, value), None));
                    self.put_message(id(key)?, key, value, pointer)?;
                }
                Change::Remove(TableId::Messages, key) => self.remove_message(id(key)?, key)?,
                Change::Put(TableId::Erased, key, _) => self.erase(id(key)?, key)?,
                Change::Put(table, key, value) => {
                    let unsealed = value;
                    let sealed = super::seal::seal(table, key, value);
                    let value = sealed.as_slice();
                    match table {
                        TableId::Messages => unreachable_table()?,
                        TableId::Schedule => drop(self.schedule.insert(id(key)?, value)?),
                        TableId::History => drop(self.history.insert(id(key)?, value)?),
                        TableId::Attempts => drop(self.attempts.insert(key, value)?),
                        TableId::Done => {
                            self.index.done(id(key)?, unsealed)?;
                            drop(self.done.insert(id(key)?, value)?);
                        }
                        TableId::Dead => {
                            self.index.dead(key, &self.attempts)?;
                            drop(self.dead.insert(key, value)?);
                        }
                        TableId::Idempotency => drop(self.idempotency.insert(key, value)?),
                        TableId::Catalog => drop(self.catalog.insert(key, value)?),
                        TableId::Endpoints | TableId::Sources | TableId::Subscriptions => {
                            unreachable_table()?;
                        }
                        TableId::Retained => drop(self.retained.insert(id(key)?, value)?),
                        TableId::Lanes => drop(self.lanes.insert(key, value)?),
                        TableId::Segments | TableId::Search | TableId::Erased | TableId::Scrubs => {
                            unreachable_table()?
                        }
                    }
                }
                Change::Remove(table, key) => match table {
                    TableId::Messages => unreachable_table()?,
                    TableId::Schedule => drop(self.schedule.remove(id(key)?)?),
                    TableId::History => drop(self.history.remove(id(key)?)?),
                    TableId::Attempts => drop(self.attempts.remove(key)?),
                    TableId::Done => drop(self.done.remove(id(key)?)?),
                    TableId::Dead => drop(self.dead.remove(key)?),
                    TableId::Idempotency => drop(self.idempotency.remove(key)?),
                    TableId::Catalog => drop(self.catalog.remove(key)?),
                    TableId::Endpoints | TableId::Sources | TableId::Subscriptions => {
                        unreachable_table()?;
                    }
                    TableId::Retained => drop(self.retained.remove(id(key)?)?),
                    TableId::Lanes => drop(self.lanes.remove(key)?),
                    TableId::Segments | TableId::Search | TableId::Erased | TableId::Scrubs => {
                        unreachable_table()?;
                    }
                },
            }
        }
        Ok(changes.len())
    }

    /// The pointer a `messages` row holds, if it holds one (a row that fails its seal is
    /// counted as none: the counts then err on keeping a segment).
    fn pointer_of(key: &[u8], stored: &[u8]) -> Option<Pointer> {
        let value = super::seal::open(TableId::Messages, key, stored).ok()?;
        Stored::of(value).ok()?.pointer()
    }

    fn count(&mut self, segment: Lsn, live: i64, bytes: i64, newest_ms: u64) {
        let entry = self.counts.entry(segment).or_insert((0, 0, 0));
        entry.0 += live;
        entry.1 += bytes;
        entry.2 = entry.2.max(newest_ms);
    }

    /// A message's record: a pointer to it in the log, with the delivery's destination
    /// when the record is shared (or, without a pointer, the record).
    fn put_message(
        &mut self,
        id: u128,
        key: &[u8],
        value: &[u8],
        pointer: Option<(Pointer, Option<&[u8]>)>,
    ) -> Result<(), StoreError> {
        let Some((pointer, destination)) = pointer else {
            let sealed = super::seal::seal(TableId::Messages, key, value);
            let old = self.messages.insert(id, sealed.as_slice())?;
            let old = old.and_then(|o| Self::pointer_of(key, o.value()));
            if let Some(old) = old {
                self.count(old.segment, -1, -i64::from(old.len), 0);
            }
            return Ok(());
        };
        let encoded = match destination {
            Some(destination) => pointer.encode_shared(destination),
            None => pointer.encode().to_vec(),
        };
        let sealed = super::seal::seal(TableId::Messages, key, &encoded);
        let old = self.messages.insert(id, sealed.as_slice())?;
        let old = old.and_then(|o| Self::pointer_of(key, o.value()));
        if old == Some(pointer) {
            return Ok(());
        }
        if let Some(old) = old {
            self.count(old.segment, -1, -i64::from(old.len), 0);
        }
        // UUIDv7: the top 48 bits are the creation time in ms.
        let created_ms = (id >> 80) as u64;
        self.count(pointer.segment, 1, i64::from(pointer.len), created_ms);
        Ok(())
    }

    /// A message is gone from the live set: its record's pointer moves to `retained`, where
    /// its payload stays readable while the segment is kept.
    fn remove_message(&mut self, id: u128, key: &[u8]) -> Result<(), StoreError> {
        let old = self.messages.remove(id)?;
        // The value as it is (a shared pointer keeps its delivery's destination).
        let Some(value) = old.and_then(|o| {
            let value = super::seal::open(TableId::Messages, key, o.value()).ok()?;
            Stored::of(value).ok()?.pointer()?;
            Some(value.to_vec())
        }) else {
            return Ok(());
        };
        if let Some(old) = Stored::of(&value)?.pointer() {
            self.count(old.segment, -1, -i64::from(old.len), 0);
        }
        let sealed = super::seal::seal(TableId::Retained, key, &value);
        self.retained.insert(id, sealed.as_slice())?;
        Ok(())
    }

    /// A purge's erasure of message `id` (see [`Tables::erase`]): its `messages` row (if a
    /// replay finds it still there) and its `retained` row go, and each pointer they held
    /// becomes a `scrubs` row (segment and offset, big-endian -> length and CRC-32C), so
    /// the record's bytes are overwritten once a checkpoint covers this (see `scrub`).
    /// Blind like every change here: a second replay finds no rows and adds nothing.
    fn erase(&mut self, id: u128, key: &[u8]) -> Result<(), StoreError> {
        let mut pointers = Vec::new();
        let live = self
            .messages
            .remove(id)?
            .and_then(|old| Self::pointer_of(key, old.value()));
        if let Some(p) = live {
            self.count(p.segment, -1, -i64::from(p.len), 0);
            pointers.push(p);
        }
        if let Some(old) = self.retained.remove(id)? {
            let value = super::seal::open(TableId::Retained, key, old.value())?;
            if let Some(p) = Stored::of(value)?.pointer() {
                pointers.push(p);
            }
        }
        for p in pointers {
            let (key, value) = super::scrub::row(&p, id);
            let sealed = super::seal::seal(TableId::Scrubs, &key, &value);
            self.scrubs.insert(key.as_slice(), sealed.as_slice())?;
        }
        Ok(())
    }

    /// Writes the segments' rows the records changed. Call once, after the last record.
    pub(crate) fn finish(mut self) -> Result<Vec<super::search::Row>, StoreError> {
        let rows = self.index.finish()?;
        for (segment, (live, bytes, newest_ms)) in std::mem::take(&mut self.counts) {
            let key = segment.to_be_bytes();
            let mut row = match self.segments.get(key.as_slice())? {
                Some(v) => {
                    SegmentRow::decode(super::seal::open(TableId::Segments, &key, v.value())?)?
                }
                None => SegmentRow::default(),
            };
            row.live = add_signed(row.live, live, segment, "live messages");
            row.live_bytes = add_signed(row.live_bytes, bytes, segment, "live bytes");
            row.newest_ms = row.newest_ms.max(newest_ms);
            let sealed = super::seal::seal(TableId::Segments, &key, &row.encode());
            self.segments.insert(key.as_slice(), sealed.as_slice())?;
        }
        Ok(rows)
    }
}

/// `value + delta`, never below zero (a count that would go below is a bug: it is logged,
/// and the count stays at zero).
fn add_signed(value: u64, delta: i64, segment: Lsn, what: &str) -> u64 {
    match value.checked_add_signed(delta) {
        Some(v) => v,
        None => {
            tracing::error!(
                segment,
                value,
                delta,
                what,
                "a segment's count would go below zero"
            );
            0
        }
    }
}

/// A table a log record never names directly (`messages` is handled on its own, the
/// segments' rows are derived).
fn unreachable_table() -> Result<(), StoreError> {
    Err(StoreError::Corrupt(
        "log record: a change to a derived table".into(),
    ))
}

/// The sequence number of an `attempts` key.
fn attempt_seq(key: &[u8]) -> Result<u32, StoreError> {
    key.get(16..20)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| StoreError::Corrupt("an attempts key".into()))
}

/// The catalog key of the object a change of format 9 or older names in `endpoints`,
/// `sources` or `subscriptions` (see `TableId::Endpoints`); `None` for other changes.
fn into_catalog_key(change: &Change<'_>) -> Result<Option<Vec<u8>>, StoreError> {
    let (Change::Put(table, key, _) | Change::Remove(table, key)) = *change;
    let kind = match table {
        TableId::Endpoints => Kind::Endpoint,
        TableId::Sources => Kind::Source,
        TableId::Subscriptions => Kind::Subscription,
        _ => return Ok(None),
    };
    let object = ObjectRef::new(TenantId::DEFAULT, kind, name(key)?);
    Ok(Some(catalog_key(&object)))
}

fn name(key: &[u8]) -> Result<&str, StoreError> {
    std::str::from_utf8(key)
        .map_err(|_| StoreError::Corrupt("log record: an endpoint or source name".into()))
}

/// What an idempotency key names (see [`Tables::idempotent_original`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original {
    /// The message's id; a publish's event id.
    pub id: MessageId,
    /// A publish: how many deliveries it stored (0: an enqueue, or a row from before
    /// they were kept).
    pub deliveries: u32,
    /// A publish: the first of its deliveries' ids, in the answer's order.
    pub delivery_ids: Vec<MessageId>,
}

/// How many delivery ids an idempotency row of a publish keeps: as many as an answer
/// lists.
pub const MAX_KEPT_DELIVERY_IDS: usize = 1_000;

/// An idempotency row: the id (16 bytes) and when it was recorded (8), then for a publish
/// its deliveries' count (4) and the first ids (16 each). A format-8 hookd reads the first
/// 24 bytes alone, so the longer rows need no format change.
fn decode_idempotency(v: &[u8]) -> Result<(Original, u64), StoreError> {
    let corrupt = || StoreError::Corrupt("idempotency record".into());
    let id = <[u8; 16]>::try_from(v.get(..16).ok_or_else(corrupt)?).map_err(|_| corrupt())?;
    let created = <[u8; 8]>::try_from(v.get(16..24).ok_or_else(corrupt)?).map_err(|_| corrupt())?;
    let mut original = Original {
        id: MessageId(u128::from_be_bytes(id)),
        deliveries: 0,
        delivery_ids: Vec::new(),
    };
    if let Some(rest) = v.get(24..).filter(|r| !r.is_empty()) {
        let (count, ids) = rest.split_at_checked(4).ok_or_else(corrupt)?;
        original.deliveries = u32::from_be_bytes(count.try_into().map_err(|_| corrupt())?);
        if ids.len() % 16 != 0 {
            return Err(corrupt());
        }
        original.delivery_ids = ids
            .chunks_exact(16)
            .map(|c| <[u8; 16]>::try_from(c).map(|b| MessageId(u128::from_be_bytes(b))))
            .collect::<Result<_, _>>()
            .map_err(|_| corrupt())?;
    }
    Ok((original, u64::from_be_bytes(created)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{State, Store};

    type TableOp<'a> = Box<dyn FnOnce(&mut Tables<'_>) + 'a>;

    fn entry(state: State) -> ScheduleEntry {
        ScheduleEntry {
            due_ms: 1,
            state,
            attempts: 0,
            max_attempts: 3,
            since_ms: 0,
            destination: "qq".into(),
            lane: None,
            replayed: false,
        }
    }

    /// Runs `f` as one round on `store` and `overlay`, then applies its record to redb
    /// (as the apply stage does after the log sync) and clears the overlay; the record.
    fn round<R>(
        store: &Store,
        overlay: &mut Overlay,
        n: u64,
        f: impl FnOnce(&mut Tables<'_>) -> R,
    ) -> (R, Vec<u8>) {
        overlay.begin(n);
        let txn = store.snapshot().unwrap();
        let mut t = Tables::open(&txn, overlay, store.heap()).unwrap();
        let r = f(&mut t);
        let record = t.into_log();
        store.replay_records([record.as_slice()]).unwrap();
        overlay.applied(n);
        (r, record)
    }

    /// Whether `f` marked its round as written, and logged something (each on a fresh
    /// store, with one message, one dead letter and one endpoint already stored).
    fn wrote_after(f: TableOp<'_>) -> (bool, bool) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut overlay = Overlay::default();
        round(&store, &mut overlay, 1, |t| {
            let e = entry(State::Pending);
            t.insert_message(MessageId(1), b"", &e).unwrap();
            t.insert_message(MessageId(2), b"", &e).unwrap();
            t.bury(MessageId(2), "queue:q", &e).unwrap();
            t.put_endpoint(
                TenantId::DEFAULT,
                &EndpointRecord {
                    name: "e".into(),
                    ..Default::default()
                },
            )
            .unwrap();
        });
        let (wrote, record) = round(&store, &mut overlay, 2, |t| {
            assert!(!t.wrote());
            f(t);
            t.wrote()
        });
        (wrote, !record.is_empty())
    }

    /// The round's log record depends on `wrote`: every row change must set it, and a
    /// round that only reads (or sweeps nothing) must not, or an idle hookd would sync
    /// 4 times a second for nothing.
    #[test]
    fn every_row_change_and_only_a_row_change_marks_and_logs_the_round() {
        let id = MessageId(1);
        let retry = || ScheduleEntry {
            due_ms: 5,
            state: State::Retry,
            attempts: 1,
            ..entry(State::Retry)
        };
        let writes: Vec<(&str, TableOp<'_>)> = vec![
            (
                "insert_message",
                Box::new(|t| t.insert_message(MessageId(9), b"x", &retry()).unwrap()),
            ),
            (
                "put_schedule",
                Box::new(|t| t.put_schedule(id, &retry()).unwrap()),
            ),
            (
                "push_attempt",
                Box::new(|t| t.push_attempt(id, AttemptRecord::default()).unwrap()),
            ),
            (
                "remove_message",
                Box::new(|t| t.remove_message(id).unwrap()),
            ),
            (
                "complete",
                Box::new(|t| t.complete(id, |_| DoneRecord::default()).unwrap()),
            ),
            (
                "bury",
                Box::new(|t| t.bury(id, "queue:q", &retry()).unwrap()),
            ),
            (
                "unbury",
                Box::new(|t| assert!(t.unbury(MessageId(2), "queue:q").unwrap().is_some())),
            ),
            (
                "claim_idempotency_key",
                Box::new(|t| {
                    t.claim_idempotency_key(b"q\0k", id, 1, 0).unwrap();
                }),
            ),
            (
                "put_endpoint",
                Box::new(|t| {
                    t.put_endpoint(TenantId::DEFAULT, &EndpointRecord::default())
                        .unwrap()
                }),
            ),
            (
                "remove_endpoint",
                Box::new(|t| t.remove_endpoint(TenantId::DEFAULT, "e").unwrap()),
            ),
            ("put_source", Box::new(|t| t.put_source("s", b"{}"))),
            ("remove_source", Box::new(|t| t.remove_source("s"))),
            (
                "sweep_done (one expired)",
                Box::new(|t| {
                    t.complete(MessageId(9), |_| DoneRecord::default()).unwrap();
                    assert_eq!(t.sweep_done(u64::MAX >> 16, 10).unwrap(), 1);
                }),
            ),
        ];
        for (name, f) in writes {
            assert_eq!(
                wrote_after(f),
                (true, true),
                "{name} changed a row without marking and logging the round"
            );
        }
        let reads: Vec<(&str, TableOp<'_>)> = vec![
            (
                "record",
                Box::new(|t| assert!(t.record(id).unwrap().is_some())),
            ),
            ("schedule", Box::new(|t| drop(t.schedule(id).unwrap()))),
            ("history", Box::new(|t| drop(t.history(id).unwrap()))),
            ("done", Box::new(|t| assert!(t.done(id).unwrap().is_none()))),
            (
                "dead_of",
                Box::new(|t| assert_eq!(t.dead_of("queue:q", 5).unwrap().len(), 1)),
            ),
            (
                "unbury (absent)",
                Box::new(|t| assert!(t.unbury(id, "queue:q").unwrap().is_none())),
            ),
            (
                "sweep_done (none expired)",
                Box::new(|t| assert_eq!(t.sweep_done(0, 10).unwrap(), 0)),
            ),
            (
                "sweep_idempotency (none)",
                Box::new(|t| drop(t.sweep_idempotency(None, 0, 10).unwrap())),
            ),
        ];
        for (name, f) in reads {
            assert_eq!(
                wrote_after(f),
                (false, false),
                "{name} changed nothing but marked or logged the round"
            );
        }
    }

    /// Finding F4: an attempt appends one row (and drops the oldest beyond the cap); the
    /// history is never rewritten whole, so an attempt's log record does not grow with
    /// the history. A format-2 row is folded into rows once, then removed.
    #[test]
    fn attempts_are_appended_not_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut overlay = Overlay::default();
        let id = MessageId(7);
        let attempt = |n: u32| AttemptRecord {
            number: n,
            outcome: "http_error".into(),
            error: format!("HTTP 500: {}", "x".repeat(900)),
            ..Default::default()
        };
        let mut sizes = Vec::new();
        for n in 1..=40u32 {
            let ((), record) = round(&store, &mut overlay, u64::from(n), |t| {
                t.push_attempt(id, attempt(n)).unwrap();
            });
            sizes.push(record.len());
            let changes = crate::store::rowlog::decode(&record).unwrap().len();
            // One put; from the 33rd on, one removal of the oldest too.
            let want = if n as usize > super::super::records::MAX_HISTORY {
                2
            } else {
                1
            };
            assert_eq!(changes, want, "attempt {n}");
        }
        // The record of attempt 40 is as small as that of attempt 2.
        assert!(sizes[39] <= sizes[1] + 32, "{sizes:?}");
        let (history, _) = round(&store, &mut overlay, 100, |t| t.history(id).unwrap());
        let numbers: Vec<u32> = history.attempts.iter().map(|a| a.number).collect();
        assert_eq!(numbers, (9..=40).collect::<Vec<_>>());
        assert!(history.last_error.starts_with("HTTP 500"));
        // A format-2 row: folded into rows at the next attempt, in front of it.
        let old = MessageId(8);
        let mut legacy = HistoryRecord::default();
        legacy.push(attempt(1));
        legacy.push(attempt(2));
        round(&store, &mut overlay, 101, |t| {
            t.put(TableId::History, &id_key(old), &legacy.encode_to_vec());
        });
        round(&store, &mut overlay, 102, |t| {
            t.push_attempt(old, attempt(3)).unwrap();
        });
        round(&store, &mut overlay, 103, |t| {
            let h = t.history(old).unwrap();
            let numbers: Vec<u32> = h.attempts.iter().map(|a| a.number).collect();
            assert_eq!(numbers, [1, 2, 3]);
            assert!(t.legacy_history(old).unwrap().is_none());
            // Removing the message removes every row.
            t.remove_message(old).unwrap();
            assert!(t.history(old).unwrap().attempts.is_empty());
        });
    }

    #[test]
    fn idempotency_claim_duplicate_expiry_and_sweep_through_the_overlay_and_redb() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut overlay = Overlay::default();
        let (a, b, c) = (MessageId(1), MessageId(2), MessageId(3));
        // Within one round (the overlay only) and across rounds (redb), alike.
        round(&store, &mut overlay, 1, |t| {
            assert_eq!(t.claim_idempotency_key(b"q\0k", a, 1_000, 0).unwrap(), None);
            // Within the window: the original wins and stays recorded.
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", b, 2_000, 500)
                    .unwrap()
                    .map(|o| o.id),
                Some(a)
            );
        });
        round(&store, &mut overlay, 2, |t| {
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", b, 2_000, 500)
                    .unwrap()
                    .map(|o| o.id),
                Some(a)
            );
            // Past the window (recorded before not_before): the new id takes the key.
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", c, 9_000, 5_000).unwrap(),
                None
            );
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", b, 9_500, 5_000)
                    .unwrap()
                    .map(|o| o.id),
                Some(c)
            );
            t.claim_idempotency_key(b"q\0old", a, 100, 0).unwrap();
            t.claim_idempotency_key(b"q\0new", a, 9_000, 0).unwrap();
        });
        round(&store, &mut overlay, 3, |t| {
            // A key still in the overlay and one in redb, both seen by the sweep.
            t.claim_idempotency_key(b"q\0older", a, 50, 0).unwrap();
            // A sweep in steps of one key visits every key and removes only expired ones.
            let mut cursor = None;
            let mut removed = 0;
            for _ in 0..10 {
                let step = t.sweep_idempotency(cursor.as_deref(), 5_000, 1).unwrap();
                let (n, next) = (step.removed, step.cursor);
                removed += n;
                cursor = next;
                if cursor.is_none() {
                    break;
                }
            }
            assert_eq!(removed, 2);
            assert_eq!(
                t.claim_idempotency_key(b"q\0old", b, 9_000, 0).unwrap(),
                None
            );
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", b, 9_500, 5_000)
                    .unwrap()
                    .map(|o| o.id),
                Some(c)
            );
        });
    }

    /// A publish's key keeps its deliveries' count and first ids (the answer a duplicate
    /// gets); an enqueue's row stays 24 bytes, as a format-8 hookd reads every row.
    #[test]
    fn a_publish_key_keeps_its_deliveries() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let mut overlay = Overlay::default();
        let ids: Vec<MessageId> = (10..2_010).map(MessageId).collect();
        round(&store, &mut overlay, 1, |t| {
            let kept = (2_000, ids.as_slice());
            assert_eq!(
                t.claim_publish_key(b"tt\0k", MessageId(1), kept, 1_000, 0)
                    .unwrap(),
                None
            );
            t.claim_idempotency_key(b"q\0k", MessageId(2), 1_000, 0)
                .unwrap();
        });
        round(&store, &mut overlay, 2, |t| {
            let original = t.idempotent_original(b"tt\0k", 0).unwrap().unwrap();
            assert_eq!(original.id, MessageId(1));
            assert_eq!(original.deliveries, 2_000);
            assert_eq!(original.delivery_ids, ids[..MAX_KEPT_DELIVERY_IDS].to_vec());
            let plain = t.idempotent_original(b"q\0k", 0).unwrap().unwrap();
            assert_eq!((plain.id, plain.deliveries), (MessageId(2), 0));
            assert!(plain.delivery_ids.is_empty());
        });
        // What the rows hold: a format-8 reader takes the first 24 bytes of each.
        let mut v = Vec::new();
        v.extend_from_slice(&7_u128.to_be_bytes());
        v.extend_from_slice(&5_u64.to_be_bytes());
        assert_eq!(decode_idempotency(&v).unwrap().0.id, MessageId(7));
        v.extend_from_slice(&1_u32.to_be_bytes());
        v.extend_from_slice(&9_u128.to_be_bytes());
        let (o, created) = decode_idempotency(&v).unwrap();
        assert_eq!(
            (o.deliveries, o.delivery_ids, created),
            (1, vec![MessageId(9)], 5)
        );
        v.pop();
        assert!(decode_idempotency(&v).is_err(), "a torn id is refused");
    }

    /// The coming fan-out stores one record for many deliveries: a record pointed to by
    /// two messages keeps its segment live until both are gone, each read back whole.
    #[test]
    fn a_record_referenced_twice_keeps_its_segment_until_both_references_go() {
        let dir = tempfile::tempdir().unwrap();
        let crate::store::Storage { store, mut log, .. } =
            crate::store::Storage::open_dir(dir.path(), 1 << 20, 1 << 20).unwrap();
        let (a, b) = (MessageId(1 << 81), MessageId(2 << 81));
        let record = MessageRecord {
            destination: "queue:q".into(),
            payload: b"one payload, two deliveries".to_vec(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut rows = RowLog::default();
        rows.put(TableId::Messages, &id_key(a), &record);
        let bytes = rows.into_bytes();
        let lsn = log.append(&bytes).unwrap();
        log.sync().unwrap();
        let segment = log.segment();
        store
            .replay_log_records([(segment, lsn, bytes.as_slice())])
            .unwrap();
        let rows = || store.segment_rows().unwrap();
        assert_eq!(rows()[0].1.live, 1);
        // A second reference to the same bytes, as a fan-out's second delivery.
        let txn = store.begin_round().unwrap();
        {
            let mut apply = Apply::open(&txn).unwrap();
            let at = RecordAt::frame(segment, lsn);
            let value_at = bytes.len() - record.len();
            let pointer = Pointer::to(at.segment, at.offset, &bytes, &bytes[value_at..]);
            apply
                .put_message(b.0, &id_key(b), &bytes[value_at..], Some((pointer, None)))
                .unwrap();
            // Put again (a replay): nothing changes.
            apply
                .put_message(b.0, &id_key(b), &bytes[value_at..], Some((pointer, None)))
                .unwrap();
            apply.finish().unwrap();
        }
        txn.commit().unwrap();
        let row = rows()[0].1;
        assert_eq!((row.live, row.live_bytes), (2, 2 * record.len() as u64));
        let mut overlay = Overlay::default();
        let read = |overlay: &mut Overlay| {
            let txn = store.snapshot().unwrap();
            let t = Tables::open(&txn, overlay, store.heap()).unwrap();
            (t.record(a).unwrap(), t.record(b).unwrap())
        };
        let (ra, rb) = read(&mut overlay);
        assert_eq!(ra, rb);
        assert_eq!(ra.unwrap().payload, b"one payload, two deliveries");
        // One goes: the segment is still pinned by the other; its pointer is retained.
        let mut rows_log = RowLog::default();
        rows_log.remove(TableId::Messages, &id_key(a));
        store
            .replay_log_records([(segment, lsn + 100, rows_log.into_bytes().as_slice())])
            .unwrap();
        assert_eq!(rows()[0].1.live, 1);
        assert!(matches!(
            store.completed_record(a).unwrap(),
            crate::store::Kept::Record(r) if r.payload == b"one payload, two deliveries"
        ));
        // The other goes: nothing live is left in the segment.
        let mut rows_log = RowLog::default();
        rows_log.remove(TableId::Messages, &id_key(b));
        store
            .replay_log_records([(segment, lsn + 200, rows_log.into_bytes().as_slice())])
            .unwrap();
        assert_eq!(
            rows()[0].1,
            SegmentRow {
                live: 0,
                live_bytes: 0,
                ..row
            }
        );
        // A byte changed in the segment is an error on read, never a different payload.
        let name = crate::wal::segment_name(segment);
        let path = dir.path().join(&name);
        let mut file = std::fs::read(&path).unwrap();
        let last = file.len() - 1;
        file[last] ^= 1;
        std::fs::write(&path, &file).unwrap();
        let err = store.completed_record(a).unwrap_err().to_string();
        assert!(err.contains("fails its checksum"), "{err}");
        // A deleted segment (as the log writer deletes it): the payload has expired.
        log.dir().remove(&name).unwrap();
        assert!(matches!(
            store.completed_record(b).unwrap(),
            crate::store::Kept::Expired
        ));
    }

    #[test]
    fn a_fan_out_writes_its_record_once_and_each_delivery_reads_its_own_destination() {
        let dir = tempfile::tempdir().unwrap();
        let crate::store::Storage { store, mut log, .. } =
            crate::store::Storage::open_dir(dir.path(), 1 << 20, 1 << 20).unwrap();
        let (a, b, c) = (MessageId(1 << 81), MessageId(2 << 81), MessageId(3 << 81));
        let payload = vec![7u8; 4_096];
        let record = MessageRecord {
            destination: "qa".into(),
            event_type: "ticket.classified".into(),
            payload: payload.clone(),
            ..Default::default()
        }
        .encode_to_vec();
        let entry = |d: &str| ScheduleEntry {
            due_ms: 1,
            state: State::Pending,
            attempts: 0,
            max_attempts: 3,
            since_ms: 0,
            destination: d.into(),
            lane: None,
            replayed: false,
        };
        // The engine's round: one record, two copies of it.
        let mut overlay = Overlay::default();
        let bytes = {
            let txn = store.snapshot().unwrap();
            let mut t = Tables::open(&txn, &mut overlay, store.heap()).unwrap();
            t.insert_message(a, &record, &entry("qa")).unwrap();
            t.insert_copy(b, a, &record, &entry("qb")).unwrap();
            t.insert_copy(c, a, &record, &entry("ewebhook")).unwrap();
            // Before the apply stage: read from the overlay, each with its destination.
            let rb = t.record(b).unwrap().unwrap();
            assert_eq!((rb.destination.as_str(), &rb.payload), ("qb", &payload));
            assert_eq!(t.record_len(c).unwrap() as usize, record.len());
            t.into_log()
        };
        // The overlay holds the payload twice (the first delivery's row, and the record
        // the copies share), never once per copy.
        assert!(
            overlay.bytes() < 2 * record.len() + 400,
            "{} bytes held for a {} byte record",
            overlay.bytes(),
            record.len()
        );
        assert!(
            bytes.len() < record.len() + 400,
            "the payload is in the log record once ({} bytes for a {} byte record)",
            bytes.len(),
            record.len()
        );
        let lsn = log.append(&bytes).unwrap();
        log.sync().unwrap();
        let segment = log.segment();
        // Replayed twice (a crash before the checkpoint): the same rows, the same counts.
        for _ in 0..2 {
            store
                .replay_log_records([(segment, lsn, bytes.as_slice())])
                .unwrap();
        }
        let rows = store.segment_rows().unwrap();
        assert_eq!(rows[0].1.live, 3);
        let mut fresh = Overlay::default();
        let txn = store.snapshot().unwrap();
        let t = Tables::open(&txn, &mut fresh, store.heap()).unwrap();
        for (id, destination) in [(a, "qa"), (b, "qb"), (c, "ewebhook")] {
            let r = t.record(id).unwrap().unwrap();
            assert_eq!(r.destination, destination);
            assert_eq!(r.payload, payload);
            assert_eq!(r.event_type, "ticket.classified");
            let stored = store.message(id).unwrap().unwrap();
            assert_eq!(stored.record.destination, destination);
        }
        drop(t);
        drop(txn);
        // A completed delivery keeps its own destination with its retained payload.
        let mut removal = RowLog::default();
        removal.remove(TableId::Messages, &id_key(b));
        store
            .replay_log_records([(segment, lsn + 10_000, removal.into_bytes().as_slice())])
            .unwrap();
        match store.completed_record(b).unwrap() {
            crate::store::Kept::Record(r) => assert_eq!(r.destination, "qb"),
            crate::store::Kept::Expired => panic!("expired at once"),
        }
        assert_eq!(store.segment_rows().unwrap()[0].1.live, 2);
        // A copy whose record is not in its log record is refused, never guessed.
        let mut orphan = RowLog::default();
        orphan.put(
            TableId::Messages,
            &id_key(MessageId(9 << 81)),
            &super::super::heap::copy_of(a.0, b"qz"),
        );
        let err = store
            .replay_log_records([(segment, lsn + 20_000, orphan.into_bytes().as_slice())])
            .unwrap_err()
            .to_string();
        assert!(err.contains("a copy of a record it does not hold"), "{err}");
    }

    #[test]
    fn compaction_copies_a_shared_record_once() {
        let dir = tempfile::tempdir().unwrap();
        let crate::store::Storage { store, mut log, .. } =
            crate::store::Storage::open_dir(dir.path(), 1 << 20, 1 << 20).unwrap();
        let ids: Vec<MessageId> = (1..=5u128).map(|i| MessageId(i << 81)).collect();
        let record = MessageRecord {
            destination: "q0".into(),
            payload: vec![1u8; 2_000],
            ..Default::default()
        }
        .encode_to_vec();
        let entry = |d: String| ScheduleEntry {
            due_ms: 1,
            state: State::Pending,
            attempts: 0,
            max_attempts: 3,
            since_ms: 0,
            destination: d,
            lane: None,
            replayed: false,
        };
        let mut overlay = Overlay::default();
        let bytes = {
            let txn = store.snapshot().unwrap();
            let mut t = Tables::open(&txn, &mut overlay, store.heap()).unwrap();
            t.insert_message(ids[0], &record, &entry("q0".into()))
                .unwrap();
            for (i, id) in ids.iter().enumerate().skip(1) {
                t.insert_copy(*id, ids[0], &record, &entry(format!("q{i}")))
                    .unwrap();
            }
            t.into_log()
        };
        let lsn = log.append(&bytes).unwrap();
        log.sync().unwrap();
        let segment = log.segment();
        store
            .replay_log_records([(segment, lsn, bytes.as_slice())])
            .unwrap();
        let mut overlay = Overlay::default();
        let txn = store.snapshot().unwrap();
        let mut t = Tables::open(&txn, &mut overlay, store.heap()).unwrap();
        let (moved, rest) = t.relocate(&[segment], None, 100).unwrap();
        assert_eq!((moved, rest), (5, None));
        let moved_log = t.into_log();
        assert!(
            moved_log.len() < record.len() + 300,
            "5 deliveries of one record moved with one copy of it ({} bytes)",
            moved_log.len()
        );
        drop(txn);
        let lsn2 = log.append(&moved_log).unwrap();
        log.sync().unwrap();
        store
            .replay_log_records([(log.segment(), lsn2, moved_log.as_slice())])
            .unwrap();
        for (i, id) in ids.iter().enumerate() {
            let m = store.message(*id).unwrap().unwrap();
            assert_eq!(m.record.destination, format!("q{i}"));
            assert_eq!(m.record.payload, vec![1u8; 2_000]);
        }
    }
}
