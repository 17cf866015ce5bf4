//! The write-ahead log's files: append-only segments of checksummed records.
//!
//! Issue #10's first building block: the engine does not use it yet (the round still
//! commits to redb with `Durability::Immediate`). What it guarantees already:
//!
//! - A position ([`Lsn`]) is a byte offset in the log as a whole. Segment files are named
//!   `wal-<first position, 20 digits>.log`, so their order is their names' order.
//! - A record is framed as its length (u32 LE), a CRC-32C (u32 LE) over the length bytes
//!   and the payload, then the payload. A frame is never split across segments.
//! - [`Log::append`] only buffers; [`Log::sync`] writes the buffered frames with one
//!   `write` and makes them durable with one `fdatasync` (and the directory's, after a new
//!   segment was created). A record is durable once the `sync` after its `append` returned,
//!   and not before: no caller may be told otherwise.
//! - At [`Log::open`] every frame is checked. In the last segment, the first frame that is
//!   short or fails its checksum ends the log: it is a write torn by a crash (nothing after
//!   it was ever synced, since a sync covers everything appended before it), and the file
//!   is cut there, so a later append never leaves garbage between records. In an earlier
//!   segment (one that was complete and synced before the next was started) such a frame
//!   is corruption, and opening fails rather than skip data.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A position in the log: the byte offset of a record's frame.
pub type Lsn = u64;

/// A record read back: its position and payload.
pub type Record = (Lsn, Vec<u8>);

/// Length and checksum, before the payload.
const HEADER: usize = 8;
/// The largest payload of one record (a round of 8,192 commands of 1 MiB events fits).
pub const MAX_RECORD: usize = 1 << 30;

/// Why the log could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    #[error("write-ahead log I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("write-ahead log segment {segment} is corrupt at position {at}: {why}")]
    Corrupt {
        segment: PathBuf,
        at: Lsn,
        why: &'static str,
    },
    #[error("a log record of {0} bytes is over the limit of {MAX_RECORD}")]
    TooBig(usize),
}

/// The log, open for appending at its end.
#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    /// Segments in order: (first position, path).
    segments: Vec<(Lsn, PathBuf)>,
    file: File,
    /// Bytes of the current segment already written to the file.
    written: u64,
    /// Frames appended and not yet written.
    pending: Vec<u8>,
    /// The position after the last appended record.
    end: Lsn,
    /// A segment grows past this only by the record that crosses it.
    segment_bytes: u64,
    /// A segment was created since the last sync: the directory must be synced too.
    new_segment: bool,
}

fn segment_path(dir: &Path, start: Lsn) -> PathBuf {
    dir.join(format!("wal-{start:020}.log"))
}

fn frame(payload: &[u8], out: &mut Vec<u8>) {
    let len = (payload.len() as u32).to_le_bytes();
    let mut crc = crc32c::crc32c(&len);
    crc = crc32c::crc32c_append(crc, payload);
    out.extend_from_slice(&len);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
}

/// The segments in `dir`, in order.
fn list(dir: &Path) -> Result<Vec<(Lsn, PathBuf)>, LogError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if let Some(start) = name
            .strip_prefix("wal-")
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<Lsn>().ok())
        {
            out.push((start, path));
        }
    }
    out.sort();
    Ok(out)
}

/// What reading a segment found: its records, and where its valid frames end.
struct Scan {
    records: Vec<Record>,
    /// Bytes of the file holding whole, valid frames.
    valid: u64,
    /// Why the rest is not valid (none: the file ends at a frame boundary).
    bad: Option<&'static str>,
}

fn scan(path: &Path, start: Lsn, keep: bool) -> Result<Scan, LogError> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut at = 0usize;
    let mut records = Vec::new();
    let bad = loop {
        let Some(header) = bytes.get(at..at + HEADER) else {
            break (at < bytes.len()).then_some("a frame header cut short");
        };
        let len_bytes: [u8; 4] = [header[0], header[1], header[2], header[3]];
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        let len = u32::from_le_bytes(len_bytes) as usize;
        if len > MAX_RECORD {
            break Some("a frame length over the limit");
        }
        let Some(payload) = bytes.get(at + HEADER..at + HEADER + len) else {
            break Some("a frame cut short");
        };
        if crc32c::crc32c_append(crc32c::crc32c(&len_bytes), payload) != crc {
            break Some("a frame whose checksum does not match");
        }
        if keep {
            records.push((start + at as u64, payload.to_vec()));
        }
        at += HEADER + len;
    };
    Ok(Scan {
        records,
        valid: at as u64,
        bad,
    })
}

