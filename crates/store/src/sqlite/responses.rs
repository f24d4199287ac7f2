//! Saving a response on SQLite: its row, its new items (their keys contiguous, drawn in one go)
//! and the rows of its own items, in the writer's transaction; and the statements that read a
//! response back.

use std::sync::LazyLock;

use rusqlite::{Connection, params};

use super::conversations::{CONVERSATION_KEYS, append_rows, conversation_state};
use super::{is_unique_violation, map_err, query_keys};
use crate::StoreError;
use crate::encoding::{EncodedItem, EncodedResponse, encode};
use crate::retention::check_save_into;

/// `response_items.role` of a response's input items.
pub(super) const ROLE_INPUT: i64 = 1;
/// `response_items.role` of a response's output items.
pub(super) const ROLE_OUTPUT: i64 = 2;

const INSERT_RESPONSE: &str = "
    INSERT INTO responses (id, previous_response_id, model, created_at, status, body, history_from, history,
        conversation_id, owner, rounds, input_text)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// The key list of the response a save continues; tombstones included (a continuation that read
/// the conversation before the delete still saves whole). Only the saving owner's.
const SELECT_HISTORY: &str = "SELECT history FROM responses WHERE id = ?1 AND owner = ?2";

/// Rows for the `?4` new items whose keys start at `?2`: the first `?3` are input (role `?5`), the
/// rest output (role `?6`). A counting CTE instead of one bound row per item: the keys are
/// contiguous (see [`insert_items`]).
const INSERT_OWN_ITEMS: &str = "
    WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?4)
    INSERT INTO response_items (response_id, position, item_key, role)
    SELECT ?1, i, ?2 + i, CASE WHEN i < ?3 THEN ?5 ELSE ?6 END FROM n";

/// New items per multi-row `INSERT` (two parameters each). Longer lists take several statements.
const ITEMS_PER_INSERT: usize = 16;

/// `INSERT INTO items … VALUES (?, ?), …` for 1..=[`ITEMS_PER_INSERT`] rows, built once.
static INSERT_ITEMS: LazyLock<Vec<String>> = LazyLock::new(|| {
    (1..=ITEMS_PER_INSERT)
        .map(|rows| format!("INSERT INTO items (item_id, body) VALUES {}", vec!["(?, ?)"; rows].join(", ")))
        .collect()
});

pub(super) const SELECT_RESPONSE: &str = "SELECT body FROM responses WHERE id = ?1 AND owner = ?2 AND deleted = 0";

/// The key list joined to the items, in list order (json_each's `key` is the array index). LEFT
/// JOINs from `responses`: no row at all means "not stored", one all-NULL row means "stored, empty
/// conversation"; one statement, so one consistent snapshot.
pub(super) const SELECT_RESPONSE_HISTORY: &str = "
    SELECT h.value, i.body
    FROM responses r
    LEFT JOIN json_each(r.history) AS h
    LEFT JOIN items i ON i.key = h.value
    WHERE r.id = ?1 AND r.owner = ?2 AND r.deleted = 0
    ORDER BY h.key";

/// Insert the new items (`(item_id, body)`, in order) with as few statements as possible; returns
/// the key of the first one, the others following it one by one.
///
/// Why the keys are contiguous: the caller holds the write transaction (`BEGIN IMMEDIATE`), so no
/// other connection, in this process or another, inserts items meanwhile. An `AUTOINCREMENT` key
/// is one more than the largest of the table's current maximum and the largest key it ever handed
/// out (`sqlite_sequence`), and a multi-row `INSERT … VALUES` inserts its rows in order, each
/// getting the next key; the next statement continues from the last. So the n items get
/// `first..first + n`, even when deleted items left gaps below or above the current maximum. The
/// chunk boundaries are checked anyway (cheaply), and the test `new_item_keys_are_contiguous`
/// checks the whole mapping.
pub(super) fn insert_items(tx: &Connection, items: &[EncodedItem]) -> Result<i64, StoreError> {
    let mut first = None;
    let mut next = 0;
    for chunk in items.chunks(ITEMS_PER_INSERT) {
        let mut stmt = tx.prepare_cached(&INSERT_ITEMS[chunk.len() - 1]).map_err(map_err)?;
        for (n, item) in chunk.iter().enumerate() {
            stmt.raw_bind_parameter(2 * n + 1, &item.id).map_err(map_err)?;
            stmt.raw_bind_parameter(2 * n + 2, &item.body).map_err(map_err)?;
        }
        stmt.raw_execute().map_err(map_err)?;
        let last = tx.last_insert_rowid();
        let chunk_first = last - (chunk.len() as i64 - 1);
        match first {
            None => first = Some(chunk_first),
            Some(_) if chunk_first != next => {
                return Err(StoreError::Unavailable(format!(
                    "item keys are not contiguous (expected {next}, got {chunk_first}); nothing was saved"
                )));
            }
            Some(_) => {}
        }
        next = last + 1;
    }
    first.ok_or_else(|| StoreError::Unavailable("no items to insert".into()))
}

/// Write the response row, its new items and their rows inside `tx`.
pub(super) fn insert_response(tx: &Connection, response: &EncodedResponse) -> Result<(), StoreError> {
    let id = &response.id;
    let mut history = match (&response.conversation, &response.history_from) {
        (Some(append), _) => {
            check_save_into(conversation_state(tx, &response.owner, &append.id)?, append)?;
            let mut keys = query_keys(tx, CONVERSATION_KEYS, [&append.id])?;
            keys.reserve(response.items.len());
            keys
        }
        (None, None) => Vec::with_capacity(response.items.len()),
        (None, Some(parent)) => {
            let list = tx
                .prepare_cached(SELECT_HISTORY)
                .and_then(|mut s| s.query_row([parent, &response.owner], |row| row.get::<_, String>(0)))
                .map_err(|e| match e {
                    rusqlite::Error::QueryReturnedNoRows => StoreError::MissingHistory(format!(
                        "{parent} was deleted before its continuation {id} was saved"
                    )),
                    e => map_err(e),
                })?;
            let mut keys: Vec<i64> =
                serde_json::from_str(&list).map_err(|e| StoreError::Corrupt(format!("history of {parent}: {e}")))?;
            keys.reserve(response.items.len());
            keys
        }
    };
    let first_key = if response.items.is_empty() { None } else { Some(insert_items(tx, &response.items)?) };
    if let Some(first) = first_key {
        history.extend(first..first + response.items.len() as i64);
    }
    let history = encode(&history, "history")?;
    let inserted = tx.prepare_cached(INSERT_RESPONSE).and_then(|mut s| {
        s.execute(params![
            id,
            response.previous_response_id,
            response.model,
            response.created_at,
            response.status,
            response.body,
            response.history_from,
            history,
            response.conversation.as_ref().map(|c| &c.id),
            response.owner,
            response.rounds,
            response.input_text
        ])
    });
    match inserted {
        Ok(_) => {}
        Err(e) if is_unique_violation(&e) => return Err(StoreError::Duplicate(id.clone())),
        Err(e) => return Err(map_err(e)),
    }
    if let Some(first) = first_key {
        tx.prepare_cached(INSERT_OWN_ITEMS)
            .and_then(|mut s| {
                s.execute(params![id, first, response.inputs, response.items.len() as i64, ROLE_INPUT, ROLE_OUTPUT])
            })
            .map_err(map_err)?;
        if let Some(append) = &response.conversation {
            append_rows(tx, &append.id, first, response.items.len())?;
        }
    }
    Ok(())
}
