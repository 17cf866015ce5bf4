//! When each call of an open loop is meant to leave, and the loop that sends it then.
//!
//! Coordinated omission (Gil Tene; wrk2): a load generator that waits for a slow answer
//! before sending the next request stops offering load exactly when the server is slow,
//! and the stall shows up as one slow sample instead of the many requests that would have
//! waited behind it. Here every call has an intended send time fixed in advance by the
//! rate; a call that cannot leave on time (no free slot) still measures its latency from
//! that intended time, so a stall is charged to every call that should have been sent
//! during it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::scenario::Shape;

impl Shape {
    /// When the `k`-th event (0-based, fractional allowed) of a run of length `run` is due,
    /// from the start; `None` if never (a falling ramp that never gets there).
    pub fn time_of(&self, k: f64, run: Duration) -> Option<Duration> {
        let secs = match *self {
            Self::Constant(rate) => k / rate,
            Self::Ramp(from, to) => {
                // rate(t) = from + slope*t; events by t = from*t + slope*t^2/2 = k.
                let slope = (to - from) / run.as_secs_f64();
                if slope.abs() < 1e-12 {
                    k / from
                } else {
                    let disc = from * from + 2.0 * slope * k;
                    if disc < 0.0 {
                        return None;
                    }
                    (disc.sqrt() - from) / slope
                }
            }
            Self::Bursty { rate, on, off } => {
                let per_burst = rate * on.as_secs_f64();
                let cycle = (k / per_burst).floor();
                cycle * (on + off).as_secs_f64() + (k - cycle * per_burst) / rate
            }
        };
        (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
    }

    /// The offered rate at `t` of a run of length `run` (events/s), for reports.
    pub fn rate_at(&self, t: Duration, run: Duration) -> f64 {
        match *self {
            Self::Constant(rate) => rate,
            Self::Ramp(from, to) => {
                from + (to - from) * (t.as_secs_f64() / run.as_secs_f64()).min(1.0)
            }
            Self::Bursty { rate, on, off } => {
                let phase = t.as_secs_f64() % (on + off).as_secs_f64();
                if phase < on.as_secs_f64() { rate } else { 0.0 }
            }
        }
    }
}

/// One call of an open loop.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// 0-based.
    pub index: u64,
    /// When the schedule meant it to leave: latency is measured from here.
    pub intended: Instant,
}

/// Sends calls of `per_call` events at the times `shape` gives, for `run`, never more than
/// `max_outstanding` at once; returns how many calls were sent. `send` is spawned per
/// call and measures its own latency from [`Call::intended`].
pub async fn open_loop<F, Fut>(
    shape: &Shape,
    per_call: usize,
    run: Duration,
    max_outstanding: usize,
    send: F,
) -> u64
where
    F: Fn(Call) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    let slots = Arc::new(Semaphore::new(max_outstanding));
    let mut tasks = tokio::task::JoinSet::new();
    let mut index = 0u64;
    while let Some(due) = shape.time_of(index as f64 * per_call as f64, run) {
        if due >= run {
            break;
        }
        let intended = start + due;
        tokio::time::sleep_until(intended).await;
        // Waiting here is what a closed loop would hide; the call still counts from
        // `intended`.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let call = send(Call { index, intended });
        tasks.spawn(async move {
            call.await;
            drop(permit);
        });
        // Reap finished calls so the set does not grow with the run.
        while tasks.try_join_next().is_some() {}
        index += 1;
    }
    // The run lasts its length even when the schedule has nothing more to send (a burst's
    // silence at the end).
    tokio::time::sleep_until(start + run).await;
    while tasks.join_next().await.is_some() {}
    index
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn secs(d: Option<Duration>) -> f64 {
        d.unwrap().as_secs_f64()
    }

    #[test]
    fn constant_and_bursty_times() {
        let c = Shape::Constant(100.0);
        assert!((secs(c.time_of(250.0, Duration::ZERO)) - 2.5).abs() < 1e-9);
        let b = Shape::Bursty {
            rate: 1000.0,
            on: Duration::from_secs(1),
            off: Duration::from_secs(4),
        };
        // 1000 events in the first second, then silence until 5 s.
        assert!((secs(b.time_of(999.0, Duration::ZERO)) - 0.999).abs() < 1e-9);
        assert!((secs(b.time_of(1000.0, Duration::ZERO)) - 5.0).abs() < 1e-9);
        assert!((secs(b.time_of(1500.0, Duration::ZERO)) - 5.5).abs() < 1e-9);
        assert_eq!(b.rate_at(Duration::from_millis(4_500), Duration::ZERO), 0.0);
    }

    #[test]
    fn a_ramp_offers_the_area_under_its_rate() {
        // 100/s to 300/s over 10 s: 2,000 events in all; by 2.5 s, 100*2.5 + 20*2.5^2/2.
        let run = Duration::from_secs(10);
        let r = Shape::Ramp(100.0, 300.0);
        assert!((secs(r.time_of(2_000.0, run)) - 10.0).abs() < 1e-6);
        assert!((secs(r.time_of(312.5, run)) - 2.5).abs() < 1e-6);
        // A falling ramp offers the same area.
        let r = Shape::Ramp(300.0, 100.0);
        assert!((secs(r.time_of(2_000.0, run)) - 10.0).abs() < 1e-6);
    }

    /// A server that answers in 1 ms except for one 1 s stall, at 100 calls/s for 3 s:
    /// measured from the intended time, the ~100 calls due during the stall are charged
    /// with their wait (up to 1 s, ~0.5 s on average); measured from the actual send, as a
    /// closed loop would, the stall is one sample.
    #[tokio::test(start_paused = true)]
    async fn latency_counts_from_the_intended_time() {
        let server = Arc::new(tokio::sync::Mutex::new(()));
        let corrected = Arc::new(Mutex::new(Vec::new()));
        let service = Arc::new(Mutex::new(Vec::new()));
        let start = Instant::now();
        let sent = open_loop(
            &Shape::Constant(100.0),
            1,
            Duration::from_secs(3),
            // One call at a time, like a connection that serializes requests.
            1,
            |call| {
                let (server, corrected, service) =
                    (server.clone(), corrected.clone(), service.clone());
                async move {
                    let began = Instant::now();
                    let _one = server.lock().await;
                    let stall = call.index == 100;
                    tokio::time::sleep(if stall {
                        Duration::from_secs(1)
                    } else {
                        Duration::from_millis(1)
                    })
                    .await;
                    let done = Instant::now();
                    corrected.lock().unwrap().push(done - call.intended);
                    service.lock().unwrap().push(done - began);
                }
            },
        )
        .await;
        assert_eq!(sent, 300);
        // The loop kept its schedule after the stall: it ended about on time.
        assert!(Instant::now() - start < Duration::from_millis(3_100));
        let over =
            |v: &[Duration], ms| v.iter().filter(|d| **d > Duration::from_millis(ms)).count();
        let corrected = corrected.lock().unwrap().clone();
        let service = service.lock().unwrap().clone();
        assert_eq!(
            over(&service, 100),
            1,
            "uncorrected: the stall is one sample"
        );
        assert!(
            over(&corrected, 100) >= 90,
            "corrected: {} calls over 100 ms",
            over(&corrected, 100)
        );
        let mean = corrected.iter().map(Duration::as_secs_f64).sum::<f64>() / 300.0;
        assert!(mean > 0.1, "mean {mean}");
    }
}
