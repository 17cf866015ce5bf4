//! Where a message goes: a registered endpoint, an ad-hoc URL or a pull queue.
//!
//! Each destination has a stable string key (`endpoint:NAME`, `url:ORIGIN`, `queue:NAME`)
//! used for statistics, dead-letter listing and idempotency scoping. Ad-hoc URLs are grouped
//! by origin (scheme, host, port): that is the unit a receiver's capacity is measured in.
//! What a client may name is checked in `api::validate`; this module knows no wire type.

use std::fmt;

/// The prefixes of the three kinds of key.
const ENDPOINT: &str = "endpoint:";
const URL: &str = "url:";
const QUEUE: &str = "queue:";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Destination {
    Endpoint(String),
    Url(String),
    Queue(String),
}

impl Destination {
    /// The key that groups messages for stats, dead letters and idempotency.
    pub fn key(&self) -> String {
        match self {
            Self::Endpoint(name) => format!("{ENDPOINT}{name}"),
            Self::Url(url) => format!("{URL}{}", origin_of(url)),
            Self::Queue(name) => format!("{QUEUE}{name}"),
        }
    }

    /// As an operator reads it: the key's prefix with the endpoint's or queue's name, or
    /// the whole URL (a key holds only its origin).
    pub fn describe(&self) -> String {
        match self {
            Self::Url(url) => format!("{URL}{url}"),
            Self::Endpoint(_) | Self::Queue(_) => self.key(),
        }
    }

    /// The destination `key` names (`endpoint:NAME`, `queue:NAME`, `url:URL`): the inverse
    /// of [`Destination::key`], up to a URL key holding only its origin. `None` for text
    /// with none of the three prefixes.
    pub fn from_key(key: &str) -> Option<Self> {
        if let Some(name) = key.strip_prefix(ENDPOINT) {
            Some(Self::Endpoint(name.to_owned()))
        } else if let Some(name) = key.strip_prefix(QUEUE) {
            Some(Self::Queue(name.to_owned()))
        } else {
            key.strip_prefix(URL).map(|url| Self::Url(url.to_owned()))
        }
    }

    /// The endpoint's name, if `key` (from [`Destination::key`]) is an endpoint's.
    pub fn endpoint_of_key(key: &str) -> Option<&str> {
        key.strip_prefix(ENDPOINT)
    }

    /// Whether `key` is an ad-hoc URL origin's.
    pub fn is_url_key(key: &str) -> bool {
        key.starts_with(URL)
    }

    /// Encoding stored in redb: one tag byte and the name or URL.
    pub fn encode(&self) -> String {
        match self {
            Self::Endpoint(n) => format!("e{n}"),
            Self::Url(u) => format!("u{u}"),
            Self::Queue(n) => format!("q{n}"),
        }
    }

    pub fn decode(s: &str) -> Option<Self> {
        let mut chars = s.chars();
        let tag = chars.next()?;
        let rest = chars.as_str().to_owned();
        match tag {
            'e' => Some(Self::Endpoint(rest)),
            'u' => Some(Self::Url(rest)),
            'q' => Some(Self::Queue(rest)),
            _ => None,
        }
    }
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

    #[test]
    fn describe_keeps_the_whole_url_where_the_key_keeps_the_origin() {
        let url = Destination::Url("https://h.example:8443/hooks?x=1".into());
        assert_eq!(url.key(), "url:https://h.example:8443");
        assert_eq!(url.describe(), "url:https://h.example:8443/hooks?x=1");
        assert_eq!(Destination::Endpoint("e".into()).describe(), "endpoint:e");
        assert_eq!(Destination::Queue("q".into()).describe(), "queue:q");
    }

    #[test]
    fn keys_and_round_trip() {
        let d = Destination::Url("https://example.com:8443/a/b?c=1".into());
        assert_eq!(d.key(), "url:https://example.com:8443");
        for d in [
            d,
            Destination::Endpoint("billing".into()),
            Destination::Queue("jobs.v1".into()),
        ] {
            assert_eq!(Destination::decode(&d.encode()), Some(d));
        }
        let e = Destination::Endpoint("billing".into()).key();
        assert_eq!(Destination::endpoint_of_key(&e), Some("billing"));
        assert_eq!(Destination::endpoint_of_key("queue:billing"), None);
        assert!(Destination::is_url_key("url:https://example.com"));
        assert!(!Destination::is_url_key(&e));
        for d in [
            Destination::Url("https://example.com:8443".into()),
            Destination::Endpoint("billing".into()),
            Destination::Queue("jobs.v1".into()),
        ] {
            assert_eq!(Destination::from_key(&d.key()), Some(d));
        }
        assert_eq!(Destination::from_key("billing"), None);
    }
}
