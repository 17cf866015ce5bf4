//! Scale: hookd holding `n` pending push messages, as a separate process so its RSS is its
//! own; then `kill -9` and the time from the restart to the first delivery.
//!
//! The endpoint's receiver hangs during the fill (one attempt in flight, `max_in_flight`
//! 1, so the rest stay pending); when hookd is killed the receiver starts answering, and
//! the restart is timed from the spawn of the new process to the first POST it makes.
//!
//! Checkpoints run only by log size (the interval is an hour), and more events are
//! enqueued after the fill until the log holds nearly a whole checkpoint's worth
//! (`checkpoint_log_mb`, default 32 MiB), so the restart replays about the most the
//! default settings can leave; Stats after the restart says exactly how much.

use std::path::Path;
use std::time::{Duration, Instant};

use hookd_proto::v1::{self as pb, hookd_client::HookdClient};
use hookd_testkit::{ChildHookd, Receiver, Reply};
use tonic::transport::Channel;

/// Top-ups after the fill, at most (they stop once the log holds a checkpoint's worth).
const MAX_TOP_UP: u64 = 200_000;

/// The scale run's config: no timed checkpoint (the log's share of the restart is what is
/// measured), and backpressure marks that hold the fill and its top-up with room to spare,
/// below the soft mark too (the defaults' per-destination hard mark is 1,000,000, which
/// `--scale-messages 1000000` plus its top-up passes).
fn config_text(n: u64, payload: usize) -> String {
    let messages = 2 * (n + MAX_TOP_UP);
    // A live record's bytes: the payload and its metadata (well under 512 B).
    let bytes = messages.saturating_mul(payload as u64 + 512);
    format!(
        "checkpoint_interval_ms = 3600000\n\
         [backpressure]\n\
         destination_max_messages = {messages}\n\
         max_messages = {messages}\n\
         destination_max_bytes = {bytes}\n\
         max_bytes = {bytes}\n"
    )
}

/// hookd as a child process of this binary (`hookd-bench __hookd serve ...`), connected.
/// Its log level is `warn`, or `HOOKD_SCALE_LOG` (`info` prints the restart's phases: the
/// integrity check, the log replay and the index's recovery, each with its time).
async fn spawn(data: &Path, n: u64, payload: usize) -> anyhow::Result<(ChildHookd, Channel)> {
    let exe = std::env::current_exe()?;
    let config = data.with_extension("toml");
    std::fs::write(&config, config_text(n, payload))?;
    let extra = [
        "--log-level".into(),
        std::env::var("HOOKD_SCALE_LOG")
            .unwrap_or("warn".into())
            .into(),
        "--allow-destination".into(),
        "127.0.0.1/32".into(),
        "--config".into(),
        config.into_os_string(),
    ];
    let hookd =
        ChildHookd::spawn(&exe, &["__hookd"], data, &extra, Duration::from_secs(120)).await?;
    let channel = hookd_client::endpoint(hookd.grpc.clone())?
        .connect()
        .await?;
    Ok((hookd, channel))
}

/// The resident set of process `pid` in MB, from /proc.
pub(crate) fn rss_mb(pid: Option<u32>) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1e3)
}

