//! Event-type patterns and the index that finds every subscription a topic matches.
//!
//! A pattern is an event type (`ticket.classified`), `*` (every event type), or an event
//! type with `*` standing for any run of characters, dots included: `ticket.*` matches
//! `ticket.classified` and `ticket.reply.drafted`, `*.created` matches `user.created`.
//! Patterns are printable ASCII, at most [`MAX_PATTERN_LEN`] bytes, as event types are.

use std::collections::HashMap;

/// Longest pattern, in bytes (the event-type limit).
pub const MAX_PATTERN_LEN: usize = 256;

/// Checks a topic an event is published to: an event type patterns can name (printable
/// ASCII without spaces or `*`, at most [`MAX_PATTERN_LEN`] bytes). The error names `field`.
pub fn check_topic(topic: &str, field: &str) -> Result<(), String> {
    if topic.is_empty() {
        return Err(format!("{field}: must not be empty"));
    }
    if topic.len() > MAX_PATTERN_LEN {
        return Err(format!(
            "{field}: {} bytes is over the limit of {MAX_PATTERN_LEN} bytes",
            topic.len()
        ));
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !('!'..='~').contains(c) || *c == '*')
    {
        return Err(format!(
            "{field}: character {c:?} is not allowed (printable ASCII without spaces or '*')"
        ));
    }
    Ok(())
}

/// One checked pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Exact,
    Every,
    /// The literal pieces between the stars (at least two: a star is between them).
    Glob(Vec<String>),
}

