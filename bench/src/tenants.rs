//! The cost of tenants (issue #51, 7), in one run.
//!
//! **Write paths.** Unary Enqueue, EnqueueBatch, publish (a topic with one subscriber) and
//! push (EnqueueBatch to endpoints while hookd delivers to a loopback sink), each against a
//! separate hookd process, in four cases:
//! - `main, 1 destination` and `this, 1 destination`: one queue (endpoint, topic) of
//!   `default`, as a single-tenant user runs hookd: what the tenant code costs them;
//! - `main, N destinations` and `this, N tenants`: the same load spread over N queues
//!   (endpoints, topics) of one namespace on main, and over N tenants with one each on this
//!   build, every call naming its tenant (`x-hookd-tenant`): what tenants cost beside the
//!   same number of destinations;
//! - `this, N destinations` (with a baseline): this build under main's N load, which splits
//!   a difference between the N cases into this build's and the tenants'.
//!
//! Every call of an N case has the same shape: a case of N destinations names its target in
//! a header hookd ignores (`x-bench-target`), of the same size as the tenants case's
//! `x-hookd-tenant`. A header whose value changes with every call is an HPACK literal the
//! server decodes (h2's 4 KiB table holds some 70 of them, not 1,000, and hyper's server
//! cannot advertise a larger one); that transport cost is the caller's way of naming a
//! target, not tenancy's work in hookd, and it is what `--bare-requests` (no such header in
//! the destination cases) measures with the rest.
//!
//! `main` is a hookd binary built beside this one (`--baseline-hookd`), run with the same
//! config; the cases alternate, their order turning each round, so a drift of the disk
//! falls on all of them. Only ratios within the run mean anything. A round starts and sets
//! up each case's hookd anew, so a pair of one round runs a minute or more apart; with
//! `--tenant-slices K` (unary, batch, publish) every case's hookd runs at once and the legs
//! alternate K times, so a pair runs seconds apart and this box's drift (3x over an hour)
//! cancels in the paired ratios.
//!
//! **Scale.** One hookd holding T tenants, each with 10 endpoints and 10 subscriptions: the
//! time to make them, its RSS, Stats latency (the whole hookd's first page, and one
//! tenant's), and the time from a clean stop, and from a kill -9, to serving again.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hookd_proto::v1::{self as pb, hookd_client::HookdClient};
use hookd_testkit::ChildHookd;
use tonic::transport::Channel;

const HEADER: &str = "x-hookd-tenant";

/// Every case's config: marks far above what the legs store (nothing is consumed but by
/// push), so no leg measures backpressure.
const CONFIG: &str = "[backpressure]\n\
    destination_max_messages = 20000000\n\
    max_messages = 20000000\n\
    destination_max_bytes = 68719476736\n\
    max_bytes = 68719476736\n";

/// Which hookd, and how its load is spread.
#[derive(Debug, Clone)]
struct Case {
    label: String,
    exe: PathBuf,
    /// `["__hookd"]` for this binary (the trampoline), none for another hookd.
    prefix: Vec<&'static str>,
    /// Destinations the load rotates over.
    spread: usize,
    /// Each destination is its own tenant's (this build only).
    tenanted: bool,
    /// A call of N destinations names its target in `x-bench-target` (see the module's
    /// text).
    shaped: bool,
}

impl Case {
    /// The tenant and the destination name of target `i`.
    fn target(&self, i: usize) -> (Option<String>, String) {
        let i = i % self.spread;
        match (self.tenanted, self.spread) {
            (true, _) => (Some(tenant_name(i)), "bench".into()),
            (false, 1) => (None, "bench".into()),
            (false, _) => (None, format!("bench-{i:05}")),
        }
    }
}

fn tenant_name(i: usize) -> String {
    format!("t{i:05}")
}

/// The header a call of N destinations names its target in (the same size as
/// `x-hookd-tenant`); hookd ignores it.
const TARGET_HEADER: &str = "x-bench-target";

