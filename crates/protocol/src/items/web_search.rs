//! `web_search_call` items: what a search did (`action`) and what the model was given.

use serde::{Deserialize, Serialize};

use super::CallStatus;

/// A `web_search` call the gateway ran: its public `action` (absent while in progress), and —
/// kept for the conversation, never shown to clients — the result the model was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebSearchCallItem {
    pub id: String,
    pub status: CallStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<WebSearchAction>,
    /// The tool result (JSON text) the model saw, so a continuation replays it exactly. The
    /// engine removes it from every item a client sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_result: Option<String>,
}

/// What a `web_search_call` did, in the reference API's shapes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WebSearchAction {
    /// A search. `queries` is omitted when empty; `sources` only with
    /// `include: ["web_search_call.action.sources"]`.
    Search {
        query: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        queries: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sources: Option<Vec<WebSearchSource>>,
    },
    /// A page the gateway fetched.
    OpenPage { url: Option<String> },
    /// A search inside a page opened earlier in the same response.
    FindInPage { url: Option<String>, pattern: String },
}

/// `{"type":"url","url":…}`: one source a search returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "url")]
pub struct WebSearchSource {
    pub url: String,
}
