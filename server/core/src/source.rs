//! An ingest source's definition: the same in the config file (`[[sources]]`), over gRPC
//! (PutSource) and on disk. Plain data with serde; compiling it into something that
//! verifies, checks and redacts is the ingest listener's (`hookd::ingest::source`), and
//! its wire form is `hookd_ctl::wire::source`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub const DEFAULT_TOLERANCE_SECS: u64 = 300;
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// How a source's deliveries are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchemeName {
    StandardWebhooks,
    Stripe,
    Github,
    Shopify,
    Hmac,
    /// No signature: a bearer token or basic credentials on the source instead.
    None,
}

impl SchemeName {
    pub const ALL: [SchemeName; 6] = [
        SchemeName::StandardWebhooks,
        SchemeName::Stripe,
        SchemeName::Github,
        SchemeName::Shopify,
        SchemeName::Hmac,
        SchemeName::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SchemeName::StandardWebhooks => "standard-webhooks",
            SchemeName::Stripe => "stripe",
            SchemeName::Github => "github",
            SchemeName::Shopify => "shopify",
            SchemeName::Hmac => "hmac",
            SchemeName::None => "none",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|n| n.as_str() == s)
    }

    /// Where the provider puts its delivery id, which deduplicates.
    pub fn default_dedup(self) -> Option<&'static str> {
        match self {
            SchemeName::StandardWebhooks => Some("header:webhook-id"),
            SchemeName::Stripe => Some("json:/id"),
            SchemeName::Github => Some("header:x-github-delivery"),
            SchemeName::Shopify => Some("header:x-shopify-webhook-id"),
            SchemeName::Hmac | SchemeName::None => None,
        }
    }

    /// Where the provider puts the event's type.
    pub fn default_event_type(self) -> Option<&'static str> {
        match self {
            SchemeName::StandardWebhooks | SchemeName::Stripe => Some("json:/type"),
            SchemeName::Github => Some("header:x-github-event"),
            SchemeName::Shopify => Some("header:x-shopify-topic"),
            SchemeName::Hmac | SchemeName::None => None,
        }
    }

    /// The provider's headers kept with the stored message (besides content type, event
    /// type and delivery id), so a consumer can re-verify the signature.
    pub fn signature_headers(self) -> &'static [&'static str] {
        match self {
            SchemeName::StandardWebhooks => {
                &["webhook-id", "webhook-timestamp", "webhook-signature"]
            }
            SchemeName::Stripe => &["stripe-signature"],
            SchemeName::Github => &["x-hub-signature-256", "x-hub-signature"],
            SchemeName::Shopify => &["x-shopify-hmac-sha256", "x-shopify-shop-domain"],
            SchemeName::Hmac | SchemeName::None => &[],
        }
    }
}

/// A source as configured (`[[sources]]`), sent over gRPC (PutSource) and stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSpec {
    /// `POST /in/{name}`. A-Z, a-z, 0-9, '.', '_', '-'.
    pub name: String,
    pub scheme: SchemeName,
    /// The generic scheme's settings (`scheme = "hmac"` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hmac: Option<HmacScheme>,
    /// Signing secrets; several during a rotation (any one verifies). Standard Webhooks:
    /// `whsec_<base64>`; the others: the secret's text as the provider shows it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// Config file only: environment variables holding secrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env: Vec<String>,
    /// Config file only: files holding one secret each (surrounding whitespace ignored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_files: Vec<PathBuf>,
    /// How far a signed timestamp may be from hookd's clock, either way.
    #[serde(default = "default_tolerance")]
    pub tolerance_secs: u64,
    /// Larger bodies are answered 413 (at most `max_payload_bytes`).
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Accepted media types (`*/*`: any); others are answered 415.
    #[serde(default = "default_content_types")]
    pub content_types: Vec<String>,
    /// A JSON Schema (draft 2020-12 unless its `$schema` says otherwise) the body must
    /// satisfy, as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<String>,
    /// Config file only: the schema from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema_file: Option<PathBuf>,
    /// `header:<name>` or `json:<pointer>`; default per scheme.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Where the delivery id comes from (`header:<name>`, `json:<pointer>`, or
    /// `body:sha256`: the SHA-256 of the raw body); default per scheme. Deliveries with the
    /// same id within the idempotency window are stored once. GitHub's and Shopify's
    /// signatures cover the body, not their delivery-id header: a captured delivery can be
    /// sent again under a new id and is stored again. `body:sha256` dedups what the
    /// signature covers instead (and so also stores two genuinely identical bodies once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_id: Option<String>,
    /// Route: a pull queue...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// ...or an endpoint (relayed, signed with the endpoint's own secret)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// ...or a topic the event is published to (`{event_type}` stands for its type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// `scheme = "none"`: SHA-256 (hex) of accepted bearer tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bearer_sha256: Vec<String>,
    /// `scheme = "none"`: accepted basic credentials, `user:<sha256 hex of the password>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub basic: Vec<String>,
    /// Payload sanitisation before the event is stored.
    #[serde(default, skip_serializing_if = "RedactSpec::is_empty")]
    pub redact: RedactSpec,
    /// JSON pointers into the (redacted) payload whose values the search index keeps for
    /// this source's events, beside their event type's `search_keys`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search_keys: Vec<String>,
}

