//! `/metrics` on the HTTP listener: the counts follow what happened, per-destination series
//! stay bounded, and the output passes `promtool check metrics` (opt-in: `.ci/run` unpacks
//! Debian's promtool and names it in HOOKD_PROMTOOL).

use std::collections::HashMap;

use hookd_client::{Client, Event, pb};

use hookd_core::clock::{Clock, ManualClock, SystemClock};

use crate::harness::{TestServer, eventually, test_config, until_message};
use crate::sink::{Reply, Sink};

/// Scrapes `/metrics`: the response's head and its samples (`name{labels}` -> value).
async fn scrape(server: &TestServer) -> (String, String, HashMap<String, f64>) {
    let response = server.http_get("/metrics").await;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("an HTTP response with a body");
    let samples = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse::<f64>().ok()?))
        })
        .collect();
    (head.to_owned(), body.to_owned(), samples)
}

fn get(samples: &HashMap<String, f64>, series: &str) -> f64 {
    *samples
        .get(series)
        .unwrap_or_else(|| panic!("no series {series} in {samples:#?}"))
}

/// Three delivered, one dead-lettered (a 400), two waiting in a queue.
async fn some_traffic(server: &TestServer, sink: &Sink) -> Client {
    let mut c = server.client().await;
    for (name, path) in [("ok", "/ok"), ("bad", "/bad")] {
        c.put_endpoint(pb::Endpoint {
            name: name.into(),
            url: sink.url(path),
            max_in_flight: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    }
    for i in 0..3 {
        c.enqueue(Event::to_endpoint("ok", format!("ok {i}")))
            .await
            .unwrap();
    }
    sink.wait_for(3).await;
    sink.set_default(Reply::Full(400, vec![], b"bad schema".to_vec()));
    let dead = c
        .enqueue(Event::to_endpoint("bad", "nope"))
        .await
        .unwrap()
        .id;
    until_message(&mut c, &dead, "dead letter", |m| {
        m.is_some_and(|m| m.state == pb::MessageState::DeadLetter as i32)
    })
    .await;
    for i in 0..2 {
        c.enqueue(Event::to_queue("q", format!("q {i}")))
            .await
            .unwrap();
    }
    c
}

#[tokio::test]
async fn the_counts_follow_what_happened() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = some_traffic(&server, &sink).await;
    // The delivered count follows the engine's round after the outcome: poll for it.
    let (head, _, m) = eventually(
        "three deliveries counted",
        async || scrape(&server).await,
        |(_, _, m)| m.get("hookd_messages_delivered_total") == Some(&3.0),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert_eq!(get(&m, "hookd_messages_enqueued_total"), 6.0);
    assert_eq!(get(&m, "hookd_messages_dead_lettered_total"), 1.0);
    assert_eq!(get(&m, "hookd_attempts_failed_total"), 1.0);
    assert_eq!(get(&m, "hookd_push_attempts_total{outcome=\"2xx\"}"), 3.0);
    assert_eq!(get(&m, "hookd_push_attempts_total{outcome=\"4xx\"}"), 1.0);
    assert_eq!(get(&m, "hookd_push_attempt_duration_seconds_count"), 4.0);
    assert_eq!(get(&m, "hookd_delivery_latency_seconds_count"), 3.0);
    assert_eq!(
        get(&m, "hookd_pending_messages{destination=\"queue:q\"}"),
        2.0
    );
    assert_eq!(
        get(
            &m,
            "hookd_dead_letter_messages{destination=\"endpoint:bad\"}"
        ),
        1.0
    );
    assert_eq!(
        get(&m, "hookd_breaker_state{destination=\"endpoint:ok\"}"),
        0.0
    );
    assert_eq!(get(&m, "hookd_live_messages"), 2.0);
    assert_eq!(get(&m, "hookd_storage_healthy"), 1.0);
    assert!(get(&m, "hookd_log_sync_duration_seconds_count") >= 1.0);
    assert!(get(&m, "hookd_log_sync_requests_sum") >= 6.0);
    assert!(get(&m, "hookd_log_bytes") > 0.0);
    assert!(get(&m, "process_resident_memory_bytes") > 0.0);
    // One build-info series: this version, and a commit (named by the server's build script).
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    let build: Vec<_> = m
        .iter()
        .filter(|(k, _)| k.starts_with("hookd_build_info{"))
        .collect();
    assert_eq!(build.len(), 1, "{build:?}");
    let (series, value) = build[0];
    assert!(
        series.contains("commit=\"") && series.contains(&version),
        "{series}"
    );
    assert_eq!(*value, 1.0);

    // The next alert evaluation (every 10 s) sees the new dead letter: growth is a warning,
    // for the endpoint and in total; a quiet alert of the total shows as 0.
    server.advance(10_000).await;
    let (_, _, m) = scrape(&server).await;
    let alert =
        |a: &str, d: &str| format!("hookd_alert_level{{alert=\"{a}\",destination=\"{d}\"}}");
    assert_eq!(get(&m, &alert("dead_letter_growth", "endpoint:bad")), 1.0);
    assert_eq!(get(&m, &alert("dead_letter_growth", "*")), 1.0);
    assert_eq!(get(&m, &alert("queue_depth", "*")), 0.0);

    // The endpoint is fixed and its dead letter replayed: counted, delivered, gauge back to 0.
    sink.set_default(Reply::Status(204));
    let replayed = c
        .raw()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            destination: Some(pb::Destination {
                kind: Some(pb::destination::Kind::Endpoint("bad".into())),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(replayed.replayed, 1);
    let (_, _, m) = eventually(
        "the replayed message delivered",
        async || scrape(&server).await,
        |(_, _, m)| m.get("hookd_messages_delivered_total") == Some(&4.0),
    )
    .await;
    assert_eq!(get(&m, "hookd_messages_replayed_total"), 1.0);
    assert_eq!(
        get(
            &m,
            "hookd_dead_letter_messages{destination=\"endpoint:bad\"}"
        ),
        0.0
    );
    assert_eq!(get(&m, "hookd_messages_dead_lettered_total"), 1.0);
    server.stop().await;
}

#[tokio::test]
async fn per_destination_series_stay_bounded_with_many_destinations() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.metrics.max_destination_series = 5;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    // 40 queues; queue q{i} holds i % 4 + 1 messages, so the heaviest are clear.
    let mut total = 0;
    for i in 0..40 {
        let events: Vec<_> = (0..i % 4 + 1)
            .map(|n| Event::to_queue(format!("q{i:02}"), format!("{n}")))
            .collect();
        total += events.len();
        c.enqueue_batch(events).await.unwrap();
    }
    let (_, _, m) = scrape(&server).await;
    let pending: Vec<(&String, &f64)> = m
        .iter()
        .filter(|(k, _)| k.starts_with("hookd_pending_messages{"))
        .collect();
    assert_eq!(pending.len(), 6, "5 destinations and _other: {pending:?}");
    let sum: f64 = pending.iter().map(|(_, v)| **v).sum();
    assert_eq!(sum, total as f64, "_other keeps the total");
    for (k, v) in &pending {
        if !k.contains("_other") {
            assert_eq!(**v, 4.0, "the heaviest are shown: {k}");
        }
    }
    server.stop().await;
}

/// More destinations than one engine step reads (a scrape is read in slices of
/// `GAUGE_SLICE`, a Stats page in slices of `STATS_SLICE`): the merged scrape shows the
/// heaviest of all and sums the rest exactly; a Stats page is whole and in key order.
#[tokio::test]
async fn scrapes_and_stats_pages_read_in_slices_are_whole() {
    let n = hookd_engine::GAUGE_SLICE * 2 + 300;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.metrics.max_destination_series = 10;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    // One message in each queue; two in every 1,000th (spread over every slice).
    let mut batch = Vec::new();
    for i in 0..n {
        batch.push(Event::to_queue(format!("q{i:05}"), "x"));
        if i % 1_000 == 999 {
            batch.push(Event::to_queue(format!("q{i:05}"), "y"));
        }
        if batch.len() >= 900 {
            c.enqueue_batch(std::mem::take(&mut batch)).await.unwrap();
        }
    }
    c.enqueue_batch(batch).await.unwrap();
    let heavy: Vec<String> = (0..n)
        .filter(|i| i % 1_000 == 999)
        .map(|i| format!("q{i:05}"))
        .collect();
    let total = n + heavy.len();
    let (_, _, m) = scrape(&server).await;
    let pending: HashMap<&str, f64> = m
        .iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("hookd_pending_messages{destination=\"")?;
            Some((rest.split('"').next()?, *v))
        })
        .collect();
    assert_eq!(pending.len(), 11, "10 destinations and _other: {pending:?}");
    for q in &heavy {
        assert_eq!(
            pending.get(format!("queue:{q}").as_str()),
            Some(&2.0),
            "{q}"
        );
    }
    // The rest of the ten by name (ties among weight 1).
    for q in ["queue:q00000", "queue:q00001"]
        .iter()
        .take(10 - heavy.len())
    {
        assert_eq!(pending.get(q), Some(&1.0), "{q}: {pending:?}");
    }
    let sum: f64 = pending.values().sum();
    assert_eq!(sum, total as f64, "_other keeps the total");

    // A page larger than one slice, then the rest.
    let page = |token: String| pb::StatsRequest {
        page_size: 1_200,
        page_token: token,
    };
    let first = c
        .raw()
        .stats(page(String::new()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.destinations.len(), 1_200);
    assert_eq!(first.total.unwrap().pending, total as u64);
    let mut keys: Vec<String> = first
        .destinations
        .iter()
        .map(|d| d.destination.clone())
        .collect();
    let mut token = first.next_page_token;
    while !token.is_empty() {
        let more = c.raw().stats(page(token)).await.unwrap().into_inner();
        assert!(more.destinations.len() <= 1_200);
        keys.extend(more.destinations.into_iter().map(|d| d.destination));
        token = more.next_page_token;
    }
    let want: Vec<String> = (0..n).map(|i| format!("queue:q{i:05}")).collect();
    assert_eq!(keys, want, "every destination once, in key order");
    server.stop().await;
}

#[tokio::test]
#[ignore = "needs promtool (Debian's prometheus package); .ci/run unpacks it and sets HOOKD_PROMTOOL"]
async fn metrics_pass_promtool_check() {
    let promtool = std::env::var("HOOKD_PROMTOOL")
        .expect("HOOKD_PROMTOOL must name a promtool binary (.ci/run sets it)");
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let _c = some_traffic(&server, &sink).await;
    let (_, body, m) = scrape(&server).await;
    assert!(m.contains_key("hookd_messages_enqueued_total"));
    let output = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new(promtool)
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool runs");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(body.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    server.stop().await;
    // The README's scrape config, as shown, is a Prometheus config promtool accepts.
    let readme = include_str!("../../README.md");
    let start = readme
        .find("### Metrics")
        .and_then(|i| readme[i..].find("```yaml\n").map(|j| i + j + 8))
        .expect("the README's scrape config");
    let end = start + readme[start..].find("```").unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(&config, &readme[start..end]).unwrap();
    let promtool = std::env::var("HOOKD_PROMTOOL").unwrap();
    let output = std::process::Command::new(promtool)
        .args(["check", "config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool check config on the README's scrape config:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Issue #26, 14: without `[auth]`, `/metrics` answers only a `Host` that is an IP address
/// or `localhost`: a page on another site cannot read it through DNS rebinding.
#[tokio::test]
async fn metrics_without_auth_refuses_a_dns_name_host() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let server = crate::harness::TestServer::start(dir.path()).await;
    let get = async |host: &str| {
        let mut tcp = tokio::net::TcpStream::connect(server.http).await.unwrap();
        tcp.write_all(
            format!("GET /metrics HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        tcp.read_to_string(&mut out).await.unwrap();
        out
    };
    let rebound = get("evil.example:7701").await;
    assert!(rebound.starts_with("HTTP/1.1 403"), "{rebound}");
    for host in ["127.0.0.1:7701", "localhost", "[::1]:7701", "10.1.2.3"] {
        let ok = get(host).await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{host}: {ok}");
    }
    server.stop().await;
}
