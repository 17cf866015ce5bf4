//! Event types: what each tenant declares (issue #51), each with a description and,
//! optionally, a JSON Schema its payloads must satisfy. `default`'s come from the config
//! file (`[[event_types]]`, read-only) and from PutEventType; every other tenant's from
//! PutEventType only. A tenant's events are checked against its own declarations, never
//! another tenant's.
//!
//! Enqueue and EnqueueBatch check an event against its type's schema before anything is
//! stored: a payload that fails is refused as INVALID_ARGUMENT (HTTP 400) naming where it
//! fails (`payload: at /priority does not satisfy event type "ticket.classified"'s schema:
//! "urgent" is not one of ...`). An event type its tenant does not declare is accepted,
//! unless `strict_event_types` is on (for every tenant); then it (and an event with no
//! type) is refused. Ingest sources are not checked against the catalog: a provider cannot
//! change what it sends; a source's own `json_schema` is where its payloads are checked.
//!
//! The engine makes a declaration durable (it builds and writes the record); this module
//! compiles the schema before that (a schema that does not compile is never stored) and
//! holds every tenant's compiled catalog as an immutable snapshot the hot path reads with
//! one read lock and an `Arc` clone. Writers are serialised across the engine's commit,
//! so the snapshot never shows a declaration the disk does not hold, nor misses one.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use hookd_core::scope::{ObjectRef, TenantId};
use hookd_storage::store::EventTypeRecord;
use serde::{Deserialize, Serialize};

/// One declared event type, as the config file writes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventTypeSpec {
    /// The event type, exactly as producers send it (`ticket.classified`).
    pub name: String,
    /// What the event means, for the people who subscribe to it.
    #[serde(default)]
    pub description: String,
    /// A JSON Schema (draft 2020-12 unless its `$schema` says otherwise) every payload of
    /// this type must satisfy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<String>,
    /// The schema from a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema_file: Option<PathBuf>,
    /// JSON pointers into the payload whose values SearchMessages can match (at most 8):
    /// `["/customer/id", "/order_id"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search_keys: Vec<String>,
}

/// One compiled declaration.
#[derive(Debug)]
pub struct EventType {
    pub name: String,
    pub description: String,
    /// The schema's text, to show.
    pub schema_text: Option<String>,
    schema: Option<jsonschema::Validator>,
    /// JSON pointers whose values the search index keeps (see [`EventType::with_search_keys`]).
    pub search_keys: Vec<String>,
    /// Declared in the config file (read-only over the API).
    pub from_config: bool,
    /// When PutEventType made it and last changed it (0 for the config file's).
    pub created_ms: u64,
    pub updated_ms: u64,
}

impl EventType {
    /// Compiles one declaration; the error names the field (`json_schema`) and the fault.
    pub fn compile(
        name: &str,
        description: &str,
        schema_text: Option<String>,
    ) -> Result<EventType, (&'static str, String)> {
        check_name(name).map_err(|why| ("name", why))?;
        let schema = schema_text
            .as_deref()
            .map(compile_schema)
            .transpose()
            .map_err(|why| ("json_schema", why))?;
        Ok(EventType {
            name: name.to_owned(),
            description: description.to_owned(),
            schema_text,
            schema,
            search_keys: Vec::new(),
            from_config: false,
            created_ms: 0,
            updated_ms: 0,
        })
    }

    /// A stored declaration (the engine's record), compiled.
    pub fn from_record(r: &EventTypeRecord) -> Result<EventType, (&'static str, String)> {
        let text = (!r.json_schema.is_empty()).then(|| r.json_schema.clone());
        let mut t =
            Self::compile(&r.name, &r.description, text)?.with_search_keys(&r.search_keys)?;
        t.created_ms = r.created_ms;
        t.updated_ms = r.updated_ms;
        Ok(t)
    }
}

/// Search keys one event type may declare.
pub const MAX_SEARCH_KEYS: usize = 8;
/// The longest JSON pointer a search key may be, in bytes.
const MAX_POINTER: usize = 256;
/// The longest value text the index keeps of a search key (longer ones are not indexed).
const MAX_INDEXED_VALUE: usize = 512;

