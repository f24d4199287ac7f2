//! One module per kind of tool call. Each owns, for its kind: what the model is offered, the
//! call's item and its stream events (announced, arguments, running, done), the item built from
//! the outcome, what a client is shown of it, and how the item is replayed to the model in later
//! turns (the call, and its result as text).
//!
//! - [`client`]: tools the client runs — `function`, `namespace` members, `custom`,
//!   `local_shell`. Their items are done once the model's arguments are complete; the client
//!   runs them.
//! - [`code_interpreter`], [`web_search`], [`file_search`], [`mcp`]: gateway tools, which the gateway runs itself.
//!   Their items open while the arguments stream, stay open while the tool runs, and are done
//!   with its outcome. The executors live in `respgw-tools` behind
//!   [`GatewayTool`](crate::GatewayTool); each module names its adapter there.
//!
//! The turn state machine (`turn.rs`) and the run loop (`run.rs`) handle one generic call: a
//! [`CallTarget`] says who runs it, an [`OpenCall`] follows it while its arguments stream, a
//! [`PendingGatewayCall`] waits to run and [`PendingGatewayCall::complete`] turns the outcome
//! into its item. What the kinds keep across a response's calls is one opaque
//! [`GatewayToolState`], which executors are given too; how their items are told to the model is
//! `GatewayReplay` (used by `chat.rs`). Every difference between kinds is a `match` in this
//! file handing over to the kind's module, with no fallback arm, so a new kind is pointed at by
//! the compiler. Two more files speak for all kinds: `hooks.rs` (`RunHooks`, what the kinds do in
//! a run besides the model's calls: show items and run calls before the first turn, count after
//! each) and `choice.rs` (`tool_choice` in the kinds' terms, for `offer.rs`).

pub(crate) mod choice;
pub mod client;
pub mod code_interpreter;
pub mod file_search;
mod hooks;
pub mod mcp;
pub mod web_search;

use std::sync::Arc;

use respgw_protocol::ids::TurnStamp;
use respgw_protocol::items::{Item, MessageRole};
use respgw_protocol::tools::choice::AllowedTool;
use respgw_protocol::{ApiError, ResponseEvent, ValidatedRequest};
use respgw_telemetry::ToolType;
use serde_json::{Value, json};

use crate::gateway_tool::GatewayTool;
pub(crate) use choice::ChoiceRule;
pub use client::ClientCallShape;
pub use code_interpreter::CodeInterpreterOutcome;
pub use file_search::FileSearchOutcome;
pub(crate) use hooks::RunHooks;
pub use hooks::ShownFirst;
pub use web_search::{CitableSource, WebSearchOutcome};

/// Which gateway tool a call goes to, and so which item family its calls produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayKind {
    /// `code_interpreter_call` items; the argument is `{"code": "…"}`.
    CodeInterpreter,
    /// `web_search_call` items; the arguments name an action (search, open_page, find_in_page).
    WebSearch,
    /// `file_search_call` items; the argument is `{"queries": ["…"]}`.
    FileSearch,
    /// `mcp_call` items showing the real label and tool name.
    Mcp { server_label: String, tool_name: String },
}

/// What a gateway tool call produced.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayOutcome {
    CodeInterpreter(CodeInterpreterOutcome),
    WebSearch(WebSearchOutcome),
    FileSearch(FileSearchOutcome),
    /// The MCP tool's output text, or why the call failed.
    Mcp(Result<String, String>),
}

impl GatewayKind {
    /// Whether an `allowed_tools` entry admits this tool.
    pub(crate) fn allowed_by(&self, entry: &AllowedTool) -> bool {
        match self {
            GatewayKind::CodeInterpreter => code_interpreter::allowed_by(entry),
            GatewayKind::WebSearch => web_search::allowed_by(entry),
            GatewayKind::FileSearch => file_search::allowed_by(entry),
            GatewayKind::Mcp { server_label, tool_name } => mcp::allowed_by(entry, server_label, tool_name),
        }
    }
}

