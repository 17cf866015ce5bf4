//! Names the commit hookd is built from, for `hookd --version` and `hookd_build_info`:
//! `HOOKD_COMMIT` from the environment (a container build has no `.git`), else
//! `git rev-parse`, else "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed=HOOKD_COMMIT");
    let from_env = std::env::var("HOOKD_COMMIT")
        .ok()
        .filter(|c| !c.is_empty() && c.len() <= 64 && c.bytes().all(|b| b.is_ascii_graphic()));
    let commit = from_env.or_else(|| {
        // Build again when HEAD moves: HEAD itself (a checkout) and the branch it names (a
        // commit), or packed-refs when the branch is packed.
        if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
            println!("cargo:rerun-if-changed={dir}/HEAD");
            // Only if it exists: cargo reruns a build script on every build while a path
            // it watches is missing, and this one's rerun rebuilds the whole server.
            if std::path::Path::new(&format!("{dir}/packed-refs")).exists() {
                println!("cargo:rerun-if-changed={dir}/packed-refs");
            }
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
                && std::path::Path::new(&format!("{dir}/{branch}")).exists()
            {
                println!("cargo:rerun-if-changed={dir}/{branch}");
            }
        }
        git(&["rev-parse", "--short=12", "HEAD"])
    });
    println!(
        "cargo:rustc-env=HOOKD_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