impl Case {
    /// A call of the load's on target `i` (of `tenant`, from [`Case::target`]): naming its
    /// tenant, or, for N destinations of one namespace, the target (unless
    /// `--bare-requests`).
    fn call<T>(&self, i: usize, tenant: Option<&str>, message: T) -> tonic::Request<T> {
        let mut r = on(tenant, message);
        if tenant.is_none()
            && self.shaped
            && self.spread > 1
            && let Ok(v) = tenant_name(i % self.spread).parse()
        {
            r.metadata_mut().insert(TARGET_HEADER, v);
        }
        r
    }
}

/// `message`, naming `tenant` if there is one.
fn on<T>(tenant: Option<&str>, message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    if let Some(t) = tenant
        && let Ok(v) = t.parse()
    {
        r.metadata_mut().insert(HEADER, v);
    }
    r
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path4 {
    Unary,
    Batch,
    Publish,
    Push,
}

impl Path4 {
    const ALL: [Self; 4] = [Self::Unary, Self::Batch, Self::Publish, Self::Push];

    /// The paths `names` lists (`unary`, `batch`, `publish`, `push`; none: all), with
    /// their places in [`Path4::ALL`].
    fn chosen(names: &[String]) -> anyhow::Result<Vec<(usize, Self)>> {
        for n in names {
            if !Self::ALL.iter().any(|p| p.name() == n) {
                anyhow::bail!("--tenant-paths: {n:?} is not one of unary, batch, publish, push");
            }
        }
        Ok(Self::ALL
            .into_iter()
            .enumerate()
            .filter(|(_, p)| names.is_empty() || names.iter().any(|n| n == p.name()))
            .collect())
    }

    fn name(self) -> &'static str {
        match self {
            Self::Unary => "unary",
            Self::Batch => "batch",
            Self::Publish => "publish",
            Self::Push => "push",
        }
    }
}

async fn spawn(case: &Case, data: &Path, log: &Path) -> anyhow::Result<(ChildHookd, Channel)> {
    let config = data.with_extension("toml");
    std::fs::write(&config, CONFIG)?;
    let extra: Vec<OsString> = vec![
        "--log-level".into(),
        "warn".into(),
        "--allow-destination".into(),
        "127.0.0.1/32".into(),
        "--config".into(),
        config.into_os_string(),
    ];
    let hookd = ChildHookd::spawn_logged(
        &case.exe,
        &case.prefix,
        data,
        &extra,
        Duration::from_secs(300),
        log,
    )
    .await?;
    let ch = hookd_client::endpoint(hookd.grpc.clone())?
        .connect()
        .await?;
    Ok((hookd, ch))
}

