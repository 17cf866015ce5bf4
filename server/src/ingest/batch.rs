//! Concurrent inbound webhooks handed to the engine together: each request's message goes
//! on a channel, and one task takes everything waiting there (up to [`MAX_BATCH`]) into a
//! single `Enqueue` command, then answers each request from that command's results.
//!
//! Why: with one command per request, the engine, the log writer and the apply stage do
//! their per-command work (an answer channel, a completion, a cross-thread wake-up of the
//! request's task) once per webhook; measured on this path, storing cost about three
//! times what the HTTP exchange did. A batch is only what already waits: the task never
//! holds a message back to wait for more, so a lone webhook goes to the engine at once.

use tokio::sync::{mpsc, oneshot};

use crate::engine::{EngineHandle, Enqueued, NewMessage, Refusal};

/// Most messages in one command.
pub const MAX_BATCH: usize = 256;

type Item = (NewMessage, oneshot::Sender<Result<Enqueued, Refusal>>);

/// The sending side; cheap to clone.
#[derive(Debug, Clone)]
pub struct Batcher {
    tx: mpsc::Sender<Item>,
}

impl Batcher {
    /// Starts the task that feeds `engine`; it ends when every `Batcher` is dropped. A
    /// command carries at most `max_bytes` of records (a single larger one goes alone), so
    /// a burst is still held to the engine's write-queue bound one share at a time.
    pub fn start(engine: EngineHandle, max_bytes: usize) -> Self {
        let (tx, rx) = mpsc::channel(4 * MAX_BATCH);
        tokio::spawn(run(engine, rx, max_bytes));
        Self { tx }
    }

    /// Stores one message (durable when this returns `Ok`), in a command with whatever
    /// other messages wait at the same moment.
    pub async fn enqueue(&self, message: NewMessage) -> Result<Enqueued, Refusal> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send((message, reply))
            .await
            .map_err(|_| Refusal::Unavailable("hookd is stopping".into()))?;
        answer
            .await
            .map_err(|_| Refusal::Unavailable("the engine has stopped".into()))?
    }
}

async fn run(engine: EngineHandle, mut rx: mpsc::Receiver<Item>, max_bytes: usize) {
    let mut items = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut items, MAX_BATCH).await > 0 {
        let mut chunk: Vec<Item> = Vec::new();
        let mut bytes = 0;
        for item in items.drain(..) {
            let len = item.0.record.len();
            if !chunk.is_empty() && bytes + len > max_bytes {
                send(&engine, std::mem::take(&mut chunk));
                bytes = 0;
            }
            bytes += len;
            chunk.push(item);
        }
        send(&engine, chunk);
    }
}

/// Stores one command's messages and answers each; the next batch gathers meanwhile.
fn send(engine: &EngineHandle, chunk: Vec<Item>) {
    if chunk.is_empty() {
        return;
    }
    let (messages, replies): (Vec<NewMessage>, Vec<_>) = chunk.into_iter().unzip();
    let engine = engine.clone();
    tokio::spawn(async move {
        match engine.enqueue(messages).await {
            Ok(results) => {
                let mut results = results.into_iter();
                for reply in replies {
                    let r = results.next().unwrap_or_else(|| {
                        Err(Refusal::Unavailable("the engine gave no result".into()))
                    });
                    let _ = reply.send(r);
                }
            }
            Err(refusal) => {
                for reply in replies {
                    let _ = reply.send(Err(refusal.clone()));
                }
            }
        }
    });
}
