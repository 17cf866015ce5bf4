//! Purged payloads overwritten in the log (format 13, issue #53 4).
//!
//! The log is the message heap: a message's record (its payload) lies in the segment its
//! round was written to, beside other messages' records, until retention deletes the
//! segment. A purge (a GDPR request: "delete this customer's data") cannot wait for that,
//! so it overwrites the records themselves:
//!
//! 1. The engine's purge round removes each message's rows and logs an erasure
//!    (`TableId::Erased`, see `Tables::erase`). Durable when answered: a restart replays it.
//! 2. The apply stage performs it: the message's `messages` and `retained` rows go, and each
//!    pointer they held becomes a `scrubs` row (segment and offset -> length and CRC-32C).
//!    From then on no read reaches the record.
//! 3. After a checkpoint covers the round, the reclaim overwrites the records
//!    ([`Store::scrub`]): each with zeros, and the checksum of the frame that holds it
//!    computed again, so the segment stays a valid run of frames; then one `fdatasync` per
//!    segment. Only then are the rows removed. If a write or the sync fails, the rows stay
//!    and the next reclaim writes the zeros again: after a failed fdatasync the zeros may
//!    be readable from the page cache yet never reach the disk, so a retry never trusts
//!    what it reads back, it writes. A crash anywhere leaves either the rows (the next
//!    start's reclaim does it) or the rows' removal behind a synced overwrite.
//!
//! Why overwriting bytes before the checkpoint is safe: a restart reads the log only from
//! the checkpoint on (`wal::Log::replay` skips what lies before it, even in the segment
//! that holds it), and a record is only scrubbed once it ends at or before the checkpoint.
//! What still reads such a segment: `check_heap` at start (frames up to the last live
//! record, which the recomputed checksums keep valid) and payload reads by pointer, which
//! no longer exist for an erased record. A record shared by a fan-out's deliveries is
//! overwritten only if no live message points to it (checked here against `messages`); a
//! completed delivery that shares it and was not purged reads its payload as gone
//! (`Heap::read`: zeros that fail the pointer's checksum read as no longer kept).

use std::collections::{BTreeMap, HashSet};

use redb::{ReadableDatabase, ReadableTable};

use super::heap::{Pointer, Stored};
use super::rowlog::TableId;
use super::{MESSAGES, SCRUBS, Store, StoreError, seal};
use crate::wal::{HEADER, Lsn, segment_name};

/// A `scrubs` row for the record `p` points to, message `id`'s: key, value.
pub(crate) fn row(p: &Pointer, id: u128) -> ([u8; 16], [u8; 24]) {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&p.segment.to_be_bytes());
    key[8..].copy_from_slice(&p.offset.to_be_bytes());
    let mut value = [0u8; 24];
    value[..4].copy_from_slice(&p.len.to_be_bytes());
    value[4..8].copy_from_slice(&p.crc.to_be_bytes());
    value[8..].copy_from_slice(&id.to_be_bytes());
    (key, value)
}

fn parse(key: &[u8], value: &[u8]) -> Option<(Pointer, u128)> {
    let be8 = |b: &[u8]| <[u8; 8]>::try_from(b).ok().map(u64::from_be_bytes);
    let be4 = |b: &[u8]| <[u8; 4]>::try_from(b).ok().map(u32::from_be_bytes);
    if key.len() != 16 || value.len() != 24 {
        return None;
    }
    let pointer = Pointer {
        segment: be8(&key[..8])?,
        offset: be8(&key[8..])?,
        len: be4(&value[..4])?,
        crc: be4(&value[4..8])?,
    };
    let id = <[u8; 16]>::try_from(&value[8..])
        .ok()
        .map(u128::from_be_bytes)?;
    Some((pointer, id))
}

/// A record due for overwriting: its `scrubs` key, where it lies, and its message.
type Due = ([u8; 16], Pointer, u128);

/// What one scrub did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scrubbed {
    /// Records overwritten (and synced), and their bytes.
    pub records: u64,
    pub bytes: u64,
    /// Records not overwritten because a live message shares them (a fan-out's delivery
    /// still on its way): their bytes go with their segment.
    pub shared_live: u64,
    /// Records whose segment was already deleted (nothing left to overwrite).
    pub gone: u64,
    /// Records still to do: their write or sync failed (retried at the next reclaim), or
    /// they are not yet before the checkpoint.
    pub pending: u64,
}

