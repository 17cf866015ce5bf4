//! The connector under every push connection pool: resolve, check each address against the
//! [`AddressGuard`], connect (with the connect timeout) only to an admitted one.
//!
//! Checking here, on the address actually dialed, is what makes the guard hold against DNS
//! rebinding: there is no second resolution between the check and the connect.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::guard::{AddressGuard, Refused};

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error("URL has no host")]
    NoHost,
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("{host} resolves to no address")]
    NoAddress { host: String },
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("connect timed out after {0} ms")]
    Timeout(u64),
}

#[derive(Debug, Clone)]
pub struct GuardedConnector {
    guard: Arc<AddressGuard>,
    timeout: Duration,
}

impl GuardedConnector {
    pub fn new(guard: Arc<AddressGuard>, timeout: Duration) -> Self {
        Self { guard, timeout }
    }
}

impl tower_service::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let guard = self.guard.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let attempt = connect(&guard, &uri);
            match tokio::time::timeout(timeout, attempt).await {
                Ok(result) => result,
                Err(_) => Err(ConnectError::Timeout(timeout.as_millis() as u64)),
            }
        })
    }
}

async fn connect(guard: &AddressGuard, uri: &Uri) -> Result<TokioIo<TcpStream>, ConnectError> {
    let host = uri.host().ok_or(ConnectError::NoHost)?;
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|source| ConnectError::Resolve {
                host: bare.to_owned(),
                source,
            })?
            .collect(),
    };
    let mut refused = None;
    let mut failed = None;
    for addr in addrs {
        if let Err(r) = guard.check(addr) {
            refused.get_or_insert(r);
            continue;
        }
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                // Webhooks are small request/response pairs: Nagle would hold them back.
                let _ = stream.set_nodelay(true);
                return Ok(TokioIo::new(stream));
            }
            Err(source) => failed = Some(ConnectError::Connect { addr, source }),
        }
    }
    // A real connection failure says more than a refusal of another of the addresses.
    Err(failed
        .or(refused.map(ConnectError::Refused))
        .unwrap_or_else(|| ConnectError::NoAddress {
            host: bare.to_owned(),
        }))
}

/// The guard's refusal, if that is what stopped `err` (anywhere in its source chain).
pub fn refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(ConnectError::Refused(r)) = e.downcast_ref::<ConnectError>() {
            return Some(r);
        }
        if let Some(r) = e.downcast_ref::<Refused>() {
            return Some(r);
        }
        cur = e.source();
    }
    None
}
