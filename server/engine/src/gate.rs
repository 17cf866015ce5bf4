//! One push destination's admission gate: may its next attempt go now, and what does an
//! attempt's outcome change about that?
//!
//! The gate holds the destination's concurrency limit, token bucket, circuit breaker,
//! Retry-After pause, half-open probe and disabled flag (410 Gone), and nothing else: no
//! statistics, no storage, no clock (time is a parameter), no I/O. The engine asks
//! [`Gate::admit`] before it hands out an attempt and tells [`Gate::on_outcome`] how each
//! attempt ended; everything here is decided on the engine thread, in order.

use hookd_core::breaker::{self, Breaker, BreakerConfig, BreakerState};
use hookd_core::ids::MessageId;
use hookd_core::limiter::TokenBucket;
use hookd_core::push::RetryAfter;

/// What the gate says about sending one more attempt now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Send one; `probe`: it is the half-open breaker's one probe.
    Go { probe: bool },
    /// Nothing may go before this time (paused, out of tokens, breaker open): the engine
    /// arranges to look again then.
    NotBefore(u64),
    /// Nothing may go until something else happens: every slot is busy (an attempt's end
    /// frees one), the probe is out (its outcome decides), or the destination is disabled
    /// (PutEndpoint re-enables it).
    Blocked,
}

/// How an attempt ended, as far as the gate cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// 2xx.
    Delivered,
    /// Worth retrying (network error, timeout, 408, 429, 5xx): the endpoint is failing.
    Failed { retry_after: Option<RetryAfter> },
    /// A permanent 4xx: the message is bad, but the endpoint is up and answering.
    Rejected,
    /// The SSRF guard refused the address: no news about the endpoint.
    Refused,
}

/// The limits of one destination, from its endpoint or the server's defaults.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits {
    pub max_in_flight: u64,
    /// 0: no rate limit.
    pub rate_limit_per_s: f64,
    /// 0: the rate, at least 1.
    pub rate_limit_burst: u32,
}

/// The server-wide rules the gate applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    pub breaker: BreakerConfig,
    /// A failure counts as slow (and opens the breaker sooner) when the destination's p95
    /// attempt latency is above this.
    pub(crate) slow_ms: u64,
    /// A Retry-After further away than this is cut to it.
    pub(crate) max_pause_ms: u64,
}

/// One push destination's gate.
#[derive(Debug)]
pub(crate) struct Gate {
    limits: Limits,
    policy: Policy,
    bucket: Option<TokenBucket>,
    breaker: Breaker,
    /// Retry-After: nothing goes before this time.
    paused_until: u64,
    disabled: Option<String>,
    /// The message whose attempt is the half-open probe.
    probe: Option<MessageId>,
}

impl Gate {
    pub(crate) fn new(limits: Limits, policy: Policy, disabled: Option<String>, now: u64) -> Self {
        Self {
            bucket: bucket(&limits, now),
            breaker: Breaker::new(policy.breaker),
            limits,
            policy,
            paused_until: 0,
            disabled,
            probe: None,
        }
    }

    /// New settings (PutEndpoint). Breaker, pause and probe are kept; the token bucket is
    /// kept only if its limit is unchanged, so re-putting an endpoint grants no extra burst.
    pub(crate) fn reconfigure(
        &mut self,
        limits: Limits,
        policy: Policy,
        disabled: Option<String>,
        now: u64,
    ) {
        let same_limit = (limits.rate_limit_per_s, limits.rate_limit_burst)
            == (self.limits.rate_limit_per_s, self.limits.rate_limit_burst);
        if !same_limit || self.bucket.is_none() {
            self.bucket = bucket(&limits, now);
        }
        self.breaker.reconfigure(policy.breaker);
        self.limits = limits;
        self.policy = policy;
        self.disabled = disabled;
    }

    /// May one more attempt go now, with `in_flight` attempts out? A `Go { probe: true }`
    /// marks the half-open breaker's probe as out: follow it with [`Gate::sent`] or, if no
    /// message was there to send after all, [`Gate::nothing_sent`].
    pub(crate) fn admit(&mut self, now: u64, in_flight: u64) -> Admission {
        if self.disabled.is_some() || in_flight >= self.limits.max_in_flight {
            return Admission::Blocked;
        }
        if self.paused_until > now {
            return Admission::NotBefore(self.paused_until);
        }
        if let Some(bucket) = &mut self.bucket {
            let at = bucket.next_token_ms(now);
            if at > now {
                return Admission::NotBefore(at);
            }
        }
        match self.breaker.admit(now) {
            breaker::Admit::Yes => Admission::Go { probe: false },
            breaker::Admit::Probe => Admission::Go { probe: true },
            breaker::Admit::NotUntil(at) => Admission::NotBefore(at),
            breaker::Admit::AwaitingProbe => Admission::Blocked,
        }
    }

    /// An admitted attempt of message `id` went out.
    pub(crate) fn sent(&mut self, id: MessageId, probe: bool, now: u64) {
        if let Some(bucket) = &mut self.bucket {
            bucket.try_take(now);
        }
        if probe {
            self.probe = Some(id);
        }
    }

