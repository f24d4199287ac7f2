//! The bare proxy floor: `respgw-bench --serve-floor-proxy --floor-upstream <base URL incl. /v1>`,
//! a process of its own started through [`Gateway::start_floor`](crate::gateway::Gateway::start_floor).
//!
//! It is the least any Responses gateway on respgw's stack must do, and nothing more: an axum
//! server on one current-thread tokio runtime (as each respgw worker), `POST /v1/responses` read
//! as bytes and parsed into a `serde_json::Value`, one chat-completions stream request through a
//! pooled `reqwest::Client`, every upstream event split out and parsed into a struct holding only
//! the delta's text, and Responses output: a small JSON body, or `response.output_text.delta`
//! events streamed as the upstream chunks arrive (batched into writes as respgw's are) and
//! `response.completed` at the end. No validation, ids, store, metrics, logging or timeouts.
//!
//! The bench measures it exactly as it measures respgw (CPU and RSS of its process tree from
//! `/proc`) and prints its figures as the baseline of respgw's CPU and memory rows: what the
//! stack itself costs (connections, HTTP framing, JSON, the runtime), against which respgw's own
//! logic is the difference.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use bytes::Bytes;
use futures::{FutureExt, Stream, StreamExt, stream};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::sse::FrameSplitter;

/// Idle upstream connections kept per host: respgw's default `--upstream-max-idle-connections`.
const MAX_IDLE_CONNECTIONS: usize = 32;

/// What the handler shares.
struct Floor {
    /// The one pooled upstream client.
    client: reqwest::Client,
    /// `<upstream>/chat/completions`, parsed once.
    chat_url: reqwest::Url,
}

