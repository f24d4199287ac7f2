//! The HTTP client for the model server: one pooled `reqwest` client per process.
//!
//! [`Upstream::stream_chat`] opens a streaming chat-completions call and yields parsed chunks;
//! [`Upstream::request`] gives the pass-through routes a request builder with the upstream's
//! base URL and credentials applied. Failures are classified once here ([`UpstreamError`]) and
//! mapped to the API's error shape in one place ([`UpstreamError::to_api_error`]).
//!
//! Tracing: when spans are exported ([`respgw_telemetry::tracing_otlp`]), each call gets a client
//! span ([`Upstream::client_span`], e.g. `POST /chat/completions`) whose W3C `traceparent` is sent
//! upstream. The span covers the whole call, streamed body included, not each chunk; when spans
//! are not exported it is a disabled span and no header is added. Nothing of the request or reply
//! bodies is recorded on it.

use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use respgw_protocol::ApiError;
use respgw_protocol::error::ErrorType;
use respgw_telemetry::tracing_otlp;
use serde_json::Value;
use tracing::field::Empty;

use crate::chat::ChatChunk;

/// How to reach the model server.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct UpstreamConfig {
    /// Base URL including the API prefix, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    /// Bearer token sent upstream, if the model server wants one.
    pub api_key: Option<String>,
    /// Time allowed to open a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Longest silence allowed while waiting for response bytes (headers or the next chunk).
    pub idle_timeout: Duration,
}

/// Why an upstream call failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream unreachable: {0}")]
    Unreachable(String),
    #[error("upstream timed out")]
    Timeout,
    /// The upstream answered with an HTTP error; `body` is its JSON error body (or the raw text).
    #[error("upstream returned HTTP {status}")]
    Status { status: u16, body: Value },
    /// The upstream sent something that is not a chat-completions stream.
    #[error("upstream protocol error: {0}")]
    Protocol(String),
}

impl UpstreamError {
    /// A short, content-free name for the kind of failure (a span's `error.type`).
    pub fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Unreachable(_) => "unreachable",
            UpstreamError::Timeout => "timeout",
            UpstreamError::Status { .. } => "upstream_error",
            UpstreamError::Protocol(_) => "protocol_error",
        }
    }

    fn from_reqwest(e: reqwest::Error) -> Self {
        if e.is_timeout() {
            UpstreamError::Timeout
        } else if e.is_connect() {
            UpstreamError::Unreachable(root_cause(&e))
        } else {
            UpstreamError::Unreachable(format!("connection to upstream failed: {}", root_cause(&e)))
        }
    }

    /// The client-facing error. An upstream 4xx keeps its status and message (the client's
    /// request was wrong for that model); an upstream 5xx becomes 502.
    pub fn to_api_error(&self) -> ApiError {
        match self {
            UpstreamError::Unreachable(detail) => ApiError::upstream_unavailable(detail),
            UpstreamError::Timeout => ApiError::upstream_timeout(),
            UpstreamError::Protocol(detail) => ApiError {
                status: 502,
                error_type: ErrorType::ApiError,
                message: format!("The upstream model server sent an invalid stream: {detail}"),
                param: None,
                code: Some("upstream_protocol_error".into()),
            },
            UpstreamError::Status { status, body } => {
                let (message, code, param) = describe_error_body(body);
                let client_fault = (400..500).contains(status) && !matches!(status, 401 | 403 | 407);
                ApiError {
                    status: if client_fault { *status } else { 502 },
                    error_type: if client_fault { ErrorType::InvalidRequestError } else { ErrorType::ApiError },
                    message: message.unwrap_or_else(|| format!("The upstream model server returned HTTP {status}.")),
                    param,
                    code: Some(code.unwrap_or_else(|| format!("upstream_http_{status}"))),
                }
            }
        }
    }
}

/// The innermost error message (reqwest wraps hyper wraps io).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// `(message, code, param)` from an OpenAI-style `{"error":{…}}` or a bare vLLM-style object.
fn describe_error_body(body: &Value) -> (Option<String>, Option<String>, Option<String>) {
    let obj = match body.get("error") {
        Some(inner @ Value::Object(_)) => inner,
        _ => body,
    };
    let text = |v: Option<&Value>| match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let message = text(obj.get("message")).or_else(|| body.as_str().map(str::to_owned));
    (message, text(obj.get("code")), text(obj.get("param")))
}

