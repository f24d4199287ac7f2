//! The store's interface: [`ResponseStore`], what a caller hands it ([`NewResponse`],
//! [`NewConversation`], [`InputItemsPage`]), what it returns ([`InputItemsList`],
//! [`ConversationRecord`], [`ConversationHistory`]) and how it fails ([`StoreError`]).
//!
//! Two kinds of state live in it: stored responses, each with the ordered history it continues
//! (its *history*), and conversations (`conv_…`), ordered item lists that clients edit and that
//! responses created in them extend.
//!
//! Everything stored has an *owner*, the tenant that created it. Every method that takes an id
//! also takes the owner asking, and another owner's record is exactly a missing one (`None`,
//! `false`, [`ConversationItemLookup::NoConversation`]), found with the same one lookup.
//!
//! The engine and the server's handlers need only this; the backends (SQLite, PostgreSQL) and
//! choosing one from a location are in `respgw-store`, so a crate that never opens a database
//! does not compile a driver.
//!
//! `background.rs`: `BackgroundStore` — background runs (status, response object, tenant and lease)
//! and their event logs, and the wake-up channel between processes.
//!
//! `console.rs`: `ConsoleStore` — the operator console's reads across tenants (a `Scope`: one
//! tenant or all), newest first with an `after` cursor.
//!
//! `retrieval.rs`: `RetrievalStore` — uploaded files, vector stores, their chunks and lexical
//! index, and the ingestion queue.
//!
//! Architecture invariant: only `respgw-store` (and the binaries that open a store) compile
//! rusqlite and sqlx.

pub mod background;
pub mod console;
pub mod retrieval;

pub use background::BackgroundStore;
pub use console::ConsoleStore;
use respgw_protocol::listing::{ListOrder, ListQuery};
use respgw_protocol::{ApiError, Item};
pub use retrieval::RetrievalStore;

/// What the engine hands the store when a response reaches `completed` or `incomplete`.
#[derive(Debug, Clone)]
pub struct NewResponse {
    /// The response id (`resp_…`); must not be stored yet.
    pub id: String,
    /// The tenant that created it; only this owner reads, continues or deletes it.
    /// `history_from` and `conversation` must belong to the same owner (else the save fails as if
    /// they were gone).
    pub owner: String,
    /// The response this one continues, if any.
    pub previous_response_id: Option<String>,
    /// The model name as reported in the response object.
    pub model: String,
    /// Unix seconds.
    pub created_at: i64,
    /// `"completed"` or `"incomplete"`.
    pub status: String,
    /// The full response object JSON, exactly what GET returns.
    pub response: serde_json::Value,
    /// The stored response whose conversation this one continues: its whole conversation is
    /// shared (referenced, never written again) and comes first. `None` when the history was not
    /// read from the store (no `previous_response_id`, or a WebSocket connection's unstored
    /// response, whose items arrive in `input`). If it is gone by the time of the save, the save
    /// fails with [`StoreError::MissingHistory`] and writes nothing. Ignored when `conversation`
    /// is set (the history is then the conversation's).
    pub history_from: Option<String>,
    /// This request's own input items (new rows).
    pub input: Vec<Item>,
    /// This response's output items (new rows).
    pub output: Vec<Item>,
    /// The conversation this response was created in: the save appends `input` then `output` to
    /// it in the same transaction, and the response's history is the conversation's items as they
    /// were (`history_from` is then `None`). If the conversation was deleted meanwhile, the save
    /// fails with [`StoreError::ConversationGone`] and writes nothing.
    pub conversation: Option<ConversationAppend>,
    /// Each upstream call of the response, in order, with its timing and usage: what the
    /// console shows as the response's rounds.
    pub rounds: Vec<RoundRecord>,
}

/// One upstream call (model turn) of a response, as the operator console shows it. Times are
/// milliseconds from the start of the response's run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RoundRecord {
    /// When the chat request was sent.
    pub started_ms: u64,
    /// When its first chunk arrived (`None`: none arrived).
    pub first_chunk_ms: Option<u64>,
    /// How long the call took, to its last chunk.
    pub duration_ms: u64,
    /// Input tokens as the upstream's `usage` reported them (0 without `usage`).
    pub input_tokens: u64,
    /// Output tokens as the upstream's `usage` reported them (0 without `usage`).
    pub output_tokens: u64,
    /// How long the gateway tools this turn called took to run (0: it called none).
    pub tools_ms: u64,
    /// The ids of the items this turn produced, in order.
    pub item_ids: Vec<String>,
}

