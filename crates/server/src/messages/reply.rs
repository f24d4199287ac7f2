//! A prepared engine response answered as a Messages reply: run to its end for a `message` JSON
//! body ([`json`]), or spawned and its events translated into Anthropic's event stream
//! ([`sse`], framed `event: <type>\ndata: <json>\n\n`).
//!
//! A stream always ends with `message_stop` or an `error` event: the engine sends exactly one
//! terminal event per run, and should its channel close without one the stream ends with an
//! `error` event all the same. While the run is silent (a long prefill, a gateway tool), a
//! `ping` event goes out every `ping_interval`. A client that goes away drops the body, and with
//! it the channel's receiver: that cancels the run.

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use respgw_engine::{PreparedResponse, RunOutcome};
use respgw_messages::error::MessagesErrorType;
use respgw_messages::reply::message;
use respgw_messages::shape::ReplyShape;
use respgw_messages::stream::{MessageStream, MessagesEvent};
use respgw_protocol::{ApiError, ResponseEvent};
use respgw_telemetry::SseStreamGuard;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::auth::StreamSlot;
use crate::error::HttpError;

/// Events buffered between the run and a slow client before the run waits.
const SSE_BUFFER: usize = 64;

/// Stop batching waiting events once a chunk is this large.
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// What a client is told when the run's events stop before its end.
const RUN_VANISHED: &str = "The gateway stopped producing this message unexpectedly.";

/// Runs `prepared` to its end and answers with the `message` body; a failed run answers with
/// its error (re-shaped for Messages by the routes' error layer).
pub(crate) async fn json(prepared: PreparedResponse, shape: ReplyShape) -> Result<Response, HttpError> {
    match prepared.run().await {
        RunOutcome::Finished(response) => Ok(Json(message(&response, &shape)).into_response()),
        RunOutcome::Failed { error, .. } => Err(HttpError(error)),
        // Unreachable: a run without a stream never learns that its client left.
        RunOutcome::ClientGone => Err(HttpError(ApiError::internal("The message was abandoned."))),
    }
}

/// Spawns `prepared` and answers with Anthropic's event stream (always ended: `message_stop`,
/// or an `error` event), with a `ping` whenever the run is silent for `ping_interval`;
/// `open_stream` and `slot` are released when the body is dropped.
pub(crate) fn sse(
    prepared: PreparedResponse,
    shape: ReplyShape,
    open_stream: SseStreamGuard,
    slot: Option<StreamSlot>,
    ping_interval: Duration,
) -> Response {
    // Spawned in the request's span: its logs keep the request id, its upstream call is a child span.
    let events = prepared.spawn(SSE_BUFFER);
    let framer = Framer { events, translation: MessageStream::new(shape), ping_interval, _hold: (open_stream, slot) };
    let mut response = Body::from_stream(body(framer)).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The body's state: the run's events and their translation.
struct Framer {
    events: mpsc::Receiver<ResponseEvent>,
    translation: MessageStream,
    /// Longest silence before a `ping`.
    ping_interval: Duration,
    /// Counts the stream among the open ones (metrics, the tenant's limit) until the body is dropped.
    _hold: (SseStreamGuard, Option<StreamSlot>),
}

impl Framer {
    /// The next chunk of the body: the events the next engine events stand for, with those
    /// already waiting (up to about [`MAX_BATCH_BYTES`]), or a `ping` after a silence; `None`
    /// once the last event went out.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.translation.ended() {
            return None;
        }
        let mut translated = Vec::new();
        let ping_at = Instant::now() + self.ping_interval;
        // Engine events that stand for nothing (a tool's progress) do not count as activity.
        while translated.is_empty() {
            tokio::select! {
                event = self.events.recv() => self.translate(event, &mut translated),
                () = tokio::time::sleep_until(ping_at) => translated.push(MessagesEvent::Ping),
            }
        }
        let mut out = Vec::new();
        frame(&translated, &mut out);
        while !self.translation.ended() && out.len() < MAX_BATCH_BYTES {
            let Ok(event) = self.events.try_recv() else { break };
            translated.clear();
            self.translate(Some(event), &mut translated);
            frame(&translated, &mut out);
        }
        Some(Bytes::from(out))
    }

    /// Translate the run's next event; the channel's end before the run's is a failure.
    fn translate(&mut self, event: Option<ResponseEvent>, out: &mut Vec<MessagesEvent>) {
        match event {
            Some(event) => self.translation.on_event(event, out),
            None => {
                tracing::error!("a Messages stream's run ended without its terminal event");
                self.translation.end_with_error(MessagesErrorType::Api, RUN_VANISHED, out);
            }
        }
    }
}

