//! FIFO lanes end to end (issue #29): 10,000 events on 1,000 ordering keys, each published
//! to an ordered endpoint (a real HTTP sink that answers 500 or hangs past the timeout on
//! some first attempts) and to an ordered pull queue (a consumer that nacks some leases and
//! lets others run out), through a `kill -9` and a graceful restart of a hookd child
//! process. The order checkers at the sink and in the consumer: no key ever sees an event
//! before an earlier one of its key, sequence numbers run gap-free from 1 per key and
//! destination (a repeat of one already taken is a redelivery), the queue never leases two
//! of one lane at once, and every event arrives. Real time (a child process), every loop
//! bounded in count and time.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use hookd_client::{Client, Event, pb};
use hookd_core::clock::{Clock, SystemClock};
use hookd_testkit::ChildHookd;

const KEYS: u64 = 1_000;
const EVENTS: u64 = 10_000;

/// What the sink's order checker saw.
#[derive(Default)]
struct Seen {
    /// Per key: the highest number answered 2xx (each the next after the one before).
    taken: HashMap<String, u64>,
    /// Per key and number: attempts that arrived.
    attempts: HashMap<(String, u64), u32>,
    violations: Vec<String>,
    failed: u64,
    hung: u64,
}

impl Seen {
    fn done(&self) -> u64 {
        self.taken.values().sum()
    }
}

