//! Saving a response on PostgreSQL, one statement of data-modifying CTEs (after locking its
//! conversation's row, for a response created in one), and the statements that read a response
//! back.

use sqlx::postgres::PgConnection;

use super::conversations::{item_columns, lock_conversation};
use super::{lookup_key, map_err, sqlstate};
use crate::encoding::EncodedResponse;
use crate::retention::check_save_into;
use crate::{NewResponse, StoreError};

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
            owner, rounds, input_text)
        VALUES ($1, $2, $3, $4, $5, $6,
            CASE WHEN $7::text IS NULL THEN NULL
                ELSE coalesce((SELECT p.id FROM responses p WHERE p.id = $7 AND p.owner = $11), '') END,
            coalesce((SELECT p.history FROM responses p WHERE p.id = $7 AND p.owner = $11), '{}')
            || ARRAY(SELECT key FROM new_items ORDER BY ord),
            $11, $12, $13)
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
            conversation_id, owner, rounds, input_text)
        VALUES ($1, $2, $3, $4, $5, $6, NULL,
            ARRAY(SELECT ci.item_key FROM conversation_items ci
                  WHERE ci.conversation_id = $7 AND NOT ci.removed ORDER BY ci.position)
            || ARRAY(SELECT key FROM new_items ORDER BY ord),
            $7, $11, $12, $13)
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

pub(super) const SELECT_RESPONSE: &str = "SELECT body FROM responses WHERE id = $1 AND owner = $2 AND NOT deleted";

/// The key list joined to the items, in list order. LEFT JOINs from `responses`: no row at all
/// means "not stored", one all-NULL row means "stored, empty conversation".
pub(super) const SELECT_RESPONSE_HISTORY: &str = "
    SELECT h.key, i.body
    FROM responses r
    LEFT JOIN LATERAL unnest(r.history) WITH ORDINALITY AS h(key, ord) ON true
    LEFT JOIN items i ON i.key = h.key
    WHERE r.id = $1 AND r.owner = $2 AND NOT r.deleted
    ORDER BY h.ord";

/// Save `response` with one statement on `conn` (a pooled connection, or a transaction: a save
/// into a conversation locks the conversation's row first, until the caller commits).
pub(crate) async fn save_on(conn: &mut PgConnection, response: NewResponse) -> Result<(), StoreError> {
    let response = EncodedResponse::new(response)?;
    let (item_ids, bodies) = item_columns(&response.items);
    // `$7`: the conversation the response is created in, or else the response it continues.
    let (statement, source) = match &response.conversation {
        Some(append) => {
            let conversation_id = lookup_key(&append.id).into_owned();
            // On an error, the caller's transaction rolls back.
            check_save_into(lock_conversation(conn, &response.owner, &conversation_id).await?, append)?;
            (SAVE_IN_CONVERSATION, Some(conversation_id))
        }
        None => (SAVE, response.history_from.clone()),
    };
    let saved = sqlx::query(statement)
        .bind(&response.id)
        .bind(&response.previous_response_id)
        .bind(&response.model)
        .bind(response.created_at)
        .bind(&response.status)
        .bind(&response.body)
        .bind(&source)
        .bind(&item_ids)
        .bind(&bodies)
        .bind(response.inputs)
        .bind(&response.owner)
        .bind(&response.rounds)
        .bind(&response.input_text)
        .execute(&mut *conn)
        .await;
    let id = response.id;
    match saved {
        Ok(_) => Ok(()),
        Err(e) if sqlstate(&e).as_deref() == Some("23505") => Err(StoreError::Duplicate(id)),
        Err(e) if sqlstate(&e).as_deref() == Some("23503") => Err(StoreError::MissingHistory(format!(
            "{} was deleted before its continuation {id} was saved",
            response.history_from.as_deref().unwrap_or("(none)")
        ))),
        Err(e) => Err(map_err(e)),
    }
}
