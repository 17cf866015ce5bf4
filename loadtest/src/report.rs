//! The report: JSON for machines, a table for the terminal, SVG plots.

use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::Histogram;
use plotters::prelude::*;
use serde::Serialize;

use crate::capacity::Outcome;
use crate::checker::Verdict;
use crate::drive::QueueCounts;
use crate::sim::GroupCounts;
use crate::tally::Second;

/// Percentiles of one latency, in ms.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub p9999: f64,
    pub max: f64,
    /// (percentile, ms) pairs for the percentile plot.
    #[serde(skip)]
    pub curve: Vec<(f64, f64)>,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Self {
        let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        let curve = h
            .iter_quantiles(2)
            .map(|v| {
                (
                    v.quantile_iterated_to() * 100.0,
                    v.value_iterated_to() as f64 / 1e3,
                )
            })
            .filter(|(q, _)| *q < 100.0)
            .collect();
        Self {
            count: h.len(),
            p50: ms(0.5),
            p90: ms(0.9),
            p99: ms(0.99),
            p999: ms(0.999),
            p9999: ms(0.9999),
            max: h.max() as f64 / 1e3,
            curve,
        }
    }
}

/// What hookd itself reported at the end of the run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct HookdFigures {
    /// Push attempts over the run (hookd's stats cover the last hour).
    pub push_attempts: u64,
    /// Push attempts beyond the first per event.
    pub retries: u64,
    pub dead_letters: u64,
    pub breaker_openings: u64,
    pub cpu_avg_pct: Option<f64>,
    pub cpu_max_pct: Option<f64>,
    pub rss_max_mb: Option<f64>,
    pub commits_per_s: f64,
    pub requests_per_commit: f64,
    /// Events hookd refused before storing them, by reason (hard watermarks, the disk
    /// reserve, the write queue), from its /metrics (when the tool started hookd).
    pub refused: std::collections::BTreeMap<String, u64>,
    /// Events hookd took with a throttle hint (above a soft watermark).
    pub throttle_hints: u64,
    /// `[agent]` runs: the most live messages hookd held at once (sampled every 500 ms),
    /// and the highest watermark level it reached (ok, soft, hard).
    pub peak_live_messages: Option<u64>,
    pub peak_level: Option<String>,
}

/// `[agent]` runs: what the agents' Emitters did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AgentFigures {
    pub agents: usize,
    /// Events `emit` took (each must reach hookd).
    pub taken: u64,
    /// Acknowledged by hookd.
    pub sent: u64,
    /// Events taken while the Emitter said `slow_down` (buffer above `slow_down_at`, or
    /// hookd's hint); emit never waits.
    pub pressured: u64,
    /// `emit` calls refused: the buffer was full.
    pub refused: u64,
    /// Calls the Emitters retried (hookd unavailable or at a watermark).
    pub retries: u64,
    pub duplicates: u64,
    /// Refused by hookd for good.
    pub failed: u64,
    /// Events still buffered when the drain ended.
    pub left: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub description: String,
    pub target: String,
    pub traffic: String,
    pub duration_s: f64,
    pub drain_s: f64,
    pub verdict: Verdict,
    /// The SLO limits the run broke (`[slo]`, and groups' `end_to_end_p99_ms`).
    pub slo_broken: Vec<String>,
    /// The checker passed and no SLO limit was broken.
    pub passed: bool,
    /// Acknowledged events per second over the traffic phase.
    pub acked_per_s: f64,
    /// First deliveries per second over the traffic phase.
    pub delivered_per_s: f64,
    /// Enqueue latency from the intended send time (coordinated-omission corrected).
    pub enqueue_latency_ms: Percentiles,
    /// Enqueue latency from the actual send (what a closed loop would report).
    pub enqueue_service_ms: Percentiles,
    /// Intended send time to delivery (2xx answered or Ack accepted).
    pub end_to_end_ms: Percentiles,
    pub hookd: HookdFigures,
    pub endpoints: Vec<GroupCounts>,
    pub queues: Vec<QueueCounts>,
    pub timeline: Vec<Second>,
    pub capacity: Option<Outcome>,
    /// `[ingest]` runs: what the provider side saw.
    pub ingest: Option<crate::inbound::InboundCounts>,
    /// `[agent]` runs: what the agents' Emitters did.
    pub agents: Option<AgentFigures>,
    /// The box beside hookd (CPU, load, this tool, the fsync probe) and what limited the run.
    pub host: crate::host::HostFigures,
    /// The scenario's SLO limits, drawn on the latency plots.
    pub slo_enqueue_p99_ms: Option<f64>,
    pub slo_end_to_end_p99_ms: Option<f64>,
}

