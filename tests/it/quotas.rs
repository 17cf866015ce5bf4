//! Tenants' quotas against a real hookd (issue #51, 4): set on the tenant over JSON,
//! enforced with the backpressure answers (RESOURCE_EXHAUSTED with RetryInfo on gRPC, 429
//! with Retry-After over HTTP/JSON and on the ingest listener), each naming the quota, and
//! shown in the tenant's Stats as use against limit.

use std::time::Duration;

use hookd_client::pb;
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_core::source::{SchemeName, SourceSpec};
use tonic::Code;

use crate::harness::{TestServer, test_config};
use crate::ingest::{SW_KEY, now_s, post, sw_headers, sw_secret};
use crate::rest::call_with;

use crate::tenants::on;

fn to_jobs(payload: &str) -> pb::EnqueueRequest {
    pb::EnqueueRequest {
        destination: Some(pb::enqueue_request::Destination::Queue("jobs".into())),
        payload: payload.as_bytes().to_vec(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_tenants_quotas_refuse_with_the_backpressure_answers_and_show_in_its_stats() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.backpressure.retry_after_ms = 1_500;
    config.sources = vec![SourceSpec {
        secrets: vec![sw_secret(SW_KEY)],
        ..SourceSpec::new("hooks", SchemeName::StandardWebhooks, "q")
    }];
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;

    // Set over JSON, shown as set.
    let made = call_with(
        server.http,
        "POST",
        "/v1/tenants",
        &[],
        r#"{"name":"acme","quota":{"maxLiveMessages":"3","maxEndpoints":"1"}}"#,
    )
    .await;
    assert_eq!(made.status(), 200, "{made:?}");
    assert_eq!(made.json()["tenant"]["quota"]["maxLiveMessages"], "3");

    // Three live messages, the third with a throttle hint; the fourth is refused.
    for i in 0..3 {
        let sent = c.raw().enqueue(on("acme", to_jobs(&format!("{i}")))).await;
        let sent = sent.expect("under the quota").into_inner();
        assert_eq!(sent.throttle_ms > 0, i == 2, "{i}: {sent:?}");
    }
    let refused = c.raw().enqueue(on("acme", to_jobs("3"))).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused
            .message()
            .starts_with("tenant quota max_live_messages = 3: the tenant holds 3 live messages"),
        "{refused:?}"
    );
    use tonic_types::StatusExt;
    let retry = refused.get_details_retry_info().and_then(|r| r.retry_delay);
    assert_eq!(retry, Some(Duration::from_millis(1_500)));
    // The same over HTTP/JSON: 429, Retry-After, the quota named.
    let over_http = call_with(
        server.http,
        "POST",
        "/v1/messages",
        &[("x-hookd-tenant", "acme")],
        r#"{"queue":"jobs","data":{"n":4}}"#,
    )
    .await;
    assert_eq!(over_http.header("retry-after"), Some("2"), "{over_http:?}");
    assert!(
        over_http
            .error(429, "RESOURCE_EXHAUSTED")
            .contains("max_live_messages")
    );
    // Default (no quota) is not held back by acme's.
    c.raw()
        .enqueue(to_jobs("default's"))
        .await
        .expect("default has no quota");

    // One endpoint; a second is refused, naming the quota, with no retry delay.
    let endpoint = |name: &str| pb::PutEndpointRequest {
        endpoint: Some(pb::Endpoint {
            name: name.into(),
            url: format!("http://127.0.0.1:9/{name}"),
            ..Default::default()
        }),
    };
    c.raw()
        .put_endpoint(on("acme", endpoint("one")))
        .await
        .expect("the first endpoint");
    let second = c
        .raw()
        .put_endpoint(on("acme", endpoint("two")))
        .await
        .unwrap_err();
    assert_eq!(second.code(), Code::ResourceExhausted, "{second:?}");
    assert!(
        second.message().contains("tenant quota max_endpoints = 1"),
        "{second:?}"
    );
    assert!(second.get_details_retry_info().is_none());

    // Its Stats: use against limit, for the quotas it has.
    let stats = c
        .raw()
        .stats(on("acme", pb::StatsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    let shown: Vec<(&str, u64, u64)> = stats
        .quotas
        .iter()
        .map(|q| (q.quota.as_str(), q.used, q.limit))
        .collect();
    assert_eq!(
        shown,
        [("max_live_messages", 3, 3), ("max_endpoints", 1, 1)]
    );
    let over_json = call_with(
        server.http,
        "GET",
        "/v1/stats",
        &[("x-hookd-tenant", "acme")],
        "",
    )
    .await;
    assert_eq!(over_json.json()["quotas"][0]["quota"], "max_live_messages");
    // /metrics: the tenants holding messages, by name.
    let metrics = server.http_get("/metrics").await;
    for line in [
        "hookd_tenant_live_messages{tenant=\"acme\"} 3",
        "hookd_tenant_live_messages{tenant=\"default\"} 1",
    ] {
        assert!(metrics.contains(line), "no {line:?} in\n{metrics}");
    }
    // The whole hookd's Stats (an operator naming no tenant) has no quota of its own.
    let whole = c.raw().stats(pb::StatsRequest::default()).await.unwrap();
    assert!(whole.into_inner().quotas.is_empty());

    // A quota on `default` holds on the ingest listener too: 429 with Retry-After (the
    // next UTC midnight for the day's quota), the quota named, nothing stored.
    let set = call_with(
        server.http,
        "PUT",
        "/v1/tenants/default",
        &[],
        r#"{"name":"default","quota":{"maxEventsPerDay":"1"}}"#,
    )
    .await;
    assert_eq!(set.status(), 200, "{set:?}");
    let body = br#"{"type":"t"}"#;
    let first = post(
        server.ingest,
        "hooks",
        &sw_headers(SW_KEY, "day-1", now_s(), body),
        body,
    )
    .await;
    assert!(first.status < 300, "{first:?}");
    let over = post(
        server.ingest,
        "hooks",
        &sw_headers(SW_KEY, "day-2", now_s(), body),
        body,
    )
    .await;
    assert_eq!(over.status, 429, "{over:?}");
    let after: u64 = over
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After");
    assert!((1..=86_400).contains(&after), "{after}");
    assert!(
        format!("{over:?}").contains("max_events_per_day"),
        "{over:?}"
    );
    server.stop().await;
}
