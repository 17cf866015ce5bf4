//! The HTTP/JSON API on the HTTP listener (`/v1/...`): every RPC of `hookd.v1.Hookd` as a
//! route (`routes.rs`), its JSON in proto3's JSON mapping, and the OpenAPI 3.1 document
//! drawn from the same table and the .proto's descriptors (`openapi.rs`).
//!
//! A JSON request is transcoded, not reimplemented: it becomes a gRPC call made in process
//! to the same stack the gRPC listener serves (authentication and scopes, the request
//! budget, the service's validation), and the call's answer, or its status, becomes the
//! HTTP answer. So the two APIs cannot drift: same checks, same errors, same durability
//! (an answer is sent only after the write is on disk).

pub(crate) mod json_data;
pub(crate) mod openapi;
pub(crate) mod routes;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::BodyExt;
use prost::Message;
use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MessageDescriptor, MethodDescriptor};
use serde_json::{Map, Value};
use tower_service::Service;

use crate::api::HookdService;
use crate::auth::{Admitted, Authenticator, GrpcAuth};
use crate::listen::{HeldBytes, RequestBudget};
use hookd_proto::v1::hookd_server::HookdServer;
use routes::{Body, Lookup, Route};

/// The gRPC stack a JSON call goes through: the same layer and service as the gRPC
/// listener's.
pub(crate) type GrpcStack = GrpcAuth<HookdServer<HookdService>>;

/// How often a Server-Sent Events stream with nothing to say sends a comment, so proxies
/// keep it open and a client that went away is noticed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The JSON API's state.
#[derive(Clone)]
pub(crate) struct Rest {
    grpc: GrpcStack,
    /// The gRPC listener's: a JSON call is authenticated from its headers, and takes its
    /// place in the one request budget, before a byte of its body is read.
    auth: Arc<Authenticator>,
    budget: Arc<RequestBudget>,
    /// Each RPC's descriptor, by name.
    methods: Arc<HashMap<String, MethodDescriptor>>,
    /// No `[auth]`: answer only a `Host` that names no domain (DNS rebinding).
    check_host: bool,
    max_body_bytes: usize,
    /// How long a request's body may take to arrive (the gRPC listener's
    /// `connections.request_body_timeout_ms`): a client trickling a body cannot hold a
    /// connection and a request slot.
    body_timeout: Duration,
    openapi: Bytes,
}

impl std::fmt::Debug for Rest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rest")
            .field("check_host", &self.check_host)
            .field("max_body_bytes", &self.max_body_bytes)
            .finish_non_exhaustive()
    }
}

/// The descriptors of `hookd.v1`, from the descriptor set hookd-proto compiles.
pub(crate) fn descriptors() -> Result<DescriptorPool, prost_reflect::DescriptorError> {
    DescriptorPool::decode(hookd_proto::FILE_DESCRIPTOR_SET)
}

/// The name of the service every route calls.
pub(crate) const SERVICE: &str = "hookd.v1.Hookd";

impl Rest {
    /// `max_body_bytes`: the largest JSON body read (larger: 413); `body_timeout`: how
    /// long it may take to arrive (longer: 408).
    pub(crate) fn new(
        grpc: GrpcStack,
        auth: Arc<Authenticator>,
        budget: Arc<RequestBudget>,
        check_host: bool,
        max_body_bytes: usize,
        body_timeout: Duration,
    ) -> Result<Self, String> {
        let pool = descriptors().map_err(|e| format!("the API's descriptors: {e}"))?;
        let service = pool
            .get_service_by_name(SERVICE)
            .ok_or_else(|| format!("the descriptors have no {SERVICE}"))?;
        let methods = service
            .methods()
            .map(|m| (m.name().to_owned(), m))
            .collect::<HashMap<_, _>>();
        if let Some(missing) = routes::ROUTES.iter().find(|r| !methods.contains_key(r.rpc)) {
            return Err(format!("route for unknown rpc {}", missing.rpc));
        }
        let openapi = serde_json::to_vec_pretty(&openapi::document(&pool, routes::ROUTES)?)
            .map_err(|e| format!("the OpenAPI document: {e}"))?;
        Ok(Self {
            grpc,
            auth,
            budget,
            methods: Arc::new(methods),
            check_host,
            max_body_bytes,
            body_timeout,
            openapi: Bytes::from(openapi),
        })
    }
}

