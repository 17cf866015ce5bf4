//! A push receiver: an HTTP endpoint that accepts hookd's deliveries only when their
//! Standard Webhooks signature verifies (the reference `standardwebhooks` crate).
//!
//! WEBHOOK_SECRET=whsec_... cargo run --example receiver -- 127.0.0.1:9000 100
//! (stops after that many verified deliveries)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use standardwebhooks::Webhook;

struct Receiver {
    webhook: Webhook,
    verified: AtomicUsize,
    wanted: usize,
    done: tokio::sync::Notify,
}

async fn deliver(State(r): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    if r.webhook.verify(&body, &headers).is_err() {
        return StatusCode::UNAUTHORIZED; // not from hookd, or tampered with: hookd retries
    }
    let event_type = headers
        .get("webhook-event-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-");
    println!("{event_type}: {}", String::from_utf8_lossy(&body));
    if r.verified.fetch_add(1, Ordering::SeqCst) + 1 >= r.wanted {
        r.done.notify_one();
    }
    StatusCode::NO_CONTENT // any 2xx completes the message; 429/5xx make hookd retry
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:9000".into());
    let wanted: usize = args.next().unwrap_or_else(|| "10".into()).parse()?;
    let secret = std::env::var("WEBHOOK_SECRET")?;
    let receiver = Arc::new(Receiver {
        webhook: Webhook::new(&secret)?,
        verified: AtomicUsize::new(0),
        wanted,
        done: tokio::sync::Notify::new(),
    });
    let app = axum::Router::new()
        .route("/hooks", axum::routing::post(deliver))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}/hooks", listener.local_addr()?);
    let done = receiver.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { done.done.notified().await })
        .await?;
    println!("verified {}", receiver.verified.load(Ordering::SeqCst));
    Ok(())
}
