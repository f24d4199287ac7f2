//! [`ReplayUpstream`]: a fake OpenAI-compatible model server that replays recorded and scripted replies.
//!
//! The gateway under test is pointed at [`ReplayUpstream::base_url`]. Every `POST /v1/chat/completions`
//! (and legacy `POST /v1/completions`, whose scenarios give raw replies: [`Step::Status`],
//! [`Step::SlowSse`]) is routed by the `model` field of its JSON body to a *scenario*: an ordered queue of [`Step`]s, each
//! request consuming the next one. Tests therefore pick a scenario simply by the model name they send
//! through the gateway. An unknown model, an exhausted queue or any other surprise is answered with
//! HTTP 500 `{"error":{"message":"replay: ..."}}` and noted in [`RecordedRequest::replay_error`], so a
//! test fails loudly instead of silently getting a wrong reply.
//!
//! Other routes: `GET /v1/models` lists the scenario names; `POST /v1/embeddings` answers any model
//! with the [`embedding`](crate::embedding) bag-of-words vectors (dimension set by
//! [`ReplayUpstream::set_embedding_dimensions`], floats or base64), and can be made to fail
//! ([`ReplayUpstream::fail_embeddings`]) or to answer late ([`ReplayUpstream::set_embedding_delay`]);
//! anything else is a 404 JSON error.
//!
//! Token counting (opt-in, with the [`toy_tokenizer`]): [`ReplayUpstream::serve_tokenizer`]
//! adds vLLM's `POST /tokenize` (with `messages`) or llama.cpp's `POST /apply-template` and
//! `POST /tokenize` (with `content`) at the server's root; [`ReplayUpstream::set_context_window`]
//! makes every chat completion whose prompt does not fit fail before any step is consumed, with
//! vLLM's 400 error body; [`Step::OneTokenCompletion`] answers like a server asked for one token,
//! with the prompt's `usage.prompt_tokens`.
//! Every request, whatever its route, is recorded (see [`ReplayUpstream::all_requests`]), and a
//! streamed reply whose connection the gateway closed before the last chunk went out is counted
//! (see [`ReplayUpstream::unfinished_streams`]): that is how tests see a generation cancelled.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use futures::{StreamExt, stream};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::cassette::{Cassette, ResponsePayload};
use crate::cassettes_dir;
use crate::embedding;
use crate::toy_tokenizer;

/// Content type of every streamed reply that does not come from a cassette.
const SSE_CONTENT_TYPE: &str = "text/event-stream; charset=utf-8";

/// One scripted upstream reply.
#[derive(Debug, Clone)]
pub enum Step {
    /// Replay a cassette file: its recorded status and content type, then either its SSE chunks
    /// (streamed one by one, flushed after each, as recorded) or its JSON body.
    Cassette(PathBuf),
    /// An error (or any JSON) reply with this status.
    Status {
        /// HTTP status code.
        status: u16,
        /// JSON body.
        body: Value,
    },
    /// A 200 event stream made of these raw chunks (concatenated they are the wire bytes).
    Sse(Vec<String>),
    /// A 200 event stream that sends these chunks and then aborts the connection mid-body,
    /// without the end of the chunked encoding: the client sees a body read error.
    SseThenDrop {
        /// Raw chunks sent before the connection is dropped.
        chunks: Vec<String>,
    },
    /// Accept the request and never answer (no status line, no headers), for timeout tests.
    Hang,
    /// Like [`Step::Sse`], with `delay` between consecutive chunks.
    SlowSse {
        /// Raw chunks.
        chunks: Vec<String>,
        /// Pause between two chunks (not before the first one).
        delay: Duration,
    },
    /// A non-streamed `chat.completion` of one token (`finish_reason: "length"`) whose
    /// `usage.prompt_tokens` is the [`toy_tokenizer`]'s count of the request: what a real server
    /// answers a `max_tokens: 1` request.
    OneTokenCompletion,
}

/// Which model server's tokenizer routes the replay upstream serves at its root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenizerRoutes {
    /// None: both answer 404, as on SGLang's OpenAI routes or a hosted API.
    #[default]
    None,
    /// vLLM: `POST /tokenize` with `messages` (and `tools`) → `{"count", "max_model_len", "tokens"}`.
    Vllm,
    /// llama.cpp: `POST /apply-template` → `{"prompt"}`; `POST /tokenize` with `content` →
    /// `{"tokens"}` (`{"tokens": []}` without `content`, as llama.cpp answers).
    LlamaCpp,
}

impl Step {
    /// Replays the cassette at `relative_path` inside `tests/fixtures/cassettes/`,
    /// e.g. `"chat_completion/text-single-stream.yaml"`.
    pub fn cassette(relative_path: impl AsRef<Path>) -> Step {
        Step::Cassette(cassettes_dir().join(relative_path))
    }

