//! The ingest listener's one route, `POST /in/{source}`: authenticate the delivery on its
//! raw bytes, check it, store it, and answer 202 only once the log record holding it is
//! synced. Everything else on the listener is 404.
//!
//! Order of checks (each refusal stores nothing): unknown source 404; an announced body
//! over the limit 413; a client over its allowance of failed authentications at this
//! source 429 with `Retry-After`, unread (ingest/strikes.rs); `none` sources'
//! credentials 401; media type 415; the body read
//! under the limit (413) and the body timeout (408); the signature over the raw bytes
//! 401 (one text, whatever failed); JSON, schema (400 with the failing path); delivery id
//! and event type (400); redaction; then the engine: 202 (`duplicate` when the delivery id
//! was seen within the idempotency window, with the first message's id), 429 when writes
//! wait for the disk beyond `max_queued_write_bytes`, 503 when storage refuses writes, both
//! with `Retry-After`.

use hookd_core::scope::TenantId;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::registry::Sources;
use super::source::{Locator, Route, Source};
use hookd_core::clock::Clock;
use hookd_core::ids::MessageId;
use hookd_core::source::SchemeName;
use hookd_engine::{EngineHandle, Refusal};
use hookd_metrics::Metrics;

/// Header of a stored inbound message: the source that received it.
pub(crate) const SOURCE_HEADER: &str = "hookd-source";
/// Header of a stored inbound message from a source that redacts: its rules.
pub(crate) const REDACTION_HEADER: &str = "hookd-redaction";
/// Header of a stored inbound message whose body redaction changed: the rules that did.
/// Its body is no longer the provider's bytes, so the provider's signature no longer
/// verifies.
pub(crate) const REDACTED_HEADER: &str = "hookd-redacted";

/// The first character of an ingest event's dedup key (see `receive`): outside printable
/// ASCII, so outside every key Enqueue accepts.
pub(crate) const INGEST_SCOPE: char = '\u{1}';

/// What the handler shares.
#[derive(Debug)]
pub struct Ingest {
    pub sources: Arc<Sources>,
    /// Where a source that publishes sends its events.
    pub subscriptions: Arc<crate::subscriptions::Subscriptions>,
    pub engine: EngineHandle,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    pub max_idempotency_key_bytes: usize,
    /// `max_payload_bytes`: what a redacted body may grow to (masks are longer than many
    /// of the values they replace).
    pub max_payload_bytes: usize,
    /// How long the whole body may take to arrive.
    pub(crate) body_timeout: Duration,
    /// Bytes of bodies held before their signature is checked.
    pub unverified: Arc<Unverified>,
    /// Where large bodies' signatures are checked.
    pub checker: crate::ingest::checker::Checker,
    /// Failed authentications per client and source.
    pub strikes: Arc<crate::ingest::strikes::Strikes>,
    /// A span per webhook received (off unless OTLP is configured).
    pub(crate) tracing: crate::otel::Tracing,
    /// Every tenant's event types: the search keys an event's type declares are indexed
    /// (its schema is not applied: a source has its own).
    pub catalog: Arc<crate::catalog::EventTypes>,
}

/// The budget of inbound bodies held before their signature check: in all
/// (`connections.max_unverified_ingest_bytes`), and per client address a share of it
/// (`connections.max_share_percent`), so one sender's slow or unsigned bodies cannot take
/// the budget from every provider.
#[derive(Debug)]
pub struct Unverified {
    total: Arc<tokio::sync::Semaphore>,
    share: usize,
    percent: u8,
    /// Bytes held per address; only addresses holding some are here.
    peers: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
    /// Bytes held in all, for `/metrics`.
    gauge: prometheus::IntGauge,
}

/// One body's place in [`Unverified`], given back when dropped.
#[derive(Debug)]
pub struct Held {
    _permit: tokio::sync::OwnedSemaphorePermit,
    bytes: usize,
    peer: Option<std::net::IpAddr>,
    budget: Arc<Unverified>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.gauge.sub(gauge_value(self.bytes));
        if let Some(ip) = self.peer {
            let mut peers = self.budget.peers();
            if let Some(used) = peers.get_mut(&ip) {
                *used = used.saturating_sub(self.bytes);
                if *used == 0 {
                    peers.remove(&ip);
                }
            }
        }
    }
}

