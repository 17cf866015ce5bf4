//! OpenTelemetry traces: a span for each Enqueue/EnqueueBatch call (gRPC, or HTTP/JSON,
//! which is the same call) and each webhook received by ingest, a child span for its
//! durable write (from the hand-off to the engine until the log record holding it is
//! fsynced and the answer is back), and a span for every push attempt (child of the
//! call's span, its context sent to the endpoint as `traceparent`).
//!
//! Exported over OTLP/gRPC when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set (and `OTEL_SDK_DISABLED` is not `true` nor
//! `OTEL_TRACES_EXPORTER` `none`); the SDK reads the other standard variables itself
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT`, `_COMPRESSION`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`, `OTEL_BSP_*`). Off otherwise,
//! and then nothing here runs but a check of an `Option`, and the copy of a producer's
//! `traceparent`/`tracestate` into the event's headers, so the trace still reaches the
//! endpoint (and a pull consumer) through hookd.

use std::collections::HashMap;
use std::sync::Arc;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use hookd_core::push::{Delivery, Verdict};

/// The W3C trace context headers.
pub(crate) const TRACEPARENT: &str = "traceparent";
pub(crate) const TRACESTATE: &str = "tracestate";

/// Traces, when an OTLP endpoint is configured; cheap to clone.
#[derive(Clone, Default)]
pub(crate) struct Tracing {
    on: Option<Arc<On>>,
}

struct On {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

impl std::fmt::Debug for Tracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracing")
            .field("on", &self.on.is_some())
            .finish()
    }
}

/// An environment variable, if set and not empty.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Tracing {
    /// Off: no span is made.
    pub(crate) fn off() -> Self {
        Self::default()
    }

    /// On if the environment names an OTLP endpoint (see the module's documentation).
    /// Must run inside the tokio runtime (the gRPC exporter's).
    pub(crate) fn from_env() -> Result<Self, String> {
        let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"));
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let Some(endpoint) = endpoint.filter(|_| !disabled) else {
            return Ok(Self::off());
        };
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = var(name)
                && protocol != "grpc"
            {
                return Err(format!(
                    "{name}={protocol}: hookd exports traces over OTLP/gRPC only; set it to grpc (or unset it) and point the endpoint at the collector's gRPC port (4317)"
                ));
            }
        }
        use opentelemetry_otlp::WithExportConfig as _;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint.clone())
            .build()
            .map_err(|e| format!("the OTLP exporter for {endpoint}: {e}"))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if var("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name("hookd");
        }
        let resource = resource
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer("hookd");
        tracing::info!(endpoint = %endpoint, "exporting traces over OTLP/gRPC");
        Ok(Self {
            on: Some(Arc::new(On {
                provider,
                tracer,
                propagator: TraceContextPropagator::new(),
            })),
        })
    }

    /// Exports what is buffered and stops the exporter (at exit).
    pub(crate) async fn shutdown(&self) {
        if let Some(on) = &self.on {
            let on = on.clone();
            let done = tokio::task::spawn_blocking(move || on.provider.shutdown()).await;
            if let Ok(Err(e)) = done {
                tracing::warn!(error = %e, "traces not all exported at exit");
            }
        }
    }

    /// A server span for a call or a received webhook, child of the trace context in
    /// `headers` (`traceparent`, `tracestate`) if any; `None` when tracing is off.
    pub(crate) fn server_span(
        &self,
        name: &'static str,
        headers: &dyn Headers,
        attributes: Vec<KeyValue>,
    ) -> Option<Traced> {
        let on = self.on.as_ref()?;
        let parent = on.propagator.extract(&Extract(headers));
        let span = on
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&on.tracer, &parent);
        Some(Traced {
            on: on.clone(),
            cx: parent.with_span(span),
        })
    }

    /// The attempts' tracer for the dispatcher, when tracing is on.
    pub(crate) fn attempts(&self) -> Option<Arc<dyn hookd_delivery::AttemptTracer>> {
        let on = self.on.clone()?;
        Some(Arc::new(Attempts(on)))
    }
}

/// Where W3C headers are read from: gRPC metadata or an HTTP header map.
pub(crate) trait Headers {
    fn header(&self, name: &str) -> Option<&str>;
}

