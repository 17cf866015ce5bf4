//! Replay jobs (issue #53, 6): the pace a job keeps resending `events` delivered events to a
//! healthy loopback sink (asked for, and the most it makes when asked for more than it
//! can), and what it does to live traffic's latency meanwhile: a steady stream of events
//! to another endpoint of the same hookd, each timed from its Enqueue to its arrival at the
//! sink, alone and during the job.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hookd_client::{Client, pb};
use hookd_testkit::{Receiver, Reply};

fn endpoint(name: &str) -> Option<pb::Destination> {
    Some(pb::Destination {
        kind: Some(pb::destination::Kind::Endpoint(name.into())),
    })
}

/// Live traffic's latencies (ms) from the sink's record of `/live`: each payload holds its
/// Enqueue's time (µs since `base`).
fn live_latencies(sink: &Receiver, base: Instant, from: usize) -> anyhow::Result<Histogram<u64>> {
    let mut h = Histogram::<u64>::new(3)?;
    for r in sink.received().iter().skip(from) {
        if r.uri.path() != "/live" {
            continue;
        }
        let Some(sent) = std::str::from_utf8(&r.body)
            .ok()
            .and_then(|b| b.trim().parse::<u64>().ok())
        else {
            continue;
        };
        let at = r.at.duration_since(base).as_micros() as u64;
        let _ = h.record(at.saturating_sub(sent).max(1));
    }
    Ok(h)
}

/// Enqueues to `live` at `rate` a second until `stop`; how many.
async fn live_traffic(
    client: Client,
    base: Instant,
    rate: u64,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<u64> {
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    let mut calls = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let mut c = client.clone();
        let t = base.elapsed().as_micros() as u64;
        calls.spawn(async move {
            c.enqueue(hookd_client::Event::to_endpoint("live", t.to_string()))
                .await
                .map(|_| ())
        });
        sent += 1;
    }
    while let Some(done) = calls.join_next().await {
        done??;
    }
    Ok(sent)
}

/// Waits (bounded) until the sink holds `n` requests.
async fn sink_at(sink: &Receiver, n: u64, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while sink.count() < n {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the sink got {} of {n} requests in {within:?}",
            sink.count()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1_000.0
}

/// One run: `events` delivered, then the live traffic alone, then a job at each pace of
/// `paces` with the live traffic beside it.
pub(crate) async fn run(
    client: &mut Client,
    events: u64,
    paces: &[f64],
    live_rate: u64,
    live_secs: u64,
) -> anyhow::Result<()> {
    let sink = Receiver::start(Reply::Status(200)).await?;
    for name in ["old", "live"] {
        client
            .put_endpoint(pb::Endpoint {
                name: name.into(),
                url: sink.url(&format!("/{name}")),
                ..Default::default()
            })
            .await?;
    }
    // The history: `events` delivered events.
    let mut n = 0;
    while n < events {
        let batch = (n..(n + 500).min(events))
            .map(|i| hookd_client::Event::to_endpoint("old", format!("{{\"n\":{i}}}")))
            .collect::<Vec<_>>();
        n += batch.len() as u64;
        client.enqueue_batch(batch).await?;
    }
    sink_at(&sink, events, Duration::from_secs(600)).await?;
    let search = pb::SearchMessagesRequest {
        destination: endpoint("old"),
        states: vec![pb::MessageState::Delivered as i32],
        ..Default::default()
    };
    let request = |per_s: f64, dry_run: bool| pb::CreateReplayJobRequest {
        search: Some(search.clone()),
        max_per_s: per_s,
        limit: events as u32,
        dry_run,
        ..Default::default()
    };
    // Every delivery's summary is applied before the job selects them.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let e = client
            .raw()
            .create_replay_job(request(1.0, true))
            .await?
            .into_inner()
            .estimate
            .unwrap_or_default();
        if e.delivered >= events {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "only {} delivered: {e:?}",
            e.delivered
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let base = Instant::now();

    // Live traffic alone.
    let from = sink.count() as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let live = tokio::spawn(live_traffic(client.clone(), base, live_rate, stop.clone()));
    tokio::time::sleep(Duration::from_secs(live_secs)).await;
    stop.store(true, Ordering::Relaxed);
    let sent = live.await??;
    sink_at(&sink, from as u64 + sent, Duration::from_secs(60)).await?;
    let alone = live_latencies(&sink, base, from)?;
    println!(
        "  live traffic alone: {sent} events at {live_rate}/s, Enqueue to arrival p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(&alone, 0.5),
        ms(&alone, 0.99),
        alone.max() as f64 / 1_000.0
    );

    for &per_s in paces {
        let from = sink.count();
        let stop = Arc::new(AtomicBool::new(false));
        let live = tokio::spawn(live_traffic(client.clone(), base, live_rate, stop.clone()));
        let started = Instant::now();
        let job = client
            .raw()
            .create_replay_job(request(per_s, false))
            .await?
            .into_inner()
            .job
            .ok_or_else(|| anyhow::anyhow!("no job"))?;
        let total = job.total;
        // The job's own end (every step handed over)...
        let handed = loop {
            let j = client
                .raw()
                .get_replay_job(pb::GetReplayJobRequest { id: job.id.clone() })
                .await?
                .into_inner()
                .job
                .unwrap_or_default();
            if j.state == pb::ReplayJobState::Done as i32 {
                anyhow::ensure!(j.replayed == total, "replayed {} of {total}", j.replayed);
                break started.elapsed();
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(900),
                "the job runs on: {j:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // ...and the sink's: every copy arrived (the live traffic goes on until then).
        let deadline = Instant::now() + Duration::from_secs(600);
        let replays_in = |sink: &Receiver| {
            sink.received()
                .iter()
                .skip(from as usize)
                .filter(|r| r.uri.path() == "/old")
                .count() as u64
        };
        while replays_in(&sink) < total {
            anyhow::ensure!(
                Instant::now() < deadline,
                "copies still missing at the sink"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let arrived = started.elapsed();
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, Ordering::Relaxed);
        let sent = live.await??;
        let deadline = Instant::now() + Duration::from_secs(60);
        while live_latencies(&sink, base, from as usize)?.len() < sent {
            anyhow::ensure!(Instant::now() < deadline, "live events missing at the sink");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let during = live_latencies(&sink, base, from as usize)?;
        println!(
            "  job asked {per_s:.0}/s: {total} resent, handed over at {:.0}/s ({:.2} s), all at the sink at {:.0}/s ({:.2} s); live traffic meanwhile: {sent} events, p50 {:.2} ms, p99 {:.2} ms (alone {:.2}), max {:.2} ms",
            total as f64 / handed.as_secs_f64(),
            handed.as_secs_f64(),
            total as f64 / arrived.as_secs_f64(),
            arrived.as_secs_f64(),
            ms(&during, 0.5),
            ms(&during, 0.99),
            ms(&alone, 0.99),
            during.max() as f64 / 1_000.0
        );
    }
    Ok(())
}
