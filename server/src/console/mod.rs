//! The web console: `/ui` on the admin HTTP listener, part of the binary.
//!
//! Pages are rendered on the server (maud, which escapes every interpolated value) from
//! hookd's own values, never the wire's: the engine's snapshots (`Stats`, gauges, a
//! destination's detail) and the API's reads in domain form (`api::view`: a message, an
//! endpoint with its secrets summarised, the dead-letter analysis), which GetMessage,
//! GetEndpoint and AnalyzeDeadLetters map to the wire in turn. Writes (create, edit, pause,
//! replay, purge) call [`HookdService`] in process with the logged-in caller in the
//! request's extensions, so their validation, errors (naming the field) and permissions
//! are the API's own. Charts are SVG drawn here; the one stylesheet is compiled in; there
//! is no script (the Content-Security-Policy forbids any).
//!
//! Access: an admin credential. A browser logs in with an admin token and gets a session
//! cookie (`HttpOnly`, `SameSite=Strict`, `Secure` under TLS); a request carrying an admin
//! credential itself (a client certificate, a bearer token, or no `[auth]` configured at
//! all) gets a session on its first GET. Every state-changing action is a POST whose form
//! carries the session's CSRF token, checked here before any handler runs. Without
//! `[auth]` (loopback only) the console answers only to a loopback `Host`, so a page on
//! another site cannot reach it through DNS rebinding.

mod chart;
mod pages;
pub mod session;
mod view;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::api::HookdService;
use crate::auth::{Access, Authenticator, Denied, Scope};
use hookd_core::clock::Clock;
use hookd_engine::EngineHandle;
use session::{COOKIE, Session, Sessions};

/// A form body is at most this large (the edit form is the largest, well under it).
const MAX_FORM_BYTES: usize = 64 * 1024;

/// What the console's handlers share.
#[derive(Debug)]
pub(crate) struct Console {
    api: HookdService,
    engine: EngineHandle,
    auth: Arc<Authenticator>,
    sessions: Sessions,
    /// The key of the login form's nonce (see `session::login_nonce`), made at start.
    login_key: [u8; 32],
    logins: session::LoginLimiter,
    clock: Arc<dyn Clock>,
    /// The admin listener speaks TLS: cookies are `Secure`.
    secure: bool,
    /// The alert thresholds: the console colours health by the same ones.
    alerts: hookd_core::alerts::AlertConfig,
    /// The last dead-letter analysis: (its filter, when, the answer). It reads up to
    /// 100,000 rows, so a reload or the next page within seconds reuses it.
    analysis: std::sync::Mutex<Option<AnalysisEntry>>,
}

type AnalysisEntry = (String, u64, Arc<crate::api::view::DeadAnalysis>);

impl Console {
    pub(crate) fn new(
        api: HookdService,
        engine: EngineHandle,
        auth: Arc<Authenticator>,
        clock: Arc<dyn Clock>,
        secure: bool,
        alerts: hookd_core::alerts::AlertConfig,
    ) -> Self {
        Self {
            api,
            engine,
            auth,
            sessions: Sessions::new(clock.clone()),
            login_key: rand::random(),
            logins: session::LoginLimiter::new(clock.clone()),
            clock,
            secure,
            alerts,
            analysis: std::sync::Mutex::new(None),
        }
    }