impl Report {
    /// The table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let v = &self.verdict;
        let _ = writeln!(s, "\n== {} ({}) ==", self.scenario, self.target);
        let _ = writeln!(s, "traffic   {}", self.traffic);
        let _ = writeln!(
            s,
            "events    sent {}  acked {}  rejected {}  indeterminate {}",
            v.sent, v.acked, v.rejected, v.indeterminate
        );
        let _ = writeln!(
            s,
            "checker   delivered {}  lost {}  unexpected {}  duplicated {}  dead-lettered {}  undelivered {}  recovered {}  {}",
            v.delivered,
            v.lost,
            v.unexpected,
            v.duplicated,
            v.dead_lettered,
            v.undelivered,
            v.recovered,
            if v.passed() { "PASS" } else { "FAIL" }
        );
        for (reason, n) in &v.dead_letter_reasons {
            let _ = writeln!(s, "          dead letter: {n} x {reason}");
        }
        if let Some(o) = &v.order {
            let _ = writeln!(
                s,
                "order     {} lanes (receiver, key)  out of order {}  gaps {} (dead letters {})  repeats {}",
                o.lanes, o.out_of_order, o.gaps, v.dead_lettered, o.repeats
            );
            for e in &o.samples {
                let _ = writeln!(s, "          {e}");
            }
        }
        for e in &v.examples {
            let _ = writeln!(s, "          {e}");
        }
        if let Some(i) = &self.ingest {
            let _ = writeln!(
                s,
                "ingest    posted {}  accepted {}  refused {}  no answer {}; resends {} (confirmed duplicate {}, refused {}, stored again {}); bad signatures {} (refused {}, accepted {})",
                i.posted,
                i.accepted,
                i.refused,
                i.failed,
                i.duplicates_posted,
                i.duplicates_confirmed,
                i.duplicates_refused,
                i.duplicates_wrong,
                i.bad_signatures_posted,
                i.bad_signatures_refused,
                i.bad_signatures_accepted
            );
            if !i.refused_by_status.is_empty() {
                let by: Vec<String> = i
                    .refused_by_status
                    .iter()
                    .map(|(status, n)| format!("{status}: {n}"))
                    .collect();
                let _ = writeln!(s, "          refusals by status: {}", by.join(", "));
            }
        }
        for b in &self.slo_broken {
            let _ = writeln!(s, "SLO       broken: {b}");
        }
        let _ = writeln!(
            s,
            "rate      acked {:.0}/s  delivered {:.0}/s over {:.1} s (+ {:.1} s drain)",
            self.acked_per_s, self.delivered_per_s, self.duration_s, self.drain_s
        );
        let _ = writeln!(
            s,
            "{:<28} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency (ms)", "count", "p50", "p90", "p99", "p99.9", "p99.99", "max"
        );
        for (name, p) in [
            ("enqueue (from intended)", &self.enqueue_latency_ms),
            ("enqueue (from sent)", &self.enqueue_service_ms),
            ("end to end (from intended)", &self.end_to_end_ms),
        ] {
            let _ = writeln!(
                s,
                "{name:<28} {:>8} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                p.count, p.p50, p.p90, p.p99, p.p999, p.p9999, p.max
            );
        }
        let h = &self.hookd;
        let opt = |v: Option<f64>, unit: &str| v.map_or("n/a".into(), |v| format!("{v:.0}{unit}"));
        let _ = writeln!(
            s,
            "hookd     push attempts {}  retries {}  dead letters {}  breaker openings {}",
            h.push_attempts, h.retries, h.dead_letters, h.breaker_openings
        );
        let _ = writeln!(
            s,
            "          cpu avg {} max {}  rss max {}  commits {:.0}/s  {:.1} requests/commit (last minute)",
            opt(h.cpu_avg_pct, "%"),
            opt(h.cpu_max_pct, "%"),
            opt(h.rss_max_mb, " MB"),
            h.commits_per_s,
            h.requests_per_commit
        );
        let refused: Vec<String> = h
            .refused
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| format!("{r} {n}"))
            .collect();
        let _ = writeln!(
            s,
            "          backpressure: peak live {}  peak level {}  throttle hints {}  refused [{}]",
            h.peak_live_messages.map_or("n/a".into(), |n| n.to_string()),
            h.peak_level.as_deref().unwrap_or("n/a"),
            h.throttle_hints,
            refused.join(", ")
        );
        let b = &self.host;
        let _ = writeln!(
            s,
            "box       {} cores: busy avg {} max {}  iowait avg {}  load max {}  this tool cpu avg {} max {} (100 % = one core)",
            b.cores,
            opt(b.busy_avg_pct, " %"),
            opt(b.busy_max_pct, " %"),
            opt(b.iowait_avg_pct, " %"),
            b.load1_max.map_or("n/a".into(), |l| format!("{l:.1}")),
            opt(b.tool_cpu_avg_pct, " %"),
            opt(b.tool_cpu_max_pct, " %"),
        );
        let ms = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.2} ms"));
        let _ = writeln!(
            s,
            "          fsync probe (4 KiB + fdatasync in {}): before {}; during: p50 {} p99 {} max {} ({} samples)",
            b.fsync_dir,
            b.fsync_before.map_or("n/a".into(), |f| format!(
                "{:.0}/s, p50 {:.2} ms, p99 {:.2} ms",
                f.per_s, f.p50_ms, f.p99_ms
            )),
            ms(b.fsync_p50_ms),
            ms(b.fsync_p99_ms),
            ms(b.fsync_max_ms),
            b.fsync_samples
        );
        let _ = writeln!(s, "limit     {}", b.limit);
        if let Some(a) = &self.agents {
            let _ = writeln!(
                s,
                "agents    {} Emitters: taken {}  sent {}  under slow_down {}  refused (buffer full) {}  retries {}  duplicates {}  failed {}  left {}",
                a.agents,
                a.taken,
                a.sent,
                a.pressured,
                a.refused,
                a.retries,
                a.duplicates,
                a.failed,
                a.left
            );
        }
        for g in &self.endpoints {
            let _ = writeln!(
                s,
                "endpoint  {:<16} e2e p50 {:.2} ms p99 {:.2} ms  requests {}  ok {}  errors {}  throttled {}  rate-limited {}  hung {}  reset {}  down {}",
                g.name,
                g.e2e_p50_ms,
                g.e2e_p99_ms,
                g.requests,
                g.ok,
                g.errors,
                g.throttled,
                g.rate_limited,
                g.hung,
                g.reset,
                g.down
            );
        }
        for q in &self.queues {
            let _ = writeln!(
                s,
                "queue     {:<16} e2e p50 {:.2} ms p99 {:.2} ms  received {}  acked {}  nacked {}  ack refused {}",
                q.name, q.e2e_p50_ms, q.e2e_p99_ms, q.received, q.acked, q.nacked, q.ack_failed
            );
        }
        let _ = writeln!(s, "result    {}", if self.passed { "PASS" } else { "FAIL" });
        if let Some(c) = &self.capacity {
            let _ = writeln!(s, "capacity steps:");
            for st in &c.steps {
                let _ = writeln!(
                    s,
                    "  {:>10.0}/s  {}  acked {:.0}/s delivered {:.0}/s  enqueue p99 {:.2} ms  e2e p99 {:.2} ms  {}",
                    st.rate,
                    if st.passed { "held " } else { "broke" },
                    st.acked_per_s,
                    st.delivered_per_s,
                    st.enqueue_p99_ms,
                    st.e2e_p99_ms,
                    st.detail
                );
            }
            let f = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.2}"));
            for st in &c.steps {
                let r = st.resources;
                let _ = writeln!(
                    s,
                    "  {:>10.0}/s  hookd {} cores {} MB  load generator {} cores {} MB  box {} % busy",
                    st.rate,
                    f(r.hookd_cores),
                    f(r.hookd_rss_mb),
                    f(r.tool_cores),
                    f(r.tool_rss_mb),
                    f(r.box_busy_pct)
                );
            }
            match c.sustainable_rate {
                Some(r) => {
                    let _ = writeln!(s, "highest sustainable rate: {r:.0} events/s");
                    if let Some(st) = &c.sustained {
                        let _ = writeln!(
                            s,
                            "  at it: enqueue p99 {:.2} ms  e2e p99 {:.2} ms  acked {:.0}/s  delivered {:.0}/s (that step's own figures)",
                            st.enqueue_p99_ms, st.e2e_p99_ms, st.acked_per_s, st.delivered_per_s
                        );
                    }
                    if let Some(z) = &c.sizing {
                        let _ = writeln!(s, "limited by: {} ({})", z.limited_by, z.why);
                        let _ = writeln!(
                            s,
                            "left at it: {} of {} cores idle, {} of {} MB memory available; disk: {}",
                            f(z.cpu_left_cores),
                            z.cores,
                            f(z.mem_left_mb),
                            f(z.mem_total_mb),
                            z.disk
                        );
                        let _ = writeln!(s, "sizing: {}", z.scale);
                    }
                }
                None => {
                    let _ = writeln!(
                        s,
                        "highest sustainable rate: none (the start rate broke the SLO)"
                    );
                }
            }
        }
        s
    }

    /// This run's line in a `--repeat` summary: its figure (a search's sustainable rate,
    /// or delivered/s) with that figure's own p99s and what limited it.
    pub fn summary_line(&self) -> RunFigure {
        match &self.capacity {
            Some(c) => RunFigure {
                figure: c.sustainable_rate.unwrap_or(0.0),
                enqueue_p99_ms: c.sustained.as_ref().map_or(0.0, |s| s.enqueue_p99_ms),
                e2e_p99_ms: c.sustained.as_ref().map_or(0.0, |s| s.e2e_p99_ms),
                limit: c
                    .sizing
                    .as_ref()
                    .map_or_else(|| self.host.limit.clone(), |z| z.limited_by.clone()),
                passed: self.verdict.passed(),
            },
            None => RunFigure {
                figure: self.delivered_per_s,
                enqueue_p99_ms: self.enqueue_latency_ms.p99,
                e2e_p99_ms: self.end_to_end_ms.p99,
                limit: self.host.limit.clone(),
                passed: self.passed,
            },
        }
    }

    /// The files [`Self::write`] writes in a directory (a `--repeat` clears them from the
    /// top of its output, so no earlier run's report is left there).
    pub const FILES: [&str; 5] = [
        "report.json",
        "latency-percentiles.svg",
        "throughput.svg",
        "latency-over-time.svg",
        "resources.svg",
    ];

    /// Writes `report.json` and the SVG plots into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join("report.json");
        std::fs::write(&json, serde_json::to_vec_pretty(self)?)?;
        let files = [
            (dir.join("latency-percentiles.svg"), Plot::Percentiles),
            (dir.join("throughput.svg"), Plot::Throughput),
            (dir.join("latency-over-time.svg"), Plot::LatencyOverTime),
            (dir.join("resources.svg"), Plot::Resources),
        ];
        let mut out = vec![json];
        for (path, plot) in files {
            self.plot(&path, plot)
                .map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", path.display()))?;
            out.push(path);
        }
        Ok(out)
    }

    fn plot(&self, path: &Path, plot: Plot) -> Result<(), Box<dyn std::error::Error>> {
        let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
        root.fill(&WHITE)?;
        let colours = [BLUE, RED, GREEN, MAGENTA];
        match plot {
            Plot::Percentiles => {
                let (root, strip) = with_key_strip(&root);
                // x = -log10(1 - percentile/100): 0 = p0, 1 = p90, 2 = p99, 3 = p99.9 ...
                let series = [
                    ("enqueue (from intended)", &self.enqueue_latency_ms.curve),
                    ("enqueue (from sent)", &self.enqueue_service_ms.curve),
                    ("end to end", &self.end_to_end_ms.curve),
                ];
                let nines = |q: f64| -(1.0 - q / 100.0).max(1e-6).log10();
                let xmax = series
                    .iter()
                    .flat_map(|(_, c)| c.iter().map(|(q, _)| nines(*q)))
                    .fold(1.0f64, f64::max);
                let ymax = series
                    .iter()
                    .flat_map(|(_, c)| c.iter().map(|(_, v)| *v))
                    .fold(1.0f64, f64::max);
                let ymax = self.slo_lines().iter().map(|l| l.1).fold(ymax, f64::max);
                let xmax = xmax.ceil();
                // Labelled where people read percentiles: 50, 90, 99, 99.9, ...
                let mut ticks = vec![0.0, 2f64.log10()];
                ticks.extend((1..=xmax as u32).map(f64::from));
                let mut chart = ChartBuilder::on(&root)
                    .caption(
                        format!("{}: latency by percentile", self.scenario),
                        ("sans-serif", 20),
                    )
                    .margin(10)
                    .x_label_area_size(40)
                    .y_label_area_size(60)
                    .build_cartesian_2d(0.0..xmax + 0.4, (0.01..ymax * 1.2).log_scale())?;
                // The x axis is in nines; its labels are drawn here at the percentiles
                // people read (plotters would put them at round numbers of nines).
                chart
                    .configure_mesh()
                    .x_labels(0)
                    .disable_x_mesh()
                    .x_desc("percentile")
                    .y_desc("ms")
                    .draw()?;
                let grey = RGBColor(200, 200, 200);
                for &x in &ticks {
                    chart.draw_series(LineSeries::new(
                        [(x, 0.01), (x, ymax * 1.2)],
                        grey.stroke_width(1),
                    ))?;
                    chart.draw_series(std::iter::once(Text::new(
                        format!("p{}", percentile_label(x)),
                        (x, 0.012),
                        ("sans-serif", 13).into_font().color(&BLACK),
                    )))?;
                }
                for (name, ms, c) in self.slo_lines() {
                    chart
                        .draw_series(DashedLineSeries::new(
                            [(0.0, ms), (xmax, ms)],
                            8,
                            4,
                            c.stroke_width(1),
                        ))?
                        .label(name)
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c));
                }
                for (i, (name, curve)) in series.iter().enumerate() {
                    let c = colours[i % colours.len()];
                    chart
                        .draw_series(LineSeries::new(
                            curve.iter().map(|(q, v)| (nines(*q), v.max(0.01))),
                            c.stroke_width(2),
                        ))?
                        .label(*name)
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c));
                }
                let mut entries: Vec<(String, RGBColor)> = self
                    .slo_lines()
                    .into_iter()
                    .map(|(name, _, c)| (name, c))
                    .collect();
                entries.extend(
                    series
                        .iter()
                        .enumerate()
                        .map(|(i, (name, _))| ((*name).to_owned(), colours[i % colours.len()])),
                );
                key(&strip, &entries)?;
            }
            Plot::Throughput => {
                let t = &self.timeline;
                let at = |f: fn(&Second) -> u64| -> Vec<(f64, f64)> {
                    t.iter().map(|s| (s.t_s as f64, f(s) as f64)).collect()
                };
                let series = [
                    ("offered", at(|s| s.offered)),
                    ("acked", at(|s| s.acked)),
                    ("delivered", at(|s| s.delivered)),
                    ("enqueue failed", at(|s| s.failed)),
                ];
                self.over_time(&root, "events per second", "events/s", &series, false, &[])?;
            }
            Plot::LatencyOverTime => {
                let t = &self.timeline;
                // Seconds without a sample have no point (a log axis has no 0).
                // A second without a sample (between bursts) breaks the line there.
                let at = |f: fn(&Second) -> f64| -> Vec<(f64, f64)> {
                    t.iter()
                        .map(|s| (s.t_s as f64, f(s)))
                        .map(|(x, v)| (x, if v > 0.0 { v.max(0.01) } else { f64::NAN }))
                        .collect()
                };
                let series = [
                    ("enqueue p50", at(|s| s.enqueue_p50_ms)),
                    ("enqueue p99", at(|s| s.enqueue_p99_ms)),
                    ("end to end p50", at(|s| s.e2e_p50_ms)),
                    ("end to end p99", at(|s| s.e2e_p99_ms)),
                ];
                self.over_time(
                    &root,
                    "latency over time",
                    "ms",
                    &series,
                    true,
                    &self.slo_lines(),
                )?;
            }
            Plot::Resources => {
                let t = &self.timeline;
                let cores = self.host.cores.max(1) as f64;
                let at = |f: &dyn Fn(&Second) -> Option<f64>| -> Vec<(f64, f64)> {
                    t.iter()
                        .map(|s| (s.t_s as f64, f(s).unwrap_or(f64::NAN)))
                        .collect()
                };
                let (top, bottom) = root.split_vertically(300);
                let cpu = [
                    ("hookd", at(&|s| s.hookd_cpu_pct)),
                    ("load generator (this tool)", at(&|s| s.tool_cpu_pct)),
                    (
                        "everything else",
                        at(&|s| {
                            let all = s.host_busy_pct? * cores;
                            Some(
                                (all - s.hookd_cpu_pct.unwrap_or(0.0)
                                    - s.tool_cpu_pct.unwrap_or(0.0))
                                .max(0.0),
                            )
                        }),
                    ),
                    ("whole box", at(&|s| s.host_busy_pct.map(|b| b * cores))),
                ];
                self.over_time(&top, "CPU (100 % = one core)", "%", &cpu, false, &[])?;
                let fsync = [(
                    "slowest fsync of the probe in each second",
                    at(&|s| s.fsync_ms.map(|v| v.max(0.01))),
                )];
                self.over_time(
                    &bottom,
                    "fsync probe on hookd's disk",
                    "ms",
                    &fsync,
                    true,
                    &[],
                )?;
            }
        }
        root.present()?;
        Ok(())
    }
}

