//! Every key layout of the store's tables that is more than one id, in one place: the
//! catalog's objects (tenant first), a message's attempt rows, idempotency keys (scoped to
//! their destination), dead letters (grouped by destination) and FIFO lanes. The layouts
//! change here and nowhere else.

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::{Kind, ObjectRef, TenantId};

use super::StoreError;

/// An object's key in the `catalog` table: its tenant's number (4 bytes, big-endian), its
/// kind (1 byte), then its name. A tenant's objects are one range ([`catalog_range`]), and
/// its objects of one kind a range inside it.
pub fn catalog_key(object: &ObjectRef) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + object.name.len());
    out.extend_from_slice(&object.tenant.0.to_be_bytes());
    out.push(object.kind as u8);
    out.extend_from_slice(object.name.as_bytes());
    out
}

/// [`catalog_key`]'s inverse; `None` for bytes it never made.
pub fn catalog_key_parts(key: &[u8]) -> Option<ObjectRef> {
    let tenant = TenantId(u32::from_be_bytes(key.get(..4)?.try_into().ok()?));
    let kind = Kind::from_u8(*key.get(4)?)?;
    let name = std::str::from_utf8(key.get(5..)?).ok()?;
    Some(ObjectRef::new(tenant, kind, name))
}

/// The object a stored catalog key names; a key [`catalog_key`] never made is corrupt.
pub(crate) fn catalog_object(key: &[u8]) -> Result<ObjectRef, StoreError> {
    catalog_key_parts(key).ok_or_else(|| StoreError::Corrupt(format!("a catalog key {key:02x?}")))
}

/// The first and the past-the-end key of a tenant's objects, or of its objects of one kind.
pub fn catalog_range(tenant: TenantId, kind: Option<Kind>) -> (Vec<u8>, Vec<u8>) {
    let mut first = tenant.0.to_be_bytes().to_vec();
    let mut end = first.clone();
    match kind {
        Some(kind) => {
            first.push(kind as u8);
            end.push(kind as u8 + 1);
        }
        None => {
            end = (u64::from(tenant.0) + 1).to_be_bytes()[4..].to_vec();
            if tenant.0 == u32::MAX {
                end = vec![0xff; 5];
            }
        }
    }
    (first, end)
}

/// The first and last possible keys of a message's `attempts` rows (inclusive).
pub(crate) fn attempt_range(id: MessageId) -> (Vec<u8>, Vec<u8>) {
    (attempt_key(id, 0), attempt_key(id, u32::MAX))
}

