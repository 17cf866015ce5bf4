//! The event-type catalog (`[[event_types]]`) against a real hookd: a payload that fails
//! its type's JSON Schema is refused naming where (gRPC, batch, HTTP/JSON), nothing of it
//! is stored, undeclared types pass unless `strict_event_types`, and the catalog is listed
//! over gRPC, HTTP/JSON, the console and the CLI; `hookd config check` refuses a bad schema by its key.

use std::process::Command;

use hookd::catalog::EventTypeSpec;
use hookd_client::Event;
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_proto::v1 as pb;

use crate::harness::{TestServer, test_config};

const TICKET_SCHEMA: &str = r#"{"type": "object", "required": ["ticket_id", "priority"],
  "properties": {"ticket_id": {"type": "string"},
                 "priority": {"enum": ["low", "normal", "high"]}}}"#;

async fn with_catalog(dir: &std::path::Path, strict: bool) -> TestServer {
    let mut config = test_config(dir);
    config.event_types = vec![
        EventTypeSpec {
            name: "ticket.classified".into(),
            description: "A ticket got its category and priority.".into(),
            json_schema: Some(TICKET_SCHEMA.into()),
            json_schema_file: None,
        },
        EventTypeSpec {
            name: "ticket.closed".into(),
            description: "A ticket was closed.".into(),
            json_schema: None,
            json_schema_file: None,
        },
    ];
    config.strict_event_types = strict;
    TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await
}

fn event(event_type: &str, payload: &str) -> Event {
    Event::to_queue("tickets", payload.as_bytes().to_vec()).event_type(event_type)
}

