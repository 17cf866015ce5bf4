//! Tenants' quotas in the engine (issue #51, 4): the one place every event is admitted
//! (enqueue, a batch's items, publish, ingest) and every endpoint, subscription and source
//! is made, so a quota holds whichever edge the event or object came through.
//!
//! Only tenants with a quota have state here, so a hookd whose tenants have none pays one
//! empty-map lookup per event. The day's count of events is written into the tenant's
//! record in the round that accepted them (one small put per tenant per round, only for
//! tenants with a day quota), so a restart keeps it; the rate's bucket is memory only (a
//! restart starts it full, as it does every other token bucket).

use hookd_core::backpressure::Held;
use hookd_core::limiter::TokenBucket;
use hookd_core::quota::{DAY_MS, Measure, OverQuota, Quota};
use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_core::stats::QuotaUse;
use hookd_storage::store::{StoreError, TenantRecord};
use rustc_hash::FxHashMap;

use super::{Engine, Refusal, Tx};

/// One tenant's quota and what it has used of the measures memory keeps.
#[derive(Debug)]
pub(crate) struct QuotaState {
    quota: Quota,
    /// `max_events_per_second`'s bucket (burst: one second's worth).
    rate: Option<TokenBucket>,
    /// The UTC day `events` counts.
    day: u64,
    events: u64,
    /// `events` changed this round: the record is written before the round's commit.
    dirty: bool,
}

/// The quotas of the tenants that have one.
#[derive(Debug, Default)]
pub(crate) struct Quotas {
    by_tenant: FxHashMap<TenantId, QuotaState>,
}

impl Quotas {
    /// Tenant `id`'s record is now `record` (made, updated, recovered or deleted): its
    /// quota replaces the one it had, and what it used so far stays counted.
    pub(crate) fn set(&mut self, id: TenantId, record: &TenantRecord, now: u64) {
        let quota: Quota = record.quota.map(Quota::from).unwrap_or_default();
        if quota.is_empty() || record.deleted_ms != 0 {
            self.by_tenant.remove(&id);
            return;
        }
        let rate = |q: &Quota| {
            (q.max_events_per_second > 0).then(|| {
                let r = q.max_events_per_second as f64;
                TokenBucket::new(r, r, now)
            })
        };
        match self.by_tenant.get_mut(&id) {
            Some(s) => {
                if s.quota.max_events_per_second != quota.max_events_per_second {
                    s.rate = rate(&quota);
                }
                s.quota = quota;
            }
            None => {
                self.by_tenant.insert(
                    id,
                    QuotaState {
                        rate: rate(&quota),
                        quota,
                        day: record.usage_day,
                        events: record.events_today,
                        dirty: false,
                    },
                );
            }
        }
    }

    pub(crate) fn quota(&self, id: TenantId) -> Option<&Quota> {
        self.by_tenant.get(&id).map(|s| &s.quota)
    }
}

impl Engine {
    /// Whether an event of `tenant`'s adding `adding` live messages fits its quotas of
    /// rate, day and live messages and bytes: the refusal, or the throttle hint its live
    /// quotas suggest. Changes nothing: [`Engine::quota_spend`] counts an event taken.
    pub(super) fn quota_admit(
        &mut self,
        tenant: TenantId,
        now: u64,
        adding: Held,
    ) -> Result<u64, Refusal> {
        let Some(s) = self.quotas.by_tenant.get_mut(&tenant) else {
            return Ok(0);
        };
        if let Some(bucket) = &mut s.rate {
            let next = bucket.next_token_ms(now);
            if next > now {
                return Err(Refusal::OverQuota(OverQuota {
                    measure: Measure::EventsPerSecond,
                    used: s.quota.max_events_per_second,
                    limit: s.quota.max_events_per_second,
                    retry_after_ms: Some(next - now),
                }));
            }
        }
        s.quota
            .assess_day(s.day, s.events, 1, now)
            .map_err(Refusal::OverQuota)?;
        let held = self.index.tenant_held(tenant);
        let fill = s
            .quota
            .assess_live(held, adding, self.config.backpressure.retry_after_ms)
            .map_err(Refusal::OverQuota)?;
        Ok(self.config.backpressure.throttle(fill))
    }

