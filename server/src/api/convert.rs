//! hookd's own values to and from the wire types of `hookd.v1`. The one place that knows
//! both: the engine and the store speak only their own types.

use hookd_proto::v1 as pb;

use hookd_core::breaker::BreakerState;
use hookd_core::destination::Destination;
use hookd_core::stats::{
    DestinationSnapshot, LatencySummary, PushSnapshot, StatsSnapshot, StorageSnapshot,
};
use hookd_engine::{Enqueued, Leased, NackOutcome};
use hookd_storage::store::{AttemptRecord, EndpointRecord, StoredMessage};

use super::view::{MessageView, SecretShown, Shown};

/// The delivery ids one EnqueueBatch answer lists over all its items (each item lists at
/// most the engine's 1,000): about 400 KB of ids, far under any message limit.
pub const MAX_BATCH_ANSWER_IDS: usize = 10_000;

/// An enqueue's answer. A publish lists its first delivery ids, at most `ids_left` (taken
/// from it); `subscribers` is always the whole count, so a client sees that ids were left
/// out when it is larger than `delivery_ids`' length.
pub fn enqueued(e: Enqueued, ids_left: &mut usize) -> pb::EnqueueResponse {
    let listed = e.deliveries.len().min(*ids_left);
    *ids_left -= listed;
    pb::EnqueueResponse {
        id: e.id.to_string(),
        duplicate: e.duplicate,
        throttle_ms: e.throttle_ms,
        subscribers: e.subscribers,
        delivery_ids: e.deliveries[..listed]
            .iter()
            .map(ToString::to_string)
            .collect(),
    }
}

pub fn leased(m: Leased) -> pb::ReceivedMessage {
    pb::ReceivedMessage {
        id: m.id.to_string(),
        lease_id: m.lease.to_string(),
        payload: m.payload,
        event_type: m.event_type,
        headers: m.headers.into_iter().collect(),
        idempotency_key: m.idempotency_key,
        attempt: m.attempt,
        max_attempts: m.max_attempts,
        enqueued_unix_ms: m.enqueued_ms,
        lease_deadline_unix_ms: m.lease_deadline_ms,
        event_id: if m.event_id.is_empty() {
            m.id.to_string()
        } else {
            m.event_id
        },
        ordering_key: m.ordering_key,
        sequence: m.sequence,
        out_of_order: m.out_of_order,
    }
}

pub fn nacked(n: NackOutcome) -> pb::NackResponse {
    pb::NackResponse {
        dead_lettered: n.next_attempt_ms.is_none(),
        next_attempt_unix_ms: n.next_attempt_ms.unwrap_or(0),
    }
}

/// The wire destination of a stored (encoded) one.
fn stored_destination(encoded: &str) -> Option<pb::Destination> {
    Destination::decode(encoded).map(|d| hookd_ctl::wire::destination(&d))
}

/// An endpoint as answers show it: secrets as summaries only (`clear` holds them opened,
/// in order; with `reveal`, they are returned too).
pub fn endpoint(e: EndpointRecord, clear: &[String], reveal: bool) -> pb::Endpoint {
    let secret_summaries = clear
        .iter()
        .map(|s| {
            let shown = SecretShown::of(s);
            pb::SecretSummary {
                prefix: shown.prefix,
                fingerprint: shown.fingerprint,
                public_key: shown.public_key,
            }
        })
        .collect();
    pb::Endpoint {
        secret_summaries,
        name: e.name,
        url: e.url,
        description: e.description,
        max_attempts: e.max_attempts,
        retry_base_ms: e.retry_base_ms,
        retry_cap_ms: e.retry_cap_ms,
        disabled: e.disabled,
        created_unix_ms: e.created_ms,
        updated_unix_ms: e.updated_ms,
        secrets: if reveal { clear.to_vec() } else { Vec::new() },
        connect_timeout_ms: e.connect_timeout_ms,
        timeout_ms: e.timeout_ms,
        max_in_flight: e.max_in_flight,
        rate_limit_per_s: e.rate_limit_per_s,
        rate_limit_burst: e.rate_limit_burst,
        disabled_reason: e.disabled_reason,
        disabled_unix_ms: e.disabled_ms,
        paused: e.paused,
        paused_reason: e.paused_reason,
        paused_unix_ms: e.paused_ms,
        // Values may be credentials: shown only with reveal_secrets, like the secrets.
        headers: e
            .headers
            .into_iter()
            .map(|(name, value)| (name, if reveal { value } else { "…".to_owned() }))
            .collect(),
        proxy_url: if reveal {
            e.proxy_url
        } else {
            shown_proxy(&e.proxy_url)
        },
        client_certificate_summary: certificate_summary(&e.client_certificate_pem),
        client_certificate_pem: e.client_certificate_pem,
        // Opened by the view (`HookdService::view`); shown only with reveal_secrets.
        client_key_pem: if reveal {
            e.client_key_pem
        } else {
            String::new()
        },
        oauth2: e.oauth2.map(|o| pb::OAuth2 {
            token_url: o.token_url,
            client_id: o.client_id,
            client_secret: if reveal {
                o.client_secret
            } else {
                String::new()
            },
            scopes: o.scopes,
            audience: o.audience,
        }),
        fifo: i32::try_from(e.fifo).unwrap_or(0),
        catch_up: e.catch_up,
        retention_secs: e.retention_secs,
    }
}

