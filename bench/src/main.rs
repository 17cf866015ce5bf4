//! `hookd-bench`: hookd's durable Enqueue measured side by side with a bare tonic server
//! speaking the same protocol, in the same process run, alternating legs, because this
//! machine is shared and noisy: only ratios from one run mean anything.
//!
//! ```sh
//! cargo run --release -p hookd-bench -- --seconds 5 --rounds 3
//! ```

mod churn;
mod console;
mod echo;
mod fanout;
mod fifo;
mod fsync;
mod ingest;
mod load;
mod pgpeer;
mod push;
mod rawredb;
mod replay;
mod scale;
mod scrape;
mod search;
mod tenants;
mod threads;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use load::{Outcome, Shape};
use tokio::net::TcpListener;
use tonic::transport::Channel;

#[derive(Debug, Parser)]
#[command(about = "hookd Enqueue vs a bare tonic echo, side by side")]
struct Args {
    /// Seconds per leg.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Alternating rounds (echo, hookd) per measurement.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// Calls in flight for the unary measurement.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Calls in flight for the batch measurement.
    #[arg(long, default_value_t = 8)]
    batch_concurrency: usize,
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    #[arg(long, default_value_t = 512)]
    payload: usize,
    /// HTTP/2 connections the load is spread over (same for both servers).
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Run only the measurement whose name contains this (e.g. "unary", "batch").
    #[arg(long)]
    only: Option<String>,
    /// Attempts in flight for the bare hyper baseline (hookd's default per endpoint).
    #[arg(long, default_value_t = 64)]
    push_concurrency: usize,
    /// The endpoint's max_in_flight in the run with concurrent enqueues (0 = hookd's
    /// default, 64): under a flood of enqueues, deliveries per second are about this many
    /// per engine round.
    #[arg(long, default_value_t = 0)]
    push_max_in_flight: u32,
    /// Events stored before the push drain is timed.
    #[arg(long, default_value_t = 200_000)]
    push_backlog: usize,
    /// Events per second offered to each endpoint in the isolation run.
    #[arg(long, default_value_t = 500)]
    isolation_rate: u64,
    /// Timeout of the hanging endpoints in the isolation run.
    #[arg(long, default_value_t = 2_000)]
    isolation_timeout_ms: u64,
    /// Also measure a restart holding this many pending messages (0 = skip).
    #[arg(long, default_value_t = 0)]
    restart_messages: u64,
    /// Also measure a separate hookd process holding this many pending push messages: its
    /// RSS, and the time from a restart after kill -9 to the first delivery (0 = skip).
    #[arg(long, default_value_t = 0)]
    scale_messages: u64,
    /// Long polls to made-up queue names sent against a steady Enqueue load, in a separate
    /// hookd process: memory and Enqueue latency while and after they pour in (0 = skip).
    #[arg(long, default_value_t = 0)]
    churn_names: u64,
    /// A PostgreSQL to run the seed's SKIP LOCKED worker on, beside hookd's push drain
    /// (`bench/peers/postgres.sh start` prints one). Skipped when not given.
    #[arg(long)]
    pg_url: Option<String>,
    /// Events stored before each of the two drains is timed.
    #[arg(long, default_value_t = 20_000)]
    pg_backlog: u64,
    /// PostgreSQL workers, each on its own connection, and the batch each claims: 8 x 8
    /// attempts in flight at most, against hookd's default of 64 per endpoint.
    #[arg(long, default_value_t = 8)]
    pg_workers: usize,
    #[arg(long, default_value_t = 8)]
    pg_batch: i64,
    /// Subscribers of the fan-out measurement (one publish against one EnqueueBatch of this
    /// many events, to the same queues).
    #[arg(long, default_value_t = 1_000)]
    fanout_subscribers: usize,
    /// Calls in flight in the fan-out measurement.
    #[arg(long, default_value_t = 4)]
    fanout_concurrency: usize,
    /// Ordering keys of the FIFO measurement's ordered leg...
    #[arg(long, default_value_t = 10_000)]
    fifo_keys: usize,
    /// ...and the backlog each leg drains to the flaky receiver.
    #[arg(long, default_value_t = 100_000)]
    fifo_events: usize,
    /// Keep-alive HTTP/1.1 connections of the ingest measurement.
    #[arg(long, default_value_t = 64)]
    ingest_connections: usize,
    /// Requests per second offered in the ingest latency run (open loop).
    #[arg(long, default_value_t = 5_000)]
    ingest_rate: u64,
    /// The seed documents' receiver (`bench/peers/fastapi.sh start` prints it), measured
    /// beside hookd's ingest. Skipped when not given.
    #[arg(long)]
    peer_url: Option<String>,
    /// Emulate a slow disk: every fsync of hookd (its log and its redb file) takes this
    /// many ms longer (the fault backend's delay), and so does each of the bare redb
    /// floor's (two per commit: quick-repair commits in two phases).
    #[arg(long, default_value_t = 0)]
    slow_sync_ms: u64,
    /// The console run (`--only console`): endpoints, dead letters, requests per page.
    #[arg(long, default_value_t = 2_000)]
    console_endpoints: usize,
    #[arg(long, default_value_t = 100_000)]
    console_dead: usize,
    #[arg(long, default_value_t = 20)]
    console_samples: usize,
    /// The tenants run (`--only tenants`): a hookd binary built from main beside this one,
    /// measured with the same load (without it, this build only).
    #[arg(long)]
    baseline_hookd: Option<std::path::PathBuf>,
    /// The tenants run's "this" side as a `hookd` binary of this tree (`cargo build
    /// --release -p hookd`), so both sides are the same kind of binary (without it, this
    /// bench binary runs as hookd). The same path as `--baseline-hookd` makes a control
    /// run (main against itself): what the harness resolves on this box.
    #[arg(long)]
    this_hookd: Option<std::path::PathBuf>,
    /// Tenants the load is spread over in the tenants run.
    #[arg(long, default_value_t = 1_000)]
    tenants: usize,
    /// The tenants run's paths: unary, batch, publish, push (comma-separated; all without).
    #[arg(long, value_delimiter = ',')]
    tenant_paths: Vec<String>,
    /// The tenants run's N destinations cases send no header naming their target (by
    /// default they send one the size of the tenants case's `x-hookd-tenant`, so every N
    /// case's calls have one shape): then the header's own cost is measured with the rest.
    #[arg(long)]
    bare_requests: bool,
    /// The tenants run in slices: every case's hookd at once, and this many legs of each,
    /// alternating, so pairs run seconds apart (not push; with `--seconds 1` or 2).
    #[arg(long, default_value_t = 0)]
    tenant_slices: u16,
    /// The tenant scale run (`--only tenant-scale`): tenants, and endpoints and
    /// subscriptions of each.
    #[arg(long, default_value_t = 10_000)]
    scale_tenants: usize,
    #[arg(long, default_value_t = 10)]
    scale_tenant_objects: usize,
    /// The search run (`--only search`): retained events hookd holds while searches are
    /// timed...
    #[arg(long, default_value_t = 10_000_000)]
    search_events: u64,
    /// ...searches of each kind timed...
    #[arg(long, default_value_t = 200)]
    search_samples: u64,
    /// ...and events each EnqueueBatch leg (with and without declared keys) stores...
    #[arg(long, default_value_t = 300_000)]
    search_write_events: u64,
    /// ...and each one-a-call leg (unary, publish, push), with this many calls in flight.
    #[arg(long, default_value_t = 60_000)]
    search_path_events: u64,
    #[arg(long, default_value_t = 64)]
    search_path_concurrency: usize,
    /// The replay run (`--only replay`): delivered events a job resends...
    #[arg(long, default_value_t = 20_000)]
    replay_events: u64,
    /// ...at each of these paces (events/s asked; the last is more than it can)...
    #[arg(long, value_delimiter = ',', default_values_t = [1_000.0, 1_000_000.0])]
    replay_paces: Vec<f64>,
    /// ...while live traffic goes to another endpoint at this rate (events/s)...
    #[arg(long, default_value_t = 200)]
    replay_live_rate: u64,
    /// ...measured alone for this long (s).
    #[arg(long, default_value_t = 5)]
    replay_live_secs: u64,
}