#[tokio::test]
async fn a_payload_that_fails_its_types_schema_is_refused_naming_where_and_nothing_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let server = with_catalog(dir.path(), false).await;
    let mut c = server.client().await;
    let good = r#"{"ticket_id": "T-7", "priority": "high"}"#;
    c.enqueue(event("ticket.classified", good)).await.unwrap();

    let bad = r#"{"ticket_id": "T-8", "priority": "urgent"}"#;
    let status = c
        .raw()
        .enqueue(event("ticket.classified", bad).into_request())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with(
            "payload: at /priority does not satisfy event type \"ticket.classified\"'s schema"
        ),
        "{}",
        status.message()
    );
    let status = c
        .raw()
        .enqueue(event("ticket.classified", "not json").into_request())
        .await
        .unwrap_err();
    assert!(
        status.message().starts_with("payload: is not JSON"),
        "{}",
        status.message()
    );
    // A type without a schema, and one not declared: anything (not strict).
    c.enqueue(event("ticket.closed", "plain text"))
        .await
        .unwrap();
    c.enqueue(event("user.created", "plain text"))
        .await
        .unwrap();

    // In a batch, the bad event is answered in place; the others are stored.
    let batch = c
        .raw()
        .enqueue_batch(pb::EnqueueBatchRequest {
            events: vec![
                event("ticket.classified", good).into_request(),
                event("ticket.classified", r#"{"priority": "low"}"#).into_request(),
                event("ticket.closed", "{}").into_request(),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let errors: Vec<Option<String>> = batch
        .results
        .iter()
        .map(|r| match &r.result {
            Some(pb::enqueue_result::Result::Error(e)) => Some(e.message.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(errors[0], None);
    assert_eq!(errors[2], None);
    let second = errors[1].as_deref().unwrap_or_default();
    assert!(
        second.starts_with(
            "events[1].payload: does not satisfy event type \"ticket.classified\"'s schema"
        ) && second.contains("\"ticket_id\" is a required property"),
        "{second}"
    );

    // Over HTTP/JSON: 400, the gRPC status and the same message.
    let body = serde_json::json!({
        "queue": "tickets",
        "eventType": "ticket.classified",
        "payload": crate::rest::b64(bad.as_bytes()),
    });
    let message = crate::rest::post(server.http, "/v1/messages", body)
        .await
        .error(400, "INVALID_ARGUMENT");
    assert!(
        message.starts_with("payload: at /priority does not satisfy event type"),
        "{message}"
    );

    // Exactly the accepted ones are stored: 3 single calls and 2 of the batch.
    let leased = c
        .receive("tickets", 100, std::time::Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(leased.len(), 5);
    assert!(leased.iter().all(|m| m.payload != bad.as_bytes()));

    // Listed over gRPC...
    let listed = c
        .raw()
        .list_event_types(pb::ListEventTypesRequest {})
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = listed.event_types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["ticket.classified", "ticket.closed"]);
    assert_eq!(listed.event_types[0].json_schema, TICKET_SCHEMA);
    assert_eq!(listed.event_types[1].json_schema, "");
    assert!(!listed.strict);
    // ...over HTTP/JSON...
    let http = server.http_get("/v1/event-types").await;
    assert!(http.starts_with("HTTP/1.1 200"), "{http}");
    assert!(
        http.contains("\"description\":\"A ticket was closed.\""),
        "{http}"
    );
    // ...on the console...
    let page = server.http_get("/ui/event-types").await;
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.contains("<code>ticket.classified</code>")
            && page.contains("A ticket was closed.")
            && page.contains("Not strict"),
        "{page}"
    );
    // ...and by the CLI (a child process: the server shares this test's runtime).
    let grpc = server.grpc.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
            .args(["event-types", "list"])
            .env("HOOKD_SERVER", grpc)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("ticket.classified"))
        .unwrap_or_default();
    assert!(
        line.contains("yes") && line.contains("A ticket got its category"),
        "{text}"
    );
    assert!(text.contains("not strict"), "{text}");
}

#[tokio::test]
async fn strict_event_types_refuse_an_undeclared_type_and_none() {
    let dir = tempfile::tempdir().unwrap();
    let server = with_catalog(dir.path(), true).await;
    let mut c = server.client().await;
    c.enqueue(event("ticket.closed", "{}")).await.unwrap();
    let status = c
        .raw()
        .enqueue(event("ticket.reopened", "{}").into_request())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("event_type: \"ticket.reopened\" is not a declared event type"),
        "{}",
        status.message()
    );
    let status = c
        .raw()
        .enqueue(Event::to_queue("tickets", b"{}".to_vec()).into_request())
        .await
        .unwrap_err();
    assert_eq!(
        status.message(),
        "event_type: an event type is required: strict_event_types is on"
    );
    assert_eq!(
        c.receive("tickets", 10, std::time::Duration::from_secs(30), None)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn config_check_refuses_a_schema_that_is_not_one_naming_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hookd.toml");
    std::fs::write(
        &file,
        "[[event_types]]\nname = \"ticket.closed\"\n\n[[event_types]]\nname = \"ticket.classified\"\njson_schema = '{\"type\": \"no-such-type\"}'\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
        .args(["config", "check", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("event_types[1].json_schema") && stderr.contains("not a valid JSON Schema"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_publish_is_held_to_its_topics_schema_before_it_is_routed() {
    let dir = tempfile::tempdir().unwrap();
    let server = with_catalog(dir.path(), true).await;
    let mut c = server.client().await;
    c.put_subscription(pb::Subscription {
        name: "triage".into(),
        destination: Some(pb::subscription::Destination::Queue("triage".into())),
        event_types: vec!["*".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    // The topic is the event's type: its schema applies.
    let bad = r#"{"ticket_id": "T-8", "priority": "urgent"}"#;
    let status = c
        .raw()
        .enqueue(Event::to_topic("ticket.classified", bad.as_bytes().to_vec()).into_request())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status.message().starts_with("payload: at /priority"),
        "{}",
        status.message()
    );
    // Strict: a topic not declared is refused too.
    let status = c
        .raw()
        .enqueue(Event::to_topic("ticket.reopened", b"{}".to_vec()).into_request())
        .await
        .unwrap_err();
    assert!(
        status.message().starts_with("event_type:"),
        "{}",
        status.message()
    );
    let good = r#"{"ticket_id": "T-9", "priority": "high"}"#;
    let published = c
        .enqueue(Event::to_topic(
            "ticket.classified",
            good.as_bytes().to_vec(),
        ))
        .await
        .unwrap();
    assert_eq!(published.subscribers, 1);
    let got = c
        .receive("triage", 10, std::time::Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "only the valid one was stored");
    server.stop().await;
}
