//! Findings of the hardening review (issue #49), each reproduced as it was reported and
//! held to the fix: the JSON API authenticates before it reads a body and holds bodies to
//! the request budget; the console's login limit is per address.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::TestServer;
use crate::hostile::{enqueue_latencies, pct};
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

/// `POST /v1/messages` with `body`, as the caller of `token`.
async fn post_message(http: std::net::SocketAddr, token: &str, body: &str) -> crate::rest::Answer {
    let bearer = format!("Bearer {token}");
    crate::rest::call_with(
        http,
        "POST",
        "/v1/messages",
        &[("authorization", &bearer)],
        body,
    )
    .await
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
    let served = post_message(http, OPS, r#"{"queue":"q","payload":"aGk="}"#).await;
    assert_eq!(served.status(), 200, "{served:?}");
    drop(held);
    let started = Instant::now();
    loop {
        let again = post_message(http, AGENT, r#"{"queue":"q","payload":"aGk="}"#).await;
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
    let refused = post_message(http, OPS, &many).await;
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

/// Finding 2: with 10,000 filters `{"data":{"customer_id":"cus_N"}}`, one 1 MB publish
/// whose `customer_id` is an array of 90,000 strings cost 9.7 s of CPU (every filter
/// scanned the array), and two at once stalled every Enqueue for 20-34 s. Filters that test
/// fields for values are now indexed by path and value: the publish costs a walk of the
/// array and one lookup per element (the metric shows the steps), and an honest caller's
/// Enqueue and /healthz are served meanwhile. A publish whose routing would need more than
/// the work limit (filters the index cannot take, over a large array) is refused naming
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_filters_cost_what_can_match_and_a_publish_has_a_work_limit() {
    use hookd_client::{Event, pb};
    let dir = tempfile::tempdir().unwrap();
    let server =
        TestServer::start_with(crate::harness::test_config(dir.path()), system_clock()).await;
    // The finding's 10,000 in a release run (HOOKD_HARDENING_FILTERS=10000, as
    // docs/performance.md reports); 2,000 in the suite, where the debug build's
    // PutSubscription (which rebuilds the routing snapshot) makes 10,000 take minutes.
    let filters: usize = std::env::var("HOOKD_HARDENING_FILTERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
        .min(9_990);
    let mut putters = Vec::new();
    for part in 0..8 {
        let mut c = server.client().await;
        putters.push(tokio::spawn(async move {
            for n in (part..filters).step_by(8) {
                c.put_subscription(pb::Subscription {
                    name: format!("cus-{n:05}"),
                    destination: Some(pb::subscription::Destination::Queue(format!(
                        "customer-{}",
                        n % 100
                    ))),
                    event_types: vec!["order.*".into()],
                    filter: hookd_proto::json::json_to_struct(
                        &serde_json::json!({"data": {"customer_id": format!("cus_{n}")}}),
                    ),
                    ..Default::default()
                })
                .await
                .unwrap();
            }
        }));
    }
    for p in putters {
        p.await.unwrap();
    }
    // About 1 MB: 90,000 customer ids that match nothing, and one that matches.
    let mut ids: Vec<String> = (0..90_000).map(|n| format!("x_{n:06}")).collect();
    ids.push(format!("cus_{}", filters / 2));
    let attack = serde_json::to_vec(&serde_json::json!({ "customer_id": ids })).unwrap();
    assert!(attack.len() > 900_000 && attack.len() < 1 << 20);

    let mut honest = server.client().await;
    let quiet = enqueue_latencies(&mut honest, 200).await;

    // Two attackers, each publishing the array over and over: bounded in count and time.
    let stop = Instant::now() + Duration::from_secs(5);
    let mut attackers = Vec::new();
    for _ in 0..2 {
        let mut c = server.client().await;
        let attack = attack.clone();
        attackers.push(tokio::spawn(async move {
            let mut n = 0;
            while n < 20 && Instant::now() < stop {
                let r = c
                    .enqueue(Event::to_topic("order.created", attack.clone()))
                    .await
                    .unwrap();
                assert_eq!(r.subscribers, 1, "one customer's queue alone");
                n += 1;
            }
            n
        }));
    }
    let mut during = Vec::new();
    let mut health = Vec::new();
    while attackers.iter().any(|a| !a.is_finished()) && during.len() < 100_000 {
        let start = Instant::now();
        honest
            .enqueue(Event::to_queue("honest", b"during".to_vec()))
            .await
            .unwrap();
        during.push(start.elapsed());
        let start = Instant::now();
        server.http_get("/healthz").await;
        health.push(start.elapsed());
    }
    let mut published = 0;
    for a in attackers {
        published += a.await.unwrap();
    }
    during.sort();
    health.sort();
    let page = server.http_get("/metrics").await;
    let steps = crate::harness::metric(&page, "hookd_publish_match_steps_sum");
    let routed = crate::harness::metric(&page, "hookd_publish_match_steps_count");
    eprintln!(
        "hardening filters: {filters} filters, {published} attack publishes; honest Enqueue p50/p99 quiet {:?}/{:?}, during {:?}/{:?} ({} calls); /healthz p99 during {:?}; {} steps per routed publish",
        pct(&quiet, 0.5),
        pct(&quiet, 0.99),
        pct(&during, 0.5),
        pct(&during, 0.99),
        during.len(),
        pct(&health, 0.99),
        steps / routed.max(1),
    );
    assert!(published >= 2, "the attack publishes were stored");
    // The walk of 90,001 ids and a lookup each, not 10,000 x 90,001 comparisons.
    assert!(
        steps / routed.max(1) < 400_000,
        "{steps} steps over {routed} publishes"
    );
    assert!(
        pct(&during, 0.99) < Duration::from_secs(2),
        "honest Enqueue p99 {:?} while the filters were attacked",
        pct(&during, 0.99)
    );

    // Filters the index cannot take (an operator under an array's elements), over 60,000
    // elements: routing would pass the work limit, so the publish is refused, naming it.
    for n in 0..10 {
        honest
            .put_subscription(pb::Subscription {
                name: format!("sku-{n}"),
                destination: Some(pb::subscription::Destination::Queue("skus".into())),
                event_types: vec!["cart.*".into()],
                filter: hookd_proto::json::json_to_struct(
                    &serde_json::json!({"data": {"lines": {"sku": {"$startsWith": format!("Z{n}")}}}}),
                ),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    let lines: Vec<serde_json::Value> = (0..60_000)
        .map(|_| serde_json::json!({"sku": "A"}))
        .collect();
    let cart = serde_json::to_vec(&serde_json::json!({ "lines": lines })).unwrap();
    let refused = honest
        .enqueue(Event::to_topic("cart.updated", cart))
        .await
        .expect_err("past the work limit");
    let hookd_client::Error::Status(status) = refused else {
        panic!("{refused}");
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with("payload: ") && status.message().contains("2000000 steps"),
        "{}",
        status.message()
    );
    server.stop().await;
}

/// A data directory with `n` pending events in it (a queue nobody reads), stopped cleanly.
async fn stopped_with_events(dir: &std::path::Path, n: usize) {
    let server = TestServer::start_with(crate::harness::test_config(dir), system_clock()).await;
    let mut c = server.client().await;
    for chunk in 0..n / 100 {
        let batch = (0..100).map(|i| {
            hookd_client::Event::to_queue(
                "kept",
                format!("{chunk}-{i}-{}", "x".repeat(200)).into_bytes(),
            )
        });
        for r in c.enqueue_batch(batch).await.unwrap() {
            assert!(matches!(
                r.result,
                Some(hookd_client::pb::enqueue_result::Result::Ok(_))
            ));
        }
    }
    server.stop().await;
}

/// Starts hookd on `dir`; its refusal's text (panics if it started).
async fn refused_start(dir: &std::path::Path) -> String {
    let config = crate::harness::test_config(dir);
    match hookd_testkit::InProcess::start(config, hookd::app::Hooks::default()).await {
        Ok(started) => {
            drop(started.stop().await);
            panic!("hookd started on damaged data");
        }
        Err(e) => e.to_string(),
    }
}

/// The log segments in `dir`, oldest first.
fn segments(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("wal-"))
        })
        .collect();
    out.sort();
    out
}

/// Finding 6: a missing, cut or damaged log segment from before the last checkpoint was
/// not noticed at start; hookd reported healthy and served until a delivery read into it.
/// Now start-up checks every segment live messages point into (exists, long enough, its
/// frames' checksums) and refuses to start, naming the segment and `hookd repair`; after
/// the repair, hookd starts.
#[tokio::test]
async fn a_damaged_log_segment_is_refused_at_start_naming_hookd_repair() {
    for damage in ["missing", "cut", "flipped"] {
        let dir = tempfile::tempdir().unwrap();
        stopped_with_events(dir.path(), 1_000).await;
        let segment = segments(dir.path()).into_iter().next().expect("a segment");
        let bytes = std::fs::read(&segment).unwrap();
        match damage {
            "missing" => std::fs::remove_file(&segment).unwrap(),
            "cut" => std::fs::write(&segment, &bytes[..bytes.len() / 2]).unwrap(),
            _ => {
                // One bit of a stored payload (the first event's), inside its record.
                let mut bytes = bytes.clone();
                let at = bytes
                    .windows(4)
                    .position(|w| w == b"0-0-")
                    .expect("the first event's payload in the first segment");
                bytes[at + 10] ^= 0x40;
                std::fs::write(&segment, bytes).unwrap();
            }
        }
        let why = refused_start(dir.path()).await;
        let name = segment.file_name().unwrap().to_string_lossy().into_owned();
        assert!(why.contains(&name), "{damage}: {why}");
        assert!(why.contains("hookd repair"), "{damage}: {why}");
        let (code, out) = repair_dir(dir.path());
        assert_eq!(code, Some(0), "{damage}: {out}");
        let server =
            TestServer::start_with(crate::harness::test_config(dir.path()), system_clock()).await;
        server.stop().await;
    }
}

/// Runs `hookd repair` on `dir`: exit code, and what it printed.
fn repair_dir(dir: &std::path::Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
        .arg("repair")
        .arg("--data-dir")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Finding 6, the data file: a zeroed page in hookd.redb after a clean stop (no integrity
/// check runs then) stopped hookd with a panic of redb and a backtrace. Now the start is
/// refused with a message naming the file and `hookd repair`.
#[tokio::test]
async fn a_zeroed_page_of_the_data_file_is_refused_naming_the_file_and_hookd_repair() {
    let dir = tempfile::tempdir().unwrap();
    stopped_with_events(dir.path(), 2_000).await;
    let file = dir.path().join("hookd.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    // Every page after the first (redb's header), zeroed: what the open and the recovery
    // read is among them, whatever the file's layout.
    bytes[4096..].fill(0);
    std::fs::write(&file, bytes).unwrap();
    let why = refused_start(dir.path()).await;
    eprintln!("refused: {why}");
    assert!(why.contains("hookd.redb"), "{why}");
    assert!(why.contains("hookd repair"), "{why}");
    assert!(!why.contains("panicked"), "{why}");
}

/// Finding 7: Stats said `log_segments = 0` right after a start, until the first reclaim
/// looked at the log. It says what the log holds from the start.
#[tokio::test]
async fn stats_count_the_log_segments_right_after_a_start() {
    let dir = tempfile::tempdir().unwrap();
    stopped_with_events(dir.path(), 200).await;
    let server =
        TestServer::start_with(crate::harness::test_config(dir.path()), system_clock()).await;
    let mut c = server.client().await;
    let storage = c.stats().await.unwrap().storage.unwrap_or_default();
    assert!(storage.log_segments >= 1, "{storage:?}");
    assert!(storage.log_bytes > 0, "{storage:?}");
    server.stop().await;
}

/// Finding 1, measured: while four connections post 30 MB bodies without a credential
/// over and over (each was read, parsed and transcoded before its 401: 5-10 s of CPU and
/// 1-2 GB each) and a producer posts 2 MB bodies of a million JSON values, an honest
/// caller's Enqueue keeps its latency. Bounded: 5 s, at most 200 requests an attacker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_api_attacks_leave_an_honest_caller_served() {
    use hookd_client::Event;
    let dir = tempfile::tempdir().unwrap();
    let mut config = secured(dir.path(), "");
    config.connections.request_body_timeout_ms = 10_000;
    let server = TestServer::start_with(config, system_clock()).await;
    let http = server.http;
    let mut honest = crate::security::client(&server, Some(OPS)).await;
    let quiet = enqueue_latencies(&mut honest, 200).await;

    let stop = Instant::now() + Duration::from_secs(5);
    let mut attackers = Vec::new();
    for _ in 0..4 {
        attackers.push(tokio::spawn(async move {
            let chunk = vec![b' '; 1 << 20];
            let mut statuses = Vec::new();
            while statuses.len() < 200 && Instant::now() < stop {
                let mut tcp = unfinished(http, None, 30_000_000, None).await;
                // The body follows as fast as loopback takes it, until hookd answers.
                for _ in 0..30 {
                    // hookd answers without reading the body: a write that cannot go on
                    // (the socket's buffers full) ends the sending.
                    match tokio::time::timeout(Duration::from_millis(200), tcp.write_all(&chunk))
                        .await
                    {
                        Ok(Ok(())) => {}
                        _ => break,
                    }
                    let mut peek = [0u8; 1];
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_millis(1), tcp.peek(&mut peek)).await
                        && n > 0
                    {
                        break;
                    }
                }
                statuses.push(answer(&mut tcp).await.0);
            }
            statuses
        }));
    }
    // A producer's bodies of a million values each (refused 413 before they are built).
    let mut many = String::from(r#"{"queue":"q","payload":"aGk=","headers":{"x":["#);
    for i in 0..1_000_001 {
        if i > 0 {
            many.push(',');
        }
        many.push('0');
    }
    many.push_str("]}}");
    let producer = tokio::spawn(async move {
        let mut statuses = Vec::new();
        while statuses.len() < 50 && Instant::now() < stop {
            let r = post_message(http, AGENT, &many).await;
            statuses.push(r.status());
        }
        statuses
    });
    let mut during = Vec::new();
    while Instant::now() < stop && during.len() < 100_000 {
        let start = Instant::now();
        honest
            .enqueue(Event::to_queue("honest", b"during".to_vec()))
            .await
            .unwrap();
        during.push(start.elapsed());
    }
    let mut unauthenticated = Vec::new();
    for a in attackers {
        unauthenticated.extend(a.await.unwrap());
    }
    let produced = producer.await.unwrap();
    during.sort();
    eprintln!(
        "hardening json: {} unauthenticated 30 MB posts, {} producer posts of 1,000,001 values; honest Enqueue p50/p99 quiet {:?}/{:?}, during {:?}/{:?} ({} calls)",
        unauthenticated.len(),
        produced.len(),
        pct(&quiet, 0.5),
        pct(&quiet, 0.99),
        pct(&during, 0.5),
        pct(&during, 0.99),
        during.len(),
    );
    assert!(
        unauthenticated.iter().all(|s| *s == 401),
        "{unauthenticated:?}"
    );
    assert!(
        produced.iter().all(|s| *s == 413 || *s == 429),
        "{produced:?}"
    );
    assert!(
        pct(&during, 0.99) < Duration::from_secs(2),
        "honest p99 {:?}",
        pct(&during, 0.99)
    );
    server.stop().await;
}

/// Opens a Server-Sent Events Watch from `source`; the connection and its status line.
async fn sse_watch(
    http: std::net::SocketAddr,
    source: std::net::IpAddr,
) -> (tokio::io::Lines<tokio::io::BufReader<TcpStream>>, String) {
    use tokio::io::AsyncBufReadExt;
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(source, 0)).unwrap();
    let mut tcp = socket.connect(http).await.unwrap();
    tcp.write_all(b"GET /v1/events HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut lines = tokio::io::BufReader::new(tcp).lines();
    let status = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a status line")
        .unwrap()
        .unwrap_or_default();
    (lines, status)
}

/// Finding 7: without `[auth]` every caller was the one anonymous caller, so all shared one
/// quota of 16 Watch streams (the comment promised one per address), and an idle stream
/// never ended. Now the quota is per address, and a stream with no event for
/// `connections.watch_idle_secs` ends ("idle").
#[tokio::test]
async fn watch_streams_are_shared_per_address_and_an_idle_one_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::harness::test_config(dir.path());
    config.connections.watch_idle_secs = 2;
    let server = TestServer::start_with(config, system_clock()).await;
    let crowd = std::net::IpAddr::from([127, 0, 0, 2]);
    let mut held = Vec::new();
    for _ in 0..16 {
        let (lines, status) = sse_watch(server.http, crowd).await;
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        held.push(lines);
    }
    let (_, status) = sse_watch(server.http, crowd).await;
    assert!(
        status.starts_with("HTTP/1.1 429"),
        "the 17th from one address: {status}"
    );
    let (mut other, status) = sse_watch(server.http, std::net::IpAddr::from([127, 0, 0, 3])).await;
    assert!(
        status.starts_with("HTTP/1.1 200"),
        "another address has its own share: {status}"
    );
    // Nothing happens: the stream ends by itself, saying why.
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        let mut said = String::new();
        while let Ok(Some(line)) = other.next_line().await {
            said.push_str(&line);
            said.push('\n');
        }
        said
    })
    .await
    .expect("the idle stream ended");
    assert!(ended.contains("idle: no event for 2 s"), "{ended}");
    server.stop().await;
}
