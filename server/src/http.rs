//! The HTTP listener: `/healthz` now; later issues add ingest, metrics and the console.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::engine::EngineHandle;

pub fn router(engine: EngineHandle) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .with_state(engine)
}

/// 200 while the store accepts writes; 503 once a storage error has stopped them.
async fn healthz(State(engine): State<EngineHandle>) -> (StatusCode, &'static str) {
    if engine.is_healthy() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "storage failed; restart hookd\n",
        )
    }
}
