//! Push attempts shared between tenants by weight (issue #52): no tenant's backlog or dead
//! receivers keep another's deliveries waiting.
//!
//! hookd holds about `delivery.max_attempts_in_flight` (B) push attempts at once. While
//! tenants compete, each may hold its weighted share of them:
//!
//! ```text
//! cap(t) = max(1, floor(B * w(t) / W))      W: the weights of the tenants holding attempts
//!                                              or with attempts ready to go
//! ```
//!
//! A tenant under its cap may always start one more attempt, even with B out: attempts a
//! tenant started while it was alone can hang until their timeout, and must not keep the
//! others out that long. Inside a tenant the same holds one level down: a destination under
//! its part of its tenant's cap (`max(1, cap / destinations)`, counting those with attempts
//! out or queued) may start one too, so one endpoint's hanging attempts do not keep its
//! tenant's other endpoints waiting. Any other start waits until fewer than B are out (so a
//! tenant alone uses all of B). So what is out past B is at most every competing tenant's
//! cap and one part per destination: B bounds what hookd starts of its own accord, the
//! shares what a tenant or an endpoint is guaranteed.
//!
//! A round first hands out, while fewer than half of B are out, every waiting
//! destination's attempts in turn as far as its own gate lets them: nobody is short then,
//! and a round costs no more than before sharing. From half of B on it hands out in two
//! passes: first to the tenants under their caps (and destinations under their parts of
//! their tenant's), whatever is out, then to anyone while fewer than B are out; so what an
//! attempt ending frees goes to whoever is under its share before anyone over it. Each pass
//! goes in deficit round robin order ([`hookd_core::fair::Drr`], one unit per attempt,
//! `weight` attempts per turn), a tenant's destinations taking turns inside its turns.
//! Inside a tenant every endpoint keeps its own gate (concurrency, rate, breaker, pauses)
//! as before.
//!
//! Tenants whose turn is refused (at their cap with B out) keep their destinations queued
//! here, and are looked at again in the next round (an attempt ending queues a round).

use std::collections::VecDeque;

use hookd_core::fair::Drr;
use hookd_core::scope::TenantId;
use hookd_storage::store::StoreError;
use rustc_hash::FxHashMap;

use super::index::DestId;
use super::{Engine, Tx};

/// Destinations with attempts that may go, queued by tenant between rounds.
#[derive(Debug, Default)]
pub(crate) struct FairQueue {
    by_tenant: FxHashMap<TenantId, VecDeque<DestId>>,
}

/// One competing tenant's part of a round's sharing.
#[derive(Debug, Clone, Copy)]
struct Share {
    weight: u32,
    /// Its cap of B.
    cap: u64,
    /// Each of its destinations' part of the cap: `max(1, cap / destinations)`, counting
    /// those with attempts out or queued.
    per_destination: u64,
}

/// What one round's sharing decides with: B, and each competing tenant's share of it.
struct Shares {
    budget: u64,
    of: FxHashMap<TenantId, Share>,
}

/// The two passes of a round once half of B is out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Tenants under their caps, and destinations under their parts of their tenant's,
    /// whatever is out.
    UnderCap,
    /// Anyone, while fewer than B are out.
    UnderBudget,
}

impl Shares {
    /// Is `tenant`, holding `held` attempts, under its cap?
    fn under_cap(&self, tenant: TenantId, held: u64) -> bool {
        held < self.of.get(&tenant).map_or(1, |s| s.cap)
    }

    /// Is a destination of `tenant` holding `held` attempts under its part of the cap?
    fn destination_under(&self, tenant: TenantId, held: u64) -> bool {
        held < self.of.get(&tenant).map_or(1, |s| s.per_destination)
    }

    /// May a destination holding `dest_held` of `tenant`'s `held` start one more in
    /// `pass` (`total` out)?
    fn may_start(
        &self,
        pass: Pass,
        tenant: TenantId,
        held: u64,
        dest_held: u64,
        total: u64,
    ) -> bool {
        match pass {
            Pass::UnderCap => {
                self.under_cap(tenant, held) || self.destination_under(tenant, dest_held)
            }
            Pass::UnderBudget => total < self.budget,
        }
    }
}

