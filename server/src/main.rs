//! The `hookd` binary. All of it lives in the library (`hookd::cli`), so the test harness
//! can run the very same code as a separate process.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    hookd::cli::main()
}
