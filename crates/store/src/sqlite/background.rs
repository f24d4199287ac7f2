//! [`BackgroundStore`] on SQLite: background runs and their event logs in the same file as the
//! responses.
//!
//! Every write runs inside a `BEGIN IMMEDIATE` transaction of the process's writer thread, which
//! serialises it with every other write to the file (from any process): reading the run's row and
//! changing it are therefore atomic, as PostgreSQL's row lock makes them there. SQLite has no
//! notification channel between processes, so [`BackgroundStore::changes`] is `None` and
//! followers poll.

use rusqlite::{Connection, OptionalExtension, params};

use super::responses::insert_response;
use super::writer::Growth;
use super::{SqliteStore, map_err, run_now};
use crate::StoreError;
use crate::background::{RunLedger, accepts_batch, end_run, now_ms};
use crate::encoding::EncodedResponse;
use respgw_store_api::background::{
    Admission, Appended, BackgroundStore, EndRun, Ended, EventBatch, NewRun, RunChange, RunRecord, RunStatus,
    StoredEvent,
};

const INSERT_RUN: &str = "
    INSERT INTO background_runs (id, status, body, owner, lease_until, next_seq, tenant, queued_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// Queued runs: all of them, and tenant `?1`'s.
const COUNT_QUEUED: &str = "
    SELECT COUNT(*), COALESCE(SUM(tenant = ?1), 0) FROM background_runs
    WHERE ended_at IS NULL AND started_at IS NULL";

/// Take owner `?1`'s next queued run out of the queue at `?2` (see
/// [`BackgroundStore::start_next`]): the tenant with the fewest running first, then the one whose
/// last run started longest ago (round robin), then the longest queued.
const START_NEXT: &str = "
    UPDATE background_runs SET started_at = ?2 WHERE id = (
        SELECT q.id FROM background_runs q
        WHERE q.owner = ?1 AND q.ended_at IS NULL AND q.started_at IS NULL
        ORDER BY (SELECT COUNT(*) FROM background_runs r
                  WHERE r.tenant = q.tenant AND r.ended_at IS NULL AND r.started_at IS NOT NULL),
            COALESCE((SELECT t.last_started_at FROM background_tenants t WHERE t.tenant = q.tenant), 0),
            q.queued_at, q.id
        LIMIT 1)
    RETURNING id, tenant";

/// Tenant `?1`'s last run started at `?2`.
const TENANT_STARTED: &str = "
    INSERT INTO background_tenants (tenant, last_started_at) VALUES (?1, ?2)
    ON CONFLICT (tenant) DO UPDATE SET last_started_at = excluded.last_started_at";

const INSERT_EVENT: &str = "INSERT INTO background_events (run_id, seq, kind, data) VALUES (?1, ?2, ?3, ?4)";

const SELECT_RUN: &str =
    "SELECT id, status, body, owner, lease_until, next_seq, tenant FROM background_runs WHERE id = ?1";

const SELECT_EVENTS: &str = "
    SELECT seq, kind, data FROM background_events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3";

const UPDATE_RUN: &str = "
    UPDATE background_runs SET status = ?2, body = ?3, next_seq = ?4,
        ended_at = CASE WHEN ?5 THEN ?6 ELSE ended_at END
    WHERE id = ?1";

const RENEW: &str = "
    UPDATE background_runs SET lease_until = ?2
    WHERE owner = ?1 AND ended_at IS NULL AND id IN (SELECT value FROM json_each(?3))";

const EXPIRED: &str = "
    SELECT id, status, body, owner, lease_until, next_seq, tenant FROM background_runs
    WHERE ended_at IS NULL AND lease_until < ?1 ORDER BY lease_until LIMIT ?2";

const PURGE: &str = "
    DELETE FROM background_events WHERE run_id IN (
        SELECT id FROM background_runs WHERE ended_at IS NOT NULL AND ended_at < ?1)";

const PURGE_RUNS: &str = "
    SELECT COUNT(DISTINCT run_id) FROM background_events WHERE run_id IN (
        SELECT id FROM background_runs WHERE ended_at IS NOT NULL AND ended_at < ?1)";

/// A run's row, with the number its next event gets.
fn read_run(tx: &Connection, id: &str) -> Result<Option<(RunRecord, i64)>, StoreError> {
    let row = tx
        .prepare_cached(SELECT_RUN)
        .and_then(|mut s| {
            s.query_row([id], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, i64>(4)?,
                    row.get::<_, i64>(5)?,
                    row.get::<_, String>(6)?,
                ))
            })
            .optional()
        })
        .map_err(map_err)?;
    let Some((id, status, body, owner, lease_until_ms, next_seq, tenant)) = row else { return Ok(None) };
    Ok(Some((RunRecord { id, status: RunStatus::parse(&status)?, body, owner, lease_until_ms, tenant }, next_seq)))
}

