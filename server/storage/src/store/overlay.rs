//! The rows the engine wrote that redb does not hold yet.
//!
//! The engine decides a round against redb's last applied snapshot *plus* this overlay:
//! every put and removal of a round lands here (and in the round's log record) at once;
//! the apply stage performs the same changes on redb after the log has synced them, and
//! reports each round applied, whereupon its entries leave the overlay (unless a later
//! round wrote the same key again). So the engine never waits for redb's B-tree work, and
//! it always reads its own writes.
//!
//! Keys are the tables' keys as bytes, in the tables' order (message ids big-endian, so
//! byte order is numeric order), which lets range reads merge the overlay with redb.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use super::rowlog::TableId;

/// One key's latest write: a value, or its removal (`None`), and the round that wrote it.
#[derive(Debug, Clone)]
struct Entry {
    value: Option<Vec<u8>>,
    round: u64,
}

/// One map per table id (ids start at 1; index 0 is unused).
const TABLES: usize = TableId::Catalog as usize + 1;

/// A row as bytes: key and value.
pub(crate) type Row = (Vec<u8>, Vec<u8>);

/// The keys one round wrote.
type RoundKeys = (u64, Vec<(TableId, Vec<u8>)>);

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Overlay {
    tables: [BTreeMap<Vec<u8>, Entry>; TABLES],
    /// The keys each round not yet applied wrote, oldest first.
    rounds: VecDeque<RoundKeys>,
    /// The round writes go to now.
    round: u64,
    /// Bytes of keys and values held (bounds the pipeline's memory).
    bytes: usize,
    /// Records a fan-out's copies share, by the id of the message whose record it is,
    /// with the latest round that needs each: a copy's `messages` entry holds only its
    /// source and destination (as its log record does), so a publish to N subscribers
    /// holds its payload once here, not N times.
    shared: HashMap<u128, (Arc<[u8]>, u64)>,
    /// The rounds the shared records are held for, oldest first.
    shared_rounds: VecDeque<(u64, u128)>,
}

/// What the overlay says about a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen<'a> {
    /// Written with this value.
    Put(&'a [u8]),
    /// Removed.
    Removed,
    /// Not written since redb's snapshot: ask redb.
    Unknown,
}

impl Overlay {
    /// Starts round `round`: later writes belong to it.
    pub fn begin(&mut self, round: u64) {
        self.round = round;
    }

    pub fn put(&mut self, table: TableId, key: &[u8], value: &[u8]) {
        self.write(table, key, Some(value.to_vec()));
    }

    pub fn remove(&mut self, table: TableId, key: &[u8]) {
        self.write(table, key, None);
    }

    fn write(&mut self, table: TableId, key: &[u8], value: Option<Vec<u8>>) {
        let round = self.round;
        self.bytes += key.len() + value.as_ref().map_or(0, Vec::len);
        let map = &mut self.tables[table as usize];
        // A key written again keeps its place (no new copy of the key).
        match map.get_mut(key) {
            Some(entry) => {
                let old = std::mem::replace(entry, Entry { value, round });
                self.bytes -= key.len() + old.value.map_or(0, |v| v.len());
            }
            None => {
                map.insert(key.to_vec(), Entry { value, round });
            }
        }
        match self.rounds.back_mut() {
            Some((r, keys)) if *r == round => keys.push((table, key.to_vec())),
            _ => self.rounds.push_back((round, vec![(table, key.to_vec())])),
        }
    }

    /// Holds `record`, message `source`'s, for the copies the current round makes of it
    /// (see [`Overlay::shared`]), until that round is applied.
    pub fn share(&mut self, source: u128, record: &[u8]) {
        let round = self.round;
        match self.shared.get_mut(&source) {
            Some((_, r)) if *r == round => return,
            Some((_, r)) => *r = round,
            None => {
                self.bytes += record.len();
                self.shared.insert(source, (Arc::from(record), round));
            }
        }
        self.shared_rounds.push_back((round, source));
    }

    /// The record of `source` that copies share, while a round not yet applied needs it.
    pub fn shared(&self, source: u128) -> Option<&[u8]> {
        self.shared.get(&source).map(|(r, _)| &r[..])
    }

