//! What the listeners answer between incarnations, while the store is being reopened after
//! a failure.

use std::time::Duration;

use super::{Listeners, checks::connection_budget, set_health};
use crate::config::Config;

/// What the listeners answer while the store is being reopened after a failure: nothing
/// from the failed state, only "unavailable, retry" (gRPC health NOT_SERVING, UNAVAILABLE
/// for every other call, 503 with Retry-After over HTTP), until `stop`.
pub(super) async fn serve_down(
    config: Config,
    listeners: Listeners,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let Listeners { grpc, http, ingest } = listeners;
    let tls = crate::listen::Tls::from_config(&config.tls).ok().flatten();
    let limits = &config.connections;
    let max = connection_budget(config.connections.max_connections, None);
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, false).await;
    let routes = tonic::service::Routes::new(health_service)
        .into_axum_router()
        .fallback(|| async {
            tonic::Status::unavailable("hookd is recovering from a storage failure; retry")
                .into_http::<axum::body::Body>()
        });
    let accept = |listener, kind| {
        crate::listen::accept(listener, kind, tls.clone(), limits, max, stop.clone(), None)
    };
    let conns = accept(grpc, crate::listen::Kind::Grpc);
    let grpc_server = tonic::transport::Server::builder()
        .add_routes(tonic::service::Routes::from(routes))
        .serve_with_incoming_shutdown(tokio_stream::wrappers::ReceiverStream::new(conns), {
            let mut stop = stop.clone();
            async move {
                let _ = stop.wait_for(|s| *s).await;
            }
        });
    let unavailable = || {
        axum::Router::new().fallback(|| async {
            let mut r = axum::response::IntoResponse::into_response((
                http::StatusCode::SERVICE_UNAVAILABLE,
                "hookd is recovering from a storage failure; retry later\n",
            ));
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("5"),
            );
            r
        })
    };
    let http_conns = accept(http, crate::listen::Kind::Http);
    let ingest_conns = accept(ingest, crate::listen::Kind::Ingest);
    let http_server = crate::listen::serve_http(http_conns, unavailable(), limits, stop.clone());
    let ingest_server =
        crate::listen::serve_http(ingest_conns, unavailable(), limits, stop.clone());
    let all = async { tokio::join!(grpc_server, http_server, ingest_server) };
    let mut stop = stop.clone();
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => return,
        _ = stop.wait_for(|s| *s) => {}
    }
    // Long-lived calls (a health Watch) must not hold up the next try.
    let _ = tokio::time::timeout(Duration::from_secs(1), all).await;
}
