//! Push delivery against real HTTP sinks on loopback. hookd runs on an injected clock
//! (retries, pauses, breaker cooldowns and the rate limit follow it); the HTTP exchanges
//! themselves are real and waited for with bounded polls.

use std::time::{Duration, Instant};

use base64::Engine as _;
use hmac::{KeyInit, Mac};
use hookd_client::{Client, Event, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};

use crate::harness::{
    TestServer, code, dead_lettered, delivered, eventually, message, push_settled, test_config,
    until_message,
};
use crate::sink::{Reply, Sink};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn endpoint(name: &str, url: String) -> pb::Endpoint {
    pb::Endpoint {
        name: name.into(),
        url,
        ..Default::default()
    }
}

/// Stats of one destination.
/// Enqueues `payload` for endpoint `name`; its message id.
async fn send(c: &mut Client, name: &str, payload: &[u8]) -> String {
    c.enqueue(Event::to_endpoint(name, payload.to_vec()))
        .await
        .unwrap()
        .id
}

async fn stats(c: &mut Client, key: &str) -> pb::DestinationStats {
    c.stats_by_destination()
        .await
        .unwrap()
        .remove(key)
        .unwrap_or_default()
}

fn push(s: &pb::DestinationStats) -> pb::PushStats {
    s.push.clone().expect("push destinations report push stats")
}

/// Polls (real time, bounded) until `pred` holds for the destination's stats.
async fn until_stats(
    c: &mut Client,
    key: &str,
    what: &str,
    pred: impl Fn(&pb::DestinationStats) -> bool,
) -> pb::DestinationStats {
    eventually(what, async || stats(c, key).await, pred).await
}

/// Waits until nothing is in flight to `key` (every outcome recorded).
async fn settled(c: &mut Client, key: &str) -> pb::DestinationStats {
    until_stats(c, key, "no attempt in flight", |s| s.in_flight == 0).await
}

/// The message once its first attempt has failed (and is recorded).
async fn first_failure(c: &mut Client, id: &str) -> pb::GetMessageResponse {
    until_message(c, id, "a failed attempt", |m| {
        m.is_some_and(|m| m.attempts == 1)
    })
    .await
    .expect("a message with a failed attempt exists")
}

#[tokio::test]
async fn delivers_with_headers_and_standard_webhooks_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = server.client().await;
    let second = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode([9u8; 32])
    );
    c.put_endpoint(pb::Endpoint {
        secrets: vec![SECRET.into(), second.clone()],
        ..endpoint("orders", sink.url("/hooks/orders"))
    })
    .await
    .unwrap();
    let body = br#"{"order":42}"#.to_vec();
    let sent = c
        .enqueue(
            Event::to_endpoint("orders", body.clone())
                .idempotency_key("order-42")
                .event_type("order.created")
                .header("x-tenant", "acme"),
        )
        .await
        .unwrap();
    let got = sink.wait_for(1).await;
    let r = &got[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.uri.path(), "/hooks/orders");
    assert_eq!(&r.body[..], &body[..]);
    let h = |name: &str| r.headers[name].to_str().unwrap().to_owned();
    assert_eq!(h("content-type"), "application/json");
    assert!(h("user-agent").starts_with("hookd/"));
    assert_eq!(h("idempotency-key"), "order-42");
    assert_eq!(h("x-tenant"), "acme");
    assert_eq!(h("webhook-id"), sent.id);
    assert_eq!(h("webhook-event-type"), "order.created");
    let timestamp = h("webhook-timestamp");
    assert_eq!(timestamp, (server.clock_now() / 1000).to_string());
    // Verified independently of hookd's signing code: HMAC-SHA256 over id.timestamp.body,
    // one "v1," entry per secret.
    let signatures: Vec<String> = h("webhook-signature")
        .split(' ')
        .map(str::to_owned)
        .collect();
    assert_eq!(signatures.len(), 2);
    for (secret, signature) in [SECRET, second.as_str()].iter().zip(&signatures) {
        let key = base64::engine::general_purpose::STANDARD
            .decode(secret.trim_start_matches("whsec_"))
            .unwrap();
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
        mac.update(format!("{}.{timestamp}.", sent.id).as_bytes());
        mac.update(&body);
        let expected =
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
        assert_eq!(signature, &format!("v1,{expected}"));
    }
    let m = delivered(&mut c, &sent.id).await;
    assert_eq!(m.attempts, 1);
    assert_eq!(m.history.len(), 1);
    assert_eq!(m.history[0].outcome, "delivered");
    assert_eq!(m.history[0].http_status, 204);
    assert!(m.history[0].latency_us > 0);
    assert_eq!(m.event_type, "order.created");
    assert_eq!(m.payload_size, body.len() as u64);
    let s = settled(&mut c, "endpoint:orders").await;
    assert_eq!(s.delivered_last_hour, 1);
    assert_eq!(s.pending, 0);
    let p = push(&s);
    assert_eq!(p.attempts_last_hour, 1);
    assert_eq!(p.success_rate_last_hour, 1.0);
    assert_eq!(p.attempt_latency_last_hour.unwrap().count, 1);
    assert_eq!(s.latency_last_hour.unwrap().count, 1, "end-to-end latency");
    assert_eq!(p.breaker, pb::BreakerState::Closed as i32);

    // An ad-hoc URL: delivered to its exact path and query, no signature, message id as
    // the idempotency key when the event has none.
    let adhoc = c
        .raw()
        .enqueue(pb::EnqueueRequest {
            destination: Some(pb::enqueue_request::Destination::Url(
                sink.url("/adhoc?x=1"),
            )),
            payload: b"{}".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let got = sink.wait_for(2).await;
    assert_eq!(got[1].uri.to_string(), "/adhoc?x=1");
    assert!(got[1].headers.get("webhook-signature").is_none());
    assert_eq!(got[1].headers["idempotency-key"], adhoc.id.as_str());
    delivered(&mut c, &adhoc.id).await;
    server.stop().await;
}

#[tokio::test]
async fn server_error_is_retried_with_backoff_then_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    sink.script([Reply::Full(500, vec![], b"db down".to_vec())]);
    let mut c = server.client().await;
    c.put_endpoint(endpoint("e", sink.url("/"))).await.unwrap();
    let sent = send(&mut c, "e", b"x").await;
    sink.wait_for(1).await;
    let m = first_failure(&mut c, &sent).await;
    assert_eq!(m.state, pb::MessageState::AwaitingRetry as i32);
    assert_eq!(m.history[0].http_status, 500);
    assert_eq!(m.history[0].outcome, "http_error");
    assert_eq!(m.last_error, "HTTP 500: db down");
    let delay = m.next_attempt_unix_ms - server.clock_now();
    assert!(
        delay <= 100,
        "full jitter under base * 2^0 = 100 ms, got {delay}"
    );
    sink.stays_at(&mut c, 1).await;
    server.advance(100).await;
    sink.wait_for(2).await;
    let m = delivered(&mut c, &sent).await;
    let statuses: Vec<u32> = m.history.iter().map(|a| a.http_status).collect();
    assert_eq!(statuses, [500, 200], "every attempt is kept");
    // Both attempts carried the same webhook-id.
    let got = sink.received();
    assert_eq!(got[0].headers["webhook-id"], got[1].headers["webhook-id"]);
    server.stop().await;
}

