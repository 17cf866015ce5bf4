//! Connections of suspect clients served at low priority.
//!
//! A client that is not trusted ([`Strikes::suspect`]: it passed no signature check in
//! the last hour, or since then failed one or was refused for holding its whole share of
//! the unverified budget) has its new connections to the ingest listener served on a
//! runtime of their own, whose threads run at the checkers' nice value
//! ([`crate::ingest::checker::NICE`]): their reading, refusing and closing then take the
//! CPU only when the runtime that serves gRPC and the trusted providers has none to
//! spare. In a flood
//! of 1 MiB unsigned webhooks on one core every connection had cost the shared workers
//! 250 to 380 µs (docs/performance.md), and a provider's new connection waited behind
//! dozens of them. The allowance of failed checks (`strikes.rs`) bounds how many bodies
//! such a client has read; this bounds what its connections cost everyone else before
//! and after. Trust is earned, not lost first: a flood's first wave (16 bodies per
//! address fit its share) would otherwise be read on the main workers before any of it
//! was found bad. A provider's first delivery after an hour is served at low priority,
//! which costs it nothing on a machine with CPU to spare.
//!
//! A connection is placed once, when it is accepted: one that began before its client
//! failed stays where it is until it closes.

use std::net::IpAddr;
use std::sync::{Arc, OnceLock};

use crate::clock::Clock;
use crate::ingest::strikes::Strikes;

/// At most this many threads serve demoted connections.
pub const MAX_THREADS: usize = 2;

/// Where the ingest listener sends a suspect client's connections.
#[derive(Debug, Clone)]
pub struct Demote {
    handle: tokio::runtime::Handle,
    strikes: Arc<Strikes>,
    clock: Arc<dyn Clock>,
    demoted: prometheus::IntCounter,
}

impl Demote {
    /// Suspects by `strikes` on `clock`; `None` when the allowance is off
    /// (`max_ingest_auth_failures = 0`: no client is ever suspect) or the runtime cannot
    /// start (then every connection is served as before, and that is logged once).
    pub fn new(
        strikes: Arc<Strikes>,
        clock: Arc<dyn Clock>,
        demoted: prometheus::IntCounter,
    ) -> Option<Self> {
        if !strikes.enabled() {
            return None;
        }
        Some(Self {
            handle: runtime()?.clone(),
            strikes,
            clock,
            demoted,
        })
    }

    /// The runtime to serve a connection from `ip` on, if not the caller's (counted).
    pub fn placed(&self, ip: IpAddr) -> Option<&tokio::runtime::Handle> {
        self.strikes.suspect(ip, self.clock.now_ms()).then(|| {
            self.demoted.inc();
            &self.handle
        })
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
                .on_thread_start(crate::ingest::checker::lower_priority)
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
        let clock = Arc::new(crate::clock::ManualClock::new(1_000));
        let demote = Demote::new(strikes.clone(), clock.clone(), counter.clone()).unwrap();
        let ip: IpAddr = [10, 0, 0, 1].into();
        assert!(demote.placed(ip).is_some(), "never seen");
        strikes.cleared(ip, "shop", 1_000);
        assert!(demote.placed(ip).is_none(), "trusted");
        strikes.strike(ip, "shop", 1_000);
        let handle = demote.placed(ip).expect("suspect").clone();
        assert_eq!(counter.get(), 2);
        let (name, nice) = handle
            .spawn(async {
                let tid = rustix::thread::gettid();
                (
                    std::thread::current().name().map(str::to_owned),
                    rustix::process::getpriority_process(Some(tid)).unwrap(),
                )
            })
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("hookd-demoted"));
        assert_eq!(nice, crate::ingest::checker::NICE);
        assert!(
            Demote::new(Arc::new(Strikes::new(0, 10)), clock, counter).is_none(),
            "off with the allowance"
        );
    }
}
