//! Signing secrets: never shown (summaries only; reveal needs admin), sealed at rest with a
//! configured key, rotated, and refused at start when no configured key opens them; the
//! data directory 0700 and its files 0600.

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use hookd::Config;
use hookd_client::{Client, Event, Options, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use tonic::Code;

use crate::harness::{TestServer, test_config};
use crate::sink::{Reply, Sink};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The base64 key material of SECRET, which must never appear on disk when sealed.
const KEY_MATERIAL: &str = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn endpoint(url: String) -> pb::Endpoint {
    pb::Endpoint {
        name: "billing".into(),
        url,
        secrets: vec![SECRET.into()],
        ..Default::default()
    }
}

async fn get(c: &mut Client, reveal: bool) -> Result<pb::Endpoint, tonic::Status> {
    c.raw()
        .get_endpoint(pb::GetEndpointRequest {
            name: "billing".into(),
            reveal_secrets: reveal,
        })
        .await
        .map(|r| r.into_inner().endpoint.unwrap())
}

#[tokio::test]
async fn secrets_are_shown_as_prefix_and_fingerprint_only() {
    let dir = tempfile::tempdir().unwrap();
    let admin = "admin-token-0123456789abcdef";
    let reader = "reader-token-0123456789abcdef";
    let hash = |t: &str| hookd_core::names::hex(&hookd::auth::token_hash(t));
    let auth = Config::from_toml(&format!(
        "[[auth.tokens]]\nname = \"ops\"\nsha256 = \"{}\"\nscopes = [\"admin\"]\n\
         [[auth.tokens]]\nname = \"dash\"\nsha256 = \"{}\"\nscopes = [\"read\"]\n",
        hash(admin),
        hash(reader)
    ))
    .unwrap()
    .auth;
    let config = Config {
        auth,
        ..test_config(dir.path())
    };
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let connect = |token: &str| {
        Client::connect_with(
            server.grpc.clone(),
            Options {
                token: Some(token.into()),
                ..Options::default()
            },
        )
    };
    let mut ops = connect(admin).await.unwrap();
    let put = ops
        .raw()
        .put_endpoint(pb::PutEndpointRequest {
            endpoint: Some(endpoint("http://127.0.0.1:9/hook".into())),
        })
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap();
    let expect_summary = |e: &pb::Endpoint| {
        assert!(e.secrets.is_empty(), "secret returned: {e:?}");
        assert_eq!(e.secret_summaries.len(), 1);
        assert_eq!(e.secret_summaries[0].prefix, "whsec_…");
        assert!(
            e.secret_summaries[0]
                .fingerprint
                .starts_with("hmac-sha256:")
        );
        assert!(!format!("{e:?}").contains(KEY_MATERIAL));
    };
    expect_summary(&put);
    let mut dash = connect(reader).await.unwrap();
    expect_summary(&get(&mut dash, false).await.unwrap());
    let listed = dash
        .raw()
        .list_endpoints(pb::ListEndpointsRequest {})
        .await
        .unwrap()
        .into_inner();
    expect_summary(&listed.endpoints[0]);
    // Reveal needs admin.
    let e = get(&mut dash, true).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("reveal_secrets"), "{e:?}");
    let revealed = get(&mut ops, true).await.unwrap();
    assert_eq!(revealed.secrets, [SECRET]);
    server.stop().await;
}

