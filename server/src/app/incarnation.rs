//! One incarnation of hookd on one opened store: [`serve_once`] checks the credentials,
//! opens the store and starts the engine and push delivery on it ([`Incarnation::open`]),
//! starts the three servers on it ([`Servers::start`]), serves until shutdown, a storage
//! failure or a listener failing on its own ([`run_until`]), then stops everything in order
//! ([`Incarnation::stop_in_order`]). After a storage failure `serve` (in `mod.rs`) starts
//! the next incarnation on the same sockets.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hookd_core::clock::Clock;
use hookd_delivery::guard::AddressGuard;
use hookd_delivery::{Dispatcher, DispatcherConfig, InFlight};
use hookd_engine::events::Events;
use hookd_engine::{EngineConfig, EngineHandle, EngineThread};
use hookd_proto::v1::hookd_server::HookdServer;
use hookd_storage::store::{Store, StoreError};
use tokio::sync::watch;

use super::checks::{
    Credentials, connection_budget, credentials, exposure, invalid_at, outbound_budget,
};
use super::{Ended, Listeners, Plugged, ServeError, Shared, set_health, supervisor};
use crate::api::{HookdService, validate::Limits};
use crate::config::Config;
use crate::ingest::Sources;

/// Serves one store from opening to closing: the steps, in order.
pub(super) async fn serve_once(
    config: &Config,
    listeners: Listeners,
    quit: watch::Receiver<bool>,
    plugged: &mut Plugged,
    shared: &Shared,
) -> Result<Ended, ServeError> {
    let [grpc_addr, http_addr, ingest_addr] = [
        listeners.grpc.local_addr()?,
        listeners.http.local_addr()?,
        listeners.ingest.local_addr()?,
    ];
    let credentials = check_credentials(config, [grpc_addr, http_addr, ingest_addr], plugged)?;
    let (tls, authentication) = (credentials.tls.is_some(), credentials.auth.enabled());
    // Raised once, then shared out: a sixth to each of the three listeners, half to push
    // delivery.
    let open_files = crate::listen::raise_open_file_limit();
    let incarnation = Incarnation::open(
        config,
        plugged,
        shared,
        credentials.sealer.clone(),
        vec![grpc_addr, http_addr, ingest_addr],
        outbound_budget(config.delivery.max_connections, open_files),
    )
    .await?;
    let max_connections = connection_budget(config.connections.max_connections, open_files);
    let mut servers = match Servers::start(
        config,
        &incarnation,
        credentials,
        listeners,
        shared,
        max_connections,
    )
    .await
    {
        Ok(servers) => servers,
        Err(e) => {
            incarnation.abandon().await;
            return Err(e);
        }
    };
    tracing::info!(
        %grpc_addr,
        %http_addr,
        %ingest_addr,
        sources = incarnation.sources.len(),
        tls,
        authentication,
        max_connections,
        data_dir = %config.data_dir.display(),
        "hookd serving"
    );
    supervisor(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status("serving"),
    ]);
    shared.engine.send_replace(Some(incarnation.engine.clone()));
    let failed = run_until(&mut servers, quit, &incarnation).await;
    incarnation
        .stop_in_order(servers, failed, config, shared)
        .await
}

/// The config's credentials, built for this incarnation, and the refusal of a listener
/// exposed without authentication.
fn check_credentials(
    config: &Config,
    [grpc_addr, http_addr, ingest_addr]: [std::net::SocketAddr; 3],
    plugged: &Plugged,
) -> Result<Credentials, ServeError> {
    let credentials = credentials(config, plugged.clock.clone())?;
    exposure(
        config,
        &[("gRPC", grpc_addr), ("HTTP", http_addr)],
        credentials.auth.enabled(),
        credentials.tls.is_some(),
    )?;
    if !ingest_addr.ip().is_loopback() && credentials.tls.is_none() {
        tracing::warn!(%ingest_addr, "receiving webhooks without TLS on a non-loopback address: put a TLS-terminating proxy in front, or set tls.cert_file and tls.key_file");
    }
    Ok(credentials)
}

