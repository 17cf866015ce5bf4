//! One run of a scenario, start to verdict.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hookd_proto::v1 as pb;
use hookd_proto::v1::hookd_client::HookdClient;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::time::Instant;
use tonic::transport::Channel;

use crate::capacity::{self, Step};
use crate::checker::{self, Held};
use crate::drive::{Consumers, Sender, Targets};
use crate::host::{FsyncProbe, HostFigures, HostMeter};
use crate::report::{HookdFigures, Percentiles, Report};
use crate::scenario::{Load, QueueGroup, Scenario, Shape};
use crate::sim::Sim;
use crate::tally::{Enqueue, Resources, Tally};
use crate::target::{Meter, Target};

/// How to run a scenario.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Overrides the scenario's `duration`.
    pub duration: Option<Duration>,
    /// A running hookd (`http://host:port`); `None` starts one.
    pub target: Option<String>,
    /// The running hookd's pid, for its CPU and RSS.
    pub target_pid: Option<u32>,
    /// Draw a progress bar on the terminal.
    pub progress: bool,
    /// Where the fsync probe writes when hookd runs elsewhere (`--target`): a directory on
    /// the disk hookd writes to. A hookd the tool starts is probed in its data directory.
    pub probe_dir: Option<PathBuf>,
    /// Above 0: the hookd the tool starts runs in this process on a disk whose every fsync
    /// takes this many ms longer (a slow disk, emulated).
    pub slow_sync_ms: u64,
    /// Where a hookd the tool starts writes its log (not the terminal); `None`: its log
    /// goes to the tool's standard error.
    pub hookd_log: Option<PathBuf>,
}

async fn channels(addr: &str, n: usize) -> anyhow::Result<Vec<HookdClient<Channel>>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let ch = hookd_client::endpoint(addr)?.connect().await?;
        out.push(HookdClient::new(ch).max_decoding_message_size(64 << 20));
    }
    Ok(out)
}

/// A short id that keeps this run's endpoints, queues and keys apart from other runs'
/// on a shared hookd.
fn run_id() -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "lt{:x}",
        (ns as u64) ^ u64::from(std::process::id()).rotate_left(40)
    )
}

