//! The SQLite backend: one database file shared by every worker process, in WAL mode.
//!
//! Schema (version 1, recorded in `PRAGMA user_version`):
//!
//! - `items(key, item_id, body)`: each item once, `body` being the serde JSON of
//!   [`respgw_protocol::Item`]. `item_id` is not unique (clients may resend ids). `key` is
//!   `AUTOINCREMENT` so a deleted item's key is never reused: an engine holding keys read before a
//!   concurrent delete must get [`StoreError::MissingHistory`], not someone else's item.
//! - `responses(id, previous_response_id, model, created_at, status, body)`: `body` is the
//!   response object JSON as text.
//! - `response_items(response_id, position, item_key, role)`: a response's ordered conversation
//!   (role 0 inherited, 1 input, 2 output), indexed on `item_key` for garbage collection.
//!
//! Writers use `BEGIN IMMEDIATE` so that they queue on the busy timeout instead of failing when a
//! read snapshot cannot be upgraded; readers are single statements and need no transaction.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use respgw_protocol::Item;
use sqlx::error::ErrorKind;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use crate::{InputItemsList, InputItemsOrder, InputItemsPage, NewResponse, ResponseStore, StoreError, StoredItem};

/// The schema version this code reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for another connection's (or process's) lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an operation waits for a free pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections per process; SQLite serialises writers anyway, this is for concurrent reads.
const MAX_CONNECTIONS: u32 = 8;
/// Attempts at the first connection and schema setup, which can hit a lock the busy timeout does
/// not cover (switching a fresh file to WAL needs an exclusive lock that is not waited for).
const OPEN_ATTEMPTS: u32 = 10;

const ROLE_INHERITED: i64 = 0;
const ROLE_INPUT: i64 = 1;
const ROLE_OUTPUT: i64 = 2;

/// The version-1 schema. Idempotent, and run inside one `BEGIN IMMEDIATE` transaction so that
/// processes racing to create it take turns.
const SCHEMA_V1: [&str; 4] = [
    "CREATE TABLE IF NOT EXISTS items (
        key INTEGER PRIMARY KEY AUTOINCREMENT,
        item_id TEXT NOT NULL,
        body TEXT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS responses (
        id TEXT PRIMARY KEY,
        previous_response_id TEXT,
        model TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        body TEXT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS response_items (
        response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        item_key INTEGER NOT NULL REFERENCES items(key),
        role INTEGER NOT NULL,
        PRIMARY KEY (response_id, position)
    )",
    "CREATE INDEX IF NOT EXISTS response_items_item_key ON response_items(item_key)",
];

/// Input items of one response from an exclusive cursor, oldest first. The LEFT JOINs from
/// `responses` yield one all-NULL row when the response exists but the page is empty, so existence
/// and the page come from one statement (one snapshot). `?2` NULL means no cursor; a cursor id
/// that is not among the input makes the bound NULL, hence an empty page.
const INPUT_ITEMS_ASC: &str = "
    SELECT ri.item_key, i.body
    FROM responses r
    LEFT JOIN response_items ri
        ON ri.response_id = r.id AND ri.role = 1
        AND (?2 IS NULL OR ri.position > (
            SELECT MIN(c.position) FROM response_items c JOIN items ci ON ci.key = c.item_key
            WHERE c.response_id = ?1 AND c.role = 1 AND ci.item_id = ?2))
    LEFT JOIN items i ON i.key = ri.item_key
    WHERE r.id = ?1
    ORDER BY ri.position ASC
    LIMIT ?3";

/// [`INPUT_ITEMS_ASC`], newest first.
const INPUT_ITEMS_DESC: &str = "
    SELECT ri.item_key, i.body
    FROM responses r
    LEFT JOIN response_items ri
        ON ri.response_id = r.id AND ri.role = 1
        AND (?2 IS NULL OR ri.position < (
            SELECT MAX(c.position) FROM response_items c JOIN items ci ON ci.key = c.item_key
            WHERE c.response_id = ?1 AND c.role = 1 AND ci.item_id = ?2))
    LEFT JOIN items i ON i.key = ri.item_key
    WHERE r.id = ?1
    ORDER BY ri.position DESC
    LIMIT ?3";

/// A [`ResponseStore`] on a SQLite database (a file shared by processes, or private in memory).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pub(crate) pool: SqlitePool,
}

