//! Errors in Anthropic's shape: `{"type":"error","error":{"type":…,"message":…}}`, with
//! Anthropic's statuses. Every error of a Messages route is an [`ApiError`] inside the gateway;
//! this is the one place that says how it looks to a Messages client.

use respgw_protocol::{ApiError, ErrorType};
use serde_json::{Value, json};

/// Anthropic's error types, each with the status it travels with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessagesErrorType {
    /// 400.
    InvalidRequest,
    /// 401.
    Authentication,
    /// 403.
    Permission,
    /// 404.
    NotFound,
    /// 413.
    RequestTooLarge,
    /// 429.
    RateLimit,
    /// 500 and any other 5xx but those below.
    Api,
    /// 529: the gateway or its upstream is overloaded or unavailable (502, 503).
    Overloaded,
    /// 504: the upstream did not answer in time.
    Timeout,
}

impl MessagesErrorType {
    /// The `error.type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            MessagesErrorType::InvalidRequest => "invalid_request_error",
            MessagesErrorType::Authentication => "authentication_error",
            MessagesErrorType::Permission => "permission_error",
            MessagesErrorType::NotFound => "not_found_error",
            MessagesErrorType::RequestTooLarge => "request_too_large",
            MessagesErrorType::RateLimit => "rate_limit_error",
            MessagesErrorType::Api => "api_error",
            MessagesErrorType::Overloaded => "overloaded_error",
            MessagesErrorType::Timeout => "timeout_error",
        }
    }

    /// The HTTP status Anthropic sends this type with.
    pub fn status(self) -> u16 {
        match self {
            MessagesErrorType::InvalidRequest => 400,
            MessagesErrorType::Authentication => 401,
            MessagesErrorType::Permission => 403,
            MessagesErrorType::NotFound => 404,
            MessagesErrorType::RequestTooLarge => 413,
            MessagesErrorType::RateLimit => 429,
            MessagesErrorType::Api => 500,
            MessagesErrorType::Overloaded => 529,
            MessagesErrorType::Timeout => 504,
        }
    }

    /// The Anthropic type of a gateway error, from its status and type.
    pub fn of(error: &ApiError) -> Self {
        match (error.status, error.error_type) {
            (401, _) | (_, ErrorType::AuthenticationError) => MessagesErrorType::Authentication,
            (403, _) => MessagesErrorType::Permission,
            (404, _) => MessagesErrorType::NotFound,
            (413, _) => MessagesErrorType::RequestTooLarge,
            (429, _) | (_, ErrorType::RateLimitError) => MessagesErrorType::RateLimit,
            // An unreachable or saturated upstream, a store outage, a draining gateway: worth a retry.
            (502 | 503 | 529, _) => MessagesErrorType::Overloaded,
            (504, _) => MessagesErrorType::Timeout,
            (500..=599, _) | (_, ErrorType::ApiError) => MessagesErrorType::Api,
            // 400, 405, 408, 415, 422 and the like: the request is at fault.
            _ => MessagesErrorType::InvalidRequest,
        }
    }
}

/// A gateway error as a Messages client receives it: the status and the body.
pub fn messages_error(error: &ApiError) -> (u16, Value) {
    let kind = MessagesErrorType::of(error);
    (kind.status(), messages_error_body(kind, &error.message))
}

/// The body of an Anthropic error (also the data of a stream's `error` event).
pub fn messages_error_body(kind: MessagesErrorType, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind.as_str(), "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_follow_anthropic() {
        let cases = [
            (ApiError::invalid("messages", "bad"), 400, "invalid_request_error"),
            (ApiError::bad_input("tools", "bad"), 400, "invalid_request_error"),
            (ApiError::unauthorized("no key"), 401, "authentication_error"),
            (ApiError::route_not_found("GET", "/v1/x"), 404, "not_found_error"),
            (ApiError::rate_limited("slow down"), 429, "rate_limit_error"),
            (ApiError::internal("oops"), 500, "api_error"),
            (ApiError::upstream_unavailable("down"), 529, "overloaded_error"),
        ];
        for (error, status, kind) in cases {
            let (got_status, body) = messages_error(&error);
            assert_eq!((got_status, body["error"]["type"].as_str()), (status, Some(kind)), "{error:?}");
            assert_eq!(body["type"], "error");
            assert_eq!(body["error"]["message"], error.message.as_str());
        }
    }
}
