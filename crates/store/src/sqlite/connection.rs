//! Opening and configuring SQLite connections: the writer, the readers and the checkpointer's,
//! their busy handler, the schema migration, and the mapping of driver errors to [`StoreError`].
//!
//! Everything here is synchronous and runs on a thread of its own or of tokio's blocking pool (never
//! on the async runtime).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior, ffi};

use super::SCHEMA_VERSION;
use crate::StoreError;

/// The version-1 schema. Idempotent, and run inside one `BEGIN IMMEDIATE` transaction (like every
/// migration) so that processes racing to create it take turns.
pub(crate) const SCHEMA_V1: &str = "
    CREATE TABLE IF NOT EXISTS items (
        key INTEGER PRIMARY KEY AUTOINCREMENT,
        item_id TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS responses (
        id TEXT PRIMARY KEY,
        previous_response_id TEXT,
        model TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        body TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS response_items (
        response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        item_key INTEGER NOT NULL REFERENCES items(key),
        role INTEGER NOT NULL,
        PRIMARY KEY (response_id, position)
    );
    CREATE INDEX IF NOT EXISTS response_items_item_key ON response_items(item_key);
    PRAGMA user_version = 1;";

/// Version 2: a response keeps its whole conversation as one key list (`history`, a JSON array)
/// instead of one `response_items` row per inherited item, names the response it continues
/// (`history_from`), and can be a tombstone (`deleted`). The lists are built from the version-1
/// rows; items that version 1 kept for continuations of an already deleted response are left as
/// they are (still readable, never collected).
pub(crate) const SCHEMA_V2: &str = "
    ALTER TABLE responses ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE responses ADD COLUMN history_from TEXT REFERENCES responses(id);
    ALTER TABLE responses ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
    UPDATE responses SET history = (
        SELECT json_group_array(ri.item_key ORDER BY ri.position)
        FROM response_items ri WHERE ri.response_id = responses.id);
    UPDATE responses SET history_from = previous_response_id
    WHERE EXISTS (SELECT 1 FROM response_items ri WHERE ri.response_id = responses.id AND ri.role = 0)
    AND EXISTS (SELECT 1 FROM responses p WHERE p.id = responses.previous_response_id);
    DELETE FROM response_items WHERE role = 0;
    CREATE INDEX responses_history_from ON responses(history_from);
    PRAGMA user_version = 2;";

/// Version 3: conversations. `conversations` holds each one's record and version (`deleted` marks
/// a tombstone kept for the responses created in it), `conversation_items` its item keys in order
/// (`removed` marks an item taken out of the conversation but kept for those responses), and a
/// response created in a conversation names it (`conversation_id`).
const SCHEMA_V3: &str = "
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL,
        metadata TEXT NOT NULL,
        version INTEGER NOT NULL DEFAULT 0,
        deleted INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE conversation_items (
        conversation_id TEXT NOT NULL REFERENCES conversations(id),
        position INTEGER NOT NULL,
        item_key INTEGER NOT NULL REFERENCES items(key),
        removed INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (conversation_id, position)
    );
    CREATE INDEX conversation_items_item_key ON conversation_items(item_key);
    ALTER TABLE responses ADD COLUMN conversation_id TEXT REFERENCES conversations(id);
    CREATE INDEX responses_conversation_id ON responses(conversation_id);
    PRAGMA user_version = 3;";

/// Version 4: background runs (`background_runs`: status, the response object as it stands, the
/// owning process and its lease, the next event number, when it ended) and their event logs
/// (`background_events`). New tables only.
const SCHEMA_V4: &str = "
    CREATE TABLE background_runs (
        id TEXT PRIMARY KEY,
        status TEXT NOT NULL,
        body TEXT NOT NULL,
        owner TEXT NOT NULL,
        lease_until INTEGER NOT NULL,
        next_seq INTEGER NOT NULL,
        ended_at INTEGER
    );
    CREATE INDEX background_runs_lease ON background_runs(lease_until) WHERE ended_at IS NULL;
    CREATE INDEX background_runs_ended ON background_runs(ended_at) WHERE ended_at IS NOT NULL;
    CREATE TABLE background_events (
        run_id TEXT NOT NULL REFERENCES background_runs(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID;
    PRAGMA user_version = 4;";

/// Version 5: ownership. Each response and conversation records the tenant that created it
/// (`owner`), and each background run (`tenant`: its `owner` is the process running it); rows from
/// before belong to the tenant `default`.
const SCHEMA_V5: &str = "
    ALTER TABLE responses ADD COLUMN owner TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE conversations ADD COLUMN owner TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE background_runs ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
    PRAGMA user_version = 5;";

/// Version 6: the queue of background runs. `queued_at` orders a process's queued runs;
/// `started_at` marks a run that left the queue for a run slot (a run with neither it nor
/// `ended_at` is queued); the partial index serves the counts of unfinished runs by tenant;
/// `background_tenants` keeps when each tenant's last run started (whose turn is next).
/// Runs from before count as started unless they are still `queued`.
const SCHEMA_V6: &str = "
    ALTER TABLE background_runs ADD COLUMN queued_at INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE background_runs ADD COLUMN started_at INTEGER;
    UPDATE background_runs SET started_at = 0 WHERE status <> 'queued';
    CREATE INDEX background_runs_unfinished ON background_runs(tenant) WHERE ended_at IS NULL;
    CREATE TABLE background_tenants (tenant TEXT PRIMARY KEY, last_started_at INTEGER NOT NULL);
    PRAGMA user_version = 6;";

/// Version 7: retrieval. Uploaded files (`files`, their bytes apart in `file_contents`), vector
/// stores, their files (with the ingestion queue's lease columns) and file batches, and the
/// chunks ingestion cuts files into, with their embeddings (little-endian `f32` blobs) and an FTS5
/// index over their text and store id (`chunks_fts`, external content kept in step by triggers;
/// a search names its stores in the query, so it ranks only their chunks). Deleting a
/// file, a vector store or a vector-store file cascades to what hangs off it.
const SCHEMA_V7: &str = "
    CREATE TABLE files (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        filename TEXT NOT NULL,
        purpose TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER
    );
    CREATE INDEX files_owner ON files(owner, created_at, id);
    CREATE TABLE file_contents (
        file_id TEXT PRIMARY KEY REFERENCES files(id) ON DELETE CASCADE,
        content BLOB NOT NULL
    );
    CREATE TABLE vector_stores (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        name TEXT,
        metadata TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        last_active_at INTEGER NOT NULL,
        expires_after TEXT,
        expires_days INTEGER,
        expires_at INTEGER,
        embedding_model TEXT,
        embedding_dimensions INTEGER,
        generation INTEGER NOT NULL
    );
    CREATE INDEX vector_stores_owner ON vector_stores(owner, created_at, id);
    CREATE TABLE vector_store_file_batches (
        id TEXT PRIMARY KEY,
        vector_store_id TEXT NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        cancelled INTEGER NOT NULL
    );
    CREATE INDEX vector_store_file_batches_store ON vector_store_file_batches(vector_store_id);
    CREATE TABLE vector_store_files (
        vector_store_id TEXT NOT NULL REFERENCES vector_stores(id) ON DELETE CASCADE,
        file_id TEXT NOT NULL REFERENCES files(id) ON DELETE CASCADE,
        owner TEXT NOT NULL,
        status TEXT NOT NULL,
        attributes TEXT NOT NULL,
        chunking_strategy TEXT NOT NULL,
        usage_bytes INTEGER NOT NULL,
        created_at INTEGER NOT NULL,
        error_code TEXT,
        error_message TEXT,
        batch_id TEXT,
        lease_worker TEXT,
        lease_until INTEGER,
        attempts INTEGER NOT NULL,
        queued INTEGER NOT NULL,
        PRIMARY KEY (vector_store_id, file_id)
    );
    CREATE INDEX vector_store_files_file ON vector_store_files(file_id);
    CREATE INDEX vector_store_files_page ON vector_store_files(vector_store_id, created_at, file_id);
    CREATE INDEX vector_store_files_batch ON vector_store_files(batch_id) WHERE batch_id IS NOT NULL;
    CREATE INDEX vector_store_files_queued ON vector_store_files(queued);
    CREATE INDEX vector_store_files_queue ON vector_store_files(queued) WHERE status = 'in_progress';
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        vector_store_id TEXT NOT NULL,
        file_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        text TEXT NOT NULL,
        tokens INTEGER NOT NULL,
        embedding BLOB,
        FOREIGN KEY (vector_store_id, file_id) REFERENCES vector_store_files(vector_store_id, file_id)
            ON DELETE CASCADE
    );
    CREATE INDEX chunks_file ON chunks(vector_store_id, file_id, seq);
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        text, vector_store_id, content = 'chunks', content_rowid = 'id',
        tokenize = 'porter unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER chunks_fts_insert AFTER INSERT ON chunks BEGIN
        INSERT INTO chunks_fts (rowid, text, vector_store_id) VALUES (new.id, new.text, new.vector_store_id);
    END;
    CREATE TRIGGER chunks_fts_delete AFTER DELETE ON chunks BEGIN
        INSERT INTO chunks_fts (chunks_fts, rowid, text, vector_store_id)
        VALUES ('delete', old.id, old.text, old.vector_store_id);
    END;
    CREATE VIRTUAL TABLE chunks_fts_terms USING fts5vocab(chunks_fts, 'row');
    PRAGMA user_version = 7;";

/// Version 8: the operator console. Each response keeps its upstream calls (`rounds`, a JSON
/// array of `RoundRecord`s) and the text of its own input (`input_text`, what the console's
/// search matches); rows from before get none. Indexes serve the console's lists, newest first,
/// of one tenant or all, and a response's continuations (`previous_response_id`).
const SCHEMA_V8: &str = "
    ALTER TABLE responses ADD COLUMN rounds TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE responses ADD COLUMN input_text TEXT NOT NULL DEFAULT '';
    CREATE INDEX responses_owner_created ON responses(owner, created_at, id);
    CREATE INDEX responses_created ON responses(created_at, id);
    CREATE INDEX responses_previous ON responses(previous_response_id);
    CREATE INDEX conversations_owner_created ON conversations(owner, created_at, id);
    CREATE INDEX conversations_created ON conversations(created_at, id);
    CREATE INDEX background_runs_tenant_queued ON background_runs(tenant, queued_at, id);
    CREATE INDEX background_runs_queued ON background_runs(queued_at, id);
    CREATE INDEX files_created ON files(created_at, id);
    CREATE INDEX vector_stores_created ON vector_stores(created_at, id);
    PRAGMA user_version = 8;";

/// Migration `n` (1-based) takes the schema from version `n - 1` to `n`.
pub(crate) const MIGRATIONS: &[&str] =
    &[SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8];

/// Prepared statements kept per connection. The store uses about forty fixed statements (responses
/// and conversations), one multi-row item insert per chunk length (see `ITEMS_PER_INSERT` in the
/// parent module), about forty retrieval statements and four shapes of each of its three lists;
/// this leaves room so that none is ever evicted and re-prepared.
const STATEMENT_CACHE: usize = 192;

/// Tunables of one store. [`Default`] is what production uses; tests shrink some of them.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// How long one statement keeps retrying a lock held by another process before giving up with
    /// [`StoreError::Unavailable`] (what a 5 s `busy_timeout` was before).
    pub busy_budget: Duration,
    /// Reader connections per process (created on demand).
    pub max_readers: usize,
    /// The checkpointer runs at least this often.
    pub checkpoint_interval: Duration,
    /// A commit that leaves at least this many frames in the WAL wakes the checkpointer early.
    pub checkpoint_pages: i32,
    /// A commit that leaves this many frames in the WAL waits, holding the writer, for a
    /// checkpoint that copies them all, so that the WAL cannot keep growing under overload (see
    /// the checkpoint module). Waits at most `busy_budget`.
    pub max_wal_pages: i32,
    /// `PRAGMA journal_size_limit`: when the WAL starts over from its beginning, its file is
    /// truncated to this many bytes, so a burst does not leave a large file behind for good.
    pub journal_size_limit: i64,
    /// The disk-space reserve kept next to the database, in bytes (0: none; see the `reserve`
    /// module).
    pub reserve_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            busy_budget: Duration::from_secs(5),
            max_readers: 8,
            checkpoint_interval: Duration::from_secs(1),
            // 16 MiB of 4 KiB pages, four times SQLite's own automatic checkpoint. A checkpoint
            // syncs both files and copies each page once however many commits rewrote it (a
            // table's last leaf, an index's), so fewer, larger rounds cost less per write: at a
            // saved response every 0.35 ms, the checkpointer's CPU per save halves against 1000.
            checkpoint_pages: 4000,
            // 64 MiB: never reached while the checkpointer keeps up.
            max_wal_pages: 16000,
            // About twice the usual high-water mark (`checkpoint_pages` plus what arrives while a
            // checkpoint runs), so that a WAL of normal size is reused, not truncated and regrown
            // every time.
            journal_size_limit: 32 << 20,
            reserve_bytes: super::reserve::DEFAULT_RESERVE_BYTES,
        }
    }
}

