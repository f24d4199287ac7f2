//! The create-response request: parsing with precise error paths, then validation into a
//! [`ValidatedRequest`] — a different type, so nothing downstream can see an unchecked request.
//!
//! Parsing goes through `serde_path_to_error`, so a wrong type anywhere becomes a 400 whose
//! `param` names the field (`input[2].content`). Range and cross-field rules run afterwards in
//! [`CreateResponseRequest::validate`]. Unknown top-level fields are ignored, as OpenAI-compatible
//! clients send many (Codex sends `client_metadata`, `prompt_cache_key`, …).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::items::Item;
use crate::items::input::InputItemParam;
use crate::limits::RequestLimits;
use crate::tools::choice::{ToolChoice, ToolChoiceMode, check_tool_choice, parse_tool_choice};
use crate::tools::{Capabilities, ToolDeclaration, is_valid_name, parse_tools};

/// The body of `POST /v1/responses`, as parsed (not yet validated).
#[derive(Debug, Clone, Deserialize)]
pub struct CreateResponseRequest {
    pub model: Option<String>,
    pub input: Option<InputParam>,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub store: Option<bool>,
    pub stream: Option<bool>,
    pub include: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub parallel_tool_calls: Option<bool>,
    pub top_logprobs: Option<u32>,
    pub reasoning: Option<ReasoningConfig>,
    pub text: Option<TextConfigParam>,
    pub metadata: Option<Map<String, Value>>,
    pub truncation: Option<Truncation>,
    pub service_tier: Option<ServiceTier>,
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    pub background: Option<bool>,
    pub conversation: Option<Value>,
    pub prompt: Option<Value>,
    pub context_management: Option<Value>,
}

/// `input`: a plain prompt or a list of items (items are parsed one by one in `validate`, so
/// each error can name its item).
#[derive(Debug, Clone)]
pub enum InputParam {
    Text(String),
    Items(Vec<Value>),
}

impl<'de> Deserialize<'de> for InputParam {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InputVisitor;

        impl<'de> serde::de::Visitor<'de> for InputVisitor {
            type Value = InputParam;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or an array of input items")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<InputParam, E> {
                Ok(InputParam::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<InputParam, E> {
                Ok(InputParam::Text(text))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<InputParam, A::Error> {
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
                while let Some(item) = seq.next_element::<Value>()? {
                    items.push(item);
                }
                Ok(InputParam::Items(items))
            }
        }

        deserializer.deserialize_any(InputVisitor)
    }
}

/// Longest `model` accepted, in characters (model names are short identifiers).
pub const MAX_MODEL_CHARS: usize = 256;

/// Longest `input` string accepted, in characters (the Open Responses schema's `maxLength`).
pub const MAX_INPUT_CHARS: usize = 10_485_760;

/// `reasoning`: effort and summary preferences, echoed and forwarded as `reasoning_effort`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningConfig {
    #[serde(default)]
    pub effort: Option<ReasoningEffort>,
    #[serde(default)]
    pub summary: Option<ReasoningSummary>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    None,
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
}

impl ReasoningEffort {
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::Xhigh => "xhigh",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningSummary {
    Auto,
    Concise,
    Detailed,
}

/// `text` as sent: a format and a verbosity, both optional.
#[derive(Debug, Clone, Deserialize)]
pub struct TextConfigParam {
    pub format: Option<TextFormat>,
    pub verbosity: Option<Verbosity>,
}

/// `text` as echoed: both keys always present.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextConfig {
    pub format: TextFormat,
    pub verbosity: Verbosity,
}

