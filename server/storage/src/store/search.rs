//! The search index over retained messages (format 11, issue #53).
//!
//! One table, `search`, derived by the apply stage from the log records it performs (like
//! `segments`): no log record names it, so the engine's rounds write nothing more for it,
//! and a replay of the log rebuilds what it would have held. A row is a key and an empty,
//! sealed value:
//!
//! ```text
//! hour (u32 BE) | tenant (u32 BE) | field (u8) | value (16 bytes) | message id (u128 BE)
//! ```
//!
//! `hour` is the hour of the message's creation (its UUIDv7's time), so one hour's rows of
//! one tenant's value are one range with the newest id last, and the rows of hours past
//! the history's horizon are one range from the start of the table ([`sweep`]). `value`
//! is the first 16 bytes of SHA-256 over the field's number and the searched text (a
//! destination's encoding, an event type, an event id, an idempotency key, or a declared
//! JSON pointer and its value), or for [`Field::State`] and [`Field::Status`] the state's
//! number or the HTTP status, big-endian, zero-padded: equality, never a prefix, is what a
//! search asks of them.
//!
//! What each message gets, when the apply stage performs its record: [`Field::All`] (the
//! tenant's messages by time), its destination, its event type, its publish's event id and
//! its idempotency key (when it has them), and each declared pointer's value the edge
//! found in its payload (`MessageRecord::indexed`). When it is completed (its `done` row)
//! or buried (its `dead` row), its state and its last HTTP status. States change after
//! that (a replayed dead letter lives again), so a row says what a message was, and a
//! search checks every candidate against the message's rows as they are ([`run`]).
//!
//! **Rows are written in bulk.** The apply stage does not put a message's rows into redb
//! in the transaction that performs its record. It adds them to [`Pending`], an in-memory
//! sorted set that searches read beside the table, and writes the set into redb in one
//! sorted pass when it holds [`FLUSH_ROWS`] rows, and always before a checkpoint (in the
//! checkpoint's transaction), so a checkpoint holds every row of what it covers and a
//! restart rebuilds the rest from the log as recovery replays it. A declared key's rows
//! land at random places in the table (its values are hashes): written a transaction at a
//! time, each row cost the copy of a leaf page, and the apply stage, which bounds the
//! write paths, ran at half speed (issue #53, 6). Written in bulk, the rows of one flush
//! share their leaves.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::{Arc, Mutex, RwLock};

use prost::Message;
use redb::{ReadTransaction, ReadableTable, Table, TableDefinition};
use sha2::{Digest, Sha256};

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;

use super::records::{AttemptRecord, DoneRecord, State};
use super::rowlog::TableId;
use super::{StoreError, seal};

pub(crate) const SEARCH: TableDefinition<&[u8], &[u8]> = TableDefinition::new("search");

/// The bytes of a `search` key.
pub const KEY_LEN: usize = 4 + 4 + 1 + 16 + 16;
const ID_AT: usize = KEY_LEN - 16;

/// A row of the index: its key (the value is an empty seal).
pub(crate) type Row = [u8; KEY_LEN];

/// Rows [`Pending`] holds, by default, before the apply stage writes them into redb: at
/// most about 12 MB.
pub(crate) const FLUSH_ROWS: usize = 256 * 1024;

/// The rows not yet in redb.
pub(crate) type Generation = RwLock<BTreeSet<Row>>;

fn read_gen(g: &Generation) -> std::sync::RwLockReadGuard<'_, BTreeSet<Row>> {
    g.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Rows the apply stage made that redb does not hold yet: one generation, which it adds
/// to until a flush writes it. A reader takes it (an `Arc`) *before* it opens its redb
/// snapshot, then reads the two together. A flush drops its generation from here only
/// after the transaction that wrote it committed, so a row added before the reader took
/// the generation is in it, or was committed before the snapshot was opened.
///
/// Only the apply stage adds and flushes (one thread), so a flush's generation does not
/// change while it is written.
#[derive(Debug)]
pub(crate) struct Pending {
    /// The generation being added to, if rows were added since the last flush (at most
    /// one).
    gens: Mutex<Vec<Arc<Generation>>>,
    /// Rows the current generation holds before it is written.
    pub(crate) flush_rows: std::sync::atomic::AtomicUsize,
}

impl Default for Pending {
    fn default() -> Self {
        Self {
            gens: Mutex::default(),
            flush_rows: FLUSH_ROWS.into(),
        }
    }
}

