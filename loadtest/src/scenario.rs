//! Scenario files: TOML, every key checked. A bad file is refused with the key and the
//! line (`toml` puts the line of the offending value or table into every error, including
//! the ones our `try_from` checks return).

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::dist::Latency;

/// One scenario: what hookd is offered and how the simulated world answers.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// How long traffic is offered (`--duration` overrides it).
    #[serde(default = "defaults::duration", deserialize_with = "run_length")]
    pub duration: Duration,
    /// After the traffic stops, how long to wait for every acknowledged event to be
    /// delivered (or dead-lettered) before the checker calls the rest undelivered.
    #[serde(default = "defaults::drain", deserialize_with = "duration")]
    pub drain_timeout: Duration,
    /// Seeds every random choice of the tool (targets, latencies, failures).
    #[serde(default = "defaults::seed")]
    pub seed: u64,
    pub traffic: Traffic,
    #[serde(default)]
    pub endpoints: Vec<EndpointGroup>,
    #[serde(default)]
    pub queues: Vec<QueueGroup>,
    #[serde(default)]
    pub hookd: HookdSettings,
    /// Present: events arrive as signed webhooks on hookd's ingest listener (`POST
    /// /in/{source}`, one Standard Webhooks source per queue) instead of gRPC Enqueue.
    pub ingest: Option<Ingest>,
    /// Limits a run (or a capacity step) must stay within. A run without `[slo]` is judged
    /// by the checker alone; a capacity search uses the defaults.
    pub slo: Option<Slo>,
    /// Present: the run is a capacity search instead of one traffic shape.
    pub capacity: Option<Capacity>,
    /// Present: events are handed to agents' Emitters (hookd-client's bounded buffer with
    /// throttling, batching and retries) instead of sent by the tool's own calls; the
    /// enqueue latency is then `emit`'s, what an agent waits.
    pub agent: Option<Agent>,
    /// Present: every event is published to one topic, and every endpoint and queue
    /// subscribes to it: each event is delivered once per receiver (weights are unused).
    pub fanout: Option<Fanout>,
    /// Present: every endpoint and queue has FIFO lanes, and each event an ordering key
    /// (one of `keys`); the checker then holds each receiver to per-key order.
    pub ordered: Option<Ordered>,
    /// The file's text, for the line of checks that span several tables.
    #[serde(skip)]
    source: String,
}

mod defaults {
    pub(super) fn agents() -> usize {
        4
    }
    pub(super) fn ordered_keys() -> u64 {
        1_000
    }
    pub(super) fn ordered_policy() -> String {
        "park".into()
    }
    pub(super) fn agent_capacity() -> usize {
        10_000
    }
    pub(super) fn agent_slow_down_at() -> usize {
        8_000
    }
    use std::time::Duration;
    pub(super) fn duration() -> Duration {
        Duration::from_secs(30)
    }
    pub(super) fn drain() -> Duration {
        Duration::from_secs(60)
    }
    pub(super) fn seed() -> u64 {
        1
    }
    pub(super) fn one() -> u32 {
        1
    }
    pub(super) fn weight() -> f64 {
        1.0
    }
    pub(super) fn batch() -> usize {
        1
    }
    pub(super) fn payload() -> usize {
        512
    }
    pub(super) fn connections() -> usize {
        4
    }
    pub(super) fn outstanding() -> usize {
        10_000
    }
    pub(super) fn error_status() -> u16 {
        500
    }
    pub(super) fn throttle_status() -> u16 {
        429
    }
    pub(super) fn retry_after() -> Duration {
        Duration::from_secs(1)
    }
    pub(super) fn visibility() -> Duration {
        Duration::from_secs(30)
    }
    pub(super) fn enqueue_p99() -> f64 {
        50.0
    }
    pub(super) fn e2e_p99() -> f64 {
        1_000.0
    }
    pub(super) fn ingest_connections() -> usize {
        64
    }
    pub(super) fn topic() -> String {
        "loadtest.fanout".into()
    }
}

