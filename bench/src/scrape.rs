//! The cost of `/metrics` with many destinations, beside the Stats call that answers the
//! same figures over gRPC (the baseline of the same run): hookd holding one message in
//! each of `destinations` destinations, every tenth an ad-hoc URL whose receiver answers
//! 503 (push statistics, retries). And what they cost the
//! writers (issue #26, 13: no engine step may stall writes for more than a few ms): the
//! slowest of sequential Enqueues (same client) while scrapes and Stats run,
//! against the slowest of the same Enqueues with nothing else running.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hookd_client::{Client, Event};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The engine-round histograms' buckets: wall time, CPU time.
type Rounds = [Vec<(f64, u64)>; 2];

/// One `GET /metrics`: (bytes, series lines, the engine-round histograms).
async fn scrape(http: SocketAddr) -> anyhow::Result<(usize, usize, Rounds)> {
    let mut tcp = tokio::net::TcpStream::connect(http).await?;
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n")
        .await?;
    let mut body = String::new();
    tcp.read_to_string(&mut body).await?;
    anyhow::ensure!(
        body.starts_with("HTTP/1.1 200"),
        "scrape failed: {body:.200}"
    );
    let series = body
        .lines()
        .filter(|l| l.starts_with("hookd_") || l.starts_with("process_"))
        .count();
    let rounds = [
        buckets(&body, "hookd_engine_round_duration_seconds"),
        buckets(&body, "hookd_engine_round_cpu_seconds"),
    ];
    Ok((body.len(), series, rounds))
}

/// A histogram's cumulative buckets: (upper bound s, count).
fn buckets(body: &str, name: &str) -> Vec<(f64, u64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix.as_str())?;
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect()
}

/// Engine rounds between two scrapes: (all, over 2.5 ms, over 5 ms, the upper bound of
/// the slowest one's bucket in ms).
fn rounds_between(before: &[(f64, u64)], after: &[(f64, u64)]) -> (u64, u64, u64, f64) {
    let delta: Vec<(f64, u64)> = after
        .iter()
        .map(|&(le, n)| {
            let was = before.iter().find(|b| b.0 == le).map_or(0, |b| b.1);
            (le, n.saturating_sub(was))
        })
        .collect();
    let all = delta.last().map_or(0, |d| d.1);
    let upto = |bound: f64| delta.iter().find(|d| d.0 >= bound).map_or(all, |d| d.1);
    let slowest = delta
        .iter()
        .find(|d| d.1 == all)
        .map_or(f64::INFINITY, |d| d.0 * 1e3);
    (all, all - upto(0.0025), all - upto(0.005), slowest)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub(crate) async fn run(
    client: &mut Client,
    http: SocketAddr,
    destinations: usize,
    scrapes: usize,
    failing: &hookd_testkit::Receiver,
) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    for i in 0..destinations {
        // Every tenth an ad-hoc URL (its own push destination, with attempt statistics
        // and a breaker) whose receiver fails, so it stays, retrying.
        batch.push(if i % 10 == 0 {
            Event::to_url(failing.url(&format!("/d{i:05}")), b"x".to_vec())
        } else {
            Event::to_queue(format!("q{i:05}"), b"x".to_vec())
        });
        if batch.len() == 1_000 {
            client.enqueue_batch(std::mem::take(&mut batch)).await?;
        }
    }
    client.enqueue_batch(batch).await?;
    let calm = scrape(http).await?.2;
    let quiet = probe_enqueues(client.clone(), 200, None).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let during = tokio::spawn(probe_enqueues(client.clone(), 100_000, Some(stop.clone())));
    let (mut scrape_times, mut stats_times) = (Vec::new(), Vec::new());
    let mut shape = scrape(http).await?;
    let before = shape.2.clone();
    let quiet_rounds = [0, 1].map(|i| rounds_between(&calm[i], &before[i]));
    for _ in 0..scrapes {
        let t = Instant::now();
        shape = scrape(http).await?;
        scrape_times.push(t.elapsed());
        let t = Instant::now();
        client.stats().await?;
        stats_times.push(t.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let during = during.await??;
    let after = scrape(http).await?.2;
    let busy_rounds = [0, 1].map(|i| rounds_between(&before[i], &after[i]));
    let (m, s) = (median(scrape_times), median(stats_times));
    println!(
        "  {destinations} destinations: /metrics median {:.2} ms ({} series, {} KB), Stats (all pages) median {:.2} ms; ratio scrape/Stats {:.2}",
        m.as_secs_f64() * 1e3,
        shape.1,
        shape.0 / 1024,
        s.as_secs_f64() * 1e3,
        m.as_secs_f64() / s.as_secs_f64()
    );
    println!(
        "    Enqueue meanwhile (sequential, same client): slowest {:.2} ms ({} calls) while they ran, {:.2} ms quiet ({} calls); ratio {:.2}",
        during.0.as_secs_f64() * 1e3,
        during.1,
        quiet.0.as_secs_f64() * 1e3,
        quiet.1,
        during.0.as_secs_f64() / quiet.0.as_secs_f64().max(1e-6)
    );
    for (what, i) in [("wall", 0), ("CPU", 1)] {
        let (b, q) = (busy_rounds[i], quiet_rounds[i]);
        println!(
            "    engine rounds ({what} time) meanwhile: {}, {} over 2.5 ms, {} over 5 ms, the slowest at most {} ms; in the quiet Enqueues: {}, {} over 2.5 ms, {} over 5 ms, the slowest at most {} ms",
            b.0, b.1, b.2, b.3, q.0, q.1, q.2, q.3
        );
    }
    Ok(())
}

/// Sequential Enqueues (at most `max`, until `stop`): the slowest, and how many were made.
async fn probe_enqueues(
    mut client: Client,
    max: usize,
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
) -> anyhow::Result<(Duration, usize)> {
    let mut slowest = Duration::ZERO;
    let mut n = 0;
    while n < max
        && !stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    {
        let t = Instant::now();
        client
            .enqueue(Event::to_queue("probe", b"p".to_vec()))
            .await?;
        slowest = slowest.max(t.elapsed());
        n += 1;
    }
    Ok((slowest, n))
}
