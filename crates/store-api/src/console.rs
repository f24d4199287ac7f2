//! [`ConsoleStore`]: the operator console's reads, across tenants. Every other face of the store
//! answers one owner; these take a [`Scope`] instead — one tenant's records, or every tenant's
//! (an admin's) — and list newest first with an exclusive `after` cursor (the id of the last row
//! of the previous page; an id that names no row in scope gives an empty page).
//!
//! By-id reads here only say *whose* a record is (and what the console adds to it: rounds,
//! chain, counts); the record itself is then read through the owner's ordinary face
//! ([`ResponseStore`](crate::ResponseStore), [`BackgroundStore`](crate::BackgroundStore),
//! [`RetrievalStore`](crate::RetrievalStore)), exactly as that owner would see it.

use crate::background::RunStatus;
use crate::retrieval::{FileRecord, Listed, VectorStoreView};
use crate::{RoundRecord, StoreError};

/// Whose records a console read sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// One tenant's.
    Tenant(String),
    /// Every tenant's.
    All,
}

impl Scope {
    /// The one owner this scope is limited to, if any.
    pub fn owner(&self) -> Option<&str> {
        match self {
            Scope::Tenant(name) => Some(name),
            Scope::All => None,
        }
    }
}

/// Most rows of one console page.
pub const MAX_PAGE: usize = 100;

/// One page of a console list: newest first, strictly after the row with id `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsolePage {
    pub after: Option<String>,
    /// 1..=[`MAX_PAGE`] (checked by the caller).
    pub limit: usize,
}

/// Most characters of the stored text of a response's own input (see
/// [`ResponseRow::input_text`]), in bytes.
pub const MAX_INPUT_TEXT_BYTES: usize = 8 * 1024;

/// Which stored responses a list shows; every field set narrows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseFilter {
    pub model: Option<String>,
    /// A response status word (`completed`, `incomplete`, …).
    pub status: Option<String>,
    /// Created at or after (unix seconds).
    pub since: Option<i64>,
    /// Created at or before (unix seconds).
    pub until: Option<i64>,
    /// A case-insensitive substring of the response's input text (taken literally: `%` and `_`
    /// match themselves).
    pub text: Option<String>,
}

/// A stored response as a console list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseRow {
    pub id: String,
    /// The tenant that created it.
    pub owner: String,
    pub model: String,
    pub status: String,
    /// Unix seconds.
    pub created_at: i64,
    pub previous_response_id: Option<String>,
    pub conversation_id: Option<String>,
    /// The response object, as stored.
    pub response: serde_json::Value,
    /// The text of the request's own input (message texts, function-call outputs), at most
    /// [`MAX_INPUT_TEXT_BYTES`]; empty for responses stored before the console.
    pub input_text: String,
    /// Its upstream calls (empty for responses stored before the console).
    pub rounds: Vec<RoundRecord>,
}

/// What the console shows of one stored response beyond the response itself.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseFacts {
    /// The tenant that created it (whose face reads the response and its input items).
    pub owner: String,
    pub rounds: Vec<RoundRecord>,
    /// How many history items come before its own input (inherited from the response it
    /// continues, or its conversation's items).
    pub inherited_items: u64,
    /// The stored responses it continues, oldest first, ending with its direct parent; at most
    /// [`CHAIN_LENGTH`].
    pub previous: Vec<String>,
    /// The stored responses that continue it (`previous_response_id` = its id), oldest first;
    /// at most [`CHAIN_LENGTH`].
    pub next: Vec<String>,
}

/// Most ids on each side of [`ResponseFacts`]' chain.
pub const CHAIN_LENGTH: usize = 20;

/// A conversation as a console list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationRow {
    pub id: String,
    pub owner: String,
    /// Unix seconds.
    pub created_at: i64,
    pub metadata: serde_json::Map<String, serde_json::Value>,
    /// Items in it now (removed ones not counted).
    pub items: u64,
    /// Stored responses created in it.
    pub responses: u64,
}

/// A background run as the console lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: String,
    /// The tenant that created it.
    pub tenant: String,
    pub status: RunStatus,
    /// The response object as it stands (JSON text).
    pub body: String,
    /// Unix milliseconds it was accepted.
    pub queued_at_ms: i64,
    /// Unix milliseconds it ended, if it did.
    pub ended_at_ms: Option<i64>,
    /// Events in its log (logs of runs ended long ago are purged).
    pub events: u64,
}

/// The console's reads (see the module). "Stored" excludes deleted responses and conversations.
#[async_trait::async_trait]
pub trait ConsoleStore: Send + Sync + 'static {
    /// Stored responses in scope matching `filter`, newest first (`created_at`, then id).
    async fn list_responses(
        &self,
        scope: &Scope,
        filter: &ResponseFilter,
        page: &ConsolePage,
    ) -> Result<Listed<ResponseRow>, StoreError>;

    /// The console's facts about stored response `id`, when it is in scope.
    async fn response_facts(&self, scope: &Scope, id: &str) -> Result<Option<ResponseFacts>, StoreError>;

    /// Conversations in scope, newest first.
    async fn list_conversations(
        &self,
        scope: &Scope,
        page: &ConsolePage,
    ) -> Result<Listed<ConversationRow>, StoreError>;

    /// The owner of conversation `id`, when it is stored and in scope.
    async fn conversation_owner(&self, scope: &Scope, id: &str) -> Result<Option<String>, StoreError>;

    /// Background runs in scope, newest first (by when they were accepted), in `status` when
    /// given.
    async fn list_runs(
        &self,
        scope: &Scope,
        status: Option<RunStatus>,
        page: &ConsolePage,
    ) -> Result<Listed<RunRow>, StoreError>;

    /// Background run `id`, when it is in scope.
    async fn run_row(&self, scope: &Scope, id: &str) -> Result<Option<RunRow>, StoreError>;

    /// Uploaded files in scope (each record names its owner), newest first, of `purpose` when
    /// given. Expired files are included (the caller hides them as the Files API does).
    async fn list_files(
        &self,
        scope: &Scope,
        purpose: Option<&str>,
        page: &ConsolePage,
    ) -> Result<Listed<FileRecord>, StoreError>;

    /// Vector stores in scope with their file counts, newest first.
    async fn list_vector_stores(
        &self,
        scope: &Scope,
        page: &ConsolePage,
    ) -> Result<Listed<VectorStoreView>, StoreError>;

    /// The owner of vector store `id`, when it is in scope.
    async fn vector_store_owner(&self, scope: &Scope, id: &str) -> Result<Option<String>, StoreError>;
}
