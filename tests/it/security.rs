//! Authentication (tokens, scopes, rate limits), TLS and mTLS on both listeners, reload of
//! certificates, and the refusal to serve a non-loopback address without authentication.

use std::sync::Arc;
use std::time::Duration;

use hookd::Config;
use hookd::auth::{Scope, token_hash};
use hookd_client::{Client, Event, Options, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_core::names::hex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Code;

use crate::certs::{self, Ca};
use crate::harness::{TestServer, code, test_config};

pub(crate) const AGENT: &str = "agent-token-aaaaaaaaaaaaaaaa";
pub(crate) const READER: &str = "reader-token-bbbbbbbbbbbbbbbb";
pub(crate) const OPS: &str = "ops-token-cccccccccccccccccccc";

fn token_line(name: &str, token: &str, scopes: &[Scope]) -> String {
    let scopes: Vec<String> = scopes.iter().map(|s| format!("\"{}\"", s.name())).collect();
    format!(
        "[[auth.tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nscopes = [{}]\n",
        hex(&token_hash(token)),
        scopes.join(", ")
    )
}

/// A test config with three tokens (the ops one read from a file) plus `extra` TOML.
pub(crate) fn secured(dir: &std::path::Path, extra: &str) -> Config {
    let ops_file = certs::write(dir, "ops.token", &format!("{OPS}\n"));
    let toml = format!(
        "{extra}\n{}{}[[auth.tokens]]\nname = \"ops\"\nfile = \"{}\"\nscopes = [\"admin\"]\n",
        token_line("agent", AGENT, &[Scope::Enqueue]),
        token_line("reader", READER, &[Scope::Read]),
        ops_file.display()
    );
    let parsed = Config::from_toml(&toml).unwrap();
    let base = test_config(&dir.join("data"));
    Config {
        auth: parsed.auth,
        tls: parsed.tls,
        ..base
    }
}

pub(crate) async fn client(server: &TestServer, token: Option<&str>) -> Client {
    Client::connect_with(
        server.grpc.clone(),
        Options {
            token: token.map(str::to_owned),
            ..Options::default()
        },
    )
    .await
    .unwrap()
}

/// The raw response to `GET path` with an optional bearer token, over plaintext.
async fn get(addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> String {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request(path, token).as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.unwrap();
    response
}

fn request(path: &str, token: Option<&str>) -> String {
    let auth = token
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n{auth}connection: close\r\n\r\n")
}

fn status_line(response: &str) -> &str {
    response.lines().next().unwrap_or("")
}

#[tokio::test]
async fn tokens_and_scopes_on_grpc_and_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        secured(dir.path(), ""),
        ManualClock::new(SystemClock.now_ms()),
    )
    .await;
    let event = || Event::to_queue("jobs", b"{}".to_vec());

    // No token, a wrong one, and a malformed header: UNAUTHENTICATED, the same message.
    let mut anonymous = server.client().await;
    let e = anonymous.enqueue(event()).await.unwrap_err();
    assert_eq!(code(&e), Code::Unauthenticated, "{e}");
    let mut wrong = client(&server, Some("not-a-configured-token-0000")).await;
    assert_eq!(
        code(&wrong.enqueue(event()).await.unwrap_err()),
        Code::Unauthenticated
    );

    // Scopes.
    let mut agent = client(&server, Some(AGENT)).await;
    agent.enqueue(event()).await.unwrap();
    let e = agent.stats().await.unwrap_err();
    assert_eq!(code(&e), Code::PermissionDenied);
    assert!(
        e.to_string().contains("`agent`") && e.to_string().contains("`read`"),
        "{e}"
    );
    let put = |url: &str| pb::PutEndpointRequest {
        endpoint: Some(pb::Endpoint {
            name: "billing".into(),
            url: url.into(),
            ..Default::default()
        }),
    };
    let e = agent
        .raw()
        .put_endpoint(put("http://127.0.0.1:9/hook"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let mut reader = client(&server, Some(READER)).await;
    reader.stats().await.unwrap();
    assert_eq!(
        code(&reader.enqueue(event()).await.unwrap_err()),
        Code::PermissionDenied
    );
    assert_eq!(
        reader
            .raw()
            .put_endpoint(put("http://127.0.0.1:9/hook"))
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );
    // The admin token was read from a file; admin includes the other scopes.
    let mut ops = client(&server, Some(OPS)).await;
    ops.raw()
        .put_endpoint(put("http://127.0.0.1:9/hook"))
        .await
        .unwrap();
    ops.enqueue(event()).await.unwrap();
    ops.receive("jobs", 10, Duration::from_secs(30), None)
        .await
        .unwrap();

    // gRPC health stays open; reflection needs a credential by default.
    let channel = tonic::transport::Endpoint::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(serving.into_inner().status, 1);
    use tonic_reflection::pb::v1;
    let mut reflection = v1::server_reflection_client::ServerReflectionClient::new(channel.clone());
    let list = v1::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
            String::new(),
        )),
    };
    let e = reflection
        .server_reflection_info(tokio_stream::iter(vec![list]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);

    // HTTP: /healthz open, /metrics needs `read`.
    assert!(status_line(&get(server.http, "/healthz", None).await).contains("200"));
    let r = get(server.http, "/metrics", None).await;
    assert!(status_line(&r).contains("401"), "{r}");
    assert!(
        r.to_ascii_lowercase().contains("www-authenticate: bearer"),
        "{r}"
    );
    assert!(status_line(&get(server.http, "/metrics", Some(AGENT)).await).contains("403"));
    let r = get(server.http, "/metrics", Some(READER)).await;
    assert!(status_line(&r).contains("200") && r.contains("hookd_messages_enqueued_total"));
    server.stop().await;
}