    /// A recorded tool-call stream (`relative_path`, e.g. the vLLM code interpreter step) with its
    /// call renamed to `name` and its argument fragments replaced by `arguments` (sent as the
    /// first fragment; the recorded later fragments are dropped). Every other chunk — role,
    /// reasoning, `finish_reason: "tool_calls"`, usage, `[DONE]` — is replayed as recorded, so a
    /// client-side tool (Codex's `exec_command`) is called the way a real server calls one.
    pub fn recorded_tool_call(relative_path: impl AsRef<Path>, name: &str, arguments: &str) -> anyhow::Result<Step> {
        let cassette = Cassette::load(cassettes_dir().join(relative_path))?;
        let ResponsePayload::Sse(chunks) = cassette.response.payload else {
            anyhow::bail!("the cassette is not a streamed reply");
        };
        let mut out = Vec::with_capacity(chunks.len());
        let mut arguments_sent = false;
        for chunk in chunks {
            let Some(mut event) =
                chunk.trim().strip_prefix("data: ").and_then(|d| serde_json::from_str::<Value>(d).ok())
            else {
                out.push(chunk);
                continue;
            };
            let Some(call) = event.pointer_mut("/choices/0/delta/tool_calls/0/function") else {
                out.push(chunk);
                continue;
            };
            if call.get("name").is_some_and(|n| !n.is_null()) {
                call["name"] = json!(name);
            } else if arguments_sent {
                continue;
            } else {
                call["arguments"] = json!(arguments);
                arguments_sent = true;
            }
            out.push(format!("data: {event}\n\n"));
        }
        anyhow::ensure!(arguments_sent, "the cassette has no tool-call argument fragments");
        Ok(Step::Sse(out))
    }

    /// A slow text answer: one content chunk per entry of `parts`, then `finish_reason: stop` and
    /// `data: [DONE]`, with `delay` between consecutive chunks (for tests that act mid-stream).
    pub fn slow_text(parts: &[String], delay: Duration) -> Step {
        let chunk = |text: &str, finish: Value| {
            format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{"content":text},"finish_reason":finish}]}))
        };
        let mut chunks: Vec<String> = parts.iter().map(|part| chunk(part, Value::Null)).collect();
        chunks.push(chunk("", json!("stop")));
        chunks.push("data: [DONE]\n\n".into());
        Step::SlowSse { chunks, delay }
    }

    /// A realistic OpenAI `chat.completion.chunk` stream: a role chunk, one chunk per entry of
    /// `text_chunks`, a chunk carrying `finish_reason`, optionally a `stream_options.include_usage`
    /// style usage chunk (`choices: []`, `usage: (prompt_tokens, completion_tokens)`), then `data: [DONE]`.
    pub fn text(text_chunks: &[&str], finish_reason: &str, usage: Option<(u64, u64)>) -> Step {
        let chunk = |choices: Value| {
            json!({
                "id": "chatcmpl-replay",
                "object": "chat.completion.chunk",
                "created": 1767868994,
                "model": "replay-model",
                "system_fingerprint": null,
                "choices": choices,
            })
        };
        let choice = |delta: Value, finish_reason: Value| {
            chunk(json!([{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }]))
        };
        let mut events = vec![choice(json!({"role": "assistant", "content": ""}), Value::Null)];
        events.extend(text_chunks.iter().map(|text| choice(json!({ "content": text }), Value::Null)));
        events.push(choice(json!({}), json!(finish_reason)));
        if let Some((prompt_tokens, completion_tokens)) = usage {
            let mut usage_chunk = chunk(json!([]));
            usage_chunk["usage"] = json!({
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            });
            events.push(usage_chunk);
        }
        let mut chunks: Vec<String> = events.iter().map(|event| format!("data: {event}\n\n")).collect();
        chunks.push("data: [DONE]\n\n".to_owned());
        Step::Sse(chunks)
    }
}

/// One request the replay upstream received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: Method,
    /// Request path (without query).
    pub path: String,
    /// Request headers as received.
    pub headers: HeaderMap,
    /// The JSON body; `Null` when empty, a JSON string holding the raw text when it is not JSON.
    pub body: Value,
    /// The body's `model` field, if any.
    pub model: Option<String>,
    /// Why the request could not be served as scripted (it was answered with 500 or 404), if so.
    pub replay_error: Option<String>,
}

/// A running replay server on `127.0.0.1`. It stops when dropped.
pub struct ReplayUpstream {
    address: SocketAddr,
    state: Arc<ReplayState>,
    server: JoinHandle<()>,
}

impl ReplayUpstream {
    /// Starts a replay server on a free port of `127.0.0.1`.
    pub async fn start() -> anyhow::Result<ReplayUpstream> {
        Self::start_on(0).await
    }

