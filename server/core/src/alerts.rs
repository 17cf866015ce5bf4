//! Alerts: the thresholds operators of webhook pipelines watch, evaluated continuously by
//! the engine for every destination and for the total, with their states (ok, warning,
//! critical, since when, value) and what to send when one changes.
//!
//! | alert              | measures                                          | warning   | critical  |
//! |--------------------|---------------------------------------------------|-----------|-----------|
//! | `success_rate`     | push attempts that succeeded, last 5 min          | < 99 %    | < 95 %    |
//! | `queue_depth`      | live messages (pending, retrying, in flight)      | > 5,000   | > 8,000   |
//! | `dead_letters`     | messages in the dead-letter queue                 | > 10      | > 50      |
//! | `delivery_latency` | average enqueue-to-completion time, last 5 min    | > 2 s     | > 5 s     |
//! | `consumer_rate`    | completions / enqueues, last 10 min               | < 50 %    | < 25 %    |
//! | `dead_letter_growth` | new dead letters, last 15 min                   | >= 1      | >= 10     |
//! | `oldest_pending`   | age of the oldest live message                    | > 30 min  | > 2 h     |
//! | `attempt_p95`      | an endpoint's attempt latency p95, last hour      | > 2 s     | > 5 s     |
//!
//! Rates need enough traffic to mean anything: `success_rate` is judged from
//! `success_rate_min_attempts` attempts in the window, `consumer_rate` from
//! `consumer_rate_min_enqueued` enqueues; below that the alert keeps its state.
//!
//! Pure code: figures in, changes out; the engine supplies the figures and the clock.

use std::collections::HashMap;

use serde::Deserialize;

/// The `[alerts]` section of the config.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AlertConfig {
    pub enabled: bool,
    /// How often the engine evaluates every alert.
    pub evaluate_every_secs: u64,
    pub success_rate_warning: f64,
    pub success_rate_critical: f64,
    pub success_rate_min_attempts: u64,
    pub queue_depth_warning: u64,
    pub queue_depth_critical: u64,
    pub dead_letters_warning: u64,
    pub dead_letters_critical: u64,
    pub delivery_latency_warning_ms: u64,
    pub delivery_latency_critical_ms: u64,
    pub consumer_rate_warning: f64,
    pub consumer_rate_critical: f64,
    pub consumer_rate_min_enqueued: u64,
    pub dead_letter_growth_warning: u64,
    pub dead_letter_growth_critical: u64,
    pub oldest_pending_warning_secs: u64,
    pub oldest_pending_critical_secs: u64,
    pub attempt_p95_warning_ms: u64,
    pub attempt_p95_critical_ms: u64,
    /// Where each change of state is delivered (through hookd's own push path).
    pub notify: Vec<NotifyConfig>,
}

impl Default for AlertConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            evaluate_every_secs: 10,
            success_rate_warning: 0.99,
            success_rate_critical: 0.95,
            success_rate_min_attempts: 20,
            queue_depth_warning: 5_000,
            queue_depth_critical: 8_000,
            dead_letters_warning: 10,
            dead_letters_critical: 50,
            delivery_latency_warning_ms: 2_000,
            delivery_latency_critical_ms: 5_000,
            consumer_rate_warning: 0.5,
            consumer_rate_critical: 0.25,
            consumer_rate_min_enqueued: 100,
            dead_letter_growth_warning: 1,
            dead_letter_growth_critical: 10,
            oldest_pending_warning_secs: 30 * 60,
            oldest_pending_critical_secs: 2 * 3600,
            attempt_p95_warning_ms: 2_000,
            attempt_p95_critical_ms: 5_000,
            notify: Vec::new(),
        }
    }
}

/// One place alert changes go: an endpoint (put with PutEndpoint, like any other), and
/// the shape of the body.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    pub endpoint: String,
    #[serde(default)]
    pub format: NotifyFormat,
    /// PagerDuty Events v2 integration key (format `pagerduty` only).
    #[serde(default)]
    pub routing_key: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyFormat {
    /// hookd's own JSON (`type: "hookd.alert"`).
    #[default]
    Hookd,
    /// A Slack incoming webhook's `{"text": ...}`.
    Slack,
    /// PagerDuty Events API v2 (trigger, and resolve when the alert is ok again).
    Pagerduty,
}

