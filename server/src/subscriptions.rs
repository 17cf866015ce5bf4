//! Subscriptions (issue #29): which endpoints and pull queues get a delivery of an event
//! published to a topic, by event-type pattern and an optional filter on the event.
//!
//! Kept like ingest sources: stored in the `subscriptions` table through the engine (so a
//! PutSubscription is durable before it is answered, and replayed from the log after a
//! crash), and held in memory as one immutable snapshot that every publish reads (a read
//! lock and an `Arc` clone) and every change replaces whole. Writers are serialised by a
//! mutex held across the engine's commit, so the snapshot never shows a subscription the
//! disk does not hold, nor misses one it does.
//!
//! A publish is routed here, off the engine thread: the patterns through a
//! [`TopicIndex`] (exact types hashed, wildcards checked one by one), then the filters of
//! those that match, over the event's document (built once, and only if one of them has a
//! filter). Each destination gets one delivery, however many of its subscriptions match.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, RwLock};

use hookd_core::destination::{Destination, To};
use hookd_core::filter::index::FilterIndex;
use hookd_core::filter::{EventIdentity, Filter, Steps, event_document};
use hookd_core::names::check_name;
use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_core::topics::{Pattern, TopicIndex};
use hookd_engine::{EngineHandle, Refusal};

/// Most subscriptions hookd holds (what the routing cost was measured at: see
/// `docs/performance.md`).
pub(crate) const MAX_SUBSCRIPTIONS: usize = 10_000;
/// Most event-type patterns of one subscription.
pub(crate) const MAX_PATTERNS: usize = 64;
/// Longest description, in bytes.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 1_024;
/// The work routing one publish may do through its topic's filters (see
/// [`hookd_core::filter::Steps`]): about 10 to 50 ms of one core. A publish that needs more
/// is refused naming this limit, so no payload makes a publish cost more.
pub(crate) const MAX_MATCH_STEPS: u64 = 2_000_000;
/// Payloads larger than this are routed off the runtime's workers (their thread is handed
/// to the blocking pool while the document is built and matched).
const ROUTE_INLINE_BYTES: usize = 16 << 10;

/// Subscription `name`'s object in the catalog.
fn object(tenant: TenantId, name: &str) -> ObjectRef {
    ObjectRef::new(tenant, Kind::Subscription, name)
}

pub use hookd_core::subscription::SubscriptionSpec;

/// A subscription, checked and compiled: a tenant's.
#[derive(Debug)]
pub struct Subscription {
    pub tenant: TenantId,
    pub spec: SubscriptionSpec,
    pub destination: Destination,
    patterns: Vec<Pattern>,
    filter: Option<Arc<Filter>>,
}

impl Subscription {
    /// Checks `spec`, a new one (PutSubscription): its filter names the event's fields at
    /// its top and passes every check ([`Filter::parse_event`]); errors name the field
    /// under `field` (`subscription`).
    pub fn compile(tenant: TenantId, spec: SubscriptionSpec, field: &str) -> Result<Self, String> {
        Self::compile_with(tenant, spec, field, Filter::parse_event)
    }

    /// Checks `spec` as stored: its filter is read as the hookd that stored it accepted it
    /// ([`Filter::parse_stored`]), so a check added since never stops a start.
    pub fn compile_stored(
        tenant: TenantId,
        spec: SubscriptionSpec,
        field: &str,
    ) -> Result<Self, String> {
        Self::compile_with(tenant, spec, field, Filter::parse_stored)
    }

