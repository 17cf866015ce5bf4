//! The HTTP listener's own routes: `/healthz` and `/metrics` (the console, `/ui`, is
//! mounted beside them in `app/`; ingest has a listener of its own).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use hookd_engine::EngineHandle;
use hookd_metrics::Metrics;

#[derive(Debug, Clone)]
struct Admin {
    engine: EngineHandle,
    metrics: Arc<Metrics>,
    max_destination_series: usize,
    /// No `[auth]`: `/metrics` answers only a `Host` that names no domain.
    check_host: bool,
}

/// A `Host` an attacker's domain cannot stand for: an IP address or `localhost`, with or
/// without a port. DNS rebinding sends the attacker's own name.
pub(crate) fn host_names_no_domain(headers: &http::HeaderMap) -> bool {
    host_name(headers).is_some_and(|name| {
        name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok()
    })
}

/// The `Host` header's name, without its port (and an IPv6 literal without brackets).
pub(crate) fn host_name(headers: &http::HeaderMap) -> Option<&str> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok())?;
    Some(match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    })
}

/// `check_host`: no `[auth]` is configured, so `/metrics` answers only a `Host` that is an
/// IP address or `localhost` (scrapers by address keep working; a page on another site
/// reached through DNS rebinding does not).
pub(crate) fn router(
    engine: EngineHandle,
    metrics: Arc<Metrics>,
    max_destination_series: usize,
    check_host: bool,
) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics_text))
        .with_state(Admin {
            engine,
            metrics,
            max_destination_series,
            check_host,
        })
}

/// 200 while the store accepts writes; 503 once a storage error has stopped them.
async fn healthz(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    if admin.engine.is_healthy() {
        (StatusCode::OK, "ok\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "storage failed; hookd is reopening its store (storage.on_failure = \"recover\") or exiting\n",
        )
    }
}

/// The Prometheus text format (0.0.4). If the engine cannot answer (it has stopped), the
/// counters are still served, with `hookd_storage_healthy 0`.
async fn metrics_text(State(admin): State<Admin>, headers: http::HeaderMap) -> Response {
    if admin.check_host && !host_names_no_domain(&headers) {
        return (
            StatusCode::FORBIDDEN,
            "without [auth], /metrics answers only a Host that is an IP address or localhost (DNS rebinding); scrape by address, or configure [auth]\n",
        )
            .into_response();
    }
    let snapshot = match admin.engine.gauges(admin.max_destination_series).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "metrics scrape without the engine's gauges");
            hookd_metrics::GaugeSnapshot::default()
        }
    };
    let metrics = admin.metrics.clone();
    // Encoding a few hundred series is short, but it is CPU work: off the async workers.
    match tokio::task::spawn_blocking(move || metrics.render(&snapshot)).await {
        Ok(text) => ([(header::CONTENT_TYPE, prometheus::TEXT_FORMAT)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("metrics could not be rendered: {e}\n"),
        )
            .into_response(),
    }
}
