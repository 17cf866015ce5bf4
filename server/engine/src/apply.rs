//! Dispatch of each command and timer of a round to its topic file: `enqueue.rs`,
//! `lease.rs` (receive, ack, nack, drain, lease expiry), `push.rs` (attempt outcomes) and
//! `admin.rs` (endpoints, sources, replay, purge, pause, stats).
//!
//! Every operation changes the round's rows ([`Tx`]: the overlay and the round's log
//! record) and the in-memory index together; its answer is queued as a completion that runs
//! only after the log's sync holds the round. A `StoreError` aborts the whole
//! round (see `Engine::fail`); a refused request is answered with its [`Refusal`] and
//! changes nothing.

use super::answer::{reply_after, settle};
use super::index::{LiveState, Timer};
use super::lease::{AttemptEnd, Fate};
use super::{Command, Completion, Engine, Refusal, Tx};
use hookd_core::outcome::AttemptOutcome;
use hookd_core::scope::{Kind, ObjectRef};
use hookd_storage::store::StoreError;

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
                    let result = match m.fanout.is_some() {
                        true => self.publish(t, now, m),
                        false => self.enqueue(t, now, m),
                    };
                    match result {
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
            } => self.receive(t, now, queue, max, visibility_ms, wait_ms, reply, done)?,
            Command::Ack {
                tenant,
                leases,
                reply,
            } => {
                let outcome = self.ack(t, now, tenant, &leases);
                settle(done, reply, outcome)?;
            }
            Command::Nack {
                tenant,
                lease,
                delay_ms,
                reason,
                reply,
            } => {
                let outcome = self.nack(t, now, tenant, &lease, delay_ms, reason);
                settle(done, reply, outcome)?;
            }
            Command::Replay { request, reply } => {
                let outcome = self.replay(t, now, request);
                settle(done, reply, outcome)?;
            }
            Command::ReplayStep { step, reply } => {
                let outcome = self.replay_step(t, now, *step);
                settle(done, reply, outcome)?;
            }
            Command::PutReplayJob {
                selection, reply, ..
            } if !selection.is_empty() && self.config.headroom.short().is_some() => {
                let _ = reply.send(Err(self.disk_full()));
            }
            Command::PutReplayJob { object, reply, .. } if self.tenants.deleted(object.tenant) => {
                let _ = reply.send(Err(Refusal::NoTenant {
                    name: object.tenant.to_string(),
                }));
            }
            Command::PutReplayJob {
                object,
                job,
                selection,
                reply,
            } => {
                for (slice, record) in &selection {
                    t.put_object(slice, record);
                }
                Self::put_replay_job(t, &object, &job);
                reply_after(done, reply, Ok(()));
            }
            Command::Purge { tenant, ids, reply } => {
                let outcome = self.purge(t, now, tenant, ids).map(Ok);
                settle(done, reply, outcome)?;
            }
            Command::Erase { tenant, ids, reply } => {
                let outcome = self.erase(t, now, tenant, ids).map(Ok);
                settle(done, reply, outcome)?;
            }
            Command::ScrubProgress { reply } => {
                let progress = self.pipeline.syncer.scrub_progress();
                if progress.scrubbed_through < progress.appended || progress.pending > 0 {
                    // Someone waits for an overwrite: checkpoint now, not at the interval.
                    self.pipeline.syncer.urge_checkpoint();
                }
                reply_after(done, reply, Ok(progress));
            }
            Command::Pause {
                tenant,
                name,
                pause,
                reply,
            } => {
                let outcome = self.pause(t, now, tenant, &name, pause);
                settle(done, reply, outcome)?;
            }
            // New definitions wait for disk space like new events (removals go through).
            Command::PutEndpoint { reply, .. } if self.config.headroom.short().is_some() => {
                let _ = reply.send(Err(self.disk_full()));
            }
            Command::PutObject {
                record: Some(_),
                reply,
                ..
            } if self.config.headroom.short().is_some() => {
                let _ = reply.send(Err(self.disk_full()));
            }
            Command::PutEndpoint {
                tenant,
                endpoint,
                reply,
            } => {
                let object = ObjectRef::new(tenant, Kind::Endpoint, &endpoint.name);
                let outcome = match self.quota_object(t, &object)? {
                    Err(over) => Ok(Err(over)),
                    Ok(()) => self.put_endpoint(t, now, tenant, *endpoint).map(Ok),
                };
                settle(done, reply, outcome)?;
            }
            Command::Reseal { reseal, reply } => {
                let outcome = self.reseal(t, now, &reseal);
                settle(done, reply, outcome.map(Ok))?;
            }
            Command::DeleteEndpoint {
                tenant,
                name,
                reply,
            } => {
                let outcome = self.delete_endpoint(t, tenant, &name);
                settle(done, reply, outcome)?;
            }
            Command::PutTenant { reply, .. } if self.config.headroom.short().is_some() => {
                let _ = reply.send(Err(self.disk_full()));
            }
            Command::PutTenant {
                record,
                create,
                reply,
            } => self.put_tenant(t, now, *record, create, done, reply)?,
            Command::PutToken { tenant, def, reply } => {
                self.put_token(t, now, tenant, *def, done, reply);
            }
            Command::RevokeToken {
                tenant,
                name,
                reply,
            } => self.revoke_token(t, tenant, &name, done, reply),
            Command::DeleteTenant { name, force, reply } => {
                self.delete_tenant(t, now, &name, force, done, reply)?;
            }
            Command::PutQueue { tenant, def, reply } => {
                self.put_queue(t, now, tenant, *def, done, reply);
            }
            Command::DeleteQueue {
                tenant,
                name,
                reply,
            } => self.delete_queue(t, tenant, &name, done, reply),
            Command::PutEventType { tenant, def, reply } => {
                self.put_event_type(t, now, tenant, *def, done, reply);
            }
            Command::DeleteEventType {
                tenant,
                name,
                reply,
            } => self.delete_event_type(t, tenant, &name, done, reply),
            Command::PutObject {
                object,
                record,
                reply,
            } => {
                match record {
                    Some(record) => {
                        if let Err(over) = self.quota_object(t, &object)? {
                            reply_after(done, reply, Err(over));
                            return Ok(());
                        }
                        t.put_object(&object, &record);
                    }
                    None => t.remove_object(&object),
                }
                reply_after(done, reply, Ok(()));
            }
            Command::Stats {
                tenant,
                after,
                limit,
                whole,
                reply,
            } => {
                let mut response = if whole {
                    self.stats(now, tenant, after.as_deref(), limit)
                } else {
                    self.stats_page(now, tenant, after.as_deref(), limit)
                };
                if whole && let Some(tenant) = tenant {
                    response.quotas = self.quota_use(t, tenant, now)?;
                }
                if whole {
                    let of = tenant.unwrap_or(hookd_core::scope::TenantId::DEFAULT);
                    response.retention = self.retention_snapshot(now, of);
                }
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
                // A scrape answers at once (see `reply_after`).
                let _ = reply.send(Ok(self.gauges_part(now, after.as_deref(), max, chunk)));
            }
            Command::Ping { reply } => reply_after(done, reply, Ok(())),
            Command::Drain => self.drain(done),
            Command::Attempted(report) => self.attempted(t, now, report)?,
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
                                AttemptOutcome::LeaseExpired,
                                "visibility timeout expired before Ack",
                            );
                            self.fail_attempt(t, now, id, end, Fate::Retry { delay_ms: None })?;
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
            while self.index.dests[d].has_ready() {
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
