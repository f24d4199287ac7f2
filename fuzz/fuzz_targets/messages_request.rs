//! Fuzz target: arbitrary bytes as a `POST /v1/messages` body, parsed and translated into the
//! engine's request exactly as the server does (every gateway tool enabled, small caps so the
//! limit checks are reached). Invariant: an error is a 4xx that Anthropic's shape carries, never a
//! panic; a translated request re-serializes as a response object.

#![no_main]

use libfuzzer_sys::fuzz_target;
use respgw_messages::error::messages_error;
use respgw_messages::into_engine::into_engine;
use respgw_messages::request::MessagesRequest;
use respgw_protocol::ResponseObject;

mod request_caps;
use request_caps::{ALL_TOOLS, SMALL_CAPS};

fuzz_target!(|data: &[u8]| {
    match MessagesRequest::from_slice(data).and_then(|r| into_engine(r, &ALL_TOOLS, &SMALL_CAPS)) {
        Ok(translated) => {
            let response = ResponseObject::in_progress("resp_fuzz".into(), 0, &translated.request);
            serde_json::to_vec(&response).expect("a response object serializes");
        }
        Err(error) => {
            assert!((400..500).contains(&error.status), "translation answered {}: {}", error.status, error.message);
            assert!(!error.message.is_empty());
            let (status, body) = messages_error(&error);
            assert!((400..500).contains(&status), "Anthropic's status {status} for {}", error.status);
            assert_eq!(body["type"], "error");
        }
    }
});
