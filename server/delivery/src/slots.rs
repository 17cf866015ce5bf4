//! hookd's outbound connections (`delivery.max_connections`), shared fairly between origins.
//!
//! While several origins want connections, none may take more than the cap divided by their
//! number; an origin alone may use them all. Sharing when connections are taken is not enough
//! on its own: receivers that answer slowly or never (tarpits) keep what they took until their
//! attempts time out, and an origin that comes later finds nothing free. So an origin under
//! its share that finds the cap used up takes the place of a connection of an origin holding
//! at least two more than it does: one that has gone quiet after an answer (idle in its
//! pool, or trickling) first, else the one that has waited longest for an answer, once that
//! is at least [`STALLED`]. That
//! connection is closed; the attempt on it, if any, ends as hookd's own shortage (retried
//! soon, not counted against its receiver, which keeps its fair share). With nothing to take
//! yet, a connect waits for a place until its connect timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Context;
use std::time::Duration;

use atomic_waker::AtomicWaker;
use tokio::time::Instant;

/// How long an origin that asked for a connection counts as wanting one.
const WANTING: Duration = Duration::from_secs(10);
/// How long a connection of an origin over its share may wait for an answer before an origin
/// under its share may take its place.
pub const STALLED: Duration = Duration::from_secs(1);
/// A connection that has read an answer and then nothing for this long is idle (or trickling).
const QUIET: Duration = Duration::from_millis(100);
/// Most connections looked at for one place: bounds the work while the cap is used up.
const SCAN: usize = 256;

#[derive(Debug)]
pub struct OutboundSlots {
    max: usize,
    epoch: Instant,
    state: Mutex<SlotState>,
    /// One place given back (a connect waiting for one looks again).
    released: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct SlotState {
    total: usize,
    held: HashMap<String, HashMap<u64, Arc<Conn>>>,
    /// Origins that asked within `WANTING`, and when they last did.
    asked: HashMap<String, Instant>,
    next_id: u64,
}

/// What the slots know of one open connection, shared with its I/O.
#[derive(Debug)]
pub struct Conn {
    id: u64,
    epoch: Instant,
    /// When the current phase began (ms since the epoch): writing a request and waiting for
    /// its answer, or reading an answer and idling after it.
    phase_since_ms: AtomicU64,
    /// When a byte was last read or written (ms since the epoch).
    last_io_ms: AtomicU64,
    reading: AtomicBool,
    preempted: OnceLock<Preempted>,
    waker: AtomicWaker,
}

/// Why hookd closed a connection: its origin was over its fair share and another wanted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preempted {
    pub held: usize,
    pub max: usize,
    pub origins: usize,
    /// How long the connection had waited for an answer, or been quiet after one.
    pub(crate) quiet_ms: u64,
}

/// One connection's place, given back when it closes (or when another origin takes it).
#[derive(Debug)]
pub struct OutboundSlot {
    slots: Arc<OutboundSlots>,
    origin: String,
    conn: Arc<Conn>,
}

/// The answer to a request for a place.
#[derive(Debug)]
pub enum Take {
    Got(OutboundSlot),
    /// None is free and none can be taken yet; look again at this instant (when a connection
    /// of an origin over its share may be taken) or when a place is given back.
    Wait(Option<Instant>),
    /// Not for this origin now: it holds its share, or the whole cap alone.
    Refused(SlotRefusal),
}

/// Why hookd's own cap on outbound connections refused or ended a connection: hookd ran
/// short, not the receiver, so the attempt is not counted against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlotRefusal {
    /// hookd's own limit of outbound connections is reached (`delivery.max_connections`).
    #[error("hookd has {0} outbound connections open (delivery.max_connections)")]
    Saturated(usize),
    /// This origin holds its fair share of the cap while others want connections too.
    #[error(
        "this origin holds {held} of hookd's {max} outbound connections, its fair share while {origins} origins want them (delivery.max_connections)"
    )]
    OverShare {
        held: usize,
        max: usize,
        origins: usize,
    },
    /// hookd closed this connection for an origin under its fair share.
    #[error(
        "hookd closed this connection for another origin: this one held {} of hookd's {} outbound connections, over its fair share while {} origins wanted them, and it had been quiet or waiting for an answer for {} ms (delivery.max_connections)",
        .0.held, .0.max, .0.origins, .0.quiet_ms
    )]
    Preempted(Preempted),
}

