//! The storage floor: bare redb inserts of the same events, `Durability::Immediate`,
//! quick-repair and page cache like hookd's. One table and one row per event (hookd writes
//! three), no gRPC, no index: what redb alone sustains here, with commits of a given size.

use std::path::Path;
use std::time::{Duration, Instant};

use redb::{Database, Durability, TableDefinition};

const EVENTS: TableDefinition<u128, &[u8]> = TableDefinition::new("events");

/// Inserts `per_commit` rows of `payload` bytes per commit for `duration`; events per second.
pub(crate) fn run(
    dir: &Path,
    per_commit: usize,
    payload: usize,
    duration: Duration,
) -> anyhow::Result<f64> {
    let path = dir.join(format!("raw-{}.redb", uuid::Uuid::new_v4().simple()));
    let db = Database::builder()
        .set_cache_size(hookd_storage::store::DEFAULT_CACHE_BYTES)
        .create(&path)?;
    let value = vec![b'x'; payload];
    let started = Instant::now();
    let mut id = 0u128;
    let mut events = 0u64;
    while started.elapsed() < duration {
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        txn.set_quick_repair(true);
        {
            let mut table = txn.open_table(EVENTS)?;
            for _ in 0..per_commit {
                id += 1;
                table.insert(id, value.as_slice())?;
            }
        }
        txn.commit()?;
        let slow = crate::SLOW_SYNC_MS.load(std::sync::atomic::Ordering::SeqCst);
        if slow > 0 {
            std::thread::sleep(Duration::from_millis(2 * slow));
        }
        events += per_commit as u64;
    }
    let rate = events as f64 / started.elapsed().as_secs_f64();
    drop(db);
    std::fs::remove_file(path)?;
    Ok(rate)
}
