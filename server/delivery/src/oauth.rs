//! OAuth2 client credentials for an endpoint: the access token is fetched from the token
//! endpoint (client_secret_basic), kept, and fetched again shortly before it expires (or
//! after the endpoint answers 401). One fetch at a time per endpoint; attempts that need
//! the token meanwhile wait for it. Neither the secret nor a token is ever logged or put
//! in an attempt's error.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http_body_util::{BodyExt, Full};

use hookd_core::clock::Clock;
use hookd_core::push::OAuth2;

use super::HttpClient;

/// Most bytes of a token response read.
const MAX_TOKEN_RESPONSE: usize = 64 << 10;
/// A token without `expires_in` is kept this long.
const DEFAULT_LIFETIME_MS: u64 = 300_000;
/// Fetched again this long before it expires, at most (half its lifetime if shorter).
const REFRESH_MARGIN_MS: u64 = 60_000;
/// A token is kept at least this long, whatever its `expires_in` says (`0` would make
/// every attempt fetch one); one the endpoint refuses (401) is fetched again anyway.
const MIN_LIFETIME_MS: u64 = 30_000;

/// How long a token is kept, from its `expires_in` (seconds).
fn lifetime_ms(expires_in: Option<u64>) -> u64 {
    expires_in
        .map_or(DEFAULT_LIFETIME_MS, |s| s.saturating_mul(1_000))
        .max(MIN_LIFETIME_MS)
}

/// An attempt's error for a token endpoint's refusal: its status, and the RFC 6749 5.2
/// `error` code when the body has one that is a code (`invalid_client`). Nothing else of
/// the body: an endpoint that echoes its request would put the client's credentials (the
/// Basic header, base64) where read scope, the console and the log show them.
fn error_text(status: u16, body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Refusal {
        error: String,
    }
    let code = serde_json::from_slice::<Refusal>(body)
        .ok()
        .map(|r| r.error)
        .filter(|e| {
            (1..=64).contains(&e.len())
                && e.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        });
    match code {
        Some(code) => format!("HTTP {status}: {code}"),
        None => format!("HTTP {status} (the body is not shown: it may echo the request)"),
    }
}

/// A token and when to fetch the next one.
struct Token {
    /// `Bearer <token>`, marked sensitive.
    header: HeaderValue,
    refresh_at_ms: u64,
}

/// One endpoint's token.
pub struct TokenCache {
    settings: OAuth2,
    clock: Arc<dyn Clock>,
    token: tokio::sync::Mutex<Option<Token>>,
    /// Token requests made (tests and metrics read it).
    fetches: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("token_url", &self.settings.token_url)
            .finish_non_exhaustive()
    }
}

/// Why no token: said in the attempt's error, which is retried.
#[derive(Debug)]
pub struct TokenError(pub String);

