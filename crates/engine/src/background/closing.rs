//! Ending a background run from outside its run: a client's cancel, a lease that ran out, a log
//! that could not be written, a store that could not be reached for longer than the lease.
//!
//! Each is one store transaction ([`respgw_store_api::BackgroundStore::end_run`]) that sets the
//! final status and response object and appends the closing events after the last logged one,
//! so a resumed stream still ends with exactly one terminal event. A cancelled response ends
//! with `response.failed` whose response has status `cancelled` (the event types have no
//! cancelled one); a failed one with `error` and `response.failed`, as every failed stream.

use respgw_protocol::events::StreamError;
use respgw_protocol::{ApiError, ErrorType, ResponseEvent};
use respgw_store_api::StoreError;
use respgw_store_api::background::{Closing, EndRun, Ended, RunRecord, RunStatus};
use serde_json::{Value, json};

use super::{BackgroundRuns, EXPIRED_BATCH, Failure, StopReason, now_ms};

/// What a client is told about a run whose lease ran out, as another process sees it: it cannot
/// tell a process that stopped from one that lost the store.
const LOST: &str = "The lease of this background response ran out before it finished: the gateway process running \
                    it did not renew it (that process stopped, or could not reach the store).";

/// What a client is told about a run its process stopped because the store could not be reached.
const STORE_UNREACHABLE: &str = "The store could not be reached for longer than this background response's lease, \
                                 so its run was stopped: its events could not be written nor its lease renewed.";

/// What a client is told about a run whose events could not be written.
const UNWRITABLE: &str = "The events of this background response could not be written to the store.";

/// The run's response object with `status`, and `error` when it failed.
fn final_body(run: &RunRecord, status: RunStatus, error: Option<(&str, &str)>) -> Result<Value, StoreError> {
    let mut body: Value = serde_json::from_str(&run.body)
        .map_err(|e| StoreError::Corrupt(format!("background response {}: {e}", run.id)))?;
    let Some(object) = body.as_object_mut() else {
        return Err(StoreError::Corrupt(format!("background response {} is not an object", run.id)));
    };
    object.insert("status".into(), status.as_str().into());
    object.insert("completed_at".into(), Value::Null);
    object.insert("usage".into(), Value::Null);
    if let Some((code, message)) = error {
        object.insert("error".into(), json!({ "code": code, "message": message }));
    }
    Ok(body)
}

fn encode(body: &Value) -> Result<String, StoreError> {
    serde_json::to_string(body).map_err(|e| StoreError::Corrupt(format!("cannot encode a response: {e}")))
}

fn close_cancelled(run: &RunRecord, status: RunStatus) -> Closing {
    let body = final_body(run, status, None)?;
    let failed = json!({ "type": "response.failed", "response": body });
    Ok((encode(&body)?, vec![("response.failed".into(), failed)]))
}

/// `error` + `response.failed` with `message`.
fn close_failed(run: &RunRecord, status: RunStatus, message: &str) -> Closing {
    let code = "server_error";
    let body = final_body(run, status, Some((code, message)))?;
    let error = ResponseEvent::error(StreamError {
        error_type: ErrorType::ApiError,
        code: Some(code.into()),
        message: message.into(),
        param: None,
    });
    let error =
        serde_json::to_value(&error).map_err(|e| StoreError::Corrupt(format!("cannot encode an event: {e}")))?;
    let failed = json!({ "type": "response.failed", "response": body });
    Ok((encode(&body)?, vec![("error".into(), error), ("response.failed".into(), failed)]))
}

fn close_lost(run: &RunRecord, status: RunStatus) -> Closing {
    close_failed(run, status, LOST)
}

fn close_unwritable(run: &RunRecord, status: RunStatus) -> Closing {
    close_failed(run, status, UNWRITABLE)
}

fn close_store_unreachable(run: &RunRecord, status: RunStatus) -> Closing {
    close_failed(run, status, STORE_UNREACHABLE)
}

fn parse(body: &str, id: &str) -> Result<Value, ApiError> {
    serde_json::from_str(body).map_err(|e| ApiError::internal(format!("The stored response {id} is unreadable: {e}")))
}

impl BackgroundRuns {
    /// Cancel run `id`: the cancelled response; the same again for one already cancelled. `None`
    /// when there is no such run. 400 when it has finished otherwise.
    pub(crate) async fn cancel(&self, id: &str) -> Result<Option<Value>, ApiError> {
        let end = EndRun {
            id: id.to_owned(),
            status: RunStatus::Cancelled,
            lease_expired_before_ms: None,
            close: close_cancelled,
        };
        match self.end(end, StopReason::Cancelled).await? {
            Ended::Now(run) => {
                self.metrics.background_cancelled();
                tracing::info!(response_id = %id, "background response cancelled");
                parse(&run.body, id).map(Some)
            }
            Ended::Unchanged(run) if run.status == RunStatus::Cancelled => parse(&run.body, id).map(Some),
            Ended::Unchanged(run) => Err(ApiError::invalid(
                "response_id",
                format!(
                    "Response '{id}' cannot be cancelled: it has already finished (status {}).",
                    run.status.as_str()
                ),
            )
            .with_code("response_already_finished")),
            Ended::Missing => Ok(None),
        }
    }
}