/// Counters for tests and diagnostics. Cheap (relaxed atomics), so they are always kept.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    /// Lock waits begun by the busy handler of any connection of this store: statements that
    /// found a lock another process held.
    pub lock_waits: AtomicU64,
    /// Sleeps taken by the busy handler of any connection of this store.
    pub busy_sleeps: AtomicU64,
    /// The time those sleeps took, in microseconds: how long this process waited for locks held by
    /// other processes.
    pub busy_wait_micros: AtomicU64,
    /// Write transactions the writer thread began (each commits a group of writes).
    pub write_transactions: AtomicU64,
    /// Checkpoints the checkpointer ran (successful or not).
    pub checkpoints: AtomicU64,
    /// Commits that waited for a checkpoint because the WAL had reached `max_wal_pages`.
    pub wal_waits: AtomicU64,
    /// The most frames this process's commits ever left in the WAL.
    pub wal_frames_max: AtomicI32,
    /// Of the last checkpoint: frames in the WAL, and how many of them are in the database file
    /// (`-1` when it failed).
    pub last_checkpoint: std::sync::Mutex<(i32, i32)>,
}

/// Flags for every file connection. `SQLITE_OPEN_URI` as before (sqlx set it), so a `file:` URI
/// location keeps working; `NO_MUTEX` because each connection is used by one thread at a time.
fn flags(create: bool) -> OpenFlags {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_PRIVATE_CACHE;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    flags
}

