//! hookd's outbound connections (`delivery.max_connections`), shared fairly: between
//! tenants by weight, and between the receivers of one tenant evenly (issue #52). A
//! receiver is an endpoint, or an ad-hoc URL's origin (below, "origin" says receiver).
//!
//! While several tenants want connections, each has its weighted share of the cap
//! (`ceil(max * weight / weights of the tenants wanting)`), and inside a tenant each of its
//! receivers an even part of the tenant's share. Under its share a receiver takes any free
//! place; at or over it, only a free place beyond what the receivers under their shares
//! that asked for a place lately (within 10 s) still lack of theirs: so a tenant alone may
//! use them all, and places others leave unused (served from their keep-alive pools) are
//! not wasted; the others take theirs back as below. Sharing when connections are taken is
//! not enough on its own: receivers that answer slowly or never (tarpits) keep what they took
//! until their attempts time out, and a tenant or origin that comes later finds nothing
//! free. So one under its share that finds the cap used up takes the place of a connection
//! of a tenant over its share (one with every endpoint hanging, say), or, inside its own
//! tenant, of an origin holding at least two more than it does: one that has gone quiet
//! after an answer (idle in its pool, or trickling) first, else the one that has waited
//! longest for an answer, once that is at least [`STALLED`]. That connection is closed; the
//! attempt on it, if any, ends as hookd's own shortage (retried soon, not counted against
//! its receiver, which keeps its fair share). With nothing to take yet, a connect waits for
//! a place until its connect timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Context;
use std::time::Duration;

use atomic_waker::AtomicWaker;
use tokio::time::Instant;

/// How long a tenant's origin that asked for a connection counts as wanting one.
const WANTING: Duration = Duration::from_secs(10);
/// How long a connection of an origin over its share may wait for an answer before an origin
/// under its share may take its place.
pub const STALLED: Duration = Duration::from_secs(1);
/// A connection that has read an answer and then nothing for this long is idle (or trickling).
const QUIET: Duration = Duration::from_millis(100);
/// Most connections looked at for one place: bounds the work while the cap is used up.
const SCAN: usize = 256;

/// Whose connections these are: a tenant's number and its weight (1 to 1000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Holder {
    pub tenant: u32,
    pub weight: u32,
}

impl Default for Holder {
    /// The `default` tenant at weight 1: hookd without tenants.
    fn default() -> Self {
        Self {
            tenant: 0,
            weight: 1,
        }
    }
}

/// One tenant's origin: what connections are counted by.
type Group = (u32, String);

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
    held: HashMap<Group, HashMap<u64, Arc<Conn>>>,
    /// Groups that asked within `WANTING`, when they last did, and their tenant's weight
    /// then.
    asked: HashMap<Group, (Instant, u32)>,
    next_id: u64,
}

/// What one connection's place was decided with: how many tenants and origins wanted
/// connections, each tenant's share and weight, what each tenant holds.
struct Sharing {
    /// `me`'s share: its tenant's, evenly between the tenant's receivers that want places.
    share: usize,
    /// Free places kept for the other receivers under their shares that asked for one
    /// lately: what each lacks.
    reserve: usize,
    tenants: usize,
    origins: usize,
    /// By tenant: (weight, share of the cap, connections held).
    by_tenant: HashMap<u32, (u32, usize, usize)>,
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

/// Why hookd closed a connection: its tenant or origin was over its fair share and another
/// wanted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preempted {
    /// What the closed connection's tenant held (taken for another tenant), or its origin
    /// (taken for another origin of the same tenant).
    pub held: usize,
    pub max: usize,
    pub tenants: usize,
    pub origins: usize,
    /// How long the connection had waited for an answer, or been quiet after one.
    pub(crate) quiet_ms: u64,
}

