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
//! - `responses(id, previous_response_id, model, created_at, status, body, history, history_from,
//!   deleted, conversation_id, owner)`; `body` is text, not `jsonb`, so that GET returns the object with
//!   its keys in their original order; `history` is the history's item keys (`bigint[]`);
//!   `history_from` the response it continues (a foreign key, indexed); `deleted` marks a
//!   tombstone; `conversation_id` the conversation it was created in (a foreign key, indexed);
//!   `owner` the tenant that created it (every read or write by id filters on it).
//! - `response_items(response_id, position, item_key, role)`: the response's own items (role 1
//!   input, 2 output), in order.
//! - `conversations(id, created_at, metadata, version, deleted, owner)`: `metadata` is a JSON
//!   object as text (key order kept); `version` moves on with every change of the item list;
//!   `owner` as for responses.
//! - `conversation_items(conversation_id, position, item_key, removed)`: a conversation's items in
//!   order (`item_key` indexed); `removed` marks an item deleted from the conversation but kept for
//!   the responses created in it.
//! - `background_runs` and `background_events` (version 4): background runs and their event
//!   logs (see the `background` module); their queue (`queued_at`, `started_at`, version 6).
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
//! Each read and each save outside a conversation is a single SQL statement (the save a chain of
//! data-modifying CTEs, atomic as one statement), so it costs one network round trip once the pool's connection has
//! prepared it. A delete is a short transaction: it locks the response's row, then removes it or
//! makes it a tombstone, and climbs the chain while tombstones lose their last continuation.
//!
//! # Saves racing deletes
//!
//! A save names the response it continues in `history_from`, a foreign key: checking it locks that
//! row (`FOR KEY SHARE`) until the save commits, and a delete starts by locking the same row `FOR
//! UPDATE`. Whichever comes second waits for the first. A delete that went first and removed the
//! row makes the save fail on the key (nothing is written: [`StoreError::MissingHistory`]); a save
//! that went first is seen by the delete, which then only makes a tombstone.
//!
//! # Conversations
//!
//! Every write of a conversation is a short transaction that starts by locking the conversation's
//! row (`FOR UPDATE`): a save into it (then checking the version it was computed from; the save
//! itself is one statement of CTEs, in the snapshot taken after the lock, so it sees every
//! earlier write), an items append or delete, a conversation delete, and a response delete that
//! may release the conversation (after removing the response, so the lock order is always
//! response, then conversation). Writes of one conversation thus run one after the other, each
//! seeing the one before: of two saves computed from one version, the second finds the version
//! moved on and fails with [`StoreError::ConversationChanged`]. Reads are single statements.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use respgw_protocol::Item;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Row};

mod background;

use crate::item_cache::{DEFAULT_ITEM_CACHE_BYTES, ItemCache};
use crate::{
    ConversationHistory, ConversationItemLookup, ConversationRecord, InputItemsList, InputItemsOrder, InputItemsPage,
    NewConversation, NewResponse, ResponseStore, StoreError,
};

/// The schema version this code reads and writes (the highest row of `respgw_schema_migrations`).
pub const SCHEMA_VERSION: i32 = 6;

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

pub(crate) const MIGRATIONS_TABLE: &str = "
    CREATE TABLE IF NOT EXISTS respgw_schema_migrations (
        version integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
    )";

