//! Tokens: the bearer header's parsing, a token's hash, and new random tokens.

use sha2::{Digest, Sha256};

/// `Bearer <token>` (scheme case-insensitive, as RFC 6750 allows).
pub fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| rest.trim_ascii())
        .filter(|t| !t.is_empty())
}

/// The SHA-256 a config holds for a token.
pub fn token_hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// A new random token (32 bytes, URL-safe base64 with a `hookd_` prefix).
pub(crate) fn new_token() -> String {
    format!("hookd_{}", random_token())
}

/// 32 random bytes, URL-safe base64: a bearer token's body, a console session id, a CSRF
/// token.
pub(crate) fn random_token() -> String {
    use base64::Engine;
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}
