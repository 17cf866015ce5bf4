//! Everything a run records: one entry per event sent (for the checker), HDR histograms of
//! enqueue and end-to-end latency, and a per-second timeline.
//!
//! Every event's payload starts with its sequence number and its intended send time, so
//! whoever receives it (a simulated endpoint or a pull consumer) can tell which event it
//! is and how long it took end to end without any shared clock but the tool's own.

use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::time::Instant;

/// Bytes of the tool's own header at the start of every payload.
pub const HEADER: usize = 16;

/// `seq` and `intended` (ns since the run's start), padded to `size` bytes.
pub fn encode(seq: u64, intended_ns: u64, size: usize) -> Vec<u8> {
    let mut p = Vec::with_capacity(size.max(HEADER));
    p.extend_from_slice(&seq.to_le_bytes());
    p.extend_from_slice(&intended_ns.to_le_bytes());
    p.resize(size.max(HEADER), b'.');
    p
}

/// The `(seq, intended_ns)` of a payload, if it is one of ours.
pub fn decode(p: &[u8]) -> Option<(u64, u64)> {
    let seq = u64::from_le_bytes(p.get(..8)?.try_into().ok()?);
    let intended = u64::from_le_bytes(p.get(8..16)?.try_into().ok()?);
    Some((seq, intended))
}

/// What became of an event's enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueue {
    /// Sent, no answer yet.
    Sent,
    /// hookd acknowledged it: it must be delivered (or dead-lettered).
    Acked,
    /// hookd refused it with a definite error: it must never be delivered.
    Rejected,
    /// The call failed in a way that leaves it open whether hookd stored it (a transport
    /// error, a timeout): it may or may not be delivered.
    Indeterminate,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub enqueue: Enqueue,
    pub deliveries: u32,
    /// Sent to an endpoint (pushed), not to a queue.
    pub push: bool,
    /// hookd's message id, once acknowledged.
    pub id: Option<Box<str>>,
}

/// One second of the run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Second {
    pub t_s: u64,
    pub offered: u64,
    pub acked: u64,
    pub failed: u64,
    /// First deliveries.
    pub delivered: u64,
    pub enqueue_p50_ms: f64,
    pub enqueue_p99_ms: f64,
    pub e2e_p50_ms: f64,
    pub e2e_p99_ms: f64,
    /// hookd's CPU over the second (100 = one core), when the tool can see its process.
    pub hookd_cpu_pct: Option<f64>,
    pub hookd_rss_mb: Option<f64>,
    /// This tool's CPU (100 = one core): the load generator shares the box.
    pub tool_cpu_pct: Option<f64>,
    /// The whole machine's CPU busy (100 = every core) and iowait share, and load average.
    pub host_busy_pct: Option<f64>,
    pub host_iowait_pct: Option<f64>,
    pub load1: Option<f64>,
    /// The slowest fsync of the probe on hookd's disk in the second.
    pub fsync_ms: Option<f64>,
}

/// What the sampler read for one second besides the traffic.
#[derive(Debug, Clone, Copy, Default)]
pub struct Resources {
    pub hookd_cpu_pct: Option<f64>,
    pub hookd_rss_mb: Option<f64>,
    pub host: crate::host::HostSample,
    pub fsync_ms: Option<f64>,
}

/// Latency histograms (µs), up to an hour.
#[derive(Debug, Clone)]
pub struct Latencies {
    /// Enqueue, from the intended send time (coordinated-omission corrected).
    pub enqueue: Histogram<u64>,
    /// Enqueue, from when the call actually left (what a closed loop would report).
    pub service: Histogram<u64>,
    /// Intended send time to delivery (2xx answered, or Ack accepted).
    pub e2e: Histogram<u64>,
}

pub(crate) fn histogram() -> Histogram<u64> {
    // 3 significant digits from 1 µs to 1 h.
    match Histogram::new_with_bounds(1, 3_600_000_000, 3) {
        Ok(h) => h,
        Err(e) => unreachable!("constant histogram bounds are valid: {e}"),
    }
}

