//! The `noisy-neighbour` scenario (issue #52): many tenants at a steady rate, then the same
//! again with one more tenant bursting far past its quota into endpoints that hang or
//! answer slowly. What it answers: do the other tenants notice (their delivery p50 / p99
//! with and without the noisy one, in one run, on one hookd), does the noisy tenant still
//! get its share (its quota's worth of events accepted and delivered to its slow
//! endpoints), and is nothing lost (every acknowledged event delivered, or for the noisy
//! tenant delivered or dead-lettered after its hanging endpoints' last attempt).
//!
//! A scenario file of this kind has a `[noisy]` table (and no `[traffic]`): see
//! `scenarios/noisy-neighbour.toml`. The run has two legs of `leg` each, without the noisy
//! tenant and then with it, and a drain.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use hookd_proto::v1 as pb;
use hookd_proto::v1::hookd_client::HookdClient;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::dist::{Latency, Sampler};
use crate::scenario::duration;
use crate::target::{Meter, Target};

/// A noisy-neighbour scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Each leg's length: first without the noisy tenant, then with it.
    #[serde(default = "defaults::leg", deserialize_with = "duration")]
    pub leg: Duration,
    /// After the second leg, how long every acknowledged event may take to be delivered
    /// (or, the noisy tenant's, dead-lettered).
    #[serde(default = "defaults::drain", deserialize_with = "duration")]
    pub drain_timeout: Duration,
    #[serde(default = "defaults::seed")]
    pub seed: u64,
    pub tenants: Tenants,
    pub noisy: Noisy,
    #[serde(default)]
    pub slo: NoisySlo,
    #[serde(default)]
    pub hookd: crate::scenario::HookdSettings,
}

/// The steady tenants.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenants {
    /// How many (the noisy one comes on top).
    pub count: u32,
    /// Endpoints per tenant; each event goes to one of them, in turn.
    #[serde(default = "defaults::endpoints")]
    pub endpoints: u32,
    /// Events per second, per tenant.
    pub rate: f64,
    /// Every tenant's quota of events per second (the noisy one's too).
    pub quota_per_second: u64,
    /// How long their endpoints take to answer.
    #[serde(default)]
    pub latency: Latency,
    /// The share of their answers that close the connection (`Connection: close`), as
    /// receivers behind load balancers that recycle connections do: each such delivery's
    /// next one needs a new connection.
    #[serde(default)]
    pub close_rate: crate::scenario::Fraction,
    #[serde(default = "defaults::payload")]
    pub payload_bytes: usize,
    /// gRPC connections the steady tenants' calls are spread over.
    #[serde(default = "defaults::connections")]
    pub connections: usize,
}

/// The noisy tenant.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Noisy {
    /// It offers this many times its quota.
    pub burst: f64,
    /// Events per EnqueueBatch call.
    #[serde(default = "defaults::batch")]
    pub batch: usize,
    /// Its endpoints: the first half hang until hookd's timeout, the rest answer slowly.
    pub endpoints: u32,
    /// How long its slow endpoints take.
    pub slow: Latency,
    /// Its endpoints' attempt timeout, attempts and backoff (hookd's settings).
    pub timeout_ms: u64,
    pub max_attempts: u32,
    pub retry_base_ms: u64,
    pub retry_cap_ms: u64,
}

/// What the run is held to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoisySlo {
    /// The other tenants' delivery p99 with the noisy tenant over without it, at most.
    #[serde(default = "defaults::p99_ratio")]
    pub p99_ratio: f64,
    /// The noisy tenant's accepted events per second over its quota, at least.
    #[serde(default = "defaults::min_share")]
    pub min_share: f64,
}

impl Default for NoisySlo {
    fn default() -> Self {
        Self {
            p99_ratio: defaults::p99_ratio(),
            min_share: defaults::min_share(),
        }
    }
}

mod defaults {
    use std::time::Duration;
    pub(super) fn leg() -> Duration {
        Duration::from_secs(20)
    }
    pub(super) fn drain() -> Duration {
        Duration::from_secs(60)
    }
    pub(super) fn seed() -> u64 {
        1
    }
    pub(super) fn endpoints() -> u32 {
        2
    }
    pub(super) fn payload() -> usize {
        256
    }
    pub(super) fn connections() -> usize {
        4
    }
    pub(super) fn batch() -> usize {
        50
    }
    pub(super) fn p99_ratio() -> f64 {
        1.5
    }
    pub(super) fn min_share() -> f64 {
        0.9
    }
}

