//! Endpoints: the list, one endpoint's page, the create and edit forms, pause and resume.

use super::*;
use crate::api::view::{EndpointView, SecretShown};
use hookd_storage::store::EndpointRecord;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    /// The last name (or key) of the previous page.
    #[serde(default)]
    pub(super) after: String,
    /// Only names containing this.
    #[serde(default)]
    pub(super) q: String,
    #[serde(default)]
    pub(super) notice: String,
}

pub(super) fn endpoint_key(tenant: hookd_core::scope::TenantId, name: &str) -> String {
    hookd_core::destination::Destination::endpoint(tenant, name).key()
}

/// Messages an endpoint's page lists, at most (its newest, through the search index).
const RECENT: usize = 20;

pub(super) fn state_cell(e: &EndpointRecord) -> Markup {
    html! {
        @if e.disabled {
            span.badge.bad { "disabled" } " " (e.disabled_reason)
        } @else if e.paused {
            span.badge.warn { "paused" } " " (e.paused_reason)
        } @else {
            // A state, not health: the success column is coloured by the alert thresholds.
            span.badge { "active" }
        }
    }
}

pub(super) fn breaker_cell(p: Option<&hookd_core::stats::PushSnapshot>) -> Markup {
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

pub(crate) async fn endpoints(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(q): Query<ListQuery>,
) -> Page {
    let all = c.api.endpoint_views(s.tenant()).await?;
    let matching: Vec<&EndpointRecord> = all
        .iter()
        .map(|v| &v.record)
        .filter(|e| q.q.is_empty() || e.name.contains(q.q.as_str()))
        .filter(|e| s.may_see(&format!("endpoint:{}", e.name)))
        .collect();
    let start =
        matching.partition_point(|e| !q.after.is_empty() && e.name.as_str() <= q.after.as_str());
    let shown = &matching[start..(start + PAGE).min(matching.len())];
    let next = (start + PAGE < matching.len())
        .then(|| shown.last().map(|e| e.name.clone()))
        .flatten();
    let details = c
        .engine
        .detail(
            shown
                .iter()
                .map(|e| endpoint_key(s.tenant(), &e.name))
                .collect(),
            false,
        )
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
                @if s.may_change() { " " a.button href="/ui/new-endpoint" { "New endpoint" } }
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
                                (view::success(p.success_rate_last_hour, p.attempts_last_hour, &c.alerts))
                                @if p.attempts_last_hour > 0 { " of " (p.attempts_last_hour) }
                            } }
                            @if let Some(p) = push { (latency_cells(&p.attempt_latency_last_hour)) } @else { td {} td {} td {} }
                            td.num { (stats.map_or(0, |s| s.pending)) }
                            td.num { (stats.map_or(0, |s| s.awaiting_retry)) }
                            td.num { @let dead = stats.map_or(0, |s| s.dead_letter);
                                @if dead > 0 { a href=(format!("/ui/dead-letters?{}", query(&[("destination", &endpoint_key(s.tenant(), &e.name))]))) { (dead) } } @else { "0" } }
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

pub(super) fn pause_or_resume(s: &Session, e: &EndpointRecord, back: &str) -> Markup {
    let base = format!("/ui/endpoints/{}", segment(&e.name));
    if e.paused {
        button(s, &format!("{base}/resume"), "Resume", &[("back", back)])
    } else {
        button(s, &format!("{base}/pause"), "Pause", &[("back", back)])
    }
}

/// The endpoint named in the path, as the console shows and edits it (a name that is not
/// valid is 400, an unknown one 404).
pub(super) async fn found_endpoint(
    c: &Console,
    s: &Session,
    name: &str,
) -> Result<EndpointView, Failure> {
    crate::api::validate::validate_name(name, "name")?;
    let hidden = !s.may_see(&format!("endpoint:{name}"));
    let found = if hidden {
        None
    } else {
        c.api.endpoint_view(s.tenant(), name).await?
    };
    found.ok_or_else(|| {
        Failure::new(
            StatusCode::NOT_FOUND,
            format!("name: no endpoint named {name:?}"),
        )
    })
}