/// Every byte of the data directory, to look for a value that must not be there.
fn disk_contains(dir: &std::path::Path, needle: &[u8]) -> bool {
    let mut found = false;
    for entry in walk(dir) {
        let bytes = std::fs::read(&entry).unwrap();
        found |= bytes.windows(needle.len()).any(|w| w == needle);
    }
    found
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn with_keys(dir: &std::path::Path, data: &std::path::Path, keys: &[(&str, u8)]) -> Config {
    let mut toml = String::from("[secrets]\nkeys = [");
    for (i, (id, byte)) in keys.iter().enumerate() {
        let path = dir.join(format!("{id}.key"));
        std::fs::write(
            &path,
            base64::engine::general_purpose::STANDARD.encode([*byte; 32]),
        )
        .unwrap();
        if i > 0 {
            toml.push_str(", ");
        }
        toml.push_str(&format!(
            "{{ id = \"{id}\", file = \"{}\" }}",
            path.display()
        ));
    }
    toml.push(']');
    Config {
        secrets: Config::from_toml(&toml).unwrap().secrets,
        ..test_config(data)
    }
}

/// Delivers one event to `billing` and checks its signature against SECRET.
async fn delivers_signed(server: &TestServer, sink: &Sink, n: usize) {
    let mut c = server.client().await;
    let sent = c
        .enqueue(Event::to_endpoint("billing", b"{}".to_vec()))
        .await
        .unwrap();
    let got = sink.wait_for(n).await;
    let r = got.last().unwrap();
    let h = |name: &str| r.headers[name].to_str().unwrap().to_owned();
    let key = base64::engine::general_purpose::STANDARD
        .decode(KEY_MATERIAL)
        .unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{}.{}.", sent.id, h("webhook-timestamp")).as_bytes());
    mac.update(b"{}");
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    assert_eq!(h("webhook-signature"), format!("v1,{expected}"));
}

#[tokio::test]
async fn secrets_are_sealed_at_rest_and_keys_rotate() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let sink = Sink::start(Reply::Status(204)).await;
    let clock = ManualClock::new(SystemClock.now_ms());

    // Key k1: the secret reaches neither the log nor the database in clear, and
    // deliveries are signed with it.
    let server =
        TestServer::start_with(with_keys(dir.path(), &data, &[("k1", 1)]), clock.clone()).await;
    let mut c = server.client().await;
    c.put_endpoint(endpoint(sink.url("/hook"))).await.unwrap();
    delivers_signed(&server, &sink, 1).await;
    server.stop().await;
    assert!(
        !disk_contains(&data, KEY_MATERIAL.as_bytes()),
        "secret in clear on disk"
    );
    assert!(disk_contains(&data, b"hookd-sealed:v1:k1:"));

    // Rotation: k2 first, k1 still listed; at start every secret is sealed under k2.
    let server = TestServer::start_with(
        with_keys(dir.path(), &data, &[("k2", 2), ("k1", 1)]),
        clock.clone(),
    )
    .await;
    delivers_signed(&server, &sink, 2).await;
    server.stop().await;
    // k1 can go now.
    let server =
        TestServer::start_with(with_keys(dir.path(), &data, &[("k2", 2)]), clock.clone()).await;
    delivers_signed(&server, &sink, 3).await;
    server.stop().await;
    assert!(!disk_contains(&data, KEY_MATERIAL.as_bytes()));

    // Without the key that sealed them, hookd refuses to start (rather than sending
    // unsigned deliveries), naming the endpoint and the key.
    let start = |config: Config| async {
        hookd_testkit::InProcess::start(config, hookd::Hooks::default())
            .await
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let e = start(with_keys(dir.path(), &data, &[("k3", 3)])).await;
    assert!(e.contains("billing") && e.contains("`k2`"), "{e}");
    let e = start(test_config(&data)).await;
    assert!(e.contains("no [secrets] keys"), "{e}");
}

#[cfg(unix)]
#[tokio::test]
async fn data_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = TestServer::start(&data).await;
    let mut c = server.client().await;
    c.enqueue(Event::to_queue("q", b"x".to_vec()))
        .await
        .unwrap();
    server.stop().await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700, "data directory");
    let files = walk(&data);
    assert!(files.len() >= 2, "{files:?}");
    for file in files {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    // A directory made by an older hookd (0755, 0644) is tightened at start.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    for file in walk(&data) {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let server = TestServer::start(&data).await;
    server.stop().await;
    assert_eq!(mode(&data), 0o700);
    for file in walk(&data) {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
}
