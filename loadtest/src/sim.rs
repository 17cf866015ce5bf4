//! Simulated endpoints: one HTTP/1.1 server on loopback answers for every endpoint of the
//! scenario, at `/ep/GROUP/INSTANCE`, each group with its behaviour (latency, errors,
//! throttling with Retry-After, hangs, resets, flapping, its own rate limit). A 2xx
//! answer records the delivery in the tally.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::dist::Sampler;
use crate::scenario::EndpointGroup;
use crate::tally::{GroupLatency, Tally};

/// What one group's endpoints did.
#[derive(Debug, Default, Serialize, Clone, PartialEq)]
pub struct GroupCounts {
    pub name: String,
    pub requests: u64,
    /// 2xx answers (first deliveries and duplicates).
    pub ok: u64,
    pub duplicates: u64,
    pub errors: u64,
    pub throttled: u64,
    pub rate_limited: u64,
    pub hung: u64,
    pub reset: u64,
    /// Connections reset because the endpoint was in a flap's down phase.
    pub down: u64,
    /// End to end (intended send time to the 2xx answer) of this group's events.
    pub e2e_p50_ms: f64,
    pub e2e_p99_ms: f64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    ok: AtomicU64,
    duplicates: AtomicU64,
    errors: AtomicU64,
    throttled: AtomicU64,
    rate_limited: AtomicU64,
    hung: AtomicU64,
    reset: AtomicU64,
    down: AtomicU64,
    e2e: GroupLatency,
}

#[derive(Debug)]
struct Group {
    spec: EndpointGroup,
    latency: Sampler,
    counters: Counters,
    /// Per instance: (tokens, last refill), when the group has a rate limit.
    buckets: Vec<Mutex<(f64, Instant)>>,
}

#[derive(Debug)]
struct Shared {
    groups: Vec<Group>,
    tally: Arc<Tally>,
    start: Instant,
    stop: watch::Receiver<bool>,
}

/// The running simulated endpoints.
#[derive(Debug)]
pub struct Sim {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

/// What a request gets.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Act {
    Reset,
    Hang,
    Throttle,
    Error,
    Ok,
}

/// Picks the behaviour for one request from one uniform draw `u` in [0, 1).
fn act(g: &EndpointGroup, u: f64) -> Act {
    let mut edge = g.reset_rate;
    if u < edge {
        return Act::Reset;
    }
    edge += g.hang_rate;
    if u < edge {
        return Act::Hang;
    }
    edge += g.throttle_rate;
    if u < edge {
        return Act::Throttle;
    }
    edge += g.error_rate;
    if u < edge {
        return Act::Error;
    }
    Act::Ok
}

/// Whether a flapping endpoint is down at `t` since the start: down for the last `down`
/// of every `every`.
pub fn is_down(flap: Option<crate::scenario::Flap>, t: Duration) -> bool {
    flap.is_some_and(|f| {
        let phase = t.as_nanos() % f.every.as_nanos();
        phase >= (f.every - f.down).as_nanos()
    })
}

/// Why a connection is dropped without an answer.
#[derive(Debug)]
struct Drop;

impl std::fmt::Display for Drop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection reset by the simulated endpoint")
    }
}

impl std::error::Error for Drop {}

fn reply(status: StatusCode, retry_after: Option<Duration>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    if let Some(d) = retry_after
        && let Ok(v) = http::HeaderValue::from_str(&d.as_secs().max(1).to_string())
    {
        r.headers_mut().insert(http::header::RETRY_AFTER, v);
    }
    r
}

impl Sim {
    pub async fn start(groups: &[EndpointGroup], tally: Arc<Tally>) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stop_rx) = watch::channel(false);
        let now = Instant::now();
        let shared = Arc::new(Shared {
            groups: groups
                .iter()
                .map(|g| Group {
                    latency: Sampler::new(&g.latency),
                    counters: Counters::default(),
                    buckets: match g.rate_limit_per_s {
                        Some(rate) => (0..g.count)
                            .map(|_| Mutex::new((rate.max(1.0), now)))
                            .collect(),
                        None => Vec::new(),
                    },
                    spec: g.clone(),
                })
                .collect(),
            tally,
            start: now,
            stop: stop_rx.clone(),
        });
        let task = tokio::spawn(accept(listener, shared.clone(), stop_rx));
        Ok(Self {
            addr,
            shared,
            stop,
            task,
        })
    }

    /// The URL of instance `i` of group `g` (indexes into the scenario's endpoints).
    pub fn url(&self, group: usize, instance: u32) -> String {
        format!("http://{}/ep/{group}/{instance}", self.addr)
    }

    pub fn counts(&self) -> Vec<GroupCounts> {
        self.shared
            .groups
            .iter()
            .map(|g| {
                let c = &g.counters;
                let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
                let (e2e_p50_ms, e2e_p99_ms) = c.e2e.p50_p99_ms();
                GroupCounts {
                    e2e_p50_ms,
                    e2e_p99_ms,
                    name: g.spec.name.clone(),
                    requests: l(&c.requests),
                    ok: l(&c.ok),
                    duplicates: l(&c.duplicates),
                    errors: l(&c.errors),
                    throttled: l(&c.throttled),
                    rate_limited: l(&c.rate_limited),
                    hung: l(&c.hung),
                    reset: l(&c.reset),
                    down: l(&c.down),
                }
            })
            .collect()
    }

    /// Stops accepting and releases every hanging request.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conns = tokio::task::JoinSet::new();
    let mut n = 0u64;
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(s) => s,
                // Out of file descriptors and the like: back off, keep serving.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let _ = stream.set_nodelay(true);
        n += 1;
        let shared = shared.clone();
        let seed = n;
        conns.spawn(async move {
            let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(seed)));
            let service = hyper::service::service_fn(move |req| {
                let (shared, rng) = (shared.clone(), rng.clone());
                async move { handle(&shared, &rng, req).await }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while conns.try_join_next().is_some() {}
    }
    conns.abort_all();
}

