//! Prometheus metrics, served at `/metrics` on the HTTP listener in the text format 0.0.4.
//!
//! Two kinds:
//! - **Counters and histograms** are updated where things happen (the engine thread, the
//!   log writer, the apply stage) and carry no destination label, or only a label from a
//!   small fixed set (an attempt's outcome class), so their series never grow with the
//!   number of endpoints.
//! - **Gauges** (messages by state and destination, oldest pending age, breaker state,
//!   storage figures) are read from the engine when Prometheus scrapes: one bounded pass over
//!   the destinations' counters on the engine thread, no histograms.
//!
//! **Bounded labels.** Per-destination gauges are written for at most
//! `metrics.max_destination_series` destinations (default 100): those with the most live
//! and dead-lettered messages. Everything else is summed into one series labelled
//! `destination="_other"`, so `sum(hookd_pending_messages)` stays the total however many
//! endpoints exist, and a scrape stays a few hundred series with 10,000 endpoints. A
//! destination whose series is not shown any more simply disappears from the next scrape
//! (gauges are rebuilt at each one).

#![forbid(unsafe_code)]

use std::sync::Mutex;

use prometheus::{
    Encoder, Gauge, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts,
    Registry, TextEncoder,
};

use hookd_core::breaker::BreakerState;
use hookd_core::outcome::AttemptOutcome;
use hookd_core::stats::StorageSnapshot;

/// The label value that stands for every destination beyond the shown ones.
pub(crate) const OTHER: &str = "_other";

/// Every counter and histogram hookd updates, and the registry they are served from.
pub struct Metrics {
    registry: Registry,
    /// Messages stored by Enqueue / EnqueueBatch.
    pub enqueued: IntCounter,
    /// Messages completed successfully (a 2xx from an endpoint, or acknowledged).
    pub delivered: IntCounter,
    /// Attempts that ended without success (push failures, Nacks, expired leases).
    pub attempts_failed: IntCounter,
    /// Messages moved to the dead-letter queue.
    pub dead_lettered: IntCounter,
    /// Dead letters put back in their queue.
    pub replayed: IntCounter,
    /// Push attempts by outcome class (`2xx`, `4xx`, `429`, `5xx`, `timeout`, ...).
    pub push_attempts: IntCounterVec,
    /// How long a push attempt took (connect to response body).
    pub(crate) push_attempt_seconds: Histogram,
    /// From enqueue to successful completion.
    pub delivery_latency_seconds: Histogram,
    /// One write-ahead log append plus its fdatasync.
    pub(crate) log_sync_seconds: Histogram,
    /// Requests answered by one log sync (group commit).
    pub(crate) log_sync_requests: Histogram,
    /// One engine round's work on its thread (commands, timers and the round's redb
    /// reads), before its log sync: every write in the round waits this long.
    pub engine_round_seconds: Histogram,
    /// The engine thread's CPU time in one round (its own work, no wait for a core).
    pub engine_round_cpu_seconds: Histogram,
    /// Storage failures by stage (`log`, `apply`, `checkpoint`).
    pub(crate) storage_failures: IntCounterVec,
    /// Checkpoints (redb made durable up to the log) and how long each took.
    pub checkpoint_seconds: Histogram,
    /// Inbound webhooks by source and outcome (`accepted`, `duplicate`, `unauthorized`,
    /// `invalid`, `too_large`, `unsupported_type`, `unknown_source`, `backpressure`,
    /// `unavailable`). The source label is a configured source's name or `_unknown`.
    pub ingest_requests: IntCounterVec,
    /// From the request's arrival to its answer, accepted requests only (durable).
    pub ingest_seconds: Histogram,
    /// Events refused before storage, by reason (`destination_messages`,
    /// `destination_bytes`, `total_messages`, `total_bytes`: a hard watermark;
    /// `disk_reserve`; `write_queue`: `max_queued_write_bytes`; `match_steps`: a publish's
    /// routing through its topic's filters past the work limit).
    pub(crate) enqueue_refused: IntCounterVec,
    /// Events accepted above a soft watermark (their answer carried a throttle hint).
    pub throttled: IntCounter,
    /// The serving TLS certificate's notAfter, in Unix seconds (0 without TLS).
    pub tls_certificate_expiry: IntGauge,
    /// Bytes of inbound bodies held before their signature check.
    pub ingest_unverified_bytes: IntGauge,
    /// Publishes stored (at least one subscriber took them).
    pub published: IntCounter,
    /// Publishes no subscription took (nothing stored).
    pub unrouted: IntCounter,
    /// Deliveries per stored publish.
    pub publish_subscribers: Histogram,
    /// Work (filter steps) routing one publish through its topic's filters took.
    pub publish_match_steps: Histogram,
    /// Subscriptions held.
    pub subscriptions: IntGauge,
    /// FIFO lanes' heads that died and held their lane (`block`).
    pub lanes_blocked: IntCounter,
    /// FIFO lanes' heads that died and were parked, their lane moving on (`park`).
    pub lanes_parked: IntCounter,
    /// Ingest connections served on the low-priority runtime (`ingest/demote.rs`).
    pub ingest_demoted_connections: IntCounter,
    /// Demoted ingest connections ended once their client was trusted (`ingest/receive.rs`).
    pub ingest_promoted_connections: IntCounter,
    gauges: Mutex<Gauges>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Gauges rebuilt from the engine's figures at every scrape.
struct Gauges {
    tenant_live: GaugeVec,
    tenant_live_bytes: GaugeVec,
    pending: GaugeVec,
    awaiting_retry: GaugeVec,
    in_flight: GaugeVec,
    dead_letters: GaugeVec,
    oldest_pending: GaugeVec,
    waiting_receives: GaugeVec,
    live_bytes: GaugeVec,
    backpressure: GaugeVec,
    disk_available: IntGauge,
    disk_reserve: IntGauge,
    breaker: GaugeVec,
    disabled: GaugeVec,
    live: IntGauge,
    destinations: IntGauge,
    queued_write_bytes: IntGauge,
    log_bytes: IntGauge,
    log_live_bytes: IntGauge,
    log_segments: IntGauge,
    log_retained_from: Gauge,
    log_reclaimable_bytes: IntGauge,
    log_compacting_segments: IntGauge,
    log_compacted_records: IntGauge,
    log_deleted_segments: IntGauge,
    log_since_checkpoint: IntGauge,
    checkpoint_age: Gauge,
    replay_seconds: Gauge,
    healthy: IntGauge,
    alerts: GaugeVec,
}

/// One destination's gauges (or the sum of the ones not shown, under [`OTHER`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DestinationGauges {
    pub destination: String,
    pub pending: u64,
    pub awaiting_retry: u64,
    pub in_flight: u64,
    pub dead_letters: u64,
    pub oldest_pending_age_ms: u64,
    pub waiting_receives: u64,
    pub live_bytes: u64,
    pub backpressure: hookd_core::backpressure::Level,
    /// Push destinations only.
    pub breaker: Option<BreakerState>,
    pub disabled: bool,
}

