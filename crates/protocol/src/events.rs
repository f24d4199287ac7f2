//! Streaming events and their framing.
//!
//! [`ResponseEvent`] is every event the gateway emits; its serde tag is the wire `type`. The
//! `sequence_number` is not part of the event: the stream that numbers events owns it, and
//! [`SseFrame::encode_into`] adds it while writing `event: <type>\ndata: <json>\n\n` (or
//! [`numbered_json`] for a WebSocket text frame: the same JSON).

use serde::Serialize;

use crate::items::{ContentPart, Item};
use crate::response::ResponseObject;

/// One event of a response stream. Events with a large payload (a response, an item, a content
/// part, an annotation, error details) box it so the enum stays small: events queue in
/// per-stream channels, whose buffers hold a few dozen of them each.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum ResponseEvent {
    #[serde(rename = "response.created")]
    Created { response: Box<ResponseObject> },
    #[serde(rename = "response.queued")]
    Queued { response: Box<ResponseObject> },
    #[serde(rename = "response.in_progress")]
    InProgress { response: Box<ResponseObject> },
    #[serde(rename = "response.completed")]
    Completed { response: Box<ResponseObject> },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Box<ResponseObject> },
    #[serde(rename = "response.failed")]
    Failed { response: Box<ResponseObject> },
    #[serde(rename = "response.output_item.added")]
    OutputItemAdded { output_index: usize, item: Box<Item> },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone { output_index: usize, item: Box<Item> },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded { item_id: String, output_index: usize, content_index: usize, part: Box<ContentPart> },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone { item_id: String, output_index: usize, content_index: usize, part: Box<ContentPart> },
    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta { item_id: String, output_index: usize, content_index: usize, delta: String, logprobs: [(); 0] },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone { item_id: String, output_index: usize, content_index: usize, text: String, logprobs: [(); 0] },
    /// A `url_citation` on the message's text, sent once the cited link is complete.
    #[serde(rename = "response.output_text.annotation.added")]
    OutputTextAnnotationAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        annotation_index: usize,
        annotation: Box<serde_json::Value>,
    },
    #[serde(rename = "response.reasoning.delta")]
    ReasoningDelta { item_id: String, output_index: usize, content_index: usize, delta: String },
    #[serde(rename = "response.reasoning.done")]
    ReasoningDone { item_id: String, output_index: usize, content_index: usize, text: String },
    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta { item_id: String, output_index: usize, delta: String },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone { item_id: String, output_index: usize, name: String, arguments: String },
    #[serde(rename = "response.code_interpreter_call.in_progress")]
    CodeInterpreterCallInProgress { item_id: String, output_index: usize },
    #[serde(rename = "response.code_interpreter_call_code.delta")]
    CodeInterpreterCallCodeDelta { item_id: String, output_index: usize, delta: String },
    #[serde(rename = "response.code_interpreter_call_code.done")]
    CodeInterpreterCallCodeDone { item_id: String, output_index: usize, code: String },
    #[serde(rename = "response.code_interpreter_call.interpreting")]
    CodeInterpreterCallInterpreting { item_id: String, output_index: usize },
    #[serde(rename = "response.code_interpreter_call.completed")]
    CodeInterpreterCallCompleted { item_id: String, output_index: usize },
    #[serde(rename = "response.mcp_call.in_progress")]
    McpCallInProgress { item_id: String, output_index: usize },
    #[serde(rename = "response.mcp_call_arguments.delta")]
    McpCallArgumentsDelta { item_id: String, output_index: usize, delta: String },
    #[serde(rename = "response.mcp_call_arguments.done")]
    McpCallArgumentsDone { item_id: String, output_index: usize, arguments: String },
    #[serde(rename = "response.mcp_call.completed")]
    McpCallCompleted { item_id: String, output_index: usize },
    /// Carries no `error` key on purpose: SDKs treat an `error` key in an event as fatal to the
    /// stream. The reason is on the item (`output_item.done`).
    #[serde(rename = "response.mcp_call.failed")]
    McpCallFailed { item_id: String, output_index: usize },
    #[serde(rename = "response.mcp_list_tools.in_progress")]
    McpListToolsInProgress { item_id: String, output_index: usize },
    #[serde(rename = "response.mcp_list_tools.completed")]
    McpListToolsCompleted { item_id: String, output_index: usize },
    #[serde(rename = "response.mcp_list_tools.failed")]
    McpListToolsFailed { item_id: String, output_index: usize },
    #[serde(rename = "response.web_search_call.in_progress")]
    WebSearchCallInProgress { item_id: String, output_index: usize },
    #[serde(rename = "response.web_search_call.searching")]
    WebSearchCallSearching { item_id: String, output_index: usize },
    #[serde(rename = "response.web_search_call.completed")]
    WebSearchCallCompleted { item_id: String, output_index: usize },
    #[serde(rename = "response.file_search_call.in_progress")]
    FileSearchCallInProgress { item_id: String, output_index: usize },
    #[serde(rename = "response.file_search_call.searching")]
    FileSearchCallSearching { item_id: String, output_index: usize },
    #[serde(rename = "response.file_search_call.completed")]
    FileSearchCallCompleted { item_id: String, output_index: usize },
    /// The conversation is being summarised into the `compaction` item at `output_index` (sent
    /// once, between that item's `output_item.added` and `output_item.done`; it carries no
    /// summary).
    #[serde(rename = "response.compaction.compacting")]
    CompactionCompacting { item_id: String, output_index: usize },
    /// The schema wants the details nested in `error` (as the reference API sends them); the
    /// official SDKs type them flat, so `code`, `message` and `param` are repeated at the top.
    /// Build it with [`ResponseEvent::error`].
    #[serde(rename = "error")]
    Error { code: Option<String>, message: String, param: Option<String>, error: Box<StreamError> },
}

