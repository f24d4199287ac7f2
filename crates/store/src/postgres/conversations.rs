//! Conversations on PostgreSQL: the statements that create, read, page and append to them, and
//! the row lock every write of a conversation takes first.

use sqlx::postgres::PgConnection;

use super::{lookup_key, map_err};
use crate::StoreError;
use crate::encoding::EncodedItem;
use crate::retention::ConversationState;

/// Lock a conversation's row for a write (every write of a conversation takes it first, so they
/// run one after the other, each seeing the one before); its tombstone flag and version. Only
/// owner `$2`'s.
const LOCK_CONVERSATION: &str = "SELECT deleted, version FROM conversations WHERE id = $1 AND owner = $2 FOR UPDATE";

/// A new conversation (`$1` id, `$2` created_at, `$3` metadata, `$6` owner) with its items (`$4`
/// ids, `$5` bodies), in one statement.
pub(super) const CREATE_CONVERSATION: &str = "
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
pub(super) const APPEND_CONVERSATION_ITEMS: &str = "
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
pub(super) const COUNT_CONVERSATION_ITEMS: &str =
    "SELECT count(*) FROM conversation_items WHERE conversation_id = $1 AND NOT removed";

pub(super) const SELECT_CONVERSATION: &str =
    "SELECT created_at, metadata FROM conversations WHERE id = $1 AND owner = $2 AND NOT deleted";

pub(super) const UPDATE_CONVERSATION: &str =
    "UPDATE conversations SET metadata = $2 WHERE id = $1 AND owner = $3 AND NOT deleted
    RETURNING created_at, metadata";

/// New items as the two arrays the statements take: their ids as lookup keys (the column is for
/// lookups, `after`; the body keeps the id as given) and their bodies.
pub(super) fn item_columns(items: &[EncodedItem]) -> (Vec<String>, Vec<&str>) {
    items.iter().map(|item| (lookup_key(&item.id).into_owned(), item.body.as_str())).unzip()
}

/// Lock `owner`'s conversation's row; its tombstone flag and version, or None when `owner` has
/// no such conversation.
pub(super) async fn lock_conversation(
    tx: &mut PgConnection,
    owner: &str,
    id: &str,
) -> Result<Option<ConversationState>, StoreError> {
    let row: Option<(bool, i64)> =
        sqlx::query_as(LOCK_CONVERSATION).bind(id).bind(owner).fetch_optional(&mut *tx).await.map_err(map_err)?;
    Ok(row.map(|(deleted, version)| ConversationState { deleted, version }))
}
