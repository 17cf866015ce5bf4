//! Queues on the wire (issue #51): a pull queue's own settings, a tenant's catalog object
//! like an endpoint. The engine owns the writes and the FIFO policy it reads at enqueue;
//! reads come from the store. The config file's `[[queues]]` are `default`'s, read-only.

use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_engine::{FifoPolicy, QueueDef};
use hookd_proto::v1 as pb;
use hookd_storage::store::QueueRecord;
use tonic::{Request, Status};

use super::{HookdService, refused, tenants, validate};
use crate::error::ApiError;

/// Longest description, in bytes.
const MAX_DESCRIPTION: usize = 256;

/// A queue's `fifo`: none (unordered), `block` or `park`.
fn fifo_policy(fifo: &str) -> Result<Option<FifoPolicy>, ApiError> {
    if fifo.is_empty() {
        return Ok(None);
    }
    FifoPolicy::named(fifo).map(Some).ok_or_else(|| {
        ApiError::InvalidArgument(format!(
            "queue.fifo: {fifo:?} is not one of block, park (or empty: unordered)"
        ))
    })
}

fn fifo_name(code: u32) -> &'static str {
    FifoPolicy::from_code(code).map_or("", FifoPolicy::as_str)
}

/// A stored queue's record.
fn decoded(bytes: &[u8]) -> Result<QueueRecord, ApiError> {
    prost::Message::decode(bytes).map_err(|e| ApiError::Unavailable(format!("a stored queue: {e}")))
}

fn shown(r: &QueueRecord) -> pb::Queue {
    pb::Queue {
        name: r.name.clone(),
        fifo: fifo_name(r.fifo).into(),
        description: r.description.clone(),
        from_config: false,
        created_unix_ms: r.created_ms,
        updated_unix_ms: r.updated_ms,
        retention_secs: r.retention_secs,
    }
}

impl HookdService {
    /// The config file's queues, as `default`'s (read-only).
    fn config_queues(&self, tenant: TenantId) -> Vec<pb::Queue> {
        if !tenant.is_default() {
            return Vec::new();
        }
        self.config_queues
            .iter()
            .map(|q| pb::Queue {
                name: q.name.clone(),
                fifo: q.fifo.map_or("", |f| f.policy().as_str()).into(),
                from_config: true,
                ..Default::default()
            })
            .collect()
    }

    /// Every queue of the tenant's with settings: the config file's, then the stored ones.
    async fn queues_of(&self, tenant: TenantId) -> Result<Vec<pb::Queue>, Status> {
        let mut out = self.config_queues(tenant);
        let stored = self
            .read(move |s| Ok(s.objects(tenant, Kind::Queue)?))
            .await?;
        for (_, bytes) in stored {
            let record = decoded(&bytes)?;
            if !out.iter().any(|q| q.name == record.name) {
                out.push(shown(&record));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub(super) async fn put_queue_in(
        &self,
        request: Request<pb::PutQueueRequest>,
    ) -> Result<pb::PutQueueResponse, Status> {
        let name = request
            .get_ref()
            .queue
            .as_ref()
            .map(|q| q.name.clone())
            .unwrap_or_default();
        self.may_use(&request, &format!("queue:{name}"))?;
        let tenant = self.tenant_of(&request)?;
        let q = request
            .into_inner()
            .queue
            .ok_or_else(|| ApiError::InvalidArgument("queue: is required".into()))?;
        validate::validate_name(&q.name, "queue.name")?;
        if q.description.len() > MAX_DESCRIPTION {
            return Err(ApiError::InvalidArgument(format!(
                "queue.description: {} bytes is over the limit of {MAX_DESCRIPTION}",
                q.description.len()
            ))
            .into());
        }
        let def = QueueDef {
            retention_secs: validate::retention(q.retention_secs, "queue.retention_secs")?,
            name: q.name,
            fifo: fifo_policy(&q.fifo)?,
            description: q.description,
        };
        let (stored, created) = self
            .engine
            .put_queue(tenant, def)
            .await
            .map_err(refused("queue.name"))?;
        Ok(pb::PutQueueResponse {
            queue: Some(shown(&stored)),
            created,
        })
    }

    pub(super) async fn get_queue_in(
        &self,
        request: Request<pb::GetQueueRequest>,
    ) -> Result<pb::GetQueueResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let allowed = tenants::allowed(&request, &format!("queue:{}", request.get_ref().name));
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        // The config file's (default's) first, as the list shows them; else the one stored
        // under its name (one read, not the tenant's every queue).
        let configured = self
            .config_queues(tenant)
            .into_iter()
            .find(|q| q.name == name);
        let queue = match configured {
            Some(q) => Some(q),
            None => {
                let object = ObjectRef::new(tenant, Kind::Queue, &name);
                let stored = self.read(move |s| Ok(s.object(&object)?)).await?;
                stored
                    .map(|bytes| decoded(&bytes))
                    .transpose()?
                    .map(|r| shown(&r))
            }
        };
        let queue = queue.filter(|_| allowed).ok_or_else(|| {
            ApiError::NotFound(format!(
                "name: no queue named {name:?} has settings (a queue without any is unordered)"
            ))
        })?;
        Ok(pb::GetQueueResponse { queue: Some(queue) })
    }

    pub(super) async fn list_queues_in(
        &self,
        request: Request<pb::ListQueuesRequest>,
    ) -> Result<pb::ListQueuesResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let queues = self
            .queues_of(tenant)
            .await?
            .into_iter()
            .filter(|q| tenants::allowed(&request, &format!("queue:{}", q.name)))
            .collect();
        Ok(pb::ListQueuesResponse { queues })
    }

    pub(super) async fn delete_queue_in(
        &self,
        request: Request<pb::DeleteQueueRequest>,
    ) -> Result<pb::DeleteQueueResponse, Status> {
        self.may_use(&request, &format!("queue:{}", request.get_ref().name))?;
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        self.engine
            .delete_queue(tenant, name)
            .await
            .map_err(refused("name"))?;
        Ok(pb::DeleteQueueResponse {})
    }
}
