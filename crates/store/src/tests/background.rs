//! Behaviour of background runs and their event logs, on both backends (run by `both!` in the
//! parent module).

use respgw_store_api::background::{
    Admission, Appended, Closing, EndRun, Ended, EventBatch, NewRun, QueueBounds, RunRecord, RunStatus, StoredEvent,
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

/// Bounds no test reaches unless it means to.
const ROOMY: QueueBounds = QueueBounds { total: 1000, per_tenant: 1000 };

fn new_run(id: &str, owner: &str, lease_until_ms: i64) -> NewRun {
    tenants_run(id, owner, OWNER, lease_until_ms)
}

fn tenants_run(id: &str, owner: &str, tenant: &str, lease_until_ms: i64) -> NewRun {
    NewRun {
        id: id.into(),
        owner: owner.into(),
        tenant: tenant.into(),
        lease_until_ms,
        status: RunStatus::Queued,
        body: body(id, "queued"),
        events: vec![event(0, "response.created"), event(1, "response.queued")],
        bounds: ROOMY,
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
    assert_eq!(runs.create_run(new_run("r1", "me", FAR)).await.unwrap(), Admission::Queued);
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

pub(super) async fn the_queue_refuses_runs_beyond_its_bounds_for_the_gateway_and_per_tenant(backend: Backend) {
    let store = backend.open().await;
    let runs = store.background();
    let bounded = |id: &str, owner: &str, tenant: &str| NewRun {
        bounds: QueueBounds { total: 3, per_tenant: 2 },
        ..tenants_run(id, owner, tenant, FAR)
    };
    // Counted across owners (processes): two of tenant a's on two processes fill its share.
    assert_eq!(runs.create_run(bounded("a1", "p1", "a")).await.unwrap(), Admission::Queued);
    assert_eq!(runs.create_run(bounded("a2", "p2", "a")).await.unwrap(), Admission::Queued);
    assert_eq!(runs.create_run(bounded("a3", "p1", "a")).await.unwrap(), Admission::TenantQueueFull);
    assert_eq!(runs.create_run(bounded("b1", "p1", "b")).await.unwrap(), Admission::Queued);
    assert_eq!(runs.create_run(bounded("c1", "p2", "c")).await.unwrap(), Admission::GatewayQueueFull);
    // A refused run is not recorded.
    assert!(runs.run("a3").await.unwrap().is_none());
    assert!(runs.run("c1").await.unwrap().is_none());
    // A run leaves the queue when it starts or ends: room again.
    assert_eq!(runs.start_next("p1").await.unwrap().as_deref(), Some("a1"));
    assert_eq!(runs.create_run(bounded("a3", "p1", "a")).await.unwrap(), Admission::Queued);
    let cancel = EndRun { id: "b1".into(), status: RunStatus::Cancelled, lease_expired_before_ms: None, close };
    runs.end_run(cancel).await.unwrap();
    assert_eq!(runs.create_run(bounded("c1", "p2", "c")).await.unwrap(), Admission::Queued);
}

pub(super) async fn the_next_run_started_is_of_the_tenant_with_fewest_running(backend: Backend) {
    let store = backend.open().await;
    let runs = store.background();
    // Tenant a queues a backlog first; b and c one run each after it.
    for n in 0..4 {
        runs.create_run(tenants_run(&format!("a{n}"), "me", "a", FAR)).await.unwrap();
    }
    runs.create_run(tenants_run("b0", "me", "b", FAR)).await.unwrap();
    runs.create_run(tenants_run("c0", "me", "c", FAR)).await.unwrap();
    // Another process's queued run is never this process's to start.
    runs.create_run(tenants_run("z0", "other", "z", FAR)).await.unwrap();
    let mut started = Vec::new();
    while let Some(id) = runs.start_next("me").await.unwrap() {
        started.push(id);
    }
    // Round robin while tenants have runs waiting: a's backlog does not hold b's or c's run.
    assert_eq!(started, ["a0", "b0", "c0", "a1", "a2", "a3"]);
    // With nothing running, the tenant whose last run started longest ago goes first: d, which
    // never ran, before a's next, though a's was queued first.
    for id in ["a0", "a1", "a2", "a3", "b0", "c0"] {
        let done = EndRun { id: id.into(), status: RunStatus::Cancelled, lease_expired_before_ms: None, close };
        runs.end_run(done).await.unwrap();
    }
    runs.create_run(tenants_run("a4", "me", "a", FAR)).await.unwrap();
    runs.create_run(tenants_run("d0", "me", "d", FAR)).await.unwrap();
    assert_eq!(runs.start_next("me").await.unwrap().as_deref(), Some("d0"));
    assert_eq!(runs.start_next("me").await.unwrap().as_deref(), Some("a4"));
    // Runs started by other processes count too: z's run started there puts z's next one here
    // after c's, though c's was queued later.
    assert_eq!(runs.start_next("other").await.unwrap().as_deref(), Some("z0"));
    runs.create_run(tenants_run("z1", "me", "z", FAR)).await.unwrap();
    runs.create_run(tenants_run("c1", "me", "c", FAR)).await.unwrap();
    assert_eq!(runs.start_next("me").await.unwrap().as_deref(), Some("c1"));
    assert_eq!(runs.start_next("me").await.unwrap().as_deref(), Some("z1"));
    assert_eq!(runs.start_next("me").await.unwrap(), None);
}
