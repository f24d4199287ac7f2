//! Responses API wire types for respgw.
//!
//! Everything a client or the store sees is defined here: the create-response request and its
//! validation ([`request`]), the items that make up history and output ([`items`]), the response
//! object ([`response`]), the stream events ([`events`]), WebSocket mode's frames ([`websocket`]),
//! the rules of `input_file` parts ([`input_file`]), the queries and bodies of reading stored
//! objects ([`listing`]), compaction's endpoint and `context_management` ([`compaction`]) and the
//! one error shape ([`error`]).
//!
//! # What is where
//!
//! - [`request`]: `CreateResponseRequest::from_slice` → `validate` → [`ValidatedRequest`].
//!   Deserialisation errors are rewritten into our words, naming the JSON path and what was
//!   expected. [`limits`]: the operator's caps (`RequestLimits`), checked on the raw request before
//!   items are normalized.
//! - [`items`]: the canonical items — message, `function_call` (with an optional `namespace`),
//!   `function_call_output`, reasoning, the gateway tools' `code_interpreter_call`, `mcp_call`,
//!   `mcp_list_tools`, `web_search_call` and `file_search_call`, MCP approvals' `mcp_approval_request` and
//!   `mcp_approval_response`, the client `custom_tool_call` / `local_shell_call` items and their
//!   outputs, and `compaction`. Items and content parts are dispatched on their `type` field.
//! - [`tools`]: tool declarations (functions, `namespace`, `custom`, `local_shell`, the gateway
//!   tools, and a `web_search` accepted without being offered), `tool_choice`, `allowed_tools`, and
//!   `Capabilities` (which gateway tools this gateway runs).
//! - [`response`]: `ResponseObject`, every schema key always present. [`events`]: `ResponseEvent`
//!   and SSE framing (`SseFrame`, `numbered_json`). [`error`]: `ApiError`, the one error shape.
//! - [`ids`]: id minting (`resp_<uuidv7>` …) and `TurnStamp`: the ids of the gateway tool calls of
//!   one model turn share the first half of their UUID, which is how history tells calls made
//!   together from calls made one after the other, in the store and in a client's replay alike.
//! - [`conversations`]: the Conversations API's bodies and object. [`websocket`]: the
//!   `response.create` client frame and the `error` frame for one that starts no response.
//!   [`input_file`]: which input files are accepted and `file_data` decoding. [`compaction`]: the
//!   body of `POST /v1/responses/compact`, its reply and `context_management`. [`listing`]: list
//!   queries and bodies. [`files`]: the Files API's upload fields, list query and file object.
//!   [`vector_stores`]: the vector-store API's bodies (stores, their files, batches, search),
//!   objects and pages.
//!
//! `tests/real_clients.rs` runs requests captured from Codex CLI and the Agents SDK through parsing
//! and validation.
//!
//! Architecture invariant: this crate does no I/O and knows nothing of HTTP servers, upstreams
//! or storage engines; it is pure data plus the rules that make data valid.

pub mod compaction;
pub mod conversations;
pub mod error;
pub mod events;
pub mod files;
pub mod filters;
pub mod ids;
pub mod input_file;
pub mod items;
pub mod limits;
pub mod listing;
pub mod request;
pub mod response;
pub mod tools;
pub mod vector_stores;
pub mod websocket;

pub use error::{ApiError, ErrorType};
pub use events::{ResponseEvent, SseFrame};
pub use items::{ContentPart, Item, MessageRole};
pub use limits::RequestLimits;
pub use request::{CreateResponseRequest, ValidatedRequest};
pub use response::{ResponseObject, ResponseStatus, Usage};
pub use tools::choice::ToolChoice;
pub use tools::{Capabilities, ToolDeclaration};
