//! The queue checker, after Jepsen's: compares what hookd acknowledged with what the
//! simulated endpoints and consumers received.
//!
//! - **lost**: acknowledged, never delivered, and hookd does not hold it either (not found,
//!   or marked delivered although no endpoint answered 2xx and no consumer's Ack went
//!   through). Must be 0.
//! - **unexpected**: delivered although never sent, refused at enqueue, or unreadable.
//!   Must be 0.
//! - **duplicated**: delivered more than once. At-least-once delivery allows it (a timeout
//!   after the receiver got the event, a lease that ran out); reported, not a failure.
//! - **dead-lettered**: acknowledged, not delivered, and in hookd's dead-letter queue,
//!   with the reason hookd gives.
//! - **undelivered**: acknowledged and still queued in hookd when the drain ended (not
//!   lost, but the run did not show it delivered). A run passes only with 0.
//! - **recovered**: the enqueue's outcome was unknown (transport error) and it was
//!   delivered anyway.
//! - **order** (`[ordered]` runs): per receiver and ordering key, no event taken after a
//!   later one of its key (must be 0), and the gaps in each key's numbers no more than the
//!   dead letters (each parked event leaves one).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::tally::{Enqueue, Entry};

/// What hookd says of an acknowledged event that was never delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Dead-lettered, with the reason.
    DeadLetter(String),
    /// Still pending, awaiting a retry or in flight.
    Queued,
    /// hookd says delivered or acked, but nobody here saw it.
    CompletedUnseen,
    NotFound,
    /// The lookup itself failed.
    Unknown(String),
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Verdict {
    pub sent: u64,
    pub acked: u64,
    pub rejected: u64,
    pub indeterminate: u64,
    /// Acknowledged and delivered at least once.
    pub delivered: u64,
    pub duplicated: u64,
    pub lost: u64,
    pub unexpected: u64,
    pub recovered: u64,
    pub dead_lettered: u64,
    /// Dead letters by hookd's reason.
    pub dead_letter_reasons: BTreeMap<String, u64>,
    pub undelivered: u64,
    /// Events whose fate could not be looked up.
    pub unknown: u64,
    /// Up to 10 examples of lost and unexpected events.
    pub examples: Vec<String>,
    /// `[ordered]` runs: the per-key order check.
    pub order: Option<crate::tally::OrderSeen>,
}

impl Verdict {
    /// No loss, nothing unexpected, nothing left undelivered or unknown.
    pub fn passed(&self) -> bool {
        self.lost == 0
            && self.unexpected == 0
            && self.undelivered == 0
            && self.unknown == 0
            && self
                .order
                .as_ref()
                .is_none_or(|o| o.out_of_order == 0 && o.gaps <= self.dead_lettered)
    }
}

/// Judges a run. `held(seq, id)` is asked for every acknowledged event that was never
/// delivered; `unexpected` are deliveries the tally could not match to a sent event.
pub fn check(
    events: &[Entry],
    unexpected: u64,
    unexpected_examples: &[String],
    mut held: impl FnMut(u64, &str) -> Held,
) -> Verdict {
    let mut v = Verdict {
        sent: events.len() as u64,
        unexpected,
        examples: unexpected_examples
            .iter()
            .take(10)
            .map(|e| format!("unexpected: {e}"))
            .collect(),
        ..Verdict::default()
    };
    for (seq, e) in events.iter().enumerate() {
        if e.deliveries > 1 {
            v.duplicated += 1;
        }
        match e.enqueue {
            Enqueue::Rejected => v.rejected += 1,
            // Not answered by the end of the run: the client gave up on it.
            Enqueue::Indeterminate | Enqueue::Sent => {
                v.indeterminate += 1;
                if e.deliveries > 0 {
                    v.recovered += 1;
                }
            }
            Enqueue::Acked if e.deliveries > 0 => {
                v.acked += 1;
                v.delivered += 1;
            }
            Enqueue::Acked => {
                v.acked += 1;
                let id = e.id.as_deref().unwrap_or_default();
                let mut example = |what: String| {
                    if v.examples.len() < 10 {
                        v.examples.push(what);
                    }
                };
                match held(seq as u64, id) {
                    Held::DeadLetter(reason) => {
                        v.dead_lettered += 1;
                        *v.dead_letter_reasons.entry(reason).or_default() += 1;
                    }
                    Held::Queued => v.undelivered += 1,
                    Held::CompletedUnseen => {
                        v.lost += 1;
                        example(format!(
                            "lost: event {seq} ({id}) is marked delivered but no receiver saw it"
                        ));
                    }
                    Held::NotFound => {
                        v.lost += 1;
                        example(format!("lost: event {seq} ({id}) is unknown to hookd"));
                    }
                    Held::Unknown(why) => {
                        v.unknown += 1;
                        example(format!("unknown: event {seq} ({id}): {why}"));
                    }
                }
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(enqueue: Enqueue, deliveries: u32, id: &str) -> Entry {
        Entry {
            enqueue,
            deliveries,
            push: true,
            id: (!id.is_empty()).then(|| id.into()),
        }
    }

    #[test]
    fn every_outcome_is_counted_once() {
        let events = [
            entry(Enqueue::Acked, 1, "ok"),
            entry(Enqueue::Acked, 3, "dup"),
            entry(Enqueue::Acked, 0, "dead"),
            entry(Enqueue::Acked, 0, "queued"),
            entry(Enqueue::Acked, 0, "gone"),
            entry(Enqueue::Acked, 0, "unseen"),
            entry(Enqueue::Rejected, 0, ""),
            entry(Enqueue::Indeterminate, 1, ""),
            entry(Enqueue::Indeterminate, 0, ""),
        ];
        let mut asked = Vec::new();
        let v = check(&events, 2, &["event 99, never sent".into()], |seq, id| {
            asked.push(seq);
            match id {
                "dead" => Held::DeadLetter("http 400".into()),
                "queued" => Held::Queued,
                "gone" => Held::NotFound,
                "unseen" => Held::CompletedUnseen,
                other => Held::Unknown(other.into()),
            }
        });
        // Only acknowledged, undelivered events are looked up.
        assert_eq!(asked, [2, 3, 4, 5]);
        assert_eq!(v.sent, 9);
        assert_eq!(v.acked, 6);
        assert_eq!(v.delivered, 2);
        assert_eq!(v.duplicated, 1);
        assert_eq!(v.dead_lettered, 1);
        assert_eq!(v.dead_letter_reasons["http 400"], 1);
        assert_eq!(v.undelivered, 1);
        assert_eq!(v.lost, 2);
        assert_eq!(v.unexpected, 2);
        assert_eq!(v.rejected, 1);
        assert_eq!(v.indeterminate, 2);
        assert_eq!(v.recovered, 1);
        assert!(!v.passed());
        assert_eq!(v.examples.len(), 3, "{:?}", v.examples);
    }

    #[test]
    fn a_clean_run_passes() {
        let events = [entry(Enqueue::Acked, 1, "a"), entry(Enqueue::Acked, 2, "b")];
        let v = check(&events, 0, &[], |_, _| Held::NotFound);
        assert!(v.passed());
        assert_eq!(v.duplicated, 1);
        // Dead letters with a reason do not fail a run.
        let events = [entry(Enqueue::Acked, 0, "a")];
        let v = check(&events, 0, &[], |_, _| {
            Held::DeadLetter("max attempts".into())
        });
        assert!(v.passed());
    }
}