#[tokio::test]
async fn client_error_is_permanent_and_gone_disables_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    sink.script([
        Reply::Full(400, vec![], b"bad schema".to_vec()),
        Reply::Status(410),
    ]);
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        max_in_flight: 1,
        ..endpoint("e", sink.url("/"))
    })
    .await
    .unwrap();
    let a = send(&mut c, "e", b"a").await;
    let m = dead_lettered(&mut c, &a).await;
    assert_eq!(m.attempts, 1, "a 400 is not retried");
    assert_eq!(m.history[0].http_status, 400);
    assert_eq!(m.last_error, "HTTP 400: bad schema");
    let dl = c.list_dead_letters(None, 10, "").await.unwrap();
    assert_eq!(dl.dead_letters.len(), 1);

    let b = send(&mut c, "e", b"b").await;
    dead_lettered(&mut c, &b).await;
    let e = c
        .raw()
        .get_endpoint(pb::GetEndpointRequest {
            name: "e".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap();
    assert!(e.disabled);
    assert!(e.disabled_reason.contains("410"), "{}", e.disabled_reason);
    let s = settled(&mut c, "endpoint:e").await;
    assert!(push(&s).disabled);

    // While disabled, messages wait (nothing is dropped)...
    let held = send(&mut c, "e", b"c").await;
    sink.stays_at(&mut c, 2).await;
    assert_eq!(stats(&mut c, "endpoint:e").await.pending, 1);
    // ...and PutEndpoint re-enables it.
    let e = c.put_endpoint(endpoint("e", sink.url("/"))).await.unwrap();
    assert!(!e.endpoint.unwrap().disabled);
    sink.wait_for(3).await;
    delivered(&mut c, &held).await;
    server.stop().await;
}

#[tokio::test]
async fn retry_after_pauses_the_whole_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    sink.script([Reply::Full(429, vec![("retry-after", "30".into())], vec![])]);
    let mut c = server.client().await;
    c.put_endpoint(endpoint("e", sink.url("/"))).await.unwrap();
    let first = send(&mut c, "e", b"1").await;
    sink.wait_for(1).await;
    let s = settled(&mut c, "endpoint:e").await;
    let paused_until = push(&s).paused_until_unix_ms;
    assert_eq!(paused_until, server.clock_now() + 30_000);
    // Another message, and the first one's retry (backoff <= 100 ms), wait for the pause.
    let second = send(&mut c, "e", b"2").await;
    server.advance(29_000).await;
    sink.stays_at(&mut c, 1).await;
    server.advance(1_000).await;
    sink.wait_for(3).await;
    delivered(&mut c, &first).await;
    delivered(&mut c, &second).await;
    assert!(
        sink.received()[1..]
            .iter()
            .all(|r| r.at > sink.received()[0].at)
    );
    server.stop().await;
}

