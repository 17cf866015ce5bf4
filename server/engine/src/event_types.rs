//! Event types as a tenant's objects (issue #51): what PutEventType declares (a
//! description, a JSON Schema), stored as a catalog object of kind `EventType`. The engine
//! owns the writes and builds the record; the API compiles the schema (before asking, so
//! a schema that does not compile is never stored) and checks events against it. The
//! config file's `[[event_types]]` are `default`'s and read-only; the API refuses those
//! names before they get here.

use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_storage::store::EventTypeRecord;

use super::answer::reply_after;
use super::{Completion, Engine, Refusal, Tx};

/// Most event types one tenant declares.
pub const MAX_EVENT_TYPES: usize = 1_000;

/// Declared event types, by tenant and name: their times (the records are the API's to
/// read; the engine keeps only what a put needs).
pub(crate) type EventTypes = super::objects::ByTenant<u64>;

/// An event type as PutEventType gives it; the engine makes the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTypeDef {
    pub name: String,
    pub description: String,
    /// Its JSON Schema's text, already compiled by the caller; empty: none.
    pub json_schema: String,
    /// JSON pointers whose values the search index keeps, already checked by the caller.
    pub search_keys: Vec<String>,
}

impl Engine {
    /// PutEventType: declares or replaces an event type; the record as stored, and whether
    /// it was made.
    pub(super) fn put_event_type(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        def: EventTypeDef,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<(EventTypeRecord, bool), Refusal>>,
    ) {
        let existing = self.event_types.get(tenant, &def.name).copied();
        if existing.is_none() && self.event_types.count_of(tenant) >= MAX_EVENT_TYPES {
            reply_after(
                done,
                reply,
                Err(Refusal::TooManyEventTypes {
                    max: MAX_EVENT_TYPES,
                }),
            );
            return;
        }
        let record = EventTypeRecord {
            name: def.name,
            description: def.description,
            json_schema: def.json_schema,
            search_keys: def.search_keys,
            created_ms: existing.unwrap_or(now),
            updated_ms: now,
        };
        t.put_object(
            &ObjectRef::new(tenant, Kind::EventType, &record.name),
            &prost::Message::encode_to_vec(&record),
        );
        self.event_types
            .insert(tenant, record.name.clone(), record.created_ms);
        reply_after(done, reply, Ok((record, existing.is_none())));
    }

    /// DeleteEventType: events already stored keep their type; new ones are no longer
    /// checked against it (and, when strict, are refused).
    pub(super) fn delete_event_type(
        &mut self,
        t: Tx<'_, '_>,
        tenant: TenantId,
        name: &str,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<(), Refusal>>,
    ) {
        if self.event_types.remove(tenant, name).is_none() {
            let name = name.to_owned();
            reply_after(done, reply, Err(Refusal::NoEventType { name }));
            return;
        }
        t.remove_object(&ObjectRef::new(tenant, Kind::EventType, name));
        reply_after(done, reply, Ok(()));
    }
}
