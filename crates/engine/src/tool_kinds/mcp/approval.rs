//! MCP approvals: calls of MCP tools that the client must approve before the gateway runs them
//! (`require_approval` of the declaration, [`McpTool::needs_approval`]).
//!
//! When the model calls such a tool, the call is not run: it becomes an `mcp_approval_request`
//! item ([`RequestItem`]: `output_item.added` when the model names the tool, `output_item.done`
//! with the arguments), and the response completes after that turn's other gateway calls ran,
//! like a turn with a client function call. The item holds everything the call needs (server
//! label, tool name, arguments), so a later request can run it.
//!
//! The client answers with `mcp_approval_response` items in a continuing request (after
//! `previous_response_id`, or with the conversation replayed as input). [`answers_to_act_on`]
//! checks each answer of the request's input against the conversation (its request must be there,
//! and not answered before) and picks the ones not acted on yet; an approved call then runs first
//! thing in the response, as an `mcp_call` whose `approval_request_id` names the request
//! ([`approved_call`]), and the loop goes on; a denial only changes what the model is told.
//!
//! [`Approvals`] is a response's part in this flow, which the run reaches through its hooks
//! (`tool_kinds/hooks.rs`): the answers it acts on (checked against the tools the request
//! resolved), the approved calls to run before its first model turn, and the approval requests
//! its turns make, counted.
//!
//! What the model sees ([`ApprovalHistory`]): the approval request as the tool call the model made,
//! followed by one tool result that says how it ended — still waiting for approval, denied (with
//! the reason), or approved with the call's result. The approved `mcp_call` and the answer items
//! are not sent again on their own. Derived from the items alone, so a live run, a stored
//! conversation and a client's replay give the model the same messages.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use respgw_protocol::ids::{IdKind, TurnStamp};
use respgw_protocol::items::{Item, McpApprovalRequestItem, McpCallItem};
use respgw_protocol::tools::ToolDeclaration;
use respgw_protocol::tools::mcp::{McpTool, mcp_function_name};
use respgw_protocol::{ApiError, ResponseEvent, ValidatedRequest};
use respgw_telemetry::Metrics;

use super::CallItem;
use crate::gateway_tool::{GatewayTool, ResolvedTools};
use crate::tool_kinds::{CallPlace, GatewayCallItem, PendingGatewayCall, is_model_output};
use crate::turn::OutputLog;

/// The `server_label` metric label of the approvals of Remote MCP servers (their labels are chosen
/// by clients, so they are counted together) and of servers the request does not declare.
pub const REMOTE_METRIC_LABEL: &str = "(remote)";

/// The declaration of the server `label` in `request`.
pub(crate) fn declaration<'a>(request: &'a ValidatedRequest, label: &str) -> Option<&'a McpTool> {
    request.tools.iter().find_map(|t| match t {
        ToolDeclaration::Mcp(m) if m.server_label == label => Some(m),
        _ => None,
    })
}

/// The value of the `server_label` label under which approvals for the server `label` are
/// counted: a Built-in server's label (configured by the operator, so a bounded set), else
/// [`REMOTE_METRIC_LABEL`].
pub fn metric_label<'a>(request: &'a ValidatedRequest, label: &str) -> &'a str {
    match declaration(request, label) {
        Some(m) if m.is_builtin() => &m.server_label,
        _ => REMOTE_METRIC_LABEL,
    }
}

/// Whether `request` has calls of the tool `tool` of the server `label` wait for approval.
pub(crate) fn needed(request: &ValidatedRequest, label: &str, tool: &str) -> bool {
    declaration(request, label).is_some_and(|m| m.needs_approval(tool))
}

/// An `mcp_approval_request` from the moment the model names the tool until its arguments are
/// complete.
#[derive(Debug)]
pub struct RequestItem {
    item: McpApprovalRequestItem,
    output_index: usize,
}

impl RequestItem {
    pub(crate) fn announce(
        server_label: String,
        tool_name: String,
        place: CallPlace<'_>,
        events: &mut Vec<ResponseEvent>,
    ) -> Self {
        let item = McpApprovalRequestItem {
            id: place.turn.new_id(IdKind::McpApprovalRequest),
            server_label,
            name: tool_name,
            arguments: String::new(),
        };
        let output_index = place.output_index;
        events.push(ResponseEvent::OutputItemAdded {
            output_index,
            item: Box::new(Item::McpApprovalRequest(item.clone())),
        });
        RequestItem { item, output_index }
    }

