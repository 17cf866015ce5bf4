//! Dead-letter replay, endpoint deletion and the stats snapshot.

use std::collections::HashSet;

use super::enqueue::waiting;
use super::index::{LaneTag, Live};
use super::{Engine, PutOutcome, Refusal, ReplayOutcome, ReplayRequest, Tx};
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::outcome::AttemptOutcome;
use hookd_core::scope::TenantId;
use hookd_core::stats::{DestinationSnapshot, StatsSnapshot, StorageSnapshot};
use hookd_metrics::DestinationGauges;
use hookd_storage::store::{AttemptRecord, State, StoreError};
use hookd_storage::store::{EndpointRecord, SigningKeyRecord};

/// Retired keys an endpoint keeps at most (the oldest go first); the JWKS serves those
/// retired within `[delivery] retired_signing_key_secs`.
pub(crate) const MAX_RETIRED_KEYS: usize = 16;

/// An endpoint's keys after a PutEndpoint: `current` (the put's, in use) keep the time
/// they were first seen; a key of `before` the put no longer has is retired now (or stays
/// retired since it was).
fn signing_keys(
    before: &[SigningKeyRecord],
    current: Vec<SigningKeyRecord>,
    now: u64,
) -> Vec<SigningKeyRecord> {
    let mut keys: Vec<SigningKeyRecord> = current
        .into_iter()
        .map(|mut k| {
            k.since_ms = before
                .iter()
                .find(|b| b.public_key == k.public_key)
                .map_or(now, |b| b.since_ms);
            k.retired_ms = 0;
            k
        })
        .collect();
    let mut retired: Vec<SigningKeyRecord> = before
        .iter()
        .filter(|b| !keys.iter().any(|k| k.public_key == b.public_key))
        .map(|b| SigningKeyRecord {
            retired_ms: if b.retired_ms == 0 { now } else { b.retired_ms },
            ..b.clone()
        })
        .collect();
    retired.sort_by_key(|k| std::cmp::Reverse(k.retired_ms));
    retired.truncate(MAX_RETIRED_KEYS);
    keys.extend(retired);
    keys
}

/// Whether a message stored for `encoded` (`Destination::encode()`) is `tenant`'s.
fn belongs_to(encoded: &str, tenant: TenantId) -> bool {
    Destination::tenant_of_key(encoded) == Some(tenant)
}

impl Engine {
    /// PutEndpoint: creates or replaces an endpoint. Putting one (re-)enables it; an
    /// operator's pause stays.
    pub(super) fn put_endpoint(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        mut endpoint: EndpointRecord,
    ) -> Result<PutOutcome, StoreError> {
        let existing = self.endpoints.get(tenant, &endpoint.name);
        let created = existing.is_none();
        let replaced_signing_url = existing
            .filter(|e| e.url != endpoint.url && !e.secrets.is_empty())
            .map(|e| e.url.clone());
        endpoint.created_ms = existing.map_or(now, |e| e.created_ms);
        endpoint.updated_ms = now;
        // Putting an endpoint (re-)enables it; an operator's pause stays.
        endpoint.disabled = false;
        endpoint.disabled_reason.clear();
        endpoint.disabled_ms = 0;
        if let Some(e) = existing {
            endpoint.paused = e.paused;
            endpoint.paused_reason.clone_from(&e.paused_reason);
            endpoint.paused_ms = e.paused_ms;
        }
        endpoint.signing_keys = signing_keys(
            existing.map_or(&[][..], |e| &e.signing_keys),
            std::mem::take(&mut endpoint.signing_keys),
            now,
        );
        t.put_endpoint(tenant, &endpoint)?;
        self.endpoints.insert(tenant, endpoint.clone());
        let key = Destination::endpoint(tenant, &endpoint.name).key();
        if let Some(d) = self.index.find(&key) {
            self.refresh_push(d, now);
            // Configured now: an idle destination of this name must be kept.
            self.index.review(d);
        }
        Ok(PutOutcome {
            endpoint,
            created,
            replaced_signing_url,
        })
    }

