//! The OpenAPI 3.1 document of the HTTP/JSON API, drawn from the route table and the
//! .proto's descriptors (their comments become the descriptions). Schemas follow proto3's
//! JSON mapping: field names in lowerCamelCase, 64-bit integers as decimal strings, bytes
//! as base64, enums by name. Served at `/v1/openapi.json`; the committed copy
//! (`proto/hookd/v1/openapi.json`) is checked against it by a test.

use std::collections::{BTreeMap, BTreeSet};

use prost_reflect::{
    DescriptorPool, EnumDescriptor, FieldDescriptor, FileDescriptor, Kind, MessageDescriptor,
};
use serde_json::{Map, Value, json};

use super::routes::{Body, Route};

/// The document for `routes` over the descriptors in `pool`.
pub(crate) fn document(pool: &DescriptorPool, routes: &[Route]) -> Result<Value, String> {
    let service = pool
        .get_service_by_name(super::SERVICE)
        .ok_or_else(|| format!("no {}", super::SERVICE))?;
    let comments = Comments::new(&service.parent_file());
    let mut schemas = Schemas::default();
    let mut paths: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for route in routes {
        let method = service
            .methods()
            .find(|m| m.name() == route.rpc)
            .ok_or_else(|| format!("no rpc {}", route.rpc))?;
        let input = method.input();
        let output = method.output();
        let mut operation = Map::new();
        operation.insert("operationId".into(), json!(lower_camel(route.rpc)));
        operation.insert("tags".into(), json!([route.tag]));
        operation.insert("summary".into(), json!(route.summary));
        let mut description = comments.get(method.path()).unwrap_or_default();
        if !description.is_empty() {
            description.push_str("\n\n");
        }
        description.push_str(&format!(
            "The gRPC call `{}/{}`.",
            super::SERVICE,
            route.rpc
        ));
        operation.insert("description".into(), json!(description));
        let mut parameters = Vec::new();
        let mut bound = BTreeSet::new();
        for (param, field) in route.params {
            bound.insert(*field);
            parameters.push(json!({
                "name": param,
                "in": "path",
                "required": true,
                "description": format!("Sets `{}`.", json_path(&input, field)),
                "schema": {"type": "string"},
            }));
        }
        match route.body {
            Body::None => query_parameters(&input, "", "", &bound, &comments, &mut parameters, 0),
            Body::Whole => {
                operation.insert(
                    "requestBody".into(),
                    json!({
                        "required": false,
                        "content": {"application/json": {"schema": schemas.reference(&input)}},
                    }),
                );
            }
            Body::Field(name) => {
                let field = input
                    .get_field_by_name(name)
                    .ok_or_else(|| format!("{} has no field {name}", input.name()))?;
                let Kind::Message(message) = field.kind() else {
                    return Err(format!("{}.{name} is not a message", input.name()));
                };
                operation.insert(
                    "requestBody".into(),
                    json!({
                        "required": true,
                        "content": {"application/json": {"schema": schemas.reference(&message)}},
                    }),
                );
            }
        }
        if !parameters.is_empty() {
            operation.insert("parameters".into(), Value::Array(parameters));
        }
        let ok = if route.streaming {
            json!({
                "description": format!(
                    "A stream of Server-Sent Events: each `data:` line is one {} as JSON; \
                     `event: error` (data: the Error) ends it; `: keep-alive` comments come \
                     every 15 s.",
                    output.name()
                ),
                "content": {"text/event-stream": {
                    "schema": {"type": "string"},
                    "x-hookd-event": schemas.reference(&output),
                }},
            })
        } else {
            json!({
                "description": "OK",
                "content": {"application/json": {"schema": schemas.reference(&output)}},
            })
        };
        operation.insert(
            "responses".into(),
            json!({
                "200": ok,
                "default": {"$ref": "#/components/responses/Error"},
            }),
        );
        paths.entry(route.template).or_default().insert(
            route.method.as_str().to_ascii_lowercase(),
            Value::Object(operation),
        );
    }
    schemas.fill(&comments);
    let mut components = schemas.done();
    super::json_data::document(&mut components);
    components.insert(
        "ErrorBody".into(),
        json!({
            "type": "object",
            "description": "Every error: the HTTP status, the gRPC status it maps (google.rpc.Code), and a message naming the field at fault.",
            "required": ["error"],
            "properties": {"error": {
                "type": "object",
                "required": ["code", "status", "message"],
                "properties": {
                    "code": {"type": "integer", "description": "The HTTP status."},
                    "status": {"type": "string", "description": "The gRPC status name, e.g. INVALID_ARGUMENT."},
                    "message": {"type": "string"},
                    "retryAfterMs": {
                        "type": "string",
                        "pattern": "^[0-9]+$",
                        "description": "When the refusal clears by itself (RESOURCE_EXHAUSTED, UNAVAILABLE): try again after this many milliseconds. Also sent as Retry-After (seconds).",
                    },
                },
            }},
        }),
    );
    Ok(json!({
        "openapi": "3.1.0",
        "info": {
            // Generators name their package after the title: "hookd HTTP API" gives
            // `hookd_http_api_client`, not the name of hookd's own Python client.
            "title": "hookd HTTP API",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "A webhook delivery queue: durable enqueue, push delivery with retries, pull queues, dead letters, ingest sources.",
            "description": "The HTTP/JSON form of the gRPC API `hookd.v1.Hookd` (proto/hookd/v1/hookd.proto), served on hookd's HTTP listener. Each route calls the RPC it names, with the same validation, scopes and errors; JSON follows proto3's JSON mapping (lowerCamelCase names, 64-bit integers as strings, bytes as base64; the .proto's names are accepted too). An event whose payload is JSON may give it as `data` (any JSON value, stored as the text sent) instead of base64 `payload`; messages whose payload is JSON show it back as `data`. Requests other than GET must send Content-Type: application/json. With [auth], send Authorization: Bearer <token>.",
            "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
        },
        "servers": [{"url": "http://127.0.0.1:7701", "description": "hookd's default HTTP listener"}],
        "security": [{}, {"bearer": []}],
        "tags": tags(routes),
        "paths": paths,
        "components": {
            "schemas": components,
            "responses": {"Error": {
                "description": "The call was refused or failed; see the body.",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
            }},
            "securitySchemes": {"bearer": {
                "type": "http",
                "scheme": "bearer",
                "description": "A token of [auth] (hookd token new); not needed without [auth].",
            }},
        },
    }))
}

