//! A Messages request as the engine's request: the Responses body it amounts to, validated by
//! the protocol crate under the engine's own limits, plus the [`ReplyShape`] the reply side needs
//! and the [`SourcePaths`] that name an engine error's field as the client wrote it.
//!
//! The mapping, block by block:
//! - `system` → `instructions` (texts joined by a blank line), except a text that is only
//!   Claude Code's `x-anthropic-billing-header:` line (see [`is_billing_header`]); a
//!   `role: "system"` entry of `messages` → a system message in its place.
//! - user `text` / `image` / `document` blocks → one user message per run of them (`input_text`,
//!   `input_image` with a `data:` or `https:` URL, `input_file` with `file_data` or `file_url`);
//!   each `tool_result` → a `function_call_output` whose `call_id` is its `tool_use_id`.
//! - assistant `text` → an assistant message; `tool_use` → a `function_call` whose `call_id` is
//!   its `id`; `thinking` → a reasoning item carrying the text and, as `encrypted_content`, its
//!   `signature`; `redacted_thinking` → a reasoning item carrying only its `data` blob. The engine
//!   opens every blob for the request's tenant and refuses a forged one, another tenant's, or a
//!   text that differs from what the blob seals.
//! - `tools` → function tools (`input_schema` as `parameters`, `strict` only when asked for). A
//!   tool with `defer_loading: true` is offered only once a `tool_reference` block in some
//!   `tool_result` has named it (a client-side tool search loaded it), as Anthropic's API does; a
//!   `tool_reference` reaches the model as a line saying the tool is now available;
//!   `tool_choice` `auto` / `any` / `tool` / `none` → `auto` / `required` / that function /
//!   `none`; `disable_parallel_tool_use` → `parallel_tool_calls: false`.
//! - Server tools and `mcp_servers` → the gateway's own tools, after the client's; the blocks
//!   of their earlier calls (a call block and its result block) → the engine's items of those
//!   calls ([`crate::server_tools`]). `max_uses` → `max_tool_calls` (the smallest given), which
//!   bounds every gateway tool call of the request.
//! - `thinking` and `output_config.effort` → `reasoning.effort` (see [`reasoning_effort`]).
//! - `max_tokens` → `max_output_tokens`; `temperature`, `top_p` as they are; `metadata.user_id`
//!   → `user`; `stop_sequences` and `top_k` → the engine request's upstream sampling options.
//!
//! Every request runs with `store: false` and `include: ["reasoning.encrypted_content"]`: a
//! Messages client replays its whole history, and its thinking comes back as sealed blobs. A
//! request with server tools also includes what their blocks show (their outputs and results).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use respgw_protocol::request::ReasoningEffort;
use respgw_protocol::{ApiError, Capabilities, CreateResponseRequest, RequestLimits, ValidatedRequest};
use serde_json::{Map, Value, json};

use crate::request::{
    Block, Document, DocumentSource, Effort, ImageSource, Message, MessagesRequest, Role, Thinking,
    ThinkingDisplayParam, Tool, ToolChoiceMode, ToolResult, ToolResultContent, invalid,
};
use crate::server_tools::mcp::{self, McpServer};
use crate::server_tools::{PendingCalls, ReplayedBlock};
use crate::shape::{ReplyShape, ThinkingDisplay};

/// What the engine runs for a Messages request.
#[derive(Debug, Clone)]
pub struct EngineRequest {
    pub request: ValidatedRequest,
    pub shape: ReplyShape,
    /// Where each input item came from, to name the field of an error the engine reports later.
    pub paths: SourcePaths,
}

/// Where each engine input item and tool came from in the Messages request.
#[derive(Debug, Clone, Default)]
pub struct SourcePaths {
    origins: Vec<Origin>,
    /// Where each tool offered was declared (deferred tools not loaded are left out).
    tools: Vec<ToolOrigin>,
}

/// Where one engine tool was declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolOrigin {
    /// `tools[index]`.
    Tool(usize),
    /// `mcp_servers[index]`.
    McpServer(usize),
}

/// The origin of one input item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A message made of `messages[message].content` from block `first` on: its part `p` is block
    /// `first + p`.
    Blocks { message: usize, first: usize },
    /// `messages[message].content[block]` alone.
    Block { message: usize, block: usize, kind: BlockKind },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    ToolUse,
    ToolResult,
    Thinking,
    RedactedThinking,
    /// A gateway tool's result block (its item also stands for the call block before it).
    ServerToolResult,
}

