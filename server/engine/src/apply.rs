//! Dispatch of each command and timer inside the round's write transaction.
//!
//! Every operation changes the transaction and the in-memory index together; its answer is
//! queued as a completion that runs only after the commit. A `StoreError` aborts the whole
//! round (see `Engine::fail`); a refused request is answered with its [`Refusal`] and
//! changes nothing.

use super::index::{LiveState, Timer, Waiter};
use super::lease::AttemptEnd;
use super::{Command, Completion, Engine, NackOutcome, PutOutcome, Refusal, Tx};
use hookd_core::destination::Destination;
use hookd_storage::store::StoreError;

pub(super) fn reply_after<T: Send + 'static>(
    done: &mut Vec<Completion>,
    reply: tokio::sync::oneshot::Sender<Result<T, Refusal>>,
    result: Result<T, Refusal>,
) {
    done.push(Box::new(move |failure| {
        let _ = reply.send(match failure {
            None => result,
            Some(e) => Err(e),
        });
    }));
}

/// Queues a command's answer. On a storage error the reply is queued too, so that
/// `Engine::fail` answers it (with that error) only after marking the engine failed; the
/// error is then passed on to abort the round. No reply is ever dropped unanswered.
fn settle<T: Send + 'static>(
    done: &mut Vec<Completion>,
    reply: tokio::sync::oneshot::Sender<Result<T, Refusal>>,
    outcome: Result<Result<T, Refusal>, StoreError>,
) -> Result<(), StoreError> {
    match outcome {
        Ok(result) => {
            reply_after(done, reply, result);
            Ok(())
        }
        Err(e) => {
            // Replaced by the storage error when `fail` runs the completion.
            reply_after(done, reply, Err(Refusal::Unavailable(String::new())));
            Err(e)
        }
    }
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
                let count = messages.len();
                let mut results = Vec::with_capacity(count);
                let mut outcome = Ok(());
                for m in messages {
                    match self.enqueue(t, now, m) {
                        Ok(result) => results.push(result),
                        Err(e) => {
                            outcome = Err(e);
                            break;
                        }
                    }
                }
                done.push(Box::new(move |failure| {
                    let results = match failure {
                        None => results,
                        Some(e) => (0..count).map(|_| Err(e.clone())).collect(),
                    };
                    let _ = reply.send(results);
                }));
                outcome?;
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
                    None if will_wait => self.dest(&key, now),
                    None => {
                        reply_after(done, reply, Ok(Vec::new()));
                        return Ok(());
                    }
                };
                if self.index.dests[d].ready.is_empty() && will_wait {
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
            }
            Command::Ack { leases, reply } => {
                let outcome = self.ack(t, now, &leases);
                settle(done, reply, outcome)?;
            }
            Command::Nack {
                lease,
                delay_ms,
                reason,
                reply,
            } => {
                let outcome = match self.check_lease(&lease) {
                    Err(e) => Ok(Err(e)),
                    Ok(()) => {
                        let reason = if reason.is_empty() {
                            "nacked by consumer".to_owned()
                        } else {
                            reason
                        };
                        let delay = (delay_ms > 0).then_some(delay_ms);
                        let end = AttemptEnd::lease("nacked", &reason);
                        self.fail_attempt(t, now, lease.message, end, delay, false)
                            .map(|next| {
                                Ok(NackOutcome {
                                    next_attempt_ms: next,
                                })
                            })
                    }
                };
                settle(done, reply, outcome)?;
            }
            Command::Replay { request, reply } => {
                let outcome = self.replay(t, now, request);
                settle(done, reply, outcome)?;
            }
            Command::Purge { ids, reply } => {
                let outcome = self.purge(t, ids).map(Ok);
                settle(done, reply, outcome)?;
            }
            Command::Pause { name, pause, reply } => {
                let outcome = self.pause(t, now, &name, pause);
                settle(done, reply, outcome)?;
            }
            // New definitions wait for disk space like new events (removals go through).
            Command::PutEndpoint { reply, .. } if self.config.headroom.short().is_some() => {
                let _ = reply.send(Err(self.disk_full()));
            }
            Command::PutSource {
                spec: Some(_),
                reply,
                ..
            } if self.config.headroom.short().is_some() => {
                let _ = reply.send(Err(self.disk_full()));
            }
            Command::PutEndpoint {
                mut endpoint,
                reply,
            } => {
                let existing = self.endpoints.get(&endpoint.name);
                let created = existing.is_none();
                endpoint.created_ms = existing.map_or(now, |e| e.created_ms);
                endpoint.updated_ms = now;
                // Putting an endpoint (re-)enables it; an operator's pause stays.
                endpoint.disabled = false;
                endpoint.disabled_reason.clear();
                endpoint.disabled_ms = 0;
                if let Some(e) = existing {
                    endpoint.paused = e.paused;
                    endpoint.paused_reason.clone_from(&e.paused_reason);
                    endpoint.paused_ms = e.paused_ms;
                }
                if let Err(e) = t.put_endpoint(&endpoint) {
                    return settle::<PutOutcome>(done, reply, Err(e));
                }
                self.endpoints
                    .insert(endpoint.name.clone(), endpoint.clone());
                let key = Destination::Endpoint(endpoint.name.clone()).key();
                if let Some(d) = self.index.find(&key) {
                    self.refresh_push(d, now);
                    // Configured now: an idle destination of this name must be kept.
                    self.index.review(d);
                }
                reply_after(done, reply, Ok(PutOutcome { endpoint, created }));
            }
            Command::Reseal { reseal, reply } => {
                let outcome = self.reseal(t, now, &reseal);
                settle(done, reply, outcome.map(Ok))?;
            }
            Command::DeleteEndpoint { name, reply } => {
                let outcome = self.delete_endpoint(t, &name);
                settle(done, reply, outcome)?;
            }
            Command::PutSource { name, spec, reply } => {
                match spec {
                    Some(spec) => t.put_source(&name, &spec),
                    None => t.remove_source(&name),
                }
                reply_after(done, reply, Ok(()));
            }
            Command::Stats {
                after,
                limit,
                whole,
                reply,
            } => {
                let response = if whole {
                    self.stats(now, after.as_deref(), limit)
                } else {
                    self.stats_page(now, after.as_deref(), limit)
                };
                reply_after(done, reply, Ok(response));
            }
            Command::Detail {
                keys,
                series,
                reply,
            } => {
                let details = keys
                    .iter()
                    .map(|key| self.detail(now, key, series))
                    .collect();
                reply_after(done, reply, Ok(details));
            }
            Command::Gauges {
                after,
                max,
                chunk,
                reply,
            } => {
                let response = self.gauges_part(now, after.as_deref(), max, chunk);
                reply_after(done, reply, Ok(response));
            }
            Command::Ping { reply } => reply_after(done, reply, Ok(())),
            Command::Drain => {
                self.draining = true;
                for d in self.index.with_waiters() {
                    while let Some(w) = self.index.pop_waiter(d) {
                        self.wheel.remove(w.timer);
                        reply_after(done, w.reply, Ok(Vec::new()));
                    }
                }
            }
            Command::Attempted(report) => self.attempted(t, now, report)?,
            Command::Sized(sizes) => {
                for (id, bytes) in sizes {
                    self.index.set_bytes(id, bytes);
                }
            }
            Command::Tick | Command::Shutdown => {}
        }
        Ok(())
    }

    fn disk_full(&self) -> Refusal {
        Refusal::DiskFull(self.config.headroom.short().unwrap_or_default())
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
                    let attempts = match self.index.live.get(&id) {
                        Some(live) if live.state == LiveState::Scheduled => live.attempts,
                        _ => continue,
                    };
                    self.transition(id, LiveState::Ready, attempts, now);
                }
                Timer::Lease(id) => {
                    if let Some(live) = self.index.live.get_mut(&id)
                        && live.state == LiveState::Leased
                    {
                        live.timer = None;
                        let (d, attempt) = (live.dest, live.attempts);
                        if self.index.dests[d].push.is_some() {
                            self.attempt_lost(t, now, id, attempt)?;
                        } else {
                            let end = AttemptEnd::lease(
                                "lease_expired",
                                "visibility timeout expired before Ack",
                            );
                            self.fail_attempt(t, now, id, end, None, false)?;
                        }
                    }
                }
                Timer::Wake(d) => self.woken(d),
                Timer::Wait(d, waiter) => {
                    if let Some(w) = self.index.remove_waiter(d, waiter) {
                        reply_after(done, w.reply, Ok(Vec::new()));
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
                let Some(w) = self.index.pop_waiter(d) else {
                    break;
                };
                self.wheel.remove(w.timer);
                if w.reply.is_closed() {
                    continue; // the caller gave up; don't lease to nobody
                }
                let outcome = self.lease(t, now, d, w.max, w.visibility_ms).map(Ok);
                settle(done, w.reply, outcome)?;
            }
        }
        Ok(())
    }
}
