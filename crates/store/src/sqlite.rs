//! The SQLite backend: one database file shared by every worker process, in WAL mode.
//!
//! Schema (version 7, recorded in `PRAGMA user_version`; older files are migrated on open):
//!
//! - `items(key, item_id, body)`: each item once, `body` being the serde JSON of
//!   [`respgw_protocol::Item`]. `item_id` is not unique (clients may resend ids). `key` is
//!   `AUTOINCREMENT` so a deleted item's key is never reused.
//! - `responses(id, previous_response_id, model, created_at, status, body, history, history_from,
//!   deleted, conversation_id, owner)`: `body` is the response object JSON as text; `history` the whole
//!   history's item keys as a JSON array; `history_from` the response it continues (a foreign key,
//!   indexed: it tells a delete whether anything continues a response); `deleted` marks a
//!   tombstone; `conversation_id` the conversation it was created in (indexed: it tells whether a
//!   conversation's rows must be kept); `owner` the tenant that created it (every read or write by
//!   id filters on it; the primary key finds the row, so it needs no index).
//! - `response_items(response_id, position, item_key, role)`: the response's own items (role 1
//!   input, 2 output), in order: what the input-items listing pages through and what a delete
//!   collects.
//! - `conversations(id, created_at, metadata, version, deleted, owner)`: `metadata` a JSON object
//!   as text; `version` moves on with every change of the item list; `deleted` marks a tombstone;
//!   `owner` as for responses.
//! - `conversation_items(conversation_id, position, item_key, removed)`: a conversation's items in
//!   order (`item_key` indexed); `removed` marks an item deleted from the conversation but kept for
//!   the responses created in it. What is kept, and when it goes, is in the crate's docs.
//! - `background_runs` and `background_events` (version 4): background runs and their event
//!   logs (see the `background` module); their queue (`queued_at`, `started_at`, version 6).
//! - Retrieval (version 7, see the `retrieval` module): `files` and their bytes (`file_contents`),
//!   `vector_stores`, `vector_store_files` (with the ingestion queue's lease columns),
//!   `vector_store_file_batches`, and `chunks` (text, tokens, embedding blob) with their FTS5
//!   index `chunks_fts` (external content, `porter unicode61 remove_diacritics 2`), kept in step
//!   by triggers.
//!
//! # Threads and connections
//!
//! SQLite is synchronous, so every trait call is one closure, run off the async runtime, that runs
//! all of its statements (one thread hop per call, with statements prepared once per connection).
//!
//! - Writes are jobs for the process's writer thread, which owns its single writer connection
//!   (see the `writer` module): this process's writers queue for it in order instead of racing
//!   for SQLite's write lock and sleeping in its busy handler, and the writes waiting together are
//!   committed in one transaction, each in its own savepoint. Transactions begin with `BEGIN
//!   IMMEDIATE`, so a write lock held by another process is waited for at the start, never by
//!   upgrading a read snapshot.
//! - Reads run on tokio's blocking pool and use a small pool of reader connections (up to 8,
//!   created on demand); in WAL mode they never wait for writers. Each read is a single
//!   statement, hence one consistent snapshot.
//! - Locks held by other processes are waited for by a busy handler with fine-grained sleeps (see
//!   the `connection` module), within the same 5 s budget the busy timeout had.
//! - WAL checkpoints run on a background thread, not inside commits; a commit waits for one only
//!   when the WAL has grown past its limit under overload (see the `checkpoint` module).
//! - A file of allocated blocks next to the database keeps a way out of a full disk: released when
//!   a write fails for want of space, it lets deletes and a truncating checkpoint run while new
//!   data is refused, and is made again once space is back (see the `reserve` module).
//!
//! An in-memory store (tests) has a single connection, on the writer thread, that serves reads and
//! writes alike.

mod background;
mod checkpoint;
mod connection;
mod console;
mod conversations;
mod reserve;
mod responses;
mod retention;
mod retrieval;
mod writer;

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use respgw_protocol::Item;
use rusqlite::hooks::Wal;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, params};
use tokio::sync::Semaphore;

