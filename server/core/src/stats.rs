//! Rolling statistics: counters and HDR latency histograms over sliding windows.
//!
//! A window is a ring of sub-windows ("buckets"), each tagged with the bucket number it
//! holds; a bucket whose tag is older than the window is treated as empty and reused. So the
//! "last hour" really is the last hour (give or take one bucket), not "since start".
//! Pure: every method takes `now_ms`. The snapshot types at the end are what Stats
//! answers, in hookd's own terms; `api` maps them to the wire.

use hdrhistogram::Histogram;

use crate::breaker::BreakerState;

/// Latencies are recorded in microseconds, clamped to this (7 days).
const MAX_LATENCY_US: u64 = 7 * 24 * 3600 * 1_000_000;

/// How finely a histogram's buckets divide each power of two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Two significant digits: within 1 %, about 16 KB per sub-window. For the totals.
    Fine,
    /// One significant digit: within 6.25 %, about 1.9 KB per sub-window. For each
    /// destination: with thousands of endpoints the fine kind cost four 16 KB histograms
    /// per endpoint in the first five minutes alone (hookd-loadtest, 2,000 endpoints, a
    /// 10 s run: 326 MB RSS against 171 MB with this).
    Coarse,
}

impl Precision {
    fn digits(self) -> u8 {
        match self {
            Self::Fine => 2,
            Self::Coarse => 1,
        }
    }
}

/// A counter over the last `buckets * bucket_ms` milliseconds.
#[derive(Debug, Clone)]
pub struct RollingCounter {
    bucket_ms: u64,
    /// How many buckets the window has.
    buckets: usize,
    /// The buckets, allocated at the first count: a destination that never counts (an
    /// idle one, or one whose dead letters are all it has left) costs no buckets.
    slots: Vec<(u64, u64)>,
}

impl RollingCounter {
    pub fn new(bucket_ms: u64, buckets: usize) -> Self {
        Self {
            bucket_ms,
            buckets: buckets.max(1),
            slots: Vec::new(),
        }
    }

    /// Bytes its buckets take on the heap (0 until it counts).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<(u64, u64)>()
    }

    pub fn add(&mut self, now_ms: u64, n: u64) {
        if self.slots.is_empty() {
            self.slots = vec![(u64::MAX, 0); self.buckets];
        }
        let bucket = now_ms / self.bucket_ms;
        let len = self.slots.len() as u64;
        let slot = &mut self.slots[(bucket % len) as usize];
        if slot.0 != bucket {
            *slot = (bucket, 0);
        }
        slot.1 += n;
    }

    /// Sum over the window ending at `now_ms`.
    pub fn sum(&self, now_ms: u64) -> u64 {
        let current = now_ms / self.bucket_ms;
        let len = self.buckets as u64;
        self.slots
            .iter()
            .filter(|(b, _)| *b != u64::MAX && *b <= current && current - *b < len)
            .map(|(_, n)| n)
            .sum()
    }

    /// Sum over the last `window_ms` (whole buckets) ending at `now_ms`.
    pub(crate) fn sum_over(&self, now_ms: u64, window_ms: u64) -> u64 {
        let current = now_ms / self.bucket_ms;
        let span = window_ms.div_ceil(self.bucket_ms).min(self.buckets as u64);
        self.slots
            .iter()
            .filter(|(b, _)| *b != u64::MAX && *b <= current && current - *b < span)
            .map(|(_, n)| n)
            .sum()
    }

    /// Each bucket's count over the window ending at `now_ms`, oldest first (0 for a
    /// bucket nothing was counted in).
    pub fn series(&self, now_ms: u64) -> Vec<u64> {
        let current = now_ms / self.bucket_ms;
        let len = self.buckets as u64;
        (0..len)
            .rev()
            .map(|back| {
                let Some(bucket) = current.checked_sub(back) else {
                    return 0;
                };
                match self.slots.get((bucket % len) as usize) {
                    Some((b, n)) if *b == bucket => *n,
                    _ => 0,
                }
            })
            .collect()
    }

    /// Average per second over the window.
    pub(crate) fn rate_per_s(&self, now_ms: u64) -> f64 {
        let window_s = (self.bucket_ms * self.buckets as u64) as f64 / 1000.0;
        self.sum(now_ms) as f64 / window_s
    }
}

