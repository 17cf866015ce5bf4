//! hookd's durable half: the write-ahead log, the redb store behind it, the pipeline that
//! carries a round from the log to redb, and the disk's headroom. It knows nothing of the
//! engine that decides what to write.
//!
//! - [`wal`]: log segments of checksummed frames; a round is durable once its frame is
//!   fdatasynced.
//! - [`store`]: the redb tables, their records and encodings, the overlay of rows logged
//!   but not yet applied, reads from any thread, the format version and its migrations.
//! - [`pipeline`]: the log writer and the apply stage.
//! - [`disk`]: free space on the data directory's file system against its reserve.
//! - [`fs`]: a private directory, and a file created whole or not at all.
//!
//! For tests: `store::faults` (injected I/O failures) and `store::power_loss` (a file
//! system that loses what was not synced at a cut), behind no feature: the `hookd` binary
//! never calls them and its linker leaves them out (`.ci/no-test-hooks`).

#![forbid(unsafe_code)]

pub mod disk;
pub mod fs;
pub mod pipeline;
pub mod store;
pub mod wal;
