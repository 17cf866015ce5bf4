//! hookd-loadtest: how much one box takes for a mix of endpoints, and what latency agents
//! see. A run starts hookd (or targets a running one), serves simulated endpoints on
//! loopback, drives traffic from a TOML scenario, checks that every acknowledged event was
//! delivered, and reports HDR latency percentiles, throughput over time and hookd's CPU
//! and RSS.
//!
//! - [`scenario`]: the TOML file and its checks; [`dist`]: latency distributions.
//! - [`schedule`]: intended send times and the open loop (coordinated-omission correction).
//! - [`drive`]: the calls (unary or batch, open or closed loop) and the pull consumers;
//!   [`inbound`]: the same traffic as signed webhooks on hookd's ingest listener.
//! - [`sim`]: the simulated endpoints; [`target`]: the hookd under test; [`host`]: the
//!   box beside it (CPU, load, this tool's CPU, an fsync probe) and what limited a run.
//! - [`tally`]: what was sent, acknowledged and delivered; [`checker`]: the verdict.
//! - [`capacity`]: the search for the highest rate that holds the SLO.
//! - [`noisy`]: the noisy-neighbour scenario (tenants sharing one hookd; issue #52).
//! - [`report`]: table, JSON, SVG; [`run`]: one run start to end.

#![forbid(unsafe_code)]

pub mod capacity;
pub mod checker;
pub mod dist;
pub mod drive;
pub mod host;
pub mod inbound;
pub mod noisy;
pub mod report;
pub mod run;
pub mod scenario;
pub mod schedule;
pub mod sim;
pub mod tally;
pub mod target;
