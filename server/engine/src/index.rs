//! The engine's in-memory index of live messages: per-destination ready queues, counts and
//! long-poll waiters. It holds ids and small state only; payloads stay in the log.
//!
//! Two tiers, so that a backlog costs memory in proportion to what it is, not to what a
//! message could become. A message that has never been attempted and waits for nothing
//! but its turn (the bulk of any backlog) is a 24-byte [`Fresh`] entry in its
//! destination's `fresh` queue, and nothing else: no hash-map entry, no ordered-set entry.
//! It is promoted to a full [`Live`] entry in `live` when it leaves that queue for its first
//! attempt or lease. Every other live message (delayed, retrying, leased, replayed, in
//! flight) is in `live`, looked up by id. A fresh message cannot be looked up by id, and
//! nothing needs to: every operation that names a message by id (an ack, a nack, an attempt's
//! outcome, a timer) names one that has been handed out, and the admin paths (replay,
//! purge) concern dead letters, which are never fresh.
//!
//! Counts are kept up to date on every transition (through [`Index::set_state`]), so `Stats`
//! never scans the messages.

use hookd_core::scope::TenantId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rustc_hash::FxHashMap;
use slab::Slab;
use tokio::sync::oneshot;

use hookd_core::ids::MessageId;
use std::sync::Arc;

use super::gate::Gate;
use crate::wheel::TimerKey;
use hookd_core::push::Target;
use hookd_core::stats::{Activity, AttemptStats, DestinationSnapshot};

pub(crate) type DestId = usize;

/// What a wheel entry means when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timer {
    /// A delayed or retried message becomes ready.
    Due(MessageId),
    /// A lease runs out.
    Lease(MessageId),
    /// A long poll's wait runs out (its destination, its id).
    Wait(DestId, u64),
    /// A push destination may send again (pause over, breaker cooldown over, token due).
    Wake(DestId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LiveState {
    /// Waiting in the wheel for its due time.
    Scheduled,
    /// In its destination's ready queue.
    Ready,
    /// Leased; its lease deadline is in the wheel.
    Leased,
    /// Behind an earlier message of its FIFO lane (see `lanes.rs`): pending, but neither
    /// ready nor in the wheel until it is the lane's head.
    Queued,
}

/// Whether a live message is in a FIFO lane of its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LaneTag {
    /// Unordered.
    None,
    /// In lane `slot` of its destination's `lanes`.
    In(u32),
    /// Replayed after its lane moved on: unordered, but its schedule row keeps its lane
    /// and number (sent as out of order).
    Detached,
}

/// A live message that has never been attempted and is ready: what its destination's
/// `fresh` queue holds of it (24 bytes; the id as two halves, so the entry is not padded to
/// `u128`'s alignment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fresh {
    hi: u64,
    lo: u64,
    pub bytes: u32,
    pub max_attempts: u32,
}

impl Fresh {
    pub(crate) fn new(id: MessageId, bytes: u32, max_attempts: u32) -> Self {
        Self {
            hi: (id.0 >> 64) as u64,
            lo: id.0 as u64,
            bytes,
            max_attempts,
        }
    }

    pub(crate) fn id(&self) -> MessageId {
        MessageId((u128::from(self.hi) << 64) | u128::from(self.lo))
    }
}

/// Entries per chunk of a [`FreshQueue`] (96 KiB once full).
const FRESH_CHUNK: usize = 4_096;

/// A destination's never-attempted ready messages, oldest first, in chunks: a queue of ten
/// million costs its entries' 24 bytes each and a little, never the doubling a single
/// growing buffer would leave (a chunk grows only up to [`FRESH_CHUNK`], and chunks are
/// freed as they empty). Entries are in order of their ids' milliseconds (a later entry's is
/// never earlier), so the first is the oldest.
#[derive(Debug, Default)]
pub(crate) struct FreshQueue {
    chunks: VecDeque<VecDeque<Fresh>>,
    len: usize,
}

impl FreshQueue {
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn front(&self) -> Option<&Fresh> {
        self.chunks.front().and_then(VecDeque::front)
    }

    pub(crate) fn back(&self) -> Option<&Fresh> {
        self.chunks.back().and_then(VecDeque::back)
    }

    /// Whether `id` may join at the back: its millisecond is not before the last entry's.
    pub(crate) fn accepts(&self, id: MessageId) -> bool {
        self.back().is_none_or(|b| b.id().unix_ms() <= id.unix_ms())
    }

