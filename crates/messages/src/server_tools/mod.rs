//! Anthropic's server tools and MCP connector on the gateway's own tools: the engine runs them
//! as it does for the Responses API, and this module only translates, one file per kind —
//! [`web_search`] (`web_search_20250305` → `web_search`), [`code_execution`]
//! (`code_execution_20250522` → `code_interpreter`) and [`mcp`] (`mcp_servers` → Remote MCP).
//! Each is offered only where its gateway tool is enabled; elsewhere the engine's 400 says why.
//!
//! Each kind owns its declaration, the blocks its items stand for in a reply (a call block —
//! `server_tool_use` or `mcp_tool_use` — then its result block), and those blocks replayed in a
//! later request as the engine's items again, so the model sees the same history. A call
//! block's `id` is the engine item's id behind a prefix (`srvtoolu_`, `mcptoolu_`, as
//! Anthropic's ids look), which replay takes off: the engine tells from its item ids which
//! calls one model turn made.

pub mod code_execution;
pub mod mcp;
pub mod web_search;

use respgw_protocol::items::Item;
use respgw_protocol::tools::tool_not_enabled;
use respgw_protocol::{ApiError, Capabilities};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::reply::ContentBlock;
pub(crate) use crate::request::invalid;

/// The server tool types a request's `tools` may declare.
pub const SERVER_TOOL_TYPES: &[&str] = &["web_search_20250305", "code_execution_20250522"];

/// The block types of earlier replies' gateway tool calls that an assistant message may replay.
pub const REPLAYED_BLOCK_TYPES: &[&str] =
    &["server_tool_use", "web_search_tool_result", "code_execution_tool_result", "mcp_tool_use", "mcp_tool_result"];

/// Prefix of a `server_tool_use` block's id before the engine item's id.
const SERVER_TOOL_USE_PREFIX: &str = "srvtoolu_";
/// Prefix of an `mcp_tool_use` block's id before the engine item's id.
const MCP_TOOL_USE_PREFIX: &str = "mcptoolu_";

/// A server tool declared in `tools`.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerTool {
    WebSearch(web_search::WebSearchDeclaration),
    CodeExecution,
}

impl ServerTool {
    /// Whether a tool of type `kind` is a server tool this module parses (or refuses in its own
    /// words): the [`SERVER_TOOL_TYPES`] and the other versions of code execution.
    pub fn is_declared_by(kind: &str) -> bool {
        SERVER_TOOL_TYPES.contains(&kind) || kind.starts_with("code_execution_")
    }

    /// The server tool a declaration of type `kind` (see [`ServerTool::is_declared_by`]) at `at`
    /// declares.
    pub fn parse(kind: &str, value: Value, at: &str) -> Result<ServerTool, ApiError> {
        match kind {
            "web_search_20250305" => web_search::parse_declaration(value, at).map(ServerTool::WebSearch),
            "code_execution_20250522" => {
                code_execution::parse_declaration(value, at).map(|()| ServerTool::CodeExecution)
            }
            _ => Err(invalid(
                &format!("{at}.type"),
                format!(
                    "this gateway runs code execution as 'code_execution_20250522' only: its sandbox runs \
                     Python, not the bash and file edits of '{kind}'"
                ),
            )),
        }
    }

    /// A 400 naming the declaration at `at` when the gateway tool it runs on is not enabled.
    pub fn check_enabled(&self, caps: &Capabilities, at: &str) -> Result<(), ApiError> {
        let (declared, engine_kind, enabled) = match self {
            ServerTool::WebSearch(_) => ("web_search_20250305", "web_search", caps.web_search),
            ServerTool::CodeExecution => ("code_execution_20250522", "code_interpreter", caps.code_interpreter),
        };
        if enabled {
            return Ok(());
        }
        let why = tool_not_enabled(at, engine_kind).message;
        Err(invalid(&format!("{at}.type"), format!("'{declared}' runs on the gateway's {engine_kind} tool. {why}")))
    }

    /// The engine's declaration of the tool.
    pub fn engine_tool(&self) -> Value {
        match self {
            ServerTool::WebSearch(declaration) => declaration.engine_tool(),
            ServerTool::CodeExecution => code_execution::engine_tool(),
        }
    }

    /// The `include` the engine needs so that the reply can show the tool's results.
    pub fn include(&self) -> &'static str {
        match self {
            ServerTool::WebSearch(_) => respgw_protocol::tools::web_search::MODEL_RESULT_INCLUDE,
            ServerTool::CodeExecution => "code_interpreter_call.outputs",
        }
    }

    /// `max_uses`, where the tool has one.
    pub fn max_uses(&self) -> Option<u64> {
        match self {
            ServerTool::WebSearch(declaration) => declaration.max_uses,
            ServerTool::CodeExecution => None,
        }
    }
}

/// A replayed call block: the engine item's id and the call's `input`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayedCall {
    pub item_id: String,
    pub input: Map<String, Value>,
}