impl Latencies {
    fn new() -> Self {
        Self {
            enqueue: histogram(),
            service: histogram(),
            e2e: histogram(),
        }
    }
}

/// End-to-end latency of one group of endpoints or one queue, next to its counters.
#[derive(Debug)]
pub struct GroupLatency(Mutex<Histogram<u64>>);

impl GroupLatency {
    pub fn new() -> Self {
        Self(Mutex::new(histogram()))
    }

    /// Counts a delivery; returns whether it was a duplicate.
    pub fn delivered(&self, d: Delivery) -> bool {
        if let Delivery::First(e2e) = d {
            record(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()), e2e);
        }
        d == Delivery::Duplicate
    }

    /// (p50, p99) in ms.
    pub fn p50_p99_ms(&self) -> (f64, f64) {
        let h = self.0.lock().unwrap_or_else(|p| p.into_inner());
        (
            h.value_at_quantile(0.5) as f64 / 1e3,
            h.value_at_quantile(0.99) as f64 / 1e3,
        )
    }
}

impl Default for GroupLatency {
    fn default() -> Self {
        Self::new()
    }
}

fn record(h: &mut Histogram<u64>, d: Duration) {
    h.saturating_record((d.as_micros() as u64).max(1));
}

#[derive(Debug)]
struct Inner {
    events: Vec<Entry>,
    /// Deliveries of events that were never sent, or could not be read.
    unexpected: u64,
    unexpected_samples: Vec<String>,
    /// Acknowledged and not yet delivered.
    undelivered: u64,
    total: Latencies,
    window: Latencies,
    second: Second,
    timeline: Vec<Second>,
}

/// The run's shared record. One lock; every operation holds it for a few hundred ns.
#[derive(Debug)]
pub struct Tally {
    start: Instant,
    inner: Mutex<Inner>,
    /// `[fanout]` scenarios: each published event has one entry per subscriber, its
    /// *slot*: the event's payload carries the first slot's sequence number, and a
    /// receiver's key (see [`receiver`]) names its slot. Empty otherwise.
    slots: std::sync::OnceLock<std::collections::HashMap<String, u64>>,
    /// `[ordered]` scenarios: what each receiver took of each ordering key's lane.
    lanes: Mutex<Lanes>,
}

/// The per-key order check: per (receiver, ordering key), the numbers taken so far.
#[derive(Debug, Default)]
struct Lanes {
    seen: std::collections::HashMap<(String, String), LaneSeen>,
    out_of_order: u64,
    repeats: u64,
    samples: Vec<String>,
}

#[derive(Debug, Default)]
struct LaneSeen {
    last: u64,
    taken: std::collections::HashSet<u64>,
}

/// What the per-key order check found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrderSeen {
    /// (receiver, key) lanes that took at least one event.
    pub lanes: u64,
    /// Deliveries of a number below one already taken, that had not been taken before:
    /// an event after a later one of its key. Must be 0.
    pub out_of_order: u64,
    /// Numbers never taken below the last one taken, over all lanes: the parked dead
    /// letters (`park`). Must not exceed the dead letters.
    pub gaps: u64,
    /// Numbers taken again (at-least-once redeliveries).
    pub repeats: u64,
    pub samples: Vec<String>,
}

/// The key a receiver is known by: an endpoint by its simulated URL's path (`ep/G/I`), a
/// queue by its name in hookd.
pub fn receiver(endpoint: Option<(usize, usize)>, queue: &str) -> String {
    match endpoint {
        Some((group, instance)) => format!("ep/{group}/{instance}"),
        None => format!("q/{queue}"),
    }
}

/// What one delivery was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The first delivery of an event, this long after its intended send time.
    First(Duration),
    Duplicate,
    Unexpected,
}

