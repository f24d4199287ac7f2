//! Persistence for stored responses: the backends of the [`ResponseStore`] trait (defined, with
//! the types its callers use, in `respgw-store-api` and re-exported here), and [`open`], which
//! picks a backend from a `GW_DB_PATH`-style location.
//!
//! # Model
//!
//! Items are stored once, in their own rows, each with a store key. A stored response keeps its
//! whole history as one ordered list of item keys (a checkpoint) in its own row: the list of the
//! response it continues (`history_from`), or of the conversation it was created in, then the keys
//! of its own input and output items. Continuing is therefore one read
//! ([`ResponseStore::history`]), never a walk of the chain, and saving a continuation writes one
//! row plus its new items whatever the depth: the inherited part of the list is copied from the
//! parent's row (or the conversation's rows) inside the database.
//!
//! Items belong to the response that wrote them, and only that response and its continuations
//! (which copied its keys) reference them — or, for a response created in a conversation, also
//! the conversation (see below). So a delete knows what to collect without a search:
//! a response that nothing continues is removed with its own items; one that is continued is
//! hidden instead (a tombstone: GET, listings and new continuations see it as gone) and kept
//! until its last continuation is deleted, which then removes it too, and so on up the chain.
//! Continuations of a deleted response therefore keep working.
//!
//! # Conversations
//!
//! A conversation (`conv_…`) is a record (metadata, a version) and an ordered list of rows naming
//! items (`conversation_items`). Items added through the conversations API are new rows owned by
//! the conversation alone; a response created in a conversation writes its items once, as its own
//! (`response_items`), and appends the same keys to the conversation, in the same transaction as
//! its row, whose history is the conversation's visible keys at the version the response read
//! (else the save fails with [`StoreError::ConversationChanged`] and writes nothing). The version
//! changes with every change of the item list, so two responses computed from one state cannot
//! both be saved: their items never interleave.
//!
//! Such a response's history names items the conversation holds, which clients may delete from
//! the conversation, or delete the conversation, or delete the response that produced them. What
//! keeps them is one rule, applied by every delete:
//!
//! - **An item row exists while a `response_items` row or a `conversation_items` row (removed or
//!   not) names it.**
//! - **A response row (tombstone or not) exists while a response continues it** (`history_from`),
//!   as above.
//! - **A conversation row and every one of its `conversation_items` rows exist while a response row
//!   (tombstone or not) names the conversation** (`conversation_id`). Meanwhile, deleting an item
//!   from the conversation only flags its row `removed`, and deleting the conversation only makes
//!   it a tombstone (hidden from every read, its metadata dropped, its id still taken).
//!
//! Every key of a stored history is then held: the response's own keys by its `response_items`
//! rows; inherited ones by its parent's row, which exists and (by the same argument) holds its
//! history; a conversation's keys by that conversation's rows, which exist while the response
//! does. And nothing is kept forever: when the last response naming a conversation is removed,
//! the conversation's removed rows go (or the whole conversation, if it is a tombstone), each with
//! the items nothing else names; when nothing references a conversation, deleting an item or the
//! conversation removes the rows and items at once. The test
//! `deleting_in_any_order_keeps_every_history_whole_and_leaves_nothing` checks both halves in
//! many deletion orders.
//!
//! # Backends
//!
//! - SQLite ([`sqlite::SqliteStore`], the embedded default): WAL mode, so every worker process
//!   opens the same file directly. The schema is versioned with SQLite's `PRAGMA user_version`
//!   (currently [`sqlite::SCHEMA_VERSION`]).
//! - PostgreSQL ([`postgres::PostgresStore`], for several hosts): a pool per process; the schema is
//!   versioned in the table `respgw_schema_migrations` (currently [`postgres::SCHEMA_VERSION`]) and
//!   migrated under an advisory lock, so processes may start together.
//!
//! # Files
//!
//! - `retention.rs`: the delete rules above, written once over `RetentionTx` (each backend's
//!   statements: `sqlite/retention.rs`, `postgres/retention.rs`); `background.rs` likewise holds
//!   what a run's lease allows, over `RunLedger`. `encoding.rs`: how responses, items and
//!   conversation metadata become stored text; `queries.rs`: the reads whose SQL is the same in
//!   both dialects. A rule changes there, never in one backend.
//! - `sqlite.rs` (+ `sqlite/`): rusqlite. Every write of a process is a job for its one writer
//!   thread (`sqlite/writer.rs`), which owns the writer connection and commits the jobs waiting
//!   together in one transaction, each in its own savepoint (group commit); each read is one hop to
//!   a blocking thread with a pooled reader (`--db-pool-size`). WAL mode, a busy handler between
//!   processes (`sqlite/connection.rs`) and background WAL checkpoints, never inside a request
//!   (`sqlite/checkpoint.rs`); several processes share one file safely. `sqlite/reserve.rs`: the
//!   disk-space reserve (`<db>-reserve`, `--db-reserve-mb`), released when a write or checkpoint
//!   fails with a full disk; while it is released, writes that add data are refused with
//!   [`StoreError::Full`] unless the database's free pages hold the reserve's size, deletes still
//!   run and checkpoints truncate; it is made again once the disk has room. Whether the file exists
//!   is the state every process shares.
//! - `postgres.rs`: a sqlx pool per process (`--db-pool-size`); each read and each save outside a
//!   conversation is one SQL statement, hence one round trip (the save is a chain of
//!   data-modifying CTEs). Migrations are applied at open under `pg_advisory_xact_lock`, and a newer
//!   schema is refused. A delete is a short transaction that locks the row first; the foreign key on
//!   `history_from` makes a save racing it either wait and be seen (tombstone) or fail cleanly.
//!   Conversation writes lock the conversation's row first (`FOR UPDATE`), so they run one after the
//!   other. Start-up connects directly first, so an unreachable server fails with its real cause.
//! - `sqlite/background.rs`, `postgres/background.rs` (shared pieces in `background.rs`): the
//!   `BackgroundStore` of each backend — runs, their event logs and per-tenant queue bounds
//!   (`create_run` counts the queue in its write transaction, on PostgreSQL under an advisory
//!   transaction lock); a batch that ends a completed response saves it in the same transaction.
//!   PostgreSQL sends `NOTIFY respgw_background` in each change's transaction and listens on one
//!   dedicated connection per process; SQLite has no channel (callers poll).
//! - `retrieval.rs` (+ `retrieval/`): the `RetrievalStore` of both backends, written once: each
//!   operation over a small connection trait (`Db`: run a statement, read its rows), the SQL once
//!   in PostgreSQL's dialect with the few differences filled in per backend (`retrieval/sql.rs`),
//!   rows decoded in `retrieval/codec.rs`, and the impl generated by `retrieval_store!` from each
//!   backend's way of running an operation (`sqlite/retrieval.rs`: the writer thread or a reader;
//!   `postgres/retrieval.rs`: a pooled connection or a transaction). Lexical search is FTS5 on
//!   SQLite, a generated `tsvector` on PostgreSQL; embeddings are little-endian `f32` blobs.
//! - `console.rs`: the `ConsoleStore` of both backends (the operator console's reads across
//!   tenants), written once over the retrieval module's `Db` like `retrieval.rs`, the impl
//!   generated by `console_store!` (`sqlite/console.rs`: a reader; `postgres/console.rs`: a
//!   pooled connection). Responses also keep their `rounds` and `input_text` for it (schema 8).
//! - `item_cache.rs`: decoded items by key, per process (keys are never reused and rows never
//!   change, so there is no invalidation); only reads fill it.
//! - Ownership: `responses.owner` and `conversations.owner` name the tenant that created the row;
//!   every statement that finds a row by id also filters on the owner. [`redacted_location`] is the
//!   only way a store location reaches a log or message (no password).
//! - `tests.rs`: the behaviour tests on both backends (`both!`).
//!
//! [`open`] picks one from the location (`postgres://…` or a SQLite path); both pass the same
//! behaviour tests (`tests.rs`). What the two share is written once: the deletion rules above
//! (`retention`, over each backend's statements), what a background run's lease allows
//! (`background`), how responses, items and metadata are encoded (`encoding`), and the reads whose
//! SQL is the same in both dialects (`queries`).

