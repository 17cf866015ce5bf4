//! An ingest source: its definition ([`SourceSpec`], the same in the config file, over
//! gRPC and on disk) and its compiled form ([`Source`]), which the receiving handler uses.

use http::HeaderName;

use super::redact::Redactor;
use super::verify::{Scheme, Verifier};
use hookd_core::destination::Destination;
use hookd_core::scope::TenantId;
use hookd_core::source::{SchemeName, SourceSpec};

/// Longest JSON Schema text a source may carry.
pub(crate) const MAX_SCHEMA_BYTES: usize = 256 << 10;
/// Most secrets, tokens or basic users of one source.
pub(crate) const MAX_CREDENTIALS: usize = 16;

/// Where a value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Locator {
    Header(HeaderName),
    /// A JSON pointer into the body.
    Json(String),
    /// The SHA-256 of the raw body, in hex (`dedup_id` only).
    BodySha256,
}

impl Locator {
    pub fn parse(text: &str, key: &str) -> Result<Self, String> {
        if let Some(name) = text.strip_prefix("header:") {
            return HeaderName::from_bytes(name.trim().as_bytes())
                .map(Locator::Header)
                .map_err(|_| format!("{key}: {name:?} is not a header name"));
        }
        if let Some(pointer) = text.strip_prefix("json:") {
            super::redact::parse_pointer(pointer).map_err(|e| format!("{key}: {e}"))?;
            return Ok(Locator::Json(pointer.to_owned()));
        }
        if text == "body:sha256" {
            if key != "dedup_id" {
                return Err(format!("{key}: `body:sha256` is for dedup_id only"));
            }
            return Ok(Locator::BodySha256);
        }
        Err(format!(
            "{key}: {text:?} must be `header:<name>`, `json:<pointer>`{}",
            if key == "dedup_id" {
                " or `body:sha256`"
            } else {
                ""
            }
        ))
    }
}

/// Credentials of a `none` source, as SHA-256 digests.
#[derive(Debug, Clone, Default)]
pub struct SourceAuth {
    pub bearer: Vec<[u8; 32]>,
    /// (user, SHA-256 of the password).
    pub basic: Vec<(String, [u8; 32])>,
}

/// A source ready to receive.
#[derive(Debug)]
pub struct Source {
    /// Whose it is: its route's destination and topics are this tenant's.
    pub tenant: TenantId,
    /// What the failed-authentication strikes count it by: its name (`default`'s), or
    /// the tenant's number and its name.
    pub key: String,
    /// Where providers post: `/in/{name}` (`default`'s), `/in/{tenant}/{name}`.
    pub path: String,
    /// As given (secrets as stored: sealed when keys are configured).
    pub spec: SourceSpec,
    /// Defined in the config file (read-only over gRPC).
    pub from_config: bool,
    /// `(prefix, fingerprint)` of each secret in clear.
    pub secret_summaries: Vec<(String, String)>,
    pub(crate) verifier: Option<Verifier>,
    pub auth: SourceAuth,
    pub schema: Option<jsonschema::Validator>,
    pub event_type: Option<Locator>,
    /// The event type's locator is the scheme's default, not configured: best effort (a
    /// body that is not JSON then has no event type rather than a 400).
    pub(crate) event_type_by_default: bool,
    pub dedup: Option<Locator>,
    pub route: Route,
    /// Provider headers stored with the message.
    pub(crate) keep_headers: Vec<HeaderName>,
    pub redactor: Option<Redactor>,
    /// Media types in lower case (`*/*`: any).
    pub content_types: Vec<String>,
    pub max_body_bytes: usize,
}

/// Where a source's events go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// One queue or endpoint.
    To(Destination),
    /// Published to a topic: this template, where [`EVENT_TYPE`] stands for the event's
    /// type.
    Publish(String),
}

/// What a topic template's event type is written as.
pub const EVENT_TYPE: &str = "{event_type}";

impl Route {
    /// As the console and logs show it: the destination's key, or `topic:TEMPLATE`.
    pub fn describe(&self) -> String {
        match self {
            Self::To(d) => d.local_key(),
            Self::Publish(t) => format!("topic:{t}"),
        }
    }

