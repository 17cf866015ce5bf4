//! The HTTP/JSON routes: one per RPC of `hookd.v1.Hookd`, in the style of `google.api.http`
//! (path parameters fill request fields; a GET's query parameters fill the rest; other
//! methods carry the request, or one field of it, as the JSON body). The OpenAPI document
//! is drawn from this table, so the two cannot disagree.

use http::Method;

/// Where a request's JSON body goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Body {
    /// No body (GET and DELETE): the fields come from the path and the query.
    None,
    /// The whole request message.
    Whole,
    /// One field of the request (its proto name), e.g. PutEndpoint's `endpoint`.
    Field(&'static str),
}

/// One route.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// The RPC of `hookd.v1.Hookd` it calls.
    pub rpc: &'static str,
    pub method: Method,
    /// Literal segments, and `{name}` for a path parameter (a whole segment).
    pub template: &'static str,
    /// Each path parameter and the request field (dotted proto names) it sets.
    pub params: &'static [(&'static str, &'static str)],
    pub body: Body,
    /// Answers with Server-Sent Events, one per message of the RPC's stream.
    pub streaming: bool,
    /// The OpenAPI tag (the resource).
    pub tag: &'static str,
    pub summary: &'static str,
}

const fn route(
    rpc: &'static str,
    method: Method,
    template: &'static str,
    params: &'static [(&'static str, &'static str)],
    body: Body,
    tag: &'static str,
    summary: &'static str,
) -> Route {
    Route {
        rpc,
        method,
        template,
        params,
        body,
        streaming: false,
        tag,
        summary,
    }
}

