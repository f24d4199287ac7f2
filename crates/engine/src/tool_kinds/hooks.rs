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
