//! The write-ahead log's files: append-only segments of checksummed records.
//!
//! The engine appends one record per round (the round's row changes, see
//! `store::rowlog`) and answers only after the `sync` that holds it; redb is brought up to
//! date behind it and checkpointed (`docs/durability.md`). What this module guarantees:
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
//! - All file access goes through [`LogDir`]: [`OsDir`] in production, a disk that loses
//!   power in tests (`store::power_loss`).

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A position in the log: the byte offset of a record's frame.
pub type Lsn = u64;

/// A record read back: its position and payload.
pub type Record = (Lsn, Vec<u8>);

/// Length and checksum, before the payload.
pub const HEADER: usize = 8;
/// The largest payload of one record (a round of 8,192 commands of 1 MiB events fits).
pub const MAX_RECORD: usize = 1 << 30;

/// The directory holding the log's segments. Names are plain file names.
pub trait LogDir: Send + Sync + Debug {
    /// The names of the files in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// A whole file.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// Opens a file for writing; `create`: it must not exist yet.
    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn LogFile>>;
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Makes the directory's entries (created and removed files) durable.
    fn sync(&self) -> io::Result<()>;
}

/// One segment file open for writing.
pub trait LogFile: Send + Debug {
    fn write_at(&mut self, at: u64, data: &[u8]) -> io::Result<()>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// fdatasync: the file's bytes (and its length) are durable when this returns.
    fn sync_data(&mut self) -> io::Result<()>;
}

/// Called before every sync of an [`OsDir`]; an error fails the sync (tests: a failing or
/// slow disk).
pub type SyncHook = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

/// A directory of the operating system's file system.
#[derive(Clone)]
pub struct OsDir {
    path: PathBuf,
    hook: Option<SyncHook>,
}

impl Debug for OsDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OsDir").field("path", &self.path).finish()
    }
}

impl OsDir {
    /// The directory at `path`, created if missing.
    pub fn new(path: &Path) -> io::Result<Self> {
        crate::store::private_dir(path)?;
        Ok(Self {
            path: path.to_owned(),
            hook: None,
        })
    }

    /// Runs `hook` before every sync of the directory or one of its files.
    pub fn with_sync_hook(mut self, hook: SyncHook) -> Self {
        self.hook = Some(hook);
        self
    }

    fn before_sync(&self) -> io::Result<()> {
        self.hook.as_ref().map_or(Ok(()), |h| h())
    }
}

struct OsFile {
    file: File,
    hook: Option<SyncHook>,
}

impl Debug for OsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OsFile").field("file", &self.file).finish()
    }
}

impl LogDir for OsDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.path)? {
            if let Some(name) = entry?.file_name().to_str() {
                out.push(name.to_owned());
            }
        }
        Ok(out)
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(self.path.join(name))
    }

    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn LogFile>> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create_new(create);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(self.path.join(name))?;
        Ok(Box::new(OsFile {
            file,
            hook: self.hook.clone(),
        }))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.path.join(name))
    }

    fn sync(&self) -> io::Result<()> {
        self.before_sync()?;
        File::open(&self.path)?.sync_all()
    }
}

impl LogFile for OsFile {
    fn write_at(&mut self, at: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, at)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        if let Some(hook) = &self.hook {
            hook()?;
        }
        self.file.sync_data()
    }
}

/// Why the log could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    #[error("write-ahead log I/O: {0}")]
    Io(#[from] io::Error),
    #[error("write-ahead log segment {segment} is corrupt at position {at}: {why}")]
    Corrupt {
        segment: String,
        at: Lsn,
        why: &'static str,
    },
    #[error("a log record of {0} bytes is over the limit of {MAX_RECORD}")]
    TooBig(usize),
}

/// The log, open for appending at its end.
#[derive(Debug)]
pub struct Log {
    dir: Box<dyn LogDir>,
    /// Segments in order: (first position, file name).
    segments: Vec<(Lsn, String)>,
    file: Box<dyn LogFile>,
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

fn segment_name(start: Lsn) -> String {
    format!("wal-{start:020}.log")
}

/// The bytes a record of `len` payload bytes takes in the log.
pub fn framed_len(len: usize) -> u64 {
    (HEADER + len) as u64
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
fn list(dir: &dyn LogDir) -> Result<Vec<(Lsn, String)>, LogError> {
    let mut out = Vec::new();
    for name in dir.list()? {
        if let Some(start) = name
            .strip_prefix("wal-")
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<Lsn>().ok())
        {
            out.push((start, name));
        }
    }
    out.sort();
    Ok(out)
}

/// What reading a segment found: where its valid frames end, and why the rest is not
/// valid (none: the file ends at a frame boundary).
struct Scan {
    valid: u64,
    bad: Option<&'static str>,
}

/// The records of a segment's bytes, and why the rest is not valid (a torn tail): what
/// replay reads from disk, for the fuzz target `records`.
pub fn frames(bytes: &[u8]) -> (Vec<&[u8]>, Option<&'static str>) {
    let mut out = Vec::new();
    let mut at = 0usize;
    let found = scan(bytes, 0, 0, &mut |lsn: Lsn, _payload: &[u8]| {
        out.push(lsn);
        Ok::<(), LogError>(())
    });
    let bad = match found {
        Ok(scan) => scan.bad,
        Err(_) => Some("unreadable"),
    };
    let records = out
        .into_iter()
        .filter_map(|lsn| {
            at = usize::try_from(lsn).ok()?;
            let len = u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?) as usize;
            bytes.get(at + HEADER..at + HEADER + len)
        })
        .collect();
    (records, bad)
}

