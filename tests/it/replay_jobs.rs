//! Replay jobs (issue #53, 2) against a real hookd and real sinks: the recovery case
//! ("resend what acme did not get since 10:00, and what it answered 202 to") with its dry
//! run; the headers a replayed delivery carries; pause, resume and cancel across a
//! restart; a FIFO key's range resent in order in its lane; kill -9 in the middle of a job
//! (a child process) without the job sending a selected message twice; and the refusals,
//! each naming its field.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use hookd_client::{Client, Event, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_testkit::ChildHookd;

use crate::harness::{TestServer, code, eventually, message, test_config};
use crate::sink::{Reply, Sink};

fn endpoint(name: &str) -> Option<pb::Destination> {
    Some(pb::Destination {
        kind: Some(pb::destination::Kind::Endpoint(name.into())),
    })
}

const DEAD: i32 = pb::MessageState::DeadLetter as i32;
const DELIVERED: i32 = pb::MessageState::Delivered as i32;
const DONE: i32 = pb::ReplayJobState::Done as i32;
const PAUSED: i32 = pb::ReplayJobState::Paused as i32;
const RUNNING: i32 = pb::ReplayJobState::Running as i32;
const CANCELLED: i32 = pb::ReplayJobState::Cancelled as i32;

async fn create(c: &mut Client, r: pb::CreateReplayJobRequest) -> pb::CreateReplayJobResponse {
    c.raw().create_replay_job(r).await.unwrap().into_inner()
}

async fn job(c: &mut Client, id: &str) -> pb::ReplayJob {
    c.raw()
        .get_replay_job(pb::GetReplayJobRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap()
}

async fn act(c: &mut Client, id: &str, action: pb::ReplayJobAction) -> pb::ReplayJob {
    c.raw()
        .update_replay_job(pb::UpdateReplayJobRequest {
            id: id.into(),
            action: action as i32,
        })
        .await
        .unwrap()
        .into_inner()
        .job
        .unwrap()
}

/// Waits (real time, bounded) until job `id` is done; the job then.
async fn done(c: &mut Client, id: &str) -> pb::ReplayJob {
    let mut c2 = c.clone();
    let id = id.to_owned();
    eventually(
        "the replay job is done",
        async || job(&mut c2, &id).await,
        |j| j.state == DONE,
    )
    .await
}

fn header<'a>(r: &'a crate::sink::Received, name: &str) -> &'a str {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

async fn delivered_all(c: &mut Client, ids: &[String]) {
    for id in ids {
        crate::harness::delivered(c, id).await;
    }
}