/// A proxy URL as answers show it: its password as "…".
pub(crate) fn shown_proxy(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(u) if u.password().is_some() => format!(
            "{}://{}:…@{}{}",
            u.scheme(),
            u.username(),
            u.host_str().unwrap_or_default(),
            u.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        _ => raw.to_owned(),
    }
}

/// A client certificate as answers show it: subject, SHA-256 fingerprint of the leaf (DER)
/// and expiry; empty when there is none.
pub(crate) fn certificate_summary(pem: &str) -> String {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    use sha2::Digest;
    let Some(Ok(leaf)) = CertificateDer::pem_slice_iter(pem.as_bytes()).next() else {
        return String::new();
    };
    let fingerprint: String = sha2::Sha256::digest(leaf.as_ref())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    match x509_parser::parse_x509_certificate(leaf.as_ref()) {
        Ok((_, cert)) => format!(
            "{} sha256:{fingerprint}… expires {}",
            cert.subject(),
            cert.validity().not_after
        ),
        Err(_) => format!("sha256:{fingerprint}…"),
    }
}

/// A client's endpoint as the engine's definition (the fields hookd owns are the engine's).
pub(crate) fn endpoint_from_proto(e: pb::Endpoint) -> hookd_engine::EndpointDef {
    hookd_engine::EndpointDef {
        name: e.name,
        url: e.url,
        description: e.description,
        max_attempts: e.max_attempts,
        retry_base_ms: e.retry_base_ms,
        retry_cap_ms: e.retry_cap_ms,
        secrets: e.secrets,
        connect_timeout_ms: e.connect_timeout_ms,
        timeout_ms: e.timeout_ms,
        max_in_flight: e.max_in_flight,
        rate_limit_per_s: e.rate_limit_per_s,
        rate_limit_burst: e.rate_limit_burst,
        headers: e.headers.into_iter().collect(),
        proxy_url: e.proxy_url,
        client_certificate_pem: e.client_certificate_pem,
        client_key_pem: e.client_key_pem,
        oauth2: e.oauth2.map(|o| hookd_engine::OAuth2Def {
            token_url: o.token_url,
            client_id: o.client_id,
            client_secret: o.client_secret,
            scopes: o.scopes,
            audience: o.audience,
        }),
        // Checked by `validate::endpoint` (FIFO_OFF, FIFO_BLOCK or FIFO_PARK).
        fifo: u32::try_from(e.fifo)
            .ok()
            .and_then(hookd_engine::FifoPolicy::from_code),
        signing_public_keys: Vec::new(),
        catch_up: e.catch_up,
        retention_secs: e.retention_secs,
    }
}

fn latency(l: LatencySummary) -> pb::LatencyStats {
    pb::LatencyStats {
        count: l.count,
        p50_ms: l.p50_ms,
        p95_ms: l.p95_ms,
        p99_ms: l.p99_ms,
        p999_ms: l.p999_ms,
        max_ms: l.max_ms,
    }
}

fn push(p: PushSnapshot) -> pb::PushStats {
    let (breaker, open_until) = match p.breaker {
        BreakerState::Closed => (pb::BreakerState::Closed, 0),
        BreakerState::Open { until_ms } => (pb::BreakerState::Open, until_ms),
        BreakerState::HalfOpen { .. } => (pb::BreakerState::HalfOpen, 0),
    };
    pb::PushStats {
        disabled: p.disabled.is_some(),
        disabled_reason: p.disabled.unwrap_or_default(),
        breaker: breaker as i32,
        breaker_open_until_unix_ms: open_until,
        breaker_cooldown_ms: p.breaker_cooldown_ms,
        breaker_openings: p.breaker_openings,
        consecutive_failures: p.consecutive_failures,
        paused_until_unix_ms: p.paused_until_ms.unwrap_or(0),
        in_flight: p.in_flight,
        max_in_flight: u32::try_from(p.max_in_flight).unwrap_or(u32::MAX),
        rate_limit_per_s: p.rate_limit_per_s,
        slow: p.slow,
        attempts_last_hour: p.attempts_last_hour,
        success_rate_last_hour: p.success_rate_last_hour,
        attempt_latency_last_hour: Some(latency(p.attempt_latency_last_hour)),
        attempt_latency_last_24h: Some(latency(p.attempt_latency_last_24h)),
    }
}

