//! Where a background run sends its events: numbered as clients will see them, then written to
//! the run's log in the store by a writer task, in batches.
//!
//! Batching is group commit: the writer writes whatever has arrived while its previous write was
//! in flight (up to [`MAX_BATCH`] events) as one transaction, so a fast stream costs a write per
//! store round trip, not per event, and a slow one is written event by event without waiting.
//! Clients only ever read committed events (the live stream of the client that created the run
//! included), so a crash loses only events no client has seen: those produced while the last
//! write was in flight. The response's save and its terminal event are one transaction.
//!
//! The run stops (its sink reports the client gone, which ends a run without storing it) when
//! the run was ended elsewhere — cancelled, or failed after its lease expired — which the writer
//! learns when a write finds the run no longer active, and the process's upkeep when it looks.
//! While the store is unavailable the writer retries a batch for as long as the run's lease is
//! sure to hold; then the run is stopped and recorded as failed once the store answers.

use std::sync::Arc;
use std::time::Duration;

use respgw_protocol::{ResponseEvent, ResponseObject, ResponseStatus};
use respgw_store_api::background::{Appended, EventBatch, RunStatus, StoredEvent};
use respgw_store_api::{NewResponse, StoreError};
use tokio::sync::{mpsc, watch};

use super::{BackgroundRuns, Failure, StopReason};
use crate::sink::ClientGone;

/// Most events written in one transaction.
const MAX_BATCH: usize = 256;

/// The pause after a batch failed because the store is unavailable, doubling up to
/// [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(100);
const LAST_RETRY: Duration = Duration::from_secs(1);

/// One event on its way to the log.
pub(crate) struct Logged {
    event: StoredEvent,
    /// The run's status and response object, when the event carries one.
    state: Option<(RunStatus, String)>,
    /// The response to save with this (terminal) event.
    save: Option<NewResponse>,
    terminal: bool,
}

/// The sink of a background run (see the module documentation).
pub(crate) struct BackgroundSink {
    tx: mpsc::Sender<Logged>,
    /// Says why once the run must stop.
    stop: watch::Receiver<Option<StopReason>>,
    /// The number of the next event.
    next_seq: u64,
    /// The terminal event was sent.
    ended: bool,
    /// The response to save with the terminal event.
    save: Option<NewResponse>,
}

/// The store's status word for a response's status.
pub(crate) fn run_status(status: ResponseStatus) -> RunStatus {
    match status {
        ResponseStatus::Queued => RunStatus::Queued,
        ResponseStatus::InProgress => RunStatus::InProgress,
        ResponseStatus::Completed => RunStatus::Completed,
        ResponseStatus::Incomplete => RunStatus::Incomplete,
        ResponseStatus::Failed => RunStatus::Failed,
        ResponseStatus::Cancelled => RunStatus::Cancelled,
    }
}

/// The response a lifecycle event carries.
fn lifecycle_response(event: &ResponseEvent) -> Option<&ResponseObject> {
    match event {
        ResponseEvent::Created { response }
        | ResponseEvent::Queued { response }
        | ResponseEvent::InProgress { response }
        | ResponseEvent::Completed { response }
        | ResponseEvent::Incomplete { response }
        | ResponseEvent::Failed { response } => Some(response),
        _ => None,
    }
}

/// `event` as the log keeps it, numbered `seq`, with the state it carries.
pub(crate) fn stored_event(
    event: &ResponseEvent,
    seq: u64,
) -> Result<(StoredEvent, Option<(RunStatus, String)>), serde_json::Error> {
    let data = respgw_protocol::events::numbered_json(event, seq)?;
    let state = match lifecycle_response(event) {
        Some(response) => Some((run_status(response.status), serde_json::to_string(response)?)),
        None => None,
    };
    Ok((StoredEvent { seq, kind: event.kind().to_owned(), data }, state))
}