/// `/v1/openapi.json` and every route of the table.
pub(crate) fn router(rest: Rest) -> Router {
    Router::new()
        .route("/v1/openapi.json", get(openapi_json))
        .route("/v1/{*path}", any(handle))
        .with_state(rest)
}

async fn openapi_json(State(rest): State<Rest>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        rest.openapi.clone(),
    )
        .into_response()
}

/// A refusal before the call: a gRPC status, answered as the call's would be.
fn refuse(code: tonic::Code, message: impl Into<String>) -> Response {
    error_response(&tonic::Status::new(code, message.into()))
}

/// A refusal HTTP names more closely than gRPC (405, 413, 415).
fn refuse_as(http: StatusCode, code: tonic::Code, message: impl Into<String>) -> Response {
    answer_as(&tonic::Status::new(code, message.into()), http)
}

async fn handle(State(rest): State<Rest>, request: axum::extract::Request) -> Response {
    let (parts, body) = request.into_parts();
    let (route, captures) = match routes::find(routes::ROUTES, &parts.method, parts.uri.path()) {
        Lookup::Found(route, captures) => (route, captures),
        Lookup::WrongMethod(allowed) => {
            let allow = allowed
                .iter()
                .map(Method::as_str)
                .collect::<Vec<_>>()
                .join(", ");
            let mut response = refuse_as(
                StatusCode::METHOD_NOT_ALLOWED,
                tonic::Code::Unimplemented,
                format!("{} takes {allow}", parts.uri.path()),
            );
            if let Ok(allow) = HeaderValue::from_str(&allow) {
                response.headers_mut().insert(header::ALLOW, allow);
            }
            return response;
        }
        Lookup::Nothing => {
            return refuse(
                tonic::Code::NotFound,
                format!(
                    "no route {} {}; the routes are in /v1/openapi.json",
                    parts.method,
                    parts.uri.path()
                ),
            );
        }
    };
    if rest.check_host && !crate::http::host_names_no_domain(&parts.headers) {
        return refuse(
            tonic::Code::PermissionDenied,
            "without [auth], the HTTP API answers only a Host that is an IP address or localhost (DNS rebinding); call it by address, or configure [auth]",
        );
    }
    // A browser sends a cross-origin POST with this media type only after a CORS
    // preflight (which hookd does not grant), so no form or script on another site can
    // call a write; PUT and DELETE always need the preflight.
    if matches!(parts.method, Method::POST | Method::PUT) && !is_json(&parts.headers) {
        return refuse_as(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            tonic::Code::InvalidArgument,
            "Content-Type: a POST or PUT must be application/json",
        );
    }
    // Who calls, and their place in the request budget, from the headers alone: a caller
    // without a credential (or the scope) costs hookd no body, no parse.
    let rpc_path = format!("/{SERVICE}/{}", route.rpc);
    let (caller, slot) = match crate::auth::admit(
        &rest.auth,
        &rest.budget,
        &rpc_path,
        &parts.headers,
        &parts.extensions,
    ) {
        Ok(admitted) => admitted,
        Err(status) => return error_response(&status),
    };
    let mut held = slot.charge().bytes();
    let read = read_body(body, rest.max_body_bytes, &parts.headers, &mut held);
    let body = match tokio::time::timeout(rest.body_timeout, read).await {
        Ok(Ok(body)) => body,
        Ok(Err(refusal)) => return *refusal,
        Err(_) => {
            return refuse_as(
                StatusCode::REQUEST_TIMEOUT,
                tonic::Code::DeadlineExceeded,
                format!(
                    "body: not received within {} ms",
                    rest.body_timeout.as_millis()
                ),
            );
        }
    };
    let Some(method) = rest.methods.get(route.rpc) else {
        return refuse(tonic::Code::Internal, format!("no rpc {}", route.rpc));
    };
    let input = method.input();
    let inline = body.len() as u64 <= PARSE_INLINE_BYTES;
    let query = parts.uri.query().map(str::to_owned);
    // A large body is parsed on the blocking pool, off the threads that answer others.
    let parse = move || -> Result<(DynamicMessage, HeldBytes), Box<Response>> {
        let values = json_values(&body)?;
        // What the parse holds besides the body, counted before it is built.
        held.add(values.saturating_mul(JSON_VALUE_BYTES))
            .map_err(|why| Box::new(refuse(tonic::Code::ResourceExhausted, why)))?;
        let message = request_message(route, &input, &body, query.as_deref(), captures)
            .map_err(|why| Box::new(refuse(tonic::Code::InvalidArgument, why)))?;
        Ok((message, held))
    };
    let parsed = if !inline {
        match tokio::task::spawn_blocking(parse).await {
            Ok(parsed) => parsed,
            Err(e) => {
                return refuse(
                    tonic::Code::Internal,
                    format!("the body's parse failed: {e}"),
                );
            }
        }
    } else {
        parse()
    };
    let (message, held) = match parsed {
        Ok(parsed) => parsed,
        Err(refusal) => return *refusal,
    };
    let mut call = grpc_request(route, &message, &parts);
    drop(message);
    call.extensions_mut().insert(Admitted::new(caller, slot));
    let mut grpc = rest.grpc.clone();
    let answer = match std::future::poll_fn(|cx| {
        Service::<http::Request<http_body_util::Full<Bytes>>>::poll_ready(&mut grpc, cx)
    })
    .await
    {
        Ok(()) => grpc.call(call).await,
        Err(never) => match never {},
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(never) => match never {},
    };
    // The call has its own (protobuf) copy now: the body and its parse are given back.
    drop(held);
    if route.streaming {
        stream_response(answer, method.output())
    } else {
        unary_response(answer, &method.output()).await
    }
}

