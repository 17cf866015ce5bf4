//! Push destinations inside the engine: what may be sent now, and what an attempt's
//! outcome does.
//!
//! Per destination (an endpoint, or the origin of ad-hoc URLs): a concurrency limit, a token
//! bucket, a circuit breaker, a Retry-After pause and a disabled flag (410 Gone) decide
//! whether its next ready message goes. All of it is engine state, changed on the engine
//! thread only, so the decision and the outcome are never racing each other.
//!
//! Durability: handing a message out writes nothing. An attempt in flight is in memory only
//! (the message is still `Pending`/`Retry` on disk), so after a crash it is simply sent
//! again: at-least-once. The outcome is what is written: success removes the message, a
//! failure records the attempt and its retry (or dead letter), in the next round's commit.
//! Deliveries leave the engine only once their message is durable: at the end of the round
//! for messages stored by earlier commits, after the round's commit for those it stored.

use std::sync::Arc;
use std::time::Duration;

use super::index::{DestId, LiveState, Timer};
use super::lease::{AttemptEnd, Meta};
use super::{Engine, Tx};
use crate::breaker::{Admit, Breaker, BreakerState};
use crate::delivery::signing::Secret;
use crate::delivery::{AttemptReport, Delivery, RetryAfter, Target, Verdict};
use crate::destination::Destination;
use crate::ids::MessageId;
use crate::limiter::TokenBucket;
use crate::stats::{self, Precision, PushSnapshot, RollingCounter, RollingHistogram};
use crate::store::StoreError;
use crate::wheel::TimerKey;

/// How long past its timeout an attempt may stay unreported before the engine gives it up
/// as lost (the dispatcher always reports; this is the safety net).
const LOST_AFTER_TIMEOUT_MS: u64 = 30_000;

/// One push destination's delivery state.
#[derive(Debug)]
pub struct Push {
    pub target: Arc<Target>,
    /// The endpoint's URL; `None` for an ad-hoc URL origin (each message has its own URL).
    pub url: Option<String>,
    pub max_in_flight: u64,
    pub rate_limit_per_s: f64,
    /// As set on the endpoint (0 = the rate, at least 1).
    pub rate_limit_burst: u32,
    pub bucket: Option<TokenBucket>,
    pub breaker: Breaker,
    /// Retry-After: nothing goes before this time.
    pub paused_until: u64,
    pub disabled: Option<String>,
    /// The message whose attempt is the half-open probe.
    pub probe: Option<MessageId>,
    /// The wheel entry that wakes this destination, and when.
    pub wake: Option<(u64, TimerKey)>,
    pub attempt_latency_1h: RollingHistogram,
    pub attempt_latency_24h: RollingHistogram,
    pub attempts: RollingCounter,
    pub successes: RollingCounter,
}

/// The settings of a push destination, from its endpoint or the server defaults.
struct Settings {
    url: Option<String>,
    secrets: Vec<Secret>,
    connect_timeout_ms: u64,
    timeout_ms: u64,
    max_in_flight: u32,
    rate_limit_per_s: f64,
    rate_limit_burst: u32,
    disabled: Option<String>,
}

impl Engine {
    /// The destination with `key`, created on first use, with its push state if it is an
    /// endpoint or a URL origin.
    pub(super) fn dest(&mut self, key: &str, now: u64) -> DestId {
        let d = self.index.dest(key);
        if self.index.dests[d].push.is_none() {
            self.refresh_push(d, now);
        }
        d
    }

