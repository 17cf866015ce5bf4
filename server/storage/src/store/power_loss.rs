//! A file system that loses power: what a test uses to prove that hookd answers only after
//! its data is synced, in the redb file and in the write-ahead log alike.
//!
//! `kill -9` cannot show a missing fsync: the kernel's page cache outlives the process, so
//! an unsynced write still reaches the file. [`PowerLossFs`] keeps, for every file, what
//! reads see (every write lands there at once) apart from what a power cut would leave
//! (what its last `sync_data` made durable), as redb's own crash-consistency tests do; and
//! for the directory, the names a directory sync made durable apart from the files created
//! and removed since. A crash image ([`Cut::image`]) is the durable state, optionally with
//! a random subset of what happened since each last sync: writes that reached the disk in
//! any order, a write torn part-way, a truncation, a directory entry created or removed.
//!
//! The redb file is one of its files ([`PowerLossFs::backend`], a redb storage backend);
//! the log uses it as its [`LogDir`]. An observer set by the test is called at the start of
//! every sync of any file or of the directory, with the state a cut at that instant would
//! leave, before the sync makes anything new durable. For tests only: the `hookd` binary never
//! calls it, and its linker leaves it out (`.ci/no-test-hooks`).
//!
//! It also fails syncs as Linux does ([`PowerLossFs::fail_syncs`]): a failed `fdatasync`
//! on ext4 or XFS marks the pages it could not write clean, so their new contents stay
//! readable (a reopened file, even a new process, reads them back) but never reach the disk,
//! and a later sync that succeeds does not write them either. They are gone at the next
//! power cut, or when the kernel evicts them ([`PowerLossFs::evict`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use rand::RngExt;
use rand::rngs::StdRng;
use redb::StorageBackend;

use crate::wal::{LogDir, LogFile};

/// A change to a file since its last sync.
#[derive(Debug, Clone)]
enum Op {
    Write(u64, Vec<u8>),
    SetLen(u64),
}

#[derive(Debug, Clone, Default)]
struct File {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<Op>,
}

/// A whole file system as a power cut left it: file name to bytes.
pub type Image = BTreeMap<String, Vec<u8>>;

type Observer = Box<dyn FnMut(&Cut<'_>) + Send>;

#[derive(Default)]
struct Fs {
    files: BTreeMap<String, File>,
    /// Names as reads see them.
    live: BTreeSet<String>,
    /// Names a directory sync made durable.
    durable: BTreeSet<String>,
    /// Created (true) or removed (false) since the last directory sync, in order.
    dir_pending: Vec<(String, bool)>,
    syncs: u64,
    /// While set, every sync fails and its changes are dropped from what may reach the
    /// disk, while reads still see them.
    fail_syncs: bool,
    observer: Option<Observer>,
}

/// What a power cut at one instant would leave.
pub struct Cut<'a> {
    /// 1 for the first sync of the file system's life.
    pub sync: u64,
    /// The file being synced, or `None` for the directory.
    pub file: Option<&'a str>,
    fs: &'a Fs,
}

impl std::fmt::Debug for Cut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cut")
            .field("sync", &self.sync)
            .field("file", &self.file)
            .finish()
    }
}

impl Cut<'_> {
    /// The files after a cut. With `rng`, each change made since its last sync reached
    /// the disk or not at random (a write possibly only in part); without, none did.
    pub fn image(&self, mut rng: Option<&mut StdRng>) -> Image {
        let fs = self.fs;
        let mut names = fs.durable.clone();
        for (name, created) in &fs.dir_pending {
            if rng.as_mut().is_some_and(|r| r.random_bool(0.5)) {
                if *created {
                    names.insert(name.clone());
                } else {
                    names.remove(name);
                }
            }
        }
        let mut image = Image::new();
        for name in names {
            let Some(file) = fs.files.get(&name) else {
                continue;
            };
            let mut bytes = file.durable.clone();
            if let Some(rng) = rng.as_mut() {
                for op in &file.pending {
                    if !rng.random_bool(0.5) {
                        continue;
                    }
                    match op {
                        Op::SetLen(len) => bytes.resize(*len as usize, 0),
                        Op::Write(at, data) => {
                            // One in four reached writes is torn: only a prefix landed.
                            let n = if rng.random_bool(0.25) {
                                rng.random_range(0..=data.len())
                            } else {
                                data.len()
                            };
                            let (at, end) = (*at as usize, *at as usize + n);
                            if bytes.len() < end {
                                bytes.resize(end, 0);
                            }
                            bytes[at..end].copy_from_slice(&data[..n]);
                        }
                    }
                }
            }
            image.insert(name, bytes);
        }
        image
    }
}