    /// Starts a replay server on `127.0.0.1:port` (`0` picks a free port).
    pub async fn start_on(port: u16) -> anyhow::Result<ReplayUpstream> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        let address = listener.local_addr()?;
        let state = Arc::new(ReplayState {
            scenarios: Mutex::new(BTreeMap::new()),
            requests: Mutex::new(Vec::new()),
            recording: AtomicBool::new(true),
            unfinished: Mutex::new(Vec::new()),
            tokenizer: Mutex::new(TokenizerRoutes::None),
            context_window: Mutex::new(None),
            embeddings: Mutex::new(EmbeddingBehaviour::default()),
        });
        let router = Router::new().fallback(handle_request).with_state(state.clone());
        let server = tokio::spawn(async move {
            // Serving only ends on an accept error; the handle is aborted on drop anyway.
            let _ = axum::serve(listener, router).await;
        });
        Ok(ReplayUpstream { address, state, server })
    }

    /// The OpenAI-style base URL to give the gateway: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// The port the server listens on.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Appends `steps` to the queue of scenario `name` (the `model` that selects it).
    pub fn add_scenario(&self, name: impl Into<String>, steps: Vec<Step>) {
        let mut scenarios = lock(&self.state.scenarios);
        match scenarios.entry(name.into()).or_insert_with(|| Scenario::Queue(VecDeque::new())) {
            Scenario::Queue(queue) => queue.extend(steps),
            repeating @ Scenario::Repeat(_) => *repeating = Scenario::Queue(steps.into()),
        }
    }

    /// Makes scenario `name` answer every request with `step`, forever (benchmarks, smoke runs).
    /// Replaces any queue of the same name.
    pub fn add_repeating_scenario(&self, name: impl Into<String>, step: Step) {
        lock(&self.state.scenarios).insert(name.into(), Scenario::Repeat(step));
    }

    /// How many queued steps scenario `name` has left (`0` for unknown or repeating scenarios).
    pub fn remaining_steps(&self, name: &str) -> usize {
        match lock(&self.state.scenarios).get(name) {
            Some(Scenario::Queue(queue)) => queue.len(),
            Some(Scenario::Repeat(_)) | None => 0,
        }
    }

    /// Serve these tokenizer routes (none by default).
    pub fn serve_tokenizer(&self, routes: TokenizerRoutes) {
        *lock(&self.state.tokenizer) = routes;
    }

    /// Give the model a context window of `tokens` (none by default): a chat completion whose
    /// [`toy_tokenizer`] prompt count is `tokens` or more is refused with vLLM's 400 body
    /// ("This model's maximum context length is … tokens. However, your request has … input
    /// tokens. …") and consumes no step.
    pub fn set_context_window(&self, tokens: Option<u64>) {
        *lock(&self.state.context_window) = tokens;
    }

    /// The length of the vectors `POST /v1/embeddings` answers with ([`embedding::DEFAULT_DIMENSIONS`]
    /// unless set).
    pub fn set_embedding_dimensions(&self, dimensions: usize) {
        lock(&self.state.embeddings).dimensions = dimensions;
    }

    /// Answer the next `count` embedding requests with HTTP `status` (e.g. 500 or 429) and an
    /// OpenAI-style error body instead of vectors.
    pub fn fail_embeddings(&self, count: usize, status: u16) {
        let mut embeddings = lock(&self.state.embeddings);
        embeddings.failures = count;
        embeddings.failure_status = status;
    }

    /// Wait `delay` before answering each embedding request (zero by default).
    pub fn set_embedding_delay(&self, delay: Duration) {
        lock(&self.state.embeddings).delay = delay;
    }

    /// The recorded `POST /v1/embeddings` requests, in arrival order (failed ones included).
    pub fn embedding_requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).iter().filter(|request| request.path == "/v1/embeddings").cloned().collect()
    }

    /// Turns request recording on (the default) or off; off keeps memory flat in long benchmark runs.
    pub fn set_recording(&self, enabled: bool) {
        self.state.recording.store(enabled, Ordering::Relaxed);
    }

    /// The recorded requests whose body `model` is `model`, in arrival order.
    pub fn requests(&self, model: &str) -> Vec<RecordedRequest> {
        lock(&self.state.requests).iter().filter(|request| request.model.as_deref() == Some(model)).cloned().collect()
    }

    /// Every recorded request, in arrival order.
    pub fn all_requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// How many streamed replies for `model` were dropped by the client (the gateway) before
    /// their last chunk was sent — for [`Step::SseThenDrop`], the replay's own drop counts too.
    pub fn unfinished_streams(&self, model: &str) -> usize {
        lock(&self.state.unfinished).iter().filter(|m| m.as_str() == model).count()
    }

    /// The replay errors met so far (unknown model, exhausted queue, unknown route, unreadable cassette).
    pub fn replay_errors(&self) -> Vec<String> {
        lock(&self.state.requests).iter().filter_map(|request| request.replay_error.clone()).collect()
    }
}

impl Drop for ReplayUpstream {
    fn drop(&mut self) {
        self.server.abort();
    }
}

enum Scenario {
    Queue(VecDeque<Step>),
    Repeat(Step),
}

struct ReplayState {
    scenarios: Mutex<BTreeMap<String, Scenario>>,
    requests: Mutex<Vec<RecordedRequest>>,
    recording: AtomicBool,
    /// Models of streamed replies that did not run to their end.
    unfinished: Mutex<Vec<String>>,
    /// The tokenizer routes served.
    tokenizer: Mutex<TokenizerRoutes>,
    /// The model's context window in tokens, when one is enforced.
    context_window: Mutex<Option<u64>>,
    /// How `POST /v1/embeddings` answers.
    embeddings: Mutex<EmbeddingBehaviour>,
}

/// How the embeddings route answers.
struct EmbeddingBehaviour {
    /// The vectors' length.
    dimensions: usize,
    /// Requests still to fail.
    failures: usize,
    /// The status they fail with.
    failure_status: u16,
    /// The pause before each answer.
    delay: Duration,
}

