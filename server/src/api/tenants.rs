//! Tenants on the wire (issue #51): the five operator calls, and which tenant every other
//! call acts on.
//!
//! The one rule for a call's tenant ([`HookdService::tenant_of`]): a tenant's token acts on
//! its own tenant, whatever the call says; an operator (a token or client of the config
//! file, or everyone without `[auth]`) acts on the tenant the `x-hookd-tenant` header
//! names, or on `default`. A name that is not a live tenant is NOT_FOUND, for a tenant's
//! token too (it learns nothing about other tenants).

use std::sync::Arc;

use hookd_core::quota::Quota;
use hookd_core::scope::TenantId;
use hookd_engine::{TenantDef, TokenDef};
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
        let principal = caller(request);
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
            (Some(own), Some(name)) => match self.engine.tenant_named(name) {
                Some(id) if id == own => Ok(own),
                _ => Err(not_found(name)),
            },
            (None, None) => Ok(TenantId::DEFAULT),
            (None, Some(name)) => {
                validate::validate_name(name, TENANT_HEADER)?;
                self.engine
                    .tenant_named(name)
                    .ok_or_else(|| not_found(name))
            }
        }
    }

    /// Whose figures a read of figures (Stats) shows: the call's tenant's, but for an
    /// operator who names none, who sees the whole hookd (every tenant's destinations,
    /// keyed with their tenant's number, and the storage figures).
    pub(crate) fn figures_of<T>(&self, request: &Request<T>) -> Result<Option<TenantId>, Status> {
        let operator = caller(request).is_none_or(|p| p.tenant.is_none());
        if operator && request.metadata().get(TENANT_HEADER).is_none() {
            return Ok(None);
        }
        self.tenant_of(request).map(Some)
    }

    /// Refuses a tenant's token: the tenant calls are an operator's.
    fn operator_only<T>(request: &Request<T>) -> Result<(), Status> {
        match caller(request).and_then(|p| p.tenant) {
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
        let def = tenant_def(request.into_inner().tenant)?;
        let made = self
            .engine
            .put_tenant(def, true)
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
        let def = tenant_def(request.into_inner().tenant)?;
        let put = self
            .engine
            .put_tenant(def, false)
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
        let id = self.engine.tenant_named(&req.name);
        let deleted = self
            .engine
            .delete_tenant(req.name, req.force)
            .await
            .map_err(refused("name"))?;
        // The engine removed their records; the registries forget them.
        if let Some(id) = id {
            self.subscriptions.forget(id).await;
            self.sources.forget_tenant(id);
            self.catalog().forget_tenant(id);
        }
        Ok(pb::DeleteTenantResponse {
            removed_messages: deleted.messages,
            removed_objects: deleted.objects,
        })
    }
}

/// A tenant as a create or update gives it, checked; the record is the engine's.
fn tenant_def(tenant: Option<pb::Tenant>) -> Result<TenantDef, ApiError> {
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
    if let Some(q) = &t.quota
        && q.max_events_per_second > MAX_EVENTS_PER_SECOND
    {
        return Err(ApiError::InvalidArgument(format!(
            "tenant.quota.max_events_per_second: {} is over the limit of {MAX_EVENTS_PER_SECOND}",
            q.max_events_per_second
        )));
    }
    if t.weight > hookd_engine::MAX_WEIGHT {
        return Err(ApiError::InvalidArgument(format!(
            "tenant.weight: {} is over the limit of {}",
            t.weight,
            hookd_engine::MAX_WEIGHT
        )));
    }
    let portal = t.portal.map(portal_settings).transpose()?;
    Ok(TenantDef {
        retention_secs: super::validate::retention(t.retention_secs, "tenant.retention_secs")?,
        portal,
        weight: t.weight,
        name: t.name,
        display_name: t.display_name,
        metadata: t.metadata.into_iter().collect(),
        quota: t.quota.map(|q| Quota {
            max_live_messages: q.max_live_messages,
            max_live_bytes: q.max_live_bytes,
            max_events_per_day: q.max_events_per_day,
            max_events_per_second: q.max_events_per_second,
            max_endpoints: q.max_endpoints,
            max_subscriptions: q.max_subscriptions,
            max_sources: q.max_sources,
        }),
    })
}