/// The file system a test holds; clones share it.
#[derive(Clone, Default)]
pub struct PowerLossFs {
    fs: Arc<Mutex<Fs>>,
}

impl std::fmt::Debug for PowerLossFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fs = self.lock();
        f.debug_struct("PowerLossFs")
            .field("files", &fs.live)
            .field("syncs", &fs.syncs)
            .finish()
    }
}

fn injected() -> io::Error {
    io::Error::other("injected fault: fsync failed (its pages stay readable, never written)")
}

/// Performs one change on a file's bytes.
fn apply(bytes: &mut Vec<u8>, op: &Op) {
    match op {
        Op::SetLen(len) => bytes.resize(*len as usize, 0),
        Op::Write(at, data) => {
            let (at, end) = (*at as usize, *at as usize + data.len());
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[at..end].copy_from_slice(data);
        }
    }
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no file {name}"))
}

impl PowerLossFs {
    /// A file system holding `image`, all of it durable (as found after a restart).
    pub fn with_image(image: Image) -> Self {
        let fs = Self::default();
        {
            let mut f = fs.lock();
            for (name, bytes) in image {
                f.live.insert(name.clone());
                f.durable.insert(name.clone());
                f.files.insert(
                    name,
                    File {
                        live: bytes.clone(),
                        durable: bytes,
                        pending: Vec::new(),
                    },
                );
            }
        }
        fs
    }

    /// A file system with one empty file, durably created.
    pub fn with_file(name: &str) -> Self {
        Self::with_image(Image::from([(name.to_owned(), Vec::new())]))
    }

    /// The file `name` as a redb storage backend (it must exist).
    pub fn backend(&self, name: &str) -> PowerLossFile {
        PowerLossFile {
            fs: self.clone(),
            name: name.to_owned(),
        }
    }

