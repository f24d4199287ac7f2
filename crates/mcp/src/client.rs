//! rmcp client pieces shared by the MCP helper's sessions and Remote MCP sessions.

use rmcp::RoleClient;
use rmcp::service::{ClientInitializeError, ServiceError};
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

use crate::ToolInfo;
use crate::redact::{error_chain, tidy};

/// The server's whole tool list (every page), converted to the wire shape and sorted by name.
pub async fn list_tools(peer: &rmcp::Peer<RoleClient>) -> Result<Vec<ToolInfo>, String> {
    let tools = peer.list_all_tools().await.map_err(|e| format!("tools/list failed: {}", describe_error(&e)))?;
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

/// An rmcp client error on one line, without Rust type names, and with the causes that rmcp's
/// error types keep out of `source()`: "Client error: error sending request" alone does not say
/// whether the connection was refused, the certificate was not trusted or the address was not
/// allowed; the HTTP client's own error inside it does.
pub fn describe_error(e: &(dyn std::error::Error + 'static)) -> String {
    tidy(&describe(e))
}

fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(ClientInitializeError::TransportError { error, context }) = e.downcast_ref::<ClientInitializeError>() {
        return format!("{} (when trying to {context})", describe(error));
    }
    if let Some(ServiceError::TransportSend(error)) = e.downcast_ref::<ServiceError>() {
        return describe(error);
    }
    if let Some(dynamic) = e.downcast_ref::<DynamicTransportError>() {
        return describe(dynamic.error.as_ref());
    }
    if let Some(StreamableHttpError::Client(inner)) = e.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
        return error_chain(inner);
    }
    error_chain(e)
}
