//! Test infrastructure for the respgw end-to-end tests.
//!
//! * [`cassette`]: loads recorded HTTP exchanges (YAML cassettes) from the shared data folder.
//! * [`upstream`]: [`ReplayUpstream`], an in-process fake chat-completions server that replays
//!   cassettes and scripted streams, selected by the request's `model`.
//! * [`sse`]: SSE parsing and the gateway's stream framing contract ([`check_stream`]).
//! * [`schema`]: validation of gateway output against the shared OpenAPI document.
//! * [`client_log`]: [`ClientLog`], a recording pass-through between a real client and the gateway.
//! * [`gateway`]: starts the real `respgw` binary as a child process, plus small HTTP client helpers.
//! * [`postgres`]: a fresh PostgreSQL schema per test, and a TCP proxy that can cut the database off.

pub mod cassette;
pub mod client_log;
pub mod gateway;
pub mod postgres;
pub mod schema;
pub mod sse;
pub mod upstream;

use std::path::PathBuf;

pub use cassette::Cassette;
pub use client_log::{ClientLog, ClientRequest};
pub use gateway::{GatewayProcess, http_client, post_json, post_sse};
pub use schema::SchemaValidator;
pub use sse::{SseEvent, check_stream, parse_sse};
pub use upstream::{RecordedRequest, ReplayUpstream, Step};

/// Environment variable that overrides where the shared data folder is.
pub const SHARED_DIR_ENV: &str = "RESPGW_SHARED_DIR";

/// The shared data folder (`shared/`, a sibling of the workspace root), or `$RESPGW_SHARED_DIR` if set.
pub fn shared_dir() -> PathBuf {
    match std::env::var_os(SHARED_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let beside_workspace = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared"));
            // Resolve the `..` for readable paths in messages; keep the raw path if it is missing.
            beside_workspace.canonicalize().unwrap_or(beside_workspace)
        }
    }
}

/// The folder holding the recorded cassettes: `<shared>/data/cassettes`.
pub fn cassettes_dir() -> PathBuf {
    shared_dir().join("data/cassettes")
}

/// The OpenAPI document every gateway output must satisfy: `<shared>/spec/openresponses-openapi.json`.
pub fn openapi_path() -> PathBuf {
    shared_dir().join("spec/openresponses-openapi.json")
}

/// The folder of outputs captured from the Python seed gateway: `<shared>/data/seed-captures`.
pub fn seed_captures_dir() -> PathBuf {
    shared_dir().join("data/seed-captures")
}
