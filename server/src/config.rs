//! Typed configuration: TOML file keys, their defaults, and validation at start.
//!
//! Every key has a default that works with no file at all (data in `./hookd-data`, both
//! listeners on loopback). Unknown keys are rejected, and a bad value is reported with the
//! key's name, before anything is opened.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use hookd_core::breaker::BreakerConfig;
use hookd_core::retry::RetryPolicy;

#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Directory holding `hookd.redb`; created if missing.
    pub data_dir: PathBuf,
    pub grpc_addr: SocketAddr,
    /// Serves `/healthz`.
    pub http_addr: SocketAddr,
    /// Receives webhooks from providers (`POST /in/{source}`) and serves nothing else:
    /// the one listener meant to face the internet.
    pub ingest_addr: SocketAddr,
    /// Ingest sources defined here (read-only over gRPC; PutSource makes others).
    pub sources: Vec<hookd_core::source::SourceSpec>,
    /// The event types this deployment declares: a description, and a JSON Schema their
    /// payloads must satisfy (`crate::catalog`).
    pub event_types: Vec<crate::catalog::EventTypeSpec>,
    /// Refuse an Enqueue whose event type is not declared in `event_types` (or that has
    /// none).
    pub strict_event_types: bool,
    /// Pull queues with settings of their own (FIFO lanes); any other queue is made on
    /// first use, unordered.
    pub queues: Vec<QueueSpec>,
    /// Largest accepted event payload.
    pub max_payload_bytes: usize,
    /// Most events in one EnqueueBatch call.
    pub max_batch_events: usize,
    pub max_idempotency_key_bytes: usize,
    /// How long an idempotency key deduplicates.
    pub idempotency_retention_secs: u64,
    /// How long GetMessage can show a delivered (acked) message's attempts; about 100 to
    /// 200 bytes per message on disk. 0 = forget completed messages at once.
    pub completed_retention_secs: u64,
    /// How long a FIFO lane no message has joined keeps its number; its next message after
    /// that is number 1 again (0: kept for ever).
    pub fifo_lane_retention_secs: u64,
    /// Most requests folded into one engine round (one log record).
    pub max_commit_batch: usize,
    /// A checkpoint (redb made durable up to the write-ahead log's end, and the log before
    /// it deleted) at least this often while writes come in...
    pub checkpoint_interval_ms: u64,
    /// ...and whenever the log has grown by this much since the last one. With the segment
    /// size, this bounds the log's disk use and what a restart replays.
    pub checkpoint_log_mb: u64,
    /// A log segment file grows to about this size before the next one starts.
    pub log_segment_mb: u64,
    /// The log is the message heap: a completed message's payload stays readable
    /// (GetMessage) at least this long after it was created...
    pub log_retention_secs: u64,
    /// ...while the log's segments stay within this many MiB (oldest go first). Live
    /// messages' records are never deleted: they count on top.
    pub log_retention_mb: u64,
    /// redb's page cache (reads and the pages a commit writes). Most of hookd's memory
    /// beyond its index of live messages (about 200 B each).
    pub cache_size_mb: u64,
    /// Bytes of accepted writes that may wait for the engine at once; beyond that, Enqueue
    /// answers RESOURCE_EXHAUSTED instead of buffering without bound.
    pub max_queued_write_bytes: u64,
    /// Default retry policy of queues, ad-hoc URLs and endpoints that set none.
    pub retry: RetryPolicy,
    /// Push delivery to endpoints and ad-hoc URLs.
    pub delivery: DeliveryConfig,
    /// `/metrics` on the HTTP listener.
    pub metrics: MetricsConfig,
    /// Dead-letter tools.
    pub dead_letters: DeadLetterConfig,
    /// Alert thresholds, and where changes are delivered.
    pub alerts: hookd_core::alerts::AlertConfig,
    /// Who may call what: tokens, client certificates, scopes, request rates.
    pub auth: crate::auth::AuthConfig,
    /// TLS (and mTLS) on both listeners.
    pub tls: crate::listen::TlsConfig,
    /// Limits against hostile or broken connections, per listener.
    pub connections: crate::listen::ConnectionLimits,
    /// Encryption of endpoint signing secrets at rest.
    pub secrets: hookd_core::secrets::SecretsConfig,
    /// Watermarks per destination and in total: a throttle hint above the soft mark,
    /// RESOURCE_EXHAUSTED with a retry delay at the hard mark.
    pub backpressure: hookd_core::backpressure::BackpressureConfig,
    /// Disk headroom, and what hookd does after its storage fails.
    pub storage: StorageConfig,
    /// The customer portal's links (issue #52).
    pub portal: PortalConfig,
}

