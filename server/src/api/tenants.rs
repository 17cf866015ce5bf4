//! Tenants on the wire (issue #51): the five operator calls, and which tenant every other
//! call acts on.
//!
//! The one rule for a call's tenant ([`HookdService::tenant_of`]): a tenant's token acts on
//! its own tenant, whatever the call says; an operator (a token or client of the config
//! file, or everyone without `[auth]`) acts on the tenant the `x-hookd-tenant` header
//! names, or on `default`. A name that is not a live tenant is NOT_FOUND, for a tenant's
//! token too (it learns nothing about other tenants).

use std::sync::Arc;

use hookd_core::scope::TenantId;
use hookd_proto::v1 as pb;
use hookd_storage::store::TenantRecord;
use tonic::{Request, Status};

use super::{HookdService, refused, validate};
use crate::error::ApiError;

/// The header an operator names the tenant a call acts on with (gRPC metadata, and the
/// HTTP/JSON API's header).
pub const TENANT_HEADER: &str = "x-hookd-tenant";

/// Longest display name, in bytes.
const MAX_DISPLAY_NAME: usize = 256;
/// Most metadata entries of a tenant, and their sizes.
const MAX_METADATA: usize = 32;
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 256;
const DEFAULT_PAGE: u32 = 100;
const MAX_PAGE: u32 = 1_000;

impl HookdService {
    /// The tenant a call acts on (see the module's text).
    pub(crate) fn tenant_of<T>(&self, request: &Request<T>) -> Result<TenantId, Status> {
        let principal = request
            .extensions()
            .get::<Arc<crate::auth::Principal>>()
            .cloned();
        let named = match request.metadata().get(TENANT_HEADER) {
            None => None,
            Some(v) => Some(v.to_str().map_err(|_| {
                ApiError::InvalidArgument(format!("{TENANT_HEADER}: not a tenant name"))
            })?),
        };
        let own = principal.as_ref().and_then(|p| p.tenant);
        let not_found = |name: &str| {
            Status::from(ApiError::NotFound(format!(
                "{TENANT_HEADER}: no tenant named {name:?}"
            )))
        };
        match (own, named) {
            // A tenant's token: its own tenant, and no other (named or not).
            (Some(own), None) => Ok(own),
            (Some(own), Some(name)) => match self.engine.tenants().named(name) {
                Some(t) if t.id == own => Ok(own),
                _ => Err(not_found(name)),
            },
            (None, None) => Ok(TenantId::DEFAULT),
            (None, Some(name)) => {
                validate::validate_name(name, TENANT_HEADER)?;
                self.engine
                    .tenants()
                    .named(name)
                    .map(|t| t.id)
                    .ok_or_else(|| not_found(name))
            }
        }
    }

    /// Whose figures a read of figures (Stats) shows: the call's tenant's, but for an
    /// operator who names none, who sees the whole hookd (every tenant's destinations,
    /// keyed with their tenant's number, and the storage figures).
    pub(crate) fn figures_of<T>(&self, request: &Request<T>) -> Result<Option<TenantId>, Status> {
        let operator = request
            .extensions()
            .get::<Arc<crate::auth::Principal>>()
            .is_none_or(|p| p.tenant.is_none());
        if operator && request.metadata().get(TENANT_HEADER).is_none() {
            return Ok(None);
        }
        self.tenant_of(request).map(Some)
    }

    /// Refuses a tenant's token: the tenant calls are an operator's.
    fn operator_only<T>(request: &Request<T>) -> Result<(), Status> {
        let tenant = request
            .extensions()
            .get::<Arc<crate::auth::Principal>>()
            .and_then(|p| p.tenant);
        match tenant {
            None => Ok(()),
            Some(_) => Err(Status::permission_denied(
                "tenants are managed with an operator's token (one of the config file's), not a tenant's",
            )),
        }
    }

    pub(super) async fn create_tenant_in(
        &self,
        request: Request<pb::CreateTenantRequest>,
    ) -> Result<pb::CreateTenantResponse, Status> {
        Self::operator_only(&request)?;
        let record = tenant_record(request.into_inner().tenant)?;
        let made = self
            .engine
            .put_tenant(record, true)
            .await
            .map_err(refused("tenant.name"))?;
        tracing::info!(tenant = %made.record.name, id = made.id.0, "tenant created");
        Ok(pb::CreateTenantResponse {
            tenant: Some(shown(&made.record)),
        })
    }

    pub(super) async fn update_tenant_in(
        &self,
        request: Request<pb::UpdateTenantRequest>,
    ) -> Result<pb::UpdateTenantResponse, Status> {
        Self::operator_only(&request)?;
        let record = tenant_record(request.into_inner().tenant)?;
        let put = self
            .engine
            .put_tenant(record, false)
            .await
            .map_err(refused("tenant.name"))?;
        Ok(pb::UpdateTenantResponse {
            tenant: Some(shown(&put.record)),
        })
    }

