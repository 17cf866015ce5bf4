//! A tenant's quotas (issue #51, 4): what one customer may hold and send, each limit
//! optional (0: none of its own; hookd's watermarks still apply to everyone).
//!
//! Pure, like the watermarks beside it: the engine feeds it what the tenant holds and has
//! sent, and it answers with a throttle fill or the quota that refuses. A refusal names the
//! quota, what the tenant uses of it and when to try again, so a producer backs off exactly
//! as it does at a watermark (RESOURCE_EXHAUSTED with RetryInfo, 429 with Retry-After).

use crate::backpressure::Held;

/// A day of `events_per_day`: UTC days, as the epoch counts them.
pub const DAY_MS: u64 = 86_400_000;

/// A tenant's limits; 0 is "no limit".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    /// Live messages (pending, awaiting retry or in flight) over its destinations.
    pub max_live_messages: u64,
    /// Bytes of its live messages' records.
    pub max_live_bytes: u64,
    /// Events accepted per UTC day (an enqueue, a publish or an ingested webhook is one).
    pub max_events_per_day: u64,
    /// Events accepted per second, with a burst of one second's worth.
    pub max_events_per_second: u64,
    pub max_endpoints: u64,
    pub max_subscriptions: u64,
    pub max_sources: u64,
}

/// One of a tenant's quotas, by the name its field has on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Measure {
    LiveMessages,
    LiveBytes,
    EventsPerDay,
    EventsPerSecond,
    Endpoints,
    Subscriptions,
    Sources,
}

impl Measure {
    pub const ALL: [Self; 7] = [
        Self::LiveMessages,
        Self::LiveBytes,
        Self::EventsPerDay,
        Self::EventsPerSecond,
        Self::Endpoints,
        Self::Subscriptions,
        Self::Sources,
    ];

    /// The quota's field (`Tenant.quota.max_live_messages`...).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::LiveMessages => "max_live_messages",
            Self::LiveBytes => "max_live_bytes",
            Self::EventsPerDay => "max_events_per_day",
            Self::EventsPerSecond => "max_events_per_second",
            Self::Endpoints => "max_endpoints",
            Self::Subscriptions => "max_subscriptions",
            Self::Sources => "max_sources",
        }
    }
}

impl Quota {
    /// Its limit of `measure` (0: none).
    pub const fn limit(&self, measure: Measure) -> u64 {
        match measure {
            Measure::LiveMessages => self.max_live_messages,
            Measure::LiveBytes => self.max_live_bytes,
            Measure::EventsPerDay => self.max_events_per_day,
            Measure::EventsPerSecond => self.max_events_per_second,
            Measure::Endpoints => self.max_endpoints,
            Measure::Subscriptions => self.max_subscriptions,
            Measure::Sources => self.max_sources,
        }
    }

    /// No limit at all.
    pub fn is_empty(&self) -> bool {
        Measure::ALL.iter().all(|m| self.limit(*m) == 0)
    }

    /// Whether an event adding `adding` to the `held` live messages fits, and how full it
    /// leaves the fuller of the two live quotas (a share of its limit, for the throttle
    /// hint; 0 without either). `retry_after_ms` is the watermarks' retry delay: live
    /// messages leave as they are delivered, as they do at a watermark. An empty tenant
    /// takes any one event, as an empty destination does at its watermark.
    pub fn assess_live(
        &self,
        held: Held,
        adding: Held,
        retry_after_ms: u64,
    ) -> Result<f64, OverQuota> {
        let mut fill: f64 = 0.0;
        for (measure, held, adding) in [
            (Measure::LiveMessages, held.messages, adding.messages),
            (Measure::LiveBytes, held.bytes, adding.bytes),
        ] {
            let limit = self.limit(measure);
            if limit == 0 {
                continue;
            }
            let after = held.saturating_add(adding);
            if held > 0 && after > limit {
                return Err(OverQuota {
                    measure,
                    used: held,
                    limit,
                    retry_after_ms: Some(retry_after_ms),
                });
            }
            fill = fill.max(after as f64 / limit as f64);
        }
        Ok(fill)
    }

    /// Whether one more of an object of `measure`'s kind fits beside the `count` there are.
    pub fn assess_count(&self, measure: Measure, count: u64) -> Result<(), OverQuota> {
        let limit = self.limit(measure);
        if limit > 0 && count >= limit {
            return Err(OverQuota {
                measure,
                used: count,
                limit,
                retry_after_ms: None,
            });
        }
        Ok(())
    }