/// The customer portal (`[portal]`): where its links point, who may frame it, how often
/// its signing key changes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PortalConfig {
    /// The HTTP listener as customers' browsers reach it (`https://hooks.example.com`,
    /// behind a proxy that passes `/portal/`): links start with it. Empty: the listener's
    /// own address, `http://` or `https://` as it speaks.
    pub public_url: String,
    /// Origins whose pages may show any tenant's portal in an iframe (a tenant adds its
    /// own with `portal.frame_ancestors`).
    pub frame_ancestors: Vec<String>,
    /// A new signing key this often; a key keeps verifying the links it signed until the
    /// last of them expires (at most 24 h later), then it is deleted.
    pub key_rotation_secs: u64,
}

impl Default for PortalConfig {
    fn default() -> Self {
        Self {
            public_url: String::new(),
            frame_ancestors: Vec::new(),
            key_rotation_secs: 24 * 3600,
        }
    }
}

/// A pull queue's own settings (`[[queues]]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    pub name: String,
    /// FIFO lanes per ordering key: `block` (a message that uses its last attempt holds
    /// its lane until replayed or purged) or `park` (it is dead-lettered and the lane moves
    /// on); absent: unordered.
    #[serde(default)]
    pub fifo: Option<FifoSetting>,
}

/// A destination's FIFO policy, as the config file and the CLI name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FifoSetting {
    Block,
    Park,
}

impl FifoSetting {
    pub(crate) fn policy(self) -> hookd_engine::FifoPolicy {
        match self {
            Self::Block => hookd_engine::FifoPolicy::Block,
            Self::Park => hookd_engine::FifoPolicy::Park,
        }
    }
}

impl Config {
    /// The pull queues with FIFO lanes, by name.
    pub(crate) fn fifo_queues(
        &self,
    ) -> std::collections::HashMap<String, hookd_engine::FifoPolicy> {
        self.queues
            .iter()
            .filter_map(|q| Some((q.name.clone(), q.fifo?.policy())))
            .collect()
    }
}

/// Disk headroom and storage failures.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Space kept free on the data directory's file system: below it new events, endpoints
    /// and sources are refused (RESOURCE_EXHAUSTED), while Acks, Nacks, delivery outcomes,
    /// deletes and purges still go through. The reserve is the larger of the two.
    pub reserve_mb: u64,
    /// ...or this share of the file system's size.
    pub reserve_percent: f64,
    /// How often free space is measured (also on every checkpoint).
    pub probe_interval_ms: u64,
    /// After a storage failure (a failed write or fsync): `recover` closes the store,
    /// reopens it (replaying and verifying the log) and serves again once that succeeds,
    /// retrying every `recover_interval_ms`; `exit` stops hookd with a non-zero status for
    /// its supervisor to restart. Either way nothing is answered from the failed state.
    pub on_failure: OnStorageFailure,
    pub recover_interval_ms: u64,
    /// With `recover`: after the same failure this many times in a row (the store failing
    /// again after its reopen, or the reopen failing, with the same error), hookd exits
    /// non-zero naming the data file and what to do, instead of reopening for ever.
    /// 0: never gives up.
    pub max_identical_failures: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStorageFailure {
    Recover,
    Exit,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            reserve_mb: 256,
            reserve_percent: 1.0,
            probe_interval_ms: 250,
            on_failure: OnStorageFailure::Recover,
            recover_interval_ms: 1_000,
            max_identical_failures: 3,
        }
    }
}