impl TokenCache {
    pub fn new(settings: OAuth2, clock: Arc<dyn Clock>) -> Self {
        Self {
            settings,
            clock,
            token: tokio::sync::Mutex::new(None),
            fetches: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Token requests made so far.
    pub fn fetches(&self) -> u64 {
        self.fetches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The `Authorization` value for an attempt: the kept token, or a fresh one.
    pub(crate) async fn authorization(
        &self,
        client: &HttpClient,
        timeout: Duration,
    ) -> Result<HeaderValue, TokenError> {
        let mut token = self.token.lock().await;
        let now = self.clock.now_ms();
        if let Some(t) = token.as_ref()
            && now < t.refresh_at_ms
        {
            return Ok(t.header.clone());
        }
        let fresh = self.fetch(client, timeout).await?;
        let header = fresh.header.clone();
        *token = Some(fresh);
        Ok(header)
    }

    /// The endpoint refused the token (401): the next attempt fetches another.
    pub(crate) async fn forget(&self, used: &HeaderValue) {
        let mut token = self.token.lock().await;
        if token.as_ref().is_some_and(|t| t.header == *used) {
            *token = None;
        }
    }

    async fn fetch(&self, client: &HttpClient, timeout: Duration) -> Result<Token, TokenError> {
        use base64::Engine as _;
        self.fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let s = &self.settings;
        let origin = hookd_core::destination::origin_of(&s.token_url);
        let fail = |why: String| TokenError(format!("OAuth2 token from {origin}: {why}"));
        // RFC 6749 2.3.1: the id and secret form-urlencoded, then HTTP Basic.
        let encode =
            |v: &str| url::form_urlencoded::byte_serialize(v.as_bytes()).collect::<String>();
        let basic = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            encode(&s.client_id),
            encode(&s.client_secret.0)
        ));
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", "client_credentials");
            if !s.scopes.is_empty() {
                form.append_pair("scope", &s.scopes.join(" "));
            }
            if !s.audience.is_empty() {
                form.append_pair("audience", &s.audience);
            }
            form.finish()
        };
        let mut authorization = HeaderValue::from_str(&format!("Basic {basic}"))
            .map_err(|_| fail("the client id or secret cannot be sent".into()))?;
        authorization.set_sensitive(true);
        let request = http::Request::post(s.token_url.as_str())
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ACCEPT, "application/json")
            .header(header::USER_AGENT, super::attempt::USER_AGENT)
            .header(header::AUTHORIZATION, authorization)
            .body(Full::new(Bytes::from(form)))
            .map_err(|e| fail(format!("cannot build the request: {e}")))?;
        let exchange = async {
            let response = client
                .request(request)
                .await
                .map_err(|e| fail(super::attempt::describe(&e)))?;
            let status = response.status();
            let body = http_body_util::Limited::new(response.into_body(), MAX_TOKEN_RESPONSE)
                .collect()
                .await
                .map_err(|e| fail(format!("reading the answer: {e}")))?
                .to_bytes();
            Ok::<_, TokenError>((status, body))
        };
        let (status, body) = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| fail(format!("no answer within {} ms", timeout.as_millis())))??;
        if !status.is_success() {
            return Err(fail(error_text(status.as_u16(), &body)));
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            access_token: String,
            #[serde(default)]
            token_type: String,
            #[serde(default)]
            expires_in: Option<u64>,
        }
        let answer: Answer = serde_json::from_slice(&body)
            .map_err(|e| fail(format!("not a token response: {e}")))?;
        if !answer.token_type.eq_ignore_ascii_case("bearer") {
            return Err(fail(format!(
                "token_type {:?}: only Bearer tokens are sent",
                answer.token_type
            )));
        }
        let mut header = HeaderValue::from_str(&format!("Bearer {}", answer.access_token))
            .map_err(|_| fail("the access token is not a valid header value".into()))?;
        header.set_sensitive(true);
        let lifetime = lifetime_ms(answer.expires_in);
        let margin = REFRESH_MARGIN_MS.min(lifetime / 2);
        Ok(Token {
            header,
            refresh_at_ms: self
                .clock
                .now_ms()
                .saturating_add(lifetime.saturating_sub(margin)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_shows_its_code_and_never_the_body() {
        assert_eq!(
            error_text(
                401,
                br#"{"error":"invalid_client","error_description":"x"}"#
            ),
            "HTTP 401: invalid_client"
        );
        // An endpoint that echoes what it was sent (issue #49, 7).
        let echo = br#"{"error":"Basic YWdlbnQtNzpzM2NyZXQlMjE=","headers":{"authorization":"Basic YWdlbnQtNzpzM2NyZXQlMjE="}}"#;
        let text = error_text(400, echo);
        assert!(!text.contains("YWdlbnQ"), "{text}");
        assert_eq!(
            text,
            "HTTP 400 (the body is not shown: it may echo the request)"
        );
        assert!(!error_text(500, b"authorization: Basic c2VjcmV0").contains("c2VjcmV0"));
    }

    #[test]
    fn a_token_is_kept_at_least_thirty_seconds() {
        assert_eq!(lifetime_ms(Some(0)), MIN_LIFETIME_MS);
        assert_eq!(lifetime_ms(Some(1)), MIN_LIFETIME_MS);
        assert_eq!(lifetime_ms(Some(3_600)), 3_600_000);
        assert_eq!(lifetime_ms(None), DEFAULT_LIFETIME_MS);
    }
}
