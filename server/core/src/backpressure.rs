//! Watermarks: how full hookd lets a destination, and all of them together, become before
//! it slows producers down (the soft mark: Enqueue succeeds and suggests a pause) and then
//! refuses new events (the hard mark: RESOURCE_EXHAUSTED with a retry delay, 429 on the
//! ingest listener).
//!
//! Pure: the engine feeds it the counts it keeps as messages move (live messages and the
//! bytes of their records, per destination and in total), so an enqueue's check costs a few
//! comparisons. What is measured is what hookd holds for a destination that has not yet
//! taken it: pending, awaiting retry and in flight. Dead letters do not count (they wait for
//! an operator, not for the destination).

use serde::Deserialize;

/// The `[backpressure]` section.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackpressureConfig {
    /// Live messages one destination may hold (its hard mark).
    pub destination_max_messages: u64,
    /// Bytes of live messages' records (payload, headers) one destination may hold.
    pub destination_max_bytes: u64,
    /// Live messages over all destinations. The index costs about 250 B of memory per live
    /// message, so this bounds hookd's memory: about 550 MB at the default.
    pub max_messages: u64,
    /// Bytes of live messages' records over all destinations (on disk, not in memory).
    pub max_bytes: u64,
    /// The soft mark, as a share of each hard mark: above it Enqueue carries a throttle hint.
    pub soft_fraction: f64,
    /// The pause suggested at the soft mark; it grows linearly to `max_throttle_ms` at the
    /// hard mark.
    pub throttle_ms: u64,
    pub max_throttle_ms: u64,
    /// The retry delay (`google.rpc.RetryInfo`, `Retry-After`) of a refusal at a hard mark.
    pub retry_after_ms: u64,
}

impl Default for BackpressureConfig {
    fn default() -> Self {
        Self {
            destination_max_messages: 1_000_000,
            destination_max_bytes: 1 << 30,
            max_messages: 2_000_000,
            max_bytes: 4 << 30,
            soft_fraction: 0.8,
            throttle_ms: 100,
            max_throttle_ms: 1_000,
            retry_after_ms: 1_000,
        }
    }
}

impl BackpressureConfig {
    /// The first key that is out of range, with why.
    pub fn check(&self, max_payload_bytes: usize) -> Result<(), (&'static str, String)> {
        let payload = max_payload_bytes as u64;
        let positive = [
            ("destination_max_messages", self.destination_max_messages),
            ("max_messages", self.max_messages),
        ];
        for (key, v) in positive {
            if v == 0 {
                return Err((key, "must be at least 1".into()));
            }
        }
        for (key, v) in [
            ("destination_max_bytes", self.destination_max_bytes),
            ("max_bytes", self.max_bytes),
        ] {
            if v < payload {
                return Err((
                    key,
                    format!("{v} is below max_payload_bytes ({payload}): no event could be held"),
                ));
            }
        }
        if !(self.soft_fraction > 0.0 && self.soft_fraction <= 1.0) {
            return Err((
                "soft_fraction",
                format!("{} is not within (0, 1]", self.soft_fraction),
            ));
        }
        if self.max_throttle_ms < self.throttle_ms {
            return Err((
                "max_throttle_ms",
                format!(
                    "{} is below throttle_ms ({})",
                    self.max_throttle_ms, self.throttle_ms
                ),
            ));
        }
        if !(1..=3_600_000).contains(&self.retry_after_ms) {
            return Err((
                "retry_after_ms",
                format!("{} is not within 1..=3600000", self.retry_after_ms),
            ));
        }
        Ok(())
    }

    /// Where an enqueue of `bytes` into a destination holding `dest` lands, with `total`
    /// held over all destinations (both before this message).
    pub fn assess(&self, dest: Held, total: Held, bytes: u64) -> Assessment {
        let marks = [
            (
                Scope::Destination,
                Measure::Messages,
                dest.messages,
                1,
                self.destination_max_messages,
            ),
            (
                Scope::Destination,
                Measure::Bytes,
                dest.bytes,
                bytes,
                self.destination_max_bytes,
            ),
            (
                Scope::All,
                Measure::Messages,
                total.messages,
                1,
                self.max_messages,
            ),
            (
                Scope::All,
                Measure::Bytes,
                total.bytes,
                bytes,
                self.max_bytes,
            ),
        ];
        let mut fill: f64 = 0.0;
        for (scope, measure, held, adding, limit) in marks {
            // Over the hard mark once this message is added; an empty destination takes
            // any one message (limits are at least max_payload_bytes).
            if held > 0 && held.saturating_add(adding) > limit {
                return Assessment::Refuse(OverMark {
                    scope,
                    measure,
                    held,
                    limit,
                    retry_after_ms: self.retry_after_ms,
                });
            }
            fill = fill.max(held.saturating_add(adding) as f64 / limit as f64);
        }
        Assessment::Admit {
            throttle_ms: self.throttle(fill),
        }
    }

    /// The pause suggested at `fill` (the fullest measure's share of its hard mark).
    pub fn throttle(&self, fill: f64) -> u64 {
        if fill < self.soft_fraction {
            return 0;
        }
        let span = 1.0 - self.soft_fraction;
        let over = if span > 0.0 {
            ((fill - self.soft_fraction) / span).clamp(0.0, 1.0)
        } else {
            1.0
        };
        self.throttle_ms + ((self.max_throttle_ms - self.throttle_ms) as f64 * over) as u64
    }

