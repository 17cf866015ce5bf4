//! The pull side: leases, acks, and the end of a failed attempt (retry with backoff or
//! dead letter), shared by Nack and lease expiry.

use std::collections::HashSet;

use super::answer::{reply_after, settle};
use super::enqueue::waiting;
use super::index::{DestId, LaneTag, LiveState, Timer, Waiter};
use super::lanes::FifoPolicy;
use super::{Engine, Leased, NackOutcome, Refusal, Tx};
use hookd_core::destination::Destination;
use hookd_core::ids::{LeaseId, MessageId};
use hookd_core::outcome::AttemptOutcome;
use hookd_core::scope::TenantId;
use hookd_storage::store::{
    AttemptRecord, DoneRecord, MessageRecord, ScheduleEntry, State, StoreError,
};

/// What a failed attempt leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// Another attempt, after `delay_ms` (None: the message's backoff), unless this was
    /// its last attempt.
    Retry { delay_ms: Option<u64> },
    /// The dead letters at once: another attempt cannot succeed.
    DeadLetter,
}

/// How an attempt ended, for its history entry.
#[derive(Debug, Clone, Copy)]
pub(super) struct AttemptEnd<'a> {
    /// `None`: when the lease started (from the schedule row).
    pub started_ms: Option<u64>,
    pub outcome: AttemptOutcome,
    pub error: &'a str,
    pub http_status: u32,
    pub latency_us: u64,
}

impl<'a> AttemptEnd<'a> {
    /// The end of a pull consumer's lease.
    pub(crate) fn lease(outcome: AttemptOutcome, error: &'a str) -> Self {
        Self {
            started_ms: None,
            outcome,
            error,
            http_status: 0,
            latency_us: 0,
        }
    }

    /// The end, at `now`, of a push attempt that took `latency_us`.
    pub(crate) fn http(
        now: u64,
        latency_us: u64,
        outcome: AttemptOutcome,
        error: &'a str,
        http_status: u16,
    ) -> Self {
        Self {
            started_ms: Some(now.saturating_sub(latency_us / 1_000)),
            outcome,
            error,
            http_status: u32::from(http_status),
            latency_us,
        }
    }

    /// The history entry of attempt `number`, ended at `now`; `lease_started_ms` is used
    /// when the attempt's own start is not known (a pull lease).
    fn record(&self, number: u32, lease_started_ms: u64, now: u64) -> AttemptRecord {
        AttemptRecord {
            number,
            started_ms: self.started_ms.unwrap_or(lease_started_ms),
            ended_ms: now,
            outcome: self.outcome.as_str().to_owned(),
            error: self.error.to_owned(),
            http_status: self.http_status,
            latency_us: self.latency_us,
        }
    }
}

/// What a completed message keeps of its record (the payload's size, not the payload).
#[derive(Debug, Clone)]
pub(super) struct Meta {
    pub destination: String,
    pub event_type: String,
    pub idempotency_key: String,
    pub payload_size: u64,
    pub created_ms: u64,
    pub event_id: String,
}

impl Meta {
    pub(crate) fn of(record: &MessageRecord) -> Self {
        Self {
            destination: record.destination.clone(),
            event_type: record.event_type.clone(),
            idempotency_key: record.idempotency_key.clone(),
            payload_size: record.payload.len() as u64,
            created_ms: record.created_ms,
            event_id: record.event_id.clone(),
        }
    }
}

/// Payload bytes one Receive hands out at most (a single larger message still goes alone).
const MAX_RECEIVE_BYTES: usize = 3 << 20;

