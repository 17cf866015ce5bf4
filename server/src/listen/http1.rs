//! The HTTP/1 listeners (`/healthz`, `/metrics`, the console; ingest): hyper with a
//! header-read timeout and a header size limit, on the accepted connections.

use std::io;
use std::time::Duration;

use super::budget::HoldBody;
use super::conn::Conn;
use super::limits::ConnectionLimits;
use tokio::sync::{mpsc, watch};

/// Lets a warning through at most every 10 s.
#[derive(Debug, Default)]
pub(super) struct Throttle(Option<std::time::Instant>);

impl Throttle {
    pub(super) fn ready(&mut self) -> bool {
        let now = std::time::Instant::now();
        match self.0 {
            Some(last) if now.duration_since(last) < Duration::from_secs(10) => false,
            _ => {
                self.0 = Some(now);
                true
            }
        }
    }
}

/// Serves the admin router over HTTP/1.1 on accepted connections until `stop`; then lets
/// the requests in progress finish.
pub(crate) async fn serve_http(
    mut conns: mpsc::Receiver<io::Result<Conn>>,
    router: axum::Router,
    limits: &ConnectionLimits,
    stop: watch::Receiver<bool>,
) -> io::Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
        .max_buf_size((limits.max_header_bytes as usize).max(8 << 10))
        .keep_alive(true);
    let mut tasks = tokio::task::JoinSet::new();
    let mut stopping = stop.clone();
    loop {
        let conn = tokio::select! {
            _ = stopping.wait_for(|s| *s) => break,
            c = conns.recv() => match c {
                Some(Ok(c)) => c,
                Some(Err(_)) => continue,
                None => break,
            },
        };
        while tasks.try_join_next().is_some() {}
        let info = conn.info().clone();
        let placed = conn.placed().cloned();
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request: http::Request<_>| {
            let active = info.activity.begin();
            request.extensions_mut().insert(info.clone());
            let mut router = router.clone();
            async move {
                let answer =
                    tower_service::Service::call(&mut router, request.map(axum::body::Body::new))
                        .await;
                answer.map(|r| r.map(|body| axum::body::Body::new(HoldBody::new(body, active))))
            }
        });
        let connection = builder.serve_connection(TokioIo::new(conn), service);
        let mut stop = stop.clone();
        let serve = async move {
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = async { let _ = stop.wait_for(|s| *s).await; } => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        };
        // A suspect client's connection is served by the runtime that holds its socket.
        match placed {
            Some(low) => tasks.spawn_on(serve, &low),
            None => tasks.spawn(serve),
        };
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}