/// Dead-letter tools.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadLetterConfig {
    /// A replay that names no pace makes its messages due at most this many per second,
    /// so a recovered endpoint is not flooded by its backlog.
    pub replay_rate_per_s: f64,
    /// Dead letters are deleted this long after they were dead-lettered (0: kept until
    /// replayed or purged).
    pub retention_secs: u64,
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        Self {
            replay_rate_per_s: 100.0,
            retention_secs: 14 * 24 * 3600,
        }
    }
}

/// Prometheus metrics.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Destinations with their own per-destination series (the ones with the most live
    /// and dead-lettered messages); the rest are summed under `destination="_other"`.
    pub max_destination_series: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            max_destination_series: 100,
        }
    }
}

/// Push delivery defaults (an endpoint may override the per-endpoint ones) and limits.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeliveryConfig {
    pub connect_timeout_ms: u64,
    /// The whole attempt, response body included.
    pub timeout_ms: u64,
    /// Attempts in flight at once per destination.
    pub max_in_flight: u32,
    /// A `Retry-After` pauses the endpoint at most this long.
    pub max_retry_after_secs: u64,
    /// Response-body bytes read per attempt (an excerpt is kept as the error detail).
    pub max_response_body_bytes: usize,
    /// p95 attempt latency (last hour) above which an endpoint is reported slow.
    pub slow_threshold_ms: u64,
    /// p95 attempt latency above which the breaker opens after
    /// `breaker.slow_failure_threshold` failures instead of `breaker.failure_threshold`.
    pub slow_breaker_threshold_ms: u64,
    /// Networks hookd may deliver to although they are loopback, private, link-local, ...
    /// (e.g. `["127.0.0.1/32"]`). Everything else non-public is refused.
    pub allow_destinations: Vec<hookd_delivery::guard::AllowRule>,
    /// On shutdown, how long attempts in flight may take to finish.
    pub shutdown_grace_ms: u64,
    /// PEM file of extra CA certificates trusted for HTTPS endpoints (an internal CA),
    /// on top of the Mozilla roots built in.
    pub ca_file: Option<PathBuf>,
    /// Outbound connections open at once over every destination (0: half of the
    /// open-file limit). Beyond it a push waits, uncounted, instead of failing.
    pub max_connections: usize,
    /// Push attempts in flight at once over every destination (0: as many as
    /// `max_connections`), shared between tenants by weight: while tenants compete, each
    /// may hold its share, and one under its share may start an attempt even when the
    /// rest are out (so another's hanging attempts cannot keep it waiting).
    pub max_attempts_in_flight: usize,
    /// A `v1a` key taken off an endpoint stays in its JWKS (`/jwks/{endpoint}`) this long,
    /// so that deliveries it signed (retried, or queued at the receiver) still verify.
    pub retired_signing_key_secs: u64,
    pub breaker: BreakerConfig,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        let push = hookd_engine::PushDefaults::default();
        Self {
            connect_timeout_ms: push.connect_timeout_ms,
            timeout_ms: push.timeout_ms,
            max_in_flight: push.max_in_flight,
            max_retry_after_secs: push.max_retry_after_secs,
            max_response_body_bytes: 64 << 10,
            slow_threshold_ms: push.slow_threshold_ms,
            slow_breaker_threshold_ms: push.slow_breaker_threshold_ms,
            allow_destinations: Vec::new(),
            shutdown_grace_ms: 10_000,
            ca_file: None,
            max_connections: 0,
            max_attempts_in_flight: 0,
            retired_signing_key_secs: 7 * 24 * 3600,
            breaker: push.breaker,
        }
    }
}

