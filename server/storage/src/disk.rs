//! Disk headroom: hookd keeps a reserve of free space on its data directory's file system
//! and refuses new events (RESOURCE_EXHAUSTED) before the file system is full, so a full
//! disk is a clean refusal that clears by itself when space comes back, not a failed commit.
//!
//! A probe measures the space available to hookd (`statvfs`'s blocks available to
//! unprivileged users, and the room left under a file-size limit, `RLIMIT_FSIZE`, for the
//! redb file) every `storage.probe_interval_ms`; the engine reads the last figure on each
//! enqueue. Between two probes the engine counts what it accepts ([`Headroom::admit`]):
//! every accepted payload byte is written twice before a checkpoint (the log, then redb),
//! so an event is refused when the last measure, less twice the bytes accepted since the
//! probe before it, would fall inside the reserve. (The interval before the last probe
//! still counts: what the pipeline had accepted but not yet written when the probe
//! measured.) A burst of large batches therefore cannot write past the reserve between
//! two probes. Writes that free space (Acks, Nacks, outcomes, deletes, purges) are never
//! refused: they are small, and they are how an operator makes room.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the file system reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Bytes hookd may still write.
    pub available: u64,
    /// The file system's size.
    pub total: u64,
    /// The file-size limit (`RLIMIT_FSIZE`, bytes), when it is what bounds `available`.
    pub fsize_limit: Option<u64>,
}

/// Measures the space (tests plug in their own).
pub type Probe = Arc<dyn Fn() -> io::Result<Space> + Send + Sync>;

/// The probe of a real directory: statvfs, and the file-size limit against the redb file.
pub fn probe_dir(dir: &Path) -> Probe {
    let dir: PathBuf = dir.to_path_buf();
    Arc::new(move || {
        let st = rustix::fs::statvfs(&dir).map_err(io::Error::from)?;
        let frsize = st.f_frsize.max(1);
        let mut available = st.f_bavail.saturating_mul(frsize);
        let total = st.f_blocks.saturating_mul(frsize);
        let mut fsize_limit = None;
        // A file-size limit kills a process that writes past it (SIGXFSZ; hookd handles
        // the signal, so the write fails instead). The redb file is the one that grows: it
        // must still take what the log holds (applied behind it), and redb doubles a small
        // file at once (sparse: only a limit on the file's length cares), so the room left
        // is what the limit allows beyond twice the file and the log together.
        if let Some(limit) = rustix::process::getrlimit(rustix::process::Resource::Fsize).current {
            let size = std::fs::metadata(dir.join("hookd.redb")).map_or(0, |m| m.len());
            let log: u64 = std::fs::read_dir(&dir)?
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().starts_with("wal-"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum();
            let needs = size.saturating_add(log).saturating_mul(2);
            let under_limit = limit.saturating_sub(needs);
            if under_limit < available {
                available = under_limit;
                fsize_limit = Some(limit);
            }
        }
        Ok(Space {
            available,
            total,
            fsize_limit,
        })
    })
}

/// The last measure, and the reserve it is held to. Shared by the probe task, the engine
/// (which refuses new writes while short) and the metrics.
#[derive(Debug)]
pub struct Headroom {
    reserve_mb: u64,
    reserve_percent: f64,
    available: AtomicU64,
    reserve: AtomicU64,
    short: AtomicBool,
    /// The file-size limit that bounds `available` (0: none does).
    fsize_limit: AtomicU64,
    /// Payload bytes accepted since the last probe, and in the interval before it.
    accepted: AtomicU64,
    accepted_before: AtomicU64,
}

/// Why new events are refused: the room left, the reserve, and the file-size limit when it
/// is what bounds the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Short {
    pub available: u64,
    pub reserve: u64,
    pub fsize_limit: Option<u64>,
}

impl std::fmt::Display for Short {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.fsize_limit {
            Some(limit) => write!(
                f,
                "the file-size limit (RLIMIT_FSIZE, `ulimit -f`) of {limit} bytes leaves {} bytes \
                 for hookd's files (against twice the redb file plus the log), below the reserve of {} \
                 (storage.reserve_mb / reserve_percent); raise the limit (LimitFSIZE= under systemd) \
                 or free space; new events are refused until then",
                self.available, self.reserve
            ),
            None => write!(
                f,
                "the disk is nearly full: {} bytes free (less what was accepted since the last \
                 measure), below the reserve of {} (storage.reserve_mb / reserve_percent); new \
                 events are refused until space is freed",
                self.available, self.reserve
            ),
        }
    }
}

impl Headroom {
    pub fn new(reserve_mb: u64, reserve_percent: f64) -> Self {
        Self {
            reserve_mb,
            reserve_percent,
            available: AtomicU64::new(u64::MAX),
            reserve: AtomicU64::new(reserve_mb << 20),
            short: AtomicBool::new(false),
            fsize_limit: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            accepted_before: AtomicU64::new(0),
        }
    }

