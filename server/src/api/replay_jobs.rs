//! Replay jobs on the wire (issue #53): the selection is made here (ids, a search, or the
//! recovery case), estimated, and handed to the registry (`crate::replay_jobs`).

use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_proto::v1 as pb;
use hookd_storage::store::ReplayJobRecord;
use hookd_storage::store::ReplayJobState;
use hookd_storage::store::search::{Query, SearchState};
use tonic::{Request, Status};

use super::tenants::{caller, wire_key};
use super::{HookdService, caller_name, validate};
use crate::error::ApiError;
use crate::replay_jobs::{Action, MAX_SELECTED, Selected};

/// What a job selects by default, and at most.
const DEFAULT_SELECTED: u32 = 10_000;

/// Index rows a selection may look at in all, over its pages: past this it is refused as
/// too broad (narrow it by destination, state or time).
const MAX_SELECTION_SCAN: u64 = 5_000_000;

/// Unix milliseconds as an HTTP date (UTC).
fn time_text(unix_ms: u64) -> String {
    httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms))
}

/// A refusal of a nested message's field, named from the request's top.
fn nested(prefix: &str, e: ApiError) -> Status {
    match e {
        ApiError::InvalidArgument(m) => invalid(format!("{prefix}{m}")),
        other => other.into(),
    }
}

fn invalid(message: String) -> Status {
    ApiError::InvalidArgument(message).into()
}

pub(crate) fn shown(job: &ReplayJobRecord, now_ms: u64) -> pb::ReplayJob {
    let state = match job.state() {
        Some(ReplayJobState::Running) => pb::ReplayJobState::Running,
        Some(ReplayJobState::Paused) => pb::ReplayJobState::Paused,
        Some(ReplayJobState::Cancelled) => pb::ReplayJobState::Cancelled,
        Some(ReplayJobState::Done) => pb::ReplayJobState::Done,
        None => pb::ReplayJobState::Unspecified,
    };
    pb::ReplayJob {
        id: job.id.clone(),
        state: state as i32,
        selection: job.selection.clone(),
        created_unix_ms: job.created_ms,
        updated_unix_ms: job.updated_ms,
        finished_unix_ms: job.finished_ms,
        per_s: job.per_s,
        total: job.total,
        replayed: job.replayed,
        skipped: job.skipped,
        failed: job.failed,
        remaining: job.remaining(),
        bytes: job.bytes,
        last_failure: job.last_failure.clone(),
        eta_unix_ms: crate::replay_jobs::eta_ms(job, now_ms),
        created_by: job.created_by.clone(),
    }
}

/// The searches a request selects by (their union), what it says for people, and the
/// destination key it is limited to.
struct Plan {
    queries: Vec<Query>,
    ids: Vec<MessageId>,
    /// Dead letters this filter matches.
    dead: Option<hookd_core::deadletters::Filter>,
    selection: String,
    key: Option<String>,
}

