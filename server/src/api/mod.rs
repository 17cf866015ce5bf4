//! The gRPC service `hookd.v1.Hookd`: validation, then the engine (writes) or a read
//! transaction (reads). Errors reach the wire only through `ApiError -> Status`.

pub mod validate;

use hookd_proto::v1::{self as pb, hookd_server::Hookd};
use tonic::{Request, Response, Status};

use std::sync::Arc;

use crate::clock::Clock;
use crate::destination::{Destination, validate_name};
use crate::engine::EngineHandle;
use crate::error::ApiError;
use crate::ids::{LeaseId, MessageId};
use crate::store::{AttemptRecord, DoneRecord, State, Store, StoredMessage};
use validate::Limits;

/// The service; cheap to clone.
#[derive(Debug, Clone)]
pub struct HookdService {
    engine: EngineHandle,
    store: Store,
    limits: Limits,
    clock: Arc<dyn Clock>,
}

impl HookdService {
    pub fn new(engine: EngineHandle, store: Store, limits: Limits, clock: Arc<dyn Clock>) -> Self {
        Self {
            engine,
            store,
            limits,
            clock,
        }
    }

    /// Runs a read on the blocking pool: redb reads touch the disk.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, Status> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| Status::unavailable(format!("read task failed: {e}")))?
            .map_err(Status::from)
    }
}

fn error_proto(e: &ApiError) -> pb::Error {
    pb::Error {
        code: e.code() as i32,
        message: e.to_string(),
    }
}

#[tonic::async_trait]
impl Hookd for HookdService {
    async fn enqueue(
        &self,
        request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        let message =
            validate::new_message(request.into_inner(), &self.limits, self.clock.now_ms())?;
        let mut results = self.engine.enqueue(vec![message]).await?;
        match results.pop() {
            Some(result) => Ok(Response::new(result?.into())),
            None => Err(Status::internal("the engine gave no result")),
        }
    }

    async fn enqueue_batch(
        &self,
        request: Request<pb::EnqueueBatchRequest>,
    ) -> Result<Response<pb::EnqueueBatchResponse>, Status> {
        let events = request.into_inner().events;
        if events.len() > self.limits.max_batch_events {
            return Err(ApiError::InvalidArgument(format!(
                "events: {} events is over the limit of {} per batch",
                events.len(),
                self.limits.max_batch_events
            ))
            .into());
        }
        // Bad events are answered in place; the valid ones go to the engine together.
        let mut results: Vec<Option<pb::EnqueueResult>> = Vec::with_capacity(events.len());
        let mut valid = Vec::with_capacity(events.len());
        let mut slots = Vec::with_capacity(events.len());
        let now = self.clock.now_ms();
        for (i, event) in events.into_iter().enumerate() {
            match validate::new_message(event, &self.limits, now) {
                Ok(m) => {
                    valid.push(m);
                    slots.push(i);
                    results.push(None);
                }
                Err(e) => results.push(Some(pb::EnqueueResult {
                    result: Some(pb::enqueue_result::Result::Error(error_proto(
                        &e.within(&format!("events[{i}].")),
                    ))),
                })),
            }
        }
        if !valid.is_empty() {
            let stored = self.engine.enqueue(valid).await?;
            for (slot, result) in slots.into_iter().zip(stored) {
                let result = match result {
                    Ok(ok) => pb::enqueue_result::Result::Ok(ok.into()),
                    Err(e) => pb::enqueue_result::Result::Error(error_proto(
                        &e.within(&format!("events[{slot}].")),
                    )),
                };
                results[slot] = Some(pb::EnqueueResult {
                    result: Some(result),
                });
            }
        }
        Ok(Response::new(pb::EnqueueBatchResponse {
            results: results.into_iter().map(Option::unwrap_or_default).collect(),
        }))
    }

    async fn receive(
        &self,
        request: Request<pb::ReceiveRequest>,
    ) -> Result<Response<pb::ReceiveResponse>, Status> {
        let req = request.into_inner();
        let (max, visibility, wait) = validate::receive(&req)?;
        let messages = self
            .engine
            .receive(req.queue, max, visibility, wait)
            .await?;
        Ok(Response::new(pb::ReceiveResponse { messages }))
    }

