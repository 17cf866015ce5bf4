//! Dead-letter tools: the filter of ReplayDeadLetters / PurgeDeadLetters, and the analysis
//! of AnalyzeDeadLetters, which names the failure patterns operators look for:
//!
//! - **cluster**: many dead letters for one destination within one hour (at least
//!   [`CLUSTER_PER_HOUR`]), most of them after failures an outage gives (no response, a
//!   5xx, a 408): it went down and did not recover within the retry window. A burst of
//!   refusals (401s after one attempt) is not one.
//! - **destination_refused**: most were refused by the destination guard (SSRF) before
//!   any connection: the URL resolves to an address `delivery.allow_destinations` does
//!   not admit.
//! - **credentials**: most last attempts answered 401 or 403: credentials changed.
//! - **rate_limited**: most answered 429: hookd exceeds the endpoint's rate limit.
//! - **client_error**: most answered another 4xx: the endpoint rejects the payload.
//! - **slow_accumulation**: a few a day (at most [`SLOW_PER_DAY`] on average) spread over
//!   at least two days, never more than two in an hour: intermittent failures exhaust the
//!   retries.
//!
//! Pure functions over [`DeadSummary`] rows read from the store: no I/O, no clock.

use std::collections::{BTreeMap, HashMap};

use crate::destination::Destination;
use crate::ids::MessageId;
use crate::scope::TenantId;

/// One dead letter as the dead-letter tools see it (no payload).
#[derive(Debug, Clone, PartialEq)]
pub struct DeadSummary {
    pub id: MessageId,
    /// Its destination's key (`endpoint:NAME`, `queue:NAME`, `url:ORIGIN`).
    pub destination: String,
    /// When it was dead-lettered.
    pub dead_ms: u64,
    pub attempts: u32,
    /// The last attempt's HTTP status (0: none, or no response).
    pub last_status: u32,
    pub last_error: String,
    /// Its place in a FIFO lane, if its destination is ordered.
    pub lane: Option<DeadLane>,
}

/// A dead letter's FIFO lane: the ordering key, its number there, and whether it holds
/// the lane (policy `block`: until replayed or purged).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLane {
    pub key: String,
    pub seq: u64,
    pub blocks: bool,
}

/// Dead letters in one hour of one destination that make a cluster.
pub(crate) const CLUSTER_PER_HOUR: u64 = 10;
/// Average dead letters per day, at most, of a slow accumulation.
pub(crate) const SLOW_PER_DAY: f64 = 5.0;
/// Share of dead letters with a status that makes a status pattern.
pub(crate) const STATUS_SHARE: f64 = 0.5;

const HOUR_MS: u64 = 3_600_000;
const DAY_MS: u64 = 24 * HOUR_MS;

/// Which dead letters; every part set must hold.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this tenant's dead letters (the caller's).
    pub tenant: TenantId,
    pub destination: Option<Destination>,
    /// Dead-lettered at or after...
    pub dead_after_ms: u64,
    /// ...and before (0: unbounded).
    pub dead_before_ms: u64,
    /// The last attempt's status (0: any).
    pub http_status: u32,
    /// Lowercase text the last error contains (empty: any).
    pub error_contains: String,
}

impl Filter {
    pub fn matches(&self, d: &DeadSummary) -> bool {
        Destination::tenant_of_key(&d.destination) == Some(self.tenant)
            && d.dead_ms >= self.dead_after_ms
            && (self.dead_before_ms == 0 || d.dead_ms < self.dead_before_ms)
            && (self.http_status == 0 || d.last_status == self.http_status)
            && (self.error_contains.is_empty()
                || d.last_error.to_lowercase().contains(&self.error_contains))
    }
}

/// A named pattern with what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pub kind: &'static str,
    pub description: String,
    pub suggestion: String,
}

/// One destination's dead letters in the window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Analysis {
    pub destination: String,
    pub count: u64,
    pub most_common_error: String,
    pub most_common_error_count: u64,
    pub most_common_status: u32,
    pub most_common_status_count: u64,
    pub first_ms: u64,
    pub last_ms: u64,
    pub average_attempts: f64,
    pub busiest_hour_count: u64,
    pub patterns: Vec<Pattern>,
}