impl Store {
    /// Overwrites the records `scrubs` names that end at or before `checkpointed` (see the
    /// module doc), and removes their rows once that is synced. Only the apply stage calls
    /// it (after a checkpoint). An I/O failure leaves the rows for the next call; a storage
    /// failure of redb is returned.
    pub fn scrub(&self, checkpointed: Lsn) -> Result<Scrubbed, StoreError> {
        let mut out = Scrubbed::default();
        let mut due: BTreeMap<Lsn, Vec<Due>> = BTreeMap::new();
        let mut bad_rows = Vec::new();
        {
            let txn = self.db.begin_read()?;
            let table = match txn.open_table(SCRUBS) {
                Ok(table) => table,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(out),
                Err(e) => return Err(e.into()),
            };
            for row in table.iter()? {
                let (k, v) = row?;
                let key = k.value();
                let Ok(key16) = <[u8; 16]>::try_from(key) else {
                    bad_rows.push(key.to_vec());
                    continue;
                };
                let p = seal::open(TableId::Scrubs, key, v.value())
                    .ok()
                    .and_then(|value| parse(key, value));
                let Some((p, id)) = p else {
                    tracing::warn!(
                        key = %hex(key),
                        "a scrubs row fails its seal; dropped (its record's bytes stay until its segment goes)"
                    );
                    bad_rows.push(key.to_vec());
                    continue;
                };
                if p.segment + p.offset + u64::from(p.len) > checkpointed {
                    out.pending += 1;
                    continue;
                }
                due.entry(p.segment).or_default().push((key16, p, id));
            }
        }
        if due.is_empty() && bad_rows.is_empty() {
            return Ok(out);
        }
        // Records a live message still points to (a fan-out's other delivery): not to be
        // overwritten. One pass over the live set, only when there is something to scrub.
        let live = self.live_pointers(&due)?;
        let mut done: Vec<Vec<u8>> = bad_rows;
        if let Some(dir) = self.heap.dir() {
            for (segment, rows) in &due {
                let (keep, share): (Vec<&Due>, Vec<_>) = rows
                    .iter()
                    .partition(|(_, p, _)| !live.contains(&(p.segment, p.offset)));
                out.shared_live += share.len() as u64;
                done.extend(share.iter().map(|(k, _, _)| k.to_vec()));
                if keep.is_empty() {
                    continue;
                }
                let name = segment_name(*segment);
                match self.overwrite(dir.as_ref(), &name, &keep) {
                    Ok(Some(bytes)) => {
                        out.records += keep.len() as u64;
                        out.bytes += bytes;
                        done.extend(keep.iter().map(|(k, _, _)| k.to_vec()));
                    }
                    Ok(None) => {
                        out.gone += keep.len() as u64;
                        done.extend(keep.iter().map(|(k, _, _)| k.to_vec()));
                    }
                    Err(e) => {
                        tracing::warn!(
                            segment = %name,
                            records = keep.len(),
                            error = %e,
                            "could not overwrite purged records in a log segment; retried at the next reclaim"
                        );
                        out.pending += keep.len() as u64;
                    }
                }
            }
        } else {
            out.pending += due.values().map(|r| r.len() as u64).sum::<u64>();
        }
        if !done.is_empty() {
            let txn = self.begin_round()?;
            {
                let mut table = txn.open_table(SCRUBS)?;
                for key in &done {
                    table.remove(key.as_slice())?;
                }
            }
            txn.commit()?;
        }
        if out.records > 0 || out.shared_live > 0 {
            tracing::info!(
                records = out.records,
                bytes = out.bytes,
                shared_with_live = out.shared_live,
                segment_gone = out.gone,
                "purged records overwritten in the log"
            );
        }
        Ok(out)
    }

