//! What tests, benchmarks and the load tool need to run hookd, in one place: hookd
//! in-process or as a child process, free ports, the `__hookd` entry that lets a tool's own
//! binary be hookd, and an HTTP receiver for push deliveries.
//!
//! A crate of its own, which the `hookd` binary does not depend on: none of it can reach
//! the release binary, whatever a workspace build unifies.

#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use hookd::Config;
use hookd::app::{Hooks, ServeError};
use hookd_engine::EngineHandle;

/// A loopback port that was free a moment ago. Another process may take it before it is
/// bound: callers that spawn hookd on it retry once (see [`ChildHookd::spawn`]).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The hidden `__hookd` entry: when a tool's binary is run as `TOOL __hookd ARGS...`, it
/// is hookd (`hookd ARGS...`), so the tool can start the hookd it measures as a child
/// process of itself. `None`: the arguments are the tool's own.
pub fn trampoline() -> Option<ExitCode> {
    let mut argv = std::env::args_os();
    let _tool = argv.next();
    let mut rest = argv.peekable();
    if rest.peek().is_none_or(|a| a != "__hookd") {
        return None;
    }
    rest.next();
    Some(hookd::cli::main_from(
        std::iter::once(OsString::from("hookd")).chain(rest),
    ))
}

/// hookd running in this process on `127.0.0.1:0`, until [`InProcess::stop`].
#[derive(Debug)]
pub struct InProcess {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    /// The ingest listener (`POST /in/{source}`).
    pub ingest: SocketAddr,
    /// The engine, for tests that drive it (e.g. wake it after moving a manual clock).
    pub engine: EngineHandle,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl InProcess {
    /// Starts hookd and returns once it serves. `hooks.on_ready` is replaced.
    pub async fn start(config: Config, mut hooks: Hooks) -> Result<Self, ServeError> {
        let listeners = hookd::app::Listeners::loopback().await?;
        let (grpc_addr, http_addr, ingest_addr) = (
            listeners.grpc.local_addr()?,
            listeners.http.local_addr()?,
            listeners.ingest.local_addr()?,
        );
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = oneshot::channel();
        hooks.on_ready = Some(Box::new(move |engine| {
            let _ = ready_tx.send(engine);
        }));
        let shutdown = async {
            let _ = stop_rx.await;
        };
        let task = tokio::spawn(hookd::app::run_with(config, listeners, shutdown, hooks));
        match ready_rx.await {
            Ok(engine) => Ok(Self {
                grpc: grpc_addr,
                http: http_addr,
                ingest: ingest_addr,
                engine,
                stop: Some(stop_tx),
                task,
            }),
            // It stopped before it was ready: its error says why.
            Err(_) => match task.await {
                Ok(Err(e)) => Err(e),
                Ok(Ok(())) => Err(ServeError::Io(std::io::Error::other(
                    "hookd stopped before it was ready",
                ))),
                Err(e) => Err(ServeError::Io(std::io::Error::other(e))),
            },
        }
    }

    /// `http://127.0.0.1:PORT` of the gRPC listener.
    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// Waits until hookd stops by itself (a storage failure with `on_failure = "exit"`).
    pub async fn finished(mut self) -> Result<(), ServeError> {
        (&mut self.task)
            .await
            .map_err(|e| ServeError::Io(std::io::Error::other(e)))?
    }

    /// Graceful shutdown; returns once the engine has committed and stopped.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.task)
            .await
            .map_err(|e| ServeError::Io(std::io::Error::other(e)))?
    }
}

/// hookd as a child process: `exe [prefix...] serve --data-dir DIR --grpc-addr ...
/// --http-addr ... [extra...]` on free loopback ports. Killed when dropped.
#[derive(Debug)]
pub struct ChildHookd {
    /// `http://127.0.0.1:PORT`.
    pub grpc: String,
    pub http: SocketAddr,
    pub ingest: SocketAddr,
    child: tokio::process::Child,
}

impl ChildHookd {
    /// Starts it and waits (up to `ready_within`) until its gRPC port accepts connections.
    /// `prefix` comes before `serve` (e.g. `["__hookd"]` for a tool's own binary).
    pub async fn spawn(
        exe: &Path,
        prefix: &[&str],
        data_dir: &Path,
        extra: &[OsString],
        ready_within: Duration,
    ) -> std::io::Result<Self> {
        Self::spawn_on_free_ports(exe, prefix, data_dir, extra, &[], ready_within, None).await
    }

