//! Traffic as a webhook provider sends it (`[ingest]` scenarios): each event a Standard
//! Webhooks-signed `POST /in/{source}` on hookd's ingest listener over HTTP/1.1 keep-alive
//! connections; some posted again with the same delivery id after their 202 (hookd must
//! answer `duplicate` with the first id and store nothing), some signed with the wrong
//! secret (hookd must answer 401 and store nothing).
//!
//! The tally treats a 202 as acknowledged (the event must reach a consumer exactly once)
//! and any definite refusal as rejected (it must never reach one); the consumers' dedup
//! by the payload's sequence number shows a second copy if hookd ever stored one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde::Serialize;

use hookd_core::signing::{Secret, signature_header};

use crate::scenario::Ingest;
use crate::tally::Enqueue;

type Conn = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// What the provider side saw.
#[derive(Debug, Default, Clone, Serialize, PartialEq)]
pub struct InboundCounts {
    pub posted: u64,
    pub accepted: u64,
    pub duplicates_posted: u64,
    /// Answered 202 `duplicate: true` with the first post's id.
    pub duplicates_confirmed: u64,
    /// Answered anything else that stores nothing (429, 503): the provider would resend.
    pub duplicates_refused: u64,
    /// Answered 202 as a new event, or with another id: a second copy stored.
    pub duplicates_wrong: u64,
    pub bad_signatures_posted: u64,
    pub bad_signatures_refused: u64,
    /// Answered 202: a forged event was stored.
    pub bad_signatures_accepted: u64,
    /// Well-signed events refused (429 or 503 under backpressure, or another status).
    pub refused: u64,
    /// Every refusal (forged events' 401s included) by HTTP status.
    pub refused_by_status: std::collections::BTreeMap<u16, u64>,
    /// No answer (connection failed, timeout): fate unknown to the provider.
    pub failed: u64,
}

impl InboundCounts {
    pub fn passed(&self) -> bool {
        self.duplicates_wrong == 0 && self.bad_signatures_accepted == 0
    }
}

#[derive(Debug, Default)]
struct Counters {
    posted: AtomicU64,
    accepted: AtomicU64,
    duplicates_posted: AtomicU64,
    duplicates_confirmed: AtomicU64,
    duplicates_refused: AtomicU64,
    duplicates_wrong: AtomicU64,
    bad_posted: AtomicU64,
    bad_refused: AtomicU64,
    bad_accepted: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    by_status: std::sync::Mutex<std::collections::BTreeMap<u16, u64>>,
}

fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// The provider: where each queue's source is, the secrets, the connections.
#[derive(Debug)]
pub struct Inbound {
    addr: SocketAddr,
    /// Queue name in hookd -> `/in/{source}`.
    paths: HashMap<String, String>,
    secret: [Secret; 1],
    /// Not the sources' secret: what a forger signs with.
    wrong_secret: [Secret; 1],
    settings: Ingest,
    conns: Vec<tokio::sync::Mutex<Option<Conn>>>,
    counters: Counters,
}

/// One post's answer: status, and the 202's id and duplicate flag.
struct Answer {
    status: u16,
    id: Option<String>,
    duplicate: bool,
}

impl Inbound {
    /// `secret`: the sources' `whsec_` secret; `paths`: queue -> path.
    pub fn new(
        addr: SocketAddr,
        secret: &str,
        paths: HashMap<String, String>,
        settings: Ingest,
    ) -> anyhow::Result<Self> {
        let key = STANDARD.decode(secret.trim_start_matches("whsec_"))?;
        let wrong: Vec<u8> = key.iter().map(|b| b ^ 0x5a).collect();
        let wrong_secret = [Secret::parse(&format!("whsec_{}", STANDARD.encode(wrong)))?];
        let secret = [Secret::parse(secret)?];
        Ok(Self {
            addr,
            paths,
            secret,
            wrong_secret,
            settings,
            conns: (0..settings.connections)
                .map(|_| tokio::sync::Mutex::new(None))
                .collect(),
            counters: Counters::default(),
        })
    }

    pub fn counts(&self) -> InboundCounts {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        InboundCounts {
            posted: l(&c.posted),
            accepted: l(&c.accepted),
            duplicates_posted: l(&c.duplicates_posted),
            duplicates_confirmed: l(&c.duplicates_confirmed),
            duplicates_refused: l(&c.duplicates_refused),
            duplicates_wrong: l(&c.duplicates_wrong),
            bad_signatures_posted: l(&c.bad_posted),
            bad_signatures_refused: l(&c.bad_refused),
            bad_signatures_accepted: l(&c.bad_accepted),
            refused: l(&c.refused),
            refused_by_status: c
                .by_status
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            failed: l(&c.failed),
        }
    }