/// The highest rate quota (events/s): far above what one hookd takes.
const MAX_EVENTS_PER_SECOND: u64 = 10_000_000;

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
        quota: r.quota.map(|q| pb::TenantQuota {
            max_live_messages: q.max_live_messages,
            max_live_bytes: q.max_live_bytes,
            max_events_per_day: q.max_events_per_day,
            max_events_per_second: q.max_events_per_second,
            max_endpoints: q.max_endpoints,
            max_subscriptions: q.max_subscriptions,
            max_sources: q.max_sources,
        }),
        weight: r.weight.max(1),
        retention_secs: r.retention_secs,
        portal: r.portal.as_ref().map(|p| pb::TenantPortal {
            frame_ancestors: p.frame_ancestors.clone(),
            title: p.title.clone(),
            logo_url: p.logo_url.clone(),
            accent_color: p.accent_color.clone(),
        }),
    }
}

/// Longest portal title, and logo URL, in bytes.
const MAX_PORTAL_TITLE: usize = 128;
const MAX_LOGO_URL: usize = 2_048;

/// `tenant.portal`, checked: origins in their normal form.
fn portal_settings(
    p: pb::TenantPortal,
) -> Result<hookd_storage::store::TenantPortalRecord, ApiError> {
    let bad = |m: String| ApiError::InvalidArgument(m);
    if p.frame_ancestors.len() > crate::portal_links::MAX_FRAME_ANCESTORS {
        return Err(bad(format!(
            "tenant.portal.frame_ancestors: {} is over the limit of {}",
            p.frame_ancestors.len(),
            crate::portal_links::MAX_FRAME_ANCESTORS
        )));
    }
    let mut frame_ancestors = Vec::with_capacity(p.frame_ancestors.len());
    for (i, o) in p.frame_ancestors.iter().enumerate() {
        frame_ancestors.push(
            crate::portal_links::origin(o)
                .map_err(|e| bad(format!("tenant.portal.frame_ancestors[{i}]: {e}")))?,
        );
    }
    if p.title.len() > MAX_PORTAL_TITLE || p.title.chars().any(char::is_control) {
        return Err(bad(format!(
            "tenant.portal.title: at most {MAX_PORTAL_TITLE} bytes, without control characters"
        )));
    }
    if !p.logo_url.is_empty() {
        if p.logo_url.len() > MAX_LOGO_URL {
            return Err(bad(format!(
                "tenant.portal.logo_url: {} bytes is over the limit of {MAX_LOGO_URL}",
                p.logo_url.len()
            )));
        }
        crate::portal_links::web_url(&p.logo_url)
            .map_err(|e| bad(format!("tenant.portal.logo_url: {e}")))?;
    }
    if !p.accent_color.is_empty() && !crate::portal_links::is_colour(&p.accent_color) {
        return Err(bad(format!(
            "tenant.portal.accent_color: {:?} is not #rrggbb",
            p.accent_color
        )));
    }
    Ok(hookd_storage::store::TenantPortalRecord {
        frame_ancestors,
        title: p.title,
        logo_url: p.logo_url,
        accent_color: p.accent_color,
    })
}

/// A tenant's token grants no scope it lacks (a token it makes, a portal link): `field`
/// names where `name` was asked for.
pub(super) fn may_grant_scope(
    caller: Option<&crate::auth::Principal>,
    scope: crate::auth::Scope,
    field: &str,
    name: &str,
) -> Result<(), Status> {
    if caller.is_some_and(|c| !c.may(scope)) {
        return Err(Status::permission_denied(format!(
            "{field}: this token lacks the `{name}` scope, so it cannot grant it"
        )));
    }
    Ok(())
}

/// A token limited to destinations grants none beyond them (and not all of its tenant's,
/// which `destinations` empty would).
pub(super) fn may_grant_destinations(
    caller: Option<&crate::auth::Principal>,
    destinations: &[String],
    field: &str,
) -> Result<(), Status> {
    if let Some(c) = caller.filter(|c| c.limited())
        && (destinations.is_empty() || destinations.iter().any(|d| !c.may_use(d)))
    {
        return Err(Status::permission_denied(format!(
            "{field}: this token is limited to destinations, and can grant only those"
        )));
    }
    Ok(())
}

/// Most destinations one token may be limited to.
const MAX_TOKEN_DESTINATIONS: usize = 100;

