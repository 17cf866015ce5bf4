//! Charts drawn on the server as SVG: no script, nothing fetched.
//!
//! Every figure goes through maud's escaping or is a number hookd formatted itself.

use maud::{Markup, html};

use hookd_core::stats::LatencySummary;

const W: f64 = 360.0;
const H: f64 = 140.0;
/// Room for the y labels on the left and the x labels below.
const LEFT: f64 = 48.0;
const BOTTOM: f64 = 20.0;
const TOP: f64 = 8.0;

/// The three lines drawn: name, colour, and the figure each draws.
type Line = (&'static str, &'static str, fn(&LatencySummary) -> f64);
const LINES: [Line; 3] = [
    ("p50", "#2b6cb0", |s| s.p50_ms),
    ("p95", "#d69e2e", |s| s.p95_ms),
    ("p99", "#c53030", |s| s.p99_ms),
];

/// p50, p95 and p99 of each sub-window against time. A window with no attempts is a gap:
/// no line is drawn across it (a lone point between gaps is a dot).
pub(super) fn latency(series: &[(u64, LatencySummary)], title: &str, step_label: &str) -> Markup {
    let top = nice_ceiling(series.iter().map(|(_, s)| s.p99_ms).fold(0.0_f64, f64::max));
    let n = series.len().max(1);
    let x = |i: usize| LEFT + (W - LEFT - 4.0) * (i as f64 + 0.5) / n as f64;
    let y = |v: f64| y_at(v, top);
    let runs = runs(series);
    html! {
        figure.chart {
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {W} {H}"))
                width=(W) height=(H) role="img" aria-label=(title) {
                title { (title) }
                (frame(top, ms_label, &format!("-{} {step_label}", series.len())))
                @if runs.is_empty() {
                    text x=((LEFT + W) / 2.0) y=(H / 2.0) text-anchor="middle" font-size="12"
                        fill="#777" { "no attempts in this window" }
                }
                @for (_, colour, figure) in LINES {
                    @for run in &runs {
                        @if run.len() == 1 {
                            circle cx=(fmt(x(run[0]))) cy=(fmt(y(figure(&series[run[0]].1))))
                                r="2.5" fill=(colour) {}
                        } @else {
                            polyline fill="none" stroke=(colour) stroke-width="1.5"
                                points=(run.iter().map(|&i| format!("{},{}", fmt(x(i)), fmt(y(figure(&series[i].1))))).collect::<Vec<_>>().join(" ")) {}
                        }
                    }
                }
            }
            figcaption {
                (title) ": "
                @for (name, colour, _) in LINES {
                    span.key {
                        svg width="10" height="10" { rect width="10" height="10" fill=(colour) {} }
                        " " (name)
                    }
                }
            }
        }
    }
}

/// Delivered and dead-lettered messages in each step (a minute), oldest first: a bar per
/// step, dead letters stacked on top in red. The key is in the caption, off the data.
pub(super) fn throughput(delivered: &[u64], failed: &[u64], title: &str) -> Markup {
    let n = delivered.len().max(failed.len()).max(1);
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    let most = (0..n)
        .map(|i| at(delivered, i) + at(failed, i))
        .max()
        .unwrap_or(0);
    let top = nice_ceiling(most as f64).max(1.0);
    let step = (W - LEFT - 4.0) / n as f64;
    let y = |v: f64| y_at(v, top);
    let (good, bad) = ("#2b6cb0", "#c53030");
    html! {
        figure.chart {
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {W} {H}"))
                width=(W) height=(H) role="img" aria-label=(title) {
                title { (title) }
                (frame(top, |v| format!("{v:.0}"), &format!("-{n} min")))
                @if most == 0 {
                    text x=((LEFT + W) / 2.0) y=(H / 2.0) text-anchor="middle" font-size="12"
                        fill="#777" { "nothing completed in this window" }
                }
                @for i in 0..n {
                    @let (d, f) = (at(delivered, i) as f64, at(failed, i) as f64);
                    @let x = fmt(LEFT + step * i as f64 + step * 0.1);
                    @let width = fmt(step * 0.8);
                    @if d > 0.0 {
                        rect x=(x) y=(fmt(y(d))) width=(width) height=(fmt(y(0.0) - y(d))) fill=(good) {
                            title { (format!("{} delivered", d)) }
                        }
                    }
                    @if f > 0.0 {
                        rect x=(x) y=(fmt(y(d + f))) width=(width) height=(fmt(y(d) - y(d + f))) fill=(bad) {
                            title { (format!("{} dead-lettered", f)) }
                        }
                    }
                }
            }
            figcaption {
                (title) ": "
                @for (name, colour) in [("delivered", good), ("dead-lettered", bad)] {
                    span.key {
                        svg width="10" height="10" { rect width="10" height="10" fill=(colour) {} }
                        " " (name)
                    }
                }
            }
        }
    }
}

/// Where value `v` lies on a chart whose y scale ends at `top`.
fn y_at(v: f64, top: f64) -> f64 {
    TOP + (H - TOP - BOTTOM) * (1.0 - (v / top).min(1.0))
}

