//! Push delivery measurements: hookd's end-to-end deliveries per second to a loopback HTTP
//! sink next to a bare hyper client posting to the same sink, and the isolation run (some
//! endpoints hanging until their timeout while the others keep their rate and latency).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hookd_proto::v1::{self as pb, hookd_client::HookdClient};
use hookd_testkit::Reply;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tonic::transport::Channel;

/// An HTTP/1.1 receiver on loopback (the test kit's) that answers 200 at once, or never
/// (`hang`), and counts without keeping the requests.
pub(crate) type Sink = hookd_testkit::Receiver;

pub(crate) async fn sink(hang: bool) -> anyhow::Result<Sink> {
    let reply = if hang {
        Reply::Hang
    } else {
        Reply::Status(200)
    };
    Ok(Sink::start(reply).await?.without_recording())
}

const PATH: &str = "/hook";

/// The baseline: `concurrency` tasks posting `payload` bytes to the sink, closed loop, over
/// one keep-alive pool. Returns requests per second.
pub(crate) async fn bare_hyper(
    sink: &Sink,
    concurrency: usize,
    payload: usize,
    leg: Duration,
) -> anyhow::Result<f64> {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(concurrency)
        .build({
            let mut c = hyper_util::client::legacy::connect::HttpConnector::new();
            c.set_nodelay(true);
            c
        });
    let body = Bytes::from(vec![b'x'; payload]);
    let url: hyper::Uri = sink.url(PATH).parse()?;
    let started = Instant::now();
    let deadline = started + leg;
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (client, body, url) = (client.clone(), body.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let req = hyper::Request::post(url.clone())
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))?;
                let resp = client.request(req).await?;
                let _ = resp.into_body().collect().await?;
                n += 1;
            }
            anyhow::Ok(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

fn events(endpoint: &str, n: usize, payload: &[u8]) -> pb::EnqueueBatchRequest {
    pb::EnqueueBatchRequest {
        events: (0..n)
            .map(|_| pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Endpoint(
                    endpoint.to_owned(),
                )),
                payload: payload.to_vec(),
                ..Default::default()
            })
            .collect(),
    }
}

pub(crate) struct Throughput {
    pub delivered_per_s: f64,
    pub enqueued_per_s: f64,
    pub backlog: u64,
}

/// hookd end to end: closed-loop EnqueueBatch (`batch_concurrency` x `batch` events) to
/// one endpoint (`max_in_flight` attempts at once, 0 = hookd's default) on the sink while
/// hookd delivers; deliveries counted at the sink over the
/// leg, after a warm-up second.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn hookd_end_to_end(
    ch: &Channel,
    sink: &Sink,
    max_in_flight: u32,
    batch_concurrency: usize,
    batch: usize,
    payload: usize,
    leg: Duration,
) -> anyhow::Result<Throughput> {
    let mut client = HookdClient::new(ch.clone());
    client
        .put_endpoint(pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: "bench".into(),
                url: sink.url(PATH),
                max_in_flight,
                ..Default::default()
            }),
        })
        .await?;
    let payload = vec![b'x'; payload];
    let warmup = Duration::from_secs(1);
    let stop_at = Instant::now() + warmup + leg;
    let enqueued = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..batch_concurrency {
        let mut client = HookdClient::new(ch.clone());
        let payload = payload.clone();
        let enqueued = enqueued.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                let r = client.enqueue_batch(events("bench", batch, &payload)).await;
                if r.is_ok() {
                    enqueued.fetch_add(batch as u64, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(warmup).await;
    let (d0, e0, t0) = (
        sink.count(),
        enqueued.load(Ordering::Relaxed),
        Instant::now(),
    );
    tokio::time::sleep(leg).await;
    let (d1, e1, elapsed) = (sink.count(), enqueued.load(Ordering::Relaxed), t0.elapsed());
    for t in tasks {
        t.await?;
    }
    let stats = hookd_client::all_stats(&mut client).await?;
    let total = stats.total.unwrap_or_default();
    Ok(Throughput {
        delivered_per_s: (d1 - d0) as f64 / elapsed.as_secs_f64(),
        enqueued_per_s: (e1 - e0) as f64 / elapsed.as_secs_f64(),
        backlog: total.pending + total.awaiting_retry + total.in_flight,
    })
}

/// hookd draining a backlog: `n` events are stored for a paused endpoint, then it is
/// resumed and the time until the sink has them all is taken.
/// Every delivery's completion is committed (the message removed) as part of the run.
pub(crate) async fn hookd_drain(
    ch: &Channel,
    sink: &Sink,
    n: usize,
    payload: usize,
    timeout: Duration,
) -> anyhow::Result<(f64, pb::StatsResponse)> {
    let mut client = HookdClient::new(ch.clone())
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    client
        .put_endpoint(pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: "drain".into(),
                url: sink.url(PATH),
                ..Default::default()
            }),
        })
        .await?;
    client
        .pause_endpoint(pb::PauseEndpointRequest {
            name: "drain".into(),
            reason: "filling the backlog".into(),
        })
        .await?;
    let payload = vec![b'x'; payload];
    let mut left = n;
    while left > 0 {
        let k = left.min(1_000);
        client.enqueue_batch(events("drain", k, &payload)).await?;
        left -= k;
    }
    let before = sink.count();
    let started = Instant::now();
    client
        .resume_endpoint(pb::ResumeEndpointRequest {
            name: "drain".into(),
        })
        .await?;
    let target = before + n as u64;
    while sink.count() < target && started.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let stats = hookd_client::all_stats(&mut client).await?;
    Ok((
        (sink.count() - before) as f64 / elapsed.as_secs_f64(),
        stats,
    ))
}

