//! What the request targets validate against: every gateway tool enabled, and caps small enough
//! that fuzzed inputs reach the limit checks.

use respgw_protocol::{Capabilities, RequestLimits};

pub const ALL_TOOLS: Capabilities = Capabilities {
    code_interpreter: true,
    builtin_mcp: true,
    remote_mcp: true,
    remote_url_checks: true,
    web_search: true,
    file_search: true,
};

pub const SMALL_CAPS: RequestLimits =
    RequestLimits { max_input_items: 64, max_tools: 16, max_mcp_servers: 4, max_input_file_bytes: 4096 };
