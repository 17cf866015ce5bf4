//! Retention per tenant and per destination (issue #53, 4).
//!
//! A tenant, an endpoint or a queue may set `retention_secs`: how long its completed
//! messages (their summaries and payloads) are kept. A destination's setting wins over its
//! tenant's; without either, the server's apply (`completed_retention_secs` for the
//! summary, `log_retention_secs` for the payload). Inside the server's disk budget
//! (`log_retention_mb`): past it the oldest segments go whatever their messages asked for.
//!
//! How it is kept:
//! - **Longer than the server's.** The range sweeps of `done` and `retained` (ids are
//!   time-ordered) stop at the longest retention set anywhere, and the apply stage's
//!   reclaim keeps segments that long too (`Syncer::hold_retention`), within the budget.
//! - **Per message.** A pass over the completed messages older than the shortest
//!   retention in force judges each by its own: a message with a setting past it loses
//!   its summary and its payload's pointer (no API reaches it again); one under the
//!   server's defaults loses its summary past `completed_retention_secs` and its
//!   payload's pointer past `log_retention_secs`, as the range sweeps would have done. A
//!   pass starts at most once a minute, and walks [`SWEEP_CHUNK`] rows at a time within
//!   the sweep's budget.
//! - **The bytes.** A payload's bytes leave the disk with its segment, which is kept for
//!   the longest retention of the messages in it (or until the disk budget needs it): a
//!   publish's deliveries share one record, and may have different retentions. To take
//!   bytes off the disk now, purge (PurgeMessages).

use hookd_core::destination::{Destination, To};
use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_storage::store::StoreError;

use super::{Engine, SWEEP_CHUNK};

/// How often a per-message pass starts.
const PASS_EVERY_MS: u64 = 60_000;
/// How often the sweep reads the settings' bounds again.
const REFRESH_EVERY_MS: u64 = 1_000;

/// The per-message pass and the settings it last read.
#[derive(Debug, Default)]
pub(crate) struct RetentionPass {
    /// The shortest and longest retention any tenant or destination sets (ms).
    pub(crate) shortest_ms: Option<u64>,
    pub(crate) longest_ms: Option<u64>,
    /// When the bounds were read and the next pass may start.
    next_pass_ms: u64,
    /// Where the pass in progress continues (`None`: none in progress).
    cursor: Option<MessageId>,
    in_pass: bool,
    /// The apply stage was told the bounds at least once, and when they were read.
    told: bool,
    refreshed_ms: u64,
}

impl Engine {
    /// The retention (ms) message at `destination` is kept for: its destination's setting,
    /// else its tenant's; `None`: the server's defaults.
    pub(crate) fn retention_of(&self, destination: &Destination) -> Option<u64> {
        let own = match &destination.to {
            To::Endpoint(name) => self
                .endpoints
                .get(destination.tenant, name)
                .map_or(0, |e| e.retention_secs),
            To::Queue(name) => self
                .queues
                .get(destination.tenant, name)
                .map_or(0, |q| q.retention_secs),
            To::Url(_) => 0,
        };
        match own {
            0 => self.tenant_retention_ms(destination.tenant),
            s => Some(s.saturating_mul(1_000)),
        }
    }

    /// The retention (ms) a tenant's messages get unless their destination sets one.
    pub(crate) fn tenant_retention_ms(&self, tenant: TenantId) -> Option<u64> {
        let secs = self.tenants.retention_secs(tenant);
        (secs > 0).then(|| secs.saturating_mul(1_000))
    }

    /// The retention (ms) a tenant's messages get unless their destination sets one, and
    /// the settings of its destinations that set their own (destination key, ms).
    pub(crate) fn retention_view(&self, tenant: TenantId) -> (Option<u64>, Vec<(String, u64)>) {
        let mut own: Vec<(String, u64)> = self
            .endpoints
            .names_of(tenant)
            .into_iter()
            .filter_map(|name| {
                let secs = self.endpoints.get(tenant, &name)?.retention_secs;
                (secs > 0).then(|| (format!("endpoint:{name}"), secs.saturating_mul(1_000)))
            })
            .chain(
                self.queues
                    .iter()
                    .filter(|(t, q)| *t == tenant && q.retention_secs > 0)
                    .map(|(_, q)| {
                        let ms = q.retention_secs.saturating_mul(1_000);
                        (format!("queue:{}", q.name), ms)
                    }),
            )
            .collect();
        own.sort();
        (self.tenant_retention_ms(tenant), own)
    }

