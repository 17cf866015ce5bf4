//! The `hookd` binary's client subcommands against a real hookd: the operator's workflow
//! from the shell (endpoints, enqueue, stats, message, dead letters), JSON for scripts,
//! and exit codes a script can branch on.

use std::process::{Command, Stdio};

use crate::harness::{TestServer, eventually};
use crate::sink::{Reply, Sink};
use hookd_core::clock::{Clock, ManualClock, SystemClock};

#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `hookd ARGS` against `server` (its address from HOOKD_SERVER), `stdin` piped in.
pub(crate) async fn hookd(server: &str, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let (server, args, stdin) = (
        server.to_owned(),
        args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>(),
        stdin.map(<[u8]>::to_vec),
    );
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
            .args(&args)
            .env("HOOKD_SERVER", server)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(bytes) = stdin {
            input.write_all(&bytes).unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

fn json(run: &Run) -> serde_json::Value {
    assert_eq!(run.code, 0, "stderr: {}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

#[tokio::test]
async fn an_operator_runs_the_dead_letter_workflow_from_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let s = server.grpc.as_str();
    let sink = Sink::start(Reply::Full(503, vec![], b"down".to_vec())).await;

    let put = hookd(
        s,
        &[
            "endpoints",
            "put",
            "orders",
            "--url",
            &sink.url("/o"),
            "--max-attempts",
            "1",
        ],
        None,
    )
    .await;
    assert_eq!(put.code, 0, "{}", put.stderr);
    assert!(put.stdout.starts_with("created"), "{}", put.stdout);
    let list = hookd(s, &["endpoints", "list"], None).await;
    assert!(
        list.stdout.contains("orders") && list.stdout.contains("active"),
        "{}",
        list.stdout
    );

    // Payloads from an argument and from standard input.
    let a = hookd(
        s,
        &["enqueue", "endpoint:orders", "--data", "{\"n\":1}"],
        None,
    )
    .await;
    assert_eq!(a.code, 0, "{}", a.stderr);
    let a_id = a.stdout.trim().to_owned();
    let b = json(
        &hookd(
            s,
            &["--json", "enqueue", "endpoint:orders"],
            Some(b"{\"n\":2}"),
        )
        .await,
    );
    let b_id = b["id"].as_str().unwrap().to_owned();
    sink.wait_for(2).await;
    let mut c = server.client().await;
    eventually(
        "two dead letters",
        async || {
            c.list_dead_letters(None, 10, "")
                .await
                .unwrap()
                .dead_letters
                .len()
        },
        |n| *n == 2,
    )
    .await;

    let m = hookd(s, &["message", &a_id], None).await;
    assert_eq!(m.code, 0, "{}", m.stderr);
    assert!(m.stdout.contains("dead_letter"), "{}", m.stdout);
    // The payload, shown as JSON.
    assert!(
        m.stdout
            .contains("payload      7 bytes\n  {\n    \"n\": 1\n  }\n"),
        "{}",
        m.stdout
    );
    assert!(
        m.stdout.contains("http_error") && m.stdout.contains("503"),
        "{}",
        m.stdout
    );
    let m = json(&hookd(s, &["message", &b_id, "--json"], None).await);
    // The JSON API's field names and forms: 64-bit integers as strings.
    assert_eq!(m["payloadSize"], "7", "{m}");
    assert_eq!(m["history"][0]["httpStatus"], 503, "{m}");

    let analysis = json(&hookd(s, &["--json", "dlq", "analyze"], None).await);
    assert_eq!(
        analysis["destinations"][0]["destination"],
        "endpoint:orders"
    );
    assert_eq!(analysis["destinations"][0]["count"], "2", "{analysis}");
    let human = hookd(s, &["dlq", "analyze"], None).await;
    assert!(
        human.stdout.contains("commonest status: 503 (2x)"),
        "{}",
        human.stdout
    );
    let list = hookd(s, &["dlq", "list"], None).await;
    assert!(
        list.stdout.contains(&a_id) && list.stdout.contains("HTTP 503"),
        "{}",
        list.stdout
    );

    // Replay without a filter needs --all; a dry run counts; then the fixed endpoint gets them.
    let refused = hookd(s, &["dlq", "replay"], None).await;
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    let dry = hookd(s, &["dlq", "replay", "--status", "503", "--dry-run"], None).await;
    assert!(
        dry.stdout.contains("2 dead letters would be replayed"),
        "{}",
        dry.stdout
    );
    sink.set_default(Reply::Status(204));
    let done = json(
        &hookd(
            s,
            &[
                "--json",
                "dlq",
                "replay",
                "--destination",
                "endpoint:orders",
                "--rate",
                "1000",
            ],
            None,
        )
        .await,
    );
    assert_eq!(done["replayed"], 2);
    // Paced at 1000/s on hookd's (manual) clock: the second is due 1 ms after the first.
    sink.wait_for(3).await;
    server.advance(1).await;
    sink.wait_for(4).await;

    // Pause and resume.
    let paused = hookd(
        s,
        &["endpoints", "pause", "orders", "--reason", "deploy"],
        None,
    )
    .await;
    assert!(
        paused.stdout.contains("paused: deploy"),
        "{}",
        paused.stdout
    );
    let resumed = json(&hookd(s, &["--json", "endpoints", "resume", "orders"], None).await);
    assert_eq!(resumed["endpoint"]["paused"], false);

    let stats = json(&hookd(s, &["stats", "--json"], None).await);
    assert!(stats["storage"]["liveMessages"].is_string(), "{stats}");
    let table = hookd(s, &["stats"], None).await;
    assert!(table.stdout.contains("endpoint:orders"), "{}", table.stdout);
    // What the history keeps, on a line of its own.
    assert!(
        table
            .stdout
            .contains("history: delivered payloads readable since ")
            && table.stdout.contains(" log segments, "),
        "{}",
        table.stdout
    );
    // Two latencies, each labelled, with units: end to end (enqueue to completion) and
    // one attempt (the endpoint's own); a destination with none shows "-".
    assert!(
        table.stdout.contains("E2E P95/1H") && table.stdout.contains("ATTEMPT P95/1H"),
        "{}",
        table.stdout
    );
    let orders = table
        .stdout
        .lines()
        .find(|l| l.starts_with("endpoint:orders"))
        .unwrap();
    assert!(orders.contains(" ms"), "{orders}");

    let purge = hookd(s, &["dlq", "purge", "--all", "--dry-run"], None).await;
    assert!(
        purge.stdout.contains("0 dead letters would be purged"),
        "{}",
        purge.stdout
    );
    server.stop().await;
}

#[tokio::test]
async fn exit_codes_tell_a_script_what_went_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let addr = server.grpc.clone();
    let s = addr.as_str();
    let missing = hookd(s, &["endpoints", "get", "nope"], None).await;
    assert_eq!(missing.code, 4, "{}", missing.stderr);
    assert!(
        missing.stderr.contains("no endpoint named"),
        "{}",
        missing.stderr
    );
    let bad = hookd(s, &["enqueue", "nowhere", "--data", "x"], None).await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("queue:NAME"), "{}", bad.stderr);
    let refused = hookd(s, &["enqueue", "queue:", "--data", "x"], None).await;
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("InvalidArgument"),
        "{}",
        refused.stderr
    );
    let id = uuid::Uuid::now_v7().to_string();
    let unknown = hookd(s, &["message", &id], None).await;
    assert_eq!(unknown.code, 4, "{}", unknown.stderr);
    server.stop().await;

    // Nothing listens there any more.
    let gone = hookd(s, &["stats"], None).await;
    assert_eq!(gone.code, 3, "{}", gone.stderr);
    assert!(
        gone.stderr.contains("cannot reach hookd at"),
        "{}",
        gone.stderr
    );
}