/// Who runs a call the model made, and so how it is reported.
#[derive(Debug, Clone, PartialEq)]
pub enum CallTarget {
    /// The client runs it; the shape says which item reports it.
    Client(ClientCallShape),
    /// The gateway runs it.
    Gateway(GatewayKind),
    /// An MCP tool the client must approve first (its declaration's `require_approval`): the call
    /// becomes an `mcp_approval_request`, run once a later request approves it.
    McpApproval { server_label: String, tool_name: String },
}

/// The function names the model may call in one response, and who runs each.
#[derive(Debug, Clone, Default)]
pub struct CallTargets(Vec<(String, CallTarget)>);

impl CallTargets {
    /// The response's gateway tools, and the client tools `request` declares.
    pub fn new(request: &ValidatedRequest, gateway_tools: &[Arc<dyn GatewayTool>]) -> Self {
        let gateway = gateway_tools.iter().map(|t| {
            let target = match t.kind() {
                GatewayKind::Mcp { server_label, tool_name }
                    if mcp::approval::needed(request, server_label, tool_name) =>
                {
                    CallTarget::McpApproval { server_label: server_label.clone(), tool_name: tool_name.clone() }
                }
                kind => CallTarget::Gateway(kind.clone()),
            };
            (t.spec().name.clone(), target)
        });
        let client = client::offered(request).into_iter().map(|(spec, shape)| (spec.name, CallTarget::Client(shape)));
        CallTargets(gateway.chain(client).collect())
    }

    /// Who runs calls to `name`. A name nothing declared is reported as a plain function call
    /// (the client decides what to make of it).
    pub fn of(&self, name: &str) -> CallTarget {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or(CallTarget::Client(ClientCallShape::Function), |(_, target)| target.clone())
    }
}

impl FromIterator<(String, CallTarget)> for CallTargets {
    fn from_iter<I: IntoIterator<Item = (String, CallTarget)>>(targets: I) -> Self {
        CallTargets(targets.into_iter().collect())
    }
}

/// What the gateway tool kinds keep across the calls of one response, each kind's own part. The
/// run and the turn carry it without looking inside.
#[derive(Debug, Clone)]
pub struct GatewayToolState {
    code_interpreter: code_interpreter::Container,
    web_search: web_search::Citations,
    file_search: file_search::Sources,
}

impl GatewayToolState {
    /// The state a response of tenant `owner` starts with, given its history.
    pub fn for_history(history: &[Item], owner: &str) -> Self {
        GatewayToolState {
            code_interpreter: code_interpreter::Container::of(history, owner),
            web_search: web_search::Citations::default(),
            file_search: file_search::Sources::of(history),
        }
    }

    /// Where the item of a call made in model turn `turn` goes.
    pub(crate) fn place(&self, turn: TurnStamp, output_index: usize) -> CallPlace<'_> {
        CallPlace { turn, output_index, container_id: self.code_interpreter.id() }
    }

    /// The code interpreter's part: the conversation's container.
    pub fn code_interpreter(&self) -> &code_interpreter::Container {
        &self.code_interpreter
    }

    /// Announce the annotations of answer text `text` (message `item_id`) that became complete
    /// since those in `annotations` (all of them when `complete`), and add them there.
    pub(crate) fn annotate(
        &self,
        item_id: &str,
        output_index: usize,
        text: &str,
        annotations: &mut Vec<Value>,
        complete: bool,
        events: &mut Vec<ResponseEvent>,
    ) {
        self.web_search.annotate(item_id, output_index, text, annotations, complete, events);
        self.file_search.annotate(item_id, output_index, text, annotations, complete, events);
    }

    /// The state of a response whose history used container `container_id`.
    #[cfg(test)]
    pub(crate) fn in_container(container_id: &str) -> Self {
        GatewayToolState {
            code_interpreter: code_interpreter::Container::with_id(container_id),
            web_search: web_search::Citations::default(),
            file_search: file_search::Sources::default(),
        }
    }
}

/// Where a call's item goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallPlace<'a> {
    /// The model turn that made the call, minted into gateway tool items' ids so that history
    /// keeps the calls of one turn together.
    pub turn: TurnStamp,
    pub output_index: usize,
    /// The conversation's code interpreter container.
    pub container_id: &'a str,
}