#[tokio::test]
async fn breaker_opens_probes_once_doubles_and_closes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.breaker.failure_threshold = 3;
    config.delivery.breaker.cooldown_ms = 10_000;
    config.delivery.breaker.max_cooldown_ms = 25_000;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let sink = Sink::start(Reply::Status(500)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        max_in_flight: 1,
        max_attempts: 50,
        ..endpoint("e", sink.url("/"))
    })
    .await
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..5 {
        let sent = c.enqueue(Event::to_endpoint("e", vec![i])).await.unwrap();
        ids.push(sent.id);
    }
    // Three consecutive failures open it.
    sink.wait_for(3).await;
    sink.stays_at(&mut c, 3).await;
    let s = settled(&mut c, "endpoint:e").await;
    let p = push(&s);
    assert_eq!(p.breaker, pb::BreakerState::Open as i32);
    assert_eq!(p.consecutive_failures, 3);
    assert_eq!(p.breaker_open_until_unix_ms, server.clock_now() + 10_000);
    assert_eq!(p.breaker_openings, 1);
    assert_eq!(
        s.pending + s.awaiting_retry,
        5,
        "nothing dropped while open"
    );

    // A message due but held by the open breaker says so on its console page, instead of
    // a next attempt in the past.
    let page = server.http_get(&format!("/ui/messages/{}", ids[4])).await;
    assert!(page.contains("held: the endpoint"), "{page}");
    assert!(page.contains("breaker is open until"), "{page}");

    // Cooldown not over: nothing goes.
    server.advance(9_999).await;
    sink.stays_at(&mut c, 3).await;
    // Over: exactly one probe; it fails and the cooldown doubles.
    server.advance(1).await;
    sink.wait_for(4).await;
    sink.stays_at(&mut c, 4).await;
    let p = push(&settled(&mut c, "endpoint:e").await);
    assert_eq!(p.breaker, pb::BreakerState::Open as i32);
    assert_eq!(p.breaker_cooldown_ms, 20_000);
    assert_eq!(p.breaker_open_until_unix_ms, server.clock_now() + 20_000);
    server.advance(19_999).await;
    sink.stays_at(&mut c, 4).await;
    server.advance(1).await;
    sink.wait_for(5).await;
    sink.stays_at(&mut c, 5).await;
    let p = push(&settled(&mut c, "endpoint:e").await);
    assert_eq!(p.breaker_cooldown_ms, 25_000, "capped");
    assert_eq!(p.breaker_openings, 3);

    // The endpoint recovers: the next probe succeeds, the breaker closes and resets, and
    // everything waiting is delivered.
    sink.set_default(Reply::Status(200));
    server.advance(25_000).await;
    sink.wait_for(6).await;
    let s = until_stats(&mut c, "endpoint:e", "closed", |s| {
        s.push
            .as_ref()
            .is_some_and(|p| p.breaker == pb::BreakerState::Closed as i32)
    })
    .await;
    let p = push(&s);
    assert_eq!(p.breaker_cooldown_ms, 10_000);
    assert_eq!(p.consecutive_failures, 0);
    // Retries of the failed ones are due within the backoff cap (1 s in tests).
    server.advance(1_000).await;
    for id in &ids {
        delivered(&mut c, id).await;
    }
    server.stop().await;
}

#[tokio::test]
async fn rate_limit_holds_over_a_window() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        rate_limit_per_s: 20.0,
        rate_limit_burst: 5,
        ..endpoint("e", sink.url("/"))
    })
    .await
    .unwrap();
    let events: Vec<Event> = (0..300u32)
        .map(|i| Event::to_endpoint("e", i.to_le_bytes().to_vec()))
        .collect();
    c.enqueue_batch(events).await.unwrap();
    sink.wait_for(5).await;
    sink.stays_at(&mut c, 5).await;
    // 10 s in 100 ms steps: 20/s allows 200 more.
    for _ in 0..100 {
        server.advance(100).await;
    }
    push_settled(&mut c).await;
    let sent = sink.count();
    let expected = 5 + 200;
    assert!(
        sent.abs_diff(expected) * 10 <= expected,
        "{sent} deliveries in 10 s at 20/s + burst 5: not within 10 % of {expected}"
    );
    assert!(
        sent <= expected,
        "the limit was exceeded: {sent} > {expected}"
    );
    server.stop().await;
}

