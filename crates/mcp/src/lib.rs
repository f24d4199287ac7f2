//! MCP code shared by the MCP helper (`respgw-mcp-helper`) and the gateway's tools (`respgw-tools`):
//! the Built-in MCP config file, the JSON of the helper's loopback API, and the rmcp client pieces both
//! sides' sessions use.
//!
//! One MCP helper process per gateway (`respgw mcp-helper --config mcp.json --listen 127.0.0.1:PORT`)
//! owns every Built-in MCP session; workers reach it over loopback HTTP with the client in
//! `respgw_tools::mcp`. Remote MCP sessions are per request and live in the worker (also
//! `respgw_tools::mcp`).
//!
//! - [`config`]: `mcp.json` parsing and validation ([`McpConfig`]) and the two time limits
//!   ([`McpTimeouts`]).
//! - [`wire`]: the JSON bodies of the loopback API, written by the helper and read by the workers' client.
//! - [`client`] (`tools/list` into [`ToolInfo`], rmcp errors on one line), [`legacy_sse`] (the legacy
//!   HTTP+SSE client transport rmcp lacks), [`redact`] (error texts without secrets): used by the
//!   helper's sessions and by Remote MCP alike.
//!
//! # The loopback API
//!
//! | Route | Reply |
//! |---|---|
//! | `GET /health` | 200 `{"ok":true,"servers":N,"available":M}` once every server had its first start attempt; 503 with `"ok":false` before |
//! | `GET /servers` | 200 [`ServerList`]: `{"object":"list","data":[{"server_label","transport":"stdio"\|"streamable_http"\|"sse","available","last_error","tool_count","startup_ok_count","startup_error_count"}]}`, sorted by label |
//! | `GET /servers/{label}/tools` | 200 [`ToolList`]: `{"server_label","available":true,"tools":[{"name","title"?,"description","input_schema","annotations"?}]}`, sorted by name; 404 unknown label; 409 unavailable |
//! | `POST /servers/{label}/tools/{name}/call` body [`CallRequest`] `{"arguments":{…}}` | 200 [`CallOutcome`]: `{"ok","output_text","error_text","content":[…],"structured_content"?}`; 404 unknown label; 409 unavailable; 400 arguments not an object |
//!
//! Errors (404/409/400) carry [`ErrorBody`]: `{"error":{"code":"unknown_server"|"server_unavailable"|
//! "bad_request","message","last_error"?}}`.
//!
//! A call that reaches an available server always answers 200: the tool's own error (`isError`), an
//! unknown tool (after one inventory refresh), a timeout (`GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC`) and a
//! connection lost mid-call are `ok:false` with an `error_text`, because for the gateway they are all
//! the same thing — a failed `mcp_call` item whose error the model sees.
//!
//! `startup_ok_count`/`startup_error_count` are the helper's `gw_responses_mcp_server_startup_total`
//! counters (every start attempt: the first, restarts after a crash, reconnects). The helper has no
//! `/metrics`; whoever merges metrics reads them from `GET /servers`.

pub mod client;
pub mod config;
pub mod legacy_sse;
pub mod redact;
pub mod wire;

pub use config::{ConfigError, McpConfig, McpTimeouts, ServerEntry, StdioServer, UrlServer, UrlTransport};
pub use wire::{
    CallOutcome, CallRequest, ErrorBody, ErrorDetail, Health, ServerList, ServerStatus, ToolInfo, ToolList,
    TransportKind, content_to_text,
};
