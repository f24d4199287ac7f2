//! Compaction on the wire: the body of `POST /v1/responses/compact` ([`CompactRequest`] →
//! [`ValidatedCompactRequest`]), its reply ([`CompactedResponse`]), and the `context_management`
//! entry of a create-response request ([`compact_threshold`]). The `compaction` item itself is
//! in [`crate::items`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ApiError;
use crate::items::Item;
use crate::limits::RequestLimits;
use crate::request::{InputParam, check_input_files, check_input_text, check_model, missing, normalize_input};
use crate::response::Usage;

/// The body of `POST /v1/responses/compact`, as parsed. Other fields the SDKs send
/// (`prompt_cache_key`, `service_tier`, …) are accepted and ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct CompactRequest {
    pub model: Option<String>,
    pub input: Option<InputParam>,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
}

/// A compaction request that passed every check.
#[derive(Debug, Clone)]
pub struct ValidatedCompactRequest {
    pub model: String,
    /// The request's own input, normalized (ids minted); empty when only `previous_response_id`
    /// was given.
    pub input: Vec<Item>,
    pub instructions: Option<String>,
    pub previous_response_id: Option<String>,
}

impl CompactRequest {
    /// Parse raw body bytes. Bad JSON, a non-object body or a wrongly typed field → 400.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, ApiError> {
        let body: Value =
            serde_json::from_slice(bytes).map_err(|e| crate::error::describe_json_syntax("request body", &e))?;
        if !body.is_object() {
            return Err(ApiError::invalid_body("The request body must be a JSON object."));
        }
        serde_path_to_error::deserialize(body).map_err(|e| ApiError::from_path_error("", e))
    }

    /// The rules of a create-response request that apply here (`model`, `input` and its items,
    /// the operator's caps), plus: `input`, `previous_response_id` or both.
    pub fn validate_within(self, limits: &RequestLimits) -> Result<ValidatedCompactRequest, ApiError> {
        check_model(self.model.as_deref())?;
        match &self.input {
            Some(InputParam::Text(text)) => check_input_text(text)?,
            Some(InputParam::Items(items)) if items.len() > limits.max_input_items => {
                return Err(ApiError::invalid(
                    "input",
                    format!(
                        "Too many input items: {} given, this gateway accepts at most {} per request.",
                        items.len(),
                        limits.max_input_items
                    ),
                )
                .with_code("limit_exceeded"));
            }
            _ => {}
        }
        if let Some(id) = &self.previous_response_id
            && id.trim().is_empty()
        {
            return Err(ApiError::invalid("previous_response_id", "'previous_response_id' must not be empty."));
        }
        let input = match self.input {
            Some(input) => normalize_input(input)?,
            None => Vec::new(),
        };
        check_input_files(&input, limits)?;
        if input.is_empty() && self.previous_response_id.is_none() {
            return Err(ApiError::invalid(
                "input",
                "There is nothing to compact: send 'input', 'previous_response_id', or both.",
            )
            .with_code("missing_required_parameter"));
        }
        Ok(ValidatedCompactRequest {
            model: self.model.unwrap_or_default(),
            input,
            instructions: self.instructions,
            previous_response_id: self.previous_response_id,
        })
    }
}

/// The reply of `POST /v1/responses/compact` (`"object":"response.compaction"`): the compacted
/// window — the conversation's user messages, then one `compaction` item — and the usage of the
/// summarisation call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompactedResponse {
    pub id: String,
    pub object: &'static str,
    pub created_at: i64,
    pub output: Vec<Item>,
    pub usage: Usage,
}

impl CompactedResponse {
    pub const OBJECT: &'static str = "response.compaction";
}

/// The one `context_management` entry type this gateway knows.
const COMPACTION: &str = "compaction";

