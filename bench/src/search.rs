//! SearchMessages at scale (issue #53, 6): hookd holding `events` retained events (pull
//! queues nobody reads: every one stays live, so every one is retained), with an event
//! type whose `search_keys` index a customer id, then filtered searches timed. Beside it,
//! the write path's cost of declared keys: EnqueueBatch legs of the same build with and
//! without the declaration, alternated.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hookd_client::{Client, pb};
use tonic::transport::Channel;

/// Queues the events go to, event types, and customers (a declared key's values).
const QUEUES: u64 = 100;
const TYPES: u64 = 10;
const CUSTOMERS: u64 = 100_000;

/// The declared event types: `order.N`, each indexing `/customer` (and, with `keys`, only
/// then).
pub(crate) fn event_types(keys: bool) -> Vec<hookd::catalog::EventTypeSpec> {
    (0..TYPES)
        .map(|t| hookd::catalog::EventTypeSpec {
            name: format!("order.{t}"),
            description: String::new(),
            json_schema: None,
            json_schema_file: None,
            search_keys: if keys {
                vec!["/customer".into(), "/region".into()]
            } else {
                Vec::new()
            },
        })
        .collect()
}

/// A write path the declared keys' cost is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Path {
    /// EnqueueBatch to pull queues.
    Batch,
    /// Enqueue, one event a call, to pull queues.
    Unary,
    /// Enqueue to a topic (`order.N`) whose subscription takes it into a queue.
    Publish,
    /// Enqueue, one event a call, to an endpoint that answers 200 (delivered as it goes).
    Push,
}

impl Path {
    pub(crate) const ALL: [Path; 4] = [Path::Batch, Path::Unary, Path::Publish, Path::Push];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Path::Batch => "batch",
            Path::Unary => "unary",
            Path::Publish => "publish",
            Path::Push => "push",
        }
    }
}

/// What a leg of `path` needs before it starts: a subscription for a publish, an endpoint
/// (at `sink`) for a push.
pub(crate) async fn prepare(client: &mut Client, path: Path, sink: &str) -> anyhow::Result<()> {
    match path {
        Path::Batch | Path::Unary => {}
        Path::Publish => {
            client
                .raw()
                .put_subscription(pb::PutSubscriptionRequest {
                    subscription: Some(pb::Subscription {
                        name: "ledger".into(),
                        destination: Some(pb::subscription::Destination::Queue("ledger".into())),
                        event_types: vec!["order.*".into()],
                        ..Default::default()
                    }),
                })
                .await?;
        }
        Path::Push => {
            client
                .raw()
                .put_endpoint(pb::PutEndpointRequest {
                    endpoint: Some(pb::Endpoint {
                        name: "sink".into(),
                        url: sink.to_owned(),
                        ..Default::default()
                    }),
                })
                .await?;
        }
    }
    Ok(())
}

fn event_on(path: Path, n: u64, payload: &[u8]) -> pb::EnqueueRequest {
    let mut body = format!(
        r#"{{"customer":"c{}","region":"r{}","n":{n},"pad":""#,
        n.wrapping_mul(7_919) % CUSTOMERS,
        n % 16
    )
    .into_bytes();
    body.extend_from_slice(payload);
    body.extend_from_slice(b"\"}");
    let event_type = format!("order.{}", n % TYPES);
    use pb::enqueue_request::Destination;
    let destination = match path {
        Path::Batch | Path::Unary => Destination::Queue(format!("q{}", n % QUEUES)),
        Path::Publish => Destination::Topic(event_type.clone()),
        Path::Push => Destination::Endpoint("sink".into()),
    };
    pb::EnqueueRequest {
        destination: Some(destination),
        event_type,
        payload: body,
        ..Default::default()
    }
}

