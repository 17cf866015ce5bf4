//! Tenants' quotas in the engine (issue #51, 4): each refuses with the quota it is, while
//! another tenant (and the same tenant under its limits) goes on; the day's count survives
//! a restart; an idempotent resend is answered as the duplicate it is, not refused.

use super::harness::Harness;
use super::{Command, Refusal, Tenant};
use hookd_core::destination::Destination;
use hookd_core::quota::{DAY_MS, Measure, OverQuota};
use hookd_core::scope::TenantId;
use hookd_core::stats::QuotaUse;
use hookd_storage::store::{EndpointRecord, QuotaRecord, TenantRecord};

fn tenant(h: &mut Harness, name: &str, quota: QuotaRecord) -> TenantId {
    let made: Tenant = h
        .call(|reply| Command::PutTenant {
            record: Box::new(TenantRecord {
                name: name.into(),
                quota: Some(quota),
                ..Default::default()
            }),
            create: true,
            reply,
        })
        .expect("made");
    made.id
}

fn send(h: &mut Harness, tenant: TenantId, key: &str) -> Result<super::Enqueued, Refusal> {
    let mut m = h.message(Destination::queue(tenant, "q"), b"0123456789");
    m.idempotency_key = key.into();
    h.enqueue_message(m)
}

fn over(answer: Result<super::Enqueued, Refusal>) -> OverQuota {
    match answer {
        Err(Refusal::OverQuota(over)) => over,
        other => panic!("not refused by a quota: {other:?}"),
    }
}

fn quotas(h: &mut Harness, tenant: TenantId) -> Vec<QuotaUse> {
    h.call(|reply| Command::Stats {
        tenant: Some(tenant),
        after: None,
        limit: 10,
        whole: true,
        reply,
    })
    .expect("stats")
    .quotas
}

#[test]
fn live_messages_are_refused_past_the_quota_with_a_throttle_before_it() {
    let mut h = Harness::new();
    let a = tenant(
        &mut h,
        "a",
        QuotaRecord {
            max_live_messages: 5,
            ..Default::default()
        },
    );
    let throttles: Vec<u64> = (0..5)
        .map(|i| {
            send(&mut h, a, &format!("k{i}"))
                .expect("under the quota")
                .throttle_ms
        })
        .collect();
    // No hint until the soft fraction (0.8 of 5), then one.
    assert_eq!(throttles[..3], [0, 0, 0]);
    assert!(
        throttles[3] > 0 && throttles[4] >= throttles[3],
        "{throttles:?}"
    );
    let refused = over(send(&mut h, a, "k5"));
    assert_eq!(
        (refused.measure, refused.used, refused.limit),
        (Measure::LiveMessages, 5, 5)
    );
    assert_eq!(
        refused.retry_after_ms,
        Some(1_000),
        "the watermarks' retry delay"
    );
    // A resend of one it holds is answered as the duplicate, not refused.
    let again = send(&mut h, a, "k1").expect("a duplicate");
    assert!(again.duplicate);
    // Another tenant (default: no quota) is not held back by it.
    send(&mut h, TenantId::DEFAULT, "k5").expect("default has no quota");
    assert_eq!(
        quotas(&mut h, a),
        [QuotaUse {
            quota: "max_live_messages",
            used: 5,
            limit: 5
        }]
    );
    assert!(quotas(&mut h, TenantId::DEFAULT).is_empty());
    // One taken and acknowledged makes room for one.
    let leased = h.call(|reply| Command::Receive {
        queue: Destination::queue(a, "q"),
        max: 1,
        visibility_ms: 30_000,
        wait_ms: 0,
        reply,
    });
    let lease = leased.expect("leased")[0].lease;
    h.call(|reply| Command::Ack {
        tenant: a,
        leases: vec![lease],
        reply,
    })
    .expect("acked");
    send(&mut h, a, "k6").expect("room for one");
    over(send(&mut h, a, "k7"));
}

