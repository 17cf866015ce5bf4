//! The dead-letter workflow over gRPC against a real sink: analyze, fix, replay (paced, by
//! filter, dry run first), purge; and pausing an endpoint.

use hookd_client::{Client, Event, pb};

use hookd_core::clock::{Clock, ManualClock, SystemClock};

use crate::harness::{TestServer, eventually, test_config};
use crate::sink::{Reply, Sink};

fn endpoint_dest(name: &str) -> pb::Destination {
    pb::Destination {
        kind: Some(pb::destination::Kind::Endpoint(name.into())),
    }
}

async fn dead_count(c: &mut Client) -> usize {
    c.list_dead_letters(None, 1000, "")
        .await
        .unwrap()
        .dead_letters
        .len()
}

/// `n` messages to endpoint `name`, each dead-lettered by one failing attempt.
async fn dead_letters(c: &mut Client, name: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            c.enqueue(Event::to_endpoint(name, format!("{i}")).max_attempts(1))
                .await
                .unwrap()
                .id,
        );
    }
    ids
}

#[tokio::test]
async fn analyze_names_the_outage_then_a_filtered_paced_replay_delivers_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    // Every attempt reaches the sink (the breaker would hold the 11th back).
    config.delivery.breaker.failure_threshold = 1_000;
    config.delivery.breaker.slow_failure_threshold = 1_000;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let sink = Sink::start(Reply::Full(503, vec![], b"maintenance".to_vec())).await;
    let mut c = server.client().await;
    for name in ["shop", "crm"] {
        c.put_endpoint(pb::Endpoint {
            name: name.into(),
            url: sink.url(&format!("/{name}")),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    dead_letters(&mut c, "shop", 12).await;
    sink.wait_for(12).await;
    let mut c2 = c.clone();
    eventually(
        "12 dead letters",
        async || dead_count(&mut c2).await,
        |n| *n == 12,
    )
    .await;
    sink.set_default(Reply::Status(401));
    dead_letters(&mut c, "crm", 3).await;
    eventually(
        "15 dead letters",
        async || dead_count(&mut c2).await,
        |n| *n == 15,
    )
    .await;

    let analysis = c
        .raw()
        .analyze_dead_letters(pb::AnalyzeDeadLettersRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(analysis.scanned, 15);
    assert!(!analysis.truncated);
    let shop = &analysis.destinations[0];
    assert_eq!(shop.destination, "endpoint:shop");
    assert_eq!((shop.count, shop.most_common_status), (12, 503));
    assert_eq!(shop.most_common_error, "HTTP 503");
    assert_eq!(shop.average_attempts, 1.0);
    let kinds: Vec<_> = shop.patterns.iter().map(|p| p.kind.as_str()).collect();
    assert_eq!(kinds, ["cluster"]);
    assert!(!shop.patterns[0].suggestion.is_empty());
    let crm = &analysis.destinations[1];
    assert_eq!(crm.patterns[0].kind, "credentials", "{crm:?}");

    // Dry run first: what a replay of the 503s would take, and nothing moves.
    let only_503 = pb::DeadLetterFilter {
        http_status: 503,
        ..Default::default()
    };
    let dry = c
        .raw()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            filter: Some(only_503.clone()),
            dry_run: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((dry.matched, dry.replayed), (12, 0));
    assert_eq!(dead_count(&mut c).await, 15);

    // The endpoint is fixed; the replay is paced at 10/s on hookd's (manual) clock.
    sink.set_default(Reply::Status(204));
    let before = sink.count();
    let start = server.clock_now();
    let done = c
        .raw()
        .replay_dead_letters(pb::ReplayDeadLettersRequest {
            filter: Some(only_503),
            max_per_s: 10.0,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((done.matched, done.replayed), (12, 12));
    assert_eq!(done.last_due_unix_ms, start + 1_100);
    sink.wait_for(before + 1).await;
    sink.stays_at(&mut c, before + 1).await;
    server.advance(1_100).await;
    sink.wait_for(before + 12).await;
    assert_eq!(dead_count(&mut c).await, 3, "the 401s stay");
    server.stop().await;
}

#[tokio::test]
async fn purge_takes_a_filter_and_an_explicit_all() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Full(400, vec![], b"bad schema".to_vec())).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "e".into(),
        url: sink.url("/"),
        ..Default::default()
    })
    .await
    .unwrap();
    dead_letters(&mut c, "e", 4).await;
    let mut c2 = c.clone();
    eventually(
        "4 dead letters",
        async || dead_count(&mut c2).await,
        |n| *n == 4,
    )
    .await;

    let e = c
        .raw()
        .purge_dead_letters(pb::PurgeDeadLettersRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().starts_with("filter: required"),
        "{}",
        e.message()
    );
    let e = c
        .raw()
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            filter: Some(pb::DeadLetterFilter::default()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(e.message().contains("all = true"), "{}", e.message());
    let e = c
        .raw()
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            filter: Some(pb::DeadLetterFilter {
                dead_after_unix_ms: 10,
                dead_before_unix_ms: 5,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        e.message().starts_with("filter.dead_before_unix_ms"),
        "{}",
        e.message()
    );

    let by_error = pb::DeadLetterFilter {
        destination: Some(endpoint_dest("e")),
        error_contains: "BAD SCHEMA".into(),
        ..Default::default()
    };
    let dry = c
        .raw()
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            filter: Some(by_error.clone()),
            dry_run: true,
            limit: 3,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((dry.matched, dry.purged), (3, 0));
    let done = c
        .raw()
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            filter: Some(by_error),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((done.matched, done.purged), (4, 4));
    assert_eq!(dead_count(&mut c).await, 0);
    server.stop().await;
}

#[tokio::test]
async fn a_paused_endpoint_holds_its_messages_until_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "e".into(),
        url: sink.url("/"),
        ..Default::default()
    })
    .await
    .unwrap();
    let e = c
        .raw()
        .pause_endpoint(pb::PauseEndpointRequest {
            name: "missing".into(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    let paused = c
        .raw()
        .pause_endpoint(pb::PauseEndpointRequest {
            name: "e".into(),
            reason: "receiver deploy".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap();
    assert!(paused.paused);
    assert_eq!(paused.paused_reason, "receiver deploy");
    c.enqueue(Event::to_endpoint("e", "held")).await.unwrap();
    sink.stays_at(&mut c, 0).await;
    // It survives a restart.
    let server = server.restart().await;
    let mut c = server.client().await;
    sink.stays_at(&mut c, 0).await;
    let resumed = c
        .raw()
        .resume_endpoint(pb::ResumeEndpointRequest { name: "e".into() })
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap();
    assert!(!resumed.paused);
    sink.wait_for(1).await;
    server.stop().await;
}