impl Pending {
    fn gens(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Generation>>> {
        self.gens
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What a reader reads beside its snapshot (taken before the snapshot is opened).
    pub(crate) fn view(&self) -> Vec<Arc<Generation>> {
        self.gens().clone()
    }

    /// Adds rows the apply stage made (after the transaction that performed their records
    /// committed, before it says it did); the current generation's size after.
    pub(crate) fn add(&self, rows: Vec<Row>) -> usize {
        let current = {
            let mut gens = self.gens();
            if gens.is_empty() {
                gens.push(Arc::default());
            }
            gens[0].clone()
        };
        let mut set = current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        set.extend(rows);
        set.len()
    }

    /// Takes `rows` out of every generation (a purge: see `scrub`).
    pub(crate) fn remove(&self, rows: &[Row]) {
        for g in self.gens().iter() {
            let mut set = g.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            for row in rows {
                set.remove(row);
            }
        }
    }

    /// Rows of the current generation.
    pub(crate) fn len(&self) -> usize {
        self.gens().first().map_or(0, |g| read_gen(g).len())
    }

    /// Writes the current generation into `table` (in key order); then, once the caller
    /// committed, [`Pending::flushed`] makes a new one current.
    pub(crate) fn write(
        &self,
        table: &mut Table<'_, &'static [u8], &'static [u8]>,
    ) -> Result<Option<Arc<Generation>>, StoreError> {
        let Some(current) = self.gens().first().cloned() else {
            return Ok(None);
        };
        for row in read_gen(&current).iter() {
            let sealed = seal::seal(TableId::Search, row, &[]);
            table.insert(row.as_slice(), sealed.as_slice())?;
        }
        Ok(Some(current))
    }

    /// `written` (what [`Pending::write`] answered) is in redb, committed: it goes, and
    /// the next [`Pending::add`] starts a new generation.
    pub(crate) fn flushed(&self, written: Option<Arc<Generation>>) {
        if let Some(written) = written {
            self.gens().retain(|g| !Arc::ptr_eq(g, &written));
        }
    }
}

/// The rows of message `id` (its record `record`) that carry values of the event itself:
/// its event id, its idempotency key and its declared keys' values. A purge deletes them
/// with the record's bytes (`scrub`); the rows of its destination, type, state and status
/// say nothing of the customer, and go with the history's horizon.
pub(crate) fn event_rows(id: u128, record: &[u8]) -> Vec<Row> {
    let mut index = Indexer {
        table: None,
        rows: Vec::new(),
    };
    if index.message(id, record, None).is_err() {
        return Vec::new();
    }
    let carries = [Field::EventId, Field::IdempotencyKey, Field::Declared].map(|f| f as u8);
    index.rows.retain(|row| carries.contains(&row[8]));
    index.rows
}

/// The index as a reader sees it: redb's table at its snapshot and the rows not yet in it.
pub(crate) struct Rows<T> {
    pub(crate) table: T,
    pub(crate) pending: Vec<Arc<Generation>>,
}

impl<T: ReadableTable<&'static [u8], &'static [u8]>> Rows<T> {
    fn contains(&self, key: &Row) -> Result<bool, StoreError> {
        if self.pending.iter().any(|g| read_gen(g).contains(key)) {
            return Ok(true);
        }
        Ok(self.table.get(key.as_slice())?.is_some())
    }

    /// Ids of the rows from `lo` to `hi` (both included), newest first when `newest`
    /// (else oldest first), of which at most `cap` from the rows not in redb.
    fn ids(&self, lo: &Row, hi: &Row, newest: bool, cap: usize) -> Result<Ids<'_>, StoreError> {
        let mut pending: Vec<u128> = Vec::new();
        for g in &self.pending {
            let set = read_gen(g);
            let range = set.range(*lo..=*hi);
            if newest {
                pending.extend(range.rev().take(cap).filter_map(|k| id_of(k)));
            } else {
                pending.extend(range.take(cap).filter_map(|k| id_of(k)));
            }
        }
        pending.sort_unstable();
        pending.dedup();
        if newest {
            pending.reverse();
        }
        let range = (
            Bound::Included(lo.as_slice()),
            Bound::Included(hi.as_slice()),
        );
        Ok(Ids {
            table: self.table.range::<&[u8]>(range)?,
            newest,
            held: None,
            table_done: false,
            pending: pending.into_iter().peekable(),
        })
    }

    /// The hour of the last row before `end` (a key prefix), of any tenant.
    fn hour_before(&self, end: &[u8]) -> Result<Option<u32>, StoreError> {
        let mut best = match self.table.range::<&[u8]>(..end).map(|mut r| r.next_back()) {
            Ok(Some(row)) => hour_in(row?.0.value()),
            Ok(None) => None,
            Err(e) => return Err(e.into()),
        };
        for g in &self.pending {
            let set = read_gen(g);
            let last = set
                .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(end)))
                .next_back();
            best = best.max(last.and_then(|k| hour_in(k)));
        }
        Ok(best)
    }

    /// The hour of the first row at or after `start` (a key prefix), of any tenant.
    fn hour_from(&self, start: &[u8]) -> Result<Option<u32>, StoreError> {
        let mut best = match self.table.range::<&[u8]>(start..).map(|mut r| r.next()) {
            Ok(Some(row)) => hour_in(row?.0.value()),
            Ok(None) => None,
            Err(e) => return Err(e.into()),
        };
        for g in &self.pending {
            let set = read_gen(g);
            let first = set
                .range::<[u8], _>((Bound::Included(start), Bound::Unbounded))
                .next()
                .and_then(|k| hour_in(k));
            best = match (best, first) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(best)
    }
}

fn hour_in(key: &[u8]) -> Option<u32> {
    key.get(..4)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes)
}

/// A range's ids from redb and from the rows not yet in it, merged in order (an id in
/// both once).
pub(crate) struct Ids<'t> {
    table: redb::Range<'t, &'static [u8], &'static [u8]>,
    newest: bool,
    held: Option<u128>,
    table_done: bool,
    pending: std::iter::Peekable<std::vec::IntoIter<u128>>,
}

impl Ids<'_> {
    fn next_from_table(&mut self) -> Result<Option<u128>, StoreError> {
        loop {
            let row = if self.newest {
                self.table.next_back()
            } else {
                self.table.next()
            };
            let Some(row) = row else {
                return Ok(None);
            };
            if let Some(id) = id_of(row?.0.value()) {
                return Ok(Some(id));
            }
        }
    }
}