    pub(crate) fn push_back(&mut self, entry: Fresh) {
        match self.chunks.back_mut() {
            Some(chunk) if chunk.len() < FRESH_CHUNK => chunk.push_back(entry),
            _ => {
                let mut chunk = VecDeque::new();
                chunk.push_back(entry);
                self.chunks.push_back(chunk);
            }
        }
        self.len += 1;
    }

    pub(crate) fn pop_front(&mut self) -> Option<Fresh> {
        let chunk = self.chunks.front_mut()?;
        let entry = chunk.pop_front();
        if chunk.is_empty() {
            self.chunks.pop_front();
        }
        if entry.is_some() {
            self.len -= 1;
        }
        entry
    }

    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Fresh> {
        self.chunks.iter().flatten()
    }
}

/// A message that is neither completed nor dead.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    pub dest: DestId,
    pub state: LiveState,
    /// Attempts used since enqueue or replay; the current lease is attempt `attempts`.
    pub attempts: u32,
    pub max_attempts: u32,
    pub timer: Option<TimerKey>,
    /// Its encoded record's size, counted in its destination's `live_bytes` (0 until
    /// known: a message recovered at start is sized by a pass after it).
    pub bytes: u32,
    pub lane: LaneTag,
    /// A dead letter made ready again in place: its deliveries carry `hookd-replay`.
    pub replayed: bool,
}

impl Live {
    /// Not yet in the wheel (see `Engine::track`).
    pub(crate) fn new(
        dest: DestId,
        state: LiveState,
        attempts: u32,
        max_attempts: u32,
        bytes: u32,
    ) -> Self {
        Self {
            dest,
            state,
            attempts,
            max_attempts,
            timer: None,
            bytes,
            lane: LaneTag::None,
            replayed: false,
        }
    }

    pub(crate) fn in_lane(mut self, lane: LaneTag) -> Self {
        self.lane = lane;
        self
    }

    pub(crate) fn replayed(mut self, replayed: bool) -> Self {
        self.replayed = replayed;
        self
    }
}

pub(crate) type ReceiveReply = oneshot::Sender<Result<Vec<super::Leased>, super::Refusal>>;

/// A Receive waiting for a message (long poll).
#[derive(Debug)]
pub(crate) struct Waiter {
    pub id: u64,
    pub max: usize,
    pub visibility_ms: u64,
    pub timer: TimerKey,
    pub reply: ReceiveReply,
}

/// How a push destination (an endpoint, or the origin of ad-hoc URLs) is delivered to.
#[derive(Debug)]
pub(crate) struct Push {
    pub target: Arc<Target>,
    /// The endpoint's URL; `None` for an ad-hoc URL origin (each message has its own URL).
    pub url: Option<String>,
    /// Whether its next attempt may go.
    pub(crate) gate: Gate,
    /// The wheel entry that wakes this destination, and when.
    pub wake: Option<(u64, TimerKey)>,
    pub stats: AttemptStats,
}

/// One FIFO lane of a destination (see `lanes.rs`).
#[derive(Debug)]
pub(crate) struct Lane {
    pub(crate) key: Box<str>,
    /// Its live messages in their numbers' order, head first, with when each is due.
    pub(crate) queue: VecDeque<(MessageId, u64)>,
    /// The last number handed out (`None`: not read from the `lanes` table yet).
    pub(crate) last_seq: Option<u64>,
    /// The dead letter holding it (policy `block`).
    pub(crate) blocked_by: Option<MessageId>,
}

/// An ordered destination's lanes that hold messages or are blocked.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    pub(crate) by_key: FxHashMap<Box<str>, u32>,
    pub(crate) slab: Slab<Lane>,
    /// Blocking dead letter -> its lane.
    pub(crate) blocked: FxHashMap<MessageId, u32>,
}

/// What one FIFO lane held in memory counts toward the total marks of live messages, on
/// top of its messages: a lane (its key, its queue, its map entries) costs about three
/// times the index entry of a message (about 250 B), measured as 1 KB per message with an
/// ordering key of its own.
pub(crate) const LANE_MESSAGES: u64 = 3;

impl Lanes {
    /// The slot of lane `key`, and whether it was made now.
    pub(crate) fn slot(&mut self, key: &str) -> (u32, bool) {
        if let Some(&slot) = self.by_key.get(key) {
            return (slot, false);
        }
        let slot = self.slab.insert(Lane {
            key: key.into(),
            queue: VecDeque::new(),
            last_seq: None,
            blocked_by: None,
        }) as u32;
        self.by_key.insert(key.into(), slot);
        (slot, true)
    }