    async fn ack(
        &self,
        request: Request<pb::AckRequest>,
    ) -> Result<Response<pb::AckResponse>, Status> {
        let ids = request.into_inner().lease_ids;
        if ids.is_empty() {
            return Err(ApiError::InvalidArgument("lease_ids: must not be empty".into()).into());
        }
        if ids.len() > validate::MAX_ACK {
            return Err(ApiError::InvalidArgument(format!(
                "lease_ids: {} is over the limit of {}",
                ids.len(),
                validate::MAX_ACK
            ))
            .into());
        }
        let leases = ids
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.parse::<LeaseId>()
                    .map_err(|e| ApiError::InvalidArgument(format!("lease_ids[{i}]: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let acked = self.engine.ack(leases).await?;
        Ok(Response::new(pb::AckResponse { acked }))
    }

    async fn nack(
        &self,
        request: Request<pb::NackRequest>,
    ) -> Result<Response<pb::NackResponse>, Status> {
        let req = request.into_inner();
        let lease = req
            .lease_id
            .parse::<LeaseId>()
            .map_err(|e| ApiError::InvalidArgument(format!("lease_id: {e}")))?;
        if req.delay_ms > validate::MAX_DELAY_MS {
            return Err(ApiError::InvalidArgument(format!(
                "delay_ms: {} is over the limit of {}",
                req.delay_ms,
                validate::MAX_DELAY_MS
            ))
            .into());
        }
        if req.reason.len() > validate::MAX_REASON_LEN {
            return Err(ApiError::InvalidArgument(format!(
                "reason: over the limit of {} bytes",
                validate::MAX_REASON_LEN
            ))
            .into());
        }
        Ok(Response::new(
            self.engine.nack(lease, req.delay_ms, req.reason).await?,
        ))
    }

    async fn stats(
        &self,
        _request: Request<pb::StatsRequest>,
    ) -> Result<Response<pb::StatsResponse>, Status> {
        Ok(Response::new(self.engine.stats().await?))
    }

    async fn get_message(
        &self,
        request: Request<pb::GetMessageRequest>,
    ) -> Result<Response<pb::GetMessageResponse>, Status> {
        let raw = request.into_inner().id;
        let id: MessageId = raw
            .parse()
            .map_err(|e| ApiError::InvalidArgument(format!("id: {e}")))?;
        // Live or dead first, then completed: a message moves to `done` in one commit, so
        // reading in this order cannot miss it.
        let found = self
            .read(move |s| {
                Ok(match s.message(id)? {
                    Some(m) => Some(Ok(m)),
                    None => s.done(id)?.map(Err),
                })
            })
            .await?
            .ok_or_else(|| {
                ApiError::NotFound(format!(
                    "id: no message {id} (or it completed longer ago than completed_retention_secs)"
                ))
            })?;
        Ok(Response::new(match found {
            Ok(live) => message_view(live, self.clock.now_ms()),
            Err(done) => done_view(id, done),
        }))
    }

    async fn put_endpoint(
        &self,
        request: Request<pb::PutEndpointRequest>,
    ) -> Result<Response<pb::PutEndpointResponse>, Status> {
        let endpoint = validate::endpoint(request.into_inner().endpoint)?;
        Ok(Response::new(self.engine.put_endpoint(endpoint).await?))
    }

    async fn get_endpoint(
        &self,
        request: Request<pb::GetEndpointRequest>,
    ) -> Result<Response<pb::GetEndpointResponse>, Status> {
        let name = request.into_inner().name;
        validate_name(&name, "name")?;
        let endpoint = self
            .read({
                let name = name.clone();
                move |s| Ok(s.endpoint(&name)?)
            })
            .await?
            .ok_or_else(|| ApiError::NotFound(format!("name: no endpoint named {name:?}")))?;
        Ok(Response::new(pb::GetEndpointResponse {
            endpoint: Some(endpoint),
        }))
    }

    async fn list_endpoints(
        &self,
        _request: Request<pb::ListEndpointsRequest>,
    ) -> Result<Response<pb::ListEndpointsResponse>, Status> {
        let endpoints = self.read(|s| Ok(s.endpoints()?)).await?;
        Ok(Response::new(pb::ListEndpointsResponse { endpoints }))
    }

    async fn delete_endpoint(
        &self,
        request: Request<pb::DeleteEndpointRequest>,
    ) -> Result<Response<pb::DeleteEndpointResponse>, Status> {
        let name = request.into_inner().name;
        validate_name(&name, "name")?;
        self.engine.delete_endpoint(name).await?;
        Ok(Response::new(pb::DeleteEndpointResponse {}))
    }

    async fn list_dead_letters(
        &self,
        request: Request<pb::ListDeadLettersRequest>,
    ) -> Result<Response<pb::ListDeadLettersResponse>, Status> {
        let req = request.into_inner();
        let destination = validate::destination_filter(req.destination)?;
        let limit = validate::count_or_default(
            req.page_size,
            validate::DEFAULT_PAGE,
            validate::MAX_PAGE,
            "page_size",
        )? as usize;
        let after = if req.page_token.is_empty() {
            None
        } else {
            Some(validate::unhex(&req.page_token, "page_token")?)
        };
        let (page, next) = self
            .read(move |s| Ok(s.dead_letters(destination.as_ref(), after.as_deref(), limit)?))
            .await?;
        Ok(Response::new(pb::ListDeadLettersResponse {
            dead_letters: page
                .into_iter()
                .map(|m| pb::DeadLetter {
                    id: m.id.to_string(),
                    destination: Destination::decode(&m.record.destination).map(|d| d.to_proto()),
                    attempts: m.entry.attempts,
                    last_error: m.history.last_error,
                    enqueued_unix_ms: m.record.created_ms,
                    dead_lettered_unix_ms: m.entry.since_ms,
                    event_type: m.record.event_type,
                    payload_size: m.record.payload.len() as u64,
                })
                .collect(),
            next_page_token: next.map(|k| validate::hex(&k)).unwrap_or_default(),
        }))
    }

    async fn replay_dead_letters(
        &self,
        request: Request<pb::ReplayDeadLettersRequest>,
    ) -> Result<Response<pb::ReplayDeadLettersResponse>, Status> {
        let req = request.into_inner();
        let destination = validate::destination_filter(req.destination)?;
        if req.ids.is_empty() == destination.is_none() {
            return Err(ApiError::InvalidArgument(
                "ids: give either ids or a destination to replay".into(),
            )
            .into());
        }
        let limit = validate::count_or_default(
            req.limit,
            validate::DEFAULT_REPLAY_LIMIT,
            validate::MAX_REPLAY_LIMIT,
            "limit",
        )? as usize;
        let ids = req
            .ids
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.parse::<MessageId>()
                    .map_err(|e| ApiError::InvalidArgument(format!("ids[{i}]: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let replayed = self.engine.replay(ids, destination, limit).await?;
        Ok(Response::new(pb::ReplayDeadLettersResponse { replayed }))
    }
}

/// The client's view of a stored message.
fn message_view(m: StoredMessage, now: u64) -> pb::GetMessageResponse {
    let state = match m.entry.state {
        // A retry whose time has come is waiting for a consumer like any pending message.
        State::Retry if m.entry.due_ms <= now => pb::MessageState::Pending,
        State::Retry => pb::MessageState::AwaitingRetry,
        State::Pending => pb::MessageState::Pending,
        State::Leased => pb::MessageState::InFlight,
        State::Dead => pb::MessageState::DeadLetter,
    };
    let mut history = attempts_view(m.history.attempts);
    if m.entry.state == State::Leased {
        history.push(pb::Attempt {
            number: m.entry.attempts,
            started_unix_ms: m.entry.since_ms,
            ended_unix_ms: 0,
            outcome: "in_progress".into(),
            error: String::new(),
            http_status: 0,
            latency_us: 0,
        });
    }
    pb::GetMessageResponse {
        id: m.id.to_string(),
        destination: Destination::decode(&m.record.destination).map(|d| d.to_proto()),
        state: state as i32,
        attempts: m.entry.attempts,
        max_attempts: m.entry.max_attempts,
        enqueued_unix_ms: m.record.created_ms,
        next_attempt_unix_ms: m.entry.due_ms,
        history,
        last_error: m.history.last_error,
        event_type: m.record.event_type,
        idempotency_key: m.record.idempotency_key,
        payload_size: m.record.payload.len() as u64,
        completed_unix_ms: 0,
    }
}

/// The client's view of a delivered (acked) message.
fn done_view(id: MessageId, d: DoneRecord) -> pb::GetMessageResponse {
    let history = d.history.unwrap_or_default();
    pb::GetMessageResponse {
        id: id.to_string(),
        destination: Destination::decode(&d.destination).map(|d| d.to_proto()),
        state: pb::MessageState::Delivered as i32,
        attempts: d.attempts,
        max_attempts: d.max_attempts,
        enqueued_unix_ms: d.created_ms,
        next_attempt_unix_ms: 0,
        history: attempts_view(history.attempts),
        last_error: history.last_error,
        event_type: d.event_type,
        idempotency_key: d.idempotency_key,
        payload_size: d.payload_size,
        completed_unix_ms: d.completed_ms,
    }
}

fn attempts_view(attempts: Vec<AttemptRecord>) -> Vec<pb::Attempt> {
    attempts
        .into_iter()
        .map(|a| pb::Attempt {
            number: a.number,
            started_unix_ms: a.started_ms,
            ended_unix_ms: a.ended_ms,
            outcome: a.outcome,
            error: a.error,
            http_status: a.http_status,
            latency_us: a.latency_us,
        })
        .collect()
}
