//! `hookd replay ...`: replay jobs (CreateReplayJob and its kin). `missed` is the
//! recovery case: what an endpoint did not get since a time, and what it answered with
//! given statuses; `create` replays a search's results or ids. Both print the estimate
//! first; with `--dry-run`, only the estimate.

use clap::Subcommand;
use hookd_proto::v1 as pb;

use super::{Api, Failure, SearchArgs, now_ms, parse_age, show, table, when};

#[derive(Debug, Subcommand)]
pub enum ReplayCmd {
    /// Resend what a destination missed since a time: its dead letters, and with
    /// --status what it answered with that status (it took the event, wrongly).
    Missed {
        /// `endpoint:NAME` (or `queue:NAME`, a URL).
        #[arg(long)]
        destination: String,
        /// Created within this long before now (90m, 6h, 2d).
        #[arg(long, value_parser = parse_age)]
        since: u64,
        /// Also resend what was delivered with this status (repeat, or comma-separated).
        #[arg(long = "status", value_delimiter = ',')]
        statuses: Vec<u32>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// Resend the messages a search finds (the search's flags), or these ids (--id).
    Create {
        #[command(flatten)]
        search: SearchArgs,
        /// A message id; repeat (instead of the search's flags).
        #[arg(long = "id")]
        ids: Vec<String>,
        #[command(flatten)]
        run: RunArgs,
    },
    /// A job's progress.
    Status {
        id: String,
    },
    /// The tenant's jobs, newest first.
    List,
    Pause {
        id: String,
    },
    Resume {
        id: String,
    },
    Cancel {
        id: String,
    },
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Only print the estimate (count, bytes, time at the pace); make no job.
    #[arg(long)]
    dry_run: bool,
    /// Messages per second (default: the server's dead_letters.replay_rate_per_s; never
    /// above the endpoint's rate limit).
    #[arg(long)]
    per_s: Option<f64>,
    /// Select at most this many (default 10000).
    #[arg(long = "max")]
    max: Option<u32>,
}

pub(super) async fn replay(
    api: &mut Api,
    json: bool,
    cmd: ReplayCmd,
    server: &str,
) -> Result<(), Failure> {
    let fail = |s: tonic::Status| Failure::status(server, &s);
    let action = |id: String, action: pb::ReplayJobAction| pb::UpdateReplayJobRequest {
        id,
        action: action as i32,
    };
    let update = match cmd {
        ReplayCmd::Missed {
            destination,
            since,
            statuses,
            run,
        } => {
            let request = pb::CreateReplayJobRequest {
                recovery: Some(pb::ReplayRecovery {
                    destination: Some(super::destination(&destination)?),
                    since_unix_ms: now_ms().saturating_sub(since),
                    delivered_statuses: statuses,
                }),
                ..run.request()
            };
            return create(api, json, request, server).await;
        }
        ReplayCmd::Create { search, ids, run } => {
            let request = match ids.is_empty() {
                true => pb::CreateReplayJobRequest {
                    search: Some(super::search_request(&search)?),
                    ..run.request()
                },
                false => pb::CreateReplayJobRequest {
                    ids,
                    ..run.request()
                },
            };
            return create(api, json, request, server).await;
        }
        ReplayCmd::Status { id } => {
            let r = api
                .get_replay_job(pb::GetReplayJobRequest { id })
                .await
                .map_err(fail)?
                .into_inner();
            return show(json, &r, |r| print_jobs(r.job.as_slice()));
        }
        ReplayCmd::List => {
            let r = api
                .list_replay_jobs(pb::ListReplayJobsRequest {})
                .await
                .map_err(fail)?
                .into_inner();
            return show(json, &r, |r| print_jobs(&r.jobs));
        }
        ReplayCmd::Pause { id } => action(id, pb::ReplayJobAction::Pause),
        ReplayCmd::Resume { id } => action(id, pb::ReplayJobAction::Resume),
        ReplayCmd::Cancel { id } => action(id, pb::ReplayJobAction::Cancel),
    };
    let r = api
        .update_replay_job(update)
        .await
        .map_err(fail)?
        .into_inner();
    show(json, &r, |r| print_jobs(r.job.as_slice()))
}

impl RunArgs {
    fn request(&self) -> pb::CreateReplayJobRequest {
        pb::CreateReplayJobRequest {
            dry_run: self.dry_run,
            max_per_s: self.per_s.unwrap_or(0.0),
            limit: self.max.unwrap_or(0),
            ..Default::default()
        }
    }
}

async fn create(
    api: &mut Api,
    json: bool,
    request: pb::CreateReplayJobRequest,
    server: &str,
) -> Result<(), Failure> {
    let r = api
        .create_replay_job(request)
        .await
        .map_err(|s| Failure::status(server, &s))?
        .into_inner();
    show(json, &r, |r| {
        if let Some(e) = &r.estimate {
            super::outln!(
                "{} {} ({} dead letters, {} delivered, {} still live: skipped), {} bytes, about {:.1} s at {}/s{}",
                if r.job.is_some() {
                    "replaying"
                } else {
                    "would replay"
                },
                e.count,
                e.dead_letters,
                e.delivered,
                e.live,
                e.bytes,
                e.seconds,
                e.per_s,
                if e.truncated {
                    " (more matched: the oldest are taken; raise --max)"
                } else {
                    ""
                }
            );
        }
        print_jobs(r.job.as_slice());
    })
}

/// A replay job's state as people read it (the console's too).
pub fn state_text(state: i32) -> &'static str {
    match pb::ReplayJobState::try_from(state) {
        Ok(pb::ReplayJobState::Running) => "running",
        Ok(pb::ReplayJobState::Paused) => "paused",
        Ok(pb::ReplayJobState::Cancelled) => "cancelled",
        Ok(pb::ReplayJobState::Done) => "done",
        _ => "?",
    }
}

pub(super) fn print_jobs(jobs: &[pb::ReplayJob]) {
    let rows = jobs
        .iter()
        .map(|j| {
            vec![
                j.id.clone(),
                state_text(j.state).to_owned(),
                format!("{}/{}", j.replayed, j.total),
                j.skipped.to_string(),
                j.failed.to_string(),
                j.remaining.to_string(),
                format!("{}", j.per_s),
                match j.eta_unix_ms {
                    0 => "-".to_owned(),
                    ms => when(ms),
                },
                j.selection.clone(),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "STATE",
            "REPLAYED",
            "SKIPPED",
            "FAILED",
            "REMAINING",
            "PER S",
            "ETA",
            "SELECTION",
        ],
        rows,
    );
    for j in jobs.iter().filter(|j| !j.last_failure.is_empty()) {
        super::outln!("{}: last failure: {}", j.id, j.last_failure);
    }
}