/// Checks a JSON pointer (RFC 6901): empty (the whole payload) is refused, else `/` then
/// tokens in which `~` is only `~0` or `~1`.
pub fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') {
        return Err(format!(
            "{pointer:?} is not a JSON pointer (it starts with /)"
        ));
    }
    if pointer.len() > MAX_POINTER {
        return Err(format!(
            "{} bytes is over the limit of {MAX_POINTER}",
            pointer.len()
        ));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!("{pointer:?}: ~ is only ~0 or ~1 in a JSON pointer"));
        }
    }
    Ok(())
}

/// The text the search index keeps of a scalar JSON value: a string's characters, another
/// scalar's JSON (`42`, `true`, `null`); none for an object or an array.
pub fn indexed_value(value: &serde_json::Value) -> Option<String> {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(_) | serde_json::Value::Array(_) => return None,
        other => other.to_string(),
    };
    (text.len() <= MAX_INDEXED_VALUE).then_some(text)
}

/// The texts the search index keeps of a payload (`value`, parsed) under `keys`: each
/// key's value (`hookd_storage::store::search::declared_text`), for the keys the payload
/// has with a scalar value.
pub fn indexed_by(keys: &[String], value: &serde_json::Value) -> Vec<String> {
    keys.iter()
        .filter_map(|key| {
            let text = indexed_value(value.pointer(key)?)?;
            let bytes = hookd_storage::store::search::declared_text(key, &text);
            String::from_utf8(bytes).ok()
        })
        .collect()
}

/// Checks declared search keys (an event type's or a source's): at most
/// [`MAX_SEARCH_KEYS`] RFC 6901 pointers, none twice. The error follows `search_keys`
/// (`": 9 keys is over..."`, `"[2]: ..."`).
pub fn check_search_keys(keys: &[String]) -> Result<(), String> {
    if keys.len() > MAX_SEARCH_KEYS {
        return Err(format!(
            ": {} keys is over the limit of {MAX_SEARCH_KEYS}",
            keys.len()
        ));
    }
    for (i, key) in keys.iter().enumerate() {
        check_pointer(key).map_err(|why| format!("[{i}]: {why}"))?;
        if keys[..i].contains(key) {
            return Err(format!("[{i}]: {key:?} is given twice"));
        }
    }
    Ok(())
}

impl EventType {
    /// The texts the search index keeps of a payload (`value`, parsed) of this type (see
    /// [`indexed_by`]).
    pub fn indexed(&self, value: &serde_json::Value) -> Vec<String> {
        indexed_by(&self.search_keys, value)
    }

    /// Declares the JSON pointers whose values the search index keeps; the error names
    /// the field (`search_keys`).
    pub fn with_search_keys(mut self, keys: &[String]) -> Result<Self, (&'static str, String)> {
        check_search_keys(keys).map_err(|why| {
            (
                "search_keys",
                why.strip_prefix(": ").map(str::to_owned).unwrap_or(why),
            )
        })?;
        self.search_keys = keys.to_vec();
        Ok(self)
    }
}

/// One tenant's declarations: an immutable snapshot, replaced whole on a change.
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    types: BTreeMap<String, Arc<EventType>>,
}

/// Why an event does not fit the catalog: the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misfit {
    pub field: &'static str,
    pub message: String,
}

impl Catalog {
    /// Compiles the config's declarations; errors name the key (`event_types[2].json_schema`).
    pub fn compile(specs: &[EventTypeSpec]) -> Result<Catalog, (String, String)> {
        let mut types = BTreeMap::new();
        for (i, spec) in specs.iter().enumerate() {
            let key = format!("event_types[{i}]");
            // The schema's text, and the key it came from (for the errors about it).
            let (text, field) = match (&spec.json_schema, &spec.json_schema_file) {
                (Some(_), Some(_)) => {
                    return Err((
                        format!("{key}.json_schema_file"),
                        "give json_schema or json_schema_file, not both".into(),
                    ));
                }
                (Some(text), None) => (Some(text.clone()), "json_schema"),
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        (
                            format!("{key}.json_schema_file"),
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?;
                    (Some(text), "json_schema_file")
                }
                (None, None) => (None, "json_schema"),
            };
            let mut entry =
                EventType::compile(&spec.name, &spec.description, text).map_err(|(at, why)| {
                    let at = if at == "json_schema" { field } else { at };
                    (format!("{key}.{at}"), why)
                })?;
            entry = entry
                .with_search_keys(&spec.search_keys)
                .map_err(|(at, why)| (format!("{key}.{at}"), why))?;
            entry.from_config = true;
            if types.insert(spec.name.clone(), Arc::new(entry)).is_some() {
                return Err((
                    format!("{key}.name"),
                    format!("a second event type named {:?}", spec.name),
                ));
            }
        }
        Ok(Catalog { types })
    }

