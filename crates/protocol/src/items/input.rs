//! The accepted input spellings of items ([`InputItemParam`]: ids and statuses optional, string
//! or part content, messages without `type`) and their normalisation into the canonical [`Item`].

use serde::Deserialize;
use serde_json::Value;

use super::{
    CompactionItem, ContentPart, FunctionCallItem, FunctionCallOutputItem, FunctionOutput, ImageDetail, InputFile,
    Item, ItemStatus, MessageItem, MessageRole, ReasoningItem, ReasoningText, SummaryText,
};
use crate::error::{ApiError, describe_serde, join_path, json_kind};
use crate::ids::{IdKind, new_id};

/// An input item as a client may send it: ids and statuses optional, string or part content.
/// Parse it with [`InputItemParam::from_value`], which dispatches on `type` itself (items, and
/// the content parts inside them), so that every error names its exact path and the types that
/// would have been accepted.
#[derive(Debug, Clone)]
pub enum InputItemParam {
    Message(MessageParam),
    FunctionCall(FunctionCallParam),
    FunctionCallOutput(FunctionCallOutputParam),
    Reasoning(ReasoningParam),
    Compaction(CompactionParam),
    /// A tool item replayed by a stateless client (a gateway tool's, or a custom or local
    /// shell call and its output); taken as it is.
    Hosted(Item),
}

#[derive(Debug, Clone)]
pub struct MessageParam {
    pub id: Option<String>,
    pub role: MessageRole,
    pub content: MessageContentParam,
    pub status: Option<ItemStatus>,
}

/// A message's fields before its content is parsed part by part.
#[derive(Deserialize)]
struct MessageFields {
    id: Option<String>,
    role: MessageRole,
    content: Value,
    status: Option<ItemStatus>,
}

/// Message content: a string, or a list of parts.
#[derive(Debug, Clone)]
pub enum MessageContentParam {
    Text(String),
    Parts(Vec<ContentPartParam>),
}

/// A content part as sent (an `input_image` may also carry a `file_id`, which we refuse: an
/// image is sent by URL; an `input_file` may name an uploaded file by `file_id`).
#[derive(Debug, Clone)]
pub enum ContentPartParam {
    InputText { text: String },
    InputImage { image_url: Option<String>, file_id: Option<String>, detail: Option<ImageDetail> },
    InputFile(InputFileParam),
    OutputText { text: String, annotations: Vec<Value>, logprobs: Vec<Value> },
    Refusal { refusal: String },
}

/// `{"type":"input_file",…}` as sent.
#[derive(Debug, Clone, Deserialize)]
pub struct InputFileParam {
    #[serde(default)]
    pub filename: Option<String>,
    #[serde(default)]
    pub file_data: Option<String>,
    #[serde(default)]
    pub file_url: Option<String>,
    #[serde(default)]
    pub file_id: Option<String>,
}

/// The content part types a message may hold.
pub const CONTENT_PART_TYPES: &[&str] = &["input_text", "input_image", "input_file", "output_text", "refusal"];

/// The input item types this gateway accepts.
pub const INPUT_ITEM_TYPES: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "code_interpreter_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "web_search_call",
    "file_search_call",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "compaction",
];

#[derive(Deserialize)]
struct TextFields {
    text: String,
}

#[derive(Deserialize)]
struct ImageFields {
    #[serde(default)]
    image_url: Option<String>,
    #[serde(default)]
    file_id: Option<String>,
    #[serde(default)]
    detail: Option<ImageDetail>,
}

#[derive(Deserialize)]
struct OutputTextFields {
    text: String,
    #[serde(default)]
    annotations: Vec<Value>,
    #[serde(default)]
    logprobs: Vec<Value>,
}

