//! Per-process recording: [`Metrics`] holds one worker's series and offers the small recording API
//! used by the HTTP layer and the engine, plus [`Metrics::snapshot`] for shipping to the supervisor.
//!
//! Why not the `prometheus` crate's registry: the gateway never exposes a single process's registry
//! directly; it exposes merged snapshots of several processes (see [`crate::merge`]), so the crate's
//! encoder could not be used anyway (it also refuses families without samples, and every family must
//! be listed). Its registry would only replace the two maps below while adding fallible registration
//! of constant names and a conversion from its f64-valued data model; a mutex-guarded map of plain
//! integers is simpler and keeps each histogram's buckets, sum and count consistent with each other.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::families::{
    BACKGROUND_CANCELS_TOTAL, BACKGROUND_LOST_TOTAL, BACKGROUND_QUEUED, BACKGROUND_RUNNING, COMPACTIONS_TOTAL,
    HTTP_IN_FLIGHT_REQUESTS, HTTP_REQUEST_DURATION_BUCKETS, HTTP_REQUEST_DURATION_SECONDS, HTTP_REQUESTS_TOTAL,
    LIMITS_REDIS_UP, MCP_APPROVAL_REQUESTS_TOTAL, MCP_APPROVAL_RESPONSES_TOTAL, MCP_SERVER_STARTUP_TOTAL,
    REQUESTS_BY_TENANT_TOTAL, SSE_CONNECTIONS_IN_FLIGHT, SSE_STREAM_DURATION_BUCKETS, SSE_STREAM_DURATION_SECONDS,
    STORE_LOCK_WAITS_TOTAL, TOKENS_TOTAL, TOOL_CALLS_EXECUTED_TOTAL, TOOL_CALLS_REQUESTED_TOTAL, TOOL_ERRORS_TOTAL,
    TOOL_EXECUTION_DURATION_BUCKETS, TOOL_EXECUTION_DURATION_SECONDS,
};
use crate::families::{
    INGESTION_CHUNKS_TOTAL, INGESTION_DURATION_BUCKETS, INGESTION_DURATION_SECONDS, INGESTION_FILES_TOTAL,
    SEARCH_DURATION_BUCKETS, SEARCH_DURATION_SECONDS,
};
use crate::snapshot::{CounterSample, GaugeSample, HistogramSample, Labels, MetricsSnapshot, sorted_labels};

/// Value of the `tool_type` label: a name fixed in the code of the tool kind it counts
/// (`function`, `code_interpreter`, `web_search`, `mcp`; each tool kind of the engine defines
/// its own), never one taken from a request, so the label keeps a handful of values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ToolType(&'static str);

impl ToolType {
    pub const fn new(label: &'static str) -> Self {
        ToolType(label)
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

/// What started a compaction: the `trigger` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionTrigger {
    /// `POST /v1/responses/compact`.
    Endpoint,
    /// A response's `context_management` threshold.
    Auto,
}

impl CompactionTrigger {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionTrigger::Endpoint => "endpoint",
            CompactionTrigger::Auto => "auto",
        }
    }
}

/// One process's metrics. Cheap to clone (all clones share the same series) and safe to use from
/// any thread.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    registry: Arc<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    http_in_flight: AtomicI64,
    sse_in_flight: AtomicI64,
    background_queued: AtomicI64,
    background_running: AtomicI64,
    series: Mutex<SeriesStore>,
    /// The model names given their own `model` label so far (at most [`MAX_MODEL_LABELS`]).
    models: Mutex<BTreeSet<String>>,
    /// Where `store_lock_waits_total` is read from: the store counts its own waits.
    store_lock_waits: OnceLock<CountSource>,
    /// Where `gw_responses_limits_redis_up` is read from: the limiter knows whether Redis answered.
    redis_up: OnceLock<CountSource>,
}

/// A counter kept elsewhere, read at each snapshot.
struct CountSource(Box<dyn Fn() -> u64 + Send + Sync>);

impl std::fmt::Debug for CountSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CountSource")
    }
}

/// Distinct `model` label values one process gives out; later models are counted as
/// [`OTHER_MODEL`]. Model names come from requests, so they are capped like any client value.
pub const MAX_MODEL_LABELS: usize = 32;
/// The `model` label of models past the cap.
pub const OTHER_MODEL: &str = "other";