    /// An admission was not used (no message was ready after all).
    pub(crate) fn nothing_sent(&mut self, probe: bool) {
        if probe {
            self.breaker.probe_lost();
        }
    }

    /// The attempt of message `id` ended with `outcome`. `p95_ms` is the destination's p95
    /// attempt latency over the last hour, asked for only when it can change the decision
    /// (it merges histograms).
    pub(crate) fn on_outcome(
        &mut self,
        id: MessageId,
        outcome: Outcome,
        now: u64,
        p95_ms: impl FnOnce() -> f64,
    ) {
        let probe = self.probe == Some(id);
        if probe {
            self.probe = None;
        }
        match outcome {
            // A permanent 4xx: the endpoint answered, it is up.
            Outcome::Delivered | Outcome::Rejected => self.breaker.on_success(probe),
            Outcome::Failed { retry_after } => {
                let slow = self.breaker.state() == BreakerState::Closed
                    && self.breaker.consecutive_failures() + 1
                        >= self.policy.breaker.slow_failure_threshold
                    && p95_ms() > self.policy.slow_ms as f64;
                self.breaker.on_failure(now, probe, slow);
                if let Some(ra) = retry_after {
                    let until = match ra {
                        RetryAfter::Seconds(s) => now.saturating_add(s.saturating_mul(1_000)),
                        RetryAfter::At(ms) => ms,
                    }
                    .min(now.saturating_add(self.policy.max_pause_ms));
                    self.paused_until = self.paused_until.max(until);
                }
            }
            Outcome::Refused => {
                if probe {
                    self.breaker.probe_lost();
                }
            }
        }
    }

    /// Disables the destination (410 Gone) until it is reconfigured.
    pub(crate) fn disable(&mut self, reason: String) {
        self.disabled = Some(reason);
    }

    pub(crate) fn disabled(&self) -> Option<&str> {
        self.disabled.as_deref()
    }

    pub(crate) fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    pub(crate) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The Retry-After pause, while it lasts.
    pub(crate) fn paused_until(&self, now: u64) -> Option<u64> {
        (self.paused_until > now).then_some(self.paused_until)
    }
}