/// Translate `request` into the engine's request, validated under `caps` and `limits`.
pub fn into_engine(
    request: MessagesRequest,
    caps: &Capabilities,
    limits: &RequestLimits,
) -> Result<EngineRequest, ApiError> {
    if request.messages.len() > limits.max_input_items {
        return Err(invalid(
            "messages",
            format!(
                "{} messages were sent; this gateway accepts at most {} (its input item limit)",
                request.messages.len(),
                limits.max_input_items
            ),
        )
        .with_code("limit_exceeded"));
    }
    let mut items = Vec::new();
    let mut paths = SourcePaths::default();
    for (index, message) in request.messages.iter().enumerate() {
        message_items(index, message, &mut items, &mut paths)?;
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("input".into(), Value::Array(items));
    let system: Vec<&str> = request.system.iter().map(String::as_str).filter(|text| !is_billing_header(text)).collect();
    if !system.is_empty() {
        body.insert("instructions".into(), json!(system.join("\n\n")));
    }
    let loaded = loaded_tools(&request.messages);
    let offered: Vec<(usize, &Tool)> = request
        .tools
        .iter()
        .enumerate()
        .filter(|(_, tool)| !tool.defer_loading || loaded.contains(&tool.name.as_str()))
        .collect();
    let mut tools: Vec<Value> = offered
        .iter()
        .map(|(_, tool)| {
            json!({
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.input_schema,
                "strict": tool.strict,
            })
        })
        .collect();
    paths.tools = offered.iter().map(|(_, tool)| ToolOrigin::Tool(tool.index)).collect();
    let mut include = Vec::new();
    for (index, server_tool) in &request.server_tools {
        server_tool.check_enabled(caps, &format!("tools[{index}]"))?;
        tools.push(server_tool.engine_tool());
        paths.tools.push(ToolOrigin::Tool(*index));
        include.push(server_tool.include());
    }
    for (index, server) in request.mcp_servers.iter().enumerate().filter(|(_, server)| server.enabled) {
        McpServer::check_enabled(caps, index)?;
        tools.push(server.engine_tool());
        paths.tools.push(ToolOrigin::McpServer(index));
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(max_uses) = request.server_tools.iter().filter_map(|(_, tool)| tool.max_uses()).min() {
        body.insert("max_tool_calls".into(), json!(max_uses));
    }
    if let Some(choice) = &request.tool_choice {
        let mode = match &choice.mode {
            ToolChoiceMode::Auto => json!("auto"),
            ToolChoiceMode::Any => json!("required"),
            ToolChoiceMode::None => json!("none"),
            ToolChoiceMode::Tool(name) => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".into(), mode);
        if choice.disable_parallel_tool_use {
            body.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    if let Some(effort) = reasoning_effort(request.thinking, request.effort) {
        body.insert("reasoning".into(), json!({"effort": effort}));
    }
    if let Some(max_tokens) = request.max_tokens {
        body.insert("max_output_tokens".into(), json!(max_tokens));
    }
    for (key, value) in [("temperature", request.temperature), ("top_p", request.top_p)] {
        if let Some(value) = value {
            body.insert(key.into(), json!(value));
        }
    }
    if let Some(user) = &request.user_id {
        body.insert("user".into(), json!(user));
    }
    body.insert("store".into(), json!(false));
    body.insert("stream".into(), json!(request.stream));
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));

    let mut validated = CreateResponseRequest::from_value(Value::Object(body))
        .and_then(|parsed| parsed.validate_within(caps, limits))
        .map_err(|error| paths.rename(error))?;
    // After validation: the web search include is the Messages face's own, not a Responses value.
    validated.include.extend(include.into_iter().map(str::to_owned));
    validated.stop = request.stop_sequences.clone();
    validated.top_k = request.top_k;
    let display = match request.thinking {
        Some(Thinking::Enabled { display, .. } | Thinking::Adaptive { display }) => display,
        Some(Thinking::Disabled) | None => ThinkingDisplayParam::Summarized,
    };
    let shape = ReplyShape {
        model: request.model,
        thinking: match display {
            ThinkingDisplayParam::Summarized => ThinkingDisplay::Text,
            ThinkingDisplayParam::Omitted => ThinkingDisplay::Omitted,
        },
        stop_sequences: request.stop_sequences,
    };
    Ok(EngineRequest { request: validated, shape, paths })
}

/// Whether a system text is only the billing line Claude Code puts first
/// (`x-anthropic-billing-header: cc_version=…; cc_entrypoint=…;`). It is for Anthropic's billing,
/// not for the model, and its version suffix changes with every Claude Code session, so sent
/// upstream it would stop the model server's prefix cache from reusing the system prompt across
/// sessions.
fn is_billing_header(text: &str) -> bool {
    let text = text.trim();
    text.starts_with("x-anthropic-billing-header:") && !text.contains('\n')
}

/// The engine's reasoning effort for `thinking` and `output_config.effort`: thinking `disabled`
/// is `none`; otherwise `effort` `low` / `medium` / `high` / `max` is `low` / `medium` / `high` /
/// `xhigh`; without an effort, `enabled` thinking's `budget_tokens` picks one (under 4096 `low`,
/// under 16384 `medium`, else `high`), and `adaptive` thinking leaves it to the upstream.
pub fn reasoning_effort(thinking: Option<Thinking>, effort: Option<Effort>) -> Option<&'static str> {
    let chosen = match (thinking, effort) {
        (Some(Thinking::Disabled), _) => ReasoningEffort::None,
        (_, Some(Effort::Low)) => ReasoningEffort::Low,
        (_, Some(Effort::Medium)) => ReasoningEffort::Medium,
        (_, Some(Effort::High)) => ReasoningEffort::High,
        (_, Some(Effort::Max)) => ReasoningEffort::Xhigh,
        (Some(Thinking::Enabled { budget_tokens, .. }), None) => match budget_tokens {
            ..4096 => ReasoningEffort::Low,
            4096..16384 => ReasoningEffort::Medium,
            _ => ReasoningEffort::High,
        },
        (Some(Thinking::Adaptive { .. }) | None, None) => return None,
    };
    Some(chosen.as_str())
}

/// The names `tool_reference` blocks load, anywhere in the conversation.
fn loaded_tools(messages: &[Message]) -> Vec<&str> {
    let results = messages.iter().flat_map(|m| &m.content).filter_map(|block| match block {
        Block::ToolResult(ToolResult { content: ToolResultContent::Blocks(blocks), .. }) => Some(blocks),
        _ => None,
    });
    results
        .flatten()
        .filter_map(|block| match block {
            Block::ToolReference { tool_name } => Some(tool_name.as_str()),
            _ => None,
        })
        .collect()
}

/// The input items of `messages[index]`, in the order of its blocks.
fn message_items(
    index: usize,
    message: &Message,
    items: &mut Vec<Value>,
    paths: &mut SourcePaths,
) -> Result<(), ApiError> {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::System => "system",
    };
    // The parts of the message being gathered, and the block it starts at.
    let mut parts: Vec<Value> = Vec::new();
    let mut first = 0;
    let mut pending_calls = PendingCalls::default();
    let flush = |parts: &mut Vec<Value>, first: usize, items: &mut Vec<Value>, paths: &mut SourcePaths| {
        if !parts.is_empty() {
            items.push(json!({"type": "message", "role": role, "content": std::mem::take(parts)}));
            paths.origins.push(Origin::Blocks { message: index, first });
        }
    };
    for (block_index, block) in message.content.iter().enumerate() {
        let at = format!("messages[{index}].content[{block_index}]");
        let single = match block {
            Block::Text(text) => {
                let kind = if message.role == Role::Assistant { "output_text" } else { "input_text" };
                content_part(&mut parts, &mut first, block_index, json!({"type": kind, "text": text}));
                continue;
            }
            Block::Image(source) => {
                content_part(&mut parts, &mut first, block_index, image_part(source));
                continue;
            }
            Block::Document(document) => {
                content_part(&mut parts, &mut first, block_index, document_part(document));
                continue;
            }
            Block::ToolUse { id, name, input } => (
                json!({"type": "function_call", "call_id": id, "name": name, "arguments": input.to_string()}),
                BlockKind::ToolUse,
            ),
            Block::ToolResult(result) => (tool_output(result), BlockKind::ToolResult),
            Block::Thinking { thinking, signature } => {
                if signature.is_empty() {
                    return Err(invalid(
                        &format!("{at}.signature"),
                        "a thinking block must carry the signature this gateway gave it",
                    ));
                }
                let content: Vec<Value> = if thinking.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "reasoning_text", "text": thinking})]
                };
                (
                    json!({"type": "reasoning", "summary": [], "content": content, "encrypted_content": signature}),
                    BlockKind::Thinking,
                )
            }
            Block::RedactedThinking { data } => {
                (json!({"type": "reasoning", "summary": [], "encrypted_content": data}), BlockKind::RedactedThinking)
            }
            // The parser admits tool references only inside a tool result.
            Block::ToolReference { .. } => continue,
            Block::ServerTool(ReplayedBlock::Call { id, call, tool }) => {
                pending_calls.call(id, call, tool, &at);
                continue;
            }
            Block::ServerTool(ReplayedBlock::Result { tool_use_id, result }) => {
                (pending_calls.result(tool_use_id, result, &at)?, BlockKind::ServerToolResult)
            }
        };
        flush(&mut parts, first, items, paths);
        let (item, kind) = single;
        items.push(item);
        paths.origins.push(Origin::Block { message: index, block: block_index, kind });
    }
    flush(&mut parts, first, items, paths);
    pending_calls.finish()
}