/// `"30s"`, `"250ms"`, `"2m"`.
pub fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| {
        serde::de::Error::custom(format!(
            "`{s}` is not a duration ({e}); write e.g. \"30s\" or \"250ms\""
        ))
    })
}

/// A run's length: at least a second.
fn run_length<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = duration(d)?;
    if v < Duration::from_secs(1) {
        return Err(serde::de::Error::custom(format!(
            "{v:?} is too short; a run lasts at least 1s"
        )));
    }
    Ok(v)
}

fn opt_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}

/// A probability: 0 to 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct Fraction(pub f64);

impl TryFrom<f64> for Fraction {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if (0.0..=1.0).contains(&v) {
            Ok(Self(v))
        } else {
            Err(format!("{v} is not a fraction between 0 and 1"))
        }
    }
}

/// Events per second, above 0.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct Rate(pub f64);

impl TryFrom<f64> for Rate {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, String> {
        if v > 0.0 && v.is_finite() && v <= 10_000_000.0 {
            Ok(Self(v))
        } else {
            Err(format!(
                "{v} is not a rate in events/s (above 0, at most 10,000,000)"
            ))
        }
    }
}

/// How traffic is offered.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawTraffic")]
pub struct Traffic {
    pub load: Load,
    /// Events per call: 1 = unary Enqueue, more = EnqueueBatch.
    pub batch: usize,
    pub payload_bytes: usize,
    /// gRPC (HTTP/2) connections the calls are spread over.
    pub connections: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Load {
    /// Calls leave at their scheduled times whatever happens to earlier calls; latency is
    /// measured from that intended time (coordinated-omission correction).
    Open {
        shape: Shape,
        /// Calls in flight at most; a call that has to wait for a slot still counts its
        /// latency from its intended time.
        max_outstanding: usize,
    },
    /// `concurrency` calls in flight, each sent when the previous one answered.
    Closed { concurrency: usize },
}

/// The offered rate over time (events per second).
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Constant(f64),
    /// Linear from the first rate to the second over the run.
    Ramp(f64, f64),
    /// `rate` for `on`, then silence for `off`, repeated: agents working in bursts.
    Bursty {
        rate: f64,
        on: Duration,
        off: Duration,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTraffic {
    mode: String,
    rate: Option<Rate>,
    from_rate: Option<Rate>,
    to_rate: Option<Rate>,
    #[serde(default, deserialize_with = "opt_duration")]
    on: Option<Duration>,
    #[serde(default, deserialize_with = "opt_duration")]
    off: Option<Duration>,
    concurrency: Option<usize>,
    #[serde(default = "defaults::outstanding")]
    max_outstanding: usize,
    #[serde(default = "defaults::batch")]
    batch: usize,
    #[serde(default = "defaults::payload")]
    payload_bytes: usize,
    #[serde(default = "defaults::connections")]
    connections: usize,
}

impl TryFrom<RawTraffic> for Traffic {
    type Error = String;
    fn try_from(r: RawTraffic) -> Result<Self, String> {
        let need = |v: Option<Rate>, key: &str| {
            v.map(|r| r.0)
                .ok_or_else(|| format!("traffic mode `{}` needs `{key}`", r.mode))
        };
        let refuse = |present: bool, key: &str| {
            if present {
                Err(format!(
                    "`{key}` does not apply to traffic mode `{}`",
                    r.mode
                ))
            } else {
                Ok(())
            }
        };
        let open = |shape| Load::Open {
            shape,
            max_outstanding: r.max_outstanding,
        };
        let load = match r.mode.as_str() {
            "open" => {
                refuse(r.concurrency.is_some(), "concurrency")?;
                refuse(
                    r.from_rate.is_some() || r.to_rate.is_some(),
                    "from_rate/to_rate",
                )?;
                refuse(r.on.is_some() || r.off.is_some(), "on/off")?;
                open(Shape::Constant(need(r.rate, "rate")?))
            }
            "ramp" => {
                refuse(r.concurrency.is_some(), "concurrency")?;
                refuse(r.rate.is_some(), "rate")?;
                open(Shape::Ramp(
                    need(r.from_rate, "from_rate")?,
                    need(r.to_rate, "to_rate")?,
                ))
            }
            "bursty" => {
                refuse(r.concurrency.is_some(), "concurrency")?;
                let on =
                    r.on.ok_or("traffic mode `bursty` needs `on` (e.g. \"2s\")")?;
                let off = r
                    .off
                    .ok_or("traffic mode `bursty` needs `off` (e.g. \"8s\")")?;
                if on.is_zero() {
                    return Err("`on` must be above 0".into());
                }
                open(Shape::Bursty {
                    rate: need(r.rate, "rate")?,
                    on,
                    off,
                })
            }
            "closed" => {
                refuse(r.rate.is_some(), "rate")?;
                refuse(
                    r.from_rate.is_some() || r.to_rate.is_some(),
                    "from_rate/to_rate",
                )?;
                let concurrency = r
                    .concurrency
                    .ok_or("traffic mode `closed` needs `concurrency`")?;
                if concurrency == 0 {
                    return Err("`concurrency` must be at least 1".into());
                }
                Load::Closed { concurrency }
            }
            other => {
                return Err(format!(
                    "`mode` is `{other}`; expected one of open, ramp, bursty, closed"
                ));
            }
        };
        if !(1..=1000).contains(&r.batch) {
            return Err(format!("`batch` is {}; it must be 1 to 1000", r.batch));
        }
        if !(16..=1 << 20).contains(&r.payload_bytes) {
            return Err(format!(
                "`payload_bytes` is {}; it must be 16 (the tool's own header) to 1 MiB",
                r.payload_bytes
            ));
        }
        if !(1..=64).contains(&r.connections) {
            return Err(format!(
                "`connections` is {}; it must be 1 to 64",
                r.connections
            ));
        }
        if r.max_outstanding == 0 {
            return Err("`max_outstanding` must be at least 1".into());
        }
        Ok(Self {
            load,
            batch: r.batch,
            payload_bytes: r.payload_bytes,
            connections: r.connections,
        })
    }
}

/// A group of `count` simulated HTTP endpoints sharing one behaviour.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawEndpointGroup")]
pub struct EndpointGroup {
    pub name: String,
    pub count: u32,
    /// Share of the traffic, relative to the other groups' and queues' weights.
    pub weight: f64,
    pub latency: Latency,
    pub error_rate: f64,
    pub error_status: u16,
    pub throttle_rate: f64,
    pub throttle_status: u16,
    pub retry_after: Duration,
    pub hang_rate: f64,
    pub reset_rate: f64,
    pub flap: Option<Flap>,
    pub rate_limit_per_s: Option<f64>,
    pub hookd: EndpointSettings,
    /// This group's own end-to-end p99 limit (e.g. healthy endpoints next to a slow one).
    pub end_to_end_p99_ms: Option<f64>,
}

/// Down (every connection reset) for `down` at the end of every `every`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flap {
    #[serde(deserialize_with = "duration")]
    pub down: Duration,
    #[serde(deserialize_with = "duration")]
    pub every: Duration,
}

/// hookd's own settings for the endpoints of a group (0 = hookd's default).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSettings {
    #[serde(default)]
    pub max_attempts: u32,
    #[serde(default)]
    pub retry_base_ms: u64,
    #[serde(default)]
    pub retry_cap_ms: u64,
    #[serde(default)]
    pub timeout_ms: u64,
    #[serde(default)]
    pub connect_timeout_ms: u64,
    #[serde(default)]
    pub max_in_flight: u32,
    #[serde(default)]
    pub rate_limit_per_s: f64,
    #[serde(default)]
    pub rate_limit_burst: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpointGroup {
    name: String,
    #[serde(default = "defaults::one")]
    count: u32,
    #[serde(default = "defaults::weight")]
    weight: f64,
    #[serde(default)]
    latency: Latency,
    #[serde(default)]
    error_rate: Fraction,
    #[serde(default = "defaults::error_status")]
    error_status: u16,
    #[serde(default)]
    throttle_rate: Fraction,
    #[serde(default = "defaults::throttle_status")]
    throttle_status: u16,
    #[serde(default = "defaults::retry_after", deserialize_with = "duration")]
    retry_after: Duration,
    #[serde(default)]
    hang_rate: Fraction,
    #[serde(default)]
    reset_rate: Fraction,
    flap: Option<Flap>,
    rate_limit_per_s: Option<Rate>,
    #[serde(default)]
    hookd: EndpointSettings,
    end_to_end_p99_ms: Option<Rate>,
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "`name` `{name}` must be 1 to 64 characters of a-z, A-Z, 0-9, '-' and '_'"
        ));
    }
    Ok(())
}

