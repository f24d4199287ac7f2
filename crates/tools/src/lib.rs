//! Gateway-executed tools: what runs when the model calls a tool the gateway itself provides.
//!
//! - [`code_interpreter`]: the sandbox that runs model-written Python (bubblewrap, rlimits, a
//!   wall-clock timeout), with bounded concurrency and per-conversation containers.
//! - [`GatewayTools`]: the engine's `ToolResolver` — turns a request's declarations into the
//!   gateway tools above.
//! - [`web_search`]: search backends (DuckDuckGo, SearXNG, Brave, Exa over MCP), guarded page
//!   opening and find-in-page, chosen by a start-up profile.
//! - [`input_files`]: the engine's `FileReader` — `input_file` parts decoded or fetched (guarded),
//!   PDFs' text extracted, text files decoded, images made `data:` URLs.
//! - [`net_guard`]: the address policy against request forgery (Remote MCP and page opening).
//! - [`mcp`]: [`mcp::McpHelperClient`], the worker's client of the MCP helper (Built-in MCP), and
//!   Remote MCP sessions; the config and wire types they share with the helper are `respgw-mcp`.

pub mod code_interpreter;
pub mod input_files;
pub mod mcp;
pub mod net_guard;
mod resolver;
pub mod web_search;

pub use resolver::GatewayTools;