    /// A destination's (or the total's) level, for Stats and metrics.
    pub fn level(&self, held: Held, scope: Scope) -> Level {
        let (max_messages, max_bytes) = match scope {
            Scope::Destination => (self.destination_max_messages, self.destination_max_bytes),
            Scope::All => (self.max_messages, self.max_bytes),
        };
        let fill =
            (held.messages as f64 / max_messages as f64).max(held.bytes as f64 / max_bytes as f64);
        if fill >= 1.0 {
            Level::Hard
        } else if fill >= self.soft_fraction {
            Level::Soft
        } else {
            Level::Ok
        }
    }
}

/// What a destination (or all of them) holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub messages: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Destination,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    Messages,
    Bytes,
}

/// Below the soft mark, between the marks, or at the hard mark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    #[default]
    Ok,
    Soft,
    Hard,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Soft => "soft",
            Self::Hard => "hard",
        }
    }
}

/// The mark an enqueue would cross.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverMark {
    pub scope: Scope,
    pub measure: Measure,
    pub held: u64,
    pub limit: u64,
    pub retry_after_ms: u64,
}

impl std::fmt::Display for OverMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.measure {
            Measure::Messages => "live messages",
            Measure::Bytes => "bytes of live messages",
        };
        let (whose, key) = match (self.scope, self.measure) {
            (Scope::Destination, Measure::Messages) => (
                "the destination holds",
                "backpressure.destination_max_messages",
            ),
            (Scope::Destination, Measure::Bytes) => (
                "the destination holds",
                "backpressure.destination_max_bytes",
            ),
            (Scope::All, Measure::Messages) => ("hookd holds", "backpressure.max_messages"),
            (Scope::All, Measure::Bytes) => ("hookd holds", "backpressure.max_bytes"),
        };
        write!(
            f,
            "{whose} {} {what} (hard mark {key} = {}); retry after {} ms",
            self.held, self.limit, self.retry_after_ms
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// Take it; suggest the producer pauses this long before its next send (0: no pause).
    Admit {
        throttle_ms: u64,
    },
    Refuse(OverMark),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks() -> BackpressureConfig {
        BackpressureConfig {
            destination_max_messages: 10_000,
            destination_max_bytes: 1 << 20,
            max_messages: 15_000,
            max_bytes: 4 << 20,
            ..BackpressureConfig::default()
        }
    }

    fn held(messages: u64, bytes: u64) -> Held {
        Held { messages, bytes }
    }

    #[test]
    fn below_the_soft_mark_nothing_is_suggested() {
        let m = marks();
        assert_eq!(
            m.assess(held(7_998, 100), held(7_998, 100), 10),
            Assessment::Admit { throttle_ms: 0 }
        );
        assert_eq!(m.level(held(7_999, 0), Scope::Destination), Level::Ok);
    }

    #[test]
    fn between_the_marks_the_pause_grows_from_throttle_ms_to_max_throttle_ms() {
        let m = marks();
        // The seed's numbers: 8,000 of 10,000 is the soft mark.
        assert_eq!(
            m.assess(held(7_999, 0), held(7_999, 0), 10),
            Assessment::Admit { throttle_ms: 100 }
        );
        assert_eq!(
            m.assess(held(8_999, 0), held(8_999, 0), 10),
            Assessment::Admit { throttle_ms: 550 }
        );
        assert_eq!(
            m.assess(held(9_999, 0), held(9_999, 0), 10),
            Assessment::Admit { throttle_ms: 1_000 }
        );
        assert_eq!(m.level(held(8_000, 0), Scope::Destination), Level::Soft);
        assert_eq!(m.level(held(10_000, 0), Scope::Destination), Level::Hard);
    }

    #[test]
    fn the_hard_mark_refuses_and_names_the_mark() {
        let m = marks();
        let Assessment::Refuse(over) = m.assess(held(10_000, 0), held(10_000, 0), 10) else {
            panic!("not refused");
        };
        assert_eq!(
            (over.scope, over.measure, over.limit),
            (Scope::Destination, Measure::Messages, 10_000)
        );
        assert!(
            over.to_string()
                .contains("backpressure.destination_max_messages"),
            "{over}"
        );
        // Bytes: a message that would take the destination past its byte mark.
        let Assessment::Refuse(over) = m.assess(held(1, (1 << 20) - 5), held(1, 0), 10) else {
            panic!("not refused");
        };
        assert_eq!(over.measure, Measure::Bytes);
        // The global mark binds although this destination is nearly empty.
        let Assessment::Refuse(over) = m.assess(held(1, 0), held(15_000, 0), 10) else {
            panic!("not refused");
        };
        assert_eq!((over.scope, over.retry_after_ms), (Scope::All, 1_000));
    }

    #[test]
    fn an_empty_destination_takes_one_message_of_any_allowed_size() {
        let m = marks();
        assert!(matches!(
            m.assess(held(0, 0), held(0, 0), 1 << 20),
            Assessment::Admit { .. }
        ));
    }

    #[test]
    fn bad_settings_name_their_key() {
        let bad = BackpressureConfig {
            soft_fraction: 0.0,
            ..marks()
        };
        assert_eq!(bad.check(1 << 20).map_err(|e| e.0), Err("soft_fraction"));
        let bad = BackpressureConfig {
            destination_max_bytes: 10,
            ..marks()
        };
        assert_eq!(
            bad.check(1 << 20).map_err(|e| e.0),
            Err("destination_max_bytes")
        );
        let bad = BackpressureConfig {
            max_throttle_ms: 1,
            ..marks()
        };
        assert_eq!(bad.check(1 << 20).map_err(|e| e.0), Err("max_throttle_ms"));
        assert!(BackpressureConfig::default().check(1 << 20).is_ok());
    }
}
