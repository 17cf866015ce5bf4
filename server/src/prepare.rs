//! One event made into what the engine stores, for every way in (Enqueue and EnqueueBatch,
//! over gRPC and HTTP/JSON, and ingest): a message to its one destination, or a publish
//! routed to its topic's subscribers, whose first delivery carries the others as its
//! fan-out. The ways in differ in how they check an event, not in how it becomes messages
//! (issue #51, point 1: one path; before, ingest and the API each assembled a fan-out).

use std::collections::BTreeMap;

use hookd_core::destination::Destination;
use hookd_core::ids::MessageId;
use hookd_core::scope::TenantId;
use hookd_engine::{Fanout, NewEvent, NewMessage, Subscriber};

/// How a publish finds its subscribers: the tenant's subscriptions to the topic, by the
/// payload and headers their filters read, and the event's identity (`id`, `time`) they
/// may name.
pub type Route<'a> = &'a dyn Fn(
    TenantId,
    &str,
    &[u8],
    &BTreeMap<String, String>,
    hookd_core::filter::EventIdentity<'_>,
) -> Result<Vec<Destination>, String>;

/// Where an event goes.
#[derive(Debug, Clone)]
pub enum Target {
    To(Destination),
    /// A topic of a tenant's: every subscription of the tenant's that takes it.
    Publish {
        tenant: TenantId,
        topic: String,
    },
}

/// What the engine stores for one event.
#[derive(Debug)]
pub struct Prepared {
    /// What the engine stores; `None`: a publish that no subscription takes (nothing is
    /// stored, and the answer says 0 subscribers).
    pub message: Option<NewMessage>,
    /// A publish's event id.
    pub event: Option<MessageId>,
}

/// How the event is to be delivered, beside its record.
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    pub delay_ms: u64,
    /// 0: the destination's default.
    pub max_attempts: u32,
    /// Its FIFO lane at an ordered destination (empty: the destination's one lane).
    pub ordering_key: String,
}

/// `body` (already checked by its way in) as the message(s) the engine stores. A
/// publish's event id is made first: its subscriptions' filters may name it. `Err`: the
/// routing's refusal (a filter's step budget), for the caller to answer as invalid.
pub fn prepare(
    target: Target,
    body: NewEvent,
    now_ms: u64,
    delivery: Delivery,
    route: Route<'_>,
) -> Result<Prepared, String> {
    let Delivery {
        delay_ms,
        max_attempts,
        ordering_key,
    } = delivery;
    let (tenant, topic) = match target {
        Target::To(destination) => {
            let mut message = NewMessage::new(
                MessageId::generate(now_ms),
                destination,
                body,
                delay_ms,
                max_attempts,
            );
            message.ordering_key = ordering_key;
            return Ok(Prepared {
                message: Some(message),
                event: None,
            });
        }
        Target::Publish { tenant, topic } => (tenant, topic),
    };
    let event = MessageId::generate(now_ms);
    let id = event.to_string();
    let identity = hookd_core::filter::EventIdentity {
        id: &id,
        time_ms: now_ms,
    };
    let subscribers = route(tenant, &topic, &body.payload, &body.headers, identity)?;
    let mut subscribers = subscribers.into_iter();
    let Some(first) = subscribers.next() else {
        return Ok(Prepared {
            message: None,
            event: Some(event),
        });
    };
    let mut message = NewMessage::new(
        MessageId::generate(now_ms),
        first,
        body,
        delay_ms,
        max_attempts,
    );
    message.ordering_key = ordering_key;
    message.fanout = Some(Box::new(Fanout {
        event_id: event,
        scope: hookd_core::destination::topic_scope(tenant, &topic),
        also: subscribers
            .map(|d| Subscriber::new(MessageId::generate(now_ms), d))
            .collect(),
    }));
    Ok(Prepared {
        message: Some(message),
        event: Some(event),
    })
}
