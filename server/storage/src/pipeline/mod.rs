//! The storage pipeline behind the engine's single writer: the engine decides a round and
//! hands its record to the log writer ([`syncer`]: append, one fdatasync for every round
//! waiting, then the round's answers), which passes each synced record to the apply stage
//! ([`applier`]: redb brought up to date in `Durability::None` transactions, and
//! checkpointed). Each stage runs on its own thread with a bounded queue before it; in
//! tests both run inline on the engine's thread ([`Syncer::inline`]).

pub mod applier;
pub mod reclaim;
pub mod syncer;

pub use applier::StageConfig;
pub use reclaim::Retention;
pub use syncer::Syncer;