/// One connection's place, given back when it closes (or when another origin takes it).
#[derive(Debug)]
pub struct OutboundSlot {
    slots: Arc<OutboundSlots>,
    group: Group,
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
        "this receiver holds {held} of hookd's {max} outbound connections, its fair share while {tenants} tenants and {origins} receivers (endpoints or URL origins) want them (delivery.max_connections)"
    )]
    OverShare {
        held: usize,
        max: usize,
        tenants: usize,
        origins: usize,
    },
    /// hookd closed this connection for a tenant or origin under its fair share.
    #[error(
        "hookd closed this connection for another receiver: this one's tenant or receiver held {} of hookd's {} outbound connections, over its fair share while {} tenants and {} receivers (endpoints or URL origins) wanted them, and it had been quiet or waiting for an answer for {} ms (delivery.max_connections)",
        .0.held, .0.max, .0.tenants, .0.origins, .0.quiet_ms
    )]
    Preempted(Preempted),
}

impl Drop for OutboundSlot {
    fn drop(&mut self) {
        let mut s = self.slots.state();
        let Some(conns) = s.held.get_mut(&self.group) else {
            return;
        };
        // A place another origin took was counted out then.
        if conns.remove(&self.conn.id).is_none() {
            return;
        }
        if conns.is_empty() {
            s.held.remove(&self.group);
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

impl SlotState {
    /// Who wants connections now (besides `me`): each tenant's share of `max`, `me`'s share
    /// of its tenant's, and the places the others under their shares may still need.
    fn sharing(&self, me: &Group, weight: u32, max: usize) -> Sharing {
        let mut groups: std::collections::HashSet<&Group> = self.asked.keys().collect();
        groups.extend(self.held.keys());
        groups.insert(me);
        // By tenant: (weight, share, held), and how many of its receivers want places.
        let mut by_tenant: HashMap<u32, (u32, usize, usize)> = HashMap::new();
        let mut receivers: HashMap<u32, usize> = HashMap::new();
        for (group, (_, w)) in &self.asked {
            by_tenant.entry(group.0).or_insert((*w, 0, 0));
        }
        for (group, conns) in &self.held {
            by_tenant.entry(group.0).or_insert((1, 0, 0)).2 += conns.len();
        }
        by_tenant.entry(me.0).or_insert((weight, 0, 0)).0 = weight;
        for group in &groups {
            *receivers.entry(group.0).or_default() += 1;
        }
        let weights: usize = by_tenant.values().map(|t| t.0.max(1) as usize).sum();
        for t in by_tenant.values_mut() {
            t.1 = max
                .saturating_mul(t.0.max(1) as usize)
                .div_ceil(weights.max(1))
                .max(1);
        }
        let share_of = |group: &Group| {
            let tenant_share = by_tenant.get(&group.0).map_or(1, |t| t.1);
            tenant_share
                .div_ceil(receivers.get(&group.0).copied().unwrap_or(1).max(1))
                .max(1)
        };
        // Only those that asked for a place lately may need more: one served from its
        // keep-alive pool keeps no place free.
        let reserve = self
            .asked
            .keys()
            .filter(|g| *g != me)
            .map(|g| share_of(g).saturating_sub(self.held.get(g).map_or(0, HashMap::len)))
            .sum();
        Sharing {
            share: share_of(me),
            reserve,
            tenants: by_tenant.len(),
            origins: groups.len(),
            by_tenant,
        }
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

    /// A place for one more connection of `holder` to `origin`, or when to ask again, or
    /// why not.
    pub fn try_take(self: &Arc<Self>, holder: Holder, origin: &str) -> Take {
        let now = Instant::now();
        let now_ms = now.duration_since(self.epoch).as_millis() as u64;
        let me: Group = (holder.tenant, origin.to_owned());
        let weight = holder.weight.max(1);
        let mut s = self.state();
        s.asked
            .retain(|_, (at, _)| now.duration_since(*at) < WANTING);
        // Bounded: past as many origins as connections, the share is one anyway.
        if s.asked.len() < self.max * 4 || s.asked.contains_key(&me) {
            s.asked.insert(me.clone(), (now, weight));
        }
        let sharing = s.sharing(&me, weight, self.max);
        let (_, tenant_share, tenant_held) = sharing.by_tenant[&me.0];
        let held = s.held.get(&me).map_or(0, HashMap::len);
        if held >= sharing.share {
            // Over its share, it may still take a free place that no receiver under its
            // share may need (work-conserving); never another's.
            let free = self.max.saturating_sub(s.total);
            if free <= sharing.reserve {
                return Take::Refused(if sharing.origins == 1 {
                    SlotRefusal::Saturated(self.max)
                } else {
                    SlotRefusal::OverShare {
                        held,
                        max: self.max,
                        tenants: sharing.tenants,
                        origins: sharing.origins,
                    }
                });
            }
        }
        if s.total >= self.max {
            let under = tenant_held < tenant_share;
            match Self::victim(&s, &sharing, &me, held, under, now_ms) {
                Err(next_ms) => {
                    return Take::Wait(next_ms.map(|ms| self.epoch + Duration::from_millis(ms)));
                }
                Ok((victim, id, quiet_ms)) => {
                    let victim = victim.clone();
                    let victim_tenant_held = sharing.by_tenant.get(&victim.0).map_or(0, |t| t.2);
                    if let Some(conns) = s.held.get_mut(&victim)
                        && let Some(conn) = conns.remove(&id)
                    {
                        let preempted = Preempted {
                            held: if victim.0 == me.0 {
                                conns.len() + 1
                            } else {
                                victim_tenant_held
                            },
                            max: self.max,
                            tenants: sharing.tenants,
                            origins: sharing.origins,
                            quiet_ms,
                        };
                        if conns.is_empty() {
                            s.held.remove(&victim);
                        }
                        s.total -= 1;
                        let _ = conn.preempted.set(preempted);
                        conn.waker.wake();
                        static LOG: hookd_core::ratelog::LogLimit =
                            hookd_core::ratelog::LogLimit::new(10, 5);
                        if let Some(suppressed) = LOG.ready() {
                            tracing::warn!(
                                from = %victim.1,
                                from_tenant = victim.0,
                                to = %origin,
                                to_tenant = me.0,
                                held = preempted.held,
                                tenants = sharing.tenants,
                                origins = sharing.origins,
                                quiet_ms,
                                suppressed,
                                "outbound connections used up: closing one of a tenant or origin over its fair share for one under it (delivery.max_connections)"
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
            .entry(me.clone())
            .or_default()
            .insert(conn.id, conn.clone());
        Take::Got(OutboundSlot {
            slots: self.clone(),
            group: me,
            conn,
        })
    }

    /// The connection to take for `me`, an origin holding `held` (under its share; its
    /// tenant `under` the tenant's share or not): one of another tenant over its share (if
    /// `me`'s tenant is under its own), or of another origin of `me`'s tenant holding at
    /// least two more (so that taking it makes the two more even, and shares rounded up
    /// cannot leave the taker nothing); quiet ones first, then of whoever is furthest over,
    /// then the one quiet or stalled longest. Else, when the first of them may be taken.
    fn victim<'s>(
        s: &'s SlotState,
        sharing: &Sharing,
        me: &Group,
        held: usize,
        under: bool,
        now_ms: u64,
    ) -> Result<(&'s Group, u64, u64), Option<u64>> {
        type Rank = (u8, std::cmp::Reverse<usize>, std::cmp::Reverse<u64>);
        let mut best: Option<(Rank, &Group, u64, u64)> = None;
        let mut next: Option<u64> = None;
        let mut looked = 0;
        'groups: for (group, conns) in &s.held {
            let over = if group.0 == me.0 {
                if conns.len() < held + 2 {
                    continue;
                }
                conns.len() - held
            } else {
                let (_, share, tenant_held) = sharing
                    .by_tenant
                    .get(&group.0)
                    .copied()
                    .unwrap_or((1, 0, 0));
                if !under || tenant_held <= share {
                    continue;
                }
                tenant_held - share
            };
            for conn in conns.values() {
                if looked == SCAN {
                    break 'groups;
                }
                looked += 1;
                match conn.takeable(now_ms) {
                    Ok((rank, quiet)) => {
                        let key = (rank, std::cmp::Reverse(over), std::cmp::Reverse(quiet));
                        if best.as_ref().is_none_or(|(b, ..)| key < *b) {
                            best = Some((key, group, conn.id, quiet));
                        }
                    }
                    Err(at) => next = Some(next.map_or(at, |n| n.min(at))),
                }
            }
        }
        match best {
            Some((_, group, id, quiet)) => Ok((group, id, quiet)),
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
        let mut held: Vec<_> = (0..4)
            .map(|_| got(slots.try_take(Holder::default(), a)))
            .collect();
        assert!(matches!(
            slots.try_take(Holder::default(), a),
            Take::Refused(SlotRefusal::Saturated(4))
        ));
        // b asks while a's four wait for answers: nothing may be taken before they stall.
        let Take::Wait(Some(at)) = slots.try_take(Holder::default(), b) else {
            panic!("b should wait for a's connections to stall");
        };
        assert_eq!(at, Instant::now() + STALLED);
        // One of a's connections ends: a, over its share of 2, cannot take it back...
        held.pop();
        let over = match slots.try_take(Holder::default(), a) {
            Take::Refused(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(
            matches!(
                over,
                SlotRefusal::OverShare {
                    held: 3,
                    max: 4,
                    tenants: 1,
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
        let mine = got(slots.try_take(Holder::default(), b));
        drop(mine);
        // Once b has not asked for a while, a is alone again.
        tokio::time::advance(WANTING).await;
        held.push(got(slots.try_take(Holder::default(), a)));
        drop(held);
        assert_eq!(slots.counts(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn an_origin_under_its_share_takes_the_place_of_a_stalled_or_idle_connection() {
        let slots = OutboundSlots::new(4);
        let (tarpit, idle, healthy) = ("http://tarpit:80", "http://idle:80", "http://ok:80");
        // The tarpit takes three connections and writes a request on each; idle takes one
        // and reads an answer on it.
        let tarpits: Vec<_> = (0..3)
            .map(|_| got(slots.try_take(Holder::default(), tarpit)))
            .collect();
        for t in &tarpits {
            t.conn().wrote();
        }
        let quiet = got(slots.try_take(Holder::default(), idle));
        quiet.conn().wrote();
        tokio::time::advance(Duration::from_millis(10)).await;
        quiet.conn().read();
        // Three origins: a share of 2 each. Idle holds 1 (under it): nothing to take from it.
        // The tarpit is over it, but its connections have not stalled yet.
        let Take::Wait(Some(at)) = slots.try_take(Holder::default(), healthy) else {
            panic!("healthy should wait");
        };
        assert_eq!(at, Instant::now() + STALLED - Duration::from_millis(10));
        tokio::time::advance(STALLED).await;
        // Now the tarpit's longest-stalled connection is closed for healthy.
        let mine = got(slots.try_take(Holder::default(), healthy));
        let closed: Vec<_> = tarpits
            .iter()
            .filter_map(|t| t.conn().preempted.get().copied())
            .collect();
        assert_eq!(
            closed,
            vec![Preempted {
                held: 3,
                max: 4,
                tenants: 1,
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
        let busy = got(slots.try_take(Holder::default(), a));
        busy.conn().wrote();
        let pooled = got(slots.try_take(Holder::default(), a));
        pooled.conn().wrote();
        pooled.conn().read();
        tokio::time::advance(STALLED * 2).await;
        let _mine = got(slots.try_take(Holder::default(), b));
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
                let slot =
                    got(slots.try_take(Holder::default(), &format!("http://tarpit{}:80", i % 4)));
                slot.conn().wrote();
                slot
            })
            .collect();
        tokio::time::advance(STALLED).await;
        let first = got(slots.try_take(Holder::default(), "http://ok:80"));
        first.conn().wrote();
        // With one, it holds only one fewer than the others: nothing more to take.
        assert!(matches!(
            slots.try_take(Holder::default(), "http://ok:80"),
            Take::Wait(None)
        ));
        assert_eq!(
            held.iter()
                .filter(|s| s.conn().preempted.get().is_some())
                .count(),
            1
        );
    }

    const NOISY: Holder = Holder {
        tenant: 1,
        weight: 1,
    };

    /// A tenant whose many origins all hang holds the whole cap while alone; another
    /// tenant's one origin then takes places from it up to the tenant's share, not an
    /// origin's (the noisy tenant's 8 origins count as one tenant).
    #[tokio::test(start_paused = true)]
    async fn a_tenant_with_every_origin_hanging_gives_way_to_another_tenant() {
        let slots = OutboundSlots::new(8);
        let hanging: Vec<_> = (0..8)
            .map(|i| {
                let slot = got(slots.try_take(NOISY, &format!("http://tarpit{i}:80")));
                slot.conn().wrote();
                slot
            })
            .collect();
        let quiet = Holder {
            tenant: 2,
            weight: 1,
        };
        tokio::time::advance(STALLED).await;
        // Two tenants of weight 1: a share of 4 each, all to the quiet tenant's one origin.
        let mine: Vec<_> = (0..4)
            .map(|_| got(slots.try_take(quiet, "http://ok:80")))
            .collect();
        assert!(matches!(
            slots.try_take(quiet, "http://ok:80"),
            Take::Refused(SlotRefusal::OverShare {
                held: 4,
                tenants: 2,
                ..
            })
        ));
        let closed = hanging
            .iter()
            .filter(|s| s.conn().preempted.get().is_some())
            .count();
        assert_eq!(closed, 4);
        // The noisy tenant, now at its share, takes nothing back.
        assert!(!matches!(
            slots.try_take(NOISY, "http://tarpit0:80"),
            Take::Got(_)
        ));
        drop((mine, hanging));
        assert_eq!(slots.counts(), (0, 0));
    }

    /// Shares follow weights: 3 to 1 of 8 is 6 and 2.
    #[tokio::test(start_paused = true)]
    async fn tenants_share_by_weight() {
        let slots = OutboundSlots::new(8);
        let heavy = Holder {
            tenant: 1,
            weight: 3,
        };
        let light = Holder {
            tenant: 2,
            weight: 1,
        };
        // Both ask first, so each counts the other as wanting.
        let a = got(slots.try_take(heavy, "http://a:80"));
        let b = got(slots.try_take(light, "http://b:80"));
        let mut more_a: Vec<_> = Vec::new();
        while let Take::Got(s) = slots.try_take(heavy, "http://a:80") {
            more_a.push(s);
        }
        let mut more_b: Vec<_> = Vec::new();
        while let Take::Got(s) = slots.try_take(light, "http://b:80") {
            more_b.push(s);
        }
        assert_eq!((1 + more_a.len(), 1 + more_b.len()), (6, 2));
        drop((a, b, more_a, more_b));
    }

    /// A tenant served from its keep-alive pool leaves its share to a busy one; one that
    /// asked lately keeps what it lacks of its share free, and takes its place back from
    /// the busy tenant once that one's connections are quiet or stalled.
    #[tokio::test(start_paused = true)]
    async fn places_left_unused_go_to_a_busy_tenant_and_come_back() {
        let slots = OutboundSlots::new(10);
        let pooled = Holder {
            tenant: 1,
            weight: 1,
        };
        let busy = Holder {
            tenant: 2,
            weight: 1,
        };
        let keep = got(slots.try_take(pooled, "e:1/a"));
        // Shares of 5 each; the pooled tenant asked just now, so the 4 it lacks stay free.
        let mut mine = Vec::new();
        while let Take::Got(s) = slots.try_take(busy, "e:2/b") {
            s.conn().wrote();
            mine.push(s);
        }
        assert_eq!(mine.len(), 5);
        // Once it has not asked for WANTING, its unused share goes to the busy tenant.
        tokio::time::advance(WANTING).await;
        while let Take::Got(s) = slots.try_take(busy, "e:2/b") {
            s.conn().wrote();
            mine.push(s);
        }
        assert_eq!(mine.len(), 9);
        // It needs more again: the busy tenant's stalled connections give way.
        tokio::time::advance(STALLED).await;
        let back: Vec<_> = (0..4)
            .map(|_| got(slots.try_take(pooled, "e:1/a")))
            .collect();
        assert_eq!(
            mine.iter()
                .filter(|s| s.conn().preempted.get().is_some())
                .count(),
            4
        );
        drop((keep, back, mine));
        assert_eq!(slots.counts(), (0, 0));
    }
}