/// Migration `n` (1-based) takes the schema from version `n - 1` to `n`.
pub(crate) const MIGRATIONS: &[&str] = &[
    "
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
    CREATE INDEX response_items_item_key ON response_items (item_key);",
    "
    ALTER TABLE responses
        ADD COLUMN history bigint[] NOT NULL DEFAULT '{}',
        ADD COLUMN history_from text REFERENCES responses(id),
        ADD COLUMN deleted boolean NOT NULL DEFAULT false;
    UPDATE responses r SET history = coalesce(
        (SELECT array_agg(ri.item_key ORDER BY ri.position) FROM response_items ri WHERE ri.response_id = r.id),
        '{}');
    UPDATE responses r SET history_from = r.previous_response_id
    WHERE EXISTS (SELECT 1 FROM response_items ri WHERE ri.response_id = r.id AND ri.role = 0)
    AND EXISTS (SELECT 1 FROM responses p WHERE p.id = r.previous_response_id);
    DELETE FROM response_items WHERE role = 0;
    CREATE INDEX responses_history_from ON responses (history_from);",
    "
    CREATE TABLE conversations (
        id text PRIMARY KEY,
        created_at bigint NOT NULL,
        metadata text NOT NULL,
        version bigint NOT NULL DEFAULT 0,
        deleted boolean NOT NULL DEFAULT false
    );
    CREATE TABLE conversation_items (
        conversation_id text NOT NULL REFERENCES conversations(id),
        position integer NOT NULL,
        item_key bigint NOT NULL REFERENCES items(key),
        removed boolean NOT NULL DEFAULT false,
        PRIMARY KEY (conversation_id, position)
    );
    CREATE INDEX conversation_items_item_key ON conversation_items (item_key);
    ALTER TABLE responses ADD COLUMN conversation_id text REFERENCES conversations(id);
    CREATE INDEX responses_conversation_id ON responses (conversation_id);",
    "
    CREATE TABLE background_runs (
        id text PRIMARY KEY,
        status text NOT NULL,
        body text NOT NULL,
        owner text NOT NULL,
        lease_until bigint NOT NULL,
        next_seq bigint NOT NULL,
        ended_at bigint
    );
    CREATE INDEX background_runs_lease ON background_runs (lease_until) WHERE ended_at IS NULL;
    CREATE INDEX background_runs_ended ON background_runs (ended_at) WHERE ended_at IS NOT NULL;
    CREATE TABLE background_events (
        run_id text NOT NULL REFERENCES background_runs(id) ON DELETE CASCADE,
        seq bigint NOT NULL,
        kind text NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (run_id, seq)
    );",
    // Ownership: rows from before belong to the tenant `default` (a background run's `owner` is
    // the process running it, its tenant is `tenant`). Lookups are by primary key, so the columns
    // need no index.
    "
    ALTER TABLE responses ADD COLUMN owner text NOT NULL DEFAULT 'default';
    ALTER TABLE conversations ADD COLUMN owner text NOT NULL DEFAULT 'default';
    ALTER TABLE background_runs ADD COLUMN tenant text NOT NULL DEFAULT 'default';",
    // The queue of background runs: `queued_at` orders a process's queued runs, `started_at`
    // marks a run that left the queue for a run slot (with neither it nor `ended_at`, a run is
    // queued); the partial index serves the counts of unfinished runs by tenant; `background_tenants`
    // keeps when each tenant's last run started (whose turn is next). Runs from before
    // count as started unless they are still `queued`.
    "
    ALTER TABLE background_runs ADD COLUMN queued_at bigint NOT NULL DEFAULT 0;
    ALTER TABLE background_runs ADD COLUMN started_at bigint;
    UPDATE background_runs SET started_at = 0 WHERE status <> 'queued';
    CREATE INDEX background_runs_unfinished ON background_runs (tenant) WHERE ended_at IS NULL;
    CREATE TABLE background_tenants (tenant text PRIMARY KEY, last_started_at bigint NOT NULL);",
];

/// The whole save as one statement. The new items (`$8` ids, `$9` bodies), each drawing its key
/// in a materialized CTE so that a key and its item stay paired; the response row, whose key list
/// is that of the response it continues (`$7`) followed by the new keys; then the rows of its own
/// items, the first `$10` being input. The foreign key on `history_from` fails the statement as a
/// whole when that response is gone; a response of another owner than `$11` counts as gone (its id
/// is replaced by `''`, which names no row).
const SAVE: &str = "
    WITH new_items AS MATERIALIZED (
        SELECT nextval('items_key_seq') AS key, n.ord, n.item_id, n.body
        FROM unnest($8::text[], $9::text[]) WITH ORDINALITY AS n(item_id, body, ord)
    ),
    stored_items AS (
        INSERT INTO items (key, item_id, body) SELECT key, item_id, body FROM new_items
    ),
    response AS (
        INSERT INTO responses (id, previous_response_id, model, created_at, status, body, history_from, history,
            owner)
        VALUES ($1, $2, $3, $4, $5, $6,
            CASE WHEN $7::text IS NULL THEN NULL
                ELSE coalesce((SELECT p.id FROM responses p WHERE p.id = $7 AND p.owner = $11), '') END,
            coalesce((SELECT p.history FROM responses p WHERE p.id = $7 AND p.owner = $11), '{}')
            || ARRAY(SELECT key FROM new_items ORDER BY ord),
            $11)
        RETURNING id
    )
    INSERT INTO response_items (response_id, position, item_key, role)
    SELECT (SELECT id FROM response), n.ord - 1, n.key, CASE WHEN n.ord <= $10 THEN 1 ELSE 2 END
    FROM new_items n";

/// The save of a response created in a conversation (`$7`) by owner `$11`, run once the
/// conversation's row is locked and its owner and version checked: the new items (`$8` ids, `$9`
/// bodies, the first `$10` being input); the response row, whose key list is the conversation's visible keys followed by the new
/// ones; its own items' rows; the same keys appended to the conversation after its last position;
/// and the conversation's next version (when anything was appended).
const SAVE_IN_CONVERSATION: &str = "
    WITH new_items AS MATERIALIZED (
        SELECT nextval('items_key_seq') AS key, n.ord, n.item_id, n.body
        FROM unnest($8::text[], $9::text[]) WITH ORDINALITY AS n(item_id, body, ord)
    ),
    stored_items AS (
        INSERT INTO items (key, item_id, body) SELECT key, item_id, body FROM new_items
    ),
    response AS (
        INSERT INTO responses (id, previous_response_id, model, created_at, status, body, history_from, history,
            conversation_id, owner)
        VALUES ($1, $2, $3, $4, $5, $6, NULL,
            ARRAY(SELECT ci.item_key FROM conversation_items ci
                  WHERE ci.conversation_id = $7 AND NOT ci.removed ORDER BY ci.position)
            || ARRAY(SELECT key FROM new_items ORDER BY ord),
            $7, $11)
        RETURNING id
    ),
    appended AS (
        INSERT INTO conversation_items (conversation_id, position, item_key)
        SELECT $7, (SELECT coalesce(max(position) + 1, 0) FROM conversation_items WHERE conversation_id = $7)
            + n.ord - 1, n.key
        FROM new_items n
    ),
    bumped AS (
        UPDATE conversations SET version = version + 1 WHERE id = $7 AND EXISTS (SELECT 1 FROM new_items)
    )
    INSERT INTO response_items (response_id, position, item_key, role)
    SELECT (SELECT id FROM response), n.ord - 1, n.key, CASE WHEN n.ord <= $10 THEN 1 ELSE 2 END
    FROM new_items n";