/// Add a part to the message being gathered, remembering the block a new message starts at.
fn content_part(parts: &mut Vec<Value>, first: &mut usize, block_index: usize, part: Value) {
    if parts.is_empty() {
        *first = block_index;
    }
    parts.push(part);
}

fn image_part(source: &ImageSource) -> Value {
    let url = match source {
        ImageSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
        ImageSource::Url(url) => url.clone(),
    };
    json!({"type": "input_image", "image_url": url})
}

fn document_part(document: &Document) -> Value {
    let mut part = Map::new();
    part.insert("type".into(), json!("input_file"));
    if let Some(title) = &document.title {
        part.insert("filename".into(), json!(title));
    }
    match &document.source {
        DocumentSource::Base64 { media_type, data } => {
            part.insert("file_data".into(), json!(format!("data:{media_type};base64,{data}")));
        }
        DocumentSource::Text { media_type, data } => {
            part.insert("file_data".into(), json!(format!("data:{media_type};base64,{}", STANDARD.encode(data))));
        }
        DocumentSource::Url(url) => {
            part.insert("file_url".into(), json!(url));
        }
    }
    Value::Object(part)
}

/// Text a failed tool's result starts with, so the model knows the tool reported an error.
const TOOL_ERROR_PREFIX: &str = "Error: ";