/// The caller of a request (none: a request that did not pass the auth layer).
pub(crate) fn caller<T>(request: &Request<T>) -> Option<Arc<crate::auth::Principal>> {
    request
        .extensions()
        .get::<Arc<crate::auth::Principal>>()
        .cloned()
}

impl HookdService {
    pub(super) async fn create_token_in(
        &self,
        request: Request<pb::CreateTokenRequest>,
    ) -> Result<pb::CreateTokenResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let caller = caller(&request);
        if caller.as_ref().is_none_or(|c| c.is_anonymous()) {
            return Err(ApiError::FailedPrecondition(
                "token: tenant tokens need [auth] (without it every caller is an operator); configure a token there first".into(),
            )
            .into());
        }
        let token = request
            .into_inner()
            .token
            .ok_or_else(|| ApiError::InvalidArgument("token: is required".into()))?;
        validate::validate_name(&token.name, "token.name")?;
        if token.scopes.is_empty() {
            return Err(ApiError::InvalidArgument(
                "token.scopes: at least one of enqueue, consume, read, admin is required".into(),
            )
            .into());
        }
        for (i, s) in token.scopes.iter().enumerate() {
            let Some(scope) = crate::auth::Scope::parse(s) else {
                return Err(ApiError::InvalidArgument(format!(
                    "token.scopes[{i}]: {s:?} is not one of enqueue, consume, read, admin"
                ))
                .into());
            };
            may_grant_scope(caller.as_deref(), scope, &format!("token.scopes[{i}]"), s)?;
        }
        if token.destinations.len() > MAX_TOKEN_DESTINATIONS {
            return Err(ApiError::InvalidArgument(format!(
                "token.destinations: {} is over the limit of {MAX_TOKEN_DESTINATIONS}",
                token.destinations.len()
            ))
            .into());
        }
        for (i, d) in token.destinations.iter().enumerate() {
            let field = format!("token.destinations[{i}]");
            let parsed = hookd_core::destination::Destination::from_local_key(tenant, d);
            match parsed.as_ref().map(|p| &p.to) {
                Some(hookd_core::destination::To::Endpoint(n))
                | Some(hookd_core::destination::To::Queue(n)) => {
                    validate::validate_name(n, &field)?
                }
                _ => {
                    return Err(ApiError::InvalidArgument(format!(
                        "{field}: {d:?} is not endpoint:NAME or queue:NAME"
                    ))
                    .into());
                }
            }
        }
        may_grant_destinations(caller.as_deref(), &token.destinations, "token.destinations")?;
        let secret = crate::auth::new_token();
        let def = TokenDef {
            name: token.name.clone(),
            hash: crate::auth::token_hash(&secret).to_vec(),
            scopes: token.scopes.clone(),
            destinations: token.destinations.clone(),
            created_by: caller.map(|c| c.name.clone()).unwrap_or_default(),
        };
        let stored = self
            .engine
            .put_token(tenant, def)
            .await
            .map_err(refused("token.name"))?;
        Ok(pb::CreateTokenResponse {
            token: Some(token_shown(&token.name, &stored)),
            secret,
        })
    }

    pub(super) fn list_tokens_in(
        &self,
        request: Request<pb::ListTokensRequest>,
    ) -> Result<pb::ListTokensResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        self.spans_destinations(&request)?;
        let directory = self.engine.tenants();
        let tokens = directory
            .tokens_of(tenant)
            .into_iter()
            .map(|g| pb::Token {
                name: g.name.clone(),
                scopes: g.scopes.clone(),
                destinations: g.destinations.clone(),
                created_unix_ms: g.created_ms,
                created_by: g.created_by.clone(),
            })
            .collect();
        Ok(pb::ListTokensResponse { tokens })
    }

    pub(super) async fn revoke_token_in(
        &self,
        request: Request<pb::RevokeTokenRequest>,
    ) -> Result<pb::RevokeTokenResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        self.spans_destinations(&request)?;
        let name = request.into_inner().name;
        validate::validate_name(&name, "name")?;
        self.engine
            .revoke_token(tenant, name)
            .await
            .map_err(refused("name"))?;
        Ok(pb::RevokeTokenResponse {})
    }

    /// A token limited to destinations acknowledges only leases of their messages: one of
    /// another destination is answered as a lease not in flight (NOT_FOUND), as the engine
    /// answers one of another tenant's.
    pub(crate) async fn lease_allowed(
        &self,
        tenant: TenantId,
        caller: Option<&crate::auth::Principal>,
        lease: &hookd_core::ids::LeaseId,
        field: &str,
    ) -> Result<(), Status> {
        let Some(caller) = caller.filter(|c| c.limited()) else {
            return Ok(());
        };
        let found = self.find_message(tenant, lease.message).await?;
        let key = found.and_then(|m| m.destination).map(|d| d.local_key());
        match key {
            Some(key) if caller.may_use(&key) => Ok(()),
            _ => Err(ApiError::NotFound(format!(
                "{field}: message {} is not in flight (already acknowledged, dead-lettered or never enqueued)",
                lease.message
            ))
            .into()),
        }
    }

    /// Refuses a token limited to named destinations a call that concerns others too.
    pub(crate) fn spans_destinations<T>(&self, request: &Request<T>) -> Result<(), Status> {
        match caller(request) {
            Some(c) if c.limited() => Err(Status::permission_denied(
                "this token may use only its named destinations; this call concerns others",
            )),
            _ => Ok(()),
        }
    }

    /// Refuses a token limited to named destinations a call to another (`key` as the
    /// tenant reads it).
    pub(crate) fn may_use<T>(&self, request: &Request<T>, key: &str) -> Result<(), Status> {
        match caller(request) {
            Some(c) if !c.may_use(key) => Err(Status::permission_denied(format!(
                "this token may not use {key}"
            ))),
            _ => Ok(()),
        }
    }
}

