//! The customer portal (issue #52): `/portal/{token}/...` on the HTTP listener, one
//! tenant's view of the console opened by a signed link (`links`), for a SaaS to hand to
//! its customer or show in an iframe of its own pages.
//!
//! A request's token is checked first (signature, expiry on hookd's clock, revocation, the
//! very tenant it was made for); an expired link with a refresh URL sends the browser
//! there, for the SaaS to log its customer in and answer with a new link. Only the pages a
//! tenant may see are reachable (endpoints, subscriptions, event types, messages, dead
//! letters, its figures): no operator page (tenants, sources, destinations across
//! tenants, login), and the session made from the link is pinned to its tenant. The
//! console's pages then run as they do for an operator, with the link's caller (its
//! tenant, scopes, destinations): every write goes through the API's own checks.
//!
//! The pages write `/ui` paths; here they become the link's base path, in `Location` and
//! in the page: maud escapes `"` in every value it interpolates, so `="/ui` can only be
//! the start of one of the templates' own attribute values, never a tenant's text.
//!
//! Embedding: `Content-Security-Policy: frame-ancestors` lists `[portal] frame_ancestors`
//! and the tenant's own (`'none'` when both are empty, with `X-Frame-Options: DENY`). No
//! script at all, styles only from hookd, images only from hookd and the tenant's logo
//! host. CSRF: the session lives in the URL, not in a cookie (a third-party iframe's
//! cookies are blocked by browsers), and every form carries a token derived from the link
//! under a key of this process; a browser's cross-site POST is refused whatever it
//! carries. `Referrer-Policy: no-referrer` keeps the token out of other sites' logs.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use http::{HeaderValue, Method, StatusCode, header};

use crate::console::session::{PortalView, Session};
use crate::portal_links::{Link, Links, Refused, is_colour};
use hookd_engine::EngineHandle;

/// Requests one link may make per second, with a burst of `LINK_BURST`: a page is three
/// (itself and two stylesheets), so a person never meets it; a script holding a leaked link
/// is slowed to it (429 with Retry-After) until the link expires or is revoked.
const LINK_RATE_PER_S: f64 = 20.0;
const LINK_BURST: f64 = 120.0;
/// Links whose request rate is followed at once; past it, those with a full bucket (idle)
/// are forgotten first.
const MAX_FOLLOWED_LINKS: usize = 10_000;

/// A page is at most this large when its paths are rewritten (a page of 50 rows with a
/// 64 KiB payload is well under it).
const MAX_PAGE_BYTES: usize = 8 << 20;

/// What the portal's routes share.
#[derive(Debug)]
pub(crate) struct Portal {
    pub(crate) links: Arc<Links>,
    /// The console's pages, without their operator guard.
    pages: Router,
    engine: EngineHandle,
    /// `[portal] frame_ancestors`, checked.
    frame_ancestors: Vec<String>,
    /// Signs each link's CSRF token (made at start: a restart needs a reload of the page).
    csrf_key: [u8; 32],
    clock: Arc<dyn hookd_core::clock::Clock>,
    /// Each link's request rate, by link id.
    rates: std::sync::Mutex<std::collections::HashMap<String, hookd_core::limiter::TokenBucket>>,
}

impl Portal {
    pub(crate) fn new(
        links: Arc<Links>,
        console: Arc<crate::console::Console>,
        engine: EngineHandle,
        frame_ancestors: Vec<String>,
        clock: Arc<dyn hookd_core::clock::Clock>,
    ) -> Self {
        Self {
            links,
            pages: crate::console::pages(console),
            engine,
            frame_ancestors,
            csrf_key: rand::random(),
            clock,
            rates: std::sync::Mutex::default(),
        }
    }

    /// Whether link `id` may make a request now; else in how many ms it may.
    fn admit(&self, id: &str) -> Result<(), u64> {
        let now = self.clock.now_ms();
        let mut rates = self.rates.lock().unwrap_or_else(|p| p.into_inner());
        if !rates.contains_key(id) && rates.len() >= MAX_FOLLOWED_LINKS {
            rates.retain(|_, b| (b.available(now) as f64) < LINK_BURST);
            if rates.len() >= MAX_FOLLOWED_LINKS {
                rates.clear();
            }
        }
        let bucket = rates.entry(id.to_owned()).or_insert_with(|| {
            hookd_core::limiter::TokenBucket::new(LINK_RATE_PER_S, LINK_BURST, now)
        });
        if bucket.try_take(now) {
            Ok(())
        } else {
            Err(bucket.next_token_ms(now).saturating_sub(now).max(1))
        }
    }