    /// The endpoint's name, if the events go to one.
    pub fn endpoint(&self) -> Option<&str> {
        match self {
            Self::To(d) => d.endpoint_name(),
            Self::Publish(_) => None,
        }
    }

    /// The topic an event of type `event_type` is published to (`None`: not a publish).
    /// An error when the template needs a type the event lacks, or makes no topic.
    pub fn topic(&self, event_type: &str) -> Option<Result<String, String>> {
        let Self::Publish(template) = self else {
            return None;
        };
        if template.contains(EVENT_TYPE) && event_type.is_empty() {
            return Some(Err(format!(
                "event type: none found, and this source publishes to {template:?}"
            )));
        }
        let topic = template.replace(EVENT_TYPE, event_type);
        Some(hookd_core::topics::check_topic(&topic, "topic").map(|()| topic))
    }
}

/// What [`Source::compile`] needs besides the spec.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `max_payload_bytes`: no source takes more.
    pub max_payload_bytes: usize,
    /// `idempotency_retention_secs`: a delivery id deduplicates this long, so no source
    /// may accept a resend (`tolerance_secs`) for longer.
    pub dedup_retention_secs: u64,
}

impl Source {
    /// Its `source` label in `/metrics`: `default`'s sources by name, every other
    /// tenant's as `_tenant` (a label per tenant's source would grow without bound).
    pub fn label(&self) -> &str {
        if self.tenant.is_default() {
            &self.spec.name
        } else {
            "_tenant"
        }
    }

    /// This source, as tenant `tenant`'s: its route goes to that tenant's destination or
    /// topics.
    pub fn of(mut self, tenant: TenantId, tenant_name: &str) -> Self {
        self.tenant = tenant;
        if !tenant.is_default() {
            self.key = format!("{}/{}", tenant.0, self.spec.name);
            self.path = format!("/in/{tenant_name}/{}", self.spec.name);
        }
        if let Route::To(d) = &mut self.route {
            d.tenant = tenant;
        }
        self
    }