impl DestinationGauges {
    /// What decides which destinations get their own series.
    pub fn weight(&self) -> u64 {
        self.pending + self.awaiting_retry + self.in_flight + self.dead_letters
    }

    /// Adds `other`'s counts to this one (the `_other` series).
    pub fn absorb(&mut self, other: &DestinationGauges) {
        self.pending += other.pending;
        self.awaiting_retry += other.awaiting_retry;
        self.in_flight += other.in_flight;
        self.dead_letters += other.dead_letters;
        self.waiting_receives += other.waiting_receives;
        self.live_bytes += other.live_bytes;
        self.backpressure = self.backpressure.max(other.backpressure);
        self.oldest_pending_age_ms = self.oldest_pending_age_ms.max(other.oldest_pending_age_ms);
    }
}

/// What a scrape reads from the engine.
#[derive(Debug, Clone, Default)]
pub struct GaugeSnapshot {
    /// At most `max_destination_series` destinations, then the `_other` sum if any.
    pub destinations: Vec<DestinationGauges>,
    pub storage: StorageSnapshot,
    pub healthy: bool,
    /// Alert states: the totals' and each destination's that is not ok.
    pub alerts: Vec<hookd_core::stats::AlertSnapshot>,
    /// Against the global watermarks.
    pub backpressure: hookd_core::backpressure::Level,
    /// The busiest tenants by live messages, then the `_other` sum if any were left out.
    pub tenants: Vec<TenantGauges>,
}

/// One tenant's gauges (or the sum of the ones not shown, under `_other`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantGauges {
    pub tenant: String,
    pub live_messages: u64,
    pub live_bytes: u64,
}

/// The `max` busiest of `tenants` (by live messages, ties by name) by name, then the rest
/// summed as `_other`; tenants holding nothing are left out.
pub fn busiest_tenants(mut tenants: Vec<TenantGauges>, max: usize) -> Vec<TenantGauges> {
    tenants.retain(|t| t.live_messages > 0 || t.live_bytes > 0);
    tenants.sort_unstable_by(|a, b| {
        b.live_messages
            .cmp(&a.live_messages)
            .then_with(|| a.tenant.cmp(&b.tenant))
    });
    if tenants.len() > max {
        let mut other = TenantGauges {
            tenant: OTHER.to_owned(),
            ..Default::default()
        };
        for t in tenants.drain(max..) {
            other.live_messages += t.live_messages;
            other.live_bytes += t.live_bytes;
        }
        tenants.push(other);
    }
    tenants
}

/// One slice of a scrape's destinations, as one engine step reads it.
#[derive(Debug, Default)]
pub struct GaugePart {
    /// The slice's heaviest (at most the scrape's `max`), named, in key order if the
    /// slice held no more than `max`.
    pub top: Vec<DestinationGauges>,
    /// The rest of the slice summed, if any was left out of `top`.
    pub other: Option<DestinationGauges>,
    /// The last key of the slice, if destinations follow it.
    pub next: Option<String>,
    /// With the last slice: the figures of hookd as a whole.
    pub tail: Option<GaugeTail>,
}

