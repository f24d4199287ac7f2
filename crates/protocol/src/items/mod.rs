//! Items: the one representation of conversation history and response output.
//!
//! A request's `input` arrives in many accepted spellings ([`input::InputItemParam`]: string
//! content, messages without `type`, items without ids). [`input::InputItemParam::normalize`]
//! turns each into the canonical [`Item`], which is what the engine reasons over, what
//! `response.output` holds and what the store keeps. One shape in, one shape out: a stored item
//! reads back exactly as it was written.
//!
//! The canonical model is written one family per file (messages and their content parts, client
//! function calls, reasoning, compaction, and one file per tool kind's items) and named from here:
//! `items::McpCallItem`, like `items::Item` whose variants they are. [`input`] holds the accepted
//! input spellings and their normalisation.

mod code_interpreter;
mod compaction;
mod custom;
mod file_search;
mod function;
pub mod input;
mod local_shell;
mod mcp;
mod message;
mod reasoning;
mod web_search;

use serde::{Deserialize, Serialize};

pub use self::code_interpreter::{CodeInterpreterCallItem, CodeInterpreterOutput};
pub use self::compaction::CompactionItem;
pub use self::custom::{CustomToolCallItem, CustomToolCallOutputItem};
pub use self::file_search::{FileSearchCallItem, FileSearchResult};
pub use self::function::{FunctionCallItem, FunctionCallOutputItem, FunctionOutput};
pub use self::local_shell::{LocalShellAction, LocalShellCallItem, LocalShellCallOutputItem};
pub use self::mcp::{McpApprovalRequestItem, McpApprovalResponseItem, McpCallItem, McpListToolsItem, McpToolInfo};
pub use self::message::{ContentPart, FileContent, ImageDetail, InputFile, MessageItem, MessageRole};
pub use self::reasoning::{ReasoningItem, ReasoningText, SummaryText};
pub use self::web_search::{WebSearchAction, WebSearchCallItem, WebSearchSource};

/// A canonical history or output item (OpenAI's item shapes, ids always present).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item {
    Message(MessageItem),
    FunctionCall(FunctionCallItem),
    FunctionCallOutput(FunctionCallOutputItem),
    Reasoning(ReasoningItem),
    CodeInterpreterCall(CodeInterpreterCallItem),
    McpCall(McpCallItem),
    McpListTools(McpListToolsItem),
    McpApprovalRequest(McpApprovalRequestItem),
    McpApprovalResponse(McpApprovalResponseItem),
    WebSearchCall(WebSearchCallItem),
    FileSearchCall(FileSearchCallItem),
    CustomToolCall(CustomToolCallItem),
    CustomToolCallOutput(CustomToolCallOutputItem),
    LocalShellCall(LocalShellCallItem),
    LocalShellCallOutput(LocalShellCallOutputItem),
    Compaction(CompactionItem),
}

impl Item {
    /// The `input_file` parts of a message or a tool output, with their paths relative to the
    /// item (`content[1]`, `output[0]`).
    pub fn input_files(&self) -> Vec<(String, &InputFile)> {
        let (field, parts) = match self {
            Item::Message(m) => ("content", m.content.as_slice()),
            Item::FunctionCallOutput(FunctionCallOutputItem { output: FunctionOutput::Parts(p), .. })
            | Item::CustomToolCallOutput(CustomToolCallOutputItem { output: FunctionOutput::Parts(p), .. }) => {
                ("output", p.as_slice())
            }
            _ => return Vec::new(),
        };
        parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                ContentPart::InputFile(file) => Some((format!("{field}[{i}]"), file)),
                _ => None,
            })
            .collect()
    }

    /// [`Item::input_files`], to fill in what the model gets.
    pub fn input_files_mut(&mut self) -> Vec<(String, &mut InputFile)> {
        let (field, parts) = self.parts_mut();
        parts
            .iter_mut()
            .enumerate()
            .filter_map(|(i, p)| match p {
                ContentPart::InputFile(file) => Some((format!("{field}[{i}]"), file)),
                _ => None,
            })
            .collect()
    }

    /// The `input_image` parts of a message or a tool output, with their paths relative to the
    /// item (`content[1]`, `output[0]`): each one's `image_url` and what the model gets of it.
    pub fn input_images_mut(&mut self) -> Vec<(String, &str, &mut Option<String>)> {
        let (field, parts) = self.parts_mut();
        parts
            .iter_mut()
            .enumerate()
            .filter_map(|(i, p)| match p {
                ContentPart::InputImage { image_url, model_image_url, .. } => {
                    Some((format!("{field}[{i}]"), image_url.as_str(), model_image_url))
                }
                _ => None,
            })
            .collect()
    }

    /// The content parts of a message or a tool output, and the field that holds them.
    fn parts_mut(&mut self) -> (&'static str, &mut [ContentPart]) {
        match self {
            Item::Message(m) => ("content", m.content.as_mut_slice()),
            Item::FunctionCallOutput(FunctionCallOutputItem { output: FunctionOutput::Parts(p), .. })
            | Item::CustomToolCallOutput(CustomToolCallOutputItem { output: FunctionOutput::Parts(p), .. }) => {
                ("output", p.as_mut_slice())
            }
            _ => ("", &mut []),
        }
    }

    /// The item as a client sees it: without what the gateway keeps for the model only (an
    /// `input_file`'s `model_content`, an `input_image`'s `model_image_url`).
    pub fn client_view(mut self) -> Item {
        for (_, file) in self.input_files_mut() {
            file.model_content = None;
        }
        for (_, _, fetched) in self.input_images_mut() {
            *fetched = None;
        }
        if let Item::Compaction(c) = &mut self {
            c.model_summary = None;
        }
        self
    }

    /// The item's id.
    pub fn id(&self) -> &str {
        match self {
            Item::Message(m) => &m.id,
            Item::FunctionCall(f) => &f.id,
            Item::FunctionCallOutput(f) => &f.id,
            Item::Reasoning(r) => &r.id,
            Item::CodeInterpreterCall(c) => &c.id,
            Item::McpCall(m) => &m.id,
            Item::McpListTools(l) => &l.id,
            Item::McpApprovalRequest(r) => &r.id,
            Item::McpApprovalResponse(r) => &r.id,
            Item::WebSearchCall(w) => &w.id,
            Item::FileSearchCall(f) => &f.id,
            Item::CustomToolCall(c) => &c.id,
            Item::CustomToolCallOutput(c) => &c.id,
            Item::LocalShellCall(c) => &c.id,
            Item::LocalShellCallOutput(c) => &c.id,
            Item::Compaction(c) => &c.id,
        }
    }
}

/// Status of a gateway-executed tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    InProgress,
    Interpreting,
    Completed,
    Incomplete,
    Failed,
}

/// Lifecycle of an item (`in_progress` while streaming, `completed` when done).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Incomplete,
}

/// The `status` of a client tool call item sent without one.
fn completed() -> ItemStatus {
    ItemStatus::Completed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn items_round_trip_through_json() {
        let item = Item::Reasoning(ReasoningItem {
            id: "rs_1".into(),
            summary: vec![],
            content: vec![ReasoningText { text: "think".into() }],
            encrypted_content: None,
        });
        let v = serde_json::to_value(&item).unwrap();
        assert_eq!(
            v,
            json!({"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"think"}]})
        );
        assert_eq!(serde_json::from_value::<Item>(v).unwrap(), item);
    }
}