#[tokio::test]
async fn per_token_rate_limit_answers_resource_exhausted_with_retry_info() {
    use tonic_types::StatusExt;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(SystemClock.now_ms());
    let server = TestServer::start_with(
        secured(
            dir.path(),
            "[auth]\nrate_limit_per_s = 2\nrate_limit_burst = 3\n",
        ),
        clock.clone(),
    )
    .await;
    let mut agent = client(&server, Some(AGENT)).await;
    for _ in 0..3 {
        agent
            .enqueue(Event::to_queue("jobs", b"{}".to_vec()))
            .await
            .unwrap();
    }
    let status = agent
        .raw()
        .enqueue(Event::to_queue("jobs", b"{}".to_vec()).into_request())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let retry = status
        .get_details_retry_info()
        .expect("RetryInfo in the details");
    assert_eq!(retry.retry_delay, Some(Duration::from_millis(500)));
    // Another caller is not held back by this one's rate.
    let mut reader = client(&server, Some(READER)).await;
    reader.stats().await.unwrap();
    // Time refills the bucket.
    clock.advance(500);
    agent
        .enqueue(Event::to_queue("jobs", b"{}".to_vec()))
        .await
        .unwrap();
    // HTTP answers 429 with Retry-After for the same caller.
    clock.advance(1_000);
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(status_line(&get(server.http, "/metrics", Some(READER)).await).to_owned());
    }
    assert!(statuses[0].contains("200"), "{statuses:?}");
    assert!(statuses.iter().any(|s| s.contains("429")), "{statuses:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_non_loopback_listener_without_auth_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    // Bound to every interface; no traffic is sent to a non-loopback address.
    let bind = || async { tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap() };
    let all = || async {
        hookd::Listeners {
            grpc: bind().await,
            http: bind().await,
            ingest: bind().await,
        }
    };
    let config = test_config(dir.path());
    let err = hookd::run(config.clone(), all().await, async {})
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("without authentication"), "{err}");
    assert!(
        err.contains("auth.tokens") && err.contains("--insecure"),
        "{err}"
    );
    // With a token it starts (and stops at once: the shutdown future is ready).
    let secured = secured(dir.path(), "");
    hookd::run(secured, all().await, async {}).await.unwrap();
    // The explicit opt-out starts too.
    let mut insecure = test_config(dir.path());
    insecure.auth.insecure = true;
    hookd::run(insecure, all().await, async {}).await.unwrap();
}

/// Files of a TLS setup: server certificate and key, and the CA of client certificates.
pub(crate) struct TlsFiles {
    pub ca: Ca,
    pub client_ca: Ca,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    client_ca_file: std::path::PathBuf,
}

fn tls_files(dir: &std::path::Path) -> TlsFiles {
    let ca = Ca::new("hookd test server CA");
    let client_ca = Ca::new("hookd test client CA");
    let leaf = ca.server();
    TlsFiles {
        cert: certs::write(dir, "server.pem", &leaf.cert),
        key: certs::write(dir, "server.key", &leaf.key),
        client_ca_file: certs::write(dir, "clients.pem", &client_ca.pem),
        ca,
        client_ca,
    }
}

fn tls_toml(files: &TlsFiles, client_auth: &str) -> String {
    format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nclient_ca_file = \"{}\"\nclient_auth = \"{client_auth}\"\nreload_interval_secs = 1\n\
         [[auth.clients]]\nname = \"worker.internal\"\nscopes = [\"consume\", \"read\"]\n",
        files.cert.display(),
        files.key.display(),
        files.client_ca_file.display()
    )
}

