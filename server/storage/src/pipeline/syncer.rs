//! The pipeline's second stage: the write-ahead log's writer.
//!
//! The engine thread decides a round against a redb read snapshot plus the overlay of
//! rows not yet applied (no I/O, no B-tree work of its own) and hands the round's log
//! record here with what to do once it is durable (answer the callers, release push
//! attempts of the messages it stored). The writer takes every round
//! waiting, appends their records, makes them durable with **one** fdatasync, and only then
//! runs their completions, in order. Meanwhile the engine thread is already applying the
//! next round: the fsync is off its path, and rounds that arrive during a sync share the
//! next one (group commit across rounds).
//!
//! A round that wrote nothing still passes through, so its answers (which may rest on
//! state an earlier round wrote) never overtake that round's sync.
//!
//! Once answered, each synced record goes on to the apply stage ([`super::applier`]), which
//! performs it on redb and checkpoints; the writer deletes the segments a checkpoint no
//! longer needs.
//!
//! If an append or a sync fails, that round and every later one are answered with the
//! failure and the writer refuses all further work; the engine sees [`Syncer::failed`]
//! and stops writing (a restart recovers from the last checkpoint and the durable log).
//!
//! In tests ([`Syncer::inline`]) the writer and the apply stage run on the engine's
//! thread, so a round's answers are out, and redb holds it, when the round returns.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use std::sync::atomic::{AtomicU64, Ordering};

use super::applier::{self, Applier, Progress, StageConfig, Synced};
use crate::store::{Store, Watermark};
use crate::wal::{Log, Lsn, framed_len};
use hookd_core::clock::Clock;
use hookd_core::stats::CommitStats;
use hookd_metrics::Metrics;

/// What to do once a round's record is durable (`Err`: it is not, and never will be).
pub type Then = Box<dyn FnOnce(Result<(), Arc<str>>) + Send>;

/// One round for the writer.
struct Job {
    round: u64,
    record: Vec<u8>,
    /// Commands the round answered (for requests-per-sync figures).
    requests: u64,
    then: Then,
}

/// Where synced records go next.
enum Next {
    Thread(mpsc::Sender<Vec<Synced>>),
    Inline(Box<Applier>),
}

/// Rounds handed over but not yet written, at most (the engine waits beyond that).
const QUEUE: usize = 256;
/// Rounds written with one sync, at most.
const GROUP: usize = 1_024;

#[derive(Debug)]
struct Shared {
    /// What is durable (shared with the store's readers) and whether the log failed.
    mark: Arc<Watermark>,
    /// Bytes the log's segments hold.
    log_bytes: AtomicU64,
    /// Every round up to this one is durable (set after its sync, before its answers).
    synced_round: AtomicU64,
    /// Syncs, and requests per sync, and their latency (Stats' commit figures).
    commits: Mutex<CommitStats>,
    metrics: Arc<Metrics>,
}

impl Shared {
    fn commits(&self) -> MutexGuard<'_, CommitStats> {
        self.commits
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The log and what it reports to; owned by whichever thread writes.
struct Writer {
    log: Log,
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    next: Next,
    progress: Arc<Progress>,
}

impl Writer {
    fn write(&mut self, jobs: Vec<Job>) {
        let failed = self.shared.mark.failed();
        let mut ends = Vec::with_capacity(jobs.len());
        let result = match failed {
            Some(e) => Err(e),
            None => self.append_and_sync(&jobs, &mut ends),
        };
        if result.is_ok() {
            // Before any answer: a reader told of a write finds it.
            self.shared.mark.synced(self.log.end());
            if let Some(last) = jobs.iter().map(|j| j.round).max() {
                self.shared.synced_round.fetch_max(last, Ordering::AcqRel);
            }
        }
        let mut synced = Vec::new();
        for (job, (end, segment)) in jobs
            .into_iter()
            .zip(ends.into_iter().chain(std::iter::repeat((0, 0))))
        {
            (job.then)(result.clone());
            if result.is_ok() && !job.record.is_empty() {
                synced.push(Synced {
                    round: job.round,
                    end,
                    segment,
                    record: job.record,
                });
            }
        }
        if !synced.is_empty() {
            match &mut self.next {
                Next::Inline(applier) => applier.apply(&synced),
                Next::Thread(tx) => {
                    if tx.send(synced).is_err() {
                        let e: Arc<str> = Arc::from("the apply stage has stopped");
                        self.shared.mark.fail(e);
                    }
                }
            }
        }
        self.discard();
    }

