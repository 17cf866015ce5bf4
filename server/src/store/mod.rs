//! The durable store: one redb file, `<data_dir>/hookd.redb`.
//!
//! Ground rules:
//! - Only the engine thread writes (redb allows one writer at a time anyway). It opens one
//!   [`WriteTransaction`] per group of requests, applies them through [`Tables`], and commits
//!   with `Durability::Immediate`. Nobody is told "done" before that commit has returned; see
//!   `docs/durability.md` for the crash cases.
//! - Any thread may read through [`Store`]'s read methods: redb's MVCC gives each read a
//!   consistent snapshot of the last commit, without blocking the writer.
//! - After a failed commit redb refuses further writes (`PreviousIo`) until reopened; the
//!   engine then answers UNAVAILABLE to everything rather than guess.
//!
//! Tables:
//! | table | key | value |
//! |---|---|---|
//! | `messages` | id (u128) | [`MessageRecord`] (protobuf, with the payload): written once |
//! | `schedule` | id | [`ScheduleEntry`] of a live message: due time, state, attempts, destination |
//! | `history` | id | [`HistoryRecord`]: finished attempts; written when an attempt ends |
//! | `dead` | destination key, 0, id (16 bytes BE) | [`ScheduleEntry`] of a dead letter |
//! | `idempotency` | encoded destination, 0, client key | id (16) + created ms (8) |
//! | `endpoints` | name | `hookd.v1.Endpoint` (protobuf) |
//!
//! An enqueue writes three rows (`messages`, `schedule`, and `idempotency` when a key is
//! given); a lease rewrites one small `schedule` row. Every table insert costs B-tree work in
//! the single writer, so the layout keeps that count low.

pub mod faults;
pub mod records;

use std::path::Path;
use std::sync::Arc;

use hookd_proto::v1 as pb;
use prost::Message;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table,
    TableDefinition, WriteTransaction,
};

pub use records::{AttemptRecord, HistoryRecord, MessageRecord, ScheduleEntry, State};

use crate::destination::Destination;
use crate::ids::MessageId;

const MESSAGES: TableDefinition<u128, &[u8]> = TableDefinition::new("messages");
const SCHEDULE: TableDefinition<u128, &[u8]> = TableDefinition::new("schedule");
const HISTORY: TableDefinition<u128, &[u8]> = TableDefinition::new("history");
const DEAD: TableDefinition<&[u8], &[u8]> = TableDefinition::new("dead");
const IDEMPOTENCY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idempotency");
const ENDPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("endpoints");

/// A storage failure. Never answered as success; mapped to UNAVAILABLE.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("storage error: {0}")]
    Redb(#[from] redb::Error),
    #[error("corrupt record: {0}")]
    Corrupt(String),
    #[error("cannot create data directory: {0}")]
    Io(#[from] std::io::Error),
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                Self::Redb(e.into())
            }
        }
    )*};
}
from_redb!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::SetDurabilityError
);

impl From<prost::DecodeError> for StoreError {
    fn from(e: prost::DecodeError) -> Self {
        Self::Corrupt(e.to_string())
    }
}

/// Everything stored about one message.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub id: MessageId,
    pub record: MessageRecord,
    /// Its live schedule row, or its dead-letter row.
    pub entry: ScheduleEntry,
    pub history: HistoryRecord,
}

/// A page of dead letters and, if more follow, the key to continue after.
pub type DeadLetterPage = (Vec<StoredMessage>, Option<Vec<u8>>);

/// Handle to the database; cheap to clone, shared by the engine and readers.
#[derive(Debug, Clone)]
pub struct Store {
    db: Arc<Database>,
}

/// What start-up reads back to rebuild the in-memory index.
#[derive(Debug, Default)]
pub struct Recovered {
    pub scheduled: Vec<(MessageId, ScheduleEntry)>,
    /// Dead letters per destination key.
    pub dead: Vec<(String, u64)>,
    pub endpoints: Vec<pb::Endpoint>,
}