fn destination_stats(d: DestinationSnapshot) -> pb::DestinationStats {
    pb::DestinationStats {
        destination: d.destination,
        pending: d.pending,
        awaiting_retry: d.awaiting_retry,
        in_flight: d.in_flight,
        dead_letter: d.dead_letter,
        delivered_last_hour: d.delivered_last_hour,
        failed_last_hour: d.failed_last_hour,
        oldest_pending_age_ms: d.oldest_pending_age_ms,
        enqueue_rate_per_s: d.enqueue_rate_per_s,
        completion_rate_per_s: d.completion_rate_per_s,
        latency_last_hour: Some(latency(d.latency_last_hour)),
        latency_last_24h: Some(latency(d.latency_last_24h)),
        push: d.push.map(push),
        waiting_receives: d.waiting_receives,
        live_bytes: d.live_bytes,
        backpressure: level(d.backpressure) as i32,
        fifo_lanes: d.fifo_lanes,
        blocked_lanes: d.blocked_lanes,
    }
}

fn level(l: hookd_core::backpressure::Level) -> pb::BackpressureLevel {
    use hookd_core::backpressure::Level;
    match l {
        Level::Ok => pb::BackpressureLevel::Ok,
        Level::Soft => pb::BackpressureLevel::Soft,
        Level::Hard => pb::BackpressureLevel::Hard,
    }
}

fn storage(s: StorageSnapshot) -> pb::StorageStats {
    pb::StorageStats {
        commits_per_s: s.commits_per_s,
        requests_per_commit: s.requests_per_commit,
        commit_latency_last_hour: Some(latency(s.commit_latency_last_hour)),
        live_messages: s.live_messages,
        queued_write_bytes: s.queued_write_bytes,
        destinations: s.destinations,
        log_bytes: s.log_bytes,
        checkpoint_age_ms: s.checkpoint_age_ms,
        last_checkpoint_ms: s.last_checkpoint_ms,
        replay_ms: s.replay_ms,
        replayed_bytes: s.replayed_bytes,
        log_since_checkpoint_bytes: s.log_since_checkpoint_bytes,
        disk_available_bytes: s.disk_available_bytes,
        disk_reserve_bytes: s.disk_reserve_bytes,
        log_segments: s.log_segments,
        log_live_bytes: s.log_live_bytes,
        log_retained_from_unix_ms: s.log_retained_from_ms,
        log_reclaimable_bytes: s.log_reclaimable_bytes,
        log_compacting_segments: s.log_compacting_segments,
        log_compacted_records: s.log_compacted_records,
        log_deleted_segments: s.log_deleted_segments,
        log_freed_bytes: s.log_freed_bytes,
        purge_pending_records: s.purge_pending_records,
        purged_records: s.purged_records,
        purged_bytes: s.purged_bytes,
    }
}

pub fn stats(s: StatsSnapshot) -> pb::StatsResponse {
    pb::StatsResponse {
        total: Some(destination_stats(s.total)),
        destinations: s.destinations.into_iter().map(destination_stats).collect(),
        uptime_ms: s.uptime_ms,
        storage: Some(storage(s.storage)),
        next_page_token: s.next_page.unwrap_or_default(),
        alerts: s
            .alerts
            .into_iter()
            .map(|a| pb::AlertState {
                alert: a.alert.to_owned(),
                destination: a.destination,
                level: a.level.to_owned(),
                since_unix_ms: a.since_ms,
                value: a.value,
                warning: a.warning,
                critical: a.critical,
            })
            .collect(),
        quotas: s
            .quotas
            .into_iter()
            .map(|q| pb::QuotaUse {
                quota: q.quota.to_owned(),
                used: q.used,
                limit: q.limit,
            })
            .collect(),
        replay_jobs: Vec::new(),
        retention: Some(pb::RetentionStats {
            retention_secs: s.retention.tenant_ms / 1_000,
            server_completed_retention_secs: s.retention.completed_ms / 1_000,
            server_log_retention_secs: s.retention.log_ms / 1_000,
            disk_budget_bytes: s.retention.budget_bytes,
            payloads_kept_since_unix_ms: s.retention.kept_since_ms,
            destinations: s
                .retention
                .destinations
                .into_iter()
                .map(|(destination, ms, since)| pb::DestinationRetention {
                    destination,
                    retention_secs: ms / 1_000,
                    payloads_kept_since_unix_ms: since,
                })
                .collect(),
        }),
    }
}

