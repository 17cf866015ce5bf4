//! The baseline: a bare tonic server speaking hookd's Enqueue/EnqueueBatch that stores
//! nothing. It mints a UUIDv7 id per event as hookd does, so the only difference measured is
//! hookd's validation, engine hand-off and durable commit.

#[allow(clippy::all, missing_debug_implementations, unreachable_pub)]
pub mod pb {
    tonic::include_proto!("hookd.v1");
}

use pb::hookd_server::{Hookd, HookdServer};
use tonic::{Request, Response, Status};

#[derive(Debug, Default)]
pub(crate) struct Echo;

fn id() -> pb::EnqueueResponse {
    pb::EnqueueResponse {
        id: uuid::Uuid::now_v7().to_string(),
        duplicate: false,
        throttle_ms: 0,
        subscribers: 0,
        delivery_ids: Vec::new(),
    }
}

#[tonic::async_trait]
impl Hookd for Echo {
    async fn enqueue(
        &self,
        _request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        Ok(Response::new(id()))
    }

    async fn enqueue_batch(
        &self,
        request: Request<pb::EnqueueBatchRequest>,
    ) -> Result<Response<pb::EnqueueBatchResponse>, Status> {
        let results = request
            .into_inner()
            .events
            .iter()
            .map(|_| pb::EnqueueResult {
                result: Some(pb::enqueue_result::Result::Ok(id())),
            })
            .collect();
        Ok(Response::new(pb::EnqueueBatchResponse {
            results,
            throttle_ms: 0,
        }))
    }
}

pub(crate) fn server() -> HookdServer<Echo> {
    HookdServer::new(Echo).max_decoding_message_size(64 << 20)
}
