//! The engine in a test's hands: no thread, no network, no real time.
//!
//! A [`Harness`] owns an [`Engine`] on a temporary redb file and a [`ManualClock`], and
//! runs its rounds itself (the way tokio tests its time driver in-process): each call
//! sends one command through a round and reads the answer the round gave, so every
//! assertion is about the state right after that round. Push attempts are read straight
//! from the channel the dispatcher would read; their outcomes are fed back as reports.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{
    Command, Engine, EngineConfig, Enqueued, Leased, NackOutcome, NewMessage, PutOutcome, Refusal,
};
use hookd_core::breaker::BreakerConfig;
use hookd_core::clock::{Clock, ManualClock};
use hookd_core::destination::Destination;
use hookd_core::ids::{LeaseId, MessageId};
use hookd_core::push::{AttemptReport, Delivery, Verdict};
use hookd_core::retry::RetryPolicy;
use hookd_core::scope::TenantId;
use hookd_core::stats::{DestinationSnapshot, StatsSnapshot};
use hookd_storage::store::faults::Faults;
use hookd_storage::store::{
    DoneRecord, EndpointRecord, MessageRecord, State, Storage, StoredMessage,
};

/// Where the harness clock starts (2023-11-14).
pub(crate) const START_MS: u64 = 1_700_000_000_000;

pub(crate) struct Harness {
    pub engine: Engine,
    pub clock: ManualClock,
    deliveries: mpsc::UnboundedReceiver<Vec<Delivery>>,
    pub faults: Faults,
    _dir: tempfile::TempDir,
}

/// The harness's settings: 3 attempts, backoff from 100 ms to 1 s, a breaker that opens
/// after 3 failures for 10 s, completed messages and idempotency keys kept 24 h.
pub(crate) fn config() -> EngineConfig {
    let push = super::PushDefaults {
        breaker: BreakerConfig {
            failure_threshold: 3,
            slow_failure_threshold: 2,
            cooldown_ms: 10_000,
            max_cooldown_ms: 40_000,
        },
        ..Default::default()
    };
    EngineConfig {
        retry: RetryPolicy {
            max_attempts: 3,
            base_ms: 100,
            cap_ms: 1_000,
        },
        push,
        max_queued_write_bytes: 64 << 20,
        idempotency_retention_ms: 24 * 3_600_000,
        completed_retention_ms: 24 * 3_600_000,
        fifo_lane_retention_ms: 7 * 24 * 3_600_000,
        dead_letter_retention_ms: 14 * 24 * 3_600_000,
        events: Default::default(),
        alerts: Default::default(),
        sealer: None,
        max_commit_batch: 8_192,
        checkpoint_interval_ms: 10_000,
        metrics: Default::default(),
        checkpoint_log_bytes: 64 << 20,
        log_retention: hookd_storage::pipeline::Retention {
            ms: 24 * 3_600_000,
            bytes: 1 << 30,
        },
        rng_seed: Some(1),
        backpressure: Default::default(),
        headroom: std::sync::Arc::new(hookd_storage::disk::Headroom::unlimited()),
        // FIFO queues for the lane tests; every other queue is unordered.
        fifo_queues: [
            ("fifo-block".to_owned(), super::FifoPolicy::Block),
            ("fifo-park".to_owned(), super::FifoPolicy::Park),
        ]
        .into(),
    }
}

impl Harness {
    pub(crate) fn new() -> Self {
        Self::with(config())
    }

    pub(crate) fn with(config: EngineConfig) -> Self {
        Self::with_segments(config, hookd_storage::store::DEFAULT_SEGMENT_BYTES)
    }

