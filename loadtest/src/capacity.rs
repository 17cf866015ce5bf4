//! Capacity search: multiply the offered rate by `growth` while each step holds the SLO,
//! then bisect between the last rate that held and the first that broke.
//!
//! A step that breaks the SLO is run once more before it counts: on a shared machine one
//! stall can push a 5 s step's p99 over its limit, and a single false break would end the
//! growth early (three runs measured 10,679 / 11,153 / 14,238 events/s before this; two of
//! them broke at 54 ms against a 50 ms limit and held the same rate on other runs).

use std::future::Future;

use serde::Serialize;

use crate::scenario::Capacity;

/// One step's result.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Step {
    pub rate: f64,
    /// Seconds from the start of the search (the report's timeline) to this step's start.
    pub start_s: f64,
    pub passed: bool,
    /// Why it failed, or a summary of what it measured.
    pub detail: String,
    pub acked_per_s: f64,
    pub delivered_per_s: f64,
    pub enqueue_p99_ms: f64,
    pub e2e_p99_ms: f64,
    /// What the box spent on the step's traffic (its open loop, not the drain after).
    pub resources: StepResources,
}

/// hookd's and the load generator's CPU and memory over one step, and the box's.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct StepResources {
    /// hookd's CPU in cores (1.0 = one core busy), when the tool can see its process.
    pub hookd_cores: Option<f64>,
    pub hookd_rss_mb: Option<f64>,
    /// This tool (the load generator and the simulated receivers) on the same box.
    pub tool_cores: Option<f64>,
    pub tool_rss_mb: Option<f64>,
    /// The whole machine's CPU busy, 0 to 100 (100 = every core).
    pub box_busy_pct: Option<f64>,
    /// The machine's available memory at the step's end (MemAvailable).
    pub box_mem_available_mb: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Outcome {
    /// The highest rate that held the SLO; `None` if even the start rate broke it.
    pub sustainable_rate: Option<f64>,
    /// The step that held at that rate: its own p99s and resources (not the search's).
    pub sustained: Option<Step>,
    /// What limited the search and how to size another box (set once the run's host
    /// figures are in).
    pub sizing: Option<Sizing>,
    /// The lowest rate that broke it; `None` if `max_rate` held.
    pub broke_at: Option<f64>,
    pub steps: Vec<Step>,
}

/// How to size the next box from a search: what the sustained step used, what was left,
/// what limited the search, and the estimate for another machine with its assumption.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sizing {
    /// The sustainable rate (events/s offered and held).
    pub rate: f64,
    pub cores: usize,
    pub mem_total_mb: Option<f64>,
    /// At the sustained step (see [`StepResources`]).
    pub used: StepResources,
    /// Cores the box had idle at the sustained step.
    pub cpu_left_cores: Option<f64>,
    /// Memory available at the sustained step.
    pub mem_left_mb: Option<f64>,
    /// The disk: fsync p99 during the search against p50 before it.
    pub disk: String,
    /// `cpu`, `load generator`, `disk`, `hookd`, or `none` (the maximum rate held).
    pub limited_by: String,
    pub why: String,
    /// Per 1,000 events/s, and what another machine should sustain, with the assumption.
    pub scale: String,
}

