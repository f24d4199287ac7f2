//! The upstream wire format: OpenAI chat completions (`POST {base}/chat/completions`).
//!
//! [`ChatRequest::build`] turns history items and the validated request into the body we send;
//! [`ChatChunk`] is one parsed `chat.completion.chunk` of the stream that comes back. Only the
//! fields the gateway uses are modelled; unknown fields are ignored so new server versions work.

use respgw_protocol::ValidatedRequest;
use respgw_protocol::items::{ContentPart, FunctionOutput, Item, MessageRole};
use respgw_protocol::request::{TextFormat, ToolChoice, ToolChoiceMode};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The JSON body of one upstream chat-completions call.
pub struct ChatRequest;

impl ChatRequest {
    /// Build the streaming request for `history` (inherited items, then this request's input).
    pub fn build(req: &ValidatedRequest, history: &[Item]) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), json!(req.model));
        body.insert("messages".into(), Value::Array(messages(req.instructions.as_deref(), history)));
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));

        if !req.tools.is_empty() {
            let offered = offered_tools(req);
            let tools: Vec<Value> = offered
                .iter()
                .map(|t| {
                    let mut function = Map::new();
                    function.insert("name".into(), json!(t.name));
                    if let Some(d) = &t.description {
                        function.insert("description".into(), json!(d));
                    }
                    function.insert(
                        "parameters".into(),
                        t.parameters
                            .clone()
                            .map(Value::Object)
                            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                    );
                    if let Some(strict) = t.strict {
                        function.insert("strict".into(), json!(strict));
                    }
                    json!({"type": "function", "function": function})
                })
                .collect();
            body.insert("tools".into(), Value::Array(tools));
            body.insert("tool_choice".into(), upstream_tool_choice(&req.tool_choice));
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

/// The tools the model is offered: all of them, or the `allowed_tools` subset.
fn offered_tools(req: &ValidatedRequest) -> Vec<&respgw_protocol::request::FunctionTool> {
    match &req.tool_choice {
        ToolChoice::AllowedTools(a) => req.tools.iter().filter(|t| a.tools.iter().any(|f| f.name == t.name)).collect(),
        _ => req.tools.iter().collect(),
    }
}

/// `tool_choice` in chat-completions spelling. The choice is forwarded for real (never emulated
/// with prompt text), so the upstream's guided decoding enforces it.
fn upstream_tool_choice(choice: &ToolChoice) -> Value {
    let mode = |m: ToolChoiceMode| match m {
        ToolChoiceMode::None => json!("none"),
        ToolChoiceMode::Auto => json!("auto"),
        ToolChoiceMode::Required => json!("required"),
    };
    match choice {
        ToolChoice::Mode(m) => mode(*m),
        ToolChoice::Function(f) => json!({"type": "function", "function": {"name": f.name}}),
        ToolChoice::AllowedTools(a) => mode(a.mode),
    }
}

/// An assistant turn being assembled from consecutive assistant-side items.
#[derive(Default)]
struct AssistantTurn {
    text: Vec<String>,
    reasoning: Vec<String>,
    tool_calls: Vec<Value>,
}

impl AssistantTurn {
    fn is_empty(&self) -> bool {
        self.text.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty()
    }

    fn into_message(self) -> Value {
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
        Value::Object(m)
    }
}

/// History items → chat messages. Consecutive assistant-side items (reasoning, assistant text,
/// function calls) form one assistant message; a reasoning item after text or calls starts the
/// next assistant turn, because reasoning always precedes what it produced.
pub fn messages(instructions: Option<&str>, history: &[Item]) -> Vec<Value> {
    let mut out = Vec::with_capacity(history.len() + 1);
    if let Some(text) = instructions {
        out.push(json!({"role": "system", "content": text}));
    }
    let mut turn = AssistantTurn::default();
    let flush = |turn: &mut AssistantTurn, out: &mut Vec<Value>| {
        if !turn.is_empty() {
            out.push(std::mem::take(turn).into_message());
        }
    };
    for item in history {
        match item {
            Item::Reasoning(r) => {
                if !turn.text.is_empty() || !turn.tool_calls.is_empty() {
                    flush(&mut turn, &mut out);
                }
                let text = r.text();
                if !text.is_empty() {
                    turn.reasoning.push(text);
                }
            }
            Item::Message(m) if m.role == MessageRole::Assistant => {
                turn.text.extend(m.content.iter().filter_map(|p| match p {
                    ContentPart::OutputText { text, .. } | ContentPart::InputText { text } => Some(text.clone()),
                    ContentPart::Refusal { refusal } => Some(refusal.clone()),
                    ContentPart::InputImage { .. } => None,
                }));
            }
            Item::FunctionCall(f) => turn.tool_calls.push(json!({
                "id": f.call_id,
                "type": "function",
                "function": {"name": f.name, "arguments": f.arguments},
            })),
            Item::Message(m) => {
                flush(&mut turn, &mut out);
                let role = match m.role {
                    MessageRole::User => "user",
                    // `developer` is not understood by most open-model chat templates.
                    _ => "system",
                };
                out.push(json!({"role": role, "content": content_value(&m.content)}));
            }
            Item::FunctionCallOutput(o) => {
                flush(&mut turn, &mut out);
                let content = match &o.output {
                    FunctionOutput::Text(t) => json!(t),
                    FunctionOutput::Parts(parts) => content_value(parts),
                };
                out.push(json!({"role": "tool", "tool_call_id": o.call_id, "content": content}));
            }
        }
    }
    flush(&mut turn, &mut out);
    out
}

/// Message content: a plain string when it is only text (what every server accepts), else parts.
fn content_value(parts: &[ContentPart]) -> Value {
    let text_only = parts.iter().all(|p| !matches!(p, ContentPart::InputImage { .. }));
    if text_only {
        let texts: Vec<&str> = parts
            .iter()
            .filter_map(|p| match p {
                ContentPart::InputText { text } | ContentPart::OutputText { text, .. } => Some(text.as_str()),
                ContentPart::Refusal { refusal } => Some(refusal.as_str()),
                ContentPart::InputImage { .. } => None,
            })
            .collect();
        return json!(texts.join("\n\n"));
    }
    Value::Array(
        parts
            .iter()
            .map(|p| match p {
                ContentPart::InputText { text } | ContentPart::OutputText { text, .. } => {
                    json!({"type": "text", "text": text})
                }
                ContentPart::Refusal { refusal } => json!({"type": "text", "text": refusal}),
                ContentPart::InputImage { image_url, detail } => {
                    json!({"type": "image_url", "image_url": {"url": image_url, "detail": detail}})
                }
            })
            .collect(),
    )
}

/// One `chat.completion.chunk`.
#[derive(Debug, Deserialize)]
pub struct ChatChunk {
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default)]
    pub usage: Option<ChunkUsage>,
}

