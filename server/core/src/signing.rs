//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256(id.timestamp.body)>`
//! for a symmetric secret (`whsec_`), `v1a,<base64 ed25519(id.timestamp.body)>` for an
//! asymmetric one (`whsk_`, whose receiver holds only the public key, `whpk_`: a leaked
//! verification key forges nothing). One entry per secret, space-separated, so an endpoint
//! can rotate secrets, or move from `v1` to `v1a`, with no gap (the receiver accepts any
//! entry that matches one of its keys).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::Signer as _;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// The prefix every symmetric secret carries, as in the Standard Webhooks spec.
pub(crate) const SECRET_PREFIX: &str = "whsec_";
/// An ed25519 signing key (`v1a`): base64 of its 32-byte seed, or of the 64-byte
/// seed and public key.
pub(crate) const SIGNING_KEY_PREFIX: &str = "whsk_";
/// An ed25519 public key, what a `v1a` receiver verifies with: base64 of 32 bytes.
pub const PUBLIC_KEY_PREFIX: &str = "whpk_";
/// Accepted key sizes after base64 decoding (the spec suggests 24 to 64 bytes).
pub(crate) const MIN_KEY_BYTES: usize = 24;
pub(crate) const MAX_KEY_BYTES: usize = 64;

/// A decoded signing key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Key);

#[derive(Clone, PartialEq, Eq)]
enum Key {
    /// `whsec_`: HMAC-SHA256, `v1`.
    Hmac(Vec<u8>),
    /// `whsk_`: ed25519, `v1a`.
    Ed25519(Box<ed25519_dalek::SigningKey>),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)") // never log key material
    }
}

/// Why a secret string was refused; the message says what a good one looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error(
        "must start with \"{SECRET_PREFIX}\" (HMAC, v1) or \"{SIGNING_KEY_PREFIX}\" (ed25519, v1a)"
    )]
    Prefix,
    #[error("is not valid base64 after its prefix")]
    Base64,
    #[error("decodes to {0} bytes; use {MIN_KEY_BYTES} to {MAX_KEY_BYTES}")]
    Length(usize),
    #[error(
        "decodes to {0} bytes; an ed25519 signing key is 32 bytes (its seed) or 64 (seed and public key)"
    )]
    SigningKeyLength(usize),
    #[error("its last 32 bytes are not the public key of its first 32")]
    KeyPair,
    #[error(
        "is an ed25519 signing key (\"{SIGNING_KEY_PREFIX}\"): verifying needs an HMAC secret (\"{SECRET_PREFIX}\") or the public key (\"{PUBLIC_KEY_PREFIX}\")"
    )]
    NotHmac,
    #[error("decodes to {0} bytes; an ed25519 public key is 32")]
    PublicKeyLength(usize),
    #[error("is not an ed25519 public key (not a point of the curve)")]
    PublicKeyPoint,
}

impl Secret {
    /// The HMAC key of a `whsec_` secret (inbound verification keys its MAC with it).
    pub fn hmac_key(&self) -> Option<&[u8]> {
        match &self.0 {
            Key::Hmac(k) => Some(k),
            Key::Ed25519(_) => None,
        }
    }

    /// The `whpk_` public key a receiver verifies a `v1a` signature with; `None` for an
    /// HMAC secret (its receiver holds the secret itself).
    pub fn public_key(&self) -> Option<String> {
        match &self.0 {
            Key::Hmac(_) => None,
            Key::Ed25519(k) => Some(format!(
                "{PUBLIC_KEY_PREFIX}{}",
                STANDARD.encode(k.verifying_key().as_bytes())
            )),
        }
    }

    /// The raw ed25519 public key of a `whsk_` secret (its JWK's `x`); `None` for HMAC.
    pub fn public_key_bytes(&self) -> Option<[u8; 32]> {
        match &self.0 {
            Key::Hmac(_) => None,
            Key::Ed25519(k) => Some(k.verifying_key().to_bytes()),
        }
    }

    /// A `whsec_` (HMAC, `v1`) or `whsk_` (ed25519, `v1a`) secret.
    pub fn parse(s: &str) -> Result<Self, SecretError> {
        if let Some(encoded) = s.strip_prefix(SIGNING_KEY_PREFIX) {
            let bytes = STANDARD.decode(encoded).map_err(|_| SecretError::Base64)?;
            let seed: [u8; 32] = match bytes.len() {
                32 | 64 => bytes[..32].try_into().map_err(|_| SecretError::Base64)?,
                n => return Err(SecretError::SigningKeyLength(n)),
            };
            let key = ed25519_dalek::SigningKey::from_bytes(&seed);
            if bytes.len() == 64 && key.verifying_key().as_bytes()[..] != bytes[32..] {
                return Err(SecretError::KeyPair);
            }
            return Ok(Self(Key::Ed25519(Box::new(key))));
        }
        let encoded = s.strip_prefix(SECRET_PREFIX).ok_or(SecretError::Prefix)?;
        let key = STANDARD.decode(encoded).map_err(|_| SecretError::Base64)?;
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Self(Key::Hmac(key)))
    }

    /// A `whsec_` secret only: what verifying a received signature needs.
    pub fn parse_hmac(s: &str) -> Result<Self, SecretError> {
        let secret = Self::parse(s)?;
        match secret.0 {
            Key::Hmac(_) => Ok(secret),
            Key::Ed25519(_) => Err(SecretError::NotHmac),
        }
    }
}

