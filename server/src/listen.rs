//! The listeners' edge: accept TCP, hold hostile connections to account, and terminate TLS.
//!
//! Every accepted socket takes a permit from its listener's connection limit (a socket over
//! the limit is closed at once, so the kernel's backlog never fills with them), then must
//! finish its TLS handshake (or, in plaintext, send its first bytes) within
//! `connections.handshake_timeout_ms`, in a task of its own so a slow client never stalls
//! the accept loop. A connection whose peer sends nothing for `connections.idle_timeout_secs`
//! is closed ([`Conn`]): HTTP/2 keep-alive pings, which a live client answers, keep a quiet
//! gRPC channel open. The HTTP/1 listener is served here too ([`serve_http`]), with a
//! header-read timeout and a header size limit.
//!
//! TLS: rustls with ring, from PEM files; with `tls.client_ca_file`, client certificates are
//! verified (optional or required) and their DNS names become the connection's
//! [`PeerIdentity`]. The files are read again when they change (checked every
//! `tls.reload_interval_secs`) and on SIGHUP; a new handshake uses the new files, open
//! connections keep theirs. A reload that fails keeps the previous certificates and logs why.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio::time::{Instant, Sleep};

/// `[connections]`: limits against hostile or broken clients, per listener.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionLimits {
    /// Open connections per listener; more are closed as they arrive. Also kept below the
    /// process's open-file limit (see ARCHITECTURE.md, "Connections").
    pub max_connections: usize,
    /// A TLS handshake, or a plaintext client's first bytes, within this.
    pub handshake_timeout_ms: u64,
    /// A connection with no request in progress and none begun for this long is closed.
    /// Only requests count (that passed authentication, on a listener with `[auth]`): bytes
    /// alone, such as answers to keep-alive pings, do not keep a connection open.
    pub idle_timeout_secs: u64,
    /// A new connection must begin its first request (authenticated, with `[auth]`) within
    /// this, or it is closed: connections that never ask anything, or present no valid
    /// credential, do not hold slots.
    pub first_request_timeout_ms: u64,
    /// Connections one client address may hold open on each listener (0: the share
    /// `max_share_percent` of `max_connections`). Behind a proxy or a load balancer every
    /// connection comes from its address: raise this to `max_connections` there.
    pub max_connections_per_peer: usize,
    /// HTTP/1 request headers must arrive within this.
    pub header_read_timeout_ms: u64,
    /// Largest request header block (HTTP/1 headers, HTTP/2 header list / gRPC metadata).
    pub max_header_bytes: u32,
    /// HTTP/2 streams (concurrent gRPC calls) per connection.
    pub max_concurrent_streams: u32,
    /// A gRPC request's body (its message) must have arrived within this.
    pub request_body_timeout_ms: u64,
    /// Server-side keep-alive ping interval on gRPC connections.
    pub keepalive_interval_secs: u64,
    /// gRPC calls in progress at once, over all connections (long polls included); more
    /// are answered RESOURCE_EXHAUSTED at once.
    pub max_requests_in_flight: usize,
    /// Bytes of gRPC request bodies received but not yet decoded, over all calls; a call
    /// that would pass it is answered RESOURCE_EXHAUSTED.
    pub max_request_bytes_in_flight: u64,
    /// The share of those two budgets one connection, and one caller (a token or client
    /// certificate; without authentication, one client IP address), may hold at once, in
    /// percent: past it that connection's or caller's next call is answered
    /// RESOURCE_EXHAUSTED while everyone else still gets in. A call's first message is
    /// always let through when its caller holds no bytes, so a share never refuses the
    /// largest message the server accepts.
    pub max_share_percent: u8,
    /// gRPC health calls (Check and Watch) in progress at once. They have their own budget
    /// (and 1 MiB of request bytes), split by the same shares, so health streams never
    /// take the places of API calls, nor API calls those of health probes.
    pub max_health_calls_in_flight: usize,
    /// An inbound webhook's body must have arrived within this (ingest listener).
    pub ingest_body_timeout_ms: u64,
    /// Bytes of inbound webhook bodies held before their signature is checked, over all
    /// requests (each counts its Content-Length, or its source's `max_body_bytes` when
    /// chunked); past it, 503 with Retry-After before the body is read.
    pub max_unverified_ingest_bytes: u64,
    /// Failed signature checks (401s) one client (an IPv4 address, an IPv6 /64) may have at
    /// one source within `ingest_auth_failure_window_secs`; past it that client's requests
    /// to that source are answered 429 from their headers, the body unread, until the
    /// window ends (0: no limit). See ingest/strikes.rs.
    pub max_ingest_auth_failures: u32,
    /// The window of `max_ingest_auth_failures`, from a client's first failure in it.
    pub ingest_auth_failure_window_secs: u64,
    /// Bytes per second read from suspect clients' ingest connections (those served at
    /// low priority: see ingest/demote.rs), all of them together; 0: unpaced. What the
    /// kernel's network work for an unauthenticated flood can take from everyone else.
    pub suspect_ingest_bytes_per_sec: u64,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 4_096,
            handshake_timeout_ms: 10_000,
            idle_timeout_secs: 300,
            first_request_timeout_ms: 10_000,
            max_connections_per_peer: 0,
            header_read_timeout_ms: 10_000,
            max_header_bytes: 16 << 10,
            max_concurrent_streams: 128,
            request_body_timeout_ms: 30_000,
            keepalive_interval_secs: 30,
            max_requests_in_flight: 10_000,
            max_request_bytes_in_flight: 256 << 20,
            max_share_percent: 25,
            max_health_calls_in_flight: 256,
            ingest_body_timeout_ms: 10_000,
            max_unverified_ingest_bytes: 64 << 20,
            max_ingest_auth_failures: 32,
            ingest_auth_failure_window_secs: 10,
            suspect_ingest_bytes_per_sec: 32 << 20,
        }
    }
}