impl Drop for OutboundSlot {
    fn drop(&mut self) {
        let mut s = self.slots.state();
        let Some(conns) = s.held.get_mut(&self.origin) else {
            return;
        };
        // A place another origin took was counted out then.
        if conns.remove(&self.conn.id).is_none() {
            return;
        }
        if conns.is_empty() {
            s.held.remove(&self.origin);
        }
        s.total = s.total.saturating_sub(1);
        drop(s);
        self.slots.released.notify_one();
    }
}

impl OutboundSlot {
    pub fn conn(&self) -> &Conn {
        &self.conn
    }
}

impl Conn {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Bytes were written: a request (or the rest of one) is under way.
    pub fn wrote(&self) {
        let now = self.now_ms();
        self.last_io_ms.store(now, Ordering::Relaxed);
        if self.reading.swap(false, Ordering::Relaxed) {
            self.phase_since_ms.store(now, Ordering::Relaxed);
        }
    }

    /// Bytes were read: an answer is arriving.
    pub fn read(&self) {
        let now = self.now_ms();
        self.last_io_ms.store(now, Ordering::Relaxed);
        if !self.reading.swap(true, Ordering::Relaxed) {
            self.phase_since_ms.store(now, Ordering::Relaxed);
        }
    }

    /// Err once another origin has taken this connection's place; the task polling it is
    /// woken then.
    pub fn check(&self, cx: &Context<'_>) -> std::io::Result<()> {
        self.waker.register(cx.waker());
        match self.preempted.get() {
            None => Ok(()),
            Some(p) => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                SlotRefusal::Preempted(*p),
            )),
        }
    }

    /// Whether this connection may be taken now: `(rank, how long)`, quiet ones (rank 0)
    /// before stalled ones (rank 1); else when it may be.
    fn takeable(&self, now_ms: u64) -> Result<(u8, u64), u64> {
        let phase = self.phase_since_ms.load(Ordering::Relaxed);
        let stalled_at = phase.saturating_add(STALLED.as_millis() as u64);
        if self.reading.load(Ordering::Relaxed) {
            let last = self.last_io_ms.load(Ordering::Relaxed);
            let quiet_at = last.saturating_add(QUIET.as_millis() as u64);
            if now_ms >= quiet_at {
                return Ok((0, now_ms - last));
            }
            return Err(quiet_at.min(stalled_at));
        }
        if now_ms >= stalled_at {
            return Ok((1, now_ms - phase));
        }
        Err(stalled_at)
    }
}

