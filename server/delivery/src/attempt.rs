//! One HTTP attempt: build the request (headers, Standard Webhooks signature), send it
//! through the destination's pool under the total timeout, read at most a capped prefix of
//! the response body, and classify the outcome.
//!
//! Classification (the contract with senders of webhooks): 2xx delivered; network errors,
//! timeouts, 408, 429, 5xx and 3xx (redirects are never followed) retried; other 4xx
//! permanent (410 Gone also disables the endpoint); an address refused by the guard is
//! permanent too, since retrying cannot change the operator's allow-list.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};

use super::connect::refusal;
use super::{Delivery, TargetClient, Verdict};
use hookd_core::outcome::AttemptOutcome;
use hookd_core::push::RetryAfter;
use hookd_core::signing::signature_header;

/// How much of a response body is kept in the attempt's error detail.
pub(crate) const ERROR_EXCERPT_BYTES: usize = 1_024;

pub const USER_AGENT: &str = concat!("hookd/", env!("CARGO_PKG_VERSION"));

/// Sends one attempt. Never panics and always returns: the timeout bounds everything.
/// `trace`: the attempt span's W3C headers (tracing on), over the event's own.
pub async fn send(
    client: &TargetClient,
    d: &Delivery,
    body_cap: usize,
    trace: &[(&'static str, String)],
) -> (Verdict, Duration) {
    let started = Instant::now();
    let timeout = d.target.timeout;
    // The endpoint's OAuth2 token (fetched within the attempt's timeout when there is
    // none to reuse); a token endpoint that fails makes the attempt one to retry.
    let authorization = match &client.oauth {
        None => None,
        Some(cache) => match cache.authorization(&client.http, timeout).await {
            Ok(value) => Some(value),
            Err(e) => {
                let verdict = Verdict::Retry {
                    status: 0,
                    outcome: AttemptOutcome::NetworkError,
                    error: e.0,
                    retry_after: None,
                };
                return (verdict, started.elapsed());
            }
        },
    };
    let request = match build(d, trace, authorization.as_ref()) {
        Ok(r) => r,
        Err(error) => return (Verdict::Permanent { status: 0, error }, started.elapsed()),
    };
    let http = &client.http;
    let exchange = async {
        let response = http.request(request).await?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let location = response
            .headers()
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = read_capped(response.into_body(), body_cap).await;
        Ok::<_, hyper_util::client::legacy::Error>((status, retry_after, location, body))
    };
    let remaining = timeout.saturating_sub(started.elapsed());
    let verdict = match tokio::time::timeout(remaining, exchange).await {
        Err(_) => Verdict::Retry {
            status: 0,
            outcome: AttemptOutcome::Timeout,
            error: format!("no complete response within {} ms", timeout.as_millis()),
            retry_after: None,
        },
        Ok(Err(e)) => match refusal(&e) {
            Some(r) => {
                tracing::debug!(addr = %r.addr, class = r.class, "destination refused by the guard");
                Verdict::Refused {
                    error: r.to_string(),
                }
            }
            None if super::connect::local_shortage(&e) => Verdict::Local {
                error: describe(&e),
            },
            None => Verdict::Retry {
                status: 0,
                outcome: AttemptOutcome::NetworkError,
                error: describe(&e),
                retry_after: None,
            },
        },
        Ok(Ok((status, retry_after, location, body))) => {
            // A token the endpoint no longer takes (revoked, rotated): fetch another.
            if status == StatusCode::UNAUTHORIZED
                && let (Some(cache), Some(used)) = (&client.oauth, &authorization)
            {
                cache.forget(used).await;
            }
            classify(status, retry_after.as_deref(), location.as_deref(), &body)
        }
    };
    (verdict, started.elapsed())
}

fn build(
    d: &Delivery,
    trace: &[(&'static str, String)],
    authorization: Option<&HeaderValue>,
) -> Result<Request<Full<Bytes>>, String> {
    let mut builder = Request::post(d.url.as_str());
    let headers = builder
        .headers_mut()
        .ok_or_else(|| format!("invalid URL {:?}", d.url))?;
    // The event's own headers first, so that hookd's cannot be overridden (validation also
    // refuses the reserved names at enqueue).
    // The event's headers, then the endpoint's static ones over them, then hookd's own
    // over both (validation refuses hookd's names in either).
    for (name, value) in d.headers.iter().chain(&d.target.headers) {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(n, v);
        }
    }
    // The trace context the message carries (its `traceparent`, from the producer) goes
    // as it is; with tracing on, the attempt's span replaces it as the parent.
    for (name, value) in trace {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(n, v);
        }
    }
    // The OAuth2 token over any `authorization` the event or the endpoint's headers hold.
    if let Some(value) = authorization {
        headers.insert(header::AUTHORIZATION, value.clone());
    }
    if !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    headers.insert(header::USER_AGENT, HeaderValue::from_static(USER_AGENT));
    // A replay job's copy is the event the receiver had: the original's id.
    let id = match d.replay_of.is_empty() {
        true => d.id.to_string(),
        false => d.replay_of.clone(),
    };
    if !d.replay_job.is_empty()
        && let Ok(v) = HeaderValue::from_str(&d.replay_job)
    {
        headers.insert(HeaderName::from_static("hookd-replay"), v);
    }
    let timestamp = d.timestamp_s;
    let key = if d.idempotency_key.is_empty() {
        &id
    } else {
        &d.idempotency_key
    };
    if let Ok(v) = HeaderValue::from_str(key) {
        headers.insert(HeaderName::from_static("idempotency-key"), v);
    }
    if let Ok(v) = HeaderValue::from_str(&id) {
        headers.insert(HeaderName::from_static("webhook-id"), v);
    }
    let event = if d.event_id.is_empty() {
        &id
    } else {
        &d.event_id
    };
    if let Ok(v) = HeaderValue::from_str(event) {
        headers.insert(HeaderName::from_static("hookd-event-id"), v);
    }
    if !d.event_type.is_empty()
        && let Ok(v) = HeaderValue::from_str(&d.event_type)
    {
        headers.insert(HeaderName::from_static("webhook-event-type"), v);
    }
    headers.insert(
        HeaderName::from_static("webhook-timestamp"),
        HeaderValue::from(timestamp),
    );
    if let Some(lane) = &d.lane {
        headers.insert(
            HeaderName::from_static("webhook-sequence"),
            HeaderValue::from(lane.seq),
        );
        // Printable ASCII, checked at the edge; a key that is not is left out, never sent
        // mangled.
        if let Ok(v) = HeaderValue::from_str(&lane.key) {
            headers.insert(HeaderName::from_static("hookd-ordering-key"), v);
        }
        if lane.out_of_order {
            headers.insert(
                HeaderName::from_static("hookd-out-of-order"),
                HeaderValue::from_static("true"),
            );
        }
    }
    if let Some(signature) = signature_header(&d.target.secrets, &id, timestamp, &d.payload)
        && let Ok(v) = HeaderValue::from_str(&signature)
    {
        headers.insert(HeaderName::from_static("webhook-signature"), v);
        // Which keys of the endpoint's JWKS (`/jwks/{endpoint}`) the v1a entries used.
        if let Some(ids) = hookd_core::signing::key_id_header(&d.target.secrets)
            && let Ok(v) = HeaderValue::from_str(&ids)
        {
            headers.insert(HeaderName::from_static(hookd_core::jwks::KEY_ID_HEADER), v);
        }
    }
    builder
        .body(Full::new(d.payload.clone()))
        .map_err(|e| format!("cannot build the request to {:?}: {e}", d.url))
}

/// The first `cap` bytes of a body; the rest is left unread (the connection is then not
/// reused, which is the price of never reading an unbounded body).
async fn read_capped(mut body: hyper::body::Incoming, cap: usize) -> BodyRead {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return BodyRead {
                bytes: out,
                truncated: true,
            };
        };
        if let Some(data) = frame.data_ref() {
            let room = cap.saturating_sub(out.len());
            out.extend_from_slice(&data[..data.len().min(room)]);
            if data.len() > room {
                return BodyRead {
                    bytes: out,
                    truncated: true,
                };
            }
        }
    }
    BodyRead {
        bytes: out,
        truncated: false,
    }
}