    /// Makes dead letters ready again. With ids, all-or-nothing: each must be a dead letter.
    pub(super) fn replay(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        request: ReplayRequest,
    ) -> Result<Result<ReplayOutcome, Refusal>, StoreError> {
        let ReplayRequest {
            tenant,
            ids,
            destination,
            limit,
            strict,
            per_s,
        } = request;
        // (id, destination key)
        let mut targets: Vec<(MessageId, String)> = Vec::new();
        if let Some(destination) = destination {
            if let Some(name) = destination.endpoint_name()
                && !self.endpoints.contains(destination.tenant, name)
            {
                return Ok(Err(Refusal::EndpointGone {
                    name: name.to_owned(),
                }));
            }
            let key = destination.key();
            for id in t.dead_of(&key, limit)? {
                targets.push((id, key.clone()));
            }
        }
        let mut seen = HashSet::new();
        for (i, id) in ids.into_iter().enumerate() {
            if !seen.insert(id) {
                continue;
            }
            let record = t.record(id)?.filter(|r| belongs_to(&r.destination, tenant));
            let Some(record) = record else {
                if !strict {
                    continue;
                }
                return Ok(Err(Refusal::NoMessage { id }.at(i)));
            };
            // Live, not dead: in `live`, or fresh (not looked up by id; its schedule row
            // says so).
            let live = self.index.live.contains_key(&id)
                || t.schedule_row(id)?.is_some_and(|e| e.state != State::Dead);
            if live {
                if !strict {
                    continue;
                }
                return Ok(Err(Refusal::NotDeadLetter { id }.at(i)));
            }
            let Some(destination) = Destination::decode(&record.destination) else {
                return Err(StoreError::Corrupt(format!("destination of {id}")));
            };
            if let Some(name) = destination.endpoint_name()
                && !self.endpoints.contains(destination.tenant, name)
            {
                return Ok(Err(Refusal::MessageEndpointGone {
                    id,
                    name: name.to_owned(),
                }
                .at(i)));
            }
            targets.push((id, destination.key()));
        }
        let mut replayed = 0u32;
        let mut last_due_ms = now;
        for (id, key) in targets {
            // Paced: the n-th replayed message is due n / per_s seconds from now.
            let due = if per_s > 0.0 {
                now + (f64::from(replayed) * 1000.0 / per_s) as u64
            } else {
                now
            };
            if self.revive(t, now, id, &key, due)? {
                last_due_ms = due;
                replayed += 1;
            }
        }
        self.config.metrics.replayed.inc_by(u64::from(replayed));
        if replayed > 0 {
            tracing::info!(replayed, per_s, last_due_ms, "dead letters replayed");
        }
        Ok(Ok(ReplayOutcome {
            replayed,
            last_due_ms,
        }))
    }

    /// Makes dead letter `id` of destination `key` ready again, due at `due`; false if it
    /// is not a dead letter (any more).
    pub(super) fn revive(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        id: MessageId,
        key: &str,
        due: u64,
    ) -> Result<bool, StoreError> {
        let Some(mut entry) = t.unbury(id, key)? else {
            return Ok(false);
        };
        t.push_attempt(
            id,
            AttemptRecord {
                number: 0,
                started_ms: now,
                ended_ms: now,
                outcome: AttemptOutcome::Replayed.as_str().into(),
                ..Default::default()
            },
        )?;
        entry.state = State::Pending;
        entry.attempts = 0;
        entry.due_ms = due;
        entry.since_ms = 0;
        entry.replayed = true;
        let d = self.dest(key, now);
        self.index.one_dead_less(d);
        // A dead letter of a FIFO lane: the one that blocks its lane goes back to its
        // head (in order: nothing behind it went meanwhile); any other is delivered
        // outside its lane, marked out of order.
        let mut tag = LaneTag::None;
        if let Some(lane) = entry.lane.as_mut() {
            lane.blocks = false;
            match self.unblock(d, id) {
                Some(slot) => {
                    self.rejoin_lane(d, slot, id, due);
                    tag = LaneTag::In(slot);
                }
                None => {
                    lane.detached = true;
                    tag = LaneTag::Detached;
                }
            }
        }
        t.put_schedule(id, &entry)?;
        // Not out of the dead-letter index on disk before this round commits.
        self.out.fresh.insert(id);
        let bytes = t.record_len(id)?;
        let live = Live::new(d, waiting(due, now), 0, entry.max_attempts, bytes)
            .in_lane(tag)
            .replayed(true);
        self.track(id, live, due);
        self.watch(|| crate::events::Event {
            at_ms: now,
            kind: "replayed",
            destination: key.to_owned(),
            message_id: id.to_string(),
            attempt: 0,
            http_status: 0,
            latency_us: 0,
            detail: format!("due {due}"),
        });
        Ok(true)
    }