/// A call whose item is announced, while its arguments stream.
#[derive(Debug)]
pub(crate) enum OpenCall {
    Client(client::OpenCall),
    Gateway(GatewayCallItem),
    McpApproval(mcp::approval::RequestItem),
}

/// What a call became once its arguments were complete.
#[derive(Debug)]
pub(crate) enum FinishedCall {
    /// A client call's item, done.
    Client(Item),
    /// A gateway tool call, waiting to run.
    Gateway(PendingGatewayCall),
    /// A gateway tool call held until the client answers for it (an `mcp_approval_request`),
    /// its item done.
    Held(Item),
}

impl OpenCall {
    /// Announce the item of a call to `target` that the model named `name`. `call_id` is the
    /// upstream's id for the call, if it sent one yet (a client function's is minted here when
    /// missing, so it is stable from the first event on).
    pub fn announce(
        target: CallTarget,
        name: &str,
        call_id: &mut Option<String>,
        place: CallPlace<'_>,
        events: &mut Vec<ResponseEvent>,
    ) -> Self {
        match target {
            CallTarget::Client(shape) => {
                OpenCall::Client(client::OpenCall::announce(shape, name, call_id, place.output_index, events))
            }
            CallTarget::Gateway(GatewayKind::CodeInterpreter) => {
                OpenCall::Gateway(GatewayCallItem::CodeInterpreter(code_interpreter::CallItem::announce(place, events)))
            }
            CallTarget::Gateway(GatewayKind::WebSearch) => {
                OpenCall::Gateway(GatewayCallItem::WebSearch(web_search::CallItem::announce(place, events)))
            }
            CallTarget::Gateway(GatewayKind::FileSearch) => {
                OpenCall::Gateway(GatewayCallItem::FileSearch(file_search::CallItem::announce(place, events)))
            }
            CallTarget::Gateway(GatewayKind::Mcp { server_label, tool_name }) => OpenCall::Gateway(
                GatewayCallItem::Mcp(mcp::CallItem::announce(server_label, tool_name, None, place, events)),
            ),
            CallTarget::McpApproval { server_label, tool_name } => {
                OpenCall::McpApproval(mcp::approval::RequestItem::announce(server_label, tool_name, place, events))
            }
        }
    }

    /// A fragment of the arguments arrived.
    pub fn on_arguments(&mut self, fragment: &str, events: &mut Vec<ResponseEvent>) {
        match self {
            OpenCall::Client(call) => call.on_arguments(fragment, events),
            OpenCall::Gateway(GatewayCallItem::CodeInterpreter(call)) => call.on_arguments(fragment, events),
            OpenCall::Gateway(GatewayCallItem::WebSearch(call)) => call.on_arguments(fragment, events),
            OpenCall::Gateway(GatewayCallItem::FileSearch(call)) => call.on_arguments(fragment, events),
            OpenCall::Gateway(GatewayCallItem::Mcp(call)) => call.on_arguments(fragment, events),
            // The reference API streams no arguments of an approval request: they come with its
            // `output_item.done`.
            OpenCall::McpApproval(_) => {}
        }
    }

    /// The arguments are complete.
    pub fn finish(
        self,
        name: String,
        call_id: Option<String>,
        mut arguments: String,
        events: &mut Vec<ResponseEvent>,
    ) -> FinishedCall {
        let mut item = match self {
            OpenCall::Client(call) => return FinishedCall::Client(call.finish(name, call_id, arguments, events)),
            OpenCall::McpApproval(request) => return FinishedCall::Held(request.finish(arguments, events)),
            OpenCall::Gateway(item) => item,
        };
        match &mut item {
            GatewayCallItem::CodeInterpreter(call) => call.arguments_done(&arguments, events),
            GatewayCallItem::WebSearch(call) => call.arguments_done(&mut arguments),
            GatewayCallItem::FileSearch(call) => call.arguments_done(&mut arguments),
            GatewayCallItem::Mcp(call) => call.arguments_done(&mut arguments, events),
        }
        FinishedCall::Gateway(PendingGatewayCall { function: name, arguments, item })
    }
}

