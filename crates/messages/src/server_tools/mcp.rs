//! The MCP connector (`mcp_servers`, beta `mcp-client-2025-04-04`) on the gateway's Remote MCP:
//! each server as an `mcp` tool, the `mcp_tool_use` + `mcp_tool_result` blocks an `mcp_call`
//! item stands for, and those blocks replayed as the item again.
//!
//! - `{"type": "url", "url", "name", "authorization_token", "tool_configuration": {"enabled",
//!   "allowed_tools"}}` → `{"type": "mcp", "server_url", "server_label": name, "authorization",
//!   "allowed_tools", "require_approval": "never"}`: the gateway dials the server for this request
//!   only and never keeps the token. A server with `enabled: false` is not declared.
//! - `mcp_tool_use`: `name` is the tool's name on its server, `server_name` the server's `name`,
//!   `input` the model's arguments (`{}` when they are not an object). `mcp_tool_result`: the
//!   tool's output, or its error with `is_error: true`, as one text block.
//! - Replay: the blocks become the item with the same output or error, so the model reads the
//!   same result as when the tool ran.

use respgw_protocol::items::McpCallItem;
use respgw_protocol::{ApiError, Capabilities};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ReplayedCall, invalid, typed};
use crate::reply::{ContentBlock, tool_input};

/// One server of `mcp_servers`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub name: String,
    pub url: String,
    /// `authorization_token`: sent to the server as a bearer token.
    pub authorization_token: Option<String>,
    /// `tool_configuration.allowed_tools`: `None` offers every tool of the server.
    pub allowed_tools: Option<Vec<String>>,
    /// `tool_configuration.enabled` (true unless `false`).
    pub enabled: bool,
}

#[derive(Deserialize)]
struct ServerFields {
    #[serde(rename = "type")]
    kind: String,
    url: String,
    name: String,
    #[serde(default)]
    authorization_token: Option<String>,
    #[serde(default)]
    tool_configuration: Option<ToolConfigurationFields>,
}

#[derive(Deserialize)]
struct ToolConfigurationFields {
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    allowed_tools: Option<Vec<String>>,
}

/// Parse `mcp_servers` (`null` or absent: none).
pub fn parse_servers(value: Option<Value>) -> Result<Vec<McpServer>, ApiError> {
    let servers = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(servers)) => servers,
        Some(_) => return Err(invalid("mcp_servers", "expected a list of MCP server definitions")),
    };
    let mut parsed: Vec<McpServer> = Vec::with_capacity(servers.len());
    for (i, server) in servers.into_iter().enumerate() {
        let at = format!("mcp_servers[{i}]");
        let fields: ServerFields = typed(server, &at)?;
        if fields.kind != "url" {
            return Err(invalid(&format!("{at}.type"), "the only MCP server type is 'url'"));
        }
        if parsed.iter().any(|earlier| earlier.name == fields.name) {
            return Err(invalid(&format!("{at}.name"), format!("two MCP servers are named '{}'", fields.name)));
        }
        let configuration = fields.tool_configuration;
        parsed.push(McpServer {
            name: fields.name,
            url: fields.url,
            authorization_token: fields.authorization_token,
            enabled: configuration.as_ref().and_then(|c| c.enabled).unwrap_or(true),
            allowed_tools: configuration.and_then(|c| c.allowed_tools),
        });
    }
    Ok(parsed)
}

impl McpServer {
    /// A 400 naming `mcp_servers[index]` when the gateway does not dial Remote MCP servers.
    pub fn check_enabled(caps: &Capabilities, index: usize) -> Result<(), ApiError> {
        if caps.remote_mcp {
            return Ok(());
        }
        Err(invalid(
            &format!("mcp_servers[{index}]"),
            "the MCP connector runs on the gateway's Remote MCP, which this gateway was started without \
             (GW_MCP_REQUEST_REMOTE_ENABLED=false)",
        ))
    }

    /// The engine's Remote MCP declaration; the gateway runs every call without asking.
    pub fn engine_tool(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("type".into(), json!("mcp"));
        tool.insert("server_label".into(), json!(self.name));
        tool.insert("server_url".into(), json!(self.url));
        if let Some(token) = &self.authorization_token {
            tool.insert("authorization".into(), json!(token));
        }
        if let Some(allowed) = &self.allowed_tools {
            tool.insert("allowed_tools".into(), json!(allowed));
        }
        tool.insert("require_approval".into(), json!("never"));
        Value::Object(tool)
    }
}

/// The client's path of a field of the engine declaration (`.server_label` is `.name`, …).
pub fn field_path(engine_field: &str) -> String {
    for (engine, client) in [
        (".server_label", ".name"),
        (".server_url", ".url"),
        (".authorization", ".authorization_token"),
        (".allowed_tools", ".tool_configuration.allowed_tools"),
    ] {
        if let Some(rest) = engine_field.strip_prefix(engine) {
            return format!("{client}{rest}");
        }
    }
    engine_field.to_owned()
}

/// An engine message about a Remote MCP declaration in the connector's words: its backquoted
/// field names (`` `server_url` ``) as `mcp_servers` spells them (`` `url` ``).
pub fn client_words(message: &str) -> String {
    [("`server_label`", "`name`"), ("`server_url`", "`url`"), ("`authorization`", "`authorization_token`")]
        .iter()
        .fold(message.to_owned(), |message, (engine, client)| message.replace(engine, client))
}

