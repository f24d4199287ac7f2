//! A fast mock of an OpenAI-compatible model server, served by axum on `127.0.0.1:0`.
//!
//! `POST /v1/chat/completions` always answers a `chat.completion.chunk` event stream shaped like
//! OpenAI's: a role chunk, content delta chunks, a chunk carrying `finish_reason`, a usage chunk
//! (`choices: []`, as with `stream_options.include_usage`) and `data: [DONE]`. The request's
//! `model` picks the reply:
//!
//! - `bench-K`: K content deltas, all written as fast as the connection takes them. The frames of
//!   one K are built once and shared, so the mock costs as little CPU as possible.
//! - `hold`: the role chunk and one delta, then the stream stays open until
//!   [`MockUpstream::release`] is called (or [`MockUpstream`]'s hold limit passes), then the rest;
//!   [`MockUpstream::arm`] makes later ones wait again.
//! - anything else: as `bench-1`.
//!
//! `GET /v1/models` lists `bench-1` and `hold`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use bytes::{Bytes, BytesMut};
use futures::{StreamExt, stream};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The model name that makes the mock hold its stream open.
pub const HOLD_MODEL: &str = "hold";

/// Words the content deltas cycle through (one "token" each).
const WORDS: [&str; 16] = [
    " The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ",", " and", " then", " it",
    " rests", " again", ".",
];

/// The model name asking for `deltas` content chunks.
pub fn model_for(deltas: usize) -> String {
    format!("bench-{deltas}")
}

/// A running mock upstream; stops when dropped.
pub struct MockUpstream {
    addr: SocketAddr,
    state: Arc<MockState>,
    task: JoinHandle<()>,
}

struct MockState {
    /// Pre-built frames per delta count.
    frames: Mutex<HashMap<usize, Arc<Vec<Bytes>>>>,
    /// `true` once held streams may finish.
    release: watch::Sender<bool>,
    /// Longest a held stream waits for the release.
    hold_limit: Duration,
    /// Held streams currently waiting.
    holding: AtomicUsize,
}

#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default)]
    model: String,
}

