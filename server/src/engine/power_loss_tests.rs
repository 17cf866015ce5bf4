//! Power cuts at every sync of a busy engine: nothing acknowledged is ever lost, and the
//! file always opens.
//!
//! The engine runs on a [`PowerLossDisk`] while tasks enqueue (unary and batches, to a pull
//! queue and a push endpoint), consumers lease, Ack and Nack, and a fake dispatcher reports
//! push outcomes (delivered, retry, permanent). Every operation hookd answered with
//! success goes into a log. At the start of each sync, the disk hands the image a power
//! cut at that instant would leave (only synced bytes; every other cut also with a random
//! subset of the unsynced writes) to a checker, together with how long the log was: all
//! of those operations were answered before this sync began, so their data must be in the
//! image. The checker opens the image as hookd would after a restart (format check,
//! recovery, the engine starting on it) and looks for each operation.
//!
//! A hookd that answered before its data was synced (e.g. a commit with less than
//! `Durability::Immediate`) fails this test: the answered operation is missing from the
//! images of the syncs that follow.
//!
//! `HOOKD_CRASH_POINTS` sets how many cut images are checked (default 1,000) and
//! `HOOKD_CRASH_SEED` the seed of the first run (default: random, printed on failure).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use super::NewMessage;
use super::{EngineConfig, EngineHandle};
use crate::clock::{Clock, SystemClock};
use crate::delivery::{AttemptReport, Verdict};
use crate::destination::Destination;
use crate::ids::{LeaseId, MessageId};
use crate::retry::RetryPolicy;
use crate::store::power_loss::PowerLossDisk;
use crate::store::{EndpointRecord, HistoryRecord, MessageRecord, Store};

/// An operation hookd answered with success.
#[derive(Debug, Clone, Copy)]
enum Answered {
    Enqueued(MessageId),
    Acked(LeaseId),
    Nacked(LeaseId),
}

/// A cut image and how many answered operations precede it.
struct Cut {
    sync: u64,
    answered: usize,
    torn: bool,
    image: Vec<u8>,
}

const CACHE: usize = 1 << 20;
const PRODUCERS: usize = 3;
const ROUNDS_PER_PRODUCER: usize = 40;
/// Wall-clock bound of one run's traffic (the test never sleeps to synchronise).
const RUN_LIMIT: Duration = Duration::from_secs(60);