fn token_shown(name: &str, r: &hookd_storage::store::TokenRecord) -> pb::Token {
    pb::Token {
        name: name.to_owned(),
        scopes: r.scopes.clone(),
        destinations: r.destinations.clone(),
        created_unix_ms: r.created_ms,
        created_by: r.created_by.clone(),
    }
}

/// A destination on the wire as its tenant's key (`endpoint:NAME`, `queue:NAME`,
/// `url:ORIGIN`); `None` when none is given.
pub(crate) fn wire_key(d: &Option<pb::Destination>) -> Option<String> {
    use pb::destination::Kind;
    match d.as_ref()?.kind.as_ref()? {
        Kind::Endpoint(n) => Some(format!("endpoint:{n}")),
        Kind::Queue(n) => Some(format!("queue:{n}")),
        Kind::Url(u) => Some(format!("url:{u}")),
    }
}

/// An event's destination as its tenant's key; `None` for a publish (it reaches whatever
/// subscribes) or none.
pub(crate) fn event_key(e: &pb::EnqueueRequest) -> Option<String> {
    use pb::enqueue_request::Destination as D;
    match e.destination.as_ref()? {
        D::Endpoint(n) => Some(format!("endpoint:{n}")),
        D::Queue(n) => Some(format!("queue:{n}")),
        D::Url(u) => Some(format!("url:{u}")),
        D::Topic(_) => None,
    }
}

/// Whether the caller may use destination `key` (see `Principal::may_use`).
pub(crate) fn allowed<T>(request: &Request<T>, key: &str) -> bool {
    caller(request).is_none_or(|c| c.may_use(key))
}

/// The total of some destinations' counts (a limited token's Stats), as the engine totals
/// a tenant's (`Engine::tenant_stats`).
pub(crate) fn total_of(
    destinations: &[hookd_core::stats::DestinationSnapshot],
) -> hookd_core::stats::DestinationSnapshot {
    let mut total = hookd_core::stats::DestinationSnapshot {
        destination: "*".into(),
        ..Default::default()
    };
    for d in destinations {
        total.pending += d.pending;
        total.awaiting_retry += d.awaiting_retry;
        total.in_flight += d.in_flight;
        total.dead_letter += d.dead_letter;
        total.oldest_pending_age_ms = total.oldest_pending_age_ms.max(d.oldest_pending_age_ms);
        total.waiting_receives += d.waiting_receives;
        total.live_bytes += d.live_bytes;
    }
    total
}

impl HookdService {
    /// A call about destination `key` (`None`: about several, or any): refused to a token
    /// limited to destinations unless `key` is one of them.
    pub(crate) fn limit_to<T>(
        &self,
        request: &Request<T>,
        key: Option<String>,
    ) -> Result<(), Status> {
        match key {
            Some(key) => self.may_use(request, &key),
            None => self.spans_destinations(request),
        }
    }
}
