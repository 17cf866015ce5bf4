//! Receiving webhooks (issue #13): the ingest listener's `POST /in/{source}`.
//!
//! - [`verify`]: provider signature schemes, pure.
//! - [`source`]: a source's definition ([`SourceSpec`]: config file, gRPC, disk) and its
//!   compiled form.
//! - [`registry`]: the sources in force (config's and gRPC's), durable through the engine.
//! - [`redact`]: opt-in payload sanitisation (JSON pointers, detectors).
//! - [`checker`]: low-priority threads that check large bodies' signatures.
//! - [`strikes`]: failed authentications per client and source; past the allowance a
//!   client's bodies are refused unread.
//! - [`demote`]: a client not trusted (no check passed in the last hour, or one failed
//!   since) has its new connections served on a low-priority runtime.
//! - [`receive`]: the handler: authenticate on the raw bytes, check, store, answer 202
//!   once durable.

pub mod checker;
pub mod demote;
pub mod receive;
pub mod redact;
pub mod registry;
pub mod source;
pub mod strikes;
pub mod verify;

pub use registry::{SourceError, Sources};
pub use source::Source;