/// Fail the runs, of any process, whose lease ran out.
pub(super) async fn fail_expired(runs: &BackgroundRuns) {
    let now = now_ms();
    let expired = match runs.store.expired(now, EXPIRED_BATCH).await {
        Ok(expired) => expired,
        Err(e) => {
            tracing::warn!(error = %e, "could not look for background responses with an expired lease");
            return;
        }
    };
    for run in expired {
        // This process's own run expired only because its renewals failed: it says so.
        let own = run.owner == runs.owner;
        if own && runs.unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains_key(&run.id) {
            continue;
        }
        let end = EndRun {
            id: run.id.clone(),
            status: RunStatus::Failed,
            lease_expired_before_ms: Some(now),
            close: if own { close_store_unreachable } else { close_lost },
        };
        let reason = if own { StopReason::LeaseLost } else { StopReason::EndedElsewhere };
        match runs.end(end, reason).await {
            Ok(Ended::Now(_)) => {
                runs.metrics.background_lost();
                tracing::warn!(response_id = %run.id, owner = %run.owner, "background response failed: its process stopped renewing its lease");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(response_id = %run.id, error = %e, "could not fail a background response with an expired lease")
            }
        }
    }
}

/// Record the runs this process stopped as failed, each for its reason; those the store does
/// not take yet stay for the next call. A run ended meanwhile by another process (its lease
/// expired) stays as that one ended it.
pub(super) async fn record_failures(runs: &BackgroundRuns) {
    let pending: Vec<(String, Failure)> = {
        let unrecorded = runs.unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        unrecorded.iter().map(|(id, failure)| (id.clone(), *failure)).collect()
    };
    for (id, failure) in pending {
        let (close, reason): (fn(&RunRecord, RunStatus) -> Closing, _) = match failure {
            Failure::StoreUnreachable => (close_store_unreachable, StopReason::LeaseLost),
            Failure::Unwritable => (close_unwritable, StopReason::Unwritable),
        };
        let end = EndRun { id: id.clone(), status: RunStatus::Failed, lease_expired_before_ms: None, close };
        match runs.end(end, reason).await {
            Ok(ended) => {
                if let Ended::Now(_) = ended {
                    tracing::warn!(response_id = %id, ?failure, "background response failed");
                }
                runs.unrecorded.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&id);
            }
            Err(e) => {
                tracing::debug!(response_id = %id, error = %e, "could not record a failed background response yet")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> RunRecord {
        RunRecord {
            id: "resp_1".into(),
            status: RunStatus::InProgress,
            body: json!({"id": "resp_1", "status": "in_progress", "background": true, "error": null, "usage": null})
                .to_string(),
            owner: "p".into(),
            lease_until_ms: 0,
            tenant: "default".into(),
        }
    }

    #[test]
    fn a_cancelled_run_ends_with_one_failed_event_carrying_the_cancelled_response() {
        let (body, events) = close_cancelled(&running(), RunStatus::Cancelled).unwrap();
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!((body["status"].as_str(), body["background"].as_bool()), (Some("cancelled"), Some(true)));
        assert!(body["error"].is_null());
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].0, "response.failed");
        assert_eq!(events[0].1["response"], body);
    }

    #[test]
    fn a_lost_run_ends_with_error_then_failed_saying_why() {
        let (body, events) = close_lost(&running(), RunStatus::Failed).unwrap();
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["status"], "failed");
        assert_eq!(body["error"]["code"], "server_error");
        let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(kinds, ["error", "response.failed"]);
        assert_eq!(events[0].1["type"], "error");
        assert_eq!(events[0].1["error"]["message"], LOST);
    }

    #[test]
    fn a_run_stopped_by_a_store_outage_ends_saying_so() {
        let (_, events) = close_store_unreachable(&running(), RunStatus::Failed).unwrap();
        assert_eq!(events[0].1["error"]["message"], STORE_UNREACHABLE);
        assert!(STORE_UNREACHABLE.contains("store could not be reached"));
        assert!(!LOST.contains("stopped before it finished"), "an expired lease does not claim a process stopped");
    }

    #[test]
    fn an_unreadable_record_is_reported_not_closed() {
        let run = RunRecord { body: "not json".into(), ..running() };
        assert!(matches!(close_lost(&run, RunStatus::Failed), Err(StoreError::Corrupt(_))));
    }
}