/// The most JSON values (objects, arrays, strings, numbers, ...) one request's body may
/// hold: a batch of the most events with every field set is far below it.
const MAX_JSON_VALUES: u64 = 1_000_000;
/// What each JSON value may cost while the request is transcoded (a `serde_json::Value`,
/// its place in a map, and the reflected message's value), counted in the budget before
/// the parse: memory grows with the budget, never past it.
const JSON_VALUE_BYTES: u64 = 192;
/// Bodies up to this size are parsed where they arrive; larger ones on the blocking pool.
const PARSE_INLINE_BYTES: u64 = 64 << 10;

/// The request's body, each chunk counted in the budget as it arrives (a declared
/// `Content-Length` all at once, before a byte is read): 413 past `max`, 429 past the
/// budget, so a peer holding unfinished bodies holds no more than its share.
async fn read_body(
    mut body: axum::body::Body,
    max: usize,
    headers: &HeaderMap,
    held: &mut HeldBytes,
) -> Result<Bytes, Box<Response>> {
    let too_large = || {
        Box::new(refuse_as(
            StatusCode::PAYLOAD_TOO_LARGE,
            tonic::Code::OutOfRange,
            format!("body: larger than {max} bytes"),
        ))
    };
    let over_budget = |why: String| Box::new(refuse(tonic::Code::ResourceExhausted, why));
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(declared) = declared {
        if declared > max as u64 {
            return Err(too_large());
        }
        held.add(declared).map_err(over_budget)?;
    }
    let mut buf = BytesMut::with_capacity(declared.map_or(0, |d| d.min(1 << 20) as usize));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Box::new(refuse(
                tonic::Code::InvalidArgument,
                format!("body: could not be read: {e}"),
            ))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > max {
            return Err(too_large());
        }
        let beyond = (buf.len() + data.len()) as u64;
        if beyond > held.counted() {
            held.add(beyond - held.counted()).map_err(over_budget)?;
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf.freeze())
}