impl OutboundSlots {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            epoch: Instant::now(),
            state: Mutex::default(),
            released: tokio::sync::Notify::new(),
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    fn state(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Resolves when a place may have been given back.
    pub async fn released(&self) {
        self.released.notified().await;
    }

    /// A place for one more connection to `origin`, or when to ask again, or why not.
    pub fn try_take(self: &Arc<Self>, origin: &str) -> Take {
        let now = Instant::now();
        let now_ms = now.duration_since(self.epoch).as_millis() as u64;
        let mut s = self.state();
        s.asked.retain(|_, at| now.duration_since(*at) < WANTING);
        // Bounded: past as many origins as connections, the share is one anyway.
        if s.asked.len() < self.max * 4 || s.asked.contains_key(origin) {
            s.asked.insert(origin.to_owned(), now);
        }
        let origins = {
            let mut wanting: std::collections::HashSet<&str> =
                s.asked.keys().map(String::as_str).collect();
            wanting.extend(s.held.keys().map(String::as_str));
            wanting.insert(origin);
            wanting.len()
        };
        let share = self.max.div_ceil(origins).max(1);
        let held = s.held.get(origin).map_or(0, HashMap::len);
        if held >= share {
            return Take::Refused(if origins == 1 {
                SlotRefusal::Saturated(self.max)
            } else {
                SlotRefusal::OverShare {
                    held,
                    max: self.max,
                    origins,
                }
            });
        }
        if s.total >= self.max {
            match Self::victim(&s, held, now_ms) {
                Err(next_ms) => {
                    return Take::Wait(next_ms.map(|ms| self.epoch + Duration::from_millis(ms)));
                }
                Ok((victim_origin, id, quiet_ms)) => {
                    let victim_origin = victim_origin.to_owned();
                    if let Some(conns) = s.held.get_mut(&victim_origin)
                        && let Some(conn) = conns.remove(&id)
                    {
                        let preempted = Preempted {
                            held: conns.len() + 1,
                            max: self.max,
                            origins,
                            quiet_ms,
                        };
                        if conns.is_empty() {
                            s.held.remove(&victim_origin);
                        }
                        s.total -= 1;
                        let _ = conn.preempted.set(preempted);
                        conn.waker.wake();
                        static LOG: hookd_core::ratelog::LogLimit =
                            hookd_core::ratelog::LogLimit::new(10, 5);
                        if let Some(suppressed) = LOG.ready() {
                            tracing::warn!(
                                from = %victim_origin,
                                to = %origin,
                                held = preempted.held,
                                origins,
                                quiet_ms,
                                suppressed,
                                "outbound connections used up: closing one of an origin over its fair share for one under it (delivery.max_connections)"
                            );
                        }
                    }
                }
            }
        }
        s.total += 1;
        s.next_id += 1;
        let conn = Arc::new(Conn {
            id: s.next_id,
            epoch: self.epoch,
            phase_since_ms: AtomicU64::new(now_ms),
            last_io_ms: AtomicU64::new(now_ms),
            reading: AtomicBool::new(false),
            preempted: OnceLock::new(),
            waker: AtomicWaker::new(),
        });
        s.held
            .entry(origin.to_owned())
            .or_default()
            .insert(conn.id, conn.clone());
        Take::Got(OutboundSlot {
            slots: self.clone(),
            origin: origin.to_owned(),
            conn,
        })
    }

    /// The connection to take for an origin holding `held` (under its share): one of an
    /// origin holding at least two more (so that taking it makes the two more even, and
    /// shares rounded up cannot leave the taker nothing), quiet ones first, then of the
    /// origin holding most, then the one quiet or stalled longest. Else, when the first of
    /// them may be taken.
    fn victim(s: &SlotState, held: usize, now_ms: u64) -> Result<(&str, u64, u64), Option<u64>> {
        type Rank = (u8, std::cmp::Reverse<usize>, std::cmp::Reverse<u64>);
        let mut best: Option<(Rank, &str, u64, u64)> = None;
        let mut next: Option<u64> = None;
        let mut looked = 0;
        'origins: for (origin, conns) in &s.held {
            if conns.len() < held + 2 {
                continue;
            }
            for conn in conns.values() {
                if looked == SCAN {
                    break 'origins;
                }
                looked += 1;
                match conn.takeable(now_ms) {
                    Ok((rank, quiet)) => {
                        let key = (
                            rank,
                            std::cmp::Reverse(conns.len()),
                            std::cmp::Reverse(quiet),
                        );
                        if best.as_ref().is_none_or(|(b, ..)| key < *b) {
                            best = Some((key, origin, conn.id, quiet));
                        }
                    }
                    Err(at) => next = Some(next.map_or(at, |n| n.min(at))),
                }
            }
        }
        match best {
            Some((_, origin, id, quiet)) => Ok((origin, id, quiet)),
            None => Err(next),
        }
    }

