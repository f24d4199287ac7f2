//! The Conversations API's wire types: the bodies of `POST /v1/conversations`,
//! `POST /v1/conversations/{id}` and `POST /v1/conversations/{id}/items` with their checks, and
//! the conversation object clients get back.
//!
//! Items are parsed one by one with the same rules as a response's `input`, so an error names
//! the item (`items[3].content`) and ids are minted where a client sent none.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{ApiError, describe_json_syntax};
use crate::items::Item;
use crate::limits::RequestLimits;
use crate::request::{check_item_files, check_metadata, normalize_items};

/// Most items one create call may add (the reference API's limit).
pub const MAX_ITEMS_PER_CALL: usize = 20;

/// The body of `POST /v1/conversations`, checked.
#[derive(Debug, Clone)]
pub struct CreateConversation {
    pub items: Vec<Item>,
    pub metadata: Map<String, Value>,
}

/// The body of `POST /v1/conversations/{id}`, checked.
#[derive(Debug, Clone)]
pub struct UpdateConversation {
    pub metadata: Map<String, Value>,
}

/// The body of `POST /v1/conversations/{id}/items`, checked.
#[derive(Debug, Clone)]
pub struct AddItems {
    pub items: Vec<Item>,
}

#[derive(Deserialize)]
struct CreateBody {
    items: Option<Vec<Value>>,
    metadata: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct UpdateBody {
    metadata: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct AddItemsBody {
    items: Option<Vec<Value>>,
}

impl CreateConversation {
    /// Parse and check a create body: at most [`MAX_ITEMS_PER_CALL`] items whose files are within
    /// `limits`, metadata within the reference limits. An empty body creates an empty
    /// conversation.
    pub fn from_slice(bytes: &[u8], limits: &RequestLimits) -> Result<Self, ApiError> {
        let body: CreateBody = if bytes.iter().all(u8::is_ascii_whitespace) {
            CreateBody { items: None, metadata: None }
        } else {
            parse_object(bytes)?
        };
        let metadata = body.metadata.unwrap_or_default();
        check_metadata(&metadata)?;
        Ok(CreateConversation { items: parse_items(body.items.unwrap_or_default(), limits)?, metadata })
    }
}

impl UpdateConversation {
    /// Parse and check an update body: `metadata` is required and replaces the old one.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: UpdateBody = parse_object(bytes)?;
        let Some(metadata) = body.metadata else {
            return Err(ApiError::invalid("metadata", "Missing required parameter: 'metadata'.")
                .with_code("missing_required_parameter"));
        };
        check_metadata(&metadata)?;
        Ok(UpdateConversation { metadata })
    }
}

impl AddItems {
    /// Parse and check an add-items body: 1 to [`MAX_ITEMS_PER_CALL`] items whose files are
    /// within `limits`.
    pub fn from_slice(bytes: &[u8], limits: &RequestLimits) -> Result<Self, ApiError> {
        let body: AddItemsBody = parse_object(bytes)?;
        let Some(items) = body.items else {
            return Err(ApiError::invalid("items", "Missing required parameter: 'items'.")
                .with_code("missing_required_parameter"));
        };
        if items.is_empty() {
            return Err(ApiError::invalid("items", "'items' must hold at least one item."));
        }
        Ok(AddItems { items: parse_items(items, limits)? })
    }
}

fn parse_object<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let body: Value = serde_json::from_slice(bytes).map_err(|e| describe_json_syntax("request body", &e))?;
    if !body.is_object() {
        return Err(ApiError::invalid_body("The request body must be a JSON object."));
    }
    serde_path_to_error::deserialize(body).map_err(|e| ApiError::from_path_error("", e))
}

fn parse_items(items: Vec<Value>, limits: &RequestLimits) -> Result<Vec<Item>, ApiError> {
    if items.len() > MAX_ITEMS_PER_CALL {
        return Err(ApiError::invalid(
            "items",
            format!("At most {MAX_ITEMS_PER_CALL} items can be added at a time; got {}.", items.len()),
        ));
    }
    let items = normalize_items(items, "items")?;
    check_item_files(&items, "items", limits)?;
    Ok(items)
}

/// A conversation as clients see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConversationObject {
    pub id: String,
    object: &'static str,
    pub created_at: i64,
    pub metadata: Map<String, Value>,
}

impl ConversationObject {
    pub fn new(id: String, created_at: i64, metadata: Map<String, Value>) -> Self {
        ConversationObject { id, object: "conversation", created_at, metadata }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn create(body: Value) -> Result<CreateConversation, ApiError> {
        CreateConversation::from_slice(body.to_string().as_bytes(), &RequestLimits::default())
    }

    #[test]
    fn an_empty_body_creates_an_empty_conversation() {
        let c = CreateConversation::from_slice(b"", &RequestLimits::default()).unwrap();
        assert!(c.items.is_empty() && c.metadata.is_empty());
        assert!(create(json!({})).unwrap().items.is_empty());
    }

    #[test]
    fn items_get_ids_and_errors_name_the_item() {
        let c = create(json!({"items": [{"role": "user", "content": "hi"}]})).unwrap();
        assert!(c.items[0].id().starts_with("msg_"), "{:?}", c.items[0]);
        let e = create(json!({"items": [{"role": "user", "content": "hi"}, {"type": "bogus"}]})).unwrap_err();
        assert!(e.param.as_deref().unwrap_or_default().starts_with("items[1]"), "{e:?}");
    }

    #[test]
    fn at_most_twenty_items_per_call() {
        let items: Vec<Value> = (0..21).map(|i| json!({"role": "user", "content": format!("m{i}")})).collect();
        let e = create(json!({ "items": items })).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("items")));
        let e = AddItems::from_slice(json!({ "items": items }).to_string().as_bytes(), &RequestLimits::default())
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("items"));
    }

    #[test]
    fn metadata_limits_name_the_field() {
        let long = "x".repeat(513);
        let e = create(json!({"metadata": {"k": long}})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata.k"));
        let many: Map<String, Value> = (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
        let e = UpdateConversation::from_slice(json!({ "metadata": many }).to_string().as_bytes()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata"));
    }

    #[test]
    fn update_needs_metadata_and_add_needs_items() {
        let e = UpdateConversation::from_slice(b"{}").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata"));
        let e = AddItems::from_slice(b"{}", &RequestLimits::default()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("items"));
        let e = AddItems::from_slice(br#"{"items": []}"#, &RequestLimits::default()).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("items"));
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e = create(json!({"items": "hi"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("items"));
        let e = CreateConversation::from_slice(b"[1]", &RequestLimits::default()).unwrap_err();
        assert_eq!(e.status, 400);
    }
}