/// Makes calls `0..n` over `concurrency` tasks, each sending its next call when its last
/// one answered; `each` makes and sends call `i`.
async fn parallel<F, Fut>(n: usize, concurrency: usize, each: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(AtomicU64::new(0));
    let each = Arc::new(each);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (next, each) = (next.clone(), each.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= n {
                    return Ok::<_, anyhow::Error>(());
                }
                each(i).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Tenants `t00000` ... of `n`, made with `concurrency` calls in flight.
async fn create_tenants(ch: &Channel, n: usize, concurrency: usize) -> anyhow::Result<()> {
    let ch = ch.clone();
    parallel(n, concurrency, move |i| {
        let mut c = HookdClient::new(ch.clone());
        async move {
            c.create_tenant(pb::CreateTenantRequest {
                tenant: Some(pb::Tenant {
                    name: tenant_name(i),
                    ..Default::default()
                }),
            })
            .await?;
            Ok(())
        }
    })
    .await
}

/// The case's objects: per target an endpoint `bench` (on the sink), and a subscription
/// taking topic `bench.I` into queue `pub` (`pub-I` when the targets share a namespace),
/// and the tenants themselves when the case has them.
async fn setup(case: &Case, ch: &Channel, sink: &hookd_testkit::Receiver) -> anyhow::Result<()> {
    let case = Arc::new(case.clone());
    let url = sink.url("/hook");
    if case.tenanted {
        create_tenants(ch, case.spread, 32).await?;
    }
    let ch = ch.clone();
    parallel(case.spread, 32, move |i| {
        let mut c = HookdClient::new(ch.clone());
        let (tenant, name) = case.target(i);
        let url = url.clone();
        let queue = if case.spread > 1 && !case.tenanted {
            format!("pub-{i:05}")
        } else {
            "pub".to_owned()
        };
        async move {
            let t = tenant.as_deref();
            c.put_endpoint(on(
                t,
                pb::PutEndpointRequest {
                    endpoint: Some(pb::Endpoint {
                        name: name.clone(),
                        url,
                        ..Default::default()
                    }),
                },
            ))
            .await?;
            c.put_subscription(on(
                t,
                pb::PutSubscriptionRequest {
                    subscription: Some(pb::Subscription {
                        name: queue.clone(),
                        destination: Some(pb::subscription::Destination::Queue(queue)),
                        event_types: vec![format!("bench.{i}")],
                        ..Default::default()
                    }),
                },
            ))
            .await?;
            Ok(())
        }
    })
    .await
}

/// One leg of `path` on `case`'s hookd: events (deliveries, for push) per second.
async fn leg(
    case: &Case,
    ch: &Channel,
    sink: &hookd_testkit::Receiver,
    path: Path4,
    payload: usize,
    seconds: Duration,
    pid: Option<u32>,
) -> anyhow::Result<(f64, Option<f64>)> {
    let (concurrency, batch) = match path {
        Path4::Unary | Path4::Publish => (64, 1),
        Path4::Batch | Path4::Push => (8, 100),
    };
    let body = vec![b'x'; payload];
    // Push: a warm-up second, then deliveries counted at the sink.
    let warmup = if path == Path4::Push {
        Duration::from_secs(1)
    } else {
        Duration::ZERO
    };
    let cpu = || pid.and_then(crate::threads::process_ns);
    // hookd's CPU microseconds since `from`, per one of `n`.
    let cpu_per = |from: Option<u64>, n: u64| {
        from.zip(cpu())
            .map(|(a, b)| b.saturating_sub(a) as f64 / 1_000.0 / n.max(1) as f64)
    };
    let mut cpu0 = cpu();
    let started = Instant::now();
    let stop_at = started + warmup + seconds;
    let events = Arc::new(AtomicU64::new(0));
    let turn = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let mut c = HookdClient::new(ch.clone())
            .max_encoding_message_size(64 << 20)
            .max_decoding_message_size(64 << 20);
        let (case, body, events, turn) = (case.clone(), body.clone(), events.clone(), turn.clone());
        let prefix = uuid::Uuid::new_v4().simple().to_string();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < stop_at {
                let i = turn.fetch_add(1, Ordering::Relaxed) as usize;
                let (tenant, name) = case.target(i);
                let t = tenant.as_deref();
                let one = |to: pb::enqueue_request::Destination, n: u64| pb::EnqueueRequest {
                    destination: Some(to),
                    payload: body.clone(),
                    idempotency_key: format!("{prefix}-{n}"),
                    ..Default::default()
                };
                n += 1;
                let stored = match path {
                    Path4::Unary => c
                        .enqueue(case.call(
                            i,
                            t,
                            one(pb::enqueue_request::Destination::Queue(name), n),
                        ))
                        .await
                        .map(|_| 1),
                    Path4::Publish => c
                        .enqueue(case.call(
                            i,
                            t,
                            one(
                                pb::enqueue_request::Destination::Topic(format!(
                                    "bench.{}",
                                    i % case.spread
                                )),
                                n,
                            ),
                        ))
                        .await
                        .map(|r| u64::from(r.into_inner().subscribers.min(1))),
                    Path4::Batch | Path4::Push => {
                        let to = |name: &str| match path {
                            Path4::Push => pb::enqueue_request::Destination::Endpoint(name.into()),
                            _ => pb::enqueue_request::Destination::Queue(name.into()),
                        };
                        let events = (0..batch).map(|k| one(to(&name), n * 1_000 + k)).collect();
                        c.enqueue_batch(case.call(i, t, pb::EnqueueBatchRequest { events }))
                            .await
                            .map(|r| {
                                r.into_inner()
                                    .results
                                    .iter()
                                    .filter(|x| {
                                        matches!(x.result, Some(pb::enqueue_result::Result::Ok(_)))
                                    })
                                    .count() as u64
                            })
                    }
                };
                match stored {
                    Ok(k) => {
                        events.fetch_add(k, Ordering::Relaxed);
                    }
                    Err(e) => {
                        static SHOWN: std::sync::atomic::AtomicBool =
                            std::sync::atomic::AtomicBool::new(false);
                        if !SHOWN.swap(true, Ordering::Relaxed) {
                            eprintln!("  a {} call failed: {e}", path.name());
                        }
                    }
                }
            }
        }));
    }
    // Push: hookd's CPU over the counted window per delivery counted in it (the window's
    // writes and deliveries both); the others: over the whole leg per event stored.
    let (rate, push_cpu) = if path == Path4::Push {
        tokio::time::sleep(warmup).await;
        cpu0 = cpu();
        let (d0, t0) = (sink.count(), Instant::now());
        tokio::time::sleep(seconds).await;
        let delivered = sink.count() - d0;
        (
            delivered as f64 / t0.elapsed().as_secs_f64(),
            cpu_per(cpu0, delivered),
        )
    } else {
        tokio::time::sleep_until((started + seconds).into()).await;
        (0.0, None)
    };
    for t in tasks {
        t.await?;
    }
    Ok(match path {
        Path4::Push => (rate, push_cpu),
        _ => {
            let stored = events.load(Ordering::Relaxed);
            (
                stored as f64 / started.elapsed().as_secs_f64(),
                cpu_per(cpu0, stored),
            )
        }
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 0 => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        n => v[n / 2],
    }
}