/// An HDR histogram over the last `buckets * bucket_ms` milliseconds. Buckets are allocated
/// on first use, so an idle destination costs almost nothing.
#[derive(Debug, Clone)]
pub struct RollingHistogram {
    bucket_ms: u64,
    precision: Precision,
    /// How many sub-windows the window has.
    buckets: usize,
    /// The sub-windows, allocated at the first record (then each histogram at its own).
    slots: Vec<Option<(u64, Histogram<u32>)>>,
}

impl RollingHistogram {
    pub fn new(bucket_ms: u64, buckets: usize) -> Self {
        Self::with_precision(bucket_ms, buckets, Precision::Fine)
    }

    pub fn with_precision(bucket_ms: u64, buckets: usize, precision: Precision) -> Self {
        Self {
            bucket_ms,
            precision,
            buckets: buckets.max(1),
            slots: Vec::new(),
        }
    }

    /// Bytes its sub-windows' table takes on the heap, histograms aside (0 until it
    /// records).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<(u64, Histogram<u32>)>>()
    }

    pub fn record(&mut self, now_ms: u64, micros: u64) {
        if self.slots.is_empty() {
            self.slots = vec![None; self.buckets];
        }
        let bucket = now_ms / self.bucket_ms;
        let len = self.slots.len() as u64;
        let slot = &mut self.slots[(bucket % len) as usize];
        let fresh = !matches!(slot, Some((b, _)) if *b == bucket);
        if fresh {
            match Histogram::new_with_bounds(1, MAX_LATENCY_US, self.precision.digits()) {
                Ok(h) => *slot = Some((bucket, h)),
                Err(_) => return,
            }
        }
        if let Some((_, h)) = slot {
            h.saturating_record(micros.clamp(1, MAX_LATENCY_US));
        }
    }

    /// Percentiles over the window ending at `now_ms`.
    pub fn summary(&self, now_ms: u64) -> LatencySummary {
        let current = now_ms / self.bucket_ms;
        let len = self.buckets as u64;
        let mut merged: Option<Histogram<u32>> = None;
        for (bucket, h) in self.slots.iter().flatten() {
            if *bucket > current || current - *bucket >= len {
                continue;
            }
            match &mut merged {
                None => merged = Some(h.clone()),
                Some(m) => {
                    // Same bounds everywhere, so adding cannot fail; ignore rather than panic.
                    let _ = m.add(h);
                }
            }
        }
        merged.as_ref().map(summarize).unwrap_or_default()
    }
}

impl RollingHistogram {
    /// Each sub-window of the window ending at `now_ms`, oldest first: its start (unix ms)
    /// and its percentiles (all zero where nothing was recorded). What the console's
    /// latency charts draw.
    pub fn series(&self, now_ms: u64) -> Vec<(u64, LatencySummary)> {
        let current = now_ms / self.bucket_ms;
        let len = self.buckets as u64;
        (0..len)
            .rev()
            .filter_map(|back| current.checked_sub(back))
            .map(|bucket| {
                let slot = self.slots.get((bucket % len) as usize);
                let summary = match slot {
                    Some(Some((b, h))) if *b == bucket => summarize(h),
                    _ => LatencySummary::default(),
                };
                (bucket * self.bucket_ms, summary)
            })
            .collect()
    }
}

fn summarize(h: &Histogram<u32>) -> LatencySummary {
    if h.is_empty() {
        return LatencySummary::default();
    }
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    LatencySummary {
        count: h.len(),
        p50_ms: ms(0.50),
        p95_ms: ms(0.95),
        p99_ms: ms(0.99),
        p999_ms: ms(0.999),
        max_ms: h.max() as f64 / 1000.0,
    }
}

