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

use super::gate::{self, Admission, Gate, Outcome};
use super::index::{DestId, LiveState, Push, Timer};
use super::lease::{AttemptEnd, Fate, Meta};
use super::{Engine, Tx};
use hookd_core::breaker::BreakerState;
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::outcome::AttemptOutcome;
use hookd_core::push::{AttemptReport, Delivery, Target, Verdict};
use hookd_core::signing::Secret;
use hookd_core::stats::{AttemptStats, PushSnapshot};
use hookd_storage::store::StoreError;

/// How long past its timeout an attempt may stay unreported before the engine gives it up
/// as lost (the dispatcher always reports; this is the safety net).
const LOST_AFTER_TIMEOUT_MS: u64 = 30_000;

/// The settings of a push destination, from its endpoint or the server defaults.
struct Settings {
    url: Option<String>,
    secrets: Vec<Secret>,
    headers: std::collections::BTreeMap<String, String>,
    proxy: Option<hookd_core::push::Redacted>,
    client_identity: Option<hookd_core::push::ClientIdentity>,
    oauth2: Option<hookd_core::push::OAuth2>,
    connect_timeout_ms: u64,
    timeout_ms: u64,
    limits: gate::Limits,
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
        let share = self.tenants.share_of(self.index.dests[d].tenant);
        let target = Arc::new(Target {
            share,
            key,
            secrets: settings.secrets,
            headers: settings.headers,
            proxy: settings.proxy,
            client_identity: settings.client_identity,
            oauth2: settings.oauth2,
            connect_timeout: Duration::from_millis(settings.connect_timeout_ms),
            timeout: Duration::from_millis(settings.timeout_ms),
            pool_size: usize::try_from(settings.limits.max_in_flight).unwrap_or(usize::MAX),
            pool: Default::default(),
        });
        let policy = self.gate_policy();
        let dest = &mut self.index.dests[d];
        match dest.push.as_deref_mut() {
            Some(push) => {
                push.target = target;
                push.url = settings.url;
                push.gate
                    .reconfigure(settings.limits, policy, settings.disabled, now);
            }
            None => {
                dest.push = Some(Box::new(Push {
                    target,
                    url: settings.url,
                    gate: Gate::new(settings.limits, policy, settings.disabled, now),
                    wake: None,
                    stats: AttemptStats::new(),
                }));
            }
        }
        self.index.want_dispatch(d);
    }

    fn gate_policy(&self) -> gate::Policy {
        let c = &self.config.push;
        gate::Policy {
            breaker: c.breaker,
            slow_ms: c.slow_breaker_threshold_ms,
            max_pause_ms: c.max_retry_after_secs.saturating_mul(1_000),
        }
    }

    fn settings_of(&self, key: &str) -> Option<Settings> {
        let c = &self.config.push;
        let or = |v: u64, default: u64| if v > 0 { v } else { default };
        if let Some((tenant, name)) = Destination::endpoint_of_key(key) {
            // An endpoint deleted while messages still named it cannot be delivered to;
            // those wait until it is put again.
            let e = self.endpoints.get(tenant, name)?;
            return Some(Settings {
                url: Some(e.url.clone()),
                // Validated by PutEndpoint, and checked to open at start (secrets.rs); a
                // secret that no longer parses is skipped.
                secrets: e
                    .secrets
                    .iter()
                    .filter_map(|s| {
                        hookd_core::secrets::open(self.config.sealer.as_deref(), name, s).ok()
                    })
                    .filter_map(|s| Secret::parse(&s).ok())
                    .collect(),
                headers: e.headers.clone(),
                proxy: (!e.proxy_url.is_empty())
                    .then(|| hookd_core::push::Redacted(e.proxy_url.clone())),
                // Validated by PutEndpoint; a key that does not open (keys removed since)
                // leaves the endpoint without its certificate, as a bad secret is skipped.
                client_identity: (!e.client_certificate_pem.is_empty())
                    .then(|| {
                        hookd_core::secrets::open(
                            self.config.sealer.as_deref(),
                            name,
                            &e.client_key_pem,
                        )
                        .ok()
                    })
                    .flatten()
                    .map(|key| hookd_core::push::ClientIdentity {
                        certificate_pem: e.client_certificate_pem.clone(),
                        key_pem: hookd_core::push::Redacted(key),
                    }),
                oauth2: e.oauth2.as_ref().and_then(|o| {
                    let secret = hookd_core::secrets::open(
                        self.config.sealer.as_deref(),
                        name,
                        &o.client_secret,
                    )
                    .ok()?;
                    Some(hookd_core::push::OAuth2 {
                        token_url: o.token_url.clone(),
                        client_id: o.client_id.clone(),
                        client_secret: hookd_core::push::Redacted(secret),
                        scopes: o.scopes.clone(),
                        audience: o.audience.clone(),
                    })
                }),
                connect_timeout_ms: or(e.connect_timeout_ms, c.connect_timeout_ms),
                timeout_ms: or(e.timeout_ms, c.timeout_ms),
                limits: gate::Limits {
                    max_in_flight: u64::from(if e.max_in_flight > 0 {
                        e.max_in_flight
                    } else {
                        c.max_in_flight
                    }),
                    rate_limit_per_s: e.rate_limit_per_s,
                    rate_limit_burst: e.rate_limit_burst,
                },
                // An operator's pause holds the endpoint like a 410 does (messages wait).
                disabled: if e.paused {
                    Some(format!("paused: {}", e.paused_reason))
                } else {
                    e.disabled.then(|| e.disabled_reason.clone())
                },
            });
        }
        Destination::is_url_key(key).then(|| Settings {
            url: None,
            secrets: Vec::new(),
            headers: Default::default(),
            proxy: None,
            client_identity: None,
            oauth2: None,
            connect_timeout_ms: c.connect_timeout_ms,
            timeout_ms: c.timeout_ms,
            limits: gate::Limits {
                max_in_flight: u64::from(c.max_in_flight),
                rate_limit_per_s: 0.0,
                rate_limit_burst: 0,
            },
            disabled: None,
        })
    }

    /// The next ready message of `d` that may go now, if any (see [`Gate::admit`]). When
    /// the answer is "not before some time", arranges to be woken then.
    pub(super) fn admit_next(&mut self, d: DestId, now: u64) -> Option<MessageId> {
        let dest = &mut self.index.dests[d];
        let in_flight = dest.counts.in_flight;
        if !dest.has_ready() {
            return None;
        }
        let push = dest.push.as_deref_mut()?;
        let before = push.gate.breaker().state();
        let admission = push.gate.admit(now, in_flight);
        if let Some(e) = breaker_moved(&dest.key, before, push, now)
            && self.config.events.wanted()
        {
            self.out.watched.push(e);
        }
        let probe = match admission {
            Admission::Go { probe } => probe,
            Admission::NotBefore(at) => {
                self.wake_at(d, at, now);
                return None;
            }
            // A full destination is queued again when one of its attempts ends.
            Admission::Blocked => return None,
        };
        let next = self.index.pop_ready(d);
        let push = self.index.dests[d].push.as_deref_mut()?;
        match next {
            Some(id) => push.gate.sent(id, probe, now),
            None => push.gate.nothing_sent(probe),
        }
        next
    }

    /// Starts attempt n+1 of ready message `id`: reads its record, marks it in flight (in
    /// memory only) with a safety deadline, and queues the delivery.
    pub(super) fn hand_out(
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
            None => match Destination::decode(&record.destination).map(|d| d.to) {
                Some(hookd_core::destination::To::Url(url)) => url,
                _ => {
                    return Err(StoreError::Corrupt(format!(
                        "message {id} in a URL destination has no URL"
                    )));
                }
            },
        };
        let (attempt, ordered, replayed) =
            self.index.live.get(&id).map_or((1, false, false), |l| {
                (
                    l.attempts + 1,
                    l.lane != super::index::LaneTag::None,
                    l.replayed,
                )
            });
        // An ordered message's place in its lane is in its schedule row.
        let lane = match ordered {
            true => t.schedule(id)?.lane.map(|l| hookd_core::push::InLane {
                key: l.key,
                seq: l.seq,
                out_of_order: l.detached,
            }),
            false => None,
        };
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
            event_type: record.event_type,
            event_id: record.event_id,
            timestamp_s: now / 1_000,
            lane,
            replay_of: record.replay_of,
            // A replay job's copy names its job; a dead letter replayed in place says so.
            replay_job: match replayed && record.replay_job.is_empty() {
                true => hookd_core::push::REPLAYED_DEAD_LETTER.to_owned(),
                false => record.replay_job,
            },
        };
        let synced_round = self.pipeline.syncer.synced_round();
        self.out.deliver(id, delivery, synced_round);
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

    /// Applies the outcome of one attempt: to the destination's statistics and gate, then
    /// to the message (completed, retried or dead-lettered). A report for an attempt the
    /// engine has already given up (or a message since acknowledged otherwise) changes
    /// nothing.
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
        let success = matches!(verdict, Verdict::Delivered { .. });
        self.index.dests[d].activity.attempted(now, success);
        self.total.attempted(now, success);
        let meta = self.flight.remove(&id);
        let Some(push) = self.index.dests[d].push.as_deref_mut() else {
            return Ok(());
        };
        let outcome = match &verdict {
            Verdict::Delivered { .. } => Outcome::Delivered,
            Verdict::Retry { retry_after, .. } => Outcome::Failed {
                retry_after: *retry_after,
            },
            Verdict::Permanent { .. } => Outcome::Rejected,
            Verdict::Refused { .. } | Verdict::Local { .. } => Outcome::Refused,
        };
        push.stats
            .record(now, latency_us, outcome == Outcome::Delivered);
        let (status, failure) = match &verdict {
            Verdict::Delivered { status } | Verdict::Permanent { status, .. } => (*status, None),
            Verdict::Retry {
                status, outcome, ..
            } => (*status, Some(*outcome)),
            Verdict::Refused { .. } => (0, Some(AttemptOutcome::Refused)),
            Verdict::Local { .. } => (0, Some(AttemptOutcome::LocalError)),
        };
        self.config
            .metrics
            .push_attempt(status, failure, latency_us);
        let stats = &push.stats;
        let (before, paused_before) = (push.gate.breaker().state(), push.gate.paused_until(now));
        push.gate
            .on_outcome(id, outcome, now, || stats.latency_1h.summary(now).p95_ms);
        let key = &self.index.dests[d].key;
        if let Some(push) = self.index.dests[d].push.as_deref() {
            if let Some(e) = breaker_moved(key, before, push, now)
                && self.config.events.wanted()
            {
                self.out.watched.push(e);
            }
            let paused = push.gate.paused_until(now);
            if paused != paused_before
                && let Some(until) = paused
            {
                tracing::info!(
                    destination = %key,
                    pause_ms = until.saturating_sub(now),
                    "endpoint paused by its Retry-After"
                );
            }
        }
        self.index.want_dispatch(d);
        match verdict {
            Verdict::Delivered { status } => {
                let end = AttemptEnd::http(now, latency_us, AttemptOutcome::Delivered, "", status);
                self.complete(t, now, id, end, meta)?;
            }
            Verdict::Retry {
                status,
                outcome,
                error,
                ..
            } => {
                let end = AttemptEnd::http(now, latency_us, outcome, &error, status);
                self.fail_attempt(t, now, id, end, Fate::Retry { delay_ms: None })?;
            }
            Verdict::Permanent { status, error } => {
                let end =
                    AttemptEnd::http(now, latency_us, AttemptOutcome::Rejected, &error, status);
                self.fail_attempt(t, now, id, end, Fate::DeadLetter)?;
                if status == 410 {
                    self.disable(t, now, d, format!("410 Gone from message {id}: {error}"))?;
                }
            }
            Verdict::Refused { error } => {
                let end = AttemptEnd::http(now, latency_us, AttemptOutcome::Refused, &error, 0);
                self.fail_attempt(t, now, id, end, Fate::DeadLetter)?;
            }
            Verdict::Local { error } => {
                let end = AttemptEnd::http(now, latency_us, AttemptOutcome::LocalError, &error, 0);
                self.postpone(t, now, id, end)?;
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
                    outcome: AttemptOutcome::DeliveryLost,
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
        let Some((tenant, name)) = Destination::endpoint_of_key(&key) else {
            return Ok(());
        };
        let Some(endpoint) = self.endpoints.get_mut(tenant, name) else {
            return Ok(());
        };
        endpoint.disabled = true;
        endpoint.disabled_reason.clone_from(&reason);
        hookd_storage::store::bound_text(
            &mut endpoint.disabled_reason,
            hookd_storage::store::MAX_TEXT_BYTES,
        );
        endpoint.disabled_ms = now;
        t.put_endpoint(tenant, endpoint)?;
        tracing::warn!(endpoint = name, %reason, "endpoint disabled");
        self.watch(|| crate::events::Event {
            at_ms: now,
            kind: "endpoint_disabled",
            destination: key.clone(),
            message_id: String::new(),
            attempt: 0,
            http_status: 0,
            latency_us: 0,
            detail: reason.clone(),
        });
        if let Some(push) = self.index.dests[d].push.as_deref_mut() {
            push.gate.disable(reason);
        }
        Ok(())
    }
}