#[tokio::test]
async fn redirects_are_not_followed_and_bodies_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    sink.script([
        Reply::Full(302, vec![("location", sink.url("/elsewhere"))], vec![]),
        Reply::Full(500, vec![], vec![b'z'; 4 << 20]),
    ]);
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        max_in_flight: 1,
        ..endpoint("e", sink.url("/target"))
    })
    .await
    .unwrap();
    let a = send(&mut c, "e", b"a").await;
    let m = first_failure(&mut c, &a).await;
    assert_eq!(m.history[0].http_status, 302);
    assert!(m.last_error.contains("not followed"), "{}", m.last_error);
    sink.stays_at(&mut c, 1).await;
    assert!(sink.received().iter().all(|r| r.uri.path() == "/target"));

    let b = send(&mut c, "e", b"b").await;
    let m = first_failure(&mut c, &b).await;
    assert_eq!(m.history[0].http_status, 500);
    assert!(
        m.last_error.ends_with("[truncated]"),
        "{}",
        &m.last_error[..40]
    );
    assert!(
        m.last_error.len() < 2_048,
        "{} bytes kept",
        m.last_error.len()
    );
    server.stop().await;
}

#[tokio::test]
async fn hanging_endpoint_times_out_and_does_not_hold_up_others() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let hang = Sink::start(Reply::Hang).await;
    let ok = Sink::start(Reply::Status(200)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        timeout_ms: 300,
        max_in_flight: 4,
        ..endpoint("slow", hang.url("/"))
    })
    .await
    .unwrap();
    c.put_endpoint(endpoint("fast", ok.url("/"))).await.unwrap();
    let stuck = send(&mut c, "slow", b"s").await;
    let mut fast = Vec::new();
    for i in 0..20u8 {
        fast.push(
            c.enqueue(Event::to_endpoint("fast", vec![i]))
                .await
                .unwrap()
                .id,
        );
    }
    // The healthy endpoint is served while the other hangs.
    for id in &fast {
        delivered(&mut c, id).await;
    }
    let started = Instant::now();
    let m = first_failure(&mut c, &stuck).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(m.history[0].outcome, "timeout");
    assert_eq!(m.history[0].http_status, 0);
    assert!(
        m.history[0].latency_us >= 300_000,
        "{}",
        m.history[0].latency_us
    );
    server.stop().await;
}

#[tokio::test]
async fn destination_guard_refuses_private_addresses_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.allow_destinations.clear();
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let sink = Sink::start(Reply::Status(200)).await;
    let mut c = server.client().await;
    let port = sink.addr().port();
    for url in [
        format!("http://127.0.0.1:{port}/"),
        // Resolved, then each address checked as it is dialed.
        format!("http://localhost:{port}/"),
        "http://10.0.0.1/".to_owned(),
        "http://[::ffff:127.0.0.1]:1/".to_owned(),
        "http://169.254.169.254/latest/meta-data".to_owned(),
    ] {
        let sent = c
            .raw()
            .enqueue(pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Url(url.clone())),
                payload: b"x".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let m = dead_lettered(&mut c, &sent.id).await;
        assert_eq!(m.attempts, 1, "{url}: refusal is not retried");
        assert_eq!(m.history[0].outcome, "refused");
        assert!(
            m.last_error.contains("destination refused"),
            "{url}: {}",
            m.last_error
        );
    }
    assert_eq!(sink.count(), 0, "no connection reached the sink");
    server.stop().await;

    // The same sink, allow-listed.
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    assert_eq!(
        server.config.delivery.allow_destinations,
        vec!["127.0.0.1/32".parse().unwrap()]
    );
    let mut c = server.client().await;
    c.put_endpoint(endpoint("e", sink.url("/"))).await.unwrap();
    let sent = send(&mut c, "e", b"x").await;
    sink.wait_for(1).await;
    delivered(&mut c, &sent).await;
    server.stop().await;
}

#[tokio::test]
async fn restart_mid_retry_keeps_the_schedule() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    sink.script([Reply::Status(503)]);
    let mut c = server.client().await;
    c.put_endpoint(endpoint("e", sink.url("/"))).await.unwrap();
    let sent = send(&mut c, "e", b"x").await;
    let before = first_failure(&mut c, &sent).await;
    let server = server.restart().await;
    let mut c = server.client().await;
    let after = c.get_message(&sent).await.unwrap();
    assert_eq!(after.attempts, 1);
    assert_eq!(after.next_attempt_unix_ms, before.next_attempt_unix_ms);
    assert_eq!(after.history, before.history);
    sink.stays_at(&mut c, 1).await;
    let due = after
        .next_attempt_unix_ms
        .saturating_sub(server.clock_now());
    server.advance(due).await;
    sink.wait_for(2).await;
    delivered(&mut c, &sent).await;
    assert_eq!(sink.count(), 2);
    server.stop().await;
}

#[tokio::test]
async fn put_endpoint_refuses_bad_delivery_settings_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    for (e, field) in [
        (
            pb::Endpoint {
                secrets: vec!["not-a-secret".into()],
                ..endpoint("e", "http://127.0.0.1:1/".into())
            },
            "endpoint.secrets[0]",
        ),
        (
            pb::Endpoint {
                rate_limit_per_s: -1.0,
                ..endpoint("e", "http://127.0.0.1:1/".into())
            },
            "endpoint.rate_limit_per_s",
        ),
        (
            pb::Endpoint {
                timeout_ms: 99_999_999,
                ..endpoint("e", "http://127.0.0.1:1/".into())
            },
            "endpoint.timeout_ms",
        ),
    ] {
        let err = c.put_endpoint(e).await.unwrap_err();
        assert_eq!(code(&err), tonic::Code::InvalidArgument);
        assert!(crate::harness::message(&err).starts_with(field), "{err}");
    }
    let _ = SystemClock.now_ms();
    server.stop().await;
}

