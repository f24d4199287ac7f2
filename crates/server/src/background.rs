//! The routes of background responses: `POST /v1/responses/{id}/cancel`, and the resumed stream
//! of `GET /v1/responses/{id}?stream=true&starting_after=N`; plus the SSE body of a background
//! response's logged events, which the creating request streams too.
//!
//! The events come from the run's log in the store, already numbered and serialized when they
//! were logged: they are framed as they are (`event: <type>`, `data: <json>`), and `data: [DONE]`
//! follows the last one.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures::Stream;
use respgw_engine::{Engine, ResumeFrom, StoredEvent};
use respgw_protocol::{ApiError, SseFrame};
use respgw_telemetry::SseStreamGuard;
use serde::Deserialize;
use tokio::sync::mpsc;

use crate::auth::Tenant;
use crate::error::{HttpError, path_rejection};

/// How `serve_on` waits for the background runs of its process: each run holds a clone of
/// `open` until it ends (one more is in the router), and draining waits until all are gone.
#[derive(Clone)]
pub struct BackgroundDrain {
    /// Never sent on: each holder counts as a running background response until it drops it.
    #[expect(dead_code, reason = "held for its drop, which is what serve_on waits for")]
    pub open: mpsc::Sender<()>,
}

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

/// The SSE reply carrying a background response's logged events.
pub fn event_stream_response(events: mpsc::Receiver<StoredEvent>, open_stream: SseStreamGuard) -> Response {
    let body = futures::stream::unfold(Some((events, open_stream)), |state| async move {
        let (mut events, open_stream) = state?;
        let mut out = BytesMut::new();
        match events.recv().await {
            Some(event) => frame(&event, &mut out),
            None => {
                out.extend_from_slice(SseFrame::DONE);
                return Some((Ok::<Bytes, Infallible>(out.freeze()), None));
            }
        }
        while out.len() < MAX_CHUNK_BYTES {
            match events.try_recv() {
                Ok(event) => frame(&event, &mut out),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    out.extend_from_slice(SseFrame::DONE);
                    return Some((Ok(out.freeze()), None));
                }
            }
        }
        Some((Ok(out.freeze()), Some((events, open_stream))))
    });
    sse_response(body)
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
        use futures::StreamExt;
        let (tx, rx) = mpsc::channel(4);
        tx.send(StoredEvent { seq: 3, kind: "response.completed".into(), data: "{\"sequence_number\":3}".into() })
            .await
            .unwrap();
        drop(tx);
        let metrics = respgw_telemetry::Metrics::new();
        let response = event_stream_response(rx, metrics.sse_stream("/v1/responses"));
        let mut body = response.into_body().into_data_stream();
        let mut text = String::new();
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        assert_eq!(text, "event: response.completed\ndata: {\"sequence_number\":3}\n\ndata: [DONE]\n\n");
    }
}
