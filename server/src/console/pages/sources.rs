//! Ingest sources: where providers post, and how each is checked.

use super::*;

pub(crate) async fn sources(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<super::endpoints::ListQuery>,
) -> Page {
    let every = c.api.sources().list(s.tenant());
    let sources: Vec<_> = every
        .iter()
        .filter(|src| n.q.is_empty() || src.spec.name.contains(n.q.as_str()))
        .collect();
    html_page(page(
        "Sources",
        Nav::Sources,
        Some(&s),
        &n.notice,
        html! {
            p.hint { "Webhooks hookd receives on the ingest listener (" code { "POST /in/{source}" } "). "
                "A source routes to one queue or endpoint." }
            (super::name_filter("/ui/sources", &n.q))
            @if sources.is_empty() { p { @if every.is_empty() { "No source is defined." } @else { "None of the " (every.len()) " sources matches." } } } @else {
                table.list {
                    thead { tr { th { "name" } th { "path" } th { "scheme" } th { "route" } th { "secrets" }
                                 th { "tolerance" } th { "max body" } th { "schema" } th { "event type" } th { "dedup id" } th { "redaction" } th { "search keys" } th { "defined in" } } }
                    tbody {
                        @for src in &sources {
                            @let spec = &src.spec;
                            tr {
                                td { (spec.name) }
                                td { code { (src.path) } }
                                td { (spec.scheme.as_str()) }
                                td { @match src.route.endpoint() {
                                    Some(e) => { a href=(format!("/ui/endpoints/{}", segment(e))) { "endpoint:" (e) } }
                                    None => { (src.route.describe()) }
                                } }
                                td {
                                    @for (i, (_, fingerprint)) in src.secret_summaries.iter().enumerate() {
                                        @if i > 0 { ", " } code { (fingerprint) }
                                    }
                                    @if !spec.bearer_sha256.is_empty() { (spec.bearer_sha256.len()) " bearer token(s)" }
                                    @if !spec.basic.is_empty() { (spec.basic.len()) " basic credential(s)" }
                                }
                                td.num { (spec.tolerance_secs) " s" }
                                td.num { (view::bytes(spec.max_body_bytes as u64)) }
                                td { @if spec.json_schema.is_none() { "none" } @else { "yes" } }
                                td { (spec.event_type.as_deref().unwrap_or_default()) }
                                td { (spec.dedup_id.as_deref().unwrap_or_default()) }
                                td { @if !spec.redact.is_empty() {
                                    (spec.redact.remove.len() + spec.redact.mask.len()) " pointer(s)"
                                    @if !spec.redact.detectors.is_empty() {
                                        ", " (spec.redact.detectors.iter().map(|d| d.name()).collect::<Vec<_>>().join(", "))
                                    }
                                } @else { "none" } }
                                td { @for (i, k) in spec.search_keys.iter().enumerate() { @if i > 0 { ", " } code { (k) } } }
                                td { @if src.from_config { "config file" } @else { "API" } }
                            }
                        }
                    }
                }
            }
        },
    ))
}
