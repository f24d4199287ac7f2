//! The engine's view of this crate: [`GatewayTools`] resolves a request's `code_interpreter`,
//! `web_search` and `mcp` declarations into [`GatewayTool`]s, and each tool turns a model call into an
//! outcome on its item.
//!
//! Built-in MCP tools are listed through the MCP helper at resolve time (so an unknown or
//! unavailable server is a 422 before anything streams); Remote MCP servers are dialled at resolve
//! time, one session per declaration for the whole request (an unreachable or refused server is a
//! 422 too). Either way the tools are filtered by `allowed_tools`, named `mcp__<label>__<tool>`
//! for the model, and given parameter schemas every upstream accepts. Arguments are checked
//! against the tool's own schema before the call; any failure — bad arguments, a tool error, a
//! timeout, the helper or the server being down — is a failed `mcp_call` item the model sees,
//! never a failed response.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use respgw_engine::{FunctionSpec, GatewayCall, GatewayKind, GatewayOutcome, GatewayTool, ResolvedTools, ToolResolver};
use respgw_protocol::ids::{IdKind, new_id};
use respgw_protocol::items::{CodeInterpreterOutput, Item, McpListToolsItem, McpToolInfo};
use respgw_protocol::tools::{CODE_INTERPRETER_FUNCTION, McpTool, mcp_function_name};
use respgw_protocol::{ApiError, ToolDeclaration, ValidatedRequest};
use serde_json::{Map, Value, json};

use crate::code_interpreter::{ExecutionStatus, Sandbox};
use crate::mcp::{HelperError, McpHelperClient, RemoteMcp, RemoteSession, ToolInfo};
use crate::web_search::WebSearch;

/// The gateway tools this process can run.
#[derive(Clone, Default)]
pub struct GatewayTools {
    sandbox: Option<Sandbox>,
    mcp_helper: Option<McpHelperClient>,
    /// Remote MCP (disabled by default).
    remote_mcp: RemoteMcp,
    /// `web_search`, when a profile is configured.
    web_search: Option<WebSearch>,
}

impl GatewayTools {
    /// `sandbox`: the code interpreter, when enabled and working; `mcp_helper`: the Built-in MCP
    /// helper, when MCP servers are configured; `remote_mcp`: Remote MCP and its settings.
    pub fn new(sandbox: Option<Sandbox>, mcp_helper: Option<McpHelperClient>, remote_mcp: RemoteMcp) -> Self {
        GatewayTools { sandbox, mcp_helper, remote_mcp, web_search: None }
    }

    /// Offer `web_search` through this profile.
    pub fn with_web_search(mut self, web_search: WebSearch) -> Self {
        self.web_search = Some(web_search);
        self
    }
}

#[async_trait]
impl ToolResolver for GatewayTools {
    fn capabilities(&self) -> respgw_protocol::Capabilities {
        respgw_protocol::Capabilities {
            code_interpreter: self.sandbox.is_some(),
            builtin_mcp: self.mcp_helper.is_some(),
            remote_mcp: self.remote_mcp.settings().enabled,
            remote_url_checks: self.remote_mcp.settings().url_checks,
            web_search: self.web_search.is_some(),
        }
    }

