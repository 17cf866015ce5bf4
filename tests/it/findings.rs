//! Findings of the hostile-input review (issue #12), each reproduced as it was reported.

use bytes::Bytes;
use hookd_client::{Client, Event, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use tonic::Code;

use crate::harness::{TestServer, dead_lettered, test_config, until_message};
use crate::sink::{Reply, Sink};

/// F4: a receiver's 3xx `Location` (here 100 KB) was stored whole in every attempt's
/// error; now every stored text is cut to 1 KiB, and a dead-letter page is bounded by bytes.
#[tokio::test]
async fn receiver_text_is_bounded_and_pages_are_bounded_by_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let location = format!("http://elsewhere.example/{}", "a".repeat(100_000));
    let sink = Sink::start(Reply::Full(302, vec![("location", location)], vec![])).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "moved".into(),
        url: sink.url("/"),
        max_attempts: 2,
        retry_base_ms: 1,
        retry_cap_ms: 1,
        ..Default::default()
    })
    .await
    .unwrap();
    let sent = c
        .enqueue(Event::to_endpoint("moved", b"x".to_vec()))
        .await
        .unwrap();
    // The retry is due 1 ms later on the manual clock.
    let mut m = None;
    for _ in 0..200 {
        server.advance(10).await;
        let got = c.get_message(sent.id.clone()).await.unwrap();
        if got.state == pb::MessageState::DeadLetter as i32 {
            m = Some(got);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let m = m.expect("dead-lettered after two redirects");
    assert_eq!(m.history.len(), 2);
    for a in &m.history {
        assert!(a.error.len() <= 1_024, "{} bytes stored", a.error.len());
        assert!(a.error.starts_with("HTTP 302"), "{}", a.error);
    }
    assert!(m.last_error.len() <= 1_024);
    use prost::Message;
    assert!(
        m.encoded_len() < 8 << 10,
        "GetMessage answer of {} bytes",
        m.encoded_len()
    );

    // Dead letters of 1 MiB each: the default page (100 rows) stops at 4 MiB.
    let gone = Sink::start(Reply::Status(400)).await;
    c.put_endpoint(pb::Endpoint {
        name: "refuses".into(),
        url: gone.url("/"),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut last = String::new();
    for i in 0..8 {
        last = c
            .enqueue(Event::to_endpoint("refuses", vec![i as u8; 1 << 20]))
            .await
            .unwrap()
            .id;
    }
    dead_lettered(&mut c, &last).await;
    let page = c.list_dead_letters(None, 0, "").await.unwrap();
    assert!(
        page.dead_letters.len() < 8 && !page.next_page_token.is_empty(),
        "{} rows, token {:?}",
        page.dead_letters.len(),
        page.next_page_token
    );
    assert!(page.encoded_len() <= (4 << 20) + (2 << 20));
    let mut seen = page.dead_letters.len();
    let mut token = page.next_page_token;
    while !token.is_empty() {
        let next = c.list_dead_letters(None, 0, token).await.unwrap();
        seen += next.dead_letters.len();
        token = next.next_page_token;
    }
    assert_eq!(seen, 9, "every dead letter is reachable page by page");
    server.stop().await;
}

/// One raw gRPC call: `body` as the message, over HTTP/2; the grpc-status answered.
async fn raw_call(addr: std::net::SocketAddr, path: &str, message: &[u8]) -> (String, String) {
    use http_body_util::{BodyExt, Full};
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    let request = hyper::Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(framed)))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let get = |h: &hyper::HeaderMap, k: &str| h.get(k).map(|v| v.to_str().unwrap().to_owned());
    if let Some(s) = get(response.headers(), "grpc-status") {
        let m = get(response.headers(), "grpc-message").unwrap_or_default();
        return (s, m);
    }
    let collected = response.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    (
        get(&trailers, "grpc-status").unwrap_or_default(),
        get(&trailers, "grpc-message").unwrap_or_default(),
    )
}

/// F11: malformed protobuf and a string field that is not UTF-8 answered INTERNAL.
#[tokio::test]
async fn malformed_protobuf_is_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let addr: std::net::SocketAddr = server.grpc.trim_start_matches("http://").parse().unwrap();
    // Field 6 (event_type, a string), length 2, bytes that are not UTF-8.
    let not_utf8 = [0x32, 0x02, 0xff, 0xfe];
    // A length-delimited field whose length runs past the end.
    let truncated = [0x32, 0x7f, b'a'];
    for message in [&not_utf8[..], &truncated[..]] {
        let (status, text) = raw_call(addr, "/hookd.v1.Hookd/Enqueue", message).await;
        assert_eq!(status, (Code::InvalidArgument as i32).to_string(), "{text}");
        assert!(text.contains("malformed"), "{text}");
    }
    server.stop().await;
}

