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
//! | `messages` | id (u128) | [`MessageMeta`] (protobuf) |
//! | `payloads` | id | payload bytes |
//! | `schedule` | id | [`ScheduleEntry`]: due time, state, attempts, destination |
//! | `dead` | destination key, 0, id (16 bytes BE) | () |
//! | `idempotency` | destination key, 0, client key | id (16) + created ms (8) |
//! | `idempotency_expiry` | created ms (8 BE), scoped key | () |
//! | `endpoints` | name | `hookd.v1.Endpoint` (protobuf) |

pub mod records;

use std::path::Path;
use std::sync::Arc;

use hookd_proto::v1 as pb;
use prost::Message;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, Table,
    TableDefinition, WriteTransaction,
};

pub use records::{AttemptRecord, MessageMeta, ScheduleEntry, State};

use crate::destination::Destination;
use crate::ids::MessageId;

const MESSAGES: TableDefinition<u128, &[u8]> = TableDefinition::new("messages");
const PAYLOADS: TableDefinition<u128, &[u8]> = TableDefinition::new("payloads");
const SCHEDULE: TableDefinition<u128, &[u8]> = TableDefinition::new("schedule");
const DEAD: TableDefinition<&[u8], ()> = TableDefinition::new("dead");
const IDEMPOTENCY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idempotency");
const IDEMPOTENCY_EXPIRY: TableDefinition<&[u8], ()> = TableDefinition::new("idempotency_expiry");
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

/// A page of dead letters and, if more follow, the key to continue after.
pub type DeadLetterPage = (Vec<(MessageId, MessageMeta)>, Option<Vec<u8>>);

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
        std::fs::create_dir_all(dir)?;
        let db = Database::builder()
            .set_cache_size(256 << 20)
            .create(dir.join("hookd.redb"))?;
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

    pub fn message(&self, id: MessageId) -> Result<Option<MessageMeta>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(MESSAGES)?;
        match table.get(id.0)? {
            Some(v) => Ok(Some(MessageMeta::decode(v.value())?)),
            None => Ok(None),
        }
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
            let (key, _) = row?;
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
            if let Some(meta) = messages.get(id.0)? {
                page.push((id, MessageMeta::decode(meta.value())?));
            }
            last_key = Some(key.to_vec());
        }
        Ok((page, None))
    }
}