    async fn resolve(&self, request: &ValidatedRequest, history: &[Item]) -> Result<ResolvedTools, ApiError> {
        let mut resolved = ResolvedTools::default();
        for (i, declaration) in request.tools.iter().enumerate() {
            match declaration {
                // Client tools (the client runs them) and tools left out of the offer.
                ToolDeclaration::Function(_)
                | ToolDeclaration::Namespace(_)
                | ToolDeclaration::Custom(_)
                | ToolDeclaration::LocalShell(_)
                | ToolDeclaration::OfflineWebSearch(_) => {}
                ToolDeclaration::CodeInterpreter(_) => {
                    let sandbox = self.sandbox.clone().ok_or_else(|| {
                        ApiError::invalid(
                            format!("tools[{i}].type"),
                            "Tool type 'code_interpreter' is not enabled on this gateway.",
                        )
                    })?;
                    resolved.tools.push(Arc::new(CodeInterpreterTool::new(sandbox)));
                }
                ToolDeclaration::WebSearch(declaration) => {
                    let web_search = self.web_search.as_ref().ok_or_else(|| {
                        ApiError::invalid(
                            format!("tools[{i}].type"),
                            "Tool type 'web_search' is not enabled on this gateway.",
                        )
                    })?;
                    resolved.tools.push(Arc::new(web_search.tool(declaration)));
                }
                ToolDeclaration::Mcp(mcp) if mcp.is_builtin() => {
                    let client = self.mcp_helper.clone().ok_or_else(|| {
                        ApiError::bad_input(
                            format!("tools[{i}].server_label"),
                            "Built-in MCP tools were declared but no Built-in MCP servers are configured on this gateway.",
                        )
                    })?;
                    self.resolve_builtin(i, mcp, client, history, &mut resolved).await?;
                }
                ToolDeclaration::Mcp(mcp) => {
                    let session = self
                        .remote_mcp
                        .connect(mcp)
                        .await
                        .map_err(|e| ApiError::bad_input(format!("tools[{i}].{}", e.field), e.message))?;
                    let session = Arc::new(session);
                    for tool in offer_mcp_tools(i, mcp, session.tools(), history, &mut resolved)? {
                        resolved.tools.push(Arc::new(RemoteMcpTool::new(session.clone(), tool)));
                    }
                }
            }
        }
        Ok(resolved)
    }
}

impl GatewayTools {
    async fn resolve_builtin(
        &self,
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
        resolved.listings.push(McpListToolsItem {
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
        });
    }
    Ok(allowed)
}

/// `code_interpreter`: the model sends `{"code": "…"}`, the sandbox runs it.
struct CodeInterpreterTool {
    sandbox: Sandbox,
    spec: FunctionSpec,
    kind: GatewayKind,
}

impl CodeInterpreterTool {
    fn new(sandbox: Sandbox) -> Self {
        let spec = FunctionSpec {
            name: CODE_INTERPRETER_FUNCTION.to_owned(),
            description: Some(
                "Run Python 3 code in a sandbox with numpy, pandas and matplotlib, without network access. \
                 Files under the working directory persist between calls of this conversation. The value \
                 of the last expression and everything printed is returned; figures saved as PNG (or \
                 shown with plt.show()) are shown to the user."
                    .to_owned(),
            ),
            parameters: json!({
                "type": "object",
                "properties": {"code": {"type": "string", "description": "The Python code to run."}},
                "required": ["code"],
                "additionalProperties": false
            }),
            strict: Some(true),
        };
        CodeInterpreterTool { sandbox, spec, kind: GatewayKind::CodeInterpreter }
    }
}

#[async_trait]
impl GatewayTool for CodeInterpreterTool {
    fn spec(&self) -> &FunctionSpec {
        &self.spec
    }

    fn kind(&self) -> &GatewayKind {
        &self.kind
    }

    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome {
        let code = serde_json::from_str::<Value>(call.arguments)
            .ok()
            .and_then(|v| v.get("code").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| call.arguments.to_owned());
        match self.sandbox.execute(call.container_id, &code).await {
            Ok(execution) => {
                let mut outputs = Vec::new();
                let mut logs = String::new();
                for text in [&execution.stdout, &execution.stderr] {
                    if !text.is_empty() {
                        logs.push_str(text);
                        if !logs.ends_with('\n') {
                            logs.push('\n');
                        }
                    }
                }
                let ran = matches!(execution.status, ExecutionStatus::Success | ExecutionStatus::Error);
                if !ran {
                    logs.push_str(&format!("[{}]\n", execution.status));
                }
                if !logs.is_empty() {
                    outputs.push(CodeInterpreterOutput::Logs { logs });
                }
                if let Some(result) = execution.result {
                    outputs.push(CodeInterpreterOutput::Logs { logs: result });
                }
                for png in &execution.images {
                    let data = base64::engine::general_purpose::STANDARD.encode(png);
                    outputs.push(CodeInterpreterOutput::Image { url: format!("data:image/png;base64,{data}") });
                }
                GatewayOutcome::CodeInterpreter { outputs, ok: ran }
            }
            Err(e) => GatewayOutcome::CodeInterpreter {
                outputs: vec![CodeInterpreterOutput::Logs { logs: format!("[{e}]") }],
                ok: false,
            },
        }
    }
}