/// Install the store's busy handler: called by SQLite when another connection (in practice
/// another process, since this process serializes its own writers) holds a lock this statement
/// needs. SQLite's default handler (`busy_timeout`) backs off 1, 2, 5, 10, … up to 100 ms, which
/// turns a lock held for 100 µs into a 1–100 ms stall; this one sleeps 50 µs, doubling up to 2 ms,
/// within the same total budget. Returning false makes the statement fail with `SQLITE_BUSY`.
fn set_busy_handler(conn: &mut Connection, budget: Duration, stats: &Arc<Stats>) -> rusqlite::Result<()> {
    const FIRST: Duration = Duration::from_micros(50);
    const MAX: Duration = Duration::from_millis(2);
    let stats = Arc::clone(stats);
    // When the current wait began; `attempt` restarts at 0 for every new lock wait.
    let mut since = Instant::now();
    conn.busy_handler(Some(move |attempt: i32| {
        if attempt == 0 {
            since = Instant::now();
            stats.lock_waits.fetch_add(1, Ordering::Relaxed);
        }
        let shift = u32::try_from(attempt).unwrap_or(0).min(6);
        let sleep = FIRST.saturating_mul(1 << shift).min(MAX);
        if since.elapsed() + sleep > budget {
            return false;
        }
        stats.busy_sleeps.fetch_add(1, Ordering::Relaxed);
        let slept = Instant::now();
        std::thread::sleep(sleep);
        let micros = u64::try_from(slept.elapsed().as_micros()).unwrap_or(u64::MAX);
        stats.busy_wait_micros.fetch_add(micros, Ordering::Relaxed);
        true
    }))
}