fn tool_output(result: &ToolResult) -> Value {
    let output = match &result.content {
        ToolResultContent::Text(text) if result.is_error => json!(format!("{TOOL_ERROR_PREFIX}{text}")),
        ToolResultContent::Text(text) => json!(text),
        ToolResultContent::Blocks(blocks) => {
            let mut parts: Vec<Value> = Vec::new();
            if result.is_error {
                parts.push(json!({"type": "input_text", "text": TOOL_ERROR_PREFIX.trim_end()}));
            }
            parts.extend(blocks.iter().filter_map(|block| match block {
                Block::Text(text) => Some(json!({"type": "input_text", "text": text})),
                Block::Image(source) => Some(image_part(source)),
                Block::Document(document) => Some(document_part(document)),
                Block::ToolReference { tool_name } => {
                    Some(json!({"type": "input_text", "text": format!("The tool '{tool_name}' is now available.")}))
                }
                // The parser admits nothing else in a tool result.
                _ => None,
            }));
            Value::Array(parts)
        }
    };
    json!({"type": "function_call_output", "call_id": result.tool_use_id, "output": output})
}

impl SourcePaths {
    /// `error` with its field named as the client wrote it: `input[3].content[1]` becomes
    /// `messages[2].content[4]`, `input[5].encrypted_content` the thinking block's `signature`,
    /// `tools[0].parameters` `tools[0].input_schema`; in `param` and in the message.
    pub fn rename(&self, mut error: ApiError) -> ApiError {
        let Some(param) = error.param.clone() else { return error };
        let renamed = if let Some(rest) = param.strip_prefix("input[") {
            let Some((index, rest)) = rest.split_once(']') else { return error };
            match index.parse::<usize>().ok().and_then(|i| self.origins.get(i)) {
                Some(origin) => origin.path(rest),
                None => return error,
            }
        } else if param == "input" {
            "messages".to_owned()
        } else if let Some(rest) = param.strip_prefix("tools[")
            && let Some((index, rest)) = rest.split_once(']')
            && let Some(&origin) = index.parse::<usize>().ok().and_then(|i| self.tools.get(i))
        {
            match origin {
                ToolOrigin::Tool(index) => {
                    let rest = match rest.strip_prefix(".parameters") {
                        Some(after) => format!(".input_schema{after}"),
                        None => rest.to_owned(),
                    };
                    format!("tools[{index}]{rest}")
                }
                ToolOrigin::McpServer(index) => {
                    error.message = mcp::client_words(&error.message);
                    format!("mcp_servers[{index}]{}", mcp::field_path(rest))
                }
            }
        } else {
            return error;
        };
        error.message = error.message.replace(&param, &renamed);
        error.param = Some(renamed);
        error
    }
}

