//! One response's events as a client sees them, whatever the transport (SSE or WebSocket).
//!
//! Events arrive from the engine's run over a channel; [`EventSequence`] numbers them
//! (`sequence_number` from 0) and ends after the terminal event. It adds nothing: the engine
//! ends every stream with exactly one terminal event, even when a run dies
//! (`PreparedResponse::spawn`). Dropping the sequence closes the channel, which cancels the run.

use respgw_protocol::ResponseEvent;
use tokio::sync::mpsc;

/// The numbered events of one response.
pub struct EventSequence {
    rx: mpsc::Receiver<ResponseEvent>,
    /// The number the next event gets.
    next_number: u64,
    /// No event follows: the terminal event was handed out, or the channel closed.
    finished: bool,
}

impl EventSequence {
    pub fn new(rx: mpsc::Receiver<ResponseEvent>) -> Self {
        EventSequence { rx, next_number: 0, finished: false }
    }

    /// Whether the sequence is over (its terminal event was handed out).
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The next event and its number, waiting for the run; `None` once the sequence is over.
    pub async fn next(&mut self) -> Option<(ResponseEvent, u64)> {
        if self.finished {
            return None;
        }
        match self.rx.recv().await {
            Some(event) => Some(self.accept(event)),
            None => self.closed(),
        }
    }

    /// The next event only if one is already waiting (to batch a burst into one write).
    pub fn next_ready(&mut self) -> Option<(ResponseEvent, u64)> {
        if self.finished {
            return None;
        }
        match self.rx.try_recv() {
            Ok(event) => Some(self.accept(event)),
            Err(mpsc::error::TryRecvError::Empty) => None,
            Err(mpsc::error::TryRecvError::Disconnected) => self.closed(),
        }
    }

    fn accept(&mut self, event: ResponseEvent) -> (ResponseEvent, u64) {
        if event.terminal_response().is_some() {
            self.finished = true;
        }
        let number = self.next_number;
        self.next_number += 1;
        (event, number)
    }

    /// The channel closed before a terminal event: the run's task was stopped from outside (the
    /// runtime is shutting down). There is nothing more to send.
    fn closed(&mut self) -> Option<(ResponseEvent, u64)> {
        tracing::error!("response stream ended without a terminal event");
        self.finished = true;
        None
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use respgw_protocol::{CreateResponseRequest, ResponseObject};

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
    async fn a_channel_closed_early_ends_the_sequence_with_nothing_made_up() {
        // The engine closes every stream itself; a channel that closes early (its task stopped
        // from outside) just ends the sequence.
        let (tx, rx) = mpsc::channel(8);
        tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
        drop(tx);
        let seen = drain(EventSequence::new(rx)).await;
        assert_eq!(seen, [("response.created", 0)]);
    }

    #[tokio::test]
    async fn ready_events_batch_without_waiting() {
        let (tx, rx) = mpsc::channel(8);
        let mut sequence = EventSequence::new(rx);
        assert!(sequence.next_ready().is_none());
        tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
        assert_eq!(sequence.next_ready().map(|(e, n)| (e.kind(), n)), Some(("response.created", 0)));
        tx.send(ResponseEvent::Completed { response: Box::new(response()) }).await.unwrap();
        assert_eq!(sequence.next_ready().map(|(e, n)| (e.kind(), n)), Some(("response.completed", 1)));
        assert!(sequence.next_ready().is_none() && sequence.is_finished());
    }
}