/// The output format the model must follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Map<String, Value>,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        strict: Option<bool>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verbosity {
    Low,
    #[default]
    Medium,
    High,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Truncation {
    Auto,
    #[default]
    Disabled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceTier {
    Auto,
    #[default]
    Default,
    Flex,
    Priority,
}

/// `include` values the gateway accepts. Only some change behaviour today; the rest are the
/// reference API's values and are accepted so clients that always send them keep working.
pub const KNOWN_INCLUDES: &[&str] = &[
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
    "web_search_call.action.sources",
    "web_search_call.results",
];

/// A request that passed every check, with defaults applied and input normalized.
#[derive(Debug, Clone)]
pub struct ValidatedRequest {
    pub model: String,
    /// This request's own input, normalized (ids minted).
    pub input: Vec<Item>,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
    pub tools: Vec<ToolDeclaration>,
    pub tool_choice: ToolChoice,
    pub store: bool,
    pub stream: bool,
    /// Run detached from the connection (`background: true`; always stored).
    pub background: bool,
    pub include: Vec<String>,
    /// Sampling values the client set; `None` means "let the upstream decide".
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub parallel_tool_calls: Option<bool>,
    pub top_logprobs: Option<u32>,
    /// Sequences that end the model's text (chat completions `stop`). No Responses field sets
    /// them; the Messages face does (`stop_sequences`).
    pub stop: Vec<String>,
    /// Top-k sampling (chat completions `top_k`, which vLLM, SGLang and llama.cpp take). No
    /// Responses field sets it; the Messages face does.
    pub top_k: Option<u64>,
    pub reasoning: Option<ReasoningConfig>,
    pub text: TextConfig,
    pub metadata: Map<String, Value>,
    pub truncation: Truncation,
    pub service_tier: ServiceTier,
    pub user: Option<String>,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    /// The conversation (`conv_…`) whose items come before `input`, and which this response's
    /// input and output are appended to when it finishes.
    pub conversation: Option<String>,
    /// `context_management`'s compaction threshold: compact the conversation first when its
    /// estimated size reaches this many tokens.
    pub compact_threshold: Option<u64>,
}

impl CreateResponseRequest {
    /// Parse raw body bytes. Bad JSON, a non-object body or a wrongly typed field → 400.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: Value =
            serde_json::from_slice(bytes).map_err(|e| crate::error::describe_json_syntax("request body", &e))?;
        Self::from_value(body)
    }

    /// Parse a body that is already JSON (a WebSocket `response.create` frame without its `type`).
    pub fn from_value(body: Value) -> Result<Self, ApiError> {
        if !body.is_object() {
            return Err(ApiError::invalid_body("The request body must be a JSON object."));
        }
        serde_path_to_error::deserialize(body).map_err(|e| ApiError::from_path_error("", e))
    }

    /// Apply every field rule and default under the default [`RequestLimits`].
    pub fn validate(self, caps: &Capabilities) -> Result<ValidatedRequest, ApiError> {
        self.validate_within(caps, &RequestLimits::default())
    }

    /// Apply the size caps of `limits`, then every field rule and default; the result is what the
    /// engine runs. `caps` says which gateway tools may be declared.
    pub fn validate_within(self, caps: &Capabilities, limits: &RequestLimits) -> Result<ValidatedRequest, ApiError> {
        // First, and cheap: a huge `model` would otherwise be echoed in every event and sent upstream.
        check_model(self.model.as_deref())?;
        if let Some(InputParam::Text(text)) = &self.input {
            check_input_text(text)?;
        }
        limits.check(&self)?;
        let model = self.model.unwrap_or_default();
        let input = match self.input {
            None => return Err(missing("input")),
            Some(input) => normalize_input(input)?,
        };
        check_input_files(&input, limits)?;
        if input.is_empty()
            && self.previous_response_id.is_none()
            && self.conversation.as_ref().is_none_or(Value::is_null)
        {
            return Err(ApiError::invalid("input", "'input' must not be empty."));
        }
        if let Some(id) = &self.previous_response_id
            && id.trim().is_empty()
        {
            return Err(ApiError::invalid("previous_response_id", "'previous_response_id' must not be empty."));
        }
        let background = self.background.unwrap_or(false);
        if background && self.store == Some(false) {
            return Err(ApiError::invalid(
                "background",
                "Background responses must be stored: 'background: true' needs 'store' true or left out.",
            ));
        }
        let conversation = parse_conversation(self.conversation)?;
        if conversation.is_some() && self.previous_response_id.is_some() {
            return Err(ApiError::invalid(
                "conversation",
                "'conversation' and 'previous_response_id' cannot be used together: a response continues either a conversation or a previous response.",
            ));
        }
        if conversation.is_some() && self.store == Some(false) {
            return Err(ApiError::invalid(
                "store",
                "A response created in a conversation is stored with it; 'store' must not be false when 'conversation' is set.",
            ));
        }
        if self.prompt.as_ref().is_some_and(|p| !p.is_null()) {
            return Err(ApiError::invalid("prompt", "Prompt templates are not supported by this gateway."));
        }

        check_range("temperature", self.temperature, 0.0, 2.0)?;
        check_range("top_p", self.top_p, 0.0, 1.0)?;
        check_range("presence_penalty", self.presence_penalty, -2.0, 2.0)?;
        check_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)?;
        if self.max_output_tokens == Some(0) {
            return Err(below_min("max_output_tokens", 1));
        }
        if self.max_tool_calls == Some(0) {
            return Err(below_min("max_tool_calls", 1));
        }
        if let Some(n) = self.top_logprobs
            && n > 20
        {
            return Err(ApiError::invalid("top_logprobs", "'top_logprobs' must be between 0 and 20."));
        }
        let metadata = self.metadata.unwrap_or_default();
        check_metadata(&metadata)?;
        check_short("safety_identifier", self.safety_identifier.as_deref())?;
        check_short("prompt_cache_key", self.prompt_cache_key.as_deref())?;

        let include = self.include.unwrap_or_default();
        crate::listing::check_include(&include)?;

        let compact_threshold = crate::compaction::compact_threshold(self.context_management)?;
        let tools = parse_tools(self.tools.unwrap_or_default(), caps)?;
        let tool_choice = match self.tool_choice {
            None | Some(Value::Null) => ToolChoice::Mode(ToolChoiceMode::Auto),
            Some(v) => parse_tool_choice(v)?,
        };
        check_tool_choice(&tool_choice, &tools)?;

        let text = match self.text {
            None => TextConfig { format: TextFormat::Text, verbosity: Verbosity::Medium },
            Some(t) => {
                TextConfig { format: t.format.unwrap_or(TextFormat::Text), verbosity: t.verbosity.unwrap_or_default() }
            }
        };
        if let TextFormat::JsonSchema { name, .. } = &text.format
            && !is_valid_name(name)
        {
            return Err(ApiError::invalid(
                "text.format.name",
                "'text.format.name' must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-'.",
            ));
        }

        Ok(ValidatedRequest {
            model,
            input,
            instructions: self.instructions,
            previous_response_id: self.previous_response_id,
            tools,
            tool_choice,
            store: self.store.unwrap_or(true),
            stream: self.stream.unwrap_or(false),
            background,
            include,
            temperature: self.temperature,
            top_p: self.top_p,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            max_output_tokens: self.max_output_tokens,
            max_tool_calls: self.max_tool_calls,
            parallel_tool_calls: self.parallel_tool_calls,
            top_logprobs: self.top_logprobs,
            stop: Vec::new(),
            top_k: None,
            reasoning: self.reasoning,
            text,
            metadata,
            truncation: self.truncation.unwrap_or_default(),
            service_tier: self.service_tier.unwrap_or_default(),
            user: self.user,
            safety_identifier: self.safety_identifier,
            prompt_cache_key: self.prompt_cache_key,
            prompt_cache_retention: self.prompt_cache_retention,
            conversation,
            compact_threshold,
        })
    }
}

