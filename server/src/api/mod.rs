//! The gRPC service `hookd.v1.Hookd`: validation, then the engine (writes) or a read
//! transaction (reads). The edge of hookd: `validate` turns requests into hookd's own
//! values, `convert` turns hookd's values into replies, and errors reach the wire only
//! through `crate::error` (`ApiError -> Status`).

pub(crate) mod catch_up;
pub mod convert;
pub(crate) mod event_types;
mod portal;
pub(crate) mod purge;
pub(crate) mod queues;
pub(crate) mod replay_jobs;
pub mod sources;
pub(crate) mod subscriptions;
pub mod tenants;
pub mod validate;
pub(crate) mod view;

use hookd_proto::v1::{self as pb, hookd_server::Hookd};
use opentelemetry::KeyValue;
use tonic::{Request, Response, Status};

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::ApiError;
use hookd_core::clock::Clock;
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_engine::{EngineHandle, Refusal, ReplayRequest};
use hookd_storage::store::{EndpointRecord, Store};
use validate::Limits;

/// The window an analysis of dead letters covers unless one is asked for: 7 days.
pub(crate) const DEFAULT_ANALYSIS_WINDOW_MS: u64 = 7 * 24 * 3_600_000;

/// The service; cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct HookdService {
    pub(crate) engine: EngineHandle,
    pub(crate) store: Store,
    pub(crate) limits: Limits,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) watchers: Watchers,
    pub(crate) sealer: Option<Arc<hookd_core::secrets::Sealer>>,
    pub(crate) sources: Arc<crate::ingest::Sources>,
    /// Where a publish goes.
    pub(crate) subscriptions: Arc<crate::subscriptions::Subscriptions>,
    /// The push dispatcher's destination guard: PutEndpoint warns of a URL it refuses.
    pub(crate) guard: Arc<hookd_delivery::guard::AddressGuard>,
    /// Spans for Enqueue and EnqueueBatch (off unless OTLP is configured).
    pub(crate) tracing: crate::otel::Tracing,
    /// The config file's `[[queues]]` (tenant `default`'s, read-only over the API).
    pub(crate) config_queues: Arc<Vec<crate::config::QueueSpec>>,
    /// Mints and revokes portal links (issue #52).
    pub(crate) portal: Arc<crate::portal_links::Links>,
    /// Where portal links point (`[portal] public_url`, or the HTTP listener's address).
    pub(crate) portal_url: Arc<str>,
    /// Replay jobs (issue #53).
    pub(crate) replays: Arc<crate::replay_jobs::ReplayJobs>,
}

/// What `Watch` streams from, and the signal that ends them (shutdown).
#[derive(Debug, Clone)]
pub(crate) struct Watchers {
    pub events: hookd_engine::events::Events,
    pub stopping: tokio::sync::watch::Receiver<bool>,
    /// Streams open, in total and per caller.
    pub open: Arc<WatchSlots>,
    /// How long a stream with nothing to send stays open (`connections.watch_idle_secs`).
    pub idle: std::time::Duration,
}

/// Watch streams open over all callers, at most.
pub(crate) const MAX_WATCH_STREAMS: usize = 256;
/// Watch streams one caller (a credential's name, or without authentication the peer's IP
/// address) may hold open, at most.
pub(crate) const MAX_WATCH_STREAMS_PER_CALLER: usize = 16;
/// Events queued for one watcher that has stopped reading, at most...
const WATCH_QUEUE: usize = 64;
/// ...for this long before it is dropped with "lagged".
const WATCH_STALL: std::time::Duration = std::time::Duration::from_secs(5);

/// The places of open Watch streams.
#[derive(Debug, Default)]
pub(crate) struct WatchSlots {
    open: std::sync::Mutex<(usize, std::collections::HashMap<String, usize>)>,
}

/// One open Watch stream's place; given back when dropped.
#[derive(Debug)]
pub(crate) struct WatchSlot {
    slots: Arc<WatchSlots>,
    caller: String,
}

impl WatchSlots {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, std::collections::HashMap<String, usize>)> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for `caller`, or the refusal naming the limit it is at.
    fn take(self: &Arc<Self>, caller: String) -> Result<WatchSlot, Status> {
        let mut open = self.lock();
        if open.0 >= MAX_WATCH_STREAMS {
            return Err(Status::resource_exhausted(format!(
                "hookd has {MAX_WATCH_STREAMS} Watch streams open, its limit; retry later"
            )));
        }
        let mine = open.1.entry(caller.clone()).or_default();
        if *mine >= MAX_WATCH_STREAMS_PER_CALLER {
            return Err(Status::resource_exhausted(format!(
                "this caller has {MAX_WATCH_STREAMS_PER_CALLER} Watch streams open, the limit per caller; close one first"
            )));
        }
        *mine += 1;
        open.0 += 1;
        Ok(WatchSlot {
            slots: self.clone(),
            caller,
        })
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut open = self.slots.lock();
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.caller) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.caller);
            }
        }
    }
}

/// Who a call is from, for per-caller shares: the credential's name, or (without one:
/// no `[auth]`, where everyone is the anonymous caller) the peer's address.
fn caller_of<T>(request: &Request<T>) -> String {
    if let Some(p) = request.extensions().get::<Arc<crate::auth::Principal>>()
        && !p.is_anonymous()
    {
        return format!("principal:{}", p.name);
    }
    match request.extensions().get::<crate::listen::ConnInfo>() {
        Some(info) => format!("ip:{}", info.remote.ip()),
        None => "unknown".into(),
    }
}