/// A message as GetMessage answers it.
pub(crate) fn message(m: MessageView) -> pb::GetMessageResponse {
    let state = match m.state {
        Shown::Pending => pb::MessageState::Pending,
        Shown::AwaitingRetry => pb::MessageState::AwaitingRetry,
        Shown::InFlight => pb::MessageState::InFlight,
        Shown::DeadLetter => pb::MessageState::DeadLetter,
        Shown::Delivered => pb::MessageState::Delivered,
    };
    let (replays, before) = m.replays();
    let (payload, headers, payload_expired) = match m.content {
        Some(c) => (c.payload, c.headers.into_iter().collect(), false),
        None => (Vec::new(), Default::default(), true),
    };
    pb::GetMessageResponse {
        payload,
        headers,
        payload_expired,
        id: m.id.to_string(),
        destination: m.destination.as_ref().map(hookd_ctl::wire::destination),
        state: state as i32,
        attempts: m.attempts,
        max_attempts: m.max_attempts,
        enqueued_unix_ms: m.enqueued_ms,
        next_attempt_unix_ms: m.next_attempt_ms,
        history: attempts(m.history),
        last_error: m.last_error,
        event_type: m.event_type,
        idempotency_key: m.idempotency_key,
        payload_size: m.payload_size,
        completed_unix_ms: m.completed_ms,
        event_id: if m.event_id.is_empty() {
            m.id.to_string()
        } else {
            m.event_id
        },
        ordering_key: m.lane.as_ref().map(|l| l.key.clone()).unwrap_or_default(),
        sequence: m.lane.as_ref().map_or(0, |l| l.seq),
        out_of_order: m.lane.as_ref().is_some_and(|l| l.detached),
        blocks_lane: m.lane.as_ref().is_some_and(|l| l.blocks),
        replays,
        attempts_before_replay: before,
    }
}

pub fn dead_letter(m: StoredMessage) -> pb::DeadLetter {
    pb::DeadLetter {
        id: m.id.to_string(),
        destination: stored_destination(&m.record.destination),
        attempts: m.entry.attempts,
        last_error: m.history.last_error,
        enqueued_unix_ms: m.record.created_ms,
        dead_lettered_unix_ms: m.entry.since_ms,
        event_type: m.record.event_type,
        payload_size: m.record.payload.len() as u64,
        ordering_key: m
            .entry
            .lane
            .as_ref()
            .map(|l| l.key.clone())
            .unwrap_or_default(),
        sequence: m.entry.lane.as_ref().map_or(0, |l| l.seq),
        blocks_lane: m.entry.lane.is_some_and(|l| l.blocks),
    }
}

pub fn analysis(a: hookd_core::deadletters::Analysis) -> pb::DeadLetterAnalysis {
    pb::DeadLetterAnalysis {
        destination: a.destination,
        count: a.count,
        most_common_error: a.most_common_error,
        most_common_error_count: a.most_common_error_count,
        most_common_status: a.most_common_status,
        most_common_status_count: a.most_common_status_count,
        first_unix_ms: a.first_ms,
        last_unix_ms: a.last_ms,
        average_attempts: a.average_attempts,
        busiest_hour_count: a.busiest_hour_count,
        patterns: a
            .patterns
            .into_iter()
            .map(|p| pb::DeadLetterPattern {
                kind: p.kind.to_owned(),
                description: p.description,
                suggestion: p.suggestion,
            })
            .collect(),
    }
}

fn attempts(attempts: Vec<AttemptRecord>) -> Vec<pb::Attempt> {
    attempts
        .into_iter()
        .map(|a| pb::Attempt {
            number: a.number,
            started_unix_ms: a.started_ms,
            ended_unix_ms: a.ended_ms,
            outcome: a.outcome,
            error: a.error,
            http_status: a.http_status,
            latency_us: a.latency_us,
        })
        .collect()
}

/// A message's state, as the index and the store name it, on the wire.
pub(crate) fn search_state(s: hookd_storage::store::search::SearchState) -> pb::MessageState {
    use hookd_storage::store::search::SearchState;
    match s {
        SearchState::Pending => pb::MessageState::Pending,
        SearchState::Retrying => pb::MessageState::AwaitingRetry,
        SearchState::InFlight => pb::MessageState::InFlight,
        SearchState::Dead => pb::MessageState::DeadLetter,
        SearchState::Delivered => pb::MessageState::Delivered,
        SearchState::Expired => pb::MessageState::Expired,
    }
}

