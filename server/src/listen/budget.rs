//! The per-request budget of the gRPC listener: calls and request bytes in flight, each
//! sharer (a connection, a caller) held to its share; [`DeadlineBody`] bounds how long a
//! request body may take, [`HoldBody`] keeps a slot until the body is done.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::limits::ConnectionLimits;
use tokio::time::Sleep;

/// Who a call is charged to, besides the whole budget: its connection, and its caller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Sharer {
    Connection(SocketAddr),
    /// A named caller (a token or a client certificate).
    Caller(Arc<str>),
    /// An unauthenticated caller, by its address.
    Peer(std::net::IpAddr),
}

impl std::fmt::Display for Sharer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connection(a) => write!(f, "this connection ({a})"),
            Self::Caller(name) => write!(f, "caller `{name}`"),
            Self::Peer(ip) => write!(f, "client address {ip}"),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Usage {
    requests: usize,
    bytes: u64,
}

#[derive(Debug, Default)]
struct Held {
    total: Usage,
    /// Only sharers holding something are here.
    shares: std::collections::HashMap<Sharer, Usage>,
}

/// What gRPC calls in progress may hold at once: calls, and request-body bytes received
/// but not yet decoded (what a client that never finishes its messages makes hookd
/// hold); in all, and per connection and per caller (a share of each).
#[derive(Debug)]
pub(crate) struct RequestBudget {
    /// The setting that bounds the calls, for refusals.
    requests_key: &'static str,
    max_requests: usize,
    max_bytes: u64,
    share_requests: usize,
    share_bytes: u64,
    share_percent: u8,
    held: std::sync::Mutex<Held>,
}

/// One call's place in the [`RequestBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct RequestSlot {
    budget: Arc<RequestBudget>,
    sharers: Arc<[Sharer]>,
}

impl RequestSlot {
    /// What the call's request body charges its bytes to.
    pub(crate) fn charge(&self) -> Charge {
        Charge {
            budget: self.budget.clone(),
            sharers: self.sharers.clone(),
        }
    }
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        self.budget.release(&self.sharers, 1, 0);
    }
}

/// Where a request body's bytes are counted: a budget and the call's sharers.
#[derive(Debug, Clone)]
pub(crate) struct Charge {
    budget: Arc<RequestBudget>,
    pub(super) sharers: Arc<[Sharer]>,
}

impl Charge {
    /// A holder of raw bytes charged to this budget (a JSON body and what parsing it
    /// costs), given back when it is dropped.
    pub(crate) fn bytes(&self) -> HeldBytes {
        HeldBytes {
            charge: self.clone(),
            counted: 0,
        }
    }
}

/// Bytes a call holds outside gRPC's framing (the JSON API's body as it arrives, and the
/// memory its parse takes), counted in the [`RequestBudget`] until dropped.
#[derive(Debug)]
pub(crate) struct HeldBytes {
    charge: Charge,
    counted: u64,
}

impl HeldBytes {
    /// Counts `bytes` more, or says which bound they would pass (and counts nothing).
    pub(crate) fn add(&mut self, bytes: u64) -> Result<(), String> {
        self.charge.budget.try_bytes(&self.charge.sharers, bytes)?;
        self.counted += bytes;
        Ok(())
    }

    /// What is counted now.
    pub(crate) fn counted(&self) -> u64 {
        self.counted
    }
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        if self.counted > 0 {
            self.charge
                .budget
                .release(&self.charge.sharers, 0, self.counted);
        }
    }
}

impl RequestBudget {
    /// The budget of API calls (`max_requests_in_flight`, `max_request_bytes_in_flight`).
    pub(crate) fn new(limits: &ConnectionLimits) -> Arc<Self> {
        Self::with(
            "connections.max_requests_in_flight",
            limits.max_requests_in_flight,
            limits.max_request_bytes_in_flight,
            limits.max_share_percent,
        )
    }

    /// The budget of gRPC health calls (`max_health_calls_in_flight`, 1 MiB).
    pub(crate) fn health(limits: &ConnectionLimits) -> Arc<Self> {
        Self::with(
            "connections.max_health_calls_in_flight",
            limits.max_health_calls_in_flight,
            1 << 20,
            limits.max_share_percent,
        )
    }

