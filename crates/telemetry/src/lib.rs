//! Metrics for respgw: the twenty-four `gw_responses_*` families, how a worker records them, how the
//! supervisor merges the workers' snapshots, and how a merged view is exposed to Prometheus.
//!
//! Flow in standalone mode:
//! 1. every worker owns one [`Metrics`] and records into it ([`Metrics::record_request`],
//!    [`Metrics::in_flight`], [`Metrics::sse_stream`], tool, MCP, compaction and per-tenant
//!    recorders);
//! 2. it periodically sends [`Metrics::snapshot`] (a plain serde [`MetricsSnapshot`]) to the supervisor;
//! 3. the supervisor keeps a [`MergedMetrics`]: live snapshots plus the retained counters of dead workers;
//! 4. the worker that is scraped asks the supervisor for [`MergedMetrics::merged`] and serves
//!    [`render`] of it with [`CONTENT_TYPE`].
//!
//! A single-process deployment simply serves `render(&metrics.snapshot())`.
//!
//! Tracing: [`tracing_otlp`] installs the log subscriber and, when span export is on, exports
//! spans over OTLP/gRPC (cargo feature `otlp`); every log line passes through
//! [`log_redaction::redact`] on its way to stderr.
//!
//! # Files
//!
//! - `families.rs`: the `gw_responses_*` families as one static table, read by recording and
//!   exposition alike. Two are per tenant: tokens by `tenant`/`model`/`kind` (model names past a
//!   per-process cap folded into `other`) and requests by `tenant`/`status`.
//! - `recorder.rs`: the per-worker recorder ([`Metrics`]), with guards for in-flight handlers and
//!   open SSE streams, and the SQLite store's lock-wait count read from the store at each snapshot.
//! - `snapshot.rs`: the serde snapshots a worker sends. `merge.rs`: [`MergedMetrics`] — live
//!   snapshots plus the retained counters of exited workers (their gauges dropped), keyed by a
//!   per-process id so a restarted worker never makes a counter go backwards.
//! - `history.rs`: [`OverviewHistory`], the operator console's overview: a ring of the last hour
//!   of samples of the merged view (only the series the overview shows, cumulative), turned into
//!   per-step deltas and latency quantiles when asked.
//! - `exposition.rs`: the text exposition, written by hand because what is served is a merge of
//!   several processes' snapshots (`promtool check metrics` in the tests).
//! - `log_redaction.rs`: the one redactor every log line passes on its way to stderr
//!   (`RedactedWriter`), matching credentials by shape (URL userinfo, secret-named parameters,
//!   Authorization-like values), so libraries' lines are covered too.
//! - `tracing_otlp.rs`: the log subscriber (colours only on a terminal without `NO_COLOR`) and,
//!   behind the `otlp` cargo feature (off here, on by default in the `respgw` binary),
//!   OpenTelemetry export over OTLP/gRPC (`GW_TRACING_*`), W3C trace-context extraction for
//!   inbound requests and injection into upstream calls.

pub mod exposition;
pub mod families;
pub mod history;
pub mod log_redaction;
pub mod merge;
pub mod recorder;
pub mod snapshot;
pub mod tracing_otlp;

pub use exposition::{CONTENT_TYPE, render};
pub use families::{FAMILIES, FamilyDescriptor, MetricKind};
pub use history::{OverviewHistory, SeriesScope};
pub use merge::MergedMetrics;
pub use recorder::{BackgroundGuard, CompactionTrigger, InFlightGuard, Metrics, SseStreamGuard, TokenCounts, ToolType};
pub use snapshot::{CounterSample, GaugeSample, HistogramSample, Labels, MetricsSnapshot};
