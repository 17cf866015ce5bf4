//! Portal links (issue #52; the pages are `crate::portal`'s): EdDSA JWTs (jsonwebtoken, `kid` in the header) signed with a key hookd
//! makes, keeps in its catalog (kind `PortalKey`, the seed sealed under `[secrets]` keys
//! when there are some) and replaces every `[portal] key_rotation_secs`. A key signs only
//! while it is the newest; it verifies until the last link it signed has expired (at most
//! [`MAX_LINK_SECS`] later), then it is deleted. Its public half is in
//! `/portal/jwks.json`, so a SaaS can check a link it was handed.
//!
//! A link names its tenant twice, by number and by name: a tenant deleted and made again
//! under the same name is another tenant, and its predecessor's links do not open it.
//! Expiry is checked here against hookd's clock (the crate's own check reads the system
//! clock), with no leeway. Revocations are catalog objects too (kind `PortalRevocation`,
//! in the links' tenant): one link by its id until it would have expired, or every link
//! issued before a time (`*`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use hookd_core::clock::Clock;
use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_engine::{EngineHandle, Refusal};
use hookd_storage::store::{PortalKeyRecord, PortalRevocationRecord};

/// A link lives at most this long.
pub(crate) const MAX_LINK_SECS: u64 = 24 * 3600;
const AUDIENCE: &str = "hookd-portal";
const ISSUER: &str = "hookd";
/// The name of the revocation of every link issued before a time.
const ALL: &str = "*";
/// A link id: 16 random bytes, base64url without padding.
const LINK_ID_CHARS: usize = 22;

/// What a link grants, as signed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claims {
    iss: String,
    aud: String,
    /// The tenant's name...
    sub: String,
    /// ...and its number.
    tid: u32,
    jti: String,
    /// Seconds, as JWT has them; `ims` is the same instant in milliseconds (a revocation
    /// of every link "until now" must not spare one made in the same second before it).
    iat: u64,
    ims: u64,
    exp: u64,
    scp: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dst: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    rfr: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    usr: String,
}

/// A link as the portal acts on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Link {
    pub id: String,
    pub tenant: TenantId,
    pub tenant_name: String,
    pub scopes: Vec<String>,
    pub destinations: Vec<String>,
    pub subject: String,
    pub expires_ms: u64,
    pub refresh_url: String,
}

/// What CreatePortalLink asks for, checked by the API.
#[derive(Debug, Clone, Default)]
pub(crate) struct LinkRequest {
    pub tenant: TenantId,
    pub tenant_name: String,
    pub scopes: Vec<String>,
    pub expires_in_secs: u64,
    pub destinations: Vec<String>,
    pub refresh_url: String,
    pub subject: String,
}

/// Why a link does not open the portal. The texts are shown to whoever holds the link.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    #[error("this portal link is not valid (damaged, altered, or not made by this hookd)")]
    Invalid,
    #[error("this portal link has expired")]
    Expired { refresh_url: String },
    #[error("this portal link has been revoked")]
    Revoked,
    #[error("this portal link's tenant no longer exists")]
    NoTenant,
}

struct Key {
    kid: String,
    seed: [u8; 32],
    created_ms: u64,
    encoding: EncodingKey,
    decoding: DecodingKey,
    public: [u8; 32],
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("created_ms", &self.created_ms)
            .finish_non_exhaustive()
    }
}

/// The fixed PKCS#8 v1 prefix of an Ed25519 private key (RFC 8410): the DER document is
/// this and the 32-byte seed, what `EncodingKey::from_ed_der` reads.
const PKCS8_ED25519_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

impl Key {
    fn from_seed(seed: [u8; 32], created_ms: u64) -> Self {
        let public = ed25519_dalek::SigningKey::from_bytes(&seed)
            .verifying_key()
            .to_bytes();
        let mut der = PKCS8_ED25519_PREFIX.to_vec();
        der.extend_from_slice(&seed);
        Self {
            kid: URL_SAFE_NO_PAD.encode(&Sha256::digest(public)[..12]),
            seed,
            created_ms,
            encoding: EncodingKey::from_ed_der(&der),
            decoding: DecodingKey::from_ed_der(&public),
            public,
        }
    }
}

/// Revocations of one tenant's links.
#[derive(Debug, Default)]
struct Revoked {
    /// Links issued at or before this (ms) are refused.
    before_ms: u64,
    /// Link id -> when it would have expired (then the record goes).
    links: HashMap<String, u64>,
}