    /// No reserve and never short (tests of other things; the engine harness).
    pub fn unlimited() -> Self {
        Self::new(0, 0.0)
    }

    /// Records a measure; returns `Some(short)` when that changed.
    pub fn record(&self, space: Space) -> Option<bool> {
        let share = (space.total as f64 * self.reserve_percent / 100.0) as u64;
        let reserve = (self.reserve_mb << 20).max(share);
        self.available.store(space.available, Ordering::Relaxed);
        self.reserve.store(reserve, Ordering::Relaxed);
        self.fsize_limit
            .store(space.fsize_limit.unwrap_or(0), Ordering::Relaxed);
        let since = self.accepted.swap(0, Ordering::AcqRel);
        self.accepted_before.store(since, Ordering::Release);
        let short = space.available < reserve;
        let was = self.short.swap(short, Ordering::AcqRel);
        (was != short).then_some(short)
    }

    /// `Some` while the disk is inside its reserve (as last measured).
    pub fn short(&self) -> Option<Short> {
        self.short.load(Ordering::Acquire).then(|| self.figures(0))
    }

    fn figures(&self, pending: u64) -> Short {
        let limit = self.fsize_limit.load(Ordering::Relaxed);
        Short {
            available: self
                .available
                .load(Ordering::Relaxed)
                .saturating_sub(pending),
            reserve: self.reserve.load(Ordering::Relaxed),
            fsize_limit: (limit > 0).then_some(limit),
        }
    }

    /// Admits `bytes` of new payload, or says why not: the last measure, less twice what
    /// was accepted since the probe before it and twice `bytes`, must stay above the
    /// reserve. Called by the engine thread only (the check and the count are not one
    /// atomic step, and need not be).
    pub fn admit(&self, bytes: u64) -> Result<(), Short> {
        if let Some(short) = self.short() {
            return Err(short);
        }
        let accepted =
            self.accepted.load(Ordering::Acquire) + self.accepted_before.load(Ordering::Acquire);
        let pending = accepted.saturating_add(bytes).saturating_mul(2);
        let after = self.figures(pending);
        if after.available < after.reserve {
            return Err(after);
        }
        self.accepted.fetch_add(bytes, Ordering::AcqRel);
        Ok(())
    }

    pub fn available(&self) -> u64 {
        self.available.load(Ordering::Relaxed)
    }

    pub fn reserve(&self) -> u64 {
        self.reserve.load(Ordering::Relaxed)
    }

    /// Measures now, logging a change.
    pub fn probe(&self, probe: &Probe) {
        match probe() {
            Ok(space) => match self.record(space) {
                Some(true) => tracing::warn!(
                    available = space.available,
                    reserve = self.reserve(),
                    "disk space is inside the reserve: new events, endpoints and sources are refused (RESOURCE_EXHAUSTED) until space is freed; acks, nacks, deletes and purges still go through"
                ),
                Some(false) => tracing::info!(
                    available = space.available,
                    reserve = self.reserve(),
                    "disk space is above the reserve again: accepting new events"
                ),
                None => {}
            },
            Err(e) => tracing::warn!(error = %e, "cannot measure free disk space"),
        }
    }

    /// Measures every `every` (the first one `every` from now) until `stop` turns true.
    pub async fn watch(
        self: Arc<Self>,
        probe: Probe,
        every: std::time::Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        // The first measure is the caller's, taken before the engine starts.
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.probe(&probe),
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_the_larger_of_its_two_settings_and_short_clears_when_space_returns() {
        let h = Headroom::new(256, 1.0);
        let gib = 1u64 << 30;
        // 1% of 100 GiB (1 GiB) is more than 256 MiB.
        assert_eq!(
            h.record(Space {
                available: 2 * gib,
                total: 100 * gib,
                fsize_limit: None,
            }),
            None
        );
        assert_eq!(h.reserve(), gib);
        assert_eq!(h.short(), None);
        assert_eq!(
            h.record(Space {
                available: gib - 1,
                total: 100 * gib,
                fsize_limit: None,
            }),
            Some(true)
        );
        assert_eq!(
            h.short(),
            Some(Short {
                available: gib - 1,
                reserve: gib,
                fsize_limit: None
            })
        );
        // 1% of 1 GiB is less than 256 MiB.
        assert_eq!(
            h.record(Space {
                available: 300 << 20,
                total: gib,
                fsize_limit: None,
            }),
            Some(false)
        );
        assert_eq!(h.reserve(), 256 << 20);
        assert_eq!(h.short(), None);
    }

    #[test]
    fn the_real_probe_reads_the_temp_dir() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let space = probe_dir(dir.path())()?;
        assert!(
            space.total > 0 && space.available <= space.total,
            "{space:?}"
        );
        Ok(())
    }
}