/// `hookd tail --json` follows a delivery, a dead letter and a pause as they happen; a
/// watcher of another destination sees none of them; shutdown ends the stream. (Multi-
/// threaded: the test blocks on tail's output while the in-process hookd keeps serving.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_follows_live_events() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let sink = Sink::start(Reply::Status(204)).await;
    let mut c = server.client().await;
    c.put_endpoint(hookd_client::pb::Endpoint {
        name: "e".into(),
        url: sink.url("/"),
        ..Default::default()
    })
    .await
    .unwrap();
    // A gRPC watcher of another destination, to check the filter.
    let mut other = c
        .raw()
        .watch(hookd_client::pb::WatchRequest {
            destination: Some(hookd_client::queue("elsewhere")),
        })
        .await
        .unwrap()
        .into_inner();

    let mut child = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
        .args(["tail", "--json", "--destination", "endpoint:e"])
        .env("HOOKD_SERVER", &server.grpc)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = crate::harness::lines_of(child.stdout.take().unwrap());
    // The subscription is in place once a first event reaches tail: send until one does.
    let mut lines = Vec::new();
    for _ in 0..200 {
        c.enqueue(hookd_client::Event::to_endpoint("e", "x"))
            .await
            .unwrap();
        if let Ok(line) = rx.recv_timeout(std::time::Duration::from_millis(50)) {
            lines.push(line);
            break;
        }
    }
    assert!(!lines.is_empty(), "tail saw nothing");
    let kinds = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["kind"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    let until = |lines: &mut Vec<String>, kind: &str| {
        while !kinds(lines).iter().any(|k| k == kind) {
            let line = rx
                .recv_timeout(std::time::Duration::from_secs(15))
                .unwrap_or_else(|_| panic!("no {kind} after {lines:?}"));
            lines.push(line);
        }
    };
    sink.set_default(Reply::Status(400));
    c.enqueue(hookd_client::Event::to_endpoint("e", "bad"))
        .await
        .unwrap();
    until(&mut lines, "dead_lettered");
    c.raw()
        .pause_endpoint(hookd_client::pb::PauseEndpointRequest {
            name: "e".into(),
            reason: "deploy".into(),
        })
        .await
        .unwrap();
    until(&mut lines, "endpoint_paused");
    let kinds = kinds(&lines);
    assert!(
        kinds
            .iter()
            .all(|k| k == "delivered" || k == "dead_lettered" || k == "endpoint_paused"),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"dead_lettered".to_owned()), "{kinds:?}");
    let dead: serde_json::Value = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["kind"] == "dead_lettered")
        .unwrap();
    assert_eq!(dead["httpStatus"], 400, "{dead}");
    assert_eq!(dead["destination"], "endpoint:e");
    assert_eq!(dead["detail"], "HTTP 400");

    server.stop().await;
    // Shutdown ends both streams: tail exits (3: hookd went away), the other watcher ends
    // having seen nothing.
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(3));
    assert!(matches!(other.message().await, Ok(None) | Err(_)));
}

