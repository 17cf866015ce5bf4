//! The async side's handle to the engine thread, and the owner that stops it.
//!
//! Every call sends a [`Command`] and waits for its answer; a dropped answer channel means
//! the engine stopped (or failed) before answering, which is UNAVAILABLE: nothing was
//! acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::{oneshot, watch};

use super::{Command, Enqueued, Leased, NackOutcome, NewMessage, PutOutcome, Refusal};
use hookd_core::destination::Destination;
use hookd_core::ids::{LeaseId, MessageId};
use hookd_core::scope::{ObjectRef, TenantId};
use hookd_core::stats::StatsSnapshot;
use hookd_storage::store::EndpointRecord;

/// Destinations one engine step reads for a metrics scrape: about 0.5 ms of work, so a
/// scrape of 100,000 destinations is 25 short steps, writes answered between them.
pub const GAUGE_SLICE: usize = 4_096;

/// Destinations one engine step reads for a Stats page (their push figures summarise
/// latency histograms, dearer than a scrape's counts); a page of up to 10,000 is read in
/// steps of this many.
pub const STATS_SLICE: usize = 500;

/// The async side's handle to the engine. Cheap to clone.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    pub(super) tx: mpsc::Sender<Command>,
    /// The tenants as the last committed round left them.
    pub(super) directory: super::SharedDirectory,
    /// True while the engine can write; see [`EngineHandle::health`].
    pub(super) health: watch::Receiver<bool>,
    /// Why the engine stopped writing, once it has.
    pub(super) failure: super::Failure,
    /// Bytes of enqueued records sent to the engine and not yet applied.
    pub(super) queued: Arc<AtomicU64>,
    pub(super) max_queued: u64,
    /// Where refusals for want of room are counted.
    pub(super) metrics: Arc<hookd_metrics::Metrics>,
}

/// Owns the engine thread; `shutdown` finishes the round in progress and joins it.
#[derive(Debug)]
pub struct EngineThread {
    pub(super) handle: EngineHandle,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl EngineThread {
    pub fn shutdown(mut self) {
        let _ = self.handle.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.handle.tx.send(Command::Shutdown);
            let _ = t.join();
        }
    }
}

fn stopped() -> Refusal {
    Refusal::Unavailable("the engine has stopped".into())
}

