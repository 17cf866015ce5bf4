//! Tenants (issue #51): the engine owns them, like every catalog object, and publishes an
//! immutable [`Directory`] of them (name to number) that the edges read on every call.
//!
//! A tenant is made with the next number, never one used before: a deleted tenant keeps
//! its record as a tombstone (`deleted_ms`), so its number stays taken and nothing it left
//! behind (a completed message kept for retention, a lane row) can be read as a new
//! tenant's. Deleting a tenant removes its objects and its live and dead messages in one
//! round: one log record, so a power cut leaves all of it or none.
//!
//! The directory is replaced after the round's commit (never before: an edge must not act
//! on a tenant the disk does not hold), once per round that changed a tenant or a token, by
//! the round's first completion (so before any of its answers).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::{DEFAULT_TENANT, Kind, ObjectRef, TenantId};
use hookd_storage::store::{StoreError, TenantRecord, TokenRecord};

use super::answer::reply_after;
use super::{Completion, Engine, Refusal, Tx};

/// Most tenants one hookd holds: a bound on the directory every call reads (not yet
/// measured at this size: issue #51, 7).
pub const MAX_TENANTS: usize = 100_000;
/// Largest weight of a tenant (its share of delivery against a weight-1 tenant's).
pub const MAX_WEIGHT: u32 = 1_000;
/// Most tokens of one tenant.
pub const MAX_TOKENS: usize = 1_000;

/// What a tenant's token lets its bearer do: the engine's view of it (the edge makes its
/// caller from this).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub tenant: TenantId,
    pub name: String,
    pub scopes: Vec<String>,
    /// The destinations it may use (`endpoint:NAME`, `queue:NAME`); none: all.
    pub destinations: Vec<String>,
    pub created_ms: u64,
    pub created_by: String,
}

/// One tenant as the edges see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    pub id: TenantId,
    pub record: TenantRecord,
}

/// A tenant as CreateTenant or UpdateTenant gives it, checked; the engine makes the record
/// (its times, its day's count, its number).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantDef {
    pub name: String,
    pub display_name: String,
    pub metadata: std::collections::BTreeMap<String, String>,
    /// None: an update keeps the tenant's; all zeros removes it.
    pub quota: Option<hookd_core::quota::Quota>,
    /// Its share of delivery (1 to [`MAX_WEIGHT`]); 0: 1 when made, its own on an update.
    pub weight: u32,
    /// None: an update keeps the tenant's.
    pub portal: Option<hookd_storage::store::TenantPortalRecord>,
    /// How long its completed messages are kept (0: the server's when made, its own on
    /// an update).
    pub retention_secs: u64,
}

impl TenantDef {
    pub(crate) fn into_record(self) -> TenantRecord {
        TenantRecord {
            name: self.name,
            display_name: self.display_name,
            metadata: self.metadata,
            quota: self.quota.map(Into::into),
            weight: self.weight,
            portal: self.portal,
            retention_secs: self.retention_secs,
            ..Default::default()
        }
    }
}

/// A token as CreateToken gives it: the hash of its secret (the secret itself is never
/// stored), its grants, and who made it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenDef {
    /// Unique within its tenant.
    pub name: String,
    pub hash: Vec<u8>,
    pub scopes: Vec<String>,
    pub destinations: Vec<String>,
    pub created_by: String,
}

/// Every live tenant, by name and by number: what the edges resolve a call's tenant with.
#[derive(Debug, Default)]
pub struct Directory {
    /// Fx hashing: every call with `x-hookd-tenant` looks its name up here (the keys are
    /// tenants an operator made; a caller's name is only looked up, never inserted).
    by_name: rustc_hash::FxHashMap<String, TenantId>,
    by_id: rustc_hash::FxHashMap<TenantId, Tenant>,
    /// Live tenants' tokens by their SHA-256.
    tokens: HashMap<[u8; 32], Arc<Grant>>,
}

impl Directory {
    pub fn named(&self, name: &str) -> Option<&Tenant> {
        self.by_id.get(self.by_name.get(name)?)
    }

