//! GitHub's signing library (`@octokit/webhooks-methods` on npm) against the ingest
//! listener (tests/node/octokit.mjs). Needs Node.js and the package, so it is opt-in:
//! `.ci/run` runs `npm ci` in tests/node and then this test with `--ignored`, passing the
//! node binary in HOOKD_NODE.

use hookd_core::source::{SchemeName, SourceSpec};

use crate::harness::TestServer;

#[tokio::test]
#[ignore = "needs Node.js with tests/node installed (npm ci); .ci/run runs it"]
async fn node_octokit_signs_what_ingest_accepts() {
    let node = std::env::var("HOOKD_NODE").expect(
        "HOOKD_NODE must name a node binary, with `npm ci` run in tests/node (.ci/run does)",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::harness::test_config(dir.path());
    config.sources = vec![SourceSpec {
        secrets: vec!["octokit-test-secret".into()],
        ..SourceSpec::new("github", SchemeName::Github, "gh-events")
    }];
    let server = TestServer::start_with(
        config,
        hookd_core::clock::ManualClock::new(hookd_core::clock::Clock::now_ms(
            &hookd_core::clock::SystemClock,
        )),
    )
    .await;
    crate::harness::run_script(node, "node/octokit.mjs", vec![server.ingest.to_string()]).await;
    // What octokit signed is stored once (the redelivery was a duplicate).
    let mut client = server.client().await;
    let got = client
        .receive("gh-events", 10, std::time::Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].event_type, "pull_request");
    server.stop().await;
}

/// The TypeScript package (`client/node`) as published: `.ci/run` packs it (`npm pack`),
/// installs the tarball into a project of its own, and puts the package's `node --test`
/// suite there importing `@hookd/client` (HOOKD_NODE_CLIENT_TESTS), so the tests run
/// against what `npm pack` shipped, not the source tree; against a hookd whose
/// destinations hold at most 64 KiB of live messages. Then the README's example agent
/// (examples/node/agent.ts, built by `.ci/run` into examples/node/dist) against it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Node.js and client/node packed and installed (HOOKD_NODE_CLIENT_TESTS); .ci/run runs it"]
async fn node_client_package() {
    let node = std::env::var("HOOKD_NODE")
        .expect("HOOKD_NODE must name a node binary, with client/node built (.ci/run does)");
    let tests = std::env::var("HOOKD_NODE_CLIENT_TESTS").expect(
        "HOOKD_NODE_CLIENT_TESTS must name client/node's tests beside the package installed from its npm pack tarball (.ci/run makes it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::with_small_marks(dir.path()).await;
    let link_dir = tempfile::tempdir().unwrap();
    let (link_server, link) = crate::flaky::link_to_hookd(link_dir.path()).await;
    let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
    let addr = server.grpc.trim_start_matches("http://").to_owned();
    let mut env = link.env(&link_server);
    env.push(("HOOKD_ADDR".into(), addr.clone()));
    crate::harness::run_program(
        node.clone(),
        "client/node tests",
        vec!["--test".into(), format!("{tests}/")],
        env,
    )
    .await;
    drop(link);
    link_server.stop().await;
    // With hookd down the example still ends on time with its counters.
    crate::harness::example_agent_with_hookd_down(
        node.clone(),
        format!("{root}/examples/node/dist/agent.js"),
    )
    .await;
    crate::harness::run_program(
        node,
        "examples/node/agent.ts",
        vec![
            format!("{root}/examples/node/dist/agent.js"),
            "node-example".into(),
            "25".into(),
        ],
        vec![("HOOKD_ADDR".into(), addr)],
    )
    .await;
    let mut client = server.client().await;
    let got = client
        .receive(
            "node-example",
            100,
            std::time::Duration::from_secs(30),
            None,
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 25);
    server.stop().await;
}
