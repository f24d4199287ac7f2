//! Conversations on SQLite: the statements that create, read, page and append to them, and the
//! helpers the writes share (their state, appending rows, moving the version on).

use rusqlite::{Connection, OptionalExtension, params};

use super::map_err;
use crate::encoding::conversation_record;
use crate::retention::ConversationState;
use crate::{ConversationRecord, StoreError};

pub(super) const INSERT_CONVERSATION: &str =
    "INSERT INTO conversations (id, created_at, metadata, owner) VALUES (?1, ?2, ?3, ?4)";

/// An owner's conversation's state for a write: tombstone or not, and its version.
const SELECT_CONVERSATION_STATE: &str = "SELECT deleted, version FROM conversations WHERE id = ?1 AND owner = ?2";

pub(super) const SELECT_CONVERSATION: &str =
    "SELECT created_at, metadata FROM conversations WHERE id = ?1 AND owner = ?2 AND deleted = 0";

pub(super) const UPDATE_CONVERSATION: &str =
    "UPDATE conversations SET metadata = ?2 WHERE id = ?1 AND owner = ?3 AND deleted = 0
    RETURNING created_at, metadata";

/// The visible item keys of a conversation, in order.
pub(super) const CONVERSATION_KEYS: &str =
    "SELECT item_key FROM conversation_items WHERE conversation_id = ?1 AND removed = 0 ORDER BY position";

/// How many items conversation `?1` holds (removed ones not counted).
pub(super) const COUNT_CONVERSATION_ITEMS: &str =
    "SELECT count(*) FROM conversation_items WHERE conversation_id = ?1 AND removed = 0";

/// The position after every row of a conversation (removed ones included).
const NEXT_POSITION: &str = "SELECT coalesce(max(position) + 1, 0) FROM conversation_items WHERE conversation_id = ?1";

/// Rows for `?3` new items whose keys start at `?2`, at positions from `?4` (the keys are
/// contiguous, see [`super::responses::insert_items`]).
pub(super) const APPEND_CONVERSATION_ITEMS: &str = "
    WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?3)
    INSERT INTO conversation_items (conversation_id, position, item_key)
    SELECT ?1, ?4 + i, ?2 + i FROM n";

const BUMP_VERSION: &str =
    "UPDATE conversations SET version = version + 1 WHERE id = ?1 RETURNING created_at, metadata";

/// Tombstone or not, and the version, of a conversation `owner` stored.
pub(super) fn conversation_state(
    tx: &Connection,
    owner: &str,
    id: &str,
) -> Result<Option<ConversationState>, StoreError> {
    tx.prepare_cached(SELECT_CONVERSATION_STATE)
        .and_then(|mut s| {
            s.query_row([id, owner], |row| Ok(ConversationState { deleted: row.get(0)?, version: row.get(1)? }))
                .optional()
        })
        .map_err(map_err)
}

/// Append `count` new items, whose keys start at `first`, to the conversation and bump its
/// version; the conversation's record.
pub(super) fn append_rows(
    tx: &Connection,
    id: &str,
    first: i64,
    count: usize,
) -> Result<ConversationRecord, StoreError> {
    let next: i64 =
        tx.prepare_cached(NEXT_POSITION).and_then(|mut s| s.query_row([id], |row| row.get(0))).map_err(map_err)?;
    tx.prepare_cached(APPEND_CONVERSATION_ITEMS)
        .and_then(|mut s| s.execute(params![id, first, count as i64, next]))
        .map_err(map_err)?;
    bump_version(tx, id)
}

/// Move the conversation to its next version; its record.
pub(super) fn bump_version(tx: &Connection, id: &str) -> Result<ConversationRecord, StoreError> {
    let (created_at, metadata): (i64, String) = tx
        .prepare_cached(BUMP_VERSION)
        .and_then(|mut s| s.query_row([id], |row| Ok((row.get(0)?, row.get(1)?))))
        .map_err(map_err)?;
    conversation_record(id, created_at, &metadata)
}
