//! The routes of background responses: `POST /v1/responses/{id}/cancel`, and the resumed stream
//! of `GET /v1/responses/{id}?stream=true&starting_after=N`; plus the SSE body of a background
//! response's logged events, which the creating request streams too.
//!
//! The events come from the run's log in the store, already numbered and serialized when they
//! were logged: they are framed as they are (`event: <type>`, `data: <json>`), and `data: [DONE]`
//! follows the last one. A stream with no event for the keep-alive interval (a slow model, a
//! store outage) sends an SSE comment line (`: keep-alive`). A stream still open when its
//! process's drain times out ends with an `error` event that says how to resume it elsewhere,
//! then `data: [DONE]`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::Stream;
use respgw_engine::{Engine, ResumeFrom, StoredEvent};
use respgw_protocol::events::{StreamError, numbered_json};
use respgw_protocol::{ApiError, ErrorType, ResponseEvent, SseFrame};
use serde::Deserialize;
use tokio::sync::{mpsc, watch};

use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};

/// How `serve_on` drains background responses: each run holds a clone of `open` until it ends
/// (one more is in the router), and draining waits until all are gone; background streams still
/// open when the drain times out are told to end through `cut`.
#[derive(Clone)]
pub struct BackgroundDrain {
    /// Never sent on: each holder counts as a running background response until it drops it.
    #[expect(dead_code, reason = "held for its drop, which is what serve_on waits for")]
    pub open: mpsc::Sender<()>,
    /// Becomes `true` when the drain timed out: open background streams send their last event
    /// and end.
    pub cut: watch::Receiver<bool>,
}

/// The SSE comment a background stream sends when it has had no event for a while.
const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// The `code` of the event that ends a background stream cut by a draining process.
const CUT_CODE: &str = "stream_interrupted";

/// Stop batching waiting events once a chunk is this large.
const MAX_CHUNK_BYTES: usize = 64 * 1024;

/// The query of `GET /v1/responses/{id}`.
#[derive(Debug, Default, Deserialize)]
pub struct RetrieveQuery {
    /// Stream the events of a background response instead of answering with the object.
    stream: Option<String>,
    /// With `stream`: start after the event with this `sequence_number`.
    starting_after: Option<String>,
}

impl RetrieveQuery {
    /// Where to resume from, when a stream is asked for; 400 for values that are not what the
    /// parameters take.
    pub fn resume_from(&self) -> Result<Option<ResumeFrom>, ApiError> {
        let stream = match self.stream.as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(ApiError::invalid(
                    "stream",
                    format!("Invalid 'stream': expected true or false, got '{other}'."),
                ));
            }
        };
        let after = match self.starting_after.as_deref() {
            None => None,
            Some(text) => Some(text.parse::<u64>().map_err(|_| {
                ApiError::invalid(
                    "starting_after",
                    format!("Invalid 'starting_after': expected a sequence number (an integer from 0), got '{text}'."),
                )
            })?),
        };
        match (stream, after) {
            (true, None) => Ok(Some(ResumeFrom::Start)),
            (true, Some(n)) => Ok(Some(ResumeFrom::After(n))),
            (false, None) => Ok(None),
            (false, Some(_)) => {
                Err(ApiError::invalid("starting_after", "'starting_after' is only valid with 'stream=true'."))
            }
        }
    }
}

/// Parse the query of `GET /v1/responses/{id}`.
pub fn retrieve_query(query: Result<Query<RetrieveQuery>, QueryRejection>) -> Result<Option<ResumeFrom>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::invalid_body(format!("Invalid query string: {}", e.body_text())))?;
    query.resume_from()
}