pub(crate) async fn endpoint(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Query(n): Query<Notice>,
) -> Page {
    let v = found_endpoint(&c, &s, &name).await?;
    let e = &v.record;
    let key = endpoint_key(s.tenant(), &name);
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
    let recent = {
        let query = hookd_storage::store::search::Query {
            tenant: s.tenant(),
            destination: Some(
                hookd_core::destination::Destination::endpoint(s.tenant(), &name).encode(),
            ),
            ..Default::default()
        };
        c.api
            .read(move |store| Ok(store.search(&query, None, RECENT, RECENT as u64 * 4)?))
            .await?
    };
    let more = recent.next.is_some();
    let recent = recent.hits;
    let all_of_it = format!(
        "/ui/messages?{}",
        query(&[("destination", &format!("endpoint:{name}"))])
    );
    html_page(page(
        &format!("Endpoint {name}"),
        Nav::Endpoints,
        Some(&s),
        &n.notice,
        html! {
            section.actions {
                (state_cell(e))
                " "
                @if !s.may_change() {
                } @else if e.paused {
                    (button(&s, &format!("{base}/resume"), "Resume", &[("back", "detail")]))
                } @else {
                    form.inline method="post" action=(format!("{base}/pause")) {
                        (csrf(&s))
                        input type="hidden" name="back" value="detail";
                        input type="text" name="reason" placeholder="reason (optional)" maxlength="1024";
                        button type="submit" { "Pause" }
                    }
                }
                @if s.may_change() { " " a.button href=(format!("{base}/edit")) { "Edit" } }
                " " (button(&s, &format!("{base}/test"), "Send a test event", &[]))
                " " (button(&s, &format!("{base}/rotate"), "Rotate signing secret", &[]))
                " " a.button href=(format!("/ui/dead-letters?{}", query(&[("destination", &key)]))) { "Dead letters" }
            }
            section.cards {
                (figure("pending", stats.map_or(0, |s| s.pending)))
                (figure("awaiting retry", stats.map_or(0, |s| s.awaiting_retry)))
                (figure("in flight", push.map_or_else(|| "-".to_owned(), |p| format!("{} / {}", p.in_flight, p.max_in_flight))))
                (figure("dead letters", stats.map_or(0, |s| s.dead_letter)))
                (figure("success, last hour", push.map_or_else(|| html! { "-" }, |p| view::success(p.success_rate_last_hour, p.attempts_last_hour, &c.alerts))))
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
                h2 { "Recent messages" }
                @if recent.is_empty() {
                    p.hint { "None kept (completed ones are kept " code { "completed_retention_secs" } ")." }
                } @else {
                    table.list {
                        thead { tr { th { "message" } th { "created" } th { "state" } th { "attempts" } th { "last status" } th { "latency" } th { "last error or response" } } }
                        tbody {
                            @for m in &recent {
                                tr {
                                    td.id { a href=(format!("/ui/messages/{}", m.id)) { (m.id) } }
                                    td { (view::time(m.created_ms)) }
                                    td { (view::state_label(m.state)) }
                                    td.num { (m.attempts) }
                                    td.num { @if m.last_status > 0 { (m.last_status) } @else { "-" } }
                                    td.num { @if m.attempts > 0 && m.last_latency_us > 0 { (view::millis(m.last_latency_us as f64 / 1_000.0)) } @else { "-" } }
                                    td.error { (view::excerpt(&m.last_error, ERROR_EXCERPT)) }
                                }
                            }
                        }
                    }
                    @if more {
                        p { a href=(all_of_it) { "All of this endpoint's messages →" } }
                    }
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
                    tr { th { "FIFO lanes" } td { (match e.fifo { 1 => "block: a dead letter holds its lane", 2 => "park: a dead letter is parked, its lane moves on", _ => "off (unordered)" })
                        @if let Some(s) = stats { @if s.fifo_lanes > 0 {
                            " · " (s.fifo_lanes) " lanes held"
                            @if s.blocked_lanes > 0 { ", " span.badge.bad { (s.blocked_lanes) " blocked" } " (replay or skip their dead letters)" }
                        } } } }
                    tr { th { "signing secrets" } td {
                        @if v.clear_secrets.is_empty() { "none (deliveries are not signed)" }
                        @for (i, sec) in v.summaries().iter().enumerate() {
                            @if i > 0 { ", " }
                            code { (sec.fingerprint) }
                            @if !sec.public_key.is_empty() {
                                " (ed25519, v1a; the receiver verifies with " code { (sec.public_key) } ")"
                            }
                        }
                        @if v.summaries().iter().any(|sec| !sec.public_key.is_empty()) {
                            br; "Receivers can fetch the v1a public keys as a JWKS: "
                            a href=(format!("/jwks/{}", segment(&e.name))) { code { "/jwks/" (e.name) } }
                            " (each delivery names its key in " code { "hookd-key-id" } ")"
                        }
                    } }
                    tr { th { "static headers" } td {
                        @if e.headers.is_empty() { "none" }
                        @for (i, name) in e.headers.keys().enumerate() {
                            @if i > 0 { ", " }
                            code { (name) }
                        }
                    } }
                    tr { th { "egress proxy" } td {
                        @if e.proxy_url.is_empty() { "none (direct)" }
                        @else { code { (crate::api::convert::shown_proxy(&e.proxy_url)) } }
                    } }
                    tr { th { "client certificate" } td {
                        @if e.client_certificate_pem.is_empty() { "none" }
                        @else { (crate::api::convert::certificate_summary(&e.client_certificate_pem)) }
                    } }
                    tr { th { "OAuth2" } td {
                        @match &e.oauth2 {
                            None => "none",
                            Some(o) => {
                                "client " code { (o.client_id) } " at " code { (o.token_url) }
                                @if !o.scopes.is_empty() { ", scopes " code { (o.scopes.join(" ")) } }
                            }
                        }
                    } }
                    tr { th { "created" } td { (view::time(e.created_ms)) } }
                    tr { th { "updated" } td { (view::time(e.updated_ms)) } }
                }
            }
        },
    ))
}