    fn with(
        requests_key: &'static str,
        max_requests: usize,
        max_bytes: u64,
        share_percent: u8,
    ) -> Arc<Self> {
        let percent = u64::from(share_percent.clamp(1, 100));
        let share = |max: u64| (max.saturating_mul(percent) / 100).max(1);
        Arc::new(Self {
            requests_key,
            max_requests,
            max_bytes,
            share_requests: usize::try_from(share(max_requests as u64)).unwrap_or(usize::MAX),
            share_bytes: share(max_bytes),
            share_percent,
            held: std::sync::Mutex::default(),
        })
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A place for one more call charged to `sharers`, or why there is none.
    pub(crate) fn try_request(
        self: &Arc<Self>,
        sharers: Vec<Sharer>,
    ) -> Result<RequestSlot, String> {
        let mut held = self.held();
        if held.total.requests >= self.max_requests {
            return Err(format!(
                "hookd is serving {} calls at once ({}); retry with backoff",
                held.total.requests, self.requests_key
            ));
        }
        for sharer in &sharers {
            let used = held.shares.get(sharer).map_or(0, |u| u.requests);
            if used >= self.share_requests {
                return Err(format!(
                    "{sharer} has {used} calls in progress, its share ({} % of {} = {}); retry with backoff",
                    self.share_percent, self.requests_key, self.share_requests
                ));
            }
        }
        held.total.requests += 1;
        for sharer in &sharers {
            held.shares.entry(sharer.clone()).or_default().requests += 1;
        }
        Ok(RequestSlot {
            budget: self.clone(),
            sharers: sharers.into(),
        })
    }

    /// Counts `bytes` more for `sharers`, or says which bound they would pass (and counts
    /// nothing).
    pub(super) fn try_bytes(&self, sharers: &[Sharer], bytes: u64) -> Result<(), String> {
        let mut held = self.held();
        let total = held.total.bytes + bytes;
        if total > self.max_bytes {
            return Err(format!(
                "hookd would hold {total} bytes of unfinished requests (connections.max_request_bytes_in_flight {}); retry with backoff",
                self.max_bytes
            ));
        }
        for sharer in sharers {
            let used = held.shares.get(sharer).map_or(0, |u| u.bytes);
            if used > 0 && used + bytes > self.share_bytes {
                return Err(format!(
                    "{sharer} would hold {} bytes of unfinished requests, past its share ({} % of connections.max_request_bytes_in_flight = {}); retry with backoff",
                    used + bytes,
                    self.share_percent,
                    self.share_bytes
                ));
            }
        }
        held.total.bytes = total;
        for sharer in sharers {
            held.shares.entry(sharer.clone()).or_default().bytes += bytes;
        }
        Ok(())
    }

    pub(super) fn release(&self, sharers: &[Sharer], requests: usize, bytes: u64) {
        let mut held = self.held();
        held.total.requests = held.total.requests.saturating_sub(requests);
        held.total.bytes = held.total.bytes.saturating_sub(bytes);
        for sharer in sharers {
            if let Some(u) = held.shares.get_mut(sharer) {
                u.requests = u.requests.saturating_sub(requests);
                u.bytes = u.bytes.saturating_sub(bytes);
                if u.requests == 0 && u.bytes == 0 {
                    held.shares.remove(sharer);
                }
            }
        }
    }

    /// Calls in progress, and how many sharers hold something.
    #[cfg(test)]
    pub(super) fn in_use(&self) -> (usize, usize) {
        let held = self.held();
        (held.total.requests, held.shares.len())
    }
}

/// A request body that fails with DEADLINE_EXCEEDED when it has not ended within a time
/// from its start (the gRPC request-body timeout), and with RESOURCE_EXHAUSTED when the
/// bytes all calls hold would pass the [`RequestBudget`].
///
/// What is charged is each message's announced length (the gRPC frame prefix), as soon as
/// the prefix arrives: tonic reserves a buffer of that size then, so 5 bytes announcing
/// 4 MiB cost 4 MiB of memory (finding F2: 100 such calls took 1.65 GB).
#[derive(Debug)]
pub(crate) struct DeadlineBody<B> {
    inner: B,
    deadline: Pin<Box<Sleep>>,
    charge: Charge,
    /// Bytes this body has added to the budget (given back when dropped).
    counted: u64,
    /// The gRPC message framing: prefix bytes seen of the current message...
    prefix: [u8; 5],
    prefix_len: usize,
    /// ...and, once it is complete, the message bytes still to come.
    remaining: u64,
}

impl<B> DeadlineBody<B> {
    pub(crate) fn new(inner: B, timeout: Duration, charge: Charge) -> Self {
        Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            charge,
            counted: 0,
            prefix: [0; 5],
            prefix_len: 0,
            remaining: 0,
        }
    }

    /// Follows the framing through `data`; charges each announced length. Err: the bound
    /// it would pass.
    fn charge(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let take = data
                    .len()
                    .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                self.remaining -= take as u64;
                data = &data[take..];
                continue;
            }
            let take = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + take].copy_from_slice(&data[..take]);
            self.prefix_len += take;
            data = &data[take..];
            if self.prefix_len == 5 {
                self.prefix_len = 0;
                let len = u64::from(u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]));
                self.remaining = len;
                let charged = len + 5;
                self.charge
                    .budget
                    .try_bytes(&self.charge.sharers, charged)?;
                self.counted += charged;
            }
        }
        Ok(())
    }
}

impl<B> Drop for DeadlineBody<B> {
    fn drop(&mut self) {
        if self.counted > 0 {
            self.charge
                .budget
                .release(&self.charge.sharers, 0, self.counted);
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<B> http_body::Body for DeadlineBody<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref()
                    && let Err(why) = this.charge(data)
                {
                    return Poll::Ready(Some(Err(Box::new(tonic::Status::resource_exhausted(
                        why,
                    )))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(other) => Poll::Ready(other.map(|f| f.map_err(Into::into))),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    Poll::Ready(Some(Err(Box::new(tonic::Status::deadline_exceeded(
                        "the request's message did not arrive within connections.request_body_timeout_ms",
                    )))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that holds `H` (a call's budget slot, its connection's [`Active`])
/// until the body ends or is dropped: a streaming call counts as in progress while it
/// streams.
#[derive(Debug)]
pub(crate) struct HoldBody<B, H> {
    inner: B,
    hold: Option<H>,
}

impl<B, H> HoldBody<B, H> {
    pub(crate) fn new(inner: B, hold: H) -> Self {
        Self {
            inner,
            hold: Some(hold),
        }
    }
}

impl<B, H> http_body::Body for HoldBody<B, H>
where
    B: http_body::Body + Unpin,
    H: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            this.hold = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
