//! hookd's values in their wire form: what the client commands send, and what the API
//! answers with (`hookd::api` uses these too, so each mapping is written once).

use hookd_core::destination::{Destination, To};
use hookd_core::source::{Algorithm, Encoding, SourceSpec};
use hookd_proto::v1::{self as pb, destination::Kind};

/// As its tenant reads it: the wire names no tenant (the caller's is the call's).
pub fn destination(d: &Destination) -> pb::Destination {
    let kind = match &d.to {
        To::Endpoint(n) => Kind::Endpoint(n.clone()),
        To::Url(u) => Kind::Url(u.clone()),
        To::Queue(n) => Kind::Queue(n.clone()),
    };
    pb::Destination { kind: Some(kind) }
}

/// A spec on the wire (what `hookd sources put` sends), secrets included.
pub fn source(s: &SourceSpec) -> pb::Source {
    pb::Source {
        name: s.name.clone(),
        scheme: s.scheme.as_str().into(),
        hmac: s.hmac.as_ref().map(|h| pb::HmacSettings {
            header: h.header.clone(),
            algorithm: match h.algorithm {
                Algorithm::Sha256 => "sha256",
                Algorithm::Sha1 => "sha1",
            }
            .into(),
            encoding: match h.encoding {
                Encoding::Hex => "hex",
                Encoding::Base64 => "base64",
            }
            .into(),
            prefix: h.prefix.clone(),
            timestamp_header: h.timestamp_header.clone().unwrap_or_default(),
            separator: h.separator.clone(),
        }),
        secrets: s.secrets.clone(),
        tolerance_secs: s.tolerance_secs,
        max_body_bytes: s.max_body_bytes as u64,
        content_types: s.content_types.clone(),
        json_schema: s.json_schema.clone().unwrap_or_default(),
        event_type: s.event_type.clone().unwrap_or_default(),
        dedup_id: s.dedup_id.clone().unwrap_or_default(),
        route: match (&s.queue, &s.endpoint, &s.topic) {
            (Some(q), _, _) => Some(pb::source::Route::Queue(q.clone())),
            (None, Some(e), _) => Some(pb::source::Route::Endpoint(e.clone())),
            (None, None, Some(t)) => Some(pb::source::Route::Topic(t.clone())),
            (None, None, None) => None,
        },
        bearer_sha256: s.bearer_sha256.clone(),
        basic: s.basic.clone(),
        redact: (!s.redact.is_empty()).then(|| pb::Redaction {
            remove: s.redact.remove.clone(),
            mask: s.redact.mask.clone(),
            detectors: s
                .redact
                .detectors
                .iter()
                .map(|d| d.name().to_owned())
                .collect(),
        }),
        secret_summaries: Vec::new(),
        from_config: false,
        path: format!("/in/{}", s.name),
        search_keys: s.search_keys.clone(),
    }
}
