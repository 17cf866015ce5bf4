//! The errors that cross the gRPC boundary, and the one place that maps them to
//! `tonic::Status`: the API's own validation errors, the engine's [`Refusal`]s (with the
//! request field they concern) and storage errors of reads.

use tonic::{Code, Status};

use hookd_engine::Refusal;

/// An error answered to a client. Messages name the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error("{0}")]
    AlreadyExists(String),
    /// Over a limit that clears by itself; the client may retry after `retry_after_ms`
    /// (sent as `google.rpc.RetryInfo` in the status details).
    #[error("{message}")]
    ResourceExhausted {
        message: String,
        retry_after_ms: Option<u64>,
    },
    /// Storage failed or the server is shutting down: nothing was acknowledged.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A bug in hookd.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn code(&self) -> Code {
        match self {
            Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::NotFound(_) => Code::NotFound,
            Self::FailedPrecondition(_) => Code::FailedPrecondition,
            Self::AlreadyExists(_) => Code::AlreadyExists,
            Self::ResourceExhausted { .. } => Code::ResourceExhausted,
            Self::Unavailable(_) => Code::Unavailable,
            Self::Internal(_) => Code::Internal,
        }
    }

    /// Prefixes the message with the path of the item it concerns, e.g. `events[3].`.
    pub fn within(self, prefix: &str) -> Self {
        let wrap = |m: String| format!("{prefix}{m}");
        match self {
            Self::InvalidArgument(m) => Self::InvalidArgument(wrap(m)),
            Self::NotFound(m) => Self::NotFound(wrap(m)),
            Self::FailedPrecondition(m) => Self::FailedPrecondition(wrap(m)),
            Self::AlreadyExists(m) => Self::AlreadyExists(wrap(m)),
            Self::ResourceExhausted {
                message,
                retry_after_ms,
            } => Self::ResourceExhausted {
                message: wrap(message),
                retry_after_ms,
            },
            Self::Unavailable(m) => Self::Unavailable(m),
            Self::Internal(m) => Self::Internal(m),
        }
    }
}

impl ApiError {
    /// The answer to a request the engine refused, where `field` is the request's field the
    /// refusal is about (e.g. `lease_id`); a refusal of the i-th item of a list becomes
    /// `field[i]`. Unavailability and capacity concern no field.
    pub fn refused(refusal: Refusal, field: &str) -> Self {
        let about = |r: &Refusal| format!("{field}: {r}");
        match refusal {
            Refusal::At { index, refusal } => Self::refused(*refusal, &format!("{field}[{index}]")),
            Refusal::Unavailable(m) => Self::Unavailable(m),
            r @ (Refusal::AtCapacity { .. }
            | Refusal::OverMark(_)
            | Refusal::OverQuota(_)
            | Refusal::DiskFull { .. }) => Self::ResourceExhausted {
                retry_after_ms: r.retry_after_ms(),
                message: r.to_string(),
            },
            r @ (Refusal::UnknownEndpoint { .. }
            | Refusal::NoEndpoint { .. }
            | Refusal::NoMessage { .. }
            | Refusal::NoTenant { .. }
            | Refusal::NoToken { .. }
            | Refusal::NoQueue { .. }
            | Refusal::NoEventType { .. }
            | Refusal::NotInFlight { .. }) => Self::NotFound(about(&r)),
            r @ (Refusal::TenantExists { .. } | Refusal::TokenExists { .. }) => {
                Self::AlreadyExists(about(&r))
            }
            r @ (Refusal::TooManyTenants { .. }
            | Refusal::TooManyTokens { .. }
            | Refusal::TooManyQueues { .. }
            | Refusal::TooManyEventTypes { .. }) => Self::ResourceExhausted {
                retry_after_ms: None,
                message: about(&r),
            },
            r @ (Refusal::EndpointBusy { .. }
            | Refusal::EndpointGone { .. }
            | Refusal::NotDeadLetter { .. }
            | Refusal::MessageEndpointGone { .. }
            | Refusal::NotPull { .. }
            | Refusal::LeaseExpired { .. }
            | Refusal::DefaultTenant
            | Refusal::QueueFromConfig { .. }
            | Refusal::TenantBusy { .. }
            | Refusal::CompletedLater { .. }) => Self::FailedPrecondition(about(&r)),
        }
    }
}

impl ApiError {
    /// When the client may retry (RESOURCE_EXHAUSTED only).
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            Self::ResourceExhausted { retry_after_ms, .. } => *retry_after_ms,
            _ => None,
        }
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        match e.retry_after_ms() {
            // google.rpc.RetryInfo in the grpc-status-details-bin trailer: what gRPC
            // clients in every language read to back off.
            Some(ms) => {
                use tonic_types::{ErrorDetails, StatusExt};
                Status::with_error_details(
                    e.code(),
                    e.to_string(),
                    ErrorDetails::with_retry_info(Some(std::time::Duration::from_millis(ms))),
                )
            }
            None => Status::new(e.code(), e.to_string()),
        }
    }
}

impl From<hookd_storage::store::StoreError> for ApiError {
    fn from(e: hookd_storage::store::StoreError) -> Self {
        Self::Unavailable(e.to_string())
    }
}