    fn csrf_of(&self, link: &Link) -> String {
        crate::console::session::login_nonce(&self.csrf_key, &link.id)
    }
}

/// `/portal/jwks.json` and every page under a link.
pub(crate) fn router(portal: Arc<Portal>) -> Router {
    Router::new()
        .route("/portal/jwks.json", get(jwks))
        .route("/portal/{token}", any(enter))
        .route("/portal/{token}/", any(enter))
        .route("/portal/{token}/{*rest}", any(enter))
        .with_state(portal)
}

async fn jwks(State(portal): State<Arc<Portal>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        portal.links.jwks().to_string(),
    )
        .into_response()
}

/// The pages a link reaches (`{}`: any one segment), by method; anything else is 404.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/"),
    ("GET", "/assets/console.css"),
    ("GET", "/assets/theme.css"),
    ("GET", "/endpoints"),
    ("GET", "/new-endpoint"),
    ("POST", "/new-endpoint"),
    ("GET", "/endpoints/{}"),
    ("GET", "/endpoints/{}/edit"),
    ("POST", "/endpoints/{}/edit"),
    ("POST", "/endpoints/{}/pause"),
    ("POST", "/endpoints/{}/resume"),
    ("POST", "/endpoints/{}/rotate"),
    ("POST", "/endpoints/{}/test"),
    ("GET", "/dead-letters"),
    ("POST", "/dead-letters/replay"),
    ("POST", "/dead-letters/purge"),
    ("GET", "/messages"),
    ("GET", "/messages/{}"),
    ("GET", "/replays"),
    ("POST", "/replays"),
    ("POST", "/replays/{}/{}"),
    ("GET", "/find"),
    ("GET", "/event-types"),
    ("GET", "/subscriptions"),
    ("POST", "/subscriptions"),
    ("POST", "/subscriptions/{}/delete"),
];

fn reachable(method: &Method, rest: &str) -> bool {
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    let segments: Vec<&str> = rest.split('/').collect();
    ROUTES.iter().any(|(m, pattern)| {
        *m == method && {
            let want: Vec<&str> = pattern.split('/').collect();
            want.len() == segments.len()
                && want
                    .iter()
                    .zip(&segments)
                    .all(|(w, s)| (*w == "{}" && !s.is_empty()) || w == s)
        }
    })
}

