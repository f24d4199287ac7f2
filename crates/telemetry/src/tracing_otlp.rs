//! Tracing: the process-wide `tracing` subscriber (logs on stderr, filtered by `RUST_LOG`, default
//! `info`) and, when [`TracingConfig::enabled`], OpenTelemetry spans exported over OTLP/gRPC, plus the
//! W3C trace-context helpers used for inbound requests ([`continue_remote_trace`]) and outbound
//! upstream calls ([`trace_context_headers`]).
//!
//! The settings arrive as a [`TracingConfig`], resolved by the binary from its command line
//! (`--tracing-*`, `--opentelemetry-*`, `--otel-service-name` and their `GW_*` variables) with the
//! checks here ([`parse_sample_ratio`], [`parse_collector_host`], [`TracingConfig::check`]). The
//! standard `OTEL_BSP_*` variables tune the batch exporter (e.g. `OTEL_BSP_SCHEDULE_DELAY` in
//! milliseconds).
//!
//! Usage: `main` calls [`init_subscriber`] and keeps the returned [`TracingGuard`] until the process
//! ends; dropping it flushes the spans still queued. In standalone and integrated mode only the
//! re-exec'd workers export (the supervisor hands them the config); the supervisor only logs.
//!
//! What is exported: only spans whose target starts with `respgw` at level INFO or above — never log
//! events — so span fields are the only attributes. Those spans carry methods, paths, route
//! templates, status codes and the upstream's address: no bodies, prompts, tool arguments or keys.
//!
//! Without the `otlp` cargo feature the trace-context helpers do nothing and enabling tracing is a
//! start-up error saying the binary was built without it.

use std::ffi::OsStr;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::{Deserialize, Serialize};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::log_redaction::RedactedWriter;

/// Whether spans are being exported: set once [`init_subscriber`] installed the OpenTelemetry layer.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports spans. Callers skip all trace-context work when it does not, so
/// tracing costs one relaxed atomic load per request when disabled.
#[inline]
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The tracing settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracingConfig {
    /// Export spans at all (off by default).
    pub enabled: bool,
    /// Share of new traces sampled; a request that arrives with a `traceparent` follows its sampled flag.
    pub sample_ratio: f64,
    /// Host of the OTLP/gRPC collector.
    pub collector_host: String,
    /// Port of the collector.
    pub collector_port: u16,
    /// `service.name` resource attribute.
    pub service_name: String,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            enabled: false,
            sample_ratio: 0.01,
            collector_host: "otel-collector".into(),
            collector_port: 4317,
            service_name: "respgw".into(),
        }
    }
}

impl TracingConfig {
    /// Whether this binary can honour the settings: export needs the `otlp` cargo feature.
    pub fn check(&self) -> Result<(), String> {
        if self.enabled && !cfg!(feature = "otlp") {
            return Err(NOT_BUILT_IN.to_owned());
        }
        Ok(())
    }

    /// The collector's gRPC endpoint, `http://HOST:PORT` (an IPv6 address is bracketed).
    pub fn endpoint(&self) -> String {
        let host = &self.collector_host;
        if host.contains(':') && !host.starts_with('[') {
            format!("http://[{host}]:{}", self.collector_port)
        } else {
            format!("http://{host}:{}", self.collector_port)
        }
    }
}

/// Why span export cannot be turned on in a binary built without the `otlp` feature.
const NOT_BUILT_IN: &str = "span export is on (--tracing-enabled / GW_TRACING_ENABLED), but this respgw binary was \
     built without tracing support (cargo feature `otlp`); rebuild it with default features or turn export off";

/// A share of traces: a number from 0.0 to 1.0, never clamped.
pub fn parse_sample_ratio(raw: &str) -> Result<f64, String> {
    match raw.trim().parse::<f64>() {
        Ok(ratio) if (0.0..=1.0).contains(&ratio) => Ok(ratio),
        _ => Err("expected a number from 0.0 to 1.0".to_owned()),
    }
}

/// A collector host: a host name, IPv4 address or (optionally bracketed) IPv6 address.
pub fn parse_collector_host(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    let plausible = raw.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:[]%".contains(&b));
    let endpoint = TracingConfig { collector_host: raw.to_owned(), ..TracingConfig::default() }.endpoint();
    if !raw.is_empty() && plausible && endpoint.parse::<http::Uri>().is_ok() {
        Ok(raw.to_owned())
    } else {
        Err("expected a host name or IP address".to_owned())
    }
}