/// The keys and revocations; cheap to share.
#[derive(Debug)]
pub(crate) struct Links {
    engine: EngineHandle,
    sealer: Option<Arc<hookd_core::secrets::Sealer>>,
    clock: Arc<dyn Clock>,
    rotation_ms: u64,
    /// Newest first.
    ring: RwLock<Vec<Arc<Key>>>,
    /// One rotation at a time.
    rotating: tokio::sync::Mutex<()>,
    revoked: RwLock<HashMap<TenantId, Revoked>>,
}

fn sealed_name(kid: &str) -> String {
    format!("portal-key:{kid}")
}

impl Links {
    /// From the catalog's keys and revocations (as `Store::every_object_of` reads them).
    /// A key that cannot be read (damaged, or sealed under a key no longer configured) is
    /// left out with a warning: the links it signed are refused, and the next link gets
    /// a new key.
    pub(crate) fn load(
        engine: EngineHandle,
        sealer: Option<Arc<hookd_core::secrets::Sealer>>,
        clock: Arc<dyn Clock>,
        rotation_secs: u64,
        keys: Vec<(ObjectRef, Vec<u8>)>,
        revocations: Vec<(ObjectRef, Vec<u8>)>,
    ) -> Self {
        let mut ring = Vec::new();
        for (object, bytes) in keys {
            let seed = <PortalKeyRecord as prost::Message>::decode(bytes.as_slice())
                .map_err(|e| e.to_string())
                .and_then(|r| {
                    let clear = hookd_core::secrets::open(
                        sealer.as_deref(),
                        &sealed_name(&object.name),
                        &r.seed,
                    )
                    .map_err(|e| e.to_string())?;
                    let seed: [u8; 32] = STANDARD
                        .decode(clear)
                        .ok()
                        .and_then(|b| b.try_into().ok())
                        .ok_or("not a 32-byte seed")?;
                    Ok((seed, r.created_ms))
                });
            match seed {
                Ok((seed, created_ms)) => {
                    let key = Key::from_seed(seed, created_ms);
                    if key.kid == object.name {
                        ring.push(Arc::new(key));
                    } else {
                        tracing::warn!(kid = %object.name, "portal key does not match its id; left out");
                    }
                }
                Err(e) => {
                    tracing::warn!(kid = %object.name, error = %e, "portal key unreadable; left out")
                }
            }
        }
        ring.sort_by_key(|k| std::cmp::Reverse(k.created_ms));
        let mut revoked: HashMap<TenantId, Revoked> = HashMap::new();
        for (object, bytes) in revocations {
            let Ok(r) = <PortalRevocationRecord as prost::Message>::decode(bytes.as_slice()) else {
                continue;
            };
            let entry = revoked.entry(object.tenant).or_default();
            if object.name == ALL {
                entry.before_ms = entry.before_ms.max(r.before_ms);
            } else {
                entry.links.insert(object.name, r.expires_ms);
            }
        }
        Self {
            engine,
            sealer,
            clock,
            rotation_ms: rotation_secs.saturating_mul(1_000),
            ring: RwLock::new(ring),
            rotating: tokio::sync::Mutex::new(()),
            revoked: RwLock::new(revoked),
        }
    }

    fn newest(&self) -> Option<Arc<Key>> {
        self.ring
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .first()
            .cloned()
    }

    fn fresh(&self, key: &Key, now: u64) -> bool {
        now < key.created_ms.saturating_add(self.rotation_ms)
    }

    /// The key that signs now: the newest, or a new one made durable first (and keys no
    /// link can need any more deleted).
    async fn signing_key(&self) -> Result<Arc<Key>, Refusal> {
        if let Some(k) = self.newest().filter(|k| self.fresh(k, self.clock.now_ms())) {
            return Ok(k);
        }
        let _one = self.rotating.lock().await;
        let now = self.clock.now_ms();
        if let Some(k) = self.newest().filter(|k| self.fresh(k, now)) {
            return Ok(k);
        }
        let key = Arc::new(Key::from_seed(rand::random(), now));
        let clear = STANDARD.encode(key.seed);
        let seed = match &self.sealer {
            Some(s) => s.seal(&sealed_name(&key.kid), &clear),
            None => clear,
        };
        let record = PortalKeyRecord {
            seed,
            created_ms: now,
        };
        self.engine
            .put_object(
                ObjectRef::new(TenantId::DEFAULT, Kind::PortalKey, &key.kid),
                Some(prost::Message::encode_to_vec(&record)),
            )
            .await?;
        tracing::info!(kid = %key.kid, "portal signing key made");
        // A key stopped signing at created + rotation; its last link expires by then plus
        // MAX_LINK_SECS.
        let needed_since = now.saturating_sub(self.rotation_ms + MAX_LINK_SECS * 1_000);
        let stale: Vec<Arc<Key>> = {
            let ring = self.ring.read().unwrap_or_else(|p| p.into_inner());
            ring.iter()
                .filter(|k| k.created_ms < needed_since)
                .cloned()
                .collect()
        };
        for k in &stale {
            self.engine
                .delete_object(ObjectRef::new(TenantId::DEFAULT, Kind::PortalKey, &k.kid))
                .await?;
        }
        let mut ring = self.ring.write().unwrap_or_else(|p| p.into_inner());
        ring.retain(|k| k.created_ms >= needed_since);
        ring.insert(0, key.clone());
        Ok(key)
    }