/// An ed25519 public key (`whpk_` + base64 of 32 bytes), what a `v1a` signature is
/// verified with (an ingest source's secret, where hookd is the receiver).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(ed25519_dalek::VerifyingKey);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PublicKey(..)")
    }
}

impl PublicKey {
    /// Is `s` written as a public key (`whpk_`), whatever follows?
    pub fn is_one(s: &str) -> bool {
        s.starts_with(PUBLIC_KEY_PREFIX)
    }

    pub fn parse(s: &str) -> Result<Self, SecretError> {
        let encoded = s
            .strip_prefix(PUBLIC_KEY_PREFIX)
            .ok_or(SecretError::Prefix)?;
        let bytes = STANDARD.decode(encoded).map_err(|_| SecretError::Base64)?;
        let raw: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| SecretError::PublicKeyLength(bytes.len()))?;
        ed25519_dalek::VerifyingKey::from_bytes(&raw)
            .map(Self)
            .map_err(|_| SecretError::PublicKeyPoint)
    }

    /// Does `signature` (the base64 after `v1a,`) sign `id.timestamp.body` under this key?
    pub fn verifies(&self, signature_b64: &str, id: &str, timestamp: &str, body: &[u8]) -> bool {
        let Ok(raw) = STANDARD.decode(signature_b64) else {
            return false;
        };
        let Ok(raw) = <[u8; 64]>::try_from(raw.as_slice()) else {
            return false;
        };
        self.0
            .verify_strict(
                &signed_content(id, timestamp, body),
                &ed25519_dalek::Signature::from_bytes(&raw),
            )
            .is_ok()
    }
}

/// The `webhook-signature` header value for a message, or `None` with no secrets.
pub fn signature_header(
    secrets: &[Secret],
    webhook_id: &str,
    timestamp_s: u64,
    body: &[u8],
) -> Option<String> {
    if secrets.is_empty() {
        return None;
    }
    let timestamp = timestamp_s.to_string();
    let mut out = String::with_capacity(secrets.len() * 92);
    for secret in secrets {
        let entry = match &secret.0 {
            Key::Hmac(key) => {
                // HMAC accepts keys of any length, so this cannot fail; skip rather than panic.
                let Ok(mut mac) = <Hmac as KeyInit>::new_from_slice(key) else {
                    continue;
                };
                mac.update(webhook_id.as_bytes());
                mac.update(b".");
                mac.update(timestamp.as_bytes());
                mac.update(b".");
                mac.update(body);
                format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
            }
            Key::Ed25519(key) => {
                let signed = signed_content(webhook_id, &timestamp, body);
                format!("v1a,{}", STANDARD.encode(key.sign(&signed).to_bytes()))
            }
        };
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&entry);
    }
    Some(out)
}

/// The ed25519 public keys of the `whsk_` secrets among `secrets` (written as given, in
/// clear), in order: an endpoint's current `v1a` keys. Secrets that do not parse have none.
pub fn public_keys(secrets: &[String]) -> Vec<[u8; 32]> {
    secrets
        .iter()
        .filter_map(|s| Secret::parse(s).ok()?.public_key_bytes())
        .collect()
}

/// The `hookd-key-id` header value: the key id (JWKS `kid`) of each `v1a` entry of
/// [`signature_header`], in its order; `None` when no secret is ed25519.
pub fn key_id_header(secrets: &[Secret]) -> Option<String> {
    let ids: Vec<String> = secrets
        .iter()
        .filter_map(Secret::public_key_bytes)
        .map(|k| crate::jwks::key_id(&k))
        .collect();
    (!ids.is_empty()).then(|| ids.join(" "))
}

