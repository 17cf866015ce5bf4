//! Messages: the search (`/ui/messages`), and one message's state, attempts and payload.

use super::*;

/// `?id=`: the header's search box.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Find {
    #[serde(default)]
    id: String,
}

/// The header's search box: a message id goes to the message's page; anything else is
/// searched for as an idempotency key.
pub(crate) async fn find(Query(f): Query<Find>) -> Result<axum::response::Response, Failure> {
    let id = f.id.trim();
    match id.parse::<hookd_core::ids::MessageId>() {
        Ok(parsed) => Ok(see_other(&format!("/ui/messages/{parsed}"))),
        Err(_) if id.is_empty() => Ok(see_other("/ui/messages")),
        Err(_) => Ok(see_other(&format!(
            "/ui/messages?{}",
            query(&[("key", id)])
        ))),
    }
}

/// `/ui/messages`: the search's form, as a query string.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct SearchForm {
    #[serde(default)]
    destination: String,
    #[serde(default)]
    event_type: String,
    #[serde(default)]
    event_id: String,
    /// The idempotency key.
    #[serde(default)]
    key: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    since: String,
    /// A declared search key's value: `POINTER=VALUE`.
    #[serde(default)]
    payload: String,
    /// Where the page starts (a previous page's next token).
    #[serde(default)]
    after: String,
    #[serde(default)]
    notice: String,
    /// Set by the replay's confirmation page's button.
    #[serde(default)]
    confirm: String,
}

/// Messages a search page lists.
const SEARCH_PAGE: u32 = 50;

const STATES: [(&str, &str, pb::MessageState); 6] = [
    ("pending", "pending", pb::MessageState::Pending),
    (
        "retrying",
        "awaiting retry",
        pb::MessageState::AwaitingRetry,
    ),
    ("in-flight", "in flight", pb::MessageState::InFlight),
    ("dead", "dead letter", pb::MessageState::DeadLetter),
    ("delivered", "delivered", pb::MessageState::Delivered),
    (
        "expired",
        "delivered, payload expired",
        pb::MessageState::Expired,
    ),
];

impl SearchForm {
    /// The search as hidden fields (the replay's forms carry it).
    fn form_fields(&self) -> Markup {
        html! {
            @for (k, v) in self.pairs() {
                @if !v.is_empty() { input type="hidden" name=(k) value=(v); }
            }
        }
    }

    fn pairs(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("destination", self.destination.as_str()),
            ("event_type", self.event_type.as_str()),
            ("event_id", self.event_id.as_str()),
            ("key", self.key.as_str()),
            ("state", self.state.as_str()),
            ("status", self.status.as_str()),
            ("since", self.since.as_str()),
            ("payload", self.payload.as_str()),
        ]
    }

    /// As the API's request (`now_ms` anchors the window); the API's checks follow.
    fn to_proto(&self, now_ms: u64) -> Result<pb::SearchMessagesRequest, Failure> {
        let destination = destination_arg(&self.destination);
        let states = match self.state.trim() {
            "" => Vec::new(),
            s => vec![
                STATES
                    .iter()
                    .find(|(k, _, _)| *k == s)
                    .map(|(_, _, state)| *state as i32)
                    .ok_or_else(|| Failure::bad(format!("state: {s:?} is not a state")))?,
            ],
        };
        let status = match self.status.trim() {
            "" => 0,
            s => s.parse::<u32>().map_err(|_| {
                Failure::bad(format!("status: {s:?} is not an HTTP status (100 to 999)"))
            })?,
        };
        let window = super::dead_letters::WINDOWS
            .iter()
            .find(|(k, _, _)| *k == self.since.trim())
            .map(|(_, _, ms)| *ms)
            .ok_or_else(|| {
                Failure::bad(format!("since: {:?} is not one of 1h, 24h, 7d", self.since))
            })?;
        let payload = match self.payload.trim() {
            "" => Default::default(),
            p => {
                let (pointer, value) = p.split_once('=').ok_or_else(|| {
                    Failure::bad(format!(
                        "payload: {:?} is not POINTER=VALUE (/customer/id=c_42)",
                        view::excerpt(p, 80)
                    ))
                })?;
                [(pointer.trim().to_owned(), value.trim().to_owned())].into()
            }
        };
        Ok(pb::SearchMessagesRequest {
            destination,
            event_type: self.event_type.trim().to_owned(),
            event_id: self.event_id.trim().to_owned(),
            idempotency_key: self.key.trim().to_owned(),
            states,
            last_status: status,
            created_after_unix_ms: if window == 0 {
                0
            } else {
                now_ms.saturating_sub(window)
            },
            created_before_unix_ms: 0,
            payload,
            page_size: SEARCH_PAGE,
            page_token: self.after.trim().to_owned(),
            count: false,
        })
    }
}