/// How many JSON values `body` holds, counted by a pass that builds nothing (strings are
/// scanned, not copied): refused past [`MAX_JSON_VALUES`] (413), or when it is not JSON.
fn json_values(body: &[u8]) -> Result<u64, Box<Response>> {
    use serde::de::Deserializer as _;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(0);
    }
    let mut count = 0_u64;
    let mut de = serde_json::Deserializer::from_slice(body);
    let counted = (&mut de)
        .deserialize_any(Count(&mut count))
        .and_then(|()| de.end());
    match counted {
        Ok(()) => Ok(count),
        Err(_) if count > MAX_JSON_VALUES => Err(Box::new(refuse_as(
            StatusCode::PAYLOAD_TOO_LARGE,
            tonic::Code::OutOfRange,
            format!(
                "body: more than {MAX_JSON_VALUES} JSON values (the HTTP API's limit per request)"
            ),
        ))),
        Err(e) => Err(Box::new(refuse(
            tonic::Code::InvalidArgument,
            format!("body: not JSON: {e}"),
        ))),
    }
}

/// Counts the values of a JSON document as serde visits them.
struct Count<'a>(&'a mut u64);

impl Count<'_> {
    fn bump<E: serde::de::Error>(&mut self) -> Result<(), E> {
        *self.0 += 1;
        if *self.0 > MAX_JSON_VALUES {
            return Err(E::custom("too many values"));
        }
        Ok(())
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Count<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Count<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: serde::de::Error>(mut self, _: bool) -> Result<(), E> {
        self.bump()
    }
    fn visit_i64<E: serde::de::Error>(mut self, _: i64) -> Result<(), E> {
        self.bump()
    }
    fn visit_u64<E: serde::de::Error>(mut self, _: u64) -> Result<(), E> {
        self.bump()
    }
    fn visit_f64<E: serde::de::Error>(mut self, _: f64) -> Result<(), E> {
        self.bump()
    }
    fn visit_str<E: serde::de::Error>(mut self, _: &str) -> Result<(), E> {
        self.bump()
    }
    fn visit_unit<E: serde::de::Error>(mut self) -> Result<(), E> {
        self.bump()
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.bump()?;
        while seq.next_element_seed(Count(&mut *self.0))?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.bump()?;
        while map.next_key::<serde::de::IgnoredAny>()?.is_some() {
            // The key is a value too (a `String` in the map).
            self.bump()?;
            map.next_value_seed(Count(&mut *self.0))?;
        }
        Ok(())
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The request message: the body (whole, or as one field), then the query's fields, then
/// the path's; decoded by proto3's JSON mapping, unknown fields refused.
fn request_message(
    route: &Route,
    input: &MessageDescriptor,
    body: &[u8],
    query: Option<&str>,
    captures: routes::Captures,
) -> Result<DynamicMessage, String> {
    let body_bytes = body;
    let body: Option<Value> = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(serde_json::from_slice(body).map_err(|e| format!("body: not JSON: {e}"))?)
    };
    let mut json = Map::new();
    match (route.body, body) {
        (_, None) => {}
        (Body::None, Some(_)) => {
            return Err(format!(
                "body: {} {} takes no body; its fields are query parameters",
                route.method, route.template
            ));
        }
        (Body::Whole, Some(Value::Object(fields))) => {
            json = fields;
            // An event's JSON payload may come as `data`, not base64.
            if json_data::takes_events(input.full_name()) {
                json_data::inline(input.full_name(), body_bytes, &mut json)?;
            }
        }
        (Body::Field(field), Some(value @ Value::Object(_))) => {
            let name = input
                .get_field_by_name(field)
                .map_or_else(|| field.to_owned(), |f| f.json_name().to_owned());
            json.insert(name, value);
        }
        (_, Some(_)) => return Err("body: must be a JSON object".into()),
    }
    if let Some(query) = query {
        if route.body != Body::None {
            return Err(format!(
                "query: {} {} takes its fields in the JSON body, not the query",
                route.method, route.template
            ));
        }
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = routes::percent_decode(&key.replace('+', " "))
                .ok_or_else(|| format!("query: `{key}` is not valid percent-encoded UTF-8"))?;
            let value = routes::percent_decode(&value.replace('+', " "))
                .ok_or_else(|| format!("query `{key}`: not valid percent-encoded UTF-8"))?;
            set_query_field(&mut json, input, &key, value)?;
        }
    }
    for (param, value) in captures {
        let field = route
            .params
            .iter()
            .find(|(p, _)| *p == param)
            .map_or(param, |(_, field)| *field);
        set_path_field(&mut json, input, field, value)?;
    }
    let mut track = serde_path_to_error::Track::new();
    let message = DynamicMessage::deserialize(
        input.clone(),
        serde_path_to_error::Deserializer::new(Value::Object(json), &mut track),
    )
    .map_err(|e| match track.path().to_string().as_str() {
        "." | "" => format!("body: {e}"),
        path => format!("{path}: {e}"),
    })?;
    Ok(message)
}

