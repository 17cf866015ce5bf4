//! The FIFO leg (issue #29, point 6): a backlog drained by push to one flaky receiver (it
//! answers 500 to every tenth request), once unordered and once with FIFO lanes over
//! 10,000 ordering keys (one attempt per key in flight, a failed head holding its key
//! through its retry), on the same endpoint settings; deliveries per second of each, and
//! their ratio.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hookd_proto::v1::{self as pb, hookd_client::HookdClient};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tonic::transport::Channel;

/// A loopback HTTP/1.1 receiver that answers 500 to every `fail_every`-th request and 200
/// to the others, counting both.
pub(crate) struct FlakySink {
    pub addr: SocketAddr,
    pub ok: Arc<AtomicU64>,
    pub failed: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FlakySink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) async fn flaky_sink(fail_every: u64) -> anyhow::Result<FlakySink> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let seen = Arc::new(AtomicU64::new(0));
    let (ok2, failed2) = (ok.clone(), failed.clone());
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let (ok, failed, seen) = (ok2.clone(), failed2.clone(), seen.clone());
            tokio::spawn(async move {
                let service = service_fn(move |_req: hyper::Request<hyper::body::Incoming>| {
                    let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
                    let status = if n.is_multiple_of(fail_every) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        500
                    } else {
                        ok.fetch_add(1, Ordering::Relaxed);
                        200
                    };
                    async move {
                        hyper::Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::new()))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(FlakySink {
        addr,
        ok,
        failed,
        task,
    })
}

/// One drain.
#[derive(Debug)]
pub(crate) struct Drain {
    pub deliveries_per_s: f64,
    /// 500s answered (each retried).
    pub failed: u64,
}

/// Stores `events` events for one endpoint while it is paused (`keys` > 0: FIFO lanes
/// over that many ordering keys, round robin; 0: unordered), then resumes it and measures
/// until the sink has taken every one (or `timeout`).
pub(crate) async fn drain(
    ch: &Channel,
    sink: &FlakySink,
    keys: usize,
    events: usize,
    payload: usize,
    timeout: Duration,
) -> anyhow::Result<Drain> {
    let mut client = HookdClient::new(ch.clone())
        .max_encoding_message_size(64 << 20)
        .max_decoding_message_size(64 << 20);
    let name = "flaky";
    client
        .put_endpoint(pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: name.into(),
                url: format!("http://{}/hook", sink.addr),
                // A failed attempt is retried soon, in both legs alike.
                retry_base_ms: 10,
                retry_cap_ms: 100,
                max_attempts: 100,
                fifo: if keys > 0 {
                    pb::Fifo::Park as i32
                } else {
                    pb::Fifo::Off as i32
                },
                ..Default::default()
            }),
        })
        .await?;
    client
        .pause_endpoint(pb::PauseEndpointRequest {
            name: name.into(),
            reason: "filling the backlog".into(),
        })
        .await?;
    let body = vec![b'x'; payload];
    let mut sent = 0;
    while sent < events {
        let k = (events - sent).min(1_000);
        let batch = (sent..sent + k)
            .map(|i| pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Endpoint(name.into())),
                payload: body.clone(),
                ordering_key: if keys > 0 {
                    format!("key-{}", i % keys)
                } else {
                    String::new()
                },
                ..Default::default()
            })
            .collect();
        client
            .enqueue_batch(pb::EnqueueBatchRequest { events: batch })
            .await?;
        sent += k;
    }
    let (ok_before, failed_before) = (
        sink.ok.load(Ordering::Relaxed),
        sink.failed.load(Ordering::Relaxed),
    );
    let started = Instant::now();
    client
        .resume_endpoint(pb::ResumeEndpointRequest { name: name.into() })
        .await?;
    let target = ok_before + events as u64;
    while sink.ok.load(Ordering::Relaxed) < target && started.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed();
    let taken = sink.ok.load(Ordering::Relaxed) - ok_before;
    anyhow::ensure!(
        taken >= events as u64,
        "the sink took {taken} of {events} within {timeout:?}"
    );
    Ok(Drain {
        deliveries_per_s: taken as f64 / elapsed.as_secs_f64(),
        failed: sink.failed.load(Ordering::Relaxed) - failed_before,
    })
}
