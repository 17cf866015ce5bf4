//! The `hookd` binary. All of it lives in the library (`hookd::cli`), so the test harness
//! can run the very same code as a separate process.

#![forbid(unsafe_code)]

/// mimalloc instead of the system allocator: in a profile of EnqueueBatch, glibc's
/// malloc and free were about 10 % of the CPU; with mimalloc batch enqueue went from about
/// 101,000 to 117,000 events/s (ARCHITECTURE.md, "Memory").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    hookd::cli::main()
}
