//! Ingest sources: where providers post, and how each is checked.

use super::*;

pub async fn sources(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<Notice>,
) -> Page {
    let sources = c
        .api
        .list_sources(call(&s, pb::ListSourcesRequest {}))
        .await?
        .into_inner()
        .sources;
    html_page(page(
        "Sources",
        Nav::Sources,
        Some(&s),
        &n.notice,
        html! {
            p.hint { "Webhooks hookd receives on the ingest listener (" code { "POST /in/{source}" } "). "
                "Topics do not exist in hookd: a source routes to one queue or endpoint." }
            @if sources.is_empty() { p { "No source is defined." } } @else {
                table.list {
                    thead { tr { th { "name" } th { "path" } th { "scheme" } th { "route" } th { "secrets" }
                                 th { "tolerance" } th { "max body" } th { "schema" } th { "event type" } th { "dedup id" } th { "redaction" } th { "defined in" } } }
                    tbody {
                        @for src in &sources {
                            tr {
                                td { (src.name) }
                                td { code { (src.path) } }
                                td { (src.scheme) }
                                td { @match &src.route {
                                    Some(pb::source::Route::Queue(q)) => { "queue:" (q) }
                                    Some(pb::source::Route::Endpoint(e)) => { a href=(format!("/ui/endpoints/{}", segment(e))) { "endpoint:" (e) } }
                                    None => { "-" }
                                } }
                                td {
                                    @for (i, sec) in src.secret_summaries.iter().enumerate() {
                                        @if i > 0 { ", " } code { (sec.fingerprint) }
                                    }
                                    @if !src.bearer_sha256.is_empty() { (src.bearer_sha256.len()) " bearer token(s)" }
                                    @if !src.basic.is_empty() { (src.basic.len()) " basic credential(s)" }
                                }
                                td.num { (src.tolerance_secs) " s" }
                                td.num { (view::bytes(src.max_body_bytes)) }
                                td { @if src.json_schema.is_empty() { "none" } @else { "yes" } }
                                td { (src.event_type) }
                                td { (src.dedup_id) }
                                td { @if let Some(r) = &src.redact {
                                    (r.remove.len() + r.mask.len()) " pointer(s)"
                                    @if !r.detectors.is_empty() { ", " (r.detectors.join(", ")) }
                                } @else { "none" } }
                                td { @if src.from_config { "config file" } @else { "API" } }
                            }
                        }
                    }
                }
            }
        },
    ))
}