impl Spec {
    /// A file of this kind: a TOML table with `[noisy]`.
    pub fn is_noisy(text: &str) -> bool {
        text.parse::<toml::Table>()
            .is_ok_and(|t| t.contains_key("noisy"))
    }

    /// Reads and checks a scenario file (the key and line of a bad value are named).
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        let spec: Self = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        spec.check()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(spec)
    }

    fn check(&self) -> Result<(), String> {
        let t = &self.tenants;
        if !(1..=1_000).contains(&t.count) {
            return Err(format!(
                "tenants.count is {}; it must be 1 to 1000",
                t.count
            ));
        }
        if !(1..=100).contains(&t.endpoints) {
            return Err(format!(
                "tenants.endpoints is {}; it must be 1 to 100",
                t.endpoints
            ));
        }
        if !(t.rate > 0.0 && t.rate.is_finite()) {
            return Err(format!("tenants.rate is {}; it must be above 0", t.rate));
        }
        if (t.quota_per_second as f64) < t.rate {
            return Err(format!(
                "tenants.quota_per_second ({}) is under tenants.rate ({}): the steady tenants would be refused",
                t.quota_per_second, t.rate
            ));
        }
        if !(16..=1 << 20).contains(&t.payload_bytes) {
            return Err("tenants.payload_bytes must be 16 to 1 MiB".into());
        }
        if !(1..=64).contains(&t.connections) {
            return Err("tenants.connections must be 1 to 64".into());
        }
        let n = &self.noisy;
        if !(n.burst >= 1.0 && n.burst.is_finite()) {
            return Err(format!("noisy.burst is {}; it must be at least 1", n.burst));
        }
        if !(1..=1_000).contains(&n.batch) {
            return Err("noisy.batch must be 1 to 1000".into());
        }
        if !(2..=100).contains(&n.endpoints) {
            return Err("noisy.endpoints must be 2 to 100 (half hang, half are slow)".into());
        }
        if n.timeout_ms == 0 || n.max_attempts == 0 {
            return Err("noisy.timeout_ms and noisy.max_attempts must be above 0".into());
        }
        if !(self.slo.p99_ratio > 0.0 && self.slo.min_share >= 0.0) {
            return Err("slo.p99_ratio must be above 0 and slo.min_share 0 or more".into());
        }
        Ok(())
    }

    /// The same scenario at `scale` times the offered rates.
    pub fn scaled(mut self, scale: f64) -> Self {
        self.tenants.rate *= scale;
        self.tenants.quota_per_second =
            ((self.tenants.quota_per_second as f64 * scale).ceil() as u64).max(1);
        self
    }

    fn hanging(&self) -> u32 {
        self.noisy.endpoints / 2
    }
}

/// One leg's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Leg {
    pub name: String,
    pub seconds: f64,
    /// The steady tenants: events acknowledged, and their delivery latency (from the
    /// call's intended time to the endpoint's receipt).
    pub others_acked: u64,
    pub others_refused: u64,
    pub others_p50_ms: f64,
    pub others_p99_ms: f64,
    pub others_max_ms: f64,
    /// The noisy tenant: offered, accepted and refused events per second.
    pub noisy_offered_per_s: f64,
    pub noisy_accepted_per_s: f64,
    pub noisy_refused_per_s: f64,
    /// Its events delivered to its slow endpoints during the leg, per second.
    pub noisy_delivered_per_s: f64,
    /// hookd's CPU over the leg (100 = one core), when the tool started it.
    pub hookd_cpu_pct: Option<f64>,
}

