//! The SQLite backend: one database file shared by every worker process, in WAL mode.
//!
//! Schema (version 3, recorded in `PRAGMA user_version`; older files are migrated on open):
//!
//! - `items(key, item_id, body)`: each item once, `body` being the serde JSON of
//!   [`respgw_protocol::Item`]. `item_id` is not unique (clients may resend ids). `key` is
//!   `AUTOINCREMENT` so a deleted item's key is never reused.
//! - `responses(id, previous_response_id, model, created_at, status, body, history, history_from,
//!   deleted)`: `body` is the response object JSON as text; `history` the whole conversation's
//!   item keys as a JSON array; `history_from` the response it continues (a foreign key, indexed:
//!   it tells a delete whether anything continues a response); `deleted` marks a tombstone.
//! - `response_items(response_id, position, item_key, role)`: the response's own items (role 1
//!   input, 2 output), in order: what the input-items listing pages through and what a delete
//!   collects.
//! - `background_runs` and `background_events` (version 3): background runs and their event
//!   logs (see the `background` module).
//!
//! # Threads and connections
//!
//! SQLite is synchronous, so every trait call is one closure on tokio's blocking pool that runs
//! all of its statements (one thread hop per call, with statements prepared once per connection).
//!
//! - Writes go through the process's single writer connection, behind an async mutex: this
//!   process's writers queue for it in order instead of racing for SQLite's write lock and
//!   sleeping in its busy handler. Writers use `BEGIN IMMEDIATE`, so a write lock held by another
//!   process is waited for at the start, never by upgrading a read snapshot.
//! - Reads use a small pool of reader connections (up to 8, created on demand); in WAL mode they
//!   never wait for writers. Each read is a single statement, hence one consistent snapshot.
//! - Locks held by other processes are waited for by a busy handler with fine-grained sleeps (see
//!   the `connection` module), within the same 5 s budget the busy timeout had.
//! - WAL checkpoints run on a background thread, not inside commits; a commit waits for one only
//!   when the WAL has grown past its limit under overload (see the `checkpoint` module).
//!
//! An in-memory store (tests) has a single connection that serves reads and writes alike.

mod background;
mod checkpoint;
mod connection;

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use respgw_protocol::Item;
use rusqlite::hooks::Wal;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use tokio::sync::Semaphore;

use self::checkpoint::{Checkpointer, Signal};
pub(crate) use self::connection::Config;
#[cfg(test)]
pub(crate) use self::connection::SCHEMA_V1;
use self::connection::{Stats, is_busy, is_unique_violation, map_err};
use crate::item_cache::{DEFAULT_ITEM_CACHE_BYTES, ItemCache};
use crate::{InputItemsList, InputItemsOrder, InputItemsPage, NewResponse, ResponseStore, StoreError};

/// The schema version this code reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 3;

/// Attempts at the first connection and schema setup, which can hit a lock the busy handler does
/// not cover (switching a fresh file to WAL needs an exclusive lock that is not waited for).
const OPEN_ATTEMPTS: u32 = 10;

const ROLE_INPUT: i64 = 1;
const ROLE_OUTPUT: i64 = 2;

const INSERT_RESPONSE: &str = "
    INSERT INTO responses (id, previous_response_id, model, created_at, status, body, history_from, history)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// The key list of the response a save continues; tombstones included (a continuation that read
/// the conversation before the delete still saves whole).
const SELECT_HISTORY: &str = "SELECT history FROM responses WHERE id = ?1";

/// Rows for the `?4` new items whose keys start at `?2`: the first `?3` are input (role `?5`), the
/// rest output (role `?6`). A counting CTE instead of one bound row per item: the keys are
/// contiguous (see [`insert_items`]).
const INSERT_OWN_ITEMS: &str = "
    WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?4)
    INSERT INTO response_items (response_id, position, item_key, role)
    SELECT ?1, i, ?2 + i, CASE WHEN i < ?3 THEN ?5 ELSE ?6 END FROM n";