/// What the last slice of a scrape adds.
#[derive(Debug, Default)]
pub struct GaugeTail {
    /// Every tenant holding live messages (the handle keeps the busiest).
    pub tenants: Vec<TenantGauges>,
    pub storage: StorageSnapshot,
    pub healthy: bool,
    pub alerts: Vec<hookd_core::stats::AlertSnapshot>,
    pub backpressure: hookd_core::backpressure::Level,
}

/// Merges a scrape's slices into the `max` heaviest of all plus one `_other` sum: the
/// heaviest of all are among the heaviest of their slices, so nothing else is kept.
#[derive(Debug)]
pub struct GaugeTally {
    max: usize,
    shown: Vec<DestinationGauges>,
    other: Option<DestinationGauges>,
}

impl GaugeTally {
    pub fn new(max: usize) -> Self {
        Self {
            max,
            shown: Vec::new(),
            other: None,
        }
    }

    pub fn add(&mut self, top: Vec<DestinationGauges>, other: Option<DestinationGauges>) {
        if let Some(o) = other {
            self.other.get_or_insert_with(Default::default).absorb(&o);
        }
        self.shown.extend(top);
        // Cut back once twice the bound is held: each slice's names are copied once more
        // at most, whatever the number of slices.
        if self.shown.len() > 2 * self.max.max(1) {
            self.cut();
        }
    }

    fn cut(&mut self) {
        if self.shown.len() <= self.max {
            return;
        }
        let order = |a: &DestinationGauges, b: &DestinationGauges| {
            b.weight()
                .cmp(&a.weight())
                .then_with(|| a.destination.cmp(&b.destination))
        };
        if self.max > 0 {
            self.shown.select_nth_unstable_by(self.max - 1, order);
        }
        let other = self.other.get_or_insert_with(Default::default);
        for d in self.shown.drain(self.max..) {
            other.absorb(&d);
        }
    }

    /// Every destination in key order if there were no more than `max`; else the `max`
    /// heaviest (ties by name), then the `_other` sum.
    pub fn finish(mut self) -> Vec<DestinationGauges> {
        self.cut();
        match self.other {
            None => self.shown,
            Some(mut other) => {
                self.shown.sort_unstable_by(|a, b| {
                    b.weight()
                        .cmp(&a.weight())
                        .then_with(|| a.destination.cmp(&b.destination))
                });
                other.destination = OTHER.to_owned();
                self.shown.push(other);
                self.shown
            }
        }
    }
}

const REFUSAL_REASONS: [&str; 7] = [
    "destination_messages",
    "destination_bytes",
    "total_messages",
    "total_bytes",
    "disk_reserve",
    "write_queue",
    "match_steps",
];

/// Alert series written at most (the totals' come first); beyond, the rest are left out.
pub(crate) const MAX_ALERT_SERIES: usize = 1_000;

/// Seconds-scale buckets from 1 ms to 60 s (attempts, delivery within retries).
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// End to end, retries included: up to a day.
const DELIVERY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0, 21600.0, 86400.0,
];
/// fdatasync-scale: 50 us to 1 s.
const SYNC_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];
const REQUEST_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

/// What `hookd_build_info` says: the binary's version and the commit it was built from.
#[derive(Debug, Clone, Copy)]
pub struct Build {
    pub version: &'static str,
    pub commit: &'static str,
}

