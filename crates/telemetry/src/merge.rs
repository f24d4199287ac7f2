//! Cross-worker aggregation, kept by the supervisor: the latest snapshot of every live worker plus
//! a retained accumulator of the counters and histograms of workers that have exited.
//!
//! Rules: counters and histograms are summed per identical (name, labels)
//! and never go backwards across a worker restart; gauges are summed over live workers only, so a
//! dead worker's in-flight counts vanish.
//!
//! Generations: the supervisor gives every spawned worker process a generation number that grows
//! with each (re)spawn of a slot (a global spawn counter is fine). A snapshot tagged with a
//! generation that has already exited in that slot is ignored, so a frame that was still in the
//! socket when the exit was handled cannot resurrect the worker's gauges or count its series twice.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use crate::snapshot::{CounterSample, GaugeSample, HistogramSample, Labels, MetricsSnapshot};

/// The supervisor's merged view of all workers' metrics.
#[derive(Debug, Default)]
pub struct MergedMetrics {
    /// Counters and histograms of exited workers (gauges are never retained).
    retained: Accumulator,
    /// Latest snapshot per live worker slot.
    live: BTreeMap<u32, LiveWorker>,
    /// Highest generation known to have exited, per slot.
    exited_generation: BTreeMap<u32, u64>,
}

#[derive(Debug)]
struct LiveWorker {
    generation: u64,
    snapshot: MetricsSnapshot,
}

impl MergedMetrics {
    /// An empty view: no workers, nothing retained.
    pub fn new() -> Self {
        MergedMetrics::default()
    }

    /// Stores `snapshot` as the latest of the worker in `worker_slot` with this `generation`.
    ///
    /// Returns false (and changes nothing) when the snapshot is stale: its generation has already
    /// exited in this slot, or a newer generation already reported. A snapshot from a newer
    /// generation than the one stored implies the older worker is gone: its series are retained
    /// as by [`MergedMetrics::worker_exited`].
    pub fn update(&mut self, worker_slot: u32, generation: u64, snapshot: MetricsSnapshot) -> bool {
        if self.exited_generation.get(&worker_slot).is_some_and(|exited| *exited >= generation) {
            return false;
        }
        if let Some(current) = self.live.get(&worker_slot) {
            if current.generation > generation {
                return false;
            }
            if current.generation < generation {
                let previous = current.generation;
                self.retire(worker_slot, previous);
            }
        }
        self.live.insert(worker_slot, LiveWorker { generation, snapshot });
        true
    }

    /// Marks the worker `generation` in `worker_slot` as exited: its last counters and histograms
    /// move into the retained accumulator (totals never go backwards), its gauges are dropped, and
    /// any later snapshot from that generation (or an older one) is ignored. A newer generation
    /// already live in the slot is left alone.
    pub fn worker_exited(&mut self, worker_slot: u32, generation: u64) {
        self.retire(worker_slot, generation);
    }

    /// Retained series plus every live snapshot: counters and histograms summed per (name, labels),
    /// gauges summed over live workers. Series are sorted by (name, labels).
    pub fn merged(&self) -> MetricsSnapshot {
        let mut total = self.retained.clone();
        for worker in self.live.values() {
            total.add_counters_and_histograms(&worker.snapshot);
            total.add_gauges(&worker.snapshot);
        }
        total.into_snapshot()
    }

    /// Number of workers whose snapshots are currently counted as live.
    pub fn live_workers(&self) -> usize {
        self.live.len()
    }

    fn retire(&mut self, worker_slot: u32, generation: u64) {
        let exited = self.exited_generation.entry(worker_slot).or_insert(generation);
        *exited = (*exited).max(generation);
        if self.live.get(&worker_slot).is_some_and(|worker| worker.generation <= generation)
            && let Some(worker) = self.live.remove(&worker_slot)
        {
            self.retained.add_counters_and_histograms(&worker.snapshot);
        }
    }
}

type SeriesKey = (String, Labels);

/// Sums of series keyed by (name, labels); also used by the exposition to sort and de-duplicate.
#[derive(Debug, Clone, Default)]
pub(crate) struct Accumulator {
    counters: BTreeMap<SeriesKey, u64>,
    gauges: BTreeMap<SeriesKey, i64>,
    histograms: BTreeMap<SeriesKey, HistogramSample>,
}

impl Accumulator {
    /// Adds every series of `snapshot`.
    pub(crate) fn from_snapshot(snapshot: &MetricsSnapshot) -> Self {
        let mut accumulator = Accumulator::default();
        accumulator.add_counters_and_histograms(snapshot);
        accumulator.add_gauges(snapshot);
        accumulator
    }

