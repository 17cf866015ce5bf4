//! Retention per tenant and per destination (issue #53, 4) against a real hookd: set by
//! UpdateTenant, PutEndpoint and PutQueue (and the CLI), checked field by field, shown in
//! Stats and `hookd stats`, and kept: on the injected clock a queue's short retention
//! forgets its delivered messages while the tenant's longer one keeps the rest past the
//! server's.

use hookd_client::{Event, pb};

use crate::ctl::hookd;
use crate::harness::{TestServer, code, eventually, test_config};
use crate::sink::{Reply, Sink};
use hookd_core::clock::{Clock, ManualClock, SystemClock};

const HOUR: u64 = 3_600_000;

#[tokio::test]
async fn retention_is_set_per_tenant_and_destination_shown_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        test_config(dir.path()),
        ManualClock::new(SystemClock.now_ms()),
    )
    .await;
    let sink = Sink::start(Reply::Status(200)).await;
    let mut c = server.client().await;
    // The tenant keeps its history two days (the server: one); its `brief` queue five
    // minutes; its `shop` endpoint sets none.
    let run = hookd(
        &server.grpc,
        &["tenants", "update", "default", "--retention", "2d"],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    c.put_endpoint(pb::Endpoint {
        name: "shop".into(),
        url: sink.url("/hook"),
        ..Default::default()
    })
    .await
    .unwrap();
    let run = hookd(
        &server.grpc,
        &["queues", "put", "brief", "--retention", "5m"],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    // Shown: Stats and `hookd stats`.
    let stats = c.stats().await.unwrap();
    let r = stats.retention.unwrap();
    assert_eq!(r.retention_secs, 2 * 86_400, "{r:?}");
    assert_eq!(r.server_completed_retention_secs, 86_400, "{r:?}");
    assert_eq!(r.destinations.len(), 1, "{r:?}");
    assert_eq!(r.destinations[0].destination, "queue:brief");
    assert_eq!(r.destinations[0].retention_secs, 300);
    let run = hookd(&server.grpc, &["stats"], None).await;
    assert!(
        run.stdout
            .contains("retention: completed messages kept 2.0d"),
        "{run:?}"
    );
    assert!(run.stdout.contains("queue:brief 5m"), "{run:?}");

    // Refused, naming the field.
    for (bad, field) in [
        (5, "endpoint.retention_secs"),
        (401 * 86_400, "endpoint.retention_secs"),
    ] {
        let e = c
            .put_endpoint(pb::Endpoint {
                name: "shop".into(),
                url: sink.url("/hook"),
                retention_secs: bad,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(code(&e), tonic::Code::InvalidArgument);
        assert!(e.to_string().contains(field), "{e}");
    }

    // Kept: one delivered to shop, one acked from the brief queue.
    let delivered = c
        .enqueue(Event::to_endpoint("shop", "{\"n\": 1}"))
        .await
        .unwrap()
        .id;
    sink.wait_for(1).await;
    let brief = c.enqueue(Event::to_queue("brief", "{}")).await.unwrap().id;
    let leased = c
        .receive("brief", 1, std::time::Duration::from_secs(30), None)
        .await
        .unwrap();
    c.ack([leased[0].lease_id.clone()]).await.unwrap();
    let mut c2 = c.clone();
    eventually(
        "both completed",
        async || {
            let a = c2.get_message(&delivered).await.map(|m| m.state);
            let b = c2.get_message(&brief).await.map(|m| m.state);
            (a.ok(), b.ok())
        },
        |s| {
            s == &(
                Some(pb::MessageState::Delivered as i32),
                Some(pb::MessageState::Delivered as i32),
            )
        },
    )
    .await;
    // Six minutes on, a minute at a time: the brief queue's is forgotten.
    for _ in 0..6 {
        server.advance(60_000).await;
    }
    let mut c2 = c.clone();
    let _ = eventually(
        "the brief queue's message forgotten",
        async || {
            server.advance(1_000).await;
            c2.get_message(&brief)
                .await
                .map(|_| ())
                .map_err(|e| code(&e))
        },
        |r| *r == Err(tonic::Code::NotFound),
    )
    .await;
    assert!(c.get_message(&delivered).await.is_ok());
    // A day and a half on (past the server's day): the tenant's two days keep it, with
    // its payload.
    for _ in 0..36 {
        server.advance(HOUR).await;
    }
    let kept = c.get_message(&delivered).await.unwrap();
    assert_eq!(kept.payload, b"{\"n\": 1}".to_vec(), "{kept:?}");
    // Past two days: gone.
    for _ in 0..13 {
        server.advance(HOUR).await;
    }
    let mut c2 = c.clone();
    let _ = eventually(
        "the delivered message forgotten at the tenant's two days",
        async || {
            server.advance(60_000).await;
            c2.get_message(&delivered)
                .await
                .map(|_| ())
                .map_err(|e| code(&e))
        },
        |r| *r == Err(tonic::Code::NotFound),
    )
    .await;
}