    /// Checks and compiles a spec whose secrets are given in clear in `secrets` and whose
    /// schema text is `schema` (files and variables read by the caller). Errors name the
    /// key (`json_schema: ...`).
    pub fn compile(
        spec: SourceSpec,
        secrets: Vec<String>,
        schema: Option<String>,
        from_config: bool,
        limits: Limits,
    ) -> Result<Self, String> {
        hookd_core::names::check_name(&spec.name, "name")?;
        crate::catalog::check_search_keys(&spec.search_keys)
            .map_err(|why| format!("search_keys{why}"))?;
        if secrets.len() > MAX_CREDENTIALS
            || spec.bearer_sha256.len() > MAX_CREDENTIALS
            || spec.basic.len() > MAX_CREDENTIALS
        {
            return Err(format!(
                "secrets, bearer_sha256 and basic take at most {MAX_CREDENTIALS} entries each"
            ));
        }
        let scheme = match (spec.scheme, &spec.hmac) {
            (SchemeName::None, _) => {
                if !secrets.is_empty() {
                    return Err("secrets: scheme \"none\" verifies no signature; give bearer_sha256 or basic instead".into());
                }
                None
            }
            (SchemeName::Hmac, Some(h)) => Some(Scheme::Hmac(h.clone())),
            (SchemeName::Hmac, None) => {
                return Err(
                    "hmac: scheme \"hmac\" needs its settings (hmac.header at least)".into(),
                );
            }
            (other, Some(_)) => {
                return Err(format!(
                    "hmac: settings are for scheme \"hmac\", not {:?}",
                    other.as_str()
                ));
            }
            (SchemeName::StandardWebhooks, None) => Some(Scheme::StandardWebhooks),
            (SchemeName::Stripe, None) => Some(Scheme::Stripe),
            (SchemeName::Github, None) => Some(Scheme::Github),
            (SchemeName::Shopify, None) => Some(Scheme::Shopify),
        };
        // The verifier's errors name its own fields: `header` is `hmac.header` here.
        let verifier = scheme
            .map(|scheme| {
                Verifier::new(scheme, &secrets, spec.tolerance_secs).map_err(|e| {
                    if e.starts_with("header:") {
                        format!("hmac.{e}")
                    } else {
                        format!("secrets: {e}")
                    }
                })
            })
            .transpose()?;
        let auth = source_auth(&spec)?;
        if spec.scheme == SchemeName::None && auth.bearer.is_empty() && auth.basic.is_empty() {
            return Err(
                "bearer_sha256: scheme \"none\" needs a bearer token or basic credentials (`hookd token new` makes a token and its hash)"
                    .into(),
            );
        }
        if spec.scheme != SchemeName::None && !(auth.bearer.is_empty() && auth.basic.is_empty()) {
            return Err("bearer_sha256: only scheme \"none\" takes tokens; the others are authenticated by their signature".into());
        }
        if spec.tolerance_secs == 0 || spec.tolerance_secs > 24 * 3600 {
            return Err(format!(
                "tolerance_secs: {} is outside 1..=86400",
                spec.tolerance_secs
            ));
        }
        if spec.tolerance_secs > limits.dedup_retention_secs {
            return Err(format!(
                "tolerance_secs: {} is longer than idempotency_retention_secs ({}): a delivery replayed after its dedup key expired but within the tolerance would be stored again",
                spec.tolerance_secs, limits.dedup_retention_secs
            ));
        }
        if spec.max_body_bytes == 0 || spec.max_body_bytes > limits.max_payload_bytes {
            return Err(format!(
                "max_body_bytes: {} is outside 1..={} (max_payload_bytes)",
                spec.max_body_bytes, limits.max_payload_bytes
            ));
        }
        if spec.content_types.is_empty() {
            return Err("content_types: at least one media type (or \"*/*\")".into());
        }
        let mut content_types = Vec::with_capacity(spec.content_types.len());
        for (i, t) in spec.content_types.iter().enumerate() {
            let t = t.trim().to_ascii_lowercase();
            if !t.contains('/') || t.contains(';') || t.len() > 128 {
                return Err(format!(
                    "content_types[{i}]: {t:?} is not a media type (type/subtype, no parameters)"
                ));
            }
            content_types.push(t);
        }
        let schema = match schema {
            None => None,
            Some(text) => {
                if text.len() > MAX_SCHEMA_BYTES {
                    return Err(format!(
                        "json_schema: {} bytes is over the limit of {MAX_SCHEMA_BYTES}",
                        text.len()
                    ));
                }
                let value: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| format!("json_schema: not JSON: {e}"))?;
                let validator = crate::catalog::schema_validator(&value)
                    .map_err(|e| format!("json_schema: not a usable schema: {e}"))?;
                Some(validator)
            }
        };
        let locator = |given: &Option<String>, default: Option<&str>, key: &str| {
            given
                .as_deref()
                .or(default)
                .map(|t| Locator::parse(t, key))
                .transpose()
        };
        let event_type = locator(
            &spec.event_type,
            spec.scheme.default_event_type(),
            "event_type",
        )?;
        let event_type_by_default = spec.event_type.is_none();
        let dedup = locator(&spec.dedup_id, spec.scheme.default_dedup(), "dedup_id")?;
        let route = match (&spec.queue, &spec.endpoint, &spec.topic) {
            (Some(q), None, None) => {
                hookd_core::names::check_name(q, "queue")?;
                Route::To(Destination::queue(TenantId::DEFAULT, q))
            }
            (None, Some(e), None) => {
                hookd_core::names::check_name(e, "endpoint")?;
                Route::To(Destination::endpoint(TenantId::DEFAULT, e))
            }
            (None, None, Some(t)) => {
                // A template is a topic once its placeholder is filled.
                hookd_core::topics::check_topic(&t.replace(EVENT_TYPE, "x"), "topic")?;
                Route::Publish(t.clone())
            }
            _ => {
                return Err("queue: exactly one of queue, endpoint or topic is the route".into());
            }
        };
        let redactor = Redactor::new(&spec.redact)?;
        let mut keep_headers: Vec<HeaderName> = spec
            .scheme
            .signature_headers()
            .iter()
            .map(|h| HeaderName::from_static(h))
            .collect();
        if let Some(h) = &spec.hmac {
            for name in std::iter::once(&h.header).chain(h.timestamp_header.as_ref()) {
                if let Ok(n) = HeaderName::from_bytes(name.as_bytes()) {
                    keep_headers.push(n);
                }
            }
        }
        for l in [&event_type, &dedup].into_iter().flatten() {
            if let Locator::Header(h) = l {
                keep_headers.push(h.clone());
            }
        }
        keep_headers.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        keep_headers.dedup();
        let secret_summaries = secrets
            .iter()
            .map(|s| hookd_core::secrets::summary(s))
            .collect();
        Ok(Self {
            tenant: TenantId::DEFAULT,
            key: spec.name.clone(),
            path: format!("/in/{}", spec.name),
            max_body_bytes: spec.max_body_bytes,
            spec,
            from_config,
            secret_summaries,
            verifier,
            auth,
            schema,
            event_type,
            event_type_by_default,
            dedup,
            route,
            keep_headers,
            redactor,
            content_types,
        })
    }

    /// Whether the body's media type is one the source takes.
    pub fn accepts(&self, content_type: Option<&str>) -> bool {
        if self.content_types.iter().any(|t| t == "*/*") {
            return true;
        }
        let Some(ct) = content_type else {
            return false;
        };
        let essence = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        self.content_types.contains(&essence)
    }

    /// Whether the body must be JSON (a body that is not is refused with 400): a schema,
    /// redaction, or a configured JSON locator needs it.
    pub(crate) fn needs_json(&self) -> bool {
        self.schema.is_some()
            || self.redactor.is_some()
            || (!self.event_type_by_default && matches!(self.event_type, Some(Locator::Json(_))))
            || matches!(self.dedup, Some(Locator::Json(_)))
    }

    /// Whether the body is worth parsing as JSON when it need not be: for the scheme's
    /// default event type (`json:/type`), taken when the body has it.
    pub(crate) fn wants_json(&self) -> bool {
        matches!(self.event_type, Some(Locator::Json(_)))
    }
}

