//! Log lines that a flood of requests or attempts could repeat thousands of times a second
//! (a tarpit receiver holding the outbound connections, a full disk refusing every inbound
//! webhook) pass through a [`LogLimit`]: at most `burst` lines per window from one call
//! site, and the next line that passes says how many were left out meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};

/// A call site's budget of log lines: `burst` per `window_s` seconds.
#[derive(Debug)]
pub struct LogLimit {
    window_s: u64,
    burst: u64,
    /// The window's start (seconds since the epoch) and lines let through in it, packed:
    /// start << 20 | count.
    state: AtomicU64,
    suppressed: AtomicU64,
}

const COUNT_BITS: u32 = 20;

impl LogLimit {
    pub const fn new(window_s: u64, burst: u64) -> Self {
        Self {
            window_s,
            burst,
            state: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(lines left out since the last one let through)` if a line may be logged now.
    pub fn ready(&self) -> Option<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.ready_at(now)
    }

    fn ready_at(&self, now_s: u64) -> Option<u64> {
        let mask = (1u64 << COUNT_BITS) - 1;
        let mut current = self.state.load(Ordering::Relaxed);
        loop {
            let (start, count) = (current >> COUNT_BITS, current & mask);
            let next = if now_s >= start + self.window_s {
                (now_s << COUNT_BITS) | 1
            } else if count < self.burst {
                current + 1
            } else {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            match self.state.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(self.suppressed.swap(0, Ordering::Relaxed)),
                Err(seen) => current = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_per_window_then_the_count_of_what_was_left_out() {
        let limit = LogLimit::new(10, 3);
        let t = 1_000_000;
        assert_eq!(limit.ready_at(t), Some(0));
        assert_eq!(limit.ready_at(t), Some(0));
        assert_eq!(limit.ready_at(t + 9), Some(0));
        for _ in 0..23_170 {
            assert_eq!(limit.ready_at(t + 9), None);
        }
        assert_eq!(limit.ready_at(t + 10), Some(23_170));
        assert_eq!(limit.ready_at(t + 10), Some(0));
    }
}
