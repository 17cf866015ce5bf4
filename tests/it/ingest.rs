//! Receiving webhooks (issue #13): the ingest listener's `POST /in/{source}` against a real
//! hookd, signatures made here the way each provider documents them (the provider
//! libraries themselves sign in `tests/python/ingest_providers.py` and
//! `tests/node/octokit.mjs`).

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use hookd_client::Client;
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_core::source::SchemeName;
use hookd_core::source::SourceSpec;
use hookd_core::source::{Detector, RedactSpec};
use hookd_proto::v1 as pb;
use hookd_storage::store::faults::Faults;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

use crate::harness::{TestServer, code, message, test_config};

/// The Standard Webhooks secret of the tests: `whsec_` + base64 of these bytes.
pub(crate) const SW_KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
const STRIPE_SECRET: &str = "whsec_stripe_test_secret";
const GITHUB_SECRET: &str = "It's a Secret to Everybody";
const SHOPIFY_SECRET: &str = "shopify-app-secret";

pub(crate) fn sw_secret(key: &[u8]) -> String {
    format!("whsec_{}", STANDARD.encode(key))
}

fn mac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn now_s() -> u64 {
    SystemClock.now_ms() / 1000
}

/// Standard Webhooks headers for `body` signed with `key` at `ts`.
pub(crate) fn sw_headers(key: &[u8], id: &str, ts: u64, body: &[u8]) -> Vec<(String, String)> {
    let sig = mac(
        key,
        &[id.as_bytes(), b".", ts.to_string().as_bytes(), b".", body],
    );
    vec![
        ("content-type".into(), "application/json".into()),
        ("webhook-id".into(), id.into()),
        ("webhook-timestamp".into(), ts.to_string()),
        (
            "webhook-signature".into(),
            format!("v1,{}", STANDARD.encode(sig)),
        ),
    ]
}

/// An HTTP answer: status, headers (lower-case names), body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// One HTTP/1.1 request on a fresh connection. Status 0: no connection (the server is
/// gone, as in the crash test) or no answer.
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Answer {
    let no_answer = || Answer {
        status: 0,
        head: String::new(),
        body: String::new(),
    };
    let Ok(mut tcp) = tokio::net::TcpStream::connect(addr).await else {
        return no_answer();
    };
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n");
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v == "chunked");
    if !chunked {
        head.push_str(&format!("content-length: {}\r\n", body.len()));
    }
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if tcp.write_all(head.as_bytes()).await.is_err() {
        return no_answer();
    }
    if chunked {
        for chunk in body.chunks(64 << 10) {
            let framed = format!("{:x}\r\n", chunk.len());
            // The server may answer 413 and close before the whole body is sent.
            if tcp.write_all(framed.as_bytes()).await.is_err()
                || tcp.write_all(chunk).await.is_err()
                || tcp.write_all(b"\r\n").await.is_err()
            {
                break;
            }
        }
        let _ = tcp.write_all(b"0\r\n\r\n").await;
    } else {
        let _ = tcp.write_all(body).await;
    }
    let mut raw = Vec::new();
    let _ = tcp.read_to_end(&mut raw).await;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

pub(crate) async fn post(
    addr: SocketAddr,
    source: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Answer {
    request(addr, "POST", &format!("/in/{source}"), headers, body).await
}

pub(crate) fn sw_source(name: &str, queue: &str) -> SourceSpec {
    SourceSpec {
        secrets: vec![sw_secret(SW_KEY)],
        ..SourceSpec::new(name, SchemeName::StandardWebhooks, queue)
    }
}

async fn start_with_sources(dir: &std::path::Path, sources: Vec<SourceSpec>) -> TestServer {
    let mut config = test_config(dir);
    config.sources = sources;
    TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await
}

async fn pending(client: &mut Client) -> u64 {
    client.stats().await.unwrap().total.unwrap().pending
}

async fn receive_all(client: &mut Client, queue: &str) -> Vec<pb::ReceivedMessage> {
    client
        .receive(queue, 100, Duration::from_secs(30), None)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_signed_event_is_stored_byte_for_byte_with_its_headers_and_deduplicated() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_sources(dir.path(), vec![sw_source("agents", "inbox")]).await;
    let mut client = server.client().await;
    // Whitespace and key order as the provider sent them: stored exactly.
    let body = br#"{ "type": "run.finished",  "data": {"run": 7} }"#;
    let headers = sw_headers(SW_KEY, "msg_1", now_s(), body);
    let first = post(server.ingest, "agents", &headers, body).await;
    assert_eq!(first.status, 202, "{first:?}");
    assert_eq!(
        first.header("content-type").as_deref(),
        Some("application/json")
    );
    let id = first.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(first.json()["duplicate"], false);

    // The provider resends (it did not see our answer): 202, the same id, nothing stored.
    let again = post(server.ingest, "agents", &headers, body).await;
    assert_eq!(again.status, 202, "{again:?}");
    assert_eq!(again.json(), json!({"id": id, "duplicate": true}));
    // A resend signed again at a later second is still the same delivery id.
    let resigned = sw_headers(SW_KEY, "msg_1", now_s() + 1, body);
    let third = post(server.ingest, "agents", &resigned, body).await;
    assert_eq!(third.json(), json!({"id": id, "duplicate": true}));
    assert_eq!(pending(&mut client).await, 1);

    let got = receive_all(&mut client, "inbox").await;
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(m.id, id);
    assert_eq!(m.payload, body.to_vec());
    assert_eq!(m.event_type, "run.finished");
    assert_eq!(m.idempotency_key, "agents:msg_1");
    for (name, value) in &headers {
        assert_eq!(m.headers.get(name), Some(value), "{name}: {:?}", m.headers);
    }
    assert_eq!(
        m.headers.get("hookd-source").map(String::as_str),
        Some("agents")
    );
    // The consumer can re-verify the provider's signature from what was stored.
    let sig = mac(
        SW_KEY,
        &[
            m.headers["webhook-id"].as_bytes(),
            b".",
            m.headers["webhook-timestamp"].as_bytes(),
            b".",
            &m.payload,
        ],
    );
    assert_eq!(
        m.headers["webhook-signature"],
        format!("v1,{}", STANDARD.encode(sig))
    );
    server.stop().await;
}

#[tokio::test]
async fn every_refusal_has_its_status_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["type", "data"],
        "properties": {"data": {"type": "object", "properties": {"amount": {"type": "integer", "minimum": 0}}}}
    });
    let source = SourceSpec {
        max_body_bytes: 4_096,
        json_schema: Some(schema.to_string()),
        ..sw_source("shop", "orders")
    };
    let server = start_with_sources(dir.path(), vec![source]).await;
    let mut client = server.client().await;
    let body = br#"{"type":"order.paid","data":{"amount":5}}"#;
    let now = now_s();
    let ok = |id: &str| sw_headers(SW_KEY, id, now, body);
    let unauthorized = |a: &Answer| {
        assert_eq!(a.status, 401, "{a:?}");
        // One text whatever failed.
        assert_eq!(
            a.json()["error"],
            "signature missing, invalid or outside the time tolerance"
        );
    };

    // 404: unknown source, other paths, the admin routes.
    for path in ["/in/nope", "/", "/healthz", "/metrics", "/in/", "/ui"] {
        let a = request(server.ingest, "POST", path, &ok("x"), body).await;
        assert_eq!(a.status, 404, "{path}: {a:?}");
    }
    let get = request(server.ingest, "GET", "/healthz", &[], b"").await;
    assert_eq!(get.status, 404, "{get:?}");
    // 401: no signature, a wrong one, a tampered body, another secret.
    unauthorized(
        &post(
            server.ingest,
            "shop",
            &[("content-type".into(), "application/json".into())],
            body,
        )
        .await,
    );
    let mut wrong = ok("w");
    wrong[3].1 = format!("v1,{}", STANDARD.encode([7u8; 32]));
    unauthorized(&post(server.ingest, "shop", &wrong, body).await);
    let tampered = br#"{"type":"order.paid","data":{"amount":500}}"#;
    unauthorized(&post(server.ingest, "shop", &ok("t"), tampered).await);
    unauthorized(
        &post(
            server.ingest,
            "shop",
            &sw_headers(b"another key of 32 bytes........", "k", now, body),
            body,
        )
        .await,
    );
    // 401: a replayed event, correctly signed 10 minutes ago (tolerance 5 min); and one
    // from the future.
    unauthorized(
        &post(
            server.ingest,
            "shop",
            &sw_headers(SW_KEY, "old", now - 600, body),
            body,
        )
        .await,
    );
    unauthorized(
        &post(
            server.ingest,
            "shop",
            &sw_headers(SW_KEY, "future", now + 600, body),
            body,
        )
        .await,
    );
    // 415: a media type the source does not accept; none at all.
    let mut text = ok("ct");
    text[0].1 = "text/plain".into();
    let a = post(server.ingest, "shop", &text, body).await;
    assert_eq!(a.status, 415, "{a:?}");
    let a = post(server.ingest, "shop", &ok("ct2")[1..], body).await;
    assert_eq!(a.status, 415, "{a:?}");
    // 413: announced, and streamed without a length.
    let big = vec![b' '; 5_000];
    let a = post(
        server.ingest,
        "shop",
        &sw_headers(SW_KEY, "big", now, &big),
        &big,
    )
    .await;
    assert_eq!(a.status, 413, "{a:?}");
    let mut chunked = sw_headers(SW_KEY, "big2", now, &big);
    chunked.push(("transfer-encoding".into(), "chunked".into()));
    let a = post(server.ingest, "shop", &chunked, &big).await;
    assert_eq!(a.status, 413, "{a:?}");
    // 400: signed but not JSON; signed, valid JSON, failing the schema (with its path).
    let not_json = b"type=order.paid";
    let a = post(
        server.ingest,
        "shop",
        &sw_headers(SW_KEY, "nj", now, not_json),
        not_json,
    )
    .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(
        a.json()["error"]
            .as_str()
            .unwrap()
            .starts_with("body: not JSON"),
        "{a:?}"
    );
    let negative = br#"{"type":"order.paid","data":{"amount":-1}}"#;
    let a = post(
        server.ingest,
        "shop",
        &sw_headers(SW_KEY, "neg", now, negative),
        negative,
    )
    .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert_eq!(a.json()["path"], "/data/amount", "{a:?}");
    assert!(
        a.json()["schema_path"]
            .as_str()
            .unwrap()
            .contains("minimum"),
        "{a:?}"
    );
    let missing = br#"{"type":"order.paid"}"#;
    let a = post(
        server.ingest,
        "shop",
        &sw_headers(SW_KEY, "mis", now, missing),
        missing,
    )
    .await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(
        a.json()["error"].as_str().unwrap().contains("data"),
        "{a:?}"
    );

    // None of them stored anything, nor claimed a delivery id: the same ids go through now.
    assert_eq!(pending(&mut client).await, 0);
    for id in ["w", "t", "old", "ct", "big", "nj", "neg"] {
        let a = post(server.ingest, "shop", &ok(id), body).await;
        assert_eq!(a.status, 202, "{id}: {a:?}");
        assert_eq!(a.json()["duplicate"], false, "{id}");
    }
    assert_eq!(pending(&mut client).await, 7);

    // Counted by outcome on /metrics.
    let metrics = server.http_get("/metrics").await;
    for (outcome, n) in [
        ("accepted", 7),
        ("unauthorized", 6),
        ("unsupported_type", 2),
        ("too_large", 2),
        ("invalid", 3),
    ] {
        let line =
            format!("hookd_ingest_requests_total{{outcome=\"{outcome}\",source=\"shop\"}} {n}");
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    assert!(
        metrics.contains(
            "hookd_ingest_requests_total{outcome=\"unknown_source\",source=\"_unknown\"} "
        )
    );
    server.stop().await;
}