/// The README's ingest quickstart through the binary: `hookd sources put FILE` (secrets
/// read from the environment by the command), a signed POST on the ingest listener, then
/// `hookd receive --ack` prints the event and acknowledges it; `sources list` and
/// `sources delete` manage it.
#[tokio::test]
async fn sources_put_then_receive_pulls_a_signed_webhook() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let s = server.grpc.as_str();
    let file = dir.path().join("github.toml");
    std::fs::write(
        &file,
        "name = \"github\"\nscheme = \"github\"\nsecret_env = [\"CTL_TEST_GH_SECRET\"]\nqueue = \"gh-events\"\n",
    )
    .unwrap();
    // The command reads the variable (set for that child only) and sends its value.
    let put = tokio::task::spawn_blocking({
        let (s, file) = (s.to_owned(), file.clone());
        move || {
            Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
                .args(["sources", "put"])
                .arg(&file)
                .env("HOOKD_SERVER", s)
                .env("CTL_TEST_GH_SECRET", "It's a Secret to Everybody")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        put.status.success(),
        "{}",
        String::from_utf8_lossy(&put.stderr)
    );
    let out = String::from_utf8_lossy(&put.stdout);
    assert!(
        out.contains("created source") && out.contains("/in/github"),
        "{out}"
    );
    assert!(
        !out.contains("Secret to Everybody"),
        "the secret is never printed: {out}"
    );

    // GitHub's documented example signature for this body and secret.
    let body = b"Hello, World!";
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        (
            "x-hub-signature-256".to_owned(),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17".to_owned(),
        ),
        ("x-github-event".to_owned(), "ping".to_owned()),
        ("x-github-delivery".to_owned(), "d-1".to_owned()),
    ];
    let a = crate::ingest::post(server.ingest, "github", &headers, body).await;
    assert_eq!(a.status, 202, "{a:?}");

    let got = hookd(s, &["receive", "gh-events", "--ack"], None).await;
    assert_eq!(got.code, 0, "{}", got.stderr);
    assert!(got.stdout.contains("event type  ping"), "{}", got.stdout);
    assert!(
        got.stdout.contains("payload     Hello, World!"),
        "{}",
        got.stdout
    );
    assert!(
        got.stdout.contains("header      x-github-delivery: d-1"),
        "{}",
        got.stdout
    );
    // Acked: nothing left to receive.
    let again = hookd(s, &["--json", "receive", "gh-events"], None).await;
    assert_eq!(json(&again)["messages"].as_array().map_or(0, Vec::len), 0);

    let list = json(&hookd(s, &["--json", "sources", "list"], None).await);
    assert_eq!(list["sources"][0]["name"], "github");
    assert_eq!(
        list["sources"][0]["secrets"].as_array().map_or(0, Vec::len),
        0
    );
    let deleted = hookd(s, &["sources", "delete", "github"], None).await;
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    let gone = hookd(s, &["sources", "get", "github"], None).await;
    assert_ne!(gone.code, 0);
    assert!(gone.stderr.contains("no source named"), "{}", gone.stderr);
    // A file that is not a source is refused naming the key, before anything is sent.
    std::fs::write(
        &file,
        "name = \"x\"\nscheme = \"github\"\nqeue = \"typo\"\n",
    )
    .unwrap();
    let bad = hookd(s, &["sources", "put", file.to_str().unwrap()], None).await;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("qeue"), "{}", bad.stderr);
    server.stop().await;
}