/// Every route; a test checks that every `rpc` of the .proto has exactly one.
pub(crate) const ROUTES: &[Route] = &[
    route(
        "Enqueue",
        Method::POST,
        "/v1/messages",
        &[],
        Body::Whole,
        "messages",
        "Store one event durably; answers its id",
    ),
    route(
        "EnqueueBatch",
        Method::POST,
        "/v1/messages/batch",
        &[],
        Body::Whole,
        "messages",
        "Store up to max_batch_events events in one commit; one result per event",
    ),
    route(
        "GetMessage",
        Method::GET,
        "/v1/messages/{id}",
        &[("id", "id")],
        Body::None,
        "messages",
        "A message's state, attempts and (while kept) payload",
    ),
    route(
        "SearchMessages",
        Method::POST,
        "/v1/messages/search",
        &[],
        Body::Whole,
        "messages",
        "Retained messages matching every condition given, newest first (paged)",
    ),
    route(
        "PurgeMessages",
        Method::POST,
        "/v1/messages/purge",
        &[],
        Body::Whole,
        "messages",
        "Delete a search's (or ids') messages for good, their payloads overwritten on disk (dryRun: the counts only)",
    ),
    route(
        "ListEndpointEvents",
        Method::GET,
        "/v1/endpoints/{endpoint}/events",
        &[("endpoint", "endpoint")],
        Body::None,
        "endpoints",
        "Catch-up: the endpoint's retained events after a cursor, oldest first, each signed as its delivery",
    ),
    route(
        "CreateReplayJob",
        Method::POST,
        "/v1/replay-jobs",
        &[],
        Body::Whole,
        "replay-jobs",
        "Resend a selection (ids, a search, or what an endpoint missed) as a durable, paced job (dryRun: the estimate only)",
    ),
    route(
        "ListReplayJobs",
        Method::GET,
        "/v1/replay-jobs",
        &[],
        Body::None,
        "replay-jobs",
        "The tenant's replay jobs, newest first",
    ),
    route(
        "GetReplayJob",
        Method::GET,
        "/v1/replay-jobs/{id}",
        &[("id", "id")],
        Body::None,
        "replay-jobs",
        "A replay job's progress: replayed, skipped, failed, remaining",
    ),
    route(
        "UpdateReplayJob",
        Method::POST,
        "/v1/replay-jobs/{id}",
        &[("id", "id")],
        Body::Whole,
        "replay-jobs",
        "Pause, resume or cancel a replay job",
    ),
    route(
        "Receive",
        Method::POST,
        "/v1/queues/{queue}/receive",
        &[("queue", "queue")],
        Body::Whole,
        "queues",
        "Lease ready messages of a pull queue (long poll with waitMs)",
    ),
    route(
        "Ack",
        Method::POST,
        "/v1/leases/ack",
        &[],
        Body::Whole,
        "queues",
        "Complete leased messages (all or nothing)",
    ),
    route(
        "Nack",
        Method::POST,
        "/v1/leases/{lease_id}/nack",
        &[("lease_id", "lease_id")],
        Body::Whole,
        "queues",
        "Give a leased message back for a retry (or its dead letter)",
    ),
    route(
        "Stats",
        Method::GET,
        "/v1/stats",
        &[],
        Body::None,
        "stats",
        "Totals, and counts and latencies per destination (paged)",
    ),
    route(
        "ListEndpoints",
        Method::GET,
        "/v1/endpoints",
        &[],
        Body::None,
        "endpoints",
        "Every registered endpoint",
    ),
    route(
        "PutEndpoint",
        Method::PUT,
        "/v1/endpoints/{name}",
        &[("name", "endpoint.name")],
        Body::Field("endpoint"),
        "endpoints",
        "Create or replace an endpoint (the body is the Endpoint)",
    ),
    route(
        "GetEndpoint",
        Method::GET,
        "/v1/endpoints/{name}",
        &[("name", "name")],
        Body::None,
        "endpoints",
        "One endpoint",
    ),
    route(
        "DeleteEndpoint",
        Method::DELETE,
        "/v1/endpoints/{name}",
        &[("name", "name")],
        Body::None,
        "endpoints",
        "Delete an endpoint that has no live messages",
    ),
    route(
        "ListQueues",
        Method::GET,
        "/v1/queues",
        &[],
        Body::None,
        "queues",
        "The tenant's queues with settings of their own",
    ),
    route(
        "PutQueue",
        Method::PUT,
        "/v1/queues/{queue}",
        &[("queue", "queue.name")],
        Body::Field("queue"),
        "queues",
        "Create or replace a queue's settings (the body is the Queue)",
    ),
    route(
        "GetQueue",
        Method::GET,
        "/v1/queues/{queue}",
        &[("queue", "name")],
        Body::None,
        "queues",
        "One queue's settings",
    ),
    route(
        "DeleteQueue",
        Method::DELETE,
        "/v1/queues/{queue}",
        &[("queue", "name")],
        Body::None,
        "queues",
        "Delete a queue's settings (its messages stay, unordered)",
    ),
    route(
        "PauseEndpoint",
        Method::POST,
        "/v1/endpoints/{name}/pause",
        &[("name", "name")],
        Body::Whole,
        "endpoints",
        "Stop push delivery to an endpoint until resumed",
    ),
    route(
        "ResumeEndpoint",
        Method::POST,
        "/v1/endpoints/{name}/resume",
        &[("name", "name")],
        Body::Whole,
        "endpoints",
        "Resume push delivery to a paused endpoint",
    ),
    route(
        "ListDeadLetters",
        Method::GET,
        "/v1/dead-letters",
        &[],
        Body::None,
        "dead-letters",
        "Dead letters, newest first (paged; destination.endpoint, .url or .queue filter)",
    ),
    route(
        "ReplayDeadLetters",
        Method::POST,
        "/v1/dead-letters/replay",
        &[],
        Body::Whole,
        "dead-letters",
        "Make dead letters ready again with a fresh attempt budget",
    ),
    route(
        "PurgeDeadLetters",
        Method::POST,
        "/v1/dead-letters/purge",
        &[],
        Body::Whole,
        "dead-letters",
        "Delete dead letters by filter (dryRun: count only)",
    ),
    route(
        "AnalyzeDeadLetters",
        Method::GET,
        "/v1/dead-letters/analysis",
        &[],
        Body::None,
        "dead-letters",
        "Failure patterns per destination over a window, each with a suggested action",
    ),
    Route {
        rpc: "Watch",
        method: Method::GET,
        template: "/v1/events",
        params: &[],
        body: Body::None,
        streaming: true,
        tag: "events",
        summary: "Live events as Server-Sent Events (one `data:` line of JSON per WatchEvent)",
    },
    route(
        "ListSources",
        Method::GET,
        "/v1/sources",
        &[],
        Body::None,
        "sources",
        "Every ingest source",
    ),
    route(
        "PutSource",
        Method::PUT,
        "/v1/sources/{name}",
        &[("name", "source.name")],
        Body::Field("source"),
        "sources",
        "Create or replace an ingest source (the body is the Source)",
    ),
    route(
        "GetSource",
        Method::GET,
        "/v1/sources/{name}",
        &[("name", "name")],
        Body::None,
        "sources",
        "One ingest source",
    ),
    route(
        "DeleteSource",
        Method::DELETE,
        "/v1/sources/{name}",
        &[("name", "name")],
        Body::None,
        "sources",
        "Delete an ingest source",
    ),
    route(
        "ListEventTypes",
        Method::GET,
        "/v1/event-types",
        &[],
        Body::None,
        "event-types",
        "The tenant's declared event types, their descriptions and JSON Schemas",
    ),
    route(
        "PutEventType",
        Method::PUT,
        "/v1/event-types/{name}",
        &[("name", "event_type.name")],
        Body::Field("event_type"),
        "event-types",
        "Declare or replace an event type (the body is the EventType)",
    ),
    route(
        "GetEventType",
        Method::GET,
        "/v1/event-types/{name}",
        &[("name", "name")],
        Body::None,
        "event-types",
        "One declared event type",
    ),
    route(
        "DeleteEventType",
        Method::DELETE,
        "/v1/event-types/{name}",
        &[("name", "name")],
        Body::None,
        "event-types",
        "Delete a declared event type (stored events keep their type)",
    ),
    route(
        "ListSubscriptions",
        Method::GET,
        "/v1/subscriptions",
        &[],
        Body::None,
        "subscriptions",
        "Every subscription, by name",
    ),
    route(
        "PutSubscription",
        Method::PUT,
        "/v1/subscriptions/{name}",
        &[("name", "subscription.name")],
        Body::Field("subscription"),
        "subscriptions",
        "Create or replace a subscription (the body is the Subscription; its filter is JSON, as Outpost takes it)",
    ),
    route(
        "GetSubscription",
        Method::GET,
        "/v1/subscriptions/{name}",
        &[("name", "name")],
        Body::None,
        "subscriptions",
        "One subscription",
    ),
    route(
        "DeleteSubscription",
        Method::DELETE,
        "/v1/subscriptions/{name}",
        &[("name", "name")],
        Body::None,
        "subscriptions",
        "Delete a subscription (deliveries already stored stay)",
    ),
    route(
        "CreateTenant",
        Method::POST,
        "/v1/tenants",
        &[],
        Body::Field("tenant"),
        "tenants",
        "Create a tenant (operator only; 409 if the name is taken)",
    ),
    route(
        "GetTenant",
        Method::GET,
        "/v1/tenants/{name}",
        &[("name", "name")],
        Body::None,
        "tenants",
        "A tenant (operator only)",
    ),
    route(
        "ListTenants",
        Method::GET,
        "/v1/tenants",
        &[],
        Body::None,
        "tenants",
        "Tenants in name order, a page at a time (operator only)",
    ),
    route(
        "UpdateTenant",
        Method::PUT,
        "/v1/tenants/{name}",
        &[("name", "tenant.name")],
        Body::Field("tenant"),
        "tenants",
        "Replace a tenant's display name and metadata (operator only)",
    ),
    route(
        "DeleteTenant",
        Method::DELETE,
        "/v1/tenants/{name}",
        &[("name", "name")],
        Body::None,
        "tenants",
        "Delete a tenant with its objects (and, with force=true, its live messages); operator only",
    ),
    route(
        "CreateToken",
        Method::POST,
        "/v1/tokens",
        &[],
        Body::Field("token"),
        "tokens",
        "Create a tenant's API token; the answer holds the token, shown once",
    ),
    route(
        "ListTokens",
        Method::GET,
        "/v1/tokens",
        &[],
        Body::None,
        "tokens",
        "The tenant's tokens (never the tokens themselves)",
    ),
    route(
        "RevokeToken",
        Method::DELETE,
        "/v1/tokens/{name}",
        &[("name", "name")],
        Body::None,
        "tokens",
        "Revoke a token: the next call with it is refused",
    ),
    route(
        "CreatePortalLink",
        Method::POST,
        "/v1/tenants/{tenant}/portal-links",
        &[("tenant", "tenant")],
        Body::Whole,
        "portal",
        "A signed, short-lived link to the tenant's portal (its view of the console), to open or show in an iframe",
    ),
    route(
        "RevokePortalLinks",
        Method::DELETE,
        "/v1/tenants/{tenant}/portal-links",
        &[("tenant", "tenant")],
        Body::None,
        "portal",
        "Refuse one portal link (link_id=...) or every link of the tenant made until now",
    ),
];

