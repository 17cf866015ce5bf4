//! The README's first hour, run as pasted: every command block of "Quickstart from the
//! shell", "Receive a signed webhook and pull it" and "The same over HTTP/JSON" (curl), in order, in one bash, against the
//! hookd built here (`hookd` on PATH) with the Python of HOOKD_PYTHON (which has
//! `standardwebhooks`, tests/python/requirements.txt). The snippets use hookd's and the
//! receiver's fixed ports (7700 to 7702, 8080), so they run in a network namespace of
//! their own (`unshare`, root: CI runs it) with a PID namespace that ends every process
//! they started, and a mount namespace whose tmpfs holds their working directory (so a
//! nearly full host disk cannot refuse their events). Opt-in: `.ci/run` runs it with
//! `--ignored readme_`.

use std::path::Path;
use std::time::Duration;

/// The README's sections run here, in this order. Every other block is checked another
/// way ([`ELSEWHERE`]).
const SECTIONS: [&str; 8] = [
    "# hookd",
    "## Install and run",
    "## Quickstart from the shell",
    "### Receive a signed webhook and pull it",
    "### The same over HTTP/JSON",
    "### Topics, subscriptions and FIFO lanes",
    "### Dead letters: analyze, fix, replay",
    "### A damaged log",
];

/// The README's section on the customer portal.
pub(crate) const PORTAL_SECTION: &str =
    "## The customer portal: let each customer manage its own webhooks";

/// The README's section on MCP: its configuration block starts the servers of mcp.rs.
pub(crate) const MCP_SECTION: &str = "## MCP: hookd as an agent's tool";

/// The README's blocks that are not run here, and what checks each instead.
const ELSEWHERE: [(&str, &str, &str); 12] = [
    (
        "## Receiving webhooks (`POST /in/{source}` on `ingest_addr`)",
        "toml",
        "parsed as hookd's config: the_readme_config_blocks_parse",
    ),
    (
        "### Rust (`cargo run --example agent -- queue:jobs 100`)",
        "rust",
        "examples/rust/*.rs as they are (examples.rs), run by examples.rs",
    ),
    (
        "### Python (`pip install ./client/python`; `AsyncEmitter` for asyncio)",
        "python",
        "examples/python/agent.py as it is (examples.rs), run by python.rs",
    ),
    (
        "### TypeScript / Node (`client/node`, over `@grpc/grpc-js`)",
        "ts",
        "examples/node/agent.ts as it is (examples.rs), run by node.rs",
    ),
    (
        "## API (`proto/hookd/v1/hookd.proto`, service `hookd.v1.Hookd`)",
        "rust",
        "hookd-client's crate documentation holds it as a doctest (compiled by cargo test)",
    ),
    (
        "### Metrics",
        "yaml",
        "promtool check config (metrics.rs, with promtool)",
    ),
    (
        "### Traces (OpenTelemetry)",
        "text",
        "a picture of spans, not a command",
    ),
    (
        MCP_SECTION,
        "json",
        "the MCP configuration mcp.rs starts both servers from (with --ignored python)",
    ),
    (
        PORTAL_SECTION,
        "sh",
        "run as pasted against a hookd with an operator's token: portal.rs, the_readmes_portal_blocks_run_as_pasted",
    ),
    (
        PORTAL_SECTION,
        "rust",
        "examples/rust/saas_portal.rs as it is (examples.rs), run by examples.rs",
    ),
    (
        "## Tenants: one hookd for many customers",
        "sh",
        "run as pasted against a hookd with an operator's token: tenants.rs, the_readmes_tenant_block_runs_as_pasted",
    ),
    (
        "### Catch-up: a receiver pulls what it missed",
        "rust",
        "examples/rust/catch_up.rs as it is (examples.rs), run by examples.rs",
    ),
];

