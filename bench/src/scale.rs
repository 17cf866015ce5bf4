//! Scale: hookd holding `n` pending push messages, as a separate process so its RSS is its
//! own; then `kill -9` and the time from the restart to the first delivery.
//!
//! The endpoint's receiver hangs during the fill (one attempt in flight, `max_in_flight`
//! 1, so the rest stay pending); when hookd is killed the receiver starts answering, and
//! the restart is timed from the spawn of the new process to the first POST it makes.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hookd_proto::v1::{self as pb, hookd_client::HookdClient};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::process::{Child, Command};
use tonic::transport::{Channel, Endpoint};

/// A receiver that hangs until told to answer.
struct Receiver {
    url: String,
    hang: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let hang = Arc::new(AtomicBool::new(true));
        let received = Arc::new(AtomicU64::new(0));
        let (h, r) = (hang.clone(), received.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (h, r) = (h.clone(), r.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (h, r) = (h.clone(), r.clone());
                            async move {
                                let _ = req.into_body().collect().await;
                                while h.load(Ordering::Relaxed) {
                                    tokio::time::sleep(Duration::from_millis(50)).await;
                                }
                                r.fetch_add(1, Ordering::Relaxed);
                                Ok::<_, std::convert::Infallible>(hyper::Response::new(Empty::<
                                    Bytes,
                                >::new(
                                )))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            url,
            hang,
            received,
            task,
        })
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// hookd as a child process of this binary (`hookd-bench __hookd serve ...`).
async fn spawn(data: &Path) -> anyhow::Result<(Child, String)> {
    let grpc = format!("127.0.0.1:{}", free_port()?);
    let http = format!("127.0.0.1:{}", free_port()?);
    let child = Command::new(std::env::current_exe()?)
        .args(["__hookd", "serve", "--log-level", "warn", "--data-dir"])
        .arg(data)
        .args(["--grpc-addr", &grpc, "--http-addr", &http])
        .args(["--allow-destination", "127.0.0.1/32"])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    Ok((child, format!("http://{grpc}")))
}

async fn connect(child: &mut Child, addr: &str) -> anyhow::Result<Channel> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(c) = Endpoint::from_shared(addr.to_owned())?.connect().await {
            return Ok(c);
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("hookd exited: {status}");
        }
        anyhow::ensure!(Instant::now() < deadline, "hookd did not come up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn rss_mb(child: &Child) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id()?)).ok()?;
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1e3)
}

pub async fn run(base: &Path, n: u64, payload: usize) -> anyhow::Result<()> {
    println!(
        "\nscale: {n} pending push messages of {payload} B in a separate hookd process; kill -9; restart to first delivery"
    );
    let data = base.join(format!("scale-{}", uuid::Uuid::new_v4().simple()));
    let receiver = Receiver::start().await?;
    let (mut child, addr) = spawn(&data).await?;
    let channel = connect(&mut child, &addr).await?;
    let mut client = HookdClient::new(channel.clone());
    client
        .put_endpoint(pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: "scale".into(),
                url: receiver.url.clone(),
                max_in_flight: 1,
                timeout_ms: 3_600_000,
                ..Default::default()
            }),
        })
        .await?;
    let idle = rss_mb(&child).unwrap_or(0.0);
    let filled = Instant::now();
    let stored = crate::load::fill(
        &[channel],
        n,
        payload,
        pb::enqueue_request::Destination::Endpoint("scale".into()),
        "s",
    )
    .await?;
    let fill_s = filled.elapsed().as_secs_f64();
    // Let the writer settle, then read what the process holds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let full = rss_mb(&child).unwrap_or(0.0);
    let stats = client.stats(pb::StatsRequest {}).await?.into_inner();
    let live = stats.storage.map_or(0, |s| s.live_messages);
    println!(
        "  filled {stored} in {fill_s:.1} s ({:.0} events/s); live messages {live}; RSS idle {idle:.0} MB, holding them {full:.0} MB",
        stored as f64 / fill_s
    );
    drop(client);
    child.start_kill()?;
    child.wait().await?;
    let size = std::fs::metadata(data.join("hookd.redb"))?.len();
    let before = receiver.received.load(Ordering::Relaxed);
    receiver.hang.store(false, Ordering::Relaxed);

    let started = Instant::now();
    let (mut child, addr) = spawn(&data).await?;
    let mut client = HookdClient::new(connect(&mut child, &addr).await?);
    let ready = started.elapsed();
    while receiver.received.load(Ordering::Relaxed) == before {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "no delivery within 120 s of the restart"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let first = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_mb(&child).unwrap_or(0.0);
    let stats = client.stats(pb::StatsRequest {}).await?.into_inner();
    let live = stats.storage.map_or(0, |s| s.live_messages);
    println!(
        "  after kill -9 (file {:.0} MB): restart to gRPC ready {:.2} s, to first delivery {:.2} s; live messages {live}; RSS {after:.0} MB",
        size as f64 / 1e6,
        ready.as_secs_f64(),
        first.as_secs_f64()
    );
    child.start_kill()?;
    child.wait().await?;
    std::fs::remove_dir_all(&data)?;
    Ok(())
}