#[derive(Debug, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Option<ChunkDelta>,
    #[serde(default)]
    pub finish_reason: Option<String>,
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
        CreateResponseRequest::from_slice(v.to_string().as_bytes()).unwrap().validate().unwrap()
    }

    #[test]
    fn plain_request_body() {
        let r = req(json!({"model":"m","input":"hi","instructions":"Be brief.","max_output_tokens":16}));
        let body = ChatRequest::build(&r, &r.input);
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
    fn named_tool_choice_is_forwarded_not_emulated() {
        let r = req(json!({"model":"m","input":"hi",
            "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],
            "tool_choice":{"type":"function","name":"get_weather"}}));
        let body = ChatRequest::build(&r, &r.input);
        assert_eq!(body["tool_choice"], json!({"type":"function","function":{"name":"get_weather"}}));
        assert_eq!(body["tools"][0]["function"]["strict"], json!(true));
        assert_eq!(body["messages"].as_array().unwrap().len(), 1, "no injected instruction text");
    }

    #[test]
    fn allowed_tools_narrows_the_offer() {
        let r = req(json!({"model":"m","input":"hi",
            "tools":[{"type":"function","name":"a"},{"type":"function","name":"b"}],
            "tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"b"}]}}));
        let body = ChatRequest::build(&r, &r.input);
        assert_eq!(body["tools"].as_array().unwrap().len(), 1);
        assert_eq!(body["tools"][0]["function"]["name"], "b");
        assert_eq!(body["tool_choice"], "required");
    }

    #[test]
    fn json_schema_format_becomes_response_format() {
        let r = req(
            json!({"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"out","schema":{"type":"object"},"strict":true}}}),
        );
        let body = ChatRequest::build(&r, &r.input);
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
        let msgs = messages(None, &r.input);
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
    fn images_become_image_url_parts() {
        let r = req(json!({"model":"m","input":[{"role":"user","content":[
            {"type":"input_text","text":"what is this"},
            {"type":"input_image","image_url":"data:image/png;base64,AA","detail":"low"}]}]}));
        let msgs = messages(None, &r.input);
        assert_eq!(
            msgs[0]["content"],
            json!([{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AA","detail":"low"}}])
        );
    }

    #[test]
    fn developer_messages_are_sent_as_system() {
        let r =
            req(json!({"model":"m","input":[{"role":"developer","content":"rules"},{"role":"user","content":"hi"}]}));
        assert_eq!(messages(None, &r.input)[0], json!({"role":"system","content":"rules"}));
    }
}