/// Every table, opened once per write transaction.
pub struct Tables<'txn> {
    messages: Table<'txn, u128, &'static [u8]>,
    payloads: Table<'txn, u128, &'static [u8]>,
    schedule: Table<'txn, u128, &'static [u8]>,
    dead: Table<'txn, &'static [u8], ()>,
    idempotency: Table<'txn, &'static [u8], &'static [u8]>,
    idempotency_expiry: Table<'txn, &'static [u8], ()>,
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
            payloads: txn.open_table(PAYLOADS)?,
            schedule: txn.open_table(SCHEDULE)?,
            dead: txn.open_table(DEAD)?,
            idempotency: txn.open_table(IDEMPOTENCY)?,
            idempotency_expiry: txn.open_table(IDEMPOTENCY_EXPIRY)?,
            endpoints: txn.open_table(ENDPOINTS)?,
        })
    }

    pub fn insert_message(
        &mut self,
        id: MessageId,
        meta: &MessageMeta,
        payload: &[u8],
        entry: &ScheduleEntry,
    ) -> Result<(), StoreError> {
        self.messages
            .insert(id.0, meta.encode_to_vec().as_slice())?;
        self.payloads.insert(id.0, payload)?;
        self.schedule.insert(id.0, entry.encode().as_slice())?;
        Ok(())
    }

    pub fn meta(&self, id: MessageId) -> Result<MessageMeta, StoreError> {
        match self.messages.get(id.0)? {
            Some(v) => Ok(MessageMeta::decode(v.value())?),
            None => Err(StoreError::Corrupt(format!(
                "message {id} is indexed but not stored"
            ))),
        }
    }

    /// The meta of `id`, or `None` if no such message is stored.
    pub fn meta_opt(&self, id: MessageId) -> Result<Option<MessageMeta>, StoreError> {
        match self.messages.get(id.0)? {
            Some(v) => Ok(Some(MessageMeta::decode(v.value())?)),
            None => Ok(None),
        }
    }

    pub fn payload(&self, id: MessageId) -> Result<Vec<u8>, StoreError> {
        match self.payloads.get(id.0)? {
            Some(v) => Ok(v.value().to_vec()),
            None => Err(StoreError::Corrupt(format!("payload of {id} missing"))),
        }
    }

    pub fn put_meta(&mut self, id: MessageId, meta: &MessageMeta) -> Result<(), StoreError> {
        self.messages
            .insert(id.0, meta.encode_to_vec().as_slice())?;
        Ok(())
    }

    pub fn put_schedule(&mut self, id: MessageId, entry: &ScheduleEntry) -> Result<(), StoreError> {
        self.schedule.insert(id.0, entry.encode().as_slice())?;
        Ok(())
    }

    /// Removes a completed message entirely (its idempotency key stays until it expires).
    pub fn remove_message(&mut self, id: MessageId) -> Result<(), StoreError> {
        self.messages.remove(id.0)?;
        self.payloads.remove(id.0)?;
        self.schedule.remove(id.0)?;
        Ok(())
    }

    pub fn bury(&mut self, id: MessageId, dest_key: &str) -> Result<(), StoreError> {
        self.schedule.remove(id.0)?;
        self.dead.insert(dead_key(dest_key, id).as_slice(), ())?;
        Ok(())
    }

    pub fn unbury(&mut self, id: MessageId, dest_key: &str) -> Result<bool, StoreError> {
        Ok(self
            .dead
            .remove(dead_key(dest_key, id).as_slice())?
            .is_some())
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

    /// The id an idempotency key maps to, if it was recorded at or after `not_before_ms`.
    pub fn idempotent(
        &self,
        scoped_key: &[u8],
        not_before_ms: u64,
    ) -> Result<Option<MessageId>, StoreError> {
        let Some(v) = self.idempotency.get(scoped_key)? else {
            return Ok(None);
        };
        let v = v.value();
        let corrupt = || StoreError::Corrupt("idempotency record".into());
        let id = u128::from_be_bytes(
            v.get(..16)
                .ok_or_else(corrupt)?
                .try_into()
                .map_err(|_| corrupt())?,
        );
        let created = u64::from_be_bytes(
            v.get(16..24)
                .ok_or_else(corrupt)?
                .try_into()
                .map_err(|_| corrupt())?,
        );
        Ok((created >= not_before_ms).then_some(MessageId(id)))
    }

    pub fn put_idempotent(
        &mut self,
        scoped_key: &[u8],
        id: MessageId,
        created_ms: u64,
    ) -> Result<(), StoreError> {
        let mut v = [0u8; 24];
        v[..16].copy_from_slice(&id.0.to_be_bytes());
        v[16..].copy_from_slice(&created_ms.to_be_bytes());
        self.idempotency.insert(scoped_key, v.as_slice())?;
        let mut exp = created_ms.to_be_bytes().to_vec();
        exp.extend_from_slice(scoped_key);
        self.idempotency_expiry.insert(exp.as_slice(), ())?;
        Ok(())
    }

    /// Forgets up to `limit` idempotency keys recorded before `before_ms`. Returns how many.
    pub fn expire_idempotency(
        &mut self,
        before_ms: u64,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let end = before_ms.to_be_bytes();
        let mut expired = Vec::new();
        for row in self.idempotency_expiry.range(..end.as_slice())? {
            if expired.len() >= limit {
                break;
            }
            expired.push(row?.0.value().to_vec());
        }
        for key in &expired {
            self.idempotency_expiry.remove(key.as_slice())?;
            let scoped = &key[8..];
            // A key re-recorded later (after it had expired) has a newer expiry row; keep it.
            let current = self
                .idempotency
                .get(scoped)?
                .map(|v| v.value().get(16..24).map(<[u8]>::to_vec));
            if current.flatten().as_deref() == Some(&key[..8]) {
                self.idempotency.remove(scoped)?;
            }
        }
        Ok(expired.len())
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

/// Scopes a client's idempotency key to its destination.
pub fn idempotency_scope(dest_key: &str, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(dest_key.len() + 1 + key.len());
    out.extend_from_slice(dest_key.as_bytes());
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
