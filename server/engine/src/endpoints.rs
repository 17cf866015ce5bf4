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

    /// Every endpoint's retention setting (seconds; 0: none).
    pub(crate) fn retentions(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_tenant
            .values()
            .flat_map(|names| names.values().map(|e| e.retention_secs))
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

/// An endpoint as PutEndpoint gives it, checked, its secrets already sealed by the caller:
/// the fields a client sets. The engine makes the record and owns the rest (its times,
/// whether 410 Gone disabled it, an operator's pause, its retired signing keys).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EndpointDef {
    pub name: String,
    pub url: String,
    pub description: String,
    /// 0 = the server's default, here and below.
    pub max_attempts: u32,
    pub retry_base_ms: u64,
    pub retry_cap_ms: u64,
    /// Standard Webhooks signing secrets, as stored (sealed when `[secrets] keys` are set).
    pub secrets: Vec<String>,
    pub connect_timeout_ms: u64,
    pub timeout_ms: u64,
    pub max_in_flight: u32,
    /// 0 = no rate limit.
    pub rate_limit_per_s: f64,
    pub rate_limit_burst: u32,
    /// Static headers sent with every attempt (names lower-case).
    pub headers: std::collections::BTreeMap<String, String>,
    pub proxy_url: String,
    pub client_certificate_pem: String,
    /// Sealed like the secrets.
    pub client_key_pem: String,
    pub oauth2: Option<OAuth2Def>,
    /// FIFO lanes, or none (unordered).
    pub fifo: Option<crate::FifoPolicy>,
    /// The public halves of its current `v1a` keys (the engine keeps the retired ones).
    pub signing_public_keys: Vec<Vec<u8>>,
    /// Its receiver may pull its retained events.
    pub catch_up: bool,
    /// How long its completed messages are kept (0: its tenant's, else the server's).
    pub retention_secs: u64,
}

/// OAuth2 client credentials, as an endpoint's definition carries them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OAuth2Def {
    pub token_url: String,
    pub client_id: String,
    /// Sealed like the secrets.
    pub client_secret: String,
    pub scopes: Vec<String>,
    pub audience: String,
}

impl EndpointDef {
    /// The record PutEndpoint stores, the fields the engine owns at zero (it fills them).
    pub(crate) fn into_record(self) -> EndpointRecord {
        EndpointRecord {
            name: self.name,
            url: self.url,
            description: self.description,
            max_attempts: self.max_attempts,
            retry_base_ms: self.retry_base_ms,
            retry_cap_ms: self.retry_cap_ms,
            secrets: self.secrets,
            connect_timeout_ms: self.connect_timeout_ms,
            timeout_ms: self.timeout_ms,
            max_in_flight: self.max_in_flight,
            rate_limit_per_s: self.rate_limit_per_s,
            rate_limit_burst: self.rate_limit_burst,
            headers: self.headers,
            proxy_url: self.proxy_url,
            client_certificate_pem: self.client_certificate_pem,
            client_key_pem: self.client_key_pem,
            oauth2: self.oauth2.map(|o| hookd_storage::store::OAuth2Record {
                token_url: o.token_url,
                client_id: o.client_id,
                client_secret: o.client_secret,
                scopes: o.scopes,
                audience: o.audience,
            }),
            fifo: self.fifo.map_or(0, crate::FifoPolicy::code),
            catch_up: self.catch_up,
            retention_secs: self.retention_secs,
            signing_keys: self
                .signing_public_keys
                .into_iter()
                .map(|public_key| hookd_storage::store::SigningKeyRecord {
                    public_key,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }
}
