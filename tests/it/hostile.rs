//! Hostile connections against a hookd child process: thousands of idle and trickling
//! connections on both listeners, and one connection holding 100 gRPC calls whose messages
//! never finish (finding F2). A well-behaved client keeps its latency, new clients still
//! get in, and hookd's memory stays bounded; the unfinished calls are answered and freed.

use std::time::{Duration, Instant};

use bytes::Bytes;
use hookd::testkit::ChildHookd;
use hookd_client::{Client, Event};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Resident memory of a process, from /proc.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// Latencies of `n` sequential enqueues (sorted).
async fn enqueue_latencies(c: &mut Client, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        c.enqueue(Event::to_queue("good", format!("{i}").into_bytes()))
            .await
            .unwrap();
        out.push(start.elapsed());
    }
    out.sort();
    out
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize]
}

/// The attackers' address: another loopback address than the good clients' (127.0.0.1),
/// so hookd's per-address connection share applies to them and not to the good clients.
const ATTACKER: [u8; 4] = [127, 0, 0, 2];

/// A TCP connection to `addr` from [`ATTACKER`].
async fn connect_from_attacker(addr: std::net::SocketAddr) -> std::io::Result<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(std::net::SocketAddr::from((ATTACKER, 0)))?;
    socket.connect(addr).await
}

