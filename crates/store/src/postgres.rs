//! The PostgreSQL backend: one database shared by every worker process on every host.
//!
//! Driver: sqlx (its PostgreSQL driver and pool, on tokio, TLS by rustls). Chosen over
//! tokio-postgres + deadpool-postgres because it understands libpq-style URLs in full — every
//! `sslmode` (`verify-full` included, with `sslrootcert`), `options=-c search_path=…`,
//! `application_name` — and its pool has acquire timeouts and health checks built in.
//!
//! Schema (version [`SCHEMA_VERSION`], recorded in `respgw_schema_migrations`), the same tables as
//! the SQLite backend:
//!
//! - `items(key, item_id, body)`: each item once; `key` comes from the sequence `items_key_seq`,
//!   which never hands a number out twice (a deleted item's key is never reused).
//! - `responses(id, previous_response_id, model, created_at, status, body)`; `body` is text, not
//!   `jsonb`, so that GET returns the object with its keys in their original order.
//! - `response_items(response_id, position, item_key, role)`: a response's ordered conversation
//!   (role 0 inherited, 1 input, 2 output), indexed on `item_key` for garbage collection.
//!
//! The tables live in the first schema of the connection's `search_path` (by default `public`);
//! `?options=-c%20search_path%3Drespgw` in the URL puts them elsewhere.
//!
//! # Start-up and migrations
//!
//! Every process (the supervisor first, then each worker, on every host) runs [`migrate`] when it
//! opens the store: in one transaction it takes a transaction-scoped advisory lock, reads the
//! applied versions and applies the missing ones. Processes starting together therefore take
//! turns, and all but the first find nothing to do. A database migrated by a newer gateway is
//! refused rather than written in an older layout.
//!
//! # One round trip per operation
//!
//! Each trait call is a single SQL statement (the save and the delete are chains of
//! data-modifying CTEs, atomic as one statement), so an operation costs one network round trip
//! once the pool's connection has prepared it.

use std::str::FromStr;
use std::time::Duration;

use respgw_protocol::Item;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Row};

use crate::{InputItemsList, InputItemsOrder, InputItemsPage, NewResponse, ResponseStore, StoreError, StoredItem};

/// The schema version this code reads and writes (the highest row of `respgw_schema_migrations`).
pub const SCHEMA_VERSION: i32 = 1;

/// The advisory lock key that serializes migrations ("respgw" in ASCII, then 1).
const MIGRATION_LOCK: i64 = 0x7265_7370_6777_0001;