#[tokio::test]
async fn slow_endpoint_trips_the_breaker_sooner_and_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.breaker.failure_threshold = 10;
    config.delivery.breaker.slow_failure_threshold = 2;
    config.delivery.slow_threshold_ms = 100;
    config.delivery.slow_breaker_threshold_ms = 200;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let sink = Sink::start(Reply::Hang).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        timeout_ms: 250,
        max_in_flight: 1,
        max_attempts: 20,
        ..endpoint("e", sink.url("/"))
    })
    .await
    .unwrap();
    for i in 0..4u8 {
        c.enqueue(Event::to_endpoint("e", vec![i])).await.unwrap();
    }
    // Each attempt hangs for the whole 250 ms timeout: p95 over the 200 ms threshold, so
    // the second consecutive failure opens the breaker instead of the tenth.
    sink.wait_for(2).await;
    let s = until_stats(&mut c, "endpoint:e", "open", |s| {
        s.push
            .as_ref()
            .is_some_and(|p| p.breaker == pb::BreakerState::Open as i32)
    })
    .await;
    let p = push(&s);
    assert_eq!(p.consecutive_failures, 2);
    assert!(p.slow, "p95 {:?}", p.attempt_latency_last_hour);
    assert_eq!(p.success_rate_last_hour, 0.0);
    sink.stays_at(&mut c, 2).await;
    server.stop().await;
}

/// An HTTPS receiver for `localhost` with a self-signed certificate; returns its address,
/// the certificate as PEM, and the request bodies it got.
async fn tls_sink() -> (
    std::net::SocketAddr,
    String,
    std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
) {
    use http_body_util::BodyExt;
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert_der = certified.cert.der().clone();
    let key_der =
        rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let server = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert_der], key_der)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = bodies.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let seen = seen.clone();
                        async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            seen.lock().unwrap().push(body.to_vec());
                            Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Empty::<
                                bytes::Bytes,
                            >::new(
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, certified.cert.pem(), bodies)
}

#[tokio::test]
async fn https_endpoints_are_verified_against_the_trusted_roots() {
    let (addr, ca_pem, bodies) = tls_sink().await;
    let url = format!("https://localhost:{}/secure", addr.port());

    // Not trusted by default: a TLS failure, retried like any network error.
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.put_endpoint(endpoint("tls", url.clone())).await.unwrap();
    let sent = send(&mut c, "tls", b"one").await;
    let m = first_failure(&mut c, &sent).await;
    assert_eq!(m.history[0].outcome, "network_error");
    assert!(
        m.last_error.to_lowercase().contains("certificate"),
        "{}",
        m.last_error
    );
    assert!(bodies.lock().unwrap().is_empty());
    server.stop().await;

    // Trusted through delivery.ca_file: delivered over TLS.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    let mut config = test_config(dir.path());
    config.delivery.ca_file = Some(ca);
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    c.put_endpoint(endpoint("tls", url)).await.unwrap();
    let sent = send(&mut c, "tls", b"two").await;
    delivered(&mut c, &sent).await;
    assert_eq!(bodies.lock().unwrap().as_slice(), [b"two".to_vec()]);
    server.stop().await;
}

#[tokio::test]
async fn shutdown_waits_a_grace_period_then_an_interrupted_attempt_is_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.shutdown_grace_ms = 200;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let sink = Sink::start(Reply::Hang).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        timeout_ms: 60_000,
        ..endpoint("e", sink.url("/"))
    })
    .await
    .unwrap();
    let sent = send(&mut c, "e", b"x").await;
    sink.wait_for(1).await;
    // The attempt hangs: shutdown waits the 200 ms grace, not the 60 s timeout.
    let stopping = Instant::now();
    let server = server.restart().await;
    assert!(stopping.elapsed() < Duration::from_secs(5));
    // The interrupted attempt was never recorded: the message is pending, no attempt
    // used, and it is sent again with the same webhook-id.
    sink.set_default(Reply::Status(200));
    let got = sink.wait_for(2).await;
    assert_eq!(got[0].headers["webhook-id"], got[1].headers["webhook-id"]);
    let mut c = server.client().await;
    let m = delivered(&mut c, &sent).await;
    assert_eq!(m.attempts, 1);
    server.stop().await;
}

#[tokio::test]
async fn retry_after_is_capped_by_config() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.max_retry_after_secs = 60;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let sink = Sink::start(Reply::Status(200)).await;
    sink.script([Reply::Full(
        503,
        vec![("retry-after", "86400".into())],
        vec![],
    )]);
    let mut c = server.client().await;
    c.put_endpoint(endpoint("e", sink.url("/"))).await.unwrap();
    let sent = send(&mut c, "e", b"1").await;
    sink.wait_for(1).await;
    let s = settled(&mut c, "endpoint:e").await;
    assert_eq!(push(&s).paused_until_unix_ms, server.clock_now() + 60_000);
    server.advance(60_000).await;
    delivered(&mut c, &sent).await;
    server.stop().await;
}