    /// The number of the live tenant named `name`: one lookup, which every call naming a
    /// tenant makes (the record is not read).
    pub fn id_of(&self, name: &str) -> Option<TenantId> {
        self.by_name.get(name).copied()
    }

    pub fn get(&self, id: TenantId) -> Option<&Tenant> {
        self.by_id.get(&id)
    }

    /// Every tenant, in name order.
    pub fn list(&self) -> Vec<&Tenant> {
        let mut out: Vec<&Tenant> = self.by_id.values().collect();
        out.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        out
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The token whose SHA-256 is `hash`, if a live tenant has it.
    pub fn token(&self, hash: &[u8; 32]) -> Option<&Arc<Grant>> {
        self.tokens.get(hash)
    }

    /// A tenant's tokens, in name order.
    pub fn tokens_of(&self, tenant: TenantId) -> Vec<&Arc<Grant>> {
        let mut out: Vec<&Arc<Grant>> = self
            .tokens
            .values()
            .filter(|g| g.tenant == tenant)
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// Where the current [`Directory`] is published: the engine writes, the edges read.
pub type SharedDirectory = Arc<RwLock<Arc<Directory>>>;

/// The engine's tenants: every record (tombstones too) and the next number to give.
#[derive(Debug)]
pub(crate) struct Tenants {
    records: HashMap<TenantId, TenantRecord>,
    /// The live tenants' numbers by name (the records' index).
    live: HashMap<String, TenantId>,
    /// A record or token changed this round: the directory is published after its commit.
    changed: bool,
    /// Each tenant's tokens, by name.
    tokens: HashMap<TenantId, std::collections::BTreeMap<String, TokenRecord>>,
    next: u32,
    shared: SharedDirectory,
    /// Tenants' weights as their destinations' push targets read them (made at a
    /// tenant's first push destination; changed in place with the record).
    weights: HashMap<TenantId, Arc<std::sync::atomic::AtomicU32>>,
}

impl Default for Tenants {
    fn default() -> Self {
        let mut tenants = Self {
            records: HashMap::new(),
            live: HashMap::new(),
            changed: false,
            tokens: HashMap::new(),
            next: 1,
            shared: SharedDirectory::default(),
            weights: HashMap::new(),
        };
        // A store always holds `default`; this stands in until recovery reads it.
        tenants.recovered(
            TenantId::DEFAULT,
            TenantRecord {
                name: DEFAULT_TENANT.into(),
                ..Default::default()
            },
        );
        tenants
    }
}

impl Tenants {
    /// Was tenant `id` deleted (its record a tombstone)?
    pub(crate) fn deleted(&self, id: TenantId) -> bool {
        self.records.get(&id).is_some_and(|r| r.deleted_ms != 0)
    }

    /// Tenant `id`'s retention setting (seconds; 0: none, or it is gone).
    pub(crate) fn retention_secs(&self, id: TenantId) -> u64 {
        self.records
            .get(&id)
            .filter(|r| r.deleted_ms == 0)
            .map_or(0, |r| r.retention_secs)
    }

    /// Every live tenant's retention setting (seconds; 0: none).
    pub(crate) fn retentions(&self) -> impl Iterator<Item = u64> + '_ {
        self.records
            .values()
            .filter(|r| r.deleted_ms == 0)
            .map(|r| r.retention_secs)
    }

    /// Tenant `id`'s weight: 1 if it sets none or is gone.
    pub(crate) fn weight_of(&self, id: TenantId) -> u32 {
        self.records
            .get(&id)
            .filter(|r| r.deleted_ms == 0)
            .map_or(1, |r| r.weight.max(1))
    }

    /// Tenant `id`'s weight as its push targets share it (see `hookd_core::push::Share`).
    pub(crate) fn share_of(&mut self, id: TenantId) -> hookd_core::push::Share {
        let weight = self.weight_of(id);
        let cell = self
            .weights
            .entry(id)
            .or_insert_with(|| Arc::new(std::sync::atomic::AtomicU32::new(weight)))
            .clone();
        hookd_core::push::Share {
            tenant: id.0,
            weight: cell,
        }
    }

    /// A record read at start (live or a tombstone).
    pub(crate) fn recovered(&mut self, id: TenantId, record: TenantRecord) {
        self.next = self.next.max(id.0.saturating_add(1));
        self.set(id, record);
    }

    /// Tenant `id`'s record is `record` (live, or a tombstone), with the index by name.
    fn set(&mut self, id: TenantId, record: TenantRecord) {
        if let Some(old) = self.records.get(&id) {
            self.live.remove(&old.name);
        }
        if record.deleted_ms == 0 {
            self.live.insert(record.name.clone(), id);
        }
        self.records.insert(id, record);
        if let Some(cell) = self.weights.get(&id) {
            cell.store(self.weight_of(id), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A token read at start.
    pub(crate) fn token_recovered(&mut self, tenant: TenantId, name: String, record: TokenRecord) {
        self.tokens.entry(tenant).or_default().insert(name, record);
    }

    pub(crate) fn shared(&self) -> SharedDirectory {
        self.shared.clone()
    }

    /// The directory of the live tenants as the records now say.
    fn directory(&self) -> Directory {
        let mut d = Directory::default();
        for (tenant, tokens) in &self.tokens {
            if self.records.get(tenant).is_none_or(|r| r.deleted_ms != 0) {
                continue;
            }
            for (name, t) in tokens {
                let Ok(hash) = <[u8; 32]>::try_from(t.hash.as_slice()) else {
                    continue;
                };
                let grant = Grant {
                    tenant: *tenant,
                    name: name.clone(),
                    scopes: t.scopes.clone(),
                    destinations: t.destinations.clone(),
                    created_ms: t.created_ms,
                    created_by: t.created_by.clone(),
                };
                d.tokens.insert(hash, Arc::new(grant));
            }
        }
        for (id, record) in &self.records {
            if record.deleted_ms == 0 {
                d.by_name.insert(record.name.clone(), *id);
                d.by_id.insert(
                    *id,
                    Tenant {
                        id: *id,
                        record: record.clone(),
                    },
                );
            }
        }
        d
    }

    /// Publishes the records as they are now (at start).
    pub(crate) fn publish(&self) {
        let directory = Arc::new(self.directory());
        if let Ok(mut shared) = self.shared.write() {
            *shared = directory;
        }
    }

    /// At the end of a round that changed a record or a token: publishes the records as
    /// they are then, once the round's commit holds them, before any of the round's answers
    /// (a revoked token is refused from the revocation's answer on).
    pub(crate) fn publish_round(&mut self, done: &mut Vec<Completion>) {
        if !std::mem::take(&mut self.changed) {
            return;
        }
        let directory = Arc::new(self.directory());
        let shared = self.shared.clone();
        done.insert(
            0,
            Box::new(move |failure| {
                if failure.is_none()
                    && let Ok(mut shared) = shared.write()
                {
                    *shared = directory;
                }
            }),
        );
    }

    /// A live tenant's name.
    pub(crate) fn name(&self, id: TenantId) -> Option<&str> {
        self.records
            .get(&id)
            .filter(|r| r.deleted_ms == 0)
            .map(|r| r.name.as_str())
    }

    /// Tenant `id`'s record with its day's count of events set (`None`: no such tenant).
    pub(crate) fn usage(&mut self, id: TenantId, day: u64, events: u64) -> Option<&TenantRecord> {
        let record = self.records.get_mut(&id)?;
        record.usage_day = day;
        record.events_today = events;
        Some(record)
    }

    fn live_named(&self, name: &str) -> Option<TenantId> {
        self.live.get(name).copied()
    }
}

/// What a DeleteTenant removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantDeleted {
    pub messages: u64,
    pub objects: u64,
}

impl Engine {
    /// Removes a live message whole (its tenant was deleted): its rows, its timer, its
    /// place in the index and in its lane. An attempt in flight for it finds nothing when
    /// it reports.
    fn forget_live(&mut self, t: Tx<'_, '_>, now: u64, id: MessageId) -> Result<(), StoreError> {
        let Some(live) = self.index.remove(id) else {
            return Ok(());
        };
        if let Some(timer) = live.timer {
            self.wheel.remove(timer);
        }
        if let super::index::LaneTag::In(slot) = live.lane {
            self.leave_lane(live.dest, slot, id, false, now);
        }
        self.flight.remove(&id);
        t.remove_message(id)
    }

    /// CreateTenant (`create`: refused if the name is taken) or UpdateTenant (refused if
    /// there is no such tenant): the tenant's record after, and its number.
    pub(super) fn put_tenant(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        mut record: TenantRecord,
        create: bool,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<Tenant, Refusal>>,
    ) -> Result<(), StoreError> {
        let existing = self.tenants.live_named(&record.name);
        let id = match (existing, create) {
            (Some(_), true) => {
                let name = record.name;
                reply_after(done, reply, Err(Refusal::TenantExists { name }));
                return Ok(());
            }
            (None, false) => {
                let name = record.name;
                reply_after(done, reply, Err(Refusal::NoTenant { name }));
                return Ok(());
            }
            (None, true) if self.tenants.live.len() >= MAX_TENANTS => {
                reply_after(
                    done,
                    reply,
                    Err(Refusal::TooManyTenants { max: MAX_TENANTS }),
                );
                return Ok(());
            }
            (None, true) => {
                let id = TenantId(self.tenants.next);
                self.tenants.next = self.tenants.next.saturating_add(1);
                record.created_ms = now;
                id
            }
            (Some(id), false) => {
                let old = &self.tenants.records[&id];
                record.created_ms = old.created_ms;
                // An update that names no quota keeps the tenant's; the day's count stays.
                if record.quota.is_none() {
                    record.quota = old.quota;
                }
                if record.weight == 0 {
                    record.weight = old.weight;
                }
                if record.retention_secs == 0 {
                    record.retention_secs = old.retention_secs;
                }
                if record.portal.is_none() {
                    record.portal.clone_from(&old.portal);
                }
                record.usage_day = old.usage_day;
                record.events_today = old.events_today;
                id
            }
        };
        record.weight = record.weight.clamp(1, MAX_WEIGHT);
        record.updated_ms = now;
        record.deleted_ms = 0;
        t.put_object(
            &ObjectRef::tenant(id),
            &prost::Message::encode_to_vec(&record),
        );
        self.quotas.set(id, &record, now);
        self.tenants.set(id, record.clone());
        self.tenants.changed = true;
        reply_after(done, reply, Ok(Tenant { id, record }));
        Ok(())
    }

    /// DeleteTenant: refused while the tenant has live messages unless `force`; otherwise
    /// its objects and its live and dead messages go, in this round, and its record stays
    /// as a tombstone. `default` cannot be deleted.
    pub(super) fn delete_tenant(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        name: &str,
        force: bool,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<TenantDeleted, Refusal>>,
    ) -> Result<(), StoreError> {
        let Some(id) = self.tenants.live_named(name) else {
            let name = name.to_owned();
            reply_after(done, reply, Err(Refusal::NoTenant { name }));
            return Ok(());
        };
        if id.is_default() {
            reply_after(done, reply, Err(Refusal::DefaultTenant));
            return Ok(());
        }
        // The tenant's destinations (its keys start with its number).
        let dests: Vec<super::index::DestId> = self
            .index
            .dests
            .iter()
            .filter(|(_, d)| Destination::tenant_of_key(&d.key) == Some(id))
            .map(|(d, _)| d)
            .collect();
        let live: u64 = dests.iter().map(|d| self.index.live_count(*d)).sum();
        if live > 0 && !force {
            let name = name.to_owned();
            reply_after(done, reply, Err(Refusal::TenantBusy { name, live }));
            return Ok(());
        }
        let mut removed = TenantDeleted::default();
        // Live messages: their rows, their timers and their places in the index. The fresh
        // ones (never attempted, not looked up by id) are taken out of their queues first.
        for d in &dests {
            while self.index.pop_ready(*d).is_some() {}
        }
        let ids: Vec<MessageId> = self
            .index
            .live
            .iter()
            .filter(|(_, l)| dests.contains(&l.dest))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.forget_live(t, now, id)?;
            removed.messages += 1;
        }
        // Dead letters.
        for d in &dests {
            let key = self.index.dests[*d].key.clone();
            loop {
                let batch = t.dead_of(&key, 1_000)?;
                if batch.is_empty() {
                    break;
                }
                for id in batch {
                    if t.unbury(id, &key)?.is_some() {
                        t.remove_message(id)?;
                        removed.messages += 1;
                    }
                }
            }
            self.index.forget_dead(*d);
        }
        // Objects: endpoints (held by the engine too), and every other kind.
        for name in self.endpoints.names_of(id) {
            self.endpoints.remove(id, &name);
        }
        for object in t.objects_of(id)? {
            if object.kind != Kind::Tenant {
                t.remove_object(&object);
                removed.objects += 1;
            }
        }
        self.tenants.tokens.remove(&id);
        self.queues.forget_tenant(id);
        self.event_types.forget_tenant(id);
        for d in dests {
            self.index.review(d);
        }
        let Some(mut record) = self.tenants.records.get(&id).cloned() else {
            return Err(StoreError::Corrupt(format!("tenant #{id} vanished")));
        };
        record.deleted_ms = now.max(1);
        record.updated_ms = now;
        t.put_object(
            &ObjectRef::tenant(id),
            &prost::Message::encode_to_vec(&record),
        );
        self.quotas.set(id, &record, now);
        self.tenants.set(id, record);
        tracing::info!(
            tenant = name,
            id = id.0,
            messages = removed.messages,
            objects = removed.objects,
            "tenant deleted"
        );
        self.tenants.changed = true;
        reply_after(done, reply, Ok(removed));
        Ok(())
    }

    /// CreateToken: refused if the tenant has a token of that name, or as many as it may.
    pub(super) fn put_token(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        def: TokenDef,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<TokenRecord, Refusal>>,
    ) {
        let name = def.name;
        let tokens = self.tenants.tokens.entry(tenant).or_default();
        if tokens.contains_key(&name) {
            reply_after(done, reply, Err(Refusal::TokenExists { name }));
            return;
        }
        if tokens.len() >= MAX_TOKENS {
            reply_after(done, reply, Err(Refusal::TooManyTokens { max: MAX_TOKENS }));
            return;
        }
        let record = TokenRecord {
            hash: def.hash,
            scopes: def.scopes,
            destinations: def.destinations,
            created_ms: now,
            created_by: def.created_by,
        };
        let object = ObjectRef::new(tenant, Kind::Token, &name);
        t.put_object(&object, &prost::Message::encode_to_vec(&record));
        tokens.insert(name, record.clone());
        self.tenants.changed = true;
        reply_after(done, reply, Ok(record));
    }

    /// RevokeToken: the token's record goes; the directory without it is published when
    /// the round is durable, before the answer.
    pub(super) fn revoke_token(
        &mut self,
        t: Tx<'_, '_>,
        tenant: TenantId,
        name: &str,
        done: &mut Vec<Completion>,
        reply: tokio::sync::oneshot::Sender<Result<(), Refusal>>,
    ) {
        let removed = self
            .tenants
            .tokens
            .get_mut(&tenant)
            .and_then(|tokens| tokens.remove(name));
        if removed.is_none() {
            let name = name.to_owned();
            reply_after(done, reply, Err(Refusal::NoToken { name }));
            return;
        }
        t.remove_object(&ObjectRef::new(tenant, Kind::Token, name));
        self.tenants.changed = true;
        reply_after(done, reply, Ok(()));
    }
}