/// What runs on one opened store: the engine (its thread), the sources loaded from it and
/// push delivery.
struct Incarnation {
    clock: Arc<dyn Clock>,
    store: Store,
    engine: EngineHandle,
    engine_thread: EngineThread,
    /// What `Watch` streams follow.
    events: Events,
    sources: Arc<Sources>,
    subscriptions: Arc<crate::subscriptions::Subscriptions>,
    /// The dispatcher's loop; it ends when the engine (the only sender of attempts) stops.
    dispatcher: tokio::task::JoinHandle<()>,
    in_flight: InFlight,
    /// The dispatcher's destination guard, which PutEndpoint also consults to warn.
    guard: Arc<AddressGuard>,
}

impl Incarnation {
    /// Opens the store (replaying its log), starts the engine on it, checks and re-seals
    /// the stored secrets, loads the sources and starts push delivery.
    async fn open(
        config: &Config,
        plugged: &mut Plugged,
        shared: &Shared,
        sealer: Option<Arc<hookd_core::secrets::Sealer>>,
        own_addrs: Vec<std::net::SocketAddr>,
        outbound: usize,
    ) -> Result<Self, ServeError> {
        let storage = {
            let open_store = plugged.open_store.clone();
            let dir = config.data_dir.clone();
            let cache = usize::try_from(config.cache_size_mb << 20).unwrap_or(usize::MAX);
            let segment = config.log_segment_mb << 20;
            let file = config.data_dir.clone();
            tokio::task::spawn_blocking(move || open_store(&dir, cache, segment))
                .await
                .map_err(|e| unreadable(&file, e))??
        };
        let store = storage.store.clone();
        hookd_core::secrets::set_fingerprint_key(store.fingerprint_key()?);
        shared.headroom.probe(&shared.disk);
        let events = Events::default();
        let mut engine_config = engine_config(config, shared, &events, sealer.clone(), plugged);
        if engine_config.push.max_attempts_in_flight == 0 {
            engine_config.push.max_attempts_in_flight = outbound as u64;
        }
        // Engine -> dispatcher: attempts, after their commit. Dispatcher -> engine:
        // outcomes, through the handle (a callback, so `delivery` never depends on the
        // engine).
        let (deliveries_tx, deliveries_rx) = tokio::sync::mpsc::unbounded_channel();
        let clock = plugged.clock.clone();
        let (engine, engine_thread) = {
            let clock = clock.clone();
            let file = config.data_dir.clone();
            tokio::task::spawn_blocking(move || {
                hookd_engine::start(storage, engine_config, clock, Some(deliveries_tx))
            })
            .await
            .map_err(|e| unreadable(&file, e))??
        };
        // Every stored secret must open with the configured keys (or deliveries would go
        // out unsigned), and is sealed under the newest key (rotation). Then the ingest
        // sources: the config's, then those made over gRPC (stored).
        let loaded = match reseal(&engine, sealer.clone()).await {
            Ok(()) => load_sources(config, store.clone(), &engine, sealer).await,
            Err(e) => Err(e),
        };
        // The subscriptions publishes are routed through.
        let loaded = match loaded {
            Ok(sources) => load_subscriptions(store.clone(), &engine, shared.metrics.clone())
                .await
                .map(|subscriptions| (sources, subscriptions)),
            Err(e) => Err(e),
        };
        // hookd's own listeners are never a push destination.
        let guard =
            AddressGuard::new(config.delivery.allow_destinations.clone()).with_own(own_addrs);
        let dispatcher = loaded.and_then(|(sources, subscriptions)| {
            let report = engine.clone();
            let dispatcher = Dispatcher::new(
                DispatcherConfig {
                    guard: guard.clone(),
                    max_response_body_bytes: config.delivery.max_response_body_bytes,
                    ca_file: config.delivery.ca_file.clone(),
                    max_connections: outbound,
                    tracer: shared.tracing.attempts(),
                    clock: clock.clone(),
                },
                deliveries_rx,
                Arc::new(move |attempt| report.report(attempt)),
            )
            .map_err(|e| ServeError::Delivery(e.to_string()))?;
            Ok((Arc::new(sources), Arc::new(subscriptions), dispatcher))
        });
        let (sources, subscriptions, dispatcher) = match dispatcher {
            Ok(started) => started,
            Err(e) => {
                stop_engine(&engine, engine_thread).await;
                return Err(e);
            }
        };
        let in_flight = dispatcher.in_flight();
        let dispatcher = tokio::spawn(dispatcher.run());
        if let Some(on_ready) = plugged.on_ready.take() {
            on_ready(engine.clone());
        }
        Ok(Self {
            clock,
            store,
            engine,
            engine_thread,
            events,
            sources,
            subscriptions,
            dispatcher,
            in_flight,
            guard: Arc::new(guard),
        })
    }