/// The payload of a stream-level `error` event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StreamError {
    #[serde(rename = "type")]
    pub error_type: crate::ErrorType,
    pub code: Option<String>,
    pub message: String,
    pub param: Option<String>,
}

impl From<&crate::ApiError> for StreamError {
    fn from(error: &crate::ApiError) -> Self {
        StreamError {
            error_type: error.error_type,
            code: error.code.clone(),
            message: error.message.clone(),
            param: error.param.clone(),
        }
    }
}

impl ResponseEvent {
    /// A stream-level `error` event.
    pub fn error(error: StreamError) -> Self {
        ResponseEvent::Error {
            code: error.code.clone(),
            message: error.message.clone(),
            param: error.param.clone(),
            error: Box::new(error),
        }
    }

    /// The wire `type` of the event (the SSE `event:` line).
    pub fn kind(&self) -> &'static str {
        match self {
            ResponseEvent::Created { .. } => "response.created",
            ResponseEvent::Queued { .. } => "response.queued",
            ResponseEvent::InProgress { .. } => "response.in_progress",
            ResponseEvent::Completed { .. } => "response.completed",
            ResponseEvent::Incomplete { .. } => "response.incomplete",
            ResponseEvent::Failed { .. } => "response.failed",
            ResponseEvent::OutputItemAdded { .. } => "response.output_item.added",
            ResponseEvent::OutputItemDone { .. } => "response.output_item.done",
            ResponseEvent::ContentPartAdded { .. } => "response.content_part.added",
            ResponseEvent::ContentPartDone { .. } => "response.content_part.done",
            ResponseEvent::OutputTextDelta { .. } => "response.output_text.delta",
            ResponseEvent::OutputTextDone { .. } => "response.output_text.done",
            ResponseEvent::OutputTextAnnotationAdded { .. } => "response.output_text.annotation.added",
            ResponseEvent::ReasoningDelta { .. } => "response.reasoning.delta",
            ResponseEvent::ReasoningDone { .. } => "response.reasoning.done",
            ResponseEvent::FunctionCallArgumentsDelta { .. } => "response.function_call_arguments.delta",
            ResponseEvent::FunctionCallArgumentsDone { .. } => "response.function_call_arguments.done",
            ResponseEvent::CodeInterpreterCallInProgress { .. } => "response.code_interpreter_call.in_progress",
            ResponseEvent::CodeInterpreterCallCodeDelta { .. } => "response.code_interpreter_call_code.delta",
            ResponseEvent::CodeInterpreterCallCodeDone { .. } => "response.code_interpreter_call_code.done",
            ResponseEvent::CodeInterpreterCallInterpreting { .. } => "response.code_interpreter_call.interpreting",
            ResponseEvent::CodeInterpreterCallCompleted { .. } => "response.code_interpreter_call.completed",
            ResponseEvent::McpCallInProgress { .. } => "response.mcp_call.in_progress",
            ResponseEvent::McpCallArgumentsDelta { .. } => "response.mcp_call_arguments.delta",
            ResponseEvent::McpCallArgumentsDone { .. } => "response.mcp_call_arguments.done",
            ResponseEvent::McpCallCompleted { .. } => "response.mcp_call.completed",
            ResponseEvent::McpCallFailed { .. } => "response.mcp_call.failed",
            ResponseEvent::McpListToolsInProgress { .. } => "response.mcp_list_tools.in_progress",
            ResponseEvent::McpListToolsCompleted { .. } => "response.mcp_list_tools.completed",
            ResponseEvent::McpListToolsFailed { .. } => "response.mcp_list_tools.failed",
            ResponseEvent::WebSearchCallInProgress { .. } => "response.web_search_call.in_progress",
            ResponseEvent::WebSearchCallSearching { .. } => "response.web_search_call.searching",
            ResponseEvent::WebSearchCallCompleted { .. } => "response.web_search_call.completed",
            ResponseEvent::FileSearchCallInProgress { .. } => "response.file_search_call.in_progress",
            ResponseEvent::FileSearchCallSearching { .. } => "response.file_search_call.searching",
            ResponseEvent::FileSearchCallCompleted { .. } => "response.file_search_call.completed",
            ResponseEvent::CompactionCompacting { .. } => "response.compaction.compacting",
            ResponseEvent::Error { .. } => "error",
        }
    }

    /// The final response, when this event ends the stream.
    pub fn terminal_response(&self) -> Option<&ResponseObject> {
        match self {
            ResponseEvent::Completed { response }
            | ResponseEvent::Incomplete { response }
            | ResponseEvent::Failed { response } => Some(response.as_ref()),
            _ => None,
        }
    }
}