/// Stores `events` events of `path` with `tasks` calls in flight: EnqueueBatch calls of
/// `batch` events for [`Path::Batch`], else one Enqueue a call; the rate.
pub(crate) async fn fill(
    channels: &[Channel],
    path: Path,
    events: u64,
    batch: u64,
    tasks: usize,
    payload: usize,
) -> anyhow::Result<f64> {
    let per_call = if path == Path::Batch { batch.max(1) } else { 1 };
    let t = Instant::now();
    let pad = vec![b'x'; payload];
    let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut handles = Vec::new();
    for task in 0..tasks {
        let mut client = Client::from_channel(channels[task % channels.len()].clone());
        let (next, pad) = (next.clone(), pad.clone());
        handles.push(tokio::spawn(async move {
            loop {
                let first = next.fetch_add(per_call, std::sync::atomic::Ordering::Relaxed);
                if first >= events {
                    return anyhow::Ok(());
                }
                let last = (first + per_call).min(events);
                let batch = pb::EnqueueBatchRequest {
                    events: (first..last).map(|n| event_on(path, n, &pad)).collect(),
                };
                // At the write queue's mark hookd asks for a pause: wait and send again.
                loop {
                    let sent = match path {
                        Path::Batch => client.raw().enqueue_batch(batch.clone()).await.map(|r| {
                            r.into_inner()
                                .results
                                .iter()
                                .filter(|x| {
                                    !matches!(x.result, Some(pb::enqueue_result::Result::Ok(_)))
                                })
                                .count()
                        }),
                        _ => client
                            .raw()
                            .enqueue(batch.events[0].clone())
                            .await
                            .map(|_| 0),
                    };
                    match sent {
                        Ok(failed) => {
                            anyhow::ensure!(failed == 0, "{failed} events refused");
                            break;
                        }
                        Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Err(s) => anyhow::bail!("{} leg: {s}", path.name()),
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(events as f64 / t.elapsed().as_secs_f64())
}

fn ms(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1_000.0
}

/// Times `samples` searches of each kind, newest first, one page of 100; then as many
/// count estimates of each (`count`, with a page of one), against the true count where
/// the fill of `events` makes it known.
pub(crate) async fn measure(client: &mut Client, samples: u64, events: u64) -> anyhow::Result<()> {
    // A read waits until redb holds what was logged: the first one after the fill waits
    // for the apply stage to catch up (said here, not counted below).
    let t = Instant::now();
    client
        .raw()
        .search_messages(pb::SearchMessagesRequest::default())
        .await?;
    println!(
        "  the apply stage caught up {:.1} s after the last answer",
        t.elapsed().as_secs_f64()
    );
    type Make = fn(u64) -> pb::SearchMessagesRequest;
    let kinds: [(&str, Make); 5] = [
        ("a customer (declared key)", |i| pb::SearchMessagesRequest {
            payload: [("/customer".into(), format!("c{}", i * 131 % CUSTOMERS))].into(),
            ..Default::default()
        }),
        ("a queue and a customer", |i| {
            let c = i * 131 % CUSTOMERS;
            // A queue that customer's events went to (n % QUEUES for an n with this customer).
            pb::SearchMessagesRequest {
                destination: Some(pb::Destination {
                    kind: Some(pb::destination::Kind::Queue(format!("q{}", i % QUEUES))),
                }),
                payload: [("/customer".into(), format!("c{c}"))].into(),
                ..Default::default()
            }
        }),
        ("an event type and a region", |i| {
            pb::SearchMessagesRequest {
                event_type: format!("order.{}", i % TYPES),
                payload: [("/region".into(), format!("r{}", i % 16))].into(),
                ..Default::default()
            }
        }),
        ("a queue, pending, last hour", |i| {
            pb::SearchMessagesRequest {
                destination: Some(pb::Destination {
                    kind: Some(pb::destination::Kind::Queue(format!("q{}", i % QUEUES))),
                }),
                states: vec![pb::MessageState::Pending as i32],
                created_after_unix_ms: now_ms().saturating_sub(3_600_000),
                ..Default::default()
            }
        }),
        ("everything, newest page", |_| {
            pb::SearchMessagesRequest::default()
        }),
    ];
    for &(label, make) in &kinds {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        let (mut found, mut scanned) = (0u64, 0u64);
        for i in 0..samples {
            let mut r = make(i);
            r.page_size = 100;
            let t = Instant::now();
            let page = client.raw().search_messages(r).await?.into_inner();
            h.saturating_record(t.elapsed().as_micros() as u64);
            found += page.messages.len() as u64;
            scanned += page.scanned;
        }
        println!(
            "  {label:<30} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  ({:.1} hits, {:.0} candidates a page)",
            ms(&h, 0.5),
            ms(&h, 0.99),
            h.max() as f64 / 1_000.0,
            found as f64 / samples as f64,
            scanned as f64 / samples as f64
        );
    }
    // The true counts the fill makes: event n has customer n*7919 % CUSTOMERS (a
    // permutation: each customer `events / CUSTOMERS`), region n % 16, type n % TYPES and
    // queue n % QUEUES; every event is pending.
    let truths: [Option<u64>; 5] = [
        Some(events / CUSTOMERS),
        None,
        Some(events / 80),
        Some(events / QUEUES),
        Some(events),
    ];
    println!("  count estimates (`count`, a page of one):");
    for (&(label, make), truth) in kinds.iter().zip(truths) {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
        let (mut exact, mut error, mut total) = (0u64, 0f64, 0u64);
        for i in 0..samples {
            let mut r = make(i);
            r.page_size = 1;
            r.count = true;
            let t = Instant::now();
            let page = client.raw().search_messages(r).await?.into_inner();
            h.saturating_record(t.elapsed().as_micros() as u64);
            exact += u64::from(page.total_exact);
            total += page.total;
            if let Some(truth) = truth.filter(|t| *t > 0) {
                error = error.max((page.total as f64 - truth as f64).abs() / truth as f64);
            }
        }
        let against = match truth {
            Some(t) => format!("true {t}, worst error {:.1} %", error * 100.0),
            None => "true count not known".to_owned(),
        };
        println!(
            "  {label:<30} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  (mean {:.0}, {exact} of {samples} exact; {against})",
            ms(&h, 0.5),
            ms(&h, 0.99),
            h.max() as f64 / 1_000.0,
            total as f64 / samples as f64,
        );
    }
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
