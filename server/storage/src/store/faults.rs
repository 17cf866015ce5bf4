//! Storage that fails on demand, for tests of what hookd does when the disk does.
//!
//! `FaultyFile` is redb's own file backend with switches in front of `sync_data`: while
//! [`Faults::fail_syncs`] is on, every fsync fails, so every commit fails as it would on a
//! full or dying disk; [`Faults::delay_syncs`] makes the disk slow. The write-ahead log's
//! files get the same switch ([`Faults::sync_hook`]). Compiled only for tests
//! (never the binary): they pass a [`Faults`] through `hookd::app::Hooks`.

use std::fs::File;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// The switch a test holds. Cheap to clone; clones share the switch.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    fail_syncs: Arc<AtomicBool>,
    sync_delay_ms: Arc<AtomicU64>,
}

impl Faults {
    /// While on, every fsync fails.
    pub fn fail_syncs(&self, on: bool) {
        self.fail_syncs.store(on, Ordering::SeqCst);
    }

    /// Makes every fsync take this much longer (a slow or throttled disk).
    pub fn delay_syncs(&self, ms: u64) {
        self.sync_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// What every fsync does first: fail while failing is on, wait while slow.
    pub(crate) fn before_sync(&self) -> std::io::Result<()> {
        if self.fail_syncs.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("injected fault: fsync failed"));
        }
        let delay = self.sync_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_millis(delay));
        }
        Ok(())
    }

    /// The same switch for the write-ahead log's files.
    pub(crate) fn sync_hook(&self) -> crate::wal::SyncHook {
        let faults = self.clone();
        Arc::new(move || faults.before_sync())
    }
}

#[derive(Debug)]
pub(super) struct FaultyFile {
    inner: FileBackend,
    faults: Faults,
}

impl FaultyFile {
    pub(super) fn new(file: File, faults: Faults) -> Result<Self, redb::DatabaseError> {
        Ok(Self {
            inner: FileBackend::new(file)?,
            faults,
        })
    }
}

impl StorageBackend for FaultyFile {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.faults.before_sync()?;
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.inner.close()
    }

    // The file lock that keeps a second hookd off the same data directory.
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}
