//! Prometheus classic text exposition (format 0.0.4) of a [`MetricsSnapshot`].
//!
//! Written by hand rather than with the `prometheus` crate's `TextEncoder` because what is served
//! is a merged snapshot of several worker processes, not a registry of this process, and because
//! every gateway family must be listed (HELP/TYPE) even before its first sample, which that encoder
//! refuses. The format is small: HELP and TYPE per family, one line per sample, histograms as
//! cumulative `_bucket{le=...}` lines ending in `+Inf`, then `_sum` and `_count`.
//!
//! Only the gateway's own families (see [`crate::families::FAMILIES`]) are rendered; a series whose
//! name is not one of them, whose kind does not match its family, or whose label names differ from
//! the family's, is left out.

use crate::families::{FAMILIES, FamilyDescriptor, MetricKind};
use crate::merge::Accumulator;
use crate::snapshot::{Labels, MetricsSnapshot};

/// `Content-Type` of the text [`render`] produces.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders `snapshot` in the Prometheus text format 0.0.4. Every family appears with its HELP and
/// TYPE lines; duplicate series in the snapshot are summed, and samples are sorted by labels.
pub fn render(snapshot: &MetricsSnapshot) -> String {
    let series = Accumulator::from_snapshot(snapshot);
    let mut out = String::with_capacity(4096);
    for family in &FAMILIES {
        write_header(&mut out, family);
        match family.kind {
            MetricKind::Counter => {
                for (_, labels, value) in series.counters().filter(|(name, labels, _)| belongs_to(family, name, labels))
                {
                    write_sample(&mut out, family.name, "", labels, None, &value.to_string());
                }
            }
            MetricKind::Gauge => {
                for (_, labels, value) in series.gauges().filter(|(name, labels, _)| belongs_to(family, name, labels)) {
                    write_sample(&mut out, family.name, "", labels, None, &value.to_string());
                }
            }
            MetricKind::Histogram => {
                for histogram in
                    series.histograms().filter(|histogram| belongs_to(family, &histogram.name, &histogram.labels))
                {
                    for (bound, count) in histogram.upper_bounds.iter().zip(&histogram.cumulative_counts) {
                        let le = format_float(*bound);
                        write_sample(
                            &mut out,
                            family.name,
                            "_bucket",
                            &histogram.labels,
                            Some(&le),
                            &count.to_string(),
                        );
                    }
                    let count = histogram.count.to_string();
                    write_sample(&mut out, family.name, "_bucket", &histogram.labels, Some("+Inf"), &count);
                    write_sample(&mut out, family.name, "_sum", &histogram.labels, None, &format_float(histogram.sum));
                    write_sample(&mut out, family.name, "_count", &histogram.labels, None, &count);
                }
            }
        }
    }
    out
}

/// A series is rendered under `family` only with the family's name and exactly its label names,
/// so the output stays valid whatever a snapshot contains.
fn belongs_to(family: &FamilyDescriptor, name: &str, labels: &Labels) -> bool {
    name == family.name
        && labels.len() == family.label_names.len()
        && labels.iter().zip(family.label_names).all(|((label_name, _), expected)| label_name == expected)
}

fn write_header(out: &mut String, family: &FamilyDescriptor) {
    out.push_str("# HELP ");
    out.push_str(family.name);
    out.push(' ');
    out.push_str(&escape_help(family.help));
    out.push_str("\n# TYPE ");
    out.push_str(family.name);
    out.push(' ');
    out.push_str(family.kind.as_str());
    out.push('\n');
}