/// Settings every connection of a file store shares.
fn configure(conn: &mut Connection, config: &Config, stats: &Arc<Stats>) -> rusqlite::Result<()> {
    set_busy_handler(conn, config.busy_budget, stats)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // No checkpoint inside a commit: the checkpointer thread does them (see its module). The
    // pragma is per connection; it is set before the writer installs its WAL hook, which it would
    // otherwise replace.
    conn.execute_batch(&format!(
        "PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = {};",
        config.journal_size_limit
    ))
}

/// Open the process's writer connection on a file (creating it), switch it to WAL and create the
/// schema if missing. Returns the connection and the schema version found (the caller refuses a
/// newer one).
pub(crate) fn open_writer(path: &Path, config: &Config, stats: &Arc<Stats>) -> rusqlite::Result<(Connection, i64)> {
    let mut conn = Connection::open_with_flags(path, flags(true))?;
    configure(&mut conn, config, stats)?;
    // WAL lets readers run beside the writer and other processes share the file. The mode is
    // persistent, so this only does something on a fresh file, where it needs an exclusive lock
    // that SQLite does not wait for: the caller retries `SQLITE_BUSY` at start-up.
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        // SQLite keeps the old mode when it cannot switch; retry like a lock, then give up.
        return Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_BUSY),
            Some(format!("cannot switch the database to WAL mode (it stays in {mode:?})")),
        ));
    }
    // NORMAL: a commit is durable once the WAL is synced at checkpoint time; a power loss may
    // drop the last commits but never corrupts the file (the usual choice with WAL).
    conn.execute_batch("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;")?;
    let version = migrate(&mut conn)?;
    Ok((conn, version))
}

