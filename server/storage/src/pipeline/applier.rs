//! The pipeline's third stage: redb brought up to date behind the log, and checkpointed.
//!
//! The log writer hands over every record it has synced (and answered). This stage
//! performs them on redb in `Durability::None` transactions (the B-tree work, off the
//! engine's path: the engine reads its own newer writes from the overlay meanwhile), tells
//! the engine which rounds redb holds now (so their overlay entries go), and tells readers
//! how far redb is. Every `checkpoint_interval_ms`, or when `checkpoint_log_bytes` of log
//! were applied since the last one, a checkpoint makes redb durable with one `Immediate`
//! commit that records the log position applied, and the log writer deletes the segments
//! before it. redb never holds a record the log has not synced, so that position is never
//! beyond the durable log.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use std::sync::Mutex;

use super::reclaim::{self, Retention};
use crate::store::{Apply, RecordAt, Store, StoreError, Watermark};
use crate::wal::{Lsn, framed_len};
use hookd_core::clock::Clock;
use hookd_metrics::Metrics;

/// When the apply stage checkpoints.
#[derive(Debug, Clone)]
pub struct StageConfig {
    /// A checkpoint at least this often while the log grows...
    pub interval_ms: u64,
    /// ...and whenever this much log was applied since the last one.
    pub log_bytes: u64,
    /// What the log keeps of completed messages (see `reclaim`).
    pub retention: Retention,
    /// How long the search index keeps a message's rows after it was created (its
    /// longest retention: completed, dead or live).
    pub history_ms: u64,
    pub metrics: Arc<Metrics>,
}

/// A synced round for redb.
#[derive(Debug)]
pub struct Synced {
    pub round: u64,
    /// The log position after its record.
    pub end: Lsn,
    /// The first position of the segment holding it.
    pub segment: Lsn,
    pub record: Vec<u8>,
}

impl Synced {
    fn at(&self) -> RecordAt {
        RecordAt::frame(self.segment, self.end - framed_len(self.record.len()))
    }
}

/// What the stage reports to the engine and to Stats.
#[derive(Debug, Default)]
pub struct Progress {
    /// Every round up to this one is in redb.
    pub round: AtomicU64,
    /// The position the last checkpoint made durable in redb.
    pub(crate) checkpointed: AtomicU64,
    /// Every segment of the log (first position, bytes), the current one last: the log
    /// writer's, for the reclaim.
    pub(crate) segments: Mutex<Vec<(Lsn, u64)>>,
    /// Segments the reclaim let go, for the log writer to delete.
    pub(crate) delete: Mutex<Vec<Lsn>>,
    /// Segments whose live records the engine is to copy forward (see `reclaim`).
    pub compact: Mutex<Vec<Lsn>>,
    /// The last reclaim's figures.
    pub reclaimed: Mutex<LogFigures>,
    pub checkpoint_at_ms: AtomicU64,
    pub last_checkpoint_ms: AtomicU64,
    /// Log bytes applied since the last checkpoint (what a restart now would replay, at
    /// least).
    pub(crate) since_checkpoint: AtomicU64,
    /// Every purge in the log before this position has its records overwritten on disk
    /// (see `store::scrub`): set by a reclaim that left none to do.
    pub scrubbed_through: AtomicU64,
    /// Purged records still to overwrite, as the last reclaim left them.
    pub scrubs_pending: AtomicU64,
    /// Purged records overwritten since start, and their bytes.
    pub scrubbed_records: AtomicU64,
    pub scrubbed_bytes: AtomicU64,
    /// Set by a purge that waits for its overwrite: the next look checkpoints (or
    /// reclaims) at once instead of at the interval.
    pub(crate) urge: std::sync::atomic::AtomicBool,
    /// The longest retention a tenant or destination sets (ms; 0: none): segments are kept
    /// at least that long, within the disk budget.
    pub(crate) hold_ms: AtomicU64,
    /// How much longer than the server's retentions the search index keeps rows (ms).
    pub(crate) hold_index_ms: AtomicU64,
    /// The engine told the two above (after its recovery): no reclaim before, so a
    /// segment a longer retention needs is never deleted in between.
    pub(crate) hold_told: std::sync::atomic::AtomicBool,
}

