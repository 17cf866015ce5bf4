//! Fire-and-forget events for agents: [`Emitter::emit`] puts an event in a bounded
//! in-memory buffer and returns; a background task sends the buffer to hookd in
//! `EnqueueBatch` calls and retries what hookd could not take yet.
//!
//! The practice this follows: the buffer holds at most `capacity` events (10,000); above
//! `throttle_at` (8,000), or while hookd's last answer carried a throttle hint, `emit`
//! pauses `throttle_pause` (100 ms) before buffering, so a producer that outruns hookd slows
//! down instead of growing memory; a full buffer refuses the event at once
//! ([`EmitError::Full`]) and counts it. `emit` never waits longer than the pause.
//!
//! Every event gets an idempotency key when it is buffered (unless it has one), kept across
//! retries: an event whose answer was lost (hookd restarted mid-call) is sent again and
//! answered as a duplicate, never stored twice. UNAVAILABLE, RESOURCE_EXHAUSTED,
//! DEADLINE_EXCEEDED, ABORTED and connection failures are retried, after the server's
//! `google.rpc.RetryInfo` delay when it sends one and otherwise with exponential backoff
//! and full jitter; other refusals (a bad event, an unknown endpoint) are final: the event is
//! dropped and counted in `failed`, with the last error kept.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::Code;

use crate::{Api, Event, pb};

/// The buffer's bounds and the sender's pacing. The defaults are the seed's.
#[derive(Debug, Clone)]
pub struct EmitterConfig {
    /// Events held at most (buffered and being sent); beyond, `emit` refuses.
    pub capacity: usize,
    /// Above this many, `emit` pauses `throttle_pause` first.
    pub throttle_at: usize,
    pub throttle_pause: Duration,
    /// Events per EnqueueBatch call (hookd's `max_batch_events` is 1,000 by default).
    pub max_batch: usize,
    /// Backoff of retries without RetryInfo: full jitter over `min(cap, base * 2^n)`.
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// One call's deadline.
    pub call_timeout: Duration,
}

impl Default for EmitterConfig {
    fn default() -> Self {
        Self {
            capacity: 10_000,
            throttle_at: 8_000,
            throttle_pause: Duration::from_millis(100),
            max_batch: 500,
            retry_base: Duration::from_millis(50),
            retry_cap: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
        }
    }
}

/// Why `emit` did not take an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    #[error("the emitter's buffer is full ({capacity} events); the event was not taken")]
    Full { capacity: usize },
    #[error("the emitter is closed")]
    Closed,
}

/// `flush` or `close` ran out of time with events still unsent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{left} events were not yet acknowledged by hookd when the deadline passed")]
pub struct Unflushed {
    pub left: u64,
}

/// The emitter's counters (a snapshot).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Held now: buffered or being sent.
    pub buffered: u64,
    /// Acknowledged by hookd (stored, or found to be a duplicate of a stored event).
    pub sent: u64,
    /// Of `sent`, answered as duplicates (a retry of an event hookd already had).
    pub duplicates: u64,
    /// `emit` calls that paused first.
    pub throttled: u64,
    /// `emit` calls refused because the buffer was full.
    pub refused: u64,
    /// Calls retried (hookd unavailable or over a watermark).
    pub retries: u64,
    /// Events hookd refused for good (dropped; see `last_error`).
    pub failed: u64,
}

/// Sends one batch; the emitter's only contact with the network (tests plug in a fake).
pub trait Transport: Send + 'static {
    fn send(
        &mut self,
        batch: pb::EnqueueBatchRequest,
    ) -> impl Future<Output = Result<pb::EnqueueBatchResponse, tonic::Status>> + Send;
}

impl Transport for Api {
    async fn send(
        &mut self,
        batch: pb::EnqueueBatchRequest,
    ) -> Result<pb::EnqueueBatchResponse, tonic::Status> {
        Ok(self.enqueue_batch(batch).await?.into_inner())
    }
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<pb::EnqueueRequest>,
    /// Taken by the sender, not yet acknowledged.
    sending: usize,
    last_error: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the sender (new events, close).
    wake: Notify,
    /// Wakes `flush` (the buffer drained a bit).
    drained: Notify,
    closed: AtomicBool,
    /// `close` ran out of time: the sender stops at its next step, leaving what it still
    /// holds unsent (counted in `buffered`).
    abandoned: AtomicBool,
    /// Until when (ms since `epoch`) hookd asked producers to slow down.
    hinted_until_ms: AtomicU64,
    sent: AtomicU64,
    duplicates: AtomicU64,
    throttled: AtomicU64,
    refused: AtomicU64,
    retries: AtomicU64,
    failed: AtomicU64,
}

