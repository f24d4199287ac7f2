//! What both backends share for background runs: numbering the events that close a run from
//! outside its owner (a cancel, an expired lease), and the clock of its timestamps.

use respgw_store_api::StoreError;
use respgw_store_api::background::StoredEvent;

/// Number closing events from `first` on: their wire JSON with `sequence_number` added.
pub(crate) fn number_events(
    events: Vec<(String, serde_json::Value)>,
    first: i64,
) -> Result<Vec<StoredEvent>, StoreError> {
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
