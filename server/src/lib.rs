//! hookd: a durable webhook delivery queue with a gRPC API.
//!
//! # Layout
//! Data flows one way: `api -> engine (store + wheel) -> delivery -> endpoint`; the only
//! way back is an attempt's report, through a callback handed to [`delivery`] at wiring.
//! - [`api`]: the gRPC service `hookd.v1.Hookd`: validation and mapping to the wire.
//! - [`engine`]: the single writer thread. Group commit of every request and timer into one
//!   redb transaction; owns the in-memory index of live messages.
//! - [`store`]: the redb tables and their encodings; reads from any thread.
//! - [`delivery`]: push over HTTP(S): dispatcher, per-destination pools, SSRF guard at
//!   dial time, Standard Webhooks signing, outcome classification. Never touches the store.
//! - [`wheel`]: the hierarchical timer wheel (pure).
//! - [`wal`]: write-ahead log segments (checksummed frames, torn-tail cut); not yet used by
//!   the engine (issue #10).
//! - [`retry`], [`breaker`], [`limiter`], [`stats`]: backoff, circuit breaker, token bucket
//!   and rolling statistics (pure; time is a parameter).
//! - [`server`]: wiring, [`server::run`] is the entry point; [`cli`]: the binary.
//!
//! Tests plug into [`server::run_with`] with [`server::Hooks`] (a manual clock, storage
//! faults, a seeded jitter, a disk probe): plain items, behind no feature, that the binary
//! never calls and the linker leaves out (`.ci/no-test-hooks` checks the binary). The test
//! kit (hookd in-process or as a child process, free ports, the `__hookd` entry, an HTTP
//! receiver) is the crate `hookd-testkit`, which the binary does not depend on.
//!
//! See `ARCHITECTURE.md` and `docs/durability.md` at the repository root.

#![forbid(unsafe_code)]

/// `println!` for the command line's output: a closed stdout (`hookd stats | head -2`) ends
/// the command quietly instead of panicking with "Broken pipe" (see [`ctl::write_stdout`]).
macro_rules! outln {
    () => {
        $crate::ctl::write_stdout(format_args!("\n"))
    };
    ($($t:tt)*) => {
        $crate::ctl::write_stdout(format_args!("{}\n", format_args!($($t)*)))
    };
}

/// `print!` with [`outln!`]'s handling of a closed stdout.
macro_rules! out {
    ($($t:tt)*) => {
        $crate::ctl::write_stdout(format_args!($($t)*))
    };
}

pub mod api;
pub mod auth;
pub mod cli;
pub mod config;
pub mod console;
pub mod ctl;
pub mod error;
pub mod http;
pub mod ingest;
pub mod listen;
pub mod memory;
pub mod server;
pub mod watchdog;

pub use config::Config;
pub use server::{Hooks, run_with};
pub use server::{Listeners, ServeError, run};