/// The engine's own figures: commits, their size and latency.
#[derive(Debug, Clone)]
pub struct CommitStats {
    commits: RollingCounter,
    requests: RollingCounter,
    latency_1h: RollingHistogram,
}

impl Default for CommitStats {
    fn default() -> Self {
        Self {
            commits: RollingCounter::new(1_000, 60),
            requests: RollingCounter::new(1_000, 60),
            latency_1h: RollingHistogram::new(300_000, 12),
        }
    }
}

impl CommitStats {
    pub fn committed(&mut self, now_ms: u64, requests: u64, micros: u64) {
        self.commits.add(now_ms, 1);
        self.requests.add(now_ms, requests);
        self.latency_1h.record(now_ms, micros);
    }

    pub fn fill(&self, now_ms: u64, out: &mut StorageSnapshot) {
        let commits = self.commits.sum(now_ms);
        out.commits_per_s = self.commits.rate_per_s(now_ms);
        out.requests_per_commit = if commits == 0 {
            0.0
        } else {
            self.requests.sum(now_ms) as f64 / commits as f64
        };
        out.commit_latency_last_hour = self.latency_1h.summary(now_ms);
    }
}

/// The time-windowed statistics of one destination (or of all).
#[derive(Debug, Clone)]
pub struct Activity {
    pub enqueued: RollingCounter,
    pub completed: RollingCounter,
    pub delivered: RollingCounter,
    pub failed: RollingCounter,
    /// Enqueues by the minute over 10 minutes (the consumer-rate alert).
    pub(crate) enqueued_10m: RollingCounter,
    /// Milliseconds from enqueue to delivery, summed by the minute over 5 minutes (the
    /// average-latency alert, with `delivered`).
    pub(crate) latency_sum_ms: RollingCounter,
    /// Push attempts and their successes by the minute over 5 minutes (the success-rate
    /// alert).
    pub(crate) attempts_5m: RollingCounter,
    pub(crate) successes_5m: RollingCounter,
    pub latency_1h: RollingHistogram,
    pub latency_24h: RollingHistogram,
}

impl Default for Activity {
    /// The totals: fine histograms, the 24 h window sliding by the hour.
    fn default() -> Self {
        Self::new(Precision::Fine)
    }
}

/// An hour in 12 sub-windows of 5 min.
pub(crate) fn last_hour(precision: Precision) -> RollingHistogram {
    RollingHistogram::with_precision(300_000, 12, precision)
}

/// A day: by the hour for the totals; in 6 sub-windows of 4 h for each destination (the
/// window then slides in 4 h steps), to keep a busy destination's day of histograms near
/// 34 KB.
pub(crate) fn last_day(precision: Precision) -> RollingHistogram {
    match precision {
        Precision::Fine => RollingHistogram::with_precision(3_600_000, 24, precision),
        Precision::Coarse => RollingHistogram::with_precision(4 * 3_600_000, 6, precision),
    }
}

impl Activity {
    pub fn new(precision: Precision) -> Self {
        Self {
            // Rates over the last minute, in 1 s buckets.
            enqueued: RollingCounter::new(1_000, 60),
            completed: RollingCounter::new(1_000, 60),
            // Counts over the last hour, in 1 min buckets.
            delivered: RollingCounter::new(60_000, 60),
            failed: RollingCounter::new(60_000, 60),
            enqueued_10m: RollingCounter::new(60_000, 10),
            latency_sum_ms: RollingCounter::new(60_000, 5),
            attempts_5m: RollingCounter::new(60_000, 5),
            successes_5m: RollingCounter::new(60_000, 5),
            latency_1h: last_hour(precision),
            latency_24h: last_day(precision),
        }
    }

    /// One destination's: coarse histograms (see [`Precision::Coarse`]).
    pub fn per_destination() -> Self {
        Self::new(Precision::Coarse)
    }