impl Unverified {
    pub fn new(max_bytes: u64, share_percent: u8, gauge: prometheus::IntGauge) -> Arc<Self> {
        let max = usize::try_from(max_bytes)
            .unwrap_or(usize::MAX)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        let percent = share_percent.clamp(1, 100);
        Arc::new(Self {
            total: Arc::new(tokio::sync::Semaphore::new(max)),
            share: (max / 100).saturating_mul(usize::from(percent)).max(1),
            percent,
            peers: std::sync::Mutex::default(),
            gauge,
        })
    }

    fn peers(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, usize>> {
        self.peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Room for `bytes` more from `peer`, or why there is none. An address holding
    /// nothing may always have one body (up to the whole budget) in.
    pub(crate) fn try_hold(
        self: &Arc<Self>,
        peer: Option<std::net::IpAddr>,
        bytes: usize,
    ) -> Result<Held, Busy> {
        let bytes = bytes.max(1);
        let mut peers = self.peers();
        if let Some(ip) = peer {
            let used = peers.get(&ip).copied().unwrap_or(0);
            if used > 0 && used + bytes > self.share {
                return Err(Busy {
                    over_share: true,
                    why: format!(
                        "busy: client address {ip} already has {used} bytes of inbound bodies waiting for their signature check, its share ({} % of connections.max_unverified_ingest_bytes = {}); retry later",
                        self.percent, self.share
                    ),
                });
            }
        }
        let permit = u32::try_from(bytes)
            .ok()
            .and_then(|n| self.total.clone().try_acquire_many_owned(n).ok())
            .ok_or_else(|| Busy {
                over_share: false,
                why: "busy: too many bytes of inbound bodies wait for their signature check (connections.max_unverified_ingest_bytes); retry later".to_owned(),
            })?;
        if let Some(ip) = peer {
            *peers.entry(ip).or_default() += bytes;
        }
        self.gauge.add(gauge_value(bytes));
        Ok(Held {
            _permit: permit,
            bytes,
            peer,
            budget: self.clone(),
        })
    }
}

/// Why [`Unverified::try_hold`] found no room.
#[derive(Debug)]
pub(crate) struct Busy {
    /// The client's own share was full (not the budget as a whole).
    pub(crate) over_share: bool,
    /// The refusal's text.
    pub why: String,
}

/// A byte count as a gauge's value (a hold is at most the budget, far below `i64::MAX`).
fn gauge_value(bytes: usize) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}

/// The ingest listener's routes.
pub(crate) fn router(ingest: Arc<Ingest>) -> axum::Router {
    axum::Router::new()
        .route("/in/{source}", axum::routing::post(receive))
        .route("/in/{tenant}/{source}", axum::routing::post(receive_tenant))
        .fallback(|| async { answer(StatusCode::NOT_FOUND, json!({"error": "not found"})) })
        .with_state(ingest)
}

fn answer(status: StatusCode, body: Value) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response()
}

fn retry_after(status: StatusCode, secs: u64, body: Value) -> Response {
    let mut r = answer(status, body);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    r
}

/// The WARN when a client's failures reach the allowance: a few per minute at most.
static STRIKE_LOG: hookd_core::ratelog::LogLimit = hookd_core::ratelog::LogLimit::new(60, 5);

