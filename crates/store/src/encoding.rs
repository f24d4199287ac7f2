//! What both backends store as text, encoded and decoded the same way: a response's JSON and its
//! new items' (encoded before any connection is taken, so that a write holds it as briefly as
//! possible), a conversation's metadata, and the text of a response's own input that the
//! console searches.

use respgw_protocol::Item;
use respgw_store_api::console::MAX_INPUT_TEXT_BYTES;
use serde_json::Value;

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
    /// The response's upstream calls, a JSON array.
    pub rounds: String,
    /// The text of its own input (see [`input_text`]).
    pub input_text: String,
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
            rounds,
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
            rounds: encode(&rounds, "rounds")?,
            input_text: input_text(&input),
        })
    }
}

/// A conversation record from its stored columns.
pub(crate) fn conversation_record(id: &str, created_at: i64, metadata: &str) -> Result<ConversationRecord, StoreError> {
    let metadata = serde_json::from_str(metadata)
        .map_err(|e| StoreError::Corrupt(format!("metadata of conversation {id}: {e}")))?;
    Ok(ConversationRecord { id: id.to_owned(), created_at, metadata })
}

/// The text of a request's own input as the console searches and previews it: its messages'
/// texts (plain or `input_text`/`output_text` parts) and its function-call outputs (plain or
/// text parts), one per line, cut to [`MAX_INPUT_TEXT_BYTES`] on a character boundary.
pub(crate) fn input_text(input: &[Item]) -> String {
    let mut text = String::new();
    for item in input {
        let Ok(value) = serde_json::to_value(item) else { continue };
        let body = match value.get("type").and_then(Value::as_str) {
            Some("message") => value.get("content"),
            Some("function_call_output") => value.get("output"),
            _ => None,
        };
        for piece in body.into_iter().flat_map(texts) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(piece);
            if text.len() >= MAX_INPUT_TEXT_BYTES {
                let mut end = MAX_INPUT_TEXT_BYTES;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                return text;
            }
        }
    }
    text
}

/// The texts of a message's content or a function output: the string itself, or each part's
/// `text`.
fn texts(content: &Value) -> Vec<&str> {
    match content {
        Value::String(text) => vec![text.as_str()],
        Value::Array(parts) => parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use respgw_protocol::items::{ContentPart, ItemStatus, MessageItem, MessageRole};

    use super::*;

    fn message(text: &str) -> Item {
        Item::Message(MessageItem {
            id: "msg_1".into(),
            role: MessageRole::User,
            content: vec![ContentPart::InputText { text: text.into() }],
            status: ItemStatus::Completed,
        })
    }

    #[test]
    fn input_text_joins_message_texts_and_function_outputs() {
        let output: Item = serde_json::from_value(serde_json::json!({
            "type": "function_call_output", "id": "fco_1", "call_id": "call_1", "output": "22 degrees",
            "status": "completed"
        }))
        .unwrap();
        assert_eq!(input_text(&[message("Weather in Paris?"), output]), "Weather in Paris?\n22 degrees");
    }

    #[test]
    fn input_text_is_cut_on_a_character_boundary() {
        let text = input_text(&[message(&"é".repeat(MAX_INPUT_TEXT_BYTES))]);
        assert!(text.len() <= MAX_INPUT_TEXT_BYTES && text.len() > MAX_INPUT_TEXT_BYTES - 2);
        assert!(text.chars().all(|c| c == 'é'));
    }
}
