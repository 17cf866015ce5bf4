//! A typed Rust client for hookd's gRPC API (`hookd.v1.Hookd`).
//!
//! ```no_run
//! # use std::time::Duration;
//! # async fn demo() -> Result<(), hookd_client::Error> {
//! let mut c = hookd_client::Client::connect("http://127.0.0.1:7700").await?;
//! c.enqueue(hookd_client::Event::to_queue("jobs", b"{\"n\":1}".to_vec())).await?;
//! let leased = c.receive("jobs", 10, Duration::from_secs(30), Some(Duration::from_secs(20))).await?;
//! c.ack(leased.iter().map(|m| m.lease_id.clone())).await?;
//! # Ok(()) }
//! ```
//!
//! (The README shows these lines as they are: a test of hookd's compares them.)
//!
//! Every event gets an idempotency key: the one given, or a fresh UUIDv4 made here, so a
//! caller that retries `enqueue` after a timeout never stores the event twice.

#![forbid(unsafe_code)]

mod emitter;
pub mod route;

pub use emitter::{Counters, EmitError, Emitter, EmitterConfig, Transport};

use std::collections::HashMap;
use std::time::Duration;

pub use hookd_proto::v1 as pb;
use pb::hookd_client::HookdClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// The generated stub with hookd's credentials on every call.
pub type Api = HookdClient<InterceptedService<Channel, Credentials>>;

/// Adds `authorization: Bearer TOKEN` to every call when a token is set, and
/// `x-hookd-tenant: NAME` when a tenant is (an operator's token acting on that tenant).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    authorization: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    tenant: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

/// The header an operator's call names its tenant with.
pub const TENANT_HEADER: &str = "x-hookd-tenant";

impl Credentials {
    /// No token (a hookd without authentication, or mTLS alone).
    pub fn none() -> Self {
        Self::default()
    }

    /// A bearer token; fails if it is not a valid header value.
    pub fn bearer(token: &str) -> Result<Self, Error> {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| Error::Config("the token is not a valid header value".into()))?;
        Ok(Self {
            authorization: Some(value),
            tenant: None,
        })
    }

    /// Every call acts on tenant `name` (an operator's token; a tenant's own token needs
    /// none). Fails if it is not a valid header value.
    pub fn for_tenant(mut self, name: &str) -> Result<Self, Error> {
        let value = name
            .parse()
            .map_err(|_| Error::Config("the tenant is not a valid header value".into()))?;
        self.tenant = Some(value);
        Ok(self)
    }
}

impl tonic::service::Interceptor for Credentials {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.authorization {
            r.metadata_mut().insert("authorization", v.clone());
        }
        if let Some(v) = &self.tenant {
            r.metadata_mut().insert(TENANT_HEADER, v.clone());
        }
        Ok(r)
    }
}

/// How to reach a hookd that needs more than a plaintext address.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Bearer token (`--token`).
    pub token: Option<String>,
    /// The tenant every call acts on (`--tenant`: an operator's token naming one; none:
    /// the token's own tenant, or `default` for an operator).
    pub tenant: Option<String>,
    /// PEM CA certificates to trust for hookd's certificate (with an `https://` address);
    /// `None` trusts nothing beyond them, so give it for TLS.
    pub ca_pem: Option<Vec<u8>>,
    /// PEM client certificate and key, for mTLS.
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
    /// The name hookd's certificate is checked against (default: the address's host).
    pub domain: Option<String>,
}

/// What can go wrong talking to hookd.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] tonic::Status),
    #[error("client configuration: {0}")]
    Config(String),
}

/// One event to enqueue.
#[derive(Debug, Clone, Default)]
pub struct Event {
    request: pb::EnqueueRequest,
}

impl Event {
    fn with(destination: pb::enqueue_request::Destination, payload: Vec<u8>) -> Self {
        Self {
            request: pb::EnqueueRequest {
                destination: Some(destination),
                payload,
                ..Default::default()
            },
        }
    }

    /// An event for a pull queue.
    pub fn to_queue(queue: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self::with(
            pb::enqueue_request::Destination::Queue(queue.into()),
            payload.into(),
        )
    }

    /// An event for a registered endpoint.
    pub fn to_endpoint(name: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self::with(
            pb::enqueue_request::Destination::Endpoint(name.into()),
            payload.into(),
        )
    }

    /// An event published to `topic`: every subscription that takes the topic (and whose
    /// filter matches the event) gets a delivery. The topic is the event's type.
    pub fn to_topic(topic: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self::with(
            pb::enqueue_request::Destination::Topic(topic.into()),
            payload.into(),
        )
    }

