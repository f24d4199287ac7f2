//! Background responses: runs detached from the connection that created them, whose status and
//! events live in the store so that any process can answer a poll, a cancel or a resumed stream.
//!
//! [`BackgroundRuns`] is the process's part:
//! - starting a run (`PreparedResponse::start_background`, `start.rs`): the run's record and its
//!   first events (`response.created`, `response.queued`) are written before the client gets an
//!   answer — unless the store's queue is at one of its bounds (`max_queued` in all,
//!   `max_queued_per_tenant` per tenant: 429) — then the run waits on this process for one of
//!   `max_running` slots and runs with a [`sink::BackgroundSink`], which logs its events in
//!   batches;
//! - scheduling: whenever a slot is free and runs wait, the store picks which of this process's
//!   queued runs starts ([`BackgroundStore::start_next`]: the tenant with the fewest running
//!   first), so one tenant's backlog does not hold up another tenant's run;
//! - the lease: every `lease / 3` the process renews the lease of the runs it holds (queued
//!   ones included) and fails the runs of any process whose lease ran out (`closing.rs`), so a
//!   run whose process died is `failed` at most `lease + lease / 3` after its last renewal. A
//!   process whose renewals fail (the store is unreachable) stops each run once a whole lease
//!   has passed since its last confirmed renewal — from then on another process may fail it —
//!   and records the run as failed for that reason as soon as the store answers again;
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
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tokio::time::Instant;

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
    /// Runs that may be queued at once in the whole gateway (every process on the store); more
    /// are refused (429).
    pub max_queued: u64,
    /// Runs one tenant may have queued at once in the whole gateway; more are refused (429).
    pub max_queued_per_tenant: u64,
    /// How long a background stream may go without an event before it sends an SSE comment
    /// (`: keep-alive`), so that clients and proxies see the connection is alive.
    pub keep_alive: Duration,
}

impl Default for BackgroundSettings {
    fn default() -> Self {
        BackgroundSettings {
            max_running: 16,
            lease: Duration::from_secs(15),
            poll_interval: Duration::from_millis(100),
            retention: Duration::from_secs(24 * 3600),
            max_queued: 1000,
            max_queued_per_tenant: 100,
            keep_alive: Duration::from_secs(15),
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

/// Why this process stops one of its runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// A client cancelled it (through any process).
    Cancelled,
    /// Another process ended it: it found the run's lease expired.
    EndedElsewhere,
    /// Its lease could not be renewed for a whole lease (the store was unreachable).
    LeaseLost,
    /// Its events could not be written to the store.
    Unwritable,
}

impl StopReason {
    /// What the log says when the run stops for this reason.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            StopReason::Cancelled => "background response cancelled by a client; its run stopped",
            StopReason::EndedElsewhere => {
                "background response failed by another process (its lease had expired); its run stopped"
            }
            StopReason::LeaseLost => {
                "background response's lease could not be renewed (the store was unreachable); its run stopped"
            }
            StopReason::Unwritable => "background response's events could not be written; its run stopped",
        }
    }

    /// The reason a run ended elsewhere with `status` was stopped for.
    fn ended_as(status: RunStatus) -> Self {
        if status == RunStatus::Cancelled { StopReason::Cancelled } else { StopReason::EndedElsewhere }
    }
}

/// Why this process fails one of its runs itself (recorded as soon as the store takes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The store was unreachable for longer than the run's lease.
    StoreUnreachable,
    /// The store refused its events.
    Unwritable,
}

/// A run this process holds: how to stop it, and how long its lease is sure to hold.
struct HeldRun {
    /// Set to the reason to stop the run (it was ended elsewhere, or its lease was lost).
    stop: watch::Sender<Option<StopReason>>,
    /// When the last renewal of its lease that the store confirmed was sent (or the run was
    /// recorded): the lease holds for `lease` from then.
    lease_from: Instant,
    /// Stopped after a whole lease without a confirmed renewal.
    lapsed: bool,
}

/// The background runs of one process (see the module documentation).
pub struct BackgroundRuns {
    store: Arc<dyn BackgroundStore>,
    settings: BackgroundSettings,
    /// This process's name in the store's `owner` column; unique per process start.
    owner: String,
    /// One permit per run that may run at once.
    slots: Arc<Semaphore>,
    /// This process's queued runs, by id: each is handed its slot through its sender when the
    /// store picks it.
    waiting: Mutex<HashMap<String, oneshot::Sender<OwnedSemaphorePermit>>>,
    /// Held while picking runs for free slots: one pick at a time per process.
    picking: tokio::sync::Mutex<()>,
    /// Runs this process holds (queued or running), by id.
    held: Mutex<HashMap<String, HeldRun>>,
    /// Runs this process stopped and must record as failed, with why; retried until the store
    /// takes it.
    unrecorded: Mutex<HashMap<String, Failure>>,
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
            waiting: Mutex::new(HashMap::new()),
            picking: tokio::sync::Mutex::new(()),
            held: Mutex::new(HashMap::new()),
            unrecorded: Mutex::new(HashMap::new()),
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

    /// How long a background stream may go without an event before it sends a keep-alive.
    pub fn keep_alive(&self) -> Duration {
        self.settings.keep_alive
    }