/// SSE framing of events.
pub struct SseFrame;

/// One event as its wire JSON, `sequence_number` included: the `data:` of an SSE frame, the text
/// of a WebSocket frame.
pub fn numbered_json(event: &ResponseEvent, sequence_number: u64) -> Result<String, serde_json::Error> {
    let mut out = Vec::with_capacity(128);
    write_numbered_json(&mut out, event, sequence_number)?;
    String::from_utf8(out).map_err(|e| serde::ser::Error::custom(format!("event JSON is not UTF-8: {e}")))
}

/// Append [`numbered_json`] to `out`; on an error, `out` may hold part of it.
///
/// The event's fields come first and `sequence_number` last. Deltas, one per streamed token,
/// are written field by field with their constant parts pre-encoded (strings escaped by
/// serde_json); other events are serialised by serde and the number is spliced in before the
/// object's closing brace.
pub fn write_numbered_json(
    out: &mut Vec<u8>,
    event: &ResponseEvent,
    sequence_number: u64,
) -> Result<(), serde_json::Error> {
    match event {
        ResponseEvent::OutputTextDelta { item_id, output_index, content_index, delta, logprobs: [] } => {
            let head = br#"{"type":"response.output_text.delta","item_id":"#;
            let tail = br#","logprobs":[],"sequence_number":"#;
            write_delta(out, head, item_id, *output_index, Some(*content_index), delta, tail, sequence_number)
        }
        ResponseEvent::ReasoningDelta { item_id, output_index, content_index, delta } => {
            let head = br#"{"type":"response.reasoning.delta","item_id":"#;
            let tail = br#","sequence_number":"#;
            write_delta(out, head, item_id, *output_index, Some(*content_index), delta, tail, sequence_number)
        }
        ResponseEvent::FunctionCallArgumentsDelta { item_id, output_index, delta } => {
            let head = br#"{"type":"response.function_call_arguments.delta","item_id":"#;
            let tail = br#","sequence_number":"#;
            write_delta(out, head, item_id, *output_index, None, delta, tail, sequence_number)
        }
        _ => {
            serde_json::to_writer(&mut *out, event)?;
            // Every event is a JSON object: the number goes before its closing brace.
            debug_assert_eq!(out.last(), Some(&b'}'));
            out.pop();
            out.extend_from_slice(br#","sequence_number":"#);
            serde_json::to_writer(&mut *out, &sequence_number)?;
            out.push(b'}');
            Ok(())
        }
    }
}

/// A delta event's JSON: `head` ends with `"item_id":`, `tail` with `"sequence_number":`.
#[expect(clippy::too_many_arguments, reason = "the fields of the three delta events")]
fn write_delta(
    out: &mut Vec<u8>,
    head: &[u8],
    item_id: &str,
    output_index: usize,
    content_index: Option<usize>,
    delta: &str,
    tail: &[u8],
    sequence_number: u64,
) -> Result<(), serde_json::Error> {
    out.reserve(head.len() + item_id.len() + delta.len() + tail.len() + 64);
    out.extend_from_slice(head);
    serde_json::to_writer(&mut *out, item_id)?;
    out.extend_from_slice(br#","output_index":"#);
    serde_json::to_writer(&mut *out, &output_index)?;
    if let Some(content_index) = content_index {
        out.extend_from_slice(br#","content_index":"#);
        serde_json::to_writer(&mut *out, &content_index)?;
    }
    out.extend_from_slice(br#","delta":"#);
    serde_json::to_writer(&mut *out, delta)?;
    out.extend_from_slice(tail);
    serde_json::to_writer(&mut *out, &sequence_number)?;
    out.push(b'}');
    Ok(())
}

impl SseFrame {
    /// Append `event: <type>\ndata: <compact json with sequence_number>\n\n` to `out`; on an
    /// error, `out` is left as it was.
    pub fn encode_into(
        out: &mut Vec<u8>,
        event: &ResponseEvent,
        sequence_number: u64,
    ) -> Result<(), serde_json::Error> {
        let start = out.len();
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.kind().as_bytes());
        out.extend_from_slice(b"\ndata: ");
        if let Err(e) = write_numbered_json(out, event, sequence_number) {
            out.truncate(start);
            return Err(e);
        }
        out.extend_from_slice(b"\n\n");
        Ok(())
    }

    /// The `data: [DONE]` frame that ends every stream after its terminal event.
    pub const DONE: &'static [u8] = b"data: [DONE]\n\n";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_events_carry_the_details_nested_and_flat() {
        let ev = ResponseEvent::error(StreamError {
            error_type: crate::ErrorType::ApiError,
            code: Some("404".into()),
            message: "gone".into(),
            param: None,
        });
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["error"]["code"], "404");
        assert_eq!(v["error"]["type"], "api_error");
        assert_eq!((v["code"].as_str(), v["message"].as_str()), (Some("404"), Some("gone")));
    }

    #[test]
    fn events_stay_small() {
        // Each stream's channel allocates room for 32 events at a time.
        assert!(std::mem::size_of::<ResponseEvent>() <= 88, "{} bytes", std::mem::size_of::<ResponseEvent>());
    }

    #[test]
    fn frames_carry_type_and_sequence_number() {
        let ev = ResponseEvent::OutputTextDelta {
            item_id: "msg_1".into(),
            output_index: 0,
            content_index: 0,
            delta: "Pa\nris".into(),
            logprobs: [],
        };
        let mut frame = Vec::new();
        SseFrame::encode_into(&mut frame, &ev, 4).unwrap();
        let frame = String::from_utf8(frame).unwrap();
        assert_eq!(
            frame,
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Pa\\nris\",\"logprobs\":[],\"sequence_number\":4}\n\n"
        );
    }

    /// The event with its number as serde writes it through `#[serde(flatten)]`: what
    /// [`write_numbered_json`] must match byte for byte.
    fn flattened(event: &ResponseEvent, sequence_number: u64) -> String {
        #[derive(Serialize)]
        struct Numbered<'a> {
            #[serde(flatten)]
            event: &'a ResponseEvent,
            sequence_number: u64,
        }
        serde_json::to_string(&Numbered { event, sequence_number }).unwrap()
    }

    #[test]
    fn hand_written_deltas_match_serde_byte_for_byte() {
        let tricky = [
            "",
            "plain",
            "quote \" backslash \\ slash /",
            "controls \u{0}\u{1}\u{8}\t\n\u{b}\u{c}\r\u{1f}\u{7f}",
            "line sep \u{2028} para sep \u{2029}",
            "emoji 🦀👩‍👩‍👧 é ☃ \u{fffd}",
            "<script>&amp;</script>",
        ];
        for (i, text) in tricky.into_iter().enumerate() {
            let item_id = format!("msg_{text}");
            let events = [
                ResponseEvent::OutputTextDelta {
                    item_id: item_id.clone(),
                    output_index: i,
                    content_index: 7 * i,
                    delta: text.into(),
                    logprobs: [],
                },
                ResponseEvent::ReasoningDelta {
                    item_id: item_id.clone(),
                    output_index: usize::MAX - i,
                    content_index: i,
                    delta: text.into(),
                },
                ResponseEvent::FunctionCallArgumentsDelta { item_id, output_index: i, delta: text.into() },
                ResponseEvent::OutputTextDone {
                    item_id: "msg_1".into(),
                    output_index: 0,
                    content_index: 0,
                    text: text.into(),
                    logprobs: [],
                },
                ResponseEvent::error(StreamError {
                    error_type: crate::ErrorType::ApiError,
                    code: None,
                    message: text.into(),
                    param: Some(text.into()),
                }),
            ];
            for event in &events {
                for number in [0, 1, 4_294_967_296, u64::MAX] {
                    assert_eq!(numbered_json(event, number).unwrap(), flattened(event, number), "{event:?}");
                }
            }
        }
    }
}
