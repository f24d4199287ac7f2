//! The one error shape of the API: `{"error":{"message","type","param","code"}}`.
//!
//! Every failure a client can see, from a malformed body to an unreachable upstream, becomes an
//! [`ApiError`]; the HTTP layer only turns it into a status line and this body.

use serde::Serialize;
use serde_json::json;

/// The `error.type` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// 400 and 404: the request or a referenced object is wrong.
    InvalidRequestError,
    /// 401: missing or wrong API key.
    AuthenticationError,
    /// 403: the key is valid but its tenant may not do this.
    PermissionError,
    /// 422: a request that parses but breaks the gateway's contract.
    BadInput,
    /// 429: the caller's tenant is over one of its limits.
    RateLimitError,
    /// 5xx: the gateway or its upstream failed.
    ApiError,
}

/// An error as the client receives it, with the HTTP status it travels with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{status} {error_type:?}: {message}")]
pub struct ApiError {
    pub status: u16,
    pub error_type: ErrorType,
    pub message: String,
    /// The request field at fault, as a path such as `input[2].content`.
    pub param: Option<String>,
    /// A machine-readable code such as `previous_response_not_found`.
    pub code: Option<String>,
}

impl ApiError {
    fn new(status: u16, error_type: ErrorType, message: impl Into<String>) -> Self {
        ApiError { status, error_type, message: message.into(), param: None, code: None }
    }