impl BackgroundSink {
    /// A sink whose first event gets number `next_seq`, writing through `tx`.
    pub(crate) fn new(tx: mpsc::Sender<Logged>, stop: watch::Receiver<Option<StopReason>>, next_seq: u64) -> Self {
        BackgroundSink { tx, stop, next_seq, ended: false, save: None }
    }

    pub(crate) async fn send(&mut self, event: ResponseEvent) -> Result<(), ClientGone> {
        if self.ended || self.stop.borrow().is_some() {
            return Err(ClientGone);
        }
        let (stored, state) = match stored_event(&event, self.next_seq) {
            Ok(encoded) => encoded,
            Err(e) => {
                // Not expected for our own types; the event is left out rather than the run.
                tracing::error!(error = %e, kind = event.kind(), "could not serialize an event");
                return Ok(());
            }
        };
        let terminal = event.terminal_response().is_some();
        let save = if terminal { self.save.take() } else { None };
        self.tx.send(Logged { event: stored, state, save, terminal }).await.map_err(|_| ClientGone)?;
        self.next_seq += 1;
        self.ended |= terminal;
        Ok(())
    }

    /// Save `response` with the terminal event that follows.
    pub(crate) fn save_with_terminal(&mut self, response: NewResponse) {
        self.save = Some(response);
    }

    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    /// Resolves when the run must stop.
    pub(crate) async fn stopped(&self) {
        let mut stop = self.stop.clone();
        // An error means the sender is gone: the process let go of the run.
        let _ = stop.wait_for(Option::is_some).await;
    }

    /// What the log says of the run when this sink turned it away.
    pub(crate) fn why_stopped(&self) -> &'static str {
        match *self.stop.borrow() {
            Some(reason) => reason.describe(),
            None => "background response's log writer stopped; its run stopped",
        }
    }
}

/// The writer of run `id`'s log: batches what the sink sends until the terminal event is
/// written, the channel closes, or the run is found ended elsewhere.
pub(crate) async fn log_events(runs: Arc<BackgroundRuns>, id: String, mut rx: mpsc::Receiver<Logged>) {
    let mut pending: Vec<Logged> = Vec::new();
    loop {
        if pending.is_empty() {
            match rx.recv().await {
                Some(first) => pending.push(first),
                None => return,
            }
        }
        while pending.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(next) => pending.push(next),
                Err(_) => break,
            }
        }
        let terminal = pending.iter().any(|l| l.terminal);
        let mut batch = EventBatch {
            id: id.clone(),
            owner: runs.owner.clone(),
            events: Vec::with_capacity(pending.len()),
            state: None,
            save: None,
        };
        for logged in pending.drain(..) {
            batch.events.push(logged.event);
            batch.state = logged.state.or(batch.state.take());
            batch.save = logged.save.or(batch.save.take());
        }
        match write(&runs, batch).await {
            Ok(Appended::Done) => runs.wake(&id),
            Ok(Appended::NotActive) => {
                runs.stop_ended(&id).await;
                return;
            }
            Err(e) => {
                tracing::error!(response_id = %id, error = %e, "could not write a background response's events");
                let failure = if matches!(e, StoreError::Unavailable(_)) {
                    Failure::StoreUnreachable
                } else {
                    Failure::Unwritable
                };
                runs.abandon(&id, failure);
                return;
            }
        }
        if terminal {
            return;
        }
    }
}

/// Append one batch, retrying while the store is unavailable and the run's lease is sure to
/// hold (past that, another process may fail the run).
async fn write(runs: &BackgroundRuns, batch: EventBatch) -> Result<Appended, StoreError> {
    let (mut attempt, mut pause) = (1, FIRST_RETRY);
    loop {
        match runs.store.append(batch.clone()).await {
            Err(StoreError::Unavailable(detail)) if runs.lease_holds(&batch.id) => {
                tracing::warn!(response_id = %batch.id, attempt, %detail, "store unavailable; retrying the event batch");
                tokio::time::sleep(pause).await;
                attempt += 1;
                pause = (pause * 2).min(LAST_RETRY);
            }
            result => return result,
        }
    }
}

