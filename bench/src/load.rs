//! Closed-loop load: N tasks, each sending its next call as soon as the last one answered,
//! for a fixed time. Records per-call latency in an HDR histogram.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hookd_proto::v1::{self as pb, hookd_client::HookdClient};
use tonic::transport::Channel;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Shape {
    Unary,
    Batch(usize),
}

#[derive(Debug)]
pub(crate) struct Outcome {
    pub calls: u64,
    pub events: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub latency_us: Histogram<u64>,
}

impl Outcome {
    pub(crate) fn events_per_s(&self) -> f64 {
        self.events as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn p(&self, q: f64) -> f64 {
        self.latency_us.value_at_quantile(q) as f64 / 1000.0
    }
}

fn event(payload: &[u8], n: u64, task: usize) -> pb::EnqueueRequest {
    pb::EnqueueRequest {
        destination: Some(pb::enqueue_request::Destination::Queue("bench".into())),
        payload: payload.to_vec(),
        idempotency_key: format!("t{task}-{n}"),
        ..Default::default()
    }
}

/// Runs `concurrency` tasks over `channels` (round-robin) for `duration`.
pub(crate) async fn run(
    channels: &[Channel],
    concurrency: usize,
    shape: Shape,
    payload: usize,
    duration: Duration,
) -> anyhow::Result<Outcome> {
    run_as(
        channels,
        hookd_client::Credentials::none(),
        concurrency,
        shape,
        payload,
        duration,
    )
    .await
}

/// As [`run`], every call with `credentials` (a bearer token).
pub(crate) async fn run_as(
    channels: &[Channel],
    credentials: hookd_client::Credentials,
    concurrency: usize,
    shape: Shape,
    payload: usize,
    duration: Duration,
) -> anyhow::Result<Outcome> {
    let payload = vec![b'x'; payload];
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for task in 0..concurrency {
        let mut client = HookdClient::with_interceptor(
            channels[task % channels.len()].clone(),
            credentials.clone(),
        )
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
        let payload = payload.clone();
        // Keys must not repeat across legs, or hookd would answer duplicates without storing.
        let prefix = uuid::Uuid::new_v4().simple().to_string();
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
            let (mut calls, mut events, mut errors, mut n) = (0u64, 0u64, 0u64, 0u64);
            while Instant::now() < deadline {
                let sent = Instant::now();
                let ok = match shape {
                    Shape::Unary => {
                        n += 1;
                        let mut e = event(&payload, n, task);
                        e.idempotency_key = format!("{prefix}-{n}");
                        client.enqueue(e).await.map(|_| 1)
                    }
                    Shape::Batch(size) => {
                        let events = (0..size)
                            .map(|_| {
                                n += 1;
                                let mut e = event(&payload, n, task);
                                e.idempotency_key = format!("{prefix}-{n}");
                                e
                            })
                            .collect();
                        client
                            .enqueue_batch(pb::EnqueueBatchRequest { events })
                            .await
                            .map(|r| {
                                let r = r.into_inner().results;
                                r.iter()
                                    .filter(|x| {
                                        matches!(x.result, Some(pb::enqueue_result::Result::Ok(_)))
                                    })
                                    .count() as u64
                            })
                    }
                };
                match ok {
                    Ok(k) => {
                        calls += 1;
                        events += k;
                        hist.saturating_record(sent.elapsed().as_micros() as u64);
                    }
                    Err(_) => errors += 1,
                }
            }
            anyhow::Ok((calls, events, errors, hist))
        }));
    }
    let mut out = Outcome {
        calls: 0,
        events: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latency_us: Histogram::new_with_bounds(1, 60_000_000, 3)?,
    };
    for t in tasks {
        let (calls, events, errors, hist) = t.await??;
        out.calls += calls;
        out.events += events;
        out.errors += errors;
        out.latency_us.add(&hist)?;
    }
    out.elapsed = started.elapsed();
    Ok(out)
}

/// Stores `n` events of `payload` bytes for `destination` as fast as 8 tasks with
/// 1,000-event batches go (spread over `channels`), each with an idempotency key
/// `PREFIX<task>-<n>`; returns how many were stored.
pub(crate) async fn fill(
    channels: &[Channel],
    n: u64,
    payload: usize,
    destination: pb::enqueue_request::Destination,
    prefix: &str,
) -> anyhow::Result<u64> {
    let mut tasks = Vec::new();
    let per_task = n.div_ceil(8);
    for t in 0..8u64 {
        let mut client = HookdClient::new(channels[t as usize % channels.len()].clone());
        let body = vec![b'x'; payload];
        let (destination, prefix) = (destination.clone(), format!("{prefix}{t}"));
        tasks.push(tokio::spawn(async move {
            let mut done = 0u64;
            while done < per_task {
                let k = (per_task - done).min(1_000);
                let events = (0..k)
                    .map(|i| pb::EnqueueRequest {
                        destination: Some(destination.clone()),
                        payload: body.clone(),
                        idempotency_key: format!("{prefix}-{}", done + i),
                        ..Default::default()
                    })
                    .collect();
                client
                    .enqueue_batch(pb::EnqueueBatchRequest { events })
                    .await?;
                done += k;
            }
            anyhow::Ok(done)
        }));
    }
    let mut stored = 0;
    for t in tasks {
        stored += t.await??;
    }
    Ok(stored)
}
