//! Receiving webhooks (issue #13, in progress): so far the provider signature schemes,
//! pure and tested on their own ([`verify`]); the ingest listener, sources and dedup come
//! next.

pub mod verify;
