//! Pull queues with settings of their own (issue #51): a tenant's catalog objects, made and
//! deleted over the API. A queue without one is made on first use, unordered; the config
//! file's `[[queues]]` (`EngineConfig::fifo_queues`) are `default`'s and read-only.
//!
//! A queue's FIFO policy is read when a message is enqueued, as an endpoint's is: changing
//! it orders (or stops ordering) the messages enqueued after the change.

use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_storage::store::QueueRecord;

use super::answer::reply_after;
use super::{Completion, Engine, FifoPolicy, Refusal, Tx};

/// Most queues with settings one tenant holds.
pub(crate) const MAX_QUEUES: usize = 10_000;

/// Queues with settings, by tenant and name.
pub(crate) type Queues = super::objects::ByTenant<QueueRecord>;

/// A queue's settings as PutQueue gives them; the engine makes the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDef {
    pub name: String,
    /// FIFO lanes, or none (unordered).
    pub fifo: Option<FifoPolicy>,
    pub description: String,
    /// How long its completed messages are kept (0: its tenant's, else the server's).
    pub retention_secs: u64,
}

impl Engine {
    /// PutQueue: creates or replaces a queue's settings; the record as stored, and whether
    /// it was made.
    pub(super) fn put_queue(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        def: QueueDef,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<(QueueRecord, bool), Refusal>>,
    ) {
        let name = def.name.clone();
        if tenant.is_default() && self.config.fifo_queues.contains_key(&name) {
            reply_after(done, reply, Err(Refusal::QueueFromConfig { name }));
            return;
        }
        let existing = self.queues.get(tenant, &name);
        if existing.is_none() && self.queues.count_of(tenant) >= MAX_QUEUES {
            reply_after(done, reply, Err(Refusal::TooManyQueues { max: MAX_QUEUES }));
            return;
        }
        let record = QueueRecord {
            name: def.name,
            fifo: def.fifo.map_or(0, FifoPolicy::code),
            description: def.description,
            created_ms: existing.map_or(now, |q| q.created_ms),
            updated_ms: now,
            retention_secs: def.retention_secs,
        };
        t.put_object(
            &ObjectRef::new(tenant, Kind::Queue, &name),
            &prost::Message::encode_to_vec(&record),
        );
        let created = existing.is_none();
        self.queues.insert(tenant, name, record.clone());
        reply_after(done, reply, Ok((record, created)));
    }

    /// DeleteQueue: the queue's settings go (its messages stay: it is unordered from then).
    pub(super) fn delete_queue(
        &mut self,
        t: Tx<'_, '_>,
        tenant: TenantId,
        name: &str,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<(), Refusal>>,
    ) {
        if tenant.is_default() && self.config.fifo_queues.contains_key(name) {
            let name = name.to_owned();
            reply_after(done, reply, Err(Refusal::QueueFromConfig { name }));
            return;
        }
        if self.queues.remove(tenant, name).is_none() {
            let name = name.to_owned();
            reply_after(done, reply, Err(Refusal::NoQueue { name }));
            return;
        }
        t.remove_object(&ObjectRef::new(tenant, Kind::Queue, name));
        reply_after(done, reply, Ok(()));
    }
}