    /// (Re)builds a destination's push state from its endpoint (or the defaults), keeping
    /// breaker, pause and statistics. Called on creation and on PutEndpoint.
    pub(super) fn refresh_push(&mut self, d: DestId, now: u64) {
        let key = self.index.dests[d].key.clone();
        let Some(settings) = self.settings_of(&key) else {
            return;
        };
        self.generation += 1;
        let target = Arc::new(Target {
            key,
            generation: self.generation,
            secrets: settings.secrets,
            connect_timeout: Duration::from_millis(settings.connect_timeout_ms),
            timeout: Duration::from_millis(settings.timeout_ms),
            pool_size: settings.max_in_flight as usize,
        });
        let bucket = (settings.rate_limit_per_s > 0.0).then(|| {
            let burst = if settings.rate_limit_burst > 0 {
                f64::from(settings.rate_limit_burst)
            } else {
                settings.rate_limit_per_s.max(1.0)
            };
            TokenBucket::new(settings.rate_limit_per_s, burst, now)
        });
        let breaker_config = self.config.delivery.breaker;
        let dest = &mut self.index.dests[d];
        match dest.push.as_deref_mut() {
            Some(push) => {
                push.target = target;
                push.url = settings.url;
                push.max_in_flight = u64::from(settings.max_in_flight);
                // A changed limit (rate or burst) starts a fresh bucket; an unchanged one
                // keeps its tokens, so re-putting an endpoint grants no extra burst.
                let limit = (settings.rate_limit_per_s, settings.rate_limit_burst);
                if (push.rate_limit_per_s, push.rate_limit_burst) != limit || bucket.is_none() {
                    push.bucket = bucket;
                }
                push.rate_limit_per_s = settings.rate_limit_per_s;
                push.rate_limit_burst = settings.rate_limit_burst;
                push.breaker.reconfigure(breaker_config);
                push.disabled = settings.disabled;
            }
            None => {
                dest.push = Some(Box::new(Push {
                    target,
                    url: settings.url,
                    max_in_flight: u64::from(settings.max_in_flight),
                    rate_limit_per_s: settings.rate_limit_per_s,
                    rate_limit_burst: settings.rate_limit_burst,
                    bucket,
                    breaker: Breaker::new(breaker_config),
                    paused_until: 0,
                    disabled: settings.disabled,
                    probe: None,
                    wake: None,
                    attempt_latency_1h: stats::last_hour(Precision::Coarse),
                    attempt_latency_24h: stats::last_day(Precision::Coarse),
                    attempts: RollingCounter::new(60_000, 60),
                    successes: RollingCounter::new(60_000, 60),
                }));
            }
        }
        self.index.want_dispatch(d);
    }

    fn settings_of(&self, key: &str) -> Option<Settings> {
        let c = &self.config.delivery;
        let or = |v: u64, default: u64| if v > 0 { v } else { default };
        if let Some(name) = key.strip_prefix("endpoint:") {
            // An endpoint deleted while messages still named it cannot be delivered to;
            // those wait until it is put again.
            let e = self.endpoints.get(name)?;
            return Some(Settings {
                url: Some(e.url.clone()),
                // Validated by PutEndpoint; a secret that no longer parses is skipped.
                secrets: e
                    .secrets
                    .iter()
                    .filter_map(|s| Secret::parse(s).ok())
                    .collect(),
                connect_timeout_ms: or(e.connect_timeout_ms, c.connect_timeout_ms),
                timeout_ms: or(e.timeout_ms, c.timeout_ms),
                max_in_flight: if e.max_in_flight > 0 {
                    e.max_in_flight
                } else {
                    c.max_in_flight
                },
                rate_limit_per_s: e.rate_limit_per_s,
                rate_limit_burst: e.rate_limit_burst,
                disabled: e.disabled.then(|| e.disabled_reason.clone()),
            });
        }
        key.starts_with("url:").then(|| Settings {
            url: None,
            secrets: Vec::new(),
            connect_timeout_ms: c.connect_timeout_ms,
            timeout_ms: c.timeout_ms,
            max_in_flight: c.max_in_flight,
            rate_limit_per_s: 0.0,
            rate_limit_burst: 0,
            disabled: None,
        })
    }

    /// Hands out every attempt that may go now. Runs at the end of each round; attempts of
    /// messages stored in this round wait in `outbox` until the round has committed.
    pub(super) fn dispatch(&mut self, t: Tx<'_, '_>, now: u64) -> Result<(), StoreError> {
        let queued = std::mem::take(&mut self.index.dispatch);
        for &d in &queued {
            self.index.dests[d].dispatch_queued = false;
        }
        if self.draining || self.deliveries.is_none() {
            return Ok(());
        }
        for d in queued {
            self.dispatch_dest(t, now, d)?;
        }
        Ok(())
    }

    fn dispatch_dest(&mut self, t: Tx<'_, '_>, now: u64, d: DestId) -> Result<(), StoreError> {
        while let Some(id) = self.admit_next(d, now) {
            self.hand_out(t, now, d, id)?;
        }
        Ok(())
    }

    /// The next ready message of `d` that may go now, if any: it has a free slot, a token,
    /// no pause, and a closed breaker (or the half-open probe, which this marks as out).
    /// When the answer is "not before some time", arranges to be woken then.
    fn admit_next(&mut self, d: DestId, now: u64) -> Option<MessageId> {
        let dest = &mut self.index.dests[d];
        let in_flight = dest.in_flight;
        let push = dest.push.as_deref_mut()?;
        // A full destination is queued again when one of its attempts ends.
        if dest.ready.is_empty() || push.disabled.is_some() || in_flight >= push.max_in_flight {
            return None;
        }
        let not_before = if push.paused_until > now {
            Some(push.paused_until)
        } else {
            push.bucket
                .as_mut()
                .map(|b| b.next_token_ms(now))
                .filter(|&at| at > now)
        };
        if let Some(at) = not_before {
            self.wake_at(d, at, now);
            return None;
        }
        let probe = match push.breaker.admit(now) {
            Admit::Yes => false,
            Admit::Probe => true,
            Admit::NotUntil(at) => {
                self.wake_at(d, at, now);
                return None;
            }
            Admit::AwaitingProbe => return None,
        };
        // The ready queue may hold ids that left the Ready state since; skip them.
        let next = std::iter::from_fn(|| dest.ready.pop_front()).find(|id| {
            self.index
                .live
                .get(id)
                .is_some_and(|l| l.state == LiveState::Ready)
        });
        match next {
            Some(id) => {
                if let Some(bucket) = &mut push.bucket {
                    bucket.try_take(now);
                }
                if probe {
                    push.probe = Some(id);
                }
                Some(id)
            }
            None => {
                if probe {
                    push.breaker.probe_lost();
                }
                None
            }
        }
    }