/// The search: a form with every condition, and a page of what matches, newest first.
pub(crate) async fn search(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(q): Query<SearchForm>,
) -> Page {
    let request = q.to_proto(c.clock.now_ms())?;
    // A link limited to some endpoints searches one of them, named.
    if s.caller.limited() {
        let named = q.destination.trim();
        let name = named.strip_prefix("endpoint:").unwrap_or(named);
        if named.is_empty() || !s.may_see(&format!("endpoint:{name}")) {
            spans_destinations(&s)?;
        }
    }
    let crate::api::validate::Search {
        query: asked,
        limit,
        after,
        ..
    } = crate::api::validate::search(s.tenant(), request)?;
    let filtered = q.pairs().iter().any(|(_, v)| !v.trim().is_empty());
    // A filtered search's first page says how many match in all.
    let count = filtered && after.is_none();
    let (page_of, total) = c
        .api
        .read(move |store| {
            let page = store.search(&asked, after, limit, crate::api::validate::SEARCH_BUDGET)?;
            let total = if count {
                Some(store.estimate(&asked)?)
            } else {
                None
            };
            Ok((page, total))
        })
        .await?;
    let next = page_of.next.map(|id| {
        let mut pairs = q.pairs();
        let id = id.to_string();
        pairs.push(("after", &id));
        format!("/ui/messages?{}", query(&pairs))
    });
    html_page(page(
        "Messages",
        Nav::Messages,
        Some(&s),
        &q.notice,
        html! {
            form.filters method="get" action="/ui/messages" role="search" {
                label { "destination " input type="text" name="destination" value=(q.destination) placeholder="endpoint:NAME, queue:NAME"; }
                label { "event type " input type="text" name="event_type" value=(q.event_type); }
                label { "state " select name="state" {
                    option value="" selected[q.state.is_empty()] { "any" }
                    @for (k, label, _) in STATES { option value=(k) selected[q.state == k] { (label) } }
                } }
                label { "last status " input type="text" name="status" value=(q.status) size="4" placeholder="503"; }
                label { "created " select name="since" {
                    @for (k, label, _) in super::dead_letters::WINDOWS { option value=(k) selected[q.since == k] { (label) } }
                } }
                label { "event id " input type="text" name="event_id" value=(q.event_id); }
                label { "idempotency key " input type="text" name="key" value=(q.key); }
                label { "payload " input type="text" name="payload" value=(q.payload) placeholder="/customer/id=c_42"; }
                button type="submit" { "Search" }
                @if filtered { " " a href="/ui/messages" { "clear" } }
            }
            @if s.may_change() && filtered { section.bulk {
                form.inline method="post" action="/ui/replays" {
                    (csrf(&s)) (q.form_fields())
                    button type="submit" { "Replay all matching…" }
                }
                span.hint { " As a replay job: it shows how many match, their bytes and how long it takes first, and asks to confirm." }
            } }
            @if let Some(t) = total {
                p.total { "Matching in all: " @if !t.exact { "about " } (t.count) }
            }
            @if page_of.hits.is_empty() {
                p.hint {
                    @if page_of.next.is_some() { "None among the " (page_of.scanned) " looked at; " a href=(next.clone().unwrap_or_default()) { "look further" } "." }
                    @else { "No retained message matches. Delivered ones are kept " code { "completed_retention_secs" } "; the payload keys an event type declares in " code { "search_keys" } " are searchable from its declaration on." }
                }
            } @else {
                table.list {
                    thead { tr { th { "message" } th { "created" } th { "destination" } th { "event type" } th { "state" } th { "attempts" } th { "last status" } th { "latency" } th { "last error or response" } } }
                    tbody {
                        @for m in &page_of.hits {
                            tr {
                                td.id { a href=(format!("/ui/messages/{}", m.id)) { (m.id) } }
                                td { (view::time(m.created_ms)) }
                                td { (hookd_core::destination::Destination::decode(&m.destination).map(|d| d.local_key()).unwrap_or_default()) }
                                td { (m.event_type) }
                                td { (view::state_label(m.state)) }
                                td.num { (m.attempts) }
                                td.num { @if m.last_status > 0 { (m.last_status) } @else { "-" } }
                                td.num { @if m.attempts > 0 && m.last_latency_us > 0 { (view::millis(m.last_latency_us as f64 / 1_000.0)) } @else { "-" } }
                                td.error { (view::excerpt(&m.last_error, 120)) }
                            }
                        }
                    }
                }
                @if let Some(next) = &next { p { a href=(next) { "Older →" } } }
            }
        },
    ))
}

