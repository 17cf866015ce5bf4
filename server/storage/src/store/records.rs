//! What hookd keeps in redb, and how it is encoded.
//!
//! Records are protobuf (prost) so fields can be added without a migration. The schedule
//! entry is a fixed little layout instead: it is the one table read in full at start, and
//! must stay compact so a restart with a million waiting messages is quick.

use std::collections::BTreeMap;

use crate::store::StoreError;
use hookd_core::outcome::AttemptOutcome;

/// Durable state of a message, numbered as `hookd.v1.MessageState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for its first attempt (maybe delayed) or ready for it.
    Pending = 1,
    /// Waiting for a retry after a failed attempt.
    Retry = 2,
    /// Leased to a consumer (or being delivered) until its deadline.
    Leased = 3,
    Dead = 4,
}

impl State {
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Pending),
            2 => Some(Self::Retry),
            3 => Some(Self::Leased),
            4 => Some(Self::Dead),
            _ => None,
        }
    }
}

/// The immutable part of a message, written once at enqueue and never rewritten: state
/// changes touch only the small schedule row (and the history when an attempt ends).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MessageRecord {
    /// `Destination::encode()`.
    #[prost(string, tag = "1")]
    pub destination: String,
    #[prost(string, tag = "2")]
    pub event_type: String,
    #[prost(string, tag = "3")]
    pub idempotency_key: String,
    #[prost(btree_map = "string, string", tag = "4")]
    pub headers: BTreeMap<String, String>,
    #[prost(uint64, tag = "5")]
    pub created_ms: u64,
    #[prost(bytes = "vec", tag = "6")]
    pub payload: Vec<u8>,
    /// The message's own backoff (0 = the destination's).
    #[prost(uint64, tag = "7")]
    pub retry_base_ms: u64,
    #[prost(uint64, tag = "8")]
    pub retry_cap_ms: u64,
    /// The event a publish's deliveries share (its id, as text); empty: the message is
    /// its own event (an Enqueue to one destination).
    #[prost(string, tag = "9")]
    pub event_id: String,
    /// The declared pointers' values the edge found in the payload, each the pointer, a
    /// zero byte and the value's text (`search::declared_text`): what the search index
    /// keeps of the payload (format 11).
    #[prost(string, repeated, tag = "10")]
    pub indexed: Vec<String>,
    /// A replay job's copy of a delivered message: the original's id (as text), which its
    /// deliveries carry as `webhook-id` (and sign), so a receiver that deduplicates by it
    /// sees the event it already has. Empty: not a copy.
    #[prost(string, tag = "11")]
    pub replay_of: String,
    /// The replay job that made the copy, sent as `hookd-replay`.
    #[prost(string, tag = "12")]
    pub replay_job: String,
}

/// Finished attempts of a message, written when an attempt ends (not at enqueue or lease).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistoryRecord {
    /// The most recent attempts, oldest first (capped at `MAX_HISTORY`).
    #[prost(message, repeated, tag = "1")]
    pub attempts: Vec<AttemptRecord>,
    #[prost(string, tag = "2")]
    pub last_error: String,
}

/// How many attempts a message keeps in its history.
pub(crate) const MAX_HISTORY: usize = 32;

pub use hookd_core::text::{MAX_TEXT_BYTES, bound_text};

impl AttemptRecord {
    /// Cuts its texts to what is stored (see [`MAX_TEXT_BYTES`]).
    pub fn bounded(mut self) -> Self {
        bound_text(&mut self.error, MAX_TEXT_BYTES);
        bound_text(&mut self.outcome, 64);
        self
    }
}

impl HistoryRecord {
    /// A history from a format-2 `history` row (if any) and the `attempts` rows after it,
    /// oldest first: the last [`MAX_HISTORY`] attempts, and the last error among them (or
    /// the row's, if none of the rows has one).
    pub(crate) fn assemble(legacy: Option<HistoryRecord>, rows: Vec<AttemptRecord>) -> Self {
        let mut out = legacy.unwrap_or_default();
        for attempt in rows {
            out.push(attempt);
        }
        out
    }

