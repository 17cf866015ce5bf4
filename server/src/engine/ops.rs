//! What each command and timer does, inside the round's write transaction.
//!
//! Every function here changes the transaction and the in-memory index together; its answer
//! is queued as a completion that runs only after the commit. A `StoreError` aborts the whole
//! round (see `Engine::fail`); a bad request is answered with its own `ApiError` and changes
//! nothing.

use std::collections::HashSet;

use hookd_proto::v1 as pb;

use super::index::{DestId, Live, LiveState, Timer, Waiter};
use super::{Command, Completion, Engine, Enqueued, NewMessage};
use crate::destination::Destination;
use crate::error::ApiError;
use crate::ids::{LeaseId, MessageId};
use crate::retry::RetryPolicy;
use crate::store::{AttemptRecord, ScheduleEntry, State, StoreError, Tables, idempotency_scope};

type Tx<'a, 'txn> = &'a mut Tables<'txn>;

/// Payload bytes one Receive hands out at most (a single larger message still goes alone).
const MAX_RECEIVE_BYTES: usize = 3 << 20;

fn reply_after<T: Send + 'static>(
    done: &mut Vec<Completion>,
    reply: tokio::sync::oneshot::Sender<Result<T, ApiError>>,
    result: Result<T, ApiError>,
) {
    done.push(Box::new(move |failure| {
        let _ = reply.send(match failure {
            None => result,
            Some(e) => Err(e),
        });
    }));
}

impl Engine {
    pub(super) fn apply(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        command: Command,
        done: &mut Vec<Completion>,
    ) -> Result<(), StoreError> {
        match command {
            Command::Enqueue {
                messages, reply, ..
            } => {
                let mut results = Vec::with_capacity(messages.len());
                for m in messages {
                    results.push(self.enqueue(t, now, m)?);
                }
                done.push(Box::new(move |failure| {
                    let results = match failure {
                        None => results,
                        Some(e) => results.iter().map(|_| Err(e.clone())).collect(),
                    };
                    let _ = reply.send(results);
                }));
            }
            Command::Receive {
                queue,
                max,
                visibility_ms,
                wait_ms,
                reply,
            } => {
                let key = Destination::Queue(queue).key();
                let will_wait = wait_ms > 0 && !self.draining;
                // Polling a queue nobody has used creates nothing: a client cannot grow the
                // index by guessing names (a long poll does create it, for as long as it waits).
                let d = match self.index.find(&key) {
                    Some(d) => d,
                    None if will_wait => self.index.dest(&key),
                    None => {
                        reply_after(done, reply, Ok(Vec::new()));
                        return Ok(());
                    }
                };
                if self.index.dests[d].ready.is_empty() && will_wait {
                    let id = self.next_waiter;
                    self.next_waiter += 1;
                    let timer = self.wheel.insert(self.tick(now + wait_ms), Timer::Wait(id));
                    self.index.dests[d].waiters.push_back(Waiter {
                        id,
                        max,
                        visibility_ms,
                        timer,
                        reply,
                    });
                } else {
                    let leased = self.lease(t, now, d, max, visibility_ms)?;
                    reply_after(done, reply, Ok(leased));
                }
            }
            Command::Ack { leases, reply } => {
                let result = self.ack(t, now, &leases)?;
                reply_after(done, reply, result);
            }
            Command::Nack {
                lease,
                delay_ms,
                reason,
                reply,
            } => {
                let result = match self.check_lease(&lease, "lease_id") {
                    Err(e) => Err(e),
                    Ok(()) => {
                        let reason = if reason.is_empty() {
                            "nacked by consumer".to_owned()
                        } else {
                            reason
                        };
                        let delay = (delay_ms > 0).then_some(delay_ms);
                        let next =
                            self.fail_attempt(t, now, lease.message, "nacked", &reason, delay)?;
                        Ok(pb::NackResponse {
                            dead_lettered: next.is_none(),
                            next_attempt_unix_ms: next.unwrap_or(0),
                        })
                    }
                };
                reply_after(done, reply, result);
            }
            Command::Replay {
                ids,
                destination,
                limit,
                reply,
            } => {
                let result = self.replay(t, now, ids, destination, limit)?;
                reply_after(done, reply, result);
            }
            Command::PutEndpoint {
                mut endpoint,
                reply,
            } => {
                let existing = self.endpoints.get(&endpoint.name);
                let created = existing.is_none();
                endpoint.created_unix_ms = existing.map_or(now, |e| e.created_unix_ms);
                endpoint.updated_unix_ms = now;
                // Putting an endpoint (re-)enables it.
                endpoint.disabled = false;
                t.put_endpoint(&endpoint)?;
                self.dirty = true;
                self.endpoints
                    .insert(endpoint.name.clone(), endpoint.clone());
                reply_after(
                    done,
                    reply,
                    Ok(pb::PutEndpointResponse {
                        endpoint: Some(endpoint),
                        created,
                    }),
                );
            }
            Command::DeleteEndpoint { name, reply } => {
                let result = self.delete_endpoint(t, &name)?;
                reply_after(done, reply, result);
            }
            Command::Stats { reply } => {
                let response = self.stats(now);
                reply_after(done, reply, Ok(response));
            }
            Command::Drain => {
                self.draining = true;
                for d in 0..self.index.dests.len() {
                    while let Some(w) = self.index.dests[d].waiters.pop_front() {
                        self.wheel.remove(w.timer);
                        reply_after(done, w.reply, Ok(Vec::new()));
                    }
                }
            }
            Command::Tick | Command::Shutdown => {}
        }
        Ok(())
    }