impl HookdService {
    /// What PutEndpoint warns of in `url` (already validated): an address the destination
    /// guard would refuse at every attempt. Only an IP address or `localhost` is judged;
    /// a name is resolved at each attempt (and resolving here would send a lookup for
    /// every PutEndpoint), so it gets no warning.
    fn url_warnings(&self, url: &str) -> Vec<String> {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
        let Ok(parsed) = url::Url::parse(url) else {
            return Vec::new();
        };
        let Some(port) = parsed.port_or_known_default() else {
            return Vec::new();
        };
        let ips: Vec<IpAddr> = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => vec![IpAddr::V4(ip)],
            Some(url::Host::Ipv6(ip)) => vec![IpAddr::V6(ip)],
            Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") => {
                vec![
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(Ipv6Addr::LOCALHOST),
                ]
            }
            _ => return Vec::new(),
        };
        // `localhost` works if either address does (the dispatcher tries each).
        let refusals: Vec<_> = ips
            .into_iter()
            .map(|ip| self.guard.check(SocketAddr::new(ip, port)))
            .collect();
        if refusals.iter().any(Result::is_ok) {
            return Vec::new();
        }
        let Some(Err(refused)) = refusals.into_iter().next() else {
            return Vec::new();
        };
        let addr = refused.addr;
        let network = match addr.ip() {
            IpAddr::V4(ip) => format!("{ip}/32:{port}"),
            IpAddr::V6(ip) => format!("{ip}/128:{port}"),
        };
        let fix = if refused.class == hookd_delivery::guard::OWN_LISTENER {
            "point it at another address".to_owned()
        } else {
            format!(
                "to allow it, start hookd with `--allow-destination {network}` (or add \"{network}\" to delivery.allow_destinations)"
            )
        };
        vec![format!(
            "url: the destination guard refuses {addr} ({}): every attempt will be refused and its message dead-lettered; {fix}",
            refused.class
        )]
    }

    /// A stored endpoint with its secrets opened with the configured keys (one that does
    /// not open is `<why>`).
    fn view(&self, tenant: TenantId, mut e: EndpointRecord) -> view::EndpointView {
        let aad = hookd_core::secrets::endpoint_aad(tenant, &e.name).into_owned();
        let open = |s: &str| {
            hookd_core::secrets::open(self.sealer.as_deref(), &aad, s)
                .unwrap_or_else(|err| format!("<{err}>"))
        };
        let clear_secrets = std::mem::take(&mut e.secrets)
            .iter()
            .map(|s| open(s))
            .collect();
        // The client key and the OAuth2 secret opened in place: answers blank them unless
        // reveal_secrets, and a console save hands them back to PutEndpoint.
        let key = (!e.client_key_pem.is_empty()).then(|| open(&e.client_key_pem));
        let secret = e.oauth2.as_ref().map(|o| open(&o.client_secret));
        if let Some(key) = key {
            e.client_key_pem = key;
        }
        if let (Some(o), Some(secret)) = (e.oauth2.as_mut(), secret) {
            o.client_secret = secret;
        }
        view::EndpointView {
            record: e,
            clear_secrets,
        }
    }

    /// An endpoint as an answer shows it: secrets summarised, never in clear.
    fn shown(&self, tenant: TenantId, e: EndpointRecord) -> pb::Endpoint {
        let v = self.view(tenant, e);
        convert::endpoint(v.record, &v.clear_secrets, false)
    }

    /// A tenant's endpoints, in name order (ListEndpoints, the console).
    pub(crate) async fn endpoint_views(
        &self,
        tenant: TenantId,
    ) -> Result<Vec<view::EndpointView>, Status> {
        let endpoints = self.read(move |s| Ok(s.endpoints(tenant)?)).await?;
        Ok(endpoints
            .into_iter()
            .map(|e| self.view(tenant, e))
            .collect())
    }

    /// One endpoint of a tenant's (GetEndpoint, the console).
    pub(crate) async fn endpoint_view(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> Result<Option<view::EndpointView>, Status> {
        let name = name.to_owned();
        let found = self.read(move |s| Ok(s.endpoint(tenant, &name)?)).await?;
        Ok(found.map(|e| self.view(tenant, e)))
    }

    /// The ingest sources, as the console lists them.
    pub(crate) fn sources(&self) -> &crate::ingest::Sources {
        &self.sources
    }

    /// Where publishes go.
    pub(crate) fn subscriptions(&self) -> &crate::subscriptions::Subscriptions {
        &self.subscriptions
    }

    /// The declared event types.
    pub(crate) fn catalog(&self) -> &crate::catalog::EventTypes {
        &self.limits.catalog
    }

    /// A message, live, dead or completed (within `completed_retention_secs`).
    /// Message `id`, if it is `tenant`'s: another tenant's is one this tenant cannot see.
    pub(crate) async fn find_message(
        &self,
        tenant: TenantId,
        id: MessageId,
    ) -> Result<Option<view::MessageView>, Status> {
        let now = self.clock.now_ms();
        // Live or dead first, then completed: a message moves to `done` in one commit, so
        // reading in this order cannot miss it.
        let found = self.read(move |s| {
            Ok(match s.message(id)? {
                Some(m) => Some(view::MessageView::live(m, now)),
                None => match s.done(id)? {
                    Some(d) => {
                        let kept = match s.completed_record(id)? {
                            hookd_storage::store::Kept::Record(r) => Some(r),
                            hookd_storage::store::Kept::Expired => None,
                        };
                        Some(view::MessageView::done(id, d, kept))
                    }
                    None => None,
                },
            })
        });
        let owner = |m: &view::MessageView| {
            m.destination
                .as_ref()
                .map_or(TenantId::DEFAULT, |d| d.tenant)
        };
        Ok(found.await?.filter(|m| owner(m) == tenant))
    }

    /// The analysis over `window_ms` (AnalyzeDeadLetters): `scanned` counts every dead
    /// letter read.
    pub(crate) async fn analyze_dead_letters_in(
        &self,
        tenant: TenantId,
        destination: Option<hookd_core::destination::Destination>,
        window_ms: u64,
    ) -> Result<view::DeadAnalysis, Status> {
        let from = (self.clock.now_ms() + 1).saturating_sub(window_ms);
        let filter = hookd_core::deadletters::Filter {
            tenant,
            destination,
            dead_after_ms: from,
            ..Default::default()
        };
        self.dead_analysis(filter, false).await
    }

    /// The analysis of exactly the dead letters `filter` matches (destination, status,
    /// error and dead-letter time, any time when unbounded), `scanned` counting those: the
    /// console's, so its analysis and its list beside it speak of the same set.
    pub(crate) async fn analyze_dead_letters_matching(
        &self,
        filter: hookd_core::deadletters::Filter,
    ) -> Result<view::DeadAnalysis, Status> {
        self.dead_analysis(filter, true).await
    }

    async fn dead_analysis(
        &self,
        filter: hookd_core::deadletters::Filter,
        count_matched: bool,
    ) -> Result<view::DeadAnalysis, Status> {
        let to = self.clock.now_ms() + 1;
        let from = filter.dead_after_ms;
        let (tenant, destination) = (filter.tenant, filter.destination.clone());
        let max = validate::MAX_DEAD_SCAN;
        let (mut rows, truncated) = self
            .read(move |s| Ok(s.dead_summaries(tenant, destination.as_ref(), max)?))
            .await?;
        let read = rows.len() as u64;
        rows.retain(|d| filter.matches(d));
        Ok(view::DeadAnalysis {
            from_ms: from,
            to_ms: to,
            destinations: hookd_core::deadletters::analyze(&rows, from, to),
            scanned: if count_matched {
                rows.len() as u64
            } else {
                read
            },
            truncated,
        })
    }

    /// Runs a read on the blocking pool: redb reads touch the disk (the console's own reads
    /// too).
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, Status> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| ApiError::Unavailable(format!("read task failed: {e}")))?
            .map_err(Status::from)
    }
}