fn plan(tenant: TenantId, req: &pb::CreateReplayJobRequest) -> Result<Plan, Status> {
    let given = usize::from(!req.ids.is_empty())
        + usize::from(req.search.is_some())
        + usize::from(req.recovery.is_some())
        + usize::from(req.dead_letters.is_some());
    if given != 1 {
        return Err(invalid(
            "ids: give exactly one of ids, search, recovery or dead_letters".into(),
        ));
    }
    if let Some(f) = &req.dead_letters {
        let filter = validate::dead_letter_filter(tenant, f.clone(), "dead_letters")?;
        return Ok(Plan {
            selection: describe_dead(f),
            key: wire_key(&f.destination),
            queries: Vec::new(),
            ids: Vec::new(),
            dead: Some(filter),
        });
    }
    if !req.ids.is_empty() {
        let ids = validate::message_ids(&req.ids, MAX_SELECTED)?;
        return Ok(Plan {
            selection: format!("{} message(s) by id", ids.len()),
            queries: Vec::new(),
            ids,
            dead: None,
            key: None,
        });
    }
    if let Some(search) = &req.search {
        let checked = validate::search(tenant, search.clone()).map_err(|e| nested("search.", e))?;
        return Ok(Plan {
            selection: describe_search(search),
            key: wire_key(&search.destination),
            queries: vec![checked.query],
            ids: Vec::new(),
            dead: None,
        });
    }
    let Some(r) = &req.recovery else {
        return Err(invalid("recovery: is required".into()));
    };
    let Some(key) = wire_key(&r.destination) else {
        return Err(invalid("recovery.destination: is required".into()));
    };
    if r.since_unix_ms == 0 {
        return Err(invalid(
            "recovery.since_unix_ms: is required (what was missed since when)".into(),
        ));
    }
    let destination = validate::destination_filter(tenant, r.destination.clone())
        .map_err(|e| nested("recovery.", e))?
        .map(|d| d.encode());
    let mut statuses = Vec::new();
    for (i, &status) in r.delivered_statuses.iter().enumerate() {
        if !(100..=999).contains(&status) {
            return Err(invalid(format!(
                "recovery.delivered_statuses[{i}]: {status} is not an HTTP status (100 to 999)"
            )));
        }
        if !statuses.contains(&status) {
            statuses.push(status);
        }
    }
    if statuses.len() > 16 {
        return Err(invalid(format!(
            "recovery.delivered_statuses: {} statuses is over the limit of 16",
            statuses.len()
        )));
    }
    let base = Query {
        tenant,
        destination,
        after_ms: r.since_unix_ms,
        ..Default::default()
    };
    let mut queries = vec![Query {
        states: vec![SearchState::Dead],
        ..base.clone()
    }];
    for &status in &statuses {
        queries.push(Query {
            states: vec![SearchState::Delivered],
            status: Some(status),
            ..base.clone()
        });
    }
    let mut selection = format!("{key}: not delivered since {}", time_text(r.since_unix_ms));
    if !statuses.is_empty() {
        let list: Vec<String> = statuses.iter().map(u32::to_string).collect();
        selection.push_str(&format!(", or delivered with status {}", list.join("|")));
    }
    Ok(Plan {
        queries,
        ids: Vec::new(),
        dead: None,
        selection,
        key: Some(key),
    })
}

fn describe_dead(f: &pb::DeadLetterFilter) -> String {
    let mut parts = vec!["dead letters".to_owned()];
    if let Some(key) = wire_key(&f.destination) {
        parts.push(format!("of {key}"));
    }
    if f.dead_after_unix_ms > 0 {
        parts.push(format!("dead since {}", time_text(f.dead_after_unix_ms)));
    }
    if f.dead_before_unix_ms > 0 {
        parts.push(format!("dead before {}", time_text(f.dead_before_unix_ms)));
    }
    if f.http_status > 0 {
        parts.push(format!("status {}", f.http_status));
    }
    if !f.error_contains.is_empty() {
        parts.push(format!("error ~ {:?}", f.error_contains));
    }
    parts.join(" ")
}

fn describe_search(s: &pb::SearchMessagesRequest) -> String {
    let mut parts = Vec::new();
    if let Some(key) = wire_key(&s.destination) {
        parts.push(key);
    }
    if !s.event_type.is_empty() {
        parts.push(format!("event type {}", s.event_type));
    }
    if !s.event_id.is_empty() {
        parts.push(format!("event {}", s.event_id));
    }
    if !s.idempotency_key.is_empty() {
        parts.push(format!("idempotency key {}", s.idempotency_key));
    }
    if !s.states.is_empty() {
        let states: Vec<&str> = s
            .states
            .iter()
            .map(|v| {
                pb::MessageState::try_from(*v)
                    .map_or("?", |st| st.as_str_name())
                    .trim_start_matches("MESSAGE_STATE_")
            })
            .collect();
        parts.push(format!("state {}", states.join("|").to_lowercase()));
    }
    if s.last_status > 0 {
        parts.push(format!("status {}", s.last_status));
    }
    if s.created_after_unix_ms > 0 {
        parts.push(format!("since {}", time_text(s.created_after_unix_ms)));
    }
    if s.created_before_unix_ms > 0 {
        parts.push(format!("before {}", time_text(s.created_before_unix_ms)));
    }
    for (pointer, value) in &s.payload {
        parts.push(format!("{pointer}={value}"));
    }
    if parts.is_empty() {
        "every retained message".into()
    } else {
        parts.join(", ")
    }
}

