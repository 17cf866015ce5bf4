//! Enqueue: the idempotency claim, the two rows of a new message, and its place in the
//! index (ready now, or in the wheel).

use super::index::{LaneTag, Live, LiveState, Timer};
use super::{Engine, Enqueued, NewMessage, Refusal, Subscriber, Tx};
use crate::wheel::TimerKey;
use hookd_core::backpressure::{Assessment, Held};
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::retry::RetryPolicy;
use hookd_storage::store::{
    EndpointRecord, MAX_KEPT_DELIVERY_IDS, Original, ScheduleEntry, State, StoreError,
    idempotency_scope, record_for,
};

impl Enqueued {
    /// The answer to a resend of what `original` names: its id, and a publish's
    /// deliveries as the key's row kept them.
    fn duplicate(original: Original, throttle_ms: u64) -> Self {
        Self {
            id: original.id,
            duplicate: true,
            throttle_ms,
            deliveries: original.delivery_ids,
            subscribers: original.deliveries,
        }
    }
}

impl Engine {
    pub(super) fn enqueue(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        m: NewMessage,
    ) -> Result<Result<Enqueued, Refusal>, StoreError> {
        let policy = match m.destination.endpoint_name() {
            Some(name) => match self.endpoints.get(m.destination.tenant, name) {
                Some(e) => endpoint_policy(e, &self.config.retry),
                None => {
                    return Ok(Err(Refusal::UnknownEndpoint {
                        name: name.to_owned(),
                    }));
                }
            },
            None => self.config.retry,
        };
        let id = m.id;
        let bytes = m.record.len() as u64;
        let not_before = now.saturating_sub(self.config.idempotency_retention_ms);
        // Admission: disk headroom, then the watermarks. A refused event changes nothing,
        // but the resend of one already stored is still answered as the duplicate it is.
        let held = self
            .index
            .find(&m.key)
            .map_or_else(Held::default, |d| self.index.dests[d].held());
        let total = self.index.total_held();
        let (refusal, throttle_ms) = match self.config.backpressure.assess(held, total, bytes) {
            Assessment::Refuse(over) => match self.config.headroom.short() {
                Some(short) => (Some(Refusal::DiskFull(short)), 0),
                None => (Some(Refusal::OverMark(over)), 0),
            },
            // The tenant's quotas; then counted against the space last measured, only once
            // it passes every other check.
            Assessment::Admit { throttle_ms } => {
                let adding = Held { messages: 1, bytes };
                match self.quota_admit(m.destination.tenant, now, adding) {
                    Err(over) => (Some(over), 0),
                    Ok(quota_ms) => match self.config.headroom.admit(bytes) {
                        Err(short) => (Some(Refusal::DiskFull(short)), 0),
                        Ok(()) => (None, throttle_ms.max(quota_ms)),
                    },
                }
            }
        };
        if let Some(refusal) = refusal {
            if !m.idempotency_key.is_empty() {
                let scoped = idempotency_scope(&m.encoded, &m.idempotency_key);
                if let Some(original) = t.idempotent_original(&scoped, not_before)? {
                    return Ok(Ok(Enqueued::duplicate(original, 0)));
                }
            }
            if let Some(reason) = refusal.metric_reason() {
                self.config.metrics.refused(reason);
            }
            return Ok(Err(refusal));
        }
        if !m.idempotency_key.is_empty() {
            let scoped = idempotency_scope(&m.encoded, &m.idempotency_key);
            if let Some(original) = t.claim_idempotency_key(&scoped, id, now, not_before)? {
                return Ok(Ok(Enqueued::duplicate(original, throttle_ms)));
            }
        }
        self.quota_spend(m.destination.tenant, now);
        let new = New {
            id,
            key: &m.key,
            encoded: m.encoded,
            ordering_key: &m.ordering_key,
            max_attempts: max_attempts(m.max_attempts, &policy),
            due: now.saturating_add(m.delay_ms),
            size: u32::try_from(bytes).unwrap_or(u32::MAX),
        };
        self.store_new(t, now, new, |t, entry| {
            t.insert_message(id, &m.record, entry)
        })?;
        if throttle_ms > 0 {
            self.config.metrics.throttled.inc();
        }
        Ok(Ok(Enqueued {
            id,
            duplicate: false,
            throttle_ms,
            deliveries: Vec::new(),
            subscribers: 0,
        }))
    }

