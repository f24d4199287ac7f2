//! Conversations as clients manage them — `/v1/conversations` and its items: create, retrieve,
//! update and delete a conversation; list, add, retrieve and delete its items. Responses created
//! in a conversation read and extend it in `run.rs`; this is the rest of what the engine does
//! with conversations, so a handler never reaches past the engine into the store.

use std::time::{SystemTime, UNIX_EPOCH};

use respgw_protocol::conversations::{AddItems, ConversationObject, CreateConversation, UpdateConversation};
use respgw_protocol::ids::{IdKind, new_id};
use respgw_protocol::listing::{Deleted, ListPage, ListQuery};
use respgw_protocol::{ApiError, Item};
use respgw_store_api::{ConversationItemLookup, ConversationRecord, NewConversation, ResponseStore};

use crate::files::{FileReader, read_files};
use crate::sealed::{ReasoningSeal, open_sealed_items};
use crate::tool_kinds;

/// Reads and writes of conversations (see [`crate::Engine::conversations`]).
pub struct Conversations<'a> {
    pub(crate) store: &'a dyn ResponseStore,
    /// The tenant asking: it creates conversations it owns, and sees no other tenant's.
    pub(crate) owner: &'a str,
    /// Reads the `input_file` parts of added items, as for a response's input (`None`: refused).
    pub(crate) files: Option<&'a dyn FileReader>,
    /// Opens the sealed items of added items for `owner`, as for a response's input (`None`:
    /// refused).
    pub(crate) seal: Option<&'a ReasoningSeal>,
    /// Most items one conversation may hold; the store counts them when items are appended.
    pub(crate) max_items: usize,
}

/// Where a conversation id came from, for the `param` of a 404.
const PATH_PARAM: &str = "conversation_id";

fn object(record: ConversationRecord) -> ConversationObject {
    ConversationObject::new(record.id, record.created_at, record.metadata)
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// An item as a client sees it in a conversation: what a response's output shows with the same
/// `include`, and an input item as the client sent it (what the model got of a file is not shown).
fn present(item: Item, include: &[String]) -> Item {
    tool_kinds::present(&item, include).client_view()
}

impl Conversations<'_> {
    /// Create a conversation with its initial items (at most the limit per conversation).
    pub async fn create(&self, mut request: CreateConversation) -> Result<ConversationObject, ApiError> {
        if request.items.len() > self.max_items {
            return Err(ApiError::conversation_full("items", 0, request.items.len(), self.max_items));
        }
        open_sealed_items(self.seal, self.owner, &mut request.items, "items")?;
        read_files(self.files, self.owner, &mut request.items, "items").await?;
        let conversation = NewConversation {
            id: new_id(IdKind::Conversation),
            owner: self.owner.to_owned(),
            created_at: unix_now(),
            metadata: request.metadata,
            items: request.items,
        };
        let created =
            ConversationObject::new(conversation.id.clone(), conversation.created_at, conversation.metadata.clone());
        self.store.create_conversation(conversation).await?;
        Ok(created)
    }

    /// The conversation `id`; 404 when it does not exist.
    pub async fn retrieve(&self, id: &str) -> Result<ConversationObject, ApiError> {
        let record = self.store.conversation(self.owner, id).await?;
        record.map(object).ok_or_else(|| ApiError::conversation_not_found(id, PATH_PARAM))
    }

    /// Replace the metadata of conversation `id`.
    pub async fn update(&self, id: &str, request: UpdateConversation) -> Result<ConversationObject, ApiError> {
        let record = self.store.update_conversation(self.owner, id, request.metadata).await?;
        record.map(object).ok_or_else(|| ApiError::conversation_not_found(id, PATH_PARAM))
    }

    /// Delete conversation `id`; responses created in it stay readable and continuable.
    pub async fn delete(&self, id: &str) -> Result<Deleted, ApiError> {
        if self.store.delete_conversation(self.owner, id).await? {
            Ok(Deleted::new(id.to_owned(), "conversation.deleted"))
        } else {
            Err(ApiError::conversation_not_found(id, PATH_PARAM))
        }
    }

    /// One page of the conversation's items, as clients see them.
    pub async fn items(&self, id: &str, query: ListQuery, include: &[String]) -> Result<ListPage<Item>, ApiError> {
        let list = self
            .store
            .conversation_items(self.owner, id, query.into())
            .await?
            .ok_or_else(|| ApiError::conversation_not_found(id, PATH_PARAM))?;
        let items = list.items.into_iter().map(|item| present(item, include)).collect();
        Ok(ListPage::new(items, list.has_more, Item::id))
    }

    /// Append items to the conversation; the page of what was added, in order. Items that would
    /// take it past the limit per conversation are refused, none written.
    pub async fn add_items(
        &self,
        id: &str,
        mut request: AddItems,
        include: &[String],
    ) -> Result<ListPage<Item>, ApiError> {
        open_sealed_items(self.seal, self.owner, &mut request.items, "items")?;
        read_files(self.files, self.owner, &mut request.items, "items").await?;
        let added: Vec<Item> = request.items.iter().map(|item| present(item.clone(), include)).collect();
        self.store
            .append_conversation_items(self.owner, id, request.items, self.max_items)
            .await?
            .ok_or_else(|| ApiError::conversation_not_found(id, PATH_PARAM))?;
        Ok(ListPage::new(added, false, Item::id))
    }

    /// One item of the conversation.
    pub async fn item(&self, id: &str, item_id: &str, include: &[String]) -> Result<Item, ApiError> {
        match self.store.conversation_item(self.owner, id, item_id).await? {
            ConversationItemLookup::Found(item) => Ok(present(item, include)),
            ConversationItemLookup::NoConversation => Err(ApiError::conversation_not_found(id, PATH_PARAM)),
            ConversationItemLookup::NoItem => Err(ApiError::conversation_item_not_found(id, item_id)),
        }
    }

    /// Remove one item from the conversation; the conversation afterwards.
    pub async fn delete_item(&self, id: &str, item_id: &str) -> Result<ConversationObject, ApiError> {
        match self.store.delete_conversation_item(self.owner, id, item_id).await? {
            ConversationItemLookup::Found(record) => Ok(object(record)),
            ConversationItemLookup::NoConversation => Err(ApiError::conversation_not_found(id, PATH_PARAM)),
            ConversationItemLookup::NoItem => Err(ApiError::conversation_item_not_found(id, item_id)),
        }
    }
}
