//! Engine events as Anthropic's stream events: [`MessageStream`] is fed each [`ResponseEvent`]
//! of a run in order and gives back the Messages events it stands for (zero or more).
//!
//! The sequence is Anthropic's: `message_start` (empty content, no stop reason) and a `ping`;
//! then each content block as `content_block_start`, its `content_block_delta`s and
//! `content_block_stop`, numbered by Anthropic's `index` (blocks of the message, not engine
//! output indexes), one block at a time; then `message_delta` (stop reason, stop sequence,
//! usage) and `message_stop`. A run that fails ends the stream with an `error` event instead.
//! Nothing follows the last event.
//!
//! - Usage is only known when the run ends: `message_start` carries zeros, and `message_delta`
//!   carries every count (`input_tokens` and the cache counts included), which the SDKs copy
//!   onto the accumulated message — so it ends with the same usage as a JSON reply.
//! - A `thinking` block opens with the reasoning's first delta; `thinking_delta`s carry its text
//!   (none with `display: "omitted"`), and a `signature_delta` with the sealed blob goes out just
//!   before its stop. A reasoning item that ends without text but with a blob is a whole
//!   `redacted_thinking` block.
//! - A `tool_use` block opens when the engine announces the function call; its arguments stream
//!   as `input_json_delta`s once they start with `{`. Arguments that start otherwise are held
//!   and sent whole at the end as the `input` the JSON reply has (`{}` for anything but an object;
//!   see [`crate::reply::tool_input`]). Arguments that start with `{` but end broken reach the
//!   client as the model wrote them.
//! - A gateway tool's call and result blocks go out when its item is done (the engine runs the
//!   tool before it says what it found): the call block as a `tool_use` is streamed whole (empty
//!   `input`, one `input_json_delta`), then the result block whole in its `content_block_start`,
//!   as Anthropic streams them.
//! - A link of the answer to a page web search showed the model is a `citations_delta` of its
//!   text block when the engine finds it (after the link's text).
//! - A block ends when the next one starts or its item is done. An upstream that interleaves the
//!   arguments of two calls gets the late fragments sent to the earlier call's `index`, after its
//!   stop: nothing is lost, and the SDKs accumulate by index.

use std::io::Write;

use respgw_protocol::events::StreamError;
use respgw_protocol::items::{ContentPart, Item};
use respgw_protocol::{ErrorType, ResponseEvent, ResponseObject};
use serde::Serialize;
use serde_json::Value;

use crate::error::{MessagesErrorType, messages_error_body};
use crate::reply::{
    ContentBlock, MessageBody, MessageUsage, StopReason, message_id, reasoning_block, stop_reason, tool_input,
};
use crate::server_tools::web_search::PageTexts;
use crate::server_tools::{self, ServerToolUsage};
use crate::shape::{ReplyShape, ThinkingDisplay};

/// One event of a Messages stream; its serde tag is the wire `type` (also the SSE `event:`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MessagesEvent {
    MessageStart {
        message: Box<MessageBody>,
    },
    ContentBlockStart {
        index: usize,
        content_block: ContentBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDelta,
        usage: MessageDeltaUsage,
    },
    MessageStop,
    Ping,
    /// `error` holds `{"type": …, "message": …}` ([`messages_error_body`]'s `error`).
    Error {
        error: Value,
    },
}

/// A `content_block_delta`'s `delta`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    /// A `web_search_result_location` citation of the text block.
    CitationsDelta {
        citation: Value,
    },
}

/// `message_delta`'s `delta`: what the message ended with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageDelta {
    pub stop_reason: StopReason,
    pub stop_sequence: Option<String>,
}

/// `message_delta`'s `usage` (the SDK's `MessageDeltaUsage`): the final counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MessageDeltaUsage {
    pub input_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
    pub output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_tool_use: Option<ServerToolUsage>,
}

impl MessagesEvent {
    /// An `error` event of this Anthropic type.
    pub fn error(kind: MessagesErrorType, message: &str) -> Self {
        let mut body = messages_error_body(kind, message);
        MessagesEvent::Error { error: body["error"].take() }
    }

    /// The wire `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            MessagesEvent::MessageStart { .. } => "message_start",
            MessagesEvent::ContentBlockStart { .. } => "content_block_start",
            MessagesEvent::ContentBlockDelta { .. } => "content_block_delta",
            MessagesEvent::ContentBlockStop { .. } => "content_block_stop",
            MessagesEvent::MessageDelta { .. } => "message_delta",
            MessagesEvent::MessageStop => "message_stop",
            MessagesEvent::Ping => "ping",
            MessagesEvent::Error { .. } => "error",
        }
    }

    /// Whether the stream ends with this event.
    pub fn is_last(&self) -> bool {
        matches!(self, MessagesEvent::MessageStop | MessagesEvent::Error { .. })
    }

    /// Append the SSE frame `event: <type>\ndata: <json>\n\n` to `out`; on an error, `out` is
    /// left as it was.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        let start = out.len();
        let written = write!(out, "event: {}\ndata: ", self.kind())
            .map_err(serde_json::Error::io)
            .and_then(|()| serde_json::to_writer(&mut *out, self));
        if let Err(e) = written {
            out.truncate(start);
            return Err(e);
        }
        out.extend_from_slice(b"\n\n");
        Ok(())
    }
}

/// What kind of block is open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Text,
    Thinking,
    ToolUse,
    /// A gateway tool's result, whole in its start.
    ToolResult,
}

/// The block that receives deltas now.
#[derive(Debug, Clone, Copy)]
struct OpenBlock {
    /// Anthropic's `index`.
    index: usize,
    /// The engine item it comes from.
    output_index: usize,
    kind: BlockKind,
}