/// Entry point of `respgw-bench --serve-floor-proxy`: serve on `127.0.0.1:0` until killed.
pub fn serve_main(upstream: &str) -> ExitCode {
    match serve(upstream) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("floor proxy: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(upstream: &str) -> anyhow::Result<()> {
    // reqwest is built with `rustls-no-provider`: building a client needs a process-wide crypto
    // provider even for plain-HTTP use.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let chat_url = format!("{}/chat/completions", upstream.trim_end_matches('/'));
    let chat_url = reqwest::Url::parse(&chat_url).with_context(|| format!("bad --floor-upstream {upstream:?}"))?;
    // As respgw's upstream client, less its timeouts.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(MAX_IDLE_CONNECTIONS)
        .no_proxy()
        .build()
        .context("cannot build the upstream client")?;
    let app = Router::new().route("/v1/responses", post(responses)).with_state(Arc::new(Floor { client, chat_url }));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.context("cannot bind 127.0.0.1:0")?;
        println!("listening on http://{}", listener.local_addr()?);
        let listener = listener.tap_io(|tcp| {
            // respgw sets it too; without it only the floor's latency suffers.
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await.context("the server stopped")
    })
}

/// `POST /v1/responses`. Any failure is a 502 carrying the reason.
async fn responses(State(floor): State<Arc<Floor>>, body: Bytes) -> Response {
    match respond(&floor, &body).await {
        Ok(response) => response,
        Err(e) => (StatusCode::BAD_GATEWAY, format!("{e:#}")).into_response(),
    }
}

async fn respond(floor: &Floor, body: &[u8]) -> anyhow::Result<Response> {
    let request: Value = serde_json::from_slice(body).context("the request body is not JSON")?;
    let model = request["model"].as_str().context("`model` is not a string")?.to_owned();
    let input = request["input"].as_str().context("`input` is not a string")?;
    let stream = request["stream"].as_bool().unwrap_or(false);
    let chat = json!({
        "model": model,
        "messages": [{"role": "user", "content": input}],
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let upstream = floor.client.post(floor.chat_url.clone()).json(&chat).send().await?;
    let status = upstream.status();
    if !status.is_success() {
        bail!("upstream answered {status}");
    }
    let chunks = upstream_chunks(upstream.bytes_stream());
    if stream {
        let events = events(chunks, model);
        Ok(([(CONTENT_TYPE, "text/event-stream")], Body::from_stream(events)).into_response())
    } else {
        let text = whole_text(chunks).await?;
        Ok(([(CONTENT_TYPE, "application/json")], Body::from(response_json(&model, &text))).into_response())
    }
}

/// One upstream event, as far as the floor cares.
#[derive(Debug, PartialEq, Eq)]
enum Chunk {
    /// A non-empty content delta.
    Delta(String),
    /// `data: [DONE]`.
    Done,
    /// Anything else (role, finish reason, usage).
    Other,
}

/// What one upstream SSE frame says: its `data:` line parsed as far as the delta's text.
fn chunk_of(frame: &[u8]) -> anyhow::Result<Chunk> {
    let Some(data) = frame.split(|&b| b == b'\n').find_map(|line| line.strip_prefix(b"data:")) else {
        return Ok(Chunk::Other);
    };
    let data = data.strip_prefix(b" ").unwrap_or(data);
    if data == b"[DONE]" {
        return Ok(Chunk::Done);
    }
    let event: ChatChunk = serde_json::from_slice(data).context("an upstream event is not a chat chunk")?;
    Ok(match event.choices.into_iter().next().and_then(|c| c.delta.content) {
        Some(content) if !content.is_empty() => Chunk::Delta(content),
        _ => Chunk::Other,
    })
}

/// The part of a chat-completions chunk the floor reads; serde skips the rest.
#[derive(Deserialize)]
struct ChatChunk {
    #[serde(default)]
    choices: Vec<ChatChoice>,
}

#[derive(Deserialize)]
struct ChatChoice {
    #[serde(default)]
    delta: ChatDelta,
}

#[derive(Default, Deserialize)]
struct ChatDelta {
    content: Option<String>,
}

/// The upstream body as batches of events: one batch per body chunk read, up to `[DONE]`
/// (which ends the stream; a body that ends before it is an error).
fn upstream_chunks(
    body: impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
) -> impl Stream<Item = anyhow::Result<Vec<Chunk>>> + Send + Unpin + 'static {
    let state = Some((Box::pin(body), FrameSplitter::default()));
    Box::pin(stream::unfold(state, |state| async move {
        let (mut body, mut splitter) = state?;
        let bytes = match body.next().await {
            Some(Ok(bytes)) => bytes,
            Some(Err(e)) => return Some((Err(e.into()), None)),
            None => return Some((Err(anyhow::anyhow!("the upstream stream ended before [DONE]")), None)),
        };
        let mut batch = Vec::new();
        let mut failed = None;
        splitter.feed(&bytes, |frame| {
            if failed.is_some() || batch.last() == Some(&Chunk::Done) {
                return;
            }
            match chunk_of(frame) {
                Ok(chunk) => batch.push(chunk),
                Err(e) => failed = Some(e),
            }
        });
        if let Some(e) = failed {
            return Some((Err(e), None));
        }
        let done = batch.last() == Some(&Chunk::Done);
        Some((Ok(batch), (!done).then_some((body, splitter))))
    }))
}

/// The content deltas joined.
async fn whole_text(mut chunks: impl Stream<Item = anyhow::Result<Vec<Chunk>>> + Unpin) -> anyhow::Result<String> {
    let mut text = String::new();
    while let Some(batch) = chunks.next().await {
        for chunk in batch? {
            if let Chunk::Delta(delta) = chunk {
                text.push_str(&delta);
            }
        }
    }
    Ok(text)
}

/// The `response` object: completed, one assistant message with `text`.
fn response_value(model: &str, text: &str) -> Value {
    json!({
        "id": "resp_floor",
        "object": "response",
        "status": "completed",
        "model": model,
        "output": [{
            "type": "message",
            "id": "msg_floor",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }],
    })
}

/// The non-stream reply body.
fn response_json(model: &str, text: &str) -> Vec<u8> {
    response_value(model, text).to_string().into_bytes()
}

/// `response.output_text.delta`'s data.
#[derive(Serialize)]
struct DeltaEvent<'a> {
    r#type: &'static str,
    item_id: &'static str,
    output_index: u32,
    content_index: u32,
    delta: &'a str,
    sequence_number: u64,
}

/// Stop batching waiting events once a body chunk is this large.
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// Scheduler turns in a row that brought no upstream data before a body chunk goes out.
const IDLE_YIELDS: u32 = 2;

/// What [`events`] carries from one body chunk to the next.
struct EventState<S> {
    chunks: S,
    model: String,
    /// The text so far, for `response.completed`.
    text: String,
    sequence_number: u64,
}

impl<S: Stream<Item = anyhow::Result<Vec<Chunk>>> + Unpin> EventState<S> {
    /// Frame a batch's content deltas into `out`.
    fn frame(&mut self, batch: Vec<Chunk>, out: &mut Vec<u8>) {
        for chunk in batch {
            if let Chunk::Delta(delta) = chunk {
                self.sequence_number += 1;
                write_delta_event(out, &delta, self.sequence_number);
                self.text.push_str(&delta);
            }
        }
    }

    /// The next body chunk: the events of every upstream batch that arrives until
    /// [`IDLE_YIELDS`] scheduler turns in a row bring nothing (or the chunk reaches
    /// [`MAX_BATCH_BYTES`]). On one thread the upstream connection's task hands over one HTTP
    /// chunk per turn, so a body chunk per upstream chunk would cost one `writev` per event;
    /// respgw's SSE writer batches the same way. `Ok(true)`: the upstream stream ended and
    /// `response.completed` is in `out`.
    async fn next_chunk(&mut self, out: &mut Vec<u8>) -> anyhow::Result<bool> {
        // Wait for the network until there is something to send.
        while out.is_empty() {
            match self.chunks.next().await {
                Some(batch) => self.frame(batch?, out),
                None => return Ok(self.complete(out)),
            }
        }
        let mut idle_yields = 0;
        while out.len() < MAX_BATCH_BYTES && idle_yields < IDLE_YIELDS {
            tokio::task::yield_now().await;
            idle_yields += 1;
            // Take every batch that is ready without waiting.
            while out.len() < MAX_BATCH_BYTES
                && let Some(next) = self.chunks.next().now_or_never()
            {
                match next {
                    Some(batch) => self.frame(batch?, out),
                    None => return Ok(self.complete(out)),
                }
                idle_yields = 0;
            }
        }
        Ok(false)
    }

    /// Append `response.completed`; `true`.
    fn complete(&self, out: &mut Vec<u8>) -> bool {
        out.extend_from_slice(&completed_event(&self.model, &self.text, self.sequence_number));
        true
    }
}

/// The Responses event stream: `response.output_text.delta` per content delta, batched into
/// body chunks as they arrive (see [`EventState::next_chunk`]); `response.completed` after
/// `[DONE]`.
fn events(
    chunks: impl Stream<Item = anyhow::Result<Vec<Chunk>>> + Send + Unpin + 'static,
    model: String,
) -> impl Stream<Item = anyhow::Result<Bytes>> + Send + 'static {
    let state = Some(EventState { chunks, model, text: String::new(), sequence_number: 0 });
    stream::unfold(state, |state| async move {
        let mut state = state?;
        let mut out = Vec::new();
        match state.next_chunk(&mut out).await {
            Ok(ended) => Some((Ok(Bytes::from(out)), (!ended).then_some(state))),
            Err(e) => Some((Err(e), None)),
        }
    })
}

