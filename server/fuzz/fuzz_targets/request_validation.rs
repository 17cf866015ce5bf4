//! Any bytes as each request hookd validates: decode as protobuf (as tonic would), then
//! validate. Validation must answer Ok or an error, never panic.
#![no_main]

use hookd::api::validate;
use hookd_proto::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use std::sync::{Arc, OnceLock};

/// Every call acts on one tenant here; which one does not change what is valid.
const T: hookd_core::scope::TenantId = hookd_core::scope::TenantId(3);

/// Tenant T's catalog with one type ("t") whose payloads must satisfy a schema, so an
/// input with that event type runs the schema check on whatever payload it carries.
fn catalog() -> Arc<hookd::catalog::EventTypes> {
    static C: OnceLock<Arc<hookd::catalog::EventTypes>> = OnceLock::new();
    C.get_or_init(|| {
        let schema = r#"{"type": "object", "required": ["a"], "properties": {"a": {"type": "integer", "maximum": 9}}}"#;
        let declared = hookd::catalog::EventType::compile("t", "", Some(schema.into()))
            .expect("the schema compiles");
        let catalog = hookd::catalog::EventTypes::default();
        catalog.set(T, declared);
        Arc::new(catalog)
    })
    .clone()
}

fuzz_target!(|data: &[u8]| {
    let limits = validate::Limits {
        max_payload_bytes: 1 << 20,
        max_batch_events: 1_000,
        max_idempotency_key_bytes: 256,
        replay_rate_per_s: 100.0,
        catalog: catalog(),
    };
    if let Ok(r) = pb::EnqueueRequest::decode(data) {
        // Every topic has two subscribers: a publish goes the whole way.
        let route = |_: hookd_core::scope::TenantId,
                     _: &str,
                     _: &[u8],
                     _: &std::collections::BTreeMap<String, String>,
                     _: hookd_core::filter::EventIdentity<'_>| {
            Ok(vec![
                hookd_core::destination::Destination::queue(T, "audit"),
                hookd_core::destination::Destination::endpoint(T, "crm"),
            ])
        };
        let _ = validate::new_message(T, r, &limits, 1_700_000_000_000, &route);
    }
    if let Ok(r) = pb::PutEndpointRequest::decode(data) {
        let _ = validate::endpoint(r.endpoint);
    }
    if let Ok(r) = pb::ListDeadLettersRequest::decode(data) {
        let _ = validate::dead_letter_page(T, r);
    }
    if let Ok(r) = pb::ReplayDeadLettersRequest::decode(data) {
        let _ = validate::replay(T, r);
    }
    if let Ok(r) = pb::AckRequest::decode(data) {
        let _ = validate::ack(r);
    }
});
