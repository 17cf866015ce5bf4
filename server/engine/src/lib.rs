//! The engine: the single writer. One thread decides every change to hookd's state and
//! owns the in-memory index of live messages.
//!
//! Requests arrive as `Command`s on a channel. The thread takes every command waiting at
//! that moment (up to `max_commit_batch`), together with every timer that has come due,
//! and decides them as one round against a redb read snapshot plus the overlay of rows
//! logged but not yet applied (`hookd_storage::store::overlay`): no I/O and no B-tree work
//! on this thread. The round's row changes go as one record to the log writer
//! (`hookd_storage::pipeline::syncer`), which answers each caller only after the
//! fdatasync that holds the round (group commit: one sync for every round that arrived
//! during the previous one), while this thread goes on with the next round. The apply
//! stage (`hookd_storage::pipeline::applier`) then performs the record on redb and, every
//! so often (by time and by log size), checkpoints; the log before a checkpoint is deleted.
//!
//! Ground rules:
//! - No caller is answered success before the log sync holding its change has returned.
//! - A storage error is fatal for this process's writes: the engine answers UNAVAILABLE to
//!   every request from then on (redb itself refuses writes after a failed commit until the
//!   file is reopened) and reports unhealthy. hookd then reopens the store (or exits, by
//!   `storage.on_failure`) and recovers from the last checkpoint and the durable log.
//! - The engine reads the time only through its [`Clock`]: once per round, for every
//!   decision in it (and once before waiting, to know how long to wait).
//! - Why a std thread and not a tokio task: the thread blocks on its channel between
//!   rounds, and a round can take milliseconds of CPU (a batch of 1,000 events, a sweep);
//!   on a runtime worker either would stall unrelated requests.

#![forbid(unsafe_code)]

mod admin;
mod alerting;
mod answer;
mod apply;
mod endpoints;
mod enqueue;
mod event_types;
pub mod events;
mod fair;
#[cfg(test)]
mod fair_tests;
#[cfg(test)]
mod fanout_tests;
mod gate;
mod handle;
#[cfg(test)]
mod harness;
#[cfg(test)]
mod heap_tests;
mod index;
mod intake;
mod lanes;
#[cfg(test)]
mod lanes_tests;
mod lease;
#[cfg(test)]
mod lifecycle_tests;
mod objects;
#[cfg(test)]
mod power_loss_tests;
mod push;
mod queues;
mod quota;
#[cfg(test)]
mod quota_tests;
mod refusal;
mod replay_jobs;
mod retention;
#[cfg(test)]
mod retention_tests;
#[cfg(test)]
mod search_tests;
mod tenants;
#[cfg(test)]
mod tenants_tests;
pub mod wheel;

use hookd_storage::pipeline::{applier, syncer};

pub use endpoints::{EndpointDef, OAuth2Def};
pub use event_types::{EventTypeDef, MAX_EVENT_TYPES};
pub use handle::{EngineHandle, EngineThread, GAUGE_SLICE, STATS_SLICE};
pub use lanes::FifoPolicy;
pub use queues::QueueDef;
pub use refusal::Refusal;
pub use replay_jobs::ReplayStep;
pub use tenants::{
    Directory, Grant, MAX_TENANTS, MAX_TOKENS, MAX_WEIGHT, SharedDirectory, Tenant, TenantDef,
    TenantDeleted, TokenDef,
};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::{oneshot, watch};

use crate::wheel::Wheel;
use hookd_core::clock::Clock;
use hookd_core::destination::Destination;
use hookd_core::ids::{LeaseId, MessageId};
use hookd_core::push::Delivery;
use hookd_core::retry::RetryPolicy;
use hookd_core::scope::{ObjectRef, TenantId};
use hookd_storage::store::{
    EndpointRecord, Recovering, Replayed, State, Storage, Store, StoreError, TenantRecord,
};
use index::{Index, LiveState, Timer};

/// An event as a way in (Enqueue, EnqueueBatch, ingest) gives it, checked: what its
/// message holds. The ways in speak this; [`NewMessage::new`] makes the stored record (on
/// the caller's task, not the engine thread).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewEvent {
    pub event_type: String,
    pub idempotency_key: String,
    /// The headers delivered with it (and its ingest source's, trace context...).
    pub headers: std::collections::BTreeMap<String, String>,
    pub created_ms: u64,
    pub payload: Vec<u8>,
    /// The message's own backoff (0 = the destination's).
    pub retry_base_ms: u64,
    pub retry_cap_ms: u64,
    /// Its declared pointers' values, for the search index
    /// (`hookd_storage::store::search::declared_text` of each).
    pub indexed: Vec<String>,
}

/// An event that passed validation, prepared for the store. Everything that can be done off
/// the engine thread (id, destination key, record encoding) already is: the engine is the
/// one serial stage, so it only does the table inserts and the index.
#[derive(Debug, Clone)]
pub struct NewMessage {
    /// Used unless the idempotency key finds an earlier message.
    pub id: MessageId,
    pub destination: Destination,
    /// `destination.key()`: groups stats and dead letters (an ad-hoc URL by its origin).
    pub key: String,
    /// `destination.encode()`: the exact destination (an ad-hoc URL in full), which also
    /// scopes the idempotency key.
    pub encoded: String,
    /// The encoded `MessageRecord`, payload included.
    pub record: Vec<u8>,
    pub idempotency_key: String,
    pub delay_ms: u64,
    /// 0 = the destination's default.
    pub max_attempts: u32,
    /// A publish to a topic: the further subscribers, sharing the record. `None`: an
    /// Enqueue to one destination.
    pub fanout: Option<Box<Fanout>>,
    /// The event's ordering key: its FIFO lane at an ordered destination (empty: the
    /// destination's one lane); no effect at an unordered one.
    pub ordering_key: String,
}

/// What makes a [`NewMessage`] a publish: its event, and the subscribers after the first
/// (the message's own destination). All of them are stored in one round, or none.
#[derive(Debug, Clone)]
pub struct Fanout {
    /// The id the deliveries share (the record's `event_id`), what the producer is told.
    pub event_id: MessageId,
    /// What scopes the idempotency key: `t` and the topic (no destination's encoding
    /// starts with `t`), so a key dedups the whole fan-out.
    pub scope: String,
    pub also: Vec<Subscriber>,
}

/// One more delivery of a publish.
#[derive(Debug, Clone)]
pub struct Subscriber {
    pub id: MessageId,
    pub destination: Destination,
    /// `destination.key()` and `destination.encode()`, as in [`NewMessage`].
    pub key: String,
    pub encoded: String,
}

impl Subscriber {
    pub fn new(id: MessageId, destination: Destination) -> Self {
        Self {
            id,
            key: destination.key(),
            encoded: destination.encode(),
            destination,
        }
    }
}

/// What an erasure did (see [`Command::Erase`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Erased {
    /// Messages erased: dead letters and completed ones.
    pub erased: u32,
    /// Of those, dead letters.
    pub dead: u32,
    /// Skipped: still live (pending, retrying, in flight, leased).
    pub live: u32,
    /// Skipped: not found (never, no longer, or another tenant's).
    pub missing: u32,
}

/// The overwriting of purged records (see `hookd_storage::store::scrub`).
pub use hookd_storage::pipeline::applier::ScrubProgress;

/// What one more subscriber of a publish writes to the log, about: its copy of the record
/// and its schedule row, with their keys and destination (100 bytes measured, see
/// `docs/performance.md`).
const COPY_LOG_BYTES: u64 = 128;

impl NewMessage {
    /// About what storing it writes to the log: its record, and for a publish a copy and a
    /// schedule row per further subscriber (what the write queue's bound counts).
    pub fn log_bytes(&self) -> u64 {
        let copies = self.fanout.as_ref().map_or(0, |f| f.also.len() as u64);
        self.record.len() as u64 + copies * COPY_LOG_BYTES
    }