    /// Drops the cached analysis (a replay or purge changed the dead letters).
    fn forget_analysis(&self) {
        *self.analysis.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// The console's routes, behind [`guard`].
pub(crate) fn router(console: Arc<Console>) -> Router {
    routes()
        .layer(axum::middleware::from_fn_with_state(console.clone(), guard))
        .with_state(console)
}

/// The console's pages without a guard: what a portal link's requests reach once the
/// portal has checked the link and made their session (`crate::portal`).
pub(crate) fn pages(console: Arc<Console>) -> Router {
    routes().with_state(console)
}

fn routes() -> Router<Arc<Console>> {
    Router::new()
        .route("/ui", get(pages::overview))
        .route("/ui/", get(pages::overview))
        .route("/ui/login", get(pages::login_form).post(pages::login))
        .route("/ui/logout", post(pages::logout))
        .route("/ui/assets/console.css", get(stylesheet))
        .route("/ui/endpoints", get(pages::endpoints))
        .route(
            "/ui/new-endpoint",
            get(pages::new_endpoint_form).post(pages::create_endpoint),
        )
        .route("/ui/endpoints/{name}", get(pages::endpoint))
        .route(
            "/ui/endpoints/{name}/edit",
            get(pages::edit_endpoint_form).post(pages::save_endpoint),
        )
        .route("/ui/endpoints/{name}/pause", post(pages::pause))
        .route("/ui/endpoints/{name}/resume", post(pages::resume))
        .route("/ui/endpoints/{name}/rotate", post(pages::rotate_secret))
        .route("/ui/endpoints/{name}/test", post(pages::send_test_event))
        .route("/ui/destinations", get(pages::destinations))
        .route("/ui/tenants", get(pages::tenants))
        .route("/ui/tenant", post(pages::switch_tenant))
        .route("/ui/dead-letters", get(pages::dead_letters))
        .route("/ui/dead-letters/replay", post(pages::replay))
        .route("/ui/dead-letters/purge", post(pages::purge))
        .route("/ui/messages", get(pages::search))
        .route(
            "/ui/replays",
            get(pages::replays).post(pages::replay_search),
        )
        .route("/ui/replays/{id}/{action}", post(pages::replay_action))
        .route("/ui/messages/{id}", get(pages::message))
        .route("/ui/find", get(pages::find))
        .route("/ui/sources", get(pages::sources))
        .route("/ui/event-types", get(pages::event_types))
        .route(
            "/ui/subscriptions",
            get(pages::subscriptions).post(pages::save_subscription),
        )
        .route(
            "/ui/subscriptions/{name}/delete",
            post(pages::delete_subscription),
        )
}

async fn stylesheet() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        include_str!("console.css"),
    )
        .into_response()
}

/// In front of every console route: the Host check (without `[auth]`), the session (or a
/// redirect to the login page), the CSRF token of every POST, and the security headers of
/// every answer.
async fn guard(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    if !console.auth.enabled() && !loopback_host(request.headers()) {
        return refuse(
            StatusCode::FORBIDDEN,
            "with no [auth] configured, the console answers only to a loopback Host \
             (localhost, 127.0.0.1, [::1]); configure tokens to reach it by another name",
        );
    }
    let path = request.uri().path();
    let mut response = if path == "/ui/login" || path.starts_with("/ui/assets/") {
        next.run(request).await
    } else {
        with_session(&console, request, next).await
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn with_session(console: &Console, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let read_only = parts.method == Method::GET || parts.method == Method::HEAD;
    let mut started = None;
    let session = match session::cookie(&parts.headers, COOKIE)
        .and_then(|id| console.sessions.get(id))
    {
        Some(s) => s,
        None if read_only => {
            // A request that carries an admin credential itself gets a session; a browser
            // without one logs in.
            match console.auth.check_request(
                Access::Scope(Scope::Admin),
                &parts.headers,
                &parts.extensions,
            ) {
                // The console is an operator's: its pages read every tenant's objects.
                Ok(caller) if caller.tenant.is_some() => {
                    return refuse(
                        StatusCode::FORBIDDEN,
                        "a tenant's token cannot use the console: it is an operator's (a token of the config file)",
                    );
                }
                Ok(caller) => {
                    let (id, s) = console.sessions.create(caller, console.auth.enabled());
                    started = Some(id);
                    s
                }
                Err(Denied::PermissionDenied { caller, .. }) => {
                    return refuse(
                        StatusCode::FORBIDDEN,
                        &format!("`{caller}` lacks the admin scope the console needs"),
                    );
                }
                Err(Denied::RateLimited { .. }) => {
                    return refuse(
                        StatusCode::TOO_MANY_REQUESTS,
                        "over this caller's request rate",
                    );
                }
                Err(Denied::Unauthenticated) => {
                    let next = parts
                        .uri
                        .path_and_query()
                        .map_or("/ui", |p| p.as_str())
                        .to_owned();
                    let to = format!(
                        "/ui/login?{}",
                        url::form_urlencoded::Serializer::new(String::new())
                            .append_pair("next", &next)
                            .finish()
                    );
                    return see_other(&to);
                }
            }
        }
        None => {
            return refuse(
                StatusCode::FORBIDDEN,
                "no console session (it expired, or hookd restarted): log in again and resend the form",
            );
        }
    };
    let body = if read_only {
        body
    } else {
        match checked_form(&session, &parts, body).await {
            Ok(body) => body,
            Err(refused) => return refused,
        }
    };
    parts.extensions.insert(session);
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if let Some(id) = started
        && let Ok(v) = HeaderValue::from_str(&session::set_cookie(
            COOKIE,
            &id,
            console.secure,
            session::MAX_AGE_MS / 1_000,
        ))
    {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

/// A POST's form, read (at most [`MAX_FORM_BYTES`]) once its CSRF token matches the
/// session's; a browser's cross-site request (`Sec-Fetch-Site: cross-site`) is refused
/// whatever it carries.
pub(crate) async fn checked_form(
    session: &Session,
    parts: &http::request::Parts,
    body: Body,
) -> Result<Body, Response> {
    if parts
        .headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "csrf: a form sent from another site is refused",
        ));
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
        return Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "form: larger than the console accepts (64 KiB)",
        ));
    };
    let presented = url::form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    if !session::same_token(&presented, &session.csrf) {
        tracing::warn!(
            caller = %session.caller.name,
            path = %loggable(parts.uri.path()),
            "console POST refused: missing or wrong CSRF token"
        );
        return Err(refuse(
            StatusCode::FORBIDDEN,
            "csrf: the form's token is missing or does not match this session; reload the page and try again",
        ));
    }
    Ok(Body::from(bytes))
}