    fn compile_with(
        tenant: TenantId,
        spec: SubscriptionSpec,
        field: &str,
        parse: impl Fn(&serde_json::Value, &str) -> Result<Filter, hookd_core::filter::FilterError>,
    ) -> Result<Self, String> {
        check_name(&spec.name, &format!("{field}.name"))?;
        // The spec names its destination without a tenant: the subscription's own.
        let destination = match Destination::from_local_key(tenant, &spec.destination) {
            Some(d) if !matches!(d.to, To::Url(_)) => d,
            _ => {
                return Err(format!(
                    "{field}.destination: one of endpoint or queue is required"
                ));
            }
        };
        match &destination.to {
            To::Endpoint(name) => check_name(name, &format!("{field}.endpoint"))?,
            To::Queue(name) => check_name(name, &format!("{field}.queue"))?,
            To::Url(_) => {}
        }
        if spec.event_types.is_empty() {
            return Err(format!(
                "{field}.event_types: at least one is required (\"*\" takes every topic)"
            ));
        }
        if spec.event_types.len() > MAX_PATTERNS {
            return Err(format!(
                "{field}.event_types: {} is over the limit of {MAX_PATTERNS}",
                spec.event_types.len()
            ));
        }
        let patterns = spec
            .event_types
            .iter()
            .enumerate()
            .map(|(i, p)| Pattern::parse(p, &format!("{field}.event_types[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let filter = match &spec.filter {
            None => None,
            Some(value) => Some(Arc::new(
                parse(value, &format!("{field}.filter")).map_err(|e| e.to_string())?,
            )),
        };
        if spec.description.len() > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "{field}.description: {} bytes is over the limit of {MAX_DESCRIPTION_BYTES}",
                spec.description.len()
            ));
        }
        Ok(Self {
            tenant,
            spec,
            destination,
            patterns,
            filter,
        })
    }
}

/// One tenant's subscriptions, and the index its publishes are routed through (each tenant
/// has its own: no tenant's filters cost another's publishes anything). Immutable: a change
/// builds the next one.
#[derive(Debug, Default)]
struct Set {
    by_name: BTreeMap<String, Arc<Subscription>>,
    /// `by_name`'s values in order; the index's keys are positions here.
    list: Vec<Arc<Subscription>>,
    index: TopicIndex<usize>,
    /// The list's filters, by position.
    filters: FilterIndex,
}

impl Set {
    /// Where an event published to `topic` goes: each destination one of whose
    /// subscriptions takes the topic and matches the event, once, in the order of the
    /// first such subscription's name. The filters are matched through the
    /// [`FilterIndex`] within [`MAX_MATCH_STEPS`]; past it, the refusal's message.
    fn route(
        &self,
        topic: &str,
        payload: &[u8],
        headers: &BTreeMap<String, String>,
        identity: Option<EventIdentity<'_>>,
        spent: &mut u64,
    ) -> Result<Vec<Destination>, String> {
        // In the subscriptions' name order (the list's), whatever the index found first:
        // a publish's delivery ids follow it.
        let mut matched = self.index.matching(topic);
        matched.sort_unstable();
        let filtered = matched
            .iter()
            .filter(|i| self.filters.filtered(**i))
            .count();
        if filtered > 0 {
            let document = event_document(
                identity,
                topic,
                payload,
                headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            );
            let mut steps = Steps::new(MAX_MATCH_STEPS);
            let selected = self.filters.select(&document, &matched, &mut steps);
            *spent = MAX_MATCH_STEPS - steps.left();
            matched = selected.map_err(|_| {
                format!(
                    "payload: matching this event against the {filtered} subscription filters \
                     of topic {topic:?} takes more than {MAX_MATCH_STEPS} steps, hookd's limit \
                     per publish; send a smaller payload (large arrays are what cost), or \
                     simplify the filters (fields equal to values are indexed and cost almost \
                     nothing)"
                )
            })?;
        }
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for i in matched {
            let Some(s) = self.list.get(i) else {
                continue;
            };
            if seen.insert(s.spec.destination.as_str()) {
                out.push(s.destination.clone());
            }
        }
        Ok(out)
    }

    fn build(by_name: BTreeMap<String, Arc<Subscription>>) -> Self {
        let list: Vec<Arc<Subscription>> = by_name.values().cloned().collect();
        let mut index = TopicIndex::default();
        for (i, s) in list.iter().enumerate() {
            for p in &s.patterns {
                index.insert(p, i);
            }
        }
        let filters = FilterIndex::build(list.iter().map(|s| s.filter.clone()));
        Self {
            by_name,
            list,
            index,
            filters,
        }
    }
}

