//! Signing secrets, signature headers, Retry-After values, bearer tokens and sealed
//! secrets, from any text.
#![no_main]

use hookd::delivery::attempt::parse_retry_after;
use hookd::delivery::signing::{Secret, signature_header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        let _ = hookd::auth::strip_bearer(data);
        return;
    };
    let _ = parse_retry_after(text);
    let _ = hookd::auth::strip_bearer(data);
    let _ = hookd::auth::parse_sha256(text);
    let _ = hookd::secrets::open(None, "endpoint", text);
    if let Ok(secret) = Secret::parse(text) {
        let _ = signature_header(&[secret], "msg_1", 1_700_000_000, data);
    }
});