    /// As `spawn`, with `env` added to the child's environment (e.g. `OTEL_*`).
    pub async fn spawn_env(
        exe: &Path,
        data_dir: &Path,
        extra: &[OsString],
        env: &[(&str, String)],
        ready_within: Duration,
    ) -> std::io::Result<Self> {
        Self::spawn_on_free_ports(exe, &[], data_dir, extra, env, ready_within, None).await
    }

    /// As `spawn`, with hookd's standard output and error (its log) appended to `log`
    /// instead of this process's: a tool whose terminal shows its own progress.
    pub async fn spawn_logged(
        exe: &Path,
        prefix: &[&str],
        data_dir: &Path,
        extra: &[OsString],
        ready_within: Duration,
        log: &Path,
    ) -> std::io::Result<Self> {
        Self::spawn_on_free_ports(exe, prefix, data_dir, extra, &[], ready_within, Some(log)).await
    }

    async fn spawn_on_free_ports(
        exe: &Path,
        prefix: &[&str],
        data_dir: &Path,
        extra: &[OsString],
        env: &[(&str, String)],
        ready_within: Duration,
        log: Option<&Path>,
    ) -> std::io::Result<Self> {
        // Two tries: a port picked free can be taken before hookd binds it.
        let mut last = None;
        for _ in 0..2 {
            let grpc: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
            let http: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
            let ingest: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
            match Self::start(
                exe,
                prefix,
                data_dir,
                extra,
                env,
                [grpc, http, ingest],
                ready_within,
                log,
            )
            .await
            {
                Ok(hookd) => return Ok(hookd),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("hookd did not start")))
    }

    /// As `spawn`, on given addresses (gRPC, HTTP, ingest): a restart on the same ones.
    pub async fn spawn_at(
        exe: &Path,
        prefix: &[&str],
        data_dir: &Path,
        extra: &[OsString],
        addrs: [SocketAddr; 3],
        ready_within: Duration,
    ) -> std::io::Result<Self> {
        Self::start(exe, prefix, data_dir, extra, &[], addrs, ready_within, None).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn start(
        exe: &Path,
        prefix: &[&str],
        data_dir: &Path,
        extra: &[OsString],
        env: &[(&str, String)],
        [grpc, http, ingest]: [SocketAddr; 3],
        ready_within: Duration,
        log: Option<&Path>,
    ) -> std::io::Result<Self> {
        {
            let mut command = tokio::process::Command::new(exe);
            command
                .args(prefix)
                .arg("serve")
                .arg("--data-dir")
                .arg(data_dir)
                .args(["--grpc-addr", &grpc.to_string()])
                .args(["--http-addr", &http.to_string()])
                .args(["--ingest-addr", &ingest.to_string()])
                .args(extra)
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdin(Stdio::null())
                .kill_on_drop(true);
            if let Some(log) = log {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)?;
                command.stdout(file.try_clone()?).stderr(file);
            }
            let child = command.spawn()?;
            let mut hookd = Self {
                grpc: format!("http://{grpc}"),
                http,
                ingest,
                child,
            };
            hookd.wait_ready(ready_within).await?;
            Ok(hookd)
        }
    }

    /// Its three addresses (gRPC, HTTP, ingest), for a restart on the same ones.
    pub fn addrs(&self) -> std::io::Result<[SocketAddr; 3]> {
        let grpc = self
            .grpc
            .trim_start_matches("http://")
            .parse()
            .map_err(std::io::Error::other)?;
        Ok([grpc, self.http, self.ingest])
    }

    /// Ready is what a probe sees: gRPC health of the whole server (`""`) is SERVING,
    /// which it is once recovery is done and the listeners serve.
    async fn wait_ready(&mut self, within: Duration) -> std::io::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if serving(&self.grpc).await {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(std::io::Error::other(format!(
                    "hookd exited before it was ready: {status}"
                )));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other(format!(
                    "hookd did not listen at {} within {within:?}",
                    self.grpc
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Sends a signal (`"-KILL"`, `"-TERM"`) with the system's `kill`.
    pub fn signal(&self, signal: &str) -> std::io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| std::io::Error::other("hookd has exited"))?;
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "kill {signal} {pid}: {status}"
            )))
        }
    }

    /// Its exit status if it has exited, without waiting.
    pub fn try_exit(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }

    /// Waits for it to exit, at most `within`.
    pub async fn wait(&mut self, within: Duration) -> std::io::Result<std::process::ExitStatus> {
        tokio::time::timeout(within, self.child.wait())
            .await
            .map_err(|_| std::io::Error::other(format!("hookd did not exit within {within:?}")))?
    }

    /// SIGTERM (a graceful shutdown), then SIGKILL if it has not exited after `grace`.
    pub async fn stop(mut self, grace: Duration) -> std::io::Result<()> {
        if self.signal("-TERM").is_ok() && self.wait(grace).await.is_ok() {
            return Ok(());
        }
        self.child.kill().await
    }
}