/// A `tool_use` block and the arguments of its call.
#[derive(Debug)]
struct ToolUseBlock {
    index: usize,
    output_index: usize,
    /// Whether the arguments stream as they come (they start with `{`); `None` while only
    /// whitespace has arrived.
    live: Option<bool>,
    /// Arguments not sent yet.
    held: String,
}

/// The translation of one run's events; see the module docs for the sequence it keeps.
#[derive(Debug)]
pub struct MessageStream {
    shape: ReplyShape,
    /// The `index` the next block gets.
    next_index: usize,
    open: Option<OpenBlock>,
    tool_uses: Vec<ToolUseBlock>,
    /// What web search showed the model so far, quoted in citations.
    pages: PageTexts,
    started: bool,
    ended: bool,
}

impl MessageStream {
    /// The translation of a run answering a request of this shape.
    pub fn new(shape: ReplyShape) -> Self {
        MessageStream {
            shape,
            next_index: 0,
            open: None,
            tool_uses: Vec::new(),
            pages: PageTexts::default(),
            started: false,
            ended: false,
        }
    }

    /// Whether the last event (`message_stop` or `error`) has gone out.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Translate the next engine event, appending what it stands for to `out`.
    pub fn on_event(&mut self, event: ResponseEvent, out: &mut Vec<MessagesEvent>) {
        if self.ended {
            return;
        }
        match event {
            ResponseEvent::Created { response } => self.start(&response, out),
            ResponseEvent::Queued { .. } | ResponseEvent::InProgress { .. } => {}
            ResponseEvent::OutputItemAdded { output_index, item } => self.on_item_added(output_index, &item, out),
            ResponseEvent::OutputItemDone { output_index, item } => self.on_item_done(output_index, &item, out),
            ResponseEvent::ContentPartAdded { output_index, part, .. } => match *part {
                ContentPart::OutputText { .. } | ContentPart::Refusal { .. } => {
                    self.open_text(output_index, out);
                }
                // Input parts never appear in an answer.
                ContentPart::InputText { .. } | ContentPart::InputImage { .. } | ContentPart::InputFile(_) => {}
            },
            ResponseEvent::OutputTextDelta { output_index, delta, .. } => {
                let index = self.open_text(output_index, out);
                out.push(MessagesEvent::ContentBlockDelta { index, delta: BlockDelta::TextDelta { text: delta } });
            }
            ResponseEvent::ContentPartDone { output_index, part, .. } => {
                // A refusal arrives whole, with its part.
                if let ContentPart::Refusal { refusal } = *part
                    && !refusal.is_empty()
                {
                    let index = self.open_text(output_index, out);
                    out.push(MessagesEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::TextDelta { text: refusal },
                    });
                }
                self.close_block_of(output_index, out);
            }
            ResponseEvent::ReasoningDelta { output_index, delta, .. } => {
                let index = self.open_thinking(output_index, out);
                if self.shape.thinking == ThinkingDisplay::Text {
                    let delta = BlockDelta::ThinkingDelta { thinking: delta };
                    out.push(MessagesEvent::ContentBlockDelta { index, delta });
                }
            }
            ResponseEvent::FunctionCallArgumentsDelta { output_index, delta, .. } => {
                self.on_arguments(output_index, &delta, out);
            }
            // The text, the reasoning and the arguments came in deltas; their items close the blocks.
            ResponseEvent::OutputTextDone { .. }
            | ResponseEvent::ReasoningDone { .. }
            | ResponseEvent::FunctionCallArgumentsDone { .. } => {}
            ResponseEvent::OutputTextAnnotationAdded { output_index, annotation, .. } => {
                if let Some(citation) = self.pages.citation(&annotation) {
                    let index = self.open_text(output_index, out);
                    out.push(MessagesEvent::ContentBlockDelta {
                        index,
                        delta: BlockDelta::CitationsDelta { citation },
                    });
                }
            }
            // A gateway tool's blocks go out whole when its item is done, and a compaction is the
            // engine's own business: no blocks for these.
            ResponseEvent::CodeInterpreterCallInProgress { .. }
            | ResponseEvent::CodeInterpreterCallCodeDelta { .. }
            | ResponseEvent::CodeInterpreterCallCodeDone { .. }
            | ResponseEvent::CodeInterpreterCallInterpreting { .. }
            | ResponseEvent::CodeInterpreterCallCompleted { .. }
            | ResponseEvent::McpCallInProgress { .. }
            | ResponseEvent::McpCallArgumentsDelta { .. }
            | ResponseEvent::McpCallArgumentsDone { .. }
            | ResponseEvent::McpCallCompleted { .. }
            | ResponseEvent::McpCallFailed { .. }
            | ResponseEvent::McpListToolsInProgress { .. }
            | ResponseEvent::McpListToolsCompleted { .. }
            | ResponseEvent::McpListToolsFailed { .. }
            | ResponseEvent::WebSearchCallInProgress { .. }
            | ResponseEvent::WebSearchCallSearching { .. }
            | ResponseEvent::WebSearchCallCompleted { .. }
            | ResponseEvent::FileSearchCallInProgress { .. }
            | ResponseEvent::FileSearchCallSearching { .. }
            | ResponseEvent::FileSearchCallCompleted { .. }
            | ResponseEvent::CompactionCompacting { .. } => {}
            ResponseEvent::Completed { response } | ResponseEvent::Incomplete { response } => {
                self.finish(&response, out);
            }
            ResponseEvent::Error { error, .. } => self.fail(&error, out),
            // The engine sends `error` before `response.failed`; this covers a failure without one.
            ResponseEvent::Failed { response } => {
                let message = response.error.as_ref().map_or("The response failed.", |e| e.message.as_str());
                self.end_with(MessagesEvent::error(MessagesErrorType::Api, message), out);
            }
        }
    }

    /// `message_start`, with the content empty and the usage not known yet, then a `ping`.
    fn start(&mut self, response: &ResponseObject, out: &mut Vec<MessagesEvent>) {
        if self.started {
            return;
        }
        self.started = true;
        let message = MessageBody {
            id: message_id(&response.id),
            kind: "message",
            role: "assistant",
            model: self.shape.model.clone(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: MessageUsage::from_engine(&Default::default(), response.service_tier),
        };
        out.push(MessagesEvent::MessageStart { message: Box::new(message) });
        out.push(MessagesEvent::Ping);
    }

    fn on_item_added(&mut self, output_index: usize, item: &Item, out: &mut Vec<MessagesEvent>) {
        match item {
            Item::FunctionCall(call) => {
                let content_block = ContentBlock::ToolUse {
                    id: call.call_id.clone(),
                    name: call.name.clone(),
                    input: Value::Object(Default::default()),
                };
                let index = self.start_block(content_block, BlockKind::ToolUse, output_index, out);
                self.tool_uses.push(ToolUseBlock { index, output_index, live: None, held: String::new() });
            }
            // Text and reasoning blocks open with their first content.
            Item::Message(_) | Item::Reasoning(_) => {}
            // No blocks for the rest (see [`crate::reply::blocks`]).
            Item::CodeInterpreterCall(_)
            | Item::WebSearchCall(_)
            | Item::FileSearchCall(_)
            | Item::McpCall(_)
            | Item::McpListTools(_)
            | Item::McpApprovalRequest(_)
            | Item::CustomToolCall(_)
            | Item::LocalShellCall(_)
            | Item::Compaction(_)
            | Item::FunctionCallOutput(_)
            | Item::McpApprovalResponse(_)
            | Item::CustomToolCallOutput(_)
            | Item::LocalShellCallOutput(_) => {}
        }
    }

    fn on_item_done(&mut self, output_index: usize, item: &Item, out: &mut Vec<MessagesEvent>) {
        match item {
            Item::Reasoning(reasoning) => match self.open {
                Some(open) if open.output_index == output_index && open.kind == BlockKind::Thinking => {
                    if let Some(signature) = reasoning.encrypted_content.clone() {
                        let delta = BlockDelta::SignatureDelta { signature };
                        out.push(MessagesEvent::ContentBlockDelta { index: open.index, delta });
                    }
                    self.close_block(out);
                }
                // No delta opened a block: the item is whole now.
                _ => {
                    if let Some(block) = reasoning_block(reasoning, &self.shape) {
                        self.whole_block(block, output_index, out);
                    }
                }
            },
            Item::FunctionCall(call) => {
                let Some(position) = self.tool_uses.iter().position(|t| t.output_index == output_index) else {
                    // A call the engine did not announce first: the block is whole now.
                    let input = tool_input(&call.arguments);
                    let block = ContentBlock::ToolUse { id: call.call_id.clone(), name: call.name.clone(), input };
                    self.whole_block(block, output_index, out);
                    return;
                };
                let tool_use = self.tool_uses.remove(position);
                if tool_use.live != Some(true) {
                    let partial_json = tool_input(&call.arguments).to_string();
                    let delta = BlockDelta::InputJsonDelta { partial_json };
                    out.push(MessagesEvent::ContentBlockDelta { index: tool_use.index, delta });
                }
                self.close_block_of(output_index, out);
            }
            Item::Message(_) => self.close_block_of(output_index, out),
            Item::CodeInterpreterCall(_) | Item::WebSearchCall(_) | Item::McpCall(_) => {
                if let Item::WebSearchCall(call) = item {
                    self.pages.learn(call);
                }
                for block in server_tools::blocks(item).unwrap_or_default() {
                    self.whole_block(block, output_index, out);
                }
            }
            // No blocks for the rest (see [`crate::reply::blocks`]).
            Item::McpListTools(_)
            | Item::FileSearchCall(_)
            | Item::McpApprovalRequest(_)
            | Item::CustomToolCall(_)
            | Item::LocalShellCall(_)
            | Item::Compaction(_)
            | Item::FunctionCallOutput(_)
            | Item::McpApprovalResponse(_)
            | Item::CustomToolCallOutput(_)
            | Item::LocalShellCallOutput(_) => {}
        }
    }

    /// A fragment of a call's arguments: sent when they stream, else held.
    fn on_arguments(&mut self, output_index: usize, fragment: &str, out: &mut Vec<MessagesEvent>) {
        let Some(tool_use) = self.tool_uses.iter_mut().find(|t| t.output_index == output_index) else { return };
        tool_use.held.push_str(fragment);
        if tool_use.live.is_none() {
            let start = tool_use.held.trim_start();
            if start.is_empty() {
                return;
            }
            tool_use.live = Some(start.starts_with('{'));
        }
        if tool_use.live == Some(true) {
            let partial_json = std::mem::take(&mut tool_use.held);
            let delta = BlockDelta::InputJsonDelta { partial_json };
            out.push(MessagesEvent::ContentBlockDelta { index: tool_use.index, delta });
        }
    }

    /// The open text block of the item at `output_index`, started empty (the previous block
    /// closed) when it is not open yet; its `index`.
    fn open_text(&mut self, output_index: usize, out: &mut Vec<MessagesEvent>) -> usize {
        match self.open {
            Some(open) if open.output_index == output_index && open.kind == BlockKind::Text => open.index,
            _ => self.start_block(ContentBlock::Text { text: String::new() }, BlockKind::Text, output_index, out),
        }
    }

    /// [`MessageStream::open_text`] for a thinking block.
    fn open_thinking(&mut self, output_index: usize, out: &mut Vec<MessagesEvent>) -> usize {
        match self.open {
            Some(open) if open.output_index == output_index && open.kind == BlockKind::Thinking => open.index,
            _ => {
                let empty = ContentBlock::Thinking { thinking: String::new(), signature: String::new() };
                self.start_block(empty, BlockKind::Thinking, output_index, out)
            }
        }
    }

    /// `content_block_start` of a new block (the open one closed first); its `index`.
    fn start_block(
        &mut self,
        content_block: ContentBlock,
        kind: BlockKind,
        output_index: usize,
        out: &mut Vec<MessagesEvent>,
    ) -> usize {
        self.close_block(out);
        let index = self.next_index;
        self.next_index += 1;
        out.push(MessagesEvent::ContentBlockStart { index, content_block });
        self.open = Some(OpenBlock { index, output_index, kind });
        index
    }

    /// A block known whole: started empty, filled by one delta each, stopped — as a streamed
    /// one; a `redacted_thinking` block starts whole, as Anthropic sends it.
    fn whole_block(&mut self, block: ContentBlock, output_index: usize, out: &mut Vec<MessagesEvent>) {
        let (start, kind, deltas) = match block {
            ContentBlock::Text { text } => {
                (ContentBlock::Text { text: String::new() }, BlockKind::Text, vec![BlockDelta::TextDelta { text }])
            }
            ContentBlock::CitedText { text, citations } => {
                let mut deltas = vec![BlockDelta::TextDelta { text }];
                deltas.extend(citations.into_iter().map(|citation| BlockDelta::CitationsDelta { citation }));
                (ContentBlock::Text { text: String::new() }, BlockKind::Text, deltas)
            }
            ContentBlock::Thinking { thinking, signature } => {
                let empty = ContentBlock::Thinking { thinking: String::new(), signature: String::new() };
                let mut deltas = Vec::new();
                if !thinking.is_empty() {
                    deltas.push(BlockDelta::ThinkingDelta { thinking });
                }
                if !signature.is_empty() {
                    deltas.push(BlockDelta::SignatureDelta { signature });
                }
                (empty, BlockKind::Thinking, deltas)
            }
            ContentBlock::RedactedThinking { .. } => (block, BlockKind::Thinking, Vec::new()),
            ContentBlock::ServerToolUse { id, name, input } => {
                let empty = ContentBlock::ServerToolUse { id, name, input: Value::Object(Default::default()) };
                (empty, BlockKind::ToolUse, vec![BlockDelta::InputJsonDelta { partial_json: input.to_string() }])
            }
            ContentBlock::McpToolUse { id, name, server_name, input } => {
                let empty =
                    ContentBlock::McpToolUse { id, name, server_name, input: Value::Object(Default::default()) };
                (empty, BlockKind::ToolUse, vec![BlockDelta::InputJsonDelta { partial_json: input.to_string() }])
            }
            ContentBlock::WebSearchToolResult { .. }
            | ContentBlock::CodeExecutionToolResult { .. }
            | ContentBlock::McpToolResult { .. } => (block, BlockKind::ToolResult, Vec::new()),
            ContentBlock::ToolUse { id, name, input } => {
                let empty = ContentBlock::ToolUse { id, name, input: Value::Object(Default::default()) };
                (empty, BlockKind::ToolUse, vec![BlockDelta::InputJsonDelta { partial_json: input.to_string() }])
            }
        };
        let index = self.start_block(start, kind, output_index, out);
        out.extend(deltas.into_iter().map(|delta| MessagesEvent::ContentBlockDelta { index, delta }));
        self.close_block(out);
    }

    /// `content_block_stop` of the open block, if any.
    fn close_block(&mut self, out: &mut Vec<MessagesEvent>) {
        if let Some(open) = self.open.take() {
            out.push(MessagesEvent::ContentBlockStop { index: open.index });
        }
    }

    /// Close the open block if it is the item at `output_index`'s.
    fn close_block_of(&mut self, output_index: usize, out: &mut Vec<MessagesEvent>) {
        if self.open.is_some_and(|open| open.output_index == output_index) {
            self.close_block(out);
        }
    }

    /// The run finished: the open block closes, then `message_delta` and `message_stop`.
    fn finish(&mut self, response: &ResponseObject, out: &mut Vec<MessagesEvent>) {
        self.close_block(out);
        let (stop_reason, stop_sequence) = stop_reason(response, &self.shape);
        let usage = MessageUsage::from_engine(&response.usage.unwrap_or_default(), response.service_tier);
        let usage = MessageDeltaUsage {
            input_tokens: usage.input_tokens,
            cache_creation_input_tokens: usage.cache_creation_input_tokens,
            cache_read_input_tokens: usage.cache_read_input_tokens,
            output_tokens: usage.output_tokens,
            server_tool_use: server_tools::usage(&response.output),
        };
        out.push(MessagesEvent::MessageDelta { delta: MessageDelta { stop_reason, stop_sequence }, usage });
        self.end_with(MessagesEvent::MessageStop, out);
    }

    /// The run failed: an `error` event ends the stream.
    fn fail(&mut self, error: &StreamError, out: &mut Vec<MessagesEvent>) {
        self.end_with(MessagesEvent::error(error_kind(error), &error.message), out);
    }

    /// The run's events stopped short of its end: an `error` event of `kind` ends the stream
    /// (unless it has ended already).
    pub fn end_with_error(&mut self, kind: MessagesErrorType, message: &str, out: &mut Vec<MessagesEvent>) {
        if !self.ended {
            self.end_with(MessagesEvent::error(kind, message), out);
        }
    }

    fn end_with(&mut self, last: MessagesEvent, out: &mut Vec<MessagesEvent>) {
        out.push(last);
        self.ended = true;
    }
}