struct BodyRead {
    bytes: Vec<u8>,
    truncated: bool,
}

fn classify(
    status: StatusCode,
    retry_after: Option<&str>,
    location: Option<&str>,
    body: &BodyRead,
) -> Verdict {
    let code = status.as_u16();
    if status.is_success() {
        return Verdict::Delivered { status: code };
    }
    let mut error = format!("HTTP {code}");
    if status.is_redirection() {
        // The receiver's Location, cut: it is only a hint for the operator.
        let mut location = location.unwrap_or("").to_owned();
        hookd_core::text::bound_text(&mut location, 256);
        error.push_str(&format!(" (redirect to {location:?} not followed)"));
    }
    if !body.bytes.is_empty() {
        let keep = &body.bytes[..body.bytes.len().min(ERROR_EXCERPT_BYTES)];
        error.push_str(": ");
        error.push_str(&String::from_utf8_lossy(keep));
        if body.truncated || body.bytes.len() > keep.len() {
            error.push_str(" [truncated]");
        }
    }
    let retried = status.is_server_error()
        || status.is_redirection()
        || matches!(
            status,
            StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS
        );
    if retried {
        let retry_after = match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                retry_after.and_then(parse_retry_after)
            }
            _ => None,
        };
        Verdict::Retry {
            status: code,
            outcome: AttemptOutcome::HttpError,
            error,
            retry_after,
        }
    } else {
        Verdict::Permanent {
            status: code,
            error,
        }
    }
}

