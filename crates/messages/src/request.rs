//! A Messages request (`POST /v1/messages`) as it arrives: parsed into [`MessagesRequest`] with
//! every error a 400 in our own words that names its field (`messages[2].content[0].source`).
//!
//! Content blocks and sources dispatch on their `type` here, so an unknown or misspelt type is
//! refused with the types that would have been accepted. Server tools, `mcp_servers` and the
//! blocks of their earlier calls are parsed by [`crate::server_tools`]. Fields the gateway has no
//! use for are accepted and ignored, never refused: `cache_control` on any block, tool or system
//! text, `citations`, `context_management`, `service_tier`, `container`, and top-level fields
//! Anthropic adds later. A tool's `defer_loading` is kept: see [`crate::into_engine`] for what it
//! changes.

use std::fmt::Display;

use respgw_protocol::ApiError;
use respgw_protocol::error::{join_path, json_kind};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::server_tools::mcp::{McpServer, parse_servers};
use crate::server_tools::{self, REPLAYED_BLOCK_TYPES, ReplayedBlock, SERVER_TOOL_TYPES, ServerTool};

/// A Messages request, parsed and checked field by field (the engine's rules come after, in
/// [`crate::into_engine`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    pub model: String,
    /// `max_tokens`: at least 1; required but for counting tokens.
    pub max_tokens: Option<u64>,
    /// The texts of `system` (a string is one text).
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    /// The client tools of `tools`.
    pub tools: Vec<Tool>,
    /// The server tools of `tools`, each with its index there.
    pub server_tools: Vec<(usize, ServerTool)>,
    /// `mcp_servers`.
    pub mcp_servers: Vec<McpServer>,
    pub tool_choice: Option<ToolChoice>,
    pub thinking: Option<Thinking>,
    /// `output_config.effort`.
    pub effort: Option<Effort>,
    pub stop_sequences: Vec<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    /// `metadata.user_id`.
    pub user_id: Option<String>,
    pub stream: bool,
}

/// Who says a message. `system` entries inside `messages` are what Claude Code sends for
/// reminders mid-conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
}

/// One entry of `messages`; string content is one text block.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

/// A content block of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    Image(ImageSource),
    Document(Document),
    /// A call of a client tool, replayed by the client: its `id` is the engine's `call_id`.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult(ToolResult),
    /// The model's reasoning and the gateway's sealed blob of it.
    Thinking {
        thinking: String,
        signature: String,
    },
    /// Reasoning the client only has as the gateway's sealed blob.
    RedactedThinking {
        data: String,
    },
    /// Inside a `tool_result`: a deferred tool that a client-side tool search loaded.
    ToolReference {
        tool_name: String,
    },
    /// A gateway tool's call or result from an earlier reply.
    ServerTool(ReplayedBlock),
}

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum ImageSource {
    Base64 { media_type: String, data: String },
    Url(String),
}

/// A `document` block: its source and its title (used as the file name).
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub source: DocumentSource,
    pub title: Option<String>,
}

/// Where a document comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum DocumentSource {
    /// Base64 bytes of a PDF (or any file type the input-file path reads).
    Base64 {
        media_type: String,
        data: String,
    },
    /// Plain text given inline.
    Text {
        media_type: String,
        data: String,
    },
    Url(String),
}

/// A `tool_result` block.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub tool_use_id: String,
    pub content: ToolResultContent,
    pub is_error: bool,
}

/// What a tool returned: a string, or text, image and document blocks.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolResultContent {
    Text(String),
    Blocks(Vec<Block>),
}

/// A client tool: a function the model may call, with the JSON schema of its input.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    /// Its index in the request's `tools`.
    pub index: usize,
    pub name: String,
    pub description: Option<String>,
    pub input_schema: Map<String, Value>,
    /// `strict`: the input must follow the schema exactly (off unless asked for, as in Anthropic's API).
    pub strict: bool,
    /// `defer_loading`: offered only once a `tool_reference` block has loaded it.
    pub defer_loading: bool,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolChoice {
    pub mode: ToolChoiceMode,
    /// `disable_parallel_tool_use`: at most one tool call per turn.
    pub disable_parallel_tool_use: bool,
}

/// Which tools the model may or must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoiceMode {
    Auto,
    /// Some tool, the model's pick.
    Any,
    /// This tool.
    Tool(String),
    None,
}

/// `thinking`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    Enabled { budget_tokens: u64, display: ThinkingDisplayParam },
    Adaptive { display: ThinkingDisplayParam },
    Disabled,
}

/// `thinking.display`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThinkingDisplayParam {
    #[default]
    Summarized,
    Omitted,
}

/// `output_config.effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    Low,
    Medium,
    High,
    Max,
}

/// The smallest `thinking.budget_tokens` Anthropic's API accepts.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// The content block types a message may hold.
pub const BLOCK_TYPES: &[&str] = &[
    "text",
    "image",
    "document",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "code_execution_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
];

