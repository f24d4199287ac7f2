//! Starting a background run: its record and first events are in the store before the client
//! hears of it (or a 429 when the store's queue is full); then it waits, `queued`, until the
//! store picks it for a free run slot of this process, and runs on a task of its own, detached
//! from the request — the client going away does not stop it.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use respgw_protocol::{ApiError, ResponseEvent, ResponseObject, ResponseStatus};
use respgw_store_api::background::{Admission, NewRun, QueueBounds, RunStatus};
use respgw_telemetry::BackgroundGuard;
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot, watch};
use tracing::Instrument;

use super::sink::{BackgroundSink, log_events, stored_event};
use super::{BackgroundRuns, StopReason, now_ms};
use crate::run::{PreparedResponse, end_failed};
use crate::sink::EventSink;
use crate::spawn::{RUN_DIED, panic_text};

/// Events between the run and its log writer before the run waits for the store.
const LOG_BUFFER: usize = 1024;

/// The number of the first event a run sends (after `response.created` and `response.queued`).
const FIRST_RUN_EVENT: u64 = 2;

impl PreparedResponse {
    /// Accept this response as a background run on `runs`: record it with its first events and
    /// start it; the run holds `keep_alive` until it ends (the caller's way of waiting for it).
    /// Returns the response as it stands (`queued`). 429 when the queue holds as many runs as it
    /// may (of the gateway, or of this tenant); 503 when the store cannot record it.
    pub async fn start_background<K: Send + 'static>(
        self,
        runs: &Arc<BackgroundRuns>,
        keep_alive: K,
    ) -> Result<ResponseObject, ApiError> {
        let mut queued = self.response().clone();
        queued.status = ResponseStatus::Queued;
        let announce = [
            ResponseEvent::Created { response: Box::new(queued.clone()) },
            ResponseEvent::Queued { response: Box::new(queued.clone()) },
        ];
        let mut events = Vec::with_capacity(announce.len());
        for (seq, event) in (0..).zip(&announce) {
            let (stored, _) =
                stored_event(event, seq).map_err(|e| ApiError::internal(format!("cannot encode: {e}")))?;
            events.push(stored);
        }
        let body = serde_json::to_string(&queued).map_err(|e| ApiError::internal(format!("cannot encode: {e}")))?;
        let lease = i64::try_from(runs.settings.lease.as_millis()).unwrap_or(i64::MAX);
        let id = queued.id.clone();
        let run = NewRun {
            id: id.clone(),
            owner: runs.owner.clone(),
            tenant: self.owner().to_owned(),
            lease_until_ms: now_ms().saturating_add(lease),
            status: RunStatus::Queued,
            body,
            events,
            bounds: QueueBounds { total: runs.settings.max_queued, per_tenant: runs.settings.max_queued_per_tenant },
        };
        // Held (its lease renewed) and waiting from before it exists in the store: no other
        // process can find it expired in between, and this one finds it waiting when it picks it.
        let (stop, start) = runs.hold(&id);
        let refused = match runs.store.create_run(run).await {
            Ok(Admission::Queued) => None,
            Ok(Admission::GatewayQueueFull) => Some(ApiError::rate_limited(format!(
                "Too many background responses are queued on this gateway ({}); retry later.",
                runs.settings.max_queued
            ))),
            Ok(Admission::TenantQueueFull) => Some(ApiError::rate_limited(format!(
                "Too many background responses queued: this API key's tenant may have {} queued at once. Retry \
                 after some have started.",
                runs.settings.max_queued_per_tenant
            ))),
            Err(e) => Some(ApiError::from(e)),
        };
        if let Some(refused) = refused {
            runs.release(&id);
            return Err(refused);
        }
        let queued_gauge = runs.metrics.background_queued();
        let span = tracing::info_span!("background_response", response_id = %id);
        let run = run_detached(self, Arc::clone(runs), stop, start, queued_gauge);
        tokio::spawn(
            async move {
                run.await;
                drop(keep_alive);
            }
            .instrument(span),
        );
        Ok(queued)
    }
}

/// Wait for a slot, run to the terminal event, let go of the run (and give its slot to the next).
async fn run_detached(
    mut prepared: PreparedResponse,
    runs: Arc<BackgroundRuns>,
    mut stop: watch::Receiver<Option<StopReason>>,
    start: oneshot::Receiver<OwnedSemaphorePermit>,
    queued_gauge: BackgroundGuard,
) {
    let id = prepared.id().to_owned();
    runs.dispatch().await;
    let slot = tokio::select! {
        slot = start => slot.ok(),
        _ = stop.wait_for(Option::is_some) => None,
    };
    drop(queued_gauge);
    let Some(slot) = slot else {
        let reason = stop.borrow().map_or("background response let go of while queued", StopReason::describe);
        tracing::info!("{reason}");
        runs.release(&id);
        runs.dispatch().await;
        return;
    };
    let _running = runs.metrics.background_running();
    let (tx, rx) = mpsc::channel(LOG_BUFFER);
    let writer = tokio::spawn(log_events(Arc::clone(&runs), id.clone(), rx).in_current_span());
    let mut sink = EventSink::Background(Box::new(BackgroundSink::new(tx, stop, FIRST_RUN_EVENT)));
    if let Err(panic) = AssertUnwindSafe(prepared.run_to_end(&mut sink, false)).catch_unwind().await {
        tracing::error!(
            panic = panic_text(panic.as_ref()),
            "the background response's run panicked; it ends as failed"
        );
        if !sink.ended() {
            end_failed(prepared.response_mut(), &ApiError::internal(RUN_DIED), &mut sink).await;
        }
    }
    // Closing the channel lets the writer finish with what it has.
    drop(sink);
    if let Err(e) = writer.await {
        tracing::error!(error = %e, "the background response's log writer stopped unexpectedly");
    }
    drop(slot);
    runs.release(&id);
    runs.dispatch().await;
}
