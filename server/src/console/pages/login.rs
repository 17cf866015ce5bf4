//! Logging in and out: the login form (rate-limited, with its own CSRF cookie) and the session's end.

use super::*;

#[derive(Debug, Default, Deserialize)]
pub(crate) struct LoginQuery {
    #[serde(default)]
    next: String,
}

/// Where to go after login: a console path, never another site.
pub(super) fn safe_next(next: &str) -> &str {
    if next.starts_with("/ui") && !next.starts_with("//") && !next.contains('\\') {
        next
    } else {
        "/ui"
    }
}

pub(crate) async fn login_form(State(c): Shared, Query(q): Query<LoginQuery>) -> Response {
    login_page(&c, &q.next, StatusCode::OK, "")
}

pub(super) fn login_page(c: &Console, next: &str, status: StatusCode, error: &str) -> Response {
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
pub(crate) struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    nonce: String,
    #[serde(default)]
    next: String,
}

pub(crate) async fn login(
    State(c): Shared,
    conn: Option<axum::Extension<crate::listen::ConnInfo>>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let peer = conn.map(|axum::Extension(c)| c.remote.ip());
    if !c.logins.allowed(peer) {
        tracing::warn!(
            ?peer,
            "console login refused: too many failed logins from this address"
        );
        return login_page(
            &c,
            &f.next,
            StatusCode::TOO_MANY_REQUESTS,
            "Too many failed logins from this address; wait a minute.",
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
            let failures = c.logins.failed(peer);
            tracing::warn!(
                caller,
                ?peer,
                failures,
                "console login refused: no admin scope"
            );
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
            let failures = c.logins.failed(peer);
            tracing::warn!(
                ?peer,
                failures,
                "console login refused: unknown token (failures this minute, from every address)"
            );
            return login_page(
                &c,
                &f.next,
                StatusCode::UNAUTHORIZED,
                "That token is not valid.",
            );
        }
    };
    // The console is an operator's: its pages read every tenant's objects and figures.
    if caller.tenant.is_some() {
        tracing::warn!(caller = %caller.name, "console login refused: a tenant's token");
        return login_page(
            &c,
            &f.next,
            StatusCode::FORBIDDEN,
            "A tenant's token cannot sign in to the console: it is an operator's (a token of the config file).",
        );
    }
    tracing::info!(caller = %caller.name, "console login");
    let (id, _) = c.sessions.create(caller, true);
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

pub(crate) async fn logout(State(c): Shared, headers: HeaderMap) -> Response {
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