impl Report {
    /// A line per series against the run's seconds.
    fn over_time(
        &self,
        root: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
        title: &str,
        unit: &str,
        series: &[(&str, Vec<(f64, f64)>)],
        log: bool,
        slo: &[SloLine],
    ) -> Result<(), Box<dyn std::error::Error>> {
        let (root, strip) = with_key_strip(root);
        let root = &root;
        let xmax = self.timeline.len().max(1) as f64;
        let marks = self.step_marks();
        let ymax = series
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.1))
            .chain(slo.iter().map(|l| l.1))
            .filter(|v| v.is_finite())
            .fold(1.0, f64::max);
        let mut builder = ChartBuilder::on(root);
        builder
            .caption(format!("{}: {title}", self.scenario), ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70);
        let colours = [BLUE, RED, GREEN, MAGENTA];
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart.configure_mesh().x_desc("s").y_desc(unit).draw()?;
                for (i, (name, points)) in series.iter().enumerate() {
                    let c = colours[i % colours.len()];
                    // One line per run of seconds with a value: never drawn across a gap.
                    let mut runs = segments(points).into_iter();
                    let first = runs.next().unwrap_or_default();
                    chart
                        .draw_series(LineSeries::new(first, c.stroke_width(2)))?
                        .label(*name)
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c));
                    for run in runs {
                        chart.draw_series(LineSeries::new(run, c.stroke_width(2)))?;
                    }
                }
                for (name, ms, c) in slo {
                    let c = *c;
                    chart
                        .draw_series(DashedLineSeries::new(
                            [(0.0, *ms), (xmax, *ms)],
                            8,
                            4,
                            c.stroke_width(1),
                        ))?
                        .label(name.as_str())
                        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c));
                }
                // Each capacity step's start: a grey line, labelled with its rate at the top.
                let grey = RGBColor(150, 150, 150);
                let (bottom, top) = (chart.y_range().start, chart.y_range().end);
                for (x, label) in &marks {
                    chart.draw_series(DashedLineSeries::new(
                        [(*x, bottom), (*x, top)],
                        3,
                        3,
                        grey.stroke_width(1),
                    ))?;
                    chart.draw_series(std::iter::once(Text::new(
                        label.clone(),
                        (*x, top),
                        ("sans-serif", 11).into_font().color(&grey),
                    )))?;
                }
            }};
        }
        if log {
            draw!(builder.build_cartesian_2d(0.0..xmax, (0.01..ymax * 1.2).log_scale())?);
        } else {
            draw!(builder.build_cartesian_2d(0.0..xmax, 0.0..ymax * 1.1)?);
        }
        let mut entries: Vec<(String, RGBColor)> = series
            .iter()
            .enumerate()
            .map(|(i, (name, _))| ((*name).to_owned(), colours[i % colours.len()]))
            .collect();
        entries.extend(slo.iter().map(|(name, _, c)| (name.clone(), *c)));
        if !marks.is_empty() {
            entries.push((
                "capacity step start (its rate)".to_owned(),
                RGBColor(150, 150, 150),
            ));
        }
        key(&strip, &entries)
    }

    /// Where each capacity step started on the timeline, and its offered rate.
    fn step_marks(&self) -> Vec<(f64, String)> {
        self.capacity
            .iter()
            .flat_map(|c| &c.steps)
            .map(|st| (st.start_s, format!("{:.0}/s", st.rate)))
            .collect()
    }
}

