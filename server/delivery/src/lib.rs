//! Push delivery: the HTTP side of hookd.
//!
//! The engine decides *what* goes and *when* (ready queues, per-endpoint concurrency, token
//! bucket, circuit breaker, Retry-After pauses: all engine state, changed in one thread) and
//! hands each attempt to the [`Dispatcher`] as a [`Delivery`] once the commit that made the
//! message durable has returned. The dispatcher only does I/O: one task per attempt, through
//! the destination's own keep-alive pool, bounded by the attempt's timeout, and reports an
//! [`AttemptReport`] back through the callback it was handed at wiring time. It never
//! touches the store; the engine makes every outcome durable in its next round.
//!
//! Ground rules: every delivery handed in produces exactly one report (the timeout bounds
//! every await); a report that arrives after its attempt was given up (the engine's lease
//! deadline) is ignored by the engine.

#![forbid(unsafe_code)]

pub mod attempt;
pub mod connect;
pub mod egress;
pub mod guard;
pub mod oauth;
pub mod slots;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::mpsc;

use connect::GuardedConnector;
use guard::AddressGuard;

use hookd_core::push::{AttemptReport, Delivery, Target, Verdict};

/// Where the dispatcher sends reports (the engine's handle, at wiring time).
pub(crate) type ReportFn = Arc<dyn Fn(AttemptReport) + Send + Sync>;

pub type HttpClient = Client<HttpsConnector<egress::Egress>, Full<Bytes>>;

pub use egress::client_tls_config;

/// What a target's attempts go through, built at its first attempt and kept as long as the
/// target: the keep-alive pool (through the endpoint's proxy, with its client
/// certificate) and the endpoint's OAuth2 token.
#[derive(Debug)]
pub struct TargetClient {
    pub http: HttpClient,
    pub oauth: Option<oauth::TokenCache>,
}

/// Settings of the HTTP side that are not per endpoint.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    pub guard: AddressGuard,
    /// Most response-body bytes read per attempt.
    pub max_response_body_bytes: usize,
    /// Extra trusted CA certificates (PEM), on top of the built-in Mozilla roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// Outbound connections open at once, over every destination, shared fairly: while
    /// several origins want connections none holds more than this divided by their number
    /// (`slots::OutboundSlots`).
    pub max_connections: usize,
    /// Traces each attempt (OpenTelemetry, set up by `hookd`); `None` when tracing is off.
    pub tracer: Option<Arc<dyn AttemptTracer>>,
    /// When OAuth2 tokens expire (the engine's clock: tests move it).
    pub clock: Arc<dyn hookd_core::clock::Clock>,
}

/// Traces push attempts. hookd-delivery knows no tracing library: `hookd` implements this
/// over OpenTelemetry when an OTLP endpoint is configured.
pub trait AttemptTracer: Send + Sync + std::fmt::Debug {
    /// The attempt's span, a child of the trace context its message carries (the event's
    /// `traceparent` header), or `None` (not sampled).
    fn start(&self, delivery: &Delivery) -> Option<Box<dyn AttemptSpan>>;
}

/// One attempt's span.
pub trait AttemptSpan: Send {
    /// The W3C headers (`traceparent`, `tracestate`) naming this span as the parent, sent
    /// with the attempt over the event's own.
    fn context_headers(&self) -> Vec<(&'static str, String)>;
    /// Ends it with the attempt's verdict.
    fn end(self: Box<Self>, verdict: &Verdict);
}

/// Why the HTTP side could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("delivery.ca_file {path}: {message}")]
    CaFile {
        path: std::path::PathBuf,
        message: String,
    },
}

/// Counts attempts in flight, so shutdown can wait for them.
#[derive(Debug, Clone, Default)]
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// Waits until no attempt is in flight, or `grace` has passed; returns those left.
    pub async fn settle(&self, grace: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + grace;
        while self.get() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.get()
    }
}

struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pub struct Dispatcher {
    rx: mpsc::UnboundedReceiver<Vec<Delivery>>,
    report: ReportFn,
    guard: Arc<AddressGuard>,
    /// Endpoints without a client certificate share these settings.
    tls: rustls::ClientConfig,
    /// The trusted roots, for the endpoints with a client certificate.
    roots: rustls::RootCertStore,
    clock: Arc<dyn hookd_core::clock::Clock>,
    body_cap: usize,
    in_flight: InFlight,
    slots: Arc<slots::OutboundSlots>,
    tracer: Option<Arc<dyn AttemptTracer>>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("in_flight", &self.in_flight.get())
            .finish()
    }
}

impl Dispatcher {
    pub fn new(
        config: DispatcherConfig,
        rx: mpsc::UnboundedReceiver<Vec<Delivery>>,
        report: ReportFn,
    ) -> Result<Self, SetupError> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        if let Some(path) = &config.ca_file {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let bad = |message: String| SetupError::CaFile {
                path: path.clone(),
                message,
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("no certificate in the file".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
            }
        }
        let tls = client_tls_config(roots.clone(), None)?;
        Ok(Self {
            rx,
            report,
            guard: Arc::new(config.guard),
            tls,
            roots,
            clock: config.clock,
            body_cap: config.max_response_body_bytes,
            in_flight: InFlight::default(),
            slots: slots::OutboundSlots::new(config.max_connections),
            tracer: config.tracer,
        })
    }

    pub fn in_flight(&self) -> InFlight {
        self.in_flight.clone()
    }

    /// Runs until the engine drops its sender.
    pub async fn run(mut self) {
        while let Some(batch) = self.rx.recv().await {
            for delivery in batch {
                let client = self.client_for(&delivery.target);
                let report = self.report.clone();
                let cap = self.body_cap;
                self.in_flight.0.fetch_add(1, Ordering::AcqRel);
                let guard = InFlightGuard(self.in_flight.0.clone());
                let span = self.tracer.as_ref().and_then(|t| t.start(&delivery));
                tokio::spawn(async move {
                    let _guard = guard;
                    let trace = span.as_ref().map(|s| s.context_headers());
                    let (verdict, latency) =
                        attempt::send(&client, &delivery, cap, trace.as_deref().unwrap_or(&[]))
                            .await;
                    if let Some(span) = span {
                        span.end(&verdict);
                    }
                    report(AttemptReport {
                        id: delivery.id,
                        attempt: delivery.attempt,
                        verdict,
                        latency_us: latency.as_micros() as u64,
                    });
                });
            }
        }
    }

    /// The target's client, built at its first attempt.
    fn client_for(&self, target: &Target) -> Arc<TargetClient> {
        // The slot holds nothing but this dispatcher's clients; were it ever to hold
        // another type, the attempt goes through a client of its own.
        target
            .pool
            .get_or_init(|| self.new_client(target))
            .cloned()
            .unwrap_or_else(|| self.new_client(target))
    }

    fn new_client(&self, target: &Target) -> Arc<TargetClient> {
        let connector = GuardedConnector::new(
            self.guard.clone(),
            target.connect_timeout,
            self.slots.clone(),
            target.share.clone(),
            Arc::from(target.key.as_str()),
        );
        let egress = match target.proxy.as_ref() {
            Some(proxy) => egress::Egress::proxied(connector.clone(), &proxy.0)
                .unwrap_or(egress::Egress::Direct(connector)),
            None => egress::Egress::Direct(connector),
        };
        let tls = match target.client_identity.as_ref().and_then(egress::identity_of) {
            Some(identity) => client_tls_config(self.roots.clone(), Some(identity))
                .unwrap_or_else(|e| {
                    tracing::warn!(destination = %target.key, error = %e, "the client certificate cannot be used; attempts go without it");
                    self.tls.clone()
                }),
            None => self.tls.clone(),
        };
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(egress);
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(target.pool_size)
            .build(https);
        Arc::new(TargetClient {
            http,
            oauth: target
                .oauth2
                .clone()
                .map(|o| oauth::TokenCache::new(o, self.clock.clone())),
        })
    }
}
