//! `GET /catch-up/{tenant}/{endpoint}?after=CURSOR&page_size=N` on the HTTP listener: the
//! catch-up of a receiver that holds no hookd token (issue #53, 3). It signs its request
//! with the endpoint's own secret, as hookd signs deliveries (Standard Webhooks, `v1`):
//! `webhook-timestamp` (Unix seconds, within 5 minutes of hookd's clock) and
//! `webhook-signature: v1,BASE64(HMAC-SHA256(secret, "{path and query}.{timestamp}."))`,
//! that is, a delivery's signature with the request's path and query as its id and an empty
//! body. Only `whsec_` (HMAC) secrets sign requests (a `whsk_` key's private half is
//! hookd's). The answer is ListEndpointEvents' as JSON (the HTTP/JSON API's form).
//!
//! Anything refused is 401 with no detail beyond "signature", so the route tells a prober
//! nothing about which tenants and endpoints exist.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use hookd_proto::v1 as pb;
use http::{HeaderMap, StatusCode, Uri, header};
use subtle::ConstantTimeEq;

use crate::api::HookdService;

/// How far a request's timestamp may be from hookd's clock.
const TOLERANCE_S: u64 = 300;

#[derive(Debug, Default, serde::Deserialize)]
struct Params {
    #[serde(default)]
    after: String,
    #[serde(default)]
    page_size: u32,
}

pub(crate) fn router(api: HookdService) -> Router {
    Router::new()
        .route("/catch-up/{tenant}/{name}", axum::routing::get(catch_up))
        .with_state(Arc::new(api))
}

fn refused() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        "signature: sign the request with the endpoint's whsec_ secret (webhook-timestamp, webhook-signature over \"{path and query}.{timestamp}.\")\n",
    )
        .into_response()
}

async fn catch_up(
    State(api): State<Arc<HookdService>>,
    Path((tenant, name)): Path<(String, String)>,
    Query(params): Query<Params>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let Some(tenant) = api.engine.tenant_named(&tenant) else {
        return refused();
    };
    if crate::api::validate::validate_name(&name, "endpoint").is_err() {
        return refused();
    }
    let view = match api.endpoint_view(tenant, &name).await {
        Ok(Some(view)) if view.record.catch_up => view,
        Ok(_) => return refused(),
        Err(status) => return crate::rest::error_response(&status),
    };
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let Some(timestamp) = header("webhook-timestamp").and_then(|t| t.parse::<u64>().ok()) else {
        return refused();
    };
    let now = api.clock.now_ms() / 1_000;
    if now.abs_diff(timestamp) > TOLERANCE_S {
        return refused();
    }
    let Some(given) = header("webhook-signature") else {
        return refused();
    };
    let signed = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let hmac: Vec<hookd_core::signing::Secret> = view
        .clear_secrets
        .iter()
        .filter_map(|s| hookd_core::signing::Secret::parse_hmac(s).ok())
        .collect();
    let expected =
        hookd_core::signing::signature_header(&hmac, signed, timestamp, b"").unwrap_or_default();
    let matched = given.split(' ').any(|entry| {
        entry.starts_with("v1,")
            && expected
                .split(' ')
                .any(|want| bool::from(want.as_bytes().ct_eq(entry.as_bytes())))
    });
    if !matched {
        return refused();
    }
    let request = pb::ListEndpointEventsRequest {
        endpoint: name,
        after: params.after,
        page_size: params.page_size,
    };
    match api.endpoint_events(tenant, request).await {
        Ok(page) => match crate::rest::message_json(&page) {
            Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
            Err(status) => crate::rest::error_response(&status),
        },
        Err(status) => crate::rest::error_response(&status),
    }
}
