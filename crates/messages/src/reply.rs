//! A finished engine response as a Messages `message` body: its content blocks in the order the
//! engine produced its items, its `stop_reason` and `stop_sequence`, and its `usage` — shaped
//! as the official `anthropic` SDKs type them (`Message`, `TextBlock`, `ThinkingBlock`,
//! `RedactedThinkingBlock`, `ToolUseBlock`, `Usage`). The stream ([`crate::stream`]) builds its
//! blocks, stop reason and usage with the same functions, so both replies agree.
//!
//! - A `tool_use` block's `id` is the function call's `call_id`, and its `input` the call's
//!   arguments parsed; arguments that are not a JSON object (invalid JSON, an array, a string)
//!   become `{}` — the client's own input check then tells the model what was missing.
//! - A `thinking` block's `signature` is the reasoning item's sealed `encrypted_content` (the
//!   request side asks the engine for it); with [`ThinkingDisplay::Omitted`] its `thinking` is
//!   empty and the signature still carries the reasoning. A reasoning item without text but with
//!   a sealed blob is a `redacted_thinking` block whose `data` is the blob.
//! - The gateway's own tools (web search, code execution, MCP) are blocks made by
//!   [`crate::server_tools`]: a call (`server_tool_use`, `mcp_tool_use`) and its result, and
//!   `usage.server_tool_use` counts the web searches; links to the pages searched are citations
//!   of their text blocks.
//! - `file_search` has no Anthropic counterpart a Messages request could declare, so its items
//!   never reach this face; were one there, it would show nothing (its `file_citation`s carry no
//!   Anthropic citation either): a Messages client sees the answer's text only.
//! - `usage.input_tokens` counts the input tokens the upstream did not read from its prefix
//!   cache: Anthropic's three input counts add up to the whole input, and
//!   `cache_read_input_tokens` is the upstream's cached tokens.

use respgw_protocol::Usage;
use respgw_protocol::items::{ContentPart, Item, ReasoningItem};
use respgw_protocol::request::ServiceTier;
use respgw_protocol::response::{IncompleteReason, ResponseObject, ResponseStatus};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::server_tools::web_search::PageTexts;
use crate::server_tools::{self, ServerToolUsage};
use crate::shape::{ReplyShape, ThinkingDisplay};

/// A `message` body (`"type": "message"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageBody {
    /// `msg_` and the engine response's id ([`message_id`]).
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub role: &'static str,
    /// The model as the request named it.
    pub model: String,
    pub content: Vec<ContentBlock>,
    /// `null` only in a stream's `message_start`.
    pub stop_reason: Option<StopReason>,
    pub stop_sequence: Option<String>,
    pub usage: MessageUsage,
}

/// One content block of a message. The gateway tools' blocks ([`crate::server_tools`]): a call
/// (`server_tool_use`, named `web_search` or `code_execution`; `mcp_tool_use` of a server of
/// `mcp_servers`) and its result, whose `content` is made by the tool's module.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// A `text` block with the `web_search_result_location` citations of its links.
    #[serde(rename = "text")]
    CitedText {
        text: String,
        citations: Vec<Value>,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ServerToolUse {
        id: String,
        name: String,
        input: Value,
    },
    WebSearchToolResult {
        tool_use_id: String,
        content: Value,
    },
    CodeExecutionToolResult {
        tool_use_id: String,
        content: Value,
    },
    McpToolUse {
        id: String,
        name: String,
        server_name: String,
        input: Value,
    },
    McpToolResult {
        tool_use_id: String,
        is_error: bool,
        content: Value,
    },
}

/// Why the message ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished on its own.
    EndTurn,
    /// The upstream cut the answer at `max_tokens`.
    MaxTokens,
    /// The model produced one of the request's `stop_sequences` (named in `stop_sequence`).
    StopSequence,
    /// The model called the client's tools; the client runs them and sends the results.
    ToolUse,
    /// The upstream's content filter stopped the answer.
    Refusal,
}

/// `usage` of a message (the SDK's `Usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MessageUsage {
    /// Input tokens not read from the upstream's prefix cache.
    pub input_tokens: u64,
    /// Always 0: model servers fill their prefix caches on their own, never on request.
    pub cache_creation_input_tokens: u64,
    /// Input tokens the upstream read from its prefix cache.
    pub cache_read_input_tokens: u64,
    /// The cache writes by time to live: none (see `cache_creation_input_tokens`).
    pub cache_creation: CacheCreation,
    pub output_tokens: u64,
    /// `priority` when the request asked for it, else `standard`.
    pub service_tier: &'static str,
    /// The web searches run, when there were any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_tool_use: Option<ServerToolUsage>,
}

