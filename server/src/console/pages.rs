//! The console's pages and actions. Reads and writes go through the gRPC service in
//! process ([`super::call`]); the few figures the API does not carry (a destination's
//! latency by sub-window, a page of dead letters under a filter, a message's payload) are
//! read from the engine or the store directly.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use hookd_proto::v1::{self as pb, hookd_server::Hookd};
use maud::{Markup, html};
use serde::Deserialize;

use super::session::{self, LOGIN_COOKIE, Session};
use super::view::{self, Nav, button, csrf, figure, page};
use super::{Console, call, chart, see_other};
use crate::auth::{Access, Denied, Scope};

/// Rows per page of the long lists.
const PAGE: usize = 50;
/// Rows of dead letters one page looks at under a filter before it stops and offers the
/// next page (so a filter that matches little never reads all 100,000 at once).
const MAX_DEAD_SCAN_PER_PAGE: usize = 5_000;
/// A payload is shown up to this size; the rest is cut (the size is always shown).
const PAYLOAD_SHOWN: usize = 64 * 1024;
/// Alerts the overview lists (critical first); the rest are counted.
const MAX_ALERTS_SHOWN: usize = 50;
/// Destinations the dead-letter analysis lists (most dead letters first).
const MAX_ANALYSES_SHOWN: usize = 20;
/// How long an analysis is reused for the same filter (replays and purges clear it).
const ANALYSIS_TTL_MS: u64 = 15_000;
/// An attempt's error is shown up to this many characters in lists.
const ERROR_EXCERPT: usize = 160;

type Shared = State<Arc<Console>>;

/// A page that could not be made: its status and why, shown escaped.
#[derive(Debug)]
pub struct Failure {
    status: StatusCode,
    message: String,
}

impl Failure {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Self {
        use tonic::Code;
        let status = match s.code() {
            Code::InvalidArgument | Code::OutOfRange => StatusCode::BAD_REQUEST,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted => StatusCode::CONFLICT,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, s.message().to_owned())
    }
}

impl From<crate::error::ApiError> for Failure {
    fn from(e: crate::error::ApiError) -> Self {
        tonic::Status::from(e).into()
    }
}

impl From<hookd_engine::Refusal> for Failure {
    fn from(r: hookd_engine::Refusal) -> Self {
        crate::error::ApiError::refused(r, "").into()
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let title = match self.status {
            StatusCode::NOT_FOUND => "Not found",
            StatusCode::BAD_REQUEST => "Not accepted",
            StatusCode::CONFLICT => "Conflict",
            _ => "Failed",
        };
        let body = page(
            title,
            Nav::None,
            None,
            "",
            html! {
                p.error { (self.message) }
                p { a href="/ui" { "Back to the overview" } }
            },
        );
        (self.status, Html(body.into_string())).into_response()
    }
}

type Page = Result<Response, Failure>;

fn html_page(markup: Markup) -> Page {
    Ok(Html(markup.into_string()).into_response())
}

/// A notice carried to the next page by a redirect (`?notice=`), shown escaped.
#[derive(Debug, Default, Deserialize)]
pub struct Notice {
    #[serde(default)]
    notice: String,
}

/// Percent-encodes a path segment (an endpoint's name, a message id).
fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn query(pairs: &[(&str, &str)]) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if !v.is_empty() {
            q.append_pair(k, v);
        }
    }
    q.finish()
}

fn with_notice(path: &str, notice: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{}", query(&[("notice", notice)]))
}

fn level_name(level: i32) -> &'static str {
    match pb::BackpressureLevel::try_from(level) {
        Ok(pb::BackpressureLevel::Soft) => "soft",
        Ok(pb::BackpressureLevel::Hard) => "hard",
        _ => "ok",
    }
}

fn breaker_name(b: hookd_core::breaker::BreakerState) -> &'static str {
    match b {
        hookd_core::breaker::BreakerState::Closed => "closed",
        hookd_core::breaker::BreakerState::Open { .. } => "open",
        hookd_core::breaker::BreakerState::HalfOpen { .. } => "half-open",
    }
}

fn latency_cells(l: &hookd_core::stats::LatencySummary) -> Markup {
    html! {
        td.num { (view::millis(l.p50_ms)) }
        td.num { (view::millis(l.p95_ms)) }
        td.num { (view::millis(l.p99_ms)) }
    }
}

// ---------------------------------------------------------------------------------------
// Login and logout.

#[derive(Debug, Default, Deserialize)]
pub struct LoginQuery {
    #[serde(default)]
    next: String,
}

/// Where to go after login: a console path, never another site.
fn safe_next(next: &str) -> &str {
    if next.starts_with("/ui") && !next.starts_with("//") && !next.contains('\\') {
        next
    } else {
        "/ui"
    }
}

pub async fn login_form(State(c): Shared, Query(q): Query<LoginQuery>) -> Response {
    login_page(&c, &q.next, StatusCode::OK, "")
}

fn login_page(c: &Console, next: &str, status: StatusCode, error: &str) -> Response {
    let cookie = crate::auth::random_token();
    let nonce = session::login_nonce(&c.login_key, &cookie);
    let body = page(
        "Log in",
        Nav::None,
        None,
        "",
        html! {
            @if !c.auth.enabled() {
                p { "No credential is configured, so the console is open on loopback: "
                    a href="/ui" { "go to the overview" } "." }
            }
            @if !error.is_empty() { p.error role="alert" { (error) } }
            form.login method="post" action="/ui/login" {
                input type="hidden" name="nonce" value=(nonce);
                input type="hidden" name="next" value=(safe_next(next));
                label { "Admin token" input type="password" name="token" autocomplete="current-password" autofocus required; }
                button type="submit" { "Log in" }
            }
            p.hint { "A token with the admin scope (" code { "hookd token new" } ", then list its hash under "
                code { "[[auth.tokens]]" } " with " code { "scopes = [\"admin\"]" } ")." }
        },
    );
    let mut response = (status, Html(body.into_string())).into_response();
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(LOGIN_COOKIE, &cookie, c.secure, 600))
    {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    next: String,
}