mod background;
mod console;
mod encoding;
mod item_cache;
pub mod postgres;
mod queries;
mod retention;
mod retrieval;
pub mod sqlite;

use std::sync::Arc;

pub use postgres::PostgresStore;
pub use respgw_store_api::{
    BackgroundStore, ConsoleStore, ConversationAppend, ConversationHistory, ConversationItemLookup, ConversationRecord,
    InputItemsList, InputItemsOrder, InputItemsPage, NewConversation, NewResponse, ResponseStore, RetrievalStore,
    StoreError,
};
pub use sqlite::{LockWaits, SqliteStore};

/// The locations [`open`] understands, for error messages.
const SUPPORTED: &str = "a file path (e.g. `respgw.db`), `sqlite://PATH`, `sqlite:PATH`, `:memory:`, or a \
                         `postgres://USER@HOST:PORT/DATABASE` URL";

/// Connections per process when no pool size is given (`GW_DB_POOL_SIZE`).
pub const DEFAULT_POOL_SIZE: u32 = 8;

/// How [`open_with`] sets a store up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// Connections per process: PostgreSQL's pool size; SQLite's reader connections (it has one
    /// writer besides).
    pub pool_size: u32,
    /// SQLite: the disk-space reserve kept next to the database file, in bytes (0: none), which
    /// lets deletes and checkpoints run when the disk is full (see `sqlite::reserve`).
    pub reserve_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self { pool_size: DEFAULT_POOL_SIZE, reserve_bytes: sqlite::DEFAULT_RESERVE_BYTES }
    }
}