    /// Prepares `event` as message `id` for `destination`: its record is made and encoded
    /// here.
    pub fn new(
        id: MessageId,
        destination: Destination,
        event: NewEvent,
        delay_ms: u64,
        max_attempts: u32,
    ) -> Self {
        let NewEvent {
            event_type,
            idempotency_key,
            headers,
            created_ms,
            payload,
            retry_base_ms,
            retry_cap_ms,
            indexed,
        } = event;
        let record = hookd_storage::store::MessageRecord {
            destination: String::new(),
            event_type,
            idempotency_key,
            headers,
            created_ms,
            payload,
            retry_base_ms,
            retry_cap_ms,
            event_id: String::new(),
            indexed,
            replay_of: String::new(),
            replay_job: String::new(),
        };
        Self::from_record(id, destination, record, delay_ms, max_attempts)
    }

    /// Prepares `record` (its destination set here) as message `id` for `destination`.
    pub(crate) fn from_record(
        id: MessageId,
        destination: Destination,
        mut record: hookd_storage::store::MessageRecord,
        delay_ms: u64,
        max_attempts: u32,
    ) -> Self {
        use prost::Message;
        let encoded = destination.encode();
        record.destination.clone_from(&encoded);
        Self {
            id,
            key: destination.key(),
            encoded,
            idempotency_key: record.idempotency_key.clone(),
            record: record.encode_to_vec(),
            destination,
            delay_ms,
            max_attempts,
            fanout: None,
            ordering_key: String::new(),
        }
    }
}

/// The engine's answer to one enqueued event. The id is formatted by the caller: every
/// microsecond on the engine thread is serial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The message's id; a publish's event id.
    pub id: MessageId,
    /// The idempotency key was seen within the window; `id` is the original's.
    pub duplicate: bool,
    /// Above a soft watermark: the pause suggested before the producer's next send.
    pub throttle_ms: u64,
    /// A publish's deliveries, one per subscriber stored, in order: the first
    /// [`MAX_KEPT_DELIVERY_IDS`](hookd_storage::store::MAX_KEPT_DELIVERY_IDS) of them
    /// (empty for an Enqueue). A duplicate's are the original's, as its key's row kept them.
    pub deliveries: Vec<MessageId>,
    /// A publish: how many deliveries it stored (the original's, for a duplicate).
    pub subscribers: u32,
}

/// A message leased to a consumer by Receive.
#[derive(Debug, Clone, PartialEq)]
pub struct Leased {
    pub id: MessageId,
    /// `<id>.<attempt>`: what Ack and Nack name.
    pub lease: LeaseId,
    pub payload: Vec<u8>,
    pub event_type: String,
    pub headers: std::collections::BTreeMap<String, String>,
    pub idempotency_key: String,
    /// The publish's event id (empty: the message is its own event).
    pub event_id: String,
    /// Its FIFO lane at an ordered queue: the ordering key and its number there (0:
    /// unordered), and whether it is a dead letter replayed after its lane moved on.
    pub ordering_key: String,
    pub sequence: u64,
    pub out_of_order: bool,
    /// This lease's attempt, from 1.
    pub attempt: u32,
    pub max_attempts: u32,
    pub enqueued_ms: u64,
    pub lease_deadline_ms: u64,
}

/// The engine's answer to a Nack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NackOutcome {
    /// When the next attempt is due; `None`: that was the last attempt, and the message is
    /// now a dead letter.
    pub next_attempt_ms: Option<u64>,
}

/// The engine's answer to PutEndpoint: the endpoint as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct PutOutcome {
    pub endpoint: EndpointRecord,
    pub created: bool,
    /// The URL the endpoint had, when this put changed it and the endpoint signs (its
    /// receivers trust what it signs: worth a line in the log).
    pub replaced_signing_url: Option<String>,
}

/// Which dead letters to replay, and how fast.
#[derive(Debug, Clone, Default)]
pub struct ReplayRequest {
    /// The caller's tenant: an id of another tenant's message is one it does not hold.
    pub tenant: TenantId,
    pub ids: Vec<MessageId>,
    /// Every dead letter of this destination (up to `limit`), besides `ids`.
    pub destination: Option<Destination>,
    pub limit: usize,
    /// Each id must be a dead letter (all or nothing); otherwise ids no longer dead (replayed
    /// or purged meanwhile) are skipped.
    pub strict: bool,
    /// The replayed messages become due at most this many per second (0: all at once).
    pub per_s: f64,
}

/// What a replay did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReplayOutcome {
    pub replayed: u32,
    /// When the last one is due.
    pub last_due_ms: u64,
}

/// The push settings the engine applies to endpoints that set none of their own, and to
/// ad-hoc URLs (the `[delivery]` section of the configuration, `config::DeliveryConfig`,
/// hands them over).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PushDefaults {
    pub connect_timeout_ms: u64,
    /// The whole attempt, response body included.
    pub timeout_ms: u64,
    /// Attempts in flight at once per destination.
    pub max_in_flight: u32,
    /// Push attempts in flight over all destinations (B), shared between tenants by
    /// weight (`fair.rs`).
    pub max_attempts_in_flight: u64,
    /// A `Retry-After` pauses the endpoint at most this long.
    pub max_retry_after_secs: u64,
    /// p95 attempt latency (last hour) above which an endpoint is reported slow.
    pub slow_threshold_ms: u64,
    /// p95 attempt latency above which the breaker opens after
    /// `breaker.slow_failure_threshold` failures instead of `breaker.failure_threshold`.
    pub slow_breaker_threshold_ms: u64,
    pub breaker: hookd_core::breaker::BreakerConfig,
}

impl Default for PushDefaults {
    fn default() -> Self {
        Self {
            connect_timeout_ms: 5_000,
            timeout_ms: 15_000,
            max_in_flight: 64,
            max_attempts_in_flight: 4_096,
            max_retry_after_secs: 3_600,
            slow_threshold_ms: 2_000,
            slow_breaker_threshold_ms: 5_000,
            breaker: hookd_core::breaker::BreakerConfig::default(),
        }
    }
}

/// Settings the engine needs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub retry: RetryPolicy,
    /// What a push attempt gets when its endpoint sets nothing itself.
    pub push: PushDefaults,
    pub max_queued_write_bytes: u64,
    pub idempotency_retention_ms: u64,
    /// How long a completed message's attempts stay readable (0: not kept).
    pub completed_retention_ms: u64,
    /// How long a dead letter is kept (0: until replayed or purged).
    pub dead_letter_retention_ms: u64,
    /// How long a FIFO lane no message has joined keeps its number (its `lanes` row); its
    /// next message after that is number 1 again (0: kept for ever).
    pub fifo_lane_retention_ms: u64,
    /// Where `Watch` events are published.
    pub events: crate::events::Events,
    pub alerts: hookd_core::alerts::AlertConfig,
    pub max_commit_batch: usize,
    /// A checkpoint at least this often while the log grows...
    pub checkpoint_interval_ms: u64,
    /// ...and whenever the log has grown by this many bytes since the last one.
    pub checkpoint_log_bytes: u64,
    /// What the log (the message heap) keeps of completed messages' payloads.
    pub log_retention: hookd_storage::pipeline::Retention,
    /// A fixed seed for the retry jitter (tests); `None`: from the OS.
    pub rng_seed: Option<u64>,
    /// Counters and histograms the engine and its pipeline update (`/metrics`).
    pub metrics: Arc<hookd_metrics::Metrics>,
    /// Opens endpoint secrets sealed at rest (`[secrets] keys`), to sign deliveries.
    pub sealer: Option<Arc<hookd_core::secrets::Sealer>>,
    /// The watermarks new events are held to.
    pub backpressure: hookd_core::backpressure::BackpressureConfig,
    /// Pull queues with FIFO lanes (`[queues.NAME] fifo`), by name.
    pub fifo_queues: std::collections::HashMap<String, FifoPolicy>,
    /// Free space on the data directory's file system, against its reserve.
    pub headroom: Arc<hookd_storage::disk::Headroom>,
}