/// Which conversation a response extends, and the state of it the response was computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversationAppend {
    /// The conversation id (`conv_…`).
    pub id: String,
    /// [`ConversationHistory::version`] as read when the response started. If the conversation
    /// changed since (another response or an items call), the save fails with
    /// [`StoreError::ConversationChanged`] and writes nothing.
    pub version: i64,
}

/// A conversation to create.
#[derive(Debug, Clone)]
pub struct NewConversation {
    /// `conv_…`; must not be stored yet ([`StoreError::Duplicate`]; a deleted conversation's id
    /// stays taken while responses created in it are stored).
    pub id: String,
    /// The tenant that created it; only this owner reads, changes or deletes it, or creates
    /// responses in it.
    pub owner: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The metadata object (validated by the caller: at most 16 string pairs).
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Initial items, in order (new rows).
    pub items: Vec<Item>,
}

/// A stored conversation, without its items.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationRecord {
    pub id: String,
    /// Unix seconds.
    pub created_at: i64,
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// What a response created in a conversation starts from: all its items, oldest first, and the
/// version they are at.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationHistory {
    pub items: Vec<Item>,
    /// Changes with every change of the item list (append or delete); metadata updates do not
    /// change it.
    pub version: i64,
}

/// The outcome of looking up or deleting one item of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum ConversationItemLookup<T> {
    /// No conversation with that id (or it was deleted, or another owner's).
    NoConversation,
    /// The conversation exists but holds no item with that id.
    NoItem,
    Found(T),
}

/// Sort order of an input-items listing (OpenAI's `order` parameter; its default is `desc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputItemsOrder {
    /// Oldest first.
    Asc,
    /// Newest first.
    #[default]
    Desc,
}

/// One page request of an input-items listing.
#[derive(Debug, Clone)]
pub struct InputItemsPage {
    /// An item id: list the items that come after it in `order` (exclusive). An id that is not
    /// among the response's input items yields an empty page.
    pub after: Option<String>,
    /// At most this many items (the caller validates OpenAI's 1..=100 range).
    pub limit: usize,
    /// Listing order.
    pub order: InputItemsOrder,
}

impl From<ListQuery> for InputItemsPage {
    /// The page a client's checked list query asks for.
    fn from(query: ListQuery) -> Self {
        let order = match query.order {
            ListOrder::Asc => InputItemsOrder::Asc,
            ListOrder::Desc => InputItemsOrder::Desc,
        };
        InputItemsPage { after: query.after, limit: query.limit, order }
    }
}

/// One page of an input-items listing.
#[derive(Debug, Clone, PartialEq)]
pub struct InputItemsList {
    /// The items of this page, in the requested order.
    pub items: Vec<Item>,
    /// Whether more items follow this page.
    pub has_more: bool,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached or was busy/locked past the timeout; retrying may work.
    /// Also returned when a store is opened at a location no backend serves.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A response (on [`ResponseStore::save`]) or a conversation (on
    /// [`ResponseStore::create_conversation`]) with this id already exists; a deleted conversation
    /// may keep its id taken while responses created in it are stored.
    #[error("{0} already exists")]
    Duplicate(String),
    /// The disk holding the store is full: nothing new can be stored until space is freed
    /// (deletes still run where the backend keeps a reserve for them). Retrying soon will not help.
    #[error("{0}")]
    Full(String),
    /// Stored data could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The response named in [`NewResponse::history_from`] no longer exists (deleted while this
    /// one ran).
    #[error("inherited history is gone: {0}")]
    MissingHistory(String),
    /// The conversation of [`NewResponse::conversation`] was deleted while the response ran.
    #[error("conversation {0} is gone")]
    ConversationGone(String),
    /// The conversation of [`NewResponse::conversation`] changed since the response read it.
    #[error("conversation {0} changed while the response ran")]
    ConversationChanged(String),
    /// [`ResponseStore::append_conversation_items`]: the items would take the conversation past
    /// its limit; nothing was written.
    #[error("the conversation holds {held} items; {adding} more would pass its limit of {limit}")]
    ConversationFull { held: usize, adding: usize, limit: usize },
}