/// Writes `name{suffix}{labels[,le="..."]} value\n`.
fn write_sample(out: &mut String, name: &str, suffix: &str, labels: &Labels, le: Option<&str>, value: &str) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        let extra = le.map(|le| ("le", le));
        let pairs = labels.iter().map(|(name, value)| (name.as_str(), value.as_str())).chain(extra);
        for (index, (label_name, label_value)) in pairs.enumerate() {
            if index > 0 {
                out.push(',');
            }
            out.push_str(label_name);
            out.push_str("=\"");
            out.push_str(&escape_label_value(label_value));
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// Escapes a label value: backslash, double quote and line feed.
fn escape_label_value(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for character in value.chars() {
        match character {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// Escapes HELP text: backslash and line feed.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Formats a sample value or bucket bound the way Prometheus parses it (`+Inf`, `-Inf`, `NaN`,
/// otherwise the shortest decimal that round-trips, e.g. `0.005`, `1`, `2.5`).
fn format_float(value: f64) -> String {
    if value.is_nan() {
        "NaN".to_owned()
    } else if value == f64::INFINITY {
        "+Inf".to_owned()
    } else if value == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        format!("{value}")
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::time::Duration;

    use super::*;
    use crate::merge::MergedMetrics;
    use crate::recorder::{CompactionTrigger, MAX_MODEL_LABELS, Metrics, TokenCounts, ToolType};
    use crate::snapshot::{CounterSample, HistogramSample};

    /// A merged view of two live workers and one that exited, touching all twenty-five families.
    fn populated_merged_snapshot() -> MetricsSnapshot {
        let first = Metrics::new();
        first.record_request("POST", "/v1/responses", 200, Duration::from_millis(40));
        first.record_request("GET", "/v1/responses/{response_id}", 404, Duration::from_millis(2));
        first.tool_requested(ToolType::new("function"));
        first.tool_requested(ToolType::new("code_interpreter"));
        first.tool_executed(ToolType::new("code_interpreter"), Duration::from_millis(1500), true);
        first.mcp_server_startup("files", true);
        first.compaction(CompactionTrigger::Endpoint, true);
        first.mcp_server_startup("weird \"label\" \\ with\nnewline", false);
        first.mcp_approval_requested("files");
        first.mcp_approval_answered("files", true);
        drop(first.sse_stream("/v1/responses"));
        first.tokens("alpha", "qwen", TokenCounts { input: 100, output: 20, cached: 64, reasoning: 5 });
        first.tenant_request("alpha", 200);
        first.retrieval_ingested(true, 12, Duration::from_millis(900));
        first.retrieval_search(Duration::from_millis(4));
        first.limits_redis_up_from(|| 1);
        let _first_busy = first.in_flight();

        let second = Metrics::new();
        second.record_request("POST", "/v1/responses", 200, Duration::from_secs(3));
        second.tool_requested(ToolType::new("web_search"));
        second.tool_executed(ToolType::new("web_search"), Duration::from_secs(200), false);
        second.tool_requested(ToolType::new("mcp"));
        second.tool_executed(ToolType::new("mcp"), Duration::from_millis(80), true);
        second.compaction(CompactionTrigger::Auto, false);
        second.mcp_approval_requested("files");
        second.mcp_approval_answered("(remote)", false);
        let _second_stream = second.sse_stream("/v1/responses");
        second.tokens("alpha", "qwen", TokenCounts { input: 1, output: 2, cached: 0, reasoning: 0 });
        second.tenant_request("beta", 429);
        second.retrieval_ingested(false, 0, Duration::from_millis(30));
        let _second_running = second.background_running();
        let _second_queued = second.background_queued();
        second.background_cancelled();
        first.background_lost();
        first.count_store_lock_waits_from(|| 2);
        second.count_store_lock_waits_from(|| 5);

        let exited = Metrics::new();
        exited.record_request("POST", "/v1/responses", 500, Duration::from_millis(700));
        let _exited_busy = exited.in_flight();

        let mut merged = MergedMetrics::new();
        merged.update(0, 1, exited.snapshot());
        merged.worker_exited(0, 1);
        merged.update(0, 3, first.snapshot());
        merged.update(1, 2, second.snapshot());
        merged.merged()
    }

    #[test]
    fn mcp_approval_counters_are_summed_across_workers() {
        let text = render(&populated_merged_snapshot());
        assert!(text.contains("\ngw_responses_mcp_approval_requests_total{server_label=\"files\"} 2\n"), "{text}");
        for line in [
            "gw_responses_mcp_approval_responses_total{decision=\"approved\",server_label=\"files\"} 1",
            "gw_responses_mcp_approval_responses_total{decision=\"denied\",server_label=\"(remote)\"} 1",
        ] {
            assert!(text.contains(&format!("\n{line}\n")), "{line}:\n{text}");
        }
    }

    #[test]
    fn tenant_counters_are_summed_across_workers() {
        let text = render(&populated_merged_snapshot());
        for line in [
            "gw_responses_tokens_total{kind=\"input\",model=\"qwen\",tenant=\"alpha\"} 101",
            "gw_responses_tokens_total{kind=\"output\",model=\"qwen\",tenant=\"alpha\"} 22",
            "gw_responses_tokens_total{kind=\"cached\",model=\"qwen\",tenant=\"alpha\"} 64",
            "gw_responses_tokens_total{kind=\"reasoning\",model=\"qwen\",tenant=\"alpha\"} 5",
            "gw_responses_requests_by_tenant_total{status=\"200\",tenant=\"alpha\"} 1",
            "gw_responses_requests_by_tenant_total{status=\"429\",tenant=\"beta\"} 1",
        ] {
            assert!(text.contains(&format!("\n{line}\n")), "{line}:\n{text}");
        }
    }

    #[test]
    fn models_past_the_cap_fold_into_other() {
        let metrics = Metrics::new();
        let one = TokenCounts { input: 1, ..TokenCounts::default() };
        for n in 0..MAX_MODEL_LABELS + 5 {
            metrics.tokens("alpha", &format!("model-{n}"), one);
        }
        metrics.tokens("alpha", "model-0", one);
        let text = render(&metrics.snapshot());
        let input_lines: Vec<&str> =
            text.lines().filter(|l| l.starts_with("gw_responses_tokens_total{kind=\"input\"")).collect();
        assert_eq!(input_lines.len(), MAX_MODEL_LABELS + 1, "{text}");
        assert!(text.contains("gw_responses_tokens_total{kind=\"input\",model=\"other\",tenant=\"alpha\"} 5\n"));
        assert!(text.contains("gw_responses_tokens_total{kind=\"input\",model=\"model-0\",tenant=\"alpha\"} 2\n"));
    }

    #[test]
    fn every_family_has_help_and_type_even_when_empty() {
        let text = render(&MetricsSnapshot::default());
        for family in &FAMILIES {
            assert!(text.contains(&format!("# HELP {} ", family.name)), "{}", family.name);
            assert!(text.contains(&format!("# TYPE {} {}\n", family.name, family.kind.as_str())), "{}", family.name);
        }
        assert_eq!(text.lines().count(), 50, "only HELP and TYPE lines:\n{text}");
    }

    #[test]
    fn single_process_snapshot_lists_both_gauges_at_zero() {
        let text = render(&Metrics::new().snapshot());
        assert!(text.contains("\ngw_responses_http_in_flight_requests 0\n"), "{text}");
        assert!(text.contains("\ngw_responses_sse_connections_in_flight 0\n"), "{text}");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf_sum_count() {
        let metrics = Metrics::new();
        for millis in [1, 30, 30, 400, 90_000] {
            metrics.record_request("POST", "/v1/responses", 200, Duration::from_millis(millis));
        }
        let text = render(&metrics.snapshot());
        let prefix = "gw_responses_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/responses\",le=\"";
        let buckets: Vec<(&str, u64)> = text
            .lines()
            .filter_map(|line| line.strip_prefix(prefix))
            .filter_map(|rest| rest.split_once("\"} "))
            .map(|(le, count)| (le, count.parse().expect("count")))
            .collect();
        let expected_le =
            ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "20", "30", "60", "+Inf"];
        assert_eq!(buckets.iter().map(|(le, _)| *le).collect::<Vec<_>>(), expected_le);
        let counts: Vec<u64> = buckets.iter().map(|(_, count)| *count).collect();
        assert_eq!(counts, [1, 1, 1, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 5]);
        let tail = "gw_responses_http_request_duration_seconds_bucket{method=\"POST\",route=\"/v1/responses\",le=\"+Inf\"} 5\n\
                    gw_responses_http_request_duration_seconds_sum{method=\"POST\",route=\"/v1/responses\"} 90.461\n\
                    gw_responses_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/responses\"} 5\n";
        assert!(text.contains(tail), "{text}");
    }

    #[test]
    fn counter_lines_carry_sorted_escaped_labels() {
        let metrics = Metrics::new();
        metrics.mcp_server_startup("a\\b \"c\"\nd", false);
        metrics.record_request("GET", "/v1/responses/{response_id}", 200, Duration::ZERO);
        let text = render(&metrics.snapshot());
        assert!(
            text.contains(
                "gw_responses_mcp_server_startup_total{server_label=\"a\\\\b \\\"c\\\"\\nd\",status=\"error\"} 1\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "gw_responses_http_requests_total{method=\"GET\",route=\"/v1/responses/{response_id}\",status=\"200\"} 1\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn duplicate_and_unknown_series_are_normalised() {
        let sample = |value| CounterSample {
            name: "gw_responses_tool_errors_total".into(),
            labels: vec![("tool_type".into(), "mcp".into())],
            value,
        };
        let snapshot = MetricsSnapshot {
            counters: vec![
                sample(2),
                sample(3),
                CounterSample { name: "not_ours_total".into(), labels: vec![], value: 1 },
                CounterSample {
                    name: "gw_responses_tool_errors_total".into(),
                    labels: vec![("le".into(), "1".into())],
                    value: 1,
                },
            ],
            gauges: vec![],
            histograms: vec![HistogramSample {
                // A histogram posing as a counter family is not rendered.
                name: "gw_responses_tool_errors_total".into(),
                labels: vec![],
                upper_bounds: vec![1.0],
                cumulative_counts: vec![1],
                sum: 1.0,
                count: 1,
            }],
        };
        let text = render(&snapshot);
        assert!(text.contains("gw_responses_tool_errors_total{tool_type=\"mcp\"} 5\n"), "{text}");
        assert!(!text.contains("not_ours"));
        assert!(!text.contains("le=\"1\""), "{text}");
        assert!(!text.contains("gw_responses_tool_errors_total_bucket"));
    }

    #[test]
    fn float_formatting() {
        assert_eq!(format_float(0.005), "0.005");
        assert_eq!(format_float(1.0), "1");
        assert_eq!(format_float(7.5), "7.5");
        assert_eq!(format_float(f64::INFINITY), "+Inf");
        assert_eq!(format_float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_float(f64::NAN), "NaN");
    }

    fn find_on_path(program: &str) -> Option<PathBuf> {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|directory| directory.join(program)).find(|candidate| candidate.is_file())
    }

    const PROMTOOL_REMEDY: &str = "Debian package prometheus; scripts/test installs it";

    /// Runs `promtool check metrics` (stdin) on a populated merged view; a test prerequisite
    /// (`respgw_testkit::prerequisites`: skipped without promtool, except under `scripts/test`).
    #[test]
    fn rendered_merged_snapshot_passes_promtool_check_metrics() {
        respgw_testkit::skip_unless!(respgw_testkit::prerequisites::program("promtool", PROMTOOL_REMEDY));
        let Some(promtool) = find_on_path("promtool") else { return };
        let text = render(&populated_merged_snapshot());
        for family in &FAMILIES {
            assert!(text.lines().any(|line| line.starts_with(family.name)), "no sample for {}:\n{text}", family.name);
        }
        let mut child = Command::new(&promtool)
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn promtool");
        child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write to promtool");
        let output = child.wait_with_output().expect("wait for promtool");
        let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(
            output.status.success(),
            "promtool check metrics failed ({}):\n{report}\n--- input ---\n{text}",
            output.status
        );
        assert!(report.trim().is_empty(), "promtool reported problems:\n{report}\n--- input ---\n{text}");
    }
}
