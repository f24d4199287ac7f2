//! `custom_tool_call` items and their outputs: calls of a client `custom` tool, which the client
//! runs.

use serde::{Deserialize, Serialize};

use super::{FunctionOutput, ItemStatus};
use crate::ids::{IdKind, new_id};

/// A call of a client `custom` (freeform) tool: the client runs it, the gateway never does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomToolCallItem {
    #[serde(default = "custom_call_id")]
    pub id: String,
    pub call_id: String,
    pub name: String,
    /// The tool's raw input text.
    pub input: String,
    #[serde(default = "super::completed")]
    pub status: ItemStatus,
}

/// The client's result of a `custom_tool_call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomToolCallOutputItem {
    #[serde(default = "custom_output_id")]
    pub id: String,
    pub call_id: String,
    pub output: FunctionOutput,
}

fn custom_call_id() -> String {
    new_id(IdKind::CustomToolCall)
}

fn custom_output_id() -> String {
    new_id(IdKind::FunctionCallOutput)
}