impl EngineConfig {
    /// How long the search index keeps a message's rows after its creation: past every
    /// retention a message can have been kept under, one after the other (live until it
    /// died, then a dead letter; or completed, then its payload in the log). A dead letter
    /// kept until replayed or purged keeps the index's rows too (`u64::MAX`).
    pub fn history_ms(&self) -> u64 {
        if self.dead_letter_retention_ms == 0 {
            return u64::MAX;
        }
        self.dead_letter_retention_ms
            .saturating_add(self.completed_retention_ms)
            .saturating_add(self.log_retention.ms)
            .saturating_add(self.idempotency_retention_ms)
    }
}

type Reply<T> = oneshot::Sender<Result<T, Refusal>>;

/// A request to the engine thread. Each carries the channel its answer goes back on.
#[derive(Debug)]
pub(crate) enum Command {
    Enqueue {
        messages: Vec<NewMessage>,
        /// Reserved in `EngineHandle::queued`; released when the engine takes the command.
        bytes: u64,
        reply: oneshot::Sender<Vec<Result<Enqueued, Refusal>>>,
    },
    Receive {
        queue: Destination,
        max: usize,
        visibility_ms: u64,
        wait_ms: u64,
        reply: index::ReceiveReply,
    },
    /// Acknowledges leases of the caller's tenant's messages (another tenant's lease is
    /// one not in flight).
    Ack {
        tenant: TenantId,
        leases: Vec<LeaseId>,
        reply: Reply<u32>,
    },
    Nack {
        tenant: TenantId,
        lease: LeaseId,
        delay_ms: u64,
        reason: String,
        reply: Reply<NackOutcome>,
    },
    Replay {
        request: ReplayRequest,
        reply: Reply<ReplayOutcome>,
    },
    /// One step of a replay job: its items replayed and its progress stored, in one round.
    ReplayStep {
        step: Box<ReplayStep>,
        reply: Reply<hookd_storage::store::ReplayJobRecord>,
    },
    /// Stores a replay job's record, with the slices of its selection when it is made
    /// (`selection`), or without them once it has ended.
    PutReplayJob {
        object: ObjectRef,
        job: Box<hookd_storage::store::ReplayJobRecord>,
        selection: Vec<(ObjectRef, Vec<u8>)>,
        reply: Reply<()>,
    },
    /// Deletes these dead letters of `tenant`'s (ids no longer dead, or not its own, are
    /// skipped); how many.
    Purge {
        tenant: TenantId,
        ids: Vec<MessageId>,
        reply: Reply<u32>,
    },
    /// Erases these messages of `tenant`'s that are no longer live (a purge, issue #53 4):
    /// dead letters and completed messages lose every row and their records' bytes are
    /// overwritten in the log once checkpointed (`hookd_storage::store::scrub`). Live
    /// ones (on their way) and ones not found are counted, not touched.
    Erase {
        tenant: TenantId,
        ids: Vec<MessageId>,
        reply: Reply<Erased>,
    },
    /// How far the overwriting of purged records is: see [`ScrubProgress`].
    ScrubProgress { reply: Reply<ScrubProgress> },
    /// Pauses (`Some(reason)`) or resumes (`None`) an endpoint.
    Pause {
        tenant: TenantId,
        name: String,
        pause: Option<String>,
        reply: Reply<EndpointRecord>,
    },
    PutEndpoint {
        tenant: TenantId,
        endpoint: Box<EndpointRecord>,
        reply: Reply<PutOutcome>,
    },
    DeleteEndpoint {
        tenant: TenantId,
        name: String,
        reply: Reply<()>,
    },
    /// CreateTenant (`create`) or UpdateTenant: the record's name says which tenant.
    PutTenant {
        record: Box<TenantRecord>,
        create: bool,
        reply: Reply<Tenant>,
    },
    /// CreateToken: a tenant's token, by name (refused if the name is taken).
    PutToken {
        tenant: TenantId,
        def: Box<tenants::TokenDef>,
        /// The record as stored.
        reply: Reply<hookd_storage::store::TokenRecord>,
    },
    /// RevokeToken: effective for the next call once answered.
    RevokeToken {
        tenant: TenantId,
        name: String,
        reply: Reply<()>,
    },
    /// DeleteTenant: see `Engine::delete_tenant`.
    DeleteTenant {
        name: String,
        force: bool,
        reply: Reply<TenantDeleted>,
    },
    /// Stores (`Some`) or removes (`None`) an object's record in the catalog (an ingest
    /// source's definition, a subscription's). Whoever holds the objects decides and
    /// serialises these; the engine only makes them durable.
    /// PutQueue: a queue's settings (issue #51); the record as stored.
    PutQueue {
        tenant: TenantId,
        def: Box<queues::QueueDef>,
        /// The record as stored, and whether it was made (not replaced).
        reply: Reply<(hookd_storage::store::QueueRecord, bool)>,
    },
    DeleteQueue {
        tenant: TenantId,
        name: String,
        reply: Reply<()>,
    },
    /// PutEventType: a tenant's event type (issue #51).
    PutEventType {
        tenant: TenantId,
        def: Box<event_types::EventTypeDef>,
        /// The record as stored, and whether it was made (not replaced).
        reply: Reply<(hookd_storage::store::EventTypeRecord, bool)>,
    },
    DeleteEventType {
        tenant: TenantId,
        name: String,
        reply: Reply<()>,
    },
    PutObject {
        object: ObjectRef,
        record: Option<Vec<u8>>,
        reply: Reply<()>,
    },
    /// Rewrites endpoints' stored secrets: `reseal` gets an endpoint's name and secrets and
    /// returns the new ones (`None`: unchanged) or why it cannot. How many were rewritten.
    Reseal {
        reseal: Resealer,
        reply: Reply<Result<u32, String>>,
    },
    Stats {
        /// One tenant's figures only (`None`: the whole hookd's).
        tenant: Option<TenantId>,
        /// The page of destinations: those after this key, at most `limit`.
        after: Option<String>,
        limit: usize,
        /// With the totals, storage figures and alerts; else the page of destinations only.
        whole: bool,
        reply: Reply<hookd_core::stats::StatsSnapshot>,
    },
    /// The figures of the destinations with these keys (`None` for one hookd does not
    /// hold), with their attempt latency by sub-window if `series` (the console).
    Detail {
        keys: Vec<String>,
        series: bool,
        reply: Reply<Vec<Option<hookd_core::stats::DestinationDetail>>>,
    },
    /// The gauges of a metrics scrape: at most `max` destinations, the rest summed.
    Gauges {
        /// The slice: the destinations after this key, at most `chunk`.
        after: Option<String>,
        max: usize,
        chunk: usize,
        reply: Reply<hookd_metrics::GaugePart>,
    },
    /// Answered once the round it arrives in is done, its log sync included: proof for the
    /// service manager's watchdog that the engine thread still completes rounds.
    Ping { reply: Reply<()> },
    /// A push attempt ended (from the dispatcher).
    Attempted(hookd_core::push::AttemptReport),
    /// Wake up and look at the clock (an injected clock moved).
    Tick,
    /// Answer waiting long polls now and stop waiting in new ones.
    Drain,
    /// Finish this round and stop.
    Shutdown,
}

/// See [`Command::Reseal`].
pub struct Resealer(pub Box<ResealFn>);

/// An endpoint's name and stored secrets -> the secrets to store instead (`None`: keep).
pub(crate) type ResealFn = dyn Fn(&str, &[String]) -> Result<Option<Vec<String>>, String> + Send;

impl std::fmt::Debug for Resealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resealer")
    }
}