impl EngineHandle {
    /// Hands a push attempt's outcome to the engine (the dispatcher's way back). If the
    /// engine has stopped, the attempt is simply made again after a restart.
    pub fn report(&self, report: hookd_core::push::AttemptReport) {
        let _ = self.tx.send(Command::Attempted(report));
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, Refusal> {
        let (tx, rx) = oneshot::channel();
        self.tx.send(make(tx)).map_err(|_| stopped())?;
        // A dropped sender means the engine stopped (or failed) before answering: nothing
        // was acknowledged.
        rx.await.map_err(|_| stopped())
    }

    /// Stores the messages in one commit; one result per message, in order. Refused with
    /// RESOURCE_EXHAUSTED while too many bytes already wait for the engine (the disk is
    /// slower than the clients): a bounded queue, not unbounded memory.
    pub async fn enqueue(
        &self,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<Result<Enqueued, Refusal>>, Refusal> {
        let bytes: u64 = messages.iter().map(NewMessage::log_bytes).sum();
        let before = self.queued.fetch_add(bytes, Ordering::AcqRel);
        // A request alone is always admitted (so no payload is too big to ever pass); a
        // request that would take the queue over its limit waits its turn at the client.
        if before > 0 && before + bytes > self.max_queued {
            self.queued.fetch_sub(bytes, Ordering::AcqRel);
            refusal_logged(before, self.max_queued);
            let refusal = Refusal::AtCapacity {
                queued: before,
                limit: self.max_queued,
            };
            if let Some(reason) = refusal.metric_reason() {
                for _ in &messages {
                    self.metrics.refused(reason);
                }
            }
            return Err(refusal);
        }
        // The engine releases the reservation when it takes the command. If the engine has
        // stopped, the count no longer matters.
        self.call(|reply| Command::Enqueue {
            messages,
            bytes,
            reply,
        })
        .await
    }

    /// Leases messages of `queue` (a queue's destination: its tenant and name).
    pub async fn receive(
        &self,
        queue: Destination,
        max: usize,
        visibility_ms: u64,
        wait_ms: u64,
    ) -> Result<Vec<Leased>, Refusal> {
        self.call(|reply| Command::Receive {
            queue,
            max,
            visibility_ms,
            wait_ms,
            reply,
        })
        .await?
    }

    pub async fn ack(&self, tenant: TenantId, leases: Vec<LeaseId>) -> Result<u32, Refusal> {
        self.call(|reply| Command::Ack {
            tenant,
            leases,
            reply,
        })
        .await?
    }

    pub async fn nack(
        &self,
        tenant: TenantId,
        lease: LeaseId,
        delay_ms: u64,
        reason: String,
    ) -> Result<NackOutcome, Refusal> {
        self.call(|reply| Command::Nack {
            tenant,
            lease,
            delay_ms,
            reason,
            reply,
        })
        .await?
    }

    pub async fn replay(
        &self,
        request: super::ReplayRequest,
    ) -> Result<super::ReplayOutcome, Refusal> {
        self.call(|reply| Command::Replay { request, reply })
            .await?
    }

    /// One step of a replay job (see [`super::ReplayStep`]); the job after it.
    pub async fn replay_step(
        &self,
        step: super::ReplayStep,
    ) -> Result<hookd_storage::store::ReplayJobRecord, Refusal> {
        self.call(|reply| Command::ReplayStep {
            step: Box::new(step),
            reply,
        })
        .await?
    }

    /// Stores a replay job (with its selection's slices when it is made); durable when
    /// answered.
    pub async fn put_replay_job(
        &self,
        object: ObjectRef,
        job: hookd_storage::store::ReplayJobRecord,
        selection: Vec<(ObjectRef, Vec<u8>)>,
    ) -> Result<(), Refusal> {
        self.call(|reply| Command::PutReplayJob {
            object,
            job: Box::new(job),
            selection,
            reply,
        })
        .await?
    }

    /// Deletes the dead letters of `tenant`'s among `ids`; how many.
    pub async fn purge(&self, tenant: TenantId, ids: Vec<MessageId>) -> Result<u32, Refusal> {
        self.call(|reply| Command::Purge { tenant, ids, reply })
            .await?
    }

    /// Erases `tenant`'s messages among `ids` that are no longer live (see
    /// [`Command::Erase`]); durable when answered (their bytes are overwritten later: see
    /// [`EngineHandle::wait_scrubbed`]).
    pub async fn erase(
        &self,
        tenant: TenantId,
        ids: Vec<MessageId>,
    ) -> Result<super::Erased, Refusal> {
        self.call(|reply| Command::Erase { tenant, ids, reply })
            .await?
    }

    /// How far the overwriting of purged records is.
    pub async fn scrub_progress(&self) -> Result<super::ScrubProgress, Refusal> {
        self.call(|reply| Command::ScrubProgress { reply }).await?
    }

    /// Waits until every purge answered before this call has its records overwritten and
    /// synced (after the next checkpoint), at most `timeout`; whether they are.
    pub async fn wait_scrubbed(&self, timeout: std::time::Duration) -> Result<bool, Refusal> {
        let target = self.scrub_progress().await?.appended;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let now = self.scrub_progress().await?;
            if now.scrubbed_through >= target {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Pauses (`Some(reason)`) or resumes (`None`) an endpoint; its record after.
    pub async fn pause_endpoint(
        &self,
        tenant: TenantId,
        name: String,
        pause: Option<String>,
    ) -> Result<EndpointRecord, Refusal> {
        self.call(|reply| Command::Pause {
            tenant,
            name,
            pause,
            reply,
        })
        .await?
    }

    /// See [`Command::Reseal`].
    pub async fn reseal(&self, reseal: super::Resealer) -> Result<Result<u32, String>, Refusal> {
        self.call(|reply| Command::Reseal { reseal, reply }).await?
    }

    /// PutEndpoint: the engine makes the record from `def`; durable when answered.
    pub async fn put_endpoint(
        &self,
        tenant: TenantId,
        def: super::EndpointDef,
    ) -> Result<PutOutcome, Refusal> {
        self.call(|reply| Command::PutEndpoint {
            tenant,
            endpoint: Box::new(def.into_record()),
            reply,
        })
        .await?
    }

    /// Makes a catalog object's record durable (`Some`), or its removal (`None`). Whoever
    /// holds the object (the source registry, the subscriptions) decides and serialises
    /// the changes; the engine makes the record and makes it durable.
    pub async fn put_object(
        &self,
        object: ObjectRef,
        record: Option<Vec<u8>>,
    ) -> Result<(), Refusal> {
        self.call(|reply| Command::PutObject {
            object,
            record,
            reply,
        })
        .await?
    }

    /// PutSource: an ingest source's definition (its secrets already sealed); durable when
    /// answered.
    pub async fn put_source(
        &self,
        tenant: TenantId,
        spec: &hookd_core::source::SourceSpec,
    ) -> Result<(), Refusal> {
        let object = ObjectRef::new(tenant, hookd_core::scope::Kind::Source, &spec.name);
        self.put_object(object, Some(json(spec)?)).await
    }

    /// PutSubscription: a subscription's definition; durable when answered.
    pub async fn put_subscription(
        &self,
        tenant: TenantId,
        spec: &hookd_core::subscription::SubscriptionSpec,
    ) -> Result<(), Refusal> {
        let object = ObjectRef::new(tenant, hookd_core::scope::Kind::Subscription, &spec.name);
        self.put_object(object, Some(json(spec)?)).await
    }

    /// Removes a source's or a subscription's record; durable when answered.
    pub async fn delete_object(&self, object: ObjectRef) -> Result<(), Refusal> {
        self.put_object(object, None).await
    }

    /// Where the engine publishes its directory (the authenticator reads tokens there).
    pub fn directory(&self) -> super::SharedDirectory {
        self.directory.clone()
    }

    /// The live tenants, as of the last committed change (a snapshot: cheap to hold).
    pub fn tenants(&self) -> Arc<super::Directory> {
        self.read_directory().clone()
    }

    fn read_directory(&self) -> std::sync::RwLockReadGuard<'_, Arc<super::Directory>> {
        self.directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number of the live tenant named `name`: read under the directory's lock, without
    /// taking a reference to the snapshot (what every call naming a tenant asks).
    pub fn tenant_named(&self, name: &str) -> Option<TenantId> {
        self.read_directory().id_of(name)
    }

    /// CreateTenant (`create`) or UpdateTenant; durable when answered.
    pub async fn put_tenant(
        &self,
        def: super::TenantDef,
        create: bool,
    ) -> Result<super::Tenant, Refusal> {
        self.call(|reply| Command::PutTenant {
            record: Box::new(def.into_record()),
            create,
            reply,
        })
        .await?
    }

    /// CreateToken: stores a tenant's token (its hash); durable when answered. The record
    /// as stored.
    pub async fn put_token(
        &self,
        tenant: TenantId,
        def: super::TokenDef,
    ) -> Result<hookd_storage::store::TokenRecord, Refusal> {
        self.call(|reply| Command::PutToken {
            tenant,
            def: Box::new(def),
            reply,
        })
        .await?
    }

    /// RevokeToken; the next call with it is refused once this is answered.
    pub async fn revoke_token(&self, tenant: TenantId, name: String) -> Result<(), Refusal> {
        self.call(|reply| Command::RevokeToken {
            tenant,
            name,
            reply,
        })
        .await?
    }

    /// DeleteTenant; durable when answered.
    pub async fn delete_tenant(
        &self,
        name: String,
        force: bool,
    ) -> Result<super::TenantDeleted, Refusal> {
        self.call(|reply| Command::DeleteTenant { name, force, reply })
            .await?
    }

    /// PutQueue: a queue's settings; durable when answered. The record as stored, and
    /// whether it was made (not replaced).
    pub async fn put_queue(
        &self,
        tenant: TenantId,
        def: super::QueueDef,
    ) -> Result<(hookd_storage::store::QueueRecord, bool), Refusal> {
        self.call(|reply| Command::PutQueue {
            tenant,
            def: Box::new(def),
            reply,
        })
        .await?
    }

    /// PutEventType: declares (or replaces) a tenant's event type; durable when answered.
    /// The record as stored, and whether it was made (not replaced).
    pub async fn put_event_type(
        &self,
        tenant: TenantId,
        def: super::EventTypeDef,
    ) -> Result<(hookd_storage::store::EventTypeRecord, bool), Refusal> {
        self.call(|reply| Command::PutEventType {
            tenant,
            def: Box::new(def),
            reply,
        })
        .await?
    }

    pub async fn delete_event_type(&self, tenant: TenantId, name: String) -> Result<(), Refusal> {
        self.call(|reply| Command::DeleteEventType {
            tenant,
            name,
            reply,
        })
        .await?
    }

    pub async fn delete_queue(&self, tenant: TenantId, name: String) -> Result<(), Refusal> {
        self.call(|reply| Command::DeleteQueue {
            tenant,
            name,
            reply,
        })
        .await?
    }

    pub async fn delete_endpoint(&self, tenant: TenantId, name: String) -> Result<(), Refusal> {
        self.call(|reply| Command::DeleteEndpoint {
            tenant,
            name,
            reply,
        })
        .await?
    }

    /// The totals and the destinations after key `after` (all from the first with `None`),
    /// at most `limit` of them.
    pub async fn stats(
        &self,
        tenant: Option<TenantId>,
        after: Option<String>,
        limit: usize,
    ) -> Result<StatsSnapshot, Refusal> {
        let mut stats = self
            .call(|reply| Command::Stats {
                tenant,
                after,
                limit: limit.min(STATS_SLICE),
                whole: true,
                reply,
            })
            .await??;
        // The rest of the page, slice by slice (the totals are the first slice's).
        while stats.destinations.len() < limit
            && let Some(after) = stats.next_page.take()
        {
            let more = self
                .call(|reply| Command::Stats {
                    tenant,
                    after: Some(after),
                    limit: (limit - stats.destinations.len()).min(STATS_SLICE),
                    whole: false,
                    reply,
                })
                .await??;
            stats.destinations.extend(more.destinations);
            stats.next_page = more.next_page;
        }
        Ok(stats)
    }

    /// The figures of the destinations with these keys, in order (`None`: one hookd does
    /// not hold), with push destinations' latency by sub-window if `series`.
    pub async fn detail(
        &self,
        keys: Vec<String>,
        series: bool,
    ) -> Result<Vec<Option<hookd_core::stats::DestinationDetail>>, Refusal> {
        self.call(|reply| Command::Detail {
            keys,
            series,
            reply,
        })
        .await?
    }

    /// What a metrics scrape shows: every destination's counts (at most `max` by name,
    /// the rest summed) and the storage figures. No histograms: cheap on the engine thread.
    ///
    /// Read in slices of [`GAUGE_SLICE`] destinations, one engine step each, so writes
    /// queue behind a short step however many destinations there are; the slices are
    /// read one after another, not at one instant (each figure is exact for its slice).
    pub async fn gauges(&self, max: usize) -> Result<hookd_metrics::GaugeSnapshot, Refusal> {
        let mut tally = hookd_metrics::GaugeTally::new(max);
        let mut after = None;
        loop {
            let part = self
                .call(|reply| Command::Gauges {
                    after: after.take(),
                    max,
                    chunk: GAUGE_SLICE,
                    reply,
                })
                .await??;
            tally.add(part.top, part.other);
            match (part.next, part.tail) {
                (Some(next), _) => after = Some(next),
                (None, tail) => {
                    let tail = tail.unwrap_or_default();
                    return Ok(hookd_metrics::GaugeSnapshot {
                        destinations: tally.finish(),
                        storage: tail.storage,
                        healthy: tail.healthy,
                        alerts: tail.alerts,
                        backpressure: tail.backpressure,
                        tenants: hookd_metrics::busiest_tenants(tail.tenants, max),
                    });
                }
            }
        }
    }

    /// Answers once the engine has finished the round this arrives in (a storage failure or
    /// a stopped engine answers at once, with UNAVAILABLE).
    pub async fn ping(&self) -> Result<(), Refusal> {
        self.call(|reply| Command::Ping { reply }).await?
    }

    /// Makes the engine re-read its clock now (tests move an injected clock).
    pub fn tick(&self) {
        let _ = self.tx.send(Command::Tick);
    }

    /// Answers every waiting long poll (empty) and stops new ones from waiting.
    pub fn drain(&self) {
        let _ = self.tx.send(Command::Drain);
    }

    /// Why the engine stopped writing (a storage error, a panic of its thread), once it has.
    pub fn failure(&self) -> Option<String> {
        self.failure.get()
    }

    /// False once a storage error has stopped the engine from writing.
    pub fn is_healthy(&self) -> bool {
        *self.health.borrow()
    }

    /// The engine's health as it changes: true while it can write, false for good once a
    /// storage error (or a panic of its thread) has stopped it. The sender is dropped when
    /// the engine stops, which ends `changed()`.
    pub fn health(&self) -> watch::Receiver<bool> {
        self.health.clone()
    }
}

/// When the last "writes refused" line was logged (seconds since the epoch).
static REFUSAL_LOGGED_S: AtomicU64 = AtomicU64::new(0);

/// One info line when writes are refused for want of room, at most every 10 s (a refusal
/// per request would flood the log exactly when the disk is slow).
fn refusal_logged(queued: u64, limit: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = REFUSAL_LOGGED_S.load(Ordering::Relaxed);
    if now >= last + 10
        && REFUSAL_LOGGED_S
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::info!(
            queued,
            limit,
            "enqueues refused (RESOURCE_EXHAUSTED): the writes waiting for the disk fill max_queued_write_bytes"
        );
    }
}

/// A source's or a subscription's record: its definition as JSON.
fn json<T: serde::Serialize>(spec: &T) -> Result<Vec<u8>, Refusal> {
    serde_json::to_vec(spec)
        .map_err(|e| Refusal::Unavailable(format!("encoding a definition: {e}")))
}
