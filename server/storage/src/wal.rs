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
//!   is cut there, so a later append never leaves garbage between records. A torn write only
//!   damages the end: a bad frame with whole valid frames after it is damage
//!   ([`LogError::Damaged`]), and opening fails, changing nothing, until an operator runs
//!   `hookd repair` ([`repair`]). In an earlier segment (one that was complete and synced
//!   before the next was started) a bad frame is corruption, and so is a segment that does
//!   not end exactly where the next begins ([`LogError::Gap`]: cut short, or one deleted).
//! - Nothing is trusted that this process did not see synced. After a failed fdatasync,
//!   Linux marks the pages it could not write clean but keeps them readable: they would
//!   read back as valid records, yet never reach the disk. So a failed sync cuts the
//!   segment back to its last synced length, durably, before anything else happens; and
//!   every open writes the last segment's records after the checkpoint again and syncs
//!   them (with the directory) before replaying them, so what a previous process left in
//!   the page cache (a failed sync it could not cut) is on disk before hookd relies on it.
//! - All file access goes through [`LogDir`]: [`OsDir`] in production, a disk that loses
//!   power in tests (`store::power_loss`).

use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A position in the log: the byte offset of a record's frame.
pub(crate) type Lsn = u64;

/// A record read back: its position and payload.
pub(crate) type Record = (Lsn, Vec<u8>);

/// Length and checksum, before the payload.
pub const HEADER: usize = 8;
/// The largest payload of one record (a round of 8,192 commands of 1 MiB events fits).
pub(crate) const MAX_RECORD: usize = 1 << 30;

/// The directory holding the log's segments. Names are plain file names.
pub trait LogDir: Send + Sync + Debug {
    /// The names of the files in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// A whole file.
    fn read(&self, name: &str) -> io::Result<Vec<u8>>;
    /// `len` bytes of a file from `at` (a payload in a segment); an error if the file is
    /// shorter, `NotFound` if it is gone.
    fn read_at(&self, name: &str, at: u64, len: usize) -> io::Result<Vec<u8>>;
    /// A file's length.
    fn size(&self, name: &str) -> io::Result<u64>;
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
pub(crate) type SyncHook = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

/// A directory of the operating system's file system.
#[derive(Clone)]
pub struct OsDir {
    path: PathBuf,
    hook: Option<SyncHook>,
    /// Segments recently opened for reading payloads, newest last (see [`OsDir::read_at`]).
    readers: Arc<std::sync::Mutex<Readers>>,
}

/// Segment files open for reading, least recently used first.
type Readers = Vec<(String, Arc<File>)>;

/// Segment files kept open for payload reads: the current one and a few before it.
const READERS: usize = 4;

impl Debug for OsDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OsDir").field("path", &self.path).finish()
    }
}

impl OsDir {
    /// The directory at `path`, created if missing.
    pub fn new(path: &Path) -> io::Result<Self> {
        crate::fs::private_dir(path)?;
        Ok(Self {
            path: path.to_owned(),
            hook: None,
            readers: Arc::default(),
        })
    }

    /// Runs `hook` before every sync of the directory or one of its files.
    pub(crate) fn with_sync_hook(mut self, hook: SyncHook) -> Self {
        self.hook = Some(hook);
        self
    }

    fn before_sync(&self) -> io::Result<()> {
        self.hook.as_ref().map_or(Ok(()), |h| h())
    }

