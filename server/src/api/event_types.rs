//! Event types on the wire (issue #51): a tenant's declarations, made and deleted over the
//! API like its queues. The schema is compiled here before the engine is asked (a schema
//! that does not compile is never stored); the engine builds and writes the record; the
//! compiled snapshot (`crate::catalog::EventTypes`) changes once the write is durable.

use std::sync::Arc;

use hookd_core::scope::TenantId;
use hookd_engine::EventTypeDef;
use hookd_proto::v1 as pb;
use tonic::{Request, Status};

use super::{HookdService, refused, validate};
use crate::catalog::EventType;
use crate::error::ApiError;

/// Longest description, in bytes.
const MAX_DESCRIPTION: usize = 1_024;
/// Longest JSON Schema, in bytes.
const MAX_SCHEMA: usize = 64 * 1024;

fn shown(t: &EventType) -> pb::EventType {
    pb::EventType {
        name: t.name.clone(),
        description: t.description.clone(),
        json_schema: t.schema_text.clone().unwrap_or_default(),
        from_config: t.from_config,
        created_unix_ms: t.created_ms,
        updated_unix_ms: t.updated_ms,
        search_keys: t.search_keys.clone(),
    }
}

fn no_such(name: &str) -> Status {
    ApiError::NotFound(format!("name: no event type named {name:?}")).into()
}

impl HookdService {
    /// Refuses a change to one of the config file's declarations (`default`'s).
    fn not_from_config(&self, tenant: TenantId, name: &str) -> Result<(), Status> {
        if self
            .catalog()
            .of(tenant)
            .get(name)
            .is_some_and(|t| t.from_config)
        {
            return Err(ApiError::FailedPrecondition(format!(
                "event type {name:?} is declared in the config file; change it there"
            ))
            .into());
        }
        Ok(())
    }

    pub(super) async fn put_event_type_in(
        &self,
        request: Request<pb::PutEventTypeRequest>,
    ) -> Result<pb::PutEventTypeResponse, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        let t = request
            .into_inner()
            .event_type
            .ok_or_else(|| ApiError::InvalidArgument("event_type: is required".into()))?;
        if t.description.len() > MAX_DESCRIPTION {
            return Err(ApiError::InvalidArgument(format!(
                "event_type.description: {} bytes is over the limit of {MAX_DESCRIPTION}",
                t.description.len()
            ))
            .into());
        }
        if t.json_schema.len() > MAX_SCHEMA {
            return Err(ApiError::InvalidArgument(format!(
                "event_type.json_schema: {} bytes is over the limit of {MAX_SCHEMA}",
                t.json_schema.len()
            ))
            .into());
        }
        let text = (!t.json_schema.is_empty()).then(|| t.json_schema.clone());
        // Compiled before anything is stored; on a blocking thread: a schema can take a
        // while to compile.
        let (name, description) = (t.name.clone(), t.description.clone());
        let keys = t.search_keys.clone();
        let mut compiled = tokio::task::spawn_blocking(move || {
            EventType::compile(&name, &description, text)?.with_search_keys(&keys)
        })
        .await
        .map_err(|e| ApiError::Unavailable(format!("compiling the schema: {e}")))?
        .map_err(|(field, why)| ApiError::InvalidArgument(format!("event_type.{field}: {why}")))?;
        let catalog = self.catalog();
        let _writing = catalog.writing().await;
        self.not_from_config(tenant, &t.name)?;
        let (stored, created) = self
            .engine
            .put_event_type(
                tenant,
                EventTypeDef {
                    name: t.name,
                    description: t.description,
                    json_schema: t.json_schema,
                    search_keys: t.search_keys,
                },
            )
            .await
            .map_err(refused("event_type.name"))?;
        compiled.created_ms = stored.created_ms;
        compiled.updated_ms = stored.updated_ms;
        let answer = shown(&compiled);
        catalog.set(tenant, compiled);
        Ok(pb::PutEventTypeResponse {
            event_type: Some(answer),
            created,
        })
    }

    pub(super) async fn get_event_type_in(
        &self,
        request: Request<pb::GetEventTypeRequest>,
    ) -> Result<pb::GetEventTypeResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        if name.is_empty() {
            return Err(ApiError::InvalidArgument("name: is required".into()).into());
        }
        let t = self
            .catalog()
            .of(tenant)
            .get(&name)
            .cloned()
            .ok_or_else(|| no_such(&name))?;
        Ok(pb::GetEventTypeResponse {
            event_type: Some(shown(&t)),
        })
    }

    pub(super) async fn list_event_types_in(
        &self,
        request: Request<pb::ListEventTypesRequest>,
    ) -> Result<pb::ListEventTypesResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let req = request.into_inner();
        let size = validate::count_or_default(
            req.page_size,
            validate::DEFAULT_PAGE,
            validate::MAX_PAGE,
            "page_size",
        )? as usize;
        let catalog: Arc<crate::catalog::Catalog> = self.catalog().of(tenant);
        // By name; the token is the last name of the page before.
        let mut page: Vec<pb::EventType> = catalog
            .types()
            .filter(|t| req.page_token.is_empty() || t.name > req.page_token)
            .take(size + 1)
            .map(|t| shown(t))
            .collect();
        let next_page_token = if page.len() > size {
            page.truncate(size);
            page.last().map(|t| t.name.clone()).unwrap_or_default()
        } else {
            String::new()
        };
        Ok(pb::ListEventTypesResponse {
            event_types: page,
            strict: self.catalog().strict(),
            next_page_token,
        })
    }

    pub(super) async fn delete_event_type_in(
        &self,
        request: Request<pb::DeleteEventTypeRequest>,
    ) -> Result<pb::DeleteEventTypeResponse, Status> {
        self.spans_destinations(&request)?;
        let tenant = self.tenant_of(&request)?;
        let name = request.into_inner().name;
        if name.is_empty() {
            return Err(ApiError::InvalidArgument("name: is required".into()).into());
        }
        let catalog = self.catalog();
        let _writing = catalog.writing().await;
        self.not_from_config(tenant, &name)?;
        self.engine
            .delete_event_type(tenant, name.clone())
            .await
            .map_err(refused("name"))?;
        catalog.unset(tenant, &name);
        Ok(pb::DeleteEventTypeResponse {})
    }
}