/// The JSON names along a dotted path of proto (or JSON) field names, and the last
/// field's descriptor.
fn field_path(
    input: &MessageDescriptor,
    path: &str,
) -> Result<(Vec<String>, prost_reflect::FieldDescriptor), String> {
    let mut message = input.clone();
    let mut names = Vec::new();
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let field = message
            .get_field_by_name(part)
            .or_else(|| message.get_field_by_json_name(part))
            .ok_or_else(|| format!("`{path}`: {} has no field `{part}`", message.name()))?;
        names.push(field.json_name().to_owned());
        if parts.peek().is_none() {
            return Ok((names, field));
        }
        match field.kind() {
            Kind::Message(inner) if !field.is_list() && !field.is_map() => message = inner,
            _ => return Err(format!("`{path}`: `{part}` has no fields")),
        }
    }
    Err(format!("`{path}`: empty"))
}

/// The object at `names[..len-1]`, created as needed.
fn object_at<'a>(
    json: &'a mut Map<String, Value>,
    names: &[String],
    path: &str,
) -> Result<&'a mut Map<String, Value>, String> {
    let mut at = json;
    for name in names {
        let next = at
            .entry(name.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        at = match next {
            Value::Object(map) => map,
            _ => return Err(format!("`{path}`: `{name}` is not an object")),
        };
    }
    Ok(at)
}

