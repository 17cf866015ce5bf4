//! A receiver that was down catches up: it pulls its endpoint's events after the cursor it
//! keeps in a file, with no hookd token (its request signed with the endpoint's whsec_
//! secret), verifies each event as it verifies a delivery (the reference
//! `standardwebhooks` crate), and saves the cursor after each page. The endpoint needs
//! `catch_up: true`.
//!
//! WEBHOOK_SECRET=whsec_... cargo run --example catch_up -- \
//!     http://127.0.0.1:7701 default my-endpoint cursor.txt

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use standardwebhooks::Webhook;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let base = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:7701".into());
    let tenant = args.next().unwrap_or_else(|| "default".into());
    let endpoint = args
        .next()
        .ok_or("usage: catch_up BASE TENANT ENDPOINT CURSOR_FILE")?;
    let cursor_file = args.next().unwrap_or_else(|| "cursor.txt".into());
    let webhook = Webhook::new(&std::env::var("WEBHOOK_SECRET")?)?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut cursor = std::fs::read_to_string(&cursor_file).unwrap_or_default();
    let mut caught = 0;
    loop {
        // Signed as hookd signs a delivery: the path and query as the id, an empty body.
        let path = format!(
            "/catch-up/{tenant}/{endpoint}?after={}&page_size=100",
            cursor.trim()
        );
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
        let request = hyper::Request::get(format!("{base}{path}"))
            .header("webhook-timestamp", now.to_string())
            .header("webhook-signature", webhook.sign(&path, now, b"")?)
            .body(Empty::new())?;
        let response = client.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body)).into());
        }
        let page: serde_json::Value = serde_json::from_slice(&body)?;
        for event in page["events"].as_array().into_iter().flatten() {
            if event["payloadExpired"].as_bool() == Some(true) {
                println!("{}: payload no longer kept", event["id"]);
                continue;
            }
            let payload = base64::engine::general_purpose::STANDARD
                .decode(event["payload"].as_str().unwrap_or_default())?;
            let mut headers = http::HeaderMap::new();
            for (name, value) in event["headers"].as_object().into_iter().flatten() {
                headers.insert(
                    http::HeaderName::from_bytes(name.as_bytes())?,
                    http::HeaderValue::from_str(value.as_str().unwrap_or_default())?,
                );
            }
            // Exactly the check a delivery gets: not from hookd, or altered, is refused.
            webhook.verify(&payload, &headers)?;
            println!(
                "{}: {}",
                event["eventType"].as_str().unwrap_or("-"),
                String::from_utf8_lossy(&payload)
            );
            caught += 1;
        }
        // Saved after each page (written whole, then renamed): a crash re-reads one page.
        cursor = page["nextCursor"].as_str().unwrap_or_default().to_owned();
        let temp = format!("{cursor_file}.tmp");
        std::fs::write(&temp, &cursor)?;
        std::fs::rename(&temp, &cursor_file)?;
        if page["more"].as_bool() != Some(true) {
            break;
        }
    }
    println!("caught up {caught} events; cursor {cursor}");
    Ok(())
}
