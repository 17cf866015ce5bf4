//! Endpoint signing secrets: how they are shown, and their encryption at rest.
//!
//! Shown: never in clear by GetEndpoint, ListEndpoints or PutEndpoint's answer; each secret
//! is summarised by a prefix (`whsec_` and 4 characters) and a fingerprint (the first 8
//! bytes of its SHA-256, hex), enough to tell which secret is configured. GetEndpoint with
//! `reveal_secrets` (the `admin` scope) returns the values, for a migration.
//!
//! At rest: with `[secrets] keys`, every secret is sealed with XChaCha20-Poly1305 (random
//! 192-bit nonce, the endpoint's name as associated data so a sealed value cannot be moved
//! to another endpoint) before it reaches the write-ahead log or the database, and opened
//! only to sign a delivery or to reveal it. Stored form: `hookd-sealed:v1:<key id>:<base64
//! of nonce || ciphertext>`. The first key seals; every listed key opens, so a key is
//! rotated by putting a new one first: at start hookd re-seals every secret under the first
//! key, after which the old key may be removed. A secret that no listed key opens stops the
//! start with the endpoint's name, rather than deliveries going out unsigned.

use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305, XNonce};
use serde::Deserialize;
use sha2::{Digest, Sha256};

const SEALED: &str = "hookd-sealed:v1:";

/// `[secrets]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsConfig {
    /// Encryption keys, newest first; none: secrets are stored in clear (in a 0600 file).
    pub keys: Vec<KeyConfig>,
}

/// One key: 32 bytes, base64 or hex, from a file or an environment variable.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Stored beside each sealed value (letters, digits, `-`, `_`, `.`).
    pub id: String,
    #[serde(default)]
    pub file: Option<PathBuf>,
    #[serde(default)]
    pub env: Option<String>,
}

/// Seals and opens secrets with the configured keys.
pub struct Sealer {
    /// (id, cipher), newest first.
    keys: Vec<(String, XChaCha20Poly1305)>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Sealer").field("key_ids", &ids).finish()
    }
}

/// Why a stored secret cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("sealed with key `{0}`, which is not in [secrets] keys")]
    UnknownKey(String),
    #[error("sealed, but no [secrets] keys are configured")]
    NoKeys,
    #[error("sealed value is damaged or was sealed for another endpoint")]
    Damaged,
}

impl Sealer {
    /// `None` when no key is configured. Errors name the key and what is wrong.
    pub fn new(
        config: &SecretsConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, (String, String)> {
        if config.keys.is_empty() {
            return Ok(None);
        }
        let mut keys = Vec::with_capacity(config.keys.len());
        for (i, k) in config.keys.iter().enumerate() {
            let key = format!("secrets.keys[{i}]");
            if k.id.is_empty()
                || !k
                    .id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err((
                    format!("{key}.id"),
                    "must be letters, digits, `-`, `_` or `.`".into(),
                ));
            }
            if keys.iter().any(|(id, _)| *id == k.id) {
                return Err((format!("{key}.id"), format!("`{}` is listed twice", k.id)));
            }
            let text = match (&k.file, &k.env) {
                (Some(path), None) => std::fs::read_to_string(path).map_err(|e| {
                    (
                        format!("{key}.file"),
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?,
                (None, Some(var)) => env(var).ok_or_else(|| {
                    (
                        format!("{key}.env"),
                        format!("the environment variable {var} is not set"),
                    )
                })?,
                _ => return Err((key, "give exactly one of `file` and `env`".into())),
            };
            let bytes = decode_key(text.trim()).ok_or_else(|| {
                (
                    key.clone(),
                    "a key is 32 bytes as base64 or hex (e.g. `head -c 32 /dev/urandom | base64`)"
                        .into(),
                )
            })?;
            let cipher = XChaCha20Poly1305::new_from_slice(&bytes)
                .map_err(|_| (key.clone(), "a key is 32 bytes".to_string()))?;
            keys.push((k.id.clone(), cipher));
        }
        Ok(Some(Self { keys }))
    }

    /// Seals `secret` of endpoint `endpoint` with the newest key.
    pub fn seal(&self, endpoint: &str, secret: &str) -> String {
        let (id, cipher) = &self.keys[0];
        let nonce_bytes: [u8; 24] = rand::random();
        let nonce = XNonce::from(nonce_bytes);
        // Encryption fails only for inputs over 256 GiB; a secret is under 100 bytes.
        let sealed = cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: secret.as_bytes(),
                    aad: endpoint.as_bytes(),
                },
            )
            .unwrap_or_default();
        let mut blob = Vec::with_capacity(24 + sealed.len());
        blob.extend_from_slice(&nonce_bytes);
        blob.extend_from_slice(&sealed);
        format!("{SEALED}{id}:{}", STANDARD.encode(blob))
    }

    /// Whether a stored value should be sealed again (in clear, or under an older key).
    pub fn needs_reseal(&self, stored: &str) -> bool {
        match stored.strip_prefix(SEALED) {
            None => true,
            Some(rest) => !rest.starts_with(&format!("{}:", self.keys[0].0)),
        }
    }
}

/// The secret in clear: a value stored in clear is returned as it is.
/// The associated data an endpoint's secrets are sealed with: its name for tenant
/// `default` (as before tenants), else the tenant's number and the name (`5/billing`), so a
/// sealed secret copied to another tenant's endpoint of the same name does not open.
pub fn endpoint_aad(tenant: crate::scope::TenantId, name: &str) -> std::borrow::Cow<'_, str> {
    if tenant.is_default() {
        std::borrow::Cow::Borrowed(name)
    } else {
        std::borrow::Cow::Owned(format!("{tenant}/{name}"))
    }
}