fn set_query_field(
    json: &mut Map<String, Value>,
    input: &MessageDescriptor,
    key: &str,
    value: String,
) -> Result<(), String> {
    let (names, field) = field_path(input, key).map_err(|e| format!("query {e}"))?;
    if field.is_map() || matches!(field.kind(), Kind::Message(_)) {
        return Err(format!(
            "query `{key}`: a message; set its fields (`{key}.<field>=...`)"
        ));
    }
    let scalar = match field.kind() {
        Kind::Bool => match value.as_str() {
            "true" | "1" | "" => Value::Bool(true),
            "false" | "0" => Value::Bool(false),
            _ => return Err(format!("query `{key}`: `{value}` is not true or false")),
        },
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => match value.parse::<i32>() {
            Ok(n) => Value::from(n),
            Err(_) => return Err(format!("query `{key}`: `{value}` is not a 32-bit integer")),
        },
        Kind::Uint32 | Kind::Fixed32 => match value.parse::<u32>() {
            Ok(n) => Value::from(n),
            Err(_) => {
                return Err(format!(
                    "query `{key}`: `{value}` is not an unsigned 32-bit integer"
                ));
            }
        },
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 if value.parse::<i64>().is_err() => {
            return Err(format!("query `{key}`: `{value}` is not a 64-bit integer"));
        }
        Kind::Uint64 | Kind::Fixed64 if value.parse::<u64>().is_err() => {
            return Err(format!(
                "query `{key}`: `{value}` is not an unsigned 64-bit integer"
            ));
        }
        Kind::Double | Kind::Float => match value.parse::<f64>() {
            Ok(n) => Value::from(n),
            Err(_) => return Err(format!("query `{key}`: `{value}` is not a number")),
        },
        // Strings, bytes (base64), enums (by name) and 64-bit integers are JSON strings.
        _ => Value::String(value),
    };
    let (last, parents) = names.split_last().ok_or("query: empty name")?;
    let at = object_at(json, parents, key)?;
    if field.is_list() {
        match at
            .entry(last.clone())
            .or_insert_with(|| Value::Array(Vec::new()))
        {
            Value::Array(items) => items.push(scalar),
            _ => return Err(format!("query `{key}`: not a list")),
        }
    } else if at.insert(last.clone(), scalar).is_some() {
        return Err(format!("query `{key}`: given twice"));
    }
    Ok(())
}

fn set_path_field(
    json: &mut Map<String, Value>,
    input: &MessageDescriptor,
    path: &str,
    value: String,
) -> Result<(), String> {
    let (names, _) = field_path(input, path)?;
    let (last, parents) = names.split_last().ok_or("path: empty name")?;
    let at = object_at(json, parents, path)?;
    match at.get(last) {
        Some(Value::String(given)) if *given != value => Err(format!(
            "{path}: the path says `{value}` but the body says `{given}`"
        )),
        Some(Value::String(_)) | None => {
            at.insert(last.clone(), Value::String(value));
            Ok(())
        }
        Some(_) => Err(format!("{path}: must be a string")),
    }
}

/// The gRPC call for `message`: the caller's `Authorization` and connection go with it,
/// so authentication, scopes and the request budget see the HTTP caller.
fn grpc_request(
    route: &Route,
    message: &DynamicMessage,
    parts: &http::request::Parts,
) -> http::Request<http_body_util::Full<Bytes>> {
    let encoded = message.encode_to_vec();
    let mut framed = BytesMut::with_capacity(encoded.len() + 5);
    framed.put_u8(0);
    framed.put_u32(u32::try_from(encoded.len()).unwrap_or(u32::MAX));
    framed.put_slice(&encoded);
    let mut request = http::Request::new(http_body_util::Full::new(framed.freeze()));
    *request.method_mut() = Method::POST;
    *request.version_mut() = http::Version::HTTP_2;
    if let Ok(uri) = format!("/{SERVICE}/{}", route.rpc).parse() {
        *request.uri_mut() = uri;
    }
    let headers = request.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    // The caller's credential and trace context (W3C), as a gRPC client sends them.
    for name in [
        header::AUTHORIZATION,
        http::HeaderName::from_static(crate::api::tenants::TENANT_HEADER),
        http::HeaderName::from_static(crate::otel::TRACEPARENT),
        http::HeaderName::from_static(crate::otel::TRACESTATE),
    ] {
        if let Some(value) = parts.headers.get(&name) {
            headers.insert(name, value.clone());
        }
    }
    if let Some(conn) = parts.extensions.get::<crate::listen::ConnInfo>() {
        request.extensions_mut().insert(conn.clone());
    }
    request
}