#[tokio::test]
async fn after_the_last_attempt_the_message_is_dead_with_the_last_status() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(502)).await;
    sink.script([Reply::Full(500, vec![], b"first".to_vec())]);
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        max_attempts: 2,
        ..endpoint("e", sink.url("/"))
    })
    .await
    .unwrap();
    let sent = send(&mut c, "e", b"x").await;
    first_failure(&mut c, &sent).await;
    server.advance(100).await;
    let m = dead_lettered(&mut c, &sent).await;
    assert_eq!(m.attempts, 2);
    let statuses: Vec<u32> = m.history.iter().map(|a| a.http_status).collect();
    assert_eq!(statuses, [500, 502]);
    assert_eq!(m.last_error, "HTTP 502");
    let dl = c.list_dead_letters(None, 10, "").await.unwrap();
    assert_eq!(dl.dead_letters[0].id, sent);
    assert_eq!(dl.dead_letters[0].last_error, "HTTP 502");
    let s = settled(&mut c, "endpoint:e").await;
    assert_eq!(s.dead_letter, 1);
    assert_eq!(s.failed_last_hour, 1);
    server.stop().await;
}

#[tokio::test]
async fn connect_timeout_applies_when_the_receiver_does_not_accept() {
    // A listener whose accept queue is full and never drained: the kernel drops further
    // SYNs, so a connect hangs, as to an overloaded or firewalled receiver.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            fillers.push(s);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        connect_timeout_ms: 300,
        timeout_ms: 10_000,
        ..endpoint("e", format!("http://{addr}/"))
    })
    .await
    .unwrap();
    let started = Instant::now();
    let sent = send(&mut c, "e", b"x").await;
    let m = first_failure(&mut c, &sent).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(m.history[0].outcome, "network_error");
    assert!(
        m.last_error.contains("connect timed out after 300 ms"),
        "{}",
        m.last_error
    );
    drop(fillers);
    server.stop().await;
}

#[tokio::test]
async fn changing_the_burst_takes_effect() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    let mut c = server.client().await;
    let limited = |burst| pb::Endpoint {
        rate_limit_per_s: 20.0,
        rate_limit_burst: burst,
        ..endpoint("e", sink.url("/"))
    };
    c.put_endpoint(limited(5)).await.unwrap();
    let events: Vec<Event> = (0..100u32)
        .map(|i| Event::to_endpoint("e", i.to_le_bytes().to_vec()))
        .collect();
    c.enqueue_batch(events).await.unwrap();
    sink.wait_for(5).await;
    sink.stays_at(&mut c, 5).await;
    // Same rate, bigger burst: a full bucket of 50 (the clock does not move).
    c.put_endpoint(limited(50)).await.unwrap();
    sink.wait_for(55).await;
    sink.stays_at(&mut c, 55).await;
    server.stop().await;
}

/// Issue #26, 14: receivers that accept a connection and never answer (tarpits) cannot
/// take every outbound connection (`delivery.max_connections`): an endpoint on another
/// origin that arrives after them is delivered at once, not when their attempts time out
/// (the finding: a healthy endpoint delayed 12 s).
///
/// The fair share alone (before the fix) only shrank what an origin may take once several
/// want connections: the tarpits, arriving first, filled the cap and kept it until their
/// attempts timed out, and the healthy endpoint's attempt was refused "hookd has 8 outbound
/// connections open". Now it takes the place of a tarpit connection stalled for
/// `slots::STALLED` (1 s), waiting for that inside its connect timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tarpit_receivers_leave_a_healthy_endpoint_a_connection() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.max_connections = 8;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    let mut tarpits = Vec::new();
    for i in 0..4 {
        let sink = Sink::start(Reply::Hang).await;
        c.put_endpoint(pb::Endpoint {
            timeout_ms: 60_000,
            max_in_flight: 8,
            ..endpoint(&format!("tarpit{i}"), sink.url("/"))
        })
        .await
        .unwrap();
        for n in 0..8 {
            send(&mut c, &format!("tarpit{i}"), format!("{n}").as_bytes()).await;
        }
        tarpits.push(sink);
    }
    // The tarpits hold the connections they could get (at least half the cap).
    eventually(
        "the tarpits hold connections",
        async || tarpits.iter().map(Sink::count).sum::<usize>(),
        |n| *n >= 4,
    )
    .await;
    let healthy = Sink::start(Reply::Status(200)).await;
    c.put_endpoint(endpoint("healthy", healthy.url("/")))
        .await
        .unwrap();
    let started = Instant::now();
    for n in 0..5 {
        let id = send(&mut c, "healthy", format!("h{n}").as_bytes()).await;
        delivered(&mut c, &id).await;
    }
    let took = started.elapsed();
    let held: Vec<usize> = tarpits.iter().map(Sink::count).collect();
    eprintln!("healthy endpoint: 5 deliveries in {took:?} beside tarpits sent {held:?} requests");
    assert!(
        took < Duration::from_secs(5),
        "the healthy endpoint waited {took:?} for a connection the tarpits held ({held:?})"
    );
    server.stop().await;
}