/// [`Sizing`] from a finished search and the run's host figures (cores, memory, the disk).
pub fn sizing(o: &Outcome, host: &crate::host::HostFigures) -> Option<Sizing> {
    let step = o.sustained.as_ref()?;
    let rate = step.rate;
    let cores = host.cores.max(1);
    let used = step.resources;
    let per_k = |v: Option<f64>| v.map(|v| v / rate * 1_000.0);
    let disk_slow = host.disk_slow();
    let disk = format!(
        "fsync p99 {} ms during the search, p50 {} ms ({} fsyncs/s) before it",
        host.fsync_p99_ms
            .map_or("n/a".into(), |v| format!("{v:.1}")),
        host.fsync_before
            .map_or("n/a".into(), |b| format!("{:.2}", b.p50_ms)),
        host.fsync_before
            .map_or("n/a".into(), |b| format!("{:.0}", b.per_s)),
    );
    // What broke first above the sustained rate: its step's resources say why.
    let broke = o
        .broke_at
        .and_then(|r| o.steps.iter().find(|s| !s.passed && s.rate == r));
    let (limited_by, why) = match broke {
        None => (
            "none".to_owned(),
            "the search's max_rate held: raise it to find the limit".to_owned(),
        ),
        Some(b) => {
            let r = b.resources;
            let f = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.2}"));
            if r.box_busy_pct.is_some_and(|p| p >= 90.0) {
                let generator = r.tool_cores.unwrap_or(0.0) >= r.hookd_cores.unwrap_or(0.0);
                (
                    if generator { "load generator" } else { "cpu" }.to_owned(),
                    format!(
                        "at {:.0}/s the box was {:.0} % busy (hookd {} cores, the load generator {} of {cores}): {}",
                        b.rate,
                        r.box_busy_pct.unwrap_or(0.0),
                        f(r.hookd_cores),
                        f(r.tool_cores),
                        b.detail
                    ),
                )
            } else if disk_slow {
                (
                    "disk".to_owned(),
                    format!("at {:.0}/s: {}; {disk}", b.rate, b.detail),
                )
            } else {
                (
                    "hookd".to_owned(),
                    format!(
                        "at {:.0}/s the box had CPU to spare ({:.0} % busy) and the disk kept up: hookd's own pace (its engine thread, endpoints' in-flight and rate limits) broke the SLO: {}",
                        b.rate,
                        r.box_busy_pct.unwrap_or(0.0),
                        b.detail
                    ),
                )
            }
        }
    };
    let cpu_left_cores = used
        .box_busy_pct
        .map(|p| cores as f64 * (1.0 - p / 100.0).max(0.0));
    let hookd_per_k = per_k(used.hookd_cores);
    let estimate = match limited_by.as_str() {
        "cpu" | "load generator" => hookd_per_k.map_or(String::new(), |c| {
            format!(
                " On this box with the load generator elsewhere, CPU would allow about {:.0} events/s (90 % of {cores} cores at {c:.3} cores per 1,000/s); on a box of N cores, about N x {:.0} events/s, until hookd's own pace (its one engine thread) or the disk limits it first.",
                cores as f64 * 0.9 / c * 1_000.0,
                0.9 / c * 1_000.0
            )
        }),
        "disk" => " A disk with more fsyncs per second raises it; more cores do not (group commit already carries many events per fsync).".to_owned(),
        "hookd" => " More cores or memory on this box do not raise it: more hookd instances do (a shared tier, docs/deploy.md).".to_owned(),
        _ => String::new(),
    };
    let f = |v: Option<f64>, unit: &str| v.map_or("n/a".into(), |v| format!("{v:.2} {unit}"));
    let scale = format!(
        "Per 1,000 events/s at {rate:.0}/s hookd used {} and its RSS was {}; the load generator {}. Assumption: hookd's CPU grows in proportion to the rate, its memory with the backlog (so the RSS is a floor, not per event), the disk keeps its fsync rate, and the load generator runs elsewhere.{estimate}",
        f(hookd_per_k, "cores"),
        f(used.hookd_rss_mb, "MB"),
        f(per_k(used.tool_cores), "cores per 1,000/s"),
    );
    Some(Sizing {
        rate,
        cores,
        mem_total_mb: crate::host::meminfo_mb("MemTotal"),
        used,
        cpu_left_cores,
        mem_left_mb: used.box_mem_available_mb,
        disk,
        limited_by,
        why,
        scale,
    })
}