impl Headers for http::HeaderMap {
    fn header(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Headers for tonic::metadata::MetadataMap {
    fn header(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| v.to_str().ok())
    }
}

impl Headers for std::collections::BTreeMap<String, String> {
    fn header(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}

struct Extract<'a>(&'a dyn Headers);

impl Extractor for Extract<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.header(key)
    }
    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

/// A `traceparent` of the W3C format (`00-<32 hex>-<16 hex>-<2 hex>`), checked before it
/// is stored with an event: what cannot be one is not copied. As W3C Trace Context says:
/// lowercase hex; version `ff` is invalid; version `00` has exactly four fields (a later
/// version may add more after them); an all-zero trace id or parent id is invalid.
fn is_traceparent(value: &str) -> bool {
    let parts: Vec<&str> = value.split('-').collect();
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    parts.len() >= 4
        && hex(parts[0], 2)
        && parts[0] != "ff"
        && (parts.len() == 4 || parts[0] != "00")
        && hex(parts[1], 32)
        && !zero(parts[1])
        && hex(parts[2], 16)
        && !zero(parts[2])
        && hex(parts[3], 2)
}

/// The trace context an event carries on: the span's (tracing on), else the producer's
/// own `traceparent`/`tracestate` as it came. An event that names its own `traceparent`
/// in its headers keeps it.
pub(crate) fn stamp(
    event_headers: &mut HashMap<String, String>,
    from: &dyn Headers,
    span: Option<&Traced>,
) {
    if !event_headers.contains_key(TRACEPARENT) {
        event_headers.extend(carried(from, span));
    }
}

/// As [`stamp`], into a stored record's headers (ingest).
pub(crate) fn stamp_record(
    record_headers: &mut std::collections::BTreeMap<String, String>,
    from: &dyn Headers,
    span: Option<&Traced>,
) {
    if !record_headers.contains_key(TRACEPARENT) {
        record_headers.extend(carried(from, span));
    }
}

/// The W3C headers [`stamp`] adds: the span's context, or the producer's as it came.
fn carried(from: &dyn Headers, span: Option<&Traced>) -> Vec<(String, String)> {
    if let Some(span) = span {
        return span
            .context_headers()
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect();
    }
    let Some(parent) = from.header(TRACEPARENT).filter(|v| is_traceparent(v)) else {
        return Vec::new();
    };
    let mut out = vec![(TRACEPARENT.to_owned(), parent.to_owned())];
    if let Some(state) = from.header(TRACESTATE).filter(|s| s.len() <= 512) {
        out.push((TRACESTATE.to_owned(), state.to_owned()));
    }
    out
}

/// `write` (the engine's answer, which comes once the log record holding the events is
/// fsynced) under a `hookd.durable_write` span, when the call is traced.
pub(crate) async fn durable<T, E: std::fmt::Display>(
    span: Option<&Traced>,
    events: usize,
    write: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let Some(span) = span else {
        return write.await;
    };
    let child = span.child(
        "hookd.durable_write",
        vec![KeyValue::new(
            "hookd.events",
            i64::try_from(events).unwrap_or(i64::MAX),
        )],
    );
    let result = write.await;
    child.end(result.as_ref().err().map(ToString::to_string).as_deref());
    result
}

/// A span in progress and the context it makes.
pub(crate) struct Traced {
    on: Arc<On>,
    cx: Context,
}

impl Traced {
    /// A child span (internal), e.g. the durable write.
    pub(crate) fn child(&self, name: &'static str, attributes: Vec<KeyValue>) -> Traced {
        let span = self
            .on
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(&self.on.tracer, &self.cx);
        Traced {
            on: self.on.clone(),
            cx: self.cx.with_span(span),
        }
    }

    /// `traceparent` and `tracestate` naming this span as the parent.
    pub(crate) fn context_headers(&self) -> Vec<(&'static str, String)> {
        let mut out = Inject(Vec::with_capacity(2));
        self.on.propagator.inject_context(&self.cx, &mut out);
        out.0
    }