/// Open a reader connection on an existing file store.
pub(crate) fn open_reader(path: &Path, config: &Config, stats: &Arc<Stats>) -> rusqlite::Result<Connection> {
    let mut conn = Connection::open_with_flags(path, flags(false))?;
    configure(&mut conn, config, stats)?;
    // Readers never write; make a mistake fail loudly instead of racing the writer.
    conn.execute_batch("PRAGMA query_only = ON;")?;
    Ok(conn)
}

/// Open the checkpointer's connection on an existing file store.
pub(crate) fn open_checkpointer(path: &Path, config: &Config, stats: &Arc<Stats>) -> rusqlite::Result<Connection> {
    let mut conn = Connection::open_with_flags(path, flags(false))?;
    configure(&mut conn, config, stats)?;
    // A connection learns that the file is in WAL mode (and opens the WAL) at its first read
    // transaction; until then `wal_checkpoint` does nothing and reports -1 frames.
    let mode: String = conn
        .query_row("SELECT COUNT(*) FROM sqlite_schema", [], |_| Ok(()))
        .and_then(|()| conn.query_row("PRAGMA journal_mode", [], |row| row.get(0)))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_BUSY),
            Some(format!("the database is not in WAL mode (it is in {mode:?})")),
        ));
    }
    Ok(conn)
}

/// A private in-memory database: a single connection (the database lives as long as it does).
pub(crate) fn open_memory() -> rusqlite::Result<(Connection, i64)> {
    let mut conn = Connection::open_in_memory()?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.execute_batch("PRAGMA foreign_keys = ON;")?;
    let version = migrate(&mut conn)?;
    Ok((conn, version))
}

/// Create the schema if the database has none, or bring it up to [`SCHEMA_VERSION`]; returns the
/// version found (newer versions are left untouched for the caller to refuse).
fn migrate(conn: &mut Connection) -> rusqlite::Result<i64> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    for (target, sql) in (1..).zip(MIGRATIONS) {
        if version < target {
            tx.execute_batch(sql)?;
        }
    }
    debug_assert_eq!(MIGRATIONS.len() as i64, SCHEMA_VERSION, "one migration per schema version");
    tx.commit()?;
    Ok(version)
}

/// The SQLite error code of a driver error, if it is one.
fn code(e: &rusqlite::Error) -> Option<ErrorCode> {
    e.sqlite_error_code()
}

/// A lock held elsewhere (after the busy handler gave up, or a lock it is not asked about).
pub(crate) fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(code(e), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// The disk (or the database's size limit) is full.
pub(crate) fn is_disk_full(e: &rusqlite::Error) -> bool {
    code(e) == Some(ErrorCode::DiskFull)
}

/// The extended result code of a constraint violation.
fn constraint(e: &rusqlite::Error) -> Option<i32> {
    match e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == ErrorCode::ConstraintViolation => Some(f.extended_code),
        _ => None,
    }
}

/// A `PRIMARY KEY` or `UNIQUE` violation.
pub(crate) fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(constraint(e), Some(ffi::SQLITE_CONSTRAINT_PRIMARYKEY | ffi::SQLITE_CONSTRAINT_UNIQUE))
}

/// A `REFERENCES` violation.
pub(crate) fn is_foreign_key_violation(e: &rusqlite::Error) -> bool {
    constraint(e) == Some(ffi::SQLITE_CONSTRAINT_FOREIGNKEY)
}

/// Map a driver error to the store's vocabulary. Unique violations are mapped by the caller, which
/// knows which id collided.
pub(crate) fn map_err(e: rusqlite::Error) -> StoreError {
    if is_foreign_key_violation(&e) {
        return StoreError::MissingHistory(e.to_string());
    }
    match &e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => StoreError::Corrupt(e.to_string()),
            ErrorCode::DiskFull => StoreError::Full(format!("the disk holding the database is full ({e})")),
            // Busy, locked, I/O, full disk, cannot open, read-only…: an operator or a retry can
            // fix these.
            _ => StoreError::Unavailable(e.to_string()),
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::InvalidColumnIndex(_)
        | rusqlite::Error::InvalidColumnName(_)
        | rusqlite::Error::Utf8Error(..) => StoreError::Corrupt(e.to_string()),
        _ => StoreError::Unavailable(e.to_string()),
    }
}