    pub fn push(&mut self, attempt: AttemptRecord) {
        let attempt = attempt.bounded();
        if self.attempts.len() >= MAX_HISTORY {
            self.attempts.remove(0);
        }
        if !attempt.error.is_empty() {
            self.last_error.clone_from(&attempt.error);
        }
        self.attempts.push(attempt);
    }
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AttemptRecord {
    #[prost(uint32, tag = "1")]
    pub number: u32,
    #[prost(uint64, tag = "2")]
    pub started_ms: u64,
    #[prost(uint64, tag = "3")]
    pub ended_ms: u64,
    #[prost(string, tag = "4")]
    pub outcome: String,
    #[prost(string, tag = "5")]
    pub error: String,
    /// Push attempts: the HTTP status (0 = no response) and the attempt's duration.
    #[prost(uint32, tag = "6")]
    pub http_status: u32,
    #[prost(uint64, tag = "7")]
    pub latency_us: u64,
}

/// What is kept of a message once it has been acknowledged or delivered: its metadata and
/// every attempt, not the payload. Swept after `completed_retention_secs`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DoneRecord {
    #[prost(string, tag = "1")]
    pub destination: String,
    #[prost(string, tag = "2")]
    pub event_type: String,
    #[prost(string, tag = "3")]
    pub idempotency_key: String,
    #[prost(uint64, tag = "4")]
    pub payload_size: u64,
    #[prost(uint64, tag = "5")]
    pub created_ms: u64,
    #[prost(uint64, tag = "6")]
    pub completed_ms: u64,
    #[prost(uint32, tag = "7")]
    pub attempts: u32,
    #[prost(uint32, tag = "8")]
    pub max_attempts: u32,
    #[prost(message, optional, tag = "9")]
    pub history: Option<HistoryRecord>,
    /// The publish's event id, as [`MessageRecord::event_id`].
    #[prost(string, tag = "10")]
    pub event_id: String,
    /// Its FIFO lane's ordering key, at an ordered destination (empty: unordered, or the
    /// destination's one lane), so a replay job's copy goes back to the same lane.
    #[prost(string, tag = "11")]
    pub ordering_key: String,
    /// Delivered inside a FIFO lane (`ordering_key` names it, empty or not).
    #[prost(bool, tag = "12")]
    pub ordered: bool,
    /// Its number in that lane (`webhook-sequence`).
    #[prost(uint64, tag = "13")]
    pub sequence: u64,
}

impl DoneRecord {
    /// Was the message completed by a consumer's Ack of attempt `attempt`?
    pub fn acked_at(&self, attempt: u32) -> bool {
        self.attempts == attempt
            && self
                .history
                .as_ref()
                .and_then(|h| h.attempts.last())
                .is_some_and(|a| a.number == attempt && a.outcome == AttemptOutcome::Acked.as_str())
    }
}

