//! GitHub's signing library (`@octokit/webhooks-methods` on npm) against the ingest
//! listener (tests/node/octokit.mjs). Needs Node.js and the package, so it is opt-in:
//! `.ci/run` runs `npm ci` in tests/node and then this test with `--ignored`, passing the
//! node binary in HOOKD_NODE.

use hookd::ingest::{SchemeName, SourceSpec};

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
        hookd::clock::ManualClock::new(hookd::clock::Clock::now_ms(&hookd::clock::SystemClock)),
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