/// Samples the timeline once a second until dropped.
struct Sampler {
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(
        tally: Arc<Tally>,
        pid: Option<u32>,
        probe: Arc<FsyncProbe>,
        bar: Option<ProgressBar>,
    ) -> Self {
        let task = tokio::spawn(async move {
            let mut meter = Meter::new(pid);
            let mut host = HostMeter::new();
            let mut tick = tokio::time::interval_at(
                Instant::now() + Duration::from_secs(1),
                Duration::from_secs(1),
            );
            loop {
                tick.tick().await;
                let (hookd_cpu_pct, hookd_rss_mb) = meter.read();
                let s = tally.tick(Resources {
                    hookd_cpu_pct,
                    hookd_rss_mb,
                    host: host.read(),
                    fsync_ms: probe.take_max(),
                });
                if let Some(bar) = &bar {
                    bar.inc(1);
                    bar.set_message(format!(
                        "{} acked/s  {} delivered/s  enqueue p99 {:.1} ms  e2e p99 {:.1} ms  backlog {}",
                        s.acked,
                        s.delivered,
                        s.enqueue_p99_ms,
                        s.e2e_p99_ms,
                        tally.undelivered()
                    ));
                }
            }
        });
        Self { task }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn bar(len: u64, what: &str, show: bool) -> Option<ProgressBar> {
    if !show {
        return None;
    }
    let b = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} s  {wide_msg}")
    {
        b.set_style(style.progress_chars("=> "));
    }
    b.set_prefix(what.to_owned());
    Some(b)
}

/// Everything set up for a run.
struct World {
    target: Target,
    sim: Sim,
    clients: Vec<HookdClient<Channel>>,
    sender: Sender,
    consumers: Consumers,
    tally: Arc<Tally>,
    /// The fsync probe on hookd's disk, and what the disk did before the traffic.
    probe: Arc<FsyncProbe>,
    host: HostFigures,
}

/// `[fanout]`: one subscription to `topic` per endpoint instance and per queue, named so
/// that their order (hookd's order of a publish's delivery ids) is the tally's slots'.
async fn subscribe(
    admin: &mut HookdClient<Channel>,
    id: &str,
    topic: &str,
    endpoints: &[(Vec<String>, f64)],
    queues: &[(QueueGroup, String)],
    tally: &Tally,
) -> anyhow::Result<crate::drive::FanoutPlan> {
    let mut receivers = Vec::new();
    let mut push = Vec::new();
    let mut subscribers = Vec::new();
    for (gi, (names, _)) in endpoints.iter().enumerate() {
        for (i, name) in names.iter().enumerate() {
            receivers.push(crate::tally::receiver(Some((gi, i)), name));
            push.push(true);
            subscribers.push(pb::subscription::Destination::Endpoint(name.clone()));
        }
    }
    for (_, name) in queues {
        receivers.push(crate::tally::receiver(None, name));
        push.push(false);
        subscribers.push(pb::subscription::Destination::Queue(name.clone()));
    }
    for (slot, destination) in subscribers.into_iter().enumerate() {
        admin
            .put_subscription(pb::PutSubscriptionRequest {
                subscription: Some(pb::Subscription {
                    name: format!("{id}-fan-{slot:05}"),
                    destination: Some(destination),
                    event_types: vec![topic.to_owned()],
                    ..Default::default()
                }),
            })
            .await
            .map_err(|e| anyhow::anyhow!("hookd refused a subscription: {}", e.message()))?;
    }
    tally.set_slots(receivers);
    Ok(crate::drive::FanoutPlan {
        topic: topic.to_owned(),
        push,
    })
}

async fn setup(s: &Scenario, o: &Options) -> anyhow::Result<World> {
    let tally = Arc::new(Tally::new());
    let id = run_id();
    // `[ordered]`: FIFO endpoints are put so below; FIFO queues are hookd's config
    // (`[[queues]]`), so they are known before it starts.
    let fifo = match s.ordered.as_ref().map(|o| o.policy.as_str()) {
        Some("block") => pb::Fifo::Block,
        Some(_) => pb::Fifo::Park,
        None => pb::Fifo::Off,
    };
    let mut config = s.hookd.config.clone();
    if let Some(ordered) = &s.ordered
        && !s.queues.is_empty()
    {
        anyhow::ensure!(
            o.target.is_none(),
            "`[ordered]` with `[[queues]]` needs a hookd this tool starts (its queues' FIFO lanes are config); run without --target"
        );
        let queues = s
            .queues
            .iter()
            .map(|q| {
                let mut t = toml::Table::new();
                t.insert("name".into(), format!("{id}-{}", q.name).into());
                t.insert("fifo".into(), ordered.policy.clone().into());
                toml::Value::Table(t)
            })
            .collect();
        config.insert("queues".into(), toml::Value::Array(queues));
    }
    let target = match &o.target {
        Some(addr) => Target::remote(addr.clone(), o.target_pid),
        None if o.slow_sync_ms > 0 => Target::in_process(&config, o.slow_sync_ms).await?,
        None => Target::spawn(&config, o.hookd_log.as_deref()).await?,
    };
    let sim = Sim::start(&s.endpoints, tally.clone()).await?;
    let clients = channels(&target.grpc, s.traffic.connections).await?;
    let mut admin = clients[0].clone();
    let mut endpoints = Vec::new();
    for (gi, g) in s.endpoints.iter().enumerate() {
        let mut names = Vec::new();
        for i in 0..g.count {
            let name = format!("{id}-{}-{i}", g.name);
            let h = &g.hookd;
            let endpoint = pb::Endpoint {
                name: name.clone(),
                url: sim.url(gi, i),
                description: format!("hookd-loadtest {} / {}", s.name, g.name),
                max_attempts: h.max_attempts,
                retry_base_ms: h.retry_base_ms,
                retry_cap_ms: h.retry_cap_ms,
                connect_timeout_ms: h.connect_timeout_ms,
                timeout_ms: h.timeout_ms,
                max_in_flight: h.max_in_flight,
                rate_limit_per_s: h.rate_limit_per_s,
                rate_limit_burst: h.rate_limit_burst,
                fifo: fifo as i32,
                ..Default::default()
            };
            admin
                .put_endpoint(pb::PutEndpointRequest {
                    endpoint: Some(endpoint),
                })
                .await
                .map_err(|e| {
                    anyhow::anyhow!("hookd refused endpoint `{}`: {}", g.name, e.message())
                })?;
            names.push(name);
        }
        endpoints.push((names, g.weight));
    }
    let queues: Vec<_> = s
        .queues
        .iter()
        .map(|q| (q.clone(), format!("{id}-{}", q.name)))
        .collect();
    let targets = Arc::new(Targets::new(
        &endpoints,
        &queues
            .iter()
            .map(|(q, name)| (name.clone(), q.weight))
            .collect::<Vec<_>>(),
    ));
    let inbound = match &s.ingest {
        None => None,
        Some(settings) => Some(Arc::new(
            sources(&mut admin, &target, &queues, *settings).await?,
        )),
    };
    let fanout = match &s.fanout {
        None => None,
        Some(f) => Some(Arc::new(
            subscribe(&mut admin, &id, &f.topic, &endpoints, &queues, &tally).await?,
        )),
    };
    let consumers = Consumers::start(&queues, &clients, &tally, s.seed);
    let mut agents = Vec::new();
    if let Some(a) = s.agent {
        for _ in 0..a.agents {
            let channel = hookd_client::endpoint(target.grpc.clone())?
                .connect()
                .await?;
            agents.push(hookd_client::Emitter::new(
                hookd_client::Client::from_channel(channel),
                hookd_client::EmitterConfig {
                    capacity: a.capacity,
                    slow_down_at: a.slow_down_at,
                    ..hookd_client::EmitterConfig::default()
                },
            ));
        }
    }
    let sender = Sender {
        clients: clients.clone(),
        targets,
        tally: tally.clone(),
        batch: s.traffic.batch,
        payload_bytes: s.traffic.payload_bytes,
        seed: s.seed,
        run_id: id,
        inbound,
        agents,
        fanout,
        ordering_keys: s.ordered.as_ref().map_or(0, |o| o.keys),
    };
    // The disk's speed before any traffic, then a light probe through the run (an fsync
    // every 250 ms), in hookd's data directory, or where --probe-dir says.
    let probe_dir = target
        .data_dir
        .clone()
        .or_else(|| o.probe_dir.clone())
        .unwrap_or_else(|| PathBuf::from("."));
    let mut host = HostFigures {
        cores: std::thread::available_parallelism().map_or(1, usize::from),
        fsync_dir: probe_dir.display().to_string(),
        slow_sync_ms: o.slow_sync_ms,
        ..Default::default()
    };
    let dir = probe_dir.clone();
    host.fsync_before = tokio::task::spawn_blocking(move || {
        crate::host::baseline(&dir, Duration::from_secs(1), 5_000)
    })
    .await?
    .map_err(|e| anyhow::anyhow!("fsync probe in {}: {e}", probe_dir.display()))
    .map(Some)?;
    let probe = FsyncProbe::start(&probe_dir, Duration::from_millis(250))
        .map_err(|e| anyhow::anyhow!("fsync probe in {}: {e}", probe_dir.display()))?;
    Ok(World {
        target,
        sim,
        clients,
        sender,
        consumers,
        tally,
        probe: Arc::new(probe),
        host,
    })
}

/// `[ingest]`: one Standard Webhooks source per queue, made over gRPC, and the provider
/// that posts to them.
async fn sources(
    admin: &mut HookdClient<Channel>,
    target: &Target,
    queues: &[(crate::scenario::QueueGroup, String)],
    settings: crate::scenario::Ingest,
) -> anyhow::Result<crate::inbound::Inbound> {
    let addr = target.ingest.ok_or_else(|| {
        anyhow::anyhow!(
            "an `[ingest]` scenario needs the hookd the tool starts (its ingest address); run it without --target"
        )
    })?;
    let key: [u8; 32] = rand::random();
    let secret = format!(
        "whsec_{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key)
    );
    let mut paths = HashMap::new();
    for (_, queue) in queues {
        let source = pb::Source {
            name: queue.clone(),
            scheme: "standard-webhooks".into(),
            secrets: vec![secret.clone()],
            content_types: vec!["application/octet-stream".into()],
            // The tool's payloads are binary: the type comes from a header, not the body.
            event_type: "header:x-event-type".into(),
            route: Some(pb::source::Route::Queue(queue.clone())),
            ..Default::default()
        };
        let made = admin
            .put_source(pb::PutSourceRequest {
                source: Some(source),
            })
            .await
            .map_err(|e| anyhow::anyhow!("hookd refused source `{queue}`: {}", e.message()))?
            .into_inner();
        paths.insert(
            queue.clone(),
            made.source
                .map_or_else(|| format!("/in/{queue}"), |s| s.path),
        );
    }
    crate::inbound::Inbound::new(addr, &secret, paths, settings)
}

/// Messages of this run hookd still holds (pending, awaiting a retry or in flight);
/// `None` if its stats cannot be read.
async fn still_queued(client: &HookdClient<Channel>, run_id: &str) -> Option<u64> {
    let stats = hookd_client::all_stats(&mut client.clone()).await.ok()?;
    let ours = format!(":{run_id}-");
    Some(
        stats
            .destinations
            .iter()
            .filter(|d| d.destination.contains(&ours))
            .map(|d| d.pending + d.awaiting_retry + d.in_flight)
            .sum(),
    )
}

/// Waits, `within` at most, until hookd holds none of this run's messages (every outcome
/// recorded: delivered, dead-lettered, or lost, which the checker tells); returns the
/// wait. Then up to a second more for receivers to count what hookd has already settled
/// (a consumer records its delivery after its Ack is answered).
async fn drain(world: &World, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if still_queued(&world.clients[0], &world.sender.run_id).await == Some(0) {
            let settled = Instant::now();
            while world.tally.undelivered() > 0 && settled.elapsed() < Duration::from_secs(1) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            break;
        }
        if start.elapsed() >= within {
            break;
        }
        // hookd builds Stats on its engine thread for every destination: ask often only
        // when the receivers have counted everything and hookd is settling the last
        // outcomes, not while a backlog (thousands of endpoints, maybe) is still draining.
        let pause = if world.tally.undelivered() > 0 {
            250
        } else {
            20
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    start.elapsed()
}

/// Asks hookd what became of every acknowledged event nobody received.
async fn lookups(
    client: &HookdClient<Channel>,
    events: &[crate::tally::Entry],
) -> HashMap<u64, Held> {
    let missing: Vec<(u64, String)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.enqueue == Enqueue::Acked && e.deliveries == 0)
        .map(|(i, e)| (i as u64, e.id.as_deref().unwrap_or_default().to_owned()))
        .collect();
    let mut out = HashMap::new();
    for chunk in missing.chunks(64) {
        let mut tasks = tokio::task::JoinSet::new();
        for (seq, id) in chunk.iter().cloned() {
            let mut client = client.clone();
            tasks.spawn(async move {
                let held = match client
                    .get_message(pb::GetMessageRequest { id: id.clone() })
                    .await
                {
                    Ok(m) => {
                        let m = m.into_inner();
                        match pb::MessageState::try_from(m.state) {
                            Ok(pb::MessageState::DeadLetter) => Held::DeadLetter(reason(&m)),
                            Ok(pb::MessageState::Delivered) => Held::CompletedUnseen,
                            Ok(_) => Held::Queued,
                            Err(_) => Held::Unknown(format!("state {}", m.state)),
                        }
                    }
                    Err(s) if s.code() == tonic::Code::NotFound => Held::NotFound,
                    Err(s) => Held::Unknown(s.message().to_owned()),
                };
                (seq, held)
            });
        }
        while let Some(Ok((seq, held))) = tasks.join_next().await {
            out.insert(seq, held);
        }
    }
    out
}

/// A dead letter's reason as hookd states it, without per-message details.
fn reason(m: &pb::GetMessageResponse) -> String {
    let last = m.history.last();
    let what = match last {
        Some(a) if a.http_status != 0 => format!("HTTP {}", a.http_status),
        Some(a) => a.outcome.clone(),
        None => "no attempt".into(),
    };
    if m.max_attempts > 0 && m.attempts >= m.max_attempts {
        format!("max attempts ({}) reached, last: {what}", m.max_attempts)
    } else {
        format!("permanent failure: {what}")
    }
}

/// The most live messages hookd held and the highest watermark level, sampled every
/// 500 ms until `stop`. Every destination's Stats are built on hookd's engine thread, so
/// only `[agent]` runs (overload is what they are for) sample them.
async fn watch_backlog(
    client: HookdClient<Channel>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (u64, i32) {
    let (mut peak, mut level) = (0, 0);
    loop {
        let mut c = client.clone();
        if let Ok(Ok(stats)) =
            tokio::time::timeout(Duration::from_secs(2), hookd_client::all_stats(&mut c)).await
        {
            if let Some(st) = &stats.storage {
                peak = peak.max(st.live_messages);
            }
            for d in stats.total.iter().chain(&stats.destinations) {
                level = level.max(d.backpressure);
            }
        }
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return (peak, level),
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}

/// hookd's backpressure counters from its /metrics (refusals by reason, throttle hints).
async fn backpressure_counters(
    http: std::net::SocketAddr,
) -> (std::collections::BTreeMap<String, u64>, u64) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut refused = std::collections::BTreeMap::new();
    let mut hints = 0;
    let Ok(mut tcp) = tokio::net::TcpStream::connect(http).await else {
        return (refused, hints);
    };
    // The address as the Host: without [auth], hookd answers /metrics only to an IP
    // address or localhost (DNS rebinding).
    let _ = tcp
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nhost: {http}\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await;
    let mut text = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_string(&mut text)).await;
    for line in text.lines() {
        let value = || {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0) as u64
        };
        if let Some(rest) = line.strip_prefix("hookd_enqueue_refused_total{reason=\"") {
            if let Some((reason, _)) = rest.split_once('"') {
                refused.insert(reason.to_owned(), value());
            }
        } else if line.starts_with("hookd_enqueue_throttled_total ") {
            hints = value();
        }
    }
    (refused, hints)
}

