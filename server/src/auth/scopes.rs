//! What each gRPC method and HTTP path needs (its [`Access`](super::Access)).

use super::config::Reflection;
use super::{Access, Scope};

/// What a gRPC method needs. Unknown paths need a credential (they then get UNIMPLEMENTED).
pub(crate) fn grpc_access(path: &str, reflection: Reflection) -> Access {
    if path.starts_with(HEALTH_PREFIX) {
        return Access::Open;
    }
    if path.starts_with("/grpc.reflection.") {
        return match reflection {
            Reflection::Open => Access::Open,
            Reflection::Authenticated | Reflection::Off => Access::Authenticated,
        };
    }
    let Some(method) = path.strip_prefix("/hookd.v1.Hookd/") else {
        return Access::Authenticated;
    };
    // Any method not in the table (one added later, until it is listed) needs admin.
    Access::Scope(
        RPC_SCOPES
            .iter()
            .find(|(m, _)| *m == method)
            .map_or(Scope::Admin, |(_, scope)| *scope),
    )
}

/// What an admin HTTP path needs.
pub(crate) fn http_access(path: &str) -> Access {
    match path {
        "/healthz" => Access::Open,
        "/metrics" => Access::Scope(Scope::Read),
        // The console checks its own sessions (and the admin scope): see `console`.
        p if p == "/ui" || p.starts_with("/ui/") => Access::Open,
        // The JSON API's calls are checked as the gRPC calls they become (each RPC's
        // scope, `rest`); its document is public, like gRPC reflection's default.
        p if p.starts_with("/v1/") => Access::Open,
        // Public keys (JWKS) for receivers, who hold no hookd token.
        p if p.starts_with("/jwks/") => Access::Open,
        // A receiver's catch-up signs its request with the endpoint's secret (`catch_up`).
        p if p.starts_with("/catch-up/") => Access::Open,
        // The customer portal checks its own signed links (`portal`).
        p if p.starts_with("/portal/") => Access::Open,
        _ => Access::Authenticated,
    }
}

/// Every RPC and the scope it needs: what [`grpc_access`] answers from (a test checks
/// that every `rpc` of the .proto is here).
pub(crate) const RPC_SCOPES: &[(&str, Scope)] = &[
    ("Enqueue", Scope::Enqueue),
    ("EnqueueBatch", Scope::Enqueue),
    ("Receive", Scope::Consume),
    ("Ack", Scope::Consume),
    ("Nack", Scope::Consume),
    ("Stats", Scope::Read),
    ("GetMessage", Scope::Read),
    ("SearchMessages", Scope::Read),
    ("GetEndpoint", Scope::Read),
    ("ListEndpoints", Scope::Read),
    ("ListDeadLetters", Scope::Read),
    ("AnalyzeDeadLetters", Scope::Read),
    ("Watch", Scope::Read),
    ("ListEventTypes", Scope::Read),
    ("GetEventType", Scope::Read),
    ("PutEventType", Scope::Admin),
    ("DeleteEventType", Scope::Admin),
    ("GetSubscription", Scope::Read),
    ("ListSubscriptions", Scope::Read),
    ("PutSubscription", Scope::Admin),
    ("DeleteSubscription", Scope::Admin),
    // And an operator's token (see `api::operator_only`).
    ("CreateTenant", Scope::Admin),
    ("GetTenant", Scope::Admin),
    ("ListTenants", Scope::Admin),
    ("UpdateTenant", Scope::Admin),
    ("DeleteTenant", Scope::Admin),
    ("CreateToken", Scope::Admin),
    ("ListTokens", Scope::Admin),
    ("RevokeToken", Scope::Admin),
    ("CreatePortalLink", Scope::Admin),
    ("RevokePortalLinks", Scope::Admin),
    ("PutEndpoint", Scope::Admin),
    ("DeleteEndpoint", Scope::Admin),
    ("GetQueue", Scope::Read),
    ("ListQueues", Scope::Read),
    ("PutQueue", Scope::Admin),
    ("DeleteQueue", Scope::Admin),
    ("ReplayDeadLetters", Scope::Admin),
    ("CreateReplayJob", Scope::Admin),
    ("UpdateReplayJob", Scope::Admin),
    ("GetReplayJob", Scope::Read),
    ("ListEndpointEvents", Scope::Read),
    ("ListReplayJobs", Scope::Read),
    ("PurgeDeadLetters", Scope::Admin),
    ("PurgeMessages", Scope::Admin),
    ("PauseEndpoint", Scope::Admin),
    ("ResumeEndpoint", Scope::Admin),
    ("PutSource", Scope::Admin),
    ("GetSource", Scope::Admin),
    ("ListSources", Scope::Admin),
    ("DeleteSource", Scope::Admin),
];

/// The path prefix of the gRPC health service's calls (their own budget).
pub(super) const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";