impl ConnectionLimits {
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let within = |key, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err((key, format!("{v} is not within {lo}..={hi}")))
            }
        };
        within(
            "connections.max_connections",
            self.max_connections as u64,
            1,
            1 << 20,
        )?;
        within(
            "connections.handshake_timeout_ms",
            self.handshake_timeout_ms,
            100,
            600_000,
        )?;
        within(
            "connections.idle_timeout_secs",
            self.idle_timeout_secs,
            self.keepalive_interval_secs.saturating_mul(2).max(1),
            86_400,
        )?;
        within(
            "connections.first_request_timeout_ms",
            self.first_request_timeout_ms,
            100,
            3_600_000,
        )?;
        within(
            "connections.max_connections_per_peer",
            self.max_connections_per_peer as u64,
            0,
            1 << 20,
        )?;
        within(
            "connections.header_read_timeout_ms",
            self.header_read_timeout_ms,
            100,
            600_000,
        )?;
        within(
            "connections.max_header_bytes",
            u64::from(self.max_header_bytes),
            8 << 10,
            1 << 20,
        )?;
        within(
            "connections.max_concurrent_streams",
            u64::from(self.max_concurrent_streams),
            1,
            10_000,
        )?;
        within(
            "connections.request_body_timeout_ms",
            self.request_body_timeout_ms,
            100,
            3_600_000,
        )?;
        within(
            "connections.ingest_body_timeout_ms",
            self.ingest_body_timeout_ms,
            100,
            3_600_000,
        )?;
        within(
            "connections.max_unverified_ingest_bytes",
            self.max_unverified_ingest_bytes,
            1 << 20,
            1 << 40,
        )?;
        within(
            "connections.max_ingest_auth_failures",
            u64::from(self.max_ingest_auth_failures),
            0,
            1 << 20,
        )?;
        within(
            "connections.ingest_auth_failure_window_secs",
            self.ingest_auth_failure_window_secs,
            1,
            86_400,
        )?;
        if self.suspect_ingest_bytes_per_sec != 0 {
            // Slower, a suspect's largest body could not arrive within its timeout.
            within(
                "connections.suspect_ingest_bytes_per_sec",
                self.suspect_ingest_bytes_per_sec,
                1 << 20,
                1 << 40,
            )?;
        }
        within(
            "connections.max_requests_in_flight",
            self.max_requests_in_flight as u64,
            1,
            1 << 24,
        )?;
        within(
            "connections.max_request_bytes_in_flight",
            self.max_request_bytes_in_flight,
            1 << 20,
            1 << 40,
        )?;
        within(
            "connections.max_share_percent",
            u64::from(self.max_share_percent),
            1,
            100,
        )?;
        within(
            "connections.max_health_calls_in_flight",
            self.max_health_calls_in_flight as u64,
            1,
            1 << 20,
        )?;
        within(
            "connections.keepalive_interval_secs",
            self.keepalive_interval_secs,
            1,
            3_600,
        )
    }
}

/// `[tls]`: one certificate for both listeners.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain (leaf first). TLS is on when this and `key_file` are set.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// PEM CA certificates that client certificates must chain to (mTLS).
    pub client_ca_file: Option<PathBuf>,
    /// With `client_ca_file`: `optional` (a client may use a token instead) or `required`,
    /// on the gRPC and HTTP listeners.
    pub client_auth: ClientAuth,
    /// The same for the ingest listener: `none` (the default: webhook providers present no
    /// client certificate, and their signatures are checked), `optional` or `required`.
    pub ingest_client_auth: IngestClientAuth,
    /// How often the files are checked for changes (SIGHUP checks at once).
    pub reload_interval_secs: u64,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            client_auth: ClientAuth::Optional,
            ingest_client_auth: IngestClientAuth::None,
            reload_interval_secs: 10,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    Optional,
    Required,
}

/// Client certificates on the ingest listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IngestClientAuth {
    /// None asked for.
    None,
    Optional,
    Required,
}

/// Why TLS could not be set up; names the key and the file.
#[derive(Debug, thiserror::Error)]
#[error("config key `tls.{key}`: {message}")]
pub struct TlsError {
    pub key: &'static str,
    pub message: String,
}

fn tls_error(key: &'static str, message: String) -> TlsError {
    TlsError { key, message }
}

/// The files' modification times and sizes: a change means a reload.
type Stamps = Vec<Option<(SystemTime, u64)>>;

/// The current TLS configurations (gRPC speaks `h2`, the HTTP listener `http/1.1`), swapped
/// whole on reload.
#[derive(Debug)]
pub struct Tls {
    config: TlsConfig,
    grpc: RwLock<Arc<rustls::ServerConfig>>,
    http: RwLock<Arc<rustls::ServerConfig>>,
    ingest: RwLock<Arc<rustls::ServerConfig>>,
    /// The serving certificate's notAfter (Unix seconds).
    not_after: std::sync::atomic::AtomicI64,
    stamps: std::sync::Mutex<Stamps>,
}

impl Tls {
    /// `None` when TLS is off; an error names the key and what is wrong with its file.
    pub fn from_config(config: &TlsConfig) -> Result<Option<Arc<Self>>, TlsError> {
        match (&config.cert_file, &config.key_file) {
            (None, None) => {
                if config.client_ca_file.is_some() {
                    return Err(tls_error(
                        "client_ca_file",
                        "client certificates need TLS: set tls.cert_file and tls.key_file".into(),
                    ));
                }
                return Ok(None);
            }
            (Some(_), None) => {
                return Err(tls_error(
                    "key_file",
                    "tls.cert_file is set but tls.key_file is not".into(),
                ));
            }
            (None, Some(_)) => {
                return Err(tls_error(
                    "cert_file",
                    "tls.key_file is set but tls.cert_file is not".into(),
                ));
            }
            (Some(_), Some(_)) => {}
        }
        if !(1..=86_400).contains(&config.reload_interval_secs) {
            return Err(tls_error(
                "reload_interval_secs",
                format!("{} is not within 1..=86400", config.reload_interval_secs),
            ));
        }
        if config.ingest_client_auth != IngestClientAuth::None && config.client_ca_file.is_none() {
            return Err(tls_error(
                "ingest_client_auth",
                "client certificates need tls.client_ca_file".into(),
            ));
        }
        let stamps = stamps(config);
        let built = build(config)?;
        warn_on_expiry(built.not_after, now_unix_s());
        Ok(Some(Arc::new(Self {
            config: config.clone(),
            grpc: RwLock::new(built.grpc),
            http: RwLock::new(built.http),
            ingest: RwLock::new(built.ingest),
            not_after: std::sync::atomic::AtomicI64::new(built.not_after),
            stamps: std::sync::Mutex::new(stamps),
        })))
    }