#[test]
fn live_bytes_count_every_delivery_of_the_tenant() {
    let mut h = Harness::new();
    let a = tenant(
        &mut h,
        "a",
        QuotaRecord {
            max_live_bytes: 25,
            ..Default::default()
        },
    );
    // Each record is somewhat over 10 bytes (payload and its fields).
    send(&mut h, a, "1").expect("the first");
    let refused = over(send(&mut h, a, "2").and_then(|_| send(&mut h, a, "3")));
    assert_eq!(refused.measure, Measure::LiveBytes);
    assert!(
        refused
            .to_string()
            .starts_with("tenant quota max_live_bytes = 25")
    );
}

#[test]
fn the_rate_refuses_past_one_seconds_burst_until_a_token_is_back() {
    let mut h = Harness::new();
    let a = tenant(
        &mut h,
        "a",
        QuotaRecord {
            max_events_per_second: 4,
            ..Default::default()
        },
    );
    for i in 0..4 {
        send(&mut h, a, &format!("{i}")).expect("the burst");
    }
    let refused = over(send(&mut h, a, "4"));
    assert_eq!(refused.measure, Measure::EventsPerSecond);
    // 4 per second: one more every 250 ms.
    assert_eq!(refused.retry_after_ms, Some(250));
    assert_eq!(quotas(&mut h, a)[0].used, 4);
    h.advance(250);
    send(&mut h, a, "5").expect("a token came back");
    over(send(&mut h, a, "6"));
    // Refused events took no token: after a second the burst is whole again.
    h.advance(1_000);
    for i in 7..11 {
        send(&mut h, a, &format!("{i}")).expect("a full burst");
    }
}

#[test]
fn the_days_count_survives_a_restart_and_ends_at_midnight_utc() {
    let mut h = Harness::new();
    let a = tenant(
        &mut h,
        "a",
        QuotaRecord {
            max_events_per_day: 3,
            ..Default::default()
        },
    );
    for i in 0..3 {
        send(&mut h, a, &format!("{i}")).expect("today's three");
    }
    let refused = over(send(&mut h, a, "3"));
    let to_midnight = DAY_MS - h.now() % DAY_MS;
    assert_eq!(
        (refused.measure, refused.used, refused.retry_after_ms),
        (Measure::EventsPerDay, 3, Some(to_midnight))
    );
    // A restart (a kill: nothing stopped first) still counts today's three.
    let mut h = h.restarted();
    let refused = over(send(&mut h, a, "3"));
    assert_eq!(refused.used, 3);
    assert_eq!(
        quotas(&mut h, a),
        [QuotaUse {
            quota: "max_events_per_day",
            used: 3,
            limit: 3
        }]
    );
    h.advance(to_midnight);
    send(&mut h, a, "3").expect("a new day");
}

#[test]
fn an_update_that_names_no_quota_keeps_it_and_zeros_remove_it() {
    let mut h = Harness::new();
    let a = tenant(
        &mut h,
        "a",
        QuotaRecord {
            max_live_messages: 1,
            ..Default::default()
        },
    );
    send(&mut h, a, "0").expect("one");
    let update = |h: &mut Harness, quota: Option<QuotaRecord>| {
        h.call(|reply| Command::PutTenant {
            record: Box::new(TenantRecord {
                name: "a".into(),
                display_name: "A".into(),
                quota,
                ..Default::default()
            }),
            create: false,
            reply,
        })
        .expect("updated")
    };
    let kept = update(&mut h, None);
    assert_eq!(kept.record.quota.map(|q| q.max_live_messages), Some(1));
    over(send(&mut h, a, "1"));
    update(&mut h, Some(QuotaRecord::default()));
    send(&mut h, a, "1").expect("no quota now");
    assert!(quotas(&mut h, a).is_empty());
}

