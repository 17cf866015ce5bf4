//! An agent that hands events to hookd and never blocks on delivery.
//!
//! cargo run --example agent -- queue:jobs 100 [SECONDS]
//! (HOOKD_ADDR, default http://127.0.0.1:7700; the destination is queue:NAME or endpoint:NAME;
//! SECONDS, default 10, is how long it waits for hookd before exiting)

use std::time::Duration;

use hookd_client::{Emitter, EmitterConfig, Event};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let to = args.next().unwrap_or_else(|| "queue:jobs".into());
    let count: usize = args.next().unwrap_or_else(|| "10".into()).parse()?;
    let wait: f64 = args.next().unwrap_or_else(|| "10".into()).parse()?;
    let addr = std::env::var("HOOKD_ADDR").unwrap_or_else(|_| "http://127.0.0.1:7700".into());

    // 10,000 events buffered at most; emit() never waits: a full buffer refuses at once.
    let emitter = Emitter::connect_lazy(addr, EmitterConfig::default())?;
    for step in 0..count {
        let payload = format!(r#"{{"step":{step},"status":"done"}}"#);
        let event = match to.split_once(':') {
            Some(("endpoint", name)) => Event::to_endpoint(name, payload),
            Some(("queue", name)) => Event::to_queue(name, payload),
            _ => return Err(format!("{to}: use queue:NAME or endpoint:NAME").into()),
        };
        // Counted in `refused` when not taken; the agent goes on either way.
        let _ = emitter.emit(event.event_type("agent.step_finished"));
    }
    // Before exiting: give the buffer up to `wait` s to reach hookd; what is left comes back.
    let left = emitter.close(Duration::from_secs_f64(wait)).await;
    let c = emitter.counters();
    println!(
        "emitted {} sent {} refused {} failed {} unacknowledged {}",
        c.emitted,
        c.sent,
        c.refused,
        c.failed,
        left.len()
    );
    if let Some(e) = emitter.last_error().filter(|_| !left.is_empty()) {
        eprintln!("hookd not reached: {e}");
    }
    Ok(())
}
