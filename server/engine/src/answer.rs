//! How a command's answer goes out: after the log's sync that holds its round, or with
//! the round's failure.

use super::{Completion, Refusal};
use hookd_storage::store::StoreError;

/// Queues an answer to go out once the log's sync holds the round (or, if the round
/// fails, the failure instead). The one rule: every answer waits for the sync, writes and
/// reads alike, so nothing an API caller is told (a Stats count, a lease, an Ack) can be
/// taken back by a crash. The one exception is the metrics scrape (`Command::Gauges`),
/// answered at once: a monitoring read, which must not stall behind a slow fsync and
/// shows counters that already move when a change is decided.
pub(super) fn reply_after<T: Send + 'static>(
    done: &mut Vec<Completion>,
    reply: tokio::sync::oneshot::Sender<Result<T, Refusal>>,
    result: Result<T, Refusal>,
) {
    done.push(Box::new(move |failure| {
        let _ = reply.send(match failure {
            None => result,
            Some(e) => Err(e),
        });
    }));
}

/// Queues a command's answer. On a storage error the reply is queued too, so that
/// `Engine::fail` answers it (with that error) only after marking the engine failed; the
/// error is then passed on to abort the round. No reply is ever dropped unanswered.
pub(super) fn settle<T: Send + 'static>(
    done: &mut Vec<Completion>,
    reply: tokio::sync::oneshot::Sender<Result<T, Refusal>>,
    outcome: Result<Result<T, Refusal>, StoreError>,
) -> Result<(), StoreError> {
    match outcome {
        Ok(result) => {
            reply_after(done, reply, result);
            Ok(())
        }
        Err(e) => {
            // Replaced by the storage error when `fail` runs the completion.
            reply_after(done, reply, Err(Refusal::Unavailable(String::new())));
            Err(e)
        }
    }
}
