//! `hookd repair` on a data file that fails redb's integrity check: every row that can
//! still be read and passes its seal is copied into a new file, which takes the damaged
//! file's place (kept beside it as `hookd.redb.damaged`). Rows that fail their seal, and
//! every other row of a message one of them belongs to, are left out and listed; so is a
//! table that cannot be read to its end (redb may fail, or panic, on a damaged page: both
//! are caught, and the rows after that point are reported lost).

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::rowlog::TableId;
use super::{
    APPLIED_KEY, ATTEMPTS, CATALOG, DEAD, DONE, DamagedRow, HISTORY, IDEMPOTENCY, LANES,
    LEGACY_OBJECTS, MESSAGES, META, RETAINED, SCHEDULE, SCRUBS, SEGMENTS, Store, StoreError,
    catalog_key, seal,
};
use hookd_core::ids::MessageId;
use hookd_core::scope::{ObjectRef, TenantId};

/// The name the damaged file is kept under once a salvage replaces it.
pub(crate) const DAMAGED_NAME: &str = "hookd.redb.damaged";

/// What a salvage found (and, unless it was a dry run, did).
#[derive(Debug, Default)]
pub struct Salvage {
    /// Rows that passed their seal (copied, unless a dry run).
    pub kept: u64,
    /// Rows that failed their seal.
    pub damaged: Vec<DamagedRow>,
    /// Messages left out whole, because one of their rows is damaged.
    pub messages: Vec<MessageId>,
    /// Tables that could not be read to their end: (table, why).
    pub unreadable: Vec<(&'static str, String)>,
    /// Where the damaged file was kept (not a dry run).
    pub kept_damaged: Option<PathBuf>,
}

type Row = (Vec<u8>, Vec<u8>);

/// Reads every row of one table of `db` (key bytes, stored value), as far as it can be read.
fn read_rows<K: redb::Key + 'static>(
    db: &Database,
    def: TableDefinition<K, &'static [u8]>,
    key_bytes: impl Fn(&K::SelfType<'_>) -> Vec<u8>,
) -> (Vec<Row>, Option<String>) {
    let mut rows = Vec::new();
    let read = std::panic::catch_unwind(AssertUnwindSafe(|| -> Result<(), StoreError> {
        let txn = db.begin_read()?;
        let table = match txn.open_table(def) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for row in table.iter()? {
            let (k, v) = row?;
            rows.push((key_bytes(&k.value()), v.value().to_vec()));
        }
        Ok(())
    }));
    let stopped = match read {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(format!(
            "redb panicked reading it: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message")
        )),
    };
    (rows, stopped)
}