    /// Deletes the dead letters among `ids` (payload, attempts and dead-letter row); ids
    /// that are not dead letters (any more) are skipped.
    pub(super) fn purge(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        ids: Vec<MessageId>,
    ) -> Result<u32, StoreError> {
        let mut purged = 0u32;
        let mut seen = HashSet::new();
        for id in ids {
            if !seen.insert(id) || self.index.live.contains_key(&id) {
                continue;
            }
            if self.delete_dead(t, now, tenant, id)? == DeadDelete::Deleted {
                purged += 1;
            }
        }
        if purged > 0 {
            tracing::info!(purged, "dead letters purged");
        }
        Ok(purged)
    }

    /// Deletes message `id` if it is one of `tenant`'s dead letters: its rows go, its
    /// destination counts one dead letter less, and a FIFO lane it blocks moves on (it is
    /// skipped). What it found.
    fn delete_dead(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        id: MessageId,
    ) -> Result<DeadDelete, StoreError> {
        let Some(record) = t.record(id)? else {
            return Ok(DeadDelete::NoRecord);
        };
        let Some(destination) = Destination::decode(&record.destination) else {
            return Err(StoreError::Corrupt(format!("destination of {id}")));
        };
        if destination.tenant != tenant {
            return Ok(DeadDelete::NotOurs);
        }
        let key = destination.key();
        if t.unbury(id, &key)?.is_none() {
            return Ok(DeadDelete::NotDead);
        }
        t.remove_message(id)?;
        if let Some(d) = self.index.find(&key) {
            self.index.one_dead_less(d);
            // Deleting the dead letter that blocks its lane skips it: the lane moves on.
            if self.skip_blocker(d, id, now) {
                tracing::info!(%id, destination = %key, "FIFO lane unblocked: its dead letter was purged (skipped)");
            }
        }
        Ok(DeadDelete::Deleted)
    }

    /// [`Command::Erase`]: each of `tenant`'s messages among `ids` that is a dead letter or
    /// completed loses its rows (a dead letter that blocks its FIFO lane is skipped past,
    /// as a purge of it does) and is erased (`Tx::erase`: its record's bytes are
    /// overwritten once checkpointed).
    pub(super) fn erase(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        ids: Vec<MessageId>,
    ) -> Result<super::Erased, StoreError> {
        let mut out = super::Erased::default();
        let mut seen = HashSet::new();
        for id in ids {
            if !seen.insert(id) {
                continue;
            }
            if self.index.live.contains_key(&id) {
                out.live += 1;
                continue;
            }
            // A dead letter (or a message waiting in a pull queue): its record is still a
            // `messages` row.
            match self.delete_dead(t, now, tenant, id)? {
                DeadDelete::Deleted => {
                    t.erase(id);
                    out.erased += 1;
                    out.dead += 1;
                    continue;
                }
                DeadDelete::NotOurs => {
                    out.missing += 1;
                    continue;
                }
                // Not dead: it has a schedule row, it is on its way.
                DeadDelete::NotDead => {
                    out.live += 1;
                    continue;
                }
                DeadDelete::NoRecord => {}
            }
            // Completed: its summary, and its record's retained pointer.
            let Some(done) = t.done(id)? else {
                out.missing += 1;
                continue;
            };
            if Destination::decode(&done.destination).map(|d| d.tenant) != Some(tenant) {
                out.missing += 1;
                continue;
            }
            t.remove_done(id);
            t.erase(id);
            out.erased += 1;
        }
        if out.erased > 0 {
            tracing::info!(
                erased = out.erased,
                dead = out.dead,
                live_skipped = out.live,
                "messages purged; their records are overwritten in the log after the next checkpoint"
            );
        }
        Ok(out)
    }

