//! Where the checks run: the tower layer in front of every gRPC call (with the request
//! budget and the body deadline of the listener), and the axum middleware of the HTTP
//! listener.

use super::Denied;
use super::authenticator::Authenticator;
use super::scopes::{HEALTH_PREFIX, grpc_access, http_access};
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
        let access = grpc_access(request.uri().path(), self.auth.reflection);
        match self
            .auth
            .check_request(access, request.headers(), request.extensions())
        {
            Ok(caller) => {
                use crate::listen::Sharer;
                // Each connection and each caller holds at most a share of the budget.
                let mut sharers = Vec::with_capacity(2);
                // An accepted call keeps its connection open (see `listen::Activity`).
                let conn = request.extensions().get::<crate::listen::ConnInfo>();
                let active = conn.map(|conn| conn.activity.begin());
                if let Some(conn) = conn {
                    sharers.push(Sharer::Connection(conn.remote));
                    sharers.push(if Arc::ptr_eq(&caller, &self.auth.anonymous) {
                        Sharer::Peer(conn.remote.ip())
                    } else {
                        Sharer::Caller(Arc::from(caller.name.as_str()))
                    });
                }
                let budget = if request.uri().path().starts_with(HEALTH_PREFIX) {
                    &self.health
                } else {
                    &self.budget
                };
                let slot = match budget.try_request(sharers) {
                    Ok(slot) => slot,
                    Err(why) => {
                        let status = tonic::Status::resource_exhausted(why);
                        return Box::pin(std::future::ready(Ok(status.into_http())));
                    }
                };
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
                            tonic::body::Body::new(crate::listen::HoldBody::new(
                                body,
                                (slot, active),
                            ))
                        })
                    })
                })
            }
            Err(denied) => {
                let response = denied.to_status().into_http();
                Box::pin(std::future::ready(Ok(response)))
            }
        }
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