/// An endpoint's static headers go with every attempt, over the event's header of the
/// same name and under hookd's own (whose names they may not take); they survive a
/// restart; answers show their values only with reveal_secrets; bad ones are refused
/// naming the header, and nothing is stored.
#[tokio::test]
async fn static_headers_go_with_every_attempt_and_are_shown_only_when_revealed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = server.client().await;
    let headers = [("X-Api-Key", "k-123"), ("x-tenant", "from-endpoint")];
    let put = c
        .put_endpoint(pb::Endpoint {
            headers: headers
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..endpoint("gateway", sink.url("/in"))
        })
        .await
        .unwrap();
    let shown = put.endpoint.unwrap();
    assert_eq!(
        shown.headers.get("x-api-key").map(String::as_str),
        Some("…"),
        "{shown:?}"
    );
    let sent = c
        .enqueue(Event::to_endpoint("gateway", b"{}".to_vec()).header("x-tenant", "from-event"))
        .await
        .unwrap();
    let got = sink.wait_for(1).await;
    let h = |name: &str| got[0].headers[name].to_str().unwrap().to_owned();
    assert_eq!(h("x-api-key"), "k-123");
    assert_eq!(h("x-tenant"), "from-endpoint");
    assert_eq!(h("webhook-id"), sent.id);
    delivered(&mut c, &sent.id).await;

    // Stored: after a restart, the next attempt carries them too; revealed on request.
    let server = server.restart().await;
    let mut c = server.client().await;
    let stored = revealed(&mut c, "gateway").await;
    assert_eq!(
        stored.headers.get("x-api-key").map(String::as_str),
        Some("k-123")
    );
    c.enqueue(Event::to_endpoint("gateway", b"{}".to_vec()))
        .await
        .unwrap();
    let got = sink.wait_for(2).await;
    assert_eq!(got[1].headers["x-api-key"], "k-123");

    // Refused, naming the header; the endpoint keeps what it had.
    let too_many = (0..21)
        .map(|i| (format!("x-h{i}"), "v".to_owned()))
        .collect();
    for (headers, named) in [
        (
            vec![("webhook-signature", "v1,forged")],
            "endpoint.headers[\"webhook-signature\"]",
        ),
        (vec![("Host", "evil.example")], "endpoint.headers[\"Host\"]"),
        (
            vec![("hookd-source", "github")],
            "endpoint.headers[\"hookd-source\"]",
        ),
        (vec![("x-ok", "line\r\nx-injected: 1")], "visible ASCII"),
        (vec![("bad name", "v")], "not a header name"),
        (vec![("X-Dup", "a"), ("x-dup", "b")], "given twice"),
    ] {
        let e = c
            .put_endpoint(pb::Endpoint {
                headers: headers
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                ..endpoint("gateway", sink.url("/moved"))
            })
            .await
            .unwrap_err();
        assert_eq!(code(&e), tonic::Code::InvalidArgument, "{e}");
        assert!(message(&e).contains(named), "{named}: {e}");
    }
    let e = c
        .put_endpoint(pb::Endpoint {
            headers: too_many,
            ..endpoint("gateway", sink.url("/moved"))
        })
        .await
        .unwrap_err();
    assert!(
        message(&e).contains("21 headers is over the limit of 20"),
        "{e}"
    );
    let kept = revealed(&mut c, "gateway").await;
    assert!(kept.url.ends_with("/in"), "{kept:?}");
    assert_eq!(kept.headers.len(), 2);
    server.stop().await;
}