impl Engine {
    /// Receive: leases up to `max` ready messages of `queue` now; with `wait_ms` and none
    /// ready, parks the caller as a long poll until one arrives or the wait ends.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn receive(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        queue: Destination,
        max: usize,
        visibility_ms: u64,
        wait_ms: u64,
        reply: super::index::ReceiveReply,
        done: &mut Vec<super::Completion>,
    ) -> Result<(), StoreError> {
        let key = queue.key();
        let will_wait = wait_ms > 0 && !self.draining;
        // Polling a queue nobody has used creates nothing: a client cannot grow the
        // index by guessing names (a long poll does create it, for as long as it waits).
        let d = match self.index.find(&key) {
            Some(d) => d,
            None if will_wait => self.dest(&key, now),
            None => {
                reply_after(done, reply, Ok(Vec::new()));
                return Ok(());
            }
        };
        if !self.index.dests[d].has_ready() && will_wait {
            let id = self.next_waiter;
            self.next_waiter += 1;
            let timer = self
                .wheel
                .insert(self.tick(now + wait_ms), Timer::Wait(d, id));
            self.index.push_waiter(
                d,
                Waiter {
                    id,
                    max,
                    visibility_ms,
                    timer,
                    reply,
                },
            );
        } else {
            let outcome = self.lease(t, now, d, max, visibility_ms).map(Ok);
            settle(done, reply, outcome)?;
        }
        Ok(())
    }

    /// Nack: ends the leased attempt as failed; it is retried after `delay_ms` (0: the
    /// backoff) unless that was its last attempt.
    pub(super) fn nack(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        lease: &LeaseId,
        delay_ms: u64,
        reason: String,
    ) -> Result<Result<NackOutcome, Refusal>, StoreError> {
        match self.check_lease(tenant, lease) {
            Err(e) => Ok(Err(e)),
            Ok(()) => {
                let reason = if reason.is_empty() {
                    "nacked by consumer".to_owned()
                } else {
                    reason
                };
                let delay = (delay_ms > 0).then_some(delay_ms);
                let end = AttemptEnd::lease(AttemptOutcome::Nacked, &reason);
                self.fail_attempt(t, now, lease.message, end, Fate::Retry { delay_ms: delay })
                    .map(|next| {
                        Ok(NackOutcome {
                            next_attempt_ms: next,
                        })
                    })
            }
        }
    }

    /// Drain (shutdown): no new long polls, and every waiting one is answered empty now.
    pub(super) fn drain(&mut self, done: &mut Vec<super::Completion>) {
        self.draining = true;
        for d in self.index.with_waiters() {
            while let Some(w) = self.index.pop_waiter(d) {
                self.wheel.remove(w.timer);
                reply_after(done, w.reply, Ok(Vec::new()));
            }
        }
    }

    /// Leases up to `max` ready messages of destination `d`. Only the small schedule row is
    /// rewritten; the record (with the payload) is only read.
    pub(super) fn lease(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        d: DestId,
        max: usize,
        visibility_ms: u64,
    ) -> Result<Vec<Leased>, StoreError> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let deadline = now.saturating_add(visibility_ms);
        while out.len() < max {
            let Some(id) = self.index.pop_ready(d) else {
                break;
            };
            let Some(live) = self.index.live.get(&id) else {
                continue;
            };
            let attempt = live.attempts + 1;
            let max_attempts = live.max_attempts;
            let replayed = live.replayed;
            // An ordered message keeps its place in its lane (in its schedule row).
            let lane = match live.lane {
                LaneTag::None => None,
                _ => t.schedule(id)?.lane,
            };
            let Some(record) = t.record(id)? else {
                return Err(StoreError::Corrupt(format!(
                    "message {id} is indexed but not stored"
                )));
            };
            // Keep the response within what any gRPC client accepts by default (4 MiB):
            // leasing more than the client can decode would only burn an attempt.
            if !out.is_empty() && bytes + record.payload.len() > MAX_RECEIVE_BYTES {
                self.index.dests[d].ready.push_front(id);
                break;
            }
            bytes += record.payload.len();
            self.transition(id, LiveState::Leased, attempt, deadline);
            t.put_schedule(
                id,
                &ScheduleEntry {
                    due_ms: deadline,
                    state: State::Leased,
                    attempts: attempt,
                    max_attempts,
                    since_ms: now,
                    destination: record.destination,
                    lane: lane.clone(),
                    replayed,
                },
            )?;
            out.push(Leased {
                id,
                lease: LeaseId {
                    message: id,
                    attempt,
                },
                payload: record.payload,
                event_type: record.event_type,
                headers: record.headers,
                idempotency_key: record.idempotency_key,
                event_id: record.event_id,
                ordering_key: lane.as_ref().map(|l| l.key.clone()).unwrap_or_default(),
                sequence: lane.as_ref().map_or(0, |l| l.seq),
                out_of_order: lane.is_some_and(|l| l.detached),
                attempt,
                max_attempts,
                enqueued_ms: record.created_ms,
                lease_deadline_ms: deadline,
            });
        }
        Ok(out)
    }

    /// Is `lease` the current lease of a live message?
    /// Whether `lease` is the current lease of a live message of `tenant`'s (another
    /// tenant's message is answered as one not in flight: nothing says it exists).
    pub(super) fn check_lease(&self, tenant: TenantId, lease: &LeaseId) -> Result<(), Refusal> {
        let id = lease.message;
        let owner = |live: &super::index::Live| {
            Destination::tenant_of_key(&self.index.dests[live.dest].key)
        };
        match self.index.live.get(&id) {
            None => Err(Refusal::NotInFlight { id }),
            Some(live) if owner(live) != Some(tenant) => Err(Refusal::NotInFlight { id }),
            Some(live) if self.index.dests[live.dest].push.is_some() => {
                Err(Refusal::NotPull { id })
            }
            Some(live) if live.state != LiveState::Leased || live.attempts != lease.attempt => {
                Err(Refusal::LeaseExpired {
                    lease: *lease,
                    current: live.attempts,
                })
            }
            Some(_) => Ok(()),
        }
    }

    /// All-or-nothing: every lease is checked before any is acknowledged.
    ///
    /// Idempotent: a lease whose Ack already committed (a retry after the answer was lost
    /// to a crash or a network cut) is answered as acknowledged again, found in the
    /// completed messages while they are kept (`completed_retention_secs`). A lease that
    /// expired before the message was acknowledged at a later attempt is still refused.
    pub(super) fn ack(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        leases: &[LeaseId],
    ) -> Result<Result<u32, Refusal>, StoreError> {
        let mut seen = HashSet::new();
        let mut to_complete = Vec::new();
        for (i, lease) in leases.iter().enumerate() {
            if !seen.insert(lease.message) {
                continue;
            }
            if self.index.live.contains_key(&lease.message) {
                if let Err(e) = self.check_lease(tenant, lease) {
                    return Ok(Err(e.at(i)));
                }
                to_complete.push(lease.message);
                continue;
            }
            let done = t.done(lease.message)?;
            let done = done.filter(|d| Destination::tenant_of_key(&d.destination) == Some(tenant));
            match done {
                Some(done) if done.acked_at(lease.attempt) => {}
                Some(done) => {
                    return Ok(Err(Refusal::CompletedLater {
                        lease: *lease,
                        completed: done.attempts,
                    }
                    .at(i)));
                }
                None => {
                    if let Err(e) = self.check_lease(tenant, lease) {
                        return Ok(Err(e.at(i)));
                    }
                }
            }
        }
        for id in to_complete {
            self.complete(
                t,
                now,
                id,
                AttemptEnd::lease(AttemptOutcome::Acked, ""),
                None,
            )?;
        }
        Ok(Ok(seen.len() as u32))
    }

    /// A message was delivered (acked, or its push attempt succeeded): its record and
    /// payload are removed; its metadata and attempts, `last` included, are kept for
    /// `completed_retention_ms` (unless that is 0).
    pub(super) fn complete(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        id: MessageId,
        last: AttemptEnd<'_>,
        meta: Option<Meta>,
    ) -> Result<(), StoreError> {
        let Some(live) = self.index.remove(id) else {
            return Ok(());
        };
        if let Some(timer) = live.timer {
            self.wheel.remove(timer);
        }
        // Its lane (key and number), kept in its summary: a replay job resends a key's
        // range in its numbers' order, into the same lane.
        let lane = match live.lane {
            LaneTag::In(_) | LaneTag::Detached if self.config.completed_retention_ms > 0 => {
                t.schedule(id)?.lane
            }
            _ => None,
        };
        if let LaneTag::In(slot) = live.lane {
            self.leave_lane(live.dest, slot, id, false, now);
        }
        if self.config.completed_retention_ms == 0 {
            t.remove_message(id)?;
        } else {
            let meta = match meta {
                Some(m) => m,
                None => match t.record(id)? {
                    Some(record) => Meta::of(&record),
                    None => {
                        return Err(StoreError::Corrupt(format!(
                            "message {id} is live but not stored"
                        )));
                    }
                },
            };
            // Only a pull lease needs its schedule row read for when the attempt started.
            let lease_started_ms = match last.started_ms {
                Some(_) => 0,
                None => t.schedule(id)?.since_ms,
            };
            t.complete(id, |mut history| {
                history.push(last.record(live.attempts, lease_started_ms, now));
                DoneRecord {
                    destination: meta.destination,
                    event_type: meta.event_type,
                    idempotency_key: meta.idempotency_key,
                    payload_size: meta.payload_size,
                    created_ms: meta.created_ms,
                    completed_ms: now,
                    attempts: live.attempts,
                    max_attempts: live.max_attempts,
                    history: Some(history),
                    event_id: meta.event_id,
                    ordered: lane.is_some(),
                    sequence: lane.as_ref().map_or(0, |l| l.seq),
                    ordering_key: lane.map(|l| l.key).unwrap_or_default(),
                }
            })?;
        }
        let latency_us = now.saturating_sub(id.unix_ms()).saturating_mul(1_000);
        self.index.dests[live.dest]
            .activity
            .delivered(now, latency_us);
        self.total.delivered(now, latency_us);
        self.config.metrics.delivered.inc();
        self.config
            .metrics
            .delivery_latency_seconds
            .observe(latency_us as f64 / 1e6);
        if self.config.events.wanted() {
            let destination = &self.index.dests[live.dest].key;
            let event = crate::events::Event {
                at_ms: now,
                kind: if last.outcome == AttemptOutcome::Delivered {
                    "delivered"
                } else {
                    "acked"
                },
                destination: destination.clone(),
                message_id: id.to_string(),
                attempt: live.attempts,
                http_status: last.http_status,
                latency_us: last.latency_us,
                detail: String::new(),
            };
            // Built here, not in `watch`'s closure: it borrows the index.
            self.out.watched.push(event);
        }
        Ok(())
    }

    /// hookd could not make the attempt (no descriptor, memory or local port, or its own
    /// outbound cap): the receiver was never tried, so the attempt is given back, the
    /// message is tried again in 1 to 2 s, and it is never dead-lettered for this (F6).
    pub(super) fn postpone(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        id: MessageId,
        end: AttemptEnd<'_>,
    ) -> Result<(), StoreError> {
        use rand::RngExt;
        let Some(live) = self.index.live.get(&id).cloned() else {
            return Ok(());
        };
        if let Some(timer) = live.timer {
            self.wheel.remove(timer);
        }
        let attempts = live.attempts.saturating_sub(1);
        let mut entry = t.schedule(id)?;
        entry.attempts = attempts;
        t.push_attempt(id, end.record(live.attempts, entry.since_ms, now))?;
        let due = now.saturating_add(1_000 + self.rng.random_range(0..1_000u64));
        let state = if attempts == 0 {
            State::Pending
        } else {
            State::Retry
        };
        self.wait_until(t, now, id, entry, state, due)?;
        let key = &self.index.dests[live.dest].key;
        static LOG: hookd_core::ratelog::LogLimit = hookd_core::ratelog::LogLimit::new(10, 5);
        if let Some(suppressed) = LOG.ready() {
            tracing::warn!(%id, destination = %key, error = end.error, suppressed, "push attempt not made: hookd is short of a local resource; retrying, not counted");
        }
        Ok(())
    }

    /// Makes a live message wait until `due` in `state` (its schedule row, then the index),
    /// with the attempts `entry` counts.
    fn wait_until(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        id: MessageId,
        mut entry: hookd_storage::store::ScheduleEntry,
        state: State,
        due: u64,
    ) -> Result<(), StoreError> {
        entry.state = state;
        entry.due_ms = due;
        entry.since_ms = 0;
        t.put_schedule(id, &entry)?;
        self.transition(id, waiting(due, now), entry.attempts, due);
        Ok(())
    }

    /// Ends the current attempt of an in-flight message as failed, to the `fate` asked:
    /// another attempt (after the delay, or the backoff), unless that was the last attempt,
    /// or the dead letters at once. Returns the next attempt's time, or `None` if it was
    /// dead-lettered.
    pub(super) fn fail_attempt(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        id: MessageId,
        end: AttemptEnd<'_>,
        fate: Fate,
    ) -> Result<Option<u64>, StoreError> {
        let Some(live) = self.index.live.get(&id).cloned() else {
            return Ok(None);
        };
        if let Some(timer) = live.timer {
            self.wheel.remove(timer);
        }
        let mut entry = t.schedule(id)?;
        // A push attempt is not written when it starts (see `push.rs`): it counts from here.
        entry.attempts = live.attempts;
        t.push_attempt(id, end.record(live.attempts, entry.since_ms, now))?;
        let key = self.index.dests[live.dest].key.clone();
        self.config.metrics.attempts_failed.inc();
        let dies = fate == Fate::DeadLetter || live.attempts >= live.max_attempts;
        self.watch(|| crate::events::Event {
            at_ms: now,
            kind: if dies {
                "dead_lettered"
            } else {
                "attempt_failed"
            },
            destination: key.clone(),
            message_id: id.to_string(),
            attempt: live.attempts,
            http_status: end.http_status,
            latency_us: end.latency_us,
            detail: end
                .error
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(300)
                .collect(),
        });
        if dies {
            entry.state = State::Dead;
            entry.due_ms = 0;
            entry.since_ms = now;
            // The head of a lane of a `block` destination holds its lane as a dead letter.
            let blocks = matches!(live.lane, LaneTag::In(_))
                && self.fifo_of(&key) == Some(FifoPolicy::Block);
            if let Some(lane) = entry.lane.as_mut() {
                lane.blocks = blocks;
            }
            t.bury(id, &key, &entry)?;
            self.index.remove(id);
            if let LaneTag::In(slot) = live.lane {
                self.leave_lane(live.dest, slot, id, blocks, now);
                if blocks {
                    self.config.metrics.lanes_blocked.inc();
                } else {
                    self.config.metrics.lanes_parked.inc();
                }
            }
            let dead = self.index.dests[live.dest].counts.dead + 1;
            self.index.set_dead(live.dest, dead);
            self.index.dests[live.dest].activity.failed(now);
            self.total.failed(now);
            self.config.metrics.dead_lettered.inc();
            // The reason's first line only, capped: an error may quote the endpoint's answer.
            let reason: String = end
                .error
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(160)
                .collect();
            tracing::info!(%id, destination = %key, attempts = live.attempts, outcome = %end.outcome, status = end.http_status, %reason, "dead-lettered");
            return Ok(None);
        }
        let mut policy = self.policy_of(&entry.destination);
        // The message's own backoff, if it has one (read only on this failure path).
        if let Some(record) = t.record(id)? {
            if record.retry_base_ms > 0 {
                policy.base_ms = record.retry_base_ms;
            }
            if record.retry_cap_ms > 0 {
                policy.cap_ms = record.retry_cap_ms;
            }
            policy.cap_ms = policy.cap_ms.max(policy.base_ms);
        }
        let delay = match fate {
            Fate::Retry { delay_ms: Some(ms) } => ms,
            _ => policy.backoff_ms(live.attempts, &mut self.rng),
        };
        let due = now.saturating_add(delay);
        self.wait_until(t, now, id, entry, State::Retry, due)?;
        Ok(Some(due))
    }
}