    /// Stops what `open` started when the servers could not be started: nothing was
    /// served, so there is nothing to drain.
    async fn abandon(self) {
        stop_engine(&self.engine, self.engine_thread).await;
        let _ = self.dispatcher.await;
    }

    /// Stops everything in order: health NOT_SERVING, long polls answered, the servers
    /// drained (in-flight calls finish), push attempts in flight given their grace (none
    /// after a storage failure: their outcomes could not be recorded), the engine's last
    /// round committed, push delivery ended. A clean stop is recorded in the data
    /// directory so the next start skips the integrity check.
    async fn stop_in_order(
        self,
        servers: Servers,
        failed: Option<String>,
        config: &Config,
        shared: &Shared,
    ) -> Result<Ended, ServeError> {
        match &failed {
            None => supervisor(&[
                sd_notify::NotifyState::Stopping,
                sd_notify::NotifyState::Status("stopping: finishing requests and push attempts"),
            ]),
            Some(_) => {
                // Whatever failed, the next open of the data file checks its integrity.
                hookd_storage::store::Store::distrust(&config.data_dir);
                supervisor(&[sd_notify::NotifyState::Status(
                    "storage failed: stopping everything in order",
                )]);
            }
        }
        set_health(&servers.health, false).await;
        // Long polls answer now, so the servers' graceful drain does not wait for them.
        self.engine.drain();
        let _ = servers.stop.send(true);
        let grpc = servers.grpc.finish().await;
        let http = servers.http.finish().await;
        let ingest = servers.ingest.finish().await;
        let _ = servers.watch_health.await;
        // The engine stopped handing out attempts at `drain`; let those in flight finish so
        // their outcomes are recorded (any left are simply sent again after a restart).
        let grace = match failed {
            Some(_) => Duration::ZERO,
            None => Duration::from_millis(config.delivery.shutdown_grace_ms),
        };
        let left = self.in_flight.settle(grace).await;
        if left > 0 {
            tracing::warn!(
                left,
                "push attempts still in flight at shutdown; they will be retried"
            );
        }
        // Every request has been answered; the engine commits what it holds and stops.
        shared.engine.send_replace(None);
        tokio::task::spawn_blocking(move || self.engine_thread.shutdown())
            .await
            .map_err(std::io::Error::other)?;
        // The engine's sender of attempts went with its thread, so the dispatcher's loop
        // has ended (attempts still running were counted above and are retried later).
        if let Err(e) = self.dispatcher.await {
            tracing::error!(error = %e, "the push dispatcher's loop failed");
        }
        grpc?;
        http?;
        ingest?;
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
}

/// What the engine runs with, from the config and what a test plugged in.
fn engine_config(
    config: &Config,
    shared: &Shared,
    events: &Events,
    sealer: Option<Arc<hookd_core::secrets::Sealer>>,
    plugged: &Plugged,
) -> EngineConfig {
    EngineConfig {
        retry: config.retry,
        push: config.delivery.push_defaults(),
        max_queued_write_bytes: config.max_queued_write_bytes,
        idempotency_retention_ms: config.idempotency_retention_secs.saturating_mul(1000),
        completed_retention_ms: config.completed_retention_secs.saturating_mul(1000),
        fifo_lane_retention_ms: config.fifo_lane_retention_secs.saturating_mul(1000),
        dead_letter_retention_ms: config.dead_letters.retention_secs.saturating_mul(1000),
        max_commit_batch: config.max_commit_batch,
        checkpoint_interval_ms: config.checkpoint_interval_ms,
        checkpoint_log_bytes: config.checkpoint_log_mb << 20,
        log_retention: hookd_storage::pipeline::Retention {
            ms: config.log_retention_secs.saturating_mul(1000),
            bytes: config.log_retention_mb.saturating_mul(1 << 20),
        },
        rng_seed: plugged.rng_seed,
        metrics: shared.metrics.clone(),
        events: events.clone(),
        alerts: config.alerts.clone(),
        sealer,
        backpressure: config.backpressure.clone(),
        headroom: shared.headroom.clone(),
        fifo_queues: config.fifo_queues(),
    }
}

/// Stops an engine that served nothing.
async fn stop_engine(engine: &EngineHandle, thread: EngineThread) {
    engine.drain();
    let _ = tokio::task::spawn_blocking(move || thread.shutdown()).await;
}

/// A server's future, and its result once it has ended.
struct Serving<E> {
    future: Pin<Box<dyn Future<Output = Result<(), E>> + Send>>,
    ended: Option<Result<(), E>>,
}

impl<E> Serving<E> {
    fn new(future: impl Future<Output = Result<(), E>> + Send + 'static) -> Self {
        Self {
            future: Box::pin(future),
            ended: None,
        }
    }

