//! Issue #26, 10 (and 9's per-peer limit): connection slots are held by requests, not by
//! bytes. A connection that asks nothing (it may answer keep-alive pings for ever), or
//! whose requests present no valid credential, is closed at the first-request timeout;
//! one client address holds at most its share of a listener's connections.

use std::net::SocketAddr;
use std::time::Duration;

use hookd::Config;
use hookd::auth::token_hash;
use hookd_client::{Client, Event, Options};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_core::names::hex;
use tokio::io::AsyncReadExt;

use crate::harness::{TestServer, test_config};

const AGENT: &str = "agent-token-ccccccccccccccccc";

/// A server with one token, keep-alive pings every second, and short request timeouts.
async fn server(dir: &std::path::Path, extra: &str) -> TestServer {
    let toml = format!(
        "[connections]\nkeepalive_interval_secs = 1\nidle_timeout_secs = 2\nfirst_request_timeout_ms = 500\n{extra}\
         [[auth.tokens]]\nname = \"agent\"\nsha256 = \"{}\"\nscopes = [\"enqueue\"]\n",
        hex(&token_hash(AGENT)),
    );
    let parsed = Config::from_toml(&toml).unwrap();
    let config = Config {
        auth: parsed.auth,
        connections: parsed.connections,
        ..test_config(dir)
    };
    TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await
}

/// A client with the agent's token is served (its Enqueue succeeds).
async fn enqueue_with_token(server: &TestServer) {
    let mut agent = Client::connect_with(
        server.grpc.clone(),
        Options {
            token: Some(AGENT.into()),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    agent
        .enqueue(Event::to_queue("q", b"1".to_vec()))
        .await
        .unwrap();
}

/// An HTTP/2 connection (hyper answers the server's pings); the task that drives it ends
/// when hookd closes it.
async fn h2(
    addr: SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    (sender, driver)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_ask_nothing_or_present_no_credential_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), "").await;
    let grpc: SocketAddr = server.grpc.trim_start_matches("http://").parse().unwrap();

    // Asks nothing, answers pings: closed (the bound only keeps a broken build from
    // hanging; the timeout is 500 ms).
    let (_idle, driver) = h2(grpc).await;
    tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("a connection that asks nothing is still open after 10 s")
        .unwrap();

    // Presents a wrong token: answered UNAUTHENTICATED, then closed.
    let (mut sender, driver) = h2(grpc).await;
    let request = http::Request::post(format!("http://{grpc}/hookd.v1.Hookd/Stats"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", "Bearer not-a-token-0000000000")
        .body(http_body_util::Empty::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(
        response
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().to_owned()),
        Some("16".to_owned()),
        "{response:?}"
    );
    tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("a connection with no valid credential is still open after 10 s")
        .unwrap();

    // A client with its token is served, and reconnects when its idle connection is closed.
    enqueue_with_token(&server).await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_connections() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path(), "max_connections_per_peer = 4\n").await;
    let grpc: SocketAddr = server.grpc.trim_start_matches("http://").parse().unwrap();
    let from = |ip: [u8; 4]| async move {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((ip, 0))).unwrap();
        socket.connect(grpc).await.unwrap()
    };
    // 127.0.0.2 takes its 4 (they hold their places until the handshake timeout)...
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(from([127, 0, 0, 2]).await);
    }
    // ...and its fifth is closed at once, unread.
    let mut fifth = from([127, 0, 0, 2]).await;
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(10), fifth.read(&mut byte))
        .await
        .expect("the fifth connection was not closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // Another address still gets in.
    enqueue_with_token(&server).await;
    drop(held);
    server.stop().await;
}
