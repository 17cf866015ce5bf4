//! Microbenchmarks of hookd's hot pieces: the timer wheel, the store's group commit, HMAC
//! signing, latency histograms, the circuit breaker and the token bucket, and matching an
//! event against 10,000 subscriptions (topic patterns and filters), and an event's check
//! against its type's JSON Schema (the catalog).
//!
//! ```sh
//! cargo bench -p hookd-bench --bench micro
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use hookd_core::breaker::{Admit, Breaker, BreakerConfig};
use hookd_core::filter::index::FilterIndex;
use hookd_core::filter::{Filter, Steps, event_document};
use hookd_core::ids::MessageId;
use hookd_core::limiter::TokenBucket;
use hookd_core::signing::{Secret, signature_header};
use hookd_core::stats::RollingHistogram;
use hookd_core::topics::{Pattern, TopicIndex};
use hookd_storage::store::records::{MessageRecord, ScheduleEntry, State};

use hookd_engine::wheel::Wheel;
use hookd_storage::store::{Store, Tables};
use prost::Message;

const MILLION: u64 = 1_000_000;

/// Deadlines spread over an hour at 1 ms ticks, in a fixed pseudo-random order.
fn deadlines(n: u64) -> Vec<u64> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % 3_600_000
        })
        .collect()
}

