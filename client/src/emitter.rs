//! Fire-and-forget events for agents: [`Emitter::emit`] puts an event in a bounded
//! in-memory buffer and returns; a background task sends the buffer to hookd in
//! `EnqueueBatch` calls and retries what hookd could not take yet.
//!
//! `emit` never waits, whatever hookd does (down, slow, refusing): it takes a lock for a
//! few instructions and returns. The buffer holds at most `capacity` events (10,000); a
//! full buffer refuses the event at once with [`EmitError::Full`], counted in `refused`.
//! Above `slow_down_at` (8,000), or while hookd's last answer carried a throttle hint,
//! [`Emitter::slow_down`] says so, for an agent that can produce less; `emit` still takes
//! the event (counted in `pressured`).
//!
//! Every event gets an idempotency key when it is taken (unless it has one), kept across
//! retries: an event whose answer was lost (hookd restarted mid-call) is sent again and
//! answered as a duplicate, never stored twice. UNAVAILABLE, RESOURCE_EXHAUSTED,
//! DEADLINE_EXCEEDED, ABORTED and connection failures are retried, after the server's
//! `google.rpc.RetryInfo` delay when it sends one and otherwise with exponential backoff
//! and full jitter; other refusals (a bad event, an unknown endpoint) are final: the event is
//! dropped and counted in `failed`, with the last error kept.
//!
//! [`Emitter::flush`] and [`Emitter::close`] take a deadline and return the events still
//! unacknowledged at it (empty when all were): the agent keeps them, logs them, or emits
//! them again later (their keys make a resend safe). After `close` gives events back, the
//! sender stops and an answer still in flight for them is ignored, so an event is either
//! acknowledged (`sent`) or given back (`abandoned`), never both. The counters add up:
//! `emitted = sent + failed + abandoned + buffered`.

use std::collections::VecDeque;
use std::future::Future;
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
    /// From this many held, [`Emitter::slow_down`] is true.
    pub slow_down_at: usize,
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
            slow_down_at: 8_000,
            max_batch: 500,
            retry_base: Duration::from_millis(50),
            retry_cap: Duration::from_secs(5),
            call_timeout: Duration::from_secs(10),
        }
    }
}

/// Why `emit` did not take an event (it was not buffered and will not be sent).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    #[error("the emitter's buffer is full ({capacity} events); the event was not taken")]
    Full { capacity: usize },
    #[error("the emitter is closed")]
    Closed,
}

/// The emitter's counters (a consistent snapshot: taken under one lock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Events `emit` took.
    pub emitted: u64,
    /// Held now: buffered or being sent.
    pub buffered: u64,
    /// Acknowledged by hookd (stored, or found to be a duplicate of a stored event).
    pub sent: u64,
    /// Of `sent`, answered as duplicates (a retry of an event hookd already had).
    pub duplicates: u64,
    /// Taken while [`Emitter::slow_down`] was true.
    pub pressured: u64,
    /// `emit` calls refused because the buffer was full (not in `emitted`).
    pub refused: u64,
    /// Calls retried (hookd unavailable or over a watermark).
    pub retries: u64,
    /// Events hookd refused for good (dropped; see `last_error`).
    pub failed: u64,
    /// Events `close` gave back unacknowledged at its deadline.
    pub abandoned: u64,
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
    /// Taken, not yet sent.
    queue: VecDeque<pb::EnqueueRequest>,
    /// Taken by the sender, not yet acknowledged, in order (the front is sent first).
    inflight: VecDeque<pb::EnqueueRequest>,
    closed: bool,
    /// `close` gave the held events back: the sender stops, and ignores an answer still
    /// in flight.
    abandoned: bool,
    /// Until when hookd asked producers to slow down.
    hinted_until: Option<Instant>,
    last_error: Option<String>,
    counters: Counters,
}

impl State {
    fn held(&self) -> usize {
        self.queue.len() + self.inflight.len()
    }

    /// The held events, oldest first.
    fn held_events(&self) -> Vec<Event> {
        self.inflight
            .iter()
            .chain(&self.queue)
            .cloned()
            .map(Event::from_request)
            .collect()
    }
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the sender (new events, close).
    wake: Notify,
    /// Wakes `flush` (events were acknowledged or dropped).
    drained: Notify,
    /// Wakes the sender out of a call or a pause when `close` gives events back.
    abandon: Notify,
}