    fn readers(&self) -> std::sync::MutexGuard<'_, Readers> {
        self.readers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A segment open for reading, from the few kept open or opened now.
    fn reader(&self, name: &str) -> io::Result<Arc<File>> {
        let mut readers = self.readers();
        if let Some(i) = readers.iter().position(|(n, _)| n == name) {
            let entry = readers.remove(i);
            let file = entry.1.clone();
            readers.push(entry);
            return Ok(file);
        }
        let file = Arc::new(File::open(self.path.join(name))?);
        if readers.len() >= READERS {
            readers.remove(0);
        }
        readers.push((name.to_owned(), file.clone()));
        Ok(file)
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

    fn read_at(&self, name: &str, at: u64, len: usize) -> io::Result<Vec<u8>> {
        let file = self.reader(name)?;
        let mut out = vec![0; len];
        file.read_exact_at(&mut out, at)?;
        Ok(out)
    }

    fn size(&self, name: &str) -> io::Result<u64> {
        Ok(std::fs::metadata(self.path.join(name))?.len())
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
        // A reader kept open would hold the deleted file's space until evicted.
        self.readers().retain(|(n, _)| n != name);
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
    /// A bad frame with whole frames after it, in the last segment: not a torn write.
    #[error(
        "write-ahead log segment {segment} is damaged at position {at} ({why}), and whole \
         records follow it at position {next}: a torn write only damages the end of the log, \
         so this is damage, and hookd does not start on it (nothing was changed). `hookd \
         repair --dry-run` shows what cutting the log at position {at} would drop; `hookd \
         repair` does it"
    )]
    Damaged {
        segment: String,
        at: Lsn,
        next: Lsn,
        why: &'static str,
    },
    /// A segment that does not end where the next begins (cut short, or one deleted).
    #[error(
        "write-ahead log segment {segment} ends at position {end} but the next segment, \
         {next}, begins at position {next_start}: {} between them {}; hookd does not \
         start on it (nothing was changed). Put the missing segment back (a backup), or run \
         `hookd repair --dry-run` to see what dropping the log from position {end} would drop",
        .next_start.abs_diff(*.end),
        if .next_start > .end { "bytes of records are missing" } else { "bytes overlap" }
    )]
    Gap {
        segment: String,
        end: Lsn,
        next: String,
        next_start: Lsn,
    },
    /// The log's first segment begins after the checkpoint the store holds.
    #[error(
        "the write-ahead log's first segment, {segment}, begins at position {start}, after \
         the store's checkpoint at {from}: the records between are missing; hookd does not \
         start on it. Put the missing segments back (a backup)"
    )]
    Missing {
        segment: String,
        start: Lsn,
        from: Lsn,
    },
    /// An append or a sync after a failed one: the log must be reopened.
    #[error("the write-ahead log failed earlier ({0}) and must be reopened")]
    Failed(String),
}

/// The log, open for appending at its end.
#[derive(Debug)]
pub struct Log {
    dir: Arc<dyn LogDir>,
    /// Segments in order: (first position, file name, length once a later one started).
    /// Segments before the checkpoint may be missing from the sequence: the apply stage
    /// deletes each once nothing live points into it and retention lets it go.
    segments: Vec<(Lsn, String, u64)>,
    /// Bytes of every segment but the current one.
    sealed_bytes: u64,
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
    /// Bytes of the current segment this process saw made durable.
    synced: u64,
    /// Why a sync failed: nothing is appended or synced after it.
    failed: Option<String>,
}

pub(crate) fn segment_name(start: Lsn) -> String {
    format!("wal-{start:020}.log")
}