    /// An operator's pause of an endpoint (`Some(reason)`), or its end (`None`): durable;
    /// its messages wait meanwhile, attempts in flight finish.
    /// [`Command::Reseal`]: every endpoint's secrets through `reseal`; the changed ones are
    /// written (nothing else about them changes). Stops at the first it cannot reseal.
    pub(super) fn reseal(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        reseal: &super::Resealer,
    ) -> Result<Result<u32, String>, StoreError> {
        let mut changed = 0;
        for (tenant, name) in self.endpoints.names() {
            let Some(endpoint) = self.endpoints.get_mut(tenant, &name) else {
                continue;
            };
            // The signing secrets, then the client key and the OAuth2 secret when set:
            // one list through the resealer, put back in the same places.
            let mut sealed = endpoint.secrets.clone();
            let key = !endpoint.client_key_pem.is_empty();
            if key {
                sealed.push(endpoint.client_key_pem.clone());
            }
            let oauth = endpoint
                .oauth2
                .as_ref()
                .is_some_and(|o| !o.client_secret.is_empty());
            if let Some(o) = endpoint.oauth2.as_ref().filter(|_| oauth) {
                sealed.push(o.client_secret.clone());
            }
            let aad = hookd_core::secrets::endpoint_aad(tenant, &name);
            match (reseal.0)(&aad, &sealed) {
                Err(why) => return Ok(Err(format!("endpoint {name:?}: {why}"))),
                Ok(None) => {}
                Ok(Some(mut secrets)) => {
                    if oauth
                        && let (Some(secret), Some(o)) = (secrets.pop(), endpoint.oauth2.as_mut())
                    {
                        o.client_secret = secret;
                    }
                    if key && let Some(secret) = secrets.pop() {
                        endpoint.client_key_pem = secret;
                    }
                    endpoint.secrets = secrets;
                    t.put_endpoint(tenant, endpoint)?;
                    changed += 1;
                    let key = Destination::endpoint(tenant, name).key();
                    if let Some(d) = self.index.find(&key) {
                        self.refresh_push(d, now);
                    }
                }
            }
        }
        Ok(Ok(changed))
    }

    pub(super) fn pause(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        name: &str,
        pause: Option<String>,
    ) -> Result<Result<EndpointRecord, Refusal>, StoreError> {
        let Some(endpoint) = self.endpoints.get_mut(tenant, name) else {
            return Ok(Err(Refusal::UnknownEndpoint {
                name: name.to_owned(),
            }));
        };
        match &pause {
            Some(reason) => {
                endpoint.paused = true;
                endpoint.paused_reason.clone_from(reason);
                endpoint.paused_ms = now;
                tracing::info!(endpoint = name, %reason, "endpoint paused");
            }
            None => {
                if endpoint.paused {
                    tracing::info!(endpoint = name, "endpoint resumed");
                }
                endpoint.paused = false;
                endpoint.paused_reason.clear();
                endpoint.paused_ms = 0;
            }
        }
        t.put_endpoint(tenant, endpoint)?;
        let record = endpoint.clone();
        let key = Destination::endpoint(tenant, name).key();
        if let Some(d) = self.index.find(&key) {
            self.refresh_push(d, now);
        }
        self.watch(|| crate::events::Event {
            at_ms: now,
            kind: if pause.is_some() {
                "endpoint_paused"
            } else {
                "endpoint_resumed"
            },
            destination: key,
            message_id: String::new(),
            attempt: 0,
            http_status: 0,
            latency_us: 0,
            detail: pause.unwrap_or_default(),
        });
        Ok(Ok(record))
    }

