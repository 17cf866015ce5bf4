//! `hookd event-types ...`: a tenant's declared event types and their JSON Schemas.

use std::path::PathBuf;

use clap::Subcommand;
use hookd_proto::v1 as pb;

use super::{Api, Failure, show, show_value, table};

#[derive(Debug, Subcommand)]
pub enum EventTypesCmd {
    /// Each declared type: its name, whether it has a schema, its description; with
    /// --json, the schemas too.
    List,
    /// One declared type, with its schema.
    Get { name: String },
    /// Declare an event type, or replace its declaration.
    Put {
        name: String,
        #[arg(long)]
        description: Option<String>,
        /// The JSON Schema its payloads must satisfy, as text.
        #[arg(long, conflicts_with = "schema_file")]
        schema: Option<String>,
        /// The JSON Schema from a file.
        #[arg(long)]
        schema_file: Option<PathBuf>,
    },
    /// Delete a declaration (stored events keep their type).
    Delete { name: String },
}

pub(super) async fn event_types(
    api: &mut Api,
    json: bool,
    cmd: EventTypesCmd,
    server: &str,
) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    match cmd {
        EventTypesCmd::List => {
            // Every page, as one answer.
            let mut all = pb::ListEventTypesResponse::default();
            loop {
                let r = api
                    .list_event_types(pb::ListEventTypesRequest {
                        page_size: 1_000,
                        page_token: all.next_page_token.clone(),
                    })
                    .await
                    .map_err(fail)?
                    .into_inner();
                all.event_types.extend(r.event_types);
                all.strict = r.strict;
                all.next_page_token = r.next_page_token;
                if all.next_page_token.is_empty() {
                    break;
                }
            }
            show(json, &all, print_event_types)
        }
        EventTypesCmd::Get { name } => {
            let r = api
                .get_event_type(pb::GetEventTypeRequest { name })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                if let Some(t) = &r.event_type {
                    print_one(t);
                }
            })
        }
        EventTypesCmd::Put {
            name,
            description,
            schema,
            schema_file,
        } => {
            let json_schema = match (schema, schema_file) {
                (Some(text), _) => text,
                (None, Some(path)) => std::fs::read_to_string(&path).map_err(|e| {
                    Failure::usage(format!(
                        "--schema-file: cannot read {}: {e}",
                        path.display()
                    ))
                })?,
                (None, None) => String::new(),
            };
            let r = api
                .put_event_type(pb::PutEventTypeRequest {
                    event_type: Some(pb::EventType {
                        name,
                        description: description.unwrap_or_default(),
                        json_schema,
                        ..Default::default()
                    }),
                })
                .await
                .map_err(fail)?
                .into_inner();
            show(json, &r, |r| {
                outln!("{}", if r.created { "created" } else { "replaced" });
                if let Some(t) = &r.event_type {
                    print_one(t);
                }
            })
        }
        EventTypesCmd::Delete { name } => {
            api.delete_event_type(pb::DeleteEventTypeRequest { name: name.clone() })
                .await
                .map_err(fail)?;
            show_value(json, &serde_json::json!({ "deleted": name }), || {
                outln!("deleted event type {name}");
            })
        }
    }
}

fn print_one(t: &pb::EventType) {
    outln!("name:        {}", t.name);
    outln!("description: {}", t.description);
    outln!(
        "defined in:  {}",
        if t.from_config { "config" } else { "api" }
    );
    if t.json_schema.is_empty() {
        outln!("json schema: none");
    } else {
        outln!("json schema: {}", t.json_schema);
    }
}

fn print_event_types(r: &pb::ListEventTypesResponse) {
    let rows = r
        .event_types
        .iter()
        .map(|t| {
            vec![
                t.name.clone(),
                if t.json_schema.is_empty() {
                    "no"
                } else {
                    "yes"
                }
                .into(),
                t.description.clone(),
                if t.from_config { "config" } else { "api" }.into(),
            ]
        })
        .collect::<Vec<_>>();
    table(&["NAME", "SCHEMA", "DESCRIPTION", "DEFINED IN"], rows);
    if r.strict {
        outln!("strict: an event type not listed here is refused");
    } else {
        outln!("not strict: event types not listed here are accepted unchecked");
    }
}