    /// Every declared type, by name.
    pub fn types(&self) -> impl Iterator<Item = &Arc<EventType>> {
        self.types.values()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<EventType>> {
        self.types.get(name)
    }

    pub fn len(&self) -> usize {
        self.types.len()
    }

    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// Checks one event: its type is declared (when `strict`), and its payload satisfies
    /// the type's schema.
    pub fn check(&self, strict: bool, event_type: &str, payload: &[u8]) -> Result<(), Misfit> {
        self.check_and_index(strict, event_type, payload).map(drop)
    }

    /// [`Catalog::check`], and the texts the search index keeps of the payload: each
    /// declared search key's value (`hookd_storage::store::search::declared_text`), for
    /// the keys the payload has with a scalar value. A payload that is not JSON has none.
    pub fn check_and_index(
        &self,
        strict: bool,
        event_type: &str,
        payload: &[u8],
    ) -> Result<Vec<String>, Misfit> {
        let Some(declared) = self.types.get(event_type) else {
            if !strict {
                return Ok(Vec::new());
            }
            let message = if event_type.is_empty() {
                "an event type is required: strict_event_types is on".to_owned()
            } else {
                format!(
                    "{event_type:?} is not a declared event type (strict_event_types is on; `hookd event-types list` shows the declared ones)"
                )
            };
            return Err(Misfit {
                field: "event_type",
                message,
            });
        };
        let indexed = |value: &serde_json::Value| declared.indexed(value);
        let Some(schema) = &declared.schema else {
            if declared.search_keys.is_empty() {
                return Ok(Vec::new());
            }
            return Ok(serde_json::from_slice::<serde_json::Value>(payload)
                .map(|v| indexed(&v))
                .unwrap_or_default());
        };
        let value: serde_json::Value = serde_json::from_slice(payload).map_err(|e| Misfit {
            field: "payload",
            message: format!("is not JSON, and event type {event_type:?} has a JSON Schema: {e}"),
        })?;
        match schema.validate(&value) {
            Ok(()) => Ok(indexed(&value)),
            Err(e) => {
                let at = e.instance_path().to_string();
                Err(Misfit {
                    field: "payload",
                    message: format!(
                        "{}does not satisfy event type {event_type:?}'s schema: {e}",
                        if at.is_empty() {
                            String::new()
                        } else {
                            format!("at {at} ")
                        }
                    ),
                })
            }
        }
    }
}

/// Every tenant's catalog, and whether undeclared types are refused (`strict_event_types`,
/// for every tenant).
#[derive(Debug, Default)]
pub struct EventTypes {
    by_tenant: RwLock<HashMap<TenantId, Arc<Catalog>>>,
    strict: bool,
    /// Held across a put's or a delete's engine commit and the snapshot's change.
    write: tokio::sync::Mutex<()>,
}

impl EventTypes {
    /// The config file's declarations (`default`'s) and the stored ones of every tenant. A
    /// stored schema that no longer compiles stops the start, naming it: serving without
    /// it would let payloads through unchecked.
    pub fn load(
        config: Catalog,
        strict: bool,
        stored: Vec<(ObjectRef, Vec<u8>)>,
    ) -> Result<EventTypes, (String, String)> {
        let mut by_tenant: HashMap<TenantId, Catalog> = HashMap::new();
        if !config.is_empty() {
            by_tenant.insert(TenantId::DEFAULT, config);
        }
        for (object, bytes) in stored {
            let key = format!(
                "stored event type {:?} of tenant #{}",
                object.name, object.tenant.0
            );
            let record: EventTypeRecord = prost::Message::decode(bytes.as_slice())
                .map_err(|e| (key.clone(), format!("unreadable: {e}")))?;
            let catalog = by_tenant.entry(object.tenant).or_default();
            if catalog
                .types
                .get(&record.name)
                .is_some_and(|t| t.from_config)
            {
                tracing::warn!(
                    event_type = %record.name,
                    "an event type made over the API has the name of one in the config file; the config file's is used"
                );
                continue;
            }
            let t = EventType::from_record(&record).map_err(|(at, why)| {
                (
                    key,
                    format!(
                        "{at}: {why} (delete it with `hookd event-types delete`, or put it again)"
                    ),
                )
            })?;
            catalog.types.insert(record.name, Arc::new(t));
        }
        Ok(EventTypes {
            by_tenant: RwLock::new(
                by_tenant
                    .into_iter()
                    .map(|(k, v)| (k, Arc::new(v)))
                    .collect(),
            ),
            strict,
            write: tokio::sync::Mutex::new(()),
        })
    }

