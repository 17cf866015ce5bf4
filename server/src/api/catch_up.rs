//! Catch-up (issue #53, 3): an endpoint's retained events after a cursor, for a receiver
//! that was down to pull what it missed. Each event comes with the headers its delivery
//! carries, signed now as a delivery is, so the receiver verifies it with its webhook code.
//! ListEndpointEvents (a tenant token, `read`) and `GET /catch-up/{tenant}/{endpoint}`
//! (`crate::catch_up`: the request signed with the endpoint's own secret) both end here.

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_proto::v1 as pb;
use tonic::{Request, Status};

use super::convert::search_state as state;
use super::{HookdService, validate};
use crate::error::ApiError;

/// Events a page holds by default, and at most.
const DEFAULT_PAGE: u32 = 100;
const MAX_PAGE: u32 = 1_000;

impl HookdService {
    pub(super) async fn list_endpoint_events_in(
        &self,
        request: Request<pb::ListEndpointEventsRequest>,
    ) -> Result<pb::ListEndpointEventsResponse, Status> {
        self.may_use(
            &request,
            &format!("endpoint:{}", request.get_ref().endpoint),
        )?;
        let tenant = self.tenant_of(&request)?;
        self.endpoint_events(tenant, request.into_inner()).await
    }

    /// A page of `tenant`'s endpoint's events after the request's cursor.
    pub(crate) async fn endpoint_events(
        &self,
        tenant: TenantId,
        req: pb::ListEndpointEventsRequest,
    ) -> Result<pb::ListEndpointEventsResponse, Status> {
        validate::validate_name(&req.endpoint, "endpoint")?;
        let after = match req.after.as_str() {
            "" => None,
            a => Some(
                a.parse::<MessageId>()
                    .map_err(|e| ApiError::InvalidArgument(format!("after: {e}")))?,
            ),
        };
        let limit = match req.page_size {
            0 => DEFAULT_PAGE,
            n if n > MAX_PAGE => {
                return Err(ApiError::InvalidArgument(format!(
                    "page_size: {n} is over the limit of {MAX_PAGE}"
                ))
                .into());
            }
            n => n,
        } as usize;
        let name = req.endpoint;
        let view = self.endpoint_view(tenant, &name).await?.ok_or_else(|| {
            Status::from(ApiError::NotFound(format!(
                "endpoint: no endpoint named {name:?}"
            )))
        })?;
        if !view.record.catch_up {
            return Err(ApiError::FailedPrecondition(format!(
                "endpoint: {name:?} does not offer catch-up (set its catch_up)"
            ))
            .into());
        }
        let destination = Destination::endpoint(tenant, &name).encode();
        let (caught, next, more) = self
            .read(move |s| Ok(s.caught_up(tenant, &destination, after, limit)?))
            .await?;
        let secrets: Vec<hookd_core::signing::Secret> = view
            .clear_secrets
            .iter()
            .filter_map(|s| hookd_core::signing::Secret::parse(s).ok())
            .collect();
        let timestamp = self.clock.now_ms() / 1_000;
        let events = caught
            .into_iter()
            .map(|c| {
                let Some(record) = c.record else {
                    return pb::EndpointEvent {
                        id: c.id.to_string(),
                        state: state(c.state) as i32,
                        created_unix_ms: c.id.unix_ms(),
                        payload_expired: true,
                        attempts: c.attempts,
                        ..Default::default()
                    };
                };
                let mut headers = record.headers.clone();
                headers.extend(view.record.headers.clone());
                // The receiver's id for it: a replay job's copy is the original.
                let webhook_id = match record.replay_of.is_empty() {
                    true => c.id.to_string(),
                    false => record.replay_of.clone(),
                };
                let event_id = match record.event_id.is_empty() {
                    true => webhook_id.clone(),
                    false => record.event_id.clone(),
                };
                let key = match record.idempotency_key.is_empty() {
                    true => webhook_id.clone(),
                    false => record.idempotency_key.clone(),
                };
                headers.insert("idempotency-key".into(), key);
                headers.insert("hookd-event-id".into(), event_id);
                if !record.event_type.is_empty() {
                    headers.insert("webhook-event-type".into(), record.event_type.clone());
                }
                headers.insert("webhook-timestamp".into(), timestamp.to_string());
                if let Some(signature) = hookd_core::signing::signature_header(
                    &secrets,
                    &webhook_id,
                    timestamp,
                    &record.payload,
                ) {
                    headers.insert("webhook-signature".into(), signature);
                }
                headers.insert("webhook-id".into(), webhook_id);
                pb::EndpointEvent {
                    id: c.id.to_string(),
                    state: state(c.state) as i32,
                    event_type: record.event_type,
                    created_unix_ms: c.id.unix_ms(),
                    payload: record.payload,
                    headers: headers.into_iter().collect(),
                    payload_expired: false,
                    attempts: c.attempts,
                }
            })
            .collect();
        Ok(pb::ListEndpointEventsResponse {
            events,
            next_cursor: next.or(after).map(|id| id.to_string()).unwrap_or_default(),
            more,
        })
    }
}
