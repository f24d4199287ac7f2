//! Following a background run's event log: the events after a given number as they were logged,
//! then the new ones as they are committed, up to the terminal event — the stream of the client
//! that created the run and every resumed stream alike, so they carry the same numbers.
//!
//! A follower reads the log, and when it has caught up waits for a wake-up (from this process's
//! writer, or the store's notifications) or for the poll interval, whichever comes first. It
//! never stops the run: dropping the receiver only ends the follower.

use std::sync::Arc;
use std::time::Duration;

use respgw_protocol::ApiError;
use respgw_store_api::background::{RunRecord, StoredEvent};
use tokio::sync::mpsc;

use super::BackgroundRuns;
use super::sink::is_terminal_kind;

/// Events read from the log at a time.
const PAGE: usize = 256;

/// Events buffered between a follower and a slow client before the follower waits.
const FOLLOW_BUFFER: usize = 256;

/// Where a resumed stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResumeFrom {
    /// From the first event.
    Start,
    /// After the event with this `sequence_number`.
    After(u64),
}

impl ResumeFrom {
    fn after(self) -> Option<u64> {
        match self {
            ResumeFrom::Start => None,
            ResumeFrom::After(n) => Some(n),
        }
    }
}

impl BackgroundRuns {
    /// Follow `run` from `from`. 400 when its events are no longer kept, or when `from` is past
    /// the last event logged so far.
    pub(crate) async fn follow(
        self: &Arc<Self>,
        run: &RunRecord,
        from: ResumeFrom,
    ) -> Result<mpsc::Receiver<StoredEvent>, ApiError> {
        let id = &run.id;
        if run.status.is_terminal() && self.store.events_after(id, None, 1).await?.is_empty() {
            let hours = self.settings.retention.as_secs_f64() / 3600.0;
            return Err(ApiError::invalid(
                "stream",
                format!(
                    "The events of response '{id}' are no longer kept (they are kept for {hours} h after a background \
                     response ends); retrieve it without 'stream'."
                ),
            ));
        }
        if let ResumeFrom::After(after) = from {
            // The log has no gaps: event `after` exists exactly when `after` is not past the
            // highest number written so far (a live run's later events may still come, but no
            // client can have seen them).
            let next = self.store.events_after(id, after.checked_sub(1), 1).await?;
            if next.first().map(|event| event.seq) != Some(after) {
                return Err(ApiError::invalid(
                    "starting_after",
                    format!(
                        "Invalid 'starting_after': {after} is past the last event of response '{id}' so far; \
                         resume after a sequence_number you have received."
                    ),
                ));
            }
        }
        let (tx, rx) = mpsc::channel(FOLLOW_BUFFER);
        let poll = if self.notified { self.settings.heartbeat() } else { self.settings.poll_interval };
        tokio::spawn(follow_log(Arc::clone(self), id.clone(), from.after(), poll, tx));
        Ok(rx)
    }
}

/// Send run `id`'s events after `after` to `tx` until the terminal event or until `tx` closes.
async fn follow_log(
    runs: Arc<BackgroundRuns>,
    id: String,
    mut after: Option<u64>,
    poll: Duration,
    tx: mpsc::Sender<StoredEvent>,
) {
    let mut wake = runs.watch(&id);
    // Set once the run's record says it ended: one more read then gets every event it logged.
    let mut ended = false;
    loop {
        let events = match runs.store.events_after(&id, after, PAGE).await {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(response_id = %id, error = %e, "could not read a background response's events; retrying");
                Vec::new()
            }
        };
        let full_page = events.len() == PAGE;
        let caught_up = events.is_empty();
        for event in events {
            let terminal = is_terminal_kind(&event.kind);
            after = Some(event.seq);
            if tx.send(event).await.is_err() || terminal {
                return;
            }
        }
        if full_page {
            continue;
        }
        if ended && caught_up {
            // The run ended and its log has nothing after what was sent (a resume after its
            // terminal event).
            return;
        }
        if caught_up && let Ok(Some(run)) = runs.store.run(&id).await {
            ended = run.status.is_terminal();
            if ended {
                continue;
            }
        }
        tokio::select! {
            _ = wake.changed() => {}
            () = tokio::time::sleep(poll) => {}
            () = tx.closed() => return,
        }
    }
}