    /// The finished item (a call without arguments is `{}`).
    pub(crate) fn finish(mut self, arguments: String, events: &mut Vec<ResponseEvent>) -> Item {
        self.item.arguments = if arguments.is_empty() { "{}".to_owned() } else { arguments };
        let item = Item::McpApprovalRequest(self.item);
        events.push(ResponseEvent::OutputItemDone { output_index: self.output_index, item: Box::new(item.clone()) });
        item
    }
}

/// An `mcp_approval_response` of the request's input that has not been acted on yet.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Where it is in the request's `input`.
    pub input_index: usize,
    /// The approval request it answers.
    pub request: McpApprovalRequestItem,
    pub approve: bool,
}

impl Answer {
    /// The function under which the approved call's tool is offered.
    pub fn function(&self) -> String {
        mcp_function_name(&self.request.server_label, &self.request.name)
    }
}

/// The answers in the request's input (the items of `history` from `input_start` on) that the
/// gateway acts on now: each must answer an approval request earlier in the conversation that no
/// earlier item answered (else a 400 naming the item). Answers a replayed conversation carries
/// from before — followed by the approved call, or by anything the model did after — were acted
/// on already and are left out.
pub fn answers_to_act_on(history: &[Item], input_start: usize) -> Result<Vec<Answer>, ApiError> {
    let mut answers = Vec::new();
    for (position, item) in history.iter().enumerate().skip(input_start) {
        let Item::McpApprovalResponse(answer) = item else { continue };
        let input_index = position - input_start;
        let id = answer.approval_request_id.as_str();
        let earlier = &history[..position];
        let Some(request) = earlier.iter().find_map(|i| match i {
            Item::McpApprovalRequest(r) if r.id == id => Some(r),
            _ => None,
        }) else {
            let param = format!("input[{input_index}].approval_request_id");
            return Err(ApiError::invalid(
                param.clone(),
                format!(
                    "{param}: there is no mcp_approval_request '{id}' in this conversation to answer (it must be \
                     in the response continued with previous_response_id, or earlier in the input)."
                ),
            ));
        };
        if let Some(first) =
            earlier.iter().find(|i| matches!(i, Item::McpApprovalResponse(a) if a.approval_request_id == id))
        {
            let param = format!("input[{input_index}]");
            return Err(ApiError::invalid(
                param.clone(),
                format!("{param}: the mcp_approval_request '{id}' was already answered (by '{}').", first.id()),
            ));
        }
        // A call that ran on another request's approval says nothing about this one.
        let acted_on = history[position + 1..].iter().any(|later| match later {
            Item::McpCall(c) => c.approval_request_id.as_deref().is_none_or(|other| other == id),
            other => is_model_output(other),
        });
        if !acted_on {
            answers.push(Answer { input_index, request: request.clone(), approve: answer.approve });
        }
    }
    Ok(answers)
}

/// Why an approved call cannot run with this request's tools, as a 400 naming the answer: its
/// server is not declared (tools are not inherited), or its declaration does not offer the tool.
pub fn not_offered(answer: &Answer, request: &ValidatedRequest) -> ApiError {
    let param = format!("input[{}]", answer.input_index);
    let (label, tool) = (&answer.request.server_label, &answer.request.name);
    let message = match declaration(request, label) {
        None => format!(
            "{param} approves a call to MCP server '{label}', which this request does not declare: declare it again \
             in `tools` (tools are not inherited; a Remote MCP server needs its `server_url` and `authorization` \
             again, which are never stored)."
        ),
        Some(_) => format!(
            "{param} approves a call to the tool '{tool}' of MCP server '{label}', which this request's declaration \
             does not offer (see its `allowed_tools`)."
        ),
    };
    ApiError::invalid(param, message)
}

/// A tool resolution error, said about the answer that needed the tool when it comes from a
/// Remote MCP server that an approved call goes to and that was declared without credentials:
/// `authorization` is never stored, so the answering request must send it again.
pub fn resolution_error(error: ApiError, answers: &[Answer], request: &ValidatedRequest) -> ApiError {
    let Some(param) = error.param.as_deref() else { return error };
    let culprit = request.tools.iter().enumerate().find_map(|(i, t)| match t {
        ToolDeclaration::Mcp(m) if param.starts_with(&format!("tools[{i}].")) => Some(m),
        _ => None,
    });
    let Some(declaration) = culprit.filter(|m| !m.is_builtin() && !has_authorization(m)) else { return error };
    let Some(answer) = answers.iter().find(|a| a.approve && a.request.server_label == declaration.server_label) else {
        return error;
    };
    let param = format!("input[{}]", answer.input_index);
    let label = &declaration.server_label;
    ApiError::invalid(
        param.clone(),
        format!(
            "{param} approves a call to Remote MCP server '{label}', which could not be reached without \
             credentials ({}). Its `authorization` is never stored: send it again in the `tools` declaration of \
             the request that answers the approval.",
            error.message.trim_end_matches('.')
        ),
    )
}

