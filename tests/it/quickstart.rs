//! `examples/quickstart.toml`, the config the README's quickstart runs, does what it says:
//! a receiver that is down reaches the dead-letter queue within a minute, breaker and
//! all, and a replay is delivered once the receiver is back. On the injected clock: the
//! minute is hookd's, the test takes well under a second of it.

use hookd::Config;
use hookd_client::Event;
use hookd_client::pb::MessageState;
use hookd_core::clock::{Clock, ManualClock, SystemClock};

use crate::harness::{TestServer, delivered, push_settled};
use crate::sink::{Reply, Sink};

fn quickstart(dir: &std::path::Path) -> Config {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/quickstart.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let mut config = Config::from_toml(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    config.data_dir = dir.to_owned();
    config.storage.reserve_percent = 0.0;
    config
}

#[tokio::test]
async fn the_quickstart_config_dead_letters_and_replays_within_a_minute() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = quickstart(dir.path());
    // What the file says of itself, read back: 3 attempts, a short breaker.
    assert_eq!(config.retry.max_attempts, 3);
    assert!(config.delivery.breaker.max_cooldown_ms <= 20_000);
    // The receiver is down (503) on a port of its own, allowed beside the file's.
    let sink = Sink::start(Reply::Status(503)).await;
    let port = url::Url::parse(&sink.url("/")).unwrap().port().unwrap();
    config
        .delivery
        .allow_destinations
        .push(format!("127.0.0.1/32:{port}").parse().unwrap());
    let clock = ManualClock::new(SystemClock.now_ms());
    let server = TestServer::start_with(config, clock).await;
    let mut c = server.client().await;
    let put = c
        .put_endpoint(hookd_client::pb::Endpoint {
            name: "orders".into(),
            url: sink.url("/hooks"),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(put.warnings.is_empty(), "{:?}", put.warnings);

    // Six messages: 18 failed attempts at most, enough to open the breaker (5) and see it
    // probe and open again.
    let mut ids = Vec::new();
    for i in 0..6u8 {
        ids.push(
            c.enqueue(Event::to_endpoint("orders", vec![b'0' + i]))
                .await
                .unwrap()
                .id,
        );
    }
    let start = server.clock_now();
    loop {
        push_settled(&mut c).await;
        let mut dead = 0;
        let mut attempts = Vec::new();
        for id in &ids {
            let m = c.get_message(id).await.unwrap();
            if m.state == MessageState::DeadLetter as i32 {
                dead += 1;
            }
            attempts.push(m.attempts);
        }
        if dead == ids.len() {
            break;
        }
        let spent = server.clock_now() - start;
        assert!(
            spent <= 60_000,
            "{dead} of {} dead letters after {spent} ms of hookd's clock (attempts {attempts:?})",
            ids.len()
        );
        server.advance(250).await;
    }
    let took_ms = server.clock_now() - start;
    eprintln!("6 dead letters after {took_ms} ms of hookd's clock");

    // The receiver is back: a replay is delivered, within the minute too.
    sink.set_default(Reply::Status(204));
    assert_eq!(c.replay(ids.clone()).await.unwrap(), ids.len() as u32);
    let replayed = server.clock_now();
    for id in &ids {
        loop {
            push_settled(&mut c).await;
            let m = c.get_message(id).await.unwrap();
            if m.state == MessageState::Delivered as i32 {
                break;
            }
            assert!(
                server.clock_now() - replayed <= 60_000,
                "{id} not delivered"
            );
            server.advance(250).await;
        }
        delivered(&mut c, id).await;
    }
    eprintln!(
        "6 replays delivered after {} ms",
        server.clock_now() - replayed
    );
    server.stop().await;
}