/// Sends one byte of `text` every `every`, forever (until the test ends or hookd closes).
fn trickle(addr: std::net::SocketAddr, text: &'static [u8], every: Duration) {
    tokio::spawn(async move {
        let Ok(mut tcp) = connect_from_attacker(addr).await else {
            return;
        };
        for byte in text.iter().cycle() {
            if tcp.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
    });
}

/// One HTTP/2 connection with `streams` Enqueue calls, each announcing a 4 MiB message and
/// sending 3 MiB of it, then nothing. Returns each call's grpc-status once answered.
async fn unfinished_calls(
    addr: std::net::SocketAddr,
    streams: usize,
) -> tokio::task::JoinSet<Option<String>> {
    unfinished_calls_to(addr, "/hookd.v1.Hookd/Enqueue", streams, 3).await
}

/// As [`unfinished_calls`], to `path`, sending `mib` MiB of each 4 MiB message.
pub(crate) async fn unfinished_calls_to(
    addr: std::net::SocketAddr,
    path: &'static str,
    streams: usize,
    mib: usize,
) -> tokio::task::JoinSet<Option<String>> {
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::Frame;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(4 << 20)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..streams {
        let mut sender = sender.clone();
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::convert::Infallible>>(4);
        calls.spawn(async move {
            let body = StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
            let request = hyper::Request::post(format!("http://localhost{path}"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .body(body)
                .unwrap();
            let feed = tokio::spawn(async move {
                let mut header = vec![0u8];
                header.extend_from_slice(&(4u32 << 20).to_be_bytes());
                let _ = tx.send(Ok(Frame::data(Bytes::from(header)))).await;
                for _ in 0..mib {
                    let chunk = Bytes::from(vec![0x0a; 1 << 20]);
                    if tx.send(Ok(Frame::data(chunk))).await.is_err() {
                        return;
                    }
                }
                // Never finishes the message: keep the body open.
                tx.closed().await;
            });
            sender.ready().await.ok()?;
            let response = sender.send_request(request).await.ok()?;
            let header_status = response
                .headers()
                .get("grpc-status")
                .map(|v| v.to_str().unwrap_or("?").to_owned());
            let status = match header_status {
                Some(s) => Some(s),
                None => {
                    let collected = response.into_body().collect().await.ok()?;
                    collected
                        .trailers()
                        .and_then(|t| t.get("grpc-status"))
                        .map(|v| v.to_str().unwrap_or("?").to_owned())
                }
            };
            feed.abort();
            status
        });
    }
    calls
}

/// Lets this process open thousands of sockets (the soft open-file limit raised to the
/// hard one).
fn raise_open_files() {
    let mut limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current = limit.maximum;
    let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, limit);
}

/// A hookd child process on `dir/data` with `toml` as its configuration file.
async fn spawn_configured(dir: &std::path::Path, toml: &str) -> ChildHookd {
    let config = dir.join("hookd.toml");
    std::fs::write(&config, toml).unwrap();
    ChildHookd::spawn(
        std::path::Path::new(env!("CARGO_BIN_EXE_hookd-under-test")),
        &[],
        &dir.join("data"),
        &["--config".into(), config.into_os_string()],
        Duration::from_secs(60),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_trickling_and_unfinished_connections_leave_a_good_client_served() {
    raise_open_files();
    let dir = tempfile::tempdir().unwrap();
    let hookd = spawn_configured(
        dir.path(),
        "[connections]\nrequest_body_timeout_ms = 3000\nmax_request_bytes_in_flight = 33554432\nhandshake_timeout_ms = 10000\n",
    )
    .await;
    let pid = hookd.pid().unwrap();
    let grpc: std::net::SocketAddr = hookd.grpc.trim_start_matches("http://").parse().unwrap();

    let mut good = Client::connect(hookd.grpc.clone()).await.unwrap();
    enqueue_latencies(&mut good, 100).await; // warm-up
    let before = enqueue_latencies(&mut good, 300).await;
    let rss_before = rss_bytes(pid);

    // The flood, from another address: 2,000 idle connections to gRPC and 1,000 to HTTP,
    // 200 trickling on each (that address holds at most its share of each listener's
    // connections; the rest are closed at once).
    let mut idle = Vec::new();
    for i in 0..3_000 {
        let target = if i < 2_000 { grpc } else { hookd.http };
        idle.push(connect_from_attacker(target).await.unwrap());
    }
    for _ in 0..200 {
        trickle(
            hookd.http,
            b"GET /healthz HTTP/1.1\r\nhost: x\r\n",
            Duration::from_millis(200),
        );
        trickle(
            grpc,
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            Duration::from_millis(200),
        );
    }
    // And 100 calls whose 4 MiB messages never finish (300 MiB offered).
    let mut unfinished = unfinished_calls(grpc, 100).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let during = enqueue_latencies(&mut good, 300).await;
    let rss_during = rss_bytes(pid);
    // A new client gets in while all of that is open.
    let mut fresh = Client::connect(hookd.grpc.clone()).await.unwrap();
    fresh.stats().await.unwrap();

    // Every unfinished call is answered: over the byte budget (8) or past the body
    // deadline (4); none holds memory after.
    let mut statuses = Vec::new();
    while let Some(s) = tokio::time::timeout(Duration::from_secs(20), unfinished.join_next())
        .await
        .expect("unfinished calls are answered within the body deadline")
    {
        statuses.push(s.unwrap());
    }
    let exhausted = statuses
        .iter()
        .filter(|s| s.as_deref() == Some("8"))
        .count();
    let deadline = statuses
        .iter()
        .filter(|s| s.as_deref() == Some("4"))
        .count();
    let rss_after = rss_bytes(pid);
    eprintln!(
        "good client p50/p99 before {:?}/{:?}, during {:?}/{:?}; RSS before {} MiB, during {} MiB, after {} MiB; unfinished calls: {exhausted} RESOURCE_EXHAUSTED, {deadline} DEADLINE_EXCEEDED, others {:?}",
        pct(&before, 0.5),
        pct(&before, 0.99),
        pct(&during, 0.5),
        pct(&during, 0.99),
        rss_before >> 20,
        rss_during >> 20,
        rss_after >> 20,
        statuses
            .iter()
            .filter(|s| !matches!(s.as_deref(), Some("8" | "4")))
            .collect::<Vec<_>>()
    );
    assert_eq!(exhausted + deadline, 100, "{statuses:?}");
    assert!(
        exhausted > 0,
        "the byte budget was never reached: {statuses:?}"
    );
    // Bounded: the 300 MiB offered (400 MiB announced) is held to the 32 MiB budget, and
    // idle connections wait outside HTTP/2 until they send a byte (measured on this box:
    // +48 MiB in all; without the budget on announced lengths the calls alone took
    // +282 MiB, and before idle sockets were held back the flood alone took +88 MiB).
    assert!(
        rss_during < rss_before + (192 << 20),
        "RSS grew from {} to {} MiB",
        rss_before >> 20,
        rss_during >> 20
    );
    // Served within its normal latency (generous: this 2-core box also runs the flood).
    let (p50, p99) = (pct(&during, 0.5), pct(&during, 0.99));
    assert!(
        p50 <= (pct(&before, 0.5) * 5).max(Duration::from_millis(25)),
        "p50 {p50:?} vs {:?} before",
        pct(&before, 0.5)
    );
    assert!(
        p99 <= (pct(&before, 0.99) * 10).max(Duration::from_millis(250)),
        "p99 {p99:?} vs {:?} before",
        pct(&before, 0.99)
    );
    drop(idle);
    hookd.stop(Duration::from_secs(10)).await.unwrap();
}

/// Slowloris on both listeners: a client that trickles an HTTP/1 request head, or the
/// HTTP/2 preface, one byte at a time is cut off at the header-read (HTTP/1) or handshake
/// (HTTP/2) deadline, although it never falls silent long enough for the idle timeout.
#[tokio::test]
async fn trickled_request_heads_are_cut_off() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::harness::test_config(dir.path());
    config.connections.handshake_timeout_ms = 1_000;
    config.connections.header_read_timeout_ms = 1_000;
    let server =
        crate::harness::TestServer::start_with(config, hookd::clock::ManualClock::new(0)).await;
    let grpc: std::net::SocketAddr = server.grpc.trim_start_matches("http://").parse().unwrap();
    for (addr, head) in [
        (
            server.http,
            &b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaa"[..],
        ),
        (
            grpc,
            &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0"[..],
        ),
    ] {
        let started = Instant::now();
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let mut closed = false;
        for byte in head {
            if tcp.write_all(&[*byte]).await.is_err() {
                closed = true;
                break;
            }
            // hookd answers (a 408, or its HTTP/2 settings) or closes; either way, read.
            let mut buf = [0u8; 256];
            match tokio::time::timeout(Duration::from_millis(150), tcp.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    closed = true;
                    break;
                }
                _ => {}
            }
        }
        let took = started.elapsed();
        assert!(closed, "{addr}: still open after {took:?}");
        assert!(
            took < Duration::from_secs(4),
            "{addr}: cut off after {took:?}, the deadline is 1 s"
        );
    }
    server.stop().await;
}

/// Issue #26, 9: a flood of unsigned 1 MiB webhooks (the finding: 3,300 connections x 1
/// MiB held 3.5 GB, still held after they closed). 1,000 connections from four other
/// addresses each send a whole 1 MiB body with a bad signature: hookd holds at most the
/// unverified budget (64 MiB, a quarter per address) and refuses past it with 503 before
/// reading; once an address has failed the check `max_ingest_auth_failures` (32) times its
/// bodies are refused with 429 unread, so hookd reads and hashes a bounded part of the
/// flood; a signed provider and a gRPC client stay served. What it gives back after, and
/// the honest clients' latencies, are measured and printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_ingest_flood_is_held_to_its_budget() {
    use base64::Engine as _;
    use hmac::{KeyInit, Mac};
    use tokio::io::AsyncReadExt;
    raise_open_files();
    let key = crate::ingest::SW_KEY;
    let dir = tempfile::tempdir().unwrap();
    let hookd = spawn_configured(
        dir.path(),
        &format!(
            // One window of failed authentications spans the whole flood however long
            // this build takes to send it, so the bodies read are bounded by one
            // allowance per address (the default window is 10 s).
            "[connections]\ningest_auth_failure_window_secs = 600\n\n[[sources]]\nname = \"agents\"\nscheme = \"standard-webhooks\"\nsecrets = [\"{}\"]\nqueue = \"inbox\"\nmax_body_bytes = 1048576\n",
            crate::ingest::sw_secret(key)
        ),
    )
    .await;
    let pid = hookd.pid().unwrap();
    let ingest = hookd.ingest;
    // One POST on its own connection from `from`: the status line's code.
    let post = move |from: [u8; 4], id: String, body: Vec<u8>, signed: bool| async move {
        let ts = crate::ingest::now_s();
        let mut m = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).unwrap();
        m.update(format!("{id}.{ts}.").as_bytes());
        m.update(&body);
        let mut sig = m.finalize().into_bytes().to_vec();
        if !signed {
            sig[0] ^= 1;
        }
        let head = format!(
            "POST /in/agents HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\nwebhook-id: {id}\r\nwebhook-timestamp: {ts}\r\nwebhook-signature: v1,{}\r\ncontent-length: {}\r\n\r\n",
            base64::engine::general_purpose::STANDARD.encode(sig),
            body.len()
        );
        let socket = tokio::net::TcpSocket::new_v4().ok()?;
        socket.bind(std::net::SocketAddr::from((from, 0))).ok()?;
        let mut tcp = socket.connect(ingest).await.ok()?;
        tcp.write_all(head.as_bytes()).await.ok()?;
        let _ = tcp.write_all(&body).await;
        let mut answer = Vec::new();
        let _ = tcp.read_to_end(&mut answer).await;
        let answer = String::from_utf8_lossy(&answer);
        answer.split(' ').nth(1).and_then(|c| c.parse::<u16>().ok())
    };
    // A provider's signed 2 KB deliveries, one after another: latencies (sorted).
    let provider = move |n: usize, tag: &'static str| async move {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let started = Instant::now();
            let code = post(
                [127, 0, 0, 1],
                format!("msg_{tag}_{i}"),
                format!("{{\"n\":\"{}\"}}", "x".repeat(2_000)).into_bytes(),
                true,
            )
            .await;
            assert_eq!(code, Some(202), "a signed delivery during {tag}");
            out.push(started.elapsed());
        }
        out.sort();
        out
    };
    let mut good = Client::connect(hookd.grpc.clone()).await.unwrap();
    enqueue_latencies(&mut good, 100).await;
    provider(50, "warm").await;
    let quiet_ingest = provider(200, "quiet").await;
    let quiet_grpc = enqueue_latencies(&mut good, 300).await;
    let rss_before = rss_bytes(pid);

    let peak = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(rss_before));
    let sampling = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_bytes(pid), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // The senders run on a runtime of their own, at the lowest priority, so the
    // provider's and the gRPC client's latencies are hookd's, not this process's queue of
    // 1,000 writers (an attacker's CPU is not hookd's; here they share 2 cores).
    let flood_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(|| {
            let _ = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19);
        })
        .enable_all()
        .build()
        .unwrap();
    let mut flood = tokio::task::JoinSet::new();
    for i in 0..1_000u32 {
        let from = [127, 0, 0, 2 + (i % 4) as u8];
        flood.spawn_on(
            post(from, format!("msg_flood_{i}"), vec![b' '; 1 << 20], false),
            flood_runtime.handle(),
        );
    }
    let during_ingest = provider(200, "the flood").await;
    let during_grpc = enqueue_latencies(&mut good, 300).await;
    let mut codes = std::collections::BTreeMap::<Option<u16>, usize>::new();
    while let Some(code) = tokio::time::timeout(Duration::from_secs(60), flood.join_next())
        .await
        .expect("every flood request is answered")
    {
        *codes.entry(code.unwrap()).or_default() += 1;
    }
    sampling.abort();
    flood_runtime.shutdown_background();
    let rss_peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    let rss_closed = rss_bytes(pid);
    // Given back: measured until it settles near where it began (bounded wait).
    let settle = Instant::now();
    let mut rss_after = rss_closed;
    while rss_after > rss_before + (20 << 20) && settle.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        rss_after = rss_bytes(pid);
    }
    eprintln!(
        "flood answers {codes:?}; RSS before {} MiB, peak {} MiB, when the flood ended {} MiB, {:.1} s later {} MiB; signed provider p50/p99 quiet {:?}/{:?}, during {:?}/{:?}; gRPC Enqueue p50/p99 quiet {:?}/{:?}, during {:?}/{:?}",
        rss_before >> 20,
        rss_peak >> 20,
        rss_closed >> 20,
        settle.elapsed().as_secs_f64(),
        rss_after >> 20,
        pct(&quiet_ingest, 0.5),
        pct(&quiet_ingest, 0.99),
        pct(&during_ingest, 0.5),
        pct(&during_ingest, 0.99),
        pct(&quiet_grpc, 0.5),
        pct(&quiet_grpc, 0.99),
        pct(&during_grpc, 0.5),
        pct(&during_grpc, 0.99),
    );
    assert_eq!(
        codes.values().sum::<usize>(),
        1_000,
        "every flood request answered: {codes:?}"
    );
    assert!(
        codes
            .keys()
            .all(|c| matches!(c, Some(401 | 429 | 503) | None)),
        "only refusals (or a connection closed while sending): {codes:?}"
    );
    assert!(
        codes.get(&Some(429)).is_some_and(|n| *n > 0),
        "the failed-authentication allowance was reached: {codes:?}"
    );
    // Bodies read and hashed: per address its 32 failures, and what it had in the budget
    // (its share, 16 MiB) when the last of them tripped the allowance.
    assert!(
        codes.get(&Some(401)).copied().unwrap_or(0) <= 4 * (32 + 16 + 4),
        "each address's failures are bounded by its allowance: {codes:?}"
    );
    // Held to the budget: 1,000 MiB offered, 64 MiB of it at most waiting for a check.
    assert!(
        rss_peak < rss_before + (256 << 20),
        "RSS grew from {} to {} MiB",
        rss_before >> 20,
        rss_peak >> 20
    );
    // The signed provider is served throughout; its median within the bound of the
    // other floods (its tail is printed: on this 2-core box the flood's 1,000 senders run
    // in this process, and some of the provider's connects then wait up to 1 s).
    let p50 = pct(&during_ingest, 0.5);
    assert!(
        p50 <= (pct(&quiet_ingest, 0.5) * 5).max(Duration::from_millis(25)),
        "provider p50 {p50:?} vs {:?} quiet",
        pct(&quiet_ingest, 0.5)
    );
    // Given back: the large bodies' checks run on hookd's fixed checker threads, whose
    // trimmed heaps hold nothing after; on tokio's blocking pool they had started a
    // thread per waiting body (33 here), each keeping its heap's freed pages until it
    // exited 10 s later, which is what left 30+ MiB held in some runs.
    assert!(
        rss_after <= rss_before + (20 << 20),
        "memory not given back: {} MiB before, {} MiB {:.1} s after the flood",
        rss_before >> 20,
        rss_after >> 20,
        settle.elapsed().as_secs_f64()
    );
    hookd.stop(Duration::from_secs(10)).await.unwrap();
}
