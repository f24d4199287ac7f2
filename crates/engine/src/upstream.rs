//! The HTTP client for the model server: one pooled `reqwest` client per process.
//!
//! [`Upstream::stream_chat`] opens a streaming chat-completions call and yields parsed chunks;
//! [`Upstream::request`] gives the pass-through routes a request builder with the upstream's
//! base URL and credentials applied. Failures are classified once here ([`UpstreamError`]) and
//! mapped to the API's error shape in one place ([`UpstreamError::to_api_error`]); an upstream's
//! "the prompt does not fit the context window" reply, in any of the wordings vLLM, SGLang,
//! llama.cpp and OpenAI-style servers use, is recognised here too ([`UpstreamError::context_overflow`]).
//!
//! Tracing: when spans are exported ([`respgw_telemetry::tracing_otlp`]), each call gets a client
//! span ([`Upstream::client_span`], e.g. `POST /chat/completions`) whose W3C `traceparent` is sent
//! upstream. The span covers the whole call, streamed body included, not each chunk; when spans
//! are not exported it is a disabled span and no header is added. Nothing of the request or reply
//! bodies is recorded on it.

use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures::{Stream, StreamExt};
use respgw_protocol::ApiError;
use respgw_protocol::error::ErrorType;
use respgw_telemetry::tracing_otlp;
use serde_json::Value;
use tracing::field::Empty;

use crate::chat::ChatChunk;
use crate::sse_decoder::SseDecoder;

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
    /// Idle keep-alive connections kept for reuse (per worker); a connection that falls idle
    /// beyond these is closed, so a burst of streams does not leave its connections and their
    /// buffers behind.
    #[serde(default = "default_max_idle_connections")]
    pub max_idle_connections: usize,
}

/// [`UpstreamConfig::max_idle_connections`] when none is given.
pub const DEFAULT_MAX_IDLE_CONNECTIONS: usize = 32;

fn default_max_idle_connections() -> usize {
    DEFAULT_MAX_IDLE_CONNECTIONS
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

    /// The client-facing error. A context-window overflow is 400 `context_length_exceeded`
    /// ([`ContextOverflow::to_api_error`]); any other upstream 4xx keeps its status and message
    /// (the client's request was wrong for that model); an upstream 5xx becomes 502.
    pub fn to_api_error(&self) -> ApiError {
        if let Some(overflow) = self.context_overflow() {
            return overflow.to_api_error();
        }
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

    /// Whether the upstream refused the request because the prompt (with the completion tokens it
    /// asked for) does not fit the model's context window, and the numbers it gave. Recognised: an
    /// OpenAI-style `code: "context_length_exceeded"`, llama.cpp's `exceed_context_size_error`,
    /// and the wordings of vLLM ("This model's maximum context length is …", "The decoder prompt
    /// (length …) is longer than the maximum model length of …", "Input prompt (…) is too long
    /// and exceeds limit of …"), SGLang ("The input (… tokens) is longer than the model's context
    /// length (…)", "Requested token count exceeds the model's maximum context length …") and
    /// llama.cpp ("request (… tokens) exceeds the available context size (…)") — on an HTTP 4xx
    /// reply or a mid-stream error payload.
    pub fn context_overflow(&self) -> Option<ContextOverflow> {
        let UpstreamError::Status { status, body } = self else { return None };
        let error = error_object(body);
        let field = |key: &str| error.get(key).and_then(Value::as_str).unwrap_or_default();
        let flagged = field("code") == "context_length_exceeded" || field("type") == "exceed_context_size_error";
        let (message, _, _) = describe_error_body(body);
        let message = message.unwrap_or_default().to_lowercase();
        let worded = OVERFLOW_WORDINGS.iter().any(|w| message.contains(w));
        if !(flagged || (worded && (400..500).contains(status))) {
            return None;
        }
        let number = |key: &str| error.get(key).and_then(Value::as_u64);
        Some(ContextOverflow {
            limit: number("n_ctx").or_else(|| first_number_after(&message, LIMIT_BEFORE)),
            requested: number("n_prompt_tokens").or_else(|| requested_tokens(&message)),
        })
    }
}

/// Lower-case phrases that, in a 4xx reply, mean the prompt does not fit the context window.
const OVERFLOW_WORDINGS: &[&str] = &[
    "maximum context length",
    "longer than the model's context length",
    "maximum model length",
    "is too long and exceeds limit",
    "exceeds the available context size",
    "maximum prompt length",
    "context length exceeded",
    "prompt is too long",
];

/// What comes right before the context window's size in those messages.
const LIMIT_BEFORE: &[&str] = &[
    "maximum context length is ",
    "maximum context length of ",
    "model's context length (",
    "available context size (",
    "maximum model length of ",
    "exceeds limit of ",
    "maximum prompt length is ",
];

/// What comes right before the prompt's size (without completion tokens).
const PROMPT_BEFORE: &[&str] = &[
    "your request has ",
    "prompt contains at least ",
    "messages resulted in ",
    "the input (",
    "request (",
    "prompt (length ",
    "input prompt (",
];

/// A context-window overflow reported by the upstream, with what it said of the sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextOverflow {
    /// The model's context window in tokens, when the upstream said.
    pub limit: Option<u64>,
    /// Tokens the request needed — the prompt, plus the completion tokens it asked for where the
    /// upstream counts them against the window — when the upstream said.
    pub requested: Option<u64>,
}

