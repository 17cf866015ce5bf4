//! Circuit breaker per push destination: a pure state machine.
//!
//! Closed: everything may go. After `failure_threshold` consecutive failed attempts (fewer,
//! `slow_failure_threshold`, while the endpoint is slow) it opens for a cooldown; when the
//! cooldown has passed it is half-open and lets exactly one probe through. The probe's
//! success closes it and resets the cooldown; its failure reopens it with the cooldown
//! doubled, capped at `max_cooldown_ms`. While open, messages wait: nothing is dropped.
//!
//! Results of attempts that were sent before the breaker opened carry no news about the
//! probe, so only the probe's own result moves a half-open breaker (the caller says which
//! result is the probe's). No clock reads: time is a parameter.

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerConfig {
    /// Consecutive failed attempts that open the breaker.
    pub failure_threshold: u32,
    /// The same while the endpoint is slow (a slow endpoint ties up a delivery slot for the
    /// whole timeout on every attempt, so it is cut off sooner).
    pub slow_failure_threshold: u32,
    /// First cooldown; doubled on every failed probe.
    pub cooldown_ms: u64,
    pub max_cooldown_ms: u64,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failure_threshold: 10,
            slow_failure_threshold: 3,
            cooldown_ms: 300_000,
            max_cooldown_ms: 3_600_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    Open {
        until_ms: u64,
    },
    /// The cooldown has passed; `probing` once the one probe is out.
    HalfOpen {
        probing: bool,
    },
}

