/// The allocator of the `hookd` binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The `hookd` binary's allocator trim (server/src/main.rs), the same call.
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