    /// Posts event `id` (its `payload`) to `queue`'s source on connection `index`; what the
    /// tally records. `draw` is two uniform numbers in [0, 1): bad signature, resend.
    pub async fn deliver(
        &self,
        index: u64,
        queue: &str,
        id: &str,
        payload: Vec<u8>,
        draw: (f64, f64),
    ) -> Result<String, Enqueue> {
        let Some(path) = self.paths.get(queue) else {
            return Err(Enqueue::Rejected);
        };
        let bad = draw.0 < self.settings.bad_signature_rate.0;
        let resend = !bad && draw.1 < self.settings.duplicate_rate.0;
        let body = Bytes::from(payload);
        let key = if bad {
            &self.wrong_secret
        } else {
            &self.secret
        };
        let conn = &self.conns[index as usize % self.conns.len()];
        bump(&self.counters.posted);
        if bad {
            bump(&self.counters.bad_posted);
        }
        let first = self.post(conn, path, id, key, body.clone()).await;
        let outcome = match &first {
            None => {
                bump(&self.counters.failed);
                Err(Enqueue::Indeterminate)
            }
            Some(a) if a.status == 202 => match &a.id {
                Some(hookd_id) => {
                    bump(&self.counters.accepted);
                    if bad {
                        bump(&self.counters.bad_accepted);
                    }
                    Ok(hookd_id.clone())
                }
                None => Err(Enqueue::Indeterminate),
            },
            Some(a) => {
                *self
                    .counters
                    .by_status
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(a.status)
                    .or_default() += 1;
                if bad && a.status == 401 {
                    bump(&self.counters.bad_refused);
                } else {
                    bump(&self.counters.refused);
                }
                // Every status hookd's ingest answers besides 202 stores nothing.
                Err(Enqueue::Rejected)
            }
        };
        if resend && let Ok(first_id) = &outcome {
            bump(&self.counters.duplicates_posted);
            match self.post(conn, path, id, key, body).await {
                Some(a) if a.status == 202 => {
                    if a.duplicate && a.id.as_deref() == Some(first_id.as_str()) {
                        bump(&self.counters.duplicates_confirmed);
                    } else {
                        bump(&self.counters.duplicates_wrong);
                    }
                }
                Some(_) => bump(&self.counters.duplicates_refused),
                None => bump(&self.counters.failed),
            }
        }
        outcome
    }

    async fn post(
        &self,
        conn: &tokio::sync::Mutex<Option<Conn>>,
        path: &str,
        id: &str,
        secret: &[Secret],
        body: Bytes,
    ) -> Option<Answer> {
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
        let signature = signature_header(secret, id, ts, &body)?;
        let request = hyper::Request::post(path)
            .header("host", "hookd")
            .header("content-type", "application/octet-stream")
            .header("webhook-id", id)
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", signature)
            .header("x-event-type", "loadtest")
            .body(Full::new(body))
            .ok()?;
        let mut slot = conn.lock().await;
        let attempt = async {
            // A connection the server closed after its last answer (hookd closes one it
            // served at low priority once the client is trusted) is replaced, unfailed.
            let reusable = match slot.as_mut() {
                Some(sender) if !sender.is_closed() => sender.ready().await.is_ok(),
                _ => false,
            };
            if !reusable {
                let tcp = tokio::net::TcpStream::connect(self.addr).await.ok()?;
                tcp.set_nodelay(true).ok()?;
                let (sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                    .await
                    .ok()?;
                tokio::spawn(driver);
                *slot = Some(sender);
            }
            let sender = slot.as_mut()?;
            sender.ready().await.ok()?;
            let response = sender.send_request(request).await.ok()?;
            let status = response.status().as_u16();
            let bytes = response.into_body().collect().await.ok()?.to_bytes();
            let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
            Some(Answer {
                status,
                id: json["id"].as_str().map(str::to_owned),
                duplicate: json["duplicate"].as_bool().unwrap_or(false),
            })
        };
        match tokio::time::timeout(Duration::from_secs(30), attempt).await {
            Ok(Some(a)) => Some(a),
            _ => {
                // The connection's state is unknown: start a new one next time.
                *slot = None;
                None
            }
        }
    }
}
