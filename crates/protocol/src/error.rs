//! The one error shape of the API: `{"error":{"message","type","param","code"}}` (spec §2.7, §7).
//!
//! Every failure a client can see, from a malformed body to an unreachable upstream, becomes an
//! [`ApiError`]; the HTTP layer only turns it into a status line and this body.

use serde::Serialize;
use serde_json::json;

/// The `error.type` values of spec §7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    /// 400 and 404: the request or a referenced object is wrong.
    InvalidRequestError,
    /// 401: missing or wrong API key.
    AuthenticationError,
    /// 422: a request that parses but breaks the gateway's contract.
    BadInput,
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

    /// 422 `bad_input`: the request parses but breaks a contract rule (spec §7).
    pub fn bad_input(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(422, ErrorType::BadInput, message).with_param(param).with_code("bad_input")
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

    /// 401 `authentication_error`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, ErrorType::AuthenticationError, message).with_code("invalid_api_key")
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

    /// A 400 from a `serde_path_to_error` failure under `prefix` (e.g. `tools[0]`): `param` is
    /// the failing path, or, for a missing field, the path of the field that is missing.
    pub fn from_path_error<E: std::fmt::Display>(prefix: &str, err: serde_path_to_error::Error<E>) -> Self {
        let path = err.path().to_string();
        let inner = err.into_inner().to_string();
        let mut param = if path == "." { String::new() } else { path };
        if let Some(field) = inner.strip_prefix("missing field `").and_then(|r| r.split('`').next()) {
            param = if param.is_empty() { field.to_owned() } else { format!("{param}.{field}") };
        }
        let param = match (prefix.is_empty(), param.is_empty()) {
            (true, _) => param,
            (false, true) => prefix.to_owned(),
            (false, false) => format!("{prefix}.{param}"),
        };
        let message = if param.is_empty() { inner } else { format!("Invalid value for '{param}': {inner}") };
        let error = ApiError::invalid_body(message);
        if param.is_empty() { error } else { error.with_param(param) }
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

    #[test]
    fn bad_input_is_422_with_its_type() {
        let e = ApiError::bad_input("tool_choice", "nope");
        assert_eq!(e.status, 422);
        assert_eq!(e.body()["error"]["type"], "bad_input");
        assert_eq!(e.body()["error"]["param"], "tool_choice");
    }
}