/// The block types a `tool_result` may hold.
const TOOL_RESULT_BLOCK_TYPES: &[&str] = &["text", "image", "document", "tool_reference"];

/// The top-level fields the gateway reads; any other is accepted and ignored.
#[derive(Deserialize)]
struct RequestFields {
    model: Option<String>,
    max_tokens: Option<u64>,
    messages: Option<Vec<Value>>,
    system: Option<Value>,
    tools: Option<Vec<Value>>,
    tool_choice: Option<Value>,
    thinking: Option<Value>,
    output_config: Option<OutputConfig>,
    stop_sequences: Option<Vec<String>>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<u64>,
    metadata: Option<Metadata>,
    stream: Option<bool>,
    mcp_servers: Option<Value>,
}

#[derive(Deserialize)]
struct OutputConfig {
    effort: Option<Effort>,
}

#[derive(Deserialize)]
struct Metadata {
    user_id: Option<String>,
}

#[derive(Deserialize)]
struct MessageFields {
    role: Role,
    content: Value,
}

#[derive(Deserialize)]
struct TextFields {
    text: String,
}

#[derive(Deserialize)]
struct ToolUseFields {
    id: String,
    name: String,
    input: Value,
}

#[derive(Deserialize)]
struct ToolResultFields {
    tool_use_id: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct ThinkingFields {
    thinking: String,
    signature: String,
}

#[derive(Deserialize)]
struct RedactedThinkingFields {
    data: String,
}

#[derive(Deserialize)]
struct ToolReferenceFields {
    tool_name: String,
}

#[derive(Deserialize)]
struct Base64Fields {
    media_type: String,
    data: String,
}

#[derive(Deserialize)]
struct UrlFields {
    url: String,
}

#[derive(Deserialize)]
struct TextSourceFields {
    #[serde(default)]
    media_type: Option<String>,
    data: String,
}

#[derive(Deserialize)]
struct ToolFields {
    name: String,
    #[serde(default)]
    description: Option<String>,
    input_schema: Map<String, Value>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default)]
    defer_loading: Option<bool>,
}

#[derive(Deserialize)]
struct ToolChoiceFields {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    disable_parallel_tool_use: Option<bool>,
}

#[derive(Deserialize)]
struct EnabledThinkingFields {
    budget_tokens: u64,
    #[serde(default)]
    display: Option<ThinkingDisplayParam>,
}

#[derive(Deserialize)]
struct AdaptiveThinkingFields {
    #[serde(default)]
    display: Option<ThinkingDisplayParam>,
}

impl MessagesRequest {
    /// Parse the raw body of `POST /v1/messages`: bad JSON, a non-object body, a wrongly typed or
    /// missing field, an unknown block type or a value out of range → 400 naming the field.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        Self::from_value(json_body(bytes)?)
    }

    /// Parse the raw body of `POST /v1/messages/count_tokens`: as [`MessagesRequest::from_slice`],
    /// but `max_tokens` may be left out (nothing is generated).
    pub fn counting_from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        Self::parse(json_body(bytes)?, false)
    }

    /// Parse a body of `POST /v1/messages` that is already JSON.
    pub fn from_value(body: Value) -> Result<Self, ApiError> {
        Self::parse(body, true)
    }

    fn parse(body: Value, needs_max_tokens: bool) -> Result<Self, ApiError> {
        if !body.is_object() {
            return Err(ApiError::invalid_body("The request body must be a JSON object."));
        }
        let fields: RequestFields = typed(body, "")?;
        let model = match fields.model {
            Some(model) => model,
            None => return Err(missing("model")),
        };
        let max_tokens = match fields.max_tokens {
            Some(0) => return Err(invalid("max_tokens", "expected an integer of at least 1, got 0")),
            None if needs_max_tokens => return Err(missing("max_tokens")),
            given => given,
        };
        let messages = match fields.messages {
            Some(messages) => messages
                .into_iter()
                .enumerate()
                .map(|(i, message)| parse_message(message, &format!("messages[{i}]")))
                .collect::<Result<Vec<_>, _>>()?,
            None => return Err(missing("messages")),
        };
        if messages.iter().all(|m| m.role == Role::System) {
            return Err(invalid("messages", "expected at least one user or assistant message"));
        }
        let mcp_servers = parse_servers(fields.mcp_servers)?;
        let mut tools = Vec::new();
        let mut server_tools = Vec::new();
        for (i, tool) in fields.tools.unwrap_or_default().into_iter().enumerate() {
            let at = format!("tools[{i}]");
            let server_kind = tool.get("type").and_then(Value::as_str).filter(|kind| ServerTool::is_declared_by(kind));
            match server_kind.map(str::to_owned) {
                Some(kind) => server_tools.push((i, ServerTool::parse(&kind, tool, &at)?)),
                None => tools.push(parse_tool(tool, &at, i)?),
            }
        }
        let tool_choice = match fields.tool_choice {
            None | Some(Value::Null) => None,
            Some(choice) => Some(parse_tool_choice(choice)?),
        };
        let thinking = match fields.thinking {
            None | Some(Value::Null) => None,
            Some(thinking) => Some(parse_thinking(thinking, max_tokens)?),
        };
        let stop_sequences = fields.stop_sequences.unwrap_or_default();
        if let Some(i) = stop_sequences.iter().position(String::is_empty) {
            return Err(invalid(&format!("stop_sequences[{i}]"), "a stop sequence must not be empty"));
        }
        check_unit_range("temperature", fields.temperature)?;
        check_unit_range("top_p", fields.top_p)?;
        Ok(MessagesRequest {
            model,
            max_tokens,
            system: parse_system(fields.system)?,
            messages,
            tools,
            server_tools,
            mcp_servers,
            tool_choice,
            thinking,
            effort: fields.output_config.and_then(|config| config.effort),
            stop_sequences,
            temperature: fields.temperature,
            top_p: fields.top_p,
            top_k: fields.top_k,
            user_id: fields.metadata.and_then(|metadata| metadata.user_id),
            stream: fields.stream.unwrap_or(false),
        })
    }
}