/// A Standard Webhooks source that takes any media type stores a body that is not JSON:
/// the scheme's default event type (`json:/type`) is best effort, unlike a configured one.
#[tokio::test]
async fn a_default_event_type_does_not_make_a_plain_body_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_sources(
        dir.path(),
        vec![
            SourceSpec {
                content_types: vec!["*/*".into()],
                ..sw_source("plain", "q")
            },
            SourceSpec {
                content_types: vec!["*/*".into()],
                event_type: Some("json:/type".into()),
                ..sw_source("strict", "q2")
            },
        ],
    )
    .await;
    let text = b"temperature=21";
    let mut h = sw_headers(SW_KEY, "p1", now_s(), text);
    h[0].1 = "text/plain".into();
    let a = post(server.ingest, "plain", &h, text).await;
    assert_eq!(a.status, 202, "{a:?}");
    let a = post(server.ingest, "strict", &h, text).await;
    assert_eq!(a.status, 400, "{a:?}");
    let json_body = br#"{"type":"reading"}"#;
    let a = post(
        server.ingest,
        "plain",
        &sw_headers(SW_KEY, "p2", now_s(), json_body),
        json_body,
    )
    .await;
    assert_eq!(a.status, 202, "{a:?}");
    let mut client = server.client().await;
    let got = receive_all(&mut client, "q").await;
    let types: Vec<&str> = got.iter().map(|m| m.event_type.as_str()).collect();
    assert_eq!(types.len(), 2);
    assert!(
        types.contains(&"") && types.contains(&"reading"),
        "{types:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn rotation_accepts_either_secret() {
    let dir = tempfile::tempdir().unwrap();
    let new_key = b"fedcba9876543210fedcba9876543210";
    let source = SourceSpec {
        secrets: vec![sw_secret(SW_KEY), sw_secret(new_key)],
        ..sw_source("rot", "q")
    };
    let server = start_with_sources(dir.path(), vec![source]).await;
    let body = br#"{"type":"t"}"#;
    for (i, key) in [SW_KEY, new_key.as_slice()].into_iter().enumerate() {
        let a = post(
            server.ingest,
            "rot",
            &sw_headers(key, &format!("r{i}"), now_s(), body),
            body,
        )
        .await;
        assert_eq!(a.status, 202, "{a:?}");
    }
    // Standard Webhooks senders list one signature per secret: any one matching is enough.
    let mut both = sw_headers(SW_KEY, "r2", now_s(), body);
    let other = sw_headers(new_key, "r2", now_s(), body);
    both[3].1 = format!("v1,{} {}", STANDARD.encode([1u8; 32]), other[3].1);
    let a = post(server.ingest, "rot", &both, body).await;
    assert_eq!(a.status, 202, "{a:?}");
    server.stop().await;
}

