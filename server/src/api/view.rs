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

/// A replay's mark in a message's history (an `AttemptRecord` with outcome `replayed`).
pub(crate) fn is_replay(a: &AttemptRecord) -> bool {
    a.outcome == AttemptOutcome::Replayed.as_str()
}

/// Where the attempts since the last replay start in `history` (after its `replayed`
/// mark), how many replays it shows, and how many attempts came before the last one.
pub(crate) fn replay_rounds(history: &[AttemptRecord]) -> (usize, u32, u32) {
    let Some(last) = history.iter().rposition(is_replay) else {
        return (0, 0, 0);
    };
    let replays = history.iter().filter(|a| is_replay(a)).count() as u32;
    let before = history[..last].iter().filter(|a| !is_replay(a)).count() as u32;
    (last + 1, replays, before)
}

/// The last error to show: after a replay, only an error of an attempt since it (the old
/// one belongs to the dead letter that was replayed).
fn current_error(history: &[AttemptRecord], last_error: String) -> String {
    let (start, replays, _) = replay_rounds(history);
    if replays > 0 && history[start..].iter().all(|a| a.error.is_empty()) {
        String::new()
    } else {
        last_error
    }
}

impl MessageView {
    /// Times it was replayed (as its history shows), and the attempts before the last
    /// replay.
    pub(crate) fn replays(&self) -> (u32, u32) {
        let (_, replays, before) = replay_rounds(&self.history);
        (replays, before)
    }

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
            last_error: current_error(&history, m.history.last_error),
            history,
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
            last_error: current_error(&history.attempts, history.last_error),
            history: history.attempts,
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

#[cfg(test)]
mod replay_tests {
    use super::*;

    fn attempt(number: u32, error: &str) -> AttemptRecord {
        AttemptRecord {
            number,
            error: error.into(),
            outcome: if number == 0 {
                "replayed"
            } else {
                "http_error"
            }
            .into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_replay_starts_a_new_round_and_the_old_error_is_not_the_last() {
        let never = [attempt(1, "503"), attempt(2, "503")];
        assert_eq!(replay_rounds(&never), (0, 0, 0));
        assert_eq!(current_error(&never, "503".into()), "503");
        let replayed = [
            attempt(1, "503"),
            attempt(2, "503"),
            attempt(0, ""),
            attempt(1, ""),
        ];
        assert_eq!(replay_rounds(&replayed), (3, 1, 2));
        assert_eq!(current_error(&replayed, "503".into()), "");
        let just_replayed = [attempt(1, "503"), attempt(0, "")];
        assert_eq!(current_error(&just_replayed, "503".into()), "");
        let failed_again = [attempt(1, "503"), attempt(0, ""), attempt(1, "timeout")];
        assert_eq!(replay_rounds(&failed_again), (2, 1, 1));
        assert_eq!(current_error(&failed_again, "timeout".into()), "timeout");
    }
}
