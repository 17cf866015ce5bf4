//! The `hookd` binary. All of it lives in the library (`hookd::cli`), so the test harness
//! can run the very same code as a separate process.

#![deny(unsafe_code)]

/// mimalloc instead of the system allocator: in a profile of EnqueueBatch, glibc's
/// malloc and free were about 10 % of the CPU; with mimalloc batch enqueue went from about
/// 101,000 to 117,000 events/s (ARCHITECTURE.md, "Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's forced collect on the calling thread (see `hookd::memory`): the one unsafe
/// call of hookd, measured to be needed (after a flood of 1 MiB webhooks an idle hookd
/// kept tens of MiB it had freed; docs/performance.md).
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: mi_collect takes no pointers and may be called on any thread at any time;
    // it only returns free memory mimalloc holds to the system.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

fn main() -> std::process::ExitCode {
    hookd::memory::register_trim(trim);
    hookd::cli::main()
}
