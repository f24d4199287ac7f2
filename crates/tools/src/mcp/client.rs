//! rmcp client pieces shared by the MCP helper's sessions and Remote MCP sessions.

use rmcp::RoleClient;

use super::ToolInfo;
use super::redact::error_chain;

/// The server's whole tool list (every page), converted to the wire shape and sorted by name.
pub async fn list_tools(peer: &rmcp::Peer<RoleClient>) -> Result<Vec<ToolInfo>, String> {
    let tools = peer.list_all_tools().await.map_err(|e| format!("tools/list failed: {}", error_chain(&e)))?;
    let mut tools: Vec<ToolInfo> = tools
        .into_iter()
        .map(|tool| ToolInfo {
            name: tool.name.into_owned(),
            title: tool.title,
            description: tool.description.map(|d| d.into_owned()),
            input_schema: serde_json::Value::Object((*tool.input_schema).clone()),
            annotations: tool.annotations.and_then(|a| serde_json::to_value(a).ok()),
        })
        .collect();
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tools)
}