/// Each path parameter's name and (percent-decoded) value.
pub(crate) type Captures = Vec<(&'static str, String)>;

/// What a path and method found.
#[derive(Debug)]
pub(crate) enum Lookup<'a> {
    Found(&'a Route, Captures),
    /// The path exists with other methods: these.
    WrongMethod(Vec<Method>),
    Nothing,
}

/// The route for `method` and `path`: literal segments win over parameters (so
/// `/v1/messages/batch` is never a message id), then the table's order.
pub(crate) fn find<'a>(routes: &'a [Route], method: &Method, path: &str) -> Lookup<'a> {
    let mut best: Option<(usize, &Route, Captures)> = None;
    let mut allowed = Vec::new();
    for route in routes {
        let Some((literals, captures)) = matches(route.template, path) else {
            continue;
        };
        if route.method != *method {
            allowed.push(route.method.clone());
            continue;
        }
        if best.as_ref().is_none_or(|(l, _, _)| literals > *l) {
            best = Some((literals, route, captures));
        }
    }
    match best {
        Some((_, route, captures)) => Lookup::Found(route, captures),
        None if !allowed.is_empty() => Lookup::WrongMethod(allowed),
        None => Lookup::Nothing,
    }
}

/// The literal segments matched and each parameter's (percent-decoded) value, if `path`
/// fits `template`.
fn matches(template: &'static str, path: &str) -> Option<(usize, Captures)> {
    let mut literals = 0;
    let mut captures = Vec::new();
    let mut want = template.split('/');
    let mut have = path.split('/');
    loop {
        match (want.next(), have.next()) {
            (None, None) => return Some((literals, captures)),
            (Some(w), Some(h)) => {
                if let Some(name) = w.strip_prefix('{').and_then(|w| w.strip_suffix('}')) {
                    if h.is_empty() {
                        return None;
                    }
                    let value = percent_decode(h)?;
                    captures.push((name, value));
                } else if w == h {
                    literals += 1;
                } else {
                    return None;
                }
            }
            _ => return None,
        }
    }
}

