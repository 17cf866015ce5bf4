//! Subscriptions and publish against a real hookd: an event published to a topic reaches
//! every subscribed endpoint (a real HTTP sink) and pull queue once, sharing its event id;
//! filters in Outpost's syntax choose; an invalid filter is refused naming its place; the
//! idempotency key dedups the whole fan-out; subscriptions survive a restart; the HTTP/JSON
//! API takes a filter pasted as JSON.

use hookd_client::{Event, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use serde_json::json;

use crate::harness::{TestServer, code, delivered, eventually, message, metric, test_config};
use crate::sink::{Reply, Sink};

fn subscription(name: &str, to: pb::subscription::Destination, types: &[&str]) -> pb::Subscription {
    pb::Subscription {
        name: name.into(),
        destination: Some(to),
        event_types: types.iter().map(|t| (*t).to_owned()).collect(),
        ..Default::default()
    }
}

fn endpoint(name: &str) -> pb::subscription::Destination {
    pb::subscription::Destination::Endpoint(name.into())
}

fn queue(name: &str) -> pb::subscription::Destination {
    pb::subscription::Destination::Queue(name.into())
}

/// `v` with every number a double.
fn as_doubles(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Number(n) => json!(n.as_f64()),
        Value::Array(a) => Value::Array(a.iter().map(as_doubles).collect()),
        Value::Object(o) => {
            Value::Object(o.iter().map(|(k, v)| (k.clone(), as_doubles(v))).collect())
        }
        other => other.clone(),
    }
}

fn filter(value: serde_json::Value) -> Option<prost_types::Struct> {
    hookd_proto::json::json_to_struct(&value)
}

