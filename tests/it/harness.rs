//! Starts and stops hookd in-process.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use hookd::{Config, Hooks};
use hookd_client::Client;
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_storage::store::faults::Faults;
use hookd_testkit::InProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) struct TestServer {
    pub grpc: String,
    pub http: SocketAddr,
    /// The ingest listener (`POST /in/{source}`).
    pub ingest: SocketAddr,
    pub clock: ManualClock,
    pub config: Config,
    hookd: InProcess,
}

/// The engine's jitter seed in every test: the same delays on every run, so a test that
/// passes cannot turn flaky on a rare draw (e.g. a 0 ms retry that races its assertions).
const JITTER_SEED: u64 = 1;

/// A config for tests: fast retries so the manual clock needs small steps.
pub(crate) fn test_config(dir: &Path) -> Config {
    let mut c = Config {
        data_dir: dir.to_owned(),
        ..Config::default()
    };
    c.retry.base_ms = 100;
    c.retry.cap_ms = 1_000;
    c.retry.max_attempts = 3;
    // The sinks of push tests listen on loopback, which the destination guard refuses
    // unless allowed explicitly.
    c.delivery.allow_destinations = vec!["127.0.0.1/32".parse().unwrap()];
    // The reserve at its 256 MiB floor, not 1 % of the volume: these tests write a few MiB,
    // and a CI disk that builds leave with less than 1 % free must not refuse them all.
    // The reserve itself is tested with its own settings (disk_full.rs, backpressure.rs).
    c.storage.reserve_percent = 0.0;
    c
}

impl TestServer {
    pub(crate) async fn start(dir: &Path) -> Self {
        Self::start_with(test_config(dir), ManualClock::new(SystemClock.now_ms())).await
    }

    pub(crate) async fn start_with(config: Config, clock: ManualClock) -> Self {
        Self::start_full(config, clock, None).await
    }

    pub(crate) async fn start_full(
        config: Config,
        clock: ManualClock,
        faults: Option<Faults>,
    ) -> Self {
        Self::start_hooked(config, clock, faults, None).await
    }

    /// As `start_full`, with free disk space measured by `disk` instead of the file system.
    pub(crate) async fn start_hooked(
        config: Config,
        clock: ManualClock,
        faults: Option<Faults>,
        disk: Option<hookd_storage::disk::Probe>,
    ) -> Self {
        let hooks = Hooks {
            clock: Arc::new(clock.clone()),
            faults,
            rng_seed: Some(JITTER_SEED),
            disk,
            ..Default::default()
        };
        let hookd = InProcess::start(config.clone(), hooks)
            .await
            .expect("hookd failed to start");
        Self {
            grpc: hookd.grpc_url(),
            http: hookd.http,
            ingest: hookd.ingest,
            clock,
            config,
            hookd,
        }
    }

    /// For the client packages' suites: destinations hold at most 64 KiB of live messages
    /// (events up to 16 KiB), so a test reaches a hard watermark with a few calls.
    /// The hookd the client test suites need, as `client/test-hookd.toml` says (its small
    /// marks; the rest is the tests' config).
    pub(crate) async fn with_small_marks(dir: &Path) -> Self {
        let wanted = Config::from_toml(include_str!("../../client/test-hookd.toml"))
            .expect("client/test-hookd.toml parses as hookd's config");
        let mut config = test_config(dir);
        config.max_payload_bytes = wanted.max_payload_bytes;
        config.backpressure.destination_max_bytes = wanted.backpressure.destination_max_bytes;
        assert_eq!(
            (
                config.max_payload_bytes,
                config.backpressure.destination_max_bytes
            ),
            (16 << 10, 64 << 10),
            "the client tests count on these marks"
        );
        Self::start_with(config, ManualClock::new(SystemClock.now_ms())).await
    }

    pub(crate) async fn client(&self) -> Client {
        Client::connect(self.grpc.clone()).await.unwrap()
    }

    /// The raw HTTP response (status line, headers, body) of `GET path` on the HTTP
    /// listener.
    pub(crate) async fn http_get(&self, path: &str) -> String {
        http_get(self.http, path).await
    }

    /// The raw HTTP response of `GET /healthz`.
    pub(crate) async fn healthz(&self) -> String {
        let mut tcp = tokio::net::TcpStream::connect(self.http).await.unwrap();
        tcp.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        tcp.read_to_string(&mut response).await.unwrap();
        response
    }