/// Issue #26, 15: `hookd stats | head -2`, `hookd dlq list | true`: a closed stdout ends
/// the command quietly (exit 0, nothing on stderr), never a "Broken pipe" panic (101).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let s = server.grpc.clone();
    for args in [
        &["stats"][..],
        &["dlq", "list"],
        &["endpoints", "list"],
        &["config", "print-default"],
    ] {
        let (s, run) = (s.clone(), args.to_vec());
        let (code, stderr) = tokio::task::spawn_blocking(move || {
            let mut child = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
                .args(&run)
                .env("HOOKD_SERVER", s)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // The reader goes away before anything is written.
            drop(child.stdout.take());
            let out = child.wait_with_output().unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .await
        .unwrap();
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    server.stop().await;
}

/// `endpoints put` stores an endpoint whose URL the destination guard would refuse, and
/// says so (standard error; `warnings` in the answer): the quickstart's trap, a receiver
/// on a loopback port the allow-list does not name. Nothing connects anywhere: the URLs
/// are only judged.
#[tokio::test]
async fn endpoints_put_warns_when_the_guard_would_refuse_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::harness::test_config(dir.path());
    config.delivery.allow_destinations = vec!["127.0.0.1/32:8080".parse().unwrap()];
    let clock = ManualClock::new(SystemClock.now_ms());
    let server = TestServer::start_with(config, clock).await;
    let s = server.grpc.as_str();
    let put = |name: &'static str, url: String| {
        let s = s.to_owned();
        async move { hookd(&s, &["endpoints", "put", name, "--url", &url], None).await }
    };

    // A loopback port outside the allow-list: stored, with the flag that admits it.
    let refused = put("receiver", "http://127.0.0.1:9000/hooks".into()).await;
    assert_eq!(refused.code, 0, "{}", refused.stderr);
    assert!(refused.stdout.starts_with("created"), "{}", refused.stdout);
    assert!(
        refused.stderr.contains(
            "hookd: warning: url: the destination guard refuses 127.0.0.1:9000 (loopback)"
        ) && refused
            .stderr
            .contains("--allow-destination 127.0.0.1/32:9000"),
        "{}",
        refused.stderr
    );
    // `localhost` is judged as loopback; a private address by its class.
    let local = put("local", "http://localhost:9000/".into()).await;
    assert!(local.stderr.contains("(loopback)"), "{}", local.stderr);
    let private = put("private", "https://10.1.2.3/x".into()).await;
    assert!(
        private.stderr.contains("10.1.2.3:443 (private)")
            && private
                .stderr
                .contains("--allow-destination 10.1.2.3/32:443"),
        "{}",
        private.stderr
    );
    // hookd's own listener is never admitted: no flag is suggested.
    let own = put("itself", format!("http://{}/", server.http)).await;
    assert!(
        own.stderr.contains("hookd's own listener") && !own.stderr.contains("--allow-destination"),
        "{}",
        own.stderr
    );

    // The allowed port, a public address and a name (resolved only at each attempt): no
    // warning.
    for (name, url) in [
        ("allowed", "http://127.0.0.1:8080/hooks"),
        ("public", "https://93.184.216.34/hooks"),
        ("named", "https://hooks.example.com/in"),
    ] {
        let run = put(name, url.into()).await;
        assert_eq!(run.code, 0, "{name}: {}", run.stderr);
        assert!(!run.stderr.contains("warning"), "{name}: {}", run.stderr);
    }

    // A static header from the command line (NAME=VALUE): listed by name, never by value.
    let with_header = hookd(
        s,
        &[
            "endpoints",
            "put",
            "allowed",
            "--url",
            "http://127.0.0.1:8080/hooks",
            "--header",
            "X-Api-Key=k-123",
        ],
        None,
    )
    .await;
    assert_eq!(with_header.code, 0, "{}", with_header.stderr);
    let list = hookd(s, &["endpoints", "list"], None).await;
    assert!(list.stdout.contains("x-api-key"), "{}", list.stdout);
    assert!(!list.stdout.contains("k-123"), "{}", list.stdout);

    // The same over gRPC, and in --json (standard output stays one document).
    let mut client = hookd_client::Client::connect(server.grpc.clone())
        .await
        .unwrap();
    let answer = client
        .raw()
        .put_endpoint(hookd_proto::v1::PutEndpointRequest {
            endpoint: Some(hookd_proto::v1::Endpoint {
                name: "receiver".into(),
                url: "http://127.0.0.1:9000/hooks".into(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!answer.created);
    assert_eq!(answer.warnings.len(), 1, "{:?}", answer.warnings);
    let doc = json(
        &hookd(
            s,
            &[
                "--json",
                "endpoints",
                "put",
                "receiver",
                "--url",
                "http://127.0.0.1:9000/",
            ],
            None,
        )
        .await,
    );
    assert_eq!(doc["warnings"].as_array().map(Vec::len), Some(1), "{doc}");
}
