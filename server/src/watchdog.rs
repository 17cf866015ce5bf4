//! The service manager's watchdog (systemd's `WatchdogSec=`): hookd sends `WATCHDOG=1`
//! only while its engine thread still finishes rounds, so a wedged engine (or a runtime
//! that no longer runs timers) is restarted by systemd instead of answering health checks
//! forever while storing nothing.
//!
//! Every quarter of the watchdog timeout hookd asks the engine for a round (`Command::Ping`,
//! answered after the round's log sync); an answer within the quarter, success or refusal,
//! is a beat. Between stores (starting, or reopening after a storage failure) there is no
//! engine to ask and the beat is sent as long as the runtime runs: those phases end on
//! their own timers, and a store that never opens is systemd's start timeout to judge.
//! With the ticks a quarter apart, a healthy hookd leaves at most half the timeout between
//! two beats.

use std::future::Future;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

/// The tick (and the time the engine has to answer) for a watchdog timeout.
pub(crate) fn period(timeout: Duration) -> Duration {
    (timeout / 4).max(Duration::from_millis(1))
}

/// Runs until dropped: every `period`, `probe()` names what to wait for (`None`: no engine,
/// beat anyway) and `beat()` is called when it finished within `period`.
pub(crate) async fn keep_alive<P, F>(period: Duration, mut probe: P, mut beat: impl FnMut())
where
    P: FnMut() -> Option<F>,
    F: Future<Output = ()>,
{
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut silent_since: Option<Instant> = None;
    loop {
        ticks.tick().await;
        let answered = match probe() {
            None => true,
            Some(answer) => tokio::time::timeout(period, answer).await.is_ok(),
        };
        if answered {
            beat();
            if let Some(since) = silent_since.take() {
                tracing::warn!(
                    silent_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "the engine answers the watchdog again"
                );
            }
        } else if silent_since.is_none() {
            silent_since = Some(Instant::now());
            tracing::error!(
                waited_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX),
                "the engine did not finish a round in time; no watchdog notification until it does (the service manager restarts hookd at WatchdogSec)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Beats counted over `ticks` periods of a paused clock, with `answer_after` the time the
    /// probe takes (`None`: never answers).
    async fn beats(ticks: u32, answer_after: Option<Duration>) -> usize {
        let period = Duration::from_secs(5);
        let count = Arc::new(AtomicUsize::new(0));
        let counter = count.clone();
        let task = tokio::spawn(keep_alive(
            period,
            move || {
                Some(async move {
                    match answer_after {
                        Some(d) => tokio::time::sleep(d).await,
                        None => std::future::pending().await,
                    }
                })
            },
            move || {
                counter.fetch_add(1, Ordering::SeqCst);
            },
        ));
        tokio::time::sleep(period * ticks).await;
        task.abort();
        count.load(Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn an_engine_that_answers_in_time_beats_every_period() {
        let n = beats(20, Some(Duration::from_secs(1))).await;
        assert!((19..=20).contains(&n), "{n} beats in 20 periods");
    }

    #[tokio::test(start_paused = true)]
    async fn a_wedged_or_too_slow_engine_never_beats() {
        assert_eq!(beats(20, None).await, 0);
        assert_eq!(beats(20, Some(Duration::from_secs(6))).await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn without_an_engine_the_runtime_beats_alone() {
        let count = Arc::new(AtomicUsize::new(0));
        let counter = count.clone();
        let task = tokio::spawn(keep_alive(
            Duration::from_secs(1),
            || None::<std::future::Ready<()>>,
            move || {
                counter.fetch_add(1, Ordering::SeqCst);
            },
        ));
        tokio::time::sleep(Duration::from_millis(9_500)).await;
        task.abort();
        assert_eq!(count.load(Ordering::SeqCst), 10);
    }

    #[test]
    fn the_tick_is_a_quarter_of_the_timeout() {
        assert_eq!(
            period(Duration::from_secs(30)),
            Duration::from_millis(7_500)
        );
        assert_eq!(period(Duration::ZERO), Duration::from_millis(1));
    }
}
