//! The customer portal (issue #52) over plain HTTP: a link opens its tenant's pages and
//! nothing else, is refused once expired, altered, revoked or its tenant gone, carries
//! the tenant's framing and look, and its forms need the link's CSRF token. The browser
//! half (iframes, every request a page makes) is in `console_browser` tests.

use hookd::Config;
use hookd::auth::token_hash;
use hookd_client::{Client, Options, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_core::names::hex;

use crate::console::{Answer, Http};
use crate::harness::{TestServer, test_config};
use crate::sink::{Reply, Sink};

pub(crate) const ADMIN: &str = "portal-admin-token-0123456789";
/// Text a tenant can set that would run script if a page did not escape it.
const XSS: &str = r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>"#;

pub(crate) fn secured(dir: &std::path::Path) -> Config {
    let toml = format!(
        "[[auth.tokens]]\nname = \"ops\"\nsha256 = \"{}\"\nscopes = [\"admin\"]\n\
         [portal]\nframe_ancestors = [\"https://saas.example\"]\n",
        hex(&token_hash(ADMIN)),
    );
    let parsed = Config::from_toml(&toml).unwrap();
    Config {
        auth: parsed.auth,
        portal: parsed.portal,
        ..test_config(dir)
    }
}

pub(crate) async fn admin(server: &TestServer) -> Client {
    Client::connect_with(
        server.grpc.clone(),
        Options {
            token: Some(ADMIN.into()),
            ..Options::default()
        },
    )
    .await
    .unwrap()
}

fn on<T>(tenant: &str, message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut()
        .insert("x-hookd-tenant", tenant.parse().unwrap());
    r
}

/// Tenants acme (with portal settings, and XSS in every text it can set) and globex, an
/// endpoint each (acme's to `sink`) and a second acme endpoint.
pub(crate) async fn two_tenants(c: &mut Client, sink: &Sink) {
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "acme".into(),
                display_name: XSS.into(),
                portal: Some(pb::TenantPortal {
                    frame_ancestors: vec!["https://app.acme.example".into()],
                    title: format!("Acme {XSS}"),
                    logo_url: "https://cdn.acme.example/logo.png".into(),
                    accent_color: "#0a7c4f".into(),
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "globex".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    for (tenant, name, url) in [
        ("acme", "orders", sink.url("/orders")),
        ("acme", "invoices", sink.url("/invoices")),
        ("globex", "globex-secret-hook", sink.url("/globex")),
    ] {
        c.raw()
            .put_endpoint(on(
                tenant,
                pb::PutEndpointRequest {
                    endpoint: Some(pb::Endpoint {
                        name: name.into(),
                        url,
                        description: XSS.into(),
                        secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
                        ..Default::default()
                    }),
                },
            ))
            .await
            .unwrap();
    }
}

pub(crate) async fn link(
    c: &mut Client,
    r: pb::CreatePortalLinkRequest,
) -> pb::CreatePortalLinkResponse {
    c.raw().create_portal_link(r).await.unwrap().into_inner()
}

/// The link's path on the server (`/portal/{token}/`).
pub(crate) fn path_of(url: &str) -> String {
    let at = url.find("/portal/").unwrap();
    url[at..].to_owned()
}

/// Every `href`, `src` and `action` of a page.
fn targets(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\"", "action=\""] {
        let mut rest = page;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            out.push(rest.split('"').next().unwrap().to_owned());
        }
    }
    out
}

fn assert_only_under(page: &Answer, base: &str) {
    for t in targets(&page.body) {
        assert!(
            t.starts_with(base) || t == "https://cdn.acme.example/logo.png",
            "{t} leaves the link's pages:\n{}",
            page.body
        );
    }
}

#[tokio::test]
async fn portal_link_opens_its_tenants_pages_only_and_acts_as_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(Reply::Status(200)).await;
    let server =
        TestServer::start_with(secured(dir.path()), ManualClock::new(SystemClock.now_ms())).await;
    let mut c = admin(&server).await;
    two_tenants(&mut c, &sink).await;
    let made = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            scopes: vec!["admin".into()],
            subject: format!("user-7 {XSS}"),
            ..Default::default()
        },
    )
    .await;
    assert!(
        made.url
            .starts_with(&format!("http://{}/portal/", server.http)),
        "{}",
        made.url
    );
    let base = path_of(&made.url);
    let base = base.trim_end_matches('/');
    let http = Http::new(server.http);

    // The overview: the tenant's look and framing, no script, nothing stored escapes.
    let page = http.get(&format!("{base}/"), "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csp = page.header("content-security-policy");
    assert!(
        csp.contains("frame-ancestors https://app.acme.example https://saas.example")
            && csp.contains("default-src 'none'")
            && !csp.contains("script-src")
            && csp.contains("img-src 'self' https://cdn.acme.example"),
        "{csp}"
    );
    assert_eq!(page.header("x-frame-options"), "");
    assert_eq!(page.header("referrer-policy"), "no-referrer");
    assert_eq!(page.header("set-cookie"), "", "the link is the session");
    assert!(!page.body.contains("<script") && !page.body.contains("<img src=x"));
    assert!(page.body.contains("Acme &lt;img"), "{}", page.body);
    assert!(!page.body.contains("Storage") && !page.body.contains("Tenants"));
    assert_only_under(&page, base);
    let theme = http.get(&format!("{base}/assets/theme.css"), "").await;
    assert!(theme.body.contains("--accent: #0a7c4f"), "{}", theme.body);

    // Its endpoints, never globex's; operator pages are not there.
    let list = http.get(&format!("{base}/endpoints"), "").await;
    assert!(
        list.body.contains("orders") && !list.body.contains("globex-secret-hook"),
        "{}",
        list.body
    );
    assert!(!list.body.contains("<script") && !list.body.contains("<img src=x"));
    assert_only_under(&list, base);
    for (path, status) in [
        ("/endpoints/globex-secret-hook", 404),
        ("/tenants", 404),
        ("/sources", 404),
        ("/destinations", 404),
        ("/login", 404),
    ] {
        let a = http.get(&format!("{base}{path}"), "").await;
        assert_eq!(a.status, status, "{path}: {}", a.body);
        assert!(!a.body.contains(&sink.url("/globex")), "{path}: {}", a.body);
    }
    let detail = http.get(&format!("{base}/endpoints/orders"), "").await;
    assert_eq!(detail.status, 200, "{}", detail.body);
    assert_only_under(&detail, base);
    let csrf = detail.field("csrf");

    // Forms need the link's token, and no browser may send them from another site.
    let pause = format!("{base}/endpoints/orders/pause");
    let bare = http.post(&pause, "", &[("back", "detail")]).await;
    assert_eq!(bare.status, 403, "{}", bare.body);
    let cross = http
        .send(
            "POST",
            &pause,
            &[("sec-fetch-site", "cross-site")],
            &format!("csrf={csrf}"),
        )
        .await;
    assert_eq!(cross.status, 403, "{}", cross.body);
    let paused = http.post(&pause, "", &[("csrf", &csrf)]).await;
    assert_eq!(paused.status, 303, "{}", paused.body);
    assert!(
        paused
            .header("location")
            .starts_with(&format!("{base}/endpoints")),
        "{}",
        paused.header("location")
    );
    let got = c
        .raw()
        .get_endpoint(on(
            "acme",
            pb::GetEndpointRequest {
                name: "orders".into(),
                reveal_secrets: false,
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap();
    assert!(got.paused);
    http.post(
        &format!("{base}/endpoints/orders/resume"),
        "",
        &[("csrf", &csrf)],
    )
    .await;

    // A test event reaches the endpoint's receiver; a rotation adds a secret shown once.
    let sent = http
        .post(
            &format!("{base}/endpoints/orders/test"),
            "",
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(sent.status, 303, "{}", sent.body);
    let received = sink.wait_for(1).await;
    assert_eq!(received[0].uri.path(), "/orders");
    assert!(String::from_utf8_lossy(&received[0].body).contains("hookd.test"));
    // The endpoint's page lists it; its page shows the attempt and the payload.
    let detail = http.get(&format!("{base}/endpoints/orders"), "").await;
    let mark = format!("href=\"{base}/messages/");
    let at = detail
        .body
        .find(&mark)
        .unwrap_or_else(|| panic!("{}", detail.body));
    let id = detail.body[at + mark.len()..]
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let message = http.get(&format!("{base}/messages/{id}"), "").await;
    assert_eq!(message.status, 200, "{}", message.body);
    assert!(message.body.contains("hookd.test"), "{}", message.body);
    assert_only_under(&message, base);
    // The tenant's search finds it too, its links under the link's base.
    let found = http
        .get(&format!("{base}/messages?destination=orders"), "")
        .await;
    assert_eq!(found.status, 200, "{}", found.body);
    assert!(found.body.contains(&id), "{}", found.body);
    assert_only_under(&found, base);
    let rotated = http
        .post(
            &format!("{base}/endpoints/orders/rotate"),
            "",
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    assert!(rotated.body.contains("whsec_"), "{}", rotated.body);
    let got = c
        .raw()
        .get_endpoint(on(
            "acme",
            pb::GetEndpointRequest {
                name: "orders".into(),
                reveal_secrets: true,
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap();
    assert_eq!(got.secrets.len(), 2, "{got:?}");

    // A read-only link cannot change anything; a link limited to one endpoint sees only it.
    let viewer = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            ..Default::default()
        },
    )
    .await;
    let vbase = path_of(&viewer.url);
    let vbase = vbase.trim_end_matches('/');
    let vpage = http.get(&format!("{vbase}/endpoints/orders"), "").await;
    assert_eq!(vpage.status, 200, "{}", vpage.body);
    assert!(
        !vpage.body.contains("method=\"post\""),
        "a read link shows forms: {}",
        vpage.body
    );
    let refused = http
        .post(
            &format!("{vbase}/endpoints/orders/pause"),
            "",
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("look only"), "{}", refused.body);
    let one = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            destinations: vec!["endpoint:invoices".into()],
            ..Default::default()
        },
    )
    .await;
    let obase = path_of(&one.url);
    let obase = obase.trim_end_matches('/');
    let olist = http.get(&format!("{obase}/endpoints"), "").await;
    assert!(
        olist.body.contains("invoices") && !olist.body.contains("orders"),
        "{}",
        olist.body
    );
    for path in [
        "/endpoints/orders",
        "/subscriptions",
        "/dead-letters",
        "/messages",
        "/messages?destination=orders",
    ] {
        let a = http.get(&format!("{obase}{path}"), "").await;
        assert!(
            a.status == 404 || a.status == 403,
            "{path}: {} {}",
            a.status,
            a.body
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn portal_link_is_refused_expired_altered_revoked_or_for_a_tenant_made_again() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(Reply::Status(200)).await;
    let clock = ManualClock::new(SystemClock.now_ms());
    let server = TestServer::start_with(secured(dir.path()), clock.clone()).await;
    let mut c = admin(&server).await;
    two_tenants(&mut c, &sink).await;
    let http = Http::new(server.http);
    let open = |url: String| {
        let http = &http;
        async move { http.get(&path_of(&url), "").await }
    };

    // Expired: with a refresh URL the browser goes there; without, it is told.
    let refreshing = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            expires_in_secs: 60,
            refresh_url: "https://saas.example/portal/refresh?customer=acme".into(),
            ..Default::default()
        },
    )
    .await;
    let plain = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            expires_in_secs: 60,
            ..Default::default()
        },
    )
    .await;
    assert_eq!(open(plain.url.clone()).await.status, 200);
    assert!(plain.expires_unix_ms <= clock.now_ms() + 61_000);
    clock.advance(60_000);
    let a = open(refreshing.url.clone()).await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert_eq!(
        a.header("location"),
        "https://saas.example/portal/refresh?customer=acme"
    );
    let a = open(plain.url.clone()).await;
    assert_eq!(a.status, 403, "{}", a.body);
    assert!(a.body.contains("expired"), "{}", a.body);
    // The refusal can still be shown in the SaaS's frame.
    assert!(
        a.header("content-security-policy")
            .contains("frame-ancestors https://saas.example")
    );

    // Altered: any change to the token is refused, its claims too.
    let good = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            ..Default::default()
        },
    )
    .await;
    let path = path_of(&good.url);
    let token = path.trim_start_matches("/portal/").trim_end_matches('/');
    let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
    assert_eq!(parts.len(), 3);
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let claims = String::from_utf8(b64.decode(&parts[1]).unwrap()).unwrap();
    parts[1] = b64.encode(claims.replace("\"acme\"", "\"globex\""));
    let forged = format!("/portal/{}/", parts.join("."));
    let a = http.get(&forged, "").await;
    assert_eq!(a.status, 401, "{}", a.body);
    let mut flipped = token.to_owned();
    let last = flipped.pop().unwrap();
    flipped.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(
        http.get(&format!("/portal/{flipped}/"), "").await.status,
        401
    );
    assert_eq!(http.get("/portal/not-a-token/", "").await.status, 401);

    // Revoked: one link, then every link made until now; later links open. Both survive a
    // restart, as do the keys.
    let other = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            ..Default::default()
        },
    )
    .await;
    c.raw()
        .revoke_portal_links(pb::RevokePortalLinksRequest {
            tenant: "acme".into(),
            link_id: good.link_id.clone(),
        })
        .await
        .unwrap();
    let a = open(good.url.clone()).await;
    assert_eq!(a.status, 403);
    assert!(a.body.contains("revoked"), "{}", a.body);
    assert_eq!(open(other.url.clone()).await.status, 200);
    let server = server.restart().await;
    let http = Http::new(server.http);
    let mut c = admin(&server).await;
    let reopen = |url: &str| {
        let path = path_of(url);
        let http = &http;
        async move { http.get(&path, "").await }
    };
    assert_eq!(reopen(&good.url).await.status, 403);
    assert_eq!(
        reopen(&other.url).await.status,
        200,
        "keys survive a restart"
    );
    c.raw()
        .revoke_portal_links(pb::RevokePortalLinksRequest {
            tenant: "acme".into(),
            link_id: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(reopen(&other.url).await.status, 403);
    let after = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(reopen(&after.url).await.status, 200);

    // A tenant deleted and made again under its name is another tenant.
    c.raw()
        .delete_tenant(pb::DeleteTenantRequest {
            name: "acme".into(),
            force: true,
        })
        .await
        .unwrap();
    assert_eq!(reopen(&after.url).await.status, 403);
    create_tenant(&mut c, "acme").await;
    let a = reopen(&after.url).await;
    assert_eq!(a.status, 403, "{}", a.body);

    // The public keys verify what hookd signs: the link's `kid` is in the set.
    let jwks = http.get("/portal/jwks.json", "").await;
    let set: serde_json::Value = serde_json::from_str(&jwks.body).unwrap();
    let header = String::from_utf8(
        b64.decode(
            path_of(&after.url)
                .trim_start_matches("/portal/")
                .split('.')
                .next()
                .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let header: serde_json::Value = serde_json::from_str(&header).unwrap();
    assert_eq!(header["alg"], "EdDSA");
    assert!(
        set["keys"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["kid"] == header["kid"] && k["crv"] == "Ed25519"),
        "{set}"
    );
    server.stop().await;
}

#[tokio::test]
async fn portal_calls_and_settings_name_the_field_they_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(Reply::Status(200)).await;
    let server =
        TestServer::start_with(secured(dir.path()), ManualClock::new(SystemClock.now_ms())).await;
    let mut c = admin(&server).await;
    two_tenants(&mut c, &sink).await;
    let bad = |r: pb::CreatePortalLinkRequest| {
        let mut c = c.clone();
        async move { c.raw().create_portal_link(r).await.unwrap_err() }
    };
    let acme = || pb::CreatePortalLinkRequest {
        tenant: "acme".into(),
        ..Default::default()
    };
    for (r, code, field) in [
        (
            pb::CreatePortalLinkRequest {
                expires_in_secs: 86_401,
                ..acme()
            },
            tonic::Code::InvalidArgument,
            "expires_in_secs",
        ),
        (
            pb::CreatePortalLinkRequest {
                scopes: vec!["consume".into()],
                ..acme()
            },
            tonic::Code::InvalidArgument,
            "scopes[0]",
        ),
        (
            pb::CreatePortalLinkRequest {
                destinations: vec!["queue:jobs".into()],
                ..acme()
            },
            tonic::Code::InvalidArgument,
            "destinations[0]",
        ),
        (
            pb::CreatePortalLinkRequest {
                refresh_url: "http://saas.example/refresh".into(),
                ..acme()
            },
            tonic::Code::InvalidArgument,
            "refresh_url",
        ),
        (
            pb::CreatePortalLinkRequest {
                tenant: "nobody".into(),
                ..acme()
            },
            tonic::Code::NotFound,
            "tenant",
        ),
    ] {
        let s = bad(r).await;
        assert_eq!(s.code(), code, "{s:?}");
        assert!(s.message().starts_with(field), "{field}: {}", s.message());
    }
    let s = c
        .raw()
        .revoke_portal_links(pb::RevokePortalLinksRequest {
            tenant: "acme".into(),
            link_id: "x".into(),
        })
        .await
        .unwrap_err();
    assert!(s.message().starts_with("link_id"), "{}", s.message());
    for (portal, field) in [
        (
            pb::TenantPortal {
                frame_ancestors: vec!["https://app.example/path".into()],
                ..Default::default()
            },
            "tenant.portal.frame_ancestors[0]",
        ),
        (
            pb::TenantPortal {
                frame_ancestors: vec!["https://a.example; script-src *".into()],
                ..Default::default()
            },
            "tenant.portal.frame_ancestors[0]",
        ),
        (
            pb::TenantPortal {
                logo_url: "javascript:alert(1)".into(),
                ..Default::default()
            },
            "tenant.portal.logo_url",
        ),
        (
            pb::TenantPortal {
                accent_color: "red;}body{display:none".into(),
                ..Default::default()
            },
            "tenant.portal.accent_color",
        ),
    ] {
        let s = c
            .raw()
            .update_tenant(pb::UpdateTenantRequest {
                tenant: Some(pb::Tenant {
                    name: "globex".into(),
                    portal: Some(portal),
                    ..Default::default()
                }),
            })
            .await
            .unwrap_err();
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(s.message().starts_with(field), "{field}: {}", s.message());
    }
    // A tenant's own admin token mints links for its tenant only.
    let token = c
        .raw()
        .create_token(on(
            "globex",
            pb::CreateTokenRequest {
                token: Some(pb::Token {
                    name: "backend".into(),
                    scopes: vec!["admin".into()],
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .secret;
    let mut globex = Client::connect_with(
        server.grpc.clone(),
        Options {
            token: Some(token),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let s = globex.raw().create_portal_link(acme()).await.unwrap_err();
    assert_eq!(s.code(), tonic::Code::NotFound, "{s:?}");
    let own = globex
        .raw()
        .create_portal_link(pb::CreatePortalLinkRequest::default())
        .await
        .unwrap()
        .into_inner();
    let http = Http::new(server.http);
    let page = http.get(&path_of(&own.url), "").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("globex"), "{}", page.body);
    server.stop().await;
}

/// A page of the SaaS's own that shows `link` in an iframe (served by a loopback receiver:
/// its origin is `http://127.0.0.1:PORT`).
async fn saas_page(link: &str) -> Sink {
    let html = format!(
        "<!DOCTYPE html><html><head><title>SaaS settings</title></head><body>\
         <h1>Your webhooks</h1><iframe id=\"portal\" src=\"{link}\" width=\"1380\" height=\"860\"></iframe>\
         </body></html>"
    );
    Sink::start(Reply::Full(
        200,
        vec![("content-type", "text/html; charset=utf-8".into())],
        html.into_bytes(),
    ))
    .await
}

/// What the page in the browser shows and asked for: no script ran, nothing of globex is
/// on it, and every request it made (the page, its stylesheets, the logo) went to the
/// link's own pages or the tenant's logo.
async fn inert_and_own(b: &fantoccini::Client, base: &str, logo: &str) {
    let seen = b
        .execute(
            "return [window.__pwned === undefined, document.querySelectorAll('script').length, \
              document.body.innerText, \
              performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource')).map(e => e.name)]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(seen[0], true, "a tenant's text ran as script");
    assert_eq!(seen[1], 0, "a page holds a script element");
    let text = seen[2].as_str().unwrap();
    assert!(!text.contains("globex"), "{text}");
    for url in seen[3].as_array().unwrap() {
        let url = url.as_str().unwrap();
        // The browser asks for the origin's favicon on its own (hookd answers 404).
        let favicon = url.ends_with("/favicon.ico") && base.starts_with(&url[..url.len() - 12]);
        assert!(
            url.starts_with(base) || url == logo || favicon,
            "{url} is not one of the link's pages"
        );
    }
}

#[tokio::test]
#[ignore = "needs chromium and chromedriver (HOOKD_CHROMEDRIVER); .ci/run runs it"]
async fn console_browser_portal_shows_one_tenant_framed_only_where_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(Reply::Status(200)).await;
    let clock = ManualClock::new(SystemClock.now_ms());
    let server = TestServer::start_with(secured(dir.path()), clock.clone()).await;
    let mut c = admin(&server).await;
    two_tenants(&mut c, &sink).await;
    // The logo on loopback: the browser fetches it (and nothing else leaves the machine).
    let logo_host = Sink::start(Reply::Full(
        200,
        vec![("content-type", "image/svg+xml".into())],
        br##"<svg xmlns="http://www.w3.org/2000/svg" width="28" height="28"><circle cx="14" cy="14" r="12" fill="#0a7c4f"/></svg>"##.to_vec(),
    ))
    .await;
    let logo = logo_host.url("/logo.svg");
    let made = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            scopes: vec!["admin".into()],
            subject: "jane@acme.example".into(),
            ..Default::default()
        },
    )
    .await;
    let allowed = saas_page(&made.url).await;
    let elsewhere = saas_page(&made.url).await;
    let origin = format!("http://{}", allowed.addr());
    c.raw()
        .update_tenant(pb::UpdateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "acme".into(),
                display_name: XSS.into(),
                portal: Some(pb::TenantPortal {
                    frame_ancestors: vec![origin.clone()],
                    title: format!("Acme {XSS}"),
                    logo_url: logo.clone(),
                    accent_color: "#0a7c4f".into(),
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    // A message with an attempt, and a dead letter, so those pages have rows.
    let mut on_acme = Client::connect_with(
        server.grpc.clone(),
        Options {
            token: Some(ADMIN.into()),
            tenant: Some("acme".into()),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let id = on_acme
        .enqueue(hookd_client::Event::to_endpoint(
            "orders",
            format!("{{\"note\":\"{}\"}}", XSS.replace('"', "'")).into_bytes(),
        ))
        .await
        .unwrap()
        .id;
    sink.wait_for(1).await;

    let driver = crate::console::Driver::start().await;
    let b = driver.browser().await;
    let base = made.url.trim_end_matches('/').to_owned();
    let at = |page: &str| format!("{base}{page}");
    // Every page of the portal, each inert and the tenant's own.
    for (page, name, heading) in [
        ("/", "overview", "Overview"),
        ("/endpoints", "endpoints", "Endpoints"),
        ("/endpoints/orders", "endpoint", "Endpoint orders"),
        ("/subscriptions", "subscriptions", "Subscriptions"),
        ("/event-types", "event-types", "Event types"),
        ("/dead-letters", "dead-letters", "Dead letters"),
    ] {
        b.goto(&at(page)).await.unwrap();
        assert_eq!(
            crate::console::text_of(&b, "main h1").await,
            heading,
            "{page}"
        );
        inert_and_own(&b, &base, &logo).await;
        crate::console::shot(&b, &format!("portal-{name}")).await;
    }
    b.goto(&at(&format!("/messages/{id}"))).await.unwrap();
    assert!(crate::console::text_of(&b, "main h1").await.contains(&id));
    inert_and_own(&b, &base, &logo).await;
    crate::console::shot(&b, "portal-message").await;

    // In an iframe of an allowed origin: shown, and its forms work without any cookie.
    b.goto(&format!("{origin}/settings")).await.unwrap();
    b.enter_frame(0).await.unwrap();
    assert_eq!(crate::console::text_of(&b, "main h1").await, "Overview");
    b.goto(&format!("{origin}/settings")).await.unwrap();
    crate::console::shot(&b, "portal-in-iframe").await;
    b.enter_frame(0).await.unwrap();
    b.find(fantoccini::Locator::Css("nav a[href$='/endpoints']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    crate::console::text_of(&b, "a[href$='/endpoints/orders']").await;
    b.goto(&at("/endpoints/orders")).await.unwrap();
    crate::console::click(&b, "form[action$='/orders/pause'] button").await;
    assert!(
        crate::console::text_of(&b, "p.notice")
            .await
            .contains("Paused orders"),
        "the pause form works"
    );
    assert!(
        b.get_all_cookies().await.unwrap().is_empty(),
        "the portal set a cookie"
    );

    // From any other origin the browser refuses to show it.
    b.goto(&format!("http://{}/settings", elsewhere.addr()))
        .await
        .unwrap();
    b.enter_frame(0).await.unwrap();
    let shown = b
        .execute(
            "return [document.querySelector('main h1') !== null, location.href]",
            vec![],
        )
        .await
        .unwrap();
    // Chromium puts its error page in the frame: the portal is not in it.
    assert_eq!(
        shown[0], false,
        "the portal rendered in a frame of another origin"
    );
    assert!(
        shown[1].as_str().unwrap().starts_with("chrome-error:"),
        "{shown}"
    );
    b.enter_parent_frame().await.unwrap();

    // Altered and revoked links are refused in the browser too.
    let mut altered = made.url.trim_end_matches('/').to_owned();
    let last = altered.pop().unwrap();
    altered.push(if last == 'A' { 'B' } else { 'A' });
    b.goto(&format!("{altered}/")).await.unwrap();
    assert!(
        crate::console::text_of(&b, "p.error")
            .await
            .contains("not valid")
    );
    crate::console::shot(&b, "portal-refused").await;
    c.raw()
        .revoke_portal_links(pb::RevokePortalLinksRequest {
            tenant: "acme".into(),
            link_id: made.link_id.clone(),
        })
        .await
        .unwrap();
    b.goto(&at("/")).await.unwrap();
    assert!(
        crate::console::text_of(&b, "p.error")
            .await
            .contains("revoked")
    );
    // And an expired one (the test's clock moves past its minute).
    let short = link(
        &mut c,
        pb::CreatePortalLinkRequest {
            tenant: "acme".into(),
            expires_in_secs: 60,
            ..Default::default()
        },
    )
    .await;
    b.goto(&short.url).await.unwrap();
    assert_eq!(crate::console::text_of(&b, "main h1").await, "Overview");
    clock.advance(60_000);
    b.goto(&short.url).await.unwrap();
    assert!(
        crate::console::text_of(&b, "p.error")
            .await
            .contains("expired")
    );
    b.close().await.unwrap();
    server.stop().await;
}

/// The README's portal blocks, as pasted, in `sh` with `hookd` on the PATH and `$OPS` an
/// operator's token (the HTTP listener's fixed address in the curl line becomes this
/// server's).
#[tokio::test]
async fn the_readmes_portal_blocks_run_as_pasted() {
    let readme = include_str!("../../README.md");
    let blocks = crate::readme::blocks(readme, crate::readme::PORTAL_SECTION);
    let scripts: Vec<String> = blocks
        .iter()
        .filter(|b| b.lang == "sh")
        .map(|b| b.text.clone())
        .collect();
    assert_eq!(scripts.len(), 2);
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_with(secured(dir.path()), ManualClock::new(SystemClock.now_ms())).await;
    let mut c = admin(&server).await;
    create_tenant(&mut c, "acme").await;
    let script = scripts
        .join("\n")
        .replace("http://127.0.0.1:7701", &format!("http://{}", server.http));
    let stdout = crate::readme::run_as_pasted(script, ADMIN, &server.grpc).await;
    // The CLI's link, the HTTP/JSON answer's, and the tenant's new look.
    assert_eq!(stdout.matches("/portal/").count(), 2, "{stdout}");
    assert!(stdout.contains("\"linkId\""), "{stdout}");
    let acme = c
        .raw()
        .get_tenant(pb::GetTenantRequest {
            name: "acme".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .tenant
        .unwrap();
    let portal = acme.portal.unwrap();
    assert_eq!(portal.frame_ancestors, ["https://app.example.com"]);
    assert_eq!(portal.accent_color, "#0a7c4f");
    server.stop().await;
}

/// Keys rotate: a link keeps opening under the key that signed it while a newer one signs,
/// and a key no unexpired link can need is deleted. Keys are sealed under `[secrets]` keys
/// (a hookd started without them cannot read the key, and refuses its links) and open
/// again with them after a restart.
#[tokio::test]
async fn portal_keys_rotate_are_sealed_and_outlive_a_restart() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let keys = tempfile::tempdir().unwrap();
    let file = keys.path().join("k1.key");
    std::fs::write(
        &file,
        base64::engine::general_purpose::STANDARD.encode([7u8; 32]),
    )
    .unwrap();
    let extra = Config::from_toml(&format!(
        "[portal]\nkey_rotation_secs = 60\n[secrets]\nkeys = [{{ id = \"k1\", file = \"{}\" }}]\n",
        file.display()
    ))
    .unwrap();
    let sealed = Config {
        portal: extra.portal.clone(),
        secrets: extra.secrets.clone(),
        ..secured(dir.path())
    };
    let clock = ManualClock::new(SystemClock.now_ms());
    let server = TestServer::start_with(sealed.clone(), clock.clone()).await;
    let mut c = admin(&server).await;
    create_tenant(&mut c, "acme").await;
    let kid = |url: &str| {
        let path = path_of(url);
        let header = path
            .trim_start_matches("/portal/")
            .split('.')
            .next()
            .unwrap();
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&header).unwrap()["kid"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let mint = |c: &mut Client| {
        let mut c = c.clone();
        async move {
            link(
                &mut c,
                pb::CreatePortalLinkRequest {
                    tenant: "acme".into(),
                    ..Default::default()
                },
            )
            .await
        }
    };
    let http = Http::new(server.http);
    let first = mint(&mut c).await;
    assert_eq!(
        kid(&mint(&mut c).await.url),
        kid(&first.url),
        "one key signs until it is due"
    );
    clock.advance(61_000);
    let second = mint(&mut c).await;
    assert_ne!(
        kid(&second.url),
        kid(&first.url),
        "a new key after key_rotation_secs"
    );
    assert_eq!(http.get(&path_of(&first.url), "").await.status, 200);
    let mut both = vec![kid(&first.url), kid(&second.url)];
    both.sort();
    assert_eq!(kids_of(&http).await, both);
    // A day and a rotation later no link of either key can be unexpired: both go.
    clock.advance((86_400 + 61) * 1_000);
    let third = mint(&mut c).await;
    assert_eq!(kids_of(&http).await, vec![kid(&third.url)]);
    assert_eq!(http.get(&path_of(&third.url), "").await.status, 200);

    // Without the [secrets] key the stored key cannot be read: its links are refused.
    server.stop().await;
    let server = TestServer::start_with(
        Config {
            portal: extra.portal.clone(),
            ..secured(dir.path())
        },
        clock.clone(),
    )
    .await;
    let http = Http::new(server.http);
    assert_eq!(http.get(&path_of(&third.url), "").await.status, 401);
    server.stop().await;
    let server = TestServer::start_with(sealed, clock.clone()).await;
    let http = Http::new(server.http);
    assert_eq!(http.get(&path_of(&third.url), "").await.status, 200);
    server.stop().await;
}

/// The key ids `/portal/jwks.json` lists, sorted.
async fn kids_of(http: &Http) -> Vec<String> {
    let set: serde_json::Value =
        serde_json::from_str(&http.get("/portal/jwks.json", "").await.body).unwrap();
    let mut kids: Vec<String> = set["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap().to_owned())
        .collect();
    kids.sort();
    kids
}

async fn create_tenant(c: &mut Client, name: &str) {
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: name.into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
}

/// One link makes at most 120 requests at once, then 20 a second (429 with Retry-After):
/// a person clicking never meets it, a script holding a leaked link is slowed; other links
/// are not.
#[tokio::test]
async fn a_link_making_requests_too_fast_is_slowed_alone() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(SystemClock.now_ms());
    let server = TestServer::start_with(secured(dir.path()), clock.clone()).await;
    let mut c = admin(&server).await;
    create_tenant(&mut c, "acme").await;
    let acme = || pb::CreatePortalLinkRequest {
        tenant: "acme".into(),
        ..Default::default()
    };
    let busy = link(&mut c, acme()).await;
    let other = link(&mut c, acme()).await;
    let http = Http::new(server.http);
    let theme = |url: &str| format!("{}assets/theme.css", path_of(url));
    // The clock stands still: no token comes back until it moves.
    for i in 0..120 {
        let a = http.get(&theme(&busy.url), "").await;
        assert_eq!(a.status, 200, "request {i}: {}", a.body);
    }
    let slowed = http.get(&theme(&busy.url), "").await;
    assert_eq!(slowed.status, 429, "{}", slowed.body);
    assert_eq!(slowed.header("retry-after"), "1");
    assert_eq!(http.get(&theme(&other.url), "").await.status, 200);
    clock.advance(1_000);
    assert_eq!(http.get(&theme(&busy.url), "").await.status, 200);
    server.stop().await;
}