/// `conversation`: an id, or `{"id": …}`; null means none.
fn parse_conversation(value: Option<Value>) -> Result<Option<String>, ApiError> {
    let id = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(id)) => id,
        Some(Value::Object(mut object)) => match object.remove("id") {
            Some(Value::String(id)) => id,
            _ => {
                return Err(ApiError::invalid(
                    "conversation.id",
                    "'conversation.id' must be the id of a conversation (a string).",
                ));
            }
        },
        Some(_) => {
            return Err(ApiError::invalid(
                "conversation",
                "'conversation' must be a conversation id or an object with its 'id'.",
            ));
        }
    };
    if id.trim().is_empty() {
        return Err(ApiError::invalid("conversation", "'conversation' must not be empty."));
    }
    Ok(Some(id))
}

/// `model`: present, non-blank, without NUL, at most [`MAX_MODEL_CHARS`] characters.
pub(crate) fn check_model(model: Option<&str>) -> Result<(), ApiError> {
    match model {
        Some(m) if m.len() > MAX_MODEL_CHARS && m.chars().count() > MAX_MODEL_CHARS => Err(ApiError::invalid(
            "model",
            format!("'model' must be at most {MAX_MODEL_CHARS} characters; got {}.", m.chars().count()),
        )),
        Some(m) if m.contains('\0') => Err(ApiError::invalid("model", "'model' must not contain NUL characters.")),
        Some(m) if m.trim().is_empty() => Err(ApiError::invalid("model", "'model' must be a non-empty string.")),
        Some(_) => Ok(()),
        None => Err(missing("model")),
    }
}

/// An `input` string within [`MAX_INPUT_CHARS`].
pub(crate) fn check_input_text(text: &str) -> Result<(), ApiError> {
    if text.len() > MAX_INPUT_CHARS && text.chars().count() > MAX_INPUT_CHARS {
        return Err(ApiError::invalid(
            "input",
            format!("'input' must be at most {MAX_INPUT_CHARS} characters; got {}.", text.chars().count()),
        )
        .with_code("string_above_max_length"));
    }
    Ok(())
}

