//! Findings of the hardening review (issue #49), each reproduced as it was reported and
//! held to the fix: the JSON API authenticates before it reads a body and holds bodies to
//! the request budget; the console's login limit is per address.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::TestServer;
use crate::security::{AGENT, OPS, READER, secured};

/// Sends a request head announcing `length` bytes of JSON body and none of it; the
/// connection is kept so the body stays unfinished.
async fn unfinished(
    addr: std::net::SocketAddr,
    token: Option<&str>,
    length: usize,
    source: Option<std::net::IpAddr>,
) -> TcpStream {
    let socket = match source {
        Some(std::net::IpAddr::V4(_)) | None => tokio::net::TcpSocket::new_v4().unwrap(),
        Some(std::net::IpAddr::V6(_)) => tokio::net::TcpSocket::new_v6().unwrap(),
    };
    if let Some(ip) = source {
        socket.bind(std::net::SocketAddr::new(ip, 0)).unwrap();
    }
    let mut tcp = socket.connect(addr).await.unwrap();
    let auth = token.map_or_else(String::new, |t| format!("authorization: Bearer {t}\r\n"));
    let head = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n{auth}content-length: {length}\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// The status of the answer on `tcp` and its body's first bytes, within 10 s.
async fn answer(tcp: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    let mut chunk = [0; 4096];
    let read = async {
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    raw.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&raw);
                    if let Some((_, body)) = text.split_once("\r\n\r\n")
                        && body.contains('}')
                    {
                        break;
                    }
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("no answer within 10 s (was the body waited for?)");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    (status, text)
}

fn system_clock() -> hookd_core::clock::ManualClock {
    hookd_core::clock::ManualClock::new(hookd_core::clock::Clock::now_ms(
        &hookd_core::clock::SystemClock,
    ))
}

/// Finding 1: the JSON API read (up to 34 MiB), parsed and transcoded a body before it
/// answered 401. Now a caller without a credential, or without the RPC's scope, is
/// answered from the headers with the body unsent; a credentialed caller's unfinished
/// bodies count in the request budget from their `Content-Length`, so one caller cannot
/// hold more than its share while another is served.
#[tokio::test]
async fn the_json_api_authenticates_and_budgets_before_it_reads_a_body() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = secured(dir.path(), "");
    // A small budget: 8 MiB of unfinished requests in all, 2 MiB (25 %) a caller.
    config.connections.max_request_bytes_in_flight = 8 << 20;
    config.connections.request_body_timeout_ms = 60_000;
    let server = TestServer::start_with(config, system_clock()).await;
    let http = server.http;

    // No credential: 401 with 8 MB announced and not a byte sent.
    let mut anonymous = unfinished(http, None, 8_000_000, None).await;
    let (status, text) = answer(&mut anonymous).await;
    assert_eq!(status, 401, "{text}");
    // A credential without the scope: 403, before the body.
    let mut reader = unfinished(http, Some(READER), 8_000_000, None).await;
    let (status, text) = answer(&mut reader).await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("enqueue"), "{text}");
    // A wrong token is 401 too (and costs no body).
    let mut wrong = unfinished(http, Some("not-a-token-zzzzzzzzzzzz"), 8_000_000, None).await;
    assert_eq!(answer(&mut wrong).await.0, 401);

    // A producer's first unfinished body (1.5 MiB) is held; the second would pass the
    // producer's share of the budget and is refused at once, naming the setting.
    let held = unfinished(http, Some(AGENT), 3 << 19, None).await;
    // The first is counted before the second is sent: give the server its turn.
    let started = Instant::now();
    let mut second;
    loop {
        second = unfinished(http, Some(AGENT), 3 << 19, None).await;
        let (status, text) = answer(&mut second).await;
        if status == 429 {
            assert!(
                text.contains("max_request_bytes_in_flight"),
                "the refusal names the setting: {text}"
            );
            break;
        }
        // Only a race with the first head's arrival explains anything else.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the second unfinished body was never refused: {status} {text}"
        );
        tokio::task::yield_now().await;
    }
    // Another caller is served meanwhile, and the producer is once its body is gone.
    let ops = format!("Bearer {OPS}");
    let served = crate::rest::call_with(
        http,
        "POST",
        "/v1/messages",
        &[("authorization", &ops)],
        r#"{"queue":"q","payload":"aGk="}"#,
    )
    .await;
    assert_eq!(served.status(), 200, "{served:?}");
    drop(held);
    let agent = format!("Bearer {AGENT}");
    let started = Instant::now();
    loop {
        let again = crate::rest::call_with(
            http,
            "POST",
            "/v1/messages",
            &[("authorization", &agent)],
            r#"{"queue":"q","payload":"aGk="}"#,
        )
        .await;
        if again.status() == 200 {
            break;
        }
        assert_eq!(again.status(), 429, "{again:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the held body's bytes were never given back"
        );
        tokio::task::yield_now().await;
    }

    // A body of more JSON values than a request may hold is 413 naming the limit, before
    // it is built (here 1,100,000 zeros in 2.2 MB).
    let mut many = String::from(r#"{"queue":"q","payload":"aGk=","headers":{"x":"#);
    many.push('[');
    for i in 0..1_100_000 {
        if i > 0 {
            many.push(',');
        }
        many.push('0');
    }
    many.push_str("]}}");
    let refused = crate::rest::call_with(
        http,
        "POST",
        "/v1/messages",
        &[("authorization", &ops)],
        &many,
    )
    .await;
    let message = refused.error(413, "OUT_OF_RANGE");
    assert!(message.contains("1000000 JSON values"), "{message}");
    server.stop().await;
}

