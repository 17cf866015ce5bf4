//! Who may call what: named bearer tokens and client certificates, each with scopes, and a
//! request rate per caller.
//!
//! Tokens are configured as SHA-256 hashes (`hookd token new` prints a token and its hash),
//! or read from a file or an environment variable at start, so a config file never has to
//! hold a token in clear. A presented token is hashed and compared with every configured
//! hash in constant time. A client certificate (mTLS, verified against `tls.client_ca_file`
//! by the listener) stands in for a token when one of its DNS subject-alternative names is
//! a configured client's `name`.
//!
//! Scopes: `enqueue` (Enqueue, EnqueueBatch), `consume` (Receive, Ack, Nack), `read`
//! (Stats, GetMessage, GetEndpoint, ListEndpoints, ListDeadLetters, AnalyzeDeadLetters,
//! Watch, `/metrics`) and `admin` (everything, including the changes: PutEndpoint,
//! DeleteEndpoint, Pause/ResumeEndpoint, Replay/PurgeDeadLetters). gRPC health and
//! `/healthz` are always open. With no token and no client configured, everything is
//! open: hookd then refuses to listen on a non-loopback address unless `auth.insecure`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::listen::PeerIdentity;
use hookd_core::clock::Clock;
use hookd_core::limiter::TokenBucket;

/// What a caller may do. `admin` includes the other three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    Enqueue,
    Consume,
    Read,
    Admin,
}

impl Scope {
    fn bit(self) -> u8 {
        match self {
            Self::Enqueue => 1,
            Self::Consume => 2,
            Self::Read => 4,
            Self::Admin => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Enqueue => "enqueue",
            Self::Consume => "consume",
            Self::Read => "read",
            Self::Admin => "admin",
        }
    }
}

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
pub type AuthConfigError = (String, String);

/// An authenticated caller.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    scopes: u8,
    bucket: Option<Mutex<TokenBucket>>,
}

impl Principal {
    /// A caller with no scopes and no rate limit (tests).
    #[cfg(test)]
    pub fn named(name: &str) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            scopes: 0,
            bucket: None,
        })
    }

    pub fn may(&self, scope: Scope) -> bool {
        self.scopes & (scope.bit() | Scope::Admin.bit()) != 0
    }
}

/// What a request needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone (health).
    Open,
    /// Any valid credential.
    Authenticated,
    Scope(Scope),
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No credential, or one that matches nothing (the message never says which).
    Unauthenticated,
    /// A valid caller without the scope.
    PermissionDenied { caller: String, scope: Scope },
    /// Over the caller's request rate; retry after this long.
    RateLimited { retry_after: Duration },
}

impl Denied {
    pub fn to_status(&self) -> tonic::Status {
        match self {
            Self::Unauthenticated => tonic::Status::unauthenticated(
                "a valid `authorization: Bearer <token>` or client certificate is required",
            ),
            Self::PermissionDenied { caller, scope } => tonic::Status::permission_denied(format!(
                "`{caller}` lacks the `{}` scope this call needs",
                scope.name()
            )),
            Self::RateLimited { retry_after } => {
                use tonic_types::{ErrorDetails, StatusExt};
                tonic::Status::with_error_details(
                    tonic::Code::ResourceExhausted,
                    format!(
                        "request rate over this caller's limit; retry in {} ms",
                        retry_after.as_millis()
                    ),
                    ErrorDetails::with_retry_info(Some(*retry_after)),
                )
            }
        }
    }
}

/// Decides every request. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Authenticator {
    /// (SHA-256 of the token, caller).
    tokens: Vec<([u8; 32], Arc<Principal>)>,
    clients: Vec<(String, Arc<Principal>)>,
    reflection: Reflection,
    /// Everyone, when nothing is configured.
    anonymous: Arc<Principal>,
    clock: Arc<dyn Clock>,
}