    /// Bytes its counters and histograms' tables take on the heap: 0 for one that has
    /// counted nothing.
    pub fn heap_bytes(&self) -> usize {
        self.latency_1h.heap_bytes()
            + self.latency_24h.heap_bytes()
            + [
                &self.enqueued,
                &self.completed,
                &self.delivered,
                &self.failed,
                &self.enqueued_10m,
                &self.latency_sum_ms,
                &self.attempts_5m,
                &self.successes_5m,
            ]
            .iter()
            .map(|c| c.heap_bytes())
            .sum::<usize>()
    }

    pub fn enqueued(&mut self, now_ms: u64) {
        self.enqueued.add(now_ms, 1);
        self.enqueued_10m.add(now_ms, 1);
    }

    /// A push attempt ended.
    pub fn attempted(&mut self, now_ms: u64, success: bool) {
        self.attempts_5m.add(now_ms, 1);
        if success {
            self.successes_5m.add(now_ms, 1);
        }
    }

    /// A message completed successfully, `latency_us` microseconds after it was enqueued.
    pub fn delivered(&mut self, now_ms: u64, latency_us: u64) {
        self.completed.add(now_ms, 1);
        self.delivered.add(now_ms, 1);
        self.latency_sum_ms.add(now_ms, latency_us / 1_000);
        self.latency_1h.record(now_ms, latency_us);
        self.latency_24h.record(now_ms, latency_us);
    }

    /// A message was dead-lettered.
    pub fn failed(&mut self, now_ms: u64) {
        self.completed.add(now_ms, 1);
        self.failed.add(now_ms, 1);
    }

    /// The alert figures this activity gives (the rest come from the index).
    pub fn alert_figures(
        &self,
        now_ms: u64,
        config: &crate::alerts::AlertConfig,
    ) -> crate::alerts::Figures {
        const MIN: u64 = 60_000;
        let attempts = self.attempts_5m.sum_over(now_ms, 5 * MIN);
        let delivered_5m = self.delivered.sum_over(now_ms, 5 * MIN);
        let enqueued = self.enqueued_10m.sum_over(now_ms, 10 * MIN);
        let completed =
            self.delivered.sum_over(now_ms, 10 * MIN) + self.failed.sum_over(now_ms, 10 * MIN);
        crate::alerts::Figures {
            success_rate: (attempts > 0 && attempts >= config.success_rate_min_attempts)
                .then(|| self.successes_5m.sum_over(now_ms, 5 * MIN) as f64 / attempts as f64),
            delivery_latency_ms: (delivered_5m > 0).then(|| {
                self.latency_sum_ms.sum_over(now_ms, 5 * MIN) as f64 / delivered_5m as f64
            }),
            consumer_rate: (enqueued > 0 && enqueued >= config.consumer_rate_min_enqueued)
                .then(|| completed as f64 / enqueued as f64),
            dead_letter_growth: self.failed.sum_over(now_ms, 15 * MIN),
            ..Default::default()
        }
    }

    pub fn fill(&self, now_ms: u64, out: &mut DestinationSnapshot) {
        out.delivered_last_hour = self.delivered.sum(now_ms);
        out.failed_last_hour = self.failed.sum(now_ms);
        out.enqueue_rate_per_s = self.enqueued.rate_per_s(now_ms);
        out.completion_rate_per_s = self.completed.rate_per_s(now_ms);
        out.latency_last_hour = self.latency_1h.summary(now_ms);
        out.latency_last_24h = self.latency_24h.summary(now_ms);
    }
}

/// A push destination's attempts: how many, how many succeeded, how long they took.
#[derive(Debug, Clone)]
pub struct AttemptStats {
    pub latency_1h: RollingHistogram,
    pub latency_24h: RollingHistogram,
    pub attempts: RollingCounter,
    pub successes: RollingCounter,
}

impl AttemptStats {
    /// Coarse histograms (see [`Precision::Coarse`]); counts by the minute over an hour.
    pub fn new() -> Self {
        Self {
            latency_1h: last_hour(Precision::Coarse),
            latency_24h: last_day(Precision::Coarse),
            attempts: RollingCounter::new(60_000, 60),
            successes: RollingCounter::new(60_000, 60),
        }
    }