    pub(super) fn delete_endpoint(
        &mut self,
        t: Tx<'_, '_>,
        tenant: TenantId,
        name: &str,
    ) -> Result<Result<(), Refusal>, StoreError> {
        if !self.endpoints.contains(tenant, name) {
            return Ok(Err(Refusal::NoEndpoint {
                name: name.to_owned(),
            }));
        }
        let key = Destination::endpoint(tenant, name).key();
        if let Some(d) = self.index.find(&key) {
            let live = self.index.live_count(d);
            if live > 0 {
                return Ok(Err(Refusal::EndpointBusy {
                    name: name.to_owned(),
                    live,
                }));
            }
        }
        t.remove_endpoint(tenant, name)?;
        self.endpoints.remove(tenant, name);
        // No longer configured: its destination may be idle now.
        if let Some(d) = self.index.find(&key) {
            self.index.review(d);
        }
        Ok(Ok(()))
    }

    /// One destination's figures, as Stats shows them, and with `series` a push
    /// destination's attempt latency over the last hour (5-minute sub-windows) and day
    /// (4-hour ones): percentiles of at most 18 histograms, one destination's, on demand.
    pub(super) fn detail(
        &self,
        now: u64,
        key: &str,
        series: bool,
    ) -> Option<hookd_core::stats::DestinationDetail> {
        let dest = self.index.dests.get(self.index.find(key)?)?;
        let series =
            dest.push
                .as_ref()
                .filter(|_| series)
                .map(|push| hookd_core::stats::LatencySeries {
                    hour: push.stats.latency_1h.series(now),
                    day: push.stats.latency_24h.series(now),
                });
        Some(hookd_core::stats::DestinationDetail {
            stats: self.dest_snapshot(now, dest),
            series,
        })
    }

    fn dest_snapshot(&self, now: u64, dest: &super::index::Dest) -> DestinationSnapshot {
        let mut s = dest.stats(now);
        s.live_bytes = dest.live_bytes;
        s.backpressure = self.dest_level(dest);
        if let Some(push) = &dest.push {
            s.push = Some(push.stats(
                now,
                dest.counts.in_flight,
                self.config.push.slow_threshold_ms,
            ));
        }
        s
    }

    /// One slice of a metrics scrape: the counts of at most `chunk` destinations after
    /// key `after`, no histograms. Of those, the `max` heaviest keep their own series
    /// (copied out); the rest are summed into `other`. The handle asks slice after slice
    /// ([`super::EngineHandle::gauges`]) and merges them, so no single engine step walks
    /// all 100,000 destinations while the writers behind it wait.
    pub(super) fn gauges_part(
        &self,
        now: u64,
        after: Option<&str>,
        max: usize,
        chunk: usize,
    ) -> hookd_metrics::GaugePart {
        let gauges = |dest: &super::index::Dest, named: bool| DestinationGauges {
            destination: if named {
                dest.key.clone()
            } else {
                String::new()
            },
            pending: dest.counts.pending,
            awaiting_retry: dest.counts.awaiting_retry,
            in_flight: dest.counts.in_flight,
            dead_letters: dest.counts.dead,
            oldest_pending_age_ms: dest.oldest_age_ms(now),
            waiting_receives: dest.waiters.len() as u64,
            live_bytes: dest.live_bytes,
            backpressure: self.dest_level(dest),
            breaker: dest.push.as_ref().map(|p| p.gate.breaker().state()),
            disabled: dest
                .push
                .as_ref()
                .is_some_and(|p| p.gate.disabled().is_some()),
        };
        let mut page = self.index.page(after);
        let mut dests: Vec<&super::index::Dest> = page.by_ref().take(chunk.max(1)).collect();
        let next = match (page.next(), dests.last()) {
            (Some(_), Some(last)) => Some(last.key.clone()),
            _ => None,
        };
        let mut other = None;
        if dests.len() > max {
            let weight = |d: &super::index::Dest| {
                d.counts.pending + d.counts.awaiting_retry + d.counts.in_flight + d.counts.dead
            };
            let order = |a: &&super::index::Dest, b: &&super::index::Dest| {
                weight(b).cmp(&weight(a)).then_with(|| a.key.cmp(&b.key))
            };
            if max > 0 {
                dests.select_nth_unstable_by(max - 1, order);
            }
            let mut sum = DestinationGauges::default();
            for d in &dests[max..] {
                sum.absorb(&gauges(d, false));
            }
            other = Some(sum);
            dests.truncate(max);
        }
        let top = dests.iter().map(|d| gauges(d, true)).collect();
        // The whole-hookd figures once, with the last slice.
        let tail = next.is_none().then(|| hookd_metrics::GaugeTail {
            tenants: self
                .index
                .tenants_held()
                .filter_map(|(id, held)| {
                    Some(hookd_metrics::TenantGauges {
                        tenant: self.tenants.name(id)?.to_owned(),
                        live_messages: held.messages,
                        live_bytes: held.bytes,
                    })
                })
                .collect(),
            alerts: self.alert_states(),
            storage: self.storage_snapshot(now),
            healthy: self.health.failed.is_none() && self.pipeline.syncer.failed().is_none(),
            backpressure: self.total_level(),
        });
        hookd_metrics::GaugePart {
            top,
            other,
            next,
            tail,
        }
    }