/// The authenticated caller's name (`anonymous` without authentication).
fn caller_name<T>(request: &Request<T>) -> String {
    request
        .extensions()
        .get::<Arc<crate::auth::Principal>>()
        .map_or_else(|| "anonymous".to_owned(), |p| p.name.clone())
}

/// Whether the caller has `scope` (everyone has, without authentication; a request that did
/// not pass the auth layer, such as one in a unit test, has none).
fn may<T>(request: &Request<T>, scope: crate::auth::Scope) -> bool {
    request
        .extensions()
        .get::<Arc<crate::auth::Principal>>()
        .is_some_and(|p| p.may(scope))
}

/// Maps an engine refusal to the answer, naming `field` (see [`ApiError::refused`]).
fn refused(field: &'static str) -> impl Fn(Refusal) -> Status {
    move |r| ApiError::refused(r, field).into()
}

fn error_proto(e: &ApiError) -> pb::Error {
    pb::Error {
        code: e.code() as i32,
        message: e.to_string(),
        retry_after_ms: e.retry_after_ms().unwrap_or(0),
    }
}

/// The attributes of a hookd.v1.Hookd call's span.
fn rpc_attributes(method: &'static str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("rpc.system", "grpc"),
        KeyValue::new("rpc.service", "hookd.v1.Hookd"),
        KeyValue::new("rpc.method", method),
        KeyValue::new("messaging.system", "hookd"),
        KeyValue::new("messaging.operation.type", "send"),
    ]
}

/// The answer to a publish no subscription takes: its event id, 0 subscribers.
fn unrouted(event: Option<hookd_core::ids::MessageId>) -> pb::EnqueueResponse {
    pb::EnqueueResponse {
        id: event.map(|e| e.to_string()).unwrap_or_default(),
        ..Default::default()
    }
}

impl HookdService {
    /// Enqueue, once traced.
    async fn enqueue_one(
        &self,
        tenant: TenantId,
        req: pb::EnqueueRequest,
        span: Option<&crate::otel::Traced>,
    ) -> Result<pb::EnqueueResponse, Status> {
        let route = |tenant: TenantId,
                     t: &str,
                     p: &[u8],
                     h: &BTreeMap<String, String>,
                     e: hookd_core::filter::EventIdentity<'_>| {
            self.subscriptions.route(tenant, t, p, h, Some(e))
        };
        let now = self.clock.now_ms();
        let prepared = validate::new_message(tenant, req, &self.limits, now, &route)?;
        let Some(message) = prepared.message else {
            return Ok(unrouted(prepared.event));
        };
        if let Some(span) = span {
            // A publish's destination is its topic (the scope's text after its `t`).
            let name = match &message.fanout {
                Some(f) => format!("topic:{}", f.scope.get(1..).unwrap_or_default()),
                None => message.key.clone(),
            };
            span.set(KeyValue::new("messaging.destination.name", name));
        }
        let mut results = crate::otel::durable(span, 1, self.engine.enqueue(vec![message]))
            .await
            .map_err(refused(""))?;
        let result = results
            .pop()
            .ok_or_else(|| ApiError::Internal("the engine gave no result".into()))?;
        let mut ids_left = usize::MAX;
        Ok(convert::enqueued(
            result.map_err(refused("endpoint"))?,
            &mut ids_left,
        ))
    }

    /// EnqueueBatch, once traced.
    async fn enqueue_many(
        &self,
        tenant: TenantId,
        events: Vec<pb::EnqueueRequest>,
        span: Option<&crate::otel::Traced>,
    ) -> Result<pb::EnqueueBatchResponse, Status> {
        if events.len() > self.limits.max_batch_events {
            return Err(ApiError::InvalidArgument(format!(
                "events: {} events is over the limit of {} per batch",
                events.len(),
                self.limits.max_batch_events
            ))
            .into());
        }
        // Bad events are answered in place; the valid ones go to the engine together.
        let mut results: Vec<Option<pb::EnqueueResult>> = Vec::with_capacity(events.len());
        let mut valid = Vec::with_capacity(events.len());
        let mut slots = Vec::with_capacity(events.len());
        let now = self.clock.now_ms();
        let failed = |e: ApiError, i: usize| pb::EnqueueResult {
            result: Some(pb::enqueue_result::Result::Error(error_proto(
                &e.within(&format!("events[{i}].")),
            ))),
        };
        let route = |tenant: TenantId,
                     t: &str,
                     p: &[u8],
                     h: &BTreeMap<String, String>,
                     e: hookd_core::filter::EventIdentity<'_>| {
            self.subscriptions.route(tenant, t, p, h, Some(e))
        };
        for (i, event) in events.into_iter().enumerate() {
            match validate::new_message(tenant, event, &self.limits, now, &route) {
                Ok(validate::Prepared {
                    message: Some(m), ..
                }) => {
                    valid.push(m);
                    slots.push(i);
                    results.push(None);
                }
                Ok(validate::Prepared {
                    message: None,
                    event,
                }) => results.push(Some(pb::EnqueueResult {
                    result: Some(pb::enqueue_result::Result::Ok(unrouted(event))),
                })),
                Err(e) => results.push(Some(failed(e, i))),
            }
        }
        let mut throttle_ms = 0;
        if !valid.is_empty() {
            let events = valid.len();
            let stored = crate::otel::durable(span, events, self.engine.enqueue(valid))
                .await
                .map_err(refused(""))?;
            // Every event refused for a limit that clears by itself (a hard watermark, the
            // disk reserve): the call as a whole is RESOURCE_EXHAUSTED with RetryInfo, so a
            // client's ordinary retry policy backs off. Nothing was stored.
            let retry = stored
                .iter()
                .map(|r| r.as_ref().err().and_then(Refusal::retry_after_ms))
                .collect::<Option<Vec<u64>>>();
            if let (Some(delays), Some(Err(first))) = (retry, stored.first())
                && results.iter().all(Option::is_none)
            {
                let longest = delays.into_iter().max().unwrap_or(0);
                return Err(ApiError::ResourceExhausted {
                    message: format!("every event was refused: {first}"),
                    retry_after_ms: Some(longest),
                }
                .into());
            }
            // The delivery ids one answer may list in all: the answer stays far under the
            // message limit whatever the fan-out (the counts are always whole).
            let mut ids_left = convert::MAX_BATCH_ANSWER_IDS;
            for (slot, result) in slots.into_iter().zip(stored) {
                results[slot] = Some(match result {
                    Ok(ok) => {
                        throttle_ms = throttle_ms.max(ok.throttle_ms);
                        pb::EnqueueResult {
                            result: Some(pb::enqueue_result::Result::Ok(convert::enqueued(
                                ok,
                                &mut ids_left,
                            ))),
                        }
                    }
                    Err(r) => failed(ApiError::refused(r, "endpoint"), slot),
                });
            }
        }
        Ok(pb::EnqueueBatchResponse {
            results: results.into_iter().map(Option::unwrap_or_default).collect(),
            throttle_ms,
        })
    }
}

