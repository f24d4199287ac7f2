//! `local_shell_call` items and their outputs: commands for the client to run on its machine.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ItemStatus;
use crate::ids::{IdKind, new_id};

/// A `local_shell` call: a command for the client to run on its machine (never run here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalShellCallItem {
    #[serde(default = "local_shell_call_id")]
    pub id: String,
    /// Older clients name the call by `id` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default = "super::completed")]
    pub status: ItemStatus,
    /// Boxed: the largest item body, and items travel inside every event.
    pub action: Box<LocalShellAction>,
}

/// `{"type":"exec","command":[…],…}`: what a `local_shell_call` asks the client to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalShellAction {
    #[serde(rename = "type", default = "exec")]
    pub kind: String,
    pub command: Vec<String>,
    #[serde(default)]
    pub env: serde_json::Map<String, Value>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub working_directory: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
}

/// The client's result of a `local_shell_call`, naming the call by `call_id` (or by the call's
/// `id`, as the reference API's shape does).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalShellCallOutputItem {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
}

fn exec() -> String {
    "exec".to_owned()
}

fn local_shell_call_id() -> String {
    new_id(IdKind::LocalShellCall)
}
