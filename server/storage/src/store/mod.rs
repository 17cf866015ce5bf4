//! The durable store: one redb file, `<data_dir>/hookd.redb`.
//!
//! Ground rules:
//! - The engine decides every change against a read snapshot plus the overlay
//!   ([`overlay`]) and records it through [`Tables`] into the round's [`rowlog`] record;
//!   nobody is told "done" before the log's fdatasync holds that record. Only the apply
//!   stage (`crate::pipeline::applier`) writes redb: it performs synced records through
//!   [`Apply`] in `Durability::None` transactions and checkpoints with one `Immediate`
//!   commit that records how far the log is applied. See `docs/durability.md` for the
//!   crash cases.
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
//! | `history` | id | [`HistoryRecord`]: finished attempts as format 2 wrote them (read, and folded into `attempts` at the next attempt) |
//! | `attempts` | id ‖ sequence | [`AttemptRecord`]: one finished attempt, appended when it ends (the last 32 kept) |
//! | `done` | id | [`DoneRecord`] of a completed message (metadata and attempts, no payload), kept `completed_retention_secs` |
//! | `dead` | destination key, 0, id (16 bytes BE) | [`ScheduleEntry`] of a dead letter |
//! | `idempotency` | encoded destination, 0, client key (a publish: `t`, topic, 0, key) | id (16) + created ms (8); a publish adds its deliveries' count (u32) and the first 1,000 of their ids (16 each), which a format-8 hookd ignores |
//! | `catalog` | tenant (u32 BE), kind (u8), name ([`keys::catalog_key`]) | every object of every tenant (format 10): a tenant's [`TenantRecord`], an [`EndpointRecord`] (protobuf), an ingest source made over the API (`hookd_core::source::SourceSpec` as JSON, secrets sealed when `[secrets]` has keys), a subscription (JSON) |
//! | `lanes` | encoded destination (u16 length first), ordering key | [`LaneRow`]: a FIFO lane's last sequence number (format 8) and when a message last joined it (format 9; the lanes sweep removes rows idle past `fifo_lane_retention_secs`) |
//! | `search` | hour, tenant, field, value, id ([`search`]) | nothing (a seal): the search index, derived by the apply stage (format 11) |
//! | `scrubs` | segment (u64 BE), offset (u64 BE) | length (u32 BE), CRC-32C (u32 BE): a purged record whose bytes in the log are to be overwritten ([`scrub`]; format 13) |
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
//! given); a lease rewrites one small `schedule` row. Every table insert is B-tree work for
//! the apply stage (and an overlay entry for the engine until it is applied), so the layout
//! keeps that count low.

pub mod faults;
pub mod heap;
pub mod keys;
pub mod overlay;
pub mod power_loss;
pub mod records;
pub mod rowlog;
pub mod salvage;
pub mod scrub;
pub mod seal;
pub mod search;
mod tables;
pub mod trust;

pub use heap::{Heap, Pointer, SegmentRow};

/// `record` (an encoded [`MessageRecord`]) as event `event_id`'s, for `destination`
/// (`Destination::encode()`) instead of the one it holds, without decoding it.
pub fn record_for(record: Vec<u8>, destination: &str, event_id: &str) -> Vec<u8> {
    let record = heap::with_field(record, 9, event_id.as_bytes());
    heap::with_destination(record, destination.as_bytes())
}
pub use overlay::Overlay;
use rowlog::TableId;
pub(crate) use tables::{Apply, RecordAt};
pub use tables::{DeadSweep, MAX_KEPT_DELIVERY_IDS, Original, RowSweep, Tables};

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use prost::Message;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};

pub(crate) use keys::{
    attempt_key, attempt_range, dead_key, dead_key_destination, dead_key_id, dead_prefix,
};
pub use keys::{
    catalog_key, catalog_key_parts, catalog_range, idempotency_scope, lane_key, lane_key_parts,
};
pub use records::{
    AttemptRecord, DoneRecord, EndpointRecord, EventTypeRecord, HistoryRecord, LaneRow, LaneSlot,
    MAX_ORDERING_KEY, MAX_TEXT_BYTES, MessageRecord, OAuth2Record, PortalKeyRecord,
    PortalRevocationRecord, QueueRecord, QuotaRecord, ReplayJobRecord, ReplayJobState,
    ReplaySelectionRecord, ScheduleEntry, SigningKeyRecord, State, TenantPortalRecord,
    TenantRecord, TokenRecord, bound_text,
};

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::{DEFAULT_TENANT, Kind, ObjectRef, TenantId};

const MESSAGES: TableDefinition<u128, &[u8]> = TableDefinition::new("messages");
const SCHEDULE: TableDefinition<u128, &[u8]> = TableDefinition::new("schedule");
const HISTORY: TableDefinition<u128, &[u8]> = TableDefinition::new("history");
/// Finished attempts, one row each, appended (format 3): key id (16 bytes, big-endian) and
/// a sequence number (4 bytes, big-endian), so a message's rows are one range in order.
const ATTEMPTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("attempts");
/// Completed messages (id -> `DoneRecord`), kept for `completed_retention_secs`. Ids are
/// UUIDv7, so the oldest are first and expiry is a range from the start.
const DONE: TableDefinition<u128, &[u8]> = TableDefinition::new("done");
const DEAD: TableDefinition<&[u8], &[u8]> = TableDefinition::new("dead");
const IDEMPOTENCY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("idempotency");
/// Every object of every tenant (format 10): [`keys::catalog_key`] -> its record.
const CATALOG: TableDefinition<&[u8], &[u8]> = TableDefinition::new("catalog");
/// Formats 1 to 9 kept endpoints (name -> [`EndpointRecord`]), ingest sources made over
/// gRPC (format 4; name -> JSON) and subscriptions (format 7; name -> JSON) in tables of
/// their own: read only to move them into [`CATALOG`] (and by a salvage of such a file).
type NameTable = TableDefinition<'static, &'static str, &'static [u8]>;
const LEGACY_OBJECTS: [(TableId, Kind, NameTable); 3] = [
    (
        TableId::Endpoints,
        Kind::Endpoint,
        TableDefinition::new("endpoints"),
    ),
    (
        TableId::Sources,
        Kind::Source,
        TableDefinition::new("sources"),
    ),
    (
        TableId::Subscriptions,
        Kind::Subscription,
        TableDefinition::new("subscriptions"),
    ),
];
/// FIFO lanes (format 8): [`lane_key`] -> [`LaneRow`].
const LANES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("lanes");
/// Completed messages' pointers to their records in the log (format 6): id -> [`Pointer`],
/// swept with `done`. The payload reads back while its segment is kept.
const RETAINED: TableDefinition<u128, &[u8]> = TableDefinition::new("retained");
/// Per log segment (its first position, 8 bytes big-endian): [`SegmentRow`] (format 6).
const SEGMENTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("segments");
/// Purged records to overwrite in the log (format 13): see [`scrub`].
const SCRUBS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("scrubs");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const FORMAT_KEY: &str = "format_version";
/// The rows of `meta` that hold the installation's fingerprint key (see
/// [`Store::fingerprint_key`]).
const FINGERPRINT_KEY_ROWS: [&str; 4] = [
    "fingerprint_key.0",
    "fingerprint_key.1",
    "fingerprint_key.2",
    "fingerprint_key.3",
];
/// Beside the file while it is open: found at an open, it says the last one did not end
/// in [`Store::closed_cleanly`], so the open checks the file's integrity first.
pub const OPEN_MARKER: &str = "hookd.redb.open";
/// The write-ahead log position up to which this file holds every change (the last
/// checkpoint's); recovery replays the log from there.
const APPLIED_KEY: &str = "log_applied";
/// The search index's backfill of messages stored before it (format 10 and older): absent
/// until it has run to its end, then 1 (a new file has it from the start). While it runs,
/// where it is: the table it walks (0: `messages`, 1: `done`) and the last id it indexed.
const BACKFILLED_KEY: &str = "search_backfilled";
const BACKFILL_TABLE_KEY: &str = "search_backfill_table";
const BACKFILL_HI_KEY: &str = "search_backfill_after_hi";
const BACKFILL_LO_KEY: &str = "search_backfill_after_lo";

/// The version of the on-disk layout this hookd writes (see "Format versions" above).
/// Bump it with any change an older hookd would misread, and add the migration.
///
/// - 1: the tables above, every commit `Durability::Immediate`.
/// - 2: a write-ahead log in front (`wal-*.log` beside the file); `meta` holds
///   `log_applied`, and the file alone may lag the log. A version-1 hookd must not open
///   it (it would ignore the log), and it does not: it refuses a newer version.
/// - 3: a message's finished attempts are rows of `attempts`, appended.
/// - 4: the `sources` table (ingest sources made over gRPC), and log records that name it.
/// - 5: every value ends in a seal, a CRC-32C of table, key and value, checked on every
///   read (`seal`). Opening an older file seals every row, in the transaction that records
///   the new version.
/// - 6: the log is the message heap (`heap`): a `messages` row holds a pointer to the
///   record in a log segment, segments are kept while live messages point into them (and
///   for retention), `retained` keeps completed messages' pointers and `segments` each
///   segment's live count. Rows of format 5 (records inline) stay readable as they are,
///   so opening a format-5 file converts nothing. A format-5 hookd must not open a
///   format-6 file (it would read pointers as records, and delete segments that hold
///   payloads), and it does not: it refuses a newer version.
/// - 7: a publish's deliveries share one record (copies in the log, shared pointers in
///   `messages` and `retained`), and the `subscriptions` table.
/// - 8: FIFO lanes: a schedule (or dead) row may carry its lane (the state byte's high bit
///   set, then the sequence number, flags and ordering key), and the `lanes` table. A
///   format-7 hookd must not open it (it would misread those rows), and it does not.
/// - 9: a `lanes` row also holds when a message last joined the lane (16 bytes), so idle
///   lanes' rows expire (issue #49, 7). Rows of format 8 (8 bytes) read as they are and get
///   their time at the sweep's first look, so opening a format-8 file converts nothing. A
///   format-8 hookd must not open a format-9 file (it would refuse the longer rows as
///   corrupt), and it does not: it refuses a newer version.
/// - 10: tenants (issue #51). One `catalog` table holds every object, keyed tenant first
///   ([`keys::catalog_key`]); the `endpoints`, `sources` and `subscriptions` tables are
///   moved into it as the objects of tenant 0, `default` (made with its [`TenantRecord`]),
///   in the transaction that records the new version, and dropped. A log written before
///   the upgrade is replayed into the catalog the same way (see `TableId::Endpoints`). A
///   format-9 hookd must not open a format-10 file (it would find no endpoints), and it
///   does not: it refuses a newer version, naming it. Going back means restoring a copy of
///   the data directory taken before the upgrade (README, "Upgrading").
/// - 11: the `search` table (issue #53), created by `Apply::open` in the transaction that
///   records the new version, and `MessageRecord::indexed`. Nothing is converted: messages
///   stored before the upgrade are not in the index (GetMessage still finds them). A
///   format-10 hookd must not open a format-11 file (it would not keep the index up to
///   date), and it does not: it refuses a newer version.
/// - 12: replay jobs (issue #53, 2): the catalog's kinds `ReplayJob` and `ReplaySelection`,
///   a schedule row's state byte may carry the "replayed" bit (0x40), and a completed
///   message's summary keeps its FIFO lane (`DoneRecord::ordering_key`, `sequence`).
///   Nothing is converted. A format-11 hookd must not open a format-12 file (it would
///   refuse those rows as corrupt), and it does not: it refuses a newer version.
/// - 13: purges (issue #53, 4): a log record may put `TableId::Erased` (a message whose
///   record's bytes are to be overwritten), and the `scrubs` table (created by
///   `Apply::open`) holds those records until the overwrite is synced. Nothing is
///   converted. A format-12 hookd must not open a format-13 file (it would refuse the log's
///   erasures as an unknown table), and it does not: it refuses a newer version.
pub const FORMAT_VERSION: u64 = 13;

