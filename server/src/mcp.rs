//! hookd as an MCP server (Model Context Protocol, on the official Rust SDK `rmcp`): an
//! agent publishes and enqueues events, reads a message with its attempts, lists, analyses
//! and replays dead letters (a dry run first), and reads endpoints, subscriptions, event
//! types and stats, as tools.
//!
//! Every tool is one call of the gRPC API, so a tool is allowed exactly what that call is:
//! - `hookd mcp` (stdio) is a client of a running hookd, with the command's `--server` and
//!   `--token`;
//! - `/mcp` on the HTTP listener (streamable HTTP) calls the same authenticated stack the
//!   gRPC listener serves, in process, as the caller of the HTTP request carrying the tool
//!   call (its `Authorization`, its connection). With `[auth]`, `/mcp` takes any valid
//!   token; each tool then needs its RPC's scope. Without it, only a `Host` naming no
//!   domain is answered (DNS rebinding), as for the JSON API.
//!
//! A tool's answer is the RPC's answer as JSON, in the JSON API's form (proto3's mapping,
//! `data` beside a JSON payload); a refusal is a tool error naming the gRPC status, which
//! the agent reads (not a protocol error).

use std::collections::BTreeMap;
use std::convert::Infallible;

use axum::Router;
use axum::response::IntoResponse;
use hookd_core::destination::{Destination, To};
use hookd_core::scope::TenantId;
use hookd_proto::v1 as pb;
use hookd_proto::v1::hookd_client::HookdClient;
use http::HeaderValue;
use prost::Message;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;
use tower_service::Service;

use crate::rest::GrpcStack;

/// Where the tools' calls go.
#[derive(Clone)]
pub(crate) enum Backend {
    /// `hookd mcp`: a running hookd, over gRPC with the command's credentials.
    Remote(hookd_ctl::Api),
    /// `/mcp`: the HTTP listener's own hookd, through the gRPC listener's stack.
    Local(GrpcStack),
}

/// One call's client.
enum Client {
    Remote(hookd_ctl::Api),
    Local(HookdClient<InProcess>),
}

/// The gRPC stack as a channel, for one tool call: the HTTP request's credential and
/// connection go with each call, as a gRPC client's would.
#[derive(Clone)]
struct InProcess {
    stack: GrpcStack,
    authorization: Option<HeaderValue>,
    /// The tenant an operator names (`x-hookd-tenant`), passed on like the credential.
    tenant: Option<HeaderValue>,
    conn: Option<crate::listen::ConnInfo>,
}

impl Service<http::Request<tonic::body::Body>> for InProcess {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = <GrpcStack as Service<http::Request<tonic::body::Body>>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        Service::<http::Request<tonic::body::Body>>::poll_ready(&mut self.stack, cx)
    }

    fn call(&mut self, mut request: http::Request<tonic::body::Body>) -> Self::Future {
        if let Some(value) = &self.authorization {
            request
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value.clone());
        }
        if let Some(tenant) = &self.tenant {
            request
                .headers_mut()
                .insert(crate::api::tenants::TENANT_HEADER, tenant.clone());
        }
        if let Some(conn) = &self.conn {
            request.extensions_mut().insert(conn.clone());
        }
        self.stack.call(request)
    }
}

/// The MCP server: one per session (HTTP) or process (stdio).
#[derive(Clone)]
pub(crate) struct HookdMcp {
    backend: Backend,
    tool_router: ToolRouter<Self>,
}

/// Calls `$method` on the tool call's client.
macro_rules! rpc {
    ($self:ident, $ctx:ident, $method:ident, $request:expr) => {
        match $self.client(&$ctx) {
            Client::Remote(mut c) => c.$method($request).await,
            Client::Local(mut c) => c.$method($request).await,
        }
    };
}

/// A destination as the CLI and Stats write it: `queue:NAME`, `endpoint:NAME` or `url:URL`.
fn destination(text: &str) -> Result<Destination, String> {
    // The tenant is the call's (the wire names none).
    Destination::from_local_key(TenantId::DEFAULT, text)
        .ok_or_else(|| format!("destination: `{text}` is not queue:NAME, endpoint:NAME or url:URL"))
}

