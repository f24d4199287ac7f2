//! The operator console's overview: a ring of samples of the gateway's metrics over the last hour,
//! and the per-step points computed from it when asked.
//!
//! Whoever holds the merged view (the supervisor, or a process serving alone) calls
//! [`OverviewHistory::record`] every step with the view at that moment. A sample keeps only the
//! series the overview shows, as cumulative values: the two gauges, the HTTP request-duration
//! histogram summed over its routes, requests per tenant (all, 4xx, 5xx) and input/output tokens
//! per tenant and model. Tenant names and (tenant, model) pairs are interned once for the whole
//! ring; a sample holds plain numbers indexed by them.
//!
//! [`OverviewHistory::series`] turns consecutive samples into per-step deltas (a counter that
//! reads lower than in the sample before counts as no change, never as a negative one) and the
//! latency quantiles into linear interpolations within the histogram buckets' deltas.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::families::{
    HTTP_IN_FLIGHT_REQUESTS, HTTP_REQUEST_DURATION_SECONDS, REQUESTS_BY_TENANT_TOTAL, SSE_CONNECTIONS_IN_FLIGHT,
    TOKENS_TOTAL,
};
use crate::snapshot::MetricsSnapshot;

/// How far back the ring reaches.
pub const HISTORY_SECONDS: u64 = 3600;

/// Samples of the overview's series, oldest first, covering the last [`HISTORY_SECONDS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverviewHistory {
    step_seconds: u64,
    /// Bucket upper bounds of the request-duration histogram (without `+Inf`).
    latency_bounds: Vec<f64>,
    /// Tenant names; a sample's `requests[i]` is tenant `i`'s.
    tenants: Vec<String>,
    /// (tenant index, model); a sample's `tokens[i]` is pair `i`'s.
    models: Vec<(usize, String)>,
    samples: VecDeque<Sample>,
}

/// The series at one moment, cumulative. Indexes past the end of a vector read as 0: the series
/// had not appeared yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Sample {
    unix_seconds: u64,
    open_streams: i64,
    in_flight: i64,
    /// Cumulative bucket counts of the request-duration histogram, then its total count.
    latency: Vec<u64>,
    /// Per tenant: requests, client errors (4xx), errors (5xx).
    requests: Vec<[u64; 3]>,
    /// Per (tenant, model): input, output tokens.
    tokens: Vec<[u64; 2]>,
}

/// Whose activity a series shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesScope<'a> {
    /// Every tenant, and the gateway-wide gauges and latency.
    All,
    /// This tenant only; gateway-wide values are left out (`null`).
    Tenant(&'a str),
}

/// The points within a window, and the totals over them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverviewSeries {
    /// One point per step, oldest first.
    pub points: Vec<OverviewPoint>,
    /// Per tenant, the sum of the points' activity (tenants with none are left out).
    pub totals: BTreeMap<String, TenantActivity>,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OverviewPoint {
    /// Unix seconds at the end of the step.
    pub t: u64,
    /// Open SSE streams at `t` (gateway-wide; `None` outside [`SeriesScope::All`]).
    pub open_streams: Option<i64>,
    /// Requests being handled at `t` (gateway-wide; `None` outside [`SeriesScope::All`]).
    pub in_flight: Option<i64>,
    /// Request-duration quantiles over the step; `None` when no request ended in it or outside
    /// [`SeriesScope::All`].
    pub latency_ms: Option<Latency>,
    /// Activity of each tenant in the step (tenants with none are left out).
    pub tenants: BTreeMap<String, TenantActivity>,
}

/// Request-duration quantiles, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p95: f64,
}

/// What one tenant did over a step or a window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TenantActivity {
    /// Requests answered.
    pub requests: u64,
    /// Of which answered with a 4xx status.
    pub client_errors: u64,
    /// Of which answered with a 5xx status.
    pub errors: u64,
    /// Tokens per model.
    pub tokens: BTreeMap<String, TokenActivity>,
}

/// Tokens of one model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TokenActivity {
    pub input: u64,
    pub output: u64,
}

impl OverviewHistory {
    /// An empty ring sampled every `step_seconds` (at least 1).
    pub fn new(step_seconds: u64) -> OverviewHistory {
        OverviewHistory {
            step_seconds: step_seconds.max(1),
            latency_bounds: Vec::new(),
            tenants: Vec::new(),
            models: Vec::new(),
            samples: VecDeque::new(),
        }
    }

    /// Seconds between two samples.
    pub fn step_seconds(&self) -> u64 {
        self.step_seconds
    }

