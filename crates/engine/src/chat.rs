//! The upstream wire format: OpenAI chat completions (`POST {base}/chat/completions`).
//!
//! [`ChatRequest::build`] turns history items and the validated request into the body we send;
//! [`ChatChunk`] is one parsed `chat.completion.chunk` of the stream that comes back. Only the
//! fields the gateway uses are modelled; unknown fields are ignored so new server versions work.

use respgw_protocol::ValidatedRequest;
use respgw_protocol::ids::TurnStamp;
use respgw_protocol::items::{ContentPart, FileContent, InputFile, Item, MessageRole};
use respgw_protocol::request::TextFormat;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::compaction;
use crate::gateway_tool::FunctionSpec;
use crate::tool_kinds::{GatewayReplay, client};

/// The JSON body of one upstream chat-completions call.
pub struct ChatRequest;

/// The functions offered to the model in one turn, and the `tool_choice` sent with them.
#[derive(Debug, Clone)]
pub struct ToolOffer {
    pub functions: Vec<FunctionSpec>,
    /// Chat-completions spelling: `"auto"`, `"none"`, `"required"` or a named function. It is
    /// forwarded for real (never emulated with prompt text), so the upstream's guided decoding
    /// enforces it.
    pub tool_choice: Value,
}

impl ChatRequest {
    /// Build the streaming request for `history` with the tools of `offer`; gateway tool results
    /// longer than `max_tool_output_bytes` are cut, with a note telling the model so.
    pub fn build<'a>(
        req: &ValidatedRequest,
        history: impl IntoIterator<Item = &'a Item>,
        offer: &ToolOffer,
        max_tool_output_bytes: usize,
    ) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(req.model));
        body.insert(
            "messages".into(),
            Value::Array(messages(req.instructions.as_deref(), history, max_tool_output_bytes)),
        );
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));

        if !offer.functions.is_empty() {
            let tools: Vec<Value> = offer
                .functions
                .iter()
                .map(|f| {
                    let mut function = Map::new();
                    function.insert("name".into(), json!(f.name));
                    if let Some(d) = &f.description {
                        function.insert("description".into(), json!(d));
                    }
                    function.insert("parameters".into(), f.parameters.clone());
                    if let Some(strict) = f.strict {
                        function.insert("strict".into(), json!(strict));
                    }
                    json!({"type": "function", "function": function})
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
            body.insert("tool_choice".into(), offer.tool_choice.clone());
            if let Some(p) = req.parallel_tool_calls {
                body.insert("parallel_tool_calls".into(), json!(p));
            }
        }
        if let Some(n) = req.max_output_tokens {
            body.insert("max_completion_tokens".into(), json!(n));
        }
        for (key, value) in [
            ("temperature", req.temperature),
            ("top_p", req.top_p),
            ("presence_penalty", req.presence_penalty),
            ("frequency_penalty", req.frequency_penalty),
        ] {
            if let Some(v) = value {
                body.insert(key.into(), json!(v));
            }
        }
        if !req.stop.is_empty() {
            body.insert("stop".into(), json!(req.stop));
        }
        if let Some(k) = req.top_k {
            body.insert("top_k".into(), json!(k));
        }
        if let Some(effort) = req.reasoning.as_ref().and_then(|r| r.effort) {
            body.insert("reasoning_effort".into(), json!(effort.as_str()));
        }
        match &req.text.format {
            TextFormat::Text => {}
            TextFormat::JsonObject => {
                body.insert("response_format".into(), json!({"type": "json_object"}));
            }
            TextFormat::JsonSchema { name, schema, description, strict } => {
                let mut js = Map::new();
                js.insert("name".into(), json!(name));
                js.insert("schema".into(), Value::Object(schema.clone()));
                if let Some(d) = description {
                    js.insert("description".into(), json!(d));
                }
                if let Some(s) = strict {
                    js.insert("strict".into(), json!(s));
                }
                body.insert("response_format".into(), json!({"type": "json_schema", "json_schema": js}));
            }
        }
        Value::Object(body)
    }
}

/// What the model is told a gateway tool call returned (each kind's text, [`GatewayReplay`]), cut
/// when longer than `max_bytes`: at a character boundary, ending with a note telling the model so
/// (the item the client sees keeps the whole output).
fn truncate_for_model(mut text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let total = text.len();
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!("\n[output truncated by the gateway: the first {cut} of {total} bytes are shown]"));
    text
}

/// What an assistant turn being assembled holds of gateway tool calls, as far as telling where
/// the turn ends goes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum GatewayCalls {
    #[default]
    None,
    /// Calls whose ids name this model turn.
    Named(TurnStamp),
    /// A call whose id names no turn (another system's id): a turn of its own.
    Unnamed,
}

/// An assistant turn being assembled from consecutive assistant-side items.
#[derive(Default)]
struct AssistantTurn {
    text: Vec<String>,
    reasoning: Vec<String>,
    tool_calls: Vec<Value>,
    /// Results of the gateway's own calls in this turn, sent right after the assistant message.
    gateway_results: Vec<Value>,
    /// Set by the turn's first gateway tool call.
    gateway: GatewayCalls,
}