/// What the breaker says about sending one more attempt now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// Yes, and this attempt is the half-open probe.
    Probe,
    /// Not before this time.
    NotUntil(u64),
    /// Not until the probe's result is in.
    AwaitingProbe,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
    consecutive_failures: u32,
    cooldown_ms: u64,
    openings: u64,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Self {
            config,
            state: BreakerState::Closed,
            consecutive_failures: 0,
            cooldown_ms: config.cooldown_ms,
            openings: 0,
        }
    }

    pub fn state(&self) -> BreakerState {
        self.state
    }

    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }

    /// The cooldown the breaker uses (or used) for its current (or next) opening.
    pub fn cooldown_ms(&self) -> u64 {
        self.cooldown_ms
    }

    /// Times the breaker has opened (including reopenings after a failed probe).
    pub fn openings(&self) -> u64 {
        self.openings
    }

    /// Takes a new configuration; the state is kept, a cooldown beyond the new cap shrinks.
    pub fn reconfigure(&mut self, config: BreakerConfig) {
        self.config = config;
        self.cooldown_ms = self.cooldown_ms.clamp(
            config.cooldown_ms.min(config.max_cooldown_ms),
            config.max_cooldown_ms,
        );
    }

    /// May one more attempt go now? A `Probe` answer marks the probe as out: call this only
    /// when the attempt is then really sent.
    pub fn admit(&mut self, now_ms: u64) -> Admit {
        match self.state {
            BreakerState::Closed => Admit::Yes,
            BreakerState::Open { until_ms } if now_ms < until_ms => Admit::NotUntil(until_ms),
            BreakerState::Open { .. } | BreakerState::HalfOpen { probing: false } => {
                self.state = BreakerState::HalfOpen { probing: true };
                Admit::Probe
            }
            BreakerState::HalfOpen { probing: true } => Admit::AwaitingProbe,
        }
    }

    /// An attempt succeeded (or got an answer that proves the endpoint is up).
    pub fn on_success(&mut self, probe: bool) {
        match self.state {
            BreakerState::Closed => self.consecutive_failures = 0,
            BreakerState::HalfOpen { .. } if probe => {
                self.state = BreakerState::Closed;
                self.consecutive_failures = 0;
                self.cooldown_ms = self.config.cooldown_ms;
            }
            // A result from before the breaker opened: no news about the probe.
            BreakerState::HalfOpen { .. } | BreakerState::Open { .. } => {}
        }
    }

    /// An attempt failed. `slow`: the endpoint's latency is over the slow threshold.
    pub fn on_failure(&mut self, now_ms: u64, probe: bool, slow: bool) {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        match self.state {
            BreakerState::Closed => {
                let threshold = if slow {
                    self.config.slow_failure_threshold
                } else {
                    self.config.failure_threshold
                };
                if self.consecutive_failures >= threshold.max(1) {
                    self.open(now_ms);
                }
            }
            BreakerState::HalfOpen { .. } if probe => {
                self.cooldown_ms = self
                    .cooldown_ms
                    .saturating_mul(2)
                    .min(self.config.max_cooldown_ms);
                self.open(now_ms);
            }
            BreakerState::HalfOpen { .. } | BreakerState::Open { .. } => {}
        }
    }

    /// The probe never produced a result (e.g. its message was deleted): let another go.
    pub fn probe_lost(&mut self) {
        if self.state == (BreakerState::HalfOpen { probing: true }) {
            self.state = BreakerState::HalfOpen { probing: false };
        }
    }

    fn open(&mut self, now_ms: u64) {
        self.state = BreakerState::Open {
            until_ms: now_ms.saturating_add(self.cooldown_ms),
        };
        self.openings += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BreakerConfig {
        BreakerConfig {
            failure_threshold: 3,
            slow_failure_threshold: 2,
            cooldown_ms: 1_000,
            max_cooldown_ms: 3_500,
        }
    }

    #[test]
    fn opens_after_threshold_consecutive_failures_only() {
        let mut b = Breaker::new(config());
        b.on_failure(0, false, false);
        b.on_failure(0, false, false);
        b.on_success(false);
        b.on_failure(0, false, false);
        b.on_failure(0, false, false);
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.admit(5), Admit::Yes);
        b.on_failure(10, false, false);
        assert_eq!(b.state(), BreakerState::Open { until_ms: 1_010 });
        assert_eq!(b.openings(), 1);
        assert_eq!(b.admit(1_009), Admit::NotUntil(1_010));
    }

    #[test]
    fn slow_endpoint_trips_sooner() {
        let mut b = Breaker::new(config());
        b.on_failure(0, false, true);
        assert_eq!(b.state(), BreakerState::Closed);
        b.on_failure(0, false, true);
        assert!(matches!(b.state(), BreakerState::Open { .. }));
    }

    #[test]
    fn exactly_one_probe_then_doubling_cooldown_capped_then_close_resets() {
        let mut b = Breaker::new(config());
        for _ in 0..3 {
            b.on_failure(0, false, false);
        }
        let mut open_at = 0;
        // Failed probes: cooldown 1000 -> 2000 -> 3500 (cap) -> 3500.
        for expected in [2_000, 3_500, 3_500] {
            let until = open_at + b.cooldown_ms();
            assert_eq!(b.admit(until - 1), Admit::NotUntil(until));
            assert_eq!(b.admit(until), Admit::Probe);
            for _ in 0..5 {
                assert_eq!(b.admit(until + 1), Admit::AwaitingProbe);
            }
            // A stale failure (sent before the opening) changes nothing.
            b.on_failure(until, false, false);
            assert_eq!(b.state(), BreakerState::HalfOpen { probing: true });
            b.on_failure(until + 5, true, false);
            assert_eq!(b.cooldown_ms(), expected);
            open_at = until + 5;
            assert_eq!(
                b.state(),
                BreakerState::Open {
                    until_ms: open_at + expected
                }
            );
        }
        let until = open_at + b.cooldown_ms();
        assert_eq!(b.admit(until), Admit::Probe);
        b.on_success(false);
        assert_eq!(b.state(), BreakerState::HalfOpen { probing: true });
        b.on_success(true);
        assert_eq!(b.state(), BreakerState::Closed);
        assert_eq!(b.cooldown_ms(), 1_000);
        assert_eq!(b.consecutive_failures(), 0);
        assert_eq!(b.openings(), 4);
    }

    #[test]
    fn lost_probe_lets_another_go() {
        let mut b = Breaker::new(config());
        for _ in 0..3 {
            b.on_failure(0, false, false);
        }
        assert_eq!(b.admit(1_000), Admit::Probe);
        b.probe_lost();
        assert_eq!(b.admit(1_000), Admit::Probe);
    }
}
