//! hookd as a separate process: `kill -9` while clients enqueue loses no acknowledged event;
//! SIGTERM shuts down cleanly. Real time here (a child process cannot share our clock), with
//! every loop bounded in count and time.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hookd_client::{Client, Event};
use hookd_testkit::ChildHookd;
use tokio::sync::Mutex;

/// hookd as a child process of the test (the kit's `ChildHookd`), on `dir`.
struct Hookd(ChildHookd);

impl Hookd {
    async fn spawn(dir: &Path) -> Self {
        let exe = Path::new(env!("CARGO_BIN_EXE_hookd-under-test"));
        let extra = ["--log-level".into(), "warn".into()];
        Self(
            ChildHookd::spawn(exe, &[], dir, &extra, Duration::from_secs(30))
                .await
                .expect("hookd starts"),
        )
    }

    async fn client(&self) -> Client {
        Client::connect(self.0.grpc.clone()).await.unwrap()
    }
}

/// Kills hookd with SIGKILL once `enough` writes are recorded (20 s at most), while the
/// writers are still busy; then stops the writers and returns what they recorded.
async fn kill_9_after<T: Clone>(
    hookd: Hookd,
    recorded: &Mutex<Vec<T>>,
    enough: usize,
    stop: &AtomicBool,
    writers: Vec<tokio::task::JoinHandle<()>>,
) -> Vec<T> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while recorded.lock().await.len() < enough && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut hookd = hookd.0;
    hookd.signal("-KILL").unwrap();
    hookd.wait(Duration::from_secs(10)).await.unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    recorded.lock().await.clone()
}

/// Drains a queue; returns id -> payload.
async fn drain(c: &mut Client, queue: &str) -> HashMap<String, Vec<u8>> {
    let mut out = HashMap::new();
    for _ in 0..10_000 {
        let got = c
            .receive(queue, 1_000, Duration::from_secs(600), None)
            .await
            .unwrap();
        if got.is_empty() {
            break;
        }
        for m in got {
            out.insert(m.id, m.payload);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_enqueuing_loses_no_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let hookd = Hookd::spawn(dir.path()).await;
    let client = hookd.client().await;

    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..16 {
        let (mut c, acked, stop) = (client.clone(), acked.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let started = Instant::now();
            for n in 0..100_000 {
                if stop.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(30) {
                    break;
                }
                let key = format!("w{w}-{n}");
                let event =
                    Event::to_queue("crash", key.clone().into_bytes()).idempotency_key(key.clone());
                match c.enqueue(event).await {
                    Ok(r) => acked.lock().await.push((key, r.id)),
                    Err(_) => break, // the server died under us: this one was not acknowledged
                }
            }
        }));
    }
    let acked = kill_9_after(hookd, &acked, 2_000, &stop, writers).await;
    assert!(
        acked.len() >= 100,
        "too few acknowledged events to mean anything: {}",
        acked.len()
    );

    let hookd = Hookd::spawn(dir.path()).await;
    let mut c = hookd.client().await;
    let stored = drain(&mut c, "crash").await;
    let mut lost = Vec::new();
    for (key, id) in &acked {
        match stored.get(id) {
            Some(payload) => assert_eq!(payload, key.as_bytes(), "payload of {id}"),
            None => lost.push(key.clone()),
        }
    }
    assert!(
        lost.is_empty(),
        "{} acknowledged events lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!(
        "kill -9: {} acknowledged, all {} found after restart ({} stored but unacknowledged)",
        acked.len(),
        acked.len(),
        stored.len() - acked.len()
    );
    // The idempotency records survived too.
    let (key, id) = &acked[0];
    let again = c
        .enqueue(Event::to_queue("crash", key.clone().into_bytes()).idempotency_key(key.clone()))
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(&again.id, id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_down_cleanly_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let hookd = Hookd::spawn(dir.path()).await;
    let mut c = hookd.client().await;
    let mut ids = Vec::new();
    for i in 0..20u8 {
        ids.push(
            c.enqueue(Event::to_queue("term", vec![i]))
                .await
                .unwrap()
                .id,
        );
    }
    let mut hookd = hookd.0;
    hookd.signal("-TERM").unwrap();
    let exit = hookd.wait(Duration::from_secs(20)).await.unwrap();
    assert!(exit.success(), "exit status {exit}");
    drop(hookd);

    let hookd = Hookd::spawn(dir.path()).await;
    let mut c = hookd.client().await;
    let stored = drain(&mut c, "term").await;
    for id in &ids {
        assert!(
            stored.contains_key(id),
            "{id} missing after SIGTERM restart"
        );
    }
}

/// The ingest listener's 202 means durable too: `kill -9` while 16 providers post signed
/// webhooks loses none that was answered 202, the source made over gRPC survives, and a
/// resend after the restart is still recognised as a duplicate of the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_receiving_webhooks_loses_no_202() {
    use crate::ingest::{now_s, post, sw_headers, sw_secret};
    const KEY: &[u8] = b"crash-test-key-of-32-bytes......";
    let dir = tempfile::tempdir().unwrap();
    let hookd = Hookd::spawn(dir.path()).await;
    let mut admin = hookd.client().await;
    admin
        .put_source(hookd_proto::v1::Source {
            name: "crash".into(),
            scheme: "standard-webhooks".into(),
            secrets: vec![sw_secret(KEY)],
            content_types: vec!["*/*".into()],
            event_type: "header:x-kind".into(),
            route: Some(hookd_proto::v1::source::Route::Queue(
                "inbound-crash".into(),
            )),
            ..Default::default()
        })
        .await
        .unwrap();
    let ingest = hookd.0.ingest;
    let accepted: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..16 {
        let (accepted, stop) = (accepted.clone(), stop.clone());
        writers.push(tokio::spawn(async move {
            let started = Instant::now();
            for n in 0..100_000 {
                if stop.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(30) {
                    break;
                }
                let id = format!("w{w}-{n}");
                let headers = sw_headers(KEY, &id, now_s(), id.as_bytes());
                let a = post(ingest, "crash", &headers, id.as_bytes()).await;
                match (a.status, a.json()["id"].as_str()) {
                    (202, Some(hookd_id)) => accepted.lock().await.push((id, hookd_id.to_owned())),
                    // The server died under us: this one was not answered 202.
                    _ => break,
                }
            }
        }));
    }
    let accepted = kill_9_after(hookd, &accepted, 1_000, &stop, writers).await;
    assert!(accepted.len() >= 100, "too few: {}", accepted.len());

    let hookd = Hookd::spawn(dir.path()).await;
    let mut c = hookd.client().await;
    let stored = drain(&mut c, "inbound-crash").await;
    let lost: Vec<&String> = accepted
        .iter()
        .filter(|(id, hookd_id)| stored.get(hookd_id).map(Vec::as_slice) != Some(id.as_bytes()))
        .map(|(id, _)| id)
        .collect();
    assert!(
        lost.is_empty(),
        "{} webhooks answered 202 lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    eprintln!(
        "kill -9 while receiving: {} answered 202, all found after restart ({} stored unanswered)",
        accepted.len(),
        stored.len() - accepted.len()
    );
    // The source (made over gRPC) and the delivery ids survived.
    let (id, hookd_id) = &accepted[0];
    let a = post(
        hookd.0.ingest,
        "crash",
        &sw_headers(KEY, id, now_s(), id.as_bytes()),
        id.as_bytes(),
    )
    .await;
    assert_eq!(a.status, 202, "{a:?}");
    assert_eq!(a.json()["duplicate"], true);
    assert_eq!(a.json()["id"].as_str(), Some(hookd_id.as_str()));
}