    pub(crate) fn set(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    /// Ends it, as failed with `error` if there is one.
    pub(crate) fn end(self, error: Option<&str>) {
        let span = self.cx.span();
        if let Some(error) = error {
            span.set_status(Status::error(error.to_owned()));
        }
        span.end();
    }
}

struct Inject(Vec<(&'static str, String)>);

impl Injector for Inject {
    fn set(&mut self, key: &str, value: String) {
        let name = match key {
            TRACEPARENT => TRACEPARENT,
            TRACESTATE => TRACESTATE,
            _ => return,
        };
        if !value.is_empty() {
            self.0.push((name, value));
        }
    }
}

/// The dispatcher's attempt spans.
struct Attempts(Arc<On>);

impl std::fmt::Debug for Attempts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Attempts")
    }
}

/// A URL as a span shows it: no user information, query or fragment (they may hold
/// credentials).
fn shown_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => String::new(),
    }
}

impl hookd_delivery::AttemptTracer for Attempts {
    fn start(&self, d: &Delivery) -> Option<Box<dyn hookd_delivery::AttemptSpan>> {
        let on = &self.0;
        let parent = on.propagator.extract(&Extract(&d.headers));
        let span = on
            .tracer
            .span_builder("hookd.deliver")
            .with_kind(SpanKind::Client)
            .with_attributes(vec![
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("url.full", shown_url(&d.url)),
                KeyValue::new("messaging.system", "hookd"),
                KeyValue::new("messaging.message.id", d.id.to_string()),
                KeyValue::new("hookd.attempt", i64::from(d.attempt)),
            ])
            .start_with_context(&on.tracer, &parent);
        if !span.span_context().is_sampled() {
            return None;
        }
        Some(Box::new(Traced {
            on: on.clone(),
            cx: parent.with_span(span),
        }))
    }
}

impl hookd_delivery::AttemptSpan for Traced {
    fn context_headers(&self) -> Vec<(&'static str, String)> {
        Traced::context_headers(self)
    }

    fn end(self: Box<Self>, verdict: &Verdict) {
        let (status, error): (u16, Option<&str>) = match verdict {
            Verdict::Delivered { status } => (*status, None),
            Verdict::Retry { status, error, .. } | Verdict::Permanent { status, error } => {
                (*status, Some(error))
            }
            Verdict::Refused { error } | Verdict::Local { error } => (0, Some(error)),
        };
        if status != 0 {
            self.set(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
        }
        Traced::end(*self, error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_w3c_traceparent_is_carried() {
        assert!(is_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        ));
        assert!(!is_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b71-01"
        ));
        assert!(!is_traceparent("hello"));
        // Issue #49, 7: what W3C Trace Context refuses.
        let id = "0af7651916cd43dd8448eb211c80319c";
        for bad in [
            format!("00-{id}-b7ad6b7169203331-01-extra"),
            format!("ff-{id}-b7ad6b7169203331-01"),
            format!("00-{}-b7ad6b7169203331-01", "0".repeat(32)),
            format!("00-{id}-0000000000000000-01"),
            format!("00-{}-b7ad6b7169203331-01", id.to_uppercase()),
        ] {
            assert!(!is_traceparent(&bad), "{bad}");
        }
        // A later version may carry more fields after the four.
        assert!(is_traceparent(&format!("01-{id}-b7ad6b7169203331-01-more")));
        let mut from = http::HeaderMap::new();
        from.insert(TRACEPARENT, "not-a-context".parse().unwrap());
        let mut headers = HashMap::new();
        stamp(&mut headers, &from, None);
        assert!(headers.is_empty());
    }

    #[test]
    fn with_tracing_off_the_producers_context_goes_with_the_event_unless_it_names_its_own() {
        let mut from = http::HeaderMap::new();
        let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        from.insert(TRACEPARENT, parent.parse().unwrap());
        from.insert(TRACESTATE, "vendor=1".parse().unwrap());
        let mut headers = HashMap::new();
        stamp(&mut headers, &from, None);
        assert_eq!(headers[TRACEPARENT], parent);
        assert_eq!(headers[TRACESTATE], "vendor=1");
        let own = "00-11111111111111111111111111111111-2222222222222222-01";
        let mut headers = HashMap::from([(TRACEPARENT.to_owned(), own.to_owned())]);
        stamp(&mut headers, &from, None);
        assert_eq!(headers[TRACEPARENT], own);
        assert!(!headers.contains_key(TRACESTATE));
    }

    #[test]
    fn a_shown_url_keeps_no_credentials() {
        assert_eq!(
            shown_url("https://user:pw@example.com/hook?token=s3cret#x"),
            "https://example.com/hook"
        );
    }
}
