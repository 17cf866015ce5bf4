//! JSON payloads without base64. An event's payload is bytes, which proto3's JSON mapping
//! writes as base64; a producer whose payload is JSON gives it as `data` instead (any JSON
//! value), beside `payload`: hookd stores the value's text exactly as sent (numbers,
//! escapes and spacing untouched) as the bytes a receiver gets and signatures cover. On the
//! way out, a message whose content type is JSON (its `content-type` header, or none: push
//! delivery sends `application/json` then) and whose payload parses as JSON also carries it
//! as `data` (GetMessage, Receive), beside the exact `payload`.

use base64::Engine as _;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// The request messages that hold events, and where.
const ENQUEUE: &str = "hookd.v1.EnqueueRequest";
const ENQUEUE_BATCH: &str = "hookd.v1.EnqueueBatchRequest";
/// The answers whose messages get `data`.
const GET_MESSAGE: &str = "hookd.v1.GetMessageResponse";
const RECEIVED: &str = "hookd.v1.ReceivedMessage";
const RECEIVE: &str = "hookd.v1.ReceiveResponse";

/// The body's events' `data`, as the text the client sent.
#[derive(serde::Deserialize)]
struct Event<'a> {
    #[serde(borrow, default)]
    data: Option<&'a RawValue>,
}

#[derive(serde::Deserialize)]
struct Batch<'a> {
    #[serde(borrow, default)]
    events: Vec<Event<'a>>,
}

/// Whether `input` takes events (the only messages with `data`).
pub(super) fn takes_events(input: &str) -> bool {
    input == ENQUEUE || input == ENQUEUE_BATCH
}

