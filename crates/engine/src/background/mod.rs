//! Background responses: runs detached from the connection that created them, whose status and
//! events live in the store so that any process can answer a poll, a cancel or a resumed stream.
//!
//! [`BackgroundRuns`] is the process's part:
//! - starting a run (`PreparedResponse::start_background`, `start.rs`): the run's record and its
//!   first events (`response.created`, `response.queued`) are written before the client gets an
//!   answer, then the run waits on this process for one of `max_running` slots and runs with a
//!   [`sink::BackgroundSink`], which logs its events in batches;
//! - the lease: every `lease / 3` the process renews the lease of the runs it holds (queued
//!   ones included) and fails the runs of any process whose lease ran out (`closing.rs`), so a
//!   run whose process died is `failed` at most `lease + lease / 3` after its last renewal;
//! - stopping its runs that were ended from elsewhere (a cancel on another worker or host, or a
//!   lease another process found expired): told by the store's change notifications
//!   (PostgreSQL) or by polling their status every `poll_interval` (SQLite);
//! - waking followers (`follow.rs`) when a run's log grows: directly for runs of this process,
//!   through the store's notifications for the others, and by polling as a fallback;
//! - purging event logs `retention` after their run ended.

mod closing;
mod follow;
pub(crate) mod sink;
mod start;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use respgw_protocol::ApiError;
use respgw_store_api::BackgroundStore;
use respgw_store_api::background::{EndRun, Ended, RunChange, RunStatus};
use respgw_telemetry::Metrics;
use serde::{Deserialize, Serialize};
use tokio::sync::{Semaphore, watch};

pub use follow::ResumeFrom;

/// Runs expired leases are looked for at a time.
const EXPIRED_BATCH: usize = 64;

/// How often event logs past their retention are purged.
const PURGE_INTERVAL: Duration = Duration::from_secs(60);

/// The operator's settings of background responses (`--background-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackgroundSettings {
    /// Background responses one process runs at once; more wait, `queued`.
    pub max_running: usize,
    /// How long a run's lease holds without renewal; a run whose lease ran out is failed by any
    /// process.
    pub lease: Duration,
    /// How often a process looks at the store for what other processes changed when the store
    /// has no notifications (SQLite), and as a fallback when it has (PostgreSQL).
    pub poll_interval: Duration,
    /// How long the event log of a finished run is kept (resumable); its record stays.
    pub retention: Duration,
}

impl Default for BackgroundSettings {
    fn default() -> Self {
        BackgroundSettings {
            max_running: 16,
            lease: Duration::from_secs(15),
            poll_interval: Duration::from_millis(100),
            retention: Duration::from_secs(24 * 3600),
        }
    }
}

impl BackgroundSettings {
    /// How often leases are renewed and expired ones looked for.
    fn heartbeat(&self) -> Duration {
        (self.lease / 3).max(Duration::from_millis(50))
    }
}

/// Unix milliseconds now.
fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

/// A run this process holds: how to stop it.
struct HeldRun {
    /// Set to `true` to stop the run (it was ended elsewhere, or its lease was lost).
    stop: watch::Sender<bool>,
}

/// The background runs of one process (see the module documentation).
pub struct BackgroundRuns {
    store: Arc<dyn BackgroundStore>,
    settings: BackgroundSettings,
    /// This process's name in the store's `owner` column; unique per process start.
    owner: String,
    /// One permit per run that may run at once.
    slots: Arc<Semaphore>,
    /// Runs this process holds (queued or running), by id.
    held: Mutex<HashMap<String, HeldRun>>,
    /// Followers in this process waiting for a run's log to grow, by run id.
    wakes: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Whether the store notifies changes (followers then poll only as a fallback).
    notified: bool,
    metrics: Metrics,
}

