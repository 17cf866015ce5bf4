//! Replay jobs (issue #53): the registry that holds each tenant's jobs and drives the
//! running ones.
//!
//! A job is a catalog object (`ReplayJob`) with its selection in slices beside it
//! (`ReplaySelection`, written once with the job). The registry serialises every change of
//! a job under the job's own lock; the engine writes each change durably. A running job
//! has one driver task: at the job's pace, it reads the next ids of the selection (and,
//! for delivered ones, their records from the log) and hands them to the engine as one
//! step, which replays them and stores the job's new cursor in the same round. A restart
//! loads the jobs and starts a driver for each running one, from its stored cursor.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hookd_core::clock::Clock;
use hookd_core::ids::MessageId;
use hookd_core::scope::{Kind, ObjectRef, TenantId};
use hookd_engine::{EngineHandle, ReplayStep};
use hookd_storage::store::{
    Kept, ReplayJobRecord, ReplayJobState, ReplaySelectionRecord, Store, StoreError,
};
use prost::Message as _;
use tokio::sync::watch;

use crate::error::ApiError;

/// Jobs a tenant keeps: past this, making one removes its oldest ended job (or is refused
/// while all of them are still running or paused).
pub const MAX_JOBS: usize = 100;

/// The most messages one job selects.
pub const MAX_SELECTED: usize = 100_000;

/// A driver's steps per second at most: a step takes `per_s / STEPS_PER_S` messages.
const STEPS_PER_S: f64 = 10.0;

/// The most messages one step takes (one engine round).
const MAX_STEP: usize = 500;

/// What a new job replays: ids, oldest first, and what they are.
#[derive(Debug, Clone, Default)]
pub struct Selected {
    pub ids: Vec<MessageId>,
    pub bytes: u64,
    /// As the operator asked, for people.
    pub selection: String,
    /// The one destination (encoded) it is limited to, if any.
    pub destination: String,
}

/// A change of a job's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Pause,
    Resume,
    Cancel,
}

#[derive(Debug)]
struct Job {
    object: ObjectRef,
    record: tokio::sync::Mutex<ReplayJobRecord>,
    /// Bumped when a driver is started: an older driver that wakes finds it changed and
    /// ends, so a job never has two.
    driver: AtomicU64,
}

/// Every tenant's replay jobs.
#[derive(Debug)]
pub struct ReplayJobs {
    engine: EngineHandle,
    store: Store,
    clock: Arc<dyn Clock>,
    stop: watch::Receiver<bool>,
    jobs: std::sync::Mutex<BTreeMap<(TenantId, String), Arc<Job>>>,
    /// The newest job's id: a new one is made above it (ids of one millisecond are not
    /// ordered by themselves, and names order the jobs).
    last_id: std::sync::Mutex<u128>,
}

impl ReplayJobs {
    /// Loads the stored jobs and starts a driver for each running one.
    pub fn start(
        engine: EngineHandle,
        store: Store,
        clock: Arc<dyn Clock>,
        stop: watch::Receiver<bool>,
    ) -> Result<Arc<Self>, StoreError> {
        let mut jobs = BTreeMap::new();
        for (object, bytes) in store.every_object_of(Kind::ReplayJob)? {
            let record = ReplayJobRecord::decode(bytes.as_slice())?;
            jobs.insert(
                (object.tenant, object.name.clone()),
                Arc::new(Job {
                    object,
                    record: tokio::sync::Mutex::new(record),
                    driver: AtomicU64::new(0),
                }),
            );
        }
        let last = jobs
            .keys()
            .filter_map(|(_, name)| name.parse::<MessageId>().ok())
            .map(|id| id.0)
            .max()
            .unwrap_or(0);
        let this = Arc::new(Self {
            engine,
            store,
            clock,
            stop,
            jobs: std::sync::Mutex::new(jobs),
            last_id: std::sync::Mutex::new(last),
        });
        let running: Vec<Arc<Job>> = this
            .all()
            .into_iter()
            .filter(|j| {
                j.record
                    .try_lock()
                    .is_ok_and(|r| r.state() == Some(ReplayJobState::Running))
            })
            .collect();
        for job in running {
            tracing::info!(job = %job.object.name, tenant = %job.object.tenant, "replay job resumed after a start");
            this.drive(job);
        }
        Ok(this)
    }