impl Authenticator {
    /// Builds from the config, reading token files and variables now. `env` looks up a
    /// variable (the process environment in the binary).
    pub fn new(
        config: &AuthConfig,
        clock: Arc<dyn Clock>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, AuthConfigError> {
        let now = clock.now_ms();
        let rate = |key: &str, own: Option<f64>| -> Result<_, AuthConfigError> {
            let r = own.unwrap_or(config.rate_limit_per_s);
            if !(r.is_finite() && (0.0..=1e9).contains(&r)) {
                return Err((key.into(), format!("{r} is not within 0..=1e9")));
            }
            Ok((r > 0.0).then(|| {
                Mutex::new(TokenBucket::new(
                    r,
                    config.rate_limit_burst.max(r.min(1e6)),
                    now,
                ))
            }))
        };
        let scopes = |key: &str, list: &[Scope]| -> Result<u8, AuthConfigError> {
            if list.is_empty() {
                return Err((
                    key.into(),
                    "needs at least one of enqueue, consume, read, admin".into(),
                ));
            }
            Ok(list.iter().fold(0, |acc, s| acc | s.bit()))
        };
        let burst = config.rate_limit_burst;
        if !(burst.is_finite() && (1.0..=1e9).contains(&burst)) {
            return Err((
                "auth.rate_limit_burst".into(),
                format!("{burst} is not within 1..=1e9"),
            ));
        }
        let mut tokens = Vec::with_capacity(config.tokens.len());
        for (i, t) in config.tokens.iter().enumerate() {
            let key = format!("auth.tokens[{i}]");
            if t.name.is_empty() {
                return Err((format!("{key}.name"), "must not be empty".into()));
            }
            let hash = match (&t.sha256, &t.file, &t.env) {
                (Some(hex), None, None) => hookd_core::names::parse_sha256(hex)
                    .ok_or_else(|| (format!("{key}.sha256"), "is not 64 hex digits".into()))?,
                (None, Some(path), None) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        (
                            format!("{key}.file"),
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?;
                    token_hash(nonempty(text.trim(), &format!("{key}.file"))?)
                }
                (None, None, Some(var)) => {
                    let value = env(var).ok_or_else(|| {
                        (
                            format!("{key}.env"),
                            format!("the environment variable {var} is not set"),
                        )
                    })?;
                    token_hash(nonempty(value.trim(), &format!("{key}.env"))?)
                }
                _ => {
                    return Err((
                        key,
                        "give exactly one of `sha256`, `file` and `env` (a token is never written in clear in the config)".into(),
                    ));
                }
            };
            if tokens.iter().any(|(h, _)| *h == hash) {
                return Err((key, "the same token is configured twice".into()));
            }
            tokens.push((
                hash,
                Arc::new(Principal {
                    name: t.name.clone(),
                    scopes: scopes(&format!("{key}.scopes"), &t.scopes)?,
                    bucket: rate(&format!("{key}.rate_limit_per_s"), t.rate_limit_per_s)?,
                }),
            ));
        }
        let mut clients = Vec::with_capacity(config.clients.len());
        for (i, c) in config.clients.iter().enumerate() {
            let key = format!("auth.clients[{i}]");
            if c.name.is_empty() {
                return Err((format!("{key}.name"), "must not be empty".into()));
            }
            clients.push((
                c.name.to_ascii_lowercase(),
                Arc::new(Principal {
                    name: c.name.clone(),
                    scopes: scopes(&format!("{key}.scopes"), &c.scopes)?,
                    bucket: rate(&format!("{key}.rate_limit_per_s"), c.rate_limit_per_s)?,
                }),
            ));
        }
        Ok(Self {
            tokens,
            clients,
            reflection: config.reflection,
            anonymous: Arc::new(Principal {
                name: "anonymous".into(),
                scopes: Scope::Admin.bit(),
                bucket: None,
            }),
            clock,
        })
    }

    /// Whether any credential is configured (otherwise every request is let in).
    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty() || !self.clients.is_empty()
    }

    pub fn reflection(&self) -> Reflection {
        self.reflection
    }

    /// Decides a request that needs `access`, from its `authorization` header and the
    /// identity of the connection's client certificate.
    pub fn check(
        &self,
        access: Access,
        authorization: Option<&[u8]>,
        peer: Option<&PeerIdentity>,
    ) -> Result<Arc<Principal>, Denied> {
        if access == Access::Open || !self.enabled() {
            return Ok(self.anonymous.clone());
        }
        let caller = self
            .by_token(authorization)
            .or_else(|| self.by_certificate(peer))
            .ok_or(Denied::Unauthenticated)?;
        if let Access::Scope(scope) = access
            && !caller.may(scope)
        {
            return Err(Denied::PermissionDenied {
                caller: caller.name.clone(),
                scope,
            });
        }
        if let Some(bucket) = &caller.bucket {
            let now = self.clock.now_ms();
            let mut bucket = bucket.lock().unwrap_or_else(|p| p.into_inner());
            if !bucket.try_take(now) {
                let next = bucket.next_token_ms(now);
                return Err(Denied::RateLimited {
                    retry_after: Duration::from_millis(next.saturating_sub(now).max(1)),
                });
            }
        }
        Ok(caller)
    }

