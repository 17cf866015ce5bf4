//! An endpoint's way out, each against a real server in the test: an HTTP proxy (CONNECT)
//! whose address is the one the destination guard checks; a client certificate presented
//! to an HTTPS endpoint that requires one (mTLS); OAuth2 client credentials, the token
//! fetched from a token endpoint, kept, and fetched again before it expires (on the
//! injected clock) or after a 401.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use hookd_client::{Client, Event};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_proto::v1 as pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::certs::{self, Ca};
use crate::harness::{TestServer, eventually, test_config};
use crate::sink::{Reply, Sink};

/// Each CONNECT line a proxy got, with its Proxy-Authorization.
type Connects = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A CONNECT proxy on 127.0.0.1:0 that tunnels every request to `to`, whatever host it
/// names (so no test traffic ever leaves loopback), and records each CONNECT line and
/// its Proxy-Authorization.
#[derive(Clone, Default)]
struct Proxy {
    seen: Connects,
}

impl Proxy {
    async fn start(&self, to: SocketAddr) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = self.seen.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if client.read_exact(&mut byte).await.is_err() || head.len() > 8192 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let line = head.lines().next().unwrap_or("").to_owned();
                    let auth = head.lines().find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("proxy-authorization")
                            .then(|| value.trim().to_owned())
                    });
                    seen.lock().unwrap().push((line, auth));
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(to).await else {
                        return;
                    };
                    if client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        addr
    }

    fn seen(&self) -> Vec<(String, Option<String>)> {
        self.seen.lock().unwrap().clone()
    }
}

async fn until_delivered(c: &mut Client, id: &str) -> pb::GetMessageResponse {
    eventually(
        "the message delivered",
        async || c.get_message(id).await.unwrap(),
        |m| m.state == pb::MessageState::Delivered as i32,
    )
    .await
}

async fn until_attempted(c: &mut Client, id: &str) -> pb::GetMessageResponse {
    eventually(
        "a recorded attempt",
        async || c.get_message(id).await.unwrap(),
        |m| !m.history.is_empty(),
    )
    .await
}

