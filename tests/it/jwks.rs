//! Endpoints' `v1a` keys as a JWKS (`GET /jwks/{endpoint}`): a receiver verifies a delivery
//! with the key its `hookd-key-id` names, fetched from the set; through a rotation the
//! retired key stays in the set (so what it signed still verifies) until
//! `retired_signing_key_secs` passes. PyJWT (a JWK parser no one here wrote) reads the set
//! and verifies with it in `python_pyjwt_reads_the_jwks_and_verifies_a_delivery`.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::Verifier as _;
use hookd_client::{Event, pb};
use serde_json::Value;

use crate::harness::TestServer;
use crate::sink::{Received, Reply, Sink};

fn whsk(seed: u8) -> String {
    format!("whsk_{}", STANDARD.encode([seed; 32]))
}

async fn put(c: &mut hookd_client::Client, url: String, secrets: Vec<String>) {
    c.put_endpoint(pb::Endpoint {
        name: "signed".into(),
        url,
        secrets,
        ..Default::default()
    })
    .await
    .unwrap();
}

/// The JWKS as a receiver fetches it: (status, headers and body text).
async fn fetch(server: &TestServer, name: &str) -> (u16, String) {
    let raw = server.http_get(&format!("/jwks/{name}")).await;
    let status = raw
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, raw)
}

fn body_json(raw: &str) -> Value {
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {raw}"))
}