/// New items per multi-row `INSERT` (two parameters each). Longer lists take several statements.
const ITEMS_PER_INSERT: usize = 16;

/// `INSERT INTO items … VALUES (?, ?), …` for 1..=[`ITEMS_PER_INSERT`] rows, built once.
static INSERT_ITEMS: LazyLock<Vec<String>> = LazyLock::new(|| {
    (1..=ITEMS_PER_INSERT)
        .map(|rows| format!("INSERT INTO items (item_id, body) VALUES {}", vec!["(?, ?)"; rows].join(", ")))
        .collect()
});

const SELECT_RESPONSE: &str = "SELECT body FROM responses WHERE id = ?1 AND deleted = 0";

/// The key list joined to the items, in list order (json_each's `key` is the array index). LEFT
/// JOINs from `responses`: no row at all means "not stored", one all-NULL row means "stored, empty
/// conversation"; one statement, so one consistent snapshot.
const SELECT_CONVERSATION: &str = "
    SELECT h.value, i.body
    FROM responses r
    LEFT JOIN json_each(r.history) AS h
    LEFT JOIN items i ON i.key = h.value
    WHERE r.id = ?1 AND r.deleted = 0
    ORDER BY h.key";

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
    WHERE r.id = ?1 AND r.deleted = 0
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
    WHERE r.id = ?1 AND r.deleted = 0
    ORDER BY ri.position DESC
    LIMIT ?3";

/// Whether a response is stored, a tombstone, and what it continues.
const SELECT_FOR_DELETE: &str = "SELECT deleted, history_from FROM responses WHERE id = ?1";

const HAS_CONTINUATIONS: &str = "SELECT EXISTS (SELECT 1 FROM responses WHERE history_from = ?1)";

/// Hide a continued response; its own items stay for its continuations. The body is dropped.
const MAKE_TOMBSTONE: &str = "UPDATE responses SET deleted = 1, body = '' WHERE id = ?1";

/// Its own items' rows, returning their keys (the items go after the response row).
const DELETE_OWN_ITEMS: &str = "DELETE FROM response_items WHERE response_id = ?1 RETURNING item_key";

const DELETE_RESPONSE: &str = "DELETE FROM responses WHERE id = ?1";

const DELETE_ITEMS: &str = "DELETE FROM items WHERE key IN (SELECT value FROM json_each(?1))";

/// A [`ResponseStore`] on a SQLite database (a file shared by processes, or private in memory).
/// Clones share the same connections; the last one dropped closes them and stops the
/// checkpointer.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where the database is (`:memory:` for a private one), for `Debug`.
    location: PathBuf,
    /// The one writer connection of this process. An async mutex: a save waits for its turn as a
    /// parked future, not as a blocked thread, and moves the guard into its blocking closure.
    writer: Arc<tokio::sync::Mutex<Connection>>,
    /// Reader connections; `None` for an in-memory store, whose writer serves reads too.
    readers: Option<Arc<Readers>>,
    /// Items decoded by reads, and written by saves, of this process.
    items: Arc<ItemCache>,
    /// The counters the connections and the checkpointer update (read by tests).
    #[cfg_attr(not(test), expect(dead_code, reason = "read by tests only, for now"))]
    stats: Arc<Stats>,
    /// Stops the checkpointer thread when dropped; `None` for an in-memory store (no WAL).
    _checkpointer: Option<Checkpointer>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("location", &self.inner.location).finish_non_exhaustive()
    }
}

/// The reader connections of a file store: created on demand, up to `config.max_readers`, and
/// kept for reuse.
struct Readers {
    path: PathBuf,
    config: Config,
    stats: Arc<Stats>,
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection that may exist: a read beyond that waits here (asynchronously).
    permits: Arc<Semaphore>,
}