pub(crate) async fn run(base: &Path, n: u64, payload: usize) -> anyhow::Result<()> {
    println!(
        "\nscale: {n} pending push messages of {payload} B in a separate hookd process; kill -9; restart to first delivery"
    );
    let data = base.join(format!("scale-{}", uuid::Uuid::new_v4().simple()));
    // It holds every request until hookd is killed: one attempt in flight, the rest pending.
    let receiver = Receiver::start(Reply::Status(200))
        .await?
        .without_recording();
    receiver.hold();
    let (mut child, channel) = spawn(&data, n, payload).await?;
    let mut client = HookdClient::new(channel.clone());
    client
        .put_endpoint(pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: "scale".into(),
                url: receiver.url("/hook"),
                max_in_flight: 1,
                timeout_ms: 3_600_000,
                ..Default::default()
            }),
        })
        .await?;
    let idle = rss_mb(child.pid()).unwrap_or(0.0);
    let filled = Instant::now();
    let stored = crate::load::fill(
        std::slice::from_ref(&channel),
        n,
        payload,
        pb::enqueue_request::Destination::Endpoint("scale".into()),
        "s",
    )
    .await?;
    let fill_s = filled.elapsed().as_secs_f64();
    // Top up until nearly a checkpoint's worth of log waits for the next checkpoint, in
    // small steps, each read once the apply stage has caught up (it lags the answers).
    let checkpoint_log = hookd::Config::default().checkpoint_log_mb << 20;
    let want = checkpoint_log - (1 << 20);
    let mut topped = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let stats = hookd_client::all_stats(&mut client).await?;
        let log = stats.storage.map_or(0, |s| s.log_since_checkpoint_bytes);
        if log >= want || topped >= n.min(MAX_TOP_UP) {
            break;
        }
        let step = ((want - log) / 800).clamp(100, 10_000);
        topped += crate::load::fill(
            std::slice::from_ref(&channel),
            step,
            payload,
            pb::enqueue_request::Destination::Endpoint("scale".into()),
            &format!("t{topped}"),
        )
        .await?;
    }
    // Let the writer settle, then read what the process holds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let full = rss_mb(child.pid()).unwrap_or(0.0);
    let stats = hookd_client::all_stats(&mut client).await?;
    let live = stats.storage.map_or(0, |s| s.live_messages);
    let log = stats
        .storage
        .as_ref()
        .map_or(0, |s| s.log_since_checkpoint_bytes);
    println!(
        "  filled {stored} in {fill_s:.1} s ({:.0} events/s), then {topped} more; live messages {live}; log since the checkpoint {:.1} MiB; RSS idle {idle:.0} MB, holding them {full:.0} MB",
        stored as f64 / fill_s,
        log as f64 / (1 << 20) as f64
    );
    drop(client);
    child.signal("-KILL")?;
    child.wait(Duration::from_secs(30)).await?;
    let size = std::fs::metadata(data.join("hookd.redb"))?.len();
    // Everything the data directory holds for them: redb's file and the log's segments.
    let disk = dir_bytes(&data)?;
    println!(
        "  on disk after kill -9: {:.0} MB (redb {:.0} MB, log {:.0} MB) = {:.0} B per live message ({payload} B payloads)",
        disk as f64 / 1e6,
        size as f64 / 1e6,
        disk.saturating_sub(size) as f64 / 1e6,
        disk as f64 / live.max(1) as f64
    );
    let before = receiver.count();
    receiver.release();

    let started = Instant::now();
    let (mut child, channel) = spawn(&data, n, payload).await?;
    let mut client = HookdClient::new(channel);
    let ready = started.elapsed();
    while receiver.count() == before {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no delivery within 120 s of the restart"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let first = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_mb(child.pid()).unwrap_or(0.0);
    let stats = hookd_client::all_stats(&mut client).await?;
    let live = stats.storage.as_ref().map_or(0, |s| s.live_messages);
    let (replay_ms, replayed) = stats
        .storage
        .as_ref()
        .map_or((0, 0), |s| (s.replay_ms, s.replayed_bytes));
    println!(
        "  after kill -9 (file {:.0} MB): restart to gRPC ready {:.2} s, to first delivery {:.2} s (replayed {:.1} MiB of log in {replay_ms} ms); live messages {live}; RSS {after:.0} MB",
        size as f64 / 1e6,
        ready.as_secs_f64(),
        first.as_secs_f64(),
        replayed as f64 / (1 << 20) as f64
    );
    child.signal("-KILL")?;
    child.wait(Duration::from_secs(30)).await?;
    std::fs::remove_dir_all(&data)?;
    let _ = std::fs::remove_file(data.with_extension("toml"));
    Ok(())
}

/// The bytes of the files directly in `dir` (the data directory is flat).
fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        if meta.is_file() {
            total += meta.len();
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #26, 17: the marks hold a million messages and the top-up, below the soft mark.
    #[test]
    fn the_scale_config_holds_the_fill_and_its_top_up() {
        for n in [1_000, 1_000_000, 5_000_000] {
            let config = hookd::Config::from_toml(&config_text(n, 256)).unwrap();
            let b = &config.backpressure;
            let most = (n + MAX_TOP_UP) as f64;
            assert!(
                b.destination_max_messages as f64 * b.soft_fraction >= most,
                "{n}"
            );
            assert!(b.max_messages as f64 * b.soft_fraction >= most, "{n}");
            assert!(b.destination_max_bytes as f64 * b.soft_fraction >= most * 256.0);
        }
    }
}
