//! Signature checks of large inbound bodies, on threads of their own at a low priority.
//!
//! Hashing a 1 MiB body takes about a millisecond of CPU per secret, paid before anyone
//! knows whether the sender holds a secret at all. On the runtime's workers a flood of
//! unsigned bodies would delay every gRPC call and every provider behind it; on tokio's
//! blocking pool (as before) each waiting body got a thread of its own (33 in a flood of
//! 1,000 on 2 cores), sharing the CPU with the workers as equals: an honest client's p99
//! grew 8 to 15 times. Here a fixed set of threads, at a lower scheduling priority
//! ([`NICE`]), takes the checks in arrival order, so the workers that serve authenticated
//! calls run first and the checks get what CPU is left.
//!
//! Only clients in good standing have their bodies checked here: a suspect client's body
//! is checked on the thread that read it, at idle priority (`demote.rs`), so a flood
//! never stands in this queue ahead of a trusted provider's large delivery.
//!
//! The queue needs no bound of its own: every body waiting in it holds its bytes in the
//! unverified budget (`connections.max_unverified_ingest_bytes`), and past that budget new
//! bodies are refused before they are read.

use std::sync::{Arc, Mutex};

/// The checkers' nice value: their CFS weight is about a tenth of a worker's, so a busy
/// worker is not kept waiting by them.
pub(crate) const NICE: i32 = 10;

/// At most this many checker threads (each checks one body at a time, about 1 GB/s).
pub(crate) const MAX_THREADS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

/// The checker threads; they end when this is dropped.
#[derive(Debug)]
pub struct Checker {
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
}

impl Checker {
    /// `threads` checker threads (at least one), or the error starting one.
    pub fn start(threads: usize) -> std::io::Result<Self> {
        let threads = threads.max(1);
        let (jobs, queue) = tokio::sync::mpsc::unbounded_channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..threads {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("hookd-check-{i}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        // One thread waits on the queue; the others wait for the lock.
                        let job = match queue.lock() {
                            Ok(mut queue) => queue.blocking_recv(),
                            Err(_) => None,
                        };
                        let Some(job) = job else { break };
                        // A panicking check answers its caller with an error (its result
                        // sender is dropped) and keeps the thread.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                })?;
        }
        Ok(Self { jobs })
    }

    /// One thread fewer than the CPUs (the workers need one), at least 1, at most
    /// [`MAX_THREADS`].
    pub(crate) fn default_threads() -> usize {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .saturating_sub(1)
            .clamp(1, MAX_THREADS)
    }

    /// Runs `check` on a checker thread; `None` if it panicked or the threads are gone.
    pub async fn run<T: Send + 'static>(
        &self,
        check: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(check());
        });
        self.jobs.send(job).ok()?;
        result.await.ok()
    }
}

/// Lowers this thread's scheduling priority to [`NICE`]: the checkers' threads, and the
/// demoted connections' (`demote.rs`). On Linux `setpriority` with a thread id changes
/// that thread only. Lowering needs no privilege; if it fails anyway the thread runs at
/// normal priority, which is what it did before.
pub(crate) fn lower_priority() {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), NICE) {
        tracing::debug!(error = %e, "cannot lower a low-priority thread's priority (signature checks, demoted connections)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn checks_run_on_low_priority_threads_and_a_panic_keeps_the_thread() {
        let checker = Checker::start(1).unwrap();
        let (name, nice) = checker
            .run(|| {
                let tid = rustix::thread::gettid();
                (
                    std::thread::current().name().map(str::to_owned),
                    rustix::process::getpriority_process(Some(tid)).unwrap(),
                )
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("hookd-check-0"));
        assert_eq!(nice, NICE);
        assert_eq!(
            checker.run(|| -> u8 { panic!("a check panicked") }).await,
            None
        );
        // The one thread is still there.
        assert_eq!(checker.run(|| 7).await, Some(7));
    }

    #[tokio::test]
    async fn checks_on_several_threads_all_answer() {
        let checker = Arc::new(Checker::start(3).unwrap());
        let mut all = tokio::task::JoinSet::new();
        for i in 0..64u64 {
            let checker = checker.clone();
            all.spawn(async move { checker.run(move || i * 2).await });
        }
        let mut sum = 0;
        while let Some(r) = all.join_next().await {
            sum += r.unwrap().unwrap();
        }
        assert_eq!(sum, (0..64).map(|i| i * 2).sum::<u64>());
    }
}