impl Readers {
    fn take(&self) -> Result<Connection, StoreError> {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        match idle {
            Some(conn) => Ok(conn),
            None => connection::open_reader(&self.path, &self.config, &self.stats).map_err(map_err),
        }
    }

    fn put(&self, conn: Connection) {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).push(conn);
    }
}

/// What one attempt at opening a file store produced (on a blocking thread).
enum Opened {
    /// The writer (schema in place) and the checkpointer's connection.
    Ready(Box<(Connection, Connection)>),
    /// The file has a newer schema than this code (nothing was changed).
    Newer(i64),
}

impl SqliteStore {
    /// Open the database file at `path` (relative to the CWD), creating the file and schema if
    /// missing. Safe to call from several processes at once on the same file.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        if path.as_ref() == Path::new(":memory:") {
            // SQLite's name for a private database; a pool of those would be several databases.
            return Self::open_in_memory().await;
        }
        Self::open_with(path.as_ref(), Config::default()).await
    }

    /// [`SqliteStore::open`] with non-default tunables (tests).
    pub(crate) async fn open_with(path: &Path, config: Config) -> Result<Self, StoreError> {
        let stats = Arc::new(Stats::default());
        let signal = Arc::new(Signal::default());
        let mut attempt = 1;
        let (writer, checkpoint_conn) = loop {
            let (path, config, stats, signal) =
                (path.to_owned(), config.clone(), Arc::clone(&stats), Arc::clone(&signal));
            let opened = spawn_blocking(move || Ok(open_file(&path, &config, &stats, signal))).await?;
            match opened {
                Ok(Opened::Ready(connections)) => break *connections,
                Ok(Opened::Newer(version)) => return Err(newer_schema(version)),
                Err(e) if attempt < OPEN_ATTEMPTS && is_busy(&e) => {
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
                    attempt += 1;
                }
                Err(e) => return Err(map_err(e)),
            }
        };
        let writer = Arc::new(tokio::sync::Mutex::new(writer));
        let checkpointer =
            Checkpointer::start(checkpoint_conn, signal, config.clone(), Arc::clone(&stats), path.to_owned())
                .map_err(|e| StoreError::Unavailable(format!("cannot start the WAL checkpointer thread: {e}")))?;
        let readers = Readers {
            path: path.to_owned(),
            permits: Arc::new(Semaphore::new(config.max_readers.max(1))),
            config,
            stats: Arc::clone(&stats),
            idle: Mutex::new(Vec::new()),
        };
        Ok(Self {
            inner: Arc::new(Inner {
                location: path.to_owned(),
                writer,
                readers: Some(Arc::new(readers)),
                items: Arc::new(ItemCache::new(DEFAULT_ITEM_CACHE_BYTES)),
                stats,
                _checkpointer: Some(checkpointer),
            }),
        })
    }

    /// A private in-memory store (for tests): one connection for reads and writes, since the
    /// database lives only as long as a connection to it.
    pub async fn open_in_memory() -> Result<Self, StoreError> {
        let (conn, version) = spawn_blocking(|| connection::open_memory().map_err(map_err)).await?;
        if version > SCHEMA_VERSION {
            return Err(newer_schema(version));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                location: PathBuf::from(":memory:"),
                writer: Arc::new(tokio::sync::Mutex::new(conn)),
                readers: None,
                items: Arc::new(ItemCache::new(DEFAULT_ITEM_CACHE_BYTES)),
                stats: Arc::new(Stats::default()),
                _checkpointer: None,
            }),
        })
    }

    /// Run `f` on the writer connection, once this process's earlier writes are done.
    async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let mut writer = Arc::clone(&self.inner.writer).lock_owned().await;
        // The guard moves into the closure: it is released on the blocking thread as soon as `f`
        // is done, and even if this future is dropped meanwhile, `f` runs to its end (a save is
        // then committed, or rolled back by its own error path; never left half-done).
        spawn_blocking(move || {
            if !writer.is_autocommit() {
                // A transaction left open (its rollback failed, e.g. on an I/O error) would make
                // every later `BEGIN` fail: end it first.
                writer.execute_batch("ROLLBACK").map_err(map_err)?;
            }
            f(&mut writer)
        })
        .await
    }

    /// Run `f` on a reader connection (the writer for an in-memory store).
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let Some(readers) = &self.inner.readers else {
            return self.write(move |conn| f(conn)).await;
        };
        let readers = Arc::clone(readers);
        let permit = Arc::clone(&readers.permits)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Unavailable("the store's reader pool is closed".into()))?;
        spawn_blocking(move || {
            let conn = readers.take()?;
            let result = f(&conn);
            readers.put(conn);
            drop(permit);
            result
        })
        .await
    }
}