/// The run's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct NoisyReport {
    pub scenario: String,
    pub description: String,
    pub fsync_per_s: Option<f64>,
    pub legs: Vec<Leg>,
    /// Others' p99 with the noisy tenant over without it.
    pub p99_ratio: f64,
    pub p99_ratio_limit: f64,
    /// The noisy tenant's accepted events per second over its quota.
    pub noisy_share: f64,
    pub noisy_share_limit: f64,
    pub others_acked: u64,
    pub others_delivered: u64,
    pub noisy_acked: u64,
    pub noisy_delivered: u64,
    pub noisy_dead_lettered: u64,
    /// Acknowledged and then neither delivered nor (the noisy tenant's) dead-lettered.
    pub lost: u64,
    /// The steady tenants' events still held by hookd when the drain ended.
    pub undelivered: u64,
    /// The noisy tenant's still held by hookd then (waiting behind an open breaker).
    pub noisy_held: u64,
    /// The steady tenants' deliveries slower than 10 ms, by the second of the run (from
    /// the tool's start) their call was meant for; seconds with none left out.
    pub others_slow_by_second: std::collections::BTreeMap<u64, u64>,
    /// Deliveries of an event the endpoint had already taken (at-least-once), and of
    /// payloads that are not this run's.
    pub duplicates: u64,
    pub unexpected: u64,
    pub passed_checker: bool,
    pub passed_slo: bool,
}

impl NoisyReport {
    pub fn table(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "{}: {}", self.scenario, self.description);
        if let Some(f) = self.fsync_per_s {
            let _ = writeln!(s, "fsync probe before: {f:.0}/s");
        }
        let _ = writeln!(
            s,
            "{:<16} {:>10} {:>9} {:>9} {:>9} {:>13} {:>13} {:>13} {:>14} {:>9}",
            "leg",
            "others ok",
            "p50 ms",
            "p99 ms",
            "max ms",
            "noisy off/s",
            "noisy acc/s",
            "noisy ref/s",
            "noisy deliv/s",
            "hookd %"
        );
        for l in &self.legs {
            let _ = writeln!(
                s,
                "{:<16} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>13.0} {:>13.1} {:>13.0} {:>14.1} {:>9}",
                l.name,
                l.others_acked,
                l.others_p50_ms,
                l.others_p99_ms,
                l.others_max_ms,
                l.noisy_offered_per_s,
                l.noisy_accepted_per_s,
                l.noisy_refused_per_s,
                l.noisy_delivered_per_s,
                l.hookd_cpu_pct.map_or("-".into(), |c| format!("{c:.0}")),
            );
        }
        let _ = writeln!(
            s,
            "others' p99 with / without the noisy tenant: {:.2} (at most {:.2})",
            self.p99_ratio, self.p99_ratio_limit
        );
        let _ = writeln!(
            s,
            "noisy tenant's accepted rate / its quota: {:.2} (at least {:.2})",
            self.noisy_share, self.noisy_share_limit
        );
        if !self.others_slow_by_second.is_empty() {
            let seconds: Vec<String> = self
                .others_slow_by_second
                .iter()
                .map(|(s, n)| format!("{s}s:{n}"))
                .collect();
            let _ = writeln!(
                s,
                "others' deliveries over 10 ms, by second of the run: {}",
                seconds.join(" ")
            );
        }
        let _ = writeln!(
            s,
            "checker: others acked {} delivered {}; noisy acked {} delivered {} dead-lettered {} held {}; lost {}  undelivered {}  duplicates {}  unexpected {}",
            self.others_acked,
            self.others_delivered,
            self.noisy_acked,
            self.noisy_delivered,
            self.noisy_dead_lettered,
            self.noisy_held,
            self.lost,
            self.undelivered,
            self.duplicates,
            self.unexpected
        );
        s
    }

    pub fn write(&self, dir: &Path) -> anyhow::Result<std::path::PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("report.json");
        std::fs::write(&path, serde_json::to_vec_pretty(self)?)?;
        std::fs::write(dir.join("report.txt"), self.table())?;
        Ok(path)
    }
}

/// One event the run sent.
#[derive(Debug, Clone, Copy, Default)]
struct Event {
    /// The steady tenant's index, or `NOISY`.
    tenant: u32,
    leg: u8,
    acked: bool,
    delivered: bool,
}

const NOISY: u32 = u32::MAX;

/// A steady delivery slower than this is counted in the report's timeline of slow ones.
const SLOW_MS: u64 = 10;

/// What the run keeps: every event, and the latencies the endpoints saw.
struct Book {
    start: Instant,
    events: Mutex<Vec<Event>>,
    others: [Mutex<Histogram<u64>>; 2],
    /// The steady tenants' deliveries slower than [`SLOW_MS`], by the second of the run
    /// their call was meant for: where in time a tail comes from.
    slow_by_second: Mutex<std::collections::BTreeMap<u64, u64>>,
    noisy_delivered: [AtomicU64; 2],
    duplicates: AtomicU64,
    unexpected: AtomicU64,
}