    /// Of the records in `due`, those a live message's row points to. The walk of the
    /// live set is skipped when no segment of `due` holds a live message's record (its
    /// `segments` row counts none), as after most purges of delivered messages.
    fn live_pointers(
        &self,
        due: &BTreeMap<Lsn, Vec<Due>>,
    ) -> Result<HashSet<(Lsn, u64)>, StoreError> {
        let mut out = HashSet::new();
        let holding_live: HashSet<Lsn> = self
            .segment_rows()?
            .into_iter()
            .filter(|(start, row)| row.live > 0 && due.contains_key(start))
            .map(|(start, _)| start)
            .collect();
        if holding_live.is_empty() {
            return Ok(out);
        }
        let wanted: HashSet<(Lsn, u64)> = due
            .values()
            .flatten()
            .filter(|(_, p, _)| holding_live.contains(&p.segment))
            .map(|(_, p, _)| (p.segment, p.offset))
            .collect();
        let txn = self.db.begin_read()?;
        let table = txn.open_table(MESSAGES)?;
        for row in table.iter()? {
            let (k, v) = row?;
            let key = k.value().to_be_bytes();
            let Ok(value) = seal::open(TableId::Messages, &key, v.value()) else {
                continue;
            };
            if let Some(p) = Stored::of(value).ok().and_then(|s| s.pointer())
                && wanted.contains(&(p.segment, p.offset))
            {
                out.insert((p.segment, p.offset));
            }
        }
        Ok(out)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Store {
    /// Overwrites `records` (all in segment `name`) with zeros, recomputes the checksum of
    /// each frame that holds one, writes those frames back and syncs the file. First, the
    /// search index's rows that carry the event's values (`search::event_rows`) are
    /// deleted, durably, from the records still intact: once their bytes are zeros they
    /// could not be computed again. The bytes overwritten, or `None` if the segment is
    /// gone.
    fn overwrite(
        &self,
        dir: &dyn crate::wal::LogDir,
        name: &str,
        records: &[&Due],
    ) -> Result<Option<u64>, StoreError> {
        let mut bytes = match dir.read(name) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut ranges: Vec<(usize, usize, u32, u128)> = records
            .iter()
            .filter_map(|(_, p, id)| {
                let at = usize::try_from(p.offset).ok()?;
                Some((at, at.checked_add(p.len as usize)?, p.crc, *id))
            })
            .collect();
        ranges.sort_unstable();
        // The index rows of the records still as logged.
        let rows: Vec<super::search::Row> = ranges
            .iter()
            .filter_map(|&(from, to, crc, id)| {
                let record = bytes.get(from..to)?;
                (crc32c::crc32c(record) == crc).then(|| super::search::event_rows(id, record))
            })
            .flatten()
            .collect();
        if !rows.is_empty() {
            self.pending.remove(&rows);
            let txn = self.begin_write()?;
            {
                let mut table = txn.open_table(super::search::SEARCH)?;
                for row in &rows {
                    table.remove(row.as_slice())?;
                }
            }
            // Durable (an `Immediate` commit) before the bytes it was computed from go.
            txn.commit()?;
        }
        let Some(last_end) = ranges.iter().map(|r| r.1).max() else {
            return Ok(Some(0));
        };
        // Walk the frames by their lengths up to the last record; note each one that holds
        // a record (a frame's checksum may already fail: a torn earlier overwrite of it).
        let mut frames: Vec<(usize, usize)> = Vec::new();
        let mut at = 0usize;
        let mut next = 0usize;
        let mut overwritten = 0u64;
        while at < last_end && next < ranges.len() {
            let Some(header) = bytes
                .get(at..at + HEADER)
                .and_then(|h| <[u8; HEADER]>::try_from(h).ok())
            else {
                break;
            };
            let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
            let (start, end) = (at + HEADER, at + HEADER + len);
            if len == 0 || end > bytes.len() {
                break;
            }
            let mut touched = false;
            while let Some(&(from, to, crc, _)) = ranges.get(next) {
                if from >= end {
                    break;
                }
                next += 1;
                if from < start || to > end {
                    tracing::warn!(segment = %name, offset = from, "a purged record does not lie inside one frame; left as it is");
                    continue;
                }
                let region = &mut bytes[from..to];
                // The record as logged, or zeros already (an earlier overwrite whose
                // removal of the row did not commit). Anything else is not this record.
                if crc32c::crc32c(region) != crc && region.iter().any(|b| *b != 0) {
                    tracing::warn!(segment = %name, offset = from, "a purged record's bytes are not the ones logged; left as they are");
                    continue;
                }
                region.fill(0);
                overwritten += (to - from) as u64;
                touched = true;
            }
            if touched {
                let len_bytes = [header[0], header[1], header[2], header[3]];
                let crc = crc32c::crc32c_append(crc32c::crc32c(&len_bytes), &bytes[start..end]);
                bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
                frames.push((at, end));
            }
            at = end;
        }
        if next < ranges.len() {
            tracing::warn!(
                segment = %name,
                records = ranges.len() - next,
                "purged records past the segment's whole frames; left as they are"
            );
        }
        if frames.is_empty() {
            return Ok(Some(0));
        }
        let mut file = match dir.open(name, false) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        for (from, to) in frames {
            file.write_at(from as u64, &bytes[from..to])?;
        }
        file.sync_data()?;
        Ok(Some(overwritten))
    }
}
