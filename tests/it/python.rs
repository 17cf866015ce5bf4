//! Python against hookd: a client generated from the .proto files (tests/python/smoke.py),
//! and the Standard Webhooks reference library verifying hookd's deliveries
//! (tests/python/webhooks_verify.py). Needs a Python with the packages, so it is opt-in: `.ci/run` installs the pinned packages into
//! a venv and runs it with `--ignored`, passing the interpreter in HOOKD_PYTHON.

use crate::harness::TestServer;

/// Runs `tests/python/{script}` against a fresh hookd; fails with its output unless it exits 0.
async fn run_python(script: &str) {
    let python = std::env::var("HOOKD_PYTHON").expect(
        "HOOKD_PYTHON must name a Python with tests/python/requirements.txt installed (.ci/run sets it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let addr = server.grpc.trim_start_matches("http://").to_owned();
    let proto = format!("{}/../proto", env!("CARGO_MANIFEST_DIR"));
    crate::harness::run_script(python, &format!("python/{script}"), vec![addr, proto]).await;
    server.stop().await;
}

/// The Python package (`client/python`, installed into HOOKD_PYTHON by `.ci/run`): its
/// pytest suite, against a hookd whose destinations hold at most 64 KiB of live messages
/// (HOOKD_ADDR), and a hookd with the default marks behind a link the tests turn slow,
/// down and up (HOOKD_LINK_*: the Emitter's never-wait test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with client/python installed (pip install ./client/python[test]); .ci/run runs it"]
async fn python_client_package() {
    let python = std::env::var("HOOKD_PYTHON")
        .expect("HOOKD_PYTHON must name a Python with client/python installed (.ci/run sets it)");
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::with_small_marks(dir.path()).await;
    let link_dir = tempfile::tempdir().unwrap();
    let (link_server, link) = crate::flaky::link_to_hookd(link_dir.path()).await;
    let tests = format!("{}/../client/python/tests", env!("CARGO_MANIFEST_DIR"));
    let addr = server.grpc.trim_start_matches("http://").to_owned();
    let mut env = link.env(&link_server);
    env.push(("HOOKD_ADDR".into(), addr.clone()));
    crate::harness::run_program(
        python,
        "client/python tests",
        vec![
            "-m".into(),
            "pytest".into(),
            "-q".into(),
            "-rP".into(),
            "-p".into(),
            "no:cacheprovider".into(),
            tests,
        ],
        env,
    )
    .await;
    drop(link);
    link_server.stop().await;
    // The README's example agent, as pasted.
    let root = format!("{}/..", env!("CARGO_MANIFEST_DIR"));
    crate::harness::run_program(
        std::env::var("HOOKD_PYTHON").unwrap_or_default(),
        "examples/python/agent.py",
        vec![
            format!("{root}/examples/python/agent.py"),
            "py-example".into(),
            "25".into(),
        ],
        vec![("HOOKD_ADDR".into(), addr)],
    )
    .await;
    // With hookd down the example still ends on time with its counters.
    crate::harness::example_agent_with_hookd_down(
        std::env::var("HOOKD_PYTHON").unwrap_or_default(),
        format!("{root}/examples/python/agent.py"),
    )
    .await;
    let mut client = server.client().await;
    let got = client
        .receive("py-example", 100, std::time::Duration::from_secs(30), None)
        .await
        .unwrap();
    assert_eq!(got.len(), 25);
    server.stop().await;
}

#[tokio::test]
#[ignore = "needs Python with grpcio (tests/python/requirements.txt); .ci/run runs it"]
async fn python_client_speaks_the_contract() {
    run_python("smoke.py").await;
}

/// The signatures hookd sends, checked by the Standard Webhooks reference library
/// (`standardwebhooks` on PyPI), not by code of ours.
#[tokio::test]
#[ignore = "needs Python with standardwebhooks (tests/python/requirements.txt); .ci/run runs it"]
async fn python_standard_webhooks_library_verifies_deliveries() {
    run_python("webhooks_verify.py").await;
}

/// grpcio's own TLS stack against hookd: TLS with a token, mTLS with a client certificate,
/// and refusals (untrusted server CA, plaintext).
#[tokio::test]
#[ignore = "needs Python with grpcio (tests/python/requirements.txt); .ci/run runs it"]
async fn python_client_over_tls_and_mtls() {
    let python = std::env::var("HOOKD_PYTHON").expect(
        "HOOKD_PYTHON must name a Python with tests/python/requirements.txt installed (.ci/run sets it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let (config, files) = crate::security::tls_config(dir.path(), "optional");
    let server = TestServer::start_with(
        config,
        hookd_core::clock::ManualClock::new(hookd_core::clock::Clock::now_ms(
            &hookd_core::clock::SystemClock,
        )),
    )
    .await;
    let other = crate::certs::Ca::new("not hookd's CA");
    let worker = files.client_ca.client("worker.internal");
    let d = dir.path();
    let args = vec![
        server.grpc.trim_start_matches("http://").to_owned(),
        format!("{}/../proto", env!("CARGO_MANIFEST_DIR")),
        crate::certs::write(d, "py-ca.pem", &files.ca.pem)
            .display()
            .to_string(),
        crate::certs::write(d, "py-client.pem", &worker.cert)
            .display()
            .to_string(),
        crate::certs::write(d, "py-client.key", &worker.key)
            .display()
            .to_string(),
        crate::security::AGENT.to_owned(),
        crate::certs::write(d, "py-other.pem", &other.pem)
            .display()
            .to_string(),
    ];
    crate::harness::run_script(python, "python/tls_smoke.py", args).await;
    server.stop().await;
}

/// Providers' own libraries against the ingest listener: `standardwebhooks` signs (and
/// re-verifies what a consumer pulls), and a Stripe header is proven by the `stripe`
/// package before hookd takes it.
#[tokio::test]
#[ignore = "needs Python with standardwebhooks, stripe and grpcio (tests/python/requirements.txt); .ci/run runs it"]
async fn python_provider_libraries_sign_what_ingest_accepts() {
    use hookd_core::source::{SchemeName, SourceSpec};
    let python = std::env::var("HOOKD_PYTHON").expect(
        "HOOKD_PYTHON must name a Python with tests/python/requirements.txt installed (.ci/run sets it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::harness::test_config(dir.path());
    config.sources = vec![
        SourceSpec {
            secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
            ..SourceSpec::new("sw", SchemeName::StandardWebhooks, "py-inbox")
        },
        SourceSpec {
            secrets: vec!["whsec_stripe_python_test".into()],
            ..SourceSpec::new("stripe", SchemeName::Stripe, "py-payments")
        },
    ];
    // The real clock: the libraries sign with the time of day.
    let server = TestServer::start_with(
        config,
        hookd_core::clock::ManualClock::new(hookd_core::clock::Clock::now_ms(
            &hookd_core::clock::SystemClock,
        )),
    )
    .await;
    let args = [
        server.ingest.to_string(),
        server.grpc.trim_start_matches("http://").to_owned(),
        format!("{}/../proto", env!("CARGO_MANIFEST_DIR")),
    ];
    crate::harness::run_script(python, "python/ingest_providers.py", args.to_vec()).await;
    server.stop().await;
}

/// The HTTP/JSON API through a client generated from the OpenAPI document hookd serves, by
/// openapi-python-client (PyPI), after openapi-spec-validator has checked the document:
/// every route but the event stream (rest.rs tests that one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with openapi-python-client (tests/python/requirements.txt); .ci/run runs it"]
async fn python_openapi_generated_client_calls_every_route() {
    let python = std::env::var("HOOKD_PYTHON").expect(
        "HOOKD_PYTHON must name a Python with tests/python/requirements.txt installed (.ci/run sets it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    crate::harness::run_script(
        python,
        "python/openapi_client.py",
        vec![server.http.to_string()],
    )
    .await;
    server.stop().await;
}
