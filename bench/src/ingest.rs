//! Inbound webhooks: hookd's ingest listener (Standard Webhooks signature checked, event
//! durable before the 202) against a bare hyper server that reads the body and answers 202,
//! and against the seed documents' receiver (FastAPI, Redis SET NX, a Redis list:
//! `bench/peers/fastapi.sh`), with the same signed requests over HTTP/1.1 keep-alive
//! connections.
//!
//! Closed loop: each connection sends its next request when the last one is answered.
//! Open loop: requests are due at a fixed rate and latency counts from when each was due,
//! so a server that falls behind is charged for the wait (no coordinated omission).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hdrhistogram::Histogram;
use hookd_core::signing::{Secret, signature_header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// The signing secret of every target (the FastAPI peer's default too).
pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// What one run measured.
#[derive(Debug)]
pub(crate) struct HttpOutcome {
    pub accepted: u64,
    pub other: u64,
    pub elapsed: Duration,
    pub latency_us: Histogram<u64>,
}

impl HttpOutcome {
    pub(crate) fn per_s(&self) -> f64 {
        self.accepted as f64 / self.elapsed.as_secs_f64()
    }

    pub(crate) fn p(&self, q: f64) -> f64 {
        self.latency_us.value_at_quantile(q) as f64 / 1000.0
    }
}

/// A server that reads each request's body and answers 202: the floor of HTTP/1.1 on this
/// machine.
pub(crate) async fn bare_server() -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let body = req.into_body().collect().await.map(|b| b.to_bytes());
                        let n = body.map_or(0, |b| b.len());
                        let answer = format!("{{\"id\":\"{n}\",\"duplicate\":false}}");
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .status(202)
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(answer)))
                                .unwrap_or_default(),
                        )
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// Signs and sends; each request has its own `webhook-id`.
struct Signer {
    secret: [Secret; 1],
    body: Bytes,
    prefix: String,
}

impl Signer {
    fn new(payload: usize, prefix: &str) -> anyhow::Result<Self> {
        let secret = [Secret::parse(SECRET)?];
        let pad = "x".repeat(payload.saturating_sub(40));
        let body = Bytes::from(format!(r#"{{"type":"bench.event","data":"{pad}"}}"#));
        Ok(Self {
            secret,
            body,
            prefix: prefix.to_owned(),
        })
    }

    fn request(&self, path: &str, n: u64) -> anyhow::Result<hyper::Request<Full<Bytes>>> {
        let id = format!("{}-{n}", self.prefix);
        let ts = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
        let signature = signature_header(&self.secret, &id, ts, &self.body).unwrap_or_default();
        Ok(hyper::Request::post(path)
            .header("host", "bench")
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", signature)
            .body(Full::new(self.body.clone()))?)
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr) -> anyhow::Result<Sender> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// One request; whether it was answered 202.
async fn send(sender: &mut Sender, req: hyper::Request<Full<Bytes>>) -> anyhow::Result<bool> {
    let response = sender.send_request(req).await?;
    let status = response.status();
    response.into_body().collect().await?;
    Ok(status == hyper::StatusCode::ACCEPTED)
}

/// One keep-alive connection of a load task and what it recorded.
struct Conn {
    addr: SocketAddr,
    sender: Sender,
    ok: u64,
    other: u64,
    hist: Histogram<u64>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> anyhow::Result<Self> {
        Ok(Self {
            addr,
            sender: connect(addr).await?,
            ok: 0,
            other: 0,
            hist: histogram()?,
        })
    }

    /// Sends `req`, counts its answer, records the latency from `since`; a failed
    /// connection is replaced.
    async fn exchange(
        &mut self,
        req: hyper::Request<Full<Bytes>>,
        since: Instant,
    ) -> anyhow::Result<()> {
        // A connection the server closed after its last answer (`connection: close`, as
        // hookd does to a connection it served at low priority once the client is trusted)
        // is replaced before the request, as an HTTP client's pool does: not a failure.
        if self.sender.ready().await.is_err() {
            self.sender = connect(self.addr).await?;
        }
        match send(&mut self.sender, req).await {
            Ok(true) => self.ok += 1,
            Ok(false) => self.other += 1,
            Err(_) => {
                self.other += 1;
                self.sender = connect(self.addr).await?;
            }
        }
        let _ = self.hist.record(since.elapsed().as_micros() as u64);
        Ok(())
    }

    fn done(self) -> (u64, u64, Histogram<u64>) {
        (self.ok, self.other, self.hist)
    }
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, 60_000_000, 3)?)
}

/// `connections` keep-alive connections, each sending back to back for `duration`.
pub(crate) async fn closed_loop(
    addr: SocketAddr,
    path: &str,
    connections: usize,
    payload: usize,
    duration: Duration,
    run: &str,
) -> anyhow::Result<HttpOutcome> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for c in 0..connections {
        let signer = Signer::new(payload, &format!("{run}-c{c}"))?;
        let path = path.to_owned();
        let mut conn = Conn::open(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while Instant::now() < deadline {
                n += 1;
                let req = signer.request(&path, n)?;
                conn.exchange(req, Instant::now()).await?;
            }
            anyhow::Ok(conn.done())
        }));
    }
    collect(tasks, started).await
}

/// Requests due at `rate` per second for `duration`, over `connections` keep-alive
/// connections (a request waits for a free one); latency from when it was due.
pub(crate) async fn open_loop(
    addr: SocketAddr,
    path: &str,
    rate: u64,
    connections: usize,
    payload: usize,
    duration: Duration,
    run: &str,
) -> anyhow::Result<HttpOutcome> {
    let started = Instant::now();
    let total = rate * duration.as_secs();
    let next = Arc::new(AtomicU64::new(0));
    let interval_ns = 1_000_000_000 / rate.max(1);
    let mut tasks = Vec::new();
    for c in 0..connections {
        let signer = Signer::new(payload, &format!("{run}-o{c}"))?;
        let path = path.to_owned();
        let next = next.clone();
        let mut conn = Conn::open(addr).await?;
        tasks.push(tokio::spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                let due = started + Duration::from_nanos(n * interval_ns);
                tokio::time::sleep_until(due.into()).await;
                let req = signer.request(&path, n)?;
                conn.exchange(req, due).await?;
            }
            anyhow::Ok(conn.done())
        }));
    }
    collect(tasks, started).await
}

type Task = tokio::task::JoinHandle<anyhow::Result<(u64, u64, Histogram<u64>)>>;

async fn collect(tasks: Vec<Task>, started: Instant) -> anyhow::Result<HttpOutcome> {
    let mut out = HttpOutcome {
        accepted: 0,
        other: 0,
        elapsed: Duration::ZERO,
        latency_us: histogram()?,
    };
    for t in tasks {
        let (ok, other, hist) = t.await??;
        out.accepted += ok;
        out.other += other;
        out.latency_us.add(&hist)?;
    }
    out.elapsed = started.elapsed();
    Ok(out)
}

pub(crate) fn line(name: &str, o: &HttpOutcome) {
    println!(
        "  {name:<8} {:>9.0} accepted/s  p50 {:>7.2} ms  p99 {:>7.2} ms  p99.9 {:>7.2} ms  not 202: {}",
        o.per_s(),
        o.p(0.5),
        o.p(0.99),
        o.p(0.999),
        o.other
    );
}
