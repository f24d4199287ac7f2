//! The stream state machine: one upstream model turn's chunks → Responses items and events.
//!
//! [`TurnState`] consumes chat-completion chunks and appends the events they cause to a buffer.
//! Items open when their first real content arrives (a message only for non-blank text, a
//! function call once its name is known) and close on a transition (reasoning → text, text →
//! tool call) or at the end of the turn, in `output_index` order. Output indexes come from the
//! response-wide [`OutputLog`], so they keep counting across the turns of a tool loop.

use respgw_protocol::ResponseEvent;
use respgw_protocol::Usage;
use respgw_protocol::ids::{IdKind, TurnStamp, new_id};
use respgw_protocol::items::{ContentPart, Item, ItemStatus, MessageItem, MessageRole, ReasoningItem, ReasoningText};
use respgw_protocol::response::IncompleteReason;
use serde_json::Value;

use crate::chat::{ChatChunk, ToolCallDelta};
use crate::think::{Segment, ThinkSplitter};
use crate::tool_kinds::{CallTargets, FinishedCall, GatewayToolState, OpenCall, PendingGatewayCall};

/// The response-wide record of output: index allocation and finished items in completion order.
#[derive(Debug, Default)]
pub struct OutputLog {
    next_index: usize,
    pub items: Vec<Item>,
}

impl OutputLog {
    /// The next `output_index`, for an item announced outside a model turn (e.g. a listing).
    pub fn allocate_index(&mut self) -> usize {
        self.allocate()
    }

    fn allocate(&mut self) -> usize {
        let i = self.next_index;
        self.next_index += 1;
        i
    }
}

/// How a model turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// The model finished (`stop`, `tool_calls`): the response completes.
    Finished,
    /// The model finished on this stop string of the request, which the upstream named (vLLM's
    /// `stop_reason`, SGLang's `matched_stop`): the response completes, and a Messages reply
    /// says which string it was.
    StopSequence(String),
    /// The model was cut off: the response is `incomplete` for this reason.
    Cut(IncompleteReason),
}

/// What a finished turn produced, beyond its events.
#[derive(Debug)]
pub struct TurnResult {
    pub end: TurnEnd,
    pub usage: Option<Usage>,
    /// The calls of this turn that the client runs, in the order the model made them (their
    /// items are done).
    pub client_calls: Vec<Item>,
    /// Calls to the gateway's own tools, in order; their items stay open until they have run.
    pub gateway_calls: Vec<PendingGatewayCall>,
    /// Gateway tool calls held until the client answers for them, as their items (done).
    pub held_calls: Vec<Item>,
}

#[derive(Debug)]
struct OpenReasoning {
    id: String,
    output_index: usize,
    text: String,
}

#[derive(Debug)]
struct OpenMessage {
    id: String,
    output_index: usize,
    text: String,
    /// `url_citation`s already announced.
    annotations: Vec<Value>,
}

/// A tool call of this turn whose arguments are streaming.
#[derive(Debug)]
struct StreamingCall {
    /// The upstream's `tool_calls[].index`.
    upstream_index: usize,
    call_id: Option<String>,
    name: Option<String>,
    arguments: String,
    /// Set once its item is announced (its name is known).
    announced: Option<OpenCall>,
}

/// The state of one upstream model turn.
#[derive(Debug)]
pub struct TurnState {
    /// Minted into the ids of this turn's gateway tool calls, so that history keeps the calls
    /// of one turn together and those of different turns apart.
    turn: TurnStamp,
    /// Who runs the functions the model may call, and so how their calls are reported.
    targets: CallTargets,
    /// What the gateway tool kinds kept from the response's earlier calls: where call items go,
    /// what the answer's text is annotated with.
    tools: GatewayToolState,
    splitter: ThinkSplitter,
    reasoning: Option<OpenReasoning>,
    message: Option<OpenMessage>,
    /// Whitespace that arrived before any message text; a message opens only for non-blank text.
    held_whitespace: String,
    calls: Vec<StreamingCall>,
    finish_reason: Option<String>,
    /// The stop string the upstream said ended the turn.
    matched_stop: Option<String>,
    usage: Option<Usage>,
    saw_done: bool,
}