    /// 400 `invalid_request_error` naming the offending field.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(400, ErrorType::InvalidRequestError, message).with_param(param)
    }

    /// 400 `invalid_request_error` about the request as a whole (bad JSON, wrong content type).
    pub fn invalid_body(message: impl Into<String>) -> Self {
        Self::new(400, ErrorType::InvalidRequestError, message)
    }

    /// 422 `bad_input`: the request parses but breaks a contract rule.
    pub fn bad_input(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(422, ErrorType::BadInput, message).with_param(param).with_code("bad_input")
    }

    /// 403 `permission_error`: the caller's tenant may not do this (`code` `permission_denied`).
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new(403, ErrorType::PermissionError, message).with_code("permission_denied")
    }

    /// 404 for an unknown response id.
    pub fn response_not_found(id: &str) -> Self {
        Self::new(404, ErrorType::InvalidRequestError, format!("No response found with id '{id}'."))
            .with_param("response_id")
            .with_code("response_not_found")
    }

    /// 400 for a `previous_response_id` that is not stored.
    pub fn previous_response_not_found(id: &str) -> Self {
        Self::new(400, ErrorType::InvalidRequestError, format!("Previous response with id '{id}' not found."))
            .with_param("previous_response_id")
            .with_code("previous_response_not_found")
    }

    /// 404 for a conversation that does not exist (or was deleted); `param` names where the id
    /// came from (`conversation` in a create-response body, `conversation_id` in a path).
    pub fn conversation_not_found(id: &str, param: &str) -> Self {
        Self::new(404, ErrorType::InvalidRequestError, format!("No conversation found with id '{id}'."))
            .with_param(param)
            .with_code("conversation_not_found")
    }

    /// 404 for an item id that is not in the conversation.
    pub fn conversation_item_not_found(conversation_id: &str, item_id: &str) -> Self {
        Self::new(
            404,
            ErrorType::InvalidRequestError,
            format!("No item with id '{item_id}' found in conversation '{conversation_id}'."),
        )
        .with_param("item_id")
        .with_code("item_not_found")
    }

    /// 400 `limit_exceeded`: `adding` more items (under `param`) would take a conversation holding
    /// `held` past the gateway's limit of `limit` items per conversation; nothing was written.
    pub fn conversation_full(param: &str, held: usize, adding: usize, limit: usize) -> Self {
        Self::invalid(
            param,
            format!(
                "Too many items for this conversation: it holds {held}, and {adding} more would pass this \
                 gateway's limit of {limit} items per conversation."
            ),
        )
        .with_code("limit_exceeded")
    }

    /// 409 `conversation_conflict`: the conversation changed while a response created in it ran
    /// (another response finished first, or items were added or deleted); nothing was stored.
    pub fn conversation_conflict(id: &str) -> Self {
        Self::new(
            409,
            ErrorType::InvalidRequestError,
            format!(
                "Conversation '{id}' changed while this response ran (another response or an items call \
                 updated it first), so the response was not added to it. Retry the request."
            ),
        )
        .with_param("conversation")
        .with_code("conversation_conflict")
    }

    /// 400 `context_length_exceeded` (`param` `input`): the conversation does not fit the model's
    /// context window.
    pub fn context_length_exceeded(message: impl Into<String>) -> Self {
        Self::new(400, ErrorType::InvalidRequestError, message).with_param("input").with_code("context_length_exceeded")
    }

    /// 401 `authentication_error`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, ErrorType::AuthenticationError, message).with_code("invalid_api_key")
    }

    /// 429 `rate_limit_exceeded`: the caller's tenant is over a limit; the reply's `Retry-After`
    /// says when to try again.
    pub fn rate_limited(message: impl Into<String>) -> Self {
        Self::new(429, ErrorType::RateLimitError, message).with_code("rate_limit_exceeded")
    }

    /// 404 for a path no route serves.
    pub fn route_not_found(method: &str, path: &str) -> Self {
        Self::new(404, ErrorType::InvalidRequestError, format!("No route for {method} {path}.")).with_code("not_found")
    }

    /// 405 for a known path with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        Self::new(405, ErrorType::InvalidRequestError, format!("Method {method} is not allowed on {path}."))
            .with_code("method_not_allowed")
    }

    /// 500 `api_error`: the gateway itself failed. The message must not leak internals.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, ErrorType::ApiError, message).with_code("internal_error")
    }

    /// 502 `upstream_unavailable`: the model server could not be reached.
    pub fn upstream_unavailable(detail: impl std::fmt::Display) -> Self {
        Self::new(502, ErrorType::ApiError, format!("Upstream unavailable: {detail}")).with_code("upstream_unavailable")
    }

    /// 504 `upstream_timeout`: the model server did not answer in time.
    pub fn upstream_timeout() -> Self {
        Self::new(504, ErrorType::ApiError, "Upstream timeout").with_code("upstream_timeout")
    }

    /// 503 `store_unavailable`: the response store failed; the request may be retried.
    pub fn store_unavailable(detail: impl std::fmt::Display) -> Self {
        Self::new(503, ErrorType::ApiError, format!("Response store unavailable: {detail}"))
            .with_code("store_unavailable")
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// A 400 from a `serde_path_to_error` failure under `prefix` (e.g. `tools[0]`), in our own
    /// words: `param` is the failing path, or, for a missing field, the path of the field that is
    /// missing; the message names that path and says what was expected (see [`describe_serde`]).
    pub fn from_path_error<E: std::fmt::Display>(prefix: &str, err: serde_path_to_error::Error<E>) -> Self {
        let path = err.path().to_string();
        let inner = err.into_inner().to_string();
        let path = if path == "." { String::new() } else { path };
        let (missing_field, detail) = describe_serde(&inner);
        let mut param = join_path(prefix, &path);
        if let Some(field) = missing_field {
            param = join_path(&param, &field);
            let error = ApiError::invalid(param.clone(), format!("Missing required parameter: '{param}'."));
            return error.with_code("missing_required_parameter");
        }
        if param.is_empty() {
            ApiError::invalid_body(format!("Invalid request body: {detail}."))
        } else {
            ApiError::invalid(param.clone(), format!("{param}: {detail}."))
        }
    }

    /// The JSON body: `{"error":{"message","type","param","code"}}`.
    pub fn body(&self) -> serde_json::Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

/// "a string", "an object", … for a value a client sent, as error messages name it.
pub fn json_kind(value: &serde_json::Value) -> &'static str {
    use serde_json::Value;
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `prefix.path`, either of which may be empty; an index (`[2]`) joins without a dot.
pub fn join_path(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty()) {
        (true, _) => path.to_owned(),
        (false, true) => prefix.to_owned(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// A deserialisation failure in our words: `(missing field, what is wrong)`. serde's messages
/// name Rust types and its own machinery (`struct FunctionToolParam`, `u64`, `variant`); they
/// are rewritten into JSON terms ("expected a string, got a number"), and anything that cannot
/// be rewritten becomes a plain "invalid value" rather than leaking.
pub fn describe_serde(message: &str) -> (Option<String>, String) {
    let ticked = |s: &str| s.split('`').nth(1).map(str::to_owned);
    if let Some(rest) = message.strip_prefix("missing field ") {
        return (ticked(rest), "a required field is missing".to_owned());
    }
    let detail = if let Some(rest) =
        message.strip_prefix("invalid type: ").or_else(|| message.strip_prefix("invalid value: "))
    {
        match rest.rsplit_once(", expected ") {
            Some((got, expected)) => format!("expected {}, got {}", json_expected(expected), json_got(got)),
            None => "invalid value".to_owned(),
        }
    } else if let Some(rest) = message.strip_prefix("unknown variant ") {
        let value = ticked(rest).unwrap_or_default();
        format!("unknown value '{}'{}", clip(&value), expected_list(rest))
    } else if let Some(rest) = message.strip_prefix("unknown field ") {
        let field = ticked(rest).unwrap_or_default();
        format!("unknown field '{}'{}", clip(&field), expected_list(rest))
    } else if let Some(rest) = message.strip_prefix("duplicate field ") {
        format!("the field '{}' appears twice", ticked(rest).unwrap_or_default())
    } else if message.starts_with("invalid length ") {
        "wrong number of elements".to_owned()
    } else {
        message.trim_end_matches('.').to_owned()
    };
    if leaks_internals(&detail) { (None, "invalid value".to_owned()) } else { (None, detail) }
}

/// serde's `expected …` (a Visitor's words) as a JSON type.
fn json_expected(expected: &str) -> String {
    let expected = expected.trim();
    match expected {
        "a string" | "a borrowed string" | "a character" | "string or map" => "a string".to_owned(),
        "a boolean" => "a boolean (true or false)".to_owned(),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a non-negative integer".to_owned(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "a sequence" | "a tuple" => "an array".to_owned(),
        "a map" => "an object".to_owned(),
        "any valid JSON value" => "a JSON value".to_owned(),
        "unit" => "null".to_owned(),
        _ if expected.starts_with("struct ")
            || expected.starts_with("internally tagged enum ")
            || expected.starts_with("adjacently tagged enum ") =>
        {
            "an object".to_owned()
        }
        _ if expected.starts_with("enum ") || expected == "variant identifier" => "a string".to_owned(),
        _ if (expected.starts_with("one of ") || expected.starts_with("a ") || expected.starts_with("an "))
            && !expected.chars().any(|c| c.is_ascii_uppercase()) =>
        {
            expected.replace('`', "'")
        }
        _ => "a valid value".to_owned(),
    }
}

/// serde's `Unexpected` (what was found) as a JSON type; numbers keep their value, strings do not
/// (they may be long, and the client knows what it sent).
fn json_got(got: &str) -> String {
    let value = got.split('`').nth(1);
    if got.starts_with("boolean") {
        "a boolean".to_owned()
    } else if got.starts_with("integer") || got.starts_with("floating point") {
        match value {
            Some(v) if v.len() <= 32 => format!("the number {v}"),
            _ => "a number".to_owned(),
        }
    } else if got.starts_with("string") || got.starts_with("character") || got.starts_with("byte array") {
        "a string".to_owned()
    } else if got.starts_with("unit") || got.starts_with("null") {
        "null".to_owned()
    } else if got.starts_with("sequence") {
        "an array".to_owned()
    } else if got.starts_with("map") {
        "an object".to_owned()
    } else {
        "another kind of value".to_owned()
    }
}

/// `; expected one of a, b` from serde's `expected one of `a`, `b`` tail (empty when none).
fn expected_list(rest: &str) -> String {
    let Some((_, tail)) = rest.split_once(", expected ") else { return String::new() };
    let names: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
    if names.is_empty() { String::new() } else { format!("; expected one of {}", names.join(", ")) }
}

/// At most 64 characters of a client's value echoed in a message.
fn clip(value: &str) -> String {
    if value.chars().count() <= 64 {
        return value.to_owned();
    }
    let kept: String = value.chars().take(64).collect();
    format!("{kept}…")
}

/// Words of a parser's internals that must never reach a client.
fn leaks_internals(text: &str) -> bool {
    const WORDS: [&str; 6] = ["untagged", "variant", "enum ", "struct ", "serde", "invalid type"];
    let lower = text.to_ascii_lowercase();
    WORDS.iter().any(|w| lower.contains(w))
}

/// A JSON syntax error of a body or frame (`what`: "request body", "frame") in our words, with
/// the line and column where parsing stopped.
pub fn describe_json_syntax(what: &str, error: &serde_json::Error) -> ApiError {
    if error.is_eof() && error.line() == 1 && error.column() == 0 {
        return ApiError::invalid_body(format!("The {what} is empty; expected a JSON object."));
    }
    let text = error.to_string();
    let reason = text.rsplit_once(" at line ").map_or(text.as_str(), |(reason, _)| reason);
    let said = match reason {
        r if r.starts_with("EOF while parsing") => "it ends before the JSON is complete",
        "expected value" => "a JSON value was expected",
        "expected ident" => "a literal is misspelt (true, false and null are the only ones)",
        "expected `:`" => "':' was expected after an object key",
        "expected `,` or `]`" => "',' or ']' was expected in an array",
        "expected `,` or `}`" => "',' or '}' was expected in an object",
        "key must be a string" => "object keys must be strings in double quotes",
        "trailing comma" => "a comma is followed by no value",
        "trailing characters" => "there is more after the JSON value",
        "invalid escape"
        | "invalid unicode code point"
        | "lone leading surrogate in hex escape"
        | "unexpected end of hex escape" => "a string holds an invalid escape sequence",
        "invalid number" => "a number is malformed",
        "number out of range" => "a number is too large",
        "recursion limit exceeded" => "it is nested too deeply",
        r if r.starts_with("control character") => "a string holds an unescaped control character",
        _ => "it is malformed",
    };
    ApiError::invalid_body(format!(
        "The {what} is not valid JSON: {said} (line {}, column {}).",
        error.line(),
        error.column()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_the_four_keys_with_nulls_kept() {
        let body = ApiError::invalid_body("bad json").body();
        assert_eq!(
            body,
            json!({"error": {"message": "bad json", "type": "invalid_request_error", "param": null, "code": null}})
        );
    }

    fn path_error<T: serde::de::DeserializeOwned + std::fmt::Debug>(v: serde_json::Value) -> ApiError {
        ApiError::from_path_error("tools[0]", serde_path_to_error::deserialize::<_, T>(v).unwrap_err())
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct FunctionToolParam {
        name: String,
        strict: Option<bool>,
        count: Option<u64>,
        mode: Option<Mode>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "snake_case")]
    enum Mode {
        Auto,
        Never,
    }

    #[test]
    fn serde_errors_are_told_in_json_terms_with_their_path() {
        let e = path_error::<FunctionToolParam>(json!({"name": 7}));
        assert_eq!(e.param.as_deref(), Some("tools[0].name"));
        assert_eq!(e.message, "tools[0].name: expected a string, got the number 7.");
        let e = path_error::<FunctionToolParam>(json!({}));
        assert_eq!(e.param.as_deref(), Some("tools[0].name"));
        assert_eq!(e.message, "Missing required parameter: 'tools[0].name'.");
        let e = path_error::<FunctionToolParam>(json!({"name": "f", "count": -1}));
        assert_eq!(e.message, "tools[0].count: expected a non-negative integer, got the number -1.");
        let e = path_error::<FunctionToolParam>(json!({"name": "f", "mode": "sometimes"}));
        assert_eq!(e.message, "tools[0].mode: unknown value 'sometimes'; expected one of auto, never.");
        let e = path_error::<FunctionToolParam>(json!({"name": "f", "mode": 3}));
        assert_eq!(e.message, "tools[0].mode: expected a string, got the number 3.");
        let e = path_error::<FunctionToolParam>(json!("x"));
        assert_eq!(e.message, "tools[0]: expected an object, got a string.");
        let e = path_error::<FunctionToolParam>(json!({"name": "f", "strict": null, "count": [1]}));
        assert_eq!(e.message, "tools[0].count: expected a non-negative integer, got an array.");
        assert!(!e.message.contains("FunctionToolParam") && !e.message.contains("u64"), "{}", e.message);
    }

    #[test]
    fn messages_that_would_leak_internals_are_replaced() {
        let (_, detail) = describe_serde("data did not match any variant of untagged enum MessageContentParam");
        assert_eq!(detail, "invalid value");
        let (_, detail) = describe_serde("invalid type: map, expected a MessageContentParam");
        assert_eq!(detail, "expected a valid value, got an object");
    }

    #[test]
    fn json_syntax_errors_say_where_in_our_words() {
        let error = |body: &str| {
            describe_json_syntax("request body", &serde_json::from_str::<serde_json::Value>(body).unwrap_err())
        };
        assert_eq!(error("").message, "The request body is empty; expected a JSON object.");
        assert_eq!(
            error("{\"a\":\n  nope}").message,
            "The request body is not valid JSON: a literal is misspelt (true, false and null are the only ones) (line 2, column 4)."
        );
        assert_eq!(
            error("{\"a\":1").message,
            "The request body is not valid JSON: it ends before the JSON is complete (line 1, column 6)."
        );
        assert_eq!(
            error("{} x").message,
            "The request body is not valid JSON: there is more after the JSON value (line 1, column 4)."
        );
    }

    #[test]
    fn bad_input_is_422_with_its_type() {
        let e = ApiError::bad_input("tool_choice", "nope");
        assert_eq!(e.status, 422);
        assert_eq!(e.body()["error"]["type"], "bad_input");
        assert_eq!(e.body()["error"]["param"], "tool_choice");
    }
}