/// Salvages `<dir>/hookd.redb` (see the module's comment). With `dry_run`, only reads.
pub fn salvage(dir: &Path, dry_run: bool) -> Result<Salvage, StoreError> {
    let path = dir.join("hookd.redb");
    let db = std::panic::catch_unwind(|| Database::builder().create(&path)).map_err(|_| {
        StoreError::Corrupt(format!(
            "{} cannot be opened at all (redb panicked): restore the data directory from a backup",
            path.display()
        ))
    })??;
    let mut out = Salvage::default();
    let u128_key = |k: &u128| k.to_be_bytes().to_vec();
    let bytes_key = |k: &&[u8]| k.to_vec();
    let name_key = |k: &&str| k.as_bytes().to_vec();
    let mut tables: Vec<(TableId, Vec<Row>)> = Vec::new();
    let mut take = |id: TableId, (rows, stopped): (Vec<Row>, Option<String>)| {
        if let Some(why) = stopped {
            out.unreadable.push((id.name(), why));
        }
        tables.push((id, rows));
    };
    take(TableId::Messages, read_rows(&db, MESSAGES, u128_key));
    take(TableId::Schedule, read_rows(&db, SCHEDULE, u128_key));
    take(TableId::History, read_rows(&db, HISTORY, u128_key));
    take(TableId::Done, read_rows(&db, DONE, u128_key));
    take(TableId::Attempts, read_rows(&db, ATTEMPTS, bytes_key));
    take(TableId::Dead, read_rows(&db, DEAD, bytes_key));
    take(TableId::Idempotency, read_rows(&db, IDEMPOTENCY, bytes_key));
    take(TableId::Catalog, read_rows(&db, CATALOG, bytes_key));
    // A file of format 9 or older holds its objects by name in tables of their own: each
    // row that passes its seal is copied as tenant `default`'s object in the catalog.
    for (id, kind, def) in LEGACY_OBJECTS {
        let (rows, stopped) = read_rows(&db, def, name_key);
        let mut objects = Vec::new();
        for (name, stored) in rows {
            match (seal::open(id, &name, &stored), String::from_utf8(name)) {
                (Ok(value), Ok(name)) => {
                    let key = catalog_key(&ObjectRef::new(TenantId::DEFAULT, kind, name));
                    let sealed = seal::seal(TableId::Catalog, &key, value);
                    objects.push((key, sealed));
                }
                (_, name) => out.damaged.push(DamagedRow {
                    table: id,
                    key: name.map_or_else(|e| e.into_bytes(), String::into_bytes),
                }),
            }
        }
        take(TableId::Catalog, (objects, stopped));
    }
    take(TableId::Retained, read_rows(&db, RETAINED, u128_key));
    take(TableId::Segments, read_rows(&db, SEGMENTS, bytes_key));
    take(
        TableId::Search,
        read_rows(&db, super::search::SEARCH, bytes_key),
    );
    take(TableId::Lanes, read_rows(&db, LANES, bytes_key));
    take(TableId::Scrubs, read_rows(&db, SCRUBS, bytes_key));
    let applied = std::panic::catch_unwind(AssertUnwindSafe(|| -> Result<u64, StoreError> {
        let txn = db.begin_read()?;
        let meta = txn.open_table(META)?;
        Ok(meta.get(APPLIED_KEY)?.map_or(0, |v| v.value()))
    }))
    .map_err(|_| StoreError::Corrupt("the meta table cannot be read".into()))??;
    drop(db);

    for (id, rows) in &tables {
        for (key, stored) in rows {
            if seal::open(*id, key, stored).is_err() {
                out.damaged.push(DamagedRow {
                    table: *id,
                    key: key.clone(),
                });
            }
        }
    }
    let plan = Store::damage_plan(&out.damaged);
    out.messages = plan.messages.clone();
    let dropped: std::collections::HashSet<(u8, Vec<u8>)> = out
        .damaged
        .iter()
        .map(|r| (r.table as u8, r.key.clone()))
        .collect();
    let left_out = |id: TableId, key: &[u8]| {
        dropped.contains(&(id as u8, key.to_vec()))
            || DamagedRow {
                table: id,
                key: key.to_vec(),
            }
            .message()
            .is_some_and(|m| out.messages.contains(&m))
    };
    out.kept = tables
        .iter()
        .map(|(id, rows)| rows.iter().filter(|(k, _)| !left_out(*id, k)).count() as u64)
        .sum();
    if dry_run {
        return Ok(out);
    }

    let temp = dir.join("hookd.redb.salvaging");
    if temp.exists() {
        std::fs::remove_file(&temp)?;
    }
    let fresh = Store::init(Database::create(&temp)?)?;
    let txn = fresh.begin_write()?;
    {
        for (id, rows) in &tables {
            let keep = rows.iter().filter(|(k, _)| !left_out(*id, k));
            match id {
                TableId::Messages
                | TableId::Schedule
                | TableId::History
                | TableId::Done
                | TableId::Retained => {
                    let def = match id {
                        TableId::Messages => MESSAGES,
                        TableId::Schedule => SCHEDULE,
                        TableId::History => HISTORY,
                        TableId::Retained => RETAINED,
                        _ => DONE,
                    };
                    let mut table = txn.open_table(def)?;
                    for (k, v) in keep {
                        let key = <[u8; 16]>::try_from(k.as_slice())
                            .map(u128::from_be_bytes)
                            .map_err(|_| StoreError::Corrupt("a message key".into()))?;
                        table.insert(key, v.as_slice())?;
                    }
                }
                TableId::Attempts
                | TableId::Dead
                | TableId::Idempotency
                | TableId::Segments
                | TableId::Search
                | TableId::Scrubs
                | TableId::Lanes
                | TableId::Catalog => {
                    let def = match id {
                        TableId::Search => super::search::SEARCH,
                        TableId::Scrubs => SCRUBS,
                        TableId::Attempts => ATTEMPTS,
                        TableId::Dead => DEAD,
                        TableId::Segments => SEGMENTS,
                        TableId::Lanes => LANES,
                        TableId::Catalog => CATALOG,
                        _ => IDEMPOTENCY,
                    };
                    let mut table = txn.open_table(def)?;
                    for (k, v) in keep {
                        table.insert(k.as_slice(), v.as_slice())?;
                    }
                }
                // Read into the catalog above, or never a table: never in `tables`.
                TableId::Endpoints
                | TableId::Sources
                | TableId::Subscriptions
                | TableId::Erased => {}
            }
        }
        txn.open_table(META)?.insert(APPLIED_KEY, applied)?;
    }
    // The messages left out took their pointers with them.
    super::recount_segments(&txn)?;
    txn.commit()?;
    drop(fresh);
    std::fs::File::open(&temp)?.sync_all()?;
    let damaged = dir.join(DAMAGED_NAME);
    std::fs::rename(&path, &damaged)?;
    std::fs::rename(&temp, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    out.kept_damaged = Some(damaged);
    Ok(out)
}
