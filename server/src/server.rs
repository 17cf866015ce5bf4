//! Wiring: open the store, start the engine, serve gRPC and HTTP until shutdown.
//!
//! [`run`] takes already-bound listeners and a shutdown future, so tests start a real server
//! on `127.0.0.1:0` in-process and stop it cleanly; the binary passes SIGTERM/SIGINT.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hookd_proto::v1::hookd_server::HookdServer;
use tokio::net::TcpListener;

use crate::api::{HookdService, validate::Limits};
use crate::config::{Config, ConfigError};
use hookd_core::clock::{Clock, SystemClock};
use hookd_delivery::guard::AddressGuard;
use hookd_delivery::{Dispatcher, DispatcherConfig};
use hookd_engine::{EngineConfig, EngineHandle};
use hookd_metrics::Metrics;
use hookd_storage::store::{Storage, StoreError};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("HTTP server: {0}")]
    Io(#[from] std::io::Error),
    #[error("push delivery setup: {0}")]
    Delivery(String),
    #[error(transparent)]
    Tls(#[from] crate::listen::TlsError),
    /// A listener on a non-loopback address with no authentication.
    #[error("{0}")]
    Exposed(String),
    /// A stored secret that the configured keys cannot open.
    #[error("endpoint secrets: {0}")]
    Secrets(String),
    /// Storage failed while serving and `storage.on_failure = "exit"`.
    #[error("storage failed: {0}")]
    StorageFailed(String),
}

/// Called once the engine is up, with its handle (tests use it to wake the engine after
/// moving an injected clock).
pub type OnReady = Box<dyn FnOnce(EngineHandle) + Send>;

/// What a test may plug into hookd ([`run_with`]). The binary uses [`run`], which plugs in
/// nothing, so none of it is linked into the binary (`.ci/no-test-hooks`).
pub struct Hooks {
    /// Where time comes from (tests inject a manual clock).
    pub clock: Arc<dyn Clock>,
    pub on_ready: Option<OnReady>,
    /// Storage that fails on demand (tests of storage failure).
    pub faults: Option<hookd_storage::store::faults::Faults>,
    /// Seeds the engine's random source (retry jitter), so a test sees the same draws on
    /// every run. `None`: seeded from the OS.
    pub rng_seed: Option<u64>,
    /// Measures free disk space instead of the data directory's file system.
    pub disk: Option<hookd_storage::disk::Probe>,
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            on_ready: None,
            faults: None,
            rng_seed: None,
            disk: None,
        }
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("clock", &self.clock)
            .field("faults", &self.faults)
            .finish()
    }
}

/// Opens the store and its log (in a data directory, with a page cache of so many bytes
/// and log segments of so many).
type OpenStore =
    Arc<dyn Fn(&std::path::Path, usize, u64) -> Result<Storage, StoreError> + Send + Sync>;

/// What [`serve`] runs with: the system's clock, file and file system unless a test plugged
/// in others.
struct Plugged {
    clock: Arc<dyn Clock>,
    on_ready: Option<OnReady>,
    open_store: OpenStore,
    rng_seed: Option<u64>,
    disk: Option<hookd_storage::disk::Probe>,
}

impl Default for Plugged {
    fn default() -> Self {
        Self {
            clock: Arc::new(SystemClock),
            on_ready: None,
            open_store: Arc::new(Storage::open_dir),
            rng_seed: None,
            disk: None,
        }
    }
}

/// The listeners hookd serves on, bound by the caller.
#[derive(Debug)]
pub struct Listeners {
    /// The gRPC API.
    pub grpc: TcpListener,
    /// `/healthz`, `/metrics`.
    pub http: TcpListener,
    /// `POST /in/{source}` and nothing else.
    pub ingest: TcpListener,
}

impl Listeners {
    /// Second handles on the same three sockets: a storage recovery stops the servers
    /// (closing their handles) and serves again on these, so the addresses stay bound
    /// and connections that arrive meanwhile wait in the backlog.
    fn try_clone(&self) -> std::io::Result<Self> {
        use std::os::fd::AsFd;
        let dup = |l: &TcpListener| -> std::io::Result<TcpListener> {
            let std = std::net::TcpListener::from(l.as_fd().try_clone_to_owned()?);
            std.set_nonblocking(true)?;
            TcpListener::from_std(std)
        };
        Ok(Self {
            grpc: dup(&self.grpc)?,
            http: dup(&self.http)?,
            ingest: dup(&self.ingest)?,
        })
    }

    /// All three on `127.0.0.1:0`.
    pub async fn loopback() -> std::io::Result<Self> {
        let bind = || TcpListener::bind("127.0.0.1:0");
        Ok(Self {
            grpc: bind().await?,
            http: bind().await?,
            ingest: bind().await?,
        })
    }
}