/// The overwriting of purged records (see `store::scrub`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScrubProgress {
    /// The log's end as handed to the writer (every round answered so far ends before).
    pub appended: u64,
    /// Every purge before this log position has its records overwritten and synced.
    pub scrubbed_through: u64,
    /// Purged records still to overwrite, and those overwritten since start (and bytes).
    pub pending: u64,
    pub records: u64,
    pub bytes: u64,
}

/// The log as the last reclaim saw it (Stats, /metrics, the console).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogFigures {
    /// Segments and their bytes.
    pub segments: u64,
    pub bytes: u64,
    /// Live messages' records, in bytes.
    pub live_bytes: u64,
    /// The first position kept, and the newest creation time of its messages: payloads of
    /// messages created since are readable.
    pub kept_from: Lsn,
    pub kept_from_ms: u64,
    /// Bytes compaction is to free, and segments it is working on.
    pub reclaimable_bytes: u64,
    pub compacting: u64,
    /// Segments deleted and bytes freed since start.
    pub deleted_segments: u64,
    pub freed_bytes: u64,
}

/// Locks a mutex, through a poisoning (what it guards stays consistent: plain values).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub struct Applier {
    store: Store,
    mark: Arc<Watermark>,
    progress: Arc<Progress>,
    clock: Arc<dyn Clock>,
    interval_ms: u64,
    log_bytes: u64,
    /// The position redb holds (applied), and durably (checkpointed).
    applied: Lsn,
    checkpointed: Lsn,
    checkpoint_at_ms: u64,
    retention: Retention,
    history_ms: u64,
    /// When the last reclaim ran.
    reclaim_at_ms: u64,
    /// The search index's backfill has run to its end; messages it indexed so far.
    backfilled: bool,
    backfill_count: u64,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier")
            .field("applied", &self.applied)
            .field("checkpointed", &self.checkpointed)
            .finish()
    }
}

impl Applier {
    /// The stage for a store whose log (and file) end at `end`.
    pub fn new(
        store: Store,
        clock: Arc<dyn Clock>,
        end: Lsn,
        config: StageConfig,
    ) -> (Self, Arc<Progress>) {
        let now = clock.now_ms();
        let progress = Arc::new(Progress::default());
        progress.checkpoint_at_ms.store(now, Ordering::Relaxed);
        progress.checkpointed.store(end, Ordering::Relaxed);
        let applier = Self {
            mark: store.mark().clone(),
            store,
            progress: progress.clone(),
            clock,
            interval_ms: config.interval_ms,
            log_bytes: config.log_bytes,
            applied: end,
            checkpointed: end,
            checkpoint_at_ms: now,
            retention: config.retention,
            history_ms: config.history_ms,
            reclaim_at_ms: 0,
            backfilled: false,
            backfill_count: 0,
            metrics: config.metrics,
        };
        (applier, progress)
    }

    /// Performs synced rounds on redb (one transaction), then checkpoints if one is due.
    pub fn apply(&mut self, batch: &[Synced]) {
        if self.mark.failed().is_some() {
            return;
        }
        if let Some(last) = batch.last() {
            let done = (|| {
                let txn = self.store.begin_round()?;
                let rows = {
                    let mut tables = Apply::open_deferred(&txn)?;
                    for s in batch {
                        tables.replay(&s.record, Some(s.at()))?;
                    }
                    tables.finish()?
                };
                txn.commit()?;
                // The search index's rows, in memory until there are enough to write in
                // one pass (see `search::Pending`); searches read them from there. Before
                // the progress below: a reader that waited for these rounds finds them.
                self.store.index_rows(rows)?;
                Ok::<(), StoreError>(())
            })();
            if let Err(e) = done {
                self.metrics.storage_failed("apply");
                return self.fail(e);
            }
            self.applied = last.end;
            self.progress
                .since_checkpoint
                .store(self.applied - self.checkpointed, Ordering::Relaxed);
            self.progress.round.store(last.round, Ordering::Release);
            self.mark.applied(last.end);
        }
        self.checkpoint_if_due();
    }

