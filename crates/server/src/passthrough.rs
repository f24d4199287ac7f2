//! Pass-through routes: `GET /v1/models` and `POST /v1/chat/completions` forwarded to the model
//! server as they are — same method, query, body bytes and (non hop-by-hop) headers; the reply's
//! status, headers and body relayed unchanged, streams chunk by chunk as they arrive.
//!
//! Credentials: with an upstream key configured, it replaces the client's `Authorization`. With
//! none, the client's header is forwarded only while gateway auth is off — otherwise it is the
//! gateway's own API key, which must never reach the upstream.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use respgw_engine::{Engine, Upstream};

use crate::error::{HttpError, body_rejection};

/// What the pass-through routes need.
#[derive(Clone)]
pub struct Passthrough {
    pub engine: Arc<Engine>,
    /// Whether gateway API-key auth is on (then the client's `Authorization` is ours, not the upstream's).
    pub gateway_auth: bool,
}

/// Connection-scoped headers (RFC 9110 §7.6.1) plus those the HTTP client sets itself.
const NOT_FORWARDED: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

fn forwardable(name: &str) -> bool {
    !NOT_FORWARDED.contains(&name)
}

/// Forward one request to `{upstream}{upstream_path}`.
async fn forward(
    state: &Passthrough,
    method: Method,
    upstream_path: &str,
    uri: &Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let upstream = state.engine.upstream();
    let path = match uri.query() {
        Some(q) => format!("{upstream_path}?{q}"),
        None => upstream_path.to_owned(),
    };
    let mut request = upstream.request(method, &path);
    let upstream_has_key = upstream.config().api_key.is_some();
    for (name, value) in &headers {
        let name_str = name.as_str();
        if !forwardable(name_str) {
            continue;
        }
        if name == header::AUTHORIZATION && (upstream_has_key || state.gateway_auth) {
            continue;
        }
        request = request.header(name, value);
    }
    if !body.is_empty() {
        request = request.body(body);
    }
    let reply = match request.send().await {
        Ok(reply) => reply,
        Err(e) => return HttpError(Upstream::classify(e).to_api_error()).into_response(),
    };
    let status = reply.status();
    let mut out_headers = HeaderMap::new();
    for (name, value) in reply.headers() {
        if forwardable(name.as_str()) {
            out_headers.append(name, value.clone());
        }
    }
    let is_stream = reply
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if is_stream {
        out_headers.insert("x-accel-buffering", axum::http::HeaderValue::from_static("no"));
    }
    // Relay bytes as they arrive; a transport failure mid-body ends the body with an error, which
    // closes the connection — the client sees exactly what the upstream did.
    let body = Body::from_stream(reply.bytes_stream().inspect_err(|e| {
        tracing::warn!(error = %e, "pass-through body broke off");
    }));
    (status, out_headers, body).into_response()
}

/// `GET /v1/models`.
pub async fn models(State(state): State<Passthrough>, uri: Uri, headers: HeaderMap) -> Response {
    forward(&state, Method::GET, "/models", &uri, headers, Bytes::new()).await
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Passthrough>,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => forward(&state, Method::POST, "/chat/completions", &uri, headers, body).await,
        Err(rejection) => body_rejection(rejection).into_response(),
    }
}
