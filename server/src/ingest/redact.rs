//! Payload sanitisation for inbound events (opt-in per source): JSON pointers removed or
//! masked, and named detectors whose matches in JSON string values are replaced, before
//! the event is stored. The signature has been checked on the raw bytes before this runs.
//!
//! Pointers are RFC 6901 (`/a/b/0`, `~0` for `~` and `~1` for `/`), with one extension: a
//! segment `*` stands for every member of an object or element of an array, so
//! `/items/*/email` masks the e-mail of every item.

use hookd_core::source::{Detector, RedactSpec};
use regex::Regex;
use serde_json::Value;

/// The replacement text of a masked value.
pub(crate) const MASK: &str = "[redacted]";

/// A compiled [`RedactSpec`].
#[derive(Debug, Clone)]
pub struct Redactor {
    remove: Vec<(String, Vec<String>)>,
    mask: Vec<(String, Vec<String>)>,
    /// In the order they run: cards before phones (a card number is also a digit run).
    detectors: Vec<(Detector, Regex)>,
    /// `remove=/a,mask=/b,detectors=email+card`: the configured rules, for the stored
    /// message's `hookd-redaction` header.
    pub rules: String,
}

/// What [`Redactor::apply`] changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The rules that replaced or removed something (`remove:/a`, `mask:/b`, `email`...).
    pub fired: Vec<String>,
}

impl Redactor {
    /// Errors name the rule (`redact.mask[1]: ...`).
    pub fn new(spec: &RedactSpec) -> Result<Option<Self>, String> {
        if spec.is_empty() {
            return Ok(None);
        }
        let pointers = |list: &[String], key: &str| -> Result<Vec<(String, Vec<String>)>, String> {
            list.iter()
                .enumerate()
                .map(|(i, p)| {
                    parse_pointer(p)
                        .map(|segments| (p.clone(), segments))
                        .map_err(|e| format!("redact.{key}[{i}]: {e}"))
                })
                .collect()
        };
        let mut detectors: Vec<Detector> = Vec::new();
        for d in Detector::ALL {
            if spec.detectors.contains(&d) {
                detectors.push(d);
            }
        }
        // Cards first: a card number would otherwise be taken for a phone number.
        detectors.sort_by_key(|d| match d {
            Detector::Card => 0,
            Detector::BearerToken => 1,
            Detector::Email => 2,
            Detector::Phone => 3,
        });
        let detectors = detectors
            .into_iter()
            .map(|d| Ok((d, Regex::new(pattern(d)).map_err(|e| e.to_string())?)))
            .collect::<Result<Vec<_>, String>>()?;
        let mut rules = Vec::new();
        if !spec.remove.is_empty() {
            rules.push(format!("remove={}", spec.remove.join(" ")));
        }
        if !spec.mask.is_empty() {
            rules.push(format!("mask={}", spec.mask.join(" ")));
        }
        if !detectors.is_empty() {
            let names: Vec<&str> = detectors.iter().map(|(d, _)| d.name()).collect();
            rules.push(format!("detectors={}", names.join(" ")));
        }
        Ok(Some(Self {
            remove: pointers(&spec.remove, "remove")?,
            mask: pointers(&spec.mask, "mask")?,
            detectors,
            rules: rules.join(", "),
        }))
    }

    /// Scrubs `value` in place: removals, then masks, then the detectors over every string
    /// value left.
    pub fn apply(&self, value: &mut Value) -> Applied {
        let mut applied = Applied::default();
        for (text, segments) in &self.remove {
            if remove_at(value, segments) {
                applied.fired.push(format!("remove:{text}"));
            }
        }
        for (text, segments) in &self.mask {
            if mask_at(value, segments) {
                applied.fired.push(format!("mask:{text}"));
            }
        }
        let mut hits = vec![false; self.detectors.len()];
        scrub_strings(value, &self.detectors, &mut hits);
        for ((d, _), hit) in self.detectors.iter().zip(hits) {
            if hit {
                applied.fired.push(d.name().to_owned());
            }
        }
        applied
    }
}

fn pattern(d: Detector) -> &'static str {
    match d {
        Detector::Email => r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}",
        // Candidates only: the digit count decides (see `replace_phones`).
        Detector::Phone => r"\+?\(?\d[\d\s().\-]{6,22}\d",
        // Candidates only: the Luhn check decides.
        Detector::Card => r"\b\d(?:[ \-]?\d){12,18}\b",
        Detector::BearerToken => {
            r"(?i:\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*)|\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{10,}\b|\bgh[pousr]_[A-Za-z0-9]{20,}\b|\bxox[abprs]-[A-Za-z0-9\-]{10,}\b"
        }
    }
}