async fn hookd_figures(
    client: &HookdClient<Channel>,
    timeline: &[crate::tally::Second],
    acked_push: u64,
) -> HookdFigures {
    let mut f = HookdFigures {
        cpu_avg_pct: mean_of(timeline, |s| s.hookd_cpu_pct),
        cpu_max_pct: max_of(timeline, |s| s.hookd_cpu_pct),
        rss_max_mb: max_of(timeline, |s| s.hookd_rss_mb),
        ..Default::default()
    };
    if let Ok(stats) = hookd_client::all_stats(&mut client.clone()).await {
        for d in &stats.destinations {
            if let Some(p) = &d.push {
                f.push_attempts += p.attempts_last_hour;
                f.breaker_openings += p.breaker_openings;
            }
        }
        f.dead_letters = stats.total.map_or(0, |t| t.dead_letter);
        if let Some(st) = stats.storage {
            f.commits_per_s = st.commits_per_s;
            f.requests_per_commit = st.requests_per_commit;
        }
    }
    f.retries = f.push_attempts.saturating_sub(acked_push);
    f
}

/// The box over the run (from the timeline and the fsync probe), and what limited it.
fn host_figures(
    world: &World,
    timeline: &[crate::tally::Second],
    hookd_cpu_avg: Option<f64>,
) -> HostFigures {
    let mut h = world.host.clone();
    h.busy_avg_pct = mean_of(timeline, |s| s.host_busy_pct);
    h.busy_max_pct = max_of(timeline, |s| s.host_busy_pct);
    h.iowait_avg_pct = mean_of(timeline, |s| s.host_iowait_pct);
    h.load1_max = max_of(timeline, |s| s.load1);
    h.tool_cpu_avg_pct = mean_of(timeline, |s| s.tool_cpu_pct);
    h.tool_cpu_max_pct = max_of(timeline, |s| s.tool_cpu_pct);
    let mut ms = world.probe.finish();
    h.fsync_samples = ms.len();
    if !ms.is_empty() {
        h.fsync_p50_ms = Some(crate::host::quantile(&mut ms, 0.5));
        h.fsync_p99_ms = Some(crate::host::quantile(&mut ms, 0.99));
        h.fsync_max_ms = ms.last().copied();
    }
    h.judge(hookd_cpu_avg);
    h
}