/// The shell functions the blocks run with. `cargo`: the README's cargo commands, here
/// where hookd is already built (`hookd` on PATH is the binary under test): `cargo run
/// --release -p hookd -- ARGS` is `hookd ARGS`; the test suite (`cargo test --workspace`)
/// is CI's own step, checked to be the one `.ci/run` runs; the install is checked to name
/// the crate and profile that exist (a release build takes minutes; `.ci/release-check`
/// builds the release). `foreground`: a server a reader runs in the foreground of a
/// terminal runs here in the background until `hookd health` passes, and is then stopped.
const PRELUDE: &str = r#"set -eu
cargo() {
    case "$*" in
        "test --workspace")
            grep -qx 'cargo test --workspace' "$HOOKD_REPO/.ci/run"
            echo "(the test suite: .ci/run runs cargo test --workspace)" ;;
        "install --locked --path server --profile dist")
            grep -q '^name = "hookd"$' "$HOOKD_REPO/server/Cargo.toml"
            grep -q '^\[profile.dist\]$' "$HOOKD_REPO/Cargo.toml"
            echo "(hookd is installed here as the binary under test)" ;;
        "run --release -p hookd -- "*) shift 5; hookd "$@" ;;
        *) echo "the README runs a cargo command this test does not know: cargo $*" >&2; return 1 ;;
    esac
}
foreground() {
    if [ "$1" = cargo ]; then shift 6; set -- hookd "$@"; fi
    "$@" &
    local pid=$!
    for _ in $(seq 300); do hookd health >/dev/null 2>&1 && break; sleep 0.1; done
    hookd health
    kill -TERM "$pid"
    wait "$pid" || true
    echo "=== served in the foreground, then stopped"
}
"#;

/// A line of a shell block as run here: a server started in the foreground (no `&`) goes
/// through `foreground`.
fn shell_line(line: &str) -> String {
    let command = line.split(" #").next().unwrap_or(line).trim_end();
    let serves = command.starts_with("hookd serve")
        || command.starts_with("cargo run --release -p hookd -- serve");
    if serves && !command.ends_with('&') {
        format!("foreground {command}\n")
    } else {
        format!("{line}\n")
    }
}

/// A fenced block: its language and its text.
#[derive(Debug)]
pub(crate) struct Block {
    pub(crate) lang: String,
    pub(crate) text: String,
}

/// The fenced blocks of the README section under `heading`, up to the next heading of any
/// level (a subsection is a section of its own here; `#` lines inside a block are not
/// headings).
pub(crate) fn blocks(readme: &str, heading: &str) -> Vec<Block> {
    all_blocks(readme)
        .into_iter()
        .filter(|(h, _)| h == heading)
        .map(|(_, block)| block)
        .collect()
}

/// Every fenced block of the README with the heading it is under.
fn all_blocks(readme: &str) -> Vec<(String, Block)> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut fence: Option<Block> = None;
    for line in readme.lines() {
        if let Some(block) = fence.as_mut() {
            if line.starts_with("```") {
                out.extend(fence.take().map(|b| (heading.clone(), b)));
            } else {
                block.text.push_str(line);
                block.text.push('\n');
            }
            continue;
        }
        if let Some(lang) = line.strip_prefix("```") {
            fence = Some(Block {
                lang: lang.trim().to_owned(),
                text: String::new(),
            });
            continue;
        }
        if line.starts_with('#') {
            line.trim_end().clone_into(&mut heading);
        }
    }
    out
}

/// The bash script: the blocks in order (a Python block fed to `python3` on its standard
/// input; a `console` transcript's `$ ` lines, the outputs left out), then, not from the
/// README, a wait until the replayed message is delivered; before "A damaged log", which
/// needs hookd stopped, every server the blocks started is stopped.
fn script(readme: &str) -> String {
    let mut script = String::from(PRELUDE);
    let mut ran = 0;
    for heading in SECTIONS {
        let found = blocks(readme, heading);
        assert!(!found.is_empty(), "README has no blocks under {heading:?}");
        if heading == "### A damaged log" {
            script.push_str(
                "for _ in $(seq 300); do hookd message \"$id\" | grep -q '^state *delivered' && break; sleep 0.1; done\n\
                 hookd message \"$id\"\n\
                 kill $(jobs -p) 2>/dev/null || true\n\
                 wait || true\n",
            );
        }
        for block in found {
            match block.lang.as_str() {
                "sh" => {
                    for line in block.text.lines() {
                        script.push_str(&shell_line(line));
                    }
                }
                "console" => {
                    for line in block.text.lines() {
                        if let Some(command) = line.strip_prefix("$ ") {
                            script.push_str(&shell_line(command));
                        }
                    }
                }
                "python" => {
                    script.push_str("python3 - <<'HOOKD_README_PYTHON'\n");
                    script.push_str(&block.text);
                    script.push_str("HOOKD_README_PYTHON\n");
                }
                other => panic!("{heading}: a block in {other:?} is neither run nor excused"),
            }
            script.push_str("echo '=== block done'\n");
            ran += 1;
        }
    }
    assert_eq!(
        ran, RUN_BLOCKS,
        "the README's run blocks changed: update this test"
    );
    script.push_str("echo '=== the README ran'\n");
    script
}

