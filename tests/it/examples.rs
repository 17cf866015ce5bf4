//! The README's examples, run as built (`cargo test` builds them; `cargo run --example NAME`
//! runs them from the repository's root) against a real hookd: an agent that emits, a pull
//! worker that acknowledges, a receiver that verifies hookd's signatures with the reference
//! `standardwebhooks` crate. And the README shows each file as it is.

use std::path::PathBuf;
use std::time::Duration;

use hookd_client::pb;
use hookd_core::clock::Clock as _;

use crate::harness::TestServer;

/// `target/<profile>/examples/NAME`, beside this test's own binary's `deps/`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(|deps| deps.parent()).unwrap();
    profile.join("examples").join(name)
}

/// Runs an example to its end (60 s at most); its standard output, or a failure with both.
async fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = tokio::process::Command::new(example(name));
    cmd.args(args).kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("example {name} did not finish within 60 s"))
        .unwrap_or_else(|e| {
            panic!(
                "cannot run example {name} ({}): {e}",
                example(name).display()
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "example {name} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_emits_and_the_pull_worker_acknowledges() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let env = [("HOOKD_ADDR", server.grpc.as_str())];
    let out = run("agent", &["queue:jobs", "250"], &env).await;
    assert!(
        out.contains("emitted 250 sent 250 refused 0 failed 0 unacknowledged 0"),
        "{out}"
    );
    let out = run("pull_worker", &["jobs", "250"], &env).await;
    assert!(out.contains("acked 250"), "{out}");
    let mut c = server.client().await;
    let total = c.stats().await.unwrap().total.unwrap();
    assert_eq!((total.pending, total.in_flight), (0, 0));
    server.stop().await;
}

/// With hookd down the agent still finishes, on time, and says what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_with_hookd_down_exits_with_its_counters() {
    let port = hookd_testkit::free_port().unwrap();
    let addr = format!("http://127.0.0.1:{port}");
    let env = [("HOOKD_ADDR", addr.as_str())];
    let out = run("agent", &["queue:jobs", "40", "0.5"], &env).await;
    assert!(
        out.contains("emitted 40 sent 0 refused 0 failed 0 unacknowledged 40"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_receiver_verifies_what_hookd_pushes_with_the_reference_library() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let port = hookd_testkit::free_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let receiver = {
        let addr = addr.clone();
        tokio::spawn(
            async move { run("receiver", &[&addr, "20"], &[("WEBHOOK_SECRET", secret)]).await },
        )
    };
    // Listening before the first attempt (the test config allows only 3 attempts).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(&addr).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the receiver never listened"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "hooks".into(),
        url: format!("http://{addr}/hooks"),
        secrets: vec![secret.into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let env = [("HOOKD_ADDR", server.grpc.as_str())];
    let out = run("agent", &["endpoint:hooks", "20"], &env).await;
    assert!(out.contains("sent 20"), "{out}");
    let out = tokio::time::timeout(Duration::from_secs(60), receiver)
        .await
        .expect("the receiver did not get 20 verified deliveries")
        .unwrap();
    assert!(out.contains("verified 20"), "{out}");
    assert!(out.contains("agent.step_finished: {\"step\":"), "{out}");
    server.stop().await;
}

/// The SaaS example frames its customer's portal, and hands an expired link a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_saas_example_frames_its_customers_portal_and_refreshes_its_link() {
    let dir = tempfile::tempdir().unwrap();
    let clock = hookd_core::clock::ManualClock::new(hookd_core::clock::SystemClock.now_ms());
    let server = TestServer::start_with(crate::portal::secured(dir.path()), clock.clone()).await;
    let port = hookd_testkit::free_port().unwrap();
    let addr = format!("127.0.0.1:{port}");
    let origin = format!("http://{addr}");
    let _app = tokio::process::Command::new(example("saas_portal"))
        .arg(&addr)
        .env("HOOKD_ADDR", server.grpc.as_str())
        .env("HOOKD_TOKEN", crate::portal::ADMIN)
        .kill_on_drop(true)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the example starts");
    let app = crate::console::Http::new(addr.parse().unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let page = loop {
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            let page = app.get("/settings/webhooks", "").await;
            if page.status == 200 {
                break page;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the example never served its page"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let hookd_origin = format!("http://{}", server.http);
    let src = page
        .body
        .split("iframe src=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(
        src.starts_with(&format!("{hookd_origin}/portal/")),
        "{}",
        page.body
    );
    let hookd = crate::console::Http::new(server.http);
    let path = &src[hookd_origin.len()..];
    let portal = hookd.get(path, "").await;
    assert_eq!(portal.status, 200, "{}", portal.body);
    assert!(
        portal.body.contains("Acme Inc. webhooks"),
        "{}",
        portal.body
    );
    assert!(
        portal
            .header("content-security-policy")
            .contains(&format!("frame-ancestors {origin}")),
        "{}",
        portal.header("content-security-policy")
    );
    // 15 minutes later the link has expired: the portal sends the browser to the app,
    // which answers with a new link.
    clock.advance(15 * 60 * 1_000);
    let expired = hookd.get(path, "").await;
    assert_eq!(expired.status, 303, "{}", expired.body);
    assert_eq!(
        expired.header("location"),
        format!("{origin}/portal/refresh")
    );
    let fresh = app.get("/portal/refresh", "").await;
    assert_eq!(fresh.status, 303, "{}", fresh.body);
    let next = fresh.header("location");
    assert!(
        next.starts_with(&format!("{hookd_origin}/portal/")) && next != src,
        "{next}"
    );
    assert_eq!(hookd.get(&next[hookd_origin.len()..], "").await.status, 200);
    server.stop().await;
}

/// The catch-up example pulls what its endpoint missed while its receiver was down, signed
/// with the endpoint's secret and verified by the reference library; its cursor file
/// carries it across its own runs and a restart of hookd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catch_up_example_pulls_what_was_missed_and_keeps_its_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    // The receiver is down: nothing listens at its address.
    let port = hookd_testkit::free_port().unwrap();
    let mut c = server.client().await;
    c.put_endpoint(pb::Endpoint {
        name: "hooks".into(),
        url: format!("http://127.0.0.1:{port}/hooks"),
        secrets: vec![secret.into()],
        catch_up: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let send = async |server: &TestServer, c: &mut hookd_client::Client, n: u32| {
        for i in 0..n {
            c.enqueue(
                hookd_client::Event::to_endpoint("hooks", format!("{{\"n\":{i}}}"))
                    .event_type("order.paid")
                    .max_attempts(1),
            )
            .await
            .unwrap();
            server.advance(1).await;
        }
    };
    send(&server, &mut c, 3).await;
    let cursor = dir.path().join("cursor.txt");
    let cursor = cursor.to_str().unwrap();
    let base = format!("http://{}", server.http);
    let env = [("WEBHOOK_SECRET", secret)];
    let args = [base.as_str(), "default", "hooks", cursor];
    let out = run("catch_up", &args, &env).await;
    assert!(out.contains("caught up 3 events"), "{out}");
    assert!(out.contains("order.paid: {\"n\":0}"), "{out}");
    // Again: nothing new.
    let out = run("catch_up", &args, &env).await;
    assert!(out.contains("caught up 0 events"), "{out}");
    // hookd restarts; two more; the cursor picks up exactly those.
    let server = server.restart().await;
    let mut c = server.client().await;
    send(&server, &mut c, 2).await;
    let base = format!("http://{}", server.http);
    let args = [base.as_str(), "default", "hooks", cursor];
    let out = run("catch_up", &args, &env).await;
    assert!(out.contains("caught up 2 events"), "{out}");
    server.stop().await;
}

/// Every example file appears in the README exactly as it is, so a snippet pasted from the
/// README is the code these tests run.
#[test]
fn the_readme_shows_every_example_as_it_is() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for file in [
        "examples/rust/agent.rs",
        "examples/rust/pull_worker.rs",
        "examples/rust/receiver.rs",
        "examples/rust/saas_portal.rs",
        "examples/rust/catch_up.rs",
        "examples/python/agent.py",
        "examples/node/agent.ts",
    ] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(
            readme.contains(text.trim_end()),
            "README.md does not show {file} as it is (paste the file into its code block)"
        );
    }
}
