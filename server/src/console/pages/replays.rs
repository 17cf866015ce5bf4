//! Replay jobs (`/ui/replays`): each job's selection and progress (replayed, skipped,
//! failed, remaining, ETA), with pause, resume and cancel. A job is made from the
//! Messages page's "Replay all matching…" (`messages::replay_search`), which shows the
//! estimate first.

use super::*;

/// `?notice=`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReplaysQuery {
    #[serde(default)]
    notice: String,
    /// Only jobs whose id, selection, state or maker contains this.
    #[serde(default)]
    q: String,
}

use hookd_ctl::replay::state_text;

pub(crate) async fn replays(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Query(q): Query<ReplaysQuery>,
) -> Page {
    let jobs = c
        .api
        .list_replay_jobs(call(&s, pb::ListReplayJobsRequest {}))
        .await?
        .into_inner()
        .jobs;
    let every = jobs.len();
    let wanted = q.q.trim().to_owned();
    let jobs: Vec<_> = jobs
        .into_iter()
        .filter(|j| {
            let q = &wanted;
            q.is_empty()
                || j.id.contains(q.as_str())
                || j.selection.contains(q.as_str())
                || j.created_by.contains(q.as_str())
                || state_text(j.state).contains(q.as_str())
        })
        .collect();
    html_page(page(
        "Replay jobs",
        Nav::Replays,
        Some(&s),
        &q.notice,
        html! {
            p.hint { "A replay job resends a selection at its pace: dead letters are made ready again, delivered messages are sent again as copies with their original "
                code { "webhook-id" } " and " code { "hookd-replay" } ", live ones are skipped. Its progress is durable: a restart resumes it where it was. Make one from a search on the "
                a href="/ui/messages" { "Messages" } " page." }
            form.filters method="get" action="/ui/replays" role="search" {
                label { "Id, selection, state or maker contains " input type="search" name="q" value=(wanted); }
                button type="submit" { "Filter" }
                @if !wanted.is_empty() { " " a href="/ui/replays" { "clear" } }
            }
            @if jobs.is_empty() {
                p { @if every == 0 { "No replay job yet." } @else { "None of the " (every) " replay jobs matches." } }
            } @else {
                table.list {
                    thead { tr { th { "job" } th { "state" } th { "selection" } th { "progress" } th { "replayed" } th { "skipped" } th { "failed" } th { "remaining" } th { "pace" } th { "ETA" } th { "made" } th {} } }
                    tbody {
                        @for j in &jobs {
                            tr {
                                td.id { (j.id) }
                                td { (state_text(j.state)) }
                                td { (j.selection) @if !j.created_by.is_empty() { br; span.hint { "by " (j.created_by) } } }
                                td { progress max=(j.total.max(1)) value=(j.total - j.remaining) { (j.total - j.remaining) "/" (j.total) } }
                                td.num { (j.replayed) }
                                td.num { (j.skipped) }
                                td.num { (j.failed) @if !j.last_failure.is_empty() { br; span.error { (view::excerpt(&j.last_failure, 160)) } } }
                                td.num { (j.remaining) }
                                td.num { (j.per_s) "/s" }
                                td { (view::time(j.eta_unix_ms)) }
                                td { (view::time(j.created_unix_ms)) }
                                td {
                                    @if s.may_change() {
                                        @let running = j.state == pb::ReplayJobState::Running as i32;
                                        @let paused = j.state == pb::ReplayJobState::Paused as i32;
                                        @if running { (action_form(&s, &j.id, "pause", "Pause")) }
                                        @if paused { (action_form(&s, &j.id, "resume", "Resume")) }
                                        @if running || paused { (action_form(&s, &j.id, "cancel", "Cancel")) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    ))
}

fn action_form(s: &Session, id: &str, action: &str, label: &str) -> Markup {
    html! {
        form.inline method="post" action=(format!("/ui/replays/{}/{action}", segment(id))) {
            (csrf(s))
            button.danger[action == "cancel"] type="submit" { (label) }
        }
    }
}

pub(crate) async fn replay_action(
    State(c): Shared,
    Extension(s): Extension<Session>,
    Path((id, action)): Path<(String, String)>,
) -> Page {
    let (action, done) = match action.as_str() {
        "pause" => (pb::ReplayJobAction::Pause, "paused"),
        "resume" => (pb::ReplayJobAction::Resume, "resumed"),
        "cancel" => (pb::ReplayJobAction::Cancel, "cancelled"),
        other => {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                format!("action: {other:?} is not pause, resume or cancel"),
            ));
        }
    };
    c.api
        .update_replay_job(call(
            &s,
            pb::UpdateReplayJobRequest {
                id: id.clone(),
                action: action as i32,
            },
        ))
        .await?;
    Ok(see_other(&with_notice(
        "/ui/replays",
        &format!("Replay job {id} {done}."),
    )))
}
