//! `[tls]`: rustls with ring from PEM files, client certificates (optional or required)
//! whose DNS names become a connection's [`PeerIdentity`](super::PeerIdentity), hot reload
//! (files checked every `tls.reload_interval_secs` and on SIGHUP; a failed reload keeps
//! the previous certificates), and the certificate's expiry warning.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use super::conn::Kind;
use serde::Deserialize;
use tokio::sync::watch;

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

    pub(super) fn current(&self, kind: Kind) -> Arc<rustls::ServerConfig> {
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