/// A storage failure. Never answered as success; mapped to UNAVAILABLE.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("storage error: {0}")]
    Redb(#[from] redb::Error),
    #[error("corrupt record: {0}")]
    Corrupt(String),
    #[error("storage I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Log(#[from] crate::wal::LogError),
    /// Reading the data file stopped on bytes that are not what redb wrote (a damaged
    /// page found while opening or recovering, where no integrity check ran first).
    #[error(
        "{file} is damaged: reading it stopped with \"{why}\"; stop hookd and run `hookd repair \
         --dry-run` to see what repairing drops, then `hookd repair`"
    )]
    Unreadable { file: String, why: String },
    /// A log segment that live messages point into is missing, cut short or damaged.
    #[error(
        "log segment {segment}, which {live} live message(s) point into, {what}; stop hookd and \
         run `hookd repair --dry-run` to see what repairing drops, then `hookd repair`"
    )]
    DamagedLog {
        segment: String,
        live: u64,
        what: String,
    },
    /// The file was written by a newer hookd: opening it could misread what it holds.
    #[error(
        "the data file was written by a newer hookd (disk format version {found}); this hookd \
         reads format version {supported} and older: run a hookd that supports version {found}"
    )]
    NewerFormat { found: u64, supported: u64 },
    /// A stored value failed its seal (see `seal`): the file was changed outside redb.
    #[error(
        "a stored record failed its checksum (table {table}, key {key}): hookd.redb is damaged; \
         stop hookd, run `hookd repair --dry-run` to see the damaged records, then `hookd repair` \
         to remove them (or restore the data directory from a backup)"
    )]
    Damaged { table: &'static str, key: String },
    /// redb's own integrity check failed (see [`Store::open_with`]).
    #[error(
        "{file} failed redb's integrity check ({why}); stop hookd and run `hookd repair --dry-run` \
         to see what salvaging the readable records keeps and drops, then `hookd repair` (or \
         restore the data directory from a backup)"
    )]
    Integrity { file: String, why: String },
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

/// A completed message's record, if the log still keeps it.
#[derive(Debug, Clone)]
pub enum Kept {
    Record(Box<MessageRecord>),
    /// Its segment was deleted (retention), or it completed before format 6 kept payloads.
    Expired,
}

/// One message of a catch-up page ([`Store::caught_up`]).
#[derive(Debug, Clone)]
pub struct Caught {
    pub id: MessageId,
    pub state: search::SearchState,
    pub attempts: u32,
    /// Its payload and headers; `None` once the log no longer keeps a delivered one's.
    pub record: Option<MessageRecord>,
}

/// The store and its write-ahead log, brought up to date: what the engine starts on.
#[derive(Debug)]
pub struct Storage {
    pub store: Store,
    pub log: crate::wal::Log,
    pub replayed: Replayed,
}

/// A log segment grows to about this size before the next one starts, unless configured.
pub const DEFAULT_SEGMENT_BYTES: u64 = 16 << 20;

impl Storage {
    /// Opens the log in `dir` and replays it into `store` ([`Store::open_log`]).
    pub fn open(
        store: Store,
        dir: Box<dyn crate::wal::LogDir>,
        segment_bytes: u64,
    ) -> Result<Self, StoreError> {
        let (log, replayed) = store.open_log(dir, segment_bytes)?;
        Ok(Self {
            store,
            log,
            replayed,
        })
    }

    /// As [`Storage::open_dir`], on storage (file and log) that fails when a test says so.
    pub fn open_faulty(
        dir: &Path,
        cache_bytes: usize,
        segment_bytes: u64,
        faults: faults::Faults,
    ) -> Result<Self, StoreError> {
        let store = Store::open_faulty(dir, cache_bytes, faults.clone())?;
        let log = crate::wal::OsDir::new(dir)?.with_sync_hook(faults.sync_hook());
        Self::open(store, Box::new(log), segment_bytes)
    }

    /// The store in `dir` with its log beside it in the same directory.
    pub fn open_dir(
        dir: &Path,
        cache_bytes: usize,
        segment_bytes: u64,
    ) -> Result<Self, StoreError> {
        let store = Store::open_with(dir, cache_bytes)?;
        Self::open(store, Box::new(crate::wal::OsDir::new(dir)?), segment_bytes)
    }
}

/// A row of a named table (tests: comparing states).
pub(crate) type TableRow = (&'static str, Vec<u8>, Vec<u8>);

/// What replaying the write-ahead log at start found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    /// The checkpoint the file held: the replay started there.
    pub from: u64,
    /// The log's end: the new checkpoint.
    pub to: u64,
    pub records: u64,
    pub changes: u64,
    pub millis: u64,
}

/// A page of dead letters ends after this many bytes (payloads and histories), whatever its
/// row limit, so an answer stays well under the 64 MiB clients accept (finding F4).
pub(crate) const MAX_PAGE_BYTES: usize = 4 << 20;

/// A page of dead letters and, if more follow, the key to continue after.
pub type DeadLetterPage = (Vec<StoredMessage>, Option<Vec<u8>>);

/// Per log segment that live messages point into: how many, and the end of the furthest
/// record (what start-up checks, [`Store::recover`]).
type HeapEnds = std::collections::BTreeMap<u64, (u64, u64)>;

/// Sizes per batch the recovery's second reader hands over (see [`Store::recover`]).
const RECOVER_BATCH: usize = 4_096;

/// redb's page cache unless configured (`cache_size_mb`), in bytes.
pub const DEFAULT_CACHE_BYTES: usize = 32 << 20;

/// Handle to the database; cheap to clone, shared by the engine and readers.
#[derive(Debug, Clone)]
pub struct Store {
    db: Arc<Database>,
    mark: Arc<Watermark>,
    /// The log's segments, where `messages` rows point.
    heap: Heap,
    /// Whether this open ran redb's integrity check.
    checked: bool,
    /// The search index's rows the apply stage made that redb may not hold yet.
    pending: Arc<search::Pending>,
}

/// How far the write-ahead log is durable, and how far redb holds it.
///
/// The engine hands a round's record to the log writer ([`Watermark::publish`] its end);
/// the writer syncs it ([`Watermark::synced`]) and answers; only then does the apply stage
/// perform it on redb ([`Watermark::applied`]). redb therefore never holds a change a
/// power cut could take back, and a reader that waits until redb holds everything synced
/// when it started reads its own writes (an answered Enqueue is found by GetMessage: its
/// answer came after the sync). A reader never waits for a sync, only for the apply stage
/// to perform records already synced, which it does at once while a reader waits
/// ([`Watermark::readers_waiting`]): at most one apply transaction.
#[derive(Debug, Default)]
pub struct Watermark {
    appended: std::sync::atomic::AtomicU64,
    synced: std::sync::atomic::AtomicU64,
    /// Readers waiting for the apply stage.
    waiting: std::sync::atomic::AtomicUsize,
    state: std::sync::Mutex<MarkState>,
    /// Revoked at a failure: the next open checks the file's integrity.
    token: std::sync::OnceLock<trust::Token>,
    changed: std::sync::Condvar,
    /// Signalled when a reader starts waiting (wakes the apply stage's gather).
    nudge: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct MarkState {
    applied: u64,
    failed: Option<Arc<str>>,
}

impl Watermark {
    fn state(&self) -> std::sync::MutexGuard<'_, MarkState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where the log starts out: redb holds everything before `end`.
    pub fn reset(&self, end: u64) {
        self.appended
            .store(end, std::sync::atomic::Ordering::SeqCst);
        self.synced.store(end, std::sync::atomic::Ordering::SeqCst);
        self.state().applied = end;
    }

    /// redb holds every record before `end` (not durably before a checkpoint).
    pub fn applied(&self, end: u64) {
        let mut state = self.state();
        state.applied = state.applied.max(end);
        drop(state);
        self.changed.notify_all();
    }