/// How long opening the store waits for the server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request waits for a pooled connection (including opening a new one) before it fails
/// with [`StoreError::Unavailable`].
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection idle for longer than this is pinged before use (the server may have restarted
/// meanwhile). Fresher ones are not: every connection is already checked when it is released.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(30);

/// Attempts at a delete that lost a race with a concurrent save (see [`DELETE`]).
const DELETE_ATTEMPTS: u32 = 3;

const MIGRATIONS_TABLE: &str = "
    CREATE TABLE IF NOT EXISTS respgw_schema_migrations (
        version integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
    )";

/// Migration `n` (1-based) takes the schema from version `n - 1` to `n`.
const MIGRATIONS: &[&str] = &["
    CREATE SEQUENCE items_key_seq AS bigint;
    CREATE TABLE items (
        key bigint PRIMARY KEY DEFAULT nextval('items_key_seq'),
        item_id text NOT NULL,
        body text NOT NULL
    );
    ALTER SEQUENCE items_key_seq OWNED BY items.key;
    CREATE TABLE responses (
        id text PRIMARY KEY,
        previous_response_id text,
        model text NOT NULL,
        created_at bigint NOT NULL,
        status text NOT NULL,
        body text NOT NULL
    );
    CREATE TABLE response_items (
        response_id text NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
        position integer NOT NULL,
        item_key bigint NOT NULL REFERENCES items(key),
        role smallint NOT NULL,
        PRIMARY KEY (response_id, position)
    );
    CREATE INDEX response_items_item_key ON response_items (item_key);"];

/// The whole save as one statement. The response row; the inherited refs (`$7`, in order); the new
/// items (`$8` ids, `$9` bodies), each drawing its key in a materialized CTE so that a key and its
/// item stay paired; then their refs at positions from `$10`, the first `$11` being input. The
/// foreign keys are checked at the end of the statement: an inherited key whose item was deleted
/// meanwhile fails it as a whole.
const SAVE: &str = "
    WITH response AS (
        INSERT INTO responses (id, previous_response_id, model, created_at, status, body)
        VALUES ($1, $2, $3, $4, $5, $6)
        RETURNING id
    ),
    inherited AS (
        INSERT INTO response_items (response_id, position, item_key, role)
        SELECT (SELECT id FROM response), h.ord - 1, h.key, 0
        FROM unnest($7::bigint[]) WITH ORDINALITY AS h(key, ord)
    ),
    new_items AS MATERIALIZED (
        SELECT nextval('items_key_seq') AS key, n.ord, n.item_id, n.body
        FROM unnest($8::text[], $9::text[]) WITH ORDINALITY AS n(item_id, body, ord)
    ),
    stored_items AS (
        INSERT INTO items (key, item_id, body) SELECT key, item_id, body FROM new_items
    )
    INSERT INTO response_items (response_id, position, item_key, role)
    SELECT (SELECT id FROM response), $10 + n.ord - 1, n.key, CASE WHEN n.ord <= $11 THEN 1 ELSE 2 END
    FROM new_items n";

const SELECT_RESPONSE: &str = "SELECT body FROM responses WHERE id = $1";

/// LEFT JOINs from `responses`: no row at all means "not stored", one all-NULL row means "stored,
/// empty conversation".
const SELECT_CONVERSATION: &str = "
    SELECT ri.item_key, i.body
    FROM responses r
    LEFT JOIN response_items ri ON ri.response_id = r.id
    LEFT JOIN items i ON i.key = ri.item_key
    WHERE r.id = $1
    ORDER BY ri.position";

/// Input items of one response from an exclusive cursor (`$2`, an item id, NULL for none), oldest
/// first, as in the SQLite backend: one all-NULL row when the response exists but the page is
/// empty, and a cursor that is not among the input gives an empty page.
const INPUT_ITEMS_ASC: &str = "
    SELECT ri.item_key, i.body
    FROM responses r
    LEFT JOIN response_items ri
        ON ri.response_id = r.id AND ri.role = 1
        AND ($2::text IS NULL OR ri.position > (
            SELECT MIN(c.position) FROM response_items c JOIN items ci ON ci.key = c.item_key
            WHERE c.response_id = $1 AND c.role = 1 AND ci.item_id = $2))
    LEFT JOIN items i ON i.key = ri.item_key
    WHERE r.id = $1
    ORDER BY ri.position ASC
    LIMIT $3";

/// [`INPUT_ITEMS_ASC`], newest first.
const INPUT_ITEMS_DESC: &str = "
    SELECT ri.item_key, i.body
    FROM responses r
    LEFT JOIN response_items ri
        ON ri.response_id = r.id AND ri.role = 1
        AND ($2::text IS NULL OR ri.position < (
            SELECT MAX(c.position) FROM response_items c JOIN items ci ON ci.key = c.item_key
            WHERE c.response_id = $1 AND c.role = 1 AND ci.item_id = $2))
    LEFT JOIN items i ON i.key = ri.item_key
    WHERE r.id = $1
    ORDER BY ri.position DESC
    LIMIT $3";

/// The whole delete as one statement: the response, its refs, and those of its items no other
/// response references. All parts see the snapshot from before the statement, in which the
/// response's own refs still exist — hence `<> $1`. A save committing a new ref to one of those
/// items meanwhile makes the foreign key fail the statement (nothing is deleted); the caller then
/// tries again, and the item is kept.
const DELETE: &str = "
    WITH deleted AS (
        DELETE FROM responses WHERE id = $1 RETURNING id
    ),
    refs AS (
        DELETE FROM response_items WHERE response_id = $1 RETURNING item_key
    ),
    orphans AS (
        DELETE FROM items i
        WHERE i.key IN (SELECT item_key FROM refs)
        AND NOT EXISTS (SELECT 1 FROM response_items o WHERE o.item_key = i.key AND o.response_id <> $1)
    )
    SELECT count(*) FROM deleted";

/// A [`ResponseStore`] on a PostgreSQL database. Clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// `host:port/database`, for messages (never the password).
    target: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("target", &self.target).finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connect to the database at `url` (a `postgres://` or `postgresql://` URL) with a pool of up
    /// to `pool_size` connections, and create or migrate the schema. Fails with
    /// [`StoreError::Unavailable`] naming the server and database (never the password) when it
    /// cannot be reached.
    pub async fn open(url: &str, pool_size: u32) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Unavailable(format!("invalid PostgreSQL URL: {}", error_detail(&e))))?;
        let options = match options.get_application_name() {
            Some(_) => options,
            None => options.application_name("respgw"),
        };
        let target = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or(options.get_username())
        );
        // The schema is set up on a connection of its own, opened directly: if the server cannot
        // be reached, the error says why (the pool would only say it timed out).
        let at = |detail: String| format!("PostgreSQL at {target}: {detail}");
        let mut conn = match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(StoreError::Unavailable(at(format!("cannot connect: {}", error_detail(&e))))),
            Err(_) => {
                return Err(StoreError::Unavailable(at(format!(
                    "cannot connect: no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ))));
            }
        };
        let migrated = migrate(&mut conn).await;
        let _ = conn.close().await;
        migrated.map_err(|e| match e {
            StoreError::Corrupt(detail) => StoreError::Corrupt(at(detail)),
            StoreError::Unavailable(detail) => {
                StoreError::Unavailable(at(format!("cannot set up the schema: {detail}")))
            }
            other => StoreError::Unavailable(at(format!("cannot set up the schema: {other}"))),
        })?;
        let pool = PgPoolOptions::new()
            .max_connections(pool_size.max(1))
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .before_acquire(|conn, meta| {
                Box::pin(async move {
                    if meta.idle_for > PING_IF_IDLE_FOR {
                        conn.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_lazy_with(options);
        Ok(Self { pool, target })
    }

    /// The pool (tests run raw SQL on it).
    #[cfg(test)]
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Create the schema, or bring it up to [`SCHEMA_VERSION`], under an advisory lock.
async fn migrate(conn: &mut PgConnection) -> Result<(), StoreError> {
    let mut tx = conn.begin().await.map_err(map_err)?;
    match migrate_in(&mut tx).await {
        Ok(()) => tx.commit().await.map_err(map_err),
        Err(e) => {
            // Roll back now rather than when the connection is next used: that releases the lock
            // for the other processes starting at the same time.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn migrate_in(tx: &mut sqlx::PgConnection) -> Result<(), StoreError> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)").bind(MIGRATION_LOCK).execute(&mut *tx).await.map_err(map_err)?;
    sqlx::raw_sql(MIGRATIONS_TABLE).execute(&mut *tx).await.map_err(map_err)?;
    let current: i32 = sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM respgw_schema_migrations")
        .fetch_one(&mut *tx)
        .await
        .map_err(map_err)?;
    if current > SCHEMA_VERSION {
        return Err(StoreError::Corrupt(format!(
            "database schema version {current} is newer than this gateway's ({SCHEMA_VERSION}); upgrade the gateway"
        )));
    }
    for (version, sql) in (1..).zip(MIGRATIONS) {
        if version <= current {
            continue;
        }
        sqlx::raw_sql(sql).execute(&mut *tx).await.map_err(map_err)?;
        sqlx::query("INSERT INTO respgw_schema_migrations (version) VALUES ($1)")
            .bind(version)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tracing::info!(version, "applied PostgreSQL schema migration");
    }
    Ok(())
}

/// An error's message followed by those of its sources (each once).
fn error_detail(e: &(dyn std::error::Error + 'static)) -> String {
    let mut detail = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !detail.contains(&text) {
            detail.push_str(": ");
            detail.push_str(&text);
        }
        source = cause.source();
    }
    detail
}

/// The SQLSTATE of a database error, if it is one.
fn sqlstate(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) => db.code().map(|code| code.into_owned()),
        _ => None,
    }
}

/// Classify a driver error (SQLSTATE classes: 23 integrity, XX internal).
fn map_err(e: sqlx::Error) -> StoreError {
    let detail = error_detail(&e);
    match &e {
        sqlx::Error::Database(_) => match sqlstate(&e).as_deref() {
            Some("23503") => StoreError::MissingHistory(detail),
            Some("XX001" | "XX002") => StoreError::Corrupt(detail),
            // Connection, resources, shutdown, serialization, lock timeouts…: a retry may work.
            _ => StoreError::Unavailable(detail),
        },
        sqlx::Error::Decode(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. } => StoreError::Corrupt(detail),
        sqlx::Error::PoolTimedOut => StoreError::Unavailable(format!(
            "no database connection within {} s (PostgreSQL unreachable, or every pooled connection busy)",
            ACQUIRE_TIMEOUT.as_secs()
        )),
        _ => StoreError::Unavailable(detail),
    }
}

fn encode<T: serde::Serialize + ?Sized>(value: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot encode {what}: {e}")))
}

/// Decode `(item_key, body)` rows of a LEFT JOIN, skipping the all-NULL row that only says the
/// response exists.
fn decode_rows(rows: Vec<sqlx::postgres::PgRow>) -> Result<Vec<StoredItem>, StoreError> {
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let key: Option<i64> = row.try_get(0).map_err(map_err)?;
        let body: Option<String> = row.try_get(1).map_err(map_err)?;
        match (key, body) {
            (Some(key), Some(body)) => {
                let item: Item =
                    serde_json::from_str(&body).map_err(|e| StoreError::Corrupt(format!("item {key}: {e}")))?;
                items.push(StoredItem { key, item });
            }
            (Some(key), None) => return Err(StoreError::Corrupt(format!("referenced item {key} is missing"))),
            (None, _) => {}
        }
    }
    Ok(items)
}

#[async_trait::async_trait]
impl ResponseStore for PostgresStore {
    async fn save(&self, response: NewResponse) -> Result<(), StoreError> {
        let NewResponse { id, previous_response_id, model, created_at, status, response, inherited, input, output } =
            response;
        let body = encode(&response, "response")?;
        let inputs = input.len() as i64;
        let (mut item_ids, mut bodies) = (Vec::with_capacity(input.len() + output.len()), Vec::new());
        for item in input.iter().chain(&output) {
            item_ids.push(item.id().to_owned());
            bodies.push(encode(item, "item")?);
        }
        let first_position = inherited.len() as i64;
        let saved = sqlx::query(SAVE)
            .bind(&id)
            .bind(&previous_response_id)
            .bind(&model)
            .bind(created_at)
            .bind(&status)
            .bind(&body)
            .bind(&inherited)
            .bind(&item_ids)
            .bind(&bodies)
            .bind(first_position)
            .bind(inputs)
            .execute(&self.pool)
            .await;
        match saved {
            Ok(_) => Ok(()),
            Err(e) if sqlstate(&e).as_deref() == Some("23505") => Err(StoreError::Duplicate(id)),
            Err(e) if sqlstate(&e).as_deref() == Some("23503") => Err(StoreError::MissingHistory(format!(
                "an item inherited from {} no longer exists",
                previous_response_id.as_deref().unwrap_or("(none)")
            ))),
            Err(e) => Err(map_err(e)),
        }
    }

    async fn response(&self, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let body: Option<String> =
            sqlx::query_scalar(SELECT_RESPONSE).bind(id).fetch_optional(&self.pool).await.map_err(map_err)?;
        let Some(body) = body else { return Ok(None) };
        serde_json::from_str(&body).map(Some).map_err(|e| StoreError::Corrupt(format!("response {id}: {e}")))
    }

    async fn conversation(&self, id: &str) -> Result<Option<Vec<StoredItem>>, StoreError> {
        let rows = sqlx::query(SELECT_CONVERSATION).bind(id).fetch_all(&self.pool).await.map_err(map_err)?;
        if rows.is_empty() {
            return Ok(None);
        }
        decode_rows(rows).map(Some)
    }

    async fn input_items(&self, id: &str, page: InputItemsPage) -> Result<Option<InputItemsList>, StoreError> {
        let sql = match page.order {
            InputItemsOrder::Asc => INPUT_ITEMS_ASC,
            InputItemsOrder::Desc => INPUT_ITEMS_DESC,
        };
        // One row more than asked tells whether more follow.
        let fetch = i64::try_from(page.limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows =
            sqlx::query(sql).bind(id).bind(&page.after).bind(fetch).fetch_all(&self.pool).await.map_err(map_err)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut items: Vec<Item> = decode_rows(rows)?.into_iter().map(|s| s.item).collect();
        let has_more = items.len() > page.limit;
        items.truncate(page.limit);
        Ok(Some(InputItemsList { items, has_more }))
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let mut attempt = 1;
        loop {
            let deleted = sqlx::query_scalar::<_, i64>(DELETE).bind(id).fetch_one(&self.pool).await;
            match deleted {
                Ok(count) => return Ok(count > 0),
                // A concurrent save referenced one of the items being collected (23503), or the
                // two deadlocked (40P01): nothing was deleted; the next attempt sees its refs.
                Err(e) if attempt < DELETE_ATTEMPTS && matches!(sqlstate(&e).as_deref(), Some("23503" | "40P01")) => {
                    attempt += 1;
                }
                Err(e) if sqlstate(&e).as_deref() == Some("23503") => {
                    return Err(StoreError::Unavailable(format!(
                        "delete kept racing with saves: {}",
                        error_detail(&e)
                    )));
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }
}
