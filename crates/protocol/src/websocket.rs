//! WebSocket mode's frames (`GET /v1/responses` upgraded to a WebSocket).
//!
//! A client starts each response with a `response.create` text frame: `{"type":
//! "response.create", …}` where `…` are the fields of a `POST /v1/responses` body, at the top
//! level (Open Responses' WebSocket transport, as the reference API sends it). `stream` has no
//! meaning there — every response streams — and is ignored. The gateway answers with the same
//! events as over SSE, one JSON event per text frame ([`crate::events::numbered_json`]), or, when
//! it cannot start a response from a frame, with one [`error_frame`].

use serde_json::Value;

use crate::error::ApiError;
use crate::events::{ResponseEvent, StreamError, numbered_json};
use crate::request::CreateResponseRequest;

/// The `type` of the one client frame: start a response.
pub const RESPONSE_CREATE: &str = "response.create";

/// Parse a client frame into the request it carries. Errors are the ones the same body would get
/// over HTTP, plus the frame's own: not a JSON object, a missing or unknown `type`, and a
/// warm-up (`generate: false`, which this gateway does not implement).
pub fn parse_response_create(frame: &[u8]) -> Result<CreateResponseRequest, ApiError> {
    let mut frame: Value =
        serde_json::from_slice(frame).map_err(|e| crate::error::describe_json_syntax("frame", &e))?;
    let Some(fields) = frame.as_object_mut() else {
        return Err(ApiError::invalid_body("A frame must be a JSON object."));
    };
    match fields.remove("type") {
        Some(Value::String(kind)) if kind == RESPONSE_CREATE => {}
        Some(Value::String(kind)) => {
            return Err(ApiError::invalid(
                "type",
                format!("Unknown client event type '{kind}': the only one is '{RESPONSE_CREATE}'."),
            )
            .with_code("unknown_event_type"));
        }
        _ => return Err(ApiError::invalid("type", format!("A frame needs \"type\": \"{RESPONSE_CREATE}\"."))),
    }
    if fields.get("generate") == Some(&Value::Bool(false)) {
        return Err(ApiError::invalid("generate", "Warm-up requests ('generate': false) are not supported."));
    }
    fields.remove("generate");
    fields.remove("stream");
    let mut request = CreateResponseRequest::from_value(frame)?;
    request.stream = Some(true);
    Ok(request)
}

/// The frame answering a client frame that started no response: the `error` event of the SSE
/// stream (details nested under `error` and repeated flat), numbered 0 as the only event of its
/// exchange, plus the HTTP `status` the same request would have been answered with.
pub fn error_frame(error: &ApiError) -> String {
    let event = ResponseEvent::error(StreamError::from(error));
    let mut frame: Value = match numbered_json(&event, 0).map(|json| serde_json::from_str(&json)) {
        Ok(Ok(frame)) => frame,
        // Unreachable: the event is plain strings and numbers.
        _ => return format!(r#"{{"type":"error","sequence_number":0,"status":{}}}"#, error.status),
    };
    frame["status"] = Value::from(error.status);
    frame.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_create_frame_is_a_create_body_with_a_type() {
        let request =
            parse_response_create(br#"{"type":"response.create","model":"m","input":"hi","stream":false}"#).unwrap();
        assert_eq!(request.model.as_deref(), Some("m"));
        assert_eq!(request.stream, Some(true), "every WebSocket response streams");
    }

    #[test]
    fn frames_without_the_right_type_are_rejected_naming_type() {
        for frame in [r#"{"model":"m","input":"hi"}"#, r#"{"type":"response.cancel"}"#, r#"{"type":7}"#] {
            let error = parse_response_create(frame.as_bytes()).unwrap_err();
            assert_eq!((error.status, error.param.as_deref()), (400, Some("type")), "{frame}");
        }
    }

    #[test]
    fn bad_json_and_non_objects_are_400() {
        for frame in ["{not json", "[1,2]", "\"response.create\""] {
            let error = parse_response_create(frame.as_bytes()).unwrap_err();
            assert_eq!(error.status, 400, "{frame}");
        }
    }

    #[test]
    fn warm_up_is_rejected_rather_than_generating() {
        let error = parse_response_create(br#"{"type":"response.create","model":"m","input":"x","generate":false}"#)
            .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("generate"));
    }

    #[test]
    fn body_errors_keep_their_http_param() {
        let error = parse_response_create(br#"{"type":"response.create","model":"m","input":"x","temperature":"hot"}"#)
            .unwrap_err();
        assert_eq!(error.param.as_deref(), Some("temperature"));
    }

    #[test]
    fn error_frames_are_numbered_error_events_with_a_status() {
        let frame: Value =
            serde_json::from_str(&error_frame(&ApiError::previous_response_not_found("resp_x"))).unwrap();
        assert_eq!(frame["type"], "error");
        assert_eq!(frame["sequence_number"], 0);
        assert_eq!(frame["status"], 400);
        assert_eq!(frame["error"]["code"], "previous_response_not_found");
        assert_eq!(frame["error"]["param"], "previous_response_id");
        assert_eq!(frame["error"]["type"], "invalid_request_error");
        assert_eq!(frame["code"], "previous_response_not_found");
    }
}