impl Iterator for Ids<'_> {
    type Item = Result<u128, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.held.is_none() && !self.table_done {
            match self.next_from_table() {
                Ok(Some(id)) => self.held = Some(id),
                Ok(None) => self.table_done = true,
                Err(e) => return Some(Err(e)),
            }
        }
        let table = self.held;
        let pending = self.pending.peek().copied();
        let id = match (table, pending) {
            (None, None) => return None,
            (Some(a), None) => {
                self.held = None;
                a
            }
            (None, Some(b)) => {
                self.pending.next();
                b
            }
            (Some(a), Some(b)) => {
                if a == b {
                    self.held = None;
                    self.pending.next();
                    a
                } else if (a > b) == self.newest {
                    self.held = None;
                    a
                } else {
                    self.pending.next();
                    b
                }
            }
        };
        Some(Ok(id))
    }
}

/// What a row of the index says of its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Field {
    /// Every message of the tenant (the value is zero).
    All = 0,
    Destination = 1,
    EventType = 2,
    EventId = 3,
    IdempotencyKey = 4,
    /// A declared JSON pointer and its value.
    Declared = 5,
    /// What the message became: delivered or dead.
    State = 6,
    /// Its last attempt's HTTP status, when it was completed or buried.
    Status = 7,
}

/// A message's state, as search names it (numbered as `hookd.v1.MessageState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SearchState {
    Pending = 1,
    Retrying = 2,
    InFlight = 3,
    Dead = 4,
    /// Delivered (or acknowledged), its payload still kept.
    Delivered = 5,
    /// Delivered, its payload past retention: its summary and attempts are what is left.
    Expired = 6,
}

impl SearchState {
    pub(crate) fn of(state: State) -> Self {
        match state {
            State::Pending => Self::Pending,
            State::Retry => Self::Retrying,
            State::Leased => Self::InFlight,
            State::Dead => Self::Dead,
        }
    }
}

/// The hour of a message's creation (UUIDv7: the top 48 bits are the time in ms).
pub fn hour_of(id: u128) -> u32 {
    hour_of_ms((id >> 80) as u64)
}

fn hour_of_ms(ms: u64) -> u32 {
    u32::try_from(ms / 3_600_000).unwrap_or(u32::MAX)
}

/// The value bytes of a searched text.
pub fn hashed(field: Field, text: &[u8]) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update([field as u8]);
    h.update(text);
    let digest = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    out
}

/// The text a declared pointer's value is indexed (and searched) under: the pointer, a
/// zero byte, and the value's text (a string's characters; any other scalar's JSON).
pub fn declared_text(pointer: &str, value: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(pointer.len() + 1 + value.len());
    out.extend_from_slice(pointer.as_bytes());
    out.push(0);
    out.extend_from_slice(value.as_bytes());
    out
}

fn number_value(n: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..4].copy_from_slice(&n.to_be_bytes());
    out
}

/// The value of a `State` row.
pub fn state_value(state: SearchState) -> [u8; 16] {
    number_value(state as u32)
}

/// The value of a `Status` row.
pub fn status_value(status: u32) -> [u8; 16] {
    number_value(status)
}

/// A row's key.
pub fn key(hour: u32, tenant: TenantId, field: Field, value: &[u8; 16], id: u128) -> [u8; KEY_LEN] {
    let mut out = [0u8; KEY_LEN];
    out[..4].copy_from_slice(&hour.to_be_bytes());
    out[4..8].copy_from_slice(&tenant.0.to_be_bytes());
    out[8] = field as u8;
    out[9..25].copy_from_slice(value);
    out[ID_AT..].copy_from_slice(&id.to_be_bytes());
    out
}

fn id_of(key: &[u8]) -> Option<u128> {
    key.get(ID_AT..KEY_LEN)
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .map(u128::from_be_bytes)
}

/// The fields of a `MessageRecord` the index reads: decoding it skips the payload and the
/// headers without copying them.
#[derive(Clone, PartialEq, prost::Message)]
struct Indexed {
    #[prost(string, tag = "1")]
    destination: String,
    #[prost(string, tag = "2")]
    event_type: String,
    #[prost(string, tag = "3")]
    idempotency_key: String,
    #[prost(string, tag = "9")]
    event_id: String,
    #[prost(string, repeated, tag = "10")]
    indexed: Vec<String>,
}

/// The index's side of the apply stage: the rows of each record it performs, gathered,
/// then written into the table in key order ([`Indexer::finish`]) or handed to
/// [`Pending`] by the apply stage.
pub(crate) struct Indexer<'txn> {
    /// Where the rows go at the end: this table, or (`None`) the caller.
    pub(crate) table: Option<Table<'txn, &'static [u8], &'static [u8]>>,
    pub(crate) rows: Vec<Row>,
}

