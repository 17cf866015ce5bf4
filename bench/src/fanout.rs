//! The fan-out leg (issue #29, point 6): one event published to N subscribers against N
//! single-destination events in one EnqueueBatch, both to the same N pull queues (nothing
//! is delivered meanwhile: this measures what storing costs), closed loop with a few calls
//! in flight; and the log bytes each writes per delivery.

use std::time::{Duration, Instant};

use hookd_proto::v1::{self as pb, hookd_client::HookdClient};
use tonic::transport::Channel;

/// The topic every subscription takes.
const TOPIC: &str = "bench.fanout";

/// Most deliveries one leg stores: nothing is consumed, so a leg must stop below hookd's
/// default hard mark of live messages (`backpressure.max_messages`, 2,000,000) and its soft
/// mark (80 %: throttle hints), or it would measure backpressure instead of storing.
pub(crate) const MAX_DELIVERIES: u64 = 1_500_000;

/// One measured shape.
#[derive(Debug)]
pub(crate) struct Leg {
    pub calls: u64,
    pub deliveries: u64,
    pub elapsed: Duration,
    /// Log bytes written per delivery stored.
    pub log_bytes_per_delivery: f64,
}

impl Leg {
    pub(crate) fn deliveries_per_s(&self) -> f64 {
        self.deliveries as f64 / self.elapsed.as_secs_f64()
    }
}

fn queue(i: usize) -> String {
    format!("fan-{i:04}")
}

/// N subscriptions, each of its own queue, to [`TOPIC`].
pub(crate) async fn subscribe(ch: &Channel, n: usize) -> anyhow::Result<()> {
    let mut client = HookdClient::new(ch.clone());
    for i in 0..n {
        client
            .put_subscription(pb::PutSubscriptionRequest {
                subscription: Some(pb::Subscription {
                    name: queue(i),
                    destination: Some(pb::subscription::Destination::Queue(queue(i))),
                    event_types: vec![TOPIC.into()],
                    ..Default::default()
                }),
            })
            .await?;
    }
    Ok(())
}

async fn log_bytes(ch: &Channel) -> anyhow::Result<u64> {
    let stats = hookd_client::Client::from_channel(ch.clone())
        .stats()
        .await?;
    Ok(stats.storage.map_or(0, |s| s.log_bytes))
}

/// `concurrency` tasks for `duration` or until [`MAX_DELIVERIES`] are stored, each either
/// publishing one event to [`TOPIC`] (N subscribers) or sending N events, one per queue,
/// in one EnqueueBatch.
pub(crate) async fn run(
    ch: &Channel,
    n: usize,
    publish: bool,
    payload: usize,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Leg> {
    let before = log_bytes(ch).await?;
    let body = vec![b'x'; payload];
    let started = Instant::now();
    let deadline = started + duration;
    // Each call's deliveries are claimed before it is sent, so the leg never passes the
    // bound by more than the calls in flight.
    let claimed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let mut client = HookdClient::new(ch.clone());
        let body = body.clone();
        let claimed = claimed.clone();
        tasks.push(tokio::spawn(async move {
            let (mut calls, mut deliveries) = (0u64, 0u64);
            while Instant::now() < deadline
                && claimed.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed) + n as u64
                    <= MAX_DELIVERIES
            {
                if publish {
                    let r = client
                        .enqueue(pb::EnqueueRequest {
                            destination: Some(pb::enqueue_request::Destination::Topic(
                                TOPIC.into(),
                            )),
                            payload: body.clone(),
                            ..Default::default()
                        })
                        .await?
                        .into_inner();
                    deliveries += u64::from(r.subscribers);
                } else {
                    let events = (0..n)
                        .map(|i| pb::EnqueueRequest {
                            destination: Some(pb::enqueue_request::Destination::Queue(queue(i))),
                            payload: body.clone(),
                            event_type: TOPIC.into(),
                            ..Default::default()
                        })
                        .collect();
                    let r = client
                        .enqueue_batch(pb::EnqueueBatchRequest { events })
                        .await?
                        .into_inner();
                    deliveries += r
                        .results
                        .iter()
                        .filter(|r| matches!(r.result, Some(pb::enqueue_result::Result::Ok(_))))
                        .count() as u64;
                }
                calls += 1;
            }
            Ok::<_, anyhow::Error>((calls, deliveries))
        }));
    }
    let (mut calls, mut deliveries) = (0, 0);
    for t in tasks {
        let (c, d) = t.await??;
        calls += c;
        deliveries += d;
    }
    let elapsed = started.elapsed();
    let written = log_bytes(ch).await?.saturating_sub(before);
    Ok(Leg {
        calls,
        deliveries,
        elapsed,
        log_bytes_per_delivery: written as f64 / deliveries.max(1) as f64,
    })
}