/// The round's open tables, as every operation takes them.
type Tx<'a, 'txn> = &'a mut hookd_storage::store::Tables<'txn>;

/// Called after the round's commit: `None` if it succeeded, else the error to answer.
type Completion = Box<dyn FnOnce(Option<Refusal>) + Send>;

pub(crate) struct Engine {
    store: Store,
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    /// Unix ms of wheel tick 0.
    origin_ms: u64,
    started_ms: u64,
    wheel: Wheel<Timer>,
    index: Index,
    endpoints: endpoints::Endpoints,
    tenants: tenants::Tenants,
    quotas: quota::Quotas,
    /// Push destinations with attempts to go, by tenant (`fair.rs`).
    fair: fair::FairQueue,
    queues: queues::Queues,
    event_types: event_types::EventTypes,
    total: hookd_core::stats::Activity,
    rng: StdRng,
    next_waiter: u64,
    draining: bool,
    /// Whether writes still succeed, and why not once they have stopped.
    health: Health,
    /// Where the sweeps and the alert evaluation stand.
    housekeeping: Housekeeping,
    /// The log stage behind the engine, and the rows it has not applied yet.
    pipeline: Pipeline,
    /// Where push attempts go once their round has committed (`None`: push is off).
    deliveries: Option<DeliverySender>,
    /// What completing each push attempt in flight will keep of its message (read from
    /// the record at dispatch, so a success need not read it again).
    flight: rustc_hash::FxHashMap<MessageId, lease::Meta>,
    /// What the round in progress produces besides its log record.
    out: RoundOut,
}

/// Whether the engine can still write. False for good after a storage failure: a
/// recovery reopens the store with a new engine.
struct Health {
    /// Why writes stopped, once they have.
    failed: Option<String>,
    /// True while writes succeed. Pushed to whoever watches (gRPC health, `/healthz`) the
    /// moment it changes.
    serving: Arc<watch::Sender<bool>>,
    /// Why the engine stopped writing (a storage error, a panic), for whoever restarts it.
    failure: Failure,
}

/// The log stage as the engine sees it: the log writer with the apply stage behind it,
/// the rows of rounds that redb does not hold yet, and what the handles have sent.
struct Pipeline {
    /// The write-ahead log's writer and the apply stage behind it.
    syncer: syncer::Syncer,
    /// The rows written by rounds redb does not hold yet.
    overlay: hookd_storage::store::Overlay,
    /// Rounds so far (the overlay's round numbers).
    rounds: u64,
    /// Shared with the handles: bytes of enqueues sent and not yet applied.
    queued: Arc<AtomicU64>,
    /// What the log replay at open found (for Stats).
    replayed: Replayed,
}

/// An incremental sweep of a table with no index by time (idempotency keys, dead
/// letters): a pass reads it all, in steps, and removes the rows past their retention. A
/// pass runs only when a row can have expired: it ends knowing the oldest row it kept, and
/// every row written since it started is newer than its start, so none expires before the
/// older of the two plus the retention; the next pass starts then, and at least a gap
/// after this one ended (a steady stream of rows would otherwise start one as each ends):
/// a row may outlive its retention by that gap.
#[derive(Debug)]
struct SweepPass {
    /// Where the pass in progress continues (`None`: none in progress).
    cursor: Option<Vec<u8>>,
    /// When the next pass may start.
    next_ms: u64,
    /// The pass in progress: the older of its start and the oldest row it kept so far.
    oldest_kept_ms: u64,
    /// Rows read since start.
    #[cfg_attr(not(test), allow(dead_code))]
    read: u64,
}

impl SweepPass {
    fn new(now: u64) -> Self {
        Self {
            cursor: None,
            next_ms: now,
            oldest_kept_ms: now,
            read: 0,
        }
    }

    /// Runs steps of the pass, each `step(cursor, before_ms)` reading from `cursor` and
    /// removing the rows older than `before_ms` (what it read, the oldest it kept, where
    /// the next continues), until the pass completes or `spent` says the budget is; true
    /// if it stopped with the pass unfinished. Nothing runs before the next pass may
    /// start. A completed pass sets the next for when the oldest row kept can expire (a
    /// row goes once `now - retention` passes its time), and at least `gap` after `now`.
    fn run(
        &mut self,
        now: u64,
        retention: u64,
        gap: u64,
        spent: &impl Fn() -> bool,
        mut step: impl FnMut(Option<&[u8]>, u64) -> Result<Stepped, StoreError>,
    ) -> Result<bool, StoreError> {
        if self.cursor.is_none() {
            if now < self.next_ms {
                return Ok(false);
            }
            // Rows written during the pass are newer than its start.
            self.oldest_kept_ms = now;
        }
        let before = now.saturating_sub(retention);
        loop {
            let (read, oldest_kept, cursor) = step(self.cursor.as_deref(), before)?;
            self.read += read as u64;
            if let Some(kept) = oldest_kept {
                self.oldest_kept_ms = self.oldest_kept_ms.min(kept);
            }
            self.cursor = cursor;
            if self.cursor.is_none() {
                self.next_ms = self
                    .oldest_kept_ms
                    .saturating_add(retention)
                    .saturating_add(1)
                    .max(now.saturating_add(gap));
                return Ok(false);
            }
            if spent() {
                return Ok(true);
            }
        }
    }
}

/// What one step of a [`SweepPass`] did: rows read, the oldest kept, where it continues.
type Stepped = (usize, Option<u64>, Option<Vec<u8>>);

/// The engine's housekeeping: the bounded sweeps (idempotency keys, dead letters past their
/// retention) and the alert evaluation, each done a step at a time between rounds' work,
/// and where each stands.
#[derive(Debug)]
struct Housekeeping {
    /// When the next sweep step runs.
    next_sweep_ms: u64,
    /// The idempotency sweep's pass (see [`Engine::sweep_idempotency`]).
    idempotency: SweepPass,
    /// The lanes sweep's pass (see [`Engine::sweep_lanes`]).
    lanes: SweepPass,
    /// The dead-letter retention sweep's pass (see [`Engine::sweep_dead`]).
    dead: SweepPass,
    /// The alert states of the totals and of every destination that is not ok.
    alerts: hookd_core::alerts::Alerts,
    /// When the next alert evaluation starts.
    next_alert_ms: u64,
    /// Where the alert evaluation in progress continues (destinations go in steps).
    alert_cursor: Option<String>,
    /// The compaction pass in progress: the segments it empties, and where it continues.
    compacting: Vec<u64>,
    compact_cursor: Option<MessageId>,
    /// Records copied forward by compaction since start.
    compacted: u64,
    /// Retention per tenant and destination (see `retention`).
    retention: retention::RetentionPass,
}

/// What a round produces besides its log record: push attempts and events, some sent as
/// soon as the round is decided and the rest once the log's sync holds it.
#[derive(Debug, Default)]
struct RoundOut {
    /// Messages enqueued or replayed in this round (not durable as such yet).
    fresh: rustc_hash::FxHashSet<MessageId>,
    /// Push attempts of messages stored by this very round: sent only after its sync, so
    /// that hookd never delivers an event it could still lose.
    after_sync: Vec<Delivery>,
    /// Push attempts of messages stored by earlier rounds: sent as soon as the round is
    /// decided, without waiting for its fsync (the outcome of an earlier attempt that
    /// freed the slot being unsynced changes nothing about this message).
    now: Vec<Delivery>,
    /// Events for watchers, published once the round is durable.
    watched: Vec<crate::events::Event>,
    /// FIFO lane heads made by a lane's advance (the one before completed, died or was
    /// purged), with the round that advanced it. Until that round is durable the head's
    /// first attempt waits for a sync: a lane never hands out n+1 before n's end is on
    /// disk, so a failed fsync or a power cut cannot make n go out again after n+1.
    lane_heads: rustc_hash::FxHashMap<MessageId, u64>,
}

