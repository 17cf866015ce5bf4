//! Where a message goes: a registered endpoint, an ad-hoc URL or a pull queue.
//!
//! Each destination has a stable string key (`endpoint:NAME`, `url:ORIGIN`, `queue:NAME`)
//! used for statistics, dead-letter listing and idempotency scoping. Ad-hoc URLs are grouped
//! by origin (scheme, host, port): that is the unit a receiver's capacity is measured in.
//! What a client may name is checked in `api::validate`; this module knows no wire type.

use std::fmt;

use crate::scope::TenantId;

/// The prefixes of the three kinds of key.
const ENDPOINT: &str = "endpoint:";
const URL: &str = "url:";
const QUEUE: &str = "queue:";

/// Where a message goes, in its tenant: everything keyed by a destination (dead letters,
/// idempotency, lanes, figures) is therefore the tenant's own.
///
/// Keys and encodings of tenant `default` are those hookd used before tenants (so a store
/// from then needs no conversion); another tenant's carry its number first, `5/`: no key
/// of `default`'s starts with a digit. [`Destination::local_key`] is the key without it,
/// as the tenant itself reads it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    pub tenant: TenantId,
    pub to: To,
}

/// The kind of destination, and its name or URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum To {
    Endpoint(String),
    Url(String),
    Queue(String),
}

impl Destination {
    pub fn endpoint(tenant: TenantId, name: impl Into<String>) -> Self {
        Self {
            tenant,
            to: To::Endpoint(name.into()),
        }
    }

    pub fn queue(tenant: TenantId, name: impl Into<String>) -> Self {
        Self {
            tenant,
            to: To::Queue(name.into()),
        }
    }

    pub fn url(tenant: TenantId, url: impl Into<String>) -> Self {
        Self {
            tenant,
            to: To::Url(url.into()),
        }
    }

    /// The endpoint's name, if this is an endpoint.
    pub fn endpoint_name(&self) -> Option<&str> {
        match &self.to {
            To::Endpoint(name) => Some(name),
            _ => None,
        }
    }

    /// The key that groups messages for stats, dead letters and idempotency, unique across
    /// tenants ([`Destination::local_key`] with the tenant's number first, but for
    /// `default`).
    pub fn key(&self) -> String {
        let (prefix, name) = self.local_parts();
        tenanted(self.tenant, &[prefix, &name])
    }

    /// The local key's prefix and name (a URL's: its origin).
    fn local_parts(&self) -> (&'static str, std::borrow::Cow<'_, str>) {
        match &self.to {
            To::Endpoint(name) => (ENDPOINT, name.as_str().into()),
            To::Url(url) => (URL, origin_of(url).into()),
            To::Queue(name) => (QUEUE, name.as_str().into()),
        }
    }

    /// The key as the tenant reads it: `endpoint:NAME`, `url:ORIGIN`, `queue:NAME`.
    pub fn local_key(&self) -> String {
        let (prefix, name) = self.local_parts();
        tenanted(TenantId::DEFAULT, &[prefix, &name])
    }

    /// As an operator reads it: the key's prefix with the endpoint's or queue's name, or
    /// the whole URL (a key holds only its origin); without the tenant.
    pub fn describe(&self) -> String {
        match &self.to {
            To::Url(url) => format!("{URL}{url}"),
            To::Endpoint(_) | To::Queue(_) => self.local_key(),
        }
    }

    /// The destination `key` names (`[N/]endpoint:NAME`, `queue:NAME`, `url:URL`): the
    /// inverse of [`Destination::key`], up to a URL key holding only its origin. `None`
    /// for text with none of the three prefixes.
    pub fn from_key(key: &str) -> Option<Self> {
        let (tenant, key) = split_tenant(key)?;
        Self::from_local_key(tenant, key)
    }

    /// The destination of tenant `tenant` a key without a tenant names.
    pub fn from_local_key(tenant: TenantId, key: &str) -> Option<Self> {
        let to = if let Some(name) = key.strip_prefix(ENDPOINT) {
            To::Endpoint(name.to_owned())
        } else if let Some(name) = key.strip_prefix(QUEUE) {
            To::Queue(name.to_owned())
        } else {
            To::Url(key.strip_prefix(URL)?.to_owned())
        };
        Some(Self { tenant, to })
    }