/// F14: the allow-list takes ports, hookd's own listeners are never a destination, and
/// every refusal reads the same (no port scanning through error texts).
#[tokio::test]
async fn allow_list_ports_and_hookd_itself() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(Reply::Status(204)).await;
    let mut config = test_config(dir.path());
    config.delivery.allow_destinations = vec![
        format!("127.0.0.1/32:{}", sink.addr().port())
            .parse()
            .unwrap(),
    ];
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    let grpc_port = server.grpc.rsplit(':').next().unwrap().to_owned();
    let mut errors = Vec::new();
    for url in [
        // Another loopback port: not admitted by the rule.
        format!(
            "http://127.0.0.1:{}/",
            sink.addr().port().wrapping_add(1).max(1)
        ),
        // hookd's own listeners.
        format!("http://127.0.0.1:{grpc_port}/"),
        format!("http://127.0.0.1:{}/metrics", server.http.port()),
        "http://[::ffff:0:7f00:1]:80/".to_owned(),
        "http://[64:ff9b:1::a00:1]/".to_owned(),
    ] {
        let sent = c
            .enqueue(Event::to_url(url.clone(), b"x".to_vec()))
            .await
            .unwrap();
        let m = dead_lettered(&mut c, &sent.id).await;
        assert_eq!(m.history[0].outcome, "refused", "{url}");
        errors.push(m.last_error);
    }
    assert!(errors.windows(2).all(|w| w[0] == w[1]), "{errors:#?}");
    // The admitted port is delivered to.
    let sent = c
        .enqueue(Event::to_url(sink.url("/ok"), b"x".to_vec()))
        .await
        .unwrap();
    sink.wait_for(1).await;
    until_message(&mut c, &sent.id, "delivered", |m| {
        m.is_some_and(|m| m.state == pb::MessageState::Delivered as i32)
    })
    .await;
    assert_eq!(sink.count(), 1);
    server.stop().await;
}

/// F7/F8/F9: refused at the edge rather than stored and dead-lettered later.
#[tokio::test]
async fn urls_and_keys_are_refused_at_enqueue() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    for url in [
        "http:///h",
        "http:h",
        "http://a b/",
        "http://u:p@example.com/",
        "http://%65xample.com/",
    ] {
        let e = c
            .enqueue(Event::to_url(url, b"x".to_vec()))
            .await
            .unwrap_err();
        assert_eq!(crate::harness::code(&e), Code::InvalidArgument, "{url}");
        assert!(e.to_string().contains("url:"), "{url}: {e}");
    }
    // The NUL that made two destinations share an idempotency scope.
    let e = c
        .enqueue(Event::to_queue("q", b"x".to_vec()).idempotency_key("k\0x"))
        .await
        .unwrap_err();
    assert_eq!(crate::harness::code(&e), Code::InvalidArgument);
    assert!(e.to_string().contains("idempotency_key"), "{e}");
    // What is stored is the normalised URL.
    let put = c
        .raw()
        .put_endpoint(pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: "n".into(),
                url: "HTTPS://Example.COM".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(put.endpoint.unwrap().url, "https://example.com/");
    server.stop().await;
}

