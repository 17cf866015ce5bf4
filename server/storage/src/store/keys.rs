//! Every key layout of the store's tables that is more than one id, in one place: a
//! message's attempt rows, idempotency keys (scoped to their destination), dead letters
//! (grouped by destination) and FIFO lanes. Issue #51's catalog puts the tenant first in
//! each; the layouts change here and nowhere else.

use hookd_core::ids::MessageId;

use super::StoreError;

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