impl Default for EmbeddingBehaviour {
    fn default() -> Self {
        EmbeddingBehaviour {
            dimensions: embedding::DEFAULT_DIMENSIONS,
            failures: 0,
            failure_status: 500,
            delay: Duration::ZERO,
        }
    }
}

impl ReplayState {
    fn next_step(&self, model: Option<&str>) -> Result<Step, String> {
        let model = model.ok_or("request body has no string `model`")?;
        let mut scenarios = lock(&self.scenarios);
        match scenarios.get_mut(model) {
            None => Err(format!("no scenario for model `{model}`")),
            Some(Scenario::Repeat(step)) => Ok(step.clone()),
            Some(Scenario::Queue(queue)) => {
                queue.pop_front().ok_or_else(|| format!("scenario `{model}` has no steps left"))
            }
        }
    }

    fn model_list(&self) -> Value {
        let data: Vec<Value> = lock(&self.scenarios)
            .keys()
            .map(|name| json!({"id": name, "object": "model", "created": 0, "owned_by": "replay"}))
            .collect();
        json!({"object": "list", "data": data})
    }

    fn record(&self, request: RecordedRequest) {
        if self.recording.load(Ordering::Relaxed) {
            lock(&self.requests).push(request);
        }
    }
}

/// Locks a mutex, ignoring poisoning (a panicking test thread must not hide the recorded data).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What to send back, once the step is resolved.
enum Reply {
    Ready(Response),
    /// An embeddings answer, sent after its delay.
    Embeddings((Duration, Response)),
    Hang,
}

async fn handle_request(State(state): State<Arc<ReplayState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let raw_body = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let body = parse_body(&raw_body);
    let model = body.get("model").and_then(Value::as_str).map(str::to_owned);
    let path = parts.uri.path().to_owned();

    let window = *lock(&state.context_window);
    let routes = *lock(&state.tokenizer);
    let outcome = match (&parts.method, path.as_str()) {
        (&Method::POST, "/v1/chat/completions") if window.is_some_and(|w| toy_tokenizer::prompt_tokens(&body) >= w) => {
            Ok(Reply::Ready(context_window_exceeded(window.unwrap_or_default(), toy_tokenizer::prompt_tokens(&body))))
        }
        (&Method::POST, "/v1/chat/completions" | "/v1/completions") => state
            .next_step(model.as_deref())
            .and_then(|step| {
                render_step(&step, &body, EndWatch { state: state.clone(), model: model.clone(), ended: false })
            })
            .map_err(|reason| (StatusCode::INTERNAL_SERVER_ERROR, reason)),
        (&Method::POST, "/tokenize") if routes == TokenizerRoutes::Vllm => {
            Ok(Reply::Ready(vllm_tokenize(&body, window)))
        }
        (&Method::POST, "/tokenize") if routes == TokenizerRoutes::LlamaCpp => Ok(Reply::Ready(llama_tokenize(&body))),
        (&Method::POST, "/apply-template") if routes == TokenizerRoutes::LlamaCpp => {
            Ok(Reply::Ready(reply_json(json!({"prompt": toy_tokenizer::render(&body)}))))
        }
        (&Method::POST, "/v1/embeddings") => Ok(Reply::Embeddings(embeddings_reply(&state, &body))),
        (&Method::GET, "/v1/models") => {
            Ok(Reply::Ready((StatusCode::OK, axum::Json(state.model_list())).into_response()))
        }
        (method, path) => Err((StatusCode::NOT_FOUND, format!("no route for {method} {path}"))),
    };
    let outcome = outcome.map_err(|(status, reason)| (status, format!("replay: {reason}")));
    state.record(RecordedRequest {
        method: parts.method,
        path,
        headers: parts.headers,
        body,
        model,
        replay_error: outcome.as_ref().err().map(|(_, message)| message.clone()),
    });

    match outcome {
        Ok(Reply::Ready(response)) => response,
        Ok(Reply::Embeddings((delay, response))) => {
            tokio::time::sleep(delay).await;
            response
        }
        Ok(Reply::Hang) => std::future::pending().await,
        Err((status, message)) => (status, axum::Json(json!({"error": {"message": message}}))).into_response(),
    }
}