impl Store {
    /// Opens (or creates) `<dir>/hookd.redb` and makes sure every table exists.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, None)
    }

    /// As [`Store::open`]; with `faults`, on storage that fails when a test says so.
    pub fn open_with(dir: &Path, faults: Option<faults::Faults>) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("hookd.redb");
        let mut builder = Database::builder();
        builder.set_cache_size(256 << 20);
        let db = match faults {
            None => builder.create(path)?,
            Some(faults) => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)?;
                builder.create_with_backend(faults::FaultyFile::new(file, faults)?)?
            }
        };
        let store = Self { db: Arc::new(db) };
        let txn = store.begin_write()?;
        Tables::open(&txn)?;
        txn.commit()?;
        Ok(store)
    }

    /// A write transaction that commits with `Durability::Immediate`: when `commit()` returns
    /// Ok, the data is on disk (fsync'd).
    pub fn begin_write(&self) -> Result<WriteTransaction, StoreError> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        // Keeps the allocator state in each commit, so reopening after a crash is a quick
        // check instead of a full scan of the file.
        txn.set_quick_repair(true);
        Ok(txn)
    }

    /// Reads what the engine needs at start: the schedule (not the payloads), dead-letter
    /// counts and endpoints.
    pub fn recover(&self) -> Result<Recovered, StoreError> {
        let txn = self.db.begin_read()?;
        let mut out = Recovered::default();
        let schedule = txn.open_table(SCHEDULE)?;
        out.scheduled.reserve(schedule.len()? as usize);
        for row in schedule.iter()? {
            let (id, entry) = row?;
            out.scheduled
                .push((MessageId(id.value()), ScheduleEntry::decode(entry.value())?));
        }
        let dead = txn.open_table(DEAD)?;
        for row in dead.iter()? {
            let (key, _) = row?;
            let dest = dead_key_destination(key.value())?;
            match out.dead.last_mut() {
                Some((last, n)) if *last == dest => *n += 1,
                _ => out.dead.push((dest, 1)),
            }
        }
        let endpoints = txn.open_table(ENDPOINTS)?;
        for row in endpoints.iter()? {
            let (_, value) = row?;
            out.endpoints.push(pb::Endpoint::decode(value.value())?);
        }
        Ok(out)
    }

    pub fn message(&self, id: MessageId) -> Result<Option<StoredMessage>, StoreError> {
        let txn = self.db.begin_read()?;
        let messages = txn.open_table(MESSAGES)?;
        let Some(record) = messages.get(id.0)? else {
            return Ok(None);
        };
        let record = MessageRecord::decode(record.value())?;
        let entry = match txn.open_table(SCHEDULE)?.get(id.0)? {
            Some(e) => ScheduleEntry::decode(e.value())?,
            None => {
                let key = dead_key(&dest_key_of(&record.destination)?, id);
                match txn.open_table(DEAD)?.get(key.as_slice())? {
                    Some(e) => ScheduleEntry::decode(e.value())?,
                    None => {
                        return Err(StoreError::Corrupt(format!(
                            "message {id} has neither schedule nor dead row"
                        )));
                    }
                }
            }
        };
        let history = match txn.open_table(HISTORY)?.get(id.0)? {
            Some(h) => HistoryRecord::decode(h.value())?,
            None => HistoryRecord::default(),
        };
        Ok(Some(StoredMessage {
            id,
            record,
            entry,
            history,
        }))
    }

    pub fn endpoint(&self, name: &str) -> Result<Option<pb::Endpoint>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ENDPOINTS)?;
        match table.get(name)? {
            Some(v) => Ok(Some(pb::Endpoint::decode(v.value())?)),
            None => Ok(None),
        }
    }

    pub fn endpoints(&self) -> Result<Vec<pb::Endpoint>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ENDPOINTS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            out.push(pb::Endpoint::decode(row?.1.value())?);
        }
        Ok(out)
    }

    /// A page of dead letters in (destination, id) order, optionally of one destination.
    /// `after` is the last key of the previous page.
    pub fn dead_letters(
        &self,
        destination: Option<&Destination>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        let txn = self.db.begin_read()?;
        let dead = txn.open_table(DEAD)?;
        let messages = txn.open_table(MESSAGES)?;
        let history = txn.open_table(HISTORY)?;
        let prefix = destination.map(|d| dead_prefix(&d.key()));
        let start: Vec<u8> = match (after, &prefix) {
            (Some(after), _) => {
                let mut k = after.to_vec();
                k.push(0); // the smallest key strictly after `after`
                k
            }
            (None, Some(p)) => p.clone(),
            (None, None) => Vec::new(),
        };
        let mut page = Vec::new();
        let mut last_key = None;
        for row in dead.range(start.as_slice()..)? {
            let (key, entry) = row?;
            let key = key.value();
            if let Some(p) = &prefix
                && !key.starts_with(p)
            {
                break;
            }
            if page.len() == limit {
                return Ok((page, last_key));
            }
            let id = dead_key_id(key)?;
            if let Some(record) = messages.get(id.0)? {
                let history = match history.get(id.0)? {
                    Some(h) => HistoryRecord::decode(h.value())?,
                    None => HistoryRecord::default(),
                };
                page.push(StoredMessage {
                    id,
                    record: MessageRecord::decode(record.value())?,
                    entry: ScheduleEntry::decode(entry.value())?,
                    history,
                });
            }
            last_key = Some(key.to_vec());
        }
        Ok((page, None))
    }
}