impl RoundOut {
    /// Queues a push attempt of `id`: at once if its message was durable before this
    /// round and, if it heads a FIFO lane, the lane's advance is durable (`synced_round`:
    /// every round up to it is); else after this round's sync (which follows every earlier
    /// round's).
    fn deliver(&mut self, id: MessageId, delivery: Delivery, synced_round: u64) {
        let advanced = self
            .lane_heads
            .remove(&id)
            .is_some_and(|r| r > synced_round);
        if advanced || self.fresh.contains(&id) {
            self.after_sync.push(delivery);
        } else {
            self.now.push(delivery);
        }
    }

    /// `id` became a lane's head in `round`.
    fn lane_advanced(&mut self, id: MessageId, round: u64) {
        self.lane_heads.insert(id, round);
    }

    /// Forgets advances already durable (heads not attempted yet: paused, scheduled).
    fn forget_synced(&mut self, synced_round: u64) {
        if !self.lane_heads.is_empty() {
            self.lane_heads.retain(|_, round| *round > synced_round);
        }
    }

    /// What waits for the round's sync: its own messages' attempts and its events.
    fn take_after_sync(&mut self) -> (Vec<Delivery>, Vec<crate::events::Event>) {
        (
            std::mem::take(&mut self.after_sync),
            std::mem::take(&mut self.watched),
        )
    }
}

/// The engine's end of the channel to the dispatcher.
pub(crate) type DeliverySender = tokio::sync::mpsc::UnboundedSender<Vec<Delivery>>;

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("live", &self.index.len())
            .finish()
    }
}

/// Passes of the dead-letter retention sweep are at least this far apart (a tenth of the
/// retention if that is less): the most a dead letter outlives its retention.
const DEAD_PASS_GAP_MS: u64 = 3_600_000;

/// How often a step of the sweeps (idempotency keys, dead letters and completed messages
/// past their retention; alerts) runs when the last step finished its work.
const SWEEP_EVERY_MS: u64 = 250;
/// How soon the next step runs when the last one stopped at its budget: every 25 ms,
/// 1.5 ms each, at most 6 % of the engine thread.
const SWEEP_BEHIND_MS: u64 = 25;
/// The time a sweep step may take, writes waiting behind it: its tables are read in
/// slices of [`SWEEP_CHUNK`] rows until this much has passed (each table gets at least one
/// slice). At about 2 us a row, 20,000 to 30,000 rows a second while behind; a scan of
/// 5,000 idempotency rows in one step held the engine 7 to 30 ms at 100,000 keys.
const SWEEP_BUDGET: Duration = Duration::from_micros(1_500);
const SWEEP_CHUNK: usize = 256;
/// The longest the engine sleeps without looking at the clock.
const MAX_IDLE: Duration = Duration::from_millis(500);
/// The overlay's bytes beyond which the engine waits for the apply stage.
const MAX_OVERLAY_BYTES: usize = 16 << 20;

/// Recovers the index from the store and starts the engine thread.
/// Push attempts go to `deliveries` (none: messages for endpoints and URLs wait).
pub fn start(
    storage: Storage,
    config: EngineConfig,
    clock: Arc<dyn Clock>,
    deliveries: Option<DeliverySender>,
) -> Result<(EngineHandle, EngineThread), StoreError> {
    let Storage {
        store,
        log,
        replayed,
    } = storage;
    let syncer = syncer::Syncer::spawn(
        log,
        store.clone(),
        clock.clone(),
        applier::StageConfig {
            interval_ms: config.checkpoint_interval_ms,
            log_bytes: config.checkpoint_log_bytes,
            retention: config.log_retention,
            history_ms: config.history_ms(),
            metrics: config.metrics.clone(),
        },
    )?;
    let engine = Engine::recover(store, syncer, replayed, config, clock, deliveries)?;
    let (tx, rx) = mpsc::channel();
    let handle = EngineHandle {
        directory: engine.tenants.shared(),
        tx,
        health: engine.health.serving.subscribe(),
        failure: engine.health.failure.clone(),
        queued: engine.pipeline.queued.clone(),
        max_queued: engine.config.max_queued_write_bytes,
        metrics: engine.config.metrics.clone(),
    };
    record_panics();
    let thread = std::thread::Builder::new()
        .name("hookd-engine".into())
        .spawn(move || engine.run(rx))?;
    Ok((
        handle.clone(),
        EngineThread {
            handle,
            thread: Some(thread),
        },
    ))
}