    /// A publish: one delivery per subscriber, all sharing one record (written once in
    /// the log), stored in this round or not at all. A subscriber whose endpoint is gone
    /// is left out; every other refusal (a watermark of any subscriber, the disk) refuses
    /// the whole publish, so a producer's retry never doubles a delivery.
    pub(super) fn publish(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        mut m: NewMessage,
    ) -> Result<Result<Enqueued, Refusal>, StoreError> {
        let Some(fanout) = m.fanout.take() else {
            return self.enqueue(t, now, m);
        };
        let tenant = m.destination.tenant;
        let first = Subscriber {
            id: m.id,
            destination: m.destination,
            key: m.key,
            encoded: m.encoded,
        };
        let mut deliveries = Vec::with_capacity(fanout.also.len() + 1);
        for s in std::iter::once(first).chain(fanout.also) {
            let policy = match s.destination.endpoint_name() {
                Some(name) => match self.endpoints.get(s.destination.tenant, name) {
                    Some(e) => endpoint_policy(e, &self.config.retry),
                    None => continue,
                },
                None => self.config.retry,
            };
            deliveries.push((s, policy));
        }
        let event = fanout.event_id;
        let bytes = m.record.len() as u64;
        let not_before = now.saturating_sub(self.config.idempotency_retention_ms);
        let scoped = (!m.idempotency_key.is_empty())
            .then(|| idempotency_scope(&fanout.scope, &m.idempotency_key));
        // Admission: every subscriber's destination against its marks, and hookd's
        // totals with every delivery before it added (a fan-out of 10,000 adds 10,000
        // messages: it is refused whole at the hard mark, never stored past it); the
        // payload once against the disk's headroom.
        let mut total = self.index.total_held();
        let mut refusal = None;
        let mut throttle_ms = 0;
        for (s, _) in &deliveries {
            let held = self
                .index
                .find(&s.key)
                .map_or_else(Held::default, |d| self.index.dests[d].held());
            let assessed = self.config.backpressure.assess(held, total, bytes);
            total.messages += 1;
            total.bytes += bytes;
            match assessed {
                Assessment::Refuse(over) => {
                    refusal = Some(match self.config.headroom.short() {
                        Some(short) => Refusal::DiskFull(short),
                        None => Refusal::OverMark(over),
                    });
                    break;
                }
                Assessment::Admit { throttle_ms: ms } => throttle_ms = throttle_ms.max(ms),
            }
        }
        if refusal.is_none() && !deliveries.is_empty() {
            let adding = Held {
                messages: deliveries.len() as u64,
                bytes: bytes.saturating_mul(deliveries.len() as u64),
            };
            refusal = match self.quota_admit(tenant, now, adding) {
                Err(over) => Some(over),
                Ok(quota_ms) => {
                    throttle_ms = throttle_ms.max(quota_ms);
                    self.config
                        .headroom
                        .admit(bytes)
                        .err()
                        .map(Refusal::DiskFull)
                }
            };
        }
        if let Some(refusal) = refusal {
            if let Some(scoped) = &scoped
                && let Some(original) = t.idempotent_original(scoped, not_before)?
            {
                return Ok(Ok(Enqueued::duplicate(original, 0)));
            }
            if let Some(reason) = refusal.metric_reason() {
                self.config.metrics.refused(reason);
            }
            return Ok(Err(refusal));
        }
        if deliveries.is_empty() {
            // Nobody to deliver to: nothing is stored, and the key is not claimed.
            if let Some(scoped) = &scoped
                && let Some(original) = t.idempotent_original(scoped, not_before)?
            {
                return Ok(Ok(Enqueued::duplicate(original, 0)));
            }
            return Ok(Ok(Enqueued {
                id: event,
                duplicate: false,
                throttle_ms: 0,
                deliveries: Vec::new(),
                subscribers: 0,
            }));
        }
        let subscribers = u32::try_from(deliveries.len()).unwrap_or(u32::MAX);
        if let Some(scoped) = &scoped {
            let ids: Vec<MessageId> = deliveries
                .iter()
                .take(MAX_KEPT_DELIVERY_IDS)
                .map(|(s, _)| s.id)
                .collect();
            let kept = (subscribers, ids.as_slice());
            if let Some(original) = t.claim_publish_key(scoped, event, kept, now, not_before)? {
                return Ok(Ok(Enqueued::duplicate(original, throttle_ms)));
            }
        }
        self.quota_spend(tenant, now);
        let due = now.saturating_add(m.delay_ms);
        let size = u32::try_from(bytes).unwrap_or(u32::MAX);
        let source = deliveries[0].0.id;
        let record = record_for(m.record, &deliveries[0].0.encoded, &event.to_string());
        let mut ids = Vec::with_capacity(deliveries.len().min(MAX_KEPT_DELIVERY_IDS));
        for (i, (s, policy)) in deliveries.into_iter().enumerate() {
            let new = New {
                id: s.id,
                key: &s.key,
                encoded: s.encoded,
                ordering_key: &m.ordering_key,
                max_attempts: max_attempts(m.max_attempts, &policy),
                due,
                size,
            };
            self.store_new(t, now, new, |t, entry| {
                if i == 0 {
                    t.insert_message(s.id, &record, entry)
                } else {
                    t.insert_copy(s.id, source, &record, entry)
                }
            })?;
            if ids.len() < MAX_KEPT_DELIVERY_IDS {
                ids.push(s.id);
            }
        }
        if throttle_ms > 0 {
            self.config.metrics.throttled.inc();
        }
        self.config.metrics.published.inc();
        self.config
            .metrics
            .publish_subscribers
            .observe(f64::from(subscribers));
        Ok(Ok(Enqueued {
            id: event,
            duplicate: false,
            throttle_ms,
            deliveries: ids,
            subscribers,
        }))
    }