pub(crate) async fn message(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path(id): Path<String>,
    Query(n): Query<Notice>,
) -> Page {
    let parsed: hookd_core::ids::MessageId =
        id.parse().map_err(|e| Failure::bad(format!("id: {e}")))?;
    let m = c
        .api
        .find_message(s.tenant(), parsed)
        .await?
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                format!(
                    "id: no message {id} (or it completed longer ago than completed_retention_secs)"
                ),
            )
        })?;
    if s.caller.limited()
        && !m
            .destination
            .as_ref()
            .and_then(|d| d.endpoint_name())
            .is_some_and(|name| s.may_see(&format!("endpoint:{name}")))
    {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("id: no message {id}"),
        ));
    }
    let destination = m
        .destination
        .as_ref()
        .map_or_else(String::new, |d| d.describe());
    let dead = m.state == crate::api::view::Shown::DeadLetter;
    let (replays, before) = m.replays();
    let now = c.clock.now_ms();
    let due = matches!(
        m.state,
        crate::api::view::Shown::Pending | crate::api::view::Shown::AwaitingRetry
    ) && m.next_attempt_ms > 0
        && m.next_attempt_ms <= now;
    // Due but not sent: what holds it (its endpoint's breaker, a Retry-After, a pause).
    let held = match (m.destination.as_ref().and_then(|d| d.endpoint_name()), due) {
        (Some(name), true) => held_by(&c, s.tenant(), name, now).await?,
        _ => None,
    };
    html_page(page(
        &format!("Message {id}"),
        Nav::DeadLetters,
        Some(&s),
        &n.notice,
        html! {
            @if dead && s.may_change() {
                section.actions {
                    form.inline method="post" action="/ui/dead-letters/replay" {
                        (csrf(&s))
                        input type="hidden" name="id" value=(id);
                        input type="hidden" name="from" value="message";
                        button type="submit" { "Replay this message" }
                    }
                }
            }
            table.kv {
                tr { th { "state" } td { span.badge { (m.state.as_str()) } } }
                tr { th { "destination" } td { (destination) } }
                tr { th { "event type" } td { (m.event_type) } }
                @if !m.event_id.is_empty() {
                    tr { th { "event" } td { code { (m.event_id) } " (published: every subscriber's delivery shares it)" } }
                }
                @if let Some(l) = &m.lane {
                    tr { th { "FIFO lane" } td { code { (format!("{:?}", l.key)) } " #" (l.seq)
                        @if l.detached { " · out of order (a dead letter replayed after its lane moved on)" }
                        @if l.blocks { " · " span.badge.bad { "blocks its lane" } " (replay it to deliver it first, or purge it to skip it)" } } }
                }
                tr { th { "idempotency key" } td { (m.idempotency_key) } }
                tr { th { "attempts" } td { (m.attempts) " of " @if m.max_attempts == 0 { "the default" } @else { (m.max_attempts) }
                    @if replays > 0 { " since its " @if replays > 1 { "last replay (replayed " (replays) " times; " } @else { "replay (" } (before) " attempts before)" } } }
                tr { th { "enqueued" } td { (view::time(m.enqueued_ms)) } }
                @if m.next_attempt_ms > 0 { tr { th { "next attempt" } td {
                    @if let Some(why) = &held { "held: " (why) " (due since " (view::time(m.next_attempt_ms)) ")" }
                    @else if due { "now (due since " (view::time(m.next_attempt_ms)) ", waiting for a delivery slot)" }
                    @else { (view::time(m.next_attempt_ms)) } } } }
                @if m.completed_ms > 0 { tr { th { "completed" } td { (view::time(m.completed_ms)) } } }
                tr { th { "last error" } td.error { @if m.last_error.is_empty() && replays > 0 { "none since the replay" } @else { (m.last_error) } } }
                tr { th { "payload size" } td { (view::bytes(m.payload_size)) } }
            }
            h2 { "Attempts" }
            @if m.history.is_empty() { p { "No attempt has finished yet." } } @else {
                table.list {
                    thead { tr { th { "#" } th { "started" } th { "outcome" } th { "status" } th { "latency" } th { "error" } } }
                    tbody {
                        @for a in &m.history {
                            @if crate::api::view::is_replay(a) {
                                tr.replayed { td { "" } td { (view::time(a.started_ms)) } td colspan="4" { "replayed from the dead letters: the attempts below are new" } }
                            } @else {
                            tr {
                                td.num { (a.number) }
                                td { (view::time(a.started_ms)) }
                                td { (a.outcome) }
                                td.num { @if a.http_status == 0 { "-" } @else { (a.http_status) } }
                                td.num { (view::millis(a.latency_us as f64 / 1_000.0)) }
                                td.error { (view::excerpt(&a.error, 400)) }
                            }
                            }
                        }
                    }
                }
            }
            @if let Some(r) = &m.content {
                @if !r.headers.is_empty() {
                    h2 { "Headers" }
                    table.kv { @for (k, v) in &r.headers { tr { th { (k) } td { (v) } } } }
                }
                h2 { "Payload" }
                (payload(&r.payload))
            } @else {
                p.hint { "The payload has expired: the log keeps a delivered message's payload for log_retention_secs, within log_retention_mb." }
            }
        },
    ))
}