/// A parsed store location: which backend, and its own address.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Location {
    /// A SQLite database file path, or `:memory:`.
    Sqlite(String),
    /// A `postgres://` / `postgresql://` URL, as given.
    Postgres(String),
}

/// Classify a location string. Anything with a URL scheme other than `sqlite` and `postgres` is
/// refused here, so a typo'd or unsupported URL never silently becomes a file name.
fn parse_location(location: &str) -> Result<Location, StoreError> {
    let location = location.trim();
    if location.is_empty() {
        return Err(StoreError::Unavailable(format!("empty store location; supported are {SUPPORTED}")));
    }
    if let Some((scheme, rest)) = location.split_once(':') {
        // A one-letter "scheme" is a Windows drive (`C:\…`), not a URL.
        let is_scheme = scheme.len() > 1
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if is_scheme {
            let scheme_lc = scheme.to_ascii_lowercase();
            if scheme_lc == "sqlite" {
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(StoreError::Unavailable(format!(
                        "store location {location:?} names no file; supported are {SUPPORTED}"
                    )));
                }
                return Ok(Location::Sqlite(path.to_owned()));
            }
            if matches!(scheme_lc.as_str(), "postgres" | "postgresql") {
                if !rest.starts_with("//") {
                    return Err(StoreError::Unavailable(format!(
                        "store location {:?} is not a PostgreSQL URL; supported are {SUPPORTED}",
                        redacted_location(location)
                    )));
                }
                return Ok(Location::Postgres(location.to_owned()));
            }
            if rest.starts_with("//") || matches!(scheme_lc.as_str(), "mysql" | "mariadb") {
                return Err(StoreError::Unavailable(format!(
                    "unsupported store location {:?}: scheme `{scheme}` is not supported; supported are {SUPPORTED}",
                    redacted_location(location)
                )));
            }
        }
    }
    Ok(Location::Sqlite(location.to_owned()))
}

