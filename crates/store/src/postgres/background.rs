//! [`BackgroundStore`] on PostgreSQL: background runs and their event logs next to the
//! responses, and `LISTEN/NOTIFY` as the wake-up between processes and hosts.
//!
//! Every change locks the run's row first, so an owner's batch, a cancel and a lease expiry take
//! turns, and the log stays numbered without gaps. An owner's batch is one statement (one round
//! trip): its `UPDATE` of the run's row takes the lock and checks that the run is still the
//! owner's and continues where the log ends (re-checked on the newest row version after a wait),
//! and the events are inserted only if it matched; a batch that saves the response is that
//! statement and the save in one transaction. A run ended from outside (cancel, lease expiry)
//! is a short transaction that locks the row `FOR UPDATE`. Each change also sends
//! `NOTIFY respgw_background, '<run id>'`, which PostgreSQL delivers to
//! every listening process when (and only if) it commits; a run ended from outside its owner is
//! notified as `'<run id> ended'`, so its owner stops it without reading it first. Listeners get each run's wake-ups over
//! one dedicated connection per process; a notification lost while that connection reconnects
//! is made up by the followers' fallback polling.

use sqlx::Row;
use sqlx::postgres::{PgConnection, PgListener, PgPoolOptions};

use super::{PostgresStore, map_err, save_on, sqlstate};
use crate::StoreError;
use crate::background::{RunLedger, end_run};
use respgw_store_api::background::{
    Admission, Appended, BackgroundStore, EndRun, Ended, EventBatch, NewRun, RunChange, RunRecord, RunStatus,
    StoredEvent,
};

/// The notification channel.
const CHANNEL: &str = "respgw_background";

/// Notifications waiting for the process's dispatcher before the listener waits.
const CHANGES_BUFFER: usize = 1024;

/// A new run (of tenant `$10`, queued at `$11`) and its first events (`$7` numbers, `$8` types,
/// `$9` data), in one statement.
const INSERT_RUN: &str = "
    WITH run AS (
        INSERT INTO background_runs (id, status, body, owner, lease_until, next_seq, tenant, queued_at)
        VALUES ($1, $2, $3, $4, $5, $6, $10, $11)
        RETURNING id
    )
    INSERT INTO background_events (run_id, seq, kind, data)
    SELECT run.id, e.seq, e.kind, e.data
    FROM run, unnest($7::bigint[], $8::text[], $9::text[]) AS e(seq, kind, data)";

/// An owner's batch in one statement: the run's row is updated (status `$5`, body `$6`, ended if
/// `$7`) only if it is still `$2`'s, unfinished, and its log ends where the batch starts (`$3`);
/// the events (`$8`–`$10`) are inserted, and the listeners notified (`$11`, payload the id),
/// only if it was. Returns a row when the batch was written.
const APPEND: &str = "
    WITH run AS (
        UPDATE background_runs SET status = coalesce($5, status), body = coalesce($6, body), next_seq = $4,
            ended_at = CASE WHEN $7 THEN (extract(epoch FROM clock_timestamp()) * 1000)::bigint ELSE ended_at END
        WHERE id = $1 AND owner = $2 AND ended_at IS NULL AND next_seq = $3
        RETURNING id
    ),
    logged AS (
        INSERT INTO background_events (run_id, seq, kind, data)
        SELECT run.id, e.seq, e.kind, e.data
        FROM run, unnest($8::bigint[], $9::text[], $10::text[]) AS e(seq, kind, data)
    )
    SELECT pg_notify($11, run.id) FROM run";

/// Serialises the creation of runs across processes (a transaction-scoped advisory lock), so
/// that the queue's count cannot change between counting and inserting.
const LOCK_QUEUE: &str = "SELECT pg_advisory_xact_lock(7260351990461820727)";

/// Queued runs: all of them, and tenant `$1`'s.
const COUNT_QUEUED: &str = "
    SELECT count(*), count(*) FILTER (WHERE tenant = $1) FROM background_runs
    WHERE ended_at IS NULL AND started_at IS NULL";

