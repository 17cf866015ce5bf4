//! Wiring: open the store, start the engine, serve gRPC and HTTP until shutdown; after a
//! storage failure, stop everything in order and serve again on a reopened store.
//!
//! [`run`] takes already-bound listeners and a shutdown future, so tests start a real server
//! on `127.0.0.1:0` in-process and stop it cleanly; the binary passes SIGTERM/SIGINT.
//!
//! - this file: [`run`] / [`run_with`] and `serve`, the loop of incarnations (what outlives
//!   one: the metrics, the disk headroom, the watchdog) and what a storage failure does;
//! - `incarnation`: one store's lifetime as named steps (open, start the servers, run until,
//!   stop in order);
//! - `down`: what the listeners answer between incarnations (UNAVAILABLE, 503);
//! - `checks`: credentials, exposure and the open-file shares, checked before anything is
//!   opened ([`preflight`], `hookd config check`).

mod checks;
mod down;
mod incarnation;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hookd_proto::v1::hookd_server::HookdServer;
use tokio::net::TcpListener;

use crate::api::HookdService;
use crate::config::{Config, ConfigError};
use hookd_core::clock::{Clock, SystemClock};
use hookd_engine::EngineHandle;
use hookd_metrics::Metrics;
use hookd_storage::store::{Storage, StoreError};

pub(crate) use checks::preflight;

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
    /// The OpenTelemetry variables ask for what hookd cannot do.
    #[error("tracing: {0}")]
    Tracing(String),
    /// The HTTP/JSON API could not be built from the descriptors (a defect of the build).
    #[error("the HTTP/JSON API: {0}")]
    Rest(String),
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
pub(crate) type OnReady = Box<dyn FnOnce(EngineHandle) + Send>;

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
    let tracing = crate::otel::Tracing::from_env().map_err(ServeError::Tracing)?;
    let shared = Shared::new(&config, &mut plugged, tracing);
    let served = serve_incarnations(&config, listeners, quit, plugged, &shared).await;
    // What is buffered goes out before exit.
    shared.tracing.shutdown().await;
    served
}

/// The incarnations of [`serve`], one after the other.
async fn serve_incarnations(
    config: &Config,
    listeners: Listeners,
    quit: tokio::sync::watch::Receiver<bool>,
    mut plugged: Plugged,
    shared: &Shared,
) -> Result<(), ServeError> {
    let _watchdog = start_watchdog(shared);
    warn_if_reserve_small(config);
    let mut first = true;
    let mut repeats = Repeats::default();
    loop {
        let handles = listeners.try_clone()?;
        let why = match incarnation::serve_once(config, handles, quit.clone(), &mut plugged, shared)
            .await
        {
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
        let down = tokio::spawn(down::serve_down(
            config.clone(),
            listeners.try_clone()?,
            down_rx,
        ));
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
            | StoreError::DamagedLog { .. }
            | StoreError::Unreadable { .. }
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

/// What outlives a storage recovery: the metrics (counters keep counting) and the disk
/// headroom.
struct Shared {
    metrics: Arc<Metrics>,
    /// The engine while a store is open (`None` between stores), for the watchdog.
    engine: tokio::sync::watch::Sender<Option<EngineHandle>>,
    headroom: Arc<hookd_storage::disk::Headroom>,
    disk: hookd_storage::disk::Probe,
    /// OpenTelemetry traces (off unless an OTLP endpoint is configured).
    tracing: crate::otel::Tracing,
}

impl Shared {
    fn new(config: &Config, plugged: &mut Plugged, tracing: crate::otel::Tracing) -> Self {
        Self {
            tracing,
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
        }
    }
}

/// Under systemd's WatchdogSec=, WATCHDOG=1 while the engine finishes rounds (a refusal is
/// an answer too: a failed store is being reopened). Stops when dropped.
fn start_watchdog(shared: &Shared) -> Option<AbortOnDrop> {
    let timeout = sd_notify::watchdog_enabled()?;
    let period = crate::watchdog::period(timeout);
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    tracing::info!(
        timeout_ms = ms(timeout),
        period_ms = ms(period),
        "service manager watchdog on"
    );
    let engine = shared.engine.subscribe();
    Some(AbortOnDrop(tokio::spawn(crate::watchdog::keep_alive(
        period,
        move || {
            let engine = engine.borrow().clone()?;
            Some(async move {
                let _ = engine.ping().await;
            })
        },
        || supervisor(&[sd_notify::NotifyState::Watchdog]),
    ))))
}

/// What may still be written once the reserve is reached: the log up to a checkpoint and
/// redb's copy of it (copy-on-write pages kept until the checkpoint), and a segment or two.
fn warn_if_reserve_small(config: &Config) {
    let needed_mb = 4 * config.checkpoint_log_mb + 2 * config.log_segment_mb;
    if config.storage.reserve_mb < needed_mb && config.storage.reserve_percent == 0.0 {
        tracing::warn!(
            reserve_mb = config.storage.reserve_mb,
            needed_mb,
            "storage.reserve_mb is small for these log settings (4 x checkpoint_log_mb + 2 x log_segment_mb): a full disk may fail a write instead of refusing new events"
        );
    }
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
