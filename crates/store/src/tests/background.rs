//! Behaviour of background runs and their event logs, on both backends (run by `both!` in the
//! parent module).

use respgw_store_api::background::{
    Appended, Closing, EndRun, Ended, EventBatch, NewRun, RunRecord, RunStatus, StoredEvent,
};
use serde_json::json;

use super::{Backend, OWNER, assistant, new_response, user};
use crate::StoreError;

/// An event as the engine logs it.
fn event(seq: u64, kind: &str) -> StoredEvent {
    StoredEvent { seq, kind: kind.into(), data: json!({"type": kind, "sequence_number": seq}).to_string() }
}

fn body(id: &str, status: &str) -> String {
    json!({"id": id, "object": "response", "status": status, "background": true, "error": null}).to_string()
}

fn new_run(id: &str, owner: &str, lease_until_ms: i64) -> NewRun {
    NewRun {
        id: id.into(),
        owner: owner.into(),
        tenant: OWNER.into(),
        lease_until_ms,
        status: RunStatus::Queued,
        body: body(id, "queued"),
        events: vec![event(0, "response.created"), event(1, "response.queued")],
    }
}

fn batch(id: &str, owner: &str, events: Vec<StoredEvent>) -> EventBatch {
    EventBatch { id: id.into(), owner: owner.into(), events, state: None, save: None }
}

/// How the tests close a run from outside: one `response.failed` carrying the new status.
fn close(run: &RunRecord, status: RunStatus) -> Closing {
    let body = body(&run.id, status.as_str());
    let failed =
        json!({"type": "response.failed", "response": serde_json::from_str::<serde_json::Value>(&body).unwrap()});
    Ok((body, vec![("response.failed".into(), failed)]))
}

