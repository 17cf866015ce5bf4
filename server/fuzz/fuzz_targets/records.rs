//! What hookd reads back from disk: write-ahead-log segment bytes (frames, checksums, a
//! torn tail) and the records inside them, and every table row encoding. Corrupt bytes
//! must be an error, never a panic.
#![no_main]

use hookd_storage::store::records::{EndpointRecord, HistoryRecord, MessageRecord, ScheduleEntry};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let (records, _bad) = hookd_storage::wal::frames(data);
    for record in records {
        let _ = hookd_storage::store::rowlog::decode(record);
    }
    let _ = hookd_storage::store::rowlog::decode(data);
    let _ = ScheduleEntry::decode(data);
    let _ = MessageRecord::decode(data);
    let _ = EndpointRecord::decode(data);
    let _ = HistoryRecord::decode(data);
});
