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
//! | `done` | id | [`DoneRecord`] of a completed message (metadata and attempts, no payload), kept `completed_retention_secs` |
//! | `dead` | destination key, 0, id (16 bytes BE) | [`ScheduleEntry`] of a dead letter |
//! | `idempotency` | encoded destination, 0, client key | id (16) + created ms (8) |
//! | `endpoints` | name | [`EndpointRecord`] (protobuf) |
//! | `meta` | `"format_version"` | [`FORMAT_VERSION`] of the layout above (u64) |
//!
//! # Format versions
//! The layout of these tables and records is version [`FORMAT_VERSION`], written into
//! `meta` when the file is created and checked at every open. A file from a newer hookd is
//! refused (naming both versions) rather than misread; a file from an older version is
//! migrated forward at open, one version at a time, in the same transaction that records
//! the new version. A test opens a fixture made by each released version
//! (`tests/fixtures/`). Version 1 is also what files made before the version row hold.
//!
//! An enqueue writes three rows (`messages`, `schedule`, and `idempotency` when a key is
//! given); a lease rewrites one small `schedule` row. Every table insert costs B-tree work in
//! the single writer, so the layout keeps that count low.

#[cfg(any(test, feature = "test-util"))]
pub mod faults;
#[cfg(any(test, feature = "test-util"))]
pub mod power_loss;
pub mod records;
mod tables;

pub use tables::Tables;

use std::path::Path;
use std::sync::Arc;

use prost::Message;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
    WriteTransaction,
};

pub use records::{
    AttemptRecord, DoneRecord, EndpointRecord, HistoryRecord, MessageRecord, ScheduleEntry, State,
};

use crate::destination::Destination;
use crate::ids::MessageId;

const MESSAGES: TableDefinition<u128, &[u8]> = TableDefinition::new("messages");
const SCHEDULE: TableDefinition<u128, &[u8]> = TableDefinition::new("schedule");
const HISTORY: TableDefinition<u128, &[u8]> = TableDefinition::new("history");
/// Completed messages (id -> `DoneRecord`), kept for `completed_retention_secs`. Ids are
/// UUIDv7, so the oldest are first and expiry is a range from the start.
const DONE: TableDefinition<u128, &[u8]> = TableDefinition::new("done");
const DEAD: TableDefinition<&[u8], &[u8]> = TableDefinition::new("dead");
const IDEMPOTENCY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idempotency");
const ENDPOINTS: TableDefinition<&str, &[u8]> = TableDefinition::new("endpoints");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const FORMAT_KEY: &str = "format_version";

/// The version of the on-disk layout this hookd writes (see "Format versions" above).
/// Bump it with any change an older hookd would misread, and add the migration.
pub const FORMAT_VERSION: u64 = 1;

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
    /// The file was written by a newer hookd: opening it could misread what it holds.
    #[error(
        "the data file was written by a newer hookd (disk format version {found}); this hookd \
         reads format version {supported} and older: run a hookd that supports version {found}"
    )]
    NewerFormat { found: u64, supported: u64 },
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

/// redb's page cache unless configured (`cache_size_mb`), in bytes.
pub const DEFAULT_CACHE_BYTES: usize = 32 << 20;

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
    pub endpoints: Vec<EndpointRecord>,
}