fn check_weight(weight: f64) -> Result<(), String> {
    if weight >= 0.0 && weight.is_finite() {
        Ok(())
    } else {
        Err(format!("`weight` is {weight}; it must be 0 or more"))
    }
}

impl TryFrom<RawEndpointGroup> for EndpointGroup {
    type Error = String;
    fn try_from(r: RawEndpointGroup) -> Result<Self, String> {
        check_name(&r.name)?;
        check_weight(r.weight)?;
        if !(1..=100_000).contains(&r.count) {
            return Err(format!("`count` is {}; it must be 1 to 100000", r.count));
        }
        let sum = r.error_rate.0 + r.throttle_rate.0 + r.hang_rate.0 + r.reset_rate.0;
        if sum > 1.0 + 1e-9 {
            return Err(format!(
                "error_rate + throttle_rate + hang_rate + reset_rate is {sum}; it must be at most 1"
            ));
        }
        if !(100..=599).contains(&r.error_status) || (200..300).contains(&r.error_status) {
            return Err(format!(
                "`error_status` is {}; it must be an HTTP status 100-599 outside 2xx",
                r.error_status
            ));
        }
        if r.throttle_status != 429 && r.throttle_status != 503 {
            return Err(format!(
                "`throttle_status` is {}; it must be 429 or 503",
                r.throttle_status
            ));
        }
        if let Some(f) = r.flap
            && (f.down.is_zero() || f.down >= f.every)
        {
            return Err(format!(
                "`flap`: `down` ({:?}) must be above 0 and below `every` ({:?})",
                f.down, f.every
            ));
        }
        Ok(Self {
            name: r.name,
            count: r.count,
            weight: r.weight,
            latency: r.latency,
            error_rate: r.error_rate.0,
            error_status: r.error_status,
            throttle_rate: r.throttle_rate.0,
            throttle_status: r.throttle_status,
            retry_after: r.retry_after,
            hang_rate: r.hang_rate.0,
            reset_rate: r.reset_rate.0,
            flap: r.flap,
            rate_limit_per_s: r.rate_limit_per_s.map(|r| r.0),
            hookd: r.hookd,
            end_to_end_p99_ms: r.end_to_end_p99_ms.map(|r| r.0),
        })
    }
}