    /// Whether `adding` more events fit beside the `sent` events of day `day`, at `now_ms`.
    pub fn assess_day(
        &self,
        day: u64,
        sent: u64,
        adding: u64,
        now_ms: u64,
    ) -> Result<(), OverQuota> {
        let limit = self.max_events_per_day;
        let sent = if day == now_ms / DAY_MS { sent } else { 0 };
        if limit > 0 && sent.saturating_add(adding) > limit {
            return Err(OverQuota {
                measure: Measure::EventsPerDay,
                used: sent,
                limit,
                // The next UTC midnight.
                retry_after_ms: Some((now_ms / DAY_MS + 1) * DAY_MS - now_ms),
            });
        }
        Ok(())
    }
}

/// A quota that refuses an event or an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverQuota {
    pub measure: Measure,
    /// What the tenant uses of it, before what was refused.
    pub used: u64,
    pub limit: u64,
    /// When it may fit (`None`: when the tenant removes one, or its quota is raised).
    pub retry_after_ms: Option<u64>,
}

impl std::fmt::Display for OverQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.measure {
            Measure::LiveMessages => "holds {used} live messages",
            Measure::LiveBytes => "holds {used} bytes of live messages",
            Measure::EventsPerDay => "sent {used} events today (UTC)",
            Measure::EventsPerSecond => "sends events at its rate",
            Measure::Endpoints => "has {used} endpoints",
            Measure::Subscriptions => "has {used} subscriptions",
            Measure::Sources => "has {used} sources",
        }
        .replace("{used}", &self.used.to_string());
        write!(
            f,
            "tenant quota {} = {}: the tenant {what}",
            self.measure.as_str(),
            self.limit
        )?;
        match self.retry_after_ms {
            Some(ms) => write!(f, "; retry after {ms} ms"),
            None => write!(f, "; remove one or raise the quota"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(messages: u64, bytes: u64) -> Held {
        Held { messages, bytes }
    }

    #[test]
    fn no_quota_admits_everything_with_no_fill() {
        let q = Quota::default();
        assert!(q.is_empty());
        assert_eq!(
            q.assess_live(held(u64::MAX / 2, 1 << 40), held(1, 10), 1_000),
            Ok(0.0)
        );
        assert_eq!(q.assess_count(Measure::Endpoints, 1_000_000), Ok(()));
        assert_eq!(q.assess_day(0, u64::MAX - 1, 1, 5), Ok(()));
    }

    #[test]
    fn live_quotas_refuse_past_the_limit_and_fill_toward_it() {
        let q = Quota {
            max_live_messages: 10,
            max_live_bytes: 1_000,
            ..Quota::default()
        };
        assert_eq!(q.assess_live(held(4, 100), held(1, 100), 7), Ok(0.5));
        let over = q.assess_live(held(10, 100), held(1, 1), 7).unwrap_err();
        assert_eq!(
            (over.measure, over.used, over.limit, over.retry_after_ms),
            (Measure::LiveMessages, 10, 10, Some(7))
        );
        assert_eq!(
            over.to_string(),
            "tenant quota max_live_messages = 10: the tenant holds 10 live messages; retry after 7 ms"
        );
        let over = q.assess_live(held(1, 950), held(1, 100), 7).unwrap_err();
        assert_eq!(over.measure, Measure::LiveBytes);
        // An empty tenant takes one event even if it is bigger than its byte quota.
        assert!(q.assess_live(held(0, 0), held(1, 5_000), 7).is_ok());
    }

    #[test]
    fn the_day_quota_counts_today_only_and_retries_at_midnight() {
        let q = Quota {
            max_events_per_day: 3,
            ..Quota::default()
        };
        let now = 5 * DAY_MS + 1_000;
        assert_eq!(q.assess_day(5, 2, 1, now), Ok(()));
        let over = q.assess_day(5, 3, 1, now).unwrap_err();
        assert_eq!(over.retry_after_ms, Some(DAY_MS - 1_000));
        assert_eq!(over.used, 3);
        // Yesterday's count does not hold today.
        assert_eq!(q.assess_day(4, 3, 1, now), Ok(()));
    }

    #[test]
    fn counts_refuse_the_one_past_the_limit() {
        let q = Quota {
            max_subscriptions: 2,
            ..Quota::default()
        };
        assert_eq!(q.assess_count(Measure::Subscriptions, 1), Ok(()));
        let over = q.assess_count(Measure::Subscriptions, 2).unwrap_err();
        assert_eq!(over.retry_after_ms, None);
        assert!(over.to_string().contains("max_subscriptions = 2"));
        assert_eq!(q.assess_count(Measure::Sources, 100), Ok(()));
    }
}