fn has_authorization(m: &McpTool) -> bool {
    m.credentials.authorization.is_some()
        || m.credentials.headers.keys().any(|k| k.eq_ignore_ascii_case("authorization"))
}

/// The `mcp_call` that runs an approved request, announced at `output_index` (its arguments in one
/// delta), waiting to run. Its id is minted in the request's model turn when the request's id
/// names one.
pub fn approved_call(answer: &Answer, output_index: usize, events: &mut Vec<ResponseEvent>) -> PendingGatewayCall {
    let request = &answer.request;
    let turn = TurnStamp::of(&request.id).unwrap_or_else(|| TurnStamp::after(None));
    let place = CallPlace { turn, output_index, container_id: "" };
    let mut call =
        CallItem::announce(request.server_label.clone(), request.name.clone(), Some(request.id.clone()), place, events);
    let mut arguments = request.arguments.clone();
    call.on_arguments(&arguments, events);
    call.arguments_done(&mut arguments, events);
    PendingGatewayCall { function: answer.function(), arguments, item: GatewayCallItem::Mcp(call) }
}

/// A response's part in the approval flow: the client's answers in its input, acted on before
/// its first model turn.
#[derive(Debug)]
pub(crate) struct Approvals {
    /// The answers to act on, in input order.
    answers: Vec<Answer>,
    /// How many of them were acted on.
    acted_on: usize,
}

impl Approvals {
    /// The answers in the request's input (the items of `history` from `input_start` on) that the
    /// response acts on ([`answers_to_act_on`]).
    pub(crate) fn in_input(history: &[Item], input_start: usize) -> Result<Self, ApiError> {
        Ok(Approvals { answers: answers_to_act_on(history, input_start)?, acted_on: 0 })
    }

    /// The tools `request` resolved to, when every approved call can run with them: a resolution
    /// error is said about the answer that needed the tool ([`resolution_error`]), and an approved
    /// call whose tool is not offered is a 400 naming its answer ([`not_offered`]).
    pub(crate) fn check_tools(
        &self,
        resolved: Result<ResolvedTools, ApiError>,
        request: &ValidatedRequest,
    ) -> Result<ResolvedTools, ApiError> {
        let resolved = resolved.map_err(|e| resolution_error(e, &self.answers, request))?;
        if let Some(answer) = self.answers.iter().find(|a| a.approve && !offers(&resolved.tools, &a.function())) {
            return Err(not_offered(answer, request));
        }
        Ok(resolved)
    }

    /// Before the first model turn: the next approved call to run, announced at the next index of
    /// `log`. Every answer on the way is counted.
    pub(crate) fn next_approved_call(
        &mut self,
        request: &ValidatedRequest,
        metrics: &Metrics,
        log: &mut OutputLog,
        events: &mut Vec<ResponseEvent>,
    ) -> Option<PendingGatewayCall> {
        while let Some(answer) = self.answers.get(self.acted_on) {
            self.acted_on += 1;
            metrics.mcp_approval_answered(metric_label(request, &answer.request.server_label), answer.approve);
            if answer.approve {
                return Some(approved_call(answer, log.allocate_index(), events));
            }
        }
        None
    }

    /// After a model turn: count the approval requests among the calls it held for the client.
    pub(crate) fn count_requests(request: &ValidatedRequest, held_calls: &[Item], metrics: &Metrics) {
        for item in held_calls {
            if let Item::McpApprovalRequest(approval) = item {
                metrics.tool_requested(super::TOOL_TYPE);
                metrics.mcp_approval_requested(metric_label(request, &approval.server_label));
            }
        }
    }
}

fn offers(tools: &[Arc<dyn GatewayTool>], function: &str) -> bool {
    tools.iter().any(|t| t.spec().name == function)
}

/// How the approval requests of a conversation ended, for what the model is told.
pub(crate) struct ApprovalHistory<'a> {
    /// The ids of the approval requests in the conversation.
    requests: HashSet<&'a str>,
    outcomes: HashMap<&'a str, Outcome<'a>>,
}

