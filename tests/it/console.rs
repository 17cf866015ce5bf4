//! The web console (`/ui`): its security over plain HTTP (always run), and the whole
//! operator flow in headless Chromium (opt-in: `--ignored console_browser`, which `.ci/run`
//! runs after installing Debian's chromium and chromium-driver; it fails, never skips,
//! without them).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hookd::Config;
use hookd::auth::token_hash;
use hookd_client::{Client, Event, Options, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_core::names::hex;
use http_body_util::{BodyExt, Full};

use crate::harness::{TestServer, dead_lettered, test_config};
use crate::sink::{Reply, Sink};

const ADMIN: &str = "console-admin-token-0123456789";
const READER: &str = "console-reader-token-0123456789";
/// A payload and an error text that would run script if the console did not escape them.
const XSS: &str = r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>"#;
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn secured(dir: &std::path::Path) -> Config {
    let toml = format!(
        "[[auth.tokens]]\nname = \"ops\"\nsha256 = \"{}\"\nscopes = [\"admin\"]\n\
         [[auth.tokens]]\nname = \"dashboards\"\nsha256 = \"{}\"\nscopes = [\"read\"]\n",
        hex(&token_hash(ADMIN)),
        hex(&token_hash(READER)),
    );
    Config {
        auth: Config::from_toml(&toml).unwrap().auth,
        ..test_config(dir)
    }
}

async fn admin_client(server: &TestServer) -> Client {
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

/// A minimal HTTP/1.1 client for the console: status, headers, body.
pub(crate) struct Http {
    base: String,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        Full<Bytes>,
    >,
}

pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> String {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The `name=value` of a `Set-Cookie` this answer made.
    fn cookie(&self, name: &str) -> String {
        self.headers
            .get_all(http::header::SET_COOKIE)
            .iter()
            .map(|v| v.to_str().unwrap())
            .find(|v| v.starts_with(&format!("{name}=")))
            .and_then(|v| v.split(';').next())
            .unwrap_or_default()
            .to_owned()
    }

    /// The first hidden input's value named `name` in the page.
    pub(crate) fn field(&self, name: &str) -> String {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self.body.find(&marker).expect("the field is on the page") + marker.len();
        self.body[start..].split('"').next().unwrap().to_owned()
    }
}

impl Http {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        Self {
            base: format!("http://{addr}"),
            client: hyper_util::client::legacy::Client::builder(
                hyper_util::rt::TokioExecutor::new(),
            )
            .build_http(),
        }
    }

    pub(crate) async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if method == "POST" {
            req = req.header("content-type", "application/x-www-form-urlencoded");
        }
        let res = self
            .client
            .request(req.body(Full::new(Bytes::from(body.to_owned()))).unwrap())
            .await
            .unwrap();
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    pub(crate) async fn get(&self, path: &str, cookie: &str) -> Answer {
        self.send("GET", path, &[("cookie", cookie)], "").await
    }

    pub(crate) async fn post(&self, path: &str, cookie: &str, form: &[(&str, &str)]) -> Answer {
        let mut body = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in form {
            body.append_pair(k, v);
        }
        self.send("POST", path, &[("cookie", cookie)], &body.finish())
            .await
    }

    /// Logs in with `token` as a browser would; the session cookie.
    async fn login(&self, token: &str) -> Result<String, Answer> {
        let form = self.get("/ui/login", "").await;
        let nonce_cookie = form.cookie("hookd_login");
        let nonce = form.field("nonce");
        let answer = self
            .post(
                "/ui/login",
                &nonce_cookie,
                &[
                    ("nonce", &nonce),
                    ("token", token),
                    ("next", "/ui/dead-letters"),
                ],
            )
            .await;
        if answer.status == 303 {
            Ok(answer.cookie("hookd_session"))
        } else {
            Err(answer)
        }
    }
}

/// An endpoint whose receiver fails with an HTML error body, and dead letters for it (one
/// with a script in its payload).
async fn dead_letters(server: &TestServer, sink: &Sink, n: usize) -> (Client, Vec<String>) {
    let mut c = admin_client(server).await;
    c.put_endpoint(pb::Endpoint {
        name: "orders".into(),
        url: sink.url("/hook"),
        max_attempts: 1,
        secrets: vec![SECRET.into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let payload = if i == 0 {
            format!(r#"{{"note":"{}"}}"#, XSS.replace('"', "\\\""))
        } else {
            format!(r#"{{"order":{i}}}"#)
        };
        let id = c
            .enqueue(Event::to_endpoint("orders", payload.into_bytes()).event_type("order.created"))
            .await
            .unwrap()
            .id;
        ids.push(id);
    }
    for id in &ids {
        dead_lettered(&mut c, id).await;
    }
    (c, ids)
}

#[tokio::test]
async fn console_needs_an_admin_login_and_sets_strict_cookies() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_with(secured(dir.path()), ManualClock::new(SystemClock.now_ms())).await;
    let http = Http::new(server.http);

    // No session: pages send the browser to the login form; POSTs are refused.
    let r = http.get("/ui/endpoints?q=x", "").await;
    assert_eq!(r.status, 303);
    assert_eq!(
        r.header("location"),
        "/ui/login?next=%2Fui%2Fendpoints%3Fq%3Dx"
    );
    let r = http
        .post("/ui/endpoints/orders/pause", "", &[("csrf", "x")])
        .await;
    assert_eq!(r.status, 403);

    // The login form: a token that is not valid, a token without the admin scope, a form
    // whose nonce does not match its cookie.
    let bad = http.login("not-a-token-at-all-000000").await.err().unwrap();
    assert_eq!(bad.status, 401);
    assert!(bad.body.contains("That token is not valid"));
    let reader = http.login(READER).await.err().unwrap();
    assert_eq!(reader.status, 403);
    assert!(
        reader.body.contains("lacks the admin scope"),
        "{}",
        reader.body
    );
    let form = http.get("/ui/login", "").await;
    let forged = http
        .post(
            "/ui/login",
            "hookd_login=other",
            &[("nonce", &form.field("nonce")), ("token", ADMIN)],
        )
        .await;
    assert_eq!(forged.status, 403);

    // The admin token: a session cookie, HttpOnly and SameSite=Strict (not Secure over
    // plain HTTP), and a redirect to where the browser was going.
    let form = http.get("/ui/login", "").await;
    let answer = http
        .post(
            "/ui/login",
            &form.cookie("hookd_login"),
            &[
                ("nonce", &form.field("nonce")),
                ("token", ADMIN),
                ("next", "https://evil.example/"),
            ],
        )
        .await;
    assert_eq!(answer.status, 303);
    assert_eq!(
        answer.header("location"),
        "/ui",
        "never a redirect off the console"
    );
    let set = answer.header("set-cookie");
    let session_line = set
        .lines()
        .find(|l| l.starts_with("hookd_session="))
        .unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(session_line.contains(flag), "{session_line}");
    }
    assert!(!session_line.contains("Secure"));
    let cookie = answer.cookie("hookd_session");
    let page = http.get("/ui", &cookie).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Overview") && page.body.contains("ops"));
    for (header, want) in [
        ("content-security-policy", "default-src 'none'"),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("cache-control", "no-store"),
    ] {
        assert!(
            page.header(header).contains(want),
            "{header}: {}",
            page.header(header)
        );
    }

    // A bearer token on a GET is a credential too; a read token is not enough.
    for (token, status) in [(ADMIN, 200), (READER, 403)] {
        let bearer = format!("Bearer {token}");
        let r = http
            .send("GET", "/ui/sources", &[("authorization", &bearer)], "")
            .await;
        assert_eq!(r.status, status, "{token}");
    }

    // Logging out ends the session.
    let csrf = page.field("csrf");
    assert!(
        http.get("/ui", &cookie).await.body.contains("Log out"),
        "a signed-in admin can log out"
    );
    let out = http.post("/ui/logout", &cookie, &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert_eq!(http.get("/ui", &cookie).await.status, 303);
    server.stop().await;
}

#[tokio::test]
async fn console_refuses_posts_without_the_csrf_token_and_escapes_what_it_shows() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = secured(dir.path());
    // Two failed attempts are enough to judge (and colour) a success rate here.
    config.alerts.success_rate_min_attempts = 1;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let sink = Sink::start(Reply::Full(500, vec![], XSS.as_bytes().to_vec())).await;
    let (mut c, ids) = dead_letters(&server, &sink, 2).await;
    let http = Http::new(server.http);
    let cookie = http.login(ADMIN).await.ok().unwrap();

    // Health by the alert thresholds: 0 % success is red (not the green of "active"), in
    // the list and on the endpoint's page; the raised alerts carry their units.
    let list = http.get("/ui/endpoints", &cookie).await;
    assert!(
        list.body.contains(r#"<span class="badge bad" title="2 attempts; amber below 99.0%, red below 95.0% (from 1 attempts)">0.0%</span>"#),
        "{}",
        list.body
    );
    assert!(!list.body.contains("badge good"), "{}", list.body);
    let page = http.get("/ui/endpoints/orders", &cookie).await;
    assert!(page.body.contains(r#"class="badge bad""#), "{}", page.body);
    server.advance(11_000).await;
    let overview = http.get("/ui", &cookie).await;
    // The throughput chart: the two dead letters, in red, in the last minute's bar(s).
    assert!(
        overview
            .body
            .contains("messages completed per minute, last hour")
            && overview.body.matches(" dead-lettered</title>").count() >= 1
            && !overview.body.contains("nothing completed in this window"),
        "{}",
        overview.body
    );
    let alerts = overview
        .body
        .split("<table class=\"alerts\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no alerts table: {}", overview.body));
    // Critical ones first; a success rate in percent, dead letters counted as such.
    let first = alerts.find("level-critical").unwrap();
    assert!(
        alerts.find("level-warning").is_none_or(|w| w > first),
        "{alerts}"
    );
    assert!(
        alerts.contains(
            "<td class=\"num\">0.0%</td><td class=\"num\">99.0%</td><td class=\"num\">95.0%</td>"
        ),
        "{alerts}"
    );
    assert!(alerts.contains("new in 15 min"), "{alerts}");
    // Each alert says what it measures over which window; the success card says its own.
    assert!(alerts.contains("<th>measures (window)</th>"), "{alerts}");
    assert!(
        alerts.contains("<td>push attempts that succeeded, last 5 min</td>"),
        "{alerts}"
    );
    assert!(
        overview
            .body
            .contains("Success, last hour: push attempts that succeeded in the last hour"),
        "{}",
        overview.body
    );

    // A purge without the token, with another session's token, with an empty one: refused,
    // and nothing changed.
    let other = http.login(ADMIN).await.ok().unwrap();
    let other_csrf = http.get("/ui", &other).await.field("csrf");
    for form in [
        vec![("destination", "orders"), ("confirm", "yes")],
        vec![
            ("destination", "orders"),
            ("confirm", "yes"),
            ("csrf", other_csrf.as_str()),
        ],
        vec![("destination", "orders"), ("confirm", "yes"), ("csrf", "")],
    ] {
        let r = http.post("/ui/dead-letters/purge", &cookie, &form).await;
        assert_eq!(r.status, 403, "{form:?}");
        assert!(r.body.contains("csrf"), "{}", r.body);
    }
    for id in &ids {
        dead_lettered(&mut c, id).await;
    }

    // The payload and the receiver's error text hold markup: shown as text, never as markup.
    let list = http
        .get("/ui/dead-letters?destination=orders", &cookie)
        .await;
    assert_eq!(list.status, 200);
    assert!(
        !list.body.contains("<script>window.__pwned"),
        "{}",
        list.body
    );
    assert!(!list.body.contains("<img src=x"));
    assert!(
        list.body
            .contains("&lt;script&gt;window.__pwned=2&lt;/script&gt;")
    );
    // The analysis speaks of the list's set: the same filter, any time.
    assert!(
        list.body.contains(
            "Of the 2 dead letters this filter matches (any time): the same set as the list below"
        ),
        "{}",
        list.body
    );
    assert!(
        list.body.contains("endpoint:orders</a> · 2 dead letters"),
        "{}",
        list.body
    );
    let none = http
        .get("/ui/dead-letters?destination=orders&status=404", &cookie)
        .await;
    assert!(
        none.body
            .contains("Of the 0 dead letters this filter matches")
            && none.body.contains("No dead letter matches."),
        "{}",
        none.body
    );
    // The header's search: a message id leads to its page, anything else is searched
    // for as an idempotency key (what was typed shown as text).
    let found = http
        .get(&format!("/ui/find?id=+{}+", ids[0]), &cookie)
        .await;
    assert_eq!(found.status, 303);
    assert_eq!(found.header("location"), format!("/ui/messages/{}", ids[0]));
    let wrong = http.get("/ui/find?id=%3Cb%3Eorder-42", &cookie).await;
    assert_eq!(wrong.status, 303);
    assert_eq!(wrong.header("location"), "/ui/messages?key=%3Cb%3Eorder-42");
    let searched = http.get(&wrong.header("location"), &cookie).await;
    assert_eq!(searched.status, 200);
    assert!(
        searched.body.contains(r#"value="&lt;b&gt;order-42""#)
            && !searched.body.contains("<b>order-42")
            && searched.body.contains("No retained message matches."),
        "{}",
        searched.body
    );
    // The search page: the endpoint's dead letters, newest first, each linked.
    let dead = http
        .get("/ui/messages?destination=orders&state=dead", &cookie)
        .await;
    assert_eq!(dead.status, 200);
    let at = |id: &str| {
        dead.body
            .find(&format!(r#"href="/ui/messages/{id}""#))
            .unwrap_or_else(|| panic!("{id} is listed: {}", dead.body))
    };
    // Both, in id order (the two were made in the same millisecond of the test's clock).
    let (first, second) = if ids[0] > ids[1] {
        (&ids[0], &ids[1])
    } else {
        (&ids[1], &ids[0])
    };
    assert!(at(first) < at(second), "newest (highest id) first");
    assert!(
        dead.body.contains("Matching in all: 2<"),
        "a filtered search counts: {}",
        dead.body
    );
    assert!(
        dead.body
            .contains("&lt;script&gt;window.__pwned=2&lt;/script&gt;")
            && !dead.body.contains("<script>window.__pwned"),
        "the receiver's answer shown as text: {}",
        dead.body
    );
    let bad = http.get("/ui/messages?state=lost", &cookie).await;
    assert_eq!(bad.status, 400);
    assert!(
        bad.body.contains("state: &quot;lost&quot; is not a state"),
        "{}",
        bad.body
    );
    assert!(
        list.body.contains(r#"action="/ui/find""#),
        "every page has the search"
    );
    let message = http.get(&format!("/ui/messages/{}", ids[0]), &cookie).await;
    assert_eq!(message.status, 200);
    assert!(
        message.body.contains("&lt;img src=x onerror="),
        "{}",
        message.body
    );
    assert!(!message.body.contains("<img src=x"));

    // The endpoint's secret is never on a page, in whole or in part beyond its prefix.
    for path in [
        "/ui/endpoints",
        "/ui/endpoints/orders",
        "/ui/endpoints/orders/edit",
    ] {
        let page = http.get(path, &cookie).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(
            !page.body.contains(&SECRET[6..14]),
            "{path} shows the secret"
        );
        if path != "/ui/endpoints" {
            assert!(
                page.body.contains("hmac-sha256:"),
                "{path} shows the fingerprint"
            );
        }
    }

    // With the token: the one-click replay works (and the message is pending again).
    let csrf = list.field("csrf");
    let r = http
        .post(
            "/ui/dead-letters/replay",
            &cookie,
            &[("csrf", &csrf), ("id", &ids[1])],
        )
        .await;
    assert_eq!(r.status, 303);
    assert!(
        r.header("location").contains("Replayed"),
        "{}",
        r.header("location")
    );
    // It was sent again (the receiver still fails, so it is dead again after one attempt).
    sink.wait_for(3).await;
    let m = dead_lettered(&mut c, &ids[1]).await;
    assert_eq!(m.history.last().unwrap().http_status, 500);

    // A replay job from the Messages page: the estimate first, then the job, listed with
    // its progress on the Replays page.
    assert!(
        dead.body.contains("Replay all matching…"),
        "a filtered search offers the replay: {}",
        dead.body
    );
    let form = [
        ("csrf", csrf.as_str()),
        ("destination", "orders"),
        ("state", "dead"),
    ];
    let estimate = http.post("/ui/replays", &cookie, &form).await;
    assert_eq!(estimate.status, 200, "{}", estimate.body);
    assert!(
        estimate
            .body
            .contains("<strong>2</strong> messages match: 2 dead letters"),
        "{}",
        estimate.body
    );
    let mut confirmed = form.to_vec();
    confirmed.push(("confirm", "yes"));
    let made = http.post("/ui/replays", &cookie, &confirmed).await;
    assert_eq!(made.status, 303, "{}", made.body);
    assert!(
        made.header("location")
            .starts_with("/ui/replays?notice=Replay+job"),
        "{}",
        made.header("location")
    );
    sink.wait_for(5).await;
    let jobs = http.get("/ui/replays", &cookie).await;
    assert_eq!(jobs.status, 200);
    assert!(
        jobs.body.contains("endpoint:orders") && jobs.body.contains("<progress"),
        "{}",
        jobs.body
    );
    // The search box: by the selection's text, and one that matches nothing.
    let found = http.get("/ui/replays?q=orders", &cookie).await;
    assert!(found.body.contains("<progress"), "{}", found.body);
    let none = http.get("/ui/replays?q=billing", &cookie).await;
    assert!(
        !none.body.contains("<progress")
            && none.body.contains("None of the 1 replay jobs matches."),
        "{}",
        none.body
    );
    let unknown = http
        .post("/ui/replays/nope/cancel", &cookie, &[("csrf", &csrf)])
        .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    // An edit made over a newer change is refused, not applied.
    let form = http.get("/ui/endpoints/orders/edit", &cookie).await;
    let r = http
        .post(
            "/ui/endpoints/orders/edit",
            &cookie,
            &[
                ("csrf", &csrf),
                ("updated", "1"),
                ("url", &sink.url("/moved")),
            ],
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    // A bad number names its field; the good form saves and keeps the secret.
    let updated = form.field("updated");
    let r = http
        .post(
            "/ui/endpoints/orders/edit",
            &cookie,
            &[
                ("csrf", &csrf),
                ("updated", &updated),
                ("url", &sink.url("/hook")),
                ("max_attempts", "many"),
            ],
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("max_attempts:"), "{}", r.body);
    let r = http
        .post(
            "/ui/endpoints/orders/edit",
            &cookie,
            &[
                ("csrf", &csrf),
                ("updated", &updated),
                ("url", &sink.url("/hook")),
                ("max_attempts", "4"),
                ("description", "edited in the console"),
            ],
        )
        .await;
    assert_eq!(r.status, 303, "{}", r.body);
    let e = endpoint(&mut c, true).await;
    assert_eq!(e.max_attempts, 4);
    assert_eq!(e.description, "edited in the console");
    assert_eq!(e.secrets, vec![SECRET.to_owned()], "the secret is kept");
    // A URL the destination guard refuses is saved, with the warning in the notice (the
    // guard only judges the address: nothing connects to it).
    // Saves the edit form with only a new URL, as of the endpoint's current version.
    let save_url = async |url: &str| {
        let updated = http
            .get("/ui/endpoints/orders/edit", &cookie)
            .await
            .field("updated");
        let r = http
            .post(
                "/ui/endpoints/orders/edit",
                &cookie,
                &[("csrf", &csrf), ("updated", &updated), ("url", url)],
            )
            .await;
        assert_eq!(r.status, 303, "{}", r.body);
        r
    };
    let r = save_url("http://10.0.0.5/hook").await;
    let notice = r.header("location");
    assert!(
        notice.contains("Saved") && notice.contains("Warning") && notice.contains("10.0.0.5"),
        "{notice}"
    );
    // An edit in the console keeps the endpoint's static headers, values and all (the
    // form never shows them; the answers show them as "…").
    // So are its proxy, client certificate and key, and OAuth2 credentials.
    let mut e = endpoint(&mut c, true).await;
    e.headers = [("x-api-key".to_owned(), "k-1".to_owned())].into();
    let ca = crate::certs::Ca::new("console test CA");
    let leaf = ca.client("hookd-agent");
    e.proxy_url = "http://u:pw@127.0.0.1:3128".into();
    e.client_certificate_pem = leaf.cert.clone();
    e.client_key_pem = leaf.key.clone();
    e.oauth2 = Some(hookd_proto::v1::OAuth2 {
        token_url: "https://idp.example/token".into(),
        client_id: "agent".into(),
        client_secret: "s3cret".into(),
        ..Default::default()
    });
    c.put_endpoint(e).await.unwrap();
    let page = http.get("/ui/endpoints/orders", &cookie).await;
    assert!(
        page.body.contains("http://u:…@127.0.0.1:3128") && !page.body.contains("pw@"),
        "the page shows the proxy without its password"
    );
    assert!(
        page.body.contains("CN=hookd-agent"),
        "the client certificate"
    );
    assert!(!page.body.contains("s3cret") && !page.body.contains("PRIVATE KEY"));
    save_url(&sink.url("/hook")).await;
    let e = endpoint(&mut c, true).await;
    assert_eq!(e.headers.get("x-api-key").map(String::as_str), Some("k-1"));
    assert_eq!(e.proxy_url, "http://u:pw@127.0.0.1:3128");
    assert_eq!(e.client_certificate_pem, leaf.cert);
    assert_eq!(e.client_key_pem, leaf.key);
    assert_eq!(e.oauth2.unwrap().client_secret, "s3cret");
    server.stop().await;
}

#[tokio::test]
async fn console_makes_lists_and_deletes_subscriptions_naming_a_bad_field() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_with(secured(dir.path()), ManualClock::new(SystemClock.now_ms())).await;
    let mut c = admin_client(&server).await;
    c.put_endpoint(pb::Endpoint {
        name: "crm".into(),
        url: "http://127.0.0.1:9/never".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let http = Http::new(server.http);
    let cookie = http
        .login(ADMIN)
        .await
        .unwrap_or_else(|a| panic!("{}", a.body));
    let page = http.get("/ui/subscriptions", &cookie).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("No subscription is defined."),
        "{}",
        page.body
    );
    let csrf = page.field("csrf");
    // A filter the server cannot evaluate: the form again, the field named.
    let bad = http
        .post(
            "/ui/subscriptions",
            &cookie,
            &[
                ("csrf", &csrf),
                ("name", "urgent"),
                ("to", "endpoint:crm"),
                ("event_types", "ticket.*"),
                ("filter", r#"{"data": {"priority": {"$regex": "^hi"}}}"#),
            ],
        )
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body.contains("subscription.filter.data.priority"),
        "{}",
        bad.body
    );
    assert!(bad.body.contains("unknown operator $regex"), "{}", bad.body);
    let made = http
        .post(
            "/ui/subscriptions",
            &cookie,
            &[
                ("csrf", &csrf),
                ("name", "urgent"),
                ("to", "endpoint:crm"),
                ("event_types", "ticket.classified ticket.reopened"),
                (
                    "filter",
                    r#"{"data": {"priority": {"$in": ["high", "urgent"]}}}"#,
                ),
                ("description", "<b>paged</b>"),
            ],
        )
        .await;
    assert_eq!(made.status, 303, "{}", made.body);
    let listed = c
        .raw()
        .get_subscription(pb::GetSubscriptionRequest {
            name: "urgent".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .subscription
        .unwrap();
    assert_eq!(listed.event_types, ["ticket.classified", "ticket.reopened"]);
    let page = http.get("/ui/subscriptions", &cookie).await;
    assert!(
        page.body.contains("<code>ticket.reopened</code>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("&lt;b&gt;paged&lt;/b&gt;"),
        "escaped: {}",
        page.body
    );
    // The search box: by an event type, by the destination, and nothing.
    for (q, found) in [("reopened", true), ("crm", true), ("billing", false)] {
        let page = http.get(&format!("/ui/subscriptions?q={q}"), &cookie).await;
        assert_eq!(
            page.body.contains("<code>ticket.reopened</code>"),
            found,
            "{q}: {}",
            page.body
        );
    }
    assert!(
        http.get("/ui/subscriptions?q=billing", &cookie)
            .await
            .body
            .contains("None of the 1 subscriptions matches."),
        "the list says what it filtered"
    );
    let gone = http
        .post(
            "/ui/subscriptions/urgent/delete",
            &cookie,
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(gone.status, 303);
    let page = http.get("/ui/subscriptions", &cookie).await;
    assert!(
        page.body.contains("No subscription is defined."),
        "{}",
        page.body
    );
    server.stop().await;
}

#[tokio::test]
async fn console_without_auth_answers_only_to_loopback_names() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let http = Http::new(server.http);
    let ok = http.get("/ui", "").await;
    assert_eq!(
        ok.status, 200,
        "no [auth]: open on loopback, a session is started"
    );
    assert!(!ok.cookie("hookd_session").is_empty());
    // Nobody logged in: no "Log out", and the header says why.
    assert!(!ok.body.contains("Log out"), "{}", ok.body);
    assert!(ok.body.contains("no login (loopback)"), "{}", ok.body);
    let rebound = http
        .send("GET", "/ui", &[("host", "attacker.example")], "")
        .await;
    assert_eq!(rebound.status, 403);
    server.stop().await;
}

// ---------------------------------------------------------------------------------------
// Headless Chromium.

/// chromedriver on a free loopback port, killed when dropped.
pub(crate) struct Driver {
    child: tokio::process::Child,
    url: String,
}

impl Driver {
    pub(crate) async fn start() -> Self {
        let path = std::env::var("HOOKD_CHROMEDRIVER").expect(
            "HOOKD_CHROMEDRIVER must name chromedriver (Debian's chromium-driver; .ci/run installs it)",
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = tokio::process::Command::new(path)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .kill_on_drop(true)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        // chromedriver gives no readiness signal but its port: connect until it listens.
        let deadline = Instant::now() + Duration::from_secs(20);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen within 20 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    pub(crate) async fn browser(&self) -> fantoccini::Client {
        let binary = std::env::var("HOOKD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let caps = serde_json::json!({
            "goog:chromeOptions": {
                "binary": binary,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-extensions",
                    "--disable-quic", "--no-first-run", "--disable-component-update",
                    "--disable-sync",
                    "--window-size=1440,1000", "--hide-scrollbars",
                ],
            }
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!()
        };
        fantoccini::ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("a Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Saves a screenshot of the page when HOOKD_SCREENSHOTS names a directory (how the
/// README's pictures are made).
pub(crate) async fn shot(b: &fantoccini::Client, name: &str) {
    if let Ok(dir) = std::env::var("HOOKD_SCREENSHOTS") {
        let png = b.screenshot().await.unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }
}

/// The text of the first element `css` finds, waiting (10 s at most) for it to be there: a
/// click that submits a form returns before the next page has loaded.
pub(crate) async fn text_of(b: &fantoccini::Client, css: &str) -> String {
    let found = b
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(fantoccini::Locator::Css(css))
        .await;
    match found {
        Ok(element) => element.text().await.unwrap(),
        Err(e) => panic!(
            "{css} is not on {}: {e}\n{}",
            b.current_url().await.unwrap(),
            b.source().await.unwrap_or_default()
        ),
    }
}

/// Clicks a form's button and waits for the page the form leads to: every click here
/// submits a form, and chromedriver may return before the new document has replaced the old.
pub(crate) async fn click(b: &fantoccini::Client, css: &str) {
    // A mark on the old document's window; a new document has none.
    b.execute("window.__hookd_old_page = true;", vec![])
        .await
        .unwrap();
    b.find(fantoccini::Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = b
            .execute(
                "return window.__hookd_old_page === true ? 'old' : document.readyState;",
                vec![],
            )
            .await
            .unwrap();
        if state.as_str() == Some("complete") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "clicking {css} did not lead to a new page within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn path_of(b: &fantoccini::Client) -> String {
    let url = b.current_url().await.unwrap();
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    }
}

#[tokio::test]
#[ignore = "needs chromium and chromedriver (HOOKD_CHROMEDRIVER); .ci/run runs it"]
async fn console_browser_replays_dead_letters_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_with(secured(dir.path()), ManualClock::new(SystemClock.now_ms())).await;
    // The receiver is down (500, with markup in its answer) until it is fixed below.
    let sink = Sink::start(Reply::Full(500, vec![], XSS.as_bytes().to_vec())).await;
    let (mut c, ids) = dead_letters(&server, &sink, 4).await;
    assert_eq!(sink.count(), 4);
    // A pull queue and a source, so every page has something on it.
    c.enqueue(Event::to_queue("jobs", b"{\"job\":1}".to_vec()))
        .await
        .unwrap();
    c.put_source(pb::Source {
        name: "github".into(),
        scheme: "github".into(),
        secrets: vec!["a-github-webhook-secret".into()],
        route: Some(pb::source::Route::Queue("github-events".into())),
        ..Default::default()
    })
    .await
    .unwrap();

    let driver = Driver::start().await;
    let b = driver.browser().await;
    let base = format!("http://{}", server.http);

    // Log in: the console sends the browser to the form and back where it was going.
    b.goto(&format!("{base}/ui/dead-letters")).await.unwrap();
    assert_eq!(b.current_url().await.unwrap().path(), "/ui/login");
    shot(&b, "login").await;
    b.find(fantoccini::Locator::Css("input[name=token]"))
        .await
        .unwrap()
        .send_keys(ADMIN)
        .await
        .unwrap();
    click(&b, "form.login button").await;
    assert_eq!(path_of(&b).await, "/ui/dead-letters");
    let session = b.get_named_cookie("hookd_session").await.unwrap();
    assert_eq!(session.http_only(), Some(true));
    assert!(format!("{:?}", session.same_site()).contains("Strict"));

    // The dead letters: four rows, the analysis names the pattern, the markup is text.
    let rows = b
        .find_all(fantoccini::Locator::Css("table.list tbody tr"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 4);
    let analysis = text_of(&b, "section article.analysis").await;
    assert!(
        analysis.contains("endpoint:orders") && analysis.contains("4 dead letters"),
        "{analysis}"
    );
    let inert = b
        .execute(
            "return [window.__pwned === undefined, document.querySelectorAll('main script, main img').length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        inert,
        serde_json::json!([true, 0]),
        "an error text ran or made elements"
    );
    assert!(
        text_of(&b, "table.list")
            .await
            .contains("<script>window.__pwned=2</script>")
    );
    shot(&b, "dead-letters").await;

    // The message with the script in its payload: shown as text.
    b.goto(&format!("{base}/ui/messages/{}", ids[0]))
        .await
        .unwrap();
    let payload = text_of(&b, "pre.payload").await;
    assert!(
        payload.contains("<img src=x onerror=")
            && payload.contains("<script>window.__pwned=2</script>"),
        "{payload}"
    );
    let inert = b
        .execute("return [window.__pwned === undefined, document.querySelectorAll('main img, main script').length]", vec![])
        .await
        .unwrap();
    assert_eq!(inert, serde_json::json!([true, 0]));
    assert!(text_of(&b, "table.list").await.contains("500"));
    shot(&b, "message").await;

    // Fix the receiver; one click replays this message, and it is delivered.
    sink.set_default(Reply::Status(200));
    click(&b, "section.actions form button").await;
    assert!(text_of(&b, "p.notice").await.contains("pending again"));
    sink.wait_for(5).await;
    delivered_at_sink(&sink, &ids[0]).await;

    // Bulk replay by filter: the dry run counts first, the confirmation replays.
    b.goto(&format!("{base}/ui/dead-letters")).await.unwrap();
    b.find(fantoccini::Locator::Css(
        "form.filters input[name=destination]",
    ))
    .await
    .unwrap()
    .send_keys("orders")
    .await
    .unwrap();
    b.find(fantoccini::Locator::Css("form.filters input[name=status]"))
        .await
        .unwrap()
        .send_keys("500")
        .await
        .unwrap();
    click(&b, "form.filters button").await;
    assert_eq!(
        b.find_all(fantoccini::Locator::Css("table.list tbody tr"))
            .await
            .unwrap()
            .len(),
        3
    );
    click(&b, "section.bulk form[action$=replay] button").await;
    let count = text_of(&b, "p.count").await;
    assert!(count.starts_with("3 dead letters match"), "{count}");
    assert!(
        count.contains("destination = orders") && count.contains("status = 500"),
        "{count}"
    );
    shot(&b, "replay-confirm").await;
    assert_eq!(sink.count(), 5, "the dry run replayed nothing");
    click(&b, "form input[name=confirm] ~ button").await;
    assert!(text_of(&b, "p.notice").await.contains("Replayed 3 of 3"));
    // Replays are paced (dead_letters.replay_rate_per_s) on hookd's clock: move it on.
    let deadline = Instant::now() + Duration::from_secs(15);
    while sink.count() < 8 {
        assert!(
            Instant::now() < deadline,
            "replayed messages not delivered: {}",
            sink.count()
        );
        server.advance(1_000).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for id in &ids {
        delivered_at_sink(&sink, id).await;
        crate::harness::delivered(&mut c, id).await;
    }
    b.goto(&format!("{base}/ui/dead-letters")).await.unwrap();
    assert!(
        b.find_all(fantoccini::Locator::Css("table.list tbody tr"))
            .await
            .unwrap()
            .is_empty()
    );

    // Purge with confirmation: a new dead letter, a dry run, then the purge.
    sink.set_default(Reply::Status(400));
    let doomed = c
        .enqueue(Event::to_endpoint("orders", b"{\"order\":99}".to_vec()))
        .await
        .unwrap()
        .id;
    dead_lettered(&mut c, &doomed).await;
    b.goto(&format!(
        "{base}/ui/dead-letters?destination=endpoint%3Aorders"
    ))
    .await
    .unwrap();
    click(&b, "section.bulk form[action$=purge] button").await;
    assert!(
        text_of(&b, "p.count")
            .await
            .starts_with("1 dead letters match")
    );
    click(&b, "form input[name=confirm] ~ button").await;
    assert!(text_of(&b, "p.notice").await.contains("Purged 1 of 1"));
    assert!(c.get_message(&doomed).await.is_err(), "purged for good");

    // A POST without the CSRF token, from this browser's own session (its cookie goes
    // along): the pause form with its token taken out. Refused, and nothing changes.
    b.goto(&format!("{base}/ui/endpoints")).await.unwrap();
    b.execute(
        "document.querySelector(\"form[action$='/orders/pause'] input[name=csrf]\").remove()",
        vec![],
    )
    .await
    .unwrap();
    click(&b, "form[action$='/orders/pause'] button").await;
    let refusal = text_of(&b, "p.error").await;
    assert!(refusal.starts_with("csrf:"), "{refusal}");
    assert!(
        !endpoint(&mut c, false).await.paused,
        "the refused POST changed nothing"
    );
    // Script on a console page cannot send requests at all: the CSP (`default-src 'none'`)
    // blocks fetch, which a WebDriver script shows.
    let fetched = b
        .execute_async(
            "const done = arguments[arguments.length - 1];
             fetch('/ui/endpoints/orders/pause', {method: 'POST', body: 'reason=x'})
               .then(r => done(r.status), e => done(String(e)));",
            vec![],
        )
        .await
        .unwrap();
    assert!(
        fetched
            .as_str()
            .is_some_and(|e| e.contains("Failed to fetch")),
        "{fetched}"
    );

    // Pause and resume from the list; the endpoint's page with its charts; the rest.
    b.goto(&format!("{base}/ui/endpoints")).await.unwrap();
    click(&b, "form[action$='/orders/pause'] button").await;
    assert!(text_of(&b, "p.notice").await.contains("Paused orders"));
    assert!(endpoint(&mut c, false).await.paused);
    shot(&b, "endpoints").await;
    click(&b, "form[action$='/orders/resume'] button").await;
    assert!(!endpoint(&mut c, false).await.paused);
    b.goto(&format!("{base}/ui/endpoints/orders"))
        .await
        .unwrap();
    assert_eq!(
        b.find_all(fantoccini::Locator::Css(
            "figure.chart svg polyline, figure.chart svg circle"
        ))
        .await
        .unwrap()
        .len()
            % 3,
        0
    );
    assert!(!b.source().await.unwrap().contains(&SECRET[6..]));
    shot(&b, "endpoint").await;
    b.goto(&format!("{base}/ui")).await.unwrap();
    assert!(text_of(&b, "section.cards").await.contains("dead letters"));
    shot(&b, "overview").await;
    b.goto(&format!("{base}/ui/destinations")).await.unwrap();
    assert!(text_of(&b, "table.list").await.contains("queue:jobs"));
    shot(&b, "destinations").await;
    b.goto(&format!("{base}/ui/sources")).await.unwrap();
    let sources = text_of(&b, "table.list").await;
    assert!(sources.contains("github") && !sources.contains("a-github-webhook-secret"));
    shot(&b, "sources").await;

    // Log out: the session is gone.
    click(&b, "form.logout button").await;
    assert_eq!(b.current_url().await.unwrap().path(), "/ui/login");
    b.goto(&format!("{base}/ui")).await.unwrap();
    assert_eq!(b.current_url().await.unwrap().path(), "/ui/login");
    b.close().await.unwrap();
    drop(driver);
    server.stop().await;
}

async fn endpoint(c: &mut Client, reveal: bool) -> pb::Endpoint {
    c.raw()
        .get_endpoint(pb::GetEndpointRequest {
            name: "orders".into(),
            reveal_secrets: reveal,
        })
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap()
}

/// The sink received the message `id` with a 2xx answer at least once.
async fn delivered_at_sink(sink: &Sink, id: &str) {
    let got = sink.received();
    assert!(
        got.iter().any(|r| r
            .headers
            .get("webhook-id")
            .is_some_and(|v| v.as_bytes() == id.as_bytes())),
        "{id} never reached the sink"
    );
}

#[tokio::test]
async fn console_switches_tenant_and_shows_and_acts_on_that_tenants_objects_only() {
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_with(secured(dir.path()), ManualClock::new(SystemClock.now_ms())).await;
    let mut c = admin_client(&server).await;
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "acme".into(),
                quota: Some(pb::TenantQuota {
                    max_endpoints: 3,
                    ..Default::default()
                }),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let mut on_acme = tonic::Request::new(pb::PutEndpointRequest {
        endpoint: Some(pb::Endpoint {
            name: "acme-hook".into(),
            url: "http://127.0.0.1:9/acme".into(),
            ..Default::default()
        }),
    });
    on_acme
        .metadata_mut()
        .insert("x-hookd-tenant", "acme".parse().unwrap());
    c.raw().put_endpoint(on_acme).await.unwrap();
    c.put_endpoint(pb::Endpoint {
        name: "default-hook".into(),
        url: "http://127.0.0.1:9/default".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let http = Http::new(server.http);
    let cookie = http
        .login(ADMIN)
        .await
        .unwrap_or_else(|a| panic!("{}", a.body));
    // At first: default's objects.
    let page = http.get("/ui/endpoints", &cookie).await;
    assert!(
        page.body.contains("default-hook") && !page.body.contains("acme-hook"),
        "{}",
        page.body
    );
    let tenants = http.get("/ui/tenants", &cookie).await;
    assert_eq!(tenants.status, 200, "{}", tenants.body);
    assert!(
        tenants.body.contains("acme") && tenants.body.contains("max_endpoints 1 / 3"),
        "{}",
        tenants.body
    );
    // The list's search box: names containing the text.
    let filtered = http.get("/ui/tenants?q=acm", &cookie).await;
    assert!(
        filtered.body.contains("<td>acme")
            && !filtered.body.contains("<td>default")
            && filtered.body.contains(r#"value="acm""#),
        "{}",
        filtered.body
    );
    let csrf = tenants.field("csrf");
    // A tenant that does not exist: 404, the view unchanged.
    let missing = http
        .post(
            "/ui/tenant",
            &cookie,
            &[("csrf", &csrf), ("tenant", "nobody")],
        )
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    let switched = http
        .post(
            "/ui/tenant",
            &cookie,
            &[("csrf", &csrf), ("tenant", "acme")],
        )
        .await;
    assert_eq!(switched.status, 303, "{}", switched.body);
    let page = http.get("/ui/endpoints", &cookie).await;
    assert!(
        page.body.contains("acme-hook") && !page.body.contains("default-hook"),
        "{}",
        page.body
    );
    // An action acts on the viewed tenant: pausing acme's endpoint.
    let paused = http
        .post("/ui/endpoints/acme-hook/pause", &cookie, &[("csrf", &csrf)])
        .await;
    assert!(paused.status < 400, "{} {}", paused.status, paused.body);
    let mut listed = tonic::Request::new(pb::ListEndpointsRequest::default());
    listed
        .metadata_mut()
        .insert("x-hookd-tenant", "acme".parse().unwrap());
    let acme = c.raw().list_endpoints(listed).await.unwrap().into_inner();
    assert!(acme.endpoints[0].paused, "{acme:?}");
    // Default's endpoint is not one of the viewed tenant's.
    let other = http.get("/ui/endpoints/default-hook", &cookie).await;
    assert_eq!(other.status, 404, "{}", other.body);
    server.stop().await;
}