    /// [`Authenticator::check`] with the credentials a request carries: its
    /// `authorization` header, and its connection's verified client certificate
    /// ([`crate::listen::ConnInfo`]).
    pub fn check_request(
        &self,
        access: Access,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
    ) -> Result<Arc<Principal>, Denied> {
        let peer = extensions
            .get::<crate::listen::ConnInfo>()
            .and_then(|c| c.peer.as_deref());
        let authorization = headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        self.check(access, authorization, peer)
    }

    fn by_token(&self, authorization: Option<&[u8]>) -> Option<Arc<Principal>> {
        let value = authorization?;
        let token = strip_bearer(value)?;
        let presented = token_hash(std::str::from_utf8(token).ok()?);
        // Every configured hash is compared, in constant time, whatever matched.
        let mut found = None;
        for (hash, caller) in &self.tokens {
            if bool::from(hash.ct_eq(&presented)) {
                found = Some(caller);
            }
        }
        found.cloned()
    }

    fn by_certificate(&self, peer: Option<&PeerIdentity>) -> Option<Arc<Principal>> {
        let peer = peer?;
        self.clients.iter().find_map(|(name, caller)| {
            peer.dns_names
                .iter()
                .any(|n| n.eq_ignore_ascii_case(name))
                .then(|| caller.clone())
        })
    }
}

fn nonempty<'a>(token: &'a str, key: &str) -> Result<&'a str, AuthConfigError> {
    if token.len() < 16 {
        return Err((
            key.into(),
            "the token is shorter than 16 characters (use `hookd token new`)".into(),
        ));
    }
    Ok(token)
}

/// `Bearer <token>` (scheme case-insensitive, as RFC 6750 allows).
pub fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// The SHA-256 a config holds for a token.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A new random token (32 bytes, URL-safe base64 with a `hookd_` prefix).
pub fn new_token() -> String {
    format!("hookd_{}", random_token())
}

/// 32 random bytes, URL-safe base64: a bearer token's body, a console session id, a CSRF
/// token.
pub fn random_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// What a gRPC method needs. Unknown paths need a credential (they then get UNIMPLEMENTED).
pub fn grpc_access(path: &str, reflection: Reflection) -> Access {
    if path.starts_with(HEALTH_PREFIX) {
        return Access::Open;
    }
    if path.starts_with("/grpc.reflection.") {
        return match reflection {
            Reflection::Open => Access::Open,
            Reflection::Authenticated | Reflection::Off => Access::Authenticated,
        };
    }
    let Some(method) = path.strip_prefix("/hookd.v1.Hookd/") else {
        return Access::Authenticated;
    };
    // Any method not in the table (one added later, until it is listed) needs admin.
    Access::Scope(
        RPC_SCOPES
            .iter()
            .find(|(m, _)| *m == method)
            .map_or(Scope::Admin, |(_, scope)| *scope),
    )
}

/// What an admin HTTP path needs.
pub fn http_access(path: &str) -> Access {
    match path {
        "/healthz" => Access::Open,
        "/metrics" => Access::Scope(Scope::Read),
        // The console checks its own sessions (and the admin scope): see `console`.
        p if p == "/ui" || p.starts_with("/ui/") => Access::Open,
        _ => Access::Authenticated,
    }
}

/// Every RPC and the scope it needs: what [`grpc_access`] answers from (a test checks
/// that every `rpc` of the .proto is here).
pub const RPC_SCOPES: &[(&str, Scope)] = &[
    ("Enqueue", Scope::Enqueue),
    ("EnqueueBatch", Scope::Enqueue),
    ("Receive", Scope::Consume),
    ("Ack", Scope::Consume),
    ("Nack", Scope::Consume),
    ("Stats", Scope::Read),
    ("GetMessage", Scope::Read),
    ("GetEndpoint", Scope::Read),
    ("ListEndpoints", Scope::Read),
    ("ListDeadLetters", Scope::Read),
    ("AnalyzeDeadLetters", Scope::Read),
    ("Watch", Scope::Read),
    ("PutEndpoint", Scope::Admin),
    ("DeleteEndpoint", Scope::Admin),
    ("ReplayDeadLetters", Scope::Admin),
    ("PurgeDeadLetters", Scope::Admin),
    ("PauseEndpoint", Scope::Admin),
    ("ResumeEndpoint", Scope::Admin),
    ("PutSource", Scope::Admin),
    ("GetSource", Scope::Admin),
    ("ListSources", Scope::Admin),
    ("DeleteSource", Scope::Admin),
];

