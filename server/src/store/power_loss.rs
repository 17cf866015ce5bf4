//! A storage backend that loses power: what a test uses to prove that hookd answers only
//! after its data is synced.
//!
//! `kill -9` cannot show a missing fsync: the kernel's page cache outlives the process, so
//! an unsynced write still reaches the file. [`PowerLossDisk`] keeps two images of the file
//! apart, as redb's own crash-consistency tests do: `live`, what reads see (every write
//! lands there at once), and `durable`, what a power cut would leave. Only `sync_data`
//! copies `live` to `durable`. A crash image is `durable`, optionally with a random subset
//! of the writes made since the last sync (a cut in the middle of a write-back, in any
//! order the disk chose).
//!
//! An observer (set by the test) is called at the start of every sync with the crash
//! image a power cut at that instant would leave, before the sync makes anything new
//! durable. Test-only: compiled with `cfg(test)` or the `test-util` feature.

use std::sync::{Arc, Mutex, MutexGuard};

use redb::StorageBackend;

/// What a power cut at one instant leaves, and what was in flight then.
#[derive(Debug)]
pub struct CutPoint<'a> {
    /// 1 for the first sync of the backend's life.
    pub sync: u64,
    /// The bytes made durable by the syncs before this one.
    pub durable: &'a [u8],
    /// Writes since the last sync, oldest first: each may or may not have reached the disk.
    pub pending: &'a [(u64, Vec<u8>)],
}

impl CutPoint<'_> {
    /// The file after a cut: the durable bytes, and of the pending writes those for which
    /// `reached` says yes (applied in order, so a later write over an earlier one wins).
    pub fn image(&self, mut reached: impl FnMut(usize) -> bool) -> Vec<u8> {
        let mut image = self.durable.to_vec();
        for (i, (offset, data)) in self.pending.iter().enumerate() {
            if !reached(i) {
                continue;
            }
            let Ok(at) = usize::try_from(*offset) else {
                continue;
            };
            let end = at + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[at..end].copy_from_slice(data);
        }
        image
    }
}

type Observer = Box<dyn FnMut(&CutPoint<'_>) + Send>;

#[derive(Default)]
struct Disk {
    live: Vec<u8>,
    durable: Vec<u8>,
    pending: Vec<(u64, Vec<u8>)>,
    syncs: u64,
    observer: Option<Observer>,
}

/// The disk a test holds; the backend given to redb is a clone. Clones share the disk.
#[derive(Clone, Default)]
pub struct PowerLossDisk {
    disk: Arc<Mutex<Disk>>,
}

impl std::fmt::Debug for PowerLossDisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let disk = self.lock();
        f.debug_struct("PowerLossDisk")
            .field("live_len", &disk.live.len())
            .field("durable_len", &disk.durable.len())
            .field("syncs", &disk.syncs)
            .finish()
    }
}

impl PowerLossDisk {
    /// A disk holding `image`, all of it durable (a file as found after a restart).
    pub fn with_image(image: Vec<u8>) -> Self {
        let disk = Self::default();
        {
            let mut d = disk.lock();
            d.durable.clone_from(&image);
            d.live = image;
        }
        disk
    }

    /// Calls `observer` at the start of every later sync (see [`CutPoint`]). It runs on
    /// the thread that syncs, with the disk locked: it must not touch this disk.
    pub fn observe(&self, observer: impl FnMut(&CutPoint<'_>) + Send + 'static) {
        self.lock().observer = Some(Box::new(observer));
    }

    /// Syncs so far.
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// A poisoned lock only means another test thread panicked; the bytes are intact.
    fn lock(&self) -> MutexGuard<'_, Disk> {
        self.disk
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn out_of_range() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "read past the end")
}

impl StorageBackend for PowerLossDisk {
    fn len(&self) -> Result<u64, std::io::Error> {
        Ok(self.lock().live.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        let disk = self.lock();
        let at = usize::try_from(offset).map_err(|_| out_of_range())?;
        let bytes = disk.live.get(at..at + out.len()).ok_or_else(out_of_range)?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        let len = usize::try_from(len).map_err(std::io::Error::other)?;
        self.lock().live.resize(len, 0);
        Ok(())
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        let mut guard = self.lock();
        let disk = &mut *guard;
        disk.syncs += 1;
        if let Some(observer) = &mut disk.observer {
            observer(&CutPoint {
                sync: disk.syncs,
                durable: &disk.durable,
                pending: &disk.pending,
            });
        }
        disk.durable.clone_from(&disk.live);
        disk.pending.clear();
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        let mut disk = self.lock();
        let at = usize::try_from(offset).map_err(std::io::Error::other)?;
        let end = at + data.len();
        if disk.live.len() < end {
            disk.live.resize(end, 0);
        }
        disk.live[at..end].copy_from_slice(data);
        disk.pending.push((offset, data.to_vec()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_synced_bytes_survive_a_cut() {
        let disk = PowerLossDisk::default();
        let cuts = Arc::new(Mutex::new(Vec::new()));
        disk.observe({
            let cuts = cuts.clone();
            move |cut| {
                let all = cut.image(|_| true);
                cuts.lock().unwrap().push((cut.image(|_| false), all));
            }
        });
        disk.write(0, b"abcd").unwrap();
        disk.sync_data().unwrap();
        disk.write(2, b"XY").unwrap();
        disk.write(6, b"!").unwrap();
        let mut out = [0u8; 7];
        disk.read(0, &mut out).unwrap();
        assert_eq!(&out, b"abXY\0\0!", "reads see every write at once");
        disk.sync_data().unwrap();
        let cuts = cuts.lock().unwrap();
        assert_eq!(cuts[0], (Vec::new(), b"abcd".to_vec()));
        assert_eq!(cuts[1].0, b"abcd", "a cut keeps only what was synced");
        assert_eq!(cuts[1].1, b"abXY\0\0!", "or every pending write too");
        assert!(disk.read(5, &mut [0u8; 4]).is_err());
    }
}
