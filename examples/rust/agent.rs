//! An agent that hands events to hookd and never blocks on delivery.
//!
//! cargo run --example agent -- queue:jobs 100
//! (HOOKD_ADDR, default http://127.0.0.1:7700; the destination is queue:NAME or endpoint:NAME)

use std::time::Duration;

use hookd_client::{Emitter, EmitterConfig, Event};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let to = args.next().unwrap_or_else(|| "queue:jobs".into());
    let count: usize = args.next().unwrap_or_else(|| "10".into()).parse()?;
    let addr = std::env::var("HOOKD_ADDR").unwrap_or_else(|_| "http://127.0.0.1:7700".into());

    // 10,000 events buffered at most; above 8,000 emit() pauses 100 ms; then it refuses.
    let emitter = Emitter::connect_lazy(addr, EmitterConfig::default())?;
    for step in 0..count {
        let payload = format!(r#"{{"step":{step},"status":"done"}}"#);
        let event = match to.split_once(':') {
            Some(("endpoint", name)) => Event::to_endpoint(name, payload),
            Some(("queue", name)) => Event::to_queue(name, payload),
            _ => return Err(format!("{to}: use queue:NAME or endpoint:NAME").into()),
        };
        // Returns at once (or after the throttle pause); never waits for hookd.
        if let Err(e) = emitter.emit(event.event_type("agent.step_finished")).await {
            eprintln!("event {step} not taken: {e}");
        }
    }
    // Before exiting: give the buffer up to 10 s to reach hookd.
    emitter.close(Duration::from_secs(10)).await?;
    let c = emitter.counters();
    println!(
        "sent {} (throttled {}, refused {}, failed {})",
        c.sent, c.throttled, c.refused, c.failed
    );
    Ok(())
}