    pub fn record(&mut self, now_ms: u64, latency_us: u64, success: bool) {
        self.attempts.add(now_ms, 1);
        if success {
            self.successes.add(now_ms, 1);
        }
        self.latency_1h.record(now_ms, latency_us);
        self.latency_24h.record(now_ms, latency_us);
    }
}

impl Default for AttemptStats {
    fn default() -> Self {
        Self::new()
    }
}

/// Percentiles of a latency window, in milliseconds; all zero when nothing was recorded.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// A push destination's attempt latency by sub-window, oldest first: (start unix ms,
/// percentiles).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencySeries {
    /// The last hour in 5-minute windows.
    pub hour: Vec<(u64, LatencySummary)>,
    /// The last day in 4-hour windows.
    pub day: Vec<(u64, LatencySummary)>,
}

/// One destination's figures and, for a push destination when asked, its latency series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DestinationDetail {
    pub stats: DestinationSnapshot,
    pub series: Option<LatencySeries>,
}

/// One destination's figures (or the total's) at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DestinationSnapshot {
    /// The destination key (`endpoint:NAME`, `url:ORIGIN`, `queue:NAME`); `*` for the total.
    pub destination: String,
    /// Ready now, or scheduled for a first attempt later.
    pub pending: u64,
    pub awaiting_retry: u64,
    /// Leased to a consumer or being delivered.
    pub in_flight: u64,
    pub dead_letter: u64,
    pub delivered_last_hour: u64,
    pub failed_last_hour: u64,
    /// Age of the oldest live message.
    pub oldest_pending_age_ms: u64,
    /// Per second over the last minute.
    pub enqueue_rate_per_s: f64,
    pub completion_rate_per_s: f64,
    /// Enqueue to completion.
    pub latency_last_hour: LatencySummary,
    pub latency_last_24h: LatencySummary,
    /// Push destinations only.
    pub push: Option<PushSnapshot>,
    /// Long-poll Receives waiting for a message.
    pub waiting_receives: u64,
    /// Bytes of its live messages' records (what the byte watermarks measure).
    pub live_bytes: u64,
    /// Where it stands against its watermarks (for the total: the global ones).
    pub backpressure: crate::backpressure::Level,
    /// FIFO lanes held (holding messages or blocked), and those blocked by a dead letter.
    pub fifo_lanes: u64,
    pub blocked_lanes: u64,
}

/// How deliveries to one push destination are going.
#[derive(Debug, Clone, PartialEq)]
pub struct PushSnapshot {
    /// Why hookd disabled it (410 Gone), if it did.
    pub disabled: Option<String>,
    pub breaker: BreakerState,
    /// The cooldown of the current (or next) opening.
    pub breaker_cooldown_ms: u64,
    pub breaker_openings: u64,
    pub consecutive_failures: u32,
    /// Retry-After: nothing is sent before this time, while it is in the future.
    pub paused_until_ms: Option<u64>,
    pub in_flight: u64,
    pub max_in_flight: u64,
    pub rate_limit_per_s: f64,
    /// p95 attempt latency over the last hour is above the slow threshold.
    pub slow: bool,
    pub attempts_last_hour: u64,
    /// 1.0 with no attempts.
    pub success_rate_last_hour: f64,
    pub attempt_latency_last_hour: LatencySummary,
    pub attempt_latency_last_24h: LatencySummary,
}