/// One HTTP/1.1 request from `source` (a loopback address of its own), read to the end:
/// the status and the whole answer.
async fn from_address(
    source: std::net::IpAddr,
    addr: std::net::SocketAddr,
    request: String,
) -> (u16, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(source, 0)).unwrap();
    let mut tcp = socket.connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut raw))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {text}"));
    (status, text)
}

/// A console login from `source` with `token`: the answer's status.
async fn console_login(source: std::net::IpAddr, addr: std::net::SocketAddr, token: &str) -> u16 {
    let get = "GET /ui/login HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n";
    let (status, page) = from_address(source, addr, get.into()).await;
    assert_eq!(status, 200, "{page}");
    let cookie = page
        .lines()
        .filter_map(|l| l.strip_prefix("set-cookie: "))
        .find(|v| v.starts_with("hookd_login="))
        .and_then(|v| v.split(';').next())
        .expect("a login cookie")
        .to_owned();
    let marker = "name=\"nonce\" value=\"";
    let start = page.find(marker).expect("the nonce field") + marker.len();
    let nonce = page[start..].split('"').next().unwrap_or_default();
    let form = format!("nonce={nonce}&token={token}&next=%2Fui%2F");
    let post = format!(
        "POST /ui/login HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncookie: {cookie}\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n\r\n{form}",
        form.len()
    );
    from_address(source, addr, post).await.0
}

/// Finding 4: 110 wrong logins from 11 addresses locked every operator out for a minute
/// (the right admin token got 429). Now failures are limited per address: each of the 11
/// is refused after its own 10, and the operator's right token, from an address of its
/// own, logs in.
#[tokio::test]
async fn failed_console_logins_from_other_addresses_never_refuse_the_right_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(secured(dir.path(), ""), system_clock()).await;
    let http = server.http;
    let mut attackers = Vec::new();
    for a in 2..13_u8 {
        attackers.push(tokio::spawn(async move {
            let source = std::net::IpAddr::from([127, 0, 0, a]);
            let mut statuses = Vec::new();
            for _ in 0..10 {
                statuses.push(console_login(source, http, "wrong-token-xxxxxxxxxxxx").await);
            }
            // One more than its share: this address is refused now.
            statuses.push(console_login(source, http, OPS).await);
            statuses
        }));
    }
    for attacker in attackers {
        let statuses = attacker.await.unwrap();
        assert!(statuses[..10].iter().all(|s| *s == 401), "{statuses:?}");
        assert_eq!(statuses[10], 429, "its own failures refuse an address");
    }
    let operator = std::net::IpAddr::from([127, 0, 0, 1]);
    assert_eq!(
        console_login(operator, http, OPS).await,
        303,
        "the right token is never refused for others' failures"
    );
    server.stop().await;
}
