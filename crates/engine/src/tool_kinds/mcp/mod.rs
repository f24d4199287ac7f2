//! `mcp`: tools of MCP servers, called by the gateway — Built-in MCP (servers configured on the
//! gateway, reached through the MCP helper) and Remote MCP (declared per request with a
//! `server_url`) alike.
//!
//! Each tool of a declared server is one function for the model, `mcp__<label>__<tool>`
//! ([`function_spec`], its input schema made acceptable to any upstream by
//! [`upstream_schema`]). A server this conversation has not listed yet is first shown as an
//! `mcp_list_tools` item ([`show_listing`], called through the run's hooks, `hooks.rs`). A call's
//! `mcp_call` item carries the real label and tool name; it is announced (`…call.in_progress`)
//! when the model names the function, streams `mcp_call_arguments.delta`, ends its arguments with
//! `…arguments.done`, and is done with the tool's output (`…call.completed`) or its error
//! (`…call.failed`). A `tool_choice` naming an MCP server asks for a call of its tool, or of any
//! of its tools ([`forced`]); a named tool must be one the server has ([`check_choice`]).
//!
//! A tool whose declaration's `require_approval` asks for the client's approval is called in
//! another shape, the `mcp_approval_request` of [`approval`], and runs only once a later request
//! approves it.
//!
//! Executors: `crates/tools/src/resolver/mcp.rs` — a Built-in server's tools through the MCP
//! helper, a Remote server's over the request's own session.

pub mod approval;

use respgw_protocol::ids::IdKind;
use respgw_protocol::items::{CallStatus, Item, McpCallItem, McpListToolsItem};
use respgw_protocol::tools::choice::{AllowedTool, McpToolChoice};
use respgw_protocol::tools::mcp::mcp_function_name;
use respgw_protocol::{ApiError, ResponseEvent};
use respgw_telemetry::ToolType;
use serde_json::{Map, Value, json};

use super::choice::ChoiceRule;
use super::{CallPlace, CallTarget, CompletedCall, GatewayKind};
use crate::gateway_tool::FunctionSpec;

/// MCP tools are counted as `mcp`, Built-in or Remote alike.
pub const TOOL_TYPE: ToolType = ToolType::new("mcp");

/// How the model sees the tool `tool_name` of the server `server_label`.
pub fn function_spec(
    server_label: &str,
    tool_name: &str,
    description: Option<&str>,
    input_schema: &Value,
) -> FunctionSpec {
    FunctionSpec {
        name: mcp_function_name(server_label, tool_name),
        description: Some(
            description
                .filter(|d| !d.trim().is_empty())
                .map_or_else(|| format!("MCP tool {server_label}:{tool_name}"), str::to_owned),
        ),
        parameters: upstream_schema(input_schema),
        strict: None,
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

/// Show a server's tools as an `mcp_list_tools` item at `output_index`: its events go to
/// `events`; the item is given back.
pub(crate) fn show_listing(listing: McpListToolsItem, output_index: usize, events: &mut Vec<ResponseEvent>) -> Item {
    let item_id = listing.id.clone();
    let announced = McpListToolsItem { tools: Vec::new(), error: None, ..listing.clone() };
    let finished = if listing.error.is_some() {
        ResponseEvent::McpListToolsFailed { item_id: item_id.clone(), output_index }
    } else {
        ResponseEvent::McpListToolsCompleted { item_id: item_id.clone(), output_index }
    };
    let item = Item::McpListTools(listing);
    events.extend([
        ResponseEvent::OutputItemAdded { output_index, item: Box::new(Item::McpListTools(announced)) },
        ResponseEvent::McpListToolsInProgress { item_id, output_index },
        finished,
        ResponseEvent::OutputItemDone { output_index, item: Box::new(item.clone()) },
    ]);
    item
}

/// What a `tool_choice` naming an MCP server asks: a call of the tool it names, or of any tool of
/// the server (only those offered).
pub(crate) fn forced(choice: &McpToolChoice) -> ChoiceRule<'_> {
    match &choice.name {
        Some(tool) => ChoiceRule::Function(mcp_function_name(&choice.server_label, tool)),
        None => ChoiceRule::OneOf(Box::new(|_, target| is_tool_of(target, &choice.server_label, None))),
    }
}

/// Check that a `tool_choice` naming a tool of an MCP server (at `param`) names one the server
/// has, among `targets` (known only once its inventory is in): a 422 otherwise.
pub(crate) fn check_choice<'a>(
    choice: &McpToolChoice,
    param: &str,
    mut targets: impl Iterator<Item = &'a CallTarget>,
) -> Result<(), ApiError> {
    if let Some(name) = &choice.name
        && !targets.any(|target| is_tool_of(target, &choice.server_label, Some(name)))
    {
        return Err(ApiError::bad_input(
            param,
            format!("`tool_choice.name` '{name}' is not a tool of MCP server '{}'.", choice.server_label),
        ));
    }
    Ok(())
}