/// The location as it may be shown in logs and messages: a URL's password (in the user part or a
/// `password=` parameter) is replaced by `REDACTED`. A URL that cannot be parsed is not shown.
pub fn redacted_location(location: &str) -> String {
    let trimmed = location.trim();
    let Some((scheme, _)) = trimmed.split_once("://") else { return trimmed.to_owned() };
    if scheme.eq_ignore_ascii_case("sqlite") {
        return trimmed.to_owned();
    }
    let Ok(mut url) = url::Url::parse(trimmed) else { return format!("{scheme}://(unparsable URL, not shown)") };
    if url.password().is_some() && url.set_password(Some("REDACTED")).is_err() {
        return format!("{scheme}://(URL not shown)");
    }
    if url.query_pairs().any(|(k, _)| k.eq_ignore_ascii_case("password")) {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(k, v)| {
                let v = if k.eq_ignore_ascii_case("password") { "REDACTED".to_owned() } else { v.into_owned() };
                (k.into_owned(), v)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

/// Open the store named by a `GW_DB_PATH`-style location with default [`StoreOptions`]; see
/// [`open_with`].
pub async fn open(location: &str) -> Result<Arc<dyn ResponseStore>, StoreError> {
    open_with(location, StoreOptions::default()).await
}

/// Open the store named by a `GW_DB_PATH`-style location: a file path (e.g. `respgw.db`, relative
/// to the CWD), `sqlite://path` / `sqlite:path` (`:memory:` gives a private in-memory store, for
/// tests), or a `postgres://` / `postgresql://` URL. Creates (or migrates) the schema, and the
/// SQLite file, if missing. Anything else is an [`StoreError::Unavailable`] saying which locations
/// are supported. Messages never contain a password.
pub async fn open_with(location: &str, options: StoreOptions) -> Result<Arc<dyn ResponseStore>, StoreError> {
    Ok(open_stores(location, options).await?.responses)
}

/// The faces of one opened store: the responses, the background runs, retrieval and the console,
/// sharing connections.
#[derive(Clone)]
pub struct Stores {
    pub responses: Arc<dyn ResponseStore>,
    pub background: Arc<dyn BackgroundStore>,
    pub retrieval: Arc<dyn RetrievalStore>,
    /// The operator console's reads across tenants.
    pub console: Arc<dyn ConsoleStore>,
    /// A SQLite file's count of waits for other processes' locks; `None` for PostgreSQL (whose
    /// lock waits happen in the server) and in-memory SQLite (no other process).
    pub lock_waits: Option<LockWaits>,
}

/// [`open_with`], giving the background runs' face of the same store too.
pub async fn open_stores(location: &str, options: StoreOptions) -> Result<Stores, StoreError> {
    fn both<S: ResponseStore + BackgroundStore + RetrievalStore + ConsoleStore>(
        store: S,
        lock_waits: Option<LockWaits>,
    ) -> Stores {
        let store = Arc::new(store);
        Stores {
            responses: Arc::clone(&store) as Arc<dyn ResponseStore>,
            background: Arc::clone(&store) as Arc<dyn BackgroundStore>,
            retrieval: Arc::clone(&store) as Arc<dyn RetrievalStore>,
            console: store,
            lock_waits,
        }
    }
    Ok(match parse_location(location)? {
        Location::Sqlite(path) if path == ":memory:" => both(SqliteStore::open_in_memory().await?, None),
        Location::Sqlite(path) => {
            let config = sqlite::Config {
                max_readers: options.pool_size.max(1) as usize,
                reserve_bytes: options.reserve_bytes,
                ..Default::default()
            };
            let store = SqliteStore::open_with(std::path::Path::new(&path), config).await?;
            let lock_waits = store.lock_waits();
            both(store, Some(lock_waits))
        }
        Location::Postgres(url) => both(PostgresStore::open(&url, options.pool_size).await?, None),
    })
}

#[cfg(test)]
mod tests;