impl DeliveryConfig {
    /// The push settings the engine applies where an endpoint sets none.
    pub(crate) fn push_defaults(&self) -> hookd_engine::PushDefaults {
        hookd_engine::PushDefaults {
            connect_timeout_ms: self.connect_timeout_ms,
            timeout_ms: self.timeout_ms,
            max_in_flight: self.max_in_flight,
            max_attempts_in_flight: self.max_attempts_in_flight as u64,
            max_retry_after_secs: self.max_retry_after_secs,
            slow_threshold_ms: self.slow_threshold_ms,
            slow_breaker_threshold_ms: self.slow_breaker_threshold_ms,
            breaker: self.breaker,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            data_dir: PathBuf::from("./hookd-data"),
            grpc_addr: SocketAddr::from(([127, 0, 0, 1], 7700)),
            http_addr: SocketAddr::from(([127, 0, 0, 1], 7701)),
            ingest_addr: SocketAddr::from(([127, 0, 0, 1], 7702)),
            sources: Vec::new(),
            event_types: Vec::new(),
            strict_event_types: false,
            queues: Vec::new(),
            max_payload_bytes: 1 << 20,
            max_batch_events: 1_000,
            max_idempotency_key_bytes: 256,
            idempotency_retention_secs: 24 * 3600,
            completed_retention_secs: 24 * 3600,
            fifo_lane_retention_secs: 7 * 24 * 3600,
            max_commit_batch: 8_192,
            checkpoint_interval_ms: 10_000,
            checkpoint_log_mb: 32,
            log_segment_mb: 16,
            log_retention_secs: 24 * 3600,
            log_retention_mb: 1024,
            cache_size_mb: (hookd_storage::store::DEFAULT_CACHE_BYTES >> 20) as u64,
            max_queued_write_bytes: 256 << 20,
            retry: RetryPolicy::default(),
            delivery: DeliveryConfig::default(),
            metrics: MetricsConfig::default(),
            dead_letters: DeadLetterConfig::default(),
            alerts: hookd_core::alerts::AlertConfig::default(),
            auth: crate::auth::AuthConfig::default(),
            tls: crate::listen::TlsConfig::default(),
            connections: crate::listen::ConnectionLimits::default(),
            secrets: hookd_core::secrets::SecretsConfig::default(),
            backpressure: hookd_core::backpressure::BackpressureConfig::default(),
            storage: StorageConfig::default(),
            portal: PortalConfig::default(),
        }
    }
}

/// A configuration that cannot be used; the message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config key `{key}`: {message}")]
    Invalid { key: &'static str, message: String },
    /// As `Invalid`, for a key made at run time (`alerts.notify[2].endpoint`).
    #[error("config key `{key}`: {message}")]
    InvalidAt { key: String, message: String },
}

/// The complete configuration with every key at its default, annotated: what `hookd config
/// print-default` prints and `deploy/hookd.toml` holds. Tests below hold it to the code:
/// it parses to [`Config::default`], names every key, and its commented examples are keys.
pub(crate) const DEFAULT_TOML: &str = include_str!("default-config.toml");

