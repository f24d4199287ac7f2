//! `compaction` items: a sealed summary that stands for the history before it.

use serde::{Deserialize, Serialize};

/// A compacted window's summary of the conversation before it: `encrypted_content` is the summary
/// sealed by the gateway (clients can neither read nor forge it). In the history the model sees,
/// the latest compaction item stands for everything before it except the user messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionItem {
    pub id: String,
    pub encrypted_content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    /// The summary the blob carries, opened once when the item arrived (or kept from when it was
    /// made), so history is built without opening it again. Stored with the item; never shown
    /// to clients (see [`Item::client_view`](super::Item::client_view)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_summary: Option<String>,
}