impl Log {
    /// Opens the log in `dir` (created if need be) for appending, cutting a torn tail of
    /// the last segment; every record from position `from` on is returned, in order.
    pub fn open(
        dir: &Path,
        segment_bytes: u64,
        from: Lsn,
    ) -> Result<(Self, Vec<Record>), LogError> {
        std::fs::create_dir_all(dir)?;
        let mut segments = list(dir)?;
        let mut records = Vec::new();
        let count = segments.len();
        let mut tail = None;
        for (i, (start, path)) in segments.iter().enumerate() {
            let last = i + 1 == count;
            let next = segments.get(i + 1).map(|s| s.0);
            // Records of a segment that ends before `from` are not wanted.
            let keep = next.is_none_or(|n| n > from);
            let found = scan(path, *start, keep)?;
            records.extend(found.records.into_iter().filter(|(at, _)| *at >= from));
            if let Some(why) = found.bad {
                if !last {
                    return Err(LogError::Corrupt {
                        segment: path.clone(),
                        at: start + found.valid,
                        why,
                    });
                }
                tracing::warn!(
                    segment = %path.display(),
                    at = start + found.valid,
                    why,
                    "cutting the log's torn tail"
                );
            }
            if last {
                tail = Some((*start, found.valid));
            }
        }
        let (start, valid) = match tail {
            Some(t) => t,
            None => {
                let path = segment_path(dir, 0);
                File::create(&path)?;
                segments.push((0, path));
                (0, 0)
            }
        };
        let path = &segments[segments.len() - 1].1;
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        // Cut the torn tail, durably, before anything is appended after it.
        if file.metadata()?.len() != valid {
            file.set_len(valid)?;
            file.sync_data()?;
        }
        let mut log = Self {
            dir: dir.to_owned(),
            segments,
            file,
            written: valid,
            pending: Vec::new(),
            end: start + valid,
            segment_bytes: segment_bytes.max(HEADER as u64),
            new_segment: count == 0,
        };
        log.file.seek(SeekFrom::Start(valid))?;
        Ok((log, records))
    }

    /// Buffers one record; returns its position. Durable only after the next [`Log::sync`].
    pub fn append(&mut self, payload: &[u8]) -> Result<Lsn, LogError> {
        if payload.len() > MAX_RECORD {
            return Err(LogError::TooBig(payload.len()));
        }
        let segment_len = self.written + self.pending.len() as u64;
        if segment_len > 0 && segment_len >= self.segment_bytes {
            self.rotate()?;
        }
        let at = self.end;
        frame(payload, &mut self.pending);
        self.end += (HEADER + payload.len()) as u64;
        Ok(at)
    }

    /// Starts a new segment at the current end (what is buffered goes to the old one).
    fn rotate(&mut self) -> Result<(), LogError> {
        self.write_pending()?;
        self.file.sync_data()?;
        let path = segment_path(&self.dir, self.end);
        self.file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        self.segments.push((self.end, path));
        self.written = 0;
        self.new_segment = true;
        Ok(())
    }

    fn write_pending(&mut self) -> Result<(), LogError> {
        if !self.pending.is_empty() {
            self.file.write_all(&self.pending)?;
            self.written += self.pending.len() as u64;
            self.pending.clear();
        }
        Ok(())
    }