    /// Number of samples held.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether nothing has been sampled yet.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Most samples the ring holds: an hour of steps, plus the one the first step starts from.
    fn capacity(&self) -> usize {
        usize::try_from(HISTORY_SECONDS.div_ceil(self.step_seconds)).unwrap_or(usize::MAX).saturating_add(1)
    }

    /// Appends the overview's series of `snapshot` as they stand at `unix_seconds`, dropping the
    /// oldest sample once the ring covers an hour.
    pub fn record(&mut self, unix_seconds: u64, snapshot: &MetricsSnapshot) {
        let mut sample = Sample {
            unix_seconds,
            open_streams: snapshot.gauge(SSE_CONNECTIONS_IN_FLIGHT, &[]).unwrap_or(0),
            in_flight: snapshot.gauge(HTTP_IN_FLIGHT_REQUESTS, &[]).unwrap_or(0),
            latency: self.latency_counts(snapshot),
            requests: Vec::new(),
            tokens: Vec::new(),
        };
        for counter in &snapshot.counters {
            if counter.name == REQUESTS_BY_TENANT_TOTAL {
                let (Some(tenant), Some(status)) = (label(&counter.labels, "tenant"), label(&counter.labels, "status"))
                else {
                    continue;
                };
                let index = self.tenant_index(tenant);
                let row = slot(&mut sample.requests, index);
                row[0] = row[0].saturating_add(counter.value);
                match status.parse::<u16>() {
                    Ok(400..=499) => row[1] = row[1].saturating_add(counter.value),
                    Ok(500..) => row[2] = row[2].saturating_add(counter.value),
                    _ => {}
                }
            } else if counter.name == TOKENS_TOTAL {
                let (Some(tenant), Some(model), Some(kind)) =
                    (label(&counter.labels, "tenant"), label(&counter.labels, "model"), label(&counter.labels, "kind"))
                else {
                    continue;
                };
                let column = match kind {
                    "input" => 0,
                    "output" => 1,
                    _ => continue,
                };
                let index = self.model_index(tenant, model);
                let row = slot(&mut sample.tokens, index);
                row[column] = row[column].saturating_add(counter.value);
            }
        }
        if self.samples.len() >= self.capacity() {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// The request-duration histogram summed over its series: cumulative bucket counts, then the
    /// total. Series whose bounds differ from the first one seen are left out.
    fn latency_counts(&mut self, snapshot: &MetricsSnapshot) -> Vec<u64> {
        let mut counts: Vec<u64> = Vec::new();
        for histogram in snapshot.histograms.iter().filter(|h| h.name == HTTP_REQUEST_DURATION_SECONDS) {
            if self.latency_bounds.is_empty() {
                self.latency_bounds.clone_from(&histogram.upper_bounds);
            }
            if histogram.upper_bounds != self.latency_bounds {
                continue;
            }
            if counts.is_empty() {
                counts = vec![0; self.latency_bounds.len() + 1];
            }
            let totals = histogram.cumulative_counts.iter().chain(std::iter::once(&histogram.count));
            for (sum, count) in counts.iter_mut().zip(totals) {
                *sum = sum.saturating_add(*count);
            }
        }
        counts
    }

    fn tenant_index(&mut self, tenant: &str) -> usize {
        match self.tenants.iter().position(|t| t == tenant) {
            Some(index) => index,
            None => {
                self.tenants.push(tenant.to_owned());
                self.tenants.len() - 1
            }
        }
    }

    fn model_index(&mut self, tenant: &str, model: &str) -> usize {
        let tenant = self.tenant_index(tenant);
        match self.models.iter().position(|(t, m)| *t == tenant && m == model) {
            Some(index) => index,
            None => {
                self.models.push((tenant, model.to_owned()));
                self.models.len() - 1
            }
        }
    }

    /// The points whose step ends within the `window_seconds` before `now` (unix seconds), as
    /// `scope` may see them, with their totals.
    pub fn series(&self, now: u64, window_seconds: u64, scope: SeriesScope<'_>) -> OverviewSeries {
        let since = now.saturating_sub(window_seconds);
        let mut series = OverviewSeries { points: Vec::new(), totals: BTreeMap::new() };
        let pairs = self.samples.iter().zip(self.samples.iter().skip(1));
        for (before, after) in pairs.filter(|(_, after)| after.unix_seconds > since && after.unix_seconds <= now) {
            let point = self.point(before, after, scope);
            for (tenant, activity) in &point.tenants {
                series.totals.entry(tenant.clone()).or_default().add(activity);
            }
            series.points.push(point);
        }
        series
    }

    fn point(&self, before: &Sample, after: &Sample, scope: SeriesScope<'_>) -> OverviewPoint {
        let everyone = scope == SeriesScope::All;
        let mut tenants: BTreeMap<String, TenantActivity> = BTreeMap::new();
        for (index, name) in self.tenants.iter().enumerate() {
            if matches!(scope, SeriesScope::Tenant(own) if own != name) {
                continue;
            }
            let (now, then) = (at(&after.requests, index), at(&before.requests, index));
            let activity = TenantActivity {
                requests: now[0].saturating_sub(then[0]),
                client_errors: now[1].saturating_sub(then[1]),
                errors: now[2].saturating_sub(then[2]),
                tokens: BTreeMap::new(),
            };
            if activity.requests > 0 {
                tenants.insert(name.clone(), activity);
            }
        }
        for (index, (tenant, model)) in self.models.iter().enumerate() {
            let Some(name) = self.tenants.get(*tenant) else { continue };
            if matches!(scope, SeriesScope::Tenant(own) if own != name) {
                continue;
            }
            let (now, then) = (at(&after.tokens, index), at(&before.tokens, index));
            let tokens =
                TokenActivity { input: now[0].saturating_sub(then[0]), output: now[1].saturating_sub(then[1]) };
            if tokens.input > 0 || tokens.output > 0 {
                tenants.entry(name.clone()).or_default().tokens.insert(model.clone(), tokens);
            }
        }
        OverviewPoint {
            t: after.unix_seconds,
            open_streams: everyone.then_some(after.open_streams),
            in_flight: everyone.then_some(after.in_flight),
            latency_ms: if everyone { self.latency(before, after) } else { None },
            tenants,
        }
    }

    /// p50 and p95 of the requests that ended between two samples.
    fn latency(&self, before: &Sample, after: &Sample) -> Option<Latency> {
        let deltas: Vec<u64> = (0..after.latency.len())
            .map(|i| after.latency[i].saturating_sub(before.latency.get(i).copied().unwrap_or(0)))
            .collect();
        let (&total, cumulative) = deltas.split_last()?;
        let seconds = |q| histogram_quantile(&self.latency_bounds, cumulative, total, q);
        Some(Latency { p50: milliseconds(seconds(0.5)?), p95: milliseconds(seconds(0.95)?) })
    }
}

impl TenantActivity {
    fn add(&mut self, other: &TenantActivity) {
        self.requests = self.requests.saturating_add(other.requests);
        self.client_errors = self.client_errors.saturating_add(other.client_errors);
        self.errors = self.errors.saturating_add(other.errors);
        for (model, tokens) in &other.tokens {
            let sum = self.tokens.entry(model.clone()).or_default();
            sum.input = sum.input.saturating_add(tokens.input);
            sum.output = sum.output.saturating_add(tokens.output);
        }
    }
}

/// The `q` quantile (0..=1) of a histogram given as bucket upper `bounds`, the `cumulative` counts
/// of those buckets and the `total` count (the `+Inf` bucket), interpolated linearly within the
/// bucket it falls in (the first bucket starting at 0); a quantile in the `+Inf` bucket is the
/// highest bound. `None` without observations.
pub fn histogram_quantile(bounds: &[f64], cumulative: &[u64], total: u64, q: f64) -> Option<f64> {
    if total == 0 || bounds.is_empty() || cumulative.len() != bounds.len() {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total as f64;
    let mut below = 0u64;
    let mut lower = 0.0;
    for (&upper, &count) in bounds.iter().zip(cumulative) {
        if count as f64 >= rank && count > below {
            let within = (rank - below as f64) / (count - below) as f64;
            return Some(lower + (upper - lower) * within.clamp(0.0, 1.0));
        }
        below = count;
        lower = upper;
    }
    bounds.last().copied()
}

fn milliseconds(seconds: f64) -> f64 {
    (seconds * 1000.0 * 1000.0).round() / 1000.0
}

fn label<'a>(labels: &'a [(String, String)], name: &str) -> Option<&'a str> {
    labels.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The row `index` of `rows`, created (zeroed, with any before it) when missing.
fn slot<const N: usize>(rows: &mut Vec<[u64; N]>, index: usize) -> &mut [u64; N] {
    if rows.len() <= index {
        rows.resize(index + 1, [0; N]);
    }
    &mut rows[index]
}

fn at<const N: usize>(rows: &[[u64; N]], index: usize) -> [u64; N] {
    rows.get(index).copied().unwrap_or([0; N])
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{MergedMetrics, Metrics, TokenCounts};

    fn tokens(input: u64, output: u64) -> TokenCounts {
        TokenCounts { input, output, cached: 0, reasoning: 0 }
    }

    fn activity(requests: u64, client_errors: u64, errors: u64, tokens: &[(&str, u64, u64)]) -> TenantActivity {
        TenantActivity {
            requests,
            client_errors,
            errors,
            tokens: tokens
                .iter()
                .map(|(model, input, output)| ((*model).to_owned(), TokenActivity { input: *input, output: *output }))
                .collect(),
        }
    }

    #[test]
    fn points_are_deltas_between_samples_per_tenant_and_model() {
        let metrics = Metrics::new();
        let mut history = OverviewHistory::new(10);
        history.record(100, &metrics.snapshot());
        metrics.tenant_request("alpha", 200);
        metrics.tenant_request("alpha", 404);
        metrics.tokens("alpha", "m1", tokens(10, 2));
        metrics.tokens("alpha", "m2", tokens(5, 1));
        history.record(110, &metrics.snapshot());
        metrics.tenant_request("beta", 502);
        metrics.tenant_request("alpha", 200);
        metrics.tokens("beta", "m1", tokens(7, 3));
        metrics.tokens("alpha", "m1", tokens(1, 1));
        history.record(120, &metrics.snapshot());

        let series = history.series(120, 3600, SeriesScope::All);
        assert_eq!(series.points.iter().map(|p| p.t).collect::<Vec<_>>(), [110, 120]);
        assert_eq!(
            series.points[0].tenants,
            BTreeMap::from([("alpha".to_owned(), activity(2, 1, 0, &[("m1", 10, 2), ("m2", 5, 1)]))])
        );
        assert_eq!(
            series.points[1].tenants,
            BTreeMap::from([
                ("alpha".to_owned(), activity(1, 0, 0, &[("m1", 1, 1)])),
                ("beta".to_owned(), activity(1, 0, 1, &[("m1", 7, 3)])),
            ])
        );
        assert_eq!(
            series.totals,
            BTreeMap::from([
                ("alpha".to_owned(), activity(3, 1, 0, &[("m1", 11, 3), ("m2", 5, 1)])),
                ("beta".to_owned(), activity(1, 0, 1, &[("m1", 7, 3)])),
            ])
        );
        assert_eq!(series.points[1].in_flight, Some(0));
    }

    #[test]
    fn a_tenant_scope_sees_only_itself_and_no_gateway_wide_series() {
        let metrics = Metrics::new();
        let mut history = OverviewHistory::new(10);
        history.record(100, &metrics.snapshot());
        metrics.tenant_request("alpha", 200);
        metrics.tenant_request("beta", 200);
        metrics.tokens("beta", "m", tokens(1, 1));
        metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(20));
        let _stream = metrics.sse_stream("/v1/responses");
        history.record(110, &metrics.snapshot());

        let everyone = history.series(110, 60, SeriesScope::All);
        assert_eq!(everyone.points[0].open_streams, Some(1));
        assert!(everyone.points[0].latency_ms.is_some());
        let beta = history.series(110, 60, SeriesScope::Tenant("beta"));
        let point = &beta.points[0];
        assert_eq!((point.open_streams, point.in_flight, point.latency_ms), (None, None, None));
        assert_eq!(point.tenants.keys().collect::<Vec<_>>(), ["beta"]);
        assert_eq!(beta.totals.keys().collect::<Vec<_>>(), ["beta"]);
        let nobody = history.series(110, 60, SeriesScope::Tenant("gamma"));
        assert!(nobody.points[0].tenants.is_empty() && nobody.totals.is_empty());
    }

    #[test]
    fn the_window_keeps_the_points_whose_step_ends_in_it_and_the_ring_keeps_an_hour() {
        let metrics = Metrics::new();
        let mut history = OverviewHistory::new(10);
        for t in (0..=7200).step_by(10) {
            history.record(t, &metrics.snapshot());
        }
        assert_eq!(history.len(), 361, "an hour of steps and the sample the first one starts from");
        let hour = history.series(7200, 3600, SeriesScope::All);
        assert_eq!(hour.points.len(), 360);
        assert_eq!((hour.points[0].t, hour.points[359].t), (3610, 7200));
        let minute = history.series(7200, 60, SeriesScope::All);
        assert_eq!(minute.points.iter().map(|p| p.t).collect::<Vec<_>>(), [7150, 7160, 7170, 7180, 7190, 7200]);
        assert!(OverviewHistory::new(10).series(100, 3600, SeriesScope::All).points.is_empty());
    }

    #[test]
    fn a_worker_restart_never_makes_a_step_go_negative() {
        let mut merged = MergedMetrics::new();
        let mut history = OverviewHistory::new(10);
        let first = Metrics::new();
        for _ in 0..5 {
            first.tenant_request("alpha", 200);
        }
        merged.update(0, 0, first.snapshot());
        history.record(10, &merged.merged());
        // The worker dies after two more requests; its replacement serves one.
        first.tenant_request("alpha", 200);
        first.tenant_request("alpha", 200);
        merged.update(0, 0, first.snapshot());
        merged.worker_exited(0, 0);
        let second = Metrics::new();
        second.tenant_request("alpha", 500);
        merged.update(0, 1, second.snapshot());
        history.record(20, &merged.merged());
        // A view whose counters read lower than before (a reset) is no change in that step, and
        // counted from zero after it, as Prometheus' `increase` does.
        history.record(30, &Metrics::new().snapshot());
        history.record(40, &merged.merged());

        let series = history.series(40, 3600, SeriesScope::All);
        let requests: Vec<u64> =
            series.points.iter().map(|p| p.tenants.get("alpha").map_or(0, |a| a.requests)).collect();
        assert_eq!(requests, [3, 0, 8]);
        assert_eq!(series.points[0].tenants["alpha"].errors, 1);
    }

    #[test]
    fn quantiles_interpolate_within_the_bucket_deltas() {
        let bounds = [0.1, 0.2, 0.4];
        // 10 observations: 4 in (0, 0.1], 4 in (0.1, 0.2], 2 in (0.2, 0.4].
        assert_eq!(histogram_quantile(&bounds, &[4, 8, 10], 10, 0.5), Some(0.125));
        assert_eq!(histogram_quantile(&bounds, &[4, 8, 10], 10, 0.2), Some(0.05));
        assert_eq!(histogram_quantile(&bounds, &[4, 8, 10], 10, 0.95).map(|v| (v * 1e6).round()), Some(350_000.0));
        // Observations past the last bound: the highest bound.
        assert_eq!(histogram_quantile(&bounds, &[0, 0, 0], 3, 0.5), Some(0.4));
        assert_eq!(histogram_quantile(&bounds, &[0, 0, 0], 0, 0.5), None);

        let metrics = Metrics::new();
        let mut history = OverviewHistory::new(10);
        for _ in 0..50 {
            metrics.record_request("GET", "/v1/models", 200, Duration::from_millis(1));
        }
        history.record(10, &metrics.snapshot());
        // Only the step's own requests count: 4 fast ones elsewhere, 1 slow one.
        for _ in 0..4 {
            metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(1));
        }
        metrics.record_request("GET", "/v1/models", 200, Duration::from_secs(2));
        history.record(20, &metrics.snapshot());
        history.record(30, &metrics.snapshot());
        let series = history.series(30, 3600, SeriesScope::All);
        let latency = series.points[0].latency_ms.expect("requests ended in the step");
        assert!(latency.p50 <= 5.0, "{latency:?}");
        assert!(latency.p95 >= 1000.0, "{latency:?}");
        assert_eq!(series.points[1].latency_ms, None, "no request in the second step");
    }