impl Indexer<'_> {
    fn put(&mut self, key: &Row) -> Result<(), StoreError> {
        self.rows.push(*key);
        Ok(())
    }

    /// Writes the gathered rows into the table, when it has one; else answers them.
    pub(crate) fn finish(&mut self) -> Result<Vec<Row>, StoreError> {
        let mut rows = std::mem::take(&mut self.rows);
        let Some(table) = self.table.as_mut() else {
            return Ok(rows);
        };
        rows.sort_unstable();
        rows.dedup();
        for row in &rows {
            let sealed = seal::seal(TableId::Search, row, &[]);
            table.insert(row.as_slice(), sealed.as_slice())?;
        }
        Ok(Vec::new())
    }

    /// The rows of message `id` whose record (an encoded `MessageRecord`) is `record`;
    /// `destination`, a shared record's delivery's own (a fan-out's copy).
    pub(crate) fn message(
        &mut self,
        id: u128,
        record: &[u8],
        destination: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        // A record the index cannot read is left out of it (and said so), never a reason
        // to stop applying the log: the index is derived, the record is what counts.
        let Ok(fields) = Indexed::decode(record) else {
            tracing::warn!(id = %MessageId(id), "a message record the search index cannot read; not indexed");
            return Ok(());
        };
        let destination = match destination {
            Some(d) => std::str::from_utf8(d)
                .map_err(|_| StoreError::Corrupt("a copy's destination".into()))?,
            None => fields.destination.as_str(),
        };
        let Some(tenant) = Destination::tenant_of_key(destination) else {
            return Ok(());
        };
        let hour = hour_of(id);
        self.put(&key(hour, tenant, Field::All, &[0; 16], id))?;
        let texts = [
            (Field::Destination, destination),
            (Field::EventType, fields.event_type.as_str()),
            (Field::EventId, fields.event_id.as_str()),
            (Field::IdempotencyKey, fields.idempotency_key.as_str()),
        ];
        for (field, text) in texts {
            if !text.is_empty() {
                self.put(&key(
                    hour,
                    tenant,
                    field,
                    &hashed(field, text.as_bytes()),
                    id,
                ))?;
            }
        }
        for text in &fields.indexed {
            let value = hashed(Field::Declared, text.as_bytes());
            self.put(&key(hour, tenant, Field::Declared, &value, id))?;
        }
        Ok(())
    }

    /// The rows of a completed message (its `done` row is `record`).
    pub(crate) fn done(&mut self, id: u128, record: &[u8]) -> Result<(), StoreError> {
        let Ok(done) = DoneRecord::decode(record) else {
            tracing::warn!(id = %MessageId(id), "a done record the search index cannot read; not indexed");
            return Ok(());
        };
        let Some(tenant) = Destination::tenant_of_key(&done.destination) else {
            return Ok(());
        };
        let status = last_of(done.history.as_ref()).map_or(0, |a| a.http_status);
        self.outcome(id, tenant, SearchState::Delivered, status)
    }

    /// The rows of a buried message: `key` is its `dead` key, `attempts` the table holding
    /// its last attempt.
    pub(crate) fn dead(
        &mut self,
        key: &[u8],
        attempts: &impl ReadableTable<&'static [u8], &'static [u8]>,
    ) -> Result<(), StoreError> {
        let id = super::dead_key_id(key)?;
        let destination = super::dead_key_destination(key)?;
        let Some(tenant) = Destination::tenant_of_key(&destination) else {
            return Ok(());
        };
        let status = match last_status(attempts, id) {
            Ok(status) => status,
            Err(e @ (StoreError::Corrupt(_) | StoreError::Damaged { .. })) => {
                tracing::warn!(%id, error = %e, "a dead letter's last attempt the search index cannot read");
                0
            }
            Err(e) => return Err(e),
        };
        self.outcome(id.0, tenant, SearchState::Dead, status)
    }

    fn outcome(
        &mut self,
        id: u128,
        tenant: TenantId,
        state: SearchState,
        status: u32,
    ) -> Result<(), StoreError> {
        let hour = hour_of(id);
        self.put(&key(hour, tenant, Field::State, &state_value(state), id))?;
        if status > 0 {
            self.put(&key(hour, tenant, Field::Status, &status_value(status), id))?;
        }
        Ok(())
    }
}

/// The HTTP status of a message's last finished attempt in `attempts` (0: none).
fn last_status(
    attempts: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: MessageId,
) -> Result<u32, StoreError> {
    Ok(last_attempt(attempts, id)?.map_or(0, |a| a.http_status))
}

/// A message's last finished attempt in `attempts` (a replay's mark, number 0, is not one).
fn last_attempt(
    attempts: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: MessageId,
) -> Result<Option<AttemptRecord>, StoreError> {
    let (first, last) = super::attempt_range(id);
    for row in attempts.range(first.as_slice()..=last.as_slice())?.rev() {
        let (k, v) = row?;
        let attempt = AttemptRecord::decode(seal::open(TableId::Attempts, k.value(), v.value())?)?;
        if attempt.number > 0 {
            return Ok(Some(attempt));
        }
    }
    Ok(None)
}

/// A completed message's last finished attempt in its history (a replay's mark, number 0,
/// is not one).
fn last_of(history: Option<&super::HistoryRecord>) -> Option<&AttemptRecord> {
    history.and_then(|h| h.attempts.iter().rev().find(|a| a.number > 0))
}

/// Of a hit's last attempt, the error (its response's excerpt) a hit carries at most.
const HIT_ERROR_BYTES: usize = 256;

fn hit_error(attempt: Option<&AttemptRecord>) -> String {
    let mut error = attempt.map(|a| a.error.clone()).unwrap_or_default();
    super::bound_text(&mut error, HIT_ERROR_BYTES);
    error
}

/// Deletes up to `limit` rows of messages created in hours before `before_ms`'s; how many.
/// Rows past the horizon belong to messages whose history is over; a message still live
/// then (rare: older than every retention) is no longer found by a search, never lost.
pub(crate) fn sweep(
    table: &mut Table<'_, &'static [u8], &'static [u8]>,
    before_ms: u64,
    limit: usize,
) -> Result<usize, StoreError> {
    let end = hour_of_ms(before_ms).to_be_bytes();
    let mut keys = Vec::new();
    for row in table.range::<&[u8]>(..end.as_slice())? {
        let (k, _) = row?;
        keys.push(k.value().to_vec());
        if keys.len() >= limit {
            break;
        }
    }
    for k in &keys {
        table.remove(k.as_slice())?;
    }
    Ok(keys.len())
}