/// A queue with `workers` pull consumers.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawQueueGroup")]
pub struct QueueGroup {
    pub name: String,
    pub weight: f64,
    pub workers: u32,
    /// Messages per Receive.
    pub batch: u32,
    pub visibility: Duration,
    /// Time a worker spends on each message before it acks or nacks.
    pub processing: Latency,
    pub nack_rate: f64,
    /// Nack delay; `None` = hookd's backoff.
    pub nack_delay: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQueueGroup {
    name: String,
    #[serde(default = "defaults::weight")]
    weight: f64,
    #[serde(default = "defaults::one")]
    workers: u32,
    #[serde(default = "defaults::one")]
    batch: u32,
    #[serde(default = "defaults::visibility", deserialize_with = "duration")]
    visibility: Duration,
    #[serde(default)]
    processing: Latency,
    #[serde(default)]
    nack_rate: Fraction,
    #[serde(default, deserialize_with = "opt_duration")]
    nack_delay: Option<Duration>,
}

impl TryFrom<RawQueueGroup> for QueueGroup {
    type Error = String;
    fn try_from(r: RawQueueGroup) -> Result<Self, String> {
        check_name(&r.name)?;
        check_weight(r.weight)?;
        if !(1..=10_000).contains(&r.workers) {
            return Err(format!("`workers` is {}; it must be 1 to 10000", r.workers));
        }
        if !(1..=1000).contains(&r.batch) {
            return Err(format!("`batch` is {}; it must be 1 to 1000", r.batch));
        }
        if r.visibility < Duration::from_millis(100) {
            return Err("`visibility` must be at least 100ms".into());
        }
        Ok(Self {
            name: r.name,
            weight: r.weight,
            workers: r.workers,
            batch: r.batch,
            visibility: r.visibility,
            processing: r.processing,
            nack_rate: r.nack_rate.0,
            nack_delay: r.nack_delay,
        })
    }
}

/// The hookd the tool starts itself (ignored with `--target`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookdSettings {
    /// hookd's own config file, inline (`[hookd.config]`, same keys as `hookd serve
    /// --config`): hookd checks it when it starts.
    #[serde(default)]
    pub config: toml::Table,
}

