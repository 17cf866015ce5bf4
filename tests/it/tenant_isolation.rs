//! Issue #51, 3: a tenant's token never sees or changes another tenant's objects. Tenant
//! B holds an endpoint, a queue with a message, a subscription, a dead letter and a token;
//! tenant A's admin token names each of them in every RPC of the .proto (a test below
//! fails when an RPC has no check here) and over the HTTP/JSON routes. The answer is
//! NOT_FOUND (404), or an empty list, never B's object and never PERMISSION_DENIED about
//! it; B's objects are unchanged after. A's token is then revoked and refused at once.

use hookd_client::pb;
use hookd_client::pb::hookd_client::HookdClient;
use serde_json::json;
use tonic::Code;
use tonic::transport::Channel;

use crate::harness::TestServer;
use crate::rest::call_with;
use crate::security::{OPS, secured};

const HEADER: &str = "x-hookd-tenant";

/// `message` with a bearer token and, when given, the tenant an operator names.
fn call<T>(token: &str, tenant: Option<&str>, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let m = request.metadata_mut();
    m.insert("authorization", format!("Bearer {token}").parse().unwrap());
    if let Some(t) = tenant {
        m.insert(HEADER, t.parse().unwrap());
    }
    request
}

/// Asserts a call was answered NOT_FOUND.
fn not_found<T: std::fmt::Debug>(r: Result<T, tonic::Status>, rpc: &str) {
    match r {
        Err(s) if s.code() == Code::NotFound => {}
        other => panic!("{rpc}: {other:?}"),
    }
}

/// Every RPC of the .proto, by name (what the checks below must cover).
fn rpcs() -> Vec<String> {
    let proto = include_str!("../../proto/hookd/v1/hookd.proto");
    proto
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .filter_map(|l| l.split('(').next())
        .map(str::to_owned)
        .collect()
}

/// What tenant B holds, made by the operator.
struct B {
    message: String,
    dead: String,
    lease: String,
}

