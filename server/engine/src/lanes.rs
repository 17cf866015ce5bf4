//! FIFO lanes (issue #29): the order of an ordered destination's messages per ordering key.
//!
//! An endpoint or a pull queue may be ordered (its FIFO policy: `block` or `park`). Each
//! message to it joins the lane of its event's ordering key (none: the destination's one
//! lane, key ""), and gets the next number of that lane's gap-free sequence, kept durable in
//! the `lanes` table (written in the same round as the message). Only a lane's head may be
//! ready, leased or in flight; the messages behind it are [`LiveState::Queued`]: pending,
//! neither ready nor in the wheel. Lanes never wait for each other.
//!
//! The head leaves its lane when it completes (the next becomes the head) or dies. With
//! `park` the lane moves on (the dead letter is the gap a receiver sees in the numbers);
//! with `block` the dead letter holds the lane, marked in its row ([`LaneSlot::blocks`]),
//! until an operator replays it (it becomes the head again, in order) or purges it (skip),
//! or it expires. A dead letter replayed after its lane moved on is delivered outside the
//! lane and marked out of order ([`LaneTag::Detached`]).
//!
//! Memory: a lane is held while it has live messages or is blocked; otherwise it is let go,
//! and its last number is read back from the `lanes` table when the key comes again.

use super::enqueue::waiting;
use super::index::{DestId, LaneTag, LiveState};
use super::{Engine, Tx};
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_storage::store::{LaneRow, LaneSlot, StoreError, lane_key};

/// What an ordered destination does when a lane's head dies (uses its last attempt, or
/// is refused for good).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FifoPolicy {
    /// The dead letter holds the lane until an operator replays or purges it.
    Block,
    /// The dead letter is parked and the lane moves on (a gap in its numbers).
    Park,
}

impl FifoPolicy {
    /// An endpoint record's `fifo` (0: unordered, 1: block, 2: park).
    pub fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(Self::Block),
            2 => Some(Self::Park),
            _ => None,
        }
    }

    pub fn code(self) -> u32 {
        match self {
            Self::Block => 1,
            Self::Park => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Block => "block",
            Self::Park => "park",
        }
    }

    /// The policy [`FifoPolicy::as_str`] names.
    pub fn named(name: &str) -> Option<Self> {
        [Self::Block, Self::Park]
            .into_iter()
            .find(|p| p.as_str() == name)
    }
}

impl Engine {
    /// The FIFO policy of the destination with this key (`None`: unordered).
    pub(super) fn fifo_of(&self, key: &str) -> Option<FifoPolicy> {
        if let Some((tenant, name)) = Destination::endpoint_of_key(key) {
            return self
                .endpoints
                .get(tenant, name)
                .and_then(|e| FifoPolicy::from_code(e.fifo));
        }
        // A queue's settings, its tenant's; the config file's queues are `default`'s.
        let d = hookd_core::destination::Destination::from_key(key)?;
        let hookd_core::destination::To::Queue(name) = &d.to else {
            return None;
        };
        if let Some(q) = self.queues.get(d.tenant, name) {
            return FifoPolicy::from_code(q.fifo);
        }
        if d.tenant.is_default() {
            return self.config.fifo_queues.get(name.as_str()).copied();
        }
        None
    }

    /// Puts new message `id` (due at `due`) at the back of lane `ordering_key` of ordered
    /// destination `d`: its number (the lane's row is written in this round), its tag, and
    /// the state it starts in (queued unless it is the head of a lane not blocked).
    pub(super) fn join_lane(
        &mut self,
        t: Tx<'_, '_>,
        d: DestId,
        ordering_key: &str,
        id: MessageId,
        due: u64,
        now: u64,
    ) -> Result<(LaneSlot, LaneTag, LiveState), StoreError> {
        let row_key = lane_key(&self.index.dests[d].key, ordering_key);
        let (lanes, slot) = self.index.lane_of(d, ordering_key);
        let lane = &mut lanes.slab[slot as usize];
        let last = match lane.last_seq {
            Some(seq) => seq,
            None => t.lane(&row_key)?.last_seq,
        };
        let seq = last + 1;
        lane.last_seq = Some(seq);
        t.put_lane(
            &row_key,
            &LaneRow {
                last_seq: seq,
                used_ms: Some(now),
            },
        );
        lane.queue.push_back((id, due));
        let head = lane.queue.len() == 1 && lane.blocked_by.is_none();
        let state = if head {
            waiting(due, now)
        } else {
            LiveState::Queued
        };
        let at = LaneSlot {
            key: ordering_key.to_owned(),
            seq,
            detached: false,
            blocks: false,
        };
        Ok((at, LaneTag::In(slot), state))
    }

