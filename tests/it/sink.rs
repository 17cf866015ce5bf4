//! A real HTTP receiver on 127.0.0.1:0 for push-delivery tests: answers from a script (then
//! a default), records every request it gets.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// How the sink answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    /// Status, extra headers, body.
    Full(u16, Vec<(&'static str, String)>, Vec<u8>),
    /// Never answers (the client must time out).
    Hang,
}

#[derive(Debug, Clone)]
pub struct Received {
    pub method: Method,
    pub uri: Uri,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Reply>,
    default: Option<Reply>,
    received: Vec<Received>,
}

#[derive(Clone)]
pub struct Sink {
    pub addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        if Arc::strong_count(&self.task) == 1 {
            self.task.abort();
        }
    }
}

impl Sink {
    /// A sink that answers `default` to everything not scripted.
    pub async fn start(default: Reply) -> Self {
        let inner = Arc::new(Mutex::new(Inner {
            default: Some(default),
            ..Default::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            addr,
            inner,
            task: Arc::new(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.addr.port())
    }

    /// The next requests get these answers, in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.inner.lock().unwrap().script.extend(replies);
    }

    pub fn set_default(&self, reply: Reply) {
        self.inner.lock().unwrap().default = Some(reply);
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.lock().unwrap().received.clone()
    }

    pub fn count(&self) -> usize {
        self.inner.lock().unwrap().received.len()
    }

    /// Waits (real time, bounded) until at least `n` requests arrived.
    pub async fn wait_for(&self, n: usize) -> Vec<Received> {
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.count() < n {
            assert!(
                Instant::now() < deadline,
                "sink got {} requests, expected {n}",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.received()
    }

    /// Asserts that the sink got exactly `n` requests and that no more are coming: once
    /// hookd has no push attempt in flight (every attempt it made has reached its receiver
    /// and been recorded), nothing else is sent until the injected clock moves or a request
    /// arrives (see `harness::push_settled`).
    pub async fn stays_at(&self, c: &mut hookd_client::Client, n: usize) {
        crate::harness::push_settled(c).await;
        assert_eq!(self.count(), n, "the sink got another number of requests");
    }
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let reply = {
        let mut inner = inner.lock().unwrap();
        inner.received.push(Received {
            method,
            uri,
            headers,
            body,
            at: Instant::now(),
        });
        inner
            .script
            .pop_front()
            .or_else(|| inner.default.clone())
            .unwrap_or(Reply::Status(200))
    };
    match reply {
        Reply::Status(code) => StatusCode::from_u16(code).unwrap().into_response(),
        Reply::Full(code, headers, body) => {
            let mut r = (StatusCode::from_u16(code).unwrap(), body).into_response();
            for (name, value) in headers {
                r.headers_mut().insert(name, value.parse().unwrap());
            }
            r
        }
        Reply::Hang => std::future::pending().await,
    }
}
