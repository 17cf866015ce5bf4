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
    /// hookd's own limit of outbound connections is reached (`delivery.max_connections`).
    #[error("hookd has {0} outbound connections open (delivery.max_connections)")]
    Saturated(usize),
    /// This origin holds its fair share of the cap while others want connections too.
    #[error(
        "this origin holds {held} of hookd's {max} outbound connections, its fair share while {origins} origins want them (delivery.max_connections)"
    )]
    OverShare {
        held: usize,
        max: usize,
        origins: usize,
    },
}

impl ConnectError {
    /// Whether hookd itself ran short (descriptors, memory, local ports, its own cap): the
    /// receiver was never tried, so the attempt is not counted against it (finding F6).
    pub fn is_local(&self) -> bool {
        match self {
            Self::Saturated(_) | Self::OverShare { .. } => true,
            Self::Connect { source, .. } | Self::Resolve { source, .. } => {
                is_local_shortage(source)
            }
            _ => false,
        }
    }
}

/// EMFILE, ENFILE, ENOBUFS, ENOMEM, EADDRNOTAVAIL (no ephemeral port left).
pub fn is_local_shortage(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(24 | 23 | 105 | 12 | 99))
}

/// One outbound connection, holding its place under the global cap until it closes.
#[derive(Debug)]
pub struct Outbound {
    io: TokioIo<TcpStream>,
    _slot: OutboundSlot,
}

/// How long an origin that asked for a connection counts as wanting one.
const WANTING: Duration = Duration::from_secs(10);

/// hookd's outbound connections (`delivery.max_connections`), shared fairly between
/// origins: while several want connections, none may hold more than the cap divided by
/// their number, so receivers that hold connections open (tarpits) cannot take every one
/// and stall a healthy endpoint. An origin alone may use them all.
#[derive(Debug)]
pub struct OutboundSlots {
    max: usize,
    state: std::sync::Mutex<SlotState>,
}

#[derive(Debug, Default)]
struct SlotState {
    total: usize,
    held: std::collections::HashMap<String, usize>,
    /// Origins that asked within `WANTING`, and when they last did.
    asked: std::collections::HashMap<String, tokio::time::Instant>,
}

/// One connection's place, given back when it closes.
#[derive(Debug)]
pub struct OutboundSlot {
    slots: Arc<OutboundSlots>,
    origin: String,
}

impl Drop for OutboundSlot {
    fn drop(&mut self) {
        let mut s = self.slots.state();
        s.total = s.total.saturating_sub(1);
        if let Some(n) = s.held.get_mut(&self.origin) {
            *n -= 1;
            if *n == 0 {
                s.held.remove(&self.origin);
            }
        }
    }
}

impl OutboundSlots {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max,
            state: std::sync::Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for one more connection to `origin`, or why there is none.
    pub fn try_take(self: &Arc<Self>, origin: &str) -> Result<OutboundSlot, ConnectError> {
        let now = tokio::time::Instant::now();
        let mut s = self.state();
        s.asked.retain(|_, at| now.duration_since(*at) < WANTING);
        // Bounded: past as many origins as connections, the share is one anyway.
        if s.asked.len() < self.max.max(1) * 4 || s.asked.contains_key(origin) {
            s.asked.insert(origin.to_owned(), now);
        }
        let origins = {
            let mut wanting: std::collections::HashSet<&str> =
                s.asked.keys().map(String::as_str).collect();
            wanting.extend(s.held.keys().map(String::as_str));
            wanting.insert(origin);
            wanting.len()
        };
        if s.total >= self.max {
            return Err(ConnectError::Saturated(self.max));
        }
        let share = self.max.div_ceil(origins).max(1);
        let held = s.held.get(origin).copied().unwrap_or(0);
        if held >= share {
            return Err(ConnectError::OverShare {
                held,
                max: self.max,
                origins,
            });
        }
        s.total += 1;
        *s.held.entry(origin.to_owned()).or_default() += 1;
        Ok(OutboundSlot {
            slots: self.clone(),
            origin: origin.to_owned(),
        })
    }
}

impl hyper::rt::Read for Outbound {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Outbound {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }
}

impl hyper_util::client::legacy::connect::Connection for Outbound {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        self.io.connected()
    }
}

#[derive(Debug, Clone)]
pub struct GuardedConnector {
    guard: Arc<AddressGuard>,
    timeout: Duration,
    /// Outbound connections hookd may hold at once, over every destination.
    slots: Arc<OutboundSlots>,
}

impl GuardedConnector {
    pub fn new(guard: Arc<AddressGuard>, timeout: Duration, slots: Arc<OutboundSlots>) -> Self {
        Self {
            guard,
            timeout,
            slots,
        }
    }
}

impl tower_service::Service<Uri> for GuardedConnector {
    type Response = Outbound;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let guard = self.guard.clone();
        let timeout = self.timeout;
        let origin = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("http"),
            uri.authority().map_or("", |a| a.as_str())
        );
        let slot = self.slots.try_take(&origin);
        Box::pin(async move {
            let slot = slot?;
            let attempt = connect(&guard, &uri);
            match tokio::time::timeout(timeout, attempt).await {
                Ok(result) => result.map(|io| Outbound { io, _slot: slot }),
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

/// Whether `err` (anywhere in its source chain) is hookd's own shortage, not the receiver's.
pub fn local_shortage(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(c) = e.downcast_ref::<ConnectError>() {
            return c.is_local();
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && is_local_shortage(io)
        {
            return true;
        }
        cur = e.source();
    }
    false
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn origins_share_the_outbound_cap_fairly_and_one_alone_may_use_it_all() {
        let slots = OutboundSlots::new(4);
        let (tarpit, healthy) = ("http://tarpit:80", "http://healthy:80");
        // Alone, the tarpit may hold every connection.
        let mut held: Vec<_> = (0..4).map(|_| slots.try_take(tarpit).unwrap()).collect();
        // The healthy endpoint asks: none is free, and it now counts as wanting one.
        assert!(matches!(
            slots.try_take(healthy),
            Err(ConnectError::Saturated(4))
        ));
        // A tarpit connection ends: the tarpit, over its share of 2, cannot take it back...
        held.pop();
        let over = slots.try_take(tarpit).unwrap_err();
        assert!(
            matches!(
                over,
                ConnectError::OverShare {
                    held: 3,
                    max: 4,
                    origins: 2
                }
            ),
            "{over}"
        );
        assert!(
            over.is_local(),
            "postponed, not counted against the receiver"
        );
        // ...so the healthy endpoint gets it.
        let mine = slots.try_take(healthy).unwrap();
        drop(mine);
        // Once the healthy endpoint has not asked for a while, the tarpit is alone again.
        tokio::time::advance(WANTING).await;
        held.push(slots.try_take(tarpit).unwrap());
        drop(held);
        assert_eq!(slots.state().total, 0);
        assert!(slots.state().held.is_empty());
    }
}
