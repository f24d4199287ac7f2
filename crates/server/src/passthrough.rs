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

use crate::error::{HttpError, Relayed, body_rejection};

/// What the pass-through routes need.
#[derive(Clone)]
pub struct Passthrough {
    pub engine: Arc<Engine>,
    /// Whether gateway API-key auth is on (then the client's `Authorization` is ours, not the upstream's).
    pub gateway_auth: bool,
    /// Integrated mode: the model server's own base URL, for [`forward_any`].
    pub forward_base: Option<String>,
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

/// Where a forwarded request goes.
enum Target<'a> {
    /// `{upstream base}{path}`, e.g. `/models` under `http://host:8000/v1`.
    UnderUpstreamBase(&'a str),
    /// The model server's own base URL plus the client's path, unchanged (integrated mode).
    Raw(&'a str),
}

/// Forward one request.
async fn forward(
    state: &Passthrough,
    method: Method,
    target: Target<'_>,
    uri: &Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let upstream = state.engine.upstream();
    // The client span of the forwarded call (disabled unless spans are exported); it ends with the body.
    let span = match target {
        Target::UnderUpstreamBase(path) => upstream.client_span(&method, path),
        Target::Raw(_) => upstream.client_span(&method, uri.path()),
    };
    let with_query = |path: &str| match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut request = match target {
        Target::UnderUpstreamBase(path) => upstream.request(method, &with_query(path)),
        Target::Raw(base) => {
            upstream.raw_request(method, format!("{}{}", base.trim_end_matches('/'), with_query(uri.path())))
        }
    };
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
    // Our span's `traceparent` replaces the client's when spans are exported.
    request = Upstream::with_trace_context(request, &span);
    if !body.is_empty() {
        request = request.body(body);
    }
    let reply = match request.send().await {
        Ok(reply) => reply,
        Err(e) => {
            let error = Upstream::classify(e);
            Upstream::record_failure(&span, error.kind());
            return HttpError(error.to_api_error()).into_response();
        }
    };
    let status = reply.status();
    Upstream::record_status(&span, status);
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
    let body = Body::from_stream(reply.bytes_stream().inspect_err(move |e| {
        Upstream::record_failure(&span, "body_interrupted");
        tracing::warn!(error = %e, "pass-through body broke off");
    }));
    let mut response = (status, out_headers, body).into_response();
    response.extensions_mut().insert(Relayed);
    response
}

/// `GET /v1/models`.
pub async fn models(State(state): State<Passthrough>, uri: Uri, headers: HeaderMap) -> Response {
    forward(&state, Method::GET, Target::UnderUpstreamBase("/models"), &uri, headers, Bytes::new()).await
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(state): State<Passthrough>,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match body {
        Ok(body) => {
            forward(&state, Method::POST, Target::UnderUpstreamBase("/chat/completions"), &uri, headers, body).await
        }
        Err(rejection) => body_rejection(rejection).into_response(),
    }
}

/// Integrated mode: any request no gateway route serves, forwarded to the model server as it is.
pub async fn forward_any(
    State(state): State<Passthrough>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(base) = state.forward_base.clone() else {
        return HttpError(respgw_protocol::ApiError::route_not_found(method.as_str(), uri.path())).into_response();
    };
    match body {
        Ok(body) => forward(&state, method, Target::Raw(&base), &uri, headers, body).await,
        Err(rejection) => body_rejection(rejection).into_response(),
    }
}
