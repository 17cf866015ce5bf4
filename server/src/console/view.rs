//! The console's page frame and the formatting every page shares. maud escapes every
//! interpolated value; nothing here builds HTML from strings.

use std::time::{Duration, UNIX_EPOCH};

use maud::{DOCTYPE, Markup, html};

use super::session::Session;

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Overview,
    Endpoints,
    Destinations,
    Messages,
    DeadLetters,
    Replays,
    Sources,
    EventTypes,
    Subscriptions,
    Tenants,
    None,
}

/// A whole page: head, navigation (with the caller and a logout form), a notice, the body.
pub(super) fn page(
    title: &str,
    nav: Nav,
    session: Option<&Session>,
    notice: &str,
    body: Markup,
) -> Markup {
    let item = |target: Nav, href: &str, label: &str| {
        html! { a href=(href) .current[nav == target] { (label) } }
    };
    if let Some(portal) = session.and_then(|s| s.portal.as_ref().map(|p| (s, p))) {
        return portal_page(title, nav, portal, notice, body);
    }
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · hookd" }
                link rel="stylesheet" href="/ui/assets/console.css";
            }
            body {
                header {
                    span.brand { "hookd" }
                    nav {
                        (item(Nav::Overview, "/ui", "Overview"))
                        (item(Nav::Endpoints, "/ui/endpoints", "Endpoints"))
                        (item(Nav::Destinations, "/ui/destinations", "Destinations"))
                        (item(Nav::Messages, "/ui/messages", "Messages"))
                        (item(Nav::DeadLetters, "/ui/dead-letters", "Dead letters"))
                        (item(Nav::Replays, "/ui/replays", "Replays"))
                        (item(Nav::Sources, "/ui/sources", "Sources"))
                        (item(Nav::EventTypes, "/ui/event-types", "Event types"))
                        (item(Nav::Subscriptions, "/ui/subscriptions", "Subscriptions"))
                        (item(Nav::Tenants, "/ui/tenants", "Tenants"))
                    }
                    @if let Some(s) = session {
                        form.tenant method="post" action="/ui/tenant" {
                            (csrf(s))
                            input type="text" name="tenant" value=(s.viewed().name) size="12"
                                aria-label="tenant" title="the tenant these pages show and act on";
                            button type="submit" { "Switch tenant" }
                        }
                    }
                    form.find method="get" action="/ui/find" role="search" {
                        input type="search" name="id" placeholder="message id or idempotency key" aria-label="message id or idempotency key";
                        button type="submit" { "Find" }
                    }
                    @if let Some(s) = session {
                        @if s.signed_in {
                            form.logout method="post" action="/ui/logout" {
                                (csrf(s))
                                span.caller { (s.caller.name) }
                                button type="submit" { "Log out" }
                            }
                        } @else {
                            span.caller title="no [auth] is configured: the console answers to loopback only" {
                                "no login (loopback)"
                            }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    @if !notice.is_empty() {
                        p.notice role="status" { (notice) }
                    }
                    (body)
                }
            }
        }
    }
}

/// A portal page (issue #52): the tenant's heading, logo and colours, its pages only, and
/// who the link is for and until when; no tenant switch, no logout (the link is the
/// session).
fn portal_page(
    title: &str,
    nav: Nav,
    (s, portal): (&Session, &std::sync::Arc<super::session::PortalView>),
    notice: &str,
    body: Markup,
) -> Markup {
    let item = |target: Nav, href: &str, label: &str| {
        html! { a href=(href) .current[nav == target] { (label) } }
    };
    let limited = s.caller.limited();
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · " (portal.title) }
                link rel="stylesheet" href="/ui/assets/console.css";
                link rel="stylesheet" href="/ui/assets/theme.css";
            }
            body.portal {
                header {
                    @if !portal.logo_url.is_empty() {
                        img.logo src=(portal.logo_url) alt="" height="28";
                    }
                    span.brand { (portal.title) }
                    nav {
                        (item(Nav::Overview, "/ui", "Overview"))
                        (item(Nav::Endpoints, "/ui/endpoints", "Endpoints"))
                        @if !limited {
                            (item(Nav::Subscriptions, "/ui/subscriptions", "Subscriptions"))
                        }
                        (item(Nav::EventTypes, "/ui/event-types", "Event types"))
                        (item(Nav::Messages, "/ui/messages", "Messages"))
                        (item(Nav::Replays, "/ui/replays", "Replays"))
                        @if !limited {
                            (item(Nav::DeadLetters, "/ui/dead-letters", "Dead letters"))
                        }
                    }
                    form.find method="get" action="/ui/find" role="search" {
                        input type="search" name="id" placeholder="message id or idempotency key" aria-label="message id or idempotency key";
                        button type="submit" { "Find" }
                    }
                    span.caller title=(format!("link {}", portal.link.id)) {
                        @if !portal.link.subject.is_empty() { (portal.link.subject) " · " }
                        @if s.caller.may(crate::auth::Scope::Admin) { "can change" } @else { "view only" }
                        " · until " (time(portal.link.expires_ms))
                    }
                }
                main {
                    h1 { (title) }
                    @if !notice.is_empty() {
                        p.notice role="status" { (notice) }
                    }
                    (body)
                }
            }
        }
    }
}

/// The hidden field every state-changing form carries.
pub(super) fn csrf(s: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(s.csrf); }
}