/// `usage.cache_creation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct CacheCreation {
    pub ephemeral_5m_input_tokens: u64,
    pub ephemeral_1h_input_tokens: u64,
}

impl MessageUsage {
    /// The engine's counts, summed over every upstream call of the response.
    pub fn from_engine(usage: &Usage, tier: ServiceTier) -> Self {
        let cached = usage.input_tokens_details.cached_tokens.min(usage.input_tokens);
        MessageUsage {
            input_tokens: usage.input_tokens - cached,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: cached,
            cache_creation: CacheCreation::default(),
            output_tokens: usage.output_tokens,
            service_tier: match tier {
                ServiceTier::Priority => "priority",
                ServiceTier::Auto | ServiceTier::Default | ServiceTier::Flex => "standard",
            },
            server_tool_use: None,
        }
    }
}

/// The message id of the engine response `response_id`: `msg_` instead of `resp_`.
pub fn message_id(response_id: &str) -> String {
    format!("msg_{}", response_id.strip_prefix("resp_").unwrap_or(response_id))
}

/// The `message` body of a finished (completed or incomplete) engine response.
pub fn message(response: &ResponseObject, shape: &ReplyShape) -> MessageBody {
    let pages = PageTexts::of(&response.output);
    let (stop_reason, stop_sequence) = stop_reason(response, shape);
    MessageBody {
        id: message_id(&response.id),
        kind: "message",
        role: "assistant",
        model: shape.model.clone(),
        content: response.output.iter().flat_map(|item| blocks(item, shape, &pages)).collect(),
        stop_reason: Some(stop_reason),
        stop_sequence,
        usage: MessageUsage {
            server_tool_use: server_tools::usage(&response.output),
            ..MessageUsage::from_engine(&response.usage.unwrap_or_default(), response.service_tier)
        },
    }
}

/// Why a finished response ended, and the stop sequence when that is why. A stop string the
/// upstream names but the request did not give (a model's own stop words) is an `end_turn`, as
/// is a stop sequence the upstream did not name.
pub fn stop_reason(response: &ResponseObject, shape: &ReplyShape) -> (StopReason, Option<String>) {
    match (response.status, response.incomplete_details.as_ref().map(|d| d.reason)) {
        (ResponseStatus::Incomplete, Some(IncompleteReason::MaxOutputTokens)) => (StopReason::MaxTokens, None),
        (ResponseStatus::Incomplete, Some(IncompleteReason::ContentFilter)) => (StopReason::Refusal, None),
        _ if response.output.iter().any(|item| matches!(item, Item::FunctionCall(_))) => (StopReason::ToolUse, None),
        _ => match &response.stop_sequence {
            Some(stop) if shape.stop_sequences.contains(stop) => (StopReason::StopSequence, Some(stop.clone())),
            _ => (StopReason::EndTurn, None),
        },
    }
}

/// The content blocks an output item stands for; `pages` are what web search showed the model,
/// quoted in the citations of text blocks.
pub fn blocks(item: &Item, shape: &ReplyShape, pages: &PageTexts) -> Vec<ContentBlock> {
    match item {
        Item::Message(message) => message.content.iter().filter_map(|part| text_block(part, pages)).collect(),
        Item::Reasoning(reasoning) => reasoning_block(reasoning, shape).into_iter().collect(),
        Item::FunctionCall(call) => vec![ContentBlock::ToolUse {
            id: call.call_id.clone(),
            name: call.name.clone(),
            input: tool_input(&call.arguments),
        }],
        Item::CodeInterpreterCall(_) | Item::WebSearchCall(_) | Item::McpCall(_) => {
            server_tools::blocks(item).unwrap_or_default()
        }
        // A server's tool list is the gateway's business; every MCP call runs without approval.
        Item::McpListTools(_) | Item::McpApprovalRequest(_) => Vec::new(),
        // No Messages request declares file_search (see the module's comment): the text only.
        Item::FileSearchCall(_) => Vec::new(),
        // Client tools of other shapes (`custom`, `local_shell`) cannot be declared in a
        // Messages request, a `compaction` item is the engine's own record of a compacted
        // conversation, and the rest are input items, never output.
        Item::CustomToolCall(_)
        | Item::LocalShellCall(_)
        | Item::Compaction(_)
        | Item::FunctionCallOutput(_)
        | Item::McpApprovalResponse(_)
        | Item::CustomToolCallOutput(_)
        | Item::LocalShellCallOutput(_) => Vec::new(),
    }
}

