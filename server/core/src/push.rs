//! What the engine hands the dispatcher for one attempt, and what comes back: the
//! handoff between the single writer (`hookd-engine`) and the HTTP side
//! (`hookd-delivery`). Plain data, so the engine builds without the HTTP stack; the
//! dispatcher's keep-alive pool rides along in an opaque [`PoolSlot`].

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;

use crate::ids::MessageId;
use crate::outcome::AttemptOutcome;
use crate::signing::Secret;

/// How one push destination is reached. The engine builds a new one whenever the
/// destination's settings change; attempts hold it, so an attempt finishes with the
/// settings (and the pool) it started with.
#[derive(Debug)]
pub struct Target {
    /// The destination key (`endpoint:NAME` or `url:ORIGIN`).
    pub key: String,
    pub secrets: Vec<Secret>,
    /// The endpoint's static headers (names lower-case), sent with every attempt over the
    /// event's own headers of the same name.
    pub headers: BTreeMap<String, String>,
    /// Egress through this HTTP proxy (CONNECT), `http://[user:password@]host:port`.
    pub proxy: Option<Redacted>,
    /// mTLS: the client certificate chain and key (PEM) presented to the endpoint.
    pub client_identity: Option<ClientIdentity>,
    /// OAuth2 client credentials: a bearer token fetched and kept for the attempts.
    pub oauth2: Option<OAuth2>,
    pub connect_timeout: Duration,
    /// The whole attempt, response body included.
    pub timeout: Duration,
    /// Idle keep-alive connections kept (the destination's concurrency limit).
    pub pool_size: usize,
    /// Whose deliveries these are: hookd's outbound connections are shared between tenants
    /// by weight (issue #52).
    pub share: Share,
    /// The keep-alive pool, built by the dispatcher for the first attempt. It lives as long
    /// as this target: freed once the engine has rebuilt or forgotten the destination and
    /// no attempt holds it, so a million URL origins seen once do not leave a million pools.
    pub pool: PoolSlot,
}

/// A tenant's number and its weight, as its destinations' targets share them: the engine
/// changes the weight in place when the tenant's changes, without rebuilding the targets
/// (and their keep-alive pools).
#[derive(Debug, Clone, Default)]
pub struct Share {
    pub tenant: u32,
    pub weight: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl Share {
    pub fn weight(&self) -> u32 {
        self.weight
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(1)
    }
}

/// A value that may hold credentials: its `Debug` shows none of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted(pub String);

impl std::fmt::Debug for Redacted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"…\"")
    }
}

/// A client certificate chain and its private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    pub certificate_pem: String,
    pub key_pem: Redacted,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity").finish_non_exhaustive()
    }
}

/// OAuth2 client credentials (RFC 6749 section 4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuth2 {
    pub token_url: String,
    pub client_id: String,
    pub client_secret: Redacted,
    pub scopes: Vec<String>,
    pub audience: String,
}

/// `hookd-replay`'s value on a dead letter made ready again in place (ReplayDeadLetters,
/// or a replay job that took it): a replay job's copy of a delivered message names the job.
pub const REPLAYED_DEAD_LETTER: &str = "dead-letter";

/// One attempt to hand to the dispatcher.
#[derive(Debug)]
pub struct Delivery {
    pub id: MessageId,
    pub attempt: u32,
    pub target: Arc<Target>,
    pub url: String,
    pub payload: Bytes,
    pub headers: BTreeMap<String, String>,
    /// Sent as `idempotency-key` (the message id when the event had none).
    pub idempotency_key: String,
    /// Sent as `webhook-event-type` when set.
    pub event_type: String,
    /// Sent as `hookd-event-id`: the event a publish's deliveries share; empty: the
    /// message is its own event (its id is sent).
    pub event_id: String,
    /// `webhook-timestamp`: when the engine handed the attempt out.
    pub timestamp_s: u64,
    /// Its place in a FIFO lane of an ordered endpoint (`None`: unordered).
    pub lane: Option<InLane>,
    /// A replay job's copy of a delivered message: the original's id, sent (and signed)
    /// as `webhook-id` in place of the copy's own. Empty: not a copy.
    pub replay_of: String,
    /// The replay job that sent it, as `hookd-replay` (empty: none).
    pub replay_job: String,
}

/// A delivery's place in its FIFO lane, sent as `webhook-sequence` (its number: gap-free
/// per ordering key, so a receiver sees a gap or a duplicate) and `hookd-ordering-key`,
/// with `hookd-out-of-order: true` on a dead letter replayed after its lane moved on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InLane {
    pub key: String,
    pub seq: u64,
    pub out_of_order: bool,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Delivered {
        status: u16,
    },
    /// Worth another attempt. `status` 0: no response.
    Retry {
        status: u16,
        /// `HttpError`, `Timeout` or `NetworkError`.
        outcome: AttemptOutcome,
        error: String,
        retry_after: Option<RetryAfter>,
    },
    /// Another attempt cannot succeed: straight to the dead-letter queue.
    Permanent {
        status: u16,
        error: String,
    },
    /// The destination guard refused every address: dead letter with that reason.
    Refused {
        error: String,
    },
    /// hookd itself ran short (descriptors, memory, local ports, its outbound cap): the
    /// receiver was never tried; tried again later, never dead-lettered for it.
    Local {
        error: String,
    },
}

#[derive(Debug)]
pub struct AttemptReport {
    pub id: MessageId,
    pub attempt: u32,
    pub verdict: Verdict,
    pub latency_us: u64,
}

/// When the receiver asks to be left alone until.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// `Retry-After: <seconds>`, from the time the answer arrived.
    Seconds(u64),
    /// `Retry-After: <HTTP date>`, as Unix ms.
    At(u64),
}

/// A place for the dispatcher's keep-alive pool of one [`Target`], built at its first
/// attempt and dropped with the target. Opaque to everyone but the dispatcher.
#[derive(Default)]
pub struct PoolSlot(OnceLock<Box<dyn Any + Send + Sync>>);

impl PoolSlot {
    /// The pool, made by `make` on first use; None if the slot holds another type.
    pub fn get_or_init<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Option<&T> {
        self.0.get_or_init(|| Box::new(make())).downcast_ref()
    }
}

impl std::fmt::Debug for PoolSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.get().is_some() {
            "PoolSlot(built)"
        } else {
            "PoolSlot(empty)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_slot_is_built_once_and_read_as_its_own_type() {
        let slot = PoolSlot::default();
        let mut made = 0;
        assert_eq!(
            slot.get_or_init(|| {
                made += 1;
                7u32
            }),
            Some(&7)
        );
        assert_eq!(
            slot.get_or_init(|| {
                made += 1;
                8u32
            }),
            Some(&7)
        );
        assert_eq!(made, 1);
        assert_eq!(slot.get_or_init(|| "another type"), None);
    }
}
