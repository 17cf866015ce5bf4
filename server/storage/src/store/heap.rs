//! The write-ahead log as the message heap (format 6).
//!
//! A message's record (payload, headers, metadata: [`super::MessageRecord`]) is written
//! once, in the log record of the round that enqueued it: the frame the fdatasync makes
//! durable before anyone is told. redb's `messages` row then holds a [`Pointer`] to those
//! bytes (segment, offset, length, CRC-32C), not a second copy; a record is never rewritten
//! into redb. Rows written by format 5 and before hold the record itself ("inline"), and
//! are read as they are: a pointer starts with a zero byte, which no encoded record does
//! (protobuf field number 0 is invalid), so the two never mix up.
//!
//! The apply stage turns each `messages` put of a log record into a pointer into the
//! segment that holds the record, and keeps per segment the number and bytes of live
//! messages pointing into it, and the newest message's time (`segments`, a
//! [`SegmentRow`] per segment). When a message completes, its pointer moves to
//! `retained`: its payload stays readable while its segment is kept. `pipeline::reclaim`
//! decides which segments go (none with a live message in it; then by retention) and which
//! are compacted (their few live records copied forward by the engine, so their pointers
//! move and the segment empties).
//!
//! Every change here is made by replaying a log record, and each one compares with what
//! the row holds (a put of the pointer a row already has changes nothing; a removal of an
//! absent row changes nothing), so a record replayed twice leaves the counts as once.

use std::sync::{Arc, OnceLock};

use super::StoreError;
use crate::wal::{LogDir, Lsn, segment_name};

/// The first byte of a pointer (never the first byte of an encoded record).
const POINTER_TAG: u8 = 0;
/// The pointer encoding's version, after the tag.
const POINTER_VERSION: u8 = 1;
/// A shared pointer (format 7): a pointer, then the destination of this delivery, which
/// replaces the one the record holds (a fan-out's deliveries share one record).
const SHARED_VERSION: u8 = 2;
/// A copy, in a log record only (never in redb): "this message's record is that of
/// message X, put earlier in this log record, for destination D" (see [`copy_of`]).
const COPY_VERSION: u8 = 3;
/// Encoded size of a [`Pointer`].
pub(crate) const POINTER_BYTES: usize = 2 + 8 + 8 + 4 + 4;

/// Where a message's record lies in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pointer {
    /// The segment's first position (its file name).
    pub segment: Lsn,
    /// The record's first byte, from the segment's start.
    pub offset: u64,
    pub len: u32,
    /// CRC-32C of the record's bytes, checked on every read.
    pub crc: u32,
}

impl Pointer {
    /// The pointer to `value`, a slice of the log record that starts (its frame's
    /// payload) at `record_offset` in segment `segment`.
    pub(crate) fn to(segment: Lsn, record_offset: u64, record: &[u8], value: &[u8]) -> Self {
        let within = (value.as_ptr() as usize).saturating_sub(record.as_ptr() as usize);
        Self {
            segment,
            offset: record_offset + within as u64,
            len: u32::try_from(value.len()).unwrap_or(u32::MAX),
            crc: crc32c::crc32c(value),
        }
    }

    pub(crate) fn encode(&self) -> [u8; POINTER_BYTES] {
        let mut out = [0u8; POINTER_BYTES];
        out[0] = POINTER_TAG;
        out[1] = POINTER_VERSION;
        out[2..10].copy_from_slice(&self.segment.to_be_bytes());
        out[10..18].copy_from_slice(&self.offset.to_be_bytes());
        out[18..22].copy_from_slice(&self.len.to_be_bytes());
        out[22..26].copy_from_slice(&self.crc.to_be_bytes());
        out
    }

    /// The pointer of a fan-out's delivery: this pointer, with `destination` (its
    /// `Destination::encode()`) in place of the record's.
    pub(crate) fn encode_shared(&self, destination: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(POINTER_BYTES + destination.len());
        out.extend_from_slice(&self.encode());
        out[1] = SHARED_VERSION;
        out.extend_from_slice(destination);
        out
    }