/// What every chart over time draws first: the axes, the y scale at 0, half and `top`
/// (each labelled by `label`, with a grid line), and the x axis from `since` to "now".
fn frame(top: f64, label: impl Fn(f64) -> String, since: &str) -> Markup {
    html! {
        line x1=(LEFT) y1=(TOP) x2=(LEFT) y2=(H - BOTTOM) stroke="#999" {}
        line x1=(LEFT) y1=(H - BOTTOM) x2=(W - 4.0) y2=(H - BOTTOM) stroke="#999" {}
        @for frac in [0.0, 0.5, 1.0] {
            text x=(LEFT - 4.0) y=(y_at(top * frac, top) + 4.0) text-anchor="end" font-size="10" {
                (label(top * frac))
            }
            @if frac > 0.0 {
                line x1=(LEFT) y1=(y_at(top * frac, top)) x2=(W - 4.0) y2=(y_at(top * frac, top))
                    stroke="#e2e2e2" {}
            }
        }
        text x=(LEFT) y=(H - 6.0) font-size="10" { (since) }
        text x=(W - 4.0) y=(H - 6.0) font-size="10" text-anchor="end" { "now" }
    }
}

/// Horizontal bars, longest first as given: (label, value). For the overview's depths.
pub(crate) fn bars(items: &[(String, u64)], title: &str) -> Markup {
    let max = items.iter().map(|(_, v)| *v).max().unwrap_or(0).max(1);
    let row = 18.0;
    let label_w = 190.0;
    let height = row * items.len().max(1) as f64 + 4.0;
    let bar_w = W + 140.0 - label_w - 60.0;
    html! {
        figure.chart {
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {} {height}", W + 140.0))
                width=(W + 140.0) height=(height) role="img" aria-label=(title) {
                title { (title) }
                @if items.is_empty() {
                    text x="4" y="14" font-size="12" fill="#777" { "nothing is waiting" }
                }
                @for (i, (label, value)) in items.iter().enumerate() {
                    @let top = 2.0 + row * i as f64;
                    text x=(label_w - 6.0) y=(top + 12.0) font-size="11" text-anchor="end" {
                        (shorten(label, 30))
                    }
                    rect x=(label_w) y=(top + 2.0) height=(row - 5.0)
                        width=(fmt((bar_w * *value as f64 / max as f64).max(1.0))) fill="#2b6cb0" {}
                    text x=(fmt(label_w + 4.0 + bar_w * *value as f64 / max as f64)) y=(top + 12.0)
                        font-size="11" { (value) }
                }
            }
            figcaption { (title) }
        }
    }
}

/// Index runs of consecutive windows that had attempts.
fn runs(series: &[(u64, LatencySummary)]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut current = Vec::new();
    for (i, (_, s)) in series.iter().enumerate() {
        if s.count > 0 {
            current.push(i);
        } else if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The smallest 1, 2 or 5 times a power of ten at or above `v` (1 ms at least).
fn nice_ceiling(v: f64) -> f64 {
    if !(v.is_finite() && v > 1.0) {
        return 1.0;
    }
    let power = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * power)
}

fn ms_label(ms: f64) -> String {
    if ms >= 1_000.0 {
        format!("{} s", fmt(ms / 1_000.0))
    } else {
        format!("{} ms", fmt(ms))
    }
}

/// A coordinate or a label with at most one decimal.
fn fmt(v: f64) -> String {
    let r = (v * 10.0).round() / 10.0;
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max - 1).collect();
        out.push('…');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(p50: f64, count: u64) -> LatencySummary {
        LatencySummary {
            count,
            p50_ms: p50,
            p95_ms: p50 * 2.0,
            p99_ms: p50 * 3.0,
            ..Default::default()
        }
    }

    #[test]
    fn gaps_break_the_lines() {
        let series: Vec<_> = [
            (10.0, 3),
            (0.0, 0),
            (12.0, 1),
            (14.0, 2),
            (0.0, 0),
            (9.0, 1),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, (p, c))| (i as u64 * 300_000, point(p, c)))
        .collect();
        assert_eq!(runs(&series), vec![vec![0], vec![2, 3], vec![5]]);
        let svg = latency(&series, "attempt latency", "x 5 min").into_string();
        // One polyline per line for the run of two; dots for the lone points.
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert_eq!(svg.matches("<circle").count(), 6);
        assert!(
            svg.contains("50 ms"),
            "the scale tops at 50 ms for a p99 of 42: {svg}"
        );
        assert!(!svg.contains("no attempts"));
    }

    #[test]
    fn an_empty_window_says_so() {
        let series: Vec<_> = (0..12).map(|i| (i * 300_000, point(0.0, 0))).collect();
        let svg = latency(&series, "t", "x 5 min").into_string();
        assert!(svg.contains("no attempts in this window"));
        assert_eq!(svg.matches("<polyline").count(), 0);
    }

    #[test]
    fn the_scale_is_round() {
        assert_eq!(nice_ceiling(0.3), 1.0);
        assert_eq!(nice_ceiling(42.0), 50.0);
        assert_eq!(nice_ceiling(120.0), 200.0);
        assert_eq!(nice_ceiling(1_000.0), 1_000.0);
        assert_eq!(nice_ceiling(f64::NAN), 1.0);
        assert_eq!(ms_label(2_000.0), "2 s");
        assert_eq!(ms_label(12.25), "12.3 ms");
    }

    #[test]
    fn labels_are_escaped() {
        let svg = bars(&[("<script>x</script>".into(), 3)], "depth").into_string();
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;"));
    }
}