#[tokio::test]
async fn stripe_github_and_shopify_sources_verify_and_pick_their_ids_and_types() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_sources(
        dir.path(),
        vec![
            SourceSpec {
                secrets: vec![STRIPE_SECRET.into()],
                ..SourceSpec::new("stripe", SchemeName::Stripe, "payments")
            },
            SourceSpec {
                secrets: vec![GITHUB_SECRET.into()],
                ..SourceSpec::new("gh", SchemeName::Github, "code")
            },
            SourceSpec {
                secrets: vec![SHOPIFY_SECRET.into()],
                ..SourceSpec::new("shopify", SchemeName::Shopify, "shop")
            },
        ],
    )
    .await;
    let mut client = server.client().await;
    let json_ct = ("content-type".to_owned(), "application/json".to_owned());

    let stripe_body = br#"{"id":"evt_123","object":"event","type":"invoice.paid"}"#;
    let t = now_s().to_string();
    let v1 = hex(&mac(
        STRIPE_SECRET.as_bytes(),
        &[t.as_bytes(), b".", stripe_body],
    ));
    let stripe_headers = vec![
        json_ct.clone(),
        (
            "stripe-signature".to_owned(),
            format!("t={t},v1={v1},v0=ignored"),
        ),
    ];
    let a = post(server.ingest, "stripe", &stripe_headers, stripe_body).await;
    assert_eq!(a.status, 202, "{a:?}");
    let again = post(server.ingest, "stripe", &stripe_headers, stripe_body).await;
    assert_eq!(again.json()["duplicate"], true, "{again:?}");
    let m = &receive_all(&mut client, "payments").await[0];
    assert_eq!(
        (m.event_type.as_str(), m.idempotency_key.as_str()),
        ("invoice.paid", "stripe:evt_123")
    );
    assert_eq!(m.headers["stripe-signature"], stripe_headers[1].1);

    // GitHub's documented example: secret "It's a Secret to Everybody", body
    // "Hello, World!".
    let gh_body = b"Hello, World!";
    let gh_headers = vec![
        json_ct.clone(),
        (
            "x-hub-signature-256".to_owned(),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_owned(),
        ),
        ("x-github-event".to_owned(), "push".to_owned()),
        (
            "x-github-delivery".to_owned(),
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned(),
        ),
    ];
    let a = post(server.ingest, "gh", &gh_headers, gh_body).await;
    assert_eq!(a.status, 202, "{a:?}");
    let m = &receive_all(&mut client, "code").await[0];
    assert_eq!(m.event_type, "push");
    assert_eq!(m.idempotency_key, "gh:72d3162e-cc78-11e3-81ab-4c9367dc0958");
    assert_eq!(m.payload, gh_body.to_vec());
    // No delivery id: refused (400), not stored without its dedup key.
    let a = post(server.ingest, "gh", &gh_headers[..3], gh_body).await;
    assert_eq!(a.status, 400, "{a:?}");
    assert!(
        a.json()["error"]
            .as_str()
            .unwrap()
            .contains("x-github-delivery"),
        "{a:?}"
    );

    let shop_body = br#"{"id":820982911946154508,"email":"jon@example.com"}"#;
    let shop_headers = vec![
        json_ct.clone(),
        (
            "x-shopify-hmac-sha256".to_owned(),
            STANDARD.encode(mac(SHOPIFY_SECRET.as_bytes(), &[shop_body])),
        ),
        ("x-shopify-topic".to_owned(), "orders/create".to_owned()),
        (
            "x-shopify-webhook-id".to_owned(),
            "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".to_owned(),
        ),
    ];
    let a = post(server.ingest, "shopify", &shop_headers, shop_body).await;
    assert_eq!(a.status, 202, "{a:?}");
    let m = &receive_all(&mut client, "shop").await[0];
    assert_eq!(m.event_type, "orders/create");
    assert_eq!(
        m.idempotency_key,
        "shopify:b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"
    );
    server.stop().await;
}

#[tokio::test]
async fn scheme_none_takes_a_bearer_token_or_basic_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let digest = |s: &str| hex(&Sha256::digest(s.as_bytes()));
    let source = SourceSpec {
        bearer_sha256: vec![digest("tok-123")],
        basic: vec![format!("orchestrator:{}", digest("pa:ss"))],
        dedup_id: Some("header:x-request-id".into()),
        event_type: Some("json:/kind".into()),
        content_types: vec!["*/*".into()],
        ..SourceSpec::new("internal", SchemeName::None, "jobs")
    };
    let server = start_with_sources(dir.path(), vec![source]).await;
    let body = br#"{"kind":"job.done"}"#;
    let with = |auth: &str, id: &str| {
        vec![
            ("authorization".to_owned(), auth.to_owned()),
            ("x-request-id".to_owned(), id.to_owned()),
        ]
    };
    let a = post(
        server.ingest,
        "internal",
        &with("Bearer tok-123", "1"),
        body,
    )
    .await;
    assert_eq!(a.status, 202, "{a:?}");
    let basic = format!("Basic {}", STANDARD.encode("orchestrator:pa:ss"));
    let a = post(server.ingest, "internal", &with(&basic, "2"), body).await;
    assert_eq!(a.status, 202, "{a:?}");
    for bad in [
        "Bearer tok-124".to_owned(),
        format!("Basic {}", STANDARD.encode("orchestrator:wrong")),
        format!("Basic {}", STANDARD.encode("someone:pa:ss")),
        String::new(),
    ] {
        let a = post(server.ingest, "internal", &with(&bad, "3"), body).await;
        assert_eq!(a.status, 401, "{bad}: {a:?}");
        assert_eq!(a.header("www-authenticate").as_deref(), Some("Bearer"));
    }
    let mut client = server.client().await;
    let got = receive_all(&mut client, "jobs").await;
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|m| m.event_type == "job.done"));
    server.stop().await;
}

#[tokio::test]
async fn redaction_scrubs_before_storing_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let source = SourceSpec {
        redact: RedactSpec {
            remove: vec!["/data/customer/ssn".into()],
            mask: vec!["/data/items/*/name".into()],
            detectors: Detector::ALL.to_vec(),
        },
        ..sw_source("crm", "leads")
    };
    let server = start_with_sources(dir.path(), vec![source]).await;
    let mut client = server.client().await;
    let body = json!({
        "type": "lead.created",
        "data": {
            "customer": {"ssn": "078-05-1120", "note": "mail ada@example.com or call +1 (415) 555-2671"},
            "items": [{"name": "Ada", "card": "4242 4242 4242 4242"}, {"name": "Bob", "auth": "Bearer abc.def.ghi123"}],
            "count": 2
        }
    })
    .to_string();
    let a = post(
        server.ingest,
        "crm",
        &sw_headers(SW_KEY, "l1", now_s(), body.as_bytes()),
        body.as_bytes(),
    )
    .await;
    assert_eq!(a.status, 202, "{a:?}");
    // Nothing to scrub: stored byte for byte, still verifiable.
    let clean = br#"{"type":"lead.created", "data": {"count": 0}}"#;
    let a = post(
        server.ingest,
        "crm",
        &sw_headers(SW_KEY, "l2", now_s(), clean),
        clean,
    )
    .await;
    assert_eq!(a.status, 202, "{a:?}");
    // Not JSON: refused when redaction is configured (even with a valid signature).
    let text = b"ada@example.com";
    let mut h = sw_headers(SW_KEY, "l3", now_s(), text);
    h[0].1 = "application/json".into();
    let a = post(server.ingest, "crm", &h, text).await;
    assert_eq!(a.status, 400, "{a:?}");

    let got = receive_all(&mut client, "leads").await;
    assert_eq!(got.len(), 2);
    let scrubbed = got.iter().find(|m| m.idempotency_key == "crm:l1").unwrap();
    let stored: Value = serde_json::from_slice(&scrubbed.payload).unwrap();
    assert_eq!(
        stored["data"],
        json!({
            "customer": {"note": "mail [redacted:email] or call [redacted:phone]"},
            "items": [{"name": "[redacted]", "card": "[redacted:card]"}, {"name": "[redacted]", "auth": "[redacted:token]"}],
            "count": 2
        })
    );
    assert!(scrubbed.headers["hookd-redaction"].contains("remove=/data/customer/ssn"));
    let fired = &scrubbed.headers["hookd-redacted"];
    for rule in [
        "remove:/data/customer/ssn",
        "mask:/data/items/*/name",
        "email",
        "phone",
        "card",
        "bearer-token",
    ] {
        assert!(fired.contains(rule), "{rule}: {fired}");
    }
    let untouched = got.iter().find(|m| m.idempotency_key == "crm:l2").unwrap();
    assert_eq!(untouched.payload, clean.to_vec());
    assert!(!untouched.headers.contains_key("hookd-redacted"));
    assert!(untouched.headers.contains_key("hookd-redaction"));
    server.stop().await;
}

