//! Where the checks run: the tower layer in front of every gRPC call (with the request
//! budget and the body deadline of the listener), and the axum middleware of the HTTP
//! listener.

use super::authenticator::Authenticator;
use super::scopes::{HEALTH_PREFIX, grpc_access, http_access};
use super::{Denied, Principal};
use crate::listen::{RequestBudget, RequestSlot, Sharer};
use std::sync::Arc;
use std::time::Duration;

/// The tower layer in front of every gRPC call: [`Authenticator::check`] (the caller, a
/// [`Principal`], goes into the request's extensions), and a deadline for the request's
/// body, so a client that opens streams and never finishes their messages cannot make
/// hookd hold them.
#[derive(Debug, Clone)]
pub(crate) struct GrpcAuthLayer {
    pub auth: Arc<Authenticator>,
    pub(crate) body_timeout: Duration,
    pub budget: Arc<crate::listen::RequestBudget>,
    /// gRPC health calls' own budget.
    pub health: Arc<crate::listen::RequestBudget>,
}

impl<S> tower_layer::Layer<S> for GrpcAuthLayer {
    type Service = GrpcAuth<S>;
    fn layer(&self, inner: S) -> Self::Service {
        GrpcAuth {
            auth: self.auth.clone(),
            body_timeout: self.body_timeout,
            budget: self.budget.clone(),
            health: self.health.clone(),
            inner,
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct GrpcAuth<S> {
    auth: Arc<Authenticator>,
    body_timeout: Duration,
    budget: Arc<crate::listen::RequestBudget>,
    health: Arc<crate::listen::RequestBudget>,
    inner: S,
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B> tower_service::Service<http::Request<B>> for GrpcAuth<S>
where
    S: tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let admitted = request
            .extensions_mut()
            .remove::<Admitted>()
            .and_then(|a| a.take());
        let (caller, slot) = match admitted {
            // The JSON API checked this call and took its place before it read the body.
            Some(admitted) => admitted,
            None => match self.admit(&request) {
                Ok(admitted) => admitted,
                Err(status) => return Box::pin(std::future::ready(Ok(status.into_http()))),
            },
        };
        // An accepted call keeps its connection open (see `listen::Activity`).
        let active = request
            .extensions()
            .get::<crate::listen::ConnInfo>()
            .map(|conn| conn.activity.begin());
        request.extensions_mut().insert(caller);
        let timeout = self.body_timeout;
        let charge = slot.charge();
        let request = request.map(|body| {
            tonic::body::Body::new(crate::listen::DeadlineBody::new(body, timeout, charge))
        });
        // The clone is not ready; the one that was polled ready serves this call.
        let clone = self.inner.clone();
        let mut ready = std::mem::replace(&mut self.inner, clone);
        let call = ready.call(request);
        Box::pin(async move {
            // A streaming answer holds its places until its last message.
            let answer = call.await;
            answer.map(|r| {
                r.map(|body| {
                    tonic::body::Body::new(crate::listen::HoldBody::new(body, (slot, active)))
                })
            })
        })
    }
}

impl<S> GrpcAuth<S> {
    /// [`admit`] for a gRPC request (health calls in their own budget).
    fn admit<B>(&self, request: &http::Request<B>) -> Result<Admission, tonic::Status> {
        let path = request.uri().path();
        let budget = if path.starts_with(HEALTH_PREFIX) {
            &self.health
        } else {
            &self.budget
        };
        admit(
            &self.auth,
            budget,
            path,
            request.headers(),
            request.extensions(),
        )
    }
}

/// The caller of a call to gRPC `path` from its headers (and connection), and its place
/// in `budget`: each connection and each caller (an anonymous one by its address) holds
/// at most a share. What the gRPC layer does for every call, and the JSON API before it
/// reads a body.
pub(crate) fn admit(
    auth: &Authenticator,
    budget: &Arc<RequestBudget>,
    path: &str,
    headers: &http::HeaderMap,
    extensions: &http::Extensions,
) -> Result<Admission, tonic::Status> {
    let access = grpc_access(path, auth.reflection);
    let caller = auth
        .check_request(access, headers, extensions)
        .map_err(|denied| denied.to_status())?;
    let mut sharers = Vec::with_capacity(2);
    if let Some(conn) = extensions.get::<crate::listen::ConnInfo>() {
        sharers.push(Sharer::Connection(conn.remote));
        sharers.push(if caller.is_anonymous() {
            Sharer::Peer(conn.remote.ip())
        } else {
            Sharer::Caller(Arc::from(caller.name.as_str()))
        });
    }
    let slot = budget
        .try_request(sharers)
        .map_err(tonic::Status::resource_exhausted)?;
    Ok((caller, slot))
}

/// A call the JSON API makes in process after it authenticated the caller and took the
/// call's place in the budget itself, from the headers, before it read a byte of the body:
/// the layer serves it with that caller and that place (a rate limit is not taken twice).
/// Only hookd puts it in a request's extensions; nothing from the network can.
#[derive(Debug, Clone)]
pub(crate) struct Admitted(Arc<std::sync::Mutex<Option<Admission>>>);

/// A caller and its place in the budget.
pub(crate) type Admission = (Arc<Principal>, RequestSlot);

impl Admitted {
    pub(crate) fn new(caller: Arc<Principal>, slot: RequestSlot) -> Self {
        Self(Arc::new(std::sync::Mutex::new(Some((caller, slot)))))
    }

    fn take(&self) -> Option<Admission> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// The same check for the admin HTTP listener (axum middleware): 401 with
/// `WWW-Authenticate: Bearer`, 403, or 429 with `Retry-After`.
pub(crate) async fn http_middleware(
    axum::extract::State(auth): axum::extract::State<Arc<Authenticator>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let access = http_access(request.uri().path());
    match auth.check_request(access, request.headers(), request.extensions()) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(Denied::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a valid `Authorization: Bearer <token>` is required\n",
        )
            .into_response(),
        Err(Denied::PermissionDenied { caller, scope }) => (
            StatusCode::FORBIDDEN,
            format!("`{caller}` lacks the `{}` scope\n", scope.name()),
        )
            .into_response(),
        Err(Denied::RateLimited { retry_after }) => (
            StatusCode::TOO_MANY_REQUESTS,
            [(
                header::RETRY_AFTER,
                retry_after.as_secs().max(1).to_string(),
            )],
            "request rate over this caller's limit\n",
        )
            .into_response(),
    }
}