fn replacement(d: Detector) -> &'static str {
    match d {
        Detector::Email => "[redacted:email]",
        Detector::Phone => "[redacted:phone]",
        Detector::Card => "[redacted:card]",
        Detector::BearerToken => "[redacted:token]",
    }
}

fn digits(s: &str) -> Vec<u32> {
    s.chars().filter_map(|c| c.to_digit(10)).collect()
}

/// The Luhn check of a card number's digits.
pub(crate) fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                d
            }
        })
        .sum();
    !digits.is_empty() && sum.is_multiple_of(10)
}

/// Whether a candidate match is the detector's kind.
fn confirmed(d: Detector, text: &str) -> bool {
    match d {
        Detector::Card => {
            let ds = digits(text);
            (13..=19).contains(&ds.len()) && luhn(&ds)
        }
        // A bare run of digits is more often an id or a timestamp than a phone number,
        // and `2026-12-01 10` is a date: a phone number starts with `+` or has a
        // separator, and is not a date.
        Detector::Phone => {
            (9..=15).contains(&digits(text).len())
                && (text.starts_with('+') || text.contains([' ', '(', ')', '.', '-']))
                && !looks_like_date(text)
        }
        Detector::Email | Detector::BearerToken => true,
    }
}

/// `YYYY-MM-DD` at the start (after an optional `+`/`(`).
fn looks_like_date(text: &str) -> bool {
    let t = text.trim_start_matches(['+', '(']);
    let b = t.as_bytes();
    b.len() >= 10
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5..7].iter().all(u8::is_ascii_digit)
        && b[7] == b'-'
        && b[8..10].iter().all(u8::is_ascii_digit)
}