/// Lock a conversation's row for a write (every write of a conversation takes it first, so they
/// run one after the other, each seeing the one before); its tombstone flag and version. Only
/// owner `$2`'s.
const LOCK_CONVERSATION: &str = "SELECT deleted, version FROM conversations WHERE id = $1 AND owner = $2 FOR UPDATE";

/// A new conversation (`$1` id, `$2` created_at, `$3` metadata, `$6` owner) with its items (`$4`
/// ids, `$5` bodies), in one statement.
const CREATE_CONVERSATION: &str = "
    WITH new_items AS MATERIALIZED (
        SELECT nextval('items_key_seq') AS key, n.ord, n.item_id, n.body
        FROM unnest($4::text[], $5::text[]) WITH ORDINALITY AS n(item_id, body, ord)
    ),
    stored_items AS (
        INSERT INTO items (key, item_id, body) SELECT key, item_id, body FROM new_items
    ),
    conversation AS (
        INSERT INTO conversations (id, created_at, metadata, owner) VALUES ($1, $2, $3, $6) RETURNING id
    )
    INSERT INTO conversation_items (conversation_id, position, item_key)
    SELECT (SELECT id FROM conversation), n.ord - 1, n.key FROM new_items n";

/// Append items (`$2` ids, `$3` bodies) to the locked conversation `$1` after its last position
/// and bump its version.
const APPEND_CONVERSATION_ITEMS: &str = "
    WITH new_items AS MATERIALIZED (
        SELECT nextval('items_key_seq') AS key, n.ord, n.item_id, n.body
        FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS n(item_id, body, ord)
    ),
    stored_items AS (
        INSERT INTO items (key, item_id, body) SELECT key, item_id, body FROM new_items
    ),
    rows AS (
        INSERT INTO conversation_items (conversation_id, position, item_key)
        SELECT $1, (SELECT coalesce(max(position) + 1, 0) FROM conversation_items WHERE conversation_id = $1)
            + n.ord - 1, n.key
        FROM new_items n
    )
    UPDATE conversations SET version = version + 1 WHERE id = $1";

/// How many items conversation `$1` holds (removed ones not counted).
const COUNT_CONVERSATION_ITEMS: &str =
    "SELECT count(*) FROM conversation_items WHERE conversation_id = $1 AND NOT removed";

const SELECT_CONVERSATION: &str =
    "SELECT created_at, metadata FROM conversations WHERE id = $1 AND owner = $2 AND NOT deleted";

const UPDATE_CONVERSATION: &str = "UPDATE conversations SET metadata = $2 WHERE id = $1 AND owner = $3 AND NOT deleted
    RETURNING created_at, metadata";

const BUMP_VERSION: &str =
    "UPDATE conversations SET version = version + 1 WHERE id = $1 RETURNING created_at, metadata";

/// Every visible item of a conversation with its version, in one statement: no row when the
/// conversation does not exist, one all-NULL item when it is empty.
const CONVERSATION_HISTORY: &str = "
    SELECT ci.item_key, i.body, c.version
    FROM conversations c
    LEFT JOIN conversation_items ci ON ci.conversation_id = c.id AND NOT ci.removed
    LEFT JOIN items i ON i.key = ci.item_key
    WHERE c.id = $1 AND c.owner = $2 AND NOT c.deleted
    ORDER BY ci.position";

/// A page of a conversation's visible items from an exclusive cursor (`$2`, an item id, NULL for
/// none), oldest first; shaped like [`INPUT_ITEMS_ASC`].
const CONVERSATION_ITEMS_ASC: &str = "
    SELECT ci.item_key, i.body
    FROM conversations c
    LEFT JOIN conversation_items ci
        ON ci.conversation_id = c.id AND NOT ci.removed
        AND ($2::text IS NULL OR ci.position > (
            SELECT MIN(x.position) FROM conversation_items x JOIN items xi ON xi.key = x.item_key
            WHERE x.conversation_id = $1 AND NOT x.removed AND xi.item_id = $2))
    LEFT JOIN items i ON i.key = ci.item_key
    WHERE c.id = $1 AND c.owner = $4 AND NOT c.deleted
    ORDER BY ci.position ASC
    LIMIT $3";

