//! JSON Web Key Sets for endpoints' `v1a` (ed25519) keys: what a receiver fetches to
//! verify hookd's signatures without copying keys by hand. A key is an RFC 8037 OKP JWK
//! (`{"kty":"OKP","crv":"Ed25519","x":...}`, `"use":"sig"`, `"alg":"EdDSA"`), named by its
//! RFC 7638 thumbprint (base64url SHA-256 of `{"crv":"Ed25519","kty":"OKP","x":"..."}`), the
//! id a delivery names in `hookd-key-id`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// The header naming the keys a delivery's `v1a` signatures were made with, one id per
/// `v1a` entry of `webhook-signature`, in its order, space-separated.
pub const KEY_ID_HEADER: &str = "hookd-key-id";

/// The RFC 7638 thumbprint of an ed25519 public key: its key id.
pub fn key_id(public_key: &[u8; 32]) -> String {
    let x = URL_SAFE_NO_PAD.encode(public_key);
    // RFC 7638: the required members, sorted, no whitespace.
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

/// One key as a JWK. `retired_ms`: when it stopped signing (kept so that what it signed
/// still verifies), written as the non-standard member `hookd_retired_unix_ms`.
pub fn jwk(public_key: &[u8; 32], retired_ms: Option<u64>) -> serde_json::Value {
    let mut key = serde_json::json!({
        "kty": "OKP",
        "crv": "Ed25519",
        "x": URL_SAFE_NO_PAD.encode(public_key),
        "kid": key_id(public_key),
        "use": "sig",
        "alg": "EdDSA",
    });
    if let (Some(ms), Some(map)) = (retired_ms, key.as_object_mut()) {
        map.insert("hookd_retired_unix_ms".into(), ms.into());
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 8037 appendix A.3: the thumbprint of its example Ed25519 key.
    #[test]
    fn the_key_id_is_the_rfc_7638_thumbprint() {
        let x = URL_SAFE_NO_PAD
            .decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
            .unwrap_or_default();
        let key: [u8; 32] = x.as_slice().try_into().unwrap_or([0; 32]);
        assert_eq!(key_id(&key), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
        let jwk = jwk(&key, Some(5));
        assert_eq!(jwk["x"], "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
        assert_eq!(jwk["hookd_retired_unix_ms"], 5);
    }
}
