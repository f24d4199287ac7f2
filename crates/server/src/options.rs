//! What one gateway process needs to serve, independent of how it was started. The supervisor
//! serializes this to JSON for the workers it re-execs.

use std::time::Duration;

use respgw_engine::UpstreamConfig;
use respgw_tools::mcp::RemoteMcpSettings;
use serde::{Deserialize, Serialize};

/// Configuration of a gateway worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayOptions {
    /// The model server.
    pub upstream: UpstreamConfig,
    /// `GW_DB_PATH`: a SQLite file path or `sqlite://` URL.
    pub db_path: String,
    /// API keys; empty means authentication is off.
    pub api_keys: Vec<String>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Where `/metrics` is served (`GW_METRICS_PATH`); `None` disables it.
    pub metrics_path: Option<String>,
    /// Integrated mode: every request no gateway route serves is forwarded unchanged to this
    /// base URL (the model server's private address, e.g. `http://127.0.0.1:41234`).
    pub forward_other_routes_to: Option<String>,
    /// How long a draining worker waits for in-flight requests and streams.
    pub drain_timeout: Duration,
    /// Offer `code_interpreter` (the supervisor checked that the sandbox works here).
    pub code_interpreter: bool,
    /// Base URL of the Built-in MCP helper, when MCP servers are configured.
    pub mcp_helper_url: Option<String>,
    /// Remote (request-declared) MCP: `GW_MCP_REQUEST_REMOTE_*`, read once by the supervisor.
    #[serde(default)]
    pub remote_mcp: RemoteMcpSettings,
}