/// A `text` block for an answer's content part, with a citation for each `url_citation`
/// annotation (links to pages web search showed the model).
fn text_block(part: &ContentPart, pages: &PageTexts) -> Option<ContentBlock> {
    match part {
        ContentPart::OutputText { text, annotations, .. } => {
            let citations: Vec<Value> = annotations.iter().filter_map(|a| pages.citation(a)).collect();
            if citations.is_empty() {
                Some(ContentBlock::Text { text: text.clone() })
            } else {
                Some(ContentBlock::CitedText { text: text.clone(), citations })
            }
        }
        ContentPart::Refusal { refusal } => Some(ContentBlock::Text { text: refusal.clone() }),
        // Input parts never appear in an answer.
        ContentPart::InputText { .. } | ContentPart::InputImage { .. } | ContentPart::InputFile(_) => None,
    }
}

/// The block a reasoning item stands for: `thinking` when it has text, `redacted_thinking` when
/// it has only a sealed blob, nothing when it has neither.
pub fn reasoning_block(reasoning: &ReasoningItem, shape: &ReplyShape) -> Option<ContentBlock> {
    let text = reasoning.text();
    let blob = reasoning.encrypted_content.clone();
    if text.is_empty() {
        return blob.map(|data| ContentBlock::RedactedThinking { data });
    }
    let thinking = match shape.thinking {
        ThinkingDisplay::Text => text,
        ThinkingDisplay::Omitted => String::new(),
    };
    Some(ContentBlock::Thinking { thinking, signature: blob.unwrap_or_default() })
}