/// A payload as text: pretty JSON when it is JSON and small enough, else UTF-8 text, else a
/// hex dump of its start; always escaped, at most [`PAYLOAD_SHOWN`] bytes.
pub(super) fn payload(bytes: &[u8]) -> Markup {
    let cut = bytes.len() > PAYLOAD_SHOWN;
    let shown = &bytes[..bytes.len().min(PAYLOAD_SHOWN)];
    let text = if !cut && let Ok(v) = serde_json::from_slice::<serde_json::Value>(shown) {
        serde_json::to_string_pretty(&v).unwrap_or_default()
    } else {
        match std::str::from_utf8(shown) {
            Ok(t) => t.to_owned(),
            // A cut in the middle of a character is not binary.
            Err(e) if cut && e.valid_up_to() + 4 >= shown.len() => {
                String::from_utf8_lossy(&shown[..e.valid_up_to()]).into_owned()
            }
            Err(_) => hex_dump(&shown[..shown.len().min(4_096)]),
        }
    };
    html! {
        pre.payload { (text) }
        @if cut { p.hint { "Showing the first " (view::bytes(PAYLOAD_SHOWN as u64)) " of " (view::bytes(bytes.len() as u64)) "." } }
    }
}

pub(super) fn hex_dump(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::from("(binary)\n");
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let _ = write!(out, "{:08x}  ", i * 16);
        for b in chunk {
            let _ = write!(out, "{b:02x} ");
        }
        out.push('\n');
    }
    out
}