impl ContextOverflow {
    /// How many tokens the request has to shed to fit, when both sizes are known.
    pub fn excess(&self) -> Option<u64> {
        match (self.requested, self.limit) {
            // Servers refuse a prompt that fills the window exactly (no room for one token out).
            (Some(requested), Some(limit)) => Some(requested.saturating_sub(limit) + 1),
            _ => None,
        }
    }

    /// 400 `context_length_exceeded`, with the upstream's numbers when it gave them.
    pub fn to_api_error(&self) -> ApiError {
        ApiError::context_length_exceeded(format!(
            "The input does not fit the model's context window{}. Shorten the input, or set \
             'truncation' to 'auto' to let the gateway drop the oldest turns of the conversation.",
            self.sizes()
        ))
    }

    /// 400 `context_length_exceeded` for a request with `truncation: "auto"` that still does not
    /// fit with every turn but the last one dropped.
    pub fn to_api_error_after_truncation(&self) -> ApiError {
        ApiError::context_length_exceeded(format!(
            "The input does not fit the model's context window{}, even with every earlier turn of \
             the conversation dropped. Shorten the last turn or the instructions.",
            self.sizes()
        ))
    }

    fn sizes(&self) -> String {
        match (self.requested, self.limit) {
            (Some(requested), Some(limit)) => format!(" ({requested} tokens requested; the window is {limit} tokens)"),
            (None, Some(limit)) => format!(" of {limit} tokens"),
            (Some(requested), None) => format!(" ({requested} tokens requested)"),
            (None, None) => String::new(),
        }
    }
}

/// The number right after the first of `needles` found in `text` that is followed by one.
fn first_number_after(text: &str, needles: &[&str]) -> Option<u64> {
    needles.iter().find_map(|needle| number_after(text, needle))
}

