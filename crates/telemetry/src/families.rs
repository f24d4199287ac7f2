//! The gateway's metric families as one static table: name, help text, type, label names and
//! histogram buckets. Recording ([`crate::recorder`]) and exposition ([`crate::exposition`]) both
//! read this table, so the set of families on `/metrics` is fixed and complete even before any sample.

/// `gw_responses_http_requests_total` — counter {method, route, status}.
pub const HTTP_REQUESTS_TOTAL: &str = "gw_responses_http_requests_total";
/// `gw_responses_http_request_duration_seconds` — histogram {method, route}.
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "gw_responses_http_request_duration_seconds";
/// `gw_responses_http_in_flight_requests` — gauge, no labels.
pub const HTTP_IN_FLIGHT_REQUESTS: &str = "gw_responses_http_in_flight_requests";
/// `gw_responses_sse_connections_in_flight` — gauge, no labels.
pub const SSE_CONNECTIONS_IN_FLIGHT: &str = "gw_responses_sse_connections_in_flight";
/// `gw_responses_sse_stream_duration_seconds` — histogram {route}.
pub const SSE_STREAM_DURATION_SECONDS: &str = "gw_responses_sse_stream_duration_seconds";
/// `gw_responses_tool_calls_requested_total` — counter {tool_type}.
pub const TOOL_CALLS_REQUESTED_TOTAL: &str = "gw_responses_tool_calls_requested_total";
/// `gw_responses_tool_calls_executed_total` — counter {tool_type}.
pub const TOOL_CALLS_EXECUTED_TOTAL: &str = "gw_responses_tool_calls_executed_total";
/// `gw_responses_tool_execution_duration_seconds` — histogram {tool_type}.
pub const TOOL_EXECUTION_DURATION_SECONDS: &str = "gw_responses_tool_execution_duration_seconds";
/// `gw_responses_tool_errors_total` — counter {tool_type}.
pub const TOOL_ERRORS_TOTAL: &str = "gw_responses_tool_errors_total";
/// `gw_responses_mcp_server_startup_total` — counter {server_label, status}.
pub const MCP_SERVER_STARTUP_TOTAL: &str = "gw_responses_mcp_server_startup_total";
/// `gw_responses_compactions_total` — counter {outcome, trigger}.
pub const COMPACTIONS_TOTAL: &str = "gw_responses_compactions_total";
/// `gw_responses_mcp_approval_requests_total` — counter {server_label}.
pub const MCP_APPROVAL_REQUESTS_TOTAL: &str = "gw_responses_mcp_approval_requests_total";
/// `gw_responses_mcp_approval_responses_total` — counter {decision, server_label}.
pub const MCP_APPROVAL_RESPONSES_TOTAL: &str = "gw_responses_mcp_approval_responses_total";
/// `gw_responses_tokens_total` — counter {kind, model, tenant}.
pub const TOKENS_TOTAL: &str = "gw_responses_tokens_total";
/// `gw_responses_requests_by_tenant_total` — counter {status, tenant}.
pub const REQUESTS_BY_TENANT_TOTAL: &str = "gw_responses_requests_by_tenant_total";

/// `gw_responses_background_queued` — gauge, no labels.
pub const BACKGROUND_QUEUED: &str = "gw_responses_background_queued";
/// `gw_responses_background_running` — gauge, no labels.
pub const BACKGROUND_RUNNING: &str = "gw_responses_background_running";
/// `gw_responses_background_cancels_total` — counter, no labels.
pub const BACKGROUND_CANCELS_TOTAL: &str = "gw_responses_background_cancels_total";
/// `gw_responses_background_lost_total` — counter, no labels.
pub const BACKGROUND_LOST_TOTAL: &str = "gw_responses_background_lost_total";

/// `gw_responses_store_lock_waits_total` — counter, no labels.
pub const STORE_LOCK_WAITS_TOTAL: &str = "gw_responses_store_lock_waits_total";

/// `gw_responses_ingestion_files_total` — counter {outcome}.
pub const INGESTION_FILES_TOTAL: &str = "gw_responses_ingestion_files_total";
/// `gw_responses_ingestion_chunks_total` — counter, no labels.
pub const INGESTION_CHUNKS_TOTAL: &str = "gw_responses_ingestion_chunks_total";
/// `gw_responses_ingestion_duration_seconds` — histogram {outcome}.
pub const INGESTION_DURATION_SECONDS: &str = "gw_responses_ingestion_duration_seconds";
/// `gw_responses_search_duration_seconds` — histogram, no labels.
pub const SEARCH_DURATION_SECONDS: &str = "gw_responses_search_duration_seconds";