fn scrub_strings(value: &mut Value, detectors: &[(Detector, Regex)], hits: &mut [bool]) {
    match value {
        Value::String(s) => {
            for (i, (d, re)) in detectors.iter().enumerate() {
                if !re.is_match(s) {
                    continue;
                }
                let mut changed = false;
                let out = re.replace_all(s, |c: &regex::Captures<'_>| {
                    let m = c.get(0).map_or("", |m| m.as_str());
                    if confirmed(*d, m) {
                        changed = true;
                        replacement(*d).to_owned()
                    } else {
                        m.to_owned()
                    }
                });
                if changed {
                    *s = out.into_owned();
                    hits[i] = true;
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                scrub_strings(item, detectors, hits);
            }
        }
        Value::Object(members) => {
            for (_, v) in members.iter_mut() {
                scrub_strings(v, detectors, hits);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The segments of a JSON pointer (`""` is the whole document, refused here: removing or
/// masking everything is not redaction).
pub fn parse_pointer(p: &str) -> Result<Vec<String>, String> {
    let Some(rest) = p.strip_prefix('/') else {
        return Err(format!(
            "{p:?} is not a JSON pointer (it must start with '/')"
        ));
    };
    rest.split('/')
        .map(|seg| {
            if seg.contains('~') {
                let mut out = String::with_capacity(seg.len());
                let mut chars = seg.chars();
                while let Some(c) = chars.next() {
                    if c == '~' {
                        match chars.next() {
                            Some('0') => out.push('~'),
                            Some('1') => out.push('/'),
                            _ => return Err(format!("{p:?}: '~' must be followed by 0 or 1")),
                        }
                    } else {
                        out.push(c);
                    }
                }
                Ok(out)
            } else {
                Ok(seg.to_owned())
            }
        })
        .collect()
}

/// The values a pointer's parent segments lead to (with `*` fanning out).
fn parents<'v>(value: &'v mut Value, segments: &[String], out: &mut Vec<&'v mut Value>) {
    match segments.split_first() {
        None => out.push(value),
        Some((seg, rest)) if seg == "*" => match value {
            Value::Object(members) => {
                for (_, v) in members.iter_mut() {
                    parents(v, rest, out);
                }
            }
            Value::Array(items) => {
                for v in items.iter_mut() {
                    parents(v, rest, out);
                }
            }
            _ => {}
        },
        Some((seg, rest)) => match value {
            Value::Object(members) => {
                if let Some(v) = members.get_mut(seg.as_str()) {
                    parents(v, rest, out);
                }
            }
            Value::Array(items) => {
                if let Some(v) = seg.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                    parents(v, rest, out);
                }
            }
            _ => {}
        },
    }
}

fn remove_at(value: &mut Value, segments: &[String]) -> bool {
    let Some((last, init)) = segments.split_last() else {
        return false;
    };
    let mut targets = Vec::new();
    parents(value, init, &mut targets);
    let mut any = false;
    for parent in targets {
        match parent {
            Value::Object(members) if last == "*" => {
                any |= !members.is_empty();
                members.clear();
            }
            Value::Array(items) if last == "*" => {
                any |= !items.is_empty();
                items.clear();
            }
            Value::Object(members) => any |= members.remove(last.as_str()).is_some(),
            Value::Array(items) => {
                if let Some(i) = last.parse::<usize>().ok().filter(|&i| i < items.len()) {
                    items.remove(i);
                    any = true;
                }
            }
            _ => {}
        }
    }
    any
}

fn mask_at(value: &mut Value, segments: &[String]) -> bool {
    let mut targets = Vec::new();
    parents(value, segments, &mut targets);
    let any = !targets.is_empty();
    for v in targets {
        *v = Value::String(MASK.to_owned());
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn redactor(remove: &[&str], mask: &[&str], detectors: &[Detector]) -> Redactor {
        Redactor::new(&RedactSpec {
            remove: remove.iter().map(|s| (*s).to_owned()).collect(),
            mask: mask.iter().map(|s| (*s).to_owned()).collect(),
            detectors: detectors.to_vec(),
        })
        .unwrap()
        .unwrap()
    }

    #[test]
    fn each_detector_replaces_its_kind_in_nested_and_array_values() {
        let r = redactor(&[], &[], &Detector::ALL);
        let mut v = json!({
            "customer": {"contact": "write to ada.l@example.co.uk today", "age": 36},
            "notes": ["call +44 20 7946 0958 after 5", "card 4111 1111 1111 1111 on file"],
            "auth": "Bearer abcdEFGH1234.xyz",
            "key": "sk_live_abcdefghijklmnop",
            "order": "order 1234-5678",
            "not_a_card": "4111 1111 1111 1112",
            "id": "1733025812345",
            "at": "2026-12-01 10:30",
        });
        let applied = r.apply(&mut v);
        assert_eq!(v["customer"]["contact"], "write to [redacted:email] today");
        assert_eq!(v["customer"]["age"], 36);
        assert_eq!(v["notes"][0], "call [redacted:phone] after 5");
        assert_eq!(v["notes"][1], "card [redacted:card] on file");
        assert_eq!(v["auth"], "[redacted:token]");
        assert_eq!(v["key"], "[redacted:token]");
        // Eight digits is neither a phone number nor a card.
        assert_eq!(v["order"], "order 1234-5678");
        // Fails the Luhn check: not a card; 16 digits is too long for a phone number.
        assert_eq!(v["not_a_card"], "4111 1111 1111 1112");
        // A bare digit run (an id, a timestamp) and a date are not phone numbers.
        assert_eq!(v["id"], "1733025812345");
        assert_eq!(v["at"], "2026-12-01 10:30");
        let mut fired = applied.fired.clone();
        fired.sort();
        assert_eq!(fired, ["bearer-token", "card", "email", "phone"]);
    }

    #[test]
    fn pointers_remove_and_mask_with_wildcards_and_escapes() {
        let r = redactor(
            &["/secret", "/items/*/ssn", "/list/1"],
            &["/a~1b", "/items/*/name"],
            &[],
        );
        let mut v = json!({
            "secret": 1, "keep": true, "a/b": {"deep": 2},
            "items": [{"ssn": "x", "name": "Ada", "n": 1}, {"name": "Bob"}],
            "list": [0, 1, 2],
        });
        let applied = r.apply(&mut v);
        assert_eq!(
            v,
            json!({
                "keep": true, "a/b": "[redacted]",
                "items": [{"name": "[redacted]", "n": 1}, {"name": "[redacted]"}],
                "list": [0, 2],
            })
        );
        assert_eq!(applied.fired.len(), 5, "{:?}", applied.fired);
        // Nothing to change: nothing fired.
        let mut plain = json!({"other": 1});
        assert!(r.apply(&mut plain).fired.is_empty());
        assert_eq!(plain, json!({"other": 1}));
    }

    #[test]
    fn bad_rules_are_refused_naming_them() {
        let err = Redactor::new(&RedactSpec {
            mask: vec!["/ok".into(), "no-slash".into()],
            ..RedactSpec::default()
        })
        .unwrap_err();
        assert!(err.starts_with("redact.mask[1]:"), "{err}");
        assert!(Redactor::new(&RedactSpec::default()).unwrap().is_none());
    }

    #[test]
    fn luhn_matches_known_numbers() {
        assert!(luhn(&digits("4111111111111111")));
        assert!(luhn(&digits("5500 0000 0000 0004")));
        assert!(!luhn(&digits("4111111111111112")));
    }
}