    /// The serving certificate's notAfter, in Unix seconds.
    pub fn not_after(&self) -> i64 {
        self.not_after.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn current(&self, kind: Kind) -> Arc<rustls::ServerConfig> {
        let slot = match kind {
            Kind::Grpc => &self.grpc,
            Kind::Http => &self.http,
            Kind::Ingest => &self.ingest,
        };
        slot.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the files again if they changed (or always, with `force`). Ok(true): swapped.
    pub fn reload(&self, force: bool) -> Result<bool, TlsError> {
        let now = stamps(&self.config);
        let mut seen = self.stamps.lock().unwrap_or_else(|p| p.into_inner());
        if !force && *seen == now {
            return Ok(false);
        }
        // Remember the attempt either way, so a broken file is reported once, not every tick.
        *seen = now;
        let built = build(&self.config)?;
        warn_on_expiry(built.not_after, now_unix_s());
        *self.grpc.write().unwrap_or_else(|p| p.into_inner()) = built.grpc;
        *self.http.write().unwrap_or_else(|p| p.into_inner()) = built.http;
        *self.ingest.write().unwrap_or_else(|p| p.into_inner()) = built.ingest;
        self.not_after
            .store(built.not_after, std::sync::atomic::Ordering::Relaxed);
        Ok(true)
    }

    /// Reloads on change and on SIGHUP until `stop`.
    pub async fn watch(
        self: Arc<Self>,
        mut stop: watch::Receiver<bool>,
        metrics: Option<Arc<hookd_metrics::Metrics>>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_secs(self.config.reload_interval_secs));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        #[cfg(unix)]
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        loop {
            #[cfg(unix)]
            let hangup = async {
                match hup.as_mut() {
                    Some(h) => {
                        h.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hangup = std::future::pending::<()>();
            let force = tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tick.tick() => false,
                () = hangup => true,
            };
            let tls = self.clone();
            match tokio::task::spawn_blocking(move || tls.reload(force)).await {
                Ok(Ok(true)) => {
                    if let Some(m) = &metrics {
                        m.tls_certificate_expiry.set(self.not_after());
                    }
                    tracing::info!(
                        forced = force,
                        "TLS certificates reloaded; new connections use them"
                    );
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "TLS reload failed; keeping the previous certificates")
                }
                Err(e) => tracing::error!(error = %e, "TLS reload task failed"),
            }
        }
    }
}

fn stamps(config: &TlsConfig) -> Stamps {
    [&config.cert_file, &config.key_file, &config.client_ca_file]
        .into_iter()
        .map(|p| {
            let meta = std::fs::metadata(p.as_ref()?).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}

fn read_pem(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| tls_error(key, format!("cannot read {}: {e}", path.display())))
}

fn certificates(
    key: &'static str,
    path: &Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let pem = read_pem(key, path)?;
    let certs = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            tls_error(
                key,
                format!("{}: not PEM certificates: {e}", path.display()),
            )
        })?;
    if certs.is_empty() {
        return Err(tls_error(
            key,
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(certs)
}

/// What the certificate files make: a server config per listener, and the serving
/// certificate's notAfter.
struct Built {
    grpc: Arc<rustls::ServerConfig>,
    http: Arc<rustls::ServerConfig>,
    ingest: Arc<rustls::ServerConfig>,
    not_after: i64,
}

fn now_unix_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Warns when the serving certificate has expired (clients refuse it) or expires within
/// 14 days.
fn warn_on_expiry(not_after: i64, now: i64) {
    if let Some(said) = expiry_warning(not_after, now) {
        tracing::warn!(not_after_unix = not_after, "{said}");
    }
}

/// What [`warn_on_expiry`] says, if anything.
pub fn expiry_warning(not_after: i64, now: i64) -> Option<String> {
    let said = if not_after <= now {
        format!(
            "the TLS certificate (tls.cert_file) expired {} day(s) ago: clients refuse it; replace the file (it is reloaded)",
            (now - not_after) / 86_400
        )
    } else if not_after - now < 14 * 86_400 {
        format!(
            "the TLS certificate (tls.cert_file) expires in {} day(s): replace the file before then (it is reloaded)",
            (not_after - now) / 86_400
        )
    } else {
        return None;
    };
    Some(said)
}

fn build(config: &TlsConfig) -> Result<Built, TlsError> {
    use rustls::pki_types::pem::PemObject;
    let (Some(cert_file), Some(key_file)) = (&config.cert_file, &config.key_file) else {
        return Err(tls_error("cert_file", "not set".into()));
    };
    let chain = certificates("cert_file", cert_file)?;
    let not_after = chain
        .first()
        .and_then(|leaf| x509_parser::parse_x509_certificate(leaf.as_ref()).ok())
        .map(|(_, cert)| cert.validity().not_after.timestamp())
        .ok_or_else(|| {
            tls_error(
                "cert_file",
                format!(
                    "{}: its first certificate does not parse",
                    cert_file.display()
                ),
            )
        })?;
    let key_pem = read_pem("key_file", key_file)?;
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        tls_error(
            "key_file",
            format!("{}: no PEM private key: {e}", key_file.display()),
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certified = rustls::sign::CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
        tls_error(
            "key_file",
            format!(
                "{} does not go with {}: {e}",
                key_file.display(),
                cert_file.display()
            ),
        )
    })?;
    let certified = Arc::new(certified);
    let verifier = |auth: Option<ClientAuth>| -> Result<_, TlsError> {
        let (Some(ca_file), Some(auth)) = (&config.client_ca_file, auth) else {
            return Ok(None);
        };
        {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates("client_ca_file", ca_file)? {
                roots.add(cert).map_err(|e| {
                    tls_error(
                        "client_ca_file",
                        format!("{}: not a usable CA certificate: {e}", ca_file.display()),
                    )
                })?;
            }
            let builder = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider.clone(),
            );
            let builder = match auth {
                ClientAuth::Optional => builder.allow_unauthenticated(),
                ClientAuth::Required => builder,
            };
            Ok(Some(builder.build().map_err(|e| {
                tls_error(
                    "client_ca_file",
                    format!("{}: cannot verify clients with it: {e}", ca_file.display()),
                )
            })?))
        }
    };
    let api = verifier(Some(config.client_auth))?;
    let ingest = verifier(match config.ingest_client_auth {
        IngestClientAuth::None => None,
        IngestClientAuth::Optional => Some(ClientAuth::Optional),
        IngestClientAuth::Required => Some(ClientAuth::Required),
    })?;
    let make = |alpn: &[u8],
                verifier: &Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>|
     -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error("cert_file", e.to_string()))?;
        let builder = match verifier {
            Some(v) => builder.with_client_cert_verifier(v.clone()),
            None => builder.with_no_client_auth(),
        };
        let mut server = builder.with_cert_resolver(Arc::new(
            rustls::sign::SingleCertAndKey::from(certified.clone()),
        ));
        server.alpn_protocols = vec![alpn.to_vec()];
        Ok(Arc::new(server))
    };
    Ok(Built {
        grpc: make(b"h2", &api)?,
        http: make(b"http/1.1", &api)?,
        ingest: make(b"http/1.1", &ingest)?,
        not_after,
    })
}

/// Which listener a connection came to (decides ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Grpc,
    Http,
    /// The ingest listener: HTTP/1.1, with its own client-certificate setting.
    Ingest,
}

/// The identity a verified client certificate presented (its DNS names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    pub dns_names: Vec<String>,
}

/// Decides, when a connection is accepted, whether it is served somewhere other than the
/// listener's own runtime: the ingest listener's suspect clients (`ingest::demote`).
pub trait Placement: Send + Sync + std::fmt::Debug {
    /// Where to serve a connection from `ip`; None: with everyone else's.
    fn placed(&self, ip: IpAddr) -> Option<Placed>;
}

