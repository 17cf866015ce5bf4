//! `[connections]`: the limits each listener holds connections and calls to, checked
//! with their keys.

use serde::Deserialize;

/// `[connections]`: limits against hostile or broken clients, per listener.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionLimits {
    /// Open connections per listener; more are closed as they arrive. Also kept below the
    /// process's open-file limit (see ARCHITECTURE.md, "Connections").
    pub max_connections: usize,
    /// A TLS handshake, or a plaintext client's first bytes, within this.
    pub handshake_timeout_ms: u64,
    /// A connection with no request in progress and none begun for this long is closed.
    /// Only requests count (that passed authentication, on a listener with `[auth]`): bytes
    /// alone, such as answers to keep-alive pings, do not keep a connection open.
    pub idle_timeout_secs: u64,
    /// A new connection must begin its first request (authenticated, with `[auth]`) within
    /// this, or it is closed: connections that never ask anything, or present no valid
    /// credential, do not hold slots.
    pub first_request_timeout_ms: u64,
    /// Connections one client address may hold open on each listener (0: the share
    /// `max_share_percent` of `max_connections`). Behind a proxy or a load balancer every
    /// connection comes from its address: raise this to `max_connections` there.
    pub max_connections_per_peer: usize,
    /// HTTP/1 request headers must arrive within this.
    pub header_read_timeout_ms: u64,
    /// Largest request header block (HTTP/1 headers, HTTP/2 header list / gRPC metadata).
    pub max_header_bytes: u32,
    /// HTTP/2 streams (concurrent gRPC calls) per connection.
    pub max_concurrent_streams: u32,
    /// A gRPC request's body (its message) must have arrived within this.
    pub request_body_timeout_ms: u64,
    /// Server-side keep-alive ping interval on gRPC connections.
    pub keepalive_interval_secs: u64,
    /// gRPC calls in progress at once, over all connections (long polls included); more
    /// are answered RESOURCE_EXHAUSTED at once.
    pub max_requests_in_flight: usize,
    /// Bytes of gRPC request bodies received but not yet decoded, over all calls; a call
    /// that would pass it is answered RESOURCE_EXHAUSTED.
    pub max_request_bytes_in_flight: u64,
    /// The share of those two budgets one connection, and one caller (a token or client
    /// certificate; without authentication, one client IP address), may hold at once, in
    /// percent: past it that connection's or caller's next call is answered
    /// RESOURCE_EXHAUSTED while everyone else still gets in. A call's first message is
    /// always let through when its caller holds no bytes, so a share never refuses the
    /// largest message the server accepts.
    pub max_share_percent: u8,
    /// gRPC health calls (Check and Watch) in progress at once. They have their own budget
    /// (and 1 MiB of request bytes), split by the same shares, so health streams never
    /// take the places of API calls, nor API calls those of health probes.
    pub max_health_calls_in_flight: usize,
    /// An inbound webhook's body must have arrived within this (ingest listener).
    pub ingest_body_timeout_ms: u64,
    /// Bytes of inbound webhook bodies held before their signature is checked, over all
    /// requests (each counts its Content-Length, or its source's `max_body_bytes` when
    /// chunked); past it, 503 with Retry-After before the body is read.
    pub max_unverified_ingest_bytes: u64,
    /// Failed signature checks (401s) one client (an IPv4 address, an IPv6 /64) may have at
    /// one source within `ingest_auth_failure_window_secs`; past it that client's requests
    /// to that source are answered 429 from their headers, the body unread, until the
    /// window ends (0: no limit). See ingest/strikes.rs.
    pub max_ingest_auth_failures: u32,
    /// The window of `max_ingest_auth_failures`, from a client's first failure in it.
    pub ingest_auth_failure_window_secs: u64,
    /// Bytes per second read from suspect clients' ingest connections (those served at
    /// low priority: see ingest/demote.rs), all of them together; 0: unpaced. What the
    /// kernel's network work for an unauthenticated flood can take from everyone else.
    pub suspect_ingest_bytes_per_sec: u64,
    /// A Watch stream (gRPC, or Server-Sent Events over HTTP) with no event to send for
    /// this long ends, with DEADLINE_EXCEEDED "idle" (the client watches again): an idle
    /// stream does not hold its place and its call's share for ever.
    pub watch_idle_secs: u64,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self {
            max_connections: 4_096,
            handshake_timeout_ms: 10_000,
            idle_timeout_secs: 300,
            first_request_timeout_ms: 10_000,
            max_connections_per_peer: 0,
            header_read_timeout_ms: 10_000,
            max_header_bytes: 16 << 10,
            max_concurrent_streams: 128,
            request_body_timeout_ms: 30_000,
            keepalive_interval_secs: 30,
            max_requests_in_flight: 10_000,
            max_request_bytes_in_flight: 256 << 20,
            max_share_percent: 25,
            max_health_calls_in_flight: 256,
            ingest_body_timeout_ms: 10_000,
            max_unverified_ingest_bytes: 64 << 20,
            max_ingest_auth_failures: 32,
            ingest_auth_failure_window_secs: 10,
            suspect_ingest_bytes_per_sec: 32 << 20,
            watch_idle_secs: 600,
        }
    }
}

