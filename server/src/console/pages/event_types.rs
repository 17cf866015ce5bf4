//! The viewed tenant's event types: what it declares (default's: the config file's too),
//! and how strictly they are held to.

use super::*;

pub(crate) async fn event_types(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<super::endpoints::ListQuery>,
) -> Page {
    let strict = c.api.catalog().strict();
    let catalog = c.api.catalog().of(s.tenant());
    let every = catalog.types().count();
    let types: Vec<_> = catalog
        .types()
        .filter(|t| n.q.is_empty() || t.name.contains(n.q.as_str()))
        .collect();
    html_page(page(
        "Event types",
        Nav::EventTypes,
        Some(&s),
        &n.notice,
        html! {
            p.hint { "Declared with " code { "hookd event-types put" } " (PutEventType), and for " code { "default" } " in the config file (" code { "[[event_types]]" } "). Enqueue refuses a payload that fails its type's JSON Schema. "
                @if strict { "Strict: an event type not listed here, or none, is refused." }
                @else { "Not strict: event types not listed here are accepted unchecked." } }
            (super::name_filter("/ui/event-types", &n.q))
            @if types.is_empty() { p { @if every == 0 { "No event type is declared." } @else { "None of the " (every) " event types matches." } } } @else {
                table.list {
                    thead { tr { th { "name" } th { "description" } th { "JSON Schema" } th { "search keys" } th { "defined in" } } }
                    tbody {
                        @for t in &types {
                            tr {
                                td { code { (t.name) } }
                                td { (t.description) }
                                td { @match &t.schema_text {
                                    Some(text) => { details { summary { "yes" } pre { (text) } } }
                                    None => { "none" }
                                } }
                                td { @for (i, k) in t.search_keys.iter().enumerate() { @if i > 0 { ", " } code { (k) } } }
                                td { @if t.from_config { "config" } @else { "api" } }
                            }
                        }
                    }
                }
            }
        },
    ))
}