/// Height of the strip below a chart that holds its key.
const KEY_STRIP: u32 = 44;

/// `area` split into the chart's part and a strip below it for the key, so that the key
/// never covers the data.
fn with_key_strip<'a>(
    area: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
) -> (
    DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
) {
    let height = area.dim_in_pixel().1;
    area.split_vertically(height.saturating_sub(KEY_STRIP))
}

/// A chart's key in its strip: a line of the series' colour and its name, left to right,
/// wrapping onto a second row.
fn key(
    strip: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    entries: &[(String, RGBColor)],
) -> Result<(), Box<dyn std::error::Error>> {
    let width = strip.dim_in_pixel().0 as i32;
    let (mut x, mut y) = (70, 10);
    for (name, colour) in entries {
        // About 7 px a character at this size.
        let span = 26 + 7 * name.chars().count() as i32 + 20;
        if x + span > width && x > 70 {
            (x, y) = (70, y + 18);
        }
        strip.draw(&PathElement::new(
            [(x, y), (x + 20, y)],
            colour.stroke_width(2),
        ))?;
        strip.draw(&Text::new(
            name.clone(),
            (x + 26, y - 7),
            ("sans-serif", 13).into_font().color(&BLACK),
        ))?;
        x += span;
    }
    Ok(())
}