fn json_body(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| respgw_protocol::error::describe_json_syntax("request body", &e))
}

/// Deserialize `value` as `T`; an error names its path under `at`.
fn typed<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| ApiError::from_path_error(at, e))
}

/// A 400 naming `param`, its message starting with it.
pub(crate) fn invalid(param: &str, detail: impl Display) -> ApiError {
    ApiError::invalid(param, format!("{param}: {detail}."))
}

fn missing(field: &str) -> ApiError {
    ApiError::invalid(field, format!("Missing required parameter: '{field}'.")).with_code("missing_required_parameter")
}

fn check_unit_range(field: &str, value: Option<f64>) -> Result<(), ApiError> {
    match value {
        Some(v) if !(0.0..=1.0).contains(&v) => Err(invalid(field, format!("expected a number from 0 to 1, got {v}"))),
        _ => Ok(()),
    }
}

/// The `type` of an object that dispatches on it; `what` names the object in messages.
fn type_tag<'v>(value: &'v Value, at: &str, what: &str) -> Result<&'v str, ApiError> {
    let Some(object) = value.as_object() else {
        return Err(invalid(at, format!("expected {what} (an object), got {}", json_kind(value))));
    };
    match object.get("type") {
        Some(Value::String(kind)) => Ok(kind),
        None => Err(missing(&join_path(at, "type"))),
        Some(other) => Err(invalid(&join_path(at, "type"), format!("expected a string, got {}", json_kind(other)))),
    }
}

/// At most 64 characters of a client's value, for a message.
fn clip(value: &str) -> String {
    if value.chars().count() <= 64 {
        value.to_owned()
    } else {
        format!("{}…", value.chars().take(64).collect::<String>())
    }
}

fn unknown_type(at: &str, kind: &str, what: &str, accepted: &[&str]) -> ApiError {
    invalid(
        &join_path(at, "type"),
        format!("unknown {what} type '{}'; expected one of {}", clip(kind), accepted.join(", ")),
    )
}

/// `system`: a string, or an array of text blocks.
fn parse_system(system: Option<Value>) -> Result<Vec<String>, ApiError> {
    match system {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(text)) => Ok(vec![text]),
        Some(Value::Array(blocks)) => blocks
            .into_iter()
            .enumerate()
            .map(|(i, block)| {
                let at = format!("system[{i}]");
                match type_tag(&block, &at, "a text block")? {
                    "text" => typed::<TextFields>(block, &at).map(|b| b.text),
                    other => Err(unknown_type(&at, other, "system block", &["text"])),
                }
            })
            .collect(),
        Some(other) => {
            Err(invalid("system", format!("expected a string or an array of text blocks, got {}", json_kind(&other))))
        }
    }
}

fn parse_message(value: Value, at: &str) -> Result<Message, ApiError> {
    if !value.is_object() {
        return Err(invalid(at, format!("expected a message (an object), got {}", json_kind(&value))));
    }
    let fields: MessageFields = typed(value, at)?;
    let content_at = join_path(at, "content");
    let content = match fields.content {
        Value::String(text) => vec![Block::Text(text)],
        Value::Array(blocks) => blocks
            .into_iter()
            .enumerate()
            .map(|(i, block)| parse_block(block, &format!("{content_at}[{i}]"), BLOCK_TYPES))
            .collect::<Result<Vec<_>, _>>()?,
        other => {
            return Err(invalid(
                &content_at,
                format!("expected a string or an array of content blocks, got {}", json_kind(&other)),
            ));
        }
    };
    check_blocks_for_role(fields.role, &content, &content_at)?;
    Ok(Message { role: fields.role, content })
}