/// Keeps span export running; dropping it flushes the queued spans (bounded) and stops the exporter.
#[must_use = "dropping the guard stops span export"]
pub struct TracingGuard {
    /// The OTLP exporter and its runtime, when exporting.
    #[cfg(feature = "otlp")]
    _export: Option<otlp::Export>,
}

/// Whether log lines carry terminal colour codes: only when stderr is a terminal (not a pipe, a
/// file or the journal) and `NO_COLOR` is unset or empty (<https://no-color.org>).
fn stderr_colours(stderr_is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// Install the global subscriber: the stderr log layer (`RUST_LOG`, default `info`; every line
/// through [`crate::log_redaction::redact`]; colours per [`stderr_colours`]) and, when
/// `config.enabled`, the OpenTelemetry layer exporting to [`TracingConfig::endpoint`]; also sets the
/// global W3C trace-context propagator. Fails if a subscriber is already installed or the exporter
/// cannot be set up.
pub fn init_subscriber(config: &TracingConfig) -> Result<TracingGuard, String> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(RedactedWriter(std::io::stderr))
        .with_ansi(stderr_colours(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref()))
        .with_filter(filter);
    let registry = tracing_subscriber::registry().with(logs);
    let installed = |e: tracing_subscriber::util::TryInitError| format!("cannot install the tracing subscriber: {e}");
    if !config.enabled {
        registry.try_init().map_err(installed)?;
        return Ok(TracingGuard {
            #[cfg(feature = "otlp")]
            _export: None,
        });
    }
    #[cfg(feature = "otlp")]
    {
        let (layer, export) = otlp::start(config)?;
        registry.with(layer).try_init().map_err(installed)?;
        opentelemetry::global::set_text_map_propagator(opentelemetry_sdk::propagation::TraceContextPropagator::new());
        EXPORTING.store(true, Ordering::Relaxed);
        tracing::info!(
            endpoint = %config.endpoint(),
            sample_ratio = config.sample_ratio,
            service_name = %config.service_name,
            "exporting spans over OTLP/gRPC"
        );
        Ok(TracingGuard { _export: Some(export) })
    }
    #[cfg(not(feature = "otlp"))]
    {
        drop(registry);
        Err(NOT_BUILT_IN.to_owned())
    }
}

/// Make `span` continue the caller's trace named by the `traceparent`/`tracestate` in `headers`.
/// Call before the span is first entered. Does nothing when not [`exporting`] or without a
/// `traceparent`.
pub fn continue_remote_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    #[cfg(feature = "otlp")]
    if exporting() && headers.contains_key(TRACEPARENT) {
        otlp::continue_remote_trace(span, headers);
    }
    #[cfg(not(feature = "otlp"))]
    let _ = (span, headers);
}

/// The W3C trace-context headers (`traceparent`, and `tracestate` when there is one) naming `span`
/// as the parent of an outgoing request. Empty when not [`exporting`] or for a disabled span.
pub fn trace_context_headers(span: &tracing::Span) -> http::HeaderMap {
    #[cfg(feature = "otlp")]
    if exporting() && !span.is_none() {
        return otlp::trace_context_headers(span);
    }
    #[cfg(not(feature = "otlp"))]
    let _ = span;
    http::HeaderMap::new()
}

/// The W3C `traceparent` header name.
pub const TRACEPARENT: &str = "traceparent";

#[cfg(feature = "otlp")]
mod otlp {
    use std::time::Duration;

    use opentelemetry::propagation::{Extractor, Injector};
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry::{KeyValue, global};
    use opentelemetry_otlp::WithExportConfig;
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
    use tracing::Subscriber;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::Layer;
    use tracing_subscriber::registry::LookupSpan;

    use super::TracingConfig;

    /// How long one export call may take.
    const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
    /// How long shutdown waits for the last batch, so a stopping worker is never held long by a
    /// collector that is down.
    const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

    /// A running exporter: the tracer provider (batching on its own thread) and the small Tokio
    /// runtime the tonic channel lives on. Independent of the worker's runtime, so it can be set up
    /// before that exists and outlives it to flush the last spans.
    pub(super) struct Export {
        provider: SdkTracerProvider,
        runtime: Option<tokio::runtime::Runtime>,
    }

    impl Drop for Export {
        fn drop(&mut self) {
            super::EXPORTING.store(false, std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT) {
                tracing::warn!(error = %e, "flushing the last spans failed");
            }
            if let Some(runtime) = self.runtime.take() {
                runtime.shutdown_timeout(Duration::from_secs(1));
            }
        }
    }