impl ConnectionLimits {
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let within = |key, v: u64, lo: u64, hi: u64| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err((key, format!("{v} is not within {lo}..={hi}")))
            }
        };
        within(
            "connections.max_connections",
            self.max_connections as u64,
            1,
            1 << 20,
        )?;
        within(
            "connections.watch_idle_secs",
            self.watch_idle_secs,
            1,
            86_400,
        )?;
        within(
            "connections.handshake_timeout_ms",
            self.handshake_timeout_ms,
            100,
            600_000,
        )?;
        within(
            "connections.idle_timeout_secs",
            self.idle_timeout_secs,
            self.keepalive_interval_secs.saturating_mul(2).max(1),
            86_400,
        )?;
        within(
            "connections.first_request_timeout_ms",
            self.first_request_timeout_ms,
            100,
            3_600_000,
        )?;
        within(
            "connections.max_connections_per_peer",
            self.max_connections_per_peer as u64,
            0,
            1 << 20,
        )?;
        within(
            "connections.header_read_timeout_ms",
            self.header_read_timeout_ms,
            100,
            600_000,
        )?;
        within(
            "connections.max_header_bytes",
            u64::from(self.max_header_bytes),
            8 << 10,
            1 << 20,
        )?;
        within(
            "connections.max_concurrent_streams",
            u64::from(self.max_concurrent_streams),
            1,
            10_000,
        )?;
        within(
            "connections.request_body_timeout_ms",
            self.request_body_timeout_ms,
            100,
            3_600_000,
        )?;
        within(
            "connections.ingest_body_timeout_ms",
            self.ingest_body_timeout_ms,
            100,
            3_600_000,
        )?;
        within(
            "connections.max_unverified_ingest_bytes",
            self.max_unverified_ingest_bytes,
            1 << 20,
            1 << 40,
        )?;
        within(
            "connections.max_ingest_auth_failures",
            u64::from(self.max_ingest_auth_failures),
            0,
            1 << 20,
        )?;
        within(
            "connections.ingest_auth_failure_window_secs",
            self.ingest_auth_failure_window_secs,
            1,
            86_400,
        )?;
        if self.suspect_ingest_bytes_per_sec != 0 {
            // Slower, a suspect's largest body could not arrive within its timeout.
            within(
                "connections.suspect_ingest_bytes_per_sec",
                self.suspect_ingest_bytes_per_sec,
                1 << 20,
                1 << 40,
            )?;
        }
        within(
            "connections.max_requests_in_flight",
            self.max_requests_in_flight as u64,
            1,
            1 << 24,
        )?;
        within(
            "connections.max_request_bytes_in_flight",
            self.max_request_bytes_in_flight,
            1 << 20,
            1 << 40,
        )?;
        within(
            "connections.max_share_percent",
            u64::from(self.max_share_percent),
            1,
            100,
        )?;
        within(
            "connections.max_health_calls_in_flight",
            self.max_health_calls_in_flight as u64,
            1,
            1 << 20,
        )?;
        within(
            "connections.keepalive_interval_secs",
            self.keepalive_interval_secs,
            1,
            3_600,
        )
    }
}