    fn decode(v: &[u8]) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Corrupt(format!("a payload pointer of {} bytes", v.len()));
        if v.len() != POINTER_BYTES || v[1] != POINTER_VERSION {
            return Err(corrupt());
        }
        Ok(Self {
            segment: be(v, 2).map(u64::from_be_bytes).ok_or_else(corrupt)?,
            offset: be(v, 10).map(u64::from_be_bytes).ok_or_else(corrupt)?,
            len: be(v, 18).map(u32::from_be_bytes).ok_or_else(corrupt)?,
            crc: be(v, 22).map(u32::from_be_bytes).ok_or_else(corrupt)?,
        })
    }
}

/// The `N` bytes of `v` from `at`, if it has them.
fn be<const N: usize>(v: &[u8], at: usize) -> Option<[u8; N]> {
    v.get(at..at + N).and_then(|b| b.try_into().ok())
}

/// A `messages` value: the record itself (format 5 and before), a pointer to it, or a
/// pointer to a record shared by a fan-out's deliveries with this delivery's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored<'a> {
    Inline(&'a [u8]),
    At(Pointer),
    Shared(Pointer, &'a [u8]),
}

impl<'a> Stored<'a> {
    pub(crate) fn of(value: &'a [u8]) -> Result<Self, StoreError> {
        match (value.first(), value.get(1)) {
            (Some(&POINTER_TAG), Some(&SHARED_VERSION)) if value.len() >= POINTER_BYTES => {
                let (pointer, destination) = value.split_at(POINTER_BYTES);
                let mut plain = [0u8; POINTER_BYTES];
                plain.copy_from_slice(pointer);
                plain[1] = POINTER_VERSION;
                Ok(Self::Shared(Pointer::decode(&plain)?, destination))
            }
            (Some(&POINTER_TAG), _) => Ok(Self::At(Pointer::decode(value)?)),
            _ => Ok(Self::Inline(value)),
        }
    }

    /// Where the record lies in the log, if it is there.
    pub(crate) fn pointer(&self) -> Option<Pointer> {
        match self {
            Self::Inline(_) => None,
            Self::At(p) | Self::Shared(p, _) => Some(*p),
        }
    }

    /// The record's size (what the byte watermarks count).
    pub(crate) fn len(&self) -> u32 {
        match self {
            Self::Inline(v) => u32::try_from(v.len()).unwrap_or(u32::MAX),
            Self::At(p) | Self::Shared(p, _) => p.len,
        }
    }
}

/// `record` (an encoded `MessageRecord`) for `destination` instead of its own: protobuf
/// keeps the last value of a field that occurs twice, so field 1 (`destination`) appended
/// replaces the record's without decoding it.
pub(crate) fn with_destination(record: Vec<u8>, destination: &[u8]) -> Vec<u8> {
    with_field(record, 1, destination)
}

/// `record` with string field `tag` set to `value` (appended: the last occurrence wins).
pub(crate) fn with_field(mut record: Vec<u8>, tag: u32, value: &[u8]) -> Vec<u8> {
    use prost::encoding::{WireType, encode_key, encode_varint};
    encode_key(tag, WireType::LengthDelimited, &mut record);
    encode_varint(value.len() as u64, &mut record);
    record.extend_from_slice(value);
    record
}

/// A log record's "this message's record is that of `source` (a message put earlier in
/// the same log record), for `destination`": how a fan-out writes its payload once.
pub(crate) fn copy_of(source: u128, destination: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 16 + destination.len());
    out.push(POINTER_TAG);
    out.push(COPY_VERSION);
    out.extend_from_slice(&source.to_be_bytes());
    out.extend_from_slice(destination);
    out
}

/// The source and destination of a [`copy_of`] value (`None`: the value is not a copy).
pub(crate) fn parse_copy(value: &[u8]) -> Option<(u128, &[u8])> {
    match value {
        [POINTER_TAG, COPY_VERSION, rest @ ..] if rest.len() >= 16 => {
            let (id, destination) = rest.split_at(16);
            Some((u128::from_be_bytes(id.try_into().ok()?), destination))
        }
        _ => None,
    }
}

/// Reads records out of the log's segments; cheap to clone. Attached to the log's
/// directory when the store opens its log.
#[derive(Debug, Clone, Default)]
pub struct Heap {
    dir: Arc<OnceLock<Arc<dyn LogDir>>>,
}

impl Heap {
    pub(crate) fn attach(&self, dir: Arc<dyn LogDir>) {
        // Set once: a store opens its log once.
        let _ = self.dir.set(dir);
    }