fn seqs(events: &[StoredEvent]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

const FAR: i64 = i64::MAX / 2;

pub(super) async fn a_run_logs_batches_and_ends_with_its_save_in_one_transaction(backend: Backend) {
    let store = backend.open().await;
    let runs = store.background();
    runs.create_run(new_run("r1", "me", FAR)).await.unwrap();
    assert!(matches!(runs.create_run(new_run("r1", "me", FAR)).await, Err(StoreError::Duplicate(_))));
    let mut started = batch("r1", "me", vec![event(2, "response.in_progress"), event(3, "response.output_text.delta")]);
    started.state = Some((RunStatus::InProgress, body("r1", "in_progress")));
    assert_eq!(runs.append(started).await.unwrap(), Appended::Done);
    // While it runs, the response is not stored, and the run shows its status.
    assert!(store.response(OWNER, "r1").await.unwrap().is_none());
    let run = runs.run("r1").await.unwrap().unwrap();
    assert_eq!((run.status, run.tenant.as_str()), (RunStatus::InProgress, OWNER));
    // A batch that does not continue the log is refused whole.
    assert_eq!(runs.append(batch("r1", "me", vec![event(7, "x")])).await.unwrap(), Appended::NotActive);
    // Another owner's batch is refused.
    assert_eq!(runs.append(batch("r1", "other", vec![event(4, "x")])).await.unwrap(), Appended::NotActive);

    let mut last = batch("r1", "me", vec![event(4, "response.output_text.done"), event(5, "response.completed")]);
    last.state = Some((RunStatus::Completed, body("r1", "completed")));
    last.save = Some(new_response("r1", None, vec![user("u1")], vec![assistant("a1")]));
    assert_eq!(runs.append(last).await.unwrap(), Appended::Done);
    assert!(store.response(OWNER, "r1").await.unwrap().is_some());
    assert_eq!(runs.run("r1").await.unwrap().unwrap().status, RunStatus::Completed);
    let all = runs.events_after("r1", None, 100).await.unwrap();
    assert_eq!(seqs(&all), [0, 1, 2, 3, 4, 5]);
    assert_eq!(all[3].data, event(3, "response.output_text.delta").data);
    assert_eq!(seqs(&runs.events_after("r1", Some(3), 100).await.unwrap()), [4, 5]);
    assert_eq!(seqs(&runs.events_after("r1", Some(0), 2).await.unwrap()), [1, 2]);
    // Ended: nothing more is accepted.
    assert_eq!(runs.append(batch("r1", "me", vec![event(6, "x")])).await.unwrap(), Appended::NotActive);
    assert!(runs.run("nope").await.unwrap().is_none());
}

pub(super) async fn a_cancel_closes_the_log_and_turns_the_owner_away(backend: Backend) {
    let store = backend.open().await;
    let runs = store.background();
    runs.create_run(new_run("r1", "me", FAR)).await.unwrap();
    runs.append(batch("r1", "me", vec![event(2, "response.in_progress")])).await.unwrap();
    let cancel = || EndRun { id: "r1".into(), status: RunStatus::Cancelled, lease_expired_before_ms: None, close };
    let Ended::Now(run) = runs.end_run(cancel()).await.unwrap() else { panic!("not ended") };
    assert_eq!(run.status, RunStatus::Cancelled);
    assert!(run.body.contains("cancelled"));
    // The closing event follows the last logged one, numbered on.
    let all = runs.events_after("r1", None, 100).await.unwrap();
    assert_eq!(seqs(&all), [0, 1, 2, 3]);
    assert!(all[3].data.contains("\"sequence_number\":3"), "{}", all[3].data);
    assert_eq!(all[3].kind, "response.failed");
    // The owner's next batch writes nothing; a second cancel changes nothing.
    assert_eq!(runs.append(batch("r1", "me", vec![event(3, "x")])).await.unwrap(), Appended::NotActive);
    assert!(matches!(runs.end_run(cancel()).await.unwrap(), Ended::Unchanged(r) if r.status == RunStatus::Cancelled));
    assert_eq!(runs.events_after("r1", None, 100).await.unwrap().len(), 4);
    let missing = EndRun { id: "nope".into(), ..cancel() };
    assert_eq!(runs.end_run(missing).await.unwrap(), Ended::Missing);
}

pub(super) async fn expired_leases_are_found_and_renewed_ones_are_not(backend: Backend) {
    let store = backend.open().await;
    let runs = store.background();
    runs.create_run(new_run("old", "dead", 1_000)).await.unwrap();
    runs.create_run(new_run("kept", "alive", 1_000)).await.unwrap();
    runs.renew("alive", &["kept".to_owned()], 5_000).await.unwrap();
    // Renewing another owner's run changes nothing.
    runs.renew("alive", &["old".to_owned()], 5_000).await.unwrap();
    let expired = runs.expired(2_000, 10).await.unwrap();
    assert_eq!(expired.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["old"]);
    // A lease renewed after it was found expired keeps the run going.
    let fail =
        |id: &str| EndRun { id: id.into(), status: RunStatus::Failed, lease_expired_before_ms: Some(2_000), close };
    assert!(matches!(runs.end_run(fail("kept")).await.unwrap(), Ended::Unchanged(r) if r.status == RunStatus::Queued));
    assert!(matches!(runs.end_run(fail("old")).await.unwrap(), Ended::Now(r) if r.status == RunStatus::Failed));
    assert!(runs.expired(2_000, 10).await.unwrap().is_empty());
    assert!(runs.expired(i64::MAX, 10).await.unwrap().iter().all(|r| r.id == "kept"));
}

pub(super) async fn a_failed_save_writes_none_of_its_batch(backend: Backend) {
    let store = backend.open().await;
    let runs = store.background();
    runs.create_run(new_run("r2", "me", FAR)).await.unwrap();
    // It continues a response that is not stored: the save fails, and so does the whole batch.
    let mut last = batch("r2", "me", vec![event(2, "response.completed")]);
    last.state = Some((RunStatus::Completed, body("r2", "completed")));
    let mut save = new_response("r2", Some("gone"), vec![user("u2")], vec![]);
    save.history_from = Some("gone".into());
    last.save = Some(save);
    let err = runs.append(last).await.unwrap_err();
    assert!(matches!(err, StoreError::MissingHistory(_)), "{err:?}");
    assert_eq!(runs.run("r2").await.unwrap().unwrap().status, RunStatus::Queued);
    assert_eq!(seqs(&runs.events_after("r2", None, 100).await.unwrap()), [0, 1]);
    assert!(store.response(OWNER, "r2").await.unwrap().is_none());
}

pub(super) async fn purging_drops_only_old_logs_of_ended_runs(backend: Backend) {
    let store = backend.open().await;
    let runs = store.background();
    runs.create_run(new_run("ended", "me", FAR)).await.unwrap();
    runs.create_run(new_run("running", "me", FAR)).await.unwrap();
    let cancel = EndRun { id: "ended".into(), status: RunStatus::Cancelled, lease_expired_before_ms: None, close };
    runs.end_run(cancel).await.unwrap();
    // Ended just now: not older than a minute ago.
    let minute_ago = crate::background::now_ms() - 60_000;
    assert_eq!(runs.purge_events(minute_ago).await.unwrap(), 0);
    assert_eq!(runs.purge_events(i64::MAX).await.unwrap(), 1);
    assert!(runs.events_after("ended", None, 10).await.unwrap().is_empty());
    assert_eq!(runs.events_after("running", None, 10).await.unwrap().len(), 2);
    // The record stays.
    assert_eq!(runs.run("ended").await.unwrap().unwrap().status, RunStatus::Cancelled);
}