fn tags(routes: &[Route]) -> Value {
    let mut seen = Vec::new();
    for route in routes {
        if !seen.contains(&route.tag) {
            seen.push(route.tag);
        }
    }
    Value::Array(seen.into_iter().map(|t| json!({"name": t})).collect())
}

/// `Enqueue` -> `enqueue`, `PutEndpoint` -> `putEndpoint`.
fn lower_camel(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map_or_else(String::new, |first| {
        first.to_ascii_lowercase().to_string() + chars.as_str()
    })
}

/// A dotted proto path in JSON names (`endpoint.name` stays; `lease_id` -> `leaseId`).
fn json_path(input: &MessageDescriptor, path: &str) -> String {
    let mut message = Some(input.clone());
    path.split('.')
        .map(|part| {
            let field = message.as_ref().and_then(|m| m.get_field_by_name(part));
            message = field.as_ref().and_then(|f| match f.kind() {
                Kind::Message(m) => Some(m),
                _ => None,
            });
            field.map_or_else(|| part.to_owned(), |f| f.json_name().to_owned())
        })
        .collect::<Vec<_>>()
        .join(".")
}

/// A GET's fields as query parameters: scalars (and lists of scalars, repeated) by their
/// JSON name, a message's fields by dotted names (`destination.endpoint`).
fn query_parameters(
    message: &MessageDescriptor,
    prefix: &str,
    proto_prefix: &str,
    bound: &BTreeSet<&str>,
    comments: &Comments,
    out: &mut Vec<Value>,
    depth: usize,
) {
    for field in message.fields() {
        let name = format!("{prefix}{}", field.json_name());
        let proto_name = format!("{proto_prefix}{}", field.name());
        if bound.contains(proto_name.as_str()) || field.is_map() {
            continue;
        }
        match field.kind() {
            Kind::Message(inner) if !field.is_list() => {
                if depth < 3 {
                    query_parameters(
                        &inner,
                        &format!("{name}."),
                        &format!("{proto_name}."),
                        bound,
                        comments,
                        out,
                        depth + 1,
                    );
                }
            }
            Kind::Message(_) => {}
            _ => {
                let mut parameter = Map::new();
                parameter.insert("name".into(), json!(name));
                parameter.insert("in".into(), json!("query"));
                parameter.insert("required".into(), json!(false));
                if let Some(text) = comments.get(field.path()) {
                    parameter.insert("description".into(), json!(text));
                }
                let schema = scalar_schema(&field);
                if field.is_list() {
                    parameter.insert("schema".into(), json!({"type": "array", "items": schema}));
                    parameter.insert("explode".into(), json!(true));
                } else {
                    parameter.insert("schema".into(), schema);
                }
                out.push(Value::Object(parameter));
            }
        }
    }
}

