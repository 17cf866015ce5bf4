//! hookd's vocabulary and pure machines: everything the storage, the engine, delivery and
//! the edges share, and nothing that does I/O on its own (no tokio, no redb, no network;
//! `secrets` reads its key files when the configuration names them).
//!
//! - [`ids`]: message ids (UUIDv7) and lease ids; [`clock`]: where time is read;
//!   [`destination`]: where a message goes and its stored key.
//! - [`filter`]: subscription filters (Outpost's operator JSON); [`topics`]: event-type
//!   patterns and the index that matches a topic against every subscription.
//! - [`names`]: the name rule, hex, and the limits more than one edge checks;
//!   [`text`]: bounded stored text.
//! - [`retry`], [`breaker`], [`limiter`], [`backpressure`]: backoff with full jitter, the
//!   circuit breaker, the token bucket, the watermarks (time is a parameter).
//! - [`stats`], [`alerts`], [`deadletters`]: rolling figures, alert rules, the dead-letter
//!   filter and analysis.
//! - [`secrets`]: endpoint secrets sealed at rest, and their summaries.
//! - [`push`]: the handoff between the engine and the dispatcher (an attempt, its
//!   outcome); [`outcome`]: how an attempt ended; [`signing`]: Standard Webhooks signatures.
//! - [`source`]: an ingest source's definition (config, gRPC, disk).
//! - [`ratelog`]: a budget of log lines per call site.
//! - [`scope`]: tenants, the kinds of stored object, and the reference each is known by.
//! - [`quota`]: a tenant's quotas, and what refuses an event or an object.

#![forbid(unsafe_code)]

pub mod alerts;
pub mod backpressure;
pub mod breaker;
pub mod clock;
pub mod deadletters;
pub mod destination;
pub mod fair;
pub mod filter;
pub mod ids;
pub mod jwks;
pub mod limiter;
pub mod names;
pub mod outcome;
pub mod payload;
pub mod push;
pub mod quota;
pub mod ratelog;
pub mod retry;
pub mod scope;
pub mod secrets;
pub mod signing;
pub mod source;
pub mod stats;
pub mod subscription;
pub mod text;
pub mod topics;