/// `POST /v1/responses/{response_id}/cancel`.
pub async fn cancel(
    State(engine): State<Arc<Engine>>,
    tenant: Tenant,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, HttpError> {
    let Path(id) = id.map_err(|_| path_rejection("response_id"))?;
    Ok(Json(engine.cancel_background(tenant.name(), &id).await?).into_response())
}

/// A background response's stream as its SSE reply sends it.
pub struct BackgroundStream<H> {
    /// The logged events, in order, to the terminal one.
    pub events: mpsc::Receiver<StoredEvent>,
    /// The response's id (named in the event that ends a cut stream).
    pub response_id: String,
    /// The `sequence_number` the client had before this stream's first event, if any.
    pub after: Option<u64>,
    /// Longest silence before a keep-alive comment.
    pub keep_alive: Duration,
    /// The process's drain: the stream ends when it says so.
    pub cut: Option<watch::Receiver<bool>>,
    /// Held while the stream is open (its gauges and counted slots).
    #[expect(dead_code, reason = "held for its drop, which closes the stream's gauges and slots")]
    pub hold: H,
}

/// What a background stream sends next.
enum Next {
    Event(Option<StoredEvent>),
    Idle,
    Cut,
}

/// The SSE reply carrying a background response's logged events.
pub fn event_stream_response<H: Send + 'static>(stream: BackgroundStream<H>) -> Response {
    let body = futures::stream::unfold(Some(stream), |state| async move {
        let mut stream = state?;
        let mut out = BytesMut::new();
        let next = tokio::select! {
            biased;
            event = stream.events.recv() => Next::Event(event),
            () = until_cut(&mut stream.cut) => Next::Cut,
            () = tokio::time::sleep(stream.keep_alive) => Next::Idle,
        };
        match next {
            Next::Event(Some(event)) => stream.send(&event, &mut out),
            Next::Event(None) => {
                out.extend_from_slice(SseFrame::DONE);
                return Some((Ok::<Bytes, Infallible>(out.freeze()), None));
            }
            Next::Idle => {
                out.extend_from_slice(KEEP_ALIVE);
                return Some((Ok(out.freeze()), Some(stream)));
            }
            Next::Cut => {
                frame(&cut_event(&stream.response_id, stream.after), &mut out);
                out.extend_from_slice(SseFrame::DONE);
                return Some((Ok(out.freeze()), None));
            }
        }
        while out.len() < MAX_CHUNK_BYTES {
            match stream.events.try_recv() {
                Ok(event) => stream.send(&event, &mut out),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    out.extend_from_slice(SseFrame::DONE);
                    return Some((Ok(out.freeze()), None));
                }
            }
        }
        Some((Ok(out.freeze()), Some(stream)))
    });
    sse_response(body)
}

impl<H> BackgroundStream<H> {
    /// Frame `event` into `out`, and remember how far the client got.
    fn send(&mut self, event: &StoredEvent, out: &mut BytesMut) {
        frame(event, out);
        self.after = Some(event.seq);
    }
}

/// Resolves when the process's drain cuts open background streams; never without a drain.
async fn until_cut(cut: &mut Option<watch::Receiver<bool>>) {
    let Some(cut) = cut else { return std::future::pending().await };
    if cut.wait_for(|cut| *cut).await.is_err() {
        // The server is gone without cutting: nothing will say so again.
        std::future::pending::<()>().await;
    }
}

/// The `error` event that ends a stream cut by a draining process: the run goes on (or is ended
/// by its lease), and the message says how to get the rest. It carries the `sequence_number`
/// the client already has (`after`), so a client that keeps the last number it saw as its
/// cursor resumes at the right place.
fn cut_event(id: &str, after: Option<u64>) -> StoredEvent {
    let resume = match after {
        Some(n) => format!("GET /v1/responses/{id}?stream=true&starting_after={n}"),
        None => format!("GET /v1/responses/{id}?stream=true"),
    };
    let message = format!(
        "This gateway process is shutting down and closed the stream. Background response '{id}' is not \
         cancelled: resume its stream with {resume} to get the rest of its events and its final status."
    );
    let event = ResponseEvent::error(StreamError {
        error_type: ErrorType::ApiError,
        code: Some(CUT_CODE.into()),
        message,
        param: None,
    });
    let seq = after.unwrap_or(0);
    let data = numbered_json(&event, seq).unwrap_or_else(|_| {
        format!(
            r#"{{"type":"error","code":"{CUT_CODE}","message":"stream closed","param":null,"sequence_number":{seq}}}"#
        )
    });
    StoredEvent { seq, kind: "error".into(), data }
}

