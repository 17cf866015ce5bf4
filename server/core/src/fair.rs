//! Weighted fair sharing of one resource between flows (issue #52: push attempts, outbound
//! connection slots and a round's work, shared between tenants): deficit round robin
//! (Shreedhar and Varghese, 1995) with a weight per flow.
//!
//! Every backlogged flow is on a ring. At the start of its turn a flow's deficit grows by
//! `quantum x weight`; it is served while its deficit covers the cost of its next unit,
//! and its turn ends when it cannot pay (it goes to the back, keeping what is left, which
//! is less than one unit's cost) or when it has nothing left (it leaves the ring and its
//! deficit goes: an idle flow saves up no credit). One pick is O(1) amortised when the
//! quantum is at least the largest cost.
//!
//! The bound (tested below over random arrivals): over any stretch of picks in which flows
//! `i` and `j` both stay backlogged, `|served_i / w_i - served_j / w_j| <= 2 Q + 2 M`,
//! where `Q` is the quantum and `M` the largest cost of one unit. A flow at 100x its share
//! of arrivals still gets only its weight's share of the picks.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// One flow's place in the sharing.
#[derive(Debug, Clone, Copy)]
struct Flow {
    weight: u64,
    deficit: u64,
    /// Its turn has started: the quantum was added.
    topped: bool,
}

/// Deficit round robin over flows keyed by `K` (see the module's text).
#[derive(Debug)]
pub struct Drr<K> {
    quantum: u64,
    ring: VecDeque<K>,
    flows: HashMap<K, Flow>,
}

impl<K: Hash + Eq + Clone> Drr<K> {
    /// Sharing with `quantum` (at least 1) units of cost per weight per turn. A quantum at
    /// least as large as the largest cost serves a flow on every turn.
    pub fn new(quantum: u64) -> Self {
        Self {
            quantum: quantum.max(1),
            ring: VecDeque::new(),
            flows: HashMap::new(),
        }
    }

    /// `k` has work waiting, at `weight` (0 counts as 1). A flow already backlogged keeps
    /// its place and its deficit; its weight is the new one from its next turn on.
    pub fn backlogged(&mut self, k: K, weight: u32) {
        let weight = u64::from(weight.max(1));
        match self.flows.get_mut(&k) {
            Some(flow) => flow.weight = weight,
            None => {
                self.flows.insert(
                    k.clone(),
                    Flow {
                        weight,
                        deficit: 0,
                        topped: false,
                    },
                );
                self.ring.push_back(k);
            }
        }
    }

    /// `k` has nothing waiting: it leaves the ring, and its deficit goes with it.
    pub fn idle(&mut self, k: &K) {
        if self.flows.remove(k).is_some() {
            self.ring.retain(|r| r != k);
        }
    }

    /// The flow whose next unit goes now, its cost already charged. `cost` says what a
    /// flow's next unit costs, or `None` if it has nothing left (it is then made idle).
    /// `None`: no flow has anything.
    pub fn next(&mut self, mut cost: impl FnMut(&K) -> Option<u64>) -> Option<K> {
        loop {
            let k = self.ring.front()?.clone();
            let Some(c) = cost(&k) else {
                self.ring.pop_front();
                self.flows.remove(&k);
                continue;
            };
            let quantum = self.quantum;
            let Some(flow) = self.flows.get_mut(&k) else {
                // Not possible (the ring and the map change together); dropped if it were.
                self.ring.pop_front();
                continue;
            };
            if !flow.topped {
                flow.deficit = flow
                    .deficit
                    .saturating_add(quantum.saturating_mul(flow.weight));
                flow.topped = true;
            }
            if flow.deficit >= c {
                flow.deficit -= c;
                return Some(k);
            }
            // Its turn is over: what is left waits for the next one.
            flow.topped = false;
            self.ring.rotate_left(1);
        }
    }

    /// Backlogged flows.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Two flows always backlogged, weights 3 and 1, unit costs: 3 of every 4 picks are
    /// the first's.
    #[test]
    fn backlogged_flows_share_by_weight() {
        let mut d = Drr::new(1);
        d.backlogged("a", 3);
        d.backlogged("b", 1);
        let picks: Vec<&str> = (0..8).filter_map(|_| d.next(|_| Some(1))).collect();
        assert_eq!(picks, ["a", "a", "a", "b", "a", "a", "a", "b"]);
    }

    /// An idle flow saves up nothing, and a flow with nothing left leaves the ring.
    #[test]
    fn an_idle_flow_keeps_no_credit() {
        let mut d = Drr::new(10);
        d.backlogged(1u32, 1);
        assert_eq!(d.next(|_| Some(4)), Some(1));
        d.idle(&1);
        assert!(d.is_empty());
        d.backlogged(1, 1);
        d.backlogged(2, 1);
        // Flow 1 starts again from nothing: 10 of credit, two units of 4.
        let mut left = HashMap::from([(1u32, 5u32), (2, 5)]);
        let picks: Vec<u32> = (0..6)
            .filter_map(|_| {
                let k = d.next(|k| (left[k] > 0).then_some(4))?;
                *left.get_mut(&k).expect("a flow of the test") -= 1;
                Some(k)
            })
            .collect();
        assert_eq!(picks, [1, 1, 2, 2, 1, 1]);
        assert_eq!(d.next(|_| None), None);
        assert!(d.is_empty());
    }

