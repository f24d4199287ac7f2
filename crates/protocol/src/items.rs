//! Items: the one representation of conversation history and response output.
//!
//! A request's `input` arrives in many accepted spellings ([`InputItemParam`]: string content,
//! messages without `type`, items without ids). [`InputItemParam::normalize`] turns each into the
//! canonical [`Item`], which is what the engine reasons over, what `response.output` holds and what
//! the store keeps. One shape in, one shape out: a stored item reads back exactly as it was written.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{IdKind, new_id};

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
    WebSearchCall(WebSearchCallItem),
    CustomToolCall(CustomToolCallItem),
    CustomToolCallOutput(CustomToolCallOutputItem),
    LocalShellCall(LocalShellCallItem),
    LocalShellCallOutput(LocalShellCallOutputItem),
}

impl Item {
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
            Item::WebSearchCall(w) => &w.id,
            Item::CustomToolCall(c) => &c.id,
            Item::CustomToolCallOutput(c) => &c.id,
            Item::LocalShellCall(c) => &c.id,
            Item::LocalShellCallOutput(c) => &c.id,
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

/// A `code_interpreter` call the gateway ran. All keys are always present (`outputs` is `null`
/// unless the request's `include` asks for them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeInterpreterCallItem {
    pub id: String,
    pub status: CallStatus,
    pub code: String,
    pub container_id: String,
    pub outputs: Option<Vec<CodeInterpreterOutput>>,
}

/// One output of a code interpreter call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CodeInterpreterOutput {
    /// Text the code printed (stdout, stderr) or the value of its last expression.
    Logs { logs: String },
    /// An image the code wrote, as a `data:image/png;base64,…` URL.
    Image { url: String },
}

/// An MCP tool call the gateway made. `output` holds the result of a completed call, `error`
/// the reason of a failed one; both keys are always present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpCallItem {
    pub id: String,
    pub server_label: String,
    /// The tool's real name on its server (not the mangled function name the model saw).
    pub name: String,
    pub arguments: String,
    pub status: CallStatus,
    #[serde(default)]
    pub output: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

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

/// The tools an MCP server offered, shown once per server per conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpListToolsItem {
    pub id: String,
    pub server_label: String,
    pub tools: Vec<McpToolInfo>,
    #[serde(default)]
    pub error: Option<String>,
}

/// One tool in an [`McpListToolsItem`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolInfo {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub input_schema: Value,
    #[serde(default)]
    pub annotations: Option<Value>,
}

/// A call of a client `custom` (freeform) tool: the client runs it, the gateway never does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomToolCallItem {
    #[serde(default = "custom_call_id")]
    pub id: String,
    pub call_id: String,
    pub name: String,
    /// The tool's raw input text.
    pub input: String,
    #[serde(default = "completed")]
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

/// A `local_shell` call: a command for the client to run on its machine (never run here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalShellCallItem {
    #[serde(default = "local_shell_call_id")]
    pub id: String,
    /// Older clients name the call by `id` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default = "completed")]
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

fn completed() -> ItemStatus {
    ItemStatus::Completed
}

fn exec() -> String {
    "exec".to_owned()
}

fn custom_call_id() -> String {
    new_id(IdKind::CustomToolCall)
}

fn local_shell_call_id() -> String {
    new_id(IdKind::LocalShellCall)
}

fn custom_output_id() -> String {
    new_id(IdKind::FunctionCallOutput)
}

/// Who speaks in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    User,
    Assistant,
    System,
    Developer,
}

/// Lifecycle of an item (`in_progress` while streaming, `completed` when done).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Incomplete,
}

/// A message with typed content parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageItem {
    pub id: String,
    pub role: MessageRole,
    pub status: ItemStatus,
    pub content: Vec<ContentPart>,
}

/// How closely the model should look at an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageDetail {
    Low,
    High,
    #[default]
    Auto,
}

/// One part of a message's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    InputText {
        text: String,
    },
    InputImage {
        /// A URL or a `data:` URL. `file_id` references are not supported (no files API).
        image_url: String,
        #[serde(default)]
        detail: ImageDetail,
    },
    OutputText {
        text: String,
        #[serde(default)]
        annotations: Vec<Value>,
        #[serde(default)]
        logprobs: Vec<Value>,
    },
    Refusal {
        refusal: String,
    },
}

