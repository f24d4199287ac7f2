//! Fuzz target: arbitrary bytes as a `POST /v1/messages` body, parsed and translated into the
//! engine's request exactly as the server does (every gateway tool enabled, small caps so the
//! limit checks are reached). Invariant: an error is a 4xx that Anthropic's shape carries, never a
//! panic; a translated request re-serializes as a response object.

#![no_main]

use libfuzzer_sys::fuzz_target;
use respgw_messages::error::messages_error;
use respgw_messages::into_engine::into_engine;
use respgw_messages::request::MessagesRequest;
use respgw_protocol::{Capabilities, RequestLimits, ResponseObject};

const ALL_TOOLS: Capabilities = Capabilities {
    code_interpreter: true,
    builtin_mcp: true,
    remote_mcp: true,
    remote_url_checks: true,
    web_search: true,
};
const SMALL_CAPS: RequestLimits =
    RequestLimits { max_input_items: 64, max_tools: 16, max_mcp_servers: 4, max_input_file_bytes: 4096 };

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