async fn enter(State(portal): State<Arc<Portal>>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let after = path.strip_prefix("/portal/").unwrap_or_default();
    let (token, rest) = match after.find('/') {
        Some(i) => (&after[..i], &after[i..]),
        None => (after, ""),
    };
    let directory = portal.engine.tenants();
    let global = Framing::new(&portal.frame_ancestors, &[], "");
    let link = match portal.links.open(token, &directory) {
        Ok(link) => link,
        Err(Refused::Expired { refresh_url })
            if !refresh_url.is_empty() && request.method() == Method::GET =>
        {
            return global.apply(redirect(&refresh_url));
        }
        Err(why) => {
            let status = match why {
                Refused::Invalid => StatusCode::UNAUTHORIZED,
                _ => StatusCode::FORBIDDEN,
            };
            tracing::info!(path = %rest, why = %why, "portal link refused");
            return global.apply(refusal(status, &why.to_string()));
        }
    };
    if let Err(wait_ms) = portal.admit(&link.id) {
        let mut refused = refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "this link is making requests faster than the portal answers them; wait a moment",
        );
        if let Ok(v) = HeaderValue::from_str(&wait_ms.div_ceil(1_000).to_string()) {
            refused.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return global.apply(refused);
    }
    let base = format!("/portal/{token}");
    if rest.is_empty() {
        // The pages' relative forms need the trailing slash.
        return global.apply(redirect(&format!("{base}/")));
    }
    let Some(tenant) = directory.get(link.tenant) else {
        return global.apply(refusal(
            StatusCode::FORBIDDEN,
            &Refused::NoTenant.to_string(),
        ));
    };
    let settings = tenant.record.portal.clone().unwrap_or_default();
    let framing = Framing::new(
        &portal.frame_ancestors,
        &settings.frame_ancestors,
        &settings.logo_url,
    );
    if !reachable(request.method(), rest) {
        return framing.apply(refusal(StatusCode::NOT_FOUND, "no such page in the portal"));
    }
    if rest == "/assets/theme.css" {
        return framing.apply(theme(&settings.accent_color));
    }
    let title = [
        settings.title.as_str(),
        tenant.record.display_name.as_str(),
        tenant.record.name.as_str(),
    ]
    .into_iter()
    .find(|t| !t.is_empty())
    .unwrap_or_default()
    .to_owned();
    let caller = crate::auth::Principal::of_portal(
        format!(
            "portal:{}",
            if link.subject.is_empty() {
                &link.id
            } else {
                &link.subject
            }
        ),
        link.tenant,
        &link.scopes,
        link.destinations.clone(),
    );
    let session = Session {
        caller: Arc::new(caller),
        tenant: Arc::new(std::sync::Mutex::new(crate::console::session::Viewed {
            id: link.tenant,
            name: link.tenant_name.clone(),
        })),
        signed_in: true,
        csrf: portal.csrf_of(&link),
        portal: Some(Arc::new(PortalView {
            link,
            title,
            logo_url: settings.logo_url.clone(),
        })),
    };
    let (mut parts, body) = request.into_parts();
    let body = if parts.method == Method::GET || parts.method == Method::HEAD {
        body
    } else if !session.caller.may(crate::auth::Scope::Admin) {
        // The pages call the API in process, past the layer that checks scopes: every
        // form changes something, which a `read` link may not.
        return framing.apply(refusal(
            StatusCode::FORBIDDEN,
            "this link may look only (scope read): ask for a link that may change things",
        ));
    } else {
        match crate::console::checked_form(&session, &parts, body).await {
            Ok(body) => body,
            Err(refused) => return framing.apply(rebased(refused, &base).await),
        }
    };
    let inner = match parts.uri.query() {
        Some(q) => format!("/ui{rest}?{q}"),
        None => format!("/ui{rest}"),
    };
    let inner = if rest == "/" {
        inner.replacen("/ui/", "/ui", 1)
    } else {
        inner
    };
    let Ok(uri) = inner.parse() else {
        return framing.apply(refusal(StatusCode::BAD_REQUEST, "not a valid path"));
    };
    parts.uri = uri;
    // Fresh extensions: the outer route's path parameters (the token, the rest) must not
    // reach the pages' own `Path` extractors; the session is all they need.
    parts.extensions = http::Extensions::new();
    parts.extensions.insert(session);
    let mut pages = portal.pages.clone();
    let response =
        match tower_service::Service::call(&mut pages, Request::from_parts(parts, body)).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
    framing.apply(rebased(response, &base).await)
}

/// The answer with its `/ui` paths under `base`: the `Location` of a redirect, and the
/// attribute values of an HTML page (see the module's notes).
async fn rebased(response: Response, base: &str) -> Response {
    let (mut parts, body) = response.into_parts();
    if let Some(to) = parts
        .headers
        .get(header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("/ui"))
        .map(|rest| rebase_path(rest, base))
        && let Ok(v) = HeaderValue::from_str(&to)
    {
        parts.headers.insert(header::LOCATION, v);
    }
    let html = parts
        .headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/html"));
    if !html {
        return Response::from_parts(parts, body);
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PAGE_BYTES).await else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the page is larger than the portal shows",
        );
    };
    let page = String::from_utf8_lossy(&bytes);
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(rebase_page(&page, base)))
}

/// `rest` (what followed `/ui`) under `base`.
fn rebase_path(rest: &str, base: &str) -> String {
    if rest.is_empty() || rest.starts_with('?') {
        format!("{base}/{rest}")
    } else {
        format!("{base}{rest}")
    }
}

/// Every attribute value `"/ui..."` of a page, under `base`.
fn rebase_page(page: &str, base: &str) -> String {
    const MARK: &str = "=\"/ui";
    let mut out = String::with_capacity(page.len() + 64 * base.len());
    let mut rest = page;
    while let Some(i) = rest.find(MARK) {
        let after = &rest[i + MARK.len()..];
        out.push_str(&rest[..i + 2]);
        match after.as_bytes().first() {
            Some(b'/') => out.push_str(base),
            Some(b'"' | b'?') => {
                out.push_str(base);
                out.push('/');
            }
            // `="/uix`: not a console path.
            _ => out.push_str("/ui"),
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// A refusal as the portal shows it: a plain page with no link into anything (the holder
/// of a link that does not work has nowhere in hookd to go).
fn refusal(status: StatusCode, why: &str) -> Response {
    let page = maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Portal: refused" }
            }
            body {
                main {
                    h1 { "This page cannot be shown" }
                    p.error { (why) }
                    p { "Ask the site that gave you this link for a new one." }
                }
            }
        }
    };
    (status, axum::response::Html(page.into_string())).into_response()
}