    fn dest_level(&self, dest: &super::index::Dest) -> hookd_core::backpressure::Level {
        self.config
            .backpressure
            .level(dest.held(), hookd_core::backpressure::Scope::Destination)
    }

    fn total_level(&self) -> hookd_core::backpressure::Level {
        self.config.backpressure.level(
            self.index.total_held(),
            hookd_core::backpressure::Scope::All,
        )
    }

    /// The totals (kept as messages move, never summed here) and one page of
    /// destinations in key order: bounded work on the engine thread, however many
    /// destinations exist.
    pub(super) fn stats(
        &self,
        now: u64,
        tenant: Option<TenantId>,
        after: Option<&str>,
        limit: usize,
    ) -> StatsSnapshot {
        if let Some(tenant) = tenant {
            return self.tenant_stats(now, tenant, after, limit);
        }
        let totals = self.index.totals;
        let mut total = DestinationSnapshot {
            destination: "*".into(),
            pending: totals.pending,
            awaiting_retry: totals.awaiting_retry,
            in_flight: totals.in_flight,
            dead_letter: totals.dead,
            waiting_receives: self.index.waiting(),
            oldest_pending_age_ms: self
                .index
                .oldest()
                .map_or(0, |id| now.saturating_sub(id.unix_ms())),
            live_bytes: self.index.live_bytes,
            backpressure: self.total_level(),
            ..Default::default()
        };
        self.total.fill(now, &mut total);
        let page = self.stats_page(now, None, after, limit);
        StatsSnapshot {
            total,
            uptime_ms: now.saturating_sub(self.started_ms),
            storage: self.storage_snapshot(now),
            alerts: self.alert_states(),
            delivered_by_minute: self.total.delivered.series(now),
            failed_by_minute: self.total.failed.series(now),
            ..page
        }
    }