#[test]
fn endpoints_past_the_quota_are_refused_and_replacing_one_is_not() {
    let mut h = Harness::new();
    let a = tenant(
        &mut h,
        "a",
        QuotaRecord {
            max_endpoints: 1,
            ..Default::default()
        },
    );
    let put = |h: &mut Harness, name: &str, url: &str| {
        h.call(|reply| Command::PutEndpoint {
            tenant: a,
            endpoint: Box::new(EndpointRecord {
                name: name.into(),
                url: url.into(),
                max_in_flight: 1,
                ..Default::default()
            }),
            reply,
        })
    };
    put(&mut h, "one", "https://a.example/1").expect("the first");
    put(&mut h, "one", "https://a.example/2").expect("replacing it");
    match put(&mut h, "two", "https://a.example/3") {
        Err(Refusal::OverQuota(o)) => {
            assert_eq!(
                (o.measure, o.used, o.retry_after_ms),
                (Measure::Endpoints, 1, None)
            );
        }
        other => panic!("{other:?}"),
    }
    // Default's endpoints are not counted against it.
    h.endpoint("two", 1);
    assert_eq!(
        quotas(&mut h, a),
        [QuotaUse {
            quota: "max_endpoints",
            used: 1,
            limit: 1
        }]
    );
}

#[test]
fn subscriptions_past_the_quota_are_refused() {
    use hookd_core::scope::{Kind, ObjectRef};
    let mut h = Harness::new();
    let a = tenant(
        &mut h,
        "a",
        QuotaRecord {
            max_subscriptions: 2,
            max_sources: 1,
            ..Default::default()
        },
    );
    let mut put = |kind: Kind, name: &str| {
        h.call(|reply| Command::PutObject {
            object: ObjectRef::new(a, kind, name),
            record: Some(b"{}".to_vec()),
            reply,
        })
    };
    put(Kind::Subscription, "s1").expect("one");
    put(Kind::Subscription, "s2").expect("two");
    put(Kind::Subscription, "s2").expect("replacing one");
    assert!(matches!(
        put(Kind::Subscription, "s3"),
        Err(Refusal::OverQuota(OverQuota {
            measure: Measure::Subscriptions,
            used: 2,
            ..
        }))
    ));
    put(Kind::Source, "src").expect("a source");
    assert!(matches!(
        put(Kind::Source, "src2"),
        Err(Refusal::OverQuota(OverQuota {
            measure: Measure::Sources,
            ..
        }))
    ));
}

#[test]
fn a_publish_counts_each_delivery_and_is_refused_whole_past_the_quota() {
    use super::{Fanout, Subscriber};
    use hookd_core::ids::MessageId;
    let mut h = Harness::new();
    let a = tenant(
        &mut h,
        "a",
        QuotaRecord {
            max_live_messages: 5,
            max_events_per_day: 10,
            ..Default::default()
        },
    );
    let publish = |h: &Harness, key: &str| {
        let now = h.now();
        let mut m = h.message(Destination::queue(a, "s1"), b"{}");
        m.idempotency_key = key.into();
        m.fanout = Some(Box::new(Fanout {
            event_id: MessageId::generate(now),
            scope: "tevt".into(),
            also: ["s2", "s3"]
                .iter()
                .map(|q| Subscriber::new(MessageId::generate(now), Destination::queue(a, *q)))
                .collect(),
        }));
        m
    };
    let first = h.enqueue_message(publish(&h, "p1")).expect("3 of 5");
    assert_eq!(first.deliveries.len(), 3);
    // Three more would make 6: refused whole, nothing stored.
    let refused = over(h.enqueue_message(publish(&h, "p2")));
    assert_eq!((refused.measure, refused.used), (Measure::LiveMessages, 3));
    let use_of = |h: &mut Harness| -> Vec<(&'static str, u64)> {
        quotas(h, a).iter().map(|q| (q.quota, q.used)).collect()
    };
    // One event (the publish) counts once against the day; its three deliveries live.
    assert_eq!(
        use_of(&mut h),
        [("max_live_messages", 3), ("max_events_per_day", 1)]
    );
}