fn default_tolerance() -> u64 {
    DEFAULT_TOLERANCE_SECS
}
fn default_max_body() -> usize {
    DEFAULT_MAX_BODY_BYTES
}
fn default_content_types() -> Vec<String> {
    vec!["application/json".into()]
}

impl SourceSpec {
    /// A source with the defaults: `scheme`, routed to `queue`.
    pub fn new(name: &str, scheme: SchemeName, queue: &str) -> Self {
        Self {
            name: name.into(),
            scheme,
            hmac: None,
            secrets: Vec::new(),
            secret_env: Vec::new(),
            secret_files: Vec::new(),
            tolerance_secs: DEFAULT_TOLERANCE_SECS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            content_types: default_content_types(),
            json_schema: None,
            json_schema_file: None,
            event_type: None,
            dedup_id: None,
            queue: Some(queue.into()),
            endpoint: None,
            topic: None,
            bearer_sha256: Vec::new(),
            basic: Vec::new(),
            redact: RedactSpec::default(),
            search_keys: Vec::new(),
        }
    }
}

impl SourceSpec {
    /// Reads what a file names instead of holding (`secret_env`, `secret_files`,
    /// `json_schema_file`) into `secrets` and `json_schema`, as hookd does for the config
    /// file's sources and `hookd sources put FILE` before sending one. Errors:
    /// (`{key}.secret_env[i]` and so on, what is wrong).
    pub fn resolve_files(
        &mut self,
        key: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), (String, String)> {
        for (i, var) in std::mem::take(&mut self.secret_env).into_iter().enumerate() {
            let value = env(&var).ok_or_else(|| {
                (
                    format!("{key}secret_env[{i}]"),
                    format!("the environment variable {var} is not set"),
                )
            })?;
            self.secrets.push(value);
        }
        for (i, path) in std::mem::take(&mut self.secret_files)
            .into_iter()
            .enumerate()
        {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                (
                    format!("{key}secret_files[{i}]"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            self.secrets.push(text.trim().to_owned());
        }
        if let Some(path) = self.json_schema_file.take() {
            if self.json_schema.is_some() {
                return Err((
                    format!("{key}json_schema_file"),
                    "give json_schema or json_schema_file, not both".into(),
                ));
            }
            self.json_schema = Some(std::fs::read_to_string(&path).map_err(|e| {
                (
                    format!("{key}json_schema_file"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?);
        }
        Ok(())
    }
}

/// The generic scheme.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HmacScheme {
    /// The header holding the signature.
    pub header: String,
    #[serde(default)]
    pub algorithm: Algorithm,
    #[serde(default)]
    pub encoding: Encoding,
    /// Stripped from the header's value before decoding (e.g. `sha256=`).
    #[serde(default)]
    pub prefix: String,
    /// With it, the signed content is `timestamp + separator + body`, the timestamp (Unix
    /// seconds) read from this header and held to the tolerance.
    #[serde(default)]
    pub timestamp_header: Option<String>,
    #[serde(default = "dot")]
    pub separator: String,
}

fn dot() -> String {
    ".".into()
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    #[default]
    Sha256,
    Sha1,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    #[default]
    Hex,
    Base64,
}

/// What a source scrubs. Empty: nothing (the body is stored as received).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactSpec {
    /// Members or elements deleted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
    /// Values replaced by the string `"[redacted]"`, whatever their type.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mask: Vec<String>,
    /// Detectors run over every string value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub detectors: Vec<Detector>,
}

impl RedactSpec {
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.mask.is_empty() && self.detectors.is_empty()
    }
}

/// Personal data found inside string values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Detector {
    /// `name@domain.tld`.
    Email,
    /// 9 to 15 digits with the usual separators (`+`, spaces, dots, dashes, parentheses).
    Phone,
    /// 13 to 19 digits (spaces or dashes between) that pass the Luhn check.
    Card,
    /// `Bearer <token>`, and tokens with well-known prefixes (`sk_live_`, `ghp_`, `xoxb-`...).
    BearerToken,
}

impl Detector {
    pub const ALL: [Detector; 4] = [
        Detector::Email,
        Detector::Phone,
        Detector::Card,
        Detector::BearerToken,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Detector::Email => "email",
            Detector::Phone => "phone",
            Detector::Card => "card",
            Detector::BearerToken => "bearer-token",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }
}