async fn tenant_b(api: &mut HookdClient<Channel>) -> B {
    api.create_tenant(call(
        OPS,
        None,
        pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "b".into(),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    api.put_endpoint(call(
        OPS,
        Some("b"),
        pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: "e".into(),
                url: "http://127.0.0.1:9/b".into(),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    api.put_subscription(call(
        OPS,
        Some("b"),
        pb::PutSubscriptionRequest {
            subscription: Some(pb::Subscription {
                name: "s".into(),
                event_types: vec!["b.*".into()],
                destination: Some(pb::subscription::Destination::Queue("q".into())),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    api.put_queue(call(
        OPS,
        Some("b"),
        pb::PutQueueRequest {
            queue: Some(pb::Queue {
                name: "bq".into(),
                fifo: "block".into(),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    api.put_event_type(call(
        OPS,
        Some("b"),
        pb::PutEventTypeRequest {
            event_type: Some(pb::EventType {
                name: "b.created".into(),
                json_schema: r#"{"type": "object", "required": ["b_only"]}"#.into(),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    api.put_source(call(
        OPS,
        Some("b"),
        pb::PutSourceRequest {
            source: Some(pb::Source {
                name: "s".into(),
                scheme: "github".into(),
                secrets: vec!["a github secret, long enough".into()],
                route: Some(pb::source::Route::Queue("q".into())),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    let enqueue = |queue: &str, attempts: u32| pb::EnqueueRequest {
        destination: Some(pb::enqueue_request::Destination::Queue(queue.into())),
        payload: b"b's secret".to_vec(),
        max_attempts: attempts,
        ..Default::default()
    };
    let message = api
        .enqueue(call(OPS, Some("b"), enqueue("q", 0)))
        .await
        .unwrap()
        .into_inner()
        .id;
    let dead = api
        .enqueue(call(OPS, Some("b"), enqueue("d", 1)))
        .await
        .unwrap()
        .into_inner()
        .id;
    let leased = api
        .receive(call(
            OPS,
            Some("b"),
            pb::ReceiveRequest {
                queue: "d".into(),
                max_messages: 1,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    api.nack(call(
        OPS,
        Some("b"),
        pb::NackRequest {
            lease_id: leased.messages[0].lease_id.clone(),
            reason: "poison".into(),
            ..Default::default()
        },
    ))
    .await
    .unwrap();
    let leased = api
        .receive(call(
            OPS,
            Some("b"),
            pb::ReceiveRequest {
                queue: "q".into(),
                max_messages: 1,
                visibility_timeout_ms: 600_000,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    api.create_token(call(
        OPS,
        Some("b"),
        pb::CreateTokenRequest {
            token: Some(pb::Token {
                name: "b-token".into(),
                scopes: vec!["admin".into()],
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    B {
        message,
        dead,
        lease: leased.messages[0].lease_id.clone(),
    }
}

#[tokio::test]
async fn a_tenants_token_never_reaches_another_tenants_objects() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        secured(dir.path(), ""),
        hookd_core::clock::ManualClock::new(1_700_000_000_000),
    )
    .await;
    let mut api = HookdClient::connect(server.grpc.clone()).await.unwrap();
    let b = tenant_b(&mut api).await;
    api.create_tenant(call(
        OPS,
        None,
        pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "a".into(),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    let a_token = api
        .create_token(call(
            OPS,
            Some("a"),
            pb::CreateTokenRequest {
                token: Some(pb::Token {
                    name: "a-admin".into(),
                    scopes: vec!["admin".into()],
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(a_token.secret.starts_with("hookd_"));
    let a = a_token.secret.as_str();
    let mut checked: Vec<&str> = Vec::new();

    // Calls that name B's objects: NOT_FOUND.
    not_found(
        api.get_message(call(
            a,
            None,
            pb::GetMessageRequest {
                id: b.message.clone(),
            },
        ))
        .await,
        "GetMessage",
    );
    not_found(
        api.get_endpoint(call(
            a,
            None,
            pb::GetEndpointRequest {
                name: "e".into(),
                reveal_secrets: true,
            },
        ))
        .await,
        "GetEndpoint",
    );
    not_found(
        api.delete_endpoint(call(
            a,
            None,
            pb::DeleteEndpointRequest { name: "e".into() },
        ))
        .await,
        "DeleteEndpoint",
    );
    not_found(
        api.pause_endpoint(call(
            a,
            None,
            pb::PauseEndpointRequest {
                name: "e".into(),
                reason: String::new(),
            },
        ))
        .await,
        "PauseEndpoint",
    );
    not_found(
        api.resume_endpoint(call(
            a,
            None,
            pb::ResumeEndpointRequest { name: "e".into() },
        ))
        .await,
        "ResumeEndpoint",
    );
    not_found(
        api.ack(call(
            a,
            None,
            pb::AckRequest {
                lease_ids: vec![b.lease.clone()],
            },
        ))
        .await,
        "Ack",
    );
    not_found(
        api.nack(call(
            a,
            None,
            pb::NackRequest {
                lease_id: b.lease.clone(),
                ..Default::default()
            },
        ))
        .await,
        "Nack",
    );
    not_found(
        api.replay_dead_letters(call(
            a,
            None,
            pb::ReplayDeadLettersRequest {
                ids: vec![b.dead.clone()],
                ..Default::default()
            },
        ))
        .await,
        "ReplayDeadLetters",
    );
    not_found(
        api.get_subscription(call(
            a,
            None,
            pb::GetSubscriptionRequest { name: "s".into() },
        ))
        .await,
        "GetSubscription",
    );
    not_found(
        api.delete_subscription(call(
            a,
            None,
            pb::DeleteSubscriptionRequest { name: "s".into() },
        ))
        .await,
        "DeleteSubscription",
    );
    not_found(
        api.revoke_token(call(
            a,
            None,
            pb::RevokeTokenRequest {
                name: "b-token".into(),
            },
        ))
        .await,
        "RevokeToken",
    );
    not_found(
        api.get_source(call(a, None, pb::GetSourceRequest { name: "s".into() }))
            .await,
        "GetSource",
    );
    not_found(
        api.delete_source(call(a, None, pb::DeleteSourceRequest { name: "s".into() }))
            .await,
        "DeleteSource",
    );
    not_found(
        api.get_queue(call(a, None, pb::GetQueueRequest { name: "bq".into() }))
            .await,
        "GetQueue",
    );
    not_found(
        api.delete_queue(call(a, None, pb::DeleteQueueRequest { name: "bq".into() }))
            .await,
        "DeleteQueue",
    );
    not_found(
        api.get_event_type(call(
            a,
            None,
            pb::GetEventTypeRequest {
                name: "b.created".into(),
            },
        ))
        .await,
        "GetEventType",
    );
    not_found(
        api.delete_event_type(call(
            a,
            None,
            pb::DeleteEventTypeRequest {
                name: "b.created".into(),
            },
        ))
        .await,
        "DeleteEventType",
    );
    // A portal link to B, or B's links revoked: as for a tenant that does not exist.
    not_found(
        api.create_portal_link(call(
            a,
            None,
            pb::CreatePortalLinkRequest {
                tenant: "b".into(),
                ..Default::default()
            },
        ))
        .await,
        "tenant",
    );
    not_found(
        api.revoke_portal_links(call(
            a,
            None,
            pb::RevokePortalLinksRequest {
                tenant: "b".into(),
                link_id: String::new(),
            },
        ))
        .await,
        "tenant",
    );
    // Naming B as the tenant: NOT_FOUND, as for a tenant that does not exist.
    not_found(
        api.list_endpoints(call(a, Some("b"), pb::ListEndpointsRequest {}))
            .await,
        "x-hookd-tenant",
    );
    checked.extend([
        "GetMessage",
        "GetEndpoint",
        "DeleteEndpoint",
        "PauseEndpoint",
        "ResumeEndpoint",
        "Ack",
        "Nack",
        "ReplayDeadLetters",
        "GetSubscription",
        "DeleteSubscription",
        "RevokeToken",
        "GetSource",
        "DeleteSource",
        "GetQueue",
        "DeleteQueue",
        "GetEventType",
        "DeleteEventType",
        "CreatePortalLink",
        "RevokePortalLinks",
    ]);

    // Lists and reads: A's own only (empty), never B's.
    let got = api
        .receive(call(
            a,
            None,
            pb::ReceiveRequest {
                queue: "q".into(),
                max_messages: 10,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(got.messages.is_empty());
    let endpoints = api
        .list_endpoints(call(a, None, pb::ListEndpointsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(endpoints.endpoints.is_empty());
    let dead = api
        .list_dead_letters(call(a, None, pb::ListDeadLettersRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(dead.dead_letters.is_empty());
    let analysis = api
        .analyze_dead_letters(call(a, None, pb::AnalyzeDeadLettersRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(analysis.destinations.is_empty() && analysis.scanned == 0);
    let subs = api
        .list_subscriptions(call(a, None, pb::ListSubscriptionsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(subs.subscriptions.is_empty());
    let sources = api
        .list_sources(call(a, None, pb::ListSourcesRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(sources.sources.is_empty());
    let tokens = api
        .list_tokens(call(a, None, pb::ListTokensRequest {}))
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = tokens.tokens.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a-admin"]);
    let stats = api
        .stats(call(a, None, pb::StatsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(stats.destinations.is_empty(), "{:?}", stats.destinations);
    assert_eq!(stats.total.map(|t| t.pending + t.in_flight), Some(0));
    let purged = api
        .purge_dead_letters(call(
            a,
            None,
            pb::PurgeDeadLettersRequest {
                ids: vec![b.dead.clone()],
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(purged.purged, 0);
    let queues = api
        .list_queues(call(a, None, pb::ListQueuesRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(queues.queues.is_empty(), "{queues:?}");
    let types = api
        .list_event_types(call(a, None, pb::ListEventTypesRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert!(types.event_types.is_empty(), "{types:?}");
    // A search of A's finds none of B's messages, even by B's message id.
    for request in [
        pb::SearchMessagesRequest::default(),
        pb::SearchMessagesRequest {
            event_id: b.message.clone(),
            ..Default::default()
        },
    ] {
        let found = api
            .search_messages(call(a, None, request))
            .await
            .unwrap()
            .into_inner();
        assert!(found.messages.is_empty(), "{found:?}");
    }
    let of_b = api
        .search_messages(call(
            OPS,
            Some("b"),
            pb::SearchMessagesRequest {
                event_id: b.message.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(of_b.messages.len(), 1, "B's own search finds it");
    // A purge of A's takes none of B's messages, by id or by a search for its id.
    for request in [
        pb::PurgeMessagesRequest {
            ids: vec![b.message.clone()],
            ..Default::default()
        },
        pb::PurgeMessagesRequest {
            search: Some(pb::SearchMessagesRequest {
                event_id: b.message.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
    ] {
        let purged = api
            .purge_messages(call(a, None, request))
            .await
            .unwrap()
            .into_inner();
        assert_eq!((purged.matched, purged.purged), (0, 0), "{purged:?}");
    }
    let still = api
        .search_messages(call(
            OPS,
            Some("b"),
            pb::SearchMessagesRequest {
                event_id: b.message.clone(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(still.messages.len(), 1, "B's message is still there");
    checked.extend([
        "PurgeMessages",
        "SearchMessages",
        "Receive",
        "ListEndpoints",
        "ListDeadLetters",
        "AnalyzeDeadLetters",
        "ListSubscriptions",
        "ListSources",
        "ListQueues",
        "ListTokens",
        "Stats",
        "PurgeDeadLetters",
        "ListEventTypes",
    ]);
    // B's replay job: A can neither see, change, nor make one of B's messages.
    let b_job = api
        .create_replay_job(call(
            OPS,
            Some("b"),
            // A job that selects nothing (B's dead letter must stay dead below).
            pb::CreateReplayJobRequest {
                search: Some(pb::SearchMessagesRequest {
                    event_type: "none.such".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap();
    not_found(
        api.get_replay_job(call(
            a,
            None,
            pb::GetReplayJobRequest {
                id: b_job.id.clone(),
            },
        ))
        .await,
        "GetReplayJob",
    );
    not_found(
        api.update_replay_job(call(
            a,
            None,
            pb::UpdateReplayJobRequest {
                id: b_job.id.clone(),
                action: pb::ReplayJobAction::Cancel as i32,
            },
        ))
        .await,
        "UpdateReplayJob",
    );
    not_found(
        api.create_replay_job(call(
            a,
            None,
            pb::CreateReplayJobRequest {
                ids: vec![b.dead.clone()],
                ..Default::default()
            },
        ))
        .await,
        "CreateReplayJob",
    );
    let jobs = api
        .list_replay_jobs(call(a, None, pb::ListReplayJobsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(jobs.jobs.is_empty(), "{jobs:?}");
    let b_jobs = api
        .list_replay_jobs(call(OPS, Some("b"), pb::ListReplayJobsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(b_jobs.jobs.len(), 1, "B's own list has it");
    // B's endpoint's catch-up: A has no endpoint of that name.
    not_found(
        api.list_endpoint_events(call(
            a,
            None,
            pb::ListEndpointEventsRequest {
                endpoint: "e".into(),
                ..Default::default()
            },
        ))
        .await,
        "ListEndpointEvents",
    );
    checked.extend([
        "ListEndpointEvents",
        "CreateReplayJob",
        "GetReplayJob",
        "UpdateReplayJob",
        "ListReplayJobs",
    ]);

    // Writes of A's own objects of the same names leave B's alone.
    api.put_endpoint(call(
        a,
        None,
        pb::PutEndpointRequest {
            endpoint: Some(pb::Endpoint {
                name: "e".into(),
                url: "http://127.0.0.1:9/a".into(),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    api.put_subscription(call(
        a,
        None,
        pb::PutSubscriptionRequest {
            subscription: Some(pb::Subscription {
                name: "s".into(),
                event_types: vec!["a.*".into()],
                destination: Some(pb::subscription::Destination::Endpoint("e".into())),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    let sent = api
        .enqueue(call(
            a,
            None,
            pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Queue("q".into())),
                payload: b"a's".to_vec(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let batch = api
        .enqueue_batch(call(
            a,
            None,
            pb::EnqueueBatchRequest {
                events: vec![pb::EnqueueRequest {
                    destination: Some(pb::enqueue_request::Destination::Topic("b.created".into())),
                    payload: b"{}".to_vec(),
                    ..Default::default()
                }],
            },
        ))
        .await
        .unwrap()
        .into_inner();
    match &batch.results[0].result {
        Some(pb::enqueue_result::Result::Ok(ok)) => {
            assert_eq!(
                ok.subscribers, 0,
                "B's subscription takes none of A's publishes"
            );
        }
        other => panic!("{other:?}"),
    }
    // A's event type of the name of B's is A's own: A's events are held to A's schema,
    // not B's; B's keeps its own.
    let made = api
        .put_event_type(call(
            a,
            None,
            pb::PutEventTypeRequest {
                event_type: Some(pb::EventType {
                    name: "b.created".into(),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(made.created, "{made:?}");
    let typed = |payload: &str| pb::EnqueueRequest {
        destination: Some(pb::enqueue_request::Destination::Queue("q".into())),
        event_type: "b.created".into(),
        payload: payload.as_bytes().to_vec(),
        ..Default::default()
    };
    api.enqueue(call(a, None, typed("{}"))).await.unwrap();
    let refused = api
        .enqueue(call(OPS, Some("b"), typed("{}")))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let bt = api
        .get_event_type(call(
            OPS,
            Some("b"),
            pb::GetEventTypeRequest {
                name: "b.created".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .event_type
        .unwrap();
    assert!(bt.json_schema.contains("b_only"), "{bt:?}");
    // A's queue of the name of B's is A's own; B's keeps its settings.
    let made = api
        .put_queue(call(
            a,
            None,
            pb::PutQueueRequest {
                queue: Some(pb::Queue {
                    name: "bq".into(),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(made.created, "{made:?}");
    let bq = api
        .get_queue(call(
            OPS,
            Some("b"),
            pb::GetQueueRequest { name: "bq".into() },
        ))
        .await
        .unwrap()
        .into_inner()
        .queue
        .unwrap();
    assert_eq!(bq.fifo, "block");
    // A's source of the name of B's is A's own, at A's path; B's is unchanged.
    let made = api
        .put_source(call(
            a,
            None,
            pb::PutSourceRequest {
                source: Some(pb::Source {
                    name: "s".into(),
                    scheme: "github".into(),
                    secrets: vec!["a github secret, long enough".into()],
                    route: Some(pb::source::Route::Queue("mine".into())),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(made.created, "{made:?}");
    assert_eq!(made.source.map(|s| s.path).as_deref(), Some("/in/a/s"));
    let bs = api
        .get_source(call(
            OPS,
            Some("b"),
            pb::GetSourceRequest { name: "s".into() },
        ))
        .await
        .unwrap()
        .into_inner()
        .source
        .unwrap();
    assert_eq!(bs.route, Some(pb::source::Route::Queue("q".into())));
    // The operator's calls: refused to a tenant's token, naming nothing of B's.
    for (rpc, result) in [
        (
            "CreateTenant",
            api.create_tenant(call(
                a,
                None,
                pb::CreateTenantRequest {
                    tenant: Some(pb::Tenant {
                        name: "c".into(),
                        ..Default::default()
                    }),
                },
            ))
            .await
            .map(drop),
        ),
        (
            "GetTenant",
            api.get_tenant(call(a, None, pb::GetTenantRequest { name: "b".into() }))
                .await
                .map(drop),
        ),
        (
            "ListTenants",
            api.list_tenants(call(a, None, pb::ListTenantsRequest::default()))
                .await
                .map(drop),
        ),
        (
            "UpdateTenant",
            api.update_tenant(call(
                a,
                None,
                pb::UpdateTenantRequest {
                    tenant: Some(pb::Tenant {
                        name: "b".into(),
                        ..Default::default()
                    }),
                },
            ))
            .await
            .map(drop),
        ),
        (
            "DeleteTenant",
            api.delete_tenant(call(
                a,
                None,
                pb::DeleteTenantRequest {
                    name: "b".into(),
                    force: true,
                },
            ))
            .await
            .map(drop),
        ),
    ] {
        let e = result.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{rpc}: {e:?}");
        assert!(!e.message().contains("\"b\""), "{rpc}: {e:?}");
        checked.push(rpc);
    }
    checked.extend([
        "PutEndpoint",
        "PutSubscription",
        "Enqueue",
        "EnqueueBatch",
        "PutSource",
        "PutQueue",
        "PutEventType",
        "CreateToken",
    ]);

    // Watch: A's stream shows A's events only (B's dead letter came before it opened; a
    // B event now, then an A one: the first A sees is A's).
    let mut watch = api
        .watch(call(a, None, pb::WatchRequest::default()))
        .await
        .unwrap()
        .into_inner();
    api.pause_endpoint(call(
        OPS,
        Some("b"),
        pb::PauseEndpointRequest {
            name: "e".into(),
            reason: "b's".into(),
        },
    ))
    .await
    .unwrap();
    api.pause_endpoint(call(
        a,
        None,
        pb::PauseEndpointRequest {
            name: "e".into(),
            reason: "a's".into(),
        },
    ))
    .await
    .unwrap();
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), watch.message())
        .await
        .expect("an event")
        .unwrap()
        .expect("one");
    assert_eq!(
        (first.kind.as_str(), first.detail.as_str()),
        ("endpoint_paused", "a's")
    );
    assert_eq!(first.destination, "endpoint:e", "keyed as A reads it");
    drop(watch);
    checked.push("Watch");

    // B's objects as they were.
    let e = api
        .get_endpoint(call(
            OPS,
            Some("b"),
            pb::GetEndpointRequest {
                name: "e".into(),
                reveal_secrets: false,
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .endpoint
        .unwrap();
    assert_eq!(e.url, "http://127.0.0.1:9/b");
    let m = api
        .get_message(call(
            OPS,
            Some("b"),
            pb::GetMessageRequest {
                id: b.message.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(m.payload, b"b's secret");
    let s = api
        .get_subscription(call(
            OPS,
            Some("b"),
            pb::GetSubscriptionRequest { name: "s".into() },
        ))
        .await
        .unwrap()
        .into_inner()
        .subscription
        .unwrap();
    assert_eq!(s.event_types, ["b.*"]);
    let dead = api
        .list_dead_letters(call(OPS, Some("b"), pb::ListDeadLettersRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(dead.dead_letters.len(), 1);
    assert!(sent.id != b.message);

    // Over HTTP/JSON with A's token: 404, or A's own (empty) lists.
    let bearer = format!("Bearer {a}");
    let auth = [("authorization", bearer.as_str())];
    for (method, path, body) in [
        ("GET", format!("/v1/messages/{}", b.message), ""),
        ("GET", "/v1/endpoints/zz-b-only".to_owned(), ""),
        ("DELETE", "/v1/subscriptions/zz".to_owned(), ""),
        ("POST", "/v1/leases/ack".to_owned(), "__ack__"),
        ("DELETE", "/v1/tokens/b-token".to_owned(), ""),
    ] {
        let body = match body {
            "__ack__" => json!({"leaseIds": [b.lease]}).to_string(),
            other => other.to_owned(),
        };
        let answer = call_with(server.http, method, &path, &auth, &body).await;
        answer.error(404, "NOT_FOUND");
    }
    // A's own queue of the name of B's, never B's settings.
    let answer = call_with(server.http, "GET", "/v1/queues/bq", &auth, "").await;
    assert_eq!(answer.json()["queue"]["fifo"], "", "{answer:?}");
    let answer = call_with(server.http, "GET", "/v1/endpoints", &auth, "").await;
    assert_eq!(answer.json()["endpoints"][0]["url"], "http://127.0.0.1:9/a");
    let answer = call_with(server.http, "GET", "/v1/tokens", &auth, "").await;
    assert_eq!(answer.json()["tokens"][0]["name"], "a-admin");
    let answer = call_with(server.http, "GET", "/v1/tenants", &auth, "").await;
    answer.error(403, "PERMISSION_DENIED");
    let answer = call_with(
        server.http,
        "GET",
        "/v1/endpoints",
        &[("authorization", bearer.as_str()), (HEADER, "b")],
        "",
    )
    .await;
    answer.error(404, "NOT_FOUND");
    // The console is an operator's: A's admin token gets no session (its pages read every
    // tenant's objects).
    let console = call_with(server.http, "GET", "/ui/endpoints", &auth, "").await;
    assert_eq!(console.status(), 403, "{console:?}");
    assert!(format!("{console:?}").contains("tenant"), "{console:?}");

    // Every RPC of the .proto was called above with A's token.
    for rpc in rpcs() {
        assert!(
            checked.contains(&rpc.as_str()),
            "{rpc} has no cross-tenant check in this test"
        );
    }

    // Revoked: refused on the next call.
    api.revoke_token(call(
        OPS,
        Some("a"),
        pb::RevokeTokenRequest {
            name: "a-admin".into(),
        },
    ))
    .await
    .unwrap();
    let e = api
        .list_endpoints(call(a, None, pb::ListEndpointsRequest {}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    server.stop().await;
}

/// A token limited to named destinations uses those and no other of its own tenant's:
/// it enqueues to and receives from its queue; another queue, a URL, a topic, or a call
/// that spans destinations is PERMISSION_DENIED; a lease of another queue's message is
/// NOT_FOUND; its Stats list its queue only.
#[tokio::test]
async fn a_token_limited_to_destinations_uses_only_those() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        secured(dir.path(), ""),
        hookd_core::clock::ManualClock::new(1_700_000_000_000),
    )
    .await;
    let mut api = HookdClient::connect(server.grpc.clone()).await.unwrap();
    api.create_tenant(call(
        OPS,
        None,
        pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "a".into(),
                ..Default::default()
            }),
        },
    ))
    .await
    .unwrap();
    let limited = api
        .create_token(call(
            OPS,
            Some("a"),
            pb::CreateTokenRequest {
                token: Some(pb::Token {
                    name: "worker".into(),
                    scopes: vec!["enqueue".into(), "consume".into(), "read".into()],
                    destinations: vec!["queue:mine".into()],
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .secret;
    let t = limited.as_str();
    let enqueue = |queue: &str| pb::EnqueueRequest {
        destination: Some(pb::enqueue_request::Destination::Queue(queue.into())),
        payload: b"x".to_vec(),
        ..Default::default()
    };
    api.enqueue(call(t, None, enqueue("mine"))).await.unwrap();
    // The operator puts a message in another queue of the tenant's.
    api.enqueue(call(OPS, Some("a"), enqueue("theirs")))
        .await
        .unwrap();
    let theirs = api
        .receive(call(
            OPS,
            Some("a"),
            pb::ReceiveRequest {
                queue: "theirs".into(),
                max_messages: 1,
                visibility_timeout_ms: 600_000,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    let denied = |r: Result<_, tonic::Status>, what: &str| match r {
        Err(s) if s.code() == Code::PermissionDenied => {}
        other => panic!("{what}: {other:?}"),
    };
    denied(
        api.enqueue(call(t, None, enqueue("theirs")))
            .await
            .map(drop),
        "enqueue to another queue",
    );
    denied(
        api.enqueue(call(
            t,
            None,
            pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Topic("x.y".into())),
                payload: b"{}".to_vec(),
                ..Default::default()
            },
        ))
        .await
        .map(drop),
        "publish",
    );
    denied(
        api.receive(call(
            t,
            None,
            pb::ReceiveRequest {
                queue: "theirs".into(),
                max_messages: 1,
                ..Default::default()
            },
        ))
        .await
        .map(drop),
        "receive another queue",
    );
    denied(
        api.list_dead_letters(call(t, None, pb::ListDeadLettersRequest::default()))
            .await
            .map(drop),
        "dead letters of every destination",
    );
    not_found(
        api.ack(call(
            t,
            None,
            pb::AckRequest {
                lease_ids: vec![theirs.messages[0].lease_id.clone()],
            },
        ))
        .await,
        "ack another queue's lease",
    );
    let mine = api
        .receive(call(
            t,
            None,
            pb::ReceiveRequest {
                queue: "mine".into(),
                max_messages: 10,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(mine.messages.len(), 1);
    api.ack(call(
        t,
        None,
        pb::AckRequest {
            lease_ids: vec![mine.messages[0].lease_id.clone()],
        },
    ))
    .await
    .unwrap();
    let stats = api
        .stats(call(t, None, pb::StatsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let keys: Vec<&str> = stats
        .destinations
        .iter()
        .map(|d| d.destination.as_str())
        .collect();
    assert_eq!(keys, ["queue:mine"]);
    // It grants nothing beyond itself.
    denied(
        api.create_token(call(
            t,
            None,
            pb::CreateTokenRequest {
                token: Some(pb::Token {
                    name: "more".into(),
                    scopes: vec!["enqueue".into()],
                    ..Default::default()
                }),
            },
        ))
        .await
        .map(drop),
        "a token without the admin scope makes none",
    );
    server.stop().await;
}