/// A scalar (or enum) field's schema by proto3's JSON mapping.
fn scalar_schema(field: &FieldDescriptor) -> Value {
    match field.kind() {
        Kind::Double | Kind::Float => json!({"type": "number"}),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            json!({"type": "integer", "format": "int32"})
        }
        Kind::Uint32 | Kind::Fixed32 => {
            json!({"type": "integer", "minimum": 0, "maximum": u32::MAX})
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            json!({"type": "string", "format": "int64", "pattern": "^-?[0-9]+$"})
        }
        Kind::Uint64 | Kind::Fixed64 => {
            json!({"type": "string", "format": "uint64", "pattern": "^[0-9]+$"})
        }
        Kind::Bool => json!({"type": "boolean"}),
        Kind::String => json!({"type": "string"}),
        Kind::Bytes => json!({"type": "string", "format": "byte", "contentEncoding": "base64"}),
        Kind::Enum(e) => {
            json!({"$ref": format!("#/components/schemas/{}", schema_name(e.full_name()))})
        }
        Kind::Message(m) => match well_known(m.full_name()) {
            Some(schema) => schema,
            None => {
                json!({"$ref": format!("#/components/schemas/{}", schema_name(m.full_name()))})
            }
        },
    }
}

/// The JSON a well-known type maps to (proto3's JSON mapping: a `Struct` is any object),
/// in place of a schema of its fields.
fn well_known(full_name: &str) -> Option<Value> {
    match full_name {
        "google.protobuf.Struct" => Some(json!({"type": "object", "additionalProperties": true})),
        "google.protobuf.Value" => Some(json!({})),
        "google.protobuf.ListValue" => Some(json!({"type": "array", "items": {}})),
        _ => None,
    }
}

/// `hookd.v1.Endpoint` -> `Endpoint`; a nested `hookd.v1.A.B` -> `A_B`.
fn schema_name(full_name: &str) -> String {
    full_name
        .strip_prefix("hookd.v1.")
        .unwrap_or(full_name)
        .replace('.', "_")
}

/// The messages and enums the routes reach, each one schema.
#[derive(Default)]
struct Schemas {
    messages: BTreeMap<String, MessageDescriptor>,
    enums: BTreeMap<String, EnumDescriptor>,
    done: Map<String, Value>,
}

impl Schemas {
    fn reference(&mut self, message: &MessageDescriptor) -> Value {
        let name = schema_name(message.full_name());
        self.messages.insert(name.clone(), message.clone());
        json!({"$ref": format!("#/components/schemas/{name}")})
    }

    /// Writes every schema reached, and those they reach.
    fn fill(&mut self, comments: &Comments) {
        while let Some((name, message)) = self.messages.pop_first() {
            if self.done.contains_key(&name) {
                continue;
            }
            let schema = self.message(&message, comments);
            self.done.insert(name, schema);
        }
        for (name, e) in std::mem::take(&mut self.enums) {
            let mut schema = Map::new();
            schema.insert("type".into(), json!("string"));
            schema.insert(
                "enum".into(),
                Value::Array(e.values().map(|v| json!(v.name())).collect()),
            );
            if let Some(text) = comments.get(e.path()) {
                schema.insert("description".into(), json!(text));
            }
            self.done.insert(name, Value::Object(schema));
        }
    }

