//! The search index (issue #53) against a reference model: random histories of enqueues
//! (to endpoints and a queue, with event types and idempotency keys, across hours),
//! deliveries, refusals, replays and acks, then random queries, each paged through to its
//! end and compared with what the model says, newest first.

use proptest::prelude::*;

use super::EngineConfig;
use super::harness::Harness;
use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::push::Verdict;
use hookd_core::scope::TenantId;
use hookd_storage::store::MessageRecord;
use hookd_storage::store::search::{Query, SearchState};

const DESTINATIONS: [&str; 3] = ["endpoint:a", "endpoint:b", "queue:q"];
const EVENT_TYPES: [&str; 3] = ["", "order.created", "order.paid"];

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        dest: usize,
        event_type: usize,
        key: Option<u8>,
        advance_ms: u64,
    },
    Deliver(u16),
    Refuse(u16),
    ReplayDead,
    AckQueue,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 0..3usize, proptest::option::of(0..4u8), 0..1_800_000u64).prop_map(
            |(dest, event_type, key, advance_ms)| Op::Enqueue { dest, event_type, key, advance_ms }
        ),
        2 => prop_oneof![Just(200u16), Just(204)].prop_map(Op::Deliver),
        2 => prop_oneof![Just(400u16), Just(410)].prop_map(Op::Refuse),
        1 => Just(Op::ReplayDead),
        1 => Just(Op::AckQueue),
    ]
}

#[derive(Debug, Clone)]
struct Model {
    id: MessageId,
    dest: usize,
    event_type: usize,
    key: Option<u8>,
    state: SearchState,
    status: u32,
}

fn destination(i: usize) -> Destination {
    Destination::from_key(DESTINATIONS[i]).expect("a destination")
}

#[derive(Debug, Clone)]
struct Ask {
    dest: Option<usize>,
    event_type: Option<usize>,
    key: Option<u8>,
    states: Vec<SearchState>,
    status: Option<u32>,
    /// Created in [after, before) as offsets from the first message, in ms.
    window: Option<(u64, u64)>,
    event_id_of: Option<usize>,
    limit: usize,
    budget: u64,
}

fn state() -> impl Strategy<Value = SearchState> {
    prop_oneof![
        Just(SearchState::Pending),
        Just(SearchState::Dead),
        Just(SearchState::Delivered),
    ]
}

fn ask() -> impl Strategy<Value = Ask> {
    (
        proptest::option::of(0..3usize),
        proptest::option::of(0..3usize),
        proptest::option::of(0..4u8),
        proptest::collection::vec(state(), 0..3),
        proptest::option::of(prop_oneof![Just(200u32), Just(400), Just(410), Just(204)]),
        proptest::option::of((0..40_000_000u64, 0..40_000_000u64)),
        proptest::option::of(0..64usize),
        1..6usize,
        prop_oneof![Just(3u64), Just(1_000)],
    )
        .prop_map(
            |(dest, event_type, key, states, status, window, event_id_of, limit, budget)| Ask {
                dest,
                event_type,
                key,
                states,
                status,
                window: window.map(|(a, b)| (a.min(b), a.max(b))),
                event_id_of,
                limit,
                budget,
            },
        )
}