    /// Stores a new delivery: its schedule row (in the lane of its ordering key if its
    /// destination is ordered), written with its record by `insert`; then its place in the
    /// index (ready, scheduled, or queued behind its lane's head) and an enqueue's counts.
    fn store_new(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        new: New<'_>,
        insert: impl FnOnce(Tx<'_, '_>, &ScheduleEntry) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let d = self.dest(new.key, now);
        let (lane, tag, state) = match self.fifo_of(new.key) {
            Some(_) => {
                let (lane, tag, state) =
                    self.join_lane(t, d, new.ordering_key, new.id, new.due, now)?;
                (Some(lane), tag, state)
            }
            None => (None, LaneTag::None, waiting(new.due, now)),
        };
        let entry = ScheduleEntry {
            due_ms: new.due,
            state: State::Pending,
            attempts: 0,
            max_attempts: new.max_attempts,
            since_ms: 0,
            destination: new.encoded,
            lane,
            replayed: false,
        };
        insert(t, &entry)?;
        self.out.fresh.insert(new.id);
        let live = Live::new(d, state, 0, new.max_attempts, new.size).in_lane(tag);
        self.track(new.id, live, new.due);
        self.index.dests[d].activity.enqueued(now);
        self.total.enqueued(now);
        self.config.metrics.enqueued.inc();
        Ok(())
    }

    /// Puts a new live message into the index, with the wheel entry it waits on.
    /// (`live.timer` is set here.)
    pub(super) fn track(&mut self, id: MessageId, mut live: Live, due_ms: u64) {
        live.timer = self.arm(id, live.state, due_ms);
        self.index.insert(id, live);
    }

    /// Moves a live message to `state`, replacing whatever wheel entry it waited on.
    pub(super) fn transition(
        &mut self,
        id: MessageId,
        state: LiveState,
        attempts: u32,
        due_ms: u64,
    ) {
        if let Some(old) = self.index.live.get_mut(&id).and_then(|l| l.timer.take()) {
            self.wheel.remove(old);
        }
        if !self.index.set_state(id, state, attempts) {
            return;
        }
        let timer = self.arm(id, state, due_ms);
        if let Some(live) = self.index.live.get_mut(&id) {
            live.timer = timer;
        }
    }

    /// The wheel entry a message in `state` waits on: its due time while scheduled, its
    /// lease deadline while leased, none while ready.
    fn arm(&mut self, id: MessageId, state: LiveState, due_ms: u64) -> Option<TimerKey> {
        let timer = match state {
            LiveState::Scheduled => Timer::Due(id),
            LiveState::Leased => Timer::Lease(id),
            LiveState::Ready | LiveState::Queued => return None,
        };
        Some(self.wheel.insert(self.tick(due_ms), timer))
    }

    pub(super) fn policy_of(&self, encoded_destination: &str) -> RetryPolicy {
        let destination = Destination::decode(encoded_destination);
        let endpoint = destination
            .as_ref()
            .and_then(|d| self.endpoints.get(d.tenant, d.endpoint_name()?));
        endpoint.map_or(self.config.retry, |e| {
            endpoint_policy(e, &self.config.retry)
        })
    }
}

pub(super) fn endpoint_policy(e: &EndpointRecord, default: &RetryPolicy) -> RetryPolicy {
    RetryPolicy {
        max_attempts: if e.max_attempts > 0 {
            e.max_attempts
        } else {
            default.max_attempts
        },
        base_ms: if e.retry_base_ms > 0 {
            e.retry_base_ms
        } else {
            default.base_ms
        },
        cap_ms: if e.retry_cap_ms > 0 {
            e.retry_cap_ms
        } else {
            default.cap_ms
        },
    }
}

/// A new delivery, as [`Engine::store_new`] takes it.
struct New<'a> {
    id: MessageId,
    /// `Destination::key()` and `Destination::encode()`.
    key: &'a str,
    encoded: String,
    ordering_key: &'a str,
    max_attempts: u32,
    due: u64,
    /// Its record's size (what the byte watermarks count).
    size: u32,
}

/// A message's attempts: its own (`requested`, 0: none) or its destination's policy's.
fn max_attempts(requested: u32, policy: &RetryPolicy) -> u32 {
    if requested > 0 {
        requested
    } else {
        policy.max_attempts
    }
}

/// The state of a message waiting for `due`: ready if that time has come, else scheduled.
pub(super) fn waiting(due_ms: u64, now: u64) -> LiveState {
    if due_ms > now {
        LiveState::Scheduled
    } else {
        LiveState::Ready
    }
}
