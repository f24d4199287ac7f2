//! The SSE body of a streaming response.
//!
//! The numbered events of the response ([`EventSequence`]) are framed as `event:`/`data:` pairs,
//! and `data: [DONE]` follows the last one.

use std::convert::Infallible;

use bytes::Bytes;
use futures::Stream;
use respgw_protocol::{ResponseEvent, SseFrame};
use respgw_telemetry::SseStreamGuard;
use tokio::sync::mpsc;

use crate::auth::StreamSlot;
use crate::event_sequence::EventSequence;

/// Stop batching waiting events once a chunk is this large.
const MAX_BATCH_BYTES: usize = 64 * 1024;

struct Framer {
    events: EventSequence,
    /// `data: [DONE]` was written: the body is complete.
    done: bool,
    /// Counts this stream as open, and times it, until the body is dropped.
    _open_stream: SseStreamGuard,
    /// Counts it among its tenant's open streams until the body is dropped.
    _slot: Option<StreamSlot>,
}

impl Framer {
    /// The next chunk of the body: the next event and those that become ready while the other
    /// tasks run ([`EventSequence::gather_ready`]), framed into one buffer of up to about
    /// [`MAX_BATCH_BYTES`], so a burst of events costs one write rather than one per event.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = Vec::new();
        let mut done = match self.events.next().await {
            Some(first) => frame(first, &mut out),
            None => {
                out.extend_from_slice(SseFrame::DONE);
                true
            }
        };
        if !done {
            self.events
                .gather_ready(|event| {
                    done = frame(event, &mut out);
                    !done && out.len() < MAX_BATCH_BYTES
                })
                .await;
        }
        self.done = done;
        Some(Bytes::from(out))
    }
}

/// Frame `event` into `out`, and `data: [DONE]` after it when it is the terminal event; whether it
/// was.
fn frame((event, number): (ResponseEvent, u64), out: &mut Vec<u8>) -> bool {
    if let Err(e) = SseFrame::encode_into(out, &event, number) {
        tracing::error!(error = %e, kind = event.kind(), "could not serialize an event");
    }
    let terminal = event.terminal_response().is_some();
    if terminal {
        out.extend_from_slice(SseFrame::DONE);
    }
    terminal
}

/// Frames engine events for the wire; `open_stream` and the tenant's `slot` are released when
/// the body is dropped.
pub fn event_stream(
    rx: mpsc::Receiver<ResponseEvent>,
    open_stream: SseStreamGuard,
    slot: Option<StreamSlot>,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let framer = Framer { events: EventSequence::new(rx), done: false, _open_stream: open_stream, _slot: slot };
    futures::stream::unfold(
        framer,
        |mut framer| async move { framer.next_chunk().await.map(|chunk| (Ok(chunk), framer)) },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_sequence::tests::response;
    use futures::StreamExt;
    use respgw_protocol::events::StreamError;
    use respgw_protocol::{ErrorType, ResponseObject, ResponseStatus};

    async fn collect(rx: mpsc::Receiver<ResponseEvent>) -> String {
        let metrics = respgw_telemetry::Metrics::new();
        let frames: Vec<Bytes> =
            event_stream(rx, metrics.sse_stream("/v1/responses"), None).map(|f| f.unwrap()).collect().await;
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
    async fn events_a_run_produces_in_turns_go_out_in_one_chunk() {
        // A run that yields between events, as one waiting on its upstream connection's task
        // does, on the same thread as the framer.
        let (tx, rx) = mpsc::channel(8);
        let run = tokio::spawn(async move {
            tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
            for i in 0..100 {
                let delta = ResponseEvent::OutputTextDelta {
                    item_id: "msg_1".into(),
                    output_index: 0,
                    content_index: 0,
                    delta: format!("{i} "),
                    logprobs: [],
                };
                tx.send(delta).await.unwrap();
                tokio::task::yield_now().await;
            }
            tx.send(ResponseEvent::Completed { response: Box::new(response()) }).await.unwrap();
        });
        let metrics = respgw_telemetry::Metrics::new();
        let chunks: Vec<Bytes> =
            event_stream(rx, metrics.sse_stream("/v1/responses"), None).map(|f| f.unwrap()).collect().await;
        run.await.unwrap();
        let text: String = chunks.iter().map(|b| String::from_utf8_lossy(b).into_owned()).collect();
        assert_eq!(text.matches("event: response.output_text.delta").count(), 100);
        assert!(chunks.len() <= 3, "102 events in {} chunks", chunks.len());
    }

    #[tokio::test]
    async fn a_failed_run_ends_with_error_failed_and_done() {
        // What the engine sends when a run dies: `error`, then `response.failed`.
        let (tx, rx) = mpsc::channel(8);
        tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
        let error = StreamError {
            error_type: ErrorType::ApiError,
            code: Some("internal_error".into()),
            message: "The gateway stopped producing this response unexpectedly.".into(),
            param: None,
        };
        tx.send(ResponseEvent::error(error)).await.unwrap();
        let failed = ResponseObject { status: ResponseStatus::Failed, ..response() };
        tx.send(ResponseEvent::Failed { response: Box::new(failed) }).await.unwrap();
        let text = collect(rx).await;
        let kinds: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("event: ")).collect();
        assert_eq!(kinds, ["response.created", "error", "response.failed"]);
        assert!(text.contains("\"status\":\"failed\""));
        assert!(text.ends_with("data: [DONE]\n\n"));
    }
}
