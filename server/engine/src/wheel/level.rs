//! One level of the hierarchical timer wheel: 64 slots and an occupancy bitmap.
//!
//! A slot at level `L` spans `64^L` ticks, so the whole level spans `64^(L+1)` ticks. A slot
//! holds slab indices of the entries that fall in it; each entry remembers its position in the
//! slot's vector so removal is an O(1) `swap_remove`.

/// Slots per level.
pub(super) const LEVEL_MULT: usize = 64;

#[derive(Debug)]
pub(super) struct Level {
    level: usize,
    /// Bit `s` is set iff `slots[s]` is non-empty. Finding the next occupied slot is a rotate
    /// and a `trailing_zeros`, never a scan.
    occupied: u64,
    slots: [Vec<usize>; LEVEL_MULT],
}

/// The next slot of a level that holds entries, and the tick at which that slot starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expiration {
    pub(super) level: usize,
    pub(super) slot: usize,
    pub(super) deadline: u64,
}

impl Level {
    pub(super) fn new(level: usize) -> Self {
        Self {
            level,
            occupied: 0,
            slots: std::array::from_fn(|_| Vec::new()),
        }
    }

    /// The first occupied slot at or after `now`, and the tick at which it starts.
    pub(super) fn next_expiration(&self, now: u64) -> Option<Expiration> {
        let slot = self.next_occupied_slot(now)?;
        let level_range = level_range(self.level);
        let slot_range = slot_range(self.level);
        // Start of the level-sized window that holds `now`; slot `slot` of this window starts
        // `slot * slot_range` later.
        let level_start = now & !(level_range - 1);
        let mut deadline = level_start + slot as u64 * slot_range;
        if deadline <= now {
            // Only the top level can hold a slot "behind" now: its entries lie beyond the
            // wheel's reach and wrapped around, so they come due in the next rotation. Lower
            // levels only ever hold entries that are ahead of `now` within the current window.
            debug_assert_eq!(self.level, super::NUM_LEVELS - 1);
            deadline += level_range;
        }
        Some(Expiration {
            level: self.level,
            slot,
            deadline,
        })
    }

    fn next_occupied_slot(&self, now: u64) -> Option<usize> {
        if self.occupied == 0 {
            return None;
        }
        // Rotate so that bit 0 is the first slot to consider; the first set bit is then the
        // distance, in slots, to the next occupied one.
        let now_slot = (now / slot_range(self.level)) as usize % LEVEL_MULT;
        // On the top level, the slot `now` falls in can only hold wrapped entries (one
        // sharing the top digit with `now` would sit on a lower level), which are due a whole
        // rotation later: look at it last, or it would hide a slot due in this rotation.
        let start = if self.level == super::NUM_LEVELS - 1 {
            (now_slot + 1) % LEVEL_MULT
        } else {
            now_slot
        };
        let rotated = self.occupied.rotate_right(start as u32);
        let zeros = rotated.trailing_zeros() as usize;
        Some((zeros + start) % LEVEL_MULT)
    }

    /// Adds slab index `key` to `slot`; returns its position in the slot.
    pub(super) fn push(&mut self, slot: usize, key: usize) -> usize {
        self.occupied |= 1 << slot;
        self.slots[slot].push(key);
        self.slots[slot].len() - 1
    }

    /// Removes the entry at `pos` of `slot`. Returns the slab index that moved into `pos`
    /// (the caller must update its stored position), if any.
    pub(super) fn remove(&mut self, slot: usize, pos: usize) -> Option<usize> {
        let entries = &mut self.slots[slot];
        entries.swap_remove(pos);
        if entries.is_empty() {
            self.occupied &= !(1 << slot);
        }
        entries.get(pos).copied()
    }

    /// Empties `slot` and returns what it held.
    pub(super) fn take_slot(&mut self, slot: usize) -> Vec<usize> {
        self.occupied &= !(1 << slot);
        std::mem::take(&mut self.slots[slot])
    }
}

/// Ticks spanned by one slot of `level`.
pub(super) const fn slot_range(level: usize) -> u64 {
    (LEVEL_MULT as u64).pow(level as u32)
}

/// Ticks spanned by the whole of `level`.
pub(super) const fn level_range(level: usize) -> u64 {
    (LEVEL_MULT as u64).pow(level as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_for_every_position_of_level_zero_and_one() {
        for level in 0..2 {
            // Slot 0 holds nothing at now = 0: its entries would be due, not waiting.
            for pos in 1..LEVEL_MULT {
                let mut lvl = Level::new(level);
                lvl.push(pos, 7);
                // From "now = 0" every slot is ahead, so its deadline is its start.
                let exp = lvl.next_expiration(0);
                assert_eq!(
                    exp,
                    Some(Expiration {
                        level,
                        slot: pos,
                        deadline: pos as u64 * slot_range(level),
                    })
                );
            }
        }
    }

    #[test]
    fn next_slot_wraps_after_now() {
        let mut lvl = Level::new(0);
        lvl.push(3, 1);
        lvl.push(60, 2);
        // At tick 10 the next occupied slot is 60 (slot 3 is behind and belongs to the next
        // window, which a level-0 entry never does; only the order is checked here).
        assert_eq!(lvl.next_occupied_slot(10), Some(60));
        assert_eq!(lvl.next_occupied_slot(61), Some(3));
    }

    #[test]
    fn remove_reports_moved_entry_and_clears_bit() {
        let mut lvl = Level::new(0);
        lvl.push(5, 10);
        lvl.push(5, 11);
        lvl.push(5, 12);
        assert_eq!(lvl.remove(5, 0), Some(12));
        assert_eq!(lvl.remove(5, 1), None);
        assert_eq!(lvl.remove(5, 0), None);
        assert_eq!(lvl.occupied, 0);
    }
}