/// Buffers events and sends them to hookd in the background. Cheap to clone; clones share
/// the buffer. Needs a Tokio runtime.
#[derive(Debug, Clone)]
pub struct Emitter {
    shared: Arc<Shared>,
    config: Arc<EmitterConfig>,
    epoch: Instant,
}

impl Emitter {
    /// An emitter over `client` (a lazily connecting channel is fine: events wait in the
    /// buffer until hookd is reachable).
    pub fn new(client: crate::Client, config: EmitterConfig) -> Self {
        Self::with_transport(client.inner, config)
    }

    /// An emitter for `http://host:port` that connects when it first sends, and reconnects
    /// by itself after hookd restarts.
    pub fn connect_lazy(
        addr: impl Into<String>,
        config: EmitterConfig,
    ) -> Result<Self, crate::Error> {
        let channel = crate::endpoint(addr)?.connect_lazy();
        Ok(Self::new(crate::Client::from_channel(channel), config))
    }

    pub fn with_transport(transport: impl Transport, config: EmitterConfig) -> Self {
        let emitter = Self {
            shared: Arc::default(),
            config: Arc::new(config),
            epoch: Instant::now(),
        };
        tokio::spawn(sender(emitter.clone(), transport));
        emitter
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn held(&self) -> usize {
        let s = self.lock();
        s.queue.len() + s.sending
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes an event for delivery to hookd. Returns at once, or after one
    /// `throttle_pause` when the buffer is above `throttle_at` or hookd asked producers to
    /// slow down; refuses it when the buffer is full.
    pub async fn emit(&self, event: Event) -> Result<(), EmitError> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(EmitError::Closed);
        }
        let hinted = self.shared.hinted_until_ms.load(Ordering::Relaxed) > self.now_ms();
        if self.held() >= self.config.throttle_at || hinted {
            self.shared.throttled.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(self.config.throttle_pause).await;
        }
        let request = event.into_request();
        {
            let mut s = self.lock();
            if s.queue.len() + s.sending >= self.config.capacity {
                drop(s);
                self.shared.refused.fetch_add(1, Ordering::Relaxed);
                return Err(EmitError::Full {
                    capacity: self.config.capacity,
                });
            }
            s.queue.push_back(request);
        }
        self.shared.wake.notify_one();
        Ok(())
    }

    pub fn counters(&self) -> Counters {
        let c = &self.shared;
        Counters {
            buffered: self.held() as u64,
            sent: c.sent.load(Ordering::Relaxed),
            duplicates: c.duplicates.load(Ordering::Relaxed),
            throttled: c.throttled.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
        }
    }

    /// The last error hookd answered (a final refusal, or why a retry was needed).
    pub fn last_error(&self) -> Option<String> {
        self.lock().last_error.clone()
    }

    /// Waits until every event taken so far is acknowledged, or `timeout` passes.
    pub async fn flush(&self, timeout: Duration) -> Result<(), Unflushed> {
        let deadline = Instant::now() + timeout;
        loop {
            let drained = self.shared.drained.notified();
            let left = self.held();
            if left == 0 {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                return Err(Unflushed {
                    left: self.held() as u64,
                });
            }
        }
    }

    /// Refuses new events, sends what is buffered (until `timeout`), and stops the sender;
    /// past the deadline what is left stays unsent (the error says how many).
    pub async fn close(&self, timeout: Duration) -> Result<(), Unflushed> {
        self.shared.closed.store(true, Ordering::Release);
        let flushed = self.flush(timeout).await;
        if flushed.is_err() {
            self.shared.abandoned.store(true, Ordering::Release);
        }
        self.shared.wake.notify_one();
        flushed
    }
}

/// Whether a failed call (or item) may succeed later as it is.
fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable
            | Code::ResourceExhausted
            | Code::DeadlineExceeded
            | Code::Aborted
            | Code::Unknown
            | Code::Cancelled
    )
}

/// The server's RetryInfo delay, if it sent one.
fn retry_info(status: &tonic::Status) -> Option<Duration> {
    use tonic_types::StatusExt;
    status.get_details_retry_info()?.retry_delay
}

/// Full jitter: uniform over `0..=min(cap, base * 2^n)`.
fn backoff(config: &EmitterConfig, failures: u32, seed: &mut u64) -> Duration {
    let ceiling = config
        .retry_base
        .saturating_mul(1u32 << failures.min(20))
        .min(config.retry_cap);
    // xorshift: enough to spread retries; no need for a cryptographic source.
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    let frac = (*seed % 10_001) as f64 / 10_000.0;
    ceiling.mul_f64(frac)
}