/// An event's destination on the wire.
fn enqueue_destination(text: &str) -> Result<pb::enqueue_request::Destination, String> {
    use pb::enqueue_request::Destination as D;
    Ok(match destination(text)?.to {
        To::Queue(n) => D::Queue(n),
        To::Endpoint(n) => D::Endpoint(n),
        To::Url(u) => D::Url(u),
    })
}

/// A filter's destination, if one is given.
fn filter_destination(text: Option<&str>) -> Result<Option<pb::Destination>, String> {
    text.filter(|t| !t.is_empty())
        .map(|t| destination(t).map(|d| hookd_ctl::wire::destination(&d)))
        .transpose()
}

/// An event's content and options, shared by `enqueue_event` and `publish_event`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct EventFields {
    /// The payload as JSON (any JSON value): stored as its compact JSON text, delivered
    /// with content-type application/json. Give `data` or `text`, not both.
    #[serde(default)]
    data: Option<serde_json::Value>,
    /// The payload as text (UTF-8), instead of `data`.
    #[serde(default)]
    text: Option<String>,
    /// The event's type, e.g. `order.created` (a publish's is its topic).
    #[serde(default)]
    event_type: Option<String>,
    /// Makes a retry of the same event a duplicate instead of a second event.
    #[serde(default)]
    idempotency_key: Option<String>,
    /// The event's FIFO lane at an ordered destination.
    #[serde(default)]
    ordering_key: Option<String>,
    /// Extra HTTP headers for push delivery.
    #[serde(default)]
    headers: BTreeMap<String, String>,
    /// Not deliverable before now + this many milliseconds.
    #[serde(default)]
    delay_ms: Option<u64>,
}

