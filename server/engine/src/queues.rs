//! Pull queues with settings of their own (issue #51): a tenant's catalog objects, made and
//! deleted over the API. A queue without one is made on first use, unordered; the config
//! file's `[[queues]]` (`EngineConfig::fifo_queues`) are `default`'s and read-only.
//!
//! A queue's FIFO policy is read when a message is enqueued, as an endpoint's is: changing
//! it orders (or stops ordering) the messages enqueued after the change.

use std::collections::HashMap;

use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_storage::store::QueueRecord;

use super::answer::reply_after;
use super::{Completion, Engine, Refusal, Tx};

/// Most queues with settings one tenant holds.
pub(crate) const MAX_QUEUES: usize = 10_000;

#[derive(Debug, Default)]
pub(crate) struct Queues {
    by_tenant: HashMap<TenantId, HashMap<String, QueueRecord>>,
}

impl Queues {
    pub(crate) fn get(&self, tenant: TenantId, name: &str) -> Option<&QueueRecord> {
        self.by_tenant.get(&tenant)?.get(name)
    }

    pub(crate) fn insert(&mut self, tenant: TenantId, record: QueueRecord) {
        self.by_tenant
            .entry(tenant)
            .or_default()
            .insert(record.name.clone(), record);
    }

    fn remove(&mut self, tenant: TenantId, name: &str) -> Option<QueueRecord> {
        let names = self.by_tenant.get_mut(&tenant)?;
        let removed = names.remove(name);
        if names.is_empty() {
            self.by_tenant.remove(&tenant);
        }
        removed
    }

    /// A deleted tenant's queues are gone (its objects were removed with it).
    pub(crate) fn forget_tenant(&mut self, tenant: TenantId) {
        self.by_tenant.remove(&tenant);
    }

    fn count_of(&self, tenant: TenantId) -> usize {
        self.by_tenant.get(&tenant).map_or(0, HashMap::len)
    }
}

impl Engine {
    /// PutQueue: creates or replaces a queue's settings; the record as stored, and whether
    /// it was made.
    pub(super) fn put_queue(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        mut record: QueueRecord,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<(QueueRecord, bool), Refusal>>,
    ) {
        let name = record.name.clone();
        if tenant.is_default() && self.config.fifo_queues.contains_key(&name) {
            reply_after(done, reply, Err(Refusal::QueueFromConfig { name }));
            return;
        }
        let existing = self.queues.get(tenant, &name);
        if existing.is_none() && self.queues.count_of(tenant) >= MAX_QUEUES {
            reply_after(done, reply, Err(Refusal::TooManyQueues { max: MAX_QUEUES }));
            return;
        }
        record.created_ms = existing.map_or(now, |q| q.created_ms);
        record.updated_ms = now;
        t.put_object(
            &ObjectRef::new(tenant, Kind::Queue, &name),
            &prost::Message::encode_to_vec(&record),
        );
        let created = existing.is_none();
        self.queues.insert(tenant, record.clone());
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