/// A paced connection reads at most this much at once: what one read makes the kernel do
/// on this CPU (on loopback and with ACK-clocked senders, its share of the sender's TCP
/// work too) stays a few tens of microseconds.
pub const PACED_READ_BYTES: usize = 64 << 10;

/// How much reading a quiet spell saves up: this long at the rate.
const PACE_BURST: Duration = Duration::from_millis(10);

/// Where a suspect client's connection is served, and the pace its reads share.
#[derive(Debug, Clone)]
pub struct Placed {
    pub handle: tokio::runtime::Handle,
    pub pace: Option<Arc<Pace>>,
}

/// The bytes per second that suspect clients' connections read, all of them together.
///
/// Idle priority decides who gets the CPU among threads; it does not reach the kernel's
/// network work, which runs in softirq context ahead of every thread. Each read of a
/// flood's body makes the kernel take in, on this CPU, what the freed window lets the
/// sender send next. Unpaced, 1 MiB unsigned bodies read at loopback speed had, in one
/// run of four, every honest request take 6 to 9 ms for a third of a second, while
/// `perf sched` showed the block layer's worker (which completes the log's fsync) waiting
/// 5.5 ms for the CPU and `ksoftirqd` 17.7 ms. Paced, the kernel's share of a flood is
/// bounded by the rate, in small pieces.
///
/// Each connection pays after it reads and then waits until everything read by all of
/// them fits the rate: the waits queue connections in the order they read, with no herd
/// of wake-ups, and a quiet spell lets up to [`PACE_BURST`] of reading through at once.
#[derive(Debug)]
pub struct Pace {
    per_sec: u64,
    /// When the bytes charged so far will have fitted the rate.
    free: Mutex<Instant>,
}

impl Pace {
    /// `per_sec` bytes a second; `None` for 0 (unpaced).
    pub fn new(per_sec: u64) -> Option<Arc<Self>> {
        (per_sec > 0).then(|| {
            Arc::new(Self {
                per_sec,
                free: Mutex::new(Instant::now()),
            })
        })
    }

    /// Charges `n` bytes read at `now`: when their connection may read again (at or before
    /// `now`: at once).
    pub fn charge(&self, n: usize, now: Instant) -> Instant {
        let nanos = (n as u128 * 1_000_000_000) / u128::from(self.per_sec);
        let cost = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let earliest = now.checked_sub(PACE_BURST).unwrap_or(now);
        *free = (*free).max(earliest) + cost;
        *free
    }
}

/// What the services learn about a connection (a request extension on both listeners).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub remote: SocketAddr,
    /// The verified client certificate's identity (mTLS).
    pub peer: Option<Arc<PeerIdentity>>,
    /// The requests it has made: what keeps it open.
    pub activity: Arc<Activity>,
}

/// The requests a connection has made: how many are in progress, and when the last one
/// began or ended. A connection is kept open by these, never by bytes alone.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    /// Milliseconds after `opened` of the last request's beginning or end; `u64::MAX`: none.
    last_ms: std::sync::atomic::AtomicU64,
    in_flight: std::sync::atomic::AtomicUsize,
}

/// One request in progress on a connection (see [`Activity::begin`]).
#[derive(Debug)]
pub struct Active(Arc<Activity>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.touch();
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            opened: Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(u64::MAX),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A request begins; it is in progress until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> Active {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.touch();
        Active(self.clone())
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Release);
    }

    /// When the connection may be closed for want of requests: `None` while one is in
    /// progress; else `idle` after the last one, or `first` after opening if none came.
    fn close_at(&self, idle: Duration, first: Duration) -> Option<Instant> {
        if self.in_flight.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return None;
        }
        Some(
            match self.last_ms.load(std::sync::atomic::Ordering::Acquire) {
                u64::MAX => self.opened + first,
                ms => self.opened + Duration::from_millis(ms) + idle,
            },
        )
    }
}

enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// An accepted connection: its stream, its place under the connection limits, and the idle
/// timer (which only requests put off: see [`Activity`]).
pub struct Conn {
    io: Io,
    info: ConnInfo,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    first_request_timeout: Duration,
    /// HTTP/2: the client's preface and the header of its first frame (33 bytes) must
    /// arrive by this deadline (from accept), so a client that trickles them is dropped
    /// like one that sends nothing. `None` once they have (or for HTTP/1, which hyper's
    /// header-read timeout covers).
    opening: Option<(usize, Pin<Box<Sleep>>)>,
    /// The runtime whose reactor and timers hold this connection, when not the
    /// listener's: a suspect client's ([`crate::ingest::demote`]), to be served there.
    placed: Option<tokio::runtime::Handle>,
    /// A suspect client's reads, which share a rate with all suspects'.
    paced: Option<Paced>,
    _permit: OwnedSemaphorePermit,
    _peer_slot: PeerSlot,
}

/// A paced connection's share of [`Pace`]: it reads when `wait` has
/// passed, at most [`PACED_READ_BYTES`] at once, and then pays.
struct Paced {
    pace: Arc<Pace>,
    wait: Pin<Box<Sleep>>,
}

impl Paced {
    /// Once its turn has come, reads at most [`PACED_READ_BYTES`]
    /// and pays for it; before, it is pending as if for bytes (the connection's timeouts
    /// still apply).
    fn read(
        &mut self,
        io: &mut Io,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.wait.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let room = buf.remaining().min(PACED_READ_BYTES);
        let mut part = ReadBuf::new(buf.initialize_unfilled_to(room));
        let polled = io.poll_read(cx, &mut part);
        let read = part.filled().len();
        buf.advance(read);
        if read > 0 {
            let next = self.pace.charge(read, Instant::now());
            self.wait.as_mut().reset(next);
        }
        polled
    }
}

impl Io {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("info", &self.info).finish()
    }
}

