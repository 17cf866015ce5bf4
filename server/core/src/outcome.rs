//! How an attempt ended: the one vocabulary of the attempt history, the metrics' failure
//! classes and the events. Stored as its text ([`AttemptOutcome::as_str`]) in each attempt
//! row, and shown as that text by the API (`Attempt.outcome` in the `.proto`), so a value's
//! text never changes; new values may be added.

/// How one attempt of a message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptOutcome {
    /// Push: a 2xx answer.
    Delivered,
    /// Push: an answer with a status worth another attempt (5xx, 429, 408...).
    HttpError,
    /// Push: no answer within the attempt's timeout.
    Timeout,
    /// Push: no answer at all (refused connection, reset, TLS failure...).
    NetworkError,
    /// Push: no outcome reported before the attempt's deadline (hookd restarted, say).
    DeliveryLost,
    /// Push: a permanent 4xx; the message goes to the dead letters.
    Rejected,
    /// Push: the address guard refused the destination's address (SSRF).
    Refused,
    /// Push: hookd itself ran short (descriptors, ports, its outbound cap); postponed.
    LocalError,
    /// Pull: the consumer acknowledged it.
    Acked,
    /// Pull: the consumer gave it back.
    Nacked,
    /// Pull: the lease ran out before an Ack.
    LeaseExpired,
    /// The current attempt (a lease still held), as answers show it.
    InProgress,
    /// A dead letter replayed (attempt number 0).
    Replayed,
}

impl AttemptOutcome {
    pub const ALL: [AttemptOutcome; 13] = [
        Self::Delivered,
        Self::HttpError,
        Self::Timeout,
        Self::NetworkError,
        Self::DeliveryLost,
        Self::Rejected,
        Self::Refused,
        Self::LocalError,
        Self::Acked,
        Self::Nacked,
        Self::LeaseExpired,
        Self::InProgress,
        Self::Replayed,
    ];

    /// The stored and shown text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delivered => "delivered",
            Self::HttpError => "http_error",
            Self::Timeout => "timeout",
            Self::NetworkError => "network_error",
            Self::DeliveryLost => "delivery_lost",
            Self::Rejected => "rejected",
            Self::Refused => "refused",
            Self::LocalError => "local_error",
            Self::Acked => "acked",
            Self::Nacked => "nacked",
            Self::LeaseExpired => "lease_expired",
            Self::InProgress => "in_progress",
            Self::Replayed => "replayed",
        }
    }
}

impl std::fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_outcomes_share_a_text() {
        let mut seen = std::collections::HashSet::new();
        for o in AttemptOutcome::ALL {
            assert!(seen.insert(o.as_str()), "{o} twice");
        }
    }
}