impl Store {
    /// Opens (or creates) `<dir>/hookd.redb` with the default page cache and makes
    /// sure every table exists.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, DEFAULT_CACHE_BYTES)
    }

    /// As [`Store::open`], with a page cache of `cache_bytes`.
    pub fn open_with(dir: &Path, cache_bytes: usize) -> Result<Self, StoreError> {
        let path = Self::prepare(dir)?;
        let mut builder = Database::builder();
        builder.set_cache_size(cache_bytes);
        Self::init(builder.create(path)?)
    }

    /// As [`Store::open_with`], on storage that fails when a test says so.
    #[cfg(any(test, feature = "test-util"))]
    pub fn open_faulty(
        dir: &Path,
        cache_bytes: usize,
        faults: faults::Faults,
    ) -> Result<Self, StoreError> {
        let path = Self::prepare(dir)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(false)
            .open(path)?;
        let mut builder = Database::builder();
        builder.set_cache_size(cache_bytes);
        Self::init(builder.create_with_backend(faults::FaultyFile::new(file, faults)?)?)
    }

    /// Makes the directory and, if there is none, an empty store file in it; its path.
    fn prepare(dir: &Path) -> Result<std::path::PathBuf, StoreError> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("hookd.redb");
        if !path.exists() {
            create_atomically(dir, &path)?;
        }
        Ok(path)
    }

    /// Opens a store on any redb storage backend (tests: a disk that loses power).
    #[cfg(any(test, feature = "test-util"))]
    pub fn open_backend(
        backend: impl redb::StorageBackend,
        cache_bytes: usize,
    ) -> Result<Self, StoreError> {
        let mut builder = Database::builder();
        builder.set_cache_size(cache_bytes);
        Self::init(builder.create_with_backend(backend)?)
    }

    /// Checks the format version and makes sure every table exists.
    fn init(db: Database) -> Result<Self, StoreError> {
        let store = Self { db: Arc::new(db) };
        let txn = store.begin_write()?;
        check_format(&txn)?;
        Tables::open(&txn)?;
        txn.commit()?;
        Ok(store)
    }

    /// The disk format version recorded in the file.
    pub fn format_version(&self) -> Result<Option<u64>, StoreError> {
        let txn = self.db.begin_read()?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(meta.get(FORMAT_KEY)?.map(|v| v.value()))
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
            out.endpoints.push(EndpointRecord::decode(value.value())?);
        }
        Ok(out)
    }

    /// A completed message's record, while it is kept.
    pub fn done(&self, id: MessageId) -> Result<Option<DoneRecord>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(DONE)?;
        match table.get(id.0)? {
            Some(v) => Ok(Some(DoneRecord::decode(v.value())?)),
            None => Ok(None),
        }
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
        let history = history_of(&txn.open_table(HISTORY)?, id)?;
        Ok(Some(StoredMessage {
            id,
            record,
            entry,
            history,
        }))
    }

    pub fn endpoint(&self, name: &str) -> Result<Option<EndpointRecord>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ENDPOINTS)?;
        match table.get(name)? {
            Some(v) => Ok(Some(EndpointRecord::decode(v.value())?)),
            None => Ok(None),
        }
    }

    pub fn endpoints(&self) -> Result<Vec<EndpointRecord>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(ENDPOINTS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            out.push(EndpointRecord::decode(row?.1.value())?);
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
                let history = history_of(&history, id)?;
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

/// Creates a new, empty store file at `path` so that a crash at any moment leaves either
/// no file or a complete one: redb writes a new file's header in several steps, and a
/// half-created file would not open ("not a redb database"), so hookd would not start.
/// The file is made under a temporary name, synced, and renamed into place; the rename is
/// made durable by syncing the directory.
fn create_atomically(dir: &Path, path: &Path) -> Result<(), StoreError> {
    let temp = dir.join("hookd.redb.creating");
    // A leftover from a crash during an earlier creation holds nothing.
    if temp.exists() {
        std::fs::remove_file(&temp)?;
    }
    Store::init(Database::create(&temp)?)?;
    std::fs::File::open(&temp)?.sync_all()?;
    std::fs::rename(&temp, path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Checks the file's format version, and records it in a file that has none (a new file,
/// or one from before the version row, whose layout is version 1).
fn check_format(txn: &WriteTransaction) -> Result<(), StoreError> {
    let mut meta = txn.open_table(META)?;
    let found = meta.get(FORMAT_KEY)?.map(|v| v.value());
    match found {
        Some(FORMAT_VERSION) => Ok(()),
        Some(found) if found > FORMAT_VERSION => Err(StoreError::NewerFormat {
            found,
            supported: FORMAT_VERSION,
        }),
        Some(found) => Err(StoreError::Corrupt(format!(
            "disk format version {found} is not one hookd ever wrote"
        ))),
        None => {
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            Ok(())
        }
    }
}

/// The destination key of an encoded destination.
fn dest_key_of(encoded: &str) -> Result<String, StoreError> {
    Destination::decode(encoded)
        .map(|d| d.key())
        .ok_or_else(|| StoreError::Corrupt(format!("destination {encoded:?}")))
}

/// A message's finished attempts; none recorded yet is an empty history.
fn history_of(
    table: &impl ReadableTable<u128, &'static [u8]>,
    id: MessageId,
) -> Result<HistoryRecord, StoreError> {
    match table.get(id.0)? {
        Some(v) => Ok(HistoryRecord::decode(v.value())?),
        None => Ok(HistoryRecord::default()),
    }
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
    fn format_version_is_written_at_creation_and_checked_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.format_version().unwrap(), Some(FORMAT_VERSION));
        drop(store);
        // Reopening a file of this version works and changes nothing.
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.format_version().unwrap(), Some(FORMAT_VERSION));
        // A newer hookd's file is refused, naming both versions.
        let txn = store.db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert(FORMAT_KEY, FORMAT_VERSION + 1)
            .unwrap();
        txn.commit().unwrap();
        drop(store);
        let err = Store::open(dir.path()).unwrap_err().to_string();
        let (newer, ours) = (FORMAT_VERSION + 1, FORMAT_VERSION);
        assert!(
            err.contains(&format!("disk format version {newer}"))
                && err.contains(&format!("reads format version {ours} and older")),
            "{err}"
        );
    }

    #[test]
    fn a_file_from_before_the_version_row_is_version_1() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let txn = store.db.begin_write().unwrap();
        txn.delete_table(META).unwrap();
        txn.commit().unwrap();
        assert_eq!(store.format_version().unwrap(), None);
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.format_version().unwrap(), Some(1));
    }
}
