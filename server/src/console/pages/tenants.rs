//! Tenants: every tenant with its live figures, and the switch that sets the tenant the
//! console's pages show and act on (the session's; `default` at first).

use super::*;
use crate::console::session::Viewed;

/// Tenants one page lists.
const TENANTS_SHOWN: usize = 500;

#[derive(Debug, Deserialize)]
pub(crate) struct SwitchForm {
    tenant: String,
}

/// Views another tenant: the overview, endpoints, destinations, dead letters,
/// subscriptions and messages are then its, and actions act on it.
pub(crate) async fn switch_tenant(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<SwitchForm>,
) -> Page {
    let name = f.tenant.trim();
    let directory = c.engine.tenants();
    let Some(t) = directory.named(name) else {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("tenant: no tenant named {name:?}"),
        ));
    };
    s.view(Viewed {
        id: t.id,
        name: t.record.name.clone(),
    });
    let notice = format!("Viewing tenant {}", t.record.name);
    Ok(see_other(&format!(
        "/ui?{}",
        url::form_urlencoded::Serializer::new(String::new())
            .append_pair("notice", &notice)
            .finish()
    )))
}

pub(crate) async fn tenants(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<super::endpoints::ListQuery>,
) -> Page {
    let directory = c.engine.tenants();
    let everyone = directory.list();
    let all: Vec<_> = everyone
        .iter()
        .filter(|t| {
            n.q.is_empty()
                || t.record.name.contains(n.q.as_str())
                || t.record.display_name.contains(n.q.as_str())
        })
        .collect();
    let viewed = s.tenant();
    let mut rows = Vec::new();
    for t in all.iter().take(TENANTS_SHOWN) {
        let stats = c.engine.stats(Some(t.id), None, 0).await?;
        rows.push((**t, stats.total, stats.quotas));
    }
    html_page(page(
        "Tenants",
        Nav::Tenants,
        Some(&s),
        &n.notice,
        html! {
            p.hint { "Every tenant, in name order. Switch to one to see and manage its endpoints, subscriptions, messages and dead letters; under "
                code { "default" } " the overview and destinations show every tenant's figures." }
            (super::name_filter("/ui/tenants", &n.q))
            p.hint { (all.len()) " of " (everyone.len()) " tenants." }
            table.list {
                thead { tr {
                    th { "tenant" } th { "display name" } th { "pending" } th { "retrying" }
                    th { "in flight" } th { "dead" } th { "quotas (use / limit)" } th { "" }
                } }
                tbody {
                    @for (t, total, quotas) in &rows {
                        tr {
                            td { (t.record.name) @if t.id == viewed { " (viewing)" } }
                            td { (t.record.display_name) }
                            td { (total.pending) }
                            td { (total.awaiting_retry) }
                            td { (total.in_flight) }
                            td { (total.dead_letter) }
                            td {
                                @for q in quotas {
                                    span.quota { (q.quota) " " (q.used) " / " (q.limit) } " "
                                }
                            }
                            td {
                                form.inline method="post" action="/ui/tenant" {
                                    (view::csrf(&s))
                                    input type="hidden" name="tenant" value=(t.record.name);
                                    button type="submit" { "View" }
                                }
                            }
                        }
                    }
                }
            }
            @if all.len() > TENANTS_SHOWN {
                p.hint { (all.len() - TENANTS_SHOWN) " more tenants: narrow the filter, or switch to one by name in the header." }
            }
        },
    ))
}