impl EventFields {
    fn request(
        self,
        destination: pb::enqueue_request::Destination,
    ) -> Result<pb::EnqueueRequest, String> {
        let payload = match (self.data, self.text) {
            (Some(_), Some(_)) => return Err("data: give data (JSON) or text, not both".into()),
            (Some(data), None) => serde_json::to_vec(&data).map_err(|e| format!("data: {e}"))?,
            (None, Some(text)) => text.into_bytes(),
            (None, None) => Vec::new(),
        };
        Ok(pb::EnqueueRequest {
            destination: Some(destination),
            payload,
            idempotency_key: self.idempotency_key.unwrap_or_default(),
            event_type: self.event_type.unwrap_or_default(),
            headers: self.headers.into_iter().collect(),
            delay_ms: self.delay_ms.unwrap_or(0),
            ordering_key: self.ordering_key.unwrap_or_default(),
            ..Default::default()
        })
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct EnqueueArgs {
    /// Where: `queue:NAME` (a pull queue), `endpoint:NAME` (a registered endpoint) or
    /// `url:https://...` (an ad-hoc URL).
    destination: String,
    #[serde(flatten)]
    event: EventFields,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct PublishArgs {
    /// The topic (the event's type): every subscription that takes it gets a delivery.
    topic: String,
    #[serde(flatten)]
    event: EventFields,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct MessageArgs {
    /// The message's id (as Enqueue answered it, or a delivery id of a publish).
    id: String,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct DeadLetterArgs {
    /// Only this destination's: `queue:NAME`, `endpoint:NAME` or `url:URL`.
    #[serde(default)]
    destination: Option<String>,
    /// At most this many (default 50, at most 1,000).
    #[serde(default)]
    page_size: Option<u32>,
    /// The `nextPageToken` of the previous page.
    #[serde(default)]
    page_token: Option<String>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct SearchArgs {
    /// Only this destination's: `queue:NAME`, `endpoint:NAME` or `url:URL`.
    #[serde(default)]
    destination: Option<String>,
    /// Only this event type.
    #[serde(default)]
    event_type: Option<String>,
    /// A publish's event id (or a message's own id).
    #[serde(default)]
    event_id: Option<String>,
    #[serde(default)]
    idempotency_key: Option<String>,
    /// Any of these states: pending, retrying, in_flight, dead, delivered (payload kept),
    /// expired (delivered, payload past retention).
    #[serde(default)]
    states: Vec<String>,
    /// The last attempt's HTTP status.
    #[serde(default)]
    last_status: Option<u32>,
    /// Created at or after this time (Unix ms).
    #[serde(default)]
    created_after_unix_ms: Option<u64>,
    /// Values of the search keys the event type declares: JSON pointer -> value as text.
    #[serde(default)]
    payload: std::collections::HashMap<String, String>,
    /// At most this many (default 50, at most 1,000).
    #[serde(default)]
    page_size: Option<u32>,
    /// The `nextPageToken` of the previous page.
    #[serde(default)]
    page_token: Option<String>,
    /// Also say how many match in all (`total`; `total_exact` false when estimated).
    #[serde(default)]
    count: Option<bool>,
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct AnalyzeArgs {
    /// Only this destination's: `queue:NAME`, `endpoint:NAME` or `url:URL`.
    #[serde(default)]
    destination: Option<String>,
    /// Only dead letters of the last this many seconds (default: hookd's window).
    #[serde(default)]
    window_secs: Option<u64>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(crate) struct ReplayArgs {
    /// These dead letters (ids), or else those of `destination`.
    #[serde(default)]
    ids: Vec<String>,
    /// Replay this destination's dead letters: `queue:NAME`, `endpoint:NAME`, `url:URL`.
    #[serde(default)]
    destination: Option<String>,
    /// At most this many.
    #[serde(default)]
    limit: Option<u32>,
    /// Only say what would be replayed. Defaults to true: call once to see, then again
    /// with dry_run false to replay.
    #[serde(default = "yes")]
    dry_run: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
pub(crate) struct StatsArgs {
    /// Destinations per page (default hookd's).
    #[serde(default)]
    page_size: Option<u32>,
    #[serde(default)]
    page_token: Option<String>,
}

/// A tool error the agent reads.
fn refused(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// A tool's arguments refused, as the gRPC API would name it.
fn invalid_argument(why: String) -> CallToolResult {
    refused(format!("INVALID_ARGUMENT: {why}"))
}

#[tool_router]
impl HookdMcp {
    pub(crate) fn new(backend: Backend) -> Self {
        Self {
            backend,
            tool_router: Self::tool_router(),
        }
    }

    fn client(&self, ctx: &RequestContext<RoleServer>) -> Client {
        match &self.backend {
            Backend::Remote(api) => Client::Remote(api.clone()),
            Backend::Local(stack) => {
                let parts = ctx.extensions.get::<http::request::Parts>();
                let channel = InProcess {
                    stack: stack.clone(),
                    authorization: parts
                        .and_then(|p| p.headers.get(http::header::AUTHORIZATION))
                        .cloned(),
                    tenant: parts
                        .and_then(|p| p.headers.get(crate::api::tenants::TENANT_HEADER))
                        .cloned(),
                    conn: parts
                        .and_then(|p| p.extensions.get::<crate::listen::ConnInfo>().cloned()),
                };
                Client::Local(HookdClient::new(channel))
            }
        }
    }

    /// The RPC's answer as the JSON API writes it (`data` beside a JSON payload), or its
    /// refusal as a tool error.
    fn answer<M: Message + prost::Name>(
        &self,
        answer: Result<tonic::Response<M>, tonic::Status>,
    ) -> Result<CallToolResult, ErrorData> {
        let message = match answer {
            Ok(m) => m.into_inner(),
            Err(status) => {
                return Ok(refused(format!(
                    "{}: {}",
                    crate::rest::code_name(status.code()),
                    status.message()
                )));
            }
        };
        let mut json = hookd_proto::json::message_json(&message)
            .map_err(|e| ErrorData::internal_error(e, None))?;
        crate::rest::json_data::decorate(&M::full_name(), &mut json);
        Ok(CallToolResult::success(vec![ContentBlock::text(
            json.to_string(),
        )]))
    }

    #[tool(
        description = "Enqueue an event for one destination: a pull queue, a registered endpoint (push delivery with retries) or a URL. Answered once the event is durable; the answer holds its id. Needs the enqueue scope."
    )]
    async fn enqueue_event(
        &self,
        Parameters(args): Parameters<EnqueueArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let request =
            match enqueue_destination(&args.destination).and_then(|d| args.event.request(d)) {
                Ok(r) => r,
                Err(why) => return Ok(invalid_argument(why)),
            };
        let answer = rpc!(self, ctx, enqueue, request);
        self.answer(answer)
    }

    #[tool(
        description = "Publish an event to a topic: every subscription whose event types and filter take it gets a delivery, all stored in one durable write. The answer says how many subscribers and their delivery ids. Needs the enqueue scope."
    )]
    async fn publish_event(
        &self,
        Parameters(args): Parameters<PublishArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let topic = pb::enqueue_request::Destination::Topic(args.topic);
        let request = match args.event.request(topic) {
            Ok(r) => r,
            Err(why) => return Ok(invalid_argument(why)),
        };
        let answer = rpc!(self, ctx, enqueue, request);
        self.answer(answer)
    }

    #[tool(
        description = "Read one message: its state, every delivery attempt (status, latency, error), when it is next due, and its payload (as `data` when it is JSON). Needs the read scope."
    )]
    async fn get_message(
        &self,
        Parameters(args): Parameters<MessageArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = rpc!(
            self,
            ctx,
            get_message,
            pb::GetMessageRequest { id: args.id }
        );
        self.answer(answer)
    }

    #[tool(
        description = "Search retained messages (live, dead letters, and delivered ones while kept), newest first: by destination, event type, event id, idempotency key, states, last HTTP status, creation time and the payload values an event type declares as search keys. Each hit has its state, attempts, last status and the receiver's last answer. Needs the read scope."
    )]
    async fn search_messages(
        &self,
        Parameters(args): Parameters<SearchArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let destination = match filter_destination(args.destination.as_deref()) {
            Ok(d) => d,
            Err(why) => return Ok(invalid_argument(why)),
        };
        let mut states = Vec::new();
        for (i, s) in args.states.iter().enumerate() {
            let state = match s.as_str() {
                "pending" => pb::MessageState::Pending,
                "retrying" => pb::MessageState::AwaitingRetry,
                "in_flight" => pb::MessageState::InFlight,
                "dead" => pb::MessageState::DeadLetter,
                "delivered" => pb::MessageState::Delivered,
                "expired" => pb::MessageState::Expired,
                _ => {
                    return Ok(invalid_argument(format!(
                        "states[{i}]: {s:?} is not pending, retrying, in_flight, dead, delivered or expired"
                    )));
                }
            };
            states.push(state as i32);
        }
        let request = pb::SearchMessagesRequest {
            destination,
            event_type: args.event_type.unwrap_or_default(),
            event_id: args.event_id.unwrap_or_default(),
            idempotency_key: args.idempotency_key.unwrap_or_default(),
            states,
            last_status: args.last_status.unwrap_or(0),
            created_after_unix_ms: args.created_after_unix_ms.unwrap_or(0),
            created_before_unix_ms: 0,
            payload: args.payload,
            page_size: args.page_size.unwrap_or(50).min(1_000),
            page_token: args.page_token.unwrap_or_default(),
            count: args.count.unwrap_or(false),
        };
        let answer = rpc!(self, ctx, search_messages, request);
        self.answer(answer)
    }

    #[tool(
        description = "List dead letters (events that used up their attempts), newest first, with their last error. Needs the read scope."
    )]
    async fn list_dead_letters(
        &self,
        Parameters(args): Parameters<DeadLetterArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let destination = match filter_destination(args.destination.as_deref()) {
            Ok(d) => d,
            Err(why) => return Ok(invalid_argument(why)),
        };
        let request = pb::ListDeadLettersRequest {
            destination,
            page_size: args.page_size.unwrap_or(50).min(1_000),
            page_token: args.page_token.unwrap_or_default(),
        };
        let answer = rpc!(self, ctx, list_dead_letters, request);
        self.answer(answer)
    }

