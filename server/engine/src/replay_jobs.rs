//! One step of a replay job (issue #53): a slice of its selection replayed, and the job's
//! progress written, in one round. The round is one log record, so after a kill -9 either
//! both hold or neither does: a step is never lost and never sent twice by the job.
//!
//! Each selected message is, when its turn comes:
//! - a dead letter: made ready again in place (as ReplayDeadLetters does: the same id, back
//!   at its FIFO lane's head if it blocked the lane);
//! - delivered: sent again as a copy, a new message whose deliveries carry the original's
//!   `webhook-id`, event id and idempotency key, and `hookd-replay: {job}`. At an ordered
//!   destination it joins the original's lane, so a key's range goes out in its order;
//! - still live (pending, retrying, in flight): skipped, it is on its way;
//! - anything else (forgotten, payload no longer kept, endpoint gone, refused by a quota):
//!   failed, with the reason kept as the job's last failure.

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::{ObjectRef, TenantId};
use hookd_storage::store::{MessageRecord, ReplayJobRecord, ReplayJobState, State, StoreError};
use prost::Message as _;

use super::{Engine, NewMessage, Refusal, Tx};

/// One step of a job, as the server's job registry hands it to the engine.
#[derive(Debug, Clone)]
pub struct ReplayStep {
    /// The job's object, and its record as the registry holds it (running).
    pub object: ObjectRef,
    pub job: ReplayJobRecord,
    /// The next ids of its selection, in order, each with its record when it was delivered
    /// and the log still keeps it (read by the registry; `None` otherwise).
    pub items: Vec<(MessageId, Option<Box<MessageRecord>>)>,
}

/// What became of one selected message.
enum Item {
    Replayed,
    Skipped,
    Failed(String),
}

impl Engine {
    /// Replays `step`'s items and stores the job's progress (and, when its selection is
    /// through, its end and the removal of its selection's slices); the job after.
    pub(super) fn replay_step(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        step: ReplayStep,
    ) -> Result<Result<ReplayJobRecord, Refusal>, StoreError> {
        let ReplayStep {
            object,
            mut job,
            items,
        } = step;
        if job.state() != Some(ReplayJobState::Running) {
            return Ok(Ok(job));
        }
        // Its tenant was deleted (with the job's objects): nothing to replay, nothing to
        // write back.
        if self.tenants.deleted(object.tenant) {
            return Ok(Err(Refusal::NoTenant {
                name: object.tenant.to_string(),
            }));
        }
        let mut replayed = 0u64;
        for (id, kept) in items {
            match self.replay_item(t, now, object.tenant, id, kept, &job.id)? {
                Item::Replayed => replayed += 1,
                Item::Skipped => job.skipped += 1,
                Item::Failed(why) => {
                    job.failed += 1;
                    job.last_failure = format!("{id}: {why}");
                }
            }
            job.cursor += 1;
        }
        job.replayed += replayed;
        job.updated_ms = now;
        self.config.metrics.replayed.inc_by(replayed);
        if job.cursor >= job.total {
            job.state = ReplayJobState::Done as u32;
            job.finished_ms = now;
            remove_selection(t, &object, &job);
            tracing::info!(
                job = %job.id,
                replayed = job.replayed,
                skipped = job.skipped,
                failed = job.failed,
                "replay job done"
            );
        }
        t.put_object(&object, &job.encode_to_vec());
        Ok(Ok(job))
    }

    fn replay_item(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        id: MessageId,
        kept: Option<Box<MessageRecord>>,
        job: &str,
    ) -> Result<Item, StoreError> {
        if self.index.live.contains_key(&id) {
            return Ok(Item::Skipped);
        }
        // Stored and not live: a dead letter (or a fresh message this round made, which a
        // schedule row of its own says).
        if let Some(record) = t.record(id)? {
            if Destination::tenant_of_key(&record.destination) != Some(tenant) {
                return Ok(Item::Failed("not found".into()));
            }
            if t.schedule_row(id)?.is_some_and(|e| e.state != State::Dead) {
                return Ok(Item::Skipped);
            }
            let Some(destination) = Destination::decode(&record.destination) else {
                return Err(StoreError::Corrupt(format!("destination of {id}")));
            };
            if let Some(name) = destination.endpoint_name()
                && !self.endpoints.contains(destination.tenant, name)
            {
                return Ok(Item::Failed(format!("endpoint {name:?} is gone")));
            }
            return Ok(match self.revive(t, now, id, &destination.key(), now)? {
                true => Item::Replayed,
                false => Item::Failed("no longer a dead letter".into()),
            });
        }
        let Some(done) = t.done(id)? else {
            return Ok(Item::Failed(
                "no longer kept (past the completed retention, or purged)".into(),
            ));
        };
        let Some(destination) = Destination::decode(&done.destination) else {
            return Err(StoreError::Corrupt(format!("destination of {id}")));
        };
        if destination.tenant != tenant {
            return Ok(Item::Failed("not found".into()));
        }
        let Some(mut record) = kept else {
            return Ok(Item::Failed(
                "its payload is no longer kept (past the log's retention)".into(),
            ));
        };
        if record.event_id.is_empty() {
            record.event_id = id.to_string();
        }
        if record.replay_of.is_empty() {
            record.replay_of = id.to_string();
        }
        record.replay_job = job.to_owned();
        record.created_ms = now;
        record.destination = destination.encode();
        let copy = NewMessage {
            id: MessageId::generate(now),
            key: destination.key(),
            encoded: destination.encode(),
            record: record.encode_to_vec(),
            // The record keeps the original's key (its header); the copy claims none.
            idempotency_key: String::new(),
            delay_ms: 0,
            max_attempts: done.max_attempts,
            fanout: None,
            ordering_key: done.ordering_key,
            destination,
        };
        Ok(match self.enqueue(t, now, copy)? {
            Ok(_) => Item::Replayed,
            Err(refusal) => Item::Failed(refusal.to_string()),
        })
    }

    /// Changes a job's state (pause, resume, cancel) in the round; a cancelled job's
    /// selection goes with it.
    pub(super) fn put_replay_job(t: Tx<'_, '_>, object: &ObjectRef, job: &ReplayJobRecord) {
        if job.state().is_some_and(ReplayJobState::ended) {
            remove_selection(t, object, job);
        }
        t.put_object(object, &job.encode_to_vec());
    }
}

/// Removes the slices of `job`'s selection.
fn remove_selection(t: Tx<'_, '_>, object: &ObjectRef, job: &ReplayJobRecord) {
    for n in 0..job.chunks {
        t.remove_object(&ObjectRef::new(
            object.tenant,
            hookd_core::scope::Kind::ReplaySelection,
            hookd_storage::store::ReplaySelectionRecord::name(&job.id, n),
        ));
    }
}
