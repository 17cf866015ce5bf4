//! The event-type catalog: what the config declares, and how strictly it is held to.

use super::*;

pub(crate) async fn event_types(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<Notice>,
) -> Page {
    let catalog = c.api.catalog();
    let types: Vec<_> = catalog.types().collect();
    html_page(page(
        "Event types",
        Nav::EventTypes,
        Some(&s),
        &n.notice,
        html! {
            p.hint { "Declared in the config file (" code { "[[event_types]]" } "). Enqueue refuses a payload that fails its type's JSON Schema. "
                @if catalog.strict() { "Strict: an event type not listed here, or none, is refused." }
                @else { "Not strict: event types not listed here are accepted unchecked." } }
            @if types.is_empty() { p { "No event type is declared." } } @else {
                table.list {
                    thead { tr { th { "name" } th { "description" } th { "JSON Schema" } } }
                    tbody {
                        @for t in &types {
                            tr {
                                td { code { (t.name) } }
                                td { (t.description) }
                                td { @match &t.schema_text {
                                    Some(text) => { details { summary { "yes" } pre { (text) } } }
                                    None => { "none" }
                                } }
                            }
                        }
                    }
                }
            }
        },
    ))
}