/// The write paths, case by case (see the module's text).
/// The two builds the tenants run compares: main's `hookd` (none: this build only) and
/// this tree's (none: this bench binary as hookd).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Builds<'a> {
    pub(crate) main: Option<&'a Path>,
    pub(crate) this: Option<&'a Path>,
    /// `--bare-requests`: the N destinations cases' calls without `x-bench-target`.
    pub(crate) bare_requests: bool,
    /// `--tenant-slices K`: instead of rounds, every case's hookd at once, and K slices of
    /// one leg per case, alternating (not push).
    pub(crate) slices: u16,
}

pub(crate) async fn cost(
    base: &Path,
    builds: Builds<'_>,
    tenants: usize,
    rounds: u16,
    seconds: Duration,
    payload: usize,
    paths: &[String],
) -> anyhow::Result<()> {
    let chosen = Path4::chosen(paths)?;
    // This build: a hookd binary of this tree if given, else this binary as hookd.
    let baseline = builds.main;
    let (this, this_prefix): (std::path::PathBuf, Vec<&'static str>) = match builds.this {
        Some(exe) => (exe.to_owned(), vec![]),
        None => (std::env::current_exe()?, vec!["__hookd"]),
    };
    let mut cases = Vec::new();
    let mut add = |label: &str, exe: &Path, prefix: Vec<&'static str>, spread, tenanted| {
        cases.push(Case {
            label: label.into(),
            exe: exe.to_owned(),
            prefix,
            spread,
            tenanted,
            shaped: !builds.bare_requests,
        });
    };
    if let Some(main) = baseline {
        add("main, 1 destination", main, vec![], 1, false);
    }
    // The same binary on both sides (`--this-hookd` = `--baseline-hookd`): a control run
    // (A/A) that says what the harness resolves on this box; the second side then runs
    // main's load (N destinations, no tenants, which main does not have).
    let control = builds.this.is_some() && builds.this == builds.main;
    let this_label = if control { "main again" } else { "this" };
    add(
        &format!("{this_label}, 1 destination"),
        &this,
        this_prefix.clone(),
        1,
        false,
    );
    if let Some(main) = baseline {
        add(
            &format!("main, {tenants} destinations"),
            main,
            vec![],
            tenants,
            false,
        );
    }
    if control {
        add(
            &format!("main again, {tenants} destinations"),
            &this,
            this_prefix.clone(),
            tenants,
            false,
        );
    } else {
        add(
            &format!("this, {tenants} tenants"),
            &this,
            this_prefix.clone(),
            tenants,
            true,
        );
        if baseline.is_some() {
            // This build under main's load too: it splits a difference between the N
            // cases into what this build costs anyway and what spreading over tenants
            // costs.
            add(
                &format!("this, {tenants} destinations"),
                &this,
                this_prefix.clone(),
                tenants,
                false,
            );
        }
    }
    println!(
        "\ntenants: the write paths (unary 64 in flight; batch 8 x 100; publish 64 in flight, one subscriber; push: batch 8 x 100 to endpoints, deliveries counted at a loopback sink) per case, a separate hookd process each, {} s legs, {}{}",
        seconds.as_secs(),
        if builds.slices > 0 {
            format!(
                "{} slices (every case's hookd at once, the legs alternating)",
                builds.slices
            )
        } else {
            format!("{rounds} rounds")
        },
        if baseline.is_none() {
            " (no --baseline-hookd: this build only)"
        } else {
            ""
        }
    );
    println!(
        "  the N destinations cases' calls {}",
        if builds.bare_requests {
            "carry no header (--bare-requests): the tenants case's x-hookd-tenant is its own cost"
        } else {
            "name their target in x-bench-target, the size of the tenants case's x-hookd-tenant: one shape of call"
        }
    );
    let log = base.join("tenants-hookd.log");
    println!("  hookd's log: {}", log.display());
    let probe = |label: &str| -> anyhow::Result<()> {
        let rate = crate::fsync::probe(base, Duration::from_millis(500))?;
        println!("  fsync probe ({label}): {rate:.0} fdatasync/s (4 KiB appends)");
        Ok(())
    };
    probe("before")?;
    // rates[case][path] over the rounds (or slices), and hookd's CPU microseconds per event.
    let mut rates: Figures = vec![vec![Vec::new(); Path4::ALL.len()]; cases.len()];
    let mut cpus: Figures = vec![vec![Vec::new(); Path4::ALL.len()]; cases.len()];
    if builds.slices > 0 {
        sliced(
            &cases,
            &chosen,
            builds.slices,
            (base, &log),
            (payload, seconds),
            (&mut rates, &mut cpus),
        )
        .await?;
    }
    // Rounds, unless the run was in slices.
    let rounds = if builds.slices > 0 { 0 } else { rounds };
    for round in 0..usize::from(rounds) {
        println!(" round {}", round + 1);
        let order: Vec<usize> = (0..cases.len())
            .map(|k| (k + round) % cases.len())
            .collect();
        for k in order {
            let case = &cases[k];
            let sink = crate::push::sink(false).await?;
            let data = base.join(format!("tenants-{round}-{k}"));
            let (hookd, ch) = spawn(case, &data, &log).await?;
            let made = Instant::now();
            setup(case, &ch, &sink).await?;
            let setup_s = made.elapsed().as_secs_f64();
            let mut line = format!("  {:<24}", case.label);
            for &(p, path) in &chosen {
                let (r, cpu) = leg(case, &ch, &sink, path, payload, seconds, hookd.pid()).await?;
                rates[k][p].push(r);
                line.push_str(&format!(" {} {r:>8.0}/s", path.name()));
                if let Some(us) = cpu {
                    cpus[k][p].push(us);
                    line.push_str(&format!(" {us:>5.1} us"));
                }
            }
            // The pid lets a profile of the whole run (`perf record -a`) be split by case.
            let pid = hookd
                .pid()
                .map_or_else(String::new, |p| format!(", pid {p}"));
            println!("{line}  (set up in {setup_s:.1} s{pid})");
            drop(ch);
            hookd.stop(Duration::from_secs(30)).await?;
            let _ = std::fs::remove_dir_all(&data);
        }
    }
    probe("after")?;
    println!(" medians (events/s; push: deliveries/s), and each case against its main:");
    let medians: Vec<Vec<f64>> = rates
        .iter()
        .map(|per| per.iter().map(|v| median(v.clone())).collect())
        .collect();
    for (k, case) in cases.iter().enumerate() {
        let mut line = format!("  {:<24}", case.label);
        for &(p, path) in &chosen {
            line.push_str(&format!(" {} {:>8.0}", path.name(), medians[k][p]));
        }
        println!("{line}");
    }
    // Cases 0 and 1 are main's and this build's with one destination, 2 and 3 the same
    // spread over N (3: over N tenants), 4 this build with main's N destinations of one
    // namespace; without a baseline, 0 and 1 are this build's two.
    let pairs: &[(usize, usize)] = match (baseline.is_some(), cases.len()) {
        (true, 5) => &[(1, 0), (3, 2), (4, 2), (3, 4)],
        (true, _) => &[(1, 0), (3, 2)],
        (false, _) => &[(1, 0)],
    };
    for &(this, main) in pairs {
        let mut line = format!("  ratio {} / {}:", cases[this].label, cases[main].label);
        for &(p, path) in &chosen {
            line.push_str(&format!(
                " {} {:.3}",
                path.name(),
                medians[this][p] / medians[main][p]
            ));
        }
        println!("{line}");
        // Each round's pair, run within a minute of each other: their ratio's median and
        // range, less moved by the disk's drift over the run than the medians' ratio.
        println!(
            "    per round or slice (median, min..max):{}",
            paired(&chosen, &rates[this], &rates[main])
        );
        // hookd's own CPU per event: what tenants add to the work of one event, which the
        // disk's swings in the rates above do not move (the time waiting for fsync is not
        // CPU). A ratio above 1 is the first case spending more per event.
        if cpus[this].iter().chain(&cpus[main]).any(|v| !v.is_empty()) {
            let mut line = "    hookd CPU us/event, median (the first vs the second):".to_owned();
            for &(p, path) in &chosen {
                let (a, b) = (median(cpus[this][p].clone()), median(cpus[main][p].clone()));
                line.push_str(&format!(" {} {a:.1} vs {b:.1}", path.name()));
            }
            println!("{line}");
            println!(
                "    CPU/event ratio per round or slice (median, min..max):{}",
                paired(&chosen, &cpus[this], &cpus[main])
            );
        }
    }
    Ok(())
}