impl Conn {
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }

    /// The runtime to serve this connection on, when not the listener's.
    pub fn placed(&self) -> Option<&tokio::runtime::Handle> {
        self.placed.as_ref()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = match &mut this.paced {
            None => this.io.poll_read(cx, buf),
            Some(paced) => paced.read(&mut this.io, cx, buf),
        };
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                if let Some((left, _)) = &mut this.opening {
                    *left = left.saturating_sub(buf.filled().len() - before);
                    if *left == 0 {
                        this.opening = None;
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if let Some((_, deadline)) = &mut this.opening
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the HTTP/2 preface did not arrive within the handshake timeout",
                    )));
                }
                // The timer fires at the earliest the connection may close; then the
                // requests say whether it does, or when to look again.
                while this.idle.as_mut().poll(cx).is_ready() {
                    let now = Instant::now();
                    match this
                        .info
                        .activity
                        .close_at(this.idle_timeout, this.first_request_timeout)
                    {
                        Some(at) if at <= now => {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "no request within the idle or first-request timeout",
                            )));
                        }
                        Some(at) => this.idle.as_mut().reset(at),
                        None => this.idle.as_mut().reset(now + this.idle_timeout),
                    }
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// Accepts on `listener` until `stop`, and hands over connections that passed the handshake.
/// The channel closes when the loop ends (the servers then stop).
pub fn accept(
    listener: TcpListener,
    kind: Kind,
    tls: Option<Arc<Tls>>,
    limits: &ConnectionLimits,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
    demote: Option<Arc<dyn Placement>>,
) -> mpsc::Receiver<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(64);
    let permits = Arc::new(Semaphore::new(max_connections));
    let peers = PeerSlots::new(match limits.max_connections_per_peer {
        0 => (max_connections * usize::from(limits.max_share_percent.clamp(1, 100)) / 100).max(1),
        n => n,
    });
    let handshake = Duration::from_millis(limits.handshake_timeout_ms);
    let idle = Duration::from_secs(limits.idle_timeout_secs);
    let first_request = Duration::from_millis(limits.first_request_timeout_ms);
    tokio::spawn(async move {
        let mut refused_log = Throttle::default();
        loop {
            let accepted = tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                a = listener.accept() => a,
            };
            let (stream, remote) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; open connections
                    // closing will make room.
                    if refused_log.ready() {
                        tracing::warn!(listener = ?kind, error = %e, "accept failed; backing off");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                if refused_log.ready() {
                    tracing::warn!(
                        listener = ?kind,
                        max_connections,
                        "connection limit reached; closing new connections"
                    );
                }
                drop(stream);
                continue;
            };
            let Some(peer_slot) = peers.try_take(remote.ip()) else {
                if refused_log.ready() {
                    tracing::warn!(
                        listener = ?kind,
                        peer = %remote.ip(),
                        max_connections_per_peer = peers.max,
                        "this address holds its share of connections; closing its new ones"
                    );
                }
                drop(stream);
                continue;
            };
            let opening = Opening {
                remote,
                kind,
                tls: tls.clone(),
                handshake,
                first_request,
                idle,
                permit,
                peer_slot,
                tx: tx.clone(),
            };
            // A suspect client's socket moves to the demoted runtime's reactor, so its
            // handshake and every wake-up after it are that runtime's, not this one's.
            let placed = demote.as_ref().and_then(|d| d.placed(remote.ip()));
            let placed_low = placed.is_some();
            match placed {
                None => {
                    tokio::spawn(opening.run(stream, None));
                }
                Some(low) => match stream.into_std() {
                    Ok(stream) => {
                        low.handle.clone().spawn(async move {
                            match TcpStream::from_std(stream) {
                                Ok(stream) => opening.run(stream, Some(low)).await,
                                Err(e) => {
                                    tracing::debug!(%remote, error = %e, "cannot move a demoted connection");
                                }
                            }
                        });
                    }
                    Err(e) => {
                        tracing::debug!(%remote, error = %e, "cannot move a demoted connection");
                    }
                },
            }
            // A burst of suspects' connections (a flood's wave: 64 at once in the flood
            // test) is accepted one per turn of this runtime, with the gRPC calls and the
            // trusted providers' requests on it served in between rather than after all.
            if placed_low {
                tokio::task::yield_now().await;
            }
        }
    });
    rx
}

/// An accepted connection on its way to being handed over: what [`accept`] knows of it.
struct Opening {
    remote: SocketAddr,
    kind: Kind,
    tls: Option<Arc<Tls>>,
    handshake: Duration,
    first_request: Duration,
    idle: Duration,
    permit: OwnedSemaphorePermit,
    peer_slot: PeerSlot,
    tx: mpsc::Sender<io::Result<Conn>>,
}

impl Opening {
    /// The handshake, then the connection handed over, its timers on the runtime this runs
    /// on (`placed`'s, when that is not the listener's).
    async fn run(self, stream: TcpStream, placed: Option<Placed>) {
        let Self {
            remote,
            kind,
            tls,
            handshake,
            first_request,
            idle,
            permit,
            peer_slot,
            tx,
        } = self;
        let _ = stream.set_nodelay(true);
        let opened = Instant::now() + handshake;
        let io = match tokio::time::timeout(handshake, open(stream, kind, tls)).await {
            Ok(Ok(io)) => io,
            Ok(Err(e)) => {
                tracing::debug!(%remote, error = %e, "connection refused at handshake");
                return;
            }
            Err(_) => {
                tracing::debug!(%remote, "handshake timed out");
                return;
            }
        };
        let peer = match &io {
            Io::Tls(s) => peer_identity(s.get_ref().1),
            Io::Plain(_) => None,
        };
        let conn = Conn {
            io,
            info: ConnInfo {
                remote,
                peer,
                activity: Activity::new(),
            },
            idle: Box::pin(tokio::time::sleep(first_request)),
            first_request_timeout: first_request,
            opening: (kind == Kind::Grpc).then(|| (33, Box::pin(tokio::time::sleep_until(opened)))),
            idle_timeout: idle,
            paced: placed
                .as_ref()
                .and_then(|p| p.pace.clone())
                .map(|pace| Paced {
                    pace,
                    wait: Box::pin(tokio::time::sleep_until(Instant::now())),
                }),
            placed: placed.map(|p| p.handle),
            _permit: permit,
            _peer_slot: peer_slot,
        };
        let _ = tx.send(Ok(conn)).await;
    }
}

/// Open connections per client address on one listener, each at most `max`.
#[derive(Debug, Clone)]
struct PeerSlots {
    max: usize,
    held: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

/// One connection's place among its address's, given back when dropped.
#[derive(Debug)]
struct PeerSlot(PeerSlots, std::net::IpAddr);

impl PeerSlots {
    fn new(max: usize) -> Self {
        Self {
            max,
            held: Arc::default(),
        }
    }

    fn held(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, usize>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn try_take(&self, ip: std::net::IpAddr) -> Option<PeerSlot> {
        let mut held = self.held();
        let n = held.entry(ip).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot(self.clone(), ip))
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.0.held();
        if let Some(n) = held.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.1);
            }
        }
    }
}

/// The TLS handshake, or for plaintext the first bytes of a request.
async fn open(stream: TcpStream, kind: Kind, tls: Option<Arc<Tls>>) -> io::Result<Io> {
    match tls {
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.current(kind));
            Ok(Io::Tls(Box::new(acceptor.accept(stream).await?)))
        }
        None => {
            // `readable()` may report a fresh socket ready with nothing in it; a peek waits
            // for a byte that is really there.
            if stream.peek(&mut [0u8; 1]).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "closed before sending anything",
                ));
            }
            Ok(Io::Plain(stream))
        }
    }
}

