//! Destinations: every queue, endpoint and URL origin with its figures.

use super::*;

pub(crate) async fn destinations(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(q): Query<ListQuery>,
) -> Page {
    // The API's bound on a page token, which this is.
    if q.after.len() > 4 * crate::api::validate::MAX_URL_LEN {
        return Err(Failure::bad("after: not a destination key"));
    }
    let after = (!q.after.is_empty()).then(|| q.after.clone());
    let stats = c.engine.stats(s.figures(), after, PAGE).await?;
    html_page(page(
        "Destinations",
        Nav::Destinations,
        Some(&s),
        &q.notice,
        html! {
            p.hint { "Every destination hookd holds: endpoints, URL origins and pull queues, in key order." }
            table.list {
                thead { tr {
                    th { "destination" } th { "pending" } th { "retrying" } th { "in flight" } th { "dead" }
                    th { "waiting receives" } th { "enqueued" } th { "completed" } th { "oldest" }
                    th { "bytes" } th { "backpressure" } th { "p99 (1 h)" }
                } }
                tbody {
                    @for d in &stats.destinations {
                        tr {
                            td { @if let Some(name) = hookd_core::destination::Destination::endpoint_of_key(&d.destination).filter(|(t, _)| t.is_default()).map(|(_, n)| n) {
                                a href=(format!("/ui/endpoints/{}", segment(name))) { (d.destination) }
                            } @else { (d.destination) } }
                            td.num { (d.pending) } td.num { (d.awaiting_retry) } td.num { (d.in_flight) }
                            td.num { @if d.dead_letter > 0 {
                                a href=(format!("/ui/dead-letters?{}", query(&[("destination", &d.destination)]))) { (d.dead_letter) }
                            } @else { "0" } }
                            td.num { (d.waiting_receives) }
                            td.num { (view::rate(d.enqueue_rate_per_s)) }
                            td.num { (view::rate(d.completion_rate_per_s)) }
                            td.num { (view::duration(d.oldest_pending_age_ms)) }
                            td.num { (view::bytes(d.live_bytes)) }
                            td { (d.backpressure.as_str()) }
                            td.num { (view::millis(d.latency_last_hour.p99_ms)) }
                        }
                    }
                }
            }
            @if let Some(next) = &stats.next_page {
                p { a.button href=(format!("/ui/destinations?{}", query(&[("after", next)]))) { "Next page" } }
            }
        },
    ))
}

// ---------------------------------------------------------------------------------------
// Dead letters.