async fn handle(
    shared: &Shared,
    rng: &Mutex<StdRng>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Drop> {
    let mut parts = req.uri().path().trim_start_matches("/ep/").split('/');
    let group = parts.next().and_then(|g| g.parse::<usize>().ok());
    let instance = parts.next().and_then(|i| i.parse::<usize>().ok());
    let (Some(group), Some(instance)) = (group, instance) else {
        return Ok(reply(StatusCode::NOT_FOUND, None));
    };
    let Some(g) = shared.groups.get(group) else {
        return Ok(reply(StatusCode::NOT_FOUND, None));
    };
    let c = &g.counters;
    c.requests.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    if is_down(g.spec.flap, now - shared.start) {
        c.down.fetch_add(1, Ordering::Relaxed);
        return Err(Drop);
    }
    if let Some(rate) = g.spec.rate_limit_per_s
        && let Some(bucket) = g.buckets.get(instance)
    {
        let mut b = bucket.lock().unwrap_or_else(|p| p.into_inner());
        let burst = rate.max(1.0);
        b.0 = (b.0 + (now - b.1).as_secs_f64() * rate).min(burst);
        b.1 = now;
        if b.0 < 1.0 {
            c.rate_limited.fetch_add(1, Ordering::Relaxed);
            return Ok(reply(
                StatusCode::TOO_MANY_REQUESTS,
                Some(Duration::from_secs(1)),
            ));
        }
        b.0 -= 1.0;
    }
    let (u, latency) = {
        let mut rng = rng.lock().unwrap_or_else(|p| p.into_inner());
        let u: f64 = rand::RngExt::random(&mut *rng);
        (u, g.latency.sample(&mut *rng))
    };
    // `[ordered]`: the delivery's place in its lane, checked when it is taken (2xx).
    let lane = req
        .headers()
        .get("webhook-sequence")
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .map(|seq| {
            let key = req
                .headers()
                .get("hookd-ordering-key")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned();
            (key, seq)
        });
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(Drop),
    };
    match act(&g.spec, u) {
        Act::Reset => {
            c.reset.fetch_add(1, Ordering::Relaxed);
            Err(Drop)
        }
        Act::Hang => {
            c.hung.fetch_add(1, Ordering::Relaxed);
            // Until hookd gives up (its timeout closes the connection) or the run ends.
            let mut stop = shared.stop.clone();
            let _ = stop.wait_for(|s| *s).await;
            Err(Drop)
        }
        Act::Throttle => {
            c.throttled.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(latency).await;
            let status = StatusCode::from_u16(g.spec.throttle_status)
                .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
            Ok(reply(status, Some(g.spec.retry_after)))
        }
        Act::Error => {
            c.errors.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(latency).await;
            let status = StatusCode::from_u16(g.spec.error_status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            Ok(reply(status, None))
        }
        Act::Ok => {
            tokio::time::sleep(latency).await;
            c.ok.fetch_add(1, Ordering::Relaxed);
            let receiver = crate::tally::receiver(Some((group, instance)), "");
            if let Some((key, seq)) = &lane {
                shared.tally.in_lane(&receiver, key, *seq);
            }
            if c.e2e.delivered(shared.tally.delivered_at(&body, &receiver)) {
                c.duplicates.fetch_add(1, Ordering::Relaxed);
            }
            Ok(reply(StatusCode::OK, None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Flap;

    #[test]
    fn flapping_is_down_at_the_end_of_each_period() {
        let f = Some(Flap {
            down: Duration::from_secs(2),
            every: Duration::from_secs(10),
        });
        let at = |s: f64| is_down(f, Duration::from_secs_f64(s));
        assert!(!at(0.0) && !at(7.9) && at(8.0) && at(9.9) && !at(10.0) && at(19.0));
        assert!(!is_down(None, Duration::from_secs(9)));
    }

    #[test]
    fn behaviours_split_the_draw() {
        let scenario = crate::scenario::Scenario::parse(
            "name = \"t\"\n[traffic]\nmode = \"open\"\nrate = 1\n[[endpoints]]\nname = \"a\"\n",
        )
        .unwrap();
        let mut g = scenario.endpoints[0].clone();
        g.reset_rate = 0.1;
        g.hang_rate = 0.1;
        g.throttle_rate = 0.1;
        g.error_rate = 0.1;
        assert_eq!(act(&g, 0.05), Act::Reset);
        assert_eq!(act(&g, 0.15), Act::Hang);
        assert_eq!(act(&g, 0.25), Act::Throttle);
        assert_eq!(act(&g, 0.35), Act::Error);
        assert_eq!(act(&g, 0.45), Act::Ok);
    }
}