/// `--slow-sync-ms`, for every hookd and the redb floor this run starts.
pub static SLOW_SYNC_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

async fn channels(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<Channel>> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            hookd_client::endpoint(format!("http://{addr}"))?
                .connect()
                .await?,
        );
    }
    Ok(out)
}

fn line(name: &str, o: &Outcome) {
    println!(
        "  {name:<6} {:>10.0} events/s  {:>9.0} calls/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}",
        o.events_per_s(),
        o.calls as f64 / o.elapsed.as_secs_f64(),
        o.p(0.5),
        o.p(0.99),
        o.errors
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// The allocator the `hookd` binary ships with, so the figures are the binary's (the echo
/// baseline runs on it too).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // `hookd-bench __hookd serve ...` is hookd itself: the scale measurement runs it as a
    // separate process, to read its RSS and kill it.
    if let Some(exit) = hookd_testkit::trampoline() {
        return exit;
    }
    // hookd's own log lines (checkpoints, replay) when RUST_LOG asks for them.
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(bench(Args::parse())) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookd-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn bench(args: Args) -> anyhow::Result<()> {
    SLOW_SYNC_MS.store(args.slow_sync_ms, std::sync::atomic::Ordering::SeqCst);
    if args.slow_sync_ms > 0 {
        println!(
            "slow disk emulated: every fsync takes {} ms longer",
            args.slow_sync_ms
        );
    }
    let dir = tempfile::tempdir()?;
    let leg = Duration::from_secs(args.seconds);

    // The baseline.
    let echo_listener = TcpListener::bind("127.0.0.1:0").await?;
    let echo_addr = echo_listener.local_addr()?;
    tokio::spawn(
        // Same transport settings as hookd's server, so only the service differs.
        tonic::transport::Server::builder()
            .initial_stream_window_size(Some(4 << 20))
            .initial_connection_window_size(Some(16 << 20))
            .add_service(echo::server())
            .serve_with_incoming(
                tonic::transport::server::TcpIncoming::from(echo_listener).with_nodelay(Some(true)),
            ),
    );

    let echo_ch = channels(echo_addr, args.connections).await?;
    println!(
        "hookd-bench: {} B payload, {} s legs, {} rounds, {} connections",
        args.payload, args.seconds, args.rounds, args.connections
    );
    let probe = |label: &str| -> anyhow::Result<()> {
        let rate = fsync::probe(dir.path(), Duration::from_millis(500))?;
        println!("  fsync probe ({label}): {rate:.0} fdatasync/s (4 KiB appends)");
        Ok(())
    };

    let measurements = [
        ("unary Enqueue", Shape::Unary, args.concurrency),
        (
            "EnqueueBatch",
            Shape::Batch(args.batch_size),
            args.batch_concurrency,
        ),
    ];
    let mut summary = Vec::new();
    for (title, shape, concurrency) in measurements {
        if args
            .only
            .as_ref()
            .is_some_and(|o| !title.to_lowercase().contains(&o.to_lowercase()))
        {
            continue;
        }
        println!(
            "\n{title}: {concurrency} calls in flight{}",
            match shape {
                Shape::Batch(n) => format!(", {n} events per call"),
                Shape::Unary => String::new(),
            }
        );
        probe("before")?;
        let (mut ratios, mut hookd_rates) = (Vec::new(), Vec::new());
        let (mut same_size, mut full_round) = (Vec::new(), Vec::new());
        for round in 1..=usize::from(args.rounds) {
            println!(" round {round}");
            let e = load::run(&echo_ch, concurrency, shape, args.payload, leg).await?;
            line("echo", &e);
            // A fresh hookd (new data dir) per leg, so every round starts from the same state
            // instead of inheriting the backlog the earlier legs left behind.
            let hookd = Hookd::start(dir.path(), round).await?;
            let hookd_ch = channels(hookd.addr, args.connections).await?;
            let cpu_before = threads::snapshot();
            let h = load::run(&hookd_ch, concurrency, shape, args.payload, leg).await?;
            // Before hookd stops: its threads' CPU is counted only while they live.
            let cpu = threads::per_event(&cpu_before, &threads::snapshot(), h.events);
            // The writer's own view of the leg: how many commits, how full, how long.
            let stats = hookd_client::Client::from_channel(hookd_ch[0].clone())
                .stats()
                .await?;
            drop(hookd_ch);
            hookd.stop().await?;
            line("hookd", &h);
            if let Some(storage) = stats.storage {
                let lat = storage.commit_latency_last_hour.unwrap_or_default();
                println!(
                    "         writer: {:.0} commits, {:.1} requests per commit, commit p50 {:.2} ms p99 {:.2} ms",
                    storage.commits_per_s * 60.0,
                    storage.requests_per_commit,
                    lat.p50_ms,
                    lat.p99_ms
                );
            }
            println!("         {}", threads::line(&cpu));
            let ratio = h.events_per_s() / e.events_per_s();
            println!("  ratio hookd/echo: {ratio:.2}");
            if let Shape::Batch(size) = shape {
                // The storage floor twice: commits of one call's size (what a client
                // writing its batches to redb itself would get), and commits as large as
                // hookd's rounds (the calls in flight folded together).
                for per_commit in [size, size * concurrency] {
                    let dir = dir.path().to_owned();
                    let payload = args.payload;
                    let raw = tokio::task::spawn_blocking(move || {
                        rawredb::run(&dir, per_commit, payload, leg)
                    })
                    .await??;
                    println!(
                        "  redb   {raw:>10.0} events/s  (bare inserts, {per_commit} per Immediate commit, 1 row per event)  ratio hookd/redb: {:.2}",
                        h.events_per_s() / raw
                    );
                    if per_commit == size {
                        same_size.push(h.events_per_s() / raw);
                    } else {
                        full_round.push(h.events_per_s() / raw);
                    }
                }
            }
            ratios.push(ratio);
            hookd_rates.push(h.events_per_s());
        }
        probe("after")?;
        let (r, rate) = (median(ratios), median(hookd_rates));
        println!(" median: hookd {rate:.0} events/s, ratio hookd/echo {r:.2}");
        if !same_size.is_empty() {
            println!(
                " median ratio hookd/redb: {:.2} against commits of one call's size, {:.2} against commits of hookd's round size",
                median(same_size),
                median(full_round)
            );
        }
        summary.push((title, rate, r));
    }
    let wants = |name: &str| {
        args.only
            .as_ref()
            .is_none_or(|o| name.contains(&o.to_lowercase()))
    };
    // The heavy runs: only when `--only` names them.
    let named = |name: &str| {
        args.only
            .as_ref()
            .is_some_and(|o| name.contains(&o.to_lowercase()))
    };
    if wants("fanout") {
        let n = args.fanout_subscribers;
        println!(
            "\nfanout: one {} B event published to {n} subscribers (pull queues) vs {n} events to the same queues in one EnqueueBatch, {} calls in flight, each leg {} s or {} deliveries",
            args.payload,
            args.fanout_concurrency,
            args.seconds,
            fanout::MAX_DELIVERIES
        );
        probe("before")?;
        let mut ratios = Vec::new();
        for round in 1..=usize::from(args.rounds) {
            println!(" round {round}");
            let mut legs = Vec::new();
            for publish in [false, true] {
                let hookd = Hookd::start(dir.path(), round).await?;
                let ch = channels(hookd.addr, 1).await?.remove(0);
                fanout::subscribe(&ch, n).await?;
                let cpu_before = threads::snapshot();
                let leg = fanout::run(&ch, n, publish, args.payload, args.fanout_concurrency, leg)
                    .await?;
                let cpu = threads::per_event(&cpu_before, &threads::snapshot(), leg.deliveries);
                drop(ch);
                hookd.stop().await?;
                println!(
                    "  {:<7} {:>10.0} deliveries/s  ({} calls, {:.0} log bytes per delivery)",
                    if publish { "publish" } else { "batch" },
                    leg.deliveries_per_s(),
                    leg.calls,
                    leg.log_bytes_per_delivery,
                );
                println!("          {} (per delivery)", threads::line(&cpu));
                legs.push(leg);
            }
            let ratio = legs[1].deliveries_per_s() / legs[0].deliveries_per_s();
            println!(
                "  ratio publish/batch: {ratio:.2}; log bytes per delivery {:.0} (publish) vs {:.0} (batch)",
                legs[1].log_bytes_per_delivery, legs[0].log_bytes_per_delivery
            );
            ratios.push(ratio);
        }
        probe("after")?;
        let r = median(ratios);
        println!(" median ratio publish/batch: {r:.2}");
    }
    if wants("security") {
        security(&args, dir.path(), leg).await?;
    }
    if wants("ingest") {
        let r = ingest_run(&args, dir.path(), leg).await?;
        summary.push(("ingest", r.0, r.1));
    }
    if wants("fifo") {
        println!(
            "\nfifo: a backlog of {} events drained by push to one receiver that answers 500 to every tenth request, unordered vs FIFO lanes over {} ordering keys (retries after 10 to 100 ms, the endpoint's defaults otherwise)",
            args.fifo_events, args.fifo_keys
        );
        probe("before")?;
        let mut ratios = Vec::new();
        for round in 1..=usize::from(args.rounds) {
            println!(" round {round}");
            let mut rates = Vec::new();
            for keys in [0, args.fifo_keys] {
                let sink = fifo::flaky_sink(10).await?;
                let hookd = Hookd::start(dir.path(), round).await?;
                let ch = channels(hookd.addr, 1).await?.remove(0);
                let d = fifo::drain(
                    &ch,
                    &sink,
                    keys,
                    args.fifo_events,
                    args.payload,
                    Duration::from_secs(300),
                )
                .await?;
                drop(ch);
                hookd.stop().await?;
                println!(
                    "  {:<9} {:>10.0} deliveries/s  ({} answered 500 and retried)",
                    if keys > 0 { "fifo" } else { "unordered" },
                    d.deliveries_per_s,
                    d.failed
                );
                rates.push(d.deliveries_per_s);
            }
            let ratio = rates[1] / rates[0];
            println!("  ratio fifo/unordered: {ratio:.2}");
            ratios.push(ratio);
        }
        probe("after")?;
        println!(" median ratio fifo/unordered: {:.2}", median(ratios));
    }
    if wants("push delivery") {
        let sink = push::sink(false).await?;
        println!(
            "\npush delivery: hookd end to end (EnqueueBatch {} x {} in flight in, POST to a loopback sink out, every outcome committed) vs a bare hyper client with {} in flight to the same sink",
            args.batch_concurrency, args.batch_size, args.push_concurrency
        );
        probe("before")?;
        let (mut ratios, mut rates) = (Vec::new(), Vec::new());
        for round in 1..=usize::from(args.rounds) {
            println!(" round {round}");
            let bare = push::bare_hyper(&sink, args.push_concurrency, args.payload, leg).await?;
            println!("  hyper  {bare:>10.0} requests/s");
            let hookd = Hookd::start(dir.path(), round).await?;
            let ch = channels(hookd.addr, 1).await?.remove(0);
            let cpu_before = threads::snapshot();
            let (drain, stats) = push::hookd_drain(
                &ch,
                &sink,
                args.push_backlog,
                args.payload,
                Duration::from_secs(120),
            )
            .await?;
            let cpu =
                threads::per_event(&cpu_before, &threads::snapshot(), args.push_backlog as u64);
            hookd.stop().await?;
            println!(
                "  hookd  {drain:>10.0} deliveries/s  (draining {} stored events)",
                args.push_backlog
            );
            println!(
                "         {} (per delivered event, its enqueue and the sink's side included)",
                threads::line(&cpu)
            );
            if let Some(storage) = stats.storage {
                let lat = storage.commit_latency_last_hour.unwrap_or_default();
                println!(
                    "         writer: {:.1} requests per commit, commit p50 {:.2} ms p99 {:.2} ms (whole run, enqueue included)",
                    storage.requests_per_commit, lat.p50_ms, lat.p99_ms
                );
            }
            let ratio = drain / bare;
            println!("  ratio hookd/hyper: {ratio:.2}");
            ratios.push(ratio);
            rates.push(drain);

            // The same with clients enqueueing as fast as they can at the same time.
            let hookd = Hookd::start(dir.path(), round).await?;
            let ch = channels(hookd.addr, 1).await?.remove(0);
            let t = push::hookd_end_to_end(
                &ch,
                &sink,
                args.push_max_in_flight,
                args.batch_concurrency,
                args.batch_size,
                args.payload,
                leg,
            )
            .await?;
            let stats = hookd_client::Client::from_channel(ch.clone())
                .stats()
                .await?;
            drop(ch);
            hookd.stop().await?;
            println!(
                "  hookd  {:>10.0} deliveries/s  while enqueueing {:.0}/s closed loop (backlog at the end {})",
                t.delivered_per_s, t.enqueued_per_s, t.backlog
            );
            if let Some(storage) = stats.storage {
                let lat = storage.commit_latency_last_hour.unwrap_or_default();
                println!(
                    "         writer: {:.1} requests per commit, commit p50 {:.2} ms p99 {:.2} ms",
                    storage.requests_per_commit, lat.p50_ms, lat.p99_ms
                );
            }
        }
        probe("after")?;
        let (r, rate) = (median(ratios), median(rates));
        println!(" median: hookd {rate:.0} deliveries/s, ratio hookd/hyper {r:.2}");
        summary.push(("push delivery", rate, r));
    }
    if named("tenants") {
        tenants::cost(
            dir.path(),
            tenants::Builds {
                main: args.baseline_hookd.as_deref(),
                this: args.this_hookd.as_deref(),
                bare_requests: args.bare_requests,
                slices: args.tenant_slices,
            },
            args.tenants.max(1),
            args.rounds,
            leg,
            args.payload,
            &args.tenant_paths,
        )
        .await?;
    }
    if named("tenant-scale") {
        tenants::scale(
            dir.path(),
            args.scale_tenants.max(1),
            args.scale_tenant_objects.max(1),
        )
        .await?;
    }
    if named("metrics scrape") {
        println!("\nmetrics scrape: GET /metrics vs the Stats call, 20 of each per size");
        let failing = hookd_testkit::Receiver::start(hookd_testkit::Reply::Status(503)).await?;
        for n in [100, 2_000, 10_000, 100_000] {
            let hookd = Hookd::start(dir.path(), n).await?;
            let ch = channels(hookd.addr, 1).await?.remove(0);
            let mut client = hookd_client::Client::from_channel(ch);
            scrape::run(&mut client, hookd.running.http, n, 20, &failing).await?;
            hookd.stop().await?;
        }
    }
    if named("search") {
        // Every event stays live (nobody reads the queues): the marks hold them all.
        let marks = |config: &mut hookd::Config, events: u64| {
            config.backpressure.max_messages = events * 2 + 1_000_000;
            config.backpressure.max_bytes = u64::MAX / 4;
            config.backpressure.destination_max_messages = events;
            config.backpressure.destination_max_bytes = u64::MAX / 4;
        };
        let (batch, tasks) = (args.batch_size as u64, args.batch_concurrency);
        println!(
            "
search, write paths: EnqueueBatch of {} events ({batch} a call, {tasks} calls in flight), and Enqueue of {} events one a call ({} in flight) to queues, to a topic (one subscription) and to an endpoint (a 200 sink), {} B padding; event types with and without declared search keys, alternated",
            args.search_write_events, args.search_path_events, args.search_path_concurrency, args.payload
        );
        probe("before")?;
        let sink = hookd_testkit::Receiver::start(hookd_testkit::Reply::Status(200)).await?;
        for path in search::Path::ALL {
            let mut ratios = Vec::new();
            for round in 1..=usize::from(args.rounds) {
                let order = if round % 2 == 1 {
                    [false, true]
                } else {
                    [true, false]
                };
                let mut rates = [0.0; 2];
                for keys in order {
                    let data = dir
                        .path()
                        .join(format!("search-{}-{round}-{keys}", path.name()));
                    let events = match path {
                        search::Path::Batch => args.search_write_events,
                        _ => args.search_path_events,
                    };
                    let hookd = Hookd::start_configured(data.clone(), |c| {
                        c.event_types = search::event_types(keys);
                        marks(c, events);
                    })
                    .await?;
                    let ch = channels(hookd.addr, args.connections).await?;
                    let mut client = hookd_client::Client::from_channel(ch[0].clone());
                    search::prepare(&mut client, path, &sink.url("/hook")).await?;
                    let calls = match path {
                        search::Path::Batch => tasks,
                        _ => args.search_path_concurrency,
                    };
                    let rate = search::fill(&ch, path, events, batch, calls, args.payload).await?;
                    drop((ch, client));
                    hookd.stop().await?;
                    let _ = std::fs::remove_dir_all(&data);
                    rates[usize::from(keys)] = rate;
                }
                let ratio = rates[1] / rates[0];
                println!(
                    " {} round {round}: without keys {:.0} events/s, with keys {:.0} events/s: {ratio:.3}",
                    path.name(),
                    rates[0],
                    rates[1]
                );
                ratios.push(ratio);
            }
            println!(
                "  {}: with / without declared keys, median: {:.3}",
                path.name(),
                median(ratios)
            );
        }
        probe("after")?;
        let n = args.search_events;
        println!(
            "
search at scale: {n} retained events in {QUEUES} queues, then {} searches of each kind",
            args.search_samples,
            QUEUES = 100
        );
        let data = dir.path().join("search-scale");
        let hookd = Hookd::start_configured(data.clone(), |c| {
            c.event_types = search::event_types(true);
            marks(c, n);
        })
        .await?;
        let ch = channels(hookd.addr, args.connections).await?;
        let rate = search::fill(&ch, search::Path::Batch, n, batch, tasks, args.payload).await?;
        let mut client = hookd_client::Client::from_channel(ch[0].clone());
        println!("  stored at {rate:.0} events/s");
        search::measure(&mut client, args.search_samples, n).await?;
        let db = std::fs::metadata(data.join("hookd.redb")).map_or(0, |m| m.len());
        let stats = client.stats().await?;
        println!(
            "  redb file {:.0} MB, log {:.0} MB",
            db as f64 / 1e6,
            stats.storage.map_or(0, |s| s.log_bytes) as f64 / 1e6
        );
        drop(ch);
        hookd.stop().await?;
        let _ = std::fs::remove_dir_all(&data);
    }
    if named("replay") {
        println!(
            "\nreplay jobs: {} delivered events resent to a loopback sink by a job at {:?} events/s, live traffic at {}/s to another endpoint beside it",
            args.replay_events, args.replay_paces, args.replay_live_rate
        );
        probe("before")?;
        let data = dir.path().join("replay");
        let hookd = Hookd::start_configured(data.clone(), |_| {}).await?;
        let ch = channels(hookd.addr, 1).await?.remove(0);
        let mut client = hookd_client::Client::from_channel(ch);
        replay::run(
            &mut client,
            args.replay_events,
            &args.replay_paces,
            args.replay_live_rate,
            args.replay_live_secs,
        )
        .await?;
        hookd.stop().await?;
        let _ = std::fs::remove_dir_all(&data);
        probe("after")?;
    }
    if named("console") {
        println!(
            "\nconsole: page render times with {} endpoints and {} dead letters, {} requests per page",
            args.console_endpoints, args.console_dead, args.console_samples
        );
        let sink = hookd_testkit::Receiver::start(hookd_testkit::Reply::Status(400)).await?;
        let hookd = Hookd::start(dir.path(), 0).await?;
        let ch = channels(hookd.addr, 1).await?.remove(0);
        let mut client = hookd_client::Client::from_channel(ch);
        console::run(
            &mut client,
            hookd.running.http,
            &sink.url("/hook"),
            args.console_endpoints,
            args.console_dead,
            args.console_samples,
        )
        .await?;
        hookd.stop().await?;
    }
    if wants("isolation") {
        let (n, hanging, measured) = (8, 4, 4);
        println!(
            "\nisolation: {n} endpoints at {} events/s each; the first {measured} are always healthy; then the last {hanging} hang until their {} ms timeout",
            args.isolation_rate, args.isolation_timeout_ms
        );
        for round in 1..=usize::from(args.rounds) {
            println!(" round {round}");
            for hang in [0, hanging] {
                let hookd = Hookd::start(dir.path(), round).await?;
                let ch = channels(hookd.addr, 1).await?.remove(0);
                let r = push::isolation(
                    &ch,
                    n,
                    hang,
                    measured,
                    args.isolation_rate,
                    args.isolation_timeout_ms,
                    args.payload,
                    leg,
                )
                .await?;
                drop(ch);
                hookd.stop().await?;
                println!(
                    "  {hang} hanging: healthy {:>8.0} deliveries/s  end-to-end p50 {:>7.2} ms  p99 {:>7.2} ms  (attempts on hanging endpoints: {})",
                    r.healthy_delivered_per_s,
                    r.healthy_p50_ms,
                    r.healthy_p99_ms,
                    r.hanging_attempts
                );
            }
        }
    }
    if args.restart_messages > 0 {
        restart(
            dir.path(),
            args.restart_messages,
            args.payload,
            args.connections,
        )
        .await?;
    }
    if args.scale_messages > 0 {
        scale::run(dir.path(), args.scale_messages, args.payload).await?;
    }
    if let Some(url) = &args.pg_url {
        let sink = push::sink(false).await?;
        println!(
            "\npush drain vs PostgreSQL: {} stored events POSTed to a loopback sink, outcomes committed; hookd (one endpoint, max_in_flight 64) vs the SKIP LOCKED worker ({} workers x {} per claim)",
            args.pg_backlog, args.pg_workers, args.pg_batch
        );
        let mut ratios = Vec::new();
        for round in 1..=usize::from(args.rounds) {
            let pg = pgpeer::drain(
                url,
                &sink,
                "/pg",
                args.pg_backlog,
                args.pg_workers,
                args.pg_batch,
                args.payload,
                Duration::from_secs(600),
            )
            .await?;
            let hookd = Hookd::start(dir.path(), round).await?;
            let ch = channels(hookd.addr, 1).await?.remove(0);
            let (drain, _) = push::hookd_drain(
                &ch,
                &sink,
                usize::try_from(args.pg_backlog)?,
                args.payload,
                Duration::from_secs(600),
            )
            .await?;
            hookd.stop().await?;
            println!(
                " round {round}: postgres {pg:>8.0} deliveries/s   hookd {drain:>8.0} deliveries/s   hookd/postgres {:.1}",
                drain / pg
            );
            ratios.push(drain / pg);
        }
        println!("  median hookd/postgres: {:.1}", median(ratios));
    }
    if args.churn_names > 0 {
        churn::run(dir.path(), args.churn_names, args.seconds, args.payload).await?;
    }
    println!("\nsummary");
    for (title, rate, ratio) in summary {
        let baseline = if title == "push delivery" {
            "hookd/hyper"
        } else {
            "hookd/echo"
        };
        println!("  {title:<14} hookd {rate:>10.0} events/s   {baseline} {ratio:.2}");
    }
    Ok(())
}

/// Fills a hookd with `n` pending messages, stops it, and times the start that follows:
/// opening the file and rebuilding the index from the schedule table, to the first answer.
async fn restart(
    base: &std::path::Path,
    n: u64,
    payload: usize,
    connections: usize,
) -> anyhow::Result<()> {
    println!("\nrestart with {n} pending messages of {payload} B");
    let data_dir = base.join(format!("restart-{}", uuid::Uuid::new_v4().simple()));
    let hookd = Hookd::start_in(data_dir.clone()).await?;
    let ch = channels(hookd.addr, connections).await?;
    let filled = Instant::now();
    let stored = load::fill(
        &ch,
        n,
        payload,
        hookd_proto::v1::enqueue_request::Destination::Queue("restart".into()),
        "r",
    )
    .await?;
    println!(
        "  filled {stored} in {:.1} s",
        filled.elapsed().as_secs_f64()
    );
    drop(ch);
    hookd.stop_keep().await?;
    let size = std::fs::metadata(data_dir.join("hookd.redb"))?.len();
    let started = Instant::now();
    let hookd = Hookd::start_in(data_dir.clone()).await?;
    let ready = started.elapsed();
    let mut client = hookd_client::Client::connect(format!("http://{}", hookd.addr)).await?;
    let first = client
        .receive("restart", 1, Duration::from_secs(60), None)
        .await?;
    let first_lease = started.elapsed();
    let stats = client.stats().await?;
    println!(
        "  file {:.0} MB; restart to ready {:.2} s, to first lease {:.2} s; pending after restart {}",
        size as f64 / 1e6,
        ready.as_secs_f64(),
        first_lease.as_secs_f64(),
        stats.total.map_or(0, |t| t.pending) + first.len() as u64,
    );
    hookd.stop().await?;
    Ok(())
}

/// hookd in-process with its default configuration on a temp data dir.
struct Hookd {
    addr: SocketAddr,
    data_dir: std::path::PathBuf,
    running: hookd_testkit::InProcess,
}

impl Hookd {
    async fn start(base: &std::path::Path, round: usize) -> anyhow::Result<Self> {
        Self::start_in(base.join(format!("hookd-{round}-{}", uuid::Uuid::new_v4().simple()))).await
    }

    async fn start_in(data_dir: std::path::PathBuf) -> anyhow::Result<Self> {
        Self::start_configured(data_dir, |_| {}).await
    }

    async fn start_configured(
        data_dir: std::path::PathBuf,
        adjust: impl FnOnce(&mut hookd::Config),
    ) -> anyhow::Result<Self> {
        let mut config = hookd::Config {
            data_dir: data_dir.clone(),
            ..Default::default()
        };
        adjust(&mut config);
        // The push measurements' sinks are on loopback.
        config.delivery.allow_destinations =
            vec!["127.0.0.1/32".parse().map_err(anyhow::Error::msg)?];
        let slow = SLOW_SYNC_MS.load(std::sync::atomic::Ordering::SeqCst);
        let hooks = if slow > 0 {
            let faults = hookd_storage::store::faults::Faults::default();
            faults.delay_syncs(slow);
            hookd::Hooks {
                faults: Some(faults),
                ..Default::default()
            }
        } else {
            hookd::Hooks::default()
        };
        let running = hookd_testkit::InProcess::start(config, hooks).await?;
        Ok(Self {
            addr: running.grpc,
            data_dir,
            running,
        })
    }

    async fn stop(self) -> anyhow::Result<()> {
        let dir = self.data_dir.clone();
        self.stop_keep().await?;
        std::fs::remove_dir_all(dir)?;
        Ok(())
    }

    /// Stops, keeping the data dir.
    async fn stop_keep(self) -> anyhow::Result<()> {
        self.running.stop().await?;
        Ok(())
    }
}

/// What authentication and TLS cost: unary Enqueue against one hookd open (no token,
/// plaintext), one that checks a bearer token, and one that checks a token over TLS, in
/// alternating legs of one run; the ratios are to the open hookd.
/// hookd's ingest listener vs a bare hyper 202 (and the FastAPI + Redis peer when given),
/// closed loop over the same connections, then open loop at `--ingest-rate`. Returns
/// hookd's accepted/s and its median ratio to bare hyper.
async fn ingest_run(
    args: &Args,
    dir: &std::path::Path,
    leg: Duration,
) -> anyhow::Result<(f64, f64)> {
    let conns = args.ingest_connections;
    let probe = |label: &str| -> anyhow::Result<()> {
        let rate = fsync::probe(dir, Duration::from_millis(500))?;
        println!("  fsync probe ({label}): {rate:.0} fdatasync/s (4 KiB appends)");
        Ok(())
    };
    let bare = ingest::bare_server().await?;
    let peer: Option<SocketAddr> = match &args.peer_url {
        Some(url) => Some(
            url.trim_start_matches("http://")
                .trim_end_matches('/')
                .parse()
                .map_err(|e| anyhow::anyhow!("--peer-url {url}: {e}"))?,
        ),
        None => None,
    };
    println!(
        "\ningest: signed Standard Webhooks POSTs ({} B bodies) over {conns} keep-alive connections: bare hyper (reads the body, answers 202) vs hookd (verifies, stores durably, answers 202){}",
        args.payload,
        if peer.is_some() {
            " vs the FastAPI + Redis receiver (SET NX, LPUSH; appendfsync as its script set it)"
        } else {
            ""
        }
    );
    probe("before")?;
    let source = |c: &mut hookd::Config| {
        c.sources = vec![hookd_core::source::SourceSpec {
            secrets: vec![ingest::SECRET.into()],
            ..hookd_core::source::SourceSpec::new(
                "bench",
                hookd_core::source::SchemeName::StandardWebhooks,
                "bench-in",
            )
        }];
    };
    let (mut ratios, mut rates, mut peer_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=usize::from(args.rounds) {
        println!(" round {round}, closed loop");
        let b = ingest::closed_loop(
            bare,
            "/in/bench",
            conns,
            args.payload,
            leg,
            &format!("b{round}"),
        )
        .await?;
        ingest::line("hyper", &b);
        let hookd = Hookd::start_configured(dir.join(format!("ingest-{round}")), source).await?;
        let h = ingest::closed_loop(
            hookd.running.ingest,
            "/in/bench",
            conns,
            args.payload,
            leg,
            &format!("h{round}"),
        )
        .await?;
        let stats = hookd_client::Client::connect(format!("http://{}", hookd.addr))
            .await?
            .stats()
            .await?;
        let stored = stats.total.map_or(0, |t| t.pending);
        hookd.stop().await?;
        ingest::line("hookd", &h);
        println!("           stored {stored} (accepted {})", h.accepted);
        if let Some(storage) = stats.storage {
            let lat = storage.commit_latency_last_hour.unwrap_or_default();
            println!(
                "           writer: {:.1} requests per commit, commit p50 {:.2} ms p99 {:.2} ms",
                storage.requests_per_commit, lat.p50_ms, lat.p99_ms
            );
        }
        let ratio = h.per_s() / b.per_s();
        println!("  ratio hookd/hyper: {ratio:.2}");
        ratios.push(ratio);
        rates.push(h.per_s());
        if let Some(peer) = peer {
            let p = ingest::closed_loop(
                peer,
                "/in/bench",
                conns,
                args.payload,
                leg,
                &format!("p{round}-{}", uuid::Uuid::new_v4().simple()),
            )
            .await?;
            ingest::line("fastapi", &p);
            let r = h.per_s() / p.per_s().max(1e-9);
            println!(
                "  ratio hookd/fastapi: {r:.1} (p99 {:.2} ms vs {:.2} ms)",
                h.p(0.99),
                p.p(0.99)
            );
            peer_ratios.push(r);
        }
    }
    println!(
        " open loop: {} requests/s offered for {} s over {conns} connections, latency from when each was due",
        args.ingest_rate,
        leg.as_secs()
    );
    let hookd = Hookd::start_configured(dir.join("ingest-open"), source).await?;
    let h = ingest::open_loop(
        hookd.running.ingest,
        "/in/bench",
        args.ingest_rate,
        conns,
        args.payload,
        leg,
        "open",
    )
    .await?;
    hookd.stop().await?;
    ingest::line("hookd", &h);
    let b = ingest::open_loop(
        bare,
        "/in/bench",
        args.ingest_rate,
        conns,
        args.payload,
        leg,
        "open-b",
    )
    .await?;
    ingest::line("hyper", &b);
    if let Some(peer) = peer {
        let p = ingest::open_loop(
            peer,
            "/in/bench",
            args.ingest_rate,
            conns,
            args.payload,
            leg,
            &format!("open-p-{}", uuid::Uuid::new_v4().simple()),
        )
        .await?;
        ingest::line("fastapi", &p);
    }
    probe("after")?;
    let (r, rate) = (median(ratios), median(rates));
    println!(" median: hookd {rate:.0} accepted/s, ratio hookd/hyper {r:.2}");
    if !peer_ratios.is_empty() {
        println!(" median ratio hookd/fastapi {:.1}", median(peer_ratios));
    }
    Ok((rate, r))
}

async fn security(args: &Args, dir: &std::path::Path, leg: Duration) -> anyhow::Result<()> {
    use rcgen::{CertificateParams, KeyPair};
    const TOKEN: &str = "bench-token-0123456789abcdef";
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["localhost".to_owned()])?.self_signed(&key)?;
    let cert_file = dir.join("bench-tls.pem");
    let key_file = dir.join("bench-tls.key");
    std::fs::write(&cert_file, cert.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    let token = |config: &mut hookd::Config| {
        config.auth.tokens = vec![hookd::auth::TokenConfig {
            name: "bench".into(),
            sha256: Some(hookd_core::names::hex(&hookd::auth::token_hash(TOKEN))),
            file: None,
            env: None,
            scopes: vec![hookd::auth::Scope::Enqueue],
            rate_limit_per_s: None,
        }];
    };
    println!(
        "\nsecurity: unary Enqueue, {} calls in flight: open vs bearer token vs token over TLS (rustls, ring)",
        args.concurrency
    );
    let (mut token_ratios, mut tls_ratios) = (Vec::new(), Vec::new());
    for round in 1..=usize::from(args.rounds) {
        println!(" round {round}");
        let mut rates = Vec::new();
        for (name, tls) in [("open", false), ("token", false), ("tls", true)] {
            let data = dir.join(format!("security-{round}-{name}"));
            let (cert_file, key_file) = (cert_file.clone(), key_file.clone());
            let hookd = Hookd::start_configured(data, |c| {
                if name != "open" {
                    token(c);
                }
                if tls {
                    c.tls.cert_file = Some(cert_file);
                    c.tls.key_file = Some(key_file);
                }
            })
            .await?;
            let mut chans = Vec::new();
            for _ in 0..args.connections {
                let options = hookd_client::Options {
                    ca_pem: tls.then(|| cert.pem().into_bytes()),
                    domain: tls.then(|| "localhost".to_owned()),
                    ..Default::default()
                };
                let scheme = if tls { "https" } else { "http" };
                chans.push(
                    hookd_client::secure_endpoint(format!("{scheme}://{}", hookd.addr), &options)?
                        .connect()
                        .await?,
                );
            }
            let credentials = if name == "open" {
                hookd_client::Credentials::none()
            } else {
                hookd_client::Credentials::bearer(TOKEN)?
            };
            let o = load::run_as(
                &chans,
                credentials,
                args.concurrency,
                Shape::Unary,
                args.payload,
                leg,
            )
            .await?;
            drop(chans);
            hookd.stop().await?;
            line(name, &o);
            rates.push(o.events_per_s());
        }
        let (t, s) = (rates[1] / rates[0], rates[2] / rates[0]);
        println!("  ratio token/open: {t:.2}  tls/open: {s:.2}");
        token_ratios.push(t);
        tls_ratios.push(s);
    }
    println!(
        " median ratio token/open {:.2}, token+TLS/open {:.2}",
        median(token_ratios),
        median(tls_ratios)
    );
    Ok(())
}