    /// How many lanes are held, and how many of them are blocked.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.slab.len() as u64, self.blocked.len() as u64)
    }
}

/// One destination's share of the index.
#[derive(Debug)]
pub(crate) struct Dest {
    /// Whose it is (its key says: see `Destination::key`).
    pub(crate) tenant: TenantId,
    pub key: String,
    /// Ready messages in `live` (retries, replays, delayed ones come due), sent before the
    /// fresh ones. May hold ids that left the Ready state since: they are skipped.
    pub ready: VecDeque<MessageId>,
    /// Ready messages never attempted, not in `live` (see the module's text).
    pub(crate) fresh: FreshQueue,
    /// The ids of its messages in `live`, ordered by creation time.
    pub(crate) live_ids: BTreeSet<MessageId>,
    pub counts: Counts,
    /// Bytes of its live messages' records (what the byte watermarks measure).
    pub live_bytes: u64,
    pub(crate) waiters: VecDeque<Waiter>,
    pub activity: Activity,
    /// Set for endpoints and ad-hoc URL origins: how they are delivered to.
    pub push: Option<Box<Push>>,
    /// Its FIFO lanes, while it has any (see `lanes.rs`).
    pub(crate) lanes: Option<Box<Lanes>>,
    /// In `Index::dispatch` already.
    pub(crate) dispatch_queued: bool,
    /// In `Index::review` already.
    in_review: bool,
    /// Set while idle: its place in `Index::idle`.
    idle_stamp: Option<u64>,
}

impl Dest {
    fn new(key: String) -> Self {
        Self {
            tenant: hookd_core::destination::Destination::tenant_of_key(&key)
                .unwrap_or(TenantId::DEFAULT),
            key,
            ready: VecDeque::new(),
            fresh: FreshQueue::default(),
            live_ids: BTreeSet::new(),
            counts: Counts::default(),
            live_bytes: 0,
            waiters: VecDeque::new(),
            activity: Activity::per_destination(),
            push: None,
            lanes: None,
            dispatch_queued: false,
            in_review: false,
            idle_stamp: None,
        }
    }

    /// What it holds, as the watermarks measure it: its live messages (pending, awaiting
    /// retry or in flight) and their records' bytes.
    pub(crate) fn held(&self) -> hookd_core::backpressure::Held {
        hookd_core::backpressure::Held {
            messages: self.counts.pending + self.counts.awaiting_retry + self.counts.in_flight,
            bytes: self.live_bytes,
        }
    }

    /// Its oldest live message, to the millisecond: the first of `live_ids` or of `fresh`,
    /// whichever id is smaller. Kept in `Index::firsts` for each destination that has one.
    fn first(&self) -> Option<MessageId> {
        let fresh = self.fresh.front().map(Fresh::id);
        match (self.live_ids.first().copied(), fresh) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether it holds any live message.
    pub(crate) fn has_live(&self) -> bool {
        !self.live_ids.is_empty() || !self.fresh.is_empty()
    }

    /// Whether a message may be waiting to be sent or leased (`ready` may hold stale ids).
    pub(crate) fn has_ready(&self) -> bool {
        !self.ready.is_empty() || !self.fresh.is_empty()
    }

    /// Age of its oldest live message (0: none).
    pub(crate) fn oldest_age_ms(&self, now_ms: u64) -> u64 {
        self.first()
            .map_or(0, |id| now_ms.saturating_sub(id.unix_ms()))
    }

    pub(crate) fn stats(&self, now_ms: u64) -> DestinationSnapshot {
        let mut out = DestinationSnapshot {
            destination: self.key.clone(),
            pending: self.counts.pending,
            awaiting_retry: self.counts.awaiting_retry,
            in_flight: self.counts.in_flight,
            dead_letter: self.counts.dead,
            oldest_pending_age_ms: self.oldest_age_ms(now_ms),
            waiting_receives: self.waiters.len() as u64,
            ..Default::default()
        };
        if let Some(lanes) = &self.lanes {
            (out.fifo_lanes, out.blocked_lanes) = lanes.counts();
        }
        self.activity.fill(now_ms, &mut out);
        out
    }
}

/// How many messages are in each state: one destination's, or (kept beside them, so the
/// total in Stats never sums destinations) all of them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counts {
    pub pending: u64,
    pub awaiting_retry: u64,
    pub in_flight: u64,
    pub dead: u64,
}