impl MockUpstream {
    /// Bind `127.0.0.1:0` and serve until dropped. Held streams give up waiting after `hold_limit`.
    pub async fn start(hold_limit: Duration) -> anyhow::Result<Self> {
        let (release, _) = watch::channel(false);
        let state = Arc::new(MockState {
            frames: Mutex::new(HashMap::new()),
            release,
            hold_limit,
            holding: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat_completions))
            .route("/v1/models", get(models))
            .with_state(Arc::clone(&state));
        let listener =
            tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.context("mock upstream: cannot bind 127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let listener = listener.tap_io(|tcp| {
            // Best effort: a socket without TCP_NODELAY only makes the baseline slower.
            let _ = tcp.set_nodelay(true);
        });
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                eprintln!("mock upstream stopped: {e}");
            }
        });
        Ok(MockUpstream { addr, state, task })
    }

    /// Base URL including `/v1`, as respgw's `--upstream` wants it.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Let every held stream (and any later `hold` request) finish.
    pub fn release(&self) {
        self.state.release.send_replace(true);
    }

    /// Make later `hold` requests wait again, until the next [`MockUpstream::release`].
    pub fn arm(&self) {
        self.state.release.send_replace(false);
    }

    /// Held streams still waiting for the release.
    pub fn holding(&self) -> usize {
        self.state.holding.load(Ordering::Relaxed)
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MockState {
    /// The frames of a `deltas`-chunk reply, built on first use.
    fn frames(&self, deltas: usize) -> Arc<Vec<Bytes>> {
        let mut cache = self.frames.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(cache.entry(deltas).or_insert_with(|| Arc::new(build_frames(&model_for(deltas), deltas))))
    }
}

/// One `data:` frame.
fn frame(value: &serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// A chunk object with one choice.
fn chunk(model: &str, delta: serde_json::Value, finish_reason: Option<&str>) -> serde_json::Value {
    json!({
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "system_fingerprint": null,
        "choices": [{
            "index": 0,
            "delta": delta,
            "logprobs": null,
            "finish_reason": finish_reason,
        }],
    })
}

/// A content delta chunk. The direct-baseline client counts frames containing
/// `"delta":{"content":"` (the role chunk's delta starts with `"role"`).
fn content_chunk(model: &str, i: usize) -> Bytes {
    frame(&chunk(model, json!({"content": WORDS[i % WORDS.len()]}), None))
}

/// Every frame of a reply with `deltas` content chunks, in wire order.
pub fn build_frames(model: &str, deltas: usize) -> Vec<Bytes> {
    let mut frames = Vec::with_capacity(deltas + 4);
    frames.push(frame(&chunk(model, json!({"role": "assistant", "content": ""}), None)));
    frames.extend((0..deltas).map(|i| content_chunk(model, i)));
    frames.extend(closing_frames(model, deltas));
    frames
}

/// The finish chunk, the usage chunk and `[DONE]`.
fn closing_frames(model: &str, completion_tokens: usize) -> [Bytes; 3] {
    [
        frame(&chunk(model, json!({}), Some("stop"))),
        frame(&json!({
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [],
            "usage": {
                "prompt_tokens": 12,
                "completion_tokens": completion_tokens,
                "total_tokens": 12 + completion_tokens,
            },
        })),
        Bytes::from_static(b"data: [DONE]\n\n"),
    ]
}

fn event_stream(body: Body) -> Response {
    ([(CONTENT_TYPE, "text/event-stream; charset=utf-8")], body).into_response()
}

/// `POST /v1/chat/completions`.
async fn chat_completions(State(state): State<Arc<MockState>>, body: Bytes) -> Response {
    let model = serde_json::from_slice::<ChatRequest>(&body).map(|r| r.model).unwrap_or_default();
    if model == HOLD_MODEL {
        return event_stream(held_body(state));
    }
    let deltas = model.strip_prefix("bench-").and_then(|k| k.parse::<usize>().ok()).unwrap_or(1);
    let frames = state.frames(deltas);
    let chunks = (0..frames.len()).map(move |i| Ok::<_, Infallible>(frames[i].clone()));
    event_stream(Body::from_stream(stream::iter(chunks)))
}

/// The body of a `hold` reply: role chunk and one delta now, the rest after the release.
fn held_body(state: Arc<MockState>) -> Body {
    let [head, rest] = held_frames();
    let mut release = state.release.subscribe();
    let tail = stream::once(async move {
        state.holding.fetch_add(1, Ordering::Relaxed);
        // A closed channel or the time limit both end the wait; the stream finishes either way.
        let _ = tokio::time::timeout(state.hold_limit, release.wait_for(|released| *released)).await;
        state.holding.fetch_sub(1, Ordering::Relaxed);
        Ok::<_, Infallible>(rest)
    });
    Body::from_stream(stream::once(async move { Ok(head) }).chain(tail))
}

/// The two parts of a `hold` reply: what is sent at once (role chunk and one delta) and what is
/// sent after the release (one more delta, the closing frames).
pub fn held_frames() -> [Bytes; 2] {
    let mut head = BytesMut::new();
    head.extend_from_slice(&frame(&chunk(HOLD_MODEL, json!({"role": "assistant", "content": ""}), None)));
    head.extend_from_slice(&content_chunk(HOLD_MODEL, 0));
    let mut tail = BytesMut::new();
    tail.extend_from_slice(&content_chunk(HOLD_MODEL, 1));
    for f in closing_frames(HOLD_MODEL, 2) {
        tail.extend_from_slice(&f);
    }
    [head.freeze(), tail.freeze()]
}

/// `GET /v1/models`.
async fn models() -> Response {
    axum::Json(models_json()).into_response()
}

/// The model list.
pub fn models_json() -> serde_json::Value {
    json!({
        "object": "list",
        "data": [
            {"id": model_for(1), "object": "model", "created": 1_700_000_000, "owned_by": "bench"},
            {"id": HOLD_MODEL, "object": "model", "created": 1_700_000_000, "owned_by": "bench"},
        ],
    })
}