/// Rates and CPU per event, by case and path, over the rounds (or slices).
type Figures = Vec<Vec<Vec<f64>>>;

/// The slices run: per path, every case's hookd started and set up at once, then `slices`
/// legs of each, the cases alternating (their order turning each slice), so a case and its
/// pair run seconds apart, not minutes: a drift of the box (this one's swings by 3x) falls
/// on both. Not push: its deliveries go on behind a leg, into the next case's. Batch keeps
/// every case's events stored at once (some 100,000 a second each): keep its slices few.
async fn sliced(
    cases: &[Case],
    chosen: &[(usize, Path4)],
    slices: u16,
    (base, log): (&Path, &Path),
    (payload, seconds): (usize, Duration),
    (rates, cpus): (&mut Figures, &mut Figures),
) -> anyhow::Result<()> {
    if chosen.iter().any(|&(_, path)| path == Path4::Push) {
        anyhow::bail!(
            "--tenant-slices runs unary, batch and publish (--tenant-paths): push's deliveries go on behind each leg"
        );
    }
    for &(p, path) in chosen {
        let mut live = Vec::new();
        for (k, case) in cases.iter().enumerate() {
            let sink = crate::push::sink(false).await?;
            let data = base.join(format!("tenants-{}-{k}", path.name()));
            let (hookd, ch) = spawn(case, &data, log).await?;
            setup(case, &ch, &sink).await?;
            live.push((hookd, ch, sink, data));
        }
        println!(
            " {}: {} hookd processes set up, {slices} slices of {} s each",
            path.name(),
            live.len(),
            seconds.as_secs()
        );
        for slice in 0..usize::from(slices) {
            let mut line = format!("  slice {:>3}:", slice + 1);
            for k in (0..cases.len()).map(|k| (k + slice) % cases.len()) {
                let (hookd, ch, sink, _) = &live[k];
                let (r, cpu) =
                    leg(&cases[k], ch, sink, path, payload, seconds, hookd.pid()).await?;
                rates[k][p].push(r);
                line.push_str(&format!(" [{k}] {r:>6.0}/s"));
                if let Some(us) = cpu {
                    cpus[k][p].push(us);
                    line.push_str(&format!(" {us:>4.1} us"));
                }
            }
            println!("{line}");
        }
        for (hookd, ch, _, data) in live {
            drop(ch);
            hookd.stop(Duration::from_secs(30)).await?;
            let _ = std::fs::remove_dir_all(&data);
        }
    }
    Ok(())
}