    /// An event for an ad-hoc URL.
    pub fn to_url(url: impl Into<String>, payload: impl Into<Vec<u8>>) -> Self {
        Self::with(
            pb::enqueue_request::Destination::Url(url.into()),
            payload.into(),
        )
    }

    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.request.idempotency_key = key.into();
        self
    }

    pub fn event_type(mut self, t: impl Into<String>) -> Self {
        self.request.event_type = t.into();
        self
    }

    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.request.headers.insert(name.into(), value.into());
        self
    }

    pub fn delay(mut self, d: Duration) -> Self {
        self.request.delay_ms = d.as_millis() as u64;
        self
    }

    /// This event's own backoff: the delay after the n-th failure is drawn uniformly from
    /// `0..=min(cap, base * 2^(n-1))`.
    pub fn retry_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.request.retry_base_ms = base.as_millis() as u64;
        self.request.retry_cap_ms = cap.as_millis() as u64;
        self
    }

    pub fn max_attempts(mut self, n: u32) -> Self {
        self.request.max_attempts = n;
        self
    }

    /// Its FIFO lane at an ordered endpoint or queue: events of one key are delivered one
    /// at a time, in the order hookd stored them, each with its number in the key's lane.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.request.ordering_key = key.into();
        self
    }

    /// The request as sent, with a generated idempotency key if none was given.
    pub fn into_request(mut self) -> pb::EnqueueRequest {
        if self.request.idempotency_key.is_empty() {
            self.request.idempotency_key = uuid::Uuid::new_v4().to_string();
        }
        self.request
    }

    /// An event from a request built elsewhere.
    pub fn from_request(request: pb::EnqueueRequest) -> Self {
        Self { request }
    }

    /// The request exactly as built, without a generated key.
    pub fn into_raw_request(self) -> pb::EnqueueRequest {
        self.request
    }
}

/// A connection to hookd; cheap to clone (clones share the HTTP/2 connection).
#[derive(Debug, Clone)]
pub struct Client {
    inner: Api,
}

impl Client {
    /// Connects to `http://host:port`.
    pub async fn connect(addr: impl Into<String>) -> Result<Self, Error> {
        let channel = endpoint(addr)?.connect().await?;
        Ok(Self::from_channel(channel))
    }

    /// Connects with a token and/or TLS (`https://host:port`).
    pub async fn connect_with(addr: impl Into<String>, options: Options) -> Result<Self, Error> {
        let mut credentials = match &options.token {
            Some(t) => Credentials::bearer(t)?,
            None => Credentials::none(),
        };
        if let Some(tenant) = &options.tenant {
            credentials = credentials.for_tenant(tenant)?;
        }
        let channel = secure_endpoint(addr, &options)?.connect().await?;
        Ok(Self::with_credentials(channel, credentials))
    }

    pub fn from_channel(channel: Channel) -> Self {
        Self::with_credentials(channel, Credentials::none())
    }

