//! The console's pages and actions. Pages read domain values (the engine's snapshots, the
//! API's reads in `api::view` form, a page of dead letters from the store); actions write
//! through the gRPC service in process ([`super::call`]).

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

mod dead_letters;
mod destinations;
mod endpoints;
mod event_types;
mod login;
mod messages;
mod overview;
mod replays;
mod sources;
mod subscriptions;
mod tenants;

pub(super) use self::{
    dead_letters::*, destinations::*, endpoints::*, event_types::*, login::*, messages::*,
    overview::*, replays::*, sources::*, subscriptions::*, tenants::*,
};

type Shared = State<Arc<Console>>;

/// A page that could not be made: its status and why, shown escaped.
#[derive(Debug)]
pub(super) struct Failure {
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

/// A caller limited to destinations (a portal link or token so made) sees nothing that
/// spans them (subscriptions, dead letters of every destination): as the API refuses.
fn spans_destinations(s: &Session) -> Result<(), Failure> {
    if s.caller.limited() {
        return Err(Failure::new(
            StatusCode::FORBIDDEN,
            "this link is limited to some endpoints: open one of them",
        ));
    }
    Ok(())
}

fn html_page(markup: Markup) -> Page {
    Ok(Html(markup.into_string()).into_response())
}

/// A notice carried to the next page by a redirect (`?notice=`), shown escaped.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Notice {
    #[serde(default)]
    notice: String,
}

/// Percent-encodes a path segment (an endpoint's name, a message id).
/// A list's search box: names containing `q` (GET `action?q=`).
fn name_filter(action: &str, q: &str) -> Markup {
    html! {
        form.filters method="get" action=(action) role="search" {
            label { "Name contains " input type="search" name="q" value=(q); }
            button type="submit" { "Filter" }
            @if !q.is_empty() { " " a href=(action) { "clear" } }
        }
    }
}

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

/// A form's destination: a key, or an endpoint's bare name, as its tenant writes it (the
/// call it goes into names the tenant); none when empty.
fn destination_arg(text: &str) -> Option<pb::Destination> {
    use hookd_core::destination::Destination;
    use hookd_core::scope::TenantId;
    let d = text.trim();
    if d.is_empty() {
        return None;
    }
    let dest = Destination::from_local_key(TenantId::DEFAULT, d)
        .unwrap_or_else(|| Destination::endpoint(TenantId::DEFAULT, d));
    Some(hookd_ctl::wire::destination(&dest))
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