impl AlertConfig {
    /// The first key with a bad value, and why.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |key: &str, why: String| Err((format!("alerts.{key}"), why));
        if !(1..=3600).contains(&self.evaluate_every_secs) {
            return bad(
                "evaluate_every_secs",
                format!("{} is not within 1..=3600", self.evaluate_every_secs),
            );
        }
        for (key, w, c) in [
            (
                "success_rate",
                self.success_rate_warning,
                self.success_rate_critical,
            ),
            (
                "consumer_rate",
                self.consumer_rate_warning,
                self.consumer_rate_critical,
            ),
        ] {
            if !(0.0..=1.0).contains(&w) || !(0.0..=1.0).contains(&c) || c > w {
                return bad(
                    &format!("{key}_critical"),
                    format!(
                        "warning {w} and critical {c} must be within 0..=1, critical at most warning"
                    ),
                );
            }
        }
        for (key, w, c) in [
            (
                "queue_depth",
                self.queue_depth_warning,
                self.queue_depth_critical,
            ),
            (
                "dead_letters",
                self.dead_letters_warning,
                self.dead_letters_critical,
            ),
            (
                "delivery_latency",
                self.delivery_latency_warning_ms,
                self.delivery_latency_critical_ms,
            ),
            (
                "dead_letter_growth",
                self.dead_letter_growth_warning,
                self.dead_letter_growth_critical,
            ),
            (
                "oldest_pending",
                self.oldest_pending_warning_secs,
                self.oldest_pending_critical_secs,
            ),
            (
                "attempt_p95",
                self.attempt_p95_warning_ms,
                self.attempt_p95_critical_ms,
            ),
        ] {
            if c < w {
                return bad(
                    &format!("{key}_critical"),
                    format!("critical {c} is below warning {w}"),
                );
            }
        }
        for (i, n) in self.notify.iter().enumerate() {
            if n.endpoint.is_empty() {
                return bad(
                    &format!("notify[{i}].endpoint"),
                    "must name an endpoint".into(),
                );
            }
            if n.format == NotifyFormat::Pagerduty
                && n.routing_key.as_deref().is_none_or(str::is_empty)
            {
                return bad(
                    &format!("notify[{i}].routing_key"),
                    "format pagerduty needs the integration's routing_key".into(),
                );
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Ok,
    Warning,
    Critical,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warning => "warning",
            Level::Critical => "critical",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    SuccessRate,
    QueueDepth,
    DeadLetters,
    DeliveryLatency,
    ConsumerRate,
    DeadLetterGrowth,
    OldestPending,
    AttemptP95,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::SuccessRate,
        Kind::QueueDepth,
        Kind::DeadLetters,
        Kind::DeliveryLatency,
        Kind::ConsumerRate,
        Kind::DeadLetterGrowth,
        Kind::OldestPending,
        Kind::AttemptP95,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SuccessRate => "success_rate",
            Kind::QueueDepth => "queue_depth",
            Kind::DeadLetters => "dead_letters",
            Kind::DeliveryLatency => "delivery_latency",
            Kind::ConsumerRate => "consumer_rate",
            Kind::DeadLetterGrowth => "dead_letter_growth",
            Kind::OldestPending => "oldest_pending",
            Kind::AttemptP95 => "attempt_p95",
        }
    }