/// Why a subscription cannot be put or deleted.
#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Full(String),
    #[error(transparent)]
    Refused(#[from] Refusal),
}

/// Every tenant's [`Set`], looked up on every publish (Fx hashing of a tenant's number).
type Sets = rustc_hash::FxHashMap<TenantId, Arc<Set>>;

#[derive(Debug)]
pub struct Subscriptions {
    sets: RwLock<Arc<Sets>>,
    write: tokio::sync::Mutex<()>,
    engine: EngineHandle,
    metrics: Arc<hookd_metrics::Metrics>,
}

impl Subscriptions {
    /// The stored subscriptions, compiled. One that no longer compiles stops the start,
    /// naming it: serving without it would drop its deliveries without a word.
    pub fn load(
        stored: Vec<(ObjectRef, Vec<u8>)>,
        engine: EngineHandle,
        metrics: Arc<hookd_metrics::Metrics>,
    ) -> Result<Self, (String, String)> {
        let mut by_tenant: HashMap<TenantId, BTreeMap<String, Arc<Subscription>>> = HashMap::new();
        let count = stored.len();
        for (object, bytes) in stored {
            let key = format!(
                "stored subscription {:?} of tenant #{}",
                object.name, object.tenant
            );
            let spec: SubscriptionSpec = serde_json::from_slice(&bytes)
                .map_err(|e| (key.clone(), format!("unreadable: {e}")))?;
            let compiled = Subscription::compile_stored(object.tenant, spec, "subscription")
                .map_err(|e| {
                    (
                        key.clone(),
                        format!("{e} (delete it, or restore the limit)"),
                    )
                })?;
            by_tenant
                .entry(object.tenant)
                .or_default()
                .insert(object.name, Arc::new(compiled));
        }
        metrics.subscriptions.set(count as i64);
        let sets = by_tenant
            .into_iter()
            .map(|(tenant, by_name)| (tenant, Arc::new(Set::build(by_name))))
            .collect();
        Ok(Self {
            sets: RwLock::new(Arc::new(sets)),
            write: tokio::sync::Mutex::new(()),
            engine,
            metrics,
        })
    }