/// Analyses the dead letters dead-lettered in `[from_ms, to_ms)`, by destination, busiest
/// first.
pub fn analyze(rows: &[DeadSummary], from_ms: u64, to_ms: u64) -> Vec<Analysis> {
    let mut by_dest: BTreeMap<&str, Vec<&DeadSummary>> = BTreeMap::new();
    for d in rows
        .iter()
        .filter(|d| d.dead_ms >= from_ms && d.dead_ms < to_ms)
    {
        by_dest.entry(d.destination.as_str()).or_default().push(d);
    }
    let mut out: Vec<Analysis> = by_dest
        .into_iter()
        .map(|(dest, rows)| analyze_one(dest, &rows))
        .collect();
    out.sort_by(|a, b| {
        b.count
            .cmp(&a.count)
            .then_with(|| a.destination.cmp(&b.destination))
    });
    out
}

fn most_common<K: std::hash::Hash + Eq + Clone + Ord>(
    items: impl Iterator<Item = K>,
) -> Option<(K, u64)> {
    let mut counts: HashMap<K, u64> = HashMap::new();
    for k in items {
        *counts.entry(k).or_default() += 1;
    }
    // Ties go to the smallest key, so the answer does not depend on hash order.
    counts
        .into_iter()
        .max_by(|(ka, a), (kb, b)| a.cmp(b).then_with(|| kb.cmp(ka)))
}

fn analyze_one(destination: &str, rows: &[&DeadSummary]) -> Analysis {
    let count = rows.len() as u64;
    let first_ms = rows.iter().map(|d| d.dead_ms).min().unwrap_or(0);
    let last_ms = rows.iter().map(|d| d.dead_ms).max().unwrap_or(0);
    let (most_common_error, most_common_error_count) =
        most_common(rows.iter().map(|d| error_class(&d.last_error))).unwrap_or_default();
    let (most_common_status, most_common_status_count) =
        most_common(rows.iter().map(|d| d.last_status)).unwrap_or_default();
    let average_attempts = if count == 0 {
        0.0
    } else {
        rows.iter().map(|d| f64::from(d.attempts)).sum::<f64>() / count as f64
    };
    let busiest_hour_count =
        most_common(rows.iter().map(|d| d.dead_ms / HOUR_MS)).map_or(0, |(_, n)| n);
    let mut a = Analysis {
        destination: destination.to_owned(),
        count,
        most_common_error,
        most_common_error_count,
        most_common_status,
        most_common_status_count,
        first_ms,
        last_ms,
        average_attempts,
        busiest_hour_count,
        patterns: Vec::new(),
    };
    a.patterns = patterns(&a, rows);
    a
}

/// The error text without what varies from one message to the next (the response body
/// excerpt after the status), so equal causes count together.
fn error_class(error: &str) -> String {
    let first = error.lines().next().unwrap_or("");
    let cut = match first.find(": ") {
        Some(at) if first.starts_with("HTTP ") => &first[..at],
        _ => first,
    };
    cut.chars().take(200).collect()
}

