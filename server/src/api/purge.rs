//! PurgeMessages (issue #53, 4): a search's (or ids') messages deleted for good, their
//! payloads' bytes overwritten on disk (`hookd_storage::store::scrub`).
//!
//! The selection is made here, from the search index: the search's matches (up to the
//! limit), then every other delivery of their events (a publish's deliveries share one
//! record in the log, so a payload is purged with all of them or not at all). The engine
//! erases what is no longer live in one durable round; the answer then waits (up to
//! `wait_ms`) for the checkpoint after which the bytes are overwritten and synced.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_proto::v1 as pb;
use hookd_storage::store::Store;
use hookd_storage::store::search::{Hit, Query, SearchState};
use tonic::{Request, Status};

use super::tenants::wire_key;
use super::{HookdService, refused, validate};
use crate::error::ApiError;

/// Messages one call purges by default, and at most.
const DEFAULT_LIMIT: u32 = 10_000;
pub(crate) const MAX_LIMIT: u32 = 100_000;
/// How long an answer waits for the overwrite by default, and at most.
const DEFAULT_WAIT_MS: u32 = 30_000;
const MAX_WAIT_MS: u32 = 600_000;
/// Index rows a selection may look at in all: past this it is refused as too broad.
const MAX_SCAN: u64 = 5_000_000;

fn invalid(message: String) -> Status {
    ApiError::InvalidArgument(message).into()
}

/// What a purge selected.
#[derive(Debug, Default)]
pub(crate) struct Selected {
    pub(crate) ids: Vec<MessageId>,
    pub(crate) live: u32,
    pub(crate) dead: u32,
    pub(crate) missing: u32,
    pub(crate) more: bool,
    pub(crate) bytes: u64,
}

/// Every hit of `query` (paged to its end, or past `limit`), into `hits`; whether it
/// stopped at the limit.
fn run(
    s: &Store,
    query: &Query,
    limit: usize,
    hits: &mut BTreeMap<MessageId, Hit>,
    scanned: &mut u64,
) -> Result<bool, ApiError> {
    let mut cursor = None;
    loop {
        let page = s.search(query, cursor, 1_000, validate::SEARCH_BUDGET)?;
        *scanned += page.scanned;
        for hit in page.hits {
            hits.entry(hit.id).or_insert(hit);
        }
        if hits.len() > limit {
            return Ok(true);
        }
        if *scanned > MAX_SCAN {
            return Err(ApiError::InvalidArgument(format!(
                "the selection looked at over {MAX_SCAN} index rows: narrow it (a destination, a state, a time window)"
            )));
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(false),
        }
    }
}

/// The messages `query` or `ids` select (at most `limit`, then every delivery of their
/// events), as they are now.
pub(crate) fn select(
    s: &Store,
    tenant: TenantId,
    query: Option<&Query>,
    ids: &[MessageId],
    limit: usize,
) -> Result<Selected, ApiError> {
    let mut out = Selected::default();
    let mut hits: BTreeMap<MessageId, Hit> = BTreeMap::new();
    let mut scanned = 0;
    for id in ids {
        // By id: its own search (which finds it only if it is the tenant's and kept).
        let by_id = Query {
            tenant,
            event_id: Some(id.to_string()),
            ..Default::default()
        };
        let page = s.search(&by_id, None, 1_000, validate::SEARCH_BUDGET)?;
        match page.hits.into_iter().find(|h| h.id == *id) {
            Some(hit) => {
                hits.insert(hit.id, hit);
            }
            None => out.missing += 1,
        }
    }
    if let Some(query) = query {
        out.more = run(s, query, limit, &mut hits, &mut scanned)?;
        if out.more {
            // The oldest `limit`: a repeated call goes on from there.
            while hits.len() > limit {
                hits.pop_last();
            }
        }
    }
    // Every delivery of their events: a publish's deliveries share the payload.
    let events: HashSet<String> = hits
        .values()
        .map(|h| h.event_id.clone())
        .filter(|e| !e.is_empty())
        .collect();
    for event in events {
        let query = Query {
            tenant,
            event_id: Some(event),
            ..Default::default()
        };
        run(s, &query, usize::MAX, &mut hits, &mut scanned)?;
    }
    for hit in hits.values() {
        match hit.state {
            SearchState::Pending | SearchState::Retrying | SearchState::InFlight => {
                out.live += 1;
            }
            SearchState::Dead => {
                out.dead += 1;
                out.bytes += hit.payload_bytes;
            }
            SearchState::Delivered => out.bytes += hit.payload_bytes,
            SearchState::Expired => {}
        }
    }
    out.ids = hits.into_keys().collect();
    Ok(out)
}

impl HookdService {
    pub(super) async fn purge_messages_in(
        &self,
        request: Request<pb::PurgeMessagesRequest>,
    ) -> Result<pb::PurgeMessagesResponse, Status> {
        let tenant = self.tenant_of(&request)?;
        // A token limited to destinations purges within one of them, named.
        let key = request
            .get_ref()
            .search
            .as_ref()
            .and_then(|s| wire_key(&s.destination));
        self.limit_to(&request, key)?;
        let req = request.into_inner();
        if usize::from(req.search.is_some()) + usize::from(!req.ids.is_empty()) != 1 {
            return Err(invalid("search: give exactly one of search or ids".into()));
        }
        let limit =
            validate::count_or_default(req.limit, DEFAULT_LIMIT, MAX_LIMIT, "limit")? as usize;
        let wait_ms =
            validate::count_or_default(req.wait_ms, DEFAULT_WAIT_MS, MAX_WAIT_MS, "wait_ms")?;
        let ids = validate::message_ids(&req.ids, limit)?;
        let query = match req.search {
            Some(search) => Some(
                validate::search(tenant, search)
                    .map_err(|e| match e {
                        ApiError::InvalidArgument(m) => invalid(format!("search.{m}")),
                        other => other.into(),
                    })?
                    .query,
            ),
            None => None,
        };
        let selected = self
            .read(move |s| select(s, tenant, query.as_ref(), &ids, limit))
            .await?;
        let matched = selected.ids.len() as u32;
        if req.dry_run {
            return Ok(pb::PurgeMessagesResponse {
                matched,
                purged: matched - selected.live,
                dead: selected.dead,
                live: selected.live,
                missing: selected.missing,
                more: selected.more,
                overwritten: false,
                bytes: selected.bytes,
            });
        }
        let erased = self
            .engine
            .erase(tenant, selected.ids)
            .await
            .map_err(refused(""))?;
        let overwritten = self
            .engine
            .wait_scrubbed(Duration::from_millis(u64::from(wait_ms)))
            .await
            .map_err(refused(""))?;
        Ok(pb::PurgeMessagesResponse {
            matched,
            purged: erased.erased,
            dead: erased.dead,
            live: erased.live,
            missing: selected.missing + erased.missing,
            more: selected.more,
            overwritten,
            bytes: selected.bytes,
        })
    }
}
