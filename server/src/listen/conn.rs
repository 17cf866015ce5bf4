//! An accepted connection ([`Conn`]): its idle timeout, its activity (calls in progress
//! put off an idle close), and its placement (a connection the ingest policy demotes reads
//! paced, in small pieces).

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

/// Which listener a connection came to (decides ALPN).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Grpc,
    Http,
    /// The ingest listener: HTTP/1.1, with its own client-certificate setting.
    Ingest,
}

/// The identity a verified client certificate presented (its DNS names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    pub(crate) dns_names: Vec<String>,
}

/// Decides, when a connection is accepted, whether it is served somewhere other than the
/// listener's own runtime: the ingest listener's suspect clients (`ingest::demote`).
pub trait Placement: Send + Sync + std::fmt::Debug {
    /// Where to serve a connection from `ip`; None: with everyone else's.
    fn placed(&self, ip: IpAddr) -> Option<Placed>;
}

/// A paced connection reads at most this much at once: what one read makes the kernel do
/// on this CPU (on loopback and with ACK-clocked senders, its share of the sender's TCP
/// work too) stays a few tens of microseconds.
pub(super) const PACED_READ_BYTES: usize = 64 << 10;

/// How much reading a quiet spell saves up: this long at the rate.
const PACE_BURST: Duration = Duration::from_millis(10);

/// Where a suspect client's connection is served, and the pace its reads share.
#[derive(Debug, Clone)]
pub struct Placed {
    pub handle: tokio::runtime::Handle,
    pub pace: Option<Arc<Pace>>,
}

/// The bytes per second that suspect clients' connections read, all of them together.
///
/// Idle priority decides who gets the CPU among threads; it does not reach the kernel's
/// network work, which runs in softirq context ahead of every thread. Each read of a
/// flood's body makes the kernel take in, on this CPU, what the freed window lets the
/// sender send next. Unpaced, 1 MiB unsigned bodies read at loopback speed had, in one
/// run of four, every honest request take 6 to 9 ms for a third of a second, while
/// `perf sched` showed the block layer's worker (which completes the log's fsync) waiting
/// 5.5 ms for the CPU and `ksoftirqd` 17.7 ms. Paced, the kernel's share of a flood is
/// bounded by the rate, in small pieces.
///
/// Each connection pays after it reads and then waits until everything read by all of
/// them fits the rate: the waits queue connections in the order they read, with no herd
/// of wake-ups, and a quiet spell lets up to [`PACE_BURST`] of reading through at once.
#[derive(Debug)]
pub struct Pace {
    per_sec: u64,
    /// When the bytes charged so far will have fitted the rate.
    free: Mutex<Instant>,
}

impl Pace {
    /// `per_sec` bytes a second; `None` for 0 (unpaced).
    pub fn new(per_sec: u64) -> Option<Arc<Self>> {
        (per_sec > 0).then(|| {
            Arc::new(Self {
                per_sec,
                free: Mutex::new(Instant::now()),
            })
        })
    }

    /// Charges `n` bytes read at `now`: when their connection may read again (at or before
    /// `now`: at once).
    pub(crate) fn charge(&self, n: usize, now: Instant) -> Instant {
        let nanos = (n as u128 * 1_000_000_000) / u128::from(self.per_sec);
        let cost = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        let earliest = now.checked_sub(PACE_BURST).unwrap_or(now);
        *free = (*free).max(earliest) + cost;
        *free
    }
}

/// What the services learn about a connection (a request extension on both listeners).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub remote: SocketAddr,
    /// The verified client certificate's identity (mTLS).
    pub peer: Option<Arc<PeerIdentity>>,
    /// The requests it has made: what keeps it open.
    pub activity: Arc<Activity>,
}

/// The requests a connection has made: how many are in progress, and when the last one
/// began or ended. A connection is kept open by these, never by bytes alone.
#[derive(Debug)]
pub struct Activity {
    pub(super) opened: Instant,
    /// Milliseconds after `opened` of the last request's beginning or end; `u64::MAX`: none.
    last_ms: std::sync::atomic::AtomicU64,
    in_flight: std::sync::atomic::AtomicUsize,
}

/// One request in progress on a connection (see [`Activity::begin`]).
#[derive(Debug)]
pub struct Active(Arc<Activity>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.touch();
        self.0
            .in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

impl Activity {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            opened: Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(u64::MAX),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A request begins; it is in progress until the guard is dropped.
    pub fn begin(self: &Arc<Self>) -> Active {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.touch();
        Active(self.clone())
    }

    fn touch(&self) {
        let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Release);
    }

    /// When the connection may be closed for want of requests: `None` while one is in
    /// progress; else `idle` after the last one, or `first` after opening if none came.
    pub(super) fn close_at(&self, idle: Duration, first: Duration) -> Option<Instant> {
        if self.in_flight.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return None;
        }
        Some(
            match self.last_ms.load(std::sync::atomic::Ordering::Acquire) {
                u64::MAX => self.opened + first,
                ms => self.opened + Duration::from_millis(ms) + idle,
            },
        )
    }
}