impl Pattern {
    /// Checks `text` as the pattern at `field` (the name errors start with).
    pub fn parse(text: &str, field: &str) -> Result<Pattern, String> {
        if text.is_empty() {
            return Err(format!("{field}: must not be empty"));
        }
        if text.len() > MAX_PATTERN_LEN {
            return Err(format!(
                "{field}: {} bytes is over the limit of {MAX_PATTERN_LEN} bytes",
                text.len()
            ));
        }
        if let Some((at, c)) = text.char_indices().find(|(_, c)| !('!'..='~').contains(c)) {
            return Err(format!(
                "{field}: character {c:?} at byte {at} is not allowed (printable ASCII, no spaces)"
            ));
        }
        let kind = if text == "*" {
            Kind::Every
        } else if text.contains('*') {
            Kind::Glob(text.split('*').map(str::to_owned).collect())
        } else {
            Kind::Exact
        };
        Ok(Pattern {
            text: text.to_owned(),
            kind,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern has a star.
    pub fn is_wildcard(&self) -> bool {
        !matches!(self.kind, Kind::Exact)
    }

    pub fn matches(&self, topic: &str) -> bool {
        match &self.kind {
            Kind::Exact => self.text == topic,
            Kind::Every => true,
            Kind::Glob(pieces) => glob(pieces, topic),
        }
    }
}

/// `pieces` are the text between stars: the first a prefix, the last a suffix, the rest
/// found in order between them (leftmost each time, which is enough: a star takes any run).
fn glob(pieces: &[String], topic: &str) -> bool {
    let (Some((first, rest)), Some(last)) = (pieces.split_first(), pieces.last()) else {
        return false;
    };
    if topic.len() < first.len() + last.len() || !topic.starts_with(first.as_str()) {
        return false;
    }
    if !topic.ends_with(last.as_str()) {
        return false;
    }
    let mut middle = &topic[first.len()..topic.len() - last.len()];
    for piece in &rest[..rest.len().saturating_sub(1)] {
        match middle.find(piece.as_str()) {
            Some(at) => middle = &middle[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// Subscriptions by pattern: exact event types in a hash map, wildcards in a list, so a
/// publish costs one lookup plus a check per wildcard pattern.
#[derive(Debug, Clone)]
pub struct TopicIndex<K> {
    exact: HashMap<String, Vec<K>>,
    wildcards: Vec<(Pattern, K)>,
}

impl<K> Default for TopicIndex<K> {
    fn default() -> Self {
        TopicIndex {
            exact: HashMap::new(),
            wildcards: Vec::new(),
        }
    }
}

impl<K: Clone + Ord> TopicIndex<K> {
    pub fn insert(&mut self, pattern: &Pattern, key: K) {
        if pattern.is_wildcard() {
            self.wildcards.push((pattern.clone(), key));
        } else {
            self.exact
                .entry(pattern.as_str().to_owned())
                .or_default()
                .push(key);
        }
    }

    /// Removes every pattern of `key`.
    pub fn remove(&mut self, key: &K) {
        self.exact.retain(|_, keys| {
            keys.retain(|k| k != key);
            !keys.is_empty()
        });
        self.wildcards.retain(|(_, k)| k != key);
    }

    /// The keys with a pattern matching `topic`, each once, in order.
    pub fn matching(&self, topic: &str) -> Vec<K> {
        let mut out: Vec<K> = self.exact.get(topic).cloned().unwrap_or_default();
        out.extend(
            self.wildcards
                .iter()
                .filter(|(p, _)| p.matches(topic))
                .map(|(_, k)| k.clone()),
        );
        out.sort();
        out.dedup();
        out
    }

    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.wildcards.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn p(s: &str) -> Pattern {
        Pattern::parse(s, "event_types[0]").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn patterns() {
        assert!(p("ticket.classified").matches("ticket.classified"));
        assert!(!p("ticket.classified").matches("ticket.classified.v2"));
        assert!(p("*").matches("anything.at.all"));
        assert!(p("ticket.*").matches("ticket.classified"));
        assert!(p("ticket.*").matches("ticket.reply.drafted"));
        assert!(!p("ticket.*").matches("tickets.opened"));
        assert!(!p("ticket.*").matches("order.ticket.x"));
        assert!(p("*.created").matches("user.created"));
        assert!(!p("*.created").matches("user.created.late"));
        assert!(p("ticket.*.approved").matches("ticket.reply.approved"));
        assert!(!p("ticket.*.approved").matches("ticket.approved"));
        assert!(p("a*b*c").matches("abc"));
        assert!(p("a*b*c").matches("a-b-b-c"));
        assert!(!p("a*b*c").matches("acb"));
        assert!(!p("ab*ba").matches("aba"));
    }

    #[test]
    fn bad_patterns_are_refused_naming_the_field() {
        assert_eq!(
            Pattern::parse("", "event_types[2]"),
            Err("event_types[2]: must not be empty".into())
        );
        assert_eq!(
            Pattern::parse("ticket created", "event_types[0]"),
            Err(
                "event_types[0]: character ' ' at byte 6 is not allowed (printable ASCII, no spaces)"
                    .into()
            )
        );
        assert!(Pattern::parse(&"a".repeat(257), "e").is_err_and(|e| e.contains("256")));
    }

    #[test]
    fn the_index_finds_each_subscription_once() {
        let mut index = TopicIndex::default();
        index.insert(&p("ticket.classified"), 1);
        index.insert(&p("ticket.*"), 1);
        index.insert(&p("ticket.*"), 2);
        index.insert(&p("*"), 3);
        index.insert(&p("order.paid"), 4);
        assert_eq!(index.matching("ticket.classified"), vec![1, 2, 3]);
        assert_eq!(index.matching("order.paid"), vec![3, 4]);
        index.remove(&1);
        index.remove(&3);
        assert_eq!(index.matching("ticket.classified"), vec![2]);
        assert_eq!(index.matching("user.created"), Vec::<i32>::new());
        index.remove(&2);
        index.remove(&4);
        assert!(index.is_empty());
    }

    /// A star as a regular expression's `.*`, matched by backtracking: the reference.
    fn reference(pattern: &[u8], topic: &[u8]) -> bool {
        match pattern.split_first() {
            None => topic.is_empty(),
            Some((b'*', rest)) => (0..=topic.len()).any(|i| reference(rest, &topic[i..])),
            Some((c, rest)) => topic.first() == Some(c) && reference(rest, &topic[1..]),
        }
    }

    proptest! {
        #[test]
        fn globs_agree_with_backtracking(pattern in "[ab.*]{1,8}", topic in "[ab.]{0,10}") {
            prop_assert_eq!(p(&pattern).matches(&topic), reference(pattern.as_bytes(), topic.as_bytes()));
        }
    }
}
