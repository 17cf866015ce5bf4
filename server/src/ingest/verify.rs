//! Provider signature schemes for inbound webhooks (issue #13), checked over the raw body
//! bytes before anything parses it.
//!
//! - `standard-webhooks`: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64>`
//!   (space-separated entries), HMAC-SHA256 of `id.timestamp.body`, secrets `whsec_<base64>`.
//! - `stripe`: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=...]`, HMAC-SHA256 of `t.body`
//!   keyed with the whole secret string.
//! - `github`: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the body.
//! - `shopify`: `X-Shopify-Hmac-Sha256: <base64>`, HMAC-SHA256 of the body.
//! - `hmac`: any header, SHA-256 or SHA-1, hex or base64, an optional prefix, over the body
//!   or over `timestamp<separator>body` with the timestamp from another header.
//!
//! Every comparison is constant-time (`Mac::verify_slice`), against every configured
//! secret (rotation), and a refusal never says which part failed ([`Refused`] has one text;
//! the reason is for hookd's debug log only).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use hookd_core::source::{Algorithm, Encoding, HmacScheme};
use serde::Deserialize;

/// How a source's deliveries are signed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "scheme")]
pub enum Scheme {
    StandardWebhooks,
    Stripe,
    Github,
    Shopify,
    Hmac(HmacScheme),
}

/// Signatures one header may carry, at most (Standard Webhooks' space-separated list,
/// Stripe's `v1=` parts): rotation needs two or three; more only multiply the work.
pub(crate) const MAX_SIGNATURES: usize = 16;
/// A provider secret's length, at least (a short one is guessed; Standard Webhooks
/// secrets have their own rule: a `whsec_` key of 24 to 64 bytes).
pub(crate) const MIN_SECRET_BYTES: usize = 16;
/// Secrets one source may hold, at most (rotation needs two).
pub(crate) const MAX_SECRETS: usize = 8;
/// Bodies larger than this are hashed on a checker thread ([`super::checker`]), off the
/// async workers.
pub(crate) const CHECKER_HASH_BYTES: usize = 64 << 10;

/// A refused delivery. One text for every cause; `why` goes to the debug log only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("signature missing, invalid or outside the time tolerance")]
pub struct Refused {
    pub why: &'static str,
    /// Refused for its shape before any MAC was computed (too many signatures): this may
    /// be told to the sender as it is, since it says nothing about the secrets.
    pub(crate) over_limit: bool,
}

fn refused(why: &'static str) -> Refused {
    Refused {
        why,
        over_limit: false,
    }
}

/// The refusal of a header with more than [`MAX_SIGNATURES`] signatures.
fn too_many() -> Refused {
    Refused {
        why: "too many signatures in the header",
        over_limit: true,
    }
}

/// What a verified delivery said of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    /// The signed timestamp, where the scheme has one.
    pub timestamp_s: Option<u64>,
}

/// A scheme with its secrets and timestamp tolerance.
#[derive(Clone)]
pub struct Verifier {
    scheme: Scheme,
    /// Keys as the scheme uses them (Standard Webhooks: the decoded `whsec_` bytes;
    /// otherwise the secret's bytes).
    keys: Vec<Vec<u8>>,
    /// Standard Webhooks `v1a`: the senders' ed25519 public keys (`whpk_`).
    public_keys: Vec<hookd_core::signing::PublicKey>,
    tolerance_s: u64,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field("keys", &self.keys.len())
            .field("tolerance_s", &self.tolerance_s)
            .finish()
    }
}

impl Verifier {
    /// Errors name what is wrong with a secret (never its value).
    pub fn new(scheme: Scheme, secrets: &[String], tolerance_s: u64) -> Result<Self, String> {
        if secrets.is_empty() {
            return Err("at least one secret is needed".into());
        }
        if secrets.len() > MAX_SECRETS {
            return Err(format!(
                "{} secrets is over the limit of {MAX_SECRETS} per source (rotation needs two)",
                secrets.len()
            ));
        }
        let mut keys = Vec::with_capacity(secrets.len());
        let mut public_keys = Vec::new();
        for (i, s) in secrets.iter().enumerate() {
            if matches!(scheme, Scheme::StandardWebhooks)
                && hookd_core::signing::PublicKey::is_one(s)
            {
                public_keys.push(
                    hookd_core::signing::PublicKey::parse(s)
                        .map_err(|e| format!("secrets[{i}]: {e}"))?,
                );
                continue;
            }
            let key = match scheme {
                Scheme::StandardWebhooks => hookd_core::signing::Secret::parse_hmac(s)
                    .map(|k| k.hmac_key().unwrap_or_default().to_vec())
                    .map_err(|e| format!("secrets[{i}]: {e}"))?,
                _ if s.len() < MIN_SECRET_BYTES => {
                    return Err(format!(
                        "secrets[{i}]: {} bytes is under the minimum of {MIN_SECRET_BYTES}",
                        s.len()
                    ));
                }
                _ => s.as_bytes().to_vec(),
            };
            keys.push(key);
        }
        if let Scheme::Hmac(h) = &scheme
            && http::HeaderName::from_bytes(h.header.as_bytes()).is_err()
        {
            return Err(format!("header: {:?} is not a header name", h.header));
        }
        Ok(Self {
            scheme,
            keys,
            public_keys,
            tolerance_s,
        })
    }