    /// Writes every appended record and makes it durable: one write, one fdatasync (and
    /// the directory's after a new segment).
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.write_pending()?;
        self.file.sync_data()?;
        if self.new_segment {
            File::open(&self.dir)?.sync_all()?;
            self.new_segment = false;
        }
        Ok(())
    }

    /// The position the next record will have.
    pub fn end(&self) -> Lsn {
        self.end
    }

    /// Deletes the segments that hold only records before `lsn` (applied and checkpointed).
    /// The current segment is kept.
    pub fn discard_before(&mut self, lsn: Lsn) -> Result<usize, LogError> {
        let mut removed = 0;
        while self.segments.len() > 1 && self.segments[1].0 <= lsn {
            let (_, path) = self.segments.remove(0);
            std::fs::remove_file(path)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Bytes the log's segments hold (what is written; the buffer is not counted).
    pub fn disk_bytes(&self) -> u64 {
        self.end - self.segments[0].0 - self.pending.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn records(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![i as u8; i * 7 % 300]).collect()
    }

    fn write_all(dir: &Path, segment: u64, recs: &[Vec<u8>]) -> Vec<Lsn> {
        let (mut log, old) = Log::open(dir, segment, 0).unwrap();
        assert!(old.is_empty());
        let at = recs.iter().map(|r| log.append(r).unwrap()).collect();
        log.sync().unwrap();
        at
    }

    #[test]
    fn records_come_back_in_order_with_their_positions_across_segments() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(200);
        let at = write_all(dir.path(), 1_000, &recs);
        assert!(list(dir.path()).unwrap().len() > 5, "several segments");
        let (log, back) = Log::open(dir.path(), 1_000, 0).unwrap();
        assert_eq!(back.iter().map(|r| r.0).collect::<Vec<_>>(), at);
        assert_eq!(back.into_iter().map(|r| r.1).collect::<Vec<_>>(), recs);
        // From a position on, only the records from there.
        let (_, tail) = Log::open(dir.path(), 1_000, at[150]).unwrap();
        assert_eq!(tail.len(), 50);
        assert_eq!(tail[0].0, at[150]);
        assert_eq!(log.end(), at[199] + 8 + recs[199].len() as u64);
    }

    #[test]
    fn a_torn_tail_is_cut_and_appending_continues_after_the_last_whole_record() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(10);
        write_all(dir.path(), 1 << 20, &recs);
        let path = segment_path(dir.path(), 0);
        let whole = std::fs::metadata(&path).unwrap().len();
        // A crash in the middle of the last write: half a frame.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        let mut half = Vec::new();
        frame(b"this record was never synced", &mut half);
        f.write_all(&half[..12]).unwrap();
        drop(f);
        let (mut log, back) = Log::open(dir.path(), 1 << 20, 0).unwrap();
        assert_eq!(back.len(), 10);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole, "cut");
        log.append(b"after").unwrap();
        log.sync().unwrap();
        let (_, back) = Log::open(dir.path(), 1 << 20, 0).unwrap();
        assert_eq!(back.len(), 11);
        assert_eq!(back[10].1, b"after");
    }

    #[test]
    fn a_bad_checksum_ends_the_last_segment_but_is_corruption_in_an_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(100);
        write_all(dir.path(), 2_000, &recs);
        let segments = list(dir.path()).unwrap();
        assert!(segments.len() >= 3);
        // Flip a payload byte of the first record of the first segment.
        let first = &segments[0].1;
        let mut bytes = std::fs::read(first).unwrap();
        bytes[HEADER + 20] ^= 0xff;
        std::fs::write(first, &bytes).unwrap();
        let err = Log::open(dir.path(), 2_000, 0).unwrap_err().to_string();
        assert!(err.contains("checksum does not match"), "{err}");
        // The same in the last segment: the log ends there.
        std::fs::write(first, {
            bytes[HEADER + 20] ^= 0xff;
            &bytes
        })
        .unwrap();
        let last = &segments[segments.len() - 1];
        let mut bytes = std::fs::read(&last.1).unwrap();
        let before_last = Log::open(dir.path(), 2_000, 0)
            .unwrap()
            .1
            .iter()
            .filter(|r| r.0 < last.0)
            .count();
        bytes[HEADER] ^= 0xff;
        std::fs::write(&last.1, &bytes).unwrap();
        let (_, back) = Log::open(dir.path(), 2_000, 0).unwrap();
        assert_eq!(back.len(), before_last);
    }

    #[test]
    fn checkpointed_segments_are_discarded_and_the_log_restarts_where_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(100);
        let at = write_all(dir.path(), 2_000, &recs);
        let (mut log, _) = Log::open(dir.path(), 2_000, 0).unwrap();
        let before = list(dir.path()).unwrap().len();
        let removed = log.discard_before(at[80]).unwrap();
        assert!(removed > 0 && removed < before);
        assert_eq!(list(dir.path()).unwrap().len(), before - removed);
        let (_, back) = Log::open(dir.path(), 2_000, at[80]).unwrap();
        assert_eq!(back.first().map(|r| r.0), Some(at[80]));
        assert_eq!(back.len(), 20);
        assert!(log.disk_bytes() < log.end());
    }

    #[test]
    fn an_oversized_record_is_refused_and_appends_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = Log::open(dir.path(), 1 << 20, 0).unwrap();
        let end = log.end();
        assert!(matches!(
            log.append(&vec![0; MAX_RECORD + 1]),
            Err(LogError::TooBig(_))
        ));
        assert_eq!(log.end(), end);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// A crash that keeps any prefix of the file's bytes leaves exactly the records
        /// wholly inside that prefix: never a partial or a misread one.
        #[test]
        fn any_cut_keeps_exactly_the_whole_records_before_it(
            recs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..30),
            cut in any::<prop::sample::Index>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let at = write_all(dir.path(), 1 << 20, &recs);
            let path = segment_path(dir.path(), 0);
            let bytes = std::fs::read(&path).unwrap();
            let keep = cut.index(bytes.len() + 1);
            std::fs::write(&path, &bytes[..keep]).unwrap();
            let (_, back) = Log::open(dir.path(), 1 << 20, 0).unwrap();
            let whole = at
                .iter()
                .zip(&recs)
                .take_while(|(a, r)| **a as usize + HEADER + r.len() <= keep)
                .count();
            prop_assert_eq!(back.len(), whole);
            for ((a, r), (b, s)) in at.iter().zip(&recs).zip(&back) {
                prop_assert_eq!(a, b);
                prop_assert_eq!(r, s);
            }
        }
    }
}