/// A block of an earlier reply's gateway tool call, replayed in an assistant message.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayedBlock {
    /// `server_tool_use` (`name` `web_search` or `code_execution`) or `mcp_tool_use`; `id` as
    /// the block has it.
    Call { id: String, call: ReplayedCall, tool: CalledTool },
    /// A result block for the call `tool_use_id`.
    Result { tool_use_id: String, result: ReplayedResult },
}

/// Which tool a replayed call block called.
#[derive(Debug, Clone, PartialEq)]
pub enum CalledTool {
    WebSearch,
    CodeExecution,
    Mcp { server_name: String, name: String },
}

/// A replayed result block's content.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayedResult {
    WebSearch(web_search::ReplayedResult),
    CodeExecution(code_execution::ReplayedResult),
    Mcp(mcp::ReplayedResult),
}

#[derive(Deserialize)]
struct CallFields {
    id: String,
    name: String,
    input: Map<String, Value>,
    #[serde(default)]
    server_name: Option<String>,
}

#[derive(Deserialize)]
struct ResultFields {
    tool_use_id: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    is_error: Option<bool>,
}

/// Parse a replayed block of type `kind` (one of [`REPLAYED_BLOCK_TYPES`]) at `at`.
pub fn parse_block(kind: &str, value: Value, at: &str) -> Result<ReplayedBlock, ApiError> {
    match kind {
        "server_tool_use" | "mcp_tool_use" => {
            let fields: CallFields = typed(value, at)?;
            let (prefix, tool) = match (kind, fields.name.as_str()) {
                ("mcp_tool_use", _) => {
                    let Some(server_name) = fields.server_name else {
                        return Err(invalid(
                            &format!("{at}.server_name"),
                            "an mcp_tool_use block needs its server_name",
                        ));
                    };
                    (MCP_TOOL_USE_PREFIX, CalledTool::Mcp { server_name, name: fields.name.clone() })
                }
                (_, web_search::TOOL_NAME) => (SERVER_TOOL_USE_PREFIX, CalledTool::WebSearch),
                (_, code_execution::TOOL_NAME) => (SERVER_TOOL_USE_PREFIX, CalledTool::CodeExecution),
                (_, other) => {
                    return Err(invalid(
                        &format!("{at}.name"),
                        format!("this gateway runs the server tools 'web_search' and 'code_execution', not '{other}'"),
                    ));
                }
            };
            let item_id = fields.id.strip_prefix(prefix).unwrap_or(&fields.id).to_owned();
            if item_id.is_empty() {
                return Err(invalid(&format!("{at}.id"), format!("a {kind} block needs a non-empty id")));
            }
            Ok(ReplayedBlock::Call { id: fields.id, call: ReplayedCall { item_id, input: fields.input }, tool })
        }
        _ => {
            let fields: ResultFields = typed(value, at)?;
            let content_at = format!("{at}.content");
            let result = match kind {
                "web_search_tool_result" => ReplayedResult::WebSearch(web_search::parse_result(
                    fields.content.unwrap_or(Value::Null),
                    &content_at,
                )?),
                "code_execution_tool_result" => ReplayedResult::CodeExecution(code_execution::parse_result(
                    fields.content.unwrap_or(Value::Null),
                    &content_at,
                )?),
                _ => ReplayedResult::Mcp(mcp::parse_result(
                    fields.content,
                    fields.is_error.unwrap_or(false),
                    &content_at,
                )?),
            };
            Ok(ReplayedBlock::Result { tool_use_id: fields.tool_use_id, result })
        }
    }
}

/// The calls of one assistant message still waiting for their result blocks, while its blocks
/// are read in order.
#[derive(Debug, Default)]
pub struct PendingCalls(Vec<(String, ReplayedCall, CalledTool, String)>);

impl PendingCalls {
    /// A call block at `at`; its item is made when its result comes.
    pub fn call(&mut self, id: &str, call: &ReplayedCall, tool: &CalledTool, at: &str) {
        self.0.push((id.to_owned(), call.clone(), tool.clone(), at.to_owned()));
    }

    /// A result block at `at`: the engine item of its call and this result.
    pub fn result(&mut self, tool_use_id: &str, result: &ReplayedResult, at: &str) -> Result<Value, ApiError> {
        let Some(position) = self.0.iter().position(|(id, ..)| id == tool_use_id) else {
            return Err(invalid(
                &format!("{at}.tool_use_id"),
                format!("no earlier call block of this message has the id '{tool_use_id}'"),
            ));
        };
        let (_, call, tool, _) = self.0.remove(position);
        match (tool, result.clone()) {
            (CalledTool::WebSearch, ReplayedResult::WebSearch(result)) => Ok(web_search::replayed_item(&call, result)),
            (CalledTool::CodeExecution, ReplayedResult::CodeExecution(result)) => {
                Ok(code_execution::replayed_item(&call, result))
            }
            (CalledTool::Mcp { server_name, name }, ReplayedResult::Mcp(result)) => {
                Ok(mcp::replayed_item(&call, &server_name, &name, result))
            }
            _ => Err(invalid(at, format!("this result block does not answer the kind of call '{tool_use_id}' is"))),
        }
    }