    /// A signed link for `request`: its token and what it grants.
    pub(crate) async fn mint(&self, request: LinkRequest) -> Result<(String, Link), Refusal> {
        let key = self.signing_key().await?;
        let now = self.clock.now_ms();
        // Issued after any revocation of "every link until now" (a clock that has not
        // moved since must not make the new link one of those).
        let issued_ms = self
            .revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&request.tenant)
            .map_or(now, |r| now.max(r.before_ms.saturating_add(1)));
        let id = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        let expires_ms = now.saturating_add(request.expires_in_secs.saturating_mul(1_000));
        let claims = Claims {
            iss: ISSUER.into(),
            aud: AUDIENCE.into(),
            sub: request.tenant_name.clone(),
            tid: request.tenant.0,
            jti: id.clone(),
            iat: issued_ms / 1_000,
            ims: issued_ms,
            // Whole seconds, as JWT has them: never later than asked.
            exp: expires_ms / 1_000,
            scp: request.scopes.clone(),
            dst: request.destinations.clone(),
            rfr: request.refresh_url.clone(),
            usr: request.subject.clone(),
        };
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = Some(key.kid.clone());
        let token = jsonwebtoken::encode(&header, &claims, &key.encoding)
            .map_err(|e| Refusal::Unavailable(format!("portal link: cannot sign: {e}")))?;
        Ok((
            token,
            Link {
                id,
                tenant: request.tenant,
                tenant_name: request.tenant_name,
                scopes: request.scopes,
                destinations: request.destinations,
                subject: request.subject,
                expires_ms: claims.exp * 1_000,
                refresh_url: request.refresh_url,
            },
        ))
    }

    /// The link `token` holds, if it opens the portal now: signed by one of our keys,
    /// unaltered, unexpired, unrevoked, and its tenant (that very one) still there.
    pub(crate) fn open(
        &self,
        token: &str,
        directory: &hookd_engine::Directory,
    ) -> Result<Link, Refused> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| Refused::Invalid)?;
        let kid = header.kid.ok_or(Refused::Invalid)?;
        let key = self
            .ring
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|k| k.kid == kid)
            .cloned()
            .ok_or(Refused::Invalid)?;
        let mut validation = Validation::new(Algorithm::EdDSA);
        validation.set_audience(&[AUDIENCE]);
        validation.set_issuer(&[ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_exp = false;
        validation.leeway = 0;
        let claims = jsonwebtoken::decode::<Claims>(token, &key.decoding, &validation)
            .map_err(|_| Refused::Invalid)?
            .claims;
        let now = self.clock.now_ms();
        if now >= claims.exp.saturating_mul(1_000) {
            return Err(Refused::Expired {
                refresh_url: claims.rfr,
            });
        }
        let tenant = TenantId(claims.tid);
        if directory
            .get(tenant)
            .is_none_or(|t| t.record.name != claims.sub || t.record.deleted_ms != 0)
        {
            return Err(Refused::NoTenant);
        }
        if let Some(r) = self
            .revoked
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tenant)
            && (claims.ims <= r.before_ms || r.links.contains_key(&claims.jti))
        {
            return Err(Refused::Revoked);
        }
        Ok(Link {
            id: claims.jti,
            tenant,
            tenant_name: claims.sub,
            scopes: claims.scp,
            destinations: claims.dst,
            subject: claims.usr,
            expires_ms: claims.exp * 1_000,
            refresh_url: claims.rfr,
        })
    }

    /// Refuses link `id` (`None`: every link of the tenant issued until now) from the next
    /// request on; durable when it returns. Revocations of links that have expired since
    /// go.
    pub(crate) async fn revoke(&self, tenant: TenantId, id: Option<&str>) -> Result<(), Refusal> {
        let now = self.clock.now_ms();
        let (name, record) = match id {
            Some(id) => (
                id.to_owned(),
                PortalRevocationRecord {
                    // The link's own expiry is not known here; none outlives this.
                    expires_ms: now.saturating_add(MAX_LINK_SECS * 1_000),
                    before_ms: 0,
                },
            ),
            None => (
                ALL.to_owned(),
                PortalRevocationRecord {
                    expires_ms: 0,
                    before_ms: now,
                },
            ),
        };
        self.engine
            .put_object(
                ObjectRef::new(tenant, Kind::PortalRevocation, &name),
                Some(prost::Message::encode_to_vec(&record)),
            )
            .await?;
        let expired: Vec<String> = {
            let mut revoked = self.revoked.write().unwrap_or_else(|p| p.into_inner());
            let entry = revoked.entry(tenant).or_default();
            if name == ALL {
                entry.before_ms = entry.before_ms.max(record.before_ms);
            } else {
                entry.links.insert(name, record.expires_ms);
            }
            let gone: Vec<String> = entry
                .links
                .iter()
                .filter(|(_, until)| **until <= now)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &gone {
                entry.links.remove(id);
            }
            gone
        };
        for id in expired {
            self.engine
                .delete_object(ObjectRef::new(tenant, Kind::PortalRevocation, &id))
                .await?;
        }
        Ok(())
    }

    /// The public keys that verify links now, as a JSON Web Key Set (RFC 8037 OKP keys).
    pub(crate) fn jwks(&self) -> serde_json::Value {
        let ring = self.ring.read().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<serde_json::Value> = ring
            .iter()
            .map(|k| {
                serde_json::json!({
                    "kty": "OKP",
                    "crv": "Ed25519",
                    "x": URL_SAFE_NO_PAD.encode(k.public),
                    "kid": k.kid,
                    "use": "sig",
                    "alg": "EdDSA",
                })
            })
            .collect();
        serde_json::json!({ "keys": keys })
    }
}

