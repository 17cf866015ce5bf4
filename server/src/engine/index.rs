//! The engine's in-memory index of live messages: per-destination ready queues, counts and
//! long-poll waiters. It holds ids and small state only; payloads stay in redb.
//!
//! Counts are kept up to date on every transition (through [`Index::set_state`]), so `Stats`
//! never scans the messages.

use std::collections::{BTreeSet, HashMap, VecDeque};

use rustc_hash::FxHashMap;
use tokio::sync::oneshot;

use crate::ids::MessageId;
use std::sync::Arc;

use super::gate::Gate;
use crate::delivery::Target;
use crate::stats::{Activity, AttemptStats, DestinationSnapshot};
use crate::wheel::TimerKey;

pub type DestId = usize;

/// What a wheel entry means when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timer {
    /// A delayed or retried message becomes ready.
    Due(MessageId),
    /// A lease runs out.
    Lease(MessageId),
    /// A long poll's wait runs out.
    Wait(u64),
    /// A push destination may send again (pause over, breaker cooldown over, token due).
    Wake(DestId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveState {
    /// Waiting in the wheel for its due time.
    Scheduled,
    /// In its destination's ready queue.
    Ready,
    /// Leased; its lease deadline is in the wheel.
    Leased,
}

/// A message that is neither completed nor dead.
#[derive(Debug, Clone)]
pub struct Live {
    pub dest: DestId,
    pub state: LiveState,
    /// Attempts used since enqueue or replay; the current lease is attempt `attempts`.
    pub attempts: u32,
    pub max_attempts: u32,
    pub timer: Option<TimerKey>,
}

pub type ReceiveReply = oneshot::Sender<Result<Vec<super::Leased>, super::Refusal>>;

/// A Receive waiting for a message (long poll).
#[derive(Debug)]
pub struct Waiter {
    pub id: u64,
    pub max: usize,
    pub visibility_ms: u64,
    pub timer: TimerKey,
    pub reply: ReceiveReply,
}

/// How a push destination (an endpoint, or the origin of ad-hoc URLs) is delivered to.
#[derive(Debug)]
pub struct Push {
    pub target: Arc<Target>,
    /// The endpoint's URL; `None` for an ad-hoc URL origin (each message has its own URL).
    pub url: Option<String>,
    /// Whether its next attempt may go.
    pub gate: Gate,
    /// The wheel entry that wakes this destination, and when.
    pub wake: Option<(u64, TimerKey)>,
    pub stats: AttemptStats,
}

/// One destination's share of the index.
#[derive(Debug)]
pub struct Dest {
    pub key: String,
    pub ready: VecDeque<MessageId>,
    /// Every live id, ordered by creation time: the first is the oldest pending message.
    pub live_ids: BTreeSet<MessageId>,
    pub pending: u64,
    pub awaiting_retry: u64,
    pub in_flight: u64,
    pub dead: u64,
    pub waiters: VecDeque<Waiter>,
    pub activity: Activity,
    /// Set for endpoints and ad-hoc URL origins: how they are delivered to.
    pub push: Option<Box<Push>>,
    /// In `Index::dispatch` already.
    pub dispatch_queued: bool,
}

impl Dest {
    fn new(key: String) -> Self {
        Self {
            key,
            ready: VecDeque::new(),
            live_ids: BTreeSet::new(),
            pending: 0,
            awaiting_retry: 0,
            in_flight: 0,
            dead: 0,
            waiters: VecDeque::new(),
            activity: Activity::per_destination(),
            push: None,
            dispatch_queued: false,
        }
    }

    fn counter(&mut self, state: LiveState, attempts: u32) -> &mut u64 {
        match state {
            LiveState::Scheduled if attempts > 0 => &mut self.awaiting_retry,
            LiveState::Scheduled | LiveState::Ready => &mut self.pending,
            LiveState::Leased => &mut self.in_flight,
        }
    }

    pub fn stats(&self, now_ms: u64) -> DestinationSnapshot {
        let mut out = DestinationSnapshot {
            destination: self.key.clone(),
            pending: self.pending,
            awaiting_retry: self.awaiting_retry,
            in_flight: self.in_flight,
            dead_letter: self.dead,
            oldest_pending_age_ms: self
                .live_ids
                .first()
                .map_or(0, |id| now_ms.saturating_sub(id.unix_ms())),
            waiting_receives: self.waiters.len() as u64,
            ..Default::default()
        };
        self.activity.fill(now_ms, &mut out);
        out
    }
}

/// Live messages and destinations.
#[derive(Debug, Default)]
pub struct Index {
    /// FxHash, not SipHash: the keys are server-made ids (no flooding risk), and this map
    /// takes an insert and a removal per message on the single engine thread.
    pub live: FxHashMap<MessageId, Live>,
    pub dests: Vec<Dest>,
    by_key: HashMap<String, DestId>,
    /// Destinations that gained ready messages while they had waiters, this round.
    pub touched: Vec<DestId>,
    /// Push destinations that may be able to send: ready messages arrived, an attempt
    /// ended, or a pause ended. Looked at once at the end of the round.
    pub dispatch: Vec<DestId>,
}

impl Index {
    /// The destination with this key, created on first use.
    pub fn dest(&mut self, key: &str) -> DestId {
        if let Some(&d) = self.by_key.get(key) {
            return d;
        }
        let d = self.dests.len();
        self.dests.push(Dest::new(key.to_owned()));
        self.by_key.insert(key.to_owned(), d);
        d
    }

    pub fn find(&self, key: &str) -> Option<DestId> {
        self.by_key.get(key).copied()
    }

    /// Adds a live message in `state`.
    pub fn insert(&mut self, id: MessageId, live: Live) {
        let dest = &mut self.dests[live.dest];
        *dest.counter(live.state, live.attempts) += 1;
        dest.live_ids.insert(id);
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
        self.live.insert(id, live);
    }

    /// Moves a live message to `state` with `attempts`, keeping counts and the ready queue
    /// right. Returns false if the id is not live.
    pub fn set_state(&mut self, id: MessageId, state: LiveState, attempts: u32) -> bool {
        let Some(live) = self.live.get_mut(&id) else {
            return false;
        };
        let dest = &mut self.dests[live.dest];
        *dest.counter(live.state, live.attempts) -= 1;
        *dest.counter(state, attempts) += 1;
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
    pub fn remove(&mut self, id: MessageId) -> Option<Live> {
        let live = self.live.remove(&id)?;
        let dest = &mut self.dests[live.dest];
        *dest.counter(live.state, live.attempts) -= 1;
        dest.live_ids.remove(&id);
        Some(live)
    }

    /// Asks for destination `d` to be looked at by the end-of-round dispatch.
    pub fn want_dispatch(&mut self, d: DestId) {
        let dest = &mut self.dests[d];
        if dest.push.is_some() && !dest.dispatch_queued {
            dest.dispatch_queued = true;
            self.dispatch.push(d);
        }
    }

    /// Live messages of a destination (pending, awaiting retry or in flight).
    pub fn live_count(&self, d: DestId) -> u64 {
        let dest = &self.dests[d];
        dest.pending + dest.awaiting_retry + dest.in_flight
    }
}