fn redirect(to: &str) -> Response {
    match HeaderValue::from_str(to) {
        Ok(v) => (StatusCode::SEE_OTHER, [(header::LOCATION, v)]).into_response(),
        Err(_) => refusal(StatusCode::BAD_REQUEST, "not a valid redirect"),
    }
}

/// The tenant's accent colour over the console's stylesheet.
fn theme(accent: &str) -> Response {
    let css = if is_colour(accent) {
        format!(
            ":root {{ --accent: {accent}; }}\n\
             header nav a.current, header nav a:hover {{ border-bottom-color: {accent}; }}\n\
             button[type=submit] {{ border-color: {accent}; }}\n"
        )
    } else {
        String::new()
    };
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        css,
    )
        .into_response()
}

/// The security headers of every portal answer.
struct Framing {
    csp: String,
    deny: bool,
}

impl Framing {
    fn new(global: &[String], tenant: &[String], logo_url: &str) -> Self {
        let mut ancestors: Vec<&str> = global.iter().chain(tenant).map(String::as_str).collect();
        ancestors.sort_unstable();
        ancestors.dedup();
        let logo = url::Url::parse(logo_url)
            .ok()
            .map(|u| u.origin().ascii_serialization())
            .filter(|o| o != "null");
        let csp = format!(
            "default-src 'none'; style-src 'self'; img-src 'self'{}; form-action 'self'; \
             frame-ancestors {}; base-uri 'none'",
            logo.map(|o| format!(" {o}")).unwrap_or_default(),
            if ancestors.is_empty() {
                "'none'".to_owned()
            } else {
                ancestors.join(" ")
            }
        );
        Self {
            csp,
            deny: ancestors.is_empty(),
        }
    }

    fn apply(&self, mut response: Response) -> Response {
        let headers = response.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&self.csp) {
            headers.insert(header::CONTENT_SECURITY_POLICY, v);
        }
        if self.deny {
            headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        } else {
            headers.remove(header::X_FRAME_OPTIONS);
        }
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_paths_move_under_the_link_and_nothing_else_does() {
        let base = "/portal/T";
        let page = r#"<a href="/ui">o</a><a href="/ui/endpoints/a%20b">e</a><form action="/ui?x=1"></form><a href="/uix">n</a>"#;
        let out = rebase_page(page, base);
        assert_eq!(
            out,
            r#"<a href="/portal/T/">o</a><a href="/portal/T/endpoints/a%20b">e</a><form action="/portal/T/?x=1"></form><a href="/uix">n</a>"#
        );
        // Text a tenant sets is escaped by maud first, so it never holds `="`.
        let escaped = maud::html! { p title=(r#"x" href="/ui/tenants"#) { "t" } }.into_string();
        assert!(
            !rebase_page(&escaped, base).contains("/portal/"),
            "{escaped}"
        );
        assert_eq!(rebase_path("", base), "/portal/T/");
        assert_eq!(rebase_path("?notice=a", base), "/portal/T/?notice=a");
        assert_eq!(rebase_path("/endpoints", base), "/portal/T/endpoints");
    }

    #[test]
    fn only_a_tenants_pages_are_reachable() {
        for (m, p) in [
            (Method::GET, "/"),
            (Method::GET, "/endpoints/a"),
            (Method::POST, "/endpoints/a/rotate"),
            (Method::HEAD, "/event-types"),
            (Method::POST, "/dead-letters/replay"),
        ] {
            assert!(reachable(&m, p), "{m} {p}");
        }
        for (m, p) in [
            (Method::GET, "/tenants"),
            (Method::POST, "/tenant"),
            (Method::GET, "/sources"),
            (Method::GET, "/destinations"),
            (Method::GET, "/login"),
            (Method::POST, "/logout"),
            (Method::GET, "/endpoints//edit"),
            (Method::DELETE, "/endpoints/a"),
            (Method::GET, "/endpoints/a/rotate"),
        ] {
            assert!(!reachable(&m, p), "{m} {p}");
        }
    }
}