impl Counts {
    /// The count a live message in `state` after `attempts` attempts is in.
    fn counter(&mut self, state: LiveState, attempts: u32) -> &mut u64 {
        match state {
            LiveState::Scheduled if attempts > 0 => &mut self.awaiting_retry,
            LiveState::Scheduled | LiveState::Ready | LiveState::Queued => &mut self.pending,
            LiveState::Leased => &mut self.in_flight,
        }
    }
}

/// How many idle destinations (no message, waiter or endpoint) keep their statistics, most
/// recently idle first; older ones are forgotten, or, while they hold dead letters (kept
/// for `dead_letters.retention_secs`), shed everything but their key and counts. Each costs 6 to 20 KB
/// (rolling counters and histograms, a URL origin's push state); a client naming a million
/// queues or URL origins must not make hookd hold a million of them.
pub(crate) const IDLE_KEPT: usize = 1_000;

/// What [`Index::reviewed`] found past [`IDLE_KEPT`]: destinations to forget, and
/// destinations holding only dead letters, which shed their statistics and push state.
#[derive(Debug, Default)]
pub(crate) struct Reviewed {
    pub forget: Vec<DestId>,
    pub(crate) shed: Vec<DestId>,
}

/// Live messages and destinations.
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// Every live message but the fresh ones (see the module's text). FxHash, not SipHash:
    /// the keys are server-made ids (no flooding risk), and this map takes an insert and a
    /// removal per attempted message on the single engine thread.
    pub live: FxHashMap<MessageId, Live>,
    /// How many messages the destinations' `fresh` queues hold together.
    fresh: u64,
    /// A slab: a forgotten destination's slot is reused.
    pub(crate) dests: Slab<Dest>,
    /// Ordered, so that Stats pages through destinations by key.
    by_key: BTreeMap<String, DestId>,
    pub totals: Counts,
    /// Bytes of every live message's record (sized ones).
    pub live_bytes: u64,
    /// FIFO lanes held in memory, over all destinations (see [`LANE_MESSAGES`]).
    pub(crate) lanes_held: u64,
    /// What each tenant's destinations hold together (its quotas of live messages and
    /// bytes); a tenant that holds nothing may have no entry.
    tenants: FxHashMap<TenantId, hookd_core::backpressure::Held>,
    /// Push attempts in flight, by tenant and in all (what `fair.rs` shares by weight).
    pub(crate) push_flight: PushFlight,
    /// The oldest live message of each destination that has one: the first is the oldest
    /// pending message of all.
    firsts: BTreeSet<MessageId>,
    /// Long polls waiting, over all destinations, and the destinations that have any: kept
    /// by the waiter methods below, so neither Stats nor a drain walks every destination.
    waiting: u64,
    with_waiters: BTreeSet<DestId>,
    /// Destinations that gained ready messages while they had waiters, this round.
    pub touched: Vec<DestId>,
    /// Push destinations that may be able to send: ready messages arrived, an attempt
    /// ended, or a pause ended. Looked at once at the end of the round.
    pub(crate) dispatch: Vec<DestId>,
    /// Destinations that may have become idle or busy this round (see `Engine::review`).
    review: Vec<DestId>,
    /// Idle destinations in the order they became idle, with the stamp they had then (an
    /// entry whose stamp the destination no longer has is stale and skipped).
    idle: VecDeque<(DestId, u64)>,
    /// Destinations idle now.
    idle_count: usize,
    next_stamp: u64,
}

impl Index {
    /// The destination with this key, created on first use.
    pub(crate) fn dest(&mut self, key: &str) -> DestId {
        if let Some(&d) = self.by_key.get(key) {
            return d;
        }
        let d = self.dests.insert(Dest::new(key.to_owned()));
        self.by_key.insert(key.to_owned(), d);
        self.review(d);
        d
    }

    pub(crate) fn find(&self, key: &str) -> Option<DestId> {
        self.by_key.get(key).copied()
    }

    /// Destinations from the one after `after` on, in key order.
    pub(crate) fn page(&self, after: Option<&str>) -> impl Iterator<Item = &Dest> {
        self.page_of(None, after)
    }

    /// As [`Index::page`], of one tenant's destinations only (`None`: every tenant's): a
    /// range of the keys, as a tenant's keys are (see `Destination::key`).
    pub(crate) fn page_of(
        &self,
        tenant: Option<TenantId>,
        after: Option<&str>,
    ) -> impl Iterator<Item = &Dest> {
        use std::ops::Bound;
        // Where the tenant's keys start, and what each of them starts with.
        let (first, prefix) =
            tenant.map_or_else(Default::default, hookd_core::destination::tenant_keys);
        let start = match after {
            Some(key) if key >= first.as_str() => Bound::Excluded(key.to_owned()),
            _ => Bound::Included(first),
        };
        self.by_key
            .range::<String, _>((start, Bound::Unbounded))
            .take_while(move |(key, _)| key.starts_with(&prefix))
            .filter_map(|(_, &d)| self.dests.get(d))
    }