/// [`CONVERSATION_ITEMS_ASC`], newest first.
const CONVERSATION_ITEMS_DESC: &str = "
    SELECT ci.item_key, i.body
    FROM conversations c
    LEFT JOIN conversation_items ci
        ON ci.conversation_id = c.id AND NOT ci.removed
        AND ($2::text IS NULL OR ci.position < (
            SELECT MAX(x.position) FROM conversation_items x JOIN items xi ON xi.key = x.item_key
            WHERE x.conversation_id = $1 AND NOT x.removed AND xi.item_id = $2))
    LEFT JOIN items i ON i.key = ci.item_key
    WHERE c.id = $1 AND c.owner = $4 AND NOT c.deleted
    ORDER BY ci.position DESC
    LIMIT $3";

/// The first visible item with id `$2` of owner `$3`'s conversation `$1`: no row when the conversation does
/// not exist, an all-NULL row when it holds no such item.
const CONVERSATION_ITEM: &str = "
    SELECT f.item_key, i.body
    FROM (
        SELECT (SELECT ci.item_key FROM conversation_items ci JOIN items x ON x.key = ci.item_key
                WHERE ci.conversation_id = c.id AND NOT ci.removed AND x.item_id = $2
                ORDER BY ci.position LIMIT 1) AS item_key
        FROM conversations c WHERE c.id = $1 AND c.owner = $3 AND NOT c.deleted
    ) f
    LEFT JOIN items i ON i.key = f.item_key";

/// The position of the first visible item with id `$2` of conversation `$1`.
const FIND_CONVERSATION_ITEM: &str = "
    SELECT ci.position FROM conversation_items ci JOIN items i ON i.key = ci.item_key
    WHERE ci.conversation_id = $1 AND NOT ci.removed AND i.item_id = $2
    ORDER BY ci.position LIMIT 1";

/// Whether a stored response (or tombstone) was created in conversation `$1`.
const CONVERSATION_REFERENCED: &str = "SELECT EXISTS (SELECT 1 FROM responses WHERE conversation_id = $1)";

const FLAG_REMOVED: &str = "UPDATE conversation_items SET removed = true WHERE conversation_id = $1 AND position = $2";

const DELETE_CONVERSATION_ROW: &str =
    "DELETE FROM conversation_items WHERE conversation_id = $1 AND position = $2 RETURNING item_key";

/// Hide a conversation that stored responses were created in; its rows stay for them.
const MAKE_CONVERSATION_TOMBSTONE: &str =
    "UPDATE conversations SET deleted = true, metadata = '{}', version = version + 1 WHERE id = $1";

const DELETE_CONVERSATION_ROWS: &str = "DELETE FROM conversation_items WHERE conversation_id = $1 RETURNING item_key";

const DELETE_REMOVED_ROWS: &str =
    "DELETE FROM conversation_items WHERE conversation_id = $1 AND removed RETURNING item_key";

const DELETE_CONVERSATION: &str = "DELETE FROM conversations WHERE id = $1";

/// Of the items under the keys `$1`, delete those that no response's own items and no
/// conversation (removed rows included) hold any more.
const DELETE_ORPHAN_ITEMS: &str = "
    DELETE FROM items WHERE key = ANY($1)
    AND NOT EXISTS (SELECT 1 FROM response_items r WHERE r.item_key = items.key)
    AND NOT EXISTS (SELECT 1 FROM conversation_items c WHERE c.item_key = items.key)";

const SELECT_RESPONSE: &str = "SELECT body FROM responses WHERE id = $1 AND owner = $2 AND NOT deleted";

/// The key list joined to the items, in list order. LEFT JOINs from `responses`: no row at all
/// means "not stored", one all-NULL row means "stored, empty conversation".
const SELECT_RESPONSE_HISTORY: &str = "
    SELECT h.key, i.body
    FROM responses r
    LEFT JOIN LATERAL unnest(r.history) WITH ORDINALITY AS h(key, ord) ON true
    LEFT JOIN items i ON i.key = h.key
    WHERE r.id = $1 AND r.owner = $2 AND NOT r.deleted
    ORDER BY h.ord";

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
    WHERE r.id = $1 AND r.owner = $4 AND NOT r.deleted
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
    WHERE r.id = $1 AND r.owner = $4 AND NOT r.deleted
    ORDER BY ri.position DESC
    LIMIT $3";

/// Lock owner `$2`'s response's row for a delete (see the module's "Saves racing deletes"); a
/// response continues only its own owner's, so the chain above it is the same owner's.
const LOCK_FOR_DELETE: &str = "SELECT deleted, history_from FROM responses WHERE id = $1 AND owner = $2 FOR UPDATE";

/// Read after the lock, so a save that committed while the delete waited is seen.
const HAS_CONTINUATIONS: &str = "SELECT EXISTS (SELECT 1 FROM responses WHERE history_from = $1)";

