//! Fuzz target: arbitrary bytes as a `POST /v1/responses` body, parsed and validated exactly as
//! the server does (every gateway tool enabled, small caps so the limit checks are reached).
//! Invariant: an error is a 4xx in the one error shape, never a panic; a valid request
//! re-serializes as a response object.

#![no_main]

use libfuzzer_sys::fuzz_target;
use respgw_protocol::{CreateResponseRequest, ResponseObject};

mod request_caps;
use request_caps::{ALL_TOOLS, SMALL_CAPS};

fuzz_target!(|data: &[u8]| {
    let outcome = CreateResponseRequest::from_slice(data).and_then(|r| r.validate_within(&ALL_TOOLS, &SMALL_CAPS));
    match outcome {
        Ok(request) => {
            let response = ResponseObject::in_progress("resp_fuzz".into(), 0, &request);
            serde_json::to_vec(&response).expect("a response object serializes");
        }
        Err(error) => {
            assert!((400..500).contains(&error.status), "validation answered {}: {}", error.status, error.message);
            assert!(!error.message.is_empty());
            let body = error.body();
            assert!(body["error"].get("param").is_some() && body["error"].get("code").is_some());
        }
    }
});