impl Engine {
    /// An engine holding what the store holds: endpoints, the schedule of every live
    /// message (not the payloads) and dead-letter counts. It runs nothing by itself:
    /// [`start`] gives it a thread; tests drive its rounds directly.
    fn recover(
        store: Store,
        syncer: syncer::Syncer,
        replayed: Replayed,
        config: EngineConfig,
        clock: Arc<dyn Clock>,
        deliveries: Option<DeliverySender>,
    ) -> Result<Self, StoreError> {
        let now = clock.now_ms();
        let rng = match config.rng_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_rng(&mut rand::rng()),
        };
        let mut engine = Engine {
            store,
            clock,
            config,
            origin_ms: now,
            started_ms: now,
            wheel: Wheel::new(),
            index: Index::default(),
            endpoints: Default::default(),
            tenants: Default::default(),
            quotas: Default::default(),
            fair: Default::default(),
            queues: Default::default(),
            event_types: Default::default(),
            total: Default::default(),
            rng,
            next_waiter: 0,
            draining: false,
            health: Health {
                failed: None,
                serving: Arc::new(watch::channel(true).0),
                failure: Failure::default(),
            },
            housekeeping: Housekeeping {
                next_sweep_ms: now,
                idempotency: SweepPass::new(now),
                lanes: SweepPass::new(now),
                dead: SweepPass::new(now),
                alerts: Default::default(),
                next_alert_ms: now,
                alert_cursor: None,
                compacting: Vec::new(),
                compact_cursor: None,
                compacted: 0,
                retention: Default::default(),
            },
            pipeline: Pipeline {
                syncer,
                overlay: Default::default(),
                rounds: 0,
                queued: Arc::new(AtomicU64::new(0)),
                replayed,
            },
            deliveries,
            out: RoundOut::default(),
            flight: Default::default(),
        };
        // Everything as it is read (never collected: see `Store::recover`). Rows of one
        // destination mostly follow each other: its index is looked up once per run.
        let (mut live, mut last) = (0u64, None::<(String, index::DestId)>);
        // FIFO lanes are rebuilt once everything is read: their messages in their numbers'
        // order (ids are not), and the dead letters that block them.
        let mut in_lanes: std::collections::BTreeMap<
            (index::DestId, String),
            Vec<lanes::RecoveredInLane>,
        > = Default::default();
        let mut blocking = Vec::new();
        let store = engine.store.clone();
        let started = std::time::Instant::now();
        store.recover(|item| {
            match item {
                Recovering::Tenant(id, record) => {
                    engine.quotas.set(id, &record, now);
                    engine.tenants.recovered(id, *record);
                }
                Recovering::Token(tenant, name, record) => {
                    engine.tenants.token_recovered(tenant, name, *record);
                }
                Recovering::Queue(tenant, queue) => {
                    engine.queues.insert(tenant, queue.name.clone(), *queue);
                }
                Recovering::EventType(tenant, declared) => {
                    engine
                        .event_types
                        .insert(tenant, declared.name, declared.created_ms);
                }
                Recovering::Endpoint(tenant, endpoint) => {
                    engine.endpoints.insert(tenant, *endpoint);
                }
                Recovering::Message { id, entry, bytes } => {
                    let state = match entry.state {
                        // A lease outlives a restart: the consumer may still ack it before
                        // its deadline; after that it expires and is retried like any other.
                        State::Leased => LiveState::Leased,
                        State::Pending | State::Retry => enqueue::waiting(entry.due_ms, now),
                        State::Dead => return Ok(()),
                    };
                    let d = match &last {
                        Some((encoded, d)) if *encoded == entry.destination => *d,
                        _ => {
                            let Some(destination) = Destination::decode(&entry.destination) else {
                                return Err(StoreError::Corrupt(format!("destination of {id}")));
                            };
                            let d = engine.dest(&destination.key(), now);
                            last = Some((entry.destination, d));
                            d
                        }
                    };
                    let max = entry.max_attempts;
                    live += 1;
                    let tag = match entry.lane {
                        Some(lane) if !lane.detached => {
                            in_lanes.entry((d, lane.key)).or_default().push(
                                lanes::RecoveredInLane {
                                    id,
                                    seq: lane.seq,
                                    state,
                                    attempts: entry.attempts,
                                    max_attempts: max,
                                    bytes,
                                    due_ms: entry.due_ms,
                                    replayed: entry.replayed,
                                },
                            );
                            return Ok(());
                        }
                        Some(_) => index::LaneTag::Detached,
                        None => index::LaneTag::None,
                    };
                    engine.track(
                        id,
                        index::Live::new(d, state, entry.attempts, max, bytes)
                            .in_lane(tag)
                            .replayed(entry.replayed),
                        entry.due_ms,
                    );
                }
                Recovering::Blocking {
                    id,
                    destination,
                    lane,
                } => {
                    let Some(destination) = Destination::decode(&destination) else {
                        return Err(StoreError::Corrupt(format!("destination of {id}")));
                    };
                    blocking.push((destination.key(), lane, id));
                }
                Recovering::Dead { destination, count } => {
                    let d = engine.dest(&destination, now);
                    engine.index.set_dead(d, count);
                }
            }
            Ok(())
        })?;
        for (key, lane, id) in blocking {
            let d = engine.dest(&key, now);
            engine.recover_blocked(d, &lane, id);
        }
        for ((d, lane), mut messages) in in_lanes {
            messages.sort_unstable_by_key(|m| m.seq);
            engine.recover_lane(d, &lane, messages);
        }
        engine.review_destinations();
        engine.tenants.publish();
        // Before the apply stage's first reclaim: segments a tenant's or destination's
        // longer retention needs are held from the start.
        engine.refresh_retention(now);
        tracing::info!(
            live,
            endpoints = engine.endpoints.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "recovered state from the store"
        );
        Ok(engine)
    }

    /// Wheel tick of a Unix-ms time (times before start are due at once).
    fn tick(&self, unix_ms: u64) -> u64 {
        unix_ms.saturating_sub(self.origin_ms)
    }

    fn run(mut self, rx: mpsc::Receiver<Command>) {
        // A bug that panics this thread must not leave health saying SERVING.
        let _health = PanicGuard(self.health.serving.clone(), self.health.failure.clone());
        // Commands waiting for a round, shared between tenants (`intake.rs`).
        let mut intake = intake::Intake::default();
        loop {
            let now = self.clock.now_ms();
            let mut wake_at = self.housekeeping.next_sweep_ms;
            if let Some(tick) = self.wheel.next_expiration() {
                wake_at = wake_at.min(self.origin_ms + tick);
            }
            let idle = Duration::from_millis(wake_at.saturating_sub(now)).min(MAX_IDLE);
            if intake.is_empty() {
                match rx.recv_timeout(idle) {
                    Ok(c) => intake.push(c),
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            // What the channel holds joins the intake (it is in memory already), up to a
            // few rounds' worth at a time.
            for _ in 0..self.config.max_commit_batch.saturating_mul(4) {
                match rx.try_recv() {
                    Ok(c) => intake.push(c),
                    Err(_) => break,
                }
            }
            let tenants = &self.tenants;
            let mut commands = intake.round(self.config.max_commit_batch, |t| tenants.weight_of(t));
            let stop = commands.iter().any(|c| matches!(c, Command::Shutdown));
            if stop {
                // Every call still waiting is answered in this last round.
                commands.extend(intake.drain());
            }
            self.round(commands);
            if stop {
                // The pipeline drains; a last checkpoint leaves nothing to replay.
                self.pipeline.syncer.stop();
                tracing::info!("engine stopped after its last commit");
                return;
            }
        }
    }

    /// One group commit: due timers and every command taken, in one transaction.
    fn round(&mut self, commands: Vec<Command>) {
        // Bytes leave the write queue when the engine takes them.
        let taken_bytes: u64 = commands
            .iter()
            .map(|c| match c {
                Command::Enqueue { bytes, .. } => *bytes,
                _ => 0,
            })
            .sum();
        // The bytes count as waiting for the disk until the round's sync has answered them
        // (so a slow disk fills `max_queued_write_bytes` and Enqueue is refused, rather than
        // the log writer's queue growing); released at once on every other path.
        let release = Release(self.pipeline.queued.clone(), taken_bytes);
        if self.health.failed.is_none()
            && let Some(e) = self.pipeline.syncer.failed()
        {
            self.fail(
                StoreError::Io(std::io::Error::other(e.to_string())),
                Vec::new(),
                Vec::new(),
            );
        }
        if let Some(reason) = &self.health.failed {
            let err = Refusal::Unavailable(format!("storage failed earlier: {reason}"));
            for c in commands {
                answer_failed(c, err.clone());
            }
            return;
        }
        // Backpressure: the overlay holds every row redb does not have yet; when the apply
        // stage falls that far behind (a long checkpoint), wait for it.
        if self.pipeline.overlay.bytes() > MAX_OVERLAY_BYTES
            && let Err(e) = self.pipeline.syncer.wait_applied()
        {
            let e = StoreError::Io(std::io::Error::other(e.to_string()));
            return self.fail(e, commands, Vec::new());
        }
        // Rounds redb holds now leave the overlay; the snapshot is taken after, so it
        // holds them.
        self.pipeline
            .overlay
            .applied(self.pipeline.syncer.applied_round());
        let now = self.clock.now_ms();
        let started = std::time::Instant::now();
        let started_cpu = thread_cpu();
        let taken = commands.len();
        let txn = match self.store.snapshot() {
            Ok(t) => t,
            Err(e) => return self.fail(e, commands, Vec::new()),
        };
        self.pipeline.rounds += 1;
        self.pipeline.overlay.begin(self.pipeline.rounds);
        let mut done: Vec<Completion> = Vec::new();
        self.out.fresh.clear();
        self.out.forget_synced(self.pipeline.syncer.synced_round());
        let record = match self.apply_round(&txn, now, commands, &mut done) {
            Ok(record) => record,
            Err((e, rest)) => {
                drop(txn);
                return self.fail(e, rest, done);
            }
        };
        drop(txn);
        self.send_now();
        let metrics = &self.config.metrics;
        metrics
            .engine_round_seconds
            .observe(started.elapsed().as_secs_f64());
        metrics
            .engine_round_cpu_seconds
            .observe(thread_cpu().saturating_sub(started_cpu).as_secs_f64());
        tracing::trace!(
            commands = taken,
            record_bytes = record.len(),
            apply_us = started.elapsed().as_micros() as u64,
            "round decided"
        );
        // Answers and the attempts of messages this round stored wait for the log sync.
        let (outbox, watched) = self.out.take_after_sync();
        if !record.is_empty() || !done.is_empty() || !outbox.is_empty() {
            let (deliveries, health) = (self.deliveries.clone(), self.health.serving.clone());
            let events = self.config.events.clone();
            self.pipeline.syncer.submit(
                self.pipeline.rounds,
                record,
                taken as u64,
                Box::new(move |synced| {
                    drop(release);
                    let refusal = synced
                        .err()
                        .map(|e| Refusal::Unavailable(format!("the write-ahead log failed: {e}")));
                    let ok = refusal.is_none();
                    if !ok {
                        // Unhealthy at once, before anyone hears of the failure.
                        health.send_replace(false);
                    }
                    for d in done {
                        d(refusal.clone());
                    }
                    if ok && !watched.is_empty() {
                        events.publish(watched);
                    }
                    if ok
                        && !outbox.is_empty()
                        && let Some(tx) = &deliveries
                        && tx.send(outbox).is_err()
                    {
                        tracing::error!(
                            "the dispatcher has stopped; push attempts will be retried"
                        );
                    }
                }),
            );
        } else if !watched.is_empty() {
            // Nothing to make durable (a breaker's cooldown ended): out at once.
            self.config.events.publish(watched);
        }
    }

    /// Records an event for watchers (only while someone watches).
    pub(crate) fn watch(&mut self, make: impl FnOnce() -> crate::events::Event) {
        if self.config.events.wanted() {
            self.out.watched.push(make());
        }
    }

    /// Hands the round's attempts that need not wait for its sync to the dispatcher.
    fn send_now(&mut self) {
        if self.out.now.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.out.now);
        if let Some(tx) = &self.deliveries
            && tx.send(batch).is_err()
        {
            tracing::error!("the dispatcher has stopped; push attempts will be retried");
        }
    }

    /// Applies due timers, the commands, waiting long polls and a sweep step to the round's
    /// transaction; the round's log record (empty: no row changed). On a storage error,
    /// returns it with every command not yet applied, so that each is still answered.
    fn apply_round(
        &mut self,
        txn: &redb::ReadTransaction,
        now: u64,
        commands: Vec<Command>,
        done: &mut Vec<Completion>,
    ) -> Result<Vec<u8>, (StoreError, Vec<Command>)> {
        // The tables borrow the overlay for the round; it is the engine's again after.
        let mut overlay = std::mem::take(&mut self.pipeline.overlay);
        let result = self.apply_round_to(txn, &mut overlay, now, commands, done);
        self.pipeline.overlay = overlay;
        result
    }

    fn apply_round_to(
        &mut self,
        txn: &redb::ReadTransaction,
        overlay: &mut hookd_storage::store::Overlay,
        now: u64,
        commands: Vec<Command>,
        done: &mut Vec<Completion>,
    ) -> Result<Vec<u8>, (StoreError, Vec<Command>)> {
        let mut tables = match hookd_storage::store::Tables::open(txn, overlay, self.store.heap()) {
            Ok(t) => t,
            Err(e) => return Err((e, commands)),
        };
        if let Err(e) = self.fire_timers(&mut tables, now, done) {
            return Err((e, commands));
        }
        let mut rest = commands.into_iter();
        while let Some(command) = rest.next() {
            if let Err(e) = self.apply(&mut tables, now, command, done) {
                return Err((e, rest.collect()));
            }
        }
        self.quota_flush(&mut tables);
        self.tenants.publish_round(done);
        self.serve_waiters(&mut tables, now, done)
            .map_err(|e| (e, Vec::new()))?;
        self.dispatch(&mut tables, now)
            .map_err(|e| (e, Vec::new()))?;
        self.review_destinations();
        if now >= self.housekeeping.next_sweep_ms {
            let behind = self.sweep(&mut tables, now).map_err(|e| (e, Vec::new()))?;
            self.housekeeping.next_sweep_ms = now
                + if behind {
                    SWEEP_BEHIND_MS
                } else {
                    SWEEP_EVERY_MS
                };
        }
        Ok(tables.into_log())
    }

    /// The idempotency sweep's share of a step: true if it stopped at the budget with
    /// work left. Keys have no index by time, so a pass reads the whole table, only when
    /// a key can have expired ([`SweepPass`]). Passes are at least a tenth of the
    /// retention apart: a key's row may outlive its retention by that much, which only
    /// delays the space's reuse, since lookups ignore expired keys. Before this, the sweep
    /// read the table without rest: 1.5 ms of the engine thread every 25 ms once it held
    /// more keys than a step reads, a tenth of the engine's time under EnqueueBatch.
    fn sweep_idempotency(
        &mut self,
        tables: &mut hookd_storage::store::Tables<'_>,
        now: u64,
        spent: &impl Fn() -> bool,
    ) -> Result<bool, StoreError> {
        let retention = self.config.idempotency_retention_ms;
        self.housekeeping.idempotency.run(
            now,
            retention,
            retention / 10,
            spent,
            |cursor, before| {
                let step = tables.sweep_idempotency(cursor, before, SWEEP_CHUNK)?;
                Ok((step.read, step.oldest_kept_ms, step.cursor))
            },
        )
    }

    /// The lanes sweep (`fifo_lane_retention_secs`, issue #49, 7), within the step's budget:
    /// a `lanes` row no message has joined for the retention, of a lane not held (no live
    /// message, not blocked), is removed, so a million one-off ordering keys do not keep a
    /// million rows; true if it stopped at the budget with its pass unfinished.
    fn sweep_lanes(
        &mut self,
        tables: &mut hookd_storage::store::Tables<'_>,
        now: u64,
        spent: &impl Fn() -> bool,
    ) -> Result<bool, StoreError> {
        let retention = self.config.fifo_lane_retention_ms;
        let index = &self.index;
        let held = |key: &[u8]| {
            hookd_storage::store::lane_key_parts(key).is_some_and(|(dest, ordering)| {
                index.find(dest).is_some_and(|d| {
                    index.dests[d]
                        .lanes
                        .as_ref()
                        .is_some_and(|l| l.by_key.contains_key(ordering))
                })
            })
        };
        self.housekeeping
            .lanes
            .run(now, retention, retention / 10, spent, |cursor, before| {
                let step = tables.sweep_lanes(cursor, before, now, SWEEP_CHUNK, &held)?;
                Ok((step.read, step.oldest_kept_ms, step.cursor))
            })
    }

    /// The dead-letter retention sweep (`dead_letters.retention_secs`), within the step's
    /// budget: true if it stopped at the budget with its pass unfinished.
    ///
    /// The dead-letter index is by destination, not by time, so a pass reads it all, only
    /// when a dead letter can have expired ([`SweepPass`]; those buried during a pass are
    /// newer than its start). Passes are at least [`DEAD_PASS_GAP_MS`] apart (a tenth of
    /// the retention, if less): a dead letter may outlive its retention by that much.
    /// Before, it read the whole index without rest, every step, as long as retention was
    /// set.
    fn sweep_dead(
        &mut self,
        tables: &mut hookd_storage::store::Tables<'_>,
        now: u64,
        spent: &impl Fn() -> bool,
    ) -> Result<bool, StoreError> {
        let retention = self.config.dead_letter_retention_ms;
        let mut removed = Vec::new();
        let gap = DEAD_PASS_GAP_MS.min(retention / 10);
        let behind = self
            .housekeeping
            .dead
            .run(now, retention, gap, spent, |cursor, before| {
                let step = tables.sweep_dead(cursor, before, SWEEP_CHUNK)?;
                removed.extend(step.removed);
                Ok((step.read, step.oldest_kept_ms, step.cursor))
            })?;
        if !removed.is_empty() {
            tracing::info!(
                removed = removed.len(),
                "dead letters past dead_letters.retention_secs deleted"
            );
        }
        for (key, id) in removed {
            if let Some(d) = self.index.find(&key) {
                self.index.one_dead_less(d);
                // An expired dead letter that blocked its lane no longer does.
                self.skip_blocker(d, id, now);
            }
        }
        Ok(behind)
    }

    /// One step of the sweeps, within [`SWEEP_BUDGET`]: true if it stopped at the budget
    /// with work left.
    fn sweep(
        &mut self,
        tables: &mut hookd_storage::store::Tables<'_>,
        now: u64,
    ) -> Result<bool, StoreError> {
        let step = std::time::Instant::now();
        let spent = || step.elapsed() >= SWEEP_BUDGET;
        let mut behind = false;
        behind |= self.sweep_idempotency(tables, now, &spent)?;
        if self.config.fifo_lane_retention_ms > 0 {
            behind |= self.sweep_lanes(tables, now, &spent)?;
        }
        if self.config.dead_letter_retention_ms > 0 {
            behind |= self.sweep_dead(tables, now, &spent)?;
        }
        if self.config.alerts.enabled
            && (now >= self.housekeeping.next_alert_ms || self.housekeeping.alert_cursor.is_some())
        {
            if self.housekeeping.alert_cursor.is_none() {
                self.housekeeping.next_alert_ms =
                    now + self.config.alerts.evaluate_every_secs * 1_000;
            }
            self.evaluate_alerts(tables, now)?;
        }
        // Summaries and payload pointers kept past the server's retention for a tenant or
        // destination that asks (see `retention`): the range sweeps stop at the longest.
        self.refresh_retention(now);
        let kept_ms = self.kept_ms();
        if self.config.completed_retention_ms > 0 || kept_ms > 0 {
            let before = now.saturating_sub(kept_ms);
            // Ids are time-ordered, so this is a range from the start of the table.
            while tables.sweep_done(before, SWEEP_CHUNK)? == SWEEP_CHUNK {
                if spent() {
                    behind = true;
                    break;
                }
            }
        }
        // Completed messages' pointers into the log go with their summaries (at once when
        // none are kept).
        let before = now.saturating_sub(kept_ms);
        while tables.sweep_retained(before, SWEEP_CHUNK)? == SWEEP_CHUNK {
            if spent() {
                behind = true;
                break;
            }
        }
        behind |= self.sweep_retention(tables, now, &spent)?;
        behind |= self.compact(tables, &spent)?;
        Ok(behind)
    }

    /// One step of compaction (see `hookd_storage::pipeline::reclaim`): the live messages
    /// whose records lie in the segments the reclaim named are written again, so their
    /// pointers move to the current segment and those segments empty. A pass walks every
    /// live message in id order, [`SWEEP_CHUNK`] at a time within the sweep's budget; a
    /// new pass starts when the reclaim names segments and none is in progress. True if it
    /// stopped at the budget with work left.
    fn compact(
        &mut self,
        tables: &mut hookd_storage::store::Tables<'_>,
        spent: &dyn Fn() -> bool,
    ) -> Result<bool, StoreError> {
        let hk = &mut self.housekeeping;
        if hk.compacting.is_empty() {
            hk.compacting = self.pipeline.syncer.to_compact();
            hk.compact_cursor = None;
            if hk.compacting.is_empty() {
                return Ok(false);
            }
            tracing::info!(segments = ?hk.compacting, "compacting log segments");
        }
        loop {
            let (moved, cursor) =
                tables.relocate(&hk.compacting, hk.compact_cursor, SWEEP_CHUNK)?;
            hk.compacted += moved as u64;
            hk.compact_cursor = cursor;
            if cursor.is_none() {
                // The pass is complete: the next reclaim sees those segments empty once
                // this round is applied (or names what is left).
                hk.compacting.clear();
                return Ok(false);
            }
            if spent() {
                return Ok(true);
            }
        }
    }

    /// Destinations that became idle this round join the idle ones; beyond
    /// [`index::IDLE_KEPT`], the least recently idle are forgotten (with any wake timer).
    /// Endpoints are kept while they exist. In proportion to the round's changes only.
    fn review_destinations(&mut self) {
        let endpoints = &self.endpoints;
        let reviewed = self.index.reviewed(|key| {
            Destination::endpoint_of_key(key).is_some_and(|(t, name)| endpoints.contains(t, name))
        });
        // Idle but holding dead letters (an ad-hoc URL origin that failed, say): its dead
        // letters stay, for their retention, with its key and counts; its statistics, its
        // push state and connection pool go (made again if it is used, or replayed).
        for d in reviewed.shed {
            let dest = &mut self.index.dests[d];
            if let Some(push) = dest.push.take()
                && let Some((_, timer)) = push.wake
            {
                self.wheel.remove(timer);
            }
            dest.activity = hookd_core::stats::Activity::per_destination();
            dest.ready = std::collections::VecDeque::new();
            dest.waiters = std::collections::VecDeque::new();
        }
        for d in reviewed.forget {
            self.housekeeping.alerts.forget(&self.index.dests[d].key);
            if let Some(dest) = self.index.forget(d)
                && let Some(push) = dest.push
                && let Some((_, timer)) = push.wake
            {
                self.wheel.remove(timer);
            }
        }
    }

    /// Stops all writing after a storage error; everyone waiting is told UNAVAILABLE.
    fn fail(&mut self, e: StoreError, commands: Vec<Command>, done: Vec<Completion>) {
        tracing::error!(error = %e, "storage failed; refusing writes until the store is reopened (storage.on_failure: \"recover\" reopens it, \"exit\" exits)");
        self.health.failed = Some(e.to_string());
        self.health.failure.set(e.to_string());
        self.out.now.clear();
        self.out.after_sync.clear();
        self.health.serving.send_replace(false);
        let err = Refusal::from(e);
        for d in done {
            d(Some(err.clone()));
        }
        for c in commands {
            answer_failed(c, err.clone());
        }
        for d in self.index.with_waiters() {
            while let Some(w) = self.index.pop_waiter(d) {
                let _ = w.reply.send(Err(err.clone()));
            }
        }
    }
}