/// Token counts of one response, as its `usage` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenCounts {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    pub reasoning: u64,
}

type SeriesKey = (&'static str, Labels);

#[derive(Debug, Default)]
struct SeriesStore {
    counters: BTreeMap<SeriesKey, u64>,
    histograms: BTreeMap<SeriesKey, HistogramCells>,
}

/// Live histogram state: per-bucket (non-cumulative) counts, the last cell being `+Inf`.
#[derive(Debug)]
struct HistogramCells {
    upper_bounds: &'static [f64],
    per_bucket_counts: Vec<u64>,
    sum: f64,
}

impl HistogramCells {
    fn new(upper_bounds: &'static [f64]) -> Self {
        HistogramCells { upper_bounds, per_bucket_counts: vec![0; upper_bounds.len() + 1], sum: 0.0 }
    }

    fn observe(&mut self, value: f64) {
        let index = self.upper_bounds.iter().position(|bound| value <= *bound).unwrap_or(self.upper_bounds.len());
        if let Some(cell) = self.per_bucket_counts.get_mut(index) {
            *cell = cell.saturating_add(1);
        }
        self.sum += value;
    }

    fn to_sample(&self, name: &str, labels: &Labels) -> HistogramSample {
        let mut running = 0u64;
        let mut cumulative_counts = Vec::with_capacity(self.upper_bounds.len());
        for cell in &self.per_bucket_counts[..self.upper_bounds.len()] {
            running = running.saturating_add(*cell);
            cumulative_counts.push(running);
        }
        let count = self.per_bucket_counts.iter().fold(0u64, |total, cell| total.saturating_add(*cell));
        HistogramSample {
            name: name.to_owned(),
            labels: labels.clone(),
            upper_bounds: self.upper_bounds.to_vec(),
            cumulative_counts,
            sum: self.sum,
            count,
        }
    }
}

impl Metrics {
    /// A fresh set of series, all at zero.
    pub fn new() -> Self {
        Metrics::default()
    }

    /// Records one completed HTTP request: `http_requests_total{method,route,status}` += 1 and
    /// `elapsed` into `http_request_duration_seconds{method,route}`. `route` is the route template
    /// (e.g. `/v1/responses/{response_id}`), never the raw path.
    pub fn record_request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        let status = status.to_string();
        let counter_labels = sorted_labels(&[("method", method), ("route", route), ("status", &status)]);
        let histogram_labels = sorted_labels(&[("method", method), ("route", route)]);
        let mut series = self.lock_series();
        series.increment(HTTP_REQUESTS_TOTAL, counter_labels);
        series.observe(HTTP_REQUEST_DURATION_SECONDS, HTTP_REQUEST_DURATION_BUCKETS, histogram_labels, elapsed);
    }

    /// Counts one request handler as running until the returned guard is dropped
    /// (`http_in_flight_requests`).
    #[must_use = "the request stops counting as in flight when the guard is dropped"]
    pub fn in_flight(&self) -> InFlightGuard {
        self.registry.http_in_flight.fetch_add(1, Ordering::Relaxed);
        InFlightGuard { registry: Arc::clone(&self.registry) }
    }

    /// Counts one open SSE stream until the returned guard is dropped (`sse_connections_in_flight`);
    /// on drop, the time since this call is observed into `sse_stream_duration_seconds{route}`.
    #[must_use = "the stream is closed (and its duration observed) when the guard is dropped"]
    pub fn sse_stream(&self, route: &str) -> SseStreamGuard {
        self.registry.sse_in_flight.fetch_add(1, Ordering::Relaxed);
        SseStreamGuard { registry: Arc::clone(&self.registry), route: route.to_owned(), started: Instant::now() }
    }

    /// Counts one tool call the model started (`tool_calls_requested_total{tool_type}`).
    pub fn tool_requested(&self, tool_type: ToolType) {
        self.lock_series().increment(TOOL_CALLS_REQUESTED_TOTAL, sorted_labels(&[("tool_type", tool_type.as_str())]));
    }

    /// Records one tool execution by the gateway: `tool_calls_executed_total` += 1, `elapsed` into
    /// `tool_execution_duration_seconds`, and when `ok` is false also `tool_errors_total` += 1.
    pub fn tool_executed(&self, tool_type: ToolType, elapsed: Duration, ok: bool) {
        let labels = sorted_labels(&[("tool_type", tool_type.as_str())]);
        let mut series = self.lock_series();
        series.increment(TOOL_CALLS_EXECUTED_TOTAL, labels.clone());
        if !ok {
            series.increment(TOOL_ERRORS_TOTAL, labels.clone());
        }
        series.observe(TOOL_EXECUTION_DURATION_SECONDS, TOOL_EXECUTION_DURATION_BUCKETS, labels, elapsed);
    }

    /// Counts one MCP tool call held for the client's approval
    /// (`mcp_approval_requests_total{server_label}`). `server_label` must come from a bounded set
    /// (configured servers, or one value standing for all request-declared ones).
    pub fn mcp_approval_requested(&self, server_label: &str) {
        self.lock_series().increment(MCP_APPROVAL_REQUESTS_TOTAL, sorted_labels(&[("server_label", server_label)]));
    }

    /// Counts one client answer to an MCP approval request that the gateway acted on
    /// (`mcp_approval_responses_total{decision,server_label}`, decision `approved` or `denied`).
    pub fn mcp_approval_answered(&self, server_label: &str, approved: bool) {
        let decision = if approved { "approved" } else { "denied" };
        self.lock_series().increment(
            MCP_APPROVAL_RESPONSES_TOTAL,
            sorted_labels(&[("decision", decision), ("server_label", server_label)]),
        );
    }

    /// Records one Built-in MCP server start (`mcp_server_startup_total{server_label,status}`,
    /// status `ok` or `error`).
    pub fn mcp_server_startup(&self, server_label: &str, ok: bool) {
        let status = if ok { "ok" } else { "error" };
        self.lock_series()
            .increment(MCP_SERVER_STARTUP_TOTAL, sorted_labels(&[("server_label", server_label), ("status", status)]));
    }

    /// Counts one compaction (`compactions_total{trigger,outcome}`, outcome `ok` or `error`).
    pub fn compaction(&self, trigger: CompactionTrigger, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.lock_series()
            .increment(COMPACTIONS_TOTAL, sorted_labels(&[("outcome", outcome), ("trigger", trigger.as_str())]));
    }

    /// Counts one background response as waiting for a run slot in this process until the guard
    /// is dropped (`background_queued`).
    #[must_use = "the response stops counting as queued when the guard is dropped"]
    pub fn background_queued(&self) -> BackgroundGuard {
        BackgroundGuard::new(&self.registry, |r| &r.background_queued)
    }

    /// Counts one background response as running in this process until the guard is dropped
    /// (`background_running`).
    #[must_use = "the response stops counting as running when the guard is dropped"]
    pub fn background_running(&self) -> BackgroundGuard {
        BackgroundGuard::new(&self.registry, |r| &r.background_running)
    }

    /// Counts one background response a client cancelled (`background_cancels_total`).
    pub fn background_cancelled(&self) {
        self.lock_series().increment(BACKGROUND_CANCELS_TOTAL, Vec::new());
    }

    /// Counts one background response failed because its owner stopped renewing its lease
    /// (`background_lost_total`).
    pub fn background_lost(&self) {
        self.lock_series().increment(BACKGROUND_LOST_TOTAL, Vec::new());
    }

    /// Reads `store_lock_waits_total` from `source`, the store's own count, at every snapshot.
    /// Only the first source given counts.
    pub fn count_store_lock_waits_from(&self, source: impl Fn() -> u64 + Send + Sync + 'static) {
        let _ = self.registry.store_lock_waits.set(CountSource(Box::new(source)));
    }

    /// Reads `gw_responses_limits_redis_up` (1 when this process's last call to the limits' Redis
    /// succeeded) from `source` at every snapshot; without a source the gauge is absent.
    pub fn limits_redis_up_from(&self, source: impl Fn() -> u64 + Send + Sync + 'static) {
        let _ = self.registry.redis_up.set(CountSource(Box::new(source)));
    }

    /// Adds one response's token counts to `tokens_total{tenant,model,kind}`. `tenant` must come
    /// from the keys file (never from a request); `model` is folded into `other` past
    /// [`MAX_MODEL_LABELS`] distinct models.
    pub fn tokens(&self, tenant: &str, model: &str, counts: TokenCounts) {
        let model = self.model_label(model);
        let mut series = self.lock_series();
        for (kind, n) in [
            ("input", counts.input),
            ("output", counts.output),
            ("cached", counts.cached),
            ("reasoning", counts.reasoning),
        ] {
            series.add(TOKENS_TOTAL, sorted_labels(&[("kind", kind), ("model", &model), ("tenant", tenant)]), n);
        }
    }

    /// Counts one authenticated API request of `tenant` (`requests_by_tenant_total{tenant,status}`).
    pub fn tenant_request(&self, tenant: &str, status: u16) {
        let status = status.to_string();
        self.lock_series()
            .increment(REQUESTS_BY_TENANT_TOTAL, sorted_labels(&[("status", &status), ("tenant", tenant)]));
    }

    /// Records one vector-store file's ingestion: `ingestion_files_total{outcome}` += 1 (outcome
    /// `completed` or `failed`), `chunks` into `ingestion_chunks_total`, `elapsed` into
    /// `ingestion_duration_seconds{outcome}`.
    pub fn retrieval_ingested(&self, completed: bool, chunks: u64, elapsed: Duration) {
        let outcome = if completed { "completed" } else { "failed" };
        let labels = sorted_labels(&[("outcome", outcome)]);
        let mut series = self.lock_series();
        series.increment(INGESTION_FILES_TOTAL, labels.clone());
        series.add(INGESTION_CHUNKS_TOTAL, Vec::new(), chunks);
        series.observe(INGESTION_DURATION_SECONDS, INGESTION_DURATION_BUCKETS, labels, elapsed);
    }

    /// Records one vector-store search's duration (`search_duration_seconds`).
    pub fn retrieval_search(&self, elapsed: Duration) {
        self.lock_series().observe(SEARCH_DURATION_SECONDS, SEARCH_DURATION_BUCKETS, Vec::new(), elapsed);
    }

    /// `model` itself while fewer than [`MAX_MODEL_LABELS`] models have their own label, else
    /// [`OTHER_MODEL`].
    fn model_label(&self, model: &str) -> String {
        let mut models = self.registry.models.lock().unwrap_or_else(PoisonError::into_inner);
        if models.contains(model) {
            return model.to_owned();
        }
        if models.len() < MAX_MODEL_LABELS && model != OTHER_MODEL {
            models.insert(model.to_owned());
            return model.to_owned();
        }
        OTHER_MODEL.to_owned()
    }

    /// Copies every series as it is now. The gauges are always present; counters and histograms
    /// appear once they have a sample. Series are sorted by (name, labels).
    pub fn snapshot(&self) -> MetricsSnapshot {
        let mut gauges = vec![
            GaugeSample {
                name: HTTP_IN_FLIGHT_REQUESTS.to_owned(),
                labels: Vec::new(),
                value: self.registry.http_in_flight.load(Ordering::Relaxed),
            },
            GaugeSample {
                name: SSE_CONNECTIONS_IN_FLIGHT.to_owned(),
                labels: Vec::new(),
                value: self.registry.sse_in_flight.load(Ordering::Relaxed),
            },
            GaugeSample {
                name: BACKGROUND_QUEUED.to_owned(),
                labels: Vec::new(),
                value: self.registry.background_queued.load(Ordering::Relaxed),
            },
            GaugeSample {
                name: BACKGROUND_RUNNING.to_owned(),
                labels: Vec::new(),
                value: self.registry.background_running.load(Ordering::Relaxed),
            },
        ];
        if let Some(CountSource(source)) = self.registry.redis_up.get() {
            let value = i64::try_from(source()).unwrap_or(i64::MAX);
            gauges.push(GaugeSample { name: LIMITS_REDIS_UP.to_owned(), labels: Vec::new(), value });
        }
        let series = self.lock_series();
        let mut counters: Vec<CounterSample> = series
            .counters
            .iter()
            .map(|((name, labels), value)| CounterSample {
                name: (*name).to_owned(),
                labels: labels.clone(),
                value: *value,
            })
            .collect();
        if let Some(CountSource(source)) = self.registry.store_lock_waits.get() {
            let sample = CounterSample { name: STORE_LOCK_WAITS_TOTAL.to_owned(), labels: Vec::new(), value: source() };
            let at =
                counters.partition_point(|c| (c.name.as_str(), &c.labels) < (sample.name.as_str(), &sample.labels));
            counters.insert(at, sample);
        }
        let histograms =
            series.histograms.iter().map(|((name, labels), cells)| cells.to_sample(name, labels)).collect();
        MetricsSnapshot { counters, gauges, histograms }
    }

    fn lock_series(&self) -> MutexGuard<'_, SeriesStore> {
        self.registry.lock_series()
    }
}

