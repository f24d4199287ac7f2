//! Gateway-executed tools: what runs when the model calls a tool the gateway itself provides.
//!
//! - [`code_interpreter`]: the sandbox that runs model-written Python (bubblewrap, rlimits, a
//!   wall-clock timeout), with bounded concurrency and per-conversation containers.
//! - [`GatewayTools`]: the engine's `ToolResolver` — turns a request's declarations into the
//!   hosted tools above.
//! - [`mcp`]: Built-in MCP — the `mcp.json` config, the wire types of the MCP helper's loopback API
//!   and [`mcp::McpHelperClient`], the worker's client of that helper.

pub mod code_interpreter;
pub mod mcp;
mod resolver;

pub use resolver::{GatewayTools, upstream_schema};
