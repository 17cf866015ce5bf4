//! Issue #26, 4: damage inside hookd.redb. A flipped byte in a stored payload is an error,
//! never a delivery; hookd does not reopen a damaged file for ever while it reports
//! "serving": after the same failure three times in a row it exits, naming what is damaged
//! and `hookd repair`; an open after an unclean stop runs redb's integrity check, and
//! (issue #49, 6) a start finds a damaged log segment live messages point into.
//!
//! Since format 6 (issue #28) a payload lives in the log's segments, checked against the
//! CRC-32C its pointer in redb holds; the message's attempts live in redb. The damaged
//! message here has a copy of the mark in both: its payload (in the log) and its last
//! attempt's error (in redb), so both checks and the file's salvage are exercised.

use std::path::Path;
use std::time::Duration;

use hookd_client::Event;
use hookd_core::clock::{Clock, ManualClock, SystemClock};
use tonic::Code;

use crate::harness::{TestServer, code, test_config};

const MARK: &[u8] = b"THE-PAYLOAD-THAT-GETS-DAMAGED-0123456789";

/// Flips one bit in every copy of `MARK` in the data file `name` (hookd.redb, or the log's
/// segments with `wal-`); how many copies.
fn damage(dir: &Path, name: &str) -> usize {
    let mut copies = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(name))
        {
            continue;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        let mut at = 0;
        while let Some(i) = bytes[at..].windows(MARK.len()).position(|w| w == MARK) {
            bytes[at + i + 20] ^= 0x01;
            copies += 1;
            at += i + MARK.len();
        }
        std::fs::write(&path, &bytes).unwrap();
    }
    copies
}

fn payload(n: usize) -> Vec<u8> {
    let mut p = format!("event {n:03} ").into_bytes();
    if n == 5 {
        p.extend_from_slice(MARK);
    }
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_a_stored_payload_is_never_delivered_and_hookd_gives_up_naming_the_file()
{
    if std::env::var_os("HOOKD_TEST_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_env_filter("info").try_init();
    }
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(SystemClock.now_ms());
    let mut config = test_config(dir.path());
    config.storage.recover_interval_ms = 20;
    let server = TestServer::start_with(config.clone(), clock.clone()).await;
    let mut c = server.client().await;
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(
            c.enqueue(Event::to_queue("q", payload(n)))
                .await
                .unwrap()
                .id,
        );
    }
    // The damaged one fails an attempt with the mark in its error (an attempts row in
    // redb), and is due again at once.
    let leased = c
        .receive("q", 10, Duration::from_secs(600), None)
        .await
        .unwrap();
    let five = leased.iter().find(|m| m.id == ids[5]).unwrap();
    let mark = String::from_utf8(MARK.to_vec()).unwrap();
    c.nack(
        &five.lease_id,
        Some(Duration::from_millis(1)),
        format!("failed: {mark}"),
    )
    .await
    .unwrap();
    // The disk changes the payload under hookd while it serves.
    assert!(damage(dir.path(), "wal-") >= 1, "the payload is in the log");
    // The damaged message's retry comes due (the others stay leased).
    server.advance(1_000).await;
    let mut refused = None;
    for _ in 0..10 {
        match c.receive("q", 1, Duration::from_secs(600), None).await {
            Ok(got) => {
                for m in got {
                    let n: usize = std::str::from_utf8(&m.payload[6..9])
                        .unwrap()
                        .parse()
                        .unwrap();
                    assert_eq!(
                        m.payload,
                        payload(n),
                        "a payload other than the one enqueued was delivered"
                    );
                }
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.expect("the damaged payload was never read");
    assert_eq!(code(&refused), Code::Unavailable, "{refused}");

    // Reopening cannot mend a damaged segment: each reopen's start-up check (issue #49, 6)
    // refuses it, and after the same failure 3 times hookd stops, naming the segment and
    // `hookd repair`. (The bound only keeps a build that reopens for ever from hanging.)
    let ended = tokio::time::timeout(Duration::from_secs(60), server.finished())
        .await
        .expect("hookd kept reopening a damaged file");
    let said = ended.expect_err("hookd ended with success").to_string();
    assert!(said.contains("3 times in a row"), "{said}");
    assert!(said.contains("log segment wal-"), "{said}");
    assert!(said.contains("hookd repair"), "{said}");

    // The attempt in the data file is damaged too, now that nothing has it open.
    assert!(
        damage(dir.path(), "hookd.redb") >= 1,
        "the attempt is in the file"
    );
    // A start is refused at once (before, hookd reported healthy and served until a
    // delivery read into the damage), naming what to run.
    let why =
        match hookd_testkit::InProcess::start(config.clone(), hookd::app::Hooks::default()).await {
            Ok(started) => {
                drop(started.stop().await);
                panic!("hookd started on damaged data");
            }
            Err(e) => e.to_string(),
        };
    assert!(why.contains("hookd repair"), "{why}");

    // `hookd repair --dry-run` names the damaged message and changes nothing; `hookd
    // repair` salvages every other record, and hookd starts with them.
    let before = std::fs::read(dir.path().join("hookd.redb")).unwrap();
    let (code_dry, plan) = repair(dir.path(), true);
    assert_eq!(code_dry, Some(0), "{plan}");
    assert!(plan.contains(&ids[5]), "{plan}");
    assert!(plan.contains("nothing was changed"), "{plan}");
    for (n, id) in ids.iter().enumerate() {
        assert!(
            n == 5 || !plan.contains(id.as_str()),
            "{id} listed:\n{plan}"
        );
    }
    assert!(
        std::fs::read(dir.path().join("hookd.redb")).unwrap() == before,
        "--dry-run changed hookd.redb"
    );
    let (code_repair, said) = repair(dir.path(), false);
    assert_eq!(code_repair, Some(0), "{said}");
    assert!(said.contains("salvaged"), "{said}");
    assert!(dir.path().join("hookd.redb.damaged").exists());

    let mut config = test_config(dir.path());
    config.storage.recover_interval_ms = 20;
    let server = TestServer::start_with(config, clock).await;
    // The events leased before the failure come back when their leases end (then after
    // a retry's backoff): the clock moves on until all are received, or 20 steps.
    let mut c = server.client().await;
    let mut got = std::collections::BTreeMap::new();
    for _ in 0..20 {
        let batch = c
            .receive("q", 100, Duration::from_secs(600), None)
            .await
            .unwrap();
        got.extend(batch.into_iter().map(|m| (m.id, m.payload)));
        if got.len() >= 9 {
            break;
        }
        server.advance(601_000).await;
    }
    let got: Vec<(String, Vec<u8>)> = got.into_iter().collect();
    let missing = c.get_message(&ids[5]).await.unwrap_err();
    assert_eq!(code(&missing), Code::NotFound, "{missing}");
    let mut want: Vec<(String, Vec<u8>)> = ids
        .iter()
        .enumerate()
        .filter(|(n, _)| *n != 5)
        .map(|(n, id)| (id.clone(), payload(n)))
        .collect();
    want.sort();
    assert!(
        got == want,
        "after the repair: {} events, want the 9 undamaged",
        got.len()
    );
    server.stop().await;
}

/// Runs `hookd repair [--dry-run]` on `dir`: exit code, and what it printed.
fn repair(dir: &Path, dry_run: bool) -> (Option<i32>, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_hookd-under-test"));
    cmd.arg("repair").arg("--data-dir").arg(dir);
    if dry_run {
        cmd.arg("--dry-run");
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}