    fn checkpoint_if_due(&mut self) {
        let since = self.applied - self.checkpointed;
        let now = self.clock.now_ms();
        let urged = self.progress.urge.swap(false, Ordering::AcqRel);
        if since > 0
            && (urged
                || since >= self.log_bytes
                || now.saturating_sub(self.checkpoint_at_ms) >= self.interval_ms)
        {
            self.checkpoint();
        } else if since == 0
            && (urged || now.saturating_sub(self.reclaim_at_ms) >= self.interval_ms)
        {
            // Retention runs out while nothing is written too. Only on a checkpointed
            // state: the rows a reclaim reads are then those a restart starts from.
            self.reclaim();
        }
    }

    /// Decides which segments go and which are compacted (see `reclaim`): the log writer
    /// deletes the first, the engine copies the live records of the second forward.
    pub fn reclaim(&mut self) {
        if self.mark.failed().is_some() || !self.progress.hold_told.load(Ordering::Acquire) {
            return;
        }
        let now = self.clock.now_ms();
        self.reclaim_at_ms = now;
        let rows = match self.store.segment_rows() {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the log's segment rows; nothing reclaimed");
                return;
            }
        };
        let segments = lock(&self.progress.segments).clone();
        // Kept for the longest retention a tenant or destination asks for, within the
        // disk budget (see the engine's `retention`).
        let retention = Retention {
            ms: self
                .retention
                .ms
                .max(self.progress.hold_ms.load(Ordering::Relaxed)),
            ..self.retention
        };
        let plan = reclaim::plan(&segments, &rows, self.checkpointed, now, retention);
        let history_ms = self
            .history_ms
            .saturating_add(self.progress.hold_index_ms.load(Ordering::Relaxed));
        // The search index's rows past the history's horizon, a slice per reclaim.
        match self
            .store
            .sweep_search(now.saturating_sub(history_ms), SEARCH_SWEEP_ROWS)
        {
            Ok(0) => {}
            Ok(rows) => tracing::debug!(rows, "search index rows past the horizon swept"),
            Err(e) => {
                self.metrics.storage_failed("apply");
                return self.fail(e);
            }
        }
        // Messages stored before the search index, a slice per reclaim until done.
        if !self.backfilled {
            match self.store.backfill_search(
                now.saturating_sub(self.history_ms),
                SEARCH_BACKFILL_MESSAGES,
            ) {
                Ok(None) => {
                    self.backfilled = true;
                    if self.backfill_count > 0 {
                        tracing::info!(
                            messages = self.backfill_count,
                            "the search index holds the messages stored before it"
                        );
                    }
                }
                Ok(Some(n)) => self.backfill_count += n as u64,
                Err(e) => {
                    self.metrics.storage_failed("apply");
                    return self.fail(e);
                }
            }
        }
        // Purged records before the checkpoint: overwritten in their segments (the ones
        // this reclaim deletes are found gone, or overwritten just before they go).
        match self.store.scrub(self.checkpointed) {
            Ok(done) => {
                let p = &self.progress;
                p.scrubbed_records
                    .fetch_add(done.records, Ordering::Relaxed);
                p.scrubbed_bytes.fetch_add(done.bytes, Ordering::Relaxed);
                p.scrubs_pending.store(done.pending, Ordering::Relaxed);
                if done.pending == 0 {
                    p.scrubbed_through
                        .fetch_max(self.checkpointed, Ordering::Release);
                }
            }
            Err(e) => {
                self.metrics.storage_failed("apply");
                return self.fail(e);
            }
        }
        // Rows first: a segment without a row is one nothing points into, so if the
        // deletion does not happen (a crash), the next reclaim deletes it.
        let forget: Vec<Lsn> = plan
            .delete
            .iter()
            .copied()
            .filter(|s| rows.binary_search_by_key(s, |r| r.0).is_ok())
            .collect();
        if let Err(e) = self.store.forget_segments(&forget) {
            self.metrics.storage_failed("apply");
            return self.fail(e);
        }
        if !plan.delete.is_empty() {
            tracing::debug!(
                segments = plan.delete.len(),
                bytes = plan.freed_bytes,
                "log segments let go"
            );
            lock(&self.progress.delete).extend(&plan.delete);
        }
        *lock(&self.progress.compact) = plan.compact.clone();
        let mut figures = lock(&self.progress.reclaimed);
        figures.segments = (segments.len() - plan.delete.len()) as u64;
        figures.bytes = plan.log_bytes - plan.freed_bytes;
        figures.live_bytes = plan.live_bytes;
        figures.kept_from = plan.kept_from;
        figures.kept_from_ms = plan.kept_from_ms;
        figures.reclaimable_bytes = plan.reclaimable_bytes;
        figures.compacting = plan.compact.len() as u64;
        figures.deleted_segments += plan.delete.len() as u64;
        figures.freed_bytes += plan.freed_bytes;
    }

    /// Makes redb durable up to what it holds, and lets the log go before it.
    pub fn checkpoint(&mut self) {
        if self.applied == self.checkpointed || self.mark.failed().is_some() {
            return;
        }
        let started = Instant::now();
        if let Err(e) = self.store.checkpoint(self.applied) {
            self.metrics.storage_failed("checkpoint");
            return self.fail(e);
        }
        let elapsed = started.elapsed();
        self.metrics
            .checkpoint_seconds
            .observe(elapsed.as_secs_f64());
        let millis = elapsed.as_millis() as u64;
        tracing::debug!(
            lsn = self.applied,
            log_bytes = self.applied - self.checkpointed,
            millis,
            "checkpoint"
        );
        self.checkpointed = self.applied;
        self.progress.since_checkpoint.store(0, Ordering::Relaxed);
        self.checkpoint_at_ms = self.clock.now_ms();
        self.progress
            .checkpoint_at_ms
            .store(self.checkpoint_at_ms, Ordering::Relaxed);
        self.progress
            .last_checkpoint_ms
            .store(millis, Ordering::Relaxed);
        self.progress
            .checkpointed
            .store(self.checkpointed, Ordering::Release);
        self.reclaim();
    }

    fn fail(&mut self, e: StoreError) {
        tracing::error!(error = %e, "applying the log to redb failed; refusing writes until the store is reopened");
        self.mark.fail(Arc::from(e.to_string()));
    }
}