/// Which blocks each role may send: images, documents and tool results come from the user,
/// tool calls and thinking from the assistant, and a system entry is text alone.
fn check_blocks_for_role(role: Role, blocks: &[Block], at: &str) -> Result<(), ApiError> {
    for (i, block) in blocks.iter().enumerate() {
        let (kind, allowed) = match block {
            Block::Text(_) | Block::ToolReference { .. } => continue,
            Block::Image(_) => ("image", role == Role::User),
            Block::Document(_) => ("document", role == Role::User),
            Block::ToolResult(_) => ("tool_result", role == Role::User),
            Block::ToolUse { .. } => ("tool_use", role == Role::Assistant),
            Block::Thinking { .. } => ("thinking", role == Role::Assistant),
            Block::RedactedThinking { .. } => ("redacted_thinking", role == Role::Assistant),
            Block::ServerTool(_) => ("server tool", role == Role::Assistant),
        };
        if !allowed {
            let role = match role {
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::System => "system",
            };
            return Err(invalid(&format!("{at}[{i}]"), format!("{role} messages cannot hold {kind} blocks")));
        }
    }
    Ok(())
}

/// One content block, dispatched on its `type`; `accepted` are the types allowed where it is.
fn parse_block(value: Value, at: &str, accepted: &[&str]) -> Result<Block, ApiError> {
    let kind = type_tag(&value, at, "a content block")?.to_owned();
    if !accepted.contains(&kind.as_str()) {
        return Err(unknown_type(at, &kind, "content block", accepted));
    }
    match kind.as_str() {
        "text" => typed::<TextFields>(value, at).map(|b| Block::Text(b.text)),
        "image" => parse_image_source(field(value, at, "source")?, &join_path(at, "source")).map(Block::Image),
        "document" => {
            let title = match value.get("title") {
                None | Some(Value::Null) => None,
                Some(Value::String(title)) => Some(title.clone()),
                Some(other) => {
                    return Err(invalid(
                        &join_path(at, "title"),
                        format!("expected a string, got {}", json_kind(other)),
                    ));
                }
            };
            let source = parse_document_source(field(value, at, "source")?, &join_path(at, "source"))?;
            Ok(Block::Document(Document { source, title }))
        }
        "tool_use" => {
            let block: ToolUseFields = typed(value, at)?;
            if !block.input.is_object() {
                return Err(invalid(
                    &join_path(at, "input"),
                    format!("expected the tool's input (an object), got {}", json_kind(&block.input)),
                ));
            }
            if block.id.is_empty() {
                return Err(invalid(&join_path(at, "id"), "a tool_use block needs a non-empty id"));
            }
            Ok(Block::ToolUse { id: block.id, name: block.name, input: block.input })
        }
        "tool_result" => {
            let block: ToolResultFields = typed(value, at)?;
            let content_at = join_path(at, "content");
            let content = match block.content {
                None | Some(Value::Null) => ToolResultContent::Text(String::new()),
                Some(Value::String(text)) => ToolResultContent::Text(text),
                Some(Value::Array(blocks)) => ToolResultContent::Blocks(
                    blocks
                        .into_iter()
                        .enumerate()
                        .map(|(i, b)| parse_block(b, &format!("{content_at}[{i}]"), TOOL_RESULT_BLOCK_TYPES))
                        .collect::<Result<Vec<_>, _>>()?,
                ),
                Some(other) => {
                    return Err(invalid(
                        &content_at,
                        format!("expected a string or an array of content blocks, got {}", json_kind(&other)),
                    ));
                }
            };
            Ok(Block::ToolResult(ToolResult {
                tool_use_id: block.tool_use_id,
                content,
                is_error: block.is_error.unwrap_or(false),
            }))
        }
        "thinking" => {
            let block: ThinkingFields = typed(value, at)?;
            Ok(Block::Thinking { thinking: block.thinking, signature: block.signature })
        }
        "redacted_thinking" => {
            typed::<RedactedThinkingFields>(value, at).map(|b| Block::RedactedThinking { data: b.data })
        }
        "tool_reference" => {
            typed::<ToolReferenceFields>(value, at).map(|b| Block::ToolReference { tool_name: b.tool_name })
        }
        kind if REPLAYED_BLOCK_TYPES.contains(&kind) => {
            server_tools::parse_block(kind, value, at).map(Block::ServerTool)
        }
        other => Err(unknown_type(at, other, "content block", accepted)),
    }
}

/// The field `name` of the object at `at`, required.
fn field(mut value: Value, at: &str, name: &str) -> Result<Value, ApiError> {
    value.as_object_mut().and_then(|object| object.remove(name)).ok_or_else(|| missing(&join_path(at, name)))
}

const IMAGE_SOURCE_TYPES: &[&str] = &["base64", "url"];
const DOCUMENT_SOURCE_TYPES: &[&str] = &["base64", "text", "url"];

