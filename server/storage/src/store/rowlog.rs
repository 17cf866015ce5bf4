//! A round's row changes, as the write-ahead log records them.
//!
//! Every change [`super::Tables`] makes is also written here, in order: a put of a key to
//! a value, or the removal of a key, in one of the tables. Replaying a record performs the
//! same puts and removals. These are blind writes (none reads what it overwrites), so the
//! value of every key a record touches after a replay is the one its last change gave it,
//! whatever the table held before: replaying a record a second time changes nothing, and
//! recovery can replay from any checkpoint at or before the record without harm.
//!
//! Encoding: a version byte ([`RECORD_VERSION`]), then per change one byte (table id << 1,
//! low bit set for a put), the key's length (varint) and bytes, and for a put the value's
//! length (varint) and bytes.

use prost::encoding::{decode_varint, encode_varint};

use super::StoreError;

/// The first byte of every record; another value is refused rather than misread.
pub(crate) const RECORD_VERSION: u8 = 1;

/// The tables a change can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TableId {
    Messages = 1,
    Schedule = 2,
    History = 3,
    Done = 4,
    Dead = 5,
    Idempotency = 6,
    /// Endpoints, sources and subscriptions by name (formats 1 to 9): format 10 keeps
    /// them in [`TableId::Catalog`], and writes no change naming these three. A log written
    /// before the upgrade may still hold such changes; they are performed into the catalog
    /// as the `default` tenant's.
    Endpoints = 7,
    Attempts = 8,
    Sources = 9,
    /// A completed message's pointer to its record in the log (format 6): put by the apply
    /// stage when the message's `messages` row goes, removed by the engine's sweep.
    Retained = 10,
    /// A log segment's live messages and bytes (format 6): derived by the apply stage,
    /// never named by a log record.
    Segments = 11,
    /// Subscriptions of endpoints and queues to event types (format 7).
    Subscriptions = 12,
    /// FIFO lanes' sequence counters and blocks (format 8).
    Lanes = 13,
    /// Every object of every tenant (format 10): `keys::catalog_key` -> its record.
    Catalog = 14,
    /// The search index (format 11): derived by the apply stage, never named by a log
    /// record (see `search`).
    Search = 15,
    /// "Erase this message's record" (format 13, a purge): the apply stage removes its
    /// `messages` and `retained` rows and puts each pointer they held into
    /// [`TableId::Scrubs`]. Only ever put (with an empty value), never stored as a table.
    Erased = 16,
    /// Records whose bytes are to be overwritten in their log segment (format 13): derived
    /// by the apply stage from [`TableId::Erased`], removed once the overwrite is synced
    /// (see `scrub`); never named by a log record.
    Scrubs = 17,
}

impl TableId {
    /// The redb table's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Messages => "messages",
            Self::Schedule => "schedule",
            Self::History => "history",
            Self::Done => "done",
            Self::Dead => "dead",
            Self::Idempotency => "idempotency",
            Self::Endpoints => "endpoints",
            Self::Attempts => "attempts",
            Self::Sources => "sources",
            Self::Retained => "retained",
            Self::Segments => "segments",
            Self::Subscriptions => "subscriptions",
            Self::Lanes => "lanes",
            Self::Catalog => "catalog",
            Self::Search => "search",
            Self::Erased => "erased",
            Self::Scrubs => "scrubs",
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Messages,
            2 => Self::Schedule,
            3 => Self::History,
            4 => Self::Done,
            5 => Self::Dead,
            6 => Self::Idempotency,
            7 => Self::Endpoints,
            9 => Self::Sources,
            8 => Self::Attempts,
            10 => Self::Retained,
            12 => Self::Subscriptions,
            13 => Self::Lanes,
            14 => Self::Catalog,
            16 => Self::Erased,
            _ => return None,
        })
    }
}

/// One change read back from a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    Put(TableId, &'a [u8], &'a [u8]),
    Remove(TableId, &'a [u8]),
}

/// The changes of one round, encoded as they are made.
#[derive(Debug, Default)]
pub(crate) struct RowLog {
    buf: Vec<u8>,
}

impl RowLog {
    pub(crate) fn put(&mut self, table: TableId, key: &[u8], value: &[u8]) {
        self.start();
        self.buf.push((table as u8) << 1 | 1);
        encode_varint(key.len() as u64, &mut self.buf);
        self.buf.extend_from_slice(key);
        encode_varint(value.len() as u64, &mut self.buf);
        self.buf.extend_from_slice(value);
    }

    pub(crate) fn remove(&mut self, table: TableId, key: &[u8]) {
        self.start();
        self.buf.push((table as u8) << 1);
        encode_varint(key.len() as u64, &mut self.buf);
        self.buf.extend_from_slice(key);
    }

    fn start(&mut self) {
        if self.buf.is_empty() {
            self.buf.push(RECORD_VERSION);
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The encoded record; empty if nothing changed.
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }
}

fn corrupt(why: &str) -> StoreError {
    StoreError::Corrupt(format!("log record: {why}"))
}

/// Takes a length-prefixed byte string off the front of `rest`.
fn take<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], StoreError> {
    let len = decode_varint(rest).map_err(|_| corrupt("a length"))?;
    let len = usize::try_from(len).map_err(|_| corrupt("a length"))?;
    if rest.len() < len {
        return Err(corrupt("cut short"));
    }
    let (head, tail) = rest.split_at(len);
    *rest = tail;
    Ok(head)
}

/// The changes of an encoded record, in order.
pub fn decode(record: &[u8]) -> Result<Vec<Change<'_>>, StoreError> {
    let mut out = Vec::new();
    let Some((&version, mut rest)) = record.split_first() else {
        return Ok(out);
    };
    if version != RECORD_VERSION {
        return Err(corrupt(&format!("unknown record version {version}")));
    }
    while let Some((&op, tail)) = rest.split_first() {
        rest = tail;
        let table = TableId::from_u8(op >> 1).ok_or_else(|| corrupt("an unknown table"))?;
        let key = take(&mut rest)?;
        if op & 1 == 1 {
            let value = take(&mut rest)?;
            out.push(Change::Put(table, key, value));
        } else {
            out.push(Change::Remove(table, key));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_come_back_in_order_and_damage_is_refused() {
        let mut log = RowLog::default();
        log.put(TableId::Messages, &[1; 16], b"record");
        log.remove(TableId::Schedule, &[2; 16]);
        log.put(TableId::Endpoints, b"ep", b"");
        let bytes = log.into_bytes();
        let changes = decode(&bytes).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Put(TableId::Messages, &[1; 16], b"record"),
                Change::Remove(TableId::Schedule, &[2; 16]),
                Change::Put(TableId::Endpoints, b"ep", b""),
            ]
        );
        assert!(decode(&RowLog::default().into_bytes()).unwrap().is_empty());
        assert!(decode(&bytes[..bytes.len() - 1]).is_err(), "cut short");
        let mut other = bytes.clone();
        other[0] = 9;
        assert!(decode(&other).is_err(), "unknown version");
        let mut other = bytes;
        other[1] = 0x7f << 1;
        assert!(decode(&other).is_err(), "unknown table");
    }
}