/// What a `v1a` signature signs: `id.timestamp.body`, in one buffer (ed25519 signs a
/// message whole; HMAC is fed the same parts one by one).
fn signed_content(id: &str, timestamp: &str, body: &[u8]) -> Vec<u8> {
    let mut signed = Vec::with_capacity(id.len() + timestamp.len() + 2 + body.len());
    signed.extend_from_slice(id.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(timestamp.as_bytes());
    signed.push(b'.');
    signed.extend_from_slice(body);
    signed
}

type Hmac = hmac::Hmac<Sha256>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The Standard Webhooks specification's published example.
    #[test]
    fn matches_the_standard_webhooks_example() {
        let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let header = signature_header(
            &[secret],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            header.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn several_secrets_give_several_signatures_in_order() {
        let a = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let b = Secret::parse(&format!("whsec_{}", STANDARD.encode([7u8; 32]))).unwrap();
        let header = signature_header(&[a, b.clone()], "m", 1, b"{}").unwrap();
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(
            Some(parts[1]),
            signature_header(&[b], "m", 1, b"{}").as_deref()
        );
        assert!(signature_header(&[], "m", 1, b"{}").is_none());
    }

    /// A `whsk_` key signs `v1a` with ed25519 over the same content, verifiable with its
    /// `whpk_` public key alone; mixed with a `whsec_` secret, one entry each, in order.
    #[test]
    fn an_ed25519_key_signs_v1a() {
        let seed = [5u8; 32];
        let sk = Secret::parse(&format!("whsk_{}", STANDARD.encode(seed))).unwrap();
        let hmac = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let header =
            signature_header(&[hmac.clone(), sk.clone()], "msg_1", 1_700_000_000, b"{}").unwrap();
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts[0].starts_with("v1,"));
        let sig = STANDARD
            .decode(parts[1].strip_prefix("v1a,").unwrap())
            .unwrap();
        let public = sk.public_key().unwrap();
        let pk: [u8; 32] = STANDARD
            .decode(public.strip_prefix("whpk_").unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let vk = ed25519_dalek::VerifyingKey::from_bytes(&pk).unwrap();
        let sig = ed25519_dalek::Signature::from_bytes(&sig.try_into().unwrap());
        use ed25519_dalek::Verifier as _;
        vk.verify(b"msg_1.1700000000.{}", &sig).unwrap();
        assert!(vk.verify(b"msg_1.1700000001.{}", &sig).is_err());
        assert!(hmac.public_key().is_none());
        // The 64-byte form (seed and public key) is the same key; a mismatched pair is not.
        let pair = [&seed[..], &pk[..]].concat();
        assert_eq!(
            Secret::parse(&format!("whsk_{}", STANDARD.encode(&pair))).unwrap(),
            sk
        );
        let wrong = [&seed[..], &[0u8; 32][..]].concat();
        assert_eq!(
            Secret::parse(&format!("whsk_{}", STANDARD.encode(wrong))),
            Err(SecretError::KeyPair)
        );
        assert_eq!(
            Secret::parse(&format!("whsk_{}", STANDARD.encode([1u8; 16]))),
            Err(SecretError::SigningKeyLength(16))
        );
        assert_eq!(
            Secret::parse_hmac(&format!("whsk_{}", STANDARD.encode(seed))),
            Err(SecretError::NotHmac)
        );
    }

    /// What hookd signs with a `whsk_` key, a source holding its `whpk_` key verifies;
    /// another body, timestamp or key does not.
    #[test]
    fn a_public_key_verifies_what_its_signing_key_signed() {
        let sk = Secret::parse(&format!("whsk_{}", STANDARD.encode([9u8; 32]))).unwrap();
        let pk = PublicKey::parse(&sk.public_key().unwrap()).unwrap();
        let header = signature_header(&[sk], "msg_2", 1_700_000_000, b"{}").unwrap();
        let sig = header.strip_prefix("v1a,").unwrap();
        assert!(pk.verifies(sig, "msg_2", "1700000000", b"{}"));
        assert!(!pk.verifies(sig, "msg_2", "1700000000", b"{ }"));
        assert!(!pk.verifies(sig, "msg_2", "1700000001", b"{}"));
        assert!(!pk.verifies("not base64!", "msg_2", "1700000000", b"{}"));
        let other = Secret::parse(&format!("whsk_{}", STANDARD.encode([8u8; 32]))).unwrap();
        let other_pk = PublicKey::parse(&other.public_key().unwrap()).unwrap();
        assert!(!other_pk.verifies(sig, "msg_2", "1700000000", b"{}"));
        assert_eq!(
            PublicKey::parse(&format!("whpk_{}", STANDARD.encode([1u8; 31]))),
            Err(SecretError::PublicKeyLength(31))
        );
    }

    #[test]
    fn bad_secrets_are_refused() {
        assert_eq!(
            Secret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            Err(SecretError::Prefix)
        );
        assert_eq!(Secret::parse("whsec_!!!"), Err(SecretError::Base64));
        assert_eq!(Secret::parse("whsec_c2hvcnQ="), Err(SecretError::Length(5)));
    }
}