    pub fn with_credentials(channel: Channel, credentials: Credentials) -> Self {
        Self {
            inner: HookdClient::with_interceptor(channel, credentials)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20),
        }
    }

    /// The generated stub, for calls this wrapper does not cover.
    pub fn raw(&mut self) -> &mut Api {
        &mut self.inner
    }

    /// Stores one event; returns once it is durable.
    pub async fn enqueue(&mut self, event: Event) -> Result<pb::EnqueueResponse, Error> {
        Ok(self.inner.enqueue(event.into_request()).await?.into_inner())
    }

    /// Stores many events in one call; one result per event, in order.
    pub async fn enqueue_batch(
        &mut self,
        events: impl IntoIterator<Item = Event>,
    ) -> Result<Vec<pb::EnqueueResult>, Error> {
        let events = events.into_iter().map(Event::into_request).collect();
        Ok(self
            .inner
            .enqueue_batch(pb::EnqueueBatchRequest { events })
            .await?
            .into_inner()
            .results)
    }

    /// Leases up to `max` messages of `queue` for `visibility`; with `wait`, long-polls.
    pub async fn receive(
        &mut self,
        queue: impl Into<String>,
        max: u32,
        visibility: Duration,
        wait: Option<Duration>,
    ) -> Result<Vec<pb::ReceivedMessage>, Error> {
        let request = pb::ReceiveRequest {
            queue: queue.into(),
            max_messages: max,
            visibility_timeout_ms: visibility.as_millis() as u64,
            wait_ms: wait.map_or(0, |w| w.as_millis() as u64),
        };
        Ok(self.inner.receive(request).await?.into_inner().messages)
    }

    /// Acknowledges leases, all or nothing.
    pub async fn ack(&mut self, lease_ids: impl IntoIterator<Item = String>) -> Result<u32, Error> {
        let lease_ids = lease_ids.into_iter().collect();
        Ok(self
            .inner
            .ack(pb::AckRequest { lease_ids })
            .await?
            .into_inner()
            .acked)
    }

    /// Gives a lease back for a retry after `delay` (or the backoff).
    pub async fn nack(
        &mut self,
        lease_id: impl Into<String>,
        delay: Option<Duration>,
        reason: impl Into<String>,
    ) -> Result<pb::NackResponse, Error> {
        let request = pb::NackRequest {
            lease_id: lease_id.into(),
            delay_ms: delay.map_or(0, |d| d.as_millis() as u64),
            reason: reason.into(),
        };
        Ok(self.inner.nack(request).await?.into_inner())
    }

    /// The totals and every destination (hookd answers in pages; this asks for each).
    pub async fn stats(&mut self) -> Result<pb::StatsResponse, Error> {
        Ok(all_stats(&mut self.inner).await?)
    }

    pub async fn get_message(
        &mut self,
        id: impl Into<String>,
    ) -> Result<pb::GetMessageResponse, Error> {
        Ok(self
            .inner
            .get_message(pb::GetMessageRequest { id: id.into() })
            .await?
            .into_inner())
    }

    pub async fn put_endpoint(
        &mut self,
        endpoint: pb::Endpoint,
    ) -> Result<pb::PutEndpointResponse, Error> {
        Ok(self
            .inner
            .put_endpoint(pb::PutEndpointRequest {
                endpoint: Some(endpoint),
            })
            .await?
            .into_inner())
    }

    /// Creates or replaces a subscription (admin scope).
    pub async fn put_subscription(
        &mut self,
        subscription: pb::Subscription,
    ) -> Result<pb::PutSubscriptionResponse, Error> {
        Ok(self
            .inner
            .put_subscription(pb::PutSubscriptionRequest {
                subscription: Some(subscription),
            })
            .await?
            .into_inner())
    }

    /// Creates or replaces an ingest source (admin scope).
    pub async fn put_source(&mut self, source: pb::Source) -> Result<pb::PutSourceResponse, Error> {
        Ok(self
            .inner
            .put_source(pb::PutSourceRequest {
                source: Some(source),
            })
            .await?
            .into_inner())
    }

    pub async fn list_dead_letters(
        &mut self,
        destination: Option<pb::Destination>,
        page_size: u32,
        page_token: impl Into<String>,
    ) -> Result<pb::ListDeadLettersResponse, Error> {
        let request = pb::ListDeadLettersRequest {
            destination,
            page_size,
            page_token: page_token.into(),
        };
        Ok(self.inner.list_dead_letters(request).await?.into_inner())
    }

    /// Replays dead letters by id.
    pub async fn replay(&mut self, ids: impl IntoIterator<Item = String>) -> Result<u32, Error> {
        let request = pb::ReplayDeadLettersRequest {
            ids: ids.into_iter().collect(),
            ..Default::default()
        };
        Ok(self
            .inner
            .replay_dead_letters(request)
            .await?
            .into_inner()
            .replayed)
    }

    /// Per-destination stats keyed by destination (`queue:NAME`, ...).
    pub async fn stats_by_destination(
        &mut self,
    ) -> Result<HashMap<String, pb::DestinationStats>, Error> {
        Ok(self
            .stats()
            .await?
            .destinations
            .into_iter()
            .map(|d| (d.destination.clone(), d))
            .collect())
    }
}

/// A queue destination, for filters.
/// The transport settings hookd is meant to be reached with: no Nagle delay (small
/// answers would wait up to 40 ms), and HTTP/2 windows big enough for a batch of large
/// events to go out in one burst. Every client of this workspace connects through it.
pub fn endpoint(addr: impl Into<String>) -> Result<Endpoint, Error> {
    Ok(Endpoint::from_shared(addr.into())?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(4 << 20))
        .initial_connection_window_size(Some(16 << 20)))
}

/// [`endpoint`] with TLS from `options` (when it names a CA or an identity).
pub fn secure_endpoint(addr: impl Into<String>, options: &Options) -> Result<Endpoint, Error> {
    let endpoint = endpoint(addr)?;
    if options.ca_pem.is_none() && options.identity_pem.is_none() {
        return Ok(endpoint);
    }
    let mut tls = ClientTlsConfig::new();
    if let Some(ca) = &options.ca_pem {
        tls = tls.ca_certificate(Certificate::from_pem(ca));
    }
    if let Some((cert, key)) = &options.identity_pem {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    if let Some(domain) = &options.domain {
        tls = tls.domain_name(domain.clone());
    }
    Ok(endpoint.tls_config(tls)?)
}

/// Stats with every destination: asks for page after page (each at most 10,000) and
/// returns them as one answer (totals and storage figures from the first page).
pub async fn all_stats<T>(client: &mut HookdClient<T>) -> Result<pb::StatsResponse, tonic::Status>
where
    // The generated client's own bounds: any transport (a channel, or one with an
    // interceptor).
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut request = pb::StatsRequest {
        page_size: 10_000,
        page_token: String::new(),
    };
    let mut all = client.stats(request.clone()).await?.into_inner();
    // Bounded: every page moves past the last key of the one before.
    while !all.next_page_token.is_empty() {
        request.page_token = std::mem::take(&mut all.next_page_token);
        let page = client.stats(request.clone()).await?.into_inner();
        all.destinations.extend(page.destinations);
        all.next_page_token = page.next_page_token;
    }
    Ok(all)
}

pub fn queue(name: impl Into<String>) -> pb::Destination {
    pb::Destination {
        kind: Some(pb::destination::Kind::Queue(name.into())),
    }
}