/// Hide a continued response; its own items stay for its continuations. The body is dropped.
const MAKE_TOMBSTONE: &str = "UPDATE responses SET deleted = true, body = '' WHERE id = $1";

/// Remove a response that nothing continues, with those of its own items that no conversation
/// holds, in one statement; returns the conversation it was created in (one row, NULL for none).
const REMOVE: &str = "
    WITH own AS (
        DELETE FROM response_items WHERE response_id = $1 RETURNING item_key
    ),
    response AS (
        DELETE FROM responses WHERE id = $1 RETURNING conversation_id
    ),
    gone AS (
        DELETE FROM items WHERE key IN (SELECT item_key FROM own)
        AND NOT EXISTS (SELECT 1 FROM conversation_items c WHERE c.item_key = items.key)
    )
    SELECT conversation_id FROM response";

/// A [`ResponseStore`] on a PostgreSQL database. Clones share the pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// Items decoded by reads, and written by saves, of this process.
    items: Arc<ItemCache>,
    /// `host:port/database`, for messages (never the password).
    target: String,
    /// Where [`respgw_store_api::BackgroundStore::changes`] listens: a pool of its own, of one
    /// connection, so that listening never takes a connection from requests.
    listen_options: Arc<PgConnectOptions>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore").field("target", &self.target).finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// One page of items through `[ascending, descending]`, two statements of the same shape
    /// (`$1` the id, `$2` the exclusive cursor, `$3` how many, `$4` the owner; no row at all when
    /// nothing has that id). None when nothing has that id.
    async fn items_page(
        &self,
        [ascending, descending]: [&'static str; 2],
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError> {
        let after = page.after.as_deref().map(lookup_key);
        let sql = match page.order {
            InputItemsOrder::Asc => ascending,
            InputItemsOrder::Desc => descending,
        };
        // One row more than asked tells whether more follow.
        let fetch = i64::try_from(page.limit.saturating_add(1)).unwrap_or(i64::MAX);
        let rows = sqlx::query(sql)
            .bind(&*lookup_key(id))
            .bind(after.as_deref())
            .bind(fetch)
            .bind(&*lookup_key(owner))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut items = decode_rows(rows, &self.items)?;
        let has_more = items.len() > page.limit;
        items.truncate(page.limit);
        Ok(Some(InputItemsList { items, has_more }))
    }

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
            .connect_lazy_with(options.clone());
        Ok(Self {
            pool,
            items: Arc::new(ItemCache::new(DEFAULT_ITEM_CACHE_BYTES)),
            target,
            listen_options: Arc::new(options),
        })
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
/// response exists; items decoded before come from `cache`.
fn decode_rows(rows: Vec<sqlx::postgres::PgRow>, cache: &ItemCache) -> Result<Vec<Item>, StoreError> {
    let mut items = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(key) = row.try_get::<Option<i64>, _>(0).map_err(map_err)? else { continue };
        if let Some(item) = cache.get(key) {
            items.push(item);
            continue;
        }
        match row.try_get::<Option<&str>, _>(1).map_err(map_err)? {
            Some(body) => items.push(cache.decode(key, body)?),
            None => return Err(StoreError::Corrupt(format!("referenced item {key} is missing"))),
        }
    }
    Ok(items)
}

#[async_trait::async_trait]
impl ResponseStore for PostgresStore {
    async fn save(&self, response: NewResponse) -> Result<(), StoreError> {
        if response.conversation.is_some() {
            // The conversation's row is locked until the save commits (see the module's docs).
            let mut tx = self.pool.begin().await.map_err(map_err)?;
            save_on(&mut tx, response).await?;
            return tx.commit().await.map_err(map_err);
        }
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        save_on(&mut conn, response).await
    }

    async fn response(&self, owner: &str, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let id = &*lookup_key(id);
        let body: Option<String> = sqlx::query_scalar(SELECT_RESPONSE)
            .bind(id)
            .bind(&*lookup_key(owner))
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        let Some(body) = body else { return Ok(None) };
        serde_json::from_str(&body).map(Some).map_err(|e| StoreError::Corrupt(format!("response {id}: {e}")))
    }

    async fn history(&self, owner: &str, id: &str) -> Result<Option<Vec<Item>>, StoreError> {
        let id = &*lookup_key(id);
        let rows = sqlx::query(SELECT_RESPONSE_HISTORY)
            .bind(id)
            .bind(&*lookup_key(owner))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        if rows.is_empty() {
            return Ok(None);
        }
        decode_rows(rows, &self.items).map(Some)
    }

    async fn input_items(
        &self,
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError> {
        self.items_page([INPUT_ITEMS_ASC, INPUT_ITEMS_DESC], owner, id, page).await
    }

    async fn delete(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let (owner, id) = (&*lookup_key(owner), &*lookup_key(id));
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        let row: Option<(bool, Option<String>)> =
            sqlx::query_as(LOCK_FOR_DELETE).bind(id).bind(owner).fetch_optional(&mut *tx).await.map_err(map_err)?;
        let history_from = match row {
            Some((false, history_from)) => history_from,
            // Not stored, or already deleted; dropping `tx` rolls back.
            _ => return Ok(false),
        };
        if has_continuations(&mut tx, id).await? {
            sqlx::query(MAKE_TOMBSTONE).bind(id).execute(&mut *tx).await.map_err(map_err)?;
        } else {
            remove(&mut tx, owner, id).await?;
            // Up the chain: each tombstone whose last continuation just went goes too.
            let mut parent = history_from;
            while let Some(p) = parent.take() {
                let row: Option<(bool, Option<String>)> = sqlx::query_as(LOCK_FOR_DELETE)
                    .bind(&p)
                    .bind(owner)
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(map_err)?;
                if let Some((true, next)) = row
                    && !has_continuations(&mut tx, &p).await?
                {
                    remove(&mut tx, owner, &p).await?;
                    parent = next;
                }
            }
        }
        tx.commit().await.map_err(map_err)?;
        Ok(true)
    }

    async fn create_conversation(&self, conversation: NewConversation) -> Result<(), StoreError> {
        let NewConversation { id, owner, created_at, metadata, items } = conversation;
        let metadata = encode(&metadata, "metadata")?;
        let (item_ids, bodies) = encode_items(&items)?;
        let created = sqlx::query(CREATE_CONVERSATION)
            .bind(&*lookup_key(&id))
            .bind(created_at)
            .bind(&metadata)
            .bind(&item_ids)
            .bind(&bodies)
            .bind(&owner)
            .execute(&self.pool)
            .await;
        match created {
            Ok(_) => Ok(()),
            Err(e) if sqlstate(&e).as_deref() == Some("23505") => Err(StoreError::Duplicate(id)),
            Err(e) => Err(map_err(e)),
        }
    }

    async fn conversation(&self, owner: &str, id: &str) -> Result<Option<ConversationRecord>, StoreError> {
        let id = &*lookup_key(id);
        let row: Option<(i64, String)> = sqlx::query_as(SELECT_CONVERSATION)
            .bind(id)
            .bind(&*lookup_key(owner))
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.map(|(created_at, metadata)| record(id, created_at, &metadata)).transpose()
    }

    async fn update_conversation(
        &self,
        owner: &str,
        id: &str,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<ConversationRecord>, StoreError> {
        let id = &*lookup_key(id);
        let metadata = encode(&metadata, "metadata")?;
        let row: Option<(i64, String)> = sqlx::query_as(UPDATE_CONVERSATION)
            .bind(id)
            .bind(&metadata)
            .bind(&*lookup_key(owner))
            .fetch_optional(&self.pool)
            .await
            .map_err(map_err)?;
        row.map(|(created_at, metadata)| record(id, created_at, &metadata)).transpose()
    }

    async fn delete_conversation(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let id = &*lookup_key(id);
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        match lock_conversation(&mut tx, &lookup_key(owner), id).await? {
            Some((false, _)) => {}
            // Not stored, or already deleted; dropping `tx` rolls back.
            Some((true, _)) | None => return Ok(false),
        }
        if conversation_referenced(&mut tx, id).await? {
            sqlx::query(MAKE_CONVERSATION_TOMBSTONE).bind(id).execute(&mut *tx).await.map_err(map_err)?;
        } else {
            collect_conversation(&mut tx, id).await?;
        }
        tx.commit().await.map_err(map_err)?;
        Ok(true)
    }

    async fn conversation_history(&self, owner: &str, id: &str) -> Result<Option<ConversationHistory>, StoreError> {
        let id = &*lookup_key(id);
        let rows = sqlx::query(CONVERSATION_HISTORY)
            .bind(id)
            .bind(&*lookup_key(owner))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        let Some(first) = rows.first() else { return Ok(None) };
        let version: i64 = first.try_get(2).map_err(map_err)?;
        let items = decode_rows(rows, &self.items)?;
        Ok(Some(ConversationHistory { items, version }))
    }

    async fn conversation_items(
        &self,
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError> {
        self.items_page([CONVERSATION_ITEMS_ASC, CONVERSATION_ITEMS_DESC], owner, id, page).await
    }

    async fn append_conversation_items(
        &self,
        owner: &str,
        id: &str,
        items: Vec<Item>,
        max_items: usize,
    ) -> Result<Option<()>, StoreError> {
        let id = &*lookup_key(id);
        let (item_ids, bodies) = encode_items(&items)?;
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        match lock_conversation(&mut tx, &lookup_key(owner), id).await? {
            Some((false, _)) => {}
            Some((true, _)) | None => return Ok(None),
        }
        // Counted under the conversation's row lock: every write of it waits for this one.
        let held: i64 =
            sqlx::query_scalar(COUNT_CONVERSATION_ITEMS).bind(id).fetch_one(&mut *tx).await.map_err(map_err)?;
        let held = usize::try_from(held).unwrap_or(0);
        if held.saturating_add(items.len()) > max_items {
            return Err(StoreError::ConversationFull { held, adding: items.len(), limit: max_items });
        }
        if items.is_empty() {
            return Ok(Some(()));
        }
        sqlx::query(APPEND_CONVERSATION_ITEMS)
            .bind(id)
            .bind(&item_ids)
            .bind(&bodies)
            .execute(&mut *tx)
            .await
            .map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        Ok(Some(()))
    }

    async fn conversation_item(
        &self,
        owner: &str,
        id: &str,
        item_id: &str,
    ) -> Result<ConversationItemLookup<Item>, StoreError> {
        let (id, item_id) = (lookup_key(id), lookup_key(item_id));
        let rows = sqlx::query(CONVERSATION_ITEM)
            .bind(&*id)
            .bind(&*item_id)
            .bind(&*lookup_key(owner))
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        if rows.is_empty() {
            return Ok(ConversationItemLookup::NoConversation);
        }
        Ok(match decode_rows(rows, &self.items)?.into_iter().next() {
            None => ConversationItemLookup::NoItem,
            Some(item) => ConversationItemLookup::Found(item),
        })
    }

    async fn delete_conversation_item(
        &self,
        owner: &str,
        id: &str,
        item_id: &str,
    ) -> Result<ConversationItemLookup<ConversationRecord>, StoreError> {
        let (id, item_id) = (lookup_key(id), lookup_key(item_id));
        let id = &*id;
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        match lock_conversation(&mut tx, &lookup_key(owner), id).await? {
            Some((false, _)) => {}
            Some((true, _)) | None => return Ok(ConversationItemLookup::NoConversation),
        }
        let position: Option<i32> = sqlx::query_scalar(FIND_CONVERSATION_ITEM)
            .bind(id)
            .bind(&*item_id)
            .fetch_optional(&mut *tx)
            .await
            .map_err(map_err)?;
        let Some(position) = position else { return Ok(ConversationItemLookup::NoItem) };
        if conversation_referenced(&mut tx, id).await? {
            // A stored response's history may hold it: only hidden.
            sqlx::query(FLAG_REMOVED).bind(id).bind(position).execute(&mut *tx).await.map_err(map_err)?;
        } else {
            let keys: Vec<i64> = sqlx::query_scalar(DELETE_CONVERSATION_ROW)
                .bind(id)
                .bind(position)
                .fetch_all(&mut *tx)
                .await
                .map_err(map_err)?;
            delete_orphans(&mut tx, &keys).await?;
        }
        let (created_at, metadata): (i64, String) =
            sqlx::query_as(BUMP_VERSION).bind(id).fetch_one(&mut *tx).await.map_err(map_err)?;
        tx.commit().await.map_err(map_err)?;
        record(id, created_at, &metadata).map(ConversationItemLookup::Found)
    }
}

/// Save `response` with one statement on `executor` (the pool, or a background run's
/// transaction).
pub(crate) async fn save_on(conn: &mut PgConnection, response: NewResponse) -> Result<(), StoreError> {
    let NewResponse {
        id,
        owner,
        previous_response_id,
        model,
        created_at,
        status,
        response,
        history_from,
        input,
        output,
        conversation,
    } = response;
    let body = encode(&response, "response")?;
    let inputs = input.len() as i64;
    let (mut item_ids, mut bodies) = (Vec::with_capacity(input.len() + output.len()), Vec::new());
    for item in input.iter().chain(&output) {
        // The id column is for lookups (`after`); the body keeps the id as given.
        item_ids.push(lookup_key(item.id()).into_owned());
        bodies.push(encode(item, "item")?);
    }
    let saved = match &conversation {
        Some(append) => {
            let conversation_id = lookup_key(&append.id).into_owned();
            match lock_conversation(conn, &owner, &conversation_id).await? {
                Some((false, version)) if version == append.version => {}
                // The caller's transaction rolls back.
                Some((false, _)) => return Err(StoreError::ConversationChanged(append.id.clone())),
                Some((true, _)) | None => return Err(StoreError::ConversationGone(append.id.clone())),
            }
            sqlx::query(SAVE_IN_CONVERSATION)
                .bind(&id)
                .bind(&previous_response_id)
                .bind(&model)
                .bind(created_at)
                .bind(&status)
                .bind(&body)
                .bind(&conversation_id)
                .bind(&item_ids)
                .bind(&bodies)
                .bind(inputs)
                .bind(&owner)
                .execute(&mut *conn)
                .await
        }
        None => {
            sqlx::query(SAVE)
                .bind(&id)
                .bind(&previous_response_id)
                .bind(&model)
                .bind(created_at)
                .bind(&status)
                .bind(&body)
                .bind(&history_from)
                .bind(&item_ids)
                .bind(&bodies)
                .bind(inputs)
                .bind(&owner)
                .execute(&mut *conn)
                .await
        }
    };
    match saved {
        Ok(_) => Ok(()),
        Err(e) if sqlstate(&e).as_deref() == Some("23505") => Err(StoreError::Duplicate(id)),
        Err(e) if sqlstate(&e).as_deref() == Some("23503") => Err(StoreError::MissingHistory(format!(
            "{} was deleted before its continuation {id} was saved",
            history_from.as_deref().unwrap_or("(none)")
        ))),
        Err(e) => Err(map_err(e)),
    }
}

/// A client-given id as a query parameter. PostgreSQL `text` cannot hold NUL, and no stored id
/// contains one, so NUL becomes U+FFFD: the id still names nothing, and the lookup is a plain
/// "not found" instead of a database error. (Stored text is JSON, where NUL is escaped.)
fn lookup_key(id: &str) -> std::borrow::Cow<'_, str> {
    if id.contains('\0') { id.replace('\0', "\u{FFFD}").into() } else { id.into() }
}

/// Whether a stored response (or tombstone) continues `id`.
async fn has_continuations(tx: &mut sqlx::PgConnection, id: &str) -> Result<bool, StoreError> {
    sqlx::query_scalar(HAS_CONTINUATIONS).bind(id).fetch_one(&mut *tx).await.map_err(map_err)
}

/// Lookup ids and encoded bodies of new items.
fn encode_items(items: &[Item]) -> Result<(Vec<String>, Vec<String>), StoreError> {
    let (mut ids, mut bodies) = (Vec::with_capacity(items.len()), Vec::with_capacity(items.len()));
    for item in items {
        ids.push(lookup_key(item.id()).into_owned());
        bodies.push(encode(item, "item")?);
    }
    Ok((ids, bodies))
}

/// A conversation record from its stored columns.
fn record(id: &str, created_at: i64, metadata: &str) -> Result<ConversationRecord, StoreError> {
    let metadata = serde_json::from_str(metadata)
        .map_err(|e| StoreError::Corrupt(format!("metadata of conversation {id}: {e}")))?;
    Ok(ConversationRecord { id: id.to_owned(), created_at, metadata })
}

/// Lock `owner`'s conversation's row; its tombstone flag and version, or None when `owner` has
/// no such conversation.
async fn lock_conversation(
    tx: &mut sqlx::PgConnection,
    owner: &str,
    id: &str,
) -> Result<Option<(bool, i64)>, StoreError> {
    sqlx::query_as(LOCK_CONVERSATION).bind(id).bind(owner).fetch_optional(&mut *tx).await.map_err(map_err)
}

/// Whether a stored response (or tombstone) was created in the conversation.
async fn conversation_referenced(tx: &mut sqlx::PgConnection, id: &str) -> Result<bool, StoreError> {
    sqlx::query_scalar(CONVERSATION_REFERENCED).bind(id).fetch_one(&mut *tx).await.map_err(map_err)
}

/// Delete the items under `keys` that nothing holds any more.
async fn delete_orphans(tx: &mut sqlx::PgConnection, keys: &[i64]) -> Result<(), StoreError> {
    if !keys.is_empty() {
        sqlx::query(DELETE_ORPHAN_ITEMS).bind(keys).execute(&mut *tx).await.map_err(map_err)?;
    }
    Ok(())
}

/// Remove a conversation (its row locked) with its rows and the items no response holds.
async fn collect_conversation(tx: &mut sqlx::PgConnection, id: &str) -> Result<(), StoreError> {
    let keys: Vec<i64> =
        sqlx::query_scalar(DELETE_CONVERSATION_ROWS).bind(id).fetch_all(&mut *tx).await.map_err(map_err)?;
    sqlx::query(DELETE_CONVERSATION).bind(id).execute(&mut *tx).await.map_err(map_err)?;
    delete_orphans(tx, &keys).await
}

/// Remove `owner`'s response that nothing continues, with its own items that nothing else holds,
/// then release the conversation it was created in (the same owner's), if any.
async fn remove(tx: &mut sqlx::PgConnection, owner: &str, id: &str) -> Result<(), StoreError> {
    let conversation: Option<Option<String>> =
        sqlx::query_scalar(REMOVE).bind(id).fetch_optional(&mut *tx).await.map_err(map_err)?;
    if let Some(conversation) = conversation.flatten() {
        release_conversation(tx, owner, &conversation).await?;
    }
    Ok(())
}

/// After a response created in conversation `id` was removed: if no stored response names the
/// conversation any more, what was kept only for such responses goes — the whole conversation if
/// it is a tombstone, else its removed rows (and their items, unless held elsewhere). Locks the
/// conversation's row first, so a save into it either committed before (and is seen here) or
/// waits for this transaction.
async fn release_conversation(tx: &mut sqlx::PgConnection, owner: &str, id: &str) -> Result<(), StoreError> {
    let Some((deleted, _)) = lock_conversation(tx, owner, id).await? else { return Ok(()) };
    if conversation_referenced(tx, id).await? {
        return Ok(());
    }
    if deleted {
        collect_conversation(tx, id).await
    } else {
        let keys: Vec<i64> =
            sqlx::query_scalar(DELETE_REMOVED_ROWS).bind(id).fetch_all(&mut *tx).await.map_err(map_err)?;
        delete_orphans(tx, &keys).await
    }
}