impl Engine {
    /// Hands out the attempts that may go now, shared between tenants as the module's text
    /// says. Runs at the end of each round; attempts of messages stored in this round
    /// wait for its sync (`RoundOut::after_sync`).
    pub(super) fn dispatch(&mut self, t: Tx<'_, '_>, now: u64) -> Result<(), StoreError> {
        let queued = std::mem::take(&mut self.index.dispatch);
        if self.draining || self.deliveries.is_none() {
            for d in queued {
                self.index.dests[d].dispatch_queued = false;
            }
            for (_, ds) in self.fair.by_tenant.drain() {
                for d in ds {
                    if let Some(dest) = self.index.dests.get_mut(d) {
                        dest.dispatch_queued = false;
                    }
                }
            }
            return Ok(());
        }
        // While fewer than half of B are out, every waiting destination's attempts go, in
        // turn, as far as its own gate lets them: what the round costs when nothing is
        // short. Those held back earlier come first.
        let budget = self.config.push.max_attempts_in_flight.max(1);
        let mut waiting: Vec<DestId> = Vec::new();
        for (_, q) in self.fair.by_tenant.drain() {
            waiting.extend(q);
        }
        waiting.extend(queued);
        for d in waiting {
            // A destination forgotten while it was held back (its tenant deleted) is dropped.
            if self.index.dests.get(d).is_none() {
                continue;
            }
            loop {
                if self.index.push_flight.total() >= budget / 2 {
                    // Its tenant's turn comes below, or in a later round.
                    if let Some(dest) = self.index.dests.get(d) {
                        let tenant = dest.tenant;
                        self.fair.by_tenant.entry(tenant).or_default().push_back(d);
                    }
                    break;
                }
                match self.admit_next(d, now) {
                    Some(id) => self.hand_out(t, now, d, id)?,
                    None => {
                        if let Some(dest) = self.index.dests.get_mut(d) {
                            dest.dispatch_queued = false;
                        }
                        break;
                    }
                }
            }
        }
        if self.fair.by_tenant.is_empty() {
            return Ok(());
        }
        // Half of B is out: first the tenants under their caps (and destinations under
        // their parts of their tenant's), whatever is out, then anyone while fewer than B
        // are out, each pass in deficit round robin order.
        let shares = self.shares();
        for pass in [Pass::UnderCap, Pass::UnderBudget] {
            let mut drr = Drr::new(1);
            for (&tenant, share) in &shares.of {
                if self.fair.by_tenant.contains_key(&tenant) {
                    drr.backlogged(tenant, share.weight);
                }
            }
            // Tenants none of whose queued destinations may start one in this pass.
            let mut stuck: Vec<TenantId> = Vec::new();
            loop {
                let (fair, flight) = (&self.fair, &self.index.push_flight);
                let next = drr.next(|tenant| {
                    let waiting = fair.by_tenant.get(tenant).is_some_and(|q| !q.is_empty());
                    let open = match pass {
                        Pass::UnderCap => !stuck.contains(tenant),
                        Pass::UnderBudget => flight.total() < budget,
                    };
                    (waiting && open).then_some(1)
                });
                let Some(tenant) = next else { break };
                if !self.one_attempt_of(t, now, tenant, pass, &shares)? {
                    stuck.push(tenant);
                }
            }
        }
        // Left queued: tenants at their caps with B out (their turn comes in a later round).
        self.fair.by_tenant.retain(|_, q| !q.is_empty());
        Ok(())
    }