    fn message(&mut self, message: &MessageDescriptor, comments: &Comments) -> Value {
        let mut properties = Map::new();
        for field in message.fields() {
            let mut schema = if field.is_map() {
                let value = match field.kind() {
                    Kind::Message(entry) => entry.map_entry_value_field(),
                    _ => field.clone(),
                };
                self.reach(&value);
                json!({"type": "object", "additionalProperties": scalar_schema(&value)})
            } else {
                self.reach(&field);
                if field.is_list() {
                    json!({"type": "array", "items": scalar_schema(&field)})
                } else {
                    scalar_schema(&field)
                }
            };
            let mut text = comments.get(field.path()).unwrap_or_default();
            if let Some(oneof) = field.containing_oneof() {
                let others: Vec<String> = oneof
                    .fields()
                    .filter(|f| f.name() != field.name())
                    .map(|f| format!("`{}`", f.json_name()))
                    .collect();
                if !text.is_empty() {
                    text.push(' ');
                }
                text.push_str(&format!(
                    "One of `{}`: set at most one of this and {}.",
                    oneof.name(),
                    others.join(", ")
                ));
            }
            if !text.is_empty()
                && let Value::Object(schema) = &mut schema
            {
                schema.insert("description".into(), json!(text));
            }
            properties.insert(field.json_name().to_owned(), schema);
        }
        let mut schema = Map::new();
        schema.insert("type".into(), json!("object"));
        if let Some(text) = comments.get(message.path()) {
            schema.insert("description".into(), json!(text));
        }
        schema.insert("properties".into(), Value::Object(properties));
        Value::Object(schema)
    }

    fn reach(&mut self, field: &FieldDescriptor) {
        match field.kind() {
            Kind::Message(m) if well_known(m.full_name()).is_none() => {
                let name = schema_name(m.full_name());
                if !self.done.contains_key(&name) {
                    self.messages.insert(name, m);
                }
            }
            Kind::Enum(e) => {
                self.enums.insert(schema_name(e.full_name()), e);
            }
            _ => {}
        }
    }

    fn done(self) -> Map<String, Value> {
        self.done
    }
}

/// The .proto's leading comments by descriptor path.
struct Comments(BTreeMap<Vec<i32>, String>);

impl Comments {
    fn new(file: &FileDescriptor) -> Self {
        let mut by_path = BTreeMap::new();
        if let Some(info) = &file.file_descriptor_proto().source_code_info {
            for location in &info.location {
                if let Some(text) = &location.leading_comments {
                    let text = text
                        .lines()
                        .map(str::trim)
                        .collect::<Vec<_>>()
                        .join(" ")
                        .trim()
                        .to_owned();
                    if !text.is_empty() {
                        by_path.insert(location.path.clone(), text);
                    }
                }
            }
        }
        Self(by_path)
    }

    fn get(&self, path: &[i32]) -> Option<String> {
        self.0.get(path).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed document is the one hookd serves. `HOOKD_BLESS=1` rewrites it.
    #[test]
    fn the_committed_openapi_document_is_the_one_served() {
        let pool = crate::rest::descriptors().expect("descriptors");
        let document = document(&pool, crate::rest::routes::ROUTES).expect("document");
        let text = serde_json::to_string_pretty(&document).expect("json") + "\n";
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/hookd/v1/openapi.json");
        if std::env::var_os("HOOKD_BLESS").is_some() {
            std::fs::write(&path, &text).expect("write");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == text,
            "{} is not the document hookd serves; rerun with HOOKD_BLESS=1 and commit it",
            path.display()
        );
    }

    #[test]
    fn every_reference_resolves_and_every_route_has_an_operation() {
        let pool = crate::rest::descriptors().expect("descriptors");
        let document = document(&pool, crate::rest::routes::ROUTES).expect("document");
        let text = document.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap_or_default();
            let pointer = target.trim_start_matches('#');
            assert!(
                document.pointer(pointer).is_some(),
                "{target} does not resolve"
            );
        }
        let mut operations = 0;
        for (_, methods) in document["paths"].as_object().expect("paths") {
            operations += methods.as_object().expect("methods").len();
        }
        assert_eq!(operations, crate::rest::routes::ROUTES.len());
        // proto3's JSON mapping: 64-bit integers are strings, names lowerCamelCase.
        let enqueue = &document["components"]["schemas"]["EnqueueRequest"]["properties"];
        assert_eq!(enqueue["delayMs"]["type"], "string");
        assert_eq!(enqueue["payload"]["contentEncoding"], "base64");
        assert!(enqueue["idempotencyKey"]["description"].is_string());
    }
}