    /// The log's directory, once attached.
    pub(crate) fn dir(&self) -> Option<&Arc<dyn LogDir>> {
        self.dir.get()
    }

    /// The record `p` points to; `None` once its segment was deleted (retention let it
    /// go). Its checksum is checked: bytes that differ from what was logged are an error.
    pub fn read(&self, p: &Pointer) -> Result<Option<Vec<u8>>, StoreError> {
        let dir = self.dir.get().ok_or_else(|| {
            StoreError::Corrupt("a payload read before the log was opened".into())
        })?;
        let name = segment_name(p.segment);
        let bytes = match dir.read_at(&name, p.offset, p.len as usize) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if crc32c::crc32c(&bytes) != p.crc {
            // Overwritten by a purge (see `scrub`): a fan-out's delivery that was not
            // purged shares the record. Its payload is gone, as after retention.
            if !bytes.is_empty() && bytes.iter().all(|b| *b == 0) {
                return Ok(None);
            }
            return Err(StoreError::Corrupt(format!(
                "the record at offset {} of log segment {name} ({} bytes) fails its checksum",
                p.offset, p.len
            )));
        }
        Ok(Some(bytes))
    }

    /// Whether the record a `messages` value holds or points to is still kept (its segment
    /// exists), without reading it.
    pub(crate) fn keeps(&self, value: &[u8]) -> Result<bool, StoreError> {
        let p = match Stored::of(value)? {
            Stored::Inline(_) => return Ok(true),
            Stored::At(p) | Stored::Shared(p, _) => p,
        };
        let dir = self.dir.get().ok_or_else(|| {
            StoreError::Corrupt("a payload looked for before the log was opened".into())
        })?;
        match dir.size(&segment_name(p.segment)) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The record a `messages` value holds or points to (`None`: its segment is gone).
    pub(crate) fn resolve(&self, value: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match Stored::of(value)? {
            Stored::Inline(v) => Ok(Some(v.to_vec())),
            Stored::At(p) => self.read(&p),
            Stored::Shared(p, destination) => Ok(self
                .read(&p)?
                .map(|record| with_destination(record, destination))),
        }
    }
}

/// What the store keeps of one segment (`segments` table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentRow {
    /// Live messages whose record is in it.
    pub live: u64,
    /// Their records' bytes.
    pub live_bytes: u64,
    /// The creation time of the newest message whose record was written into it (UUIDv7
    /// ids carry it): retention counts from there.
    pub newest_ms: u64,
}

impl SegmentRow {
    pub(crate) const BYTES: usize = 24;

    pub(crate) fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0u8; Self::BYTES];
        out[..8].copy_from_slice(&self.live.to_be_bytes());
        out[8..16].copy_from_slice(&self.live_bytes.to_be_bytes());
        out[16..].copy_from_slice(&self.newest_ms.to_be_bytes());
        out
    }

    pub(crate) fn decode(v: &[u8]) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Corrupt(format!("a segment row of {} bytes", v.len()));
        if v.len() != Self::BYTES {
            return Err(corrupt());
        }
        let at = |i: usize| be(v, i).map(u64::from_be_bytes).ok_or_else(corrupt);
        Ok(Self {
            live: at(0)?,
            live_bytes: at(8)?,
            newest_ms: at(16)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_round_trips_and_never_reads_as_a_record() {
        let record = b"....the record....";
        let value = &record[4..14];
        let p = Pointer::to(1 << 24, 1_000, record, value);
        assert_eq!(p.offset, 1_004);
        assert_eq!(p.len, 10);
        let encoded = p.encode();
        assert_eq!(Stored::of(&encoded).unwrap(), Stored::At(p));
        // An encoded MessageRecord starts with a field tag, never 0.
        use prost::Message;
        let m = super::super::MessageRecord {
            destination: "queue:q".into(),
            ..Default::default()
        }
        .encode_to_vec();
        assert_eq!(Stored::of(&m).unwrap(), Stored::Inline(&m));
        assert!(super::super::MessageRecord::decode(&encoded[..]).is_err());
        assert!(Stored::of(&encoded[..20]).is_err(), "cut short");
        let row = SegmentRow {
            live: 3,
            live_bytes: 1_500,
            newest_ms: 9,
        };
        assert_eq!(SegmentRow::decode(&row.encode()).unwrap(), row);
    }
}
