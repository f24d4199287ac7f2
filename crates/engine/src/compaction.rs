//! Compaction: the conversation so far summarised by the model into one sealed `compaction`
//! item, which then stands for everything before it except the user messages.
//!
//! - `POST /v1/responses/compact` is [`Engine::compact`]: the history (stored, given, or both) is
//!   summarised and the compacted window returned — the user messages, then one compaction item.
//!   Nothing is stored.
//! - `context_management` on a create-response request: before each model turn, until one
//!   compaction happened, the run estimates the turn's request ([`estimate_tokens`]) and, at the
//!   threshold or above, compacts first ([`compact_in_response`]): `output_item.added` of the
//!   compaction item, `response.compaction.compacting`, `output_item.done` with the sealed
//!   summary; then the turn runs on the compacted history.
//! - The replay rule ([`replayed`], applied by `chat::messages` wherever history becomes chat
//!   messages): the model sees the user messages before the latest compaction item, then the
//!   summary as one message ([`summary_message`]), then everything after the item.
//!
//! The summarisation call is one upstream chat completion of the history rendered by
//! `chat::messages` (reasoning, tool calls and gateway tool results included) followed by
//! [`SUMMARY_PROMPT`]; its usage is the compaction's. The summary is sealed like reasoning (same
//! keys and rotation, its own [`Purpose`]), so clients can neither read nor forge it; the item
//! keeps the opened summary in `model_summary`, stored but never shown.

use futures::StreamExt;
use respgw_protocol::compaction::{CompactedResponse, ValidatedCompactRequest};
use respgw_protocol::ids::{IdKind, new_id};
use respgw_protocol::items::{CompactionItem, MessageRole};
use respgw_protocol::{ApiError, Item, ResponseEvent, Usage, ValidatedRequest};
use respgw_telemetry::CompactionTrigger;
use serde_json::{Value, json};

use crate::chat;
use crate::engine::Engine;
use crate::files::read_input_files;
use crate::run::{Stop, unix_now};
use crate::sealed::{Purpose, open_sealed_items};
use crate::sink::EventSink;
use crate::think::{Segment, ThinkSplitter};
use crate::turn::OutputLog;
use crate::upstream::{ChunkStream, UpstreamEvent};

/// What the model is asked, after the whole conversation, to write the summary.
pub const SUMMARY_PROMPT: &str = "\
The conversation above is being compacted so that it can continue in a smaller context. Write a \
summary that will replace everything above except the user's own messages, which are kept word \
for word. Include: the goal and the current state of the work; decisions made and why; what each \
tool call found out (results, names, values and errors that still matter); reasoning that is still \
needed; and what is promised or left to do, including the latest request if it is not answered \
yet. Be concise and factual, and write for yourself continuing the work, not for the user. Reply \
with the summary only.";

/// How the summary is introduced to the model when it replaces the turns it summarises.
const SUMMARY_HEADER: &str = "\
[Summary of the conversation before this point, written by the assistant when the conversation \
was compacted. It stands for the assistant's replies, reasoning and tool results up to here; the \
user's messages above are kept as they were.]";

/// Said in place of a summary the gateway does not have (a compaction item that was never opened).
const NO_SUMMARY: &str = "(The summary is not available.)";

/// The one message that replaces what a compaction item summarised. A `user` message: every
/// chat template accepts one at any point, and the next turn is the assistant's.
pub(crate) fn summary_message(item: &CompactionItem) -> Value {
    let summary = item.model_summary.as_deref().unwrap_or(NO_SUMMARY);
    json!({"role": "user", "content": format!("{SUMMARY_HEADER}\n\n{summary}")})
}

/// The replay rule: when `history` holds compaction items, the latest stands for everything
/// before it except the user messages; what follows it is kept.
pub(crate) fn replayed(history: Vec<&Item>) -> Vec<&Item> {
    let Some(latest) = history.iter().rposition(|item| matches!(item, Item::Compaction(_))) else {
        return history;
    };
    let mut kept: Vec<&Item> = history[..latest].iter().copied().filter(|item| is_user_message(item)).collect();
    kept.extend_from_slice(&history[latest..]);
    kept
}

