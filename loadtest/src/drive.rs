//! The traffic: who gets each event, the calls that carry them (open or closed loop,
//! unary or batch), and the pull consumers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hookd_proto::v1 as pb;
use hookd_proto::v1::hookd_client::HookdClient;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::dist::Sampler;
use crate::scenario::{QueueGroup, Shape};
use crate::schedule::{Call, open_loop};
use crate::tally::{Enqueue, Tally, encode};

/// A gRPC call that has not answered after this is given up (its events become
/// indeterminate).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Where events go: every endpoint instance and every queue, with cumulative weights.
#[derive(Debug, Clone)]
pub struct Targets {
    names: Vec<Destination>,
    cumulative: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Destination {
    Endpoint(String),
    Queue(String),
}

impl Targets {
    /// `endpoints`: per group, its instance names and weight; `queues`: name and weight.
    pub fn new(endpoints: &[(Vec<String>, f64)], queues: &[(String, f64)]) -> Self {
        let mut names = Vec::new();
        let mut cumulative = Vec::new();
        let mut sum = 0.0;
        for (instances, weight) in endpoints {
            let each = weight / instances.len().max(1) as f64;
            for name in instances {
                sum += each;
                names.push(Destination::Endpoint(name.clone()));
                cumulative.push(sum);
            }
        }
        for (name, weight) in queues {
            sum += weight;
            names.push(Destination::Queue(name.clone()));
            cumulative.push(sum);
        }
        Self { names, cumulative }
    }

    pub fn pick(&self, rng: &mut StdRng) -> &Destination {
        let total = self.cumulative.last().copied().unwrap_or(0.0);
        let u = rng.random::<f64>() * total;
        let i = self.cumulative.partition_point(|c| *c <= u);
        &self.names[i.min(self.names.len() - 1)]
    }
}

/// How the calls are made.
#[derive(Debug, Clone)]
pub struct Sender {
    pub clients: Vec<HookdClient<Channel>>,
    pub targets: Arc<Targets>,
    pub tally: Arc<Tally>,
    pub batch: usize,
    pub payload_bytes: usize,
    pub seed: u64,
    /// Prefix of idempotency keys, unique per run.
    pub run_id: String,
    /// `[ingest]` scenarios: events go as signed webhooks instead of Enqueue calls.
    pub inbound: Option<Arc<crate::inbound::Inbound>>,
    /// `[agent]` scenarios: events are handed to these Emitters (call `i` to `i % n`).
    pub agents: Vec<hookd_client::Emitter>,
    /// `[fanout]` scenarios: every event is published to this plan's topic.
    pub fanout: Option<Arc<FanoutPlan>>,
    /// `[ordered]` scenarios: each event's ordering key is one of this many (0: none).
    pub ordering_keys: u64,
}

/// What a `[fanout]` run publishes to, and its subscribers in slot order (whether each is
/// an endpoint).
#[derive(Debug, Clone)]
pub struct FanoutPlan {
    pub topic: String,
    pub push: Vec<bool>,
}

/// A definite refusal (nothing stored) or an open outcome.
fn failure(code: tonic::Code) -> Enqueue {
    use tonic::Code::*;
    match code {
        InvalidArgument | NotFound | AlreadyExists | PermissionDenied | ResourceExhausted
        | FailedPrecondition | OutOfRange | Unimplemented | Unauthenticated => Enqueue::Rejected,
        _ => Enqueue::Indeterminate,
    }
}

fn failure_of(code: i32) -> Enqueue {
    failure(tonic::Code::from_i32(code))
}

/// Sends `events` in one call (Enqueue for one, EnqueueBatch for more): per event, hookd's
/// answer or the kind of failure (a short batch answer leaves the missing events' fate
/// open).
async fn send(
    client: &mut HookdClient<Channel>,
    events: Vec<pb::EnqueueRequest>,
) -> Vec<Result<pb::EnqueueResponse, Enqueue>> {
    let n = events.len();
    if n == 1 {
        let Some(event) = events.into_iter().next() else {
            return Vec::new();
        };
        return match tokio::time::timeout(CALL_TIMEOUT, client.enqueue(event)).await {
            Ok(Ok(r)) => vec![Ok(r.into_inner())],
            Ok(Err(status)) => vec![Err(failure(status.code()))],
            Err(_) => vec![Err(Enqueue::Indeterminate)],
        };
    }
    let request = pb::EnqueueBatchRequest { events };
    match tokio::time::timeout(CALL_TIMEOUT, client.enqueue_batch(request)).await {
        Ok(Ok(r)) => {
            let results = r.into_inner().results;
            (0..n)
                .map(|i| match results.get(i).and_then(|r| r.result.as_ref()) {
                    Some(pb::enqueue_result::Result::Ok(ok)) => Ok(ok.clone()),
                    Some(pb::enqueue_result::Result::Error(e)) => Err(failure_of(e.code)),
                    None => Err(Enqueue::Indeterminate),
                })
                .collect()
        }
        Ok(Err(status)) => vec![Err(failure(status.code())); n],
        Err(_) => vec![Err(Enqueue::Indeterminate); n],
    }
}

impl Sender {
    /// `[ordered]`: event `seq`'s ordering key, round robin over the run's keys (named by
    /// the run, so that a hookd reused across runs starts each key's numbers at 1).
    fn ordering_key(&self, seq: u64) -> String {
        match self.ordering_keys {
            0 => String::new(),
            n => format!("{}-k{}", self.run_id, seq % n),
        }
    }

