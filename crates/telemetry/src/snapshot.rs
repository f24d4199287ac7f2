//! Plain-data snapshots of metric series: what a worker sends to the supervisor, what the
//! supervisor merges and what the exposition renders. Every type is serde-derived with no
//! attributes, so it encodes with postcard (no flatten, no untagged enums, no float map keys).

use serde::{Deserialize, Serialize};

/// Label pairs `(name, value)` of one series, sorted by name.
pub type Labels = Vec<(String, String)>;

/// Every series of one process (or of a merged view), at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsSnapshot {
    /// Counter series.
    pub counters: Vec<CounterSample>,
    /// Gauge series.
    pub gauges: Vec<GaugeSample>,
    /// Histogram series.
    pub histograms: Vec<HistogramSample>,
}

/// One counter series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSample {
    /// Family name, e.g. `gw_responses_http_requests_total`.
    pub name: String,
    /// Sorted label pairs.
    pub labels: Labels,
    /// Count since the recording process started.
    pub value: u64,
}

/// One gauge series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GaugeSample {
    /// Family name, e.g. `gw_responses_http_in_flight_requests`.
    pub name: String,
    /// Sorted label pairs.
    pub labels: Labels,
    /// Current level.
    pub value: i64,
}

/// One histogram series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistogramSample {
    /// Family name, e.g. `gw_responses_http_request_duration_seconds`.
    pub name: String,
    /// Sorted label pairs (never `le`).
    pub labels: Labels,
    /// Bucket upper bounds, ascending, without `+Inf`.
    pub upper_bounds: Vec<f64>,
    /// Cumulative counts: `cumulative_counts[i]` observations were `<= upper_bounds[i]`.
    /// The `+Inf` bucket is [`HistogramSample::count`].
    pub cumulative_counts: Vec<u64>,
    /// Sum of all observed values.
    pub sum: f64,
    /// Number of observations.
    pub count: u64,
}

impl MetricsSnapshot {
    /// Value of the counter `name` with exactly these labels (any order), if present.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
        self.counters.iter().find(|sample| sample.name == name && labels_equal(&sample.labels, labels)).map(|s| s.value)
    }

    /// Value of the gauge `name` with exactly these labels (any order), if present.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<i64> {
        self.gauges.iter().find(|sample| sample.name == name && labels_equal(&sample.labels, labels)).map(|s| s.value)
    }

    /// The histogram `name` with exactly these labels (any order), if present.
    pub fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Option<&HistogramSample> {
        self.histograms.iter().find(|sample| sample.name == name && labels_equal(&sample.labels, labels))
    }
}

/// Builds sorted [`Labels`] from borrowed pairs.
pub(crate) fn sorted_labels(pairs: &[(&str, &str)]) -> Labels {
    let mut labels: Labels = pairs.iter().map(|(name, value)| ((*name).to_owned(), (*value).to_owned())).collect();
    labels.sort();
    labels
}

fn labels_equal(labels: &Labels, wanted: &[(&str, &str)]) -> bool {
    labels.len() == wanted.len()
        && wanted
            .iter()
            .all(|(name, value)| labels.iter().any(|(have_name, have_value)| have_name == name && have_value == value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_roundtrips_through_postcard() {
        let snapshot = MetricsSnapshot {
            counters: vec![CounterSample {
                name: "gw_responses_http_requests_total".into(),
                labels: sorted_labels(&[("route", "/v1/responses"), ("method", "POST"), ("status", "200")]),
                value: u64::MAX,
            }],
            gauges: vec![GaugeSample {
                name: "gw_responses_http_in_flight_requests".into(),
                labels: vec![],
                value: -3,
            }],
            histograms: vec![HistogramSample {
                name: "gw_responses_tool_execution_duration_seconds".into(),
                labels: sorted_labels(&[("tool_type", "mcp")]),
                upper_bounds: vec![0.01, 0.025],
                cumulative_counts: vec![1, 2],
                sum: 0.0301,
                count: 3,
            }],
        };
        let bytes = postcard::to_allocvec(&snapshot).expect("encode");
        let decoded: MetricsSnapshot = postcard::from_bytes(&bytes).expect("decode");
        assert_eq!(decoded, snapshot);
        assert_eq!(
            decoded.counter(
                "gw_responses_http_requests_total",
                &[("status", "200"), ("method", "POST"), ("route", "/v1/responses")]
            ),
            Some(u64::MAX)
        );
        assert_eq!(decoded.counter("gw_responses_http_requests_total", &[("method", "POST")]), None);
    }

    #[test]
    fn sorted_labels_orders_by_name() {
        let labels = sorted_labels(&[("status", "ok"), ("server_label", "x")]);
        assert_eq!(labels, vec![("server_label".to_owned(), "x".to_owned()), ("status".to_owned(), "ok".to_owned())]);
    }
}