impl Registry {
    fn lock_series(&self) -> MutexGuard<'_, SeriesStore> {
        // A panic while holding the lock leaves at worst one half-recorded observation; keep serving.
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl SeriesStore {
    fn increment(&mut self, name: &'static str, labels: Labels) {
        self.add(name, labels, 1);
    }

    fn add(&mut self, name: &'static str, labels: Labels, n: u64) {
        let value = self.counters.entry((name, labels)).or_insert(0);
        *value = value.saturating_add(n);
    }

    fn observe(&mut self, name: &'static str, upper_bounds: &'static [f64], labels: Labels, elapsed: Duration) {
        self.histograms
            .entry((name, labels))
            .or_insert_with(|| HistogramCells::new(upper_bounds))
            .observe(elapsed.as_secs_f64());
    }
}

/// Keeps `http_in_flight_requests` incremented while alive; see [`Metrics::in_flight`].
#[derive(Debug)]
#[must_use = "the request stops counting as in flight when the guard is dropped"]
pub struct InFlightGuard {
    registry: Arc<Registry>,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.registry.http_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Keeps one of the background gauges incremented while alive; see [`Metrics::background_queued`]
/// and [`Metrics::background_running`].
#[must_use = "the gauge is decremented when the guard is dropped"]
pub struct BackgroundGuard {
    registry: Arc<Registry>,
    gauge: fn(&Registry) -> &AtomicI64,
}

impl std::fmt::Debug for BackgroundGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundGuard").finish_non_exhaustive()
    }
}

