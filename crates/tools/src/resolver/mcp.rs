//! `mcp` for the engine: the tools of a declared MCP server, each a `GatewayTool` — a Built-in
//! server's tools called through the MCP helper ([`BuiltinMcpTool`]), a Remote server's over the
//! request's own session ([`RemoteMcpTool`]). The engine side of the kind (its item, events,
//! listings and history) is `respgw_engine::tool_kinds::mcp`.
//!
//! Built-in MCP tools are listed through the MCP helper at resolve time (so an unknown or
//! unavailable server is a 422 before anything streams); Remote MCP servers are dialled at resolve
//! time, one session per declaration for the whole request (an unreachable or refused server is a
//! 422 too). Either way the tools are filtered by `allowed_tools` and offered as the engine's
//! [`mcp::function_spec`] says. Arguments are checked against the tool's own schema before the
//! call; any failure — bad arguments, a tool error, a timeout, the helper or the server being down
//! — is a failed `mcp_call` item the model sees, never a failed response.

use std::sync::Arc;

use async_trait::async_trait;
use respgw_engine::tool_kinds::{ShownFirst, mcp};
use respgw_engine::{FunctionSpec, GatewayCall, GatewayKind, GatewayOutcome, GatewayTool, ResolvedTools};
use respgw_protocol::ApiError;
use respgw_protocol::ids::{IdKind, new_id};
use respgw_protocol::items::{Item, McpListToolsItem, McpToolInfo};
use respgw_protocol::tools::mcp::McpTool;
use serde_json::{Map, Value};

use crate::mcp::{HelperError, McpHelperClient, RemoteMcp, RemoteSession};
use respgw_mcp::ToolInfo;

/// The tools of the Built-in MCP server `declaration` names, listed through the helper.
pub(super) async fn resolve_builtin(
    index: usize,
    declaration: &McpTool,
    client: McpHelperClient,
    history: &[Item],
    resolved: &mut ResolvedTools,
) -> Result<(), ApiError> {
    let label = &declaration.server_label;
    let param = format!("tools[{index}].server_label");
    let inventory = client.tools(label).await.map_err(|e| match e {
        HelperError::UnknownServer { .. } => {
            ApiError::bad_input(param.clone(), format!("Unknown MCP server_label: {label}"))
        }
        other => ApiError::bad_input(param.clone(), other.to_string()),
    })?;
    for tool in offer_mcp_tools(index, declaration, &inventory, history, resolved)? {
        resolved.tools.push(Arc::new(BuiltinMcpTool::new(client.clone(), label.clone(), tool)));
    }
    Ok(())
}

/// The tools of the Remote MCP server `declaration` names, over a session opened for the request.
pub(super) async fn resolve_remote(
    index: usize,
    declaration: &McpTool,
    remote_mcp: &RemoteMcp,
    history: &[Item],
    resolved: &mut ResolvedTools,
) -> Result<(), ApiError> {
    let session = remote_mcp
        .connect(declaration)
        .await
        .map_err(|e| ApiError::bad_input(format!("tools[{index}].{}", e.field), e.message))?;
    let session = Arc::new(session);
    for tool in offer_mcp_tools(index, declaration, session.tools(), history, resolved)? {
        resolved.tools.push(Arc::new(RemoteMcpTool::new(session.clone(), tool)));
    }
    Ok(())
}

/// The tools of one MCP server that the model gets: the inventory filtered by `allowed_tools` (a
/// 422 when nothing is left). Adds the server's `mcp_list_tools` item unless this conversation
/// already listed that label.
fn offer_mcp_tools<'a>(
    index: usize,
    declaration: &McpTool,
    inventory: &'a [ToolInfo],
    history: &[Item],
    resolved: &mut ResolvedTools,
) -> Result<Vec<&'a ToolInfo>, ApiError> {
    let label = &declaration.server_label;
    let allowed: Vec<&ToolInfo> = inventory
        .iter()
        .filter(|t| declaration.allowed_tools.as_ref().is_none_or(|names| names.contains(&t.name)))
        .collect();
    if allowed.is_empty() {
        return Err(ApiError::bad_input(
            format!("tools[{index}].allowed_tools"),
            format!("MCP server '{label}' has no tools left after `allowed_tools`."),
        ));
    }
    let listed_before = history.iter().any(|item| matches!(item, Item::McpListTools(l) if l.server_label == *label));
    if !listed_before {
        resolved.shown_first.push(ShownFirst::McpListTools(McpListToolsItem {
            id: new_id(IdKind::McpListTools),
            server_label: label.clone(),
            tools: allowed
                .iter()
                .map(|t| McpToolInfo {
                    name: t.name.clone(),
                    description: t.description.clone(),
                    input_schema: t.input_schema.clone(),
                    annotations: t.annotations.clone(),
                })
                .collect(),
            error: None,
        }));
    }
    Ok(allowed)
}

