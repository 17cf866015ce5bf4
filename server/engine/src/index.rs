//! The engine's in-memory index of live messages: per-destination ready queues, counts and
//! long-poll waiters. It holds ids and small state only; payloads stay in redb.
//!
//! Counts are kept up to date on every transition (through [`Index::set_state`]), so `Stats`
//! never scans the messages.

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
        }
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

/// One destination's share of the index.
#[derive(Debug)]
pub(crate) struct Dest {
    pub key: String,
    pub ready: VecDeque<MessageId>,
    /// Every live id, ordered by creation time: the first is the oldest pending message.
    pub(crate) live_ids: BTreeSet<MessageId>,
    pub counts: Counts,
    /// Bytes of its live messages' records (what the byte watermarks measure).
    pub live_bytes: u64,
    pub(crate) waiters: VecDeque<Waiter>,
    pub activity: Activity,
    /// Set for endpoints and ad-hoc URL origins: how they are delivered to.
    pub push: Option<Box<Push>>,
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
            key,
            ready: VecDeque::new(),
            live_ids: BTreeSet::new(),
            counts: Counts::default(),
            live_bytes: 0,
            waiters: VecDeque::new(),
            activity: Activity::per_destination(),
            push: None,
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

    /// Age of its oldest live message (0: none).
    pub(crate) fn oldest_age_ms(&self, now_ms: u64) -> u64 {
        self.live_ids
            .first()
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
            LiveState::Scheduled | LiveState::Ready => &mut self.pending,
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
    /// FxHash, not SipHash: the keys are server-made ids (no flooding risk), and this map
    /// takes an insert and a removal per message on the single engine thread.
    pub live: FxHashMap<MessageId, Live>,
    /// A slab: a forgotten destination's slot is reused.
    pub(crate) dests: Slab<Dest>,
    /// Ordered, so that Stats pages through destinations by key.
    by_key: BTreeMap<String, DestId>,
    pub totals: Counts,
    /// Bytes of every live message's record (sized ones).
    pub live_bytes: u64,
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
        use std::ops::Bound;
        let start = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        self.by_key
            .range::<str, _>((start, Bound::Unbounded))
            .filter_map(|(_, &d)| self.dests.get(d))
    }

    /// The oldest live message of all.
    pub(crate) fn oldest(&self) -> Option<MessageId> {
        self.firsts.first().copied()
    }

    /// Adds a live message in `state`.
    pub(crate) fn insert(&mut self, id: MessageId, live: Live) {
        let dest = &mut self.dests[live.dest];
        *dest.counts.counter(live.state, live.attempts) += 1;
        *self.totals.counter(live.state, live.attempts) += 1;
        dest.live_bytes += u64::from(live.bytes);
        self.live_bytes += u64::from(live.bytes);
        let first = dest.live_ids.first().copied();
        dest.live_ids.insert(id);
        if first.is_none_or(|f| id < f) {
            if let Some(f) = first {
                self.firsts.remove(&f);
            }
            self.firsts.insert(id);
        }
        if live.state == LiveState::Ready {
            dest.ready.push_back(id);
            if !dest.waiters.is_empty() {
                self.touched.push(live.dest);
            }
            if dest.push.is_some() && !dest.dispatch_queued {
                dest.dispatch_queued = true;
                self.dispatch.push(live.dest);
            }
        }
        let d = live.dest;
        self.live.insert(id, live);
        self.review(d);
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
        *dest.counts.counter(live.state, live.attempts) -= 1;
        *self.totals.counter(live.state, live.attempts) -= 1;
        dest.live_bytes = dest.live_bytes.saturating_sub(u64::from(live.bytes));
        self.live_bytes = self.live_bytes.saturating_sub(u64::from(live.bytes));
        let was_first = dest.live_ids.first() == Some(&id);
        dest.live_ids.remove(&id);
        if was_first {
            self.firsts.remove(&id);
            if let Some(&next) = dest.live_ids.first() {
                self.firsts.insert(next);
            }
        }
        self.review(live.dest);
        Some(live)
    }

    /// Records the size of a live message whose size was not known (recovered at start);
    /// false if it is no longer live or already sized.
    pub(crate) fn set_bytes(&mut self, id: MessageId, bytes: u32) -> bool {
        let Some(live) = self.live.get_mut(&id) else {
            return false;
        };
        if live.bytes != 0 {
            return false;
        }
        live.bytes = bytes;
        self.dests[live.dest].live_bytes += u64::from(bytes);
        self.live_bytes += u64::from(bytes);
        true
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
    pub(crate) fn total_held(&self) -> hookd_core::backpressure::Held {
        hookd_core::backpressure::Held {
            messages: self.live.len() as u64,
            bytes: self.live_bytes,
        }
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
            let idle = dest.live_ids.is_empty() && dest.waiters.is_empty() && !pinned(&dest.key);
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
        debug_assert!(dest.live_ids.is_empty() && dest.waiters.is_empty() && dest.counts.dead == 0);
        self.by_key.remove(&dest.key);
        Some(dest)
    }

    /// How many destinations are held (busy and idle).
    pub(crate) fn destinations(&self) -> usize {
        self.dests.len()
    }
}