/// Whether an event of this type ends the stream.
pub(crate) fn is_terminal_kind(kind: &str) -> bool {
    matches!(kind, "response.completed" | "response.incomplete" | "response.failed")
}

#[cfg(test)]
mod tests {
    use respgw_protocol::{CreateResponseRequest, ResponseObject};

    use super::*;

    fn response(status: ResponseStatus) -> ResponseObject {
        let request = CreateResponseRequest::from_slice(br#"{"model":"m","input":"hi","background":true}"#)
            .unwrap()
            .validate(&Default::default())
            .unwrap();
        ResponseObject { status, ..ResponseObject::in_progress("resp_1".into(), 1, &request) }
    }

    #[test]
    fn lifecycle_events_carry_the_runs_state_and_others_do_not() {
        let event = ResponseEvent::Queued { response: Box::new(response(ResponseStatus::Queued)) };
        let (stored, state) = stored_event(&event, 1).unwrap();
        assert_eq!(stored.kind, "response.queued");
        let data: serde_json::Value = serde_json::from_str(&stored.data).unwrap();
        assert_eq!((data["sequence_number"].as_u64(), data["response"]["background"].as_bool()), (Some(1), Some(true)));
        let (status, body) = state.unwrap();
        assert_eq!(status, RunStatus::Queued);
        assert!(body.contains("\"status\":\"queued\""));

        let delta = ResponseEvent::OutputTextDelta {
            item_id: "msg_1".into(),
            output_index: 0,
            content_index: 0,
            delta: "x".into(),
            logprobs: [],
        };
        let (stored, state) = stored_event(&delta, 7).unwrap();
        assert!(state.is_none());
        assert!(stored.data.ends_with("\"sequence_number\":7}"), "{}", stored.data);
    }

    #[tokio::test]
    async fn a_stopped_sink_refuses_events_and_the_terminal_event_carries_the_save() {
        let (tx, mut rx) = mpsc::channel(8);
        let (stop, stopped) = watch::channel(None);
        let mut sink = BackgroundSink::new(tx, stopped, 2);
        sink.save_with_terminal(NewResponse {
            id: "resp_1".into(),
            owner: "default".into(),
            previous_response_id: None,
            model: "m".into(),
            created_at: 1,
            status: "completed".into(),
            response: serde_json::json!({}),
            history_from: None,
            input: Vec::new(),
            output: Vec::new(),
            conversation: None,
            rounds: Vec::new(),
        });
        sink.send(ResponseEvent::InProgress { response: Box::new(response(ResponseStatus::InProgress)) })
            .await
            .unwrap();
        sink.send(ResponseEvent::Completed { response: Box::new(response(ResponseStatus::Completed)) }).await.unwrap();
        assert!(sink.ended());
        let first = rx.recv().await.unwrap();
        assert!((first.event.seq, first.save.is_none(), first.terminal) == (2, true, false));
        let last = rx.recv().await.unwrap();
        assert!((last.event.seq, last.save.is_some(), last.terminal) == (3, true, true));
        // Nothing follows the terminal event; nor anything once the run must stop.
        assert!(
            sink.send(ResponseEvent::InProgress { response: Box::new(response(ResponseStatus::InProgress)) })
                .await
                .is_err()
        );
        let (tx, _rx) = mpsc::channel(8);
        let mut stopped_sink = BackgroundSink::new(tx, stop.subscribe(), 0);
        stop.send(Some(StopReason::Cancelled)).unwrap();
        stopped_sink.stopped().await;
        assert_eq!(stopped_sink.why_stopped(), StopReason::Cancelled.describe());
        assert!(
            stopped_sink
                .send(ResponseEvent::InProgress { response: Box::new(response(ResponseStatus::InProgress)) })
                .await
                .is_err()
        );
    }
}
