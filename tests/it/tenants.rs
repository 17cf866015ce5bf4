//! Tenants against a real hookd (issue #51): an operator makes, reads, lists, changes and
//! deletes them over gRPC and HTTP/JSON; names the tenant a call acts on with
//! `x-hookd-tenant` (without it, `default`); and one tenant's objects and messages are
//! never another's.

use hookd_client::pb;
use serde_json::json;

use crate::harness::TestServer;
use crate::rest::call_with;

const HEADER: &str = "x-hookd-tenant";

/// `message` as a call that acts on `tenant` (an operator naming it).
pub(crate) fn on<T>(tenant: &str, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert(HEADER, tenant.parse().expect("a header value"));
    request
}

fn tenant(name: &str) -> pb::Tenant {
    pb::Tenant {
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn an_operator_manages_tenants_and_each_tenants_objects_are_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;

    // Made over gRPC and over JSON; a name taken is ALREADY_EXISTS (409).
    let made = c
        .raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(pb::Tenant {
                name: "acme".into(),
                display_name: "Acme Corp".into(),
                metadata: [("plan".to_owned(), "pro".to_owned())].into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .tenant
        .unwrap();
    assert!(made.created_unix_ms > 0 && made.display_name == "Acme Corp");
    let posted = call_with(
        server.http,
        "POST",
        "/v1/tenants",
        &[],
        r#"{"name":"beta"}"#,
    )
    .await;
    assert_eq!(posted.status(), 200, "{posted:?}");
    assert_eq!(posted.json()["tenant"]["name"], "beta");
    let again = c
        .raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(tenant("acme")),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists, "{again:?}");
    let again = call_with(
        server.http,
        "POST",
        "/v1/tenants",
        &[],
        r#"{"name":"beta"}"#,
    )
    .await;
    assert!(again.error(409, "ALREADY_EXISTS").contains("beta"));
    let bad = c
        .raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(tenant("no spaces")),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().starts_with("tenant.name:"), "{bad:?}");

    // Read, listed a page at a time, changed.
    let listed = c
        .raw()
        .list_tenants(pb::ListTenantsRequest {
            page_size: 2,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = listed.tenants.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["acme", "beta"]);
    let rest = c
        .raw()
        .list_tenants(pb::ListTenantsRequest {
            page_size: 2,
            page_token: listed.next_page_token,
        })
        .await
        .unwrap()
        .into_inner();
    let names: Vec<&str> = rest.tenants.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        (names, rest.next_page_token.as_str()),
        (vec!["default"], "")
    );
    let changed = call_with(
        server.http,
        "PUT",
        "/v1/tenants/acme",
        &[],
        &json!({"displayName": "ACME", "metadata": {"plan": "enterprise"}}).to_string(),
    )
    .await;
    assert_eq!(changed.status(), 200, "{changed:?}");
    let got = c
        .raw()
        .get_tenant(pb::GetTenantRequest {
            name: "acme".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .tenant
        .unwrap();
    assert_eq!(got.display_name, "ACME");
    assert_eq!(got.metadata["plan"], "enterprise");
    assert_eq!(got.created_unix_ms, made.created_unix_ms);

    // Each tenant's endpoint `orders`, and a message to it; `default` has none.
    for name in ["acme", "beta"] {
        c.raw()
            .put_endpoint(on(
                name,
                pb::PutEndpointRequest {
                    endpoint: Some(pb::Endpoint {
                        name: "orders".into(),
                        url: format!("http://127.0.0.1:9/{name}"),
                        ..Default::default()
                    }),
                },
            ))
            .await
            .unwrap();
    }
    let listed = |c: &mut hookd_client::Client, name: &'static str| {
        let request = match name {
            "" => tonic::Request::new(pb::ListEndpointsRequest {}),
            name => on(name, pb::ListEndpointsRequest {}),
        };
        let api = c.raw().clone();
        async move {
            let mut api = api;
            let endpoints = api.list_endpoints(request).await.unwrap().into_inner();
            endpoints
                .endpoints
                .into_iter()
                .map(|e| e.url)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(&mut c, "acme").await, ["http://127.0.0.1:9/acme"]);
    assert_eq!(listed(&mut c, "beta").await, ["http://127.0.0.1:9/beta"]);
    assert!(listed(&mut c, "").await.is_empty(), "default has none");
    let sent = c
        .raw()
        .enqueue(on(
            "acme",
            pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Queue("jobs".into())),
                payload: b"acme's".to_vec(),
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    // Its figures are its own; an operator without a header sees the whole hookd.
    let stats = |c: &mut hookd_client::Client, request: tonic::Request<pb::StatsRequest>| {
        let mut api = c.raw().clone();
        async move { api.stats(request).await.unwrap().into_inner() }
    };
    let acme = stats(&mut c, on("acme", pb::StatsRequest::default())).await;
    let keys: Vec<String> = acme
        .destinations
        .iter()
        .map(|d| d.destination.clone())
        .collect();
    assert!(keys.contains(&"queue:jobs".to_owned()), "{keys:?}");
    assert_eq!(acme.total.as_ref().map(|t| t.pending), Some(1));
    let beta = stats(&mut c, on("beta", pb::StatsRequest::default())).await;
    assert!(
        beta.destinations
            .iter()
            .all(|d| d.destination != "queue:jobs")
    );
    assert_eq!(beta.total.as_ref().map(|t| t.pending), Some(0));
    let whole = stats(&mut c, tonic::Request::new(pb::StatsRequest::default())).await;
    let keys: Vec<String> = whole
        .destinations
        .iter()
        .map(|d| d.destination.clone())
        .collect();
    assert!(keys.iter().any(|k| k.ends_with("/queue:jobs")), "{keys:?}");
    assert!(!keys.contains(&"queue:jobs".to_owned()), "{keys:?}");

    // Subscriptions are a tenant's: its publishes reach its own only.
    c.raw()
        .put_subscription(on(
            "acme",
            pb::PutSubscriptionRequest {
                subscription: Some(pb::Subscription {
                    name: "orders".into(),
                    event_types: vec!["order.*".into()],
                    destination: Some(pb::subscription::Destination::Queue("audit".into())),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap();
    let publish = |tenant: &str| {
        on(
            tenant,
            pb::EnqueueRequest {
                destination: Some(pb::enqueue_request::Destination::Topic(
                    "order.created".into(),
                )),
                payload: b"{}".to_vec(),
                ..Default::default()
            },
        )
    };
    let to_acme = c.raw().enqueue(publish("acme")).await.unwrap().into_inner();
    assert_eq!(to_acme.subscribers, 1);
    let to_beta = c.raw().enqueue(publish("beta")).await.unwrap().into_inner();
    assert_eq!(to_beta.subscribers, 0, "beta has no subscription");
    let subs = c
        .raw()
        .list_subscriptions(on("beta", pb::ListSubscriptionsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(subs.subscriptions.is_empty());
    let e = c
        .raw()
        .get_subscription(on(
            "beta",
            pb::GetSubscriptionRequest {
                name: "orders".into(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    // Another tenant, and the operator without a header, do not find it.
    for request in [
        on(
            "beta",
            pb::GetMessageRequest {
                id: sent.id.clone(),
            },
        ),
        tonic::Request::new(pb::GetMessageRequest {
            id: sent.id.clone(),
        }),
    ] {
        let e = c.raw().get_message(request).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    }
    let found = c
        .raw()
        .get_message(on(
            "acme",
            pb::GetMessageRequest {
                id: sent.id.clone(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(found.payload, b"acme's");
    let leased = c
        .raw()
        .receive(on(
            "beta",
            pb::ReceiveRequest {
                queue: "jobs".into(),
                max_messages: 10,
                ..Default::default()
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(
        leased.messages.is_empty(),
        "beta's queue of that name is its own"
    );
    // A tenant that does not exist: NOT_FOUND, over gRPC and JSON.
    let e = c
        .raw()
        .list_endpoints(on("nobody", pb::ListEndpointsRequest {}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(e.message().contains(HEADER), "{e:?}");
    let answer = crate::rest::call_with(
        server.http,
        "GET",
        "/v1/endpoints",
        &[(HEADER, "nobody")],
        "",
    )
    .await;
    answer.error(404, "NOT_FOUND");
    let answer =
        crate::rest::call_with(server.http, "GET", "/v1/endpoints", &[(HEADER, "acme")], "").await;
    assert_eq!(
        answer.json()["endpoints"][0]["url"],
        "http://127.0.0.1:9/acme"
    );

    // Deleting: refused with live messages, then forced; `default` never.
    let busy = c
        .raw()
        .delete_tenant(pb::DeleteTenantRequest {
            name: "acme".into(),
            force: false,
        })
        .await
        .unwrap_err();
    assert_eq!(busy.code(), tonic::Code::FailedPrecondition, "{busy:?}");
    let e = c
        .raw()
        .delete_tenant(pb::DeleteTenantRequest {
            name: "default".into(),
            force: true,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    let gone = call_with(
        server.http,
        "DELETE",
        "/v1/tenants/acme?force=true",
        &[],
        "",
    )
    .await;
    assert_eq!(gone.status(), 200, "{gone:?}");
    // The message to its queue and the publish's delivery; the endpoint and the
    // subscription.
    assert_eq!(gone.json()["removedMessages"], "2");
    assert_eq!(gone.json()["removedObjects"], "2");
    let e = c
        .raw()
        .list_endpoints(on("acme", pb::ListEndpointsRequest {}))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    // Made again: a new tenant, with nothing of the old one's.
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(tenant("acme")),
        })
        .await
        .unwrap();
    assert!(listed(&mut c, "acme").await.is_empty());
    let subs = c
        .raw()
        .list_subscriptions(on("acme", pb::ListSubscriptionsRequest {}))
        .await
        .unwrap()
        .into_inner();
    assert!(subs.subscriptions.is_empty(), "the old acme's went with it");
    let e = c
        .raw()
        .get_message(on("acme", pb::GetMessageRequest { id: sent.id }))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);

    // All of it survives a restart.
    let server = server.restart().await;
    let mut c = server.client().await;
    assert_eq!(listed(&mut c, "beta").await, ["http://127.0.0.1:9/beta"]);
    let all = c
        .raw()
        .list_tenants(pb::ListTenantsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.tenants.len(), 3);
    let e = c
        .raw()
        .create_tenant(pb::CreateTenantRequest { tenant: None })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    server.stop().await;
}

/// The CLI: `hookd tenants ...`, `hookd tokens ...` and `--tenant` (issue #51, 6), with an
/// operator's token from the config, then a tenant's token made by the CLI.
#[tokio::test]
async fn the_cli_manages_tenants_and_tokens_and_acts_on_a_named_tenant() {
    use crate::ctl::hookd;
    use crate::security::{OPS, secured};
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        secured(dir.path(), ""),
        hookd_core::clock::ManualClock::new(1_700_000_000_000),
    )
    .await;
    let g = server.grpc.as_str();
    let ok = |run: &crate::ctl::Run, what: &str| {
        assert_eq!(run.code, 0, "{what}: {} {}", run.stdout, run.stderr);
    };
    let run = hookd(
        g,
        &[
            "--token",
            OPS,
            "tenants",
            "create",
            "acme",
            "--display-name",
            "Acme",
            "--metadata",
            "plan=pro",
            "--quota",
            "max_live_messages=1000",
            "--quota",
            "max_endpoints=5",
        ],
        None,
    )
    .await;
    ok(&run, "create");
    let run = hookd(g, &["--token", OPS, "tenants", "list"], None).await;
    ok(&run, "list");
    assert!(
        run.stdout.contains("acme")
            && run.stdout.contains("plan=pro")
            && run
                .stdout
                .contains("max_live_messages=1000 max_endpoints=5"),
        "{}",
        run.stdout
    );
    let bad = hookd(
        g,
        &[
            "--token",
            OPS,
            "tenants",
            "update",
            "acme",
            "--quota",
            "max_widgets=1",
        ],
        None,
    )
    .await;
    assert!(
        bad.code != 0 && bad.stderr.contains("no quota \"max_widgets\""),
        "{}",
        bad.stderr
    );
    // An endpoint and a message of acme's, by --tenant.
    let run = hookd(
        g,
        &[
            "--token",
            OPS,
            "--tenant",
            "acme",
            "endpoints",
            "put",
            "orders",
            "--url",
            "http://127.0.0.1:9/acme",
        ],
        None,
    )
    .await;
    ok(&run, "endpoints put");
    let run = hookd(g, &["--token", OPS, "endpoints", "list"], None).await;
    ok(&run, "default's endpoints");
    assert!(!run.stdout.contains("orders"), "{}", run.stdout);
    // A token of acme's, printed once; it enqueues to acme's queue, and reads nothing else.
    let run = hookd(
        g,
        &[
            "--token", OPS, "--tenant", "acme", "tokens", "create", "agent", "--scope", "enqueue",
            "--scope", "read",
        ],
        None,
    )
    .await;
    ok(&run, "tokens create");
    let secret = run.stdout.lines().next().unwrap().trim().to_owned();
    assert!(secret.starts_with("hookd_"), "{}", run.stdout);
    let run = hookd(
        g,
        &["--token", &secret, "enqueue", "queue:jobs", "--data", "x"],
        None,
    )
    .await;
    ok(&run, "enqueue with the tenant's token");
    let run = hookd(g, &["--token", &secret, "--json", "stats"], None).await;
    ok(&run, "stats");
    let stats: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(stats["total"]["pending"], "1", "{stats}");
    let run = hookd(g, &["--token", &secret, "stats"], None).await;
    ok(&run, "stats as a table");
    assert!(
        run.stdout.contains("QUOTA") && run.stdout.contains("max_live_messages  1     1000"),
        "{}",
        run.stdout
    );
    let run = hookd(
        g,
        &["--token", &secret, "--json", "endpoints", "list"],
        None,
    )
    .await;
    ok(&run, "the tenant's endpoints");
    assert!(run.stdout.contains("orders"), "{}", run.stdout);
    let run = hookd(g, &["--token", &secret, "tenants", "list"], None).await;
    assert_ne!(run.code, 0, "a tenant's token manages no tenants");
    let run = hookd(
        g,
        &["--token", OPS, "--tenant", "acme", "tokens", "list"],
        None,
    )
    .await;
    ok(&run, "tokens list");
    assert!(run.stdout.contains("agent") && !run.stdout.contains(&secret));
    let run = hookd(
        g,
        &[
            "--token", OPS, "--tenant", "acme", "tokens", "revoke", "agent",
        ],
        None,
    )
    .await;
    ok(&run, "revoke");
    let run = hookd(g, &["--token", &secret, "stats"], None).await;
    assert_ne!(run.code, 0, "revoked: {}", run.stdout);
    assert!(run.stderr.contains("token"), "{}", run.stderr);
    let run = hookd(g, &["--token", OPS, "tenants", "delete", "acme"], None).await;
    assert_ne!(run.code, 0, "live messages: refused without --force");
    let run = hookd(
        g,
        &["--token", OPS, "tenants", "delete", "acme", "--force"],
        None,
    )
    .await;
    ok(&run, "delete --force");
    assert!(run.stdout.contains("1 messages"), "{}", run.stdout);
    server.stop().await;
}

/// The README's tenants block, as pasted, in `sh` with `hookd` on the PATH and `$OPS` an
/// operator's token.
#[tokio::test]
async fn the_readmes_tenant_block_runs_as_pasted() {
    use crate::security::{OPS, secured};
    let readme = include_str!("../../README.md");
    let block = crate::readme::blocks(readme, "## Tenants: one hookd for many customers");
    assert_eq!(block.len(), 1);
    let script = block[0].text.clone();
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        secured(dir.path(), ""),
        hookd_core::clock::ManualClock::new(1_700_000_000_000),
    )
    .await;
    let stdout = crate::readme::run_as_pasted(script, OPS, &server.grpc).await;
    assert!(
        stdout.contains("created tenant") && stdout.contains("hookd_"),
        "{stdout}"
    );
    assert!(stdout.contains("deleted tenant acme"), "{stdout}");
    server.stop().await;
}

/// A tenant's endpoint publishes its v1a public keys at `/jwks/{tenant}/{endpoint}`;
/// `/jwks/{endpoint}` is tenant default's, and an unknown tenant is 404 like an unknown
/// endpoint.
#[tokio::test]
async fn a_tenants_endpoint_has_its_jwks_under_the_tenants_name() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(tenant("acme")),
        })
        .await
        .unwrap();
    let whsk = format!(
        "whsk_{}",
        base64::engine::general_purpose::STANDARD.encode([7u8; 32])
    );
    c.raw()
        .put_endpoint(on(
            "acme",
            pb::PutEndpointRequest {
                endpoint: Some(pb::Endpoint {
                    name: "signed".into(),
                    url: "http://127.0.0.1:9/acme".into(),
                    secrets: vec![whsk],
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap();
    let status = |raw: &str| raw.split(' ').nth(1).unwrap_or_default().to_owned();
    let own = server.http_get("/jwks/acme/signed").await;
    assert_eq!(status(&own), "200", "{own}");
    assert_eq!(own.matches("\"kid\"").count(), 1, "{own}");
    for path in ["/jwks/signed", "/jwks/nobody/signed", "/jwks/acme/other"] {
        let raw = server.http_get(path).await;
        assert_eq!(status(&raw), "404", "{path}: {raw}");
    }
    server.stop().await;
}

/// A tenant's ingest source: made over the API under the tenant's name, posted to at
/// `/in/{tenant}/{source}`, routing to the tenant's own queue; the same name in `default`
/// is another source; it survives a restart and goes with its tenant.
#[tokio::test]
async fn a_tenants_ingest_source_receives_at_its_own_path_into_its_own_queue() {
    use crate::ingest::{SW_KEY, now_s, request, sw_headers, sw_secret};
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(tenant("acme")),
        })
        .await
        .unwrap();
    let source = |queue: &str| pb::PutSourceRequest {
        source: Some(pb::Source {
            name: "hooks".into(),
            scheme: "standard-webhooks".into(),
            secrets: vec![sw_secret(SW_KEY)],
            route: Some(pb::source::Route::Queue(queue.into())),
            ..Default::default()
        }),
    };
    let made = c
        .raw()
        .put_source(on("acme", source("acme-in")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(made.source.unwrap().path, "/in/acme/hooks");
    c.raw().put_source(source("default-in")).await.unwrap();
    let post = |server_ingest, path: String, id: &'static str| async move {
        let body = br#"{"type":"order.paid"}"#;
        request(
            server_ingest,
            "POST",
            &path,
            &sw_headers(SW_KEY, id, now_s(), body),
            body,
        )
        .await
    };
    let to_acme = post(server.ingest, "/in/acme/hooks".into(), "msg-1").await;
    assert!(to_acme.status < 300, "{to_acme:?}");
    let to_default = post(server.ingest, "/in/hooks".into(), "msg-2").await;
    assert!(to_default.status < 300, "{to_default:?}");
    for (path, why) in [
        ("/in/nobody/hooks", "no such tenant"),
        ("/in/acme/other", "no such source of acme's"),
    ] {
        let a = post(server.ingest, path.into(), "msg-3").await;
        assert_eq!(a.status, 404, "{why}: {a:?}");
    }
    // Each went to its own tenant's queue; default's source is not acme's.
    let receive = |c: &mut hookd_client::Client, request: tonic::Request<pb::ReceiveRequest>| {
        let mut api = c.raw().clone();
        async move { api.receive(request).await.unwrap().into_inner().messages }
    };
    let got = receive(
        &mut c,
        on(
            "acme",
            pb::ReceiveRequest {
                queue: "acme-in".into(),
                max_messages: 10,
                ..Default::default()
            },
        ),
    )
    .await;
    assert_eq!(got.len(), 1, "{got:?}");
    let got = receive(
        &mut c,
        tonic::Request::new(pb::ReceiveRequest {
            queue: "acme-in".into(),
            max_messages: 10,
            ..Default::default()
        }),
    )
    .await;
    assert!(got.is_empty(), "default has no acme-in: {got:?}");
    let listed = |c: &mut hookd_client::Client, r: tonic::Request<pb::ListSourcesRequest>| {
        let mut api = c.raw().clone();
        async move {
            api.list_sources(r)
                .await
                .unwrap()
                .into_inner()
                .sources
                .into_iter()
                .map(|s| s.path)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        listed(&mut c, on("acme", pb::ListSourcesRequest::default())).await,
        ["/in/acme/hooks"]
    );
    assert_eq!(
        listed(
            &mut c,
            tonic::Request::new(pb::ListSourcesRequest::default())
        )
        .await,
        ["/in/hooks"]
    );

    // After a restart: still acme's, at its path.
    let server = server.restart().await;
    let again = post(server.ingest, "/in/acme/hooks".into(), "msg-4").await;
    assert!(again.status < 300, "{again:?}");
    // Deleted with its tenant.
    let mut c = server.client().await;
    c.raw()
        .delete_tenant(pb::DeleteTenantRequest {
            name: "acme".into(),
            force: true,
        })
        .await
        .unwrap();
    let gone = post(server.ingest, "/in/acme/hooks".into(), "msg-5").await;
    assert_eq!(gone.status, 404, "{gone:?}");
    server.stop().await;
}

/// A queue's settings are a tenant's object (issue #51, 1): PutQueue gives acme's `steps`
/// FIFO lanes while default's `steps` stays unordered; they survive a restart; over JSON
/// and the CLI too; DeleteQueue takes them away.
#[tokio::test]
async fn queues_are_a_tenants_objects_with_their_own_fifo_lanes() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    c.raw()
        .create_tenant(pb::CreateTenantRequest {
            tenant: Some(tenant("acme")),
        })
        .await
        .unwrap();
    let put = c
        .raw()
        .put_queue(on(
            "acme",
            pb::PutQueueRequest {
                queue: Some(pb::Queue {
                    name: "steps".into(),
                    fifo: "block".into(),
                    description: "an agent's steps, in order".into(),
                    ..Default::default()
                }),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(put.created);
    assert_eq!(put.queue.as_ref().map(|q| q.fifo.as_str()), Some("block"));
    let bad = c
        .raw()
        .put_queue(pb::PutQueueRequest {
            queue: Some(pb::Queue {
                name: "x".into(),
                fifo: "fast".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().starts_with("queue.fifo:"), "{bad:?}");
    let step = |key: &str| pb::EnqueueRequest {
        destination: Some(pb::enqueue_request::Destination::Queue("steps".into())),
        payload: b"step".to_vec(),
        ordering_key: key.into(),
        ..Default::default()
    };
    let lanes = |c: &mut hookd_client::Client, tenant: Option<&'static str>| {
        let mut api = c.raw().clone();
        async move {
            let request = match tenant {
                Some(t) => on(t, pb::StatsRequest::default()),
                None => tonic::Request::new(pb::StatsRequest::default()),
            };
            let stats = api.stats(request).await.unwrap().into_inner();
            stats
                .destinations
                .iter()
                .find(|d| d.destination == "queue:steps")
                .map_or(0, |d| d.fifo_lanes)
        }
    };
    c.raw().enqueue(on("acme", step("run-1"))).await.unwrap();
    c.raw().enqueue(step("run-1")).await.unwrap();
    assert_eq!(
        lanes(&mut c, Some("acme")).await,
        1,
        "acme's steps are ordered"
    );
    assert_eq!(lanes(&mut c, None).await, 0, "default's steps are not");

    // After a restart: still acme's, still ordered.
    let server = server.restart().await;
    let mut c = server.client().await;
    let got = c
        .raw()
        .get_queue(on(
            "acme",
            pb::GetQueueRequest {
                name: "steps".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner()
        .queue
        .unwrap();
    assert_eq!(
        (got.fifo.as_str(), got.description.as_str()),
        ("block", "an agent's steps, in order")
    );
    c.raw().enqueue(on("acme", step("run-2"))).await.unwrap();
    assert_eq!(lanes(&mut c, Some("acme")).await, 2);
    let missing = c
        .raw()
        .get_queue(pb::GetQueueRequest {
            name: "steps".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "default has none");

    // Over JSON and the CLI.
    let put = call_with(
        server.http,
        "PUT",
        "/v1/queues/jobs",
        &[(HEADER, "acme")],
        r#"{"fifo":"park"}"#,
    )
    .await;
    assert_eq!(put.status(), 200, "{put:?}");
    let listed = call_with(server.http, "GET", "/v1/queues", &[(HEADER, "acme")], "").await;
    let names: Vec<String> = listed.json()["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            format!(
                "{}={}",
                q["name"].as_str().unwrap(),
                q["fifo"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(names, ["jobs=park", "steps=block"]);
    let g = server.grpc.as_str();
    let run = crate::ctl::hookd(g, &["--tenant", "acme", "queues", "list"], None).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("steps") && run.stdout.contains("park"),
        "{}",
        run.stdout
    );
    let run = crate::ctl::hookd(g, &["--tenant", "acme", "queues", "delete", "steps"], None).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let gone = c
        .raw()
        .get_queue(on(
            "acme",
            pb::GetQueueRequest {
                name: "steps".into(),
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(gone.code(), tonic::Code::NotFound);
    server.stop().await;
}