    fn add_counters_and_histograms(&mut self, snapshot: &MetricsSnapshot) {
        for sample in &snapshot.counters {
            let value = self.counters.entry((sample.name.clone(), sorted(&sample.labels))).or_insert(0);
            *value = value.saturating_add(sample.value);
        }
        for sample in &snapshot.histograms {
            match self.histograms.entry((sample.name.clone(), sorted(&sample.labels))) {
                Entry::Occupied(total) => add_histogram(total.into_mut(), sample),
                Entry::Vacant(slot) => {
                    let (name, labels) = slot.key().clone();
                    slot.insert(HistogramSample { name, labels, ..sample.clone() });
                }
            }
        }
    }

    fn add_gauges(&mut self, snapshot: &MetricsSnapshot) {
        for sample in &snapshot.gauges {
            let value = self.gauges.entry((sample.name.clone(), sorted(&sample.labels))).or_insert(0);
            *value = value.saturating_add(sample.value);
        }
    }

    /// Counter series, sorted by (name, labels).
    pub(crate) fn counters(&self) -> impl Iterator<Item = (&str, &Labels, u64)> {
        self.counters.iter().map(|((name, labels), value)| (name.as_str(), labels, *value))
    }

    /// Gauge series, sorted by (name, labels).
    pub(crate) fn gauges(&self) -> impl Iterator<Item = (&str, &Labels, i64)> {
        self.gauges.iter().map(|((name, labels), value)| (name.as_str(), labels, *value))
    }

    /// Histogram series, sorted by (name, labels).
    pub(crate) fn histograms(&self) -> impl Iterator<Item = &HistogramSample> {
        self.histograms.values()
    }

    fn into_snapshot(self) -> MetricsSnapshot {
        MetricsSnapshot {
            counters: self
                .counters
                .into_iter()
                .map(|((name, labels), value)| CounterSample { name, labels, value })
                .collect(),
            gauges: self
                .gauges
                .into_iter()
                .map(|((name, labels), value)| GaugeSample { name, labels, value })
                .collect(),
            histograms: self.histograms.into_values().collect(),
        }
    }
}

/// Adds `sample` into `total` bucket by bucket. Both come from the same binary, so their bounds
/// agree; if they ever do not, `sample` is skipped rather than producing a histogram whose buckets
/// disagree with its count.
fn add_histogram(total: &mut HistogramSample, sample: &HistogramSample) {
    if total.upper_bounds != sample.upper_bounds || total.cumulative_counts.len() != sample.cumulative_counts.len() {
        return;
    }
    for (total_count, count) in total.cumulative_counts.iter_mut().zip(&sample.cumulative_counts) {
        *total_count = total_count.saturating_add(*count);
    }
    total.sum += sample.sum;
    total.count = total.count.saturating_add(sample.count);
}

