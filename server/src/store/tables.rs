//! The write side: every table opened once per round's write transaction, and the row
//! operations the engine composes. Only the engine thread holds a [`Tables`].
//!
//! Every method that changes a row records that the transaction wrote something
//! ([`Tables::wrote`]); the engine commits a round exactly when it did. The tables
//! themselves are private, so no write can bypass that record: a write path cannot forget
//! to mark its round dirty and then be rolled back while its caller is answered success.
//! For the same reason every change is also written to the round's [`RowLog`], the record
//! the write-ahead log makes durable: redb and the log cannot disagree about a round.

use prost::Message;
use redb::{ReadableTable, Table, WriteTransaction};

use super::rowlog::{Change, RowLog, TableId};
use super::records::{DoneRecord, EndpointRecord, HistoryRecord, MessageRecord, ScheduleEntry};
use super::{
    DEAD, DONE, ENDPOINTS, HISTORY, IDEMPOTENCY, MESSAGES, SCHEDULE, StoreError, dead_key,
    dead_key_id, dead_prefix,
};
use crate::ids::MessageId;

/// Every table, opened once per write transaction.
pub struct Tables<'txn> {
    messages: Table<'txn, u128, &'static [u8]>,
    schedule: Table<'txn, u128, &'static [u8]>,
    history: Table<'txn, u128, &'static [u8]>,
    done: Table<'txn, u128, &'static [u8]>,
    dead: Table<'txn, &'static [u8], &'static [u8]>,
    idempotency: Table<'txn, &'static [u8], &'static [u8]>,
    endpoints: Table<'txn, &'static str, &'static [u8]>,
    /// Some row changed in this transaction.
    wrote: bool,
    /// Every change, in order, for the write-ahead log.
    log: RowLog,
}

impl std::fmt::Debug for Tables<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tables")
    }
}

