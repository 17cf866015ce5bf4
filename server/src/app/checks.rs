//! What is checked before anything is opened or bound: the config's credentials (tokens,
//! TLS, secrets keys), exposure (no unauthenticated listener off loopback), and the shares
//! of the open-file limit that listeners and push delivery may take. `hookd config check`
//! runs the same checks through [`preflight`].

use std::sync::Arc;

use hookd_core::clock::{Clock, SystemClock};

use super::ServeError;
use crate::config::{Config, ConfigError};

/// What `serve` checks before it opens anything, for `hookd config check`: the tokens
/// (their files and variables read), TLS (the certificate and key loaded), the secrets
/// keys, the config's sources and event types (compiled), and the refusal of a
/// non-loopback listener without authentication. Nothing is bound or opened.
pub(crate) fn preflight(config: &Config) -> Result<(), ServeError> {
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
    crate::catalog::Catalog::compile(&config.event_types).map_err(invalid_at)?;
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
pub(super) struct Credentials {
    pub(super) auth: crate::auth::Authenticator,
    pub(super) tls: Option<Arc<crate::listen::Tls>>,
    pub(super) sealer: Option<Arc<hookd_core::secrets::Sealer>>,
}

pub(super) fn credentials(
    config: &Config,
    clock: Arc<dyn Clock>,
) -> Result<Credentials, ServeError> {
    let env = |var: &str| std::env::var(var).ok();
    Ok(Credentials {
        auth: crate::auth::Authenticator::new(&config.auth, clock, &env).map_err(invalid_at)?,
        tls: crate::listen::Tls::from_config(&config.tls)?,
        sealer: hookd_core::secrets::Sealer::new(&config.secrets, &env)
            .map_err(invalid_at)?
            .map(Arc::new),
    })
}

/// A `(key, message)` refusal of one config key, as the config's own error.
pub(super) fn invalid_at((key, message): (String, String)) -> ConfigError {
    ConfigError::InvalidAt { key, message }
}

/// Refuses a non-loopback listener with no authentication (unless `auth.insecure`), and
/// warns about what is allowed but unwise.
pub(super) fn exposure(
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
pub(super) fn connection_budget(configured: usize, open_files: Option<u64>) -> usize {
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

/// Outbound push connections: the configured number, or half of the open-file limit (the
/// listeners have a sixth each; see `connection_budget`).
pub(super) fn outbound_budget(configured: usize, open_files: Option<u64>) -> usize {
    if configured > 0 {
        return configured;
    }
    match open_files {
        Some(files) => usize::try_from(files / 2).unwrap_or(usize::MAX).max(16),
        None => 4_096,
    }
}
