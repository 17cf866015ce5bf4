//! hookd's MCP server (`hookd mcp` over stdio, `/mcp` over streamable HTTP) driven by the
//! official Python MCP SDK (`mcp` on PyPI, tests/python/mcp_client.py): every tool, each
//! limited by the token's scopes as its gRPC call is. Opt-in: `.ci/run` installs the
//! package into a venv and runs it with `--ignored`, passing the interpreter in
//! HOOKD_PYTHON.

use std::time::Duration;

use hookd_client::{Event, pb};
use hookd_core::clock::{Clock, ManualClock, SystemClock};

use crate::harness::TestServer;
use crate::security::{AGENT, OPS, READER, client, secured};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with the mcp package (tests/python/requirements.txt); .ci/run runs it"]
async fn python_mcp_client_drives_every_tool_over_stdio_and_http() {
    let python = std::env::var("HOOKD_PYTHON").expect(
        "HOOKD_PYTHON must name a Python with tests/python/requirements.txt installed (.ci/run sets it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start_with(
        secured(dir.path(), ""),
        ManualClock::new(SystemClock.now_ms()),
    )
    .await;
    let mut ops = client(&server, Some(OPS)).await;
    // A subscription for the publish, and a dead letter to analyse and replay.
    ops.put_subscription(pb::Subscription {
        name: "mcp-steps".into(),
        event_types: vec!["agent.*".into()],
        destination: Some(pb::subscription::Destination::Queue("mcp-steps".into())),
        ..Default::default()
    })
    .await
    .unwrap();
    ops.enqueue(Event::to_queue("mcp-dead", b"doomed".to_vec()).max_attempts(1))
        .await
        .unwrap();
    let leased = ops
        .receive("mcp-dead", 1, Duration::from_secs(60), None)
        .await
        .unwrap();
    ops.nack(&leased[0].lease_id, None, "bad input")
        .await
        .unwrap();
    let dead = ops
        .list_dead_letters(None, 10, "")
        .await
        .unwrap()
        .dead_letters;
    assert_eq!(dead.len(), 1);

    // The README's MCP configuration, as the servers' launch instructions.
    let readme = include_str!("../../README.md");
    let found = crate::readme::blocks(readme, crate::readme::MCP_SECTION);
    assert_eq!(
        found.len(),
        1,
        "the README's MCP section has one JSON block: {found:?}"
    );
    let config = dir.path().join("mcp.json");
    std::fs::write(&config, &found[0].text).unwrap();
    let args = vec![
        env!("CARGO_BIN_EXE_hookd-under-test").to_owned(),
        server.grpc.trim_start_matches("http://").to_owned(),
        server.http.to_string(),
        AGENT.to_owned(),
        READER.to_owned(),
        OPS.to_owned(),
        dead[0].id.clone(),
        config.display().to_string(),
    ];
    crate::harness::run_script(python, "python/mcp_client.py", args).await;
    server.stop().await;
}

/// Without `[auth]`, `/mcp` answers only a `Host` naming no domain (DNS rebinding), as the
/// JSON API does; a named host is refused before any MCP.
#[tokio::test]
async fn mcp_over_http_refuses_a_host_naming_a_domain_without_auth() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let accept = ("accept", "application/json, text/event-stream");
    let evil = crate::rest::call_with(
        server.http,
        "POST",
        "/mcp",
        &[("host", "evil.example"), accept],
        list,
    )
    .await;
    assert_eq!(evil.status(), 403);
    server.stop().await;
}