/// The mean of one figure over the seconds that have it.
fn mean_of(
    timeline: &[crate::tally::Second],
    figure: fn(&crate::tally::Second) -> Option<f64>,
) -> Option<f64> {
    let (sum, n) = timeline
        .iter()
        .filter_map(figure)
        .fold((0.0, 0usize), |(sum, n), v| (sum + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The largest of one figure over the seconds that have it.
fn max_of(
    timeline: &[crate::tally::Second],
    figure: fn(&crate::tally::Second) -> Option<f64>,
) -> Option<f64> {
    timeline.iter().filter_map(figure).reduce(f64::max)
}

fn describe(s: &Scenario, duration: Duration) -> String {
    if let Some(c) = s.capacity {
        return format!(
            "capacity search: open loop from {:.0} events/s, x{} per {:?} step up to {:.0}, {} bisections; {}",
            c.start_rate,
            c.growth,
            c.step,
            c.max_rate,
            c.refine,
            mix(s)
        );
    }
    let how = if let Some(i) = &s.ingest {
        format!(
            "signed webhooks on the ingest listener over {} connections ({:.1} % resent, {:.1} % badly signed)",
            i.connections,
            i.duplicate_rate.0 * 100.0,
            i.bad_signature_rate.0 * 100.0
        )
    } else if let Some(a) = &s.agent {
        format!(
            "{} agents' Emitters (buffer {}, slow_down from {})",
            a.agents, a.capacity, a.slow_down_at
        )
    } else if s.traffic.batch == 1 {
        "unary Enqueue".to_owned()
    } else {
        format!("EnqueueBatch of {}", s.traffic.batch)
    };
    // A publish is one delivery per subscriber: the checker's counts are deliveries.
    let how = match &s.fanout {
        Some(f) => format!(
            "{how} publishing to topic {} (every endpoint and queue subscribes; counts below are deliveries: event x subscriber)",
            f.topic
        ),
        None => how,
    };
    let load = match &s.traffic.load {
        Load::Open { shape, .. } => match shape {
            Shape::Constant(r) => format!("open loop at {r:.0} events/s"),
            Shape::Ramp(a, b) => format!("open loop ramping {a:.0} -> {b:.0} events/s"),
            Shape::Bursty { rate, on, off } => {
                format!("bursts of {rate:.0} events/s for {on:?}, then {off:?} of silence")
            }
        },
        Load::Closed { concurrency } => format!("closed loop, {concurrency} calls in flight"),
    };
    format!("{load}, {how}, {duration:?}; {}", mix(s))
}

fn mix(s: &Scenario) -> String {
    let endpoints: u32 = s.endpoints.iter().map(|e| e.count).sum();
    format!(
        "{} B payloads; {endpoints} endpoints, {} queues",
        s.traffic.payload_bytes,
        s.queues.len()
    )
}

/// Runs `s` and returns its report.
pub async fn run(s: &Scenario, o: &Options) -> anyhow::Result<Report> {
    let duration = o.duration.unwrap_or(s.duration);
    let world = setup(s, o).await?;
    let target_name = match &o.target {
        Some(a) => a.clone(),
        None => format!("hookd started by the tool at {}", world.target.grpc),
    };
    let tally = world.tally.clone();
    let (backlog_stop, backlog_rx) = tokio::sync::watch::channel(false);
    let backlog = s
        .agent
        .is_some()
        .then(|| tokio::spawn(watch_backlog(world.clients[0].clone(), backlog_rx)));
    // Setup (hookd's start, endpoint registration) is not part of the traffic's time.
    let traffic_start = Instant::now();
    let capacity = match s.capacity {
        Some(c) => Some(search(s, &world, c, o.progress).await?),
        None => {
            let progress = bar(duration.as_secs(), &s.name, o.progress);
            let _sampler = Sampler::start(
                tally.clone(),
                world.target.pid,
                world.probe.clone(),
                progress.clone(),
            );
            match &s.traffic.load {
                Load::Open {
                    shape,
                    max_outstanding,
                } => {
                    world.sender.open(shape, duration, *max_outstanding).await;
                }
                Load::Closed { concurrency } => {
                    world.sender.closed(*concurrency, duration).await;
                }
            }
            if let Some(b) = progress {
                b.finish();
            }
            None
        }
    };
    let traffic_s = traffic_start.elapsed().as_secs_f64();
    let drained = {
        let _sampler = Sampler::start(tally.clone(), world.target.pid, world.probe.clone(), None);
        let start = Instant::now();
        // The agents hand over what they still buffer first (within the drain time; each
        // Emitter sends from its own task, so they drain together while one is awaited).
        for agent in &world.sender.agents {
            let _ = agent
                .close(s.drain_timeout.saturating_sub(start.elapsed()))
                .await;
        }
        let left = s.drain_timeout.saturating_sub(start.elapsed());
        drain(&world, left).await;
        start.elapsed()
    };
    let _ = backlog_stop.send(true);
    let peak = match backlog {
        Some(task) => task.await.ok(),
        None => None,
    };
    let queues = world.consumers.counts();
    let snap = tally.snapshot();
    let held = lookups(&world.clients[0], &snap.events).await;
    let mut verdict = checker::check(
        &snap.events,
        snap.unexpected,
        &snap.unexpected_samples,
        |seq, _| {
            held.get(&seq)
                .cloned()
                .unwrap_or_else(|| Held::Unknown("lookup failed".into()))
        },
    );
    if s.ordered.is_some() {
        verdict.order = Some(tally.order());
    }
    let endpoints = world.sim.counts();
    // Every acknowledged push event had one first attempt; the rest were retries.
    let acked_push = snap
        .events
        .iter()
        .filter(|e| e.push && e.enqueue == Enqueue::Acked)
        .count() as u64;
    let mut hookd = hookd_figures(&world.clients[0], &snap.timeline, acked_push).await;
    let host = host_figures(&world, &snap.timeline, hookd.cpu_avg_pct);
    let capacity = capacity.map(|mut c| {
        c.sizing = capacity::sizing(&c, &host);
        c
    });
    if let Some((live, level)) = peak {
        hookd.peak_live_messages = Some(live);
        hookd.peak_level = Some(
            match pb::BackpressureLevel::try_from(level) {
                Ok(pb::BackpressureLevel::Soft) => "soft",
                Ok(pb::BackpressureLevel::Hard) => "hard",
                _ => "ok",
            }
            .into(),
        );
    }
    if let Some(http) = world.target.http {
        (hookd.refused, hookd.throttle_hints) = backpressure_counters(http).await;
    }
    let agents = (!world.sender.agents.is_empty()).then(|| {
        let mut a = crate::report::AgentFigures {
            agents: world.sender.agents.len(),
            ..Default::default()
        };
        for e in &world.sender.agents {
            let c = e.counters();
            a.sent += c.sent;
            a.pressured += c.pressured;
            a.refused += c.refused;
            a.retries += c.retries;
            a.duplicates += c.duplicates;
            a.failed += c.failed;
            a.left += c.buffered;
            a.taken += c.emitted;
        }

        a
    });
    let mut slo_broken = Vec::new();
    // A capacity search breaks the SLO on purpose; its steps carry the verdicts.
    if let Some(slo) = s.slo.filter(|_| s.capacity.is_none()) {
        let (enq, e2e) = (
            snap.latencies.enqueue.value_at_quantile(0.99) as f64 / 1e3,
            snap.latencies.e2e.value_at_quantile(0.99) as f64 / 1e3,
        );
        if enq > slo.enqueue_p99_ms {
            slo_broken.push(format!(
                "enqueue p99 {enq:.2} ms > {} ms",
                slo.enqueue_p99_ms
            ));
        }
        if e2e > slo.end_to_end_p99_ms {
            slo_broken.push(format!(
                "end-to-end p99 {e2e:.2} ms > {} ms",
                slo.end_to_end_p99_ms
            ));
        }
        if let (Some(cap), Some(rss)) = (slo.max_rss_mb, hookd.rss_max_mb)
            && rss > cap
        {
            slo_broken.push(format!("hookd RSS peaked at {rss:.0} MB > {cap} MB"));
        }
        if slo.backpressure_engaged {
            let refused: u64 = hookd.refused.values().sum();
            let pressured = agents.as_ref().map_or(0, |a| a.pressured);
            if refused == 0 || pressured == 0 || hookd.throttle_hints == 0 {
                slo_broken.push(format!(
                    "backpressure did not engage: hookd refused {refused}, hinted {}, agents' emits under slow_down {pressured}",
                    hookd.throttle_hints
                ));
            }
        }
    }
    for (g, counts) in s
        .endpoints
        .iter()
        .zip(&endpoints)
        .filter(|_| s.capacity.is_none())
    {
        if let Some(limit) = g.end_to_end_p99_ms
            && counts.e2e_p99_ms > limit
        {
            slo_broken.push(format!(
                "endpoints `{}`: end-to-end p99 {:.2} ms > {limit} ms",
                g.name, counts.e2e_p99_ms
            ));
        }
    }
    let inbound = world.sender.inbound.as_ref().map(|i| i.counts());
    if let Some(i) = &inbound {
        // Every accepted webhook reached a consumer exactly once: a second copy would have
        // come from hookd storing a resend (no nacks or lease expiries in such a run).
        if verdict.duplicated > 0 {
            slo_broken.push(format!(
                "ingest: {} events reached a consumer more than once",
                verdict.duplicated
            ));
        }
        if i.accepted == 0 {
            slo_broken.push("ingest: hookd accepted no event".into());
        }
        if !i.passed() {
            slo_broken.push(format!(
                "ingest: {} resends answered as new events, {} forged events accepted",
                i.duplicates_wrong, i.bad_signatures_accepted
            ));
        }
    }
    let passed = verdict.passed() && slo_broken.is_empty();
    let report = Report {
        slo_broken,
        scenario: s.name.clone(),
        description: s.description.clone(),
        target: target_name,
        traffic: describe(s, duration),
        duration_s: traffic_s,
        drain_s: drained.as_secs_f64(),
        passed,
        acked_per_s: verdict.acked as f64 / traffic_s.max(1e-9),
        delivered_per_s: verdict.delivered as f64 / (traffic_s + drained.as_secs_f64()).max(1e-9),
        verdict,
        enqueue_latency_ms: Percentiles::of(&snap.latencies.enqueue),
        enqueue_service_ms: Percentiles::of(&snap.latencies.service),
        end_to_end_ms: Percentiles::of(&snap.latencies.e2e),
        hookd,
        endpoints,
        queues,
        timeline: snap.timeline,
        capacity,
        ingest: inbound,
        agents,
        host,
        slo_enqueue_p99_ms: s.slo.map(|l| l.enqueue_p99_ms),
        slo_end_to_end_p99_ms: s.slo.map(|l| l.end_to_end_p99_ms),
    };
    world.stop().await?;
    Ok(report)
}

impl World {
    async fn stop(self) -> anyhow::Result<()> {
        self.consumers.stop().await;
        self.sim.stop().await;
        drop(self.clients);
        drop(self.sender);
        self.target.stop().await
    }
}

/// The capacity search on `world`: each step an open loop at a constant rate.
async fn search(
    s: &Scenario,
    world: &World,
    c: crate::scenario::Capacity,
    progress: bool,
) -> anyhow::Result<capacity::Outcome> {
    let max_outstanding = match s.traffic.load {
        Load::Open {
            max_outstanding, ..
        } => max_outstanding,
        Load::Closed { concurrency } => concurrency,
    };
    let tally = &world.tally;
    let slo = s.slo.unwrap_or_default();
    let _sampler = Sampler::start(tally.clone(), world.target.pid, world.probe.clone(), None);
    // The timeline's seconds count from here (the sampler's start).
    let origin = Instant::now();
    capacity::search(&c, |rate| async move {
        let phase = tally.phase();
        let started = Instant::now();
        // What hookd, this tool and the box spend on this step's traffic.
        let mut hookd_meter = Meter::new(world.target.pid);
        let mut tool_meter = Meter::new(Some(std::process::id()));
        let mut box_meter = HostMeter::new();
        world
            .sender
            .open(&Shape::Constant(rate), c.step, max_outstanding)
            .await;
        let secs = started.elapsed().as_secs_f64();
        let (hookd_pct, hookd_rss_mb) = hookd_meter.read();
        let (tool_pct, tool_rss_mb) = tool_meter.read();
        let resources = capacity::StepResources {
            hookd_cores: hookd_pct.map(|p| p / 100.0),
            hookd_rss_mb,
            tool_cores: tool_pct.map(|p| p / 100.0),
            tool_rss_mb,
            box_busy_pct: box_meter.read().busy_pct,
            box_mem_available_mb: crate::host::meminfo_mb("MemAvailable"),
        };
        // Deliveries get the end-to-end limit (at least a second) to arrive.
        let grace = Duration::from_secs_f64((slo.end_to_end_p99_ms / 1e3).max(1.0));
        let deadline = Instant::now() + grace;
        loop {
            let (_, acked, delivered) = tally.counts_since(&phase);
            if delivered >= acked || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (sent, acked, delivered) = tally.counts_since(&phase);
        let lat = tally.since(&phase);
        let enqueue_p99_ms = lat.enqueue.value_at_quantile(0.99) as f64 / 1e3;
        let e2e_p99_ms = lat.e2e.value_at_quantile(0.99) as f64 / 1e3;
        let mut broke = Vec::new();
        if (acked as f64) < sent as f64 * 0.99 {
            broke.push(format!("{} of {sent} enqueues failed", sent - acked));
        }
        if (delivered as f64) < acked as f64 * 0.99 {
            broke.push(format!(
                "{} of {acked} not delivered within {grace:?}",
                acked - delivered
            ));
        }
        if enqueue_p99_ms > slo.enqueue_p99_ms {
            broke.push(format!("enqueue p99 above {} ms", slo.enqueue_p99_ms));
        }
        if e2e_p99_ms > slo.end_to_end_p99_ms {
            broke.push(format!("end-to-end p99 above {} ms", slo.end_to_end_p99_ms));
        }
        // Let the backlog drain so the next step starts clean.
        let settled = drain(world, c.settle).await;
        if still_queued(&world.clients[0], &world.sender.run_id).await != Some(0) {
            broke.push(format!("backlog not drained in {settled:?}"));
        }
        let step = Step {
            rate,
            start_s: started.duration_since(origin).as_secs_f64(),
            passed: broke.is_empty(),
            detail: broke.join("; "),
            acked_per_s: acked as f64 / secs,
            delivered_per_s: delivered as f64 / secs,
            enqueue_p99_ms,
            e2e_p99_ms,
            resources,
        };
        if progress {
            eprintln!(
                "  step {:>9.0}/s: {} (acked {:.0}/s, enqueue p99 {:.2} ms, e2e p99 {:.2} ms) {}",
                rate,
                if step.passed { "held" } else { "broke" },
                step.acked_per_s,
                enqueue_p99_ms,
                e2e_p99_ms,
                step.detail
            );
        }
        Ok(step)
    })
    .await
}