impl Config {
    /// Reads a TOML file; keys it omits keep their defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_owned(),
            message,
        })
    }

    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        let mut queues = std::collections::HashSet::new();
        for (i, q) in self.queues.iter().enumerate() {
            let at = |message: String| {
                Err(ConfigError::InvalidAt {
                    key: format!("queues[{i}].name"),
                    message,
                })
            };
            if let Err(e) = hookd_core::names::check_name(&q.name, "name") {
                return at(e);
            }
            if !queues.insert(q.name.as_str()) {
                return at(format!("queue {:?} is declared twice", q.name));
            }
        }
        if !(1..=64 << 20).contains(&self.max_payload_bytes) {
            return invalid(
                "max_payload_bytes",
                format!("{} is not within 1..=67108864", self.max_payload_bytes),
            );
        }
        if !(1..=10_000).contains(&self.max_batch_events) {
            return invalid(
                "max_batch_events",
                format!("{} is not within 1..=10000", self.max_batch_events),
            );
        }
        if !(1..=4_096).contains(&self.max_idempotency_key_bytes) {
            return invalid(
                "max_idempotency_key_bytes",
                format!("{} is not within 1..=4096", self.max_idempotency_key_bytes),
            );
        }
        if self.idempotency_retention_secs == 0 {
            return invalid("idempotency_retention_secs", "must be at least 1".into());
        }
        if !(60..=30 * 24 * 3600).contains(&self.portal.key_rotation_secs) {
            return invalid(
                "portal.key_rotation_secs",
                format!(
                    "{} is not within 60..=2592000",
                    self.portal.key_rotation_secs
                ),
            );
        }
        if !self.portal.public_url.is_empty()
            && let Err(e) = crate::portal_links::public_url(&self.portal.public_url)
        {
            return invalid("portal.public_url", e);
        }
        for (i, origin) in self.portal.frame_ancestors.iter().enumerate() {
            if let Err(e) = crate::portal_links::origin(origin) {
                return Err(ConfigError::InvalidAt {
                    key: format!("portal.frame_ancestors[{i}]"),
                    message: e,
                });
            }
        }
        // A provider's resend is signed anew and accepted for tolerance_secs: a dedup key
        // forgotten sooner lets a replayed delivery be stored twice (issue #26, 14).
        for (i, source) in self.sources.iter().enumerate() {
            if source.tolerance_secs > self.idempotency_retention_secs {
                return Err(ConfigError::InvalidAt {
                    key: format!("sources[{i}].tolerance_secs"),
                    message: format!(
                        "{} is longer than idempotency_retention_secs ({}): a delivery replayed after its dedup key expired but within the tolerance would be stored again; raise idempotency_retention_secs or lower tolerance_secs",
                        source.tolerance_secs, self.idempotency_retention_secs
                    ),
                });
            }
        }
        if !(1..=1_000_000).contains(&self.max_commit_batch) {
            return invalid(
                "max_commit_batch",
                format!("{} is not within 1..=1000000", self.max_commit_batch),
            );
        }
        if !(10..=3_600_000).contains(&self.checkpoint_interval_ms) {
            return invalid(
                "checkpoint_interval_ms",
                format!("{} is not within 10..=3600000", self.checkpoint_interval_ms),
            );
        }
        if !(1..=65_536).contains(&self.checkpoint_log_mb) {
            return invalid(
                "checkpoint_log_mb",
                format!("{} is not within 1..=65536", self.checkpoint_log_mb),
            );
        }
        if !(1..=1_024).contains(&self.log_segment_mb) {
            return invalid(
                "log_segment_mb",
                format!("{} is not within 1..=1024", self.log_segment_mb),
            );
        }
        if !(4..=1 << 20).contains(&self.cache_size_mb) {
            return invalid(
                "cache_size_mb",
                format!("{} is not within 4..=1048576", self.cache_size_mb),
            );
        }
        if self.max_queued_write_bytes == 0 {
            return invalid("max_queued_write_bytes", "must be at least 1".into());
        }
        if !(1..=10_000).contains(&self.metrics.max_destination_series) {
            return invalid(
                "metrics.max_destination_series",
                format!(
                    "{} is not within 1..=10000",
                    self.metrics.max_destination_series
                ),
            );
        }
        let rate = self.dead_letters.replay_rate_per_s;
        if !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0) {
            return invalid(
                "dead_letters.replay_rate_per_s",
                format!("{rate} is not within (0, 1000000]"),
            );
        }
        if let Err((key, message)) = self.alerts.check() {
            return Err(ConfigError::InvalidAt { key, message });
        }
        if let Err((key, message)) = self.connections.check() {
            return invalid(key, message);
        }
        if let Err((key, message)) = self.backpressure.check(self.max_payload_bytes) {
            return Err(ConfigError::InvalidAt {
                key: format!("backpressure.{key}"),
                message,
            });
        }
        let st = &self.storage;
        if !(st.reserve_percent.is_finite() && (0.0..=50.0).contains(&st.reserve_percent)) {
            return invalid(
                "storage.reserve_percent",
                format!("{} is not within 0..=50", st.reserve_percent),
            );
        }
        if !(10..=60_000).contains(&st.probe_interval_ms) {
            return invalid(
                "storage.probe_interval_ms",
                format!("{} is not within 10..=60000", st.probe_interval_ms),
            );
        }
        if !(10..=3_600_000).contains(&st.recover_interval_ms) {
            return invalid(
                "storage.recover_interval_ms",
                format!("{} is not within 10..=3600000", st.recover_interval_ms),
            );
        }
        validate_retry(&self.retry, "retry")?;
        self.delivery.validate()
    }
}

