//! Power cuts at every sync of a busy engine: nothing acknowledged is ever lost, the
//! store always opens, and replaying the log twice gives the same state.
//!
//! The engine runs on a [`PowerLossFs`] (the redb file and the write-ahead log's segments,
//! with small segments and frequent checkpoints so that rotation, checkpoints and the
//! deletion of old segments all happen many times) while tasks enqueue (unary and batches,
//! to a pull queue and a push endpoint), consumers lease, Ack and Nack, and a fake
//! dispatcher reports push outcomes (delivered, retry, permanent). Every operation hookd
//! answered with success goes into a list. At the start of each sync (a log sync, the
//! directory's, or a checkpoint's redb commit), the file system hands over the image a
//! power cut at that instant would leave (only synced bytes and names; every other cut
//! also a random subset of the rest, writes possibly torn part-way) together with how
//! long the list was: all of those operations were answered before this sync began, so
//! they must be in the image. The checker opens the image as hookd would after a restart
//! (format check, log replay, recovery, the engine starting on it) and looks for each
//! operation. It also replays the image's log twice over the file and compares every row
//! (idempotent replay), and on every eighth cut it cuts power again during that recovery
//! (its replay and checkpoint) and checks those images too.
//!
//! A hookd that answered before its log record was synced fails this test: the answered
//! operation is missing from the images of the syncs that follow. So does a checkpoint
//! that records a log position beyond what redb holds (the replay then skips records).
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
use hookd_core::clock::{Clock, SystemClock};
use hookd_core::destination::Destination;
use hookd_core::ids::{LeaseId, MessageId};
use hookd_core::push::{AttemptReport, Verdict};
use hookd_core::retry::RetryPolicy;
use hookd_core::scope::TenantId;
use hookd_storage::store::power_loss::{Image, PowerLossFs};
use hookd_storage::store::{HistoryRecord, MessageRecord, Recovering, Storage, Store};
use hookd_storage::wal::Log;

/// An operation hookd answered with success.
#[derive(Debug, Clone, Copy)]
enum Answered {
    /// With the CRC-32C of its payload: what it reads back as must match it.
    Enqueued(MessageId, u32),
    Acked(LeaseId),
    Nacked(LeaseId),
}

/// A cut image and how many answered operations precede it.
struct Cut {
    sync: u64,
    kind: Kind,
    answered: usize,
    torn: bool,
    image: Image,
}

/// What was being synced when the power went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A log segment (a round's record, or a cut torn tail).
    Log,
    /// The directory (a new segment's name).
    Dir,
    /// The redb file (a checkpoint).
    Checkpoint,
}

const DB: &str = "hookd.redb";
const CACHE: usize = 1 << 20;
/// Small segments and checkpoints, so rotation, checkpoints and deletion happen often.
const SEGMENT: u64 = 8 << 10;
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
        push: crate::PushDefaults::default(),
        max_queued_write_bytes: 64 << 20,
        idempotency_retention_ms: 24 * 3_600_000,
        completed_retention_ms: 24 * 3_600_000,
        fifo_lane_retention_ms: 7 * 24 * 3_600_000,
        dead_letter_retention_ms: 14 * 24 * 3_600_000,
        events: Default::default(),
        alerts: Default::default(),
        sealer: None,
        max_commit_batch: 8_192,
        checkpoint_interval_ms: 20,
        checkpoint_log_bytes: 16 << 10,
        // Short and small, so segments are deleted and compacted while traffic runs.
        log_retention: hookd_storage::pipeline::Retention {
            ms: 50,
            bytes: 32 << 10,
        },
        rng_seed: Some(seed),
        metrics: Default::default(),
        backpressure: Default::default(),
        headroom: std::sync::Arc::new(hookd_storage::disk::Headroom::unlimited()),
        // Events to it carry ordering keys; nothing reads it, so every lane only grows.
        fifo_queues: [("ordered".to_owned(), super::FifoPolicy::Park)].into(),
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
    let mut kinds = [0usize; 4];
    let mut totals = [0usize; 4];
    let mut heap = [0usize; 2];
    let mut run = 0;
    while checked < target {
        let seed = first_seed.wrapping_add(run);
        let outcome = run_once(seed);
        match outcome {
            Ok(stats) => {
                checked += stats.cuts;
                for (t, s) in kinds.iter_mut().zip(stats.kinds) {
                    *t += s;
                }
                for (t, s) in totals.iter_mut().zip(stats.answered) {
                    *t += s;
                }
                for (t, s) in heap.iter_mut().zip(stats.heap) {
                    *t += s;
                }
            }
            Err(e) => panic!("seed {seed} (HOOKD_CRASH_SEED={seed} reproduces it): {e}"),
        }
        run += 1;
        assert!(run < 100, "fewer than {target} cuts in 100 runs");
    }
    let [enqueued, acked, nacked, pushed] = totals;
    let [log, dir, checkpoint, replay] = kinds;
    eprintln!(
        "{checked} power cuts checked over {run} runs (first seed {first_seed}): {log} at a \
         log sync, {dir} at a directory sync, {checkpoint} in a checkpoint, and {replay} \
         more during the recovery of a cut image; answered: {enqueued} enqueued, {acked} \
         acked, {nacked} nacked; {pushed} push outcomes reported; {deleted} log segments \
         deleted, {compacted} records compacted",
        deleted = heap[0],
        compacted = heap[1],
    );
    // The log was the heap under retention: segments went and live records moved.
    assert!(heap[0] > 0 && heap[1] > 0, "{heap:?}");
    // The workload really did each kind of write, and power went at each kind of sync.
    assert!(
        enqueued > 0 && acked > 0 && nacked > 0 && pushed > 0,
        "{totals:?}"
    );
    assert!(
        log > 0 && dir > 0 && checkpoint > 0 && replay > 0,
        "{kinds:?}"
    );
}

struct RunStats {
    cuts: usize,
    /// Cuts at a log sync, a directory sync, a checkpoint; and during a recovery.
    kinds: [usize; 4],
    /// enqueued, acked, nacked answers; push outcomes reported.
    answered: [usize; 4],
    /// Log segments deleted (retention), records copied forward (compaction).
    heap: [usize; 2],
}