impl Metrics {
    /// A fresh registry with every hookd metric, process figures and build info.
    pub fn new(build: Build) -> Self {
        let registry = Registry::new();
        let reg = Registrar(&registry);
        let counter =
            |name: &str, help: &str| reg.add(IntCounter::with_opts(Opts::new(name, help)));
        let histogram = |name: &str, help: &str, buckets: &[f64]| {
            reg.add(Histogram::with_opts(
                HistogramOpts::new(name, help).buckets(buckets.to_vec()),
            ))
        };
        let by_dest = |name: &str, help: &str| {
            reg.add(GaugeVec::new(Opts::new(name, help), &["destination"]))
        };
        let by_tenant =
            |name: &str, help: &str| reg.add(GaugeVec::new(Opts::new(name, help), &["tenant"]));
        let gauge = |name: &str, help: &str| reg.add(IntGauge::with_opts(Opts::new(name, help)));
        let fgauge = |name: &str, help: &str| reg.add(Gauge::with_opts(Opts::new(name, help)));

        let build = reg.add(IntGauge::with_opts(
            Opts::new(
                "hookd_build_info",
                "hookd's version and the commit it was built from; the value is always 1.",
            )
            .const_label("version", build.version)
            .const_label("commit", build.commit),
        ));
        build.set(1);
        #[cfg(target_os = "linux")]
        {
            let process = prometheus::process_collector::ProcessCollector::for_self();
            if let Err(e) = registry.register(Box::new(process)) {
                tracing::warn!(error = %e, "process metrics are not available");
            }
        }

        let metrics = Self {
            enqueued: counter(
                "hookd_messages_enqueued_total",
                "Messages stored by Enqueue and EnqueueBatch.",
            ),
            delivered: counter(
                "hookd_messages_delivered_total",
                "Messages completed successfully: a 2xx from their endpoint, or acknowledged by a consumer.",
            ),
            attempts_failed: counter(
                "hookd_attempts_failed_total",
                "Delivery attempts that ended without success: push failures, Nacks and expired leases.",
            ),
            dead_lettered: counter(
                "hookd_messages_dead_lettered_total",
                "Messages moved to the dead-letter queue.",
            ),
            replayed: counter(
                "hookd_messages_replayed_total",
                "Dead letters put back in their queue by a replay.",
            ),
            push_attempts: reg.add(IntCounterVec::new(
                Opts::new(
                    "hookd_push_attempts_total",
                    "Push attempts by outcome: the HTTP status class (2xx, 3xx, 4xx, 429, 5xx), or timeout, network_error, refused.",
                ),
                &["outcome"],
            )),
            push_attempt_seconds: histogram(
                "hookd_push_attempt_duration_seconds",
                "How long one push attempt took, connect to the end of the response.",
                LATENCY_BUCKETS,
            ),
            delivery_latency_seconds: histogram(
                "hookd_delivery_latency_seconds",
                "From enqueue to successful completion, retries included.",
                DELIVERY_BUCKETS,
            ),
            log_sync_seconds: histogram(
                "hookd_log_sync_duration_seconds",
                "One write-ahead log append and its fdatasync (one group commit).",
                SYNC_BUCKETS,
            ),
            log_sync_requests: histogram(
                "hookd_log_sync_requests",
                "Requests answered by one write-ahead log sync.",
                REQUEST_BUCKETS,
            ),
            engine_round_seconds: histogram(
                "hookd_engine_round_duration_seconds",
                "One engine round's work on the engine thread (its commands, due timers and redb reads), its log sync not included: every write taken in the round waits this long.",
                SYNC_BUCKETS,
            ),
            engine_round_cpu_seconds: histogram(
                "hookd_engine_round_cpu_seconds",
                "The engine thread's CPU time in one round: its own work, without the time it waited for a core (compare with hookd_engine_round_duration_seconds).",
                SYNC_BUCKETS,
            ),
            storage_failures: reg.add(IntCounterVec::new(
                Opts::new(
                    "hookd_storage_failures_total",
                    "Storage failures by stage (log: an append or fdatasync; apply: redb behind the log; checkpoint). Writes stop after one.",
                ),
                &["stage"],
            )),
            checkpoint_seconds: histogram(
                "hookd_checkpoint_duration_seconds",
                "One checkpoint: redb made durable up to the log position it holds.",
                LATENCY_BUCKETS,
            ),
            ingest_requests: reg.add(IntCounterVec::new(
                Opts::new(
                    "hookd_ingest_requests_total",
                    "Inbound webhooks by source and outcome: accepted, duplicate, unauthorized, invalid, too_large, unsupported_type, unknown_source, backpressure, unavailable.",
                ),
                &["source", "outcome"],
            )),
            ingest_seconds: histogram(
                "hookd_ingest_duration_seconds",
                "From an inbound webhook's arrival to its 202, the event durable.",
                SYNC_BUCKETS,
            ),
            enqueue_refused: reg.add(IntCounterVec::new(
                Opts::new(
                    "hookd_enqueue_refused_total",
                    "Events refused before storage (RESOURCE_EXHAUSTED or HTTP 429/503), by reason: destination_messages, destination_bytes, total_messages, total_bytes (hard watermarks), disk_reserve, write_queue, match_steps (a publish whose routing through its topic's filters would pass the work limit).",
                ),
                &["reason"],
            )),
            throttled: counter(
                "hookd_enqueue_throttled_total",
                "Events accepted above a soft watermark: their answer suggested a pause (throttle_ms).",
            ),
            tls_certificate_expiry: gauge(
                "hookd_tls_certificate_expiry_timestamp_seconds",
                "The serving TLS certificate's notAfter, in Unix seconds (alert when it is near: hookd also warns in its log 14 days ahead).",
            ),
            ingest_unverified_bytes: gauge(
                "hookd_ingest_unverified_bytes",
                "Bytes of inbound webhook bodies held before their signature check (announced lengths), against connections.max_unverified_ingest_bytes.",
            ),
            ingest_demoted_connections: counter(
                "hookd_ingest_demoted_connections_total",
                "Ingest connections served at idle priority, their reads paced: their client passed no signature check in the last hour, or since then failed one or was refused for holding its share of connections.max_unverified_ingest_bytes within connections.ingest_auth_failure_window_secs.",
            ),
            published: counter(
                "hookd_events_published_total",
                "Events published to a topic and stored: each is one delivery per subscribed endpoint or queue (counted in hookd_messages_enqueued_total).",
            ),
            unrouted: counter(
                "hookd_events_unrouted_total",
                "Events published to a topic no subscription took: answered with 0 subscribers, nothing stored.",
            ),
            publish_subscribers: histogram(
                "hookd_publish_subscribers",
                "Deliveries one stored publish made (its subscribed endpoints and queues).",
                &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0],
            ),
            publish_match_steps: histogram(
                "hookd_publish_match_steps",
                "Steps routing one publish through its topic's subscription filters took (the walk of the event along the indexed paths, lookups and full evaluations); a publish past the limit (2,000,000) is refused.",
                &[
                    10.0, 100.0, 1_000.0, 10_000.0, 100_000.0, 500_000.0, 1_000_000.0,
                    2_000_000.0,
                ],
            ),
            subscriptions: gauge(
                "hookd_subscriptions",
                "Subscriptions held (PutSubscription).",
            ),
            lanes_blocked: counter(
                "hookd_lanes_blocked_total",
                "Heads of FIFO lanes that became dead letters at a destination whose policy is block: each holds its lane until replayed or purged.",
            ),
            lanes_parked: counter(
                "hookd_lanes_parked_total",
                "Heads of FIFO lanes that became dead letters at a destination whose policy is park: the lane moved on, leaving a gap in its sequence numbers.",
            ),
            ingest_promoted_connections: counter(
                "hookd_ingest_promoted_connections_total",
                "Ingest connections served at idle priority that hookd closed after answering a request whose signature check passed (Connection: close), so that the client, trusted now, reconnects at normal priority.",
            ),
            gauges: Mutex::new(Gauges {
                tenant_live: by_tenant(
                    "hookd_tenant_live_messages",
                    "Live messages (pending, awaiting retry, in flight) of a tenant: the busiest tenants by name (as many as metrics.max_destination_series), the rest summed as tenant=\"_other\".",
                ),
                tenant_live_bytes: by_tenant(
                    "hookd_tenant_live_bytes",
                    "Bytes of a tenant's live messages' records (the tenants of hookd_tenant_live_messages).",
                ),
                live_bytes: by_dest(
                    "hookd_live_bytes",
                    "Bytes of live messages' records, by destination (the byte watermarks' measure).",
                ),
                backpressure: by_dest(
                    "hookd_backpressure_level",
                    "Against the watermarks: 0 below the soft mark, 1 between the marks (throttle hints), 2 at the hard mark (refusing); destination \"*\" is the global marks.",
                ),
                disk_available: gauge(
                    "hookd_disk_available_bytes",
                    "Space hookd may still write on the data directory's file system.",
                ),
                disk_reserve: gauge(
                    "hookd_disk_reserve_bytes",
                    "The reserve: below it new events are refused (storage.reserve_mb / reserve_percent).",
                ),
                pending: by_dest(
                    "hookd_pending_messages",
                    "Messages waiting for their first or next attempt (ready or scheduled), by destination.",
                ),
                awaiting_retry: by_dest(
                    "hookd_awaiting_retry_messages",
                    "Messages that failed an attempt and wait for a retry, by destination.",
                ),
                in_flight: by_dest(
                    "hookd_in_flight_messages",
                    "Messages being pushed or leased to a consumer, by destination.",
                ),
                dead_letters: by_dest(
                    "hookd_dead_letter_messages",
                    "Messages in the dead-letter queue, by destination.",
                ),
                oldest_pending: by_dest(
                    "hookd_oldest_pending_age_seconds",
                    "Age of the oldest live message, by destination.",
                ),
                waiting_receives: by_dest(
                    "hookd_waiting_receives",
                    "Receive calls waiting for a message (long polls), by queue.",
                ),
                breaker: by_dest(
                    "hookd_breaker_state",
                    "An endpoint's circuit breaker: 0 closed, 1 half-open, 2 open.",
                ),
                disabled: by_dest(
                    "hookd_endpoint_disabled",
                    "1 while an endpoint is disabled (its messages wait).",
                ),
                live: gauge(
                    "hookd_live_messages",
                    "Messages neither completed nor dead-lettered.",
                ),
                destinations: gauge(
                    "hookd_destinations",
                    "Queues, endpoints and ad-hoc URL origins known to the engine.",
                ),
                queued_write_bytes: gauge(
                    "hookd_queued_write_bytes",
                    "Bytes of accepted writes waiting for the log (bounded by max_queued_write_bytes).",
                ),
                log_bytes: gauge(
                    "hookd_log_bytes",
                    "Bytes in the write-ahead log's segments (the message heap).",
                ),
                log_live_bytes: gauge(
                    "hookd_log_live_bytes",
                    "Bytes of live messages' records in the log.",
                ),
                log_segments: gauge("hookd_log_segments", "Segments of the log."),
                log_retained_from: fgauge(
                    "hookd_log_retained_from_seconds",
                    "Unix time since which completed messages' payloads are readable (0: unknown).",
                ),
                log_reclaimable_bytes: gauge(
                    "hookd_log_reclaimable_bytes",
                    "Bytes of log segments compaction is emptying.",
                ),
                log_compacting_segments: gauge(
                    "hookd_log_compacting_segments",
                    "Log segments whose live records compaction is copying forward.",
                ),
                log_compacted_records: gauge(
                    "hookd_log_compacted_records",
                    "Records compaction copied forward since start.",
                ),
                log_deleted_segments: gauge(
                    "hookd_log_deleted_segments",
                    "Log segments deleted (nothing live in them, past retention) since start.",
                ),
                log_since_checkpoint: gauge(
                    "hookd_log_since_checkpoint_bytes",
                    "Log bytes applied since the last checkpoint: at least what a restart replays.",
                ),
                checkpoint_age: fgauge(
                    "hookd_checkpoint_age_seconds",
                    "Time since the last checkpoint.",
                ),
                replay_seconds: fgauge(
                    "hookd_last_replay_duration_seconds",
                    "How long replaying the log took at the last start.",
                ),
                healthy: gauge(
                    "hookd_storage_healthy",
                    "1 while storage accepts writes; 0 after a storage failure stopped them.",
                ),
                alerts: reg.add(GaugeVec::new(
                    Opts::new(
                        "hookd_alert_level",
                        "Alert states: 0 ok, 1 warning, 2 critical; destination \"*\" is the total. A destination's alert appears while it is not ok.",
                    ),
                    &["alert", "destination"],
                )),
            }),
            registry,
        };
        metrics.touch();
        metrics
    }

    /// Series that exist from the start at 0, so `rate()` and `increase()` work before the
    /// first event of their kind.
    fn touch(&self) {
        for class in [
            "2xx",
            "3xx",
            "4xx",
            "429",
            "5xx",
            "timeout",
            "network_error",
            "refused",
        ] {
            self.push_attempts.with_label_values(&[class]);
        }
        for stage in ["log", "apply", "checkpoint"] {
            self.storage_failures.with_label_values(&[stage]);
        }
        for reason in REFUSAL_REASONS {
            self.enqueue_refused.with_label_values(&[reason]);
        }
    }

    /// Counts an event refused before storage, by the refusal's metric reason
    /// (`Refusal::metric_reason` in the engine: `disk_reserve`, `write_queue`,
    /// `destination_messages`, ...).
    pub fn refused(&self, reason: &'static str) {
        self.enqueue_refused.with_label_values(&[reason]).inc();
    }

    /// One push attempt's outcome class and duration.
    pub fn push_attempt(&self, status: u16, failure: Option<AttemptOutcome>, micros: u64) {
        let class = match status {
            0 => match failure {
                Some(AttemptOutcome::Timeout) => "timeout",
                Some(AttemptOutcome::Refused) => "refused",
                _ => "network_error",
            },
            429 => "429",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            500..=599 => "5xx",
            _ => "other",
        };
        self.push_attempts.with_label_values(&[class]).inc();
        self.push_attempt_seconds.observe(micros as f64 / 1e6);
    }

    /// One log sync: how long, and how many requests it answered.
    pub fn log_synced(&self, micros: u64, requests: u64) {
        self.log_sync_seconds.observe(micros as f64 / 1e6);
        self.log_sync_requests.observe(requests as f64);
    }

    pub fn storage_failed(&self, stage: &str) {
        self.storage_failures.with_label_values(&[stage]).inc();
    }

    /// The text exposition of every metric, with the gauges set from `snapshot`.
    pub fn render(&self, snapshot: &GaugeSnapshot) -> String {
        // One scrape at a time: the gauges are reset and set for this one.
        let g = self
            .gauges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.set(snapshot);
        let mut out = Vec::new();
        // Encoding our own families into memory fails only on a bug (a metric with no
        // samples of its declared type); say so in the output rather than panic.
        match TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            Ok(()) => String::from_utf8(out).unwrap_or_default(),
            Err(e) => format!("# hookd could not encode its metrics: {e}\n"),
        }
    }
}