/// Inbound webhooks (`[ingest]`): a provider posting signed events, some of them twice
/// (the provider did not see the 202), some with a bad signature.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ingest {
    /// Share of events posted a second time, with the same delivery id, after their 202:
    /// hookd must answer 202 `duplicate` with the first id and store nothing.
    #[serde(default)]
    pub duplicate_rate: Fraction,
    /// Share of events signed with the wrong secret: hookd must answer 401 and store
    /// nothing.
    #[serde(default)]
    pub bad_signature_rate: Fraction,
    /// HTTP/1.1 keep-alive connections (a request waits for a free one).
    #[serde(default = "defaults::ingest_connections")]
    pub connections: usize,
}

/// What a run (or each capacity step) must stay within.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slo {
    /// Enqueue latency p99, from the intended send time.
    #[serde(default = "defaults::enqueue_p99")]
    pub enqueue_p99_ms: f64,
    /// Enqueue to delivery (2xx answered or Ack accepted) p99, from the intended send time.
    #[serde(default = "defaults::e2e_p99")]
    pub end_to_end_p99_ms: f64,
    /// hookd's peak resident memory (when the tool can see its process).
    #[serde(default)]
    pub max_rss_mb: Option<f64>,
    /// hookd must have refused events at a hard watermark and hinted producers to slow
    /// down, and the agents' Emitters must have reported it (`slow_down`): an overload
    /// scenario proves its backpressure engaged.
    #[serde(default)]
    pub backpressure_engaged: bool,
}

impl Default for Slo {
    fn default() -> Self {
        Self {
            enqueue_p99_ms: defaults::enqueue_p99(),
            end_to_end_p99_ms: defaults::e2e_p99(),
            max_rss_mb: None,
            backpressure_engaged: false,
        }
    }
}

/// `[agent]`: the producers are Emitters, as an agent would use them.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// Emitters (agents), each with its own buffer; calls are spread over them.
    #[serde(default = "defaults::agents")]
    pub agents: usize,
    #[serde(default = "defaults::agent_capacity")]
    pub capacity: usize,
    /// From this many held, the Emitter's `slow_down()` is true (emit never waits).
    #[serde(default = "defaults::agent_slow_down_at")]
    pub slow_down_at: usize,
}

/// `[fanout]`: publish every event to a topic all receivers subscribe to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fanout {
    /// The topic (the events' type).
    #[serde(default = "defaults::topic")]
    pub topic: String,
}