    /// The oldest live message of all.
    pub(crate) fn oldest(&self) -> Option<MessageId> {
        self.firsts.first().copied()
    }

    /// Adds a live message in `state`: to its destination's fresh queue if it is ready,
    /// never attempted and no older than the queue's last (see the module's text), else to
    /// `live`.
    pub(crate) fn insert(&mut self, id: MessageId, live: Live) {
        let d = live.dest;
        let dest = &mut self.dests[d];
        let before = dest.first();
        *dest.counts.counter(live.state, live.attempts) += 1;
        *self.totals.counter(live.state, live.attempts) += 1;
        if live.state == LiveState::Leased && dest.push.is_some() {
            self.push_flight
                .started(dest.tenant, dest.counts.in_flight == 1);
        }
        dest.live_bytes += u64::from(live.bytes);
        self.live_bytes += u64::from(live.bytes);
        let held = self.tenants.entry(dest.tenant).or_default();
        held.messages += 1;
        held.bytes += u64::from(live.bytes);
        let fresh = live.state == LiveState::Ready
            && live.lane == LaneTag::None
            && live.attempts == 0
            && !live.replayed
            && live.timer.is_none()
            && dest.fresh.accepts(id);
        if fresh {
            dest.fresh
                .push_back(Fresh::new(id, live.bytes, live.max_attempts));
            self.fresh += 1;
        } else {
            dest.live_ids.insert(id);
            if live.state == LiveState::Ready {
                dest.ready.push_back(id);
            }
        }
        if live.state == LiveState::Ready {
            if !dest.waiters.is_empty() {
                self.touched.push(d);
            }
            if dest.push.is_some() && !dest.dispatch_queued {
                dest.dispatch_queued = true;
                self.dispatch.push(d);
            }
        }
        if !fresh {
            self.live.insert(id, live);
        }
        self.refirst(d, before);
        self.review(d);
    }

    /// Keeps `firsts` right after destination `d`'s first message may have changed from
    /// `before`.
    fn refirst(&mut self, d: DestId, before: Option<MessageId>) {
        let after = self.dests[d].first();
        if after != before {
            if let Some(b) = before {
                self.firsts.remove(&b);
            }
            if let Some(a) = after {
                self.firsts.insert(a);
            }
        }
    }

    /// The next ready message of `d`, taken out of its ready queues: a ready message in
    /// `live` first (stale ids skipped), else the oldest fresh one, which moves to `live`
    /// (still Ready: the caller moves it on, or puts it back with `ready.push_front`).
    pub(crate) fn pop_ready(&mut self, d: DestId) -> Option<MessageId> {
        let dest = self.dests.get_mut(d)?;
        while let Some(id) = dest.ready.pop_front() {
            if self
                .live
                .get(&id)
                .is_some_and(|l| l.state == LiveState::Ready)
            {
                return Some(id);
            }
        }
        let before = dest.first();
        let entry = dest.fresh.pop_front()?;
        self.fresh -= 1;
        let id = entry.id();
        dest.live_ids.insert(id);
        let live = Live::new(d, LiveState::Ready, 0, entry.max_attempts, entry.bytes);
        self.live.insert(id, live);
        self.refirst(d, before);
        Some(id)
    }

    /// How many messages are live (every state, both tiers).
    pub(crate) fn len(&self) -> u64 {
        self.live.len() as u64 + self.fresh
    }

    /// Moves a live message to `state` with `attempts`, keeping counts and the ready queue
    /// right. Returns false if the id is not live.
    pub(crate) fn set_state(&mut self, id: MessageId, state: LiveState, attempts: u32) -> bool {
        let Some(live) = self.live.get_mut(&id) else {
            return false;
        };
        let dest = &mut self.dests[live.dest];
        *dest.counts.counter(live.state, live.attempts) -= 1;
        *dest.counts.counter(state, attempts) += 1;
        *self.totals.counter(live.state, live.attempts) -= 1;
        *self.totals.counter(state, attempts) += 1;
        if dest.push.is_some() && (live.state == LiveState::Leased) != (state == LiveState::Leased)
        {
            match state == LiveState::Leased {
                true => self
                    .push_flight
                    .started(dest.tenant, dest.counts.in_flight == 1),
                false => self
                    .push_flight
                    .ended(dest.tenant, dest.counts.in_flight == 0),
            }
        }
        live.state = state;
        live.attempts = attempts;
        if state == LiveState::Ready {
            dest.ready.push_back(id);
            if !dest.waiters.is_empty() {
                self.touched.push(live.dest);
            }
            if dest.push.is_some() && !dest.dispatch_queued {
                dest.dispatch_queued = true;
                self.dispatch.push(live.dest);
            }
        }
        true
    }