/// Upper bounds (seconds) of the HTTP handler duration histogram.
pub const HTTP_REQUEST_DURATION_BUCKETS: &[f64] =
    &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0];
/// Upper bounds (seconds) of the SSE stream lifetime histogram.
pub const SSE_STREAM_DURATION_BUCKETS: &[f64] = &[
    0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 240.0,
    300.0, 420.0, 600.0,
];
/// Upper bounds (seconds) of the tool execution duration histogram.
pub const TOOL_EXECUTION_DURATION_BUCKETS: &[f64] =
    &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0];

/// Upper bounds (seconds) of the ingestion duration histogram (one file: read, extract, chunk,
/// embed, store).
pub const INGESTION_DURATION_BUCKETS: &[f64] =
    &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0];
/// Upper bounds (seconds) of the vector-store search duration histogram.
pub const SEARCH_DURATION_BUCKETS: &[f64] =
    &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The Prometheus type of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic count; summed across workers, kept after a worker dies.
    Counter,
    /// Current level; summed over live workers only.
    Gauge,
    /// Bucketed observations; summed across workers, kept after a worker dies.
    Histogram,
}

impl MetricKind {
    /// The word used on the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// Static description of one metric family.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FamilyDescriptor {
    /// Full metric name (for counters including `_total`).
    pub name: &'static str,
    /// Text of the `# HELP` line.
    pub help: &'static str,
    /// Prometheus type.
    pub kind: MetricKind,
    /// Label names in sorted order (the order samples carry them in).
    pub label_names: &'static [&'static str],
    /// Histogram upper bounds, ascending, without `+Inf`; empty for counters and gauges.
    pub buckets: &'static [f64],
}

/// `gw_responses_limits_redis_up` — gauge, no labels: workers whose last call to the limits' Redis
/// succeeded (present with `--redis-url` only).
pub const LIMITS_REDIS_UP: &str = "gw_responses_limits_redis_up";