use self::checkpoint::{Checkpointer, Signal};
pub(crate) use self::connection::Config;
#[cfg(test)]
pub(crate) use self::connection::{MIGRATIONS, SCHEMA_V1, SCHEMA_V2};
use self::connection::{Stats, is_busy, is_unique_violation, map_err};
use self::conversations::{
    APPEND_CONVERSATION_ITEMS, COUNT_CONVERSATION_ITEMS, INSERT_CONVERSATION, SELECT_CONVERSATION, UPDATE_CONVERSATION,
    append_rows, conversation_state,
};
pub use self::reserve::DEFAULT_RESERVE_BYTES;
use self::reserve::Reserve;
use self::responses::{SELECT_RESPONSE, SELECT_RESPONSE_HISTORY, insert_items, insert_response};
use self::retention::Tx;
use self::writer::{Growth, Writer};
use crate::encoding::{EncodedResponse, conversation_record, encode, encode_items};
use crate::item_cache::{DEFAULT_ITEM_CACHE_BYTES, ItemCache};
use crate::queries::{self, with_sqlite_parameters};
use crate::retention::{check_room, delete_conversation, delete_conversation_item, delete_response, is_live};
use crate::{
    ConversationHistory, ConversationItemLookup, ConversationRecord, InputItemsList, InputItemsOrder, InputItemsPage,
    NewConversation, NewResponse, ResponseStore, StoreError,
};

/// The reads shared with PostgreSQL ([`crate::queries`]) with SQLite's parameters, made once.
static INPUT_ITEMS_PAGES: LazyLock<[String; 2]> =
    LazyLock::new(|| [queries::INPUT_ITEMS_ASC, queries::INPUT_ITEMS_DESC].map(with_sqlite_parameters));
static CONVERSATION_ITEMS_PAGES: LazyLock<[String; 2]> =
    LazyLock::new(|| [queries::CONVERSATION_ITEMS_ASC, queries::CONVERSATION_ITEMS_DESC].map(with_sqlite_parameters));
static CONVERSATION_HISTORY: LazyLock<String> = LazyLock::new(|| with_sqlite_parameters(queries::CONVERSATION_HISTORY));
static CONVERSATION_ITEM: LazyLock<String> = LazyLock::new(|| with_sqlite_parameters(queries::CONVERSATION_ITEM));

/// The schema version this code reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 8;

/// Attempts at the first connection and schema setup, which can hit a lock the busy handler does
/// not cover (switching a fresh file to WAL needs an exclusive lock that is not waited for).
const OPEN_ATTEMPTS: u32 = 10;

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
    /// The thread that owns this process's one writer connection and runs every write (see the
    /// `writer` module).
    writer: Writer,
    /// Reader connections; `None` for an in-memory store, whose writer serves reads too.
    readers: Option<Arc<Readers>>,
    /// Items decoded by reads of this process.
    items: Arc<ItemCache>,
    /// The counters the connections and the checkpointer update.
    stats: Arc<Stats>,
    /// Stops the checkpointer thread when dropped; `None` for an in-memory store (no WAL).
    _checkpointer: Option<Checkpointer>,
}

/// How many statements of one SQLite store have waited for a lock another process held: its
/// busy handler counts each wait once, and a wait lasts at most the store's budget (5 s) before
/// the statement fails as unavailable. Cheap to clone and to read.
#[derive(Clone)]
pub struct LockWaits(Arc<Stats>);

impl LockWaits {
    /// Waits begun so far.
    pub fn count(&self) -> u64 {
        self.0.lock_waits.load(Ordering::Relaxed)
    }
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
    /// The writer (schema in place), the checkpointer's connection, and the disk-space reserve.
    Ready(Box<(Connection, Connection, Option<Reserve>)>),
    /// The file has a newer schema than this code (nothing was changed).
    Newer(i64),
}

impl SqliteStore {
    /// This store's count of waits for other processes' locks.
    pub fn lock_waits(&self) -> LockWaits {
        LockWaits(Arc::clone(&self.inner.stats))
    }

