//! Backpressure end to end: the watermarks' throttle hint and RESOURCE_EXHAUSTED with
//! `google.rpc.RetryInfo`, the same marks as 429 + Retry-After on the ingest listener,
//! Stats and /metrics showing each destination's level, and the disk reserve.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hookd_client::Event;
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_core::source::{SchemeName, SourceSpec};
use hookd_proto::v1 as pb;
use tonic::Code;
use tonic_types::StatusExt;

use crate::harness::{TestServer, code, message, test_config};
use crate::ingest::{SW_KEY, now_s, post, sw_headers, sw_secret};

fn retry_info(e: &hookd_client::Error) -> Option<Duration> {
    match e {
        hookd_client::Error::Status(s) => s.get_details_retry_info().and_then(|r| r.retry_delay),
        _ => None,
    }
}

#[tokio::test]
async fn watermarks_hint_then_refuse_with_retry_info_on_grpc_and_429_on_ingest() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.backpressure.destination_max_messages = 10;
    config.backpressure.retry_after_ms = 1_500;
    config.sources = vec![SourceSpec {
        secrets: vec![sw_secret(SW_KEY)],
        ..SourceSpec::new("hooks", SchemeName::StandardWebhooks, "q")
    }];
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    let mut hints = Vec::new();
    for i in 0..10 {
        let r = c
            .enqueue(Event::to_queue("q", vec![b'x'; 100]).idempotency_key(format!("k{i}")))
            .await
            .unwrap();
        hints.push(r.throttle_ms);
    }
    assert_eq!(&hints[..7], &[0; 7], "{hints:?}");
    assert!(hints[7] >= 100 && hints[9] == 1_000, "{hints:?}");

    // At the hard mark: RESOURCE_EXHAUSTED naming the mark, RetryInfo in the details.
    let err = c
        .enqueue(Event::to_queue("q", b"over".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::ResourceExhausted, "{err}");
    assert!(
        message(&err).contains("backpressure.destination_max_messages"),
        "{err}"
    );
    assert_eq!(retry_info(&err), Some(Duration::from_millis(1_500)));
    // A resend of a stored event is still answered as its duplicate.
    let again = c
        .enqueue(Event::to_queue("q", vec![b'x'; 100]).idempotency_key("k3"))
        .await
        .unwrap();
    assert!(again.duplicate);
    // A batch whose every event is refused fails as a whole, with RetryInfo...
    let err = c
        .enqueue_batch((0..3).map(|_| Event::to_queue("q", b"b".to_vec())))
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::ResourceExhausted, "{err}");
    assert_eq!(retry_info(&err), Some(Duration::from_millis(1_500)));
    // ...one with events for other destinations answers per event.
    let results = c
        .enqueue_batch([
            Event::to_queue("q", b"b".to_vec()),
            Event::to_queue("other", b"b".to_vec()),
        ])
        .await
        .unwrap();
    match &results[0].result {
        Some(pb::enqueue_result::Result::Error(e)) => {
            assert_eq!(
                (e.code, e.retry_after_ms),
                (Code::ResourceExhausted as i32, 1_500)
            );
        }
        other => panic!("not refused: {other:?}"),
    }
    assert!(matches!(
        results[1].result,
        Some(pb::enqueue_result::Result::Ok(_))
    ));

    // The same mark on the ingest listener: 429 with Retry-After, nothing stored.
    let body = br#"{"type":"t"}"#;
    let a = post(
        server.ingest,
        "hooks",
        &sw_headers(SW_KEY, "over-1", now_s(), body),
        body,
    )
    .await;
    assert_eq!(a.status, 429, "{a:?}");
    assert_eq!(a.header("retry-after").as_deref(), Some("2"));

    // Stats and /metrics show the level.
    let by = c.stats_by_destination().await.unwrap();
    let q = &by["queue:q"];
    assert_eq!(q.backpressure, pb::BackpressureLevel::Hard as i32);
    assert!(q.live_bytes >= 1_000, "{q:?}");
    assert_eq!(
        by["queue:other"].backpressure,
        pb::BackpressureLevel::Ok as i32
    );
    let metrics = server.http_get("/metrics").await;
    for line in [
        "hookd_backpressure_level{destination=\"queue:q\"} 2",
        "hookd_backpressure_level{destination=\"queue:other\"} 0",
        "hookd_enqueue_refused_total{reason=\"destination_messages\"} 6",
        "hookd_enqueue_throttled_total 3",
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }

    // Consuming makes room: accepted again, without a hint once below the soft mark.
    let got = c
        .receive("q", 5, Duration::from_secs(30), None)
        .await
        .unwrap();
    c.ack(got.iter().map(|m| m.lease_id.clone())).await.unwrap();
    let r = c
        .enqueue(Event::to_queue("q", b"room".to_vec()))
        .await
        .unwrap();
    assert_eq!(r.throttle_ms, 0);
    server.stop().await;
}

#[tokio::test]
async fn inside_the_disk_reserve_new_events_are_refused_and_accepted_again_once_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let available = Arc::new(AtomicU64::new(10 << 30));
    let probe: hookd_storage::disk::Probe = {
        let available = available.clone();
        Arc::new(move || {
            Ok(hookd_storage::disk::Space {
                available: available.load(Ordering::Relaxed),
                total: 20 << 30,
                fsize_limit: None,
            })
        })
    };
    let mut config = test_config(dir.path());
    config.storage.reserve_mb = 512;
    config.storage.reserve_percent = 0.0;
    config.storage.probe_interval_ms = 10;
    let server = TestServer::start_hooked(
        config,
        ManualClock::new(SystemClock.now_ms()),
        None,
        Some(probe),
    )
    .await;
    let mut c = server.client().await;
    c.enqueue(Event::to_queue("d", b"kept".to_vec()))
        .await
        .unwrap();

    available.store(100 << 20, Ordering::Relaxed);
    let err = until(&mut c, |r| r.is_err()).await.unwrap_err();
    assert_eq!(code(&err), Code::ResourceExhausted, "{err}");
    assert!(message(&err).contains("reserve"), "{err}");
    assert_eq!(retry_info(&err), Some(Duration::from_secs(5)));
    let metrics = server.http_get("/metrics").await;
    assert!(
        metrics.contains("hookd_disk_available_bytes 104857600"),
        "{metrics}"
    );
    assert!(
        metrics.contains("hookd_disk_reserve_bytes 536870912"),
        "{metrics}"
    );
    // What frees space still works.
    let got = c
        .receive("d", 10, Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(got[0].payload, b"kept");
    assert_eq!(c.ack([got[0].lease_id.clone()]).await.unwrap(), 1);
    assert!(server.healthz().await.starts_with("HTTP/1.1 200"));

    available.store(10 << 30, Ordering::Relaxed);
    until(&mut c, |r| r.is_ok()).await.unwrap();
    let stats = c.stats().await.unwrap().storage.unwrap();
    assert_eq!(stats.disk_reserve_bytes, 512 << 20);
    server.stop().await;
}

/// Enqueues until `done` holds of the answer (the probe runs every 10 ms), for at most 15 s.
async fn until(
    c: &mut hookd_client::Client,
    done: impl Fn(&Result<pb::EnqueueResponse, hookd_client::Error>) -> bool,
) -> Result<pb::EnqueueResponse, hookd_client::Error> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let r = c.enqueue(Event::to_queue("d", b"probe".to_vec())).await;
        if done(&r) || tokio::time::Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
