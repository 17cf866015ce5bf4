//! A Python client generated from the .proto files talks to hookd (tests/python/smoke.py).
//! Needs a Python with grpcio, so it is opt-in: `.ci/run` installs the pinned packages into
//! a venv and runs it with `--ignored`, passing the interpreter in HOOKD_PYTHON.

use crate::harness::TestServer;

#[tokio::test]
#[ignore = "needs Python with grpcio (tests/python/requirements.txt); .ci/run runs it"]
async fn python_client_speaks_the_contract() {
    let python = std::env::var("HOOKD_PYTHON").expect(
        "HOOKD_PYTHON must name a Python with tests/python/requirements.txt installed (.ci/run sets it)",
    );
    let dir = tempfile::tempdir().unwrap();
    let server = TestServer::start(dir.path()).await;
    let addr = server.grpc.trim_start_matches("http://").to_owned();
    let root = env!("CARGO_MANIFEST_DIR");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(format!("{root}/python/smoke.py"))
            .arg(addr)
            .arg(format!("{root}/../proto"))
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python smoke failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    eprintln!("{stdout}");
    server.stop().await;
}
