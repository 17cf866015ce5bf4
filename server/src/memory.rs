//! Giving memory back to the system after a burst.
//!
//! mimalloc frees memory lazily: a page freed on a thread is purged (returned with
//! `MADV_DONTNEED`) by later allocator activity on that thread, and the arenas' pending
//! purges by later activity anywhere. A server that goes quiet after a burst (a flood
//! of 1 MiB webhooks, say) therefore kept tens of MiB it no longer used. The binary
//! registers a trim (`mi_collect(true)`: this thread's free pages, abandoned threads'
//! segments, the arenas' pending purges); each runtime worker runs it when it parks, at
//! most once per [`TRIM_EVERY`], and a thread of its own every [`TRIM_EVERY`], so an idle
//! hookd gives back what the burst left.
//!
//! Transparent huge pages are turned off for the process when it starts serving
//! ([`no_huge_pages`]).
//!
//! The library holds no unsafe code: the trim is a plain function the binary provides.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A worker trims at most this often (a trim costs tens of microseconds).
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(5);

static TRIM: OnceLock<fn()> = OnceLock::new();

/// The binary's allocator trim; the first registration holds. Also starts a thread that
/// trims every [`TRIM_EVERY`]: a worker that freed a burst's memory just after its last
/// trim and then sleeps would hold it, and what other threads freed waits in mimalloc's
/// arenas for a purge that any thread's forced collect runs.
pub fn register_trim(trim: fn()) {
    if TRIM.set(trim).is_err() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("hookd-trim".into())
        .spawn(move || {
            loop {
                std::thread::sleep(TRIM_EVERY);
                trim();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the allocator trim thread; workers still trim when idle");
    }
}

/// Turns transparent huge pages off for this process (`PR_SET_THP_DISABLE`, which also
/// overrides an `madvise(MADV_HUGEPAGE)`; inherited by threads and children).
///
/// mimalloc asks for huge pages on its arenas, so a fresh allocation faulted in and
/// zeroed 2 MiB at once on whichever runtime worker touched it: in a flood of 1 MiB
/// webhooks on one core, 37 % of the workers' time was `clear_page_erms` under huge-page
/// faults, which every request queued behind that worker waited out. Without them an
/// idle hookd holds 19 to 24 MiB instead of 40, and the unary and batch throughput legs
/// did not move beyond their noise (docs/performance.md; redb's file is in the kernel's
/// page cache, which this does not touch).
pub(crate) fn no_huge_pages() {
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::debug!(error = %e, "cannot turn transparent huge pages off; continuing with them");
    }
}

thread_local! {
    static LAST_TRIM: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// A runtime worker is about to park: trims if none has run on it for [`TRIM_EVERY`].
pub fn parked() {
    let Some(trim) = TRIM.get() else {
        return;
    };
    let now = Instant::now();
    let due = LAST_TRIM.with(|last| match last.get() {
        Some(at) if now.duration_since(at) < TRIM_EVERY => false,
        _ => {
            last.set(Some(now));
            true
        }
    });
    if due {
        trim();
    }
}