    pub fn strict(&self) -> bool {
        self.strict
    }

    /// A tenant's catalog as of now (an empty one if it declares nothing).
    pub fn of(&self, tenant: TenantId) -> Arc<Catalog> {
        self.read().get(&tenant).cloned().unwrap_or_default()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<TenantId, Arc<Catalog>>> {
        self.by_tenant
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Checks one event of `tenant`'s against its catalog.
    pub fn check(&self, tenant: TenantId, event_type: &str, payload: &[u8]) -> Result<(), Misfit> {
        self.check_and_index(tenant, event_type, payload).map(drop)
    }

    /// The texts the search index keeps of `value` (a parsed payload) under `tenant`'s
    /// type `event_type`'s search keys, without its schema check (ingest: a source has
    /// its own).
    pub fn indexed(
        &self,
        tenant: TenantId,
        event_type: &str,
        value: &serde_json::Value,
    ) -> Vec<String> {
        let catalog = self.read().get(&tenant).cloned();
        catalog
            .and_then(|c| c.get(event_type).cloned())
            .map(|t| t.indexed(value))
            .unwrap_or_default()
    }

    /// [`Catalog::check_and_index`] against `tenant`'s catalog.
    pub fn check_and_index(
        &self,
        tenant: TenantId,
        event_type: &str,
        payload: &[u8],
    ) -> Result<Vec<String>, Misfit> {
        let catalog = self.read().get(&tenant).cloned();
        match catalog {
            Some(c) => c.check_and_index(self.strict, event_type, payload),
            None => Catalog::default().check_and_index(self.strict, event_type, payload),
        }
    }

    /// Serialises a change: hold it across the engine's commit and [`EventTypes::set`] or
    /// [`EventTypes::unset`].
    pub async fn writing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.write.lock().await
    }

    /// A declaration the engine made durable.
    pub fn set(&self, tenant: TenantId, t: EventType) {
        self.change(tenant, |c| {
            c.types.insert(t.name.clone(), Arc::new(t));
        });
    }

    /// A declaration the engine removed.
    pub fn unset(&self, tenant: TenantId, name: &str) {
        self.change(tenant, |c| {
            c.types.remove(name);
        });
    }

    /// A deleted tenant's declarations are gone (the engine removed their records).
    pub fn forget_tenant(&self, tenant: TenantId) {
        self.by_tenant
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&tenant);
    }

    fn change(&self, tenant: TenantId, f: impl FnOnce(&mut Catalog)) {
        let mut map = self
            .by_tenant
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = map.get(&tenant).map(|c| (**c).clone()).unwrap_or_default();
        f(&mut next);
        if next.is_empty() {
            map.remove(&tenant);
        } else {
            map.insert(tenant, Arc::new(next));
        }
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name.len() > hookd_core::names::MAX_EVENT_TYPE_LEN {
        return Err(format!(
            "{} bytes is over the limit of {} bytes",
            name.len(),
            hookd_core::names::MAX_EVENT_TYPE_LEN
        ));
    }
    if let Some(c) = name.chars().find(|c| !('!'..='~').contains(c) || *c == '*') {
        return Err(format!(
            "character {c:?} is not allowed (printable ASCII without spaces; '*' is for subscriptions' patterns)"
        ));
    }
    Ok(())
}

fn compile_schema(text: &str) -> Result<jsonschema::Validator, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    schema_validator(&value).map_err(|e| format!("not a valid JSON Schema: {e}"))
}

/// A JSON Schema's validator: draft 2020-12 unless the schema's `$schema` names another
/// (what ingest sources and the catalog both promise).
pub(crate) fn schema_validator(
    schema: &serde_json::Value,
) -> Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    if schema.get("$schema").is_some() {
        jsonschema::validator_for(schema)
    } else {
        jsonschema::draft202012::new(schema)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, schema: Option<&str>) -> EventTypeSpec {
        EventTypeSpec {
            name: name.into(),
            description: format!("{name}, for tests"),
            json_schema: schema.map(str::to_owned),
            json_schema_file: None,
            search_keys: Vec::new(),
        }
    }