/// Verifies `got`'s `v1a` entries as a receiver holding only the JWKS would: each entry
/// with the key its `hookd-key-id` names.
fn verify_with_jwks(got: &Received, id: &str, body: &[u8], jwks: &Value) -> Vec<String> {
    let h = |name: &str| got.headers[name].to_str().unwrap().to_owned();
    let kids: Vec<String> = h("hookd-key-id").split(' ').map(str::to_owned).collect();
    let v1a: Vec<String> = h("webhook-signature")
        .split(' ')
        .filter_map(|e| e.strip_prefix("v1a,").map(str::to_owned))
        .collect();
    assert_eq!(kids.len(), v1a.len(), "one key id per v1a entry");
    let signed = [format!("{id}.{}.", h("webhook-timestamp")).as_bytes(), body].concat();
    for (kid, sig) in kids.iter().zip(&v1a) {
        let jwk = jwks["keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["kid"] == kid.as_str())
            .unwrap_or_else(|| panic!("kid {kid} not in {jwks}"));
        assert_eq!(
            (&jwk["kty"], &jwk["crv"], &jwk["alg"]),
            (&"OKP".into(), &"Ed25519".into(), &"EdDSA".into())
        );
        let x: [u8; 32] = URL_SAFE_NO_PAD
            .decode(jwk["x"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let sig: [u8; 64] = STANDARD.decode(sig).unwrap().try_into().unwrap();
        ed25519_dalek::VerifyingKey::from_bytes(&x)
            .unwrap()
            .verify(&signed, &ed25519_dalek::Signature::from_bytes(&sig))
            .unwrap();
    }
    kids
}

#[tokio::test]
async fn a_receiver_verifies_with_the_jwks_through_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = server.client().await;
    put(&mut c, sink.url("/in"), vec![whsk(1)]).await;

    let (status, raw) = fetch(&server, "signed").await;
    assert_eq!(status, 200, "{raw}");
    assert!(
        raw.to_ascii_lowercase()
            .contains("content-type: application/jwk-set+json"),
        "{raw}"
    );
    let before = body_json(&raw);
    assert_eq!(before["keys"].as_array().unwrap().len(), 1, "{before}");
    let first_kid = before["keys"][0]["kid"].as_str().unwrap().to_owned();
    // The console and `hookd endpoints get` say where the set is.
    let page = server.http_get("/ui/endpoints/signed").await;
    assert!(
        page.contains(r#"<a href="/jwks/signed"><code>/jwks/signed</code></a>"#),
        "{page}"
    );
    let get = crate::ctl::hookd(&server.grpc, &["endpoints", "get", "signed"], None).await;
    assert!(
        get.stdout
            .contains("jwks        /jwks/signed on hookd's HTTP listener"),
        "{}",
        get.stdout
    );

    let body = br#"{"n":1}"#;
    let sent = c
        .enqueue(Event::to_endpoint("signed", body.to_vec()))
        .await
        .unwrap();
    let got = sink.wait_for(1).await;
    assert_eq!(
        verify_with_jwks(&got[0], &sent.id, body, &before),
        vec![first_kid.clone()]
    );

    // Rotation: a second key beside the first (both sign), then the first taken off.
    put(&mut c, sink.url("/in"), vec![whsk(1), whsk(2)]).await;
    put(&mut c, sink.url("/in"), vec![whsk(2)]).await;
    let during = body_json(&fetch(&server, "signed").await.1);
    let keys = during["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2, "{during}");
    assert!(keys[0].get("hookd_retired_unix_ms").is_none(), "{during}");
    assert_eq!(
        keys[1]["kid"],
        first_kid.as_str(),
        "the retired key stays: {during}"
    );
    assert!(keys[1]["hookd_retired_unix_ms"].is_u64(), "{during}");
    // What the first key signed still verifies against the set; new deliveries name the
    // second key.
    verify_with_jwks(&got[0], &sent.id, body, &during);
    let sent2 = c
        .enqueue(Event::to_endpoint("signed", body.to_vec()))
        .await
        .unwrap();
    let got2 = sink.wait_for(2).await;
    let kids = verify_with_jwks(&got2[1], &sent2.id, body, &during);
    assert_eq!(kids, vec![keys[0]["kid"].as_str().unwrap().to_owned()]);

    // Past retired_signing_key_secs (7 days) the retired key is gone.
    server.advance(7 * 24 * 3600 * 1000 + 1).await;
    let after = body_json(&fetch(&server, "signed").await.1);
    assert_eq!(after["keys"].as_array().unwrap().len(), 1, "{after}");
    assert_ne!(after["keys"][0]["kid"], first_kid.as_str());

    // An endpoint with only an HMAC secret, or none by that name: 404.
    c.put_endpoint(pb::Endpoint {
        name: "hmac-only".into(),
        url: sink.url("/h"),
        secrets: vec![format!("whsec_{}", STANDARD.encode([7u8; 32]))],
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(fetch(&server, "hmac-only").await.0, 404);
    assert_eq!(fetch(&server, "nobody").await.0, 404);
    server.stop().await;
}

/// PyJWT (`PyJWKSet`) reads hookd's JWKS and verifies a delivery's `v1a` signature with the
/// key its `hookd-key-id` names (tests/python/jwks_verify.py).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with pyjwt[crypto] (tests/python/requirements.txt); .ci/run runs it"]
async fn python_pyjwt_reads_the_jwks_and_verifies_a_delivery() {
    let python = std::env::var("HOOKD_PYTHON").expect(
        "HOOKD_PYTHON must name a Python with tests/python/requirements.txt installed (.ci/run sets it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = server.client().await;
    put(&mut c, sink.url("/in"), vec![whsk(3), whsk(4)]).await;
    let body = br#"{"order":7}"#;
    let sent = c
        .enqueue(Event::to_endpoint("signed", body.to_vec()))
        .await
        .unwrap();
    let got = sink.wait_for(1).await;
    let h = |name: &str| got[0].headers[name].to_str().unwrap().to_owned();
    let body_file = dir.path().join("body");
    std::fs::write(&body_file, body).unwrap();
    let args = vec![
        format!("http://{}/jwks/signed", server.http),
        sent.id,
        h("webhook-timestamp"),
        h("webhook-signature"),
        h("hookd-key-id"),
        body_file.display().to_string(),
    ];
    crate::harness::run_script(python, "python/jwks_verify.py", args).await;
    server.stop().await;
}