    /// Starts attempt n+1 of ready message `id`: reads its record, marks it in flight (in
    /// memory only) with a safety deadline, and queues the delivery.
    fn hand_out(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        d: DestId,
        id: MessageId,
    ) -> Result<(), StoreError> {
        let Some(push) = self.index.dests[d].push.as_deref() else {
            return Ok(());
        };
        let target = push.target.clone();
        let endpoint_url = push.url.clone();
        let Some(record) = t.record(id)? else {
            return Err(StoreError::Corrupt(format!(
                "message {id} is indexed but not stored"
            )));
        };
        let url = match endpoint_url {
            Some(url) => url,
            None => match Destination::decode(&record.destination) {
                Some(Destination::Url(url)) => url,
                _ => {
                    return Err(StoreError::Corrupt(format!(
                        "message {id} in a URL destination has no URL"
                    )));
                }
            },
        };
        let attempt = self.index.live.get(&id).map_or(0, |l| l.attempts) + 1;
        // Kept so that a success need not read the record again.
        self.flight.insert(id, Meta::of(&record));
        let deadline = now
            .saturating_add(target.timeout.as_millis() as u64)
            .saturating_add(LOST_AFTER_TIMEOUT_MS);
        self.transition(id, LiveState::Leased, attempt, deadline);
        let delivery = Delivery {
            id,
            attempt,
            target,
            url,
            payload: record.payload.into(),
            headers: record.headers,
            idempotency_key: record.idempotency_key,
            timestamp_s: now / 1_000,
        };
        if self.fresh.contains(&id) {
            self.outbox.push(delivery);
        } else {
            self.early.push(delivery);
        }
        Ok(())
    }

    /// Makes sure destination `d` is looked at again by `at`.
    fn wake_at(&mut self, d: DestId, at: u64, now: u64) {
        let tick = self.tick(at.max(now + 1));
        let Some(push) = self.index.dests[d].push.as_deref_mut() else {
            return;
        };
        if let Some((when, key)) = push.wake {
            if when <= at {
                return;
            }
            self.wheel.remove(key);
        }
        let key = self.wheel.insert(tick, Timer::Wake(d));
        if let Some(push) = self.index.dests[d].push.as_deref_mut() {
            push.wake = Some((at, key));
        }
    }

    /// A `Timer::Wake` fired.
    pub(super) fn woken(&mut self, d: DestId) {
        if let Some(push) = self.index.dests[d].push.as_deref_mut() {
            push.wake = None;
        }
        self.index.want_dispatch(d);
    }