    fn all(&self) -> Vec<Arc<Job>> {
        self.jobs
            .lock()
            .map(|j| j.values().cloned().collect())
            .unwrap_or_default()
    }

    fn job(&self, tenant: TenantId, id: &str) -> Option<Arc<Job>> {
        self.jobs
            .lock()
            .ok()?
            .get(&(tenant, id.to_owned()))
            .cloned()
    }

    /// Makes a running job of `selected`, durable when answered, and starts it.
    pub async fn create(
        self: &Arc<Self>,
        tenant: TenantId,
        selected: Selected,
        per_s: f64,
        created_by: String,
    ) -> Result<ReplayJobRecord, ApiError> {
        self.make_room(tenant).await?;
        let now = self.clock.now_ms();
        let id = self.next_id(now).to_string();
        let slices: Vec<(ObjectRef, Vec<u8>)> = selected
            .ids
            .chunks(ReplaySelectionRecord::IDS)
            .enumerate()
            .map(|(n, ids)| {
                let name = ReplaySelectionRecord::name(&id, n as u32);
                (
                    ObjectRef::new(tenant, Kind::ReplaySelection, name),
                    ReplaySelectionRecord::of(ids).encode_to_vec(),
                )
            })
            .collect();
        let total = selected.ids.len() as u64;
        let mut record = ReplayJobRecord {
            id: id.clone(),
            state: ReplayJobState::Running as u32,
            created_ms: now,
            updated_ms: now,
            per_s,
            total,
            selection: selected.selection,
            bytes: selected.bytes,
            chunks: slices.len() as u32,
            destination: selected.destination,
            created_by,
            ..Default::default()
        };
        if total == 0 {
            record.state = ReplayJobState::Done as u32;
            record.finished_ms = now;
        }
        let object = ObjectRef::new(tenant, Kind::ReplayJob, &id);
        self.engine
            .put_replay_job(object.clone(), record.clone(), slices)
            .await
            .map_err(|r| ApiError::refused(r, "replay job"))?;
        let job = Arc::new(Job {
            object,
            record: tokio::sync::Mutex::new(record.clone()),
            driver: AtomicU64::new(0),
        });
        if let Ok(mut jobs) = self.jobs.lock() {
            jobs.insert((tenant, id.clone()), job.clone());
        }
        tracing::info!(job = %id, %tenant, total, per_s, "replay job made");
        if total > 0 {
            self.drive(job);
        }
        Ok(record)
    }

    fn next_id(&self, now: u64) -> MessageId {
        let mut id = MessageId::generate(now);
        if let Ok(mut last) = self.last_id.lock() {
            if id.0 <= *last {
                id = MessageId(*last + 1);
            }
            *last = id.0;
        }
        id
    }

    /// Keeps at most [`MAX_JOBS`] - 1 jobs of `tenant`'s before one more is made: the
    /// oldest ended ones go.
    async fn make_room(&self, tenant: TenantId) -> Result<(), ApiError> {
        let mut mine: Vec<Arc<Job>> = self
            .all()
            .into_iter()
            .filter(|j| j.object.tenant == tenant)
            .collect();
        if mine.len() < MAX_JOBS {
            return Ok(());
        }
        // Names are UUIDv7s: name order is creation order.
        mine.sort_by(|a, b| a.object.name.cmp(&b.object.name));
        let mut over = mine.len() + 1 - MAX_JOBS;
        for job in mine {
            if over == 0 {
                break;
            }
            let ended = job
                .record
                .lock()
                .await
                .state()
                .is_none_or(ReplayJobState::ended);
            if !ended {
                continue;
            }
            self.engine
                .put_object(job.object.clone(), None)
                .await
                .map_err(|r| ApiError::refused(r, "replay job"))?;
            if let Ok(mut jobs) = self.jobs.lock() {
                jobs.remove(&(tenant, job.object.name.clone()));
            }
            over -= 1;
        }
        if over > 0 {
            return Err(ApiError::ResourceExhausted {
                message: format!(
                    "replay jobs: the tenant has {MAX_JOBS} jobs running or paused; cancel one first"
                ),
                retry_after_ms: None,
            });
        }
        Ok(())
    }