    /// What the alert measures and over which window (the module's table), for people.
    pub fn measures(self) -> &'static str {
        match self {
            Kind::SuccessRate => "push attempts that succeeded, last 5 min",
            Kind::QueueDepth => "live messages (pending, retrying, in flight), now",
            Kind::DeadLetters => "messages in the dead-letter queue, now",
            Kind::DeliveryLatency => "average enqueue-to-completion time, last 5 min",
            Kind::ConsumerRate => "completions / enqueues, last 10 min",
            Kind::DeadLetterGrowth => "new dead letters, last 15 min",
            Kind::OldestPending => "age of the oldest live message, now",
            Kind::AttemptP95 => "an endpoint's attempt latency p95, last hour",
        }
    }

    /// The kind named `name` (`success_rate`, ...).
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The value's unit, for messages.
    fn unit(self) -> &'static str {
        match self {
            Kind::SuccessRate | Kind::ConsumerRate => "",
            Kind::DeliveryLatency | Kind::AttemptP95 => " ms",
            Kind::OldestPending => " s",
            _ => "",
        }
    }

    /// Lower is worse (a rate), rather than higher.
    fn falling(self) -> bool {
        matches!(self, Kind::SuccessRate | Kind::ConsumerRate)
    }

    /// (warning, critical) thresholds in the value's unit.
    pub fn thresholds(self, c: &AlertConfig) -> (f64, f64) {
        match self {
            Kind::SuccessRate => (c.success_rate_warning, c.success_rate_critical),
            Kind::QueueDepth => (c.queue_depth_warning as f64, c.queue_depth_critical as f64),
            Kind::DeadLetters => (
                c.dead_letters_warning as f64,
                c.dead_letters_critical as f64,
            ),
            Kind::DeliveryLatency => (
                c.delivery_latency_warning_ms as f64,
                c.delivery_latency_critical_ms as f64,
            ),
            Kind::ConsumerRate => (c.consumer_rate_warning, c.consumer_rate_critical),
            Kind::DeadLetterGrowth => (
                c.dead_letter_growth_warning as f64,
                c.dead_letter_growth_critical as f64,
            ),
            Kind::OldestPending => (
                c.oldest_pending_warning_secs as f64,
                c.oldest_pending_critical_secs as f64,
            ),
            Kind::AttemptP95 => (
                c.attempt_p95_warning_ms as f64,
                c.attempt_p95_critical_ms as f64,
            ),
        }
    }

    /// The level of `value` against the thresholds. Growth counts trip at the threshold
    /// itself (one new dead letter is news); the others beyond it.
    pub fn level(self, value: f64, c: &AlertConfig) -> Level {
        let (w, cr) = self.thresholds(c);
        if self.falling() {
            if value < cr {
                Level::Critical
            } else if value < w {
                Level::Warning
            } else {
                Level::Ok
            }
        } else if self == Kind::DeadLetterGrowth {
            if value >= cr {
                Level::Critical
            } else if value >= w {
                Level::Warning
            } else {
                Level::Ok
            }
        } else if value > cr {
            Level::Critical
        } else if value > w {
            Level::Warning
        } else {
            Level::Ok
        }
    }
}

/// One destination's (or the total's) figures at an evaluation. `None`: not enough
/// traffic to judge (the alert keeps its state), or not applicable.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Figures {
    pub success_rate: Option<f64>,
    pub queue_depth: u64,
    pub dead_letters: u64,
    pub delivery_latency_ms: Option<f64>,
    pub consumer_rate: Option<f64>,
    pub dead_letter_growth: u64,
    pub oldest_pending_secs: f64,
    pub attempt_p95_ms: Option<f64>,
}

impl Figures {
    fn value(&self, kind: Kind) -> Option<f64> {
        match kind {
            Kind::SuccessRate => self.success_rate,
            Kind::QueueDepth => Some(self.queue_depth as f64),
            Kind::DeadLetters => Some(self.dead_letters as f64),
            Kind::DeliveryLatency => self.delivery_latency_ms,
            Kind::ConsumerRate => self.consumer_rate,
            Kind::DeadLetterGrowth => Some(self.dead_letter_growth as f64),
            Kind::OldestPending => Some(self.oldest_pending_secs),
            Kind::AttemptP95 => self.attempt_p95_ms,
        }
    }
}

/// An alert's state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct State {
    pub level: Level,
    pub since_ms: u64,
    pub value: f64,
}

/// A change of state, to log, count, show and send.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub kind: Kind,
    /// A destination's key, or `*` for the total.
    pub destination: String,
    pub from: Level,
    pub to: Level,
    pub value: f64,
    pub at_ms: u64,
    pub warning: f64,
    pub critical: f64,
}

impl Change {
    pub fn summary(&self) -> String {
        let scope = if self.destination == TOTAL {
            "all destinations".to_owned()
        } else {
            self.destination.clone()
        };
        let value = fmt_value(self.kind, self.value);
        match self.to {
            Level::Ok => format!(
                "{} of {scope} is back to ok ({value}; was {})",
                self.kind.as_str(),
                self.from.as_str()
            ),
            level => {
                let threshold = if level == Level::Critical {
                    self.critical
                } else {
                    self.warning
                };
                format!(
                    "{} of {scope} is {} ({value}; threshold {})",
                    self.kind.as_str(),
                    level.as_str(),
                    fmt_value(self.kind, threshold)
                )
            }
        }
    }
}