/// A turn ended without a usable finish.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("the upstream stream ended before the model finished")]
    Truncated,
    #[error("the upstream returned a tool call without a function name")]
    NamelessToolCall,
}

impl TurnState {
    /// The model turn `turn`, whose calls go to `targets`, with the gateway tool kinds' `tools`.
    pub fn new(turn: TurnStamp, targets: CallTargets, tools: GatewayToolState) -> Self {
        TurnState {
            turn,
            targets,
            tools,
            splitter: ThinkSplitter::default(),
            reasoning: None,
            message: None,
            held_whitespace: String::new(),
            calls: Vec::new(),
            finish_reason: None,
            matched_stop: None,
            usage: None,
            saw_done: false,
        }
    }

    /// Apply one chunk; events it causes are appended to `events`.
    pub fn on_chunk(&mut self, chunk: ChatChunk, log: &mut OutputLog, events: &mut Vec<ResponseEvent>) {
        if let Some(u) = &chunk.usage {
            self.usage = Some(u.to_usage());
        }
        // The gateway always asks for one choice; ignore others a server might add.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(stop) = choice.matched_stop_string() {
                self.matched_stop = Some(stop.to_owned());
            }
            if let Some(delta) = choice.delta {
                if let Some(r) = delta.reasoning.or(delta.reasoning_content).filter(|r| !r.is_empty()) {
                    self.on_reasoning(&r, log, events);
                }
                if let Some(content) = delta.content.filter(|c| !c.is_empty()) {
                    for segment in self.splitter.push(&content) {
                        self.on_segment(segment, log, events);
                    }
                }
                for call in delta.tool_calls.unwrap_or_default() {
                    self.on_tool_call(call, log, events);
                }
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
        }
    }

    /// The upstream sent `data: [DONE]`.
    pub fn on_done(&mut self) {
        self.saw_done = true;
    }

    fn on_segment(&mut self, segment: Segment, log: &mut OutputLog, events: &mut Vec<ResponseEvent>) {
        match segment {
            Segment::Reasoning(r) => self.on_reasoning(&r, log, events),
            Segment::Text(t) => self.on_text(&t, log, events),
        }
    }

    fn on_reasoning(&mut self, text: &str, log: &mut OutputLog, events: &mut Vec<ResponseEvent>) {
        self.close_message(ItemStatus::Completed, log, events);
        let r = self.reasoning.get_or_insert_with(|| {
            let id = new_id(IdKind::Reasoning);
            let output_index = log.allocate();
            events.push(ResponseEvent::OutputItemAdded {
                output_index,
                item: Box::new(Item::Reasoning(ReasoningItem {
                    id: id.clone(),
                    summary: Vec::new(),
                    content: Vec::new(),
                    encrypted_content: None,
                })),
            });
            OpenReasoning { id, output_index, text: String::new() }
        });
        r.text.push_str(text);
        events.push(ResponseEvent::ReasoningDelta {
            item_id: r.id.clone(),
            output_index: r.output_index,
            content_index: 0,
            delta: text.to_owned(),
        });
    }

    fn on_text(&mut self, text: &str, log: &mut OutputLog, events: &mut Vec<ResponseEvent>) {
        if self.message.is_none() {
            if text.trim().is_empty() {
                self.held_whitespace.push_str(text);
                return;
            }
            self.close_reasoning(log, events);
            let id = new_id(IdKind::Message);
            let output_index = log.allocate();
            events.push(ResponseEvent::OutputItemAdded {
                output_index,
                item: Box::new(Item::Message(MessageItem {
                    id: id.clone(),
                    role: MessageRole::Assistant,
                    status: ItemStatus::InProgress,
                    content: Vec::new(),
                })),
            });
            events.push(ResponseEvent::ContentPartAdded {
                item_id: id.clone(),
                output_index,
                content_index: 0,
                part: Box::new(ContentPart::output_text("")),
            });
            self.message = Some(OpenMessage { id, output_index, text: String::new(), annotations: Vec::new() });
        }
        let delta = if self.held_whitespace.is_empty() {
            text.to_owned()
        } else {
            let mut d = std::mem::take(&mut self.held_whitespace);
            d.push_str(text);
            d
        };
        if let Some(m) = self.message.as_mut() {
            m.text.push_str(&delta);
            events.push(ResponseEvent::OutputTextDelta {
                item_id: m.id.clone(),
                output_index: m.output_index,
                content_index: 0,
                delta,
                logprobs: [],
            });
            self.tools.annotate(&m.id, m.output_index, &m.text, &mut m.annotations, false, events);
        }
    }

    fn on_tool_call(&mut self, delta: ToolCallDelta, log: &mut OutputLog, events: &mut Vec<ResponseEvent>) {
        self.close_reasoning(log, events);
        self.close_message(ItemStatus::Completed, log, events);
        let upstream_index = delta.index.unwrap_or_else(|| match &delta.id {
            // Servers that omit `index` send each call whole; a new id means a new call.
            Some(id) => self
                .calls
                .iter()
                .find(|s| s.call_id.as_deref() == Some(id.as_str()))
                .map_or(self.calls.len(), |s| s.upstream_index),
            None => self.calls.last().map_or(0, |s| s.upstream_index),
        });
        let pos = match self.calls.iter().position(|s| s.upstream_index == upstream_index) {
            Some(p) => p,
            None => {
                self.calls.push(StreamingCall {
                    upstream_index,
                    call_id: None,
                    name: None,
                    arguments: String::new(),
                    announced: None,
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[pos];
        if call.call_id.is_none() {
            call.call_id = delta.id.filter(|id| !id.is_empty());
        }
        let function = delta.function.unwrap_or_default();
        if let Some(name) = function.name.filter(|n| !n.is_empty()) {
            call.name.get_or_insert(name);
        }
        let fragment = function.arguments.unwrap_or_default();
        if let Some(announced) = &mut call.announced {
            if !fragment.is_empty() {
                call.arguments.push_str(&fragment);
                announced.on_arguments(&fragment, events);
            }
        } else {
            call.arguments.push_str(&fragment);
            if call.name.is_some() {
                announce(call, self.turn, &self.targets, &self.tools, log, events);
            }
        }
    }

    fn close_reasoning(&mut self, log: &mut OutputLog, events: &mut Vec<ResponseEvent>) {
        if let Some(r) = self.reasoning.take() {
            events.push(ResponseEvent::ReasoningDone {
                item_id: r.id.clone(),
                output_index: r.output_index,
                content_index: 0,
                text: r.text.clone(),
            });
            let item = Item::Reasoning(ReasoningItem {
                id: r.id,
                summary: Vec::new(),
                content: vec![ReasoningText { text: r.text }],
                encrypted_content: None,
            });
            events.push(ResponseEvent::OutputItemDone { output_index: r.output_index, item: Box::new(item.clone()) });
            log.items.push(item);
        }
    }

    fn close_message(&mut self, status: ItemStatus, log: &mut OutputLog, events: &mut Vec<ResponseEvent>) {
        if let Some(mut m) = self.message.take() {
            self.tools.annotate(&m.id, m.output_index, &m.text, &mut m.annotations, true, events);
            events.push(ResponseEvent::OutputTextDone {
                item_id: m.id.clone(),
                output_index: m.output_index,
                content_index: 0,
                text: m.text.clone(),
                logprobs: [],
            });
            let part = ContentPart::OutputText { text: m.text, annotations: m.annotations, logprobs: Vec::new() };
            events.push(ResponseEvent::ContentPartDone {
                item_id: m.id.clone(),
                output_index: m.output_index,
                content_index: 0,
                part: Box::new(part.clone()),
            });
            let item =
                Item::Message(MessageItem { id: m.id, role: MessageRole::Assistant, status, content: vec![part] });
            events.push(ResponseEvent::OutputItemDone { output_index: m.output_index, item: Box::new(item.clone()) });
            log.items.push(item);
        }
    }

    /// The upstream stream ended: close every open item and say how the turn ended.
    pub fn finish(mut self, log: &mut OutputLog, events: &mut Vec<ResponseEvent>) -> Result<TurnResult, TurnError> {
        let end = match (self.finish_reason.as_deref(), self.matched_stop.take()) {
            (Some("length"), _) => TurnEnd::Cut(IncompleteReason::MaxOutputTokens),
            (Some("content_filter"), _) => TurnEnd::Cut(IncompleteReason::ContentFilter),
            (Some("stop"), Some(stop)) => TurnEnd::StopSequence(stop),
            (Some(_), _) => TurnEnd::Finished,
            // A server that ends with [DONE] but no finish_reason still finished cleanly.
            (None, _) if self.saw_done => TurnEnd::Finished,
            (None, _) => return Err(TurnError::Truncated),
        };
        for segment in self.splitter.finish() {
            self.on_segment(segment, log, events);
        }
        self.close_reasoning(log, events);
        let message_status = match end {
            TurnEnd::Cut(_) => ItemStatus::Incomplete,
            TurnEnd::Finished | TurnEnd::StopSequence(_) => ItemStatus::Completed,
        };
        self.close_message(message_status, log, events);

        let mut client_calls = Vec::new();
        let mut gateway_calls = Vec::new();
        let mut held_calls = Vec::new();
        for mut call in std::mem::take(&mut self.calls) {
            if call.announced.is_none() {
                if call.name.is_none() {
                    return Err(TurnError::NamelessToolCall);
                }
                announce(&mut call, self.turn, &self.targets, &self.tools, log, events);
            }
            let Some(open) = call.announced.take() else { continue };
            let name = call.name.take().unwrap_or_default();
            match open.finish(name, call.call_id, call.arguments, events) {
                FinishedCall::Client(item) => {
                    log.items.push(item.clone());
                    client_calls.push(item);
                }
                FinishedCall::Gateway(pending) => gateway_calls.push(pending),
                FinishedCall::Held(item) => {
                    log.items.push(item.clone());
                    held_calls.push(item);
                }
            }
        }
        Ok(TurnResult { end, usage: self.usage, client_calls, gateway_calls, held_calls })
    }
}

/// Announce a call's item — in the shape of whoever runs it, a gateway tool item's id minted in
/// `turn` — and send the arguments gathered so far as its first delta.
fn announce(
    call: &mut StreamingCall,
    turn: TurnStamp,
    targets: &CallTargets,
    tools: &GatewayToolState,
    log: &mut OutputLog,
    events: &mut Vec<ResponseEvent>,
) {
    let name = call.name.clone().unwrap_or_default();
    let place = tools.place(turn, log.allocate());
    let mut open = OpenCall::announce(targets.of(&name), &name, &mut call.call_id, place, events);
    if !call.arguments.is_empty() {
        open.on_arguments(&call.arguments, events);
    }
    call.announced = Some(open);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_kinds::{CallTarget, ClientCallShape, GatewayCallItem, GatewayKind};
    use respgw_protocol::items::FunctionCallItem;
    use serde_json::{Value, json};

    fn chunk(v: Value) -> ChatChunk {
        serde_json::from_value(v).unwrap()
    }

    /// A turn without gateway tools.
    fn plain_turn() -> TurnState {
        TurnState::new(TurnStamp::after(None), CallTargets::default(), GatewayToolState::in_container(""))
    }

    /// A turn in which calls to these functions go to these targets.
    fn turn_calling(targets: Vec<(&str, CallTarget)>) -> TurnState {
        let targets = targets.into_iter().map(|(name, target)| (name.to_owned(), target)).collect();
        TurnState::new(TurnStamp::after(None), targets, GatewayToolState::in_container("cntr_1"))
    }

    /// The turn's `function_call` items.
    fn function_calls(result: &TurnResult) -> Vec<FunctionCallItem> {
        result
            .client_calls
            .iter()
            .filter_map(|item| match item {
                Item::FunctionCall(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }

    fn run(chunks: Vec<Value>) -> (Vec<ResponseEvent>, OutputLog, Result<TurnResult, TurnError>) {
        let mut state = plain_turn();
        let mut log = OutputLog::default();
        let mut events = Vec::new();
        for c in chunks {
            state.on_chunk(chunk(c), &mut log, &mut events);
        }
        state.on_done();
        let result = state.finish(&mut log, &mut events);
        (events, log, result)
    }

    fn kinds(events: &[ResponseEvent]) -> Vec<&'static str> {
        events.iter().map(ResponseEvent::kind).collect()
    }

    #[test]
    fn text_turn_emits_the_message_sequence() {
        let (events, log, result) = run(vec![
            json!({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}),
            json!({"choices":[{"index":0,"delta":{"content":"Paris"}}]}),
            json!({"choices":[{"index":0,"delta":{"content":"."},"finish_reason":"stop"}]}),
        ]);
        assert_eq!(
            kinds(&events),
            vec![
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done"
            ]
        );
        assert_eq!(result.unwrap().end, TurnEnd::Finished);
        let Item::Message(m) = &log.items[0] else { panic!() };
        assert_eq!(m.content, vec![ContentPart::output_text("Paris.")]);
    }

    #[test]
    fn reasoning_field_then_text_makes_two_items_in_order() {
        let (events, log, _) = run(vec![
            json!({"choices":[{"index":0,"delta":{"reasoning_content":"Think"}}]}),
            json!({"choices":[{"index":0,"delta":{"reasoning":"ing"}}]}),
            json!({"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}),
        ]);
        assert_eq!(
            kinds(&events)[..4],
            [
                "response.output_item.added",
                "response.reasoning.delta",
                "response.reasoning.delta",
                "response.reasoning.done"
            ]
        );
        let Item::Reasoning(r) = &log.items[0] else { panic!() };
        assert_eq!(r.text(), "Thinking");
        assert!(matches!(log.items[1], Item::Message(_)));
    }

    #[test]
    fn think_tags_become_reasoning() {
        let (_, log, _) = run(vec![
            json!({"choices":[{"index":0,"delta":{"content":"<think>plan</think>\n\nAnswer"},"finish_reason":"stop"}]}),
        ]);
        let Item::Reasoning(r) = &log.items[0] else { panic!("{:?}", log.items) };
        assert_eq!(r.text(), "plan");
        let Item::Message(m) = &log.items[1] else { panic!() };
        assert_eq!(m.content, vec![ContentPart::output_text("\n\nAnswer")]);
    }

    #[test]
    fn a_namespaced_call_comes_back_with_its_namespace() {
        let mut state = turn_calling(vec![(
            "multi_agent_v1__close_agent",
            CallTarget::Client(ClientCallShape::Namespaced {
                namespace: "multi_agent_v1".into(),
                name: "close_agent".into(),
            }),
        )]);
        let (mut log, mut events) = (OutputLog::default(), Vec::new());
        state.on_chunk(
            chunk(json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_9","type":"function",
                "function":{"name":"multi_agent_v1__close_agent","arguments":"{\"target\":\"a1\"}"}}]},"finish_reason":"tool_calls"}]})),
            &mut log,
            &mut events,
        );
        state.on_done();
        let calls = function_calls(&state.finish(&mut log, &mut events).unwrap());
        assert_eq!((calls[0].name.as_str(), calls[0].namespace.as_deref()), ("close_agent", Some("multi_agent_v1")));
        let added = events.iter().find_map(|e| match e {
            ResponseEvent::OutputItemAdded { item, .. } => match item.as_ref() {
                Item::FunctionCall(f) => Some(f.clone()),
                _ => None,
            },
            _ => None,
        });
        assert_eq!(added.and_then(|f| f.namespace), Some("multi_agent_v1".to_owned()));
    }

    #[test]
    fn custom_and_local_shell_calls_come_back_in_their_own_shapes() {
        let mut state = turn_calling(vec![
            ("apply_patch", CallTarget::Client(ClientCallShape::Custom)),
            ("local_shell", CallTarget::Client(ClientCallShape::LocalShell)),
        ]);
        let (mut log, mut events) = (OutputLog::default(), Vec::new());
        for c in [
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function",
                "function":{"name":"apply_patch","arguments":"{\"input\":\"*** Begin"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" Patch\"}"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function",
                "function":{"name":"local_shell","arguments":"{\"command\":[\"ls\",\"-l\"],\"workdir\":\"/w\"}"}}]},
                "finish_reason":"tool_calls"}]}),
        ] {
            state.on_chunk(chunk(c), &mut log, &mut events);
        }
        state.on_done();
        let result = state.finish(&mut log, &mut events).unwrap();
        assert!(function_calls(&result).is_empty());
        assert_eq!(
            kinds(&events),
            [
                "response.output_item.added",
                "response.output_item.done",
                "response.output_item.added",
                "response.output_item.done"
            ]
        );
        let Item::CustomToolCall(c) = &result.client_calls[0] else { panic!("{result:?}") };
        assert_eq!(
            (c.name.as_str(), c.input.as_str(), c.call_id.as_str()),
            ("apply_patch", "*** Begin Patch", "call_a")
        );
        let Item::LocalShellCall(l) = &result.client_calls[1] else { panic!("{result:?}") };
        assert_eq!(l.action.command, ["ls", "-l"]);
        assert_eq!(l.action.working_directory.as_deref(), Some("/w"));
        assert_eq!(log.items.len(), 2);
    }

    #[test]
    fn tool_call_streams_arguments_without_a_spurious_empty_object() {
        let (events, _, result) = run(vec![
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"finish_reason":"tool_calls"}]}),
        ]);
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                ResponseEvent::FunctionCallArgumentsDelta { delta, .. } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas.concat(), "{\"city\":\"Paris\"}");
        let calls = function_calls(&result.unwrap());
        assert_eq!(calls[0].call_id, "call_1");
        assert_eq!(calls[0].arguments, "{\"city\":\"Paris\"}");
    }

    #[test]
    fn blank_text_before_a_tool_call_makes_no_message() {
        let (_, log, _) = run(vec![
            json!({"choices":[{"index":0,"delta":{"content":"\n\n"}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}),
        ]);
        assert_eq!(log.items.len(), 1);
        assert!(matches!(log.items[0], Item::FunctionCall(_)));
    }

    #[test]
    fn length_cut_is_incomplete_and_marks_the_message() {
        let (_, log, result) =
            run(vec![json!({"choices":[{"index":0,"delta":{"content":"Partial"},"finish_reason":"length"}]})]);
        assert_eq!(result.unwrap().end, TurnEnd::Cut(IncompleteReason::MaxOutputTokens));
        let Item::Message(m) = &log.items[0] else { panic!() };
        assert_eq!(m.status, ItemStatus::Incomplete);
    }

    #[test]
    fn a_stop_string_the_upstream_names_ends_the_turn_on_it() {
        // vLLM names the string in `stop_reason`, SGLang in `matched_stop`.
        for key in ["stop_reason", "matched_stop"] {
            let (_, _, result) = run(vec![
                json!({"choices":[{"index":0,"delta":{"content":"1, 2, 3"}}]}),
                json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop",key:"END"}]}),
            ]);
            assert_eq!(result.unwrap().end, TurnEnd::StopSequence("END".into()), "{key}");
        }
    }

    #[test]
    fn a_stop_token_or_end_of_sequence_is_a_plain_finish() {
        // A stop token id (a number) or the end-of-sequence token (`null`) names no stop string.
        for stop in [json!(128009), Value::Null] {
            let (_, _, result) = run(vec![
                json!({"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop","stop_reason":stop}]}),
            ]);
            assert_eq!(result.unwrap().end, TurnEnd::Finished);
        }
    }

    #[test]
    fn a_stream_without_finish_or_done_is_truncated() {
        let mut state = plain_turn();
        let mut log = OutputLog::default();
        let mut events = Vec::new();
        state.on_chunk(chunk(json!({"choices":[{"index":0,"delta":{"content":"Par"}}]})), &mut log, &mut events);
        assert!(matches!(state.finish(&mut log, &mut events), Err(TurnError::Truncated)));
    }

    #[test]
    fn usage_chunk_is_read() {
        let (_, _, result) = run(vec![
            json!({"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}),
            json!({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,
                   "prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}),
        ]);
        let usage = result.unwrap().usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens, usage.total_tokens), (10, 3, 13));
        assert_eq!(usage.input_tokens_details.cached_tokens, 4);
        assert_eq!(usage.output_tokens_details.reasoning_tokens, 2);
    }

    #[test]
    fn parallel_calls_get_their_own_items() {
        let (_, log, result) = run(vec![json!({"choices":[{"index":0,"delta":{"tool_calls":[
                {"index":0,"id":"a","function":{"name":"f","arguments":"{\"x\":1}"}},
                {"index":1,"id":"b","function":{"name":"g","arguments":""}}]},"finish_reason":"tool_calls"}]})]);
        let calls = function_calls(&result.unwrap());
        assert_eq!(calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["f", "g"]);
        assert_eq!(calls[1].arguments, "{}");
        assert_eq!(log.items.len(), 2);
    }

    #[test]
    fn a_code_interpreter_call_streams_decoded_code_and_stays_open() {
        let mut state = turn_calling(vec![("code_interpreter", CallTarget::Gateway(GatewayKind::CodeInterpreter))]);
        let mut log = OutputLog::default();
        let mut events = Vec::new();
        for c in [
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_9","function":{"name":"code_interpreter","arguments":"{\"code\": \"import"}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" math\\nmath.sqrt(2)\"}"}}]},"finish_reason":"tool_calls"}]}),
        ] {
            state.on_chunk(chunk(c), &mut log, &mut events);
        }
        state.on_done();
        let result = state.finish(&mut log, &mut events).unwrap();
        assert_eq!(
            kinds(&events),
            [
                "response.output_item.added",
                "response.code_interpreter_call.in_progress",
                "response.code_interpreter_call_code.delta",
                "response.code_interpreter_call_code.delta",
                "response.code_interpreter_call_code.done"
            ]
        );
        let deltas: String = events
            .iter()
            .filter_map(|e| match e {
                ResponseEvent::CodeInterpreterCallCodeDelta { delta, .. } => Some(delta.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, "import math\nmath.sqrt(2)");
        assert!(log.items.is_empty(), "the item is done only after it has run");
        let GatewayCallItem::CodeInterpreter(call) = &result.gateway_calls[0].item else { panic!("{result:?}") };
        assert_eq!(call.code(), "import math\nmath.sqrt(2)");
        let ResponseEvent::OutputItemAdded { item, .. } = &events[0] else { panic!() };
        let Item::CodeInterpreterCall(ci) = item.as_ref() else { panic!() };
        assert_eq!((ci.container_id.as_str(), ci.outputs.is_none()), ("cntr_1", true));
    }

    #[test]
    fn a_web_search_call_is_announced_without_an_action_or_argument_events() {
        let mut state = turn_calling(vec![("web_search", CallTarget::Gateway(GatewayKind::WebSearch))]);
        let mut log = OutputLog::default();
        let mut events = Vec::new();
        for c in [
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_ws1","function":{"name":"web_search","arguments":""}}]}}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"query\": \"vllm\"}"}}]},"finish_reason":"tool_calls"}]}),
        ] {
            state.on_chunk(chunk(c), &mut log, &mut events);
        }
        state.on_done();
        let result = state.finish(&mut log, &mut events).unwrap();
        assert_eq!(kinds(&events), ["response.output_item.added", "response.web_search_call.in_progress"]);
        let ResponseEvent::OutputItemAdded { item, .. } = &events[0] else { panic!() };
        assert_eq!(serde_json::to_value(item).unwrap().as_object().unwrap().len(), 3, "id, type, status: {item:?}");
        assert_eq!(result.gateway_calls[0].arguments, "{\"query\": \"vllm\"}");
        assert!(log.items.is_empty(), "the item is done only after it has run");
    }

    #[test]
    fn the_gateway_calls_of_a_turn_carry_its_stamp_in_their_ids() {
        let turn = TurnStamp::after(None);
        let targets = [
            ("web_search".to_owned(), CallTarget::Gateway(GatewayKind::WebSearch)),
            ("code_interpreter".to_owned(), CallTarget::Gateway(GatewayKind::CodeInterpreter)),
        ];
        let mut state = TurnState::new(turn, targets.into_iter().collect(), GatewayToolState::in_container("cntr_1"));
        let mut log = OutputLog::default();
        let mut events = Vec::new();
        state.on_chunk(
            chunk(json!({"choices":[{"index":0,"delta":{"tool_calls":[
                {"index":0,"id":"a","function":{"name":"web_search","arguments":"{}"}},
                {"index":1,"id":"b","function":{"name":"code_interpreter","arguments":"{\"code\":\"1\"}"}}]},
                "finish_reason":"tool_calls"}]})),
            &mut log,
            &mut events,
        );
        state.on_done();
        let calls = state.finish(&mut log, &mut events).unwrap().gateway_calls;
        assert_eq!(calls.len(), 2);
        assert!(calls[0].item.item_id().starts_with("ws_") && calls[1].item.item_id().starts_with("ci_"));
        assert_ne!(calls[0].item.item_id(), calls[1].item.item_id());
        assert!(calls.iter().all(|c| TurnStamp::of(c.item.item_id()) == Some(turn)), "{calls:?}");
    }

    #[test]
    fn a_call_that_needs_approval_is_an_approval_request_and_not_run() {
        let target = CallTarget::McpApproval { server_label: "docs".into(), tool_name: "delete".into() };
        let mut state = turn_calling(vec![("mcp__docs__delete", target)]);
        let mut log = OutputLog::default();
        let mut events = Vec::new();
        for args in ["", "{\"path\":", "\"a\"}"] {
            state.on_chunk(
                chunk(json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"mcp__docs__delete","arguments":args}}]}}]})),
                &mut log,
                &mut events,
            );
        }
        state.on_chunk(
            chunk(json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})),
            &mut log,
            &mut events,
        );
        state.on_done();
        let result = state.finish(&mut log, &mut events).unwrap();
        assert_eq!(kinds(&events), ["response.output_item.added", "response.output_item.done"]);
        assert!(result.gateway_calls.is_empty() && result.client_calls.is_empty(), "{result:?}");
        let [Item::McpApprovalRequest(request)] = result.held_calls.as_slice() else { panic!("{result:?}") };
        assert_eq!(
            (request.server_label.as_str(), request.name.as_str(), request.arguments.as_str()),
            ("docs", "delete", "{\"path\":\"a\"}")
        );
        assert!(request.id.starts_with("mcpr_") && TurnStamp::of(&request.id).is_some(), "{request:?}");
        assert_eq!(log.items, result.held_calls, "done once its arguments are complete");
    }

    #[test]
    fn an_mcp_call_uses_the_real_label_and_tool_name() {
        let kind = GatewayKind::Mcp { server_label: "docs".into(), tool_name: "search.v2".into() };
        let mut state = turn_calling(vec![("mcp__docs__search_v2_1234", CallTarget::Gateway(kind))]);
        let mut log = OutputLog::default();
        let mut events = Vec::new();
        state.on_chunk(
            chunk(json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"mcp__docs__search_v2_1234","arguments":""}}]},"finish_reason":"tool_calls"}]})),
            &mut log,
            &mut events,
        );
        state.on_done();
        let result = state.finish(&mut log, &mut events).unwrap();
        assert_eq!(
            kinds(&events),
            [
                "response.output_item.added",
                "response.mcp_call.in_progress",
                "response.mcp_call_arguments.delta",
                "response.mcp_call_arguments.done"
            ]
        );
        let ResponseEvent::OutputItemAdded { item, .. } = &events[0] else { panic!() };
        let Item::McpCall(m) = item.as_ref() else { panic!() };
        assert_eq!((m.server_label.as_str(), m.name.as_str()), ("docs", "search.v2"));
        assert_eq!(result.gateway_calls[0].arguments, "{}");
    }
}