fn run(ops: Vec<Op>, asks: Vec<Ask>, flush_rows: usize) {
    // The apply stage writes the index's rows into redb every few rows (and at no
    // checkpoint, as the clock moves by up to 30 minutes an op), so a search reads them
    // from redb and from memory together (see `search::Pending`).
    let mut h = Harness::with(EngineConfig {
        checkpoint_interval_ms: u64::MAX / 4,
        ..super::harness::config()
    });
    h.engine.store.set_index_flush_rows(flush_rows);
    h.endpoint("a", 100);
    h.endpoint("b", 100);
    let start = h.now();
    let mut model: Vec<Model> = Vec::new();
    let mut in_flight = Vec::new();
    for op in ops {
        match op {
            Op::Enqueue {
                dest,
                event_type,
                key,
                advance_ms,
            } => {
                h.advance(advance_ms);
                let now = h.now();
                let record = MessageRecord {
                    payload: b"{}".to_vec(),
                    created_ms: now,
                    event_type: EVENT_TYPES[event_type].to_owned(),
                    idempotency_key: key.map(|k| format!("key-{k}")).unwrap_or_default(),
                    ..Default::default()
                };
                let m = super::NewMessage::from_record(
                    MessageId::generate(now),
                    destination(dest),
                    record,
                    0,
                    0,
                );
                let id = h.enqueue_message(m).expect("enqueued").id;
                if !model.iter().any(|m| m.id == id) {
                    model.push(Model {
                        id,
                        dest,
                        event_type,
                        key,
                        state: SearchState::Pending,
                        status: 0,
                    });
                }
            }
            Op::Deliver(status) | Op::Refuse(status) => {
                in_flight.extend(h.sent());
                let verdict = if matches!(op, Op::Deliver(_)) {
                    Verdict::Delivered { status }
                } else {
                    Verdict::Permanent {
                        status,
                        error: "refused".into(),
                    }
                };
                let sent = std::mem::take(&mut in_flight);
                h.report_all(&sent, verdict.clone());
                for d in &sent {
                    if let Some(m) = model.iter_mut().find(|m| m.id == d.id) {
                        m.status = u32::from(status);
                        m.state = if matches!(verdict, Verdict::Delivered { .. }) {
                            SearchState::Delivered
                        } else {
                            SearchState::Dead
                        };
                    }
                }
            }
            Op::ReplayDead => {
                let dead: Vec<MessageId> = model
                    .iter()
                    .filter(|m| h.state(m.id) == Some(hookd_storage::store::State::Dead))
                    .map(|m| m.id)
                    .collect();
                if !dead.is_empty() {
                    h.replay(dead.clone(), None).expect("replayed");
                    for m in model.iter_mut().filter(|m| dead.contains(&m.id)) {
                        m.state = SearchState::Pending;
                    }
                }
            }
            Op::AckQueue => {
                let leased = h.receive("q", 100, 30_000);
                let leases: Vec<_> = leased.iter().map(|l| l.lease).collect();
                if !leases.is_empty() {
                    h.ack(&leases).expect("acked");
                }
                for l in &leased {
                    if let Some(m) = model.iter_mut().find(|m| m.id == l.id) {
                        m.state = SearchState::Delivered;
                        m.status = 0;
                    }
                }
            }
        }
    }
    // States and statuses as the store's own reads (GetMessage's) give them: deliveries
    // that time out while the clock moves are retried and may die, which the ops above do
    // not predict.
    for m in model.iter_mut() {
        let last = |h: &hookd_storage::store::HistoryRecord| {
            h.attempts
                .iter()
                .rev()
                .find(|a| a.number > 0)
                .map_or(0, |a| a.http_status)
        };
        if let Some(done) = h.done(m.id) {
            m.state = SearchState::Delivered;
            m.status = done.history.as_ref().map_or(0, last);
        } else {
            let stored = h.stored(m.id).expect("a kept message");
            m.state = match stored.entry.state {
                hookd_storage::store::State::Pending => SearchState::Pending,
                hookd_storage::store::State::Retry => SearchState::Retrying,
                hookd_storage::store::State::Leased => SearchState::InFlight,
                hookd_storage::store::State::Dead => SearchState::Dead,
            };
            m.status = last(&stored.history);
        }
    }
    let store = h.engine.store.clone();
    for ask in asks {
        let event_id = ask
            .event_id_of
            .and_then(|i| model.get(i % model.len().max(1)))
            .map(|m| m.id);
        let query = Query {
            tenant: TenantId::DEFAULT,
            destination: ask.dest.map(|d| destination(d).encode()),
            event_type: ask
                .event_type
                .filter(|&t| t > 0)
                .map(|t| EVENT_TYPES[t].to_owned()),
            event_id: event_id.map(|id| id.to_string()),
            idempotency_key: ask.key.map(|k| format!("key-{k}")),
            declared: Vec::new(),
            states: ask.states.clone(),
            status: ask.status,
            after_ms: ask.window.map_or(0, |(a, _)| start + a),
            before_ms: ask.window.map(|(_, b)| start + b),
        };
        let mut expected: Vec<MessageId> = model
            .iter()
            .filter(|m| {
                let created = (m.id.0 >> 80) as u64;
                ask.dest.is_none_or(|d| d == m.dest)
                    && ask
                        .event_type
                        .filter(|&t| t > 0)
                        .is_none_or(|t| t == m.event_type)
                    && ask.key.is_none_or(|k| m.key == Some(k))
                    && (ask.states.is_empty() || ask.states.contains(&m.state))
                    && ask.status.is_none_or(|s| s == m.status)
                    && ask
                        .window
                        .is_none_or(|(a, b)| created >= start + a && created < start + b)
                    && event_id.is_none_or(|id| id == m.id)
            })
            .map(|m| m.id)
            .collect();
        expected.sort_by(|a, b| b.cmp(a));
        let mut found = Vec::new();
        let mut cursor = None;
        for _ in 0..10_000 {
            let page = store
                .search(&query, cursor, ask.limit, ask.budget)
                .expect("a search");
            assert!(page.hits.len() <= ask.limit);
            for hit in &page.hits {
                let m = model.iter().find(|m| m.id == hit.id).expect("a known id");
                assert_eq!(hit.state, m.state, "{hit:?}");
                assert_eq!(hit.last_status, m.status, "{hit:?}");
                assert_eq!(hit.destination, destination(m.dest).encode());
            }
            found.extend(page.hits.iter().map(|h| h.id));
            match page.next {
                Some(next) => {
                    assert!(cursor.is_none_or(|c| next < c), "the cursor moves down");
                    cursor = Some(next);
                }
                None => break,
            }
        }
        assert_eq!(found, expected, "{query:?}");
        // A history this small is counted, not estimated.
        let estimate = store.estimate(&query).expect("an estimate");
        assert!(estimate.exact, "{estimate:?} {query:?}");
        assert_eq!(estimate.count, expected.len() as u64, "{query:?}");
    }
    // Another tenant sees none of it.
    let other = Query {
        tenant: TenantId(7),
        ..Default::default()
    };
    assert!(
        store
            .search(&other, None, 100, 10_000)
            .unwrap()
            .hits
            .is_empty()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]
    #[test]
    fn search_finds_what_the_model_holds_newest_first(
        ops in proptest::collection::vec(op(), 1..40),
        asks in proptest::collection::vec(ask(), 1..12),
        flush_rows in 1usize..12,
    ) {
        run(ops, asks, flush_rows);
    }
}

