//! Ingest sources over gRPC: `pb::Source` to [`SourceSpec`] (naming the field in every
//! error) and a compiled [`Source`] back to what answers show (secrets summarised only).

use hookd_proto::v1 as pb;

use crate::error::ApiError;
use crate::ingest::{Source, SourceError};
use hookd_core::source::{
    Algorithm, DEFAULT_MAX_BODY_BYTES, DEFAULT_TOLERANCE_SECS, Detector, Encoding, HmacScheme,
    RedactSpec, SchemeName, SourceSpec,
};

fn invalid(message: String) -> ApiError {
    ApiError::InvalidArgument(message)
}

/// A PutSource's source, checked field by field (the rest is checked when it compiles).
pub fn spec(source: Option<pb::Source>) -> Result<SourceSpec, ApiError> {
    let s = source.ok_or_else(|| invalid("source: required".into()))?;
    let scheme = SchemeName::parse(&s.scheme).ok_or_else(|| {
        let names: Vec<&str> = SchemeName::ALL.iter().map(|n| n.as_str()).collect();
        invalid(format!(
            "source.scheme: {:?} is not one of {}",
            s.scheme,
            names.join(", ")
        ))
    })?;
    let hmac = match s.hmac {
        None => None,
        Some(h) => Some(HmacScheme {
            header: h.header,
            algorithm: match h.algorithm.as_str() {
                "" | "sha256" => Algorithm::Sha256,
                "sha1" => Algorithm::Sha1,
                other => {
                    return Err(invalid(format!(
                        "source.hmac.algorithm: {other:?} is not sha256 or sha1"
                    )));
                }
            },
            encoding: match h.encoding.as_str() {
                "" | "hex" => Encoding::Hex,
                "base64" => Encoding::Base64,
                other => {
                    return Err(invalid(format!(
                        "source.hmac.encoding: {other:?} is not hex or base64"
                    )));
                }
            },
            prefix: h.prefix,
            timestamp_header: (!h.timestamp_header.is_empty()).then_some(h.timestamp_header),
            separator: if h.separator.is_empty() {
                ".".into()
            } else {
                h.separator
            },
        }),
    };
    let redact = match s.redact {
        None => RedactSpec::default(),
        Some(r) => RedactSpec {
            remove: r.remove,
            mask: r.mask,
            detectors: r
                .detectors
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    Detector::parse(d).ok_or_else(|| {
                        let names: Vec<&str> = Detector::ALL.iter().map(|d| d.name()).collect();
                        invalid(format!(
                            "source.redact.detectors[{i}]: {d:?} is not one of {}",
                            names.join(", ")
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
        },
    };
    let (queue, endpoint, topic) = match s.route {
        Some(pb::source::Route::Queue(q)) => (Some(q), None, None),
        Some(pb::source::Route::Endpoint(e)) => (None, Some(e), None),
        Some(pb::source::Route::Topic(t)) => (None, None, Some(t)),
        None => {
            return Err(invalid(
                "source.route: one of queue, endpoint or topic is required".into(),
            ));
        }
    };
    let nonempty = |v: String| (!v.is_empty()).then_some(v);
    Ok(SourceSpec {
        name: s.name,
        scheme,
        hmac,
        secrets: s.secrets,
        secret_env: Vec::new(),
        secret_files: Vec::new(),
        tolerance_secs: if s.tolerance_secs == 0 {
            DEFAULT_TOLERANCE_SECS
        } else {
            s.tolerance_secs
        },
        max_body_bytes: if s.max_body_bytes == 0 {
            DEFAULT_MAX_BODY_BYTES
        } else {
            usize::try_from(s.max_body_bytes).unwrap_or(usize::MAX)
        },
        content_types: if s.content_types.is_empty() {
            vec!["application/json".into()]
        } else {
            s.content_types
        },
        json_schema: nonempty(s.json_schema),
        json_schema_file: None,
        event_type: nonempty(s.event_type),
        dedup_id: nonempty(s.dedup_id),
        queue,
        endpoint,
        topic,
        bearer_sha256: s.bearer_sha256,
        basic: s.basic,
        redact,
        search_keys: s.search_keys,
    })
}

/// A source as answers show it.
pub fn shown(source: &Source) -> pb::Source {
    pb::Source {
        secrets: Vec::new(),
        secret_summaries: source
            .secret_summaries
            .iter()
            .map(|(prefix, fingerprint)| pb::SecretSummary {
                prefix: prefix.clone(),
                fingerprint: fingerprint.clone(),
                public_key: String::new(),
            })
            .collect(),
        from_config: source.from_config,
        path: source.path.clone(),
        ..hookd_ctl::wire::source(&source.spec)
    }
}

impl From<SourceError> for ApiError {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::Invalid(m) => ApiError::InvalidArgument(format!("source.{m}")),
            SourceError::FromConfig(_) => ApiError::FailedPrecondition(e.to_string()),
            SourceError::NotFound(_) => ApiError::NotFound(e.to_string()),
            SourceError::Refused(r) => ApiError::refused(r, "source"),
        }
    }
}