    /// Its result, waiting for it to drain if it is still running.
    async fn finish(self) -> Result<(), E> {
        match self.ended {
            Some(result) => result,
            None => self.future.await,
        }
    }
}

/// The three servers of one incarnation, and what stops them.
struct Servers {
    grpc: Serving<tonic::transport::Error>,
    http: Serving<std::io::Error>,
    ingest: Serving<std::io::Error>,
    /// gRPC health, set NOT_SERVING first at the stop.
    health: tonic_health::server::HealthReporter,
    /// Keeps health following the engine's; ends at the stop.
    watch_health: tokio::task::JoinHandle<()>,
    /// Set at the stop: the servers drain, and Watch streams end.
    stop: watch::Sender<bool>,
}

impl Servers {
    /// The gRPC API, the HTTP listener (`/healthz`, `/metrics`, the console) and the ingest
    /// listener, each accepting through `listen` (connection limits, TLS, deadlines).
    async fn start(
        config: &Config,
        incarnation: &Incarnation,
        credentials: Credentials,
        listeners: Listeners,
        shared: &Shared,
        max_connections: usize,
    ) -> Result<Self, ServeError> {
        let Credentials { auth, tls, sealer } = credentials;
        auth.attach(incarnation.engine.directory());
        let auth = Arc::new(auth);
        let Listeners { grpc, http, ingest } = listeners;
        let (stop, stop_rx) = watch::channel(false);
        let portal_url: Arc<str> = if config.portal.public_url.is_empty() {
            let scheme = if tls.is_some() { "https" } else { "http" };
            let addr = http.local_addr().map_err(StoreError::Io)?;
            format!("{scheme}://{addr}").into()
        } else {
            config.portal.public_url.trim_end_matches('/').into()
        };
        let portal_links = Arc::new(load_portal(config, incarnation, sealer.clone()).await?);
        let api = HookdService {
            engine: incarnation.engine.clone(),
            store: incarnation.store.clone(),
            limits: api_limits(config, incarnation.store.clone()).await?,
            clock: incarnation.clock.clone(),
            watchers: crate::api::Watchers {
                events: incarnation.events.clone(),
                stopping: stop_rx.clone(),
                open: Arc::default(),
                idle: Duration::from_secs(config.connections.watch_idle_secs),
            },
            sealer,
            sources: incarnation.sources.clone(),
            subscriptions: incarnation.subscriptions.clone(),
            guard: incarnation.guard.clone(),
            tracing: shared.tracing.clone(),
            config_queues: Arc::new(config.queues.clone()),
            portal: portal_links.clone(),
            portal_url,
            replays: crate::replay_jobs::ReplayJobs::start(
                incarnation.engine.clone(),
                incarnation.store.clone(),
                incarnation.clock.clone(),
                stop_rx.clone(),
            )?,
        };
        let console = Arc::new(crate::console::Console::new(
            api.clone(),
            incarnation.engine.clone(),
            auth.clone(),
            incarnation.clock.clone(),
            tls.is_some(),
            config.alerts.clone(),
        ));
        let portal = Arc::new(crate::portal::Portal::new(
            portal_links,
            console.clone(),
            incarnation.engine.clone(),
            config
                .portal
                .frame_ancestors
                .iter()
                .filter_map(|o| crate::portal_links::origin(o).ok())
                .collect(),
            incarnation.clock.clone(),
        ));
        let (health, health_service) = tonic_health::server::health_reporter();
        set_health(&health, true).await;
        let watch_health = follow_engine_health(&health, &incarnation.engine, stop_rx.clone());
        if let Some(tls) = &tls {
            shared.metrics.tls_certificate_expiry.set(tls.not_after());
            tokio::spawn(
                tls.clone()
                    .watch(stop_rx.clone(), Some(shared.metrics.clone())),
            );
        }
        tokio::spawn(shared.headroom.clone().watch(
            shared.disk.clone(),
            Duration::from_millis(config.storage.probe_interval_ms),
            stop_rx.clone(),
        ));
        let accept = |listener, kind, placement| {
            crate::listen::accept(
                listener,
                kind,
                tls.clone(),
                &config.connections,
                max_connections,
                stop_rx.clone(),
                placement,
            )
        };
        let grpc_conns = accept(grpc, crate::listen::Kind::Grpc, None);
        let http_conns = accept(http, crate::listen::Kind::Http, None);
        let (ingest_router, demote) = ingest_router(
            config,
            incarnation,
            shared.metrics.clone(),
            shared.tracing.clone(),
            api.limits.catalog.clone(),
        )?;
        let ingest_conns = accept(ingest, crate::listen::Kind::Ingest, demote);

        let limits = &config.connections;
        // One request budget for both ways in: a JSON call is a gRPC call made in process.
        let grpc_layer = crate::auth::GrpcAuthLayer {
            auth: auth.clone(),
            body_timeout: Duration::from_millis(limits.request_body_timeout_ms),
            budget: crate::listen::RequestBudget::new(limits),
            health: crate::listen::RequestBudget::health(limits),
        };
        let max_message = max_grpc_message(config);
        let jwks = crate::jwks::router(api.clone(), config.delivery.retired_signing_key_secs);
        let catch_up = api.clone();
        let in_process =
            tower_layer::Layer::layer(&grpc_layer, hookd_service(api.clone(), max_message));
        // MCP over streamable HTTP: each tool is a call through that same stack.
        let mcp = crate::mcp::router(
            in_process.clone(),
            !auth.enabled(),
            max_message.saturating_mul(2),
        );
        let rest = crate::rest::Rest::new(
            in_process,
            auth.clone(),
            grpc_layer.budget.clone(),
            !auth.enabled(),
            // Base64 makes a payload 4/3 as long; JSON's quoting and names add the rest.
            max_message.saturating_mul(2),
            Duration::from_millis(limits.request_body_timeout_ms),
        )
        .map_err(ServeError::Rest)?;
        let grpc = grpc_server(
            config,
            &auth,
            grpc_layer,
            hookd_service(api, max_message),
            health_service,
            grpc_conns,
            stop_rx.clone(),
        )?;
        let router = crate::http::router(
            incarnation.engine.clone(),
            shared.metrics.clone(),
            config.metrics.max_destination_series,
            !auth.enabled(),
        )
        .merge(crate::console::router(console))
        .merge(crate::portal::router(portal))
        .merge(jwks)
        .merge(crate::catch_up::router(catch_up))
        .merge(crate::rest::router(rest))
        .merge(mcp)
        .layer(axum::middleware::from_fn_with_state(
            auth.clone(),
            crate::auth::http_middleware,
        ));
        let http = http_server(http_conns, router, config, stop_rx.clone());
        let ingest = http_server(ingest_conns, ingest_router, config, stop_rx);
        Ok(Self {
            grpc: Serving::new(grpc),
            http,
            ingest,
            health,
            watch_health,
            stop,
        })
    }
}

/// An HTTP/1.1 server (the HTTP or the ingest listener) under the connection limits.
fn http_server(
    conns: tokio::sync::mpsc::Receiver<std::io::Result<crate::listen::Conn>>,
    router: axum::Router,
    config: &Config,
    stop: watch::Receiver<bool>,
) -> Serving<std::io::Error> {
    let limits = config.connections.clone();
    Serving::new(async move { crate::listen::serve_http(conns, router, &limits, stop).await })
}

/// The API's limits on what one call may carry, and every tenant's event types (the
/// config file's and the stored ones), which it holds events to.
async fn api_limits(config: &Config, store: Store) -> Result<Limits, ServeError> {
    let declared = crate::catalog::Catalog::compile(&config.event_types).map_err(invalid_at)?;
    let stored = tokio::task::spawn_blocking(move || store.event_types())
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
    let catalog = crate::catalog::EventTypes::load(declared, config.strict_event_types, stored)
        .map_err(invalid_at)?;
    Ok(Limits {
        max_payload_bytes: config.max_payload_bytes,
        max_batch_events: config.max_batch_events,
        max_idempotency_key_bytes: config.max_idempotency_key_bytes,
        replay_rate_per_s: config.dead_letters.replay_rate_per_s,
        catalog: Arc::new(catalog),
    })
}

/// The largest gRPC message: room for 16 max-size events (or a full batch of smaller
/// ones), plus the envelope. Not max_batch_events x max_payload_bytes: that is 1 GiB at the
/// defaults, which one request could then pin in memory; a bigger request is refused by
/// tonic (OUT_OF_RANGE) before it is decoded. At least 4 MiB, what gRPC clients send by
/// default.
fn max_grpc_message(config: &Config) -> usize {
    config
        .max_payload_bytes
        .saturating_mul(config.max_batch_events.min(16))
        .max(4 << 20)
        .saturating_add(1 << 20)
}

/// gRPC health follows the engine's, pushed when it changes: NOT_SERVING once storage has
/// failed, for `hookd.v1.Hookd` and for the whole server (`""`, what grpc_health_probe and
/// Kubernetes gRPC probes ask by default).
fn follow_engine_health(
    health: &tonic_health::server::HealthReporter,
    engine: &EngineHandle,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let health = health.clone();
    let mut healthy = engine.health();
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
}

/// `hookd.v1.Hookd` with its message limits.
fn hookd_service(api: HookdService, max_message: usize) -> HookdServer<HookdService> {
    HookdServer::new(api)
        .max_decoding_message_size(max_message)
        .max_encoding_message_size(max_message)
}

/// The gRPC server: health, reflection (unless switched off), `hookd.v1.Hookd`, behind
/// authentication and the request budget.
fn grpc_server(
    config: &Config,
    auth: &Arc<crate::auth::Authenticator>,
    layer: crate::auth::GrpcAuthLayer,
    service: HookdServer<HookdService>,
    health: tonic_health::pb::health_server::HealthServer<
        impl tonic_health::pb::health_server::Health,
    >,
    conns: tokio::sync::mpsc::Receiver<std::io::Result<crate::listen::Conn>>,
    mut stop: watch::Receiver<bool>,
) -> Result<impl Future<Output = Result<(), tonic::transport::Error>> + Send + 'static, ServeError>
{
    let reflection = auth.reflection() != crate::auth::Reflection::Off;
    let reflection_builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(hookd_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection
        .then(|| reflection_builder().build_v1())
        .transpose()?;
    let reflection_v1alpha = reflection
        .then(|| reflection_builder().build_v1alpha())
        .transpose()?;
    let limits = &config.connections;
    // Bigger HTTP/2 windows let a batch of large events go out in one burst; the stream
    // and header limits bound what one connection can make hookd hold.
    Ok(tonic::transport::Server::builder()
        .initial_stream_window_size(Some(4 << 20))
        .initial_connection_window_size(Some(16 << 20))
        .max_concurrent_streams(Some(limits.max_concurrent_streams))
        .http2_max_header_list_size(Some(limits.max_header_bytes))
        .http2_keepalive_interval(Some(Duration::from_secs(limits.keepalive_interval_secs)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .layer(layer)
        .add_service(health)
        .add_optional_service(reflection_v1)
        .add_optional_service(reflection_v1alpha)
        .add_service(service)
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::ReceiverStream::new(conns),
            async move {
                let _ = stop.wait_for(|s| *s).await;
            },
        ))
}

/// The ingest listener's routes (`POST /in/{source}`), and the placement that demotes a
/// connection whose sender keeps failing verification.
fn ingest_router(
    config: &Config,
    incarnation: &Incarnation,
    metrics: Arc<hookd_metrics::Metrics>,
    tracing: crate::otel::Tracing,
    catalog: Arc<crate::catalog::EventTypes>,
) -> Result<(axum::Router, Option<Arc<dyn crate::listen::Placement>>), ServeError> {
    use crate::ingest::{checker::Checker, demote::Demote, receive, strikes::Strikes};
    let limits = &config.connections;
    let strikes = Arc::new(Strikes::new(
        limits.max_ingest_auth_failures,
        limits.ingest_auth_failure_window_secs,
    ));
    let demote = Demote::new(
        strikes.clone(),
        incarnation.clock.clone(),
        metrics.ingest_demoted_connections.clone(),
        limits.suspect_ingest_bytes_per_sec,
    )
    .map(|d| Arc::new(d) as Arc<dyn crate::listen::Placement>);
    let unverified = receive::Unverified::new(
        limits.max_unverified_ingest_bytes,
        limits.max_share_percent,
        metrics.ingest_unverified_bytes.clone(),
    );
    let router = receive::router(Arc::new(receive::Ingest {
        sources: incarnation.sources.clone(),
        subscriptions: incarnation.subscriptions.clone(),
        engine: incarnation.engine.clone(),
        clock: incarnation.clock.clone(),
        metrics,
        max_idempotency_key_bytes: config.max_idempotency_key_bytes,
        max_payload_bytes: config.max_payload_bytes,
        body_timeout: Duration::from_millis(limits.ingest_body_timeout_ms),
        unverified,
        strikes,
        checker: Checker::start(Checker::default_threads())?,
        tracing,
        catalog,
    }));
    Ok((router, demote))
}

/// Serves until asked to stop, the storage fails, or a server ends on its own; what
/// failed, if the storage did.
async fn run_until(
    servers: &mut Servers,
    mut quit: watch::Receiver<bool>,
    incarnation: &Incarnation,
) -> Option<String> {
    let storage_failed = {
        let mut healthy = incarnation.engine.health();
        async move {
            // Ends when health turns false (a storage failure, or a panic of the engine
            // thread), or never, if the engine stops while healthy.
            if healthy.wait_for(|h| !*h).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = quit.wait_for(|q| *q) => {
            tracing::info!("shutting down: no new connections; finishing in-flight requests");
        }
        () = storage_failed => {
            tracing::error!("storage failed: stopping the servers; nothing more is answered from this state");
            return Some(
                incarnation
                    .engine
                    .failure()
                    .or_else(|| incarnation.store.mark().failed().map(|why| why.to_string()))
                    .unwrap_or_else(|| "the engine stopped".to_owned()),
            );
        }
        r = &mut servers.grpc.future => {
            tracing::error!(result = ?r, "gRPC server stopped unexpectedly; shutting down");
            servers.grpc.ended = Some(r);
        }
        r = &mut servers.http.future => {
            tracing::error!(result = ?r, "HTTP server stopped unexpectedly; shutting down");
            servers.http.ended = Some(r);
        }
        r = &mut servers.ingest.future => {
            tracing::error!(result = ?r, "ingest server stopped unexpectedly; shutting down");
            servers.ingest.ended = Some(r);
        }
    }
    None
}

/// The portal's signing keys and revocations, as stored.
async fn load_portal(
    config: &Config,
    incarnation: &Incarnation,
    sealer: Option<Arc<hookd_core::secrets::Sealer>>,
) -> Result<crate::portal_links::Links, ServeError> {
    let store = incarnation.store.clone();
    let (keys, revocations) = tokio::task::spawn_blocking(move || {
        Ok::<_, StoreError>((
            store.every_object_of(hookd_core::scope::Kind::PortalKey)?,
            store.every_object_of(hookd_core::scope::Kind::PortalRevocation)?,
        ))
    })
    .await
    .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
    Ok(crate::portal_links::Links::load(
        incarnation.engine.clone(),
        sealer,
        incarnation.clock.clone(),
        config.portal.key_rotation_secs,
        keys,
        revocations,
    ))
}

/// The stored subscriptions, compiled.
async fn load_subscriptions(
    store: Store,
    engine: &EngineHandle,
    metrics: Arc<hookd_metrics::Metrics>,
) -> Result<crate::subscriptions::Subscriptions, ServeError> {
    let stored = tokio::task::spawn_blocking(move || store.subscriptions())
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
    Ok(
        crate::subscriptions::Subscriptions::load(stored, engine.clone(), metrics)
            .map_err(invalid_at)?,
    )
}

/// The config's sources and the stored ones, compiled; stored secrets re-sealed under the
/// newest key.
async fn load_sources(
    config: &Config,
    store: Store,
    engine: &EngineHandle,
    sealer: Option<Arc<hookd_core::secrets::Sealer>>,
) -> Result<Sources, ServeError> {
    let stored = tokio::task::spawn_blocking(move || store.sources())
        .await
        .map_err(|e| StoreError::Io(std::io::Error::other(e)))??;
    let sources = Sources::load(
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

/// A start-up step on the blocking pool that did not finish: a panic there is redb (or the
/// log's reader) stopping on bytes that are not what was written (a zeroed page after a
/// clean stop, when no integrity check runs). Refused naming the file and `hookd repair`,
/// and the next open of the file checks its integrity.
fn unreadable(dir: &std::path::Path, e: tokio::task::JoinError) -> StoreError {
    if !e.is_panic() {
        return StoreError::Io(std::io::Error::other(e));
    }
    let why = e
        .into_panic()
        .downcast::<String>()
        .map(|s| *s)
        .or_else(|p| p.downcast::<&'static str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|_| "a panic".into());
    hookd_storage::store::Store::distrust(dir);
    StoreError::Unreadable {
        file: dir.join("hookd.redb").display().to_string(),
        why,
    }
}
