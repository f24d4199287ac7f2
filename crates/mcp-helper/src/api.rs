//! The loopback HTTP API (axum) over [`McpRuntime`]. Routes and bodies are documented in
//! `respgw_mcp` (the wire types live there, shared with the workers' client); this file only maps
//! runtime answers to status codes.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use respgw_mcp::wire::{CODE_BAD_REQUEST, CODE_SERVER_UNAVAILABLE, CODE_UNKNOWN_SERVER};
use respgw_mcp::{CallRequest, ErrorBody, ErrorDetail, Health, ServerList, ToolList};
use serde_json::Value;

use crate::runtime::McpRuntime;
use crate::supervised_server::ServerError;

/// The helper's routes.
pub fn router(runtime: Arc<McpRuntime>) -> axum::Router {
    axum::Router::new()
        .route("/health", get(health))
        .route("/servers", get(servers))
        .route("/servers/{label}/tools", get(tools))
        .route("/servers/{label}/tools/{name}/call", post(call))
        .with_state(runtime)
}

async fn health(State(runtime): State<Arc<McpRuntime>>) -> Response {
    let servers = runtime.servers();
    let ready = runtime.is_ready();
    let body = Health { ok: ready, servers: servers.len(), available: servers.iter().filter(|s| s.available).count() };
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(body)).into_response()
}

async fn servers(State(runtime): State<Arc<McpRuntime>>) -> Json<ServerList> {
    Json(ServerList { object: "list".into(), data: runtime.servers() })
}

async fn tools(State(runtime): State<Arc<McpRuntime>>, Path(label): Path<String>) -> Response {
    let Some(server) = runtime.server(&label) else { return unknown(&label) };
    match server.tools() {
        Ok(tools) => {
            Json(ToolList { server_label: label, available: true, tools: tools.as_ref().clone() }).into_response()
        }
        Err(e) => unavailable(&label, e),
    }
}

async fn call(
    State(runtime): State<Arc<McpRuntime>>,
    Path((label, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let Some(server) = runtime.server(&label) else { return unknown(&label) };
    let request: CallRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return error(StatusCode::BAD_REQUEST, CODE_BAD_REQUEST, format!("invalid call body: {e}"), None),
    };
    let arguments = match request.arguments {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                CODE_BAD_REQUEST,
                format!("\"arguments\" must be a JSON object, found {}", respgw_mcp::config::json_kind(&other)),
                None,
            );
        }
    };
    let started = Instant::now();
    match server.call(&name, arguments, runtime.settings()).await {
        Ok(outcome) => {
            tracing::info!(
                server_label = %label, tool = %name, ok = outcome.ok,
                duration_ms = started.elapsed().as_millis() as u64, "MCP tool call"
            );
            Json(outcome).into_response()
        }
        Err(e) => unavailable(&label, e),
    }
}

fn unknown(label: &str) -> Response {
    error(StatusCode::NOT_FOUND, CODE_UNKNOWN_SERVER, format!("Unknown MCP server_label: {label}"), None)
}

fn unavailable(label: &str, e: ServerError) -> Response {
    let ServerError::Unavailable(last_error) = e;
    error(
        StatusCode::CONFLICT,
        CODE_SERVER_UNAVAILABLE,
        format!("MCP server '{label}' is currently unavailable: {last_error}"),
        Some(last_error),
    )
}

fn error(status: StatusCode, code: &str, message: String, last_error: Option<String>) -> Response {
    (status, Json(ErrorBody { error: ErrorDetail { code: code.into(), message, last_error } })).into_response()
}