/// How the model sees one MCP tool, and the check of its arguments: shared by Built-in and Remote
/// tools.
struct McpToolFace {
    spec: FunctionSpec,
    kind: GatewayKind,
    /// The real label and tool name (what `kind` holds too, said without a match over kinds).
    server_label: String,
    tool_name: String,
    /// The tool's own input schema, to check arguments before calling.
    validator: Option<jsonschema::Validator>,
}

impl McpToolFace {
    fn new(server_label: String, tool: &ToolInfo) -> Self {
        let spec = mcp::function_spec(&server_label, &tool.name, tool.description.as_deref(), &tool.input_schema);
        let validator = jsonschema::validator_for(&tool.input_schema)
            .inspect_err(|e| tracing::warn!(server_label, tool = %tool.name, error = %e, "tool input schema does not compile; arguments are not checked"))
            .ok();
        let kind = GatewayKind::Mcp { server_label: server_label.clone(), tool_name: tool.name.clone() };
        McpToolFace { spec, kind, server_label, tool_name: tool.name.clone(), validator }
    }

    /// The real label and tool name.
    fn names(&self) -> (&str, &str) {
        (&self.server_label, &self.tool_name)
    }

    /// The model's arguments as a JSON object that matches the tool's input schema, or why not.
    fn arguments(&self, raw: &str) -> Result<Map<String, Value>, String> {
        let arguments = match serde_json::from_str(raw) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err("Tool arguments must be a JSON object.".into()),
            Err(e) => return Err(format!("Tool arguments are not valid JSON: {e}")),
        };
        if let Some(validator) = &self.validator {
            let value = Value::Object(arguments);
            let problems: Vec<String> =
                validator.iter_errors(&value).map(|e| format!("{e} (at '{}')", e.instance_path())).collect();
            if !problems.is_empty() {
                let (server_label, tool_name) = self.names();
                return Err(format!(
                    "Tool arguments do not match the input schema of {server_label}:{tool_name}: {}",
                    problems.join("; ")
                ));
            }
            let Value::Object(arguments) = value else { unreachable!("built from an object") };
            return Ok(arguments);
        }
        Ok(arguments)
    }
}

/// One tool of a Built-in MCP server, called through the helper.
struct BuiltinMcpTool {
    client: McpHelperClient,
    face: McpToolFace,
}

impl BuiltinMcpTool {
    fn new(client: McpHelperClient, server_label: String, tool: &ToolInfo) -> Self {
        BuiltinMcpTool { client, face: McpToolFace::new(server_label, tool) }
    }
}

#[async_trait]
impl GatewayTool for BuiltinMcpTool {
    fn spec(&self) -> &FunctionSpec {
        &self.face.spec
    }

    fn kind(&self) -> &GatewayKind {
        &self.face.kind
    }

    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome {
        let arguments = match self.face.arguments(call.arguments) {
            Ok(arguments) => arguments,
            Err(e) => return GatewayOutcome::Mcp(Err(e)),
        };
        let (server_label, tool_name) = self.face.names();
        GatewayOutcome::Mcp(match self.client.call(server_label, tool_name, Value::Object(arguments)).await {
            Ok(outcome) if outcome.ok => Ok(outcome.output_text.unwrap_or_default()),
            Ok(outcome) => Err(outcome.error_text.unwrap_or_else(|| "The tool reported an error.".into())),
            Err(e) => Err(e.to_string()),
        })
    }
}

/// One tool of a Remote MCP server, called over the request's session with that server.
struct RemoteMcpTool {
    session: Arc<RemoteSession>,
    face: McpToolFace,
}

impl RemoteMcpTool {
    fn new(session: Arc<RemoteSession>, tool: &ToolInfo) -> Self {
        let face = McpToolFace::new(session.label().to_owned(), tool);
        RemoteMcpTool { session, face }
    }
}

#[async_trait]
impl GatewayTool for RemoteMcpTool {
    fn spec(&self) -> &FunctionSpec {
        &self.face.spec
    }

    fn kind(&self) -> &GatewayKind {
        &self.face.kind
    }

    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome {
        let arguments = match self.face.arguments(call.arguments) {
            Ok(arguments) => arguments,
            Err(e) => return GatewayOutcome::Mcp(Err(e)),
        };
        GatewayOutcome::Mcp(self.session.call(self.face.names().1, arguments).await)
    }
}
