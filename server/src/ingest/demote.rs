//! Connections of suspect clients served at the lowest priority.
//!
//! A client that is not trusted ([`Strikes::suspect`]: it passed no signature check in
//! the last hour, or since then failed one or was refused for holding its whole share of
//! the unverified budget) has its new connections to the ingest listener moved, when they
//! are accepted, to a runtime of their own: the socket leaves the main reactor for this
//! runtime's, so its handshake, reading, hashing ([`on_demoted_thread`]), refusing and
//! closing all run on threads scheduled `SCHED_IDLE` ([`idle_priority`]). Linux runs such
//! a thread only when no normal thread of the CPU wants to, and a normal thread that wakes
//! preempts it at once. At nice 10 (as before) the scheduler still let a low-priority
//! thread finish its slice before a waking worker ran, and the main reactor was woken for
//! every readiness of every flood socket: in a flood of 1 MiB unsigned webhooks the
//! honest provider's p99 was 2 to 5 times its quiet one (docs/performance.md). The
//! allowance of failed checks (`strikes.rs`) bounds how many bodies such a client has
//! read; this bounds what its connections cost everyone else before and after. Trust is
//! earned, not lost first: a flood's first wave (16 bodies per address fit its share)
//! would otherwise be read on the main workers before any of it was found bad. A
//! provider's first delivery after an hour is served at idle priority, which costs it
//! nothing on a machine with CPU to spare, and waits while the CPU is busy with trusted
//! work (its timeouts then answer it, and providers retry). All suspects' reads share one
//! pace ([`Pace`], in the listener; `connections.suspect_ingest_bytes_per_sec`), which bounds what a flood
//! costs in the kernel, where no thread priority reaches.
//!
//! A connection is placed once, when it is accepted: one that began before its client
//! failed stays where it is until it closes.

use std::cell::Cell;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use crate::ingest::strikes::Strikes;
use crate::listen::{Pace, Placed, Placement};
use hookd_core::clock::Clock;

/// At most this many threads serve demoted connections.
pub(crate) const MAX_THREADS: usize = 2;

/// Where the ingest listener sends a suspect client's connections.
#[derive(Debug, Clone)]
pub(crate) struct Demote {
    handle: tokio::runtime::Handle,
    strikes: Arc<Strikes>,
    clock: Arc<dyn Clock>,
    demoted: prometheus::IntCounter,
    pace: Option<Arc<Pace>>,
}

impl Demote {
    /// Suspects by `strikes` on `clock`; `None` when the allowance is off
    /// (`max_ingest_auth_failures = 0`: no client is ever suspect) or the runtime cannot
    /// start (then every connection is served as before, and that is logged once).
    /// Their reads share `bytes_per_sec` (0: unpaced).
    pub(crate) fn new(
        strikes: Arc<Strikes>,
        clock: Arc<dyn Clock>,
        demoted: prometheus::IntCounter,
        bytes_per_sec: u64,
    ) -> Option<Self> {
        if !strikes.enabled() {
            return None;
        }
        Some(Self {
            handle: runtime()?.clone(),
            strikes,
            clock,
            demoted,
            pace: Pace::new(bytes_per_sec),
        })
    }
}

impl Placement for Demote {
    /// Where to serve a connection from `ip`, if not with everyone else's (counted).
    fn placed(&self, ip: IpAddr) -> Option<Placed> {
        self.strikes.suspect(ip, self.clock.now_ms()).then(|| {
            self.demoted.inc();
            Placed {
                handle: self.handle.clone(),
                pace: self.pace.clone(),
            }
        })
    }
}

thread_local! {
    static DEMOTED: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread is one of the demoted runtime's: work found there (a
/// suspect's large body to hash) is done in place, at idle priority, instead of being
/// queued with trusted providers' work on the checker threads.
pub(crate) fn on_demoted_thread() -> bool {
    DEMOTED.with(Cell::get)
}

fn demoted_thread_started() {
    DEMOTED.with(|d| d.set(true));
    idle_priority();
    // Where `SCHED_IDLE` is refused, nice 10 still yields to the workers.
    crate::ingest::checker::lower_priority();
}

/// Moves the calling thread to `SCHED_IDLE` (Linux): it runs when no normal thread on its
/// CPU is runnable, and a normal thread that wakes preempts it immediately (nice values
/// only weigh shares, and let a running low-priority thread keep its slice). Entering it
/// needs no privilege; if it fails the thread keeps its policy.
pub(crate) fn idle_priority() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            NormalThreadSchedulePolicy, ThreadPriority, ThreadSchedulePolicy,
            set_thread_priority_and_policy, thread_native_id,
        };
        if let Err(e) = set_thread_priority_and_policy(
            thread_native_id(),
            ThreadPriority::Min,
            ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle),
        ) {
            tracing::debug!(error = ?e, "cannot schedule a demoted connection's thread SCHED_IDLE");
        }
    }
}

/// The low-priority runtime, started on first use and kept for the process (a
/// self-recovery's next incarnation reuses it).
fn runtime() -> Option<&'static tokio::runtime::Handle> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let threads = std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .clamp(1, MAX_THREADS);
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                .thread_name("hookd-demoted")
                .on_thread_start(demoted_thread_started)
                .on_thread_park(crate::memory::parked)
                .enable_all()
                .build()
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "cannot start the runtime for suspect clients' connections; they are served with everyone else's");
                })
                .ok()
        })
        .as_ref()
        .map(tokio::runtime::Runtime::handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_suspect_clients_connection_is_placed_on_low_priority_threads() {
        let strikes = Arc::new(Strikes::new(32, 10));
        let counter = prometheus::IntCounter::new("t", "t").unwrap();
        let clock = Arc::new(hookd_core::clock::ManualClock::new(1_000));
        let demote = Demote::new(strikes.clone(), clock.clone(), counter.clone(), 0).unwrap();
        let ip: IpAddr = [10, 0, 0, 1].into();
        assert!(demote.placed(ip).is_some(), "never seen");
        strikes.cleared(ip, "shop", 1_000);
        assert!(demote.placed(ip).is_none(), "trusted");
        strikes.strike(ip, "shop", 1_000);
        let handle = demote.placed(ip).expect("suspect").handle;
        assert_eq!(counter.get(), 2);
        let (name, nice, policy, demoted) = handle
            .spawn(async {
                let tid = rustix::thread::gettid();
                (
                    std::thread::current().name().map(str::to_owned),
                    rustix::process::getpriority_process(Some(tid)).unwrap(),
                    thread_priority::thread_schedule_policy().unwrap(),
                    on_demoted_thread(),
                )
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("hookd-demoted"));
        assert_eq!(
            policy,
            thread_priority::ThreadSchedulePolicy::Normal(
                thread_priority::NormalThreadSchedulePolicy::Idle
            )
        );
        assert_eq!(nice, crate::ingest::checker::NICE);
        assert!(demoted);
        assert!(!on_demoted_thread(), "the test's own thread is not demoted");
        assert!(
            Demote::new(Arc::new(Strikes::new(0, 10)), clock, counter, 0).is_none(),
            "off with the allowance"
        );
    }
}