#[tokio::test]
async fn a_recovery_job_resends_what_an_endpoint_missed_with_an_estimate_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.breaker.failure_threshold = 1_000;
    config.delivery.breaker.slow_failure_threshold = 1_000;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let acme = Sink::start(Reply::Status(200)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "acme".into(),
        url: acme.url("/hook"),
        secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    // An old one (before `since`): refused, dead, but not selected.
    acme.script([Reply::Status(500)]);
    let old = c
        .enqueue(Event::to_endpoint("acme", "{\"n\":0}").max_attempts(1))
        .await
        .unwrap()
        .id;
    crate::harness::dead_lettered(&mut c, &old).await;
    server.advance(1_000).await;
    let since = server.clock.now_ms();
    server.advance(1).await;
    // Since `since`: one refused (500, dead), one taken with 202 (wrongly), one with 200.
    acme.script([Reply::Status(500)]);
    let dead = c
        .enqueue(Event::to_endpoint("acme", "{\"n\":1}").max_attempts(1))
        .await
        .unwrap()
        .id;
    crate::harness::dead_lettered(&mut c, &dead).await;
    server.advance(1).await;
    acme.script([Reply::Status(202)]);
    let wrong = c
        .enqueue(
            Event::to_endpoint("acme", "{\"n\":2}")
                .idempotency_key("order-2")
                .event_type("order.paid"),
        )
        .await
        .unwrap()
        .id;
    crate::harness::delivered(&mut c, &wrong).await;
    server.advance(1).await;
    let fine = c
        .enqueue(Event::to_endpoint("acme", "{\"n\":3}"))
        .await
        .unwrap()
        .id;
    delivered_all(&mut c, std::slice::from_ref(&fine)).await;
    let sent_before = acme.count();
    assert_eq!(sent_before, 4);

    // The dry run: two selected (one dead letter, one delivered), their bytes, the time.
    let recovery = pb::ReplayRecovery {
        destination: endpoint("acme"),
        since_unix_ms: since,
        delivered_statuses: vec![202],
    };
    let dry = create(
        &mut c,
        pb::CreateReplayJobRequest {
            recovery: Some(recovery.clone()),
            dry_run: true,
            max_per_s: 50.0,
            ..Default::default()
        },
    )
    .await;
    assert!(dry.job.is_none(), "a dry run makes no job: {dry:?}");
    let estimate = dry.estimate.unwrap();
    assert_eq!(
        (
            estimate.count,
            estimate.dead_letters,
            estimate.delivered,
            estimate.live
        ),
        (2, 1, 1, 0),
        "{estimate:?}"
    );
    assert_eq!(estimate.bytes, 14);
    assert!((estimate.seconds - 2.0 / 50.0).abs() < 1e-9, "{estimate:?}");
    assert!(!estimate.truncated);
    let jobs = c
        .raw()
        .list_replay_jobs(pb::ListReplayJobsRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(jobs.jobs.is_empty(), "{jobs:?}");
    assert_eq!(acme.count(), sent_before, "a dry run sends nothing");

    // The job: both resent, oldest first.
    let made = create(
        &mut c,
        pb::CreateReplayJobRequest {
            recovery: Some(recovery),
            max_per_s: 50.0,
            ..Default::default()
        },
    )
    .await;
    let id = made.job.unwrap().id;
    let finished = done(&mut c, &id).await;
    assert_eq!(
        (
            finished.total,
            finished.replayed,
            finished.skipped,
            finished.failed,
            finished.remaining
        ),
        (2, 2, 0, 0, 0),
        "{finished:?}"
    );
    assert!(finished.selection.contains("endpoint:acme"), "{finished:?}");
    assert!(finished.selection.contains("202"), "{finished:?}");
    assert_eq!(finished.eta_unix_ms, 0);
    assert!(finished.finished_unix_ms > 0);
    let received = acme.wait_for(sent_before + 2).await;
    let resent = &received[sent_before..];
    // The dead letter, made ready again: its own id.
    let first = resent
        .iter()
        .find(|r| header(r, "webhook-id") == dead)
        .expect("the dead letter is resent");
    assert_eq!(first.body.as_ref(), b"{\"n\":1}");
    assert_eq!(header(first, "hookd-replay"), "dead-letter");
    // The delivered one, sent again as a copy: the original's webhook-id, event id and
    // idempotency key, the job in `hookd-replay`, and a signature over the original's id.
    let copy = resent
        .iter()
        .find(|r| header(r, "webhook-id") == wrong)
        .expect("the delivered one is resent with its own webhook-id");
    assert_eq!(copy.body.as_ref(), b"{\"n\":2}");
    assert_eq!(header(copy, "hookd-replay"), id);
    assert_eq!(header(copy, "hookd-event-id"), wrong);
    assert_eq!(header(copy, "idempotency-key"), "order-2");
    assert_eq!(header(copy, "webhook-event-type"), "order.paid");
    let original = received
        .iter()
        .find(|r| header(r, "webhook-id") == wrong && header(r, "hookd-replay").is_empty())
        .expect("the original delivery");
    assert_eq!(
        header(original, "webhook-signature").is_empty(),
        header(copy, "webhook-signature").is_empty()
    );
    let secret =
        hookd_core::signing::Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let timestamp: u64 = header(copy, "webhook-timestamp").parse().unwrap();
    assert_eq!(
        hookd_core::signing::signature_header(&[secret], &wrong, timestamp, &copy.body).as_deref(),
        Some(header(copy, "webhook-signature")),
        "the copy is signed over the original's id"
    );
    // Neither the old dead letter nor the 200 is resent.
    assert!(resent.iter().all(|r| header(r, "webhook-id") != old));
    assert!(resent.iter().all(|r| header(r, "webhook-id") != fine));
    // The copy is a message of its own, found with the original by the event's id.
    let mut c2 = c.clone();
    let both = eventually(
        "the copy delivered",
        async || {
            c2.raw()
                .search_messages(pb::SearchMessagesRequest {
                    event_id: wrong.clone(),
                    states: vec![DELIVERED],
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .messages
        },
        |m| m.len() == 2,
    )
    .await;
    assert!(both.iter().any(|m| m.id == wrong));
    // The dead letter is no longer one.
    let m = crate::harness::delivered(&mut c, &dead).await;
    assert_eq!(m.state, DELIVERED);

    // The same job over HTTP/JSON.
    let answer = crate::rest::get(server.http, &format!("/v1/replay-jobs/{id}")).await;
    assert_eq!(answer.status(), 200, "{answer:?}");
    assert_eq!(answer.json()["job"]["state"], "REPLAY_JOB_STATE_DONE");
    assert_eq!(answer.json()["job"]["replayed"], "2");
    let listed = crate::rest::get(server.http, "/v1/replay-jobs").await;
    assert_eq!(listed.json()["jobs"][0]["id"], id.as_str());
    let _ = DEAD;
    server.stop().await;
}

#[tokio::test]
async fn a_job_pauses_resumes_and_cancels_and_a_restart_keeps_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "shop".into(),
        url: sink.url("/hook"),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..12 {
        let id = c
            .enqueue(Event::to_endpoint("shop", format!("{{\"i\":{i}}}")))
            .await
            .unwrap()
            .id;
        ids.push(id);
    }
    delivered_all(&mut c, &ids).await;
    let search = pb::SearchMessagesRequest {
        destination: endpoint("shop"),
        states: vec![DELIVERED],
        ..Default::default()
    };
    // Paused at once: at 2 a second, its first step (1 message) may have gone.
    let made = create(
        &mut c,
        pb::CreateReplayJobRequest {
            search: Some(search.clone()),
            max_per_s: 2.0,
            ..Default::default()
        },
    )
    .await;
    let id = made.job.unwrap().id;
    let paused = act(&mut c, &id, pb::ReplayJobAction::Pause).await;
    assert_eq!(paused.state, PAUSED);
    assert!(paused.remaining > 0, "{paused:?}");
    assert_eq!(paused.eta_unix_ms, 0);
    // Pausing again changes nothing.
    assert_eq!(act(&mut c, &id, pb::ReplayJobAction::Pause).await, paused);

    // A restart: still paused, where it was.
    let server = server.restart().await;
    let mut c = server.client().await;
    let after = job(&mut c, &id).await;
    assert_eq!(after.state, PAUSED);
    assert_eq!(
        (after.replayed, after.remaining),
        (paused.replayed, paused.remaining)
    );

    // Resumed (faster: a resume keeps the job's pace; this one is 2/s, 12 take 6 s).
    let resumed = act(&mut c, &id, pb::ReplayJobAction::Resume).await;
    assert_eq!(resumed.state, RUNNING);
    assert!(resumed.eta_unix_ms > 0);
    let finished = done(&mut c, &id).await;
    assert_eq!(
        (finished.replayed, finished.failed),
        (12, 0),
        "{finished:?}"
    );
    // Each message went out exactly twice: once, and once more from the job.
    let received = sink.wait_for(24).await;
    let mut times: HashMap<String, u32> = HashMap::new();
    for r in &received {
        *times.entry(header(r, "webhook-id").to_owned()).or_default() += 1;
    }
    for id in &ids {
        assert_eq!(times.get(id), Some(&2), "{id}: {times:?}");
    }
    // A done job cannot be resumed or cancelled.
    let e = c
        .raw()
        .update_replay_job(pb::UpdateReplayJobRequest {
            id: id.clone(),
            action: pb::ReplayJobAction::Cancel as i32,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");

    // Cancelled: ends where it was, and stays ended across a restart.
    let made = create(
        &mut c,
        pb::CreateReplayJobRequest {
            search: Some(search),
            max_per_s: 0.5,
            ..Default::default()
        },
    )
    .await;
    let second = made.job.unwrap().id;
    let cancelled = act(&mut c, &second, pb::ReplayJobAction::Cancel).await;
    assert_eq!(cancelled.state, CANCELLED);
    assert!(cancelled.remaining > 0, "{cancelled:?}");
    let server = server.restart().await;
    let mut c = server.client().await;
    let later = job(&mut c, &second).await;
    assert_eq!(later.state, CANCELLED);
    assert_eq!(later.replayed, cancelled.replayed);
    // Newest first.
    let listed = c
        .raw()
        .list_replay_jobs(pb::ListReplayJobsRequest {})
        .await
        .unwrap()
        .into_inner()
        .jobs;
    let order: Vec<&str> = listed.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(order, vec![second.as_str(), id.as_str()]);
    server.stop().await;
}

#[tokio::test]
async fn a_fifo_keys_range_is_resent_in_order_in_its_lane() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(200)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "ledger".into(),
        url: sink.url("/hook"),
        fifo: pb::Fifo::Block as i32,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ids = Vec::new();
    for i in 0..8 {
        let id = c
            .enqueue(Event::to_endpoint("ledger", format!("{{\"i\":{i}}}")).ordering_key("acct-1"))
            .await
            .unwrap()
            .id;
        ids.push(id);
    }
    delivered_all(&mut c, &ids).await;
    let first: Vec<u64> = sink
        .wait_for(8)
        .await
        .iter()
        .map(|r| header(r, "webhook-sequence").parse().unwrap())
        .collect();
    assert_eq!(first, (1..=8).collect::<Vec<u64>>());
    let made = create(
        &mut c,
        pb::CreateReplayJobRequest {
            ids: ids.iter().rev().cloned().collect(),
            max_per_s: 1_000.0,
            ..Default::default()
        },
    )
    .await;
    let id = made.job.unwrap().id;
    let finished = done(&mut c, &id).await;
    assert_eq!(finished.replayed, 8, "{finished:?}");
    let received = sink.wait_for(16).await;
    let again = &received[8..];
    // In the original order (the ids were given newest first), in the key's lane, with
    // the lane's next numbers.
    let order: Vec<&str> = again.iter().map(|r| header(r, "webhook-id")).collect();
    assert_eq!(order, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let numbers: Vec<u64> = again
        .iter()
        .map(|r| header(r, "webhook-sequence").parse().unwrap())
        .collect();
    assert_eq!(numbers, (9..=16).collect::<Vec<u64>>());
    assert!(
        again
            .iter()
            .all(|r| header(r, "hookd-ordering-key") == "acct-1")
    );
    assert!(
        again
            .iter()
            .all(|r| header(r, "hookd-out-of-order").is_empty())
    );
    server.stop().await;
}

#[tokio::test]
async fn a_bad_replay_job_request_is_refused_naming_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let mut c = server.client().await;
    let cases: Vec<(pb::CreateReplayJobRequest, &str)> = vec![
        (pb::CreateReplayJobRequest::default(), "ids:"),
        (
            pb::CreateReplayJobRequest {
                ids: vec!["x".into()],
                recovery: Some(pb::ReplayRecovery::default()),
                ..Default::default()
            },
            "ids:",
        ),
        (
            pb::CreateReplayJobRequest {
                ids: vec!["not-an-id".into()],
                ..Default::default()
            },
            "ids[0]",
        ),
        (
            pb::CreateReplayJobRequest {
                recovery: Some(pb::ReplayRecovery {
                    since_unix_ms: 1,
                    ..Default::default()
                }),
                ..Default::default()
            },
            "recovery.destination",
        ),
        (
            pb::CreateReplayJobRequest {
                recovery: Some(pb::ReplayRecovery {
                    destination: endpoint("acme"),
                    ..Default::default()
                }),
                ..Default::default()
            },
            "recovery.since_unix_ms",
        ),
        (
            pb::CreateReplayJobRequest {
                recovery: Some(pb::ReplayRecovery {
                    destination: endpoint("acme"),
                    since_unix_ms: 1,
                    delivered_statuses: vec![200, 42],
                }),
                ..Default::default()
            },
            "recovery.delivered_statuses[1]",
        ),
        (
            pb::CreateReplayJobRequest {
                search: Some(pb::SearchMessagesRequest {
                    states: vec![99],
                    ..Default::default()
                }),
                ..Default::default()
            },
            "search.states[0]",
        ),
        (
            pb::CreateReplayJobRequest {
                search: Some(pb::SearchMessagesRequest::default()),
                max_per_s: -1.0,
                ..Default::default()
            },
            "max_per_s",
        ),
        (
            pb::CreateReplayJobRequest {
                search: Some(pb::SearchMessagesRequest::default()),
                limit: 100_001,
                ..Default::default()
            },
            "limit",
        ),
    ];
    for (request, field) in cases {
        let e = c
            .raw()
            .create_replay_job(request.clone())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{request:?}: {e:?}");
        assert!(e.message().starts_with(field), "{field}: {e:?}");
    }
    // An id that is no message kept.
    let e = c
        .raw()
        .create_replay_job(pb::CreateReplayJobRequest {
            ids: vec![hookd_core::ids::MessageId::generate(1).to_string()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    assert!(e.message().starts_with("ids[0]"), "{e:?}");
    // No such job; no such action.
    let e = c
        .raw()
        .get_replay_job(pb::GetReplayJobRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    let made = create(
        &mut c,
        pb::CreateReplayJobRequest {
            search: Some(pb::SearchMessagesRequest::default()),
            ..Default::default()
        },
    )
    .await;
    let id = made.job.unwrap().id;
    let e = c
        .raw()
        .update_replay_job(pb::UpdateReplayJobRequest { id, action: 0 })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().starts_with("action"), "{e:?}");
    // The same over HTTP/JSON: 400 naming the field.
    let answer = crate::rest::post(
        server.http,
        "/v1/replay-jobs",
        serde_json::json!({"recovery": {"destination": {"endpoint": "acme"}}}),
    )
    .await;
    let text = answer.error(400, "INVALID_ARGUMENT");
    assert!(text.contains("recovery.since_unix_ms"), "{text}");
    let _ = (code, message);
    server.stop().await;
}

/// hookd as a child process, so that it can be killed with SIGKILL mid-job.
async fn child(dir: &Path, config: &Path, sink: std::net::SocketAddr) -> ChildHookd {
    let exe = Path::new(env!("CARGO_BIN_EXE_hookd-under-test"));
    let extra = [
        "--log-level".into(),
        "warn".into(),
        "--config".into(),
        config.as_os_str().to_owned(),
        "--allow-destination".into(),
        format!("127.0.0.1/32:{}", sink.port()).into(),
    ];
    ChildHookd::spawn(exe, &[], dir, &extra, Duration::from_secs(30))
        .await
        .expect("hookd starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_in_the_middle_of_a_job_sends_no_selected_message_twice_from_it() {
    const MESSAGES: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookd.toml");
    std::fs::write(&config, "[retry]\nbase_ms = 20\ncap_ms = 200\n").unwrap();
    let data = dir.path().join("data");
    let sink = Sink::start(Reply::Status(200)).await;
    let mut hookd = child(&data, &config, sink.addr()).await;
    let mut c = Client::connect(hookd.grpc.clone()).await.unwrap();
    c.put_endpoint(pb::Endpoint {
        name: "shop".into(),
        url: sink.url("/hook"),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut ids = Vec::new();
    for chunk in 0..(MESSAGES / 100) {
        let events: Vec<Event> = (0..100)
            .map(|i| Event::to_endpoint("shop", format!("{{\"n\":{}}}", chunk * 100 + i)))
            .collect();
        for r in c.enqueue_batch(events).await.unwrap() {
            match r.result {
                Some(pb::enqueue_result::Result::Ok(ok)) => ids.push(ok.id),
                other => panic!("{other:?}"),
            }
        }
    }
    sink.wait_for(MESSAGES).await;
    delivered_all(&mut c, &ids).await;
    // 150 a second: two seconds for the whole job; killed after its first replays.
    let made = create(
        &mut c,
        pb::CreateReplayJobRequest {
            search: Some(pb::SearchMessagesRequest {
                destination: endpoint("shop"),
                states: vec![DELIVERED],
                ..Default::default()
            }),
            max_per_s: 150.0,
            ..Default::default()
        },
    )
    .await;
    let id = made.job.unwrap().id;
    sink.wait_for(MESSAGES + 20).await;
    hookd.signal("-KILL").unwrap();
    hookd.wait(Duration::from_secs(10)).await.unwrap();
    let at_kill = sink.count() - MESSAGES;
    assert!(at_kill < MESSAGES, "killed mid-job: {at_kill} resent");

    let hookd = child(&data, &config, sink.addr()).await;
    let mut c = Client::connect(hookd.grpc.clone()).await.unwrap();
    let finished = done(&mut c, &id).await;
    assert_eq!(
        (finished.total, finished.replayed, finished.failed),
        (MESSAGES as u64, MESSAGES as u64, 0),
        "{finished:?}"
    );
    // Every selected message was copied exactly once (the copies share its event id),
    // and reached the sink at least once more.
    let mut c2 = c.clone();
    for original in &ids {
        let found = eventually(
            "the original and its one copy",
            async || {
                c2.raw()
                    .search_messages(pb::SearchMessagesRequest {
                        event_id: original.clone(),
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner()
                    .messages
            },
            |m| m.len() == 2 && m.iter().all(|m| m.state == DELIVERED),
        )
        .await;
        assert_eq!(found.len(), 2, "{original}: {found:?}");
    }
    let received = sink.wait_for(2 * MESSAGES).await;
    let mut times: HashMap<String, u32> = HashMap::new();
    for r in &received {
        *times.entry(header(r, "webhook-id").to_owned()).or_default() += 1;
    }
    for original in &ids {
        assert!(times.get(original).is_some_and(|n| *n >= 2), "{original}");
    }
    eprintln!(
        "kill -9 after {at_kill} of {MESSAGES} resent; the sink got {} in all ({} more than twice each: attempts in flight at the kill)",
        received.len(),
        received.len() - 2 * MESSAGES
    );
    let _ = DEAD;
}

#[tokio::test]
async fn the_cli_estimates_makes_follows_and_pauses_jobs_and_dead_letters_replay_as_one() {
    use crate::ctl::hookd;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(dir.path());
    config.delivery.breaker.failure_threshold = 1_000;
    config.delivery.breaker.slow_failure_threshold = 1_000;
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    let sink = Sink::start(Reply::Status(503)).await;
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "acme".into(),
        url: sink.url("/hook"),
        ..Default::default()
    })
    .await
    .unwrap();
    let mut dead = Vec::new();
    for i in 0..3 {
        let id = c
            .enqueue(Event::to_endpoint("acme", format!("{{\"i\":{i}}}")).max_attempts(1))
            .await
            .unwrap()
            .id;
        crate::harness::dead_lettered(&mut c, &id).await;
        dead.push(id);
    }
    sink.set_default(Reply::Status(200));
    // The estimate, as a person reads it and as a script does.
    let run = hookd(
        &server.grpc,
        &[
            "replay",
            "missed",
            "--destination",
            "endpoint:acme",
            "--since",
            "1h",
            "--dry-run",
        ],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout
            .contains("would replay 3 (3 dead letters, 0 delivered"),
        "{run:?}"
    );
    let run = hookd(
        &server.grpc,
        &[
            "--json",
            "replay",
            "missed",
            "--destination",
            "endpoint:acme",
            "--since",
            "1h",
            "--dry-run",
        ],
        None,
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["estimate"]["count"], "3", "{v}");
    // The dead-letter replay as a job, paused before it is through (1 a second).
    let run = hookd(
        &server.grpc,
        &[
            "--json",
            "dlq",
            "replay",
            "--destination",
            "endpoint:acme",
            "--job",
            "--rate",
            "1",
        ],
        None,
    )
    .await;
    assert_eq!(run.code, 0, "{run:?}");
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let id = v["jobId"].as_str().unwrap().to_owned();
    assert_eq!(v["matched"], 3, "{v}");
    let run = hookd(&server.grpc, &["replay", "pause", &id], None).await;
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("paused"), "{run:?}");
    // Stats shows it while it is paused, with its progress.
    let run = hookd(&server.grpc, &["stats"], None).await;
    assert!(
        run.stdout.contains("replay jobs running or paused"),
        "{run:?}"
    );
    assert!(run.stdout.contains(&id), "{run:?}");
    let stats = c
        .raw()
        .stats(pb::StatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(stats.replay_jobs.len(), 1);
    assert_eq!(stats.replay_jobs[0].state, PAUSED);
    let run = hookd(&server.grpc, &["replay", "resume", &id], None).await;
    assert_eq!(run.code, 0, "{run:?}");
    let finished = done(&mut c, &id).await;
    assert_eq!((finished.replayed, finished.total), (3, 3), "{finished:?}");
    let run = hookd(&server.grpc, &["replay", "status", &id], None).await;
    assert!(run.stdout.contains("done"), "{run:?}");
    assert!(run.stdout.contains("3/3"), "{run:?}");
    for id in &dead {
        crate::harness::delivered(&mut c, id).await;
    }
    // Ended: Stats no longer lists it; the list still does.
    let stats = c
        .raw()
        .stats(pb::StatsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(stats.replay_jobs.is_empty(), "{:?}", stats.replay_jobs);
    let run = hookd(&server.grpc, &["replay", "list"], None).await;
    assert!(run.stdout.contains(&id), "{run:?}");
    // A refusal names the field, exit code 2.
    let run = hookd(
        &server.grpc,
        &[
            "replay",
            "missed",
            "--destination",
            "endpoint:acme",
            "--since",
            "1h",
            "--status",
            "42",
        ],
        None,
    )
    .await;
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("recovery.delivered_statuses[0]"),
        "{run:?}"
    );
    server.stop().await;
}
