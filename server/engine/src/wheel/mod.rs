//! A hierarchical timer wheel: the in-memory index of "what comes due when".
//!
//! This is the algorithm of tokio's time driver, written safely over a slab: 6 levels of 64
//! slots, one tick per millisecond, so the wheel reaches 2^36 ticks (about 2.2 years).
//! Anything further out is parked in the top level and re-checked each time it comes round.
//!
//! Ground rules:
//! - It is pure: no clock reads, no I/O, no tokio. Time is the `now` the caller passes.
//! - It holds small values (message ids and timer kinds), never payloads. It is only an
//!   index: the durable due times live in redb and the wheel is rebuilt from them at start.
//! - Insert, remove and each expiry are O(1); finding the next occupied slot is a bit
//!   rotation and `trailing_zeros`, not a scan.

mod level;

use std::num::NonZeroU64;

use level::{Expiration, LEVEL_MULT, Level};
use slab::Slab;

/// Number of levels; `NUM_LEVELS * BITS_PER_LEVEL` bits of ticks are covered.
const NUM_LEVELS: usize = 6;
/// log2(LEVEL_MULT): each level consumes one 6-bit digit of the deadline.
const BITS_PER_LEVEL: usize = 6;
/// The furthest distance from `elapsed` the wheel can hold without wrapping.
const MAX_DURATION: u64 = (1 << (BITS_PER_LEVEL * NUM_LEVELS)) - 1;

/// Names an entry so it can be cancelled. Stale keys (of entries that already fired or were
/// removed) are detected by the generation and ignored. The generation is never 0, so an
/// `Option<TimerKey>` (one per live message in the engine's index) takes no extra word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: usize,
    generation: NonZeroU64,
}

#[derive(Debug, Clone, Copy)]
enum Place {
    Level {
        level: usize,
        slot: usize,
        pos: usize,
    },
    Pending {
        pos: usize,
    },
}

#[derive(Debug)]
struct Entry<T> {
    when: u64,
    generation: NonZeroU64,
    place: Place,
    value: T,
}

/// The timer wheel. `T` is what an expiry hands back (an id and what kind of timer it was).
#[derive(Debug)]
pub struct Wheel<T> {
    /// Ticks processed so far; every entry in a level is due after this.
    elapsed: u64,
    levels: Vec<Level>,
    entries: Slab<Entry<T>>,
    /// Entries whose deadline has come, waiting to be handed out by `poll`.
    pending: Vec<usize>,
    next_generation: NonZeroU64,
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    pub fn new() -> Self {
        Self {
            elapsed: 0,
            levels: (0..NUM_LEVELS).map(Level::new).collect(),
            entries: Slab::new(),
            pending: Vec::new(),
            next_generation: NonZeroU64::MIN,
        }
    }

    /// Number of entries held (waiting or due but not yet polled).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tick up to which the wheel has been polled.
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Adds `value`, due at tick `when`. A `when` already past is due at the next `poll`.
    pub fn insert(&mut self, when: u64, value: T) -> TimerKey {
        let generation = self.next_generation;
        // 2^64 inserts do not happen; saturating keeps this free of a panic path anyway.
        self.next_generation = generation.saturating_add(1);
        let index = self.entries.insert(Entry {
            when,
            generation,
            place: Place::Pending { pos: 0 },
            value,
        });
        self.place(index);
        TimerKey { index, generation }
    }

    /// Cancels an entry. Returns its value, or `None` if the key is stale.
    pub fn remove(&mut self, key: TimerKey) -> Option<T> {
        let entry = self.entries.get(key.index)?;
        if entry.generation != key.generation {
            return None;
        }
        self.unlink(key.index);
        Some(self.entries.remove(key.index).value)
    }

    /// A tick at or before which the next entry comes due, or `None` if the wheel is empty.
    /// This is the start of the next occupied slot, so it never lies after the earliest
    /// deadline: sleeping until it never oversleeps.
    pub(crate) fn next_expiration(&self) -> Option<u64> {
        if !self.pending.is_empty() {
            return Some(self.elapsed);
        }
        self.next_level_expiration().map(|e| e.deadline)
    }

