//! The response store's interface: [`ResponseStore`], what a caller hands it ([`NewResponse`],
//! [`InputItemsPage`]), what it returns ([`InputItemsList`]) and how it fails ([`StoreError`]).
//!
//! The engine and the server's handlers need only this; the backends (SQLite, PostgreSQL) and
//! choosing one from a location are in `respgw-store`, so a crate that never opens a database
//! does not compile a driver.

pub mod background;

pub use background::BackgroundStore;
use respgw_protocol::Item;

/// What the engine hands the store when a response reaches `completed` or `incomplete`.
#[derive(Debug, Clone)]
pub struct NewResponse {
    /// The response id (`resp_…`); must not be stored yet.
    pub id: String,
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
    /// fails with [`StoreError::MissingHistory`] and writes nothing.
    pub history_from: Option<String>,
    /// This request's own input items (new rows).
    pub input: Vec<Item>,
    /// This response's output items (new rows).
    pub output: Vec<Item>,
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
    /// A response with this id already exists.
    #[error("response {0} already exists")]
    Duplicate(String),
    /// Stored data could not be decoded.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The response named in [`NewResponse::history_from`] no longer exists (deleted while this
    /// one ran).
    #[error("inherited history is gone: {0}")]
    MissingHistory(String),
}

/// Where responses and their conversations are kept.
#[async_trait::async_trait]
pub trait ResponseStore: Send + Sync + 'static {
    /// Persist a terminal response atomically (one transaction): its row with its conversation's
    /// key list, and its new items.
    async fn save(&self, response: NewResponse) -> Result<(), StoreError>;

    /// The stored response object JSON, or None.
    async fn response(&self, id: &str) -> Result<Option<serde_json::Value>, StoreError>;

    /// The full ordered conversation to continue from `id`: inherited items ++ its input ++ its
    /// output. One query. None if `id` is not stored (or was deleted).
    async fn conversation(&self, id: &str) -> Result<Option<Vec<Item>>, StoreError>;

    /// This response's own input items (not inherited ones), paginated like OpenAI's input_items
    /// list (`after` is an item id; the cursor is exclusive). None if `id` is not stored.
    async fn input_items(&self, id: &str, page: InputItemsPage) -> Result<Option<InputItemsList>, StoreError>;

    /// Delete a response; returns false when it was not stored. Its items are removed in the same
    /// transaction unless a continuation shares them, in which case they go with the last such
    /// continuation; continuations of the deleted response keep working.
    async fn delete(&self, id: &str) -> Result<bool, StoreError>;
}