/// The blocks of [`SECTIONS`]: the two commands, the install, the quickstart's 2, the
/// ingest section's 4, the HTTP/JSON one, topics and lanes, the dead-letter transcript,
/// the repair.
const RUN_BLOCKS: usize = 12;

#[tokio::test]
#[ignore = "needs root (unshare), python3 with tests/python/requirements.txt (HOOKD_PYTHON), curl and openssl; .ci/run runs it"]
async fn readme_snippets_run_as_pasted() {
    let python = std::env::var("HOOKD_PYTHON").expect(
        "HOOKD_PYTHON must name a Python with tests/python/requirements.txt installed (.ci/run sets it)",
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let work = tempfile::tempdir().unwrap();
    // The working directory a newcomer has: the repository's examples/ (the quickstart's
    // config) and nothing of a previous run.
    std::fs::create_dir(work.path().join("examples")).unwrap();
    std::fs::copy(
        repo.join("examples/quickstart.toml"),
        work.path().join("examples/quickstart.toml"),
    )
    .unwrap();
    let bin = work.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_hookd-under-test"), bin.join("hookd")).unwrap();
    let venv_bin = Path::new(&python).parent().unwrap().to_owned();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script_path = work.path().join("readme.sh");
    std::fs::write(&script_path, script(&readme)).unwrap();
    let run = tokio::process::Command::new("unshare")
        .args([
            "--net",
            "--pid",
            "--mount",
            "--fork",
            "--mount-proc",
            "bash",
            "-c",
        ])
        // The blocks run on a tmpfs of the namespace's own: hookd's default disk reserve
        // (1 % of the disk, at least 256 MiB) refuses new events on a nearly full host
        // disk, and the README's first hour must not depend on how full the CI machine's
        // disk is. The mount ends with the namespace.
        .arg(format!(
            "ip link set lo up && mkdir run && mount -t tmpfs -o size=1g hookd-readme run \
             && cp -r examples run/ && cd run && exec bash {}",
            script_path.display()
        ))
        .current_dir(work.path())
        .env("PATH", path)
        .env("HOOKD_REPO", &repo)
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("HOOKD_SERVER")
        .env_remove("HOOKD_CONFIG")
        .env_remove("HOOKD_JSON")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the README's blocks did not finish within 300 s")
        .unwrap();
    let text = format!(
        "{}\n--- stderr\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert_eq!(text.matches("=== block done").count(), RUN_BLOCKS, "{text}");
    assert!(text.contains("=== the README ran"), "{text}");
    // What each step should show: the endpoint, the first delivery at the receiver, the
    // dead letter and its replay delivered, the GitHub webhook accepted once and pulled,
    // the Standard Webhooks one pulled.
    for shown in [
        "created",
        "b'{\"id\":42}'",
        "1 dead letter would be replayed (dry run)",
        "replayed 1 of 1",
        "b'{\"id\":43}'",
        "{\"duplicate\":false,\"id\":\"",
        "{\"action\":\"opened\",\"number\":1}",
        "event type  agent.step.finished",
        // The two commands and the install: hookd served with its defaults, then with
        // the printed default config.
        "(the test suite: .ci/run runs cargo test --workspace)",
        "=== served in the foreground, then stopped",
        "nothing to repair",
        // The HTTP/JSON section: the endpoint put, the push delivered, the ack, the error.
        "\"created\":true",
        // `data`, delivered as the text sent.
        "b'{\"invoice\": 7}'",
        "{\"acked\":1}",
        "\"message\":\"queue: must not be empty\"",
        // Topics and lanes: the fan-out counts, the filtered delivery, the queue's two
        // tickets, the steps in order, the stats' lanes column.
        "(event; 2 subscriber(s))",
        "(event; 1 subscriber(s))",
        "b'{\"priority\": \"urgent\", \"ticket\": 7}'",
        "{\"priority\": \"low\", \"ticket\": 8}",
        "LANES",
    ] {
        assert!(text.contains(shown), "no {shown:?} in:\n{text}");
    }
    // The FIFO endpoint's steps reached the receiver in order.
    let at = |step: u32| {
        text.find(&format!("b'{{\"step\": {step}}}'"))
            .unwrap_or_else(|| panic!("step {step} never reached the receiver:\n{text}"))
    };
    assert!(
        at(1) < at(2) && at(2) < at(3),
        "the steps out of order:\n{text}"
    );
    let last = text
        .lines()
        .rev()
        .find(|l| l.starts_with("state "))
        .unwrap_or_default();
    assert!(last.contains("delivered"), "the replay: {last}\n{text}");
}

#[test]
fn the_readme_blocks_are_found_by_section() {
    let readme = "# t\n## Quickstart from the shell\ntext\n```sh\n# not a heading\necho a\n```\n\
                  ### Receive a signed webhook and pull it\n```python\nprint(1)\n```\n## Concepts\n```sh\necho no\n```\n";
    let q = blocks(readme, "## Quickstart from the shell");
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(q[0].text, "# not a heading\necho a\n");
    let r = blocks(readme, "### Receive a signed webhook and pull it");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].lang, "python");
}