/// A registered endpoint, as stored. Its own type, not the wire's `hookd.v1.Endpoint`, so
/// that editing the `.proto` never edits the disk format. Format version 1 stored the wire
/// type, so the tags here are the same and such rows decode unchanged.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EndpointRecord {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub url: String,
    #[prost(string, tag = "3")]
    pub description: String,
    /// 0 = the server's default, here and below.
    #[prost(uint32, tag = "4")]
    pub max_attempts: u32,
    #[prost(uint64, tag = "5")]
    pub retry_base_ms: u64,
    #[prost(uint64, tag = "6")]
    pub retry_cap_ms: u64,
    /// Set by hookd on 410 Gone; cleared by PutEndpoint.
    #[prost(bool, tag = "7")]
    pub disabled: bool,
    #[prost(uint64, tag = "8")]
    pub created_ms: u64,
    #[prost(uint64, tag = "9")]
    pub updated_ms: u64,
    /// Standard Webhooks signing secrets (`whsec_...`).
    #[prost(string, repeated, tag = "10")]
    pub secrets: Vec<String>,
    #[prost(uint64, tag = "11")]
    pub connect_timeout_ms: u64,
    #[prost(uint64, tag = "12")]
    pub timeout_ms: u64,
    #[prost(uint32, tag = "13")]
    pub max_in_flight: u32,
    /// 0 = no rate limit.
    #[prost(double, tag = "14")]
    pub rate_limit_per_s: f64,
    #[prost(uint32, tag = "15")]
    pub rate_limit_burst: u32,
    #[prost(string, tag = "16")]
    pub disabled_reason: String,
    #[prost(uint64, tag = "17")]
    pub disabled_ms: u64,
    /// An operator's pause (PauseEndpoint), until ResumeEndpoint.
    #[prost(bool, tag = "18")]
    pub paused: bool,
    #[prost(string, tag = "19")]
    pub paused_reason: String,
    #[prost(uint64, tag = "20")]
    pub paused_ms: u64,
    /// Static headers sent with every attempt (names lower-case); the wire's tag.
    #[prost(btree_map = "string, string", tag = "22")]
    pub headers: std::collections::BTreeMap<String, String>,
    /// Egress proxy, `http://[user:password@]host:port` (the wire's tag, as given).
    #[prost(string, tag = "23")]
    pub proxy_url: String,
    /// mTLS client certificate chain (PEM).
    #[prost(string, tag = "24")]
    pub client_certificate_pem: String,
    /// Its private key (PEM), sealed like the secrets when `[secrets] keys` are set.
    #[prost(string, tag = "25")]
    pub client_key_pem: String,
    /// OAuth2 client credentials (tag 27, as the wire's; 26 is answers-only there).
    #[prost(message, optional, tag = "27")]
    pub oauth2: Option<OAuth2Record>,
    /// FIFO lanes (format 8): 0 unordered, 1 `block`, 2 `park` (see the engine's `lanes`).
    #[prost(uint32, tag = "28")]
    pub fifo: u32,
    /// The public halves of the endpoint's `v1a` keys, current and retired (its JWKS):
    /// a key taken off the endpoint stays, retired, so that what it signed still
    /// verifies. A new field, not a format change: a hookd that predates it ignores it.
    #[prost(message, repeated, tag = "29")]
    pub signing_keys: Vec<SigningKeyRecord>,
    /// Its receiver may pull its retained events (issue #53, 3).
    #[prost(bool, tag = "30")]
    pub catch_up: bool,
    /// How long its completed messages (summary and payload) are kept (issue #53, 4; 0:
    /// its tenant's, else the server's).
    #[prost(uint64, tag = "31")]
    pub retention_secs: u64,
}

/// A tenant, as stored: its own catalog object (`ObjectRef::tenant`, format 10). Its
/// number is in the key; its name, which clients know it by, is here.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct TenantRecord {
    /// What clients call it (unique among live tenants; a SaaS uses its customer's id).
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint64, tag = "2")]
    pub created_ms: u64,
    #[prost(uint64, tag = "3")]
    pub updated_ms: u64,
    /// As people read it (the console, the portal).
    #[prost(string, tag = "4")]
    pub display_name: String,
    /// The SaaS's own labels (its plan, its region...).
    #[prost(btree_map = "string, string", tag = "5")]
    pub metadata: std::collections::BTreeMap<String, String>,
    /// When it was deleted (0: live). A deleted tenant's record stays, so its number is
    /// never given again.
    #[prost(uint64, tag = "6")]
    pub deleted_ms: u64,
    /// Its limits (none: no limit of its own). A new field, not a format change.
    #[prost(message, optional, tag = "7")]
    pub quota: Option<QuotaRecord>,
    /// The UTC day (days since the epoch) `events_today` counts, for the quota of events
    /// per day: written in the round that accepted the events, so a restart keeps the day's
    /// count.
    #[prost(uint64, tag = "8")]
    pub usage_day: u64,
    #[prost(uint64, tag = "9")]
    pub events_today: u64,
    /// Its share of delivery against other tenants' (issue #52; 0, as records written
    /// before it have: 1).
    #[prost(uint32, tag = "10")]
    pub weight: u32,
    /// How its portal looks and who may frame it (issue #52; none: hookd's look, framed
    /// only from `[portal] frame_ancestors`).
    #[prost(message, optional, tag = "11")]
    pub portal: Option<TenantPortalRecord>,
    /// How long its completed messages (summary and payload) are kept (issue #53, 4; 0:
    /// the server's), unless a destination sets its own.
    #[prost(uint64, tag = "12")]
    pub retention_secs: u64,
}

