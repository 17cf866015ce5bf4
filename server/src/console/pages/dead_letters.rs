//! Dead letters: the filtered list, replay and purge (confirmed), and the analysis.

use super::*;
use crate::api::view::DeadAnalysis;

/// The dead-letter filter, as the page's query and the action forms carry it.
#[derive(Debug, Default, Clone, Deserialize)]
pub(crate) struct DeadFilter {
    /// A destination key (`endpoint:NAME`, `queue:NAME`, `url:ORIGIN`) or an endpoint's name.
    #[serde(default)]
    destination: String,
    /// The last attempt's HTTP status.
    #[serde(default)]
    status: String,
    /// Text the last error contains.
    #[serde(default)]
    error: String,
    /// Dead-lettered within this window: `1h`, `24h`, `7d` (empty: any time).
    #[serde(default)]
    since: String,
}

pub(super) const WINDOWS: [(&str, &str, u64); 4] = [
    ("", "any time", 0),
    ("1h", "last hour", 3_600_000),
    ("24h", "last 24 h", 86_400_000),
    ("7d", "last 7 days", 7 * 86_400_000),
];

impl DeadFilter {
    fn pairs(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("destination", self.destination.as_str()),
            ("status", self.status.as_str()),
            ("error", self.error.as_str()),
            ("since", self.since.as_str()),
        ]
    }

    fn is_empty(&self) -> bool {
        self.pairs().iter().all(|(_, v)| v.trim().is_empty())
    }

    /// A destination key, or an endpoint's bare name, as its tenant writes it (the call
    /// it goes into names the tenant).
    fn destination(&self) -> Option<pb::Destination> {
        destination_arg(&self.destination)
    }

    /// As the API's filter; `now_ms` anchors the window.
    fn to_proto(&self, now_ms: u64) -> Result<pb::DeadLetterFilter, Failure> {
        let status = self.status.trim();
        let http_status = if status.is_empty() {
            0
        } else {
            status
                .parse::<u32>()
                .ok()
                .filter(|s| (100..=599).contains(s))
                .ok_or_else(|| {
                    Failure::bad(format!(
                        "status: {status:?} is not an HTTP status (100 to 599)"
                    ))
                })?
        };
        let window = WINDOWS
            .iter()
            .find(|(k, _, _)| *k == self.since.trim())
            .map(|(_, _, ms)| *ms)
            .ok_or_else(|| {
                Failure::bad(format!("since: {:?} is not one of 1h, 24h, 7d", self.since))
            })?;
        if self.error.len() > 1_024 {
            return Err(Failure::bad("error: longer than 1024 bytes"));
        }
        Ok(pb::DeadLetterFilter {
            destination: self.destination(),
            dead_after_unix_ms: if window == 0 {
                0
            } else {
                now_ms.saturating_sub(window)
            },
            dead_before_unix_ms: 0,
            http_status,
            error_contains: self.error.trim().to_owned(),
        })
    }

    fn form_fields(&self) -> Markup {
        html! {
            @for (k, v) in self.pairs() {
                input type="hidden" name=(k) value=(v);
            }
        }
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeadQuery {
    #[serde(flatten)]
    filter: DeadFilter,
    /// Hex key to continue after (the previous page's last row).
    #[serde(default)]
    after: String,
    #[serde(default)]
    notice: String,
}

pub(super) fn dead_list_url(f: &DeadFilter) -> String {
    let q = query(&f.pairs());
    if q.is_empty() {
        "/ui/dead-letters".into()
    } else {
        format!("/ui/dead-letters?{q}")
    }
}

pub(crate) async fn dead_letters(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(q): Query<DeadQuery>,
) -> Page {
    let now = c.clock.now_ms();
    if s.caller.limited() {
        let named = q.filter.destination.as_str();
        let name = named.strip_prefix("endpoint:").unwrap_or(named);
        if !s.may_see(&format!("endpoint:{name}")) {
            spans_destinations(&s)?;
        }
    }
    let proto = q.filter.to_proto(now)?;
    let filter = crate::api::validate::dead_letter_filter(s.tenant(), proto, "filter")?;
    let for_analysis = filter.clone();
    let after = if q.after.is_empty() {
        None
    } else {
        Some(crate::api::validate::unhex(&q.after, "after")?)
    };
    let (rows, next) = c
        .api
        .read(move |store| {
            Ok(store.dead_page(
                filter.tenant,
                filter.destination.as_ref(),
                after.as_deref(),
                PAGE,
                MAX_DEAD_SCAN_PER_PAGE,
                &|d| filter.matches(d),
            )?)
        })
        .await?;
    // The analysis reads every dead letter's summary (up to 100,000): on the first page
    // only, and reused for a few seconds.
    let analysis = if q.after.is_empty() {
        Some(analysis(&c, for_analysis).await?)
    } else {
        None
    };
    let list_url = dead_list_url(&q.filter);
    html_page(page(
        "Dead letters",
        Nav::DeadLetters,
        Some(&s),
        &q.notice,
        html! {
            form.filters method="get" action="/ui/dead-letters" {
                label { "destination " input type="text" name="destination" value=(q.filter.destination) placeholder="endpoint:NAME, queue:NAME, url:ORIGIN"; }
                label { "status " input type="text" name="status" value=(q.filter.status) size="4" placeholder="503"; }
                label { "error contains " input type="text" name="error" value=(q.filter.error); }
                label { "dead-lettered " select name="since" {
                    @for (k, label, _) in WINDOWS { option value=(k) selected[q.filter.since == k] { (label) } }
                } }
                button type="submit" { "Filter" }
                @if !q.filter.is_empty() { " " a href="/ui/dead-letters" { "clear" } }
            }
            @if s.may_change() { section.bulk {
                form.inline method="post" action="/ui/dead-letters/replay" {
                    (csrf(&s)) (q.filter.form_fields())
                    button type="submit" { "Replay all matching…" }
                }
                form.inline method="post" action="/ui/dead-letters/purge" {
                    (csrf(&s)) (q.filter.form_fields())
                    button.danger type="submit" { "Purge all matching…" }
                }
                span.hint { " Both show how many match and ask to confirm first." }
            } }
            @if let Some(analysis) = &analysis {
            section {
                h2 { "Analysis" }
                p.hint { "Of the " (analysis.scanned) " dead letters this filter matches ("
                    (WINDOWS.iter().find(|(k, _, _)| *k == q.filter.since.trim()).map_or("any time", |w| w.1))
                    "): the same set as the list below"
                    @if analysis.truncated { " (of the first 100,000 dead letters read; the rest were not)" } "."
                    @if analysis.destinations.len() > MAX_ANALYSES_SHOWN {
                        " The " (MAX_ANALYSES_SHOWN) " destinations with the most are shown, of " (analysis.destinations.len()) "."
                    } }
                @if analysis.destinations.is_empty() { p { "No dead letter matches." } }
                @for a in analysis.destinations.iter().take(MAX_ANALYSES_SHOWN) {
                    article.analysis {
                        h3 { a href=(dead_list_url(&DeadFilter { destination: a.destination.clone(), ..Default::default() })) { (a.destination) }
                             " · " (a.count) " dead letters" }
                        p { "most common error: " q { (view::excerpt(&a.most_common_error, ERROR_EXCERPT)) } " (" (a.most_common_error_count) ")"
                            @if a.most_common_status != 0 { "; most common status " (a.most_common_status) " (" (a.most_common_status_count) ")" }
                            "; " (format!("{:.1}", a.average_attempts)) " attempts on average; first " (view::time(a.first_ms)) ", last " (view::time(a.last_ms)) "." }
                        @if !a.patterns.is_empty() {
                            ul.patterns {
                                @for p in &a.patterns {
                                    li { span.badge.pattern { (p.kind) } " " (p.description) br; span.hint { (p.suggestion) } }
                                }
                            }
                        }
                    }
                }
            }
            }
            section {
                h2 { "Messages" }
                @if rows.is_empty() {
                    p { "No dead letter matches" @if next.is_some() { " in this stretch; the next page looks further" } "." }
                } @else {
                    table.list {
                        thead { tr { th { "id" } th { "destination" } th { "lane" } th { "dead-lettered" } th { "attempts" } th { "status" } th { "last error" } th { "" } } }
                        tbody {
                            @for d in &rows {
                                @let id = d.id.to_string();
                                tr {
                                    td.id { a href=(format!("/ui/messages/{}", segment(&id))) { (id) } }
                                    td { (d.destination) }
                                    td {
                                        @if let Some(l) = &d.lane {
                                            (format!("{:?} #{}", l.key, l.seq))
                                            @if l.blocks { " " span.badge.bad title="It holds its FIFO lane: replay delivers it first, in order; skip purges it and the lane moves on" { "blocks its lane" } }
                                        } @else { "-" }
                                    }
                                    td { (view::time(d.dead_ms)) }
                                    td.num { (d.attempts) }
                                    td.num { @if d.last_status == 0 { "-" } @else { (d.last_status) } }
                                    td.error { (view::excerpt(&d.last_error, ERROR_EXCERPT)) }
                                    td { @if s.may_change() {
                                        form.inline method="post" action="/ui/dead-letters/replay" {
                                            (csrf(&s)) (q.filter.form_fields())
                                            input type="hidden" name="id" value=(id);
                                            button type="submit" { "Replay" }
                                        }
                                        @if d.lane.as_ref().is_some_and(|l| l.blocks) {
                                            form.inline method="post" action="/ui/dead-letters/purge" {
                                                (csrf(&s)) (q.filter.form_fields())
                                                input type="hidden" name="id" value=(id);
                                                button type="submit" title="Purge it: its lane moves on to the next event" { "Skip" }
                                            }
                                        }
                                    } }
                                }
                            }
                        }
                    }
                }
                @if let Some(next) = next {
                    p { a.button href=(format!("{list_url}{}{}", if list_url.contains('?') { "&" } else { "?" }, query(&[("after", &hookd_core::names::hex(&next))]))) { "Next page" } }
                }
            }
        },
    ))
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct BulkForm {
    #[serde(flatten)]
    filter: DeadFilter,
    /// One message to replay (the one-click replay), instead of the filter.
    #[serde(default)]
    id: String,
    /// Where a one-click replay returns: `message` (its page) or the list.
    #[serde(default)]
    from: String,
    /// Set by the confirmation page's button.
    #[serde(default)]
    confirm: String,
}

pub(crate) async fn replay(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<BulkForm>,
) -> Page {
    let list = dead_list_url(&f.filter);
    if !f.id.is_empty() {
        let r = c
            .api
            .replay_dead_letters(call(
                &s,
                pb::ReplayDeadLettersRequest {
                    ids: vec![f.id.clone()],
                    ..Default::default()
                },
            ))
            .await?
            .into_inner();
        c.forget_analysis();
        let notice = if r.replayed == 1 {
            format!("Replayed {}: it is pending again.", f.id)
        } else {
            format!("{} was no longer a dead letter; nothing replayed.", f.id)
        };
        let back = if f.from == "message" {
            format!("/ui/messages/{}", segment(&f.id))
        } else {
            list
        };
        return Ok(see_other(&with_notice(&back, &notice)));
    }
    let filter = f.filter.to_proto(c.clock.now_ms())?;
    let request = |dry_run| pb::ReplayDeadLettersRequest {
        filter: Some(filter.clone()),
        limit: crate::api::validate::MAX_REPLAY_LIMIT,
        dry_run,
        ..Default::default()
    };
    if f.confirm != "yes" {
        let r = c
            .api
            .replay_dead_letters(call(&s, request(true)))
            .await?
            .into_inner();
        return confirm_page(
            &s,
            "Replay dead letters",
            "/ui/dead-letters/replay",
            &f.filter,
            r.matched,
            html! {
                "Replaying sends them again from their first attempt, paced by "
                code { "dead_letters.replay_rate_per_s" } "."
            },
        );
    }
    let r = c
        .api
        .replay_dead_letters(call(&s, request(false)))
        .await?
        .into_inner();
    c.forget_analysis();
    let notice = format!(
        "Replayed {} of {} matching dead letters{}.",
        r.replayed,
        r.matched,
        if r.last_due_unix_ms > 0 {
            format!("; the last is due {}", view::time(r.last_due_unix_ms))
        } else {
            String::new()
        }
    );
    Ok(see_other(&with_notice(&list, &notice)))
}

pub(crate) async fn purge(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<BulkForm>,
) -> Page {
    // The one-click skip of a dead letter that blocks its FIFO lane.
    if !f.id.is_empty() {
        let r = c
            .api
            .purge_dead_letters(call(
                &s,
                pb::PurgeDeadLettersRequest {
                    ids: vec![f.id.clone()],
                    ..Default::default()
                },
            ))
            .await?
            .into_inner();
        c.forget_analysis();
        let notice = if r.purged == 1 {
            format!("Skipped {}: purged, and its lane moved on.", f.id)
        } else {
            format!("{} was no longer a dead letter; nothing purged.", f.id)
        };
        return Ok(see_other(&with_notice(&dead_list_url(&f.filter), &notice)));
    }
    let filter = f.filter.to_proto(c.clock.now_ms())?;
    let all = f.filter.is_empty();
    let request = |dry_run| pb::PurgeDeadLettersRequest {
        filter: Some(filter.clone()),
        all,
        dry_run,
        limit: crate::api::validate::MAX_REPLAY_LIMIT,
        ids: Vec::new(),
    };
    if f.confirm != "yes" {
        let r = c
            .api
            .purge_dead_letters(call(&s, request(true)))
            .await?
            .into_inner();
        return confirm_page(
            &s,
            "Purge dead letters",
            "/ui/dead-letters/purge",
            &f.filter,
            r.matched,
            html! {
                strong { "Purging deletes them for good" } " (payloads included); it cannot be undone."
                @if all { " The filter is empty: this is " strong { "every dead letter" } "." }
            },
        );
    }
    let r = c
        .api
        .purge_dead_letters(call(&s, request(false)))
        .await?
        .into_inner();
    c.forget_analysis();
    Ok(see_other(&with_notice(
        &dead_list_url(&f.filter),
        &format!(
            "Purged {} of {} matching dead letters.",
            r.purged, r.matched
        ),
    )))
}

/// The dry run's answer: how many match, and a button that confirms.
pub(super) fn confirm_page(
    s: &Session,
    title: &str,
    action: &str,
    filter: &DeadFilter,
    matched: u32,
    warning: Markup,
) -> Page {
    let described: Vec<String> = filter
        .pairs()
        .iter()
        .filter(|(_, v)| !v.trim().is_empty())
        .map(|(k, v)| format!("{k} = {v}"))
        .collect();
    html_page(page(
        title,
        Nav::DeadLetters,
        Some(s),
        "",
        html! {
            p.count { strong { (matched) } " dead letters match "
                @if described.is_empty() { "(no filter: all of them)" } @else { "(" (described.join(", ")) ")" } "." }
            @if matched == 0 {
                p { "Nothing to do. " a href=(dead_list_url(filter)) { "Back to the list" } }
            } @else {
                p { (warning) }
                form.inline method="post" action=(action) {
                    (csrf(s)) (filter.form_fields())
                    input type="hidden" name="confirm" value="yes";
                    button.danger[action.ends_with("purge")] type="submit" { "Confirm: " (title.to_lowercase()) " (" (matched) ")" }
                }
                " " a href=(dead_list_url(filter)) { "Cancel" }
            }
        },
    ))
}

/// The dead-letter analysis of `destination` (or of all) over the default window, from the
/// cache while fresh; most dead letters first.
pub(super) async fn analysis(
    c: &Console,
    filter: hookd_core::deadletters::Filter,
) -> Result<Arc<DeadAnalysis>, Failure> {
    let key = format!("{filter:?}");
    let now = c.clock.now_ms();
    if let Some((k, at, a)) = c
        .analysis
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        && *k == key
        && now.saturating_sub(*at) < ANALYSIS_TTL_MS
    {
        return Ok(a.clone());
    }
    let mut a = c.api.analyze_dead_letters_matching(filter).await?;
    a.destinations.sort_by_key(|d| std::cmp::Reverse(d.count));
    let a = Arc::new(a);
    *c.analysis.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, now, a.clone()));
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_names_its_bad_fields() {
        let f = |status: &str, since: &str| DeadFilter {
            status: status.into(),
            since: since.into(),
            ..Default::default()
        };
        assert!(f("503", "24h").to_proto(100_000_000).is_ok());
        let e = f("abc", "").to_proto(0).err().unwrap();
        assert!(e.message.starts_with("status:"), "{}", e.message);
        let e = f("", "3w").to_proto(0).err().unwrap();
        assert!(e.message.starts_with("since:"), "{}", e.message);
        let p = f("", "1h").to_proto(10_000_000).unwrap();
        assert_eq!(p.dead_after_unix_ms, 10_000_000 - 3_600_000);
        let d = DeadFilter {
            destination: "orders".into(),
            ..Default::default()
        };
        assert_eq!(
            d.destination().unwrap().kind,
            Some(pb::destination::Kind::Endpoint("orders".into()))
        );
        let d = DeadFilter {
            destination: "queue:jobs".into(),
            ..Default::default()
        };
        assert_eq!(
            d.destination().unwrap().kind,
            Some(pb::destination::Kind::Queue("jobs".into()))
        );
    }
}
