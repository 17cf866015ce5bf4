//! Why the engine did not do what it was asked: its own error type, in its own words.
//!
//! The engine knows nothing of gRPC: it names what is wrong (an unknown endpoint, an
//! expired lease), and `hookd::error` alone turns that into a status code and a message that
//! names the request's field. A refusal changes nothing: the request's writes are not
//! applied.

use hookd_core::ids::{LeaseId, MessageId};

/// A request the engine refused, or could not serve. Exhaustive on purpose: the edge that
/// maps it to a status (`hookd::error`) names every refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The refusal of the `index`-th item of a request's list (an Ack's leases, a
    /// Replay's ids): all-or-nothing requests name the first item refused.
    #[error("item {index}: {refusal}")]
    At { index: usize, refusal: Box<Refusal> },
    #[error("no endpoint named {name:?} (register it with PutEndpoint)")]
    UnknownEndpoint { name: String },
    #[error("no endpoint named {name:?}")]
    NoEndpoint { name: String },
    #[error(
        "endpoint {name:?} still has {live} live messages; delete it once they are delivered or dead-lettered"
    )]
    EndpointBusy { name: String, live: u64 },
    #[error("endpoint {name:?} no longer exists; put it again before replaying")]
    EndpointGone { name: String },
    #[error("no message {id}")]
    NoMessage { id: MessageId },
    #[error("message {id} is not a dead letter")]
    NotDeadLetter { id: MessageId },
    #[error("endpoint {name:?} of message {id} no longer exists")]
    MessageEndpointGone { id: MessageId, name: String },
    #[error(
        "message {id} is not in flight (already acknowledged, dead-lettered or never enqueued)"
    )]
    NotInFlight { id: MessageId },
    #[error("message {id} is delivered by hookd over HTTP, not leased to consumers")]
    NotPull { id: MessageId },
    #[error(
        "lease {lease} has expired; the message is now at attempt {current} and will be (or was) delivered again"
    )]
    LeaseExpired { lease: LeaseId, current: u32 },
    #[error("lease {lease} has expired; the message was since completed at attempt {completed}")]
    CompletedLater { lease: LeaseId, completed: u32 },
    #[error("no queue named {name:?} has settings (a queue without any is unordered)")]
    NoQueue { name: String },
    #[error("queue {name:?} is defined in the config file; change it there")]
    QueueFromConfig { name: String },
    #[error("this tenant holds {max} queues with settings, hookd's limit; delete one first")]
    TooManyQueues { max: usize },
    #[error("no event type named {name:?}")]
    NoEventType { name: String },
    #[error("this tenant declares {max} event types, hookd's limit; delete one first")]
    TooManyEventTypes { max: usize },
    #[error("no token named {name:?}")]
    NoToken { name: String },
    #[error("a token named {name:?} exists")]
    TokenExists { name: String },
    #[error("this tenant holds {max} tokens, hookd's limit; revoke one first")]
    TooManyTokens { max: usize },
    #[error("no tenant named {name:?}")]
    NoTenant { name: String },
    #[error("a tenant named {name:?} exists")]
    TenantExists { name: String },
    #[error("hookd holds {max} tenants, its limit; delete one first")]
    TooManyTenants { max: usize },
    #[error("tenant \"default\" cannot be deleted: calls that name no tenant act on it")]
    DefaultTenant,
    #[error(
        "tenant {name:?} still has {live} live messages; delete it once they are delivered, or with force to drop them"
    )]
    TenantBusy { name: String, live: u64 },
    /// Too many accepted writes wait for the disk: the client should back off.
    #[error(
        "hookd is at capacity: {queued} bytes of accepted writes are waiting for the disk (limit {limit}); retry with backoff"
    )]
    AtCapacity { queued: u64, limit: u64 },
    /// A watermark's hard mark: the destination (or hookd) holds as much as it may.
    #[error("{0}")]
    OverMark(hookd_core::backpressure::OverMark),
    /// One of the tenant's quotas (issue #51, 4).
    #[error("{0}")]
    OverQuota(hookd_core::quota::OverQuota),
    /// The data directory's file system is inside hookd's reserve.
    #[error("{0}")]
    DiskFull(hookd_storage::disk::Short),
    /// Storage failed, or the engine stopped: nothing was acknowledged.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl Refusal {
    /// The `reason` label of `hookd_enqueue_refused_total` for a refusal counted there:
    /// the watermarks, the disk reserve and the write queue; None for the others (a bad
    /// request is not a refusal of capacity).
    pub fn metric_reason(&self) -> Option<&'static str> {
        use hookd_core::backpressure::{Measure, Scope};
        Some(match self {
            Self::OverMark(over) => match (over.scope, over.measure) {
                (Scope::Destination, Measure::Messages) => "destination_messages",
                (Scope::Destination, Measure::Bytes) => "destination_bytes",
                (Scope::All, Measure::Messages) => "total_messages",
                (Scope::All, Measure::Bytes) => "total_bytes",
            },
            Self::DiskFull { .. } => "disk_reserve",
            Self::OverQuota(_) => "tenant_quota",
            Self::AtCapacity { .. } => "write_queue",
            _ => return None,
        })
    }

    /// How long a client should wait before trying again, for refusals that clear by
    /// themselves (capacity, watermarks, disk space).
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Self::At { refusal, .. } => refusal.retry_after_ms(),
            Self::AtCapacity { .. } => Some(200),
            Self::OverMark(over) => Some(over.retry_after_ms),
            Self::DiskFull(_) => Some(5_000),
            Self::OverQuota(over) => over.retry_after_ms,
            _ => None,
        }
    }

    /// This refusal, about the `index`-th item of the request's list.
    pub fn at(self, index: usize) -> Self {
        Self::At {
            index,
            refusal: Box::new(self),
        }
    }
}

impl From<hookd_storage::store::StoreError> for Refusal {
    fn from(e: hookd_storage::store::StoreError) -> Self {
        Self::Unavailable(e.to_string())
    }
}
