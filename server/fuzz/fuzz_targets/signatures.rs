//! Signing secrets, signature headers, Retry-After values, bearer tokens, sealed secrets
//! and inbound signature verification, from any text.
#![no_main]

use hookd_core::signing::{Secret, signature_header};
use hookd_delivery::attempt::parse_retry_after;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        let _ = hookd::auth::strip_bearer(data);
        return;
    };
    let _ = parse_retry_after(text);
    let _ = hookd::auth::strip_bearer(data);
    let _ = hookd_core::names::parse_sha256(text);
    let _ = hookd_core::secrets::open(None, "endpoint", text);
    if let Ok(secret) = Secret::parse(text) {
        let _ = signature_header(&[secret], "msg_1", 1_700_000_000, data);
    }
    // Inbound verification (issue #13): the text as every scheme's signature header.
    use hookd::ingest::verify::{Scheme, Verifier};
    if let Ok(value) = http::HeaderValue::from_str(text) {
        let mut headers = http::HeaderMap::new();
        for name in [
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
            "stripe-signature",
            "x-hub-signature-256",
            "x-shopify-hmac-sha256",
        ] {
            headers.insert(name, value.clone());
        }
        for scheme in [
            Scheme::StandardWebhooks,
            Scheme::Stripe,
            Scheme::Github,
            Scheme::Shopify,
        ] {
            let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned();
            if let Ok(v) = Verifier::new(scheme, &[secret], 300) {
                let _ = v.verify(&headers, data, 1_700_000_000);
            }
        }
    }
});