/// One item of an upstream chunk stream.
#[derive(Debug)]
pub enum UpstreamEvent {
    Chunk(ChatChunk),
    /// `data: [DONE]`.
    Done,
}

/// The parsed upstream stream.
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<UpstreamEvent, UpstreamError>> + Send>>;

/// The pooled client for one model server.
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    config: UpstreamConfig,
    /// Host and port of `config.base_url`, for the client spans' `server.address`/`server.port`.
    server: (String, Option<u16>),
}

impl Upstream {
    pub fn new(config: UpstreamConfig) -> Result<Self, UpstreamError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.idle_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()
            .map_err(|e| UpstreamError::Unreachable(format!("cannot build HTTP client: {e}")))?;
        let base_url = config.base_url.trim_end_matches('/').to_owned();
        let server = reqwest::Url::parse(&base_url)
            .map(|url| (url.host_str().unwrap_or_default().to_owned(), url.port_or_known_default()))
            .unwrap_or_default();
        Ok(Upstream { client, config: UpstreamConfig { base_url, ..config }, server })
    }

    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// A request to `{base}{path}` (path starts with `/`), with the upstream key applied.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.raw_request(method, &format!("{}{}", self.config.base_url, path))
    }

    /// A request to an absolute URL on the model server (integrated mode forwards paths outside
    /// the API base), with the upstream key applied.
    pub fn raw_request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let rb = self.client.request(method, url);
        match &self.config.api_key {
            Some(key) => rb.bearer_auth(key),
            None => rb,
        }
    }

    /// Classify a transport failure of a request made with [`Upstream::request`].
    pub fn classify(e: reqwest::Error) -> UpstreamError {
        UpstreamError::from_reqwest(e)
    }

    /// The client span for one upstream call, named `{METHOD} {path}` (`path` without the query:
    /// it is the span name). A child of the current span; disabled when spans are not exported.
    /// Record the outcome with [`Upstream::record_status`] / [`Upstream::record_failure`].
    pub fn client_span(&self, method: &reqwest::Method, path: &str) -> tracing::Span {
        if !tracing_otlp::exporting() {
            return tracing::Span::none();
        }
        let (address, port) = &self.server;
        tracing::info_span!(
            "upstream",
            otel.name = %format_args!("{method} {path}"),
            otel.kind = "client",
            http.request.method = %method,
            server.address = %address,
            server.port = port,
            http.response.status_code = Empty,
            error.type = Empty,
            otel.status_code = Empty,
        )
    }

    /// Send `span`'s W3C trace context (`traceparent`, `tracestate`) with a request, replacing any
    /// such header already set on it (a pass-through client's own). Unchanged when spans are not
    /// exported.
    pub fn with_trace_context(request: reqwest::RequestBuilder, span: &tracing::Span) -> reqwest::RequestBuilder {
        let headers = tracing_otlp::trace_context_headers(span);
        if headers.is_empty() { request } else { request.headers(headers) }
    }

    /// Start a streaming chat-completions call. HTTP errors are read and returned as
    /// [`UpstreamError::Status`] before any chunk is yielded.
    pub async fn stream_chat(&self, body: &Value, headers: &[(&str, String)]) -> Result<ChunkStream, UpstreamError> {
        let span = self.client_span(&reqwest::Method::POST, "/chat/completions");
        let mut rb = self.request(reqwest::Method::POST, "/chat/completions").json(body);
        for (name, value) in headers {
            rb = rb.header(*name, value);
        }
        let rb = Self::with_trace_context(rb, &span);
        let response = match rb.send().await {
            Ok(response) => response,
            Err(e) => {
                let error = UpstreamError::from_reqwest(e);
                Self::record_failure(&span, error.kind());
                return Err(error);
            }
        };
        let status = response.status();
        Self::record_status(&span, status);
        if !status.is_success() {
            let bytes = response.bytes().await.map_err(UpstreamError::from_reqwest)?;
            let body = serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
            return Err(UpstreamError::Status { status: status.as_u16(), body });
        }
        // The closure owns the span, so the span ends when the stream is dropped.
        let events = decode_stream(response.bytes_stream().map(|bytes| bytes.map_err(UpstreamError::from_reqwest)))
            .map(move |item| {
                if let Err(error) = &item {
                    Self::record_failure(&span, error.kind());
                }
                item
            });
        Ok(Box::pin(events))
    }

    /// Record an upstream reply's status on its client span; 4xx and 5xx mark the span as failed.
    pub fn record_status(span: &tracing::Span, status: reqwest::StatusCode) {
        span.record("http.response.status_code", status.as_u16());
        if status.is_client_error() || status.is_server_error() {
            span.record("error.type", status.as_str());
            span.record("otel.status_code", "error");
        }
    }

    /// Mark an upstream call's client span as failed, with `kind` (e.g. [`UpstreamError::kind`]) as
    /// its `error.type` — never the error's details, which may quote the upstream's body.
    pub fn record_failure(span: &tracing::Span, kind: &'static str) {
        span.record("error.type", kind);
        span.record("otel.status_code", "error");
    }
}

