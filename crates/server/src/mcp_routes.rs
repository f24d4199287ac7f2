//! Built-in MCP discovery: `GET /v1/mcp/servers` lists the configured servers with
//! their availability (an empty list when Built-in MCP is disabled); `GET
//! /v1/mcp/servers/{server_label}/tools` lists a server's tools — 404 for an unknown label, 409
//! when the server is known but down, 503 when the MCP helper cannot be reached.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use respgw_protocol::ApiError;
use respgw_protocol::error::ErrorType;
use respgw_tools::mcp::{HelperError, McpHelperClient};
use serde_json::json;

use crate::error::{HttpError, path_rejection};

/// The helper client, when Built-in MCP is configured.
pub type McpDiscovery = Option<McpHelperClient>;

fn helper_error(e: HelperError) -> HttpError {
    let (status, code) = match &e {
        HelperError::UnknownServer { .. } => (404, "mcp_server_not_found"),
        HelperError::Unavailable { .. } => (409, "mcp_server_unavailable"),
        HelperError::Unreachable { .. } | HelperError::Protocol { .. } => (503, "mcp_runtime_unavailable"),
    };
    let error_type = if status == 404 { ErrorType::InvalidRequestError } else { ErrorType::ApiError };
    HttpError(ApiError { status, error_type, message: e.to_string(), param: None, code: Some(code.into()) })
}

/// `GET /v1/mcp/servers`.
pub async fn servers(State(helper): State<McpDiscovery>) -> Result<Response, HttpError> {
    let data = match helper {
        None => Vec::new(),
        Some(client) => client.servers().await.map_err(helper_error)?,
    };
    Ok(Json(json!({"object": "list", "data": data})).into_response())
}

/// `GET /v1/mcp/servers/{server_label}/tools`.
pub async fn tools(
    State(helper): State<McpDiscovery>,
    label: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(label) = label.map_err(|_| path_rejection("server_label"))?;
    let Some(client) = helper else {
        return Err(helper_error(HelperError::UnknownServer { label }));
    };
    let tools = client.tools(&label).await.map_err(helper_error)?;
    Ok(Json(json!({"object": "list", "server_label": label, "data": tools})).into_response())
}
