//! Gateway tools (the tools the gateway runs itself) as the engine sees them.
//!
//! The engine does not know how code runs or how MCP servers are reached. It asks a
//! [`ToolResolver`] (implemented in `respgw-tools`) for the gateway tools of a request, offers
//! them to the model as functions next to the client's own, and when the model calls one it
//! calls [`GatewayTool::call`] and records the outcome on the call's item. A tool failure is an
//! outcome the model sees, never a failed response.

use std::sync::Arc;

use async_trait::async_trait;
use respgw_protocol::items::{CodeInterpreterOutput, Item, McpListToolsItem, WebSearchAction};
use respgw_protocol::{ApiError, ValidatedRequest};
use serde_json::Value;

/// What the model sees of one function: its name, description and parameter schema.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionSpec {
    pub name: String,
    pub description: Option<String>,
    pub parameters: Value,
    pub strict: Option<bool>,
}

/// Which item family a gateway tool's calls produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayKind {
    /// `code_interpreter_call` items; the argument is `{"code": "…"}`.
    CodeInterpreter,
    /// `mcp_call` items showing the real label and tool name.
    Mcp { server_label: String, tool_name: String },
    /// `web_search_call` items; the arguments name an action (search, open_page, find_in_page).
    WebSearch,
}

/// One call to a gateway tool.
#[derive(Debug)]
pub struct GatewayCall<'a> {
    /// The arguments JSON the model produced.
    pub arguments: &'a str,
    /// For code interpreter calls: the conversation's container (files persist in it).
    pub container_id: &'a str,
}

/// What a gateway tool call produced.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayOutcome {
    /// The code ran (successfully or not: an exception or a timeout is still an outcome, shown in
    /// the logs). `ok` is false when the code failed or the sandbox could not run it.
    CodeInterpreter { outputs: Vec<CodeInterpreterOutput>, ok: bool },
    /// The MCP tool's output text, or why the call failed.
    Mcp(Result<String, String>),
    /// A web search action ran (a backend error is part of `model_result`; the item still
    /// completes).
    WebSearch(WebSearchOutcome),
}

/// What one `web_search` action did.
#[derive(Debug, Clone, PartialEq)]
pub struct WebSearchOutcome {
    /// The public action, `sources` included (the engine drops them unless `include` asks).
    pub action: WebSearchAction,
    /// The JSON text the model is given as the tool result.
    pub model_result: String,
    /// Pages the model may cite from now on (search results, opened pages).
    pub citable: Vec<CitableSource>,
    /// False when the backend or the page fetch failed (counted as a tool error).
    pub ok: bool,
}

/// A URL the model saw, and the title a `url_citation` of it carries (its host when unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CitableSource {
    pub url: String,
    pub title: Option<String>,
}

/// A tool the gateway runs itself.
#[async_trait]
pub trait GatewayTool: Send + Sync {
    /// How the model sees it.
    fn spec(&self) -> &FunctionSpec;
    /// What its calls look like in the output.
    fn kind(&self) -> &GatewayKind;
    /// Run one call. Never fails the response: failures are outcomes.
    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome;
}

/// The gateway tools of one request.
#[derive(Default)]
pub struct ResolvedTools {
    pub tools: Vec<Arc<dyn GatewayTool>>,
    /// `mcp_list_tools` items to show before the first model turn (servers this conversation
    /// has not listed yet).
    pub listings: Vec<McpListToolsItem>,
}

/// Turns a request's `code_interpreter`, `web_search` and `mcp` declarations into gateway tools.
#[async_trait]
pub trait ToolResolver: Send + Sync {
    /// Which gateway tools requests may declare (validation rejects the others with a 400).
    fn capabilities(&self) -> respgw_protocol::Capabilities;

    /// Resolve the declarations of `request`. May do network I/O (MCP inventories); a failure
    /// here is a request error (e.g. 422 `bad_input` for an unknown or unreachable server).
    /// `history` is the conversation so far (to skip servers already listed).
    async fn resolve(&self, request: &ValidatedRequest, history: &[Item]) -> Result<ResolvedTools, ApiError>;
}