    /// Forgets a live message (completed or dead-lettered).
    pub(crate) fn remove(&mut self, id: MessageId) -> Option<Live> {
        let live = self.live.remove(&id)?;
        let dest = &mut self.dests[live.dest];
        let before = dest.first();
        *dest.counts.counter(live.state, live.attempts) -= 1;
        *self.totals.counter(live.state, live.attempts) -= 1;
        if live.state == LiveState::Leased && dest.push.is_some() {
            self.push_flight
                .ended(dest.tenant, dest.counts.in_flight == 0);
        }
        dest.live_bytes = dest.live_bytes.saturating_sub(u64::from(live.bytes));
        self.live_bytes = self.live_bytes.saturating_sub(u64::from(live.bytes));
        if let Some(held) = self.tenants.get_mut(&dest.tenant) {
            held.messages = held.messages.saturating_sub(1);
            held.bytes = held.bytes.saturating_sub(u64::from(live.bytes));
        }
        dest.live_ids.remove(&id);
        self.refirst(live.dest, before);
        self.review(live.dest);
        Some(live)
    }

    /// A destination's dead letters are gone (its tenant was deleted).
    pub(crate) fn forget_dead(&mut self, d: DestId) {
        self.set_dead(d, 0);
    }

    /// Sets a destination's dead-letter count.
    pub(crate) fn set_dead(&mut self, d: DestId, dead: u64) {
        let dest = &mut self.dests[d];
        self.totals.dead = self.totals.dead.saturating_sub(dest.counts.dead) + dead;
        dest.counts.dead = dead;
        self.review(d);
    }

    /// One dead letter of `d` left the queue (replayed, purged or expired).
    pub(crate) fn one_dead_less(&mut self, d: DestId) {
        let dead = self.dests[d].counts.dead.saturating_sub(1);
        self.set_dead(d, dead);
    }

    /// A long poll starts waiting on destination `d`.
    pub(crate) fn push_waiter(&mut self, d: DestId, waiter: Waiter) {
        self.dests[d].waiters.push_back(waiter);
        self.waiting += 1;
        self.with_waiters.insert(d);
        self.review(d);
    }

    /// The longest-waiting long poll of `d`, taken out.
    pub(crate) fn pop_waiter(&mut self, d: DestId) -> Option<Waiter> {
        let waiter = self.dests.get_mut(d)?.waiters.pop_front()?;
        self.waited(d);
        Some(waiter)
    }

    /// Long poll `id` of `d`, taken out (its wait ran out).
    pub(crate) fn remove_waiter(&mut self, d: DestId, id: u64) -> Option<Waiter> {
        let waiters = &mut self.dests.get_mut(d)?.waiters;
        let pos = waiters.iter().position(|w| w.id == id)?;
        let waiter = waiters.remove(pos)?;
        self.waited(d);
        Some(waiter)
    }

    fn waited(&mut self, d: DestId) {
        self.waiting -= 1;
        if self.dests[d].waiters.is_empty() {
            self.with_waiters.remove(&d);
        }
        self.review(d);
    }

    /// Long polls waiting, over all destinations.
    pub(crate) fn waiting(&self) -> u64 {
        self.waiting
    }

    /// The destinations with long polls waiting.
    pub(crate) fn with_waiters(&self) -> Vec<DestId> {
        self.with_waiters.iter().copied().collect()
    }

    /// Asks for destination `d` to be looked at by the end-of-round dispatch.
    pub(crate) fn want_dispatch(&mut self, d: DestId) {
        let dest = &mut self.dests[d];
        if dest.push.is_some() && !dest.dispatch_queued {
            dest.dispatch_queued = true;
            self.dispatch.push(d);
        }
    }

    /// What every destination holds together, as the watermarks measure it.
    /// Lane `key` of destination `d`, made if it is new (and then counted in
    /// `lanes_held`): the destination's lanes, and the lane's slot.
    pub(crate) fn lane_of(&mut self, d: DestId, key: &str) -> (&mut Lanes, u32) {
        let lanes = self.dests[d].lanes.get_or_insert_with(Default::default);
        let (slot, made) = lanes.slot(key);
        self.lanes_held += u64::from(made);
        (lanes, slot)
    }