#[tokio::test]
async fn a_published_event_reaches_every_matching_subscriber_once_with_one_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        test_config(dir.path()),
        ManualClock::new(SystemClock.now_ms()),
    )
    .await;
    let mut c = server.client().await;
    let crm = Sink::start(Reply::Status(200)).await;
    let pager = Sink::start(Reply::Status(200)).await;
    for (name, sink) in [("crm", &crm), ("pager", &pager)] {
        c.put_endpoint(pb::Endpoint {
            name: name.into(),
            url: sink.url("/hook"),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    // crm takes every ticket event (twice over: one delivery all the same); the pager
    // only urgent ones from tenant acme; the audit queue everything.
    c.put_subscription(subscription("crm-tickets", endpoint("crm"), &["ticket.*"]))
        .await
        .unwrap();
    c.put_subscription(subscription(
        "crm-classified",
        endpoint("crm"),
        &["ticket.classified"],
    ))
    .await
    .unwrap();
    let mut urgent = subscription("pager-urgent", endpoint("pager"), &["ticket.classified"]);
    urgent.filter = filter(json!({
        "data": {"priority": {"$in": ["urgent", "high"]}},
        "metadata": {"x-tenant": "acme"}
    }));
    let created = c.put_subscription(urgent).await.unwrap();
    assert!(created.created);
    c.put_subscription(subscription("audit", queue("audit"), &["*"]))
        .await
        .unwrap();

    let published = c
        .enqueue(
            Event::to_topic(
                "ticket.classified",
                br#"{"ticket":"T-7","priority":"urgent"}"#.to_vec(),
            )
            .header("x-tenant", "acme")
            .idempotency_key("classify-T-7"),
        )
        .await
        .unwrap();
    assert_eq!(
        published.subscribers, 3,
        "crm once, the pager, the audit queue"
    );
    assert_eq!(published.delivery_ids.len(), 3);
    let event_id = published.id.clone();
    assert!(!published.delivery_ids.contains(&event_id));

    // Each endpoint gets its delivery: its own webhook-id, the shared hookd-event-id.
    let at_crm = crm.wait_for(1).await;
    let at_pager = pager.wait_for(1).await;
    for r in [&at_crm[0], &at_pager[0]] {
        assert_eq!(r.headers["hookd-event-id"], event_id.as_str());
        assert_eq!(r.headers["webhook-event-type"], "ticket.classified");
        assert_eq!(r.body.as_ref(), br#"{"ticket":"T-7","priority":"urgent"}"#);
        let id = r.headers["webhook-id"].to_str().unwrap().to_owned();
        assert!(published.delivery_ids.contains(&id));
    }
    assert_ne!(
        at_crm[0].headers["webhook-id"],
        at_pager[0].headers["webhook-id"]
    );
    // The queue's copy, with the event id; GetMessage shows it too.
    let got = c
        .receive("audit", 10, std::time::Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event_id, event_id);
    c.ack([got[0].lease_id.clone()]).await.unwrap();
    for id in &published.delivery_ids {
        let m = eventually(
            "every delivery completes",
            async || c.get_message(id.clone()).await.unwrap(),
            |m| m.state == pb::MessageState::Delivered as i32,
        )
        .await;
        assert_eq!(m.event_id, event_id);
        assert_eq!(m.payload, br#"{"ticket":"T-7","priority":"urgent"}"#);
        // The console's message page shows it too.
        let page = server.http_get(&format!("/ui/messages/{id}")).await;
        assert!(page.contains(&format!("<code>{event_id}</code>")), "{page}");
    }

    // The same key again: the whole fan-out is a duplicate; nothing more is sent.
    let again = c
        .enqueue(
            Event::to_topic(
                "ticket.classified",
                br#"{"ticket":"T-7","priority":"urgent"}"#.to_vec(),
            )
            .header("x-tenant", "acme")
            .idempotency_key("classify-T-7"),
        )
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.id, event_id);
    // Answered as the first was (issue #49, 3): the same deliveries.
    assert_eq!(again.subscribers, 3);
    assert_eq!(again.delivery_ids, published.delivery_ids);

    // A low-priority event: the filter leaves the pager out.
    let low = c
        .enqueue(Event::to_topic(
            "ticket.classified",
            br#"{"ticket":"T-8","priority":"low"}"#.to_vec(),
        ))
        .await
        .unwrap();
    assert_eq!(low.subscribers, 2);
    crm.wait_for(2).await;
    // No subscriber: nothing stored, not an error.
    let none = c
        .enqueue(Event::to_topic("invoice.paid", b"{}".to_vec()))
        .await
        .unwrap();
    assert_eq!(
        (none.subscribers, none.delivery_ids.len()),
        (1, 1),
        "audit takes *"
    );
    c.raw()
        .delete_subscription(pb::DeleteSubscriptionRequest {
            name: "audit".into(),
        })
        .await
        .unwrap();
    let nobody = c
        .enqueue(Event::to_topic("invoice.paid", b"{}".to_vec()))
        .await
        .unwrap();
    assert_eq!(nobody.subscribers, 0);
    assert!(!nobody.id.is_empty());
    // A batch: each event routed on its own.
    let batch = c
        .enqueue_batch(vec![
            Event::to_topic("ticket.closed", b"{}".to_vec()),
            Event::to_topic("invoice.paid", b"{}".to_vec()),
            Event::to_topic("ticket.*", b"{}".to_vec()),
        ])
        .await
        .unwrap();
    let subscribers: Vec<Option<u32>> = batch
        .iter()
        .map(|r| match &r.result {
            Some(pb::enqueue_result::Result::Ok(ok)) => Some(ok.subscribers),
            _ => None,
        })
        .collect();
    assert_eq!(subscribers, [Some(1), Some(0), None]);
    let pager_count = pager.count();
    assert_eq!(pager_count, 1);
    // What /metrics says of it: 4 publishes stored (3, 2, 1 and 1 subscribers; the
    // duplicate is not one), 2 that no subscription took, 3 subscriptions left.
    let page = server.http_get("/metrics").await;
    assert_eq!(metric(&page, "hookd_events_published_total"), 4, "{page}");
    assert_eq!(metric(&page, "hookd_events_unrouted_total"), 2);
    assert_eq!(metric(&page, "hookd_publish_subscribers_count"), 4);
    assert_eq!(metric(&page, "hookd_publish_subscribers_sum"), 7);
    assert_eq!(metric(&page, "hookd_subscriptions"), 3);

    // Subscriptions are durable: after a restart they route as before.
    drop(c);
    let server = server.restart().await;
    let mut c = server.client().await;
    let listed = c
        .raw()
        .list_subscriptions(pb::ListSubscriptionsRequest {})
        .await
        .unwrap()
        .into_inner()
        .subscriptions;
    let names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["crm-classified", "crm-tickets", "pager-urgent"]);
    let pager_sub = listed.iter().find(|s| s.name == "pager-urgent").unwrap();
    assert_eq!(
        pager_sub
            .filter
            .as_ref()
            .map(hookd_proto::json::struct_to_json),
        Some(json!({
            "data": {"priority": {"$in": ["urgent", "high"]}},
            "metadata": {"x-tenant": "acme"}
        }))
    );
    let after = c
        .enqueue(
            Event::to_topic("ticket.classified", br#"{"priority":"high"}"#.to_vec())
                .header("x-tenant", "acme"),
        )
        .await
        .unwrap();
    assert_eq!(after.subscribers, 2);
    pager.wait_for(2).await;
    let id = after.delivery_ids[1].clone();
    delivered(&mut c, &id).await;
    server.stop().await;
}

#[tokio::test]
async fn a_subscription_that_cannot_work_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "crm".into(),
        url: "http://127.0.0.1:9/never".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let refused = |e: &hookd_client::Error| (code(e), message(e));

    let mut bad = subscription("s", endpoint("crm"), &["ticket.*"]);
    bad.filter = filter(json!({"data": {"$or": [{"a": 1}, {"b": {"$regex": "x"}}]}}));
    let e = c.put_subscription(bad).await.unwrap_err();
    let (status, text) = refused(&e);
    assert_eq!(status, tonic::Code::InvalidArgument);
    assert!(
        text.starts_with("subscription.filter.data.$or[1].b"),
        "{text}"
    );
    assert!(text.contains("$regex"), "{text}");

    let e = c
        .put_subscription(subscription("s", endpoint("nobody"), &["*"]))
        .await
        .unwrap_err();
    assert_eq!(code(&e), tonic::Code::NotFound);
    assert!(
        message(&e).starts_with("subscription.endpoint:"),
        "{}",
        message(&e)
    );

    let e = c
        .put_subscription(subscription("s", queue("q"), &[]))
        .await
        .unwrap_err();
    assert!(
        message(&e).starts_with("subscription.event_types:"),
        "{}",
        message(&e)
    );
    let e = c
        .put_subscription(subscription("s", queue("q"), &["ok", "not ok"]))
        .await
        .unwrap_err();
    assert!(
        message(&e).starts_with("subscription.event_types[1]:"),
        "{}",
        message(&e)
    );
    let e = c
        .put_subscription(pb::Subscription {
            name: "s".into(),
            event_types: vec!["*".into()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        message(&e).starts_with("subscription.destination:"),
        "{}",
        message(&e)
    );
    // Nothing of those was stored.
    let listed = c
        .raw()
        .list_subscriptions(pb::ListSubscriptionsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(listed.subscriptions.is_empty());

    // An endpoint with a subscription cannot be deleted from under it.
    c.put_subscription(subscription("crm-all", endpoint("crm"), &["*"]))
        .await
        .unwrap();
    let e = c
        .raw()
        .delete_endpoint(pb::DeleteEndpointRequest { name: "crm".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(e.message().contains("crm-all"), "{}", e.message());
    // A publish whose topic is a pattern, or whose event_type differs, is refused.
    let e = c
        .enqueue(Event::to_topic("ticket.*", b"{}".to_vec()))
        .await
        .unwrap_err();
    assert!(message(&e).starts_with("topic:"), "{}", message(&e));
    let e = c
        .enqueue(Event::to_topic("ticket.closed", b"{}".to_vec()).event_type("ticket.opened"))
        .await
        .unwrap_err();
    assert!(message(&e).starts_with("event_type:"), "{}", message(&e));
    server.stop().await;
}

#[tokio::test]
async fn an_outpost_filter_pastes_as_json_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    // Outpost's documented destination filter, as written there.
    let outpost = json!({
        "data": {
            "$or": [
                {"amount": {"$gte": 100}},
                {"customer": {"tier": "enterprise"}}
            ]
        }
    });
    let answer = crate::rest::put(
        server.http,
        "/v1/subscriptions/big-orders",
        json!({
            "queue": "orders",
            "eventTypes": ["order.*"],
            "filter": outpost,
            "description": "orders worth a look"
        }),
    )
    .await;
    let body = answer.json();
    assert_eq!(body["created"], true, "{body}");
    // As given, up to a number's form: a Struct holds doubles (100 reads back as 100.0).
    assert_eq!(
        as_doubles(&body["subscription"]["filter"]),
        as_doubles(&outpost)
    );
    let got = crate::rest::get(server.http, "/v1/subscriptions/big-orders").await;
    assert_eq!(got.json()["subscription"]["eventTypes"], json!(["order.*"]));

    let publish = async |payload: serde_json::Value| {
        crate::rest::post(
            server.http,
            "/v1/messages",
            json!({"topic": "order.created", "payload": crate::rest::b64(payload.to_string().as_bytes())}),
        )
        .await
        .json()
    };
    assert_eq!(publish(json!({"amount": 250})).await["subscribers"], 1);
    assert_eq!(
        publish(json!({"amount": 5, "customer": {"tier": "enterprise"}})).await["subscribers"],
        1
    );
    assert_eq!(publish(json!({"amount": 5})).await["subscribers"], 0);

    let bad = crate::rest::put(
        server.http,
        "/v1/subscriptions/bad",
        json!({"queue": "orders", "eventTypes": ["*"], "filter": {"data": {"amount": {"$gte": [1]}}}}),
    )
    .await;
    let text = bad.error(400, "INVALID_ARGUMENT");
    assert!(
        text.starts_with("subscription.filter.data.amount.$gte"),
        "{text}"
    );
    server.stop().await;
}

/// `hookd` with `args` against `grpc` (a child process: the server shares this test's
/// runtime): its exit code, standard output and error.
async fn cli(grpc: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let grpc = grpc.to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
            .args(&args)
            .env("HOOKD_SERVER", grpc)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn subscriptions_are_managed_and_events_published_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let grpc = server.grpc.clone();
    let filter = r#"{"data": {"priority": {"$in": ["high", "urgent"]}}}"#;
    let (code, out, err) = cli(
        &grpc,
        &[
            "subscriptions",
            "put",
            "urgent-tickets",
            "--to",
            "queue:triage",
            "--event-type",
            "ticket.*",
            "--filter",
            filter,
            "--description",
            "what a human looks at",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("created subscription"), "{out}");
    let (_, out, _) = cli(&grpc, &["subscriptions", "list"]).await;
    assert!(
        out.contains("urgent-tickets") && out.contains("queue:triage"),
        "{out}"
    );
    assert!(out.contains(r#""$in":["high","urgent"]"#), "{out}");
    let (code, out, err) = cli(
        &grpc,
        &[
            "enqueue",
            "topic:ticket.classified",
            "--data",
            r#"{"priority":"urgent"}"#,
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("1 subscriber(s)"), "{out}");
    let (_, out, _) = cli(
        &grpc,
        &[
            "enqueue",
            "topic:ticket.classified",
            "--data",
            r#"{"priority":"low"}"#,
        ],
    )
    .await;
    assert!(out.contains("0 subscriber(s)"), "{out}");
    // A bad filter: refused by the server, naming where.
    let (code, _, err) = cli(
        &grpc,
        &[
            "subscriptions",
            "put",
            "bad",
            "--to",
            "queue:q",
            "--event-type",
            "*",
            "--filter",
            r#"{"data": {"$and": {}}}"#,
        ],
    )
    .await;
    assert_ne!(code, Some(0));
    assert!(err.contains("subscription.filter.data.$and"), "{err}");
    let (code, out, _) = cli(&grpc, &["subscriptions", "delete", "urgent-tickets"]).await;
    assert_eq!(code, Some(0));
    assert!(out.contains("deleted subscription urgent-tickets"), "{out}");
    let mut c = server.client().await;
    let left = c
        .receive("triage", 10, std::time::Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(left.len(), 1, "the urgent one only");
    server.stop().await;
}