/// Runs hookd on the given listeners until `shutdown` resolves. Then: stop accepting, answer
/// waiting long polls, let in-flight calls finish, commit the engine's last round, return.
pub async fn run(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve(config, listeners, shutdown, Plugged::default()).await
}

/// As [`run`], with what a test plugs in.
pub async fn run_with(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    hooks: Hooks,
) -> Result<(), ServeError> {
    let mut plugged = Plugged {
        clock: hooks.clock,
        on_ready: hooks.on_ready,
        rng_seed: hooks.rng_seed,
        disk: hooks.disk,
        ..Plugged::default()
    };
    if let Some(faults) = hooks.faults {
        plugged.open_store = Arc::new(move |dir, cache, segment| {
            Storage::open_faulty(dir, cache, segment, faults.clone())
        });
    }
    serve(config, listeners, shutdown, plugged).await
}

/// How one incarnation of the servers ended.
enum Ended {
    /// Asked to stop.
    Shutdown,
    /// The storage failed: everything was stopped in order, nothing answered after.
    StorageFailed(String),
}

/// Serves until `shutdown`; after a storage failure, either stops with
/// [`ServeError::StorageFailed`] (`storage.on_failure = "exit"`) or closes everything,
/// reopens the store (replaying and checking the log) and serves again on the same
/// sockets, retrying the reopening every `storage.recover_interval_ms`.
async fn serve(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut plugged: Plugged,
) -> Result<(), ServeError> {
    config.validate()?;
    let (quit_tx, quit) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = quit_tx.send(true);
    });
    ignore_file_size_signal();
    crate::memory::no_huge_pages();
    let shared = Shared {
        metrics: Arc::new(Metrics::new(hookd_metrics::Build {
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("HOOKD_COMMIT"),
        })),
        engine: tokio::sync::watch::Sender::new(None),
        headroom: Arc::new(hookd_storage::disk::Headroom::new(
            config.storage.reserve_mb,
            config.storage.reserve_percent,
        )),
        disk: plugged
            .disk
            .take()
            .unwrap_or_else(|| hookd_storage::disk::probe_dir(&config.data_dir)),
    };
    // Under systemd's WatchdogSec=, WATCHDOG=1 while the engine finishes rounds.
    let _watchdog = sd_notify::watchdog_enabled().map(|timeout| {
        let period = crate::watchdog::period(timeout);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        tracing::info!(
            timeout_ms = ms(timeout),
            period_ms = ms(period),
            "service manager watchdog on"
        );
        let engine = shared.engine.subscribe();
        AbortOnDrop(tokio::spawn(crate::watchdog::keep_alive(
            period,
            move || {
                let engine = engine.borrow().clone()?;
                Some(async move {
                    // A refusal is an answer too: a failed store is being reopened.
                    let _ = engine.ping().await;
                })
            },
            || supervisor(&[sd_notify::NotifyState::Watchdog]),
        )))
    });
    // What may still be written once the reserve is reached: the log up to a checkpoint and
    // redb's copy of it (copy-on-write pages kept until the checkpoint), and a segment or two.
    let needed_mb = 4 * config.checkpoint_log_mb + 2 * config.log_segment_mb;
    if config.storage.reserve_mb < needed_mb && config.storage.reserve_percent == 0.0 {
        tracing::warn!(
            reserve_mb = config.storage.reserve_mb,
            needed_mb,
            "storage.reserve_mb is small for these log settings (4 x checkpoint_log_mb + 2 x log_segment_mb): a full disk may fail a write instead of refusing new events"
        );
    }
    let mut first = true;
    let mut repeats = Repeats::default();
    loop {
        let handles = listeners.try_clone()?;
        let why = match serve_once(&config, handles, quit.clone(), &mut plugged, &shared).await {
            Ok(Ended::Shutdown) => return Ok(()),
            Ok(Ended::StorageFailed(why)) => {
                if config.storage.on_failure == crate::config::OnStorageFailure::Exit {
                    tracing::error!(reason = %why, "storage failed; exiting (storage.on_failure = \"exit\")");
                    return Err(ServeError::StorageFailed(why));
                }
                tracing::error!(reason = %why, "storage failed; everything stopped in order; reopening the store");
                supervisor(&[sd_notify::NotifyState::Status(
                    "storage failed: answering UNAVAILABLE while the store is reopened",
                )]);
                why
            }
            // The first start's errors are the caller's (a bad config, a store that does
            // not open); after a failure, the store may take a while to come back.
            Err(e) if first => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, retry_in_ms = config.storage.recover_interval_ms, "storage still failing; retrying");
                // A disk that is failing may come back; a file that is damaged will not.
                if is_damage(&e) {
                    e.to_string()
                } else {
                    String::new()
                }
            }
        };
        first = false;
        // A failure that comes back the same after every reopen (a damaged file, say) is
        // not one recovery mends: stop, and say so, instead of reporting "serving" between
        // failures for ever.
        let seen = if why.is_empty() {
            repeats = Repeats::default();
            0
        } else {
            repeats.saw(&why)
        };
        let limit = config.storage.max_identical_failures;
        if limit > 0 && seen >= limit {
            let file = config.data_dir.join("hookd.redb");
            tracing::error!(reason = %why, times = seen, file = %file.display(), "the same storage failure came back after every reopen; exiting");
            return Err(ServeError::StorageFailed(format!(
                "the same storage failure happened {seen} times in a row, so reopening does not mend it \
                 (storage.max_identical_failures = {limit}); the data is in {}: stop hookd, run \
                 `hookd repair --dry-run --data-dir {}` to see what is damaged, then `hookd repair`, \
                 or restore the directory from a backup. The failure: {why}",
                file.display(),
                config.data_dir.display()
            )));
        }
        // Until the next try, the listeners answer that hookd is recovering: gRPC health
        // NOT_SERVING and UNAVAILABLE for every call, 503 on /healthz and the ingest route.
        let (down_tx, down_rx) = tokio::sync::watch::channel(false);
        let down = tokio::spawn(serve_down(config.clone(), listeners.try_clone()?, down_rx));
        let mut quit = quit.clone();
        let quitting = tokio::select! {
            _ = quit.wait_for(|q| *q) => true,
            () = tokio::time::sleep(Duration::from_millis(config.storage.recover_interval_ms)) => false,
        };
        let _ = down_tx.send(true);
        let _ = down.await;
        if quitting {
            return Ok(());
        }
    }
}