/// Replaces each event's `data` in `json` (the body, parsed) with `payload`: the base64 of
/// `data`'s text in `body`. An event with both is refused, naming them.
pub(super) fn inline(
    input: &str,
    body: &[u8],
    json: &mut Map<String, Value>,
) -> Result<(), String> {
    // Cheap: most bodies have no `data` key at all.
    if !body.windows(6).any(|w| w == b"\"data\"") {
        return Ok(());
    }
    match input {
        ENQUEUE => {
            let event: Event<'_> =
                serde_json::from_slice(body).map_err(|e| format!("data: {e}"))?;
            set_payload(json, event.data, "")
        }
        ENQUEUE_BATCH => {
            let batch: Batch<'_> =
                serde_json::from_slice(body).map_err(|e| format!("events: {e}"))?;
            let Some(Value::Array(events)) = json.get_mut("events") else {
                return Ok(());
            };
            for (i, (event, raw)) in events.iter_mut().zip(batch.events).enumerate() {
                if let Value::Object(event) = event {
                    set_payload(event, raw.data, &format!("events[{i}]."))?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn set_payload(
    event: &mut Map<String, Value>,
    raw: Option<&RawValue>,
    at: &str,
) -> Result<(), String> {
    // `"data": null` is as good as no `data` (proto3's JSON mapping reads null so).
    event.remove("data");
    let Some(raw) = raw else {
        return Ok(());
    };
    if event.contains_key("payload") {
        return Err(format!(
            "{at}data: give the payload as payload (base64 bytes) or as data (JSON), not both"
        ));
    }
    let text = raw.get().as_bytes();
    event.insert(
        "payload".into(),
        Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
    );
    Ok(())
}

/// Whether `output`'s JSON gets `data` (see [`decorate`]).
pub(super) fn shows_data(output: &str) -> bool {
    matches!(output, GET_MESSAGE | RECEIVED | RECEIVE)
}

/// Adds `data` beside `payload` to the answer's messages whose content type is JSON and
/// whose payload parses.
pub(crate) fn decorate(output: &str, json: &mut Value) {
    match (output, json) {
        (GET_MESSAGE | RECEIVED, Value::Object(m)) => add_data(m),
        (RECEIVE, Value::Object(m)) => {
            if let Some(Value::Array(messages)) = m.get_mut("messages") {
                for message in messages {
                    if let Value::Object(message) = message {
                        add_data(message);
                    }
                }
            }
        }
        _ => {}
    }
}

fn add_data(message: &mut Map<String, Value>) {
    let Some(Value::String(payload)) = message.get("payload") else {
        return;
    };
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(payload) else {
        return;
    };
    let headers: Vec<(String, String)> = match message.get("headers") {
        Some(Value::Object(h)) => h
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
        _ => Vec::new(),
    };
    if let Some(data) = hookd_core::payload::as_json(&bytes, headers) {
        message.insert("data".into(), data);
    }
}

/// The OpenAPI document's word for `data`: on EnqueueRequest (in), and on
/// GetMessageResponse and ReceivedMessage (out).
pub(super) fn document(components: &mut Map<String, Value>) {
    let input = serde_json::json!({
        "description": "The payload as a JSON value, instead of `payload` (give one, not both): stored as its text exactly as sent (the bytes a receiver gets and signatures cover). Push delivery sends it with content-type application/json unless `headers` says otherwise."
    });
    let output = serde_json::json!({
        "readOnly": true,
        "description": "The payload as JSON, when the message's content type is JSON (its content-type header, or none) and the payload parses; `payload` holds the exact bytes."
    });
    for (schema, data) in [
        ("EnqueueRequest", input),
        ("GetMessageResponse", output.clone()),
        ("ReceivedMessage", output),
    ] {
        if let Some(Value::Object(properties)) = components
            .get_mut(schema)
            .and_then(|s| s.get_mut("properties"))
        {
            properties.insert("data".into(), data);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn inlined(input: &str, body: &str) -> Result<Value, String> {
        let Value::Object(mut json) = serde_json::from_str(body).unwrap() else {
            panic!()
        };
        inline(input, body.as_bytes(), &mut json)?;
        Ok(Value::Object(json))
    }

    fn payload_text(v: &Value) -> String {
        let b = base64::engine::general_purpose::STANDARD
            .decode(v["payload"].as_str().unwrap())
            .unwrap();
        String::from_utf8(b).unwrap()
    }

    #[test]
    fn data_is_stored_as_the_text_sent() {
        let body = r#"{"queue":"q","data": {"id": 123456789012345678901234567890, "x": 1.10, "s": "\u00e9\n"} }"#;
        let v = inlined(ENQUEUE, body).unwrap();
        assert_eq!(
            payload_text(&v),
            r#"{"id": 123456789012345678901234567890, "x": 1.10, "s": "\u00e9\n"}"#
        );
        assert!(v.get("data").is_none());
        let v = inlined(ENQUEUE, r#"{"queue":"q","data":"just a string"}"#).unwrap();
        assert_eq!(payload_text(&v), r#""just a string""#);
    }

    #[test]
    fn batch_events_each_take_data_and_both_is_refused() {
        let body = r#"{"events":[{"queue":"q","data":[1,2]},{"queue":"q","payload":"aGk="},{"queue":"q","data":null}]}"#;
        let v = inlined(ENQUEUE_BATCH, body).unwrap();
        assert_eq!(payload_text(&v["events"][0]), "[1,2]");
        assert_eq!(payload_text(&v["events"][1]), "hi");
        assert!(v["events"][2].get("payload").is_none() && v["events"][2].get("data").is_none());
        let both = r#"{"events":[{"queue":"q"},{"queue":"q","payload":"aGk=","data":{}}]}"#;
        let e = inlined(ENQUEUE_BATCH, both).unwrap_err();
        assert!(e.starts_with("events[1].data: "), "{e}");
        let e = inlined(ENQUEUE, r#"{"queue":"q","payload":"aGk=","data":1}"#).unwrap_err();
        assert!(e.starts_with("data: ") && e.contains("not both"), "{e}");
    }

    #[test]
    fn answers_show_json_payloads_as_data() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let mut v = serde_json::json!({"payload": b64(r#"{"a":1}"#), "headers": {}});
        decorate(GET_MESSAGE, &mut v);
        assert_eq!(v["data"], serde_json::json!({"a": 1}));
        let mut v = serde_json::json!({"messages": [
            {"payload": b64(r#"[true]"#), "headers": {"Content-Type": "application/cloudevents+json"}},
            {"payload": b64(r#"{"a":1}"#), "headers": {"content-type": "text/plain"}},
            {"payload": b64("not json"), "headers": {}},
        ]});
        decorate(RECEIVE, &mut v);
        assert_eq!(v["messages"][0]["data"], serde_json::json!([true]));
        assert!(v["messages"][1].get("data").is_none());
        assert!(v["messages"][2].get("data").is_none());
    }
}