    /// A unit costing more than a turn's credit is served once credit has built up.
    #[test]
    fn a_unit_larger_than_the_quantum_still_goes() {
        let mut d = Drr::new(2);
        d.backlogged('x', 1);
        d.backlogged('y', 1);
        let cost = |k: &char| if *k == 'x' { 5 } else { 1 };
        let (mut x, mut y) = (0u64, 0u64);
        for _ in 0..100 {
            match d.next(|k| Some(cost(k))) {
                Some('x') => x += 5,
                Some(_) => y += 1,
                None => unreachable!("both flows stay backlogged"),
            }
        }
        // Equal weights: equal cost served, within 2Q + 2M.
        assert!(x > 0 && x.abs_diff(y) <= 2 * 2 + 2 * 5, "x {x}, y {y}");
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Flow `.0` gets `.1` more units.
        Arrive(usize, u8),
        /// `.0` picks.
        Serve(u8),
    }

    fn op(flows: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..flows, 1u8..40).prop_map(|(f, n)| Op::Arrive(f, n)),
            (1u8..30).prop_map(Op::Serve),
        ]
    }

    proptest! {
        /// Over random arrivals (one flow may get 100x what another gets), any two flows
        /// that stay backlogged through a stretch of picks are served in proportion to
        /// their weights within the module's bound: `|s_i/w_i - s_j/w_j| <= 2Q + 2M`.
        #[test]
        fn backlogged_flows_get_their_weights_share_within_the_bound(
            weights in prop::collection::vec(1u32..8, 2..6),
            quantum in 1u64..6,
            max_cost in 1u64..6,
            costs in prop::collection::vec(1u64..6, 64),
            ops in prop::collection::vec(op(6), 1..120),
        ) {
            let n = weights.len();
            let max_cost = max_cost.min(quantum.max(1) * 2);
            let mut d = Drr::new(quantum);
            let mut queues: Vec<VecDeque<u64>> = vec![VecDeque::new(); n];
            let mut next_cost = 0usize;
            // Each pick: who was backlogged just before it, who got it, at what cost, and
            // whether that emptied it (it went idle: its stretch ends there).
            let mut log: Vec<(Vec<bool>, usize, u64, bool)> = Vec::new();
            for op in ops {
                match op {
                    Op::Arrive(f, k) => {
                        let f = f % n;
                        // A flow may be flooded: 100x the others' arrivals at most.
                        let k = if f == 0 { usize::from(k) * 100 } else { usize::from(k) };
                        if queues[f].is_empty() {
                            d.backlogged(f, weights[f]);
                        }
                        for _ in 0..k {
                            queues[f].push_back(costs[next_cost % costs.len()].min(max_cost));
                            next_cost += 1;
                        }
                    }
                    Op::Serve(k) => {
                        for _ in 0..k {
                            let backlogged: Vec<bool> = queues.iter().map(|q| !q.is_empty()).collect();
                            let Some(f) = d.next(|f| queues[*f].front().copied()) else {
                                prop_assert!(backlogged.iter().all(|b| !b), "nothing picked while work waits");
                                break;
                            };
                            let c = queues[f].pop_front();
                            prop_assert!(c.is_some(), "flow {f} picked with nothing waiting");
                            let emptied = queues[f].is_empty();
                            if emptied {
                                d.idle(&f);
                            }
                            log.push((backlogged, f, c.unwrap_or(0), emptied));
                        }
                    }
                }
            }
            let bound = 2.0 * quantum as f64 + 2.0 * max_cost as f64;
            for i in 0..n {
                for j in (i + 1)..n {
                    // The running difference of weighted service over each stretch in
                    // which both stay backlogged: its range is the worst sub-stretch.
                    let (mut lo, mut hi, mut diff) = (0.0f64, 0.0f64, 0.0f64);
                    for (backlogged, f, c, emptied) in &log {
                        if !(backlogged[i] && backlogged[j]) {
                            (lo, hi, diff) = (0.0, 0.0, 0.0);
                            continue;
                        }
                        if *f == i {
                            diff += *c as f64 / f64::from(weights[i]);
                        } else if *f == j {
                            diff -= *c as f64 / f64::from(weights[j]);
                        }
                        lo = lo.min(diff);
                        hi = hi.max(diff);
                        prop_assert!(
                            hi - lo <= bound,
                            "flows {i} (w {}) and {j} (w {}): {} apart, over the bound {bound}",
                            weights[i], weights[j], hi - lo
                        );
                        if *emptied && (*f == i || *f == j) {
                            (lo, hi, diff) = (0.0, 0.0, 0.0);
                        }
                    }
                }
            }
        }
    }
}