/// Take owner `$1`'s next queued run out of the queue at `$2` (see
/// [`BackgroundStore::start_next`]): the tenant with the fewest running first, then the one whose
/// last run started longest ago (round robin), then the longest queued; and note when its
/// tenant's run started. Only this owner takes its runs, so no two processes race for one row.
const START_NEXT: &str = "
    WITH next AS (
        UPDATE background_runs SET started_at = $2 WHERE id = (
            SELECT q.id FROM background_runs q
            WHERE q.owner = $1 AND q.ended_at IS NULL AND q.started_at IS NULL
            ORDER BY (SELECT count(*) FROM background_runs r
                      WHERE r.tenant = q.tenant AND r.ended_at IS NULL AND r.started_at IS NOT NULL),
                coalesce((SELECT t.last_started_at FROM background_tenants t WHERE t.tenant = q.tenant), 0),
                q.queued_at, q.id
            LIMIT 1)
            AND started_at IS NULL AND ended_at IS NULL
        RETURNING id, tenant
    ),
    turn AS (
        INSERT INTO background_tenants (tenant, last_started_at) SELECT tenant, $2 FROM next
        ON CONFLICT (tenant) DO UPDATE SET last_started_at = excluded.last_started_at
    )
    SELECT id FROM next";

const INSERT_EVENTS: &str = "
    INSERT INTO background_events (run_id, seq, kind, data)
    SELECT $1, e.seq, e.kind, e.data FROM unnest($2::bigint[], $3::text[], $4::text[]) AS e(seq, kind, data)";

const SELECT_RUN: &str =
    "SELECT id, status, body, owner, lease_until, next_seq, tenant FROM background_runs WHERE id = $1";

const LOCK_RUN: &str =
    "SELECT id, status, body, owner, lease_until, next_seq, tenant FROM background_runs WHERE id = $1 FOR UPDATE";

const SELECT_EVENTS: &str =
    "SELECT seq, kind, data FROM background_events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";

const UPDATE_RUN: &str = "
    UPDATE background_runs SET status = $2, body = $3, next_seq = $4,
        ended_at = CASE WHEN $5 THEN (extract(epoch FROM clock_timestamp()) * 1000)::bigint ELSE ended_at END
    WHERE id = $1";

const NOTIFY: &str = "SELECT pg_notify($1, $2)";

const RENEW: &str =
    "UPDATE background_runs SET lease_until = $2 WHERE owner = $1 AND ended_at IS NULL AND id = ANY($3::text[])";

const EXPIRED: &str = "
    SELECT id, status, body, owner, lease_until, next_seq, tenant FROM background_runs
    WHERE ended_at IS NULL AND lease_until < $1 ORDER BY lease_until LIMIT $2";

const PURGE: &str = "
    WITH gone AS (
        DELETE FROM background_events WHERE run_id IN (
            SELECT id FROM background_runs WHERE ended_at IS NOT NULL AND ended_at < $1)
        RETURNING run_id)
    SELECT count(DISTINCT run_id) FROM gone";

/// A run's row, with the number its next event gets.
fn decode_run(row: &sqlx::postgres::PgRow) -> Result<(RunRecord, i64), StoreError> {
    let status: String = row.try_get(1).map_err(map_err)?;
    let record = RunRecord {
        id: row.try_get(0).map_err(map_err)?,
        status: RunStatus::parse(&status)?,
        body: row.try_get(2).map_err(map_err)?,
        owner: row.try_get(3).map_err(map_err)?,
        lease_until_ms: row.try_get(4).map_err(map_err)?,
        tenant: row.try_get(6).map_err(map_err)?,
    };
    Ok((record, row.try_get(5).map_err(map_err)?))
}

/// A batch of events as the three arrays the statements take.
struct Columns<'a> {
    seqs: Vec<i64>,
    kinds: Vec<&'a str>,
    data: Vec<&'a str>,
}

fn columns(events: &[StoredEvent]) -> Result<Columns<'_>, StoreError> {
    let mut seqs = Vec::with_capacity(events.len());
    for event in events {
        seqs.push(i64::try_from(event.seq).map_err(|_| StoreError::Corrupt("event number out of range".into()))?);
    }
    let kinds = events.iter().map(|e| e.kind.as_str()).collect();
    let data = events.iter().map(|e| e.data.as_str()).collect();
    Ok(Columns { seqs, kinds, data })
}

