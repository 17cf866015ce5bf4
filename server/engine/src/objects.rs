//! A tenant's named objects that the engine holds beside their catalog records (queues'
//! settings, event types): by tenant, then by name.

use std::collections::HashMap;

use hookd_core::scope::TenantId;

#[derive(Debug)]
pub(crate) struct ByTenant<R> {
    by_tenant: HashMap<TenantId, HashMap<String, R>>,
}

impl<R> Default for ByTenant<R> {
    fn default() -> Self {
        Self {
            by_tenant: HashMap::new(),
        }
    }
}

impl<R> ByTenant<R> {
    pub(crate) fn get(&self, tenant: TenantId, name: &str) -> Option<&R> {
        self.by_tenant.get(&tenant)?.get(name)
    }

    /// Every object, with its tenant.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (TenantId, &R)> + '_ {
        self.by_tenant
            .iter()
            .flat_map(|(t, names)| names.values().map(move |r| (*t, r)))
    }

    pub(crate) fn insert(&mut self, tenant: TenantId, name: String, record: R) {
        self.by_tenant
            .entry(tenant)
            .or_default()
            .insert(name, record);
    }

    pub(crate) fn remove(&mut self, tenant: TenantId, name: &str) -> Option<R> {
        let names = self.by_tenant.get_mut(&tenant)?;
        let removed = names.remove(name);
        if names.is_empty() {
            self.by_tenant.remove(&tenant);
        }
        removed
    }

    /// A deleted tenant's are gone (its objects were removed with it).
    pub(crate) fn forget_tenant(&mut self, tenant: TenantId) {
        self.by_tenant.remove(&tenant);
    }

    pub(crate) fn count_of(&self, tenant: TenantId) -> usize {
        self.by_tenant.get(&tenant).map_or(0, HashMap::len)
    }
}