/// A refusal: its status, its body, and its outcome label.
struct Refuse(Response, &'static str);

fn refuse(status: StatusCode, outcome: &'static str, error: impl Into<String>) -> Refuse {
    Refuse(answer(status, json!({ "error": error.into() })), outcome)
}

/// Why a body could not be read whole.
enum BodyError {
    TooLarge,
    Failed,
}

/// A request body, at most `limit` bytes, into one buffer: of the announced length at once
/// when there is one (each of hyper's chunks is copied and let go as it comes, so a body
/// held costs its length, not its chunks and a copy of them, and a flood of same-size
/// bodies leaves the allocator same-size blocks to reuse).
async fn read_body(
    mut body: Body,
    limit: usize,
    announced: Option<usize>,
) -> Result<bytes::Bytes, BodyError> {
    use http_body::Body as _;
    // A length announced past the limit is refused before a byte is read.
    if body.size_hint().lower() > limit as u64 {
        return Err(BodyError::TooLarge);
    }
    let mut buf = bytes::BytesMut::with_capacity(announced.unwrap_or(0).min(limit));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyError::Failed)?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(BodyError::TooLarge);
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

fn invalid(error: impl Into<String>) -> Refuse {
    refuse(StatusCode::BAD_REQUEST, "invalid", error)
}

fn unauthorized(source: &Source) -> Refuse {
    let mut r = answer(
        StatusCode::UNAUTHORIZED,
        json!({ "error": super::verify::Refused { why: "", over_limit: false }.to_string() }),
    );
    if source.spec.scheme == SchemeName::None {
        let challenge = if source.auth.bearer.is_empty() {
            "Basic realm=\"hookd\""
        } else {
            "Bearer"
        };
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
    }
    Refuse(r, "unauthorized")
}

/// `POST /in/{source}`: a source of tenant `default`'s.
async fn receive(
    State(ingest): State<Arc<Ingest>>,
    Path(name): Path<String>,
    request: axum::http::Request<Body>,
) -> Response {
    receive_in(ingest, Some(TenantId::DEFAULT), name, request).await
}

/// `POST /in/{tenant}/{source}`: a source of another tenant's (an unknown tenant is
/// answered as an unknown source).
async fn receive_tenant(
    State(ingest): State<Arc<Ingest>>,
    Path((tenant, name)): Path<(String, String)>,
    request: axum::http::Request<Body>,
) -> Response {
    let tenant = ingest.engine.tenant_named(&tenant);
    receive_in(ingest, tenant, name, request).await
}

async fn receive_in(
    ingest: Arc<Ingest>,
    tenant: Option<TenantId>,
    name: String,
    request: axum::http::Request<Body>,
) -> Response {
    let started = Instant::now();
    let Some(source) = tenant.and_then(|t| ingest.sources.get(t, &name)) else {
        ingest
            .metrics
            .ingest_requests
            .with_label_values(&["_unknown", "unknown_source"])
            .inc();
        return answer(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no source named {name:?}")}),
        );
    };
    let peer = request
        .extensions()
        .get::<crate::listen::ConnInfo>()
        .map(|c| c.remote.ip());
    let span = ingest.tracing.server_span(
        "hookd.ingest",
        request.headers(),
        vec![
            opentelemetry::KeyValue::new("http.request.method", "POST"),
            opentelemetry::KeyValue::new("http.route", "/in/{source}"),
            opentelemetry::KeyValue::new("hookd.source", source.spec.name.clone()),
            opentelemetry::KeyValue::new("messaging.system", "hookd"),
        ],
    );
    let (outcome, response) = match handle(&ingest, &source, peer, request, span.as_ref()).await {
        Ok((id, duplicate)) => {
            ingest
                .metrics
                .ingest_seconds
                .observe(started.elapsed().as_secs_f64());
            let mut response = answer(
                StatusCode::ACCEPTED,
                json!({"id": id.to_string(), "duplicate": duplicate}),
            );
            // A connection stays on the runtime it was placed on when accepted. One placed
            // on the low-priority runtime before its client was trusted ends with this
            // answer once the client is, so that its next one is served at normal
            // priority: without it, a provider's keep-alive connections opened before its
            // first check passed stayed at idle priority for as long as they lived.
            if crate::ingest::demote::on_demoted_thread()
                && peer.is_some_and(|ip| !ingest.strikes.suspect(ip, ingest.clock.now_ms()))
            {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                ingest.metrics.ingest_promoted_connections.inc();
            }
            (if duplicate { "duplicate" } else { "accepted" }, response)
        }
        Err(Refuse(response, outcome)) => (outcome, response),
    };
    if let Some(span) = span {
        span.set(opentelemetry::KeyValue::new(
            "http.response.status_code",
            i64::from(response.status().as_u16()),
        ));
        span.set(opentelemetry::KeyValue::new("hookd.outcome", outcome));
        let failed = !response.status().is_success();
        span.end(failed.then_some(outcome));
    }
    ingest
        .metrics
        .ingest_requests
        .with_label_values(&[source.label(), outcome])
        .inc();
    response
}

/// Takes one delivery from `peer` (its client's address) to `source`.
async fn handle(
    ingest: &Ingest,
    source: &Source,
    peer: Option<std::net::IpAddr>,
    request: axum::http::Request<Body>,
    span: Option<&crate::otel::Traced>,
) -> Result<(MessageId, bool), Refuse> {
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    let limit = source.max_body_bytes;
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("body: over the limit of {limit} bytes"),
        )
    };
    if headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > limit as u64)
    {
        return Err(too_large());
    }
    // A client that keeps failing this source's check is refused from its headers: its
    // body is neither read nor hashed (ingest/strikes.rs).
    if let Some(ip) = peer
        && let Some(secs) = ingest
            .strikes
            .refused(ip, &source.key, ingest.clock.now_ms())
    {
        let mut r = retry_after(
            StatusCode::TOO_MANY_REQUESTS,
            secs,
            json!({ "error": format!(
                "too many failed authentications: client address {ip} failed this source's signature check connections.max_ingest_auth_failures times within connections.ingest_auth_failure_window_secs; retry in {secs} s"
            ) }),
        );
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Err(Refuse(r, "throttled"));
    }
    let failed = |refusal: Refuse| {
        if let Some(ip) = peer
            && let Some(tripped) = ingest
                .strikes
                .strike(ip, &source.key, ingest.clock.now_ms())
            && let Some(skipped) = STRIKE_LOG.ready()
        {
            tracing::warn!(
                source = %source.spec.name,
                peer = %ip,
                retry_after_secs = tripped.retry_after_secs,
                skipped,
                "a client failed this source's signature check connections.max_ingest_auth_failures times; its requests are refused unread for the rest of the window"
            );
        }
        refusal
    };
    if source.spec.scheme == SchemeName::None && !credentials_match(source, headers) {
        return Err(failed(unauthorized(source)));
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if !source.accepts(content_type) {
        return Err(refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_type",
            format!(
                "content-type: {} is not accepted here (accepted: {})",
                content_type.map_or_else(|| "none".to_owned(), |c| format!("{c:?}")),
                source.content_types.join(", ")
            ),
        ));
    }
    // The body's place in the budget of unverified bytes, taken before it is read and
    // given back once its signature is checked: a crowd of unsigned senders cannot make
    // hookd hold more than the budget.
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(limit)
        .min(limit);
    let unverified = match ingest.unverified.try_hold(peer, announced) {
        Ok(held) => held,
        Err(Busy { over_share, why }) => {
            // A client holding its whole share of unchecked bodies is served at low
            // priority from its next connection on, as one that failed a check is.
            if over_share && let Some(ip) = peer {
                ingest.strikes.suspected(ip, ingest.clock.now_ms());
            }
            return Err(Refuse(
                retry_after(StatusCode::SERVICE_UNAVAILABLE, 1, json!({ "error": why })),
                "backpressure",
            ));
        }
    };
    let has_length = headers.contains_key(header::CONTENT_LENGTH);
    let raw = match tokio::time::timeout(
        ingest.body_timeout,
        read_body(body, limit, has_length.then_some(announced)),
    )
    .await
    {
        Err(_) => {
            return Err(refuse(
                StatusCode::REQUEST_TIMEOUT,
                "invalid",
                "body: not received in time",
            ));
        }
        Ok(Err(BodyError::TooLarge)) => return Err(too_large()),
        Ok(Err(BodyError::Failed)) => {
            return Err(invalid("body: the connection failed while it was read"));
        }
        Ok(Ok(raw)) => raw,
    };
    let now_ms = ingest.clock.now_ms();
    if let Some(verifier) = &source.verifier {
        // A large body is hashed (once per secret) on a low-priority checker thread, so a
        // flood of them cannot take the CPU from the workers that also serve gRPC. A
        // suspect client's is hashed where it was read: its connection is on idle-priority
        // threads already (`demote.rs`), and it stays out of the checkers' queue, which
        // trusted providers' large bodies wait in.
        let verified = if raw.len() > crate::ingest::verify::CHECKER_HASH_BYTES
            && !crate::ingest::demote::on_demoted_thread()
        {
            let (verifier, headers, body) = (verifier.clone(), headers.clone(), raw.clone());
            ingest
                .checker
                .run(move || verifier.verify(&headers, &body, now_ms / 1000))
                .await
                .ok_or_else(|| invalid("body: its signature check did not finish"))?
        } else {
            verifier.verify(headers, &raw, now_ms / 1000)
        };
        if let Err(refused) = verified {
            tracing::debug!(source = %source.spec.name, why = refused.why, "inbound webhook refused");
            if refused.over_limit {
                return Err(failed(invalid(format!(
                    "signature header: more than {} signatures",
                    crate::ingest::verify::MAX_SIGNATURES
                ))));
            }
            return Err(failed(unauthorized(source)));
        }
    }
    if let Some(ip) = peer {
        ingest.strikes.cleared(ip, &source.key, now_ms);
    }
    // Trusted from here on: its bytes leave the unverified budget.
    drop(unverified);
    let mut json = if source.needs_json() {
        Some(
            serde_json::from_slice::<Value>(&raw)
                .map_err(|e| invalid(format!("body: not JSON: {e}")))?,
        )
    } else if source.wants_json() {
        serde_json::from_slice::<Value>(&raw).ok()
    } else {
        None
    };
    if let (Some(schema), Some(value)) = (&source.schema, &json)
        && let Err(e) = schema.validate(value)
    {
        let path = e.instance_path().to_string();
        return Err(Refuse(
            answer(
                StatusCode::BAD_REQUEST,
                json!({
                    "error": format!("body{}: {e}", if path.is_empty() { String::new() } else { format!(" at {path}") }),
                    "path": path,
                    "schema_path": e.schema_path().to_string(),
                }),
            ),
            "invalid",
        ));
    }
    let dedup_id = match &source.dedup {
        None => None,
        Some(l) => Some(
            locate(l, headers, json.as_ref(), &raw)
                .ok_or_else(|| invalid(format!("delivery id: {} is missing", describe(l))))?,
        ),
    };
    let idempotency_key = match dedup_id {
        None => String::new(),
        Some(id) => {
            let key = format!("{}:{id}", source.spec.name);
            if key.len() > ingest.max_idempotency_key_bytes
                || key.chars().any(|c| !(' '..='~').contains(&c))
            {
                return Err(invalid(format!(
                    "delivery id: not printable ASCII of at most {} bytes with the source's name",
                    ingest.max_idempotency_key_bytes
                )));
            }
            key
        }
    };
    let event_type = match &source.event_type {
        None => String::new(),
        Some(l) => locate(l, headers, json.as_ref(), &raw).unwrap_or_default(),
    };
    if event_type.len() > hookd_core::names::MAX_EVENT_TYPE_LEN {
        return Err(invalid(format!(
            "event type: {} bytes is over the limit of {}",
            event_type.len(),
            hookd_core::names::MAX_EVENT_TYPE_LEN
        )));
    }
    let mut stored_headers = BTreeMap::new();
    if let Some(ct) = content_type {
        stored_headers.insert(header::CONTENT_TYPE.as_str().to_owned(), ct.to_owned());
    }
    for name in &source.keep_headers {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            stored_headers.insert(name.as_str().to_owned(), v.to_owned());
        }
    }
    stored_headers.insert(SOURCE_HEADER.into(), source.spec.name.clone());
    crate::otel::stamp_record(&mut stored_headers, headers, span);
    let mut payload = raw.to_vec();
    if let (Some(redactor), Some(value)) = (&source.redactor, json.as_mut()) {
        stored_headers.insert(REDACTION_HEADER.into(), redactor.rules.clone());
        let applied = redactor.apply(value);
        if !applied.fired.is_empty() {
            payload = serde_json::to_vec(value).map_err(|e| invalid(format!("body: {e}")))?;
            if payload.len() > ingest.max_payload_bytes {
                return Err(refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!(
                        "body: {} bytes once redacted, over max_payload_bytes ({})",
                        payload.len(),
                        ingest.max_payload_bytes
                    ),
                ));
            }
            stored_headers.insert(REDACTED_HEADER.into(), applied.fired.join(", "));
        }
    }
    // Where it goes: the route's destination, or the subscribers of the topic it is
    // published to (whose type is the topic).
    let (target, event_type) = match &source.route {
        Route::To(d) => (Ok(d.clone()), event_type),
        Route::Publish(_) => match source.route.topic(&event_type) {
            Some(Ok(topic)) => (Err(topic.clone()), topic),
            Some(Err(e)) => return Err(invalid(e)),
            None => return Err(invalid("topic: this source does not publish")),
        },
    };
    // Indexed under its event type's search keys and its source's.
    let indexed = match json.as_ref() {
        Some(value) => {
            let mut texts = ingest.catalog.indexed(source.tenant, &event_type, value);
            for text in crate::catalog::indexed_by(&source.spec.search_keys, value) {
                if !texts.contains(&text) {
                    texts.push(text);
                }
            }
            texts
        }
        None => Vec::new(),
    };
    let event = hookd_engine::NewEvent {
        event_type,
        idempotency_key,
        headers: stored_headers,
        created_ms: now_ms,
        payload,
        indexed,
        ..Default::default()
    };
    let target = match target {
        Ok(destination) => crate::prepare::Target::To(destination),
        // A source publishes to its own tenant's topics.
        Err(topic) => crate::prepare::Target::Publish {
            tenant: source.tenant,
            topic,
        },
    };
    let subscriptions = &ingest.subscriptions;
    let route: crate::prepare::Route<'_> = &|tenant, topic, payload, headers, identity| {
        subscriptions.route(tenant, topic, payload, headers, Some(identity))
    };
    let prepared = crate::prepare::prepare(target, event, now_ms, Default::default(), route)
        .map_err(invalid)?;
    // No subscription takes it: accepted (the provider has nothing to retry), and nothing
    // is stored.
    let Some(mut message) = prepared.message else {
        return Ok((
            prepared
                .event
                .unwrap_or_else(|| MessageId::generate(now_ms)),
            false,
        ));
    };
    // Ingest's own idempotency namespace: the stored key (`<source>:<delivery id>`, what a
    // consumer sees) is unchanged, but its dedup scope starts with a byte no Enqueue key
    // may hold (they are printable ASCII), so no caller can pre-claim a provider's delivery.
    if !message.idempotency_key.is_empty() {
        message.idempotency_key.insert(0, INGEST_SCOPE);
    }
    let result = match crate::otel::durable(span, 1, ingest.engine.enqueue(vec![message])).await {
        Ok(mut results) => results
            .pop()
            .unwrap_or_else(|| Err(Refusal::Unavailable("the engine gave no result".into()))),
        Err(e) => Err(e),
    };
    match result {
        Ok(e) => Ok((e.id, e.duplicate)),
        Err(Refusal::AtCapacity { .. }) => Err(Refuse(
            retry_after(
                StatusCode::TOO_MANY_REQUESTS,
                1,
                json!({"error": "busy: events wait for the disk; retry later"}),
            ),
            "backpressure",
        )),
        // A hard watermark: the route's destination (or hookd) holds all it may.
        Err(Refusal::OverMark(over)) => Err(Refuse(
            retry_after(
                StatusCode::TOO_MANY_REQUESTS,
                over.retry_after_ms.div_ceil(1000),
                json!({"error": "busy: too many events wait for delivery; retry later"}),
            ),
            "backpressure",
        )),
        // One of the tenant's quotas: the provider retries once it may fit.
        Err(Refusal::OverQuota(over)) => Err(Refuse(
            retry_after(
                StatusCode::TOO_MANY_REQUESTS,
                over.retry_after_ms.unwrap_or(60_000).div_ceil(1000),
                json!({ "error": format!("busy: {over}") }),
            ),
            "backpressure",
        )),
        Err(r @ Refusal::DiskFull { .. }) => {
            static LOG: hookd_core::ratelog::LogLimit = hookd_core::ratelog::LogLimit::new(10, 5);
            if let Some(suppressed) = LOG.ready() {
                tracing::warn!(source = %source.spec.name, refusal = %r, suppressed, "inbound webhook refused: disk reserve");
            }
            Err(Refuse(
                retry_after(
                    StatusCode::SERVICE_UNAVAILABLE,
                    r.retry_after_ms().unwrap_or(5_000).div_ceil(1000),
                    json!({"error": "storage is full; retry later"}),
                ),
                "unavailable",
            ))
        }
        Err(Refusal::Unavailable(why)) => {
            static LOG: hookd_core::ratelog::LogLimit = hookd_core::ratelog::LogLimit::new(10, 5);
            if let Some(suppressed) = LOG.ready() {
                tracing::warn!(source = %source.spec.name, %why, suppressed, "inbound webhook refused: storage unavailable");
            }
            Err(Refuse(
                retry_after(
                    StatusCode::SERVICE_UNAVAILABLE,
                    5,
                    json!({"error": "storage unavailable; retry later"}),
                ),
                "unavailable",
            ))
        }
        Err(other) => {
            // The route is wrong (its endpoint was deleted): the operator's to fix; the
            // provider retries meanwhile.
            tracing::error!(source = %source.spec.name, refusal = %other, "inbound webhook cannot be routed");
            Err(Refuse(
                retry_after(
                    StatusCode::SERVICE_UNAVAILABLE,
                    30,
                    json!({"error": "this source's route is not available; retry later"}),
                ),
                "unavailable",
            ))
        }
    }
}