/// Masks are longer than many values they replace: a body redaction would take past
/// `max_payload_bytes` is refused (413), not stored at several times the limit.
#[tokio::test]
async fn a_body_redaction_would_grow_past_the_payload_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.max_payload_bytes = 4_096;
    config.sources = vec![SourceSpec {
        max_body_bytes: 4_096,
        redact: RedactSpec {
            mask: vec!["/data/*".into()],
            ..RedactSpec::default()
        },
        ..sw_source("grow", "q")
    }];
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let ones = vec!["1"; 1_500].join(",");
    let body = format!(r#"{{"type":"t","data":[{ones}]}}"#);
    assert!(body.len() < 4_096);
    let h = sw_headers(SW_KEY, "g1", now_s(), body.as_bytes());
    let a = post(server.ingest, "grow", &h, body.as_bytes()).await;
    assert_eq!(a.status, 413, "{a:?}");
    assert!(
        a.json()["error"]
            .as_str()
            .unwrap()
            .contains("once redacted"),
        "{a:?}"
    );
    let mut client = server.client().await;
    assert_eq!(pending(&mut client).await, 0);
    server.stop().await;
}

#[tokio::test]
async fn a_source_routed_to_an_endpoint_is_relayed_with_hookds_own_signature() {
    let dir = tempfile::tempdir().unwrap();
    let sink = hookd_testkit::Receiver::start(hookd_testkit::Reply::Status(200))
        .await
        .unwrap();
    let source = SourceSpec {
        queue: None,
        endpoint: Some("downstream".into()),
        ..sw_source("relay", "unused")
    };
    let server = start_with_sources(dir.path(), vec![source]).await;
    let mut client = server.client().await;
    let endpoint_key = b"endpoint-key-of-24-bytes";
    client
        .put_endpoint(pb::Endpoint {
            name: "downstream".into(),
            url: sink.url("/hook"),
            secrets: vec![sw_secret(endpoint_key)],
            ..Default::default()
        })
        .await
        .unwrap();
    let body = br#"{"type":"relay.me"}"#;
    let a = post(
        server.ingest,
        "relay",
        &sw_headers(SW_KEY, "in-1", now_s(), body),
        body,
    )
    .await;
    assert_eq!(a.status, 202, "{a:?}");
    let id = a.json()["id"].as_str().unwrap().to_owned();
    crate::harness::eventually("relayed", async || sink.count(), |n| *n == 1).await;
    let r = &sink.received()[0];
    assert_eq!(r.body.as_ref(), body);
    let h = |n: &str| {
        r.headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    // hookd's own Standard Webhooks headers, signed with the endpoint's secret.
    assert_eq!(h("webhook-id"), id);
    let sig = mac(
        endpoint_key,
        &[
            id.as_bytes(),
            b".",
            h("webhook-timestamp").as_bytes(),
            b".",
            body,
        ],
    );
    assert_eq!(
        h("webhook-signature"),
        format!("v1,{}", STANDARD.encode(sig))
    );
    assert_eq!(h("hookd-source"), "relay");
    assert_eq!(h("content-type"), "application/json");
    server.stop().await;
}

#[tokio::test]
async fn sources_are_managed_over_grpc_durably_and_config_ones_are_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_sources(dir.path(), vec![sw_source("from-config", "q")]).await;
    let mut client = server.client().await;
    let source = pb::Source {
        name: "api-made".into(),
        scheme: "github".into(),
        secrets: vec![GITHUB_SECRET.into()],
        route: Some(pb::source::Route::Queue("code".into())),
        redact: Some(pb::Redaction {
            detectors: vec!["email".into()],
            ..Default::default()
        }),
        ..Default::default()
    };
    let put = client.put_source(source.clone()).await.unwrap();
    assert!(put.created);
    let shown = put.source.unwrap();
    assert!(shown.secrets.is_empty(), "secrets are write-only");
    assert_eq!(shown.secret_summaries.len(), 1);
    assert!(
        shown.secret_summaries[0]
            .fingerprint
            .starts_with("hmac-sha256:")
    );
    assert_eq!(shown.path, "/in/api-made");
    assert_eq!(shown.tolerance_secs, 300);
    assert_eq!(shown.max_body_bytes, 1 << 20);
    assert!(!client.put_source(source.clone()).await.unwrap().created);

    // Bad definitions name the field.
    for (bad, field) in [
        (
            pb::Source {
                scheme: "paypal".into(),
                ..source.clone()
            },
            "source.scheme",
        ),
        (
            pb::Source {
                json_schema: "{".into(),
                ..source.clone()
            },
            "source.json_schema",
        ),
        (
            pb::Source {
                secrets: vec![],
                ..source.clone()
            },
            "source.secrets",
        ),
        (
            pb::Source {
                route: None,
                ..source.clone()
            },
            "source.route",
        ),
        (
            pb::Source {
                name: "a/b".into(),
                ..source.clone()
            },
            "source.name",
        ),
        (
            pb::Source {
                redact: Some(pb::Redaction {
                    detectors: vec!["ssn".into()],
                    ..Default::default()
                }),
                ..source.clone()
            },
            "source.redact.detectors[0]",
        ),
    ] {
        let e = client.put_source(bad).await.unwrap_err();
        assert_eq!(code(&e), Code::InvalidArgument, "{e}");
        assert!(message(&e).starts_with(field), "{field}: {}", message(&e));
    }
    // The config's source is listed, and read-only.
    let e = client
        .put_source(pb::Source {
            name: "from-config".into(),
            ..source.clone()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::FailedPrecondition, "{e}");
    let e = client
        .raw()
        .delete_source(pb::DeleteSourceRequest {
            name: "from-config".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
    let list = client
        .raw()
        .list_sources(pb::ListSourcesRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<(&str, bool)> = list
        .sources
        .iter()
        .map(|s| (s.name.as_str(), s.from_config))
        .collect();
    assert_eq!(names, [("api-made", false), ("from-config", true)]);

    // It receives at once, and after a restart.
    let gh = |id: &str| {
        let body = br#"{"x":1}"#.to_vec();
        let sig = hex(&mac(GITHUB_SECRET.as_bytes(), &[&body]));
        (
            vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                ("x-hub-signature-256".to_owned(), format!("sha256={sig}")),
                ("x-github-delivery".to_owned(), id.to_owned()),
            ],
            body,
        )
    };
    let (h, b) = gh("d1");
    assert_eq!(post(server.ingest, "api-made", &h, &b).await.status, 202);
    let server = server.restart().await;
    let mut client = server.client().await;
    let got = client
        .raw()
        .get_source(pb::GetSourceRequest {
            name: "api-made".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .source
        .unwrap();
    assert_eq!(got.redact.unwrap().detectors, ["email"]);
    let (h, b) = gh("d2");
    assert_eq!(post(server.ingest, "api-made", &h, &b).await.status, 202);
    // The delivery id window survived the restart too.
    let (h, b) = gh("d1");
    assert_eq!(
        post(server.ingest, "api-made", &h, &b).await.json()["duplicate"],
        true
    );

    // Deleted: 404 from then on, also after a restart.
    client
        .raw()
        .delete_source(pb::DeleteSourceRequest {
            name: "api-made".into(),
        })
        .await
        .unwrap();
    let (h, b) = gh("d3");
    assert_eq!(post(server.ingest, "api-made", &h, &b).await.status, 404);
    let server = server.restart().await;
    assert_eq!(post(server.ingest, "api-made", &h, &b).await.status, 404);
    let mut client = server.client().await;
    let e = client
        .raw()
        .get_source(pb::GetSourceRequest {
            name: "api-made".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(receive_all(&mut client, "code").await.len(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_disk_answers_429_and_a_failed_one_503_with_retry_after_storing_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::default();
    let mut config = test_config(dir.path());
    config.sources = vec![sw_source("busy", "q")];
    // Room for two 1.5 KB events waiting for the disk.
    config.max_queued_write_bytes = 4_096;
    let server = TestServer::start_full(
        config,
        ManualClock::new(SystemClock.now_ms()),
        Some(faults.clone()),
    )
    .await;
    faults.delay_syncs(300);
    let body = format!(r#"{{"type":"t","pad":"{}"}}"#, "x".repeat(1_500));
    let mut calls = Vec::new();
    for i in 0..10 {
        let (addr, body) = (server.ingest, body.clone());
        calls.push(tokio::spawn(async move {
            let h = sw_headers(SW_KEY, &format!("b{i}"), now_s(), body.as_bytes());
            post(addr, "busy", &h, body.as_bytes()).await
        }));
    }
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.unwrap());
    }
    let accepted = answers.iter().filter(|a| a.status == 202).count();
    let busy: Vec<&Answer> = answers.iter().filter(|a| a.status == 429).collect();
    assert_eq!(accepted + busy.len(), 10, "{answers:?}");
    assert!(accepted > 0 && !busy.is_empty(), "{answers:?}");
    assert!(
        busy.iter()
            .all(|a| a.header("retry-after").as_deref() == Some("1"))
    );
    faults.delay_syncs(0);
    let mut client = server.client().await;
    assert_eq!(pending(&mut client).await, accepted as u64);

    // A failing disk: 503 with Retry-After, and nothing acknowledged.
    faults.fail_syncs(true);
    let h = sw_headers(SW_KEY, "dead", now_s(), body.as_bytes());
    let a = post(server.ingest, "busy", &h, body.as_bytes()).await;
    assert_eq!(a.status, 503, "{a:?}");
    assert_eq!(a.header("retry-after").as_deref(), Some("5"));
    server.stop().await;
}

/// Issue #26, 12: an `enqueue` caller cannot forge an ingest event: hookd's own header
/// names (`hookd-*`) are refused on Enqueue, and a key that looks like an ingest key
/// (`<source>:<delivery id>`) does not pre-claim the provider's real delivery.
#[tokio::test]
async fn enqueue_cannot_forge_or_pre_claim_an_ingest_event() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_sources(dir.path(), vec![sw_source("agents", "inbox")]).await;
    let mut client = server.client().await;
    for name in ["hookd-source", "Hookd-Redacted", "hookd-anything"] {
        let forged = client
            .enqueue(hookd_client::Event::to_queue("inbox", b"{}".to_vec()).header(name, "agents"))
            .await
            .unwrap_err();
        assert_eq!(code(&forged), Code::InvalidArgument, "{name}: {forged}");
        assert!(forged.to_string().contains("reserved"), "{forged}");
    }
    // The attacker claims the key of a delivery the provider has not sent yet.
    let claim = client
        .enqueue(
            hookd_client::Event::to_queue("inbox", b"forged".to_vec())
                .idempotency_key("agents:msg_future"),
        )
        .await
        .unwrap();
    assert!(!claim.duplicate);
    let body = br#"{"type":"real"}"#;
    let real = post(
        server.ingest,
        "agents",
        &sw_headers(SW_KEY, "msg_future", now_s(), body),
        body,
    )
    .await;
    assert_eq!(real.status, 202, "{real:?}");
    assert_eq!(real.json()["duplicate"], false, "{real:?}");
    assert_ne!(real.json()["id"].as_str(), Some(claim.id.as_str()));
    let got = receive_all(&mut client, "inbox").await;
    assert_eq!(got.len(), 2);
    assert!(got.iter().any(|m| m.payload == body.to_vec()));
    // The provider's own resend is still a duplicate.
    let again = post(
        server.ingest,
        "agents",
        &sw_headers(SW_KEY, "msg_future", now_s(), body),
        body,
    )
    .await;
    assert_eq!(again.json()["duplicate"], true, "{again:?}");
    server.stop().await;
}

/// Issue #26, 7: a signature header of 1,900 `v1,` entries is refused for its size with a
/// status that says so (400, naming the limit), and a source takes at most 8 secrets.
#[tokio::test]
async fn signature_candidates_and_secrets_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_sources(dir.path(), vec![sw_source("agents", "inbox")]).await;
    let body = br#"{"type":"x"}"#;
    let mut headers = sw_headers(SW_KEY, "msg_many", now_s(), body);
    // Short entries, as the finding sent them: 1,900 fit in the 16 KiB header limit.
    let many = vec!["v1,AA=="; 1_900].join(" ");
    for (n, v) in &mut headers {
        if n == "webhook-signature" {
            *v = format!("{many} {v}");
        }
    }
    let answer = post(server.ingest, "agents", &headers, body).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(answer.body.contains("16"), "{answer:?}");
    let mut client = server.client().await;
    let e = client
        .put_source(pb::Source {
            name: "many-secrets".into(),
            scheme: "standard-webhooks".into(),
            secrets: (0..9).map(|_| sw_secret(SW_KEY)).collect(),
            route: Some(pb::source::Route::Queue("q".into())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    assert!(message(&e).contains("secrets"), "{}", message(&e));
    // Issue #26, 14: a one-character secret is refused.
    let e = client
        .put_source(pb::Source {
            name: "short-secret".into(),
            scheme: "github".into(),
            secrets: vec!["x".into()],
            route: Some(pb::source::Route::Queue("q".into())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    assert!(message(&e).contains("minimum"), "{}", message(&e));
    server.stop().await;
}

/// Issue #26, 9: bodies held before their signature check draw on one byte budget
/// (`connections.max_unverified_ingest_bytes`): past it, 503 with Retry-After before the
/// body is read; the budget comes back when a held request goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unverified_bodies_in_flight_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.sources = vec![sw_source("agents", "inbox")];
    config.connections.max_unverified_ingest_bytes = 1 << 20;
    config.max_payload_bytes = 1 << 20;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    // A sender that announces 800 kB and sends almost none of it.
    let mut held = tokio::net::TcpStream::connect(server.ingest).await.unwrap();
    held.write_all(
        b"POST /in/agents HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          webhook-id: a\r\nwebhook-timestamp: 1\r\nwebhook-signature: v1,AA==\r\n\
          content-length: 800000\r\n\r\n{",
    )
    .await
    .unwrap();
    // The held body is in the budget before anything else is sent: a post in flight when
    // its head arrived would hold the address's place and the held one be refused instead.
    crate::harness::eventually(
        "the held body is counted in hookd_ingest_unverified_bytes",
        async || unverified_bytes(&server).await,
        |&held| held == 800_000,
    )
    .await;
    let body = vec![b' '; 300_000];
    let signed = sw_headers(SW_KEY, "msg_big", now_s(), &body);
    let busy = post(server.ingest, "agents", &signed, &body).await;
    assert_eq!(busy.status, 503, "{busy:?}");
    assert_eq!(busy.header("retry-after").as_deref(), Some("1"), "{busy:?}");
    assert!(
        busy.body.contains("max_unverified_ingest_bytes"),
        "{busy:?}"
    );
    drop(held);
    crate::harness::eventually(
        "the budget comes back once the held request is gone",
        async || unverified_bytes(&server).await,
        |&held| held == 0,
    )
    .await;
    let ok = post(server.ingest, "agents", &signed, &body).await;
    assert_eq!(ok.status, 202, "{ok:?}");
    assert_eq!(unverified_bytes(&server).await, 0);
    server.stop().await;
}

/// `hookd_ingest_unverified_bytes` from `/metrics`.
async fn unverified_bytes(server: &TestServer) -> u64 {
    crate::harness::metric(
        &server.http_get("/metrics").await,
        "hookd_ingest_unverified_bytes",
    )
}

async fn demoted_connections(server: &TestServer) -> u64 {
    crate::harness::metric(
        &server.http_get("/metrics").await,
        "hookd_ingest_demoted_connections_total",
    )
}

/// Issue #26, 9 and 10: a client that has not passed a check (never, or failed one since)
/// has its next connections served at low priority, and still answered; a passing
/// delivery makes it trusted, and the end of a failure's window puts it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_client_is_served_at_low_priority_until_it_passes_a_check() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.sources = vec![sw_source("agents", "inbox")];
    config.connections.max_ingest_auth_failures = 32;
    config.connections.ingest_auth_failure_window_secs = 10;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let body = br#"{"n":1}"#;
    let signed = |id: &str| sw_headers(SW_KEY, id, now_s(), body);
    let bad = |id: &str| {
        let mut h = signed(id);
        h.retain(|(k, _)| k != "webhook-signature");
        h.push(("webhook-signature".into(), "v1,AAAA".into()));
        h
    };
    let status = |r: &Answer| r.status;
    assert_eq!(
        status(&post(server.ingest, "agents", &signed("g0"), body).await),
        202
    );
    assert_eq!(
        demoted_connections(&server).await,
        1,
        "never seen: not trusted"
    );
    assert_eq!(
        status(&post(server.ingest, "agents", &bad("b0"), body).await),
        401
    );
    // Each post is a connection of its own. Trusted now: b0 is served with everyone else;
    // after its failure the next ones are demoted, and answered.
    assert_eq!(
        status(&post(server.ingest, "agents", &bad("b1"), body).await),
        401
    );
    assert_eq!(demoted_connections(&server).await, 2);
    assert_eq!(
        status(&post(server.ingest, "agents", &signed("g1"), body).await),
        202
    );
    assert_eq!(demoted_connections(&server).await, 3);
    // The passing delivery made it trusted again.
    assert_eq!(
        status(&post(server.ingest, "agents", &signed("g2"), body).await),
        202
    );
    assert_eq!(demoted_connections(&server).await, 3);
    // A failure, then the window ends on the test's clock.
    assert_eq!(
        status(&post(server.ingest, "agents", &bad("b2"), body).await),
        401
    );
    server.clock.advance(10_000);
    assert_eq!(
        status(&post(server.ingest, "agents", &signed("g3"), body).await),
        202
    );
    assert_eq!(demoted_connections(&server).await, 3);
    // An hour without a pass: not trusted any more.
    server.clock.advance(hookd::ingest::strikes::TRUSTED_FOR_MS);
    assert_eq!(
        status(
            &post(
                server.ingest,
                "agents",
                // Signed at the server's (advanced) time, within its tolerance.
                &sw_headers(SW_KEY, "g4", server.clock.now_ms() / 1000, body),
                body
            )
            .await
        ),
        202
    );
    assert_eq!(demoted_connections(&server).await, 4);
    server.stop().await;
}

/// One request on a keep-alive connection (no `connection: close` from the client), its
/// answer read to the end of its body: the connection stays usable unless hookd closes it.
async fn keep_alive_post(
    tcp: &mut tokio::net::TcpStream,
    headers: &[(String, String)],
    body: &[u8],
) -> Answer {
    let mut head = format!(
        "POST /in/agents HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let (head_len, body_len) = loop {
        let n = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf))
            .await
            .expect("an answer within 30 s")
            .unwrap();
        assert!(n > 0, "closed before an answer");
        raw.extend_from_slice(&buf[..n]);
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .expect("a content-length");
            break (end + 4, len);
        }
    };
    while raw.len() < head_len + body_len {
        let n = tcp.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed within the body");
        raw.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&raw[..head_len - 4]).into_owned();
    Answer {
        status: head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        head,
        body: String::from_utf8_lossy(&raw[head_len..]).into_owned(),
    }
}

/// A provider's keep-alive connection accepted before its client was trusted is served at
/// low priority; the answer to its first passing delivery closes it (`connection: close`),
/// and the connection the provider opens next is served with everyone else's and kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_keep_alive_connection_ends_once_its_client_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.sources = vec![sw_source("agents", "inbox")];
    config.connections.max_ingest_auth_failures = 32;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let body = br#"{"n":1}"#;
    let signed = |id: &str| sw_headers(SW_KEY, id, now_s(), body);
    let mut first = tokio::net::TcpStream::connect(server.ingest).await.unwrap();
    let answer = keep_alive_post(&mut first, &signed("k0"), body).await;
    assert_eq!(answer.status, 202, "{answer:?}");
    assert_eq!(demoted_connections(&server).await, 1, "never seen: demoted");
    assert_eq!(
        answer.header("connection").as_deref(),
        Some("close"),
        "{answer:?}"
    );
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), first.read_to_end(&mut rest))
        .await
        .expect("hookd closes the demoted connection")
        .unwrap();
    assert!(rest.is_empty(), "nothing after the answer: {rest:?}");
    assert_eq!(promoted_connections(&server).await, 1);
    // The next connection is placed as a trusted client's: kept open across deliveries.
    let mut next = tokio::net::TcpStream::connect(server.ingest).await.unwrap();
    for id in ["k1", "k2", "k3"] {
        let answer = keep_alive_post(&mut next, &signed(id), body).await;
        assert_eq!(answer.status, 202, "{answer:?}");
        assert_eq!(answer.header("connection"), None, "{answer:?}");
    }
    assert_eq!(demoted_connections(&server).await, 1);
    assert_eq!(promoted_connections(&server).await, 1);
    server.stop().await;
}

async fn promoted_connections(server: &TestServer) -> u64 {
    crate::harness::metric(
        &server.http_get("/metrics").await,
        "hookd_ingest_promoted_connections_total",
    )
}

/// Issue #26, 9: one client address holds at most its share (`max_share_percent`) of the
/// unverified-body budget, so a sender holding slow bodies cannot take it from every
/// provider: its next body is refused at once, another address's is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_only_its_share_of_the_unverified_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.sources = vec![sw_source("agents", "inbox")];
    config.connections.max_unverified_ingest_bytes = 1 << 20;
    config.connections.max_share_percent = 25;
    config.max_payload_bytes = 1 << 20;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let from_other = || async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from(([127, 0, 0, 2], 0))).unwrap();
        socket.connect(server.ingest).await.unwrap()
    };
    // 127.0.0.2 holds a body of 200,000 bytes that never finishes.
    let mut held = from_other().await;
    held.write_all(
        b"POST /in/agents HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
          webhook-id: a\r\nwebhook-timestamp: 1\r\nwebhook-signature: v1,AA==\r\n\
          content-length: 200000\r\n\r\n{",
    )
    .await
    .unwrap();
    // Its next body (100,000 bytes, signed) would pass its share of 262,144.
    let body = vec![b' '; 100_000];
    let signed = sw_headers(SW_KEY, "msg_second", now_s(), &body);
    let mut head = String::from("POST /in/agents HTTP/1.1\r\nhost: x\r\nconnection: close\r\n");
    for (k, v) in &signed {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    // The held body is counted before the second is sent (were the second in flight when
    // the held one's head arrived, the held one would be the one refused).
    crate::harness::eventually(
        "the held body is counted in hookd_ingest_unverified_bytes",
        async || unverified_bytes(&server).await,
        |&held| held == 200_000,
    )
    .await;
    let mut tcp = from_other().await;
    tcp.write_all(head.as_bytes()).await.unwrap();
    let _ = tcp.write_all(&body).await;
    let mut second = String::new();
    let _ = tcp.read_to_string(&mut second).await;
    assert!(second.starts_with("HTTP/1.1 503"), "{second}");
    assert!(second.contains("client address 127.0.0.2"), "{second}");
    // Another address still gets in: 300,000 bytes, within the 1 MiB in all.
    let body = vec![b' '; 300_000];
    let signed = sw_headers(SW_KEY, "msg_other", now_s(), &body);
    let ok = post(server.ingest, "agents", &signed, &body).await;
    assert_eq!(ok.status, 202, "{ok:?}");
    drop(held);
    server.stop().await;
}

/// Issue #26, 14: PutSource refuses a source that accepts resends (`tolerance_secs`) for
/// longer than delivery ids deduplicate (`idempotency_retention_secs`).
#[tokio::test]
async fn put_source_refuses_a_tolerance_longer_than_the_dedup_retention() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.idempotency_retention_secs = 60;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut client = server.client().await;
    let source = |tolerance_secs| pb::Source {
        name: "gh".into(),
        scheme: "github".into(),
        secrets: vec![GITHUB_SECRET.into()],
        route: Some(pb::source::Route::Queue("q".into())),
        tolerance_secs,
        ..Default::default()
    };
    let e = client.put_source(source(300)).await.unwrap_err();
    assert_eq!(code(&e), Code::InvalidArgument, "{e}");
    assert!(message(&e).contains("tolerance_secs"), "{}", message(&e));
    assert!(client.put_source(source(60)).await.unwrap().created);
    server.stop().await;
}

/// Issue #26, 14: GitHub's signature covers the body, not `X-GitHub-Delivery`, so a captured
/// delivery sent again under a new id is a new delivery to the default dedup (stored
/// twice, as documented); with `dedup_id = "body:sha256"` it is answered duplicate.
#[tokio::test]
async fn a_github_delivery_replayed_under_a_new_id_is_a_duplicate_with_body_digest_dedup() {
    let dir = tempfile::tempdir().unwrap();
    let github = |name: &str, queue: &str, dedup: Option<&str>| SourceSpec {
        secrets: vec![GITHUB_SECRET.into()],
        dedup_id: dedup.map(str::to_owned),
        ..SourceSpec::new(name, SchemeName::Github, queue)
    };
    let server = start_with_sources(
        dir.path(),
        vec![
            github("by-id", "a", None),
            github("by-body", "b", Some("body:sha256")),
        ],
    )
    .await;
    let body = br#"{"action":"opened","number":7}"#.to_vec();
    let sig = hex(&mac(GITHUB_SECRET.as_bytes(), &[&body]));
    let delivery = |id: &str| {
        vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("x-hub-signature-256".to_owned(), format!("sha256={sig}")),
            ("x-github-event".to_owned(), "pull_request".to_owned()),
            ("x-github-delivery".to_owned(), id.to_owned()),
        ]
    };
    for source in ["by-id", "by-body"] {
        let first = post(server.ingest, source, &delivery("real-1"), &body).await;
        assert_eq!(first.status, 202, "{first:?}");
        assert_eq!(first.json()["duplicate"], false);
        // The same signed bytes under a forged delivery id.
        let replay = post(server.ingest, source, &delivery("forged-2"), &body).await;
        assert_eq!(replay.status, 202, "{replay:?}");
        let duplicate = replay.json()["duplicate"].as_bool().unwrap();
        assert_eq!(duplicate, source == "by-body", "{source}: {replay:?}");
    }
    let mut client = server.client().await;
    assert_eq!(receive_all(&mut client, "a").await.len(), 2);
    assert_eq!(receive_all(&mut client, "b").await.len(), 1);
    // The digest is for dedup only.
    let bad = hookd::ingest::source::Locator::parse("body:sha256", "event_type").unwrap_err();
    assert!(bad.contains("dedup_id only"), "{bad}");
    server.stop().await;
}

/// Issue #26, 7 and 9: a client that keeps failing a source's signature check is refused
/// from its headers (429, `Retry-After`, the connection closed) once it has failed
/// `max_ingest_auth_failures` times in the window, its body neither read nor held; other
/// sources and other addresses are not held, a passing delivery clears the count, and the
/// client is let in again when the window ends (on the test's clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_failing_the_check_is_refused_unread_until_its_window_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.sources = vec![sw_source("agents", "inbox"), sw_source("shop", "inbox")];
    config.connections.max_ingest_auth_failures = 3;
    config.connections.ingest_auth_failure_window_secs = 10;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let body = br#"{"n":1}"#;
    let bad = |id: &str| {
        let mut h = sw_headers(SW_KEY, id, now_s(), body);
        h.retain(|(k, _)| k != "webhook-signature");
        h.push(("webhook-signature".into(), "v1,AAAA".into()));
        h
    };
    // Two failures, then a delivery that passes: the count starts again.
    for i in 0..2 {
        assert_eq!(
            post(server.ingest, "agents", &bad(&format!("b{i}")), body)
                .await
                .status,
            401
        );
    }
    let ok = post(
        server.ingest,
        "agents",
        &sw_headers(SW_KEY, "g0", now_s(), body),
        body,
    )
    .await;
    assert_eq!(ok.status, 202, "{ok:?}");
    for i in 2..4 {
        assert_eq!(
            post(server.ingest, "agents", &bad(&format!("b{i}")), body)
                .await
                .status,
            401,
            "the passing delivery cleared the earlier failures"
        );
    }
    // The third failure in the window trips the allowance.
    assert_eq!(
        post(server.ingest, "agents", &bad("b4"), body).await.status,
        401
    );
    // Now a request is answered from its head alone: it announces 500,000 bytes and sends
    // none of them, and is refused at once, holding nothing of the unverified budget.
    let mut tcp = tokio::net::TcpStream::connect(server.ingest).await.unwrap();
    let mut head = String::from("POST /in/agents HTTP/1.1\r\nhost: x\r\n");
    for (k, v) in sw_headers(SW_KEY, "g1", now_s(), body) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("content-length: 500000\r\n\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_string(&mut answer))
        .await
        .expect("answered and closed without the body")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 10\r\n"), "{answer}");
    assert!(lower.contains("connection: close\r\n"), "{answer}");
    assert!(answer.contains("max_ingest_auth_failures"), "{answer}");
    assert_eq!(unverified_bytes(&server).await, 0);
    // Even a correctly signed delivery from this client waits for the window...
    let held = post(
        server.ingest,
        "agents",
        &sw_headers(SW_KEY, "g2", now_s(), body),
        body,
    )
    .await;
    assert_eq!(held.status, 429, "{held:?}");
    // ...but another source, and another address, are not held.
    let other_source = post(
        server.ingest,
        "shop",
        &sw_headers(SW_KEY, "s0", now_s(), body),
        body,
    )
    .await;
    assert_eq!(other_source.status, 202, "{other_source:?}");
    let mut tcp = {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from(([127, 0, 0, 2], 0))).unwrap();
        socket.connect(server.ingest).await.unwrap()
    };
    let mut request = String::from("POST /in/agents HTTP/1.1\r\nhost: x\r\nconnection: close\r\n");
    for (k, v) in sw_headers(SW_KEY, "o0", now_s(), body) {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
    tcp.write_all(request.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut other_address = String::new();
    let _ = tcp.read_to_string(&mut other_address).await;
    assert!(other_address.starts_with("HTTP/1.1 202"), "{other_address}");
    // The window ends (10 s after the first failure in it): in again.
    server.clock.advance(10_000);
    let again = post(
        server.ingest,
        "agents",
        &sw_headers(SW_KEY, "g3", now_s(), body),
        body,
    )
    .await;
    assert_eq!(again.status, 202, "{again:?}");
    let page = server.http_get("/metrics").await;
    assert!(
        page.lines().any(|l| l
            .starts_with("hookd_ingest_requests_total{outcome=\"throttled\",source=\"agents\"} 2")),
        "{page}"
    );
    server.stop().await;
}

/// Standard Webhooks `v1a` received: a source holding a sender's ed25519 public key
/// (`whpk_`) accepts what the sender's private key signed, beside its HMAC secret while
/// the sender moves over, and refuses what another key signed (401, nothing stored).
#[tokio::test]
async fn a_source_with_a_public_key_accepts_v1a_signatures() {
    use ed25519_dalek::Signer as _;
    let dir = tempfile::tempdir().unwrap();
    let sender = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
    let stranger = ed25519_dalek::SigningKey::from_bytes(&[4u8; 32]);
    let whpk = format!(
        "whpk_{}",
        STANDARD.encode(sender.verifying_key().as_bytes())
    );
    let source = SourceSpec {
        secrets: vec![sw_secret(SW_KEY), whpk.clone()],
        ..SourceSpec::new("signed", SchemeName::StandardWebhooks, "inbox")
    };
    let server = start_with_sources(dir.path(), vec![source]).await;
    let mut client = server.client().await;
    let v1a = |key: &ed25519_dalek::SigningKey, id: &str, ts: u64, body: &[u8]| {
        let signed = [id.as_bytes(), b".", ts.to_string().as_bytes(), b".", body].concat();
        let mut headers = sw_headers(SW_KEY, id, ts, body);
        for (n, v) in &mut headers {
            if n == "webhook-signature" {
                *v = format!("v1a,{}", STANDARD.encode(key.sign(&signed).to_bytes()));
            }
        }
        headers
    };
    let body = br#"{"type":"run.finished"}"#;
    let ok = post(
        server.ingest,
        "signed",
        &v1a(&sender, "msg_a", now_s(), body),
        body,
    )
    .await;
    assert_eq!(ok.status, 202, "{ok:?}");
    // The HMAC secret still verifies v1 (a sender mid-rotation).
    let hmac = post(
        server.ingest,
        "signed",
        &sw_headers(SW_KEY, "msg_b", now_s(), body),
        body,
    )
    .await;
    assert_eq!(hmac.status, 202, "{hmac:?}");
    // Another key's signature, and a signature over another body: refused.
    let forged = post(
        server.ingest,
        "signed",
        &v1a(&stranger, "msg_c", now_s(), body),
        body,
    )
    .await;
    assert_eq!(forged.status, 401, "{forged:?}");
    let moved = post(
        server.ingest,
        "signed",
        &v1a(&sender, "msg_d", now_s(), b"{}"),
        body,
    )
    .await;
    assert_eq!(moved.status, 401, "{moved:?}");
    let got = receive_all(&mut client, "inbox").await;
    assert_eq!(got.len(), 2, "{got:?}");
    // Shown as a kind of key, not its value; a malformed one is refused naming it.
    let listed = client
        .raw()
        .list_sources(pb::ListSourcesRequest {})
        .await
        .unwrap()
        .into_inner()
        .sources;
    let shown = &listed
        .iter()
        .find(|s| s.name == "signed")
        .unwrap()
        .secret_summaries;
    assert_eq!(shown[1].prefix, "whpk_…");
    let e = client
        .put_source(pb::Source {
            name: "bad-key".into(),
            scheme: "standard-webhooks".into(),
            secrets: vec![format!("whpk_{}", STANDARD.encode([1u8; 31]))],
            route: Some(pb::source::Route::Queue("q".into())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        message(&e).contains("secrets[0]") && message(&e).contains("32"),
        "{e}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_source_publishes_to_a_topic_made_of_its_event_type() {
    let dir = tempfile::tempdir().unwrap();
    let source = SourceSpec {
        queue: None,
        topic: Some("agents.{event_type}".into()),
        ..sw_source("agents", "unused")
    };
    let server = start_with_sources(dir.path(), vec![source]).await;
    let mut client = server.client().await;
    for (name, queue, types) in [("runs", "runs", "agents.run.*"), ("all", "all", "*")] {
        client
            .put_subscription(pb::Subscription {
                name: name.into(),
                destination: Some(pb::subscription::Destination::Queue(queue.into())),
                event_types: vec![types.into()],
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let body = br#"{"type": "run.finished", "data": {"run": 7}}"#;
    let headers = sw_headers(SW_KEY, "msg_1", now_s(), body);
    let first = post(server.ingest, "agents", &headers, body).await;
    assert_eq!(first.status, 202, "{first:?}");
    let event = first.json()["id"].as_str().unwrap().to_owned();
    // The provider resends: the same event, nothing more stored.
    let again = post(server.ingest, "agents", &headers, body).await;
    assert_eq!(again.json(), json!({"id": event, "duplicate": true}));
    for queue in ["runs", "all"] {
        let got = receive_all(&mut client, queue).await;
        assert_eq!(got.len(), 1, "{queue}");
        assert_eq!(got[0].event_type, "agents.run.finished");
        assert_eq!(got[0].event_id, event);
        assert_eq!(got[0].payload, body);
    }
    // Another type: only the subscription to every topic takes it.
    let body = br#"{"type": "tool.called", "data": {}}"#;
    let headers = sw_headers(SW_KEY, "msg_2", now_s(), body);
    assert_eq!(
        post(server.ingest, "agents", &headers, body).await.status,
        202
    );
    assert!(receive_all(&mut client, "runs").await.is_empty());
    assert_eq!(receive_all(&mut client, "all").await.len(), 1);
    // No type to make the topic of: 400, nothing stored.
    let body = br#"{"data": {}}"#;
    let headers = sw_headers(SW_KEY, "msg_3", now_s(), body);
    let answer = post(server.ingest, "agents", &headers, body).await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(
        answer.json()["error"]
            .as_str()
            .unwrap()
            .contains("event type: none found"),
        "{answer:?}"
    );
    assert_eq!(pending(&mut client).await, 0);
    server.stop().await;
}