    /// One job of `tenant`'s, as it is now.
    pub async fn get(&self, tenant: TenantId, id: &str) -> Option<ReplayJobRecord> {
        let job = self.job(tenant, id)?;
        let record = job.record.lock().await.clone();
        Some(record)
    }

    /// `tenant`'s jobs, newest first.
    pub async fn list(&self, tenant: TenantId) -> Vec<ReplayJobRecord> {
        let mut out = Vec::new();
        for job in self.all().into_iter().rev() {
            if job.object.tenant == tenant {
                out.push(job.record.lock().await.clone());
            }
        }
        out
    }

    /// Every tenant's jobs that have not ended (Stats, the console).
    pub async fn active(&self) -> Vec<(TenantId, ReplayJobRecord)> {
        let mut out = Vec::new();
        for job in self.all() {
            let record = job.record.lock().await;
            if !record.state().is_none_or(ReplayJobState::ended) {
                out.push((job.object.tenant, record.clone()));
            }
        }
        out
    }

    /// Pauses, resumes or cancels a job; durable when answered.
    pub async fn update(
        self: &Arc<Self>,
        tenant: TenantId,
        id: &str,
        action: Action,
    ) -> Result<ReplayJobRecord, ApiError> {
        let job = self
            .job(tenant, id)
            .ok_or_else(|| ApiError::NotFound(format!("id: no replay job {id:?}")))?;
        let mut record = job.record.lock().await;
        let state = record.state();
        let next = match (action, state) {
            (_, Some(s)) if s.ended() => {
                return Err(ApiError::FailedPrecondition(format!(
                    "id: replay job {id} is {} already",
                    s.as_str()
                )));
            }
            (Action::Pause, Some(ReplayJobState::Running)) => ReplayJobState::Paused,
            (Action::Resume, Some(ReplayJobState::Paused)) => ReplayJobState::Running,
            (Action::Cancel, _) => ReplayJobState::Cancelled,
            // Pausing a paused job, resuming a running one: nothing to do.
            _ => return Ok(record.clone()),
        };
        let mut changed = record.clone();
        let now = self.clock.now_ms();
        changed.state = next as u32;
        changed.updated_ms = now;
        if next.ended() {
            changed.finished_ms = now;
        }
        self.engine
            .put_replay_job(job.object.clone(), changed.clone(), Vec::new())
            .await
            .map_err(|r| ApiError::refused(r, "id"))?;
        *record = changed.clone();
        drop(record);
        tracing::info!(job = %id, %tenant, state = next.as_str(), "replay job changed");
        if next == ReplayJobState::Running {
            self.drive(job);
        }
        Ok(changed)
    }

    /// Starts `job`'s driver (ending any older one at its next wake).
    fn drive(self: &Arc<Self>, job: Arc<Job>) {
        let generation = job.driver.fetch_add(1, Ordering::SeqCst) + 1;
        let this = self.clone();
        tokio::spawn(async move { this.run(job, generation).await });
    }

