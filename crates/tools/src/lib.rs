//! Gateway-executed tools: what runs when the model calls a tool the gateway itself provides.
//!
//! - [`code_interpreter`]: the sandbox that runs model-written Python (bubblewrap, rlimits, a
//!   wall-clock timeout), with bounded concurrency and per-conversation containers.
//! - [`GatewayTools`]: the engine's `ToolResolver` — turns a request's declarations into the
//!   gateway tools above.
//! - [`file_search`]: the model's queries over the request tenant's vector stores (the worker's
//!   `Retrieval`), each vector store checked to be the tenant's when the tools are resolved.
//! - [`web_search`]: search backends (DuckDuckGo, SearXNG, Brave, Exa over MCP), guarded page
//!   opening and find-in-page, chosen by a start-up profile.
//! - [`input_files`]: the engine's `FileReader` — `input_file` parts decoded or fetched (guarded),
//!   PDFs' text extracted, text files decoded, images made `data:` URLs.
//! - [`net_guard`]: the address policy against request forgery (Remote MCP and page opening).
//! - [`mcp`]: [`mcp::McpHelperClient`], the worker's client of the MCP helper (Built-in MCP), and
//!   Remote MCP sessions; the config and wire types they share with the helper are `respgw-mcp`.
//!
//! # Files
//!
//! - `code_interpreter/`: the sandbox — `python3` from a dedicated venv under bubblewrap (all
//!   namespaces unshared, no network, an unprivileged uid, a read-only system, only `/mnt/data`
//!   writable: a tmpfs of the container's size, filled from the container's host directory and
//!   written back by the runner through an inherited descriptor, never a mount), rlimits, a
//!   wall-clock timeout that kills the process group, bounded concurrency with a bounded queue wait,
//!   per-conversation containers with idle expiry under one directory per instance, a total disk cap
//!   across them with least-recently-used eviction of idle ones, PNG capture. `config.rs` holds the
//!   limits and paths, `layout.rs` the host-side files and containers (`WorkRootClaim`: one
//!   instance's container directory), `process.rs` one execution, `fsscan.rs` walking a container's
//!   directory, which model code controls, without following links.
//! - `input_files.rs`: the `FileReader` — `file_url` fetched through web_search's guarded page fetch
//!   (`PageFetcher::fetch_body`), text decoded, PDF text extracted with `pdf-extract` on a blocking
//!   thread under page and byte limits (`input_files/pdf_recovery.rs`: a PDF whose cross-reference
//!   table is missing or wrong is reloaded with one rebuilt from its `N G obj` headers), images as
//!   data URLs; `input_image` URLs are fetched the same way and reach the model as data URLs.
//! - `mcp/`: `McpHelperClient` (`helper_client.rs`, the worker's client of the MCP helper) and
//!   `remote.rs`, Remote MCP: one session per declaration per request, an SSRF-guarded DNS resolver
//!   on every connection, same-origin redirects, credentials redacted from every error text.
//! - `web_search/`: `settings.rs` (the profiles, endpoints, fetch limits), `backend.rs` (DuckDuckGo
//!   HTML, SearXNG JSON, Brave JSON, Exa through the MCP helper), `fetch.rs` (the guarded page
//!   fetch: address rules on every hop, size and time limits, charset, html2text), `page.rs`
//!   (canonical URLs, `allowed_domains`, `find_in_page`); `mod.rs` holds the per-request tool with
//!   its page cache. Search backends are operator-configured and dialled without the address guard.
//! - `net_guard.rs`: the address policy against request forgery (`non_public_reason`,
//!   `GuardedResolver`), shared by Remote MCP and page opening.
//! - `resolver/`: [`GatewayTools`], the engine's `ToolResolver` — declarations → gateway tools — and
//!   one executor adapter per kind (`code_interpreter.rs`; `file_search.rs`: the vector stores
//!   checked to be the tenant's, then `FileSearch::run` per call; `mcp.rs`: Built-in MCP inventories listed
//!   at resolve time, arguments checked against the tool's schema before the call); web_search's
//!   `WebSearchTool` implements `GatewayTool` itself.
//!
//! Architecture invariant: a tool failure is an outcome on its item, never a failed response; model
//! code never runs outside the sandbox; every URL a request or a model chose is dialled through
//! `net_guard` (unless the operator switched the rules off).

pub mod code_interpreter;
pub mod file_search;
pub mod input_files;
pub mod mcp;
pub mod net_guard;
mod resolver;
pub mod web_search;

pub use resolver::GatewayTools;