/// Why a message due at endpoint `name` is not being sent, if its endpoint holds it: an
/// operator's pause, a disabled endpoint, an open breaker, or a Retry-After.
async fn held_by(
    c: &Console,
    tenant: hookd_core::scope::TenantId,
    name: &str,
    now: u64,
) -> Result<Option<String>, Failure> {
    if let Some(e) = c.api.endpoint_view(tenant, name).await?
        && e.record.paused
    {
        return Ok(Some(format!(
            "the endpoint is paused{}",
            if e.record.paused_reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", e.record.paused_reason)
            }
        )));
    }
    let detail = c
        .engine
        .detail(vec![super::endpoints::endpoint_key(tenant, name)], false)
        .await?;
    let Some(push) = detail
        .into_iter()
        .flatten()
        .next()
        .and_then(|d| d.stats.push)
    else {
        return Ok(None);
    };
    if let Some(why) = push.disabled {
        return Ok(Some(format!("the endpoint is disabled ({why})")));
    }
    Ok(match push.breaker {
        hookd_core::breaker::BreakerState::Open { until_ms } => Some(format!(
            "the endpoint's breaker is open until {} ({} consecutive failures)",
            view::time(until_ms),
            push.consecutive_failures
        )),
        hookd_core::breaker::BreakerState::HalfOpen { .. } => {
            Some("the endpoint's breaker is half-open: one probe at a time".to_owned())
        }
        hookd_core::breaker::BreakerState::Closed => {
            push.paused_until_ms.filter(|t| *t > now).map(|t| {
                format!(
                    "the endpoint asked to wait (Retry-After) until {}",
                    view::time(t)
                )
            })
        }
    })
}

/// "Replay all matching…" on the Messages page: the estimate and a confirmation, then a
/// replay job of everything the search finds (at most 10,000, oldest first).
pub(crate) async fn replay_search(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Form(f): Form<SearchForm>,
) -> Page {
    let mut search = f.to_proto(c.clock.now_ms())?;
    search.page_token.clear();
    let request = |dry_run| pb::CreateReplayJobRequest {
        search: Some(search.clone()),
        dry_run,
        ..Default::default()
    };
    let back = format!("/ui/messages?{}", query(&f.pairs()));
    if f.confirm != "yes" {
        let r = c
            .api
            .create_replay_job(call(&s, request(true)))
            .await?
            .into_inner();
        let e = r.estimate.unwrap_or_default();
        return html_page(page(
            "Replay messages",
            Nav::Messages,
            Some(&s),
            "",
            html! {
                p.count { strong { (e.count) } " messages match: " (e.dead_letters) " dead letters (made ready again), "
                    (e.delivered) " delivered (sent again as copies), " (e.live) " still live (skipped: on their way)." }
                p { (e.bytes) " bytes; about " (view::duration((e.seconds * 1_000.0) as u64)) " at " (e.per_s) " a second."
                    @if e.truncated { " More match: the job takes the oldest 10,000." } }
                @if e.count == 0 {
                    p { "Nothing to do. " a href=(back) { "Back to the search" } }
                } @else {
                    form.inline method="post" action="/ui/replays" {
                        (csrf(&s)) (f.form_fields())
                        input type="hidden" name="confirm" value="yes";
                        button type="submit" { "Confirm: replay " (e.count) }
                    }
                    " " a href=(back) { "Cancel" }
                }
            },
        ));
    }
    let r = c
        .api
        .create_replay_job(call(&s, request(false)))
        .await?
        .into_inner();
    let job = r.job.unwrap_or_default();
    Ok(see_other(&with_notice(
        "/ui/replays",
        &format!(
            "Replay job {} started: {} messages at {} a second.",
            job.id, job.total, job.per_s
        ),
    )))
}