#[derive(Deserialize)]
struct RefusalFields {
    refusal: String,
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

#[derive(Debug, Clone)]
pub struct FunctionCallOutputParam {
    pub id: Option<String>,
    pub call_id: String,
    pub output: FunctionOutputParam,
    pub status: Option<ItemStatus>,
}

/// A function_call_output's fields before its output is parsed.
#[derive(Deserialize)]
struct FunctionCallOutputFields {
    id: Option<String>,
    call_id: String,
    output: Value,
    status: Option<ItemStatus>,
}

#[derive(Debug, Clone)]
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

/// `{"type":"compaction",…}` as a client sends it back: the blob, and its id when it has one.
/// Whatever else it carries is ignored (the summary comes from the blob alone).
#[derive(Debug, Clone, Deserialize)]
pub struct CompactionParam {
    pub id: Option<String>,
    pub encrypted_content: String,
    #[serde(default)]
    pub created_by: Option<String>,
}

/// Why an input item could not be parsed or normalized: the field (relative to the item) and
/// what is wrong with it, without the path (the caller knows where the item is).
#[derive(Debug, Clone, PartialEq)]
pub struct ItemError {
    pub field: String,
    pub message: String,
    /// The field is required and absent.
    pub missing: bool,
}

impl ItemError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ItemError { field: field.into(), message: message.into(), missing: false }
    }

    /// The 400 for this error in the item at `prefix` (e.g. `input[2]`): `param` is the full
    /// path, and the message starts with it.
    pub fn at(self, prefix: &str) -> ApiError {
        let param = join_path(prefix, &self.field);
        if self.missing {
            return ApiError::invalid(param.clone(), format!("Missing required parameter: '{param}'."))
                .with_code("missing_required_parameter");
        }
        let message = self.message.trim_end_matches('.');
        ApiError::invalid(param.clone(), format!("{param}: {message}."))
    }
}

/// Deserialize `value` as `T`; an error names its path under `base` (relative to the item).
fn typed<T: serde::de::DeserializeOwned>(value: Value, base: &str) -> Result<T, ItemError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = join_path(base, if path == "." { "" } else { &path });
        match describe_serde(&e.into_inner().to_string()) {
            (Some(field), _) => ItemError { field: join_path(&at, &field), message: String::new(), missing: true },
            (None, detail) => ItemError::new(at, detail),
        }
    })
}

/// The `type` of an object that dispatches on it; `what` names the object in messages.
fn type_tag<'v>(value: &'v Value, field: &str, what: &str) -> Result<&'v str, ItemError> {
    let Some(object) = value.as_object() else {
        return Err(ItemError::new(field, format!("expected {what} (an object), got {}", json_kind(value))));
    };
    match object.get("type") {
        Some(Value::String(kind)) => Ok(kind),
        None => Err(ItemError { field: join_path(field, "type"), message: String::new(), missing: true }),
        Some(other) => {
            Err(ItemError::new(join_path(field, "type"), format!("expected a string, got {}", json_kind(other))))
        }
    }
}

/// Message content or a function output: a string, or an array of content parts.
fn parse_content(value: Value, field: &str) -> Result<MessageContentParam, ItemError> {
    match value {
        Value::String(text) => Ok(MessageContentParam::Text(text)),
        Value::Array(parts) => parts
            .into_iter()
            .enumerate()
            .map(|(i, part)| parse_part(part, &format!("{field}[{i}]")))
            .collect::<Result<Vec<_>, _>>()
            .map(MessageContentParam::Parts),
        other => Err(ItemError::new(
            field,
            format!("expected a string or an array of content parts, got {}", json_kind(&other)),
        )),
    }
}

fn parse_part(value: Value, field: &str) -> Result<ContentPartParam, ItemError> {
    let kind = type_tag(&value, field, "a content part")?.to_owned();
    match kind.as_str() {
        "input_text" => typed::<TextFields>(value, field).map(|p| ContentPartParam::InputText { text: p.text }),
        "input_image" => typed::<ImageFields>(value, field).map(|p| ContentPartParam::InputImage {
            image_url: p.image_url,
            file_id: p.file_id,
            detail: p.detail,
        }),
        "input_file" => typed::<InputFileParam>(value, field).map(ContentPartParam::InputFile),
        "output_text" => typed::<OutputTextFields>(value, field).map(|p| ContentPartParam::OutputText {
            text: p.text,
            annotations: p.annotations,
            logprobs: p.logprobs,
        }),
        "refusal" => typed::<RefusalFields>(value, field).map(|p| ContentPartParam::Refusal { refusal: p.refusal }),
        other => Err(ItemError::new(
            field,
            format!("unknown content part type '{}'; expected one of {}", clip(other), CONTENT_PART_TYPES.join(", ")),
        )),
    }
}