/// What a search asks for. Every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pub tenant: TenantId,
    /// A destination's encoding.
    pub destination: Option<String>,
    pub event_type: Option<String>,
    /// A publish's event id, or a message's own id.
    pub event_id: Option<String>,
    pub idempotency_key: Option<String>,
    /// Declared pointers and the values (as text) they must hold.
    pub declared: Vec<(String, String)>,
    /// Any of these states (empty: any state).
    pub states: Vec<SearchState>,
    /// The last attempt's HTTP status.
    pub status: Option<u32>,
    /// Created at or after, and before, these times (ms).
    pub after_ms: u64,
    pub before_ms: Option<u64>,
}

/// One message a search found, as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub id: MessageId,
    /// Its destination's encoding.
    pub destination: String,
    pub event_type: String,
    pub event_id: String,
    pub idempotency_key: String,
    pub state: SearchState,
    pub attempts: u32,
    /// Its last finished attempt's HTTP status (0: none, or no answer).
    pub last_status: u32,
    pub created_ms: u64,
    /// When it was delivered (0: it was not).
    pub completed_ms: u64,
    pub payload_bytes: u64,
    /// Its last finished attempt's error or response excerpt (at most 256 bytes), and
    /// how long that attempt took.
    pub last_error: String,
    pub last_latency_us: u64,
    /// Its FIFO lane at an ordered destination: the ordering key and its number there
    /// (a delivered message's since disk format 11's summaries kept them).
    pub lane: Option<(String, u64)>,
}

/// A page of a search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Page {
    pub hits: Vec<Hit>,
    /// Where the next page starts (ids below this one), when there may be more.
    pub next: Option<MessageId>,
    /// Index rows looked at.
    pub scanned: u64,
}

/// What a message is now: its state, attempts and last status, and its metadata.
pub(crate) struct Now {
    pub(crate) state: SearchState,
    pub(crate) hit: Hit,
}

/// How a search reads the store: the message as it is now, if it is still kept.
pub(crate) trait Lookup {
    fn now(&self, id: MessageId) -> Result<Option<Now>, StoreError>;
}