    /// Appends every round's record and syncs once; `ends` gets each record's end and the
    /// first position of its segment.
    fn append_and_sync(
        &mut self,
        jobs: &[Job],
        ends: &mut Vec<(Lsn, Lsn)>,
    ) -> Result<(), Arc<str>> {
        if jobs.iter().all(|j| j.record.is_empty()) {
            return Ok(());
        }
        let started = Instant::now();
        let synced = (|| {
            for job in jobs {
                if !job.record.is_empty() {
                    self.log.append(&job.record)?;
                }
                ends.push((self.log.end(), self.log.segment()));
            }
            self.log.sync()
        })();
        match synced {
            Ok(()) => {
                self.publish_segments();
                let requests = jobs.iter().map(|j| j.requests).sum();
                let micros = started.elapsed().as_micros() as u64;
                self.shared
                    .commits()
                    .committed(self.clock.now_ms(), requests, micros);
                self.shared.metrics.log_synced(micros, requests);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "the write-ahead log failed; refusing writes until the store is reopened");
                self.shared.metrics.storage_failed("log");
                let e: Arc<str> = Arc::from(e.to_string());
                self.shared.mark.fail(e.clone());
                Err(e)
            }
        }
    }

    /// What the reclaim reads of the log: its segments and their sizes.
    fn publish_segments(&self) {
        self.shared
            .log_bytes
            .store(self.log.disk_bytes(), Ordering::Relaxed);
        *applier::lock(&self.progress.segments) = self.log.segments();
    }

    /// Deletes the segments the reclaim let go.
    fn discard(&mut self) {
        let delete = std::mem::take(&mut *applier::lock(&self.progress.delete));
        if delete.is_empty() {
            return;
        }
        for start in delete {
            // Only space is at stake: nothing points into it, and with no row in
            // `segments` the next reclaim lets it go again.
            if let Err(e) = self.log.remove_segment(start) {
                tracing::warn!(error = %e, segment = start, "could not delete a log segment");
            }
        }
        self.publish_segments();
    }
}

fn run(mut writer: Writer, rx: Receiver<Job>) {
    let mut jobs = Vec::new();
    while let Ok(first) = rx.recv() {
        jobs.push(first);
        while jobs.len() < GROUP {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        writer.write(std::mem::take(&mut jobs));
    }
}

enum Mode {
    Thread {
        tx: Option<SyncSender<Job>>,
        threads: Vec<JoinHandle<()>>,
    },
    #[cfg_attr(not(test), allow(dead_code))]
    Inline(Box<Writer>),
}

/// The engine's side of the writer.
pub struct Syncer {
    mode: Mode,
    shared: Arc<Shared>,
    progress: Arc<Progress>,
    /// The position after the last record handed over.
    appended: Lsn,
}

impl std::fmt::Debug for Syncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Syncer")
            .field("appended", &self.appended)
            .finish()
    }
}

