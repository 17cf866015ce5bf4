//! Every value hookd writes into redb ends in a seal: the CRC-32C of the table, the key and
//! the value (format 5). redb checksums its pages only when it checks or repairs the file,
//! not on a read; the seal is checked on every read, so a flipped byte in a stored payload,
//! schedule or attempt is an error ([`StoreError::Damaged`]), never a delivery of what the
//! client did not send. The key is in the checksum, so a value found under another key
//! (a misdirected write) fails too.
//!
//! The write-ahead log carries values unsealed (its frames have their own checksum); the
//! apply stage seals them as it writes them into redb, and readers of redb open them. The
//! overlay in front of redb holds values unsealed. `meta` (two u64 counters) is not sealed.

use super::StoreError;
use super::rowlog::TableId;

/// The bytes a seal adds to every stored value.
pub(crate) const SEAL_BYTES: usize = 4;

fn checksum(table: TableId, key: &[u8], value: &[u8]) -> u32 {
    let len = u32::try_from(key.len()).unwrap_or(u32::MAX).to_le_bytes();
    let mut crc = crc32c::crc32c(&[table as u8]);
    crc = crc32c::crc32c_append(crc, &len);
    crc = crc32c::crc32c_append(crc, key);
    crc32c::crc32c_append(crc, value)
}

/// `value` as it is stored under `key` in `table`: the value, then its seal.
pub fn seal(table: TableId, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + SEAL_BYTES);
    out.extend_from_slice(value);
    out.extend_from_slice(&checksum(table, key, value).to_le_bytes());
    out
}

/// The value stored under `key` in `table`, once its seal is checked.
pub fn open<'a>(table: TableId, key: &[u8], stored: &'a [u8]) -> Result<&'a [u8], StoreError> {
    let damaged = || StoreError::Damaged {
        table: table.name(),
        key: describe_key(table, key),
    };
    let at = stored.len().checked_sub(SEAL_BYTES).ok_or_else(damaged)?;
    let (value, seal) = stored.split_at(at);
    let seal = <[u8; SEAL_BYTES]>::try_from(seal).map_err(|_| damaged())?;
    if u32::from_le_bytes(seal) == checksum(table, key, value) {
        Ok(value)
    } else {
        Err(damaged())
    }
}

/// The message a row's key names: a `messages`, `schedule`, `history` or `done` row (the
/// id), an `attempts` row (id, sequence) or a `dead` row (destination, id).
pub(crate) fn message_of(table: TableId, key: &[u8]) -> Option<hookd_core::ids::MessageId> {
    let id = |bytes: &[u8]| {
        <[u8; 16]>::try_from(bytes)
            .ok()
            .map(|b| hookd_core::ids::MessageId(u128::from_be_bytes(b)))
    };
    match table {
        TableId::Messages
        | TableId::Schedule
        | TableId::History
        | TableId::Done
        | TableId::Retained
        | TableId::Erased => id(key),
        TableId::Attempts => key.get(..16).and_then(id),
        TableId::Search => key
            .len()
            .checked_sub(16)
            .and_then(|at| key.get(at..))
            .and_then(id),
        TableId::Dead => super::dead_key_id(key).ok(),
        TableId::Endpoints
        | TableId::Sources
        | TableId::Subscriptions
        | TableId::Catalog
        | TableId::Idempotency
        | TableId::Segments
        | TableId::Scrubs
        | TableId::Lanes => None,
    }
}

/// A key as an operator can look it up: a message id, a name, or hex.
pub(crate) fn describe_key(table: TableId, key: &[u8]) -> String {
    let described = match table {
        TableId::Endpoints | TableId::Sources | TableId::Subscriptions => {
            std::str::from_utf8(key).ok().map(str::to_owned)
        }
        TableId::Catalog => super::catalog_key_parts(key).map(|object| object.to_string()),
        TableId::Attempts => message_of(table, key).map(|m| format!("{m} (an attempt)")),
        _ => message_of(table, key).map(|m| m.to_string()),
    };
    described.unwrap_or_else(|| {
        let hex: String = key.iter().take(48).map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_opens_only_under_its_own_table_and_key_and_with_every_byte_intact() {
        let key = 7u128.to_be_bytes();
        let stored = seal(TableId::Messages, &key, b"payload");
        assert_eq!(stored.len(), 7 + SEAL_BYTES);
        assert_eq!(open(TableId::Messages, &key, &stored).unwrap(), b"payload");
        for i in 0..stored.len() {
            for bit in 0..8 {
                let mut flipped = stored.clone();
                flipped[i] ^= 1 << bit;
                assert!(
                    open(TableId::Messages, &key, &flipped).is_err(),
                    "byte {i} bit {bit} flipped was accepted"
                );
            }
        }
        assert!(open(TableId::Schedule, &key, &stored).is_err());
        assert!(open(TableId::Messages, &8u128.to_be_bytes(), &stored).is_err());
        assert!(open(TableId::Messages, &key, &stored[..3]).is_err());
        assert!(open(TableId::Messages, &key, &[0; 64]).is_err());
        let err = open(TableId::Messages, &key, &[0; 64])
            .unwrap_err()
            .to_string();
        assert!(err.contains("messages"), "{err}");
        assert!(
            err.contains(&hookd_core::ids::MessageId(7).to_string()),
            "{err}"
        );
    }
}
