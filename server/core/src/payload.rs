//! Whether a payload is JSON: the one rule the JSON API (`data`), the console and the CLI
//! share. A message's content type is its `content-type` header, or none (push delivery
//! then sends `application/json`).

/// Whether a media type is JSON (`application/json`, `application/*+json`).
pub fn is_json_media(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim();
    let Some((kind, sub)) = media.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (sub.eq_ignore_ascii_case("json")
            || (sub.len() > 5
                && sub.is_char_boundary(sub.len() - 5)
                && sub[sub.len() - 5..].eq_ignore_ascii_case("+json")))
}

/// The payload as JSON when the message's headers say JSON (or say nothing) and it parses.
pub fn as_json<K: AsRef<str>, V: AsRef<str>>(
    payload: &[u8],
    headers: impl IntoIterator<Item = (K, V)>,
) -> Option<serde_json::Value> {
    let declared = headers
        .into_iter()
        .find(|(k, _)| k.as_ref().eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| is_json_media(v.as_ref()));
    if payload.is_empty() || declared == Some(false) {
        return None;
    }
    serde_json::from_slice(payload).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_media_types() {
        for t in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/cloudevents+json",
        ] {
            assert!(is_json_media(t), "{t}");
        }
        for t in [
            "text/plain",
            "application/jsonx",
            "application/+json",
            "json",
            "",
        ] {
            assert!(!is_json_media(t), "{t}");
        }
    }

    #[test]
    fn a_payload_is_json_when_its_headers_do_not_say_otherwise() {
        let none: [(&str, &str); 0] = [];
        assert_eq!(
            as_json(br#"{"a":1}"#, none),
            Some(serde_json::json!({"a": 1}))
        );
        assert_eq!(as_json(b"plain", none), None);
        assert_eq!(
            as_json(br#"{"a":1}"#, [("Content-Type", "text/plain")]),
            None
        );
        assert!(as_json(b"[1]", [("content-type", "application/x+json")]).is_some());
    }
}
