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
use crate::tenants::on;

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
            search_keys: Vec::new(),
        },
        EventTypeSpec {
            name: "ticket.closed".into(),
            description: "A ticket was closed.".into(),
            json_schema: None,
            json_schema_file: None,
            search_keys: Vec::new(),
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
        .list_event_types(pb::ListEventTypesRequest::default())
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
    // Its search box: names containing the text.
    let page = server.http_get("/ui/event-types?q=classified").await;
    assert!(
        page.contains("<code>ticket.classified</code>") && !page.contains("A ticket was closed."),
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

fn declared(name: &str, schema: &str) -> pb::PutEventTypeRequest {
    pb::PutEventTypeRequest {
        event_type: Some(pb::EventType {
            name: name.into(),
            description: format!("{name}, declared over the API"),
            json_schema: schema.into(),
            ..Default::default()
        }),
    }
}

/// acme's own schema for the type: an integer id, where default's (the config file's)
/// wants a ticket id and a priority.
const ACME_SCHEMA: &str = r#"{"type": "object", "required": ["id"],
  "properties": {"id": {"type": "integer"}}}"#;

#[tokio::test]
async fn event_types_are_a_tenants_objects_and_its_events_are_held_to_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = with_catalog(dir.path(), true).await;
    let mut c = server.client().await;
    for name in ["acme", "globex"] {
        c.raw()
            .create_tenant(pb::CreateTenantRequest {
                tenant: Some(pb::Tenant {
                    name: name.into(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
    }
    let api0 = c.raw().clone();
    let send = |tenant: Option<&str>, event_type: &str, payload: &str| {
        let mut api = api0.clone();
        let request = event(event_type, payload).into_request();
        let request = match tenant {
            Some(t) => on(t, request),
            None => tonic::Request::new(request),
        };
        async move { api.enqueue(request).await.map(drop) }
    };
    let acme_ok = r#"{"id": 7}"#;
    let ticket_ok = r#"{"ticket_id": "T-7", "priority": "high"}"#;

    // Strict, and acme declares nothing yet: default's declarations are not acme's.
    let e = send(Some("acme"), "ticket.classified", ticket_ok)
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message()
            .starts_with("event_type: \"ticket.classified\" is not a declared event type"),
        "{e:?}"
    );

    // acme declares the type with its own schema.
    let put = c
        .raw()
        .put_event_type(on("acme", declared("ticket.classified", ACME_SCHEMA)))
        .await
        .unwrap()
        .into_inner();
    assert!(put.created);
    let made = put.event_type.unwrap();
    assert!(!made.from_config && made.created_unix_ms > 0, "{made:?}");
    send(Some("acme"), "ticket.classified", acme_ok)
        .await
        .unwrap();
    let e = send(Some("acme"), "ticket.classified", ticket_ok)
        .await
        .unwrap_err();
    assert!(
        e.message()
            .starts_with("payload: does not satisfy event type \"ticket.classified\"'s schema"),
        "acme's events are held to acme's schema: {e:?}"
    );
    // default's to default's (the config file's), globex's to none of them.
    send(None, "ticket.classified", ticket_ok).await.unwrap();
    let e = send(None, "ticket.classified", acme_ok).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    let e = send(Some("globex"), "ticket.classified", acme_ok)
        .await
        .unwrap_err();
    assert!(
        e.message().contains("is not a declared event type"),
        "{e:?}"
    );

    // A schema that does not compile is refused naming it; nothing is stored.
    let e = c
        .raw()
        .put_event_type(on(
            "acme",
            declared("order.paid", r#"{"type": "no-such-type"}"#),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message()
            .starts_with("event_type.json_schema: not a valid JSON Schema"),
        "{e:?}"
    );
    let e = c
        .raw()
        .put_event_type(on("acme", declared("order *", "")))
        .await
        .unwrap_err();
    assert!(e.message().starts_with("event_type.name:"), "{e:?}");
    // The config file's are default's and read-only; default may declare more.
    let e = c
        .raw()
        .put_event_type(declared("ticket.closed", ""))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    let e = c
        .raw()
        .delete_event_type(pb::DeleteEventTypeRequest {
            name: "ticket.closed".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    c.raw()
        .put_event_type(declared("invoice.paid", ""))
        .await
        .unwrap();
    // globex cannot see acme's.
    let e = c
        .raw()
        .get_event_type(on(
            "globex",
            pb::GetEventTypeRequest {
                name: "ticket.classified".into(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    // A declaration globex makes and its tenant's deletion take with it.
    c.raw()
        .put_event_type(on("globex", declared("gone.soon", "")))
        .await
        .unwrap();
    c.raw()
        .delete_tenant(pb::DeleteTenantRequest {
            name: "globex".into(),
            force: true,
        })
        .await
        .unwrap();
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "globex".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    let listed = c
        .raw()
        .list_event_types(on("globex", pb::ListEventTypesRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(listed.event_types.is_empty(), "{listed:?}");

    // After a restart: the same declarations, held the same way.
    let server = server.restart().await;
    let mut c = server.client().await;
    let got = c
        .raw()
        .get_event_type(on(
            "acme",
            pb::GetEventTypeRequest {
                name: "ticket.classified".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .event_type
        .unwrap();
    assert_eq!(got, made);
    let mut api = c.raw().clone();
    let e = api
        .enqueue(on(
            "acme",
            event("ticket.classified", ticket_ok).into_request(),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    api.enqueue(on(
        "acme",
        event("ticket.classified", acme_ok).into_request(),
    ))
    .await
    .unwrap();
    // default's list: the config file's and its own, in pages.
    let first = api
        .list_event_types(pb::ListEventTypesRequest {
            page_size: 2,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let second = api
        .list_event_types(pb::ListEventTypesRequest {
            page_size: 2,
            page_token: first.next_page_token.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<(&str, bool)> = first
        .event_types
        .iter()
        .chain(&second.event_types)
        .map(|t| (t.name.as_str(), t.from_config))
        .collect();
    assert_eq!(
        names,
        [
            ("invoice.paid", false),
            ("ticket.classified", true),
            ("ticket.closed", true)
        ]
    );
    assert!(first.strict && second.next_page_token.is_empty());

    // Over HTTP/JSON and the CLI, as acme.
    let put = crate::rest::call_with(
        server.http,
        "PUT",
        "/v1/event-types/order.paid",
        &[("x-hookd-tenant", "acme")],
        r#"{"description":"An order was paid.","json_schema":"{\"required\":[\"order\"]}"}"#,
    )
    .await;
    assert_eq!(put.status(), 200, "{put:?}");
    assert_eq!(put.json()["created"], true, "{put:?}");
    let listed = crate::rest::call_with(
        server.http,
        "GET",
        "/v1/event-types",
        &[("x-hookd-tenant", "acme")],
        "",
    )
    .await;
    let names: Vec<String> = listed.json()["eventTypes"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed:?}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["order.paid", "ticket.classified"]);
    let e = api
        .enqueue(on("acme", event("order.paid", "{}").into_request()))
        .await
        .unwrap_err();
    assert!(
        e.message().contains("\"order\""),
        "the JSON-declared schema holds: {e:?}"
    );
    let schema = dir.path().join("shipped.json");
    std::fs::write(&schema, r#"{"required": ["carrier"]}"#).unwrap();
    let g = server.grpc.as_str();
    let schema_arg = schema.to_str().unwrap();
    let run = crate::ctl::hookd(
        g,
        &[
            "--tenant",
            "acme",
            "event-types",
            "put",
            "order.shipped",
            "--description",
            "An order left.",
            "--schema-file",
            schema_arg,
        ],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("created"), "{}", run.stdout);
    let run = crate::ctl::hookd(
        g,
        &["--tenant", "acme", "event-types", "get", "order.shipped"],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("carrier"), "{}", run.stdout);
    let run = crate::ctl::hookd(g, &["--tenant", "acme", "event-types", "list"], None).await;
    assert!(
        run.stdout.contains("order.shipped") && run.stdout.contains("strict:"),
        "{}",
        run.stdout
    );
    let run = crate::ctl::hookd(
        g,
        &[
            "--tenant",
            "acme",
            "event-types",
            "delete",
            "ticket.classified",
        ],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Deleted, and strict: acme's events of that type are refused from now on.
    let e = api
        .enqueue(on(
            "acme",
            event("ticket.classified", acme_ok).into_request(),
        ))
        .await
        .unwrap_err();
    assert!(
        e.message().contains("is not a declared event type"),
        "{e:?}"
    );
    server.stop().await;
}
