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

/// Live messages over all destinations, from Stats.
async fn live_messages(c: &mut hookd_client::Client) -> u64 {
    let t = c.stats().await.unwrap().total.unwrap_or_default();
    t.pending + t.awaiting_retry + t.in_flight
}

/// Finding 3: 100 publishes to 10,000 subscribers stored 1,000,000 deliveries and then
/// answered OUT_OF_RANGE (38 MB of delivery ids over the message limit), so a producer
/// retried and stored it all again. Here (a message limit of 5 MiB) a batch of 60
/// publishes to 2,500 subscribers (150,000 deliveries, 5.7 MB of ids) is answered: every
/// count whole, the ids bounded; a resend with the key is answered with the original's ids;
/// and a publish that would take hookd past its hard mark is refused whole, not stored.
#[tokio::test]
async fn a_stored_fan_out_is_always_answered_and_a_duplicate_gets_its_ids() {
    use hookd_client::{Event, pb};
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::harness::test_config(dir.path());
    // max(4 KiB x 16, 4 MiB) + 1 MiB: a 5 MiB message limit.
    config.max_payload_bytes = 4 << 10;
    config.backpressure.max_messages = 154_000;
    config.backpressure.destination_max_bytes = 1 << 30;
    let server = TestServer::start_with(config, system_clock()).await;
    let mut c = server.client().await;
    const SUBSCRIBERS: usize = 2_500;
    for i in 0..SUBSCRIBERS {
        c.put_subscription(pb::Subscription {
            name: format!("s{i:04}"),
            destination: Some(pb::subscription::Destination::Queue(format!("q{i:04}"))),
            event_types: vec!["order.*".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let first = c
        .enqueue(Event::to_topic("order.created", b"{}".to_vec()).idempotency_key("k-1"))
        .await
        .unwrap();
    assert_eq!(first.subscribers as usize, SUBSCRIBERS);
    assert_eq!(first.delivery_ids.len(), 1_000, "the first 1,000 ids");
    let again = c
        .enqueue(Event::to_topic("order.created", b"{}".to_vec()).idempotency_key("k-1"))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.id, first.id);
    assert_eq!(again.subscribers, first.subscribers, "the original's count");
    assert_eq!(again.delivery_ids, first.delivery_ids, "the original's ids");
    assert_eq!(live_messages(&mut c).await, SUBSCRIBERS as u64);

    let batch = (0..60).map(|i| {
        Event::to_topic("order.created", format!("{i}").into_bytes())
            .idempotency_key(format!("b-{i}"))
    });
    let results = c.enqueue_batch(batch).await.expect("the batch is answered");
    let mut listed = 0;
    for r in &results {
        let Some(pb::enqueue_result::Result::Ok(ok)) = &r.result else {
            panic!("{:?}", r.result.as_ref().map(|_| "not stored"));
        };
        assert_eq!(ok.subscribers as usize, SUBSCRIBERS);
        listed += ok.delivery_ids.len();
    }
    assert_eq!(listed, 10_000, "the batch answer lists 10,000 ids in all");
    let stored = 61 * SUBSCRIBERS as u64;
    assert_eq!(live_messages(&mut c).await, stored);
    // A resend of the whole batch stores nothing more.
    let batch = (0..60).map(|i| {
        Event::to_topic("order.created", format!("{i}").into_bytes())
            .idempotency_key(format!("b-{i}"))
    });
    let resent = c.enqueue_batch(batch).await.unwrap();
    assert!(resent.iter().all(|r| matches!(
        &r.result,
        Some(pb::enqueue_result::Result::Ok(ok)) if ok.duplicate
    )));
    assert_eq!(live_messages(&mut c).await, stored);

    // 152,500 live: 2,500 more would pass the hard mark of 154,000 before they were all
    // stored. The whole publish is refused; nothing of it is stored.
    let over = match c
        .enqueue(Event::to_topic("order.created", b"over".to_vec()))
        .await
    {
        Ok(stored) => panic!(
            "stored past the hard mark: {} deliveries",
            stored.subscribers
        ),
        Err(e) => e,
    };
    assert!(
        matches!(&over, hookd_client::Error::Status(s) if s.code() == tonic::Code::ResourceExhausted),
        "{over}"
    );
    assert_eq!(live_messages(&mut c).await, stored);
    server.stop().await;
}