    pub(crate) fn clock_now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Moves the injected clock and waits until the engine has acted on it (a Stats round
    /// trip queues behind the tick), so reads that bypass the engine see the result too.
    pub(crate) async fn advance(&self, ms: u64) {
        self.clock.advance(ms);
        self.hookd.engine.tick();
        self.hookd.engine.stats(None, None, 0).await.unwrap();
    }

    /// Graceful shutdown; returns once the engine has committed and stopped.
    pub(crate) async fn stop(self) {
        self.hookd.stop().await.unwrap();
    }

    /// Waits until hookd stops by itself (no shutdown asked): how it ended.
    pub(crate) async fn finished(self) -> Result<(), hookd::ServeError> {
        self.hookd.finished().await
    }

    /// Stops and starts again on the same data dir and clock.
    pub(crate) async fn restart(self) -> Self {
        let (config, clock) = (self.config.clone(), self.clock.clone());
        self.stop().await;
        Self::start_with(config, clock).await
    }
}

pub(crate) fn code(e: &hookd_client::Error) -> tonic::Code {
    match e {
        hookd_client::Error::Status(s) => s.code(),
        _ => tonic::Code::Unknown,
    }
}

pub(crate) fn message(e: &hookd_client::Error) -> String {
    match e {
        hookd_client::Error::Status(s) => s.message().to_owned(),
        other => other.to_string(),
    }
}

/// Fetches until `pred` holds, every 5 ms of real time for at most 15 s (for effects that
/// follow real I/O, such as an HTTP attempt's outcome); the last value otherwise fails the
/// test, named by `what`.
pub(crate) async fn eventually<T: std::fmt::Debug>(
    what: &str,
    mut fetch: impl AsyncFnMut() -> T,
    pred: impl Fn(&T) -> bool,
) -> T {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let value = fetch().await;
        if pred(&value) {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {value:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Waits until no push destination has an attempt in flight. The engine hands attempts
/// out only in its rounds, and with the injected clock standing still a round that leaves
/// nothing in flight admits nothing later by itself (retries, pauses, cooldowns and tokens
/// all wait for the clock): so from here on, nothing more is sent until the test moves the
/// clock or sends a request. The wait is for real I/O (the attempts' HTTP exchanges).
pub(crate) async fn push_settled(c: &mut Client) {
    let push_in_flight = |s: &hookd_client::pb::StatsResponse| -> u64 {
        s.destinations
            .iter()
            .filter(|d| d.push.is_some())
            .map(|d| d.in_flight)
            .sum()
    };
    eventually(
        "no push attempt in flight",
        async || c.stats().await.unwrap(),
        |s| push_in_flight(s) == 0,
    )
    .await;
}

/// Polls GetMessage until `pred` holds (NOT_FOUND gives `None`).
pub(crate) async fn until_message(
    c: &mut Client,
    id: &str,
    what: &str,
    pred: impl Fn(Option<&hookd_client::pb::GetMessageResponse>) -> bool,
) -> Option<hookd_client::pb::GetMessageResponse> {
    let fetch = async || match c.get_message(id).await {
        Ok(m) => Some(m),
        Err(e) if code(&e) == tonic::Code::NotFound => None,
        Err(e) => panic!("get_message: {e}"),
    };
    eventually(what, fetch, |m| pred(m.as_ref())).await
}

/// Waits until the message is delivered; returns what GetMessage shows of it then.
pub(crate) async fn delivered(c: &mut Client, id: &str) -> hookd_client::pb::GetMessageResponse {
    until_message(c, id, "delivery", |m| {
        m.is_some_and(|m| m.state == hookd_client::pb::MessageState::Delivered as i32)
    })
    .await
    .expect("a delivered message is kept")
}

/// Waits until the message is a dead letter; returns what GetMessage shows of it then.
pub(crate) async fn dead_lettered(
    c: &mut Client,
    id: &str,
) -> hookd_client::pb::GetMessageResponse {
    until_message(c, id, "dead letter", |m| {
        m.is_some_and(|m| m.state == hookd_client::pb::MessageState::DeadLetter as i32)
    })
    .await
    .expect("a dead letter exists")
}

/// The lines of a child process's output, read on a thread of their own (so a test can
/// wait for one with a timeout); the thread ends at EOF or when the receiver is dropped.
pub(crate) fn lines_of(
    out: impl std::io::Read + Send + 'static,
) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Lines of a hookd's log up to and including its "hookd serving" line (at most 60 s).
pub(crate) fn lines_until_serving(rx: &std::sync::mpsc::Receiver<String>) -> Vec<String> {
    let mut lines = Vec::new();
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(60)) {
        let serving = line.contains("hookd serving");
        lines.push(line);
        if serving {
            break;
        }
    }
    lines
}

/// Runs `program tests/{script} args...` (a Python or Node test script) off the async
/// threads; fails the test with the script's output unless it exits 0, else prints it.
pub(crate) async fn run_script(program: String, script: &str, args: Vec<String>) {
    let path = format!("{}/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut all = vec![path];
    all.extend(args);
    run_program(program, script, all, Vec::new()).await;
}

/// Runs `program ARGS` with `env` added; fails with its output unless it exits 0.
pub(crate) async fn run_program(
    program: String,
    what: &str,
    args: Vec<String>,
    env: Vec<(String, String)>,
) {
    run_program_output(program, what, args, env).await;
}

/// An example agent (`program script`) run with hookd down: it must still end, within its
/// 0.5 s wait, with its counters (the 40 events it took, none sent, all given back).
pub(crate) async fn example_agent_with_hookd_down(program: String, script: String) {
    let down = format!("127.0.0.1:{}", hookd_testkit::free_port().unwrap());
    let what = format!("{script}, hookd down");
    let args = vec![script, "down-example".into(), "40".into(), "0.5".into()];
    let out = run_program_output(program, &what, args, vec![("HOOKD_ADDR".into(), down)]).await;
    assert!(
        out.contains("emitted 40 sent 0 refused 0 failed 0 unacknowledged 40"),
        "{out}"
    );
}

/// [`run_program`], returning its stdout.
pub(crate) async fn run_program_output(
    program: String,
    what: &str,
    args: Vec<String>,
    env: Vec<(String, String)>,
) -> String {
    let script = what.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(program)
            .args(args)
            .envs(env)
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    eprintln!("{stdout}");
    stdout.into_owned()
}

/// The raw HTTP response (status line, headers, body) of `GET path` at `addr` (an HTTP
/// listener: a [`TestServer`]'s or a child hookd's).
pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.unwrap();
    response
}

/// The value of the unlabelled metric `name` in a `/metrics` page; panics (naming it) when
/// the page has none.
pub(crate) fn metric(page: &str, name: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {page}"))
}
