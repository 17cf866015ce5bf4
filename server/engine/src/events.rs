//! Live events for `Watch` (and `hookd tail`): attempt outcomes, dead letters, replays,
//! breaker moves, pauses. Observational: an event is published once the round that
//! decided it is durable, to every watcher then connected; a watcher that falls more than
//! [`CAPACITY`] events behind is told how many it missed. Nothing is built while nobody
//! watches.

use tokio::sync::broadcast;

/// Events buffered per watcher before the slowest one starts missing some.
pub(crate) const CAPACITY: usize = 4_096;

/// One thing that happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub at_ms: u64,
    /// `delivered`, `acked`, `attempt_failed`, `dead_lettered`, `replayed`,
    /// `breaker_opened`, `breaker_half_open`, `breaker_closed`, `endpoint_paused`,
    /// `endpoint_resumed`, `endpoint_disabled`.
    pub kind: &'static str,
    /// The destination's key (`endpoint:NAME`, `queue:NAME`, `url:ORIGIN`).
    pub destination: String,
    /// Empty for destination events.
    pub message_id: String,
    pub attempt: u32,
    pub http_status: u32,
    pub latency_us: u64,
    /// The error, reason or count, as text.
    pub detail: String,
}

/// The publishing side, shared by the engine and the API.
#[derive(Debug, Clone)]
pub struct Events(broadcast::Sender<Event>);

impl Default for Events {
    fn default() -> Self {
        Self(broadcast::channel(CAPACITY).0)
    }
}

impl Events {
    /// Whether anyone watches (the engine builds no events otherwise).
    pub fn wanted(&self) -> bool {
        self.0.receiver_count() > 0
    }

    pub fn publish(&self, events: Vec<Event>) {
        for e in events {
            // No watcher left: nothing to do.
            let _ = self.0.send(e);
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.0.subscribe()
    }
}