fn sorted(labels: &Labels) -> Labels {
    let mut labels = labels.clone();
    labels.sort();
    labels
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::families::{
        HTTP_IN_FLIGHT_REQUESTS, HTTP_REQUEST_DURATION_SECONDS, HTTP_REQUESTS_TOTAL, SSE_CONNECTIONS_IN_FLIGHT,
    };
    use crate::recorder::Metrics;

    const OK: &[(&str, &str)] = &[("method", "POST"), ("route", "/v1/responses"), ("status", "200")];
    const POST: &[(&str, &str)] = &[("method", "POST"), ("route", "/v1/responses")];

    fn worker_with_requests(count: usize) -> Metrics {
        let metrics = Metrics::new();
        for _ in 0..count {
            metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(20));
        }
        metrics
    }

    #[test]
    fn two_live_workers_are_summed() {
        let first = worker_with_requests(2);
        let second = worker_with_requests(3);
        let _first_busy = first.in_flight();
        let _second_busy = second.in_flight();
        let _second_stream = second.sse_stream("/v1/responses");
        let mut merged = MergedMetrics::new();
        assert!(merged.update(0, 1, first.snapshot()));
        assert!(merged.update(1, 2, second.snapshot()));
        let view = merged.merged();
        assert_eq!(view.counter(HTTP_REQUESTS_TOTAL, OK), Some(5));
        let histogram = view.histogram(HTTP_REQUEST_DURATION_SECONDS, POST).expect("histogram");
        assert_eq!(histogram.count, 5);
        assert_eq!(histogram.cumulative_counts[3], 5, "20 ms <= 0.025 s");
        assert!((histogram.sum - 0.1).abs() < 1e-9);
        assert_eq!(view.gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(2));
        assert_eq!(view.gauge(SSE_CONNECTIONS_IN_FLIGHT, &[]), Some(1));
        assert_eq!(merged.live_workers(), 2);
    }

    #[test]
    fn newer_snapshot_of_the_same_worker_replaces_the_older() {
        let worker = worker_with_requests(1);
        let mut merged = MergedMetrics::new();
        merged.update(0, 1, worker.snapshot());
        worker.record_request("POST", "/v1/responses", 200, Duration::ZERO);
        merged.update(0, 1, worker.snapshot());
        assert_eq!(merged.merged().counter(HTTP_REQUESTS_TOTAL, OK), Some(2));
    }

    #[test]
    fn restart_keeps_counters_and_drops_gauges() {
        let old_worker = worker_with_requests(4);
        let _stuck = old_worker.in_flight();
        let other_worker = worker_with_requests(1);
        let mut merged = MergedMetrics::new();
        merged.update(0, 1, old_worker.snapshot());
        merged.update(1, 2, other_worker.snapshot());
        assert_eq!(merged.merged().gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(1));

        merged.worker_exited(0, 1);
        let after_exit = merged.merged();
        assert_eq!(after_exit.counter(HTTP_REQUESTS_TOTAL, OK), Some(5), "dead worker's counts are retained");
        assert_eq!(after_exit.histogram(HTTP_REQUEST_DURATION_SECONDS, POST).map(|h| h.count), Some(5));
        assert_eq!(after_exit.gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(0), "dead worker's gauge is gone");

        // The replacement in slot 0 starts from zero; the total keeps growing.
        let new_worker = worker_with_requests(1);
        assert!(merged.update(0, 3, new_worker.snapshot()));
        let after_restart = merged.merged();
        assert_eq!(after_restart.counter(HTTP_REQUESTS_TOTAL, OK), Some(6));
        assert_eq!(after_restart.histogram(HTTP_REQUEST_DURATION_SECONDS, POST).map(|h| h.count), Some(6));
        assert_eq!(after_restart.gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(0));
    }

    #[test]
    fn with_no_live_worker_only_retained_counters_remain() {
        let worker = worker_with_requests(2);
        let _busy = worker.in_flight();
        let mut merged = MergedMetrics::new();
        merged.update(7, 1, worker.snapshot());
        merged.worker_exited(7, 1);
        let view = merged.merged();
        assert_eq!(view.counter(HTTP_REQUESTS_TOTAL, OK), Some(2));
        assert!(view.gauges.is_empty());
        assert_eq!(merged.live_workers(), 0);
    }

    #[test]
    fn stale_snapshot_after_exit_is_ignored() {
        let worker = worker_with_requests(2);
        let _busy = worker.in_flight();
        let mut merged = MergedMetrics::new();
        merged.update(0, 1, worker.snapshot());
        merged.worker_exited(0, 1);
        worker.record_request("POST", "/v1/responses", 200, Duration::ZERO);
        assert!(!merged.update(0, 1, worker.snapshot()), "generation 1 already exited");
        let view = merged.merged();
        assert_eq!(view.counter(HTTP_REQUESTS_TOTAL, OK), Some(2), "not counted twice");
        assert_eq!(view.gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), None, "gauge not resurrected");
    }

    #[test]
    fn late_snapshot_of_a_worker_that_never_reported_is_ignored() {
        let mut merged = MergedMetrics::new();
        merged.worker_exited(0, 1);
        assert!(!merged.update(0, 1, worker_with_requests(1).snapshot()));
        assert!(merged.update(0, 2, worker_with_requests(1).snapshot()));
        assert_eq!(merged.merged().counter(HTTP_REQUESTS_TOTAL, OK), Some(1));
    }

    #[test]
    fn newer_generation_retires_the_older_one_implicitly() {
        let old_worker = worker_with_requests(3);
        let _busy = old_worker.in_flight();
        let mut merged = MergedMetrics::new();
        merged.update(0, 1, old_worker.snapshot());
        assert!(merged.update(0, 2, worker_with_requests(1).snapshot()));
        // The exit notice of generation 1 arrives late: it must not retire generation 2.
        merged.worker_exited(0, 1);
        assert!(!merged.update(0, 1, old_worker.snapshot()));
        let view = merged.merged();
        assert_eq!(view.counter(HTTP_REQUESTS_TOTAL, OK), Some(4));
        assert_eq!(view.gauge(HTTP_IN_FLIGHT_REQUESTS, &[]), Some(0));
        assert_eq!(merged.live_workers(), 1);
    }

    #[test]
    fn histogram_with_foreign_bounds_is_not_mixed_in() {
        let worker = worker_with_requests(1);
        let mut foreign = worker.snapshot();
        foreign.histograms[0].upper_bounds.pop();
        foreign.histograms[0].cumulative_counts.pop();
        let mut merged = MergedMetrics::new();
        merged.update(0, 1, worker.snapshot());
        merged.update(1, 2, foreign);
        let view = merged.merged();
        assert_eq!(view.counter(HTTP_REQUESTS_TOTAL, OK), Some(2));
        assert_eq!(view.histogram(HTTP_REQUEST_DURATION_SECONDS, POST).map(|h| h.count), Some(1));
    }
}