pub async fn login(
    State(c): Shared,
    conn: Option<axum::Extension<crate::listen::ConnInfo>>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let peer = conn.map(|axum::Extension(c)| c.remote.ip());
    if !c.logins.allowed(peer) {
        tracing::warn!(?peer, "console login refused: too many failed logins");
        return login_page(
            &c,
            &f.next,
            StatusCode::TOO_MANY_REQUESTS,
            "Too many failed logins; wait a minute.",
        );
    }
    // The form's nonce must be hookd's HMAC of the login cookie: a cookie set by another
    // service on this host cannot be paired with a form without hookd's key.
    let expected = session::cookie(&headers, LOGIN_COOKIE)
        .filter(|v| !v.is_empty())
        .map(|v| session::login_nonce(&c.login_key, v))
        .unwrap_or_default();
    if !session::same_token(&f.nonce, &expected) {
        return login_page(
            &c,
            &f.next,
            StatusCode::FORBIDDEN,
            "The login form expired or did not come from this page; try again.",
        );
    }
    let bearer = format!("Bearer {}", f.token.trim());
    let caller = match c
        .auth
        .check(Access::Scope(Scope::Admin), Some(bearer.as_bytes()), None)
    {
        Ok(caller) => caller,
        Err(Denied::PermissionDenied { caller, .. }) => {
            c.logins.failed(peer);
            tracing::warn!(caller, "console login refused: no admin scope");
            return login_page(
                &c,
                &f.next,
                StatusCode::FORBIDDEN,
                &format!("The token `{caller}` lacks the admin scope the console needs."),
            );
        }
        Err(Denied::RateLimited { .. }) => {
            return login_page(
                &c,
                &f.next,
                StatusCode::TOO_MANY_REQUESTS,
                "Too many attempts; wait a moment.",
            );
        }
        Err(Denied::Unauthenticated) => {
            c.logins.failed(peer);
            tracing::warn!(?peer, "console login refused: unknown token");
            return login_page(
                &c,
                &f.next,
                StatusCode::UNAUTHORIZED,
                "That token is not valid.",
            );
        }
    };
    tracing::info!(caller = %caller.name, "console login");
    let (id, _) = c.sessions.create(caller);
    let mut response = see_other(safe_next(&f.next));
    for cookie in [
        session::set_cookie(session::COOKIE, &id, c.secure, session::MAX_AGE_MS / 1_000),
        session::set_cookie(LOGIN_COOKIE, "", c.secure, 0),
    ] {
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

pub async fn logout(State(c): Shared, headers: HeaderMap) -> Response {
    if let Some(id) = session::cookie(&headers, session::COOKIE) {
        c.sessions.remove(id);
    }
    let mut response = see_other("/ui/login");
    if let Ok(v) = HeaderValue::from_str(&session::set_cookie(session::COOKIE, "", c.secure, 0)) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

// ---------------------------------------------------------------------------------------
// Overview.

pub async fn overview(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<Notice>,
) -> Page {
    let stats = c
        .api
        .stats(call(
            &s,
            pb::StatsRequest {
                page_size: 1,
                page_token: String::new(),
            },
        ))
        .await?
        .into_inner();
    let gauges = c.engine.gauges(10).await?;
    let total = stats.total.unwrap_or_default();
    let storage = stats.storage.unwrap_or_default();
    let latency = total.latency_last_hour.unwrap_or_default();
    let latency_day = total.latency_last_24h.unwrap_or_default();
    let finished = total.delivered_last_hour + total.failed_last_hour;
    let success = if finished == 0 {
        "-".to_owned()
    } else {
        view::percent(total.delivered_last_hour as f64 / finished as f64)
    };
    let live = total.pending + total.awaiting_retry + total.in_flight;
    let mut depths: Vec<(String, u64)> = gauges
        .destinations
        .iter()
        .map(|d| {
            (
                d.destination.clone(),
                d.pending + d.awaiting_retry + d.in_flight,
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    depths.sort_by_key(|d| std::cmp::Reverse(d.1));
    let commit = storage.commit_latency_last_hour.unwrap_or_default();
    // Critical first, then the oldest; a page shows the first MAX_ALERTS_SHOWN.
    let mut alerts = stats.alerts;
    alerts.sort_by_key(|a| (a.level != "critical", a.since_unix_ms));
    let more_alerts = alerts.len().saturating_sub(MAX_ALERTS_SHOWN);
    alerts.truncate(MAX_ALERTS_SHOWN);
    html_page(page(
        "Overview",
        Nav::Overview,
        Some(&s),
        &n.notice,
        html! {
            section.cards {
                (figure("live messages", live))
                (figure("pending", total.pending))
                (figure("awaiting retry", total.awaiting_retry))
                (figure("in flight", total.in_flight))
                (figure("dead letters", total.dead_letter))
                (figure("enqueued", view::rate(total.enqueue_rate_per_s)))
                (figure("completed", view::rate(total.completion_rate_per_s)))
                (figure("success, last hour", success))
                (figure("oldest pending", view::duration(total.oldest_pending_age_ms)))
                (figure("backpressure", level_name(total.backpressure)))
            }
            section {
                h2 { "Delivery" }
                table {
                    thead { tr { th { "window" } th { "delivered" } th { "failed" } th { "p50" } th { "p95" } th { "p99" } } }
                    tbody {
                        tr { td { "last hour" } td.num { (total.delivered_last_hour) } td.num { (total.failed_last_hour) }
                             (latency_cells(&crate::api::convert::summary(&latency))) }
                        tr { td { "last 24 h" } td.num { "" } td.num { "" } (latency_cells(&crate::api::convert::summary(&latency_day))) }
                    }
                }
                p.hint { "Latency is enqueue to completion; uptime " (view::duration(stats.uptime_ms)) "." }
            }
            section {
                h2 { "Deepest destinations" }
                (chart::bars(&depths, "live messages by destination (the ten deepest)"))
            }
            section {
                h2 { "Alerts" }
                @if alerts.is_empty() {
                    p { "No alert is raised." }
                } @else {
                    table.alerts {
                        thead { tr { th { "alert" } th { "destination" } th { "level" } th { "since" }
                                     th { "value" } th { "warning at" } th { "critical at" } } }
                        tbody {
                            @for a in &alerts {
                                tr class=(format!("level-{}", a.level)) {
                                    td { (a.alert) }
                                    td { @if a.destination.is_empty() { "all" } @else { (a.destination) } }
                                    td { span.badge { (a.level) } }
                                    td { (view::time(a.since_unix_ms)) }
                                    td.num { (format!("{:.3}", a.value)) }
                                    td.num { (format!("{:.3}", a.warning)) }
                                    td.num { (format!("{:.3}", a.critical)) }
                                }
                            }
                        }
                    }
                    @if more_alerts > 0 {
                        p.hint { "and " (more_alerts) " more (" code { "hookd stats --json" } " lists them all)." }
                    }
                }
            }
            section {
                h2 { "Storage" }
                table.kv {
                    tr { th { "commits" } td { (view::rate(storage.commits_per_s)) ", " (format!("{:.1}", storage.requests_per_commit)) " requests per commit" } }
                    tr { th { "commit latency (last hour)" } td { "p50 " (view::millis(commit.p50_ms)) ", p99 " (view::millis(commit.p99_ms)) } }
                    tr { th { "write queue" } td { (view::bytes(storage.queued_write_bytes)) } }
                    tr { th { "write-ahead log" } td { (view::bytes(storage.log_bytes)) ", " (view::bytes(storage.log_since_checkpoint_bytes)) " since the last checkpoint (" (view::duration(storage.checkpoint_age_ms)) " ago, took " (storage.last_checkpoint_ms) " ms)" } }
                    tr { th { "last start" } td { "replayed " (view::bytes(storage.replayed_bytes)) " in " (storage.replay_ms) " ms" } }
                    tr { th { "disk" } td { (view::bytes(storage.disk_available_bytes)) " available; new events are refused below " (view::bytes(storage.disk_reserve_bytes)) } }
                    tr { th { "destinations in memory" } td { (storage.destinations) } }
                }
            }
        },
    ))
}

// ---------------------------------------------------------------------------------------
// Endpoints.

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// The last name (or key) of the previous page.
    #[serde(default)]
    after: String,
    /// Only names containing this.
    #[serde(default)]
    q: String,
    #[serde(default)]
    notice: String,
}

fn endpoint_key(name: &str) -> String {
    hookd_core::destination::Destination::Endpoint(name.to_owned()).key()
}

fn state_cell(e: &pb::Endpoint) -> Markup {
    html! {
        @if e.disabled {
            span.badge.bad { "disabled" } " " (e.disabled_reason)
        } @else if e.paused {
            span.badge.warn { "paused" } " " (e.paused_reason)
        } @else {
            span.badge.good { "active" }
        }
    }
}

fn breaker_cell(p: Option<&hookd_core::stats::PushSnapshot>) -> Markup {
    let Some(p) = p else { return html! { "-" } };
    html! {
        span class=(format!("badge breaker-{}", breaker_name(p.breaker))) { (breaker_name(p.breaker)) }
        @if let hookd_core::breaker::BreakerState::Open { until_ms } = p.breaker {
            " until " (view::time(until_ms)) " (cooldown " (view::duration(p.breaker_cooldown_ms)) ")"
        }
        @if let hookd_core::breaker::BreakerState::HalfOpen { .. } = p.breaker {
            " probing (cooldown " (view::duration(p.breaker_cooldown_ms)) ")"
        }
        @if p.consecutive_failures > 0 { " · " (p.consecutive_failures) " failures in a row" }
    }
}

pub async fn endpoints(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(q): Query<ListQuery>,
) -> Page {
    let all = c
        .api
        .list_endpoints(call(&s, pb::ListEndpointsRequest {}))
        .await?
        .into_inner()
        .endpoints;
    let matching: Vec<&pb::Endpoint> = all
        .iter()
        .filter(|e| q.q.is_empty() || e.name.contains(q.q.as_str()))
        .collect();
    let start =
        matching.partition_point(|e| !q.after.is_empty() && e.name.as_str() <= q.after.as_str());
    let shown = &matching[start..(start + PAGE).min(matching.len())];
    let next = (start + PAGE < matching.len())
        .then(|| shown.last().map(|e| e.name.clone()))
        .flatten();
    let details = c
        .engine
        .detail(shown.iter().map(|e| endpoint_key(&e.name)).collect(), false)
        .await?;
    html_page(page(
        "Endpoints",
        Nav::Endpoints,
        Some(&s),
        &q.notice,
        html! {
            form.filters method="get" action="/ui/endpoints" {
                label { "Name contains " input type="search" name="q" value=(q.q); }
                button type="submit" { "Filter" }
                " " a.button href="/ui/new-endpoint" { "New endpoint" }
            }
            p.hint { (matching.len()) " of " (all.len()) " endpoints; " (shown.len()) " on this page." }
            table.list {
                thead { tr {
                    th { "name" } th { "url" } th { "state" } th { "breaker" } th { "in flight" }
                    th { "rate limit" } th { "success (1 h)" } th { "p50" } th { "p95" } th { "p99" }
                    th { "pending" } th { "retrying" } th { "dead" } th { "" }
                } }
                tbody {
                    @for (e, d) in shown.iter().zip(details.iter()) {
                        @let stats = d.as_ref().map(|d| &d.stats);
                        @let push = stats.and_then(|s| s.push.as_ref());
                        tr {
                            td { a href=(format!("/ui/endpoints/{}", segment(&e.name))) { (e.name) } }
                            td.url { (view::excerpt(&e.url, 60)) }
                            td { (state_cell(e)) }
                            td { (breaker_cell(push)) }
                            td { @if let Some(p) = push {
                                meter min="0" max=(p.max_in_flight.max(1)) value=(p.in_flight) {}
                                " " (p.in_flight) " / " (p.max_in_flight)
                            } }
                            td.num { @if e.rate_limit_per_s > 0.0 { (view::rate(e.rate_limit_per_s)) } @else { "none" } }
                            td.num { @if let Some(p) = push {
                                @if p.attempts_last_hour == 0 { "-" } @else {
                                    (view::percent(p.success_rate_last_hour)) " of " (p.attempts_last_hour)
                                }
                            } }
                            @if let Some(p) = push { (latency_cells(&p.attempt_latency_last_hour)) } @else { td {} td {} td {} }
                            td.num { (stats.map_or(0, |s| s.pending)) }
                            td.num { (stats.map_or(0, |s| s.awaiting_retry)) }
                            td.num { @let dead = stats.map_or(0, |s| s.dead_letter);
                                @if dead > 0 { a href=(format!("/ui/dead-letters?{}", query(&[("destination", &endpoint_key(&e.name))]))) { (dead) } } @else { "0" } }
                            td { (pause_or_resume(&s, e, "list")) }
                        }
                    }
                }
            }
            @if let Some(next) = next {
                p { a.button href=(format!("/ui/endpoints?{}", query(&[("after", &next), ("q", &q.q)]))) { "Next page" } }
            }
        },
    ))
}

fn pause_or_resume(s: &Session, e: &pb::Endpoint, back: &str) -> Markup {
    let base = format!("/ui/endpoints/{}", segment(&e.name));
    if e.paused {
        button(s, &format!("{base}/resume"), "Resume", &[("back", back)])
    } else {
        button(s, &format!("{base}/pause"), "Pause", &[("back", back)])
    }
}

/// The endpoint as GetEndpoint answers it for this session (NOT_FOUND becomes the page's
/// 404); with `reveal` its secrets in clear, for a save that keeps them, never to render.
async fn stored_endpoint(
    c: &Console,
    s: &Session,
    name: &str,
    reveal: bool,
) -> Result<pb::Endpoint, Failure> {
    Ok(c.api
        .get_endpoint(call(
            s,
            pb::GetEndpointRequest {
                name: name.to_owned(),
                reveal_secrets: reveal,
            },
        ))
        .await?
        .into_inner()
        .endpoint
        .unwrap_or_default())
}

pub async fn endpoint(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Query(n): Query<Notice>,
) -> Page {
    let e = stored_endpoint(&c, &s, &name, false).await?;
    let key = endpoint_key(&name);
    let detail = c
        .engine
        .detail(vec![key.clone()], true)
        .await?
        .pop()
        .flatten();
    let stats = detail.as_ref().map(|d| &d.stats);
    let push = stats.and_then(|s| s.push.as_ref());
    let series = detail
        .as_ref()
        .and_then(|d| d.series.clone())
        .unwrap_or_default();
    let now = c.clock.now_ms();
    let base = format!("/ui/endpoints/{}", segment(&name));
    html_page(page(
        &format!("Endpoint {name}"),
        Nav::Endpoints,
        Some(&s),
        &n.notice,
        html! {
            section.actions {
                (state_cell(&e))
                " "
                @if e.paused {
                    (button(&s, &format!("{base}/resume"), "Resume", &[("back", "detail")]))
                } @else {
                    form.inline method="post" action=(format!("{base}/pause")) {
                        (csrf(&s))
                        input type="hidden" name="back" value="detail";
                        input type="text" name="reason" placeholder="reason (optional)" maxlength="1024";
                        button type="submit" { "Pause" }
                    }
                }
                " " a.button href=(format!("{base}/edit")) { "Edit" }
                " " a.button href=(format!("/ui/dead-letters?{}", query(&[("destination", &key)]))) { "Dead letters" }
            }
            section.cards {
                (figure("pending", stats.map_or(0, |s| s.pending)))
                (figure("awaiting retry", stats.map_or(0, |s| s.awaiting_retry)))
                (figure("in flight", push.map_or_else(|| "-".to_owned(), |p| format!("{} / {}", p.in_flight, p.max_in_flight))))
                (figure("dead letters", stats.map_or(0, |s| s.dead_letter)))
                (figure("success, last hour", push.map_or_else(|| "-".to_owned(), |p| if p.attempts_last_hour == 0 { "-".to_owned() } else { view::percent(p.success_rate_last_hour) })))
                (figure("attempts, last hour", push.map_or(0, |p| p.attempts_last_hour)))
                (figure("backpressure", stats.map_or("ok", |s| s.backpressure.as_str())))
            }
            section {
                h2 { "Delivery health" }
                table.kv {
                    tr { th { "breaker" } td { (breaker_cell(push))
                        @if let Some(p) = push { @if p.breaker_openings > 0 {
                            " · opened " (p.breaker_openings) " times"
                        } } } }
                    @if let Some(until) = push.and_then(|p| p.paused_until_ms).filter(|u| *u > now) {
                        tr { th { "Retry-After" } td { "nothing is sent for " (view::duration(until - now)) } }
                    }
                    tr { th { "rate limit" } td { @if e.rate_limit_per_s > 0.0 { (view::rate(e.rate_limit_per_s)) ", burst " (e.rate_limit_burst) } @else { "none" } } }
                    tr { th { "slow" } td { @if push.is_some_and(|p| p.slow) { "yes: p95 over the slow threshold" } @else { "no" } } }
                }
                table {
                    thead { tr { th { "attempt latency" } th { "attempts" } th { "p50" } th { "p95" } th { "p99" } } }
                    tbody {
                        @if let Some(p) = push {
                            tr { td { "last hour" } td.num { (p.attempt_latency_last_hour.count) } (latency_cells(&p.attempt_latency_last_hour)) }
                            tr { td { "last 24 h" } td.num { (p.attempt_latency_last_24h.count) } (latency_cells(&p.attempt_latency_last_24h)) }
                        }
                    }
                }
                div.charts {
                    (chart::latency(&series.hour, "attempt latency, last hour", "x 5 min"))
                    (chart::latency(&series.day, "attempt latency, last 24 h", "x 4 h"))
                }
            }
            section {
                h2 { "Settings" }
                table.kv {
                    tr { th { "url" } td.url { (e.url) } }
                    tr { th { "description" } td { (e.description) } }
                    tr { th { "attempts" } td { (or_default(e.max_attempts.into(), "server default")) } }
                    tr { th { "backoff" } td { "base " (ms_or_default(e.retry_base_ms)) ", cap " (ms_or_default(e.retry_cap_ms)) } }
                    tr { th { "timeouts" } td { "connect " (ms_or_default(e.connect_timeout_ms)) ", attempt " (ms_or_default(e.timeout_ms)) } }
                    tr { th { "max in flight" } td { (or_default(e.max_in_flight.into(), "server default")) } }
                    tr { th { "signing secrets" } td {
                        @if e.secret_summaries.is_empty() { "none (deliveries are not signed)" }
                        @for (i, sec) in e.secret_summaries.iter().enumerate() {
                            @if i > 0 { ", " }
                            code { (sec.fingerprint) }
                        }
                    } }
                    tr { th { "created" } td { (view::time(e.created_unix_ms)) } }
                    tr { th { "updated" } td { (view::time(e.updated_unix_ms)) } }
                }
            }
        },
    ))
}

/// A per-endpoint duration, or the server's default when 0.
fn ms_or_default(ms: u64) -> String {
    if ms == 0 {
        "the server's default".to_owned()
    } else {
        view::duration(ms)
    }
}

fn or_default(v: u64, default: &str) -> String {
    if v == 0 {
        default.to_owned()
    } else {
        v.to_string()
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct PauseForm {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    back: String,
}

fn back_to(name: &str, back: &str) -> String {
    if back == "detail" {
        format!("/ui/endpoints/{}", segment(name))
    } else {
        "/ui/endpoints".to_owned()
    }
}

pub async fn pause(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<PauseForm>,
) -> Page {
    c.api
        .pause_endpoint(call(
            &s,
            pb::PauseEndpointRequest {
                name: name.clone(),
                reason: f.reason.trim().to_owned(),
            },
        ))
        .await?;
    Ok(see_other(&with_notice(
        &back_to(&name, &f.back),
        &format!("Paused {name}."),
    )))
}

pub async fn resume(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<PauseForm>,
) -> Page {
    c.api
        .resume_endpoint(call(&s, pb::ResumeEndpointRequest { name: name.clone() }))
        .await?;
    Ok(see_other(&with_notice(
        &back_to(&name, &f.back),
        &format!("Resumed {name}."),
    )))
}

/// The edit form's fields (all text, so a wrong number comes back with its field named).
#[derive(Debug, Default, Deserialize)]
pub struct EndpointForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    max_attempts: String,
    #[serde(default)]
    retry_base_ms: String,
    #[serde(default)]
    retry_cap_ms: String,
    #[serde(default)]
    connect_timeout_ms: String,
    #[serde(default)]
    timeout_ms: String,
    #[serde(default)]
    max_in_flight: String,
    #[serde(default)]
    rate_limit_per_s: String,
    #[serde(default)]
    rate_limit_burst: String,
    /// "on" when ticked.
    #[serde(default)]
    disabled: String,
    /// A signing secret to add (kept with the others: both sign while rotating).
    #[serde(default)]
    new_secret: String,
    /// Fingerprints of stored secrets to remove.
    #[serde(default)]
    remove_secret: Vec<String>,
    /// The endpoint's `updated_unix_ms` when the form was made: a save over a newer
    /// change is refused rather than overwriting it.
    #[serde(default)]
    updated: String,
}

impl EndpointForm {
    fn of(e: &pb::Endpoint) -> Self {
        let n = |v: u64| if v == 0 { String::new() } else { v.to_string() };
        Self {
            name: e.name.clone(),
            url: e.url.clone(),
            description: e.description.clone(),
            max_attempts: n(e.max_attempts.into()),
            retry_base_ms: n(e.retry_base_ms),
            retry_cap_ms: n(e.retry_cap_ms),
            connect_timeout_ms: n(e.connect_timeout_ms),
            timeout_ms: n(e.timeout_ms),
            max_in_flight: n(e.max_in_flight.into()),
            rate_limit_per_s: if e.rate_limit_per_s > 0.0 {
                e.rate_limit_per_s.to_string()
            } else {
                String::new()
            },
            rate_limit_burst: n(e.rate_limit_burst.into()),
            disabled: if e.disabled {
                "on".into()
            } else {
                String::new()
            },
            new_secret: String::new(),
            remove_secret: Vec::new(),
            updated: e.updated_unix_ms.to_string(),
        }
    }

    /// The form applied over `e` (its secrets in clear, which the form never shows).
    fn apply(&self, e: &mut pb::Endpoint) -> Result<(), Failure> {
        fn num<T: std::str::FromStr + Default>(v: &str, field: &str) -> Result<T, Failure> {
            let v = v.trim();
            if v.is_empty() {
                return Ok(T::default());
            }
            v.parse()
                .map_err(|_| Failure::bad(format!("{field}: {v:?} is not a whole number in range")))
        }
        e.url = self.url.trim().to_owned();
        e.description = self.description.trim().to_owned();
        e.max_attempts = num(&self.max_attempts, "max_attempts")?;
        e.retry_base_ms = num(&self.retry_base_ms, "retry_base_ms")?;
        e.retry_cap_ms = num(&self.retry_cap_ms, "retry_cap_ms")?;
        e.connect_timeout_ms = num(&self.connect_timeout_ms, "connect_timeout_ms")?;
        e.timeout_ms = num(&self.timeout_ms, "timeout_ms")?;
        e.max_in_flight = num(&self.max_in_flight, "max_in_flight")?;
        e.rate_limit_burst = num(&self.rate_limit_burst, "rate_limit_burst")?;
        let rate = self.rate_limit_per_s.trim();
        e.rate_limit_per_s = if rate.is_empty() {
            0.0
        } else {
            rate.parse()
                .map_err(|_| Failure::bad(format!("rate_limit_per_s: {rate:?} is not a number")))?
        };
        e.disabled = self.disabled == "on";
        if !self.remove_secret.is_empty() {
            e.secrets.retain(|clear| {
                let (_, fingerprint) = hookd_core::secrets::summary(clear);
                !self.remove_secret.contains(&fingerprint)
            });
        }
        let new = self.new_secret.trim();
        if !new.is_empty() {
            e.secrets.push(new.to_owned());
        }
        Ok(())
    }
}

fn endpoint_form(
    s: &Session,
    f: &EndpointForm,
    action: &str,
    creating: bool,
    secrets: &[pb::SecretSummary],
) -> Markup {
    let field = |label: &str, name: &str, value: &str, hint: &str| {
        html! {
            label { span { (label) } input type="text" name=(name) value=(value); small { (hint) } }
        }
    };
    html! {
        form.edit method="post" action=(action) {
            (csrf(s))
            input type="hidden" name="updated" value=(f.updated);
            @if creating {
                (field("name", "name", &f.name, "letters, digits, - _ . (the destination's name)"))
            }
            (field("url", "url", &f.url, "http(s) URL the events are POSTed to"))
            (field("description", "description", &f.description, ""))
            (field("max attempts", "max_attempts", &f.max_attempts, "empty: the server's default"))
            (field("retry base (ms)", "retry_base_ms", &f.retry_base_ms, "first backoff; empty: default"))
            (field("retry cap (ms)", "retry_cap_ms", &f.retry_cap_ms, "longest backoff; empty: default"))
            (field("connect timeout (ms)", "connect_timeout_ms", &f.connect_timeout_ms, "empty: default"))
            (field("attempt timeout (ms)", "timeout_ms", &f.timeout_ms, "whole attempt; empty: default"))
            (field("max in flight", "max_in_flight", &f.max_in_flight, "concurrent attempts; empty: default"))
            (field("rate limit (per s)", "rate_limit_per_s", &f.rate_limit_per_s, "empty: none"))
            (field("rate limit burst", "rate_limit_burst", &f.rate_limit_burst, "empty: default"))
            label.check { input type="checkbox" name="disabled" value="on" checked[f.disabled == "on"]; " disabled (untick to send again after a 410 Gone)" }
            fieldset {
                legend { "Signing secrets (never shown; fingerprints only)" }
                @for sec in secrets {
                    label.check { input type="checkbox" name="remove_secret" value=(sec.fingerprint); " remove " code { (sec.fingerprint) } }
                }
                label { span { "add a secret" } input type="password" name="new_secret" autocomplete="off"; small { "whsec_ + base64; keep the old one while receivers rotate" } }
            }
            button type="submit" { @if creating { "Create" } @else { "Save" } }
        }
    }
}

pub async fn new_endpoint_form(State(_c): Shared, Extension(s): Extension<Session>) -> Page {
    let form = EndpointForm::default();
    html_page(page(
        "New endpoint",
        Nav::Endpoints,
        Some(&s),
        "",
        endpoint_form(&s, &form, "/ui/new-endpoint", true, &[]),
    ))
}

pub async fn create_endpoint(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<EndpointForm>,
) -> Page {
    let mut e = pb::Endpoint {
        name: f.name.trim().to_owned(),
        ..Default::default()
    };
    let saved = match f.apply(&mut e) {
        Ok(()) => c
            .api
            .put_endpoint(call(&s, pb::PutEndpointRequest { endpoint: Some(e) }))
            .await
            .map_err(Failure::from),
        Err(failure) => Err(failure),
    };
    match saved {
        Ok(r) => {
            let name = r.into_inner().endpoint.map(|e| e.name).unwrap_or_default();
            let to = format!("/ui/endpoints/{}", segment(&name));
            Ok(see_other(&with_notice(&to, &format!("Created {name}."))))
        }
        Err(failure) => form_again(
            &s,
            "New endpoint",
            &f,
            "/ui/new-endpoint",
            true,
            &[],
            failure,
        ),
    }
}

fn form_again(
    s: &Session,
    title: &str,
    f: &EndpointForm,
    action: &str,
    creating: bool,
    secrets: &[pb::SecretSummary],
    failure: Failure,
) -> Page {
    let body = html! {
        p.error role="alert" { (failure.message) }
        (endpoint_form(s, f, action, creating, secrets))
    };
    Ok((
        failure.status,
        Html(page(title, Nav::Endpoints, Some(s), "", body).into_string()),
    )
        .into_response())
}

pub async fn edit_endpoint_form(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> Page {
    let e = stored_endpoint(&c, &s, &name, false).await?;
    let action = format!("/ui/endpoints/{}/edit", segment(&name));
    html_page(page(
        &format!("Edit {name}"),
        Nav::Endpoints,
        Some(&s),
        "",
        endpoint_form(
            &s,
            &EndpointForm::of(&e),
            &action,
            false,
            &e.secret_summaries,
        ),
    ))
}

pub async fn save_endpoint(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<EndpointForm>,
) -> Page {
    // The stored endpoint with its secrets in clear, so a save keeps them; they go back to
    // PutEndpoint (sealed again there) and are never rendered.
    let mut e = stored_endpoint(&c, &s, &name, true).await?;
    let summaries = e.secret_summaries.clone();
    let action = format!("/ui/endpoints/{}/edit", segment(&name));
    let title = format!("Edit {name}");
    if f.updated != e.updated_unix_ms.to_string() {
        let failure = Failure::new(
            StatusCode::CONFLICT,
            format!(
                "{name} was changed at {} since this form was opened; reload it to see the change",
                view::time(e.updated_unix_ms)
            ),
        );
        return form_again(
            &s,
            &title,
            &EndpointForm::of(&e),
            &action,
            false,
            &summaries,
            failure,
        );
    }
    if let Err(failure) = f.apply(&mut e) {
        return form_again(&s, &title, &f, &action, false, &summaries, failure);
    }
    match c
        .api
        .put_endpoint(call(&s, pb::PutEndpointRequest { endpoint: Some(e) }))
        .await
    {
        Ok(_) => {
            let to = format!("/ui/endpoints/{}", segment(&name));
            Ok(see_other(&with_notice(&to, &format!("Saved {name}."))))
        }
        Err(status) => form_again(&s, &title, &f, &action, false, &summaries, status.into()),
    }
}

// ---------------------------------------------------------------------------------------
// Destinations (endpoints, URL origins, queues).

pub async fn destinations(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(q): Query<ListQuery>,
) -> Page {
    let stats = c
        .api
        .stats(call(
            &s,
            pb::StatsRequest {
                page_size: PAGE as u32,
                page_token: q.after.clone(),
            },
        ))
        .await?
        .into_inner();
    html_page(page(
        "Destinations",
        Nav::Destinations,
        Some(&s),
        &q.notice,
        html! {
            p.hint { "Every destination hookd holds: endpoints, URL origins and pull queues, in key order." }
            table.list {
                thead { tr {
                    th { "destination" } th { "pending" } th { "retrying" } th { "in flight" } th { "dead" }
                    th { "waiting receives" } th { "enqueued" } th { "completed" } th { "oldest" }
                    th { "bytes" } th { "backpressure" } th { "p99 (1 h)" }
                } }
                tbody {
                    @for d in &stats.destinations {
                        tr {
                            td { @if let Some(name) = hookd_core::destination::Destination::endpoint_of_key(&d.destination) {
                                a href=(format!("/ui/endpoints/{}", segment(name))) { (d.destination) }
                            } @else { (d.destination) } }
                            td.num { (d.pending) } td.num { (d.awaiting_retry) } td.num { (d.in_flight) }
                            td.num { @if d.dead_letter > 0 {
                                a href=(format!("/ui/dead-letters?{}", query(&[("destination", &d.destination)]))) { (d.dead_letter) }
                            } @else { "0" } }
                            td.num { (d.waiting_receives) }
                            td.num { (view::rate(d.enqueue_rate_per_s)) }
                            td.num { (view::rate(d.completion_rate_per_s)) }
                            td.num { (view::duration(d.oldest_pending_age_ms)) }
                            td.num { (view::bytes(d.live_bytes)) }
                            td { (level_name(d.backpressure)) }
                            td.num { (view::millis(d.latency_last_hour.as_ref().map_or(0.0, |l| l.p99_ms))) }
                        }
                    }
                }
            }
            @if !stats.next_page_token.is_empty() {
                p { a.button href=(format!("/ui/destinations?{}", query(&[("after", &stats.next_page_token)]))) { "Next page" } }
            }
        },
    ))
}

// ---------------------------------------------------------------------------------------
// Dead letters.

/// The dead-letter filter, as the page's query and the action forms carry it.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct DeadFilter {
    /// A destination key (`endpoint:NAME`, `queue:NAME`, `url:ORIGIN`) or an endpoint's name.
    #[serde(default)]
    destination: String,
    /// The last attempt's HTTP status.
    #[serde(default)]
    status: String,
    /// Text the last error contains.
    #[serde(default)]
    error: String,
    /// Dead-lettered within this window: `1h`, `24h`, `7d` (empty: any time).
    #[serde(default)]
    since: String,
}

const WINDOWS: [(&str, &str, u64); 4] = [
    ("", "any time", 0),
    ("1h", "last hour", 3_600_000),
    ("24h", "last 24 h", 86_400_000),
    ("7d", "last 7 days", 7 * 86_400_000),
];

impl DeadFilter {
    fn pairs(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("destination", self.destination.as_str()),
            ("status", self.status.as_str()),
            ("error", self.error.as_str()),
            ("since", self.since.as_str()),
        ]
    }

    fn is_empty(&self) -> bool {
        self.pairs().iter().all(|(_, v)| v.trim().is_empty())
    }

    /// A destination key, or an endpoint's bare name.
    fn destination(&self) -> Option<pb::Destination> {
        use hookd_core::destination::Destination;
        let d = self.destination.trim();
        if d.is_empty() {
            return None;
        }
        let dest = Destination::from_key(d).unwrap_or_else(|| Destination::Endpoint(d.to_owned()));
        Some(hookd_ctl::wire::destination(&dest))
    }

    /// As the API's filter; `now_ms` anchors the window.
    fn to_proto(&self, now_ms: u64) -> Result<pb::DeadLetterFilter, Failure> {
        let status = self.status.trim();
        let http_status = if status.is_empty() {
            0
        } else {
            status
                .parse::<u32>()
                .ok()
                .filter(|s| (100..=599).contains(s))
                .ok_or_else(|| {
                    Failure::bad(format!(
                        "status: {status:?} is not an HTTP status (100 to 599)"
                    ))
                })?
        };
        let window = WINDOWS
            .iter()
            .find(|(k, _, _)| *k == self.since.trim())
            .map(|(_, _, ms)| *ms)
            .ok_or_else(|| {
                Failure::bad(format!("since: {:?} is not one of 1h, 24h, 7d", self.since))
            })?;
        if self.error.len() > 1_024 {
            return Err(Failure::bad("error: longer than 1024 bytes"));
        }
        Ok(pb::DeadLetterFilter {
            destination: self.destination(),
            dead_after_unix_ms: if window == 0 {
                0
            } else {
                now_ms.saturating_sub(window)
            },
            dead_before_unix_ms: 0,
            http_status,
            error_contains: self.error.trim().to_owned(),
        })
    }

    fn form_fields(&self) -> Markup {
        html! {
            @for (k, v) in self.pairs() {
                input type="hidden" name=(k) value=(v);
            }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct DeadQuery {
    #[serde(flatten)]
    filter: DeadFilter,
    /// Hex key to continue after (the previous page's last row).
    #[serde(default)]
    after: String,
    #[serde(default)]
    notice: String,
}

fn dead_list_url(f: &DeadFilter) -> String {
    let q = query(&f.pairs());
    if q.is_empty() {
        "/ui/dead-letters".into()
    } else {
        format!("/ui/dead-letters?{q}")
    }
}

pub async fn dead_letters(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(q): Query<DeadQuery>,
) -> Page {
    let now = c.clock.now_ms();
    let proto = q.filter.to_proto(now)?;
    let filter = crate::api::validate::dead_letter_filter(proto.clone(), "filter")?;
    let after = if q.after.is_empty() {
        None
    } else {
        Some(crate::api::validate::unhex(&q.after, "after")?)
    };
    let (rows, next) = c
        .api
        .read(move |store| {
            Ok(store.dead_page(
                filter.destination.as_ref(),
                after.as_deref(),
                PAGE,
                MAX_DEAD_SCAN_PER_PAGE,
                &|d| filter.matches(d),
            )?)
        })
        .await?;
    // The analysis reads every dead letter's summary (up to 100,000): on the first page
    // only, and reused for a few seconds.
    let analysis = if q.after.is_empty() {
        Some(analysis(&c, &s, proto.destination.clone()).await?)
    } else {
        None
    };
    let list_url = dead_list_url(&q.filter);
    html_page(page(
        "Dead letters",
        Nav::DeadLetters,
        Some(&s),
        &q.notice,
        html! {
            form.filters method="get" action="/ui/dead-letters" {
                label { "destination " input type="text" name="destination" value=(q.filter.destination) placeholder="endpoint:NAME, queue:NAME, url:ORIGIN"; }
                label { "status " input type="text" name="status" value=(q.filter.status) size="4" placeholder="503"; }
                label { "error contains " input type="text" name="error" value=(q.filter.error); }
                label { "dead-lettered " select name="since" {
                    @for (k, label, _) in WINDOWS { option value=(k) selected[q.filter.since == k] { (label) } }
                } }
                button type="submit" { "Filter" }
                @if !q.filter.is_empty() { " " a href="/ui/dead-letters" { "clear" } }
            }
            section.bulk {
                form.inline method="post" action="/ui/dead-letters/replay" {
                    (csrf(&s)) (q.filter.form_fields())
                    button type="submit" { "Replay all matching…" }
                }
                form.inline method="post" action="/ui/dead-letters/purge" {
                    (csrf(&s)) (q.filter.form_fields())
                    button.danger type="submit" { "Purge all matching…" }
                }
                span.hint { " Both show how many match and ask to confirm first." }
            }
            @if let Some(analysis) = &analysis {
            section {
                h2 { "Analysis" }
                p.hint { "Over the last 7 days: " (analysis.scanned) " dead letters looked at"
                    @if analysis.truncated { " (the first 100,000; the rest were not)" } "."
                    @if analysis.destinations.len() > MAX_ANALYSES_SHOWN {
                        " The " (MAX_ANALYSES_SHOWN) " destinations with the most are shown, of " (analysis.destinations.len()) "."
                    } }
                @if analysis.destinations.is_empty() { p { "No dead letters in the window." } }
                @for a in analysis.destinations.iter().take(MAX_ANALYSES_SHOWN) {
                    article.analysis {
                        h3 { a href=(dead_list_url(&DeadFilter { destination: a.destination.clone(), ..Default::default() })) { (a.destination) }
                             " · " (a.count) " dead letters" }
                        p { "most common error: " q { (view::excerpt(&a.most_common_error, ERROR_EXCERPT)) } " (" (a.most_common_error_count) ")"
                            @if a.most_common_status != 0 { "; most common status " (a.most_common_status) " (" (a.most_common_status_count) ")" }
                            "; " (format!("{:.1}", a.average_attempts)) " attempts on average; first " (view::time(a.first_unix_ms)) ", last " (view::time(a.last_unix_ms)) "." }
                        @if !a.patterns.is_empty() {
                            ul.patterns {
                                @for p in &a.patterns {
                                    li { span.badge.pattern { (p.kind) } " " (p.description) br; span.hint { (p.suggestion) } }
                                }
                            }
                        }
                    }
                }
            }
            }
            section {
                h2 { "Messages" }
                @if rows.is_empty() {
                    p { "No dead letter matches" @if next.is_some() { " in this stretch; the next page looks further" } "." }
                } @else {
                    table.list {
                        thead { tr { th { "id" } th { "destination" } th { "dead-lettered" } th { "attempts" } th { "status" } th { "last error" } th { "" } } }
                        tbody {
                            @for d in &rows {
                                @let id = d.id.to_string();
                                tr {
                                    td.id { a href=(format!("/ui/messages/{}", segment(&id))) { (id) } }
                                    td { (d.destination) }
                                    td { (view::time(d.dead_ms)) }
                                    td.num { (d.attempts) }
                                    td.num { @if d.last_status == 0 { "-" } @else { (d.last_status) } }
                                    td.error { (view::excerpt(&d.last_error, ERROR_EXCERPT)) }
                                    td {
                                        form.inline method="post" action="/ui/dead-letters/replay" {
                                            (csrf(&s)) (q.filter.form_fields())
                                            input type="hidden" name="id" value=(id);
                                            button type="submit" { "Replay" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                @if let Some(next) = next {
                    p { a.button href=(format!("{list_url}{}{}", if list_url.contains('?') { "&" } else { "?" }, query(&[("after", &hookd_core::names::hex(&next))]))) { "Next page" } }
                }
            }
        },
    ))
}

#[derive(Debug, Default, Deserialize)]
pub struct BulkForm {
    #[serde(flatten)]
    filter: DeadFilter,
    /// One message to replay (the one-click replay), instead of the filter.
    #[serde(default)]
    id: String,
    /// Where a one-click replay returns: `message` (its page) or the list.
    #[serde(default)]
    from: String,
    /// Set by the confirmation page's button.
    #[serde(default)]
    confirm: String,
}

pub async fn replay(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<BulkForm>,
) -> Page {
    let list = dead_list_url(&f.filter);
    if !f.id.is_empty() {
        let r = c
            .api
            .replay_dead_letters(call(
                &s,
                pb::ReplayDeadLettersRequest {
                    ids: vec![f.id.clone()],
                    ..Default::default()
                },
            ))
            .await?
            .into_inner();
        c.forget_analysis();
        let notice = if r.replayed == 1 {
            format!("Replayed {}: it is pending again.", f.id)
        } else {
            format!("{} was no longer a dead letter; nothing replayed.", f.id)
        };
        let back = if f.from == "message" {
            format!("/ui/messages/{}", segment(&f.id))
        } else {
            list
        };
        return Ok(see_other(&with_notice(&back, &notice)));
    }
    let filter = f.filter.to_proto(c.clock.now_ms())?;
    let request = |dry_run| pb::ReplayDeadLettersRequest {
        filter: Some(filter.clone()),
        limit: crate::api::validate::MAX_REPLAY_LIMIT,
        dry_run,
        ..Default::default()
    };
    if f.confirm != "yes" {
        let r = c
            .api
            .replay_dead_letters(call(&s, request(true)))
            .await?
            .into_inner();
        return confirm_page(
            &s,
            "Replay dead letters",
            "/ui/dead-letters/replay",
            &f.filter,
            r.matched,
            html! {
                "Replaying sends them again from their first attempt, paced by "
                code { "dead_letters.replay_rate_per_s" } "."
            },
        );
    }
    let r = c
        .api
        .replay_dead_letters(call(&s, request(false)))
        .await?
        .into_inner();
    c.forget_analysis();
    let notice = format!(
        "Replayed {} of {} matching dead letters{}.",
        r.replayed,
        r.matched,
        if r.last_due_unix_ms > 0 {
            format!("; the last is due {}", view::time(r.last_due_unix_ms))
        } else {
            String::new()
        }
    );
    Ok(see_other(&with_notice(&list, &notice)))
}

pub async fn purge(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<BulkForm>,
) -> Page {
    let filter = f.filter.to_proto(c.clock.now_ms())?;
    let all = f.filter.is_empty();
    let request = |dry_run| pb::PurgeDeadLettersRequest {
        filter: Some(filter.clone()),
        all,
        dry_run,
        limit: crate::api::validate::MAX_REPLAY_LIMIT,
    };
    if f.confirm != "yes" {
        let r = c
            .api
            .purge_dead_letters(call(&s, request(true)))
            .await?
            .into_inner();
        return confirm_page(
            &s,
            "Purge dead letters",
            "/ui/dead-letters/purge",
            &f.filter,
            r.matched,
            html! {
                strong { "Purging deletes them for good" } " (payloads included); it cannot be undone."
                @if all { " The filter is empty: this is " strong { "every dead letter" } "." }
            },
        );
    }
    let r = c
        .api
        .purge_dead_letters(call(&s, request(false)))
        .await?
        .into_inner();
    c.forget_analysis();
    Ok(see_other(&with_notice(
        &dead_list_url(&f.filter),
        &format!(
            "Purged {} of {} matching dead letters.",
            r.purged, r.matched
        ),
    )))
}

/// The dry run's answer: how many match, and a button that confirms.
fn confirm_page(
    s: &Session,
    title: &str,
    action: &str,
    filter: &DeadFilter,
    matched: u32,
    warning: Markup,
) -> Page {
    let described: Vec<String> = filter
        .pairs()
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    html_page(page(
        title,
        Nav::DeadLetters,
        Some(s),
        "",
        html! {
            p.count { strong { (matched) } " dead letters match "
                @if described.is_empty() { "(no filter: all of them)" } @else { "(" (described.join(", ")) ")" } "." }
            @if matched == 0 {
                p { "Nothing to do. " a href=(dead_list_url(filter)) { "Back to the list" } }
            } @else {
                p { (warning) }
                form.inline method="post" action=(action) {
                    (csrf(s)) (filter.form_fields())
                    input type="hidden" name="confirm" value="yes";
                    button.danger[action.ends_with("purge")] type="submit" { "Confirm: " (title.to_lowercase()) " (" (matched) ")" }
                }
                " " a href=(dead_list_url(filter)) { "Cancel" }
            }
        },
    ))
}

/// The dead-letter analysis of `destination` (or of all), from the cache while fresh.
async fn analysis(
    c: &Console,
    s: &Session,
    destination: Option<pb::Destination>,
) -> Result<Arc<pb::AnalyzeDeadLettersResponse>, Failure> {
    let key = format!("{destination:?}");
    let now = c.clock.now_ms();
    if let Some((k, at, a)) = c
        .analysis
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        && *k == key
        && now.saturating_sub(*at) < ANALYSIS_TTL_MS
    {
        return Ok(a.clone());
    }
    let mut a = c
        .api
        .analyze_dead_letters(call(
            s,
            pb::AnalyzeDeadLettersRequest {
                destination,
                window_secs: 0,
            },
        ))
        .await?
        .into_inner();
    a.destinations.sort_by_key(|d| std::cmp::Reverse(d.count));
    let a = Arc::new(a);
    *c.analysis.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, now, a.clone()));
    Ok(a)
}

// ---------------------------------------------------------------------------------------
// A message.

pub async fn message(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
    Query(n): Query<Notice>,
) -> Page {
    let m = c
        .api
        .get_message(call(&s, pb::GetMessageRequest { id: id.clone() }))
        .await?
        .into_inner();
    // The payload and headers: a live or dead message's record (a completed one keeps only
    // its outcome).
    let parsed: hookd_core::ids::MessageId =
        id.parse().map_err(|e| Failure::bad(format!("id: {e}")))?;
    let record = c
        .api
        .read(move |store| Ok(store.message(parsed)?))
        .await?
        .map(|m| m.record);
    let state = pb::MessageState::try_from(m.state)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("MESSAGE_STATE_")
                .to_lowercase()
                .replace('_', " ")
        })
        .unwrap_or_else(|_| "unknown".into());
    let destination = m
        .destination
        .as_ref()
        .and_then(|d| d.kind.as_ref())
        .map(|k| match k {
            pb::destination::Kind::Endpoint(n) => format!("endpoint:{n}"),
            pb::destination::Kind::Url(u) => format!("url:{u}"),
            pb::destination::Kind::Queue(q) => format!("queue:{q}"),
        })
        .unwrap_or_default();
    let dead = m.state == pb::MessageState::DeadLetter as i32;
    html_page(page(
        &format!("Message {id}"),
        Nav::DeadLetters,
        Some(&s),
        &n.notice,
        html! {
            @if dead {
                section.actions {
                    form.inline method="post" action="/ui/dead-letters/replay" {
                        (csrf(&s))
                        input type="hidden" name="id" value=(id);
                        input type="hidden" name="from" value="message";
                        button type="submit" { "Replay this message" }
                    }
                }
            }
            table.kv {
                tr { th { "state" } td { span.badge { (state) } } }
                tr { th { "destination" } td { (destination) } }
                tr { th { "event type" } td { (m.event_type) } }
                tr { th { "idempotency key" } td { (m.idempotency_key) } }
                tr { th { "attempts" } td { (m.attempts) " of " @if m.max_attempts == 0 { "the default" } @else { (m.max_attempts) } } }
                tr { th { "enqueued" } td { (view::time(m.enqueued_unix_ms)) } }
                @if m.next_attempt_unix_ms > 0 { tr { th { "next attempt" } td { (view::time(m.next_attempt_unix_ms)) } } }
                @if m.completed_unix_ms > 0 { tr { th { "completed" } td { (view::time(m.completed_unix_ms)) } } }
                tr { th { "last error" } td.error { (m.last_error) } }
                tr { th { "payload size" } td { (view::bytes(m.payload_size)) } }
            }
            h2 { "Attempts" }
            @if m.history.is_empty() { p { "No attempt has finished yet." } } @else {
                table.list {
                    thead { tr { th { "#" } th { "started" } th { "outcome" } th { "status" } th { "latency" } th { "error" } } }
                    tbody {
                        @for a in &m.history {
                            tr {
                                td.num { (a.number) }
                                td { (view::time(a.started_unix_ms)) }
                                td { (a.outcome) }
                                td.num { @if a.http_status == 0 { "-" } @else { (a.http_status) } }
                                td.num { (view::millis(a.latency_us as f64 / 1_000.0)) }
                                td.error { (view::excerpt(&a.error, 400)) }
                            }
                        }
                    }
                }
            }
            @if let Some(r) = &record {
                @if !r.headers.is_empty() {
                    h2 { "Headers" }
                    table.kv { @for (k, v) in &r.headers { tr { th { (k) } td { (v) } } } }
                }
                h2 { "Payload" }
                (payload(&r.payload))
            } @else {
                p.hint { "The payload is not kept once a message completes." }
            }
        },
    ))
}

/// A payload as text: pretty JSON when it is JSON and small enough, else UTF-8 text, else a
/// hex dump of its start; always escaped, at most [`PAYLOAD_SHOWN`] bytes.
fn payload(bytes: &[u8]) -> Markup {
    let cut = bytes.len() > PAYLOAD_SHOWN;
    let shown = &bytes[..bytes.len().min(PAYLOAD_SHOWN)];
    let text = if !cut && let Ok(v) = serde_json::from_slice::<serde_json::Value>(shown) {
        serde_json::to_string_pretty(&v).unwrap_or_default()
    } else {
        match std::str::from_utf8(shown) {
            Ok(t) => t.to_owned(),
            // A cut in the middle of a character is not binary.
            Err(e) if cut && e.valid_up_to() + 4 >= shown.len() => {
                String::from_utf8_lossy(&shown[..e.valid_up_to()]).into_owned()
            }
            Err(_) => hex_dump(&shown[..shown.len().min(4_096)]),
        }
    };
    html! {
        pre.payload { (text) }
        @if cut { p.hint { "Showing the first " (view::bytes(PAYLOAD_SHOWN as u64)) " of " (view::bytes(bytes.len() as u64)) "." } }
    }
}

fn hex_dump(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::from("(binary)\n");
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let _ = write!(out, "{:08x}  ", i * 16);
        for b in chunk {
            let _ = write!(out, "{b:02x} ");
        }
        out.push('\n');
    }
    out
}

// ---------------------------------------------------------------------------------------
// Sources.

pub async fn sources(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<Notice>,
) -> Page {
    let sources = c
        .api
        .list_sources(call(&s, pb::ListSourcesRequest {}))
        .await?
        .into_inner()
        .sources;
    html_page(page(
        "Sources",
        Nav::Sources,
        Some(&s),
        &n.notice,
        html! {
            p.hint { "Webhooks hookd receives on the ingest listener (" code { "POST /in/{source}" } "). "
                "Topics do not exist in hookd: a source routes to one queue or endpoint." }
            @if sources.is_empty() { p { "No source is defined." } } @else {
                table.list {
                    thead { tr { th { "name" } th { "path" } th { "scheme" } th { "route" } th { "secrets" }
                                 th { "tolerance" } th { "max body" } th { "schema" } th { "event type" } th { "dedup id" } th { "redaction" } th { "defined in" } } }
                    tbody {
                        @for src in &sources {
                            tr {
                                td { (src.name) }
                                td { code { (src.path) } }
                                td { (src.scheme) }
                                td { @match &src.route {
                                    Some(pb::source::Route::Queue(q)) => { "queue:" (q) }
                                    Some(pb::source::Route::Endpoint(e)) => { a href=(format!("/ui/endpoints/{}", segment(e))) { "endpoint:" (e) } }
                                    None => { "-" }
                                } }
                                td {
                                    @for (i, sec) in src.secret_summaries.iter().enumerate() {
                                        @if i > 0 { ", " } code { (sec.fingerprint) }
                                    }
                                    @if !src.bearer_sha256.is_empty() { (src.bearer_sha256.len()) " bearer token(s)" }
                                    @if !src.basic.is_empty() { (src.basic.len()) " basic credential(s)" }
                                }
                                td.num { (src.tolerance_secs) " s" }
                                td.num { (view::bytes(src.max_body_bytes)) }
                                td { @if src.json_schema.is_empty() { "none" } @else { "yes" } }
                                td { (src.event_type) }
                                td { (src.dedup_id) }
                                td { @if let Some(r) = &src.redact {
                                    (r.remove.len() + r.mask.len()) " pointer(s)"
                                    @if !r.detectors.is_empty() { ", " (r.detectors.join(", ")) }
                                } @else { "none" } }
                                td { @if src.from_config { "config file" } @else { "API" } }
                            }
                        }
                    }
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_redirects_stay_on_the_console() {
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
        assert_eq!(segment("ok-name_1.x"), "ok-name_1.x");
        assert_eq!(safe_next("/ui/endpoints"), "/ui/endpoints");
        for bad in [
            "//evil.example",
            "https://evil.example",
            "/other",
            "/ui\\..\\",
            "",
        ] {
            assert_eq!(safe_next(bad), "/ui", "{bad}");
        }
        assert_eq!(with_notice("/ui/x", "a&b"), "/ui/x?notice=a%26b");
        assert_eq!(with_notice("/ui/x?y=1", "ok"), "/ui/x?y=1&notice=ok");
    }

    #[test]
    fn the_filter_names_its_bad_fields() {
        let f = |status: &str, since: &str| DeadFilter {
            status: status.into(),
            since: since.into(),
            ..Default::default()
        };
        assert!(f("503", "24h").to_proto(100_000_000).is_ok());
        let e = f("abc", "").to_proto(0).err().unwrap();
        assert!(e.message.starts_with("status:"), "{}", e.message);
        let e = f("", "3w").to_proto(0).err().unwrap();
        assert!(e.message.starts_with("since:"), "{}", e.message);
        let p = f("", "1h").to_proto(10_000_000).unwrap();
        assert_eq!(p.dead_after_unix_ms, 10_000_000 - 3_600_000);
        let d = DeadFilter {
            destination: "orders".into(),
            ..Default::default()
        };
        assert_eq!(
            d.destination().unwrap().kind,
            Some(pb::destination::Kind::Endpoint("orders".into()))
        );
        let d = DeadFilter {
            destination: "queue:jobs".into(),
            ..Default::default()
        };
        assert_eq!(
            d.destination().unwrap().kind,
            Some(pb::destination::Kind::Queue("jobs".into()))
        );
    }

    #[test]
    fn payloads_are_escaped_capped_and_binary_safe() {
        let html = payload(br#"{"x":"<script>alert(1)</script>"}"#).into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"));
        let big = vec![b'a'; PAYLOAD_SHOWN + 10];
        let html = payload(&big).into_string();
        assert!(html.contains("Showing the first"));
        assert!(html.len() < PAYLOAD_SHOWN + 1_000);
        let html = payload(&[0xff, 0x00, 0x41]).into_string();
        assert!(
            html.contains("(binary)") && html.contains("ff 00 41"),
            "{html}"
        );
    }
}