/// The path prefix of the gRPC health service's calls (their own budget).
const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";

/// The tower layer in front of every gRPC call: [`Authenticator::check`] (the caller, a
/// [`Principal`], goes into the request's extensions), and a deadline for the request's
/// body, so a client that opens streams and never finishes their messages cannot make
/// hookd hold them.
#[derive(Debug, Clone)]
pub struct GrpcAuthLayer {
    pub auth: Arc<Authenticator>,
    pub body_timeout: Duration,
    pub budget: Arc<crate::listen::RequestBudget>,
    /// gRPC health calls' own budget.
    pub health: Arc<crate::listen::RequestBudget>,
}

impl<S> tower_layer::Layer<S> for GrpcAuthLayer {
    type Service = GrpcAuth<S>;
    fn layer(&self, inner: S) -> Self::Service {
        GrpcAuth {
            auth: self.auth.clone(),
            body_timeout: self.body_timeout,
            budget: self.budget.clone(),
            health: self.health.clone(),
            inner,
        }
    }
}

#[derive(Debug, Clone)]
pub struct GrpcAuth<S> {
    auth: Arc<Authenticator>,
    body_timeout: Duration,
    budget: Arc<crate::listen::RequestBudget>,
    health: Arc<crate::listen::RequestBudget>,
    inner: S,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B> tower_service::Service<http::Request<B>> for GrpcAuth<S>
where
    S: tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let access = grpc_access(request.uri().path(), self.auth.reflection);
        match self
            .auth
            .check_request(access, request.headers(), request.extensions())
        {
            Ok(caller) => {
                use crate::listen::Sharer;
                // Each connection and each caller holds at most a share of the budget.
                let mut sharers = Vec::with_capacity(2);
                // An accepted call keeps its connection open (see `listen::Activity`).
                let conn = request.extensions().get::<crate::listen::ConnInfo>();
                let active = conn.map(|conn| conn.activity.begin());
                if let Some(conn) = conn {
                    sharers.push(Sharer::Connection(conn.remote));
                    sharers.push(if Arc::ptr_eq(&caller, &self.auth.anonymous) {
                        Sharer::Peer(conn.remote.ip())
                    } else {
                        Sharer::Caller(Arc::from(caller.name.as_str()))
                    });
                }
                let budget = if request.uri().path().starts_with(HEALTH_PREFIX) {
                    &self.health
                } else {
                    &self.budget
                };
                let slot = match budget.try_request(sharers) {
                    Ok(slot) => slot,
                    Err(why) => {
                        let status = tonic::Status::resource_exhausted(why);
                        return Box::pin(std::future::ready(Ok(status.into_http())));
                    }
                };
                request.extensions_mut().insert(caller);
                let timeout = self.body_timeout;
                let charge = slot.charge();
                let request = request.map(|body| {
                    tonic::body::Body::new(crate::listen::DeadlineBody::new(body, timeout, charge))
                });
                // The clone is not ready; the one that was polled ready serves this call.
                let clone = self.inner.clone();
                let mut ready = std::mem::replace(&mut self.inner, clone);
                let call = ready.call(request);
                Box::pin(async move {
                    // A streaming answer holds its places until its last message.
                    let answer = call.await;
                    answer.map(|r| {
                        r.map(|body| {
                            tonic::body::Body::new(crate::listen::HoldBody::new(
                                body,
                                (slot, active),
                            ))
                        })
                    })
                })
            }
            Err(denied) => {
                let response = denied.to_status().into_http();
                Box::pin(std::future::ready(Ok(response)))
            }
        }
    }
}