    /// Calls `observer` at the start of every later sync (see [`Cut`]). It runs on the
    /// thread that syncs, with the file system locked: it must not touch it.
    pub fn observe(&self, observer: impl FnMut(&Cut<'_>) + Send + 'static) {
        self.lock().observer = Some(Box::new(observer));
    }

    /// The state now, all of it treated as durable (tests: what a clean stop leaves).
    pub fn snapshot(&self) -> Image {
        let fs = self.lock();
        fs.live
            .iter()
            .filter_map(|n| fs.files.get(n).map(|f| (n.clone(), f.live.clone())))
            .collect()
    }

    /// While `on`, every sync (of a file or of the directory) fails as Linux's do: what it
    /// should have made durable stays readable but is never written (see the module doc).
    pub fn fail_syncs(&self, on: bool) {
        self.lock().fail_syncs = on;
    }

    /// What a power cut now would leave: the durable bytes and names only.
    pub fn crash_image(&self) -> Image {
        let fs = self.lock();
        Cut {
            sync: fs.syncs,
            file: None,
            fs: &fs,
        }
        .image(None)
    }

    /// The kernel drops its cached pages: every file reads back as the disk holds it, with
    /// the changes still waiting for a sync (dirty pages are not dropped), but without those a
    /// failed sync lost.
    pub fn evict(&self) {
        let mut fs = self.lock();
        let fs = &mut *fs;
        for file in fs.files.values_mut() {
            let mut bytes = file.durable.clone();
            for op in &file.pending {
                apply(&mut bytes, op);
            }
            file.live = bytes;
        }
        let mut names = fs.durable.clone();
        for (name, created) in &fs.dir_pending {
            if *created {
                names.insert(name.clone());
            } else {
                names.remove(name);
            }
        }
        fs.live = names;
    }

    /// Syncs so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// A poisoned lock only means another test thread panicked; the bytes are intact.
    fn lock(&self) -> MutexGuard<'_, Fs> {
        self.fs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs the observer, then `make_durable`.
    fn sync(&self, file: Option<&str>, make_durable: impl FnOnce(&mut Fs)) {
        let mut guard = self.lock();
        let fs = &mut *guard;
        fs.syncs += 1;
        if let Some(mut observer) = fs.observer.take() {
            observer(&Cut {
                sync: fs.syncs,
                file,
                fs,
            });
            fs.observer = Some(observer);
        }
        make_durable(fs);
    }

    fn write(&self, name: &str, at: u64, data: &[u8]) -> io::Result<()> {
        let mut fs = self.lock();
        let file = fs.files.get_mut(name).ok_or_else(|| not_found(name))?;
        let start = usize::try_from(at).map_err(io::Error::other)?;
        let end = start + data.len();
        if file.live.len() < end {
            file.live.resize(end, 0);
        }
        file.live[start..end].copy_from_slice(data);
        file.pending.push(Op::Write(at, data.to_vec()));
        Ok(())
    }

    fn set_len(&self, name: &str, len: u64) -> io::Result<()> {
        let mut fs = self.lock();
        let file = fs.files.get_mut(name).ok_or_else(|| not_found(name))?;
        file.live
            .resize(usize::try_from(len).map_err(io::Error::other)?, 0);
        file.pending.push(Op::SetLen(len));
        Ok(())
    }

    fn sync_file(&self, name: &str) -> io::Result<()> {
        if !self.lock().files.contains_key(name) {
            return Err(not_found(name));
        }
        let mut failed = false;
        self.sync(Some(name), |fs| {
            failed = fs.fail_syncs;
            if let Some(file) = fs.files.get_mut(name) {
                // A failed sync's pages are marked clean: no later sync writes them.
                let pending = std::mem::take(&mut file.pending);
                if !failed {
                    for op in &pending {
                        apply(&mut file.durable, op);
                    }
                }
            }
        });
        if failed {
            return Err(injected());
        }
        Ok(())
    }
}

impl LogDir for PowerLossFs {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.lock().live.iter().cloned().collect())
    }

    fn read(&self, name: &str) -> io::Result<Vec<u8>> {
        let fs = self.lock();
        if !fs.live.contains(name) {
            return Err(not_found(name));
        }
        Ok(fs
            .files
            .get(name)
            .map(|f| f.live.clone())
            .unwrap_or_default())
    }

    fn read_at(&self, name: &str, at: u64, len: usize) -> io::Result<Vec<u8>> {
        let fs = self.lock();
        if !fs.live.contains(name) {
            return Err(not_found(name));
        }
        let at = usize::try_from(at).map_err(|_| out_of_range())?;
        fs.files
            .get(name)
            .and_then(|f| f.live.get(at..at + len))
            .map(<[u8]>::to_vec)
            .ok_or_else(out_of_range)
    }

    fn size(&self, name: &str) -> io::Result<u64> {
        let fs = self.lock();
        if !fs.live.contains(name) {
            return Err(not_found(name));
        }
        Ok(fs.files.get(name).map_or(0, |f| f.live.len() as u64))
    }

    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn LogFile>> {
        let mut fs = self.lock();
        let exists = fs.live.contains(name);
        match (create, exists) {
            (true, true) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{name} exists"),
                ));
            }
            (false, false) => return Err(not_found(name)),
            (true, false) => {
                fs.live.insert(name.to_owned());
                fs.dir_pending.push((name.to_owned(), true));
                fs.files.insert(name.to_owned(), File::default());
            }
            (false, true) => {}
        }
        Ok(Box::new(self.backend(name)))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut fs = self.lock();
        if !fs.live.remove(name) {
            return Err(not_found(name));
        }
        fs.dir_pending.push((name.to_owned(), false));
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut failed = false;
        PowerLossFs::sync(self, None, |fs| {
            failed = fs.fail_syncs;
            if failed {
                // The entries stay as reads see them; the disk keeps its old ones.
                fs.dir_pending.clear();
                return;
            }
            fs.durable.clone_from(&fs.live);
            fs.dir_pending.clear();
            // A file neither visible nor durable is gone for good.
            let (live, durable) = (&fs.live, &fs.durable);
            fs.files
                .retain(|n, _| live.contains(n) || durable.contains(n));
        });
        if failed {
            return Err(injected());
        }
        Ok(())
    }
}

/// One file of a [`PowerLossFs`]: a redb backend, and a log segment.
#[derive(Debug, Clone)]
pub struct PowerLossFile {
    fs: PowerLossFs,
    name: String,
}

impl LogFile for PowerLossFile {
    fn write_at(&mut self, at: u64, data: &[u8]) -> io::Result<()> {
        self.fs.write(&self.name, at, data)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.fs.set_len(&self.name, len)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.fs.sync_file(&self.name)
    }
}

fn out_of_range() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end")
}