    /// What hookd holds, as the total marks count it: every live message, and each FIFO
    /// lane held in memory as [`LANE_MESSAGES`] more (a message with an ordering key of its
    /// own costs about 1 KB of memory, four times an unordered one: issue #49, 7).
    pub(crate) fn total_held(&self) -> hookd_core::backpressure::Held {
        hookd_core::backpressure::Held {
            messages: self.len() + self.lanes_held * LANE_MESSAGES,
            bytes: self.live_bytes,
        }
    }

    /// What each tenant's destinations hold together (tenants that held something).
    pub(crate) fn tenants_held(
        &self,
    ) -> impl Iterator<Item = (TenantId, hookd_core::backpressure::Held)> + '_ {
        self.tenants.iter().map(|(t, h)| (*t, *h))
    }

    /// What a tenant's destinations hold together.
    pub(crate) fn tenant_held(&self, tenant: TenantId) -> hookd_core::backpressure::Held {
        self.tenants.get(&tenant).copied().unwrap_or_default()
    }

    /// Live messages of a destination (pending, awaiting retry or in flight).
    pub(crate) fn live_count(&self, d: DestId) -> u64 {
        self.dests[d].held().messages
    }

    /// Destination `d` may have become idle or busy: look at it at the end of the round.
    pub(crate) fn review(&mut self, d: DestId) {
        if let Some(dest) = self.dests.get_mut(d)
            && !dest.in_review
        {
            dest.in_review = true;
            self.review.push(d);
        }
    }

    /// Updates which destinations are idle from this round's reviews (`pinned`: an idle
    /// destination that must be kept, e.g. a configured endpoint), and returns the idle
    /// destinations beyond [`IDLE_KEPT`], least recently idle first: the caller forgets
    /// them with [`Index::forget`]. Work in proportion to what the round changed, never to
    /// how many destinations exist.
    pub(crate) fn reviewed(&mut self, pinned: impl Fn(&str) -> bool) -> Reviewed {
        for d in std::mem::take(&mut self.review) {
            let Some(dest) = self.dests.get_mut(d) else {
                continue;
            };
            dest.in_review = false;
            let idle = !dest.has_live()
                && dest.lanes.is_none()
                && dest.waiters.is_empty()
                && !pinned(&dest.key);
            match (idle, dest.idle_stamp) {
                (true, None) => {
                    let stamp = self.next_stamp;
                    self.next_stamp += 1;
                    dest.idle_stamp = Some(stamp);
                    self.idle.push_back((d, stamp));
                    self.idle_count += 1;
                }
                (false, Some(_)) => {
                    dest.idle_stamp = None;
                    self.idle_count -= 1;
                }
                _ => {}
            }
        }
        let mut out = Reviewed::default();
        while self.idle_count > IDLE_KEPT {
            let Some((d, stamp)) = self.idle.pop_front() else {
                break;
            };
            if let Some(dest) = self.dests.get_mut(d)
                && dest.idle_stamp == Some(stamp)
            {
                dest.idle_stamp = None;
                self.idle_count -= 1;
                if dest.counts.dead == 0 {
                    out.forget.push(d);
                } else {
                    out.shed.push(d);
                }
            }
        }
        // Stale entries (destinations busy again, or idle again with a new stamp) are
        // dropped when the queue has twice as many entries as it needs: amortised O(1).
        if self.idle.len() > 2 * self.idle_count + 64 {
            let dests = &self.dests;
            self.idle
                .retain(|&(d, stamp)| dests.get(d).is_some_and(|x| x.idle_stamp == Some(stamp)));
        }
        out
    }

    /// Removes an idle destination; returns it (its push wake timer is the caller's to
    /// cancel).
    pub(crate) fn forget(&mut self, d: DestId) -> Option<Dest> {
        let dest = self.dests.try_remove(d)?;
        debug_assert!(!dest.has_live() && dest.waiters.is_empty() && dest.counts.dead == 0);
        self.by_key.remove(&dest.key);
        Some(dest)
    }

    /// How many destinations are held (busy and idle).
    pub(crate) fn destinations(&self) -> usize {
        self.dests.len()
    }
}