impl ContentPart {
    /// An `output_text` part with empty annotations and logprobs, as the gateway emits them.
    pub fn output_text(text: impl Into<String>) -> Self {
        ContentPart::OutputText { text: text.into(), annotations: Vec::new(), logprobs: Vec::new() }
    }
}

/// A tool call the model made to a client-executed function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallItem {
    pub id: String,
    pub call_id: String,
    pub name: String,
    /// The `namespace` tool the function belongs to, for functions declared inside one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The arguments as the JSON text the model produced.
    pub arguments: String,
    pub status: ItemStatus,
}

/// The result of a function call, sent by the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallOutputItem {
    pub id: String,
    pub call_id: String,
    pub output: FunctionOutput,
    pub status: ItemStatus,
}

/// A function result: plain text, or content parts (text and images).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FunctionOutput {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// The model's reasoning for one model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningItem {
    pub id: String,
    #[serde(default)]
    pub summary: Vec<SummaryText>,
    #[serde(default)]
    pub content: Vec<ReasoningText>,
    /// Opaque reasoning state a stateless client hands back; kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
}

impl ReasoningItem {
    /// The reasoning as one text: the raw reasoning when present, else the summaries.
    pub fn text(&self) -> String {
        let raw: Vec<&str> = self.content.iter().map(|c| c.text.as_str()).collect();
        if raw.iter().any(|t| !t.is_empty()) {
            return raw.concat();
        }
        self.summary.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("\n\n")
    }
}

/// `{"type":"summary_text","text":…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "summary_text")]
pub struct SummaryText {
    pub text: String,
}

/// `{"type":"reasoning_text","text":…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "reasoning_text")]
pub struct ReasoningText {
    pub text: String,
}

// ---------------------------------------------------------------------------------------------
// Accepted input spellings
// ---------------------------------------------------------------------------------------------

/// An input item as a client may send it: ids and statuses optional, string or part content.
/// Parse it with [`InputItemParam::from_value`], which dispatches on `type` itself so that a
/// wrongly typed field is reported with its exact path (serde's tagged enums lose the path).
#[derive(Debug, Clone)]
pub enum InputItemParam {
    Message(MessageParam),
    FunctionCall(FunctionCallParam),
    FunctionCallOutput(FunctionCallOutputParam),
    Reasoning(ReasoningParam),
    /// A tool item replayed by a stateless client (a gateway tool's, or a custom or local
    /// shell call and its output); taken as it is.
    Hosted(Item),
}

#[derive(Debug, Clone, Deserialize)]
pub struct MessageParam {
    pub id: Option<String>,
    pub role: MessageRole,
    pub content: MessageContentParam,
    pub status: Option<ItemStatus>,
}

/// Message content: a string, or a list of parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum MessageContentParam {
    Text(String),
    Parts(Vec<ContentPartParam>),
}

/// A content part as sent (an `input_image` may also carry a `file_id`, which we refuse).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPartParam {
    InputText {
        text: String,
    },
    InputImage {
        image_url: Option<String>,
        file_id: Option<String>,
        #[serde(default)]
        detail: Option<ImageDetail>,
    },
    OutputText {
        text: String,
        #[serde(default)]
        annotations: Vec<Value>,
        #[serde(default)]
        logprobs: Vec<Value>,
    },
    Refusal {
        refusal: String,
    },
}