impl Default for Metrics {
    /// A registry whose build info names this crate's version and an unknown commit (tests).
    fn default() -> Self {
        Self::new(Build {
            version: env!("CARGO_PKG_VERSION"),
            commit: "unknown",
        })
    }
}

impl Gauges {
    fn set(&self, s: &GaugeSnapshot) {
        for v in [
            &self.pending,
            &self.awaiting_retry,
            &self.in_flight,
            &self.dead_letters,
            &self.oldest_pending,
            &self.waiting_receives,
            &self.live_bytes,
            &self.backpressure,
            &self.breaker,
            &self.disabled,
            &self.alerts,
            &self.tenant_live,
            &self.tenant_live_bytes,
        ] {
            v.reset();
        }
        for t in &s.tenants {
            let l = [t.tenant.as_str()];
            self.tenant_live
                .with_label_values(&l)
                .set(t.live_messages as f64);
            self.tenant_live_bytes
                .with_label_values(&l)
                .set(t.live_bytes as f64);
        }
        let mut alerts: Vec<&hookd_core::stats::AlertSnapshot> = s.alerts.iter().collect();
        // The totals first, so the cap never drops them.
        alerts.sort_by_key(|a| a.destination != hookd_core::alerts::TOTAL);
        for a in alerts.into_iter().take(MAX_ALERT_SERIES) {
            let level = match a.level {
                "critical" => 2.0,
                "warning" => 1.0,
                _ => 0.0,
            };
            self.alerts
                .with_label_values(&[a.alert, a.destination.as_str()])
                .set(level);
        }
        for d in &s.destinations {
            let l = [d.destination.as_str()];
            self.pending.with_label_values(&l).set(d.pending as f64);
            self.awaiting_retry
                .with_label_values(&l)
                .set(d.awaiting_retry as f64);
            self.in_flight.with_label_values(&l).set(d.in_flight as f64);
            self.dead_letters
                .with_label_values(&l)
                .set(d.dead_letters as f64);
            self.oldest_pending
                .with_label_values(&l)
                .set(d.oldest_pending_age_ms as f64 / 1e3);
            self.live_bytes
                .with_label_values(&l)
                .set(d.live_bytes as f64);
            self.backpressure
                .with_label_values(&l)
                .set(d.backpressure as u8 as f64);
            if d.waiting_receives > 0 {
                self.waiting_receives
                    .with_label_values(&l)
                    .set(d.waiting_receives as f64);
            }
            if let Some(b) = &d.breaker {
                let v = match b {
                    BreakerState::Closed => 0.0,
                    BreakerState::HalfOpen { .. } => 1.0,
                    BreakerState::Open { .. } => 2.0,
                };
                self.breaker.with_label_values(&l).set(v);
                self.disabled
                    .with_label_values(&l)
                    .set(if d.disabled { 1.0 } else { 0.0 });
            }
        }
        let st = &s.storage;
        self.live.set(clamp(st.live_messages));
        self.destinations.set(clamp(st.destinations));
        self.queued_write_bytes.set(clamp(st.queued_write_bytes));
        self.log_bytes.set(clamp(st.log_bytes));
        self.log_live_bytes.set(clamp(st.log_live_bytes));
        self.log_segments.set(clamp(st.log_segments));
        self.log_retained_from
            .set(st.log_retained_from_ms as f64 / 1e3);
        self.log_reclaimable_bytes
            .set(clamp(st.log_reclaimable_bytes));
        self.log_compacting_segments
            .set(clamp(st.log_compacting_segments));
        self.log_compacted_records
            .set(clamp(st.log_compacted_records));
        self.log_deleted_segments
            .set(clamp(st.log_deleted_segments));
        self.log_since_checkpoint
            .set(clamp(st.log_since_checkpoint_bytes));
        self.checkpoint_age.set(st.checkpoint_age_ms as f64 / 1e3);
        self.replay_seconds.set(st.replay_ms as f64 / 1e3);
        self.healthy.set(i64::from(s.healthy));
        self.disk_available.set(clamp(st.disk_available_bytes));
        self.disk_reserve.set(clamp(st.disk_reserve_bytes));
        self.backpressure
            .with_label_values(&[hookd_core::alerts::TOTAL])
            .set(s.backpressure as u8 as f64);
    }
}

fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// Registers each metric as it is made. Every name is a literal of this module and unique,
/// so registration cannot fail short of a bug, which the unit test below catches.
struct Registrar<'a>(&'a Registry);

impl Registrar<'_> {
    fn add<M>(&self, made: prometheus::Result<M>) -> M
    where
        M: prometheus::core::Collector + Clone + 'static,
    {
        match made {
            Ok(m) => {
                if let Err(e) = self.0.register(Box::new(m.clone())) {
                    tracing::error!(error = %e, "a metric could not be registered");
                }
                m
            }
            Err(e) => {
                // Only a malformed name gets here; a bug caught by the unit tests.
                panic!("metric definition is invalid: {e}")
            }
        }
    }
}

/// Keeps the `max` heaviest destinations and sums the rest into one [`OTHER`] series.
pub fn bound(mut all: Vec<DestinationGauges>, max: usize) -> Vec<DestinationGauges> {
    if all.len() <= max {
        return all;
    }
    // Heaviest first; ties by name so a scrape is stable.
    all.sort_unstable_by(|a, b| {
        b.weight()
            .cmp(&a.weight())
            .then_with(|| a.destination.cmp(&b.destination))
    });
    let rest = all.split_off(max);
    let mut other = DestinationGauges {
        destination: OTHER.to_owned(),
        ..Default::default()
    };
    for d in &rest {
        other.absorb(d);
    }
    all.push(other);
    all
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_busiest_tenants_are_named_and_the_rest_summed() {
        let t = |name: &str, live: u64| TenantGauges {
            tenant: name.into(),
            live_messages: live,
            live_bytes: live * 10,
        };
        let shown = busiest_tenants(vec![t("a", 1), t("b", 5), t("idle", 0), t("c", 3)], 2);
        assert_eq!(
            shown,
            [
                t("b", 5),
                t("c", 3),
                TenantGauges {
                    tenant: "_other".into(),
                    live_messages: 1,
                    live_bytes: 10
                }
            ]
        );
        assert_eq!(busiest_tenants(vec![t("a", 1)], 2), [t("a", 1)]);
    }

    use super::*;

    fn dest(name: &str, pending: u64, dead: u64) -> DestinationGauges {
        DestinationGauges {
            destination: name.into(),
            pending,
            dead_letters: dead,
            oldest_pending_age_ms: pending * 10,
            ..Default::default()
        }
    }

    #[test]
    fn every_metric_registers_and_renders() {
        let m = Metrics::new(Build {
            version: "9.8.7",
            commit: "abc123",
        });
        m.enqueued.inc();
        m.push_attempt(503, None, 12_000);
        m.push_attempt(0, Some(AttemptOutcome::Timeout), 5_000_000);
        m.log_synced(300, 17);
        m.storage_failed("log");
        let text = m.render(&GaugeSnapshot {
            destinations: vec![dest("queue:a", 3, 1)],
            healthy: true,
            ..Default::default()
        });
        assert!(text.contains("hookd_messages_enqueued_total 1"), "{text}");
        assert!(text.contains("hookd_push_attempts_total{outcome=\"5xx\"} 1"));
        assert!(text.contains("hookd_push_attempts_total{outcome=\"timeout\"} 1"));
        assert!(text.contains("hookd_pending_messages{destination=\"queue:a\"} 3"));
        assert!(text.contains("hookd_dead_letter_messages{destination=\"queue:a\"} 1"));
        assert!(text.contains("hookd_storage_healthy 1"));
        let build = "hookd_build_info{commit=\"abc123\",version=\"9.8.7\"} 1";
        assert!(text.contains(build), "{build} not in {text}");
        assert!(text.contains("hookd_log_sync_requests_bucket{le=\"32\"} 1"));
        assert!(text.contains("hookd_storage_failures_total{stage=\"apply\"} 0"));
        assert!(text.contains("hookd_push_attempts_total{outcome=\"2xx\"} 0"));
    }

    #[test]
    fn a_destination_gone_from_the_engine_leaves_the_next_scrape() {
        let m = Metrics::default();
        let one = m.render(&GaugeSnapshot {
            destinations: vec![dest("queue:a", 3, 0), dest("queue:b", 1, 0)],
            ..Default::default()
        });
        assert!(one.contains("queue:b"));
        let two = m.render(&GaugeSnapshot {
            destinations: vec![dest("queue:a", 3, 0)],
            ..Default::default()
        });
        assert!(!two.contains("queue:b"), "{two}");
    }

    #[test]
    fn thousands_of_destinations_become_the_heaviest_and_one_other_series() {
        let all: Vec<_> = (0..5_000u64)
            .map(|i| dest(&format!("endpoint:e{i:05}"), i % 97, i % 5))
            .collect();
        let total_pending: u64 = all.iter().map(|d| d.pending).sum();
        let total_dead: u64 = all.iter().map(|d| d.dead_letters).sum();
        let oldest = all.iter().map(|d| d.oldest_pending_age_ms).max();
        let kept = bound(all, 100);
        assert_eq!(kept.len(), 101);
        let other = kept.last().map(|d| d.destination.as_str());
        assert_eq!(other, Some(OTHER));
        assert_eq!(kept.iter().map(|d| d.pending).sum::<u64>(), total_pending);
        assert_eq!(kept.iter().map(|d| d.dead_letters).sum::<u64>(), total_dead);
        assert_eq!(kept.iter().map(|d| d.oldest_pending_age_ms).max(), oldest);
        // The shown ones are the 100 heaviest.
        let mut weights: Vec<u64> = (0..5_000u64).map(|i| i % 97 + i % 5).collect();
        weights.sort_unstable_by(|a, b| b.cmp(a));
        let lightest_shown = kept[..100].iter().map(DestinationGauges::weight).min();
        assert_eq!(lightest_shown, Some(weights[99]));
        let m = Metrics::default();
        let text = m.render(&GaugeSnapshot {
            destinations: kept,
            ..Default::default()
        });
        let series = text
            .lines()
            .filter(|l| l.starts_with("hookd_pending_messages{"))
            .count();
        assert_eq!(series, 101);
    }

    #[test]
    fn few_destinations_are_all_shown() {
        let kept = bound(vec![dest("a", 1, 0), dest("b", 0, 0)], 100);
        assert_eq!(kept.len(), 2);
    }
}