/// A secured config with TLS and optional or required client certificates.
pub(crate) fn tls_config(dir: &std::path::Path, client_auth: &str) -> (Config, TlsFiles) {
    let files = tls_files(dir);
    (secured(dir, &tls_toml(&files, client_auth)), files)
}

fn https(server: &TestServer) -> String {
    server.grpc.replace("http://", "https://")
}

async fn tls_client(
    server: &TestServer,
    ca_pem: &str,
    identity: Option<&certs::Leaf>,
    token: Option<&str>,
) -> Result<Client, hookd_client::Error> {
    Client::connect_with(
        https(server),
        Options {
            token: token.map(str::to_owned),
            tenant: None,
            ca_pem: Some(ca_pem.as_bytes().to_vec()),
            identity_pem: identity.map(|l| (l.cert.as_bytes().to_vec(), l.key.as_bytes().to_vec())),
            domain: Some("localhost".into()),
        },
    )
    .await
}

/// A call over a connection that must fail: at connect or at the first call (with TLS 1.3
/// the server checks a client certificate after the client's side of the handshake is
/// done, so the refusal shows as a transport error of the first call).
async fn refused(client: Result<Client, hookd_client::Error>) -> String {
    match client {
        Err(e) => e.to_string(),
        Ok(mut c) => match c.stats().await {
            Err(e) => {
                assert!(
                    matches!(code(&e), Code::Unavailable | Code::Unknown)
                        && (e.to_string().contains("transport error")
                            || e.to_string().contains("connect")),
                    "{e}"
                );
                e.to_string()
            }
            Ok(_) => panic!("the connection was not refused"),
        },
    }
}

#[tokio::test]
async fn tls_and_mtls_on_both_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let files = tls_files(dir.path());
    let server = TestServer::start_with(
        secured(dir.path(), &tls_toml(&files, "optional")),
        ManualClock::new(SystemClock.now_ms()),
    )
    .await;

    // TLS with a token.
    let mut agent = tls_client(&server, &files.ca.pem, None, Some(AGENT))
        .await
        .unwrap();
    agent
        .enqueue(Event::to_queue("jobs", b"{}".to_vec()))
        .await
        .unwrap();
    // mTLS: the certificate stands in for a token, with the scopes its name has.
    let worker = files.client_ca.client("worker.internal");
    let mut by_cert = tls_client(&server, &files.ca.pem, Some(&worker), None)
        .await
        .unwrap();
    by_cert.stats().await.unwrap();
    let leased = by_cert
        .receive("jobs", 10, Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(leased.len(), 1);
    assert_eq!(
        code(
            &by_cert
                .enqueue(Event::to_queue("jobs", b"{}".to_vec()))
                .await
                .unwrap_err()
        ),
        Code::PermissionDenied
    );
    // A valid certificate whose name is not configured authenticates nobody.
    let stranger = files.client_ca.client("stranger.internal");
    let mut c = tls_client(&server, &files.ca.pem, Some(&stranger), None)
        .await
        .unwrap();
    assert_eq!(code(&c.stats().await.unwrap_err()), Code::Unauthenticated);

    // Refused: a certificate from another CA, an expired one, a plaintext client, and a
    // client that does not trust hookd's CA.
    let other_ca = Ca::new("somebody else");
    let foreign = other_ca.client("worker.internal");
    refused(tls_client(&server, &files.ca.pem, Some(&foreign), None).await).await;
    let expired = files.client_ca.expired_client("worker.internal");
    refused(tls_client(&server, &files.ca.pem, Some(&expired), None).await).await;
    refused(
        Client::connect_with(
            server.grpc.clone(),
            Options {
                token: Some(AGENT.into()),
                ..Options::default()
            },
        )
        .await,
    )
    .await;
    refused(tls_client(&server, &other_ca.pem, None, Some(AGENT)).await).await;

    // The HTTP listener: HTTPS works, plaintext gets no answer.
    let r = https_get(server.http, &files.ca.pem, None, "/metrics", Some(READER))
        .await
        .unwrap();
    assert!(status_line(&r).contains("200"), "{r}");
    let r = https_get(server.http, &files.ca.pem, Some(&worker), "/metrics", None)
        .await
        .unwrap();
    assert!(status_line(&r).contains("200"), "mTLS on HTTP: {r}");
    let plain = get(server.http, "/healthz", None).await;
    assert!(!plain.contains("200 OK"), "{plain}");
    server.stop().await;
}