    /// With log segments of about `segment_bytes` (tests of the log as the message heap).
    pub(crate) fn with_segments(config: EngineConfig, segment_bytes: u64) -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        Self::on(dir, config, segment_bytes, ManualClock::new(START_MS))
    }

    /// The same data directory opened again by a new engine (with the default settings),
    /// at the same time, as after a kill: nothing is stopped first, so what the new engine
    /// holds is what the log and redb hold.
    pub(crate) fn restarted(self) -> Self {
        let Self {
            engine,
            clock,
            _dir,
            ..
        } = self;
        drop(engine);
        Self::on(
            _dir,
            config(),
            hookd_storage::store::DEFAULT_SEGMENT_BYTES,
            clock,
        )
    }

    fn on(
        dir: tempfile::TempDir,
        config: EngineConfig,
        segment_bytes: u64,
        clock: ManualClock,
    ) -> Self {
        let faults = Faults::default();
        let storage = Storage::open_faulty(
            dir.path(),
            hookd_storage::store::DEFAULT_CACHE_BYTES,
            segment_bytes,
            faults.clone(),
        )
        .expect("a store");
        let (tx, deliveries) = mpsc::unbounded_channel();
        let syncer = hookd_storage::pipeline::Syncer::inline(
            storage.log,
            storage.store.clone(),
            Arc::new(clock.clone()),
            hookd_storage::pipeline::StageConfig {
                interval_ms: config.checkpoint_interval_ms,
                log_bytes: config.checkpoint_log_bytes,
                retention: config.log_retention,
                history_ms: config.history_ms(),
                metrics: config.metrics.clone(),
            },
        );
        let engine = Engine::recover(
            storage.store,
            syncer,
            storage.replayed,
            config,
            Arc::new(clock.clone()),
            Some(tx),
        )
        .expect("the engine recovers an empty store");
        Self {
            engine,
            clock,
            deliveries,
            faults,
            _dir: dir,
        }
    }

    /// The data directory (redb's file and the log's segments).
    pub(crate) fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Runs one round with `command` and returns the answer that round gave.
    pub(crate) fn call<T>(&mut self, make: impl FnOnce(oneshot::Sender<T>) -> Command) -> T {
        let (tx, mut rx) = oneshot::channel();
        self.engine.round(vec![make(tx)]);
        rx.try_recv()
            .expect("every command is answered in its own round")
    }

    /// Moves the clock and runs a round (what the engine thread does when it wakes).
    pub(crate) fn advance(&mut self, ms: u64) {
        self.clock.advance(ms);
        self.engine.round(Vec::new());
    }

    pub(crate) fn message(&self, destination: Destination, payload: &[u8]) -> NewMessage {
        let now = self.now();
        let record = MessageRecord {
            payload: payload.to_vec(),
            created_ms: now,
            ..Default::default()
        };
        NewMessage::from_record(MessageId::generate(now), destination, record, 0, 0)
    }

    pub(crate) fn enqueue_message(&mut self, m: NewMessage) -> Result<Enqueued, Refusal> {
        let mut results = self.call(|reply| Command::Enqueue {
            messages: vec![m],
            bytes: 0,
            reply,
        });
        results.pop().expect("one result per message")
    }

    /// Enqueues to a pull queue; panics if refused.
    pub(crate) fn enqueue(&mut self, queue: &str, payload: &[u8]) -> MessageId {
        let m = self.message(Destination::queue(TenantId::DEFAULT, queue), payload);
        self.enqueue_message(m).expect("enqueued").id
    }

    pub(crate) fn enqueue_to_endpoint(&mut self, name: &str, payload: &[u8]) -> MessageId {
        let m = self.message(Destination::endpoint(TenantId::DEFAULT, name), payload);
        self.enqueue_message(m).expect("enqueued").id
    }

    pub(crate) fn receive(&mut self, queue: &str, max: usize, visibility_ms: u64) -> Vec<Leased> {
        self.call(|reply| Command::Receive {
            queue: Destination::queue(TenantId::DEFAULT, queue),
            max,
            visibility_ms,
            wait_ms: 0,
            reply,
        })
        .expect("receive")
    }

    /// A long poll: sent in a round of its own; the answer may come in a later one.
    pub(crate) fn receive_waiting(
        &mut self,
        queue: &str,
        wait_ms: u64,
    ) -> oneshot::Receiver<Result<Vec<Leased>, Refusal>> {
        let (reply, rx) = oneshot::channel();
        self.engine.round(vec![Command::Receive {
            queue: Destination::queue(TenantId::DEFAULT, queue),
            max: 10,
            visibility_ms: 30_000,
            wait_ms,
            reply,
        }]);
        rx
    }

    pub(crate) fn ack(&mut self, leases: &[LeaseId]) -> Result<u32, Refusal> {
        self.call(|reply| Command::Ack {
            tenant: TenantId::DEFAULT,
            leases: leases.to_vec(),
            reply,
        })
    }

    pub(crate) fn nack(&mut self, lease: LeaseId, delay_ms: u64) -> Result<NackOutcome, Refusal> {
        self.call(|reply| Command::Nack {
            tenant: TenantId::DEFAULT,
            lease,
            delay_ms,
            reason: String::new(),
            reply,
        })
    }

    pub(crate) fn replay(
        &mut self,
        ids: Vec<MessageId>,
        destination: Option<Destination>,
    ) -> Result<u32, Refusal> {
        self.replay_paced(ids, destination, 0.0).map(|r| r.replayed)
    }

    /// A replay whose messages become due `per_s` a second (0: at once).
    pub(crate) fn replay_paced(
        &mut self,
        ids: Vec<MessageId>,
        destination: Option<Destination>,
        per_s: f64,
    ) -> Result<super::ReplayOutcome, Refusal> {
        let request = super::ReplayRequest {
            tenant: TenantId::DEFAULT,
            ids,
            destination,
            limit: 1_000,
            strict: true,
            per_s,
        };
        self.call(|reply| Command::Replay { request, reply })
    }

    /// Deletes the dead letters among `ids`; how many.
    pub(crate) fn purge(&mut self, ids: Vec<MessageId>) -> u32 {
        self.call(|reply| Command::Purge {
            tenant: TenantId::DEFAULT,
            ids,
            reply,
        })
        .expect("purge")
    }

    /// Pauses (`Some(reason)`) or resumes an endpoint.
    pub(crate) fn pause(
        &mut self,
        name: &str,
        pause: Option<&str>,
    ) -> Result<EndpointRecord, Refusal> {
        self.call(|reply| Command::Pause {
            tenant: TenantId::DEFAULT,
            name: name.into(),
            pause: pause.map(str::to_owned),
            reply,
        })
    }

    pub(crate) fn put_endpoint(&mut self, endpoint: EndpointRecord) -> PutOutcome {
        self.call(|reply| Command::PutEndpoint {
            tenant: TenantId::DEFAULT,
            endpoint: Box::new(endpoint),
            reply,
        })
        .expect("endpoint stored")
    }

    /// An endpoint that takes `max_in_flight` attempts at once.
    pub(crate) fn endpoint(&mut self, name: &str, max_in_flight: u32) {
        self.put_endpoint(EndpointRecord {
            name: name.into(),
            url: format!("https://{name}.example/hook"),
            max_in_flight,
            ..Default::default()
        });
    }

    /// The attempts handed to the dispatcher since the last call.
    pub(crate) fn sent(&mut self) -> Vec<Delivery> {
        let mut out = Vec::new();
        while let Ok(batch) = self.deliveries.try_recv() {
            out.extend(batch);
        }
        out
    }

    /// Reports how an attempt ended, as the dispatcher would, and runs its round.
    pub(crate) fn report(&mut self, d: &Delivery, verdict: Verdict) {
        self.report_all(std::slice::from_ref(d), verdict);
    }

    /// Reports every attempt with the same outcome, in one round.
    pub(crate) fn report_all(&mut self, sent: &[Delivery], verdict: Verdict) {
        let reports = sent
            .iter()
            .map(|d| {
                Command::Attempted(AttemptReport {
                    id: d.id,
                    attempt: d.attempt,
                    verdict: verdict.clone(),
                    latency_us: 2_000,
                })
            })
            .collect();
        self.engine.round(reports);
    }

    pub(crate) fn stats(&mut self) -> StatsSnapshot {
        self.call(|reply| Command::Stats {
            tenant: None,
            after: None,
            limit: usize::MAX,
            whole: true,
            reply,
        })
        .expect("stats")
    }

    /// A metrics scrape's destinations, read as the handle reads them: in slices of
    /// `chunk`, merged.
    pub(crate) fn gauges(
        &mut self,
        max: usize,
        chunk: usize,
    ) -> Vec<hookd_metrics::DestinationGauges> {
        let mut tally = hookd_metrics::GaugeTally::new(max);
        let mut after = None;
        loop {
            let part = self
                .call(|reply| Command::Gauges {
                    after: after.take(),
                    max,
                    chunk,
                    reply,
                })
                .expect("gauges");
            tally.add(part.top, part.other);
            match part.next {
                Some(next) => after = Some(next),
                None => {
                    assert!(part.tail.is_some(), "the last slice carries the totals");
                    return tally.finish();
                }
            }
        }
    }

    /// One destination's figures (all zero if it does not exist).
    pub(crate) fn dest(&mut self, key: &str) -> DestinationSnapshot {
        self.stats()
            .destinations
            .into_iter()
            .find(|d| d.destination == key)
            .unwrap_or_default()
    }

    /// What the store holds of a live or dead message.
    pub(crate) fn stored(&self, id: MessageId) -> Option<StoredMessage> {
        self.engine.store.message(id).expect("a read")
    }

    pub(crate) fn state(&self, id: MessageId) -> Option<State> {
        self.stored(id).map(|m| m.entry.state)
    }

    pub(crate) fn done(&self, id: MessageId) -> Option<DoneRecord> {
        self.engine.store.done(id).expect("a read")
    }

    /// The outcomes in a message's history, oldest first.
    pub(crate) fn outcomes(&self, id: MessageId) -> Vec<String> {
        let history = match self.stored(id) {
            Some(m) => m.history,
            None => self.done(id).and_then(|d| d.history).unwrap_or_default(),
        };
        history.attempts.into_iter().map(|a| a.outcome).collect()
    }
}
