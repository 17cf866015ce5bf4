//! Enqueue: the idempotency claim, the two rows of a new message, and its place in the
//! index (ready now, or in the wheel).

use super::index::{Live, LiveState, Timer};
use super::{Engine, Enqueued, NewMessage, Refusal, Tx};
use crate::wheel::TimerKey;
use hookd_core::backpressure::{Assessment, Held};
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::retry::RetryPolicy;
use hookd_storage::store::{EndpointRecord, ScheduleEntry, State, StoreError, idempotency_scope};

impl Engine {
    pub(super) fn enqueue(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        m: NewMessage,
    ) -> Result<Result<Enqueued, Refusal>, StoreError> {
        let policy = match &m.destination {
            Destination::Endpoint(name) => match self.endpoints.get(name) {
                Some(e) => endpoint_policy(e, &self.config.retry),
                None => {
                    return Ok(Err(Refusal::UnknownEndpoint { name: name.clone() }));
                }
            },
            _ => self.config.retry,
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
            // Counted against the space last measured only once it passes every other check.
            Assessment::Admit { throttle_ms } => match self.config.headroom.admit(bytes) {
                Err(short) => (Some(Refusal::DiskFull(short)), 0),
                Ok(()) => (None, throttle_ms),
            },
        };
        if let Some(refusal) = refusal {
            if !m.idempotency_key.is_empty() {
                let scoped = idempotency_scope(&m.encoded, &m.idempotency_key);
                if let Some(original) = t.idempotent_original(&scoped, not_before)? {
                    return Ok(Ok(Enqueued {
                        id: original,
                        duplicate: true,
                        throttle_ms: 0,
                    }));
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
                return Ok(Ok(Enqueued {
                    id: original,
                    duplicate: true,
                    throttle_ms,
                }));
            }
        }
        let max_attempts = if m.max_attempts > 0 {
            m.max_attempts
        } else {
            policy.max_attempts
        };
        let due = now.saturating_add(m.delay_ms);
        let entry = ScheduleEntry {
            due_ms: due,
            state: State::Pending,
            attempts: 0,
            max_attempts,
            since_ms: 0,
            destination: m.encoded,
        };
        t.insert_message(id, &m.record, &entry)?;
        self.out.fresh.insert(id);
        let dest = self.dest(&m.key, now);
        let size = u32::try_from(bytes).unwrap_or(u32::MAX);
        let live = Live::new(dest, waiting(due, now), 0, max_attempts, size);
        self.track(id, live, due);
        self.index.dests[dest].activity.enqueued(now);
        self.total.enqueued(now);
        self.config.metrics.enqueued.inc();
        if throttle_ms > 0 {
            self.config.metrics.throttled.inc();
        }
        Ok(Ok(Enqueued {
            id,
            duplicate: false,
            throttle_ms,
        }))
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
            LiveState::Ready => return None,
        };
        Some(self.wheel.insert(self.tick(due_ms), timer))
    }

    pub(super) fn policy_of(&self, encoded_destination: &str) -> RetryPolicy {
        match Destination::decode(encoded_destination) {
            Some(Destination::Endpoint(name)) => {
                self.endpoints.get(&name).map_or(self.config.retry, |e| {
                    endpoint_policy(e, &self.config.retry)
                })
            }
            _ => self.config.retry,
        }
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

/// The state of a message waiting for `due`: ready if that time has come, else scheduled.
pub(super) fn waiting(due_ms: u64, now: u64) -> LiveState {
    if due_ms > now {
        LiveState::Scheduled
    } else {
        LiveState::Ready
    }
}