    /// Hands out one entry whose deadline is `<= now`, with that deadline. Call until it
    /// returns `None`; the wheel's clock then stands at `now`. `now` must not go backwards.
    pub fn poll(&mut self, now: u64) -> Option<(u64, T)> {
        debug_assert!(now >= self.elapsed, "time went backwards");
        let now = now.max(self.elapsed);
        loop {
            if let Some(index) = self.pending.pop() {
                let entry = self.entries.remove(index);
                return Some((entry.when, entry.value));
            }
            match self.next_level_expiration() {
                Some(expiration) if expiration.deadline <= now => self.process(expiration),
                _ => {
                    self.elapsed = now;
                    return None;
                }
            }
        }
    }

    fn next_level_expiration(&self) -> Option<Expiration> {
        // Entries in a lower level are always due before those of a higher level, so the
        // first level with anything in it has the next expiration.
        self.levels
            .iter()
            .find_map(|level| level.next_expiration(self.elapsed))
    }

    /// Takes a whole slot (taking it first keeps a wrapped top-level entry from being seen
    /// twice), then moves each entry either to `pending` or down to a finer level.
    fn process(&mut self, expiration: Expiration) {
        let taken = self.levels[expiration.level].take_slot(expiration.slot);
        self.elapsed = expiration.deadline;
        for index in taken {
            self.place(index);
        }
    }

    /// Files entry `index` by its deadline relative to `elapsed`.
    fn place(&mut self, index: usize) {
        let elapsed = self.elapsed;
        let Some(entry) = self.entries.get_mut(index) else {
            return;
        };
        if entry.when <= elapsed {
            entry.place = Place::Pending {
                pos: self.pending.len(),
            };
            self.pending.push(index);
            return;
        }
        let level = level_for(elapsed, entry.when);
        let slot = ((entry.when >> (BITS_PER_LEVEL * level)) % LEVEL_MULT as u64) as usize;
        let pos = self.levels[level].push(slot, index);
        entry.place = Place::Level { level, slot, pos };
    }

    /// Detaches entry `index` from the level slot or pending list it is in.
    fn unlink(&mut self, index: usize) {
        let Some(entry) = self.entries.get(index) else {
            return;
        };
        let moved = match entry.place {
            Place::Level { level, slot, pos } => self.levels[level]
                .remove(slot, pos)
                .map(|moved| (moved, Place::Level { level, slot, pos })),
            Place::Pending { pos } => {
                self.pending.swap_remove(pos);
                self.pending
                    .get(pos)
                    .map(|&moved| (moved, Place::Pending { pos }))
            }
        };
        if let Some((moved, place)) = moved
            && let Some(e) = self.entries.get_mut(moved)
        {
            e.place = place;
        }
    }
}