fn insert_events(tx: &Connection, id: &str, events: &[StoredEvent]) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached(INSERT_EVENT).map_err(map_err)?;
    for event in events {
        let seq = i64::try_from(event.seq).map_err(|_| StoreError::Corrupt("event number out of range".into()))?;
        stmt.execute(params![id, seq, event.kind, event.data]).map_err(map_err)?;
    }
    Ok(())
}

/// A connection inside the writer's transaction, as the lease rules use it (its futures never
/// wait: see [`run_now`]).
struct Ledger<'a>(&'a Connection);

impl RunLedger for Ledger<'_> {
    async fn run_for_write(&mut self, id: &str) -> Result<Option<(RunRecord, i64)>, StoreError> {
        read_run(self.0, id)
    }

    async fn insert_events(&mut self, id: &str, events: &[StoredEvent]) -> Result<(), StoreError> {
        insert_events(self.0, id, events)
    }

    async fn mark_ended(&mut self, id: &str, status: RunStatus, body: &str, next_seq: i64) -> Result<(), StoreError> {
        self.0
            .prepare_cached(UPDATE_RUN)
            .and_then(|mut s| s.execute(params![id, status.as_str(), body, next_seq, true, now_ms()]))
            .map(drop)
            .map_err(map_err)
    }
}

#[async_trait::async_trait]
impl BackgroundStore for SqliteStore {
    async fn create_run(&self, run: NewRun) -> Result<Admission, StoreError> {
        self.write(Growth::Adds, move |tx| {
            // The write transaction holds the file's write lock: the count cannot change before
            // the insert, whichever process writes.
            let (queued, queued_of_tenant): (i64, i64) = tx
                .prepare_cached(COUNT_QUEUED)
                .and_then(|mut s| s.query_row([&run.tenant], |row| Ok((row.get(0)?, row.get(1)?))))
                .map_err(map_err)?;
            if u64::try_from(queued).unwrap_or(0) >= run.bounds.total {
                return Ok(Admission::GatewayQueueFull);
            }
            if u64::try_from(queued_of_tenant).unwrap_or(0) >= run.bounds.per_tenant {
                return Ok(Admission::TenantQueueFull);
            }
            let next = run.events.len() as i64;
            let inserted = tx.prepare_cached(INSERT_RUN).and_then(|mut s| {
                s.execute(params![
                    run.id,
                    run.status.as_str(),
                    run.body,
                    run.owner,
                    run.lease_until_ms,
                    next,
                    run.tenant,
                    now_ms()
                ])
            });
            match inserted {
                Ok(_) => {}
                Err(e) if super::is_unique_violation(&e) => return Err(StoreError::Duplicate(run.id)),
                Err(e) => return Err(map_err(e)),
            }
            insert_events(tx, &run.id, &run.events)?;
            Ok(Admission::Queued)
        })
        .await
    }

    async fn start_next(&self, owner: &str) -> Result<Option<String>, StoreError> {
        let owner = owner.to_owned();
        self.write(Growth::Bounded, move |tx| {
            let now = now_ms();
            let next: Option<(String, String)> = tx
                .prepare_cached(START_NEXT)
                .and_then(|mut s| s.query_row(params![owner, now], |row| Ok((row.get(0)?, row.get(1)?))).optional())
                .map_err(map_err)?;
            let Some((id, tenant)) = next else { return Ok(None) };
            tx.prepare_cached(TENANT_STARTED).and_then(|mut s| s.execute(params![tenant, now])).map_err(map_err)?;
            Ok(Some(id))
        })
        .await
    }