/// `%XX` escapes decoded; `None` if they do not make UTF-8 (or are malformed).
pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_segments_win_over_parameters() {
        let Lookup::Found(route, captures) = find(ROUTES, &Method::POST, "/v1/messages/batch")
        else {
            panic!("no route")
        };
        assert_eq!(route.rpc, "EnqueueBatch");
        assert!(captures.is_empty());
        let Lookup::Found(route, captures) = find(ROUTES, &Method::GET, "/v1/messages/batch")
        else {
            panic!("no route")
        };
        assert_eq!(route.rpc, "GetMessage");
        assert_eq!(captures, vec![("id", "batch".to_owned())]);
    }

    #[test]
    fn parameters_are_percent_decoded_and_never_empty() {
        let Lookup::Found(route, captures) =
            find(ROUTES, &Method::GET, "/v1/endpoints/billing%2Dprod")
        else {
            panic!("no route")
        };
        assert_eq!(route.rpc, "GetEndpoint");
        assert_eq!(captures, vec![("name", "billing-prod".to_owned())]);
        assert!(matches!(
            find(ROUTES, &Method::GET, "/v1/endpoints/"),
            Lookup::Nothing
        ));
        assert!(matches!(
            find(ROUTES, &Method::GET, "/v1/endpoints/%zz"),
            Lookup::Nothing
        ));
    }

    #[test]
    fn a_known_path_with_another_method_names_the_methods_it_takes() {
        match find(ROUTES, &Method::PATCH, "/v1/endpoints/a") {
            Lookup::WrongMethod(mut allowed) => {
                allowed.sort_by(|a, b| a.as_str().cmp(b.as_str()));
                assert_eq!(allowed, vec![Method::DELETE, Method::GET, Method::PUT]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_rpc_of_the_proto_has_one_route_and_every_route_an_rpc() {
        let pool = super::super::descriptors().expect("descriptors");
        let service = pool
            .get_service_by_name(super::super::SERVICE)
            .expect("service");
        let rpcs: Vec<String> = service.methods().map(|m| m.name().to_owned()).collect();
        assert!(rpcs.len() >= 22, "{rpcs:?}");
        for rpc in &rpcs {
            let n = ROUTES.iter().filter(|r| r.rpc == rpc).count();
            assert_eq!(n, 1, "{rpc} has {n} routes");
        }
        for route in ROUTES {
            assert!(
                rpcs.iter().any(|r| r == route.rpc),
                "{} is not an rpc",
                route.rpc
            );
        }
    }
}
