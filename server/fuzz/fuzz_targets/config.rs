//! Any text as hookd's TOML config: parse, validate, and build what start-up builds from
//! it (authentication, the secret keys' config, the ingest sources). Errors, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(config) = hookd::Config::from_toml(text) {
        let _ = config.validate();
        let clock = std::sync::Arc::new(hookd_core::clock::SystemClock);
        let _ = hookd::auth::Authenticator::new(&config.auth, clock, &|_| None);
        let _ = hookd_core::secrets::Sealer::new(&config.secrets, &|_| None);
        // Each source compiled as start-up compiles it (secrets given inline only).
        let limits = hookd::ingest::source::Limits {
            max_payload_bytes: config.max_payload_bytes,
            dedup_retention_secs: config.idempotency_retention_secs,
        };
        for spec in config.sources {
            let (secrets, schema) = (spec.secrets.clone(), spec.json_schema.clone());
            let _ = hookd::ingest::Source::compile(spec, secrets, schema, true, limits);
        }
    }
});