/// How the single writer is doing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StorageSnapshot {
    pub commits_per_s: f64,
    pub requests_per_commit: f64,
    pub commit_latency_last_hour: LatencySummary,
    pub live_messages: u64,
    pub queued_write_bytes: u64,
    /// Destinations held in memory (busy, and up to 1,000 idle ones).
    pub destinations: u64,
    /// Bytes the write-ahead log's segments hold: the message heap (live messages'
    /// records, completed ones' within retention, the log since the checkpoint).
    pub log_bytes: u64,
    /// Segments of the log.
    pub log_segments: u64,
    /// Live messages' records in the log, in bytes.
    pub log_live_bytes: u64,
    /// Payloads of messages created since this time are readable (0: unknown).
    pub log_retained_from_ms: u64,
    /// Bytes compaction is to free, the segments it works on, and the records it copied
    /// forward since start.
    pub log_reclaimable_bytes: u64,
    pub log_compacting_segments: u64,
    pub log_compacted_records: u64,
    /// Segments deleted, and their bytes, since start.
    pub log_deleted_segments: u64,
    pub log_freed_bytes: u64,
    /// Purged records whose bytes are still to be overwritten in the log, and records and
    /// bytes overwritten since start.
    pub purge_pending_records: u64,
    pub purged_records: u64,
    pub purged_bytes: u64,
    /// Since the last checkpoint (or the start, if none yet).
    pub checkpoint_age_ms: u64,
    /// Log applied to redb since the last checkpoint: what a restart would replay.
    pub log_since_checkpoint_bytes: u64,
    /// How long the last checkpoint's commit took.
    pub last_checkpoint_ms: u64,
    /// At the last start: how long replaying the log took, and how many bytes it read.
    pub replay_ms: u64,
    pub replayed_bytes: u64,
    /// Space hookd may still write on the data directory's file system, and the reserve
    /// below which new events are refused.
    pub disk_available_bytes: u64,
    pub disk_reserve_bytes: u64,
}

/// Everything Stats answers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatsSnapshot {
    pub total: DestinationSnapshot,
    /// One page, in key order.
    pub destinations: Vec<DestinationSnapshot>,
    /// The key to ask for the next page after, if there is one.
    pub next_page: Option<String>,
    pub uptime_ms: u64,
    pub storage: StorageSnapshot,
    pub alerts: Vec<AlertSnapshot>,
    /// Messages delivered, and dead-lettered, in each minute of the last hour over all
    /// destinations, oldest first (the console's chart).
    pub delivered_by_minute: Vec<u64>,
    pub failed_by_minute: Vec<u64>,
    /// A tenant's Stats: what it uses of each quota it has.
    pub quotas: Vec<QuotaUse>,
    /// What the history keeps, and since when (issue #53, 4).
    pub retention: RetentionSnapshot,
}

/// How long a tenant's completed messages are kept (see the engine's `retention`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionSnapshot {
    /// The tenant's setting (ms; 0: the server's).
    pub tenant_ms: u64,
    /// The server's: summaries, payloads, and the log's disk budget.
    pub completed_ms: u64,
    pub log_ms: u64,
    pub budget_bytes: u64,
    /// Its payloads (at destinations without a setting) created since are readable.
    pub kept_since_ms: u64,
    /// Destinations that set their own: key, setting (ms), readable since.
    pub destinations: Vec<(String, u64, u64)>,
}

/// What a tenant uses of one of its quotas (`hookd_core::quota`), against its limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaUse {
    /// The quota's field (`max_live_messages`...).
    pub quota: &'static str,
    pub used: u64,
    pub limit: u64,
}

