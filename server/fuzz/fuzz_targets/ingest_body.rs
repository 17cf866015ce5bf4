//! Any bytes as an inbound webhook's body after its signature checked: the JSON parse,
//! a JSON Schema, and redaction with every detector and wildcard pointers (then the
//! re-serialisation hookd stores); and any text as a JSON pointer or a locator. Errors,
//! never panics.
#![no_main]

use std::sync::OnceLock;

use hookd::ingest::redact::{Redactor, parse_pointer};
use hookd::ingest::source::Locator;
use hookd_core::source::{Detector, RedactSpec};
use libfuzzer_sys::fuzz_target;

fn redactor() -> &'static Redactor {
    static R: OnceLock<Redactor> = OnceLock::new();
    R.get_or_init(|| {
        let spec = RedactSpec {
            remove: vec!["/a/*/b".into(), "/list/0".into(), "/*/secret".into()],
            mask: vec!["/*/*".into(), "/x~1y".into()],
            detectors: Detector::ALL.to_vec(),
        };
        match Redactor::new(&spec) {
            Ok(Some(r)) => r,
            _ => panic!("the fuzz target's own rules are valid"),
        }
    })
}

fn schema() -> &'static jsonschema::Validator {
    static S: OnceLock<jsonschema::Validator> = OnceLock::new();
    S.get_or_init(|| {
        let schema = serde_json::json!({
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"type": "string", "maxLength": 64},
                           "data": {"type": "object", "additionalProperties": {"type": ["string", "number", "array"]}}}
        });
        match jsonschema::draft202012::new(&schema) {
            Ok(v) => v,
            Err(e) => panic!("the fuzz target's schema is valid: {e}"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(data) {
        if let Err(e) = schema().validate(&value) {
            let _ = (
                e.instance_path().to_string(),
                e.schema_path().to_string(),
                e.to_string(),
            );
        }
        let applied = redactor().apply(&mut value);
        let _ = (applied, serde_json::to_vec(&value));
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = parse_pointer(text);
        let _ = Locator::parse(text, "fuzz");
    }
});