fn peer_identity(conn: &rustls::ServerConnection) -> Option<Arc<PeerIdentity>> {
    let leaf = conn.peer_certificates()?.first()?;
    let cert = webpki::EndEntityCert::try_from(leaf).ok()?;
    Some(Arc::new(PeerIdentity {
        dns_names: cert.valid_dns_names().map(str::to_owned).collect(),
    }))
}

/// Who a call is charged to, besides the whole budget: its connection, and its caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sharer {
    Connection(SocketAddr),
    /// A named caller (a token or a client certificate).
    Caller(Arc<str>),
    /// An unauthenticated caller, by its address.
    Peer(std::net::IpAddr),
}

impl std::fmt::Display for Sharer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connection(a) => write!(f, "this connection ({a})"),
            Self::Caller(name) => write!(f, "caller `{name}`"),
            Self::Peer(ip) => write!(f, "client address {ip}"),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    requests: usize,
    bytes: u64,
}

#[derive(Debug, Default)]
struct Held {
    total: Usage,
    /// Only sharers holding something are here.
    shares: std::collections::HashMap<Sharer, Usage>,
}

/// What gRPC calls in progress may hold at once: calls, and request-body bytes received
/// but not yet decoded (what a client that never finishes its messages makes hookd
/// hold); in all, and per connection and per caller (a share of each).
#[derive(Debug)]
pub struct RequestBudget {
    /// The setting that bounds the calls, for refusals.
    requests_key: &'static str,
    max_requests: usize,
    max_bytes: u64,
    share_requests: usize,
    share_bytes: u64,
    share_percent: u8,
    held: std::sync::Mutex<Held>,
}

/// One call's place in the [`RequestBudget`], given back when dropped.
#[derive(Debug)]
pub struct RequestSlot {
    budget: Arc<RequestBudget>,
    sharers: Arc<[Sharer]>,
}

impl RequestSlot {
    /// What the call's request body charges its bytes to.
    pub fn charge(&self) -> Charge {
        Charge {
            budget: self.budget.clone(),
            sharers: self.sharers.clone(),
        }
    }
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        self.budget.release(&self.sharers, 1, 0);
    }
}

/// Where a request body's bytes are counted: a budget and the call's sharers.
#[derive(Debug, Clone)]
pub struct Charge {
    budget: Arc<RequestBudget>,
    sharers: Arc<[Sharer]>,
}

impl RequestBudget {
    /// The budget of API calls (`max_requests_in_flight`, `max_request_bytes_in_flight`).
    pub fn new(limits: &ConnectionLimits) -> Arc<Self> {
        Self::with(
            "connections.max_requests_in_flight",
            limits.max_requests_in_flight,
            limits.max_request_bytes_in_flight,
            limits.max_share_percent,
        )
    }

    /// The budget of gRPC health calls (`max_health_calls_in_flight`, 1 MiB).
    pub fn health(limits: &ConnectionLimits) -> Arc<Self> {
        Self::with(
            "connections.max_health_calls_in_flight",
            limits.max_health_calls_in_flight,
            1 << 20,
            limits.max_share_percent,
        )
    }

    fn with(
        requests_key: &'static str,
        max_requests: usize,
        max_bytes: u64,
        share_percent: u8,
    ) -> Arc<Self> {
        let percent = u64::from(share_percent.clamp(1, 100));
        let share = |max: u64| (max.saturating_mul(percent) / 100).max(1);
        Arc::new(Self {
            requests_key,
            max_requests,
            max_bytes,
            share_requests: usize::try_from(share(max_requests as u64)).unwrap_or(usize::MAX),
            share_bytes: share(max_bytes),
            share_percent,
            held: std::sync::Mutex::default(),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for one more call charged to `sharers`, or why there is none.
    pub fn try_request(self: &Arc<Self>, sharers: Vec<Sharer>) -> Result<RequestSlot, String> {
        let mut held = self.held();
        if held.total.requests >= self.max_requests {
            return Err(format!(
                "hookd is serving {} calls at once ({}); retry with backoff",
                held.total.requests, self.requests_key
            ));
        }
        for sharer in &sharers {
            let used = held.shares.get(sharer).map_or(0, |u| u.requests);
            if used >= self.share_requests {
                return Err(format!(
                    "{sharer} has {used} calls in progress, its share ({} % of {} = {}); retry with backoff",
                    self.share_percent, self.requests_key, self.share_requests
                ));
            }
        }
        held.total.requests += 1;
        for sharer in &sharers {
            held.shares.entry(sharer.clone()).or_default().requests += 1;
        }
        Ok(RequestSlot {
            budget: self.clone(),
            sharers: sharers.into(),
        })
    }

    /// Counts `bytes` more for `sharers`, or says which bound they would pass (and counts
    /// nothing).
    fn try_bytes(&self, sharers: &[Sharer], bytes: u64) -> Result<(), String> {
        let mut held = self.held();
        let total = held.total.bytes + bytes;
        if total > self.max_bytes {
            return Err(format!(
                "hookd would hold {total} bytes of unfinished requests (connections.max_request_bytes_in_flight {}); retry with backoff",
                self.max_bytes
            ));
        }
        for sharer in sharers {
            let used = held.shares.get(sharer).map_or(0, |u| u.bytes);
            if used > 0 && used + bytes > self.share_bytes {
                return Err(format!(
                    "{sharer} would hold {} bytes of unfinished requests, past its share ({} % of connections.max_request_bytes_in_flight = {}); retry with backoff",
                    used + bytes,
                    self.share_percent,
                    self.share_bytes
                ));
            }
        }
        held.total.bytes = total;
        for sharer in sharers {
            held.shares.entry(sharer.clone()).or_default().bytes += bytes;
        }
        Ok(())
    }

    fn release(&self, sharers: &[Sharer], requests: usize, bytes: u64) {
        let mut held = self.held();
        held.total.requests = held.total.requests.saturating_sub(requests);
        held.total.bytes = held.total.bytes.saturating_sub(bytes);
        for sharer in sharers {
            if let Some(u) = held.shares.get_mut(sharer) {
                u.requests = u.requests.saturating_sub(requests);
                u.bytes = u.bytes.saturating_sub(bytes);
                if u.requests == 0 && u.bytes == 0 {
                    held.shares.remove(sharer);
                }
            }
        }
    }

    /// Calls in progress, and how many sharers hold something (tests, metrics).
    pub fn in_use(&self) -> (usize, usize) {
        let held = self.held();
        (held.total.requests, held.shares.len())
    }
}

/// A request body that fails with DEADLINE_EXCEEDED when it has not ended within a time
/// from its start (the gRPC request-body timeout), and with RESOURCE_EXHAUSTED when the
/// bytes all calls hold would pass the [`RequestBudget`].
///
/// What is charged is each message's announced length (the gRPC frame prefix), as soon as
/// the prefix arrives: tonic reserves a buffer of that size then, so 5 bytes announcing
/// 4 MiB cost 4 MiB of memory (finding F2: 100 such calls took 1.65 GB).
#[derive(Debug)]
pub struct DeadlineBody<B> {
    inner: B,
    deadline: Pin<Box<Sleep>>,
    charge: Charge,
    /// Bytes this body has added to the budget (given back when dropped).
    counted: u64,
    /// The gRPC message framing: prefix bytes seen of the current message...
    prefix: [u8; 5],
    prefix_len: usize,
    /// ...and, once it is complete, the message bytes still to come.
    remaining: u64,
}

impl<B> DeadlineBody<B> {
    pub fn new(inner: B, timeout: Duration, charge: Charge) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            charge,
            counted: 0,
            prefix: [0; 5],
            prefix_len: 0,
            remaining: 0,
        }
    }

    /// Follows the framing through `data`; charges each announced length. Err: the bound
    /// it would pass.
    fn charge(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let take = data
                    .len()
                    .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                self.remaining -= take as u64;
                data = &data[take..];
                continue;
            }
            let take = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
            self.prefix_len += take;
            data = &data[take..];
            if self.prefix_len == 5 {
                self.prefix_len = 0;
                let len = u64::from(u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]));
                self.remaining = len;
                let charged = len + 5;
                self.charge
                    .budget
                    .try_bytes(&self.charge.sharers, charged)?;
                self.counted += charged;
            }
        }
        Ok(())
    }
}

