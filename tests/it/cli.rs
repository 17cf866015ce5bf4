//! The binary's configuration handling: bad files and values are refused at start, before
//! anything is opened, with the key (and line) named.

use std::process::Command;

fn serve_with_config(text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookd.toml");
    std::fs::write(&config, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
        .args(["serve", "--config"])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(
        !dir.path().join("data").exists(),
        "nothing is created for a bad config"
    );
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let (code, stderr) = serve_with_config("grpc_addr = \"127.0.0.1:0\"\nmax_payload = 5\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("line 2") && stderr.contains("max_payload"),
        "{stderr}"
    );
}

#[test]
fn invalid_value_is_named_by_key() {
    let (code, stderr) = serve_with_config("[retry]\nbase_ms = 500\ncap_ms = 100\n");
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("config key `retry`") && stderr.contains("cap_ms"),
        "{stderr}"
    );
    let (code, stderr) = serve_with_config("max_payload_bytes = 0\n");
    assert_eq!(code, 2);
    assert!(stderr.contains("`max_payload_bytes`"), "{stderr}");
}

#[test]
fn wrong_type_is_named() {
    let (code, stderr) = serve_with_config("grpc_addr = \"not an address\"\n");
    assert_eq!(code, 2);
    assert!(stderr.contains("grpc_addr"), "{stderr}");
}