    pub fn get(&self, table: TableId, key: &[u8]) -> Seen<'_> {
        match self.tables[table as usize].get(key) {
            Some(Entry { value: Some(v), .. }) => Seen::Put(v),
            Some(Entry { value: None, .. }) => Seen::Removed,
            None => Seen::Unknown,
        }
    }

    /// Every round up to `round` is in redb now: its entries go, unless a later round
    /// wrote the key again.
    pub fn applied(&mut self, round: u64) {
        while let Some((r, _)) = self.rounds.front()
            && *r <= round
        {
            let Some((r, keys)) = self.rounds.pop_front() else {
                break;
            };
            for (table, key) in keys {
                // One search: the entry goes if this round's write is still the latest.
                if let std::collections::btree_map::Entry::Occupied(e) =
                    self.tables[table as usize].entry(key)
                    && e.get().round == r
                {
                    let (key, e) = e.remove_entry();
                    self.bytes -= key.len() + e.value.map_or(0, |v| v.len());
                }
            }
        }
        while let Some(&(r, source)) = self.shared_rounds.front()
            && r <= round
        {
            self.shared_rounds.pop_front();
            if let std::collections::hash_map::Entry::Occupied(e) = self.shared.entry(source)
                && e.get().1 == r
            {
                self.bytes -= e.get().0.len();
                e.remove();
            }
        }
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.rounds.is_empty() && self.shared_rounds.is_empty()
    }

    /// Merges rows of redb's snapshot (`base`, in key order, within `range`) with the
    /// overlay's writes in the same range: up to `limit` rows as the engine sees them.
    pub fn merge<E>(
        &self,
        table: TableId,
        range: (Bound<&[u8]>, Bound<&[u8]>),
        base: impl Iterator<Item = Result<Row, E>>,
        limit: usize,
    ) -> Result<Vec<Row>, E> {
        let mut over = self.tables[table as usize]
            .range::<[u8], _>(range)
            .peekable();
        let mut base = base.peekable();
        let mut out = Vec::new();
        while out.len() < limit {
            let take_over = match (over.peek(), base.peek()) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((ok, _)), Some(Ok((bk, _)))) => ok.as_slice() <= bk.as_slice(),
                (Some(_), Some(Err(_))) => false,
            };
            if take_over {
                let Some((key, entry)) = over.next() else {
                    break;
                };
                // The overlay's write replaces redb's row of the same key.
                if let Some(Ok((bk, _))) = base.peek()
                    && bk == key
                {
                    base.next();
                }
                if let Some(v) = &entry.value {
                    out.push((key.clone(), v.clone()));
                }
            } else {
                match base.next() {
                    Some(Ok(row)) => out.push(row),
                    Some(Err(e)) => return Err(e),
                    None => break,
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_see_the_latest_write_until_it_is_applied() {
        let mut o = Overlay::default();
        o.begin(1);
        o.put(TableId::Schedule, b"a", b"1");
        o.begin(2);
        o.put(TableId::Schedule, b"a", b"2");
        o.remove(TableId::Schedule, b"b");
        assert_eq!(o.get(TableId::Schedule, b"a"), Seen::Put(b"2"));
        assert_eq!(o.get(TableId::Schedule, b"b"), Seen::Removed);
        assert_eq!(o.get(TableId::Messages, b"a"), Seen::Unknown);
        o.applied(1);
        assert_eq!(
            o.get(TableId::Schedule, b"a"),
            Seen::Put(b"2"),
            "round 2 wrote it"
        );
        o.applied(2);
        assert_eq!(o.get(TableId::Schedule, b"a"), Seen::Unknown);
        assert!(o.is_empty());
        assert_eq!(o.bytes(), 0);
    }

    #[test]
    fn a_shared_record_is_held_once_until_the_last_round_that_copies_it_is_applied() {
        let mut o = Overlay::default();
        o.begin(1);
        for _ in 0..1_000 {
            o.share(7, &[1u8; 4_096]);
        }
        assert_eq!(o.bytes(), 4_096, "held once");
        o.begin(2);
        o.share(7, &[1u8; 4_096]);
        o.applied(1);
        assert_eq!(
            o.shared(7),
            Some(&[1u8; 4_096][..]),
            "round 2 still needs it"
        );
        o.applied(2);
        assert_eq!(o.shared(7), None);
        assert_eq!(o.bytes(), 0);
        assert!(o.is_empty());
    }

    #[test]
    fn a_merge_lets_the_overlay_replace_add_and_remove_rows() {
        let mut o = Overlay::default();
        o.begin(1);
        o.put(TableId::Done, b"b", b"new");
        o.put(TableId::Done, b"c", b"added");
        o.remove(TableId::Done, b"d");
        o.put(TableId::Done, b"z", b"out of range");
        let base = [("a", "1"), ("b", "old"), ("d", "gone"), ("e", "5")]
            .map(|(k, v)| Ok::<_, ()>((k.as_bytes().to_vec(), v.as_bytes().to_vec())));
        let range = (Bound::Unbounded, Bound::Excluded(&b"y"[..]));
        let rows = o
            .merge(TableId::Done, range, base.clone().into_iter(), 10)
            .unwrap();
        let rows: Vec<(&[u8], &[u8])> = rows
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        assert_eq!(
            rows,
            [
                (&b"a"[..], &b"1"[..]),
                (b"b", b"new"),
                (b"c", b"added"),
                (b"e", b"5")
            ]
        );
        let two = o.merge(TableId::Done, range, base.into_iter(), 2).unwrap();
        assert_eq!(two.len(), 2);
    }
}