/// A tenant's portal settings, as stored (`Tenant.portal` on the wire).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct TenantPortalRecord {
    #[prost(string, repeated, tag = "1")]
    pub frame_ancestors: Vec<String>,
    #[prost(string, tag = "2")]
    pub title: String,
    #[prost(string, tag = "3")]
    pub logo_url: String,
    #[prost(string, tag = "4")]
    pub accent_color: String,
}

/// A portal signing key: a catalog object of kind `PortalKey` under tenant `default`,
/// named by its key id. The Ed25519 seed is sealed like an endpoint's secret when
/// `[secrets]` has keys.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct PortalKeyRecord {
    /// base64 of the 32-byte seed, or its sealed form.
    #[prost(string, tag = "1")]
    pub seed: String,
    #[prost(uint64, tag = "2")]
    pub created_ms: u64,
}

/// A refusal of portal links: a catalog object of kind `PortalRevocation` in the links'
/// tenant, named by the link's id, or `*` for every link made before `before_ms`.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct PortalRevocationRecord {
    /// When the revoked link expires (then the record can go); 0 for `*`.
    #[prost(uint64, tag = "1")]
    pub expires_ms: u64,
    /// `*`: links issued at or before this are refused.
    #[prost(uint64, tag = "2")]
    pub before_ms: u64,
}

/// A pull queue's own settings, as stored: a catalog object of kind `Queue` (issue #51).
/// A queue without one is made on first use, unordered.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct QueueRecord {
    #[prost(string, tag = "1")]
    pub name: String,
    /// FIFO lanes: 0 unordered, 1 `block`, 2 `park` (as `EndpointRecord.fifo`).
    #[prost(uint32, tag = "2")]
    pub fifo: u32,
    /// As people read it.
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(uint64, tag = "4")]
    pub created_ms: u64,
    #[prost(uint64, tag = "5")]
    pub updated_ms: u64,
    /// How long its completed messages are kept (issue #53, 4; 0: its tenant's, else the
    /// server's).
    #[prost(uint64, tag = "6")]
    pub retention_secs: u64,
}

/// A replay job, as stored: a catalog object of kind `ReplayJob` (issue #53). The server's
/// job registry serialises its changes; the engine writes each step's progress in the same
/// round as the step's replays, so a kill -9 can neither lose a step nor send it twice.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReplayJobRecord {
    /// Its name in the catalog (a UUIDv7's text: jobs list in creation order).
    #[prost(string, tag = "1")]
    pub id: String,
    /// A [`ReplayJobState`].
    #[prost(uint32, tag = "2")]
    pub state: u32,
    #[prost(uint64, tag = "3")]
    pub created_ms: u64,
    #[prost(uint64, tag = "4")]
    pub updated_ms: u64,
    /// When it ended (done or cancelled; 0: it has not).
    #[prost(uint64, tag = "5")]
    pub finished_ms: u64,
    /// Messages replayed per second at most.
    #[prost(double, tag = "6")]
    pub per_s: f64,
    /// Messages selected (the selection's ids, oldest first).
    #[prost(uint64, tag = "7")]
    pub total: u64,
    /// How many of the selection it has gone through.
    #[prost(uint64, tag = "8")]
    pub cursor: u64,
    /// Handed back to delivery: dead letters made ready, delivered messages sent again.
    #[prost(uint64, tag = "9")]
    pub replayed: u64,
    /// Still live when their turn came (pending, retrying or in flight): delivered anyway.
    #[prost(uint64, tag = "10")]
    pub skipped: u64,
    /// Could not be replayed (their payload is no longer kept, their endpoint is gone,
    /// or the tenant's quota refused the copy); the last reason is `last_failure`.
    #[prost(uint64, tag = "11")]
    pub failed: u64,
    /// What it selected, as the operator asked (for people).
    #[prost(string, tag = "12")]
    pub selection: String,
    /// The selection's payload bytes.
    #[prost(uint64, tag = "13")]
    pub bytes: u64,
    /// How many `ReplaySelection` objects hold its ids.
    #[prost(uint32, tag = "14")]
    pub chunks: u32,
    #[prost(string, tag = "15")]
    pub last_failure: String,
    /// The one destination (encoded) it is limited to, if any: what a token limited to
    /// destinations may see, and whose rate limit paces it.
    #[prost(string, tag = "16")]
    pub destination: String,
    /// Who made it (the token's or the link's name).
    #[prost(string, tag = "17")]
    pub created_by: String,
}

