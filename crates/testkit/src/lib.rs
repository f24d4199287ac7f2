//! Test infrastructure for the respgw end-to-end tests.
//!
//! * [`browser`]: headless Chromium over WebDriver (chromedriver on a loopback port of its own), with
//!   bounded waits and screenshots kept as test artifacts, for the console's browser tests.
//! * [`cassette`]: loads recorded HTTP exchanges (YAML cassettes) from the repository's fixtures (`tests/fixtures/`).
//! * [`upstream`]: [`ReplayUpstream`], an in-process fake chat-completions server that replays
//!   cassettes and scripted streams, selected by the request's `model`.
//! * [`embedding`]: the replay upstream's embedding model, a hashed bag of words (texts sharing
//!   words are close), served at `POST /v1/embeddings`, which can fail or answer late on demand.
//! * [`toy_tokenizer`]: the deterministic tokenizer and chat template the replay upstream counts
//!   prompts with (its tokenizer routes, usage, an optional context window).
//! * [`sse`]: SSE parsing and the gateway's stream framing contract ([`check_stream`]).
//! * [`schema`]: validation of gateway output against the Open Responses OpenAPI document.
//! * [`client_log`]: [`ClientLog`], a recording pass-through between a real client and the gateway.
//! * [`gateway`]: starts the real `respgw` binary as a child process, plus small HTTP client helpers.
//! * [`pdf`]: minimal PDF files written by hand.
//! * [`postgres`]: a fresh PostgreSQL schema per test, and a TCP proxy that can cut the database off.
//! * [`prerequisites`]: what tests need from outside the repository, and skipping (or, under
//!   `scripts/test`, failing) a test when it is missing.
//! * [`redis`]: a `redis-server` of a test's own, which it can stop and start again.
//! * [`small_disk`]: a tmpfs of a chosen size, for tests that fill a disk.
//!
//! The replay upstream picks a scenario by the request's `model` and counts streamed replies the
//! gateway closed before their last chunk (`unfinished_streams`), which is how tests see a cancelled
//! upstream call. Opt-in, it counts prompts with [`toy_tokenizer`]: vLLM- or llama.cpp-style
//! tokenizer routes, a context window refused with vLLM's error body, and a one-token completion's
//! `usage.prompt_tokens`; `Step::recorded_tool_call` replays a recorded tool-call stream with the
//! call renamed, for client tools such as Codex's `exec_command`. The schema validator has one
//! documented schema patch and a supplement, `tests/fixtures/openresponses-supplement.json`, for
//! exactly what the document lacks of compaction (its item, event and object) and of file search
//! (its tool, item, three events and the `file_citation` annotation). The `respgw-replay-upstream`
//! binary serves the replay upstream as a process of its own.

pub mod browser;
pub mod cassette;
pub mod client_log;
pub mod embedding;
pub mod gateway;
pub mod pdf;
pub mod postgres;
pub mod prerequisites;
pub mod redis;
pub mod schema;
pub mod small_disk;
pub mod sse;
pub mod toy_tokenizer;
pub mod upstream;

use std::path::PathBuf;

pub use cassette::Cassette;
pub use client_log::{ClientLog, ClientRequest};
pub use gateway::{GatewayProcess, http_client, post_json, post_sse};
pub use schema::SchemaValidator;
pub use sse::{SseEvent, check_stream, parse_sse};
pub use upstream::{RecordedRequest, ReplayUpstream, Step, TokenizerRoutes};

/// The repository's test fixtures (`tests/fixtures/` at the workspace root, described by its README).
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures"))
}

/// The folder holding the recorded cassettes: `<fixtures>/cassettes`.
pub fn cassettes_dir() -> PathBuf {
    fixtures_dir().join("cassettes")
}

/// The OpenAPI document every gateway output must satisfy: `<fixtures>/openresponses-openapi.json`.
pub fn openapi_path() -> PathBuf {
    fixtures_dir().join("openresponses-openapi.json")
}

/// The schemas the Open Responses document lacks (compaction, file search): `<fixtures>/openresponses-supplement.json`.
pub fn supplement_path() -> PathBuf {
    fixtures_dir().join("openresponses-supplement.json")
}

/// The folder of outputs captured from the reference Python gateway: `<fixtures>/seed-captures`.
pub fn seed_captures_dir() -> PathBuf {
    fixtures_dir().join("seed-captures")
}