/// The Anthropic type of a failure reported mid-stream, which carries no HTTP status: from the
/// gateway's error type and code, as [`MessagesErrorType::of`] maps the statuses they go with.
fn error_kind(error: &StreamError) -> MessagesErrorType {
    match (error.error_type, error.code.as_deref()) {
        (_, Some("upstream_unavailable" | "store_unavailable")) => MessagesErrorType::Overloaded,
        (_, Some("upstream_timeout")) => MessagesErrorType::Timeout,
        (ErrorType::AuthenticationError, _) => MessagesErrorType::Authentication,
        (ErrorType::PermissionError, _) => MessagesErrorType::Permission,
        (ErrorType::RateLimitError, _) => MessagesErrorType::RateLimit,
        (ErrorType::InvalidRequestError | ErrorType::BadInput, _) => MessagesErrorType::InvalidRequest,
        (ErrorType::ApiError, _) => MessagesErrorType::Api,
    }
}

#[cfg(test)]
mod tests {
    use respgw_protocol::items::{
        CallStatus, ItemStatus, MessageItem, MessageRole, ReasoningItem, ReasoningText, WebSearchAction,
        WebSearchCallItem,
    };
    use respgw_protocol::response::{IncompleteDetails, IncompleteReason, ResponseStatus};
    use respgw_protocol::{ApiError, Usage};
    use serde_json::json;