    /// Build the exporter and the layer that feeds it.
    pub(super) fn start<S>(config: &TracingConfig) -> Result<(impl Layer<S>, Export), String>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        let endpoint = config.endpoint();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-export")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the span export runtime: {e}"))?;
        let exporter = {
            // The tonic channel spawns its connection tasks on the runtime current at build time.
            let _runtime = runtime.enter();
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| format!("cannot set up OTLP span export to {endpoint}: {e}"))?
        };
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new("service.instance.id", uuid::Uuid::now_v7().to_string()))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(config.sample_ratio))))
            .with_resource(resource)
            .with_batch_exporter(exporter)
            .build();
        let only_gateway_spans = tracing_subscriber::filter::filter_fn(|meta| {
            meta.is_span() && meta.target().starts_with("respgw") && *meta.level() <= tracing::Level::INFO
        });
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("respgw"))
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(only_gateway_spans);
        Ok((layer, Export { provider, runtime: Some(runtime) }))
    }

    pub(super) fn continue_remote_trace(span: &tracing::Span, headers: &http::HeaderMap) {
        let parent = global::get_text_map_propagator(|propagator| propagator.extract(&HeaderExtractor(headers)));
        // Fails only if the span is already started or not exported; it then stays a root span.
        let _ = span.set_parent(parent);
    }

    pub(super) fn trace_context_headers(span: &tracing::Span) -> http::HeaderMap {
        let context = span.context();
        let mut headers = http::HeaderMap::new();
        global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&context, &mut HeaderInjector(&mut headers));
        });
        headers
    }

    struct HeaderExtractor<'a>(&'a http::HeaderMap);

    impl Extractor for HeaderExtractor<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|value| value.to_str().ok())
        }

        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(http::HeaderName::as_str).collect()
        }
    }

    struct HeaderInjector<'a>(&'a mut http::HeaderMap);

    impl Injector for HeaderInjector<'_> {
        fn set(&mut self, key: &str, value: String) {
            if let (Ok(name), Ok(value)) =
                (http::HeaderName::from_bytes(key.as_bytes()), http::HeaderValue::from_str(&value))
            {
                self.0.insert(name, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_off_one_percent_and_the_collector_service() {
        let config = TracingConfig::default();
        assert!(!config.enabled);
        assert_eq!(config.sample_ratio, 0.01);
        assert_eq!(config.endpoint(), "http://otel-collector:4317");
        assert_eq!(config.service_name, "respgw");
        assert!(config.check().is_ok());
    }

    #[test]
    fn sample_ratio_outside_zero_to_one_is_rejected_not_clamped() {
        for bad in ["1.5", "-0.1", "NaN", "inf", "half", ""] {
            assert!(parse_sample_ratio(bad).is_err(), "{bad}");
        }
        for (raw, ratio) in [("0", 0.0), ("1.0", 1.0), ("0.25", 0.25)] {
            assert_eq!(parse_sample_ratio(raw), Ok(ratio));
        }
    }

    #[test]
    fn collector_hosts_are_validated() {
        for bad in ["a b", "collector/x", "user@host", ""] {
            assert!(parse_collector_host(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_collector_host("127.0.0.1").as_deref(), Ok("127.0.0.1"));
    }

    #[test]
    fn ipv6_collector_addresses_are_bracketed() {
        for host in ["::1", "[::1]"] {
            let config =
                TracingConfig { collector_host: parse_collector_host(host).unwrap(), ..TracingConfig::default() };
            assert_eq!(config.endpoint(), "http://[::1]:4317");
        }
    }

    #[cfg(not(feature = "otlp"))]
    #[test]
    fn enabling_tracing_without_the_feature_is_an_error() {
        let err = TracingConfig { enabled: true, ..TracingConfig::default() }.check().unwrap_err();
        assert!(err.contains("built without tracing support"), "{err}");
    }

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(stderr_colours(true, None));
        assert!(stderr_colours(true, Some(OsStr::new(""))), "an empty NO_COLOR is unset");
        assert!(!stderr_colours(true, Some(OsStr::new("1"))));
        assert!(!stderr_colours(false, None), "a pipe, a file or the journal");
    }

    #[test]
    fn helpers_do_nothing_while_not_exporting() {
        let span = tracing::info_span!("request");
        let mut headers = http::HeaderMap::new();
        headers.insert(TRACEPARENT, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".parse().unwrap());
        continue_remote_trace(&span, &headers);
        assert!(trace_context_headers(&span).is_empty());
    }
}