    /// One page of items through `[ascending, descending]`, two statements of the same shape
    /// (`?1` the id, `?2` the exclusive cursor, `?3` how many, `?4` the owner; no row at all when
    /// nothing has that id). None when nothing has that id.
    async fn items_page(
        &self,
        [ascending, descending]: &'static [String; 2],
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError> {
        let (owner, id, cache) = (owner.to_owned(), id.to_owned(), Arc::clone(&self.inner.items));
        self.read(move |conn| {
            let sql = match page.order {
                InputItemsOrder::Asc => ascending,
                InputItemsOrder::Desc => descending,
            };
            // One row more than asked tells whether more follow.
            let fetch = i64::try_from(page.limit.saturating_add(1)).unwrap_or(i64::MAX);
            let Some(mut items) = query_items(conn, &cache, sql, params![id, page.after, fetch, owner])? else {
                return Ok(None);
            };
            let has_more = items.len() > page.limit;
            items.truncate(page.limit);
            Ok(Some(InputItemsList { items, has_more }))
        })
        .await
    }

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
        let (writer, checkpoint_conn, reserve) = loop {
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
        let reserve = reserve.map(Arc::new);
        let writer = start_writer(writer, &stats, reserve.clone())?;
        let checkpointer =
            Checkpointer::start(checkpoint_conn, signal, config.clone(), Arc::clone(&stats), path.to_owned(), reserve)
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
        let stats = Arc::new(Stats::default());
        Ok(Self {
            inner: Arc::new(Inner {
                location: PathBuf::from(":memory:"),
                writer: start_writer(conn, &stats, None)?,
                readers: None,
                items: Arc::new(ItemCache::new(DEFAULT_ITEM_CACHE_BYTES)),
                stats,
                _checkpointer: None,
            }),
        })
    }

    /// Run `f` inside a write transaction on the writer thread, once this process's earlier
    /// writes are done: committed if it returns `Ok`, rolled back if it fails. Even if this future
    /// is dropped, `f` runs to its end (committed or rolled back, never left half-done). While the
    /// disk is full, a write that [`Growth::Adds`] is refused (see the `reserve` module).
    async fn write<T, F>(&self, growth: Growth, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        self.inner.writer.write(growth, f).await
    }

    /// Run `f` on a reader connection (the writer for an in-memory store).
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let Some(readers) = &self.inner.readers else {
            return self.write(Growth::Bounded, move |conn| f(conn)).await;
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

/// Start the writer thread on `conn`.
fn start_writer(conn: Connection, stats: &Arc<Stats>, reserve: Option<Arc<Reserve>>) -> Result<Writer, StoreError> {
    Writer::start(conn, Arc::clone(stats), reserve)
        .map_err(|e| StoreError::Unavailable(format!("cannot start the SQLite writer thread: {e}")))
}

fn newer_schema(version: i64) -> StoreError {
    StoreError::Corrupt(format!(
        "database schema version {version} is newer than this gateway's ({SCHEMA_VERSION}); upgrade the gateway"
    ))
}

/// Open the writer (creating file and schema) and the checkpointer's connection, and set up the
/// disk-space reserve.
fn open_file(path: &Path, config: &Config, stats: &Arc<Stats>, signal: Arc<Signal>) -> rusqlite::Result<Opened> {
    let (mut writer, version) = connection::open_writer(path, config, stats)?;
    if version > SCHEMA_VERSION {
        return Ok(Opened::Newer(version));
    }
    // SQLite calls this after every commit with the number of frames in the WAL: it tells the
    // checkpointer (which replaces SQLite's automatic checkpoint, disabled) when to run, and holds
    // this writer back while the WAL is over its limit.
    let (hook_config, hook_stats, hook_signal) = (config.clone(), Arc::clone(stats), Arc::clone(&signal));
    writer.wal_hook(Some(move |_: &mut Wal, frames: c_int| {
        hook_stats.wal_frames_max.fetch_max(frames, Ordering::Relaxed);
        if hook_signal.committed(frames, &hook_config) {
            hook_stats.wal_waits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }))?;
    let checkpoint_conn = connection::open_checkpointer(path, config, stats)?;
    let reserve = Reserve::open(path, config.reserve_bytes, signal);
    Ok(Opened::Ready(Box::new((writer, checkpoint_conn, reserve))))
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
    Ok(query_items_and_version(conn, cache, sql, params, false)?.map(|(items, _)| items))
}

/// [`query_items`], also returning the third column of the first row when `version` is set (a
/// conversation's version, for [`queries::CONVERSATION_HISTORY`]).
fn query_items_and_version(
    conn: &Connection,
    cache: &ItemCache,
    sql: &str,
    params: impl rusqlite::Params,
    version: bool,
) -> Result<Option<(Vec<Item>, i64)>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(map_err)?;
    let mut rows = stmt.query(params).map_err(map_err)?;
    let mut items = Vec::new();
    let mut found = None;
    while let Some(row) = rows.next().map_err(map_err)? {
        if found.is_none() {
            found = Some(if version { row.get::<_, i64>(2).map_err(map_err)? } else { 0 });
        }
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
    Ok(found.map(|version| (items, version)))
}

#[async_trait::async_trait]
impl ResponseStore for SqliteStore {
    async fn save(&self, response: NewResponse) -> Result<(), StoreError> {
        // Encode everything before taking the writer, to hold it as briefly as possible.
        let encoded = EncodedResponse::new(response)?;
        self.write(Growth::Adds, move |tx| insert_response(tx, &encoded)).await
    }

    async fn response(&self, owner: &str, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let (owner, id) = (owner.to_owned(), id.to_owned());
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(SELECT_RESPONSE).map_err(map_err)?;
            let mut rows = stmt.query([&id, &owner]).map_err(map_err)?;
            let Some(row) = rows.next().map_err(map_err)? else { return Ok(None) };
            let body: String = row.get(0).map_err(map_err)?;
            serde_json::from_str(&body).map(Some).map_err(|e| StoreError::Corrupt(format!("response {id}: {e}")))
        })
        .await
    }

    async fn history(&self, owner: &str, id: &str) -> Result<Option<Vec<Item>>, StoreError> {
        let (owner, id, cache) = (owner.to_owned(), id.to_owned(), Arc::clone(&self.inner.items));
        self.read(move |conn| query_items(conn, &cache, SELECT_RESPONSE_HISTORY, [&id, &owner])).await
    }

    async fn input_items(
        &self,
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError> {
        self.items_page(&INPUT_ITEMS_PAGES, owner, id, page).await
    }

    async fn delete(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let (owner, id) = (owner.to_owned(), id.to_owned());
        self.write(Growth::Bounded, move |tx| run_now(delete_response(&mut Tx(tx), &owner, &id))).await
    }

    async fn create_conversation(&self, conversation: NewConversation) -> Result<(), StoreError> {
        let NewConversation { id, owner, created_at, metadata, items } = conversation;
        let metadata = encode(&metadata, "metadata")?;
        let new_items = encode_items(&items)?;
        self.write(Growth::Adds, move |tx| {
            let inserted = tx
                .prepare_cached(INSERT_CONVERSATION)
                .and_then(|mut s| s.execute(params![id, created_at, metadata, owner]));
            match inserted {
                Ok(_) => {}
                Err(e) if is_unique_violation(&e) => return Err(StoreError::Duplicate(id)),
                Err(e) => return Err(map_err(e)),
            }
            if !new_items.is_empty() {
                let first = insert_items(tx, &new_items)?;
                tx.prepare_cached(APPEND_CONVERSATION_ITEMS)
                    .and_then(|mut s| s.execute(params![id, first, new_items.len() as i64, 0]))
                    .map_err(map_err)?;
            }
            Ok(())
        })
        .await
    }

    async fn conversation(&self, owner: &str, id: &str) -> Result<Option<ConversationRecord>, StoreError> {
        let (owner, id) = (owner.to_owned(), id.to_owned());
        self.read(move |conn| {
            let row = conn.prepare_cached(SELECT_CONVERSATION).and_then(|mut s| {
                s.query_row([&id, &owner], |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)))
            });
            match row {
                Ok((created_at, metadata)) => conversation_record(&id, created_at, &metadata).map(Some),
                Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                Err(e) => Err(map_err(e)),
            }
        })
        .await
    }

    async fn update_conversation(
        &self,
        owner: &str,
        id: &str,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<ConversationRecord>, StoreError> {
        let (owner, id) = (owner.to_owned(), id.to_owned());
        let metadata = encode(&metadata, "metadata")?;
        self.write(Growth::Adds, move |conn| {
            let row = conn.prepare_cached(UPDATE_CONVERSATION).and_then(|mut s| {
                s.query_row(params![id, metadata, owner], |row| Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?)))
            });
            match row {
                Ok((created_at, metadata)) => conversation_record(&id, created_at, &metadata).map(Some),
                Err(rusqlite::Error::QueryReturnedNoRows) => Ok(None),
                Err(e) => Err(map_err(e)),
            }
        })
        .await
    }