#[tokio::test]
async fn required_client_certificates_refuse_token_only_clients() {
    let dir = tempfile::tempdir().unwrap();
    let files = tls_files(dir.path());
    let server = TestServer::start_with(
        secured(dir.path(), &tls_toml(&files, "required")),
        ManualClock::new(SystemClock.now_ms()),
    )
    .await;
    refused(tls_client(&server, &files.ca.pem, None, Some(AGENT)).await).await;
    let worker = files.client_ca.client("worker.internal");
    let mut c = tls_client(&server, &files.ca.pem, Some(&worker), None)
        .await
        .unwrap();
    c.stats().await.unwrap();
    // Issue #26, 14: webhook providers present no client certificate; the ingest listener
    // asks for none (`tls.ingest_client_auth = "none"`), so they are answered (here 405:
    // a GET) instead of failing the handshake.
    let answer = https_get(server.ingest, &files.ca.pem, None, "/in/nowhere", None)
        .await
        .expect("the ingest listener's handshake without a client certificate");
    assert!(status_line(&answer).starts_with("HTTP/1.1 405"), "{answer}");
    // The certificate's expiry is exported.
    let metrics = https_get(server.http, &files.ca.pem, Some(&worker), "/metrics", None)
        .await
        .unwrap();
    let expiry: i64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hookd_tls_certificate_expiry_timestamp_seconds "))
        .unwrap_or_else(|| panic!("no expiry metric in:\n{metrics}"))
        .trim()
        .parse()
        .unwrap();
    let now = i64::try_from(SystemClock.now_ms() / 1000).unwrap();
    assert!(expiry > now, "{expiry} vs now {now}");
    server.stop().await;
}

/// An expired serving certificate still loads (a restart must not take hookd down), but
/// hookd says so, and exports its notAfter.
#[test]
fn an_expired_certificate_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("hookd test server CA");
    let leaf = ca.expired_server();
    let config = hookd::listen::TlsConfig {
        cert_file: Some(certs::write(dir.path(), "old.pem", &leaf.cert)),
        key_file: Some(certs::write(dir.path(), "old.key", &leaf.key)),
        ..Default::default()
    };
    let tls = hookd::listen::Tls::from_config(&config).unwrap().unwrap();
    assert_eq!(tls.not_after(), 1_609_459_200, "2021-01-01T00:00:00Z");
    let now = i64::try_from(SystemClock.now_ms() / 1000).unwrap();
    let said = hookd::listen::expiry_warning(tls.not_after(), now).unwrap();
    assert!(
        said.contains("expired") && said.contains("tls.cert_file"),
        "{said}"
    );
    assert!(
        hookd::listen::expiry_warning(now + 3 * 86_400, now)
            .unwrap()
            .contains("expires in 3 day(s)")
    );
    assert_eq!(hookd::listen::expiry_warning(now + 30 * 86_400, now), None);
}

#[tokio::test]
async fn certificates_are_reloaded_when_the_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let files = tls_files(dir.path());
    let server = TestServer::start_with(
        secured(dir.path(), &tls_toml(&files, "optional")),
        ManualClock::new(SystemClock.now_ms()),
    )
    .await;
    tls_client(&server, &files.ca.pem, None, Some(READER))
        .await
        .unwrap()
        .stats()
        .await
        .unwrap();
    // A new CA and certificate in the same files (key first: a reload between the two
    // writes fails on the mismatch and keeps the old pair, then the next check succeeds).
    let ca2 = Ca::new("rotated CA");
    let leaf = ca2.server();
    std::fs::write(&files.key, &leaf.key).unwrap();
    std::fs::write(&files.cert, &leaf.cert).unwrap();
    // Checked every second: within 15 s a client trusting only the new CA gets in...
    let mut ok = false;
    for _ in 0..150 {
        if let Ok(mut c) = tls_client(&server, &ca2.pem, None, Some(READER)).await
            && c.stats().await.is_ok()
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ok, "the new certificate was never served");
    // ...and one trusting only the old CA is refused, with no restart.
    refused(tls_client(&server, &files.ca.pem, None, Some(READER)).await).await;
    server.stop().await;
}

