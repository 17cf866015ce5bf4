//! Churn: a hostile client naming a million made-up queues must neither grow hookd's memory
//! for good nor slow anyone's Enqueue.
//!
//! A separate hookd process (so its RSS is its own) takes a steady unary Enqueue load, once
//! alone and once while other clients send long-poll Receives, each to a queue name never
//! seen before (1 ms waits: every one creates a destination that is idle a moment later).
//! A consumer leases and acknowledges the steady load's events throughout, so hookd's RSS
//! shows the churn rather than a growing backlog. A control leg sends as many long polls
//! to one queue name, so the comparison isolates what making and forgetting destinations
//! costs from what the RPCs themselves cost on a 2-core machine. Reported: Enqueue p50/p99
//! per leg and the ratio to the control, hookd's RSS before, at the end of and after the
//! churn, and how many destinations hookd still holds.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hookd_proto::v1::{self as pb, hookd_client::HookdClient};
use hookd_testkit::ChildHookd;
use tonic::transport::Channel;

use crate::load::{self, Shape};
use crate::scale::rss_mb;

/// Long polls in flight at once during the churn.
const CHURNERS: usize = 64;

/// Sends `n` long polls, `CHURNERS` at a time, within `limit`: each to a fresh name, or
/// (`fresh` false, the control) all to one name, so the difference between the two is what
/// making and forgetting destinations costs, not the RPCs themselves.
async fn churn(channel: Channel, n: u64, limit: Duration, fresh: bool) -> u64 {
    let sent = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + limit;
    let mut tasks = Vec::new();
    for t in 0..CHURNERS {
        let mut client = HookdClient::new(channel.clone());
        let sent = sent.clone();
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let i = sent.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let _ = client
                    .receive(pb::ReceiveRequest {
                        queue: if fresh {
                            format!("made-up-{t}-{i}")
                        } else {
                            "one-name".into()
                        },
                        max_messages: 1,
                        visibility_timeout_ms: 1_000,
                        wait_ms: 1,
                    })
                    .await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    sent.load(Ordering::Relaxed).min(n)
}

/// Leases and acknowledges what the steady load enqueues (queue `bench`) until `stop`, so
/// hookd holds few live messages and its RSS shows the churn, not a growing backlog.
async fn consume(channel: Channel, stop: Arc<std::sync::atomic::AtomicBool>) {
    let mut client = HookdClient::new(channel).max_decoding_message_size(64 << 20);
    while !stop.load(Ordering::Relaxed) {
        let Ok(got) = client
            .receive(pb::ReceiveRequest {
                queue: "bench".into(),
                max_messages: 500,
                visibility_timeout_ms: 60_000,
                wait_ms: 100,
            })
            .await
        else {
            continue;
        };
        let lease_ids: Vec<String> = got
            .into_inner()
            .messages
            .into_iter()
            .map(|m| m.lease_id)
            .collect();
        if !lease_ids.is_empty() {
            let _ = client.ack(pb::AckRequest { lease_ids }).await;
        }
    }
}

pub(crate) async fn run(
    base: &Path,
    names: u64,
    seconds: u64,
    payload: usize,
) -> anyhow::Result<()> {
    println!(
        "\nchurn: {names} long polls to made-up queue names against a steady unary Enqueue (16 in flight), in a separate hookd process"
    );
    let data = base.join(format!("churn-{}", uuid::Uuid::new_v4().simple()));
    let exe = std::env::current_exe()?;
    let extra = ["--log-level".into(), "warn".into()];
    let hookd =
        ChildHookd::spawn(&exe, &["__hookd"], &data, &extra, Duration::from_secs(60)).await?;
    let channels = [
        hookd_client::endpoint(hookd.grpc.clone())?
            .connect()
            .await?,
        hookd_client::endpoint(hookd.grpc.clone())?
            .connect()
            .await?,
        hookd_client::endpoint(hookd.grpc.clone())?
            .connect()
            .await?,
    ];
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer = tokio::spawn(consume(channels[2].clone(), stop.clone()));
    let leg = Duration::from_secs(seconds);
    // Warm up, then the quiet leg.
    load::run(
        &channels[..1],
        16,
        Shape::Unary,
        payload,
        Duration::from_secs(1),
    )
    .await?;
    let quiet = load::run(&channels[..1], 16, Shape::Unary, payload, leg).await?;
    // The control: the same load beside as many long polls to one queue, for one leg.
    let control_churn = tokio::spawn(churn(channels[1].clone(), u64::MAX, leg, false));
    let control = load::run(&channels[..1], 16, Shape::Unary, payload, leg).await?;
    let control_polls = control_churn.await?;
    // Warm (page cache, buffers, allocator), with the same load: what the churn adds to.
    let rss_before = rss_mb(hookd.pid()).unwrap_or(0.0);
    // The churn leg: the same load while the names pour in, as long as the churn lasts.
    let started = Instant::now();
    let churner = tokio::spawn(churn(
        channels[1].clone(),
        names,
        Duration::from_secs(600),
        true,
    ));
    let mut under = Vec::new();
    while !churner.is_finished() {
        under.push(load::run(&channels[..1], 16, Shape::Unary, payload, leg).await?);
    }
    let churned = churner.await?;
    let churn_s = started.elapsed().as_secs_f64();
    let rss_end = rss_mb(hookd.pid()).unwrap_or(0.0);
    // The control again, now that the tables (completed messages, idempotency keys) have
    // grown by the churn leg's enqueues: what the last churn legs compare with.
    let control_churn = tokio::spawn(churn(channels[1].clone(), u64::MAX, leg, false));
    let control_after = load::run(&channels[..1], 16, Shape::Unary, payload, leg).await?;
    control_churn.await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    consumer.await?;
    let rss_after = rss_mb(hookd.pid()).unwrap_or(0.0);
    let mut client = HookdClient::new(channels[0].clone());
    let stats = client
        .stats(pb::StatsRequest::default())
        .await?
        .into_inner();
    let (held, live) = stats
        .storage
        .map_or((0, 0), |s| (s.destinations, s.live_messages));
    println!(
        "  quiet:  {:>8.0} enqueues/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
        quiet.events_per_s(),
        quiet.p(0.5),
        quiet.p(0.99)
    );
    println!(
        "  control ({control_polls} long polls to one name): {:>6.0} enqueues/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
        control.events_per_s(),
        control.p(0.5),
        control.p(0.99)
    );
    let mut ratios = Vec::with_capacity(under.len());
    for (i, o) in under.iter().enumerate() {
        ratios.push(o.p(0.99) / control.p(0.99));
        println!(
            "  churn {}: {:>6.0} enqueues/s  p50 {:>6.2} ms  p99 {:>6.2} ms  (p99 / control {:.2})",
            i + 1,
            o.events_per_s(),
            o.p(0.5),
            o.p(0.99),
            o.p(0.99) / control.p(0.99)
        );
    }
    println!(
        "  control after: {:>6.0} enqueues/s  p50 {:>6.2} ms  p99 {:>6.2} ms",
        control_after.events_per_s(),
        control_after.p(0.5),
        control_after.p(0.99)
    );
    let last = under.last().map_or(0.0, |o| o.p(0.99));
    println!(
        "  median p99 under churn / control p99: {:.2}; last churn leg / control after: {:.2}",
        crate::median(ratios),
        last / control_after.p(0.99)
    );
    println!(
        "  {churned} made-up names in {churn_s:.1} s ({:.0}/s); destinations held after: {held}, live messages {live}; RSS before {rss_before:.0} MB, at the end {rss_end:.0} MB, 2 s later {rss_after:.0} MB",
        churned as f64 / churn_s
    );
    hookd.stop(Duration::from_secs(15)).await?;
    std::fs::remove_dir_all(&data)?;
    Ok(())
}