    async fn delete_conversation(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let (owner, id) = (owner.to_owned(), id.to_owned());
        self.write(Growth::Bounded, move |tx| run_now(delete_conversation(&mut Tx(tx), &owner, &id))).await
    }

    async fn conversation_history(&self, owner: &str, id: &str) -> Result<Option<ConversationHistory>, StoreError> {
        let (owner, id, cache) = (owner.to_owned(), id.to_owned(), Arc::clone(&self.inner.items));
        self.read(move |conn| {
            let found = query_items_and_version(conn, &cache, &CONVERSATION_HISTORY, [&id, &owner], true)?;
            Ok(found.map(|(items, version)| ConversationHistory { items, version }))
        })
        .await
    }

    async fn conversation_items(
        &self,
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError> {
        self.items_page(&CONVERSATION_ITEMS_PAGES, owner, id, page).await
    }

    async fn append_conversation_items(
        &self,
        owner: &str,
        id: &str,
        items: Vec<Item>,
        max_items: usize,
    ) -> Result<Option<()>, StoreError> {
        let (owner, id) = (owner.to_owned(), id.to_owned());
        let new_items = encode_items(&items)?;
        self.write(Growth::Adds, move |tx| {
            if !is_live(conversation_state(tx, &owner, &id)?) {
                return Ok(None);
            }
            let held: i64 = tx
                .prepare_cached(COUNT_CONVERSATION_ITEMS)
                .and_then(|mut s| s.query_row([&id], |row| row.get(0)))
                .map_err(map_err)?;
            check_room(held, new_items.len(), max_items)?;
            if !new_items.is_empty() {
                let first = insert_items(tx, &new_items)?;
                append_rows(tx, &id, first, new_items.len())?;
            }
            Ok(Some(()))
        })
        .await
    }

    async fn conversation_item(
        &self,
        owner: &str,
        id: &str,
        item_id: &str,
    ) -> Result<ConversationItemLookup<Item>, StoreError> {
        let (owner, id, item_id) = (owner.to_owned(), id.to_owned(), item_id.to_owned());
        let cache = Arc::clone(&self.inner.items);
        self.read(move |conn| {
            Ok(match query_items(conn, &cache, &CONVERSATION_ITEM, [&id, &item_id, &owner])? {
                None => ConversationItemLookup::NoConversation,
                Some(items) => match items.into_iter().next() {
                    None => ConversationItemLookup::NoItem,
                    Some(item) => ConversationItemLookup::Found(item),
                },
            })
        })
        .await
    }

    async fn delete_conversation_item(
        &self,
        owner: &str,
        id: &str,
        item_id: &str,
    ) -> Result<ConversationItemLookup<ConversationRecord>, StoreError> {
        let (owner, id, item_id) = (owner.to_owned(), id.to_owned(), item_id.to_owned());
        self.write(Growth::Bounded, move |tx| run_now(delete_conversation_item(&mut Tx(tx), &owner, &id, &item_id)))
            .await
    }
}

/// Run one of the rules shared with PostgreSQL (`crate::retention`, `crate::background`) on this
/// backend's statements. Those are synchronous (their futures never wait), so the rule completes
/// on its first poll, on the thread that holds the transaction.
fn run_now<T>(rule: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    match pin!(rule).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => result,
        Poll::Pending => Err(StoreError::Unavailable("a SQLite statement waited, which it never does".into())),
    }
}

/// The `i64`s of a one-column query (item keys).
fn query_keys(tx: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<Vec<i64>, StoreError> {
    let mut stmt = tx.prepare_cached(sql).map_err(map_err)?;
    let keys = stmt.query_map(params, |row| row.get::<_, i64>(0)).map_err(map_err)?;
    keys.collect::<Result<Vec<i64>, _>>().map_err(map_err)
}

/// Access for tests: raw SQL on the writer connection, and the internal counters.
#[cfg(test)]
impl SqliteStore {
    /// Run `f` in a write transaction on the writer connection; panics on an error (tests only).
    pub(crate) async fn with_writer<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> T {
        self.write(Growth::Bounded, move |conn| f(conn).map_err(map_err)).await.unwrap()
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

    /// Run `f` in a write transaction on the writer connection, rolled back afterwards whatever it
    /// returns.
    pub(crate) async fn with_writer_rolled_back(&self, f: impl FnOnce(&Connection) + Send + 'static) {
        let rolled_back = self
            .write(Growth::Bounded, move |conn| -> Result<(), StoreError> {
                f(conn);
                Err(StoreError::Unavailable("rolled back".into()))
            })
            .await;
        assert!(rolled_back.is_err());
    }
}

#[cfg(test)]
mod tests;