    const TICKET: &str = r#"{"type": "object", "required": ["ticket_id", "priority"],
        "properties": {"ticket_id": {"type": "string"},
                       "priority": {"enum": ["low", "normal", "high"]}}}"#;

    #[test]
    fn a_payload_is_held_to_its_types_schema() {
        let catalog = Catalog::compile(&[
            spec("ticket.classified", Some(TICKET)),
            spec("ticket.closed", None),
        ])
        .unwrap();
        let ok = br#"{"ticket_id": "T-1", "priority": "high"}"#;
        assert_eq!(catalog.check(false, "ticket.classified", ok), Ok(()));
        let e = catalog
            .check(
                false,
                "ticket.classified",
                br#"{"ticket_id": "T-1", "priority": "urgent"}"#,
            )
            .unwrap_err();
        assert_eq!(e.field, "payload");
        assert!(
            e.message.starts_with(
                "at /priority does not satisfy event type \"ticket.classified\"'s schema"
            ),
            "{}",
            e.message
        );
        let e = catalog
            .check(false, "ticket.classified", b"not json")
            .unwrap_err();
        assert!(e.message.starts_with("is not JSON"), "{}", e.message);
        // Without a schema, or undeclared and not strict: anything.
        assert_eq!(catalog.check(false, "ticket.closed", b"not json"), Ok(()));
        assert_eq!(catalog.check(false, "user.created", b"x"), Ok(()));
        assert_eq!(catalog.check(false, "", b"x"), Ok(()));
    }

    #[test]
    fn strict_refuses_what_is_not_declared() {
        let catalog = Catalog::compile(&[spec("ticket.closed", None)]).unwrap();
        assert_eq!(catalog.check(true, "ticket.closed", b"{}"), Ok(()));
        let e = catalog.check(true, "ticket.opened", b"{}").unwrap_err();
        assert_eq!(e.field, "event_type");
        assert!(
            e.message
                .contains("\"ticket.opened\" is not a declared event type")
        );
        assert_eq!(
            catalog.check(true, "", b"{}").unwrap_err().field,
            "event_type"
        );
    }

    #[test]
    fn bad_declarations_are_refused_naming_the_key() {
        let err = |specs: &[EventTypeSpec]| Catalog::compile(specs).unwrap_err();
        assert_eq!(
            err(&[spec("a", None), spec("", None)]).0,
            "event_types[1].name"
        );
        assert_eq!(err(&[spec("ticket.*", None)]).0, "event_types[0].name");
        assert_eq!(err(&[spec("a b", None)]).0, "event_types[0].name");
        let (key, why) = err(&[spec("a", None), spec("a", None)]);
        assert_eq!(
            (key.as_str(), why.as_str()),
            ("event_types[1].name", "a second event type named \"a\"")
        );
        let (key, why) = err(&[spec("a", Some("{\"type\": "))]);
        assert_eq!(key, "event_types[0].json_schema");
        assert!(why.starts_with("not JSON"), "{why}");
        let (key, why) = err(&[spec("a", Some(r#"{"type": "no-such-type"}"#))]);
        assert_eq!(key, "event_types[0].json_schema");
        assert!(why.starts_with("not a valid JSON Schema"), "{why}");
        let mut both = spec("a", Some("{}"));
        both.json_schema_file = Some("/nonexistent".into());
        assert_eq!(err(&[both]).0, "event_types[0].json_schema_file");
        let mut missing = spec("a", None);
        missing.json_schema_file = Some("/nonexistent/schema.json".into());
        let (key, why) = err(&[missing]);
        assert_eq!(key, "event_types[0].json_schema_file");
        assert!(
            why.contains("cannot read /nonexistent/schema.json"),
            "{why}"
        );
    }
}