impl DeliveryConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, message: String| Err(ConfigError::Invalid { key, message });
        let ms = |key, v: u64, max: u64| {
            if (1..=max).contains(&v) {
                Ok(())
            } else {
                invalid(key, format!("{v} is not within 1..={max}"))
            }
        };
        use hookd_core::names::{MAX_CONNECT_TIMEOUT_MS, MAX_IN_FLIGHT, MAX_TIMEOUT_MS};
        ms(
            "delivery.connect_timeout_ms",
            self.connect_timeout_ms,
            MAX_CONNECT_TIMEOUT_MS,
        )?;
        ms("delivery.timeout_ms", self.timeout_ms, MAX_TIMEOUT_MS)?;
        ms(
            "delivery.max_in_flight",
            u64::from(self.max_in_flight),
            u64::from(MAX_IN_FLIGHT),
        )?;
        ms(
            "delivery.max_retry_after_secs",
            self.max_retry_after_secs,
            7 * 86_400,
        )?;
        ms(
            "delivery.max_response_body_bytes",
            self.max_response_body_bytes as u64,
            16 << 20,
        )?;
        ms(
            "delivery.slow_threshold_ms",
            self.slow_threshold_ms,
            3_600_000,
        )?;
        ms(
            "delivery.slow_breaker_threshold_ms",
            self.slow_breaker_threshold_ms,
            3_600_000,
        )?;
        let b = &self.breaker;
        ms(
            "delivery.breaker.failure_threshold",
            u64::from(b.failure_threshold),
            1_000_000,
        )?;
        ms(
            "delivery.breaker.slow_failure_threshold",
            u64::from(b.slow_failure_threshold),
            1_000_000,
        )?;
        ms("delivery.breaker.cooldown_ms", b.cooldown_ms, 86_400_000)?;
        if b.max_cooldown_ms < b.cooldown_ms {
            return invalid(
                "delivery.breaker.max_cooldown_ms",
                format!(
                    "{} is below cooldown_ms {}",
                    b.max_cooldown_ms, b.cooldown_ms
                ),
            );
        }
        Ok(())
    }
}