/// Bytes of accepted enqueues, leaving the write queue's count when dropped.
struct Release(Arc<AtomicU64>, u64);

impl Drop for Release {
    fn drop(&mut self) {
        if self.1 > 0 {
            self.0.fetch_sub(self.1, Ordering::AcqRel);
        }
    }
}

/// Why the engine stopped writing; the first reason is kept.
#[derive(Debug, Clone, Default)]
pub(crate) struct Failure(Arc<std::sync::Mutex<Option<String>>>);

impl Failure {
    fn set(&self, why: String) {
        let mut slot = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slot.get_or_insert(why);
    }

    pub(crate) fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

std::thread_local! {
    /// The last panic's message on this thread (set by the hook [`record_panics`] installs).
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Chains a panic hook that keeps each panic's message for the panicking thread, so the
/// engine's failure names it (a panic inside redb on a damaged page, say); once per process.
fn record_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string()));
            previous(info);
        }));
    });
}

/// Marks the engine unhealthy if its thread unwinds, and records why.
struct PanicGuard(Arc<watch::Sender<bool>>, Failure);

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let message = LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_else(|| "no message".into());
            tracing::error!(panic = %message, "the engine thread panicked; refusing writes until the store is reopened");
            self.1.set(format!("the engine thread panicked: {message}"));
            self.0.send_replace(false);
        }
    }
}

fn answer_failed(command: Command, err: Refusal) {
    match command {
        Command::Enqueue {
            messages, reply, ..
        } => {
            let _ = reply.send(messages.iter().map(|_| Err(err.clone())).collect());
        }
        Command::Receive { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Ack { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Replay { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::ReplayStep { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::PutReplayJob { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Nack { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::PutEndpoint { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::DeleteEndpoint { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::PutObject { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::PutQueue { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::DeleteQueue { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::PutEventType { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::DeleteEventType { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::PutTenant { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::DeleteTenant { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::PutToken { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::RevokeToken { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Reseal { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Purge { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Erase { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::ScrubProgress { reply } => {
            let _ = reply.send(Err(err));
        }
        Command::Pause { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Stats { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Gauges { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Detail { reply, .. } => {
            let _ = reply.send(Err(err));
        }
        Command::Ping { reply } => {
            let _ = reply.send(Err(err));
        }
        Command::Attempted(_) | Command::Tick | Command::Drain | Command::Shutdown => {}
    }
}

/// CPU time the calling thread has used: a round's own work, apart from the time the
/// thread waited for a core (on a box shared with its clients, wall time holds both).
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}