#[tonic::async_trait]
impl Hookd for HookdService {
    async fn enqueue(
        &self,
        request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        self.limit_to(&request, tenants::event_key(request.get_ref()))?;
        let tenant = self.tenant_of(&request)?;
        let (metadata, _, mut req) = request.into_parts();
        let span = self
            .tracing
            .server_span("hookd.enqueue", &metadata, rpc_attributes("Enqueue"));
        crate::otel::stamp(&mut req.headers, &metadata, span.as_ref());
        let answer = self.enqueue_one(tenant, req, span.as_ref()).await;
        if let Some(span) = span {
            match &answer {
                Ok(r) => {
                    span.set(KeyValue::new("messaging.message.id", r.id.clone()));
                    span.set(KeyValue::new("hookd.duplicate", r.duplicate));
                    span.end(None);
                }
                Err(status) => span.end(Some(status.message())),
            }
        }
        answer.map(Response::new)
    }

    async fn enqueue_batch(
        &self,
        request: Request<pb::EnqueueBatchRequest>,
    ) -> Result<Response<pb::EnqueueBatchResponse>, Status> {
        for event in &request.get_ref().events {
            self.limit_to(&request, tenants::event_key(event))?;
        }
        let tenant = self.tenant_of(&request)?;
        let (metadata, _, req) = request.into_parts();
        let mut attributes = rpc_attributes("EnqueueBatch");
        attributes.push(KeyValue::new(
            "messaging.batch.message_count",
            i64::try_from(req.events.len()).unwrap_or(i64::MAX),
        ));
        let span = self
            .tracing
            .server_span("hookd.enqueue_batch", &metadata, attributes);
        let mut events = req.events;
        for event in &mut events {
            crate::otel::stamp(&mut event.headers, &metadata, span.as_ref());
        }
        let answer = self.enqueue_many(tenant, events, span.as_ref()).await;
        if let Some(span) = span {
            span.end(answer.as_ref().err().map(Status::message));
        }
        answer.map(Response::new)
    }

    async fn receive(
        &self,
        request: Request<pb::ReceiveRequest>,
    ) -> Result<Response<pb::ReceiveResponse>, Status> {
        self.may_use(&request, &format!("queue:{}", request.get_ref().queue))?;
        let tenant = self.tenant_of(&request)?;
        let req = request.into_inner();
        let (max, visibility, wait) = validate::receive(&req)?;
        let queue = hookd_core::destination::Destination::queue(tenant, req.queue);
        let messages = self
            .engine
            .receive(queue, max, visibility, wait)
            .await
            .map_err(refused("queue"))?;
        Ok(Response::new(pb::ReceiveResponse {
            messages: messages.into_iter().map(convert::leased).collect(),
        }))
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let tenant = self.tenant_of(&request)?;
        let caller = tenants::caller(&request);
        let leases = validate::ack(request.into_inner())?;
        for (i, lease) in leases.iter().enumerate() {
            self.lease_allowed(tenant, caller.as_deref(), lease, &format!("lease_ids[{i}]"))
                .await?;
        }
        let acked = self
            .engine
            .ack(tenant, leases)
            .await
            .map_err(refused("lease_ids"))?;
        Ok(Response::new(pb::AckResponse { acked }))
    }

    async fn nack(
        &self,
        request: Request<pb::NackRequest>,
    ) -> Result<Response<pb::NackResponse>, Status> {
        let tenant = self.tenant_of(&request)?;
        let caller = tenants::caller(&request);
        let (lease, delay_ms, reason) = validate::nack(request.into_inner())?;
        self.lease_allowed(tenant, caller.as_deref(), &lease, "lease_id")
            .await?;
        let outcome = self
            .engine
            .nack(tenant, lease, delay_ms, reason)
            .await
            .map_err(refused("lease_id"))?;
        Ok(Response::new(convert::nacked(outcome)))
    }

    async fn stats(
        &self,
        request: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        let tenant = self.figures_of(&request)?;
        let caller = tenants::caller(&request);
        let now = self.clock.now_ms();
        let jobs: Vec<pb::ReplayJob> = self
            .replays
            .active()
            .await
            .into_iter()
            .filter(|(t, _)| tenant.is_none_or(|mine| mine == *t))
            .filter(|(_, j)| match caller.as_ref() {
                Some(c) if c.limited() => !j.destination.is_empty() && c.may_use(&j.destination),
                _ => true,
            })
            .map(|(_, j)| replay_jobs::shown(&j, now))
            .collect();
        let (after, limit) = validate::stats_page(request.into_inner())?;
        let mut stats = self
            .engine
            .stats(tenant, after, limit)
            .await
            .map_err(refused(""))?;
        if tenant.is_some() {
            // Keyed as the tenant reads its destinations; a limited token's only.
            for d in &mut stats.destinations {
                d.destination = Destination::local_part(&d.destination).to_owned();
            }
            for a in &mut stats.alerts {
                a.destination = Destination::local_part(&a.destination).to_owned();
            }
            if let Some(c) = caller.filter(|c| c.limited()) {
                stats.destinations.retain(|d| c.may_use(&d.destination));
                stats.alerts.retain(|a| c.may_use(&a.destination));
                stats.total = tenants::total_of(&stats.destinations);
            }
        }
        let mut answer = convert::stats(stats);
        answer.replay_jobs = jobs;
        Ok(Response::new(answer))
    }

    async fn get_message(
        &self,
        request: Request<pb::GetMessageRequest>,
    ) -> Result<Response<pb::GetMessageResponse>, Status> {
        let tenant = self.tenant_of(&request)?;
        let caller = tenants::caller(&request);
        let id = validate::message_id(&request.into_inner().id, "id")?;
        let found = self.find_message(tenant, id).await?;
        // A token limited to destinations finds only their messages.
        let found = found.filter(|m| {
            m.destination
                .as_ref()
                .is_some_and(|d| caller.as_ref().is_none_or(|c| c.may_use(&d.local_key())))
        });
        let found = found.ok_or_else(|| {
            ApiError::NotFound(format!(
                "id: no message {id} (or it completed longer ago than completed_retention_secs)"
            ))
        })?;
        Ok(Response::new(convert::message(found)))
    }