/// The answer to `POST /v1/embeddings` with this `body`, and how long to wait before sending it.
fn embeddings_reply(state: &ReplayState, body: &Value) -> (Duration, Response) {
    let (dimensions, delay, failure) = {
        let mut behaviour = lock(&state.embeddings);
        let failure = (behaviour.failures > 0).then_some(behaviour.failure_status);
        behaviour.failures = behaviour.failures.saturating_sub(1);
        (behaviour.dimensions, behaviour.delay, failure)
    };
    let error = |status: StatusCode, message: &str| {
        let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
        (status, axum::Json(body)).into_response()
    };
    if let Some(status) = failure {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return (delay, error(status, "replay: a scripted embedding failure"));
    }
    let Some(model) = body.get("model").and_then(Value::as_str) else {
        return (delay, error(StatusCode::BAD_REQUEST, "model: a string is required"));
    };
    let inputs: Vec<&str> = match body.get("input") {
        Some(Value::String(text)) => vec![text.as_str()],
        Some(Value::Array(items)) if !items.is_empty() => match items.iter().map(Value::as_str).collect() {
            Some(texts) => texts,
            None => return (delay, error(StatusCode::BAD_REQUEST, "input: only strings are embedded here")),
        },
        _ => return (delay, error(StatusCode::BAD_REQUEST, "input: a string or a non-empty array of strings")),
    };
    let base64 = match body.get("encoding_format").and_then(Value::as_str) {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return (delay, error(StatusCode::BAD_REQUEST, &format!("encoding_format: unknown format '{other}'")));
        }
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let vector = embedding::embed(text, dimensions);
            let encoded = if base64 {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(vector)
            };
            json!({"object": "embedding", "index": index, "embedding": encoded})
        })
        .collect();
    let tokens: usize = inputs.iter().map(|text| embedding::word_count(text)).sum();
    let reply = json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    });
    (delay, reply_json(reply))
}

/// vLLM's reply to a prompt of `prompt` tokens that does not fit a window of `window` tokens.
fn context_window_exceeded(window: u64, prompt: u64) -> Response {
    let message = format!(
        "This model's maximum context length is {window} tokens. However, your request has {prompt} input tokens. \
         Please reduce the length of the input messages."
    );
    let body = json!({"error": {"message": message, "type": "BadRequestError", "param": null, "code": 400}});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// vLLM's `POST /tokenize`: the chat template applied to `messages` (and `tools`), counted.
fn vllm_tokenize(body: &Value, window: Option<u64>) -> Response {
    if body.get("messages").and_then(Value::as_array).is_none() {
        let error = json!({"error": {"message": "messages: Field required", "type": "BadRequestError", "code": 400}});
        return (StatusCode::BAD_REQUEST, axum::Json(error)).into_response();
    }
    let ids = toy_tokenizer::token_ids(&toy_tokenizer::render(body));
    reply_json(json!({"count": ids.len(), "max_model_len": window.unwrap_or(32_768), "tokens": ids}))
}

/// llama.cpp's `POST /tokenize`: the tokens of `content` (none without it).
fn llama_tokenize(body: &Value) -> Response {
    let ids = body.get("content").and_then(Value::as_str).map(toy_tokenizer::token_ids).unwrap_or_default();
    reply_json(json!({"tokens": ids}))
}

/// What a server answers a non-streamed request for one token.
fn one_token_completion(body: &Value) -> Response {
    let prompt_tokens = toy_tokenizer::prompt_tokens(body);
    reply_json(json!({
        "id": "chatcmpl-replay",
        "object": "chat.completion",
        "created": 1767868994,
        "model": body.get("model").cloned().unwrap_or(Value::Null),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "The"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
    }))
}

fn reply_json(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn parse_body(raw: &Bytes) -> Value {
    if raw.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(raw).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(raw).into_owned()))
}

/// Notes a streamed reply that is dropped before its end (see [`ReplayUpstream::unfinished_streams`]).
struct EndWatch {
    state: Arc<ReplayState>,
    model: Option<String>,
    ended: bool,
}

impl Drop for EndWatch {
    fn drop(&mut self) {
        if !self.ended {
            lock(&self.state.unfinished).push(self.model.clone().unwrap_or_default());
        }
    }
}

/// The reply `step` makes to a chat request with this `body`.
fn render_step(step: &Step, body: &Value, mut watch: EndWatch) -> Result<Reply, String> {
    let response = match step {
        Step::Cassette(path) => {
            let cassette = Cassette::load(path).map_err(|e| format!("{e:#}"))?;
            let status = status_code(cassette.response.status)?;
            let content_type = cassette.content_type().map(str::to_owned);
            match cassette.response.payload {
                ResponsePayload::Sse(chunks) => stream_response(
                    status,
                    content_type.as_deref().unwrap_or(SSE_CONTENT_TYPE),
                    chunk_body(chunks, Duration::ZERO, false, watch),
                ),
                ResponsePayload::Json(body) => {
                    watch.ended = true;
                    json_response(status, content_type.as_deref().unwrap_or("application/json"), &body)
                }
            }
        }
        Step::Status { status, body } => {
            watch.ended = true;
            json_response(status_code(*status)?, "application/json", body)
        }
        Step::Sse(chunks) => {
            stream_response(StatusCode::OK, SSE_CONTENT_TYPE, chunk_body(chunks.clone(), Duration::ZERO, false, watch))
        }
        Step::SseThenDrop { chunks } => {
            stream_response(StatusCode::OK, SSE_CONTENT_TYPE, chunk_body(chunks.clone(), Duration::ZERO, true, watch))
        }
        Step::SlowSse { chunks, delay } => {
            stream_response(StatusCode::OK, SSE_CONTENT_TYPE, chunk_body(chunks.clone(), *delay, false, watch))
        }
        Step::Hang => {
            watch.ended = true;
            return Ok(Reply::Hang);
        }
        Step::OneTokenCompletion => {
            watch.ended = true;
            one_token_completion(body)
        }
    };
    Ok(Reply::Ready(response))
}