impl SqliteStore {
    /// Open the database file at `path` (relative to the CWD), creating the file and schema if
    /// missing. Safe to call from several processes at once on the same file.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::new()
            .filename(path.as_ref())
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(true);
        let pool_options = SqlitePoolOptions::new().max_connections(MAX_CONNECTIONS).acquire_timeout(ACQUIRE_TIMEOUT);
        Self::connect(options, pool_options).await
    }

    /// A private in-memory store (for tests): one connection that is never closed, since the
    /// database lives only as long as a connection to it.
    pub async fn open_in_memory() -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:").map_err(map_err)?.foreign_keys(true);
        let pool_options = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(ACQUIRE_TIMEOUT);
        Self::connect(options, pool_options).await
    }

    async fn connect(options: SqliteConnectOptions, pool_options: SqlitePoolOptions) -> Result<Self, StoreError> {
        let mut attempt = 1;
        loop {
            let result = match pool_options.clone().connect_with(options.clone()).await {
                Ok(pool) => match migrate(&pool).await {
                    Ok(version) => Ok((pool, version)),
                    Err(e) => {
                        pool.close().await;
                        Err(e)
                    }
                },
                Err(e) => Err(e),
            };
            match result {
                Ok((pool, version)) if version <= SCHEMA_VERSION => return Ok(Self { pool }),
                Ok((_, version)) => {
                    return Err(StoreError::Corrupt(format!(
                        "database schema version {version} is newer than this gateway's \
                         ({SCHEMA_VERSION}); upgrade the gateway"
                    )));
                }
                Err(e) if attempt < OPEN_ATTEMPTS && is_busy(&e) => {
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
                    attempt += 1;
                }
                Err(e) => return Err(map_err(e)),
            }
        }
    }
}

/// Create the schema if the database has none; returns the version found (newer versions are left
/// untouched for the caller to refuse).
async fn migrate(pool: &SqlitePool) -> Result<i64, sqlx::Error> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let version: i64 = sqlx::query_scalar("PRAGMA user_version").fetch_one(&mut *tx).await?;
    if version == 0 {
        for statement in SCHEMA_V1 {
            sqlx::query(statement).execute(&mut *tx).await?;
        }
        // PRAGMA takes no bind parameters; the value is a constant.
        sqlx::query("PRAGMA user_version = 1").execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(version)
}

/// SQLite primary result codes (extended codes carry them in the low byte).
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
const SQLITE_CORRUPT: i64 = 11;
const SQLITE_NOTADB: i64 = 26;

fn sqlite_code(e: &sqlx::Error) -> Option<i64> {
    match e {
        sqlx::Error::Database(db) => db.code().and_then(|c| c.parse::<i64>().ok()),
        _ => None,
    }
}

fn is_busy(e: &sqlx::Error) -> bool {
    matches!(sqlite_code(e).map(|c| c & 0xff), Some(SQLITE_BUSY | SQLITE_LOCKED))
}

/// Map a driver error to the store's vocabulary. Unique violations are mapped by the caller, which
/// knows which id collided.
fn map_err(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(db) => {
            if db.kind() == ErrorKind::ForeignKeyViolation {
                return StoreError::MissingHistory(e.to_string());
            }
            match sqlite_code(&e).map(|c| c & 0xff) {
                Some(SQLITE_CORRUPT | SQLITE_NOTADB) => StoreError::Corrupt(e.to_string()),
                // Busy, locked, I/O, full disk, cannot open, read-only…: an operator or a retry
                // can fix these.
                _ => StoreError::Unavailable(e.to_string()),
            }
        }
        sqlx::Error::Decode(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. } => StoreError::Corrupt(e.to_string()),
        _ => StoreError::Unavailable(e.to_string()),
    }
}

fn decode_item(key: i64, body: &str) -> Result<Item, StoreError> {
    serde_json::from_str(body).map_err(|e| StoreError::Corrupt(format!("item {key}: {e}")))
}

/// Decode `(item_key, body)` rows of a LEFT JOIN, skipping the all-NULL row that only says the
/// response exists.
fn decode_rows(rows: Vec<(Option<i64>, Option<String>)>) -> Result<Vec<StoredItem>, StoreError> {
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        match row {
            (Some(key), Some(body)) => items.push(StoredItem { key, item: decode_item(key, &body)? }),
            (Some(key), None) => {
                // Foreign keys make this impossible unless the file was edited by hand.
                return Err(StoreError::Corrupt(format!("referenced item {key} is missing")));
            }
            (None, _) => {}
        }
    }
    Ok(items)
}