fn number_after(text: &str, needle: &str) -> Option<u64> {
    let start = text.find(needle)? + needle.len();
    let digits: String = text[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Tokens requested in an overflow message: a stated total ("you requested 6616 tokens", "a total
/// of …"), else the prompt plus the completion tokens asked for ("'max_tokens' … is too large:
/// 1000 … your request has 203 input tokens", "you requested 64000 output tokens and your prompt
/// contains at least 67073 input tokens").
fn requested_tokens(message: &str) -> Option<u64> {
    let stated = |needle: &str| {
        let start = message.find(needle)? + needle.len();
        let rest = &message[start..];
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = &rest[digits.len()..];
        digits.parse::<u64>().ok().map(|n| (n, after.starts_with(" output tokens")))
    };
    let (total, output) = match stated("you requested a total of ").or_else(|| stated("you requested ")) {
        Some((n, true)) => (None, Some(n)),
        Some((n, false)) => (Some(n), None),
        None => (None, number_after(message, "is too large: ")),
    };
    total.or_else(|| first_number_after(message, PROMPT_BEFORE).map(|prompt| prompt + output.unwrap_or(0)))
}

/// The innermost error message (reqwest wraps hyper wraps io).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// The error object of an OpenAI-style `{"error":{…}}` body, or the body itself (vLLM's older
/// bare `{"object":"error","message":…}`).
fn error_object(body: &Value) -> &Value {
    match body.get("error") {
        Some(inner @ Value::Object(_)) => inner,
        _ => body,
    }
}

/// `(message, code, param)` from an OpenAI-style `{"error":{…}}` or a bare vLLM-style object.
fn describe_error_body(body: &Value) -> (Option<String>, Option<String>, Option<String>) {
    let obj = error_object(body);
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
    /// `{base}/chat/completions`, parsed once (a URL is parsed on every call otherwise); `None`
    /// when the base does not parse, and each call reports that.
    chat_url: Option<reqwest::Url>,
}

impl Upstream {
    pub fn new(config: UpstreamConfig) -> Result<Self, UpstreamError> {
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.idle_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(config.max_idle_connections)
            .build()
            .map_err(|e| UpstreamError::Unreachable(format!("cannot build HTTP client: {e}")))?;
        let base_url = config.base_url.trim_end_matches('/').to_owned();
        let server = reqwest::Url::parse(&base_url)
            .map(|url| (url.host_str().unwrap_or_default().to_owned(), url.port_or_known_default()))
            .unwrap_or_default();
        let chat_url = reqwest::Url::parse(&format!("{base_url}/chat/completions")).ok();
        Ok(Upstream { client, config: UpstreamConfig { base_url, ..config }, server, chat_url })
    }

    pub fn config(&self) -> &UpstreamConfig {
        &self.config
    }

    /// A request to `{base}{path}` (path starts with `/`), with the upstream key applied.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.raw_request(method, format!("{}{}", self.config.base_url, path))
    }

    /// A request to an absolute URL on the model server (integrated mode forwards paths outside
    /// the API base), with the upstream key applied.
    pub fn raw_request(&self, method: reqwest::Method, url: impl reqwest::IntoUrl) -> reqwest::RequestBuilder {
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
        let rb = match &self.chat_url {
            Some(url) => self.raw_request(reqwest::Method::POST, url.clone()),
            None => self.request(reqwest::Method::POST, "/chat/completions"),
        };
        let mut rb = rb.json(body);
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
/// SSE framing ([`SseDecoder`]), then `[DONE]` or a parsed chunk per event's data. Pure over its
/// input, so the fuzz targets drive it with arbitrary byte splits.
pub fn decode_stream<B: AsRef<[u8]>>(
    bytes: impl Stream<Item = Result<B, UpstreamError>>,
) -> impl Stream<Item = Result<UpstreamEvent, UpstreamError>> {
    let mut bytes = Box::pin(bytes);
    let mut decoder = SseDecoder::default();
    let mut ended = false;
    futures::stream::poll_fn(move |cx| {
        loop {
            if let Some(data) = decoder.next_data() {
                return Poll::Ready(Some(parse_data(data)));
            }
            if ended {
                return Poll::Ready(None);
            }
            match bytes.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => decoder.push(chunk.as_ref()),
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => ended = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    })
}

/// One event's data: `[DONE]` (surrounding whitespace allowed), or a chunk.
fn parse_data(data: &[u8]) -> Result<UpstreamEvent, UpstreamError> {
    // Chunks are JSON objects: only other data is compared with `[DONE]`.
    let trimmed = data.trim_ascii_start();
    if trimmed.first() != Some(&b'{') && std::str::from_utf8(trimmed).is_ok_and(|text| text.trim() == "[DONE]") {
        return Ok(UpstreamEvent::Done);
    }
    parse_chunk(data)
}

/// Parse one `data:` payload. Servers such as vLLM report mid-stream failures as
/// `data: {"error": {...}}`; that becomes an error, not a chunk.
fn parse_chunk(data: &[u8]) -> Result<UpstreamEvent, UpstreamError> {
    // Straight into the typed chunk (this runs once per token): no intermediate `Value`.
    let chunk: ChatChunk = serde_json::from_slice(data).map_err(|e| {
        let text = String::from_utf8_lossy(data);
        UpstreamError::Protocol(format!("chunk is not a chat.completion.chunk ({e}): {}", truncate(&text, 200)))
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

    #[tokio::test]
    async fn idle_connections_beyond_the_cap_are_closed() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let _ = rustls::crypto::ring::default_provider().install_default();
        // A model server on loopback that answers every request with an empty stream and counts
        // the connections it has open (and the most at once).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (open, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (server_open, server_most) = (Arc::clone(&open), Arc::clone(&most));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let now = server_open.fetch_add(1, Ordering::SeqCst) + 1;
                server_most.fetch_max(now, Ordering::SeqCst);
                let open = Arc::clone(&server_open);
                tokio::spawn(async move {
                    let (mut received, mut chunk) = (Vec::new(), [0u8; 4096]);
                    while let Ok(n @ 1..) = socket.read(&mut chunk).await {
                        received.extend_from_slice(&chunk[..n]);
                        // Every whole request (headers and a `content-length` body) gets its reply.
                        while let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
                            let length: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse().ok())
                                .unwrap_or(0);
                            if received.len() < end + 4 + length {
                                break;
                            }
                            received.drain(..end + 4 + length);
                            let body = "data: [DONE]\n\n";
                            let reply = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            socket.write_all(reply.as_bytes()).await.unwrap();
                        }
                    }
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        let upstream = Upstream::new(UpstreamConfig {
            base_url: format!("http://{addr}/v1"),
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            max_idle_connections: 2,
        })
        .unwrap();
        // Five calls at once, each on a connection of its own; all five then fall idle.
        let calls = (0..5).map(|_| async {
            let mut events = upstream.stream_chat(&json!({"model": "m"}), &[]).await.unwrap();
            while events.next().await.is_some() {}
        });
        futures::future::join_all(calls).await;
        for _ in 0..250 {
            if open.load(Ordering::SeqCst) <= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(most.load(Ordering::SeqCst) > 2, "the calls shared connections: {most:?}");
        assert_eq!(open.load(Ordering::SeqCst), 2, "idle connections kept");
    }

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

    /// The overflow an upstream error body reports, if it is one.
    fn overflow(status: u16, body: Value) -> Option<ContextOverflow> {
        UpstreamError::Status { status, body }.context_overflow()
    }

    fn sizes(limit: u64, requested: u64) -> Option<ContextOverflow> {
        Some(ContextOverflow { limit: Some(limit), requested: Some(requested) })
    }

    #[test]
    fn vllm_context_errors_are_recognised_with_their_numbers() {
        // vLLM before 0.10: a bare error object.
        let classic = json!({"object":"error","message":"This model's maximum context length is 6048 tokens. \
            However, you requested 6616 tokens (568 in the messages, 6048 in the completion). Please reduce the \
            length of the messages or completion.","type":"BadRequestError","param":null,"code":400});
        assert_eq!(overflow(400, classic), sizes(6048, 6616));
        // vLLM 0.10 and later: nested under `error`.
        let input = json!({"error":{"message":"This model's maximum context length is 32768 tokens. However, \
            your request has 40000 input tokens. Please reduce the length of the input messages.",
            "type":"BadRequestError","param":null,"code":400}});
        assert_eq!(overflow(400, input), sizes(32768, 40000));
        let completion = json!({"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 1000. \
            This model's maximum context length is 1000 tokens and your request has 203 input tokens \
            (1000 > 1000 - 203).","type":"BadRequestError","param":null,"code":400}});
        assert_eq!(overflow(400, completion), sizes(1000, 1203));
        let output_first = json!({"error":{"message":"This model's maximum context length is 131072 tokens. \
            However, you requested 64000 output tokens and your prompt contains at least 67073 input tokens, \
            for a total of at least 131073 tokens.","type":"BadRequestError","param":null,"code":400}});
        assert_eq!(overflow(400, output_first), sizes(131072, 131073));
        let decoder = json!({"error":{"message":"The decoder prompt (length 8825) is longer than the maximum \
            model length of 8192. Make sure that `max_model_len` is no smaller than the number of text tokens.",
            "type":"BadRequestError","param":null,"code":400}});
        assert_eq!(overflow(400, decoder), sizes(8192, 8825));
        let scheduler = json!({"error":{"message":"Input prompt (2501 tokens) is too long and exceeds limit of 2048",
            "type":"BadRequestError","param":null,"code":400}});
        assert_eq!(overflow(400, scheduler), sizes(2048, 2501));
    }

    #[test]
    fn sglang_context_errors_are_recognised_with_their_numbers() {
        let input = json!({"object":"error","message":"The input (5000 tokens) is longer than the model's context \
            length (4096 tokens).","type":"BadRequestError","param":null,"code":400});
        assert_eq!(overflow(400, input), sizes(4096, 5000));
        let total = json!({"object":"error","message":"Requested token count exceeds the model's maximum context \
            length of 4096 tokens. You requested a total of 5000 tokens: 4000 tokens from the input messages and \
            1000 tokens for the completion. Please reduce the number of tokens in the input messages or the \
            completion to fit within the limit.","type":"BadRequestError","param":null,"code":400});
        assert_eq!(overflow(400, total), sizes(4096, 5000));
    }

    #[test]
    fn llama_cpp_context_errors_are_recognised_with_their_numbers() {
        let current = json!({"error":{"code":400,"message":"request (13392 tokens) exceeds the available context \
            size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":13392,
            "n_ctx":8192}});
        assert_eq!(overflow(400, current), sizes(8192, 13392));
        let older = json!({"error":{"code":400,"message":"the request exceeds the available context size, try \
            increasing it","type":"exceed_context_size_error"}});
        assert_eq!(overflow(400, older), Some(ContextOverflow { limit: None, requested: None }));
    }

    #[test]
    fn openai_style_context_errors_are_recognised_by_code() {
        let body = json!({"error":{"message":"Your input exceeds the context window of this model. Please adjust \
            your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}});
        assert_eq!(overflow(400, body), Some(ContextOverflow { limit: None, requested: None }));
    }

    #[test]
    fn other_errors_are_not_context_overflows() {
        assert_eq!(overflow(400, json!({"error":{"message":"max_tokens must be at least 1, got -186."}})), None);
        assert_eq!(overflow(404, json!({"message":"The model `x` does not exist.","code":404})), None);
        // A server fault that mentions the window is still a server fault.
        assert_eq!(overflow(500, json!({"error":{"message":"maximum context length is unknown"}})), None);
        assert_eq!(UpstreamError::Timeout.context_overflow(), None);
    }

    #[test]
    fn a_context_overflow_is_a_400_context_length_exceeded_in_our_words() {
        let body = json!({"error":{"message":"This model's maximum context length is 200 tokens. However, your \
            request has 203 input tokens. Please reduce the length of the input messages.","code":400}});
        let api = UpstreamError::Status { status: 400, body }.to_api_error();
        assert_eq!(
            (api.status, api.error_type, api.code.as_deref(), api.param.as_deref()),
            (400, ErrorType::InvalidRequestError, Some("context_length_exceeded"), Some("input"))
        );
        assert!(api.message.contains("(203 tokens requested; the window is 200 tokens)"), "{}", api.message);
        assert!(api.message.contains("'truncation' to 'auto'"), "{}", api.message);
        // Mid-stream error payloads are classified the same way.
        let Err(e) = parse_chunk(
            br#"{"error":{"message":"request (9 tokens) exceeds the available context size (8 tokens)","type":"exceed_context_size_error","code":400}}"#,
        ) else {
            panic!("an error payload parsed as a chunk");
        };
        assert_eq!(e.to_api_error().code.as_deref(), Some("context_length_exceeded"));
    }

    #[test]
    fn excess_is_what_must_go_for_one_token_of_room() {
        assert_eq!(sizes(200, 203).and_then(|o| o.excess()), Some(4));
        assert_eq!(sizes(200, 200).and_then(|o| o.excess()), Some(1));
        assert_eq!(ContextOverflow { limit: Some(200), requested: None }.excess(), None);
    }

    #[test]
    fn mid_stream_error_payload_is_an_error() {
        let e = parse_chunk(br#"{"error":{"message":"oom","code":500}}"#);
        assert!(matches!(e, Err(UpstreamError::Status { status: 500, .. })));
        assert!(matches!(parse_chunk(b"not json"), Err(UpstreamError::Protocol(_))));
        assert!(matches!(parse_chunk(br#"{"choices":[]}"#), Ok(UpstreamEvent::Chunk(_))));
    }
}
