//! What the tool kinds do in a response's run besides the calls its model turns make.
//!
//! The run calls one object, [`RunHooks`], at four points and never looks inside it: when the
//! request's input is read (before its tools are resolved), when the tools are resolved, before
//! the first model turn (until it has nothing left to show or run), and after each model turn.
//! Each kind that takes part keeps its own part of it. Today MCP is the only one: its servers'
//! tool listings are shown first ([`ShownFirst`]), the client's answers to approval requests are
//! checked against the conversation and the resolved tools, the approved calls run before the
//! first model turn, and the approval requests a turn makes are counted (`mcp/approval.rs`).

use std::sync::Arc;

use respgw_protocol::items::{Item, McpListToolsItem};
use respgw_protocol::{ApiError, ResponseEvent, ValidatedRequest};
use respgw_telemetry::Metrics;

use super::PendingGatewayCall;
use super::mcp;
use super::mcp::approval::Approvals;
use crate::gateway_tool::{GatewayTool, ResolvedTools};
use crate::turn::OutputLog;

/// An item a kind shows before the first model turn, found while resolving the request's tools.
#[derive(Debug, Clone)]
pub enum ShownFirst {
    /// An MCP server's tools, shown the first time a conversation declares the server.
    McpListTools(McpListToolsItem),
}

impl ShownFirst {
    /// Show the item at `output_index`: its events go to `events`; the item is given back.
    fn show(self, output_index: usize, events: &mut Vec<ResponseEvent>) -> Item {
        match self {
            ShownFirst::McpListTools(listing) => mcp::show_listing(listing, output_index, events),
        }
    }
}

/// The tool kinds' part in one response's run, each kind its own (see the module docs).
#[derive(Debug)]
pub(crate) struct RunHooks {
    /// What the kinds show before the first model turn, in order; taken when shown.
    shown_first: Vec<ShownFirst>,
    /// MCP: the client's answers to approval requests that this response acts on.
    mcp_approvals: Approvals,
}

impl RunHooks {
    /// When the request's input (the items of `history` from `input_start` on) is read, before
    /// its tools are resolved: a 400 naming an input item no kind can act on (an answer to an
    /// approval request the conversation does not hold, or holds answered already).
    pub(crate) fn for_input(history: &[Item], input_start: usize) -> Result<Self, ApiError> {
        Ok(RunHooks { shown_first: Vec::new(), mcp_approvals: Approvals::in_input(history, input_start)? })
    }

    /// When the request's tools are resolved: the kinds check them against the input (an
    /// approved call must run with them; a resolution error is said about the answer that
    /// needed the tool) and keep what they show first. Gives back the tools.
    pub(crate) fn tools_resolved(
        &mut self,
        resolved: Result<ResolvedTools, ApiError>,
        request: &ValidatedRequest,
    ) -> Result<Vec<Arc<dyn GatewayTool>>, ApiError> {
        let resolved = self.mcp_approvals.check_tools(resolved, request)?;
        self.shown_first = resolved.shown_first;
        Ok(resolved.tools)
    }

    /// Before the first model turn, called until it gives `None`: first the items the kinds
    /// show (their events in `events`, the items in `log`), then one call at a time that a kind
    /// runs before the model is asked (announced in `events`): the calls the client approved.
    pub(crate) fn before_first_turn(
        &mut self,
        request: &ValidatedRequest,
        metrics: &Metrics,
        log: &mut OutputLog,
        events: &mut Vec<ResponseEvent>,
    ) -> Option<PendingGatewayCall> {
        for shown in std::mem::take(&mut self.shown_first) {
            let item = shown.show(log.allocate_index(), events);
            log.items.push(item);
        }
        self.mcp_approvals.next_approved_call(request, metrics, log, events)
    }