/// The open item of a gateway tool call, from its announcement until its outcome is in.
#[derive(Debug)]
pub enum GatewayCallItem {
    CodeInterpreter(code_interpreter::CallItem),
    WebSearch(web_search::CallItem),
    FileSearch(file_search::CallItem),
    Mcp(mcp::CallItem),
}

impl GatewayCallItem {
    pub fn item_id(&self) -> &str {
        match self {
            GatewayCallItem::CodeInterpreter(call) => &call.item.id,
            GatewayCallItem::WebSearch(call) => &call.item.id,
            GatewayCallItem::FileSearch(call) => &call.item.id,
            GatewayCallItem::Mcp(call) => &call.item.id,
        }
    }

    pub fn output_index(&self) -> usize {
        match self {
            GatewayCallItem::CodeInterpreter(call) => call.output_index,
            GatewayCallItem::WebSearch(call) => call.output_index,
            GatewayCallItem::FileSearch(call) => call.output_index,
            GatewayCallItem::Mcp(call) => call.output_index,
        }
    }
}

/// A gateway tool call whose arguments are complete, waiting to run; its item stays open until
/// it has.
#[derive(Debug)]
pub struct PendingGatewayCall {
    /// The function name the model used: which of the response's gateway tools runs the call.
    pub function: String,
    /// The arguments JSON the model produced.
    pub arguments: String,
    pub item: GatewayCallItem,
}

/// A gateway tool call that has run: its finished item and the event saying how it ended.
#[derive(Debug)]
pub(crate) struct CompletedCall {
    pub item: Item,
    /// False when the call failed (counted as a tool error).
    pub ok: bool,
    pub done_event: ResponseEvent,
}

impl PendingGatewayCall {
    /// The `tool_type` the call is counted under.
    pub fn tool_type(&self) -> ToolType {
        match &self.item {
            GatewayCallItem::CodeInterpreter(_) => code_interpreter::TOOL_TYPE,
            GatewayCallItem::WebSearch(_) => web_search::TOOL_TYPE,
            GatewayCallItem::FileSearch(_) => file_search::TOOL_TYPE,
            GatewayCallItem::Mcp(_) => mcp::TOOL_TYPE,
        }
    }

    /// The event saying the tool is running, for kinds that have one.
    pub(crate) fn running_event(&self) -> Option<ResponseEvent> {
        match &self.item {
            GatewayCallItem::CodeInterpreter(call) => Some(call.running_event()),
            GatewayCallItem::WebSearch(call) => Some(call.running_event()),
            GatewayCallItem::FileSearch(call) => Some(call.running_event()),
            GatewayCallItem::Mcp(_) => None,
        }
    }

    /// The call's item with the tool's outcome on it.
    pub(crate) fn complete(
        self,
        outcome: GatewayOutcome,
        state: &mut GatewayToolState,
    ) -> Result<CompletedCall, ApiError> {
        match (self.item, outcome) {
            (GatewayCallItem::CodeInterpreter(call), GatewayOutcome::CodeInterpreter(outcome)) => {
                Ok(call.complete(outcome))
            }
            (GatewayCallItem::WebSearch(call), GatewayOutcome::WebSearch(outcome)) => {
                Ok(call.complete(outcome, &mut state.web_search))
            }
            (GatewayCallItem::FileSearch(call), GatewayOutcome::FileSearch(outcome)) => {
                Ok(call.complete(outcome, &mut state.file_search))
            }
            (GatewayCallItem::Mcp(call), GatewayOutcome::Mcp(outcome)) => Ok(call.complete(outcome)),
            _ => Err(ApiError::internal("a gateway tool returned another tool's outcome")),
        }
    }
}

/// An item as the client sees it: what each kind keeps for the model only, or shows only when
/// `include` asks, is left out.
pub(crate) fn present(item: &Item, include: &[String]) -> Item {
    match item {
        Item::CodeInterpreterCall(c) => Item::CodeInterpreterCall(code_interpreter::present(c, include)),
        Item::WebSearchCall(w) => Item::WebSearchCall(web_search::present(w, include)),
        Item::FileSearchCall(f) => Item::FileSearchCall(file_search::present(f, include)),
        Item::Compaction(_) => item.clone().client_view(),
        Item::Message(_)
        | Item::FunctionCall(_)
        | Item::FunctionCallOutput(_)
        | Item::Reasoning(_)
        | Item::McpCall(_)
        | Item::McpListTools(_)
        | Item::McpApprovalRequest(_)
        | Item::McpApprovalResponse(_)
        | Item::CustomToolCall(_)
        | Item::CustomToolCallOutput(_)
        | Item::LocalShellCall(_)
        | Item::LocalShellCallOutput(_) => item.clone(),
    }
}

