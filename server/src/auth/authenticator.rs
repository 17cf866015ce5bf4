//! [`Authenticator`]: built once from `[auth]` (token files and variables read), it
//! decides every request: the credential (a bearer token compared in constant time with
//! every configured hash, or a client certificate's DNS name), the scope, the caller's
//! request rate.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use subtle::ConstantTimeEq;

use super::config::{AuthConfig, AuthConfigError, Reflection};
use super::tokens::{strip_bearer, token_hash};
use super::{Access, Denied, Principal, Scope};
use crate::listen::PeerIdentity;
use hookd_core::clock::Clock;
use hookd_core::limiter::TokenBucket;

/// Decides every request. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Authenticator {
    /// (SHA-256 of the token, caller).
    tokens: Vec<([u8; 32], Arc<Principal>)>,
    clients: Vec<(String, Arc<Principal>)>,
    pub(super) reflection: Reflection,
    /// Everyone, when nothing is configured.
    pub(super) anonymous: Arc<Principal>,
    clock: Arc<dyn Clock>,
    /// The tenants' tokens, from the engine's directory (see [`Authenticator::attach`]).
    tenants: std::sync::RwLock<Option<hookd_engine::SharedDirectory>>,
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
                    tenant: None,
                    destinations: Vec::new(),
                    scopes: scopes(&format!("{key}.scopes"), &t.scopes)?,
                    bucket: rate(&format!("{key}.rate_limit_per_s"), t.rate_limit_per_s)?,
                    anonymous: false,
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
                    tenant: None,
                    destinations: Vec::new(),
                    scopes: scopes(&format!("{key}.scopes"), &c.scopes)?,
                    bucket: rate(&format!("{key}.rate_limit_per_s"), c.rate_limit_per_s)?,
                    anonymous: false,
                }),
            ));
        }
        Ok(Self {
            tokens,
            clients,
            reflection: config.reflection,
            anonymous: Arc::new(Principal {
                name: "anonymous".into(),
                tenant: None,
                destinations: Vec::new(),
                scopes: Scope::Admin.bit(),
                bucket: None,
                anonymous: true,
            }),
            clock,
            tenants: std::sync::RwLock::new(None),
        })
    }

    /// Where the tenants' tokens are: the running engine's directory. A token revoked is
    /// gone from it once its revocation is durable, so the next call with it is refused.
    pub fn attach(&self, directory: hookd_engine::SharedDirectory) {
        *self.tenants.write().unwrap_or_else(|p| p.into_inner()) = Some(directory);
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
    pub(crate) fn check_request(
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
        if let Some(found) = found {
            return Some(found.clone());
        }
        // A tenant's token: looked up by its hash (what a caller sends cannot steer which
        // stored hash is compared: the lookup key is the SHA-256 of a secret).
        let tenants = self.tenants.read().unwrap_or_else(|p| p.into_inner());
        let directory = tenants.as_ref()?;
        let directory = directory.read().unwrap_or_else(|p| p.into_inner()).clone();
        let grant = directory.token(&presented)?;
        Some(Arc::new(Principal::of_grant(grant)))
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