/// The next whole gRPC message of `buf`, taken off it.
fn take_message(buf: &mut BytesMut) -> Result<Option<Bytes>, String> {
    if buf.len() < 5 {
        return Ok(None);
    }
    if buf[0] != 0 {
        return Err("a compressed gRPC message (not asked for)".into());
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if buf.len() < 5 + len {
        return Ok(None);
    }
    buf.advance(5);
    Ok(Some(buf.split_to(len).freeze()))
}

/// An answer made outside the gRPC stack (the catch-up route's) as the HTTP/JSON API
/// writes it.
pub(crate) fn message_json<M: prost::Message + prost::Name>(
    message: &M,
) -> Result<Vec<u8>, tonic::Status> {
    let pool = descriptors()
        .map_err(|e| tonic::Status::internal(format!("the API's descriptors: {e}")))?;
    let descriptor = pool
        .get_message_by_name(&M::full_name())
        .ok_or_else(|| tonic::Status::internal(format!("no descriptor of {}", M::full_name())))?;
    to_json(&descriptor, Bytes::from(message.encode_to_vec())).map_err(tonic::Status::internal)
}

/// `message` as JSON: proto3's mapping, with fields at their default values included (so
/// a client sees `"duplicate": false` rather than nothing).
fn to_json(output: &MessageDescriptor, message: Bytes) -> Result<Vec<u8>, String> {
    let message = DynamicMessage::decode(output.clone(), message)
        .map_err(|e| format!("the answer could not be decoded: {e}"))?;
    let options = prost_reflect::SerializeOptions::new().skip_default_fields(false);
    let written = |e: serde_json::Error| format!("the answer could not be written as JSON: {e}");
    if json_data::shows_data(output.full_name()) {
        // Messages whose payload is JSON also show it as `data`.
        let mut value = message
            .serialize_with_options(serde_json::value::Serializer, &options)
            .map_err(written)?;
        json_data::decorate(output.full_name(), &mut value);
        return serde_json::to_vec(&value).map_err(written);
    }
    let mut out = Vec::with_capacity(256);
    let mut serializer = serde_json::Serializer::new(&mut out);
    message
        .serialize_with_options(&mut serializer, &options)
        .map_err(written)?;
    Ok(out)
}

async fn unary_response(
    answer: http::Response<tonic::body::Body>,
    output: &MessageDescriptor,
) -> Response {
    let (parts, body) = answer.into_parts();
    if let Some(status) = tonic::Status::from_header_map(&parts.headers)
        && status.code() != tonic::Code::Ok
    {
        return error_response(&status);
    }
    let collected = match body.collect().await {
        Ok(collected) => collected,
        Err(status) => return error_response(&status),
    };
    if let Some(status) = collected
        .trailers()
        .and_then(tonic::Status::from_header_map)
        && status.code() != tonic::Code::Ok
    {
        return error_response(&status);
    }
    let mut buf = BytesMut::from(collected.to_bytes());
    let json = match take_message(&mut buf) {
        Ok(Some(message)) => to_json(output, message),
        Ok(None) => Err("the call answered no message".into()),
        Err(e) => Err(e),
    };
    match json {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(e) => refuse(tonic::Code::Internal, e),
    }
}

/// A streaming call as Server-Sent Events: `data: <json>` per message; a status other
/// than OK ends it with `event: error` and the error's JSON.
fn stream_response(
    answer: http::Response<tonic::body::Body>,
    output: MessageDescriptor,
) -> Response {
    let (parts, mut body) = answer.into_parts();
    if let Some(status) = tonic::Status::from_header_map(&parts.headers)
        && status.code() != tonic::Code::Ok
    {
        return error_response(&status);
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(16);
    tokio::spawn(async move {
        let mut buf = BytesMut::new();
        let mut beat =
            tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
        let event = |name: Option<&str>, json: &[u8]| {
            let mut out = Vec::with_capacity(json.len() + 32);
            if let Some(name) = name {
                out.extend_from_slice(b"event: ");
                out.extend_from_slice(name.as_bytes());
                out.push(b'\n');
            }
            out.extend_from_slice(b"data: ");
            out.extend_from_slice(json);
            out.extend_from_slice(b"\n\n");
            Ok(Bytes::from(out))
        };
        let error = |status: &tonic::Status| {
            event(
                Some("error"),
                &error_json(status, http_status(status.code())),
            )
        };
        loop {
            tokio::select! {
                () = tx.closed() => return,
                _ = beat.tick() => {
                    if tx.send(Ok(Bytes::from_static(b": keep-alive\n\n"))).await.is_err() {
                        return;
                    }
                }
                frame = body.frame() => {
                    let chunk = match frame {
                        None => return,
                        Some(Err(status)) => {
                            let _ = tx.send(error(&status)).await;
                            return;
                        }
                        Some(Ok(frame)) => frame,
                    };
                    let frame = match chunk.into_data() {
                        Ok(data) => {
                            buf.extend_from_slice(&data);
                            loop {
                                let sent = match take_message(&mut buf) {
                                    Ok(None) => break,
                                    Ok(Some(message)) => match to_json(&output, message) {
                                        Ok(json) => tx.send(event(None, &json)).await,
                                        Err(e) => {
                                            let status = tonic::Status::internal(e);
                                            let _ = tx.send(error(&status)).await;
                                            return;
                                        }
                                    },
                                    Err(e) => {
                                        let _ = tx.send(error(&tonic::Status::internal(e))).await;
                                        return;
                                    }
                                };
                                if sent.is_err() {
                                    return;
                                }
                            }
                            continue;
                        }
                        Err(frame) => frame,
                    };
                    if let Ok(trailers) = frame.into_trailers() {
                        if let Some(status) = tonic::Status::from_header_map(&trailers)
                            && status.code() != tonic::Code::Ok
                        {
                            let _ = tx.send(error(&status)).await;
                        }
                        return;
                    }
                }
            }
        }
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx)),
    )
        .into_response()
}

/// The HTTP status of a gRPC code (the mapping of `google.rpc.Code`).
pub(crate) fn http_status(code: tonic::Code) -> StatusCode {
    use tonic::Code;
    match code {
        Code::Ok => StatusCode::OK,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The `google.rpc.Code` name of a code, as Google's JSON errors spell it.
pub(crate) fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::Unauthenticated => "UNAUTHENTICATED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
    }
}

/// When the status says to try again (`google.rpc.RetryInfo`), if it does.
fn retry_delay(status: &tonic::Status) -> Option<Duration> {
    use tonic_types::StatusExt;
    status.get_details_retry_info()?.retry_delay
}

/// `{"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": ..., "retryAfterMs": ...}}`.
fn error_json(status: &tonic::Status, http: StatusCode) -> Vec<u8> {
    let mut error = serde_json::json!({
        "code": http.as_u16(),
        "status": code_name(status.code()),
        "message": status.message(),
    });
    if let Some(delay) = retry_delay(status)
        && let Value::Object(fields) = &mut error
    {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        fields.insert("retryAfterMs".into(), Value::String(ms.to_string()));
    }
    serde_json::to_vec(&serde_json::json!({ "error": error })).unwrap_or_default()
}

/// A gRPC status as the HTTP answer: its mapped status code, the JSON error, and
/// `Retry-After` (whole seconds, rounded up) when the status carries a retry delay,
/// `WWW-Authenticate: Bearer` on 401.
pub(crate) fn error_response(status: &tonic::Status) -> Response {
    answer_as(status, http_status(status.code()))
}

/// `status` answered with the HTTP status `http`: the JSON error and its headers.
fn answer_as(status: &tonic::Status, http: StatusCode) -> Response {
    let mut response = (
        http,
        [(header::CONTENT_TYPE, "application/json")],
        error_json(status, http),
    )
        .into_response();
    if let Some(delay) = retry_delay(status) {
        let secs = delay.as_millis().div_ceil(1000).max(1);
        if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    if status.code() == tonic::Code::Unauthenticated {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}