pub fn open(sealer: Option<&Sealer>, endpoint: &str, stored: &str) -> Result<String, OpenError> {
    let Some(rest) = stored.strip_prefix(SEALED) else {
        return Ok(stored.to_owned());
    };
    let sealer = sealer.ok_or(OpenError::NoKeys)?;
    let (id, blob) = rest.split_once(':').ok_or(OpenError::Damaged)?;
    let (_, cipher) = sealer
        .keys
        .iter()
        .find(|(k, _)| k == id)
        .ok_or_else(|| OpenError::UnknownKey(id.to_owned()))?;
    let blob = STANDARD.decode(blob).map_err(|_| OpenError::Damaged)?;
    let (nonce, sealed) = blob.split_at_checked(24).ok_or(OpenError::Damaged)?;
    let nonce: [u8; 24] = nonce.try_into().map_err(|_| OpenError::Damaged)?;
    let clear = cipher
        .decrypt(
            &XNonce::from(nonce),
            Payload {
                msg: sealed,
                aad: endpoint.as_bytes(),
            },
        )
        .map_err(|_| OpenError::Damaged)?;
    String::from_utf8(clear).map_err(|_| OpenError::Damaged)
}

/// Seals every secret of an endpoint (no-op without keys).
pub fn seal_all(sealer: Option<&Sealer>, endpoint: &str, secrets: &mut [String]) {
    if let Some(s) = sealer {
        for secret in secrets {
            *secret = s.seal(endpoint, secret);
        }
    }
}

/// The key secrets' fingerprints are made with: this installation's, kept in its data
/// file (`Store::fingerprint_key`) and set once at start. Without it (tests of this crate)
/// fingerprints are unkeyed.
static FINGERPRINT_KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();

/// Sets the installation's fingerprint key (the first call wins: one data file a process).
pub fn set_fingerprint_key(key: [u8; 32]) {
    let _ = FINGERPRINT_KEY.set(key);
}

/// What GetEndpoint and GetSource show of a secret: its kind's prefix (`whsec_`, never a
/// character of the secret itself: a provider's secret may be a short phrase) and a
/// fingerprint: the first 8 bytes of HMAC-SHA256 under the installation's key (issue #49,
/// 7: an unsalted SHA-256 prefix let anyone with read scope test guesses of a short secret
/// offline). Stable for one installation, so two endpoints' secrets can be compared.
pub fn summary(clear: &str) -> (String, String) {
    summary_with(FINGERPRINT_KEY.get(), clear)
}

fn summary_with(key: Option<&[u8; 32]>, clear: &str) -> (String, String) {
    use hmac::{KeyInit as _, Mac};
    let prefix = if clear.starts_with("whsec_") {
        "whsec_…"
    } else if clear.starts_with("whsk_") {
        "whsk_…"
    } else if clear.starts_with("whpk_") {
        "whpk_…"
    } else {
        "…"
    };
    let fingerprint = match key.map(|k| <hmac::Hmac<Sha256>>::new_from_slice(k)) {
        Some(Ok(mut mac)) => {
            mac.update(clear.as_bytes());
            let tag = mac.finalize().into_bytes();
            format!("hmac-sha256:{}", crate::names::hex(&tag[..8]))
        }
        _ => {
            let digest = Sha256::digest(clear.as_bytes());
            format!("sha256:{}", crate::names::hex(&digest[..8]))
        }
    };
    (prefix.to_owned(), fingerprint)
}

