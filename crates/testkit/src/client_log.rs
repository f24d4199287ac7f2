//! [`ClientLog`]: a recording pass-through between a real client (Codex CLI, the Agents SDK) and
//! the gateway, so a test can compare what the client sent with what the upstream received.
//!
//! Every request is recorded (method, path, headers, JSON body), forwarded unchanged to the
//! gateway, and the gateway's reply (status, content type, body — streamed as it comes, so SSE
//! keeps flowing) is sent back unchanged.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::gateway::http_client;

/// One request a client sent.
#[derive(Debug, Clone)]
pub struct ClientRequest {
    pub method: Method,
    /// Path and query as sent.
    pub path: String,
    pub headers: HeaderMap,
    /// The JSON body (`Null` when empty).
    pub body: Value,
}

/// A running recording pass-through on `127.0.0.1`; stops when dropped.
pub struct ClientLog {
    address: SocketAddr,
    requests: Arc<Mutex<Vec<ClientRequest>>>,
    server: JoinHandle<()>,
}

struct Forward {
    target: String,
    requests: Arc<Mutex<Vec<ClientRequest>>>,
}

impl ClientLog {
    /// Forward to `target` (a base URL such as `http://127.0.0.1:5969`; paths are appended).
    pub async fn start(target: &str) -> anyhow::Result<ClientLog> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = Arc::new(Forward { target: target.trim_end_matches('/').to_owned(), requests: requests.clone() });
        let router = Router::new().fallback(forward).with_state(state);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(ClientLog { address, requests, server })
    }

    /// The base URL to give the client instead of the gateway's (`http://127.0.0.1:PORT`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// What the clients sent, in arrival order.
    pub fn requests(&self) -> Vec<ClientRequest> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Drop for ClientLog {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(State(state): State<Arc<Forward>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(raw) = axum::body::to_bytes(body, usize::MAX).await else {
        return (StatusCode::BAD_REQUEST, "client log: unreadable body").into_response();
    };
    let path = parts.uri.path_and_query().map_or_else(|| parts.uri.path().to_owned(), |p| p.as_str().to_owned());
    let body = if raw.is_empty() { Value::Null } else { serde_json::from_slice(&raw).unwrap_or(Value::Null) };
    state.requests.lock().unwrap_or_else(PoisonError::into_inner).push(ClientRequest {
        method: parts.method.clone(),
        path: path.clone(),
        headers: parts.headers.clone(),
        body,
    });
    let mut outgoing = http_client().request(parts.method, format!("{}{path}", state.target)).body(raw);
    for (name, value) in &parts.headers {
        if !matches!(name.as_str(), "host" | "content-length" | "connection" | "transfer-encoding") {
            outgoing = outgoing.header(name, value);
        }
    }
    match outgoing.send().await {
        Ok(reply) => {
            let mut response = Response::builder().status(reply.status().as_u16());
            if let Some(content_type) = reply.headers().get("content-type") {
                response = response.header("content-type", content_type);
            }
            response
                .body(Body::from_stream(reply.bytes_stream()))
                .unwrap_or_else(|e| (StatusCode::BAD_GATEWAY, format!("client log: {e}")).into_response())
        }
        Err(e) => (StatusCode::BAD_GATEWAY, format!("client log: {e}")).into_response(),
    }
}