impl AssistantTurn {
    fn is_empty(&self) -> bool {
        self.text.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty()
    }

    /// Whether the assistant-side `item` was produced by the model turn after this one. The
    /// gateway records a turn as its reasoning, its text, its client calls and the calls it held
    /// for the client, then its gateway tool calls (each once it has run, with its result), so:
    /// - reasoning after text or calls is the next turn's (reasoning precedes what it produced);
    /// - text or a client call after a gateway tool call is the next turn's (the model had
    ///   seen the result);
    /// - a gateway tool call after another is in the same turn only if both ids name the same
    ///   turn ([`TurnStamp`]); ids that name none (another system's) are one turn each.
    fn is_followed_by_turn_of(&self, item: &Item) -> bool {
        match item {
            Item::Reasoning(_) => !self.text.is_empty() || !self.tool_calls.is_empty(),
            Item::Message(m) if m.role == MessageRole::Assistant => self.gateway != GatewayCalls::None,
            Item::FunctionCall(_) | Item::CustomToolCall(_) | Item::LocalShellCall(_) => {
                self.gateway != GatewayCalls::None
            }
            Item::McpCall(_)
            | Item::McpApprovalRequest(_)
            | Item::CodeInterpreterCall(_)
            | Item::WebSearchCall(_)
            | Item::FileSearchCall(_) => match self.gateway {
                GatewayCalls::None => false,
                GatewayCalls::Named(turn) => TurnStamp::of(item.id()) != Some(turn),
                GatewayCalls::Unnamed => true,
            },
            // These end the turn in `messages` itself, or are not sent.
            Item::Message(_)
            | Item::FunctionCallOutput(_)
            | Item::CustomToolCallOutput(_)
            | Item::LocalShellCallOutput(_)
            | Item::Compaction(_)
            | Item::McpListTools(_)
            | Item::McpApprovalResponse(_) => false,
        }
    }

    /// A call the gateway answers itself (item `id`), and the result the model is told.
    fn push_gateway_call(&mut self, id: &str, call: Value, result: String) {
        self.tool_calls.push(call);
        self.gateway_results.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
        if self.gateway == GatewayCalls::None {
            self.gateway = TurnStamp::of(id).map_or(GatewayCalls::Unnamed, GatewayCalls::Named);
        }
    }

    /// The assistant message, followed by the results of its gateway tool calls.
    fn into_messages(self, out: &mut Vec<Value>) {
        let mut m = Map::new();
        m.insert("role".into(), json!("assistant"));
        m.insert("content".into(), if self.text.is_empty() { Value::Null } else { json!(self.text.join("\n\n")) });
        if !self.reasoning.is_empty() {
            // vLLM, SGLang and llama.cpp chat templates read prior reasoning from this field.
            m.insert("reasoning_content".into(), json!(self.reasoning.join("\n\n")));
        }
        if !self.tool_calls.is_empty() {
            m.insert("tool_calls".into(), Value::Array(self.tool_calls));
        }
        out.push(Value::Object(m));
        out.extend(self.gateway_results);
    }
}

/// History items → chat messages: one assistant message per model turn, so that the messages of
/// a tool loop's round are the previous round's with the new turn appended (what an upstream's
/// prefix cache reuses), and the model sees each call after the results it had already seen.
/// The assistant-side items of one turn (reasoning, assistant text, function calls, the
/// gateway's own tool calls) form its message; where one turn ends is decided by
/// `AssistantTurn::is_followed_by_turn_of` from the items alone, so the live loop, a stored
/// conversation and a client's replay of the output give the same messages. Gateway tool calls
/// are followed by their results, in call order; what a kind tells of its items, and which items
/// it tells with another, is its own (`tool_kinds::GatewayReplay`). Items that are neither a call
/// nor a message are not sent. The latest compaction item stands for everything before it but the
/// user messages, and is sent as its summary ([`compaction::replayed`]).
pub fn messages<'a>(
    instructions: Option<&str>,
    history: impl IntoIterator<Item = &'a Item>,
    max_tool_output_bytes: usize,
) -> Vec<Value> {
    let history = compaction::replayed(history.into_iter().collect());
    let gateway = GatewayReplay::of(&history);
    let mut out = Vec::with_capacity(history.len() + 1);
    if let Some(text) = instructions {
        out.push(json!({"role": "system", "content": text}));
    }
    let mut turn = AssistantTurn::default();
    let flush = |turn: &mut AssistantTurn, out: &mut Vec<Value>| {
        if !turn.is_empty() {
            std::mem::take(turn).into_messages(out);
        }
    };
    for item in history {
        if gateway.is_told_with_another(item) {
            continue;
        }
        if turn.is_followed_by_turn_of(item) {
            flush(&mut turn, &mut out);
        }
        match item {
            Item::Reasoning(r) => {
                let text = r.text();
                if !text.is_empty() {
                    turn.reasoning.push(text);
                }
            }
            Item::Message(m) if m.role == MessageRole::Assistant => {
                turn.text.extend(m.content.iter().filter_map(|p| match p {
                    ContentPart::OutputText { text, .. } | ContentPart::InputText { text } => Some(text.clone()),
                    ContentPart::Refusal { refusal } => Some(refusal.clone()),
                    ContentPart::InputImage { .. } | ContentPart::InputFile(_) => None,
                }));
            }
            Item::FunctionCall(_) | Item::CustomToolCall(_) | Item::LocalShellCall(_) => {
                turn.tool_calls.extend(client::replayed_call(item));
            }
            Item::FunctionCallOutput(_) | Item::CustomToolCallOutput(_) | Item::LocalShellCallOutput(_) => {
                flush(&mut turn, &mut out);
                out.extend(client::replayed_output(item));
            }
            Item::McpCall(_)
            | Item::CodeInterpreterCall(_)
            | Item::WebSearchCall(_)
            | Item::FileSearchCall(_)
            | Item::McpApprovalRequest(_) => {
                if let Some((call, result)) = gateway.call_and_result(item) {
                    turn.push_gateway_call(item.id(), call, truncate_for_model(result, max_tool_output_bytes));
                }
            }
            Item::Compaction(c) => {
                flush(&mut turn, &mut out);
                out.push(compaction::summary_message(c));
            }
            Item::McpListTools(_) | Item::McpApprovalResponse(_) => {}
            Item::Message(m) => {
                flush(&mut turn, &mut out);
                let role = match m.role {
                    MessageRole::User => "user",
                    // `developer` is not understood by most open-model chat templates.
                    _ => "system",
                };
                out.push(json!({"role": role, "content": content_value(&m.content)}));
            }
        }
    }
    flush(&mut turn, &mut out);
    out
}