/// An SSE reply with the usual headers.
fn sse_response(body: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static) -> Response {
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// `event: <type>\ndata: <json>\n\n`, as logged.
fn frame(event: &StoredEvent, out: &mut BytesMut) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(event.kind.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(event.data.as_bytes());
    out.extend_from_slice(b"\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(stream: Option<&str>, starting_after: Option<&str>) -> RetrieveQuery {
        RetrieveQuery { stream: stream.map(str::to_owned), starting_after: starting_after.map(str::to_owned) }
    }

    #[test]
    fn stream_and_starting_after_parse_into_where_to_resume() {
        assert_eq!(query(None, None).resume_from().unwrap(), None);
        assert_eq!(query(Some("true"), None).resume_from().unwrap(), Some(ResumeFrom::Start));
        assert_eq!(query(Some("true"), Some("7")).resume_from().unwrap(), Some(ResumeFrom::After(7)));
        assert_eq!(query(Some("x"), None).resume_from().unwrap_err().param.as_deref(), Some("stream"));
        assert_eq!(query(Some("true"), Some("-1")).resume_from().unwrap_err().param.as_deref(), Some("starting_after"));
        assert_eq!(query(None, Some("3")).resume_from().unwrap_err().param.as_deref(), Some("starting_after"));
    }

    #[tokio::test]
    async fn logged_events_are_framed_as_logged_and_end_with_done() {
        let (tx, rx) = mpsc::channel(4);
        tx.send(StoredEvent { seq: 3, kind: "response.completed".into(), data: "{\"sequence_number\":3}".into() })
            .await
            .unwrap();
        drop(tx);
        assert_eq!(
            body_text(stream(rx, None)).await,
            "event: response.completed\ndata: {\"sequence_number\":3}\n\ndata: [DONE]\n\n"
        );
    }

    fn stream(events: mpsc::Receiver<StoredEvent>, cut: Option<watch::Receiver<bool>>) -> BackgroundStream<()> {
        BackgroundStream {
            events,
            response_id: "resp_1".into(),
            after: None,
            keep_alive: Duration::from_millis(20),
            cut,
            hold: (),
        }
    }

    async fn body_text(stream: BackgroundStream<()>) -> String {
        use futures::StreamExt;
        let mut body = event_stream_response(stream).into_body().into_data_stream();
        let mut text = String::new();
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        text
    }

    #[tokio::test]
    async fn a_silent_stream_sends_keep_alive_comments() {
        let (tx, rx) = mpsc::channel(4);
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            tx.send(StoredEvent { seq: 0, kind: "response.completed".into(), data: "{}".into() }).await.unwrap();
        });
        let text = body_text(stream(rx, None)).await;
        sender.await.unwrap();
        assert!(text.starts_with(": keep-alive\n\n"), "{text}");
        assert!(text.ends_with("event: response.completed\ndata: {}\n\ndata: [DONE]\n\n"), "{text}");
    }

    #[tokio::test]
    async fn a_cut_stream_ends_with_an_error_event_saying_how_to_resume() {
        let (tx, rx) = mpsc::channel(4);
        tx.send(StoredEvent { seq: 6, kind: "response.output_text.delta".into(), data: "{}".into() }).await.unwrap();
        let (cut, cut_rx) = watch::channel(false);
        let cutter = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cut.send(true).unwrap();
            // The run is still going: the events channel stays open.
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(tx);
        });
        let text = body_text(stream(rx, Some(cut_rx))).await;
        cutter.abort();
        let last = text.rsplit("event: ").next().unwrap();
        assert!(last.starts_with("error\ndata: "), "{text}");
        let data: serde_json::Value =
            serde_json::from_str(last["error\ndata: ".len()..].split("\n\n").next().unwrap()).unwrap();
        assert_eq!((data["code"].as_str(), data["sequence_number"].as_u64()), (Some(CUT_CODE), Some(6)));
        let message = data["message"].as_str().unwrap();
        assert!(message.contains("GET /v1/responses/resp_1?stream=true&starting_after=6"), "{message}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    }
}