    /// Sends call number `index` (its events and their payloads), records the outcome.
    pub async fn call(&self, index: u64, intended: Instant) {
        if let Some(inbound) = &self.inbound {
            return self.post(inbound, index, intended).await;
        }
        if let Some(plan) = &self.fanout {
            return self.publish(plan, index, intended).await;
        }
        let n = self.batch;
        let first = self.tally.issue(n);
        let intended_ns = self.tally.ns_since_start(intended);
        let mut rng = StdRng::seed_from_u64(self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut push = Vec::with_capacity(n);
        let events: Vec<pb::EnqueueRequest> = (0..n as u64)
            .map(|i| {
                let seq = first + i;
                let picked = self.targets.pick(&mut rng);
                push.push(matches!(picked, Destination::Endpoint(_)));
                let destination = match picked {
                    Destination::Endpoint(name) => {
                        pb::enqueue_request::Destination::Endpoint(name.clone())
                    }
                    Destination::Queue(name) => {
                        pb::enqueue_request::Destination::Queue(name.clone())
                    }
                };
                pb::EnqueueRequest {
                    destination: Some(destination),
                    payload: encode(seq, intended_ns, self.payload_bytes),
                    idempotency_key: format!("{}-{seq}", self.run_id),
                    event_type: "loadtest".into(),
                    ordering_key: self.ordering_key(seq),
                    ..Default::default()
                }
            })
            .collect();
        let mut client = self.clients[index as usize % self.clients.len()].clone();
        let sent = Instant::now();
        let outcomes: Vec<Result<String, Enqueue>> = if !self.agents.is_empty() {
            // What the agent is told: taken (its Emitter now owes it to hookd, so the
            // checker requires its delivery) or refused (buffer full: nothing is sent).
            let agent = &self.agents[index as usize % self.agents.len()];
            let mut out = Vec::with_capacity(n);
            for event in events {
                out.push(match agent.emit(hookd_client::Event::from_request(event)) {
                    Ok(()) => Ok(String::new()),
                    Err(_) => Err(Enqueue::Rejected),
                });
            }
            out
        } else {
            send(&mut client, events)
                .await
                .into_iter()
                .map(|r| r.map(|ok| ok.id))
                .collect()
        };
        self.tally
            .answered(first, outcomes.into_iter().zip(push), intended, sent);
    }

    /// `[fanout]`: the call's events published to the plan's topic; each takes one tally
    /// entry per subscriber, given the delivery id hookd answers for it.
    async fn publish(&self, plan: &FanoutPlan, index: u64, intended: Instant) {
        let (n, slots) = (self.batch, plan.push.len());
        let first = self.tally.issue(n * slots);
        let intended_ns = self.tally.ns_since_start(intended);
        let events: Vec<pb::EnqueueRequest> = (0..n as u64)
            .map(|i| {
                let seq = first + i * slots as u64;
                pb::EnqueueRequest {
                    destination: Some(pb::enqueue_request::Destination::Topic(plan.topic.clone())),
                    payload: encode(seq, intended_ns, self.payload_bytes),
                    idempotency_key: format!("{}-{seq}", self.run_id),
                    ordering_key: self.ordering_key(seq),
                    ..Default::default()
                }
            })
            .collect();
        let mut client = self.clients[index as usize % self.clients.len()].clone();
        let sent = Instant::now();
        let answers = send(&mut client, events).await;
        // One outcome per slot: hookd's delivery id for it (an answer with fewer leaves
        // an empty id, which the checker reports as lost).
        let outcomes = answers.into_iter().flat_map(|answer| {
            (0..slots).map(move |slot| {
                let outcome = match &answer {
                    Ok(r) => Ok(r.delivery_ids.get(slot).cloned().unwrap_or_default()),
                    Err(kind) => Err(*kind),
                };
                (outcome, plan.push[slot])
            })
        });
        self.tally.answered(first, outcomes, intended, sent);
    }

    /// One event as a provider's webhook (batch is 1 in `[ingest]` scenarios).
    async fn post(&self, inbound: &crate::inbound::Inbound, index: u64, intended: Instant) {
        let seq = self.tally.issue(1);
        let intended_ns = self.tally.ns_since_start(intended);
        let mut rng = StdRng::seed_from_u64(self.seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let queue = match self.targets.pick(&mut rng) {
            Destination::Queue(name) | Destination::Endpoint(name) => name.clone(),
        };
        let draw = (rng.random::<f64>(), rng.random::<f64>());
        let sent = Instant::now();
        let outcome = inbound
            .deliver(
                index,
                &queue,
                &format!("{}-{seq}", self.run_id),
                encode(seq, intended_ns, self.payload_bytes),
                draw,
            )
            .await;
        self.tally.answered(seq, [(outcome, false)], intended, sent);
    }

    /// Open loop at the times `shape` gives.
    pub async fn open(&self, shape: &Shape, run: Duration, max_outstanding: usize) -> u64 {
        open_loop(shape, self.batch, run, max_outstanding, |call: Call| {
            let me = self.clone();
            async move { me.call(call.index, call.intended).await }
        })
        .await
    }

    /// Closed loop: `concurrency` callers, each sending as soon as its last call answered.
    pub async fn closed(&self, concurrency: usize, run: Duration) -> u64 {
        let end = Instant::now() + run;
        let next = Arc::new(AtomicU64::new(0));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let (me, next) = (self.clone(), next.clone());
            tasks.spawn(async move {
                while Instant::now() < end {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    // In a closed loop the call is intended when it is sent.
                    me.call(index, Instant::now()).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        next.load(Ordering::Relaxed)
    }
}

/// What one queue's consumers did.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct QueueCounts {
    pub name: String,
    pub received: u64,
    pub acked: u64,
    pub nacked: u64,
    /// Acks refused (the lease had expired: the message will come again).
    pub ack_failed: u64,
    pub duplicates: u64,
    /// End to end (intended send time to the accepted Ack) of this queue's events.
    pub e2e_p50_ms: f64,
    pub e2e_p99_ms: f64,
}

#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    acked: AtomicU64,
    nacked: AtomicU64,
    ack_failed: AtomicU64,
    duplicates: AtomicU64,
    e2e: crate::tally::GroupLatency,
}

/// The pull consumers of every queue.
#[derive(Debug)]
pub struct Consumers {
    stop: Arc<AtomicBool>,
    tasks: tokio::task::JoinSet<()>,
    counts: Vec<(String, Arc<Counters>)>,
}

impl Consumers {
    /// `queues`: each group with its name in hookd.
    pub fn start(
        queues: &[(QueueGroup, String)],
        clients: &[HookdClient<Channel>],
        tally: &Arc<Tally>,
        seed: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = tokio::task::JoinSet::new();
        let mut counts = Vec::new();
        let mut n = 0u64;
        for (group, name) in queues {
            let counters = Arc::new(Counters::default());
            counts.push((group.name.clone(), counters.clone()));
            for _ in 0..group.workers {
                n += 1;
                let worker = Worker {
                    client: clients[n as usize % clients.len()].clone(),
                    queue: name.clone(),
                    group: group.clone(),
                    processing: Sampler::new(&group.processing),
                    tally: tally.clone(),
                    counters: counters.clone(),
                    stop: stop.clone(),
                    rng: StdRng::seed_from_u64(seed.wrapping_add(n)),
                };
                tasks.spawn(worker.run());
            }
        }
        Self {
            stop,
            tasks,
            counts,
        }
    }

    pub fn counts(&self) -> Vec<QueueCounts> {
        self.counts
            .iter()
            .map(|(name, c)| {
                let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
                let (e2e_p50_ms, e2e_p99_ms) = c.e2e.p50_p99_ms();
                QueueCounts {
                    e2e_p50_ms,
                    e2e_p99_ms,
                    name: name.clone(),
                    received: l(&c.received),
                    acked: l(&c.acked),
                    nacked: l(&c.nacked),
                    ack_failed: l(&c.ack_failed),
                    duplicates: l(&c.duplicates),
                }
            })
            .collect()
    }

    /// Lets every worker finish its current message, then stops them (a worker in a long
    /// poll is cut off after at most 2 s).
    pub async fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(2), all)
            .await
            .is_err()
        {
            self.tasks.abort_all();
        }
    }
}

struct Worker {
    client: HookdClient<Channel>,
    queue: String,
    group: QueueGroup,
    processing: Sampler,
    tally: Arc<Tally>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    rng: StdRng,
}

impl Worker {
    async fn run(mut self) {
        while !self.stop.load(Ordering::Relaxed) {
            let request = pb::ReceiveRequest {
                queue: self.queue.clone(),
                max_messages: self.group.batch,
                visibility_timeout_ms: self.group.visibility.as_millis() as u64,
                wait_ms: 1_000,
            };
            let messages = match self.client.receive(request).await {
                Ok(r) => r.into_inner().messages,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            for m in messages {
                self.counters.received.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(self.processing.sample(&mut self.rng)).await;
                if self.rng.random::<f64>() < self.group.nack_rate {
                    let request = pb::NackRequest {
                        lease_id: m.lease_id,
                        delay_ms: self.group.nack_delay.map_or(0, |d| d.as_millis() as u64),
                        reason: "simulated failure".into(),
                    };
                    if self.client.nack(request).await.is_ok() {
                        self.counters.nacked.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
                let request = pb::AckRequest {
                    lease_ids: vec![m.lease_id],
                };
                match self.client.ack(request).await {
                    Ok(_) => {
                        self.counters.acked.fetch_add(1, Ordering::Relaxed);
                        let receiver = crate::tally::receiver(None, &self.queue);
                        if m.sequence > 0 {
                            self.tally.in_lane(&receiver, &m.ordering_key, m.sequence);
                        }
                        if self
                            .counters
                            .e2e
                            .delivered(self.tally.delivered_at(&m.payload, &receiver))
                        {
                            self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(_) => {
                        self.counters.ack_failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_follow_their_weights() {
        let t = Targets::new(
            &[(vec!["a0".into(), "a1".into()], 3.0)],
            &[("q".into(), 1.0)],
        );
        let mut rng = StdRng::seed_from_u64(1);
        let mut hits = [0u32; 3];
        for _ in 0..40_000 {
            let i = match t.pick(&mut rng) {
                Destination::Endpoint(n) if n == "a0" => 0,
                Destination::Endpoint(_) => 1,
                Destination::Queue(_) => 2,
            };
            hits[i] += 1;
        }
        // 37.5 % / 37.5 % / 25 %.
        for (h, want) in hits.iter().zip([15_000.0, 15_000.0, 10_000.0]) {
            assert!((f64::from(*h) - want).abs() < want * 0.05, "{hits:?}");
        }
    }
}