fn parse_image_source(value: Value, at: &str) -> Result<ImageSource, ApiError> {
    match type_tag(&value, at, "an image source")? {
        "base64" => {
            let source: Base64Fields = typed(value, at)?;
            Ok(ImageSource::Base64 { media_type: source.media_type, data: source.data })
        }
        "url" => typed::<UrlFields>(value, at).map(|source| ImageSource::Url(source.url)),
        "file" => Err(no_files_api(at)),
        other => Err(unknown_type(at, other, "image source", IMAGE_SOURCE_TYPES)),
    }
}

fn parse_document_source(value: Value, at: &str) -> Result<DocumentSource, ApiError> {
    match type_tag(&value, at, "a document source")? {
        "base64" => {
            let source: Base64Fields = typed(value, at)?;
            Ok(DocumentSource::Base64 { media_type: source.media_type, data: source.data })
        }
        "text" => {
            let source: TextSourceFields = typed(value, at)?;
            Ok(DocumentSource::Text {
                media_type: source.media_type.unwrap_or_else(|| "text/plain".to_owned()),
                data: source.data,
            })
        }
        "url" => typed::<UrlFields>(value, at).map(|source| DocumentSource::Url(source.url)),
        "file" => Err(no_files_api(at)),
        "content" => Err(invalid(
            &join_path(at, "type"),
            "documents made of content blocks are not supported; send the text as a 'text' source or as text blocks",
        )),
        other => Err(unknown_type(at, other, "document source", DOCUMENT_SOURCE_TYPES)),
    }
}

fn no_files_api(at: &str) -> ApiError {
    invalid(
        &join_path(at, "type"),
        "file sources are not supported (this gateway has no Files API); send the content as base64 or a URL",
    )
}

fn parse_tool(value: Value, at: &str, index: usize) -> Result<Tool, ApiError> {
    let Some(object) = value.as_object() else {
        return Err(invalid(at, format!("expected a tool (an object), got {}", json_kind(&value))));
    };
    match object.get("type") {
        None | Some(Value::Null) => {}
        Some(Value::String(kind)) if kind == "custom" => {}
        Some(Value::String(kind)) => {
            return Err(invalid(
                &join_path(at, "type"),
                format!(
                    "the tool type '{}' is not supported by this gateway; declare client tools with a name and \
                     an input_schema (type 'custom' or no type), or one of the server tools {}",
                    clip(kind),
                    SERVER_TOOL_TYPES.join(", ")
                ),
            ));
        }
        Some(other) => {
            return Err(invalid(&join_path(at, "type"), format!("expected a string, got {}", json_kind(other))));
        }
    }
    let tool: ToolFields = typed(value, at)?;
    Ok(Tool {
        index,
        name: tool.name,
        description: tool.description,
        input_schema: tool.input_schema,
        strict: tool.strict.unwrap_or(false),
        defer_loading: tool.defer_loading.unwrap_or(false),
    })
}

const TOOL_CHOICE_TYPES: &[&str] = &["auto", "any", "tool", "none"];

fn parse_tool_choice(value: Value) -> Result<ToolChoice, ApiError> {
    let at = "tool_choice";
    let kind = type_tag(&value, at, "a tool choice")?.to_owned();
    let fields: ToolChoiceFields = typed(value, at)?;
    let mode = match kind.as_str() {
        "auto" => ToolChoiceMode::Auto,
        "any" => ToolChoiceMode::Any,
        "none" => ToolChoiceMode::None,
        "tool" => match fields.name {
            Some(name) => ToolChoiceMode::Tool(name),
            None => return Err(missing("tool_choice.name")),
        },
        other => return Err(unknown_type(at, other, "tool choice", TOOL_CHOICE_TYPES)),
    };
    Ok(ToolChoice { mode, disable_parallel_tool_use: fields.disable_parallel_tool_use.unwrap_or(false) })
}

const THINKING_TYPES: &[&str] = &["enabled", "adaptive", "disabled"];