/// An SLO limit drawn across a latency plot: (label, ms, colour).
type SloLine = (String, f64, RGBColor);

impl Report {
    /// The SLO limits to draw on the latency plots.
    fn slo_lines(&self) -> Vec<SloLine> {
        let mut out = Vec::new();
        if let Some(ms) = self.slo_enqueue_p99_ms {
            out.push((
                format!("SLO: enqueue p99 {ms} ms"),
                ms,
                RGBColor(255, 140, 0),
            ));
        }
        if let Some(ms) = self.slo_end_to_end_p99_ms {
            out.push((format!("SLO: end-to-end p99 {ms} ms"), ms, BLACK));
        }
        out
    }
}

/// The percentile at `x` nines (0 = p0, 1 = p90, 2 = p99...), as people write it: 50, 90,
/// 99, 99.9.
fn percentile_label(x: f64) -> String {
    let p = 100.0 - 100.0 * 10f64.powf(-x);
    let rounded = (p * 1e4).round() / 1e4;
    let mut s = format!("{rounded:.4}");
    while s.ends_with('0') {
        s.pop();
    }
    if s.ends_with('.') {
        s.pop();
    }
    s
}

/// Runs of consecutive finite points: a line is drawn within a run, never across a gap.
fn segments(points: &[(f64, f64)]) -> Vec<Vec<(f64, f64)>> {
    let mut out: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut current = Vec::new();
    for &(x, y) in points {
        if y.is_finite() {
            current.push((x, y));
        } else if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[derive(Debug, Clone, Copy)]
enum Plot {
    Percentiles,
    Throughput,
    LatencyOverTime,
    Resources,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_axis_reads_50_90_99_99_9() {
        let labels: Vec<String> = [0.0, 2f64.log10(), 1.0, 2.0, 3.0, 4.0]
            .into_iter()
            .map(percentile_label)
            .collect();
        assert_eq!(labels, ["0", "50", "90", "99", "99.9", "99.99"]);
    }

    #[test]
    fn a_gap_splits_the_line() {
        let nan = f64::NAN;
        let runs = segments(&[(1.0, 2.0), (2.0, 3.0), (3.0, nan), (4.0, nan), (5.0, 1.0)]);
        assert_eq!(runs, vec![vec![(1.0, 2.0), (2.0, 3.0)], vec![(5.0, 1.0)]]);
        assert!(segments(&[(1.0, nan)]).is_empty());
    }
}

/// One run of a `--repeat`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RunFigure {
    pub figure: f64,
    pub enqueue_p99_ms: f64,
    pub e2e_p99_ms: f64,
    pub limit: String,
    pub passed: bool,
}

/// `--repeat N`: every run's figure, their median and spread (`summary.json` and
/// `summary.txt` at the top of the output; each run's report in `run-N/`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub scenario: String,
    /// What `figure` is: "highest sustainable rate (events/s)" or "delivered/s".
    pub what: String,
    pub runs: Vec<RunFigure>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Half the range, as a percentage of the median.
    pub spread_pct: f64,
}

