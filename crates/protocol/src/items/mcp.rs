//! MCP items: `mcp_call` (a call the gateway made), `mcp_list_tools` (a server's offer), and
//! the approval round trip (`mcp_approval_request`, the client's `mcp_approval_response`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::CallStatus;
use crate::ids::{IdKind, new_id};

/// An MCP tool call the gateway made. `output` holds the result of a completed call, `error`
/// the reason of a failed one; both keys are always present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpCallItem {
    pub id: String,
    pub server_label: String,
    /// The tool's real name on its server (not the mangled function name the model saw).
    pub name: String,
    pub arguments: String,
    pub status: CallStatus,
    #[serde(default)]
    pub output: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
    /// The `mcp_approval_request` this call ran on, for a call that needed the client's approval.
    #[serde(default)]
    pub approval_request_id: Option<String>,
}

/// A call of an MCP tool that needs the client's approval before it runs. It carries everything
/// the call needs (server, tool, arguments), so it can run when a later request approves it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpApprovalRequestItem {
    pub id: String,
    pub server_label: String,
    /// The tool's real name on its server.
    pub name: String,
    pub arguments: String,
}

/// The client's answer to an [`McpApprovalRequestItem`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpApprovalResponseItem {
    #[serde(default = "mcp_approval_response_id")]
    pub id: String,
    pub approval_request_id: String,
    pub approve: bool,
    #[serde(default)]
    pub reason: Option<String>,
}

/// The tools an MCP server offered, shown once per server per conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpListToolsItem {
    pub id: String,
    pub server_label: String,
    pub tools: Vec<McpToolInfo>,
    #[serde(default)]
    pub error: Option<String>,
}

/// One tool in an [`McpListToolsItem`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolInfo {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub input_schema: Value,
    #[serde(default)]
    pub annotations: Option<Value>,
}

fn mcp_approval_response_id() -> String {
    new_id(IdKind::McpApprovalResponse)
}