fn fmt_value(kind: Kind, v: f64) -> String {
    if kind.falling() {
        format!("{:.1} %", v * 100.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}{}", kind.unit())
    } else {
        format!("{v:.1}{}", kind.unit())
    }
}

/// The destination name of the totals.
pub const TOTAL: &str = "*";

/// Every alert's state, kept between evaluations.
#[derive(Debug, Default)]
pub struct Alerts {
    states: HashMap<(Kind, String), State>,
}

impl Alerts {
    /// Evaluates every alert of `destination` against `figures`; the changes.
    pub fn evaluate(
        &mut self,
        config: &AlertConfig,
        now_ms: u64,
        destination: &str,
        figures: &Figures,
        out: &mut Vec<Change>,
    ) {
        for kind in Kind::ALL {
            let Some(value) = figures.value(kind) else {
                continue;
            };
            let level = kind.level(value, config);
            let key = (kind, destination.to_owned());
            let before = self.states.get(&key).copied();
            let from = before.map_or(Level::Ok, |s| s.level);
            if from == level {
                match self.states.get_mut(&key) {
                    Some(s) => s.value = value,
                    // The totals' states are all kept, ok included (Stats shows them).
                    None if destination == TOTAL => {
                        self.states.insert(
                            key,
                            State {
                                level,
                                since_ms: now_ms,
                                value,
                            },
                        );
                    }
                    None => {}
                }
                continue;
            }
            let (warning, critical) = kind.thresholds(config);
            out.push(Change {
                kind,
                destination: destination.to_owned(),
                from,
                to: level,
                value,
                at_ms: now_ms,
                warning,
                critical,
            });
            if level == Level::Ok && destination != TOTAL {
                // A destination's ok states are not kept (thousands of quiet endpoints).
                self.states.remove(&key);
            } else {
                self.states.insert(
                    key,
                    State {
                        level,
                        since_ms: now_ms,
                        value,
                    },
                );
            }
        }
    }

    /// Drops the states of a destination that no longer exists (its alerts resolve
    /// silently: nothing is left to alert about).
    pub fn forget(&mut self, destination: &str) {
        self.states.retain(|(_, d), _| d != destination);
    }

    /// Every state kept: the totals' (ok included, once evaluated) and each destination's
    /// that is not ok; sorted by destination, then alert.
    pub fn states(&self) -> Vec<(Kind, String, State)> {
        let mut out: Vec<_> = self
            .states
            .iter()
            .map(|((k, d), s)| (*k, d.clone(), *s))
            .collect();
        out.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        out
    }
}