/// Run a store operation on tokio's blocking pool.
async fn spawn_blocking<T, F>(f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Unavailable(format!("store operation did not finish: {e}")))?
}

fn newer_schema(version: i64) -> StoreError {
    StoreError::Corrupt(format!(
        "database schema version {version} is newer than this gateway's ({SCHEMA_VERSION}); upgrade the gateway"
    ))
}

/// Open the writer (creating file and schema) and the checkpointer's connection.
fn open_file(path: &Path, config: &Config, stats: &Arc<Stats>, signal: Arc<Signal>) -> rusqlite::Result<Opened> {
    let (mut writer, version) = connection::open_writer(path, config, stats)?;
    if version > SCHEMA_VERSION {
        return Ok(Opened::Newer(version));
    }
    // SQLite calls this after every commit with the number of frames in the WAL: it tells the
    // checkpointer (which replaces SQLite's automatic checkpoint, disabled) when to run, and holds
    // this writer back while the WAL is over its limit.
    let (hook_config, hook_stats) = (config.clone(), Arc::clone(stats));
    writer.wal_hook(Some(move |_: &mut Wal, frames: c_int| {
        hook_stats.wal_frames_max.fetch_max(frames, Ordering::Relaxed);
        if signal.committed(frames, &hook_config) {
            hook_stats.wal_waits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }))?;
    let checkpoint_conn = connection::open_checkpointer(path, config, stats)?;
    Ok(Opened::Ready(Box::new((writer, checkpoint_conn))))
}

fn encode<T: serde::Serialize + ?Sized>(value: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot encode {what}: {e}")))
}

/// Run a cached `(item_key, body)` query over a LEFT JOIN from `responses`: `None` when it returns
/// no row (the response is not stored), else the items, skipping the all-NULL row that only says
/// the response exists. Bodies of items decoded before are not even read out.
fn query_items(
    conn: &Connection,
    cache: &ItemCache,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Option<Vec<Item>>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(map_err)?;
    let mut rows = stmt.query(params).map_err(map_err)?;
    let mut items = Vec::new();
    let mut found = false;
    while let Some(row) = rows.next().map_err(map_err)? {
        found = true;
        let Some(key) = row.get::<_, Option<i64>>(0).map_err(map_err)? else { continue };
        if let Some(item) = cache.get(key) {
            items.push(item);
            continue;
        }
        match row.get_ref(1).map_err(map_err)? {
            ValueRef::Text(body) => {
                let body = std::str::from_utf8(body).map_err(|e| StoreError::Corrupt(format!("item {key}: {e}")))?;
                items.push(cache.decode(key, body)?);
            }
            // Deletes keep every item a stored list names, so only a hand-edited file gets here.
            ValueRef::Null => return Err(StoreError::Corrupt(format!("referenced item {key} is missing"))),
            _ => return Err(StoreError::Corrupt(format!("item {key} is not text"))),
        }
    }
    Ok(found.then_some(items))
}

/// Insert the new items (`(item_id, body)`, in order) with as few statements as possible; returns
/// the key of the first one, the others following it one by one.
///
/// Why the keys are contiguous: the caller holds the write transaction (`BEGIN IMMEDIATE`), so no
/// other connection, in this process or another, inserts items meanwhile. An `AUTOINCREMENT` key
/// is one more than the largest of the table's current maximum and the largest key it ever handed
/// out (`sqlite_sequence`), and a multi-row `INSERT … VALUES` inserts its rows in order, each
/// getting the next key; the next statement continues from the last. So the n items get
/// `first..first + n`, even when deleted items left gaps below or above the current maximum. The
/// chunk boundaries are checked anyway (cheaply), and the test `new_item_keys_are_contiguous`
/// checks the whole mapping.
fn insert_items(tx: &Transaction<'_>, items: &[(String, String)]) -> Result<i64, StoreError> {
    let mut first = None;
    let mut next = 0;
    for chunk in items.chunks(ITEMS_PER_INSERT) {
        let mut stmt = tx.prepare_cached(&INSERT_ITEMS[chunk.len() - 1]).map_err(map_err)?;
        for (n, (item_id, body)) in chunk.iter().enumerate() {
            stmt.raw_bind_parameter(2 * n + 1, item_id).map_err(map_err)?;
            stmt.raw_bind_parameter(2 * n + 2, body).map_err(map_err)?;
        }
        stmt.raw_execute().map_err(map_err)?;
        let last = tx.last_insert_rowid();
        let chunk_first = last - (chunk.len() as i64 - 1);
        match first {
            None => first = Some(chunk_first),
            Some(_) if chunk_first != next => {
                return Err(StoreError::Unavailable(format!(
                    "item keys are not contiguous (expected {next}, got {chunk_first}); nothing was saved"
                )));
            }
            Some(_) => {}
        }
        next = last + 1;
    }
    first.ok_or_else(|| StoreError::Unavailable("no items to insert".into()))
}

/// A response to save, encoded before the writer is taken.
pub(crate) struct EncodedResponse {
    id: String,
    previous_response_id: Option<String>,
    model: String,
    created_at: i64,
    status: String,
    body: String,
    history_from: Option<String>,
    inputs: i64,
    /// The new items, input then output, with their `(item_id, body)` rows.
    items: Vec<Item>,
    rows: Vec<(String, String)>,
}

impl EncodedResponse {
    pub(crate) fn new(response: NewResponse) -> Result<Self, StoreError> {
        let NewResponse { id, previous_response_id, model, created_at, status, response, history_from, input, output } =
            response;
        let body = encode(&response, "response")?;
        let inputs = input.len() as i64;
        let items: Vec<Item> = input.into_iter().chain(output).collect();
        let mut rows = Vec::with_capacity(items.len());
        for item in &items {
            rows.push((item.id().to_owned(), encode(item, "item")?));
        }
        Ok(Self { id, previous_response_id, model, created_at, status, body, history_from, inputs, items, rows })
    }

    /// Write the response row, its new items and their rows inside `tx`; returns the first new
    /// item's key.
    pub(crate) fn insert(&self, tx: &Transaction<'_>) -> Result<Option<i64>, StoreError> {
        let id = &self.id;
        let mut history = match &self.history_from {
            None => Vec::with_capacity(self.rows.len()),
            Some(parent) => {
                let list = tx
                    .prepare_cached(SELECT_HISTORY)
                    .and_then(|mut s| s.query_row([parent], |row| row.get::<_, String>(0)))
                    .map_err(|e| match e {
                        rusqlite::Error::QueryReturnedNoRows => StoreError::MissingHistory(format!(
                            "{parent} was deleted before its continuation {id} was saved"
                        )),
                        e => map_err(e),
                    })?;
                let mut keys: Vec<i64> = serde_json::from_str(&list)
                    .map_err(|e| StoreError::Corrupt(format!("history of {parent}: {e}")))?;
                keys.reserve(self.rows.len());
                keys
            }
        };
        let first_key = if self.rows.is_empty() { None } else { Some(insert_items(tx, &self.rows)?) };
        if let Some(first) = first_key {
            history.extend(first..first + self.rows.len() as i64);
        }
        let history = encode(&history, "history")?;
        let inserted = tx.prepare_cached(INSERT_RESPONSE).and_then(|mut s| {
            s.execute(params![
                id,
                self.previous_response_id,
                self.model,
                self.created_at,
                self.status,
                self.body,
                self.history_from,
                history
            ])
        });
        match inserted {
            Ok(_) => {}
            Err(e) if is_unique_violation(&e) => return Err(StoreError::Duplicate(id.clone())),
            Err(e) => return Err(map_err(e)),
        }
        if let Some(first) = first_key {
            tx.prepare_cached(INSERT_OWN_ITEMS)
                .and_then(|mut s| {
                    s.execute(params![id, first, self.inputs, self.rows.len() as i64, ROLE_INPUT, ROLE_OUTPUT])
                })
                .map_err(map_err)?;
        }
        Ok(first_key)
    }

    /// After the commit: the next continuation of this conversation need not decode what was
    /// just written.
    pub(crate) fn keep_in(self, cache: &ItemCache, first_key: Option<i64>) {
        if let Some(first) = first_key {
            for ((item, (_, body)), key) in self.items.into_iter().zip(&self.rows).zip(first..) {
                cache.keep(key, item, body.len());
            }
        }
    }
}

#[async_trait::async_trait]
impl ResponseStore for SqliteStore {
    async fn save(&self, response: NewResponse) -> Result<(), StoreError> {
        // Encode everything before taking the writer, to hold it as briefly as possible.
        let encoded = EncodedResponse::new(response)?;
        let cache = Arc::clone(&self.inner.items);
        self.write(move |conn| {
            // Dropping `tx` on any error path below rolls everything back.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(map_err)?;
            let first_key = encoded.insert(&tx)?;
            tx.commit().map_err(map_err)?;
            encoded.keep_in(&cache, first_key);
            Ok(())
        })
        .await
    }

    async fn response(&self, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let id = id.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(SELECT_RESPONSE).map_err(map_err)?;
            let mut rows = stmt.query([&id]).map_err(map_err)?;
            let Some(row) = rows.next().map_err(map_err)? else { return Ok(None) };
            let body: String = row.get(0).map_err(map_err)?;
            serde_json::from_str(&body).map(Some).map_err(|e| StoreError::Corrupt(format!("response {id}: {e}")))
        })
        .await
    }

    async fn conversation(&self, id: &str) -> Result<Option<Vec<Item>>, StoreError> {
        let (id, cache) = (id.to_owned(), Arc::clone(&self.inner.items));
        self.read(move |conn| query_items(conn, &cache, SELECT_CONVERSATION, [&id])).await
    }

    async fn input_items(&self, id: &str, page: InputItemsPage) -> Result<Option<InputItemsList>, StoreError> {
        let (id, cache) = (id.to_owned(), Arc::clone(&self.inner.items));
        self.read(move |conn| {
            let sql = match page.order {
                InputItemsOrder::Asc => INPUT_ITEMS_ASC,
                InputItemsOrder::Desc => INPUT_ITEMS_DESC,
            };
            // One row more than asked tells whether more follow.
            let fetch = i64::try_from(page.limit.saturating_add(1)).unwrap_or(i64::MAX);
            let Some(mut items) = query_items(conn, &cache, sql, params![id, page.after, fetch])? else {
                return Ok(None);
            };
            let has_more = items.len() > page.limit;
            items.truncate(page.limit);
            Ok(Some(InputItemsList { items, has_more }))
        })
        .await
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.write(move |conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(map_err)?;
            let found = tx
                .prepare_cached(SELECT_FOR_DELETE)
                .and_then(|mut s| s.query_row([&id], |row| Ok((row.get::<_, bool>(0)?, row.get(1)?))));
            let history_from: Option<String> = match found {
                Ok((false, history_from)) => history_from,
                // Not stored, or already deleted: nothing changes.
                Ok((true, _)) | Err(rusqlite::Error::QueryReturnedNoRows) => return Ok(false),
                Err(e) => return Err(map_err(e)),
            };
            if has_continuations(&tx, &id)? {
                tx.prepare_cached(MAKE_TOMBSTONE).and_then(|mut s| s.execute([&id])).map_err(map_err)?;
            } else {
                remove(&tx, &id)?;
                // Up the chain: each tombstone whose last continuation just went goes too.
                let mut parent = history_from;
                while let Some(p) = parent.take() {
                    let row = tx
                        .prepare_cached(SELECT_FOR_DELETE)
                        .and_then(|mut s| s.query_row([&p], |row| Ok((row.get::<_, bool>(0)?, row.get(1)?))));
                    match row {
                        Ok((true, next)) if !has_continuations(&tx, &p)? => {
                            remove(&tx, &p)?;
                            parent = next;
                        }
                        Ok(_) | Err(rusqlite::Error::QueryReturnedNoRows) => {}
                        Err(e) => return Err(map_err(e)),
                    }
                }
            }
            tx.commit().map_err(map_err)?;
            Ok(true)
        })
        .await
    }
}