/// Puts the messages of each FIFO lane (destination and ordering key) in their numbers'
/// order, in the places the lane's messages hold: ids made in one millisecond are not
/// ordered among themselves, a lane's numbers are (the order hookd stored them in).
fn in_lane_order(hits: &mut [hookd_storage::store::search::Hit]) {
    let mut lanes: std::collections::HashMap<(String, String), Vec<usize>> =
        std::collections::HashMap::new();
    for (i, hit) in hits.iter().enumerate() {
        if let Some((key, _)) = &hit.lane {
            lanes
                .entry((hit.destination.clone(), key.clone()))
                .or_default()
                .push(i);
        }
    }
    for places in lanes.into_values() {
        let mut members: Vec<_> = places.iter().map(|&i| hits[i].clone()).collect();
        members.sort_by_key(|h| h.lane.as_ref().map_or(0, |(_, seq)| *seq));
        for (place, hit) in places.into_iter().zip(members) {
            hits[place] = hit;
        }
    }
}

/// What a selection found.
#[derive(Debug, Default)]
pub(super) struct Found {
    pub(super) ids: Vec<MessageId>,
    pub(super) bytes: u64,
    dead: u64,
    delivered: u64,
    live: u64,
    expired: u64,
    truncated: bool,
}

impl HookdService {
    /// ReplayDeadLetters with `as_job`: its dead letters (by id, of a destination, or
    /// matching a filter) replayed by a replay job.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn dead_letters_as_job(
        &self,
        tenant: TenantId,
        ids: Vec<MessageId>,
        destination: Option<hookd_core::destination::Destination>,
        filter: Option<hookd_core::deadletters::Filter>,
        limit: usize,
        per_s: f64,
        by: String,
    ) -> Result<pb::ReplayDeadLettersResponse, Status> {
        let key = destination.as_ref().map(|d| d.describe());
        let (found, selection) = match (filter, destination) {
            (Some(filter), _) => {
                let selection = format!("dead letters matching a filter (at most {limit})");
                (self.select_dead(filter, limit).await?, selection)
            }
            (None, Some(d)) => {
                let selection = format!("dead letters of {}", d.describe());
                let filter = hookd_core::deadletters::Filter {
                    tenant,
                    destination: Some(d),
                    ..Default::default()
                };
                (self.select_dead(filter, limit).await?, selection)
            }
            (None, None) => {
                let mut ids = ids;
                ids.sort();
                ids.dedup();
                let selection = format!("{} dead letter(s) by id", ids.len());
                let for_bytes = ids.clone();
                let bytes = self.read(move |s| Ok(s.records_bytes(&for_bytes)?)).await?;
                let found = Found {
                    ids,
                    bytes,
                    ..Found::default()
                };
                (found, selection)
            }
        };
        let per_s = self.pace(tenant, key.as_deref(), per_s).await?;
        let matched = u32::try_from(found.ids.len()).unwrap_or(u32::MAX);
        let job = self
            .replays
            .create(
                tenant,
                Selected {
                    ids: found.ids,
                    bytes: found.bytes,
                    selection,
                    destination: key.unwrap_or_default(),
                },
                per_s,
                by,
            )
            .await?;
        Ok(pb::ReplayDeadLettersResponse {
            replayed: 0,
            matched,
            last_due_unix_ms: 0,
            job_id: job.id,
        })
    }

    /// Dead letters `filter` matches (at most `limit`), oldest first.
    pub(super) async fn select_dead(
        &self,
        filter: hookd_core::deadletters::Filter,
        limit: usize,
    ) -> Result<Found, Status> {
        self.read(move |s| {
            let (rows, _) = s.dead_summaries(
                filter.tenant,
                filter.destination.as_ref(),
                validate::MAX_DEAD_SCAN,
            )?;
            let mut rows: Vec<_> = rows.into_iter().filter(|d| filter.matches(d)).collect();
            rows.sort_by_key(|d| d.id);
            let truncated = rows.len() > limit;
            rows.truncate(limit);
            let ids: Vec<MessageId> = rows.iter().map(|d| d.id).collect();
            Ok(Found {
                bytes: s.records_bytes(&ids)?,
                dead: ids.len() as u64,
                ids,
                truncated,
                ..Found::default()
            })
        })
        .await
    }

    /// Runs `plan`'s searches to the end (or `limit`), oldest first.
    async fn select(&self, tenant: TenantId, plan: Plan, limit: usize) -> Result<Found, Status> {
        if let Some(filter) = plan.dead {
            return self.select_dead(filter, limit).await;
        }
        let queries = plan.queries;
        let ids = plan.ids;
        self.read(move |s| {
            let mut found = Found::default();
            let mut seen = std::collections::HashSet::new();
            let mut hits = Vec::new();
            let mut scanned = 0u64;
            if !ids.is_empty() {
                // By id: each as its own search (which finds it only if it is the
                // tenant's and still kept).
                for (i, id) in ids.iter().enumerate() {
                    let query = Query {
                        tenant,
                        event_id: Some(id.to_string()),
                        ..Default::default()
                    };
                    let page = s.search(&query, None, 1_000, validate::SEARCH_BUDGET)?;
                    match page.hits.into_iter().find(|h| h.id == *id) {
                        Some(hit) => {
                            if seen.insert(hit.id) {
                                hits.push(hit);
                            }
                        }
                        None => {
                            return Err(ApiError::NotFound(format!(
                                "ids[{i}]: no message {id} is kept"
                            )));
                        }
                    }
                }
            }
            for query in &queries {
                let mut cursor = None;
                loop {
                    let page = s.search(query, cursor, 1_000, validate::SEARCH_BUDGET)?;
                    scanned += page.scanned;
                    for hit in page.hits {
                        if seen.insert(hit.id) {
                            hits.push(hit);
                        }
                    }
                    if hits.len() > limit {
                        found.truncated = true;
                        break;
                    }
                    if scanned > MAX_SELECTION_SCAN {
                        return Err(ApiError::InvalidArgument(format!(
                            "the selection looked at over {MAX_SELECTION_SCAN} index rows: narrow it (a destination, a state, a time window)"
                        )));
                    }
                    match page.next {
                        Some(next) => cursor = Some(next),
                        None => break,
                    }
                }
            }
            // A delivered message whose payload is gone cannot be sent again: counted, not
            // selected.
            let before = hits.len();
            hits.retain(|h| h.state != SearchState::Expired);
            found.expired = (before - hits.len()) as u64;
            // Oldest first: the order the job replays in.
            hits.sort_by_key(|h| h.id);
            if hits.len() > limit {
                found.truncated = true;
                hits.truncate(limit);
            }
            in_lane_order(&mut hits);
            for hit in &hits {
                found.bytes += hit.payload_bytes;
                match hit.state {
                    SearchState::Dead => found.dead += 1,
                    SearchState::Delivered => found.delivered += 1,
                    _ => found.live += 1,
                }
            }
            found.ids = hits.into_iter().map(|h| h.id).collect();
            Ok(found)
        })
        .await
    }

    /// The pace: the one asked for (or the server's), never above the endpoint's own rate
    /// limit when the job is limited to one.
    async fn pace(&self, tenant: TenantId, key: Option<&str>, asked: f64) -> Result<f64, Status> {
        let mut per_s = if asked > 0.0 {
            asked
        } else {
            self.limits.replay_rate_per_s
        };
        if let Some(name) = key.and_then(|k| k.strip_prefix("endpoint:")) {
            let name = name.to_owned();
            let endpoint = self.read(move |s| Ok(s.endpoint(tenant, &name)?)).await?;
            if let Some(e) = endpoint
                && e.rate_limit_per_s > 0.0
            {
                per_s = per_s.min(e.rate_limit_per_s);
            }
        }
        Ok(per_s)
    }

    pub(super) async fn create_replay_job_in(
        &self,
        request: Request<pb::CreateReplayJobRequest>,
    ) -> Result<pb::CreateReplayJobResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let plan = plan(tenant, request.get_ref())?;
        // A token limited to destinations replays one of them, named.
        self.limit_to(&request, plan.key.clone())?;
        let by = caller_name(&request);
        let req = request.into_inner();
        if !req.max_per_s.is_finite() || !(0.0..=1_000_000.0).contains(&req.max_per_s) {
            return Err(invalid(format!(
                "max_per_s: {} is not within 0..=1000000",
                req.max_per_s
            )));
        }
        let limit = match req.limit {
            0 => DEFAULT_SELECTED,
            n if n as usize > MAX_SELECTED => {
                return Err(invalid(format!(
                    "limit: {n} is over the limit of {MAX_SELECTED}"
                )));
            }
            n => n,
        } as usize;
        let key = plan.key.clone();
        let selection = plan.selection.clone();
        let per_s = self.pace(tenant, key.as_deref(), req.max_per_s).await?;
        let found = self.select(tenant, plan, limit).await?;
        let estimate = pb::ReplayEstimate {
            count: found.ids.len() as u64,
            dead_letters: found.dead,
            delivered: found.delivered,
            live: found.live,
            expired: found.expired,
            bytes: found.bytes,
            seconds: found.ids.len() as f64 / per_s,
            per_s,
            truncated: found.truncated,
        };
        if req.dry_run {
            return Ok(pb::CreateReplayJobResponse {
                estimate: Some(estimate),
                job: None,
            });
        }
        let job = self
            .replays
            .create(
                tenant,
                Selected {
                    ids: found.ids,
                    bytes: found.bytes,
                    selection,
                    destination: key.unwrap_or_default(),
                },
                per_s,
                by,
            )
            .await?;
        Ok(pb::CreateReplayJobResponse {
            estimate: Some(estimate),
            job: Some(shown(&job, self.clock.now_ms())),
        })
    }

    /// A job the caller may see: its tenant's, and for a token limited to destinations,
    /// one limited to one of them.
    fn may_see<T>(&self, request: &Request<T>, job: &ReplayJobRecord) -> bool {
        match caller(request) {
            Some(c) if c.limited() => !job.destination.is_empty() && c.may_use(&job.destination),
            _ => true,
        }
    }

    pub(super) async fn get_replay_job_in(
        &self,
        request: Request<pb::GetReplayJobRequest>,
    ) -> Result<pb::GetReplayJobResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let id = &request.get_ref().id;
        let not_found = || Status::from(ApiError::NotFound(format!("id: no replay job {id:?}")));
        let job = self.replays.get(tenant, id).await.ok_or_else(not_found)?;
        if !self.may_see(&request, &job) {
            return Err(not_found());
        }
        Ok(pb::GetReplayJobResponse {
            job: Some(shown(&job, self.clock.now_ms())),
        })
    }

    pub(super) async fn list_replay_jobs_in(
        &self,
        request: Request<pb::ListReplayJobsRequest>,
    ) -> Result<pb::ListReplayJobsResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let now = self.clock.now_ms();
        let jobs = self
            .replays
            .list(tenant)
            .await
            .iter()
            .filter(|j| self.may_see(&request, j))
            .map(|j| shown(j, now))
            .collect();
        Ok(pb::ListReplayJobsResponse { jobs })
    }

    pub(super) async fn update_replay_job_in(
        &self,
        request: Request<pb::UpdateReplayJobRequest>,
    ) -> Result<pb::UpdateReplayJobResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        let req = request.get_ref();
        let action = match pb::ReplayJobAction::try_from(req.action) {
            Ok(pb::ReplayJobAction::Pause) => Action::Pause,
            Ok(pb::ReplayJobAction::Resume) => Action::Resume,
            Ok(pb::ReplayJobAction::Cancel) => Action::Cancel,
            _ => {
                return Err(invalid(format!(
                    "action: {} is not PAUSE, RESUME or CANCEL",
                    req.action
                )));
            }
        };
        let id = req.id.clone();
        let not_found = || Status::from(ApiError::NotFound(format!("id: no replay job {id:?}")));
        let job = self.replays.get(tenant, &id).await.ok_or_else(not_found)?;
        if !self.may_see(&request, &job) {
            return Err(not_found());
        }
        let job = self.replays.update(tenant, &id, action).await?;
        Ok(pb::UpdateReplayJobResponse {
            job: Some(shown(&job, self.clock.now_ms())),
        })
    }
}