async fn sender(emitter: Emitter, mut transport: impl Transport) {
    let shared = emitter.shared.clone();
    let config = emitter.config.clone();
    let mut failures = 0u32;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(std::process::id());
    loop {
        // Take a batch (or wait for one, or stop once closed and empty).
        let wake = shared.wake.notified();
        let mut pending: VecDeque<pb::EnqueueRequest> = {
            let mut s = emitter.lock();
            let n = s.queue.len().min(config.max_batch.max(1));
            s.sending = n;
            s.queue.drain(..n).collect()
        };
        if pending.is_empty() {
            shared.drained.notify_waiters();
            if shared.closed.load(Ordering::Acquire) {
                return;
            }
            wake.await;
            continue;
        }
        // After a final refusal of a whole call, events go one per call, so one bad event
        // cannot sink the others.
        let mut alone = false;
        while !pending.is_empty() {
            if shared.abandoned.load(Ordering::Acquire) {
                return;
            }
            let take = if alone { 1 } else { pending.len() };
            let part: Vec<pb::EnqueueRequest> = pending.iter().take(take).cloned().collect();
            let request = pb::EnqueueBatchRequest { events: part };
            let answer = tokio::time::timeout(config.call_timeout, transport.send(request)).await;
            let mut delay = None;
            let mut retry = true;
            match answer {
                Err(_) => set_error(&emitter, "the call timed out".into()),
                Ok(Err(status)) if retryable(status.code()) => {
                    delay = retry_info(&status);
                    set_error(&emitter, status.to_string());
                }
                Ok(Err(status)) => {
                    set_error(&emitter, status.to_string());
                    if take > 1 {
                        alone = true;
                    } else {
                        pending.pop_front();
                        shared.failed.fetch_add(1, Ordering::Relaxed);
                        settle(&emitter, pending.len());
                    }
                    retry = false;
                }
                Ok(Ok(response)) => {
                    let mut again = Vec::new();
                    let (mut ok, mut dup, mut failed) = (0u64, 0u64, 0u64);
                    let sent: Vec<_> = pending.drain(..take).collect();
                    for (event, result) in sent.into_iter().zip(
                        response
                            .results
                            .into_iter()
                            .map(Some)
                            .chain(std::iter::repeat(None)),
                    ) {
                        match result.and_then(|r| r.result) {
                            Some(pb::enqueue_result::Result::Ok(r)) => {
                                ok += 1;
                                dup += u64::from(r.duplicate);
                            }
                            Some(pb::enqueue_result::Result::Error(e))
                                if retryable(Code::from_i32(e.code)) =>
                            {
                                if e.retry_after_ms > 0 {
                                    let d = Duration::from_millis(e.retry_after_ms);
                                    delay = Some(delay.map_or(d, |x: Duration| x.max(d)));
                                }
                                set_error(&emitter, e.message);
                                again.push(event);
                            }
                            Some(pb::enqueue_result::Result::Error(e)) => {
                                failed += 1;
                                set_error(&emitter, e.message);
                            }
                            // No answer for it: send it again (its key makes that safe).
                            None => again.push(event),
                        }
                    }
                    for e in again.into_iter().rev() {
                        pending.push_front(e);
                    }
                    shared.sent.fetch_add(ok, Ordering::Relaxed);
                    shared.duplicates.fetch_add(dup, Ordering::Relaxed);
                    shared.failed.fetch_add(failed, Ordering::Relaxed);
                    settle(&emitter, pending.len());
                    if response.throttle_ms > 0 {
                        // hookd is filling up: producers pause, and so does the sender.
                        let until = emitter.now_ms() + response.throttle_ms;
                        shared.hinted_until_ms.fetch_max(until, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(response.throttle_ms)).await;
                    }
                    retry = delay.is_some() || (!pending.is_empty() && ok == 0);
                    if !retry {
                        failures = 0;
                    }
                }
            }
            if retry && !pending.is_empty() {
                shared.retries.fetch_add(1, Ordering::Relaxed);
                let wait = delay.unwrap_or_else(|| backoff(&config, failures, &mut seed));
                failures = failures.saturating_add(1);
                tokio::time::sleep(wait).await;
            }
        }
    }
}

fn set_error(emitter: &Emitter, e: String) {
    emitter.lock().last_error = Some(e);
}