/// Where a replay job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ReplayJobState {
    Running = 1,
    Paused = 2,
    Cancelled = 3,
    Done = 4,
}

impl ReplayJobState {
    pub fn from_u32(v: u32) -> Option<Self> {
        [Self::Running, Self::Paused, Self::Cancelled, Self::Done]
            .into_iter()
            .find(|s| *s as u32 == v)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Cancelled => "cancelled",
            Self::Done => "done",
        }
    }

    /// Done or cancelled: nothing more happens to it.
    pub const fn ended(self) -> bool {
        matches!(self, Self::Cancelled | Self::Done)
    }
}

impl ReplayJobRecord {
    pub fn state(&self) -> Option<ReplayJobState> {
        ReplayJobState::from_u32(self.state)
    }

    /// What is left of its selection.
    pub fn remaining(&self) -> u64 {
        self.total.saturating_sub(self.cursor)
    }
}

/// A slice of a replay job's selection: a catalog object of kind `ReplaySelection`, named
/// `{job}/{n}`, written once with the job.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ReplaySelectionRecord {
    /// Message ids, 16 bytes each (big-endian), in the order the job replays them.
    #[prost(bytes = "vec", tag = "1")]
    pub ids: Vec<u8>,
}

impl ReplaySelectionRecord {
    /// The most ids one slice holds.
    pub const IDS: usize = 1_000;

    pub fn of(ids: &[hookd_core::ids::MessageId]) -> Self {
        Self {
            ids: ids.iter().flat_map(|id| id.0.to_be_bytes()).collect(),
        }
    }

    pub fn ids(&self) -> Vec<hookd_core::ids::MessageId> {
        self.ids
            .chunks_exact(16)
            .filter_map(|c| <[u8; 16]>::try_from(c).ok())
            .map(|b| hookd_core::ids::MessageId(u128::from_be_bytes(b)))
            .collect()
    }

    /// The name of slice `n` of job `job`.
    pub fn name(job: &str, n: u32) -> String {
        format!("{job}/{n:05}")
    }
}

/// A declared event type, as stored: a catalog object of kind `EventType` (issue #51). The
/// engine writes it; the API compiles its schema.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct EventTypeRecord {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    /// The JSON Schema its payloads must satisfy, as given; empty: none.
    #[prost(string, tag = "3")]
    pub json_schema: String,
    #[prost(uint64, tag = "4")]
    pub created_ms: u64,
    #[prost(uint64, tag = "5")]
    pub updated_ms: u64,
    /// JSON pointers whose values the search index keeps (issue #53).
    #[prost(string, repeated, tag = "6")]
    pub search_keys: Vec<String>,
}