    /// Counts an event [`Engine::quota_admit`] let in, and that was stored.
    pub(super) fn quota_spend(&mut self, tenant: TenantId, now: u64) {
        let Some(s) = self.quotas.by_tenant.get_mut(&tenant) else {
            return;
        };
        if let Some(bucket) = &mut s.rate {
            bucket.try_take(now);
        }
        if s.quota.max_events_per_day > 0 {
            let today = now / DAY_MS;
            if s.day != today {
                s.day = today;
                s.events = 0;
            }
            s.events += 1;
            s.dirty = true;
        }
    }

    /// Whether `tenant` may make `object` (an endpoint, a subscription or a source) beside
    /// what it has; replacing one it has is always allowed.
    pub(super) fn quota_object(
        &self,
        t: Tx<'_, '_>,
        object: &ObjectRef,
    ) -> Result<Result<(), Refusal>, StoreError> {
        let Some(quota) = self.quotas.quota(object.tenant) else {
            return Ok(Ok(()));
        };
        let measure = match object.kind {
            Kind::Endpoint => Measure::Endpoints,
            Kind::Subscription => Measure::Subscriptions,
            Kind::Source => Measure::Sources,
            _ => return Ok(Ok(())),
        };
        if quota.limit(measure) == 0 {
            return Ok(Ok(()));
        }
        let count = match object.kind {
            Kind::Endpoint => {
                if self.endpoints.contains(object.tenant, &object.name) {
                    return Ok(Ok(()));
                }
                self.endpoints.count_of(object.tenant) as u64
            }
            kind => {
                let there = t.objects_of_kind(object.tenant, kind)?;
                if there.iter().any(|o| o.name == object.name) {
                    return Ok(Ok(()));
                }
                there.len() as u64
            }
        };
        Ok(quota
            .assess_count(measure, count)
            .map_err(Refusal::OverQuota))
    }

    /// Before the round's commit: the day's counts of the tenants that sent events this
    /// round, in their records.
    pub(super) fn quota_flush(&mut self, t: Tx<'_, '_>) {
        for (id, s) in &mut self.quotas.by_tenant {
            if !std::mem::take(&mut s.dirty) {
                continue;
            }
            if let Some(record) = self.tenants.usage(*id, s.day, s.events) {
                t.put_object(
                    &ObjectRef::tenant(*id),
                    &prost::Message::encode_to_vec(record),
                );
            }
        }
    }

    /// What `tenant` uses of each quota it has, against the limit, for Stats.
    pub(super) fn quota_use(
        &mut self,
        t: Tx<'_, '_>,
        tenant: TenantId,
        now: u64,
    ) -> Result<Vec<QuotaUse>, StoreError> {
        let held = self.index.tenant_held(tenant);
        let Some(s) = self.quotas.by_tenant.get_mut(&tenant) else {
            return Ok(Vec::new());
        };
        let quota = s.quota;
        let today = if s.day == now / DAY_MS { s.events } else { 0 };
        // The rate's use: what of one second's burst is spent now.
        let rate_used = s.rate.as_mut().map_or(0, |b| {
            quota.max_events_per_second.saturating_sub(b.available(now))
        });
        let mut out = Vec::with_capacity(Measure::ALL.len());
        for measure in Measure::ALL {
            if quota.limit(measure) == 0 {
                continue;
            }
            let used = match measure {
                Measure::LiveMessages => held.messages,
                Measure::LiveBytes => held.bytes,
                Measure::EventsPerDay => today,
                Measure::EventsPerSecond => rate_used,
                Measure::Endpoints => self.endpoints.count_of(tenant) as u64,
                Measure::Subscriptions => {
                    t.objects_of_kind(tenant, Kind::Subscription)?.len() as u64
                }
                Measure::Sources => t.objects_of_kind(tenant, Kind::Source)?.len() as u64,
            };
            out.push(QuotaUse {
                quota: measure.as_str(),
                used,
                limit: quota.limit(measure),
            });
        }
        Ok(out)
    }
}