    /// After a model turn: the kinds count the calls it held for the client (MCP approval
    /// requests).
    pub(crate) fn after_turn(&self, request: &ValidatedRequest, held_calls: &[Item], metrics: &Metrics) {
        Approvals::count_requests(request, held_calls, metrics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use respgw_protocol::items::{McpApprovalRequestItem, McpApprovalResponseItem};
    use respgw_protocol::{Capabilities, CreateResponseRequest};
    use serde_json::json;

    use crate::gateway_tool::test_tools::UncalledTool;
    use crate::tool_kinds::GatewayKind;

    fn resolved(tools: Vec<Arc<dyn GatewayTool>>) -> ResolvedTools {
        let listing =
            McpListToolsItem { id: "mcpl_1".into(), server_label: "docs".into(), tools: Vec::new(), error: None };
        ResolvedTools { tools, shown_first: vec![ShownFirst::McpListTools(listing)] }
    }

    fn delete_tool() -> Arc<dyn GatewayTool> {
        let spec = crate::tool_kinds::mcp::function_spec("docs", "delete", None, &json!({}));
        Arc::new(UncalledTool(spec, GatewayKind::Mcp { server_label: "docs".into(), tool_name: "delete".into() }))
    }

    /// A conversation with an approval request, and an input approving it.
    fn history() -> Vec<Item> {
        vec![
            Item::McpApprovalRequest(McpApprovalRequestItem {
                id: "mcpr_1".into(),
                server_label: "docs".into(),
                name: "delete".into(),
                arguments: "{}".into(),
            }),
            Item::McpApprovalResponse(McpApprovalResponseItem {
                id: "mcpa_1".into(),
                approval_request_id: "mcpr_1".into(),
                approve: true,
                reason: None,
            }),
        ]
    }

    fn request() -> ValidatedRequest {
        let body = json!({"model":"m","input":"x","tools":[{"type":"mcp","server_label":"docs"}]});
        let caps = Capabilities { builtin_mcp: true, ..Capabilities::default() };
        CreateResponseRequest::from_slice(body.to_string().as_bytes()).unwrap().validate(&caps).unwrap()
    }

    #[test]
    fn what_the_kinds_show_comes_before_the_calls_they_run_and_each_happens_once() {
        let (request, metrics) = (request(), Metrics::new());
        let mut hooks = RunHooks::for_input(&history(), 1).unwrap();
        let tools = hooks.tools_resolved(Ok(resolved(vec![delete_tool()])), &request).unwrap();
        assert_eq!(tools.len(), 1);

        let (mut log, mut events) = (OutputLog::default(), Vec::new());
        let call = hooks.before_first_turn(&request, &metrics, &mut log, &mut events).expect("the approved call");
        assert_eq!(call.function, "mcp__docs__delete");
        assert_eq!(call.item.output_index(), 1, "after the listing");
        let kinds: Vec<_> = events.iter().map(ResponseEvent::kind).collect();
        assert_eq!(
            kinds[..5],
            [
                "response.output_item.added",
                "response.mcp_list_tools.in_progress",
                "response.mcp_list_tools.completed",
                "response.output_item.done",
                "response.output_item.added"
            ]
        );
        assert!(matches!(log.items.as_slice(), [Item::McpListTools(l)] if l.id == "mcpl_1"), "{:?}", log.items);

        events.clear();
        assert!(hooks.before_first_turn(&request, &metrics, &mut log, &mut events).is_none());
        assert!(events.is_empty() && log.items.len() == 1, "{events:?}");
    }

    #[test]
    fn an_approved_call_needs_its_tool_among_the_resolved_ones() {
        let request = request();
        let mut hooks = RunHooks::for_input(&history(), 1).unwrap();
        let Err(e) = hooks.tools_resolved(Ok(resolved(Vec::new())), &request) else { panic!("the call would not run") };
        assert_eq!((e.status, e.param.as_deref()), (400, Some("input[0]")), "{e:?}");
    }

    #[test]
    fn an_answer_to_no_request_of_the_conversation_is_refused_before_tools_resolve() {
        let e = RunHooks::for_input(&history()[1..], 0).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("input[0].approval_request_id")), "{e:?}");
    }
}