/// The body sent to a notify endpoint for `change`.
pub fn notification(n: &NotifyConfig, change: &Change) -> Vec<u8> {
    let summary = change.summary();
    let value = match n.format {
        NotifyFormat::Hookd => serde_json::json!({
            "type": "hookd.alert",
            "alert": change.kind.as_str(),
            "destination": change.destination,
            "level": change.to.as_str(),
            "previous": change.from.as_str(),
            "value": change.value,
            "warning": change.warning,
            "critical": change.critical,
            "at_unix_ms": change.at_ms,
            "summary": summary,
        }),
        NotifyFormat::Slack => {
            let icon = match change.to {
                Level::Ok => ":white_check_mark:",
                Level::Warning => ":warning:",
                Level::Critical => ":rotating_light:",
            };
            serde_json::json!({
                "text": format!("{icon} hookd {}: {summary}", change.to.as_str().to_uppercase()),
            })
        }
        NotifyFormat::Pagerduty => {
            let dedup_key = format!("hookd/{}/{}", change.kind.as_str(), change.destination);
            if change.to == Level::Ok {
                serde_json::json!({
                    "routing_key": n.routing_key,
                    "event_action": "resolve",
                    "dedup_key": dedup_key,
                })
            } else {
                serde_json::json!({
                    "routing_key": n.routing_key,
                    "event_action": "trigger",
                    "dedup_key": dedup_key,
                    "payload": {
                        "summary": summary,
                        "source": "hookd",
                        "severity": change.to.as_str(),
                        "component": change.destination,
                        "group": change.kind.as_str(),
                        "custom_details": {
                            "value": change.value,
                            "warning": change.warning,
                            "critical": change.critical,
                            "previous": change.from.as_str(),
                        },
                    },
                })
            }
        }
    };
    value.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_800_000_000_000;

    fn ok_figures() -> Figures {
        Figures {
            success_rate: Some(1.0),
            queue_depth: 0,
            dead_letters: 0,
            delivery_latency_ms: Some(10.0),
            consumer_rate: Some(1.0),
            dead_letter_growth: 0,
            oldest_pending_secs: 0.0,
            attempt_p95_ms: Some(10.0),
        }
    }

    /// Drives one alert through ok -> warning -> critical -> warning -> ok with values
    /// just beyond each default threshold, checking each change and the steady states.
    fn walk(kind: Kind, set: impl Fn(&mut Figures, f64), values: [f64; 5]) {
        let config = AlertConfig::default();
        let mut alerts = Alerts::default();
        let mut now = T0;
        let expect = [
            Level::Ok,
            Level::Warning,
            Level::Critical,
            Level::Warning,
            Level::Ok,
        ];
        let mut previous = Level::Ok;
        for (value, level) in values.into_iter().zip(expect) {
            let mut f = ok_figures();
            set(&mut f, value);
            let mut changes = Vec::new();
            alerts.evaluate(&config, now, "endpoint:e", &f, &mut changes);
            if level == previous {
                assert!(changes.is_empty(), "{kind:?} {value}: {changes:?}");
            } else {
                assert_eq!(changes.len(), 1, "{kind:?} {value}: {changes:?}");
                let c = &changes[0];
                assert_eq!(
                    (c.kind, c.from, c.to, c.value, c.at_ms),
                    (kind, previous, level, value, now)
                );
            }
            // Evaluated again unchanged: no change, the state stays since its change.
            let mut again = Vec::new();
            alerts.evaluate(&config, now + 1_000, "endpoint:e", &f, &mut again);
            assert!(again.is_empty());
            if level != Level::Ok {
                let states = alerts.states();
                let (_, _, s) = states.iter().find(|(k, _, _)| *k == kind).expect("kept");
                assert_eq!((s.level, s.since_ms), (level, now));
            }
            previous = level;
            now += 60_000;
        }
    }

    #[test]
    fn every_threshold_trips_both_levels_and_recovers() {
        walk(
            Kind::SuccessRate,
            |f, v| f.success_rate = Some(v),
            [0.99, 0.989, 0.949, 0.95, 0.995],
        );
        walk(
            Kind::QueueDepth,
            |f, v| f.queue_depth = v as u64,
            [5_000.0, 5_001.0, 8_001.0, 8_000.0, 10.0],
        );
        walk(
            Kind::DeadLetters,
            |f, v| f.dead_letters = v as u64,
            [10.0, 11.0, 51.0, 50.0, 0.0],
        );
        walk(
            Kind::DeliveryLatency,
            |f, v| f.delivery_latency_ms = Some(v),
            [2_000.0, 2_001.0, 5_001.0, 4_000.0, 100.0],
        );
        walk(
            Kind::ConsumerRate,
            |f, v| f.consumer_rate = Some(v),
            [0.5, 0.49, 0.24, 0.25, 0.9],
        );
        walk(
            Kind::DeadLetterGrowth,
            |f, v| f.dead_letter_growth = v as u64,
            [0.0, 1.0, 10.0, 9.0, 0.0],
        );
        walk(
            Kind::OldestPending,
            |f, v| f.oldest_pending_secs = v,
            [1_800.0, 1_801.0, 7_201.0, 7_200.0, 5.0],
        );
        walk(
            Kind::AttemptP95,
            |f, v| f.attempt_p95_ms = Some(v),
            [2_000.0, 2_001.0, 5_001.0, 5_000.0, 50.0],
        );
    }

    #[test]
    fn the_defaults_are_the_seed_thresholds() {
        let c = AlertConfig::default();
        assert_eq!(
            (c.success_rate_warning, c.success_rate_critical),
            (0.99, 0.95)
        );
        assert_eq!(
            (c.queue_depth_warning, c.queue_depth_critical),
            (5_000, 8_000)
        );
        assert_eq!((c.dead_letters_warning, c.dead_letters_critical), (10, 50));
        assert_eq!(
            (
                c.delivery_latency_warning_ms,
                c.delivery_latency_critical_ms
            ),
            (2_000, 5_000)
        );
        assert_eq!(
            (c.consumer_rate_warning, c.consumer_rate_critical),
            (0.5, 0.25)
        );
        assert_eq!(c.oldest_pending_warning_secs, 30 * 60);
        assert_eq!(c.check(), Ok(()));
    }

    #[test]
    fn without_enough_traffic_an_alert_keeps_its_state() {
        let config = AlertConfig::default();
        let mut alerts = Alerts::default();
        let mut changes = Vec::new();
        let low = Figures {
            success_rate: Some(0.5),
            ..ok_figures()
        };
        alerts.evaluate(&config, T0, TOTAL, &low, &mut changes);
        assert_eq!(changes.len(), 1);
        let quiet = Figures {
            success_rate: None,
            ..ok_figures()
        };
        changes.clear();
        alerts.evaluate(&config, T0 + 10_000, TOTAL, &quiet, &mut changes);
        assert!(changes.is_empty(), "still critical: {changes:?}");
    }

    #[test]
    fn bad_thresholds_are_named() {
        let mut c = AlertConfig {
            queue_depth_critical: 10,
            ..Default::default()
        };
        assert_eq!(
            c.check().map_err(|e| e.0),
            Err("alerts.queue_depth_critical".into())
        );
        c = AlertConfig {
            notify: vec![NotifyConfig {
                endpoint: "pd".into(),
                format: NotifyFormat::Pagerduty,
                routing_key: None,
            }],
            ..Default::default()
        };
        assert_eq!(
            c.check().map_err(|e| e.0),
            Err("alerts.notify[0].routing_key".into())
        );
    }

    #[test]
    fn notifications_take_each_shape() {
        let change = Change {
            kind: Kind::QueueDepth,
            destination: "endpoint:shop".into(),
            from: Level::Warning,
            to: Level::Critical,
            value: 8_123.0,
            at_ms: T0,
            warning: 5_000.0,
            critical: 8_000.0,
        };
        let body = |format, routing_key: Option<&str>| -> serde_json::Value {
            let n = NotifyConfig {
                endpoint: "ops".into(),
                format,
                routing_key: routing_key.map(str::to_owned),
            };
            serde_json::from_slice(&notification(&n, &change)).expect("JSON")
        };
        let h = body(NotifyFormat::Hookd, None);
        assert_eq!(h["type"], "hookd.alert");
        assert_eq!(h["alert"], "queue_depth");
        assert_eq!(
            (h["level"].as_str(), h["previous"].as_str()),
            (Some("critical"), Some("warning"))
        );
        assert_eq!(h["value"], 8_123.0);
        assert_eq!(
            h["summary"],
            "queue_depth of endpoint:shop is critical (8123; threshold 8000)"
        );
        let s = body(NotifyFormat::Slack, None);
        assert!(
            s["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(":rotating_light: hookd CRITICAL: queue_depth"))
        );
        let p = body(NotifyFormat::Pagerduty, Some("R0UT1NG"));
        assert_eq!(p["routing_key"], "R0UT1NG");
        assert_eq!(p["event_action"], "trigger");
        assert_eq!(p["dedup_key"], "hookd/queue_depth/endpoint:shop");
        assert_eq!(p["payload"]["severity"], "critical");
        assert_eq!(p["payload"]["source"], "hookd");
        let resolved = Change {
            to: Level::Ok,
            value: 12.0,
            ..change.clone()
        };
        let n = NotifyConfig {
            endpoint: "ops".into(),
            format: NotifyFormat::Pagerduty,
            routing_key: Some("R0UT1NG".into()),
        };
        let r: serde_json::Value =
            serde_json::from_slice(&notification(&n, &resolved)).expect("JSON");
        assert_eq!(r["event_action"], "resolve");
        assert_eq!(r["dedup_key"], "hookd/queue_depth/endpoint:shop");
    }
}
