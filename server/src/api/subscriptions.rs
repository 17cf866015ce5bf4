//! Subscriptions on the wire: `hookd.v1.Subscription` to and from the registry's
//! [`SubscriptionSpec`] (the filter travels as a `google.protobuf.Struct`).

use hookd_core::destination::{Destination, To};
use hookd_core::scope::TenantId;
use hookd_proto::v1::{self as pb, subscription::Destination as Target};

use crate::error::ApiError;
use crate::subscriptions::{Subscription, SubscriptionError, SubscriptionSpec};

/// The spec a PutSubscription asks for (checked by `Subscription::compile`; the times are
/// the registry's).
pub(crate) fn spec(s: Option<pb::Subscription>) -> Result<SubscriptionSpec, ApiError> {
    let s = s.ok_or_else(|| ApiError::InvalidArgument("subscription: is required".into()))?;
    let destination = match s.destination {
        Some(Target::Endpoint(name)) => Destination::endpoint(TenantId::DEFAULT, name).local_key(),
        Some(Target::Queue(name)) => Destination::queue(TenantId::DEFAULT, name).local_key(),
        None => {
            return Err(ApiError::InvalidArgument(
                "subscription.destination: one of endpoint or queue is required".into(),
            ));
        }
    };
    Ok(SubscriptionSpec {
        name: s.name,
        destination,
        event_types: s.event_types,
        filter: s.filter.as_ref().map(hookd_proto::json::struct_to_json),
        description: s.description,
        created_ms: 0,
        updated_ms: 0,
    })
}

/// A subscription as answers show it.
pub(crate) fn shown(s: &Subscription) -> pb::Subscription {
    let destination = match &s.destination.to {
        To::Endpoint(name) => Some(Target::Endpoint(name.clone())),
        To::Queue(name) => Some(Target::Queue(name.clone())),
        To::Url(_) => None,
    };
    pb::Subscription {
        name: s.spec.name.clone(),
        destination,
        event_types: s.spec.event_types.clone(),
        filter: s
            .spec
            .filter
            .as_ref()
            .and_then(hookd_proto::json::json_to_struct),
        description: s.spec.description.clone(),
        created_unix_ms: s.spec.created_ms,
        updated_unix_ms: s.spec.updated_ms,
    }
}

impl From<SubscriptionError> for ApiError {
    fn from(e: SubscriptionError) -> Self {
        match e {
            SubscriptionError::Invalid(m) => ApiError::InvalidArgument(m),
            SubscriptionError::NotFound(m) => ApiError::NotFound(m),
            SubscriptionError::Full(m) => ApiError::FailedPrecondition(m),
            SubscriptionError::Refused(r) => ApiError::refused(r, "subscription"),
        }
    }
}
