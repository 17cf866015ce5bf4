//! Token bucket per push destination, so hookd never sends faster than a receiver's quota.
//!
//! `rate_per_s` tokens are added per second up to `burst`; an attempt takes one. Pure: time
//! is a parameter (ms). Tokens are counted in billionths, in integers, so low rates and
//! 1 ms steps mix without floating-point drift (a rate is exact to 1e-6 per second).

/// Units of one token.
const UNIT: u64 = 1_000_000_000;

#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Units added per ms.
    per_ms: u64,
    burst: u64,
    tokens: u64,
    last_ms: u64,
}

impl TokenBucket {
    /// A full bucket. `burst` below 1 is raised to 1 (one attempt must fit).
    pub fn new(rate_per_s: f64, burst: f64, now_ms: u64) -> Self {
        let burst = (burst.max(1.0) * UNIT as f64) as u64;
        Self {
            // rate/s * UNIT / 1000 per ms; `as` saturates on absurd values.
            per_ms: (rate_per_s.max(0.0) * (UNIT / 1_000) as f64).round() as u64,
            burst,
            tokens: burst,
            last_ms: now_ms,
        }
    }

    fn refill(&mut self, now_ms: u64) {
        if now_ms > self.last_ms {
            let added = (now_ms - self.last_ms).saturating_mul(self.per_ms);
            self.tokens = self.tokens.saturating_add(added).min(self.burst);
            self.last_ms = now_ms;
        }
    }

    /// Takes a token if one is there.
    pub fn try_take(&mut self, now_ms: u64) -> bool {
        self.refill(now_ms);
        if self.tokens >= UNIT {
            self.tokens -= UNIT;
            true
        } else {
            false
        }
    }

    /// Whole tokens there now.
    pub fn available(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        self.tokens / UNIT
    }

    /// The earliest time a token will be there (now if one is; never with a zero rate,
    /// reported as `u64::MAX`).
    pub fn next_token_ms(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        if self.tokens >= UNIT {
            return now_ms;
        }
        if self.per_ms == 0 {
            return u64::MAX;
        }
        now_ms.saturating_add((UNIT - self.tokens).div_ceil(self.per_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_steady_rate() {
        let mut b = TokenBucket::new(100.0, 10.0, 0);
        let burst = (0..50).filter(|_| b.try_take(0)).count();
        assert_eq!(burst, 10);
        assert_eq!(b.next_token_ms(0), 10);
        // Over 10 s of 1 ms steps, exactly rate * time more attempts get through.
        let mut taken = 0;
        for t in 1..=10_000 {
            while b.try_take(t) {
                taken += 1;
            }
        }
        assert_eq!(taken, 1_000);
    }

    #[test]
    fn fractional_rates_do_not_drift() {
        let mut b = TokenBucket::new(0.5, 1.0, 0);
        assert!(b.try_take(0));
        assert!(!b.try_take(1_999));
        assert_eq!(b.next_token_ms(1_999), 2_000);
        assert!(b.try_take(2_000));
        let mut taken = 0;
        for t in 2_001..=62_000 {
            if b.try_take(t) {
                taken += 1;
            }
        }
        assert_eq!(taken, 30);
    }

    #[test]
    fn idle_time_fills_only_to_burst() {
        let mut b = TokenBucket::new(1_000.0, 5.0, 0);
        for _ in 0..5 {
            assert!(b.try_take(0));
        }
        let n = (0..100).filter(|_| b.try_take(1_000_000)).count();
        assert_eq!(n, 5);
    }
}