impl Summary {
    pub fn of(scenario: &str, what: &str, runs: Vec<RunFigure>) -> Self {
        let mut figures: Vec<f64> = runs.iter().map(|r| r.figure).collect();
        figures.sort_by(f64::total_cmp);
        let n = figures.len();
        let median = match n {
            0 => 0.0,
            _ if n % 2 == 1 => figures[n / 2],
            _ => (figures[n / 2 - 1] + figures[n / 2]) / 2.0,
        };
        let (min, max) = (
            figures.first().copied().unwrap_or(0.0),
            figures.last().copied().unwrap_or(0.0),
        );
        let spread_pct = if median > 0.0 {
            (max - min) / 2.0 / median * 100.0
        } else {
            0.0
        };
        Self {
            scenario: scenario.to_owned(),
            what: what.to_owned(),
            runs,
            median,
            min,
            max,
            spread_pct,
        }
    }

    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "scenario  {} ({} runs)", self.scenario, self.runs.len());
        for (i, r) in self.runs.iter().enumerate() {
            let _ = writeln!(
                s,
                "run {:<3}   {}: {:.0}  enqueue p99 {:.2} ms  e2e p99 {:.2} ms  {}  limit: {}",
                i + 1,
                self.what,
                r.figure,
                r.enqueue_p99_ms,
                r.e2e_p99_ms,
                if r.passed { "PASS" } else { "FAIL" },
                r.limit
            );
        }
        let _ = writeln!(
            s,
            "summary   {}: median {:.0}, min {:.0}, max {:.0}, spread ±{:.1} % (each run's report in run-N/)",
            self.what, self.median, self.min, self.max, self.spread_pct
        );
        s
    }

    /// Writes `summary.json` and `summary.txt` into `dir`.
    pub fn write(&self, dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
        std::fs::create_dir_all(dir)?;
        let json = dir.join("summary.json");
        std::fs::write(&json, serde_json::to_vec_pretty(self)?)?;
        let txt = dir.join("summary.txt");
        std::fs::write(&txt, self.table())?;
        Ok(vec![json, txt])
    }
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    fn run(figure: f64) -> RunFigure {
        RunFigure {
            figure,
            enqueue_p99_ms: 1.0,
            e2e_p99_ms: 2.0,
            limit: "hookd".into(),
            passed: true,
        }
    }

    #[test]
    fn the_summary_is_the_median_and_the_spread_around_it() {
        let s = Summary::of(
            "cap",
            "delivered/s",
            vec![run(100.0), run(130.0), run(110.0)],
        );
        assert_eq!((s.median, s.min, s.max), (110.0, 100.0, 130.0));
        assert!((s.spread_pct - 15.0 / 110.0 * 100.0).abs() < 1e-9);
        let even = Summary::of("cap", "x", vec![run(1.0), run(3.0)]);
        assert_eq!(even.median, 2.0);
        assert!(s.table().contains("median 110, min 100, max 130"));
    }
}