pub fn parse_retry_after(v: &str) -> Option<RetryAfter> {
    let v = v.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(RetryAfter::Seconds(s));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    let ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Some(RetryAfter::At(ms))
}

/// An error and its causes on one line ("a: b: c"), without repeating a cause.
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> BodyRead {
        BodyRead {
            bytes: s.as_bytes().to_vec(),
            truncated: false,
        }
    }

    #[test]
    fn classifies_every_status_class() {
        let v = |code: u16, ra: Option<&str>| {
            classify(StatusCode::from_u16(code).unwrap(), ra, None, &body("x"))
        };
        assert!(matches!(v(200, None), Verdict::Delivered { status: 200 }));
        assert!(matches!(v(204, None), Verdict::Delivered { .. }));
        for code in [500, 502, 503, 408, 429, 301, 302, 307] {
            assert!(matches!(v(code, None), Verdict::Retry { .. }), "{code}");
        }
        for code in [400, 401, 403, 404, 410, 413, 422] {
            assert!(matches!(v(code, None), Verdict::Permanent { .. }), "{code}");
        }
        assert!(matches!(
            v(429, Some("30")),
            Verdict::Retry {
                retry_after: Some(RetryAfter::Seconds(30)),
                ..
            }
        ));
        // Retry-After is honoured on 429 and 503 only.
        assert!(matches!(
            v(500, Some("30")),
            Verdict::Retry {
                retry_after: None,
                ..
            }
        ));
    }

    #[test]
    fn retry_after_takes_seconds_or_an_http_date() {
        assert_eq!(parse_retry_after(" 120 "), Some(RetryAfter::Seconds(120)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(RetryAfter::At(1_445_412_480_000))
        );
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-5"), None);
    }

    #[test]
    fn error_detail_is_truncated() {
        let long = "y".repeat(5_000);
        let Verdict::Retry { error, .. } = classify(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            None,
            &BodyRead {
                bytes: long.into_bytes(),
                truncated: true,
            },
        ) else {
            panic!("500 is retried")
        };
        assert!(error.starts_with("HTTP 500: yyy"));
        assert!(error.ends_with("[truncated]"));
        assert!(error.len() < ERROR_EXCERPT_BYTES + 50);
    }
}