/// One alert's state, as Stats and `/metrics` show it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AlertSnapshot {
    pub alert: &'static str,
    pub destination: String,
    pub level: &'static str,
    pub since_ms: u64,
    pub value: f64,
    pub warning: f64,
    pub critical: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counters_series_is_each_bucket_oldest_first() {
        let mut c = RollingCounter::new(60_000, 4);
        c.add(0, 1);
        c.add(60_000, 2);
        c.add(61_000, 1);
        c.add(180_000, 5);
        assert_eq!(c.series(180_000), vec![1, 3, 0, 5]);
        // A minute on: the oldest bucket left the window, the new one is empty.
        assert_eq!(c.series(240_000), vec![3, 0, 5, 0]);
        // Early in the clock: buckets before 0 count nothing.
        assert_eq!(RollingCounter::new(60_000, 3).series(0), vec![0, 0, 0]);
    }

    /// Issue #49, 7: a destination that only holds dead letters (an ad-hoc origin the
    /// guard refused, say: 20,000 of them took 220 MB) keeps its key and counts, and its
    /// statistics cost nothing until it counts again.
    #[test]
    fn an_idle_destinations_statistics_take_no_heap_until_they_count() {
        let mut a = Activity::per_destination();
        assert_eq!(a.heap_bytes(), 0);
        assert_eq!(a.latency_24h.summary(5_000).count, 0);
        assert_eq!(a.latency_1h.series(10_000_000).len(), 12);
        assert_eq!(a.enqueued.sum(5_000), 0);
        assert_eq!(a.delivered.series(5_000), vec![0; 60]);
        assert!(a.enqueued.rate_per_s(5_000).abs() < 1e-12);
        a.enqueued(1_000);
        assert!(a.heap_bytes() > 0);
        a.delivered(1_000, 2_000);
        assert_eq!(a.latency_1h.summary(1_500).count, 1);
        assert_eq!(a.enqueued.sum(1_500), 1);
    }

    #[test]
    fn counter_forgets_what_left_the_window() {
        let mut c = RollingCounter::new(1_000, 60);
        c.add(0, 5);
        c.add(59_999, 1);
        assert_eq!(c.sum(59_999), 6);
        assert_eq!(c.sum(60_000), 1);
        assert_eq!(c.sum(200_000), 0);
        c.add(200_000, 2);
        assert_eq!(c.sum(200_500), 2);
        assert!((c.rate_per_s(200_500) - 2.0 / 60.0).abs() < 1e-9);
    }

    #[test]
    fn histogram_window_slides() {
        let mut h = RollingHistogram::new(300_000, 12);
        for i in 1..=100u64 {
            h.record(0, i * 1_000);
        }
        let s = h.summary(1_000);
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() <= 1.0, "{}", s.p50_ms);
        assert!((s.p99_ms - 99.0).abs() <= 1.5, "{}", s.p99_ms);
        h.record(3_600_000, 7_000);
        let later = h.summary(3_600_000);
        assert_eq!(later.count, 1, "the first bucket is an hour old");
        assert!((later.max_ms - 7.0).abs() < 0.1);
    }

    #[test]
    fn series_has_one_point_per_sub_window_oldest_first() {
        let mut h = RollingHistogram::new(300_000, 12);
        h.record(600_000, 5_000); // sub-window 2
        h.record(3_300_000, 9_000); // sub-window 11, the current one
        h.record(3_300_100, 11_000);
        let series = h.series(3_400_000);
        assert_eq!(series.len(), 12);
        assert_eq!(series[0].0, 0);
        assert_eq!(series[11].0, 3_300_000);
        assert_eq!(series[2].1.count, 1);
        assert!((series[2].1.p50_ms - 5.0).abs() < 0.1);
        assert_eq!(series[11].1.count, 2);
        assert!((series[11].1.max_ms - 11.0).abs() < 0.1);
        let empty: Vec<_> = series.iter().filter(|(_, s)| s.count == 0).collect();
        assert_eq!(empty.len(), 10);
        // An hour later the old points have left the window; early in time, no negative
        // sub-windows are made up.
        assert!(h.series(7_300_000).iter().all(|(_, s)| s.count == 0));
        assert_eq!(h.series(400_000).len(), 2);
    }

    #[test]
    fn coarse_histograms_stay_within_their_precision() {
        let mut h = last_hour(Precision::Coarse);
        for i in 1..=1000u64 {
            h.record(0, i * 1_000);
        }
        let s = h.summary(1_000);
        assert_eq!(s.count, 1000);
        for (got, want) in [(s.p50_ms, 500.0), (s.p99_ms, 990.0), (s.max_ms, 1000.0)] {
            assert!(got >= want * 0.99 && got <= want * 1.07, "{got} vs {want}");
        }
        // A day in 4 h steps: a sample is counted until its sub-window is a day old.
        let mut d = last_day(Precision::Coarse);
        d.record(0, 5_000);
        assert_eq!(d.summary(23 * 3_600_000).count, 1);
        assert_eq!(d.summary(24 * 3_600_000).count, 0);
    }
}