/// Checks a retry policy; `key` is its place in the config (or API request).
pub(crate) fn validate_retry(p: &RetryPolicy, key: &'static str) -> Result<(), ConfigError> {
    let invalid = |message: String| Err(ConfigError::Invalid { key, message });
    if !(1..=100).contains(&p.max_attempts) {
        return invalid(format!(
            "max_attempts {} is not within 1..=100",
            p.max_attempts
        ));
    }
    if p.base_ms == 0 {
        return invalid("base_ms must be at least 1".into());
    }
    if p.cap_ms < p.base_ms {
        return invalid(format!(
            "cap_ms {} is below base_ms {}",
            p.cap_ms, p.base_ms
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_defaults() {
        assert_eq!(Config::from_toml(""), Ok(Config::default()));
        assert!(Config::default().validate().is_ok());
    }

    #[test]
    fn unknown_key_and_bad_type_are_named_with_line() {
        let e = Config::from_toml("data_dir = \"x\"\nmax_batch_event = 3\n").unwrap_err();
        assert!(e.contains("max_batch_event") && e.contains("line 2"), "{e}");
        let e = Config::from_toml("[retry]\nbase_ms = \"fast\"\n").unwrap_err();
        assert!(e.contains("base_ms"), "{e}");
    }

    #[test]
    fn a_dedup_retention_shorter_than_a_sources_tolerance_is_refused() {
        let mut c = Config::from_toml(
            "idempotency_retention_secs = 60\n[[sources]]\nname = \"gh\"\nscheme = \"github\"\nsecrets = [\"a-github-webhook-secret\"]\nqueue = \"q\"\n",
        )
        .unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("sources[0].tolerance_secs"), "{err}");
        c.idempotency_retention_secs = 3_600;
        c.validate().unwrap();
    }

    #[test]
    fn fifo_queues_are_read_and_a_bad_one_is_named() {
        let c = Config::from_toml(
            "[[queues]]\nname = \"steps\"\nfifo = \"block\"\n[[queues]]\nname = \"plain\"\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.fifo_queues(),
            [("steps".to_owned(), hookd_engine::FifoPolicy::Block)].into()
        );
        let e = Config::from_toml("[[queues]]\nname = \"q\"\nfifo = \"fast\"\n").unwrap_err();
        assert!(e.contains("fast"), "{e}");
        let twice =
            Config::from_toml("[[queues]]\nname = \"q\"\n[[queues]]\nname = \"q\"\n").unwrap();
        let e = twice.validate().unwrap_err().to_string();
        assert!(e.contains("queues[1].name") && e.contains("twice"), "{e}");
        let bad = Config::from_toml("[[queues]]\nname = \"a b\"\n").unwrap();
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("queues[0].name"), "{e}");
    }

    #[test]
    fn invalid_values_name_the_key() {
        let mut c = Config::from_toml("max_batch_events = 0").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("`max_batch_events`")
        );
        c = Config::from_toml("cache_size_mb = 1").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("`cache_size_mb`")
        );
        c = Config::from_toml("[retry]\nbase_ms = 10\ncap_ms = 5").unwrap();
        assert!(c.validate().unwrap_err().to_string().contains("`retry`"));
        c = Config::from_toml("[delivery]\ntimeout_ms = 0").unwrap();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("`delivery.timeout_ms`")
        );
    }

    #[test]
    fn allow_list_is_parsed_and_bad_cidrs_are_named() {
        let c =
            Config::from_toml("[delivery]\nallow_destinations = [\"127.0.0.1/32\", \"::1/128\"]")
                .unwrap();
        assert_eq!(c.delivery.allow_destinations.len(), 2);
        let e =
            Config::from_toml("[delivery]\nallow_destinations = [\"127.0.0.1/33\"]").unwrap_err();
        assert!(e.contains("allow_destinations"), "{e}");
    }

    /// `DEFAULT_TOML` with its commented examples (`# key = ...`, `# [table]`) made live,
    /// dropping a live `key = []` whose example is written as `[[table.key]]` below it.
    fn examples_live() -> String {
        let is_key = |l: &str| {
            let name = l.split('=').next().unwrap_or("").trim();
            l.contains('=')
                && !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        };
        let mut lines: Vec<String> = Vec::new();
        for line in DEFAULT_TOML.lines() {
            match line.strip_prefix("# ") {
                Some(rest) if rest.starts_with('[') || is_key(rest) => lines.push(rest.to_owned()),
                _ => lines.push(line.to_owned()),
            }
        }
        let mut table = String::new();
        let mut live = Vec::new();
        for line in &lines {
            if let Some(h) = line.strip_prefix('[') {
                table = h
                    .trim_start_matches('[')
                    .split(']')
                    .next()
                    .unwrap_or("")
                    .to_owned();
            }
            let name = line.split('=').next().unwrap_or("").trim();
            let array_header = if table.is_empty() {
                format!("[[{name}]]")
            } else {
                format!("[[{table}.{name}]]")
            };
            let is_empty_array = line
                .split('#')
                .next()
                .is_some_and(|v| v.trim().ends_with("= []"));
            if is_empty_array && lines.iter().any(|l| l.starts_with(&array_header)) {
                continue;
            }
            live.push(line.as_str());
        }
        live.join("\n")
    }

    /// Every leaf key of a JSON value as a dotted path (array elements share their array's
    /// path); `null` leaves count (a key with no default).
    fn paths(
        prefix: &str,
        value: &serde_json::Value,
        out: &mut std::collections::BTreeSet<String>,
    ) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    paths(&path, v, out);
                }
            }
            serde_json::Value::Array(items) if items.iter().any(|i| i.is_object()) => {
                for item in items {
                    paths(prefix, item, out);
                }
            }
            _ => {
                out.insert(prefix.to_owned());
            }
        }
    }

    #[test]
    fn the_default_file_is_the_defaults() {
        assert_eq!(Config::from_toml(DEFAULT_TOML), Ok(Config::default()));
    }

    #[test]
    fn the_default_file_examples_are_real_keys() {
        // Live, the examples must parse: a misspelt or removed key fails here (unknown
        // keys are refused).
        let live = examples_live();
        if let Err(e) = Config::from_toml(&live) {
            panic!("the default file's examples, made live, do not parse: {e}\n{live}");
        }
    }

    #[test]
    fn the_default_file_names_every_key() {
        let live: toml::Value = toml::from_str(&examples_live()).unwrap();
        let mut written = std::collections::BTreeSet::new();
        paths("", &serde_json::to_value(&live).unwrap(), &mut written);

        // Every key of the defaults, and every key of each kind of table that has no default
        // (written in full here, so adding a field breaks this until the file shows it).
        let mut every = std::collections::BTreeSet::new();
        let mut config = serde_json::to_value(Config::default()).unwrap();
        let full = |v: serde_json::Value| serde_json::Value::Array(vec![v]);
        config["auth"]["tokens"] = full(
            serde_json::to_value(crate::auth::TokenConfig {
                name: "n".into(),
                sha256: Some("s".into()),
                file: Some("f".into()),
                env: Some("e".into()),
                scopes: vec![crate::auth::Scope::Read],
                rate_limit_per_s: Some(1.0),
            })
            .unwrap(),
        );
        config["auth"]["clients"] = full(
            serde_json::to_value(crate::auth::ClientConfig {
                name: "n".into(),
                scopes: vec![crate::auth::Scope::Read],
                rate_limit_per_s: Some(1.0),
            })
            .unwrap(),
        );
        config["alerts"]["notify"] = full(
            serde_json::to_value(hookd_core::alerts::NotifyConfig {
                endpoint: "e".into(),
                format: hookd_core::alerts::NotifyFormat::Slack,
                routing_key: Some("k".into()),
            })
            .unwrap(),
        );
        config["secrets"]["keys"] = full(
            serde_json::to_value(hookd_core::secrets::KeyConfig {
                id: "i".into(),
                file: Some("f".into()),
                env: Some("e".into()),
            })
            .unwrap(),
        );
        let text = || vec!["x".to_owned()];
        config["sources"] = full(
            serde_json::to_value(hookd_core::source::SourceSpec {
                name: "n".into(),
                scheme: hookd_core::source::SchemeName::Hmac,
                hmac: Some(hookd_core::source::HmacScheme {
                    header: "h".into(),
                    algorithm: hookd_core::source::Algorithm::Sha1,
                    encoding: hookd_core::source::Encoding::Base64,
                    prefix: "p".into(),
                    timestamp_header: Some("t".into()),
                    separator: ".".into(),
                }),
                secrets: text(),
                secret_env: text(),
                secret_files: vec!["f".into()],
                tolerance_secs: 1,
                max_body_bytes: 1,
                content_types: text(),
                json_schema: Some("{}".into()),
                json_schema_file: Some("f".into()),
                event_type: Some("e".into()),
                dedup_id: Some("d".into()),
                queue: Some("q".into()),
                endpoint: Some("e".into()),
                topic: Some("t".into()),
                bearer_sha256: text(),
                basic: text(),
                redact: hookd_core::source::RedactSpec {
                    remove: text(),
                    mask: text(),
                    detectors: vec![hookd_core::source::Detector::Email],
                },
                search_keys: text(),
            })
            .unwrap(),
        );
        config["queues"] = full(
            serde_json::to_value(QueueSpec {
                name: "n".into(),
                fifo: Some(FifoSetting::Park),
            })
            .unwrap(),
        );
        config["event_types"] = full(
            serde_json::to_value(crate::catalog::EventTypeSpec {
                name: "n".into(),
                description: "d".into(),
                json_schema: Some("{}".into()),
                json_schema_file: Some("f".into()),
                search_keys: vec!["/k".into()],
            })
            .unwrap(),
        );
        paths("", &config, &mut every);
        let missing: Vec<_> = every.difference(&written).collect();
        assert!(
            missing.is_empty(),
            "keys the default file does not show: {missing:?}"
        );
    }
}
