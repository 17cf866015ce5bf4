//! hookd as a separate process: `kill -9` while clients enqueue loses no acknowledged event;
//! SIGTERM shuts down cleanly. Real time here (a child process cannot share our clock), with
//! every loop bounded in count and time.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hookd_client::{Client, Event};
use tokio::sync::Mutex;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Hookd {
    child: Child,
    grpc: String,
}

impl Hookd {
    fn spawn(dir: &Path) -> Self {
        let (grpc, http) = (free_port(), free_port());
        let child = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
            .args(["serve", "--log-level", "warn", "--data-dir"])
            .arg(dir)
            .args([
                "--grpc-addr",
                &format!("127.0.0.1:{grpc}"),
                "--http-addr",
                &format!("127.0.0.1:{http}"),
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self {
            child,
            grpc: format!("http://127.0.0.1:{grpc}"),
        }
    }

    async fn client(&mut self) -> Client {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(c) = Client::connect(self.grpc.clone()).await {
                return c;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("hookd exited early: {status}");
            }
            assert!(Instant::now() < deadline, "hookd did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "hookd did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Hookd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let mut hookd = Hookd::spawn(dir.path());
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
    // Kill once a good number of events is acknowledged, while writers are still busy.
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.lock().await.len() < 2_000 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    hookd.child.kill().unwrap(); // SIGKILL
    hookd.child.wait().unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().await.clone();
    assert!(
        acked.len() >= 100,
        "too few acknowledged events to mean anything: {}",
        acked.len()
    );
    drop(hookd);

    let mut hookd = Hookd::spawn(dir.path());
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
    let mut hookd = Hookd::spawn(dir.path());
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
    let status = Command::new("kill")
        .args(["-TERM", &hookd.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = hookd.wait_exit(Duration::from_secs(20));
    assert!(exit.success(), "exit status {exit}");
    drop(hookd);

    let mut hookd = Hookd::spawn(dir.path());
    let mut c = hookd.client().await;
    let stored = drain(&mut c, "term").await;
    for id in &ids {
        assert!(
            stored.contains_key(id),
            "{id} missing after SIGTERM restart"
        );
    }
}