/// F6: receivers that hold connections (tarpits) used every descriptor, and a delivery to
/// an unrelated healthy endpoint failed and was dead-lettered. Now outbound connections
/// are capped (`delivery.max_connections`), and hookd's own shortage postpones an attempt
/// without counting it: the healthy endpoint's message, allowed one attempt, is delivered.
/// Two tarpits hold one connection each, their fair share of two between three origins, so
/// the healthy endpoint has no connection to take over and waits out its connect timeout.
#[tokio::test]
async fn local_shortage_postpones_and_never_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.max_connections = 2;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let tarpits = [
        Sink::start(Reply::Hang).await,
        Sink::start(Reply::Hang).await,
    ];
    let healthy = Sink::start(Reply::Status(204)).await;
    let mut c = server.client().await;
    for (i, tarpit) in tarpits.iter().enumerate() {
        c.put_endpoint(pb::Endpoint {
            name: format!("tarpit{i}"),
            url: tarpit.url("/"),
            timeout_ms: 1_500,
            max_in_flight: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    c.put_endpoint(pb::Endpoint {
        name: "healthy".into(),
        url: healthy.url("/"),
        connect_timeout_ms: 50,
        ..Default::default()
    })
    .await
    .unwrap();
    // One attempt each: once they time out the slots stay free (retries of the tarpits
    // would otherwise race the healthy message for them, on the test's moving clock).
    for i in 0..2 {
        c.enqueue(Event::to_endpoint(format!("tarpit{i}"), b"x".to_vec()).max_attempts(1))
            .await
            .unwrap();
    }
    // Both outbound slots are held by the tarpits now.
    crate::harness::eventually(
        "the tarpits hold both connections",
        async || tarpits.iter().map(Sink::count).sum::<usize>(),
        |n| *n >= 2,
    )
    .await;
    let sent = c
        .enqueue(Event::to_endpoint("healthy", b"ok".to_vec()).max_attempts(1))
        .await
        .unwrap();
    let mut delivered = None;
    for _ in 0..300 {
        let m = c.get_message(sent.id.clone()).await.unwrap();
        assert_ne!(
            m.state,
            pb::MessageState::DeadLetter as i32,
            "dead-lettered for hookd's own shortage: {:?}",
            m.history
        );
        if m.state == pb::MessageState::Delivered as i32 {
            delivered = Some(m);
            break;
        }
        server.advance(2_000).await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let m = delivered.expect("delivered once a connection was free");
    assert!(
        m.history.iter().any(|a| a.outcome == "local_error"),
        "{:?}",
        m.history
    );
    assert_eq!(m.history.last().unwrap().outcome, "delivered");
    assert_eq!(healthy.count(), 1);
    server.stop().await;
}

/// F5: with a 1,024 open-file limit, about 1,010 idle connections locked out new gRPC
/// clients and /healthz and made pushes fail with EMFILE. Now each listener takes at most
/// a quarter of the limit, idle connections are closed after the handshake timeout, and
/// the rest of the descriptors stay for storage and pushes. Here: a limit of 256 and 400
/// idle connections on each listener.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_cannot_take_every_descriptor() {
    use hookd_testkit::ChildHookd;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookd.toml");
    std::fs::write(
        &config,
        "[connections]\nhandshake_timeout_ms = 1000\n[delivery]\nallow_destinations = [\"127.0.0.1/32\"]\n",
    )
    .unwrap();
    let exe = env!("CARGO_BIN_EXE_hookd-under-test");
    let hookd = ChildHookd::spawn(
        std::path::Path::new("/bin/sh"),
        &["-c", "ulimit -n 256 && exec \"$0\" \"$@\"", exe],
        &dir.path().join("data"),
        &["--config".into(), config.into_os_string()],
        std::time::Duration::from_secs(60),
    )
    .await
    .unwrap();
    let grpc: std::net::SocketAddr = hookd.grpc.trim_start_matches("http://").parse().unwrap();
    // Every network wait below is bounded: a stall fails the test, naming the step, rather
    // than hanging the suite.
    let within = std::time::Duration::from_secs(5);
    let mut idle = Vec::new();
    for target in [grpc, hookd.http] {
        for _ in 0..400 {
            if let Ok(Ok(s)) =
                tokio::time::timeout(within, tokio::net::TcpStream::connect(target)).await
            {
                idle.push(s);
            }
        }
    }
    // Pushes still have descriptors, and a client that holds a channel is served.
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = None;
    for _ in 0..100 {
        let attempt = async {
            let client = Client::connect(hookd.grpc.clone()).await.ok()?;
            client.clone().stats().await.ok()?;
            Some(client)
        };
        if let Ok(Some(client)) = tokio::time::timeout(within, attempt).await {
            c = Some(client);
            break;
        }
        // The idle connections on the gRPC listener go after the 1 s handshake timeout.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut c = c.expect("a new gRPC client got in");
    tokio::time::timeout(
        within,
        c.put_endpoint(pb::Endpoint {
            name: "e".into(),
            url: sink.url("/"),
            ..Default::default()
        }),
    )
    .await
    .expect("PutEndpoint answered in time")
    .unwrap();
    for i in 0..20 {
        tokio::time::timeout(
            within,
            c.enqueue(Event::to_endpoint("e", format!("{i}").into_bytes())),
        )
        .await
        .expect("Enqueue answered in time")
        .unwrap();
    }
    sink.wait_for(20).await;
    // /healthz answers (within the handshake timeout, the idle ones are gone).
    let mut healthy = false;
    for _ in 0..100 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let ask = async {
            let mut tcp = tokio::net::TcpStream::connect(hookd.http).await.ok()?;
            tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut response = String::new();
            tcp.read_to_string(&mut response).await.ok()?;
            Some(response)
        };
        let response = tokio::time::timeout(within, ask)
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        if response.starts_with("HTTP/1.1 200") {
            healthy = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(healthy, "/healthz never answered");
    drop(idle);
    hookd
        .stop(std::time::Duration::from_secs(10))
        .await
        .unwrap();
}
