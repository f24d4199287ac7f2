//! Metrics for respgw: the twenty `gw_responses_*` families, how a worker records them, how the
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

pub mod exposition;
pub mod families;
pub mod log_redaction;
pub mod merge;
pub mod recorder;
pub mod snapshot;
pub mod tracing_otlp;

pub use exposition::{CONTENT_TYPE, render};
pub use families::{FAMILIES, FamilyDescriptor, MetricKind};
pub use merge::MergedMetrics;
pub use recorder::{BackgroundGuard, CompactionTrigger, InFlightGuard, Metrics, SseStreamGuard, TokenCounts, ToolType};
pub use snapshot::{CounterSample, GaugeSample, HistogramSample, Labels, MetricsSnapshot};