    fn enqueue(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        m: NewMessage,
    ) -> Result<Result<Enqueued, ApiError>, StoreError> {
        let policy = match &m.destination {
            Destination::Endpoint(name) => match self.endpoints.get(name) {
                Some(e) => endpoint_policy(e, &self.config.retry),
                None => {
                    return Ok(Err(ApiError::NotFound(format!(
                        "endpoint: no endpoint named {name:?} (register it with PutEndpoint)"
                    ))));
                }
            },
            _ => self.config.retry,
        };
        let id = m.id;
        if !m.idempotency_key.is_empty() {
            let scoped = idempotency_scope(&m.encoded, &m.idempotency_key);
            let not_before = now.saturating_sub(self.config.idempotency_retention_ms);
            if let Some(original) = t.claim_idempotency_key(&scoped, id, now, not_before)? {
                return Ok(Ok(Enqueued {
                    id: original,
                    duplicate: true,
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
        self.dirty = true;
        let dest = self.index.dest(&m.key);
        self.schedule(id, dest, due, 0, max_attempts, now);
        self.index.dests[dest].activity.enqueued(now);
        self.total.enqueued(now);
        Ok(Ok(Enqueued {
            id,
            duplicate: false,
        }))
    }

    /// Puts a message that waits for `due` into the index: ready now, or in the wheel.
    fn schedule(
        &mut self,
        id: MessageId,
        dest: DestId,
        due: u64,
        attempts: u32,
        max_attempts: u32,
        now: u64,
    ) {
        let mut live = Live {
            dest,
            state: LiveState::Ready,
            attempts,
            max_attempts,
            timer: None,
        };
        if due > now {
            live.state = LiveState::Scheduled;
            live.timer = Some(self.wheel.insert(self.tick(due), Timer::Due(id)));
        }
        self.index.insert(id, live);
    }

    /// Leases up to `max` ready messages of destination `d`. Only the small schedule row is
    /// rewritten; the record (with the payload) is only read.
    fn lease(
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
            self.index.set_state(id, LiveState::Leased, attempt);
            let timer = self.wheel.insert(self.tick(deadline), Timer::Lease(id));
            if let Some(live) = self.index.live.get_mut(&id) {
                live.timer = Some(timer);
            }
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
    fn check_lease(&self, lease: &LeaseId, field: &str) -> Result<(), ApiError> {
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
    fn ack(
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
    fn fail_attempt(
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
        if due > now {
            self.index
                .set_state(id, LiveState::Scheduled, live.attempts);
            let timer = self.wheel.insert(self.tick(due), Timer::Due(id));
            if let Some(l) = self.index.live.get_mut(&id) {
                l.timer = Some(timer);
            }
        } else {
            self.index.set_state(id, LiveState::Ready, live.attempts);
            if let Some(l) = self.index.live.get_mut(&id) {
                l.timer = None;
            }
        }
        Ok(Some(due))
    }

    fn policy_of(&self, encoded_destination: &str) -> RetryPolicy {
        match Destination::decode(encoded_destination) {
            Some(Destination::Endpoint(name)) => {
                self.endpoints.get(&name).map_or(self.config.retry, |e| {
                    endpoint_policy(e, &self.config.retry)
                })
            }
            _ => self.config.retry,
        }
    }

    /// Makes dead letters ready again. With ids, all-or-nothing: each must be a dead letter.
    fn replay(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        ids: Vec<MessageId>,
        destination: Option<Destination>,
        limit: usize,
    ) -> Result<Result<u32, ApiError>, StoreError> {
        // (id, destination key)
        let mut targets: Vec<(MessageId, String)> = Vec::new();
        if let Some(destination) = destination {
            if let Destination::Endpoint(name) = &destination
                && !self.endpoints.contains_key(name)
            {
                return Ok(Err(ApiError::FailedPrecondition(format!(
                    "destination.endpoint: endpoint {name:?} no longer exists; put it again before replaying"
                ))));
            }
            let key = destination.key();
            for id in t.dead_of(&key, limit)? {
                targets.push((id, key.clone()));
            }
        }
        let mut seen = HashSet::new();
        for (i, id) in ids.into_iter().enumerate() {
            if !seen.insert(id) {
                continue;
            }
            let Some(record) = t.record(id)? else {
                return Ok(Err(ApiError::NotFound(format!(
                    "ids[{i}]: no message {id}"
                ))));
            };
            if self.index.live.contains_key(&id) {
                return Ok(Err(ApiError::FailedPrecondition(format!(
                    "ids[{i}]: message {id} is not a dead letter"
                ))));
            }
            let Some(destination) = Destination::decode(&record.destination) else {
                return Err(StoreError::Corrupt(format!("destination of {id}")));
            };
            if let Destination::Endpoint(name) = &destination
                && !self.endpoints.contains_key(name)
            {
                return Ok(Err(ApiError::FailedPrecondition(format!(
                    "ids[{i}]: endpoint {name:?} of message {id} no longer exists"
                ))));
            }
            targets.push((id, destination.key()));
        }
        let mut replayed = 0;
        for (id, key) in targets {
            let Some(mut entry) = t.unbury(id, &key)? else {
                continue;
            };
            let mut history = t.history(id)?;
            history.push(AttemptRecord {
                number: 0,
                started_ms: now,
                ended_ms: now,
                outcome: "replayed".into(),
                error: String::new(),
            });
            t.put_history(id, &history)?;
            entry.state = State::Pending;
            entry.attempts = 0;
            entry.due_ms = now;
            entry.since_ms = 0;
            t.put_schedule(id, &entry)?;
            self.dirty = true;
            let d = self.index.dest(&key);
            self.index.dests[d].dead = self.index.dests[d].dead.saturating_sub(1);
            self.schedule(id, d, now, 0, entry.max_attempts, now);
            replayed += 1;
        }
        Ok(Ok(replayed))
    }

    fn delete_endpoint(
        &mut self,
        t: Tx<'_, '_>,
        name: &str,
    ) -> Result<Result<(), ApiError>, StoreError> {
        if !self.endpoints.contains_key(name) {
            return Ok(Err(ApiError::NotFound(format!(
                "name: no endpoint named {name:?}"
            ))));
        }
        let key = Destination::Endpoint(name.to_owned()).key();
        if let Some(d) = self.index.find(&key) {
            let live = self.index.live_count(d);
            if live > 0 {
                return Ok(Err(ApiError::FailedPrecondition(format!(
                    "name: endpoint {name:?} still has {live} live messages; delete it once they are delivered or dead-lettered"
                ))));
            }
        }
        t.remove_endpoint(name)?;
        self.dirty = true;
        self.endpoints.remove(name);
        Ok(Ok(()))
    }

    /// Handles every timer due by `now`.
    pub(super) fn fire_timers(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        done: &mut Vec<Completion>,
    ) -> Result<(), StoreError> {
        let tick = self.tick(now);
        while let Some((_, timer)) = self.wheel.poll(tick) {
            match timer {
                Timer::Due(id) => {
                    let attempts = match self.index.live.get_mut(&id) {
                        Some(live) if live.state == LiveState::Scheduled => {
                            live.timer = None;
                            live.attempts
                        }
                        _ => continue,
                    };
                    self.index.set_state(id, LiveState::Ready, attempts);
                }
                Timer::Lease(id) => {
                    if let Some(live) = self.index.live.get_mut(&id)
                        && live.state == LiveState::Leased
                    {
                        live.timer = None;
                        self.fail_attempt(
                            t,
                            now,
                            id,
                            "lease_expired",
                            "visibility timeout expired before Ack",
                            None,
                        )?;
                    }
                }
                Timer::Wait(waiter) => {
                    for dest in &mut self.index.dests {
                        if let Some(pos) = dest.waiters.iter().position(|w| w.id == waiter) {
                            if let Some(w) = dest.waiters.remove(pos) {
                                reply_after(done, w.reply, Ok(Vec::new()));
                            }
                            break;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Gives ready messages to long polls that were waiting for them.
    pub(super) fn serve_waiters(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        done: &mut Vec<Completion>,
    ) -> Result<(), StoreError> {
        let touched = std::mem::take(&mut self.index.touched);
        for d in touched {
            while !self.index.dests[d].ready.is_empty() {
                let Some(w) = self.index.dests[d].waiters.pop_front() else {
                    break;
                };
                self.wheel.remove(w.timer);
                if w.reply.is_closed() {
                    continue; // the caller gave up; don't lease to nobody
                }
                let leased = self.lease(t, now, d, w.max, w.visibility_ms)?;
                reply_after(done, w.reply, Ok(leased));
            }
        }
        Ok(())
    }

    fn stats(&self, now: u64) -> pb::StatsResponse {
        let mut total = pb::DestinationStats {
            destination: "*".into(),
            ..Default::default()
        };
        let mut destinations = Vec::with_capacity(self.index.dests.len());
        let mut oldest: Option<MessageId> = None;
        for dest in &self.index.dests {
            let s = dest.stats(now);
            total.pending += s.pending;
            total.awaiting_retry += s.awaiting_retry;
            total.in_flight += s.in_flight;
            total.dead_letter += s.dead_letter;
            if let Some(first) = dest.live_ids.first() {
                oldest = Some(oldest.map_or(*first, |o| o.min(*first)));
            }
            destinations.push(s);
        }
        self.total.fill(now, &mut total);
        total.oldest_pending_age_ms = oldest.map_or(0, |id| now.saturating_sub(id.unix_ms()));
        let mut storage = pb::StorageStats {
            live_messages: self.index.live.len() as u64,
            queued_write_bytes: self.queued.load(std::sync::atomic::Ordering::Relaxed),
            ..Default::default()
        };
        self.commits.fill(now, &mut storage);
        pb::StatsResponse {
            total: Some(total),
            destinations,
            uptime_ms: now.saturating_sub(self.started_ms),
            storage: Some(storage),
        }
    }
}

fn endpoint_policy(e: &pb::Endpoint, default: &RetryPolicy) -> RetryPolicy {
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
