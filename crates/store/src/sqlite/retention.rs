//! The statements of the deletion rules (`crate::retention`) on SQLite, run by the writer thread
//! inside its write transaction (which holds the file's write lock: nothing changes between a
//! read and the write that depends on it).

use rusqlite::{Connection, OptionalExtension};

use super::conversations::{bump_version, conversation_state};
use super::{map_err, query_keys};
use crate::encoding::encode;
use crate::retention::{ConversationState, RetentionTx, StoredResponse};
use crate::{ConversationRecord, StoreError};

/// Whether a response of owner `?2` is stored, a tombstone, and what it continues (a response
/// continues only its own owner's).
const SELECT_FOR_DELETE: &str = "SELECT deleted, history_from FROM responses WHERE id = ?1 AND owner = ?2";

const HAS_CONTINUATIONS: &str = "SELECT EXISTS (SELECT 1 FROM responses WHERE history_from = ?1)";

/// Hide a continued response; its own items stay for its continuations. The body is dropped.
const MAKE_TOMBSTONE: &str = "UPDATE responses SET deleted = 1, body = '' WHERE id = ?1";

/// Its own items' rows, returning their keys (the items go after the response row).
const DELETE_OWN_ITEMS: &str = "DELETE FROM response_items WHERE response_id = ?1 RETURNING item_key";

/// Remove a response row, returning the conversation it was created in (NULL for none).
const DELETE_RESPONSE: &str = "DELETE FROM responses WHERE id = ?1 RETURNING conversation_id";

/// Of the items under the keys in the JSON array `?1`, delete those that no response's own items
/// and no conversation (removed rows included) hold any more.
const DELETE_ORPHAN_ITEMS: &str = "
    DELETE FROM items WHERE key IN (SELECT value FROM json_each(?1))
    AND NOT EXISTS (SELECT 1 FROM response_items r WHERE r.item_key = items.key)
    AND NOT EXISTS (SELECT 1 FROM conversation_items c WHERE c.item_key = items.key)";

/// The position of the first visible item with id `?2` of conversation `?1`.
const FIND_CONVERSATION_ITEM: &str = "
    SELECT ci.position FROM conversation_items ci JOIN items i ON i.key = ci.item_key
    WHERE ci.conversation_id = ?1 AND ci.removed = 0 AND i.item_id = ?2
    ORDER BY ci.position LIMIT 1";

/// Whether a stored response (or tombstone) was created in conversation `?1`.
const CONVERSATION_REFERENCED: &str = "SELECT EXISTS (SELECT 1 FROM responses WHERE conversation_id = ?1)";

const FLAG_REMOVED: &str = "UPDATE conversation_items SET removed = 1 WHERE conversation_id = ?1 AND position = ?2";

const DELETE_CONVERSATION_ROW: &str =
    "DELETE FROM conversation_items WHERE conversation_id = ?1 AND position = ?2 RETURNING item_key";

/// Hide a conversation that stored responses were created in; its rows stay for them.
const MAKE_CONVERSATION_TOMBSTONE: &str =
    "UPDATE conversations SET deleted = 1, metadata = '{}', version = version + 1 WHERE id = ?1";

const DELETE_CONVERSATION_ROWS: &str = "DELETE FROM conversation_items WHERE conversation_id = ?1 RETURNING item_key";

const DELETE_REMOVED_ROWS: &str =
    "DELETE FROM conversation_items WHERE conversation_id = ?1 AND removed = 1 RETURNING item_key";

const DELETE_CONVERSATION: &str = "DELETE FROM conversations WHERE id = ?1";

/// A connection inside the writer's transaction, as the deletion rules use it. Its futures never
/// wait (SQLite is synchronous): see [`super::run_now`].
pub(super) struct Tx<'a>(pub(super) &'a Connection);