#[tokio::test]
async fn tls_start_up_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let files = tls_files(dir.path());
    let other = files.ca.server();
    let other_key = certs::write(dir.path(), "other.key", &other.key);
    let start = |toml: String| {
        let config = secured(dir.path(), &toml);
        async move {
            hookd_testkit::InProcess::start(config, hookd::Hooks::default())
                .await
                .map(|_| ())
                .unwrap_err()
                .to_string()
        }
    };
    let e = start(format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        files.cert.display(),
        other_key.display()
    ))
    .await;
    assert!(
        e.contains("tls.key_file") && e.contains("does not go with"),
        "{e}"
    );
    let e = start(format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        dir.path().join("nope.pem").display(),
        files.key.display()
    ))
    .await;
    assert!(e.contains("tls.cert_file") && e.contains("nope.pem"), "{e}");
    let e = start(format!(
        "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
        files.cert.display(),
        files.cert.display()
    ))
    .await;
    assert!(
        e.contains("tls.key_file") && e.contains("no PEM private key"),
        "{e}"
    );
}

/// `GET path` over TLS (optionally with a client certificate); the raw response.
async fn https_get(
    addr: std::net::SocketAddr,
    ca_pem: &str,
    identity: Option<&certs::Leaf>,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match identity {
        Some(leaf) => builder
            .with_client_auth_cert(
                rustls::pki_types::CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
                    .map(|c| c.unwrap())
                    .collect(),
                rustls::pki_types::PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await?;
    tls.write_all(request(path, token).as_bytes()).await?;
    let mut response = Vec::new();
    let _ = tls.read_to_end(&mut response).await;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// SIGHUP re-reads the certificate at once (the file check here is hourly, so only the
/// signal can explain the change), without a restart: the same process serves the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let files = tls_files(dir.path());
    let config = dir.path().join("hookd.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nreload_interval_secs = 3600\n{}",
            files.cert.display(),
            files.key.display(),
            token_line("reader", READER, &[Scope::Read])
        ),
    )
    .unwrap();
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_hookd-under-test"));
    // Ready means gRPC health over plaintext, which a TLS listener refuses: start it
    // directly and poll over TLS.
    let grpc = hookd_testkit::free_port().unwrap();
    let mut child = tokio::process::Command::new(exe)
        .args(["serve", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args([
            "--grpc-addr",
            &format!("127.0.0.1:{grpc}"),
            "--http-addr",
            "127.0.0.1:0",
            "--ingest-addr",
            "127.0.0.1:0",
        ])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("https://127.0.0.1:{grpc}");
    let connect = |ca: String| {
        let url = url.clone();
        async move {
            let mut c = Client::connect_with(
                url,
                Options {
                    token: Some(READER.into()),
                    ca_pem: Some(ca.into_bytes()),
                    domain: Some("localhost".into()),
                    ..Options::default()
                },
            )
            .await?;
            c.stats().await.map(|_| ())
        }
    };
    let mut up = false;
    for _ in 0..300 {
        if connect(files.ca.pem.clone()).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(up, "hookd did not serve TLS");
    let ca2 = Ca::new("rotated by SIGHUP");
    let leaf = ca2.server();
    std::fs::write(&files.key, &leaf.key).unwrap();
    std::fs::write(&files.cert, &leaf.cert).unwrap();
    // Not yet: nothing re-read the files.
    assert!(connect(ca2.pem.clone()).await.is_err());
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    let mut reloaded = false;
    for _ in 0..100 {
        if connect(ca2.pem.clone()).await.is_ok() {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(reloaded, "SIGHUP did not reload the certificate");
    assert!(connect(files.ca.pem.clone()).await.is_err());
    assert!(
        child.try_wait().unwrap().is_none(),
        "the same process serves"
    );
    child.kill().await.unwrap();
}

/// Issue #26, 11: Watch streams are bounded per caller (and in total): one caller opening
/// more than 16 gets RESOURCE_EXHAUSTED naming the limit, and a stream closed gives its
/// place back.
#[tokio::test]
async fn watch_streams_are_capped_per_caller() {
    let dir = tempfile::tempdir().unwrap();
    let server = crate::harness::TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let mut open = Vec::new();
    for _ in 0..16 {
        let stream = c
            .raw()
            .watch(hookd_proto::v1::WatchRequest::default())
            .await
            .unwrap()
            .into_inner();
        open.push(stream);
    }
    let refused = c
        .raw()
        .watch(hookd_proto::v1::WatchRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused}");
    assert!(refused.message().contains("16"), "{refused}");
    drop(open.pop());
    // The place comes back once the stream's forwarder sees it closed.
    let again = crate::harness::eventually(
        "a closed Watch stream gives its place back",
        async || {
            c.raw()
                .watch(hookd_proto::v1::WatchRequest::default())
                .await
                .map(|s| s.into_inner())
                .map_err(|e| e.code())
        },
        |r| r.is_ok(),
    )
    .await;
    assert!(again.is_ok());
    server.stop().await;
}
