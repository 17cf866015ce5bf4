//! Retry timing: exponential backoff with full jitter.
//!
//! `delay = uniform(0, min(cap, base * 2^(attempt - 1)))` after the `attempt`-th failure.
//! Full jitter spreads a burst of failures over the whole window instead of retrying them in
//! lockstep. Pure: the caller passes the random source.

use rand::{Rng, RngExt};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Attempts before a message is dead-lettered.
    pub max_attempts: u32,
    pub base_ms: u64,
    pub cap_ms: u64,
}

impl Default for RetryPolicy {
    /// 12 attempts; the backoff ceiling doubles from 2 s to a 10 min cap, so the last attempt
    /// falls at most about 30 minutes after the first (half that on average).
    fn default() -> Self {
        Self {
            max_attempts: 12,
            base_ms: 2_000,
            cap_ms: 600_000,
        }
    }
}

impl RetryPolicy {
    /// The ceiling of the delay after the `attempt`-th failure (1-based).
    pub(crate) fn ceiling_ms(&self, attempt: u32) -> u64 {
        let shift = attempt.saturating_sub(1).min(63);
        self.base_ms.saturating_mul(1u64 << shift).min(self.cap_ms)
    }

    /// A full-jitter delay after the `attempt`-th failure.
    pub fn backoff_ms(&self, attempt: u32, rng: &mut impl Rng) -> u64 {
        rng.random_range(0..=self.ceiling_ms(attempt))
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    #[test]
    fn ceiling_doubles_up_to_cap() {
        let p = RetryPolicy {
            max_attempts: 5,
            base_ms: 100,
            cap_ms: 1_000,
        };
        let ceilings: Vec<u64> = (1..=6).map(|a| p.ceiling_ms(a)).collect();
        assert_eq!(ceilings, vec![100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(p.ceiling_ms(200), 1_000);
    }

    #[test]
    fn jitter_stays_within_ceiling_and_spreads() {
        let p = RetryPolicy {
            max_attempts: 5,
            base_ms: 1_000,
            cap_ms: 60_000,
        };
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<u64> = (0..1_000).map(|_| p.backoff_ms(3, &mut rng)).collect();
        assert!(delays.iter().all(|&d| d <= 4_000));
        let mean = delays.iter().sum::<u64>() as f64 / delays.len() as f64;
        assert!((1_700.0..2_300.0).contains(&mean), "mean {mean}");
    }
}