/// A one-button POST form (pause, resume, replay one...).
pub(super) fn button(s: &Session, action: &str, label: &str, fields: &[(&str, &str)]) -> Markup {
    if !s.may_change() {
        return html! {};
    }
    html! {
        form.inline method="post" action=(action) {
            (csrf(s))
            @for (name, value) in fields {
                input type="hidden" name=(name) value=(value);
            }
            button type="submit" { (label) }
        }
    }
}

/// A labelled figure for the overview's cards.
/// A success rate as a badge coloured by the alert thresholds (`[alerts]`
/// success_rate_warning / success_rate_critical): green at or above the warning level,
/// amber below it, red below the critical level; uncoloured with fewer attempts than
/// success_rate_min_attempts (too few to judge), and `-` with none.
pub(super) fn success(rate: f64, attempts: u64, t: &hookd_core::alerts::AlertConfig) -> Markup {
    if attempts == 0 {
        return html! { "-" };
    }
    let class = if attempts < t.success_rate_min_attempts {
        "badge"
    } else if rate < t.success_rate_critical {
        "badge bad"
    } else if rate < t.success_rate_warning {
        "badge warn"
    } else {
        "badge good"
    };
    html! {
        span class=(class) title=(format!(
            "{attempts} attempts; amber below {}, red below {} (from {} attempts)",
            percent(t.success_rate_warning),
            percent(t.success_rate_critical),
            t.success_rate_min_attempts
        )) { (percent(rate)) }
    }
}

pub(super) fn figure(label: &str, value: impl maud::Render) -> Markup {
    html! { div.figure { span.value { (value) } span.label { (label) } } }
}

/// Unix milliseconds as an HTTP date (UTC), or `-` for 0.
pub(super) fn time(unix_ms: u64) -> String {
    if unix_ms == 0 {
        return "-".into();
    }
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_millis(unix_ms))
}

/// A duration in the largest units that keep it short: `850 ms`, `12.5 s`, `3 min 20 s`,
/// `5 h 2 min`, `2 d 3 h`.
pub(super) fn duration(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1_000.0),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1_000),
        3_600_000..86_400_000 => format!("{} h {} min", ms / 3_600_000, ms % 3_600_000 / 60_000),
        _ => format!("{} d {} h", ms / 86_400_000, ms % 86_400_000 / 3_600_000),
    }
}

/// Milliseconds with a precision that suits their size.
pub(super) fn millis(ms: f64) -> String {
    if ms <= 0.0 {
        "-".into()
    } else if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1_000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.2} s", ms / 1_000.0)
    }
}

pub(super) fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

pub(super) fn rate(per_s: f64) -> String {
    if per_s >= 100.0 {
        format!("{per_s:.0}/s")
    } else {
        format!("{per_s:.1}/s")
    }
}

pub(super) fn percent(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// An alert's value (or threshold) in its unit, by the alert's name (`hookd stats --json`
/// shows the bare numbers).
pub(super) fn alert_value(alert: &str, v: f64) -> String {
    let ms = |ms: f64| duration(ms.max(0.0).round() as u64);
    match alert {
        "success_rate" => percent(v),
        "consumer_rate" => format!("{} of enqueues completed", percent(v)),
        "queue_depth" => format!("{v:.0} live messages"),
        "dead_letters" => format!("{v:.0} dead letters"),
        "dead_letter_growth" => format!("{v:.0} new in 15 min"),
        "delivery_latency" | "attempt_p95" => ms(v),
        "oldest_pending" => ms(v * 1_000.0),
        _ => format!("{v:.3}"),
    }
}

/// At most `max` characters of `s`, with an ellipsis when cut.
pub(super) fn excerpt(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

/// A searched message's state, as the pages name it.
pub(super) fn state_label(state: hookd_storage::store::search::SearchState) -> &'static str {
    use hookd_storage::store::search::SearchState;
    match state {
        SearchState::Pending => "pending",
        SearchState::Retrying => "awaiting retry",
        SearchState::InFlight => "in flight",
        SearchState::Dead => "dead letter",
        SearchState::Delivered => "delivered",
        SearchState::Expired => "delivered, payload expired",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_well() {
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_500), "12.5 s");
        assert_eq!(duration(200_000), "3 min 20 s");
        assert_eq!(duration(5 * 3_600_000 + 120_000), "5 h 2 min");
        assert_eq!(duration(2 * 86_400_000 + 3 * 3_600_000), "2 d 3 h");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(millis(0.0), "-");
        assert_eq!(millis(2.345), "2.35 ms");
        assert_eq!(millis(1_500.0), "1.50 s");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
        assert_eq!(time(0), "-");
        assert_eq!(time(1_000), "Thu, 01 Jan 1970 00:00:01 GMT");
        assert_eq!(alert_value("success_rate", 0.95), "95.0%");
        assert_eq!(alert_value("delivery_latency", 2_000.0), "2.0 s");
        assert_eq!(alert_value("attempt_p95", 850.0), "850 ms");
        assert_eq!(alert_value("oldest_pending", 1_800.0), "30 min 0 s");
        assert_eq!(alert_value("queue_depth", 5_000.0), "5000 live messages");
        assert_eq!(alert_value("dead_letter_growth", 1.0), "1 new in 15 min");
    }
}
