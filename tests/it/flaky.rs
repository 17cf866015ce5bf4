//! A link to hookd that a test turns down, slow or up: a TCP proxy on 127.0.0.1 in front of
//! a real hookd, for the clients' Emitter tests (Rust here; Python and Node drive it through
//! its control URL: `GET {control}/down`, `/slow`, `/up`).
//!
//! - **down**: every connection is closed, and new ones are closed as soon as accepted
//!   (the client sees hookd unreachable);
//! - **slow**: requests reach hookd, its answers are held (calls hang until their deadline,
//!   though hookd may have stored what they carried: the answer is what is lost);
//! - **up**: bytes flow both ways.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Down,
    Slow,
    Up,
}

pub(crate) struct Flaky {
    /// `host:port` clients connect to.
    pub(crate) addr: String,
    /// `http://host:port` of the control listener.
    pub(crate) control: String,
    mode: Arc<watch::Sender<Mode>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flaky {
    /// A link to `upstream` (`host:port`), starting in `mode`.
    pub(crate) async fn start(upstream: &str, mode: Mode) -> Self {
        let upstream: SocketAddr = upstream.parse().unwrap();
        let (tx, _) = watch::channel(mode);
        let mode = Arc::new(tx);
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let control = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = proxy.local_addr().unwrap().to_string();
        let control_url = format!("http://{}", control.local_addr().unwrap());
        let accept = {
            let mode = mode.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = proxy.accept().await {
                    let rx = mode.subscribe();
                    if *rx.borrow() == Mode::Down {
                        drop(client);
                        continue;
                    }
                    tokio::spawn(relay(client, upstream, rx));
                }
            })
        };
        let ctl = {
            let mode = mode.clone();
            tokio::spawn(async move {
                let app = axum::Router::new().route(
                    "/{mode}",
                    axum::routing::get(
                        move |axum::extract::Path(m): axum::extract::Path<String>| {
                            let mode = mode.clone();
                            async move {
                                let next = match m.as_str() {
                                    "down" => Mode::Down,
                                    "slow" => Mode::Slow,
                                    "up" => Mode::Up,
                                    _ => {
                                        return (axum::http::StatusCode::NOT_FOUND, "down|slow|up");
                                    }
                                };
                                mode.send_replace(next);
                                (axum::http::StatusCode::OK, "ok")
                            }
                        },
                    ),
                );
                let _ = axum::serve(control, app).await;
            })
        };
        Self {
            addr,
            control: control_url,
            mode,
            tasks: vec![accept, ctl],
        }
    }

    /// Switches the link, from any thread.
    pub(crate) fn mode_setter(&self) -> impl Fn(Mode) + Send + 'static {
        let mode = self.mode.clone();
        move |m| {
            mode.send_replace(m);
        }
    }
}

impl Drop for Flaky {
    fn drop(&mut self) {
        self.mode.send_replace(Mode::Down);
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One connection: forwards while up, holds hookd's answers while slow, ends when down.
async fn relay(client: TcpStream, upstream: SocketAddr, rx: watch::Receiver<Mode>) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pipe(cr, sw, rx.clone(), None));
    let down = tokio::spawn(pipe(sr, cw, rx, Some(Mode::Slow)));
    let _ = tokio::join!(up, down);
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<Mode>,
    holds_in: Option<Mode>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let flows = move |m: &Mode| Some(*m) != holds_in;
    loop {
        // Hold while `holds_in`; stop when down.
        match rx.wait_for(flows).await {
            Ok(m) if *m != Mode::Down => {}
            _ => return,
        }
        let n = tokio::select! {
            n = from.read(&mut buf) => match n {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = rx.wait_for(|m| *m == Mode::Down) => return,
        };
        match rx.wait_for(flows).await {
            Ok(m) if *m != Mode::Down => {}
            _ => return,
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A hookd with the default marks and a link to it that starts up, for the Python and Node
/// clients' tests.
pub(crate) async fn link_to_hookd(dir: &std::path::Path) -> (crate::harness::TestServer, Flaky) {
    let server = crate::harness::TestServer::start(dir).await;
    let link = Flaky::start(server.grpc.trim_start_matches("http://"), Mode::Up).await;
    (server, link)
}

impl Flaky {
    /// What a client's test process needs: HOOKD_LINK_HOOKD (hookd itself),
    /// HOOKD_LINK_ADDR (the link) and HOOKD_LINK_CONTROL.
    pub(crate) fn env(&self, server: &crate::harness::TestServer) -> Vec<(String, String)> {
        vec![
            (
                "HOOKD_LINK_HOOKD".into(),
                server.grpc.trim_start_matches("http://").to_owned(),
            ),
            ("HOOKD_LINK_ADDR".into(), self.addr.clone()),
            ("HOOKD_LINK_CONTROL".into(), self.control.clone()),
        ]
    }
}