/// Rows of the search index one reclaim deletes at most (a few milliseconds of work).
const SEARCH_SWEEP_ROWS: usize = 20_000;
/// Messages stored before the search index that one reclaim indexes at most (each a read
/// of its record: tens of milliseconds).
const SEARCH_BACKFILL_MESSAGES: usize = 2_000;

/// Records gathered for one redb transaction: at most this long after the first (less
/// when a reader waits).
const GATHER: std::time::Duration = std::time::Duration::from_millis(5);

/// The stage on its own thread: applies what arrives, and checkpoints by time even when
/// nothing does; a last checkpoint when the log writer stops.
///
/// Records are gathered for up to [`GATHER`] into one transaction: each redb commit
/// copies the pages it changes anew (copy-on-write), so fewer, larger transactions copy
/// the same hot pages (the tables' last leaves, their branches) fewer times. A profile of
/// unary Enqueue had this stage at about a sixth of hookd's CPU with one transaction per
/// log sync (about 17 events each), most of it page allocation and copies. While it
/// gathers the thread sleeps: it is not woken by each record the log writer hands over
/// (on two cores a wake-up per sync is CPU the gRPC path does not get), only by the end
/// of the gather or by a reader that starts waiting for redb
/// ([`Watermark::gather_until`]), which the next transaction then serves at once.
pub fn run(mut applier: Applier, rx: std::sync::mpsc::Receiver<Vec<Synced>>) {
    use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
    let tick = std::time::Duration::from_millis(applier.interval_ms.clamp(10, 500));
    let mut batch = Vec::new();
    let mut open = true;
    while open {
        match rx.recv_timeout(tick) {
            Ok(s) => batch.extend(s),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => open = false,
        }
        if open && !batch.is_empty() {
            applier.mark.gather_until(Instant::now() + GATHER);
            loop {
                match rx.try_recv() {
                    Ok(s) => batch.extend(s),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
        }
        applier.apply(&batch);
        batch.clear();
    }
    applier.checkpoint();
}
