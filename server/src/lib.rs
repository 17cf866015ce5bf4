//! hookd: a durable webhook delivery queue with a gRPC API.
//!
//! # Layout
//! This crate is the edges and the wiring; what they stand on is in the crates below it
//! (`ARCHITECTURE.md`, "Crates"): `hookd-core` (the vocabulary and pure machines),
//! `hookd-metrics`, `hookd-storage` (log, store, pipeline), `hookd-delivery` (push over
//! HTTP) and `hookd-engine` (the single writer).
//! - [`api`]: the gRPC service `hookd.v1.Hookd`: validation and mapping to the wire;
//!   [`error`]: where errors and the engine's refusals become a `tonic::Status`.
//! - [`ingest`]: `POST /in/{source}` on the ingest listener: verify, check, redact, enqueue.
//! - [`console`]: the operator's web console on the HTTP listener (`/ui`).
//! - [`http`]: `/healthz` and `/metrics`; [`watchdog`]: the systemd watchdog.
//! - [`listen`]: accept, connection limits and shares, TLS; [`auth`]: who may call what.
//! - [`config`]: the configuration file, every crate's settings in one place.
//! - [`app`]: wiring; [`app::run`] is the entry point, each store's lifetime in named steps
//!   (`app/incarnation.rs`). [`memory`]: allocator trim.
//! - [`cli`]: the binary's commands (its client subcommands are the crate `hookd-ctl`).
//!
//! Tests plug into [`app::run_with`] with [`app::Hooks`] (a manual clock, storage
//! faults, a seeded jitter, a disk probe): plain items, behind no feature, that the binary
//! never calls and the linker leaves out (`.ci/no-test-hooks` checks the binary). The test
//! kit (hookd in-process or as a child process, free ports, the `__hookd` entry, an HTTP
//! receiver) is the crate `hookd-testkit`, which the binary does not depend on.
//!
//! See `ARCHITECTURE.md` and `docs/durability.md` at the repository root.

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod auth;
pub mod catalog;
pub mod catch_up;
pub mod cli;
pub mod config;
pub mod console;
pub mod error;
pub mod http;
pub mod ingest;
pub(crate) mod jwks;
pub mod listen;
pub(crate) mod mcp;
pub mod memory;
pub(crate) mod otel;
pub(crate) mod portal;
pub(crate) mod portal_links;
pub mod prepare;
pub mod replay_jobs;
pub(crate) mod rest;
pub mod subscriptions;
pub mod watchdog;

pub use app::{Hooks, run_with};
pub use app::{Listeners, ServeError, run};
pub use config::Config;