#[derive(Debug, Clone, Deserialize)]
pub struct FunctionCallParam {
    pub id: Option<String>,
    pub call_id: String,
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub arguments: String,
    pub status: Option<ItemStatus>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FunctionCallOutputParam {
    pub id: Option<String>,
    pub call_id: String,
    pub output: FunctionOutputParam,
    pub status: Option<ItemStatus>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum FunctionOutputParam {
    Text(String),
    Parts(Vec<ContentPartParam>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReasoningParam {
    pub id: Option<String>,
    #[serde(default)]
    pub summary: Vec<SummaryText>,
    #[serde(default)]
    pub content: Option<Vec<ReasoningText>>,
    pub encrypted_content: Option<String>,
}

/// Why an input item could not be normalized: a message and the field (relative to the item).
#[derive(Debug, Clone, PartialEq)]
pub struct ItemError {
    pub field: String,
    pub message: String,
}

impl ItemError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ItemError { field: field.into(), message: message.into() }
    }
}

fn normalize_parts(parts: Vec<ContentPartParam>, field: &str) -> Result<Vec<ContentPart>, ItemError> {
    parts
        .into_iter()
        .enumerate()
        .map(|(i, part)| match part {
            ContentPartParam::InputText { text } => Ok(ContentPart::InputText { text }),
            ContentPartParam::OutputText { text, annotations, logprobs } => {
                Ok(ContentPart::OutputText { text, annotations, logprobs })
            }
            ContentPartParam::Refusal { refusal } => Ok(ContentPart::Refusal { refusal }),
            ContentPartParam::InputImage { image_url: Some(url), detail, .. } if !url.is_empty() => {
                Ok(ContentPart::InputImage { image_url: url, detail: detail.unwrap_or_default() })
            }
            ContentPartParam::InputImage { file_id: Some(_), .. } => Err(ItemError::new(
                format!("{field}[{i}].file_id"),
                "input_image.file_id is not supported (this gateway has no files API); send image_url.",
            )),
            ContentPartParam::InputImage { .. } => {
                Err(ItemError::new(format!("{field}[{i}].image_url"), "input_image requires a non-empty image_url."))
            }
        })
        .collect()
}

impl InputItemParam {
    /// Parse one item. Messages may omit `"type":"message"`. Errors name the field relative to
    /// the item (`arguments`, `content[0].text`, `type`).
    pub fn from_value(value: Value) -> Result<Self, ItemError> {
        fn typed<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ItemError> {
            serde_path_to_error::deserialize(value).map_err(|e| {
                let api = crate::ApiError::from_path_error("", e);
                ItemError::new(api.param.unwrap_or_default(), api.message)
            })
        }
        let Some(obj) = value.as_object() else {
            return Err(ItemError::new("", "Each input item must be a JSON object."));
        };
        let kind = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            None if obj.contains_key("role") => "message",
            None => {
                return Err(ItemError::new("type", "Input items need a 'type' (or a 'role' for messages)."));
            }
            Some(_) => return Err(ItemError::new("type", "'type' must be a string.")),
        };
        match kind {
            "message" => typed(value).map(InputItemParam::Message),
            "function_call" => typed(value).map(InputItemParam::FunctionCall),
            "function_call_output" => typed(value).map(InputItemParam::FunctionCallOutput),
            "reasoning" => typed(value).map(InputItemParam::Reasoning),
            "code_interpreter_call"
            | "mcp_call"
            | "mcp_list_tools"
            | "web_search_call"
            | "custom_tool_call"
            | "custom_tool_call_output"
            | "local_shell_call"
            | "local_shell_call_output" => typed(value).map(InputItemParam::Hosted),
            "item_reference" => Err(ItemError::new(
                "type",
                "item_reference input items are not supported; send the item itself or use previous_response_id.",
            )),
            other => Err(ItemError::new(
                "type",
                format!(
                    "Unsupported input item type '{other}'. Supported: message, function_call, \
                     function_call_output, reasoning, code_interpreter_call, mcp_call, mcp_list_tools, \
                     web_search_call, custom_tool_call(_output), local_shell_call(_output)."
                ),
            )),
        }
    }

    /// The canonical item, with ids minted where the client gave none.
    pub fn normalize(self) -> Result<Item, ItemError> {
        Ok(match self {
            InputItemParam::Message(m) => {
                let content = match m.content {
                    MessageContentParam::Text(text) if m.role == MessageRole::Assistant => {
                        vec![ContentPart::output_text(text)]
                    }
                    MessageContentParam::Text(text) => vec![ContentPart::InputText { text }],
                    MessageContentParam::Parts(parts) => normalize_parts(parts, "content")?,
                };
                if m.role != MessageRole::User
                    && let Some(i) = content.iter().position(|p| matches!(p, ContentPart::InputImage { .. }))
                {
                    return Err(ItemError::new(
                        format!("content[{i}]"),
                        "input_image parts are only accepted in user messages.",
                    ));
                }
                Item::Message(MessageItem {
                    id: m.id.unwrap_or_else(|| new_id(IdKind::Message)),
                    role: m.role,
                    status: m.status.unwrap_or(ItemStatus::Completed),
                    content,
                })
            }
            InputItemParam::FunctionCall(f) => Item::FunctionCall(FunctionCallItem {
                id: f.id.unwrap_or_else(|| new_id(IdKind::FunctionCall)),
                call_id: f.call_id,
                name: f.name,
                namespace: f.namespace,
                arguments: f.arguments,
                status: f.status.unwrap_or(ItemStatus::Completed),
            }),
            InputItemParam::FunctionCallOutput(f) => Item::FunctionCallOutput(FunctionCallOutputItem {
                id: f.id.unwrap_or_else(|| new_id(IdKind::FunctionCallOutput)),
                call_id: f.call_id,
                output: match f.output {
                    FunctionOutputParam::Text(t) => FunctionOutput::Text(t),
                    FunctionOutputParam::Parts(p) => FunctionOutput::Parts(normalize_parts(p, "output")?),
                },
                status: f.status.unwrap_or(ItemStatus::Completed),
            }),
            InputItemParam::Hosted(item) => item,
            InputItemParam::Reasoning(r) => Item::Reasoning(ReasoningItem {
                id: r.id.unwrap_or_else(|| new_id(IdKind::Reasoning)),
                summary: r.summary,
                content: r.content.unwrap_or_default(),
                encrypted_content: r.encrypted_content,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> InputItemParam {
        InputItemParam::from_value(v).expect("valid item")
    }

    #[test]
    fn wrong_field_types_report_their_path() {
        let err = InputItemParam::from_value(
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":1}]}),
        )
        .unwrap_err();
        assert!(err.field.starts_with("content"), "{err:?}");
        let err = InputItemParam::from_value(json!({"type":"nope"})).unwrap_err();
        assert_eq!(err.field, "type");
    }

    #[test]
    fn string_user_content_becomes_one_input_text_part() {
        let item = parse(json!({"type":"message","role":"user","content":"hi"})).normalize().unwrap();
        let Item::Message(m) = item else { panic!("not a message") };
        assert!(m.id.starts_with("msg_"));
        assert_eq!(m.content, vec![ContentPart::InputText { text: "hi".into() }]);
        assert_eq!(m.status, ItemStatus::Completed);
    }

    #[test]
    fn string_assistant_content_becomes_output_text() {
        let item = parse(json!({"type":"message","role":"assistant","content":"ok"})).normalize().unwrap();
        let Item::Message(m) = item else { panic!("not a message") };
        assert_eq!(m.content, vec![ContentPart::output_text("ok")]);
    }

    #[test]
    fn client_ids_are_kept() {
        let item = parse(json!({"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}"}))
            .normalize()
            .unwrap();
        assert_eq!(item.id(), "fc_1");
    }

    #[test]
    fn rejects_file_id_images() {
        let err = parse(json!({"type":"message","role":"user","content":[{"type":"input_image","file_id":"f"}]}))
            .normalize()
            .unwrap_err();
        assert_eq!(err.field, "content[0].file_id");
    }

    #[test]
    fn rejects_images_outside_user_messages() {
        let err =
            parse(json!({"type":"message","role":"system","content":[{"type":"input_image","image_url":"data:x"}]}))
                .normalize()
                .unwrap_err();
        assert_eq!(err.field, "content[0]");
    }

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

    #[test]
    fn reasoning_text_falls_back_to_summary() {
        let r = ReasoningItem {
            id: "rs".into(),
            summary: vec![SummaryText { text: "a".into() }, SummaryText { text: "b".into() }],
            content: vec![],
            encrypted_content: None,
        };
        assert_eq!(r.text(), "a\n\nb");
    }
}