impl Tally {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            inner: Mutex::new(Inner {
                events: Vec::new(),
                unexpected: 0,
                unexpected_samples: Vec::new(),
                undelivered: 0,
                total: Latencies::new(),
                window: Latencies::new(),
                second: Second::default(),
                timeline: Vec::new(),
            }),
            slots: std::sync::OnceLock::new(),
            lanes: Mutex::new(Lanes::default()),
        }
    }

    /// `[ordered]`: `receiver` took number `seq` of ordering key `key` (an endpoint's 2xx,
    /// or a consumer's accepted Ack).
    pub fn in_lane(&self, receiver: &str, key: &str, seq: u64) {
        let mut g = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        let g = &mut *g;
        let lane = g
            .seen
            .entry((receiver.to_owned(), key.to_owned()))
            .or_default();
        if !lane.taken.insert(seq) {
            g.repeats += 1;
        } else if seq < lane.last {
            g.out_of_order += 1;
            if g.samples.len() < 10 {
                g.samples.push(format!(
                    "{receiver} took #{seq} of {key:?} after #{}",
                    lane.last
                ));
            }
        } else {
            lane.last = seq;
        }
    }

    /// What the per-key order check found (see [`OrderSeen`]).
    pub fn order(&self) -> OrderSeen {
        let g = self.lanes.lock().unwrap_or_else(|p| p.into_inner());
        OrderSeen {
            lanes: g.seen.len() as u64,
            out_of_order: g.out_of_order,
            gaps: g
                .seen
                .values()
                .map(|l| l.last.saturating_sub(l.taken.len() as u64))
                .sum(),
            repeats: g.repeats,
            samples: g.samples.clone(),
        }
    }

    /// Makes this a fan-out run: `receivers` (keys from [`receiver`]) in slot order.
    pub fn set_slots(&self, receivers: Vec<String>) {
        let slots = receivers
            .into_iter()
            .enumerate()
            .map(|(i, r)| (r, i as u64))
            .collect();
        let _ = self.slots.set(slots);
    }

    /// Subscribers of every published event (0: not a fan-out run).
    pub fn slots(&self) -> usize {
        self.slots.get().map_or(0, std::collections::HashMap::len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain counters behind: keep going.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    /// ns since the start, for payloads.
    pub fn ns_since_start(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.start).as_nanos() as u64
    }

    /// Registers `n` events about to be sent; returns the first sequence number.
    pub fn issue(&self, n: usize) -> u64 {
        let mut g = self.lock();
        let first = g.events.len() as u64;
        g.events.extend(std::iter::repeat_n(
            Entry {
                enqueue: Enqueue::Sent,
                deliveries: 0,
                push: false,
                id: None,
            },
            n,
        ));
        g.second.offered += n as u64;
        first
    }

    /// The outcome of one call: per event, `Ok(id)` or the kind of failure, and whether
    /// it went to an endpoint.
    pub fn answered(
        &self,
        first: u64,
        outcomes: impl IntoIterator<Item = (Result<String, Enqueue>, bool)>,
        intended: Instant,
        sent: Instant,
    ) {
        let now = Instant::now();
        let mut g = self.lock();
        let g = &mut *g;
        let mut any_ok = false;
        for (i, (outcome, push)) in outcomes.into_iter().enumerate() {
            let Some(e) = g.events.get_mut(first as usize + i) else {
                continue;
            };
            e.push = push;
            match outcome {
                Ok(id) => {
                    e.enqueue = Enqueue::Acked;
                    e.id = Some(id.into());
                    any_ok = true;
                    g.second.acked += 1;
                    if e.deliveries == 0 {
                        g.undelivered += 1;
                    }
                }
                Err(kind) => {
                    e.enqueue = kind;
                    g.second.failed += 1;
                }
            }
        }
        if any_ok {
            for l in [&mut g.total, &mut g.window] {
                record(&mut l.enqueue, now - intended);
                record(&mut l.service, now - sent);
            }
        }
    }

    /// A simulated endpoint answered 2xx, or a consumer's Ack was accepted, for `payload`.
    pub fn delivered(&self, payload: &[u8]) -> Delivery {
        self.delivered_to(payload, None)
    }

    /// [`Tally::delivered`] by the receiver with key `receiver` (a fan-out run's slot).
    pub fn delivered_at(&self, payload: &[u8], receiver: &str) -> Delivery {
        self.delivered_to(payload, Some(receiver))
    }

    fn delivered_to(&self, payload: &[u8], receiver: Option<&str>) -> Delivery {
        let now = Instant::now();
        let slot = match (self.slots.get(), receiver) {
            (Some(slots), Some(r)) => match slots.get(r) {
                Some(s) => *s,
                None => {
                    let mut g = self.lock();
                    return unexpected(
                        &mut g,
                        format!("a delivery to {r}, which subscribes to nothing"),
                    );
                }
            },
            _ => 0,
        };
        let mut g = self.lock();
        let g = &mut *g;
        let Some((seq, intended_ns)) = decode(payload).map(|(s, t)| (s + slot, t)) else {
            return unexpected(
                g,
                format!(
                    "a payload of {} bytes without the tool's header",
                    payload.len()
                ),
            );
        };
        let Some(e) = g.events.get_mut(seq as usize) else {
            return unexpected(g, format!("event {seq}, never sent"));
        };
        if e.enqueue == Enqueue::Rejected {
            return unexpected(g, format!("event {seq}, refused at enqueue"));
        }
        e.deliveries += 1;
        if e.deliveries > 1 {
            return Delivery::Duplicate;
        }
        if e.enqueue == Enqueue::Acked {
            g.undelivered = g.undelivered.saturating_sub(1);
        }
        g.second.delivered += 1;
        let e2e = now.saturating_duration_since(self.start + Duration::from_nanos(intended_ns));
        for l in [&mut g.total, &mut g.window] {
            record(&mut l.e2e, e2e);
        }
        Delivery::First(e2e)
    }

    /// Acknowledged events not delivered yet.
    pub fn undelivered(&self) -> u64 {
        self.lock().undelivered
    }

    /// Closes the current second of the timeline.
    pub fn tick(&self, r: Resources) -> Second {
        let mut g = self.lock();
        let g = &mut *g;
        let ms = |h: &Histogram<u64>, q| h.value_at_quantile(q) as f64 / 1e3;
        let mut s = std::mem::take(&mut g.second);
        s.t_s = g.timeline.len() as u64 + 1;
        s.enqueue_p50_ms = ms(&g.window.enqueue, 0.5);
        s.enqueue_p99_ms = ms(&g.window.enqueue, 0.99);
        s.e2e_p50_ms = ms(&g.window.e2e, 0.5);
        s.e2e_p99_ms = ms(&g.window.e2e, 0.99);
        s.hookd_cpu_pct = r.hookd_cpu_pct;
        s.hookd_rss_mb = r.hookd_rss_mb;
        s.tool_cpu_pct = r.host.tool_cpu_pct;
        s.host_busy_pct = r.host.busy_pct;
        s.host_iowait_pct = r.host.iowait_pct;
        s.load1 = r.host.load1;
        s.fsync_ms = r.fsync_ms;
        g.window = Latencies::new();
        g.timeline.push(s.clone());
        s
    }

    /// The record so far.
    pub fn snapshot(&self) -> Snapshot {
        let g = self.lock();
        Snapshot {
            events: g.events.clone(),
            unexpected: g.unexpected,
            unexpected_samples: g.unexpected_samples.clone(),
            latencies: g.total.clone(),
            timeline: g.timeline.clone(),
        }
    }

    /// Marks where a phase (a capacity step) begins: its latencies are measured apart.
    pub fn phase(&self) -> Phase {
        let g = self.lock();
        Phase {
            first_event: g.events.len(),
            latencies: g.total.clone(),
        }
    }

    /// Latencies recorded since `phase`.
    pub fn since(&self, phase: &Phase) -> Latencies {
        let g = self.lock();
        let mut l = g.total.clone();
        // Histograms only grow, so subtracting the earlier copy leaves this phase's.
        let _ = l.enqueue.subtract(&phase.latencies.enqueue);
        let _ = l.service.subtract(&phase.latencies.service);
        let _ = l.e2e.subtract(&phase.latencies.e2e);
        l
    }

    /// Events sent since `phase`: (sent, acked, delivered).
    pub fn counts_since(&self, phase: &Phase) -> (u64, u64, u64) {
        let g = self.lock();
        let events = g.events.get(phase.first_event..).unwrap_or_default();
        let acked = events
            .iter()
            .filter(|e| e.enqueue == Enqueue::Acked)
            .count() as u64;
        let delivered = events.iter().filter(|e| e.deliveries > 0).count() as u64;
        (events.len() as u64, acked, delivered)
    }
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

fn unexpected(g: &mut Inner, what: String) -> Delivery {
    g.unexpected += 1;
    if g.unexpected_samples.len() < 10 {
        g.unexpected_samples.push(what);
    }
    Delivery::Unexpected
}

/// A copy of the record.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub events: Vec<Entry>,
    pub unexpected: u64,
    pub unexpected_samples: Vec<String>,
    pub latencies: Latencies,
    pub timeline: Vec<Second>,
}

