//! CreatePortalLink and RevokePortalLinks (issue #52): checked here, signed and revoked by
//! `crate::portal_links`.

use hookd_core::scope::TenantId;
use hookd_proto::v1 as pb;
use tonic::{Request, Status};

use super::tenants::{TENANT_HEADER, caller, may_grant_destinations, may_grant_scope};
use super::{HookdService, refused, validate};
use crate::error::ApiError;
use crate::portal_links::{LinkRequest, MAX_LINK_SECS, is_link_id};

/// A link's life when the call names none.
const DEFAULT_LINK_SECS: u64 = 3_600;
/// Most destinations one link may be limited to.
const MAX_LINK_DESTINATIONS: usize = 64;
const MAX_SUBJECT: usize = 256;
const MAX_URL: usize = 2_048;

impl HookdService {
    /// The tenant a portal call names in `tenant` (else the call's own), and its name. A
    /// tenant's token names only its own: another is NOT_FOUND, as everywhere.
    fn portal_tenant<T>(
        &self,
        request: &Request<T>,
        named: &str,
    ) -> Result<(TenantId, String), Status> {
        let id = if named.is_empty() {
            self.tenant_of(request)?
        } else {
            validate::validate_name(named, "tenant")?;
            let not_found = || {
                Status::from(ApiError::NotFound(format!(
                    "tenant: no tenant named {named:?}"
                )))
            };
            let id = self.engine.tenant_named(named).ok_or_else(not_found)?;
            if caller(request)
                .and_then(|p| p.tenant)
                .is_some_and(|own| own != id)
            {
                return Err(not_found());
            }
            if let Some(header) = request.metadata().get(TENANT_HEADER)
                && header.to_str().ok() != Some(named)
            {
                return Err(ApiError::InvalidArgument(format!(
                    "tenant: {named:?} is not the tenant {TENANT_HEADER} names"
                ))
                .into());
            }
            id
        };
        let name = self
            .engine
            .tenants()
            .get(id)
            .map(|t| t.record.name.clone())
            .ok_or_else(|| Status::from(ApiError::NotFound("tenant: no such tenant".into())))?;
        Ok((id, name))
    }

    pub(super) async fn create_portal_link_in(
        &self,
        request: Request<pb::CreatePortalLinkRequest>,
    ) -> Result<pb::CreatePortalLinkResponse, Status> {
        let (tenant, tenant_name) = self.portal_tenant(&request, &request.get_ref().tenant)?;
        let caller = caller(&request);
        let r = request.into_inner();
        let mut scopes = r.scopes;
        if scopes.is_empty() {
            scopes.push("read".into());
        }
        for (i, s) in scopes.iter().enumerate() {
            let scope = match crate::auth::Scope::parse(s) {
                Some(scope @ (crate::auth::Scope::Read | crate::auth::Scope::Admin)) => scope,
                _ => {
                    return Err(ApiError::InvalidArgument(format!(
                        "scopes[{i}]: {s:?} is not a portal scope (read: look only; admin: also change)"
                    ))
                    .into());
                }
            };
            may_grant_scope(caller.as_deref(), scope, &format!("scopes[{i}]"), s)?;
        }
        scopes.sort();
        scopes.dedup();
        let expires_in_secs = match u64::from(r.expires_in_secs) {
            0 => DEFAULT_LINK_SECS,
            s if s > MAX_LINK_SECS => {
                return Err(ApiError::InvalidArgument(format!(
                    "expires_in_secs: {s} is over the limit of {MAX_LINK_SECS} (24 h)"
                ))
                .into());
            }
            s => s,
        };
        if r.destinations.len() > MAX_LINK_DESTINATIONS {
            return Err(ApiError::InvalidArgument(format!(
                "destinations: {} is over the limit of {MAX_LINK_DESTINATIONS}",
                r.destinations.len()
            ))
            .into());
        }
        for (i, d) in r.destinations.iter().enumerate() {
            let field = format!("destinations[{i}]");
            match d.strip_prefix("endpoint:") {
                Some(name) => validate::validate_name(name, &field)?,
                None => {
                    return Err(ApiError::InvalidArgument(format!(
                        "{field}: {d:?} is not endpoint:NAME"
                    ))
                    .into());
                }
            }
        }
        may_grant_destinations(caller.as_deref(), &r.destinations, "destinations")?;
        if !r.refresh_url.is_empty() {
            if r.refresh_url.len() > MAX_URL {
                return Err(ApiError::InvalidArgument(format!(
                    "refresh_url: {} bytes is over the limit of {MAX_URL}",
                    r.refresh_url.len()
                ))
                .into());
            }
            crate::portal_links::web_url(&r.refresh_url)
                .map_err(|e| ApiError::InvalidArgument(format!("refresh_url: {e}")))?;
        }
        if r.subject.len() > MAX_SUBJECT || r.subject.chars().any(char::is_control) {
            return Err(ApiError::InvalidArgument(format!(
                "subject: at most {MAX_SUBJECT} bytes, without control characters"
            ))
            .into());
        }
        let (token, link) = self
            .portal
            .mint(LinkRequest {
                tenant,
                tenant_name,
                scopes,
                expires_in_secs,
                destinations: r.destinations,
                refresh_url: r.refresh_url,
                subject: r.subject,
            })
            .await
            .map_err(refused("tenant"))?;
        tracing::info!(
            tenant = %link.tenant_name,
            link = %link.id,
            subject = %link.subject,
            scopes = ?link.scopes,
            expires_ms = link.expires_ms,
            by = %caller.map(|c| c.name.clone()).unwrap_or_default(),
            "portal link made"
        );
        Ok(pb::CreatePortalLinkResponse {
            url: format!("{}/portal/{token}/", self.portal_url),
            link_id: link.id,
            expires_unix_ms: link.expires_ms,
        })
    }

    pub(super) async fn revoke_portal_links_in(
        &self,
        request: Request<pb::RevokePortalLinksRequest>,
    ) -> Result<pb::RevokePortalLinksResponse, Status> {
        let (tenant, name) = self.portal_tenant(&request, &request.get_ref().tenant)?;
        let link_id = request.into_inner().link_id;
        if !link_id.is_empty() && !is_link_id(&link_id) {
            return Err(ApiError::InvalidArgument(format!(
                "link_id: {link_id:?} is not a portal link's id (22 characters of base64url)"
            ))
            .into());
        }
        self.portal
            .revoke(tenant, (!link_id.is_empty()).then_some(link_id.as_str()))
            .await
            .map_err(refused("tenant"))?;
        tracing::info!(tenant = %name, link = %link_id, "portal links revoked");
        Ok(pb::RevokePortalLinksResponse {})
    }
}
