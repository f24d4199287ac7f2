//! The response object (`"object":"response"`): what non-stream replies, lifecycle events and
//! `GET /v1/responses/{id}` return. Every key of the Open Responses schema is always present,
//! nullable ones as `null`, so strict clients never meet a missing key.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::items::Item;
use crate::request::{ReasoningConfig, ServiceTier, TextConfig, Truncation, ValidatedRequest};
use crate::tools::ToolDeclaration;
use crate::tools::choice::ToolChoice;

/// Where a response is in its life. The terminal ones are `Completed`, `Incomplete`, `Failed`
/// and `Cancelled`; only background responses are ever `Queued` (waiting for a free run slot) or
/// `Cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseStatus {
    Queued,
    InProgress,
    Completed,
    Incomplete,
    Failed,
    Cancelled,
}

/// Why a response stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IncompleteReason {
    MaxOutputTokens,
    ContentFilter,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IncompleteDetails {
    pub reason: IncompleteReason,
}

/// `response.error` of a failed response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponseError {
    pub code: String,
    pub message: String,
}

/// What `truncation: "auto"` dropped from the start of the conversation so that it fits the
/// model's context window: whole turns (a user message and everything up to the next one), never
/// the instructions or the system and developer messages before the first turn, never the last
/// turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TruncationDetails {
    /// Turns dropped.
    pub dropped_turns: u64,
    /// Items (messages, tool calls and their outputs, reasoning) those turns held.
    pub dropped_items: u64,
}

/// The reply of `POST /v1/responses/input_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct InputTokenCount {
    /// Always `response.input_tokens`.
    pub object: &'static str,
    /// Tokens the model would be sent for the request's first model turn.
    pub input_tokens: u64,
}

impl InputTokenCount {
    pub fn new(input_tokens: u64) -> Self {
        InputTokenCount { object: "response.input_tokens", input_tokens }
    }
}

/// Token counts, summed over every upstream call of the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct InputTokensDetails {
    pub cached_tokens: u64,
    /// Input tokens written to a prompt cache on the client's request. Always 0: the reference
    /// API's explicit cache writes have no chat-completions counterpart (model servers cache
    /// prefixes on their own), but the official SDKs type this count as required.
    pub cache_write_tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Add one upstream call's counts.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.total_tokens = self.input_tokens + self.output_tokens;
        self.input_tokens_details.cached_tokens += other.input_tokens_details.cached_tokens;
        self.output_tokens_details.reasoning_tokens += other.output_tokens_details.reasoning_tokens;
    }
}

/// `reasoning` as echoed: both keys present.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReasoningEcho {
    pub effort: Option<&'static str>,
    pub summary: Option<crate::request::ReasoningSummary>,
}

/// The response object. Field order follows the reference API.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponseObject {
    pub id: String,
    pub object: &'static str,
    pub created_at: i64,
    pub status: ResponseStatus,
    pub background: bool,
    pub completed_at: Option<i64>,
    pub error: Option<ResponseError>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub model: String,
    pub output: Vec<Item>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    pub reasoning: ReasoningEcho,
    pub safety_identifier: Option<String>,
    pub service_tier: ServiceTier,
    pub store: bool,
    pub temperature: f64,
    pub text: TextConfig,
    pub tool_choice: ToolChoice,
    pub tools: Vec<ToolDeclaration>,
    pub top_logprobs: u32,
    pub top_p: f64,
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
    pub truncation: Truncation,
    /// A gateway extension: present only when `truncation: "auto"` dropped turns (the Open
    /// Responses schema allows extra keys on a response, and clients keep them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncation_details: Option<TruncationDetails>,
    pub usage: Option<Usage>,
    pub user: Option<String>,
    pub metadata: Map<String, Value>,
    /// The conversation this response was created in (sent only when there is one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationRef>,
    /// The request's stop string that ended the last model turn, when the upstream named it.
    /// Not part of the Responses API (never serialized, never stored): the Messages face
    /// reports it as `stop_sequence`.
    #[serde(skip)]
    pub stop_sequence: Option<String>,
}

/// `{"id": "conv_…"}`: the conversation a response belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationRef {
    pub id: String,
}

impl ResponseObject {
    /// The `in_progress` response a request starts as: every echo field from the request.
    pub fn in_progress(id: String, created_at: i64, req: &ValidatedRequest) -> Self {
        let reasoning = req.reasoning.as_ref();
        ResponseObject {
            id,
            object: "response",
            created_at,
            status: ResponseStatus::InProgress,
            background: req.background,
            completed_at: None,
            error: None,
            incomplete_details: None,
            instructions: req.instructions.clone(),
            max_output_tokens: req.max_output_tokens,
            max_tool_calls: req.max_tool_calls,
            model: req.model.clone(),
            output: Vec::new(),
            parallel_tool_calls: req.parallel_tool_calls.unwrap_or(true),
            previous_response_id: req.previous_response_id.clone(),
            prompt_cache_key: req.prompt_cache_key.clone(),
            prompt_cache_retention: req.prompt_cache_retention.clone(),
            reasoning: ReasoningEcho {
                effort: reasoning.and_then(|r: &ReasoningConfig| r.effort).map(|e| e.as_str()),
                summary: reasoning.and_then(|r| r.summary),
            },
            safety_identifier: req.safety_identifier.clone(),
            service_tier: req.service_tier,
            store: req.store,
            temperature: req.temperature.unwrap_or(1.0),
            text: req.text.clone(),
            tool_choice: req.tool_choice.clone(),
            tools: req.tools.clone(),
            top_logprobs: req.top_logprobs.unwrap_or(0),
            top_p: req.top_p.unwrap_or(1.0),
            presence_penalty: req.presence_penalty.unwrap_or(0.0),
            frequency_penalty: req.frequency_penalty.unwrap_or(0.0),
            truncation: req.truncation,
            truncation_details: None,
            usage: None,
            user: req.user.clone(),
            metadata: req.metadata.clone(),
            conversation: req.conversation.clone().map(|id| ConversationRef { id }),
            stop_sequence: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::CreateResponseRequest;

    #[test]
    fn in_progress_echo_has_every_key_with_nulls() {
        let req = CreateResponseRequest::from_slice(br#"{"model":"m","input":"hi","instructions":"Be brief."}"#)
            .unwrap()
            .validate(&crate::tools::Capabilities::default())
            .unwrap();
        let v = serde_json::to_value(ResponseObject::in_progress("resp_1".into(), 7, &req)).unwrap();
        assert_eq!(v["status"], "in_progress");
        assert_eq!(v["instructions"], "Be brief.");
        assert!(v["usage"].is_null() && v.as_object().unwrap().contains_key("usage"));
        assert_eq!(v["reasoning"], serde_json::json!({"effort": null, "summary": null}));
        assert_eq!(v["text"], serde_json::json!({"format": {"type": "text"}, "verbosity": "medium"}));
        assert_eq!(v["tools"], serde_json::json!([]));
        assert_eq!(v["tool_choice"], "auto");
    }

    #[test]
    fn usage_sums_across_calls() {
        let mut total = Usage::default();
        let call = |i, o| Usage { input_tokens: i, output_tokens: o, total_tokens: i + o, ..Default::default() };
        total.add(&call(446, 56));
        total.add(&call(344, 70));
        assert_eq!((total.input_tokens, total.output_tokens, total.total_tokens), (790, 126, 916));
    }
}