    /// The message ended: a call left without its result is refused.
    pub fn finish(self) -> Result<(), ApiError> {
        match self.0.into_iter().next() {
            Some((id, _, _, at)) => {
                Err(invalid(&at, format!("the call '{id}' has no result block after it in this message")))
            }
            None => Ok(()),
        }
    }
}

/// The blocks a gateway tool's output item stands for (its call and its result); `None` for
/// other items.
pub fn blocks(item: &Item) -> Option<Vec<ContentBlock>> {
    match item {
        Item::WebSearchCall(call) => Some(web_search::blocks(call, format!("{SERVER_TOOL_USE_PREFIX}{}", call.id))),
        Item::CodeInterpreterCall(call) => {
            Some(code_execution::blocks(call, format!("{SERVER_TOOL_USE_PREFIX}{}", call.id)))
        }
        Item::McpCall(call) => Some(mcp::blocks(call, format!("{MCP_TOOL_USE_PREFIX}{}", call.id))),
        _ => None,
    }
}

/// `usage.server_tool_use`: the web searches the response ran, when it ran any.
pub fn usage(output: &[Item]) -> Option<ServerToolUsage> {
    let searches = web_search::searches(output.iter().filter_map(|item| match item {
        Item::WebSearchCall(call) => Some(call),
        _ => None,
    }));
    (searches > 0).then_some(ServerToolUsage { web_search_requests: searches, web_fetch_requests: 0 })
}

/// `usage.server_tool_use` (the SDK's `ServerToolUsage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ServerToolUsage {
    pub web_search_requests: u64,
    /// Always 0: the gateway has no web fetch tool.
    pub web_fetch_requests: u64,
}

/// Deserialize `value` as `T`; an error names its path under `at`.
fn typed<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| ApiError::from_path_error(at, e))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn block(value: Value) -> ReplayedBlock {
        let kind = value["type"].as_str().unwrap().to_owned();
        parse_block(&kind, value, "messages[1].content[0]").unwrap()
    }

    #[test]
    fn a_call_and_its_result_become_one_engine_item() {
        let mut pending = PendingCalls::default();
        let ReplayedBlock::Call { id, call, tool } = block(json!({
            "type": "server_tool_use", "id": "srvtoolu_ci_7", "name": "code_execution", "input": {"code": "1"}
        })) else {
            panic!()
        };
        assert_eq!(call.item_id, "ci_7");
        pending.call(&id, &call, &tool, "messages[1].content[0]");
        let ReplayedBlock::Result { tool_use_id, result } = block(json!({
            "type": "code_execution_tool_result", "tool_use_id": "srvtoolu_ci_7",
            "content": {"type": "code_execution_result", "stdout": "1", "stderr": "", "return_code": 0, "content": []}
        })) else {
            panic!()
        };
        let item = pending.result(&tool_use_id, &result, "messages[1].content[1]").unwrap();
        assert_eq!(item["type"], "code_interpreter_call");
        assert_eq!(item["id"], "ci_7");
        assert!(pending.finish().is_ok());
    }

    #[test]
    fn unpaired_and_mismatched_blocks_are_refused() {
        let mut pending = PendingCalls::default();
        let web_result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_ws_1", "content": []});
        let ReplayedBlock::Result { tool_use_id, result } = block(web_result) else { panic!() };
        let error = pending.result(&tool_use_id, &result, "messages[1].content[0]").unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[1].content[0].tool_use_id"));

        let ReplayedBlock::Call { id, call, tool } =
            block(json!({"type": "server_tool_use", "id": "srvtoolu_ci_1", "name": "code_execution", "input": {}}))
        else {
            panic!()
        };
        pending.call(&id, &call, &tool, "messages[1].content[0]");
        let web_result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_ci_1", "content": []});
        let ReplayedBlock::Result { tool_use_id, result } = block(web_result) else { panic!() };
        assert!(pending.result(&tool_use_id, &result, "messages[1].content[1]").is_err());

        let mut left = PendingCalls::default();
        left.call(&id, &call, &tool, "messages[1].content[0]");
        assert_eq!(left.finish().unwrap_err().param.as_deref(), Some("messages[1].content[0]"));
    }

    #[test]
    fn only_the_gateways_server_tools_are_replayed() {
        let bash = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "bash_code_execution", "input": {}});
        let error = parse_block("server_tool_use", bash, "messages[1].content[0]").unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[1].content[0].name"));
    }

    #[test]
    fn bash_code_execution_is_refused_with_the_version_to_declare() {
        let declared = json!({"type": "code_execution_20250825", "name": "code_execution"});
        assert!(ServerTool::is_declared_by("code_execution_20250825"));
        let error = ServerTool::parse("code_execution_20250825", declared, "tools[0]").unwrap_err();
        assert!(error.message.contains("code_execution_20250522"), "{}", error.message);
        assert!(!ServerTool::is_declared_by("custom") && !ServerTool::is_declared_by("bash_20250124"));
    }
}