/// Checks that a candidate's rows hold each of `checks` in the index.
fn holds(
    rows: &Rows<impl ReadableTable<&'static [u8], &'static [u8]>>,
    tenant: TenantId,
    id: u128,
    checks: &[(Field, [u8; 16])],
) -> Result<bool, StoreError> {
    let hour = hour_of(id);
    for (field, value) in checks {
        if !rows.contains(&key(hour, tenant, *field, value, id))? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// How a query is run: its conditions in the index, the one that drives (the most
/// selective), the rest, and the ids it looks between.
struct Plan {
    conditions: Vec<(Field, [u8; 16])>,
    driver: (Field, [u8; 16]),
    rest: Vec<(Field, [u8; 16])>,
    /// The event id asked for, when it is a message's own id.
    own_id: Option<MessageId>,
    low: u128,
    high: u128,
}

impl Plan {
    fn of(query: &Query) -> Self {
        let mut conditions: Vec<(Field, [u8; 16])> = Vec::new();
        let text = |field: Field, t: &Option<String>| {
            t.as_ref().map(|t| (field, hashed(field, t.as_bytes())))
        };
        conditions.extend(text(Field::EventId, &query.event_id));
        conditions.extend(text(Field::IdempotencyKey, &query.idempotency_key));
        for (pointer, value) in &query.declared {
            let t = declared_text(pointer, value);
            conditions.push((Field::Declared, hashed(Field::Declared, &t)));
        }
        if let Some(status) = query.status {
            conditions.push((Field::Status, status_value(status)));
        }
        // One outcome state is in the index; live states and a choice of several are not.
        // An expired message was delivered: its row says so.
        match query.states.as_slice() {
            [state @ (SearchState::Dead | SearchState::Delivered)] => {
                conditions.push((Field::State, state_value(*state)));
            }
            [SearchState::Expired]
            | [SearchState::Delivered, SearchState::Expired]
            | [SearchState::Expired, SearchState::Delivered] => {
                conditions.push((Field::State, state_value(SearchState::Delivered)));
            }
            _ => {}
        }
        conditions.extend(text(Field::EventType, &query.event_type));
        conditions.extend(text(Field::Destination, &query.destination));
        let (driver, rest) = match conditions.split_first() {
            Some((first, rest)) => (*first, rest.to_vec()),
            None => ((Field::All, [0; 16]), Vec::new()),
        };
        // A message's own id is its event id too (an Enqueue to one destination).
        let own_id = query
            .event_id
            .as_deref()
            .and_then(|t| t.parse::<MessageId>().ok());
        // Every message that carries an event id hookd made (a publish's, or a replay
        // copy's original) was made in that id's millisecond or after it: the walk starts
        // there.
        let low = (u128::from(query.after_ms) << 80).max(own_id.map_or(0, |own| own.0 >> 80 << 80));
        let high = match query.before_ms {
            Some(ms) => (u128::from(ms) << 80).saturating_sub(1),
            None => u128::MAX,
        };
        Self {
            conditions,
            driver,
            rest,
            own_id,
            low,
            high,
        }
    }
}

/// A message's own id has no event id row: it is checked against every condition but the
/// event id, and in the index only for what the message as it is now cannot say (its
/// state, last status and destination are checked there: a message stored before the
/// index, found by its id, has no rows).
fn own_rest(conditions: &[(Field, [u8; 16])]) -> Vec<(Field, [u8; 16])> {
    conditions
        .iter()
        .copied()
        .filter(|(f, _)| {
            !matches!(
                f,
                Field::EventId | Field::State | Field::Status | Field::Destination
            )
        })
        .collect()
}

/// Candidate `id` as it is now, if it holds `rest` in the index and the query's state,
/// status, destination and tenant on its rows as they are.
fn matching(
    rows: &Rows<impl ReadableTable<&'static [u8], &'static [u8]>>,
    lookup: &impl Lookup,
    query: &Query,
    id: u128,
    rest: &[(Field, [u8; 16])],
) -> Result<Option<Hit>, StoreError> {
    if !holds(rows, query.tenant, id, rest)? {
        return Ok(None);
    }
    let Some(now) = lookup.now(MessageId(id))? else {
        return Ok(None);
    };
    if !query.states.is_empty() && !query.states.contains(&now.state) {
        return Ok(None);
    }
    if query.status.is_some_and(|s| s != now.hit.last_status) {
        return Ok(None);
    }
    if query
        .destination
        .as_ref()
        .is_some_and(|d| *d != now.hit.destination)
        || Destination::tenant_of_key(&now.hit.destination) != Some(query.tenant)
    {
        return Ok(None);
    }
    Ok(Some(now.hit))
}

/// How many messages a query matches in all: counted, or estimated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate {
    pub count: u64,
    /// Every candidate was counted and checked: `count` is the number.
    pub exact: bool,
    /// Index rows counted, and candidates checked.
    pub counted: u64,
    pub checked: u64,
}

/// Index rows of the driving condition an estimate counts at most, in all (spread over
/// the hours that have rows)...
pub const ESTIMATE_ROWS: u64 = 1_000_000;
/// ...and candidates it checks at most, in all (each is a few reads), at least this many
/// an hour.
pub const ESTIMATE_CHECKS: u64 = 1_000;
const ESTIMATE_CHECKS_AN_HOUR: u64 = 8;

/// Estimates how many messages `query` matches in its whole window, counting at most
/// `budget.0` index rows and checking at most `budget.1` candidates (by default
/// [`ESTIMATE_ROWS`] and [`ESTIMATE_CHECKS`]).
///
/// Each hour that has rows in the window gets an equal share of both, split among
/// [`ESTIMATE_SLICES`] slices of time between its oldest and newest row. The driving
/// condition's rows in a slice are counted, newest first; when the slice's share runs out
/// before its start, its count is extrapolated by time (the rows counted, over the time
/// they span, carried to the slice's start): slices follow a rate that changes over the
/// hour. A reservoir of the slice's counted rows is checked as a search checks a
/// candidate, and the slice's count is scaled by the share that match. Exact when every
/// slice was counted to its start and every counted row was checked.
pub(crate) fn estimate(
    txn: &ReadTransaction,
    pending: Vec<Arc<Generation>>,
    lookup: &impl Lookup,
    query: &Query,
    budget: (u64, u64),
) -> Result<Estimate, StoreError> {
    let (row_budget, check_budget) = budget;
    let rows = match txn.open_table(SEARCH) {
        Ok(table) => Rows { table, pending },
        Err(redb::TableError::TableDoesNotExist(_)) => {
            return Ok(Estimate {
                exact: true,
                ..Estimate::default()
            });
        }
        Err(e) => return Err(e.into()),
    };
    let plan = Plan::of(query);
    let mut out = Estimate {
        exact: true,
        ..Estimate::default()
    };
    if plan.high < plan.low {
        return Ok(out);
    }
    // The hours with rows in the window, newest first: a seek each.
    let first_hour = hour_of(plan.low);
    let mut hours = Vec::new();
    let mut hour = rows.hour_before(&hour_of(plan.high).saturating_add(1).to_be_bytes())?;
    while let Some(h) = hour.filter(|h| *h >= first_hour) {
        hours.push(h);
        hour = rows.hour_before(&h.to_be_bytes())?;
    }
    let n = hours.len().max(1) as u64;
    let row_share = (row_budget / n).max(1);
    let check_share =
        usize::try_from((check_budget / n).max(ESTIMATE_CHECKS_AN_HOUR)).unwrap_or(usize::MAX);
    let (field, value) = plan.driver;
    let mut total = 0f64;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for h in hours {
        let hour_lo = u128::from(u64::from(h) * 3_600_000) << 80;
        let hour_hi = ((u128::from(u64::from(h) + 1) * 3_600_000) << 80).saturating_sub(1);
        let (lo_id, hi_id) = (plan.low.max(hour_lo), plan.high.min(hour_hi));
        let first = |newest: bool| -> Result<Option<u128>, StoreError> {
            let lo = key(h, query.tenant, field, &value, lo_id);
            let hi = key(h, query.tenant, field, &value, hi_id);
            rows.ids(&lo, &hi, newest, 1)?.next().transpose()
        };
        let (Some(oldest), Some(newest)) = (first(false)?, first(true)?) else {
            continue;
        };
        // The hour's rows, in slices of time between its oldest and newest: a rate that
        // changes over the hour is followed slice by slice.
        let (from_ms, to_ms) = ((oldest >> 80) as u64, (newest >> 80) as u64 + 1);
        let slices = ESTIMATE_SLICES.min(to_ms - from_ms).max(1);
        let width = (to_ms - from_ms).div_ceil(slices);
        for slice in 0..slices {
            let slice_from = from_ms + slice * width;
            let slice_to = (slice_from + width).min(to_ms);
            if slice_from >= slice_to {
                continue;
            }
            let s_lo = lo_id.max(u128::from(slice_from) << 80);
            let s_hi = hi_id.min((u128::from(slice_to) << 80).saturating_sub(1));
            let probe = Probe::count(
                &rows,
                &key(h, query.tenant, field, &value, s_lo),
                &key(h, query.tenant, field, &value, s_hi),
                plan.own_id,
                (row_share / slices).max(1),
                (check_share / slices as usize).max(1),
                &mut rng,
            )?;
            out.counted += probe.counted;
            if probe.counted == 0 {
                continue;
            }
            // Cut short: carried, at the density of the rows counted (over the time they
            // span), down to the slice's start.
            let rows_in_slice = match probe.cut {
                Some((top, last)) => {
                    out.exact = false;
                    let ms = |id: u128| (id >> 80) as f64;
                    let spanned = (ms(top) - ms(last)).max(1.0);
                    let left = (ms(last) - slice_from as f64).max(0.0);
                    // n rows span n - 1 gaps.
                    probe.counted as f64 + (probe.counted - 1).max(1) as f64 * left / spanned
                }
                None => probe.counted as f64,
            };
            if (probe.sample.len() as u64) < probe.counted {
                out.exact = false;
            }
            let mut matched = 0u64;
            for &id in &probe.sample {
                out.checked += 1;
                if matching(&rows, lookup, query, id, &plan.rest)?.is_some() {
                    matched += 1;
                }
            }
            total += rows_in_slice * matched as f64 / probe.sample.len().max(1) as f64;
        }
    }
    // A message's own id, looked at once.
    if let Some(own) = plan
        .own_id
        .filter(|id| (plan.low..=plan.high).contains(&id.0))
    {
        out.checked += 1;
        if matching(&rows, lookup, query, own.0, &own_rest(&plan.conditions))?.is_some() {
            total += 1.0;
        }
    }
    out.count = total.round() as u64;
    Ok(out)
}

/// Slices of time an hour's rows are counted in, each with its share of the budget.
const ESTIMATE_SLICES: u64 = 16;

/// One slice's count, newest first, up to a cap, with a reservoir sample of what it
/// counted.
struct Probe {
    counted: u64,
    /// Cut at the cap: the first (newest) and last ids counted.
    cut: Option<(u128, u128)>,
    sample: Vec<u128>,
}

impl Probe {
    fn count(
        rows: &Rows<impl ReadableTable<&'static [u8], &'static [u8]>>,
        lo: &Row,
        hi: &Row,
        skip: Option<MessageId>,
        cap: u64,
        sample: usize,
        rng: &mut u64,
    ) -> Result<Self, StoreError> {
        let mut out = Self {
            counted: 0,
            cut: None,
            sample: Vec::with_capacity(sample),
        };
        let (mut top, mut last) = (None, 0u128);
        for id in rows.ids(lo, hi, true, usize::try_from(cap).unwrap_or(usize::MAX))? {
            let id = id?;
            if skip.is_some_and(|own| own.0 == id) {
                continue;
            }
            if out.counted >= cap {
                out.cut = top.map(|t| (t, last));
                break;
            }
            out.counted += 1;
            top = top.or(Some(id));
            last = id;
            if out.sample.len() < sample {
                out.sample.push(id);
            } else {
                // Reservoir sampling (xorshift: the same store gives the same estimate).
                *rng ^= *rng << 13;
                *rng ^= *rng >> 7;
                *rng ^= *rng << 17;
                let at = *rng % out.counted;
                if let Some(slot) = usize::try_from(at).ok().and_then(|i| out.sample.get_mut(i)) {
                    *slot = id;
                }
            }
        }
        Ok(out)
    }
}

/// Runs `query` from `cursor` (exclusive; `None`: the newest), newest first: at most
/// `limit` hits, looking at no more than `budget` index rows. The driving condition is the
/// most selective one the query has; every other is checked per candidate, in the index
/// for what it keeps, and on the message as it is now for state and status.
pub(crate) fn run(
    txn: &ReadTransaction,
    pending: Vec<Arc<Generation>>,
    lookup: &impl Lookup,
    query: &Query,
    cursor: Option<MessageId>,
    limit: usize,
    budget: u64,
) -> Result<Page, StoreError> {
    let rows = match txn.open_table(SEARCH) {
        Ok(table) => Rows { table, pending },
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Page::default()),
        Err(e) => return Err(e.into()),
    };
    let Plan {
        conditions,
        driver,
        rest,
        own_id,
        low,
        high,
    } = Plan::of(query);
    let mut high = high;
    if let Some(cursor) = cursor {
        high = high.min(cursor.0.saturating_sub(1));
    }
    let mut page = Page::default();
    if high < low {
        return Ok(page);
    }
    let keep =
        |id: u128, page: &mut Page, rest: &[(Field, [u8; 16])]| -> Result<bool, StoreError> {
            match matching(&rows, lookup, query, id, rest)? {
                Some(hit) => {
                    page.hits.push(hit);
                    Ok(true)
                }
                None => Ok(false),
            }
        };
    // A message's own id has no event id row: it is looked at in its place among the
    // driver's ids (newest first), checked against everything but the event id.
    let own_rest = own_rest(&conditions);
    let mut own = own_id.filter(|id| (low..=high).contains(&id.0));
    let (field, value) = driver;
    let first_hour = hour_of(low);
    // From the newest hour that has rows (of any tenant) at or below `high`'s, then from
    // each such hour to the one before it: a seek per hour with rows, none per empty one.
    let mut hour = rows.hour_before(&hour_of(high).saturating_add(1).to_be_bytes())?;
    loop {
        let Some(h) = hour.filter(|h| *h >= first_hour) else {
            // No more rows: the own id, if it is older than all of them.
            if let Some(o) = own {
                page.scanned += 1;
                keep(o.0, &mut page, &own_rest)?;
            }
            return Ok(page);
        };
        let lo = key(h, query.tenant, field, &value, low);
        let hi = key(h, query.tenant, field, &value, high);
        let cap = usize::try_from(budget).unwrap_or(usize::MAX);
        for id in rows.ids(&lo, &hi, true, cap)? {
            let id = id?;
            if own_id.is_some_and(|own| own.0 == id) {
                continue;
            }
            if let Some(o) = own.filter(|o| o.0 > id) {
                own = None;
                page.scanned += 1;
                keep(o.0, &mut page, &own_rest)?;
                if page.hits.len() >= limit || page.scanned >= budget {
                    page.next = Some(o);
                    return Ok(page);
                }
            }
            page.scanned += 1;
            keep(id, &mut page, &rest)?;
            if page.hits.len() >= limit || page.scanned >= budget {
                page.next = Some(MessageId(id));
                return Ok(page);
            }
        }
        hour = rows.hour_before(&h.to_be_bytes())?;
    }
}