fn status_code(status: u16) -> Result<StatusCode, String> {
    StatusCode::from_u16(status).map_err(|_| format!("invalid HTTP status {status}"))
}

fn json_response(status: StatusCode, content_type: &str, body: &Value) -> Response {
    stream_response(status, content_type, Body::from(body.to_string()))
}

fn stream_response(status: StatusCode, content_type: &str, body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let content_type =
        HeaderValue::from_str(content_type).unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}

/// A body that sends each chunk as its own write (the stream yields to the runtime before every
/// chunk, so hyper flushes what it has), pausing `delay` between chunks, and optionally ending
/// with an error, which makes hyper abort the connection mid-body. `watch` is marked ended after
/// the last chunk; dropped earlier (hyper drops the body when the peer goes away), it counts the
/// stream as unfinished.
fn chunk_body(chunks: Vec<String>, delay: Duration, then_drop: bool, watch: EndWatch) -> Body {
    let chunks = stream::iter(chunks.into_iter().enumerate()).then(move |(index, chunk)| async move {
        if index > 0 && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        } else {
            tokio::task::yield_now().await;
        }
        Ok::<_, io::Error>(Bytes::from(chunk))
    });
    let abort = stream::iter(then_drop.then_some(())).then(|()| async {
        // Give hyper time to flush the chunks: it drops unflushed data when the body fails.
        tokio::time::sleep(DROP_FLUSH_DELAY).await;
        Err(io::Error::other("replay: dropping the connection on purpose"))
    });
    let end = stream::once(async move {
        // Bind the whole guard: the block must own it, not just copy its `ended` field.
        let mut watch = watch;
        watch.ended = true;
    })
    .filter_map(|()| async { None::<Result<Bytes, io::Error>> });
    Body::from_stream(chunks.chain(end).chain(abort))
}