/// A tenant's limits, as stored (`hookd_core::quota::Quota`); 0: none.
#[derive(Clone, Copy, PartialEq, Eq, prost::Message)]
pub struct QuotaRecord {
    #[prost(uint64, tag = "1")]
    pub max_live_messages: u64,
    #[prost(uint64, tag = "2")]
    pub max_live_bytes: u64,
    #[prost(uint64, tag = "3")]
    pub max_events_per_day: u64,
    #[prost(uint64, tag = "4")]
    pub max_events_per_second: u64,
    #[prost(uint64, tag = "5")]
    pub max_endpoints: u64,
    #[prost(uint64, tag = "6")]
    pub max_subscriptions: u64,
    #[prost(uint64, tag = "7")]
    pub max_sources: u64,
}

impl From<QuotaRecord> for hookd_core::quota::Quota {
    fn from(r: QuotaRecord) -> Self {
        Self {
            max_live_messages: r.max_live_messages,
            max_live_bytes: r.max_live_bytes,
            max_events_per_day: r.max_events_per_day,
            max_events_per_second: r.max_events_per_second,
            max_endpoints: r.max_endpoints,
            max_subscriptions: r.max_subscriptions,
            max_sources: r.max_sources,
        }
    }
}

impl From<hookd_core::quota::Quota> for QuotaRecord {
    fn from(q: hookd_core::quota::Quota) -> Self {
        Self {
            max_live_messages: q.max_live_messages,
            max_live_bytes: q.max_live_bytes,
            max_events_per_day: q.max_events_per_day,
            max_events_per_second: q.max_events_per_second,
            max_endpoints: q.max_endpoints,
            max_subscriptions: q.max_subscriptions,
            max_sources: q.max_sources,
        }
    }
}

/// A tenant's API token, as stored: never the token itself, only its SHA-256 (a catalog
/// object of kind `Token`, named by the token's name; format 10).
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct TokenRecord {
    /// SHA-256 of the token (32 bytes).
    #[prost(bytes = "vec", tag = "1")]
    pub hash: Vec<u8>,
    /// `enqueue`, `consume`, `read`, `admin`.
    #[prost(string, repeated, tag = "2")]
    pub scopes: Vec<String>,
    /// The destinations it may use (`endpoint:NAME`, `queue:NAME`); none: all of its
    /// tenant's.
    #[prost(string, repeated, tag = "3")]
    pub destinations: Vec<String>,
    #[prost(uint64, tag = "4")]
    pub created_ms: u64,
    /// Who made it (the caller's name).
    #[prost(string, tag = "5")]
    pub created_by: String,
}

/// An ed25519 public key an endpoint signs (or signed) with.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct SigningKeyRecord {
    /// 32 bytes.
    #[prost(bytes = "vec", tag = "1")]
    pub public_key: Vec<u8>,
    /// When the endpoint first had it.
    #[prost(uint64, tag = "2")]
    pub since_ms: u64,
    /// When a PutEndpoint took it off (0: in use).
    #[prost(uint64, tag = "3")]
    pub retired_ms: u64,
}

/// An endpoint's OAuth2 client credentials; the secret sealed like the signing secrets.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct OAuth2Record {
    #[prost(string, tag = "1")]
    pub token_url: String,
    #[prost(string, tag = "2")]
    pub client_id: String,
    #[prost(string, tag = "3")]
    pub client_secret: String,
    #[prost(string, repeated, tag = "4")]
    pub scopes: Vec<String>,
    #[prost(string, tag = "5")]
    pub audience: String,
}

/// The mutable state of a message: a row of the schedule table while it is live (what the
/// engine needs to rebuild its index at start), a row of the dead table once dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleEntry {
    /// Due time when pending or awaiting retry; lease deadline when leased; 0 when dead.
    pub due_ms: u64,
    pub state: State,
    /// Attempts used since enqueue or the last replay.
    pub attempts: u32,
    pub max_attempts: u32,
    /// When the current lease started, or when the message was dead-lettered.
    pub since_ms: u64,
    /// `Destination::encode()`.
    pub destination: String,
    /// Its place in a FIFO lane of an ordered destination (format 8); `None`: unordered.
    pub lane: Option<LaneSlot>,
    /// A dead letter made ready again in place (format 12): its deliveries carry
    /// `hookd-replay`.
    pub replayed: bool,
}