/// `[ordered]`: FIFO lanes at every endpoint and queue, events spread over `keys` ordering
/// keys (round robin by the tool's sequence number).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ordered {
    #[serde(default = "defaults::ordered_keys")]
    pub keys: u64,
    /// What a dead letter does to its lane: `park` (the lane moves on; the receiver sees a
    /// gap, which the checker matches against the dead letters) or `block`.
    #[serde(default = "defaults::ordered_policy")]
    pub policy: String,
}

/// Capacity search: ramp the offered rate (open loop, constant within a step) until the
/// SLO breaks, then narrow down between the last good and the first bad rate.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "RawCapacity")]
pub struct Capacity {
    pub start_rate: f64,
    pub max_rate: f64,
    /// Each step's rate is the last one times this while the SLO holds.
    pub growth: f64,
    pub step: Duration,
    /// Bisection steps between the last good and the first bad rate.
    pub refine: u32,
    /// Longest wait for the backlog of a step to drain before the next one.
    pub settle: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCapacity {
    start_rate: Rate,
    max_rate: Rate,
    #[serde(default)]
    growth: Option<f64>,
    #[serde(deserialize_with = "duration")]
    step: Duration,
    #[serde(default)]
    refine: Option<u32>,
    #[serde(default, deserialize_with = "opt_duration")]
    settle: Option<Duration>,
}

impl TryFrom<RawCapacity> for Capacity {
    type Error = String;
    fn try_from(r: RawCapacity) -> Result<Self, String> {
        let growth = r.growth.unwrap_or(1.5);
        if !(1.05..=10.0).contains(&growth) {
            return Err(format!("`growth` is {growth}; it must be 1.05 to 10"));
        }
        if r.max_rate.0 < r.start_rate.0 {
            return Err("`max_rate` must be at least `start_rate`".into());
        }
        if r.step < Duration::from_secs(1) {
            return Err("`step` must be at least 1s".into());
        }
        let refine = r.refine.unwrap_or(4);
        if refine > 20 {
            return Err(format!("`refine` is {refine}; it must be at most 20"));
        }
        Ok(Self {
            start_rate: r.start_rate.0,
            max_rate: r.max_rate.0,
            growth,
            step: r.step,
            refine,
            settle: r.settle.unwrap_or(Duration::from_secs(30)),
        })
    }
}

/// A scenario file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

impl Scenario {
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|e| ScenarioError::Invalid(format!("{}: {e}", path.display())))
    }

    /// Parses and checks a scenario. Errors name the key and its line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut scenario: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        scenario.source = text.to_owned();
        scenario.check()?;
        Ok(scenario)
    }

    /// The same scenario with every offered rate multiplied by `factor` (traffic, bursts,
    /// ramps, capacity bounds): the mix at another volume.
    pub fn scaled(mut self, factor: f64) -> Self {
        if let Load::Open { shape, .. } = &mut self.traffic.load {
            match shape {
                Shape::Constant(r) => *r *= factor,
                Shape::Ramp(a, b) => {
                    *a *= factor;
                    *b *= factor;
                }
                Shape::Bursty { rate, .. } => *rate *= factor,
            }
        }
        if let Some(c) = &mut self.capacity {
            c.start_rate *= factor;
            c.max_rate *= factor;
        }
        self
    }

    /// Checks that span more than one table.
    fn check(&self) -> Result<(), String> {
        if self.endpoints.is_empty() && self.queues.is_empty() {
            return Err("the scenario has no `[[endpoints]]` and no `[[queues]]`: events would have nowhere to go".into());
        }
        let total: f64 = self
            .endpoints
            .iter()
            .map(|e| e.weight)
            .chain(self.queues.iter().map(|q| q.weight))
            .sum();
        if total <= 0.0 {
            return Err(
                "every `weight` in `[[endpoints]]` and `[[queues]]` is 0: no traffic could be sent"
                    .into(),
            );
        }
        let mut seen = HashSet::new();
        for name in self
            .endpoints
            .iter()
            .map(|e| &e.name)
            .chain(self.queues.iter().map(|q| &q.name))
        {
            if !seen.insert(name) {
                return Err(format!(
                    "{}: `name` `{name}` is used twice; endpoint groups and queues need distinct names",
                    self.line_of_second(name)
                ));
            }
        }
        if let Some(i) = &self.ingest {
            let why = if !self.endpoints.is_empty() {
                Some("`[ingest]` routes each source to a queue: remove `[[endpoints]]`")
            } else if self.queues.is_empty() {
                Some("`[ingest]` needs at least one `[[queues]]` to route its sources to")
            } else if self.traffic.batch != 1 {
                Some("`[ingest]` posts one event per request: `[traffic] batch` must be 1")
            } else if self.capacity.is_some() {
                Some("`[ingest]` does not run a capacity search")
            } else if !(1..=1024).contains(&i.connections) {
                Some("`[ingest] connections` must be 1 to 1024")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(why.into());
            }
        }
        if self.fanout.is_some() {
            let why = if self.ingest.is_some() {
                Some("`[fanout]` publishes over gRPC: remove `[ingest]`")
            } else if self.agent.is_some() {
                Some("`[fanout]` needs each publish's delivery ids: remove `[agent]`")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(why.into());
            }
        }
        if let Some(o) = &self.ordered {
            let why = if self.ingest.is_some() {
                Some("`[ordered]` sends ordering keys over gRPC: remove `[ingest]`")
            } else if o.keys == 0 {
                Some("`[ordered] keys` must be at least 1")
            } else if !matches!(o.policy.as_str(), "park" | "block") {
                Some("`[ordered] policy` must be \"park\" or \"block\"")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(why.into());
            }
        }
        if self.capacity.is_some() && !matches!(self.traffic.load, Load::Open { .. }) {
            return Err("`[capacity]` drives an open loop itself; set `[traffic] mode = \"open\"` (its `rate` is ignored)".into());
        }
        Ok(())
    }

    /// "line N" of the second `name = "<name>"` in the source.
    fn line_of_second(&self, name: &str) -> String {
        let mut hits = self.source.lines().enumerate().filter(|(_, l)| {
            let l = l.trim_start();
            l.starts_with("name") && l.contains(&format!("\"{name}\""))
        });
        match hits.nth(1) {
            Some((i, _)) => format!("line {}", i + 1),
            None => "a duplicate name".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str =
        "name = \"t\"\n[traffic]\nmode = \"open\"\nrate = 100\n[[endpoints]]\nname = \"a\"\n";

    #[test]
    fn the_minimal_scenario_takes_defaults() {
        let s = Scenario::parse(MIN).unwrap();
        assert_eq!(s.duration, Duration::from_secs(30));
        assert_eq!(
            s.traffic.load,
            Load::Open {
                shape: Shape::Constant(100.0),
                max_outstanding: 10_000
            }
        );
        assert_eq!(s.traffic.batch, 1);
        assert_eq!(s.endpoints[0].count, 1);
        assert_eq!(s.endpoints[0].latency, Latency::Fixed(Duration::ZERO));
    }

    fn err(text: &str) -> String {
        Scenario::parse(text).unwrap_err()
    }

    #[test]
    fn ingest_takes_queues_only_and_one_event_per_request() {
        let q = "name = \"t\"\n[traffic]\nmode = \"open\"\nrate = 100\n[ingest]\nduplicate_rate = 0.01\n[[queues]]\nname = \"q\"\n";
        let s = Scenario::parse(q).unwrap();
        let i = s.ingest.unwrap();
        assert_eq!(
            (i.duplicate_rate.0, i.bad_signature_rate.0, i.connections),
            (0.01, 0.0, 64)
        );
        assert!(
            err(&format!("{q}[[endpoints]]\nname = \"e\"\n")).contains("remove `[[endpoints]]`")
        );
        assert!(
            err(&q.replace("rate = 100", "rate = 100\nbatch = 10"))
                .contains("`[traffic] batch` must be 1")
        );
        assert!(err(&q.replace("0.01", "1.5")).contains("not a fraction"));
        assert!(
            err(&q.replace("duplicate_rate = 0.01", "connections = 0")).contains("connections")
        );
    }

    #[test]
    fn errors_name_the_key_and_the_line() {
        // An unknown key.
        let e = err(&format!("{MIN}colour = \"red\"\n"));
        assert!(e.contains("line 7") && e.contains("colour"), "{e}");
        // A value of the wrong type.
        let e = err(&MIN.replace("rate = 100", "rate = \"fast\""));
        assert!(e.contains("line 4") && e.contains("rate"), "{e}");
        // A fraction out of range.
        let e = err(&format!("{MIN}error_rate = 1.5\n"));
        assert!(e.contains("line 7") && e.contains("error_rate"), "{e}");
        // A bad duration, and one too short.
        let e = err(&MIN.replace("name = \"t\"\n", "name = \"t\"\nduration = \"soon\"\n"));
        assert!(e.contains("line 2") && e.contains("duration"), "{e}");
        let e = err(&MIN.replace("name = \"t\"\n", "name = \"t\"\nduration = \"10ms\"\n"));
        assert!(e.contains("line 2") && e.contains("at least 1s"), "{e}");
        // A key that does not fit the mode.
        let e = err(&MIN.replace("rate = 100", "rate = 100\nconcurrency = 4"));
        assert!(e.contains("line 2") && e.contains("concurrency"), "{e}");
        // Rates that add up to more than 1.
        let e = err(&format!("{MIN}error_rate = 0.6\nhang_rate = 0.6\n"));
        assert!(e.contains("line 5") && e.contains("hang_rate"), "{e}");
        // A latency distribution with its bounds swapped.
        let e = err(&format!(
            "{MIN}latency = {{ dist = \"uniform\", min_ms = 9, max_ms = 1 }}\n"
        ));
        assert!(e.contains("line 7") && e.contains("max_ms"), "{e}");
        // A duplicate name.
        let e = err(&format!("{MIN}[[queues]]\nname = \"a\"\n"));
        assert!(e.contains("line 8") && e.contains("`a`"), "{e}");
        // A missing section.
        let e = err("name = \"t\"\n[[endpoints]]\nname = \"a\"\n");
        assert!(e.contains("traffic"), "{e}");
    }

    #[test]
    fn every_shipped_scenario_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            if crate::noisy::Spec::is_noisy(&text) {
                crate::noisy::Spec::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            } else {
                Scenario::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
            }
            n += 1;
        }
        assert!(n >= 6, "{n} scenarios");
    }

    #[test]
    fn modes_and_their_keys() {
        let s = Scenario::parse(&MIN.replace(
            "mode = \"open\"\nrate = 100",
            "mode = \"bursty\"\nrate = 5000\non = \"1s\"\noff = \"4s\"\nbatch = 10",
        ))
        .unwrap();
        assert_eq!(
            s.traffic.load,
            Load::Open {
                shape: Shape::Bursty {
                    rate: 5000.0,
                    on: Duration::from_secs(1),
                    off: Duration::from_secs(4)
                },
                max_outstanding: 10_000
            }
        );
        assert_eq!(s.traffic.batch, 10);
        let s = Scenario::parse(&MIN.replace(
            "mode = \"open\"\nrate = 100",
            "mode = \"closed\"\nconcurrency = 8",
        ))
        .unwrap();
        assert_eq!(s.traffic.load, Load::Closed { concurrency: 8 });
        let e = err(&MIN.replace("mode = \"open\"", "mode = \"sideways\""));
        assert!(e.contains("sideways") && e.contains("line 2"), "{e}");
    }
}
