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
use super::slots::{Holder, OutboundSlot, OutboundSlots, SlotRefusal, Take};

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
    /// hookd's own cap on outbound connections, not the receiver (`slots`).
    #[error(transparent)]
    Slots(#[from] SlotRefusal),
}

impl ConnectError {
    /// Whether hookd itself ran short (descriptors, memory, local ports, its own cap): the
    /// receiver was never tried, so the attempt is not counted against it (finding F6).
    pub(crate) fn is_local(&self) -> bool {
        match self {
            Self::Slots(_) => true,
            Self::Connect { source, .. } | Self::Resolve { source, .. } => {
                is_local_shortage(source)
            }
            _ => false,
        }
    }
}

/// EMFILE, ENFILE, ENOBUFS, ENOMEM, EADDRNOTAVAIL (no ephemeral port left).
pub(crate) fn is_local_shortage(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(24 | 23 | 105 | 12 | 99))
}

/// One outbound connection, holding its place under the global cap until it closes, and
/// telling the slots when it reads and writes (to see which connections have stalled).
#[derive(Debug)]
pub struct Outbound {
    stream: TcpStream,
    slot: OutboundSlot,
}

impl tokio::io::AsyncRead for Outbound {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        this.slot.conn().check(cx)?;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.slot.conn().read();
        }
        polled
    }
}

impl tokio::io::AsyncWrite for Outbound {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.slot.conn().check(cx)?;
        let polled = Pin::new(&mut this.stream).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.slot.conn().wrote();
        }
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.slot.conn().check(cx)?;
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            this.slot.conn().wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl hyper_util::client::legacy::connect::Connection for Outbound {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        self.stream.connected()
    }
}

#[derive(Debug, Clone)]
pub struct GuardedConnector {
    guard: Arc<AddressGuard>,
    timeout: Duration,
    /// Outbound connections hookd may hold at once, over every destination.
    slots: Arc<OutboundSlots>,
    /// Whose connections these are (the target's tenant and its weight).
    share: hookd_core::push::Share,
    /// The receiver they count for inside the tenant: the target's key (an endpoint, or an
    /// ad-hoc URL's origin).
    receiver: Arc<str>,
}

impl GuardedConnector {
    /// The guard it checks every address with.
    pub(crate) fn guard(&self) -> &Arc<AddressGuard> {
        &self.guard
    }

    pub fn new(
        guard: Arc<AddressGuard>,
        timeout: Duration,
        slots: Arc<OutboundSlots>,
        share: hookd_core::push::Share,
        receiver: Arc<str>,
    ) -> Self {
        Self {
            guard,
            timeout,
            slots,
            share,
            receiver,
        }
    }
}

impl tower_service::Service<Uri> for GuardedConnector {
    type Response = TokioIo<Outbound>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let guard = self.guard.clone();
        let timeout = self.timeout;
        let slots = self.slots.clone();
        let share = self.share.clone();
        let receiver = self.receiver.clone();
        Box::pin(async move {
            // The connect timeout bounds the wait for a place and the connect together.
            let deadline = tokio::time::Instant::now() + timeout;
            let slot = loop {
                let holder = Holder {
                    tenant: share.tenant,
                    weight: share.weight(),
                };
                let until = match slots.try_take(holder, &receiver) {
                    Take::Got(slot) => break slot,
                    Take::Refused(e) => return Err(e.into()),
                    Take::Wait(until) => until.map_or(deadline, |u| u.min(deadline)),
                };
                if tokio::time::Instant::now() >= deadline {
                    return Err(SlotRefusal::Saturated(slots.max()).into());
                }
                tokio::select! {
                    () = slots.released() => {}
                    () = tokio::time::sleep_until(until) => {}
                }
            };
            match tokio::time::timeout_at(deadline, connect(&guard, &uri)).await {
                Ok(result) => result.map(|stream| TokioIo::new(Outbound { stream, slot })),
                Err(_) => Err(ConnectError::Timeout(timeout.as_millis() as u64)),
            }
        })
    }
}

async fn connect(guard: &AddressGuard, uri: &Uri) -> Result<TcpStream, ConnectError> {
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
                return Ok(stream);
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
pub(crate) fn local_shortage(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(c) = e.downcast_ref::<ConnectError>() {
            return c.is_local();
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if is_local_shortage(io) {
                return true;
            }
            // An I/O error carrying hookd's own (a connection closed for another origin).
            if io
                .get_ref()
                .is_some_and(|i| i.downcast_ref::<SlotRefusal>().is_some())
            {
                return true;
            }
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