/// A delivery's place in a FIFO lane of its destination (format 8): the lane is the
/// event's ordering key, its number the next of that key's gap-free sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneSlot {
    /// The event's ordering key (empty: the destination's single lane).
    pub key: String,
    /// Its number in the lane, from 1 (`webhook-sequence`).
    pub seq: u64,
    /// Replayed from the dead letters after its lane moved on: delivered outside the lane,
    /// and marked out of order.
    pub detached: bool,
    /// A dead letter that holds its lane (the destination's policy is `block`) until it is
    /// replayed, purged or expires.
    pub blocks: bool,
}

/// The longest ordering key (bytes): it is stored in every schedule row of its deliveries.
pub const MAX_ORDERING_KEY: usize = 256;

/// Set in a schedule row's state byte when a [`LaneSlot`] follows the fixed part.
const LANE_FLAG: u8 = 0x80;
/// Set in a schedule row's state byte for a replayed dead letter (format 12).
const REPLAYED_FLAG: u8 = 0x40;
const DETACHED: u8 = 1;
const BLOCKS: u8 = 2;

impl ScheduleEntry {
    const FIXED: usize = 8 + 1 + 4 + 4 + 8;

    pub fn encode(&self) -> Vec<u8> {
        let lane_len = self.lane.as_ref().map_or(0, |l| 8 + 1 + 2 + l.key.len());
        let mut out = Vec::with_capacity(Self::FIXED + lane_len + self.destination.len());
        out.extend_from_slice(&self.due_ms.to_be_bytes());
        let flag = if self.lane.is_some() { LANE_FLAG } else { 0 }
            | if self.replayed { REPLAYED_FLAG } else { 0 };
        out.push(self.state as u8 | flag);
        out.extend_from_slice(&self.attempts.to_be_bytes());
        out.extend_from_slice(&self.max_attempts.to_be_bytes());
        out.extend_from_slice(&self.since_ms.to_be_bytes());
        if let Some(lane) = &self.lane {
            out.extend_from_slice(&lane.seq.to_be_bytes());
            out.push(
                if lane.detached { DETACHED } else { 0 } | if lane.blocks { BLOCKS } else { 0 },
            );
            // Bounded by MAX_ORDERING_KEY at the edge; a longer one is cut, never wrapped.
            let key = &lane.key.as_bytes()[..lane.key.len().min(u16::MAX as usize)];
            out.extend_from_slice(&(key.len() as u16).to_be_bytes());
            out.extend_from_slice(key);
        }
        out.extend_from_slice(self.destination.as_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Corrupt(format!("schedule entry of {} bytes", bytes.len()));
        if bytes.len() < Self::FIXED {
            return Err(corrupt());
        }
        let (due, rest) = bytes.split_at(8);
        let (state, rest) = rest.split_at(1);
        let (attempts, rest) = rest.split_at(4);
        let (max_attempts, rest) = rest.split_at(4);
        let (since, mut rest) = rest.split_at(8);
        let lane = if state[0] & LANE_FLAG != 0 {
            if rest.len() < 11 {
                return Err(corrupt());
            }
            let (seq, tail) = rest.split_at(8);
            let (flags, tail) = tail.split_at(1);
            let (len, tail) = tail.split_at(2);
            let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
            if tail.len() < len {
                return Err(corrupt());
            }
            let (key, tail) = tail.split_at(len);
            rest = tail;
            Some(LaneSlot {
                key: String::from_utf8(key.to_vec()).map_err(|_| corrupt())?,
                seq: u64::from_be_bytes(seq.try_into().map_err(|_| corrupt())?),
                detached: flags[0] & DETACHED != 0,
                blocks: flags[0] & BLOCKS != 0,
            })
        } else {
            None
        };
        Ok(Self {
            due_ms: u64::from_be_bytes(due.try_into().map_err(|_| corrupt())?),
            state: State::from_u8(state[0] & !(LANE_FLAG | REPLAYED_FLAG)).ok_or_else(corrupt)?,
            attempts: u32::from_be_bytes(attempts.try_into().map_err(|_| corrupt())?),
            max_attempts: u32::from_be_bytes(max_attempts.try_into().map_err(|_| corrupt())?),
            since_ms: u64::from_be_bytes(since.try_into().map_err(|_| corrupt())?),
            destination: String::from_utf8(rest.to_vec()).map_err(|_| corrupt())?,
            lane,
            replayed: state[0] & REPLAYED_FLAG != 0,
        })
    }
}

/// A FIFO lane's durable state (the `lanes` table, format 8): the last number handed out,
/// so the sequence stays gap-free across restarts and across quiet spells (when the lane
/// holds nothing and the engine has let it go), and (format 9) when a message last joined
/// it, so a lane idle past `fifo_lane_retention_secs` is forgotten (its next message is
/// number 1 again). Whether a lane is blocked is not here: the dead letter that blocks it
/// says so ([`LaneSlot::blocks`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaneRow {
    pub last_seq: u64,
    /// When a message last joined the lane (unix ms); `None` in a row format 8 wrote.
    pub used_ms: Option<u64>,
}

