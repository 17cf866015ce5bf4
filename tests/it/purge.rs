//! PurgeMessages (issue #53, 4) against a real hookd and a real sink: a customer's data
//! deleted by a search of a declared key (a GDPR request), over gRPC, HTTP/JSON and the
//! CLI. What is purged is gone from every API and its bytes from every file of the data
//! directory, delivered and dead alike, with every delivery of a published event; what
//! is still on its way is left and counted; everything else stays as it was.

use std::path::Path;

use hookd_client::{Client, Event, pb};
use serde_json::json;

use crate::ctl::hookd;
use crate::harness::{TestServer, code, eventually, test_config};
use crate::sink::{Reply, Sink};
use hookd_core::clock::{Clock, ManualClock, SystemClock};

/// Files under `dir` (recursively) that hold `needle`.
fn holding(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path)
                && bytes.windows(needle.len()).any(|w| w == needle)
            {
                out.push(path.display().to_string());
            }
        }
    }
    out
}

fn customer(id: &str) -> pb::SearchMessagesRequest {
    pb::SearchMessagesRequest {
        payload: [("/customer/id".to_owned(), id.to_owned())].into(),
        ..Default::default()
    }
}

async fn found(c: &mut Client, r: pb::SearchMessagesRequest) -> usize {
    c.raw()
        .search_messages(r)
        .await
        .unwrap()
        .into_inner()
        .messages
        .len()
}

