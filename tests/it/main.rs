//! End-to-end tests: a real hookd on `127.0.0.1:0` with a temp data dir, driven through the
//! Rust client. Time-dependent behaviour (backoff, leases, long polls) runs on an injected
//! clock that the tests move forward; only the crash test uses real time.
//!
//! One test binary (this file and its modules) so the workspace links once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backpressure;
mod bad_input;
mod catch_up;
mod certs;
mod cli;
mod connections;
mod console;
mod crash;
mod ctl;
mod deadletters;
mod disk_full;
mod egress;
mod emitter;
mod event_types;
mod examples;
mod fifo;
mod findings;
mod flaky;
mod format;
mod hardening;
mod harness;
mod hostile;
mod idempotency;
mod ingest;
mod install;
mod jwks;
mod mcp;
mod metrics;
mod node;
mod otel;
mod portal;
mod purge;
mod push;
mod python;
mod queue;
mod quickstart;
mod quotas;
mod readme;
mod replay_jobs;
mod rest;
mod restart;
mod retention;
mod retry;
mod search;
mod secrets;
mod security;
mod service;
mod shares;
mod sink;
mod storage_failure;
mod stored_damage;
mod subscriptions;
mod tenant_isolation;
mod tenants;