/// The upstream's body bytes, however they are split into chunks, as chat-completion events:
/// SSE framing (eventsource-stream), then `[DONE]` or a parsed chunk per `data:` payload. Pure
/// over its input, so the fuzz targets drive it with arbitrary byte splits.
pub fn decode_stream<B: AsRef<[u8]>>(
    bytes: impl Stream<Item = Result<B, UpstreamError>>,
) -> impl Stream<Item = Result<UpstreamEvent, UpstreamError>> {
    bytes.eventsource().map(|event| match event {
        Ok(ev) if ev.data.trim() == "[DONE]" => Ok(UpstreamEvent::Done),
        Ok(ev) => parse_chunk(&ev.data),
        Err(eventsource_stream::EventStreamError::Transport(e)) => Err(e),
        Err(e) => Err(UpstreamError::Protocol(e.to_string())),
    })
}

/// Parse one `data:` payload. Servers such as vLLM report mid-stream failures as
/// `data: {"error": {...}}`; that becomes an error, not a chunk.
fn parse_chunk(data: &str) -> Result<UpstreamEvent, UpstreamError> {
    // Straight into the typed chunk (this runs once per token): no intermediate `Value`.
    let chunk: ChatChunk = serde_json::from_str(data).map_err(|e| {
        UpstreamError::Protocol(format!("chunk is not a chat.completion.chunk ({e}): {}", truncate(data, 200)))
    })?;
    if let Some(err) = chunk.error.as_ref().filter(|e| !e.is_null()) {
        let status = err.get("code").and_then(Value::as_u64).filter(|c| (400..600).contains(c)).unwrap_or(500);
        return Err(UpstreamError::Status { status: status as u16, body: serde_json::json!({ "error": err }) });
    }
    Ok(UpstreamEvent::Chunk(chunk))
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn upstream_404_keeps_status_and_message() {
        let e = UpstreamError::Status {
            status: 404,
            body: json!({"code":404,"message":"The model `x` does not exist.","param":"model","type":"NotFoundError"}),
        };
        let api = e.to_api_error();
        assert_eq!(api.status, 404);
        assert_eq!(api.message, "The model `x` does not exist.");
        assert_eq!(api.code.as_deref(), Some("404"));
        assert_eq!(api.param.as_deref(), Some("model"));
    }

    #[test]
    fn upstream_5xx_and_auth_failures_become_502() {
        for status in [500, 503, 401] {
            let api = UpstreamError::Status { status, body: json!({"error":{"message":"boom"}}) }.to_api_error();
            assert_eq!(api.status, 502, "{status}");
            assert_eq!(api.error_type, ErrorType::ApiError);
        }
    }

    #[test]
    fn openai_style_error_body_is_read() {
        let api = UpstreamError::Status {
            status: 400,
            body: json!({"error":{"message":"too long","type":"invalid_request_error","code":"context_length_exceeded","param":"input"}}),
        }
        .to_api_error();
        assert_eq!((api.status, api.code.as_deref()), (400, Some("context_length_exceeded")));
    }

    #[test]
    fn mid_stream_error_payload_is_an_error() {
        let e = parse_chunk(r#"{"error":{"message":"oom","code":500}}"#);
        assert!(matches!(e, Err(UpstreamError::Status { status: 500, .. })));
        assert!(matches!(parse_chunk("not json"), Err(UpstreamError::Protocol(_))));
        assert!(matches!(parse_chunk(r#"{"choices":[]}"#), Ok(UpstreamEvent::Chunk(_))));
    }
}