impl BackgroundGuard {
    fn new(registry: &Arc<Registry>, gauge: fn(&Registry) -> &AtomicI64) -> Self {
        gauge(registry).fetch_add(1, Ordering::Relaxed);
        BackgroundGuard { registry: Arc::clone(registry), gauge }
    }
}

impl Drop for BackgroundGuard {
    fn drop(&mut self) {
        (self.gauge)(&self.registry).fetch_sub(1, Ordering::Relaxed);
    }
}

/// Keeps `sse_connections_in_flight` incremented while alive and observes the stream's lifetime
/// on drop; see [`Metrics::sse_stream`].
#[derive(Debug)]
#[must_use = "the stream is closed (and its duration observed) when the guard is dropped"]
pub struct SseStreamGuard {
    registry: Arc<Registry>,
    route: String,
    started: Instant,
}

impl Drop for SseStreamGuard {
    fn drop(&mut self) {
        self.registry.sse_in_flight.fetch_sub(1, Ordering::Relaxed);
        let labels = sorted_labels(&[("route", &self.route)]);
        let elapsed = self.started.elapsed();
        self.registry.lock_series().observe(SSE_STREAM_DURATION_SECONDS, SSE_STREAM_DURATION_BUCKETS, labels, elapsed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POST: &[(&str, &str)] = &[("method", "POST"), ("route", "/v1/responses")];

    #[test]
    fn record_request_counts_by_status_and_observes_duration() {
        let metrics = Metrics::new();
        metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(3));
        metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(70));
        metrics.record_request("POST", "/v1/responses", 400, Duration::from_secs(100));
        let snapshot = metrics.snapshot();
        let ok = [("method", "POST"), ("route", "/v1/responses"), ("status", "200")];
        let bad = [("method", "POST"), ("route", "/v1/responses"), ("status", "400")];
        assert_eq!(snapshot.counter(HTTP_REQUESTS_TOTAL, &ok), Some(2));
        assert_eq!(snapshot.counter(HTTP_REQUESTS_TOTAL, &bad), Some(1));
        let histogram = snapshot.histogram(HTTP_REQUEST_DURATION_SECONDS, POST).expect("histogram");
        assert_eq!(histogram.count, 3);
        assert_eq!(histogram.upper_bounds, HTTP_REQUEST_DURATION_BUCKETS);
        // 0.003 <= 0.005; 0.07 <= 0.1; 100 s only in +Inf.
        assert_eq!(histogram.cumulative_counts[0], 1);
        assert_eq!(histogram.cumulative_counts[3], 1); // le=0.05
        assert_eq!(histogram.cumulative_counts[4], 2); // le=0.1
        assert_eq!(histogram.cumulative_counts.last(), Some(&2)); // le=60
        assert!((histogram.sum - 100.073).abs() < 1e-9);
    }