impl LaneRow {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        out.extend_from_slice(&self.last_seq.to_be_bytes());
        if let Some(used) = self.used_ms {
            out.extend_from_slice(&used.to_be_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, StoreError> {
        let corrupt = || StoreError::Corrupt(format!("lane row of {} bytes", bytes.len()));
        let word = |at: usize| -> Result<u64, StoreError> {
            let b: [u8; 8] = bytes
                .get(at..at + 8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(corrupt)?;
            Ok(u64::from_be_bytes(b))
        };
        match bytes.len() {
            8 => Ok(Self {
                last_seq: word(0)?,
                used_ms: None,
            }),
            16 => Ok(Self {
                last_seq: word(0)?,
                used_ms: Some(word(8)?),
            }),
            _ => Err(corrupt()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_entry_round_trips_and_rejects_garbage() {
        let e = ScheduleEntry {
            due_ms: 1_700_000_000_123,
            state: State::Leased,
            attempts: 3,
            max_attempts: 12,
            since_ms: 1_700_000_000_000,
            destination: "qjobs".into(),
            lane: None,
            replayed: false,
        };
        assert_eq!(ScheduleEntry::decode(&e.encode()).ok(), Some(e.clone()));
        let replayed = ScheduleEntry {
            replayed: true,
            ..e.clone()
        };
        assert_eq!(
            ScheduleEntry::decode(&replayed.encode()).ok(),
            Some(replayed.clone())
        );
        let ordered = ScheduleEntry {
            lane: Some(LaneSlot {
                key: "ticket-7".into(),
                seq: 42,
                detached: true,
                blocks: false,
            }),
            ..replayed
        };
        let bytes = ordered.encode();
        assert_eq!(ScheduleEntry::decode(&bytes).ok(), Some(ordered));
        // Cut inside the lane: refused, never read as a destination.
        assert!(ScheduleEntry::decode(&bytes[..ScheduleEntry::FIXED + 12]).is_err());
        let row = LaneRow {
            last_seq: 9,
            used_ms: Some(1_700_000_000_000),
        };
        assert_eq!(row.encode().len(), 16);
        assert_eq!(LaneRow::decode(&row.encode()).ok(), Some(row));
        // A row of format 8: the number alone.
        let old = LaneRow {
            last_seq: 9,
            used_ms: None,
        };
        assert_eq!(LaneRow::decode(&9u64.to_be_bytes()).ok(), Some(old));
        assert!(LaneRow::decode(&[0; 7]).is_err());
        assert!(LaneRow::decode(&[0; 12]).is_err());
        assert!(ScheduleEntry::decode(&[1, 2, 3]).is_err());
        let mut bad = vec![0u8; 25];
        bad[8] = 9;
        assert!(ScheduleEntry::decode(&bad).is_err());
    }
}