fn parse_thinking(value: Value, max_tokens: Option<u64>) -> Result<Thinking, ApiError> {
    let at = "thinking";
    match type_tag(&value, at, "a thinking configuration")? {
        "enabled" => {
            let fields: EnabledThinkingFields = typed(value, at)?;
            if fields.budget_tokens < MIN_THINKING_BUDGET {
                return Err(invalid(
                    "thinking.budget_tokens",
                    format!("expected at least {MIN_THINKING_BUDGET}, got {}", fields.budget_tokens),
                ));
            }
            if let Some(max_tokens) = max_tokens
                && fields.budget_tokens >= max_tokens
            {
                return Err(invalid(
                    "thinking.budget_tokens",
                    format!("must be less than max_tokens ({max_tokens}), got {}", fields.budget_tokens),
                ));
            }
            Ok(Thinking::Enabled { budget_tokens: fields.budget_tokens, display: fields.display.unwrap_or_default() })
        }
        "adaptive" => {
            let fields: AdaptiveThinkingFields = typed(value, at)?;
            Ok(Thinking::Adaptive { display: fields.display.unwrap_or_default() })
        }
        "disabled" => Ok(Thinking::Disabled),
        other => Err(unknown_type(at, other, "thinking", THINKING_TYPES)),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(body: Value) -> Result<MessagesRequest, ApiError> {
        MessagesRequest::from_slice(body.to_string().as_bytes())
    }

    fn refused(body: Value) -> (String, String) {
        let error = parse(body.clone()).expect_err("refused");
        assert_eq!(error.status, 400, "{body}");
        (error.param.unwrap_or_default(), error.message)
    }

    fn with(extra: Value) -> Value {
        let mut body = json!({"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        body
    }

    fn user_blocks(blocks: Value) -> Value {
        with(json!({"messages":[{"role":"user","content":blocks}]}))
    }

    #[test]
    fn a_minimal_request_is_one_user_text() {
        let request = parse(with(json!({}))).unwrap();
        assert_eq!(request.messages, vec![Message { role: Role::User, content: vec![Block::Text("hi".into())] }]);
        assert_eq!((request.max_tokens, request.stream, request.system.len()), (Some(64), false, 0));
    }

    #[test]
    fn required_fields_are_named() {
        for field in ["model", "max_tokens", "messages"] {
            let mut body = with(json!({}));
            body.as_object_mut().unwrap().remove(field);
            let (param, message) = refused(body);
            assert_eq!(param, field);
            assert_eq!(message, format!("Missing required parameter: '{field}'."));
        }
        let mut counting = with(json!({"thinking":{"type":"enabled","budget_tokens":2048}}));
        counting.as_object_mut().unwrap().remove("max_tokens");
        let counted = MessagesRequest::counting_from_slice(counting.to_string().as_bytes()).unwrap();
        assert_eq!(counted.max_tokens, None, "counting tokens needs no max_tokens");
        let (param, message) = refused(with(json!({"max_tokens":0})));
        assert_eq!(
            (param.as_str(), message.as_str()),
            ("max_tokens", "max_tokens: expected an integer of at least 1, got 0.")
        );
    }

    #[test]
    fn system_is_a_string_or_text_blocks_with_cache_control_ignored() {
        let request = parse(with(json!({"system":[
            {"type":"text","text":"one"},
            {"type":"text","text":"two","cache_control":{"type":"ephemeral"}}
        ]})))
        .unwrap();
        assert_eq!(request.system, vec!["one".to_owned(), "two".to_owned()]);
        assert_eq!(parse(with(json!({"system":"plain"}))).unwrap().system, vec!["plain".to_owned()]);
        let (param, message) = refused(with(json!({"system":[{"type":"image"}]})));
        assert_eq!(param, "system[0].type");
        assert_eq!(message, "system[0].type: unknown system block type 'image'; expected one of text.");
        assert_eq!(refused(with(json!({"system":7}))).0, "system");
    }

    #[test]
    fn every_block_kind_parses() {
        let request = parse(with(json!({"messages":[
            {"role":"system","content":"be brief"},
            {"role":"user","content":[
                {"type":"text","text":"look","cache_control":{"type":"ephemeral"}},
                {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}},
                {"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},
                {"type":"document","title":"doc.pdf","source":{"type":"base64","media_type":"application/pdf","data":"JVBE"}},
                {"type":"document","source":{"type":"text","data":"plain words"}},
                {"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}
            ]},
            {"role":"assistant","content":[
                {"type":"thinking","thinking":"hmm","signature":"sig"},
                {"type":"redacted_thinking","data":"blob"},
                {"type":"text","text":"calling"},
                {"type":"tool_use","id":"call_1","name":"ls","input":{"path":"."}}
            ]},
            {"role":"user","content":[
                {"type":"tool_result","tool_use_id":"call_1","content":"a b"},
                {"type":"tool_result","tool_use_id":"call_2","is_error":true,"content":[{"type":"text","text":"no"}]}
            ]}
        ]})))
        .unwrap();
        assert_eq!(request.messages[0], Message { role: Role::System, content: vec![Block::Text("be brief".into())] });
        let user = &request.messages[1].content;
        assert_eq!(user[1], Block::Image(ImageSource::Base64 { media_type: "image/png".into(), data: "iVBO".into() }));
        assert_eq!(user[2], Block::Image(ImageSource::Url("https://example.com/a.png".into())));
        assert_eq!(
            user[3],
            Block::Document(Document {
                source: DocumentSource::Base64 { media_type: "application/pdf".into(), data: "JVBE".into() },
                title: Some("doc.pdf".into())
            })
        );
        assert_eq!(
            user[4],
            Block::Document(Document {
                source: DocumentSource::Text { media_type: "text/plain".into(), data: "plain words".into() },
                title: None
            })
        );
        let assistant = &request.messages[2].content;
        assert_eq!(assistant[0], Block::Thinking { thinking: "hmm".into(), signature: "sig".into() });
        assert_eq!(assistant[1], Block::RedactedThinking { data: "blob".into() });
        assert_eq!(assistant[3], Block::ToolUse { id: "call_1".into(), name: "ls".into(), input: json!({"path":"."}) });
        let results = &request.messages[3].content;
        assert_eq!(
            results[1],
            Block::ToolResult(ToolResult {
                tool_use_id: "call_2".into(),
                content: ToolResultContent::Blocks(vec![Block::Text("no".into())]),
                is_error: true
            })
        );
    }

    #[test]
    fn unknown_block_types_are_refused_with_the_accepted_ones() {
        let (param, message) = refused(user_blocks(json!([{"type":"text","text":"a"},{"type":"video"}])));
        assert_eq!(param, "messages[0].content[1].type");
        assert_eq!(
            message,
            "messages[0].content[1].type: unknown content block type 'video'; expected one of text, image, document, \
             tool_use, tool_result, thinking, redacted_thinking, server_tool_use, web_search_tool_result, \
             code_execution_tool_result, mcp_tool_use, mcp_tool_result."
        );
        let (param, _) = refused(user_blocks(json!([{"text":"a"}])));
        assert_eq!(param, "messages[0].content[0].type");
        let (param, message) = refused(user_blocks(
            json!([{"type":"tool_result","tool_use_id":"c","content":[{"type":"tool_use","id":"x","name":"n","input":{}}]}]),
        ));
        assert_eq!(param, "messages[0].content[0].content[0].type");
        assert!(message.ends_with("expected one of text, image, document, tool_reference."), "{message}");
        let loaded = parse(user_blocks(json!([{"type":"tool_result","tool_use_id":"c","content":[
            {"type":"tool_reference","tool_name":"Grep"}]}])))
        .unwrap();
        let Block::ToolResult(result) = &loaded.messages[0].content[0] else { panic!() };
        assert_eq!(result.content, ToolResultContent::Blocks(vec![Block::ToolReference { tool_name: "Grep".into() }]));
    }

    #[test]
    fn bad_sources_name_their_field() {
        let (param, message) = refused(user_blocks(json!([{"type":"image","source":{"type":"file","file_id":"f"}}])));
        assert_eq!(param, "messages[0].content[0].source.type");
        assert!(message.contains("no Files API"), "{message}");
        let (param, message) = refused(user_blocks(json!([{"type":"image","source":{"type":"base64","data":"x"}}])));
        assert_eq!(param, "messages[0].content[0].source.media_type");
        assert_eq!(message, "Missing required parameter: 'messages[0].content[0].source.media_type'.");
        let (param, _) = refused(user_blocks(json!([{"type":"image"}])));
        assert_eq!(param, "messages[0].content[0].source");
        let (param, _) = refused(user_blocks(json!([{"type":"document","source":{"type":"pdf"}}])));
        assert_eq!(param, "messages[0].content[0].source.type");
        let (param, message) = refused(user_blocks(json!([{"type":"text","text":5}])));
        assert_eq!(
            (param.as_str(), message.as_str()),
            ("messages[0].content[0].text", "messages[0].content[0].text: expected a string, got the number 5.")
        );
    }

    #[test]
    fn blocks_must_suit_their_role() {
        let (param, message) = refused(with(json!({"messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":[{"type":"tool_result","tool_use_id":"c","content":"x"}]}
        ]})));
        assert_eq!(param, "messages[1].content[0]");
        assert_eq!(message, "messages[1].content[0]: assistant messages cannot hold tool_result blocks.");
        let (param, _) = refused(user_blocks(json!([{"type":"tool_use","id":"c","name":"n","input":{}}])));
        assert_eq!(param, "messages[0].content[0]");
        let (param, _) = refused(with(json!({"messages":[{"role":"system","content":"only system"}]})));
        assert_eq!(param, "messages");
        let (param, _) = refused(with(json!({"messages":[{"role":"tool","content":"x"}]})));
        assert_eq!(param, "messages[0].role");
    }

    #[test]
    fn tools_and_tool_choice() {
        let request = parse(with(json!({
            "tools":[
                {"name":"ls","description":"list","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}},
                {"type":"custom","name":"later","input_schema":{"type":"object"},"defer_loading":true,"strict":true}
            ],
            "tool_choice":{"type":"tool","name":"ls","disable_parallel_tool_use":true}
        })))
        .unwrap();
        assert_eq!(request.tools.len(), 2);
        assert!(!request.tools[0].strict && request.tools[1].strict);
        assert!(!request.tools[0].defer_loading && request.tools[1].defer_loading);
        assert_eq!(
            request.tool_choice,
            Some(ToolChoice { mode: ToolChoiceMode::Tool("ls".into()), disable_parallel_tool_use: true })
        );
        let (param, message) = refused(with(json!({"tools":[{"type":"bash_20250124","name":"bash"}]})));
        assert_eq!(param, "tools[0].type");
        assert!(message.contains("'bash_20250124' is not supported"), "{message}");
        assert_eq!(refused(with(json!({"tools":[{"name":"x"}]}))).0, "tools[0].input_schema");
        assert_eq!(refused(with(json!({"tool_choice":{"type":"tool"}}))).0, "tool_choice.name");
        assert_eq!(refused(with(json!({"tool_choice":{"type":"some"}}))).0, "tool_choice.type");
    }

    #[test]
    fn thinking_effort_and_sampling() {
        let request = parse(with(json!({
            "max_tokens":32000,
            "thinking":{"type":"adaptive","display":"omitted"},
            "output_config":{"effort":"high"},
            "context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
            "service_tier":"auto","container":null,
            "stop_sequences":["END"],"temperature":0.5,"top_p":0.9,"top_k":40,
            "metadata":{"user_id":"u-1"},"stream":true
        })))
        .unwrap();
        assert_eq!(request.thinking, Some(Thinking::Adaptive { display: ThinkingDisplayParam::Omitted }));
        assert_eq!(request.effort, Some(Effort::High));
        assert_eq!(request.stop_sequences, vec!["END".to_owned()]);
        assert_eq!((request.temperature, request.top_p, request.top_k), (Some(0.5), Some(0.9), Some(40)));
        assert_eq!(request.user_id.as_deref(), Some("u-1"));
        assert!(request.stream);
        let enabled =
            parse(with(json!({"max_tokens":4096,"thinking":{"type":"enabled","budget_tokens":2048}}))).unwrap();
        assert_eq!(
            enabled.thinking,
            Some(Thinking::Enabled { budget_tokens: 2048, display: ThinkingDisplayParam::Summarized })
        );
        assert_eq!(
            refused(with(json!({"thinking":{"type":"enabled","budget_tokens":100}}))).0,
            "thinking.budget_tokens"
        );
        let (param, message) = refused(with(json!({"thinking":{"type":"enabled","budget_tokens":2048}})));
        assert_eq!(param, "thinking.budget_tokens");
        assert_eq!(message, "thinking.budget_tokens: must be less than max_tokens (64), got 2048.");
        assert_eq!(refused(with(json!({"thinking":{"type":"on"}}))).0, "thinking.type");
        assert_eq!(refused(with(json!({"output_config":{"effort":"extreme"}}))).0, "output_config.effort");
        assert_eq!(refused(with(json!({"temperature":1.5}))).0, "temperature");
        assert_eq!(refused(with(json!({"stop_sequences":[""]}))).0, "stop_sequences[0]");
    }

    #[test]
    fn server_tools_and_mcp_servers_are_parsed_apart_from_client_tools() {
        let request = parse(with(json!({
            "tools":[
                {"type":"web_search_20250305","name":"web_search","max_uses":3},
                {"name":"ls","input_schema":{"type":"object"}},
                {"type":"code_execution_20250522","name":"code_execution"}
            ],
            "mcp_servers":[{"type":"url","url":"https://x.example/mcp","name":"x"}]
        })))
        .unwrap();
        assert_eq!(request.tools.len(), 1);
        assert_eq!(request.tools[0].index, 1);
        let indexes: Vec<usize> = request.server_tools.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, [0, 2]);
        assert_eq!(request.server_tools[1].1, ServerTool::CodeExecution);
        assert_eq!(request.mcp_servers[0].name, "x");
        assert_eq!(refused(with(json!({"mcp_servers":[{"type":"url","name":"x"}]}))).0, "mcp_servers[0].url");
        let (param, message) = refused(with(json!({"tools":[{"type":"web_fetch_20250910","name":"web_fetch"}]})));
        assert_eq!(param, "tools[0].type");
        assert!(message.contains("web_search_20250305, code_execution_20250522"), "{message}");
    }

    #[test]
    fn server_tool_blocks_come_from_the_assistant() {
        let call = json!({"type":"server_tool_use","id":"srvtoolu_ws_1","name":"web_search","input":{"query":"q"}});
        let assistant = json!({"messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":[call.clone(), {"type":"web_search_tool_result","tool_use_id":"srvtoolu_ws_1","content":[]}]}
        ]});
        let request = parse(with(assistant)).unwrap();
        assert!(matches!(request.messages[1].content[0], Block::ServerTool(ReplayedBlock::Call { .. })));
        let (param, message) = refused(user_blocks(json!([call])));
        assert_eq!(param, "messages[0].content[0]");
        assert!(message.contains("user messages cannot hold server tool blocks"), "{message}");
    }

    #[test]
    fn bad_json_is_described_in_our_words() {
        let error = MessagesRequest::from_slice(b"{\"model\":").unwrap_err();
        assert_eq!(error.status, 400);
        assert!(error.message.starts_with("The request body is not valid JSON"), "{}", error.message);
        assert_eq!(MessagesRequest::from_slice(b"[1]").unwrap_err().message, "The request body must be a JSON object.");
    }
}