/// Whether a stored response (or tombstone) continues `id`.
fn has_continuations(tx: &Transaction<'_>, id: &str) -> Result<bool, StoreError> {
    tx.prepare_cached(HAS_CONTINUATIONS).and_then(|mut s| s.query_row([id], |row| row.get(0))).map_err(map_err)
}

/// Remove a response that nothing continues, with its own items.
fn remove(tx: &Transaction<'_>, id: &str) -> Result<(), StoreError> {
    let keys = {
        let mut stmt = tx.prepare_cached(DELETE_OWN_ITEMS).map_err(map_err)?;
        let keys = stmt.query_map([id], |row| row.get::<_, i64>(0)).map_err(map_err)?;
        keys.collect::<Result<Vec<i64>, _>>().map_err(map_err)?
    };
    tx.prepare_cached(DELETE_RESPONSE).and_then(|mut s| s.execute([id])).map_err(map_err)?;
    if !keys.is_empty() {
        let keys = encode(&keys, "keys")?;
        tx.prepare_cached(DELETE_ITEMS).and_then(|mut s| s.execute([&keys])).map_err(map_err)?;
    }
    Ok(())
}

/// Access for tests: raw SQL on the writer connection, and the internal counters.
#[cfg(test)]
impl SqliteStore {
    /// Run `f` on the writer connection; panics on an error (tests only).
    pub(crate) async fn with_writer<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> T {
        self.write(move |conn| f(conn).map_err(map_err)).await.unwrap()
    }

    /// The single integer a query returns.
    pub(crate) async fn sql_i64(&self, sql: &'static str) -> i64 {
        self.with_writer(move |conn| conn.query_row(sql, [], |row| row.get(0))).await
    }

    /// The single string a query returns.
    pub(crate) async fn sql_string(&self, sql: &'static str) -> String {
        self.with_writer(move |conn| conn.query_row(sql, [], |row| row.get(0))).await
    }

    /// The strings of a one-column query.
    pub(crate) async fn sql_strings(&self, sql: &'static str) -> Vec<String> {
        self.with_writer(move |conn| {
            let mut stmt = conn.prepare(sql)?;
            let rows = stmt.query_map([], |row| row.get(0))?;
            rows.collect()
        })
        .await
    }

    /// Run statements that return nothing of interest.
    pub(crate) async fn sql_execute(&self, sql: &'static str) {
        self.with_writer(move |conn| conn.execute_batch(sql)).await;
    }

    pub(crate) fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    pub(crate) fn writer(&self) -> &Arc<tokio::sync::Mutex<Connection>> {
        &self.inner.writer
    }
}

#[cfg(test)]
mod tests;
