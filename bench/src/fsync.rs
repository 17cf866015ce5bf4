//! The disk's current fsync rate: this machine's disk has a fast and a throttled state, and
//! every durable-write figure should be read next to it.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// 4 KiB appends, each followed by `fdatasync`, for `duration`. Returns syncs per second.
pub(crate) fn probe(dir: &Path, duration: Duration) -> anyhow::Result<f64> {
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let block = [0u8; 4096];
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < duration {
        f.write_all(&block)?;
        f.sync_data()?;
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(path)?;
    Ok(rate)
}