/// Ids of `tenant`'s messages to the destination encoded `destination` made after
/// `after` (exclusive), oldest first: at most `limit`, looking at no more than `budget`
/// index rows; and whether there may be more after the last.
pub(crate) fn after_in(
    rows: &Rows<impl ReadableTable<&'static [u8], &'static [u8]>>,
    tenant: TenantId,
    destination: &str,
    after: u128,
    limit: usize,
    budget: u64,
) -> Result<(Vec<MessageId>, bool), StoreError> {
    let value = hashed(Field::Destination, destination.as_bytes());
    let mut out = Vec::new();
    let mut scanned = 0u64;
    let mut hour = Some(hour_of(after));
    while let Some(h) = hour {
        let lo = key(
            h,
            tenant,
            Field::Destination,
            &value,
            after.saturating_add(1),
        );
        let hi = key(h, tenant, Field::Destination, &value, u128::MAX);
        let cap = usize::try_from(budget).unwrap_or(usize::MAX);
        for id in rows.ids(&lo, &hi, false, cap)? {
            let id = id?;
            if id <= after {
                continue;
            }
            scanned += 1;
            out.push(MessageId(id));
            if out.len() >= limit || scanned >= budget {
                return Ok((out, true));
            }
        }
        // The next hour that has rows (of any tenant).
        hour = match h.checked_add(1) {
            Some(next) => rows.hour_from(&next.to_be_bytes())?,
            None => None,
        };
    }
    Ok((out, false))
}