/// The index survives a restart (a kill: what the log and redb hold), and rows of hours
/// past the history's horizon are swept.
#[test]
fn the_index_is_rebuilt_by_recovery_and_its_old_hours_are_swept() {
    let mut h = Harness::new();
    h.endpoint("a", 10);
    let first = h.enqueue_to_endpoint("a", b"{}");
    let query = Query {
        tenant: TenantId::DEFAULT,
        destination: Some(destination(0).encode()),
        ..Default::default()
    };
    let ids = |h: &Harness| -> Vec<MessageId> {
        h.engine
            .store
            .search(&query, None, 10, 1_000)
            .unwrap()
            .hits
            .iter()
            .map(|h| h.id)
            .collect()
    };
    assert_eq!(ids(&h), vec![first]);
    let sent = h.sent();
    assert_eq!(sent.len(), 1);
    h.report_all(&sent, Verdict::Delivered { status: 200 });
    // All, destination, state and status.
    assert_eq!(h.engine.store.search_rows().unwrap(), 4);
    let mut h = h.restarted();
    assert_eq!(h.engine.store.search_rows().unwrap(), 4);
    assert_eq!(ids(&h), vec![first]);
    let horizon = super::harness::config().history_ms();
    h.advance(horizon + 2 * 3_600_000);
    let second = h.enqueue_to_endpoint("a", b"{}");
    // The apply stage's reclaim swept the first message's rows as the clock passed.
    assert_eq!(
        h.engine
            .store
            .sweep_search(h.now() - horizon, 1_000)
            .unwrap(),
        0
    );
    assert_eq!(h.engine.store.search_rows().unwrap(), 2);
    assert_eq!(ids(&h), vec![second]);
}

/// Past its budget, an estimate extrapolates by time and by a sample, and says it is one:
/// 2,000 messages over two hours to two destinations, one in four to the second, each
/// estimated from 100 rows an hour and 16 checks.
#[test]
fn an_estimate_past_its_budget_extrapolates_and_says_so() {
    let mut h = Harness::new();
    h.endpoint("a", 10);
    h.endpoint("b", 10);
    for i in 0..2_000u64 {
        h.advance(3_600);
        let to = if i % 4 == 0 { 1 } else { 0 };
        h.enqueue_message(h.message(destination(to), b"{}"))
            .expect("enqueued");
    }
    let everything = Query {
        tenant: TenantId::DEFAULT,
        ..Default::default()
    };
    let to_b = Query {
        destination: Some(destination(1).encode()),
        ..everything.clone()
    };
    let store = h.engine.store.clone();
    // Within the budget: counted.
    let counted = store.estimate(&to_b).unwrap();
    assert!(counted.exact, "{counted:?}");
    assert_eq!(counted.count, 500);
    for (query, truth) in [(&everything, 2_000.0), (&to_b, 500.0)] {
        let e = store.estimate_within(query, 200, 32).unwrap();
        assert!(!e.exact, "{e:?}");
        assert!(e.counted <= 200 + 2, "{e:?}");
        let error = (e.count as f64 - truth).abs() / truth;
        assert!(error < 0.2, "{e:?} against {truth}");
    }
    // A condition on the rows as they are (a state) is estimated from the sample: none
    // of the messages is delivered.
    let delivered = Query {
        states: vec![SearchState::Delivered],
        ..everything.clone()
    };
    assert_eq!(store.estimate_within(&delivered, 200, 32).unwrap().count, 0);
}
