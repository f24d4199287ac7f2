//! What a background run's lease allows, written once for both backends: only the run's owner
//! (the process holding its lease) appends to its log, and only where the log ends; only the owner
//! renews the lease (the backends' `RENEW` statements), and whoever notices the lease ran out (or
//! cancels) ends the run from outside, unless it ended or the lease was renewed meanwhile. Also the
//! numbering of the events that close such a run, and the clock of a run's timestamps.

use respgw_store_api::StoreError;
use respgw_store_api::background::{EndRun, Ended, RunRecord, RunStatus, StoredEvent};

/// The statements ending a run from outside its owner is made of, run inside one write
/// transaction of a backend.
pub(crate) trait RunLedger {
    /// A run's row (locked where rows are locked), with the number its next event gets.
    async fn run_for_write(&mut self, id: &str) -> Result<Option<(RunRecord, i64)>, StoreError>;
    /// Log `events` for run `id`.
    async fn insert_events(&mut self, id: &str, events: &[StoredEvent]) -> Result<(), StoreError>;
    /// Mark run `id` ended now with `status` and `body`, its next event numbered `next_seq`.
    async fn mark_ended(&mut self, id: &str, status: RunStatus, body: &str, next_seq: i64) -> Result<(), StoreError>;
}

/// Whether the owner `owner`'s batch whose first event is numbered `first` (none: a batch of no
/// events) may be logged for `run`, whose next event is numbered `next_seq`: the run is unfinished,
/// still `owner`'s, and its log ends where the batch starts. (PostgreSQL checks the same in its
/// one-statement `APPEND`.)
pub(crate) fn accepts_batch(run: &RunRecord, next_seq: i64, owner: &str, first: Option<i64>) -> bool {
    !run.status.is_terminal() && run.owner == owner && first.is_none_or(|first| first == next_seq)
}

/// End a run from outside its owner (a cancel, an expired lease): unless it ended already, or its
/// lease was renewed after `end.lease_expired_before_ms`, log its closing events and mark it ended.
pub(crate) async fn end_run<L: RunLedger>(ledger: &mut L, end: EndRun) -> Result<Ended, StoreError> {
    let Some((run, next_seq)) = ledger.run_for_write(&end.id).await? else { return Ok(Ended::Missing) };
    let renewed = end.lease_expired_before_ms.is_some_and(|before| run.lease_until_ms >= before);
    if run.status.is_terminal() || renewed {
        return Ok(Ended::Unchanged(run));
    }
    let (body, closing) = (end.close)(&run, end.status)?;
    let events = number_events(closing, next_seq)?;
    ledger.insert_events(&end.id, &events).await?;
    ledger.mark_ended(&end.id, end.status, &body, next_seq + events.len() as i64).await?;
    Ok(Ended::Now(RunRecord { status: end.status, body, ..run }))
}

/// Number closing events from `first` on: their wire JSON with `sequence_number` added.
fn number_events(events: Vec<(String, serde_json::Value)>, first: i64) -> Result<Vec<StoredEvent>, StoreError> {
    let mut numbered = Vec::with_capacity(events.len());
    for (seq, (kind, mut value)) in (first..).zip(events) {
        let seq = u64::try_from(seq).map_err(|_| StoreError::Corrupt("event number out of range".into()))?;
        if let Some(object) = value.as_object_mut() {
            object.insert("sequence_number".into(), seq.into());
        }
        let data =
            serde_json::to_string(&value).map_err(|e| StoreError::Corrupt(format!("cannot encode event: {e}")))?;
        numbered.push(StoredEvent { seq, kind, data });
    }
    Ok(numbered)
}

/// Unix milliseconds now: SQLite's `ended_at`, and on both backends when a run was queued and
/// started (PostgreSQL takes the server's clock for `ended_at`).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