impl<'txn> Tables<'txn> {
    pub fn open(txn: &'txn WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            messages: txn.open_table(MESSAGES)?,
            schedule: txn.open_table(SCHEDULE)?,
            history: txn.open_table(HISTORY)?,
            done: txn.open_table(DONE)?,
            dead: txn.open_table(DEAD)?,
            idempotency: txn.open_table(IDEMPOTENCY)?,
            endpoints: txn.open_table(ENDPOINTS)?,
            wrote: false,
            log: RowLog::default(),
        })
    }

    /// Whether any row changed since these tables were opened: the transaction must then be
    /// committed before anyone is told of the change.
    pub fn wrote(&self) -> bool {
        self.wrote
    }

    /// Whether no change was recorded for the log.
    pub fn log_is_empty(&self) -> bool {
        self.log.is_empty()
    }

    /// The round's changes, encoded for the write-ahead log (empty if none).
    pub fn into_log(self) -> Vec<u8> {
        self.log.into_bytes()
    }

    /// Performs the changes of a log record (recovery), without recording them again;
    /// how many. Blind puts and removals: see `rowlog` for why a second replay is harmless.
    pub fn replay(&mut self, record: &[u8]) -> Result<usize, StoreError> {
        let changes = super::rowlog::decode(record)?;
        let id = |key: &[u8]| -> Result<u128, StoreError> {
            <[u8; 16]>::try_from(key)
                .map(u128::from_be_bytes)
                .map_err(|_| StoreError::Corrupt("log record: a message key".into()))
        };
        for change in &changes {
            self.wrote = true;
            match *change {
                Change::Put(table, key, value) => match table {
                    TableId::Messages => drop(self.messages.insert(id(key)?, value)?),
                    TableId::Schedule => drop(self.schedule.insert(id(key)?, value)?),
                    TableId::History => drop(self.history.insert(id(key)?, value)?),
                    TableId::Done => drop(self.done.insert(id(key)?, value)?),
                    TableId::Dead => drop(self.dead.insert(key, value)?),
                    TableId::Idempotency => drop(self.idempotency.insert(key, value)?),
                    TableId::Endpoints => drop(self.endpoints.insert(name(key)?, value)?),
                },
                Change::Remove(table, key) => match table {
                    TableId::Messages => drop(self.messages.remove(id(key)?)?),
                    TableId::Schedule => drop(self.schedule.remove(id(key)?)?),
                    TableId::History => drop(self.history.remove(id(key)?)?),
                    TableId::Done => drop(self.done.remove(id(key)?)?),
                    TableId::Dead => drop(self.dead.remove(key)?),
                    TableId::Idempotency => drop(self.idempotency.remove(key)?),
                    TableId::Endpoints => drop(self.endpoints.remove(name(key)?)?),
                },
            }
        }
        Ok(changes.len())
    }

    /// Stores a new message: its encoded [`MessageRecord`] and its schedule row.
    pub fn insert_message(
        &mut self,
        id: MessageId,
        record: &[u8],
        entry: &ScheduleEntry,
    ) -> Result<(), StoreError> {
        self.wrote = true;
        let entry = entry.encode();
        self.messages.insert(id.0, record)?;
        self.schedule.insert(id.0, entry.as_slice())?;
        self.log.put(TableId::Messages, &id.0.to_be_bytes(), record);
        self.log.put(TableId::Schedule, &id.0.to_be_bytes(), &entry);
        Ok(())
    }

    pub fn record(&self, id: MessageId) -> Result<Option<MessageRecord>, StoreError> {
        match self.messages.get(id.0)? {
            Some(v) => Ok(Some(MessageRecord::decode(v.value())?)),
            None => Ok(None),
        }
    }

    pub fn schedule(&self, id: MessageId) -> Result<ScheduleEntry, StoreError> {
        match self.schedule.get(id.0)? {
            Some(v) => ScheduleEntry::decode(v.value()),
            None => Err(StoreError::Corrupt(format!(
                "message {id} is live but has no schedule row"
            ))),
        }
    }

    pub fn put_schedule(&mut self, id: MessageId, entry: &ScheduleEntry) -> Result<(), StoreError> {
        self.wrote = true;
        let entry = entry.encode();
        self.schedule.insert(id.0, entry.as_slice())?;
        self.log.put(TableId::Schedule, &id.0.to_be_bytes(), &entry);
        Ok(())
    }

    pub fn history(&self, id: MessageId) -> Result<HistoryRecord, StoreError> {
        super::history_of(&self.history, id)
    }

    pub fn put_history(
        &mut self,
        id: MessageId,
        history: &HistoryRecord,
    ) -> Result<(), StoreError> {
        self.wrote = true;
        let value = history.encode_to_vec();
        self.history.insert(id.0, value.as_slice())?;
        self.log.put(TableId::History, &id.0.to_be_bytes(), &value);
        Ok(())
    }

    /// Removes a completed message entirely (its idempotency key stays until it expires).
    pub fn remove_message(&mut self, id: MessageId) -> Result<(), StoreError> {
        self.wrote = true;
        self.messages.remove(id.0)?;
        self.schedule.remove(id.0)?;
        self.history.remove(id.0)?;
        let key = id.0.to_be_bytes();
        self.log.remove(TableId::Messages, &key);
        self.log.remove(TableId::Schedule, &key);
        self.log.remove(TableId::History, &key);
        Ok(())
    }

    /// Removes a completed message and keeps `done` (metadata and attempts) in its place.
    pub fn complete(&mut self, id: MessageId, done: &DoneRecord) -> Result<(), StoreError> {
        self.remove_message(id)?;
        let value = done.encode_to_vec();
        self.done.insert(id.0, value.as_slice())?;
        self.log.put(TableId::Done, &id.0.to_be_bytes(), &value);
        Ok(())
    }

    /// A completed message's record, while it is kept.
    pub fn done(&self, id: MessageId) -> Result<Option<DoneRecord>, StoreError> {
        match self.done.get(id.0)? {
            Some(v) => Ok(Some(DoneRecord::decode(v.value())?)),
            None => Ok(None),
        }
    }

    /// Forgets up to `limit` completed messages created before `before_ms`; how many.
    pub fn sweep_done(&mut self, before_ms: u64, limit: usize) -> Result<usize, StoreError> {
        // UUIDv7: the top 48 bits are the creation time in ms.
        let bound = u128::from(before_ms) << 80;
        let mut expired = Vec::new();
        for row in self.done.range(..bound)? {
            expired.push(row?.0.value());
            if expired.len() >= limit {
                break;
            }
        }
        for id in &expired {
            self.done.remove(*id)?;
            self.log.remove(TableId::Done, &id.to_be_bytes());
            self.wrote = true;
        }
        Ok(expired.len())
    }

    /// Moves a live message to the dead-letter index.
    pub fn bury(
        &mut self,
        id: MessageId,
        dest_key: &str,
        entry: &ScheduleEntry,
    ) -> Result<(), StoreError> {
        self.wrote = true;
        let (key, entry) = (dead_key(dest_key, id), entry.encode());
        self.schedule.remove(id.0)?;
        self.dead.insert(key.as_slice(), entry.as_slice())?;
        self.log.remove(TableId::Schedule, &id.0.to_be_bytes());
        self.log.put(TableId::Dead, &key, &entry);
        Ok(())
    }

    /// Takes a message out of the dead-letter index; its dead row, if it was there.
    pub fn unbury(
        &mut self,
        id: MessageId,
        dest_key: &str,
    ) -> Result<Option<ScheduleEntry>, StoreError> {
        let key = dead_key(dest_key, id);
        let entry = match self.dead.remove(key.as_slice())? {
            Some(v) => ScheduleEntry::decode(v.value())?,
            None => return Ok(None),
        };
        self.wrote = true;
        self.log.remove(TableId::Dead, &key);
        Ok(Some(entry))
    }

    /// Ids of up to `limit` dead letters of one destination.
    pub fn dead_of(&self, dest_key: &str, limit: usize) -> Result<Vec<MessageId>, StoreError> {
        let prefix = dead_prefix(dest_key);
        let mut out = Vec::new();
        for row in self.dead.range(prefix.as_slice()..)? {
            let (key, _) = row?;
            let key = key.value();
            if !key.starts_with(&prefix) || out.len() >= limit {
                break;
            }
            out.push(dead_key_id(key)?);
        }
        Ok(out)
    }

    /// Records that `scoped_key` names message `id`, unless it already names a message
    /// recorded at or after `not_before_ms`: then nothing changes and that earlier id is
    /// returned. One B-tree insert in the common (new key) case instead of a lookup and an
    /// insert; a duplicate, the rare case, pays a second insert to put the original back.
    pub fn claim_idempotency_key(
        &mut self,
        scoped_key: &[u8],
        id: MessageId,
        created_ms: u64,
        not_before_ms: u64,
    ) -> Result<Option<MessageId>, StoreError> {
        self.wrote = true;
        let mut v = [0u8; 24];
        v[..16].copy_from_slice(&id.0.to_be_bytes());
        v[16..].copy_from_slice(&created_ms.to_be_bytes());
        let previous = self
            .idempotency
            .insert(scoped_key, v.as_slice())?
            .map(|old| old.value().to_vec());
        if let Some(old) = previous {
            let (original, created) = decode_idempotency(&old)?;
            if created >= not_before_ms {
                self.idempotency.insert(scoped_key, old.as_slice())?;
                // The key is unchanged: the log records it as it stays.
                self.log.put(TableId::Idempotency, scoped_key, &old);
                return Ok(Some(original));
            }
        }
        self.log.put(TableId::Idempotency, scoped_key, &v);
        Ok(None)
    }

    /// One step of the idempotency sweep: looks at up to `scan` keys after `cursor` and
    /// forgets those recorded before `before_ms`. Returns how many were removed and where to
    /// continue (`None`: the pass is complete). Keys are random, so there is no time-ordered
    /// index to range over; an incremental pass keeps each round short instead, and lookups
    /// ignore expired keys anyway, so the sweep only reclaims space.
    pub fn sweep_idempotency(
        &mut self,
        cursor: Option<&[u8]>,
        before_ms: u64,
        scan: usize,
    ) -> Result<(usize, Option<Vec<u8>>), StoreError> {
        let mut expired = Vec::new();
        let mut last = None;
        let mut seen = 0;
        let range = match cursor {
            Some(c) => self
                .idempotency
                .range::<&[u8]>((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))?,
            None => self.idempotency.range::<&[u8]>(..)?,
        };
        for row in range {
            let (key, value) = row?;
            let (_, created) = decode_idempotency(value.value())?;
            if created < before_ms {
                expired.push(key.value().to_vec());
            }
            seen += 1;
            if seen >= scan {
                last = Some(key.value().to_vec());
                break;
            }
        }
        for key in &expired {
            self.idempotency.remove(key.as_slice())?;
            self.log.remove(TableId::Idempotency, key);
            self.wrote = true;
        }
        Ok((expired.len(), last))
    }

    pub fn put_endpoint(&mut self, endpoint: &EndpointRecord) -> Result<(), StoreError> {
        self.wrote = true;
        let value = endpoint.encode_to_vec();
        self.endpoints
            .insert(endpoint.name.as_str(), value.as_slice())?;
        self.log
            .put(TableId::Endpoints, endpoint.name.as_bytes(), &value);
        Ok(())
    }

    pub fn remove_endpoint(&mut self, name: &str) -> Result<(), StoreError> {
        self.wrote = true;
        self.endpoints.remove(name)?;
        self.log.remove(TableId::Endpoints, name.as_bytes());
        Ok(())
    }
}