/// Buffers events and sends them to hookd in the background. Cheap to clone; clones share
/// the buffer. Needs a Tokio runtime to be created; `emit` needs none.
#[derive(Debug, Clone)]
pub struct Emitter {
    shared: Arc<Shared>,
    config: Arc<EmitterConfig>,
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
        };
        tokio::spawn(sender(emitter.clone(), transport));
        emitter
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn pressed(&self, s: &State) -> bool {
        s.held() >= self.config.slow_down_at || s.hinted_until.is_some_and(|t| t > Instant::now())
    }

    /// Takes an event for delivery to hookd, or refuses it; never waits.
    pub fn emit(&self, event: Event) -> Result<(), EmitError> {
        let request = event.into_request();
        {
            let mut s = self.lock();
            if s.closed {
                return Err(EmitError::Closed);
            }
            if s.held() >= self.config.capacity {
                s.counters.refused += 1;
                return Err(EmitError::Full {
                    capacity: self.config.capacity,
                });
            }
            if self.pressed(&s) {
                s.counters.pressured += 1;
            }
            s.counters.emitted += 1;
            s.queue.push_back(request);
        }
        self.shared.wake.notify_one();
        Ok(())
    }

    /// True while the buffer is at or above `slow_down_at` or hookd asked producers to
    /// slow down: an agent that can produce less should. `emit` takes events regardless.
    pub fn slow_down(&self) -> bool {
        self.pressed(&self.lock())
    }

    pub fn counters(&self) -> Counters {
        let s = self.lock();
        Counters {
            buffered: s.held() as u64,
            ..s.counters
        }
    }

    /// The last error hookd answered (a final refusal, or why a retry was needed).
    pub fn last_error(&self) -> Option<String> {
        self.lock().last_error.clone()
    }

    /// Waits until every event taken so far is acknowledged (or dropped as refused), or
    /// `timeout` passes; returns copies of the events still unacknowledged then (empty when
    /// none). They stay in the buffer and the sender goes on with them.
    pub async fn flush(&self, timeout: Duration) -> Vec<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            let drained = self.shared.drained.notified();
            {
                let s = self.lock();
                if s.held() == 0 || s.abandoned {
                    return Vec::new();
                }
            }
            if tokio::time::timeout_at(deadline, drained).await.is_err() {
                return self.lock().held_events();
            }
        }
    }

    /// Refuses new events, sends what is held until `timeout`, and stops the sender.
    /// Returns the events still unacknowledged at the deadline (empty when none): they are
    /// out of the emitter (counted in `abandoned`) and will not be sent by it.
    pub async fn close(&self, timeout: Duration) -> Vec<Event> {
        self.lock().closed = true;
        self.shared.wake.notify_one();
        if self.flush(timeout).await.is_empty() {
            return Vec::new();
        }
        let left = {
            let mut s = self.lock();
            let left = s.held_events();
            s.queue.clear();
            s.inflight.clear();
            s.abandoned = true;
            s.counters.abandoned += left.len() as u64;
            left
        };
        self.shared.abandon.notify_one();
        self.shared.drained.notify_waiters();
        left
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

/// What the sender does after an answer.
#[derive(Debug, Default)]
struct Next {
    /// hookd's throttle hint: pause before the next call.
    pause: Duration,
    /// Retry the front of `inflight` after this (or a backoff when `None`).
    retry: bool,
    delay: Option<Duration>,
}

/// Applies one call's outcome for the first `take` events of `s.inflight`.
fn apply(
    s: &mut State,
    take: usize,
    answer: Result<Result<pb::EnqueueBatchResponse, tonic::Status>, tokio::time::error::Elapsed>,
    alone: &mut bool,
) -> Next {
    let take = take.min(s.inflight.len());
    let mut next = Next::default();
    match answer {
        Err(_) => {
            s.last_error = Some("the call timed out".into());
            next.retry = true;
        }
        Ok(Err(status)) if retryable(status.code()) => {
            next.delay = retry_info(&status);
            s.last_error = Some(status.to_string());
            next.retry = true;
        }
        Ok(Err(status)) => {
            s.last_error = Some(status.to_string());
            // After a final refusal of a whole call, events go one per call, so one bad
            // event cannot sink the others.
            if take > 1 {
                *alone = true;
            } else {
                s.inflight.pop_front();
                s.counters.failed += 1;
            }
        }
        Ok(Ok(response)) => {
            let sent: Vec<_> = s.inflight.drain(..take).collect();
            let mut again = Vec::new();
            let mut ok = 0u64;
            let results = response.results.into_iter().map(Some);
            for (event, result) in sent.into_iter().zip(results.chain(std::iter::repeat(None))) {
                match result.and_then(|r| r.result) {
                    Some(pb::enqueue_result::Result::Ok(r)) => {
                        ok += 1;
                        s.counters.sent += 1;
                        s.counters.duplicates += u64::from(r.duplicate);
                    }
                    Some(pb::enqueue_result::Result::Error(e))
                        if retryable(Code::from_i32(e.code)) =>
                    {
                        if e.retry_after_ms > 0 {
                            let d = Duration::from_millis(e.retry_after_ms);
                            next.delay = Some(next.delay.map_or(d, |x| x.max(d)));
                        }
                        s.last_error = Some(e.message);
                        again.push(event);
                    }
                    Some(pb::enqueue_result::Result::Error(e)) => {
                        s.counters.failed += 1;
                        s.last_error = Some(e.message);
                    }
                    // No answer for it: send it again (its key makes that safe).
                    None => again.push(event),
                }
            }
            for e in again.into_iter().rev() {
                s.inflight.push_front(e);
            }
            if response.throttle_ms > 0 {
                // hookd is filling up: producers are told to slow down, and the sender pauses.
                next.pause = Duration::from_millis(response.throttle_ms);
                let until = Instant::now() + next.pause;
                s.hinted_until = Some(s.hinted_until.map_or(until, |t| t.max(until)));
            }
            next.retry = next.delay.is_some() || (!s.inflight.is_empty() && ok == 0);
        }
    }
    next.retry &= !s.inflight.is_empty();
    next
}

async fn sender(emitter: Emitter, mut transport: impl Transport) {
    let shared = emitter.shared.clone();
    let config = emitter.config.clone();
    let mut failures = 0u32;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64 ^ u64::from(std::process::id());
    let mut alone = false;
    loop {
        // The front of what is in flight (or a new batch), or wait, or stop.
        let wake = shared.wake.notified();
        let batch: Vec<pb::EnqueueRequest> = {
            let mut s = emitter.lock();
            if s.abandoned {
                return;
            }
            if s.inflight.is_empty() {
                alone = false;
                let n = s.queue.len().min(config.max_batch.max(1));
                let taken: Vec<_> = s.queue.drain(..n).collect();
                s.inflight.extend(taken);
            }
            let take = if alone { 1 } else { s.inflight.len() };
            s.inflight.iter().take(take).cloned().collect()
        };
        if batch.is_empty() {
            shared.drained.notify_waiters();
            if emitter.lock().closed {
                return;
            }
            wake.await;
            continue;
        }
        let take = batch.len();
        let call = tokio::time::timeout(
            config.call_timeout,
            transport.send(pb::EnqueueBatchRequest { events: batch }),
        );
        let answer = tokio::select! {
            answer = call => answer,
            () = shared.abandon.notified() => return,
        };
        let next = {
            let mut s = emitter.lock();
            if s.abandoned {
                // `close` gave these events back: their answer is not ours to count.
                return;
            }
            let next = apply(&mut s, take, answer, &mut alone);
            if next.retry {
                s.counters.retries += 1;
            }
            next
        };
        shared.drained.notify_waiters();
        let mut wait = next.pause;
        if next.retry {
            wait += next
                .delay
                .unwrap_or_else(|| backoff(&config, failures, &mut seed));
            failures = failures.saturating_add(1);
        } else {
            failures = 0;
        }
        if !wait.is_zero() {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = shared.abandon.notified() => return,
            }
        }
    }
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
        /// Answers (accepting) after this many ms.
        Late(u64),
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
                Answer::Late(ms) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    0
                }
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

    /// `emitted = sent + failed + abandoned + buffered`, whatever happened.
    fn assert_adds_up(c: Counters) {
        assert_eq!(
            c.emitted,
            c.sent + c.failed + c.abandoned + c.buffered,
            "{c:?}"
        );
    }

    fn keys(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| e.clone().into_request().idempotency_key)
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn emit_returns_at_once_and_the_sender_batches() {
        let fake = Fake::default();
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        let start = Instant::now();
        for i in 0..1_200 {
            e.emit(event(i)).unwrap();
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "emit waited");
        assert!(e.flush(Duration::from_secs(1)).await.is_empty());
        let c = e.counters();
        assert_eq!(
            (c.emitted, c.sent, c.buffered, c.pressured, c.refused),
            (1_200, 1_200, 0, 0, 0)
        );
        assert_adds_up(c);
        let calls = fake.calls.lock().unwrap();
        assert!(
            calls.iter().all(|(_, k)| k.len() <= 500),
            "a batch over max_batch"
        );
        assert!(calls.len() >= 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_buffer_refuses_at_once_and_slow_down_says_so_first() {
        // The sender is stuck on a call that never answers, so the buffer only fills.
        let fake = Fake::scripted(&[Answer::Hang]);
        let config = EmitterConfig {
            capacity: 10,
            slow_down_at: 8,
            call_timeout: Duration::from_secs(3_600),
            ..EmitterConfig::default()
        };
        let e = Emitter::with_transport(fake, config);
        let start = Instant::now();
        let mut results = Vec::new();
        let mut slow = Vec::new();
        for i in 0..12 {
            slow.push(e.slow_down());
            results.push(e.emit(event(i)));
            tokio::task::yield_now().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "emit waited");
        assert_eq!(slow.iter().filter(|s| **s).count(), 4, "{slow:?}");
        assert!(!slow[7] && slow[8]);
        assert!(results[..10].iter().all(Result::is_ok));
        assert_eq!(results[10], Err(EmitError::Full { capacity: 10 }));
        assert_eq!(results[11], Err(EmitError::Full { capacity: 10 }));
        let c = e.counters();
        assert_eq!(
            (c.emitted, c.buffered, c.pressured, c.refused),
            (10, 10, 2, 2)
        );
        assert_adds_up(c);
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
            e.emit(event(i)).unwrap();
        }
        assert!(e.flush(Duration::from_secs(60)).await.is_empty());
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
        assert_adds_up(c);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_whose_answer_is_lost_is_sent_again_and_answered_as_a_duplicate() {
        let fake = Fake::scripted(&[Answer::StoreThenHang]);
        let config = EmitterConfig {
            call_timeout: Duration::from_secs(2),
            ..EmitterConfig::default()
        };
        let e = Emitter::with_transport(fake.clone(), config);
        e.emit(event(1)).unwrap();
        assert!(e.flush(Duration::from_secs(60)).await.is_empty());
        let c = e.counters();
        assert_eq!((c.sent, c.duplicates, c.retries), (1, 1, 1));
        assert_eq!(fake.stored.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_hint_asks_producers_to_slow_down_and_pauses_the_sender() {
        let fake = Fake::scripted(&[Answer::Throttle(400)]);
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        e.emit(event(0)).unwrap();
        assert!(e.flush(Duration::from_secs(5)).await.is_empty());
        // hookd suggested 400 ms: the agent is told, and emit still takes at once.
        assert!(e.slow_down());
        let t = Instant::now();
        e.emit(event(1)).unwrap();
        assert_eq!(t.elapsed(), Duration::ZERO);
        assert_eq!(e.counters().pressured, 1);
        assert!(e.flush(Duration::from_secs(5)).await.is_empty());
        assert!(!e.slow_down());
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
        e.emit(event(0)).unwrap();
        e.emit(event(1)).unwrap();
        assert!(e.close(Duration::from_secs(5)).await.is_empty());
        // The batch was refused whole, then each went alone: the first alone was refused
        // too, the second accepted.
        let c = e.counters();
        assert_eq!((c.sent, c.failed), (1, 1));
        assert_adds_up(c);
        assert!(e.last_error().unwrap().contains("scripted"));
        assert_eq!(e.emit(event(2)), Err(EmitError::Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn past_closes_deadline_the_events_come_back_and_the_sender_stops() {
        let fake = Fake::scripted(&[Answer::Fail(Code::Unavailable, Some(1_000)); 100]);
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        for i in 0..3 {
            e.emit(event(i)).unwrap();
        }
        let left = e.close(Duration::from_millis(2_500)).await;
        let sent_keys = fake.calls.lock().unwrap().first().map(|c| c.1.clone());
        assert_eq!(left.len(), 3);
        // The same events, keys and all: emitting them again later is safe.
        assert_eq!(Some(keys(&left)), sent_keys);
        let calls = fake.calls.lock().unwrap().len();
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(
            fake.calls.lock().unwrap().len(),
            calls,
            "still sending after close"
        );
        let c = e.counters();
        assert_eq!((c.buffered, c.abandoned, c.sent), (0, 3, 0));
        assert_adds_up(c);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_after_close_gave_the_events_back_is_not_counted() {
        let fake = Fake::scripted(&[Answer::Late(5_000)]);
        let e = Emitter::with_transport(fake.clone(), EmitterConfig::default());
        e.emit(event(0)).unwrap();
        e.emit(event(1)).unwrap();
        tokio::task::yield_now().await;
        let left = e.close(Duration::from_secs(1)).await;
        assert_eq!(left.len(), 2);
        tokio::time::sleep(Duration::from_secs(10)).await;
        // Given back means not acknowledged, even if hookd stored them (their keys
        // make emitting them again a duplicate, not a second copy).
        let c = e.counters();
        assert_eq!((c.sent, c.abandoned, c.buffered), (0, 2, 0));
        assert_adds_up(c);
    }

    #[tokio::test(start_paused = true)]
    async fn flush_returns_what_is_unacknowledged_at_its_deadline_and_keeps_sending() {
        let fake = Fake::scripted(&[Answer::Fail(Code::Unavailable, Some(10_000))]);
        let e = Emitter::with_transport(fake, EmitterConfig::default());
        for i in 0..5 {
            e.emit(event(i)).unwrap();
        }
        let left = e.flush(Duration::from_secs(1)).await;
        assert_eq!(left.len(), 5);
        assert_eq!(e.counters().buffered, 5);
        assert!(e.flush(Duration::from_secs(20)).await.is_empty());
        let c = e.counters();
        assert_eq!((c.sent, c.abandoned), (5, 0));
        assert_adds_up(c);
    }
}
