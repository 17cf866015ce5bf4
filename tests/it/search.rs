//! SearchMessages (issue #53, 1) against a real hookd and a real sink: what an on-call
//! operator asks after an outage ("what did acme's endpoint not get since 10:00?", "find
//! customer c_1's orders"), over gRPC, HTTP/JSON and the CLI, paged newest first; and the
//! refusals of a bad request, each naming its field.

use hookd_client::{Client, Event, pb};
use serde_json::json;

use crate::ctl::hookd;
use crate::harness::{TestServer, code, eventually, message, test_config};
use crate::sink::{Reply, Sink};
use hookd_core::clock::{Clock, ManualClock, SystemClock};

fn endpoint(name: &str) -> Option<pb::Destination> {
    Some(pb::Destination {
        kind: Some(pb::destination::Kind::Endpoint(name.into())),
    })
}

async fn search(c: &mut Client, r: pb::SearchMessagesRequest) -> pb::SearchMessagesResponse {
    c.raw().search_messages(r).await.unwrap().into_inner()
}

/// Every page of a search, `page_size` at a time: the ids, in order.
async fn all_ids(c: &mut Client, mut r: pb::SearchMessagesRequest) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..1_000 {
        let page = search(c, r.clone()).await;
        ids.extend(page.messages.iter().map(|m| m.id.clone()));
        if page.next_page_token.is_empty() {
            return ids;
        }
        r.page_token = page.next_page_token;
    }
    panic!("a search that does not end");
}

const DEAD: i32 = pb::MessageState::DeadLetter as i32;
const DELIVERED: i32 = pb::MessageState::Delivered as i32;
const PENDING: i32 = pb::MessageState::Pending as i32;