impl Origin {
    /// The client's path of `rest` (e.g. `.content[1].file_data`) inside the item from here.
    fn path(self, rest: &str) -> String {
        match self {
            Origin::Blocks { message, first } => {
                if let Some(inner) = rest.strip_prefix(".content[")
                    && let Some((part, after)) = inner.split_once(']')
                    && let Ok(part) = part.parse::<usize>()
                {
                    return format!("messages[{message}].content[{}]{after}", first + part);
                }
                format!("messages[{message}]{rest}")
            }
            Origin::Block { message, block, kind } => {
                let base = format!("messages[{message}].content[{block}]");
                let renamed = match kind {
                    BlockKind::ToolUse => rest.replacen(".arguments", ".input", 1).replacen(".call_id", ".id", 1),
                    BlockKind::ToolResult => {
                        rest.replacen(".output", ".content", 1).replacen(".call_id", ".tool_use_id", 1)
                    }
                    BlockKind::Thinking if rest.starts_with(".content") => ".thinking".to_owned(),
                    BlockKind::Thinking => rest.replacen(".encrypted_content", ".signature", 1),
                    BlockKind::RedactedThinking => rest.replacen(".encrypted_content", ".data", 1),
                    BlockKind::ServerToolResult => String::new(),
                };
                format!("{base}{renamed}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use respgw_protocol::items::{ContentPart, FunctionOutput};
    use respgw_protocol::tools::choice::ToolChoiceMode as EngineMode;
    use respgw_protocol::{Item, MessageRole, ToolChoice, ToolDeclaration};

    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    use super::*;

    fn translate(body: Value) -> Result<EngineRequest, ApiError> {
        let request = MessagesRequest::from_value(body)?;
        into_engine(request, &Capabilities::default(), &RequestLimits::default())
    }

    fn engine(body: Value) -> EngineRequest {
        translate(body).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn with(extra: Value) -> Value {
        let mut body = json!({"model":"m","max_tokens":64,"messages":[{"role":"user","content":"hi"}]});
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            body.extend(extra.clone());
        }
        body
    }

    fn item_json(item: &Item) -> Value {
        serde_json::to_value(item).unwrap()
    }

    #[test]
    fn every_request_is_unstored_and_asks_for_sealed_reasoning() {
        let translated = engine(with(json!({"stream":true})));
        let request = &translated.request;
        assert!(!request.store && request.stream);
        assert_eq!(request.include, vec!["reasoning.encrypted_content".to_owned()]);
        assert_eq!(request.max_output_tokens, Some(64));
        assert_eq!(
            translated.shape,
            ReplyShape { model: "m".into(), thinking: ThinkingDisplay::Text, stop_sequences: vec![] }
        );
    }

    #[test]
    fn claude_codes_billing_line_is_not_sent_to_the_model() {
        let request = engine(with(json!({
            "system":[
                {"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328.a1f; cc_entrypoint=sdk-cli;"},
                {"type":"text","text":"You are a Claude agent."},
                {"type":"text","text":"x-anthropic-billing-header: is how a line starts\nand this text is a prompt"}
            ]
        })))
        .request;
        assert_eq!(
            request.instructions.as_deref(),
            Some(
                "You are a Claude agent.\n\nx-anthropic-billing-header: is how a line starts\nand this text is a prompt"
            )
        );
        let only_billing = engine(with(json!({"system":"x-anthropic-billing-header: cc_version=1;"}))).request;
        assert_eq!(only_billing.instructions, None);
    }

    #[test]
    fn system_texts_become_instructions_and_system_entries_stay_in_place() {
        let request = engine(with(json!({
            "system":[{"type":"text","text":"You are a CLI."},{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
            "messages":[
                {"role":"user","content":"hi"},
                {"role":"system","content":[{"type":"text","text":"reminder"}]},
                {"role":"user","content":"go on"}
            ]
        })))
        .request;
        assert_eq!(request.instructions.as_deref(), Some("You are a CLI.\n\nBe brief."));
        let Item::Message(system) = &request.input[1] else { panic!("{:?}", request.input[1]) };
        assert_eq!(system.role, MessageRole::System);
        assert_eq!(system.content, vec![ContentPart::InputText { text: "reminder".into() }]);
        assert_eq!(request.input.len(), 3);
    }

    #[test]
    fn images_and_documents_take_the_input_file_path() {
        let request = engine(with(json!({"messages":[{"role":"user","content":[
            {"type":"text","text":"see"},
            {"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
            {"type":"image","source":{"type":"url","url":"https://example.com/a.png"}},
            {"type":"document","title":"report.pdf","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0xLjQK"}},
            {"type":"document","source":{"type":"text","media_type":"text/plain","data":"plain words"}},
            {"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}
        ]}]})))
        .request;
        let Item::Message(message) = &request.input[0] else { panic!() };
        let parts: Vec<Value> = message.content.iter().map(|p| serde_json::to_value(p).unwrap()).collect();
        assert_eq!(parts[1]["image_url"], "data:image/png;base64,iVBORw0KGgo=");
        assert_eq!(parts[2]["image_url"], "https://example.com/a.png");
        assert_eq!(parts[3]["type"], "input_file");
        assert_eq!(parts[3]["filename"], "report.pdf");
        assert_eq!(parts[3]["file_data"], "data:application/pdf;base64,JVBERi0xLjQK");
        assert_eq!(parts[4]["file_data"], format!("data:text/plain;base64,{}", STANDARD.encode("plain words")));
        assert_eq!(parts[5]["file_url"], "https://example.com/a.pdf");
    }

    #[test]
    fn tool_use_and_tool_result_share_the_call_id() {
        let request = engine(with(json!({
            "tools":[{"name":"ls","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}}],
            "messages":[
                {"role":"user","content":"list"},
                {"role":"assistant","content":[
                    {"type":"text","text":"Listing."},
                    {"type":"tool_use","id":"call_7","name":"ls","input":{"path":"."}}
                ]},
                {"role":"user","content":[
                    {"type":"tool_result","tool_use_id":"call_7","content":"a.txt"},
                    {"type":"tool_result","tool_use_id":"call_8","is_error":true,"content":"denied"},
                    {"type":"tool_result","tool_use_id":"call_9","content":[{"type":"text","text":"x"},
                        {"type":"image","source":{"type":"url","url":"https://example.com/s.png"}}]},
                    {"type":"text","text":"now?"}
                ]}
            ]
        })))
        .request;
        let kinds: Vec<String> =
            request.input.iter().map(|i| item_json(i)["type"].as_str().unwrap().to_owned()).collect();
        assert_eq!(
            kinds,
            [
                "message",
                "message",
                "function_call",
                "function_call_output",
                "function_call_output",
                "function_call_output",
                "message"
            ]
        );
        let Item::FunctionCall(call) = &request.input[2] else { panic!() };
        assert_eq!(
            (call.call_id.as_str(), call.name.as_str(), call.arguments.as_str()),
            ("call_7", "ls", r#"{"path":"."}"#)
        );
        let Item::FunctionCallOutput(output) = &request.input[3] else { panic!() };
        assert_eq!((output.call_id.as_str(), &output.output), ("call_7", &FunctionOutput::Text("a.txt".into())));
        let Item::FunctionCallOutput(failed) = &request.input[4] else { panic!() };
        assert_eq!(failed.output, FunctionOutput::Text("Error: denied".into()));
        let Item::FunctionCallOutput(parts) = &request.input[5] else { panic!() };
        let FunctionOutput::Parts(parts) = &parts.output else { panic!() };
        assert!(
            matches!(&parts[1], ContentPart::InputImage { image_url, .. } if image_url == "https://example.com/s.png")
        );
        let ToolDeclaration::Function(tool) = &request.tools[0] else { panic!() };
        assert_eq!((tool.name.as_str(), tool.strict), ("ls", Some(false)));
        assert_eq!(tool.parameters.as_ref().and_then(|p| p.get("type")), Some(&json!("object")));
    }

    #[test]
    fn deferred_tools_are_offered_once_a_tool_reference_loads_them() {
        let tools = json!([
            {"name":"ToolSearch","input_schema":{"type":"object"}},
            {"name":"DeferredToolPlaceholder","input_schema":{"type":"object"},"defer_loading":true},
            {"name":"Grep","input_schema":{"type":"object"},"defer_loading":true}
        ]);
        let names = |request: &ValidatedRequest| -> Vec<String> {
            request
                .tools
                .iter()
                .map(|t| serde_json::to_value(t).unwrap()["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let first = engine(with(json!({"tools":tools}))).request;
        assert_eq!(names(&first), ["ToolSearch"]);
        let loaded = engine(with(json!({"tools":tools,"messages":[
            {"role":"user","content":"find"},
            {"role":"assistant","content":[{"type":"tool_use","id":"c1","name":"ToolSearch","input":{"query":"grep"}}]},
            {"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":[{"type":"tool_reference","tool_name":"Grep"}]}]}
        ]})))
        .request;
        assert_eq!(names(&loaded), ["ToolSearch", "Grep"]);
        let Item::FunctionCallOutput(output) = &loaded.input[2] else { panic!() };
        assert_eq!(
            output.output,
            FunctionOutput::Parts(vec![ContentPart::InputText { text: "The tool 'Grep' is now available.".into() }])
        );
        let mixed = json!([{"name":"later","input_schema":{"type":"object"},"defer_loading":true},
            {"name":"bad","input_schema":{"type":"array"}}]);
        let error = translate(with(json!({"tools":mixed}))).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("tools[1].input_schema.type"), "named as the client sent it");
    }

    #[test]
    fn tool_choice_variants() {
        let tools = json!([{"name":"ls","input_schema":{"type":"object"}}]);
        let choice = |choice: Value| {
            let request = engine(with(json!({"tools":tools,"tool_choice":choice}))).request;
            (request.tool_choice, request.parallel_tool_calls)
        };
        assert_eq!(choice(json!({"type":"auto"})), (ToolChoice::Mode(EngineMode::Auto), None));
        assert_eq!(choice(json!({"type":"any"})), (ToolChoice::Mode(EngineMode::Required), None));
        assert_eq!(choice(json!({"type":"none"})), (ToolChoice::Mode(EngineMode::None), None));
        let (named, parallel) = choice(json!({"type":"tool","name":"ls","disable_parallel_tool_use":true}));
        assert_eq!(serde_json::to_value(named).unwrap(), json!({"type":"function","name":"ls"}));
        assert_eq!(parallel, Some(false));
        let error = translate(with(json!({"tools":tools,"tool_choice":{"type":"tool","name":"rm"}}))).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("tool_choice.name"), "{error:?}");
    }

    #[test]
    fn thinking_and_effort_become_the_reasoning_effort() {
        let effort = |extra: Value| engine(with(extra)).request.reasoning.and_then(|r| r.effort).map(|e| e.as_str());
        assert_eq!(effort(json!({})), None);
        assert_eq!(effort(json!({"thinking":{"type":"adaptive"}})), None);
        assert_eq!(effort(json!({"thinking":{"type":"adaptive"},"output_config":{"effort":"high"}})), Some("high"));
        assert_eq!(effort(json!({"output_config":{"effort":"max"}})), Some("xhigh"));
        assert_eq!(effort(json!({"thinking":{"type":"disabled"},"output_config":{"effort":"low"}})), Some("none"));
        let budget =
            |tokens: u64| effort(json!({"max_tokens":64000,"thinking":{"type":"enabled","budget_tokens":tokens}}));
        assert_eq!((budget(1024), budget(8000), budget(32000)), (Some("low"), Some("medium"), Some("high")));
        let omitted = engine(with(json!({"thinking":{"type":"adaptive","display":"omitted"}})));
        assert_eq!(omitted.shape.thinking, ThinkingDisplay::Omitted);
    }

    #[test]
    fn sampling_options_and_user() {
        let translated = engine(with(json!({
            "stop_sequences":["END","STOP"],"top_k":40,"temperature":0.2,"top_p":0.8,"metadata":{"user_id":"u-1"}
        })));
        let request = translated.request;
        assert_eq!(request.stop, vec!["END".to_owned(), "STOP".to_owned()]);
        assert_eq!((request.top_k, request.temperature, request.top_p), (Some(40), Some(0.2), Some(0.8)));
        assert_eq!(request.user.as_deref(), Some("u-1"));
        assert_eq!(translated.shape.stop_sequences, vec!["END".to_owned(), "STOP".to_owned()]);
    }

    #[test]
    fn thinking_blocks_become_reasoning_with_their_blob() {
        let request = engine(with(json!({"messages":[
            {"role":"user","content":"hi"},
            {"role":"assistant","content":[
                {"type":"thinking","thinking":"let me see","signature":"rgw2.k.abc"},
                {"type":"thinking","thinking":"","signature":"rgw2.k.def"},
                {"type":"redacted_thinking","data":"rgw2.k.ghi"},
                {"type":"text","text":"Hello."}
            ]},
            {"role":"user","content":"again"}
        ]})))
        .request;
        let reasoning: Vec<Value> = request.input[1..4].iter().map(item_json).collect();
        assert_eq!(reasoning[0]["content"], json!([{"type":"reasoning_text","text":"let me see"}]));
        assert_eq!(reasoning[0]["encrypted_content"], "rgw2.k.abc");
        assert_eq!(reasoning[1]["content"], json!([]), "an omitted text is filled from the blob");
        assert_eq!(reasoning[2]["encrypted_content"], "rgw2.k.ghi");
        let error = translate(with(json!({"messages":[{"role":"assistant","content":[
            {"type":"thinking","thinking":"x","signature":""}]}]})))
        .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[0].content[0].signature"));
    }

    #[test]
    fn engine_errors_name_the_clients_field() {
        let error = translate(with(json!({"messages":[{"role":"user","content":[
            {"type":"text","text":"see"},
            {"type":"document","source":{"type":"base64","media_type":"application/x-msdownload","data":"TVo="}}
        ]}]})))
        .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[0].content[1]"), "{error:?}");
        assert!(error.message.starts_with("messages[0].content[1]: "), "{}", error.message);
        let error =
            translate(with(json!({"tools":[{"name":"bad name","input_schema":{"type":"object"}}]}))).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("tools[0].name"));
        let error = translate(with(json!({"tools":[{"name":"f","input_schema":{"type":"array"}}]}))).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("tools[0].input_schema.type"));
    }

    #[test]
    fn later_engine_errors_are_renamed_through_the_source_paths() {
        let translated = engine(with(json!({"messages":[
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"tool_result","tool_use_id":"c","content":"r"},
                {"type":"text","text":"b"},{"type":"document","source":{"type":"url","url":"https://example.com/x"}}]},
            {"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"redacted_thinking","data":"d"}]},
            {"role":"user","content":"c"}
        ]})));
        let rename = |param: &str| {
            let error = ApiError::invalid(param, format!("Invalid '{param}': no."));
            let renamed = translated.paths.rename(error);
            (renamed.param.unwrap_or_default(), renamed.message)
        };
        assert_eq!(rename("input[2].content[1]").0, "messages[0].content[3]");
        assert_eq!(rename("input[1].output").0, "messages[0].content[1].content");
        let (param, message) = rename("input[3].encrypted_content");
        assert_eq!(param, "messages[1].content[0].signature");
        assert_eq!(message, "Invalid 'messages[1].content[0].signature': no.");
        assert_eq!(rename("input[3].content").0, "messages[1].content[0].thinking");
        assert_eq!(rename("input[4].encrypted_content").0, "messages[1].content[1].data");
        assert_eq!(rename("input").0, "messages");
        assert_eq!(rename("model").0, "model");
    }

    #[test]
    fn too_many_messages_are_refused_under_the_engine_limit() {
        let limits = RequestLimits { max_input_items: 1, ..RequestLimits::default() };
        let request = MessagesRequest::from_value(with(json!({"messages":[
            {"role":"user","content":"a"},{"role":"assistant","content":"b"}
        ]})))
        .unwrap();
        let error = into_engine(request, &Capabilities::default(), &limits).unwrap_err();
        assert_eq!((error.status, error.param.as_deref()), (400, Some("messages")));
        assert_eq!(error.code.as_deref(), Some("limit_exceeded"));
    }

    /// A gateway with every gateway tool enabled.
    fn all_tools() -> Capabilities {
        Capabilities { code_interpreter: true, remote_mcp: true, web_search: true, ..Capabilities::default() }
    }

    #[test]
    fn server_tools_and_mcp_servers_become_the_gateways_tools_after_the_clients() {
        let body = with(json!({
            "tools": [
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 2, "allowed_domains": ["a.example"]},
                {"name": "ls", "input_schema": {"type": "object"}},
                {"type": "code_execution_20250522", "name": "code_execution"},
            ],
            "mcp_servers": [
                {"type": "url", "url": "https://mcp.example/mcp", "name": "docs", "authorization_token": "t0k",
                 "tool_configuration": {"allowed_tools": ["search"]}},
                {"type": "url", "url": "https://off.example/mcp", "name": "off", "tool_configuration": {"enabled": false}},
            ],
        }));
        let translated =
            into_engine(MessagesRequest::from_value(body).unwrap(), &all_tools(), &RequestLimits::default())
                .unwrap_or_else(|e| panic!("{e:?}"));
        let tools: Vec<Value> = translated.request.tools.iter().map(|t| serde_json::to_value(t).unwrap()).collect();
        let kinds: Vec<&str> = tools.iter().map(|t| t["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["function", "web_search", "code_interpreter", "mcp"]);
        assert_eq!(tools[1]["filters"]["allowed_domains"], json!(["a.example"]));
        assert_eq!(tools[3]["server_label"], "docs");
        assert_eq!(tools[3]["require_approval"], "never");
        assert_eq!(translated.request.max_tool_calls, Some(2));
        assert_eq!(
            translated.request.include,
            ["reasoning.encrypted_content", "web_search_call.model_result", "code_interpreter_call.outputs"]
        );
    }

    #[test]
    fn a_gateway_tool_that_is_not_enabled_is_refused_at_its_declaration() {
        let body = with(json!({
            "tools": [{"name": "ls", "input_schema": {"type": "object"}}, {"type": "code_execution_20250522", "name": "code_execution"}],
        }));
        let error = translate(body).unwrap_err();
        assert_eq!((error.status, error.param.as_deref()), (400, Some("tools[1].type")));
        let expected = "tools[1].type: 'code_execution_20250522' runs on the gateway's code_interpreter tool. \
                        Tool type 'code_interpreter' is not enabled";
        assert!(error.message.starts_with(expected), "{}", error.message);
        let mcp = with(json!({"mcp_servers": [{"type": "url", "url": "https://mcp.example/mcp", "name": "docs"}]}));
        let error = translate(mcp).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("mcp_servers[0]"), "{error:?}");
        let plain_http =
            with(json!({"mcp_servers": [{"type": "url", "url": "http://mcp.example/mcp", "name": "docs"}]}));
        let caps = Capabilities { remote_mcp: true, remote_url_checks: true, ..Capabilities::default() };
        let error = into_engine(MessagesRequest::from_value(plain_http).unwrap(), &caps, &RequestLimits::default())
            .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("mcp_servers[0].url"), "{error:?}");
        assert_eq!(error.message, "Remote MCP `url` must use `https`.");
    }

    #[test]
    fn replayed_gateway_tool_blocks_become_the_engines_items() {
        let shown = URL_SAFE_NO_PAD.encode(json!({"url": "https://a.example/", "title": "A"}).to_string());
        let body = with(json!({
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
            "mcp_servers": [{"type": "url", "url": "https://mcp.example/mcp", "name": "docs"}],
            "messages": [
                {"role": "user", "content": "look it up"},
                {"role": "assistant", "content": [
                    {"type": "server_tool_use", "id": "srvtoolu_ws_1", "name": "web_search", "input": {"query": "a"}},
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_ws_1", "content": [
                        {"type": "web_search_result", "url": "https://a.example/", "title": "A", "encrypted_content": shown}]},
                    {"type": "mcp_tool_use", "id": "mcptoolu_mcp_2", "name": "search", "server_name": "docs", "input": {"q": "a"}},
                    {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_mcp_2", "is_error": false, "content": [{"type": "text", "text": "hit"}]},
                    {"type": "text", "text": "Found it."},
                ]},
                {"role": "user", "content": "thanks"},
            ],
        }));
        let translated =
            into_engine(MessagesRequest::from_value(body).unwrap(), &all_tools(), &RequestLimits::default())
                .unwrap_or_else(|e| panic!("{e:?}"));
        let items: Vec<Value> = translated.request.input.iter().map(item_json).collect();
        let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["message", "web_search_call", "mcp_call", "message", "message"]);
        assert_eq!(items[1]["id"], "ws_1");
        assert_eq!(
            items[1]["model_result"],
            json!({"action": {"type": "search", "query": "a", "queries": ["a"], "sources": [{"type": "url", "url": "https://a.example/"}]},
                   "results": [{"url": "https://a.example/", "title": "A"}]}).to_string()
        );
        assert_eq!((items[2]["id"].as_str(), items[2]["output"].as_str()), (Some("mcp_2"), Some("hit")));

        let unanswered = with(json!({"messages": [
            {"role": "user", "content": "look it up"},
            {"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "srvtoolu_ws_1", "name": "web_search", "input": {"query": "a"}}]},
        ]}));
        let error = translate(unanswered).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[1].content[0]"));
    }
}