    /// Message `id` left lane `slot` of `d`: completed, or dead (`blocks`: its dead letter
    /// holds the lane). The next message of the lane becomes its head unless it is blocked.
    pub(super) fn leave_lane(
        &mut self,
        d: DestId,
        slot: u32,
        id: MessageId,
        blocks: bool,
        now: u64,
    ) {
        let Some(lanes) = self.index.dests[d].lanes.as_deref_mut() else {
            return;
        };
        let Some(lane) = lanes.slab.get_mut(slot as usize) else {
            return;
        };
        // The head, but found by id: a message is never anywhere else in its lane's queue.
        if let Some(pos) = lane.queue.iter().position(|(x, _)| *x == id) {
            lane.queue.remove(pos);
        }
        if blocks {
            lane.blocked_by = Some(id);
            lanes.blocked.insert(id, slot);
        }
        self.advance_lane(d, slot, now);
    }

    /// Dead letter `id` of `d` is replayed, purged or expired: if it blocks its lane, the
    /// lane is released. Returns the lane (its key and slot) it blocked.
    pub(super) fn unblock(&mut self, d: DestId, id: MessageId) -> Option<u32> {
        let lanes = self.index.dests.get_mut(d)?.lanes.as_deref_mut()?;
        let slot = lanes.blocked.remove(&id)?;
        if let Some(lane) = lanes.slab.get_mut(slot as usize) {
            lane.blocked_by = None;
        }
        Some(slot)
    }

    /// Dead letter `id` of `d` is gone (purged or expired): if it blocked its lane, the
    /// lane moves on (its next message becomes the head). Whether it blocked one.
    pub(super) fn skip_blocker(&mut self, d: DestId, id: MessageId, now: u64) -> bool {
        let Some(slot) = self.unblock(d, id) else {
            return false;
        };
        self.advance_lane(d, slot, now);
        true
    }

    /// Puts replayed message `id` back at the head of lane `slot` of `d`, which it blocked.
    pub(super) fn rejoin_lane(&mut self, d: DestId, slot: u32, id: MessageId, due: u64) {
        if let Some(lane) = self.index.dests[d]
            .lanes
            .as_deref_mut()
            .and_then(|l| l.slab.get_mut(slot as usize))
        {
            lane.queue.push_front((id, due));
        }
    }

    /// Lane `slot` of `d` may move: its first message becomes ready (or scheduled) if it is
    /// queued and the lane is not blocked; a lane left empty and unblocked is let go.
    fn advance_lane(&mut self, d: DestId, slot: u32, now: u64) {
        let Some(lanes) = self.index.dests[d].lanes.as_deref_mut() else {
            return;
        };
        let Some(lane) = lanes.slab.get(slot as usize) else {
            return;
        };
        if lane.blocked_by.is_some() {
            return;
        }
        match lane.queue.front().copied() {
            Some((next, due)) => {
                let attempts = match self.index.live.get(&next) {
                    Some(l) if l.state == LiveState::Queued => l.attempts,
                    _ => return,
                };
                // Its first attempt waits until this round (what ended the one before)
                // is durable.
                self.out.lane_advanced(next, self.pipeline.rounds);
                self.transition(next, waiting(due, now), attempts, due);
            }
            None => {
                let lane = lanes.slab.remove(slot as usize);
                lanes.by_key.remove(&lane.key);
                self.index.lanes_held = self.index.lanes_held.saturating_sub(1);
                if lanes.slab.is_empty() {
                    self.index.dests[d].lanes = None;
                    self.index.review(d);
                }
            }
        }
    }

    /// Recovery: lane `key` of `d` is blocked by dead letter `id`.
    pub(super) fn recover_blocked(&mut self, d: DestId, key: &str, id: MessageId) {
        let (lanes, slot) = self.index.lane_of(d, key);
        lanes.slab[slot as usize].blocked_by = Some(id);
        lanes.blocked.insert(id, slot);
    }

    /// Recovery: the live messages of one lane of `d`, in their numbers' order. The first
    /// keeps the state it was read back in unless the lane is blocked; the others queue
    /// behind it.
    pub(super) fn recover_lane(&mut self, d: DestId, key: &str, messages: Vec<RecoveredInLane>) {
        let (lanes, slot) = self.index.lane_of(d, key);
        let lane = &mut lanes.slab[slot as usize];
        let blocked = lane.blocked_by.is_some();
        lane.queue.extend(messages.iter().map(|m| (m.id, m.due_ms)));
        for (i, m) in messages.into_iter().enumerate() {
            let state = if i == 0 && !blocked {
                m.state
            } else {
                LiveState::Queued
            };
            let live = super::index::Live::new(d, state, m.attempts, m.max_attempts, m.bytes)
                .in_lane(LaneTag::In(slot))
                .replayed(m.replayed);
            self.track(m.id, live, m.due_ms);
        }
    }
}

/// A live message of a lane, as recovery reads it back.
#[derive(Debug)]
pub(super) struct RecoveredInLane {
    pub id: MessageId,
    pub seq: u64,
    pub state: LiveState,
    pub attempts: u32,
    pub max_attempts: u32,
    pub bytes: u32,
    pub due_ms: u64,
    pub replayed: bool,
}