    #[cfg(test)]
    fn counts(&self) -> (usize, usize) {
        let s = self.state();
        (s.total, s.held.values().map(HashMap::len).sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn got(t: Take) -> OutboundSlot {
        match t {
            Take::Got(s) => s,
            other => panic!("expected a place, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn origins_share_the_outbound_cap_fairly_and_one_alone_may_use_it_all() {
        let slots = OutboundSlots::new(4);
        let (a, b) = ("http://a:80", "http://b:80");
        // Alone, an origin may hold every connection, and no more.
        let mut held: Vec<_> = (0..4).map(|_| got(slots.try_take(a))).collect();
        assert!(matches!(
            slots.try_take(a),
            Take::Refused(SlotRefusal::Saturated(4))
        ));
        // b asks while a's four wait for answers: nothing may be taken before they stall.
        let Take::Wait(Some(at)) = slots.try_take(b) else {
            panic!("b should wait for a's connections to stall");
        };
        assert_eq!(at, Instant::now() + STALLED);
        // One of a's connections ends: a, over its share of 2, cannot take it back...
        held.pop();
        let over = match slots.try_take(a) {
            Take::Refused(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(
            matches!(
                over,
                SlotRefusal::OverShare {
                    held: 3,
                    max: 4,
                    origins: 2
                }
            ),
            "{over}"
        );
        assert!(
            super::super::connect::ConnectError::from(over).is_local(),
            "postponed, not counted against the receiver"
        );
        // ...so b gets it.
        let mine = got(slots.try_take(b));
        drop(mine);
        // Once b has not asked for a while, a is alone again.
        tokio::time::advance(WANTING).await;
        held.push(got(slots.try_take(a)));
        drop(held);
        assert_eq!(slots.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn an_origin_under_its_share_takes_the_place_of_a_stalled_or_idle_connection() {
        let slots = OutboundSlots::new(4);
        let (tarpit, idle, healthy) = ("http://tarpit:80", "http://idle:80", "http://ok:80");
        // The tarpit takes three connections and writes a request on each; idle takes one
        // and reads an answer on it.
        let tarpits: Vec<_> = (0..3).map(|_| got(slots.try_take(tarpit))).collect();
        for t in &tarpits {
            t.conn().wrote();
        }
        let quiet = got(slots.try_take(idle));
        quiet.conn().wrote();
        tokio::time::advance(Duration::from_millis(10)).await;
        quiet.conn().read();
        // Three origins: a share of 2 each. Idle holds 1 (under it): nothing to take from it.
        // The tarpit is over it, but its connections have not stalled yet.
        let Take::Wait(Some(at)) = slots.try_take(healthy) else {
            panic!("healthy should wait");
        };
        assert_eq!(at, Instant::now() + STALLED - Duration::from_millis(10));
        tokio::time::advance(STALLED).await;
        // Now the tarpit's longest-stalled connection is closed for healthy.
        let mine = got(slots.try_take(healthy));
        let closed: Vec<_> = tarpits
            .iter()
            .filter_map(|t| t.conn().preempted.get().copied())
            .collect();
        assert_eq!(
            closed,
            vec![Preempted {
                held: 3,
                max: 4,
                origins: 3,
                quiet_ms: STALLED.as_millis() as u64 + 10
            }]
        );
        // The closed connection's I/O fails as hookd's own shortage, and its place was
        // counted out already: dropping it gives back nothing twice.
        let waker = std::task::Waker::noop();
        let cx = Context::from_waker(waker);
        let err = tarpits
            .iter()
            .find_map(|t| t.conn().check(&cx).err())
            .expect("one connection is closed");
        assert!(super::super::connect::local_shortage(&err), "{err}");
        assert!(err.to_string().contains("fair share"), "{err}");
        assert_eq!(slots.counts(), (4, 4));
        drop(tarpits);
        assert_eq!(slots.counts(), (2, 2));
        drop((mine, quiet));
        assert_eq!(slots.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_connection_is_taken_before_a_stalled_one() {
        let slots = OutboundSlots::new(2);
        let (a, b) = ("http://a:80", "http://b:80");
        let busy = got(slots.try_take(a));
        busy.conn().wrote();
        let pooled = got(slots.try_take(a));
        pooled.conn().wrote();
        pooled.conn().read();
        tokio::time::advance(STALLED * 2).await;
        let _mine = got(slots.try_take(b));
        assert!(pooled.conn().preempted.get().is_some(), "the idle one goes");
        assert!(busy.conn().preempted.get().is_none(), "the busy one stays");
    }

    #[tokio::test(start_paused = true)]
    async fn origins_each_at_a_rounded_up_share_still_leave_a_newcomer_one() {
        // Four origins hold two each of 8: a fifth's share is ceil(8 / 5) = 2, which every
        // one of them holds, and yet the fifth has none.
        let slots = OutboundSlots::new(8);
        let held: Vec<_> = (0..8)
            .map(|i| {
                let slot = got(slots.try_take(&format!("http://tarpit{}:80", i % 4)));
                slot.conn().wrote();
                slot
            })
            .collect();
        tokio::time::advance(STALLED).await;
        let first = got(slots.try_take("http://ok:80"));
        first.conn().wrote();
        // With one, it holds only one fewer than the others: nothing more to take.
        assert!(matches!(slots.try_take("http://ok:80"), Take::Wait(None)));
        assert_eq!(
            held.iter()
                .filter(|s| s.conn().preempted.get().is_some())
                .count(),
            1
        );
    }
}