/// The blocks an `mcp_call` item stands for: its call and its result.
pub fn blocks(item: &McpCallItem, id: String) -> Vec<ContentBlock> {
    let (text, is_error) = match (&item.error, &item.output) {
        (Some(error), _) => (error.clone(), true),
        (None, output) => (output.clone().unwrap_or_default(), false),
    };
    vec![
        ContentBlock::McpToolUse {
            id: id.clone(),
            name: item.name.clone(),
            server_name: item.server_label.clone(),
            input: tool_input(&item.arguments),
        },
        ContentBlock::McpToolResult { tool_use_id: id, is_error, content: json!([{"type": "text", "text": text}]) },
    ]
}

/// A replayed `mcp_tool_result`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayedResult {
    /// Its text blocks (or string content), joined.
    pub text: String,
    pub is_error: bool,
}

#[derive(Deserialize)]
struct TextFields {
    text: String,
}

/// Parse a replayed `mcp_tool_result`'s `content` (a string or text blocks) at `at`.
pub fn parse_result(content: Option<Value>, is_error: bool, at: &str) -> Result<ReplayedResult, ApiError> {
    let text = match content {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text,
        Some(Value::Array(blocks)) => blocks
            .into_iter()
            .enumerate()
            .map(|(i, block)| typed::<TextFields>(block, &format!("{at}[{i}]")).map(|block| block.text))
            .collect::<Result<Vec<_>, _>>()?
            .join("\n"),
        Some(_) => return Err(invalid(at, "expected a string or a list of text blocks")),
    };
    Ok(ReplayedResult { text, is_error })
}

/// The engine's `mcp_call` item for a replayed call (`server_name` and `name` its server and
/// tool) and its result.
pub fn replayed_item(call: &ReplayedCall, server_name: &str, name: &str, result: ReplayedResult) -> Value {
    let mut item = json!({
        "type": "mcp_call",
        "id": call.item_id,
        "server_label": server_name,
        "name": name,
        "arguments": Value::Object(call.input.clone()).to_string(),
        "status": if result.is_error { "failed" } else { "completed" },
    });
    let field = if result.is_error { "error" } else { "output" };
    item[field] = json!(result.text);
    item
}

#[cfg(test)]
mod tests {
    use respgw_protocol::items::CallStatus;

    use super::*;

    #[test]
    fn a_server_is_a_remote_mcp_tool_run_without_approval() {
        let servers = parse_servers(Some(json!([{
            "type": "url", "url": "https://mcp.example/mcp", "name": "docs", "authorization_token": "t0k",
            "tool_configuration": {"enabled": true, "allowed_tools": ["search"]},
        }, {"type": "url", "url": "https://other.example/", "name": "off", "tool_configuration": {"enabled": false}}])))
        .unwrap();
        assert_eq!(
            servers[0].engine_tool(),
            json!({"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example/mcp",
                   "authorization": "t0k", "allowed_tools": ["search"], "require_approval": "never"})
        );
        assert!(servers[0].enabled && !servers[1].enabled);
    }

    #[test]
    fn bad_servers_are_named() {
        let refused = |value: Value| parse_servers(Some(value)).unwrap_err().param.unwrap();
        assert_eq!(refused(json!([{"type": "stdio", "url": "u", "name": "a"}])), "mcp_servers[0].type");
        assert_eq!(refused(json!([{"type": "url", "name": "a"}])), "mcp_servers[0].url");
        let twice = json!([{"type": "url", "url": "u", "name": "a"}, {"type": "url", "url": "v", "name": "a"}]);
        assert_eq!(refused(twice), "mcp_servers[1].name");
        assert_eq!(field_path(".server_label"), ".name");
        assert_eq!(field_path(".allowed_tools[0]"), ".tool_configuration.allowed_tools[0]");
    }

    #[test]
    fn a_call_and_its_result_round_trip() {
        for (output, error) in [(Some("found it"), None), (None, Some("no such page"))] {
            let original = McpCallItem {
                id: "mcp_1".into(),
                server_label: "docs".into(),
                name: "search".into(),
                arguments: r#"{"q":"x"}"#.into(),
                status: if error.is_some() { CallStatus::Failed } else { CallStatus::Completed },
                output: output.map(str::to_owned),
                error: error.map(str::to_owned),
                approval_request_id: None,
            };
            let blocks = blocks(&original, "mcptoolu_mcp_1".into());
            let value = serde_json::to_value(&blocks).unwrap();
            assert_eq!(value[0]["server_name"], "docs");
            assert_eq!(value[0]["input"], json!({"q": "x"}));
            assert_eq!(value[1]["is_error"], json!(error.is_some()));
            let call = ReplayedCall { item_id: "mcp_1".into(), input: value[0]["input"].as_object().unwrap().clone() };
            let result = parse_result(Some(value[1]["content"].clone()), error.is_some(), "content").unwrap();
            let replayed: McpCallItem = serde_json::from_value({
                let mut item = replayed_item(&call, "docs", "search", result);
                item.as_object_mut().unwrap().remove("type");
                item
            })
            .unwrap();
            assert_eq!(replayed, original);
        }
    }
}