    /// The tenant and the endpoint's name, if `key` (from [`Destination::key`]) is an
    /// endpoint's.
    pub fn endpoint_of_key(key: &str) -> Option<(TenantId, &str)> {
        let (tenant, key) = split_tenant(key)?;
        Some((tenant, key.strip_prefix(ENDPOINT)?))
    }

    /// The tenant a key (from [`Destination::key`] or [`Destination::encode`]) belongs to.
    pub fn tenant_of_key(key: &str) -> Option<TenantId> {
        split_tenant(key).map(|(tenant, _)| tenant)
    }

    /// A key (or an encoding) without its tenant: what the tenant itself reads.
    pub fn local_part(key: &str) -> &str {
        split_tenant(key).map_or(key, |(_, local)| local)
    }

    /// Whether `key` is an ad-hoc URL origin's.
    pub fn is_url_key(key: &str) -> bool {
        split_tenant(key).is_some_and(|(_, key)| key.starts_with(URL))
    }

    /// Encoding stored in redb: the tenant (as in [`Destination::key`]), one tag byte and
    /// the name or URL.
    pub fn encode(&self) -> String {
        let (tag, name) = match &self.to {
            To::Endpoint(n) => ("e", n),
            To::Url(u) => ("u", u),
            To::Queue(n) => ("q", n),
        };
        tenanted(self.tenant, &[tag, name])
    }

    pub fn decode(s: &str) -> Option<Self> {
        let (tenant, s) = split_tenant(s)?;
        let mut chars = s.chars();
        let tag = chars.next()?;
        let rest = chars.as_str().to_owned();
        let to = match tag {
            'e' => To::Endpoint(rest),
            'u' => To::Url(rest),
            'q' => To::Queue(rest),
            _ => return None,
        };
        Some(Self { tenant, to })
    }
}

/// The idempotency scope of a tenant's publishes to `topic` (a destination's is its
/// encoding): `t` and the topic, with the tenant's number first but for `default`'s.
pub fn topic_scope(tenant: TenantId, topic: &str) -> String {
    tenanted(tenant, &["t", topic])
}

/// Where a tenant's keys (and encodings) lie in key order: the first possible one, and the
/// prefix all of them have. Another tenant's all start with its number and `/`; `default`'s
/// start with a letter, so they are every key from `:` (just after the digits) on.
pub fn tenant_keys(tenant: TenantId) -> (String, String) {
    if tenant.is_default() {
        (":".to_owned(), String::new())
    } else {
        let prefix = format!("{tenant}/");
        (prefix.clone(), prefix)
    }
}

/// `parts` (a key or an encoding, without its tenant) joined, with the tenant's number and
/// `/` first but for `default`'s. One allocation of the exact length and no formatting
/// machinery: every event's keys are made here.
fn tenanted(tenant: TenantId, parts: &[&str]) -> String {
    let mut digits = itoa::Buffer::new();
    let number = if tenant.is_default() {
        ""
    } else {
        digits.format(tenant.0)
    };
    let len = number.len()
        + usize::from(!number.is_empty())
        + parts.iter().map(|p| p.len()).sum::<usize>();
    let mut out = String::with_capacity(len);
    if !number.is_empty() {
        out.push_str(number);
        out.push('/');
    }
    for p in parts {
        out.push_str(p);
    }
    out
}

/// A key's (or an encoding's) tenant and the rest; `None` for a number that is not one.
fn split_tenant(key: &str) -> Option<(TenantId, &str)> {
    if !key.starts_with(|c: char| c.is_ascii_digit()) {
        return Some((TenantId::DEFAULT, key));
    }
    let (number, rest) = key.split_once('/')?;
    let tenant: u32 = number.parse().ok()?;
    // One way to write each number: no `0/` (that is `default`'s, unprefixed), no leading 0.
    (tenant != 0 && !number.starts_with('0')).then_some((TenantId(tenant), rest))
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

/// A URL's origin (`https://host:port`), no path, query or credentials.
pub fn origin_of(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(url) => url.origin().ascii_serialization(),
        Err(_) => raw.to_owned(),
    }
}