/// The suffix of a notification about a run ended from outside its owner.
const ENDED: &str = " ended";

impl RunLedger for PgConnection {
    async fn run_for_write(&mut self, id: &str) -> Result<Option<(RunRecord, i64)>, StoreError> {
        let row = sqlx::query(LOCK_RUN).bind(id).fetch_optional(&mut *self).await.map_err(map_err)?;
        row.map(|row| decode_run(&row)).transpose()
    }

    async fn insert_events(&mut self, id: &str, events: &[StoredEvent]) -> Result<(), StoreError> {
        let Columns { seqs, kinds, data } = columns(events)?;
        sqlx::query(INSERT_EVENTS)
            .bind(id)
            .bind(&seqs)
            .bind(&kinds)
            .bind(&data)
            .execute(&mut *self)
            .await
            .map_err(map_err)?;
        Ok(())
    }

    /// Also wakes the listeners, saying the run was ended from outside, when this commits.
    async fn mark_ended(&mut self, id: &str, status: RunStatus, body: &str, next_seq: i64) -> Result<(), StoreError> {
        sqlx::query(UPDATE_RUN)
            .bind(id)
            .bind(status.as_str())
            .bind(body)
            .bind(next_seq)
            .bind(status.is_terminal())
            .execute(&mut *self)
            .await
            .map_err(map_err)?;
        sqlx::query(NOTIFY).bind(CHANNEL).bind(format!("{id}{ENDED}")).execute(&mut *self).await.map_err(map_err)?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl BackgroundStore for PostgresStore {
    async fn create_run(&self, run: NewRun) -> Result<Admission, StoreError> {
        let Columns { seqs, kinds, data } = columns(&run.events)?;
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        sqlx::query(LOCK_QUEUE).execute(&mut *tx).await.map_err(map_err)?;
        let (queued, queued_of_tenant): (i64, i64) =
            sqlx::query_as(COUNT_QUEUED).bind(&run.tenant).fetch_one(&mut *tx).await.map_err(map_err)?;
        // Dropping `tx` rolls back (and releases the lock).
        if u64::try_from(queued).unwrap_or(0) >= run.bounds.total {
            return Ok(Admission::GatewayQueueFull);
        }
        if u64::try_from(queued_of_tenant).unwrap_or(0) >= run.bounds.per_tenant {
            return Ok(Admission::TenantQueueFull);
        }
        let inserted = sqlx::query(INSERT_RUN)
            .bind(&run.id)
            .bind(run.status.as_str())
            .bind(&run.body)
            .bind(&run.owner)
            .bind(run.lease_until_ms)
            .bind(run.events.len() as i64)
            .bind(&seqs)
            .bind(&kinds)
            .bind(&data)
            .bind(&run.tenant)
            .bind(crate::background::now_ms())
            .execute(&mut *tx)
            .await;
        match inserted {
            Ok(_) => {}
            Err(e) if sqlstate(&e).as_deref() == Some("23505") => return Err(StoreError::Duplicate(run.id)),
            Err(e) => return Err(map_err(e)),
        }
        tx.commit().await.map_err(map_err)?;
        Ok(Admission::Queued)
    }

    async fn start_next(&self, owner: &str) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar(START_NEXT)
            .bind(owner)
            .bind(crate::background::now_ms())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)
    }

    async fn append(&self, batch: EventBatch) -> Result<Appended, StoreError> {
        let Some(first) = batch.events.first().map(|e| e.seq) else { return Ok(Appended::Done) };
        let first = i64::try_from(first).map_err(|_| StoreError::Corrupt("event number out of range".into()))?;
        let Columns { seqs, kinds, data } = columns(&batch.events)?;
        let (status, body) = match &batch.state {
            Some((status, body)) => (Some(status.as_str()), Some(body.as_str())),
            None => (None, None),
        };
        let terminal = batch.state.as_ref().is_some_and(|(status, _)| status.is_terminal());
        let query = sqlx::query(APPEND)
            .bind(&batch.id)
            .bind(&batch.owner)
            .bind(first)
            .bind(first + batch.events.len() as i64)
            .bind(status)
            .bind(body)
            .bind(terminal)
            .bind(&seqs)
            .bind(&kinds)
            .bind(&data)
            .bind(CHANNEL);
        let Some(save) = batch.save else {
            let written = query.fetch_optional(&self.pool).await.map_err(map_err)?;
            return Ok(if written.is_some() { Appended::Done } else { Appended::NotActive });
        };
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        if query.fetch_optional(&mut *tx).await.map_err(map_err)?.is_none() {
            // Dropping `tx` rolls back (nothing was written).
            return Ok(Appended::NotActive);
        }
        save_on(&mut tx, save).await?;
        tx.commit().await.map_err(map_err)?;
        Ok(Appended::Done)
    }