/// The same check for the admin HTTP listener (axum middleware): 401 with
/// `WWW-Authenticate: Bearer`, 403, or 429 with `Retry-After`.
pub async fn http_middleware(
    axum::extract::State(auth): axum::extract::State<Arc<Authenticator>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let access = http_access(request.uri().path());
    match auth.check_request(access, request.headers(), request.extensions()) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(Denied::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a valid `Authorization: Bearer <token>` is required\n",
        )
            .into_response(),
        Err(Denied::PermissionDenied { caller, scope }) => (
            StatusCode::FORBIDDEN,
            format!("`{caller}` lacks the `{}` scope\n", scope.name()),
        )
            .into_response(),
        Err(Denied::RateLimited { retry_after }) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(
                header::RETRY_AFTER,
                retry_after.as_secs().max(1).to_string(),
            )],
            "request rate over this caller's limit\n",
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookd_core::clock::ManualClock;

    fn config(toml: &str) -> AuthConfig {
        #[derive(Deserialize)]
        struct Wrap {
            auth: AuthConfig,
        }
        toml::from_str::<Wrap>(toml).unwrap().auth
    }

    const AGENT: &str = "agent-token-0123456789";
    const OPS: &str = "ops-token-0123456789abc";

    fn two_tokens(clock: Arc<ManualClock>) -> Authenticator {
        let c = config(&format!(
            "[auth]\nrate_limit_per_s = 0\n\
             [[auth.tokens]]\nname = \"agent\"\nsha256 = \"{}\"\nscopes = [\"enqueue\"]\nrate_limit_per_s = 2\n\
             [[auth.tokens]]\nname = \"ops\"\nenv = \"OPS_TOKEN\"\nscopes = [\"admin\"]\n\
             [[auth.clients]]\nname = \"worker.internal\"\nscopes = [\"consume\"]\n",
            hookd_core::names::hex(&token_hash(AGENT))
        ));
        Authenticator::new(&c, clock, &|v| (v == "OPS_TOKEN").then(|| OPS.to_string())).unwrap()
    }

    fn bearer(t: &str) -> Vec<u8> {
        format!("Bearer {t}").into_bytes()
    }

    #[test]
    fn tokens_scopes_and_certificates() {
        let clock = Arc::new(ManualClock::new(1_000));
        let auth = two_tokens(clock.clone());
        let enqueue = grpc_access("/hookd.v1.Hookd/Enqueue", Reflection::Off);
        let put = grpc_access("/hookd.v1.Hookd/PutEndpoint", Reflection::Off);
        let receive = grpc_access("/hookd.v1.Hookd/Receive", Reflection::Off);
        assert_eq!(
            auth.check(enqueue, Some(&bearer(AGENT)), None)
                .unwrap()
                .name,
            "agent"
        );
        // Case-insensitive scheme, surrounding blanks.
        assert!(
            auth.check(enqueue, Some(format!("bearer  {OPS} ").as_bytes()), None)
                .is_ok()
        );
        assert_eq!(
            auth.check(put, Some(&bearer(AGENT)), None).unwrap_err(),
            Denied::PermissionDenied {
                caller: "agent".into(),
                scope: Scope::Admin
            }
        );
        assert!(auth.check(put, Some(&bearer(OPS)), None).is_ok());
        for bad in [
            None,
            Some(b"Bearer wrong-token-000000".as_slice()),
            Some(b"Basic YWdlbnQ6eA==".as_slice()),
            Some(b"Bearer ".as_slice()),
            Some(AGENT.as_bytes()),
            Some(b"Bearer \xff\xfe".as_slice()),
        ] {
            assert_eq!(
                auth.check(enqueue, bad, None).unwrap_err(),
                Denied::Unauthenticated
            );
        }
        let worker = PeerIdentity {
            dns_names: vec!["Worker.Internal".into()],
        };
        assert_eq!(
            auth.check(receive, None, Some(&worker)).unwrap().name,
            "worker.internal"
        );
        assert!(matches!(
            auth.check(enqueue, None, Some(&worker)),
            Err(Denied::PermissionDenied { .. })
        ));
        let stranger = PeerIdentity {
            dns_names: vec!["other.internal".into()],
        };
        assert_eq!(
            auth.check(receive, None, Some(&stranger)).unwrap_err(),
            Denied::Unauthenticated
        );
        // Health is open; reflection follows the setting.
        let health = grpc_access("/grpc.health.v1.Health/Check", Reflection::Off);
        assert!(auth.check(health, None, None).is_ok());
        assert_eq!(
            grpc_access(
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                Reflection::Open
            ),
            Access::Open
        );
        assert_eq!(
            grpc_access(
                "/grpc.reflection.v1alpha.ServerReflection/X",
                Reflection::Authenticated
            ),
            Access::Authenticated
        );
    }

    #[test]
    fn rate_limit_answers_with_the_wait() {
        let clock = Arc::new(ManualClock::new(1_000));
        let auth = two_tokens(clock.clone());
        let enqueue = Access::Scope(Scope::Enqueue);
        // 2/s with the default burst (1000 allowed at once) is drained first.
        let mut refused = None;
        for _ in 0..1_001 {
            if let Err(e) = auth.check(enqueue, Some(&bearer(AGENT)), None) {
                refused = Some(e);
                break;
            }
        }
        assert_eq!(
            refused,
            Some(Denied::RateLimited {
                retry_after: Duration::from_millis(500)
            })
        );
        clock.advance(500);
        assert!(auth.check(enqueue, Some(&bearer(AGENT)), None).is_ok());
        // The ops token has no limit.
        for _ in 0..5_000 {
            assert!(auth.check(enqueue, Some(&bearer(OPS)), None).is_ok());
        }
        let status = Denied::RateLimited {
            retry_after: Duration::from_millis(1500),
        }
        .to_status();
        use tonic_types::StatusExt;
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert_eq!(
            status.get_details_retry_info().unwrap().retry_delay,
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn nothing_configured_lets_everyone_in() {
        let auth = Authenticator::new(
            &AuthConfig::default(),
            Arc::new(ManualClock::new(0)),
            &|_| None,
        )
        .unwrap();
        assert!(!auth.enabled());
        assert!(auth.check(Access::Scope(Scope::Admin), None, None).is_ok());
    }

    #[test]
    fn config_errors_name_the_key() {
        let err = |toml: &str| {
            Authenticator::new(&config(toml), Arc::new(ManualClock::new(0)), &|_| None).unwrap_err()
        };
        let (key, msg) = err("[[auth.tokens]]\nname = \"a\"\nscopes = [\"read\"]\n");
        assert_eq!(key, "auth.tokens[0]");
        assert!(msg.contains("exactly one"), "{msg}");
        let (key, _) = err("[[auth.tokens]]\nname = \"a\"\nsha256 = \"zz\"\nscopes = [\"read\"]\n");
        assert_eq!(key, "auth.tokens[0].sha256");
        let (key, msg) =
            err("[[auth.tokens]]\nname = \"a\"\nenv = \"NOPE\"\nscopes = [\"read\"]\n");
        assert_eq!(key, "auth.tokens[0].env");
        assert!(msg.contains("NOPE"), "{msg}");
        let (key, _) = err(&format!(
            "[[auth.tokens]]\nname = \"a\"\nsha256 = \"{}\"\nscopes = []\n",
            "0".repeat(64)
        ));
        assert_eq!(key, "auth.tokens[0].scopes");
        let dir = tempfile::tempdir().unwrap();
        let (key, msg) = err(&format!(
            "[[auth.tokens]]\nname = \"a\"\nfile = \"{}\"\nscopes = [\"read\"]\n",
            dir.path().join("missing").display()
        ));
        assert_eq!(key, "auth.tokens[0].file");
        assert!(msg.contains("cannot read"), "{msg}");
        assert!(
            toml::from_str::<AuthConfig>("tokens = [{ name = \"a\", scopes = [\"root\"] }]")
                .is_err()
        );
    }

    #[test]
    fn every_hookd_rpc_has_its_listed_scope() {
        for (method, scope) in RPC_SCOPES {
            assert_eq!(
                grpc_access(&format!("/hookd.v1.Hookd/{method}"), Reflection::Off),
                Access::Scope(*scope),
                "{method}"
            );
        }
        let proto = include_str!("../../proto/hookd/v1/hookd.proto");
        let rpcs: Vec<&str> = proto
            .lines()
            .filter_map(|l| l.trim().strip_prefix("rpc "))
            .filter_map(|l| l.split('(').next())
            .collect();
        assert_eq!(rpcs.len(), RPC_SCOPES.len(), "a new RPC needs a scope here");
        for rpc in rpcs {
            assert!(RPC_SCOPES.iter().any(|(m, _)| *m == rpc), "{rpc}");
        }
    }
}