/// Whether `item` is something a model turn produced.
pub(crate) fn is_model_output(item: &Item) -> bool {
    match item {
        Item::Message(m) => m.role == MessageRole::Assistant,
        Item::Reasoning(_)
        | Item::FunctionCall(_)
        | Item::CustomToolCall(_)
        | Item::LocalShellCall(_)
        | Item::CodeInterpreterCall(_)
        | Item::WebSearchCall(_)
        | Item::FileSearchCall(_)
        | Item::McpCall(_)
        | Item::McpApprovalRequest(_) => true,
        Item::FunctionCallOutput(_)
        | Item::CustomToolCallOutput(_)
        | Item::LocalShellCallOutput(_)
        | Item::McpListTools(_)
        | Item::McpApprovalResponse(_)
        | Item::Compaction(_) => false,
    }
}

/// How the gateway tool items of a conversation are told to the model: each as the call the model
/// made and the whole text of its result. Built from the whole conversation, since a kind may tell
/// one item with another (MCP: an approved call is told as the result of its approval request,
/// `mcp/approval.rs`). Derived from the items alone, so a live tool loop, a stored conversation
/// and a client's replay send the model the same text.
pub(crate) struct GatewayReplay<'a> {
    mcp_approvals: mcp::approval::ApprovalHistory<'a>,
    file_search: file_search::Numbering<'a>,
}

impl<'a> GatewayReplay<'a> {
    pub(crate) fn of(history: &[&'a Item]) -> Self {
        GatewayReplay {
            mcp_approvals: mcp::approval::ApprovalHistory::of(history),
            file_search: file_search::Numbering::of(history),
        }
    }

    /// Whether `item` is told with another item, and so not on its own.
    pub(crate) fn is_told_with_another(&self, item: &Item) -> bool {
        matches!(item, Item::McpCall(c) if self.mcp_approvals.is_told_with_its_request(c))
    }

    /// The tool call a gateway tool item stands for in an assistant message, and the whole text
    /// of its result; `None` for other items.
    pub(crate) fn call_and_result(&self, item: &Item) -> Option<(Value, String)> {
        let ((name, arguments), result) = match item {
            Item::CodeInterpreterCall(c) => (code_interpreter::replayed_call(c), code_interpreter::result_text(c)),
            Item::WebSearchCall(w) => (web_search::replayed_call(w), web_search::result_text(w)),
            Item::FileSearchCall(f) => (file_search::replayed_call(f), self.file_search.result_text(f)),
            Item::McpCall(m) => (mcp::replayed_call(m), mcp::result_text(m)),
            Item::McpApprovalRequest(r) => (mcp::approval::replayed_call(r), self.mcp_approvals.result_text(r)),
            Item::Message(_)
            | Item::FunctionCall(_)
            | Item::FunctionCallOutput(_)
            | Item::Reasoning(_)
            | Item::McpListTools(_)
            | Item::McpApprovalResponse(_)
            | Item::CustomToolCall(_)
            | Item::CustomToolCallOutput(_)
            | Item::LocalShellCall(_)
            | Item::LocalShellCallOutput(_)
            | Item::Compaction(_) => return None,
        };
        let call = json!({"id": item.id(), "type": "function", "function": {"name": name, "arguments": arguments}});
        Some((call, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_type_label_values() {
        let values: Vec<_> = [
            client::TOOL_TYPE,
            code_interpreter::TOOL_TYPE,
            web_search::TOOL_TYPE,
            file_search::TOOL_TYPE,
            mcp::TOOL_TYPE,
        ]
        .map(ToolType::as_str)
        .into();
        assert_eq!(values, ["function", "code_interpreter", "web_search", "file_search", "mcp"]);
    }
}