/// At most 64 characters of a client's value in a message.
fn clip(value: &str) -> String {
    if value.chars().count() <= 64 {
        value.to_owned()
    } else {
        format!("{}…", value.chars().take(64).collect::<String>())
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
                Ok(ContentPart::InputImage {
                    image_url: url,
                    detail: detail.unwrap_or_default(),
                    model_image_url: None,
                })
            }
            ContentPartParam::InputImage { file_id: Some(_), .. } => Err(ItemError::new(
                format!("{field}[{i}].file_id"),
                "input_image.file_id is not supported; send image_url (or the file as an input_file with file_id).",
            )),
            ContentPartParam::InputImage { .. } => {
                Err(ItemError::new(format!("{field}[{i}].image_url"), "input_image requires a non-empty image_url."))
            }
            ContentPartParam::InputFile(file) => {
                normalize_file(file).map_err(|message| ItemError::new(format!("{field}[{i}]"), message))
            }
        })
        .collect()
}

/// An `input_file` part with exactly one source this gateway can read: `file_data`, `file_url`
/// or an uploaded file's `file_id`.
fn normalize_file(file: InputFileParam) -> Result<ContentPart, String> {
    let sources = [file.file_data.is_some(), file.file_url.is_some(), file.file_id.is_some()];
    match sources.iter().filter(|given| **given).count() {
        0 => Err("an input_file needs file_data (base64 or a data: URL), file_url or file_id".to_owned()),
        1 => Ok(ContentPart::InputFile(InputFile {
            filename: file.filename,
            file_data: file.file_data,
            file_url: file.file_url,
            file_id: file.file_id,
            model_content: None,
        })),
        _ => Err("send one of file_data, file_url or file_id in an input_file, not several".to_owned()),
    }
}