/// A search's hit on the wire.
pub fn summary(h: hookd_storage::store::search::Hit) -> pb::MessageSummary {
    let state = search_state(h.state);
    pb::MessageSummary {
        id: h.id.to_string(),
        destination: stored_destination(&h.destination),
        state: state as i32,
        event_type: h.event_type,
        event_id: h.event_id,
        idempotency_key: h.idempotency_key,
        attempts: h.attempts,
        last_status: h.last_status,
        enqueued_unix_ms: h.created_ms,
        completed_unix_ms: h.completed_ms,
        payload_size: h.payload_bytes,
        last_error: h.last_error,
        last_latency_us: h.last_latency_us,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field of an endpoint survives the trip to the wire and back, except those
    /// hookd owns, which a client cannot set.
    #[test]
    fn endpoint_round_trip() {
        let stored = EndpointRecord {
            name: "n".into(),
            url: "https://x/".into(),
            description: "d".into(),
            max_attempts: 1,
            retry_base_ms: 2,
            retry_cap_ms: 3,
            disabled: true,
            created_ms: 4,
            updated_ms: 5,
            secrets: vec!["s".into()],
            connect_timeout_ms: 6,
            timeout_ms: 7,
            max_in_flight: 8,
            rate_limit_per_s: 9.5,
            rate_limit_burst: 10,
            disabled_reason: "r".into(),
            disabled_ms: 11,
            paused: true,
            paused_reason: "p".into(),
            paused_ms: 12,
            headers: [("x-api-key".to_owned(), "k".to_owned())].into(),
            proxy_url: "http://u:pw@proxy:3128".into(),
            client_certificate_pem: "cert".into(),
            client_key_pem: "key".into(),
            oauth2: Some(hookd_storage::store::OAuth2Record {
                token_url: "https://idp/token".into(),
                client_id: "id".into(),
                client_secret: "secret".into(),
                scopes: vec!["a".into()],
                audience: "aud".into(),
            }),
            fifo: 2,
            catch_up: true,
            retention_secs: 7 * 86_400,
            // hookd's own (the API derives the current ones from the secrets).
            signing_keys: Vec::new(),
        };
        // Without reveal, a static header's value is shown as "…" (like the secrets), and
        // so is the proxy's password; the client key and the OAuth2 secret are left out.
        let hidden = endpoint(stored.clone(), &stored.secrets, false);
        assert_eq!(
            hidden.headers.get("x-api-key").map(String::as_str),
            Some("…")
        );
        assert_eq!(hidden.proxy_url, "http://u:…@proxy:3128");
        assert!(hidden.client_key_pem.is_empty());
        assert_eq!(hidden.client_certificate_pem, "cert");
        assert!(
            hidden
                .oauth2
                .as_ref()
                .is_some_and(|o| o.client_secret.is_empty())
        );
        // Back from the wire: every field a client sets, as the engine's definition.
        let back = endpoint_from_proto(endpoint(stored.clone(), &stored.secrets, true));
        assert_eq!(
            back,
            hookd_engine::EndpointDef {
                name: "n".into(),
                url: "https://x/".into(),
                description: "d".into(),
                max_attempts: 1,
                retry_base_ms: 2,
                retry_cap_ms: 3,
                secrets: vec!["s".into()],
                connect_timeout_ms: 6,
                timeout_ms: 7,
                max_in_flight: 8,
                rate_limit_per_s: 9.5,
                rate_limit_burst: 10,
                headers: [("x-api-key".to_owned(), "k".to_owned())].into(),
                proxy_url: "http://u:pw@proxy:3128".into(),
                client_certificate_pem: "cert".into(),
                client_key_pem: "key".into(),
                oauth2: Some(hookd_engine::OAuth2Def {
                    token_url: "https://idp/token".into(),
                    client_id: "id".into(),
                    client_secret: "secret".into(),
                    scopes: vec!["a".into()],
                    audience: "aud".into(),
                }),
                fifo: Some(hookd_engine::FifoPolicy::Park),
                signing_public_keys: Vec::new(),
                catch_up: true,
                retention_secs: 7 * 86_400,
            }
        );
        // Format version 1 stored the wire type itself: its bytes decode as the record.
        use prost::Message;
        let wire = endpoint(stored.clone(), &stored.secrets, true).encode_to_vec();
        assert_eq!(EndpointRecord::decode(wire.as_slice()).ok(), Some(stored));
    }
}