/// An agent's Emitter through `kill -9` and a restart of hookd on the same address, under
/// a burst: every event `emit` took is stored exactly once (the buffer held them while hookd
/// was down; retried calls whose answers were lost come back as duplicates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emitter_loses_and_doubles_nothing_when_hookd_is_killed_and_restarted() {
    use hookd_client::{Emitter, EmitterConfig};
    let dir = tempfile::tempdir().unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_hookd-under-test"));
    let extra: Vec<std::ffi::OsString> = vec!["--log-level".into(), "warn".into()];
    let hookd = ChildHookd::spawn(exe, &[], dir.path(), &extra, Duration::from_secs(30))
        .await
        .unwrap();
    let addrs = hookd.addrs().unwrap();
    let emitter = Emitter::connect_lazy(
        hookd.grpc.clone(),
        EmitterConfig {
            call_timeout: Duration::from_secs(2),
            ..EmitterConfig::default()
        },
    )
    .unwrap();

    // The agent: a burst of up to 6,000 events, as fast as emit lets it, for at most 30 s.
    let taken: Arc<Mutex<Vec<String>>> = Arc::default();
    let agent = {
        let (emitter, taken) = (emitter.clone(), taken.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            for n in 0..6_000 {
                if started.elapsed() > Duration::from_secs(30) {
                    break;
                }
                let body = format!("ev-{n}");
                if emitter
                    .emit(Event::to_queue("agent", body.clone().into_bytes()))
                    .is_ok()
                {
                    taken.lock().await.push(body);
                }
                if n % 64 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    // Kill it once a good part is sent, and start it again on the same address.
    let deadline = Instant::now() + Duration::from_secs(20);
    while emitter.counters().sent < 1_500 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut hookd = hookd;
    hookd.signal("-KILL").unwrap();
    hookd.wait(Duration::from_secs(10)).await.unwrap();
    let sent_before = emitter.counters().sent;
    let hookd = ChildHookd::spawn_at(exe, &[], dir.path(), &extra, addrs, Duration::from_secs(30))
        .await
        .unwrap();
    agent.await.unwrap();
    let left = emitter.close(Duration::from_secs(60)).await;
    assert!(
        left.is_empty(),
        "{} events the agent handed over did not reach hookd",
        left.len()
    );
    let counters = emitter.counters();
    let taken = taken.lock().await.clone();
    assert!(
        sent_before >= 1_000 && sent_before < taken.len() as u64,
        "{sent_before} of {}",
        taken.len()
    );
    assert_eq!(counters.sent, taken.len() as u64, "{counters:?}");
    assert_eq!((counters.failed, counters.buffered), (0, 0), "{counters:?}");

    let mut c = Client::connect(hookd.grpc.clone()).await.unwrap();
    let stored = drain(&mut c, "agent").await;
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    for payload in stored.values() {
        *seen.entry(payload.clone()).or_default() += 1;
    }
    let lost: Vec<&String> = taken
        .iter()
        .filter(|b| !seen.contains_key(b.as_bytes()))
        .collect();
    let doubled: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        lost.is_empty(),
        "{} taken events lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(doubled.is_empty(), "{} events stored twice", doubled.len());
    assert_eq!(stored.len(), taken.len());
    eprintln!(
        "emitter through kill -9: {} events taken, {} sent before the kill, {} retries, {} answered as duplicates",
        taken.len(),
        sent_before,
        counters.retries,
        counters.duplicates
    );
    hookd.stop(Duration::from_secs(10)).await.unwrap();
}

/// Issue #26, 2: a flipped byte in the log's last segment, with whole records after it, is
/// damage: hookd refuses to start and names the segment and position; `hookd repair
/// --dry-run` lists exactly the messages cutting there drops (and changes nothing);
/// `hookd repair` cuts, and hookd starts with every other acknowledged event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_log_refuses_to_start_and_repair_says_what_it_drops() {
    let exe = env!("CARGO_BIN_EXE_hookd-under-test");
    let dir = tempfile::tempdir().unwrap();
    let hookd = Hookd::spawn(dir.path()).await;
    let mut c = hookd.client().await;
    let mut acked = Vec::new();
    for n in 0..200 {
        let r = c
            .enqueue(Event::to_queue("q", format!("event {n}").into_bytes()))
            .await
            .unwrap();
        acked.push(r.id);
    }
    let mut hookd = hookd.0;
    hookd.signal("-KILL").unwrap();
    hookd.wait(Duration::from_secs(10)).await.unwrap();

    // Flip one byte of the middle record of the last segment.
    let mut segments: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    segments.sort();
    let last = segments.last().unwrap().clone();
    let mut bytes = std::fs::read(&last).unwrap();
    let mut starts = Vec::new();
    let mut at = 0;
    while at + 8 <= bytes.len() {
        starts.push(at);
        at += 8 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    }
    assert!(
        starts.len() > 20,
        "{} records in the last segment",
        starts.len()
    );
    let middle = starts[starts.len() / 2];
    // Its last byte: inside the record, past the changes' names and keys.
    let next = starts[starts.len() / 2 + 1];
    bytes[next - 1] ^= 0x20;
    std::fs::write(&last, &bytes).unwrap();
    let name = last.file_name().unwrap().to_str().unwrap().to_owned();
    let start: u64 = name[4..24].parse().unwrap();

    let run = |args: &[&str]| {
        let out = std::process::Command::new(exe)
            .args(args)
            .arg("--data-dir")
            .arg(dir.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (code, said) = run(&[
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--ingest-addr",
        "127.0.0.1:0",
    ]);
    assert_ne!(code, Some(0), "{said}");
    let position = start + middle as u64;
    assert!(
        said.contains(&name) && said.contains(&format!("position {position}")),
        "{said}"
    );
    assert!(said.contains("hookd repair"), "{said}");
    assert_eq!(std::fs::read(&last).unwrap(), bytes, "nothing changed");

    let (code, plan) = run(&["repair", "--dry-run"]);
    assert_eq!(code, Some(0), "{plan}");
    assert!(plan.contains("nothing was changed"), "{plan}");
    assert_eq!(
        std::fs::read(&last).unwrap(),
        bytes,
        "--dry-run changes nothing"
    );
    let listed: Vec<String> = plan
        .lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();

    let (code, said) = run(&["repair"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("repaired"), "{said}");

    let hookd = Hookd::spawn(dir.path()).await;
    let mut c = hookd.client().await;
    let stored = drain(&mut c, "q").await;
    let missing: Vec<String> = acked
        .iter()
        .filter(|id| !stored.contains_key(*id))
        .cloned()
        .collect();
    assert!(!missing.is_empty(), "the damaged record held an event");
    let mut listed_sorted = listed.clone();
    listed_sorted.sort();
    let mut missing_sorted = missing.clone();
    missing_sorted.sort();
    assert_eq!(
        missing_sorted, listed_sorted,
        "repair --dry-run listed exactly the events that are gone:\n{plan}"
    );
    eprintln!(
        "damaged log: start refused; repair dropped {} of {} acknowledged events, each one listed by --dry-run",
        missing.len(),
        acked.len()
    );
}