fn wheel(c: &mut Criterion) {
    let mut g = c.benchmark_group("wheel");
    g.sample_size(10);
    g.throughput(Throughput::Elements(MILLION));
    let due = deadlines(MILLION);
    g.bench_function("insert 1M", |b| {
        b.iter_batched(
            Wheel::<u64>::new,
            |mut w| {
                for (i, d) in due.iter().enumerate() {
                    w.insert(*d, i as u64);
                }
                w
            },
            BatchSize::LargeInput,
        )
    });
    g.bench_function("expire 1M", |b| {
        b.iter_batched(
            || {
                let mut w = Wheel::<u64>::new();
                for (i, d) in due.iter().enumerate() {
                    w.insert(*d, i as u64);
                }
                w
            },
            |mut w| {
                // The engine polls once per round; here one round per simulated second.
                let mut n = 0u64;
                for now in (1_000..=3_600_000).step_by(1_000) {
                    while let Some((_, v)) = w.poll(now) {
                        n += black_box(v) & 1;
                    }
                }
                assert!(w.is_empty());
                n
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// One round holding `batch` enqueued messages (record + schedule row each, 512 B
/// payloads): the engine's overlay and log record, then the apply stage's non-durable
/// redb commit, without the log's fsync.
fn group_commit(c: &mut Criterion) {
    let mut g = c.benchmark_group("store group commit");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(5));
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let record = MessageRecord {
        destination: "q:bench".into(),
        payload: vec![b'x'; 512],
        created_ms: 1,
        ..Default::default()
    }
    .encode_to_vec();
    let entry = ScheduleEntry {
        due_ms: 1,
        state: State::Pending,
        attempts: 0,
        max_attempts: 10,
        since_ms: 0,
        destination: "q:bench".into(),
        lane: None,
        replayed: false,
    };
    let mut now = 1_000_000u64;
    let mut overlay = hookd_storage::store::Overlay::default();
    let mut round = 0u64;
    let mut lsn = 0u64;
    for batch in [1u64, 10, 100, 1000] {
        g.throughput(Throughput::Elements(batch));
        g.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter(|| {
                // The engine's side (the overlay and the log record), then the apply
                // stage's (the same rows into redb, a non-durable commit). No fsync: the
                // log's is measured by hookd-bench against the disk's own.
                round += 1;
                overlay.begin(round);
                let record = {
                    let txn = store.snapshot().unwrap();
                    let mut t = Tables::open(&txn, &mut overlay, store.heap()).unwrap();
                    for _ in 0..batch {
                        now += 1;
                        t.insert_message(MessageId::generate(now / 1000), &record, &entry)
                            .unwrap();
                    }
                    t.into_log()
                };
                // As the apply stage does: the records become pointers into the log.
                store
                    .replay_log_records([(0, lsn, record.as_slice())])
                    .unwrap();
                lsn += record.len() as u64 + 8;
                overlay.applied(round);
            })
        });
    }
    g.finish();
}

fn signing(c: &mut Criterion) {
    let mut g = c.benchmark_group("signing");
    let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let body = vec![b'x'; 512];
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("HMAC-SHA256 webhook-signature, 512 B", |b| {
        b.iter(|| {
            signature_header(
                std::slice::from_ref(&secret),
                black_box("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"),
                1_674_087_231,
                black_box(&body),
            )
        })
    });
    g.finish();
}

fn histogram(c: &mut Criterion) {
    let mut g = c.benchmark_group("histogram");
    let mut h = RollingHistogram::new(60_000, 60);
    let mut now = 0u64;
    g.bench_function("rolling record", |b| {
        b.iter(|| {
            now += 1;
            h.record(now / 16, black_box(now % 50_000 + 100));
        })
    });
    g.finish();
}

fn breaker_limiter(c: &mut Criterion) {
    let mut g = c.benchmark_group("gates");
    let mut breaker = Breaker::new(BreakerConfig::default());
    let mut now = 0u64;
    g.bench_function("breaker admit + success", |b| {
        b.iter(|| {
            now += 1;
            if let Admit::Yes | Admit::Probe = breaker.admit(black_box(now)) {
                breaker.on_success(false);
            }
        })
    });
    let mut bucket = TokenBucket::new(1_000_000.0, 1_000.0, 0);
    let start = Instant::now();
    g.bench_function("token bucket try_take", |b| {
        b.iter(|| bucket.try_take(black_box(start.elapsed().as_millis() as u64)))
    });
    g.finish();
}

/// `event` as JSON of exactly 512 bytes: a `note` field of x's makes up the rest.
fn json_of_512_bytes(mut event: serde_json::Value) -> Vec<u8> {
    event["note"] = "".into();
    let short = serde_json::to_vec(&event).unwrap().len();
    event["note"] = "x".repeat(512 - short).into();
    let bytes = serde_json::to_vec(&event).unwrap();
    assert_eq!(bytes.len(), 512);
    bytes
}

/// 10,000 subscriptions as a busy deployment has them: 7,000 on exact event types (1,000
/// types, so 7 per type), 2,000 on prefixes (`ticket.*`, 200 prefixes), 1,000 on `*`; a
/// third of them with a filter on the payload. One publish: find the subscriptions whose
/// patterns match, build the event's document once, run each candidate's filter.
fn subscriptions(c: &mut Criterion) {
    let mut g = c.benchmark_group("subscriptions");
    let mut index = TopicIndex::default();
    let mut filters: Vec<Option<Filter>> = Vec::new();
    for i in 0..10_000u32 {
        let pattern = match i % 10 {
            0..=6 => format!("entity{}.changed", i % 1_000),
            7 | 8 => format!("entity{}.*", i % 200),
            _ => "*".to_owned(),
        };
        index.insert(&Pattern::parse(&pattern, "event_types[0]").unwrap(), i);
        let filter = (i % 3 == 0).then(|| {
            let f = serde_json::json!({
                "data": {"amount": {"$gte": i % 500}, "customer": {"tier": {"$in": ["gold", "premium"]}}},
                "metadata": {"region": {"$neq": "us"}}
            });
            Filter::parse(&f, "filter").unwrap()
        });
        filters.push(filter);
    }
    let payload = json_of_512_bytes(serde_json::json!({
        "amount": 250, "customer": {"tier": "premium", "id": "c-981"}
    }));
    let headers = [
        ("region", "eu"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
    ];
    let topic = "entity42.changed";
    g.bench_function("topic index: 10,000 subscriptions, one topic", |b| {
        b.iter(|| index.matching(black_box(topic)))
    });
    let filter_index = FilterIndex::build(filters.iter().map(|f| f.clone().map(Arc::new)));
    g.bench_function(
        "publish: patterns, document, filters (10,000 subscriptions, 512 B)",
        |b| {
            b.iter(|| {
                let mut matched: Vec<usize> = index
                    .matching(black_box(topic))
                    .into_iter()
                    .map(|i| i as usize)
                    .collect();
                matched.sort_unstable();
                let doc = event_document(None, topic, black_box(&payload), headers);
                filter_index
                    .select(&doc, &matched, &mut Steps::new(2_000_000))
                    .map_or(0, |m| m.len())
            })
        },
    );
    // Issue #49, 2: 10,000 filters `{"data": {"customer_id": "cus_N"}}` and a 1 MB publish
    // whose customer_id is an array of 90,001 ids (one of them a subscriber's).
    let equal = FilterIndex::build((0..10_000).map(|n| {
        Some(Arc::new(
            Filter::parse(
                &serde_json::json!({"data": {"customer_id": format!("cus_{n}")}}),
                "filter",
            )
            .unwrap(),
        ))
    }));
    let mut ids: Vec<String> = (0..90_000).map(|n| format!("x_{n:06}")).collect();
    ids.push("cus_4242".into());
    let attack = serde_json::to_vec(&serde_json::json!({ "customer_id": ids })).unwrap();
    let all: Vec<usize> = (0..10_000).collect();
    g.bench_function(
        "publish: 10,000 equality filters, a 1 MB array (document and index)",
        |b| {
            b.iter(|| {
                let doc = event_document(None, "order.created", black_box(&attack), []);
                equal
                    .select(&doc, &all, &mut Steps::new(2_000_000))
                    .map_or(0, |m| m.len())
            })
        },
    );
    g.finish();
}

/// What a declared event type's schema adds to an Enqueue: parsing the 512 B payload and
/// validating it, against a schema of the size a real event type has.
fn catalog(c: &mut Criterion) {
    let mut g = c.benchmark_group("catalog");
    let schema = r#"{"type": "object", "required": ["ticket_id", "priority", "customer"],
      "properties": {
        "ticket_id": {"type": "string", "pattern": "^T-[0-9]+$"},
        "priority": {"enum": ["low", "normal", "high"]},
        "customer": {"type": "object", "required": ["id"],
                     "properties": {"id": {"type": "string"}, "tier": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
        "note": {"type": "string", "maxLength": 1000}}}"#;
    let spec = hookd::catalog::EventTypeSpec {
        name: "ticket.classified".into(),
        description: String::new(),
        json_schema: Some(schema.into()),
        json_schema_file: None,
        search_keys: Vec::new(),
    };
    // As the API holds it: every tenant's catalog, the event's tenant's looked up.
    let declared = hookd::catalog::Catalog::compile(&[spec]).unwrap();
    let catalog = hookd::catalog::EventTypes::load(declared, false, Vec::new()).unwrap();
    let tenant = hookd_core::scope::TenantId::DEFAULT;
    let payload = json_of_512_bytes(serde_json::json!({
        "ticket_id": "T-4711", "priority": "high", "customer": {"id": "c-981", "tier": "gold"},
        "tags": ["billing", "eu"]
    }));
    assert_eq!(catalog.check(tenant, "ticket.classified", &payload), Ok(()));
    g.throughput(Throughput::Bytes(payload.len() as u64));
    g.bench_function("check a 512 B payload against its type's schema", |b| {
        b.iter(|| catalog.check(tenant, black_box("ticket.classified"), black_box(&payload)))
    });
    g.bench_function("an undeclared type (not strict)", |b| {
        b.iter(|| catalog.check(tenant, black_box("user.created"), black_box(&payload)))
    });
    let other = hookd_core::scope::TenantId(7);
    g.bench_function("a tenant that declares nothing", |b| {
        b.iter(|| catalog.check(other, black_box("ticket.classified"), black_box(&payload)))
    });
    g.finish();
}

criterion_group!(
    benches,
    subscriptions,
    catalog,
    wheel,
    group_commit,
    signing,
    histogram,
    breaker_limiter
);
criterion_main!(benches);