    use super::*;
    use crate::reply::message;
    use crate::reply::tests::{call, finished, reasoning, shape, text, usage};

    /// The engine's events for a run whose output is `output`, streamed as the engine streams
    /// it (text and reasoning in `deltas` pieces, call arguments likewise), then `terminal`.
    struct Run {
        events: Vec<ResponseEvent>,
    }

    impl Run {
        fn new() -> Self {
            let response = finished(Vec::new(), Usage::default());
            let created = ResponseObject { status: ResponseStatus::InProgress, usage: None, ..response };
            Run {
                events: vec![
                    ResponseEvent::Created { response: Box::new(created.clone()) },
                    ResponseEvent::InProgress { response: Box::new(created) },
                ],
            }
        }

        fn text(mut self, output_index: usize, pieces: &[&str]) -> Self {
            let item_id = format!("msg_{output_index}");
            let message = |status, content| {
                Box::new(Item::Message(MessageItem {
                    id: item_id.clone(),
                    role: MessageRole::Assistant,
                    status,
                    content,
                }))
            };
            let whole = pieces.concat();
            self.events
                .push(ResponseEvent::OutputItemAdded { output_index, item: message(ItemStatus::InProgress, vec![]) });
            self.events.push(ResponseEvent::ContentPartAdded {
                item_id: item_id.clone(),
                output_index,
                content_index: 0,
                part: Box::new(ContentPart::output_text("")),
            });
            for piece in pieces {
                self.events.push(ResponseEvent::OutputTextDelta {
                    item_id: item_id.clone(),
                    output_index,
                    content_index: 0,
                    delta: (*piece).into(),
                    logprobs: [],
                });
            }
            self.events.push(ResponseEvent::OutputTextDone {
                item_id: item_id.clone(),
                output_index,
                content_index: 0,
                text: whole.clone(),
                logprobs: [],
            });
            self.events.push(ResponseEvent::ContentPartDone {
                item_id: item_id.clone(),
                output_index,
                content_index: 0,
                part: Box::new(ContentPart::output_text(whole.clone())),
            });
            let done = message(ItemStatus::Completed, vec![ContentPart::output_text(whole)]);
            self.events.push(ResponseEvent::OutputItemDone { output_index, item: done });
            self
        }

