//! Tools the client runs: `function`, the functions of a `namespace`, `custom` and `local_shell`.
//!
//! The model sees each as one function ([`offered`]): a namespace member as
//! `<namespace>__<name>`, a `custom` tool as a function taking its free text as `input`,
//! `local_shell` as a function taking a command. A call is reported in its declaration's shape
//! ([`ClientCallShape`]): a `function_call` (with its `namespace`) is announced as soon as the model
//! names it and streams `function_call_arguments.delta`; a `custom_tool_call` or
//! `local_shell_call` is announced and done together once the arguments are complete, its fields
//! decoded from them. Either way the item is done when the model's turn ends, and the tool loop
//! stops: the client runs the call and sends its output with the next request. In history, the
//! calls become `tool_calls` of the assistant message and their outputs `tool` messages.

use respgw_protocol::ResponseEvent;
use respgw_protocol::ValidatedRequest;
use respgw_protocol::ids::{IdKind, new_id};
use respgw_protocol::items::{
    CustomToolCallItem, FunctionCallItem, FunctionOutput, Item, ItemStatus, LocalShellAction, LocalShellCallItem,
};
use respgw_protocol::tools::ToolDeclaration;
use respgw_protocol::tools::choice::AllowedTool;
use respgw_protocol::tools::custom::CustomTool;
use respgw_protocol::tools::function::FunctionTool;
use respgw_protocol::tools::local_shell::LOCAL_SHELL_FUNCTION;
use respgw_protocol::tools::namespace::namespaced_function_name;
use respgw_telemetry::ToolType;
use serde_json::{Map, Value, json};

use crate::chat::content_value;
use crate::gateway_tool::FunctionSpec;

/// Client calls are counted as `function`, whatever their shape.
pub const TOOL_TYPE: ToolType = ToolType::new("function");

/// How a client call is reported.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientCallShape {
    /// A plain `function_call`.
    Function,
    /// A `function_call` with the function's own `name` and its `namespace`.
    Namespaced { namespace: String, name: String },
    /// A `custom_tool_call` whose `input` is the call's `input` argument.
    Custom,
    /// A `local_shell_call` whose `action` holds the command.
    LocalShell,
}

/// The client functions `request` declares, as the model sees them, with the shape their calls
/// are reported in, in declaration order.
pub fn offered(request: &ValidatedRequest) -> Vec<(FunctionSpec, ClientCallShape)> {
    let mut offered = Vec::new();
    for tool in &request.tools {
        match tool {
            ToolDeclaration::Function(f) => offered.push((function_spec(f), ClientCallShape::Function)),
            ToolDeclaration::Namespace(ns) => offered.extend(ns.tools.iter().map(|f| {
                let mut spec = function_spec(f);
                spec.name = namespaced_function_name(&ns.name, &f.name);
                (spec, ClientCallShape::Namespaced { namespace: ns.name.clone(), name: f.name.clone() })
            })),
            ToolDeclaration::Custom(c) => offered.push((custom_spec(c), ClientCallShape::Custom)),
            ToolDeclaration::LocalShell(_) => offered.push((local_shell_spec(), ClientCallShape::LocalShell)),
            _ => {}
        }
    }
    offered
}

/// A client function tool as the model sees it.
pub fn function_spec(tool: &FunctionTool) -> FunctionSpec {
    FunctionSpec {
        name: tool.name.clone(),
        description: tool.description.clone(),
        parameters: tool
            .parameters
            .clone()
            .map(Value::Object)
            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        strict: tool.strict,
    }
}

/// A `custom` tool as the model sees it: a function taking the free text as `input`.
fn custom_spec(tool: &CustomTool) -> FunctionSpec {
    let mut description = tool.description.clone().unwrap_or_default();
    if let Some(definition) = tool.format.as_ref().and_then(|f| f.get("definition")).and_then(|d| d.as_str()) {
        let syntax = tool.format.as_ref().and_then(|f| f.get("syntax")).and_then(|s| s.as_str()).unwrap_or("grammar");
        description.push_str(&format!("\n\nThe input must follow this {syntax}:\n{definition}"));
    }
    FunctionSpec {
        name: tool.name.clone(),
        description: (!description.is_empty()).then_some(description),
        parameters: json!({"type": "object", "properties": {"input": {"type": "string",
            "description": "The tool's input, as free text."}}, "required": ["input"], "additionalProperties": false}),
        strict: None,
    }
}

