//! The event-type catalog: the event types a deployment declares (`[[event_types]]`), each
//! with a description and, optionally, a JSON Schema its payloads must satisfy.
//!
//! Enqueue and EnqueueBatch check an event against its type's schema before anything is
//! stored: a payload that fails is refused as INVALID_ARGUMENT (HTTP 400) naming where it
//! fails (`payload: at /priority does not satisfy event type "ticket.classified"'s schema:
//! "urgent" is not one of ...`). An event type the catalog does not declare is accepted,
//! unless `strict_event_types` is on; then it (and an event with no type) is refused. Ingest sources are not checked against the catalog: a provider
//! cannot change what it sends; a source's own `json_schema` is where its payloads are
//! checked.

use std::collections::BTreeMap;
use std::path::PathBuf;

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
}

/// One compiled entry.
#[derive(Debug)]
pub struct EventType {
    pub name: String,
    pub description: String,
    /// The schema's text, to show.
    pub schema_text: Option<String>,
    schema: Option<jsonschema::Validator>,
}

/// The compiled catalog, shared by the API and the console.
#[derive(Debug, Default)]
pub struct Catalog {
    types: BTreeMap<String, EventType>,
    strict: bool,
}

/// Why an event does not fit the catalog: the field and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misfit {
    pub field: &'static str,
    pub message: String,
}

impl Catalog {
    /// Compiles the config's declarations; errors name the key (`event_types[2].json_schema`).
    pub fn compile(specs: &[EventTypeSpec], strict: bool) -> Result<Catalog, (String, String)> {
        let mut types = BTreeMap::new();
        for (i, spec) in specs.iter().enumerate() {
            let key = format!("event_types[{i}]");
            check_name(&spec.name).map_err(|why| (format!("{key}.name"), why))?;
            // The schema's text, and the key it came from (for the errors about it).
            let given = match (&spec.json_schema, &spec.json_schema_file) {
                (Some(_), Some(_)) => {
                    return Err((
                        format!("{key}.json_schema_file"),
                        "give json_schema or json_schema_file, not both".into(),
                    ));
                }
                (Some(text), None) => Some((text.clone(), "json_schema")),
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(path).map_err(|e| {
                        (
                            format!("{key}.json_schema_file"),
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?;
                    Some((text, "json_schema_file"))
                }
                (None, None) => None,
            };
            let schema = given
                .as_ref()
                .map(|(text, field)| {
                    compile_schema(text).map_err(|why| (format!("{key}.{field}"), why))
                })
                .transpose()?;
            let schema_text = given.map(|(text, _)| text);
            let entry = EventType {
                name: spec.name.clone(),
                description: spec.description.clone(),
                schema_text,
                schema,
            };
            if types.insert(spec.name.clone(), entry).is_some() {
                return Err((
                    format!("{key}.name"),
                    format!("a second event type named {:?}", spec.name),
                ));
            }
        }
        Ok(Catalog { types, strict })
    }

    pub fn strict(&self) -> bool {
        self.strict
    }

    /// Every declared type, by name.
    pub fn types(&self) -> impl Iterator<Item = &EventType> {
        self.types.values()
    }

    pub fn get(&self, name: &str) -> Option<&EventType> {
        self.types.get(name)
    }

    /// Checks one event: its type is declared (when strict), and its payload satisfies the
    /// type's schema.
    pub fn check(&self, event_type: &str, payload: &[u8]) -> Result<(), Misfit> {
        let Some(declared) = self.types.get(event_type) else {
            if !self.strict {
                return Ok(());
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
        let Some(schema) = &declared.schema else {
            return Ok(());
        };
        let value: serde_json::Value = serde_json::from_slice(payload).map_err(|e| Misfit {
            field: "payload",
            message: format!("is not JSON, and event type {event_type:?} has a JSON Schema: {e}"),
        })?;
        match schema.validate(&value) {
            Ok(()) => Ok(()),
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
        }
    }

    const TICKET: &str = r#"{"type": "object", "required": ["ticket_id", "priority"],
        "properties": {"ticket_id": {"type": "string"},
                       "priority": {"enum": ["low", "normal", "high"]}}}"#;

    #[test]
    fn a_payload_is_held_to_its_types_schema() {
        let catalog = Catalog::compile(
            &[
                spec("ticket.classified", Some(TICKET)),
                spec("ticket.closed", None),
            ],
            false,
        )
        .unwrap();
        let ok = br#"{"ticket_id": "T-1", "priority": "high"}"#;
        assert_eq!(catalog.check("ticket.classified", ok), Ok(()));
        let e = catalog
            .check(
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
        let e = catalog.check("ticket.classified", b"not json").unwrap_err();
        assert!(e.message.starts_with("is not JSON"), "{}", e.message);
        // Without a schema, or undeclared and not strict: anything.
        assert_eq!(catalog.check("ticket.closed", b"not json"), Ok(()));
        assert_eq!(catalog.check("user.created", b"x"), Ok(()));
        assert_eq!(catalog.check("", b"x"), Ok(()));
    }

    #[test]
    fn strict_refuses_what_is_not_declared() {
        let catalog = Catalog::compile(&[spec("ticket.closed", None)], true).unwrap();
        assert_eq!(catalog.check("ticket.closed", b"{}"), Ok(()));
        let e = catalog.check("ticket.opened", b"{}").unwrap_err();
        assert_eq!(e.field, "event_type");
        assert!(
            e.message
                .contains("\"ticket.opened\" is not a declared event type")
        );
        assert_eq!(catalog.check("", b"{}").unwrap_err().field, "event_type");
    }

    #[test]
    fn bad_declarations_are_refused_naming_the_key() {
        let err = |specs: &[EventTypeSpec]| Catalog::compile(specs, false).unwrap_err();
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
