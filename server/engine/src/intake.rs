//! What each round takes, shared between tenants by weight (issue #52): a tenant flooding
//! hookd (at 100x its quota, say) cannot push another's calls rounds back.
//!
//! Everything the channel holds when a round starts joins the intake. When it all fits in
//! one round, the round takes it as it came (nobody is short; no map is touched). Else a
//! round takes every command that is no tenant's (attempt reports, ticks, operators' calls, shutdown: small,
//! and hookd's own work), then tenants' commands (enqueues, batches and publishes, at one
//! unit per event, receives, acks and nacks at one each) in deficit round robin order
//! ([`Drr`], [`QUANTUM`] units per weight per turn) until the round holds
//! `max_commit_batch` units. A tenant's own commands keep their order; the deficit carries
//! over between rounds, so over rounds each busy tenant gets its weight's share of them.

use std::collections::VecDeque;

use hookd_core::fair::Drr;
use hookd_core::scope::TenantId;
use rustc_hash::FxHashMap;

use super::Command;

/// Units of work a tenant of weight 1 is given per turn: small against a round
/// (`max_commit_batch`, 8,192 by default), so a round is shared finely, and at least a
/// unary call's.
const QUANTUM: u64 = 64;

/// Commands taken from the channel, waiting for a round.
#[derive(Debug)]
pub(crate) struct Intake {
    /// As they came, while no round has been short: the next round takes them all.
    arrivals: VecDeque<Command>,
    /// Units of the tenants' commands in `arrivals`.
    arrival_units: u64,
    /// No tenant's: every round takes all of them.
    untenanted: VecDeque<Command>,
    by_tenant: FxHashMap<TenantId, VecDeque<(Command, u64)>>,
    drr: Drr<TenantId>,
    len: usize,
}

impl Default for Intake {
    fn default() -> Self {
        Self {
            arrivals: VecDeque::new(),
            arrival_units: 0,
            untenanted: VecDeque::new(),
            by_tenant: FxHashMap::default(),
            drr: Drr::new(QUANTUM),
            len: 0,
        }
    }
}

impl Command {
    /// Whose command this is, and what it costs a round: one unit per event (enqueues,
    /// batches and publishes), one per receive, ack or nack. `None`: no tenant's.
    fn share(&self) -> Option<(TenantId, u64)> {
        match self {
            Command::Enqueue { messages, .. } => messages
                .first()
                .map(|m| (m.destination.tenant, messages.len() as u64)),
            Command::Receive { queue, .. } => Some((queue.tenant, 1)),
            Command::Ack { tenant, .. } | Command::Nack { tenant, .. } => Some((*tenant, 1)),
            _ => None,
        }
    }
}

impl Intake {
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `command` waits for a round.
    pub(crate) fn push(&mut self, command: Command) {
        self.len += 1;
        self.arrival_units += command.share().map_or(0, |(_, cost)| cost.max(1));
        self.arrivals.push_back(command);
    }

    /// One round's commands: when everything waiting fits in `max` units, all of it in
    /// the order it came (nobody is short, and sharing would cost a map per command);
    /// else every untenanted command, then tenants' in turn until `max` units (at least
    /// one tenant command, if any waits). `weight` says a tenant's weight.
    pub(crate) fn round(&mut self, max: usize, weight: impl Fn(TenantId) -> u32) -> Vec<Command> {
        let max = max as u64;
        if self.by_tenant.is_empty() && self.untenanted.is_empty() && self.arrival_units <= max {
            self.arrival_units = 0;
            self.len = 0;
            return self.arrivals.drain(..).collect();
        }
        self.arrival_units = 0;
        while let Some(command) = self.arrivals.pop_front() {
            match command.share() {
                None => self.untenanted.push_back(command),
                Some((tenant, cost)) => {
                    let q = self.by_tenant.entry(tenant).or_default();
                    if q.is_empty() {
                        self.drr.backlogged(tenant, weight(tenant));
                    }
                    q.push_back((command, cost.max(1)));
                }
            }
        }
        let mut out: Vec<Command> = self.untenanted.drain(..).collect();
        let mut taken = 0u64;
        while taken < max {
            let by_tenant = &self.by_tenant;
            let next = self.drr.next(|t| {
                by_tenant
                    .get(t)
                    .and_then(VecDeque::front)
                    .map(|(_, cost)| *cost)
            });
            let Some(tenant) = next else { break };
            let Some(q) = self.by_tenant.get_mut(&tenant) else {
                continue;
            };
            let Some((command, cost)) = q.pop_front() else {
                continue;
            };
            if q.is_empty() {
                self.by_tenant.remove(&tenant);
            }
            taken += cost;
            out.push(command);
        }
        self.len -= out.len();
        out
    }

    /// Everything waiting (the last round, at shutdown).
    pub(crate) fn drain(&mut self) -> Vec<Command> {
        let mut out: Vec<Command> = self.untenanted.drain(..).collect();
        out.extend(self.arrivals.drain(..));
        self.arrival_units = 0;
        for (_, q) in self.by_tenant.drain() {
            out.extend(q.into_iter().map(|(c, _)| c));
        }
        self.drr = Drr::new(QUANTUM);
        self.len = 0;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(tenant: u32) -> Command {
        let (reply, _) = tokio::sync::oneshot::channel();
        Command::Ack {
            tenant: TenantId(tenant),
            leases: Vec::new(),
            reply,
        }
    }

    fn tenants_of(round: &[Command]) -> Vec<u32> {
        round
            .iter()
            .map(|c| c.share().map_or(0, |(t, _)| t.0))
            .collect()
    }

    /// A tenant that sent 10,000 calls first does not push another's 10 back: they are
    /// all in the first round, and every round is shared by weight.
    #[test]
    fn a_flood_does_not_push_another_tenants_calls_back() {
        let mut intake = Intake::default();
        for _ in 0..10_000 {
            intake.push(ack(1));
        }
        for _ in 0..10 {
            intake.push(ack(2));
        }
        intake.push(Command::Tick);
        let first = intake.round(512, |_| 1);
        let t = tenants_of(&first);
        assert_eq!(t[0], 0, "hookd's own work first");
        assert_eq!(t.iter().filter(|&&t| t == 2).count(), 10);
        assert_eq!(first.len(), 1 + 512);
        // Then the flood alone, a round at a time, in its own order.
        let mut left = 10_000 - 502;
        while !intake.is_empty() {
            let round = intake.round(512, |_| 1);
            assert!(round.len() <= 512 && !round.is_empty());
            left -= round.len();
        }
        assert_eq!(left, 0);
    }

    /// When everything waiting fits in a round, it goes as it came.
    #[test]
    fn a_round_that_holds_everything_takes_it_in_order() {
        let mut intake = Intake::default();
        for t in [2, 0, 1, 2, 1] {
            intake.push(if t == 0 { Command::Tick } else { ack(t) });
        }
        assert_eq!(tenants_of(&intake.round(4, |_| 1)), [2, 0, 1, 2, 1]);
        assert!(intake.is_empty());
    }

    #[test]
    fn busy_tenants_share_rounds_by_weight() {
        let mut intake = Intake::default();
        for _ in 0..2_000 {
            intake.push(ack(1));
            intake.push(ack(2));
        }
        let round = tenants_of(&intake.round(1_024, |t| if t == TenantId(1) { 3 } else { 1 }));
        let heavy = round.iter().filter(|&&t| t == 1).count();
        assert_eq!((heavy, round.len() - heavy), (768, 256));
        // Shutdown takes what is left, all of it.
        assert_eq!(intake.drain().len(), 4_000 - 1_024);
        assert!(intake.is_empty());
    }
}