impl Syncer {
    /// The log writer and the apply stage, each on its own thread (production).
    pub fn spawn(
        log: Log,
        store: Store,
        clock: Arc<dyn Clock>,
        stages: StageConfig,
    ) -> std::io::Result<Self> {
        let (shared, appended, applier, progress) = Self::stages(&log, store, &clock, stages);
        let (apply_tx, apply_rx) = mpsc::channel();
        let applying = std::thread::Builder::new()
            .name("hookd-apply".into())
            .spawn(move || applier::run(applier, apply_rx))?;
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let writer = Writer {
            log,
            shared: shared.clone(),
            clock,
            next: Next::Thread(apply_tx),
            progress: progress.clone(),
        };
        let writing = std::thread::Builder::new()
            .name("hookd-log".into())
            .spawn(move || run(writer, rx))?;
        Ok(Self {
            mode: Mode::Thread {
                tx: Some(tx),
                // Joined in this order: the writer first (it drops the apply stage's
                // sender, so the stage then finishes, with a last checkpoint).
                threads: vec![writing, applying],
            },
            shared,
            progress,
            appended,
        })
    }

    /// The writer and the apply stage on the caller's thread: a round is durable (or
    /// failed), answered and in redb when [`Syncer::submit`] returns. For tests that drive
    /// rounds themselves.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn inline(log: Log, store: Store, clock: Arc<dyn Clock>, stages: StageConfig) -> Self {
        let (shared, appended, applier, progress) = Self::stages(&log, store, &clock, stages);
        Self {
            mode: Mode::Inline(Box::new(Writer {
                log,
                shared: shared.clone(),
                clock,
                next: Next::Inline(Box::new(applier)),
                progress: progress.clone(),
            })),
            shared,
            progress,
            appended,
        }
    }

    /// Every round up to this one is durable: its log record synced (0: none yet).
    pub fn synced_round(&self) -> u64 {
        self.shared.synced_round.load(Ordering::Acquire)
    }

    /// Every round up to this one is in redb (its overlay entries can go).
    pub fn applied_round(&self) -> u64 {
        self.progress.round.load(Ordering::Acquire)
    }

    /// When the last checkpoint was made, how long its commit took, and how much log was
    /// applied since.
    pub fn checkpoint_figures(&self) -> (u64, u64, u64) {
        (
            self.progress.checkpoint_at_ms.load(Ordering::Relaxed),
            self.progress.last_checkpoint_ms.load(Ordering::Relaxed),
            self.progress.since_checkpoint.load(Ordering::Relaxed),
        )
    }

    /// Segments whose live records are to be copied forward (see `reclaim`).
    pub fn to_compact(&self) -> Vec<Lsn> {
        applier::lock(&self.progress.compact).clone()
    }

    /// How long the reclaim keeps segments beyond `log_retention_secs`, and the search
    /// index its rows: the longest retention a tenant or destination sets (ms; 0: none),
    /// with the server's `completed_retention_ms` (see the engine's `retention`).
    pub fn hold_retention(&self, longest_ms: u64, completed_ms: u64) {
        self.progress.hold_ms.store(longest_ms, Ordering::Relaxed);
        self.progress
            .hold_index_ms
            .store(longest_ms.saturating_sub(completed_ms), Ordering::Relaxed);
        self.progress.hold_told.store(true, Ordering::Release);
    }

    /// Asks the apply stage for a checkpoint (or a reclaim) at its next look, not at the
    /// interval: a purge waits for the overwrite that follows it.
    pub fn urge_checkpoint(&self) {
        self.progress.urge.store(true, Ordering::Release);
    }

    /// How far the overwriting of purged records is (see `store::scrub`).
    pub fn scrub_progress(&self) -> applier::ScrubProgress {
        let p = &self.progress;
        applier::ScrubProgress {
            appended: self.appended,
            scrubbed_through: p.scrubbed_through.load(Ordering::Acquire),
            pending: p.scrubs_pending.load(Ordering::Relaxed),
            records: p.scrubbed_records.load(Ordering::Relaxed),
            bytes: p.scrubbed_bytes.load(Ordering::Relaxed),
        }
    }

    /// The log's figures as the last reclaim saw them.
    pub fn log_figures(&self) -> applier::LogFigures {
        applier::lock(&self.progress.reclaimed).clone()
    }

    /// Waits until redb holds every round handed over (the overlay is then empty after
    /// the engine's next look); the failure if storage failed.
    pub fn wait_applied(&self) -> Result<(), Arc<str>> {
        self.shared.mark.wait_applied(self.appended)
    }

    /// What the writer shares with the engine, the log's end, and the apply stage.
    fn stages(
        log: &Log,
        store: Store,
        clock: &Arc<dyn Clock>,
        stages: StageConfig,
    ) -> (Arc<Shared>, Lsn, Applier, Arc<Progress>) {
        let mark: Arc<Watermark> = store.mark().clone();
        mark.reset(log.end());
        let shared = Arc::new(Shared {
            mark,
            log_bytes: AtomicU64::new(log.disk_bytes()),
            synced_round: AtomicU64::new(0),
            commits: Mutex::default(),
            metrics: stages.metrics.clone(),
        });
        let (applier, progress) = Applier::new(store, clock.clone(), log.end(), stages);
        let segments = log.segments();
        // What Stats shows until the first reclaim has looked (it would say 0 segments).
        {
            let mut figures = applier::lock(&progress.reclaimed);
            figures.segments = segments.len() as u64;
            figures.bytes = segments.iter().map(|(_, bytes)| bytes).sum();
        }
        *applier::lock(&progress.segments) = segments;
        (shared, log.end(), applier, progress)
    }

    /// Hands over a round: `record` (empty if it wrote nothing) is appended and synced,
    /// then `then` runs. Blocks only while [`QUEUE`] rounds already wait.
    pub fn submit(&mut self, round: u64, record: Vec<u8>, requests: u64, then: Then) {
        if !record.is_empty() {
            self.appended += framed_len(record.len());
            self.shared.mark.publish(self.appended);
        }
        let job = Job {
            round,
            record,
            requests,
            then,
        };
        match &mut self.mode {
            Mode::Inline(writer) => writer.write(vec![job]),
            Mode::Thread { tx, .. } => {
                let sent = match tx {
                    Some(tx) => tx.send(job),
                    None => Err(mpsc::SendError(job)),
                };
                if let Err(mpsc::SendError(job)) = sent {
                    (job.then)(Err(Arc::from("the write-ahead log writer has stopped")));
                }
            }
        }
    }

    /// Why the log failed, if it did.
    pub fn failed(&self) -> Option<Arc<str>> {
        self.shared.mark.failed()
    }

    /// Bytes the log's segments hold.
    pub fn log_bytes(&self) -> u64 {
        self.shared.log_bytes.load(Ordering::Relaxed)
    }

    /// Fills the commit figures (the log's syncs) of a Stats answer.
    pub fn fill(&self, now_ms: u64, out: &mut hookd_core::stats::StorageSnapshot) {
        self.shared.commits().fill(now_ms, out);
        out.log_bytes = self.log_bytes();
        let f = self.log_figures();
        out.log_segments = f.segments;
        out.log_live_bytes = f.live_bytes;
        out.log_retained_from_ms = f.kept_from_ms;
        out.log_reclaimable_bytes = f.reclaimable_bytes;
        out.log_compacting_segments = f.compacting;
        out.log_deleted_segments = f.deleted_segments;
        out.log_freed_bytes = f.freed_bytes;
        let scrubs = self.scrub_progress();
        out.purge_pending_records = scrubs.pending;
        out.purged_records = scrubs.records;
        out.purged_bytes = scrubs.bytes;
    }

    /// Lets the writer and the apply stage finish every round handed over (with a last
    /// checkpoint), and stops them.
    pub fn stop(&mut self) {
        match &mut self.mode {
            Mode::Thread { tx, threads } => {
                drop(tx.take());
                for thread in threads.drain(..) {
                    if thread.join().is_err() {
                        tracing::error!("a storage pipeline thread panicked");
                    }
                }
            }
            Mode::Inline(writer) => {
                if let Next::Inline(applier) = &mut writer.next {
                    applier.checkpoint();
                }
            }
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}