impl InputItemParam {
    /// Parse one item. Messages may omit `"type":"message"`. Errors name the field relative to
    /// the item (`arguments`, `content[0].text`, `type`).
    pub fn from_value(value: Value) -> Result<Self, ItemError> {
        let Some(obj) = value.as_object() else {
            return Err(ItemError::new("", format!("expected an input item (an object), got {}", json_kind(&value))));
        };
        let kind = match obj.get("type") {
            Some(Value::String(t)) => t.as_str(),
            None if obj.contains_key("role") => "message",
            None => {
                return Err(ItemError::new("type", "input items need a 'type' (or a 'role' for messages)"));
            }
            Some(other) => return Err(ItemError::new("type", format!("expected a string, got {}", json_kind(other)))),
        };
        match kind {
            "message" => {
                let fields: MessageFields = typed(value, "")?;
                Ok(InputItemParam::Message(MessageParam {
                    id: fields.id,
                    role: fields.role,
                    content: parse_content(fields.content, "content")?,
                    status: fields.status,
                }))
            }
            "function_call" => typed(value, "").map(InputItemParam::FunctionCall),
            "function_call_output" => {
                let fields: FunctionCallOutputFields = typed(value, "")?;
                let output = match parse_content(fields.output, "output")? {
                    MessageContentParam::Text(text) => FunctionOutputParam::Text(text),
                    MessageContentParam::Parts(parts) => FunctionOutputParam::Parts(parts),
                };
                Ok(InputItemParam::FunctionCallOutput(FunctionCallOutputParam {
                    id: fields.id,
                    call_id: fields.call_id,
                    output,
                    status: fields.status,
                }))
            }
            "reasoning" => typed(value, "").map(InputItemParam::Reasoning),
            "compaction" => typed(value, "").map(InputItemParam::Compaction),
            "code_interpreter_call" => typed(value, "").map(Item::CodeInterpreterCall).map(InputItemParam::Hosted),
            "mcp_call" => typed(value, "").map(Item::McpCall).map(InputItemParam::Hosted),
            "mcp_list_tools" => typed(value, "").map(Item::McpListTools).map(InputItemParam::Hosted),
            "mcp_approval_request" => typed(value, "").map(Item::McpApprovalRequest).map(InputItemParam::Hosted),
            "mcp_approval_response" => typed(value, "").map(Item::McpApprovalResponse).map(InputItemParam::Hosted),
            "web_search_call" => typed(value, "").map(Item::WebSearchCall).map(InputItemParam::Hosted),
            "file_search_call" => typed(value, "").map(Item::FileSearchCall).map(InputItemParam::Hosted),
            "custom_tool_call" => typed(value, "").map(Item::CustomToolCall).map(InputItemParam::Hosted),
            "custom_tool_call_output" => typed(value, "").map(Item::CustomToolCallOutput).map(InputItemParam::Hosted),
            "local_shell_call" => typed(value, "").map(Item::LocalShellCall).map(InputItemParam::Hosted),
            "local_shell_call_output" => typed(value, "").map(Item::LocalShellCallOutput).map(InputItemParam::Hosted),
            "item_reference" => Err(ItemError::new(
                "type",
                "item_reference input items are not supported; send the item itself or use previous_response_id",
            )),
            other => Err(ItemError::new(
                "type",
                format!("unknown item type '{}'; expected one of {}", clip(other), INPUT_ITEM_TYPES.join(", ")),
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
                if m.role != MessageRole::User {
                    let user_only = content.iter().enumerate().find_map(|(i, p)| match p {
                        ContentPart::InputImage { .. } => Some((i, "input_image")),
                        ContentPart::InputFile(_) => Some((i, "input_file")),
                        _ => None,
                    });
                    if let Some((i, kind)) = user_only {
                        return Err(ItemError::new(
                            format!("content[{i}]"),
                            format!("{kind} parts are only accepted in user messages."),
                        ));
                    }
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
            InputItemParam::Compaction(c) => Item::Compaction(CompactionItem {
                id: c.id.unwrap_or_else(|| new_id(IdKind::Compaction)),
                encrypted_content: c.encrypted_content,
                created_by: c.created_by,
                model_summary: None,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::items::{CallStatus, FileContent, McpCallItem};
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
    fn content_parts_are_dispatched_by_type_with_paths() {
        let err = InputItemParam::from_value(
            json!({"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_foo"}]}),
        )
        .unwrap_err();
        assert_eq!(err.field, "content[1]");
        assert_eq!(
            err.clone().at("input[0]").message,
            "input[0].content[1]: unknown content part type 'input_foo'; expected one of input_text, input_image, \
             input_file, output_text, refusal."
        );
        let err =
            InputItemParam::from_value(json!({"role":"user","content":[{"type":"input_text","text":1}]})).unwrap_err();
        assert_eq!(
            (err.field.as_str(), err.message.as_str()),
            ("content[0].text", "expected a string, got the number 1")
        );
        let err = InputItemParam::from_value(json!({"role":"user","content":7})).unwrap_err();
        assert_eq!(err.message, "expected a string or an array of content parts, got a number");
        let err =
            InputItemParam::from_value(json!({"type":"custom_tool_call_output","call_id":"c","output":5})).unwrap_err();
        assert_eq!(err.field, "output");
        assert!(!err.message.contains("untagged"), "{err:?}");
    }

    #[test]
    fn input_files_need_one_readable_source_and_are_kept_as_sent() {
        let file = |part: Value| parse(json!({"role":"user","content":[part]})).normalize();
        let item = file(json!({"type":"input_file","file_id":"file-1"})).unwrap();
        let Item::Message(m) = &item else { panic!() };
        assert_eq!(serde_json::to_value(&m.content[0]).unwrap(), json!({"type":"input_file","file_id":"file-1"}));
        let err = file(json!({"type":"input_file","file_id":"file-1","file_url":"https://x"})).unwrap_err();
        assert_eq!(err.field, "content[0]");
        assert!(err.message.contains("not several"), "{err:?}");
        assert!(file(json!({"type":"input_file","filename":"a.txt"})).is_err());
        assert!(file(json!({"type":"input_file","file_data":"x","file_url":"https://x"})).is_err());
        let item = file(json!({"type":"input_file","filename":"a.txt","file_data":"aGk="})).unwrap();
        let Item::Message(m) = &item else { panic!() };
        assert_eq!(
            serde_json::to_value(&m.content[0]).unwrap(),
            json!({"type":"input_file","filename":"a.txt","file_data":"aGk="})
        );
        let err = parse(json!({"role":"system","content":[{"type":"input_file","file_url":"https://x/a.pdf"}]}))
            .normalize()
            .unwrap_err();
        assert_eq!(err.field, "content[0]");
    }

    #[test]
    fn model_content_is_stored_but_never_shown() {
        let mut item =
            parse(json!({"role":"user","content":[{"type":"input_file","filename":"a.txt","file_data":"aGk="}]}))
                .normalize()
                .unwrap();
        for (_, file) in item.input_files_mut() {
            file.model_content = Some(FileContent::Text { text: "hi".into() });
        }
        let stored = serde_json::to_value(&item).unwrap();
        assert_eq!(stored["content"][0]["model_content"], json!({"type":"text","text":"hi"}));
        assert_eq!(serde_json::from_value::<Item>(stored).unwrap(), item);
        let shown = serde_json::to_value(item.client_view()).unwrap();
        assert_eq!(shown["content"][0], json!({"type":"input_file","filename":"a.txt","file_data":"aGk="}));
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
    fn compaction_items_mint_an_id_keep_the_blob_and_hide_the_summary() {
        let item = parse(json!({"type":"compaction","encrypted_content":"rgw1c.k.AAAA","summary":"forged"}))
            .normalize()
            .unwrap();
        let Item::Compaction(mut c) = item else { panic!("not a compaction item") };
        assert!(c.id.starts_with("cmp_"), "{}", c.id);
        assert_eq!((c.encrypted_content.as_str(), c.model_summary.as_deref()), ("rgw1c.k.AAAA", None));
        c.model_summary = Some("the summary".into());
        let stored = serde_json::to_value(Item::Compaction(c.clone())).unwrap();
        assert_eq!(stored["model_summary"], "the summary");
        assert_eq!(serde_json::from_value::<Item>(stored).unwrap(), Item::Compaction(c.clone()));
        let shown = serde_json::to_value(Item::Compaction(c).client_view()).unwrap();
        assert_eq!(shown.as_object().unwrap().keys().collect::<Vec<_>>(), ["type", "id", "encrypted_content"]);
        let err = InputItemParam::from_value(json!({"type":"compaction","id":"cmp_1"})).unwrap_err();
        assert_eq!(err.field, "encrypted_content");
    }

    #[test]
    fn mcp_approval_items_are_accepted_as_input() {
        let request = parse(json!({"type":"mcp_approval_request","id":"mcpr_1","server_label":"docs",
            "name":"search","arguments":"{\"q\":\"x\"}"}))
        .normalize()
        .unwrap();
        assert!(matches!(&request, Item::McpApprovalRequest(r) if r.server_label == "docs" && r.name == "search"));
        let answer = parse(json!({"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":false,
            "reason":"not now"}))
        .normalize()
        .unwrap();
        let Item::McpApprovalResponse(a) = &answer else { panic!("{answer:?}") };
        assert!(a.id.starts_with("mcpa_") && !a.approve && a.reason.as_deref() == Some("not now"), "{a:?}");
        let err = InputItemParam::from_value(json!({"type":"mcp_approval_response","approval_request_id":"mcpr_1"}))
            .unwrap_err();
        assert!(err.field == "approve" && err.missing, "{err:?}");
        let call = serde_json::to_value(Item::McpCall(McpCallItem {
            id: "mcp_1".into(),
            server_label: "docs".into(),
            name: "search".into(),
            arguments: "{}".into(),
            status: CallStatus::Completed,
            output: Some("ok".into()),
            error: None,
            approval_request_id: Some("mcpr_1".into()),
        }))
        .unwrap();
        assert_eq!(call["approval_request_id"], "mcpr_1");
    }
}