/// A stable pick per event: the first attempt of one in 7 gets a 500, of one in 11 a hang.
fn pick(key: &str, seq: u64) -> u64 {
    key.bytes()
        .fold(seq.wrapping_mul(0x9e37_79b9_7f4a_7c15), |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}

async fn hook(
    State(seen): State<Arc<Mutex<Seen>>>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let key = text("hookd-ordering-key");
    let seq: u64 = text("webhook-sequence").parse().unwrap_or(0);
    let hang = {
        let mut s = seen.lock().unwrap();
        let last = s.taken.get(&key).copied().unwrap_or(0);
        if seq == 0 || seq > last + 1 {
            let v = format!("sink: {key:?} got #{seq} with #{last} taken");
            s.violations.push(v);
        }
        if body != format!("{key}/{seq}") {
            s.violations
                .push(format!("sink: #{seq} of {key:?} carried {body:?}"));
        }
        let attempt = s.attempts.entry((key.clone(), seq)).or_default();
        *attempt += 1;
        let first = *attempt == 1;
        let p = pick(&key, seq);
        if first && p.is_multiple_of(7) {
            s.failed += 1;
            return StatusCode::INTERNAL_SERVER_ERROR;
        }
        let hang = first && p.is_multiple_of(11);
        if hang {
            s.hung += 1;
        } else if seq == last + 1 {
            s.taken.insert(key, seq);
        }
        hang
    };
    if hang {
        // Past the endpoint's timeout: hookd gives the attempt up and retries.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    StatusCode::OK
}

async fn start_sink(seen: Arc<Mutex<Seen>>) -> SocketAddr {
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(hook))
        .with_state(seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// What the pull consumer's order checker saw.
#[derive(Default)]
struct Pulled {
    acked: HashMap<String, u64>,
    violations: Vec<String>,
    nacked: u64,
    expired: u64,
}

/// Leases from the FIFO queue until told to stop: acks most, nacks one in 8 and lets one
/// in 13 run out (its lease is then held until its deadline, and a second lease of its
/// lane before that is a violation). Reconnects across hookd's restarts.
async fn consume(
    grpc: String,
    pulled: Arc<Mutex<Pulled>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut held: HashMap<String, u64> = HashMap::new();
    let mut client: Option<Client> = None;
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
        let Some(c) = client.as_mut() else {
            client = Client::connect(grpc.clone()).await.ok();
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            continue;
        };
        let got = match c
            .receive(
                "steps",
                200,
                Duration::from_millis(1_000),
                Some(Duration::from_millis(200)),
            )
            .await
        {
            Ok(got) => got,
            Err(_) => {
                client = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let now = SystemClock.now_ms();
        let mut acks = Vec::new();
        for m in got {
            n += 1;
            // 0: ack, 1: nack, 2: let the lease run out.
            let choice = {
                let mut p = pulled.lock().unwrap();
                if let Some(&until) = held.get(&m.ordering_key)
                    && now < until
                {
                    let v = format!(
                        "queue: {:?} leased again before its lease ran out",
                        m.ordering_key
                    );
                    p.violations.push(v);
                }
                let last = p.acked.get(&m.ordering_key).copied().unwrap_or(0);
                if m.sequence != last + 1 {
                    let v = format!(
                        "queue: {:?} got #{} with #{last} acked",
                        m.ordering_key, m.sequence
                    );
                    p.violations.push(v);
                }
                if m.payload != format!("{}/{}", m.ordering_key, m.sequence).as_bytes() {
                    p.violations.push(format!(
                        "queue: #{} of {:?} carried another event",
                        m.sequence, m.ordering_key
                    ));
                }
                match n % 104 {
                    x if x % 8 == 0 => {
                        p.nacked += 1;
                        1
                    }
                    x if x % 13 == 0 => {
                        p.expired += 1;
                        2
                    }
                    _ => 0,
                }
            };
            match choice {
                1 => {
                    held.remove(&m.ordering_key);
                    let again = Some(Duration::from_millis(20));
                    let _ = c.nack(&m.lease_id, again, "checker: again").await;
                }
                2 => {
                    held.insert(m.ordering_key.clone(), m.lease_deadline_unix_ms);
                }
                _ => {
                    held.remove(&m.ordering_key);
                    acks.push((m.ordering_key.clone(), m.sequence, m.lease_id.clone()));
                }
            }
        }
        if !acks.is_empty() {
            let ids: Vec<String> = acks.iter().map(|(_, _, l)| l.clone()).collect();
            // Counted only once hookd answered: an ack lost to a kill is redelivered.
            if c.ack(ids).await.is_ok() {
                let mut p = pulled.lock().unwrap();
                for (key, seq, _) in acks {
                    p.acked.insert(key, seq);
                }
            } else {
                client = None;
            }
        }
    }
}

struct Hookd {
    child: ChildHookd,
    addrs: [SocketAddr; 3],
}

impl Hookd {
    async fn spawn(
        dir: &Path,
        config: &Path,
        sink: SocketAddr,
        at: Option<[SocketAddr; 3]>,
    ) -> Self {
        let exe = Path::new(env!("CARGO_BIN_EXE_hookd-under-test"));
        let extra = [
            "--log-level".into(),
            "warn".into(),
            "--config".into(),
            config.as_os_str().to_owned(),
            "--allow-destination".into(),
            format!("127.0.0.1/32:{}", sink.port()).into(),
        ];
        let ready = Duration::from_secs(30);
        let child = match at {
            Some(addrs) => ChildHookd::spawn_at(exe, &[], dir, &extra, addrs, ready).await,
            None => ChildHookd::spawn(exe, &[], dir, &extra, ready).await,
        }
        .expect("hookd starts");
        let addrs = child.addrs().unwrap();
        Self { child, addrs }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_on_a_thousand_keys_arrive_in_order_through_failures_kill_9_and_a_restart()
 {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookd.toml");
    std::fs::write(
        &config,
        // The sink's hangs time out together (a burst of 1,000 lane heads at once): the
        // breaker is kept out of this run, which is about order, not about the breaker.
        "[retry]\nmax_attempts = 100\nbase_ms = 20\ncap_ms = 200\n\n[delivery.breaker]\nfailure_threshold = 100000\n\n[[queues]]\nname = \"steps\"\nfifo = \"block\"\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sink = start_sink(seen.clone()).await;
    let mut hookd = Hookd::spawn(&data, &config, sink, None).await;
    let grpc = hookd.child.grpc.clone();
    let mut c = Client::connect(grpc.clone()).await.unwrap();
    c.put_endpoint(pb::Endpoint {
        name: "ordered".into(),
        url: format!("http://{sink}/hook"),
        timeout_ms: 250,
        max_in_flight: 256,
        max_attempts: 100,
        retry_base_ms: 20,
        retry_cap_ms: 200,
        fifo: pb::Fifo::Block as i32,
        ..Default::default()
    })
    .await
    .unwrap();
    for (name, to) in [
        (
            "steps-to-endpoint",
            pb::subscription::Destination::Endpoint("ordered".into()),
        ),
        (
            "steps-to-queue",
            pb::subscription::Destination::Queue("steps".into()),
        ),
    ] {
        c.put_subscription(pb::Subscription {
            name: name.into(),
            destination: Some(to),
            event_types: vec!["ticket.*".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let pulled = Arc::new(Mutex::new(Pulled::default()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let consumer = tokio::spawn(consume(grpc.clone(), pulled.clone(), stop.clone()));

    // One producer publishes every event in order of its number per key, 500 a call.
    let mut sent: HashMap<String, u64> = HashMap::new();
    let mut batch = Vec::new();
    for i in 0..EVENTS {
        let key = format!("ticket-{}", (i * 7_919) % KEYS);
        let n = sent.entry(key.clone()).or_default();
        *n += 1;
        batch.push(
            Event::to_topic("ticket.step", format!("{key}/{n}").into_bytes())
                .ordering_key(key.clone()),
        );
        if batch.len() == 500 {
            let results = c.enqueue_batch(std::mem::take(&mut batch)).await.unwrap();
            for r in results {
                match r.result {
                    Some(pb::enqueue_result::Result::Ok(ok)) => assert_eq!(ok.subscribers, 2),
                    other => panic!("publish refused: {other:?}"),
                }
            }
        }
    }
    drop(c);

    let done = |seen: &Mutex<Seen>, pulled: &Mutex<Pulled>| {
        seen.lock().unwrap().done() + pulled.lock().unwrap().acked.values().sum::<u64>()
    };
    let deadline = Instant::now() + Duration::from_secs(150);
    // Waits until `target` deliveries are taken; false at the deadline.
    let wait_for = |target: u64| {
        let (seen, pulled) = (seen.clone(), pulled.clone());
        async move {
            while done(&seen, &pulled) < target {
                let broken = !seen.lock().unwrap().violations.is_empty()
                    || !pulled.lock().unwrap().violations.is_empty();
                if broken || Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            true
        }
    };
    // What stands in the way, when a wait runs out.
    let stuck = |grpc: String| {
        let (seen, pulled) = (seen.clone(), pulled.clone());
        async move {
            let stats = match Client::connect(grpc).await {
                Ok(mut c) => format!("{:?}", c.stats().await.map(|s| s.destinations)),
                Err(e) => e.to_string(),
            };
            let seen = seen.lock().unwrap();
            let pulled = pulled.lock().unwrap();
            panic!(
                "{} of {} deliveries taken by the endpoint, {} by the queue; violations {:?} {:?}; {stats}",
                seen.done(),
                EVENTS,
                pulled.acked.values().sum::<u64>(),
                &seen.violations[..seen.violations.len().min(5)],
                &pulled.violations[..pulled.violations.len().min(5)],
            )
        }
    };
    // kill -9 a third of the way through, a graceful restart at two thirds.
    if !wait_for(2 * EVENTS / 3).await {
        stuck(hookd.child.grpc.clone()).await;
    }
    hookd.child.signal("-KILL").unwrap();
    hookd.child.wait(Duration::from_secs(10)).await.unwrap();
    let addrs = hookd.addrs;
    hookd = Hookd::spawn(&data, &config, sink, Some(addrs)).await;
    if !wait_for(4 * EVENTS / 3).await {
        stuck(hookd.child.grpc.clone()).await;
    }
    hookd.child.stop(Duration::from_secs(30)).await.unwrap();
    hookd = Hookd::spawn(&data, &config, sink, Some(addrs)).await;
    if !wait_for(2 * EVENTS).await {
        stuck(hookd.child.grpc.clone()).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    consumer.await.unwrap();

    let (seen, pulled) = (
        std::mem::take(&mut *seen.lock().unwrap()),
        std::mem::take(&mut *pulled.lock().unwrap()),
    );
    assert_eq!(seen.violations, Vec::<String>::new());
    assert_eq!(pulled.violations, Vec::<String>::new());
    for (key, n) in &sent {
        assert_eq!(
            seen.taken.get(key),
            Some(n),
            "endpoint: {key} gap-free to its last"
        );
        assert_eq!(
            pulled.acked.get(key),
            Some(n),
            "queue: {key} gap-free to its last"
        );
    }
    // The failures were injected, and retried.
    assert!(
        seen.failed > 500 && seen.hung > 300,
        "{} 500s, {} hangs",
        seen.failed,
        seen.hung
    );
    assert!(
        pulled.nacked > 500 && pulled.expired > 300,
        "{} nacks, {} expiries",
        pulled.nacked,
        pulled.expired
    );
    // The console's endpoint page names the policy.
    let page = crate::harness::http_get(hookd.child.http, "/ui/endpoints/ordered").await;
    assert!(
        page.contains("block: a dead letter holds its lane"),
        "{page}"
    );
    let mut c = Client::connect(hookd.child.grpc.clone()).await.unwrap();
    let stats = c.stats().await.unwrap();
    let total = stats.total.unwrap();
    assert_eq!(
        (
            total.pending,
            total.awaiting_retry,
            total.in_flight,
            total.dead_letter
        ),
        (0, 0, 0, 0)
    );
    hookd.child.stop(Duration::from_secs(30)).await.unwrap();
}

/// An operator's side of a `block` lane, in process: the dead letter that holds its lane
/// is listed as such (gRPC, the console's page with its Skip button, `/metrics`), the lane
/// waits, a replay delivers it first and in order, and a purge by id skips it.
#[tokio::test]
async fn a_blocked_lane_is_shown_and_replayed_or_skipped_by_an_operator() {
    use crate::harness::{TestServer, metric, test_config};
    use hookd_core::clock::ManualClock;

    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.queues = vec![hookd::config::QueueSpec {
        name: "steps".into(),
        fifo: Some(hookd::config::FifoSetting::Block),
    }];
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let mut c = server.client().await;
    let vis = Duration::from_secs(30);
    let mut dead = HashMap::new();
    for key in ["replayed", "skipped"] {
        for n in 1..=2 {
            let sent = c
                .enqueue(
                    Event::to_queue("steps", format!("{key}/{n}").into_bytes())
                        .ordering_key(key)
                        .max_attempts(1),
                )
                .await
                .unwrap();
            if n == 1 {
                dead.insert(key, sent.id);
            }
        }
    }
    // Both heads use their one attempt: each holds its lane.
    let heads = c.receive("steps", 10, vis, None).await.unwrap();
    assert_eq!(heads.len(), 2);
    for m in &heads {
        assert_eq!(m.sequence, 1);
        c.nack(&m.lease_id, None, "poison").await.unwrap();
    }
    assert!(c.receive("steps", 10, vis, None).await.unwrap().is_empty());
    let listed = c
        .raw()
        .list_dead_letters(pb::ListDeadLettersRequest {
            destination: None,
            page_size: 10,
            page_token: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .dead_letters;
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|d| d.blocks_lane && d.sequence == 1));
    let steps = |stats: pb::StatsResponse| {
        let d = stats
            .destinations
            .into_iter()
            .find(|d| d.destination == "queue:steps")
            .unwrap();
        (d.fifo_lanes, d.blocked_lanes)
    };
    assert_eq!(steps(c.stats().await.unwrap()), (2, 2));
    // `hookd stats` shows them, and says what to do.
    let table = crate::ctl::hookd(&server.grpc, &["stats"], None).await;
    assert!(table.stdout.contains("LANES"), "{}", table.stdout);
    assert!(table.stdout.contains("2, 2 BLOCKED"), "{}", table.stdout);
    assert!(
        table
            .stdout
            .contains("2 FIFO lane(s) blocked by a dead letter"),
        "{}",
        table.stdout
    );
    let metrics = server.http_get("/metrics").await;
    assert_eq!(metric(&metrics, "hookd_lanes_blocked_total"), 2);
    let m = c.get_message(dead["replayed"].clone()).await.unwrap();
    assert_eq!(
        (
            m.ordering_key.as_str(),
            m.sequence,
            m.blocks_lane,
            m.out_of_order
        ),
        ("replayed", 1, true, false)
    );
    let page = server
        .http_get(&format!("/ui/messages/{}", dead["replayed"]))
        .await;
    assert!(
        page.contains("FIFO lane") && page.contains("blocks its lane"),
        "{page}"
    );
    let page = server.http_get("/ui/dead-letters").await;
    assert!(
        page.contains("blocks its lane") && page.contains(">Skip</button>"),
        "{page}"
    );

    // Replay: delivered first, in order, then the lane goes on.
    assert_eq!(c.replay([dead["replayed"].clone()]).await.unwrap(), 1);
    let got = c.receive("steps", 10, vis, None).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(
        (
            got[0].ordering_key.as_str(),
            got[0].sequence,
            got[0].out_of_order
        ),
        ("replayed", 1, false)
    );
    c.ack([got[0].lease_id.clone()]).await.unwrap();
    let got = c.receive("steps", 10, vis, None).await.unwrap();
    assert_eq!(
        (got[0].ordering_key.as_str(), got[0].sequence),
        ("replayed", 2)
    );
    c.ack([got[0].lease_id.clone()]).await.unwrap();

    // Skip: purged by id, the lane moves on to #2 (a gap the receiver sees).
    let purged = c
        .raw()
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            ids: vec![dead["skipped"].clone()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((purged.purged, purged.matched), (1, 1));
    let got = c.receive("steps", 10, vis, None).await.unwrap();
    assert_eq!(
        (got[0].ordering_key.as_str(), got[0].sequence),
        ("skipped", 2)
    );
    // Ids and a filter together are refused, naming the field.
    let both = c
        .raw()
        .purge_dead_letters(pb::PurgeDeadLettersRequest {
            ids: vec![dead["skipped"].clone()],
            filter: Some(pb::DeadLetterFilter::default()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(both.message().starts_with("ids:"), "{}", both.message());
    assert_eq!(steps(c.stats().await.unwrap()).1, 0);
    server.stop().await;
}
