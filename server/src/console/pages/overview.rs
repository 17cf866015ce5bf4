//! The overview: totals, alerts, the storage figures and the busiest destinations.

use super::*;

pub(crate) async fn overview(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(n): Query<Notice>,
) -> Page {
    let mut stats = c.engine.stats(s.figures(), None, 1).await?;
    let mut alerts = std::mem::take(&mut stats.alerts);
    // A portal shows its tenant's figures: not hookd's storage, nor other tenants' depths.
    let operator = s.portal.is_none();
    let gauges = if operator {
        c.engine.gauges(10).await?.destinations
    } else {
        Vec::new()
    };
    let total = &stats.total;
    let storage = &stats.storage;
    let finished = total.delivered_last_hour + total.failed_last_hour;
    let success = view::success(
        total.delivered_last_hour as f64 / finished.max(1) as f64,
        finished,
        &c.alerts,
    );
    let live = total.pending + total.awaiting_retry + total.in_flight;
    let mut depths: Vec<(String, u64)> = gauges
        .iter()
        .map(|d| {
            (
                d.destination.clone(),
                d.pending + d.awaiting_retry + d.in_flight,
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    depths.sort_by_key(|d| std::cmp::Reverse(d.1));
    let commit = &storage.commit_latency_last_hour;
    // Critical first, then the oldest; a page shows the first MAX_ALERTS_SHOWN.
    alerts.sort_by_key(|a| (a.level != "critical", a.since_ms));
    let more_alerts = alerts.len().saturating_sub(MAX_ALERTS_SHOWN);
    alerts.truncate(MAX_ALERTS_SHOWN);
    html_page(page(
        "Overview",
        Nav::Overview,
        Some(&s),
        &n.notice,
        html! {
            section.cards {
                (figure("live messages", live))
                (figure("pending", total.pending))
                (figure("awaiting retry", total.awaiting_retry))
                (figure("in flight", total.in_flight))
                (figure("dead letters", total.dead_letter))
                (figure("enqueued", view::rate(total.enqueue_rate_per_s)))
                (figure("completed", view::rate(total.completion_rate_per_s)))
                (figure("success, last hour", success))
                (figure("oldest pending", view::duration(total.oldest_pending_age_ms)))
                (figure("backpressure", total.backpressure.as_str()))
            }
            p.hint { "Success, last hour: push attempts that succeeded in the last hour; its colour uses the "
                code { "success_rate" } " alert's thresholds, which that alert applies to the last 5 minutes (see Alerts)." }
            section {
                h2 { "Delivery" }
                table {
                    thead { tr { th { "window" } th { "delivered" } th { "failed" } th { "p50" } th { "p95" } th { "p99" } } }
                    tbody {
                        tr { td { "last hour" } td.num { (total.delivered_last_hour) } td.num { (total.failed_last_hour) }
                             (latency_cells(&total.latency_last_hour)) }
                        tr { td { "last 24 h" } td.num { "" } td.num { "" } (latency_cells(&total.latency_last_24h)) }
                    }
                }
                p.hint { "Latency is enqueue to completion; uptime " (view::duration(stats.uptime_ms)) "." }
            }
            section {
                h2 { "Throughput" }
                (chart::throughput(&stats.delivered_by_minute, &stats.failed_by_minute, "messages completed per minute, last hour"))
            }
            @if operator {
                section {
                    h2 { "Deepest destinations" }
                    (chart::bars(&depths, "live messages by destination (the ten deepest)"))
                }
            }
            section {
                h2 { "Alerts" }
                @if alerts.is_empty() {
                    p { "No alert is raised." }
                } @else {
                    table.alerts {
                        thead { tr { th { "alert" } th { "measures (window)" } th { "destination" } th { "level" } th { "since" }
                                     th { "value" } th { "warning at" } th { "critical at" } } }
                        tbody {
                            @for a in &alerts {
                                tr class=(format!("level-{}", a.level)) {
                                    td { (a.alert) }
                                    td { (hookd_core::alerts::Kind::named(a.alert).map_or("", |k| k.measures())) }
                                    td { @if a.destination.is_empty() { "all" } @else { (a.destination) } }
                                    td { span.badge { (a.level) } }
                                    td { (view::time(a.since_ms)) }
                                    td.num { (view::alert_value(a.alert, a.value)) }
                                    td.num { (view::alert_value(a.alert, a.warning)) }
                                    td.num { (view::alert_value(a.alert, a.critical)) }
                                }
                            }
                        }
                    }
                    @if more_alerts > 0 {
                        p.hint { "and " (more_alerts) " more (" code { "hookd stats --json" } " lists them all)." }
                    }
                }
            }
            section {
                h2 { "History" }
                @let r = &stats.retention;
                table.kv {
                    tr { th { "completed messages kept" } td {
                        @if r.tenant_ms > 0 { (view::duration(r.tenant_ms)) " (the tenant's setting)" }
                        @else { (view::duration(r.completed_ms.min(r.log_ms))) " (the server's)" }
                        "; payloads readable since " (view::time(r.kept_since_ms))
                    } }
                    @for (key, ms, since) in &r.destinations {
                        tr { th { (key) } td { (view::duration(*ms)) " (its own setting); payloads readable since " (view::time(*since)) } }
                    }
                    tr { th { "server" } td { "summaries " (view::duration(r.completed_ms)) ", payloads " (view::duration(r.log_ms)) ", within a log budget of " (view::bytes(r.budget_bytes)) " (the oldest go first past it)" } }
                }
            }
            @if operator { section {
                h2 { "Storage" }
                table.kv {
                    tr { th { "commits" } td { (view::rate(storage.commits_per_s)) ", " (format!("{:.1}", storage.requests_per_commit)) " requests per commit" } }
                    tr { th { "commit latency (last hour)" } td { "p50 " (view::millis(commit.p50_ms)) ", p99 " (view::millis(commit.p99_ms)) } }
                    tr { th { "write queue" } td { (view::bytes(storage.queued_write_bytes)) } }
                    tr { th { "write-ahead log" } td { (view::bytes(storage.log_bytes)) ", " (view::bytes(storage.log_since_checkpoint_bytes)) " since the last checkpoint (" (view::duration(storage.checkpoint_age_ms)) " ago, took " (storage.last_checkpoint_ms) " ms)" } }
                    tr { th { "message heap" } td {
                        (storage.log_segments) " segments; " (view::bytes(storage.log_live_bytes)) " of live messages' records; "
                        @if storage.log_retained_from_ms > 0 { "delivered payloads readable since " (view::time(storage.log_retained_from_ms)) "; " }
                        @if storage.log_compacting_segments > 0 { "compacting " (storage.log_compacting_segments) " segments (" (view::bytes(storage.log_reclaimable_bytes)) " to free); " }
                        (storage.log_compacted_records) " records compacted, " (storage.log_deleted_segments) " segments (" (view::bytes(storage.log_freed_bytes)) ") deleted since start"
                    } }
                    @if storage.purged_records > 0 || storage.purge_pending_records > 0 {
                        tr { th { "purges" } td { (storage.purged_records) " purged records (" (view::bytes(storage.purged_bytes)) ") overwritten on disk since start; " (storage.purge_pending_records) " still to overwrite" } }
                    }
                    tr { th { "last start" } td { "replayed " (view::bytes(storage.replayed_bytes)) " in " (storage.replay_ms) " ms" } }
                    tr { th { "disk" } td { (view::bytes(storage.disk_available_bytes)) " available; new events are refused below " (view::bytes(storage.disk_reserve_bytes)) } }
                    tr { th { "destinations in memory" } td { (storage.destinations) } }
                }
            } }
        },
    ))
}
