//! The store's face for background responses: [`BackgroundStore`], the run records it keeps and
//! the event log it appends to.
//!
//! A background run is one row (its status, the response object as GET shows it while it runs,
//! which process owns it and until when its lease holds) and an append-only log of its events,
//! numbered from 0 exactly as clients see them. Every change of a run that a client can observe
//! is one transaction under the run's row lock: an owner's batch of events (with the status and
//! body its lifecycle events carry, and — for the terminal one of a `completed` or `incomplete`
//! response — the response's save), a cancel, or a lease expiry. A write by an owner whose run
//! was ended meanwhile by someone else writes nothing ([`Appended::NotActive`]), so the log never
//! has two terminal events and its numbers never skip.
//!
//! The queue of runs waiting for a run slot lives here too, so that its bounds hold across
//! processes: a run is queued from its creation until its process takes it out of the queue
//! ([`BackgroundStore::start_next`]), which picks across tenants fairly.

use crate::{NewResponse, StoreError};

/// Where a background run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Queued,
    InProgress,
    Completed,
    Incomplete,
    Failed,
    Cancelled,
}

impl RunStatus {
    /// The word stored (and shown as the response's `status`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::InProgress => "in_progress",
            RunStatus::Completed => "completed",
            RunStatus::Incomplete => "incomplete",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    /// The status a stored word names.
    pub fn parse(word: &str) -> Result<Self, StoreError> {
        Ok(match word {
            "queued" => RunStatus::Queued,
            "in_progress" => RunStatus::InProgress,
            "completed" => RunStatus::Completed,
            "incomplete" => RunStatus::Incomplete,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            other => return Err(StoreError::Corrupt(format!("unknown background run status {other:?}"))),
        })
    }

    /// Whether the run is over (no event follows).
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::InProgress)
    }
}

/// One event of a run's log, as the client receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The event's `sequence_number`.
    pub seq: u64,
    /// Its `type` (the SSE `event:` line).
    pub kind: String,
    /// Its wire JSON, `sequence_number` included (the SSE `data:` line).
    pub data: String,
}

/// A run as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub id: String,
    pub status: RunStatus,
    /// The response object JSON as GET shows it (the latest lifecycle event's snapshot).
    pub body: String,
    /// The process running it.
    pub owner: String,
    /// Unix milliseconds until which the owner's lease holds.
    pub lease_until_ms: i64,
    /// The tenant that created it: only this tenant reads, follows or cancels it (the caller
    /// compares it on the record it read by id, so another tenant's run costs the same one lookup
    /// as a missing one).
    pub tenant: String,
}

/// A new run, written when a background response is accepted.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub id: String,
    /// The process that will run it.
    pub owner: String,
    /// The tenant that created it (see [`RunRecord::tenant`]).
    pub tenant: String,
    /// Unix milliseconds until which the owner's lease holds.
    pub lease_until_ms: i64,
    /// `queued`.
    pub status: RunStatus,
    /// The response object JSON in that status.
    pub body: String,
    /// Its first events (`response.created`, `response.queued`), numbered from 0.
    pub events: Vec<StoredEvent>,
    /// How many runs may be queued, over the whole store and per tenant; the run is refused
    /// beyond either.
    pub bounds: QueueBounds,
}

/// The most runs that may wait in the queue at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueBounds {
    /// Of all tenants together (every process of the gateway).
    pub total: u64,
    /// Of one tenant.
    pub per_tenant: u64,
}

/// Whether a new run was recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Recorded, queued.
    Queued,
    /// Refused: the queue holds [`QueueBounds::total`] runs already.
    GatewayQueueFull,
    /// Refused: the queue holds [`QueueBounds::per_tenant`] runs of its tenant already.
    TenantQueueFull,
}

/// What an owner appends to its run's log in one transaction.
#[derive(Debug, Clone)]
pub struct EventBatch {
    pub id: String,
    pub owner: String,
    /// Numbered consecutively, continuing the log.
    pub events: Vec<StoredEvent>,
    /// The status and response object the batch's last lifecycle event carries, if any.
    pub state: Option<(RunStatus, String)>,
    /// The response to save with the batch (the one whose terminal event is `completed` or
    /// `incomplete`): the run ends and the response is stored atomically.
    pub save: Option<NewResponse>,
}