    /// Hold run `id`, queued: renew its lease until it is released. Returns the receiver that
    /// says why the run must stop, and the one that hands it its slot when its turn comes.
    fn hold(&self, id: &str) -> (watch::Receiver<Option<StopReason>>, oneshot::Receiver<OwnedSemaphorePermit>) {
        let (stop, stopped) = watch::channel(None);
        let (start, started) = oneshot::channel();
        let run = HeldRun { stop, lease_from: Instant::now(), lapsed: false };
        self.held.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), run);
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), start);
        (stopped, started)
    }

    fn release(&self, id: &str) {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        self.held.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// Stop run `id` for `reason` if this process holds it (the first reason given stands).
    fn stop(&self, id: &str, reason: StopReason) {
        if let Some(run) = self.held.lock().unwrap_or_else(PoisonError::into_inner).get(id) {
            run.stop.send_if_modified(|stop| {
                let first = stop.is_none();
                if first {
                    *stop = Some(reason);
                }
                first
            });
        }
    }

    /// Stop run `id`, which was ended elsewhere, saying how it ended when the store tells.
    async fn stop_ended(&self, id: &str) {
        let reason = match self.store.run(id).await {
            Ok(Some(run)) => StopReason::ended_as(run.status),
            _ => StopReason::EndedElsewhere,
        };
        self.stop(id, reason);
    }

    /// Stop run `id` and record it as failed for `failure` (now, or once the store answers).
    fn abandon(&self, id: &str, failure: Failure) {
        let reason = match failure {
            Failure::StoreUnreachable => StopReason::LeaseLost,
            Failure::Unwritable => StopReason::Unwritable,
        };
        self.stop(id, reason);
        self.unrecorded.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), failure);
    }

    /// Whether run `id`'s lease is sure to hold (it is held here and not lapsed).
    fn lease_holds(&self, id: &str) -> bool {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(id).is_some_and(|run| !run.lapsed && run.lease_from.elapsed() < self.settings.lease)
    }

    /// The held runs whose lease is still sure to hold; those that went a whole lease without a
    /// confirmed renewal are marked lapsed and returned second, once.
    fn leases(&self) -> (Vec<String>, Vec<String>) {
        let (mut holding, mut lapsed) = (Vec::new(), Vec::new());
        for (id, run) in self.held.lock().unwrap_or_else(PoisonError::into_inner).iter_mut() {
            if run.lapsed {
                continue;
            }
            if run.lease_from.elapsed() >= self.settings.lease {
                run.lapsed = true;
                lapsed.push(id.clone());
            } else {
                holding.push(id.clone());
            }
        }
        (holding, lapsed)
    }

    /// The store confirmed the renewal of `ids` sent at `sent`.
    fn renewed(&self, ids: &[String], sent: Instant) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        for id in ids {
            if let Some(run) = held.get_mut(id) {
                run.lease_from = sent;
            }
        }
    }

    fn held_ids(&self) -> Vec<String> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect()
    }

    /// Give free slots to queued runs of this process, in the order the store picks them.
    async fn dispatch(&self) {
        let _picking = self.picking.lock().await;
        loop {
            if self.waiting.lock().unwrap_or_else(PoisonError::into_inner).is_empty() {
                return;
            }
            let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else { return };
            let next = match self.store.start_next(&self.owner).await {
                Ok(Some(id)) => id,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "could not pick the next queued background response; retrying");
                    return;
                }
            };
            match self.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&next) {
                // A run that stopped meanwhile hands the slot back by dropping it.
                Some(start) => drop(start.send(slot)),
                None => tracing::warn!(response_id = %next, "a queued background response has no run waiting here"),
            }
        }
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

    /// End run `id` from outside its run (see [`closing`]), then stop it here for `reason` and
    /// wake its followers if that changed it.
    async fn end(&self, end: EndRun, reason: StopReason) -> Result<Ended, respgw_store_api::StoreError> {
        let id = end.id.clone();
        let ended = self.store.end_run(end).await?;
        if let Ended::Now(_) = &ended {
            self.stop(&id, reason);
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
        closing::record_failures(&runs).await;
        // Runs left waiting after a failed pick get another one.
        runs.dispatch().await;
        if last_heartbeat.elapsed() >= heartbeat {
            last_heartbeat = tokio::time::Instant::now();
            let (holding, lapsed) = runs.leases();
            for id in &lapsed {
                tracing::warn!(response_id = %id, "no lease renewal confirmed for a whole lease; stopping the background response");
                runs.abandon(id, Failure::StoreUnreachable);
            }
            let sent = Instant::now();
            let until = now_ms().saturating_add(i64::try_from(settings.lease.as_millis()).unwrap_or(i64::MAX));
            match runs.store.renew(&runs.owner, &holding, until).await {
                Ok(()) => runs.renewed(&holding, sent),
                Err(e) => tracing::warn!(error = %e, "could not renew the leases of background responses"),
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
            Ok(Some(run)) if run.status.is_terminal() || run.owner != runs.owner => {
                runs.stop(id, StopReason::ended_as(run.status));
            }
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
        if change.ended_elsewhere && runs.held.lock().unwrap_or_else(PoisonError::into_inner).contains_key(&change.id) {
            runs.stop_ended(&change.id).await;
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
        let own = runs.store.run(id).await?.is_some_and(|r| r.tenant == owner);
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
        let run = runs.store.run(id).await?;
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