    /// Checks a delivery's headers and raw body at `now_s`.
    pub fn verify(
        &self,
        headers: &http::HeaderMap,
        body: &[u8],
        now_s: u64,
    ) -> Result<Verified, Refused> {
        let header = |name: &str| -> Result<&str, Refused> {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .ok_or(refused("a signature header is missing"))
        };
        match &self.scheme {
            Scheme::StandardWebhooks => {
                let id = header("webhook-id")?;
                let ts_text = header("webhook-timestamp")?;
                let ts = self.timestamp(ts_text, now_s)?;
                let entries = header("webhook-signature")?;
                if entries.split(' ').filter(|e| !e.is_empty()).count() > MAX_SIGNATURES {
                    return Err(too_many());
                }
                // v1a: any entry under any of the senders' public keys.
                let v1a = entries
                    .split(' ')
                    .filter_map(|e| e.strip_prefix("v1a,"))
                    .any(|sig| {
                        self.public_keys
                            .iter()
                            .any(|pk| pk.verifies(sig, id, ts_text, body))
                    });
                if v1a {
                    return Ok(Verified {
                        timestamp_s: Some(ts),
                    });
                }
                if self.keys.is_empty() {
                    return Err(refused("no v1a signature matches"));
                }
                let candidates: Vec<Vec<u8>> = entries
                    .split(' ')
                    .filter_map(|e| e.strip_prefix("v1,"))
                    .filter_map(|b| STANDARD.decode(b).ok())
                    .collect();
                let content = [id.as_bytes(), b".", ts_text.as_bytes(), b".", body];
                self.any_matches(Algorithm::Sha256, &content, &candidates)?;
                Ok(Verified {
                    timestamp_s: Some(ts),
                })
            }
            Scheme::Stripe => {
                let value = header("stripe-signature")?;
                let mut t = None;
                let mut candidates = Vec::new();
                if value.split(',').count() > MAX_SIGNATURES + 1 {
                    return Err(too_many());
                }
                for part in value.split(',') {
                    match part.trim().split_once('=') {
                        Some(("t", v)) => t = Some(v),
                        Some(("v1", v)) => candidates.extend(hex_decode(v)),
                        _ => {}
                    }
                }
                let t_text = t.ok_or(refused("no t= in Stripe-Signature"))?;
                let ts = self.timestamp(t_text, now_s)?;
                let content = [t_text.as_bytes(), b".", body];
                self.any_matches(Algorithm::Sha256, &content, &candidates)?;
                Ok(Verified {
                    timestamp_s: Some(ts),
                })
            }
            Scheme::Github => {
                let sig = header("x-hub-signature-256")?
                    .strip_prefix("sha256=")
                    .ok_or(refused("no sha256= prefix"))?;
                let candidates: Vec<Vec<u8>> = hex_decode(sig).into_iter().collect();
                self.any_matches(Algorithm::Sha256, &[body], &candidates)?;
                Ok(Verified { timestamp_s: None })
            }
            Scheme::Shopify => {
                let candidates: Vec<Vec<u8>> = STANDARD
                    .decode(header("x-shopify-hmac-sha256")?)
                    .ok()
                    .into_iter()
                    .collect();
                self.any_matches(Algorithm::Sha256, &[body], &candidates)?;
                Ok(Verified { timestamp_s: None })
            }
            Scheme::Hmac(h) => {
                let raw = header(&h.header)?;
                let raw = raw.strip_prefix(h.prefix.as_str()).unwrap_or(raw);
                let decoded = match h.encoding {
                    Encoding::Hex => hex_decode(raw),
                    Encoding::Base64 => STANDARD.decode(raw).ok(),
                };
                let candidates: Vec<Vec<u8>> = decoded.into_iter().collect();
                match &h.timestamp_header {
                    None => {
                        self.any_matches(h.algorithm, &[body], &candidates)?;
                        Ok(Verified { timestamp_s: None })
                    }
                    Some(name) => {
                        let t_text = header(name)?;
                        let ts = self.timestamp(t_text, now_s)?;
                        let content = [t_text.as_bytes(), h.separator.as_bytes(), body];
                        self.any_matches(h.algorithm, &content, &candidates)?;
                        Ok(Verified {
                            timestamp_s: Some(ts),
                        })
                    }
                }
            }
        }
    }