/// `local_shell` as the model sees it.
fn local_shell_spec() -> FunctionSpec {
    FunctionSpec {
        name: LOCAL_SHELL_FUNCTION.to_owned(),
        description: Some("Run a command on the user's machine and get its output.".to_owned()),
        parameters: json!({"type": "object", "properties": {
            "command": {"type": "array", "items": {"type": "string"}, "description": "The program and its arguments."},
            "workdir": {"type": "string", "description": "Working directory."},
            "timeout_ms": {"type": "integer", "description": "Time limit in milliseconds."}},
            "required": ["command"], "additionalProperties": false}),
        strict: None,
    }
}

/// Whether an `allowed_tools` entry admits the client function the model knows as `spec`.
pub(crate) fn allowed_by(entry: &AllowedTool, spec: &FunctionSpec) -> bool {
    matches!(entry, AllowedTool::Function(f) if f.name == spec.name)
}

/// A client call whose arguments are streaming.
#[derive(Debug)]
pub(crate) struct OpenCall {
    item_id: String,
    output_index: usize,
    shape: ClientCallShape,
}

impl OpenCall {
    /// Announce a `function_call` now; a `custom_tool_call` or `local_shell_call` is announced
    /// with its decoded fields when the arguments are complete.
    pub fn announce(
        shape: ClientCallShape,
        name: &str,
        call_id: &mut Option<String>,
        output_index: usize,
        events: &mut Vec<ResponseEvent>,
    ) -> Self {
        let item_id = match &shape {
            ClientCallShape::Custom => new_id(IdKind::CustomToolCall),
            ClientCallShape::LocalShell => new_id(IdKind::LocalShellCall),
            ClientCallShape::Function | ClientCallShape::Namespaced { .. } => {
                let item_id = new_id(IdKind::FunctionCall);
                // The call id must be stable from the first event on: mint one now if the server sent none.
                let call_id = call_id.get_or_insert_with(|| format!("call_{}", uuid_tail(&item_id))).clone();
                let (name, namespace) = declared_name(&shape, name);
                events.push(ResponseEvent::OutputItemAdded {
                    output_index,
                    item: Box::new(Item::FunctionCall(FunctionCallItem {
                        id: item_id.clone(),
                        call_id,
                        name,
                        namespace,
                        arguments: String::new(),
                        status: ItemStatus::InProgress,
                    })),
                });
                item_id
            }
        };
        OpenCall { item_id, output_index, shape }
    }

    /// A `function_call` streams its arguments; the other shapes show them on the finished item.
    pub fn on_arguments(&self, fragment: &str, events: &mut Vec<ResponseEvent>) {
        if self.is_function() {
            events.push(ResponseEvent::FunctionCallArgumentsDelta {
                item_id: self.item_id.clone(),
                output_index: self.output_index,
                delta: fragment.to_owned(),
            });
        }
    }

    /// The finished item, its closing events sent.
    pub fn finish(
        self,
        name: String,
        call_id: Option<String>,
        mut arguments: String,
        events: &mut Vec<ResponseEvent>,
    ) -> Item {
        let OpenCall { item_id, output_index, shape } = self;
        if !matches!(shape, ClientCallShape::Function | ClientCallShape::Namespaced { .. }) {
            let call_id = call_id.unwrap_or_else(|| format!("call_{}", uuid_tail(&item_id)));
            let item = decoded_item(&shape, item_id, call_id, name, &arguments);
            let announced = match &item {
                Item::CustomToolCall(c) => Item::CustomToolCall(CustomToolCallItem {
                    input: String::new(),
                    status: ItemStatus::InProgress,
                    ..c.clone()
                }),
                Item::LocalShellCall(c) => {
                    Item::LocalShellCall(LocalShellCallItem { status: ItemStatus::InProgress, ..c.clone() })
                }
                other => other.clone(),
            };
            events.push(ResponseEvent::OutputItemAdded { output_index, item: Box::new(announced) });
            events.push(ResponseEvent::OutputItemDone { output_index, item: Box::new(item.clone()) });
            return item;
        }
        if arguments.is_empty() {
            // A call without arguments is `{}`; say so in a delta too, so deltas add up.
            arguments.push_str("{}");
            events.push(ResponseEvent::FunctionCallArgumentsDelta {
                item_id: item_id.clone(),
                output_index,
                delta: arguments.clone(),
            });
        }
        let (name, namespace) = declared_name(&shape, &name);
        events.push(ResponseEvent::FunctionCallArgumentsDone {
            item_id: item_id.clone(),
            output_index,
            name: name.clone(),
            arguments: arguments.clone(),
        });
        let item = Item::FunctionCall(FunctionCallItem {
            id: item_id,
            call_id: call_id.unwrap_or_else(|| format!("call_{}", new_id(IdKind::FunctionCall))),
            name,
            namespace,
            arguments,
            status: ItemStatus::Completed,
        });
        events.push(ResponseEvent::OutputItemDone { output_index, item: Box::new(item.clone()) });
        item
    }

