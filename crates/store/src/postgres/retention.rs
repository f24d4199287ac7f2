//! The statements of the deletion rules (`crate::retention`) on PostgreSQL, inside a short
//! transaction whose reads for a write lock the rows they find (`FOR UPDATE`), so that a save
//! racing a delete either waits for it or is seen by it (see the backend's "Saves racing
//! deletes" and "Conversations").

use sqlx::postgres::PgConnection;

use super::conversations::lock_conversation;
use super::map_err;
use crate::encoding::conversation_record;
use crate::retention::{ConversationState, RetentionTx, StoredResponse};
use crate::{ConversationRecord, StoreError};

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

const BUMP_VERSION: &str =
    "UPDATE conversations SET version = version + 1 WHERE id = $1 RETURNING created_at, metadata";

impl RetentionTx for PgConnection {
    type Position = i32;

    async fn response_for_delete(&mut self, owner: &str, id: &str) -> Result<Option<StoredResponse>, StoreError> {
        let row: Option<(bool, Option<String>)> =
            sqlx::query_as(LOCK_FOR_DELETE).bind(id).bind(owner).fetch_optional(&mut *self).await.map_err(map_err)?;
        Ok(row.map(|(deleted, history_from)| StoredResponse { deleted, history_from }))
    }

    async fn has_continuations(&mut self, id: &str) -> Result<bool, StoreError> {
        sqlx::query_scalar(HAS_CONTINUATIONS).bind(id).fetch_one(&mut *self).await.map_err(map_err)
    }

    async fn make_tombstone(&mut self, id: &str) -> Result<(), StoreError> {
        sqlx::query(MAKE_TOMBSTONE).bind(id).execute(&mut *self).await.map(drop).map_err(map_err)
    }

    async fn remove_response(&mut self, id: &str) -> Result<Option<String>, StoreError> {
        let conversation: Option<Option<String>> =
            sqlx::query_scalar(REMOVE).bind(id).fetch_optional(&mut *self).await.map_err(map_err)?;
        Ok(conversation.flatten())
    }

    async fn conversation_for_write(&mut self, owner: &str, id: &str) -> Result<Option<ConversationState>, StoreError> {
        lock_conversation(self, owner, id).await
    }

    async fn conversation_referenced(&mut self, id: &str) -> Result<bool, StoreError> {
        sqlx::query_scalar(CONVERSATION_REFERENCED).bind(id).fetch_one(&mut *self).await.map_err(map_err)
    }

    async fn make_conversation_tombstone(&mut self, id: &str) -> Result<(), StoreError> {
        sqlx::query(MAKE_CONVERSATION_TOMBSTONE).bind(id).execute(&mut *self).await.map(drop).map_err(map_err)
    }

    async fn delete_conversation_row(&mut self, id: &str) -> Result<(), StoreError> {
        sqlx::query(DELETE_CONVERSATION).bind(id).execute(&mut *self).await.map(drop).map_err(map_err)
    }

    async fn delete_item_rows(&mut self, id: &str) -> Result<Vec<i64>, StoreError> {
        sqlx::query_scalar(DELETE_CONVERSATION_ROWS).bind(id).fetch_all(&mut *self).await.map_err(map_err)
    }

    async fn delete_removed_item_rows(&mut self, id: &str) -> Result<Vec<i64>, StoreError> {
        sqlx::query_scalar(DELETE_REMOVED_ROWS).bind(id).fetch_all(&mut *self).await.map_err(map_err)
    }

    async fn find_item(&mut self, id: &str, item_id: &str) -> Result<Option<i32>, StoreError> {
        sqlx::query_scalar(FIND_CONVERSATION_ITEM)
            .bind(id)
            .bind(item_id)
            .fetch_optional(&mut *self)
            .await
            .map_err(map_err)
    }

    async fn flag_removed(&mut self, id: &str, position: i32) -> Result<(), StoreError> {
        sqlx::query(FLAG_REMOVED).bind(id).bind(position).execute(&mut *self).await.map(drop).map_err(map_err)
    }

    async fn delete_item_row(&mut self, id: &str, position: i32) -> Result<Vec<i64>, StoreError> {
        sqlx::query_scalar(DELETE_CONVERSATION_ROW).bind(id).bind(position).fetch_all(&mut *self).await.map_err(map_err)
    }

    async fn bump_version(&mut self, id: &str) -> Result<ConversationRecord, StoreError> {
        let (created_at, metadata): (i64, String) =
            sqlx::query_as(BUMP_VERSION).bind(id).fetch_one(&mut *self).await.map_err(map_err)?;
        conversation_record(id, created_at, &metadata)
    }

    async fn delete_orphans(&mut self, keys: &[i64]) -> Result<(), StoreError> {
        if !keys.is_empty() {
            sqlx::query(DELETE_ORPHAN_ITEMS).bind(keys).execute(&mut *self).await.map_err(map_err)?;
        }
        Ok(())
    }
}