/// What the healthy endpoints saw in an isolation run.
pub(crate) struct Isolation {
    pub healthy_delivered_per_s: f64,
    /// Worst end-to-end (enqueue to success) p99 over the healthy endpoints, from Stats.
    pub healthy_p99_ms: f64,
    pub healthy_p50_ms: f64,
    pub hanging_attempts: u64,
}

/// `endpoints` endpoints, the last `hanging` of them on a sink that never answers (timeout
/// `timeout_ms`), the rest on a fast sink; each offered `rate_per_endpoint` events/s (open
/// loop, 10 ms ticks) for `leg`. The figures are over the first `measured` endpoints, which
/// are healthy in every run, so runs with and without hanging endpoints compare directly.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn isolation(
    ch: &Channel,
    endpoints: usize,
    hanging: usize,
    measured: usize,
    rate_per_endpoint: u64,
    timeout_ms: u64,
    payload: usize,
    leg: Duration,
) -> anyhow::Result<Isolation> {
    let fast = sink(false).await?;
    let stuck = sink(true).await?;
    let mut client = HookdClient::new(ch.clone());
    let mut names = Vec::new();
    for i in 0..endpoints {
        let name = format!("ep-{i}");
        let url = if i < endpoints - hanging {
            fast.url(PATH)
        } else {
            stuck.url(PATH)
        };
        client
            .put_endpoint(pb::PutEndpointRequest {
                endpoint: Some(pb::Endpoint {
                    name: name.clone(),
                    url,
                    timeout_ms,
                    ..Default::default()
                }),
            })
            .await?;
        names.push(name);
    }
    let payload = vec![b'x'; payload];
    let per_tick = (rate_per_endpoint / 100).max(1) as usize;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for name in names.clone() {
        let mut client = HookdClient::new(ch.clone());
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            while started.elapsed() < leg {
                tick.tick().await;
                let _ = client
                    .enqueue_batch(events(&name, per_tick, &payload))
                    .await;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    // Let the healthy endpoints finish what was offered.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let elapsed = started.elapsed();
    let stats = hookd_client::all_stats(&mut client).await?;
    let mut out = Isolation {
        healthy_delivered_per_s: 0.0,
        healthy_p99_ms: 0.0,
        healthy_p50_ms: 0.0,
        hanging_attempts: stuck.count(),
    };
    let measured: Vec<String> = (0..measured).map(|i| format!("endpoint:ep-{i}")).collect();
    for d in stats.destinations {
        if measured.contains(&d.destination) {
            out.healthy_delivered_per_s += d.delivered_last_hour as f64 / elapsed.as_secs_f64();
            let lat = d.latency_last_hour.unwrap_or_default();
            out.healthy_p99_ms = out.healthy_p99_ms.max(lat.p99_ms);
            out.healthy_p50_ms = out.healthy_p50_ms.max(lat.p50_ms);
        }
    }
    Ok(out)
}