    fn is_function(&self) -> bool {
        matches!(self.shape, ClientCallShape::Function | ClientCallShape::Namespaced { .. })
    }
}

/// A function's name as the client declared it, and its namespace if it has one.
fn declared_name(shape: &ClientCallShape, flat_name: &str) -> (String, Option<String>) {
    match shape {
        ClientCallShape::Namespaced { namespace, name } => (name.clone(), Some(namespace.clone())),
        _ => (flat_name.to_owned(), None),
    }
}

/// The finished item of a `custom` or `local_shell` call, decoded from the JSON arguments the
/// model wrote. Arguments that do not decode are passed on as they are (the client decides).
fn decoded_item(shape: &ClientCallShape, id: String, call_id: String, name: String, arguments: &str) -> Item {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    match shape {
        ClientCallShape::LocalShell => {
            let command = match &args["command"] {
                Value::Array(parts) => {
                    parts.iter().map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_owned)).collect()
                }
                Value::String(line) => vec![line.clone()],
                _ => vec![arguments.to_owned()],
            };
            Item::LocalShellCall(LocalShellCallItem {
                id,
                call_id: Some(call_id),
                status: ItemStatus::Completed,
                action: Box::new(LocalShellAction {
                    kind: "exec".to_owned(),
                    command,
                    env: Map::new(),
                    timeout_ms: args["timeout_ms"].as_u64(),
                    working_directory: args["workdir"].as_str().map(str::to_owned),
                    user: None,
                }),
            })
        }
        _ => Item::CustomToolCall(CustomToolCallItem {
            id,
            call_id,
            name,
            input: args["input"].as_str().map_or_else(|| arguments.to_owned(), str::to_owned),
            status: ItemStatus::Completed,
        }),
    }
}

fn uuid_tail(id: &str) -> &str {
    id.split_once('_').map_or(id, |(_, tail)| tail)
}

/// The tool call a client call item stands for in an assistant message, under the name the
/// model knows; `None` for other items.
pub(crate) fn replayed_call(item: &Item) -> Option<Value> {
    let (id, name, arguments) = match item {
        Item::FunctionCall(f) => (
            f.call_id.as_str(),
            match &f.namespace {
                Some(ns) => namespaced_function_name(ns, &f.name),
                None => f.name.clone(),
            },
            f.arguments.clone(),
        ),
        Item::CustomToolCall(c) => (c.call_id.as_str(), c.name.clone(), json!({"input": c.input}).to_string()),
        Item::LocalShellCall(c) => {
            let mut arguments = Map::new();
            arguments.insert("command".into(), json!(c.action.command));
            if let Some(dir) = &c.action.working_directory {
                arguments.insert("workdir".into(), json!(dir));
            }
            if let Some(ms) = c.action.timeout_ms {
                arguments.insert("timeout_ms".into(), json!(ms));
            }
            (
                c.call_id.as_deref().unwrap_or(&c.id),
                LOCAL_SHELL_FUNCTION.to_owned(),
                Value::Object(arguments).to_string(),
            )
        }
        _ => return None,
    };
    Some(json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}}))
}

/// The `tool` message a client's output item stands for; `None` for other items.
pub(crate) fn replayed_output(item: &Item) -> Option<Value> {
    let (call_id, content) = match item {
        Item::FunctionCallOutput(o) => (o.call_id.as_str(), output_content(&o.output)),
        Item::CustomToolCallOutput(o) => (o.call_id.as_str(), output_content(&o.output)),
        Item::LocalShellCallOutput(o) => (o.call_id.as_deref().unwrap_or(&o.id), json!(o.output)),
        _ => return None,
    };
    Some(json!({"role": "tool", "tool_call_id": call_id, "content": content}))
}

/// The `call_id` a client call item carries; `None` for other items.
pub(crate) fn call_id(item: &Item) -> Option<&str> {
    match item {
        Item::FunctionCall(c) => Some(&c.call_id),
        Item::CustomToolCall(c) => Some(&c.call_id),
        Item::LocalShellCall(c) => Some(c.call_id.as_deref().unwrap_or(&c.id)),
        _ => None,
    }
}

/// The `call_id` a client's output item answers; `None` for other items.
pub(crate) fn answered_call_id(item: &Item) -> Option<&str> {
    match item {
        Item::FunctionCallOutput(o) => Some(&o.call_id),
        Item::CustomToolCallOutput(o) => Some(&o.call_id),
        Item::LocalShellCallOutput(o) => Some(o.call_id.as_deref().unwrap_or(&o.id)),
        _ => None,
    }
}

fn output_content(output: &FunctionOutput) -> Value {
    match output {
        FunctionOutput::Text(t) => json!(t),
        FunctionOutput::Parts(parts) => content_value(parts),
    }
}
