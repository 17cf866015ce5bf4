//! Alerts on the engine thread: every `alerts.evaluate_every_secs`, the figures of the
//! totals and of every destination go through `alerts::Alerts`; each change is logged,
//! published to watchers, and enqueued to the notify endpoints like any other message
//! (retries, signing, dead letters).

use super::{Engine, NewMessage, Tx};
use hookd_core::alerts::{Change, Figures, TOTAL, notification};
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_core::stats::AlertSnapshot;
use hookd_storage::store::{MessageRecord, StoreError};

/// Destinations evaluated per sweep step (every 250 ms): an evaluation of thousands of
/// endpoints is spread over several rounds instead of stalling one.
const ALERT_STEP: usize = 512;

impl Engine {
    /// One step of an evaluation: the totals when it starts, then the next
    /// [`ALERT_STEP`] destinations; `alert_cursor` says where the next step continues.
    pub(super) fn evaluate_alerts(&mut self, t: Tx<'_, '_>, now: u64) -> Result<(), StoreError> {
        let config = &self.config.alerts;
        let mut changes = Vec::new();
        let age = |id: Option<MessageId>| {
            id.map_or(0.0, |id| now.saturating_sub(id.unix_ms()) as f64 / 1e3)
        };
        if self.housekeeping.alert_cursor.is_none() {
            let totals = self.index.totals;
            let total = Figures {
                queue_depth: totals.pending + totals.awaiting_retry + totals.in_flight,
                dead_letters: totals.dead,
                oldest_pending_secs: age(self.index.oldest()),
                ..self.total.alert_figures(now, config)
            };
            self.housekeeping
                .alerts
                .evaluate(config, now, TOTAL, &total, &mut changes);
        }
        let mut last = None;
        let mut seen = 0;
        for dest in self.index.page(self.housekeeping.alert_cursor.as_deref()) {
            if seen == ALERT_STEP {
                break;
            }
            seen += 1;
            last = Some(dest.key.clone());
            let c = dest.counts;
            let attempt_p95_ms = dest.push.as_ref().and_then(|p| {
                // Only endpoints with attempts this hour have a p95 worth computing.
                (p.stats.attempts.sum(now) > 0).then(|| p.stats.latency_1h.summary(now).p95_ms)
            });
            let figures = Figures {
                queue_depth: c.pending + c.awaiting_retry + c.in_flight,
                dead_letters: c.dead,
                oldest_pending_secs: dest.oldest_age_ms(now) as f64 / 1e3,
                attempt_p95_ms,
                ..dest.activity.alert_figures(now, config)
            };
            self.housekeeping
                .alerts
                .evaluate(config, now, &dest.key, &figures, &mut changes);
        }
        // A full step may have more after it; a short one ends the evaluation.
        self.housekeeping.alert_cursor = if seen == ALERT_STEP { last } else { None };
        for change in changes {
            self.alert_changed(t, now, change)?;
        }
        Ok(())
    }

    fn alert_changed(&mut self, t: Tx<'_, '_>, now: u64, change: Change) -> Result<(), StoreError> {
        let summary = change.summary();
        // Thousands of destinations may change at once (an outage of ad-hoc URLs): a
        // bounded number of lines, and the count of those left out; the change itself
        // still reaches Watch, the notifications and /metrics.
        static LOG: hookd_core::ratelog::LogLimit = hookd_core::ratelog::LogLimit::new(10, 20);
        if let Some(suppressed) = LOG.ready() {
            if change.to > change.from {
                tracing::warn!(alert = change.kind.as_str(), destination = %change.destination, level = change.to.as_str(), value = change.value, suppressed, "{summary}");
            } else {
                tracing::info!(alert = change.kind.as_str(), destination = %change.destination, level = change.to.as_str(), value = change.value, suppressed, "{summary}");
            }
        }
        self.watch(|| crate::events::Event {
            at_ms: now,
            kind: "alert",
            destination: change.destination.clone(),
            message_id: String::new(),
            attempt: 0,
            http_status: 0,
            latency_us: 0,
            detail: summary.clone(),
        });
        for n in self.config.alerts.notify.clone() {
            // The operator's endpoints: tenant `default`'s.
            let target = Destination::endpoint(TenantId::DEFAULT, n.endpoint.clone());
            // An alert endpoint's own trouble is logged, not sent to itself (no loop).
            if change.destination == target.key() {
                continue;
            }
            let record = MessageRecord {
                event_type: "hookd.alert".into(),
                headers: [("content-type".to_owned(), "application/json".to_owned())].into(),
                created_ms: now,
                payload: notification(&n, &change),
                ..Default::default()
            };
            let m = NewMessage::from_record(MessageId::generate(now), target, record, 0, 0);
            if let Err(refusal) = self.enqueue(t, now, m)? {
                static LOG: hookd_core::ratelog::LogLimit =
                    hookd_core::ratelog::LogLimit::new(10, 5);
                if let Some(suppressed) = LOG.ready() {
                    tracing::warn!(endpoint = %n.endpoint, %refusal, suppressed, "an alert notification could not be enqueued (is the endpoint put?)");
                }
            }
        }
        Ok(())
    }

    /// Every alert state kept, for Stats and `/metrics`.
    pub(super) fn alert_states(&self) -> Vec<AlertSnapshot> {
        self.housekeeping
            .alerts
            .states()
            .into_iter()
            .map(|(kind, destination, s)| {
                let (warning, critical) = kind.thresholds(&self.config.alerts);
                AlertSnapshot {
                    alert: kind.as_str(),
                    destination,
                    level: s.level.as_str(),
                    since_ms: s.since_ms,
                    value: s.value,
                    warning,
                    critical,
                }
            })
            .collect()
    }
}