    /// One tenant's figures: its destinations, and a total of their counts (the messages
    /// in each state, live bytes, waiting receives, the oldest message's age: a few field
    /// reads per destination, no histogram; rates and latencies are each destination's);
    /// nothing of hookd's storage or of the other tenants.
    fn tenant_stats(
        &self,
        now: u64,
        tenant: TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> StatsSnapshot {
        let mut total = DestinationSnapshot {
            destination: "*".into(),
            ..Default::default()
        };
        for dest in self.index.page_of(Some(tenant), None) {
            total.pending += dest.counts.pending;
            total.awaiting_retry += dest.counts.awaiting_retry;
            total.in_flight += dest.counts.in_flight;
            total.dead_letter += dest.counts.dead;
            total.live_bytes += dest.live_bytes;
            total.waiting_receives += dest.waiters.len() as u64;
            total.oldest_pending_age_ms = total.oldest_pending_age_ms.max(dest.oldest_age_ms(now));
        }
        let page = self.stats_page(now, Some(tenant), after, limit);
        // Its destinations' alerts (the totals' are the whole hookd's).
        let alerts = self
            .alert_states()
            .into_iter()
            .filter(|a| {
                a.destination != hookd_core::alerts::TOTAL
                    && Destination::tenant_of_key(&a.destination) == Some(tenant)
            })
            .collect();
        StatsSnapshot {
            total,
            uptime_ms: now.saturating_sub(self.started_ms),
            alerts,
            ..page
        }
    }

    /// Only the page of destinations (the rest of a page the handle reads in slices), of
    /// one tenant's (`None`: every tenant's).
    pub(super) fn stats_page(
        &self,
        now: u64,
        tenant: Option<TenantId>,
        after: Option<&str>,
        limit: usize,
    ) -> StatsSnapshot {
        let mut destinations = Vec::with_capacity(limit.min(self.index.destinations()));
        let mut more = false;
        for dest in self.index.page_of(tenant, after) {
            if destinations.len() == limit {
                more = true;
                break;
            }
            destinations.push(self.dest_snapshot(now, dest));
        }
        let next_page = more
            .then(|| destinations.last().map(|d| d.destination.clone()))
            .flatten();
        StatsSnapshot {
            destinations,
            next_page,
            ..Default::default()
        }
    }

    fn storage_snapshot(&self, now: u64) -> StorageSnapshot {
        let mut storage = StorageSnapshot {
            live_messages: self.index.len(),
            queued_write_bytes: self
                .pipeline
                .queued
                .load(std::sync::atomic::Ordering::Relaxed),
            destinations: self.index.destinations() as u64,
            ..Default::default()
        };
        self.pipeline.syncer.fill(now, &mut storage);
        storage.log_compacted_records = self.housekeeping.compacted;
        let (checkpoint_at_ms, last_checkpoint_ms, since) =
            self.pipeline.syncer.checkpoint_figures();
        storage.checkpoint_age_ms = now.saturating_sub(checkpoint_at_ms);
        storage.last_checkpoint_ms = last_checkpoint_ms;
        storage.log_since_checkpoint_bytes = since;
        storage.replay_ms = self.pipeline.replayed.millis;
        storage.replayed_bytes = self.pipeline.replayed.to - self.pipeline.replayed.from;
        storage.disk_available_bytes = self.config.headroom.available();
        storage.disk_reserve_bytes = self.config.headroom.reserve();
        storage
    }
}

#[cfg(test)]
mod signing_key_tests {
    use super::*;

    fn key(b: u8, since: u64, retired: u64) -> SigningKeyRecord {
        SigningKeyRecord {
            public_key: vec![b; 32],
            since_ms: since,
            retired_ms: retired,
        }
    }

    #[test]
    fn a_key_taken_off_is_retired_once_and_a_kept_one_keeps_its_age() {
        // a and b in use; the put keeps b and adds c: a is retired now, b keeps its time.
        let after = signing_keys(
            &[key(1, 10, 0), key(2, 20, 0)],
            vec![key(2, 0, 0), key(3, 0, 0)],
            100,
        );
        assert_eq!(after, vec![key(2, 20, 0), key(3, 100, 0), key(1, 10, 100)]);
        // A later put leaves a retired at 100; putting a back makes it current again.
        let later = signing_keys(&after, vec![key(3, 0, 0)], 200);
        assert_eq!(
            later,
            vec![key(3, 100, 0), key(2, 20, 200), key(1, 10, 100)]
        );
        let back = signing_keys(&later, vec![key(1, 0, 0)], 300);
        assert_eq!(back[0], key(1, 10, 0));
        // At most MAX_RETIRED_KEYS retired, the newest kept.
        let many: Vec<_> = (0..40u8).map(|b| key(b, 1, u64::from(b) + 1)).collect();
        let capped = signing_keys(&many, Vec::new(), 500);
        assert_eq!(capped.len(), MAX_RETIRED_KEYS);
        assert_eq!(capped[0].retired_ms, 40);
    }
}

/// What [`Engine::delete_dead`] found of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeadDelete {
    /// One of the tenant's dead letters: deleted.
    Deleted,
    /// A stored message of another tenant's.
    NotOurs,
    /// The tenant's, stored, but not a dead letter (on its way).
    NotDead,
    /// No stored record (completed, or never).
    NoRecord,
}
