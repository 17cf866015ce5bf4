//! Any bytes as each request hookd validates: decode as protobuf (as tonic would), then
//! validate. Validation must answer Ok or an error, never panic.
#![no_main]

use hookd::api::validate;
use hookd_proto::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let limits = validate::Limits {
        max_payload_bytes: 1 << 20,
        max_batch_events: 1_000,
        max_idempotency_key_bytes: 256,
        replay_rate_per_s: 100.0,
    };
    if let Ok(r) = pb::EnqueueRequest::decode(data) {
        let _ = validate::new_message(r, &limits, 1_700_000_000_000);
    }
    if let Ok(r) = pb::PutEndpointRequest::decode(data) {
        let _ = validate::endpoint(r.endpoint);
    }
    if let Ok(r) = pb::ListDeadLettersRequest::decode(data) {
        let _ = validate::dead_letter_page(r);
    }
    if let Ok(r) = pb::ReplayDeadLettersRequest::decode(data) {
        let _ = validate::replay(r);
    }
    if let Ok(r) = pb::AckRequest::decode(data) {
        let _ = validate::ack(r);
    }
});
