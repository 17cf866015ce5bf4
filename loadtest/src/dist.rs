//! Latency distributions for simulated endpoints and consumers.

use std::time::Duration;

use rand::Rng;
use rand_distr::{Distribution, LogNormal};
use serde::Deserialize;

/// How long a simulated endpoint (or consumer) takes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawLatency")]
pub enum Latency {
    Fixed(Duration),
    Uniform(Duration, Duration),
    /// Log-normal with this median and p99: the long tail real receivers have.
    LogNormal {
        median: Duration,
        p99: Duration,
    },
}

impl Default for Latency {
    fn default() -> Self {
        Self::Fixed(Duration::ZERO)
    }
}

/// `{ dist = "fixed", ms = 5 }`, `{ dist = "uniform", min_ms = 1, max_ms = 10 }`,
/// `{ dist = "lognormal", median_ms = 20, p99_ms = 200 }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLatency {
    dist: String,
    ms: Option<f64>,
    min_ms: Option<f64>,
    max_ms: Option<f64>,
    median_ms: Option<f64>,
    p99_ms: Option<f64>,
}

fn millis(key: &str, v: Option<f64>, dist: &str) -> Result<Duration, String> {
    let v = v.ok_or_else(|| format!("latency `{dist}` needs `{key}`"))?;
    if !(0.0..=3_600_000.0).contains(&v) {
        return Err(format!("`{key}` is {v}; it must be 0 to 3600000 (ms)"));
    }
    Ok(Duration::from_secs_f64(v / 1e3))
}

impl TryFrom<RawLatency> for Latency {
    type Error = String;
    fn try_from(r: RawLatency) -> Result<Self, String> {
        let d = r.dist.as_str();
        let only = |keys: &[(&str, bool)]| {
            for (key, present) in keys {
                if *present {
                    return Err(format!("`{key}` does not apply to latency `{d}`"));
                }
            }
            Ok(())
        };
        match d {
            "fixed" => {
                only(&[
                    ("min_ms", r.min_ms.is_some()),
                    ("max_ms", r.max_ms.is_some()),
                    ("median_ms", r.median_ms.is_some()),
                    ("p99_ms", r.p99_ms.is_some()),
                ])?;
                Ok(Self::Fixed(millis("ms", r.ms, d)?))
            }
            "uniform" => {
                only(&[
                    ("ms", r.ms.is_some()),
                    ("median_ms", r.median_ms.is_some()),
                    ("p99_ms", r.p99_ms.is_some()),
                ])?;
                let (lo, hi) = (
                    millis("min_ms", r.min_ms, d)?,
                    millis("max_ms", r.max_ms, d)?,
                );
                if hi < lo {
                    return Err(format!("`max_ms` ({hi:?}) is below `min_ms` ({lo:?})"));
                }
                Ok(Self::Uniform(lo, hi))
            }
            "lognormal" => {
                only(&[
                    ("ms", r.ms.is_some()),
                    ("min_ms", r.min_ms.is_some()),
                    ("max_ms", r.max_ms.is_some()),
                ])?;
                let median = millis("median_ms", r.median_ms, d)?;
                let p99 = millis("p99_ms", r.p99_ms, d)?;
                if median.is_zero() || p99 <= median {
                    return Err(format!(
                        "`p99_ms` ({p99:?}) must be above `median_ms` ({median:?}), which must be above 0"
                    ));
                }
                Ok(Self::LogNormal { median, p99 })
            }
            other => Err(format!(
                "latency `dist` is `{other}`; expected fixed, uniform or lognormal"
            )),
        }
    }
}

/// z of the standard normal's 99th percentile.
const Z99: f64 = 2.326_347_874;

/// A sampler built once from a [`Latency`].
#[derive(Debug, Clone)]
pub enum Sampler {
    Fixed(Duration),
    Uniform(Duration, Duration),
    LogNormal(LogNormal<f64>),
}

impl Sampler {
    pub fn new(latency: &Latency) -> Self {
        match *latency {
            Latency::Fixed(d) => Self::Fixed(d),
            Latency::Uniform(lo, hi) => Self::Uniform(lo, hi),
            Latency::LogNormal { median, p99 } => {
                let mu = median.as_secs_f64().ln();
                let sigma = (p99.as_secs_f64().ln() - mu) / Z99;
                match LogNormal::new(mu, sigma) {
                    Ok(d) => Self::LogNormal(d),
                    // Checked when parsed (p99 > median > 0 gives a finite sigma > 0).
                    Err(_) => Self::Fixed(median),
                }
            }
        }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        match self {
            Self::Fixed(d) => *d,
            Self::Uniform(lo, hi) if lo == hi => *lo,
            Self::Uniform(lo, hi) => {
                let (lo, hi) = (lo.as_nanos() as u64, hi.as_nanos() as u64);
                Duration::from_nanos(rand::RngExt::random_range(rng, lo..=hi))
            }
            // Capped at an hour, like the parsed bounds.
            Self::LogNormal(d) => Duration::from_secs_f64(d.sample(rng).min(3_600.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn lognormal_has_the_median_and_p99_asked_for() {
        let s = Sampler::new(&Latency::LogNormal {
            median: Duration::from_millis(20),
            p99: Duration::from_millis(200),
        });
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut v: Vec<f64> = (0..200_000)
            .map(|_| s.sample(&mut rng).as_secs_f64() * 1e3)
            .collect();
        v.sort_by(f64::total_cmp);
        let (p50, p99) = (v[100_000], v[198_000]);
        assert!((p50 - 20.0).abs() < 0.6, "p50 {p50}");
        assert!((p99 - 200.0).abs() < 10.0, "p99 {p99}");
    }

    #[test]
    fn uniform_stays_in_bounds() {
        let s = Sampler::new(&Latency::Uniform(
            Duration::from_millis(1),
            Duration::from_millis(3),
        ));
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let v: Vec<Duration> = (0..10_000).map(|_| s.sample(&mut rng)).collect();
        assert!(
            v.iter()
                .all(|d| *d >= Duration::from_millis(1) && *d <= Duration::from_millis(3))
        );
        let mean = v.iter().map(Duration::as_secs_f64).sum::<f64>() / 1e4;
        assert!((mean - 0.002).abs() < 0.0001, "{mean}");
    }
}