pub(super) enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// An accepted connection: its stream, its place under the connection limits, and the idle
/// timer (which only requests put off: see [`Activity`]).
pub struct Conn {
    pub(super) io: Io,
    pub(super) info: ConnInfo,
    pub(super) idle: Pin<Box<Sleep>>,
    pub(super) idle_timeout: Duration,
    pub(super) first_request_timeout: Duration,
    /// HTTP/2: the client's preface and the header of its first frame (33 bytes) must
    /// arrive by this deadline (from accept), so a client that trickles them is dropped
    /// like one that sends nothing. `None` once they have (or for HTTP/1, which hyper's
    /// header-read timeout covers).
    pub(super) opening: Option<(usize, Pin<Box<Sleep>>)>,
    /// The runtime whose reactor and timers hold this connection, when not the
    /// listener's: a suspect client's ([`crate::ingest::demote`]), to be served there.
    pub(super) placed: Option<tokio::runtime::Handle>,
    /// A suspect client's reads, which share a rate with all suspects'.
    pub(super) paced: Option<Paced>,
    pub(super) _permit: OwnedSemaphorePermit,
    pub(super) _peer_slot: PeerSlot,
}

/// A paced connection's share of [`Pace`]: it reads when `wait` has
/// passed, at most [`PACED_READ_BYTES`] at once, and then pays.
pub(super) struct Paced {
    pub(super) pace: Arc<Pace>,
    pub(super) wait: Pin<Box<Sleep>>,
}

impl Paced {
    /// Once its turn has come, reads at most [`PACED_READ_BYTES`]
    /// and pays for it; before, it is pending as if for bytes (the connection's timeouts
    /// still apply).
    fn read(
        &mut self,
        io: &mut Io,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.wait.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let room = buf.remaining().min(PACED_READ_BYTES);
        let mut part = ReadBuf::new(buf.initialize_unfilled_to(room));
        let polled = io.poll_read(cx, &mut part);
        let read = part.filled().len();
        buf.advance(read);
        if read > 0 {
            let next = self.pace.charge(read, Instant::now());
            self.wait.as_mut().reset(next);
        }
        polled
    }
}

impl Io {
    fn poll_read(&mut self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("info", &self.info).finish()
    }
}

impl Conn {
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }

    /// The runtime to serve this connection on, when not the listener's.
    pub(crate) fn placed(&self) -> Option<&tokio::runtime::Handle> {
        self.placed.as_ref()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = match &mut this.paced {
            None => this.io.poll_read(cx, buf),
            Some(paced) => paced.read(&mut this.io, cx, buf),
        };
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                if let Some((left, _)) = &mut this.opening {
                    *left = left.saturating_sub(buf.filled().len() - before);
                    if *left == 0 {
                        this.opening = None;
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if let Some((_, deadline)) = &mut this.opening
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the HTTP/2 preface did not arrive within the handshake timeout",
                    )));
                }
                // The timer fires at the earliest the connection may close; then the
                // requests say whether it does, or when to look again.
                while this.idle.as_mut().poll(cx).is_ready() {
                    let now = Instant::now();
                    match this
                        .info
                        .activity
                        .close_at(this.idle_timeout, this.first_request_timeout)
                    {
                        Some(at) if at <= now => {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::TimedOut,
                                "no request within the idle or first-request timeout",
                            )));
                        }
                        Some(at) => this.idle.as_mut().reset(at),
                        None => this.idle.as_mut().reset(now + this.idle_timeout),
                    }
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;
    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

/// Open connections per client address on one listener, each at most `max`.
#[derive(Debug, Clone)]
pub(super) struct PeerSlots {
    pub(super) max: usize,
    held: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

/// One connection's place among its address's, given back when dropped.
#[derive(Debug)]
pub(super) struct PeerSlot(PeerSlots, std::net::IpAddr);

impl PeerSlots {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            held: Arc::default(),
        }
    }

    pub(super) fn held(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<std::net::IpAddr, usize>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn try_take(&self, ip: std::net::IpAddr) -> Option<PeerSlot> {
        let mut held = self.held();
        let n = held.entry(ip).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(PeerSlot(self.clone(), ip))
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut held = self.0.held();
        if let Some(n) = held.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.1);
            }
        }
    }
}
