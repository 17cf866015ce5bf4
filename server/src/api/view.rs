//! What the API and the console show, in hookd's own types: the one place that decides
//! how a stored value is presented (a retry whose time has come is pending, a lease in
//! progress is an attempt in progress). `convert` maps these to the wire; the console
//! renders them as they are.

use std::collections::BTreeMap;

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::outcome::AttemptOutcome;
use hookd_storage::store::{
    AttemptRecord, DoneRecord, EndpointRecord, MessageRecord, State, StoredMessage,
};

/// Where a message stands, as it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shown {
    Pending,
    AwaitingRetry,
    InFlight,
    DeadLetter,
    Delivered,
}

impl Shown {
    /// As the console writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::AwaitingRetry => "awaiting retry",
            Self::InFlight => "in flight",
            Self::DeadLetter => "dead letter",
            Self::Delivered => "delivered",
        }
    }
}

/// A message's headers and payload: while it is live or dead, and once completed while the
/// log retains it (`None` once expired).
#[derive(Debug, Clone)]
pub(crate) struct Content {
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) payload: Vec<u8>,
}

/// One message, live, dead or completed, as GetMessage and the console show it.
#[derive(Debug, Clone)]
pub(crate) struct MessageView {
    pub(crate) id: MessageId,
    /// `None` for a destination this build cannot decode.
    pub(crate) destination: Option<Destination>,
    pub(crate) state: Shown,
    pub(crate) attempts: u32,
    /// 0: the server's default.
    pub(crate) max_attempts: u32,
    pub(crate) enqueued_ms: u64,
    /// 0 once completed.
    pub(crate) next_attempt_ms: u64,
    /// 0 until completed.
    pub(crate) completed_ms: u64,
    /// Finished attempts, then the one in progress if a lease or delivery holds it.
    pub(crate) history: Vec<AttemptRecord>,
    pub(crate) last_error: String,
    pub(crate) event_type: String,
    pub(crate) idempotency_key: String,
    pub(crate) payload_size: u64,
    pub(crate) content: Option<Content>,
    /// The publish's event id; empty: the message is its own event.
    pub(crate) event_id: String,
    /// Its place in a FIFO lane, while it is live or dead.
    pub(crate) lane: Option<hookd_storage::store::LaneSlot>,
}

impl MessageView {
    /// A live or dead message, at `now`.
    pub(crate) fn live(m: StoredMessage, now: u64) -> Self {
        let state = match m.entry.state {
            // A retry whose time has come is waiting for a consumer like any pending message.
            State::Retry if m.entry.due_ms <= now => Shown::Pending,
            State::Retry => Shown::AwaitingRetry,
            State::Pending => Shown::Pending,
            State::Leased => Shown::InFlight,
            State::Dead => Shown::DeadLetter,
        };
        let mut history = m.history.attempts;
        if m.entry.state == State::Leased {
            history.push(AttemptRecord {
                number: m.entry.attempts,
                started_ms: m.entry.since_ms,
                ended_ms: 0,
                outcome: AttemptOutcome::InProgress.as_str().into(),
                error: String::new(),
                http_status: 0,
                latency_us: 0,
            });
        }
        Self {
            id: m.id,
            destination: Destination::decode(&m.record.destination),
            state,
            attempts: m.entry.attempts,
            max_attempts: m.entry.max_attempts,
            enqueued_ms: m.record.created_ms,
            next_attempt_ms: m.entry.due_ms,
            completed_ms: 0,
            history,
            last_error: m.history.last_error,
            event_type: m.record.event_type,
            idempotency_key: m.record.idempotency_key,
            payload_size: m.record.payload.len() as u64,
            event_id: m.record.event_id,
            lane: m.entry.lane,
            content: Some(Content {
                headers: m.record.headers,
                payload: m.record.payload,
            }),
        }
    }

    /// A delivered (acked) message, with its record if the log still keeps it.
    pub(crate) fn done(id: MessageId, d: DoneRecord, kept: Option<Box<MessageRecord>>) -> Self {
        let history = d.history.unwrap_or_default();
        Self {
            id,
            destination: Destination::decode(&d.destination),
            state: Shown::Delivered,
            attempts: d.attempts,
            max_attempts: d.max_attempts,
            enqueued_ms: d.created_ms,
            next_attempt_ms: 0,
            completed_ms: d.completed_ms,
            history: history.attempts,
            last_error: history.last_error,
            event_type: d.event_type,
            idempotency_key: d.idempotency_key,
            payload_size: d.payload_size,
            event_id: d.event_id,
            lane: None,
            content: kept.map(|r| Content {
                headers: r.headers,
                payload: r.payload,
            }),
        }
    }
}

/// A stored signing secret as it is shown: never itself, only its prefix and fingerprint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SecretShown {
    pub(crate) prefix: String,
    pub(crate) fingerprint: String,
    /// For an ed25519 signing key (`whsk_`): its public key (`whpk_`), which is no secret
    /// and is what the receiver verifies `v1a` signatures with.
    pub(crate) public_key: String,
}

impl SecretShown {
    pub(crate) fn of(clear: &str) -> Self {
        let (prefix, fingerprint) = hookd_core::secrets::summary(clear);
        let public_key = hookd_core::signing::Secret::parse(clear)
            .ok()
            .and_then(|s| s.public_key())
            .unwrap_or_default();
        Self {
            prefix,
            fingerprint,
            public_key,
        }
    }
}

/// An endpoint as GetEndpoint, ListEndpoints and the console read it.
#[derive(Debug, Clone)]
pub(crate) struct EndpointView {
    /// The stored record, its `secrets` left empty.
    pub(crate) record: EndpointRecord,
    /// The secrets opened, in order: never rendered, only summarised ([`Self::summaries`]),
    /// or returned by GetEndpoint with `reveal_secrets`, or handed back to PutEndpoint by a
    /// console save that keeps them (a secret that does not open is `<why>`).
    pub(crate) clear_secrets: Vec<String>,
}

impl EndpointView {
    /// One summary per secret, in order: all that is ever shown of them.
    pub(crate) fn summaries(&self) -> Vec<SecretShown> {
        self.clear_secrets
            .iter()
            .map(|c| SecretShown::of(c))
            .collect()
    }
}

/// The dead-letter analysis over a window, as AnalyzeDeadLetters and the console show it.
#[derive(Debug, Clone)]
pub(crate) struct DeadAnalysis {
    pub(crate) from_ms: u64,
    pub(crate) to_ms: u64,
    /// One per destination with dead letters in the window.
    pub(crate) destinations: Vec<hookd_core::deadletters::Analysis>,
    /// Dead letters looked at.
    pub(crate) scanned: u64,
    /// More were there than one analysis reads.
    pub(crate) truncated: bool,
}