impl Push {
    pub(crate) fn stats(&self, now: u64, in_flight: u64, slow_threshold_ms: u64) -> PushSnapshot {
        let attempt_1h = self.stats.latency_1h.summary(now);
        let attempts = self.stats.attempts.sum(now);
        let breaker = self.gate.breaker();
        PushSnapshot {
            disabled: self.gate.disabled().map(str::to_owned),
            breaker: breaker.state(),
            breaker_cooldown_ms: breaker.cooldown_ms(),
            breaker_openings: breaker.openings(),
            consecutive_failures: breaker.consecutive_failures(),
            paused_until_ms: self.gate.paused_until(now),
            in_flight,
            max_in_flight: self.gate.limits().max_in_flight,
            rate_limit_per_s: self.gate.limits().rate_limit_per_s,
            slow: attempt_1h.count > 0 && attempt_1h.p95_ms > slow_threshold_ms as f64,
            attempts_last_hour: attempts,
            success_rate_last_hour: if attempts == 0 {
                1.0
            } else {
                self.stats.successes.sum(now) as f64 / attempts as f64
            },
            attempt_latency_last_hour: attempt_1h,
            attempt_latency_last_24h: self.stats.latency_24h.summary(now),
        }
    }
}

/// One info line, and an event for watchers, for each move of a destination's breaker
/// between closed, open and half-open (operators follow an endpoint's outages by these).
fn breaker_moved(
    key: &str,
    before: BreakerState,
    push: &Push,
    now: u64,
) -> Option<crate::events::Event> {
    let after = push.gate.breaker().state();
    if std::mem::discriminant(&before) == std::mem::discriminant(&after) {
        return None;
    }
    let breaker = push.gate.breaker();
    let (kind, detail) = match after {
        BreakerState::Open { until_ms } => {
            let cooldown_ms = until_ms.saturating_sub(now);
            tracing::info!(
                destination = %key,
                cooldown_ms,
                consecutive_failures = breaker.consecutive_failures(),
                openings = breaker.openings(),
                "breaker opened"
            );
            ("breaker_opened", format!("cooldown {cooldown_ms} ms"))
        }
        BreakerState::HalfOpen { .. } => {
            tracing::info!(destination = %key, "breaker half-open: one probe attempt goes");
            ("breaker_half_open", String::new())
        }
        BreakerState::Closed => {
            tracing::info!(destination = %key, "breaker closed");
            ("breaker_closed", String::new())
        }
    };
    Some(crate::events::Event {
        at_ms: now,
        kind,
        destination: key.to_owned(),
        message_id: String::new(),
        attempt: 0,
        http_status: 0,
        latency_us: 0,
        detail,
    })
}