/// Every table, opened once per write transaction.
pub struct Tables<'txn> {
    messages: Table<'txn, u128, &'static [u8]>,
    schedule: Table<'txn, u128, &'static [u8]>,
    history: Table<'txn, u128, &'static [u8]>,
    dead: Table<'txn, &'static [u8], &'static [u8]>,
    idempotency: Table<'txn, &'static [u8], &'static [u8]>,
    endpoints: Table<'txn, &'static str, &'static [u8]>,
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
            dead: txn.open_table(DEAD)?,
            idempotency: txn.open_table(IDEMPOTENCY)?,
            endpoints: txn.open_table(ENDPOINTS)?,
        })
    }

    /// Stores a new message: its encoded [`MessageRecord`] and its schedule row.
    pub fn insert_message(
        &mut self,
        id: MessageId,
        record: &[u8],
        entry: &ScheduleEntry,
    ) -> Result<(), StoreError> {
        self.messages.insert(id.0, record)?;
        self.schedule.insert(id.0, entry.encode().as_slice())?;
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
        self.schedule.insert(id.0, entry.encode().as_slice())?;
        Ok(())
    }

    pub fn history(&self, id: MessageId) -> Result<HistoryRecord, StoreError> {
        match self.history.get(id.0)? {
            Some(v) => Ok(HistoryRecord::decode(v.value())?),
            None => Ok(HistoryRecord::default()),
        }
    }

    pub fn put_history(
        &mut self,
        id: MessageId,
        history: &HistoryRecord,
    ) -> Result<(), StoreError> {
        self.history
            .insert(id.0, history.encode_to_vec().as_slice())?;
        Ok(())
    }

    /// Removes a completed message entirely (its idempotency key stays until it expires).
    pub fn remove_message(&mut self, id: MessageId) -> Result<(), StoreError> {
        self.messages.remove(id.0)?;
        self.schedule.remove(id.0)?;
        self.history.remove(id.0)?;
        Ok(())
    }

    /// Moves a live message to the dead-letter index.
    pub fn bury(
        &mut self,
        id: MessageId,
        dest_key: &str,
        entry: &ScheduleEntry,
    ) -> Result<(), StoreError> {
        self.schedule.remove(id.0)?;
        self.dead
            .insert(dead_key(dest_key, id).as_slice(), entry.encode().as_slice())?;
        Ok(())
    }

    /// Takes a message out of the dead-letter index; its dead row, if it was there.
    pub fn unbury(
        &mut self,
        id: MessageId,
        dest_key: &str,
    ) -> Result<Option<ScheduleEntry>, StoreError> {
        match self.dead.remove(dead_key(dest_key, id).as_slice())? {
            Some(v) => Ok(Some(ScheduleEntry::decode(v.value())?)),
            None => Ok(None),
        }
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
                return Ok(Some(original));
            }
        }
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
        }
        Ok((expired.len(), last))
    }

    pub fn put_endpoint(&mut self, endpoint: &pb::Endpoint) -> Result<(), StoreError> {
        self.endpoints
            .insert(endpoint.name.as_str(), endpoint.encode_to_vec().as_slice())?;
        Ok(())
    }

    pub fn remove_endpoint(&mut self, name: &str) -> Result<(), StoreError> {
        self.endpoints.remove(name)?;
        Ok(())
    }
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

/// The destination key of an encoded destination.
fn dest_key_of(encoded: &str) -> Result<String, StoreError> {
    Destination::decode(encoded)
        .map(|d| d.key())
        .ok_or_else(|| StoreError::Corrupt(format!("destination {encoded:?}")))
}

/// Scopes a client's idempotency key to its exact destination (`Destination::encode()`:
/// two ad-hoc URLs of one origin are different destinations here).
pub fn idempotency_scope(destination: &str, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(destination.len() + 1 + key.len());
    out.extend_from_slice(destination.as_bytes());
    out.push(0);
    out.extend_from_slice(key.as_bytes());
    out
}

fn dead_prefix(dest_key: &str) -> Vec<u8> {
    let mut out = dest_key.as_bytes().to_vec();
    out.push(0);
    out
}

fn dead_key(dest_key: &str, id: MessageId) -> Vec<u8> {
    let mut out = dead_prefix(dest_key);
    out.extend_from_slice(&id.0.to_be_bytes());
    out
}

fn dead_key_id(key: &[u8]) -> Result<MessageId, StoreError> {
    let tail = key
        .len()
        .checked_sub(16)
        .and_then(|at| key.get(at..))
        .and_then(|t| <[u8; 16]>::try_from(t).ok())
        .ok_or_else(|| StoreError::Corrupt("dead-letter key".into()))?;
    Ok(MessageId(u128::from_be_bytes(tail)))
}

fn dead_key_destination(key: &[u8]) -> Result<String, StoreError> {
    let dest = key
        .len()
        .checked_sub(17)
        .and_then(|at| key.get(..at))
        .ok_or_else(|| StoreError::Corrupt("dead-letter key".into()))?;
    String::from_utf8(dest.to_vec()).map_err(|_| StoreError::Corrupt("dead-letter key".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