        fn reasoning(mut self, output_index: usize, pieces: &[&str], blob: Option<&str>) -> Self {
            let item = |text: &str, blob: Option<&str>| {
                Box::new(Item::Reasoning(ReasoningItem {
                    id: format!("rs_{output_index}"),
                    summary: Vec::new(),
                    content: if text.is_empty() { vec![] } else { vec![ReasoningText { text: text.into() }] },
                    encrypted_content: blob.map(str::to_owned),
                }))
            };
            self.events.push(ResponseEvent::OutputItemAdded { output_index, item: item("", None) });
            for piece in pieces {
                self.events.push(ResponseEvent::ReasoningDelta {
                    item_id: format!("rs_{output_index}"),
                    output_index,
                    content_index: 0,
                    delta: (*piece).into(),
                });
            }
            if !pieces.is_empty() {
                self.events.push(ResponseEvent::ReasoningDone {
                    item_id: format!("rs_{output_index}"),
                    output_index,
                    content_index: 0,
                    text: pieces.concat(),
                });
            }
            self.events.push(ResponseEvent::OutputItemDone { output_index, item: item(&pieces.concat(), blob) });
            self
        }

        /// A call announced, its arguments streamed in `pieces`; done later with [`Run::call_done`].
        fn call_start(mut self, output_index: usize, call_id: &str, name: &str, pieces: &[&str]) -> Self {
            let Item::FunctionCall(mut item) = call(call_id, name, "") else { unreachable!() };
            item.status = ItemStatus::InProgress;
            self.events.push(ResponseEvent::OutputItemAdded { output_index, item: Box::new(Item::FunctionCall(item)) });
            for piece in pieces {
                self.events.push(ResponseEvent::FunctionCallArgumentsDelta {
                    item_id: format!("fc_{call_id}"),
                    output_index,
                    delta: (*piece).into(),
                });
            }
            self
        }

        fn call_done(mut self, output_index: usize, call_id: &str, name: &str, arguments: &str) -> Self {
            self.events.push(ResponseEvent::FunctionCallArgumentsDone {
                item_id: format!("fc_{call_id}"),
                output_index,
                name: name.into(),
                arguments: arguments.into(),
            });
            self.events
                .push(ResponseEvent::OutputItemDone { output_index, item: Box::new(call(call_id, name, arguments)) });
            self
        }

        fn completed(mut self, response: ResponseObject) -> Vec<ResponseEvent> {
            let terminal = match response.status {
                ResponseStatus::Incomplete => ResponseEvent::Incomplete { response: Box::new(response) },
                _ => ResponseEvent::Completed { response: Box::new(response) },
            };
            self.events.push(terminal);
            self.events
        }
    }