impl StorageBackend for PowerLossFile {
    fn len(&self) -> Result<u64, io::Error> {
        let fs = self.fs.lock();
        let file = fs
            .files
            .get(&self.name)
            .ok_or_else(|| not_found(&self.name))?;
        Ok(file.live.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        let fs = self.fs.lock();
        let file = fs
            .files
            .get(&self.name)
            .ok_or_else(|| not_found(&self.name))?;
        let at = usize::try_from(offset).map_err(|_| out_of_range())?;
        let bytes = file.live.get(at..at + out.len()).ok_or_else(out_of_range)?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.fs.set_len(&self.name, len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        self.fs.sync_file(&self.name)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.fs.write(&self.name, offset, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn only_synced_bytes_and_names_survive_a_cut() {
        let fs = PowerLossFs::with_file("db");
        let cuts = Arc::new(Mutex::new(Vec::new()));
        fs.observe({
            let cuts = cuts.clone();
            move |cut| cuts.lock().unwrap().push(cut.image(None))
        });
        let db = fs.backend("db");
        db.write(0, b"abcd").unwrap();
        db.sync_data().unwrap(); // cut 1
        db.write(2, b"XY").unwrap();
        let mut log = LogDir::open(&fs, "wal", true).unwrap();
        log.write_at(0, b"rec").unwrap();
        log.sync_data().unwrap(); // cut 2: the log's name is not durable yet
        LogDir::sync(&fs).unwrap(); // cut 3: nor before this sync
        LogDir::remove(&fs, "wal").unwrap();
        db.sync_data().unwrap(); // cut 4: the removal is not durable yet
        let mut out = [0u8; 4];
        db.read(0, &mut out).unwrap();
        assert_eq!(&out, b"abXY", "reads see every write at once");
        let cuts = cuts.lock().unwrap();
        assert_eq!(cuts[0], Image::from([("db".into(), vec![])]));
        assert_eq!(cuts[1], Image::from([("db".into(), b"abcd".to_vec())]));
        assert!(!cuts[1].contains_key("wal") && !cuts[2].contains_key("wal"));
        assert_eq!(
            cuts[3]["wal"], b"rec",
            "synced, named, and removed only in memory"
        );
        assert_eq!(cuts[3]["db"], b"abcd");
        assert!(!LogDir::list(&fs).unwrap().contains(&"wal".to_owned()));
    }

    #[test]
    fn a_random_cut_keeps_the_durable_bytes_and_any_mix_of_the_rest() {
        let fs = PowerLossFs::with_file("db");
        let seen = Arc::new(Mutex::new(BTreeSet::new()));
        fs.observe({
            let seen = seen.clone();
            let mut rng = StdRng::seed_from_u64(7);
            move |cut| {
                for _ in 0..200 {
                    let image = cut.image(Some(&mut rng));
                    seen.lock().unwrap().insert(image["db"].clone());
                }
            }
        });
        let db = fs.backend("db");
        db.write(0, b"aaaa").unwrap();
        db.sync_data().unwrap();
        db.write(0, b"bb").unwrap();
        db.write(2, b"cc").unwrap();
        db.sync_data().unwrap();
        let seen = seen.lock().unwrap();
        for whole in [&b"aaaa"[..], b"bbaa", b"aacc", b"bbcc"] {
            assert!(seen.contains(whole), "{:?}", String::from_utf8_lossy(whole));
        }
        assert!(
            seen.contains(&b"baaa"[..]),
            "a torn write: only a prefix landed"
        );
    }

    #[test]
    fn a_failed_sync_keeps_its_bytes_readable_but_never_durable() {
        let fs = PowerLossFs::with_file("db");
        let db = fs.backend("db");
        db.write(0, b"aaaa").unwrap();
        db.sync_data().unwrap();
        db.write(0, b"bb").unwrap();
        fs.fail_syncs(true);
        assert!(db.sync_data().is_err());
        fs.fail_syncs(false);
        let mut out = [0u8; 4];
        db.read(0, &mut out).unwrap();
        assert_eq!(&out, b"bbaa", "the failed pages read back");
        db.write(2, b"cc").unwrap();
        db.sync_data().unwrap();
        assert_eq!(
            fs.crash_image()["db"],
            b"aacc",
            "a later sync does not write the failed pages"
        );
        fs.evict();
        db.read(0, &mut out).unwrap();
        assert_eq!(&out, b"aacc", "evicted: reads see the disk");
    }
}