/// How an owner's batch went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// Written.
    Done,
    /// Nothing was written: the run is over (cancelled, or failed after its lease expired) or
    /// belongs to another process. The owner stops.
    NotActive,
}

/// What closes a run: the final response object (JSON text) and the closing events, each as its
/// `type` and its JSON without `sequence_number` (the store numbers them after the last logged
/// one).
pub type Closing = Result<(String, Vec<(String, serde_json::Value)>), StoreError>;

/// How a run is ended from outside its owner (a cancel, or a lease that expired).
#[derive(Debug, Clone)]
pub struct EndRun {
    pub id: String,
    /// `cancelled` or `failed`.
    pub status: RunStatus,
    /// Only if the lease ran out before this time (unix ms): a lease renewed meanwhile keeps
    /// the run going. `None`: whatever the lease.
    pub lease_expired_before_ms: Option<i64>,
    /// Makes the final response object and the closing events from the run's current body;
    /// the events are numbered after the last one logged.
    pub close: fn(&RunRecord, RunStatus) -> Closing,
}

/// How ending a run went.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// The run was ended now; its record as it is now.
    Now(RunRecord),
    /// It had ended already (or its lease was renewed meanwhile: then it is still running); its
    /// record as it is.
    Unchanged(RunRecord),
    /// No such run.
    Missing,
}

/// A change of a run another process made, as the store's notifications tell it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunChange {
    pub id: String,
    /// The run was ended from outside its owner ([`BackgroundStore::end_run`]): its owner must
    /// stop it. Otherwise its log grew (or its owner ended it).
    pub ended_elsewhere: bool,
}

/// Background runs and their event logs (see the module documentation).
#[async_trait::async_trait]
pub trait BackgroundStore: Send + Sync + 'static {
    /// Record a new run with its first events, queued, unless the queue is at one of its
    /// bounds (counted and written atomically, whichever process asks). Fails with
    /// [`StoreError::Duplicate`] when the id is taken.
    async fn create_run(&self, run: NewRun) -> Result<Admission, StoreError>;

    /// Take the next of `owner`'s queued runs out of the queue (it now counts as started) and
    /// return its id; `None` when it has none queued. Fair across tenants: the run of the tenant
    /// with the fewest started, unfinished runs in the whole store goes first; among those, the
    /// tenant whose last run started longest ago; then the longest queued — so tenants with runs
    /// waiting take turns, and one tenant's backlog never stands before another tenant's run.
    async fn start_next(&self, owner: &str) -> Result<Option<String>, StoreError>;

    /// Append an owner's batch (see [`EventBatch`]).
    async fn append(&self, batch: EventBatch) -> Result<Appended, StoreError>;

    /// The run `id`, if there is one.
    async fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError>;

    /// Up to `limit` events of run `id` with a number greater than `after` (all with `None`), in
    /// order.
    async fn events_after(&self, id: &str, after: Option<u64>, limit: usize) -> Result<Vec<StoredEvent>, StoreError>;

    /// End a run that has not ended (see [`EndRun`]).
    async fn end_run(&self, end: EndRun) -> Result<Ended, StoreError>;

    /// Extend the lease of `owner`'s unfinished runs among `ids` to `lease_until_ms`.
    async fn renew(&self, owner: &str, ids: &[String], lease_until_ms: i64) -> Result<(), StoreError>;

    /// Unfinished runs whose lease ran out before `now_ms` (at most `limit`).
    async fn expired(&self, now_ms: i64, limit: usize) -> Result<Vec<RunRecord>, StoreError>;

    /// Delete the event logs of runs that ended before `ended_before_ms`; returns how many runs'
    /// logs went. Their records stay (GET keeps working; resuming their stream does not).
    async fn purge_events(&self, ended_before_ms: i64) -> Result<u64, StoreError>;

    /// Wake-ups from other processes: each run whose log or status changed, as soon as the change
    /// commits (PostgreSQL `LISTEN/NOTIFY`). `None` where the store offers no such channel
    /// (SQLite): callers poll.
    async fn changes(&self) -> Result<Option<tokio::sync::mpsc::Receiver<RunChange>>, StoreError>;
}
