//! The cost of `/metrics` with many destinations, beside the Stats call that answers the
//! same figures over gRPC (the baseline of the same run): hookd holding one message in
//! each of `destinations` queues, a dead letter in every tenth. And what they cost the
//! writers (issue #26, 13: no engine step may stall writes for more than a few ms): the
//! slowest of sequential Enqueues (same client) while scrapes and Stats run,
//! against the slowest of the same Enqueues with nothing else running.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hookd_client::{Client, Event};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One `GET /metrics`: (bytes, series lines).
async fn scrape(http: SocketAddr) -> anyhow::Result<(usize, usize)> {
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
    Ok((body.len(), series))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

pub async fn run(
    client: &mut Client,
    http: SocketAddr,
    destinations: usize,
    scrapes: usize,
) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    for i in 0..destinations {
        batch.push(Event::to_queue(format!("q{i:05}"), b"x".to_vec()));
        if batch.len() == 1_000 {
            client.enqueue_batch(std::mem::take(&mut batch)).await?;
        }
    }
    client.enqueue_batch(batch).await?;
    let quiet = probe_enqueues(client.clone(), 200, None).await?;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let during = tokio::spawn(probe_enqueues(client.clone(), 100_000, Some(stop.clone())));
    let (mut scrape_times, mut stats_times) = (Vec::new(), Vec::new());
    let mut shape = (0, 0);
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
