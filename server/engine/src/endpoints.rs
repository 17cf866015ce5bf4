//! The engine's endpoints, by tenant: each tenant's names are its own, and a lookup never
//! crosses into another tenant's (issue #51). Two maps deep so that a lookup by a borrowed
//! name allocates nothing: the push path asks once per attempt.

use std::collections::HashMap;

use hookd_core::scope::TenantId;
use hookd_storage::store::EndpointRecord;

#[derive(Debug, Default)]
pub(crate) struct Endpoints {
    by_tenant: HashMap<TenantId, HashMap<String, EndpointRecord>>,
}

impl Endpoints {
    pub(crate) fn get(&self, tenant: TenantId, name: &str) -> Option<&EndpointRecord> {
        self.by_tenant.get(&tenant)?.get(name)
    }

    pub(crate) fn get_mut(&mut self, tenant: TenantId, name: &str) -> Option<&mut EndpointRecord> {
        self.by_tenant.get_mut(&tenant)?.get_mut(name)
    }

    pub(crate) fn contains(&self, tenant: TenantId, name: &str) -> bool {
        self.get(tenant, name).is_some()
    }

    pub(crate) fn insert(&mut self, tenant: TenantId, endpoint: EndpointRecord) {
        let names = self.by_tenant.entry(tenant).or_default();
        names.insert(endpoint.name.clone(), endpoint);
    }

    pub(crate) fn remove(&mut self, tenant: TenantId, name: &str) -> Option<EndpointRecord> {
        let names = self.by_tenant.get_mut(&tenant)?;
        let removed = names.remove(name)?;
        if names.is_empty() {
            self.by_tenant.remove(&tenant);
        }
        Some(removed)
    }

    /// A tenant's endpoint names.
    pub(crate) fn names_of(&self, tenant: TenantId) -> Vec<String> {
        self.by_tenant
            .get(&tenant)
            .map(|names| names.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every tenant's endpoint names, in (tenant, name) order.
    pub(crate) fn names(&self) -> Vec<(TenantId, String)> {
        let mut out: Vec<(TenantId, String)> = self
            .by_tenant
            .iter()
            .flat_map(|(t, names)| names.keys().map(|n| (*t, n.clone())))
            .collect();
        out.sort();
        out
    }

    /// How many endpoints a tenant has.
    pub(crate) fn count_of(&self, tenant: TenantId) -> usize {
        self.by_tenant.get(&tenant).map_or(0, HashMap::len)
    }

    pub(crate) fn len(&self) -> usize {
        self.by_tenant.values().map(HashMap::len).sum()
    }
}