    fn timestamp(&self, text: &str, now_s: u64) -> Result<u64, Refused> {
        let ts: u64 = text.parse().map_err(|_| refused("a bad timestamp"))?;
        if ts.abs_diff(now_s) > self.tolerance_s {
            return Err(refused("timestamp outside the tolerance"));
        }
        Ok(ts)
    }

    /// Whether any candidate is the MAC of `content` under any key: each key's MAC is
    /// computed once (one pass over the body per secret, whatever the candidates), then
    /// compared with every candidate in constant time.
    fn any_matches(
        &self,
        algorithm: Algorithm,
        content: &[&[u8]],
        candidates: &[Vec<u8>],
    ) -> Result<(), Refused> {
        if candidates.is_empty() {
            return Err(refused("no signature in the header"));
        }
        let mut ok = false;
        for key in &self.keys {
            let tag = match algorithm {
                Algorithm::Sha256 => mac_of::<Hmac<sha2::Sha256>>(key, content),
                Algorithm::Sha1 => mac_of::<Hmac<sha1::Sha1>>(key, content),
            };
            for candidate in candidates {
                ok |= bool::from(subtle::ConstantTimeEq::ct_eq(
                    tag.as_slice(),
                    candidate.as_slice(),
                ));
            }
        }
        if ok {
            Ok(())
        } else {
            Err(refused("no signature matches"))
        }
    }
}