#[async_trait::async_trait]
impl ResponseStore for SqliteStore {
    async fn save(&self, response: NewResponse) -> Result<(), StoreError> {
        // Encode everything before taking the write lock, to hold it as briefly as possible.
        let body = serde_json::to_string(&response.response)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode response: {e}")))?;
        let inherited = serde_json::to_string(&response.inherited)
            .map_err(|e| StoreError::Corrupt(format!("cannot encode history: {e}")))?;
        let mut new_items = Vec::with_capacity(response.input.len() + response.output.len());
        for (role, item) in
            response.input.iter().map(|i| (ROLE_INPUT, i)).chain(response.output.iter().map(|i| (ROLE_OUTPUT, i)))
        {
            let json =
                serde_json::to_string(item).map_err(|e| StoreError::Corrupt(format!("cannot encode item: {e}")))?;
            new_items.push((role, item.id().to_owned(), json));
        }

        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
        let inserted = sqlx::query(
            "INSERT INTO responses (id, previous_response_id, model, created_at, status, body)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .bind(response.id.clone())
        .bind(response.previous_response_id.clone())
        .bind(response.model)
        .bind(response.created_at)
        .bind(response.status)
        .bind(body)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {}
            Err(sqlx::Error::Database(db)) if db.kind() == ErrorKind::UniqueViolation => {
                return Err(StoreError::Duplicate(response.id));
            }
            Err(e) => return Err(map_err(e)),
        }

        if !response.inherited.is_empty() {
            // One statement for the whole history; the foreign key on item_key rejects a key whose
            // item was deleted meanwhile. json_each's `key` is the array index, i.e. the position.
            let refs = sqlx::query(
                "INSERT INTO response_items (response_id, position, item_key, role)
                 SELECT ?1, j.key, j.value, ?3 FROM json_each(?2) AS j",
            )
            .bind(response.id.clone())
            .bind(inherited)
            .bind(ROLE_INHERITED)
            .execute(&mut *tx)
            .await;
            match refs {
                Ok(_) => {}
                Err(sqlx::Error::Database(db)) if db.kind() == ErrorKind::ForeignKeyViolation => {
                    return Err(StoreError::MissingHistory(format!(
                        "an item inherited from {} no longer exists",
                        response.previous_response_id.as_deref().unwrap_or("(none)")
                    )));
                }
                Err(e) => return Err(map_err(e)),
            }
        }

        // New items follow the inherited ones.
        let first = response.inherited.len() as i64;
        for (position, (role, item_id, json)) in (first..).zip(new_items) {
            let key = sqlx::query("INSERT INTO items (item_id, body) VALUES (?1, ?2)")
                .bind(item_id)
                .bind(json)
                .execute(&mut *tx)
                .await
                .map_err(map_err)?
                .last_insert_rowid();
            sqlx::query(
                "INSERT INTO response_items (response_id, position, item_key, role)
                 VALUES (?1, ?2, ?3, ?4)",
            )
            .bind(response.id.clone())
            .bind(position)
            .bind(key)
            .bind(role)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }

        tx.commit().await.map_err(map_err)
    }

    async fn response(&self, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let body: Option<String> = sqlx::query_scalar("SELECT body FROM responses WHERE id = ?1")
            .bind(id.to_owned())
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        body.map(|b| serde_json::from_str(&b).map_err(|e| StoreError::Corrupt(format!("response {id}: {e}"))))
            .transpose()
    }

    async fn conversation(&self, id: &str) -> Result<Option<Vec<StoredItem>>, StoreError> {
        // LEFT JOINs from `responses`: no row at all means "not stored", one all-NULL row means
        // "stored, empty conversation"; one statement, so one consistent snapshot.
        let rows: Vec<(Option<i64>, Option<String>)> = sqlx::query_as(
            "SELECT ri.item_key, i.body
             FROM responses r
             LEFT JOIN response_items ri ON ri.response_id = r.id
             LEFT JOIN items i ON i.key = ri.item_key
             WHERE r.id = ?1
             ORDER BY ri.position",
        )
        .bind(id.to_owned())
        .fetch_all(&self.pool)
        .await
        .map_err(map_err)?;
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
        let rows: Vec<(Option<i64>, Option<String>)> = sqlx::query_as(sql)
            .bind(id.to_owned())
            .bind(page.after)
            .bind(fetch)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut items: Vec<Item> = decode_rows(rows)?.into_iter().map(|s| s.item).collect();
        let has_more = items.len() > page.limit;
        items.truncate(page.limit);
        Ok(Some(InputItemsList { items, has_more }))
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(map_err)?;
        // Remove the refs first (not via the cascade) to learn which items may now be orphans.
        let keys: Vec<i64> = sqlx::query_scalar("DELETE FROM response_items WHERE response_id = ?1 RETURNING item_key")
            .bind(id.to_owned())
            .fetch_all(&mut *tx)
            .await
            .map_err(map_err)?;
        let deleted = sqlx::query("DELETE FROM responses WHERE id = ?1")
            .bind(id.to_owned())
            .execute(&mut *tx)
            .await
            .map_err(map_err)?
            .rows_affected();
        if deleted == 0 {
            // Nothing was stored (and so no refs were removed); dropping rolls back.
            return Ok(false);
        }
        if !keys.is_empty() {
            let keys =
                serde_json::to_string(&keys).map_err(|e| StoreError::Corrupt(format!("cannot encode keys: {e}")))?;
            // Only this response's items are candidates, so the GC cost is bounded by its
            // conversation, not by the table.
            sqlx::query(
                "DELETE FROM items
                 WHERE key IN (SELECT value FROM json_each(?1))
                 AND NOT EXISTS (SELECT 1 FROM response_items ri WHERE ri.item_key = items.key)",
            )
            .bind(keys)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(true)
    }
}
