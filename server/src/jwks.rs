//! `GET /jwks/{endpoint}` on the HTTP listener: the endpoint's `v1a` (ed25519) public keys
//! as a JSON Web Key Set, so a receiver verifies hookd's signatures without copying keys by
//! hand. Its current keys come from its secrets as they are now; a key a PutEndpoint took
//! off stays in the set, marked `hookd_retired_unix_ms`, for `[delivery]
//! retired_signing_key_secs` (what it signed, still in flight or retried, still verifies).
//! Each delivery names the keys its `v1a` signatures used in `hookd-key-id`.
//!
//! Public keys are no secret and a receiver has no hookd token: the route needs no
//! credential (like any JWKS). An endpoint without `v1a` keys, or none of that name, is 404.
//! `/jwks/{endpoint}` is tenant `default`'s endpoint; `/jwks/{tenant}/{endpoint}` another
//! tenant's (a tenant that does not exist is 404 too).

use hookd_core::scope::TenantId;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::{StatusCode, header};

use crate::api::HookdService;

#[derive(Clone)]
struct Keys {
    api: HookdService,
    retired_for_ms: u64,
}

pub(crate) fn router(api: HookdService, retired_signing_key_secs: u64) -> Router {
    Router::new()
        .route("/jwks/{name}", axum::routing::get(jwks))
        .route("/jwks/{tenant}/{name}", axum::routing::get(tenant_jwks))
        .with_state(Arc::new(Keys {
            api,
            retired_for_ms: retired_signing_key_secs.saturating_mul(1_000),
        }))
}

async fn jwks(State(keys): State<Arc<Keys>>, Path(name): Path<String>) -> Response {
    set_of(&keys, TenantId::DEFAULT, &name).await
}

async fn tenant_jwks(
    State(keys): State<Arc<Keys>>,
    Path((tenant, name)): Path<(String, String)>,
) -> Response {
    let found = keys.api.engine.tenant_named(&tenant);
    match found {
        Some(id) => set_of(&keys, id, &name).await,
        None => (
            StatusCode::NOT_FOUND,
            format!("no endpoint named {name:?}\n"),
        )
            .into_response(),
    }
}

/// The JWKS of tenant `tenant`'s endpoint `name`.
async fn set_of(keys: &Keys, tenant: TenantId, name: &str) -> Response {
    let not_found = |why: String| (StatusCode::NOT_FOUND, why + "\n").into_response();
    if crate::api::validate::validate_name(name, "endpoint").is_err() {
        return not_found(format!("no endpoint named {name:?}"));
    }
    let view = match keys.api.endpoint_view(tenant, name).await {
        Ok(Some(view)) => view,
        Ok(None) => return not_found(format!("no endpoint named {name:?}")),
        Err(status) => return crate::rest::error_response(&status),
    };
    let now = keys.api.clock.now_ms();
    let current = hookd_core::signing::public_keys(&view.clear_secrets);
    let mut set: Vec<serde_json::Value> = current
        .iter()
        .map(|k| hookd_core::jwks::jwk(k, None))
        .collect();
    for retired in &view.record.signing_keys {
        let Ok(key) = <[u8; 32]>::try_from(retired.public_key.as_slice()) else {
            continue;
        };
        if retired.retired_ms > 0
            && now.saturating_sub(retired.retired_ms) < keys.retired_for_ms
            && !current.contains(&key)
        {
            set.push(hookd_core::jwks::jwk(&key, Some(retired.retired_ms)));
        }
    }
    if set.is_empty() {
        return not_found(format!(
            "endpoint {name:?} has no v1a signing keys (whsk_ secrets)"
        ));
    }
    let body = serde_json::json!({ "keys": set }).to_string();
    (
        [
            (header::CONTENT_TYPE, "application/jwk-set+json"),
            // A rotation shows within five minutes; the retired key stays far longer.
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}
