//! The pull side: leases, acks, and the end of a failed attempt (retry with backoff or
//! dead letter), shared by Nack and lease expiry.

use std::collections::HashSet;

use hookd_proto::v1 as pb;

use super::enqueue::waiting;
use super::index::{DestId, LiveState};
use super::{Engine, Tx};
use crate::error::ApiError;
use crate::ids::{LeaseId, MessageId};
use crate::store::{AttemptRecord, ScheduleEntry, State, StoreError};

/// Payload bytes one Receive hands out at most (a single larger message still goes alone).
const MAX_RECEIVE_BYTES: usize = 3 << 20;

impl Engine {
    /// Leases up to `max` ready messages of destination `d`. Only the small schedule row is
    /// rewritten; the record (with the payload) is only read.
    pub(super) fn lease(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        d: DestId,
        max: usize,
        visibility_ms: u64,
    ) -> Result<Vec<pb::ReceivedMessage>, StoreError> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let deadline = now.saturating_add(visibility_ms);
        while out.len() < max {
            let Some(id) = self.index.dests[d].ready.pop_front() else {
                break;
            };
            let Some(live) = self.index.live.get(&id) else {
                continue;
            };
            if live.state != LiveState::Ready {
                continue;
            }
            let attempt = live.attempts + 1;
            let max_attempts = live.max_attempts;
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
                },
            )?;
            self.dirty = true;
            out.push(pb::ReceivedMessage {
                id: id.to_string(),
                lease_id: LeaseId {
                    message: id,
                    attempt,
                }
                .to_string(),
                payload: record.payload,
                event_type: record.event_type,
                headers: record.headers.into_iter().collect(),
                idempotency_key: record.idempotency_key,
                attempt,
                max_attempts,
                enqueued_unix_ms: record.created_ms,
                lease_deadline_unix_ms: deadline,
            });
        }
        Ok(out)
    }

    /// Is `lease` the current lease of a live message?
    pub(super) fn check_lease(&self, lease: &LeaseId, field: &str) -> Result<(), ApiError> {
        match self.index.live.get(&lease.message) {
            None => Err(ApiError::NotFound(format!(
                "{field}: message {} is not in flight (already acknowledged, dead-lettered or never enqueued)",
                lease.message
            ))),
            Some(live) if live.state != LiveState::Leased || live.attempts != lease.attempt => {
                Err(ApiError::FailedPrecondition(format!(
                    "{field}: lease {lease} has expired; the message is now at attempt {} and will be (or was) delivered again",
                    live.attempts
                )))
            }
            Some(_) => Ok(()),
        }
    }

    /// All-or-nothing: every lease is checked before any is acknowledged.
    pub(super) fn ack(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        leases: &[LeaseId],
    ) -> Result<Result<u32, ApiError>, StoreError> {
        let mut seen = HashSet::new();
        for (i, lease) in leases.iter().enumerate() {
            if let Err(e) = self.check_lease(lease, &format!("lease_ids[{i}]")) {
                return Ok(Err(e));
            }
            seen.insert(lease.message);
        }
        for id in &seen {
            let Some(live) = self.index.remove(*id) else {
                continue;
            };
            if let Some(timer) = live.timer {
                self.wheel.remove(timer);
            }
            t.remove_message(*id)?;
            self.dirty = true;
            let latency_us = now.saturating_sub(id.unix_ms()).saturating_mul(1_000);
            self.index.dests[live.dest]
                .activity
                .delivered(now, latency_us);
            self.total.delivered(now, latency_us);
        }
        Ok(Ok(seen.len() as u32))
    }

    /// Ends the current attempt of a leased message as failed: schedules a retry (after
    /// `delay_ms`, or the backoff) or, after the last attempt, dead-letters it. Returns the
    /// next attempt's time, or `None` if it was dead-lettered.
    pub(super) fn fail_attempt(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        id: MessageId,
        outcome: &str,
        error: &str,
        delay_ms: Option<u64>,
    ) -> Result<Option<u64>, StoreError> {
        let Some(live) = self.index.live.get(&id).cloned() else {
            return Ok(None);
        };
        if let Some(timer) = live.timer {
            self.wheel.remove(timer);
        }
        let mut entry = t.schedule(id)?;
        let mut history = t.history(id)?;
        history.push(AttemptRecord {
            number: live.attempts,
            started_ms: entry.since_ms,
            ended_ms: now,
            outcome: outcome.to_owned(),
            error: error.to_owned(),
        });
        t.put_history(id, &history)?;
        self.dirty = true;
        let key = self.index.dests[live.dest].key.clone();
        if live.attempts >= live.max_attempts {
            entry.state = State::Dead;
            entry.due_ms = 0;
            entry.since_ms = now;
            t.bury(id, &key, &entry)?;
            self.index.remove(id);
            self.index.dests[live.dest].dead += 1;
            self.index.dests[live.dest].activity.failed(now);
            self.total.failed(now);
            tracing::debug!(%id, destination = %key, attempts = live.attempts, error, "dead-lettered");
            return Ok(None);
        }
        let policy = self.policy_of(&entry.destination);
        let delay = delay_ms.unwrap_or_else(|| policy.backoff_ms(live.attempts, &mut self.rng));
        let due = now.saturating_add(delay);
        entry.state = State::Retry;
        entry.due_ms = due;
        entry.since_ms = 0;
        t.put_schedule(id, &entry)?;
        self.transition(id, waiting(due, now), live.attempts, due);
        Ok(Some(due))
    }
}