fn config(seed: u64) -> EngineConfig {
    EngineConfig {
        retry: RetryPolicy {
            max_attempts: 4,
            base_ms: 1,
            cap_ms: 4,
        },
        delivery: crate::config::DeliveryConfig::default(),
        max_queued_write_bytes: 64 << 20,
        idempotency_retention_ms: 24 * 3_600_000,
        completed_retention_ms: 24 * 3_600_000,
        max_commit_batch: 8_192,
        rng_seed: Some(seed),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn no_answered_operation_is_lost_at_any_power_cut() {
    let target = env_u64("HOOKD_CRASH_POINTS").unwrap_or(1_000) as usize;
    let first_seed = env_u64("HOOKD_CRASH_SEED").unwrap_or_else(|| rand::rng().random());
    let mut checked = 0;
    let mut totals = [0usize; 4];
    let mut run = 0;
    while checked < target {
        let seed = first_seed.wrapping_add(run);
        let outcome = run_once(seed);
        match outcome {
            Ok(stats) => {
                checked += stats.cuts;
                for (t, s) in totals.iter_mut().zip(stats.answered) {
                    *t += s;
                }
            }
            Err(e) => panic!("seed {seed} (HOOKD_CRASH_SEED={seed} reproduces it): {e}"),
        }
        run += 1;
        assert!(run < 100, "fewer than {target} cuts in 100 runs");
    }
    let [enqueued, acked, nacked, pushed] = totals;
    eprintln!(
        "{checked} power cuts checked over {run} runs (first seed {first_seed}); answered: \
         {enqueued} enqueued, {acked} acked, {nacked} nacked; {pushed} push outcomes reported"
    );
    // The workload really did each kind of write.
    assert!(
        enqueued > 0 && acked > 0 && nacked > 0 && pushed > 0,
        "{totals:?}"
    );
}

struct RunStats {
    cuts: usize,
    /// enqueued, acked, nacked answers; push outcomes reported.
    answered: [usize; 4],
}

fn run_once(seed: u64) -> Result<RunStats, String> {
    // The file is created before the cuts begin: hookd creates it under a temporary name
    // and renames it into place (`store::create_atomically`), so a cut during creation
    // leaves no file, which this disk does not model.
    let disk = PowerLossDisk::default();
    let store = Store::open_backend(disk.clone(), CACHE).map_err(|e| e.to_string())?;
    let log: Arc<Mutex<Vec<Answered>>> = Arc::default();
    let (cuts_tx, cuts_rx) = mpsc::sync_channel::<Cut>(4);
    disk.observe({
        let log = log.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        move |cut| {
            // Read the log first: everything in it was answered before this sync began.
            let answered = lock(&log).len();
            let torn = cut.sync % 2 == 0;
            let image = if torn {
                cut.image(|_| rng.random_bool(0.5))
            } else {
                cut.image(|_| false)
            };
            let _ = cuts_tx.send(Cut {
                sync: cut.sync,
                answered,
                torn,
                image,
            });
        }
    });
    let checker = {
        let log = log.clone();
        std::thread::spawn(move || -> Result<usize, String> {
            let mut n = 0;
            for cut in cuts_rx {
                let answered = lock(&log)[..cut.answered].to_vec();
                check_cut(&cut, &answered, seed).map_err(|e| {
                    format!(
                        "power cut at sync {} ({}): {e}",
                        cut.sync,
                        if cut.torn {
                            "with some unsynced writes"
                        } else {
                            "synced bytes only"
                        }
                    )
                })?;
                n += 1;
            }
            Ok(n)
        })
    };

    let (deliveries_tx, deliveries_rx) = tokio::sync::mpsc::unbounded_channel();
    let (engine, thread) = super::start(
        store,
        config(seed),
        Arc::new(SystemClock),
        Some(deliveries_tx),
    )
    .map_err(|e| e.to_string())?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let answered = runtime.block_on(workload(engine, deliveries_rx, log.clone(), seed));
    thread.shutdown();
    drop(runtime);
    // The disk (and with it the observer and its sender) is dropped here, ending the checker.
    drop(disk);
    let cuts = checker
        .join()
        .map_err(|_| "the checker panicked".to_owned())??;
    Ok(RunStats {
        cuts,
        answered: answered?,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Producers, consumers and a fake dispatcher, all bounded; returns the answer counts.
async fn workload(
    engine: EngineHandle,
    mut deliveries: tokio::sync::mpsc::UnboundedReceiver<Vec<crate::delivery::Delivery>>,
    log: Arc<Mutex<Vec<Answered>>>,
    seed: u64,
) -> Result<[usize; 4], String> {
    engine
        .put_endpoint(EndpointRecord {
            name: "ep".into(),
            url: "http://127.0.0.1:9/never-dialled".into(),
            max_in_flight: 8,
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + RUN_LIMIT;

    // The fake dispatcher: every attempt gets an outcome at once.
    let pushed = Arc::new(AtomicUsize::new(0));
    let dispatcher = {
        let (engine, pushed) = (engine.clone(), pushed.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ 0xd15);
        tokio::spawn(async move {
            while let Some(batch) = deliveries.recv().await {
                for d in batch {
                    let verdict = match rng.random_range(0..20) {
                        0..12 => Verdict::Delivered { status: 200 },
                        12..18 => Verdict::Retry {
                            status: 503,
                            outcome: "http_error",
                            error: "HTTP 503".into(),
                            retry_after: None,
                        },
                        _ => Verdict::Permanent {
                            status: 400,
                            error: "HTTP 400".into(),
                        },
                    };
                    engine.report(AttemptReport {
                        id: d.id,
                        attempt: d.attempt,
                        verdict,
                        latency_us: 1_000,
                    });
                    pushed.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };

    let producing = Arc::new(AtomicBool::new(true));
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let (engine, log) = (engine.clone(), log.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ (p as u64 + 1));
        producers.push(tokio::spawn(async move {
            let mut n = 0;
            for round in 0..ROUNDS_PER_PRODUCER {
                let size = if round % 2 == 0 {
                    1
                } else {
                    rng.random_range(2..8)
                };
                let now = SystemClock.now_ms();
                let mut batch = Vec::with_capacity(size);
                for i in 0..size {
                    let destination = if rng.random_bool(0.5) {
                        Destination::Queue("q".into())
                    } else {
                        Destination::Endpoint("ep".into())
                    };
                    let record = MessageRecord {
                        payload: format!("{p}/{round}/{i}").into_bytes(),
                        idempotency_key: format!("{p}-{round}-{i}"),
                        created_ms: now,
                        ..Default::default()
                    };
                    batch.push(NewMessage::new(
                        MessageId::generate(now),
                        destination,
                        record,
                        0,
                        0,
                    ));
                }
                let results = engine.enqueue(batch).await.map_err(|e| e.to_string())?;
                for r in results {
                    let e = r.map_err(|e| e.to_string())?;
                    lock(&log).push(Answered::Enqueued(e.id));
                    n += 1;
                }
                if Instant::now() > deadline {
                    break;
                }
            }
            Ok::<usize, String>(n)
        }));
    }

    let mut consumers = Vec::new();
    for c in 0..2u64 {
        let (engine, log, producing) = (engine.clone(), log.clone(), producing.clone());
        let mut rng = StdRng::seed_from_u64(seed ^ (0xc0 + c));
        consumers.push(tokio::spawn(async move {
            let (mut acked, mut nacked, mut idle) = (0, 0, 0);
            while Instant::now() < deadline {
                let got = engine
                    .receive("q".into(), 8, 60_000, 20)
                    .await
                    .map_err(|e| e.to_string())?;
                if got.is_empty() {
                    idle += 1;
                    // Done once producing has stopped and retries have had time to come due
                    // (backoff is at most 4 ms; each empty poll waits 20 ms).
                    if !producing.load(Ordering::SeqCst) && idle > 5 {
                        break;
                    }
                    continue;
                }
                idle = 0;
                let mut to_ack = Vec::new();
                for m in got {
                    let lease = m.lease;
                    if rng.random_bool(0.3) {
                        engine
                            .nack(lease, 0, "power-loss test".into())
                            .await
                            .map_err(|e| e.to_string())?;
                        lock(&log).push(Answered::Nacked(lease));
                        nacked += 1;
                    } else {
                        to_ack.push(lease);
                    }
                }
                if !to_ack.is_empty() {
                    engine
                        .ack(to_ack.clone())
                        .await
                        .map_err(|e| e.to_string())?;
                    let mut log = lock(&log);
                    for lease in to_ack {
                        log.push(Answered::Acked(lease));
                        acked += 1;
                    }
                }
            }
            Ok::<(usize, usize), String>((acked, nacked))
        }));
    }

    let mut enqueued = 0;
    for p in producers {
        enqueued += p.await.map_err(|e| e.to_string())??;
    }
    producing.store(false, Ordering::SeqCst);
    let (mut acked, mut nacked) = (0, 0);
    for c in consumers {
        let (a, n) = c.await.map_err(|e| e.to_string())??;
        acked += a;
        nacked += n;
    }
    // The engine's delivery sender lives until shutdown: stop reporting here.
    dispatcher.abort();
    Ok([enqueued, acked, nacked, pushed.load(Ordering::SeqCst)])
}

/// Opens a cut image as hookd would after a restart and finds every answered operation.
fn check_cut(cut: &Cut, answered: &[Answered], seed: u64) -> Result<(), String> {
    let disk = PowerLossDisk::with_image(cut.image.clone());
    let store =
        Store::open_backend(disk, CACHE).map_err(|e| format!("the file does not open: {e}"))?;
    store
        .recover()
        .map_err(|e| format!("recovery failed: {e}"))?;
    let history = |id: MessageId| -> Result<Option<HistoryRecord>, String> {
        if let Some(m) = store.message(id).map_err(|e| e.to_string())? {
            return Ok(Some(m.history));
        }
        Ok(store
            .done(id)
            .map_err(|e| e.to_string())?
            .map(|d| d.history.unwrap_or_default()))
    };
    for op in answered {
        match *op {
            Answered::Enqueued(id) => {
                if history(id)?.is_none() {
                    return Err(format!("the answered enqueue of {id} is lost"));
                }
            }
            Answered::Acked(lease) => {
                let done = store.done(lease.message).map_err(|e| e.to_string())?;
                if !done.is_some_and(|d| d.acked_at(lease.attempt)) {
                    return Err(format!("the answered Ack of {lease} is lost"));
                }
            }
            Answered::Nacked(lease) => {
                let nacked = history(lease.message)?.is_some_and(|h| {
                    h.attempts
                        .iter()
                        .any(|a| a.number == lease.attempt && a.outcome == "nacked")
                });
                if !nacked {
                    return Err(format!("the answered Nack of {lease} is lost"));
                }
            }
        }
    }
    // The engine starts on what survived (every schedule row decodes, destinations parse).
    let (_, thread) = super::start(store, config(seed), Arc::new(SystemClock), None)
        .map_err(|e| format!("the engine does not start: {e}"))?;
    thread.shutdown();
    Ok(())
}
