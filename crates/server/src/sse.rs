//! The SSE body of a streaming response.
//!
//! Events arrive from the engine over a channel; this stream numbers them (`sequence_number`
//! from 0), frames them and appends `data: [DONE]` after the terminal event. If the channel
//! closes without a terminal event (the run task died), it still ends the stream properly with
//! an `error` and a `response.failed` built from the last response snapshot: a client never
//! sees a stream that just stops.

use std::collections::VecDeque;
use std::convert::Infallible;

use bytes::{Bytes, BytesMut};
use futures::Stream;
use respgw_protocol::events::StreamError;
use respgw_protocol::response::ResponseError;
use respgw_protocol::{ErrorType, ResponseEvent, ResponseObject, ResponseStatus, SseFrame};
use respgw_telemetry::SseStreamGuard;
use tokio::sync::mpsc;

/// Stop batching waiting events once a chunk is this large.
const MAX_BATCH_BYTES: usize = 64 * 1024;

struct Framer {
    rx: mpsc::Receiver<ResponseEvent>,
    sequence: u64,
    /// The latest lifecycle snapshot, to build a `response.failed` if the run dies.
    snapshot: Option<ResponseObject>,
    /// Frames decided but not yet yielded (the closing frames).
    pending: VecDeque<Bytes>,
    finished: bool,
    /// Counts this stream as open, and times it, until the body is dropped.
    _open_stream: SseStreamGuard,
}

impl Framer {
    fn frame(&mut self, event: &ResponseEvent) -> Option<Vec<u8>> {
        match SseFrame::encode(event, self.sequence) {
            Ok(bytes) => {
                self.sequence += 1;
                Some(bytes)
            }
            Err(e) => {
                tracing::error!(error = %e, kind = event.kind(), "could not serialize an event");
                None
            }
        }
    }

    /// Close a stream whose run ended without a terminal event.
    fn close_abandoned(&mut self) {
        tracing::error!("response stream ended without a terminal event; closing it as failed");
        let message = "The gateway stopped producing this response unexpectedly.".to_owned();
        let error = ResponseEvent::error(StreamError {
            error_type: ErrorType::ApiError,
            code: Some("internal_error".into()),
            message: message.clone(),
            param: None,
        });
        let frame = self.frame(&error);
        self.pending.extend(frame.map(Bytes::from));
        if let Some(mut response) = self.snapshot.take() {
            response.status = ResponseStatus::Failed;
            response.error = Some(ResponseError { code: "internal_error".into(), message });
            let failed = ResponseEvent::Failed { response: Box::new(response) };
            let frame = self.frame(&failed);
            self.pending.extend(frame.map(Bytes::from));
        }
        self.pending.push_back(Bytes::from_static(SseFrame::DONE));
    }

    /// Frame one event; a terminal event also queues `[DONE]`.
    fn accept(&mut self, event: ResponseEvent, out: &mut BytesMut) {
        if let ResponseEvent::Created { response } = &event {
            self.snapshot = Some((**response).clone());
        }
        if let Some(frame) = self.frame(&event) {
            out.extend_from_slice(&frame);
        }
        if event.terminal_response().is_some() {
            self.finished = true;
            out.extend_from_slice(SseFrame::DONE);
        }
    }

    /// The next chunk of the body: every event already waiting, framed into one buffer, so a
    /// burst of events costs one write rather than one per event.
    async fn next_frame(&mut self) -> Option<Bytes> {
        if let Some(frame) = self.pending.pop_front() {
            return Some(frame);
        }
        if self.finished {
            return None;
        }
        let Some(first) = self.rx.recv().await else {
            self.finished = true;
            self.close_abandoned();
            return self.pending.pop_front();
        };
        let mut out = BytesMut::new();
        self.accept(first, &mut out);
        while !self.finished && out.len() < MAX_BATCH_BYTES {
            match self.rx.try_recv() {
                Ok(event) => self.accept(event, &mut out),
                Err(_) => break,
            }
        }
        Some(out.freeze())
    }
}

/// Frames engine events for the wire; `open_stream` is released when the body is dropped.
pub fn event_stream(
    rx: mpsc::Receiver<ResponseEvent>,
    open_stream: SseStreamGuard,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let framer = Framer {
        rx,
        sequence: 0,
        snapshot: None,
        pending: VecDeque::new(),
        finished: false,
        _open_stream: open_stream,
    };
    futures::stream::unfold(
        framer,
        |mut framer| async move { framer.next_frame().await.map(|frame| (Ok(frame), framer)) },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use respgw_protocol::CreateResponseRequest;

    fn response() -> ResponseObject {
        let req = CreateResponseRequest::from_slice(br#"{"model":"m","input":"hi"}"#)
            .unwrap()
            .validate(&Default::default())
            .unwrap();
        ResponseObject::in_progress("resp_1".into(), 1, &req)
    }

    async fn collect(rx: mpsc::Receiver<ResponseEvent>) -> String {
        let metrics = respgw_telemetry::Metrics::new();
        let frames: Vec<Bytes> =
            event_stream(rx, metrics.sse_stream("/v1/responses")).map(|f| f.unwrap()).collect().await;
        assert_eq!(metrics.snapshot().gauge("gw_responses_sse_connections_in_flight", &[]), Some(0));
        frames.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect()
    }

    #[tokio::test]
    async fn numbers_events_and_ends_with_done() {
        let (tx, rx) = mpsc::channel(8);
        tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
        tx.send(ResponseEvent::Completed { response: Box::new(response()) }).await.unwrap();
        drop(tx);
        let text = collect(rx).await;
        assert!(text.contains("\"sequence_number\":0"));
        assert!(text.contains("event: response.completed\ndata: {\"type\":\"response.completed\""));
        assert!(text.ends_with("data: [DONE]\n\n"));
    }

    #[tokio::test]
    async fn a_run_that_dies_still_gets_error_and_failed() {
        let (tx, rx) = mpsc::channel(8);
        tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
        drop(tx);
        let text = collect(rx).await;
        let kinds: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
        assert_eq!(kinds, ["response.created", "error", "response.failed"]);
        assert!(text.contains("\"status\":\"failed\""));
        assert!(text.ends_with("data: [DONE]\n\n"));
    }
}