impl BackgroundRuns {
    /// The background runs of this process on `store`, with their lease, stop and purge loop
    /// started (it ends when the returned value is dropped).
    pub async fn start(
        store: Arc<dyn BackgroundStore>,
        settings: BackgroundSettings,
        metrics: Metrics,
    ) -> Result<Arc<Self>, respgw_store_api::StoreError> {
        let changes = store.changes().await?;
        let runs = Arc::new(BackgroundRuns {
            store,
            settings,
            owner: format!("{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()),
            slots: Arc::new(Semaphore::new(settings.max_running.max(1))),
            held: Mutex::new(HashMap::new()),
            wakes: Mutex::new(HashMap::new()),
            notified: changes.is_some(),
            metrics,
        });
        tokio::spawn(upkeep(Arc::downgrade(&runs)));
        if let Some(changes) = changes {
            tokio::spawn(dispatch_changes(Arc::downgrade(&runs), changes));
        }
        Ok(runs)
    }

    pub(crate) fn store(&self) -> &dyn BackgroundStore {
        self.store.as_ref()
    }

    /// Hold run `id`: renew its lease until it is released; the returned receiver turns `true`
    /// when the run must stop.
    fn hold(&self, id: &str) -> watch::Receiver<bool> {
        let (stop, stopped) = watch::channel(false);
        self.held.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), HeldRun { stop });
        stopped
    }

    fn release(&self, id: &str) {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// Stop run `id` if this process holds it.
    fn stop(&self, id: &str) {
        if let Some(run) = self.held.lock().unwrap_or_else(PoisonError::into_inner).get(id) {
            let _ = run.stop.send(true);
        }
    }

    fn held_ids(&self) -> Vec<String> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect()
    }

    /// A receiver that changes whenever run `id`'s log may have grown.
    fn watch(&self, id: &str) -> watch::Receiver<u64> {
        let mut wakes = self.wakes.lock().unwrap_or_else(PoisonError::into_inner);
        wakes.retain(|_, sender| sender.receiver_count() > 0);
        wakes.entry(id.to_owned()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// Tell this process's followers of run `id` that its log may have grown.
    fn wake(&self, id: &str) {
        if let Some(sender) = self.wakes.lock().unwrap_or_else(PoisonError::into_inner).get(id) {
            sender.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// End run `id` from outside its owner (see [`closing`]), then stop it here and wake its
    /// followers if that changed it.
    async fn end(&self, end: EndRun) -> Result<Ended, respgw_store_api::StoreError> {
        let id = end.id.clone();
        let ended = self.store.end_run(end).await?;
        if let Ended::Now(_) = &ended {
            self.stop(&id);
            self.wake(&id);
        }
        Ok(ended)
    }
}

/// The lease, stop and purge loop of one process; ends when its [`BackgroundRuns`] is dropped.
async fn upkeep(runs: Weak<BackgroundRuns>) {
    let Some(settings) = runs.upgrade().map(|r| r.settings) else { return };
    let heartbeat = settings.heartbeat();
    let mut tick = tokio::time::interval(settings.poll_interval.min(heartbeat));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_heartbeat = tokio::time::Instant::now();
    let mut last_purge = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let Some(runs) = runs.upgrade() else { return };
        let held = runs.held_ids();
        // Without notifications, runs ended elsewhere are found by looking at their status.
        if !runs.notified || last_heartbeat.elapsed() >= heartbeat {
            stop_ended_elsewhere(&runs, &held).await;
        }
        if last_heartbeat.elapsed() >= heartbeat {
            last_heartbeat = tokio::time::Instant::now();
            let until = now_ms().saturating_add(i64::try_from(settings.lease.as_millis()).unwrap_or(i64::MAX));
            if let Err(e) = runs.store.renew(&runs.owner, &held, until).await {
                tracing::warn!(error = %e, "could not renew the leases of background responses");
            }
            closing::fail_expired(&runs).await;
        }
        if last_purge.elapsed() >= PURGE_INTERVAL {
            last_purge = tokio::time::Instant::now();
            let before = now_ms().saturating_sub(i64::try_from(settings.retention.as_millis()).unwrap_or(i64::MAX));
            match runs.store.purge_events(before).await {
                Ok(0) => {}
                Ok(purged) => tracing::info!(runs = purged, "purged the event logs of finished background responses"),
                Err(e) => tracing::warn!(error = %e, "could not purge background event logs"),
            }
        }
    }
}

/// Stop the held runs whose record says they ended (cancelled, or failed by a lease expiry).
async fn stop_ended_elsewhere(runs: &BackgroundRuns, held: &[String]) {
    for id in held {
        match runs.store.run(id).await {
            Ok(Some(run)) if run.status.is_terminal() || run.owner != runs.owner => runs.stop(id),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, response_id = %id, "could not read a background response's status"),
        }
    }
}

/// Hand the store's change notifications to this process: wake the followers of the run, and
/// stop it if it was ended elsewhere (and is held here).
async fn dispatch_changes(runs: Weak<BackgroundRuns>, mut changes: tokio::sync::mpsc::Receiver<RunChange>) {
    while let Some(change) = changes.recv().await {
        let Some(runs) = runs.upgrade() else { return };
        runs.wake(&change.id);
        if change.ended_elsewhere {
            runs.stop(&change.id);
        }
    }
}

impl crate::Engine {
    /// The background runs, or a 400 naming `param` when they are off.
    fn background_runs(&self, param: &str) -> Result<&Arc<BackgroundRuns>, ApiError> {
        self.background()
            .ok_or_else(|| ApiError::invalid(param, "Background responses are not enabled on this gateway."))
    }

    /// `POST /v1/responses/{id}/cancel` for tenant `owner`: the cancelled response (again, for
    /// one already cancelled). 404 for an unknown id or another tenant's; 400 for a response that
    /// is not a background one or has finished otherwise.
    pub async fn cancel_background(&self, owner: &str, id: &str) -> Result<serde_json::Value, ApiError> {
        let runs = self.background_runs("response_id")?;
        // Another tenant's run is a missing one: found (or not) by the same lookup.
        let own = runs.store.run(id).await.map_err(|e| crate::run::store_error(&e))?.is_some_and(|r| r.tenant == owner);
        match if own { runs.cancel(id).await? } else { None } {
            Some(response) => Ok(response),
            None if self.stored(owner).is_stored(id).await? => Err(not_background(id, "cancelled")),
            None => Err(ApiError::response_not_found(id)),
        }
    }

    /// `GET /v1/responses/{id}?stream=true`: the events of background response `id` from `from`
    /// on, as logged, to the terminal event, for tenant `owner`. 404 for an unknown id or another
    /// tenant's; 400 for a response that is not a background one or whose events are no longer
    /// kept.
    pub async fn resume_background(
        &self,
        owner: &str,
        id: &str,
        from: ResumeFrom,
    ) -> Result<tokio::sync::mpsc::Receiver<respgw_store_api::background::StoredEvent>, ApiError> {
        let runs = self.background_runs("stream")?;
        let run = runs.store.run(id).await.map_err(|e| crate::run::store_error(&e))?;
        // Another tenant's run is a missing one.
        let Some(run) = run.filter(|run| run.tenant == owner) else {
            return Err(if self.stored(owner).is_stored(id).await? {
                not_background(id, "streamed again")
            } else {
                ApiError::response_not_found(id)
            });
        };
        // A finished response that was deleted is gone, its events with it.
        if matches!(run.status, RunStatus::Completed | RunStatus::Incomplete)
            && !self.stored(owner).is_stored(id).await?
        {
            return Err(ApiError::response_not_found(id));
        }
        runs.follow(&run, from).await
    }
}

/// 400 for a response that was not created with `background: true`.
fn not_background(id: &str, what: &str) -> ApiError {
    ApiError::invalid(
        "response_id",
        format!("Response '{id}' cannot be {what}: only responses created with 'background: true' can."),
    )
}
