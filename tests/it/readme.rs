//! The README's first hour, run as pasted: every command block of "Quickstart from the
//! shell", "Receive a signed webhook and pull it" and "The same over HTTP/JSON" (curl), in order, in one bash, against the
//! hookd built here (`hookd` on PATH) with the Python of HOOKD_PYTHON (which has
//! `standardwebhooks`, tests/python/requirements.txt). The snippets use hookd's and the
//! receiver's fixed ports (7700 to 7702, 8080), so they run in a network namespace of
//! their own (`unshare`, root: CI runs it) with a PID namespace that ends every process
//! they started. Opt-in: `.ci/run` runs it with `--ignored readme_`.

use std::path::Path;
use std::time::Duration;

/// The README's sections run here, in this order.
const SECTIONS: [&str; 3] = [
    "## Quickstart from the shell",
    "### Receive a signed webhook and pull it",
    "### The same over HTTP/JSON",
];

/// A fenced block: its language and its text.
#[derive(Debug)]
struct Block {
    lang: String,
    text: String,
}

/// The fenced blocks of the README section under `heading`, up to the next heading of any
/// level (a subsection is a section of its own here; `#` lines inside a block are not
/// headings).
fn blocks(readme: &str, heading: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut inside = false;
    let mut fence: Option<Block> = None;
    for line in readme.lines() {
        if let Some(block) = fence.as_mut() {
            if line.starts_with("```") {
                out.extend(fence.take().filter(|_| inside));
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
            inside = line.trim_end() == heading;
        }
    }
    out
}

/// The bash script: the blocks in order (a Python block fed to `python3` on its standard
/// input), then, not from the README, a wait until the replayed message is delivered.
fn script(readme: &str) -> String {
    let mut script = String::from("set -eu\n");
    let mut ran = 0;
    for heading in SECTIONS {
        let found = blocks(readme, heading);
        assert!(!found.is_empty(), "README has no blocks under {heading:?}");
        for block in found {
            match block.lang.as_str() {
                "sh" => script.push_str(&block.text),
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
    // The quickstart's 2 blocks, the ingest section's 4, the HTTP/JSON one.
    assert_eq!(
        ran, 7,
        "the README's first-hour blocks changed: update this test"
    );
    script.push_str(
        "for _ in $(seq 300); do hookd message \"$id\" | grep -q '^state *delivered' && break; sleep 0.1; done\n\
         hookd message \"$id\"\n\
         echo '=== the README ran'\n",
    );
    script
}

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
        .args(["--net", "--pid", "--fork", "--mount-proc", "bash", "-c"])
        .arg(format!(
            "ip link set lo up && exec bash {}",
            script_path.display()
        ))
        .current_dir(work.path())
        .env("PATH", path)
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
    assert_eq!(text.matches("=== block done").count(), 7, "{text}");
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
        // The HTTP/JSON section: the endpoint put, the push delivered, the ack, the error.
        "\"created\":true",
        "b'{\"invoice\":7}'",
        "{\"acked\":1}",
        "\"message\":\"queue: must not be empty\"",
    ] {
        assert!(text.contains(shown), "no {shown:?} in:\n{text}");
    }
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
    let q = blocks(readme, SECTIONS[0]);
    assert_eq!(q.len(), 1, "{q:?}");
    assert_eq!(q[0].text, "# not a heading\necho a\n");
    let r = blocks(readme, SECTIONS[1]);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].lang, "python");
}