/// Message content: a plain string when it is only text (what every server accepts), else parts.
/// An `input_file` is its `model_content`: text, or an image sent like an `input_image`.
pub(crate) fn content_value(parts: &[ContentPart]) -> Value {
    let texts: Option<Vec<&str>> = parts.iter().map(part_text).collect();
    if let Some(texts) = texts {
        return json!(texts.join("\n\n"));
    }
    Value::Array(
        parts
            .iter()
            .map(|p| match (part_text(p), p) {
                (Some(text), _) => json!({"type": "text", "text": text}),
                (None, ContentPart::InputImage { image_url, detail, model_image_url }) => {
                    let url = model_image_url.as_deref().unwrap_or(image_url);
                    json!({"type": "image_url", "image_url": {"url": url, "detail": detail}})
                }
                (
                    None,
                    ContentPart::InputFile(InputFile { model_content: Some(FileContent::Image { image_url }), .. }),
                ) => {
                    json!({"type": "image_url", "image_url": {"url": image_url}})
                }
                (None, _) => json!({"type": "text", "text": ""}),
            })
            .collect(),
    )
}

/// The text a part stands for; `None` for images (and image files).
fn part_text(part: &ContentPart) -> Option<&str> {
    match part {
        ContentPart::InputText { text } | ContentPart::OutputText { text, .. } => Some(text),
        ContentPart::Refusal { refusal } => Some(refusal),
        ContentPart::InputFile(file) => match &file.model_content {
            Some(FileContent::Text { text }) => Some(text),
            Some(FileContent::Image { .. }) => None,
            None => Some("[a file the gateway did not read]"),
        },
        // Only images the model server need not fetch are sent as images: a `data:` URL, or what
        // the gateway fetched when the request arrived.
        ContentPart::InputImage { model_image_url: Some(_), .. } => None,
        ContentPart::InputImage { image_url, .. } if is_data_url(image_url) => None,
        ContentPart::InputImage { .. } => Some("[an image the gateway did not fetch]"),
    }
}

/// Whether `url` carries its content (`data:`), rather than naming where to fetch it.
pub(crate) fn is_data_url(url: &str) -> bool {
    url.get(..5).is_some_and(|scheme| scheme.eq_ignore_ascii_case("data:"))
}

/// One `chat.completion.chunk`.
#[derive(Debug, Deserialize)]
pub struct ChatChunk {
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub usage: Option<ChunkUsage>,
    /// Servers such as vLLM report a failure mid-stream as `data: {"error": {...}}`.
    #[serde(default)]
    pub error: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Option<ChunkDelta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// vLLM: the stop string that ended the choice (a number when a stop token id did; `null`
    /// for the end-of-sequence token).
    #[serde(default)]
    pub stop_reason: Option<Value>,
    /// SGLang: the same, under its own name.
    #[serde(default)]
    pub matched_stop: Option<Value>,
}