    #[test]
    fn an_hour_of_samples_is_small() {
        let metrics = Metrics::new();
        for tenant in ["alpha", "beta", "gamma", "delta"] {
            metrics.tenant_request(tenant, 200);
            metrics.tenant_request(tenant, 400);
            metrics.tenant_request(tenant, 500);
            for model in ["m1", "m2"] {
                metrics.tokens(tenant, model, tokens(3, 4));
            }
        }
        metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(3));
        let mut history = OverviewHistory::new(10);
        for t in (0..=3600).step_by(10) {
            history.record(t, &metrics.snapshot());
        }
        let encoded = postcard::to_allocvec(&history).expect("encode");
        let per_sample = encoded.len() / history.len();
        let sample = history.samples.back().expect("a sample");
        let in_memory = std::mem::size_of::<Sample>()
            + sample.latency.capacity() * std::mem::size_of::<u64>()
            + sample.requests.capacity() * std::mem::size_of::<[u64; 3]>()
            + sample.tokens.capacity() * std::mem::size_of::<[u64; 2]>();
        eprintln!(
            "4 tenants x 2 models: {} samples; in memory {in_memory} bytes per sample; \
             over IPC {} bytes in all, {per_sample} per sample",
            history.len(),
            encoded.len()
        );
        assert!(in_memory < 700, "{in_memory} bytes per sample in memory");
        assert!(per_sample < 400, "{per_sample} bytes per sample over IPC");
        let decoded: OverviewHistory = postcard::from_bytes(&encoded).expect("decode");
        assert_eq!(decoded, history);
    }
}
