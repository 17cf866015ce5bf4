//! When the disk fails, hookd never answers success: the commit's callers get UNAVAILABLE,
//! health turns NOT_SERVING, everything stops in order, and hookd reopens its store and
//! serves again once the disk is back (or exits non-zero, when configured so), with
//! everything acknowledged before the failure.

use std::time::Duration;

use hookd_client::Event;
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_storage::store::faults::Faults;
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

use crate::harness::{TestServer, code, test_config};

#[tokio::test]
async fn failed_fsync_is_unavailable_never_success_and_hookd_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::default();
    let clock = ManualClock::new(SystemClock.now_ms());
    if std::env::var_os("HOOKD_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_env_filter("info").try_init();
    }
    let mut config = test_config(dir.path());
    config.storage.recover_interval_ms = 50;
    let server = TestServer::start_full(config, clock.clone(), Some(faults.clone())).await;
    let mut c = server.client().await;
    let kept = c
        .enqueue(Event::to_queue("f", b"before".to_vec()))
        .await
        .unwrap();

    faults.fail_syncs(true);
    let during = || Event::to_queue("f", b"during".to_vec()).idempotency_key("during-1");
    let err = c.enqueue(during()).await.unwrap_err();
    assert_eq!(code(&err), Code::Unavailable, "{err}");
    let health = server.healthz().await;
    assert!(
        health.starts_with("HTTP/1.1 503"),
        "{health}\nafter error: {err}"
    );
    // Issue #26, 6: hookd reopens its store by itself; it does not ask for a restart.
    assert!(!health.contains("restart"), "{health}");

    // gRPC health is pushed when the engine fails: both the service and the whole server
    // (`""`, what grpc_health_probe and Kubernetes probes ask) report NOT_SERVING. Watch
    // streams the change; the bound only keeps a broken build from hanging.
    let channel = tonic::transport::Endpoint::from_shared(server.grpc.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for service in ["", "hookd.v1.Hookd"] {
        let mut updates = health
            .watch(tonic_health::pb::HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner();
        let not_serving = tokio::time::timeout(Duration::from_secs(10), async {
            while let Some(update) = updates.message().await.unwrap() {
                if update.status == ServingStatus::NotServing as i32 {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(
            not_serving,
            Ok(true),
            "health of {service:?} still SERVING after a storage failure"
        );
    }

    // The disk comes back: hookd stops everything in order, reopens the store (replaying
    // and checking the log) and serves again on the same addresses, with no restart.
    faults.fail_syncs(false);
    let after = until_served(&server).await;
    assert!(server.healthz().await.starts_with("HTTP/1.1 200"));
    let mut c = server.client().await;
    // UNAVAILABLE means the outcome is unknown (the record may have reached the disk
    // although its fsync failed); the client's retry with the same key makes it exactly
    // once either way.
    c.enqueue(during()).await.unwrap();
    let got = c
        .receive("f", 10, Duration::from_secs(5), None)
        .await
        .unwrap();
    let payloads: Vec<_> = got.iter().map(|m| m.payload.clone()).collect();
    assert!(
        got.iter().any(|m| m.id == kept.id),
        "acknowledged event lost: {payloads:?}"
    );
    assert!(got.iter().any(|m| m.id == after), "{payloads:?}");
    let stored = payloads
        .iter()
        .filter(|p| p.as_slice() == b"during")
        .count();
    assert_eq!(stored, 1, "{payloads:?}");
    // And what it holds survives a restart as usual.
    let server = server.restart().await;
    let mut c = server.client().await;
    let stats = c.stats().await.unwrap();
    assert_eq!(stats.total.unwrap().in_flight, 3);
    server.stop().await;
}

/// Enqueues until hookd answers success again (it recovers by itself); the event's id.
async fn until_served(server: &TestServer) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut c) = hookd_client::Client::connect(server.grpc.clone()).await
            && let Ok(r) = c.enqueue(Event::to_queue("f", b"after".to_vec())).await
        {
            return r.id;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "hookd did not recover within 30 s of the disk coming back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn with_on_failure_exit_a_storage_failure_stops_hookd_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::default();
    let mut config = test_config(dir.path());
    config.storage.on_failure = hookd::config::OnStorageFailure::Exit;
    let server = TestServer::start_full(
        config,
        ManualClock::new(SystemClock.now_ms()),
        Some(faults.clone()),
    )
    .await;
    let mut c = server.client().await;
    c.enqueue(Event::to_queue("f", b"kept".to_vec()))
        .await
        .unwrap();
    faults.fail_syncs(true);
    let err = c
        .enqueue(Event::to_queue("f", b"during".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::Unavailable, "{err}");
    let ended = tokio::time::timeout(Duration::from_secs(30), server.finished())
        .await
        .expect("hookd did not stop after the storage failure");
    let err = ended.expect_err("stopped without an error");
    assert!(err.to_string().starts_with("storage failed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_disk_bounds_the_queue_with_resource_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::default();
    let mut config = test_config(dir.path());
    // Room for two 1.5 KB events waiting for the disk.
    config.max_queued_write_bytes = 4_096;
    let server = TestServer::start_full(
        config,
        ManualClock::new(SystemClock.now_ms()),
        Some(faults.clone()),
    )
    .await;
    faults.delay_syncs(300);

    // Ten at once against a disk that takes 300 ms per commit: the engine applies at most
    // one round while the others wait, so at most a few fit in the queue.
    let mut calls = Vec::new();
    for i in 0..10u8 {
        let mut c = server.client().await;
        calls.push(tokio::spawn(async move {
            c.enqueue(Event::to_queue("bp", vec![i; 1_500]).idempotency_key(format!("bp-{i}")))
                .await
        }));
    }
    let (mut stored, mut refused) = (Vec::new(), Vec::new());
    for (i, call) in calls.into_iter().enumerate() {
        match call.await.unwrap() {
            Ok(r) => stored.push(r.id),
            Err(e) => {
                assert_eq!(code(&e), Code::ResourceExhausted, "{e}");
                assert!(crate::harness::message(&e).contains("at capacity"), "{e}");
                refused.push(i as u8);
            }
        }
    }
    assert!(
        !stored.is_empty() && !refused.is_empty(),
        "stored {} refused {}",
        stored.len(),
        refused.len()
    );
    let metrics = server.http_get("/metrics").await;
    let line = format!(
        "hookd_enqueue_refused_total{{reason=\"write_queue\"}} {}",
        refused.len()
    );
    assert!(metrics.contains(&line), "no {line:?} in\n{metrics}");

    // Once the disk keeps up again, the refused ones go through on retry; nothing was lost
    // or half-stored.
    faults.delay_syncs(0);
    let mut c = server.client().await;
    for i in refused {
        c.enqueue(Event::to_queue("bp", vec![i; 1_500]).idempotency_key(format!("bp-{i}")))
            .await
            .unwrap();
    }
    let stats = c.stats().await.unwrap();
    assert_eq!(stats.total.unwrap().pending, 10);
    let storage = stats.storage.unwrap();
    assert_eq!(storage.queued_write_bytes, 0);
    assert_eq!(storage.live_messages, 10);
    assert!(storage.commit_latency_last_hour.unwrap().count >= 2);
    server.stop().await;
}

/// A pushed event leaves hookd only once it is durable: an enqueue whose commit fails is
/// never POSTed (the client was told UNAVAILABLE; delivering it anyway would be a phantom).
#[tokio::test]
async fn an_event_whose_commit_failed_is_never_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Faults::default();
    let clock = ManualClock::new(SystemClock.now_ms());
    let server =
        TestServer::start_full(test_config(dir.path()), clock.clone(), Some(faults.clone())).await;
    let sink = crate::sink::Sink::start(crate::sink::Reply::Status(200)).await;
    let mut c = server.client().await;
    c.put_endpoint(hookd_client::pb::Endpoint {
        name: "e".into(),
        url: sink.url("/"),
        ..Default::default()
    })
    .await
    .unwrap();
    let first = c
        .enqueue(Event::to_endpoint("e", b"durable".to_vec()))
        .await
        .unwrap();
    sink.wait_for(1).await;
    // Its outcome committed too, so the next commit to fail is the enqueue's own.
    crate::harness::delivered(&mut c, &first.id).await;

    faults.fail_syncs(true);
    let err = c
        .enqueue(Event::to_endpoint("e", b"lost".to_vec()))
        .await
        .unwrap_err();
    assert_eq!(code(&err), Code::Unavailable, "{err}");
    // A graceful stop waits for every attempt the dispatcher holds; after a storage
    // failure the engine hands out none. (The engine unit test
    // `a_failed_commit_answers_unavailable_and_sends_nothing` checks the same exactly, on
    // the channel to the dispatcher.)
    server.stop().await;
    assert_eq!(sink.count(), 1);
    assert_eq!(&sink.received()[0].body[..], b"durable");
}