    #[test]
    fn store_lock_waits_are_read_from_their_source_in_order() {
        let metrics = Metrics::new();
        metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(3));
        metrics.background_lost();
        assert_eq!(metrics.snapshot().counter(STORE_LOCK_WAITS_TOTAL, &[]), None, "no store counts yet");
        let waits = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let source = Arc::clone(&waits);
        metrics.count_store_lock_waits_from(move || source.load(Ordering::Relaxed));
        metrics.count_store_lock_waits_from(|| 1000);
        waits.store(3, Ordering::Relaxed);
        let snapshot = metrics.snapshot();
        assert_eq!(snapshot.counter(STORE_LOCK_WAITS_TOTAL, &[]), Some(3), "the first source counts");
        let names: Vec<&str> = snapshot.counters.iter().map(|c| c.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn observation_on_a_bound_lands_in_that_bucket() {
        let metrics = Metrics::new();
        metrics.tool_executed(ToolType::new("web_search"), Duration::from_millis(10), true);
        let snapshot = metrics.snapshot();
        let histogram =
            snapshot.histogram(TOOL_EXECUTION_DURATION_SECONDS, &[("tool_type", "web_search")]).expect("histogram");
        assert_eq!(histogram.cumulative_counts[0], 1, "le=0.01 includes 0.01");
    }

    #[test]
    fn in_flight_guard_decrements_on_drop() {
        let metrics = Metrics::new();
        let first = metrics.in_flight();
        let second = metrics.clone().in_flight();
        assert_eq!(metrics.snapshot().gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(2));
        drop(first);
        assert_eq!(metrics.snapshot().gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(1));
        drop(second);
        assert_eq!(metrics.snapshot().gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(0));
        assert_eq!(metrics.snapshot().gauge(SSE_CONNECTIONS_IN_FLIGHT, &[]), Some(0));
    }

    #[test]
    fn sse_guard_decrements_and_observes_lifetime_on_drop() {
        let metrics = Metrics::new();
        let guard = metrics.sse_stream("/v1/responses");
        assert_eq!(metrics.snapshot().gauge(SSE_CONNECTIONS_IN_FLIGHT, &[]), Some(1));
        assert!(metrics.snapshot().histogram(SSE_STREAM_DURATION_SECONDS, &[("route", "/v1/responses")]).is_none());
        std::thread::sleep(Duration::from_millis(5));
        drop(guard);
        let snapshot = metrics.snapshot();
        assert_eq!(snapshot.gauge(SSE_CONNECTIONS_IN_FLIGHT, &[]), Some(0));
        let histogram =
            snapshot.histogram(SSE_STREAM_DURATION_SECONDS, &[("route", "/v1/responses")]).expect("observed");
        assert_eq!(histogram.count, 1);
        assert!(histogram.sum >= 0.005);
        assert_eq!(histogram.cumulative_counts[0], 1, "a 5 ms stream is <= 0.25 s");
    }

    #[test]
    fn tool_recorders_count_requests_executions_and_errors() {
        let metrics = Metrics::new();
        metrics.tool_requested(ToolType::new("function"));
        metrics.tool_requested(ToolType::new("mcp"));
        metrics.tool_requested(ToolType::new("mcp"));
        metrics.tool_executed(ToolType::new("mcp"), Duration::from_millis(30), true);
        metrics.tool_executed(ToolType::new("mcp"), Duration::from_secs(200), false);
        metrics.tool_executed(ToolType::new("code_interpreter"), Duration::from_secs(1), true);
        let snapshot = metrics.snapshot();
        assert_eq!(snapshot.counter(TOOL_CALLS_REQUESTED_TOTAL, &[("tool_type", "function")]), Some(1));
        assert_eq!(snapshot.counter(TOOL_CALLS_REQUESTED_TOTAL, &[("tool_type", "mcp")]), Some(2));
        assert_eq!(snapshot.counter(TOOL_CALLS_EXECUTED_TOTAL, &[("tool_type", "mcp")]), Some(2));
        assert_eq!(snapshot.counter(TOOL_CALLS_EXECUTED_TOTAL, &[("tool_type", "code_interpreter")]), Some(1));
        assert_eq!(snapshot.counter(TOOL_ERRORS_TOTAL, &[("tool_type", "mcp")]), Some(1));
        assert_eq!(snapshot.counter(TOOL_ERRORS_TOTAL, &[("tool_type", "code_interpreter")]), None);
        let mcp = snapshot.histogram(TOOL_EXECUTION_DURATION_SECONDS, &[("tool_type", "mcp")]).expect("histogram");
        assert_eq!((mcp.count, mcp.cumulative_counts.last().copied()), (2, Some(1)));
    }

    #[test]
    fn compactions_count_by_trigger_and_outcome() {
        let metrics = Metrics::new();
        metrics.compaction(CompactionTrigger::Endpoint, true);
        metrics.compaction(CompactionTrigger::Endpoint, true);
        metrics.compaction(CompactionTrigger::Auto, false);
        let counters = metrics.snapshot().counters;
        let count = |outcome: &str, trigger: &str| {
            counters
                .iter()
                .find(|c| {
                    c.name == COMPACTIONS_TOTAL
                        && c.labels
                            == [("outcome".to_owned(), outcome.to_owned()), ("trigger".to_owned(), trigger.to_owned())]
                })
                .map(|c| c.value)
        };
        assert_eq!(count("ok", "endpoint"), Some(2));
        assert_eq!(count("error", "auto"), Some(1));
        assert_eq!(count("ok", "auto"), None);
    }

    #[test]
    fn mcp_server_startup_counts_ok_and_error() {
        let metrics = Metrics::new();
        metrics.mcp_server_startup("files", true);
        metrics.mcp_server_startup("files", false);
        metrics.mcp_server_startup("files", false);
        let snapshot = metrics.snapshot();
        assert_eq!(snapshot.counter(MCP_SERVER_STARTUP_TOTAL, &[("server_label", "files"), ("status", "ok")]), Some(1));
        assert_eq!(
            snapshot.counter(MCP_SERVER_STARTUP_TOTAL, &[("status", "error"), ("server_label", "files")]),
            Some(2)
        );
    }

    #[test]
    fn mcp_approvals_count_requests_and_decisions_by_server() {
        let metrics = Metrics::new();
        metrics.mcp_approval_requested("files");
        metrics.mcp_approval_requested("files");
        metrics.mcp_approval_answered("files", true);
        metrics.mcp_approval_answered("files", false);
        metrics.mcp_approval_answered("(remote)", false);
        let snapshot = metrics.snapshot();
        assert_eq!(snapshot.counter(MCP_APPROVAL_REQUESTS_TOTAL, &[("server_label", "files")]), Some(2));
        let answered = |decision, label| {
            snapshot.counter(MCP_APPROVAL_RESPONSES_TOTAL, &[("decision", decision), ("server_label", label)])
        };
        assert_eq!(answered("approved", "files"), Some(1));
        assert_eq!(answered("denied", "files"), Some(1));
        assert_eq!(answered("denied", "(remote)"), Some(1));
        assert_eq!(answered("approved", "(remote)"), None);
    }

    #[test]
    fn recording_from_many_threads_adds_up() {
        let metrics = Metrics::new();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                let metrics = metrics.clone();
                scope.spawn(move || {
                    for _ in 0..250 {
                        let _guard = metrics.in_flight();
                        metrics.record_request("GET", "/v1/responses/{response_id}", 200, Duration::ZERO);
                    }
                });
            }
        });
        let snapshot = metrics.snapshot();
        let labels = [("method", "GET"), ("route", "/v1/responses/{response_id}"), ("status", "200")];
        assert_eq!(snapshot.counter(HTTP_REQUESTS_TOTAL, &labels), Some(1000));
        assert_eq!(snapshot.gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(0));
    }
}