/// Append one `response.output_text.delta` event.
fn write_delta_event(out: &mut Vec<u8>, delta: &str, sequence_number: u64) {
    let event = DeltaEvent {
        r#type: "response.output_text.delta",
        item_id: "msg_floor",
        output_index: 0,
        content_index: 0,
        delta,
        sequence_number,
    };
    out.extend_from_slice(b"event: response.output_text.delta\ndata: ");
    // Writing a struct of strings and integers into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, &event);
    out.extend_from_slice(b"\n\n");
}

/// The closing `response.completed` event.
fn completed_event(model: &str, text: &str, last_sequence_number: u64) -> Vec<u8> {
    let data = json!({
        "type": "response.completed",
        "sequence_number": last_sequence_number + 1,
        "response": response_value(model, text),
    });
    format!("event: response.completed\ndata: {data}\n\n").into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::{Frame, classify_responses};

    /// An upstream body delivered in `parts`.
    fn body(parts: Vec<Vec<u8>>) -> impl Stream<Item = reqwest::Result<Bytes>> + Send + 'static {
        stream::iter(parts.into_iter().map(|p| Ok(Bytes::from(p))))
    }

    const ROLE: &[u8] = br#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
    const HELLO: &[u8] = br#"data: {"choices":[{"index":0,"delta":{"content":"Hello"}}]}"#;
    const FINISH: &[u8] = br#"data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    const USAGE: &[u8] = br#"data: {"choices":[],"usage":{"total_tokens":3}}"#;

    #[test]
    fn a_content_chunk_is_a_delta() {
        assert_eq!(chunk_of(HELLO).ok(), Some(Chunk::Delta("Hello".into())));
        assert_eq!(chunk_of(br#"data:{"choices":[{"delta":{"content":" x"}}]}"#).ok(), Some(Chunk::Delta(" x".into())));
    }

    #[test]
    fn role_finish_and_usage_chunks_are_not_deltas() {
        for frame in [ROLE, FINISH, USAGE, b": keep-alive comment".as_slice()] {
            assert_eq!(chunk_of(frame).ok(), Some(Chunk::Other), "{}", String::from_utf8_lossy(frame));
        }
    }

    #[test]
    fn done_ends_and_bad_json_fails() {
        assert_eq!(chunk_of(b"data: [DONE]").ok(), Some(Chunk::Done));
        assert!(chunk_of(b"data: {\"choices\":").is_err());
    }

    /// The upstream wire, cut anywhere, gives the same text.
    #[tokio::test]
    async fn joins_the_deltas_across_any_cut() {
        let wire =
            [ROLE, b"\n\n", HELLO, b"\n\n", HELLO, b"\n\n", FINISH, b"\n\n", USAGE, b"\n\ndata: [DONE]\n\n"].concat();
        for cut in 0..wire.len() {
            let (a, b) = wire.split_at(cut);
            let text =
                whole_text(upstream_chunks(body(vec![a.to_vec(), b.to_vec()]))).await.map_err(|e| format!("{e:#}"));
            assert_eq!(text.as_deref(), Ok("HelloHello"), "cut at {cut}");
        }
    }

    #[tokio::test]
    async fn a_stream_without_done_fails() {
        let wire = [HELLO, b"\n\n"].concat();
        assert!(whole_text(upstream_chunks(body(vec![wire]))).await.is_err());
    }

    /// The frames of `parts` of a Responses event stream, and their kinds.
    fn frames(parts: &[Bytes]) -> (Vec<Frame>, Vec<Value>) {
        let mut splitter = FrameSplitter::default();
        let mut frames = Vec::new();
        for part in parts {
            splitter.feed(part, |f| frames.push(f.to_vec()));
        }
        let kinds = frames.iter().map(|f| classify_responses(f)).collect();
        let data = frames
            .iter()
            .filter_map(|f| f.split(|&b| b == b'\n').find_map(|l| l.strip_prefix(b"data: ")))
            .filter_map(|d| serde_json::from_slice(d).ok())
            .collect();
        (kinds, data)
    }

    /// What the bench's own client reads of the event stream: one delta event per content delta,
    /// each with JSON data, then `response.completed` with the whole text.
    #[tokio::test]
    async fn streams_delta_events_then_completed() {
        let head = [ROLE, b"\n\n", HELLO, b"\n\n"].concat();
        let rest = [HELLO, b"\n\n", FINISH, b"\n\ndata: [DONE]\n\n"].concat();
        let out: Result<Vec<Bytes>, String> = events(upstream_chunks(body(vec![head, rest])), "m".into())
            .map(|r| r.map_err(|e| format!("{e:#}")))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect();
        let (kinds, data) = frames(&out.unwrap_or_default());
        assert_eq!(kinds, [Frame::Delta, Frame::Delta, Frame::End]);
        assert_eq!(data[0]["delta"], "Hello");
        assert_eq!(data[1]["sequence_number"], 2);
        assert_eq!(data[2]["response"]["status"], "completed");
        assert_eq!(data[2]["response"]["output"][0]["content"][0]["text"], "HelloHello");
    }

    /// An upstream stream that stops after its first delta (the bench's held streams): that
    /// delta goes out at once, and the client's stream stays open until the upstream goes on.
    #[tokio::test]
    async fn a_held_upstream_delta_goes_out_at_once() {
        let head = [ROLE, b"\n\n", HELLO, b"\n\n"].concat();
        let rest = [HELLO, b"\n\n", FINISH, b"\n\ndata: [DONE]\n\n"].concat();
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let upstream = body(vec![head]).chain(stream::once(async move {
            let _ = released.await;
            Ok(Bytes::from(rest))
        }));
        let mut events = Box::pin(events(upstream_chunks(upstream), "m".into()));
        let first = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
        let Ok(Some(Ok(first))) = first else { panic!("no first body chunk before the release") };
        assert_eq!(frames(std::slice::from_ref(&first)).0, [Frame::Delta]);
        let pending = tokio::time::timeout(Duration::from_millis(50), events.next()).await;
        assert!(pending.is_err(), "the stream went on before the upstream did");
        let _ = release.send(());
        let rest: Vec<Bytes> = events.filter_map(|r| async move { r.ok() }).collect().await;
        assert_eq!(frames(&rest).0, [Frame::Delta, Frame::End]);
    }
}
