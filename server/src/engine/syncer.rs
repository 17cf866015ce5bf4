//! The pipeline's second stage: the write-ahead log's writer.
//!
//! The engine thread applies a round to redb (a `Durability::None` commit, no I/O) and
//! hands the round's log record here with what to do once it is durable (answer the
//! callers, release push attempts of the messages it stored). The writer takes every round
//! waiting, appends their records, makes them durable with **one** fdatasync, and only then
//! runs their completions, in order. Meanwhile the engine thread is already applying the
//! next round: the fsync is off its path, and rounds that arrive during a sync share the
//! next one (group commit across rounds).
//!
//! A round that wrote nothing still passes through, so its answers (which may rest on
//! state an earlier round wrote) never overtake that round's sync.
//!
//! If an append or a sync fails, that round and every later one are answered with the
//! failure and the writer refuses all further work; the engine sees [`Syncer::failed`]
//! and stops writing (a restart recovers from the last checkpoint and the durable log).
//!
//! In tests ([`Syncer::inline`]) the same writer runs on the engine's thread, so a round's
//! answers are out when the round returns.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::Clock;
use crate::stats::CommitStats;
use crate::store::Watermark;
use crate::wal::{Log, Lsn, framed_len};

/// What to do once a round's record is durable (`Err`: it is not, and never will be).
pub type Then = Box<dyn FnOnce(Result<(), Arc<str>>) + Send>;

/// One round for the writer.
struct Job {
    record: Vec<u8>,
    /// Commands the round answered (for requests-per-sync figures).
    requests: u64,
    then: Then,
}

enum Work {
    Round(Job),
    /// Segments before this position are checkpointed: delete them.
    Discard(Lsn),
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
    /// Syncs, and requests per sync, and their latency (Stats' commit figures).
    commits: Mutex<CommitStats>,
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
}

impl Writer {
    fn write(&mut self, jobs: Vec<Job>) {
        let failed = self.shared.mark.failed();
        let result = match failed {
            Some(e) => Err(e),
            None => self.append_and_sync(&jobs),
        };
        for job in jobs {
            (job.then)(result.clone());
        }
    }

    fn append_and_sync(&mut self, jobs: &[Job]) -> Result<(), Arc<str>> {
        if jobs.iter().all(|j| j.record.is_empty()) {
            return Ok(());
        }
        let started = Instant::now();
        let synced = (|| {
            for job in jobs.iter().filter(|j| !j.record.is_empty()) {
                self.log.append(&job.record)?;
            }
            self.log.sync()
        })();
        match synced {
            Ok(()) => {
                self.shared.mark.synced(self.log.end());
                self.shared
                    .log_bytes
                    .store(self.log.disk_bytes(), Ordering::Relaxed);
                let requests = jobs.iter().map(|j| j.requests).sum();
                let micros = started.elapsed().as_micros() as u64;
                self.shared
                    .commits()
                    .committed(self.clock.now_ms(), requests, micros);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "the write-ahead log failed; refusing writes until restart");
                let e: Arc<str> = Arc::from(e.to_string());
                self.shared.mark.fail(e.clone());
                Err(e)
            }
        }
    }

    fn discard(&mut self, lsn: Lsn) {
        match self.log.discard_before(lsn) {
            Ok(_) => self
                .shared
                .log_bytes
                .store(self.log.disk_bytes(), Ordering::Relaxed),
            // Only space is at stake: the segments are checkpointed; the next discard
            // tries again.
            Err(e) => tracing::warn!(error = %e, "could not delete checkpointed log segments"),
        }
    }
}

fn run(mut writer: Writer, rx: Receiver<Work>) {
    let mut jobs = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut discard = None;
        let mut next = Some(first);
        while let Some(work) = next.take() {
            match work {
                Work::Round(job) => jobs.push(job),
                Work::Discard(lsn) => discard = Some(lsn),
            }
            if jobs.len() < GROUP {
                next = rx.try_recv().ok();
            }
        }
        writer.write(std::mem::take(&mut jobs));
        if let Some(lsn) = discard {
            writer.discard(lsn);
        }
    }
}