/// Pause before [`Step::SseThenDrop`] aborts the connection.
const DROP_FLUSH_DELAY: Duration = Duration::from_millis(50);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::http_client;

    async fn post_chat(upstream: &ReplayUpstream, body: Value) -> reqwest::Response {
        http_client()
            .post(format!("{}/chat/completions", upstream.base_url()))
            .header("authorization", "Bearer test-key")
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn replays_a_cassette_stream_byte_for_byte() {
        let upstream = ReplayUpstream::start().await.unwrap();
        let step = Step::cassette("chat_completion/text-single-stream.yaml");
        let Step::Cassette(path) = &step else { unreachable!() };
        let expected = Cassette::load(path).unwrap().sse_bytes().unwrap();
        upstream.add_scenario("paris", vec![step]);

        let response = post_chat(&upstream, json!({"model": "paris", "stream": true})).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream; charset=utf-8");
        let mut received = Vec::new();
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            received.extend_from_slice(&chunk.unwrap());
        }
        assert_eq!(String::from_utf8(received).unwrap(), String::from_utf8(expected).unwrap());
        assert_eq!(upstream.remaining_steps("paris"), 0);
    }

    #[tokio::test]
    async fn replays_a_cassette_json_error() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.add_scenario("missing", vec![Step::cassette("chat_completion/model-not-found-stream.yaml")]);
        let response = post_chat(&upstream, json!({"model": "missing", "stream": true})).await;
        assert_eq!(response.status(), 404);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], "The model `MiniMaxAI/MiniMax-M2.1` does not exist.");
    }

    #[tokio::test]
    async fn steps_are_consumed_in_order_then_exhausted() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.add_scenario(
            "loop",
            vec![
                Step::Status { status: 429, body: json!({"error": {"message": "slow down"}}) },
                Step::text(&["Hel", "lo"], "stop", Some((7, 2))),
            ],
        );

        let first = post_chat(&upstream, json!({"model": "loop"})).await;
        assert_eq!(first.status(), 429);
        assert_eq!(first.json::<Value>().await.unwrap()["error"]["message"], "slow down");

        let second = post_chat(&upstream, json!({"model": "loop"})).await;
        assert_eq!(second.status(), 200);
        let text = second.text().await.unwrap();
        let events = crate::sse::parse_sse(&text).unwrap();
        let data: Vec<&str> = events.iter().map(|event| event.data.as_str()).collect();
        assert_eq!(data.len(), 6);
        assert!(data[0].contains(r#""delta":{"role":"assistant","content":""}"#));
        assert!(data[1].contains(r#""delta":{"content":"Hel"}"#));
        assert!(data[3].contains(r#""finish_reason":"stop""#));
        assert!(data[4].contains(r#""choices":[]"#));
        assert!(data[4].contains(r#""total_tokens":9"#));
        assert_eq!(data[5], "[DONE]");

        let third = post_chat(&upstream, json!({"model": "loop"})).await;
        assert_eq!(third.status(), 500);
        let error = third.json::<Value>().await.unwrap();
        assert_eq!(error["error"]["message"], "replay: scenario `loop` has no steps left");
        assert_eq!(upstream.replay_errors(), vec!["replay: scenario `loop` has no steps left"]);
    }

    #[tokio::test]
    async fn unknown_model_is_a_500_replay_error() {
        let upstream = ReplayUpstream::start().await.unwrap();
        let response = post_chat(&upstream, json!({"model": "nobody"})).await;
        assert_eq!(response.status(), 500);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["message"], "replay: no scenario for model `nobody`");
        let recorded = upstream.requests("nobody");
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].replay_error.as_deref(), Some("replay: no scenario for model `nobody`"));
    }

    #[tokio::test]
    async fn sse_then_drop_fails_the_body_after_the_chunks() {
        let upstream = ReplayUpstream::start().await.unwrap();
        let first_chunk = "data: {\"choices\":[]}\n\n";
        upstream.add_scenario("flaky", vec![Step::SseThenDrop { chunks: vec![first_chunk.to_owned()] }]);
        let response = post_chat(&upstream, json!({"model": "flaky"})).await;
        assert_eq!(response.status(), 200);
        let mut body = response.bytes_stream();
        let mut received = Vec::new();
        let error = loop {
            match body.next().await {
                Some(Ok(chunk)) => received.extend_from_slice(&chunk),
                Some(Err(error)) => break error,
                None => panic!("the body ended cleanly"),
            }
        };
        assert_eq!(received, first_chunk.as_bytes());
        assert!(error.is_body() || error.is_decode(), "{error:?}");
    }

    #[tokio::test]
    async fn slow_sse_paces_the_chunks() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.add_scenario(
            "slow",
            vec![Step::SlowSse {
                chunks: vec!["data: 1\n\n".into(), "data: 2\n\n".into()],
                delay: Duration::from_millis(150),
            }],
        );
        let started = std::time::Instant::now();
        let text = post_chat(&upstream, json!({"model": "slow"})).await.text().await.unwrap();
        assert_eq!(text, "data: 1\n\ndata: 2\n\n");
        assert!(started.elapsed() >= Duration::from_millis(150));
    }

    #[tokio::test]
    async fn a_stream_the_client_drops_is_counted_as_unfinished() {
        let upstream = ReplayUpstream::start().await.unwrap();
        let chunks: Vec<String> = (0..50).map(|i| format!("data: {i}\n\n")).collect();
        upstream.add_scenario(
            "slow",
            vec![
                Step::SlowSse { chunks: chunks.clone(), delay: Duration::from_millis(50) },
                Step::SlowSse { chunks: chunks[..2].to_vec(), delay: Duration::from_millis(1) },
            ],
        );
        let mut response = post_chat(&upstream, json!({"model": "slow"})).await;
        assert!(response.chunk().await.unwrap().is_some());
        drop(response);
        for _ in 0..100 {
            if upstream.unfinished_streams("slow") == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(upstream.unfinished_streams("slow"), 1);
        // A stream read to its end is not counted.
        post_chat(&upstream, json!({"model": "slow"})).await.text().await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(upstream.unfinished_streams("slow"), 1);
    }

    #[tokio::test]
    async fn hang_never_answers() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.add_scenario("stuck", vec![Step::Hang]);
        let request = post_chat(&upstream, json!({"model": "stuck"}));
        let waited = tokio::time::timeout(Duration::from_millis(300), request).await;
        assert!(waited.is_err(), "a hanging step answered");
        assert_eq!(upstream.requests("stuck").len(), 1);
    }

    async fn post_root(upstream: &ReplayUpstream, path: &str, body: Value) -> (u16, Value) {
        let response =
            http_client().post(format!("http://127.0.0.1:{}{path}", upstream.port())).json(&body).send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    #[tokio::test]
    async fn tokenizer_routes_count_with_the_toy_template() {
        let upstream = ReplayUpstream::start().await.unwrap();
        let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Hello, world!"}]});
        let expected = toy_tokenizer::prompt_tokens(&chat);
        assert_eq!(post_root(&upstream, "/tokenize", chat.clone()).await.0, 404);

        upstream.serve_tokenizer(TokenizerRoutes::Vllm);
        let (status, body) = post_root(&upstream, "/tokenize", chat.clone()).await;
        assert_eq!((status, body["count"].as_u64()), (200, Some(expected)));
        assert_eq!(post_root(&upstream, "/apply-template", chat.clone()).await.0, 404);

        upstream.serve_tokenizer(TokenizerRoutes::LlamaCpp);
        // llama.cpp answers a body without `content` with no tokens.
        assert_eq!(post_root(&upstream, "/tokenize", chat.clone()).await.1, json!({"tokens": []}));
        let (_, template) = post_root(&upstream, "/apply-template", chat.clone()).await;
        let (_, tokens) = post_root(&upstream, "/tokenize", json!({"content": template["prompt"]})).await;
        assert_eq!(tokens["tokens"].as_array().map(Vec::len), Some(expected as usize));
    }

    #[tokio::test]
    async fn a_context_window_refuses_long_prompts_without_using_a_step() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.add_scenario("m", vec![Step::OneTokenCompletion]);
        let short = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let long = json!({"model": "m", "messages": [{"role": "user", "content": "a ".repeat(50)}]});
        let window = toy_tokenizer::prompt_tokens(&short) + 1;
        upstream.set_context_window(Some(window));

        let refused = post_chat(&upstream, long.clone()).await;
        assert_eq!(refused.status(), 400);
        let error: Value = refused.json().await.unwrap();
        let expected = format!(
            "This model's maximum context length is {window} tokens. However, your request has {} input tokens. \
             Please reduce the length of the input messages.",
            toy_tokenizer::prompt_tokens(&long)
        );
        assert_eq!(error["error"]["message"], expected);
        assert_eq!(upstream.remaining_steps("m"), 1);

        let answer: Value = post_chat(&upstream, short.clone()).await.json().await.unwrap();
        assert_eq!(answer["usage"]["prompt_tokens"].as_u64(), Some(window - 1));
        assert_eq!(answer["choices"][0]["finish_reason"], "length");
    }

    #[tokio::test]
    async fn records_requests_and_lists_models() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.add_scenario("a", vec![Step::text(&["x"], "stop", None)]);
        upstream.add_repeating_scenario("b", Step::text(&["y"], "stop", None));

        let body = json!({"model": "a", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        post_chat(&upstream, body.clone()).await.text().await.unwrap();
        for _ in 0..2 {
            let response = post_chat(&upstream, json!({"model": "b"})).await;
            assert_eq!(response.status(), 200);
        }

        let recorded = upstream.requests("a");
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].body, body);
        assert_eq!(recorded[0].method, Method::POST);
        assert_eq!(recorded[0].path, "/v1/chat/completions");
        assert_eq!(recorded[0].headers["authorization"], "Bearer test-key");
        assert!(recorded[0].replay_error.is_none());
        assert_eq!(upstream.requests("b").len(), 2);

        let models: Value =
            http_client().get(format!("{}/models", upstream.base_url())).send().await.unwrap().json().await.unwrap();
        assert_eq!(
            models,
            json!({"object": "list", "data": [
                {"id": "a", "object": "model", "created": 0, "owned_by": "replay"},
                {"id": "b", "object": "model", "created": 0, "owned_by": "replay"},
            ]})
        );

        let missing = http_client().post(format!("{}/audio/speech", upstream.base_url())).send().await.unwrap();
        assert_eq!(missing.status(), 404);
        assert_eq!(upstream.all_requests().len(), 5);
        assert_eq!(upstream.replay_errors(), vec!["replay: no route for POST /v1/audio/speech"]);
    }

    async fn post_embeddings(upstream: &ReplayUpstream, body: Value) -> (u16, Value) {
        let response = http_client()
            .post(format!("{}/embeddings", upstream.base_url()))
            .header("authorization", "Bearer embed-key")
            .json(&body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }

    #[tokio::test]
    async fn embeddings_are_bag_of_words_vectors_and_recorded() {
        let upstream = ReplayUpstream::start().await.unwrap();
        let (status, body) =
            post_embeddings(&upstream, json!({"model": "embed", "input": ["reset the password", "bananas"]})).await;
        assert_eq!(status, 200);
        assert_eq!(body["object"], "list");
        assert_eq!(body["model"], "embed");
        assert_eq!(body["usage"]["prompt_tokens"], 4);
        let data = body["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        assert_eq!((data[1]["object"].as_str(), data[1]["index"].as_u64()), (Some("embedding"), Some(1)));
        let first: Vec<f32> = serde_json::from_value(data[0]["embedding"].clone()).unwrap();
        assert_eq!(first, embedding::embed("reset the password", embedding::DEFAULT_DIMENSIONS));

        let recorded = upstream.embedding_requests();
        assert_eq!(recorded.len(), 1);
        assert_eq!(recorded[0].model.as_deref(), Some("embed"));
        assert_eq!(recorded[0].headers["authorization"], "Bearer embed-key");
        assert_eq!(recorded[0].body["input"].as_array().map(Vec::len), Some(2));
        assert!(upstream.replay_errors().is_empty());
    }

    #[tokio::test]
    async fn embeddings_take_a_dimension_and_base64() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.set_embedding_dimensions(16);
        let (status, body) =
            post_embeddings(&upstream, json!({"model": "e", "input": "one text", "encoding_format": "base64"})).await;
        assert_eq!(status, 200);
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(body["data"][0]["embedding"].as_str().unwrap()).unwrap();
        let vector: Vec<f32> = bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        assert_eq!(vector, embedding::embed("one text", 16));
        assert_eq!(post_embeddings(&upstream, json!({"model": "e", "input": []})).await.0, 400);
        assert_eq!(post_embeddings(&upstream, json!({"input": "x"})).await.0, 400);
    }

    #[tokio::test]
    async fn embeddings_fail_on_demand_then_recover() {
        let upstream = ReplayUpstream::start().await.unwrap();
        upstream.fail_embeddings(2, 429);
        let request = json!({"model": "e", "input": "x"});
        assert_eq!(post_embeddings(&upstream, request.clone()).await.0, 429);
        assert_eq!(post_embeddings(&upstream, request.clone()).await.0, 429);
        assert_eq!(post_embeddings(&upstream, request.clone()).await.0, 200);
        assert_eq!(upstream.embedding_requests().len(), 3);

        upstream.set_embedding_delay(Duration::from_millis(150));
        let started = std::time::Instant::now();
        assert_eq!(post_embeddings(&upstream, request).await.0, 200);
        assert!(started.elapsed() >= Duration::from_millis(150));
    }
}