    /// Waits until redb holds every record before `end`; the failure if storage failed.
    pub fn wait_applied(&self, end: u64) -> Result<(), Arc<str>> {
        let mut state = self.state();
        loop {
            if state.applied >= end {
                return Ok(());
            }
            if let Some(e) = &state.failed {
                return Err(e.clone());
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Every record before `end` is durable in the log (and answered after this).
    pub fn synced(&self, end: u64) {
        self.synced
            .fetch_max(end, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether a reader waits for the apply stage (which then applies without gathering).
    pub fn readers_waiting(&self) -> bool {
        self.waiting.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Waits until redb holds every record synced before the call (what a reader must
    /// see: every answered write); the failure if storage failed.
    pub fn wait_synced_applied(&self) -> Result<(), Arc<str>> {
        let end = self.synced.load(std::sync::atomic::Ordering::SeqCst);
        {
            let state = self.state();
            if let Some(e) = &state.failed {
                return Err(e.clone());
            }
            if state.applied >= end {
                return Ok(());
            }
        }
        self.waiting
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Through the lock: a gather that has not seen the count yet is waiting on `nudge`.
        drop(self.state());
        self.nudge.notify_all();
        let result = self.wait_applied(end);
        self.waiting
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        result
    }

    /// The apply stage gathers records: sleeps until `deadline`, or until a reader waits
    /// for redb, or the store fails.
    pub fn gather_until(&self, deadline: std::time::Instant) {
        let mut state = self.state();
        loop {
            if self.readers_waiting() || state.failed.is_some() {
                return;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            state = self
                .nudge
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// A round ending at `end` is about to become visible in redb.
    pub fn publish(&self, end: u64) {
        self.appended
            .fetch_max(end, std::sync::atomic::Ordering::SeqCst);
    }

    /// At a failure, revokes `token` (see [`trust`]).
    pub fn revoke_on_failure(&self, token: trust::Token) {
        let _ = self.token.set(token);
    }

    /// The log failed: nothing more will become durable.
    pub fn fail(&self, why: Arc<str>) {
        if let Some(t) = self.token.get() {
            t.revoke();
        }
        self.state().failed = Some(why);
        self.changed.notify_all();
        self.nudge.notify_all();
    }

    pub fn failed(&self) -> Option<Arc<str>> {
        self.state().failed.clone()
    }
}

/// One item of what start-up reads back to rebuild the in-memory index (see
/// [`Store::recover`]).
#[derive(Debug)]
pub enum Recovering {
    /// A tenant's record (live, or a deleted one's tombstone); before its objects.
    Tenant(TenantId, Box<TenantRecord>),
    /// A tenant's API token (its name, its record).
    Token(TenantId, String, Box<TokenRecord>),
    Endpoint(TenantId, Box<EndpointRecord>),
    /// A queue's own settings (issue #51).
    Queue(TenantId, Box<QueueRecord>),
    EventType(TenantId, Box<EventTypeRecord>),
    /// A message's schedule row (live, or dead), and its record's size.
    Message {
        id: MessageId,
        entry: ScheduleEntry,
        bytes: u32,
    },
    /// A dead letter that blocks its FIFO lane: its destination (encoded) and lane.
    Blocking {
        id: MessageId,
        destination: String,
        lane: String,
    },
    /// How many dead letters a destination (by key) holds.
    Dead {
        destination: String,
        count: u64,
    },
}

impl Store {
    /// Opens (or creates) `<dir>/hookd.redb` with the default page cache and makes
    /// sure every table exists.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with(dir, DEFAULT_CACHE_BYTES)
    }

    /// As [`Store::open`], with a page cache of `cache_bytes`.
    ///
    /// If the last open of this file was not followed by [`Store::closed_cleanly`] (a
    /// crash, a kill, a power cut, a storage failure), redb's integrity check runs first:
    /// every page of the committed trees against its checksum. A file that fails it is
    /// refused, never read (redb trusts a file it closed itself, and a damaged page would
    /// panic it mid-read). The check is skipped only when the last open was in this boot
    /// and no storage failure was seen since ([`trust`]): the process was killed, and
    /// the file is what redb wrote.
    pub fn open_with(dir: &Path, cache_bytes: usize) -> Result<Self, StoreError> {
        let path = Self::prepare(dir)?;
        let marker = dir.join(OPEN_MARKER);
        let unclean = marker.exists();
        let token = trust::Token::of(&path);
        let trusted = unclean
            && token.as_ref().is_some_and(|t| {
                std::fs::read_to_string(&marker).is_ok_and(|nonce| t.holds(nonce.trim()))
            });
        // This open's token is left only once the marker holds its nonce: until then, and
        // if the open fails, the next one checks.
        if let Some(t) = &token {
            t.revoke();
        }
        let check = unclean && !trusted;
        let mut builder = Database::builder();
        builder.set_cache_size(cache_bytes);
        builder.set_check_integrity_on_open(check);
        let started = std::time::Instant::now();
        if check {
            tracing::info!(file = %path.display(), "the data file was not closed cleanly: checking its integrity");
        } else if unclean {
            tracing::info!(file = %path.display(), "the last process on this data file was stopped without a clean close, in this boot, with no storage failure: the file is what redb wrote; no integrity check");
        }
        let db = builder.create(&path).map_err(|e| match e {
            redb::DatabaseError::Storage(redb::StorageError::Corrupted(why)) => {
                StoreError::Integrity {
                    file: path.display().to_string(),
                    why,
                }
            }
            e => e.into(),
        })?;
        if check {
            tracing::info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "integrity check passed"
            );
        }
        let nonce = trust::nonce();
        {
            let mut f = std::fs::File::create(&marker)?;
            std::io::Write::write_all(&mut f, nonce.as_bytes())?;
            f.sync_all()?;
        }
        std::fs::File::open(dir)?.sync_all()?;
        let mut store = Self::init(db)?;
        store.checked = check;
        if let Some(t) = token {
            t.grant(&nonce);
            store.mark.revoke_on_failure(t);
        }
        Ok(store)
    }

    /// Whether this open ran redb's integrity check on the file.
    pub fn integrity_checked(&self) -> bool {
        self.checked
    }

    /// Whatever the last open left, the next open of the data file in `dir` checks its
    /// integrity: what `dir` holds may not be what redb wrote (a storage failure).
    pub fn distrust(dir: &Path) {
        if let Some(t) = trust::Token::of(&dir.join("hookd.redb")) {
            t.revoke();
        }
    }

    /// As [`Store::open`], with redb's integrity check whatever the last close was
    /// (`hookd repair` trusts nothing).
    pub fn open_checked(dir: &Path) -> Result<Self, StoreError> {
        crate::fs::private_dir(dir)?;
        if dir.join("hookd.redb").exists() {
            Self::distrust(dir);
            std::fs::File::create(dir.join(OPEN_MARKER))?.sync_all()?;
        }
        Self::open(dir)
    }

    /// Records that the file was closed cleanly: every write is done and nothing more will
    /// be written through this handle. The next open skips the integrity check.
    pub fn closed_cleanly(dir: &Path) -> std::io::Result<()> {
        Self::distrust(dir);
        match std::fs::remove_file(dir.join(OPEN_MARKER)) {
            Ok(()) => std::fs::File::open(dir)?.sync_all(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// As [`Store::open_with`], on storage that fails when a test says so.
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
        crate::fs::private_dir(dir)?;
        let path = dir.join("hookd.redb");
        if !path.exists() {
            create_atomically(dir, &path)?;
        }
        Ok(path)
    }

    /// Opens a store on any redb storage backend (tests: a disk that loses power).
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
        let store = Self {
            db: Arc::new(db),
            mark: Arc::default(),
            heap: Heap::default(),
            checked: false,
            pending: Arc::default(),
        };
        let txn = store.begin_write()?;
        check_format(&txn)?;
        into_catalog(&txn)?;
        Apply::open(&txn)?;
        {
            // The installation's key for secrets' fingerprints, made once (four u64 rows of
            // `meta`, which a format-8 hookd does not read).
            let mut meta = txn.open_table(META)?;
            if meta.get(FINGERPRINT_KEY_ROWS[0])?.is_none() {
                for row in FINGERPRINT_KEY_ROWS {
                    meta.insert(row, rand::random::<u64>())?;
                }
            }
        }
        txn.commit()?;
        Ok(store)
    }

    /// This installation's key for secrets' fingerprints (see
    /// `hookd_core::secrets::summary`): random, made when the file was first opened by a
    /// hookd that has it, and kept in the file.
    pub fn fingerprint_key(&self) -> Result<[u8; 32], StoreError> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        let mut key = [0u8; 32];
        for (i, row) in FINGERPRINT_KEY_ROWS.iter().enumerate() {
            let part = meta
                .get(*row)?
                .ok_or_else(|| StoreError::Corrupt(format!("meta has no {row}")))?
                .value();
            key[i * 8..i * 8 + 8].copy_from_slice(&part.to_be_bytes());
        }
        Ok(key)
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

    /// A write transaction of the apply stage: `Durability::None`, so its commit does no
    /// I/O. Its changes are durable already, in the write-ahead log; the file catches up at
    /// the next [`Store::checkpoint`].
    pub(crate) fn begin_round(&self) -> Result<WriteTransaction, StoreError> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::None)?;
        Ok(txn)
    }

    /// Makes every round committed so far durable in the file (one `Immediate` commit) and
    /// records that the file now holds the log up to `applied`, in the same transaction.
    /// The caller must have applied every log record before `applied`, and only those.
    pub fn checkpoint(&self, applied: u64) -> Result<(), StoreError> {
        let txn = self.begin_write()?;
        // The search index's rows of what `applied` covers, which the apply stage holds
        // in memory (see `search::Pending`), are part of what the checkpoint makes durable.
        let written = self.pending.write(&mut txn.open_table(search::SEARCH)?)?;
        txn.open_table(META)?.insert(APPLIED_KEY, applied)?;
        txn.commit()?;
        self.pending.flushed(written);
        Ok(())
    }

    /// Hands the search index's rows of records the apply stage performed (and committed)
    /// to the rows searches read beside redb; written into redb in one pass once there are
    /// [`Store::set_index_flush_rows`] of them, and by every checkpoint.
    pub(crate) fn index_rows(&self, rows: Vec<search::Row>) -> Result<(), StoreError> {
        let flush = self.pending.flush_rows.load(Ordering::Relaxed);
        if rows.is_empty() || self.pending.add(rows) < flush {
            return Ok(());
        }
        self.flush_index()
    }

    /// How many of the search index's rows the apply stage holds in memory before it
    /// writes them into redb (default [`search::FLUSH_ROWS`]; tests make it small, so
    /// searches read rows from both).
    pub fn set_index_flush_rows(&self, rows: usize) {
        self.pending
            .flush_rows
            .store(rows.max(1), Ordering::Relaxed);
    }

    /// Writes the search index's rows held in memory into redb (not durably: the next
    /// checkpoint makes them so). The apply stage's alone (see `search::Pending`).
    fn flush_index(&self) -> Result<(), StoreError> {
        let txn = self.begin_round()?;
        let written = self.pending.write(&mut txn.open_table(search::SEARCH)?)?;
        txn.commit()?;
        self.pending.flushed(written);
        Ok(())
    }

    /// Opens the write-ahead log in `dir` and brings the file up to date with it: every
    /// record after the file's checkpoint is replayed (blind puts and removals, so a record
    /// the file already holds changes nothing), then a checkpoint at the log's end makes
    /// that durable and the replayed segments are deleted. A torn tail of the log is cut
    /// (nothing in it was ever answered).
    pub fn open_log(
        &self,
        dir: Box<dyn crate::wal::LogDir>,
        segment_bytes: u64,
    ) -> Result<(crate::wal::Log, Replayed), StoreError> {
        let started = std::time::Instant::now();
        let from = self.applied()?;
        let txn = self.begin_round()?;
        let mut tables = Apply::open(&txn)?;
        let (mut records, mut changes) = (0u64, 0u64);
        let log = crate::wal::Log::replay(dir, segment_bytes, from, |segment, lsn, record| {
            changes += tables.replay(record, Some(RecordAt::frame(segment, lsn)))? as u64;
            records += 1;
            Ok::<(), StoreError>(())
        })?;
        tables.finish()?;
        txn.commit()?;
        self.heap.attach(log.dir());
        let to = log.end();
        if to != from {
            self.checkpoint(to)?;
        }
        let replayed = Replayed {
            from,
            to,
            records,
            changes,
            millis: started.elapsed().as_millis() as u64,
        };
        if records > 0 {
            tracing::info!(
                records,
                changes,
                bytes = to - from,
                millis = replayed.millis,
                "replayed the write-ahead log"
            );
        }
        Ok((log, replayed))
    }

    /// Performs log records' changes in one transaction, records stored inline (tests
    /// that make records without a log).
    pub fn replay_records<'a>(
        &self,
        records: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), StoreError> {
        let txn = self.begin_round()?;
        {
            let mut tables = Apply::open(&txn)?;
            for record in records {
                tables.replay(record, None)?;
            }
            tables.finish()?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Performs log records read back with [`crate::wal::Log::replay`] (their segment,
    /// position and payload) in one transaction, as recovery does (tests: replaying
    /// twice).
    pub fn replay_log_records<'a>(
        &self,
        records: impl IntoIterator<Item = (u64, u64, &'a [u8])>,
    ) -> Result<(), StoreError> {
        let txn = self.begin_round()?;
        {
            let mut tables = Apply::open(&txn)?;
            for (segment, lsn, record) in records {
                tables.replay(record, Some(RecordAt::frame(segment, lsn)))?;
            }
            tables.finish()?;
        }
        txn.commit()?;
        Ok(())
    }

    /// Where records that `messages` rows point to are read.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// Reads records from the log in `dir` without replaying it (`hookd repair
    /// --dry-run`, which changes nothing).
    pub fn read_log(&self, dir: Box<dyn crate::wal::LogDir>) {
        self.heap.attach(std::sync::Arc::from(dir));
    }

    /// Every segment's row (first position, row), in order, from the last commit.
    pub fn segment_rows(&self) -> Result<Vec<(u64, SegmentRow)>, StoreError> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(SEGMENTS)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            let key = k.value();
            let start = <[u8; 8]>::try_from(key)
                .map(u64::from_be_bytes)
                .map_err(|_| StoreError::Corrupt("a segment key".into()))?;
            out.push((
                start,
                SegmentRow::decode(seal::open(TableId::Segments, key, v.value())?)?,
            ));
        }
        Ok(out)
    }

    /// Removes the rows of segments that were deleted (with the next commit's durability).
    pub(crate) fn forget_segments(&self, starts: &[u64]) -> Result<(), StoreError> {
        if starts.is_empty() {
            return Ok(());
        }
        let txn = self.begin_round()?;
        {
            let mut table = txn.open_table(SEGMENTS)?;
            for start in starts {
                table.remove(start.to_be_bytes().as_slice())?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    /// Deletes up to `limit` rows of the search index for messages created in hours before
    /// `before_ms`'s; how many (see [`search::sweep`]). Made durable by the next checkpoint.
    pub fn sweep_search(&self, before_ms: u64, limit: usize) -> Result<usize, StoreError> {
        let txn = self.begin_round()?;
        let swept = {
            let mut table = txn.open_table(search::SEARCH)?;
            search::sweep(&mut table, before_ms, limit)?
        };
        txn.commit()?;
        Ok(swept)
    }

    /// One step of the search index's backfill: the rows of up to `limit` messages stored
    /// before the index (a file of format 10 or older, or one upgraded to 11 or 12 before
    /// the backfill existed), created at or after `horizon_ms` (older ones are past the
    /// history). Walks `messages` (live and dead), then `done` (completed: from its kept
    /// record, or its summary once the payload expired), in id order, from where the last
    /// step ended (kept in `meta`, in the same transaction as the rows). Rows are blind
    /// inserts: a message indexed already gets the same rows again. `None` once it has
    /// run to its end; else how many messages this step indexed.
    pub fn backfill_search(
        &self,
        horizon_ms: u64,
        limit: usize,
    ) -> Result<Option<usize>, StoreError> {
        let txn = self.begin_round()?;
        let done_count = {
            let mut meta = txn.open_table(META)?;
            if meta.get(BACKFILLED_KEY)?.is_some() {
                return Ok(None);
            }
            let table = meta.get(BACKFILL_TABLE_KEY)?.map_or(0, |v| v.value());
            let after = (u128::from(meta.get(BACKFILL_HI_KEY)?.map_or(0, |v| v.value())) << 64)
                | u128::from(meta.get(BACKFILL_LO_KEY)?.map_or(0, |v| v.value()));
            let start = after.max((u128::from(horizon_ms) << 80).saturating_sub(1));
            let mut index = search::Indexer {
                table: Some(txn.open_table(search::SEARCH)?),
                rows: Vec::new(),
            };
            let attempts = txn.open_table(ATTEMPTS)?;
            let mut last = None;
            let mut count = 0usize;
            if table == 0 {
                let messages = txn.open_table(MESSAGES)?;
                let (schedule, dead) = (txn.open_table(SCHEDULE)?, txn.open_table(DEAD)?);
                for row in messages.range((start.saturating_add(1))..)? {
                    let (k, v) = row?;
                    let id = k.value();
                    last = Some(id);
                    count += 1;
                    if let Err(e) =
                        self.backfill_live(&mut index, &schedule, &dead, &attempts, id, v.value())
                    {
                        tracing::warn!(id = %MessageId(id), error = %e, "a stored message the search index's backfill cannot read; not indexed");
                    }
                    if count >= limit {
                        break;
                    }
                }
            } else {
                let done = txn.open_table(DONE)?;
                let retained = txn.open_table(RETAINED)?;
                for row in done.range((start.saturating_add(1))..)? {
                    let (k, v) = row?;
                    let id = k.value();
                    last = Some(id);
                    count += 1;
                    if let Err(e) = self.backfill_done(&mut index, &retained, id, v.value()) {
                        tracing::warn!(id = %MessageId(id), error = %e, "a completed message the search index's backfill cannot read; not indexed");
                    }
                    if count >= limit {
                        break;
                    }
                }
            }
            index.finish()?;
            match last.filter(|_| count >= limit) {
                Some(id) => {
                    meta.insert(BACKFILL_HI_KEY, (id >> 64) as u64)?;
                    meta.insert(BACKFILL_LO_KEY, id as u64)?;
                }
                None if table == 0 => {
                    // `messages` walked: `done` next, from its start.
                    meta.insert(BACKFILL_TABLE_KEY, 1)?;
                    meta.insert(BACKFILL_HI_KEY, 0)?;
                    meta.insert(BACKFILL_LO_KEY, 0)?;
                }
                None => {
                    meta.insert(BACKFILLED_KEY, 1)?;
                    meta.remove(BACKFILL_TABLE_KEY)?;
                    meta.remove(BACKFILL_HI_KEY)?;
                    meta.remove(BACKFILL_LO_KEY)?;
                }
            }
            count
        };
        txn.commit()?;
        Ok(Some(done_count))
    }

    /// The index rows of a live or dead message (its `messages` value).
    fn backfill_live(
        &self,
        index: &mut search::Indexer<'_>,
        schedule: &impl ReadableTable<u128, &'static [u8]>,
        dead: &impl ReadableTable<&'static [u8], &'static [u8]>,
        attempts: &impl ReadableTable<&'static [u8], &'static [u8]>,
        id: u128,
        value: &[u8],
    ) -> Result<(), StoreError> {
        let key = id.to_be_bytes();
        let Some(bytes) = self
            .heap
            .resolve(seal::open(TableId::Messages, &key, value)?)?
        else {
            return Ok(());
        };
        index.message(id, &bytes, None)?;
        if schedule.get(id)?.is_none() {
            let record = MessageRecord::decode(bytes.as_slice())?;
            let dk = dead_key(&dest_key_of(&record.destination)?, MessageId(id));
            if dead.get(dk.as_slice())?.is_some() {
                index.dead(&dk, attempts)?;
            }
        }
        Ok(())
    }

    /// The index rows of a completed message (its `done` value): its record's while the
    /// log keeps it, else its summary's (destination, event type, event id, idempotency
    /// key), and its outcome.
    fn backfill_done(
        &self,
        index: &mut search::Indexer<'_>,
        retained: &impl ReadableTable<u128, &'static [u8]>,
        id: u128,
        value: &[u8],
    ) -> Result<(), StoreError> {
        let key = id.to_be_bytes();
        let opened = seal::open(TableId::Done, &key, value)?;
        let record = match self.kept_bytes(retained, id)? {
            Some(bytes) => bytes,
            None => {
                let summary = DoneRecord::decode(opened)?;
                MessageRecord {
                    destination: summary.destination,
                    event_type: summary.event_type,
                    event_id: summary.event_id,
                    idempotency_key: summary.idempotency_key,
                    ..Default::default()
                }
                .encode_to_vec()
            }
        };
        index.message(id, &record, None)?;
        index.done(id, opened)
    }

    /// How many rows the search index holds.
    pub fn search_rows(&self) -> Result<u64, StoreError> {
        let txn = self.read()?;
        // The rows in memory are not in redb.
        let pending = self.pending.len() as u64;
        match txn.open_table(search::SEARCH) {
            Ok(t) => Ok(redb::ReadableTableMetadata::len(&t)? + pending),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Every row of every table hookd writes (tests: comparing states).
    pub fn dump(&self) -> Result<Vec<TableRow>, StoreError> {
        let txn = self.db.begin_read()?;
        let mut out = Vec::new();
        for (id, table) in [
            (TableId::Messages, MESSAGES),
            (TableId::Schedule, SCHEDULE),
            (TableId::History, HISTORY),
            (TableId::Done, DONE),
            (TableId::Retained, RETAINED),
        ] {
            for row in txn.open_table(table)?.iter()? {
                let (k, v) = row?;
                let key = k.value().to_be_bytes().to_vec();
                let value = seal::open(id, &key, v.value())?.to_vec();
                out.push((id.name(), key, value));
            }
        }
        for (id, table) in [
            (TableId::Dead, DEAD),
            (TableId::Idempotency, IDEMPOTENCY),
            (TableId::Attempts, ATTEMPTS),
            (TableId::Segments, SEGMENTS),
            (TableId::Lanes, LANES),
            (TableId::Catalog, CATALOG),
        ] {
            for row in txn.open_table(table)?.iter()? {
                let (k, v) = row?;
                let value = seal::open(id, k.value(), v.value())?.to_vec();
                out.push((id.name(), k.value().to_vec(), value));
            }
        }
        Ok(out)
    }

    /// The durability watermark shared with the log's writer.
    pub fn mark(&self) -> &Arc<Watermark> {
        &self.mark
    }

    /// A read snapshot holding every write answered before the call (see [`Watermark`]);
    /// only durable writes are ever in redb.
    fn read(&self) -> Result<redb::ReadTransaction, StoreError> {
        self.mark
            .wait_synced_applied()
            .map_err(|e| StoreError::Io(std::io::Error::other(format!("storage failed: {e}"))))?;
        Ok(self.db.begin_read()?)
    }

    /// A read of the search index: the rows not in redb yet, taken before the snapshot
    /// (see `search::Pending` for why in that order), and the snapshot.
    fn read_index(
        &self,
    ) -> Result<(Vec<Arc<search::Generation>>, redb::ReadTransaction), StoreError> {
        self.mark
            .wait_synced_applied()
            .map_err(|e| StoreError::Io(std::io::Error::other(format!("storage failed: {e}"))))?;
        let pending = self.pending.view();
        Ok((pending, self.db.begin_read()?))
    }

    /// redb's last applied state, for the engine (whose overlay holds what is newer).
    pub fn snapshot(&self) -> Result<redb::ReadTransaction, StoreError> {
        Ok(self.db.begin_read()?)
    }

    /// The log position the file holds every change up to (its last checkpoint's).
    pub fn applied(&self) -> Result<u64, StoreError> {
        let txn = self.db.begin_read()?;
        let meta = txn.open_table(META)?;
        Ok(meta.get(APPLIED_KEY)?.map_or(0, |v| v.value()))
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

    /// Reads what the engine needs at start, from one snapshot, handing each item to `each`
    /// as it is read (nothing is collected: ten million pending messages must not be held
    /// twice): the endpoints first (a destination's push settings come from its
    /// endpoint), then each message's schedule row with its record's size in id order, then
    /// the dead-letter count of each destination.
    pub fn recover(
        &self,
        mut each: impl FnMut(Recovering) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let txn = self.db.begin_read()?;
        // The catalog is keyed tenant first, kind second: a tenant's record comes before
        // its endpoints.
        for row in txn.open_table(CATALOG)?.iter()? {
            let (k, v) = row?;
            let key = k.value();
            let object = keys::catalog_object(key)?;
            let value = seal::open(TableId::Catalog, key, v.value())?;
            match object.kind {
                Kind::Tenant => each(Recovering::Tenant(
                    object.tenant,
                    Box::new(TenantRecord::decode(value)?),
                ))?,
                Kind::Endpoint => each(Recovering::Endpoint(
                    object.tenant,
                    Box::new(EndpointRecord::decode(value)?),
                ))?,
                Kind::Queue => each(Recovering::Queue(
                    object.tenant,
                    Box::new(QueueRecord::decode(value)?),
                ))?,
                Kind::EventType => each(Recovering::EventType(
                    object.tenant,
                    Box::new(EventTypeRecord::decode(value)?),
                ))?,
                Kind::Token => each(Recovering::Token(
                    object.tenant,
                    object.name,
                    Box::new(TokenRecord::decode(value)?),
                ))?,
                _ => {}
            }
        }
        // Every live message has a `messages` row with the same key: its record's size is
        // its pointer's length (nothing is read from the log). The `messages` table is
        // read on a second thread, in batches, while this one reads `schedule` (the two
        // scans are most of a restart's recovery; the same snapshot serves both), and
        // the two are joined on the key.
        let schedule = txn.open_table(SCHEDULE)?;
        let messages = txn.open_table(MESSAGES)?;
        let heap_ends = std::thread::scope(|scope| -> Result<HeapEnds, StoreError> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<(u128, u32)>, StoreError>>(8);
            let reader = scope.spawn(move || {
                // Per segment live messages point into: how many, and where the last one ends.
                let mut ends = HeapEnds::new();
                let mut sizes = || -> Result<(), StoreError> {
                    let mut batch = Vec::with_capacity(RECOVER_BATCH);
                    for row in messages.iter()? {
                        let (key, value) = row?;
                        let id = key.value();
                        let value =
                            seal::open(TableId::Messages, &id.to_be_bytes(), value.value())?;
                        let stored = heap::Stored::of(value)?;
                        if let Some(p) = stored.pointer() {
                            let at = ends.entry(p.segment).or_default();
                            at.0 += 1;
                            at.1 = at.1.max(p.offset + u64::from(p.len));
                        }
                        batch.push((id, stored.len()));
                        if batch.len() == RECOVER_BATCH {
                            let full =
                                std::mem::replace(&mut batch, Vec::with_capacity(RECOVER_BATCH));
                            if tx.send(Ok(full)).is_err() {
                                return Ok(()); // the reader stopped at an error of its own
                            }
                        }
                    }
                    let _ = tx.send(Ok(batch));
                    Ok(())
                };
                if let Err(e) = sizes() {
                    let _ = tx.send(Err(e));
                }
                ends
            });
            let mut sizes = std::iter::from_fn(|| rx.recv().ok())
                .flat_map(|batch| {
                    let (sizes, failed) = match batch {
                        Ok(sizes) => (sizes, None),
                        Err(e) => (Vec::new(), Some(e)),
                    };
                    sizes.into_iter().map(Ok).chain(failed.map(Err))
                })
                .peekable();
            for row in schedule.iter()? {
                let (id, entry) = row?;
                let id = id.value();
                let entry = ScheduleEntry::decode(seal::open(
                    TableId::Schedule,
                    &id.to_be_bytes(),
                    entry.value(),
                )?)?;
                let mut bytes = 0;
                while let Some(size) = sizes.next_if(|r| !matches!(r, Ok((k, _)) if *k > id)) {
                    let (key, len) = size?;
                    if key == id {
                        bytes = len;
                    }
                }
                each(Recovering::Message {
                    id: MessageId(id),
                    entry,
                    bytes,
                })?;
            }
            // The rest of the sizes (messages with no schedule row), so the reader ends.
            for size in sizes {
                size?;
            }
            reader
                .join()
                .map_err(|_| StoreError::Corrupt("the recovery's reader panicked".into()))
        })?;
        self.check_heap(&heap_ends)?;
        let dead = txn.open_table(DEAD)?;
        let mut run: Option<(String, u64)> = None;
        for row in dead.iter()? {
            let (key, value) = row?;
            let dest = dead_key_destination(key.value())?;
            // A dead letter that blocks its FIFO lane (format 8): the state byte's high bit
            // says a lane follows; only those are decoded.
            let value = seal::open(TableId::Dead, key.value(), value.value())?;
            if value.get(8).is_some_and(|b| b & 0x80 != 0) {
                let entry = ScheduleEntry::decode(value)?;
                if let Some(lane) = entry.lane.filter(|l| l.blocks) {
                    each(Recovering::Blocking {
                        id: dead_key_id(key.value())?,
                        destination: entry.destination,
                        lane: lane.key,
                    })?;
                }
            }
            match &mut run {
                Some((last, n)) if *last == dest => *n += 1,
                _ => {
                    if let Some((destination, count)) = run.replace((dest, 1)) {
                        each(Recovering::Dead { destination, count })?;
                    }
                }
            }
        }
        if let Some((destination, count)) = run {
            each(Recovering::Dead { destination, count })?;
        }
        Ok(())
    }

    /// Start-up's check of what live messages point into (issue #49, 6): each segment
    /// exists, is long enough for the furthest record in it, and its frames up to there
    /// pass their checksums. A missing, cut or damaged segment is refused now, naming it
    /// and `hookd repair`, rather than found when a delivery reads into it (hookd would
    /// report healthy until then). Reads each such segment once.
    fn check_heap(&self, ends: &HeapEnds) -> Result<(), StoreError> {
        let Some(dir) = self.heap.dir() else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        let mut read = 0_u64;
        for (segment, (live, end)) in ends {
            let name = crate::wal::segment_name(*segment);
            let damaged = |what: String| StoreError::DamagedLog {
                segment: name.clone(),
                live: *live,
                what,
            };
            let bytes = match dir.read(&name) {
                Ok(bytes) => bytes,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(damaged("is missing".into()));
                }
                Err(e) => return Err(damaged(format!("cannot be read: {e}"))),
            };
            read += bytes.len() as u64;
            if (bytes.len() as u64) < *end {
                return Err(damaged(format!(
                    "is {} bytes, shorter than the {end} its live messages need",
                    bytes.len()
                )));
            }
            let (valid, bad) = crate::wal::valid_frames(&bytes);
            if valid < *end {
                // A frame fails from here on: what matters is whether a live message's
                // record does (each is checked against its pointer's CRC-32C, as a read
                // would). Damage only between them is reported and left.
                let (failed, checked) = self.damaged_pointers(*segment, &bytes, valid)?;
                let bad = bad.unwrap_or("no valid frame");
                if failed > 0 {
                    return Err(damaged(format!(
                        "holds {bad} at byte {valid}: {failed} of the {checked} live record(s) after it fail their checksum"
                    )));
                }
                tracing::warn!(
                    segment = %name,
                    at = valid,
                    checked,
                    "a log segment holds {bad}; every live record in it passes its checksum"
                );
            }
        }
        if !ends.is_empty() {
            tracing::info!(
                segments = ends.len(),
                bytes = read,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "every log segment live messages point into is whole"
            );
        }
        Ok(())
    }

    /// The live messages whose record is in `segment` (its `bytes`, read already) at or
    /// after byte `from`: how many fail their checksum (or lie past its end), of how many.
    fn damaged_pointers(
        &self,
        segment: u64,
        bytes: &[u8],
        from: u64,
    ) -> Result<(u64, u64), StoreError> {
        let txn = self.db.begin_read()?;
        let messages = txn.open_table(MESSAGES)?;
        let (mut failed, mut checked) = (0, 0);
        for row in messages.iter()? {
            let (key, value) = row?;
            let value = seal::open(TableId::Messages, &key.value().to_be_bytes(), value.value())?;
            if let Some(p) = heap::Stored::of(value)?.pointer()
                && p.segment == segment
                && p.offset + u64::from(p.len) > from
            {
                checked += 1;
                let record = usize::try_from(p.offset)
                    .ok()
                    .and_then(|at| bytes.get(at..at.checked_add(p.len as usize)?));
                if record.is_none_or(|r| crc32c::crc32c(r) != p.crc) {
                    failed += 1;
                }
            }
        }
        Ok((failed, checked))
    }

    /// A FIFO lane's row: destination `key` (`queue:NAME`, `endpoint:NAME`) and ordering
    /// key (the default for a lane never used).
    pub fn lane(&self, key: &str, ordering_key: &str) -> Result<LaneRow, StoreError> {
        let txn = self.read()?;
        let table = txn.open_table(LANES)?;
        let row_key = lane_key(key, ordering_key);
        match table.get(row_key.as_slice())? {
            Some(v) => LaneRow::decode(seal::open(TableId::Lanes, &row_key, v.value())?),
            None => Ok(LaneRow::default()),
        }
    }

    /// A completed message's record, while it is kept.
    pub fn done(&self, id: MessageId) -> Result<Option<DoneRecord>, StoreError> {
        let txn = self.read()?;
        let table = txn.open_table(DONE)?;
        match table.get(id.0)? {
            Some(v) => Ok(Some(DoneRecord::decode(seal::open(
                TableId::Done,
                &id.0.to_be_bytes(),
                v.value(),
            )?)?)),
            None => Ok(None),
        }
    }

    pub fn message(&self, id: MessageId) -> Result<Option<StoredMessage>, StoreError> {
        let txn = self.read()?;
        let messages = txn.open_table(MESSAGES)?;
        let Some(record) = messages.get(id.0)? else {
            return Ok(None);
        };
        let key = id.0.to_be_bytes();
        let record = self.resolve(id, seal::open(TableId::Messages, &key, record.value())?)?;
        let Some(entry) = entry_of(
            &txn.open_table(SCHEDULE)?,
            &txn.open_table(DEAD)?,
            id,
            &record.destination,
        )?
        else {
            return Err(StoreError::Corrupt(format!(
                "message {id} has neither schedule nor dead row"
            )));
        };
        let history = history_of(&txn.open_table(HISTORY)?, &txn.open_table(ATTEMPTS)?, id)?;
        Ok(Some(StoredMessage {
            id,
            record,
            entry,
            history,
        }))
    }

    /// A live message's record from its `messages` value (inline, or in the log).
    fn resolve(&self, id: MessageId, value: &[u8]) -> Result<MessageRecord, StoreError> {
        match self.heap.resolve(value)? {
            Some(bytes) => Ok(MessageRecord::decode(bytes.as_slice())?),
            None => Err(StoreError::Corrupt(format!(
                "the log segment holding live message {id}'s record is gone"
            ))),
        }
    }

    /// Messages of one tenant that match `query`, newest first, from below `cursor`: at most
    /// `limit`, looking at no more than `budget` rows of the index (see [`search::run`]).
    pub fn search(
        &self,
        query: &search::Query,
        cursor: Option<MessageId>,
        limit: usize,
        budget: u64,
    ) -> Result<search::Page, StoreError> {
        let (pending, txn) = self.read_index()?;
        let lookup = self.lookup(&txn)?;
        search::run(&txn, pending, &lookup, query, cursor, limit, budget)
    }

    /// How a search reads messages as they are now, in `txn`.
    fn lookup(&self, txn: &redb::ReadTransaction) -> Result<impl search::Lookup + '_, StoreError> {
        return Ok(Tables {
            heap: &self.heap,
            schedule: txn.open_table(SCHEDULE)?,
            done: txn.open_table(DONE)?,
            messages: txn.open_table(MESSAGES)?,
            attempts: txn.open_table(ATTEMPTS)?,
            dead: txn.open_table(DEAD)?,
            retained: txn.open_table(RETAINED)?,
        });

        struct Tables<'a> {
            heap: &'a Heap,
            retained: redb::ReadOnlyTable<u128, &'static [u8]>,
            schedule: redb::ReadOnlyTable<u128, &'static [u8]>,
            done: redb::ReadOnlyTable<u128, &'static [u8]>,
            messages: redb::ReadOnlyTable<u128, &'static [u8]>,
            attempts: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
            dead: redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
        }
        impl search::Lookup for Tables<'_> {
            fn now(&self, id: MessageId) -> Result<Option<search::Now>, StoreError> {
                search::now_of(
                    &self.schedule,
                    &self.done,
                    &self.messages,
                    &self.attempts,
                    &self.dead,
                    id,
                    |value| match self.heap.resolve(value)? {
                        Some(bytes) => Ok(Some(MessageRecord::decode(bytes.as_slice())?)),
                        None => Ok(None),
                    },
                    |id| {
                        let Some(value) = self.retained.get(id.0)? else {
                            return Ok(false);
                        };
                        let value =
                            seal::open(TableId::Retained, &id.0.to_be_bytes(), value.value())?;
                        self.heap.keeps(value)
                    },
                )
            }
        }
    }

    /// How many of one tenant's messages match `query`: counted, or estimated from a
    /// bounded count and sample (see [`search::estimate`]).
    pub fn estimate(&self, query: &search::Query) -> Result<search::Estimate, StoreError> {
        self.estimate_within(query, search::ESTIMATE_ROWS, search::ESTIMATE_CHECKS)
    }

    /// [`Store::estimate`] counting at most `rows` index rows and checking at most
    /// `checks` candidates (tests: an estimate that extrapolates).
    pub fn estimate_within(
        &self,
        query: &search::Query,
        rows: u64,
        checks: u64,
    ) -> Result<search::Estimate, StoreError> {
        let (pending, txn) = self.read_index()?;
        let lookup = self.lookup(&txn)?;
        search::estimate(&txn, pending, &lookup, query, (rows, checks))
    }

    /// The catch-up of a destination (issue #53, 3): `tenant`'s messages to the destination
    /// encoded `destination` made after `after`, oldest first, at most `limit`, each as it
    /// is now with its record while kept; the cursor of the last looked at, and whether
    /// more may follow.
    pub fn caught_up(
        &self,
        tenant: TenantId,
        destination: &str,
        after: Option<MessageId>,
        limit: usize,
    ) -> Result<(Vec<Caught>, Option<MessageId>, bool), StoreError> {
        // One snapshot for the page: its index rows and its messages' rows.
        let (pending, txn) = self.read_index()?;
        let (ids, more) = match txn.open_table(search::SEARCH) {
            Ok(table) => search::after_in(
                &search::Rows { table, pending },
                tenant,
                destination,
                after.map_or(0, |a| a.0),
                limit,
                // Index rows looked at, at most, for one page.
                10_000,
            )?,
            Err(redb::TableError::TableDoesNotExist(_)) => (Vec::new(), false),
            Err(e) => return Err(e.into()),
        };
        let (messages, schedule, dead) = (
            txn.open_table(MESSAGES)?,
            txn.open_table(SCHEDULE)?,
            txn.open_table(DEAD)?,
        );
        let (done, retained) = (txn.open_table(DONE)?, txn.open_table(RETAINED)?);
        let mut out = Vec::with_capacity(ids.len());
        for &id in &ids {
            let key = id.0.to_be_bytes();
            if let Some(value) = messages.get(id.0)? {
                let record =
                    self.resolve(id, seal::open(TableId::Messages, &key, value.value())?)?;
                if let Some(entry) = entry_of(&schedule, &dead, id, &record.destination)? {
                    out.push(Caught {
                        id,
                        state: search::SearchState::of(entry.state),
                        attempts: entry.attempts,
                        record: Some(record),
                    });
                }
            } else if let Some(v) = done.get(id.0)? {
                let summary = DoneRecord::decode(seal::open(TableId::Done, &key, v.value())?)?;
                let record = self
                    .kept_bytes(&retained, id.0)?
                    .map(|bytes| MessageRecord::decode(bytes.as_slice()))
                    .transpose()?;
                out.push(Caught {
                    id,
                    state: if record.is_some() {
                        search::SearchState::Delivered
                    } else {
                        search::SearchState::Expired
                    },
                    attempts: summary.attempts,
                    record,
                });
            }
            // Neither: forgotten (past retention, or purged); the cursor moves past it.
        }
        Ok((out, ids.last().copied(), more))
    }

    /// The sizes of these stored (live or dead) messages' records, in all.
    pub fn records_bytes(&self, ids: &[MessageId]) -> Result<u64, StoreError> {
        let txn = self.read()?;
        let messages = txn.open_table(MESSAGES)?;
        let mut total = 0u64;
        for id in ids {
            if let Some(v) = messages.get(id.0)? {
                let value = seal::open(TableId::Messages, &id.0.to_be_bytes(), v.value())?;
                total += u64::from(heap::Stored::of(value)?.len());
            }
        }
        Ok(total)
    }

    /// A completed message's record (payload and headers), while the log keeps it.
    pub fn completed_record(&self, id: MessageId) -> Result<Kept, StoreError> {
        let mut kept = self.completed_records(&[id])?;
        Ok(kept.pop().unwrap_or(Kept::Expired))
    }

    /// Completed messages' records, in `ids`' order (one read transaction).
    pub fn completed_records(&self, ids: &[MessageId]) -> Result<Vec<Kept>, StoreError> {
        let txn = self.read()?;
        let retained = txn.open_table(RETAINED)?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(match self.kept_bytes(&retained, id.0)? {
                Some(bytes) => Kept::Record(Box::new(MessageRecord::decode(bytes.as_slice())?)),
                None => Kept::Expired,
            });
        }
        Ok(out)
    }

    /// A completed message's record while the log keeps it (from its `retained` row).
    fn kept_bytes(
        &self,
        retained: &impl ReadableTable<u128, &'static [u8]>,
        id: u128,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let Some(value) = retained.get(id)? else {
            return Ok(None);
        };
        self.heap.resolve(seal::open(
            TableId::Retained,
            &id.to_be_bytes(),
            value.value(),
        )?)
    }

    /// One object's stored record, if the catalog holds it.
    pub fn object(&self, object: &ObjectRef) -> Result<Option<Vec<u8>>, StoreError> {
        let txn = self.read()?;
        let key = catalog_key(object);
        let table = txn.open_table(CATALOG)?;
        let value = table.get(key.as_slice())?;
        value
            .map(|v| Ok(seal::open(TableId::Catalog, &key, v.value())?.to_vec()))
            .transpose()
    }

    /// A tenant's objects of one kind, in name order: (name, stored record).
    pub fn objects(
        &self,
        tenant: TenantId,
        kind: Kind,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        objects_in(&self.read()?, tenant, kind)
    }

    pub fn endpoint(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> Result<Option<EndpointRecord>, StoreError> {
        let object = ObjectRef::new(tenant, Kind::Endpoint, name);
        Ok(match self.object(&object)? {
            Some(value) => Some(EndpointRecord::decode(value.as_slice())?),
            None => None,
        })
    }

    /// Every tenant's ingest sources made over the API: (its object, its JSON definition).
    pub fn sources(&self) -> Result<Vec<(ObjectRef, Vec<u8>)>, StoreError> {
        self.every_object_of(Kind::Source)
    }

    /// Every tenant's subscriptions: (its object, its definition). Reads the whole
    /// catalog (what a start does once).
    pub fn subscriptions(&self) -> Result<Vec<(ObjectRef, Vec<u8>)>, StoreError> {
        self.every_object_of(Kind::Subscription)
    }

    /// Every tenant's declared event types: (its object, its record's bytes).
    pub fn event_types(&self) -> Result<Vec<(ObjectRef, Vec<u8>)>, StoreError> {
        self.every_object_of(Kind::EventType)
    }

    /// Every tenant's objects of one kind, in (tenant, name) order.
    pub fn every_object_of(&self, kind: Kind) -> Result<Vec<(ObjectRef, Vec<u8>)>, StoreError> {
        let txn = self.read()?;
        let table = txn.open_table(CATALOG)?;
        let mut out = Vec::new();
        for row in table.iter()? {
            let (k, v) = row?;
            let key = k.value();
            let object = keys::catalog_object(key)?;
            if object.kind == kind {
                let value = seal::open(TableId::Catalog, key, v.value())?.to_vec();
                out.push((object, value));
            }
        }
        Ok(out)
    }

    /// A tenant's endpoints, in name order.
    pub fn endpoints(&self, tenant: TenantId) -> Result<Vec<EndpointRecord>, StoreError> {
        self.objects(tenant, Kind::Endpoint)?
            .into_iter()
            .map(|(_, value)| Ok(EndpointRecord::decode(value.as_slice())?))
            .collect()
    }

    /// A page of dead letters in (destination, id) order, optionally of one destination.
    /// `after` is the last key of the previous page.
    pub fn dead_letters(
        &self,
        tenant: TenantId,
        destination: Option<&Destination>,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        let txn = self.read()?;
        let dead = txn.open_table(DEAD)?;
        let messages = txn.open_table(MESSAGES)?;
        let history = txn.open_table(HISTORY)?;
        let attempts = txn.open_table(ATTEMPTS)?;
        let (first, prefix) = keys::dead_bounds(tenant, destination);
        let start = resume_after(first, after);
        let mut page = Vec::new();
        let mut page_bytes = 0usize;
        let mut last_key = None;
        for row in dead.range(start.as_slice()..)? {
            let (key, entry) = row?;
            let key = key.value();
            if !key.starts_with(&prefix) {
                break;
            }
            if page.len() == limit || (!page.is_empty() && page_bytes >= MAX_PAGE_BYTES) {
                return Ok((page, last_key));
            }
            let id = dead_key_id(key)?;
            if let Some(record) = messages.get(id.0)? {
                let record = seal::open(TableId::Messages, &id.0.to_be_bytes(), record.value())?;
                let record = self.resolve(id, record)?;
                let history = history_of(&history, &attempts, id)?;
                page_bytes += record.payload.len()
                    + history
                        .attempts
                        .iter()
                        .map(|a| a.error.len() + 64)
                        .sum::<usize>();
                page.push(StoredMessage {
                    id,
                    record,
                    entry: ScheduleEntry::decode(seal::open(TableId::Dead, key, entry.value())?)?,
                    history,
                });
            }
            last_key = Some(key.to_vec());
        }
        Ok((page, None))
    }
}

pub use hookd_core::deadletters::DeadSummary;

impl Store {
    /// Every dead letter of `destination` (or of all), in key order, at most `max`; and
    /// whether more exist. Reads the dead-letter index and attempts, never payloads.
    pub fn dead_summaries(
        &self,
        tenant: TenantId,
        destination: Option<&Destination>,
        max: usize,
    ) -> Result<(Vec<DeadSummary>, bool), StoreError> {
        let all = &|_: &DeadSummary| true;
        let (rows, next) = self.dead_page(tenant, destination, None, max, usize::MAX, all)?;
        Ok((rows, next.is_some()))
    }

    /// A page of the dead letters of `destination` (or of all) that `keep` accepts, in key
    /// order after key `after`: at most `limit` of them, looking at no more than
    /// `max_scan` rows, so a filter that matches little costs a bounded read per page.
    /// Returns the rows and the key to continue after (`None`: nothing is left). Reads the
    /// dead-letter index and attempts, never payloads.
    pub fn dead_page(
        &self,
        tenant: TenantId,
        destination: Option<&Destination>,
        after: Option<&[u8]>,
        limit: usize,
        max_scan: usize,
        keep: &dyn Fn(&DeadSummary) -> bool,
    ) -> Result<(Vec<DeadSummary>, Option<Vec<u8>>), StoreError> {
        let txn = self.read()?;
        let dead = txn.open_table(DEAD)?;
        let history = txn.open_table(HISTORY)?;
        let attempts = txn.open_table(ATTEMPTS)?;
        let (first, prefix) = keys::dead_bounds(tenant, destination);
        let start = resume_after(first, after);
        let mut out = Vec::new();
        let mut last: Option<Vec<u8>> = None;
        for (scanned, row) in dead.range(start.as_slice()..)?.enumerate() {
            let (key, entry) = row?;
            let key = key.value();
            if !key.starts_with(&prefix) {
                return Ok((out, None));
            }
            if out.len() == limit || scanned == max_scan {
                return Ok((out, last));
            }
            let id = dead_key_id(key)?;
            let entry = ScheduleEntry::decode(seal::open(TableId::Dead, key, entry.value())?)?;
            let h = history_of(&history, &attempts, id)?;
            let last_status = h
                .attempts
                .iter()
                .rev()
                .find(|a| a.number > 0)
                .map_or(0, |a| a.http_status);
            let row = DeadSummary {
                id,
                destination: dead_key_destination(key)?,
                dead_ms: entry.since_ms,
                attempts: entry.attempts,
                last_status,
                last_error: h.last_error,
                lane: entry.lane.map(|l| hookd_core::deadletters::DeadLane {
                    key: l.key,
                    seq: l.seq,
                    blocks: l.blocks,
                }),
            };
            if keep(&row) {
                out.push(row);
            }
            last = Some(key.to_vec());
        }
        Ok((out, None))
    }
}

/// A stored row whose seal failed (see `seal`), as [`Store::damaged_rows`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedRow {
    pub table: TableId,
    pub key: Vec<u8>,
}

impl DamagedRow {
    /// The message the row belongs to, if it is one of a message's rows (`done` rows are
    /// a completed message's summary: only that row goes).
    pub fn message(&self) -> Option<MessageId> {
        match self.table {
            TableId::Done => None,
            table => seal::message_of(table, &self.key),
        }
    }
}

impl std::fmt::Display for DamagedRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "table {}, key {}",
            self.table.name(),
            seal::describe_key(self.table, &self.key)
        )
    }
}

/// What [`Store::remove_damaged`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RemovedDamage {
    /// Messages removed whole (record, schedule, attempts, dead-letter row).
    pub messages: Vec<MessageId>,
    /// Other rows removed alone (a completed message's summary, an idempotency key, an
    /// endpoint or a source).
    pub rows: Vec<DamagedRow>,
}

impl Store {
    /// Every row whose seal fails, in table order. Reads the whole file.
    pub fn damaged_rows(&self) -> Result<Vec<DamagedRow>, StoreError> {
        let txn = self.db.begin_read()?;
        let mut out = Vec::new();
        // A live message whose record in the log fails its checksum, or whose segment is
        // gone, is damaged too (its `messages` row names it).
        for row in txn.open_table(MESSAGES)?.iter()? {
            let (k, v) = row?;
            let key = k.value().to_be_bytes();
            let Ok(value) = seal::open(TableId::Messages, &key, v.value()) else {
                continue; // reported below
            };
            if let Some(p) = heap::Stored::of(value)?.pointer()
                && !matches!(self.heap.read(&p), Ok(Some(_)))
            {
                out.push(DamagedRow {
                    table: TableId::Messages,
                    key: key.to_vec(),
                });
            }
        }
        let mut check = |table: TableId, key: &[u8], stored: &[u8]| {
            if seal::open(table, key, stored).is_err() {
                out.push(DamagedRow {
                    table,
                    key: key.to_vec(),
                });
            }
        };
        for (id, def) in [
            (TableId::Messages, MESSAGES),
            (TableId::Schedule, SCHEDULE),
            (TableId::History, HISTORY),
            (TableId::Done, DONE),
            (TableId::Retained, RETAINED),
        ] {
            for row in txn.open_table(def)?.iter()? {
                let (k, v) = row?;
                check(id, &k.value().to_be_bytes(), v.value());
            }
        }
        for (id, def) in [
            (TableId::Attempts, ATTEMPTS),
            (TableId::Dead, DEAD),
            (TableId::Idempotency, IDEMPOTENCY),
            (TableId::Segments, SEGMENTS),
            (TableId::Lanes, LANES),
            (TableId::Catalog, CATALOG),
        ] {
            for row in txn.open_table(def)?.iter()? {
                let (k, v) = row?;
                check(id, k.value(), v.value());
            }
        }
        Ok(out)
    }

    /// Removes the rows of messages that have no `messages` row (what a log replay can
    /// write again for a message a repair removed): their schedule, dead-letter, history
    /// and attempt rows. The ids, in one durable transaction.
    pub fn drop_orphans(&self) -> Result<Vec<MessageId>, StoreError> {
        let txn = self.begin_write()?;
        let mut orphans = Vec::new();
        {
            let messages = txn.open_table(MESSAGES)?;
            let mut schedule = txn.open_table(SCHEDULE)?;
            let mut dead = txn.open_table(DEAD)?;
            let mut history = txn.open_table(HISTORY)?;
            let mut attempts = txn.open_table(ATTEMPTS)?;
            for row in schedule.iter()? {
                let id = row?.0.value();
                if messages.get(id)?.is_none() {
                    orphans.push(MessageId(id));
                }
            }
            let mut dead_orphans = Vec::new();
            for row in dead.iter()? {
                let key = row?.0.value().to_vec();
                let id = dead_key_id(&key)?;
                if messages.get(id.0)?.is_none() {
                    dead_orphans.push(key);
                    orphans.push(id);
                }
            }
            for key in &dead_orphans {
                dead.remove(key.as_slice())?;
            }
            for id in &orphans {
                schedule.remove(id.0)?;
                history.remove(id.0)?;
                let (first, last) = attempt_range(*id);
                attempts.retain_in::<&[u8], _>(first.as_slice()..=last.as_slice(), |_, _| false)?;
            }
        }
        txn.commit()?;
        orphans.dedup();
        Ok(orphans)
    }

    /// What removing `rows` removes: each message they belong to whole, each other row
    /// alone.
    pub fn damage_plan(rows: &[DamagedRow]) -> RemovedDamage {
        let mut plan = RemovedDamage::default();
        for row in rows {
            match row.message() {
                Some(id) if !plan.messages.contains(&id) => plan.messages.push(id),
                Some(_) => {}
                None => plan.rows.push(row.clone()),
            }
        }
        plan
    }

    /// Removes what [`Store::damage_plan`] names, in one durable transaction. For
    /// `hookd repair`, on a stopped hookd whose log has been replayed.
    pub fn remove_damaged(&self, rows: &[DamagedRow]) -> Result<RemovedDamage, StoreError> {
        let plan = Self::damage_plan(rows);
        let txn = self.begin_write()?;
        {
            let mut messages = txn.open_table(MESSAGES)?;
            let mut schedule = txn.open_table(SCHEDULE)?;
            let mut history = txn.open_table(HISTORY)?;
            let mut attempts = txn.open_table(ATTEMPTS)?;
            let mut dead = txn.open_table(DEAD)?;
            for id in &plan.messages {
                messages.remove(id.0)?;
                schedule.remove(id.0)?;
                history.remove(id.0)?;
                let (first, last) = attempt_range(*id);
                attempts.retain_in::<&[u8], _>(first.as_slice()..=last.as_slice(), |_, _| false)?;
            }
            // A dead-letter row is keyed by destination, then id: found by its id.
            let ids: std::collections::HashSet<u128> = plan.messages.iter().map(|m| m.0).collect();
            if !ids.is_empty() {
                dead.retain(|k, _| dead_key_id(k).map_or(true, |id| !ids.contains(&id.0)))?;
            }
            let mut done = txn.open_table(DONE)?;
            let mut idempotency = txn.open_table(IDEMPOTENCY)?;
            let mut catalog = txn.open_table(CATALOG)?;
            let mut lanes = txn.open_table(LANES)?;
            for row in &plan.rows {
                let key = row.key.as_slice();
                let as_id = || {
                    <[u8; 16]>::try_from(key)
                        .map(u128::from_be_bytes)
                        .map_err(|_| StoreError::Corrupt(format!("key of {row}")))
                };
                match row.table {
                    TableId::Done => drop(done.remove(as_id()?)?),
                    TableId::Idempotency => drop(idempotency.remove(key)?),
                    TableId::Catalog => drop(catalog.remove(key)?),
                    TableId::Lanes => drop(lanes.remove(key)?),
                    _ => {}
                }
            }
        }
        // Their pointers went with them: the segments' live counts are counted again.
        recount_segments(&txn)?;
        txn.commit()?;
        Ok(plan)
    }
}

/// Counts the segments' live messages and bytes again from the `messages` table, keeping
/// each segment's newest time: after rows were removed outside the log (`hookd repair`).
pub(crate) fn recount_segments(txn: &WriteTransaction) -> Result<(), StoreError> {
    let mut counts: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for row in txn.open_table(MESSAGES)?.iter()? {
        let (k, v) = row?;
        let key = k.value().to_be_bytes();
        let Ok(value) = seal::open(TableId::Messages, &key, v.value()) else {
            continue;
        };
        if let Some(p) = heap::Stored::of(value).ok().and_then(|s| s.pointer()) {
            let c = counts.entry(p.segment).or_default();
            c.0 += 1;
            c.1 += u64::from(p.len);
        }
    }
    let mut table = txn.open_table(SEGMENTS)?;
    let mut newest = std::collections::BTreeMap::new();
    for row in table.iter()? {
        let (k, v) = row?;
        let key = k.value();
        let Ok(start) = <[u8; 8]>::try_from(key).map(u64::from_be_bytes) else {
            continue;
        };
        let old = seal::open(TableId::Segments, key, v.value())
            .ok()
            .and_then(|v| SegmentRow::decode(v).ok())
            .unwrap_or_default();
        newest.insert(start, old.newest_ms);
    }
    for start in newest.keys() {
        counts.entry(*start).or_default();
    }
    for (start, (live, live_bytes)) in counts {
        let key = start.to_be_bytes();
        let row = SegmentRow {
            live,
            live_bytes,
            newest_ms: newest.get(&start).copied().unwrap_or(0),
        };
        let sealed = seal::seal(TableId::Segments, &key, &row.encode());
        table.insert(key.as_slice(), sealed.as_slice())?;
    }
    Ok(())
}

/// Creates the store file at `path` through [`crate::fs::create_atomically`], so a crash
/// leaves no file or a complete one: redb writes a new file's header in several steps, and
/// a half-created file would not open ("not a redb database").
fn create_atomically(dir: &Path, path: &Path) -> Result<(), StoreError> {
    crate::fs::create_atomically(dir, path, |temp| -> Result<(), StoreError> {
        Store::init(Database::create(temp)?)?;
        Ok(())
    })
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
        Some(found @ 10..=12) => {
            // 10 -> 11: the `search` table, made by `Apply::open`; nothing converted.
            // 11 -> 12: new kinds of objects and a new bit in new rows; nothing converted.
            // 12 -> 13: the `scrubs` table, made by `Apply::open`; nothing converted.
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            tracing::info!(
                from = found,
                to = FORMAT_VERSION,
                "migrated the disk format"
            );
            Ok(())
        }
        Some(9) => {
            // 9 -> 10: `into_catalog`, in the same transaction, moves the objects.
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            tracing::info!(from = 9, to = FORMAT_VERSION, "migrated the disk format");
            Ok(())
        }
        Some(8) => {
            // 8 -> 9: `lanes` rows of 8 bytes read as they are (no time of use yet); the
            // lanes sweep gives each its time at its first look. 9 -> 10: see above.
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            tracing::info!(from = 8, to = FORMAT_VERSION, "migrated the disk format");
            Ok(())
        }
        Some(7) => {
            // 7 -> 8: the `lanes` table (created by `Apply::open` in the same transaction);
            // no format-7 row carries a lane, so nothing is converted; 8 -> 9 neither.
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            tracing::info!(from = 7, to = FORMAT_VERSION, "migrated the disk format");
            Ok(())
        }
        Some(6) => {
            // 6 -> 7: the `subscriptions` table (created by `Apply::open` in the same
            // transaction), shared pointers in `messages` and `retained` (a fan-out's
            // deliveries), and copies in log records. Nothing is converted; 7 -> 8 neither.
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            tracing::info!(from = 6, to = FORMAT_VERSION, "migrated the disk format");
            Ok(())
        }
        Some(5) => {
            // 5 -> 6: `retained` and `segments` are created by `Apply::open` in the same
            // transaction; `messages` rows holding records inline stay readable as they
            // are, and the segments before the checkpoint (which hold no payload anything
            // points to, and have no `segments` row) are deleted by the first reclaim.
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            tracing::info!(from = 5, to = FORMAT_VERSION, "migrated the disk format");
            Ok(())
        }
        Some(found @ 1..=4) => {
            if found == 1 {
                // Version 1 committed every change to the file; there is no log to replay.
                // An empty log starts at position 0.
                meta.insert(APPLIED_KEY, 0)?;
            }
            // 2 -> 3: each finished attempt is a row of `attempts` (created by `Apply::open`
            // in the same transaction) instead of a rewrite of the message's whole
            // `history` row; rows of `history` stay readable and are folded into `attempts`
            // the next time their message has an attempt. 3 -> 4: the `sources` table, and
            // log records may name it. Neither converts anything.
            // 4 -> 5: every row gets its seal. 5 -> 6 converts nothing (see above).
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            drop(meta);
            let started = std::time::Instant::now();
            let rows = seal_every_row(txn)?;
            tracing::info!(
                from = found,
                to = FORMAT_VERSION,
                rows_sealed = rows,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "migrated the disk format"
            );
            Ok(())
        }
        Some(found) => Err(StoreError::Corrupt(format!(
            "disk format version {found} is not one hookd ever wrote"
        ))),
        None => {
            // A new file, or one from before the version row (whose layout is version 1).
            let tables_exist = txn
                .list_tables()?
                .any(|t| redb::TableHandle::name(&t) == "messages");
            if tables_exist {
                meta.insert(FORMAT_KEY, 1)?;
                drop(meta);
                return check_format(txn);
            }
            meta.insert(APPLIED_KEY, 0)?;
            meta.insert(FORMAT_KEY, FORMAT_VERSION)?;
            // Nothing stored before the index: nothing to backfill.
            meta.insert(BACKFILLED_KEY, 1)?;
            Ok(())
        }
    }
}

/// Rows rewritten per step of [`seal_every_row`] (what the migration holds in memory).
const SEAL_CHUNK: usize = 4_096;

/// Seals every row of every table an older format wrote without seals; how many rows.
/// One table at a time, [`SEAL_CHUNK`] rows at a time, so memory stays bounded at any
/// size; all in `txn`, so a crash part way leaves the file as it was.
fn seal_every_row(txn: &WriteTransaction) -> Result<u64, StoreError> {
    let mut rows = 0;
    for (id, def) in [
        (TableId::Messages, MESSAGES),
        (TableId::Schedule, SCHEDULE),
        (TableId::History, HISTORY),
        (TableId::Done, DONE),
    ] {
        let mut table = txn.open_table(def)?;
        let mut after: Option<u128> = None;
        loop {
            let lower = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
            let chunk = table
                .range::<u128>((lower, std::ops::Bound::Unbounded))?
                .take(SEAL_CHUNK)
                .map(|row| {
                    let (k, v) = row?;
                    let k = k.value();
                    Ok((k, seal::seal(id, &k.to_be_bytes(), v.value())))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            let Some(&(last, _)) = chunk.last() else {
                break;
            };
            for (k, v) in &chunk {
                table.insert(*k, v.as_slice())?;
            }
            rows += chunk.len() as u64;
            after = Some(last);
        }
    }
    for (id, def) in [
        (TableId::Attempts, ATTEMPTS),
        (TableId::Dead, DEAD),
        (TableId::Idempotency, IDEMPOTENCY),
    ] {
        let mut table = txn.open_table(def)?;
        let mut after: Option<Vec<u8>> = None;
        loop {
            let lower = after
                .as_deref()
                .map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
            let chunk = table
                .range::<&[u8]>((lower, std::ops::Bound::Unbounded))?
                .take(SEAL_CHUNK)
                .map(|row| {
                    let (k, v) = row?;
                    let k = k.value().to_vec();
                    let sealed = seal::seal(id, &k, v.value());
                    Ok((k, sealed))
                })
                .collect::<Result<Vec<_>, StoreError>>()?;
            if chunk.is_empty() {
                break;
            }
            for (k, v) in &chunk {
                table.insert(k.as_slice(), v.as_slice())?;
            }
            rows += chunk.len() as u64;
            after = chunk.last().map(|(k, _)| k.clone());
        }
    }
    for (id, _, def) in &LEGACY_OBJECTS[..2] {
        // (`subscriptions` came with format 7: its rows were sealed from the start.)
        let (id, mut table) = (*id, txn.open_table(*def)?);
        let all = table
            .iter()?
            .map(|row| {
                let (k, v) = row?;
                let k = k.value().to_owned();
                let sealed = seal::seal(id, k.as_bytes(), v.value());
                Ok((k, sealed))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        for (k, v) in &all {
            table.insert(k.as_str(), v.as_slice())?;
        }
        rows += all.len() as u64;
    }
    Ok(rows)
}

/// Where a page of dead letters starts: at `first`, or just after `after` (the previous
/// page's last key) if that is further on.
fn resume_after(first: Vec<u8>, after: Option<&[u8]>) -> Vec<u8> {
    match after {
        Some(after) => {
            let mut next = after.to_vec();
            next.push(0); // the smallest key strictly after `after`
            next.max(first)
        }
        None => first,
    }
}

/// A tenant's objects of one kind, in name order: (name, stored record).
fn objects_in(
    txn: &redb::ReadTransaction,
    tenant: TenantId,
    kind: Kind,
) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
    let (first, end) = catalog_range(tenant, Some(kind));
    let table = txn.open_table(CATALOG)?;
    let mut out = Vec::new();
    for row in table.range::<&[u8]>(first.as_slice()..end.as_slice())? {
        let (k, v) = row?;
        let key = k.value();
        let object = keys::catalog_object(key)?;
        out.push((
            object.name,
            seal::open(TableId::Catalog, key, v.value())?.to_vec(),
        ));
    }
    Ok(out)
}

/// Moves what a file of format 9 or older holds in `endpoints`, `sources` and
/// `subscriptions` into the catalog, as tenant `default`'s objects, and drops the three
/// tables; makes tenant `default` if the file has none (a new file, or one just moved).
/// All in `txn`, which also records the format: a crash part way leaves the file as it was.
fn into_catalog(txn: &WriteTransaction) -> Result<(), StoreError> {
    let mut catalog = txn.open_table(CATALOG)?;
    let tables: std::collections::HashSet<String> = txn
        .list_tables()?
        .map(|t| redb::TableHandle::name(&t).to_owned())
        .collect();
    let mut moved = 0u64;
    for (id, kind, def) in LEGACY_OBJECTS {
        if !tables.contains(id.name()) {
            continue;
        }
        {
            let table = txn.open_table(def)?;
            for row in table.iter()? {
                let (k, v) = row?;
                let name = k.value();
                let value = seal::open(id, name.as_bytes(), v.value())?;
                let key = catalog_key(&ObjectRef::new(TenantId::DEFAULT, kind, name));
                catalog.insert(
                    key.as_slice(),
                    seal::seal(TableId::Catalog, &key, value).as_slice(),
                )?;
                moved += 1;
            }
        }
        txn.delete_table(def)?;
    }
    let default = catalog_key(&ObjectRef::tenant(TenantId::DEFAULT));
    if catalog.get(default.as_slice())?.is_none() {
        let record = TenantRecord {
            name: DEFAULT_TENANT.to_owned(),
            ..Default::default()
        }
        .encode_to_vec();
        let sealed = seal::seal(TableId::Catalog, &default, &record);
        catalog.insert(default.as_slice(), sealed.as_slice())?;
    }
    if moved > 0 {
        tracing::info!(
            objects = moved,
            "moved the objects into the catalog as tenant default's"
        );
    }
    Ok(())
}

/// A stored message's state: its schedule row while it is live, else its dead-letter row
/// (`destination` is its record's, encoded); `None`: neither.
pub(crate) fn entry_of(
    schedule: &impl ReadableTable<u128, &'static [u8]>,
    dead: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: MessageId,
    destination: &str,
) -> Result<Option<ScheduleEntry>, StoreError> {
    if let Some(e) = schedule.get(id.0)? {
        let key = id.0.to_be_bytes();
        return Ok(Some(ScheduleEntry::decode(seal::open(
            TableId::Schedule,
            &key,
            e.value(),
        )?)?));
    }
    let dk = dead_key(&dest_key_of(destination)?, id);
    match dead.get(dk.as_slice())? {
        Some(e) => Ok(Some(ScheduleEntry::decode(seal::open(
            TableId::Dead,
            &dk,
            e.value(),
        )?)?)),
        None => Ok(None),
    }
}

/// The destination key of an encoded destination.
fn dest_key_of(encoded: &str) -> Result<String, StoreError> {
    Destination::decode(encoded)
        .map(|d| d.key())
        .ok_or_else(|| StoreError::Corrupt(format!("destination {encoded:?}")))
}

/// A message's finished attempts (a `history` row of format 2, then its `attempts` rows);
/// none recorded yet is an empty history.
fn history_of(
    table: &impl ReadableTable<u128, &'static [u8]>,
    attempts: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: MessageId,
) -> Result<HistoryRecord, StoreError> {
    let legacy = match table.get(id.0)? {
        Some(v) => Some(HistoryRecord::decode(seal::open(
            TableId::History,
            &id.0.to_be_bytes(),
            v.value(),
        )?)?),
        None => None,
    };
    let (first, last) = attempt_range(id);
    let mut rows = Vec::new();
    for row in attempts.range(first.as_slice()..=last.as_slice())? {
        let (k, v) = row?;
        rows.push(AttemptRecord::decode(seal::open(
            TableId::Attempts,
            k.value(),
            v.value(),
        )?)?);
    }
    Ok(HistoryRecord::assemble(legacy, rows))
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

    /// A format-10 file (no `search` table) opens as format 11 with the table made, and
    /// what the log performs from then on is indexed; the backfill indexes what it held
    /// (live, dead and completed messages), a slice at a time, and then says it is done.
    #[test]
    fn a_format_10_file_gets_the_search_table_and_its_messages_backfilled() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        // What a format-10 hookd stored: a live message, a dead letter, a delivered one
        // whose record is gone (only its summary).
        let live = MessageRecord {
            destination: "qjobs".into(),
            event_type: "order.paid".into(),
            ..Default::default()
        };
        let mut log = rowlog::RowLog::default();
        for id in [3u128, 4] {
            log.put(TableId::Messages, &id.to_be_bytes(), &live.encode_to_vec());
        }
        let entry = |state| ScheduleEntry {
            due_ms: 0,
            state,
            attempts: 0,
            max_attempts: 3,
            since_ms: 0,
            destination: "qjobs".into(),
            lane: None,
            replayed: false,
        };
        log.put(
            TableId::Schedule,
            &3u128.to_be_bytes(),
            &entry(State::Pending).encode(),
        );
        let dk = dead_key(&dest_key_of("qjobs").unwrap(), MessageId(4));
        log.put(TableId::Dead, &dk, &entry(State::Dead).encode());
        let done = DoneRecord {
            destination: "qjobs".into(),
            idempotency_key: "k-5".into(),
            ..Default::default()
        };
        log.put(TableId::Done, &5u128.to_be_bytes(), &done.encode_to_vec());
        store.replay_records([log.into_bytes().as_slice()]).unwrap();
        let txn = store.db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert(FORMAT_KEY, 10).unwrap();
            meta.remove(BACKFILLED_KEY).unwrap();
        }
        assert!(txn.delete_table(search::SEARCH).unwrap());
        txn.commit().unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.format_version().unwrap(), Some(FORMAT_VERSION));
        assert_eq!(store.search_rows().unwrap(), 0);
        // One message a step: 3, then 4 (and `messages` ends), then 5, then the end.
        let steps: Vec<_> = std::iter::from_fn(|| store.backfill_search(0, 1).unwrap())
            .take(10)
            .collect();
        assert_eq!(steps, vec![1, 1, 0, 1, 0]);
        assert_eq!(store.backfill_search(0, 1).unwrap(), None);
        // 3: All, destination, event type. 4: the same and Dead. 5: All, destination,
        // idempotency key, Delivered.
        assert_eq!(store.search_rows().unwrap(), 3 + 4 + 4);
        let found = |query: search::Query| -> Vec<u128> {
            store
                .search(&query, None, 10, 100)
                .unwrap()
                .hits
                .iter()
                .map(|h| h.id.0)
                .collect()
        };
        let tenant = hookd_core::scope::TenantId::DEFAULT;
        let by_state = |state| search::Query {
            tenant,
            states: vec![state],
            ..Default::default()
        };
        assert_eq!(found(by_state(search::SearchState::Dead)), vec![4]);
        assert_eq!(found(by_state(search::SearchState::Pending)), vec![3]);
        assert_eq!(
            found(search::Query {
                tenant,
                idempotency_key: Some("k-5".into()),
                ..Default::default()
            }),
            vec![5]
        );
        // A new file has nothing to backfill.
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(
            Store::open(fresh.path())
                .unwrap()
                .backfill_search(0, 1)
                .unwrap(),
            None
        );
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.search_rows().unwrap(), 11);
        let record = MessageRecord {
            destination: "qjobs".into(),
            ..Default::default()
        };
        let mut log = rowlog::RowLog::default();
        log.put(
            TableId::Messages,
            &7u128.to_be_bytes(),
            &record.encode_to_vec(),
        );
        store.replay_records([log.into_bytes().as_slice()]).unwrap();
        // What the log performs now is indexed as it is: All and the destination's row.
        assert_eq!(store.search_rows().unwrap(), 11 + 2);
    }

    /// The apply stage's gather sleeps until its deadline, but a reader that starts waiting
    /// for redb ends it at once (issue #28, point 6: reads wait one apply transaction).
    #[test]
    fn a_waiting_reader_ends_the_apply_stages_gather() {
        let mark = Arc::new(Watermark::default());
        mark.reset(0);
        mark.synced(10);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let gatherer = {
            let mark = mark.clone();
            std::thread::spawn(move || {
                mark.gather_until(std::time::Instant::now() + std::time::Duration::from_secs(600));
                done_tx.send(()).unwrap();
            })
        };
        assert!(
            done_rx.try_recv().is_err(),
            "the gather ended with nobody waiting"
        );
        let reader = {
            let mark = mark.clone();
            std::thread::spawn(move || mark.wait_synced_applied())
        };
        // Bounded only so a broken nudge fails instead of hanging for the gather's 600 s.
        done_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("a waiting reader did not end the gather");
        gatherer.join().unwrap();
        mark.applied(10);
        assert!(reader.join().unwrap().is_ok());
    }

    /// An unclean open checks the file's integrity unless the last open was in this boot
    /// and nothing failed since (a kill); a failure, `distrust`, or a copy of the
    /// directory (another inode) makes the next open check.
    #[test]
    fn an_open_after_a_kill_in_this_boot_skips_the_integrity_check_and_only_then() {
        let dir = tempfile::tempdir().unwrap();
        let write = |store: &Store, n: u64| {
            let txn = store.begin_write().unwrap();
            txn.open_table(META).unwrap().insert("probe", n).unwrap();
            txn.commit().unwrap();
        };
        let read = |store: &Store| {
            let txn = store.db.begin_read().unwrap();
            txn.open_table(META)
                .unwrap()
                .get("probe")
                .unwrap()
                .map(|v| v.value())
        };
        let store = Store::open(dir.path()).unwrap();
        assert!(!store.integrity_checked(), "a new file");
        write(&store, 1);
        drop(store); // killed: no clean close
        let store = Store::open(dir.path()).unwrap();
        assert!(!store.integrity_checked(), "killed in this boot: trusted");
        assert_eq!(read(&store), Some(1));
        write(&store, 2);
        store.mark().fail(Arc::from("injected"));
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert!(store.integrity_checked(), "a storage failure: checked");
        assert_eq!(read(&store), Some(2));
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert!(
            !store.integrity_checked(),
            "the checked open left its token"
        );
        drop(store);
        Store::distrust(dir.path());
        let store = Store::open(dir.path()).unwrap();
        assert!(store.integrity_checked(), "distrusted: checked");
        drop(store);
        Store::closed_cleanly(dir.path()).unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert!(!store.integrity_checked(), "a clean close");
        drop(store);
        // A copy of the directory, marker and all, is another file: checked.
        let copy = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
        }
        let store = Store::open(copy.path()).unwrap();
        assert!(store.integrity_checked(), "a copied directory: checked");
        assert_eq!(read(&store), Some(2));
        // `hookd repair`'s open always checks.
        drop(store);
        let store = Store::open_checked(dir.path()).unwrap();
        assert!(store.integrity_checked());
        drop(store);
        Store::closed_cleanly(dir.path()).unwrap();
        Store::distrust(copy.path());
    }