#[derive(Debug, Clone, Copy)]
enum Outcome<'a> {
    /// Approved, and the call ran.
    Ran(&'a McpCallItem),
    /// Approved; the call is not in the conversation (a client's replay left it out).
    Approved,
    Denied(Option<&'a str>),
}

impl<'a> ApprovalHistory<'a> {
    pub(crate) fn of(items: &[&'a Item]) -> Self {
        let mut history = ApprovalHistory { requests: HashSet::new(), outcomes: HashMap::new() };
        for item in items {
            match item {
                Item::McpApprovalRequest(r) => {
                    history.requests.insert(&r.id);
                }
                Item::McpApprovalResponse(a) => {
                    let outcome = if a.approve { Outcome::Approved } else { Outcome::Denied(a.reason.as_deref()) };
                    history.outcomes.entry(&a.approval_request_id).or_insert(outcome);
                }
                Item::McpCall(c) => {
                    if let Some(id) = &c.approval_request_id {
                        history.outcomes.insert(id, Outcome::Ran(c));
                    }
                }
                _ => {}
            }
        }
        history
    }

    /// Whether `call` is told to the model as the result of its approval request (and so not on
    /// its own).
    pub(crate) fn is_told_with_its_request(&self, call: &McpCallItem) -> bool {
        call.approval_request_id.as_deref().is_some_and(|id| self.requests.contains(id))
    }

    /// The tool result the model gets for the approval request `request`.
    pub(crate) fn result_text(&self, request: &McpApprovalRequestItem) -> String {
        match self.outcomes.get(request.id.as_str()) {
            None => "This call has not run: it is waiting for the user's approval.".to_owned(),
            Some(Outcome::Denied(None)) => "The user denied this call; it did not run.".to_owned(),
            Some(Outcome::Denied(Some(reason))) => {
                format!("The user denied this call; it did not run. Reason: {reason}")
            }
            Some(Outcome::Approved) => "The user approved this call; its result is not available.".to_owned(),
            Some(Outcome::Ran(call)) => format!("The user approved this call.\n\n{}", super::result_text(call)),
        }
    }
}

/// The tool call an approval request stands for in an assistant message: the call the model made.
pub(crate) fn replayed_call(request: &McpApprovalRequestItem) -> (String, String) {
    (mcp_function_name(&request.server_label, &request.name), request.arguments.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use respgw_protocol::items::{ContentPart, ItemStatus, McpApprovalResponseItem, MessageItem, MessageRole};
    use respgw_protocol::{Capabilities, CreateResponseRequest};
    use serde_json::{Value, json};

    fn request(id: &str) -> Item {
        Item::McpApprovalRequest(McpApprovalRequestItem {
            id: id.into(),
            server_label: "docs".into(),
            name: "delete".into(),
            arguments: "{\"path\":\"a\"}".into(),
        })
    }

    fn answer(request_id: &str, approve: bool) -> Item {
        Item::McpApprovalResponse(McpApprovalResponseItem {
            id: format!("mcpa_{request_id}"),
            approval_request_id: request_id.into(),
            approve,
            reason: None,
        })
    }

    fn said(text: &str) -> Item {
        Item::Message(MessageItem {
            id: "msg_1".into(),
            role: MessageRole::Assistant,
            status: ItemStatus::Completed,
            content: vec![ContentPart::output_text(text)],
        })
    }

    fn validated(body: Value) -> ValidatedRequest {
        let caps = Capabilities { builtin_mcp: true, remote_mcp: true, ..Capabilities::default() };
        CreateResponseRequest::from_slice(body.to_string().as_bytes()).unwrap().validate(&caps).unwrap()
    }

    #[test]
    fn answers_must_name_an_unanswered_request_of_the_conversation() {
        let history = [request("mcpr_1"), answer("mcpr_2", true)];
        let e = answers_to_act_on(&history, 1).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("input[0].approval_request_id")), "{e:?}");
        assert!(e.message.contains("'mcpr_2'"), "{e:?}");

        let history = [request("mcpr_1"), answer("mcpr_1", true), answer("mcpr_1", false)];
        let e = answers_to_act_on(&history, 1).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[1]"), "{e:?}");
        assert!(e.message.contains("already answered"), "{e:?}");
        // Answered in the stored part of the conversation, answered again in the input.
        assert_eq!(answers_to_act_on(&history, 2).unwrap_err().param.as_deref(), Some("input[0]"));
        // An answer cannot come before its request.
        assert!(answers_to_act_on(&[answer("mcpr_1", true), request("mcpr_1")], 0).is_err());
    }

    #[test]
    fn only_answers_not_acted_on_yet_are_acted_on() {
        let fresh = [request("mcpr_1"), request("mcpr_2"), answer("mcpr_1", true), answer("mcpr_2", false)];
        let answers = answers_to_act_on(&fresh, 2).unwrap();
        let summary: Vec<_> = answers.iter().map(|a| (a.input_index, a.request.id.as_str(), a.approve)).collect();
        assert_eq!(summary, [(0, "mcpr_1", true), (1, "mcpr_2", false)]);
        assert_eq!(answers[0].function(), "mcp__docs__delete");

        // A client's replay of a whole conversation: the approved call ran and the model answered.
        let mut ran =
            CallItem::announce("docs".into(), "delete".into(), Some("mcpr_1".into()), place(), &mut Vec::new());
        ran.item.status = respgw_protocol::items::CallStatus::Completed;
        let replay = [
            request("mcpr_1"),
            request("mcpr_2"),
            answer("mcpr_1", true),
            answer("mcpr_2", false),
            Item::McpCall(ran.item.clone()),
            said("Deleted a, kept b."),
        ];
        assert!(answers_to_act_on(&replay, 0).unwrap().is_empty());
    }

    fn place() -> CallPlace<'static> {
        CallPlace { turn: TurnStamp::after(None), output_index: 0, container_id: "" }
    }

    #[test]
    fn an_approved_call_runs_as_an_mcp_call_of_the_requests_turn() {
        let turn = TurnStamp::after(None);
        let id = turn.new_id(IdKind::McpApprovalRequest);
        let history = [request(&id), answer(&id, true)];
        let answers = answers_to_act_on(&history, 1).unwrap();
        let mut events = Vec::new();
        let call = approved_call(&answers[0], 3, &mut events);
        let kinds: Vec<_> = events.iter().map(ResponseEvent::kind).collect();
        assert_eq!(
            kinds,
            [
                "response.output_item.added",
                "response.mcp_call.in_progress",
                "response.mcp_call_arguments.delta",
                "response.mcp_call_arguments.done"
            ]
        );
        let ResponseEvent::OutputItemAdded { output_index: 3, item } = &events[0] else { panic!("{events:?}") };
        let Item::McpCall(added) = item.as_ref() else { panic!("{events:?}") };
        assert_eq!(added.approval_request_id.as_deref(), Some(id.as_str()));
        assert_eq!(TurnStamp::of(&added.id), Some(turn));
        assert_eq!((call.function.as_str(), call.arguments.as_str()), ("mcp__docs__delete", "{\"path\":\"a\"}"));
    }

    #[test]
    fn a_remote_server_that_cannot_be_reached_without_credentials_is_said_about_the_answer() {
        let history = [request("mcpr_1"), answer("mcpr_1", true)];
        let answers = answers_to_act_on(&history, 1).unwrap();
        let refused = || ApiError::bad_input("tools[1].server_url", "MCP tool inventory resolution failed (401).");
        let remote = json!({"type":"mcp","server_label":"docs","server_url":"https://mcp.example.com/mcp"});
        let other = json!({"type":"mcp","server_label":"other","require_approval":"never"});
        let request = validated(json!({"model":"m","input":"x","tools":[other, remote]}));
        let e = resolution_error(refused(), &answers, &request);
        assert_eq!((e.status, e.param.as_deref()), (400, Some("input[0]")), "{e:?}");
        assert!(e.message.contains("`authorization` is never stored") && e.message.contains("(401)"), "{e:?}");

        let mut with_token = json!({"type":"mcp","server_label":"docs","server_url":"https://mcp.example.com/mcp"});
        with_token["authorization"] = json!("t");
        let request = validated(json!({"model":"m","input":"x","tools":[other, with_token]}));
        assert_eq!(resolution_error(refused(), &answers, &request), refused(), "a wrong token is the server's say");

        let request = validated(json!({"model":"m","input":"x","tools":[other]}));
        let e = not_offered(&answers[0], &request);
        assert_eq!(e.param.as_deref(), Some("input[0]"));
        assert!(e.message.contains("does not declare"), "{e:?}");
        assert_eq!(metric_label(&request, "other"), "other");
        assert_eq!(metric_label(&request, "docs"), REMOTE_METRIC_LABEL);
        assert!(!needed(&request, "other", "delete") && !needed(&request, "docs", "delete"));
    }
}