    /// Starts one attempt of `tenant`'s next destination that may start one in `pass`:
    /// the destinations take turns; one with nothing to go now leaves the queue (it is
    /// queued again when that changes), one held back by the sharing keeps its place.
    /// False: none of its destinations could start one.
    fn one_attempt_of(
        &mut self,
        t: Tx<'_, '_>,
        now: u64,
        tenant: TenantId,
        pass: Pass,
        shares: &Shares,
    ) -> Result<bool, StoreError> {
        let mut held_back = 0;
        loop {
            let waiting = self.fair.by_tenant.get(&tenant).map_or(0, VecDeque::len);
            if held_back >= waiting {
                return Ok(false);
            }
            let Some(d) = self
                .fair
                .by_tenant
                .get_mut(&tenant)
                .and_then(VecDeque::pop_front)
            else {
                return Ok(false);
            };
            // A destination forgotten while queued (its slot reused or empty) is dropped.
            let Some(dest) = self.index.dests.get(d).filter(|dest| dest.tenant == tenant) else {
                continue;
            };
            let flight = &self.index.push_flight;
            if !shares.may_start(
                pass,
                tenant,
                flight.of(tenant),
                dest.counts.in_flight,
                flight.total(),
            ) {
                held_back += 1;
                if let Some(q) = self.fair.by_tenant.get_mut(&tenant) {
                    q.push_back(d);
                }
                continue;
            }
            match self.admit_next(d, now) {
                Some(id) => {
                    self.hand_out(t, now, d, id)?;
                    if let Some(q) = self.fair.by_tenant.get_mut(&tenant) {
                        q.push_back(d);
                    }
                    return Ok(true);
                }
                None => self.index.dests[d].dispatch_queued = false,
            }
        }
    }

    /// This round's B and the shares of the tenants competing for it: those with
    /// destinations queued, and those with attempts out.
    fn shares(&self) -> Shares {
        let budget = self.config.push.max_attempts_in_flight.max(1);
        let mut of: FxHashMap<TenantId, Share> = FxHashMap::default();
        let competing = self
            .fair
            .by_tenant
            .keys()
            .chain(self.index.push_flight.by_tenant.keys());
        for &tenant in competing {
            of.entry(tenant).or_insert_with(|| Share {
                weight: self.tenants.weight_of(tenant),
                cap: 0,
                per_destination: 0,
            });
        }
        let sum: u64 = of.values().map(|s| u64::from(s.weight)).sum();
        for (tenant, s) in &mut of {
            s.cap = (budget.saturating_mul(u64::from(s.weight)) / sum.max(1)).max(1);
            // Those with attempts out, and those queued with none out yet.
            let idle_queued = self.fair.by_tenant.get(tenant).map_or(0, |q| {
                q.iter()
                    .filter(|d| {
                        self.index
                            .dests
                            .get(**d)
                            .is_some_and(|dest| dest.counts.in_flight == 0)
                    })
                    .count() as u64
            });
            let destinations = self.index.push_flight.destinations_of(*tenant) + idle_queued;
            s.per_destination = (s.cap / destinations.max(1)).max(1);
        }
        Shares { budget, of }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_under_its_cap_may_start_past_the_budget_and_one_over_it_only_under() {
        let a = TenantId(1);
        let b = TenantId(2);
        let share = Share {
            weight: 1,
            cap: 5,
            per_destination: 2,
        };
        let shares = Shares {
            budget: 10,
            of: FxHashMap::from_iter([(a, share), (b, share)]),
        };
        let (cap, any) = (Pass::UnderCap, Pass::UnderBudget);
        // B is out, all a's: b (under its cap) may start, a (over it) may not, but for a
        // destination of a's under its part of a's cap.
        assert!(shares.may_start(cap, b, 0, 0, 10));
        assert!(!shares.may_start(cap, a, 10, 5, 10));
        assert!(shares.may_start(cap, a, 10, 1, 10));
        assert!(!shares.may_start(any, a, 10, 5, 10));
        // Under B, anyone may (a tenant alone uses all of it).
        assert!(shares.may_start(any, a, 9, 9, 9));
        // b at its cap with B out waits.
        assert!(!shares.may_start(cap, b, 5, 2, 12));
        // A tenant not counted (no share yet) may start its first.
        assert!(shares.may_start(cap, TenantId(3), 0, 0, 12));
    }
}