    pub(super) fn get_tenant_in(
        &self,
        request: Request<pb::GetTenantRequest>,
    ) -> Result<pb::GetTenantResponse, Status> {
        Self::operator_only(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        let directory = self.engine.tenants();
        let tenant = directory
            .named(&name)
            .ok_or_else(|| ApiError::NotFound(format!("name: no tenant named {name:?}")))?;
        Ok(pb::GetTenantResponse {
            tenant: Some(shown(&tenant.record)),
        })
    }

    pub(super) fn list_tenants_in(
        &self,
        request: Request<pb::ListTenantsRequest>,
    ) -> Result<pb::ListTenantsResponse, Status> {
        Self::operator_only(&request)?;
        let req = request.into_inner();
        let limit = validate::count_or_default(req.page_size, DEFAULT_PAGE, MAX_PAGE, "page_size")?;
        let after = match req.page_token.as_str() {
            "" => None,
            token => {
                let bytes = validate::unhex(token, "page_token")?;
                Some(String::from_utf8(bytes).map_err(|_| {
                    ApiError::InvalidArgument(
                        "page_token: not a page token returned by this server".into(),
                    )
                })?)
            }
        };
        let directory = self.engine.tenants();
        let all = directory.list();
        let page: Vec<_> = all
            .iter()
            .filter(|t| after.as_ref().is_none_or(|a| t.record.name > *a))
            .take(limit as usize + 1)
            .collect();
        let more = page.len() > limit as usize;
        let page = &page[..page.len().min(limit as usize)];
        let next_page_token = match (more, page.last()) {
            (true, Some(last)) => hookd_core::names::hex(last.record.name.as_bytes()),
            _ => String::new(),
        };
        Ok(pb::ListTenantsResponse {
            tenants: page.iter().map(|t| shown(&t.record)).collect(),
            next_page_token,
        })
    }

    pub(super) async fn delete_tenant_in(
        &self,
        request: Request<pb::DeleteTenantRequest>,
    ) -> Result<pb::DeleteTenantResponse, Status> {
        Self::operator_only(&request)?;
        let req = request.into_inner();
        validate::validate_name(&req.name, "name")?;
        let id = self.engine.tenants().named(&req.name).map(|t| t.id);
        let deleted = self
            .engine
            .delete_tenant(req.name, req.force)
            .await
            .map_err(refused("name"))?;
        // The engine removed their records; the registries forget them.
        if let Some(id) = id {
            self.subscriptions.forget(id).await;
        }
        Ok(pb::DeleteTenantResponse {
            removed_messages: deleted.messages,
            removed_objects: deleted.objects,
        })
    }
}

/// A tenant as a create or update gives it, checked; the times are the engine's.
fn tenant_record(tenant: Option<pb::Tenant>) -> Result<TenantRecord, ApiError> {
    let t = tenant.ok_or_else(|| ApiError::InvalidArgument("tenant: is required".into()))?;
    validate::validate_name(&t.name, "tenant.name")?;
    if t.display_name.len() > MAX_DISPLAY_NAME {
        return Err(ApiError::InvalidArgument(format!(
            "tenant.display_name: {} bytes is over the limit of {MAX_DISPLAY_NAME}",
            t.display_name.len(),
        )));
    }
    if t.metadata.len() > MAX_METADATA {
        return Err(ApiError::InvalidArgument(format!(
            "tenant.metadata: {} entries is over the limit of {MAX_METADATA}",
            t.metadata.len()
        )));
    }
    for (k, v) in &t.metadata {
        if k.is_empty() || k.len() > MAX_METADATA_KEY {
            return Err(ApiError::InvalidArgument(format!(
                "tenant.metadata: key {k:?} must be 1 to {MAX_METADATA_KEY} bytes"
            )));
        }
        if v.len() > MAX_METADATA_VALUE {
            return Err(ApiError::InvalidArgument(format!(
                "tenant.metadata[{k:?}]: {} bytes is over the limit of {MAX_METADATA_VALUE}",
                v.len()
            )));
        }
    }
    Ok(TenantRecord {
        name: t.name,
        display_name: t.display_name,
        metadata: t.metadata.into_iter().collect(),
        ..Default::default()
    })
}

/// A tenant as answers show it.
fn shown(r: &TenantRecord) -> pb::Tenant {
    pb::Tenant {
        name: r.name.clone(),
        display_name: r.display_name.clone(),
        metadata: r
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        created_unix_ms: r.created_ms,
        updated_unix_ms: r.updated_ms,
    }
}