/// The MAC of `content` under `key` (empty if the key does not fit, which matches nothing).
fn mac_of<M: Mac + KeyInit>(key: &[u8], content: &[&[u8]]) -> Vec<u8> {
    let Ok(mut mac) = <M as KeyInit>::new_from_slice(key) else {
        return Vec::new();
    };
    for part in content {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len() / 2)
        .map(|i| u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    fn hmac_hex(key: &[u8], parts: &[&[u8]]) -> String {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
        for p in parts {
            mac.update(p);
        }
        hookd_core::names::hex(&mac.finalize().into_bytes())
    }

    const NOW: u64 = 1_614_265_330;

    /// The Standard Webhooks specification's published example verifies; tampering,
    /// an old timestamp, a missing header and a wrong secret are refused with one text.
    #[test]
    fn standard_webhooks_example_and_refusals() {
        let v = Verifier::new(
            Scheme::StandardWebhooks,
            &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
            300,
        )
        .unwrap();
        let body = br#"{"test": 2432232314}"#;
        let good = headers(&[
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("webhook-timestamp", "1614265330"),
            (
                "webhook-signature",
                "v1,bm9wZQ== v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            ),
        ]);
        assert_eq!(
            v.verify(&good, body, NOW).unwrap().timestamp_s,
            Some(1_614_265_330)
        );
        let texts: Vec<String> = [
            v.verify(&good, br#"{"test": 2432232315}"#, NOW),
            v.verify(&good, body, NOW + 301),
            v.verify(&headers(&[("webhook-id", "x")]), body, NOW),
        ]
        .into_iter()
        .map(|r| r.unwrap_err().to_string())
        .collect();
        assert!(texts.windows(2).all(|w| w[0] == w[1]), "{texts:?}");
        let other = Verifier::new(
            Scheme::StandardWebhooks,
            &[format!("whsec_{}", STANDARD.encode([1u8; 32]))],
            300,
        )
        .unwrap();
        assert!(other.verify(&good, body, NOW).is_err());
    }

    /// GitHub's documented example (secret "It's a Secret to Everybody", body "Hello,
    /// World!"), and rotation: the second of two secrets matches.
    #[test]
    fn github_documented_vector_and_rotation() {
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let v = Verifier::new(
            Scheme::Github,
            &[
                "an-old-github-secret".into(),
                "It's a Secret to Everybody".into(),
            ],
            300,
        )
        .unwrap();
        let h = headers(&[("x-hub-signature-256", sig)]);
        assert!(v.verify(&h, b"Hello, World!", NOW).is_ok());
        assert!(v.verify(&h, b"Hello, World?", NOW).is_err());
        let only_old =
            Verifier::new(Scheme::Github, &["an-old-github-secret".into()], 300).unwrap();
        assert!(only_old.verify(&h, b"Hello, World!", NOW).is_err());
    }

    #[test]
    fn stripe_shopify_and_generic_hmac() {
        let secret = "whsec_test_secret";
        let body = br#"{"id":"evt_1","type":"charge.succeeded"}"#;
        let t = NOW.to_string();
        let v1 = hmac_hex(secret.as_bytes(), &[t.as_bytes(), b".", body]);
        let stripe = Verifier::new(Scheme::Stripe, &[secret.into()], 300).unwrap();
        let h = headers(&[("stripe-signature", &format!("t={t},v1=00ff,v1={v1},v0=abc"))]);
        assert_eq!(stripe.verify(&h, body, NOW).unwrap().timestamp_s, Some(NOW));
        assert!(
            stripe.verify(&h, body, NOW + 1_000).is_err(),
            "replayed late"
        );
        assert!(
            stripe
                .verify(
                    &headers(&[("stripe-signature", &format!("v1={v1}"))]),
                    body,
                    NOW
                )
                .is_err()
        );

        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"shpss_key_0123456789").unwrap();
        mac.update(body);
        let b64 = STANDARD.encode(mac.finalize().into_bytes());
        let shopify =
            Verifier::new(Scheme::Shopify, &["shpss_key_0123456789".into()], 300).unwrap();
        assert!(
            shopify
                .verify(&headers(&[("x-shopify-hmac-sha256", &b64)]), body, NOW)
                .is_ok()
        );

        let generic = |algorithm, encoding, timestamp: bool| {
            Verifier::new(
                Scheme::Hmac(HmacScheme {
                    header: "x-signature".into(),
                    algorithm,
                    encoding,
                    prefix: "sig=".into(),
                    timestamp_header: timestamp.then(|| "x-timestamp".into()),
                    separator: ":".into(),
                }),
                &["a-generic-hmac-key".into()],
                60,
            )
            .unwrap()
        };
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(b"a-generic-hmac-key").unwrap();
        mac.update(t.as_bytes());
        mac.update(b":");
        mac.update(body);
        let sha1_b64 = STANDARD.encode(mac.finalize().into_bytes());
        let h = headers(&[
            ("x-signature", &format!("sig={sha1_b64}")),
            ("x-timestamp", &t),
        ]);
        assert!(
            generic(Algorithm::Sha1, Encoding::Base64, true)
                .verify(&h, body, NOW)
                .is_ok()
        );
        assert!(
            generic(Algorithm::Sha1, Encoding::Base64, true)
                .verify(&h, body, NOW + 61)
                .is_err()
        );
        assert!(
            generic(Algorithm::Sha256, Encoding::Base64, true)
                .verify(&h, body, NOW)
                .is_err()
        );
        let plain = hmac_hex(b"a-generic-hmac-key", &[body]);
        let h = headers(&[("x-signature", &format!("sig={plain}"))]);
        assert!(
            generic(Algorithm::Sha256, Encoding::Hex, false)
                .verify(&h, body, NOW)
                .is_ok()
        );
    }

    #[test]
    fn configuration_errors() {
        assert!(Verifier::new(Scheme::Github, &[], 300).is_err());
        assert!(Verifier::new(Scheme::StandardWebhooks, &["nope".into()], 300).is_err());
        let bad_header = Scheme::Hmac(HmacScheme {
            header: "bad header".into(),
            algorithm: Algorithm::Sha256,
            encoding: Encoding::Hex,
            prefix: String::new(),
            timestamp_header: None,
            separator: ".".into(),
        });
        assert!(Verifier::new(bad_header, &["k".into()], 300).is_err());
        let parsed: Scheme = toml::from_str(
            "scheme = \"hmac\"\nheader = \"x-sig\"\nalgorithm = \"sha1\"\nencoding = \"base64\"\n",
        )
        .unwrap();
        assert!(matches!(
            parsed,
            Scheme::Hmac(HmacScheme {
                algorithm: Algorithm::Sha1,
                ..
            })
        ));
    }
}