/// The key of a message's `seq`-th attempt row.
pub(crate) fn attempt_key(id: MessageId, seq: u32) -> Vec<u8> {
    let mut key = id.0.to_be_bytes().to_vec();
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Scopes a client's idempotency key to its exact destination (`Destination::encode()`:
/// two ad-hoc URLs of one origin are different destinations here).
pub fn idempotency_scope(destination: &str, key: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(destination.len() + 1 + key.len());
    out.extend_from_slice(destination.as_bytes());
    out.push(0);
    out.extend_from_slice(key.as_bytes());
    out
}

/// Where a tenant's dead letters (or one destination's) lie in the `dead` table: the first
/// key, and the prefix every one of them has (a dead key starts with its destination's key:
/// see `hookd_core::destination::tenant_keys`).
pub(crate) fn dead_bounds(
    tenant: TenantId,
    destination: Option<&Destination>,
) -> (Vec<u8>, Vec<u8>) {
    match destination {
        Some(d) => {
            let prefix = dead_prefix(&d.key());
            (prefix.clone(), prefix)
        }
        None => {
            let (first, prefix) = hookd_core::destination::tenant_keys(tenant);
            (first.into_bytes(), prefix.into_bytes())
        }
    }
}

pub(crate) fn dead_prefix(dest_key: &str) -> Vec<u8> {
    let mut out = dest_key.as_bytes().to_vec();
    out.push(0);
    out
}

pub(crate) fn dead_key(dest_key: &str, id: MessageId) -> Vec<u8> {
    let mut out = dead_prefix(dest_key);
    out.extend_from_slice(&id.0.to_be_bytes());
    out
}

pub(crate) fn dead_key_id(key: &[u8]) -> Result<MessageId, StoreError> {
    let tail = key
        .len()
        .checked_sub(16)
        .and_then(|at| key.get(at..))
        .and_then(|t| <[u8; 16]>::try_from(t).ok())
        .ok_or_else(|| StoreError::Corrupt("dead-letter key".into()))?;
    Ok(MessageId(u128::from_be_bytes(tail)))
}

pub(crate) fn dead_key_destination(key: &[u8]) -> Result<String, StoreError> {
    let dest = key
        .len()
        .checked_sub(17)
        .and_then(|at| key.get(..at))
        .ok_or_else(|| StoreError::Corrupt("dead-letter key".into()))?;
    String::from_utf8(dest.to_vec()).map_err(|_| StoreError::Corrupt("dead-letter key".into()))
}

/// The destination (its encoding) and the ordering key of a `lanes` table key
/// ([`lane_key`]'s inverse).
pub fn lane_key_parts(key: &[u8]) -> Option<(&str, &str)> {
    let len = u16::from_be_bytes(key.get(..2)?.try_into().ok()?) as usize;
    let dest = std::str::from_utf8(key.get(2..2 + len)?).ok()?;
    let ordering = std::str::from_utf8(key.get(2 + len..)?).ok()?;
    Some((dest, ordering))
}

/// A lane's key in the `lanes` table: its destination's encoding (length-prefixed) and the
/// ordering key.
pub fn lane_key(destination: &str, key: &str) -> Vec<u8> {
    let dest = &destination.as_bytes()[..destination.len().min(u16::MAX as usize)];
    let mut out = Vec::with_capacity(2 + dest.len() + key.len());
    out.extend_from_slice(&(dest.len() as u16).to_be_bytes());
    out.extend_from_slice(dest);
    out.extend_from_slice(key.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_objects_are_one_range_and_keys_round_trip() {
        let a = ObjectRef::new(TenantId(7), Kind::Endpoint, "billing");
        assert_eq!(catalog_key_parts(&catalog_key(&a)), Some(a.clone()));
        let tenant = ObjectRef::tenant(TenantId(7));
        assert_eq!(
            catalog_key_parts(&catalog_key(&tenant)),
            Some(tenant.clone())
        );
        let inside = |key: &[u8], (first, end): (Vec<u8>, Vec<u8>)| {
            first.as_slice() <= key && key < end.as_slice()
        };
        for kind in Kind::ALL {
            for name in ["", "a", "\u{10ffff}zz"] {
                let key = catalog_key(&ObjectRef::new(TenantId(7), kind, name));
                assert!(inside(&key, catalog_range(TenantId(7), None)));
                assert!(inside(&key, catalog_range(TenantId(7), Some(kind))));
                for other in Kind::ALL.into_iter().filter(|k| *k != kind) {
                    assert!(!inside(&key, catalog_range(TenantId(7), Some(other))));
                }
                for tenant in [TenantId(6), TenantId(8), TenantId(7 << 8)] {
                    assert!(!inside(&key, catalog_range(tenant, None)));
                }
            }
        }
        let last = catalog_key(&ObjectRef::new(TenantId(u32::MAX), Kind::Token, "z"));
        assert!(inside(&last, catalog_range(TenantId(u32::MAX), None)));
        assert_eq!(catalog_key_parts(&[0, 0, 0, 1]), None);
        assert_eq!(catalog_key_parts(&[0, 0, 0, 1, 99]), None);
    }

    /// A tenant's dead letters are found by its bounds, and no other tenant's are.
    #[test]
    fn dead_bounds_hold_a_tenants_rows_and_no_others() {
        let id = MessageId(7);
        let rows: Vec<(TenantId, Vec<u8>)> = [TenantId::DEFAULT, TenantId(1), TenantId(12)]
            .into_iter()
            .flat_map(|t| {
                [
                    Destination::endpoint(t, "a"),
                    Destination::queue(t, "1"),
                    Destination::url(t, "https://x.example"),
                ]
                .map(|d| (t, dead_key(&d.key(), id)))
            })
            .collect();
        for tenant in [TenantId::DEFAULT, TenantId(1), TenantId(12), TenantId(2)] {
            let (start, prefix) = dead_bounds(tenant, None);
            for (owner, key) in &rows {
                let inside = key.as_slice() >= start.as_slice() && key.starts_with(&prefix);
                assert_eq!(inside, *owner == tenant, "{tenant} {key:?}");
            }
        }
        let d = Destination::endpoint(TenantId(1), "a");
        let (start, prefix) = dead_bounds(TenantId(1), Some(&d));
        assert_eq!(start, dead_prefix("1/endpoint:a"));
        assert_eq!(prefix, start);
    }

    #[test]
    fn keys_round_trip_and_do_not_collide() {
        let id = MessageId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let (first, last) = attempt_range(id);
        assert!(first < attempt_key(id, 7) && attempt_key(id, 7) < last);
        assert!(attempt_range(MessageId(id.0 + 1)).0 > last);
        let dead = dead_key("endpoint:a", id);
        assert!(dead.starts_with(&dead_prefix("endpoint:a")));
        assert!(!dead.starts_with(&dead_prefix("endpoint:ab")));
        assert_eq!(dead_key_id(&dead).ok(), Some(id));
        assert_eq!(
            dead_key_destination(&dead).ok().as_deref(),
            Some("endpoint:a")
        );
        assert!(dead_key_id(&[1, 2]).is_err());
        assert_ne!(
            idempotency_scope("q:a", "bc"),
            idempotency_scope("q:ab", "c")
        );
        assert_ne!(lane_key("qa", "b"), lane_key("q", "ab"));
        assert_eq!(
            lane_key_parts(&lane_key("queue:q", "k-1")),
            Some(("queue:q", "k-1"))
        );
        assert_eq!(lane_key_parts(&[0, 9, b'q']), None);
    }
}