/// Runs the search; `step(rate)` offers `rate` for one step and judges it.
pub async fn search<F, Fut>(c: &Capacity, mut step: F) -> anyhow::Result<Outcome>
where
    F: FnMut(f64) -> Fut,
    Fut: Future<Output = anyhow::Result<Step>>,
{
    let mut steps = Vec::new();
    let mut good: Option<f64> = None;
    let mut bad: Option<f64> = None;
    let mut rate = c.start_rate;
    loop {
        let passed = confirmed(&mut step, rate, &mut steps).await?;
        if !passed {
            bad = Some(rate);
            break;
        }
        good = Some(rate);
        if rate >= c.max_rate {
            break;
        }
        rate = (rate * c.growth).min(c.max_rate);
    }
    if let (Some(mut lo), Some(mut hi)) = (good, bad) {
        for _ in 0..c.refine {
            let mid = (lo + hi) / 2.0;
            if confirmed(&mut step, mid, &mut steps).await? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        good = Some(lo);
        bad = Some(hi);
    }
    let sustained = good.and_then(|rate| {
        steps
            .iter()
            .rev()
            .find(|s| s.passed && s.rate == rate)
            .cloned()
    });
    Ok(Outcome {
        sustainable_rate: good,
        sustained,
        sizing: None,
        broke_at: bad,
        steps,
    })
}

/// Runs a step at `rate`, and once more if it broke; whether it held.
async fn confirmed<F, Fut>(step: &mut F, rate: f64, steps: &mut Vec<Step>) -> anyhow::Result<bool>
where
    F: FnMut(f64) -> Fut,
    Fut: Future<Output = anyhow::Result<Step>>,
{
    for _ in 0..2 {
        let s = step(rate).await?;
        let passed = s.passed;
        steps.push(s);
        if passed {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};
    use std::time::Duration;

    fn capacity() -> Capacity {
        Capacity {
            start_rate: 500.0,
            max_rate: 200_000.0,
            growth: 1.5,
            step: Duration::from_secs(1),
            refine: 4,
            settle: Duration::from_secs(1),
        }
    }

    /// A simulated service that holds the SLO up to `limit` events/s, give or take the
    /// noise a shared machine adds to each step, and breaks it anyway on a `stall`
    /// fraction of steps.
    async fn find_with(limit: f64, noise: f64, stall: f64, seed: u64) -> Outcome {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        search(&capacity(), |rate| {
            let jitter = 1.0 + noise * (rng.random::<f64>() * 2.0 - 1.0);
            let stalled = rng.random::<f64>() < stall;
            let passed = rate <= limit * jitter && !stalled;
            async move {
                Ok(Step {
                    rate,
                    start_s: 0.0,
                    passed,
                    detail: String::new(),
                    acked_per_s: rate,
                    delivered_per_s: rate,
                    enqueue_p99_ms: 0.0,
                    e2e_p99_ms: 0.0,
                    resources: StepResources::default(),
                })
            }
        })
        .await
        .unwrap()
    }

    async fn find(limit: f64, noise: f64, seed: u64) -> Outcome {
        find_with(limit, noise, 0.0, seed).await
    }

    #[tokio::test]
    async fn finds_the_limit_of_a_simulated_service() {
        let o = find(12_000.0, 0.0, 1).await;
        let found = o.sustainable_rate.unwrap();
        // Growth 1.5 from 500: 500 .. 8,543 held, 12,814 broke (twice: confirmed); 4
        // bisections narrow that to 1/16 of the gap, each break confirmed too.
        assert!(found <= 12_000.0 && found > 12_000.0 * 0.97, "{found}");
        assert!(o.broke_at.unwrap() > 12_000.0);
        // The figure comes with the step that held at it.
        let sustained = o.sustained.as_ref().unwrap();
        assert!(sustained.passed && sustained.rate == found, "{sustained:?}");
        let breaks = o.steps.iter().filter(|s| !s.passed).count();
        assert_eq!(o.steps.len(), 9 + 1 + 4 + breaks / 2 - 1, "{:?}", o.steps);
        assert!(o.steps.windows(2).take(8).all(|w| w[1].rate > w[0].rate));
        // Every break was run twice in a row at the same rate.
        for (i, s) in o.steps.iter().enumerate().filter(|(_, s)| !s.passed) {
            let twin = if i > 0 && o.steps[i - 1].rate == s.rate {
                i - 1
            } else {
                i + 1
            };
            assert_eq!(o.steps[twin].rate, s.rate, "{:?}", o.steps);
        }
    }

    #[tokio::test]
    async fn repeated_searches_agree_within_15_percent_under_noise() {
        let found: Vec<f64> =
            futures_lite_join((1..=10).map(|seed| find(12_000.0, 0.05, seed))).await;
        let (lo, hi) = found
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), f| (lo.min(*f), hi.max(*f)));
        let mid = (lo + hi) / 2.0;
        assert!((hi - lo) / 2.0 <= mid * 0.15, "{found:?}");
    }

    async fn futures_lite_join<F: Future<Output = Outcome>>(
        f: impl Iterator<Item = F>,
    ) -> Vec<f64> {
        let mut out = Vec::new();
        for o in f {
            out.push(o.await.sustainable_rate.unwrap());
        }
        out
    }

    /// Steps that break now and then for no reason of load (a stall on a shared machine,
    /// here 1 step in 10) rarely end the search early: a break counts only when it happens
    /// twice in a row (1 in 100 here). Without the second try, a search of ~14 steps would
    /// end early in about 3 of 4 runs.
    #[tokio::test]
    async fn a_lone_stall_does_not_end_the_search() {
        let mut close = 0;
        for seed in 1..=40 {
            let found = find_with(12_000.0, 0.0, 0.1, seed)
                .await
                .sustainable_rate
                .unwrap_or(0.0);
            if found > 12_000.0 * 0.85 {
                close += 1;
            }
        }
        assert!(close >= 34, "{close} of 40 searches within 15 %");
    }

    #[tokio::test]
    async fn edges() {
        // Even the start rate breaks the SLO (twice).
        let o = find(100.0, 0.0, 1).await;
        assert_eq!(o.sustainable_rate, None);
        assert_eq!(o.steps.len(), 2);
        // The service holds up to the maximum asked for.
        let o = find(1e9, 0.0, 1).await;
        assert_eq!(o.sustainable_rate, Some(200_000.0));
        assert_eq!(o.broke_at, None);
    }
}