fn endpoint(name: &str, url: String) -> pb::Endpoint {
    pb::Endpoint {
        name: name.into(),
        url,
        max_attempts: 3,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_proxy_tunnels_every_attempt_and_is_the_address_the_guard_checks() {
    let sink = Sink::start(Reply::Status(204)).await;
    let proxy = Proxy::default();
    let proxy_addr = proxy.start(sink.addr()).await;
    // A second proxy, on a port the guard does not allow: it must never see a connection.
    let refused = Proxy::default();
    let refused_addr = refused.start(sink.addr()).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    // Only the proxy's port: neither the sink's nor the endpoint's own address.
    config.delivery.allow_destinations = vec![
        format!("127.0.0.1/32:{}", proxy_addr.port())
            .parse()
            .unwrap(),
    ];
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;

    // The endpoint's host is never resolved or dialled by hookd: the proxy gets it by
    // name (this test's proxy sends it to the sink).
    let put = c
        .put_endpoint(pb::Endpoint {
            proxy_url: format!("http://agent:p%40ss@127.0.0.1:{}", proxy_addr.port()),
            ..endpoint("proxied", "http://billing.internal.example/hook".into())
        })
        .await
        .unwrap();
    let shown = put.endpoint.unwrap();
    assert_eq!(
        shown.proxy_url,
        format!("http://agent:…@127.0.0.1:{}", proxy_addr.port()),
        "answers hide the proxy's password"
    );
    let id = c
        .enqueue(Event::to_endpoint("proxied", b"{\"n\":1}".to_vec()))
        .await
        .unwrap()
        .id;
    until_delivered(&mut c, &id).await;
    let got = sink.received();
    assert_eq!(&got[0].body[..], b"{\"n\":1}");
    assert_eq!(got[0].uri.path(), "/hook");
    let seen = proxy.seen();
    assert_eq!(
        seen[0].0, "CONNECT billing.internal.example:80 HTTP/1.1",
        "{seen:?}"
    );
    let basic = base64::engine::general_purpose::STANDARD.encode("agent:p@ss");
    assert_eq!(
        seen[0].1.as_deref(),
        Some(format!("Basic {basic}").as_str())
    );

    // A proxy the guard refuses: the attempt is refused before any connection.
    c.put_endpoint(pb::Endpoint {
        proxy_url: format!("http://127.0.0.1:{}", refused_addr.port()),
        ..endpoint("blocked", "http://billing.internal.example/hook".into())
    })
    .await
    .unwrap();
    let id = c
        .enqueue(Event::to_endpoint("blocked", b"x".to_vec()))
        .await
        .unwrap()
        .id;
    let m = until_attempted(&mut c, &id).await;
    assert!(
        m.last_error.contains("destination refused"),
        "{}",
        m.last_error
    );
    assert!(
        refused.seen().is_empty(),
        "the refused proxy saw {:?}",
        refused.seen()
    );

    // Issue #49, 7: an endpoint at hookd's own listener through the proxy (which would
    // reach it from this host) is refused before the tunnel is asked for, as PutEndpoint
    // warns; so is `localhost` at that port.
    let connects = proxy.seen().len();
    for (name, host) in [("itself", "127.0.0.1"), ("itself-by-name", "localhost")] {
        c.put_endpoint(pb::Endpoint {
            proxy_url: format!("http://127.0.0.1:{}", proxy_addr.port()),
            ..endpoint(
                name,
                format!("http://{host}:{}/v1/stats", server.http.port()),
            )
        })
        .await
        .unwrap();
        let id = c
            .enqueue(Event::to_endpoint(name, b"x".to_vec()))
            .await
            .unwrap()
            .id;
        let m = until_attempted(&mut c, &id).await;
        assert!(
            m.last_error.contains("destination refused"),
            "{name}: {}",
            m.last_error
        );
    }
    assert_eq!(
        proxy.seen().len(),
        connects,
        "no CONNECT for hookd's own listener: {:?}",
        proxy.seen()
    );

    // What a proxy URL may be.
    for (bad, says) in [
        ("https://127.0.0.1:3128", "scheme"),
        ("http://127.0.0.1:3128/path", "no path"),
        ("socks5://127.0.0.1:1080", "scheme"),
    ] {
        let err = c
            .put_endpoint(pb::Endpoint {
                proxy_url: bad.into(),
                ..endpoint("bad", "http://example.com/".into())
            })
            .await
            .unwrap_err();
        let message = crate::harness::message(&err);
        assert!(
            message.starts_with("endpoint.proxy_url:") && message.contains(says),
            "{bad}: {message}"
        );
    }
    server.stop().await;
}

/// An HTTPS receiver that requires a client certificate signed by `ca`; returns its
/// address and the subjects of the client certificates of the requests it answered.
async fn mtls_sink(ca: &Ca) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let leaf = ca.server();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap())
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .unwrap(),
            PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap(),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let subjects = Arc::new(Mutex::new(Vec::new()));
    let seen = subjects.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let subject = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first().cloned())
                    .and_then(|der| {
                        x509_parser::parse_x509_certificate(der.as_ref())
                            .ok()
                            .map(|(_, c)| c.subject().to_string())
                    })
                    .unwrap_or_default();
                let service = hyper::service::service_fn(move |_req| {
                    seen.lock().unwrap().push(subject.clone());
                    async {
                        Ok::<_, hyper::Error>(
                            hyper::Response::builder()
                                .status(204)
                                .body(http_body_util::Empty::<bytes::Bytes>::new())
                                .unwrap(),
                        )
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, subjects)
}

#[tokio::test]
async fn a_client_certificate_is_presented_to_an_endpoint_that_requires_one() {
    let ca = Ca::new("hookd test CA");
    let (addr, subjects) = mtls_sink(&ca).await;
    let url = format!("https://localhost:{}/mtls", addr.port());
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.ca_file = Some(certs::write(dir.path(), "ca.pem", &ca.pem));
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    let client = ca.client("hookd-agent.internal");

    let put = c
        .put_endpoint(pb::Endpoint {
            client_certificate_pem: client.cert.clone(),
            client_key_pem: client.key.clone(),
            ..endpoint("mtls", url.clone())
        })
        .await
        .unwrap();
    let shown = put.endpoint.unwrap();
    assert!(shown.client_key_pem.is_empty(), "the key is write-only");
    assert!(
        shown
            .client_certificate_summary
            .contains("CN=hookd-agent.internal"),
        "{}",
        shown.client_certificate_summary
    );
    let id = c
        .enqueue(Event::to_endpoint("mtls", b"{}".to_vec()))
        .await
        .unwrap()
        .id;
    until_delivered(&mut c, &id).await;
    assert_eq!(
        subjects.lock().unwrap().as_slice(),
        ["CN=hookd-agent.internal"]
    );

    // The same endpoint without it: the handshake fails, the attempt is retried.
    c.put_endpoint(endpoint("no-cert", url)).await.unwrap();
    let id = c
        .enqueue(Event::to_endpoint("no-cert", b"{}".to_vec()))
        .await
        .unwrap()
        .id;
    let m = until_attempted(&mut c, &id).await;
    assert_eq!(m.history[0].outcome, "network_error", "{m:?}");
    assert_eq!(subjects.lock().unwrap().len(), 1);

    // A key that is not the certificate's, or one without the other: refused, named.
    let other = ca.client("someone-else");
    for (cert, key, field) in [
        (
            client.cert.clone(),
            other.key.clone(),
            "endpoint.client_key_pem",
        ),
        (
            client.cert.clone(),
            String::new(),
            "endpoint.client_key_pem",
        ),
        (
            String::new(),
            client.key.clone(),
            "endpoint.client_certificate_pem",
        ),
        (
            "not pem".to_owned(),
            client.key.clone(),
            "endpoint.client_certificate_pem",
        ),
    ] {
        let err = c
            .put_endpoint(pb::Endpoint {
                client_certificate_pem: cert,
                client_key_pem: key,
                ..endpoint("bad", "https://localhost/".into())
            })
            .await
            .unwrap_err();
        let message = crate::harness::message(&err);
        assert!(message.starts_with(field), "{field}: {message}");
    }
    server.stop().await;
}

/// A token endpoint: checks client_secret_basic and the form, answers `tok-N` valid for
/// `lifetime_s`; `fail` makes it answer 500. Counts requests.
#[derive(Clone, Default)]
struct TokenServer {
    issued: Arc<Mutex<u32>>,
    fail: Arc<std::sync::atomic::AtomicBool>,
    forms: Arc<Mutex<Vec<String>>>,
}

impl TokenServer {
    async fn start(&self, lifetime_s: u64) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let me = self.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let me = me.clone();
                            async move {
                                use http_body_util::BodyExt;
                                let basic = base64::engine::general_purpose::STANDARD
                                    .encode("agent-7:s3cret%21");
                                let authorized = req
                                    .headers()
                                    .get("authorization")
                                    .is_some_and(|v| v == format!("Basic {basic}").as_str());
                                let body = req.into_body().collect().await?.to_bytes();
                                me.forms
                                    .lock()
                                    .unwrap()
                                    .push(String::from_utf8_lossy(&body).into_owned());
                                let (status, json) = if me
                                    .fail
                                    .load(std::sync::atomic::Ordering::SeqCst)
                                {
                                    (500, r#"{"error":"temporarily_unavailable"}"#.to_owned())
                                } else if !authorized {
                                    (401, r#"{"error":"invalid_client"}"#.to_owned())
                                } else {
                                    let mut n = me.issued.lock().unwrap();
                                    *n += 1;
                                    (
                                        200,
                                        format!(
                                            r#"{{"access_token":"tok-{n}","token_type":"Bearer","expires_in":{lifetime_s}}}"#
                                        ),
                                    )
                                };
                                Ok::<_, hyper::Error>(
                                    hyper::Response::builder()
                                        .status(status)
                                        .header("content-type", "application/json")
                                        .body(http_body_util::Full::new(bytes::Bytes::from(json)))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
                });
            }
        });
        addr
    }

    fn issued(&self) -> u32 {
        *self.issued.lock().unwrap()
    }
}

