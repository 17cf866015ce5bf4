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
//!
//! `config` (`[auth]`), `authenticator` (the decision), `tokens`, `scopes` (what each
//! method and path needs), `layer` (the gRPC tower layer and the HTTP middleware).

mod authenticator;
mod config;
mod layer;
mod scopes;
mod tokens;

pub use authenticator::Authenticator;
pub use config::{AuthConfig, ClientConfig, Reflection, TokenConfig};
pub(crate) use layer::{Admitted, GrpcAuth, GrpcAuthLayer, admit, http_middleware};
pub(crate) use tokens::{new_token, random_token};
pub use tokens::{strip_bearer, token_hash};

use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;

use hookd_core::limiter::TokenBucket;
use hookd_core::scope::TenantId;

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

    /// The scope `name` names (`enqueue`, `consume`, `read`, `admin`).
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Enqueue, Self::Consume, Self::Read, Self::Admin]
            .into_iter()
            .find(|s| s.name() == name)
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

/// An authenticated caller.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    /// A tenant's token acts on its tenant only; `None`: an operator (the config file's
    /// tokens and clients), who acts on tenant `default` unless a call names another.
    pub tenant: Option<TenantId>,
    /// The destinations a tenant's token may use (`endpoint:NAME`, `queue:NAME`); empty:
    /// every one of its tenant's.
    pub destinations: Vec<String>,
    scopes: u8,
    bucket: Option<Mutex<TokenBucket>>,
    /// Everyone, when no credential is configured: shares are then per address.
    anonymous: bool,
}

impl Principal {
    /// A caller with no scopes and no rate limit (tests).
    #[cfg(test)]
    pub fn named(name: &str) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            name: name.into(),
            tenant: None,
            destinations: Vec::new(),
            scopes: 0,
            bucket: None,
            anonymous: false,
        })
    }

    /// The caller of a hookd with no credential configured (everyone).
    pub fn is_anonymous(&self) -> bool {
        self.anonymous
    }

    pub fn may(&self, scope: Scope) -> bool {
        self.scopes & (scope.bit() | Scope::Admin.bit()) != 0
    }

    /// The caller a tenant's token stands for.
    pub(crate) fn of_grant(grant: &hookd_engine::Grant) -> Self {
        let scopes = grant
            .scopes
            .iter()
            .filter_map(|s| Scope::parse(s))
            .fold(0, |acc, s| acc | s.bit());
        Self {
            name: grant.name.clone(),
            tenant: Some(grant.tenant),
            destinations: grant.destinations.clone(),
            scopes,
            bucket: None,
            anonymous: false,
        }
    }

    /// The caller a portal link stands for: its tenant, scopes and destinations, named
    /// `portal:` and the link's subject (or id); no rate limit of its own.
    pub(crate) fn of_portal(
        name: String,
        tenant: TenantId,
        scopes: &[String],
        destinations: Vec<String>,
    ) -> Self {
        Self {
            name,
            tenant: Some(tenant),
            destinations,
            scopes: scopes
                .iter()
                .filter_map(|s| Scope::parse(s))
                .fold(0, |acc, s| acc | s.bit()),
            bucket: None,
            anonymous: false,
        }
    }

    /// Whether it may use destination `key` (a key as its tenant reads it).
    pub fn may_use(&self, key: &str) -> bool {
        self.destinations.is_empty() || self.destinations.iter().any(|d| d == key)
    }

    /// Whether it is limited to named destinations.
    pub fn limited(&self) -> bool {
        !self.destinations.is_empty()
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
    pub(crate) fn to_status(&self) -> tonic::Status {
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

#[cfg(test)]
mod tests {
    use super::scopes::{RPC_SCOPES, grpc_access};
    use super::*;
    use crate::listen::PeerIdentity;
    use hookd_core::clock::ManualClock;
    use std::sync::Arc;

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
        let proto = include_str!("../../../proto/hookd/v1/hookd.proto");
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

    /// The README's scope table says what `RPC_SCOPES` says (issue #49, 7: it had left
    /// the subscriptions and event types out).
    #[test]
    fn the_readmes_scope_table_is_this_one() {
        let readme = include_str!("../../../README.md");
        let row = |scope: &str| -> Vec<String> {
            let line = readme
                .lines()
                .find(|l| l.starts_with(&format!("| `{scope}` |")))
                .unwrap_or_else(|| panic!("no README row for {scope}"));
            // "`GetEndpoint` with `reveal_secrets`" in the admin row is a flag's scope.
            line.replace("`GetEndpoint` with `reveal_secrets`", "")
                .split('`')
                .skip(3)
                .step_by(2)
                .map(str::to_owned)
                .collect()
        };
        for scope in [Scope::Enqueue, Scope::Consume, Scope::Read, Scope::Admin] {
            let listed = row(scope.name());
            for (method, needs) in RPC_SCOPES {
                assert_eq!(
                    listed.iter().any(|m| m == method),
                    *needs == scope,
                    "README: `{method}` in the `{}` row",
                    scope.name()
                );
            }
        }
    }
}