#[tokio::test]
async fn a_customers_data_is_purged_from_every_api_and_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.breaker.failure_threshold = 1_000;
    config.event_types = vec![hookd::catalog::EventTypeSpec {
        name: "order.paid".into(),
        description: String::new(),
        json_schema: None,
        json_schema_file: None,
        search_keys: vec!["/customer/id".into()],
    }];
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let shop = Sink::start(Reply::Status(200)).await;
    let acme = Sink::start(Reply::Status(422)).await;
    let mut c = server.client().await;
    for (name, sink) in [("shop", &shop), ("acme", &acme)] {
        c.put_endpoint(pb::Endpoint {
            name: name.into(),
            url: sink.url("/hook"),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    // A publish fans out to shop and to a queue nobody reads: one payload, two deliveries.
    c.put_subscription(pb::Subscription {
        name: "all-orders".into(),
        destination: Some(pb::subscription::Destination::Queue("ledger".into())),
        event_types: vec!["order.paid".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    c.put_subscription(pb::Subscription {
        name: "shop-orders".into(),
        destination: Some(pb::subscription::Destination::Endpoint("shop".into())),
        event_types: vec!["order.paid".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let order = |who: &str, n: u32| {
        json!({"customer": {"id": who, "email": format!("{who}-secret-{n}@example.com")}, "n": n})
            .to_string()
    };
    // c_42's: two delivered to shop, one refused by acme (dead), one published (delivered
    // to shop, pending in the queue); c_7's: the same, to keep.
    let mut c42 = Vec::new();
    for who in ["c_42", "c_7"] {
        let mut ids = Vec::new();
        for n in 0..2 {
            let e = Event::to_endpoint("shop", order(who, n)).event_type("order.paid");
            ids.push(c.enqueue(e).await.unwrap().id);
        }
        let e = Event::to_endpoint("acme", order(who, 2))
            .event_type("order.paid")
            .max_attempts(1);
        ids.push(c.enqueue(e).await.unwrap().id);
        let e = Event::to_topic("order.paid", order(who, 3).into_bytes());
        ids.push(c.enqueue(e).await.unwrap().id);
        if who == "c_42" {
            c42 = ids;
        }
    }
    shop.wait_for(6).await;
    acme.wait_for(2).await;
    let mut c2 = c.clone();
    eventually(
        "c_42's 5 messages found, 1 of them pending",
        async || found(&mut c2, customer("c_42")).await,
        |n| *n == 5,
    )
    .await;
    let mut c2 = c.clone();
    eventually(
        "3 delivered and 1 dead",
        async || {
            let mut r = customer("c_42");
            r.states = vec![
                pb::MessageState::Delivered as i32,
                pb::MessageState::DeadLetter as i32,
            ];
            found(&mut c2, r).await
        },
        |n| *n == 4,
    )
    .await;
    assert!(
        !holding(dir.path(), b"c_42-secret-").is_empty(),
        "before: on disk"
    );

    // The dry run over HTTP/JSON: counts, nothing changes.
    let answer = crate::rest::post(
        server.http,
        "/v1/messages/purge",
        json!({"search": {"payload": {"/customer/id": "c_42"}}, "dryRun": true}),
    )
    .await;
    assert_eq!(answer.status(), 200, "{}", answer.json());
    let v = answer.json();
    assert_eq!(
        (v["matched"].as_u64(), v["purged"].as_u64()),
        (Some(5), Some(4)),
        "{v}"
    );
    assert_eq!(
        (v["dead"].as_u64(), v["live"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert_eq!(found(&mut c, customer("c_42")).await, 5);

    // The CLI without --yes changes nothing either; with it, purges.
    let run = hookd(
        &server.grpc,
        &["purge", "--payload", "/customer/id=c_42"],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains("would purge 4 message(s) (1 dead letters, 3 delivered)"),
        "{run:?}"
    );
    assert!(run.stdout.contains("add --yes"), "{run:?}");
    assert_eq!(found(&mut c, customer("c_42")).await, 5);
    let run = hookd(
        &server.grpc,
        &["--json", "purge", "--payload", "/customer/id=c_42", "--yes"],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["purged"], 4, "{v}");
    assert_eq!(v["live"], 1, "{v}");
    assert_eq!(v["overwritten"], true, "{v}");

    // Gone from every API: search, GetMessage, the dead letters.
    let left = c
        .raw()
        .search_messages(customer("c_42"))
        .await
        .unwrap()
        .into_inner()
        .messages;
    assert_eq!(left.len(), 1, "only the pending delivery is left");
    assert_eq!(left[0].state, pb::MessageState::Pending as i32);
    // Its payload, shared with the purged delivery of the same publish, is intact.
    let pending = c.get_message(&left[0].id).await.unwrap();
    assert!(
        String::from_utf8_lossy(&pending.payload).contains("c_42-secret-3@"),
        "{pending:?}"
    );
    for id in &c42[..3] {
        let got = c.get_message(id).await.map(|_| ()).map_err(|e| code(&e));
        assert_eq!(got, Err(tonic::Code::NotFound), "{id}");
    }
    let dead = c
        .raw()
        .list_dead_letters(pb::ListDeadLettersRequest {
            destination: Some(pb::Destination {
                kind: Some(pb::destination::Kind::Endpoint("acme".into())),
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(dead.dead_letters.len(), 1, "c_7's dead letter only");
    // c_7's are as they were, payloads readable.
    assert_eq!(found(&mut c, customer("c_7")).await, 5);
    let stats = c.stats().await.unwrap();
    let storage = stats.storage.unwrap();
    assert!(storage.purged_records >= 3, "{storage:?}");
    assert_eq!(storage.purge_pending_records, 0);
    let run = hookd(&server.grpc, &["stats"], None).await;
    assert!(run.stdout.contains("purges: "), "{run:?}");

    // The bytes: the delivered and dead ones' are in no file. The pending delivery shares
    // its payload with the published event's purged one: left until it completes.
    let on_disk = holding(dir.path(), b"c_42-secret-");
    let pending_payload = "c_42-secret-3";
    assert!(
        on_disk.is_empty() || holding(dir.path(), pending_payload.as_bytes()) == on_disk,
        "{on_disk:?}"
    );
    for n in 0..3 {
        let needle = format!("c_42-secret-{n}@");
        assert_eq!(
            holding(dir.path(), needle.as_bytes()),
            Vec::<String>::new(),
            "{n}"
        );
    }
    assert!(
        !holding(dir.path(), b"c_7-secret-").is_empty(),
        "c_7's are kept"
    );

    // The refusals, each naming its field.
    let refused = c
        .raw()
        .purge_messages(pb::PurgeMessagesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("search:"), "{refused:?}");
    let refused = c
        .raw()
        .purge_messages(pb::PurgeMessagesRequest {
            ids: vec!["nope".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(refused.message().starts_with("ids[0]:"), "{refused:?}");
    let refused = c
        .raw()
        .purge_messages(pb::PurgeMessagesRequest {
            search: Some(customer("c_7")),
            limit: 100_001,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(refused.message().starts_with("limit:"), "{refused:?}");
}
