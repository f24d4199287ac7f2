//! One response's events as a client sees them, whatever the transport (SSE or WebSocket).
//!
//! Events arrive from the engine's run over a channel; [`EventSequence`] numbers them
//! (`sequence_number` from 0) and ends after the terminal event. If the channel closes without a
//! terminal event (the run task died), it still ends the response properly with an `error` and a
//! `response.failed` built from the last response snapshot: a client never sees a response that
//! just stops. Dropping the sequence closes the channel, which cancels the run.

use std::collections::VecDeque;

use respgw_protocol::events::StreamError;
use respgw_protocol::response::ResponseError;
use respgw_protocol::{ErrorType, ResponseEvent, ResponseObject, ResponseStatus};
use tokio::sync::mpsc;

/// The numbered events of one response.
pub struct EventSequence {
    rx: mpsc::Receiver<ResponseEvent>,
    /// The number the next event gets.
    next_number: u64,
    /// The latest lifecycle snapshot, to build a `response.failed` if the run dies.
    snapshot: Option<ResponseObject>,
    /// Events decided but not yet handed out (the closing events of a run that died).
    closing: VecDeque<ResponseEvent>,
    /// No event follows: the terminal event, or the last closing event, was handed out.
    finished: bool,
}

impl EventSequence {
    pub fn new(rx: mpsc::Receiver<ResponseEvent>) -> Self {
        EventSequence { rx, next_number: 0, snapshot: None, closing: VecDeque::new(), finished: false }
    }

    /// Whether the sequence is over (its terminal event was handed out).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The next event and its number, waiting for the run; `None` once the sequence is over.
    pub async fn next(&mut self) -> Option<(ResponseEvent, u64)> {
        if self.closing.is_empty() && !self.finished {
            match self.rx.recv().await {
                Some(event) => return Some(self.accept(event)),
                None => self.close_abandoned(),
            }
        }
        self.next_closing()
    }

    /// The next event only if one is already waiting (to batch a burst into one write).
    pub fn next_ready(&mut self) -> Option<(ResponseEvent, u64)> {
        if !self.closing.is_empty() || self.finished {
            return self.next_closing();
        }
        match self.rx.try_recv() {
            Ok(event) => Some(self.accept(event)),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => {
                self.close_abandoned();
                self.next_closing()
            }
        }
    }

    fn accept(&mut self, event: ResponseEvent) -> (ResponseEvent, u64) {
        if let ResponseEvent::Created { response } = &event {
            self.snapshot = Some((**response).clone());
        }
        if event.terminal_response().is_some() {
            self.finished = true;
        }
        self.number(event)
    }

    fn number(&mut self, event: ResponseEvent) -> (ResponseEvent, u64) {
        let number = self.next_number;
        self.next_number += 1;
        (event, number)
    }

    fn next_closing(&mut self) -> Option<(ResponseEvent, u64)> {
        let event = self.closing.pop_front()?;
        if self.closing.is_empty() {
            self.finished = true;
        }
        Some(self.number(event))
    }

    /// Queue the end of a response whose run stopped without a terminal event.
    fn close_abandoned(&mut self) {
        tracing::error!("response stream ended without a terminal event; closing it as failed");
        let message = "The gateway stopped producing this response unexpectedly.".to_owned();
        self.closing.push_back(ResponseEvent::error(StreamError {
            error_type: ErrorType::ApiError,
            code: Some("internal_error".into()),
            message: message.clone(),
            param: None,
        }));
        if let Some(mut response) = self.snapshot.take() {
            response.status = ResponseStatus::Failed;
            response.error = Some(ResponseError { code: "internal_error".into(), message });
            self.closing.push_back(ResponseEvent::Failed { response: Box::new(response) });
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use respgw_protocol::CreateResponseRequest;

    /// An in-progress response to frame events of (shared with the SSE framer's tests).
    pub(crate) fn response() -> ResponseObject {
        let req = CreateResponseRequest::from_slice(br#"{"model":"m","input":"hi"}"#)
            .unwrap()
            .validate(&Default::default())
            .unwrap();
        ResponseObject::in_progress("resp_1".into(), 1, &req)
    }

    async fn drain(mut sequence: EventSequence) -> Vec<(&'static str, u64)> {
        let mut seen = Vec::new();
        while let Some((event, number)) = sequence.next().await {
            seen.push((event.kind(), number));
        }
        assert!(sequence.is_finished());
        seen
    }

    #[tokio::test]
    async fn numbers_from_zero_and_stops_after_the_terminal_event() {
        let (tx, rx) = mpsc::channel(8);
        tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
        tx.send(ResponseEvent::Completed { response: Box::new(response()) }).await.unwrap();
        // Kept open: the sequence must not wait for more after the terminal event.
        let seen = drain(EventSequence::new(rx)).await;
        drop(tx);
        assert_eq!(seen, [("response.created", 0), ("response.completed", 1)]);
    }

    #[tokio::test]
    async fn a_run_that_dies_still_ends_with_error_and_failed() {
        let (tx, rx) = mpsc::channel(8);
        tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
        drop(tx);
        let seen = drain(EventSequence::new(rx)).await;
        assert_eq!(seen, [("response.created", 0), ("error", 1), ("response.failed", 2)]);
    }

    #[tokio::test]
    async fn ready_events_batch_without_waiting() {
        let (tx, rx) = mpsc::channel(8);
        let mut sequence = EventSequence::new(rx);
        assert!(sequence.next_ready().is_none());
        tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
        assert_eq!(sequence.next_ready().map(|(e, n)| (e.kind(), n)), Some(("response.created", 0)));
        drop(tx);
        assert_eq!(sequence.next_ready().map(|(e, n)| (e.kind(), n)), Some(("error", 1)));
        assert_eq!(sequence.next_ready().map(|(e, n)| (e.kind(), n)), Some(("response.failed", 2)));
        assert!(sequence.next_ready().is_none() && sequence.is_finished());
    }
}