/// Checks every frame of a segment, handing those at or after `from` to `each`.
fn scan<E: From<LogError>>(
    bytes: &[u8],
    start: Lsn,
    from: Lsn,
    each: &mut impl FnMut(Lsn, &[u8]) -> Result<(), E>,
) -> Result<Scan, E> {
    let mut at = 0usize;
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
        let lsn = start + at as u64;
        if lsn >= from {
            each(lsn, payload)?;
        }
        at += HEADER + len;
    };
    Ok(Scan {
        valid: at as u64,
        bad,
    })
}

impl Log {
    /// Opens the log in `dir` for appending, cutting a torn tail of the last segment;
    /// every record from position `from` on is returned, in order.
    pub fn open(
        dir: Box<dyn LogDir>,
        segment_bytes: u64,
        from: Lsn,
    ) -> Result<(Self, Vec<Record>), LogError> {
        let mut records = Vec::new();
        let log = Self::replay(dir, segment_bytes, from, |at, payload| {
            records.push((at, payload.to_vec()));
            Ok::<(), LogError>(())
        })?;
        Ok((log, records))
    }

    /// As [`Log::open`], handing each record from `from` on to `each` (in order, one
    /// segment in memory at a time) instead of collecting them.
    ///
    /// If the log ends before `from` (its files were lost, or never existed), appending
    /// starts in a new segment at `from`, so positions never go back below a checkpoint.
    pub fn replay<E: From<LogError>>(
        dir: Box<dyn LogDir>,
        segment_bytes: u64,
        from: Lsn,
        mut each: impl FnMut(Lsn, &[u8]) -> Result<(), E>,
    ) -> Result<Self, E> {
        let mut segments = list(dir.as_ref())?;
        let count = segments.len();
        let mut tail = None;
        for (i, (start, name)) in segments.iter().enumerate() {
            let last = i + 1 == count;
            // A segment that ends before `from` need not be read (the next one starts
            // there or earlier); it is discarded at the next checkpoint.
            if segments.get(i + 1).is_some_and(|next| next.0 <= from) {
                continue;
            }
            let bytes = dir.read(name).map_err(LogError::from)?;
            let found = scan(&bytes, *start, from, &mut each)?;
            if let Some(why) = found.bad {
                if !last {
                    return Err(LogError::Corrupt {
                        segment: name.clone(),
                        at: start + found.valid,
                        why,
                    }
                    .into());
                }
                tracing::warn!(
                    segment = %name,
                    at = start + found.valid,
                    why,
                    "cutting the log's torn tail"
                );
            }
            if last {
                tail = Some((*start, found.valid, bytes.len() as u64));
            }
        }
        let mut new_segment = false;
        let (start, valid, file) = match tail {
            Some((start, valid, len)) if start + valid >= from => {
                let name = &segments[segments.len() - 1].1;
                let mut file = dir.open(name, false).map_err(LogError::from)?;
                // Cut the torn tail, durably, before anything is appended after it.
                if len != valid {
                    file.set_len(valid).map_err(LogError::from)?;
                    file.sync_data().map_err(LogError::from)?;
                }
                (start, valid, file)
            }
            _ => {
                if tail.is_some() {
                    tracing::warn!(
                        from,
                        "the log ends before its checkpoint; continuing from there"
                    );
                }
                let name = segment_name(from);
                let file = dir.open(&name, true).map_err(LogError::from)?;
                segments.push((from, name));
                new_segment = true;
                (from, 0, file)
            }
        };
        let mut log = Self {
            dir,
            segments,
            file,
            written: valid,
            pending: Vec::new(),
            end: start + valid,
            segment_bytes: segment_bytes.max(HEADER as u64),
            new_segment,
        };
        if log.new_segment {
            log.sync()?;
        }
        Ok(log)
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
        self.end += framed_len(payload.len());
        Ok(at)
    }

    /// Starts a new segment at the current end (what is buffered goes to the old one).
    fn rotate(&mut self) -> Result<(), LogError> {
        self.write_pending()?;
        self.file.sync_data()?;
        let name = segment_name(self.end);
        self.file = self.dir.open(&name, true)?;
        self.segments.push((self.end, name));
        self.written = 0;
        self.new_segment = true;
        Ok(())
    }