#[tokio::test]
async fn an_operator_finds_what_an_endpoint_missed_and_a_customers_events() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.breaker.failure_threshold = 1_000;
    config.delivery.breaker.slow_failure_threshold = 1_000;
    config.event_types = vec![hookd::catalog::EventTypeSpec {
        name: "order.paid".into(),
        description: String::new(),
        json_schema: None,
        json_schema_file: None,
        search_keys: vec!["/customer/id".into(), "/amount".into()],
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
    // Oldest first: three orders of c_1 and c_2 to shop, two to acme (refused: 422, dead),
    // and one to a queue nobody reads (pending).
    let mut shop_ids = Vec::new();
    for (i, customer) in ["c_1", "c_2", "c_1"].iter().enumerate() {
        let payload = json!({"customer": {"id": customer}, "amount": 40 + i}).to_string();
        let e = Event::to_endpoint("shop", payload)
            .event_type("order.paid")
            .idempotency_key(format!("order-{i}"));
        shop_ids.push(c.enqueue(e).await.unwrap().id);
        server.advance(1).await;
    }
    let mut acme_ids = Vec::new();
    for i in 0..2 {
        let e = Event::to_endpoint("acme", format!("{{\"n\": {i}}}")).max_attempts(1);
        acme_ids.push(c.enqueue(e).await.unwrap().id);
        server.advance(1).await;
    }
    let queued = c.enqueue(Event::to_queue("later", "{}")).await.unwrap().id;
    shop.wait_for(3).await;
    acme.wait_for(2).await;
    let mut c2 = c.clone();
    eventually(
        "3 delivered and 2 dead",
        async || {
            let r = pb::SearchMessagesRequest {
                states: vec![DEAD, DELIVERED],
                ..Default::default()
            };
            all_ids(&mut c2, r).await.len()
        },
        |n| *n == 5,
    )
    .await;

    // The recovery question: what did acme not get?
    let r = pb::SearchMessagesRequest {
        destination: endpoint("acme"),
        states: vec![DEAD],
        ..Default::default()
    };
    let page = search(&mut c, r).await;
    let ids: Vec<_> = page.messages.iter().map(|m| m.id.clone()).collect();
    assert_eq!(
        ids,
        vec![acme_ids[1].clone(), acme_ids[0].clone()],
        "newest first"
    );
    for m in &page.messages {
        assert_eq!(m.state, DEAD);
        assert_eq!(m.last_status, 422);
        assert_eq!(m.attempts, 1);
        assert_eq!(m.destination, endpoint("acme"));
    }
    // By last status, across destinations.
    let r = pb::SearchMessagesRequest {
        last_status: 200,
        ..Default::default()
    };
    let mut want: Vec<_> = shop_ids.clone();
    want.reverse();
    assert_eq!(all_ids(&mut c, r).await, want);
    // A customer's orders, by a declared search key; and by a number's value.
    let r = pb::SearchMessagesRequest {
        payload: [("/customer/id".to_owned(), "c_1".to_owned())].into(),
        ..Default::default()
    };
    assert_eq!(
        all_ids(&mut c, r).await,
        vec![shop_ids[2].clone(), shop_ids[0].clone()]
    );
    let r = pb::SearchMessagesRequest {
        payload: [
            ("/customer/id".to_owned(), "c_1".to_owned()),
            ("/amount".to_owned(), "42".to_owned()),
        ]
        .into(),
        ..Default::default()
    };
    assert_eq!(all_ids(&mut c, r).await, vec![shop_ids[2].clone()]);
    // By idempotency key, by event type, by a message's own id, by state (a live one).
    let r = pb::SearchMessagesRequest {
        idempotency_key: "order-1".into(),
        ..Default::default()
    };
    assert_eq!(all_ids(&mut c, r).await, vec![shop_ids[1].clone()]);
    let r = pb::SearchMessagesRequest {
        event_type: "order.paid".into(),
        states: vec![DELIVERED],
        ..Default::default()
    };
    assert_eq!(all_ids(&mut c, r.clone()).await.len(), 3);
    // How many match in all, asked with a page of one: counted (this few are).
    let counted = search(
        &mut c,
        pb::SearchMessagesRequest {
            count: true,
            page_size: 1,
            ..r.clone()
        },
    )
    .await;
    assert_eq!(counted.messages.len(), 1);
    assert_eq!((counted.total, counted.total_exact), (3, true));
    let uncounted = search(&mut c, pb::SearchMessagesRequest { page_size: 1, ..r }).await;
    assert_eq!((uncounted.total, uncounted.total_exact), (0, false));
    let r = pb::SearchMessagesRequest {
        event_id: acme_ids[0].clone(),
        ..Default::default()
    };
    assert_eq!(all_ids(&mut c, r).await, vec![acme_ids[0].clone()]);
    let r = pb::SearchMessagesRequest {
        states: vec![PENDING],
        ..Default::default()
    };
    assert_eq!(all_ids(&mut c, r).await, vec![queued.clone()]);
    // Everything, one at a time: newest first, each once.
    let r = pb::SearchMessagesRequest {
        page_size: 1,
        ..Default::default()
    };
    let mut every: Vec<_> = shop_ids
        .iter()
        .chain(&acme_ids)
        .chain([&queued])
        .cloned()
        .collect();
    every.reverse();
    assert_eq!(all_ids(&mut c, r).await, every);
    // A time window: only the acme ones.
    let first_acme: u64 = acme_ids[0]
        .parse::<hookd_core::ids::MessageId>()
        .map(|id| (id.0 >> 80) as u64)
        .unwrap();
    let r = pb::SearchMessagesRequest {
        created_after_unix_ms: first_acme,
        created_before_unix_ms: first_acme + 2,
        ..Default::default()
    };
    assert_eq!(
        all_ids(&mut c, r).await,
        vec![acme_ids[1].clone(), acme_ids[0].clone()]
    );

    // Over HTTP/JSON, the same answer.
    let answer = crate::rest::post(
        server.http,
        "/v1/messages/search",
        json!({"destination": {"endpoint": "acme"}, "states": ["MESSAGE_STATE_DEAD_LETTER"], "count": true}),
    )
    .await;
    assert_eq!(answer.status(), 200, "{}", answer.json());
    assert_eq!(answer.json()["total"], "2", "a uint64 is a string in JSON");
    assert_eq!(answer.json()["totalExact"], true);
    let got: Vec<_> = answer.json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, vec![acme_ids[1].clone(), acme_ids[0].clone()]);
    assert_eq!(answer.json()["messages"][0]["lastStatus"], 422);

    // From the shell.
    let run = hookd(
        &server.grpc,
        &[
            "search",
            "--destination",
            "endpoint:acme",
            "--state",
            "dead",
            "--count",
        ],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("matching in all: 2"), "{}", run.stdout);
    assert!(run.stdout.contains(&acme_ids[0]), "{}", run.stdout);
    assert!(run.stdout.contains("422"), "{}", run.stdout);
    assert!(!run.stdout.contains(&shop_ids[0]), "{}", run.stdout);
    let run = hookd(
        &server.grpc,
        &["search", "--payload", "/customer/id=c_2", "--json"],
        None,
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["messages"][0]["id"], shop_ids[1].as_str());
    assert_eq!(v["messages"].as_array().unwrap().len(), 1);

    // Bad requests name their field; nothing is searched.
    for (r, field) in [
        (
            pb::SearchMessagesRequest {
                states: vec![0],
                ..Default::default()
            },
            "states[0]",
        ),
        (
            pb::SearchMessagesRequest {
                payload: [("customer".to_owned(), "c_1".to_owned())].into(),
                ..Default::default()
            },
            "payload[\"customer\"]",
        ),
        (
            pb::SearchMessagesRequest {
                page_token: "nope".into(),
                ..Default::default()
            },
            "page_token",
        ),
        (
            pb::SearchMessagesRequest {
                page_size: 1_001,
                ..Default::default()
            },
            "page_size",
        ),
        (
            pb::SearchMessagesRequest {
                created_after_unix_ms: 10,
                created_before_unix_ms: 5,
                ..Default::default()
            },
            "created_before_unix_ms",
        ),
        (
            pb::SearchMessagesRequest {
                last_status: 1_000,
                ..Default::default()
            },
            "last_status",
        ),
    ] {
        let e = c.raw().search_messages(r).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
        assert!(e.message().starts_with(field), "{field}: {}", e.message());
    }
    let _ = (code, message);
    server.stop().await;
}