/// The level an entry due at `when` belongs in, seen from `elapsed`: the highest 6-bit digit
/// in which the two differ. `| 63` makes a deadline within the current 64-tick window land on
/// level 0; a distance beyond the wheel's reach is clamped to the top level.
fn level_for(elapsed: u64, when: u64) -> usize {
    const SLOT_MASK: u64 = (1 << BITS_PER_LEVEL) - 1;
    let mut masked = (elapsed ^ when) | SLOT_MASK;
    if masked >= MAX_DURATION {
        masked = MAX_DURATION - 1;
    }
    let significant = 63 - masked.leading_zeros() as usize;
    let level = significant / BITS_PER_LEVEL;
    debug_assert!(level < NUM_LEVELS);
    level
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn level_for_every_digit() {
        assert_eq!(level_for(0, 0), 0);
        for level in 0..NUM_LEVELS {
            let lo = 1u64 << (BITS_PER_LEVEL * level);
            let hi = (1u64 << (BITS_PER_LEVEL * (level + 1))) - 1;
            assert_eq!(level_for(0, lo), level, "lo of level {level}");
            assert_eq!(level_for(0, hi), level, "hi of level {level}");
        }
        // Beyond the wheel's reach: top level.
        assert_eq!(level_for(0, u64::MAX), NUM_LEVELS - 1);
    }

    #[test]
    fn fires_each_of_the_first_ticks_exactly_once() {
        for when in 0..4_200u64 {
            let mut wheel = Wheel::new();
            wheel.insert(when, when);
            if when > 0 {
                assert_eq!(wheel.poll(when - 1), None, "fired early: {when}");
            }
            assert_eq!(wheel.poll(when), Some((when, when)));
            assert_eq!(wheel.poll(when + 1), None);
            assert!(wheel.is_empty());
        }
    }

    #[test]
    fn next_expiration_never_after_the_deadline() {
        let mut wheel = Wheel::new();
        for when in [5u64, 64, 65, 4_095, 4_096, 262_144, 1 << 36, (1 << 40) + 3] {
            wheel.insert(when, ());
        }
        let mut fired = Vec::new();
        let mut now = 0;
        while let Some(next) = wheel.next_expiration() {
            now = now.max(next);
            while let Some((when, ())) = wheel.poll(now) {
                assert!(when <= now);
                fired.push(when);
            }
        }
        fired.sort_unstable();
        assert_eq!(
            fired,
            vec![5, 64, 65, 4_095, 4_096, 262_144, 1 << 36, (1 << 40) + 3]
        );
    }

    #[test]
    fn remove_cancels_and_stale_keys_are_ignored() {
        let mut wheel = Wheel::new();
        let a = wheel.insert(100, 'a');
        let b = wheel.insert(100, 'b');
        let c = wheel.insert(0, 'c');
        assert_eq!(wheel.remove(a), Some('a'));
        assert_eq!(wheel.remove(a), None);
        assert_eq!(wheel.remove(c), Some('c'));
        assert_eq!(wheel.poll(100), Some((100, 'b')));
        assert_eq!(wheel.remove(b), None);
        // A reused slab index must not be cancellable through the old key.
        let d = wheel.insert(200, 'd');
        assert_eq!(wheel.remove(b), None);
        assert_eq!(wheel.remove(d), Some('d'));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(usize),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u64..200).prop_map(Op::Insert),
            2 => (0u64..300_000).prop_map(Op::Insert),
            1 => (0u64..(1 << 40)).prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Remove),
            3 => (0u64..500).prop_map(Op::Advance),
            1 => (0u64..(1 << 38)).prop_map(Op::Advance),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The wheel against a `BTreeMap` reference: after every poll, exactly the entries due
        /// by `now` have fired, each once, and `next_expiration` never lies past the earliest
        /// remaining deadline.
        #[test]
        fn matches_btreemap_reference(ops in proptest::collection::vec(op(), 1..200)) {
            let mut wheel = Wheel::new();
            let mut reference: BTreeMap<u64, u64> = BTreeMap::new(); // id -> when
            let mut keys: Vec<(u64, TimerKey)> = Vec::new();
            let mut now = 0u64;
            let mut next_id = 0u64;
            for op in ops {
                match op {
                    Op::Insert(delta) => {
                        let when = now + delta;
                        let key = wheel.insert(when, next_id);
                        reference.insert(next_id, when);
                        keys.push((next_id, key));
                        next_id += 1;
                    }
                    Op::Remove(i) => {
                        if !keys.is_empty() {
                            let (id, key) = keys.swap_remove(i % keys.len());
                            let expected = reference.remove(&id).map(|_| id);
                            prop_assert_eq!(wheel.remove(key), expected);
                        }
                    }
                    Op::Advance(delta) => {
                        now += delta;
                        let mut fired = Vec::new();
                        while let Some((when, id)) = wheel.poll(now) {
                            prop_assert!(when <= now);
                            prop_assert_eq!(reference.remove(&id), Some(when));
                            fired.push(id);
                        }
                        prop_assert!(reference.values().all(|&w| w > now), "due entry left behind");
                    }
                }
                prop_assert_eq!(wheel.len(), reference.len());
                if let Some(earliest) = reference.values().min() {
                    let next = wheel.next_expiration();
                    prop_assert!(next.is_some_and(|n| n <= *earliest));
                } else {
                    prop_assert_eq!(wheel.next_expiration(), None);
                }
            }
        }
    }
}