    fn write_pending(&mut self) -> Result<(), LogError> {
        if !self.pending.is_empty() {
            self.file.write_at(self.written, &self.pending)?;
            self.written += self.pending.len() as u64;
            self.pending.clear();
            // One huge round (a burst of large batches) should not pin its buffer.
            if self.pending.capacity() > 8 << 20 {
                self.pending = Vec::new();
            }
        }
        Ok(())
    }

    /// Writes every appended record and makes it durable: one write, one fdatasync (and
    /// the directory's after a new segment).
    pub fn sync(&mut self) -> Result<(), LogError> {
        self.write_pending()?;
        self.file.sync_data()?;
        if self.new_segment {
            self.dir.sync()?;
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
            let (_, name) = self.segments.remove(0);
            self.dir.remove(&name)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// The position the first segment starts at.
    pub fn first(&self) -> Lsn {
        self.segments[0].0
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

    fn os(dir: &Path) -> Box<dyn LogDir> {
        Box::new(OsDir::new(dir).unwrap())
    }

    fn open(dir: &Path, segment: u64, from: Lsn) -> Result<(Log, Vec<Record>), LogError> {
        Log::open(os(dir), segment, from)
    }

    fn segment_path(dir: &Path, start: Lsn) -> PathBuf {
        dir.join(segment_name(start))
    }

    fn write_all(dir: &Path, segment: u64, recs: &[Vec<u8>]) -> Vec<Lsn> {
        let (mut log, old) = open(dir, segment, 0).unwrap();
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
        assert!(
            list(&OsDir::new(dir.path()).unwrap()).unwrap().len() > 5,
            "several segments"
        );
        let (log, back) = open(dir.path(), 1_000, 0).unwrap();
        assert_eq!(back.iter().map(|r| r.0).collect::<Vec<_>>(), at);
        assert_eq!(back.into_iter().map(|r| r.1).collect::<Vec<_>>(), recs);
        // From a position on, only the records from there.
        let (_, tail) = open(dir.path(), 1_000, at[150]).unwrap();
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
        use std::io::Write;
        let mut half = Vec::new();
        frame(b"this record was never synced", &mut half);
        f.write_all(&half[..12]).unwrap();
        drop(f);
        let (mut log, back) = open(dir.path(), 1 << 20, 0).unwrap();
        assert_eq!(back.len(), 10);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole, "cut");
        log.append(b"after").unwrap();
        log.sync().unwrap();
        let (_, back) = open(dir.path(), 1 << 20, 0).unwrap();
        assert_eq!(back.len(), 11);
        assert_eq!(back[10].1, b"after");
    }

    #[test]
    fn a_bad_checksum_ends_the_last_segment_but_is_corruption_in_an_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(100);
        write_all(dir.path(), 2_000, &recs);
        let segments = list(&OsDir::new(dir.path()).unwrap()).unwrap();
        assert!(segments.len() >= 3);
        // Flip a payload byte of the first record of the first segment.
        let first = &dir.path().join(&segments[0].1);
        let mut bytes = std::fs::read(first).unwrap();
        bytes[HEADER + 20] ^= 0xff;
        std::fs::write(first, &bytes).unwrap();
        let err = open(dir.path(), 2_000, 0).unwrap_err().to_string();
        assert!(err.contains("checksum does not match"), "{err}");
        // The same in the last segment: the log ends there.
        std::fs::write(first, {
            bytes[HEADER + 20] ^= 0xff;
            &bytes
        })
        .unwrap();
        let last = &segments[segments.len() - 1];
        let last_path = dir.path().join(&last.1);
        let mut bytes = std::fs::read(&last_path).unwrap();
        let before_last = open(dir.path(), 2_000, 0)
            .unwrap()
            .1
            .iter()
            .filter(|r| r.0 < last.0)
            .count();
        bytes[HEADER] ^= 0xff;
        std::fs::write(&last_path, &bytes).unwrap();
        let (_, back) = open(dir.path(), 2_000, 0).unwrap();
        assert_eq!(back.len(), before_last);
    }

    #[test]
    fn checkpointed_segments_are_discarded_and_the_log_restarts_where_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(100);
        let at = write_all(dir.path(), 2_000, &recs);
        let (mut log, _) = open(dir.path(), 2_000, 0).unwrap();
        let before = list(&OsDir::new(dir.path()).unwrap()).unwrap().len();
        let removed = log.discard_before(at[80]).unwrap();
        assert!(removed > 0 && removed < before);
        assert_eq!(
            list(&OsDir::new(dir.path()).unwrap()).unwrap().len(),
            before - removed
        );
        let (_, back) = open(dir.path(), 2_000, at[80]).unwrap();
        assert_eq!(back.first().map(|r| r.0), Some(at[80]));
        assert_eq!(back.len(), 20);
        assert!(log.disk_bytes() < log.end());
    }

    #[test]
    fn an_oversized_record_is_refused_and_appends_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = open(dir.path(), 1 << 20, 0).unwrap();
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
            let (_, back) = open(dir.path(), 1 << 20, 0).unwrap();
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