fn is_user_message(item: &Item) -> bool {
    matches!(item, Item::Message(m) if m.role == MessageRole::User)
}

/// The estimated size, in tokens, of an upstream chat request: the UTF-8 bytes of its
/// `messages` and `tools` written as compact JSON, divided by 4 and rounded up. Local and cheap
/// (no tokenizer, no upstream call); about right for English text and JSON with common
/// tokenizers, an overestimate for code-heavy or non-Latin text.
pub fn estimate_tokens(chat_request: &Value) -> u64 {
    let bytes: u64 = ["messages", "tools"]
        .iter()
        .filter_map(|key| chat_request.get(key))
        .map(|value| {
            let mut counter = ByteCount(0);
            // Writing JSON into a counter cannot fail.
            let _ = serde_json::to_writer(&mut counter, value);
            counter.0
        })
        .sum();
    bytes.div_ceil(4)
}

/// An `io::Write` that only counts bytes.
struct ByteCount(u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The summarisation call's body: the history as the model would see it, then the prompt.
fn summary_request<'a>(
    model: &str,
    instructions: Option<&str>,
    history: impl IntoIterator<Item = &'a Item>,
    max_tool_output_bytes: usize,
) -> Value {
    let mut messages = chat::messages(instructions, history, max_tool_output_bytes);
    messages.push(json!({"role": "user", "content": SUMMARY_PROMPT}));
    json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

/// A finished summarisation call.
struct Summary {
    text: String,
    usage: Usage,
}

/// Open the summarisation call (upstream failures mapped like a response's).
async fn open_summary(
    engine: &Engine,
    body: &Value,
    headers: &[(&'static str, String)],
) -> Result<ChunkStream, ApiError> {
    engine.upstream().stream_chat(body, headers).await.map_err(|e| e.to_api_error())
}

/// Read the summary: the answer's text (reasoning, in its own field or in `<think>` tags, is
/// left out) and the call's usage. An empty answer is an upstream failure.
async fn read_summary(mut chunks: ChunkStream) -> Result<Summary, ApiError> {
    let mut splitter = ThinkSplitter::default();
    let mut text = String::new();
    let mut usage = Usage::default();
    let keep = |segments: Vec<Segment>, text: &mut String| {
        for segment in segments {
            if let Segment::Text(t) = segment {
                text.push_str(&t);
            }
        }
    };
    while let Some(event) = chunks.next().await {
        let chunk = match event.map_err(|e| e.to_api_error())? {
            UpstreamEvent::Done => break,
            UpstreamEvent::Chunk(chunk) => chunk,
        };
        if let Some(error) = chunk.error {
            return Err(ApiError::upstream_unavailable(format!("the model server failed mid-stream: {error}")));
        }
        if let Some(u) = &chunk.usage {
            usage = u.to_usage();
        }
        for choice in chunk.choices.iter().filter(|c| c.index == 0) {
            if let Some(content) = choice.delta.as_ref().and_then(|d| d.content.as_deref()) {
                keep(splitter.push(content), &mut text);
            }
        }
    }
    keep(splitter.finish(), &mut text);
    let text = text.trim().to_owned();
    if text.is_empty() {
        return Err(ApiError::upstream_unavailable("the model returned an empty summary"));
    }
    Ok(Summary { text, usage })
}

/// Seal a summary for `owner` into a fresh compaction item (the opened summary kept in
/// `model_summary`).
fn sealed_item(engine: &Engine, owner: &str, id: String, summary: String) -> Result<CompactionItem, ApiError> {
    let seal = engine.seal.as_ref().ok_or_else(no_keys)?;
    let encrypted_content = seal
        .seal(Purpose::Compaction, owner, &summary)
        .map_err(|e| ApiError::internal(format!("could not seal the summary: {e}")))?;
    Ok(CompactionItem { id, encrypted_content, created_by: None, model_summary: Some(summary) })
}

fn no_keys() -> ApiError {
    ApiError::internal("Compaction needs the gateway's sealing keys, and none are configured.")
}

impl Engine {
    /// `POST /v1/responses/compact`: summarise the conversation — the stored one of
    /// `previous_response_id` (400 `previous_response_not_found` when there is none), followed
    /// by `input` — and return the compacted window. Stores nothing. The compaction is counted
    /// once the summarisation call is made, as `ok` or `error`.
    pub async fn compact(
        &self,
        owner: &str,
        request: ValidatedCompactRequest,
        upstream_headers: Vec<(&'static str, String)>,
    ) -> Result<CompactedResponse, ApiError> {
        let mut input = request.input;
        open_sealed_items(self.seal.as_ref(), owner, &mut input, "input")?;
        read_input_files(self.files.as_deref(), owner, &mut input).await?;
        let mut history = match &request.previous_response_id {
            None => Vec::with_capacity(input.len()),
            Some(prev) => {
                self.store.history(owner, prev).await?.ok_or_else(|| ApiError::previous_response_not_found(prev))?
            }
        };
        history.extend(input);
        if self.seal.is_none() {
            return Err(no_keys());
        }
        let max_tool_output_bytes = self.limits().max_tool_output_bytes;
        let body = summary_request(&request.model, request.instructions.as_deref(), &history, max_tool_output_bytes);
        let summarised = async {
            let summary = read_summary(open_summary(self, &body, &upstream_headers).await?).await?;
            Ok::<_, ApiError>((sealed_item(self, owner, new_id(IdKind::Compaction), summary.text)?, summary.usage))
        }
        .await;
        self.metrics().compaction(CompactionTrigger::Endpoint, summarised.is_ok());
        let (item, usage) = summarised?;
        self.charge_tokens(owner, &usage).await;
        let mut output: Vec<Item> = history.into_iter().filter(is_user_message).map(Item::client_view).collect();
        output.push(Item::Compaction(item).client_view());
        Ok(CompactedResponse {
            id: new_id(IdKind::Response),
            object: CompactedResponse::OBJECT,
            created_at: unix_now(),
            output,
            usage,
        })
    }
}

/// Compact inside a running response (`context_management`): summarise `history` and the
/// response's output so far, and add the compaction item to the output, announced and finished
/// in events; the summary is sealed for `owner`, the response's tenant. Returns the summarisation
/// call's usage, which the response adds to its own.
pub(crate) async fn compact_in_response(
    engine: &Engine,
    owner: &str,
    request: &ValidatedRequest,
    history: &[Item],
    upstream_headers: &[(&'static str, String)],
    sink: &mut EventSink,
    log: &mut OutputLog,
) -> Result<Usage, Stop> {
    let outcome = summarise_into_output(engine, owner, request, history, upstream_headers, sink, log).await;
    match &outcome {
        Ok(_) => engine.metrics().compaction(CompactionTrigger::Auto, true),
        Err(Stop::Error(_)) => engine.metrics().compaction(CompactionTrigger::Auto, false),
        Err(Stop::ClientGone) => {}
    }
    outcome
}

async fn summarise_into_output(
    engine: &Engine,
    owner: &str,
    request: &ValidatedRequest,
    history: &[Item],
    upstream_headers: &[(&'static str, String)],
    sink: &mut EventSink,
    log: &mut OutputLog,
) -> Result<Usage, Stop> {
    let gone = |_| Stop::ClientGone;
    if engine.seal.is_none() {
        return Err(Stop::Error(no_keys()));
    }
    let id = new_id(IdKind::Compaction);
    let output_index = log.allocate_index();
    let announced =
        CompactionItem { id: id.clone(), encrypted_content: String::new(), created_by: None, model_summary: None };
    sink.send(ResponseEvent::OutputItemAdded { output_index, item: Box::new(Item::Compaction(announced)) })
        .await
        .map_err(gone)?;
    let body = summary_request(
        &request.model,
        request.instructions.as_deref(),
        history.iter().chain(&log.items),
        engine.limits().max_tool_output_bytes,
    );
    let chunks = tokio::select! {
        opened = open_summary(engine, &body, upstream_headers) => opened.map_err(Stop::Error)?,
        () = sink.closed() => return Err(Stop::ClientGone),
    };
    sink.send(ResponseEvent::CompactionCompacting { item_id: id.clone(), output_index }).await.map_err(gone)?;
    let summary = tokio::select! {
        summary = read_summary(chunks) => summary.map_err(Stop::Error)?,
        () = sink.closed() => return Err(Stop::ClientGone),
    };
    let item = Item::Compaction(sealed_item(engine, owner, id, summary.text).map_err(Stop::Error)?);
    log.items.push(item.clone());
    sink.send(ResponseEvent::OutputItemDone { output_index, item: Box::new(item.client_view()) })
        .await
        .map_err(gone)?;
    Ok(summary.usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(v: Value) -> Item {
        serde_json::from_value(v).unwrap()
    }

    fn user(id: &str, text: &str) -> Item {
        item(json!({"type":"message","id":id,"role":"user","status":"completed",
                    "content":[{"type":"input_text","text":text}]}))
    }

    fn said(text: &str) -> Item {
        item(json!({"type":"message","id":"msg_a","role":"assistant","status":"completed",
                    "content":[{"type":"output_text","text":text,"annotations":[],"logprobs":[]}]}))
    }

    fn compaction(summary: &str) -> Item {
        item(json!({"type":"compaction","id":"cmp_1","encrypted_content":"rgw1c.k.x","model_summary":summary}))
    }

    #[test]
    fn the_latest_compaction_keeps_earlier_user_messages_and_what_follows_it() {
        let history = [
            user("u1", "first"),
            said("old answer"),
            compaction("older summary"),
            user("u2", "second"),
            said("answer two"),
            compaction("latest summary"),
            said("after"),
            user("u3", "third"),
        ];
        let messages = chat::messages(Some("be brief"), &history, usize::MAX);
        let contents: Vec<&str> = messages.iter().map(|m| m["content"].as_str().unwrap()).collect();
        assert_eq!(contents[..3], ["be brief", "first", "second"]);
        assert!(contents[3].starts_with(SUMMARY_HEADER) && contents[3].ends_with("\n\nlatest summary"), "{contents:?}");
        assert_eq!(contents[4..], ["after", "third"]);
        assert_eq!(messages[3]["role"], "user");
        assert_eq!(messages.len(), 6);
        // Without a compaction item, history is untouched.
        assert_eq!(chat::messages(None, &history[..2], usize::MAX).len(), 2);
    }

    #[test]
    fn the_estimate_is_json_bytes_of_messages_and_tools_over_four_rounded_up() {
        let body =
            json!({"model":"a-very-long-model-name-that-is-not-counted","messages":[{"role":"user","content":"hi"}]});
        // [{"role":"user","content":"hi"}] is 31 bytes.
        assert_eq!(estimate_tokens(&body), 8);
        let with_tools = json!({"messages":[],"tools":[{"type":"function"}]});
        // [] and [{"type":"function"}] are 2 + 21 bytes.
        assert_eq!(estimate_tokens(&with_tools), 6);
        assert_eq!(estimate_tokens(&json!({"messages":"é"})), 1);
    }

    #[test]
    fn the_summarisation_request_is_the_rendered_history_then_the_prompt() {
        let history = [user("u1", "plan a trip"), said("Where to?")];
        let body = summary_request("m", Some("rules"), &history, usize::MAX);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 4);
        assert_eq!(messages[0], json!({"role":"system","content":"rules"}));
        assert_eq!(messages[3], json!({"role":"user","content":SUMMARY_PROMPT}));
        assert_eq!((body["model"].as_str(), body["stream"].as_bool()), (Some("m"), Some(true)));
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn gateway_tool_results_and_reasoning_are_summarised_too() {
        let history = [
            user("u1", "look it up"),
            item(json!({"type":"reasoning","id":"rs_1","summary":[],
                        "content":[{"type":"reasoning_text","text":"search the docs"}]})),
            item(json!({"type":"mcp_call","id":"mcp_1","server_label":"docs","name":"search",
                        "arguments":"{}","status":"completed","output":"found: page 7","error":null})),
        ];
        let body = summary_request("m", None, &history, usize::MAX);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages[1]["reasoning_content"], "search the docs");
        assert_eq!(messages[1]["tool_calls"][0]["function"]["name"], "mcp__docs__search");
        assert_eq!(messages[2], json!({"role":"tool","tool_call_id":"mcp_1","content":"found: page 7"}));
        assert_eq!(messages[3]["content"], SUMMARY_PROMPT);
    }
}
