//! One response's events as a client sees them, whatever the transport (SSE or WebSocket).
//!
//! Events arrive from the engine's run over a channel; [`EventSequence`] numbers them
//! (`sequence_number` from 0) and ends after the terminal event. It adds nothing: the engine
//! ends every stream with exactly one terminal event, even when a run dies
//! (`PreparedResponse::spawn`). Dropping the sequence closes the channel, which cancels the run.

use respgw_protocol::ResponseEvent;
use tokio::sync::mpsc;

/// Yields in a row that brought no event before [`EventSequence::gather_ready`] stops: the run
/// and the upstream connection's task take turns, so one turn can pass without an event while the
/// next has one.
const IDLE_YIELDS: u32 = 2;

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

    /// Hand `take` the events already waiting and those that become ready while the other tasks
    /// run, so that a burst goes out in one write. On one thread the run produces an event only
    /// after the upstream connection's task hands it the next frame, so this yields after each
    /// drain; it stops after [`IDLE_YIELDS`] yields in a row brought nothing (the producer waits on
    /// the network), after the terminal event, or as soon as `take` answers false (the batch is
    /// full).
    pub async fn gather_ready(&mut self, mut take: impl FnMut((ResponseEvent, u64)) -> bool) {
        let Some(_) = self.take_ready(&mut take) else { return };
        let mut idle_yields = 0;
        while !self.finished && idle_yields < IDLE_YIELDS {
            tokio::task::yield_now().await;
            match self.take_ready(&mut take) {
                None => return,
                Some(0) => idle_yields += 1,
                Some(_) => idle_yields = 0,
            }
        }
    }

    /// Hand `take` the events already waiting: how many, or `None` once `take` answered false.
    fn take_ready(&mut self, take: &mut impl FnMut((ResponseEvent, u64)) -> bool) -> Option<usize> {
        let mut taken = 0;
        while let Some(event) = self.next_ready() {
            taken += 1;
            if !take(event) {
                return None;
            }
        }
        Some(taken)
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
    async fn gather_ready_takes_what_a_yielding_producer_sends_until_full() {
        let (tx, rx) = mpsc::channel(4);
        let producer = tokio::spawn(async move {
            for _ in 0..10 {
                tx.send(ResponseEvent::Created { response: Box::new(response()) }).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut sequence = EventSequence::new(rx);
        let mut numbers = Vec::new();
        sequence
            .gather_ready(|(_, number)| {
                numbers.push(number);
                numbers.len() < 6
            })
            .await;
        assert_eq!(numbers, [0, 1, 2, 3, 4, 5], "takes across the producer's turns, stops when full");
        sequence
            .gather_ready(|(_, number)| {
                numbers.push(number);
                true
            })
            .await;
        assert_eq!(numbers, (0..10).collect::<Vec<_>>());
        producer.await.unwrap();
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