    /// Tenant `tenant`'s subscriptions as they are now (none: an empty set).
    fn snapshot(&self, tenant: TenantId) -> Arc<Set> {
        self.read().get(&tenant).cloned().unwrap_or_default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Arc<Sets>> {
        self.sets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn get(&self, tenant: TenantId, name: &str) -> Option<Arc<Subscription>> {
        self.snapshot(tenant).by_name.get(name).cloned()
    }

    /// A tenant's subscriptions, by name.
    pub fn list(&self, tenant: TenantId) -> Vec<Arc<Subscription>> {
        self.snapshot(tenant).list.clone()
    }

    /// The names of the subscriptions that deliver to `destination`.
    pub fn of_destination(&self, destination: &Destination) -> Vec<String> {
        self.snapshot(destination.tenant)
            .list
            .iter()
            .filter(|s| s.destination == *destination)
            .map(|s| s.spec.name.clone())
            .collect()
    }

    /// Where an event published to `topic` goes: see [`Set::route`]. A large payload is
    /// routed with this worker thread handed to the blocking pool, so the runtime's other
    /// tasks (other callers, health) go on on a new worker meanwhile.
    /// The destinations of `tenant`'s subscriptions that take an event of `topic`.
    pub fn route(
        &self,
        tenant: TenantId,
        topic: &str,
        payload: &[u8],
        headers: &BTreeMap<String, String>,
        identity: Option<EventIdentity<'_>>,
    ) -> Result<Vec<Destination>, String> {
        let mut spent = 0;
        let off_workers = payload.len() > ROUTE_INLINE_BYTES
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let to = if off_workers {
            let set = self.snapshot(tenant);
            tokio::task::block_in_place(|| set.route(topic, payload, headers, identity, &mut spent))
        } else {
            // A small event is routed under the read lock (bounded by the filters' step
            // budget), without taking a reference to the tenant's set: a publish spread
            // over many tenants finds each one's set cold, and its count too.
            match self.read().get(&tenant) {
                Some(set) => set.route(topic, payload, headers, identity, &mut spent),
                None => Ok(Vec::new()),
            }
        };
        if spent > 0 {
            self.metrics.publish_match_steps.observe(spent as f64);
        }
        match &to {
            Ok(to) if to.is_empty() => self.metrics.unrouted.inc(),
            Err(_) => self.metrics.refused("match_steps"),
            Ok(_) => {}
        }
        to
    }

    /// Creates or replaces a subscription (its times are set here); durable when it
    /// returns. True when it was created.
    pub async fn put(
        &self,
        tenant: TenantId,
        mut spec: SubscriptionSpec,
        now_ms: u64,
    ) -> Result<(Arc<Subscription>, bool), SubscriptionError> {
        let _write = self.write.lock().await;
        let existing = self.get(tenant, &spec.name);
        spec.created_ms = existing.as_ref().map_or(now_ms, |s| s.spec.created_ms);
        spec.updated_ms = now_ms;
        let compiled = Subscription::compile(tenant, spec, "subscription")
            .map_err(SubscriptionError::Invalid)?;
        if existing.is_none() && self.snapshot(tenant).by_name.len() >= MAX_SUBSCRIPTIONS {
            return Err(SubscriptionError::Full(format!(
                "subscription: this tenant holds {MAX_SUBSCRIPTIONS} subscriptions, hookd's limit; delete one first"
            )));
        }
        let name = compiled.spec.name.clone();
        self.engine.put_subscription(tenant, &compiled.spec).await?;
        let compiled = Arc::new(compiled);
        self.replace(tenant, |by_name| {
            by_name.insert(name, compiled.clone());
        });
        Ok((compiled, existing.is_none()))
    }

    /// Deletes a subscription; durable when it returns. Deliveries already stored stay.
    pub async fn delete(&self, tenant: TenantId, name: &str) -> Result<(), SubscriptionError> {
        let _write = self.write.lock().await;
        if self.get(tenant, name).is_none() {
            return Err(SubscriptionError::NotFound(format!(
                "name: no subscription named {name:?}"
            )));
        }
        self.engine.delete_object(object(tenant, name)).await?;
        self.replace(tenant, |by_name| {
            by_name.remove(name);
        });
        Ok(())
    }

    /// Forgets a deleted tenant's subscriptions (the engine removed their records).
    pub async fn forget(&self, tenant: TenantId) {
        let _write = self.write.lock().await;
        self.replace(tenant, BTreeMap::clear);
    }

    /// The next snapshot: the current one, with `tenant`'s subscriptions changed by
    /// `change`.
    fn replace(
        &self,
        tenant: TenantId,
        change: impl FnOnce(&mut BTreeMap<String, Arc<Subscription>>),
    ) {
        let mut by_name = self.snapshot(tenant).by_name.clone();
        change(&mut by_name);
        let mut sets = Sets::clone(&self.read());
        if by_name.is_empty() {
            sets.remove(&tenant);
        } else {
            sets.insert(tenant, Arc::new(Set::build(by_name)));
        }
        let count: usize = sets.values().map(|s| s.list.len()).sum();
        self.metrics.subscriptions.set(count as i64);
        *self
            .sets
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(sets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, destination: &str, types: &[&str]) -> SubscriptionSpec {
        SubscriptionSpec {
            name: name.into(),
            destination: destination.into(),
            event_types: types.iter().map(|t| (*t).to_owned()).collect(),
            filter: None,
            description: String::new(),
            created_ms: 0,
            updated_ms: 0,
        }
    }

    fn set(specs: Vec<SubscriptionSpec>) -> Set {
        Set::build(
            specs
                .into_iter()
                .map(|s| {
                    let c = Subscription::compile(TenantId::DEFAULT, s, "subscription").unwrap();
                    (c.spec.name.clone(), Arc::new(c))
                })
                .collect(),
        )
    }

    #[test]
    fn a_subscription_is_checked_field_by_field() {
        let err = |s: SubscriptionSpec| {
            Subscription::compile(TenantId::DEFAULT, s, "subscription").unwrap_err()
        };
        assert!(err(spec("a b", "queue:q", &["*"])).starts_with("subscription.name:"));
        assert_eq!(
            err(spec("a", "url:https://x.example", &["*"])),
            "subscription.destination: one of endpoint or queue is required"
        );
        assert!(err(spec("a", "queue:q", &[])).starts_with("subscription.event_types:"));
        assert!(
            err(spec("a", "queue:q", &["ok", "bad type"]))
                .starts_with("subscription.event_types[1]:")
        );
        let mut bad = spec("a", "endpoint:crm", &["ticket.*"]);
        bad.filter = Some(serde_json::json!({"data": {"$or": [{"a": 1}, {"b": {"$gte": {}}}]}}));
        let e = err(bad);
        assert!(
            e.starts_with("subscription.filter.data.$or[1].b.$gte"),
            "{e}"
        );
        // Issue #49, 7: a misspelt field of the event, and `$in` of one number, never
        // match: a new subscription with either is refused naming it...
        for (filter, at) in [
            (
                serde_json::json!({"dta": {"a": 1}}),
                "subscription.filter.dta:",
            ),
            (
                serde_json::json!({"data": {"n": {"$in": 5}}}),
                "subscription.filter.data.n.$in:",
            ),
        ] {
            let mut bad = spec("a", "queue:q", &["*"]);
            bad.filter = Some(filter.clone());
            let e = err(bad.clone());
            assert!(e.starts_with(at), "{e}");
            // ...but one an older hookd stored still loads (a start never stops for it).
            assert!(
                Subscription::compile_stored(TenantId::DEFAULT, bad, "subscription").is_ok(),
                "{filter}"
            );
        }
    }

    #[test]
    fn a_topic_routes_to_each_matching_destination_once() {
        let mut filtered = spec("urgent-only", "endpoint:pager", &["ticket.*"]);
        filtered.filter = Some(serde_json::json!({"data": {"priority": "urgent"}}));
        let s = set(vec![
            spec("all", "queue:audit", &["*"]),
            spec(
                "crm",
                "endpoint:crm",
                &["ticket.classified", "ticket.reply.*"],
            ),
            spec("crm-again", "endpoint:crm", &["ticket.*"]),
            filtered,
            spec("billing", "endpoint:billing", &["invoice.*"]),
        ]);
        let keys = |topic: &str, payload: &str| -> Vec<String> {
            let mut k: Vec<String> = s
                .route(topic, payload.as_bytes(), &BTreeMap::new(), None, &mut 0)
                .unwrap()
                .iter()
                .map(Destination::key)
                .collect();
            k.sort();
            k
        };
        assert_eq!(
            keys("ticket.classified", r#"{"priority":"low"}"#),
            ["endpoint:crm", "queue:audit"]
        );
        assert_eq!(
            keys("ticket.classified", r#"{"priority":"urgent"}"#),
            ["endpoint:crm", "endpoint:pager", "queue:audit"]
        );
        assert_eq!(
            keys("invoice.paid", "not json"),
            ["endpoint:billing", "queue:audit"]
        );
        assert_eq!(keys("user.created", "{}"), ["queue:audit"]);
        // In the order of the names of the subscriptions that took them, not the index's
        // (exact types before wildcards).
        let ordered: Vec<String> = s
            .route(
                "ticket.classified",
                br#"{"priority":"urgent"}"#,
                &BTreeMap::new(),
                None,
                &mut 0,
            )
            .unwrap()
            .iter()
            .map(Destination::key)
            .collect();
        assert_eq!(ordered, ["queue:audit", "endpoint:crm", "endpoint:pager"]);
    }
}