/// `input` as canonical items: a string is one user message; each item's error names its path
/// (`input[2].content`).
pub(crate) fn normalize_input(input: InputParam) -> Result<Vec<Item>, ApiError> {
    match input {
        InputParam::Text(text) => Ok(vec![
            InputItemParam::Message(crate::items::input::MessageParam {
                id: None,
                role: crate::items::MessageRole::User,
                content: crate::items::input::MessageContentParam::Text(text),
                status: None,
            })
            .normalize()
            .map_err(|e| e.at("input"))?,
        ]),
        InputParam::Items(items) => normalize_items(items, "input"),
    }
}

/// Input items as canonical items, ids minted; each error names its path (`{field}[2].content`).
pub(crate) fn normalize_items(items: Vec<Value>, field: &str) -> Result<Vec<Item>, ApiError> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            InputItemParam::from_value(item)
                .and_then(InputItemParam::normalize)
                .map_err(|e| e.at(&format!("{field}[{i}]")))
        })
        .collect()
}

/// The `input_file` parts of this request's input pass the checks that need no I/O: one source,
/// a decodable `file_data` of a supported type within the size cap.
pub(crate) fn check_input_files(input: &[Item], limits: &RequestLimits) -> Result<(), ApiError> {
    check_item_files(input, "input", limits)
}

/// [`check_input_files`] for items under another field (`items` of the Conversations API).
pub(crate) fn check_item_files(items: &[Item], field: &str, limits: &RequestLimits) -> Result<(), ApiError> {
    for (i, item) in items.iter().enumerate() {
        for (part_path, part) in item.input_files() {
            let param = format!("{field}[{i}].{part_path}");
            crate::input_file::check(part, limits.max_input_file_bytes).map_err(|e| e.into_api_error(&param))?;
        }
    }
    Ok(())
}

pub(crate) fn missing(field: &str) -> ApiError {
    ApiError::invalid(field, format!("Missing required parameter: '{field}'.")).with_code("missing_required_parameter")
}

fn below_min(field: &str, min: u64) -> ApiError {
    ApiError::invalid(field, format!("Invalid '{field}': integer below minimum value. Expected a value >= {min}."))
        .with_code("integer_below_min_value")
}

fn check_range(field: &str, value: Option<f64>, min: f64, max: f64) -> Result<(), ApiError> {
    match value {
        Some(v) if !(min..=max).contains(&v) => {
            Err(ApiError::invalid(field, format!("'{field}' must be between {min} and {max}; got {v}."))
                .with_code("decimal_out_of_range"))
        }
        _ => Ok(()),
    }
}

fn check_short(field: &str, value: Option<&str>) -> Result<(), ApiError> {
    match value {
        Some(v) if v.chars().count() > 64 => {
            Err(ApiError::invalid(field, format!("'{field}' must be at most 64 characters.")))
        }
        _ => Ok(()),
    }
}

