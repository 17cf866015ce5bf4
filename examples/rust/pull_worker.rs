//! A pull worker: leases events from a queue, handles them, acknowledges them.
//!
//! cargo run --example pull_worker -- jobs 100
//! (HOOKD_ADDR, default http://127.0.0.1:7700; stops after that many events)

use std::time::Duration;

use hookd_client::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let queue = args.next().unwrap_or_else(|| "jobs".into());
    let wanted: usize = args.next().unwrap_or_else(|| "10".into()).parse()?;
    let addr = std::env::var("HOOKD_ADDR").unwrap_or_else(|_| "http://127.0.0.1:7700".into());

    let mut client = Client::connect(addr).await?;
    let mut acked = 0;
    while acked < wanted {
        // Up to 100 at once, each leased for 30 s; wait up to 5 s for the first.
        let leased = client
            .receive(
                &queue,
                100,
                Duration::from_secs(30),
                Some(Duration::from_secs(5)),
            )
            .await?;
        if leased.is_empty() {
            continue;
        }
        for m in &leased {
            // Handle the event here; a failure would be `client.nack(...)` (retried later).
            let _ = (&m.event_type, &m.payload);
        }
        acked += client
            .ack(leased.iter().map(|m| m.lease_id.clone()))
            .await? as usize;
    }
    println!("acked {acked}");
    Ok(())
}