/// `left` events of the batch are still unacknowledged; wakes `flush`.
fn settle(emitter: &Emitter, left: usize) {
    emitter.lock().sending = left;
    emitter.shared.drained.notify_waiters();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::collections::HashSet;

    /// What the fake hookd answers to each call, in order; `Accept` once the script ends.
    #[derive(Debug, Clone, Copy)]
    enum Answer {
        Accept,
        /// Accept, suggesting this pause.
        Throttle(u64),
        /// The whole call fails with this code, and RetryInfo if `Some`.
        Fail(Code, Option<u64>),
        /// Never answers (the call times out).
        Hang,
        /// Stores the events, then never answers (the answer is lost).
        StoreThenHang,
    }

    /// When a call was made, and its events' keys.
    type Call = (Instant, Vec<String>);

    #[derive(Debug, Clone, Default)]
    struct Fake {
        script: Arc<Mutex<VecDeque<Answer>>>,
        /// Every call's events' keys, and when it was made.
        calls: Arc<Mutex<Vec<Call>>>,
        stored: Arc<Mutex<HashSet<String>>>,
    }

    impl Fake {
        fn scripted(answers: &[Answer]) -> Self {
            let f = Self::default();
            f.script.lock().unwrap().extend(answers.iter().cloned());
            f
        }
    }

    impl Transport for Fake {
        async fn send(
            &mut self,
            batch: pb::EnqueueBatchRequest,
        ) -> Result<pb::EnqueueBatchResponse, tonic::Status> {
            let keys: Vec<String> = batch
                .events
                .iter()
                .map(|e| e.idempotency_key.clone())
                .collect();
            self.calls
                .lock()
                .unwrap()
                .push((Instant::now(), keys.clone()));
            let answer = self
                .script
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(Answer::Accept);
            let throttle_ms = match answer {
                Answer::Accept => 0,
                Answer::Throttle(ms) => ms,
                Answer::Fail(code, retry) => {
                    let mut status = tonic::Status::new(code, "scripted");
                    if let Some(ms) = retry {
                        status = with_retry_info(code, ms);
                    }
                    return Err(status);
                }
                Answer::Hang => std::future::pending().await,
                Answer::StoreThenHang => {
                    self.stored.lock().unwrap().extend(keys.clone());
                    std::future::pending().await
                }
            };
            let mut stored = self.stored.lock().unwrap();
            let results = keys
                .into_iter()
                .map(|k| pb::EnqueueResult {
                    result: Some(pb::enqueue_result::Result::Ok(pb::EnqueueResponse {
                        id: k.clone(),
                        duplicate: !stored.insert(k),
                        throttle_ms,
                        ..Default::default()
                    })),
                })
                .collect();
            Ok(pb::EnqueueBatchResponse {
                results,
                throttle_ms,
            })
        }
    }

    fn with_retry_info(code: Code, ms: u64) -> tonic::Status {
        use tonic_types::{ErrorDetails, StatusExt};
        let details = ErrorDetails::with_retry_info(Some(Duration::from_millis(ms)));
        tonic::Status::with_error_details(code, "scripted", details)
    }

    fn event(i: usize) -> Event {
        Event::to_queue("q", format!("{i}").into_bytes())
    }

    #[tokio::test(start_paused = true)]
    async fn emit_returns_at_once_and_the_sender_batches() {
        let fake = Fake::default();
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        let start = Instant::now();
        for i in 0..1_200 {
            e.emit(event(i)).await.unwrap();
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "emit waited");
        e.flush(Duration::from_secs(1)).await.unwrap();
        let c = e.counters();
        assert_eq!(
            (c.sent, c.buffered, c.throttled, c.refused),
            (1_200, 0, 0, 0)
        );
        let calls = fake.calls.lock().unwrap();
        assert!(
            calls.iter().all(|(_, k)| k.len() <= 500),
            "a batch over max_batch"
        );
        assert!(calls.len() >= 3);
    }

    #[tokio::test(start_paused = true)]
    async fn above_throttle_at_emit_pauses_once_and_a_full_buffer_refuses() {
        // The sender is stuck on a call that never answers, so the buffer only fills.
        let fake = Fake::scripted(&[Answer::Hang]);
        let config = EmitterConfig {
            capacity: 10,
            throttle_at: 8,
            call_timeout: Duration::from_secs(3_600),
            ..EmitterConfig::default()
        };
        let e = Emitter::with_transport(fake, config);
        let mut pauses = Vec::new();
        let mut results = Vec::new();
        for i in 0..12 {
            let t = Instant::now();
            results.push(e.emit(event(i)).await);
            pauses.push(t.elapsed());
            tokio::task::yield_now().await;
        }
        // 0..8 go straight in; 8 and 9 pause 100 ms first; 10 and 11 pause, then are refused.
        assert!(pauses[..8].iter().all(|p| p.is_zero()), "{pauses:?}");
        assert!(
            pauses[8..].iter().all(|p| *p == Duration::from_millis(100)),
            "{pauses:?}"
        );
        assert!(results[..10].iter().all(Result::is_ok));
        assert_eq!(results[10], Err(EmitError::Full { capacity: 10 }));
        let c = e.counters();
        assert_eq!((c.buffered, c.throttled, c.refused), (10, 4, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_honour_retry_info_and_keep_each_events_key() {
        let fake = Fake::scripted(&[
            Answer::Fail(Code::ResourceExhausted, Some(1_500)),
            Answer::Fail(Code::Unavailable, None),
            Answer::Accept,
        ]);
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        for i in 0..3 {
            e.emit(event(i)).await.unwrap();
        }
        e.flush(Duration::from_secs(60)).await.unwrap();
        let calls = fake.calls.lock().unwrap();
        assert_eq!(calls.len(), 3, "{calls:?}");
        // The second try waited exactly the server's RetryInfo delay.
        assert_eq!(calls[1].0 - calls[0].0, Duration::from_millis(1_500));
        // The third waited a jittered backoff, at most the base (50 ms) * 2.
        assert!(calls[2].0 - calls[1].0 <= Duration::from_millis(100));
        // The same keys every time: a retry of a stored event is only a duplicate.
        assert_eq!(calls[0].1, calls[1].1);
        assert_eq!(calls[1].1, calls[2].1);
        assert_eq!(calls[0].1.iter().collect::<HashSet<_>>().len(), 3);
        let c = e.counters();
        assert_eq!((c.sent, c.retries, c.failed), (3, 2, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_whose_answer_is_lost_is_sent_again_and_answered_as_a_duplicate() {
        let fake = Fake::scripted(&[Answer::StoreThenHang]);
        let config = EmitterConfig {
            call_timeout: Duration::from_secs(2),
            ..EmitterConfig::default()
        };
        let e = Emitter::with_transport(fake.clone(), config);
        e.emit(event(1)).await.unwrap();
        e.flush(Duration::from_secs(60)).await.unwrap();
        let c = e.counters();
        assert_eq!((c.sent, c.duplicates, c.retries), (1, 1, 1));
        assert_eq!(fake.stored.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_hint_slows_producers_and_the_sender() {
        let fake = Fake::scripted(&[Answer::Throttle(400)]);
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        e.emit(event(0)).await.unwrap();
        e.flush(Duration::from_secs(5)).await.unwrap();
        // hookd suggested 400 ms: the next emit pauses.
        let t = Instant::now();
        e.emit(event(1)).await.unwrap();
        assert_eq!(t.elapsed(), Duration::from_millis(100));
        assert_eq!(e.counters().throttled, 1);
        e.flush(Duration::from_secs(5)).await.unwrap();
        let calls = fake.calls.lock().unwrap();
        assert!(calls[1].0 - calls[0].0 >= Duration::from_millis(400));
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_refusal_drops_only_the_bad_event_and_close_refuses_new_ones() {
        let fake = Fake::scripted(&[
            Answer::Fail(Code::InvalidArgument, None),
            Answer::Fail(Code::InvalidArgument, None),
        ]);
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        e.emit(event(0)).await.unwrap();
        e.emit(event(1)).await.unwrap();
        e.close(Duration::from_secs(5)).await.unwrap();
        // The batch was refused whole, then each went alone: the first alone was refused
        // too, the second accepted.
        let c = e.counters();
        assert_eq!((c.sent, c.failed), (1, 1));
        assert!(e.last_error().unwrap().contains("scripted"));
        assert_eq!(e.emit(event(2)).await, Err(EmitError::Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn past_closes_deadline_the_sender_stops_and_reports_what_is_left() {
        let fake = Fake::scripted(&[Answer::Fail(Code::Unavailable, Some(1_000)); 100]);
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        for i in 0..3 {
            e.emit(event(i)).await.unwrap();
        }
        assert_eq!(
            e.close(Duration::from_millis(2_500)).await,
            Err(Unflushed { left: 3 })
        );
        let calls = fake.calls.lock().unwrap().len();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            fake.calls.lock().unwrap().len() <= calls + 1,
            "still sending after close"
        );
        assert_eq!(e.counters().buffered, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn flush_reports_what_is_left_at_its_deadline() {
        let fake = Fake::scripted(&[Answer::Fail(Code::Unavailable, Some(10_000))]);
        let e = Emitter::with_transport(fake, EmitterConfig::default());
        for i in 0..5 {
            e.emit(event(i)).await.unwrap();
        }
        assert_eq!(
            e.flush(Duration::from_secs(1)).await,
            Err(Unflushed { left: 5 })
        );
        e.flush(Duration::from_secs(20)).await.unwrap();
    }
}