/// The reference API's metadata limits: at most 16 pairs, keys up to 64 characters, string values
/// up to 512 characters.
pub fn check_metadata(metadata: &Map<String, Value>) -> Result<(), ApiError> {
    if metadata.len() > 16 {
        return Err(ApiError::invalid("metadata", "'metadata' may hold at most 16 keys."));
    }
    for (key, value) in metadata {
        if key.chars().count() > 64 {
            return Err(ApiError::invalid(format!("metadata.{key}"), "metadata keys must be at most 64 characters."));
        }
        match value {
            Value::String(s) if s.chars().count() <= 512 => {}
            Value::String(_) => {
                return Err(ApiError::invalid(
                    format!("metadata.{key}"),
                    "metadata values must be at most 512 characters.",
                ));
            }
            _ => {
                return Err(ApiError::invalid(format!("metadata.{key}"), "metadata values must be strings."));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn validate(v: Value) -> Result<ValidatedRequest, ApiError> {
        CreateResponseRequest::from_slice(v.to_string().as_bytes())?.validate(&Capabilities::default())
    }

    #[test]
    fn minimal_request_gets_defaults() {
        let r = validate(json!({"model":"m","input":"hi"})).unwrap();
        assert!(r.store);
        assert!(!r.stream);
        assert_eq!(r.tool_choice, ToolChoice::Mode(ToolChoiceMode::Auto));
        assert_eq!(r.input.len(), 1);
        assert_eq!(r.text.format, TextFormat::Text);
    }

    #[test]
    fn messages_without_type_are_accepted() {
        let r = validate(json!({"model":"m","input":[{"role":"user","content":"hi"}]})).unwrap();
        assert!(matches!(r.input[0], Item::Message(_)));
    }

    #[test]
    fn missing_model_names_the_field() {
        let e = validate(json!({"input":"hi"})).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("model")));
    }

    #[test]
    fn rejects_temperature_out_of_range() {
        let e = validate(json!({"model":"m","input":"x","temperature":2.5})).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("temperature")));
        assert!(validate(json!({"model":"m","input":"x","temperature":2.0})).is_ok());
        assert!(validate(json!({"model":"m","input":"x","temperature":0})).is_ok());
    }

    #[test]
    fn wrong_type_deep_in_input_names_its_path() {
        let e =
            validate(json!({"model":"m","input":[{"type":"function_call","call_id":"c","name":"f","arguments":7}]}))
                .unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.param.as_deref(), Some("input[0].arguments"));
    }

    #[test]
    fn rejects_unknown_item_types() {
        let e = validate(json!({"model":"m","input":[{"type":"bogus"}]})).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.param.as_deref().unwrap_or_default().starts_with("input[0]"), "{e:?}");
    }

    #[test]
    fn rejects_mcp_prefixed_function_names() {
        let e =
            validate(json!({"model":"m","input":"x","tools":[{"type":"function","name":"mcp__a__b","parameters":{}}]}))
                .unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].name")));
    }

    #[test]
    fn rejects_unsupported_tool_types_clearly() {
        let e = validate(json!({"model":"m","input":"x","tools":[{"type":"code_interpreter"}]})).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].type")));
    }

    #[test]
    fn named_tool_choice_must_name_a_tool() {
        let e = validate(json!({"model":"m","input":"x","tool_choice":{"type":"function","name":"f"}})).unwrap_err();
        assert_eq!((e.status, e.error_type), (422, crate::ErrorType::BadInput));
    }

    #[test]
    fn required_needs_tools() {
        let e = validate(json!({"model":"m","input":"x","tool_choice":"required"})).unwrap_err();
        assert_eq!(e.status, 422);
    }

    #[test]
    fn function_tools_echo_strict_by_default() {
        let r = validate(
            json!({"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}),
        )
        .unwrap();
        let crate::tools::ToolDeclaration::Function(f) = &r.tools[0] else { panic!() };
        assert_eq!(f.strict, Some(true));
        assert_eq!(f.description, None);
    }

    #[test]
    fn rejects_unknown_include_values() {
        let e = validate(json!({"model":"m","input":"x","include":["nope"]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("include[0]"));
    }

    #[test]
    fn bad_json_is_a_400_without_param() {
        let e = CreateResponseRequest::from_slice(b"{not json").unwrap_err();
        assert_eq!((e.status, e.param), (400, None));
    }

    #[test]
    fn huge_integers_are_rejected_not_wrapped() {
        let e =
            CreateResponseRequest::from_slice(br#"{"model":"m","input":"x","max_output_tokens":1e400}"#).unwrap_err();
        assert_eq!(e.status, 400);
        let e = CreateResponseRequest::from_slice(br#"{"model":"m","input":"x","max_output_tokens":-1}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_output_tokens"));
    }

    #[test]
    fn conversation_is_an_id_or_an_object_with_one() {
        let r = validate(json!({"model":"m","input":"x","conversation":"conv_1"})).unwrap();
        assert_eq!(r.conversation.as_deref(), Some("conv_1"));
        let r = validate(json!({"model":"m","input":"x","conversation":{"id":"conv_2"}})).unwrap();
        assert_eq!(r.conversation.as_deref(), Some("conv_2"));
        assert_eq!(validate(json!({"model":"m","input":"x","conversation":null})).unwrap().conversation, None);
        for (bad, param) in
            [(json!(7), "conversation"), (json!({"id": 7}), "conversation.id"), (json!(" "), "conversation")]
        {
            let e = validate(json!({"model":"m","input":"x","conversation":bad})).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{bad}");
        }
    }

    #[test]
    fn conversation_excludes_previous_response_id_and_unstored_responses() {
        let e = validate(json!({"model":"m","input":"x","conversation":"c","previous_response_id":"r"})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("conversation"));
        let e = validate(json!({"model":"m","input":"x","conversation":"c","store":false})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("store"));
        // The conversation may already hold what the model is to answer.
        assert!(validate(json!({"model":"m","input":[],"conversation":"c"})).is_ok());
    }

    #[test]
    fn metadata_values_must_be_short_strings() {
        let e = validate(json!({"model":"m","input":"x","metadata":{"k":1}})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("metadata.k"));
    }
}