/// The bytes a record of `len` payload bytes takes in the log.
pub(crate) fn framed_len(len: usize) -> u64 {
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

/// How far a segment's frames are whole: the end of its last valid frame, and why the
/// bytes after it (if any) are not a frame (a start-up check of the segments live messages
/// point into).
pub(crate) fn valid_frames(bytes: &[u8]) -> (u64, Option<&'static str>) {
    match scan(bytes, 0, u64::MAX, &mut |_, _| Ok::<(), LogError>(())) {
        Ok(scan) => (scan.valid, scan.bad),
        Err(_) => (0, Some("unreadable")),
    }
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

/// A valid frame at `at` with a payload: its end.
fn valid_frame(bytes: &[u8], at: usize) -> Option<usize> {
    frame_end(bytes, at, false)
}

/// A valid frame at `at` (`empty`: its payload may be empty): its end.
fn frame_end(bytes: &[u8], at: usize, empty: bool) -> Option<usize> {
    let header = bytes.get(at..at + HEADER)?;
    let len_bytes: [u8; 4] = [header[0], header[1], header[2], header[3]];
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let len = u32::from_le_bytes(len_bytes) as usize;
    if (len == 0 && !empty) || len > MAX_RECORD {
        return None;
    }
    let payload = bytes.get(at + HEADER..at + HEADER + len)?;
    (crc32c::crc32c_append(crc32c::crc32c(&len_bytes), payload) == crc).then_some(at + HEADER + len)
}

/// Candidates checked for a run of valid frames after a bad length, at most.
const RESYNC_TRIES: usize = 8;

/// Damage in a segment's bytes, rather than a torn tail: the first bad frame (its offset,
/// the offset of a whole valid frame after it, and why it is bad).
///
/// A torn write leaves a frame cut short at the file's end, or a complete frame whose
/// bytes did not all land, with nothing whole after it. So: a complete frame that fails its
/// checksum and is followed, at its end, by a valid frame; or a frame whose length is bad
/// (it would run past the end) while a run of valid frames follows somewhere after it that
/// ends exactly at the file's end (found by walking the lengths back from the end, so the
/// search is linear). Records hookd writes are never empty, so a valid frame here has a
/// payload (a region of zeros never passes).
fn damage(bytes: &[u8]) -> Option<(u64, u64, &'static str)> {
    let mut at = 0usize;
    while let Some(end) = frame_end(bytes, at, true) {
        at = end;
    }
    if at >= bytes.len() {
        return None;
    }
    let len = bytes
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    if let Some(len) = len.filter(|l| *l <= MAX_RECORD && at + HEADER + l <= bytes.len()) {
        let next = at + HEADER + len;
        return valid_frame(bytes, next).map(|_| {
            (
                at as u64,
                next as u64,
                "a frame whose checksum does not match",
            )
        });
    }
    // The length itself is damaged: find where whole frames resume.
    let n = bytes.len();
    let mut reaches_end = vec![false; n + 1];
    reaches_end[n] = true;
    for p in (at + 1..n).rev() {
        let Some(h) = bytes.get(p..p + 4) else {
            continue;
        };
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let next = p + HEADER + len;
        if len > 0 && len <= MAX_RECORD && next <= n && reaches_end[next] {
            reaches_end[p] = true;
        }
    }
    (at + 1..n)
        .filter(|p| reaches_end[*p])
        .take(RESYNC_TRIES)
        .find(|p| {
            let mut q = *p;
            while q < n {
                match valid_frame(bytes, q) {
                    Some(end) => q = end,
                    None => return false,
                }
            }
            true
        })
        .map(|p| (at as u64, p as u64, "a frame whose length is damaged"))
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
        let log = Self::replay(dir, segment_bytes, from, |_, at, payload| {
            records.push((at, payload.to_vec()));
            Ok::<(), LogError>(())
        })?;
        Ok((log, records))
    }

    /// As [`Log::open`], handing each record from `from` on to `each` (in order, one
    /// segment in memory at a time) instead of collecting them: the first position of
    /// its segment, its own position and its payload.
    ///
    /// If the log ends before `from` (its files were lost, or never existed), appending
    /// starts in a new segment at `from`, so positions never go back below a checkpoint.
    pub fn replay<E: From<LogError>>(
        dir: Box<dyn LogDir>,
        segment_bytes: u64,
        from: Lsn,
        mut each: impl FnMut(Lsn, Lsn, &[u8]) -> Result<(), E>,
    ) -> Result<Self, E> {
        let dir: Arc<dyn LogDir> = Arc::from(dir);
        let mut segments = list(dir.as_ref())?;
        let count = segments.len();
        let mut tail = None;
        // Where the previous segment read ended, and its name.
        let mut previous: Option<(Lsn, &str)> = None;
        for (i, (start, name)) in segments.iter().enumerate() {
            let last = i + 1 == count;
            // A segment that ends before `from` need not be read (the next one starts
            // there or earlier); it is discarded at the next checkpoint.
            if segments.get(i + 1).is_some_and(|next| next.0 <= from) {
                continue;
            }
            match previous {
                Some((end, before)) if end != *start => {
                    return Err(LogError::Gap {
                        segment: before.to_owned(),
                        end,
                        next: name.clone(),
                        next_start: *start,
                    }
                    .into());
                }
                None if *start > from => {
                    return Err(LogError::Missing {
                        segment: name.clone(),
                        start: *start,
                        from,
                    }
                    .into());
                }
                _ => {}
            }
            let bytes = dir.read(name).map_err(LogError::from)?;
            // What lies before the checkpoint was synced whole and is in redb (and, being
            // the message heap, is read by position and checked against its pointer's
            // checksum): only what follows it is checked here, so that damage there is
            // never taken for a torn tail and cut away. The checkpoint is a frame boundary.
            let skip = usize::try_from(from.saturating_sub(*start))
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let (head, tail_bytes) = bytes.split_at(skip);
            let skip = head.len() as u64;
            // Damage in the last segment is refused before any record is handed over.
            if last && let Some((at, next, why)) = damage(tail_bytes) {
                return Err(LogError::Damaged {
                    segment: name.clone(),
                    at: start + skip + at,
                    next: start + skip + next,
                    why,
                }
                .into());
            }
            let segment = *start;
            let mut found = scan(tail_bytes, *start + skip, from, &mut |at, payload| {
                each(segment, at, payload)
            })?;
            found.valid += skip;
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
            previous = Some((start + found.valid, name));
            if last {
                tail = Some((*start, found.valid, bytes));
            }
        }
        let mut new_segment = false;
        let (start, valid, file) = match tail {
            Some((start, valid, bytes)) if start + valid >= from => {
                let name = &segments[segments.len() - 1].1;
                let mut file = dir.open(name, false).map_err(LogError::from)?;
                let len = bytes.len() as u64;
                // Cut the torn tail, durably, before anything is appended after it; and write
                // the records after the checkpoint again, so that pages a failed sync left
                // readable but unwritten (an earlier process's) reach the disk before they
                // are replayed and built on. Before the checkpoint, redb holds it all.
                let rewrite = from.saturating_sub(start).min(valid);
                if len != valid {
                    file.set_len(valid).map_err(LogError::from)?;
                }
                if rewrite < valid {
                    let (from_at, to_at) = (rewrite as usize, valid as usize);
                    file.write_at(rewrite, &bytes[from_at..to_at])
                        .map_err(LogError::from)?;
                }
                if len != valid || rewrite < valid {
                    file.sync_data().map_err(LogError::from)?;
                    dir.sync().map_err(LogError::from)?;
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
        let mut sized = Vec::with_capacity(segments.len());
        let mut sealed_bytes = 0;
        let last = segments.len().saturating_sub(1);
        for (i, (at, name)) in segments.into_iter().enumerate() {
            let len = if i == last {
                0
            } else {
                dir.size(&name).map_err(LogError::from)?
            };
            sealed_bytes += len;
            sized.push((at, name, len));
        }
        let mut log = Self {
            dir,
            segments: sized,
            sealed_bytes,
            file,
            written: valid,
            pending: Vec::new(),
            end: start + valid,
            segment_bytes: segment_bytes.max(HEADER as u64),
            new_segment,
            synced: valid,
            failed: None,
        };
        if log.new_segment {
            log.sync()?;
        }
        Ok(log)
    }

    /// Buffers one record; returns its position. Durable only after the next [`Log::sync`].
    pub fn append(&mut self, payload: &[u8]) -> Result<Lsn, LogError> {
        if let Some(why) = &self.failed {
            return Err(LogError::Failed(why.clone()));
        }
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
        self.sync()?;
        let name = segment_name(self.end);
        self.file = self.dir.open(&name, true)?;
        if let Some(last) = self.segments.last_mut() {
            last.2 = self.written;
            self.sealed_bytes += self.written;
        }
        self.segments.push((self.end, name, 0));
        self.written = 0;
        self.synced = 0;
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
    ///
    /// If it fails, what it wrote is cut off again (see the module doc) and the log refuses
    /// every later append and sync: it must be reopened.
    pub fn sync(&mut self) -> Result<(), LogError> {
        if let Some(why) = &self.failed {
            return Err(LogError::Failed(why.clone()));
        }
        let result = (|| {
            self.write_pending()?;
            self.file.sync_data()?;
            if self.new_segment {
                self.dir.sync()?;
                self.new_segment = false;
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.synced = self.written;
                Ok(())
            }
            Err(e) => {
                self.cut_unsynced(&e);
                Err(e)
            }
        }
    }

    /// After a failed sync: Linux may keep the pages it failed to write readable (and never
    /// write them), so the segment is cut back to what this process saw synced, durably,
    /// before anything reads or appends. If that fails too, the next open writes again
    /// what it trusts before relying on it.
    fn cut_unsynced(&mut self, e: &LogError) {
        self.failed = Some(e.to_string());
        self.pending.clear();
        let start = self.segments.last().map_or(0, |s| s.0);
        let cut = (|| {
            self.file.set_len(self.synced)?;
            self.file.sync_data()
        })();
        match cut {
            Ok(()) => tracing::info!(
                at = start + self.synced,
                "cut the log back to its last synced record after the failed sync"
            ),
            Err(cut) => tracing::warn!(
                error = %cut,
                at = start + self.synced,
                "could not cut the log back after the failed sync; reopening writes its records again"
            ),
        }
        self.written = self.synced;
        self.end = start + self.synced;
    }

    /// The position the next record will have.
    pub fn end(&self) -> Lsn {
        self.end
    }

    /// Deletes the segments that hold only records before `lsn` (tests: the layout before
    /// the log was the message heap). The current segment is kept.
    #[cfg(test)]
    pub(crate) fn discard_before(&mut self, lsn: Lsn) -> Result<usize, LogError> {
        let mut removed = 0;
        while self.segments.len() > 1 && self.segments[1].0 <= lsn {
            let start = self.segments[0].0;
            self.remove_segment(start)?;
            removed += 1;
        }
        Ok(removed)
    }

    /// Deletes the segment starting at `start` (never the current one): its records are
    /// applied and checkpointed, nothing live points into it and retention let it go (the
    /// apply stage decides, `pipeline::reclaim`). Whether it was there.
    pub(crate) fn remove_segment(&mut self, start: Lsn) -> Result<bool, LogError> {
        let last = self.segments.len().saturating_sub(1);
        let Some(i) = self.segments[..last].iter().position(|s| s.0 == start) else {
            return Ok(false);
        };
        let (_, name, len) = self.segments.remove(i);
        self.sealed_bytes -= len;
        self.dir.remove(&name)?;
        Ok(true)
    }

    /// The position the first segment starts at.
    pub fn first(&self) -> Lsn {
        self.segments[0].0
    }

    /// The position the current segment starts at.
    pub(crate) fn segment(&self) -> Lsn {
        self.segments.last().map_or(0, |s| s.0)
    }

    /// Every segment: its first position and its length (the current one's so far).
    pub(crate) fn segments(&self) -> Vec<(Lsn, u64)> {
        let last = self.segments.len().saturating_sub(1);
        self.segments
            .iter()
            .enumerate()
            .map(|(i, s)| (s.0, if i == last { self.written } else { s.2 }))
            .collect()
    }

    /// The directory, shared with the readers of payloads.
    pub(crate) fn dir(&self) -> Arc<dyn LogDir> {
        self.dir.clone()
    }

    /// Bytes the log's segments hold (what is written; the buffer is not counted).
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.sealed_bytes + self.written
    }
}

/// What `hookd repair` would do to a log that does not open: where it cuts, and every
/// record that drops with what follows.
#[derive(Debug, Default)]
pub struct RepairPlan {
    /// Why the log does not open as it is (none: it opens, there is nothing to do).
    pub problem: Option<String>,
    /// The segment cut, and the offset in it where it is cut.
    pub cut: Option<(String, u64)>,
    /// Segments deleted whole (everything after the cut).
    pub remove: Vec<String>,
    /// The whole records after the checkpoint that the cut drops: position and payload.
    pub dropped: Vec<Record>,
    /// Bytes the cut and the deletions take off the log.
    pub dropped_bytes: u64,
    /// The damaged record itself, as read (its checksum failed: what it says may be wrong).
    pub damaged: Option<Record>,
}

/// The whole frames in `bytes` from `at` on, walking from one to the next.
fn frames_from(bytes: &[u8], mut at: usize, start: Lsn, out: &mut Vec<Record>) {
    while let Some(end) = frame_end(bytes, at, true) {
        out.push((start + at as u64, bytes[at + HEADER..end].to_vec()));
        at = end;
    }
}

/// Works out the repair of the log in `dir` for a store checkpointed at `from`: the log is
/// cut at its first damage (a bad frame anywhere, a segment that ends short of the next, a
/// torn tail), and every segment after it goes. Reads only.
pub fn plan_repair(dir: &dyn LogDir, from: Lsn) -> Result<RepairPlan, LogError> {
    let segments = list(dir)?;
    let mut plan = RepairPlan::default();
    let mut previous: Option<Lsn> = None;
    for (i, (start, name)) in segments.iter().enumerate() {
        if plan.cut.is_some() {
            let bytes = dir.read(name)?;
            plan.dropped_bytes += bytes.len() as u64;
            frames_from(&bytes, 0, *start, &mut plan.dropped);
            plan.remove.push(name.clone());
            continue;
        }
        if segments.get(i + 1).is_some_and(|next| next.0 <= from) {
            continue;
        }
        if previous.is_none() && *start > from {
            return Err(LogError::Missing {
                segment: name.clone(),
                start: *start,
                from,
            });
        }
        if let Some(end) = previous.filter(|end| end != start) {
            // The previous segment ends early: the log ends there; this one and the rest go.
            plan.problem = Some(
                LogError::Gap {
                    segment: segments[i - 1].1.clone(),
                    end,
                    next: name.clone(),
                    next_start: *start,
                }
                .to_string(),
            );
            let bytes = dir.read(name)?;
            plan.cut = Some((segments[i - 1].1.clone(), end - segments[i - 1].0));
            plan.dropped_bytes += bytes.len() as u64;
            frames_from(&bytes, 0, *start, &mut plan.dropped);
            plan.remove.push(name.clone());
            continue;
        }
        let bytes = dir.read(name)?;
        // As at open: only what follows the checkpoint is checked (what precedes it holds
        // live messages' records, never cut).
        let skip = usize::try_from(from.saturating_sub(*start))
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        let mut found = scan(
            &bytes[skip..],
            *start + skip as u64,
            u64::MAX,
            &mut |_, _| Ok::<(), LogError>(()),
        )?;
        found.valid += skip as u64;
        previous = Some(start + found.valid);
        if let Some(why) = found.bad {
            let damaged = damage(&bytes[skip..])
                .map(|(at, next, why)| (at + skip as u64, next + skip as u64, why));
            plan.problem = Some(match damaged {
                Some((at, next, why)) => LogError::Damaged {
                    segment: name.clone(),
                    at: start + at,
                    next: start + next,
                    why,
                }
                .to_string(),
                None => format!(
                    "segment {name} ends in a torn write at position {} ({why})",
                    start + found.valid
                ),
            });
            plan.cut = Some((name.clone(), found.valid));
            plan.dropped_bytes += bytes.len() as u64 - found.valid;
            if let Some((at, next, _)) = damaged {
                let (at, next) = (at as usize, next as usize);
                if next - at > HEADER {
                    plan.damaged = Some((start + at as u64, bytes[at + HEADER..next].to_vec()));
                }
                frames_from(&bytes, next, *start, &mut plan.dropped);
            }
        }
    }
    plan.dropped.retain(|(at, _)| *at >= from);
    plan.damaged = plan.damaged.filter(|(at, _)| *at >= from);
    Ok(plan)
}

/// Carries out a [`RepairPlan`]: cuts the segment, deletes the ones after it, and syncs
/// both the file and the directory.
pub fn repair(dir: &dyn LogDir, plan: &RepairPlan) -> Result<(), LogError> {
    if let Some((name, at)) = &plan.cut {
        let mut file = dir.open(name, false)?;
        file.set_len(*at)?;
        file.sync_data()?;
    }
    for name in &plan.remove {
        dir.remove(name)?;
    }
    dir.sync()?;
    Ok(())
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

    /// The error opening the log fails with (a test failure, briefly, if it opens).
    fn refused(dir: &Path, segment: u64) -> String {
        match open(dir, segment, 0) {
            Ok((log, records)) => panic!(
                "the log opened: {} records, appending at {}",
                records.len(),
                log.end()
            ),
            Err(e) => e.to_string(),
        }
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
        let err = refused(dir.path(), 2_000);
        assert!(err.contains("checksum does not match"), "{err}");
        // The same in the last segment's last frame (nothing whole after it, as a torn
        // write leaves it): the log ends there. With frames after it, see
        // `a_damaged_frame_with_whole_frames_after_it_refuses_to_open`.
        std::fs::write(first, {
            bytes[HEADER + 20] ^= 0xff;
            &bytes
        })
        .unwrap();
        let (_, all) = open(dir.path(), 2_000, 0).unwrap();
        let last_at = all.last().unwrap().0;
        let last = &segments[segments.len() - 1];
        assert!(last_at > last.0);
        let last_path = dir.path().join(&last.1);
        let mut bytes = std::fs::read(&last_path).unwrap();
        bytes[(last_at - last.0) as usize + HEADER] ^= 0xff;
        std::fs::write(&last_path, &bytes).unwrap();
        let (_, back) = open(dir.path(), 2_000, 0).unwrap();
        assert_eq!(back.len(), all.len() - 1);
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

    /// Issue #26, 2: a flipped byte with whole frames after it is damage, not a torn tail.
    #[test]
    fn a_damaged_frame_with_whole_frames_after_it_refuses_to_open() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(100);
        let at = write_all(dir.path(), 1 << 20, &recs);
        let path = segment_path(dir.path(), 0);
        let mut bytes = std::fs::read(&path).unwrap();
        // A payload byte of record 60 (39 whole records follow it).
        let flip = at[60] as usize + HEADER + 3;
        bytes[flip] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let err = refused(dir.path(), 1 << 20);
        assert!(
            err.contains("wal-00000000000000000000.log") && err.contains(&at[60].to_string()),
            "{err}"
        );
        assert!(err.contains("hookd repair"), "{err}");
        // Nothing was cut: every byte is still there for the operator.
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
        // A length byte flipped: the frame seems to run past the file's end.
        bytes[flip] ^= 0x01;
        bytes[at[60] as usize + 2] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let err = refused(dir.path(), 1 << 20);
        assert!(err.contains(&at[60].to_string()), "{err}");
    }

    /// Issue #26, 3: each segment must end where the next begins.
    #[test]
    fn a_segment_cut_short_or_missing_refuses_to_open_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(300);
        let at = write_all(dir.path(), 2_000, &recs);
        let segments = list(&OsDir::new(dir.path()).unwrap()).unwrap();
        assert!(segments.len() >= 5);
        // An earlier segment cut short at a frame boundary.
        let second = dir.path().join(&segments[1].1);
        let whole = std::fs::read(&second).unwrap();
        let boundary = at
            .iter()
            .rfind(|a| **a > segments[1].0 && **a < segments[2].0)
            .map(|a| (a - segments[1].0) as usize)
            .unwrap();
        std::fs::write(&second, &whole[..boundary]).unwrap();
        let err = refused(dir.path(), 2_000);
        assert!(
            err.contains(&segments[1].1) && err.contains(&segments[2].1),
            "{err}"
        );
        std::fs::write(&second, &whole).unwrap();
        open(dir.path(), 2_000, 0).unwrap();
        // A middle segment deleted.
        std::fs::remove_file(dir.path().join(&segments[2].1)).unwrap();
        let err = refused(dir.path(), 2_000);
        assert!(
            err.contains(&segments[1].1) && err.contains(&segments[3].1),
            "{err}"
        );
    }

    /// Issue #26, 1: a failed sync cuts the segment back to what was synced, durably, and
    /// the log takes nothing more until it is reopened.
    #[test]
    fn a_failed_sync_cuts_the_unsynced_records_off_and_refuses_more() {
        use crate::store::power_loss::PowerLossFs;
        let fs = PowerLossFs::default();
        let (mut log, _) = Log::open(Box::new(fs.clone()), 1 << 20, 0).unwrap();
        log.append(b"synced").unwrap();
        log.sync().unwrap();
        let synced = fs.snapshot()[&segment_name(0)].clone();
        log.append(b"never synced").unwrap();
        fs.fail_syncs(true);
        assert!(log.sync().is_err());
        fs.fail_syncs(false);
        assert!(matches!(log.append(b"x"), Err(LogError::Failed(_))));
        assert!(matches!(log.sync(), Err(LogError::Failed(_))));
        drop(log);
        // What a reopening reads (the page cache included) and what the disk holds agree.
        assert_eq!(fs.snapshot()[&segment_name(0)], synced);
        assert_eq!(fs.crash_image()[&segment_name(0)], synced);
        let (_, back) = Log::open(Box::new(fs), 1 << 20, 0).unwrap();
        assert_eq!(back.len(), 1);
    }

    /// Issue #26, 1: a process that could not cut its failed sync off (it died, or the cut
    /// failed too) leaves pages that read back but are not on disk; the next open writes
    /// them again and syncs them before it hands them over.
    #[test]
    fn an_open_makes_the_records_it_replays_durable() {
        use crate::store::power_loss::PowerLossFs;
        let fs = PowerLossFs::default();
        let mut file = LogDir::open(&fs, &segment_name(0), true).unwrap();
        LogDir::sync(&fs).unwrap();
        let mut bytes = Vec::new();
        frame(b"one", &mut bytes);
        file.write_at(0, &bytes).unwrap();
        file.sync_data().unwrap();
        let mut more = Vec::new();
        frame(b"two: its sync failed", &mut more);
        file.write_at(bytes.len() as u64, &more).unwrap();
        fs.fail_syncs(true);
        assert!(file.sync_data().is_err());
        fs.fail_syncs(false);
        let (mut log, back) = Log::open(Box::new(fs.clone()), 1 << 20, 0).unwrap();
        assert_eq!(back.len(), 2, "the cached record reads back");
        log.append(b"three").unwrap();
        log.sync().unwrap();
        let (_, after_cut) = Log::open(
            Box::new(PowerLossFs::with_image(fs.crash_image())),
            1 << 20,
            0,
        )
        .unwrap();
        let payloads: Vec<_> = after_cut.into_iter().map(|r| r.1).collect();
        assert_eq!(
            payloads,
            [&b"one"[..], b"two: its sync failed", b"three"],
            "no hole on disk"
        );
    }

    /// `hookd repair`'s plan names what it drops, and after it the log opens.
    #[test]
    fn repair_cuts_at_the_damage_and_says_what_it_drops() {
        let dir = tempfile::tempdir().unwrap();
        let recs = records(100);
        let at = write_all(dir.path(), 1 << 20, &recs);
        let path = segment_path(dir.path(), 0);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at[60] as usize + HEADER + 3] ^= 0x01;
        std::fs::write(&path, &bytes).unwrap();
        let os = OsDir::new(dir.path()).unwrap();
        let plan = plan_repair(&os, 0).unwrap();
        assert!(plan.problem.as_deref().unwrap().contains("damaged"));
        assert_eq!(plan.cut, Some((segment_name(0), at[60])));
        // Record 60 is bad; the 39 after it are whole and drop with it.
        assert_eq!(plan.dropped.len(), 39);
        assert_eq!(plan.dropped[0].0, at[61]);
        // A checkpoint before the damage: only the records after it are counted.
        assert_eq!(plan_repair(&os, at[50]).unwrap().dropped.len(), 39);
        // A checkpoint after the damage: the damaged record is checkpointed (redb holds
        // its changes; as the message heap, its bytes are checked against the pointer
        // that names them when read), so the log is whole from there and nothing is cut.
        assert!(plan_repair(&os, at[90]).unwrap().problem.is_none());
        let (_, back) = open(dir.path(), 1 << 20, at[90]).unwrap();
        assert_eq!(back.len(), 10);
        repair(&os, &plan).unwrap();
        let (_, back) = open(dir.path(), 1 << 20, 0).unwrap();
        assert_eq!(back.len(), 60);
        assert!(plan_repair(&os, 0).unwrap().problem.is_none());
        // A gap: the log ends where the segments stop following on.
        let dir = tempfile::tempdir().unwrap();
        write_all(dir.path(), 2_000, &records(300));
        let os = OsDir::new(dir.path()).unwrap();
        let segments = list(&os).unwrap();
        std::fs::remove_file(dir.path().join(&segments[2].1)).unwrap();
        let plan = plan_repair(&os, 0).unwrap();
        assert_eq!(plan.remove.len(), segments.len() - 3);
        repair(&os, &plan).unwrap();
        open(dir.path(), 2_000, 0).unwrap();
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
