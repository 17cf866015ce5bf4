//! Issue #26, 8: open calls do not draw on one budget that anyone can take whole. gRPC
//! health calls have their own small budget, and each connection and each caller holds at
//! most a share of the calls and bytes in flight, so one caller (also an authenticated
//! one) cannot lock the others out.

use std::time::Duration;

use hookd::Config;
use hookd::auth::token_hash;
use hookd_client::{Client, Event, Options};
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use hookd_core::names::hex;
use tonic::Code;

use crate::harness::{TestServer, code, message, test_config};

const GREEDY: &str = "greedy-token-aaaaaaaaaaaaaaaa";
const AGENT: &str = "agent-token-bbbbbbbbbbbbbbbbb";

async fn client(server: &TestServer, token: &str) -> Client {
    Client::connect_with(
        server.grpc.clone(),
        Options {
            token: Some(token.to_owned()),
            ..Options::default()
        },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_streams_announcing_large_messages_leave_api_calls_their_budget() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let grpc: std::net::SocketAddr = server.grpc.trim_start_matches("http://").parse().unwrap();
    // The finding: 64 health calls on one connection, each announcing 4 MiB (256 MiB,
    // the whole default request-byte budget) and never finishing.
    let mut health =
        crate::hostile::unfinished_calls_to(grpc, "/grpc.health.v1.Health/Check", 64, 0).await;
    // Every one of them is refused at once: health calls have 1 MiB of their own.
    let mut statuses = Vec::new();
    while let Some(s) = tokio::time::timeout(Duration::from_secs(20), health.join_next())
        .await
        .expect("the health calls are answered")
    {
        statuses.push(s.unwrap());
    }
    assert!(
        statuses.iter().all(|s| s.as_deref() == Some("8")),
        "{statuses:?}"
    );
    // An API call is served meanwhile.
    let mut c = server.client().await;
    c.enqueue(Event::to_queue("q", vec![1; 64 << 10]))
        .await
        .unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_callers_long_polls_leave_room_for_every_other_caller() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "[connections]\nmax_requests_in_flight = 40\n\
         [[auth.tokens]]\nname = \"greedy\"\nsha256 = \"{}\"\nscopes = [\"consume\"]\n\
         [[auth.tokens]]\nname = \"agent\"\nsha256 = \"{}\"\nscopes = [\"enqueue\"]\n",
        hex(&token_hash(GREEDY)),
        hex(&token_hash(AGENT)),
    );
    let parsed = Config::from_toml(&toml).unwrap();
    let config = Config {
        auth: parsed.auth,
        connections: parsed.connections,
        ..test_config(dir.path())
    };
    let server = TestServer::start_with(config, ManualClock::new(SystemClock.now_ms())).await;
    // The greedy caller opens 40 long polls on an empty queue (they wait on the paused
    // clock), each on its own connection: only the caller's share stops them.
    let mut polls = tokio::task::JoinSet::new();
    for _ in 0..40 {
        let mut greedy = client(&server, GREEDY).await;
        polls.spawn(async move {
            greedy
                .receive(
                    "empty",
                    1,
                    Duration::from_secs(60),
                    Some(Duration::from_secs(20)),
                )
                .await
        });
    }
    // Those past its share (25 % of 40 = 10) are refused at once, naming the caller.
    let mut refused = Vec::new();
    while refused.len() < 30 {
        match tokio::time::timeout(Duration::from_secs(20), polls.join_next()).await {
            Ok(Some(answer)) => match answer.unwrap() {
                Err(e) => refused.push(e),
                Ok(got) => panic!("a long poll on an empty queue answered {got:?}"),
            },
            Ok(None) => break,
            Err(_) => break,
        }
    }
    assert_eq!(refused.len(), 30, "{refused:?}");
    for e in &refused {
        assert_eq!(code(e), Code::ResourceExhausted, "{e}");
        assert!(message(e).contains("caller `greedy`"), "{e}");
    }
    // Another caller is served while the greedy one holds its share.
    let mut agent = client(&server, AGENT).await;
    agent
        .enqueue(Event::to_queue("jobs", b"{}".to_vec()))
        .await
        .unwrap();
    polls.abort_all();
    server.stop().await;
}