fn describe(l: &Locator) -> String {
    match l {
        Locator::Header(h) => format!("header {h}"),
        Locator::Json(p) => format!("JSON value {p}"),
        Locator::BodySha256 => "the body's SHA-256".into(),
    }
}

/// A header's text, or a JSON string or number at a pointer; `None` when absent or empty.
fn locate(l: &Locator, headers: &HeaderMap, json: Option<&Value>, raw: &[u8]) -> Option<String> {
    let text = match l {
        Locator::Header(h) => headers.get(h)?.to_str().ok()?.trim().to_owned(),
        Locator::BodySha256 => {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(raw);
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            format!("sha256:{hex}")
        }
        Locator::Json(p) => match json?.pointer(p)? {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return None,
        },
    };
    (!text.is_empty()).then_some(text)
}

/// A `none` source's credentials: a bearer token or basic user whose SHA-256 matches,
/// compared in constant time against every configured digest.
fn credentials_match(source: &Source, headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let (scheme, rest) = value.trim().split_once(' ').unwrap_or((value, ""));
    if scheme.eq_ignore_ascii_case("bearer") {
        let digest: [u8; 32] = Sha256::digest(rest.trim().as_bytes()).into();
        let mut ok = subtle::Choice::from(0);
        for d in &source.auth.bearer {
            ok |= d.ct_eq(&digest);
        }
        return bool::from(ok);
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let Some(decoded) = base64::engine::general_purpose::STANDARD
            .decode(rest.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
        else {
            return false;
        };
        let Some((user, password)) = decoded.split_once(':') else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(password.as_bytes()).into();
        let mut ok = subtle::Choice::from(0);
        for (u, d) in &source.auth.basic {
            ok |= u.as_bytes().ct_eq(user.as_bytes()) & d.ct_eq(&digest);
        }
        return bool::from(ok);
    }
    false
}
