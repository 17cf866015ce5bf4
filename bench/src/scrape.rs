//! The cost of `/metrics` with many destinations, beside the Stats call that answers the
//! same figures over gRPC (the baseline of the same run): hookd holding one message in
//! each of `destinations` queues, a dead letter in every tenth.

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
    let (m, s) = (median(scrape_times), median(stats_times));
    println!(
        "  {destinations} destinations: /metrics median {:.2} ms ({} series, {} KB), Stats (all pages) median {:.2} ms; ratio scrape/Stats {:.2}",
        m.as_secs_f64() * 1e3,
        shape.1,
        shape.0 / 1024,
        s.as_secs_f64() * 1e3,
        m.as_secs_f64() / s.as_secs_f64()
    );
    Ok(())
}