/// The start of a phase; see [`Tally::phase`].
#[derive(Debug, Clone)]
pub struct Phase {
    first_event: usize,
    latencies: Latencies,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip() {
        let p = encode(42, 7_000, 512);
        assert_eq!(p.len(), 512);
        assert_eq!(decode(&p), Some((42, 7_000)));
        assert_eq!(decode(&p[..15]), None);
    }

    #[tokio::test]
    async fn deliveries_are_classified() {
        let t = Tally::new();
        let first = t.issue(3);
        let now = Instant::now();
        t.answered(
            first,
            [
                (Ok("a".into()), true),
                (Err(Enqueue::Rejected), true),
                (Err(Enqueue::Indeterminate), false),
            ],
            now,
            now,
        );
        assert_eq!(t.undelivered(), 1);
        assert!(matches!(t.delivered(&encode(0, 0, 16)), Delivery::First(_)));
        assert_eq!(t.undelivered(), 0);
        assert_eq!(t.delivered(&encode(0, 0, 16)), Delivery::Duplicate);
        assert_eq!(t.delivered(&encode(1, 0, 16)), Delivery::Unexpected);
        // An indeterminate enqueue may be delivered: that is not unexpected.
        assert!(matches!(t.delivered(&encode(2, 0, 16)), Delivery::First(_)));
        assert_eq!(t.delivered(&encode(99, 0, 16)), Delivery::Unexpected);
        assert_eq!(t.delivered(b"short"), Delivery::Unexpected);
        let s = t.snapshot();
        assert_eq!(s.unexpected, 3);
        assert_eq!(s.latencies.e2e.len(), 2);
        assert_eq!(s.latencies.enqueue.len(), 1);
    }

    /// The per-key order check: in order with a redelivery and a gap passes as such; an
    /// event after a later one of its key is out of order; lanes are per receiver.
    #[test]
    fn the_order_check_tells_a_gap_and_a_repeat_from_an_event_out_of_order() {
        let t = Tally::new();
        for seq in [1, 2, 2, 4, 5] {
            t.in_lane("ep/0/0", "k", seq);
        }
        t.in_lane("q/steps", "k", 1);
        let o = t.order();
        assert_eq!((o.lanes, o.out_of_order, o.gaps, o.repeats), (2, 0, 1, 1));
        t.in_lane("ep/0/0", "k", 3);
        let o = t.order();
        assert_eq!((o.out_of_order, o.gaps), (1, 0));
        assert_eq!(
            o.samples,
            vec!["ep/0/0 took #3 of \"k\" after #5".to_owned()]
        );
    }
}