fn decode_key(text: &str) -> Option<Vec<u8>> {
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        (0..32)
            .map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?
    } else {
        STANDARD.decode(text).ok()?
    };
    (bytes.len() == 32).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_is_keyed_by_the_installation() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let one = summary_with(Some(&a), "short phrase");
        assert_eq!(one.0, "…");
        assert!(one.1.starts_with("hmac-sha256:"), "{one:?}");
        assert_eq!(one, summary_with(Some(&a), "short phrase"), "stable");
        assert_ne!(
            one,
            summary_with(Some(&b), "short phrase"),
            "another installation's"
        );
        // Without the key, the unsalted digest anyone could recompute.
        let unkeyed = summary_with(None, "short phrase").1;
        assert_ne!(one.1["hmac-sha256:".len()..], unkeyed["sha256:".len()..]);
    }

    fn sealer(keys: &[(&str, &str)]) -> Sealer {
        let config = SecretsConfig {
            keys: keys
                .iter()
                .map(|(id, var)| KeyConfig {
                    id: (*id).into(),
                    file: None,
                    env: Some((*var).into()),
                })
                .collect(),
        };
        let env = |v: &str| match v {
            "K1" => Some(STANDARD.encode([1u8; 32])),
            "K2" => Some("22".repeat(32)),
            _ => None,
        };
        Sealer::new(&config, &env).unwrap().unwrap()
    }

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[test]
    fn seal_open_and_rotate() {
        let old = sealer(&[("k1", "K1")]);
        let sealed = old.seal("billing", SECRET);
        assert!(sealed.starts_with("hookd-sealed:v1:k1:"), "{sealed}");
        assert!(!sealed.contains("MfKQ9r8G"));
        assert_eq!(open(Some(&old), "billing", &sealed).unwrap(), SECRET);
        // Bound to the endpoint's name.
        assert_eq!(
            open(Some(&old), "other", &sealed).unwrap_err(),
            OpenError::Damaged
        );
        // Two seals of one secret differ (random nonce).
        assert_ne!(old.seal("billing", SECRET), sealed);
        // Rotation: the new key first; the old one still opens, and asks for a re-seal.
        let rotated = sealer(&[("k2", "K2"), ("k1", "K1")]);
        assert!(rotated.needs_reseal(&sealed));
        assert_eq!(open(Some(&rotated), "billing", &sealed).unwrap(), SECRET);
        let resealed = rotated.seal("billing", SECRET);
        assert!(!rotated.needs_reseal(&resealed));
        assert!(rotated.needs_reseal(SECRET), "clear values are sealed too");
        // Without the old key, or with none, a sealed value is refused with the key's id.
        let new_only = sealer(&[("k2", "K2")]);
        assert_eq!(
            open(Some(&new_only), "billing", &sealed).unwrap_err(),
            OpenError::UnknownKey("k1".into())
        );
        assert_eq!(
            open(None, "billing", &sealed).unwrap_err(),
            OpenError::NoKeys
        );
        // Damaged values.
        for bad in [
            "hookd-sealed:v1:k1",
            "hookd-sealed:v1:k1:!!!",
            "hookd-sealed:v1:k1:AAAA",
        ] {
            assert_eq!(
                open(Some(&old), "billing", bad).unwrap_err(),
                OpenError::Damaged
            );
        }
        let mut flipped = sealed.clone().into_bytes();
        let last = flipped.len() - 3;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        assert!(open(Some(&old), "billing", &String::from_utf8(flipped).unwrap()).is_err());
    }

    #[test]
    fn summary_shows_a_prefix_and_a_fingerprint_only() {
        let (prefix, fingerprint) = summary(SECRET);
        assert_eq!(prefix, "whsec_…");
        assert!(fingerprint.starts_with("sha256:") && fingerprint.len() == 7 + 16);
        assert!(!fingerprint.contains("MfKQ9r8GKYqr"));
    }

    #[test]
    fn key_config_errors_name_the_key() {
        let e = |toml: &str| {
            let c: SecretsConfig = toml::from_str(toml).unwrap();
            Sealer::new(&c, &|v| (v == "SHORT").then(|| "abcd".to_string())).unwrap_err()
        };
        assert_eq!(
            e("keys = [{ id = \"a b\", env = \"X\" }]").0,
            "secrets.keys[0].id"
        );
        assert_eq!(e("keys = [{ id = \"a\" }]").0, "secrets.keys[0]");
        assert_eq!(
            e("keys = [{ id = \"a\", env = \"UNSET\" }]").0,
            "secrets.keys[0].env"
        );
        let (key, msg) = e("keys = [{ id = \"a\", env = \"SHORT\" }]");
        assert_eq!(key, "secrets.keys[0]");
        assert!(msg.contains("32 bytes"), "{msg}");
    }

    /// Issue #26, 14: a summary shows no character of the secret itself.
    #[test]
    fn a_summary_shows_only_the_fingerprint() {
        for secret in [
            "It's a Secret to Everybody",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ] {
            let (prefix, fingerprint) = summary(secret);
            let material = secret.strip_prefix("whsec_").unwrap_or(secret);
            assert!(
                !prefix.contains(&material[..2]),
                "{prefix} shows part of {secret}"
            );
            assert!(fingerprint.starts_with("sha256:"));
        }
    }
}