    async fn search_messages(
        &self,
        request: Request<pb::SearchMessagesRequest>,
    ) -> Result<Response<pb::SearchMessagesResponse>, Status> {
        // A token limited to destinations searches one of them, named.
        self.limit_to(&request, tenants::wire_key(&request.get_ref().destination))?;
        let tenant = self.tenant_of(&request)?;
        let validate::Search {
            query,
            limit,
            after,
            count,
        } = validate::search(tenant, request.into_inner())?;
        let (page, total) = self
            .read(move |s| {
                let page = s.search(&query, after, limit, validate::SEARCH_BUDGET)?;
                let total = if count {
                    Some(s.estimate(&query)?)
                } else {
                    None
                };
                Ok((page, total))
            })
            .await?;
        Ok(Response::new(pb::SearchMessagesResponse {
            messages: page.hits.into_iter().map(convert::summary).collect(),
            next_page_token: page.next.map(|id| id.to_string()).unwrap_or_default(),
            scanned: page.scanned,
            total: total.map_or(0, |t| t.count),
            total_exact: total.is_some_and(|t| t.exact),
        }))
    }

    async fn purge_messages(
        &self,
        request: Request<pb::PurgeMessagesRequest>,
    ) -> Result<Response<pb::PurgeMessagesResponse>, Status> {
        self.purge_messages_in(request).await.map(Response::new)
    }

    async fn list_endpoint_events(
        &self,
        request: Request<pb::ListEndpointEventsRequest>,
    ) -> Result<Response<pb::ListEndpointEventsResponse>, Status> {
        self.list_endpoint_events_in(request)
            .await
            .map(Response::new)
    }

    async fn create_replay_job(
        &self,
        request: Request<pb::CreateReplayJobRequest>,
    ) -> Result<Response<pb::CreateReplayJobResponse>, Status> {
        self.create_replay_job_in(request).await.map(Response::new)
    }

    async fn get_replay_job(
        &self,
        request: Request<pb::GetReplayJobRequest>,
    ) -> Result<Response<pb::GetReplayJobResponse>, Status> {
        self.get_replay_job_in(request).await.map(Response::new)
    }

    async fn list_replay_jobs(
        &self,
        request: Request<pb::ListReplayJobsRequest>,
    ) -> Result<Response<pb::ListReplayJobsResponse>, Status> {
        self.list_replay_jobs_in(request).await.map(Response::new)
    }

    async fn update_replay_job(
        &self,
        request: Request<pb::UpdateReplayJobRequest>,
    ) -> Result<Response<pb::UpdateReplayJobResponse>, Status> {
        self.update_replay_job_in(request).await.map(Response::new)
    }

    async fn put_endpoint(
        &self,
        request: Request<pb::PutEndpointRequest>,
    ) -> Result<Response<pb::PutEndpointResponse>, Status> {
        let name = request.get_ref().endpoint.as_ref().map(|e| e.name.as_str());
        self.may_use(&request, &format!("endpoint:{}", name.unwrap_or_default()))?;
        let caller = caller_name(&request);
        let tenant = self.tenant_of(&request)?;
        let mut endpoint = validate::endpoint(request.into_inner().endpoint)?;
        let aad = hookd_core::secrets::endpoint_aad(tenant, &endpoint.name).into_owned();
        let warnings = self.url_warnings(&endpoint.url);
        // The public halves of its v1a keys, for its JWKS (the engine keeps retired ones).
        endpoint.signing_public_keys = hookd_core::signing::public_keys(&endpoint.secrets)
            .into_iter()
            .map(|k| k.to_vec())
            .collect();
        hookd_core::secrets::seal_all(self.sealer.as_deref(), &aad, &mut endpoint.secrets);
        if let Some(sealer) = self.sealer.as_deref() {
            if !endpoint.client_key_pem.is_empty() {
                endpoint.client_key_pem = sealer.seal(&aad, &endpoint.client_key_pem);
            }
            if let Some(o) = endpoint.oauth2.as_mut() {
                o.client_secret = sealer.seal(&aad, &o.client_secret);
            }
        }
        let put = self
            .engine
            .put_endpoint(tenant, endpoint)
            .await
            .map_err(refused("endpoint"))?;
        // Re-pointing an endpoint that signs is worth a line in the log: its receivers
        // trust what it signs. The engine says what the URL was (no read before the put).
        if let Some(old) = &put.replaced_signing_url {
            tracing::warn!(
                endpoint = %put.endpoint.name,
                caller,
                from = %hookd_core::destination::origin_of(old),
                to = %hookd_core::destination::origin_of(&put.endpoint.url),
                "the URL of an endpoint with signing secrets was changed"
            );
        }
        for warning in &warnings {
            tracing::warn!(endpoint = %put.endpoint.name, caller, "{warning}");
        }
        Ok(Response::new(pb::PutEndpointResponse {
            endpoint: Some(self.shown(tenant, put.endpoint)),
            created: put.created,
            warnings,
        }))
    }