/// Whether a failed reopen found damage (which reopening again cannot mend) rather than
/// an I/O error (a disk that may come back).
fn is_damage(e: &ServeError) -> bool {
    use hookd_storage::wal::LogError;
    match e {
        ServeError::Store(StoreError::Log(LogError::Io(_))) => false,
        ServeError::Store(
            StoreError::Corrupt(_)
            | StoreError::Damaged { .. }
            | StoreError::NewerFormat { .. }
            | StoreError::Integrity { .. }
            | StoreError::Log(_)
            | StoreError::Redb(redb::Error::Corrupted(_)),
        ) => true,
        _ => false,
    }
}

/// How many times in a row the same storage failure has been seen.
#[derive(Debug, Default)]
struct Repeats {
    last: Option<String>,
    times: u32,
}

impl Repeats {
    /// Counts `why`; how many times in a row it has now been seen.
    fn saw(&mut self, why: &str) -> u32 {
        if self.last.as_deref() == Some(why) {
            self.times += 1;
        } else {
            self.last = Some(why.to_owned());
            self.times = 1;
        }
        self.times
    }
}

/// What the listeners answer while the store is being reopened after a failure: nothing
/// from the failed state, only "unavailable, retry" (gRPC health NOT_SERVING, UNAVAILABLE
/// for every other call, 503 with Retry-After over HTTP), until `stop`.
async fn serve_down(
    config: Config,
    listeners: Listeners,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let Listeners { grpc, http, ingest } = listeners;
    let tls = crate::listen::Tls::from_config(&config.tls).ok().flatten();
    let limits = &config.connections;
    let max = connection_budget(config.connections.max_connections, None);
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, false).await;
    let routes = tonic::service::Routes::new(health_service)
        .into_axum_router()
        .fallback(|| async {
            tonic::Status::unavailable("hookd is recovering from a storage failure; retry")
                .into_http::<axum::body::Body>()
        });
    let conns = crate::listen::accept(
        grpc,
        crate::listen::Kind::Grpc,
        tls.clone(),
        limits,
        max,
        stop.clone(),
        None,
    );
    let grpc_server = tonic::transport::Server::builder()
        .add_routes(tonic::service::Routes::from(routes))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::ReceiverStream::new(conns), {
            let mut stop = stop.clone();
            async move {
                let _ = stop.wait_for(|s| *s).await;
            }
        });
    let unavailable = || {
        axum::Router::new().fallback(|| async {
            let mut r = axum::response::IntoResponse::into_response((
                http::StatusCode::SERVICE_UNAVAILABLE,
                "hookd is recovering from a storage failure; retry later\n",
            ));
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("5"),
            );
            r
        })
    };
    let http_conns = crate::listen::accept(
        http,
        crate::listen::Kind::Http,
        tls.clone(),
        limits,
        max,
        stop.clone(),
        None,
    );
    let ingest_conns = crate::listen::accept(
        ingest,
        crate::listen::Kind::Ingest,
        tls,
        limits,
        max,
        stop.clone(),
        None,
    );
    let http_server = crate::listen::serve_http(http_conns, unavailable(), limits, stop.clone());
    let ingest_server =
        crate::listen::serve_http(ingest_conns, unavailable(), limits, stop.clone());
    let all = async { tokio::join!(grpc_server, http_server, ingest_server) };
    let mut stop = stop.clone();
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => return,
        _ = stop.wait_for(|s| *s) => {}
    }
    // Long-lived calls (a health Watch) must not hold up the next try.
    let _ = tokio::time::timeout(Duration::from_secs(1), all).await;
}