/// What the store holds of message `id` now, from its rows in `txn`; `record` resolves a
/// live or dead message's `messages` value to its record's metadata, and `kept` says
/// whether the log still keeps a completed message's record (else it is expired).
#[allow(clippy::too_many_arguments)]
pub(crate) fn now_of(
    schedule: &impl ReadableTable<u128, &'static [u8]>,
    done: &impl ReadableTable<u128, &'static [u8]>,
    messages: &impl ReadableTable<u128, &'static [u8]>,
    attempts: &impl ReadableTable<&'static [u8], &'static [u8]>,
    dead: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: MessageId,
    record: impl Fn(&[u8]) -> Result<Option<super::MessageRecord>, StoreError>,
    kept: impl Fn(MessageId) -> Result<bool, StoreError>,
) -> Result<Option<Now>, StoreError> {
    let key = id.0.to_be_bytes();
    let created_ms = (id.0 >> 80) as u64;
    if let Some(v) = done.get(id.0)? {
        let d = DoneRecord::decode(seal::open(TableId::Done, &key, v.value())?)?;
        let last = last_of(d.history.as_ref());
        let last_status = last.map_or(0, |a| a.http_status);
        let last_error = hit_error(last);
        let last_latency_us = last.map_or(0, |a| a.latency_us);
        let state = if kept(id)? {
            SearchState::Delivered
        } else {
            SearchState::Expired
        };
        return Ok(Some(Now {
            state,
            hit: Hit {
                id,
                destination: d.destination,
                event_type: d.event_type,
                event_id: d.event_id,
                idempotency_key: d.idempotency_key,
                state,
                attempts: d.attempts,
                last_status,
                created_ms: if d.created_ms > 0 {
                    d.created_ms
                } else {
                    created_ms
                },
                completed_ms: d.completed_ms,
                payload_bytes: d.payload_size,
                last_error,
                last_latency_us,
                lane: d.ordered.then_some((d.ordering_key, d.sequence)),
            },
        }));
    }
    let Some(v) = messages.get(id.0)? else {
        return Ok(None);
    };
    let Some(r) = record(seal::open(TableId::Messages, &key, v.value())?)? else {
        return Ok(None);
    };
    let entry = super::entry_of(schedule, dead, id, &r.destination)?;
    let Some(entry) = entry else {
        return Ok(None);
    };
    let state = SearchState::of(entry.state);
    let last = last_attempt(attempts, id)?;
    Ok(Some(Now {
        state,
        hit: Hit {
            id,
            destination: r.destination,
            event_type: r.event_type,
            event_id: r.event_id,
            idempotency_key: r.idempotency_key,
            state,
            attempts: entry.attempts,
            last_status: last.as_ref().map_or(0, |a| a.http_status),
            created_ms: r.created_ms,
            completed_ms: 0,
            payload_bytes: r.payload.len() as u64,
            last_error: hit_error(last.as_ref()),
            last_latency_us: last.as_ref().map_or(0, |a| a.latency_us),
            lane: entry.lane.map(|l| (l.key, l.seq)),
        },
    }))
}