/// A per-endpoint duration, or the server's default when 0.
pub(super) fn ms_or_default(ms: u64) -> String {
    if ms == 0 {
        "the server's default".to_owned()
    } else {
        view::duration(ms)
    }
}

pub(super) fn or_default(v: u64, default: &str) -> String {
    if v == 0 {
        default.to_owned()
    } else {
        v.to_string()
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct PauseForm {
    #[serde(default)]
    reason: String,
    #[serde(default)]
    back: String,
}

pub(super) fn back_to(name: &str, back: &str) -> String {
    if back == "detail" {
        format!("/ui/endpoints/{}", segment(name))
    } else {
        "/ui/endpoints".to_owned()
    }
}

pub(crate) async fn pause(
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

pub(crate) async fn resume(
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
pub(crate) struct EndpointForm {
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
    /// FIFO lanes: "off", "block" or "park".
    #[serde(default)]
    fifo: String,
    /// "on" when ticked.
    #[serde(default)]
    disabled: String,
    /// A signing secret to add (kept with the others: both sign while rotating).
    #[serde(default)]
    new_secret: String,
    /// Fingerprints of stored secrets to remove.
    #[serde(default)]
    remove_secret: Vec<String>,
    /// The endpoint's `updated_ms` when the form was made: a save over a newer
    /// change is refused rather than overwriting it.
    #[serde(default)]
    updated: String,
}

impl EndpointForm {
    fn of(e: &EndpointRecord) -> Self {
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
            fifo: match e.fifo {
                1 => "block",
                2 => "park",
                _ => "off",
            }
            .into(),
            disabled: if e.disabled {
                "on".into()
            } else {
                String::new()
            },
            new_secret: String::new(),
            remove_secret: Vec::new(),
            updated: e.updated_ms.to_string(),
        }
    }

    /// The form applied over `e` and its secrets in clear (which the form never shows):
    /// the PutEndpoint request that saves it.
    fn apply(&self, mut e: pb::Endpoint) -> Result<pb::Endpoint, Failure> {
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
        e.fifo = match self.fifo.as_str() {
            "block" => pb::Fifo::Block as i32,
            "park" => pb::Fifo::Park as i32,
            "off" | "" => pb::Fifo::Off as i32,
            other => {
                return Err(Failure::bad(format!(
                    "fifo: {other:?} is not off, block or park"
                )));
            }
        };
        e.disabled = self.disabled == "on";
        if !self.remove_secret.is_empty() {
            e.secrets.retain(|clear| {
                !self
                    .remove_secret
                    .contains(&SecretShown::of(clear).fingerprint)
            });
        }
        let new = self.new_secret.trim();
        if !new.is_empty() {
            e.secrets.push(new.to_owned());
        }
        Ok(e)
    }
}

pub(super) fn endpoint_form(
    s: &Session,
    f: &EndpointForm,
    action: &str,
    creating: bool,
    secrets: &[SecretShown],
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
            label { span { "FIFO lanes" }
                select name="fifo" {
                    @for (value, text) in [("off", "off: unordered"), ("block", "block: a dead letter holds its lane"), ("park", "park: a dead letter is parked, its lane moves on")] {
                        option value=(value) selected[f.fifo == value] { (text) }
                    }
                }
                small { "one delivery per ordering key at a time, in order, numbered (webhook-sequence)" }
            }
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

pub(crate) async fn new_endpoint_form(State(_c): Shared, Extension(s): Extension<Session>) -> Page {
    let form = EndpointForm::default();
    html_page(page(
        "New endpoint",
        Nav::Endpoints,
        Some(&s),
        "",
        endpoint_form(&s, &form, "/ui/new-endpoint", true, &[]),
    ))
}

pub(crate) async fn create_endpoint(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<EndpointForm>,
) -> Page {
    let e = pb::Endpoint {
        name: f.name.trim().to_owned(),
        ..Default::default()
    };
    let saved = match f.apply(e) {
        Ok(e) => c
            .api
            .put_endpoint(call(&s, pb::PutEndpointRequest { endpoint: Some(e) }))
            .await
            .map_err(Failure::from),
        Err(failure) => Err(failure),
    };
    match saved {
        Ok(r) => {
            let r = r.into_inner();
            let name = r.endpoint.map(|e| e.name).unwrap_or_default();
            let to = format!("/ui/endpoints/{}", segment(&name));
            let notice = saved_notice(&format!("Created {name}."), &r.warnings);
            Ok(see_other(&with_notice(&to, &notice)))
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

/// What a save says, with PutEndpoint's warnings after it (a URL the guard refuses).
fn saved_notice(done: &str, warnings: &[String]) -> String {
    let mut notice = done.to_owned();
    for warning in warnings {
        notice.push_str(" Warning: ");
        notice.push_str(warning);
    }
    notice
}

pub(super) fn form_again(
    s: &Session,
    title: &str,
    f: &EndpointForm,
    action: &str,
    creating: bool,
    secrets: &[SecretShown],
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

pub(crate) async fn edit_endpoint_form(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> Page {
    let v = found_endpoint(&c, &s, &name).await?;
    let action = format!("/ui/endpoints/{}/edit", segment(&name));
    html_page(page(
        &format!("Edit {name}"),
        Nav::Endpoints,
        Some(&s),
        "",
        endpoint_form(
            &s,
            &EndpointForm::of(&v.record),
            &action,
            false,
            &v.summaries(),
        ),
    ))
}

pub(crate) async fn save_endpoint(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
    Form(f): Form<EndpointForm>,
) -> Page {
    // The stored endpoint with its secrets in clear, so a save keeps them; they go back to
    // PutEndpoint (sealed again there) and are never rendered.
    let v = found_endpoint(&c, &s, &name).await?;
    let summaries = &v.summaries();
    let action = format!("/ui/endpoints/{}/edit", segment(&name));
    let title = format!("Edit {name}");
    if f.updated != v.record.updated_ms.to_string() {
        let failure = Failure::new(
            StatusCode::CONFLICT,
            format!(
                "{name} was changed at {} since this form was opened; reload it to see the change",
                view::time(v.record.updated_ms)
            ),
        );
        return form_again(
            &s,
            &title,
            &EndpointForm::of(&v.record),
            &action,
            false,
            summaries,
            failure,
        );
    }
    // The endpoint as it is (its secrets in clear, which the form never shows), the form
    // applied over it.
    let current = crate::api::convert::endpoint(v.record, &v.clear_secrets, true);
    let e = match f.apply(current) {
        Ok(e) => e,
        Err(failure) => return form_again(&s, &title, &f, &action, false, summaries, failure),
    };
    match c
        .api
        .put_endpoint(call(&s, pb::PutEndpointRequest { endpoint: Some(e) }))
        .await
    {
        Ok(r) => {
            let to = format!("/ui/endpoints/{}", segment(&name));
            let notice = saved_notice(&format!("Saved {name}."), &r.into_inner().warnings);
            Ok(see_other(&with_notice(&to, &notice)))
        }
        Err(status) => form_again(&s, &title, &f, &action, false, summaries, status.into()),
    }
}

/// Adds a new `whsec_` secret to the endpoint beside its others (receivers move to it while
/// the old ones still sign) and shows it this once, on this page, never in a URL.
pub(crate) async fn rotate_secret(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> Page {
    use base64::Engine as _;
    let v = found_endpoint(&c, &s, &name).await?;
    let new = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 24]>())
    );
    let mut e = crate::api::convert::endpoint(v.record, &v.clear_secrets, true);
    e.secrets.push(new.clone());
    c.api
        .put_endpoint(call(&s, pb::PutEndpointRequest { endpoint: Some(e) }))
        .await?;
    let back = format!("/ui/endpoints/{}", segment(&name));
    html_page(page(
        &format!("New signing secret for {name}"),
        Nav::Endpoints,
        Some(&s),
        "",
        html! {
            p { "Deliveries to " code { (name) } " are now signed with this secret too. Copy it now: it is not shown again." }
            p { code.secret { (new) } }
            p.hint { "Every older secret keeps signing until you remove it (Edit), so the receiver can switch without missing a delivery." }
            p { a.button href=(back) { "Back to " (name) } }
        },
    ))
}

/// Enqueues a small `hookd.test` event to the endpoint (through the API, as the caller).
pub(crate) async fn send_test_event(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(name): Path<String>,
) -> Page {
    found_endpoint(&c, &s, &name).await?;
    let payload = serde_json::json!({
        "type": "hookd.test",
        "endpoint": name,
        "sent_at_unix_ms": c.clock.now_ms(),
        "sent_by": s.caller.name,
    });
    let r = c
        .api
        .enqueue(call(
            &s,
            pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Endpoint(name.clone())),
                payload: payload.to_string().into_bytes(),
                ..Default::default()
            },
        ))
        .await?
        .into_inner();
    let to = format!("/ui/endpoints/{}", segment(&name));
    Ok(see_other(&with_notice(
        &to,
        &format!("Sent a test event to {name} (message {}).", r.id),
    )))
}