fn source_auth(spec: &SourceSpec) -> Result<SourceAuth, String> {
    let digest = |hex: &str, key: &str| -> Result<[u8; 32], String> {
        hookd_core::names::parse_sha256(hex)
            .ok_or_else(|| format!("{key}: not 64 hex digits (the SHA-256 of the secret)"))
    };
    let mut auth = SourceAuth::default();
    for (i, h) in spec.bearer_sha256.iter().enumerate() {
        auth.bearer.push(digest(h, &format!("bearer_sha256[{i}]"))?);
    }
    for (i, entry) in spec.basic.iter().enumerate() {
        let key = format!("basic[{i}]");
        let (user, hash) = entry
            .split_once(':')
            .ok_or_else(|| format!("{key}: must be `user:<sha256 hex of the password>`"))?;
        if user.is_empty() {
            return Err(format!("{key}: the user must not be empty"));
        }
        auth.basic.push((user.to_owned(), digest(hash, &key)?));
    }
    Ok(auth)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_payload_bytes: 1 << 20,
        dedup_retention_secs: 24 * 3600,
    };

    fn compile(spec: SourceSpec, secrets: &[&str]) -> Result<Source, String> {
        let schema = spec.json_schema.clone();
        Source::compile(
            spec,
            secrets.iter().map(|s| (*s).to_owned()).collect(),
            schema,
            false,
            LIMITS,
        )
    }

    #[test]
    fn defaults_per_scheme() {
        let s = compile(
            SourceSpec::new("gh", SchemeName::Github, "q"),
            &["a-test-secret-of-16+"],
        )
        .unwrap();
        assert_eq!(
            s.dedup,
            Some(Locator::Header(HeaderName::from_static(
                "x-github-delivery"
            )))
        );
        assert_eq!(
            s.event_type,
            Some(Locator::Header(HeaderName::from_static("x-github-event")))
        );
        assert!(s.keep_headers.iter().any(|h| h == "x-hub-signature-256"));
        let s = compile(
            SourceSpec::new("st", SchemeName::Stripe, "q"),
            &["whsec_stripe_test_secret"],
        )
        .unwrap();
        assert_eq!(s.dedup, Some(Locator::Json("/id".into())));
        assert!(s.needs_json());
        // Standard Webhooks: the delivery id is a header and the event type a default
        // JSON lookup, so a body need not be JSON.
        let sw = compile(
            SourceSpec::new("sw", SchemeName::StandardWebhooks, "q"),
            &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap();
        assert!(!sw.needs_json() && sw.wants_json());
        let configured = compile(
            SourceSpec {
                event_type: Some("json:/kind".into()),
                ..SourceSpec::new("sw", SchemeName::StandardWebhooks, "q")
            },
            &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
        )
        .unwrap();
        assert!(configured.needs_json());
        assert!(s.accepts(Some("application/json; charset=utf-8")));
        assert!(!s.accepts(Some("text/plain")));
        assert!(!s.accepts(None));
    }

    #[test]
    fn files_and_variables_are_read_into_secrets_and_schema() {
        let dir = tempfile::tempdir().unwrap();
        let (secret, schema) = (dir.path().join("secret"), dir.path().join("schema.json"));
        std::fs::write(&secret, "from-file\n").unwrap();
        std::fs::write(&schema, "{\"type\": \"object\"}").unwrap();
        let env = |var: &str| (var == "GH").then(|| "from-env".to_owned());
        let mut spec = SourceSpec {
            secrets: vec!["inline".into()],
            secret_env: vec!["GH".into()],
            secret_files: vec![secret.clone()],
            json_schema_file: Some(schema.clone()),
            ..SourceSpec::new("gh", SchemeName::Github, "q")
        };
        spec.resolve_files("sources[0].", &env).unwrap();
        assert_eq!(spec.secrets, ["inline", "from-env", "from-file"]);
        assert_eq!(spec.json_schema.as_deref(), Some("{\"type\": \"object\"}"));
        assert!(spec.secret_env.is_empty() && spec.json_schema_file.is_none());
        let unset = SourceSpec {
            secret_env: vec!["NOPE".into()],
            ..SourceSpec::new("gh", SchemeName::Github, "q")
        };
        let (key, _) = unset
            .clone()
            .resolve_files("sources[0].", &env)
            .unwrap_err();
        assert_eq!(key, "sources[0].secret_env[0]");
        let both = SourceSpec {
            json_schema: Some("{}".into()),
            json_schema_file: Some(schema),
            ..SourceSpec::new("gh", SchemeName::Github, "q")
        };
        let (key, why) = both.clone().resolve_files("", &env).unwrap_err();
        assert_eq!(key, "json_schema_file");
        assert!(why.contains("not both"), "{why}");
    }

    #[test]
    fn bad_specs_name_the_key() {
        let cases: Vec<(SourceSpec, &[&str], &str)> = vec![
            (
                SourceSpec::new("a b", SchemeName::Github, "q"),
                &["a-test-secret-of-16+"],
                "name:",
            ),
            (
                SourceSpec::new("a", SchemeName::Github, "q"),
                &[],
                "secrets:",
            ),
            (
                SourceSpec::new("a", SchemeName::None, "q"),
                &[],
                "bearer_sha256:",
            ),
            (
                SourceSpec::new("a", SchemeName::Hmac, "q"),
                &["a-test-secret-of-16+"],
                "hmac:",
            ),
            (
                SourceSpec {
                    json_schema: Some("{\"type\": 3}".into()),
                    ..SourceSpec::new("a", SchemeName::Github, "q")
                },
                &["a-test-secret-of-16+"],
                "json_schema:",
            ),
            (
                SourceSpec {
                    dedup_id: Some("body:/id".into()),
                    ..SourceSpec::new("a", SchemeName::Github, "q")
                },
                &["a-test-secret-of-16+"],
                "dedup_id:",
            ),
            (
                SourceSpec {
                    endpoint: Some("e".into()),
                    ..SourceSpec::new("a", SchemeName::Github, "q")
                },
                &["a-test-secret-of-16+"],
                "queue:",
            ),
            (
                SourceSpec {
                    max_body_bytes: 2 << 20,
                    ..SourceSpec::new("a", SchemeName::Github, "q")
                },
                &["a-test-secret-of-16+"],
                "max_body_bytes:",
            ),
            (
                SourceSpec {
                    basic: vec!["nocolon".into()],
                    ..SourceSpec::new("a", SchemeName::None, "q")
                },
                &[],
                "basic[0]:",
            ),
        ];
        for (spec, secrets, key) in cases {
            let err = compile(spec, secrets).unwrap_err();
            assert!(err.starts_with(key), "{key}: {err}");
        }
    }
}