/// Every fenced block of the README is run by `readme_snippets_run_as_pasted` or checked
/// as [`ELSEWHERE`] says: a block added anywhere else fails here until it is.
#[test]
fn every_readme_block_is_run_or_checked() {
    let readme = include_str!("../../README.md");
    let mut unchecked = Vec::new();
    for (heading, Block { lang, .. }) in all_blocks(readme) {
        let run = SECTIONS.contains(&heading.as_str())
            && ["sh", "python", "console"].contains(&lang.as_str());
        let elsewhere = ELSEWHERE
            .iter()
            .any(|(h, l, _)| *h == heading && *l == lang);
        if !run && !elsewhere {
            unchecked.push(format!("{heading} ({lang})"));
        }
    }
    assert!(
        unchecked.is_empty(),
        "README blocks neither run nor checked: {unchecked:?}"
    );
    for (heading, lang, _) in ELSEWHERE {
        assert!(
            readme.contains(heading),
            "ELSEWHERE names {heading:?} ({lang}), which the README no longer has"
        );
    }
}

/// The config the README shows parses as hookd's config (its keys and types; the
/// secrets and schema file it names are the reader's).
#[test]
fn the_readme_config_blocks_parse() {
    let readme = include_str!("../../README.md");
    let found = blocks(readme, ELSEWHERE[0].0);
    assert_eq!(found.len(), 1, "{found:?}");
    let config = hookd::Config::from_toml(&found[0].text)
        .unwrap_or_else(|e| panic!("the README's config block: {e}\n{}", found[0].text));
    assert_eq!(config.ingest_addr.to_string(), "127.0.0.1:7702");
}

/// The README's Rust fragment is hookd-client's crate doctest, line for line, so
/// `cargo test` compiles what the README shows.
#[test]
fn the_readme_rust_fragment_is_the_client_doctest() {
    let readme = include_str!("../../README.md");
    let found = blocks(readme, ELSEWHERE[4].0);
    assert_eq!(found.len(), 1, "{found:?}");
    let doc: Vec<&str> = include_str!("../../client/src/lib.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .collect();
    for line in found[0].text.lines() {
        assert!(
            doc.contains(&line),
            "hookd-client's doctest lacks the README's line {line:?}"
        );
    }
}

/// Runs a README shell block in `sh -e` with the hookd under test as `hookd` on the PATH,
/// `$OPS` an operator's token and `HOOKD_SERVER` the server's gRPC address; its stdout, or
/// a failure with both outputs.
pub(crate) async fn run_as_pasted(script: String, ops: &str, grpc: &str) -> String {
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_hookd-under-test"),
        bin.path().join("hookd"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (ops, grpc) = (ops.to_owned(), grpc.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("sh")
            .args(["-e", "-c", &script])
            .env("PATH", path)
            .env("OPS", ops)
            .env("HOOKD_SERVER", grpc)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