/// Each round's `this / main` per path: the median and the range.
fn paired(chosen: &[(usize, Path4)], this: &[Vec<f64>], main: &[Vec<f64>]) -> String {
    let mut line = String::new();
    for &(p, path) in chosen {
        let ratios: Vec<f64> = this[p].iter().zip(&main[p]).map(|(a, b)| a / b).collect();
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        line.push_str(&format!(
            " {} {:.3} ({lo:.2}..{hi:.2})",
            path.name(),
            median(ratios)
        ));
    }
    line
}

fn quantiles(h: &Histogram<u64>) -> String {
    format!(
        "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3,
        h.max() as f64 / 1e3
    )
}

/// `samples` Stats calls (naming `tenant`, if any), one at a time: their latency.
async fn stats_latency(
    ch: &Channel,
    tenant: Option<&str>,
    samples: usize,
) -> anyhow::Result<Histogram<u64>> {
    let mut c = HookdClient::new(ch.clone()).max_decoding_message_size(64 << 20);
    let mut h = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    for _ in 0..samples {
        let t = Instant::now();
        c.stats(on(tenant, pb::StatsRequest::default())).await?;
        h.record(t.elapsed().as_micros() as u64)?;
    }
    Ok(h)
}

/// One hookd holding `tenants` tenants with `per` endpoints and `per` subscriptions each.
pub(crate) async fn scale(base: &Path, tenants: usize, per: usize) -> anyhow::Result<()> {
    println!(
        "\ntenants scale: {tenants} tenants, each with {per} endpoints and {per} subscriptions, in a separate hookd process"
    );
    let case = Case {
        label: "this".into(),
        exe: std::env::current_exe()?,
        prefix: vec!["__hookd"],
        spread: tenants,
        tenanted: true,
        shaped: false,
    };
    let data = base.join("tenants-scale");
    let log = base.join("tenants-scale.log");
    let started = Instant::now();
    let (hookd, ch) = spawn(&case, &data, &log).await?;
    println!(
        "  empty start: {:.2} s to serving; RSS {:.0} MB",
        started.elapsed().as_secs_f64(),
        crate::scale::rss_mb(hookd.pid()).unwrap_or(0.0)
    );
    let sink = crate::push::sink(false).await?;
    let url = sink.url("/hook");
    let made = Instant::now();
    create_tenants(&ch, tenants, 64).await?;
    let tenants_s = made.elapsed().as_secs_f64();
    let made = Instant::now();
    {
        let ch = ch.clone();
        parallel(tenants * per, 64, move |k| {
            let mut c = HookdClient::new(ch.clone());
            let (i, j) = (k / per, k % per);
            let url = url.clone();
            async move {
                let t = tenant_name(i);
                let endpoint = format!("e{j:02}");
                c.put_endpoint(on(
                    Some(&t),
                    pb::PutEndpointRequest {
                        endpoint: Some(pb::Endpoint {
                            name: endpoint.clone(),
                            url,
                            ..Default::default()
                        }),
                    },
                ))
                .await?;
                c.put_subscription(on(
                    Some(&t),
                    pb::PutSubscriptionRequest {
                        subscription: Some(pb::Subscription {
                            name: format!("s{j:02}"),
                            destination: Some(pb::subscription::Destination::Endpoint(endpoint)),
                            event_types: vec![format!("evt.{j}")],
                            ..Default::default()
                        }),
                    },
                ))
                .await?;
                Ok(())
            }
        })
        .await?;
    }
    let objects_s = made.elapsed().as_secs_f64();
    println!(
        "  made {tenants} tenants in {tenants_s:.1} s ({:.0}/s), then {} endpoints and {} subscriptions in {objects_s:.1} s ({:.0} objects/s), 64 calls in flight",
        tenants as f64 / tenants_s,
        tenants * per,
        tenants * per,
        (2 * tenants * per) as f64 / objects_s
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = |label: &str, hookd: &ChildHookd| {
        println!(
            "  RSS {label}: {:.0} MB",
            crate::scale::rss_mb(hookd.pid()).unwrap_or(0.0)
        );
    };
    report("holding them", &hookd);
    let probe = t_name_mid(tenants);
    let whole = stats_latency(&ch, None, 50).await?;
    let one = stats_latency(&ch, Some(&probe), 50).await?;
    println!("  Stats, whole hookd (first page): {}", quantiles(&whole));
    println!("  Stats, one tenant ({probe}): {}", quantiles(&one));
    not_found_timing(&ch, tenants, &sink).await?;
    let addrs = hookd.addrs()?;
    drop(ch);
    // A clean stop, then a start on the same directory.
    let stopping = Instant::now();
    hookd.stop(Duration::from_secs(120)).await?;
    let stop_s = stopping.elapsed().as_secs_f64();
    let extra: Vec<OsString> = vec![
        "--log-level".into(),
        "warn".into(),
        "--allow-destination".into(),
        "127.0.0.1/32".into(),
        "--config".into(),
        data.with_extension("toml").into_os_string(),
    ];
    let started = Instant::now();
    let hookd = ChildHookd::spawn_at(
        &case.exe,
        &case.prefix,
        &data,
        &extra,
        addrs,
        Duration::from_secs(600),
    )
    .await?;
    let restart_s = started.elapsed().as_secs_f64();
    println!("  clean stop {stop_s:.2} s; start after it: {restart_s:.2} s to serving");
    report("after the restart", &hookd);
    // kill -9, then a start.
    hookd.signal("-KILL")?;
    let mut hookd = hookd;
    hookd.wait(Duration::from_secs(30)).await?;
    let started = Instant::now();
    let hookd = ChildHookd::spawn_at(
        &case.exe,
        &case.prefix,
        &data,
        &extra,
        addrs,
        Duration::from_secs(600),
    )
    .await?;
    let killed_s = started.elapsed().as_secs_f64();
    println!("  start after kill -9: {killed_s:.2} s to serving");
    let ch = hookd_client::endpoint(hookd.grpc.clone())?
        .connect()
        .await?;
    let listed = HookdClient::new(ch.clone())
        .list_endpoints(on(Some(&probe), pb::ListEndpointsRequest::default()))
        .await?
        .into_inner()
        .endpoints
        .len();
    let one = stats_latency(&ch, Some(&probe), 50).await?;
    println!(
        "  after it: {probe} lists {listed} endpoints; its Stats {}",
        quantiles(&one)
    );
    drop(ch);
    hookd.stop(Duration::from_secs(120)).await?;
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}

/// Issue #51, 3: another tenant's object is answered as one that does not exist, in the
/// same time. As one tenant, GetEndpoint of a name only another tenant has, of a name no
/// tenant has, and of its own (the reference), alternated, 2,000 of each.
async fn not_found_timing(
    ch: &Channel,
    tenants: usize,
    sink: &hookd_testkit::Receiver,
) -> anyhow::Result<()> {
    let asker = tenant_name(tenants / 2);
    let other = tenant_name((tenants / 2 + 1) % tenants);
    let mut c = HookdClient::new(ch.clone());
    c.put_endpoint(on(
        Some(&other),
        pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: "only-theirs".into(),
                url: sink.url("/hook"),
                ..Default::default()
            }),
        },
    ))
    .await?;
    let names = ["only-theirs", "nowhere", "e00"];
    let mut hists = Vec::new();
    for _ in names {
        hists.push(Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?);
    }
    for _ in 0..2_000 {
        for (k, name) in names.iter().enumerate() {
            let t = Instant::now();
            let answer = c
                .get_endpoint(on(
                    Some(&asker),
                    pb::GetEndpointRequest {
                        name: (*name).into(),
                        reveal_secrets: false,
                    },
                ))
                .await;
            hists[k].record(t.elapsed().as_micros() as u64)?;
            let found = answer.is_ok();
            if found != (k == 2) {
                anyhow::bail!("GetEndpoint {name:?} as {asker}: found {found}");
            }
        }
    }
    println!("  GetEndpoint as {asker}, 2,000 each, alternated:");
    for (name, h) in [
        ("another tenant's name (NOT_FOUND)", &hists[0]),
        ("no tenant's name (NOT_FOUND)", &hists[1]),
        ("its own (found)", &hists[2]),
    ] {
        println!(
            "    {name:<36} p50 {:.1} us, p90 {:.1} us, p99 {:.1} us",
            h.value_at_quantile(0.5) as f64,
            h.value_at_quantile(0.9) as f64,
            h.value_at_quantile(0.99) as f64
        );
    }
    Ok(())
}

/// A tenant in the middle of the names.
fn t_name_mid(tenants: usize) -> String {
    tenant_name(tenants / 2)
}