/// What outlives a storage recovery: the metrics (counters keep counting) and the disk
/// headroom.
struct Shared {
    metrics: Arc<Metrics>,
    /// The engine while a store is open (`None` between stores), for the watchdog.
    engine: tokio::sync::watch::Sender<Option<EngineHandle>>,
    headroom: Arc<hookd_storage::disk::Headroom>,
    disk: hookd_storage::disk::Probe,
}

/// A write past the file-size limit (`RLIMIT_FSIZE`) raises SIGXFSZ, which kills the
/// process by default: with a handler installed the write fails with EFBIG instead, a
/// storage failure hookd recovers from (and the headroom refuses new events before it).
fn ignore_file_size_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::from_raw(rustix::process::Signal::XFSZ.as_raw())) {
        Ok(mut s) => {
            tokio::spawn(async move {
                while s.recv().await.is_some() {
                    tracing::warn!("a write went past the file-size limit (SIGXFSZ)");
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot handle SIGXFSZ"),
    }
}

async fn serve_once(
    config: &Config,
    listeners: Listeners,
    quit: tokio::sync::watch::Receiver<bool>,
    plugged: &mut Plugged,
    shared: &Shared,
) -> Result<Ended, ServeError> {
    let Listeners { grpc, http, ingest } = listeners;
    let clock = plugged.clock.clone();
    let on_ready = plugged.on_ready.take();
    let open_store = plugged.open_store.clone();
    let rng_seed = plugged.rng_seed;
    let shutdown = {
        let mut quit = quit.clone();
        async move {
            let _ = quit.wait_for(|q| *q).await;
        }
    };
    let Credentials { auth, tls, sealer } = credentials(config, clock.clone())?;
    let auth = Arc::new(auth);
    let sealer = sealer.map(Arc::new);
    exposure(
        config,
        &[("gRPC", grpc.local_addr()?), ("HTTP", http.local_addr()?)],
        auth.enabled(),
        tls.is_some(),
    )?;
    let ingest_addr = ingest.local_addr()?;
    if !ingest_addr.ip().is_loopback() && tls.is_none() {
        tracing::warn!(%ingest_addr, "receiving webhooks without TLS on a non-loopback address: put a TLS-terminating proxy in front, or set tls.cert_file and tls.key_file");
    }
    // Raised once, then shared out: a sixth to each of the three listeners, half to push
    // delivery.
    let open_files = crate::listen::raise_open_file_limit();
    let max_connections = connection_budget(config.connections.max_connections, open_files);
    let storage = {
        let dir = config.data_dir.clone();
        let cache = usize::try_from(config.cache_size_mb << 20).unwrap_or(usize::MAX);
        let segment = config.log_segment_mb << 20;
        tokio::task::spawn_blocking(move || open_store(&dir, cache, segment))
            .await
            .map_err(|e| StoreError::Io(std::io::Error::other(e)))??
    };
    let store = storage.store.clone();
    let failure_store = store.clone();
    let metrics = shared.metrics.clone();
    let headroom = shared.headroom.clone();
    headroom.probe(&shared.disk);
    let events = hookd_engine::events::Events::default();
    let engine_config = EngineConfig {
        retry: config.retry,
        push: config.delivery.push_defaults(),
        max_queued_write_bytes: config.max_queued_write_bytes,
        idempotency_retention_ms: config.idempotency_retention_secs.saturating_mul(1000),
        completed_retention_ms: config.completed_retention_secs.saturating_mul(1000),
        dead_letter_retention_ms: config.dead_letters.retention_secs.saturating_mul(1000),
        max_commit_batch: config.max_commit_batch,
        checkpoint_interval_ms: config.checkpoint_interval_ms,
        checkpoint_log_bytes: config.checkpoint_log_mb << 20,
        rng_seed,
        metrics: metrics.clone(),
        events: events.clone(),
        alerts: config.alerts.clone(),
        sealer: sealer.clone(),
        backpressure: config.backpressure.clone(),
        headroom: headroom.clone(),
    };
    // Engine -> dispatcher: attempts, after their commit. Dispatcher -> engine: outcomes,
    // through the handle (a callback, so `delivery` never depends on the engine).
    let (deliveries_tx, deliveries_rx) = tokio::sync::mpsc::unbounded_channel();
    let (engine, engine_thread) = {
        let clock = clock.clone();
        tokio::task::spawn_blocking(move || {
            hookd_engine::start(storage, engine_config, clock, Some(deliveries_tx))
        })
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??
    };
    // Every stored secret must open with the configured keys (or deliveries would go out
    // unsigned), and is sealed under the newest key (rotation).
    if let Err(e) = reseal(&engine, sealer.clone()).await {
        engine.drain();
        let _ = tokio::task::spawn_blocking(move || engine_thread.shutdown()).await;
        return Err(e);
    }
    // Ingest sources: the config's, then those made over gRPC (stored).
    let sources = match load_sources(config, store.clone(), &engine, sealer.clone()).await {
        Ok(s) => Arc::new(s),
        Err(e) => {
            engine.drain();
            let _ = tokio::task::spawn_blocking(move || engine_thread.shutdown()).await;
            return Err(e);
        }
    };
    // hookd's own listeners are never a push destination.
    let own_addrs = vec![grpc.local_addr()?, http.local_addr()?, ingest_addr];
    let dispatcher = {
        let engine = engine.clone();
        Dispatcher::new(
            DispatcherConfig {
                guard: AddressGuard::new(config.delivery.allow_destinations.clone())
                    .with_own(own_addrs.clone()),
                max_response_body_bytes: config.delivery.max_response_body_bytes,
                ca_file: config.delivery.ca_file.clone(),
                max_connections: outbound_budget(config.delivery.max_connections, open_files),
            },
            deliveries_rx,
            Arc::new(move |report| engine.report(report)),
        )
        .map_err(|e| ServeError::Delivery(e.to_string()))?
    };
    let in_flight = dispatcher.in_flight();
    let dispatcher_task = tokio::spawn(dispatcher.run());
    if let Some(f) = on_ready {
        f(engine.clone());
    }

    let limits = Limits {
        max_payload_bytes: config.max_payload_bytes,
        max_batch_events: config.max_batch_events,
        max_idempotency_key_bytes: config.max_idempotency_key_bytes,
        replay_rate_per_s: config.dead_letters.replay_rate_per_s,
    };
    // Room for 16 max-size events (or a full batch of smaller ones), plus the envelope.
    // Not max_batch_events x max_payload_bytes: that is 1 GiB at the defaults, which one
    // request could then pin in memory; a bigger request is refused by tonic (OUT_OF_RANGE)
    // before it is decoded. At least 4 MiB, what gRPC clients send by default.
    let max_message = config
        .max_payload_bytes
        .saturating_mul(config.max_batch_events.min(16))
        .max(4 << 20)
        .saturating_add(1 << 20);
    let (clock_for_ingest, metrics_for_ingest) = (clock.clone(), metrics.clone());
    // Set at shutdown: the servers drain, and Watch streams end.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let api = HookdService::new(
        engine.clone(),
        store,
        limits,
        clock.clone(),
        crate::api::Watchers {
            events,
            stopping: stop_rx.clone(),
            open: Arc::default(),
        },
        sealer.clone(),
        sources.clone(),
    );
    let console = Arc::new(crate::console::Console::new(
        api.clone(),
        engine.clone(),
        auth.clone(),
        clock.clone(),
        tls.is_some(),
    ));
    let service = HookdServer::new(api)
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message);

    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, true).await;
    let reflection = auth.reflection() != crate::auth::Reflection::Off;
    let reflection_v1 = reflection
        .then(|| {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(hookd_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .build_v1()
        })
        .transpose()?;
    let reflection_v1alpha = reflection
        .then(|| {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(hookd_proto::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
                .build_v1alpha()
        })
        .transpose()?;

    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    // Health follows the engine, pushed when it changes: NOT_SERVING once storage has
    // failed, for `hookd.v1.Hookd` and for the whole server (`""`, what grpc_health_probe
    // and Kubernetes gRPC probes ask by default).
    let watch_health = {
        let health = health.clone();
        let mut healthy = engine.health();
        let mut stop = stop_rx.clone();
        tokio::spawn(async move {
            loop {
                let serving = *healthy.borrow_and_update();
                set_health(&health, serving).await;
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => break,
                    changed = healthy.changed() => if changed.is_err() { break },
                }
            }
        })
    };

    let grpc_addr = grpc.local_addr()?;
    let http_addr = http.local_addr()?;
    let limits = &config.connections;
    if let Some(tls) = &tls {
        metrics.tls_certificate_expiry.set(tls.not_after());
        tokio::spawn(tls.clone().watch(stop_rx.clone(), Some(metrics.clone())));
    }
    tokio::spawn(headroom.clone().watch(
        shared.disk.clone(),
        Duration::from_millis(config.storage.probe_interval_ms),
        stop_rx.clone(),
    ));
    // Connections are accepted (and their TLS handshakes done) by `listen`, which holds
    // them to the connection limit, the handshake deadline and the idle timeout.
    let grpc_conns = crate::listen::accept(
        grpc,
        crate::listen::Kind::Grpc,
        tls.clone(),
        limits,
        max_connections,
        stop_rx.clone(),
        None,
    );
    let http_conns = crate::listen::accept(
        http,
        crate::listen::Kind::Http,
        tls.clone(),
        limits,
        max_connections,
        stop_rx.clone(),
        None,
    );
    // Bigger HTTP/2 windows let a batch of large events go out in one burst; the stream
    // and header limits bound what one connection can make hookd hold.
    let grpc_server = tonic::transport::Server::builder()
        .initial_stream_window_size(Some(4 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .max_concurrent_streams(Some(limits.max_concurrent_streams))
        .http2_max_header_list_size(Some(limits.max_header_bytes))
        .http2_keepalive_interval(Some(Duration::from_secs(limits.keepalive_interval_secs)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .layer(crate::auth::GrpcAuthLayer {
            auth: auth.clone(),
            body_timeout: Duration::from_millis(limits.request_body_timeout_ms),
            budget: crate::listen::RequestBudget::new(limits),
            health: crate::listen::RequestBudget::health(limits),
        })
        .add_service(health_service)
        .add_optional_service(reflection_v1)
        .add_optional_service(reflection_v1alpha)
        .add_service(service)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::ReceiverStream::new(grpc_conns),
            stopped(stop_rx.clone()),
        );
    let router = crate::http::router(
        engine.clone(),
        metrics,
        config.metrics.max_destination_series,
        !auth.enabled(),
    )
    .merge(crate::console::router(console))
    .layer(axum::middleware::from_fn_with_state(
        auth.clone(),
        crate::auth::http_middleware,
    ));
    let http_server = crate::listen::serve_http(http_conns, router, limits, stop_rx.clone());
    let unverified_gauge = metrics_for_ingest.ingest_unverified_bytes.clone();
    let strikes = Arc::new(crate::ingest::strikes::Strikes::new(
        limits.max_ingest_auth_failures,
        limits.ingest_auth_failure_window_secs,
    ));
    let demote = crate::ingest::demote::Demote::new(
        strikes.clone(),
        clock_for_ingest.clone(),
        metrics_for_ingest.ingest_demoted_connections.clone(),
        limits.suspect_ingest_bytes_per_sec,
    )
    .map(|d| Arc::new(d) as Arc<dyn crate::listen::Placement>);
    let ingest_conns = crate::listen::accept(
        ingest,
        crate::listen::Kind::Ingest,
        tls.clone(),
        limits,
        max_connections,
        stop_rx.clone(),
        demote,
    );
    let ingest_router = crate::ingest::receive::router(Arc::new(crate::ingest::receive::Ingest {
        sources: sources.clone(),
        engine: engine.clone(),
        clock: clock_for_ingest,
        metrics: metrics_for_ingest,
        max_idempotency_key_bytes: config.max_idempotency_key_bytes,
        max_payload_bytes: config.max_payload_bytes,
        body_timeout: Duration::from_millis(limits.ingest_body_timeout_ms),
        unverified: crate::ingest::receive::Unverified::new(
            limits.max_unverified_ingest_bytes,
            limits.max_share_percent,
            unverified_gauge,
        ),
        strikes,
        checker: crate::ingest::checker::Checker::start(
            crate::ingest::checker::Checker::default_threads(),
        )?,
    }));
    let ingest_server =
        crate::listen::serve_http(ingest_conns, ingest_router, limits, stop_rx.clone());
    tracing::info!(%grpc_addr, %http_addr, %ingest_addr, sources = sources.list().len(), tls = tls.is_some(), authentication = auth.enabled(), max_connections, data_dir = %config.data_dir.display(), "hookd serving");
    supervisor(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status("serving"),
    ]);
    shared.engine.send_replace(Some(engine.clone()));

    // Run until asked to stop, or until a listener fails on its own; either way, stop
    // everything in order.
    let mut grpc_server = std::pin::pin!(grpc_server);
    let mut http_server = std::pin::pin!(http_server);
    let mut ingest_server = std::pin::pin!(ingest_server);
    let (mut grpc_done, mut http_done, mut ingest_done) = (None, None, None);
    let mut failed = None;
    let storage_failed = {
        let mut healthy = engine.health();
        async move {
            // Ends when health turns false (a storage failure, or a panic of the engine
            // thread), or never, if the engine stops while healthy.
            if healthy.wait_for(|h| !*h).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = shutdown => tracing::info!("shutting down: no new connections; finishing in-flight requests"),
        () = storage_failed => {
            tracing::error!("storage failed: stopping the servers; nothing more is answered from this state");
            failed = Some(
                engine
                    .failure()
                    .or_else(|| failure_store.mark().failed().map(|why| why.to_string()))
                    .unwrap_or_else(|| "the engine stopped".to_owned()),
            );
        }
        r = &mut grpc_server => {
            tracing::error!(result = ?r, "gRPC server stopped unexpectedly; shutting down");
            grpc_done = Some(r);
        }
        r = &mut http_server => {
            tracing::error!(result = ?r, "HTTP server stopped unexpectedly; shutting down");
            http_done = Some(r);
        }
        r = &mut ingest_server => {
            tracing::error!(result = ?r, "ingest server stopped unexpectedly; shutting down");
            ingest_done = Some(r);
        }
    }
    match &failed {
        None => supervisor(&[
            sd_notify::NotifyState::Stopping,
            sd_notify::NotifyState::Status("stopping: finishing requests and push attempts"),
        ]),
        Some(_) => supervisor(&[sd_notify::NotifyState::Status(
            "storage failed: stopping everything in order",
        )]),
    }
    set_health(&health, false).await;
    // Long polls answer now, so the servers' graceful drain does not wait for them.
    engine.drain();
    let _ = stop_tx.send(true);
    let grpc_result = match grpc_done {
        Some(r) => r,
        None => grpc_server.await,
    };
    let http_result = match http_done {
        Some(r) => r,
        None => http_server.await,
    };
    let ingest_result = match ingest_done {
        Some(r) => r,
        None => ingest_server.await,
    };
    let _ = watch_health.await;
    // The engine stopped handing out attempts at `drain`; let those in flight finish so
    // their outcomes are recorded (any left are simply sent again after a restart).
    // (After a storage failure their outcomes cannot be recorded: no grace.)
    let grace = match failed {
        Some(_) => Duration::ZERO,
        None => Duration::from_millis(config.delivery.shutdown_grace_ms),
    };
    let left = in_flight.settle(grace).await;
    if left > 0 {
        tracing::warn!(
            left,
            "push attempts still in flight at shutdown; they will be retried"
        );
    }
    // Every request has been answered; the engine commits what it holds and stops.
    shared.engine.send_replace(None);
    tokio::task::spawn_blocking(move || engine_thread.shutdown())
        .await
        .map_err(std::io::Error::other)?;
    // The engine's sender is gone with it, so the dispatcher's loop ends.
    dispatcher_task.abort();
    drop(failure_store);
    grpc_result?;
    http_result?;
    ingest_result?;
    match failed {
        Some(why) => Ok(Ended::StorageFailed(why)),
        None => {
            if let Err(e) = hookd_storage::store::Store::closed_cleanly(&config.data_dir) {
                tracing::warn!(error = %e, "cannot record the clean close; the next start checks the data file's integrity");
            }
            tracing::info!("hookd stopped cleanly");
            Ok(Ended::Shutdown)
        }
    }
}

/// Tells a service manager what hookd is doing (`sd_notify`: READY=1 once serving,
/// STOPPING=1 at shutdown, STATUS= lines); nothing when NOTIFY_SOCKET is unset, as outside
/// systemd's `Type=notify`.
fn supervisor(states: &[sd_notify::NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
    }
}

/// Aborts its task when dropped (the watchdog ends with `serve`).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sets both the server's overall health (`""`) and `hookd.v1.Hookd`'s.
async fn set_health(reporter: &tonic_health::server::HealthReporter, serving: bool) {
    let status = if serving {
        tonic_health::ServingStatus::Serving
    } else {
        tonic_health::ServingStatus::NotServing
    };
    reporter.set_service_status("", status).await;
    reporter
        .set_service_status(
            <HookdServer<HookdService> as tonic::server::NamedService>::NAME,
            status,
        )
        .await;
}

/// What `serve` checks before it opens anything, for `hookd config check`: the tokens
/// (their files and variables read), TLS (the certificate and key loaded), the secrets
/// keys, the config's sources (compiled), and the refusal of a non-loopback listener
/// without authentication. Nothing is bound or opened.
pub fn preflight(config: &Config) -> Result<(), ServeError> {
    config.validate()?;
    let Credentials { auth, tls, .. } = credentials(config, Arc::new(SystemClock))?;
    crate::ingest::Sources::compile_config(
        &config.sources,
        crate::ingest::source::Limits {
            max_payload_bytes: config.max_payload_bytes,
            dedup_retention_secs: config.idempotency_retention_secs,
        },
        &|var| std::env::var(var).ok(),
    )
    .map_err(invalid_at)?;
    exposure(
        config,
        &[("gRPC", config.grpc_addr), ("HTTP", config.http_addr)],
        auth.enabled(),
        tls.is_some(),
    )
}

/// What the config's credentials make, before anything is opened: the authenticator (its
/// token files and variables read), TLS (certificate and key loaded) and the secrets'
/// sealer. `serve` builds them once per store incarnation; `preflight` only checks them.
struct Credentials {
    auth: crate::auth::Authenticator,
    tls: Option<Arc<crate::listen::Tls>>,
    sealer: Option<hookd_core::secrets::Sealer>,
}

fn credentials(config: &Config, clock: Arc<dyn Clock>) -> Result<Credentials, ServeError> {
    let env = |var: &str| std::env::var(var).ok();
    Ok(Credentials {
        auth: crate::auth::Authenticator::new(&config.auth, clock, &env).map_err(invalid_at)?,
        tls: crate::listen::Tls::from_config(&config.tls)?,
        sealer: hookd_core::secrets::Sealer::new(&config.secrets, &env).map_err(invalid_at)?,
    })
}

/// A `(key, message)` refusal of one config key, as the config's own error.
fn invalid_at((key, message): (String, String)) -> ConfigError {
    ConfigError::InvalidAt { key, message }
}

/// Refuses a non-loopback listener with no authentication (unless `auth.insecure`), and
/// warns about what is allowed but unwise.
fn exposure(
    config: &Config,
    listeners: &[(&str, std::net::SocketAddr)],
    authenticated: bool,
    tls: bool,
) -> Result<(), ServeError> {
    let exposed: Vec<String> = listeners
        .iter()
        .filter(|(_, addr)| !addr.ip().is_loopback())
        .map(|(name, addr)| format!("{name} on {addr}"))
        .collect();
    if exposed.is_empty() {
        return Ok(());
    }
    let listeners = exposed.join(" and ");
    if !authenticated {
        if !config.auth.insecure {
            return Err(ServeError::Exposed(format!(
                "refusing to serve {listeners} without authentication: anyone who can reach it \
                 could read and change every endpoint. Add a token ([[auth.tokens]] with \
                 `sha256`, `file` or `env`, and `scopes`; `hookd token new` makes one), or \
                 bind to 127.0.0.1, or set `auth.insecure = true` (--insecure) to accept the risk"
            )));
        }
        tracing::warn!(
            listeners,
            "serving without authentication on a non-loopback address (auth.insecure)"
        );
    }
    if !tls {
        tracing::warn!(
            listeners,
            "serving without TLS on a non-loopback address: tokens and payloads cross the network in clear (set tls.cert_file and tls.key_file)"
        );
    }
    Ok(())
}

/// Connections per listener: the configured limit, kept to a sixth of the open-file limit
/// (already raised to its hard limit) for each of the three listeners, so that they take
/// half at most and storage and push delivery always have descriptors.
fn connection_budget(configured: usize, open_files: Option<u64>) -> usize {
    match open_files {
        Some(files) => {
            let share = usize::try_from(files / 6).unwrap_or(usize::MAX).max(16);
            if share < configured {
                tracing::info!(
                    open_file_limit = files,
                    connections = share,
                    "connections per listener lowered to a sixth of the open-file limit"
                );
            }
            configured.min(share)
        }
        None => configured,
    }
}

/// The config's sources and the stored ones, compiled; stored secrets re-sealed under the
/// newest key.
async fn load_sources(
    config: &Config,
    store: hookd_storage::store::Store,
    engine: &EngineHandle,
    sealer: Option<Arc<hookd_core::secrets::Sealer>>,
) -> Result<crate::ingest::Sources, ServeError> {
    let stored = tokio::task::spawn_blocking(move || store.sources())
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
    let sources = crate::ingest::Sources::load(
        &config.sources,
        stored.clone(),
        engine.clone(),
        sealer,
        crate::ingest::source::Limits {
            max_payload_bytes: config.max_payload_bytes,
            dedup_retention_secs: config.idempotency_retention_secs,
        },
        &|var| std::env::var(var).ok(),
    )
    .map_err(invalid_at)?;
    match sources.reseal(&stored).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(sources = n, "source secrets sealed under the newest key"),
        Err(e) => return Err(ServeError::Secrets(e.to_string())),
    }
    Ok(sources)
}

/// Checks that every endpoint's secrets open, and seals those in clear or under an older
/// key with the newest one.
async fn reseal(
    engine: &EngineHandle,
    sealer: Option<Arc<hookd_core::secrets::Sealer>>,
) -> Result<(), ServeError> {
    let work = hookd_engine::Resealer(Box::new(move |name, secrets| {
        let mut changed = false;
        let mut out = Vec::with_capacity(secrets.len());
        for stored in secrets {
            let clear = hookd_core::secrets::open(sealer.as_deref(), name, stored)
                .map_err(|e| format!("{e}; add that key to [secrets] keys"))?;
            match sealer.as_deref() {
                Some(s) if s.needs_reseal(stored) => {
                    out.push(s.seal(name, &clear));
                    changed = true;
                }
                _ => out.push(stored.clone()),
            }
        }
        Ok(changed.then_some(out))
    }));
    match engine.reseal(work).await {
        Ok(Ok(0)) => Ok(()),
        Ok(Ok(n)) => {
            tracing::info!(
                endpoints = n,
                "endpoint secrets sealed under the newest key"
            );
            Ok(())
        }
        Ok(Err(why)) => Err(ServeError::Secrets(why)),
        Err(refusal) => Err(ServeError::Secrets(refusal.to_string())),
    }
}

/// Outbound push connections: the configured number, or half of the open-file limit (the
/// listeners have a sixth each; see `connection_budget`).
fn outbound_budget(configured: usize, open_files: Option<u64>) -> usize {
    if configured > 0 {
        return configured;
    }
    match open_files {
        Some(files) => usize::try_from(files / 2).unwrap_or(usize::MAX).max(16),
        None => 4_096,
    }
}
