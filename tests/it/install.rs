//! What an installer relies on: the example config is the code's defaults, `config check`
//! says what `serve` would refuse, `--version` names the commit, systemd hears READY=1 only
//! once hookd serves (and STOPPING=1 at SIGTERM), and the shutdown grace in the unit file and
//! the Kubernetes manifests leaves room for hookd's own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn hookd(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
        .args(args)
        .env_remove("HOOKD_CONFIG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_example_config_is_what_print_default_prints() {
    let (code, printed, stderr) = hookd(&["config", "print-default"]);
    assert_eq!(code, 0, "{stderr}");
    let example = std::fs::read_to_string(repo().join("deploy/hookd.toml")).unwrap();
    assert!(
        printed == example,
        "deploy/hookd.toml differs from `hookd config print-default`; regenerate it with \
         `cargo run -p hookd -- config print-default > deploy/hookd.toml`"
    );
    // And it is a configuration `serve` accepts as it is.
    let path = repo().join("deploy/hookd.toml");
    let (code, stdout, stderr) = hookd(&["config", "check", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("configuration ok: data_dir ./hookd-data, gRPC 127.0.0.1:7700"),
        "{stdout}"
    );
}

#[test]
fn config_check_refuses_what_serve_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], &str); 4] = [
        ("[retry]\nbase_ms = 0\n", &[], "`retry"),
        ("max_payload = 5\n", &[], "max_payload"),
        (
            "",
            &["--grpc-addr", "0.0.0.0:7700"],
            "refusing to serve gRPC on 0.0.0.0:7700 without authentication",
        ),
        (
            "[[auth.tokens]]\nname = \"agents\"\nenv = \"HOOKD_TEST_UNSET_TOKEN_VARIABLE\"\nscopes = [\"enqueue\"]\n",
            &[],
            "HOOKD_TEST_UNSET_TOKEN_VARIABLE",
        ),
    ];
    for (i, (text, flags, named)) in cases.into_iter().enumerate() {
        let file = dir.path().join(format!("{i}.toml"));
        std::fs::write(&file, text).unwrap();
        let mut args = vec!["config", "check", "--config", file.to_str().unwrap()];
        args.extend_from_slice(flags);
        let (code, stdout, stderr) = hookd(&args);
        assert_eq!(code, 2, "{text:?} {flags:?}: {stdout}");
        assert!(stderr.contains(named), "{text:?}: {stderr}");
    }
    // The same file with the flag `serve` would take: the exposure rule is met by --insecure.
    let file = dir.path().join("2.toml");
    let (code, stdout, stderr) = hookd(&[
        "config",
        "check",
        "--config",
        file.to_str().unwrap(),
        "--grpc-addr",
        "0.0.0.0:7700",
        "--insecure",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("gRPC 0.0.0.0:7700"), "{stdout}");
    // `config check FILE`, as the file's header says: the file named is the one checked,
    // also over a HOOKD_CONFIG naming another (the environment of a shell that runs hookd).
    let bad = dir.path().join("0.toml");
    let (code, _, stderr) = hookd(&["config", "check", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("`retry"), "{stderr}");
    let quickstart = repo().join("examples/quickstart.toml");
    let output = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
        .args(["config", "check", quickstart.to_str().unwrap()])
        .env("HOOKD_CONFIG", &bad)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert!(stdout.starts_with("configuration ok"), "{stdout}");
}

#[test]
fn version_names_the_package_and_the_commit() {
    let (code, stdout, stderr) = hookd(&["--version"]);
    assert_eq!(code, 0, "{stderr}");
    // The build script's rule: HOOKD_COMMIT when the build names one, else the checkout's
    // HEAD, else "unknown" (a source tree without .git).
    let commit = match option_env!("HOOKD_COMMIT").filter(|c| !c.is_empty()) {
        Some(c) => c.to_owned(),
        None => Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(repo())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned()),
    };
    let want = format!("hookd {} (commit {commit})\n", env!("CARGO_PKG_VERSION"),);
    assert_eq!(stdout, want);
}

/// A service manager's notification socket: what hookd sends on it, one datagram each.
struct NotifySocket {
    socket: std::os::unix::net::UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    fn bind(dir: &Path) -> Self {
        let path = dir.join("notify.sock");
        let socket = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        Self { socket, path }
    }

