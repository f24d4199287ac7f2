//! A stand-in for Exa's hosted MCP server (`https://mcp.exa.ai/mcp`), for the `exa_mcp` web search
//! profile: the same two tools with the same argument names and the same text output format.
//!
//! | Tool | Does |
//! |---|---|
//! | `web_search_exa {query, numResults?, includeDomains?}` | `numResults` (default 3) blocks `Title: …\nURL: …\nText: …`, blank-line separated, on `includeDomains[0]` (default `exa.example`); the query `outage` is a tool error |
//! | `crawling_exa {urls}` | `Title: …\nURL: <url>\nText: Crawled text of <url>.` for the first URL |

use std::sync::Arc;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value, json};

/// The Exa tool set.
#[derive(Debug, Clone, Default)]
pub struct ExaStandIn;

impl ExaStandIn {
    fn tools() -> Vec<Tool> {
        [
            json!({"name": "web_search_exa", "description": "Search the web with Exa.",
                   "inputSchema": {"type": "object", "properties": {
                       "query": {"type": "string"}, "numResults": {"type": "integer"},
                       "includeDomains": {"type": "array", "items": {"type": "string"}}}, "required": ["query"]}}),
            json!({"name": "crawling_exa", "description": "Read pages with Exa.",
                   "inputSchema": {"type": "object", "properties": {
                       "urls": {"type": "array", "items": {"type": "string"}}}, "required": ["urls"]}}),
        ]
        .into_iter()
        .filter_map(|d| serde_json::from_value(d).ok())
        .collect()
    }

    fn call(name: &str, args: &Map<String, Value>) -> CallToolResult {
        let text = |s: String| CallToolResult::success(vec![ContentBlock::text(s)]);
        match name {
            "web_search_exa" => {
                let query = args.get("query").and_then(Value::as_str).unwrap_or_default();
                if query == "outage" {
                    return CallToolResult::error(vec![ContentBlock::text("Exa search is unavailable")]);
                }
                let count = args.get("numResults").and_then(Value::as_u64).unwrap_or(3).min(10);
                let domain =
                    args.get("includeDomains").and_then(|d| d.get(0)).and_then(Value::as_str).unwrap_or("exa.example");
                let slug: String = query.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
                let blocks: Vec<String> = (1..=count)
                    .map(|i| {
                        format!(
                            "Title: {query} result {i}\nURL: https://{domain}/{slug}/{i}\nText: About {query},\npart {i}."
                        )
                    })
                    .collect();
                text(blocks.join("\n\n"))
            }
            "crawling_exa" => {
                let url = args.get("urls").and_then(|u| u.get(0)).and_then(Value::as_str).unwrap_or_default();
                text(format!("Title: Crawled page\nURL: {url}\nText: Crawled text of {url}."))
            }
            other => CallToolResult::error(vec![ContentBlock::text(format!("unknown tool {other:?}"))]),
        }
    }
}

impl ServerHandler for ExaStandIn {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions("Exa stand-in")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(Self::tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        Ok(CallToolResponse::Complete(Self::call(&request.name, &args)))
    }
}

/// Streamable HTTP at `/mcp`, like Exa's endpoint.
pub fn exa_router() -> axum::Router {
    let service = StreamableHttpService::new(
        || Ok(ExaStandIn),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    axum::Router::new().nest_service("/mcp", service)
}