    /// Format 2 kept a message's attempts in one `history` row; format 3 appends rows to
    /// `attempts`. A format-2 file opens as format 3 with nothing converted: its rows are
    /// read as they are (and folded into `attempts` at the message's next attempt).
    #[test]
    fn a_format_2_file_is_migrated_and_its_history_rows_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let id = MessageId(42);
        let mut legacy = HistoryRecord::default();
        legacy.push(AttemptRecord {
            number: 1,
            outcome: "http_error".into(),
            error: "HTTP 503".into(),
            ..Default::default()
        });
        let txn = store.db.begin_write().unwrap();
        {
            let mut meta = txn.open_table(META).unwrap();
            meta.insert(FORMAT_KEY, 2).unwrap();
            txn.delete_table(ATTEMPTS).unwrap();
            let mut history = txn.open_table(HISTORY).unwrap();
            history
                .insert(id.0, legacy.encode_to_vec().as_slice())
                .unwrap();
        }
        txn.commit().unwrap();
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.format_version().unwrap(), Some(FORMAT_VERSION));
        let txn = store.read().unwrap();
        let h = history_of(
            &txn.open_table(HISTORY).unwrap(),
            &txn.open_table(ATTEMPTS).unwrap(),
            id,
        )
        .unwrap();
        assert_eq!(h.attempts.len(), 1);
        assert_eq!(h.last_error, "HTTP 503");
    }

    /// Format 9 kept endpoints, sources and subscriptions by name in tables of their own;
    /// format 10 moves them into the catalog as tenant `default`'s objects (made with it),
    /// and a log written before the upgrade replays into the catalog the same way.
    #[test]
    fn a_format_9_files_objects_and_its_log_move_into_the_default_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let txn = store.db.begin_write().unwrap();
        {
            txn.open_table(META).unwrap().insert(FORMAT_KEY, 9).unwrap();
            txn.delete_table(CATALOG).unwrap();
            for (id, _, def) in LEGACY_OBJECTS {
                let mut table = txn.open_table(def).unwrap();
                for name in ["a", "b"] {
                    let value = format!("{}:{name}", id.name());
                    let sealed = seal::seal(id, name.as_bytes(), value.as_bytes());
                    table.insert(name, sealed.as_slice()).unwrap();
                }
            }
        }
        txn.commit().unwrap();
        drop(store);

        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.format_version().unwrap(), Some(FORMAT_VERSION));
        let names: Vec<String> = store
            .db
            .begin_read()
            .unwrap()
            .list_tables()
            .unwrap()
            .map(|t| redb::TableHandle::name(&t).to_owned())
            .collect();
        for gone in ["endpoints", "sources", "subscriptions"] {
            assert!(
                !names.iter().any(|n| n == gone),
                "{gone} dropped: {names:?}"
            );
        }
        let objects = |kind| store.objects(TenantId::DEFAULT, kind).unwrap();
        let expect = |table: &str, names: &[&str]| -> Vec<(String, Vec<u8>)> {
            names
                .iter()
                .map(|n| (n.to_string(), format!("{table}:{n}").into_bytes()))
                .collect()
        };
        assert_eq!(objects(Kind::Endpoint), expect("endpoints", &["a", "b"]));
        assert_eq!(objects(Kind::Source), expect("sources", &["a", "b"]));
        assert_eq!(
            objects(Kind::Subscription),
            expect("subscriptions", &["a", "b"])
        );
        let tenant = store.object(&ObjectRef::tenant(TenantId::DEFAULT)).unwrap();
        let tenant = TenantRecord::decode(tenant.expect("made").as_slice()).unwrap();
        assert_eq!(tenant.name, DEFAULT_TENANT);

        // What a format-9 hookd logged and had not applied when it stopped.
        let mut log = rowlog::RowLog::default();
        log.put(TableId::Endpoints, b"c", b"endpoints:c");
        log.remove(TableId::Subscriptions, b"a");
        log.put(TableId::Sources, b"a", b"sources:a2");
        store.replay_records([log.into_bytes().as_slice()]).unwrap();
        assert_eq!(
            objects(Kind::Endpoint),
            expect("endpoints", &["a", "b", "c"])
        );
        assert_eq!(objects(Kind::Subscription), expect("subscriptions", &["b"]));
        assert_eq!(objects(Kind::Source)[0].1, b"sources:a2");
        assert!(store.damaged_rows().unwrap().is_empty());

        // A name that is not UTF-8 in such a record is refused as corrupt, not guessed.
        let mut log = rowlog::RowLog::default();
        log.put(TableId::Endpoints, &[0xff, 0xfe], b"x");
        let err = store.replay_records([log.into_bytes().as_slice()]);
        assert!(matches!(err, Err(StoreError::Corrupt(_))), "{err:?}");
    }

    #[test]
    fn a_file_from_before_the_version_row_is_version_1_and_migrated() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let txn = store.db.begin_write().unwrap();
        txn.delete_table(META).unwrap();
        txn.commit().unwrap();
        assert_eq!(store.format_version().unwrap(), None);
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.format_version().unwrap(), Some(FORMAT_VERSION));
        assert_eq!(store.applied().unwrap(), 0, "nothing of a log applied yet");
    }
}
