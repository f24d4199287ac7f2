//! `file_search_call` items: the queries a search ran, what it found, and what the model was given.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::CallStatus;

/// A `file_search` call the gateway ran: its `queries`, its `results` (clients see them only with
/// `include: ["file_search_call.results"]`, else `null`) and — kept for the conversation, never
/// shown to clients — the text the model was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSearchCallItem {
    pub id: String,
    /// `in_progress` while it runs; `completed`, or `failed` when the search could not run.
    pub status: CallStatus,
    #[serde(default)]
    pub queries: Vec<String>,
    /// The results the model was given, best first; stored whole, shown only when `include` asks.
    #[serde(default)]
    pub results: Option<Vec<FileSearchResult>>,
    /// The tool result text the model saw, so a continuation replays it exactly. The engine
    /// removes it from every item a client sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_result: Option<String>,
}

/// One result of a `file_search_call`: a file's matching text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSearchResult {
    pub file_id: String,
    pub filename: String,
    /// 0..=1, higher is better.
    pub score: f64,
    /// The file's attributes in its vector store (`{}` without any).
    #[serde(default)]
    pub attributes: Value,
    /// The matching text the model was given.
    pub text: String,
}
