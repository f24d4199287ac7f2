//! The reads both backends run with the same SQL: pages of a response's input items and of a
//! conversation's items, a conversation's whole list and one item of it. Written with
//! PostgreSQL's parameters (`$1`…); [`with_sqlite_parameters`] gives SQLite's (`?1`…).
//!
//! Each is one statement (one snapshot, one round trip) whose LEFT JOINs start from the
//! response's or conversation's row: no row at all means that it is not stored (or not the
//! owner's), one all-NULL item row that it is stored but has nothing to show.

/// A statement above with SQLite's numbered parameters (`?n`, bound by number as `$n` is): these
/// statements use `$` for nothing else.
pub(crate) fn with_sqlite_parameters(sql: &str) -> String {
    sql.replace('$', "?")
}

/// Input items of one response from an exclusive cursor (`$2`, an item id, NULL for none), oldest
/// first: one all-NULL row when the response exists but the page is
/// empty, and a cursor that is not among the input gives an empty page.
pub(crate) const INPUT_ITEMS_ASC: &str = "
    SELECT ri.item_key, i.body
    FROM responses r
    LEFT JOIN response_items ri
        ON ri.response_id = r.id AND ri.role = 1
        AND (CAST($2 AS text) IS NULL OR ri.position > (
            SELECT MIN(c.position) FROM response_items c JOIN items ci ON ci.key = c.item_key
            WHERE c.response_id = $1 AND c.role = 1 AND ci.item_id = $2))
    LEFT JOIN items i ON i.key = ri.item_key
    WHERE r.id = $1 AND r.owner = $4 AND NOT r.deleted
    ORDER BY ri.position ASC
    LIMIT $3";

/// [`INPUT_ITEMS_ASC`], newest first.
pub(crate) const INPUT_ITEMS_DESC: &str = "
    SELECT ri.item_key, i.body
    FROM responses r
    LEFT JOIN response_items ri
        ON ri.response_id = r.id AND ri.role = 1
        AND (CAST($2 AS text) IS NULL OR ri.position < (
            SELECT MAX(c.position) FROM response_items c JOIN items ci ON ci.key = c.item_key
            WHERE c.response_id = $1 AND c.role = 1 AND ci.item_id = $2))
    LEFT JOIN items i ON i.key = ri.item_key
    WHERE r.id = $1 AND r.owner = $4 AND NOT r.deleted
    ORDER BY ri.position DESC
    LIMIT $3";

/// Every visible item of a conversation with its version, in one statement: no row when the
/// conversation does not exist, one all-NULL item when it is empty.
pub(crate) const CONVERSATION_HISTORY: &str = "
    SELECT ci.item_key, i.body, c.version
    FROM conversations c
    LEFT JOIN conversation_items ci ON ci.conversation_id = c.id AND NOT ci.removed
    LEFT JOIN items i ON i.key = ci.item_key
    WHERE c.id = $1 AND c.owner = $2 AND NOT c.deleted
    ORDER BY ci.position";

/// A page of a conversation's visible items from an exclusive cursor (`$2`, an item id, NULL for
/// none), oldest first; shaped like [`INPUT_ITEMS_ASC`].
pub(crate) const CONVERSATION_ITEMS_ASC: &str = "
    SELECT ci.item_key, i.body
    FROM conversations c
    LEFT JOIN conversation_items ci
        ON ci.conversation_id = c.id AND NOT ci.removed
        AND (CAST($2 AS text) IS NULL OR ci.position > (
            SELECT MIN(x.position) FROM conversation_items x JOIN items xi ON xi.key = x.item_key
            WHERE x.conversation_id = $1 AND NOT x.removed AND xi.item_id = $2))
    LEFT JOIN items i ON i.key = ci.item_key
    WHERE c.id = $1 AND c.owner = $4 AND NOT c.deleted
    ORDER BY ci.position ASC
    LIMIT $3";

/// [`CONVERSATION_ITEMS_ASC`], newest first.
pub(crate) const CONVERSATION_ITEMS_DESC: &str = "
    SELECT ci.item_key, i.body
    FROM conversations c
    LEFT JOIN conversation_items ci
        ON ci.conversation_id = c.id AND NOT ci.removed
        AND (CAST($2 AS text) IS NULL OR ci.position < (
            SELECT MAX(x.position) FROM conversation_items x JOIN items xi ON xi.key = x.item_key
            WHERE x.conversation_id = $1 AND NOT x.removed AND xi.item_id = $2))
    LEFT JOIN items i ON i.key = ci.item_key
    WHERE c.id = $1 AND c.owner = $4 AND NOT c.deleted
    ORDER BY ci.position DESC
    LIMIT $3";

/// The first visible item with id `$2` of owner `$3`'s conversation `$1`: no row when the conversation does
/// not exist, an all-NULL row when it holds no such item.
pub(crate) const CONVERSATION_ITEM: &str = "
    SELECT f.item_key, i.body
    FROM (
        SELECT (SELECT ci.item_key FROM conversation_items ci JOIN items x ON x.key = ci.item_key
                WHERE ci.conversation_id = c.id AND NOT ci.removed AND x.item_id = $2
                ORDER BY ci.position LIMIT 1) AS item_key
        FROM conversations c WHERE c.id = $1 AND c.owner = $3 AND NOT c.deleted
    ) f
    LEFT JOIN items i ON i.key = f.item_key";
