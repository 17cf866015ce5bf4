//! Names, hex and the limits that more than one edge checks: the gRPC API
//! (`api::validate`), the ingest listener (`ingest`) and the configuration (`config`) all
//! read them here, so each is written once and none of those imports another for it.
//! Pure: no I/O, and errors are plain messages the caller wraps in its own type.

/// Longest endpoint, queue or source name.
pub(crate) const MAX_NAME_LEN: usize = 128;
/// Longest event type (`webhook-event-type`).
pub const MAX_EVENT_TYPE_LEN: usize = 256;
/// Longest connect timeout an endpoint or `[delivery]` may set.
pub const MAX_CONNECT_TIMEOUT_MS: u64 = 600_000;
/// Longest attempt timeout an endpoint or `[delivery]` may set.
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// Most attempts in flight at once per destination an endpoint or `[delivery]` may set.
pub const MAX_IN_FLIGHT: u32 = 100_000;

/// Checks an endpoint, queue or source name: 1 to [`MAX_NAME_LEN`] bytes of `A-Z a-z 0-9
/// . _ -`. The error names `field`.
pub fn check_name(name: &str, field: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{field}: must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(format!(
            "{field}: {} bytes is longer than the limit of {MAX_NAME_LEN}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{field}: character {c:?} is not allowed (use A-Z, a-z, 0-9, '.', '_', '-')"
        ));
    }
    Ok(())
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// The bytes of an even-length hex string, or None.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect()
}

/// A SHA-256 digest written as 64 hex digits (surrounding white space ignored), or None.
pub fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    unhex(hex.trim())?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_what_is_not_hex() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&bytes), "0001abff");
        assert_eq!(unhex("0001abff").as_deref(), Some(&bytes[..]));
        assert_eq!(unhex("0001ABFF").as_deref(), Some(&bytes[..]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("é1"), None);
        assert_eq!(
            parse_sha256(&format!(" {} ", "ab".repeat(32))),
            Some([0xab; 32])
        );
        assert_eq!(parse_sha256(&"ab".repeat(31)), None);
    }

    #[test]
    fn a_name_error_names_the_field() {
        assert_eq!(check_name("orders.v1_a-b", "endpoint"), Ok(()));
        assert_eq!(
            check_name("", "queue"),
            Err("queue: must not be empty".to_owned())
        );
        assert!(check_name(&"a".repeat(129), "name").is_err_and(|e| e.contains("128")));
        assert!(check_name("a b", "name").is_err_and(|e| e.contains("' '")));
    }
}