fn name(key: &[u8]) -> Result<&str, StoreError> {
    std::str::from_utf8(key).map_err(|_| StoreError::Corrupt("log record: an endpoint name".into()))
}

fn decode_idempotency(v: &[u8]) -> Result<(MessageId, u64), StoreError> {
    let corrupt = || StoreError::Corrupt("idempotency record".into());
    let id = <[u8; 16]>::try_from(v.get(..16).ok_or_else(corrupt)?).map_err(|_| corrupt())?;
    let created = <[u8; 8]>::try_from(v.get(16..24).ok_or_else(corrupt)?).map_err(|_| corrupt())?;
    Ok((
        MessageId(u128::from_be_bytes(id)),
        u64::from_be_bytes(created),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{State, Store};

    type TableOp<'a> = Box<dyn FnOnce(&mut Tables<'_>) + 'a>;

    /// Whether `f` marked its transaction as written (each on a fresh transaction, with
    /// one message, one dead letter and one endpoint already committed).
    fn wrote_after(f: TableOp<'_>) -> bool {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let entry = ScheduleEntry {
            due_ms: 1,
            state: State::Pending,
            attempts: 0,
            max_attempts: 3,
            since_ms: 0,
            destination: "qq".into(),
        };
        let txn = store.begin_write().unwrap();
        {
            let mut t = Tables::open(&txn).unwrap();
            t.insert_message(MessageId(1), b"", &entry).unwrap();
            t.insert_message(MessageId(2), b"", &entry).unwrap();
            t.bury(MessageId(2), "queue:q", &entry).unwrap();
            t.put_endpoint(&EndpointRecord {
                name: "e".into(),
                ..Default::default()
            })
            .unwrap();
        }
        txn.commit().unwrap();
        let txn = store.begin_write().unwrap();
        let mut t = Tables::open(&txn).unwrap();
        assert!(!t.wrote());
        f(&mut t);
        t.wrote()
    }

    /// The round's commit depends on `wrote`: every row change must set it, and a round
    /// that only reads (or sweeps nothing) must not, or an idle hookd would fsync 4 times
    /// a second for nothing.
    #[test]
    fn every_row_change_and_only_a_row_change_marks_the_transaction() {
        let id = MessageId(1);
        let entry = || ScheduleEntry {
            due_ms: 5,
            state: State::Retry,
            attempts: 1,
            max_attempts: 3,
            since_ms: 0,
            destination: "qq".into(),
        };
        let writes: Vec<(&str, TableOp<'_>)> = vec![
            (
                "insert_message",
                Box::new(|t| t.insert_message(MessageId(9), b"x", &entry()).unwrap()),
            ),
            (
                "put_schedule",
                Box::new(|t| t.put_schedule(id, &entry()).unwrap()),
            ),
            (
                "put_history",
                Box::new(|t| t.put_history(id, &HistoryRecord::default()).unwrap()),
            ),
            (
                "remove_message",
                Box::new(|t| t.remove_message(id).unwrap()),
            ),
            (
                "complete",
                Box::new(|t| t.complete(id, &DoneRecord::default()).unwrap()),
            ),
            (
                "bury",
                Box::new(|t| t.bury(id, "queue:q", &entry()).unwrap()),
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
                Box::new(|t| t.put_endpoint(&EndpointRecord::default()).unwrap()),
            ),
            (
                "remove_endpoint",
                Box::new(|t| t.remove_endpoint("e").unwrap()),
            ),
            (
                "sweep_done (one expired)",
                Box::new(|t| {
                    t.complete(MessageId(9), &DoneRecord::default()).unwrap();
                    assert_eq!(t.sweep_done(u64::MAX >> 16, 10).unwrap(), 1);
                }),
            ),
        ];
        for (name, f) in writes {
            assert!(
                wrote_after(f),
                "{name} changed a row without marking the transaction"
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
            assert!(
                !wrote_after(f),
                "{name} changed nothing but marked the transaction"
            );
        }
    }

    #[test]
    fn idempotency_claim_duplicate_expiry_and_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (a, b, c) = (MessageId(1), MessageId(2), MessageId(3));
        let txn = store.begin_write().unwrap();
        {
            let mut t = Tables::open(&txn).unwrap();
            assert_eq!(t.claim_idempotency_key(b"q\0k", a, 1_000, 0).unwrap(), None);
            // Within the window: the original wins and stays recorded.
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", b, 2_000, 500).unwrap(),
                Some(a)
            );
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", b, 2_000, 500).unwrap(),
                Some(a)
            );
            // Past the window (recorded before not_before): the new id takes the key.
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", c, 9_000, 5_000).unwrap(),
                None
            );
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", b, 9_500, 5_000).unwrap(),
                Some(c)
            );
            t.claim_idempotency_key(b"q\0old", a, 100, 0).unwrap();
            // A sweep in steps of one key visits every key and removes only expired ones.
            let mut cursor = None;
            let mut removed = 0;
            for _ in 0..10 {
                let (n, next) = t.sweep_idempotency(cursor.as_deref(), 5_000, 1).unwrap();
                removed += n;
                cursor = next;
                if cursor.is_none() {
                    break;
                }
            }
            assert_eq!(removed, 1);
            assert_eq!(
                t.claim_idempotency_key(b"q\0old", b, 9_000, 0).unwrap(),
                None
            );
            assert_eq!(
                t.claim_idempotency_key(b"q\0k", b, 9_500, 5_000).unwrap(),
                Some(c)
            );
        }
        txn.commit().unwrap();
    }
}