fn patterns(a: &Analysis, rows: &[&DeadSummary]) -> Vec<Pattern> {
    let mut out = Vec::new();
    let share = |pred: &dyn Fn(u32) -> bool| {
        rows.iter().filter(|d| pred(d.last_status)).count() as f64 / rows.len().max(1) as f64
    };
    let guard = crate::destination::REFUSED_ADDRESS;
    let refused = rows.iter().filter(|d| d.last_error.contains(guard)).count() as f64
        / rows.len().max(1) as f64;
    if refused >= STATUS_SHARE {
        out.push(Pattern {
            kind: "destination_refused",
            description: format!(
                "{:.0} % were refused by the destination guard before any connection: the URL resolves to a loopback, private or otherwise non-public address",
                refused * 100.0
            ),
            suggestion: "if the receiver really is on that network, admit it with delivery.allow_destinations (or --allow-destination CIDR[:PORT]) and replay; otherwise fix the URL (or its DNS) and replay, or purge".into(),
        });
        // Nothing else about these is worth saying: no request was ever sent.
        return out;
    }
    // An outage answers with nothing, a 5xx or a 408; a 401 is an answer, not an outage.
    let outage = share(&|s| s == 0 || s >= 500 || s == 408);
    if a.busiest_hour_count >= CLUSTER_PER_HOUR && outage >= STATUS_SHARE {
        out.push(Pattern {
            kind: "cluster",
            description: format!(
                "{} dead letters within one hour: the destination went down and did not recover within the retry window",
                a.busiest_hour_count
            ),
            suggestion: "fix or wait for the endpoint, then replay these dead letters (paced); if outages outlast the retries, raise max_attempts or retry_cap_ms".into(),
        });
    }
    let credentials = share(&|s| s == 401 || s == 403);
    if credentials >= STATUS_SHARE {
        out.push(Pattern {
            kind: "credentials",
            description: format!(
                "{:.0} % answered 401/403: the endpoint's credentials or signing secret changed",
                credentials * 100.0
            ),
            suggestion:
                "update the endpoint's secrets (PutEndpoint) or the receiver's key, then replay"
                    .into(),
        });
    }
    let limited = share(&|s| s == 429);
    if limited >= STATUS_SHARE {
        out.push(Pattern {
            kind: "rate_limited",
            description: format!(
                "{:.0} % answered 429: hookd exceeds the endpoint's rate limit",
                limited * 100.0
            ),
            suggestion: "set the endpoint's rate_limit_per_s below the receiver's limit, then replay with a pace".into(),
        });
    }
    let client = share(&|s| (400..500).contains(&s) && !matches!(s, 401 | 403 | 408 | 429));
    if client >= STATUS_SHARE {
        out.push(Pattern {
            kind: "client_error",
            description: format!(
                "{:.0} % were refused with a 4xx: the endpoint rejects these payloads",
                client * 100.0
            ),
            suggestion: "check the payloads against what the receiver expects; replay once it accepts them, or purge".into(),
        });
    }
    let span_days = (a.last_ms - a.first_ms) as f64 / DAY_MS as f64;
    if a.count >= 3 && span_days >= 2.0 {
        let per_day = a.count as f64 / span_days.ceil();
        if per_day <= SLOW_PER_DAY && a.busiest_hour_count <= 2 {
            out.push(Pattern {
                kind: "slow_accumulation",
                description: format!(
                    "about {per_day:.1} a day over {span_days:.0} days, evenly spread: intermittent failures exhaust the retries"
                ),
                suggestion: "raise max_attempts or lower the endpoint's timeout_ms, then replay".into(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::MessageId;

    const T0: u64 = 1_800_000_000_000;

    fn dead(dest: &str, at: u64, status: u32, error: &str) -> DeadSummary {
        DeadSummary {
            lane: None,
            id: MessageId(u128::from(at)),
            destination: dest.into(),
            dead_ms: at,
            attempts: 5,
            last_status: status,
            last_error: error.into(),
        }
    }

    fn kinds(a: &Analysis) -> Vec<&'static str> {
        a.patterns.iter().map(|p| p.kind).collect()
    }

    #[test]
    fn a_burst_in_one_hour_is_a_cluster() {
        let rows: Vec<_> = (0..12)
            .map(|i| dead("endpoint:a", T0 + i * 60_000, 503, "HTTP 503: down"))
            .collect();
        let out = analyze(&rows, T0, T0 + DAY_MS);
        assert_eq!(out.len(), 1);
        let a = &out[0];
        assert_eq!(a.count, 12);
        assert_eq!(a.busiest_hour_count, 12);
        assert_eq!(a.most_common_status, 503);
        assert_eq!(a.most_common_error, "HTTP 503");
        assert_eq!(a.first_ms, T0);
        assert_eq!(a.last_ms, T0 + 11 * 60_000);
        assert_eq!(a.average_attempts, 5.0);
        assert_eq!(kinds(a), ["cluster"]);
    }

    #[test]
    fn nine_in_an_hour_is_not_a_cluster() {
        let rows: Vec<_> = (0..9)
            .map(|i| dead("endpoint:a", T0 + i * 60_000, 503, "HTTP 503: down"))
            .collect();
        assert!(analyze(&rows, T0, T0 + DAY_MS)[0].patterns.is_empty());
    }

    #[test]
    fn status_patterns_name_credentials_rate_limits_and_rejections() {
        let spread = |dest: &str, statuses: &[u32]| -> Vec<DeadSummary> {
            statuses
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    dead(
                        dest,
                        T0 + i as u64 * 2 * HOUR_MS,
                        *s,
                        &format!("HTTP {s}: x"),
                    )
                })
                .collect()
        };
        let mut rows = spread("endpoint:auth", &[401, 403, 401, 500]);
        rows.extend(spread("endpoint:limit", &[429, 429, 503]));
        rows.extend(spread("endpoint:schema", &[400, 422, 400]));
        rows.extend(spread("endpoint:mixed", &[401, 429, 500, 502]));
        let out = analyze(&rows, T0, T0 + DAY_MS);
        let by: HashMap<_, _> = out.iter().map(|a| (a.destination.as_str(), a)).collect();
        assert_eq!(kinds(by["endpoint:auth"]), ["credentials"]);
        assert_eq!(kinds(by["endpoint:limit"]), ["rate_limited"]);
        assert_eq!(kinds(by["endpoint:schema"]), ["client_error"]);
        assert!(by["endpoint:mixed"].patterns.is_empty());
        // Busiest destination first.
        assert_eq!(out[0].destination, "endpoint:auth");
    }

    #[test]
    fn a_few_a_day_over_days_is_slow_accumulation() {
        // 2 or 3 a day for 5 days, hours apart.
        let rows: Vec<_> = (0..12u64)
            .map(|i| {
                dead(
                    "endpoint:slow",
                    T0 + i * 10 * HOUR_MS,
                    0,
                    "timeout after 15 s",
                )
            })
            .collect();
        let out = analyze(&rows, T0, T0 + 7 * DAY_MS);
        assert_eq!(kinds(&out[0]), ["slow_accumulation"]);
        assert_eq!(out[0].most_common_error, "timeout after 15 s");
        // The same count within a day is not slow.
        let rows: Vec<_> = (0..12u64)
            .map(|i| dead("endpoint:fast", T0 + i * HOUR_MS, 0, "timeout"))
            .collect();
        assert!(analyze(&rows, T0, T0 + 7 * DAY_MS)[0].patterns.is_empty());
    }

    #[test]
    fn only_the_window_counts() {
        let rows = vec![
            dead("queue:q", T0 - 1, 0, "nacked"),
            dead("queue:q", T0, 0, "nacked"),
            dead("queue:q", T0 + DAY_MS, 0, "nacked"),
        ];
        let out = analyze(&rows, T0, T0 + DAY_MS);
        assert_eq!(out[0].count, 1);
    }

    #[test]
    fn the_filter_checks_every_part_it_has() {
        let d = dead("endpoint:a", T0, 503, "HTTP 503: Service Unavailable");
        assert!(Filter::default().matches(&d));
        let f = |f: Filter| f.matches(&d);
        assert!(f(Filter {
            dead_after_ms: T0,
            ..Default::default()
        }));
        assert!(!f(Filter {
            dead_after_ms: T0 + 1,
            ..Default::default()
        }));
        assert!(!f(Filter {
            dead_before_ms: T0,
            ..Default::default()
        }));
        assert!(f(Filter {
            dead_before_ms: T0 + 1,
            ..Default::default()
        }));
        assert!(f(Filter {
            http_status: 503,
            ..Default::default()
        }));
        assert!(!f(Filter {
            http_status: 500,
            ..Default::default()
        }));
        assert!(f(Filter {
            error_contains: "unavailable".into(),
            ..Default::default()
        }));
        assert!(!f(Filter {
            error_contains: "timeout".into(),
            ..Default::default()
        }));
    }

    /// Issue #26, 16: a burst of 401s after one attempt each is a credentials problem, not
    /// an outage; SSRF refusals get advice of their own.
    #[test]
    fn permanent_refusals_in_one_hour_are_not_an_outage_and_ssrf_refusals_are_named() {
        let rows: Vec<_> = (0..12)
            .map(|i| DeadSummary {
                lane: None,
                attempts: 1,
                ..dead("endpoint:a", T0 + i * 60_000, 401, "HTTP 401: bad token")
            })
            .collect();
        let a = &analyze(&rows, T0, T0 + DAY_MS)[0];
        assert_eq!(kinds(a), ["credentials"]);
        let refused = crate::destination::REFUSED_ADDRESS.to_owned();
        let rows: Vec<_> = (0..12)
            .map(|i| DeadSummary {
                lane: None,
                attempts: 1,
                ..dead("url:http://10.0.0.1", T0 + i * 60_000, 0, &refused)
            })
            .collect();
        let a = &analyze(&rows, T0, T0 + DAY_MS)[0];
        assert_eq!(kinds(a), ["destination_refused"]);
        assert!(
            a.patterns[0].suggestion.contains("allow_destinations"),
            "{:?}",
            a.patterns
        );
    }
}