impl<B> Drop for DeadlineBody<B> {
    fn drop(&mut self) {
        if self.counted > 0 {
            self.charge
                .budget
                .release(&self.charge.sharers, 0, self.counted);
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<B> http_body::Body for DeadlineBody<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(why) = this.charge(data)
                {
                    return Poll::Ready(Some(Err(Box::new(tonic::Status::resource_exhausted(
                        why,
                    )))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other.map(|f| f.map_err(Into::into))),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    Poll::Ready(Some(Err(Box::new(tonic::Status::deadline_exceeded(
                        "the request's message did not arrive within connections.request_body_timeout_ms",
                    )))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that holds `H` (a call's budget slot, its connection's [`Active`])
/// until the body ends or is dropped: a streaming call counts as in progress while it
/// streams.
#[derive(Debug)]
pub struct HoldBody<B, H> {
    inner: B,
    hold: Option<H>,
}

impl<B, H> HoldBody<B, H> {
    pub fn new(inner: B, hold: H) -> Self {
        Self {
            inner,
            hold: Some(hold),
        }
    }
}

impl<B, H> http_body::Body for HoldBody<B, H>
where
    B: http_body::Body + Unpin,
    H: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.hold = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Lets a warning through at most every 10 s.
#[derive(Debug, Default)]
struct Throttle(Option<std::time::Instant>);

impl Throttle {
    fn ready(&mut self) -> bool {
        let now = std::time::Instant::now();
        match self.0 {
            Some(last) if now.duration_since(last) < Duration::from_secs(10) => false,
            _ => {
                self.0 = Some(now);
                true
            }
        }
    }
}

/// Serves the admin router over HTTP/1.1 on accepted connections until `stop`; then lets
/// the requests in progress finish.
pub async fn serve_http(
    mut conns: mpsc::Receiver<io::Result<Conn>>,
    router: axum::Router,
    limits: &ConnectionLimits,
    stop: watch::Receiver<bool>,
) -> io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
        .max_buf_size((limits.max_header_bytes as usize).max(8 << 10))
        .keep_alive(true);
    let mut tasks = tokio::task::JoinSet::new();
    let mut stopping = stop.clone();
    loop {
        let conn = tokio::select! {
            _ = stopping.wait_for(|s| *s) => break,
            c = conns.recv() => match c {
                Some(Ok(c)) => c,
                Some(Err(_)) => continue,
                None => break,
            },
        };
        while tasks.try_join_next().is_some() {}
        let info = conn.info().clone();
        let placed = conn.placed().cloned();
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: http::Request<_>| {
            let active = info.activity.begin();
            request.extensions_mut().insert(info.clone());
            let mut router = router.clone();
            async move {
                let answer =
                    tower_service::Service::call(&mut router, request.map(axum::body::Body::new))
                        .await;
                answer.map(|r| r.map(|body| axum::body::Body::new(HoldBody::new(body, active))))
            }
        });
        let connection = builder.serve_connection(TokioIo::new(conn), service);
        let mut stop = stop.clone();
        let serve = async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = async { let _ = stop.wait_for(|s| *s).await; } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        };
        // A suspect client's connection is served by the runtime that holds its socket.
        match placed {
            Some(low) => tasks.spawn_on(serve, &low),
            None => tasks.spawn(serve),
        };
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Raises the soft open-file limit to the hard one and returns it (`None` where it cannot
/// be read). Connections then have room, and the listeners' limits are set below it so
/// storage and outbound pushes always have descriptors.
pub fn raise_open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit, setrlimit};
        let mut limit = getrlimit(Resource::Nofile);
        if let (Some(current), Some(hard)) = (limit.current, limit.maximum)
            && current < hard
        {
            limit.current = Some(hard);
            if setrlimit(Resource::Nofile, limit).is_err() {
                limit.current = Some(current);
            }
        }
        limit.current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_paced_connection_reads_at_its_rate_in_small_pieces() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const BODY: usize = 1 << 20;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let sender = tokio::spawn(async move {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.write_all(&vec![7u8; BODY]).await.unwrap();
            tcp
        });
        let (stream, remote) = listener.accept().await.unwrap();
        let activity = Activity::new();
        // A request in progress: the idle timer (which the paused clock reaches at once
        // whenever the test waits) never closes it.
        let _request = activity.begin();
        let slots = PeerSlots::new(1);
        let mut conn = Conn {
            io: Io::Plain(stream),
            info: ConnInfo {
                remote,
                peer: None,
                activity,
            },
            idle: Box::pin(tokio::time::sleep(Duration::from_secs(3_600))),
            idle_timeout: Duration::from_secs(3_600),
            first_request_timeout: Duration::from_secs(3_600),
            opening: None,
            placed: None,
            paced: Some(Paced {
                // 1 MiB a second, shared with no one.
                pace: Pace::new(1 << 20).unwrap(),
                wait: Box::pin(tokio::time::sleep_until(Instant::now())),
            }),
            _permit: Arc::new(Semaphore::new(1)).try_acquire_owned().unwrap(),
            _peer_slot: slots.try_take(remote.ip()).unwrap(),
        };
        let started = Instant::now();
        let mut buf = vec![0u8; 4 * PACED_READ_BYTES];
        let (mut read, mut largest) = (0, 0);
        while read < BODY {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the body ended early");
            largest = largest.max(n);
            read += n;
        }
        let took = started.elapsed();
        assert!(
            largest <= PACED_READ_BYTES,
            "a paced read took {largest} bytes at once"
        );
        // Each piece is paid for after it is read: the last one is read once the others
        // (1 MiB less one piece) fit the rate, less the 10 ms a fresh pace allows at once.
        let least =
            Duration::from_millis(1_000 * (BODY - PACED_READ_BYTES) as u64 / BODY as u64 - 10);
        assert!(took >= least, "1 MiB read in {took:?} at 1 MiB/s");
        drop(sender.await.unwrap());
    }

    #[test]
    fn only_requests_put_off_a_connections_close() {
        let (idle, first) = (Duration::from_secs(300), Duration::from_secs(10));
        let activity = Activity::new();
        let opened = activity.opened;
        assert_eq!(activity.close_at(idle, first), Some(opened + first));
        let active = activity.begin();
        assert_eq!(
            activity.close_at(idle, first),
            None,
            "a request in progress"
        );
        let second = activity.begin();
        drop(active);
        assert_eq!(
            activity.close_at(idle, first),
            None,
            "one still in progress"
        );
        drop(second);
        let at = activity.close_at(idle, first).unwrap();
        assert!(at >= opened + idle && at <= Instant::now() + idle, "{at:?}");
    }

    #[test]
    fn an_address_holds_at_most_its_connections() {
        let slots = PeerSlots::new(2);
        let ip: std::net::IpAddr = [10, 0, 0, 1].into();
        let a = slots.try_take(ip).unwrap();
        let _b = slots.try_take(ip).unwrap();
        assert!(slots.try_take(ip).is_none());
        assert!(slots.try_take([10, 0, 0, 2].into()).is_some());
        drop(a);
        let _c = slots.try_take(ip).unwrap();
        drop(_c);
        drop(_b);
        assert!(
            slots.held().get(&ip).is_none(),
            "an address with none is forgotten"
        );
    }

    #[test]
    fn each_sharer_holds_at_most_its_share_and_gives_it_all_back() {
        let limits = ConnectionLimits {
            max_requests_in_flight: 8,
            max_request_bytes_in_flight: 8 << 20,
            max_share_percent: 25,
            ..ConnectionLimits::default()
        };
        let budget = RequestBudget::new(&limits);
        let a = |port| {
            vec![
                Sharer::Connection(SocketAddr::from(([127, 0, 0, 1], port))),
                Sharer::Caller("a".into()),
            ]
        };
        let b = vec![Sharer::Caller("b".into())];
        let first = budget.try_request(a(1)).unwrap();
        let second = budget.try_request(a(2)).unwrap();
        let third = budget.try_request(a(3)).unwrap_err();
        assert!(
            third.contains("caller `a`") && third.contains("25 %"),
            "{third}"
        );
        let other = budget.try_request(b.clone()).unwrap();
        // Bytes: a sharer holding nothing may take more than its share (one large message);
        // holding something, it may not pass its share (2 MiB), and others still may.
        let (ca, cb) = (first.charge(), other.charge());
        budget.try_bytes(&ca.sharers, 3 << 20).unwrap();
        let over = budget.try_bytes(&second.charge().sharers, 1).unwrap_err();
        assert!(over.contains("caller `a`"), "{over}");
        budget.try_bytes(&cb.sharers, 1 << 20).unwrap();
        budget.release(&ca.sharers, 0, 3 << 20);
        budget.release(&cb.sharers, 0, 1 << 20);
        drop((first, second, other));
        assert_eq!(
            budget.in_use(),
            (0, 0),
            "nothing is held, no sharer is left"
        );
        // The total bounds everyone: 8 calls from distinct sharers, then none.
        let slots: Vec<_> = (0..8)
            .map(|n| budget.try_request(vec![Sharer::Caller(format!("c{n}").into())]))
            .collect::<Result<_, _>>()
            .unwrap();
        let full = budget
            .try_request(vec![Sharer::Caller("late".into())])
            .unwrap_err();
        assert!(
            full.contains("connections.max_requests_in_flight"),
            "{full}"
        );
        drop(slots);
        assert_eq!(budget.in_use(), (0, 0));
    }

    #[test]
    fn limits_are_checked_with_their_key() {
        assert!(ConnectionLimits::default().check().is_ok());
        let bad = ConnectionLimits {
            max_header_bytes: 10,
            ..ConnectionLimits::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "connections.max_header_bytes");
        let bad = ConnectionLimits {
            idle_timeout_secs: 10,
            ..ConnectionLimits::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "connections.idle_timeout_secs");
    }

    #[test]
    fn tls_config_errors_name_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = Tls::from_config(&TlsConfig {
            cert_file: Some(missing.clone()),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert_eq!(e.key, "key_file");
        let e = Tls::from_config(&TlsConfig {
            cert_file: Some(missing.clone()),
            key_file: Some(missing.clone()),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert_eq!(e.key, "cert_file");
        assert!(e.message.contains("cannot read"), "{}", e.message);
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").unwrap();
        let e = Tls::from_config(&TlsConfig {
            cert_file: Some(garbage.clone()),
            key_file: Some(garbage),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert!(e.message.contains("no PEM certificate"), "{}", e.message);
        let e = Tls::from_config(&TlsConfig {
            client_ca_file: Some(missing),
            ..TlsConfig::default()
        })
        .unwrap_err();
        assert_eq!(e.key, "client_ca_file");
    }

    #[test]
    fn paced_reads_wait_until_all_reading_fits_the_rate() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert!(Pace::new(0).is_none(), "0 is unpaced");
        // 1 MB/s: 1,000 bytes a millisecond, 10 ms of it saved up by a quiet spell.
        let pace = Pace::new(1_000_000).unwrap();
        let later = t0 + ms(1_000);
        assert_eq!(
            pace.charge(4_000, later),
            later - ms(6),
            "within the saved-up burst"
        );
        assert_eq!(pace.charge(6_000, later), later, "the burst spent");
        assert_eq!(pace.charge(2_000, later), later + ms(2), "past it: wait");
        // A second connection reading meanwhile queues behind the first.
        assert_eq!(pace.charge(1_000, later + ms(1)), later + ms(3));
        // Reading at the rate never waits; a long quiet spell saves no more than the burst.
        let much_later = later + ms(60_000);
        assert_eq!(pace.charge(10_000, much_later), much_later);
        assert_eq!(pace.charge(1_000, much_later), much_later + ms(1));
    }
}