    fn translate(events: Vec<ResponseEvent>, shape: &ReplyShape) -> Vec<MessagesEvent> {
        let mut stream = MessageStream::new(shape.clone());
        let mut out = Vec::new();
        for event in events {
            stream.on_event(event, &mut out);
        }
        assert!(stream.ended());
        out
    }

    fn kinds(events: &[MessagesEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                MessagesEvent::ContentBlockStart { index, content_block } => {
                    let block = serde_json::to_value(content_block).unwrap();
                    format!("start {index} {}", block["type"].as_str().unwrap())
                }
                MessagesEvent::ContentBlockDelta { index, delta } => {
                    let delta = serde_json::to_value(delta).unwrap();
                    format!("delta {index} {}", delta["type"].as_str().unwrap())
                }
                MessagesEvent::ContentBlockStop { index } => format!("stop {index}"),
                other => other.kind().to_owned(),
            })
            .collect()
    }

    /// The message the official SDKs accumulate from the events (their `accumulate_event`):
    /// blocks by index, deltas appended, `input_json_delta`s parsed at the end, the
    /// `message_delta`'s stop reason and every usage count it carries copied on.
    fn accumulate(events: &[MessagesEvent]) -> Value {
        let mut message = Value::Null;
        let mut json_parts: Vec<String> = Vec::new();
        for event in events {
            match event {
                MessagesEvent::MessageStart { message: start } => message = serde_json::to_value(start).unwrap(),
                MessagesEvent::ContentBlockStart { index, content_block } => {
                    assert_eq!(*index, message["content"].as_array().unwrap().len(), "blocks start in order");
                    message["content"].as_array_mut().unwrap().push(serde_json::to_value(content_block).unwrap());
                    json_parts.push(String::new());
                }
                MessagesEvent::ContentBlockDelta { index, delta } => {
                    let block = &mut message["content"][*index];
                    let append = |field: &str, more: &str, block: &mut Value| {
                        block[field] = json!(format!("{}{more}", block[field].as_str().unwrap()));
                    };
                    match delta {
                        BlockDelta::TextDelta { text } => append("text", text, block),
                        BlockDelta::ThinkingDelta { thinking } => append("thinking", thinking, block),
                        BlockDelta::SignatureDelta { signature } => block["signature"] = json!(signature),
                        BlockDelta::CitationsDelta { citation } => {
                            let citations = block.as_object_mut().unwrap().entry("citations").or_insert(json!([]));
                            citations.as_array_mut().unwrap().push(citation.clone());
                        }
                        BlockDelta::InputJsonDelta { partial_json } => {
                            json_parts[*index].push_str(partial_json);
                            block["input"] = serde_json::from_str(&json_parts[*index]).unwrap_or(json!({}));
                        }
                    }
                }
                MessagesEvent::MessageDelta { delta, usage } => {
                    message["stop_reason"] = json!(delta.stop_reason);
                    message["stop_sequence"] = json!(delta.stop_sequence);
                    for (key, count) in serde_json::to_value(usage).unwrap().as_object().unwrap() {
                        message["usage"][key] = count.clone();
                    }
                }
                MessagesEvent::ContentBlockStop { .. }
                | MessagesEvent::MessageStop
                | MessagesEvent::Ping
                | MessagesEvent::Error { .. } => {}
            }
        }
        message
    }

    /// The stream of `output` ends as the JSON reply of the same response.
    fn assert_accumulates_to_the_json_reply(events: &[MessagesEvent], response: &ResponseObject, shape: &ReplyShape) {
        assert_eq!(accumulate(events), serde_json::to_value(message(response, shape)).unwrap());
    }

    #[test]
    fn a_text_answer_streams_in_anthropics_order() {
        let response = finished(vec![text("Hello.")], usage(12, 0, 3));
        let out = translate(Run::new().text(0, &["Hel", "lo."]).completed(response.clone()), &shape());
        assert_eq!(
            kinds(&out),
            [
                "message_start",
                "ping",
                "start 0 text",
                "delta 0 text_delta",
                "delta 0 text_delta",
                "stop 0",
                "message_delta",
                "message_stop"
            ]
        );
        let MessagesEvent::MessageStart { message: start } = &out[0] else { panic!() };
        assert_eq!(start.id, "msg_abc123");
        assert_eq!((start.stop_reason, start.content.len(), start.usage.input_tokens), (None, 0, 0));
        assert_accumulates_to_the_json_reply(&out, &response, &shape());
    }

    #[test]
    fn events_are_framed_as_sse_with_their_type() {
        let mut frame = Vec::new();
        let delta = BlockDelta::TextDelta { text: "Pa\nris".into() };
        MessagesEvent::ContentBlockDelta { index: 2, delta }.encode_into(&mut frame).unwrap();
        MessagesEvent::MessageStop.encode_into(&mut frame).unwrap();
        MessagesEvent::Ping.encode_into(&mut frame).unwrap();
        assert_eq!(
            String::from_utf8(frame).unwrap(),
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"text_delta\",\"text\":\"Pa\\nris\"}}\n\n\
             event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n\
             event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
    }

    #[test]
    fn thinking_then_text_with_the_signature_just_before_the_thinking_stops() {
        let blob = "rgw2.k.sealed";
        let response = finished(vec![reasoning("Two and two.", Some(blob)), text("4")], usage(20, 0, 9));
        let events =
            Run::new().reasoning(0, &["Two and ", "two."], Some(blob)).text(1, &["4"]).completed(response.clone());
        let out = translate(events, &shape());
        assert_eq!(
            kinds(&out),
            [
                "message_start",
                "ping",
                "start 0 thinking",
                "delta 0 thinking_delta",
                "delta 0 thinking_delta",
                "delta 0 signature_delta",
                "stop 0",
                "start 1 text",
                "delta 1 text_delta",
                "stop 1",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(
            serde_json::to_value(&out[2]).unwrap(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
        );
        assert_eq!(
            serde_json::to_value(&out[5]).unwrap(),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": blob}})
        );
        assert_accumulates_to_the_json_reply(&out, &response, &shape());
    }

    #[test]
    fn omitted_thinking_streams_only_the_signature() {
        let shape = ReplyShape { thinking: ThinkingDisplay::Omitted, ..shape() };
        let response = finished(vec![reasoning("Private.", Some("rgw2.k.b")), text("Done.")], usage(5, 0, 5));
        let events = Run::new()
            .reasoning(0, &["Pri", "vate."], Some("rgw2.k.b"))
            .text(1, &["Done."])
            .completed(response.clone());
        let out = translate(events, &shape);
        assert_eq!(kinds(&out)[2..5], ["start 0 thinking", "delta 0 signature_delta", "stop 0"].map(String::from));
        assert!(!serde_json::to_string(&out).unwrap().contains("Private"));
        assert_accumulates_to_the_json_reply(&out, &response, &shape);
    }

    #[test]
    fn reasoning_without_text_but_sealed_is_a_whole_redacted_thinking_block() {
        let response = finished(vec![reasoning("", Some("rgw2.k.r")), text("Ok.")], usage(5, 0, 5));
        let out = translate(
            Run::new().reasoning(0, &[], Some("rgw2.k.r")).text(1, &["Ok."]).completed(response.clone()),
            &shape(),
        );
        assert_eq!(kinds(&out)[2..4], ["start 0 redacted_thinking", "stop 0"].map(String::from));
        assert_accumulates_to_the_json_reply(&out, &response, &shape());
    }

    #[test]
    fn a_tool_call_streams_its_arguments_as_input_json_deltas() {
        let arguments = r#"{"city": "Paris"}"#;
        let response =
            finished(vec![text("Let me check."), call("call_9", "get_weather", arguments)], usage(30, 0, 12));
        let events = Run::new()
            .text(0, &["Let me check."])
            .call_start(1, "call_9", "get_weather", &[r#"{"ci"#, r#"ty": "Par"#, r#"is"}"#])
            .call_done(1, "call_9", "get_weather", arguments)
            .completed(response.clone());
        let out = translate(events, &shape());
        assert_eq!(
            kinds(&out)[5..],
            [
                "start 1 tool_use",
                "delta 1 input_json_delta",
                "delta 1 input_json_delta",
                "delta 1 input_json_delta",
                "stop 1",
                "message_delta",
                "message_stop"
            ]
            .map(String::from)
        );
        assert_eq!(
            serde_json::to_value(&out[5]).unwrap(),
            json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": "call_9", "name": "get_weather", "input": {}}})
        );
        let MessagesEvent::MessageDelta { delta, .. } = &out[out.len() - 2] else { panic!() };
        assert_eq!(delta.stop_reason, StopReason::ToolUse);
        assert_accumulates_to_the_json_reply(&out, &response, &shape());
    }

    #[test]
    fn a_gateway_tool_call_streams_its_call_then_its_whole_result_when_done() {
        let search = Item::WebSearchCall(WebSearchCallItem {
            id: "ws_1".into(),
            status: CallStatus::Completed,
            action: Some(WebSearchAction::Search { query: "rust".into(), queries: Vec::new(), sources: None }),
            model_result: Some(
                json!({"action": {"type": "search", "query": "rust"}, "results": [{"url": "https://a.example/"}]})
                    .to_string(),
            ),
        });
        let announced = Item::WebSearchCall(WebSearchCallItem {
            status: CallStatus::InProgress,
            action: None,
            model_result: None,
            ..match &search {
                Item::WebSearchCall(item) => item.clone(),
                _ => unreachable!(),
            }
        });
        let annotation = json!({"type": "url_citation", "start_index": 0, "end_index": 6, "title": "A",
                                "url": "https://a.example/"});
        let mut answer = text("Found.");
        if let Item::Message(message) = &mut answer
            && let ContentPart::OutputText { annotations, .. } = &mut message.content[0]
        {
            annotations.push(annotation.clone());
        }
        let response = finished(vec![search.clone(), answer], usage(30, 0, 12));
        let mut run = Run::new();
        run.events.push(ResponseEvent::OutputItemAdded { output_index: 0, item: Box::new(announced) });
        run.events.push(ResponseEvent::WebSearchCallSearching { item_id: "ws_1".into(), output_index: 0 });
        run.events.push(ResponseEvent::OutputItemDone { output_index: 0, item: Box::new(search) });
        let mut run = run.text(1, &["Found."]);
        // The engine announces the citation once the link is complete, before the text is done.
        let at = run.events.len() - 3;
        run.events.insert(
            at,
            ResponseEvent::OutputTextAnnotationAdded {
                item_id: "msg_1".into(),
                output_index: 1,
                content_index: 0,
                annotation_index: 0,
                annotation: Box::new(annotation),
            },
        );
        let out = translate(run.completed(response.clone()), &shape());
        assert!(kinds(&out).contains(&"delta 2 citations_delta".to_owned()), "{:?}", kinds(&out));
        assert_eq!(
            kinds(&out)[2..8],
            [
                "start 0 server_tool_use",
                "delta 0 input_json_delta",
                "stop 0",
                "start 1 web_search_tool_result",
                "stop 1",
                "start 2 text"
            ]
            .map(String::from)
        );
        assert_eq!(
            serde_json::to_value(&out[2]).unwrap()["content_block"],
            json!({"type": "server_tool_use", "id": "srvtoolu_ws_1", "name": "web_search", "input": {}})
        );
        let MessagesEvent::MessageDelta { usage, .. } = &out[out.len() - 2] else { panic!() };
        assert_eq!(usage.server_tool_use, Some(ServerToolUsage { web_search_requests: 1, web_fetch_requests: 0 }));
        assert_accumulates_to_the_json_reply(&out, &response, &shape());
    }

    #[test]
    fn several_tool_calls_are_blocks_one_after_the_other() {
        // The engine announces each call as the upstream starts it, and finishes them all when
        // the turn ends.
        let (a, b) = (r#"{"city":"Paris"}"#, r#"{"zone":"CET"}"#);
        let response = finished(vec![call("call_a", "weather", a), call("call_b", "time", b)], usage(30, 0, 12));
        let events = Run::new()
            .call_start(0, "call_a", "weather", &[a])
            .call_start(1, "call_b", "time", &[&b[..5], &b[5..]])
            .call_done(0, "call_a", "weather", a)
            .call_done(1, "call_b", "time", b)
            .completed(response.clone());
        let out = translate(events, &shape());
        assert_eq!(
            kinds(&out)[2..],
            [
                "start 0 tool_use",
                "delta 0 input_json_delta",
                "stop 0",
                "start 1 tool_use",
                "delta 1 input_json_delta",
                "delta 1 input_json_delta",
                "stop 1",
                "message_delta",
                "message_stop"
            ]
            .map(String::from)
        );
        assert_accumulates_to_the_json_reply(&out, &response, &shape());
    }

    #[test]
    fn arguments_that_are_not_an_object_are_sent_once_as_the_json_reply_has_them() {
        let response = finished(vec![call("call_1", "f", "  [1, 2]")], usage(1, 0, 1));
        let events = Run::new()
            .call_start(0, "call_1", "f", &["  ", "[1, ", "2]"])
            .call_done(0, "call_1", "f", "  [1, 2]")
            .completed(response.clone());
        let out = translate(events, &shape());
        let deltas: Vec<&MessagesEvent> =
            out.iter().filter(|e| matches!(e, MessagesEvent::ContentBlockDelta { .. })).collect();
        assert_eq!(
            serde_json::to_value(deltas).unwrap(),
            json!([{"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}}])
        );
        assert_accumulates_to_the_json_reply(&out, &response, &shape());
    }

    #[test]
    fn max_tokens_and_the_final_usage_with_cache_reads() {
        let mut response = finished(vec![text("Once upon a")], usage(1000, 900, 16));
        response.status = ResponseStatus::Incomplete;
        response.incomplete_details = Some(IncompleteDetails { reason: IncompleteReason::MaxOutputTokens });
        let out = translate(Run::new().text(0, &["Once upon", " a"]).completed(response.clone()), &shape());
        assert_eq!(
            serde_json::to_value(&out[out.len() - 2]).unwrap(),
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null},
                "usage": {"input_tokens": 100, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 900, "output_tokens": 16}})
        );
        assert_accumulates_to_the_json_reply(&out, &response, &shape());
    }

    #[test]
    fn a_stop_sequence_is_named_in_the_message_delta() {
        let shape = ReplyShape { stop_sequences: vec!["END".into()], ..shape() };
        let mut response = finished(vec![text("1, 2, 3")], usage(3, 0, 3));
        response.stop_sequence = Some("END".into());
        let out = translate(Run::new().text(0, &["1, 2, 3"]).completed(response.clone()), &shape);
        let MessagesEvent::MessageDelta { delta, .. } = &out[out.len() - 2] else { panic!() };
        assert_eq!((delta.stop_reason, delta.stop_sequence.as_deref()), (StopReason::StopSequence, Some("END")));
        assert_accumulates_to_the_json_reply(&out, &response, &shape);
    }

    #[test]
    fn a_failure_mid_stream_ends_with_an_error_event_and_nothing_after() {
        let mut events = Run::new().text(0, &["Half an ans"]).events;
        events.truncate(5); // up to the first text delta
        let error = ApiError::upstream_unavailable("connection reset");
        events.push(ResponseEvent::error(StreamError::from(&error)));
        let failed = ResponseObject { status: ResponseStatus::Failed, ..finished(Vec::new(), Usage::default()) };
        events.push(ResponseEvent::Failed { response: Box::new(failed) });
        let out = translate(events, &shape());
        assert_eq!(kinds(&out), ["message_start", "ping", "start 0 text", "delta 0 text_delta", "error"]);
        assert_eq!(
            serde_json::to_value(out.last().unwrap()).unwrap(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Upstream unavailable: connection reset"}})
        );
    }

    #[test]
    fn mid_stream_errors_keep_their_anthropic_types() {
        let cases = [
            (ApiError::upstream_timeout(), "timeout_error"),
            (ApiError::internal("boom"), "api_error"),
            (ApiError::context_length_exceeded("too long"), "invalid_request_error"),
            (ApiError::store_unavailable("disk"), "overloaded_error"),
        ];
        for (error, kind) in cases {
            let MessagesEvent::Error { error: body } =
                MessagesEvent::error(error_kind(&StreamError::from(&error)), "m")
            else {
                panic!()
            };
            assert_eq!(body["type"], kind, "{error:?}");
        }
    }

    #[test]
    fn a_failed_response_without_an_error_event_still_ends_with_one() {
        let mut events = Run::new().events;
        let mut failed = ResponseObject { status: ResponseStatus::Failed, ..finished(Vec::new(), Usage::default()) };
        failed.error = Some(respgw_protocol::response::ResponseError { code: "x".into(), message: "It broke.".into() });
        events.push(ResponseEvent::Failed { response: Box::new(failed) });
        let out = translate(events, &shape());
        assert_eq!(kinds(&out), ["message_start", "ping", "error"]);
        assert!(out.last().unwrap().is_last());
    }
}