/// All twenty-five families, in the order they are exposed.
pub static FAMILIES: [FamilyDescriptor; 25] = [
    FamilyDescriptor {
        name: HTTP_REQUESTS_TOTAL,
        help: "Completed HTTP requests.",
        kind: MetricKind::Counter,
        label_names: &["method", "route", "status"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: HTTP_REQUEST_DURATION_SECONDS,
        help: "HTTP handler duration in seconds, excluding SSE stream lifetime.",
        kind: MetricKind::Histogram,
        label_names: &["method", "route"],
        buckets: HTTP_REQUEST_DURATION_BUCKETS,
    },
    FamilyDescriptor {
        name: HTTP_IN_FLIGHT_REQUESTS,
        help: "HTTP requests being handled, not counting open streams.",
        kind: MetricKind::Gauge,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: SSE_CONNECTIONS_IN_FLIGHT,
        help: "Open SSE connections.",
        kind: MetricKind::Gauge,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: SSE_STREAM_DURATION_SECONDS,
        help: "Whole SSE stream lifetime in seconds, from stream start to termination.",
        kind: MetricKind::Histogram,
        label_names: &["route"],
        buckets: SSE_STREAM_DURATION_BUCKETS,
    },
    FamilyDescriptor {
        name: TOOL_CALLS_REQUESTED_TOTAL,
        help: "Tool calls requested by the model.",
        kind: MetricKind::Counter,
        label_names: &["tool_type"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: TOOL_CALLS_EXECUTED_TOTAL,
        help: "Tool calls executed by the gateway.",
        kind: MetricKind::Counter,
        label_names: &["tool_type"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: TOOL_EXECUTION_DURATION_SECONDS,
        help: "Tool execution duration in seconds.",
        kind: MetricKind::Histogram,
        label_names: &["tool_type"],
        buckets: TOOL_EXECUTION_DURATION_BUCKETS,
    },
    FamilyDescriptor {
        name: TOOL_ERRORS_TOTAL,
        help: "Tool execution errors.",
        kind: MetricKind::Counter,
        label_names: &["tool_type"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: MCP_SERVER_STARTUP_TOTAL,
        help: "Built-in MCP server startup outcomes.",
        kind: MetricKind::Counter,
        label_names: &["server_label", "status"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: COMPACTIONS_TOTAL,
        help: "Conversation compactions (summarisation calls), by trigger and outcome.",
        kind: MetricKind::Counter,
        label_names: &["outcome", "trigger"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: MCP_APPROVAL_REQUESTS_TOTAL,
        help: "MCP tool calls held for the client's approval.",
        kind: MetricKind::Counter,
        label_names: &["server_label"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: MCP_APPROVAL_RESPONSES_TOTAL,
        help: "Client answers to MCP approval requests acted on, by decision (approved, denied).",
        kind: MetricKind::Counter,
        label_names: &["decision", "server_label"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: BACKGROUND_QUEUED,
        help: "Background responses accepted by this process and waiting for a run slot.",
        kind: MetricKind::Gauge,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: BACKGROUND_RUNNING,
        help: "Background responses running in this process.",
        kind: MetricKind::Gauge,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: LIMITS_REDIS_UP,
        help: "Workers whose last call to the Redis counting tenant limits succeeded (0: Redis is unreachable).",
        kind: MetricKind::Gauge,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: BACKGROUND_CANCELS_TOTAL,
        help: "Background responses cancelled by a client.",
        kind: MetricKind::Counter,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: BACKGROUND_LOST_TOTAL,
        help: "Background responses failed because the process running them stopped renewing their lease.",
        kind: MetricKind::Counter,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: STORE_LOCK_WAITS_TOTAL,
        help: "Store statements that waited for a lock another process held (SQLite), each at most the store's 5 s budget.",
        kind: MetricKind::Counter,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: TOKENS_TOTAL,
        help: "Tokens of responses' upstream calls by tenant, model and kind (input, output, cached, reasoning).",
        kind: MetricKind::Counter,
        label_names: &["kind", "model", "tenant"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: REQUESTS_BY_TENANT_TOTAL,
        help: "Authenticated API requests by tenant and HTTP status.",
        kind: MetricKind::Counter,
        label_names: &["status", "tenant"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: INGESTION_FILES_TOTAL,
        help: "Vector-store files ingested by this gateway, by outcome (completed, failed).",
        kind: MetricKind::Counter,
        label_names: &["outcome"],
        buckets: &[],
    },
    FamilyDescriptor {
        name: INGESTION_CHUNKS_TOTAL,
        help: "Chunks written by ingestion (each embedded when an embedding model is configured).",
        kind: MetricKind::Counter,
        label_names: &[],
        buckets: &[],
    },
    FamilyDescriptor {
        name: INGESTION_DURATION_SECONDS,
        help: "Ingestion of one vector-store file in seconds, from claim to completed or failed.",
        kind: MetricKind::Histogram,
        label_names: &["outcome"],
        buckets: INGESTION_DURATION_BUCKETS,
    },
    FamilyDescriptor {
        name: SEARCH_DURATION_SECONDS,
        help: "Vector-store searches (the search endpoint and the file_search tool) in seconds.",
        kind: MetricKind::Histogram,
        label_names: &[],
        buckets: SEARCH_DURATION_BUCKETS,
    },
];

/// The descriptor of the family called `name`, if it is one of the gateway's.
pub fn family(name: &str) -> Option<&'static FamilyDescriptor> {
    FAMILIES.iter().find(|family| family.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_prefixed_and_labels_sorted() {
        for (index, family) in FAMILIES.iter().enumerate() {
            assert!(family.name.starts_with("gw_responses_"), "{}", family.name);
            assert!(FAMILIES[index + 1..].iter().all(|other| other.name != family.name));
            assert!(family.label_names.windows(2).all(|pair| pair[0] < pair[1]), "{}", family.name);
            assert!(family.buckets.windows(2).all(|pair| pair[0] < pair[1]), "{}", family.name);
            assert_eq!(family.kind == MetricKind::Histogram, !family.buckets.is_empty());
            if family.kind == MetricKind::Counter {
                assert!(family.name.ends_with("_total"), "{}", family.name);
            }
        }
    }

    #[test]
    fn bucket_tables_match_the_seed() {
        assert_eq!(HTTP_REQUEST_DURATION_BUCKETS.len(), 14);
        assert_eq!(SSE_STREAM_DURATION_BUCKETS.len(), 22);
        assert_eq!(TOOL_EXECUTION_DURATION_BUCKETS.len(), 14);
        assert_eq!(SSE_STREAM_DURATION_BUCKETS.last(), Some(&600.0));
        assert_eq!(TOOL_EXECUTION_DURATION_BUCKETS.last(), Some(&120.0));
    }
}