    async fn append(&self, batch: EventBatch) -> Result<Appended, StoreError> {
        let save = batch.save.map(EncodedResponse::new).transpose()?;
        let (id, owner, events, state) = (batch.id, batch.owner, batch.events, batch.state);
        self.write(Growth::Adds, move |tx| {
            let Some((run, next_seq)) = read_run(tx, &id)? else { return Ok(Appended::NotActive) };
            if !accepts_batch(&run, next_seq, &owner, events.first().map(|e| e.seq as i64)) {
                return Ok(Appended::NotActive);
            }
            insert_events(tx, &id, &events)?;
            if let Some(save) = &save {
                insert_response(tx, save)?;
            }
            let (status, body) = match &state {
                Some((status, body)) => (*status, body.as_str()),
                None => (run.status, run.body.as_str()),
            };
            let next = next_seq + events.len() as i64;
            tx.prepare_cached(UPDATE_RUN)
                .and_then(|mut s| s.execute(params![id, status.as_str(), body, next, status.is_terminal(), now_ms()]))
                .map_err(map_err)?;
            Ok(Appended::Done)
        })
        .await
    }

    async fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = id.to_owned();
        self.read(move |conn| Ok(read_run(conn, &id)?.map(|(run, _)| run))).await
    }

    async fn events_after(&self, id: &str, after: Option<u64>, limit: usize) -> Result<Vec<StoredEvent>, StoreError> {
        let id = id.to_owned();
        let after = after.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(SELECT_EVENTS).map_err(map_err)?;
            let rows = stmt
                .query_map(params![id, after, limit], |row| {
                    Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?))
                })
                .map_err(map_err)?;
            let mut events = Vec::new();
            for row in rows {
                let (seq, kind, data) = row.map_err(map_err)?;
                let seq = u64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("event number {seq}")))?;
                events.push(StoredEvent { seq, kind, data });
            }
            Ok(events)
        })
        .await
    }

    async fn end_run(&self, end: EndRun) -> Result<Ended, StoreError> {
        self.write(Growth::Adds, move |tx| run_now(end_run(&mut Ledger(tx), end))).await
    }

    async fn renew(&self, owner: &str, ids: &[String], lease_until_ms: i64) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let owner = owner.to_owned();
        let ids = serde_json::to_string(ids).map_err(|e| StoreError::Corrupt(format!("cannot encode ids: {e}")))?;
        self.write(Growth::Bounded, move |conn| {
            conn.prepare_cached(RENEW)
                .and_then(|mut s| s.execute(params![owner, lease_until_ms, ids]))
                .map_err(map_err)?;
            Ok(())
        })
        .await
    }

    async fn expired(&self, now_ms: i64, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(EXPIRED).map_err(map_err)?;
            let rows = stmt
                .query_map(params![now_ms, limit], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, String>(3)?,
                        row.get::<_, i64>(4)?,
                        row.get::<_, String>(6)?,
                    ))
                })
                .map_err(map_err)?;
            let mut runs = Vec::new();
            for row in rows {
                let (id, status, body, owner, lease_until_ms, tenant) = row.map_err(map_err)?;
                runs.push(RunRecord { id, status: RunStatus::parse(&status)?, body, owner, lease_until_ms, tenant });
            }
            Ok(runs)
        })
        .await
    }

    async fn purge_events(&self, ended_before_ms: i64) -> Result<u64, StoreError> {
        self.write(Growth::Bounded, move |tx| {
            let runs: i64 = tx
                .prepare_cached(PURGE_RUNS)
                .and_then(|mut s| s.query_row([ended_before_ms], |row| row.get(0)))
                .map_err(map_err)?;
            tx.prepare_cached(PURGE).and_then(|mut s| s.execute([ended_before_ms])).map_err(map_err)?;
            Ok(u64::try_from(runs).unwrap_or(0))
        })
        .await
    }

    async fn changes(&self) -> Result<Option<tokio::sync::mpsc::Receiver<RunChange>>, StoreError> {
        Ok(None)
    }
}