/// Push attempts in flight, by tenant and in all: kept by the index as messages enter and
/// leave the leased state at push destinations.
#[derive(Debug, Default)]
pub(crate) struct PushFlight {
    total: u64,
    /// By tenant: attempts out, and destinations with at least one out.
    pub(crate) by_tenant: FxHashMap<TenantId, (u64, u64)>,
}

impl PushFlight {
    /// An attempt started; `first`: its destination had none out.
    pub(crate) fn started(&mut self, tenant: TenantId, first: bool) {
        self.total += 1;
        let t = self.by_tenant.entry(tenant).or_default();
        t.0 += 1;
        t.1 += u64::from(first);
    }

    /// An attempt ended; `last`: its destination has none out now.
    pub(crate) fn ended(&mut self, tenant: TenantId, last: bool) {
        self.total = self.total.saturating_sub(1);
        if let Some(t) = self.by_tenant.get_mut(&tenant) {
            t.0 = t.0.saturating_sub(1);
            t.1 = t.1.saturating_sub(u64::from(last));
            if t.0 == 0 {
                self.by_tenant.remove(&tenant);
            }
        }
    }

    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    pub(crate) fn of(&self, tenant: TenantId) -> u64 {
        self.by_tenant.get(&tenant).map_or(0, |t| t.0)
    }

    pub(crate) fn destinations_of(&self, tenant: TenantId) -> u64 {
        self.by_tenant.get(&tenant).map_or(0, |t| t.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, n: u64) -> MessageId {
        MessageId((u128::from(ms) << 80) | u128::from(n))
    }

    #[test]
    fn a_fresh_entry_is_24_bytes_and_keeps_its_id() {
        assert_eq!(std::mem::size_of::<Fresh>(), 24);
        let x = MessageId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(Fresh::new(x, 7, 3).id(), x);
    }

    #[test]
    fn the_fresh_queue_is_first_in_first_out_across_chunks_and_frees_them() {
        let mut q = FreshQueue::default();
        let n = 3 * FRESH_CHUNK as u64 + 5;
        for i in 0..n {
            q.push_back(Fresh::new(id(1, i), i as u32, 0));
        }
        assert_eq!((q.len(), q.chunks.len()), (n as usize, 4));
        for i in 0..n {
            assert_eq!(q.pop_front().map(|f| f.id()), Some(id(1, i)));
            assert_eq!(q.len(), (n - i - 1) as usize);
        }
        assert!(q.pop_front().is_none() && q.chunks.is_empty() && q.is_empty());
    }

    #[test]
    fn a_fresh_queue_takes_only_ids_no_older_than_its_last() {
        let mut q = FreshQueue::default();
        assert!(q.accepts(id(5, 9)));
        q.push_back(Fresh::new(id(5, 9), 0, 0));
        // The same millisecond in any order (ids of one ms are random), never an earlier one.
        assert!(q.accepts(id(5, 1)) && q.accepts(id(6, 0)) && !q.accepts(id(4, 99)));
    }

    /// Ready, never-attempted messages are fresh (no `live` entry); anything else, or an id
    /// older than the queue's last, is in `live`; a pop promotes, oldest first, after the
    /// ready ones in `live`; counts and the oldest message hold throughout.
    #[test]
    fn a_backlog_is_held_fresh_and_promoted_when_it_leaves() {
        let mut index = Index::default();
        let d = index.dest("q");
        for i in 0..10 {
            index.insert(id(100, i), Live::new(d, LiveState::Ready, 0, 5, 10));
        }
        // Older than the queue's last: kept in `live`, and the destination's oldest.
        index.insert(id(50, 0), Live::new(d, LiveState::Ready, 0, 5, 10));
        // Retried, then ready again: in `live`.
        index.insert(id(200, 0), Live::new(d, LiveState::Ready, 1, 5, 10));
        assert_eq!((index.live.len(), index.len()), (2, 12));
        assert_eq!(index.dests[d].counts.pending, 12);
        assert_eq!(index.dests[d].live_bytes, 120);
        assert_eq!(index.oldest(), Some(id(50, 0)));
        let order: Vec<_> = std::iter::from_fn(|| index.pop_ready(d)).collect();
        let mut want = vec![id(50, 0), id(200, 0)];
        want.extend((0..10).map(|i| id(100, i)));
        assert_eq!(order, want);
        assert_eq!((index.live.len(), index.len()), (12, 12));
        assert!(index.live.values().all(|l| l.state == LiveState::Ready));
        for x in &want {
            index.remove(*x);
        }
        assert_eq!((index.len(), index.oldest()), (0, None));
        assert_eq!(index.dests[d].live_bytes, 0);
    }
}
