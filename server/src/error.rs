//! The errors that cross the gRPC boundary, and the one place that maps them to
//! `tonic::Status`.

use tonic::{Code, Status};

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
    ResourceExhausted(String),
    /// Storage failed or the server is shutting down: nothing was acknowledged.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl ApiError {
    pub fn code(&self) -> Code {
        match self {
            Self::InvalidArgument(_) => Code::InvalidArgument,
            Self::NotFound(_) => Code::NotFound,
            Self::FailedPrecondition(_) => Code::FailedPrecondition,
            Self::ResourceExhausted(_) => Code::ResourceExhausted,
            Self::Unavailable(_) => Code::Unavailable,
        }
    }

    /// Prefixes the message with the path of the item it concerns, e.g. `events[3].`.
    pub fn within(self, prefix: &str) -> Self {
        let wrap = |m: String| format!("{prefix}{m}");
        match self {
            Self::InvalidArgument(m) => Self::InvalidArgument(wrap(m)),
            Self::NotFound(m) => Self::NotFound(wrap(m)),
            Self::FailedPrecondition(m) => Self::FailedPrecondition(wrap(m)),
            Self::ResourceExhausted(m) => Self::ResourceExhausted(wrap(m)),
            Self::Unavailable(m) => Self::Unavailable(m),
        }
    }
}

impl From<ApiError> for Status {
    fn from(e: ApiError) -> Self {
        Status::new(e.code(), e.to_string())
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        Self::Unavailable(e.to_string())
    }
}