/// A call's arguments as a `tool_use` block's `input`: the JSON object they hold, else `{}`.
pub fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(input)) => Value::Object(input),
        _ => Value::Object(Map::new()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use respgw_protocol::CreateResponseRequest;
    use respgw_protocol::items::{FunctionCallItem, ItemStatus, MessageItem, MessageRole, ReasoningText};
    use respgw_protocol::response::{IncompleteDetails, InputTokensDetails};
    use serde_json::json;

    use super::*;

    /// A response to a plain request, finished with `output` and `usage`.
    pub(crate) fn finished(output: Vec<Item>, usage: Usage) -> ResponseObject {
        let request = CreateResponseRequest::from_slice(br#"{"model":"m","input":"hi","store":false}"#)
            .unwrap()
            .validate(&Default::default())
            .unwrap();
        let mut response = ResponseObject::in_progress("resp_abc123".into(), 1, &request);
        response.status = ResponseStatus::Completed;
        response.output = output;
        response.usage = Some(usage);
        response
    }

    pub(crate) fn shape() -> ReplyShape {
        ReplyShape { model: "claude-local".into(), thinking: ThinkingDisplay::Text, stop_sequences: Vec::new() }
    }

    pub(crate) fn usage(input: u64, cached: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            input_tokens_details: InputTokensDetails { cached_tokens: cached, cache_write_tokens: 0 },
            output_tokens: output,
            total_tokens: input + output,
            ..Default::default()
        }
    }

    pub(crate) fn text(text: &str) -> Item {
        Item::Message(MessageItem {
            id: "msg_1".into(),
            role: MessageRole::Assistant,
            status: ItemStatus::Completed,
            content: vec![ContentPart::output_text(text)],
        })
    }

    pub(crate) fn reasoning(text: &str, blob: Option<&str>) -> Item {
        Item::Reasoning(ReasoningItem {
            id: "rs_1".into(),
            summary: Vec::new(),
            content: vec![ReasoningText { text: text.into() }],
            encrypted_content: blob.map(str::to_owned),
        })
    }

    pub(crate) fn call(call_id: &str, name: &str, arguments: &str) -> Item {
        Item::FunctionCall(FunctionCallItem {
            id: format!("fc_{call_id}"),
            call_id: call_id.into(),
            name: name.into(),
            namespace: None,
            arguments: arguments.into(),
            status: ItemStatus::Completed,
        })
    }

    #[test]
    fn a_text_answer_is_a_message_with_one_text_block() {
        let body = serde_json::to_value(message(&finished(vec![text("Hello.")], usage(12, 0, 3)), &shape())).unwrap();
        assert_eq!(
            body,
            json!({
                "id": "msg_abc123", "type": "message", "role": "assistant", "model": "claude-local",
                "content": [{"type": "text", "text": "Hello."}],
                "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                    "output_tokens": 3, "service_tier": "standard"}
            })
        );
    }

    #[test]
    fn cached_input_tokens_are_cache_reads_and_not_input_tokens() {
        let body = message(&finished(vec![text("Hi.")], usage(1000, 768, 5)), &shape());
        assert_eq!((body.usage.input_tokens, body.usage.cache_read_input_tokens), (232, 768));
        assert_eq!(body.usage.output_tokens, 5);
    }

    #[test]
    fn thinking_comes_before_the_text_with_its_blob_as_signature() {
        let body = message(
            &finished(vec![reasoning("Let me see.", Some("rgw2.k.blob")), text("4")], usage(1, 0, 1)),
            &shape(),
        );
        assert_eq!(
            body.content,
            [
                ContentBlock::Thinking { thinking: "Let me see.".into(), signature: "rgw2.k.blob".into() },
                ContentBlock::Text { text: "4".into() }
            ]
        );
    }

    #[test]
    fn omitted_thinking_keeps_only_the_signature() {
        let shape = ReplyShape { thinking: ThinkingDisplay::Omitted, ..shape() };
        let body =
            message(&finished(vec![reasoning("secret plan", Some("rgw2.k.blob")), text("4")], usage(1, 0, 1)), &shape);
        assert_eq!(
            body.content[0],
            ContentBlock::Thinking { thinking: String::new(), signature: "rgw2.k.blob".into() }
        );
    }

    #[test]
    fn reasoning_with_only_a_blob_is_redacted_thinking() {
        let body = message(&finished(vec![reasoning("", Some("rgw2.k.blob")), text("4")], usage(1, 0, 1)), &shape());
        assert_eq!(body.content[0], ContentBlock::RedactedThinking { data: "rgw2.k.blob".into() });
        let body = message(&finished(vec![reasoning("", None), text("4")], usage(1, 0, 1)), &shape());
        assert_eq!(body.content, [ContentBlock::Text { text: "4".into() }]);
    }

    #[test]
    fn function_calls_are_tool_use_blocks_in_order_and_stop_for_tool_use() {
        let output = vec![
            text("Checking both."),
            call("call_a", "get_weather", r#"{"city":"Paris"}"#),
            call("call_b", "get_time", "{}"),
        ];
        let body = serde_json::to_value(message(&finished(output, usage(1, 0, 1)), &shape())).unwrap();
        assert_eq!(body["stop_reason"], "tool_use");
        assert_eq!(
            body["content"],
            json!([
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_b", "name": "get_time", "input": {}}
            ])
        );
    }

    #[test]
    fn arguments_that_are_not_an_object_become_an_empty_input() {
        for arguments in ["[1, 2]", "\"Paris\"", "{\"city\": \"Par", ""] {
            assert_eq!(tool_input(arguments), json!({}), "{arguments}");
        }
    }

    #[test]
    fn cut_at_max_output_tokens_is_max_tokens() {
        let mut response = finished(vec![text("Once upon")], usage(1, 0, 16));
        response.status = ResponseStatus::Incomplete;
        response.incomplete_details = Some(IncompleteDetails { reason: IncompleteReason::MaxOutputTokens });
        assert_eq!(stop_reason(&response, &shape()), (StopReason::MaxTokens, None));
        response.incomplete_details = Some(IncompleteDetails { reason: IncompleteReason::ContentFilter });
        assert_eq!(stop_reason(&response, &shape()), (StopReason::Refusal, None));
    }

    #[test]
    fn a_named_stop_sequence_of_the_request_is_reported() {
        let shape = ReplyShape { stop_sequences: vec!["END".into(), "STOP".into()], ..shape() };
        let mut response = finished(vec![text("1, 2, 3")], usage(1, 0, 1));
        response.stop_sequence = Some("STOP".into());
        assert_eq!(stop_reason(&response, &shape), (StopReason::StopSequence, Some("STOP".into())));
        // A stop string the request did not give, or none named: the model ended its turn.
        response.stop_sequence = Some("<|eot|>".into());
        assert_eq!(stop_reason(&response, &shape), (StopReason::EndTurn, None));
        response.stop_sequence = None;
        assert_eq!(stop_reason(&response, &shape), (StopReason::EndTurn, None));
    }

    #[test]
    fn priority_is_the_only_tier_reported_as_such() {
        let mut response = finished(vec![text("Hi.")], usage(1, 0, 1));
        response.service_tier = ServiceTier::Priority;
        assert_eq!(message(&response, &shape()).usage.service_tier, "priority");
    }
}