/// The client-facing error for a store failure: unavailable or full is 503, a conversation gone,
/// changed or full is what the conversation's client is told, the rest is an internal error.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(detail) | StoreError::Full(detail) => ApiError::store_unavailable(&detail),
            StoreError::ConversationGone(id) => ApiError::conversation_not_found(&id, "conversation"),
            StoreError::ConversationChanged(id) => ApiError::conversation_conflict(&id),
            StoreError::ConversationFull { held, adding, limit } => {
                ApiError::conversation_full("items", held, adding, limit)
            }
            StoreError::Duplicate(_) | StoreError::Corrupt(_) | StoreError::MissingHistory(_) => {
                ApiError::internal(format!("The response store failed: {e}"))
            }
        }
    }
}

/// Where responses and their conversations are kept. "Not stored" below includes "stored for
/// another owner".
#[async_trait::async_trait]
pub trait ResponseStore: Send + Sync + 'static {
    /// Persist a terminal response atomically (one transaction): its row with its conversation's
    /// key list, and its new items.
    async fn save(&self, response: NewResponse) -> Result<(), StoreError>;

    /// The stored response object JSON, or None.
    async fn response(&self, owner: &str, id: &str) -> Result<Option<serde_json::Value>, StoreError>;

    /// The full ordered history to continue from response `id`: inherited items ++ its input ++
    /// its output. One query. None if `id` is not stored (or was deleted).
    async fn history(&self, owner: &str, id: &str) -> Result<Option<Vec<Item>>, StoreError>;

    /// This response's own input items (not inherited ones), paginated like OpenAI's input_items
    /// list (`after` is an item id; the cursor is exclusive). None if `id` is not stored.
    async fn input_items(
        &self,
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError>;

    /// Delete a response; returns false when it was not stored. Its items are removed in the same
    /// transaction unless a continuation shares them, in which case they go with the last such
    /// continuation; continuations of the deleted response keep working.
    async fn delete(&self, owner: &str, id: &str) -> Result<bool, StoreError>;

    /// Create a conversation with its initial items, atomically.
    async fn create_conversation(&self, conversation: NewConversation) -> Result<(), StoreError>;

    /// The conversation's record, or None when it does not exist (or was deleted).
    async fn conversation(&self, owner: &str, id: &str) -> Result<Option<ConversationRecord>, StoreError>;

    /// Replace the conversation's metadata (its version stays); the updated record, or None when it
    /// does not exist.
    async fn update_conversation(
        &self,
        owner: &str,
        id: &str,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<ConversationRecord>, StoreError>;

    /// Delete a conversation; false when it does not exist. Stored responses created in it keep
    /// their whole history.
    async fn delete_conversation(&self, owner: &str, id: &str) -> Result<bool, StoreError>;

    /// Every item of the conversation, oldest first, with its version: what a response created in
    /// it continues. One consistent snapshot. None when it does not exist.
    async fn conversation_history(&self, owner: &str, id: &str) -> Result<Option<ConversationHistory>, StoreError>;

    /// One page of the conversation's items (`after` is an item id, exclusive; an id not in the
    /// conversation yields an empty page). None when the conversation does not exist.
    async fn conversation_items(
        &self,
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError>;

    /// Append items to the conversation, atomically, after everything already in it; changes its
    /// version (unless `items` is empty). None when the conversation does not exist. When it
    /// would then hold more than `max_items` items (removed ones not counted), nothing is written
    /// and the answer is [`StoreError::ConversationFull`]; the count is taken in the same
    /// transaction as the write, so concurrent appends from any process cannot pass it together.
    async fn append_conversation_items(
        &self,
        owner: &str,
        id: &str,
        items: Vec<Item>,
        max_items: usize,
    ) -> Result<Option<()>, StoreError>;

    /// The first item with id `item_id` in the conversation (one snapshot).
    async fn conversation_item(
        &self,
        owner: &str,
        id: &str,
        item_id: &str,
    ) -> Result<ConversationItemLookup<Item>, StoreError>;

    /// Remove the first item with id `item_id` from the conversation, changing its version; the
    /// conversation's record when it was removed. Stored responses whose history holds the item
    /// keep it.
    async fn delete_conversation_item(
        &self,
        owner: &str,
        id: &str,
        item_id: &str,
    ) -> Result<ConversationItemLookup<ConversationRecord>, StoreError>;
}
