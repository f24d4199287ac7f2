//! What both backends store as text, encoded and decoded the same way: a response's JSON and its
//! new items' (encoded before any connection is taken, so that a write holds it as briefly as
//! possible), a conversation's metadata.

use respgw_protocol::Item;

use crate::{ConversationAppend, ConversationRecord, NewResponse, StoreError};

/// A value as the JSON text a column holds.
pub(crate) fn encode<T: serde::Serialize + ?Sized>(value: &T, what: &str) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(format!("cannot encode {what}: {e}")))
}

/// A new item for the `items` table.
pub(crate) struct EncodedItem {
    /// Its id, as the client gave it (what listings' cursors look up).
    pub id: String,
    /// The serde JSON of the [`Item`].
    pub body: String,
}

/// New items, in order.
pub(crate) fn encode_items(items: &[Item]) -> Result<Vec<EncodedItem>, StoreError> {
    items.iter().map(|item| Ok(EncodedItem { id: item.id().to_owned(), body: encode(item, "item")? })).collect()
}

/// A response to save, encoded.
pub(crate) struct EncodedResponse {
    pub id: String,
    /// The tenant saving it (see [`NewResponse::owner`]).
    pub owner: String,
    pub previous_response_id: Option<String>,
    pub model: String,
    pub created_at: i64,
    pub status: String,
    /// The response object's JSON.
    pub body: String,
    /// The response it continues; `None` for one created in a conversation, which continues the
    /// conversation, nothing else.
    pub history_from: Option<String>,
    /// The conversation the response was created in, at the version it read.
    pub conversation: Option<ConversationAppend>,
    /// How many of `items` are input (the rest are output).
    pub inputs: i64,
    /// The new items, input then output.
    pub items: Vec<EncodedItem>,
}

impl EncodedResponse {
    pub(crate) fn new(response: NewResponse) -> Result<Self, StoreError> {
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
            rounds: _,
        } = response;
        let history_from = if conversation.is_some() { None } else { history_from };
        let mut items = encode_items(&input)?;
        items.extend(encode_items(&output)?);
        Ok(Self {
            id,
            owner,
            previous_response_id,
            model,
            created_at,
            status,
            body: encode(&response, "response")?,
            history_from,
            conversation,
            inputs: input.len() as i64,
            items,
        })
    }
}

/// A conversation record from its stored columns.
pub(crate) fn conversation_record(id: &str, created_at: i64, metadata: &str) -> Result<ConversationRecord, StoreError> {
    let metadata = serde_json::from_str(metadata)
        .map_err(|e| StoreError::Corrupt(format!("metadata of conversation {id}: {e}")))?;
    Ok(ConversationRecord { id: id.to_owned(), created_at, metadata })
}