    async fn run(self: Arc<Self>, job: Arc<Job>, generation: u64) {
        let mut stop = self.stop.clone();
        let mut next = tokio::time::Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                _ = stop.changed() => return,
            }
            if *stop.borrow() || job.driver.load(Ordering::SeqCst) != generation {
                return;
            }
            let mut record = job.record.lock().await;
            if record.state() != Some(ReplayJobState::Running) {
                return;
            }
            let per_s = record.per_s.max(0.001);
            let want = ((per_s / STEPS_PER_S).ceil() as usize).clamp(1, MAX_STEP);
            let items = match self.next_items(&job.object, &record, want).await {
                Ok(items) => items,
                Err(why) => {
                    // The selection cannot be read: the job cannot go on.
                    tracing::error!(job = %record.id, error = %why, "replay job's selection unreadable; cancelled");
                    let mut ended = record.clone();
                    ended.state = ReplayJobState::Cancelled as u32;
                    ended.finished_ms = self.clock.now_ms();
                    ended.last_failure = format!("its selection could not be read: {why}");
                    if self
                        .engine
                        .put_replay_job(job.object.clone(), ended.clone(), Vec::new())
                        .await
                        .is_ok()
                    {
                        *record = ended;
                    }
                    return;
                }
            };
            let taken = items.len();
            let step = ReplayStep {
                object: job.object.clone(),
                job: record.clone(),
                items,
            };
            match self.engine.replay_step(step).await {
                Ok(after) => *record = after,
                Err(hookd_engine::Refusal::NoTenant { .. }) => {
                    // Its tenant was deleted, and the job's objects with it.
                    if let Ok(mut jobs) = self.jobs.lock() {
                        jobs.remove(&(job.object.tenant, job.object.name.clone()));
                    }
                    return;
                }
                Err(refusal) => {
                    // Storage failed or hookd stops: nothing of the step was kept; the same
                    // step is tried again.
                    tracing::warn!(job = %record.id, error = %refusal, "replay job step refused; trying again in 1 s");
                    next = tokio::time::Instant::now() + Duration::from_secs(1);
                    continue;
                }
            }
            if record.state() != Some(ReplayJobState::Running) {
                return;
            }
            drop(record);
            // The pace: `taken` messages take taken / per_s seconds. After a stall (a slow
            // round), the job does not hurry to catch up.
            let now = tokio::time::Instant::now();
            next = (next + Duration::from_secs_f64(taken as f64 / per_s)).max(now);
        }
    }

    /// The next `want` ids of the job's selection (within one slice), each with its stored
    /// record when it was delivered and the log keeps it.
    async fn next_items(
        &self,
        object: &ObjectRef,
        record: &ReplayJobRecord,
        want: usize,
    ) -> Result<Vec<(MessageId, Option<Box<hookd_storage::store::MessageRecord>>)>, String> {
        let per = ReplaySelectionRecord::IDS as u64;
        let n = (record.cursor / per) as u32;
        let from = (record.cursor % per) as usize;
        let slice = ObjectRef::new(
            object.tenant,
            Kind::ReplaySelection,
            ReplaySelectionRecord::name(&record.id, n),
        );
        let store = self.store.clone();
        let left = record.remaining() as usize;
        tokio::task::spawn_blocking(move || {
            let bytes = store
                .object(&slice)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("slice {} is missing", slice.name))?;
            let ids = ReplaySelectionRecord::decode(bytes.as_slice())
                .map_err(|e| e.to_string())?
                .ids();
            let end = ids.len().min(from + want).min(from + left);
            if from >= end {
                return Err(format!(
                    "slice {} holds {} ids, the cursor is at {from}",
                    slice.name,
                    ids.len()
                ));
            }
            let ids = &ids[from..end];
            let kept = store.completed_records(ids).map_err(|e| e.to_string())?;
            Ok(ids
                .iter()
                .zip(kept)
                .map(|(&id, kept)| {
                    let record = match kept {
                        Kept::Record(r) => Some(r),
                        Kept::Expired => None,
                    };
                    (id, record)
                })
                .collect())
        })
        .await
        .map_err(|e| e.to_string())?
    }
}

/// When a job at its pace will be through (0: not running).
pub fn eta_ms(job: &ReplayJobRecord, now_ms: u64) -> u64 {
    if job.state() != Some(ReplayJobState::Running) || job.per_s <= 0.0 {
        return 0;
    }
    now_ms + (job.remaining() as f64 * 1000.0 / job.per_s) as u64
}