    fn next(&self) -> String {
        let mut buf = [0u8; 4096];
        let n = self
            .socket
            .recv(&mut buf)
            .expect("a notification within 60 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }
}

fn http_status(addr: &str, path: &str) -> u16 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    answer
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Under `WatchdogSec=` (systemd sets WATCHDOG_USEC), hookd sends WATCHDOG=1 a quarter of
/// the timeout apart while its engine finishes rounds (the wedged case: `watchdog`'s unit
/// tests, on a paused clock).
#[test]
fn systemd_watchdog_hears_from_a_working_engine() {
    let dir = tempfile::tempdir().unwrap();
    let notify = NotifySocket::bind(dir.path());
    let (mut child, rx) = spawn_serve(dir.path(), &notify, &[("WATCHDOG_USEC", "400000")]);
    let lines = crate::harness::lines_until_serving(&rx);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("service manager watchdog on")
                && l.contains("\"timeout_ms\":400")
                && l.contains("\"period_ms\":100")),
        "{lines:#?}"
    );
    // Beats before READY=1 (no engine yet) are the runtime's; count those after it, which
    // each waited for an engine round.
    while !notify.next().lines().any(|l| l == "READY=1") {}
    let mut beats = 0;
    while beats < 3 {
        let n = notify.next();
        assert_eq!(
            n.trim_end(),
            "WATCHDOG=1",
            "only watchdog beats while serving"
        );
        beats += 1;
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// `hookd serve` on loopback ports with its data in `dir`, JSON logs, `notify` as its
/// NOTIFY_SOCKET and `env` added; its stderr lines arrive on the receiver. The child is
/// killed when dropped, so no hookd outlives a failed assertion.
fn spawn_serve(
    dir: &Path,
    notify: &NotifySocket,
    env: &[(&str, &str)],
) -> (KillOnDrop, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--ingest-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .env("HOOKD_DATA_DIR", dir.join("data"))
        .env("NOTIFY_SOCKET", &notify.path)
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .envs(env.iter().copied())
        .env_remove("HOOKD_CONFIG")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = crate::harness::lines_of(child.stderr.take().unwrap());
    (KillOnDrop(child), rx)
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn systemd_hears_ready_once_hookd_serves_and_stopping_at_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let notify = NotifySocket::bind(dir.path());
    let (mut child, rx) = spawn_serve(dir.path(), &notify, &[]);
    let ready = notify.next();
    assert!(
        ready.lines().any(|l| l == "READY=1") && ready.contains("STATUS=serving"),
        "{ready:?}"
    );
    // READY=1 comes after the listeners serve: /healthz answers at once.
    let lines = crate::harness::lines_until_serving(&rx);
    let serving: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    let http = serving["fields"]["http_addr"].as_str().unwrap().to_owned();
    assert_eq!(http_status(&http, "/healthz"), 200);

    let killed = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let stopping = notify.next();
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    let status = child.0.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// A number after `key` (`key=30`, `key: 30`, `key = 30`) on the line that holds it.
fn number_after(text: &str, key: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix(key)?;
            let rest = rest.trim_start_matches([' ', ':', '=']);
            rest.split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// The `hookd.toml: |` block of a ConfigMap, de-indented.
fn config_map_toml(yaml: &str) -> String {
    let mut lines = yaml
        .lines()
        .skip_while(|l| !l.trim_end().ends_with("hookd.toml: |"));
    lines.next().expect("a ConfigMap with hookd.toml");
    let indent = "    ";
    lines
        .take_while(|l| l.is_empty() || l.starts_with(indent))
        .map(|l| l.strip_prefix(indent).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn stop_timeouts_leave_room_for_hookds_shutdown_grace() {
    let default_grace_s = hookd::config::Config::default().delivery.shutdown_grace_ms / 1000;
    // systemd: TimeoutStopSec above the default grace plus 15 s for requests and the last
    // commit.
    let unit = std::fs::read_to_string(repo().join("deploy/systemd/hookd.service")).unwrap();
    let stop = number_after(&unit, "TimeoutStopSec");
    assert_eq!(stop.len(), 1, "one TimeoutStopSec");
    assert!(
        stop[0] >= default_grace_s + 15,
        "TimeoutStopSec={} with a {default_grace_s} s grace",
        stop[0]
    );
    assert!(unit.contains("\nType=notify\n"));

    // Kubernetes: the pod's grace covers the preStop sleep, hookd's grace from its own
    // ConfigMap, and 10 s more; the ConfigMap is a configuration hookd accepts.
    for file in ["sidecar.yaml", "shared.yaml"] {
        let yaml = std::fs::read_to_string(repo().join("deploy/kubernetes").join(file)).unwrap();
        let config = hookd::config::Config::from_toml(&config_map_toml(&yaml))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        config.validate().unwrap();
        let grace_s = config.delivery.shutdown_grace_ms / 1000;
        let pod = number_after(&yaml, "terminationGracePeriodSeconds");
        let pre_stop = number_after(&yaml, "seconds");
        assert_eq!((pod.len(), pre_stop.len()), (1, 1), "{file}");
        assert!(
            pod[0] >= pre_stop[0] + grace_s + 10,
            "{file}: terminationGracePeriodSeconds {} < preStop {} + grace {grace_s} + 10",
            pod[0],
            pre_stop[0]
        );
    }
}

/// The release recipe's base images cannot be pulled here (no registry), so what can be
/// checked without building it is: the build stage copies every workspace member
/// and nothing the build context leaves out (a new member missing from the recipe would
/// break `cargo build --locked` in it), the runtime stage runs as a numeric non-root user
/// with the data directory as its volume, and its health check names a subcommand hookd
/// has. `.ci/run` lints the file with hadolint as well.
#[test]
fn the_container_recipe_copies_the_whole_workspace_and_runs_as_non_root() {
    let dir = repo().join("deploy/container");
    let text = std::fs::read_to_string(dir.join("Containerfile")).unwrap();
    let ignored = std::fs::read_to_string(dir.join("Containerfile.dockerignore")).unwrap();
    // Instructions, with `\` continuations joined and comments dropped.
    let mut instructions: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && pending.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => pending.push_str(head),
            None => {
                pending.push_str(line);
                instructions.push(std::mem::take(&mut pending));
            }
        }
    }
    let words = |i: &str| i.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let froms: Vec<usize> = instructions
        .iter()
        .enumerate()
        .filter(|(_, i)| i.starts_with("FROM "))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage");
    let (build, runtime) = instructions.split_at(froms[1]);

    let mut copied = Vec::new();
    for i in build.iter().filter(|i| i.starts_with("COPY ")) {
        let w = words(i);
        let args: Vec<&String> = w[1..].iter().filter(|a| !a.starts_with("--")).collect();
        assert!(args.len() >= 2, "{i}");
        for src in &args[..args.len() - 1] {
            let src = src.trim_end_matches('/');
            assert!(repo().join(src).exists(), "COPY of a missing path: {i}");
            assert!(
                !ignored.lines().any(|p| p.trim() == src),
                "{src} is copied but the build context leaves it out"
            );
            copied.push(src.to_owned());
        }
    }
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members"))
        .expect("workspace members");
    let members: Vec<&str> = members.split('"').skip(1).step_by(2).collect();
    assert!(members.contains(&"server"), "{members:?}");
    for m in members.iter().copied().chain(["Cargo.toml", "Cargo.lock"]) {
        // A member inside a copied folder (server/core in server) is copied with it.
        assert!(
            copied
                .iter()
                .any(|c| c == m || m.starts_with(&format!("{c}/"))),
            "the build stage does not copy {m}"
        );
    }

    let last = |kw: &str| {
        runtime
            .iter()
            .rev()
            .find(|i| i.starts_with(kw))
            .unwrap_or_else(|| panic!("no {kw}in the runtime stage"))
            .clone()
    };
    let user = words(&last("USER "))[1].clone();
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("numeric user");
    assert_ne!(uid, 0, "runs as root");
    let env = last("ENV ");
    let data_dir = words(&env)
        .iter()
        .find_map(|w| w.strip_prefix("HOOKD_DATA_DIR=").map(str::to_owned))
        .expect("HOOKD_DATA_DIR set");
    assert!(
        last("VOLUME ").contains(&format!("\"{data_dir}\"")),
        "the data directory {data_dir} is the volume"
    );
    let health = last("HEALTHCHECK ");
    let cmd = health.split("CMD").nth(1).expect("HEALTHCHECK CMD");
    let args: Vec<String> = serde_json::from_str(cmd.trim()).expect("exec-form CMD");
    assert_eq!(args[0], "/usr/local/bin/hookd");
    let (code, _, err) = hookd(&[&args[1], "--help"]);
    assert_eq!(code, 0, "hookd {} --help: {err}", args[1]);
}

/// `serve --help` (and the other subcommands that are not a client of a running hookd)
/// lists only its own flags; a client flag written there is refused, naming it. The client
/// subcommands keep them, before or after the subcommand, and HOOKD_JSON / HOOKD_INSECURE
/// take 1/0 and yes/no as well as true/false.
#[test]
fn serve_help_lists_only_serve_flags() {
    let client_flags = [
        "--server",
        "--token",
        "--json",
        "--ca-file",
        "--cert",
        "--key",
    ];
    for sub in [
        &["serve"][..],
        &["token", "new"],
        &["config", "check"],
        &["config", "print-default"],
        &["repair"],
    ] {
        let mut args = sub.to_vec();
        args.push("--help");
        let (code, help, stderr) = hookd(&args);
        assert_eq!(code, 0, "{sub:?}: {stderr}");
        for flag in client_flags {
            assert!(!help.contains(flag), "{sub:?} --help lists {flag}:\n{help}");
        }
    }
    let (_, serve_help, _) = hookd(&["serve", "--help"]);
    assert!(serve_help.contains("--allow-destination"), "{serve_help}");
    for sub in [&["stats"][..], &["endpoints", "put"], &["health"]] {
        let mut args = sub.to_vec();
        args.push("--help");
        let (_, help, _) = hookd(&args);
        assert!(
            help.contains("--server") && help.contains("--json"),
            "{sub:?}: {help}"
        );
    }
    let (code, _, stderr) = hookd(&["serve", "--server", "http://127.0.0.1:1"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("--server is a flag of the client subcommands")
            && stderr.contains("`hookd serve` does not take it"),
        "{stderr}"
    );
    let (code, _, stderr) = hookd(&["token", "new", "--json"]);
    assert_eq!(code, 2, "{stderr}");
    // A client flag from the environment is no error for `config check`; HOOKD_JSON=1
    // is true, as HOOKD_INSECURE=yes is.
    let output = Command::new(env!("CARGO_BIN_EXE_hookd-under-test"))
        .args(["config", "check", "--grpc-addr", "0.0.0.0:7700"])
        .env_remove("HOOKD_CONFIG")
        .env("HOOKD_SERVER", "http://127.0.0.1:1")
        .env("HOOKD_JSON", "1")
        .env("HOOKD_INSECURE", "yes")
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Before or after the client subcommand: the same flag (here: where to connect).
    for args in [
        &["--server", "http://127.0.0.1:1", "stats"][..],
        &["stats", "--server", "http://127.0.0.1:1"],
    ] {
        let (code, _, stderr) = hookd(args);
        assert_eq!(code, 3, "{args:?}: {stderr}");
        assert!(stderr.contains("http://127.0.0.1:1"), "{stderr}");
    }
}

/// The repository is licensed (LICENSE, Apache-2.0) and every package it holds says so:
/// each Cargo.toml with a [package], each package.json, the Python client's pyproject.
#[test]
fn every_package_carries_the_license() {
    let root = repo();
    let license = std::fs::read_to_string(root.join("LICENSE")).unwrap();
    assert!(
        license.contains("Apache License") && license.contains("Version 2.0, January 2004"),
        "LICENSE is not the Apache License 2.0"
    );
    let mut manifests = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.')
                    && !["target", "node_modules", "dist"].contains(&name.as_str())
                {
                    dirs.push(path);
                }
            } else if ["Cargo.toml", "package.json", "pyproject.toml"].contains(&name.as_str()) {
                manifests.push(path);
            }
        }
    }
    assert!(manifests.len() >= 15, "{manifests:?}");
    for path in manifests {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        let ok = match name.as_ref() {
            "Cargo.toml" if !text.contains("[package]") => true, // the workspace's root
            "Cargo.toml" => {
                text.contains("license = \"Apache-2.0\"")
                    || text.contains("license.workspace = true")
            }
            "package.json" => text.contains("\"license\": \"Apache-2.0\""),
            _ => text.contains("license = \"Apache-2.0\""),
        };
        assert!(ok, "{} names no Apache-2.0 license", path.display());
    }
}

/// The image CI builds and runs (`.ci/container-check`, Containerfile.local) is the release
/// recipe's run stage: the same user, environment, volume, ports, health check, stop signal,
/// entrypoint and command, line for line.
#[test]
fn the_image_ci_runs_is_the_release_images_run_stage() {
    let dir = repo().join("deploy/container");
    let release = std::fs::read_to_string(dir.join("Containerfile")).unwrap();
    let local = std::fs::read_to_string(dir.join("Containerfile.local")).unwrap();
    let run_stage = release
        .split("# --- run ---")
        .nth(1)
        .expect("the release recipe's run stage");
    let settings = |text: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut current = String::new();
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            current.push_str(line.trim_end_matches('\\').trim());
            current.push(' ');
            if !line.ends_with('\\') {
                let instruction = current.trim().to_owned();
                current.clear();
                if [
                    "USER",
                    "ENV",
                    "VOLUME",
                    "EXPOSE",
                    "HEALTHCHECK",
                    "STOPSIGNAL",
                    "ENTRYPOINT",
                    "CMD",
                ]
                .iter()
                .any(|k| instruction.starts_with(&format!("{k} ")))
                {
                    out.push(instruction);
                }
            }
        }
        out
    };
    let (want, got) = (settings(run_stage), settings(&local));
    assert_eq!(want.len(), 8, "{want:#?}");
    assert_eq!(got, want);
}