/// `context_management` of a create-response request: `None` when absent or empty, else the
/// `compact_threshold` of its one `compaction` entry (an integer ≥ 1; required, since the gateway
/// does not know the model's context window). Every error names the field.
pub fn compact_threshold(value: Option<Value>) -> Result<Option<u64>, ApiError> {
    let entries = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(entries)) => entries,
        Some(_) => {
            return Err(ApiError::invalid(
                "context_management",
                "'context_management' must be an array of entries such as {\"type\": \"compaction\", \
                 \"compact_threshold\": 100000}.",
            ));
        }
    };
    let mut threshold = None;
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("context_management[{i}]");
        let Some(entry) = entry.as_object() else {
            return Err(ApiError::invalid(at.clone(), format!("'{at}' must be an object.")));
        };
        match entry.get("type") {
            None => return Err(missing(&format!("{at}.type"))),
            Some(Value::String(t)) if t == COMPACTION => {}
            Some(other) => {
                let shown = other.as_str().map_or_else(|| other.to_string(), str::to_owned);
                return Err(ApiError::invalid(
                    format!("{at}.type"),
                    format!(
                        "Unknown context management type {}; this gateway supports only '{COMPACTION}'.",
                        clip(&shown)
                    ),
                ));
            }
        }
        if threshold.is_some() {
            return Err(ApiError::invalid(at, "'context_management' may hold only one 'compaction' entry."));
        }
        let field = format!("{at}.compact_threshold");
        threshold = Some(match entry.get("compact_threshold") {
            None | Some(Value::Null) => {
                return Err(ApiError::invalid(
                    field.clone(),
                    format!(
                        "Missing required parameter: '{field}' (this gateway does not know the model's context \
                         window, so it compacts only at a threshold you give, in tokens)."
                    ),
                )
                .with_code("missing_required_parameter"));
            }
            Some(value) => match value.as_u64() {
                Some(n) if n >= 1 => n,
                _ => {
                    return Err(ApiError::invalid(
                        field.clone(),
                        format!("Invalid '{field}': expected an integer >= 1 (a number of tokens)."),
                    )
                    .with_code("integer_below_min_value"));
                }
            },
        });
    }
    Ok(threshold)
}

/// At most 64 characters of a client's value, quoted.
fn clip(value: &str) -> String {
    let kept: String = value.chars().take(64).collect();
    if kept.len() < value.len() { format!("'{kept}…'") } else { format!("'{kept}'") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn compact(v: Value) -> Result<ValidatedCompactRequest, ApiError> {
        CompactRequest::from_slice(v.to_string().as_bytes())?.validate_within(&RequestLimits::default())
    }

    #[test]
    fn thresholds_are_positive_integers_of_one_compaction_entry() {
        assert_eq!(compact_threshold(None).unwrap(), None);
        assert_eq!(compact_threshold(Some(json!([]))).unwrap(), None);
        assert_eq!(
            compact_threshold(Some(json!([{"type":"compaction","compact_threshold":1000}]))).unwrap(),
            Some(1000)
        );
        let param = |v: Value| compact_threshold(Some(v)).unwrap_err().param.unwrap_or_default();
        assert_eq!(
            param(json!([{"type":"compaction","compact_threshold":0}])),
            "context_management[0].compact_threshold"
        );
        assert_eq!(
            param(json!([{"type":"compaction","compact_threshold":-5}])),
            "context_management[0].compact_threshold"
        );
        assert_eq!(
            param(json!([{"type":"compaction","compact_threshold":1.5}])),
            "context_management[0].compact_threshold"
        );
        assert_eq!(param(json!([{"type":"compaction"}])), "context_management[0].compact_threshold");
        assert_eq!(param(json!([{"type":"truncate","compact_threshold":5}])), "context_management[0].type");
        assert_eq!(param(json!([{"compact_threshold":5}])), "context_management[0].type");
        assert_eq!(
            param(json!([{"type":"compaction","compact_threshold":5},{"type":"compaction","compact_threshold":6}])),
            "context_management[1]"
        );
        assert_eq!(param(json!({"type":"compaction"})), "context_management");
    }

    #[test]
    fn compact_requests_need_a_model_and_something_to_compact() {
        let r = compact(json!({"model":"m","input":"hi","prompt_cache_key":"k"})).unwrap();
        assert_eq!((r.model.as_str(), r.input.len()), ("m", 1));
        let r = compact(json!({"model":"m","previous_response_id":"resp_1"})).unwrap();
        assert!(r.input.is_empty());
        assert_eq!(compact(json!({"model":"m"})).unwrap_err().param.as_deref(), Some("input"));
        assert_eq!(compact(json!({"input":"x"})).unwrap_err().param.as_deref(), Some("model"));
        let e = compact(json!({"model":"m","input":[{"type":"compaction"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("input[0].encrypted_content"));
        assert_eq!(compact(json!({"model":"m","input":7})).unwrap_err().param.as_deref(), Some("input"));
    }

    #[test]
    fn the_reply_has_the_reference_shape() {
        let reply = CompactedResponse {
            id: "resp_1".into(),
            object: CompactedResponse::OBJECT,
            created_at: 1,
            output: vec![],
            usage: Usage::default(),
        };
        let v = serde_json::to_value(reply).unwrap();
        assert_eq!(v["object"], "response.compaction");
        assert_eq!(v["usage"]["total_tokens"], 0);
    }
}