/// Opens the store and its log on `fs`, replaying the log.
fn open(fs: &PowerLossFs) -> Result<Storage, String> {
    open_with(fs, SEGMENT)
}

/// As [`open`], with segments of `segment` bytes.
fn open_with(fs: &PowerLossFs, segment: u64) -> Result<Storage, String> {
    let store = Store::open_backend(fs.backend(DB), CACHE)
        .map_err(|e| format!("the file does not open: {e}"))?;
    Storage::open(store, Box::new(fs.clone()), segment)
        .map_err(|e| format!("the log does not replay: {e}"))
}

fn kind(file: Option<&str>) -> Kind {
    match file {
        None => Kind::Dir,
        Some(DB) => Kind::Checkpoint,
        Some(_) => Kind::Log,
    }
}

fn run_once(seed: u64) -> Result<RunStats, String> {
    // The file is created before the cuts begin: hookd creates it under a temporary name
    // and renames it into place (`fs::create_atomically`).
    let fs = PowerLossFs::with_file(DB);
    let storage = open(&fs)?;
    let log: Arc<Mutex<Vec<Answered>>> = Arc::default();
    let fanouts: Fanouts = Arc::default();
    let (cuts_tx, cuts_rx) = mpsc::sync_channel::<Cut>(4);
    fs.observe({
        let log = log.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
        move |cut| {
            // Read the list first: everything in it was answered before this sync began.
            let answered = lock(&log).len();
            let torn = cut.sync % 2 == 0;
            let image = cut.image(torn.then_some(&mut rng));
            let _ = cuts_tx.send(Cut {
                sync: cut.sync,
                kind: kind(cut.file),
                answered,
                torn,
                image,
            });
        }
    });
    let checker = {
        let (log, fanouts) = (log.clone(), fanouts.clone());
        std::thread::spawn(move || -> Result<(usize, [usize; 4]), String> {
            let (mut n, mut kinds) = (0, [0usize; 4]);
            for cut in cuts_rx {
                let answered = lock(&log)[..cut.answered].to_vec();
                // Every publish tried so far (those after the cut must have left nothing).
                let tried = lock(&fanouts).clone();
                let check = Check {
                    answered: &answered,
                    fanouts: &tried,
                };
                let nested = check_cut(&cut, &check, seed, cut.sync % 8 == 0).map_err(|e| {
                    format!(
                        "power cut at sync {} ({:?}, {}): {e}",
                        cut.sync,
                        cut.kind,
                        if cut.torn {
                            "with some unsynced changes"
                        } else {
                            "synced bytes only"
                        }
                    )
                })?;
                kinds[cut.kind as usize] += 1;
                kinds[3] += nested;
                n += 1 + nested;
            }
            Ok((n, kinds))
        })
    };

    let (deliveries_tx, deliveries_rx) = tokio::sync::mpsc::unbounded_channel();
    let (engine, thread) = super::start(
        storage,
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
    let answered = runtime.block_on(workload(
        engine.clone(),
        deliveries_rx,
        log.clone(),
        fanouts.clone(),
        seed,
    ));
    let heap = runtime
        .block_on(engine.stats(None, None, 0))
        .map(|s| {
            [
                s.storage.log_deleted_segments as usize,
                s.storage.log_compacted_records as usize,
            ]
        })
        .map_err(|e| e.to_string())?;
    thread.shutdown();
    drop(runtime);
    // The file system (and with it the observer and its sender) is dropped here, ending
    // the checker.
    drop(fs);
    let (cuts, kinds) = checker
        .join()
        .map_err(|_| "the checker panicked".to_owned())??;
    Ok(RunStats {
        cuts,
        kinds,
        answered: answered?,
        heap,
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Producers, consumers and a fake dispatcher, all bounded; returns the answer counts.
async fn workload(
    engine: EngineHandle,
    mut deliveries: tokio::sync::mpsc::UnboundedReceiver<Vec<hookd_core::push::Delivery>>,
    log: Arc<Mutex<Vec<Answered>>>,
    fanouts: Fanouts,
    seed: u64,
) -> Result<[usize; 4], String> {
    engine
        .put_endpoint(
            TenantId::DEFAULT,
            crate::EndpointDef {
                name: "ep".into(),
                url: "http://127.0.0.1:9/never-dialled".into(),
                max_in_flight: 8,
                ..Default::default()
            },
        )
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
                            outcome: hookd_core::outcome::AttemptOutcome::HttpError,
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
        let (engine, log, fanouts) = (engine.clone(), log.clone(), fanouts.clone());
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
                    // One event in six joins a lane of the FIFO queue.
                    if rng.random_range(0..6) == 0 {
                        let record = MessageRecord {
                            payload: format!("{p}/{round}/{i}/ordered").into_bytes(),
                            created_ms: now,
                            ..Default::default()
                        };
                        let mut m = NewMessage::from_record(
                            MessageId::generate(now),
                            Destination::queue(TenantId::DEFAULT, "ordered"),
                            record,
                            0,
                            0,
                        );
                        m.ordering_key = format!("k{}", rng.random_range(0..4));
                        batch.push(m);
                        continue;
                    }
                    let destination = if rng.random_bool(0.5) {
                        Destination::queue(TenantId::DEFAULT, "q")
                    } else {
                        Destination::endpoint(TenantId::DEFAULT, "ep")
                    };
                    // Of varied sizes, so records straddle pages and fill segments.
                    let mut payload = format!("{p}/{round}/{i}/").into_bytes();
                    let filler = rng.random_range(0..400);
                    payload.extend((0..filler).map(|_| rng.random::<u8>()));
                    let record = MessageRecord {
                        payload,
                        idempotency_key: format!("{p}-{round}-{i}"),
                        created_ms: now,
                        ..Default::default()
                    };
                    batch.push(NewMessage::from_record(
                        MessageId::generate(now),
                        destination,
                        record,
                        0,
                        0,
                    ));
                }
                // Every third round also publishes an event to three subscribers.
                if round % 3 == 2 {
                    let payload: Vec<u8> = (0..rng.random_range(100..900))
                        .map(|_| rng.random::<u8>())
                        .collect();
                    let record = MessageRecord {
                        payload,
                        idempotency_key: format!("{p}-{round}-fanout"),
                        created_ms: now,
                        ..Default::default()
                    };
                    let mut m = NewMessage::from_record(
                        MessageId::generate(now),
                        Destination::queue(TenantId::DEFAULT, "q"),
                        record,
                        0,
                        0,
                    );
                    let also = vec![
                        super::Subscriber::new(
                            MessageId::generate(now),
                            Destination::endpoint(TenantId::DEFAULT, "ep"),
                        ),
                        super::Subscriber::new(
                            MessageId::generate(now),
                            Destination::queue(TenantId::DEFAULT, "unread"),
                        ),
                    ];
                    let mut ids = vec![m.id];
                    ids.extend(also.iter().map(|s| s.id));
                    lock(&fanouts).push(ids);
                    m.fanout = Some(Box::new(super::Fanout {
                        event_id: MessageId::generate(now),
                        scope: "tticket.classified".into(),
                        also,
                    }));
                    batch.push(m);
                }
                let crcs: Vec<u32> = batch
                    .iter()
                    .map(|m| {
                        use prost::Message;
                        MessageRecord::decode(m.record.as_slice())
                            .map_or(0, |r| crc32c::crc32c(&r.payload))
                    })
                    .collect();
                let results = engine.enqueue(batch).await.map_err(|e| e.to_string())?;
                for (r, crc) in results.into_iter().zip(crcs) {
                    let e = r.map_err(|e| e.to_string())?;
                    let mut log = lock(&log);
                    if e.deliveries.is_empty() {
                        log.push(Answered::Enqueued(e.id, crc));
                    }
                    // A publish: each subscriber's delivery, with the one payload.
                    for id in e.deliveries {
                        log.push(Answered::Enqueued(id, crc));
                    }
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
                    .receive(Destination::queue(TenantId::DEFAULT, "q"), 8, 60_000, 20)
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
                            .nack(TenantId::DEFAULT, lease, 0, "power-loss test".into())
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
                        .ack(TenantId::DEFAULT, to_ack.clone())
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

/// Replays the image's log over its file twice and compares every row: the second replay
/// must change nothing.
fn check_replay_twice(image: &Image) -> Result<(), String> {
    let fs = PowerLossFs::with_image(image.clone());
    let store = Store::open_backend(fs.backend(DB), CACHE).map_err(|e| e.to_string())?;
    let from = store.applied().map_err(|e| e.to_string())?;
    let mut records = Vec::new();
    Log::replay(Box::new(fs), SEGMENT, from, |segment, lsn, record| {
        records.push((segment, lsn, record.to_vec()));
        Ok::<(), hookd_storage::wal::LogError>(())
    })
    .map_err(|e| e.to_string())?;
    let positioned = || records.iter().map(|(s, l, r)| (*s, *l, r.as_slice()));
    store
        .replay_log_records(positioned())
        .map_err(|e| e.to_string())?;
    let once = store.dump().map_err(|e| e.to_string())?;
    store
        .replay_log_records(positioned())
        .map_err(|e| e.to_string())?;
    let twice = store.dump().map_err(|e| e.to_string())?;
    if once != twice {
        return Err(format!(
            "replaying {} log records twice gives another state than once",
            records.len()
        ));
    }
    Ok(())
}

/// Opens a cut image as hookd would after a restart and finds every answered operation;
/// with `nested`, power is cut during that recovery too, and those images are checked
/// (without nesting further). Returns how many nested images were checked.
fn check_cut(cut: &Cut, check: &Check<'_>, seed: u64, nested: bool) -> Result<usize, String> {
    check_replay_twice(&cut.image)?;
    let fs = PowerLossFs::with_image(cut.image.clone());
    let inner: Arc<Mutex<Vec<Cut>>> = Arc::default();
    if nested {
        let inner = inner.clone();
        let answered = check.answered.len();
        let mut rng = StdRng::seed_from_u64(seed ^ cut.sync);
        fs.observe(move |c| {
            let mut inner = lock(&inner);
            // A few per recovery: its replay's checkpoint, the log's cut tail, the engine's.
            if inner.len() < 6 {
                let torn = c.sync % 2 == 0;
                inner.push(Cut {
                    sync: c.sync,
                    kind: kind(c.file),
                    answered,
                    torn,
                    image: c.image(torn.then_some(&mut rng)),
                });
            }
        });
    }
    let storage = open(&fs)?;
    check_answered(&storage.store, check.answered)?;
    check_all_or_none(&storage.store, check.fanouts)?;
    check_lanes(&storage.store)?;
    // The engine starts on what survived (every schedule row decodes, destinations parse).
    let (_, thread) = super::start(storage, config(seed), Arc::new(SystemClock), None)
        .map_err(|e| format!("the engine does not start: {e}"))?;
    thread.shutdown();
    let inner = std::mem::take(&mut *lock(&inner));
    for c in &inner {
        let check = Check {
            answered: &check.answered[..c.answered],
            fanouts: check.fanouts,
        };
        check_cut(c, &check, seed, false)
            .map_err(|e| format!("then again during its recovery, at sync {}: {e}", c.sync))?;
    }
    Ok(inner.len())
}

/// The publishes tried: each one's delivery ids.
type Fanouts = Arc<Mutex<Vec<Vec<MessageId>>>>;

/// What a cut image is checked against.
struct Check<'a> {
    answered: &'a [Answered],
    fanouts: &'a [Vec<MessageId>],
}

/// A publish is stored whole or not at all: of each one tried (answered or not), every
/// subscriber's delivery exists (live, dead or completed), or none does.
fn check_all_or_none(store: &Store, fanouts: &[Vec<MessageId>]) -> Result<(), String> {
    for ids in fanouts {
        let mut found = 0;
        for id in ids {
            let live = store.message(*id).map_err(|e| e.to_string())?.is_some();
            if live || store.done(*id).map_err(|e| e.to_string())?.is_some() {
                found += 1;
            }
        }
        if found != 0 && found != ids.len() {
            return Err(format!(
                "a publish to {} subscribers left {found} of its deliveries ({ids:?})",
                ids.len()
            ));
        }
    }
    Ok(())
}

/// The FIFO queue's lanes after a cut: each key's messages (none is ever consumed) are
/// numbered 1..=n with no gap or repeat (a round's messages and its lanes' rows are in one
/// log record, so a cut keeps whole rounds), and each lane's row holds n, so the next
/// number handed out after the restart is n + 1.
fn check_lanes(store: &Store) -> Result<(), String> {
    let ordered = Destination::queue(TenantId::DEFAULT, "ordered");
    let mut lanes: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    store
        .recover(|item| {
            if let Recovering::Message { entry, .. } = item
                && entry.destination == ordered.encode()
                && let Some(lane) = entry.lane
            {
                lanes.entry(lane.key).or_default().push(lane.seq);
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
    for (key, mut seqs) in lanes {
        seqs.sort_unstable();
        let n = seqs.len() as u64;
        if seqs != (1..=n).collect::<Vec<_>>() {
            return Err(format!("lane {key:?} holds numbers {seqs:?}, not 1..={n}"));
        }
        let row = store
            .lane(&ordered.key(), &key)
            .map_err(|e| e.to_string())?;
        if row.last_seq != n {
            return Err(format!(
                "lane {key:?} holds {n} messages but its row says {} were numbered",
                row.last_seq
            ));
        }
    }
    Ok(())
}

/// Finds every answered operation in a recovered store.
fn check_answered(store: &Store, answered: &[Answered]) -> Result<(), String> {
    let mut scheduled = Vec::new();
    store
        .recover(|item| {
            if let Recovering::Message { id, .. } = item {
                scheduled.push(id);
            }
            Ok(())
        })
        .map_err(|e| format!("recovery failed: {e}"))?;
    // Every live message, answered or not, reads back whole: its record is where redb
    // points, in a segment that exists, and passes its checksum.
    for id in scheduled {
        match store.message(id) {
            Ok(Some(_)) => {}
            Ok(None) => return Err(format!("live message {id} has no record")),
            Err(e) => return Err(format!("live message {id} does not read back: {e}")),
        }
    }
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
            Answered::Enqueued(id, crc) => {
                if history(id)?.is_none() {
                    return Err(format!("the answered enqueue of {id} is lost"));
                }
                // Live: read from the segment redb points into (which must exist); done:
                // while retention keeps it. Either way byte for byte what was sent.
                let payload = match store.message(id).map_err(|e| e.to_string())? {
                    Some(m) => Some(m.record.payload),
                    None => match store.completed_record(id).map_err(|e| e.to_string())? {
                        hookd_storage::store::Kept::Record(r) => Some(r.payload),
                        hookd_storage::store::Kept::Expired => None,
                    },
                };
                if payload.is_some_and(|p| crc32c::crc32c(&p) != crc) {
                    return Err(format!("the payload of {id} reads back changed"));
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
    Ok(())
}

/// Issue #26, 1: a log sync fails the way Linux's do (its pages stay readable, never
/// written), hookd reopens its storage on the same files, acknowledges 100 more events, and
/// then the kernel drops its cache or the power goes. Every event acknowledged after the
/// reopening must survive, and its idempotency key must still be known (a resend is a
/// duplicate, not a second copy).
#[test]
fn events_acknowledged_after_a_failed_fsync_survive_eviction_and_power_loss() {
    let mut no_checkpoints = config(1);
    no_checkpoints.checkpoint_interval_ms = 3_600_000;
    no_checkpoints.checkpoint_log_bytes = 1 << 40;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let message = |key: String| {
        let now = SystemClock.now_ms();
        NewMessage::from_record(
            MessageId::generate(now),
            Destination::queue(TenantId::DEFAULT, "q"),
            MessageRecord {
                payload: key.clone().into_bytes(),
                idempotency_key: key,
                created_ms: now,
                ..Default::default()
            },
            0,
            0,
        )
    };
    let enqueue = |engine: &EngineHandle, key: String| {
        let engine = engine.clone();
        let m = message(key);
        runtime.block_on(async move { engine.enqueue(vec![m]).await })
    };
    // One segment holds it all: the failed record is followed by the new ones in one file.
    for (eviction, label) in [(true, "page eviction"), (false, "power cut")] {
        let fs = PowerLossFs::with_file(DB);
        let (engine, thread) = super::start(
            open_with(&fs, 1 << 20).unwrap(),
            no_checkpoints.clone(),
            Arc::new(SystemClock),
            None,
        )
        .unwrap();
        for i in 0..10 {
            enqueue(&engine, format!("before-{i}")).unwrap()[0]
                .as_ref()
                .unwrap();
        }
        fs.fail_syncs(true);
        let failed = enqueue(&engine, "during".into());
        assert!(
            failed.is_err() || failed.as_ref().unwrap()[0].is_err(),
            "{failed:?}"
        );
        thread.shutdown();
        fs.fail_syncs(false);
        // The self-recovery (or a new process): the same files, the failed pages cached.
        let (engine, thread) = super::start(
            open_with(&fs, 1 << 20).unwrap(),
            no_checkpoints.clone(),
            Arc::new(SystemClock),
            None,
        )
        .unwrap();
        let mut after = Vec::new();
        for i in 0..100 {
            let r = enqueue(&engine, format!("after-{i}")).unwrap();
            let e = r[0].as_ref().unwrap();
            assert!(!e.duplicate);
            after.push(e.id);
        }
        // What the next start reads, taken while hookd runs (a clean stop would checkpoint
        // redb and hide the log's state): after an eviction, what a process killed now
        // leaves (the disk and the dirty pages); after a power cut, the disk alone.
        let image = if eviction {
            fs.evict();
            fs.snapshot()
        } else {
            fs.crash_image()
        };
        drop(engine);
        thread.shutdown();
        let fs = PowerLossFs::with_image(image);
        let storage = open_with(&fs, 1 << 20).unwrap_or_else(|e| panic!("{label}: {e}"));
        let lost = after
            .iter()
            .filter(|id| storage.store.message(**id).unwrap().is_none())
            .count();
        assert_eq!(
            lost, 0,
            "{label}: {lost} of 100 events acknowledged after the failed fsync are lost"
        );
        let (engine, thread) =
            super::start(storage, no_checkpoints.clone(), Arc::new(SystemClock), None).unwrap();
        for (i, id) in after.iter().enumerate() {
            let r = enqueue(&engine, format!("after-{i}")).unwrap();
            let e = r[0].as_ref().unwrap();
            assert!(e.duplicate, "{label}: the key after-{i} was forgotten");
            assert_eq!(e.id, *id);
        }
        drop(engine);
        thread.shutdown();
    }
}

/// Issue #49, 5: a FIFO push lane handed out message n+1 as soon as n's 2xx was decided,
/// before the round that completed n was synced; when that sync failed (or the power
/// went), n was sent again after n+1. Here the sync of the round that completes number 8
/// of a lane of 20 fails; hookd then starts again on what a process restart finds (the
/// failed pages still cached) and on what a power cut leaves (the disk alone), and the
/// receiver's numbers must never go below the highest it has seen (a repeat of that one
/// is at-least-once; an earlier one is out of order).
#[test]
fn a_fifo_lane_advances_only_past_a_durable_completion() {
    const N: u64 = 20;
    const FAIL_AT: u64 = 8;
    let mut no_checkpoints = config(5);
    no_checkpoints.checkpoint_interval_ms = 3_600_000;
    no_checkpoints.checkpoint_log_bytes = 1 << 40;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    type Rx = tokio::sync::mpsc::UnboundedReceiver<Vec<hookd_core::push::Delivery>>;
    let start = |storage: Storage| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (engine, thread) = super::start(
            storage,
            no_checkpoints.clone(),
            Arc::new(SystemClock),
            Some(tx),
        )
        .unwrap();
        (engine, thread, rx)
    };
    // Takes the attempts out so far (waiting up to `wait` for a first), in order.
    let take = |rx: &mut Rx, wait: Duration| -> Vec<hookd_core::push::Delivery> {
        runtime.block_on(async {
            let mut out = Vec::new();
            if let Ok(Some(batch)) = tokio::time::timeout(wait, rx.recv()).await {
                out.extend(batch);
            }
            while let Ok(batch) = rx.try_recv() {
                out.extend(batch);
            }
            out
        })
    };
    let seq = |d: &hookd_core::push::Delivery| d.lane.as_ref().map_or(0, |l| l.seq);
    let delivered = |d: &hookd_core::push::Delivery| AttemptReport {
        id: d.id,
        attempt: d.attempt,
        verdict: Verdict::Delivered { status: 200 },
        latency_us: 1_000,
    };
    for (cached, label) in [(true, "restart on the cached pages"), (false, "power cut")] {
        let fs = PowerLossFs::with_file(DB);
        let (engine, thread, mut rx) = start(open_with(&fs, 1 << 20).unwrap());
        runtime
            .block_on(engine.put_endpoint(
                TenantId::DEFAULT,
                crate::EndpointDef {
                    name: "ordered".into(),
                    url: "http://127.0.0.1:9/never-dialled".into(),
                    max_in_flight: 8,
                    fifo: Some(super::FifoPolicy::Park),
                    ..Default::default()
                },
            ))
            .unwrap();
        let batch: Vec<NewMessage> = (0..N)
            .map(|i| {
                let now = SystemClock.now_ms();
                let mut m = NewMessage::from_record(
                    MessageId::generate(now),
                    Destination::endpoint(TenantId::DEFAULT, "ordered"),
                    MessageRecord {
                        payload: format!("{i}").into_bytes(),
                        created_ms: now,
                        ..Default::default()
                    },
                    0,
                    0,
                );
                m.ordering_key = "k".into();
                m
            })
            .collect();
        for r in runtime.block_on(engine.enqueue(batch)).unwrap() {
            r.unwrap();
        }
        // The receiver: every attempt answered 2xx, in the order they were sent.
        let mut seen = Vec::new();
        'first: loop {
            let attempts = take(&mut rx, Duration::from_secs(10));
            assert!(!attempts.is_empty(), "{label}: no attempt after {seen:?}");
            for d in attempts {
                seen.push(seq(&d));
                if seq(&d) == FAIL_AT {
                    // The round that completes it cannot be made durable.
                    fs.fail_syncs(true);
                    engine.report(delivered(&d));
                    // An enqueue after the report is decided in the same round or a later
                    // one: once it is answered (with the failure), every attempt that
                    // round let out has been sent.
                    let probe = NewMessage::from_record(
                        MessageId::generate(SystemClock.now_ms()),
                        Destination::queue(TenantId::DEFAULT, "probe"),
                        MessageRecord::default(),
                        0,
                        0,
                    );
                    let answered = runtime.block_on(engine.enqueue(vec![probe]));
                    assert!(
                        answered.is_err() || answered.as_ref().unwrap()[0].is_err(),
                        "{label}: the probe was stored: {answered:?}"
                    );
                    seen.extend(take(&mut rx, Duration::from_millis(1)).iter().map(seq));
                    break 'first;
                }
                engine.report(delivered(&d));
            }
        }
        drop(engine);
        thread.shutdown();
        fs.fail_syncs(false);
        let storage = if cached {
            open_with(&fs, 1 << 20).unwrap()
        } else {
            open_with(&PowerLossFs::with_image(fs.crash_image()), 1 << 20).unwrap()
        };
        let (engine, thread, mut rx) = start(storage);
        while seen.last() != Some(&N) {
            let attempts = take(&mut rx, Duration::from_secs(10));
            assert!(!attempts.is_empty(), "{label}: stuck after {seen:?}");
            for d in attempts {
                seen.push(seq(&d));
                engine.report(delivered(&d));
            }
        }
        drop(engine);
        thread.shutdown();
        let mut highest = 0;
        for (i, n) in seen.iter().enumerate() {
            assert!(
                *n >= highest,
                "{label}: number {n} sent after {highest} (at {i} of {seen:?})"
            );
            highest = *n;
        }
        for n in 1..=N {
            assert!(seen.contains(&n), "{label}: {n} never sent: {seen:?}");
        }
    }
}

/// Issue #51, 2: deleting a tenant is one round (one log record), so whatever happens to
/// its sync leaves all of the tenant or none of it: its record live with its endpoint and
/// every message, or its tombstone with none of them. Three ends: the sync fails and the
/// power goes (the disk never had the record: all there); the sync fails and the kernel
/// drops its cache while the pages are still readable (either, but whole); the sync
/// succeeds and the power goes (all gone).
#[test]
fn a_tenant_deleted_across_a_failed_sync_or_a_power_cut_is_all_there_or_all_gone() {
    use hookd_core::scope::ObjectRef;
    use hookd_storage::store::TenantRecord;
    use prost::Message as _;
    let mut cfg = config(7);
    cfg.checkpoint_interval_ms = 3_600_000;
    cfg.checkpoint_log_bytes = 1 << 40;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (fail, eviction, label) in [
        (true, false, "failed sync, power cut"),
        (true, true, "failed sync, cache dropped"),
        (false, false, "synced, power cut"),
    ] {
        let fs = PowerLossFs::with_file(DB);
        let start = |storage| super::start(storage, cfg.clone(), Arc::new(SystemClock), None);
        let (engine, thread) = start(open_with(&fs, 1 << 20).unwrap()).unwrap();
        let acme = runtime
            .block_on(engine.put_tenant(
                crate::TenantDef {
                    name: "acme".into(),
                    ..Default::default()
                },
                true,
            ))
            .unwrap();
        runtime
            .block_on(engine.put_endpoint(
                acme.id,
                crate::EndpointDef {
                    name: "e".into(),
                    url: "http://127.0.0.1:9/never-dialled".into(),
                    ..Default::default()
                },
            ))
            .unwrap();
        let messages: Vec<NewMessage> = (0..20u8)
            .map(|i| {
                let now = SystemClock.now_ms();
                NewMessage::from_record(
                    MessageId::generate(now),
                    Destination::queue(acme.id, "q"),
                    MessageRecord {
                        payload: vec![i],
                        created_ms: now,
                        ..Default::default()
                    },
                    0,
                    0,
                )
            })
            .collect();
        let ids: Vec<MessageId> = runtime
            .block_on(engine.enqueue(messages))
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap().id)
            .collect();
        fs.fail_syncs(fail);
        let deleted = runtime.block_on(engine.delete_tenant("acme".into(), true));
        assert_eq!(deleted.is_err(), fail, "{label}: {deleted:?}");
        let image = if eviction {
            fs.evict();
            fs.snapshot()
        } else {
            fs.crash_image()
        };
        drop(engine);
        thread.shutdown();

        let fs = PowerLossFs::with_image(image);
        let storage = open_with(&fs, 1 << 20).unwrap_or_else(|e| panic!("{label}: {e}"));
        let present = ids
            .iter()
            .filter(|id| storage.store.message(**id).unwrap().is_some())
            .count();
        let endpoint = storage.store.endpoint(acme.id, "e").unwrap().is_some();
        let record = storage.store.object(&ObjectRef::tenant(acme.id)).unwrap();
        let live = TenantRecord::decode(record.expect("a record or a tombstone").as_slice())
            .unwrap()
            .deleted_ms
            == 0;
        let whole =
            (present == ids.len() && endpoint && live) || (present == 0 && !endpoint && !live);
        assert!(
            whole,
            "{label}: {present} of {} messages, endpoint {endpoint}, tenant live {live}",
            ids.len()
        );
        match (fail, eviction) {
            (true, false) => assert!(live, "{label}: the disk never had the deletion"),
            (false, _) => assert!(!live, "{label}: the deletion was answered"),
            _ => {}
        }
        let (engine, thread) = start(storage).unwrap();
        assert_eq!(engine.tenants().named("acme").is_some(), live, "{label}");
        drop(engine);
        thread.shutdown();
    }
}

/// A replay job's step (its replays and the job's new cursor) across a failed sync, a
/// dropped page cache and a power cut: the image holds the step whole (the messages made
/// ready again, each with its replayed bit, and the cursor past them) or not at all (dead
/// still, the cursor before them). Never the replays without the cursor, which would have
/// the restarted job send them twice.
#[test]
fn a_replay_jobs_step_is_all_there_or_all_gone_across_a_failed_sync_or_a_power_cut() {
    use hookd_core::scope::{Kind, ObjectRef};
    use hookd_storage::store::{
        ReplayJobRecord, ReplayJobState, ReplaySelectionRecord, State as RowState,
    };
    use prost::Message as _;
    let mut cfg = config(11);
    cfg.checkpoint_interval_ms = 3_600_000;
    cfg.checkpoint_log_bytes = 1 << 40;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tenant = TenantId::DEFAULT;
    for (fail, eviction, label) in [
        (true, false, "failed sync, power cut"),
        (true, true, "failed sync, cache dropped"),
        (false, false, "synced, power cut"),
    ] {
        let fs = PowerLossFs::with_file(DB);
        let start = |storage| super::start(storage, cfg.clone(), Arc::new(SystemClock), None);
        let (engine, thread) = start(open_with(&fs, 1 << 20).unwrap()).unwrap();
        // Ten dead letters: enqueued with one attempt each, leased and refused.
        let queue = Destination::queue(tenant, "q");
        let messages: Vec<NewMessage> = (0..10u8)
            .map(|i| {
                let now = SystemClock.now_ms();
                NewMessage::from_record(
                    MessageId::generate(now),
                    queue.clone(),
                    MessageRecord {
                        payload: vec![i],
                        created_ms: now,
                        ..Default::default()
                    },
                    0,
                    1,
                )
            })
            .collect();
        let mut ids: Vec<MessageId> = runtime
            .block_on(engine.enqueue(messages))
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap().id)
            .collect();
        ids.sort();
        let leased = runtime
            .block_on(engine.receive(queue.clone(), 10, 60_000, 0))
            .unwrap();
        assert_eq!(leased.len(), 10, "{label}");
        for l in leased {
            let nacked = runtime
                .block_on(engine.nack(tenant, l.lease, 0, "refused".into()))
                .unwrap();
            assert!(nacked.next_attempt_ms.is_none(), "{label}");
        }
        // The job, with its selection, then its first step (4 ids), synced.
        let job = ObjectRef::new(tenant, Kind::ReplayJob, "job-1");
        let record = ReplayJobRecord {
            id: "job-1".into(),
            state: ReplayJobState::Running as u32,
            per_s: 1.0,
            total: 10,
            chunks: 1,
            ..Default::default()
        };
        let slice = (
            ObjectRef::new(
                tenant,
                Kind::ReplaySelection,
                ReplaySelectionRecord::name("job-1", 0),
            ),
            ReplaySelectionRecord::of(&ids).encode_to_vec(),
        );
        runtime
            .block_on(engine.put_replay_job(job.clone(), record.clone(), vec![slice]))
            .unwrap();
        let step = |job: ReplayJobRecord, from: usize| crate::ReplayStep {
            object: ObjectRef::new(tenant, Kind::ReplayJob, "job-1"),
            job,
            items: ids[from..from + 4].iter().map(|id| (*id, None)).collect(),
        };
        let after_first = runtime
            .block_on(engine.replay_step(step(record, 0)))
            .unwrap();
        assert_eq!(
            (after_first.cursor, after_first.replayed),
            (4, 4),
            "{label}"
        );
        // The second step (the next 4) across the fault.
        fs.fail_syncs(fail);
        let second = runtime.block_on(engine.replay_step(step(after_first, 4)));
        assert_eq!(second.is_err(), fail, "{label}: {second:?}");
        let image = if eviction {
            fs.evict();
            fs.snapshot()
        } else {
            fs.crash_image()
        };
        drop(engine);
        thread.shutdown();

        let fs = PowerLossFs::with_image(image);
        let storage = open_with(&fs, 1 << 20).unwrap_or_else(|e| panic!("{label}: {e}"));
        let stored = storage
            .store
            .object(&job)
            .unwrap()
            .unwrap_or_else(|| panic!("{label}: the job is gone"));
        let stored = ReplayJobRecord::decode(stored.as_slice()).unwrap();
        let state_of = |id: &MessageId| {
            let m = storage.store.message(*id).unwrap().expect("kept");
            (m.entry.state, m.entry.replayed)
        };
        // The first step held: ready again, each marked replayed.
        for id in &ids[..4] {
            assert_eq!(state_of(id), (RowState::Pending, true), "{label}: {id}");
        }
        let second: Vec<_> = ids[4..8].iter().map(state_of).collect();
        let replayed = second.iter().all(|s| *s == (RowState::Pending, true));
        let dead = second.iter().all(|s| s.0 == RowState::Dead && !s.1);
        match stored.cursor {
            8 => assert!(replayed, "{label}: cursor 8 but {second:?}"),
            4 => assert!(dead, "{label}: cursor 4 but {second:?}"),
            other => panic!("{label}: cursor {other}"),
        }
        assert_eq!(stored.replayed, stored.cursor, "{label}");
        match (fail, eviction) {
            (true, false) => assert_eq!(stored.cursor, 4, "{label}: the disk never had it"),
            (false, _) => assert_eq!(stored.cursor, 8, "{label}: the step was answered"),
            _ => {}
        }
        // The rest were never touched.
        for id in &ids[8..] {
            assert_eq!(state_of(id), (RowState::Dead, false), "{label}: {id}");
        }
        let (engine, thread) = start(storage).unwrap();
        drop(engine);
        thread.shutdown();
    }
}

/// A replay job of a tenant deleted meanwhile (its objects gone with it) writes nothing
/// back: its next step and a change of it are refused, and the catalog holds no job.
#[test]
fn a_deleted_tenants_replay_job_is_not_written_back() {
    use hookd_core::scope::{Kind, ObjectRef};
    use hookd_storage::store::{ReplayJobRecord, ReplayJobState};
    let cfg = config(13);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fs = PowerLossFs::with_file(DB);
    let (engine, thread) = super::start(
        open_with(&fs, 1 << 20).unwrap(),
        cfg,
        Arc::new(SystemClock),
        None,
    )
    .unwrap();
    let acme = runtime
        .block_on(engine.put_tenant(
            crate::TenantDef {
                name: "acme".into(),
                ..Default::default()
            },
            true,
        ))
        .unwrap();
    let job = ObjectRef::new(acme.id, Kind::ReplayJob, "job-1");
    let record = ReplayJobRecord {
        id: "job-1".into(),
        state: ReplayJobState::Running as u32,
        total: 1,
        ..Default::default()
    };
    runtime
        .block_on(engine.put_replay_job(job.clone(), record.clone(), Vec::new()))
        .unwrap();
    runtime
        .block_on(engine.delete_tenant("acme".into(), true))
        .unwrap();
    let step = crate::ReplayStep {
        object: job.clone(),
        job: record.clone(),
        items: vec![(MessageId::generate(SystemClock.now_ms()), None)],
    };
    let refused = runtime.block_on(engine.replay_step(step));
    assert!(
        matches!(refused, Err(super::Refusal::NoTenant { .. })),
        "{refused:?}"
    );
    let refused = runtime.block_on(engine.put_replay_job(job.clone(), record, Vec::new()));
    assert!(
        matches!(refused, Err(super::Refusal::NoTenant { .. })),
        "{refused:?}"
    );
    runtime.block_on(engine.ping()).unwrap();
    drop(engine);
    thread.shutdown();
    let storage = open_with(&fs, 1 << 20).unwrap();
    assert_eq!(storage.store.object(&job).unwrap(), None);
}

/// Whether any file of `image` holds `needle`.
fn holds(image: &Image, needle: &[u8]) -> Option<String> {
    image
        .iter()
        .find(|(_, bytes)| bytes.windows(needle.len()).any(|w| w == needle))
        .map(|(name, _)| name.clone())
}

/// A purge (issue #53, 4) takes its payloads' bytes off the disk, and keeps everything
/// else: after it is answered, a power cut at any sync (synced bytes only, or with some of
/// the rest, torn) or a failed fsync whose pages are then evicted leaves a store that,
/// once started, overwrites what is left to overwrite; the durable image then holds none
/// of the purged payloads' bytes, while every other payload reads back. Run with records
/// in closed segments, and all in the current one (overwritten before the checkpoint's
/// position, inside the segment the log appends to).
#[test]
fn a_purge_takes_its_payloads_off_the_disk_across_power_cuts_and_failed_syncs() {
    use hookd_storage::store::Kept;
    let mut cfg = config(17);
    // Nothing leaves by retention: only the purge can take the bytes away.
    cfg.log_retention = hookd_storage::pipeline::Retention {
        ms: 3_600_000,
        bytes: u64::MAX,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tenant = TenantId::DEFAULT;
    let wait = Duration::from_secs(30);
    let secret = |i: usize| format!("SECRET-{i:02}-{}", "s".repeat(40)).into_bytes();
    let kept = |i: usize| format!("KEEPME-{i:02}-{}", "k".repeat(40)).into_bytes();
    let mut checked = 0;
    for (segment, fail) in [(SEGMENT, false), (1 << 20, false), (1 << 20, true)] {
        let label = format!("segments of {segment} bytes, failed sync {fail}");
        let fs = PowerLossFs::with_file(DB);
        let start = |storage| super::start(storage, cfg.clone(), Arc::new(SystemClock), None);
        let (engine, thread) = start(open_with(&fs, segment).unwrap()).unwrap();
        // Twelve to purge and twelve to keep, one attempt each; of the first, six acked
        // (completed) and six refused (dead letters); every one to keep acked.
        let queue = Destination::queue(tenant, "q");
        let messages: Vec<NewMessage> = (0..24)
            .map(|i| {
                let now = SystemClock.now_ms();
                NewMessage::from_record(
                    MessageId::generate(now),
                    queue.clone(),
                    MessageRecord {
                        payload: if i < 12 { secret(i) } else { kept(i) },
                        created_ms: now,
                        ..Default::default()
                    },
                    0,
                    1,
                )
            })
            .collect();
        let ids: Vec<MessageId> = runtime
            .block_on(engine.enqueue(messages))
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap().id)
            .collect();
        let leased = runtime
            .block_on(engine.receive(queue.clone(), 24, 60_000, 0))
            .unwrap();
        assert_eq!(leased.len(), 24, "{label}");
        for l in leased {
            let i = ids.iter().position(|id| *id == l.id).unwrap();
            if (6..12).contains(&i) {
                runtime
                    .block_on(engine.nack(tenant, l.lease, 0, "refused".into()))
                    .unwrap();
            } else {
                runtime.block_on(engine.ack(tenant, vec![l.lease])).unwrap();
            }
        }
        // Cut images from the moment the purge is answered.
        let answered = Arc::new(AtomicBool::new(false));
        let images: Arc<Mutex<Vec<(u64, bool, Image)>>> = Arc::default();
        fs.observe({
            let (answered, images) = (answered.clone(), images.clone());
            let mut rng = StdRng::seed_from_u64(segment);
            move |cut| {
                if answered.load(Ordering::Acquire) {
                    let torn = cut.sync % 2 == 0;
                    let image = cut.image(torn.then_some(&mut rng));
                    lock(&images).push((cut.sync, torn, image));
                }
            }
        });
        let erased = runtime
            .block_on(engine.erase(tenant, ids[..12].to_vec()))
            .unwrap();
        answered.store(true, Ordering::Release);
        assert_eq!((erased.erased, erased.dead), (12, 6), "{label}");
        let after = if fail {
            // The checkpoint's sync (or the overwrite's) fails: the store stops writing,
            // and the kernel then drops the pages the failed syncs left readable.
            fs.fail_syncs(true);
            let scrubbed = runtime.block_on(engine.wait_scrubbed(Duration::from_millis(300)));
            assert!(!matches!(scrubbed, Ok(true)), "{label}: {scrubbed:?}");
            fs.fail_syncs(false);
            fs.evict();
            let image = fs.snapshot();
            drop(engine);
            thread.shutdown();
            vec![(0, false, image)]
        } else {
            let scrubbed = runtime.block_on(engine.wait_scrubbed(wait));
            assert_eq!(scrubbed, Ok(true), "{label}");
            let found = holds(&fs.crash_image(), b"SECRET-");
            assert_eq!(found, None, "{label}: a purged payload is still on disk");
            drop(engine);
            thread.shutdown();
            std::mem::take(&mut *lock(&images))
        };
        assert!(!after.is_empty(), "{label}: no sync after the purge");
        for (sync, torn, image) in after {
            let label = format!("{label}, power cut at sync {sync} (torn {torn})");
            let fs = PowerLossFs::with_image(image);
            let storage = open_with(&fs, segment).unwrap_or_else(|e| panic!("{label}: {e}"));
            for (i, id) in ids.iter().enumerate() {
                let store = &storage.store;
                if i < 12 {
                    assert!(store.message(*id).unwrap().is_none(), "{label}: {i}");
                    assert!(store.done(*id).unwrap().is_none(), "{label}: {i}");
                } else {
                    match store.completed_record(*id).unwrap() {
                        Kept::Record(r) => assert_eq!(r.payload, kept(i), "{label}"),
                        Kept::Expired => panic!("{label}: payload {i} is gone"),
                    }
                }
            }
            let (engine, thread) = start(storage).unwrap();
            let scrubbed = runtime.block_on(engine.wait_scrubbed(wait));
            assert_eq!(scrubbed, Ok(true), "{label}");
            drop(engine);
            thread.shutdown();
            let durable = fs.crash_image();
            assert_eq!(holds(&durable, b"SECRET-"), None, "{label}");
            assert!(holds(&durable, b"KEEPME-").is_some(), "{label}");
            checked += 1;
        }
    }
    eprintln!("purge power-loss: {checked} images checked");
    assert!(checked >= 5, "{checked} images checked");
}