/// Whether the hookd at `grpc` (`http://host:port`) answers its health check SERVING.
pub async fn serving(grpc: &str) -> bool {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(grpc.to_owned()) else {
        return false;
    };
    let Ok(channel) = endpoint.connect().await else {
        return false;
    };
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .is_ok_and(|r| r.into_inner().status == ServingStatus::Serving as i32)
}

/// How a [`Receiver`] answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    /// Status, extra headers, body.
    Full(u16, Vec<(&'static str, String)>, Vec<u8>),
    /// Never answers (the client must time out).
    Hang,
}

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: http::Method,
    pub uri: http::Uri,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    pub at: Instant,
}

#[derive(Debug)]
struct State {
    script: VecDeque<Reply>,
    default: Reply,
    /// Requests wait while this is on.
    held: bool,
    record: bool,
    count: u64,
    received: Vec<Received>,
}

/// An HTTP/1.1 receiver on `127.0.0.1:0` for push deliveries: answers from a script, then
/// a default; can hold every request until released; counts requests and (unless told
/// not to, for benchmarks) records them.
#[derive(Debug, Clone)]
pub struct Receiver {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    released: Arc<tokio::sync::Notify>,
    _task: Arc<AbortOnDrop>,
}

#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Receiver {
    /// Answers `default` to every request, and records them.
    pub async fn start(default: Reply) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            script: VecDeque::new(),
            default,
            held: false,
            record: true,
            count: 0,
            received: Vec::new(),
        }));
        let released = Arc::new(tokio::sync::Notify::new());
        let (s, r) = (state.clone(), released.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                // Small responses go out at once (no Nagle delay).
                let _ = stream.set_nodelay(true);
                let (s, r) = (s.clone(), r.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let (s, r) = (s.clone(), r.clone());
                        async move { Ok::<_, std::convert::Infallible>(answer(req, s, r).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            addr,
            state,
            released,
            _task: Arc::new(AbortOnDrop(task)),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers these, in order, before the default.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.lock().script.extend(replies);
    }

    /// Answers this once the script is used up.
    pub fn set_default(&self, reply: Reply) {
        self.lock().default = reply;
    }

    /// Counts requests without keeping them (for benchmarks).
    pub fn without_recording(self) -> Self {
        self.lock().record = false;
        self
    }

    /// While held, requests wait (each holds its connection) until [`Receiver::release`].
    pub fn hold(&self) {
        self.lock().held = true;
    }

    pub fn release(&self) {
        self.lock().held = false;
        self.released.notify_waiters();
    }

    pub fn count(&self) -> u64 {
        self.lock().count
    }

    pub fn received(&self) -> Vec<Received> {
        self.lock().received.clone()
    }

    /// A poisoned lock only means a test thread panicked; the record is intact.
    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    state: Arc<Mutex<State>>,
    released: Arc<tokio::sync::Notify>,
) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    loop {
        let notified = released.notified();
        if !lock(&state).held {
            break;
        }
        notified.await;
    }
    let reply = {
        let mut s = lock(&state);
        s.count += 1;
        if s.record {
            s.received.push(Received {
                method: parts.method,
                uri: parts.uri,
                headers: parts.headers,
                body,
                at: Instant::now(),
            });
        }
        let default = s.default.clone();
        s.script.pop_front().unwrap_or(default)
    };
    let (status, headers, body) = match reply {
        Reply::Status(code) => (code, Vec::new(), Vec::new()),
        Reply::Full(code, headers, body) => (code, headers, body),
        Reply::Hang => {
            std::future::pending::<()>().await;
            (500, Vec::new(), Vec::new())
        }
    };
    let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in headers {
        if let Ok(v) = http::HeaderValue::from_str(&value) {
            response.headers_mut().insert(name, v);
        }
    }
    response
}
