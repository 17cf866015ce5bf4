//! Standard Webhooks signatures: `webhook-signature: v1,<base64 HMAC-SHA256(id.timestamp.body)>`,
//! one `v1,` entry per secret, space-separated, so an endpoint can rotate secrets with no
//! gap (the receiver accepts any entry that matches one of its secrets).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// The prefix every secret carries, as in the Standard Webhooks spec.
pub(crate) const SECRET_PREFIX: &str = "whsec_";
/// Accepted key sizes after base64 decoding (the spec suggests 24 to 64 bytes).
pub(crate) const MIN_KEY_BYTES: usize = 24;
pub(crate) const MAX_KEY_BYTES: usize = 64;

/// A decoded signing key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)") // never log key material
    }
}

/// Why a secret string was refused; the message says what a good one looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("must start with \"{SECRET_PREFIX}\"")]
    Prefix,
    #[error("is not valid base64 after \"{SECRET_PREFIX}\"")]
    Base64,
    #[error("decodes to {0} bytes; use {MIN_KEY_BYTES} to {MAX_KEY_BYTES}")]
    Length(usize),
}

impl Secret {
    /// The decoded key (inbound verification keys its MAC with it).
    pub fn key_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn parse(s: &str) -> Result<Self, SecretError> {
        let encoded = s.strip_prefix(SECRET_PREFIX).ok_or(SecretError::Prefix)?;
        let key = STANDARD.decode(encoded).map_err(|_| SecretError::Base64)?;
        if !(MIN_KEY_BYTES..=MAX_KEY_BYTES).contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(Self(key))
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
    let mut out = String::with_capacity(secrets.len() * 48);
    for (i, secret) in secrets.iter().enumerate() {
        // HMAC accepts keys of any length, so this cannot fail; skip rather than panic.
        let Ok(mut mac) = <Hmac as KeyInit>::new_from_slice(&secret.0) else {
            continue;
        };
        mac.update(webhook_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        if i > 0 {
            out.push(' ');
        }
        out.push_str("v1,");
        STANDARD.encode_string(mac.finalize().into_bytes(), &mut out);
    }
    Some(out)
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