/// Standard Webhooks `v1a`: an endpoint with an ed25519 signing key (`whsk_`) signs each
/// delivery with it, beside the `v1` entry of its HMAC secret while the receiver moves
/// over (rotation); the receiver verifies with the public key alone, which hookd shows
/// (secret_summaries) and which is no secret.
#[tokio::test]
async fn an_ed25519_key_signs_v1a_beside_v1_and_its_public_key_is_shown() {
    use ed25519_dalek::Verifier as _;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = server.client().await;
    // The key as `openssl genpkey -algorithm ed25519` would give it: a 32-byte seed.
    let seed = [42u8; 32];
    let whsk = format!(
        "whsk_{}",
        base64::engine::general_purpose::STANDARD.encode(seed)
    );
    let put = c
        .put_endpoint(pb::Endpoint {
            secrets: vec![SECRET.into(), whsk.clone()],
            ..endpoint("signed", sink.url("/in"))
        })
        .await
        .unwrap();
    let summaries = put.endpoint.unwrap().secret_summaries;
    assert_eq!(summaries[0].public_key, "", "an HMAC secret has none");
    assert_eq!(summaries[1].prefix, "whsk_…");
    let public = summaries[1].public_key.clone();
    assert!(public.starts_with("whpk_"), "{public}");
    assert!(
        !public.contains(&whsk[5..]),
        "the public key is not the secret"
    );

    let body = br#"{"step":3}"#.to_vec();
    let sent = c
        .enqueue(Event::to_endpoint("signed", body.clone()))
        .await
        .unwrap();
    let got = sink.wait_for(1).await;
    let h = |name: &str| got[0].headers[name].to_str().unwrap().to_owned();
    let entries: Vec<String> = h("webhook-signature")
        .split(' ')
        .map(str::to_owned)
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(entries[0].starts_with("v1,"), "{entries:?}");
    // Verified as a receiver would: the public key from hookd's answer, nothing else.
    let pk: [u8; 32] = base64::engine::general_purpose::STANDARD
        .decode(public.trim_start_matches("whpk_"))
        .unwrap()
        .try_into()
        .unwrap();
    let key = ed25519_dalek::VerifyingKey::from_bytes(&pk).unwrap();
    let sig: [u8; 64] = base64::engine::general_purpose::STANDARD
        .decode(entries[1].strip_prefix("v1a,").unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let signed = [
        format!("{}.{}.", sent.id, h("webhook-timestamp")).as_bytes(),
        &body[..],
    ]
    .concat();
    key.verify(&signed, &ed25519_dalek::Signature::from_bytes(&sig))
        .unwrap();
    // Another body under the same signature does not verify.
    let forged = [
        format!("{}.{}.", sent.id, h("webhook-timestamp")).as_bytes(),
        b"{}",
    ]
    .concat();
    assert!(
        key.verify(&forged, &ed25519_dalek::Signature::from_bytes(&sig))
            .is_err()
    );

    // A malformed key is refused naming the field; an ingest source cannot verify with one.
    let e = c
        .put_endpoint(pb::Endpoint {
            secrets: vec!["whsk_c2hvcnQ=".into()],
            ..endpoint("signed", sink.url("/in"))
        })
        .await
        .unwrap_err();
    assert!(message(&e).contains("endpoint.secrets[0]"), "{e}");
    let e = c
        .put_source(pb::Source {
            name: "agents".into(),
            scheme: "standard-webhooks".into(),
            secrets: vec![whsk],
            route: Some(pb::source::Route::Queue("q".into())),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        message(&e).contains("secrets[0]")
            && message(&e).contains("verifying needs an HMAC secret"),
        "{e}"
    );
    server.stop().await;
}

/// GetEndpoint with reveal_secrets: the endpoint as stored, secrets and header values in
/// clear.
async fn revealed(c: &mut Client, name: &str) -> pb::Endpoint {
    c.raw()
        .get_endpoint(pb::GetEndpointRequest {
            name: name.into(),
            reveal_secrets: true,
        })
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap()
}

/// A replayed dead letter shows its new attempts: GetMessage counts attempts and the last
/// error from the replay (the history keeps the old ones, numbered from 1 again after it),
/// and the console marks the replay instead of "1 of 2" beside the old error.
#[tokio::test]
async fn a_replayed_message_shows_its_new_attempts_not_the_old_error() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(503)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        max_attempts: 2,
        ..endpoint("e", sink.url("/"))
    })
    .await
    .unwrap();
    let id = c.enqueue(Event::to_endpoint("e", "x")).await.unwrap().id;
    sink.wait_for(1).await;
    server.advance(60_000).await;
    let dead = eventually(
        "the dead letter",
        async || c.get_message(&id).await.unwrap(),
        |m| m.state == pb::MessageState::DeadLetter as i32,
    )
    .await;
    assert_eq!((dead.attempts, dead.replays), (2, 0));
    assert!(dead.last_error.contains("503"), "{dead:?}");

    sink.set_default(Reply::Status(204));
    assert_eq!(c.replay([id.clone()]).await.unwrap(), 1);
    let done = eventually(
        "delivered after the replay",
        async || c.get_message(&id).await.unwrap(),
        |m| m.state == pb::MessageState::Delivered as i32,
    )
    .await;
    assert_eq!(
        (done.attempts, done.replays, done.attempts_before_replay),
        (1, 1, 2),
        "{done:?}"
    );
    assert_eq!(
        done.last_error, "",
        "the old error is the dead letter's, not this one's"
    );
    let numbers: Vec<(u32, &str)> = done
        .history
        .iter()
        .map(|a| (a.number, a.outcome.as_str()))
        .collect();
    assert_eq!(numbers[2], (0, "replayed"), "{numbers:?}");
    assert_eq!(numbers[3].0, 1, "{numbers:?}");
    let page = server.http_get(&format!("/ui/messages/{id}")).await;
    assert!(
        page.contains("since its replay (2 attempts before)"),
        "{page}"
    );
    assert!(
        page.contains("replayed from the dead letters: the attempts below are new"),
        "{page}"
    );
    assert!(page.contains("none since the replay"), "{page}");
    server.stop().await;
}
