//! `[auth]`: tokens (a hash, a file or a variable) and clients (a certificate's DNS name),
//! each with scopes and a request rate; and whether reflection needs a credential.

use std::path::PathBuf;

use super::Scope;
use serde::Deserialize;

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// `[[auth.tokens]]`: bearer tokens.
    pub tokens: Vec<TokenConfig>,
    /// `[[auth.clients]]`: client certificates (needs `tls.client_ca_file`).
    pub clients: Vec<ClientConfig>,
    /// gRPC server reflection: `open`, `authenticated` (any valid credential) or `off`.
    pub reflection: Reflection,
    /// Listen on a non-loopback address with no authentication (logs a warning). Without
    /// it, such a configuration refuses to start.
    pub insecure: bool,
    /// Requests per second per caller (token or client certificate) unless the caller sets
    /// its own; 0 = unlimited. Over it: RESOURCE_EXHAUSTED with a RetryInfo (HTTP 429 with
    /// Retry-After).
    pub rate_limit_per_s: f64,
    /// Requests a caller may make at once above its rate.
    pub rate_limit_burst: f64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            tokens: Vec::new(),
            clients: Vec::new(),
            reflection: Reflection::Authenticated,
            insecure: false,
            rate_limit_per_s: 0.0,
            rate_limit_burst: 1_000.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reflection {
    Open,
    Authenticated,
    Off,
}

/// One bearer token: exactly one of `sha256`, `file` and `env` says where it comes from.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Shown in logs (never the token).
    pub name: String,
    /// Hex SHA-256 of the token (`hookd token new` or `hookd token hash`).
    #[serde(default)]
    pub sha256: Option<String>,
    /// A file holding the token (surrounding white space is ignored).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// An environment variable holding the token.
    #[serde(default)]
    pub env: Option<String>,
    pub scopes: Vec<Scope>,
    /// This caller's own request rate (requests/s; 0 = unlimited).
    #[serde(default)]
    pub rate_limit_per_s: Option<f64>,
}

/// A client certificate's identity: a DNS name in its subject alternative names.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    pub name: String,
    pub scopes: Vec<Scope>,
    #[serde(default)]
    pub rate_limit_per_s: Option<f64>,
}

/// A configuration error: the key and what is wrong.
pub(super) type AuthConfigError = (String, String);