/// Frame `events` into `out`.
fn frame(events: &[MessagesEvent], out: &mut Vec<u8>) {
    for event in events {
        if let Err(e) = event.encode_into(out) {
            tracing::error!(error = %e, kind = event.kind(), "could not serialize a Messages event");
        }
    }
}

/// The body stream of `framer`.
fn body(framer: Framer) -> impl Stream<Item = Result<Bytes, Infallible>> {
    futures::stream::unfold(
        framer,
        |mut framer| async move { framer.next_chunk().await.map(|chunk| (Ok(chunk), framer)) },
    )
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use respgw_messages::shape::ThinkingDisplay;
    use respgw_protocol::{CreateResponseRequest, ResponseObject, ResponseStatus};

    use super::*;

    fn response(status: ResponseStatus) -> ResponseObject {
        let request = CreateResponseRequest::from_slice(br#"{"model":"m","input":"hi"}"#)
            .unwrap()
            .validate(&Default::default())
            .unwrap();
        ResponseObject { status, ..ResponseObject::in_progress("resp_1".into(), 1, &request) }
    }

    /// The body for the events sent on the returned channel, read to its end, and the kinds of
    /// its events in order.
    async fn read_body(ping_interval: Duration, send: impl AsyncFnOnce(mpsc::Sender<ResponseEvent>)) -> Vec<String> {
        let (tx, rx) = mpsc::channel(8);
        let metrics = respgw_telemetry::Metrics::new();
        let shape = ReplyShape { model: "m".into(), thinking: ThinkingDisplay::Text, stop_sequences: vec![] };
        let framer = Framer {
            events: rx,
            translation: MessageStream::new(shape),
            ping_interval,
            _hold: (metrics.sse_stream("/v1/messages"), None),
        };
        let reading = tokio::spawn(body(framer).map(|chunk| chunk.unwrap()).collect::<Vec<Bytes>>());
        send(tx).await;
        let chunks = reading.await.unwrap();
        assert_eq!(metrics.snapshot().gauge("gw_responses_sse_connections_in_flight", &[]), Some(0));
        let text: String = chunks.iter().map(|c| String::from_utf8_lossy(c).into_owned()).collect();
        text.lines().filter_map(|l| l.strip_prefix("event: ")).map(str::to_owned).collect()
    }

    #[tokio::test]
    async fn a_silent_run_gets_pings_until_it_ends() {
        let kinds = read_body(Duration::from_millis(20), async |tx| {
            tx.send(ResponseEvent::Created { response: Box::new(response(ResponseStatus::InProgress)) }).await.unwrap();
            tokio::time::sleep(Duration::from_millis(110)).await;
            tx.send(ResponseEvent::Completed { response: Box::new(response(ResponseStatus::Completed)) })
                .await
                .unwrap();
        })
        .await;
        assert_eq!(kinds[..2], ["message_start", "ping"]);
        assert_eq!(kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
        let keep_alive = kinds.iter().filter(|k| *k == "ping").count() - 1;
        assert!((2..=6).contains(&keep_alive), "{kinds:?}");
    }

    #[tokio::test]
    async fn a_run_that_vanishes_ends_with_an_error_event() {
        let kinds = read_body(Duration::from_secs(60), async |tx| {
            tx.send(ResponseEvent::Created { response: Box::new(response(ResponseStatus::InProgress)) }).await.unwrap();
            drop(tx);
        })
        .await;
        assert_eq!(kinds, ["message_start", "ping", "error"]);
    }

    #[tokio::test]
    async fn nothing_follows_the_last_event() {
        let kinds = read_body(Duration::from_secs(60), async |tx| {
            tx.send(ResponseEvent::Created { response: Box::new(response(ResponseStatus::InProgress)) }).await.unwrap();
            tx.send(ResponseEvent::Completed { response: Box::new(response(ResponseStatus::Completed)) })
                .await
                .unwrap();
            // Whatever the channel still holds is not sent.
            let _ = tx.send(ResponseEvent::Completed { response: Box::new(response(ResponseStatus::Completed)) }).await;
        })
        .await;
        assert_eq!(kinds, ["message_start", "ping", "message_delta", "message_stop"]);
    }
}