    #[tool(
        description = "Analyse dead letters: per destination, how many, their commonest HTTP statuses and errors, and when they started. Use it before replaying. Needs the read scope."
    )]
    async fn analyze_dead_letters(
        &self,
        Parameters(args): Parameters<AnalyzeArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let destination = match filter_destination(args.destination.as_deref()) {
            Ok(d) => d,
            Err(why) => return Ok(invalid_argument(why)),
        };
        let request = pb::AnalyzeDeadLettersRequest {
            destination,
            window_secs: args.window_secs.unwrap_or(0),
        };
        let answer = rpc!(self, ctx, analyze_dead_letters, request);
        self.answer(answer)
    }

    #[tool(
        description = "Replay dead letters (by ids, or a destination's) as new deliveries. dry_run defaults to true: the first call only says what would be replayed; call again with dry_run false to replay. Needs the admin scope."
    )]
    async fn replay_dead_letters(
        &self,
        Parameters(args): Parameters<ReplayArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let destination = match filter_destination(args.destination.as_deref()) {
            Ok(d) => d,
            Err(why) => return Ok(invalid_argument(why)),
        };
        if args.ids.is_empty() && destination.is_none() {
            return Ok(refused(
                "INVALID_ARGUMENT: ids or destination: say which dead letters to replay",
            ));
        }
        let request = pb::ReplayDeadLettersRequest {
            ids: args.ids,
            destination,
            limit: args.limit.unwrap_or(0),
            dry_run: args.dry_run,
            ..Default::default()
        };
        let answer = rpc!(self, ctx, replay_dead_letters, request);
        self.answer(answer)
    }

    #[tool(
        description = "List the registered endpoints: URL, state (active, paused, breaker open), retry policy. Needs the read scope."
    )]
    async fn list_endpoints(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = rpc!(self, ctx, list_endpoints, pb::ListEndpointsRequest {});
        self.answer(answer)
    }

    #[tool(
        description = "List the subscriptions: which topics (event types) and filters send a published event to which endpoint or queue. Needs the read scope."
    )]
    async fn list_subscriptions(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = rpc!(
            self,
            ctx,
            list_subscriptions,
            pb::ListSubscriptionsRequest {}
        );
        self.answer(answer)
    }

    #[tool(
        description = "List the event types hookd knows: declared ones (with their JSON Schemas) and those seen. Needs the read scope."
    )]
    async fn list_event_types(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let answer = rpc!(
            self,
            ctx,
            list_event_types,
            pb::ListEventTypesRequest {
                page_size: 1_000,
                ..Default::default()
            }
        );
        self.answer(answer)
    }

    #[tool(
        description = "Read hookd's stats: per destination and in all, messages pending, in flight, awaiting retry, dead; delivery latencies; backpressure level; FIFO lanes blocked. Needs the read scope."
    )]
    async fn get_stats(
        &self,
        Parameters(args): Parameters<StatsArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let request = pb::StatsRequest {
            page_size: args.page_size.unwrap_or(0),
            page_token: args.page_token.unwrap_or_default(),
        };
        let answer = rpc!(self, ctx, stats, request);
        self.answer(answer)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for HookdMcp {
    fn get_info(&self) -> ServerConfig {
        let mut config = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        config.server_info = Implementation::new("hookd", env!("CARGO_PKG_VERSION"));
        config.instructions = Some(
            "hookd is a durable webhook delivery queue. Publish or enqueue events (answered once durable), read a message and its delivery attempts, analyse and replay dead letters (replay is a dry run unless dry_run is false), and read endpoints, subscriptions, event types and stats. Each tool needs its gRPC call's scope on your token."
                .into(),
        );
        config
    }
}

/// `/mcp` on the HTTP listener: MCP over streamable HTTP, stateless (no session to keep
/// per client, so any hookd of a tier can answer any request). `max_body_bytes` bounds a
/// request's body; `check_host` (no `[auth]`) answers only a `Host` naming no domain.
pub(crate) fn router(stack: GrpcStack, check_host: bool, max_body_bytes: usize) -> Router {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::never::NeverSessionManager,
    };
    let service = StreamableHttpService::new(
        move || Ok(HookdMcp::new(Backend::Local(stack.clone()))),
        std::sync::Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            // hookd checks the Host itself (below), as for the JSON API.
            .disable_allowed_hosts(),
    );
    let handle = move |request: axum::extract::Request| {
        let mut service = service.clone();
        async move {
            if check_host && !crate::http::host_names_no_domain(request.headers()) {
                return (
                    http::StatusCode::FORBIDDEN,
                    "without [auth], /mcp answers only a Host that is an IP address or localhost\n",
                )
                    .into_response();
            }
            let request = request.map(|body| http_body_util::Limited::new(body, max_body_bytes));
            match service.call(request).await {
                Ok(answer) => answer.into_response(),
                Err(never) => match never {},
            }
        }
    };
    Router::new().route("/mcp", axum::routing::any(handle))
}

/// `hookd mcp`: MCP over standard input and output, as a client of the hookd at `api`.
/// Ends when the MCP client closes standard input.
pub(crate) async fn serve_stdio(api: hookd_ctl::Api) -> Result<(), String> {
    use rmcp::ServiceExt;
    let server = HookdMcp::new(Backend::Remote(api));
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| format!("the MCP handshake failed: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("the MCP session ended: {e}"))?;
    Ok(())
}