enum Mode {
    Thread {
        tx: Option<SyncSender<Work>>,
        thread: Option<JoinHandle<()>>,
    },
    #[cfg_attr(not(test), allow(dead_code))]
    Inline(Box<Writer>),
}

/// The engine's side of the writer.
pub struct Syncer {
    mode: Mode,
    shared: Arc<Shared>,
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
    /// A writer on its own thread (production).
    pub fn spawn(log: Log, mark: Arc<Watermark>, clock: Arc<dyn Clock>) -> std::io::Result<Self> {
        let (shared, appended) = Self::shared(&log, mark);
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let writer = Writer {
            log,
            shared: shared.clone(),
            clock,
        };
        let thread = std::thread::Builder::new()
            .name("hookd-log".into())
            .spawn(move || run(writer, rx))?;
        Ok(Self {
            mode: Mode::Thread {
                tx: Some(tx),
                thread: Some(thread),
            },
            shared,
            appended,
        })
    }

    /// A writer that runs on the caller's thread: a round is durable (or failed) and
    /// answered when [`Syncer::submit`] returns. For tests that drive rounds themselves.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn inline(log: Log, mark: Arc<Watermark>, clock: Arc<dyn Clock>) -> Self {
        let (shared, appended) = Self::shared(&log, mark);
        Self {
            mode: Mode::Inline(Box::new(Writer {
                log,
                shared: shared.clone(),
                clock,
            })),
            shared,
            appended,
        }
    }

    fn shared(log: &Log, mark: Arc<Watermark>) -> (Arc<Shared>, Lsn) {
        mark.reset(log.end());
        let shared = Arc::new(Shared {
            mark,
            log_bytes: AtomicU64::new(log.disk_bytes()),
            commits: Mutex::default(),
        });
        (shared, log.end())
    }

    /// Hands over a round: `record` (empty if it wrote nothing) is appended and synced,
    /// then `then` runs. Blocks only while [`QUEUE`] rounds already wait.
    pub fn submit(&mut self, record: Vec<u8>, requests: u64, then: Then) {
        if !record.is_empty() {
            self.appended += framed_len(record.len());
            self.shared.mark.publish(self.appended);
        }
        let job = Job {
            record,
            requests,
            then,
        };
        match &mut self.mode {
            Mode::Inline(writer) => writer.write(vec![job]),
            Mode::Thread { tx, .. } => {
                let sent = match tx {
                    Some(tx) => tx.send(Work::Round(job)),
                    None => Err(mpsc::SendError(Work::Round(job))),
                };
                if let Err(mpsc::SendError(Work::Round(job))) = sent {
                    (job.then)(Err(Arc::from("the write-ahead log writer has stopped")));
                }
            }
        }
    }

    /// The position after the last record handed over.
    pub fn appended(&self) -> Lsn {
        self.appended
    }

    /// Waits until every record before `lsn` is durable; the log's failure if it failed.
    pub fn wait_synced(&self, lsn: Lsn) -> Result<(), Arc<str>> {
        self.shared.mark.wait(lsn)
    }

    /// The position a round's record of `len` bytes would end at: published before the
    /// round becomes visible in redb (see [`Watermark`]).
    pub fn publish_next(&self, len: usize) {
        if len > 0 {
            self.shared
                .mark
                .publish(self.appended + framed_len(len));
        }
    }

    /// Deletes the log's segments before `lsn` (checkpointed), after the rounds handed
    /// over so far.
    pub fn discard(&mut self, lsn: Lsn) {
        match &mut self.mode {
            Mode::Inline(writer) => writer.discard(lsn),
            Mode::Thread { tx: Some(tx), .. } => {
                let _ = tx.send(Work::Discard(lsn));
            }
            Mode::Thread { tx: None, .. } => {}
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
    pub fn fill(&self, now_ms: u64, out: &mut crate::stats::StorageSnapshot) {
        self.shared.commits().fill(now_ms, out);
        out.log_bytes = self.log_bytes();
    }

    /// Lets the writer finish every round handed over, and stops it.
    pub fn stop(&mut self) {
        if let Mode::Thread { tx, thread } = &mut self.mode {
            drop(tx.take());
            if let Some(thread) = thread.take()
                && thread.join().is_err()
            {
                tracing::error!("the write-ahead log writer panicked");
            }
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.stop();
    }
}