#[tokio::test]
async fn oauth2_tokens_are_fetched_kept_and_fetched_again_before_they_expire() {
    let tokens = TokenServer::default();
    let token_addr = tokens.start(120).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(SystemClock.now_ms());
    let server = TestServer::start_with(test_config(dir.path()), clock.clone()).await;
    let mut c = server.client().await;
    let put = c
        .put_endpoint(pb::Endpoint {
            oauth2: Some(pb::OAuth2 {
                token_url: format!("http://127.0.0.1:{}/oauth/token", token_addr.port()),
                client_id: "agent-7".into(),
                client_secret: "s3cret!".into(),
                scopes: vec!["webhooks:write".into(), "events".into()],
                audience: "https://api.example".into(),
            }),
            ..endpoint("api", sink.url("/hook"))
        })
        .await
        .unwrap();
    let shown = put.endpoint.unwrap().oauth2.unwrap();
    assert!(shown.client_secret.is_empty(), "the secret is write-only");
    assert_eq!(shown.client_id, "agent-7");

    let deliver = async |c: &mut Client, n: usize| {
        let id = c
            .enqueue(Event::to_endpoint("api", vec![b'0' + n as u8]))
            .await
            .unwrap()
            .id;
        until_delivered(c, &id).await;
        let got = sink.wait_for(n).await;
        got[n - 1].headers["authorization"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(deliver(&mut c, 1).await, "Bearer tok-1");
    assert_eq!(deliver(&mut c, 2).await, "Bearer tok-1", "kept");
    assert_eq!(tokens.issued(), 1);
    let form = tokens.forms.lock().unwrap()[0].clone();
    assert_eq!(
        form,
        "grant_type=client_credentials&scope=webhooks%3Awrite+events&audience=https%3A%2F%2Fapi.example"
    );
    // 120 s tokens are fetched again 60 s before they expire.
    clock.advance(59_000);
    assert_eq!(deliver(&mut c, 3).await, "Bearer tok-1");
    clock.advance(2_000);
    assert_eq!(
        deliver(&mut c, 4).await,
        "Bearer tok-2",
        "refreshed before expiry"
    );
    assert_eq!(tokens.issued(), 2);

    // The endpoint refuses the token (401, a permanent failure): the next attempt fetches
    // another.
    sink.script([Reply::Status(401)]);
    let id = c
        .enqueue(Event::to_endpoint("api", b"x".to_vec()))
        .await
        .unwrap()
        .id;
    until_attempted(&mut c, &id).await;
    assert_eq!(deliver(&mut c, 6).await, "Bearer tok-3");

    // The token endpoint failing: the attempt is retried, its error names the token
    // endpoint and holds neither the secret nor a token.
    tokens.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    clock.advance(120_000);
    let id = c
        .enqueue(Event::to_endpoint("api", b"y".to_vec()))
        .await
        .unwrap()
        .id;
    let m = until_attempted(&mut c, &id).await;
    assert!(
        m.last_error.starts_with(&format!(
            "OAuth2 token from http://127.0.0.1:{}: HTTP 500",
            token_addr.port()
        )),
        "{}",
        m.last_error
    );
    assert!(!m.last_error.contains("s3cret") && !m.last_error.contains("tok-"));
    assert_eq!(sink.count(), 6, "nothing sent without a token");
    server.stop().await;
}