fn bucket(limits: &Limits, now: u64) -> Option<TokenBucket> {
    (limits.rate_limit_per_s > 0.0).then(|| {
        let burst = if limits.rate_limit_burst > 0 {
            f64::from(limits.rate_limit_burst)
        } else {
            limits.rate_limit_per_s.max(1.0)
        };
        TokenBucket::new(limits.rate_limit_per_s, burst, now)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_in_flight: 2,
        rate_limit_per_s: 0.0,
        rate_limit_burst: 0,
    };

    fn policy() -> Policy {
        Policy {
            breaker: BreakerConfig {
                failure_threshold: 3,
                slow_failure_threshold: 2,
                cooldown_ms: 1_000,
                max_cooldown_ms: 4_000,
            },
            slow_ms: 500,
            max_pause_ms: 60_000,
        }
    }

    fn gate() -> Gate {
        Gate::new(LIMITS, policy(), None, 0)
    }

    const GO: Admission = Admission::Go { probe: false };
    const PROBE: Admission = Admission::Go { probe: true };
    const FAILED: Outcome = Outcome::Failed { retry_after: None };
    /// A p95 that is never slow, and one that always is.
    fn fast() -> f64 {
        1.0
    }
    fn slow() -> f64 {
        10_000.0
    }

    fn fail(g: &mut Gate, n: u32, now: u64) {
        for i in 0..n {
            g.on_outcome(MessageId(u128::from(i) + 100), FAILED, now, fast);
        }
    }

    #[test]
    fn slots_bound_what_is_in_flight() {
        let mut g = gate();
        for in_flight in 0..4 {
            let want = if in_flight < 2 {
                GO
            } else {
                Admission::Blocked
            };
            assert_eq!(g.admit(0, in_flight), want, "{in_flight} in flight");
        }
    }

    #[test]
    fn disabled_sends_nothing_until_reconfigured() {
        let mut g = gate();
        g.disable("410 Gone".into());
        assert_eq!(g.admit(0, 0), Admission::Blocked);
        assert_eq!(g.disabled(), Some("410 Gone"));
        g.reconfigure(LIMITS, policy(), None, 0);
        assert_eq!(g.admit(0, 0), GO);
    }

    #[test]
    fn retry_after_pauses_and_is_capped() {
        let mut g = gate();
        let ra = |s| Outcome::Failed {
            retry_after: Some(RetryAfter::Seconds(s)),
        };
        g.on_outcome(MessageId(1), ra(5), 1_000, fast);
        assert_eq!(g.admit(1_000, 0), Admission::NotBefore(6_000));
        assert_eq!(g.paused_until(1_000), Some(6_000));
        // A shorter Retry-After never shortens a pause.
        g.on_outcome(MessageId(2), ra(1), 2_000, fast);
        assert_eq!(g.admit(2_000, 0), Admission::NotBefore(6_000));
        assert_eq!(g.admit(6_000, 0), GO);
        assert_eq!(g.paused_until(6_000), None);
        // A day is cut to max_pause_ms; an absolute date in the past pauses nothing.
        g.on_outcome(MessageId(3), ra(86_400), 10_000, fast);
        assert_eq!(g.admit(10_000, 0), Admission::NotBefore(70_000));
        let mut g = gate();
        let at = |ms| Outcome::Failed {
            retry_after: Some(RetryAfter::At(ms)),
        };
        g.on_outcome(MessageId(4), at(5), 10_000, fast);
        assert_eq!(g.admit(10_000, 0), GO);
    }

    #[test]
    fn token_bucket_spaces_attempts() {
        let limits = Limits {
            rate_limit_per_s: 10.0,
            rate_limit_burst: 1,
            ..LIMITS
        };
        let mut g = Gate::new(limits, policy(), None, 0);
        assert_eq!(g.admit(0, 0), GO);
        g.sent(MessageId(1), false, 0);
        assert_eq!(g.admit(0, 0), Admission::NotBefore(100));
        assert_eq!(g.admit(100, 0), GO);
        // The same limit again keeps the (empty) bucket; a new one starts full.
        g.sent(MessageId(2), false, 100);
        g.reconfigure(limits, policy(), None, 100);
        assert_eq!(g.admit(100, 0), Admission::NotBefore(200));
        let faster = Limits {
            rate_limit_per_s: 20.0,
            ..limits
        };
        g.reconfigure(faster, policy(), None, 100);
        assert_eq!(g.admit(100, 0), GO);
    }

    #[test]
    fn breaker_opens_then_lets_exactly_one_probe_through() {
        let mut g = gate();
        fail(&mut g, 3, 0);
        assert_eq!(g.admit(0, 0), Admission::NotBefore(1_000));
        assert_eq!(g.admit(999, 0), Admission::NotBefore(1_000));
        // Half-open: one probe, then nothing until its outcome.
        assert_eq!(g.admit(1_000, 0), PROBE);
        g.sent(MessageId(7), true, 1_000);
        assert_eq!(g.admit(1_000, 1), Admission::Blocked);
        // A late result of an attempt sent before the breaker opened is no news.
        g.on_outcome(MessageId(100), Outcome::Delivered, 1_001, fast);
        assert_eq!(g.admit(1_001, 1), Admission::Blocked);
        // The probe fails: open again, cooldown doubled.
        g.on_outcome(MessageId(7), FAILED, 1_002, fast);
        assert_eq!(g.admit(1_002, 0), Admission::NotBefore(3_002));
        assert_eq!(g.breaker().cooldown_ms(), 2_000);
        // The next probe succeeds: closed.
        assert_eq!(g.admit(3_002, 0), PROBE);
        g.sent(MessageId(8), true, 3_002);
        g.on_outcome(MessageId(8), Outcome::Delivered, 3_010, fast);
        assert_eq!(g.breaker().state(), BreakerState::Closed);
        assert_eq!(g.admit(3_010, 0), GO);
    }

    #[test]
    fn an_unused_or_refused_probe_can_go_again() {
        let mut g = gate();
        fail(&mut g, 3, 0);
        assert_eq!(g.admit(1_000, 0), PROBE);
        g.nothing_sent(true);
        assert_eq!(
            g.admit(1_000, 0),
            PROBE,
            "no message was there: probe again"
        );
        g.sent(MessageId(9), true, 1_000);
        g.on_outcome(MessageId(9), Outcome::Refused, 1_001, fast);
        assert_eq!(g.admit(1_001, 0), PROBE, "a guard refusal says nothing");
    }

    #[test]
    fn a_rejected_probe_closes_the_breaker() {
        let mut g = gate();
        fail(&mut g, 3, 0);
        assert_eq!(g.admit(1_000, 0), PROBE);
        g.sent(MessageId(5), true, 1_000);
        g.on_outcome(MessageId(5), Outcome::Rejected, 1_001, fast);
        assert_eq!(g.breaker().state(), BreakerState::Closed);
    }

    #[test]
    fn a_slow_endpoint_opens_sooner() {
        // Two failures open it while slow (slow_failure_threshold), three otherwise.
        let mut g = gate();
        g.on_outcome(MessageId(1), FAILED, 0, slow);
        g.on_outcome(MessageId(2), FAILED, 0, slow);
        assert!(matches!(g.admit(0, 0), Admission::NotBefore(_)));
        let mut g = gate();
        g.on_outcome(MessageId(1), FAILED, 0, fast);
        g.on_outcome(MessageId(2), FAILED, 0, fast);
        assert_eq!(g.admit(0, 0), GO);
        // The p95 is only computed when it can matter.
        let mut g = gate();
        g.on_outcome(MessageId(1), FAILED, 0, || panic!("asked too early"));
    }

    #[test]
    fn success_resets_the_failure_count() {
        let mut g = gate();
        fail(&mut g, 2, 0);
        g.on_outcome(MessageId(50), Outcome::Delivered, 0, fast);
        fail(&mut g, 2, 0);
        assert_eq!(g.admit(0, 0), GO);
        fail(&mut g, 1, 0);
        assert!(matches!(g.admit(0, 0), Admission::NotBefore(_)));
    }
}