/// What the delivery's address guard says when it refuses a destination's address (SSRF),
/// and what the dead-letter analysis recognises in an attempt's error.
pub const REFUSED_ADDRESS: &str =
    "destination refused: not a public address, or not admitted by delivery.allow_destinations";

#[cfg(test)]
mod tests {
    use super::*;

    const T0: TenantId = TenantId::DEFAULT;

    #[test]
    fn describe_keeps_the_whole_url_where_the_key_keeps_the_origin() {
        let url = Destination::url(T0, "https://h.example:8443/hooks?x=1");
        assert_eq!(url.key(), "url:https://h.example:8443");
        assert_eq!(url.describe(), "url:https://h.example:8443/hooks?x=1");
        assert_eq!(Destination::endpoint(T0, "e").describe(), "endpoint:e");
        assert_eq!(Destination::queue(T0, "q").describe(), "queue:q");
    }

    #[test]
    fn keys_and_round_trip() {
        let d = Destination::url(T0, "https://example.com:8443/a/b?c=1");
        assert_eq!(d.key(), "url:https://example.com:8443");
        for tenant in [T0, TenantId(7), TenantId(u32::MAX)] {
            for d in [
                Destination::url(tenant, "https://example.com:8443/a/b?c=1"),
                Destination::endpoint(tenant, "billing"),
                Destination::queue(tenant, "jobs.v1"),
            ] {
                assert_eq!(Destination::decode(&d.encode()), Some(d.clone()));
                assert_eq!(Destination::tenant_of_key(&d.key()), Some(tenant));
                assert_eq!(Destination::tenant_of_key(&d.encode()), Some(tenant));
            }
            for d in [
                Destination::url(tenant, "https://example.com:8443"),
                Destination::endpoint(tenant, "billing"),
                Destination::queue(tenant, "jobs.v1"),
            ] {
                assert_eq!(Destination::from_key(&d.key()), Some(d.clone()));
                assert_eq!(Destination::from_local_key(tenant, &d.local_key()), Some(d));
            }
            let e = Destination::endpoint(tenant, "billing").key();
            assert_eq!(Destination::endpoint_of_key(&e), Some((tenant, "billing")));
            assert!(!Destination::is_url_key(&e));
            assert!(Destination::is_url_key(
                &Destination::url(tenant, "https://example.com").key()
            ));
        }
        assert_eq!(Destination::endpoint_of_key("queue:billing"), None);
        assert_eq!(Destination::from_key("billing"), None);
    }

    /// Tenant `default`'s keys and encodings are those of a store from before tenants;
    /// another tenant's never equal one of `default`'s, nor another tenant's.
    #[test]
    fn keys_of_different_tenants_never_meet() {
        assert_eq!(Destination::endpoint(T0, "a").encode(), "ea");
        assert_eq!(Destination::endpoint(T0, "a").key(), "endpoint:a");
        assert_eq!(
            Destination::endpoint(TenantId(12), "a").key(),
            "12/endpoint:a"
        );
        assert_eq!(Destination::queue(TenantId(12), "a").encode(), "12/qa");
        assert_eq!(
            Destination::queue(TenantId(u32::MAX), "a").key(),
            "4294967295/queue:a"
        );
        assert_eq!(topic_scope(T0, "a.b"), "ta.b");
        assert_eq!(topic_scope(TenantId(12), "a.b"), "12/ta.b");
        assert_eq!(
            Destination::endpoint(TenantId(12), "a").local_key(),
            "endpoint:a"
        );
        // Not a tenant's number: a zero, a leading zero, no slash, too large.
        for text in ["0/ea", "012/ea", "12ea", "99999999999/ea"] {
            assert_eq!(Destination::decode(text), None, "{text}");
        }
        let keys: std::collections::HashSet<String> = [T0, TenantId(1), TenantId(11)]
            .into_iter()
            .flat_map(|t| {
                [
                    Destination::endpoint(t, "1"),
                    Destination::queue(t, "1"),
                    Destination::endpoint(t, "1/e1"),
                ]
            })
            .flat_map(|d| [d.key(), d.encode()])
            .collect();
        assert_eq!(keys.len(), 18);
    }
}