    /// What Stats shows of `tenant`'s retention (see [`RetentionSnapshot`]).
    ///
    /// [`RetentionSnapshot`]: hookd_core::stats::RetentionSnapshot
    pub(crate) fn retention_snapshot(
        &self,
        now: u64,
        tenant: TenantId,
    ) -> hookd_core::stats::RetentionSnapshot {
        let (own, destinations) = self.retention_view(tenant);
        let (completed, log) = (
            self.config.completed_retention_ms,
            self.config.log_retention.ms,
        );
        // What the log still holds bounds every setting (the disk budget).
        let log_since = self.pipeline.syncer.log_figures().kept_from_ms;
        let since = |keep_ms: u64| now.saturating_sub(keep_ms).max(log_since);
        hookd_core::stats::RetentionSnapshot {
            tenant_ms: own.unwrap_or(0),
            completed_ms: completed,
            log_ms: log,
            budget_bytes: self.config.log_retention.bytes,
            kept_since_ms: since(own.unwrap_or_else(|| completed.min(log))),
            destinations: destinations
                .into_iter()
                .map(|(key, ms)| (key, ms, since(ms)))
                .collect(),
        }
    }

    /// Every retention set by a tenant or a destination (ms).
    fn retentions(&self) -> impl Iterator<Item = u64> + '_ {
        self.tenants
            .retentions()
            .chain(self.endpoints.retentions())
            .chain(self.queues.iter().map(|(_, q)| q.retention_secs))
            .filter(|s| *s > 0)
            .map(|s| s.saturating_mul(1_000))
    }

    /// Reads the settings' bounds again (at most once a second from the sweep, and at
    /// start: a tenant's longer retention holds within a second of being set), and tells
    /// the apply stage how long to keep segments. A walk of every tenant, endpoint and
    /// queue: kept out of most sweep steps' budget.
    pub(crate) fn refresh_retention(&mut self, now: u64) {
        let pass = &self.housekeeping.retention;
        if pass.told && now < pass.refreshed_ms.saturating_add(REFRESH_EVERY_MS) {
            return;
        }
        self.housekeeping.retention.refreshed_ms = now;
        let (shortest, longest) =
            self.retentions()
                .fold((None::<u64>, None::<u64>), |(lo, hi), r| {
                    (
                        Some(lo.map_or(r, |l| l.min(r))),
                        Some(hi.map_or(r, |h| h.max(r))),
                    )
                });
        let pass = &mut self.housekeeping.retention;
        if (pass.shortest_ms, pass.longest_ms) != (shortest, longest) || !pass.told {
            pass.shortest_ms = shortest;
            pass.longest_ms = longest;
            pass.told = true;
            self.pipeline
                .syncer
                .hold_retention(longest.unwrap_or(0), self.config.completed_retention_ms);
        }
    }

    /// How long the range sweeps keep `done` and `retained` rows (ms): the server's, or
    /// the longest retention set anywhere.
    pub(crate) fn kept_ms(&self) -> u64 {
        self.config
            .completed_retention_ms
            .max(self.housekeeping.retention.longest_ms.unwrap_or(0))
    }

    /// One step of the per-message pass (see the module doc); true if it stopped at the
    /// budget with work left.
    pub(crate) fn sweep_retention(
        &mut self,
        tables: &mut hookd_storage::store::Tables<'_>,
        now: u64,
        spent: &dyn Fn() -> bool,
    ) -> Result<bool, StoreError> {
        if !self.housekeeping.retention.in_pass {
            if now < self.housekeeping.retention.next_pass_ms {
                return Ok(false);
            }
            let pass = &mut self.housekeeping.retention;
            if pass.shortest_ms.is_none() && pass.longest_ms.is_none() {
                return Ok(false);
            }
            pass.in_pass = true;
            pass.cursor = None;
        }
        let defaults = (
            self.config.completed_retention_ms,
            self.config.log_retention.ms,
        );
        // Nothing younger than the shortest retention in force can be due.
        let shortest = self
            .housekeeping
            .retention
            .shortest_ms
            .unwrap_or(u64::MAX)
            .min(defaults.0)
            .min(defaults.1);
        let before = now.saturating_sub(shortest);
        loop {
            let cursor = self.housekeeping.retention.cursor;
            let rows = tables.done_after(cursor, before, SWEEP_CHUNK)?;
            let Some(last) = rows.last().map(|r| r.0) else {
                let pass = &mut self.housekeeping.retention;
                pass.in_pass = false;
                pass.next_pass_ms = now + PASS_EVERY_MS;
                return Ok(false);
            };
            for (id, done) in rows {
                let created = id.unix_ms();
                let destination = Destination::decode(&done.destination);
                match destination.as_ref().and_then(|d| self.retention_of(d)) {
                    Some(own) if created.saturating_add(own) <= now => {
                        tables.remove_done(id);
                        tables.forget_retained(id)?;
                    }
                    Some(_) => {}
                    None if created.saturating_add(defaults.0) <= now => {
                        tables.remove_done(id);
                        tables.forget_retained(id)?;
                    }
                    None if created.saturating_add(defaults.1) <= now => {
                        tables.forget_retained(id)?;
                    }
                    None => {}
                }
            }
            self.housekeeping.retention.cursor = Some(last);
            if spent() {
                return Ok(true);
            }
        }
    }
}