    /// Applies the outcome of one attempt. A report for an attempt the engine has already
    /// given up (or a message since acknowledged otherwise) changes nothing.
    pub(super) fn attempted(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        report: AttemptReport,
    ) -> Result<(), StoreError> {
        let AttemptReport {
            id,
            attempt,
            verdict,
            latency_us,
        } = report;
        let d = match self.index.live.get(&id) {
            Some(live) if live.state == LiveState::Leased && live.attempts == attempt => live.dest,
            _ => return Ok(()),
        };
        let meta = self.flight.remove(&id);
        let slow_ms = self.config.delivery.slow_breaker_threshold_ms;
        let max_pause_ms = self
            .config
            .delivery
            .max_retry_after_secs
            .saturating_mul(1_000);
        let Some(push) = self.index.dests[d].push.as_deref_mut() else {
            return Ok(());
        };
        let probe = push.probe == Some(id);
        if probe {
            push.probe = None;
        }
        push.attempts.add(now, 1);
        push.attempt_latency_1h.record(now, latency_us);
        push.attempt_latency_24h.record(now, latency_us);
        self.index.want_dispatch(d);
        match verdict {
            Verdict::Delivered { status } => {
                let Some(push) = self.index.dests[d].push.as_deref_mut() else {
                    return Ok(());
                };
                push.successes.add(now, 1);
                push.breaker.on_success(probe);
                let end = AttemptEnd::http(now, latency_us, "delivered", "", status);
                self.complete(t, now, id, end, meta)?;
            }
            Verdict::Retry {
                status,
                outcome,
                error,
                retry_after,
            } => {
                let Some(push) = self.index.dests[d].push.as_deref_mut() else {
                    return Ok(());
                };
                // Only worth the percentile when it can change the decision.
                let slow = push.breaker.state() == BreakerState::Closed
                    && push.breaker.consecutive_failures() + 1
                        >= self.config.delivery.breaker.slow_failure_threshold
                    && push.attempt_latency_1h.summary(now).p95_ms > slow_ms as f64;
                push.breaker.on_failure(now, probe, slow);
                if let Some(ra) = retry_after {
                    let until = match ra {
                        RetryAfter::Seconds(s) => now.saturating_add(s.saturating_mul(1_000)),
                        RetryAfter::At(ms) => ms,
                    }
                    .min(now.saturating_add(max_pause_ms));
                    push.paused_until = push.paused_until.max(until);
                }
                let end = AttemptEnd::http(now, latency_us, outcome, &error, status);
                self.fail_attempt(t, now, id, end, None, false)?;
            }
            Verdict::Permanent { status, error } => {
                if let Some(push) = self.index.dests[d].push.as_deref_mut() {
                    // The endpoint answered: it is up, whatever it thinks of the message.
                    push.breaker.on_success(probe);
                }
                let end = AttemptEnd::http(now, latency_us, "rejected", &error, status);
                self.fail_attempt(t, now, id, end, None, true)?;
                if status == 410 {
                    self.disable(t, now, d, format!("410 Gone from message {id}: {error}"))?;
                }
            }
            Verdict::Refused { error } => {
                if probe && let Some(push) = self.index.dests[d].push.as_deref_mut() {
                    push.breaker.probe_lost();
                }
                let end = AttemptEnd::http(now, latency_us, "refused", &error, 0);
                self.fail_attempt(t, now, id, end, None, true)?;
            }
        }
        Ok(())
    }

    /// A push attempt's deadline passed with no report: count it as a failed attempt.
    pub(super) fn attempt_lost(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        id: MessageId,
        attempt: u32,
    ) -> Result<(), StoreError> {
        self.attempted(
            t,
            now,
            AttemptReport {
                id,
                attempt,
                verdict: Verdict::Retry {
                    status: 0,
                    outcome: "delivery_lost",
                    error: "no outcome reported before the attempt's deadline".into(),
                    retry_after: None,
                },
                latency_us: 0,
            },
        )
    }

    /// Disables an endpoint (410 Gone): durable, visible in GetEndpoint and Stats, undone by
    /// PutEndpoint. Its messages wait. Ad-hoc URL origins have no endpoint to disable.
    fn disable(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        d: DestId,
        reason: String,
    ) -> Result<(), StoreError> {
        let key = self.index.dests[d].key.clone();
        let Some(name) = key.strip_prefix("endpoint:") else {
            return Ok(());
        };
        let Some(endpoint) = self.endpoints.get_mut(name) else {
            return Ok(());
        };
        endpoint.disabled = true;
        endpoint.disabled_reason.clone_from(&reason);
        endpoint.disabled_ms = now;
        t.put_endpoint(endpoint)?;
        tracing::warn!(endpoint = name, %reason, "endpoint disabled");
        if let Some(push) = self.index.dests[d].push.as_deref_mut() {
            push.disabled = Some(reason);
        }
        Ok(())
    }
}

impl Push {
    pub fn stats(&self, now: u64, in_flight: u64, slow_threshold_ms: u64) -> PushSnapshot {
        let attempt_1h = self.attempt_latency_1h.summary(now);
        let attempts = self.attempts.sum(now);
        PushSnapshot {
            disabled: self.disabled.clone(),
            breaker: self.breaker.state(),
            breaker_cooldown_ms: self.breaker.cooldown_ms(),
            breaker_openings: self.breaker.openings(),
            consecutive_failures: self.breaker.consecutive_failures(),
            paused_until_ms: (self.paused_until > now).then_some(self.paused_until),
            in_flight,
            max_in_flight: self.max_in_flight,
            rate_limit_per_s: self.rate_limit_per_s,
            slow: attempt_1h.count > 0 && attempt_1h.p95_ms > slow_threshold_ms as f64,
            attempts_last_hour: attempts,
            success_rate_last_hour: if attempts == 0 {
                1.0
            } else {
                self.successes.sum(now) as f64 / attempts as f64
            },
            attempt_latency_last_hour: attempt_1h,
            attempt_latency_last_24h: self.attempt_latency_24h.summary(now),
        }
    }
}