    async fn get_endpoint(
        &self,
        request: Request<pb::GetEndpointRequest>,
    ) -> Result<Response<pb::GetEndpointResponse>, Status> {
        self.may_use(&request, &format!("endpoint:{}", request.get_ref().name))?;
        let reveal = request.get_ref().reveal_secrets;
        if reveal && !may(&request, crate::auth::Scope::Admin) {
            return Err(Status::permission_denied(
                "reveal_secrets: showing secrets needs the admin scope",
            ));
        }
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        let v = self
            .endpoint_view(tenant, &name)
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("name: no endpoint named {name:?}")))?;
        Ok(Response::new(pb::GetEndpointResponse {
            endpoint: Some(convert::endpoint(v.record, &v.clear_secrets, reveal)),
        }))
    }

    async fn list_endpoints(
        &self,
        request: Request<pb::ListEndpointsRequest>,
    ) -> Result<Response<pb::ListEndpointsResponse>, Status> {
        let endpoints = self.endpoint_views(self.tenant_of(&request)?).await?;
        let endpoints = endpoints
            .into_iter()
            .filter(|v| tenants::allowed(&request, &format!("endpoint:{}", v.record.name)));
        Ok(Response::new(pb::ListEndpointsResponse {
            endpoints: endpoints
                .into_iter()
                .map(|v| convert::endpoint(v.record, &v.clear_secrets, false))
                .collect(),
        }))
    }

    async fn put_queue(
        &self,
        request: Request<pb::PutQueueRequest>,
    ) -> Result<Response<pb::PutQueueResponse>, Status> {
        self.put_queue_in(request).await.map(Response::new)
    }

    async fn get_queue(
        &self,
        request: Request<pb::GetQueueRequest>,
    ) -> Result<Response<pb::GetQueueResponse>, Status> {
        self.get_queue_in(request).await.map(Response::new)
    }

    async fn list_queues(
        &self,
        request: Request<pb::ListQueuesRequest>,
    ) -> Result<Response<pb::ListQueuesResponse>, Status> {
        self.list_queues_in(request).await.map(Response::new)
    }

    async fn delete_queue(
        &self,
        request: Request<pb::DeleteQueueRequest>,
    ) -> Result<Response<pb::DeleteQueueResponse>, Status> {
        self.delete_queue_in(request).await.map(Response::new)
    }

    async fn delete_endpoint(
        &self,
        request: Request<pb::DeleteEndpointRequest>,
    ) -> Result<Response<pb::DeleteEndpointResponse>, Status> {
        self.may_use(&request, &format!("endpoint:{}", request.get_ref().name))?;
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        // A subscription would go on routing events to it, each left out in silence.
        let endpoint = hookd_core::destination::Destination::endpoint(tenant, &name);
        let subscribed = self.subscriptions.of_destination(&endpoint);
        if !subscribed.is_empty() {
            return Err(ApiError::FailedPrecondition(format!(
                "name: endpoint {name:?} has subscriptions ({}); delete them first",
                subscribed.join(", ")
            ))
            .into());
        }
        self.engine
            .delete_endpoint(tenant, name)
            .await
            .map_err(refused("name"))?;
        Ok(Response::new(pb::DeleteEndpointResponse {}))
    }

    async fn put_subscription(
        &self,
        request: Request<pb::PutSubscriptionRequest>,
    ) -> Result<Response<pb::PutSubscriptionResponse>, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        let spec = subscriptions::spec(request.into_inner().subscription)?;
        let destination =
            hookd_core::destination::Destination::from_local_key(tenant, &spec.destination);
        if let Some(endpoint) = destination.as_ref().and_then(|d| d.endpoint_name()) {
            let endpoint = endpoint.to_owned();
            validate::validate_name(&endpoint, "subscription.endpoint")?;
            let store = self.store.clone();
            let name = endpoint.clone();
            let exists = tokio::task::spawn_blocking(move || store.endpoint(tenant, &name))
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))?
                .map_err(ApiError::from)?
                .is_some();
            if !exists {
                return Err(ApiError::NotFound(format!(
                    "subscription.endpoint: no endpoint named {endpoint:?} (PutEndpoint first)"
                ))
                .into());
            }
        }
        let (subscription, created) = self
            .subscriptions
            .put(tenant, spec, self.clock.now_ms())
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::PutSubscriptionResponse {
            subscription: Some(subscriptions::shown(&subscription)),
            created,
        }))
    }

    async fn get_subscription(
        &self,
        request: Request<pb::GetSubscriptionRequest>,
    ) -> Result<Response<pb::GetSubscriptionResponse>, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        let subscription = self
            .subscriptions
            .get(tenant, &name)
            .ok_or_else(|| ApiError::NotFound(format!("name: no subscription named {name:?}")))?;
        Ok(Response::new(pb::GetSubscriptionResponse {
            subscription: Some(subscriptions::shown(&subscription)),
        }))
    }

    async fn list_subscriptions(
        &self,
        request: Request<pb::ListSubscriptionsRequest>,
    ) -> Result<Response<pb::ListSubscriptionsResponse>, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        Ok(Response::new(pb::ListSubscriptionsResponse {
            subscriptions: self
                .subscriptions
                .list(tenant)
                .iter()
                .map(|s| subscriptions::shown(s))
                .collect(),
        }))
    }

    async fn create_tenant(
        &self,
        request: Request<pb::CreateTenantRequest>,
    ) -> Result<Response<pb::CreateTenantResponse>, Status> {
        self.create_tenant_in(request).await.map(Response::new)
    }

    async fn get_tenant(
        &self,
        request: Request<pb::GetTenantRequest>,
    ) -> Result<Response<pb::GetTenantResponse>, Status> {
        self.get_tenant_in(request).map(Response::new)
    }

    async fn list_tenants(
        &self,
        request: Request<pb::ListTenantsRequest>,
    ) -> Result<Response<pb::ListTenantsResponse>, Status> {
        self.list_tenants_in(request).map(Response::new)
    }

    async fn update_tenant(
        &self,
        request: Request<pb::UpdateTenantRequest>,
    ) -> Result<Response<pb::UpdateTenantResponse>, Status> {
        self.update_tenant_in(request).await.map(Response::new)
    }

    async fn delete_tenant(
        &self,
        request: Request<pb::DeleteTenantRequest>,
    ) -> Result<Response<pb::DeleteTenantResponse>, Status> {
        self.delete_tenant_in(request).await.map(Response::new)
    }

    async fn create_token(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<Response<pb::CreateTokenResponse>, Status> {
        self.create_token_in(request).await.map(Response::new)
    }

    async fn list_tokens(
        &self,
        request: Request<pb::ListTokensRequest>,
    ) -> Result<Response<pb::ListTokensResponse>, Status> {
        self.list_tokens_in(request).map(Response::new)
    }

    async fn revoke_token(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<Response<pb::RevokeTokenResponse>, Status> {
        self.revoke_token_in(request).await.map(Response::new)
    }

    async fn create_portal_link(
        &self,
        request: Request<pb::CreatePortalLinkRequest>,
    ) -> Result<Response<pb::CreatePortalLinkResponse>, Status> {
        self.create_portal_link_in(request).await.map(Response::new)
    }

    async fn revoke_portal_links(
        &self,
        request: Request<pb::RevokePortalLinksRequest>,
    ) -> Result<Response<pb::RevokePortalLinksResponse>, Status> {
        self.revoke_portal_links_in(request)
            .await
            .map(Response::new)
    }

    async fn delete_subscription(
        &self,
        request: Request<pb::DeleteSubscriptionRequest>,
    ) -> Result<Response<pb::DeleteSubscriptionResponse>, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        self.subscriptions
            .delete(tenant, &name)
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::DeleteSubscriptionResponse {}))
    }

    async fn put_source(
        &self,
        request: Request<pb::PutSourceRequest>,
    ) -> Result<Response<pb::PutSourceResponse>, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        let spec = sources::spec(request.into_inner().source)?;
        let (source, created) = self
            .sources
            .put(tenant, spec)
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::PutSourceResponse {
            source: Some(sources::shown(&source)),
            created,
        }))
    }

    async fn get_source(
        &self,
        request: Request<pb::GetSourceRequest>,
    ) -> Result<Response<pb::GetSourceResponse>, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        let source = self
            .sources
            .get(tenant, &name)
            .ok_or_else(|| ApiError::NotFound(format!("name: no source named {name:?}")))?;
        Ok(Response::new(pb::GetSourceResponse {
            source: Some(sources::shown(&source)),
        }))
    }

    async fn list_sources(
        &self,
        request: Request<pb::ListSourcesRequest>,
    ) -> Result<Response<pb::ListSourcesResponse>, Status> {
        self.spans_destinations(&request)?;
        let sources = self.sources.list(self.tenant_of(&request)?);
        Ok(Response::new(pb::ListSourcesResponse {
            sources: sources.iter().map(|s| sources::shown(s)).collect(),
        }))
    }

    async fn list_event_types(
        &self,
        request: Request<pb::ListEventTypesRequest>,
    ) -> Result<Response<pb::ListEventTypesResponse>, Status> {
        self.list_event_types_in(request).await.map(Response::new)
    }

    async fn put_event_type(
        &self,
        request: Request<pb::PutEventTypeRequest>,
    ) -> Result<Response<pb::PutEventTypeResponse>, Status> {
        self.put_event_type_in(request).await.map(Response::new)
    }

    async fn get_event_type(
        &self,
        request: Request<pb::GetEventTypeRequest>,
    ) -> Result<Response<pb::GetEventTypeResponse>, Status> {
        self.get_event_type_in(request).await.map(Response::new)
    }

    async fn delete_event_type(
        &self,
        request: Request<pb::DeleteEventTypeRequest>,
    ) -> Result<Response<pb::DeleteEventTypeResponse>, Status> {
        self.delete_event_type_in(request).await.map(Response::new)
    }

    async fn delete_source(
        &self,
        request: Request<pb::DeleteSourceRequest>,
    ) -> Result<Response<pb::DeleteSourceResponse>, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        self.sources
            .delete(tenant, &name)
            .await
            .map_err(ApiError::from)?;
        Ok(Response::new(pb::DeleteSourceResponse {}))
    }

    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        self.limit_to(&request, tenants::wire_key(&request.get_ref().destination))?;
        let tenant = self.tenant_of(&request)?;
        let validate::DeadLetterPage {
            destination,
            limit,
            after,
        } = validate::dead_letter_page(tenant, request.into_inner())?;
        let (page, next) = self
            .read(move |s| {
                Ok(s.dead_letters(tenant, destination.as_ref(), after.as_deref(), limit)?)
            })
            .await?;
        Ok(Response::new(pb::ListDeadLettersResponse {
            dead_letters: page.into_iter().map(convert::dead_letter).collect(),
            next_page_token: next.map(|k| hookd_core::names::hex(&k)).unwrap_or_default(),
        }))
    }

    async fn replay_dead_letters(
        &self,
        request: Request<pb::ReplayDeadLettersRequest>,
    ) -> Result<Response<pb::ReplayDeadLettersResponse>, Status> {
        // A limited token replays one of its destinations' dead letters, not ids or a filter.
        let only = request.get_ref();
        let whole = only.ids.is_empty() && only.filter.is_none();
        let key = tenants::wire_key(&only.destination).filter(|_| whole);
        self.limit_to(&request, key)?;
        let tenant = self.tenant_of(&request)?;
        let by = caller_name(&request);
        let validate::Replay {
            mut ids,
            destination,
            filter,
            limit,
            dry_run,
            per_s,
            as_job,
        } = validate::replay(tenant, request.into_inner())?;
        if as_job && !dry_run {
            return self
                .dead_letters_as_job(tenant, ids, destination, filter, limit, per_s, by)
                .await
                .map(Response::new);
        }
        // A refusal about the destination names its endpoint; one about an id, the id's
        // place in `ids`.
        let field = if destination.is_some() {
            "destination.endpoint"
        } else {
            "ids"
        };
        let strict = filter.is_none();
        if let Some(filter) = filter {
            ids = self.matching_dead(filter, limit).await?;
        }
        let count =
            |ids: &[hookd_core::ids::MessageId]| u32::try_from(ids.len()).unwrap_or(u32::MAX);
        if dry_run {
            // A destination's dead letters are counted as a filter of it alone would find them.
            let matched = match destination {
                Some(d) => {
                    let only = hookd_core::deadletters::Filter {
                        tenant,
                        destination: Some(d),
                        ..Default::default()
                    };
                    count(&self.matching_dead(only, limit).await?)
                }
                None => count(&ids),
            };
            return Ok(Response::new(pb::ReplayDeadLettersResponse {
                replayed: 0,
                matched,
                last_due_unix_ms: 0,
                job_id: String::new(),
            }));
        }
        let matched = count(&ids);
        let per_s = if per_s > 0.0 {
            per_s
        } else {
            self.limits.replay_rate_per_s
        };
        let done = self
            .engine
            .replay(ReplayRequest {
                tenant,
                ids,
                destination: destination.clone(),
                limit,
                strict,
                per_s,
            })
            .await
            .map_err(refused(field))?;
        Ok(Response::new(pb::ReplayDeadLettersResponse {
            replayed: done.replayed,
            matched: if destination.is_some() {
                done.replayed
            } else {
                matched
            },
            last_due_unix_ms: done.last_due_ms,
            job_id: String::new(),
        }))
    }

    async fn purge_dead_letters(
        &self,
        request: Request<pb::PurgeDeadLettersRequest>,
    ) -> Result<Response<pb::PurgeDeadLettersResponse>, Status> {
        let key = request
            .get_ref()
            .filter
            .as_ref()
            .filter(|_| request.get_ref().ids.is_empty())
            .and_then(|f| tenants::wire_key(&f.destination));
        self.limit_to(&request, key)?;
        let tenant = self.tenant_of(&request)?;
        let validate::Purge {
            filter,
            limit,
            dry_run,
            ids,
        } = validate::purge(tenant, request.into_inner())?;
        let ids = match ids {
            Some(ids) => ids,
            None => self.matching_dead(filter, limit).await?,
        };
        let matched = u32::try_from(ids.len()).unwrap_or(u32::MAX);
        let purged = if dry_run {
            0
        } else {
            self.engine.purge(tenant, ids).await.map_err(refused(""))?
        };
        Ok(Response::new(pb::PurgeDeadLettersResponse {
            purged,
            matched,
        }))
    }

    async fn analyze_dead_letters(
        &self,
        request: Request<pb::AnalyzeDeadLettersRequest>,
    ) -> Result<Response<pb::AnalyzeDeadLettersResponse>, Status> {
        self.limit_to(&request, tenants::wire_key(&request.get_ref().destination))?;
        let tenant = self.tenant_of(&request)?;
        let req = request.into_inner();
        let destination = validate::destination_filter(tenant, req.destination)?;
        let window_ms = match req.window_secs {
            0 => DEFAULT_ANALYSIS_WINDOW_MS,
            s if s > 366 * 24 * 3600 => {
                return Err(ApiError::InvalidArgument(format!(
                    "window_secs: {s} is over the limit of one year"
                ))
                .into());
            }
            s => s * 1_000,
        };
        let a = self
            .analyze_dead_letters_in(tenant, destination, window_ms)
            .await?;
        Ok(Response::new(pb::AnalyzeDeadLettersResponse {
            window_start_unix_ms: a.from_ms,
            window_end_unix_ms: a.to_ms,
            destinations: a.destinations.into_iter().map(convert::analysis).collect(),
            scanned: a.scanned,
            truncated: a.truncated,
        }))
    }

    async fn pause_endpoint(
        &self,
        request: Request<pb::PauseEndpointRequest>,
    ) -> Result<Response<pb::PauseEndpointResponse>, Status> {
        self.may_use(&request, &format!("endpoint:{}", request.get_ref().name))?;
        let tenant = self.tenant_of(&request)?;
        let req = request.into_inner();
        validate::validate_name(&req.name, "name")?;
        if req.reason.len() > 1_024 {
            return Err(ApiError::InvalidArgument(format!(
                "reason: {} bytes is over the limit of 1024",
                req.reason.len()
            ))
            .into());
        }
        let reason = if req.reason.is_empty() {
            "paused by an operator".to_owned()
        } else {
            req.reason
        };
        let endpoint = self
            .engine
            .pause_endpoint(tenant, req.name, Some(reason))
            .await
            .map_err(refused("name"))?;
        Ok(Response::new(pb::PauseEndpointResponse {
            endpoint: Some(self.shown(tenant, endpoint)),
        }))
    }

    type WatchStream = tokio_stream::wrappers::ReceiverStream<Result<pb::WatchEvent, Status>>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        self.limit_to(&request, tenants::wire_key(&request.get_ref().destination))?;
        use tokio::sync::broadcast::error::RecvError;
        let slot = self.watchers.open.take(caller_of(&request))?;
        let tenant = self.tenant_of(&request)?;
        let only = validate::destination_filter(tenant, request.into_inner().destination)?
            .map(|d| d.key());
        let mut events = self.watchers.events.subscribe();
        let mut stopping = self.watchers.stopping.clone();
        let clock = self.clock.clone();
        let (tx, rx) = tokio::sync::mpsc::channel(WATCH_QUEUE + 1);
        // One place kept for the last word to a watcher that stopped reading.
        let last = tx.clone().reserve_owned().await.ok();
        // Forwards until the client goes (send fails), hookd stops, the engine is gone, or
        // the client stops reading (then "lagged", and the stream ends): a watcher never
        // holds more than WATCH_QUEUE events.
        let idle_for = self.watchers.idle;
        tokio::spawn(async move {
            let _slot = slot;
            let idle = tokio::time::sleep(idle_for);
            tokio::pin!(idle);
            loop {
                let event = tokio::select! {
                    _ = stopping.wait_for(|stop| *stop) => return,
                    () = tx.closed() => return,
                    () = &mut idle => {
                        let _ = tx.try_send(Err(Status::deadline_exceeded(format!(
                            "idle: no event for {} s; watch again",
                            idle_for.as_secs()
                        ))));
                        return;
                    }
                    e = events.recv() => e,
                };
                let out = match event {
                    Ok(mut e) => {
                        // Only the caller's tenant's events, keyed as it reads them.
                        if only.as_ref().is_some_and(|k| *k != e.destination)
                            || Destination::tenant_of_key(&e.destination) != Some(tenant)
                        {
                            continue;
                        }
                        e.destination = Destination::local_part(&e.destination).to_owned();
                        watch_event(e)
                    }
                    Err(RecvError::Lagged(n)) => pb::WatchEvent {
                        unix_ms: clock.now_ms(),
                        kind: "lagged".into(),
                        detail: format!("{n} events were missed: this watcher fell behind"),
                        ..Default::default()
                    },
                    Err(RecvError::Closed) => return,
                };
                match tx.send_timeout(Ok(out), WATCH_STALL).await {
                    Ok(()) => idle.as_mut().reset(tokio::time::Instant::now() + idle_for),
                    Err(tokio::sync::mpsc::error::SendTimeoutError::Timeout(_)) => {
                        if let Some(last) = last {
                            last.send(Err(Status::aborted(format!(
                                "lagged: this watcher read nothing for {} s with {WATCH_QUEUE} events waiting; watch again",
                                WATCH_STALL.as_secs()
                            ))));
                        }
                        return;
                    }
                    Err(tokio::sync::mpsc::error::SendTimeoutError::Closed(_)) => return,
                }
            }
        });
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }

    async fn resume_endpoint(
        &self,
        request: Request<pb::ResumeEndpointRequest>,
    ) -> Result<Response<pb::ResumeEndpointResponse>, Status> {
        self.may_use(&request, &format!("endpoint:{}", request.get_ref().name))?;
        let tenant = self.tenant_of(&request)?;
        let req = request.into_inner();
        validate::validate_name(&req.name, "name")?;
        let endpoint = self
            .engine
            .pause_endpoint(tenant, req.name, None)
            .await
            .map_err(refused("name"))?;
        Ok(Response::new(pb::ResumeEndpointResponse {
            endpoint: Some(self.shown(tenant, endpoint)),
        }))
    }
}

/// A live event as the wire has it.
fn watch_event(e: hookd_engine::events::Event) -> pb::WatchEvent {
    pb::WatchEvent {
        unix_ms: e.at_ms,
        kind: e.kind.to_owned(),
        destination: e.destination,
        message_id: e.message_id,
        attempt: e.attempt,
        http_status: e.http_status,
        latency_us: e.latency_us,
        detail: e.detail,
    }
}

impl HookdService {
    /// The ids of the dead letters `filter` matches, at most `limit` (of at most
    /// [`validate::MAX_DEAD_SCAN`] looked at).
    async fn matching_dead(
        &self,
        filter: hookd_core::deadletters::Filter,
        limit: usize,
    ) -> Result<Vec<hookd_core::ids::MessageId>, Status> {
        self.read(move |s| {
            let (rows, _) = s.dead_summaries(
                filter.tenant,
                filter.destination.as_ref(),
                validate::MAX_DEAD_SCAN,
            )?;
            Ok(rows
                .into_iter()
                .filter(|d| filter.matches(d))
                .take(limit)
                .map(|d| d.id)
                .collect())
        })
        .await
    }
}