/// How the model sees one MCP tool, and the check of its arguments: shared by Built-in and Remote
/// tools.
struct McpToolFace {
    spec: FunctionSpec,
    kind: GatewayKind,
    /// The tool's own input schema, to check arguments before calling.
    validator: Option<jsonschema::Validator>,
}

impl McpToolFace {
    fn new(server_label: String, tool: &ToolInfo) -> Self {
        let spec = FunctionSpec {
            name: mcp_function_name(&server_label, &tool.name),
            description: Some(
                tool.description
                    .clone()
                    .filter(|d| !d.trim().is_empty())
                    .unwrap_or_else(|| format!("MCP tool {server_label}:{}", tool.name)),
            ),
            parameters: upstream_schema(&tool.input_schema),
            strict: None,
        };
        let validator = jsonschema::validator_for(&tool.input_schema)
            .inspect_err(|e| tracing::warn!(server_label, tool = %tool.name, error = %e, "tool input schema does not compile; arguments are not checked"))
            .ok();
        McpToolFace { spec, kind: GatewayKind::Mcp { server_label, tool_name: tool.name.clone() }, validator }
    }

    /// The real label and tool name.
    fn names(&self) -> (&str, &str) {
        match &self.kind {
            GatewayKind::Mcp { server_label, tool_name } => (server_label, tool_name),
            GatewayKind::CodeInterpreter | GatewayKind::WebSearch => ("", ""),
        }
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

/// An MCP input schema made safe for any upstream's function-calling: local `$ref`s inlined
/// (`#/$defs/…`, `#/definitions/…`, cycles cut), `$defs`/`definitions`/`$schema`/`$id` dropped,
/// and the root made an object schema with `properties` — some servers send `{}` or omit `type`.
pub fn upstream_schema(schema: &Value) -> Value {
    let defs = |key: &str| schema.get(key).and_then(Value::as_object).cloned().unwrap_or_default();
    let (defs, definitions) = (defs("$defs"), defs("definitions"));
    let mut root = inline_refs(schema, &defs, &definitions, 0);
    let obj = match root.as_object_mut() {
        Some(obj) => obj,
        None => return json!({"type": "object", "properties": {}}),
    };
    for key in ["$defs", "definitions", "$schema", "$id"] {
        obj.remove(key);
    }
    obj.entry("type").or_insert_with(|| json!("object"));
    if obj.get("type") == Some(&json!("object")) {
        obj.entry("properties").or_insert_with(|| json!({}));
    }
    root
}

/// How deep `$ref`s are followed before a (probably recursive) reference is cut.
const MAX_REF_DEPTH: usize = 8;

fn inline_refs(node: &Value, defs: &Map<String, Value>, definitions: &Map<String, Value>, depth: usize) -> Value {
    match node {
        Value::Object(obj) => {
            if let Some(Value::String(reference)) = obj.get("$ref") {
                let target = reference
                    .strip_prefix("#/$defs/")
                    .and_then(|name| defs.get(name))
                    .or_else(|| reference.strip_prefix("#/definitions/").and_then(|name| definitions.get(name)));
                return match target {
                    Some(target) if depth < MAX_REF_DEPTH => inline_refs(target, defs, definitions, depth + 1),
                    // A cycle, or a reference we cannot resolve: accept any object there.
                    _ => json!({"type": "object"}),
                };
            }
            Value::Object(obj.iter().map(|(k, v)| (k.clone(), inline_refs(v, defs, definitions, depth))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| inline_refs(v, defs, definitions, depth)).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_are_inlined_and_the_root_is_an_object() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"filter": {"$ref": "#/$defs/Filter"}},
            "$defs": {"Filter": {"type": "object", "properties": {"tag": {"type": "string"}, "child": {"$ref": "#/$defs/Filter"}}}}
        });
        let safe = upstream_schema(&schema);
        assert!(!safe.to_string().contains("$ref") && !safe.to_string().contains("$defs"), "{safe}");
        assert_eq!(safe["properties"]["filter"]["properties"]["tag"], json!({"type": "string"}));
        assert_eq!(upstream_schema(&json!({})), json!({"type": "object", "properties": {}}));
        assert_eq!(upstream_schema(&json!(null)), json!({"type": "object", "properties": {}}));
        assert_eq!(upstream_schema(&json!({"properties": {"a": {"type": "integer"}}}))["type"], "object");
    }
}
