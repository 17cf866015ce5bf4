//! Tenancy's vocabulary (issue #51): which tenant an object or a message belongs to, and
//! the one reference every stored object is known by.
//!
//! A tenant is known to clients by its name (a SaaS names it after its own customer id);
//! hookd keys everything by a small number, [`TenantId`], given when the tenant is made and
//! never reused. Deleting tenant `acme` and making another `acme` gives the new one a new
//! number, so nothing left of the old one can ever be read as the new one's. The number
//! leads every catalog key, so one tenant's objects are one key range (the layout is
//! `hookd_storage::store::keys`'s). Tenant 0 is `default`: what a call that names no tenant
//! acts on, and where a store from before tenants put everything it held.

use std::fmt;

/// A tenant's number: the first part of the key of everything it owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TenantId(pub u32);

impl TenantId {
    /// The `default` tenant: made with the store, never deleted.
    pub const DEFAULT: Self = Self(0);

    pub const fn is_default(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The name of tenant [`TenantId::DEFAULT`].
pub const DEFAULT_TENANT: &str = "default";

/// Every kind of object the catalog holds. The discriminant is stored in keys: a value,
/// once given, is never reused for another kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Kind {
    /// The tenant itself (name, quotas): one object per tenant, of empty name.
    Tenant = 1,
    Endpoint = 2,
    Subscription = 3,
    /// An ingest source made over the API (the config file's are not stored).
    Source = 4,
    Queue = 5,
    EventType = 6,
    Token = 7,
    /// A key that signs portal links (issue #52), under tenant `default`.
    PortalKey = 8,
    /// A revoked portal link (or all of a tenant's before a time).
    PortalRevocation = 9,
    /// A replay job (issue #53): its progress, and where it is.
    ReplayJob = 10,
    /// A slice of a replay job's selection (its ids), named `{job}/{n}`.
    ReplaySelection = 11,
}

impl Kind {
    pub const ALL: [Self; 11] = [
        Self::Tenant,
        Self::Endpoint,
        Self::Subscription,
        Self::Source,
        Self::Queue,
        Self::EventType,
        Self::Token,
        Self::PortalKey,
        Self::PortalRevocation,
        Self::ReplayJob,
        Self::ReplaySelection,
    ];

    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u8 == v)
    }

    /// As an operator reads it (`hookd repair`, errors).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Tenant => "tenant",
            Self::Endpoint => "endpoint",
            Self::Subscription => "subscription",
            Self::Source => "source",
            Self::Queue => "queue",
            Self::EventType => "event type",
            Self::Token => "token",
            Self::PortalKey => "portal key",
            Self::PortalRevocation => "portal revocation",
            Self::ReplayJob => "replay job",
            Self::ReplaySelection => "replay selection",
        }
    }
}

/// One object of the catalog: its tenant, its kind and its name (unique within the two).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    pub tenant: TenantId,
    pub kind: Kind,
    pub name: String,
}

impl ObjectRef {
    pub fn new(tenant: TenantId, kind: Kind, name: impl Into<String>) -> Self {
        Self {
            tenant,
            kind,
            name: name.into(),
        }
    }

    /// Tenant `tenant`'s own object (its name and quotas).
    pub fn tenant(tenant: TenantId) -> Self {
        Self::new(tenant, Kind::Tenant, "")
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            Kind::Tenant => write!(f, "tenant #{}", self.tenant),
            kind => write!(
                f,
                "{} {:?} of tenant #{}",
                kind.as_str(),
                self.name,
                self.tenant
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_stored_byte() {
        for kind in Kind::ALL {
            assert_eq!(Kind::from_u8(kind as u8), Some(kind));
        }
        assert_eq!(Kind::from_u8(0), None);
        assert_eq!(Kind::from_u8(200), None);
        assert_eq!(
            ObjectRef::new(TenantId(3), Kind::Endpoint, "billing").to_string(),
            "endpoint \"billing\" of tenant #3"
        );
        assert_eq!(
            ObjectRef::tenant(TenantId::DEFAULT).to_string(),
            "tenant #0"
        );
    }
}
