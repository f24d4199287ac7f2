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
//! - Retrieval (version 7, see the `retrieval` module): the SQLite backend's tables, with the
//!   chunks' text indexed by a generated `tsvector` column (`lexemes`, `english`) under a GIN
//!   index instead of FTS5.
//!
//! The tables live in the first schema of the connection's `search_path` (by default `public`);
//! `?options=-c%20search_path%3Drespgw` in the URL puts them elsewhere.
//!
//! # Start-up and migrations
//!
//! Every process (the supervisor first, then each worker, on every host) runs the migrations
//! (`schema.rs`) when it opens the store: in one transaction it takes a transaction-scoped
//! advisory lock, reads the applied versions and applies the missing ones. Processes starting together therefore take
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
mod console;
mod conversations;
mod responses;
mod retention;
mod retrieval;
mod schema;

use self::conversations::{
    APPEND_CONVERSATION_ITEMS, COUNT_CONVERSATION_ITEMS, CREATE_CONVERSATION, SELECT_CONVERSATION, UPDATE_CONVERSATION,
    item_columns, lock_conversation,
};
pub(crate) use self::responses::save_on;
use self::responses::{SELECT_RESPONSE, SELECT_RESPONSE_HISTORY};
use self::schema::migrate;
#[cfg(test)]
pub(crate) use self::schema::{MIGRATIONS, MIGRATIONS_TABLE};
use crate::encoding::{conversation_record, encode, encode_items};
use crate::item_cache::{DEFAULT_ITEM_CACHE_BYTES, ItemCache};
use crate::queries::{
    CONVERSATION_HISTORY, CONVERSATION_ITEM, CONVERSATION_ITEMS_ASC, CONVERSATION_ITEMS_DESC, INPUT_ITEMS_ASC,
    INPUT_ITEMS_DESC,
};
use crate::retention::{check_room, delete_conversation, delete_conversation_item, delete_response, is_live};
use crate::{
    ConversationHistory, ConversationItemLookup, ConversationRecord, InputItemsList, InputItemsOrder, InputItemsPage,
    NewConversation, NewResponse, ResponseStore, StoreError,
};

/// The schema version this code reads and writes (the highest row of `respgw_schema_migrations`).
pub const SCHEMA_VERSION: i32 = 8;

/// How long opening the store waits for the server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request waits for a pooled connection (including opening a new one) before it fails
/// with [`StoreError::Unavailable`].
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection idle for longer than this is pinged before use (the server may have restarted
/// meanwhile). Fresher ones are not: every connection is already checked when it is released.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(30);
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
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        // Dropping `tx` on an error, or when nothing changed, rolls back.
        if !delete_response(&mut *tx, &lookup_key(owner), &lookup_key(id)).await? {
            return Ok(false);
        }
        tx.commit().await.map_err(map_err)?;
        Ok(true)
    }

    async fn create_conversation(&self, conversation: NewConversation) -> Result<(), StoreError> {
        let NewConversation { id, owner, created_at, metadata, items } = conversation;
        let metadata = encode(&metadata, "metadata")?;
        let items = encode_items(&items)?;
        let (item_ids, bodies) = item_columns(&items);
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
        row.map(|(created_at, metadata)| conversation_record(id, created_at, &metadata)).transpose()
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
        row.map(|(created_at, metadata)| conversation_record(id, created_at, &metadata)).transpose()
    }

    async fn delete_conversation(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        // Dropping `tx` on an error, or when nothing changed, rolls back.
        if !delete_conversation(&mut *tx, &lookup_key(owner), &lookup_key(id)).await? {
            return Ok(false);
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
        let items = encode_items(&items)?;
        let (item_ids, bodies) = item_columns(&items);
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        if !is_live(lock_conversation(&mut tx, &lookup_key(owner), id).await?) {
            return Ok(None);
        }
        // Counted under the conversation's row lock: every write of it waits for this one.
        let held: i64 =
            sqlx::query_scalar(COUNT_CONVERSATION_ITEMS).bind(id).fetch_one(&mut *tx).await.map_err(map_err)?;
        check_room(held, items.len(), max_items)?;
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
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        let deleted =
            delete_conversation_item(&mut *tx, &lookup_key(owner), &lookup_key(id), &lookup_key(item_id)).await?;
        if let ConversationItemLookup::Found(_) = deleted {
            tx.commit().await.map_err(map_err)?;
        }
        Ok(deleted)
    }
}

/// A client-given id as a query parameter. PostgreSQL `text` cannot hold NUL, and no stored id
/// contains one, so NUL becomes U+FFFD: the id still names nothing, and the lookup is a plain
/// "not found" instead of a database error. (Stored text is JSON, where NUL is escaped.)
fn lookup_key(id: &str) -> std::borrow::Cow<'_, str> {
    if id.contains('\0') { id.replace('\0', "\u{FFFD}").into() } else { id.into() }
}