/// Whether calls to `target` go to the server `label` (and to its tool `tool`, when given).
fn is_tool_of(target: &CallTarget, label: &str, tool: Option<&str>) -> bool {
    matches!(target, CallTarget::Gateway(GatewayKind::Mcp { server_label, tool_name })
        if server_label == label && tool.is_none_or(|t| t == tool_name))
}

pub(crate) fn allowed_by(entry: &AllowedTool, server_label: &str, tool_name: &str) -> bool {
    matches!(entry, AllowedTool::Mcp(m)
        if m.server_label == server_label && m.name.as_deref().is_none_or(|t| t == tool_name))
}

/// An `mcp_call` from its announcement until the tool has answered.
#[derive(Debug)]
pub struct CallItem {
    pub(super) item: McpCallItem,
    pub(super) output_index: usize,
}

impl CallItem {
    /// Announce a call; `approval_request_id` names the approval request it runs on, if any.
    pub(super) fn announce(
        server_label: String,
        tool_name: String,
        approval_request_id: Option<String>,
        place: CallPlace<'_>,
        events: &mut Vec<ResponseEvent>,
    ) -> Self {
        let item = McpCallItem {
            id: place.turn.new_id(IdKind::McpCall),
            server_label,
            name: tool_name,
            arguments: String::new(),
            status: CallStatus::InProgress,
            output: None,
            error: None,
            approval_request_id,
        };
        let output_index = place.output_index;
        events.push(ResponseEvent::OutputItemAdded { output_index, item: Box::new(Item::McpCall(item.clone())) });
        events.push(ResponseEvent::McpCallInProgress { item_id: item.id.clone(), output_index });
        CallItem { item, output_index }
    }

    pub(super) fn on_arguments(&self, fragment: &str, events: &mut Vec<ResponseEvent>) {
        events.push(ResponseEvent::McpCallArgumentsDelta {
            item_id: self.item.id.clone(),
            output_index: self.output_index,
            delta: fragment.to_owned(),
        });
    }

    /// A call without arguments is `{}`, said in a delta too so that deltas add up.
    pub(super) fn arguments_done(&mut self, arguments: &mut String, events: &mut Vec<ResponseEvent>) {
        let (item_id, output_index) = (self.item.id.clone(), self.output_index);
        if arguments.is_empty() {
            arguments.push_str("{}");
            events.push(ResponseEvent::McpCallArgumentsDelta {
                item_id: item_id.clone(),
                output_index,
                delta: arguments.clone(),
            });
        }
        events.push(ResponseEvent::McpCallArgumentsDone { item_id, output_index, arguments: arguments.clone() });
        self.item.arguments.clone_from(arguments);
    }

    /// The item with the tool's output, or why the call failed.
    pub(super) fn complete(self, outcome: Result<String, String>) -> CompletedCall {
        let (item_id, output_index) = (self.item.id.clone(), self.output_index);
        let ok = outcome.is_ok();
        let (done_event, status) = if ok {
            (ResponseEvent::McpCallCompleted { item_id, output_index }, CallStatus::Completed)
        } else {
            (ResponseEvent::McpCallFailed { item_id, output_index }, CallStatus::Failed)
        };
        let (output, error) = match outcome {
            Ok(text) => (Some(text), None),
            Err(e) => (None, Some(e)),
        };
        CompletedCall { item: Item::McpCall(McpCallItem { status, output, error, ..self.item }), ok, done_event }
    }
}

/// The function call the item stands for: the name the model knows the tool by, and the
/// arguments.
pub(crate) fn replayed_call(item: &McpCallItem) -> (String, String) {
    (mcp_function_name(&item.server_label, &item.name), item.arguments.clone())
}

/// What the model is told the tool returned.
pub(crate) fn result_text(item: &McpCallItem) -> String {
    match (&item.output, &item.error) {
        (_, Some(error)) => format!("MCP tool error: {error}"),
        (Some(output), None) => output.clone(),
        (None, None) => String::new(),
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