impl ChunkChoice {
    /// The stop string the upstream says ended the choice, when it names one.
    pub fn matched_stop_string(&self) -> Option<&str> {
        [&self.stop_reason, &self.matched_stop].into_iter().find_map(|v| v.as_ref().and_then(Value::as_str))
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ChunkDelta {
    #[serde(default)]
    pub content: Option<String>,
    /// vLLM ≥ 0.9 and others.
    #[serde(default)]
    pub reasoning: Option<String>,
    /// vLLM < 0.9, SGLang, llama.cpp, DeepSeek.
    #[serde(default)]
    pub reasoning_content: Option<String>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Deserialize)]
pub struct ToolCallDelta {
    #[serde(default)]
    pub index: Option<usize>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
pub struct FunctionDelta {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct ChunkUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default)]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

#[derive(Debug, Default, Deserialize)]
pub struct PromptTokensDetails {
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct CompletionTokensDetails {
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl ChunkUsage {
    pub fn to_usage(&self) -> respgw_protocol::Usage {
        let mut u = respgw_protocol::Usage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
            total_tokens: self.prompt_tokens + self.completion_tokens,
            ..Default::default()
        };
        u.input_tokens_details.cached_tokens =
            self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0);
        u.output_tokens_details.reasoning_tokens =
            self.completion_tokens_details.as_ref().and_then(|d| d.reasoning_tokens).unwrap_or(0);
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use respgw_protocol::CreateResponseRequest;

    fn req(v: Value) -> ValidatedRequest {
        CreateResponseRequest::from_slice(v.to_string().as_bytes()).unwrap().validate(&Default::default()).unwrap()
    }

    fn no_tools() -> ToolOffer {
        ToolOffer { functions: Vec::new(), tool_choice: json!("auto") }
    }

    #[test]
    fn plain_request_body() {
        let r = req(json!({"model":"m","input":"hi","instructions":"Be brief.","max_output_tokens":16}));
        let body = ChatRequest::build(&r, &r.input, &no_tools(), usize::MAX);
        assert_eq!(
            body,
            json!({
                "model":"m",
                "messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],
                "stream":true,
                "stream_options":{"include_usage":true},
                "max_completion_tokens":16
            })
        );
    }

    #[test]
    fn offered_functions_and_choice_are_sent() {
        let r = req(json!({"model":"m","input":"hi"}));
        let offer = ToolOffer {
            functions: vec![FunctionSpec {
                name: "get_weather".into(),
                description: None,
                parameters: json!({"type":"object"}),
                strict: Some(true),
            }],
            tool_choice: json!({"type":"function","function":{"name":"get_weather"}}),
        };
        let body = ChatRequest::build(&r, &r.input, &offer, usize::MAX);
        assert_eq!(body["tool_choice"], json!({"type":"function","function":{"name":"get_weather"}}));
        assert_eq!(
            body["tools"][0],
            json!({"type":"function","function":{"name":"get_weather","parameters":{"type":"object"},"strict":true}})
        );
        assert_eq!(body["messages"].as_array().unwrap().len(), 1, "no injected instruction text");
    }

    #[test]
    fn stop_sequences_and_top_k_are_sent_as_sampling_options() {
        let mut r = req(json!({"model":"m","input":"hi"}));
        let body = ChatRequest::build(&r, &r.input, &no_tools(), usize::MAX);
        assert!(body.get("stop").is_none() && body.get("top_k").is_none(), "left to the upstream when unset");
        r.stop = vec!["END".into(), "\n\nHuman:".into()];
        r.top_k = Some(40);
        let body = ChatRequest::build(&r, &r.input, &no_tools(), usize::MAX);
        assert_eq!(body["stop"], json!(["END", "\n\nHuman:"]));
        assert_eq!(body["top_k"], json!(40));
    }

    #[test]
    fn json_schema_format_becomes_response_format() {
        let r = req(
            json!({"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true}}}),
        );
        let body = ChatRequest::build(&r, &r.input, &no_tools(), usize::MAX);
        assert_eq!(
            body["response_format"],
            json!({"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"},"strict":true}})
        );
    }

    #[test]
    fn assistant_side_items_merge_into_one_message() {
        let r = req(json!({"model":"m","input":[
            {"role":"user","content":"weather?"},
            {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"call it"}]},
            {"type":"message","role":"assistant","content":"Let me check."},
            {"type":"function_call","call_id":"c1","name":"w","arguments":"{}"},
            {"type":"function_call_output","call_id":"c1","output":"sunny"},
            {"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"answer"}]},
            {"type":"message","role":"assistant","content":"Sunny."}
        ]}));
        let msgs = messages(None, &r.input, usize::MAX);
        assert_eq!(
            Value::Array(msgs),
            json!([
                {"role":"user","content":"weather?"},
                {"role":"assistant","content":"Let me check.","reasoning_content":"call it",
                 "tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]},
                {"role":"tool","tool_call_id":"c1","content":"sunny"},
                {"role":"assistant","content":"Sunny.","reasoning_content":"answer"}
            ])
        );
    }

    #[test]
    fn namespaced_calls_are_replayed_under_the_name_the_model_knows() {
        let r = req(json!({"model":"m","input":[
            {"role":"user","content":"close it"},
            {"type":"function_call","id":"fc_1","status":"completed","call_id":"c1","name":"close_agent",
             "namespace":"multi_agent_v1","arguments":"{}"},
            {"type":"function_call_output","id":"fco_1","call_id":"c1","output":"closed"}
        ]}));
        let msgs = messages(None, &r.input, usize::MAX);
        assert_eq!(msgs[1]["tool_calls"][0]["function"]["name"], "multi_agent_v1__close_agent");
        assert_eq!(msgs[2], json!({"role":"tool","tool_call_id":"c1","content":"closed"}));
    }

    #[test]
    fn images_become_image_url_parts() {
        let r = req(json!({"model":"m","input":[{"role":"user","content":[
            {"type":"input_text","text":"what is this"},
            {"type":"input_image","image_url":"data:image/png;base64,AA","detail":"low"}]}]}));
        let msgs = messages(None, &r.input, usize::MAX);
        assert_eq!(
            msgs[0]["content"],
            json!([{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA","detail":"low"}}])
        );
    }

    #[test]
    fn image_urls_are_sent_only_as_what_the_gateway_fetched() {
        let mut r = req(json!({"model":"m","input":[{"role":"user","content":[
            {"type":"input_text","text":"what is this"},
            {"type":"input_image","image_url":"http://127.0.0.1/cat.png"}]}]}));
        assert_eq!(
            messages(None, &r.input, usize::MAX)[0]["content"],
            json!("what is this\n\n[an image the gateway did not fetch]"),
            "a URL the gateway did not fetch never reaches the model server"
        );
        for (_, _, fetched) in r.input[0].input_images_mut() {
            *fetched = Some("data:image/png;base64,AA".into());
        }
        assert_eq!(
            messages(None, &r.input, usize::MAX)[0]["content"][1],
            json!({"type":"image_url","image_url":{"url":"data:image/png;base64,AA","detail":"auto"}})
        );
        let shown = serde_json::to_value(r.input[0].clone().client_view()).unwrap();
        assert_eq!(
            shown["content"][1],
            json!({"type":"input_image","image_url":"http://127.0.0.1/cat.png","detail":"auto"})
        );
    }

    #[test]
    fn input_files_are_sent_as_what_the_gateway_made_of_them() {
        let mut r = req(json!({"model":"m","input":[{"role":"user","content":[
            {"type":"input_text","text":"read"},
            {"type":"input_file","filename":"a.txt","file_data":"aGk="}]}]}));
        for (_, file) in r.input[0].input_files_mut() {
            file.model_content = Some(FileContent::Text { text: "--- file: a.txt ---\nhi".into() });
        }
        assert_eq!(messages(None, &r.input, usize::MAX)[0]["content"], json!("read\n\n--- file: a.txt ---\nhi"));
        for (_, file) in r.input[0].input_files_mut() {
            file.model_content = Some(FileContent::Image { image_url: "data:image/png;base64,AA".into() });
        }
        assert_eq!(
            messages(None, &r.input, usize::MAX)[0]["content"],
            json!([{"type":"text","text":"read"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA"}}])
        );
    }

    #[test]
    fn developer_messages_are_sent_as_system() {
        let r =
            req(json!({"model":"m","input":[{"role":"developer","content":"rules"},{"role":"user","content":"hi"}]}));
        assert_eq!(messages(None, &r.input, usize::MAX)[0], json!({"role":"system","content":"rules"}));
    }
}

#[cfg(test)]
mod gateway_history_tests {
    use super::*;
    use respgw_protocol::ids::IdKind;
    use respgw_protocol::items::{CallStatus, CodeInterpreterCallItem, CodeInterpreterOutput, McpCallItem};

    #[test]
    fn gateway_calls_are_replayed_with_their_results() {
        let turn = TurnStamp::after(None);
        let (mcp_id, ci_id) = (turn.new_id(IdKind::McpCall), turn.new_id(IdKind::CodeInterpreterCall));
        let history = vec![
            Item::McpCall(McpCallItem {
                id: mcp_id.clone(),
                server_label: "docs".into(),
                name: "search".into(),
                arguments: "{\"q\":\"x\"}".into(),
                status: CallStatus::Completed,
                output: Some("found".into()),
                error: None,
                approval_request_id: None,
            }),
            Item::CodeInterpreterCall(CodeInterpreterCallItem {
                id: ci_id.clone(),
                status: CallStatus::Completed,
                code: "2+2".into(),
                container_id: "cntr_1".into(),
                outputs: Some(vec![CodeInterpreterOutput::Logs { logs: "4".into() }]),
            }),
        ];
        assert_eq!(
            Value::Array(messages(None, &history, usize::MAX)),
            json!([
                {"role":"assistant","content":null,"tool_calls":[
                    {"id":mcp_id,"type":"function","function":{"name":"mcp__docs__search","arguments":"{\"q\":\"x\"}"}},
                    {"id":ci_id,"type":"function","function":{"name":"code_interpreter","arguments":"{\"code\":\"2+2\"}"}}]},
                {"role":"tool","tool_call_id":mcp_id,"content":"found"},
                {"role":"tool","tool_call_id":ci_id,"content":"4"}
            ])
        );
    }

    #[test]
    fn long_tool_results_are_cut_and_the_model_is_told() {
        let call = |output: &str| {
            Item::McpCall(McpCallItem {
                id: "mcp_1".into(),
                server_label: "docs".into(),
                name: "search".into(),
                arguments: "{}".into(),
                status: CallStatus::Completed,
                output: Some(output.into()),
                error: None,
                approval_request_id: None,
            })
        };
        let tool_result_text = |item: &Item, max_bytes| {
            GatewayReplay::of(&[]).call_and_result(item).map(|(_, text)| truncate_for_model(text, max_bytes))
        };
        assert_eq!(tool_result_text(&call("short"), 5).as_deref(), Some("short"));
        // "é" is two bytes: a cut inside it moves back to the character boundary.
        let text = tool_result_text(&call("abcé and more"), 4).unwrap();
        assert_eq!(text, "abc\n[output truncated by the gateway: the first 3 of 14 bytes are shown]");
    }
}

#[cfg(test)]
mod approval_history_tests {
    //! How MCP approval requests, their answers and the approved calls are told to the model.

    use super::*;
    use respgw_protocol::ids::IdKind;
    use respgw_protocol::items::{
        CallStatus, ContentPart, McpApprovalRequestItem, McpApprovalResponseItem, McpCallItem, MessageItem, MessageRole,
    };

    fn user(text: &str) -> Item {
        Item::Message(MessageItem {
            id: "msg_u".into(),
            role: MessageRole::User,
            status: respgw_protocol::items::ItemStatus::Completed,
            content: vec![ContentPart::InputText { text: text.into() }],
        })
    }

    fn answer(request_id: &str, approve: bool, reason: Option<&str>) -> Item {
        Item::McpApprovalResponse(McpApprovalResponseItem {
            id: "mcpa_1".into(),
            approval_request_id: request_id.into(),
            approve,
            reason: reason.map(str::to_owned),
        })
    }

    /// An approval request made in a fresh model turn, and that turn's stamp.
    fn request() -> (Item, String, TurnStamp) {
        let turn = TurnStamp::after(None);
        let id = turn.new_id(IdKind::McpApprovalRequest);
        let item = Item::McpApprovalRequest(McpApprovalRequestItem {
            id: id.clone(),
            server_label: "docs".into(),
            name: "delete".into(),
            arguments: "{\"path\":\"a\"}".into(),
        });
        (item, id, turn)
    }

    fn tool_message(messages: &[Value], id: &str) -> String {
        let found = messages.iter().find(|m| m["role"] == "tool" && m["tool_call_id"] == id);
        found
            .and_then(|m| m["content"].as_str())
            .unwrap_or_else(|| panic!("no result for {id}: {messages:?}"))
            .to_owned()
    }

    #[test]
    fn a_pending_request_is_the_models_call_with_a_result_saying_it_waits() {
        let (request, id, _) = request();
        let history = [user("delete a"), request];
        let out = messages(None, &history, usize::MAX);
        assert_eq!(out.len(), 3, "{out:?}");
        assert_eq!(
            out[1]["tool_calls"],
            json!([{"id":id,"type":"function","function":{"name":"mcp__docs__delete","arguments":"{\"path\":\"a\"}"}}])
        );
        assert_eq!(tool_message(&out, &id), "This call has not run: it is waiting for the user's approval.");
    }

    #[test]
    fn a_denial_is_told_with_its_reason_in_place_of_the_result() {
        let (request, id, _) = request();
        let history = [user("delete a"), request.clone(), answer(&id, false, Some("keep it"))];
        let out = messages(None, &history, usize::MAX);
        assert_eq!(out.len(), 3, "the answer is not a message of its own: {out:?}");
        assert_eq!(tool_message(&out, &id), "The user denied this call; it did not run. Reason: keep it");
        let history = [user("delete a"), request, answer(&id, false, None)];
        assert_eq!(
            tool_message(&messages(None, &history, usize::MAX), &id),
            "The user denied this call; it did not run."
        );
    }

    #[test]
    fn an_approved_call_is_told_as_the_result_of_the_request_in_order() {
        let (request, id, turn) = request();
        let call = Item::McpCall(McpCallItem {
            id: turn.new_id(IdKind::McpCall),
            server_label: "docs".into(),
            name: "delete".into(),
            arguments: "{\"path\":\"a\"}".into(),
            status: CallStatus::Completed,
            output: Some("deleted a".into()),
            error: None,
            approval_request_id: Some(id.clone()),
        });
        let answer_text = Item::Message(MessageItem {
            id: "msg_a".into(),
            role: MessageRole::Assistant,
            status: respgw_protocol::items::ItemStatus::Completed,
            content: vec![ContentPart::output_text("Done.")],
        });
        let history = [user("delete a"), request.clone(), answer(&id, true, None), call.clone(), answer_text];
        let out = messages(None, &history, usize::MAX);
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(out[1]["tool_calls"][0]["id"], json!(id));
        assert_eq!(
            out[2],
            json!({"role":"tool","tool_call_id":id,"content":"The user approved this call.\n\ndeleted a"})
        );
        assert_eq!(out[3], json!({"role":"assistant","content":"Done."}));

        // The prompt of the turn after the approved call extends the prompt the request was made
        // in, whatever the answer: the model's call stays where it was.
        let made_in = messages(None, &history[..1], usize::MAX);
        assert_eq!(out[..made_in.len()], made_in[..]);

        // A call whose request is not in the conversation is told on its own.
        let alone = messages(None, &[user("x"), call], usize::MAX);
        assert_eq!(alone[2]["content"], "deleted a");
    }

    #[test]
    fn results_are_cut_like_any_gateway_tool_result() {
        let (request, id, _) = request();
        let history = [request, answer(&id, false, Some(&"x".repeat(100)))];
        let text = tool_message(&messages(None, &history, 50), &id);
        assert!(text.starts_with("The user denied") && text.contains("[output truncated by the gateway"), "{text}");
    }
}

#[cfg(test)]
mod turn_boundary_tests {
    //! One assistant message per model turn, decided from the items alone.

    use super::*;
    use respgw_protocol::ids::IdKind;

    fn item(v: Value) -> Item {
        serde_json::from_value(v).unwrap()
    }

    fn user(text: &str) -> Item {
        item(json!({"type":"message","id":"msg_u","role":"user","status":"completed",
                    "content":[{"type":"input_text","text":text}]}))
    }

    fn said(text: &str) -> Item {
        item(json!({"type":"message","id":"msg_a","role":"assistant","status":"completed",
                    "content":[{"type":"output_text","text":text,"annotations":[],"logprobs":[]}]}))
    }

    fn thought(text: &str) -> Item {
        item(json!({"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":text}]}))
    }

    /// An MCP echo call with this id, answered with `text`.
    fn echo(id: &str, text: &str) -> Item {
        item(json!({"type":"mcp_call","id":id,"server_label":"s","name":"echo","arguments":"{}",
                    "status":"completed","output":text,"error":null}))
    }

    fn search(id: &str, result: &str) -> Item {
        item(json!({"type":"web_search_call","id":id,"status":"completed",
                    "action":{"type":"search","query":"q"},"model_result":result}))
    }

    fn call(call_id: &str) -> Item {
        item(json!({"type":"function_call","id":"fc_1","call_id":call_id,"name":"f","arguments":"{}",
                    "status":"completed"}))
    }

    fn output(call_id: &str, text: &str) -> Item {
        item(json!({"type":"function_call_output","id":"fco_1","call_id":call_id,"output":text,
                    "status":"completed"}))
    }

    fn history(items: &[Item]) -> Value {
        Value::Array(messages(None, items, usize::MAX))
    }

    /// Each message as `role(called functions…)` or `role`, for comparing shapes.
    fn shape(items: &[Item]) -> Vec<String> {
        messages(None, items, usize::MAX)
            .iter()
            .map(|m| match m["tool_calls"].as_array() {
                Some(calls) => format!(
                    "assistant({})",
                    calls.iter().map(|c| c["id"].as_str().unwrap()).collect::<Vec<_>>().join(",")
                ),
                None => m["role"].as_str().unwrap().to_owned(),
            })
            .collect()
    }

    #[test]
    fn calls_of_one_turn_share_an_assistant_message_and_results_follow_in_call_order() {
        let turn = TurnStamp::after(None);
        let (a, b) = (turn.new_id(IdKind::McpCall), turn.new_id(IdKind::WebSearchCall));
        assert_eq!(
            history(&[user("go"), thought("both"), echo(&a, "A"), search(&b, "B")]),
            json!([
                {"role":"user","content":"go"},
                {"role":"assistant","content":null,"reasoning_content":"both","tool_calls":[
                    {"id":a,"type":"function","function":{"name":"mcp__s__echo","arguments":"{}"}},
                    {"id":b,"type":"function","function":{"name":"web_search",
                     "arguments":"{\"action\":\"search\",\"query\":\"q\",\"queries\":[]}"}}]},
                {"role":"tool","tool_call_id":a,"content":"A"},
                {"role":"tool","tool_call_id":b,"content":"B"}
            ])
        );
    }

    #[test]
    fn gateway_calls_of_consecutive_turns_are_separate_assistant_messages() {
        let first = TurnStamp::after(None);
        let second = TurnStamp::after(Some(first));
        let (a, b) = (first.new_id(IdKind::WebSearchCall), second.new_id(IdKind::WebSearchCall));
        assert_eq!(
            history(&[user("go"), search(&a, "A"), search(&b, "B")]),
            json!([
                {"role":"user","content":"go"},
                {"role":"assistant","content":null,"tool_calls":[{"id":a,"type":"function","function":{
                    "name":"web_search","arguments":"{\"action\":\"search\",\"query\":\"q\",\"queries\":[]}"}}]},
                {"role":"tool","tool_call_id":a,"content":"A"},
                {"role":"assistant","content":null,"tool_calls":[{"id":b,"type":"function","function":{
                    "name":"web_search","arguments":"{\"action\":\"search\",\"query\":\"q\",\"queries\":[]}"}}]},
                {"role":"tool","tool_call_id":b,"content":"B"}
            ])
        );
    }

    #[test]
    fn text_after_gateway_calls_is_the_next_turn() {
        let a = TurnStamp::after(None).new_id(IdKind::McpCall);
        assert_eq!(
            history(&[user("go"), said("Checking."), echo(&a, "A"), said("It is A.")]),
            json!([
                {"role":"user","content":"go"},
                {"role":"assistant","content":"Checking.","tool_calls":[
                    {"id":a,"type":"function","function":{"name":"mcp__s__echo","arguments":"{}"}}]},
                {"role":"tool","tool_call_id":a,"content":"A"},
                {"role":"assistant","content":"It is A."}
            ])
        );
    }

    #[test]
    fn a_client_call_after_gateway_calls_is_the_next_turn() {
        let a = TurnStamp::after(None).new_id(IdKind::McpCall);
        assert_eq!(
            shape(&[user("go"), echo(&a, "A"), call("c1"), output("c1", "done")]),
            ["user".to_owned(), format!("assistant({a})"), "tool".into(), "assistant(c1)".into(), "tool".into()]
        );
    }

    #[test]
    fn client_calls_and_the_gateway_calls_after_them_are_one_turn() {
        // The gateway records a turn's client calls first, its gateway calls once they have run.
        let a = TurnStamp::after(None).new_id(IdKind::McpCall);
        let messages = history(&[user("go"), said("Both."), call("c1"), echo(&a, "A"), output("c1", "done")]);
        assert_eq!(
            messages,
            json!([
                {"role":"user","content":"go"},
                {"role":"assistant","content":"Both.","tool_calls":[
                    {"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},
                    {"id":a,"type":"function","function":{"name":"mcp__s__echo","arguments":"{}"}}]},
                {"role":"tool","tool_call_id":a,"content":"A"},
                {"role":"tool","tool_call_id":"c1","content":"done"}
            ])
        );
    }

    #[test]
    fn gateway_calls_whose_ids_name_no_turn_are_one_turn_each() {
        // Another system's ids (or ones a client made up) say nothing of turns: each call is shown
        // after the results before it, never as made before the model saw them.
        let items = [user("go"), echo("mcp_1", "A"), echo("mcp_2", "B"), search("ws_68c1f0e2a4b08190", "C")];
        assert_eq!(
            shape(&items),
            ["user", "assistant(mcp_1)", "tool", "assistant(mcp_2)", "tool", "assistant(ws_68c1f0e2a4b08190)", "tool"]
        );
        let ours = TurnStamp::after(None).new_id(IdKind::McpCall);
        assert_eq!(shape(&[echo("mcp_1", "A"), echo(&ours, "B")]).len(), 4);
        assert_eq!(shape(&[echo(&ours, "A"), echo("mcp_1", "B")]).len(), 4);
    }

    #[test]
    fn reasoning_starts_the_turn_it_belongs_to() {
        let turn = TurnStamp::after(None);
        let (a, b) = (turn.new_id(IdKind::McpCall), turn.new_id(IdKind::McpCall));
        // The same stamp, but reasoning between the calls: the model thought again, so it had
        // seen the first result.
        let messages = history(&[thought("one"), echo(&a, "A"), thought("two"), echo(&b, "B")]);
        assert_eq!(messages[0]["reasoning_content"], "one");
        assert_eq!(messages[2]["reasoning_content"], "two");
        assert_eq!(messages.as_array().unwrap().len(), 4);
    }

    #[test]
    fn every_turn_only_appends_to_the_messages_of_the_turns_before() {
        let t1 = TurnStamp::after(None);
        let t2 = TurnStamp::after(Some(t1));
        let t3 = TurnStamp::after(Some(t2));
        let turns: Vec<Vec<Item>> = vec![
            vec![user("go")],
            vec![
                thought("search twice"),
                search(&t1.new_id(IdKind::WebSearchCall), "A"),
                search(&t1.new_id(IdKind::WebSearchCall), "B"),
            ],
            vec![search(&t2.new_id(IdKind::WebSearchCall), "C")],
            vec![said("Running it."), echo(&t3.new_id(IdKind::McpCall), "D")],
            vec![call("c1")],
            vec![output("c1", "E")],
            vec![thought("done"), said("All of it.")],
            vec![user("more")],
        ];
        let mut items = Vec::new();
        let mut before: Vec<String> = Vec::new();
        for turn in turns {
            items.extend(turn);
            let now: Vec<String> = messages(None, &items, usize::MAX).iter().map(Value::to_string).collect();
            assert!(now.len() > before.len() && now[..before.len()] == before[..], "{before:#?}\n{now:#?}");
            before = now;
        }
        assert_eq!(before.len(), 12, "{before:#?}");
    }
}