impl Book {
    fn new() -> Self {
        let h = || Mutex::new(crate::tally::histogram());
        Self {
            start: Instant::now(),
            events: Mutex::new(Vec::new()),
            others: [h(), h()],
            slow_by_second: Mutex::default(),
            noisy_delivered: [AtomicU64::new(0), AtomicU64::new(0)],
            duplicates: AtomicU64::new(0),
            unexpected: AtomicU64::new(0),
        }
    }

    fn events(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn issue(&self, tenant: u32, leg: u8) -> u64 {
        let mut e = self.events();
        e.push(Event {
            tenant,
            leg,
            ..Default::default()
        });
        e.len() as u64 - 1
    }

    fn acked(&self, seq: u64) {
        if let Some(e) = self.events().get_mut(seq as usize) {
            e.acked = true;
        }
    }

    /// An endpoint took the event of `payload` now.
    fn delivered(&self, payload: &[u8]) {
        let Some((seq, intended_ns)) = crate::tally::decode(payload) else {
            self.unexpected.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let now_ns = self.start.elapsed().as_nanos() as u64;
        let ev = {
            let mut events = self.events();
            let Some(e) = events.get_mut(seq as usize) else {
                drop(events);
                self.unexpected.fetch_add(1, Ordering::Relaxed);
                return;
            };
            if e.delivered {
                drop(events);
                self.duplicates.fetch_add(1, Ordering::Relaxed);
                return;
            }
            e.delivered = true;
            *e
        };
        let leg = usize::from(ev.leg.min(1));
        if ev.tenant == NOISY {
            self.noisy_delivered[leg].fetch_add(1, Ordering::Relaxed);
        } else {
            let us = now_ns.saturating_sub(intended_ns) / 1_000;
            if us > SLOW_MS * 1_000 {
                let mut slow = self
                    .slow_by_second
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                *slow.entry(intended_ns / 1_000_000_000).or_default() += 1;
            }
            let mut h = self.others[leg].lock().unwrap_or_else(|p| p.into_inner());
            let _ = h.record(us.max(1));
        }
    }
}

/// The endpoints: `/t/{tenant}/{endpoint}` on one loopback listener; the noisy tenant's
/// are `/t/noisy/{endpoint}`.
struct Sink {
    addr: SocketAddr,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

struct SinkBehaviour {
    close_rate: f64,
    fast: Sampler,
    slow: Sampler,
    hanging: u32,
    book: Arc<Book>,
}

impl Sink {
    async fn start(b: SinkBehaviour) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let b = Arc::new(b);
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            let mut n = 0u64;
            loop {
                let stream = tokio::select! {
                    r = listener.accept() => match r {
                        Ok((s, _)) => s,
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    },
                    _ = stopped.changed() => break,
                };
                let _ = stream.set_nodelay(true);
                n += 1;
                let b = b.clone();
                let rng = Arc::new(Mutex::new(StdRng::seed_from_u64(n)));
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (b, rng) = (b.clone(), rng.clone());
                        async move { handle(&b, &rng, req).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                while conns.try_join_next().is_some() {}
            }
            conns.abort_all();
        });
        Ok(Self { addr, stop, task })
    }

    fn url(&self, tenant: &str, endpoint: u32) -> String {
        format!("http://{}/t/{tenant}/{endpoint}", self.addr)
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn handle(
    b: &SinkBehaviour,
    rng: &Mutex<StdRng>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    let path = req.uri().path().to_owned();
    let mut parts = path.trim_start_matches("/t/").split('/');
    let tenant = parts.next().unwrap_or_default().to_owned();
    let endpoint: u32 = parts.next().and_then(|e| e.parse().ok()).unwrap_or(0);
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return Ok(Response::new(Full::new(Bytes::new())));
    };
    let noisy = tenant == "noisy";
    if noisy && endpoint < b.hanging {
        // Never answers: hookd's timeout ends the attempt (the run's stop ends the wait).
        tokio::time::sleep(Duration::from_secs(3_600)).await;
    }
    let (latency, close) = {
        let mut rng = rng.lock().unwrap_or_else(|p| p.into_inner());
        if noisy {
            (b.slow.sample(&mut *rng), false)
        } else {
            let u: f64 = rand::RngExt::random(&mut *rng);
            (b.fast.sample(&mut *rng), u < b.close_rate)
        }
    };
    b.book.delivered(&body);
    tokio::time::sleep(latency).await;
    let mut r = Response::new(Full::new(Bytes::from_static(b"ok")));
    *r.status_mut() = StatusCode::OK;
    if close {
        r.headers_mut().insert(
            hyper::header::CONNECTION,
            hyper::header::HeaderValue::from_static("close"),
        );
    }
    Ok(r)
}

fn steady_name(i: u32) -> String {
    format!("steady-{i}")
}

fn with_tenant<T>(message: T, tenant: &str) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    if let Ok(v) = tenant.parse() {
        r.metadata_mut().insert("x-hookd-tenant", v);
    }
    r
}

/// Makes the tenants (each with its quota) and their endpoints.
async fn setup(s: &Spec, admin: &mut HookdClient<Channel>, sink: &Sink) -> anyhow::Result<()> {
    let quota = pb::TenantQuota {
        max_events_per_second: s.tenants.quota_per_second,
        ..Default::default()
    };
    let names: Vec<String> = (0..s.tenants.count)
        .map(steady_name)
        .chain(["noisy".to_owned()])
        .collect();
    for name in &names {
        admin
            .create_tenant(pb::CreateTenantRequest {
                tenant: Some(pb::Tenant {
                    name: name.clone(),
                    quota: Some(quota),
                    ..Default::default()
                }),
            })
            .await
            .with_context(|| format!("creating tenant {name}"))?;
    }
    for i in 0..s.tenants.count {
        let tenant = steady_name(i);
        for e in 0..s.tenants.endpoints {
            let endpoint = pb::Endpoint {
                name: format!("e{e}"),
                url: sink.url(&tenant, e),
                ..Default::default()
            };
            admin
                .put_endpoint(with_tenant(
                    pb::PutEndpointRequest {
                        endpoint: Some(endpoint),
                    },
                    &tenant,
                ))
                .await
                .with_context(|| format!("endpoint e{e} of {tenant}"))?;
        }
    }
    let n = &s.noisy;
    for e in 0..n.endpoints {
        let endpoint = pb::Endpoint {
            name: format!("e{e}"),
            url: sink.url("noisy", e),
            timeout_ms: n.timeout_ms,
            max_attempts: n.max_attempts,
            retry_base_ms: n.retry_base_ms,
            retry_cap_ms: n.retry_cap_ms,
            ..Default::default()
        };
        admin
            .put_endpoint(with_tenant(
                pb::PutEndpointRequest {
                    endpoint: Some(endpoint),
                },
                "noisy",
            ))
            .await
            .with_context(|| format!("endpoint e{e} of the noisy tenant"))?;
    }
    Ok(())
}

/// Counts of one leg's calls.
#[derive(Default)]
struct Calls {
    others_acked: AtomicU64,
    others_refused: AtomicU64,
    noisy_offered: AtomicU64,
    noisy_accepted: AtomicU64,
    noisy_refused: AtomicU64,
}

/// The steady tenants' events for `length`: `count x rate` per second in all, evenly
/// spaced, each tenant's in turn over its endpoints. Latency counts from each event's
/// intended time, so a late call is not hidden (coordinated omission).
async fn steady(
    s: &Spec,
    clients: &[HookdClient<Channel>],
    book: &Arc<Book>,
    calls: &Arc<Calls>,
    leg: u8,
    length: Duration,
) {
    let t = &s.tenants;
    let total = t.rate * f64::from(t.count);
    let interval = Duration::from_secs_f64(1.0 / total);
    let n = (length.as_secs_f64() * total) as u64;
    let outstanding = Arc::new(tokio::sync::Semaphore::new(10_000));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let intended = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(intended).await;
        let tenant_ix = (i % u64::from(t.count)) as u32;
        let endpoint = (i / u64::from(t.count)) % u64::from(t.endpoints);
        let seq = book.issue(tenant_ix, leg);
        let intended_ns = intended.duration_since(book.start).as_nanos() as u64;
        let payload = crate::tally::encode(seq, intended_ns, t.payload_bytes);
        let mut client = clients[i as usize % clients.len()].clone();
        let (book, calls) = (book.clone(), calls.clone());
        let Ok(permit) = outstanding.clone().acquire_owned().await else {
            break;
        };
        tasks.spawn(async move {
            let _permit = permit;
            let request = with_tenant(
                pb::EnqueueRequest {
                    destination: Some(pb::enqueue_request::Destination::Endpoint(format!(
                        "e{endpoint}"
                    ))),
                    payload,
                    ..Default::default()
                },
                &steady_name(tenant_ix),
            );
            match client.enqueue(request).await {
                Ok(_) => {
                    book.acked(seq);
                    calls.others_acked.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => {
                    calls.others_refused.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// The noisy tenant's burst for `length`: `burst x quota` events per second in batches,
/// over its endpoints in turn.
async fn noisy(
    s: &Spec,
    client: HookdClient<Channel>,
    book: &Arc<Book>,
    calls: &Arc<Calls>,
    length: Duration,
) {
    let n = &s.noisy;
    let per_s = n.burst * s.tenants.quota_per_second as f64;
    let batches_per_s = (per_s / n.batch as f64).max(1.0);
    let interval = Duration::from_secs_f64(1.0 / batches_per_s);
    let count = (length.as_secs_f64() * batches_per_s) as u64;
    let start = Instant::now();
    let outstanding = Arc::new(tokio::sync::Semaphore::new(256));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..count {
        // Each batch starts one endpoint further on: its quota admits the first items.
        let mut next_endpoint = (i % u64::from(n.endpoints)) as u32;
        tokio::time::sleep_until(start + interval.mul_f64(i as f64)).await;
        let intended_ns = Instant::now().duration_since(book.start).as_nanos() as u64;
        let mut seqs = Vec::with_capacity(n.batch);
        let mut events = Vec::with_capacity(n.batch);
        for _ in 0..n.batch {
            let seq = book.issue(NOISY, 1);
            seqs.push(seq);
            events.push(pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Endpoint(format!(
                    "e{next_endpoint}"
                ))),
                payload: crate::tally::encode(seq, intended_ns, 64),
                ..Default::default()
            });
            next_endpoint = (next_endpoint + 1) % n.endpoints;
        }
        calls
            .noisy_offered
            .fetch_add(n.batch as u64, Ordering::Relaxed);
        let mut client = client.clone();
        let (book, calls) = (book.clone(), calls.clone());
        let Ok(permit) = outstanding.clone().acquire_owned().await else {
            break;
        };
        tasks.spawn(async move {
            let _permit = permit;
            let request = with_tenant(pb::EnqueueBatchRequest { events }, "noisy");
            match client.enqueue_batch(request).await {
                Ok(r) => {
                    for (seq, result) in seqs.iter().zip(r.into_inner().results) {
                        match result.result {
                            Some(pb::enqueue_result::Result::Ok(_)) => {
                                book.acked(*seq);
                                calls.noisy_accepted.fetch_add(1, Ordering::Relaxed);
                            }
                            _ => {
                                calls.noisy_refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                Err(_) => {
                    calls
                        .noisy_refused
                        .fetch_add(seqs.len() as u64, Ordering::Relaxed);
                }
            }
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
}

/// The noisy tenant's messages still moving: in flight, awaiting a retry, or pending at a
/// slow endpoint (those at a hanging endpoint wait behind its breaker once it opens).
async fn noisy_moving(admin: &mut HookdClient<Channel>, hanging: u32) -> Option<u64> {
    let request = with_tenant(
        pb::StatsRequest {
            page_size: 1_000,
            ..Default::default()
        },
        "noisy",
    );
    let r = admin.stats(request).await.ok()?.into_inner();
    let total = r.total?;
    let slow_pending: u64 = r
        .destinations
        .iter()
        .filter(|d| {
            d.destination
                .rsplit_once(":e")
                .and_then(|(_, n)| n.parse::<u32>().ok())
                .is_some_and(|n| n >= hanging)
        })
        .map(|d| d.pending)
        .sum();
    Some(total.in_flight + total.awaiting_retry + slow_pending)
}

/// A tenant's messages (`None`: the whole hookd's): (live, dead-lettered).
async fn counts(admin: &mut HookdClient<Channel>, tenant: Option<&str>) -> Option<(u64, u64)> {
    let request = pb::StatsRequest {
        page_size: 1,
        ..Default::default()
    };
    let request = match tenant {
        Some(t) => with_tenant(request, t),
        None => tonic::Request::new(request),
    };
    let t = admin.stats(request).await.ok()?.into_inner().total?;
    Some((t.pending + t.awaiting_retry + t.in_flight, t.dead_letter))
}

fn p(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() {
        0.0
    } else {
        h.value_at_quantile(q) as f64 / 1_000.0
    }
}

/// Options of a run from the command line.
#[derive(Debug, Clone, Default)]
pub struct NoisyOptions {
    /// Overrides the scenario's `leg`.
    pub leg: Option<Duration>,
    /// Where hookd's log goes.
    pub hookd_log: Option<std::path::PathBuf>,
}

/// Runs the scenario on a hookd it starts.
pub async fn run(s: &Spec, o: &NoisyOptions) -> anyhow::Result<NoisyReport> {
    let leg_length = o.leg.unwrap_or(s.leg);
    let target = Target::spawn(&s.hookd.config, o.hookd_log.as_deref()).await?;
    let fsync_per_s = target
        .data_dir
        .as_deref()
        .and_then(|d| crate::host::baseline(d, Duration::from_secs(1), 20_000).ok())
        .map(|b| b.per_s);
    let book = Arc::new(Book::new());
    let sink = Sink::start(SinkBehaviour {
        close_rate: s.tenants.close_rate.0,
        fast: Sampler::new(&s.tenants.latency),
        slow: Sampler::new(&s.noisy.slow),
        hanging: s.hanging(),
        book: book.clone(),
    })
    .await?;
    let mut clients = Vec::new();
    for _ in 0..s.tenants.connections + 1 {
        let ch = hookd_client::endpoint(&target.grpc)?.connect().await?;
        clients.push(HookdClient::new(ch));
    }
    let noisy_client = clients.pop().context("a client")?;
    let mut admin = clients[0].clone();
    setup(s, &mut admin, &sink).await?;
    let mut meter = Meter::new(target.pid);
    let mut legs = Vec::new();
    for (leg, name) in [(0u8, "without noisy"), (1u8, "with noisy")] {
        let calls = Arc::new(Calls::default());
        let started = Instant::now();
        let delivered_before = book.noisy_delivered[1].load(Ordering::Relaxed);
        if leg == 0 {
            steady(s, &clients, &book, &calls, leg, leg_length).await;
        } else {
            tokio::join!(
                steady(s, &clients, &book, &calls, leg, leg_length),
                noisy(s, noisy_client.clone(), &book, &calls, leg_length),
            );
        }
        let secs = started.elapsed().as_secs_f64().max(1e-9);
        let (cpu, _) = meter.read();
        let delivered = book.noisy_delivered[1].load(Ordering::Relaxed) - delivered_before;
        legs.push((
            leg,
            Leg {
                name: name.into(),
                seconds: secs,
                others_acked: calls.others_acked.load(Ordering::Relaxed),
                others_refused: calls.others_refused.load(Ordering::Relaxed),
                noisy_offered_per_s: calls.noisy_offered.load(Ordering::Relaxed) as f64 / secs,
                noisy_accepted_per_s: calls.noisy_accepted.load(Ordering::Relaxed) as f64 / secs,
                noisy_refused_per_s: calls.noisy_refused.load(Ordering::Relaxed) as f64 / secs,
                noisy_delivered_per_s: delivered as f64 / secs,
                hookd_cpu_pct: cpu,
                ..Default::default()
            },
        ));
    }
    // Drain: every steady event delivered, and nothing of the noisy tenant's moving.
    let deadline = Instant::now() + s.drain_timeout;
    loop {
        let others_left = book
            .events()
            .iter()
            .filter(|e| e.tenant != NOISY && e.acked && !e.delivered)
            .count();
        let noisy_moving = noisy_moving(&mut admin, s.hanging())
            .await
            .unwrap_or(u64::MAX);
        if (others_left == 0 && noisy_moving == 0) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Latencies include deliveries that came in during the drain.
    let mut out_legs = Vec::new();
    for (leg, mut l) in legs {
        let h = book.others[usize::from(leg)]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        l.others_p50_ms = p(&h, 0.5);
        l.others_p99_ms = p(&h, 0.99);
        l.others_max_ms = h.max() as f64 / 1_000.0;
        out_legs.push(l);
    }
    let (noisy_live, noisy_dead) = counts(&mut admin, Some("noisy")).await.unwrap_or((0, 0));
    let (all_live, _) = counts(&mut admin, None).await.unwrap_or((0, 0));
    let others_live = all_live.saturating_sub(noisy_live);
    let mut tally: HashMap<(bool, bool, bool), u64> = HashMap::new();
    for e in book.events().iter() {
        *tally
            .entry((e.tenant == NOISY, e.acked, e.delivered))
            .or_default() += 1;
    }
    let get = |k: (bool, bool, bool)| tally.get(&k).copied().unwrap_or(0);
    let others_acked = get((false, true, true)) + get((false, true, false));
    let others_delivered = get((false, true, true));
    let noisy_acked = get((true, true, true)) + get((true, true, false));
    let noisy_delivered = get((true, true, true));
    // Acknowledged, not delivered: still held by hookd (undelivered), dead-lettered (the
    // noisy tenant's hanging endpoints), or lost.
    let lost = get((false, true, false)).saturating_sub(others_live)
        + get((true, true, false)).saturating_sub(noisy_dead + noisy_live);
    // The noisy tenant's events that hookd still holds (at a hanging endpoint whose breaker
    // is open, say) are not lost; the steady tenants' must all be delivered.
    let undelivered = others_live;
    sink.stop().await;
    target.stop().await?;
    let without = &out_legs[0];
    let with = &out_legs[1];
    let p99_ratio = with.others_p99_ms / without.others_p99_ms.max(1e-9);
    let noisy_share = with.noisy_accepted_per_s / (s.tenants.quota_per_second as f64).max(1e-9);
    let duplicates = book.duplicates.load(Ordering::Relaxed);
    let unexpected = book.unexpected.load(Ordering::Relaxed);
    let passed_checker = lost == 0 && undelivered == 0 && unexpected == 0 && others_acked > 0;
    let passed_slo = p99_ratio <= s.slo.p99_ratio && noisy_share >= s.slo.min_share;
    Ok(NoisyReport {
        scenario: s.name.clone(),
        description: s.description.clone(),
        fsync_per_s,
        legs: out_legs,
        p99_ratio,
        p99_ratio_limit: s.slo.p99_ratio,
        noisy_share,
        noisy_share_limit: s.slo.min_share,
        others_acked,
        others_delivered,
        noisy_acked,
        noisy_delivered,
        noisy_dead_lettered: noisy_dead,
        lost,
        undelivered,
        noisy_held: noisy_live,
        others_slow_by_second: book
            .slow_by_second
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
        duplicates,
        unexpected,
        passed_checker,
        passed_slo,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = r#"
name = "n"
[tenants]
count = 3
rate = 1
quota_per_second = 2
[noisy]
burst = 100
endpoints = 2
slow = { dist = "fixed", ms = 5 }
timeout_ms = 1000
max_attempts = 2
retry_base_ms = 10
retry_cap_ms = 10
"#;

    fn parse(text: &str) -> Result<Spec, String> {
        let spec: Spec = toml::from_str(text).map_err(|e| e.to_string())?;
        spec.check()?;
        Ok(spec)
    }

    #[test]
    fn a_noisy_file_is_told_from_a_traffic_one_and_checked() {
        assert!(Spec::is_noisy(MIN));
        assert!(!Spec::is_noisy(
            "name = \"t\"\n[traffic]\nmode = \"open\"\nrate = 1\n"
        ));
        let s = parse(MIN).unwrap();
        assert_eq!(
            (s.hanging(), s.leg, s.slo.p99_ratio),
            (1, defaults::leg(), 1.5)
        );
        // A quota under the steady rate would refuse the steady tenants.
        let e = parse(&MIN.replace("quota_per_second = 2", "quota_per_second = 0")).unwrap_err();
        assert!(e.contains("quota_per_second"), "{e}");
        // Unknown keys and bad fractions are refused with the key named.
        let e = parse(&MIN.replace("rate = 1\n", "rate = 1\nbogus = 2\n")).unwrap_err();
        assert!(e.contains("bogus"), "{e}");
        let e = parse(&MIN.replace("rate = 1\n", "rate = 1\nclose_rate = 2\n")).unwrap_err();
        assert!(e.contains("fraction"), "{e}");
        // Scaling scales the rates and the quota with them.
        let s = s.scaled(10.0);
        assert_eq!((s.tenants.rate, s.tenants.quota_per_second), (10.0, 20));
    }
}
