//! Where a message goes: a registered endpoint, an ad-hoc URL or a pull queue.
//!
//! Each destination has a stable string key (`endpoint:NAME`, `url:ORIGIN`, `queue:NAME`)
//! used for statistics, dead-letter listing and idempotency scoping. Ad-hoc URLs are grouped
//! by origin (scheme, host, port): that is the unit a receiver's capacity is measured in.

use std::fmt;

use hookd_proto::v1::{self as pb, destination::Kind};

use crate::error::ApiError;

/// Longest endpoint or queue name.
pub const MAX_NAME_LEN: usize = 128;
/// Longest ad-hoc URL.
pub const MAX_URL_LEN: usize = 2_048;

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
            Self::Endpoint(name) => format!("endpoint:{name}"),
            Self::Url(url) => format!("url:{}", origin_of(url)),
            Self::Queue(name) => format!("queue:{name}"),
        }
    }

    /// Validates a destination given by a client. `field` names the message that holds it
    /// (e.g. `destination`) in errors; `prefix` is put before the oneof's field names (e.g.
    /// `destination.`, or nothing when the oneof is inline).
    pub fn from_kind(kind: Option<Kind>, field: &str, prefix: &str) -> Result<Self, ApiError> {
        match kind {
            None => Err(ApiError::InvalidArgument(format!(
                "{field}: one of endpoint, url or queue is required"
            ))),
            Some(Kind::Endpoint(name)) => {
                validate_name(&name, &format!("{prefix}endpoint"))?;
                Ok(Self::Endpoint(name))
            }
            Some(Kind::Queue(name)) => {
                validate_name(&name, &format!("{prefix}queue"))?;
                Ok(Self::Queue(name))
            }
            Some(Kind::Url(url)) => {
                validate_url(&url, &format!("{prefix}url"))?;
                Ok(Self::Url(url))
            }
        }
    }

    pub fn to_proto(&self) -> pb::Destination {
        let kind = match self {
            Self::Endpoint(n) => Kind::Endpoint(n.clone()),
            Self::Url(u) => Kind::Url(u.clone()),
            Self::Queue(n) => Kind::Queue(n.clone()),
        };
        pb::Destination { kind: Some(kind) }
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

/// Names of endpoints and queues: 1 to 128 of `A-Z a-z 0-9 . _ -`.
pub fn validate_name(name: &str, field: &str) -> Result<(), ApiError> {
    if name.is_empty() {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: must not be empty"
        )));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: {} bytes is longer than the limit of {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: character {c:?} is not allowed (use A-Z, a-z, 0-9, '.', '_', '-')"
        )));
    }
    Ok(())
}

/// An absolute http or https URL with a host.
pub fn validate_url(raw: &str, field: &str) -> Result<(), ApiError> {
    if raw.is_empty() {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: must not be empty"
        )));
    }
    if raw.len() > MAX_URL_LEN {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: {} bytes is longer than the limit of {MAX_URL_LEN}",
            raw.len()
        )));
    }
    let url = url::Url::parse(raw)
        .map_err(|e| ApiError::InvalidArgument(format!("{field}: malformed URL {raw:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: scheme {:?} is not supported (use http or https)",
            url.scheme()
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ApiError::InvalidArgument(format!(
            "{field}: URL {raw:?} has no host"
        )));
    }
    Ok(())
}

fn origin_of(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(url) => url.origin().ascii_serialization(),
        Err(_) => raw.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn rejects_bad_input_naming_the_field() {
        let err = |k| {
            Destination::from_kind(k, "destination", "destination.")
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        assert!(err(None).starts_with("destination:"));
        assert!(
            err(Some(Kind::Queue(String::new()))).contains("destination.queue: must not be empty")
        );
        assert!(err(Some(Kind::Queue("a b".into()))).contains("destination.queue"));
        assert!(
            err(Some(Kind::Url("not a url".into()))).contains("destination.url: malformed URL")
        );
        assert!(err(Some(Kind::Url("ftp://x/".into()))).contains("scheme"));
    }
}