/// Whether `id` has the shape of a link id (what RevokePortalLinks accepts).
pub(crate) fn is_link_id(id: &str) -> bool {
    id.len() == LINK_ID_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Origins one tenant may allow to frame its portal.
pub(crate) const MAX_FRAME_ANCESTORS: usize = 16;

/// `#rrggbb`.
pub(crate) fn is_colour(s: &str) -> bool {
    s.len() == 7 && s.starts_with('#') && s[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// A frame ancestor as configured or set on a tenant: an `http` or `https` origin, with
/// no path, query or credentials. Its normal form (what the CSP lists).
pub(crate) fn origin(s: &str) -> Result<String, String> {
    let u = url::Url::parse(s).map_err(|e| format!("{s:?} is not an origin: {e}"))?;
    if !matches!(u.scheme(), "http" | "https")
        || u.host_str().is_none()
        || u.path() != "/"
        || u.query().is_some()
        || u.fragment().is_some()
        || !u.username().is_empty()
        || u.password().is_some()
    {
        return Err(format!(
            "{s:?} is not an origin (scheme://host[:port], http or https, nothing after)"
        ));
    }
    Ok(u.origin().ascii_serialization())
}

/// `[portal] public_url`: an http or https URL with no query or fragment.
pub(crate) fn public_url(s: &str) -> Result<String, String> {
    let u = url::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(format!("{s:?}: an http or https URL is needed"));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(format!("{s:?}: no query or fragment"));
    }
    Ok(u.as_str().trim_end_matches('/').to_owned())
}

/// A URL the browser is sent to (a refresh URL) or loads (a logo): https, or http to a
/// loopback host (a SaaS trying it on one machine).
pub(crate) fn web_url(s: &str) -> Result<(), String> {
    let u = url::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    let loopback = match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match u.scheme() {
        "https" if u.host().is_some() => Ok(()),
        "http" if loopback => Ok(()),
        _ => Err(format!(
            "{s:?}: an https URL is needed (http only to a loopback host)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_urls_are_checked() {
        assert_eq!(
            origin("https://app.example.com").unwrap(),
            "https://app.example.com"
        );
        assert_eq!(
            origin("http://localhost:3000/").unwrap(),
            "http://localhost:3000"
        );
        for bad in [
            "app.example.com",
            "https://app.example.com/path",
            "https://a.example.com?x",
            "javascript:alert(1)",
            "https://u:p@a.example.com",
            "'self'",
            "https://a.example.com; script-src *",
        ] {
            assert!(origin(bad).is_err(), "{bad}");
        }
        assert!(web_url("https://saas.example.com/portal/refresh").is_ok());
        assert!(web_url("http://127.0.0.1:3000/refresh").is_ok());
        assert!(web_url("http://saas.example.com/refresh").is_err());
        assert!(web_url("javascript:alert(1)").is_err());
        assert!(is_colour("#0a7cff") && !is_colour("red") && !is_colour("#0a7cff;x"));
    }
}