impl Tx<'_> {
    /// Run a statement that changes rows, for its effect.
    fn execute(&self, sql: &str, params: impl rusqlite::Params) -> Result<(), StoreError> {
        self.0.prepare_cached(sql).and_then(|mut s| s.execute(params)).map(drop).map_err(map_err)
    }

    /// The one boolean a query returns.
    fn exists(&self, sql: &str, id: &str) -> Result<bool, StoreError> {
        self.0.prepare_cached(sql).and_then(|mut s| s.query_row([id], |row| row.get(0))).map_err(map_err)
    }
}

impl RetentionTx for Tx<'_> {
    type Position = i64;

    async fn response_for_delete(&mut self, owner: &str, id: &str) -> Result<Option<StoredResponse>, StoreError> {
        self.0
            .prepare_cached(SELECT_FOR_DELETE)
            .and_then(|mut s| {
                s.query_row([id, owner], |row| Ok(StoredResponse { deleted: row.get(0)?, history_from: row.get(1)? }))
                    .optional()
            })
            .map_err(map_err)
    }

    async fn has_continuations(&mut self, id: &str) -> Result<bool, StoreError> {
        self.exists(HAS_CONTINUATIONS, id)
    }

    async fn make_tombstone(&mut self, id: &str) -> Result<(), StoreError> {
        self.execute(MAKE_TOMBSTONE, [id])
    }

    async fn remove_response(&mut self, id: &str) -> Result<Option<String>, StoreError> {
        // Its own items' rows first, then the row; the items go after both.
        let keys = query_keys(self.0, DELETE_OWN_ITEMS, [id])?;
        let conversation = self
            .0
            .prepare_cached(DELETE_RESPONSE)
            .and_then(|mut s| s.query_row([id], |row| row.get(0)))
            .map_err(map_err)?;
        self.delete_orphans(&keys).await?;
        Ok(conversation)
    }

    async fn conversation_for_write(&mut self, owner: &str, id: &str) -> Result<Option<ConversationState>, StoreError> {
        conversation_state(self.0, owner, id)
    }

    async fn conversation_referenced(&mut self, id: &str) -> Result<bool, StoreError> {
        self.exists(CONVERSATION_REFERENCED, id)
    }

    async fn make_conversation_tombstone(&mut self, id: &str) -> Result<(), StoreError> {
        self.execute(MAKE_CONVERSATION_TOMBSTONE, [id])
    }

    async fn delete_conversation_row(&mut self, id: &str) -> Result<(), StoreError> {
        self.execute(DELETE_CONVERSATION, [id])
    }

    async fn delete_item_rows(&mut self, id: &str) -> Result<Vec<i64>, StoreError> {
        query_keys(self.0, DELETE_CONVERSATION_ROWS, [id])
    }

    async fn delete_removed_item_rows(&mut self, id: &str) -> Result<Vec<i64>, StoreError> {
        query_keys(self.0, DELETE_REMOVED_ROWS, [id])
    }

    async fn find_item(&mut self, id: &str, item_id: &str) -> Result<Option<i64>, StoreError> {
        self.0
            .prepare_cached(FIND_CONVERSATION_ITEM)
            .and_then(|mut s| s.query_row([id, item_id], |row| row.get(0)).optional())
            .map_err(map_err)
    }

    async fn flag_removed(&mut self, id: &str, position: i64) -> Result<(), StoreError> {
        self.execute(FLAG_REMOVED, rusqlite::params![id, position])
    }

    async fn delete_item_row(&mut self, id: &str, position: i64) -> Result<Vec<i64>, StoreError> {
        query_keys(self.0, DELETE_CONVERSATION_ROW, rusqlite::params![id, position])
    }

    async fn bump_version(&mut self, id: &str) -> Result<ConversationRecord, StoreError> {
        bump_version(self.0, id)
    }

    async fn delete_orphans(&mut self, keys: &[i64]) -> Result<(), StoreError> {
        if !keys.is_empty() {
            self.execute(DELETE_ORPHAN_ITEMS, [encode(keys, "keys")?])?;
        }
        Ok(())
    }
}