#[tokio::test]
async fn an_event_types_search_keys_are_declared_checked_and_shown() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let put = |keys: Vec<&str>| pb::PutEventTypeRequest {
        event_type: Some(pb::EventType {
            name: "invoice.sent".into(),
            search_keys: keys.into_iter().map(str::to_owned).collect(),
            ..Default::default()
        }),
    };
    let e = c
        .raw()
        .put_event_type(put(vec!["invoice/id"]))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().starts_with("event_type.search_keys"),
        "{}",
        e.message()
    );
    let e = c
        .raw()
        .put_event_type(put(vec!["/a"; 9]))
        .await
        .unwrap_err();
    assert!(
        e.message().contains("over the limit of 8"),
        "{}",
        e.message()
    );
    let answer = c
        .raw()
        .put_event_type(put(vec!["/invoice/id"]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        answer.event_type.unwrap().search_keys,
        vec!["/invoice/id".to_owned()]
    );
    // Declared over the API, used at once, and kept across a restart.
    let id = c
        .enqueue(Event::to_queue("q", r#"{"invoice": {"id": "in_7"}}"#).event_type("invoice.sent"))
        .await
        .unwrap()
        .id;
    let server = server.restart().await;
    let mut c = server.client().await;
    let r = pb::SearchMessagesRequest {
        payload: [("/invoice/id".to_owned(), "in_7".to_owned())].into(),
        ..Default::default()
    };
    assert_eq!(all_ids(&mut c, r).await, vec![id]);
    let shown = c
        .raw()
        .get_event_type(pb::GetEventTypeRequest {
            name: "invoice.sent".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        shown.event_type.unwrap().search_keys,
        vec!["/invoice/id".to_owned()]
    );
    server.stop().await;
}

/// A webhook received on the ingest listener is indexed under its event type's search
/// keys and its source's, after its source's redaction (a masked value is not
/// searchable).
#[tokio::test]
async fn an_ingested_event_is_found_by_its_types_search_keys_after_redaction() {
    use crate::ingest::{SW_KEY, now_s, post, sw_headers, sw_source};
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    let mut source = sw_source("agents", "inbox");
    source.redact.remove = vec!["/data/email".into()];
    // The source's own key, and one its event type declares too (indexed once).
    source.search_keys = vec!["/data/agent".into(), "/data/run".into()];
    config.sources = vec![source];
    config.event_types = vec![hookd::catalog::EventTypeSpec {
        name: "run.finished".into(),
        description: String::new(),
        json_schema: None,
        json_schema_file: None,
        search_keys: vec!["/data/run".into(), "/data/email".into()],
    }];
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    let body = br#"{"type": "run.finished", "data": {"run": 7, "agent": "triage", "email": "a@example.com"}}"#;
    let sent = post(
        server.ingest,
        "agents",
        &sw_headers(SW_KEY, "msg_1", now_s(), body),
        body,
    )
    .await;
    assert_eq!(sent.status, 202, "{sent:?}");
    let id = sent.json()["id"].as_str().unwrap().to_owned();
    let by = |pointer: &str, value: &str| pb::SearchMessagesRequest {
        payload: [(pointer.to_owned(), value.to_owned())].into(),
        ..Default::default()
    };
    assert_eq!(
        all_ids(&mut c, by("/data/run", "7")).await,
        vec![id.clone()]
    );
    assert_eq!(all_ids(&mut c, by("/data/agent", "triage")).await, vec![id]);
    assert!(
        all_ids(&mut c, by("/data/agent", "other")).await.is_empty(),
        "another value is not found"
    );
    // The source shows its keys, and a bad one is refused by name.
    let shown = c
        .raw()
        .get_source(pb::GetSourceRequest {
            name: "agents".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .source
        .unwrap();
    assert_eq!(shown.search_keys, vec!["/data/agent", "/data/run"]);
    let page = server.http_get("/ui/sources?q=agen").await;
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("<code>/data/agent</code>"),
        "{page}"
    );
    let page = server.http_get("/ui/sources?q=nothing").await;
    assert!(page.contains("None of the 1 sources matches."), "{page}");
    let mut bad = shown.clone();
    bad.name = "agents-2".into();
    bad.secrets = vec![crate::ingest::sw_secret(SW_KEY)];
    bad.search_keys = vec!["/data/agent".into(), "data/run".into()];
    let e = c
        .raw()
        .put_source(pb::PutSourceRequest { source: Some(bad) })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("source.search_keys[1]: "), "{e:?}");
    assert!(
        all_ids(&mut c, by("/data/email", "a@example.com"))
            .await
            .is_empty(),
        "a redacted value is not in the index"
    );
    server.stop().await;
}