/// A path as logs may hold it: a portal link's token (a credential until it expires)
/// left out.
fn loggable(path: &str) -> std::borrow::Cow<'_, str> {
    match path.strip_prefix("/portal/") {
        Some(rest) => format!("/portal/…{}", rest.find('/').map_or("", |i| &rest[i..])).into(),
        None => path.into(),
    }
}

/// `localhost`, an IPv4 loopback address or `[::1]`, with or without a port.
fn loopback_host(headers: &http::HeaderMap) -> bool {
    crate::http::host_name(headers).is_some_and(|name| {
        name.eq_ignore_ascii_case("localhost")
            || name
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

/// A short plain page for refusals that happen before any handler.
pub(crate) fn refuse(status: StatusCode, why: &str) -> Response {
    let body = view::page(
        "Refused",
        view::Nav::None,
        None,
        "",
        maud::html! {
            p.error { (why) }
            p { a href="/ui" { "Back to the console" } }
        },
    );
    (status, axum::response::Html(body.into_string())).into_response()
}

fn see_other(location: &str) -> Response {
    match HeaderValue::from_str(location) {
        Ok(v) => (StatusCode::SEE_OTHER, [(header::LOCATION, v)]).into_response(),
        Err(_) => refuse(
            StatusCode::BAD_REQUEST,
            "the redirect target is not a valid header",
        ),
    }
}

/// A tonic request from the console, as `session`'s caller, acting on the tenant it views.
fn call<T>(session: &Session, message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.extensions_mut().insert(session.caller.clone());
    let viewed = session.viewed();
    if !viewed.id.is_default()
        && let Ok(v) = viewed.name.parse()
    {
        r.metadata_mut()
            .insert(crate::api::tenants::TENANT_HEADER, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(v: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(header::HOST, v.parse().unwrap());
        h
    }

    #[test]
    fn logs_never_hold_a_portal_token() {
        assert_eq!(
            loggable("/portal/eyJ.a.b/endpoints/x/pause"),
            "/portal/…/endpoints/x/pause"
        );
        assert_eq!(loggable("/portal/eyJ.a.b"), "/portal/…");
        assert_eq!(loggable("/ui/endpoints"), "/ui/endpoints");
    }

    #[test]
    fn only_loopback_hosts_pass_without_auth() {
        for ok in [
            "localhost",
            "localhost:7701",
            "127.0.0.1:7701",
            "127.8.0.1",
            "[::1]:7701",
            "[::1]",
        ] {
            assert!(loopback_host(&host(ok)), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7701",
            "10.0.0.1:80",
            "localhost.evil.example",
            "[::2]:1",
        ] {
            assert!(!loopback_host(&host(bad)), "{bad}");
        }
        assert!(!loopback_host(&http::HeaderMap::new()));
    }
}