    async fn run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = &*super::lookup_key(id);
        let row = sqlx::query(SELECT_RUN).bind(id).fetch_optional(&self.pool).await.map_err(map_err)?;
        row.map(|row| decode_run(&row).map(|(run, _)| run)).transpose()
    }

    async fn events_after(&self, id: &str, after: Option<u64>, limit: usize) -> Result<Vec<StoredEvent>, StoreError> {
        let id = &*super::lookup_key(id);
        let after = after.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows =
            sqlx::query(SELECT_EVENTS).bind(id).bind(after).bind(limit).fetch_all(&self.pool).await.map_err(map_err)?;
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: i64 = row.try_get(0).map_err(map_err)?;
            let seq = u64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("event number {seq}")))?;
            events.push(StoredEvent {
                seq,
                kind: row.try_get(1).map_err(map_err)?,
                data: row.try_get(2).map_err(map_err)?,
            });
        }
        Ok(events)
    }

    async fn end_run(&self, end: EndRun) -> Result<Ended, StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        // Dropping `tx` on an error, or when nothing changed, rolls back.
        let ended = end_run(&mut *tx, end).await?;
        if let Ended::Now(_) = ended {
            tx.commit().await.map_err(map_err)?;
        }
        Ok(ended)
    }

    async fn renew(&self, owner: &str, ids: &[String], lease_until_ms: i64) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        sqlx::query(RENEW).bind(owner).bind(lease_until_ms).bind(ids).execute(&self.pool).await.map_err(map_err)?;
        Ok(())
    }

    async fn expired(&self, now_ms: i64, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = sqlx::query(EXPIRED).bind(now_ms).bind(limit).fetch_all(&self.pool).await.map_err(map_err)?;
        rows.iter().map(|row| decode_run(row).map(|(run, _)| run)).collect()
    }

    async fn purge_events(&self, ended_before_ms: i64) -> Result<u64, StoreError> {
        let runs: i64 = sqlx::query_scalar(PURGE).bind(ended_before_ms).fetch_one(&self.pool).await.map_err(map_err)?;
        Ok(u64::try_from(runs).unwrap_or(0))
    }

    async fn changes(&self) -> Result<Option<tokio::sync::mpsc::Receiver<RunChange>>, StoreError> {
        let pool = PgPoolOptions::new().max_connections(1).connect_lazy_with(self.listen_options.as_ref().clone());
        let mut listener = PgListener::connect_with(&pool).await.map_err(map_err)?;
        listener.listen(CHANNEL).await.map_err(map_err)?;
        let (tx, rx) = tokio::sync::mpsc::channel(CHANGES_BUFFER);
        tokio::spawn(async move {
            loop {
                match listener.try_recv().await {
                    Ok(Some(notification)) => {
                        let payload = notification.payload();
                        let change = match payload.strip_suffix(ENDED) {
                            Some(id) => RunChange { id: id.to_owned(), ended_elsewhere: true },
                            None => RunChange { id: payload.to_owned(), ended_elsewhere: false },
                        };
                        if tx.send(change).await.is_err() {
                            return;
                        }
                    }
                    // The connection was lost; the next call re-establishes it with its LISTEN.
                    Ok(None) => tracing::warn!("background notifications: connection lost, reconnecting"),
                    Err(e) => {
                        tracing::warn!(error = %super::error_detail(&e), "background notifications: cannot listen; retrying");
                        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    }
                }
                if tx.is_closed() {
                    return;
                }
            }
        });
        Ok(Some(rx))
    }
}
