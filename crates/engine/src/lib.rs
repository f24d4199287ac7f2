//! The respgw engine: turns one validated request into a response.
//!
//! Data flows one way: [`Engine::prepare`] resolves history from the store →
//! [`PreparedResponse::run`] builds the upstream chat request ([`chat`]), streams it
//! ([`upstream`]), turns chunks into items and events ([`turn`]), runs the gateway tools the model
//! called (one module per tool kind: [`tool_kinds`]), persists the result and emits the terminal
//! event. A non-stream request awaits [`PreparedResponse::run`] for the outcome; a streaming one
//! gets the events of [`PreparedResponse::spawn`] — the same run either way. A background one
//! (`background: true`) is handed to [`BackgroundRuns`] with `PreparedResponse::start_background`:
//! the same run again, detached from the request, its events logged in the store for any process
//! to poll, cancel or resume ([`background`]). Stored responses are read and deleted through
//! [`Engine::stored`]. Compaction — `POST /v1/responses/compact` ([`Engine::compact`]) and
//! `context_management` inside a run — is [`compaction`]; [`Engine::count_input_tokens`] has the
//! upstream count what a response's first model turn would send; conversations are managed
//! through [`Engine::conversations`].
//!
//! Architecture invariant: the engine knows nothing of HTTP servers or processes; it talks to
//! the model server through [`Upstream`] and to storage through `respgw_store_api::ResponseStore`.
//! It owns the end of every response stream: exactly one terminal event, even when a run panics.

pub mod background;
pub mod chat;
pub mod compaction;
mod conversations;
mod engine;
pub mod files;
pub mod gateway_tool;
mod input_tokens;
mod offer;
mod run;
pub mod sealed;
mod sink;
mod spawn;
mod sse_decoder;
mod stored;
pub mod think;
pub mod tool_kinds;
mod truncation;
pub mod turn;
pub mod upstream;

pub use background::{BackgroundRuns, BackgroundSettings, ResumeFrom};
pub use conversations::Conversations;
pub use engine::{Engine, Limits};
pub use files::FileReader;
pub use gateway_tool::{FunctionSpec, GatewayCall, GatewayTool, ResolvedTools, ToolResolver};
pub use input_tokens::{CountMethod, InputTokenCounter};
pub use respgw_store_api::background::StoredEvent;
pub use run::{LocalConversation, PreparedResponse, RunOutcome};
pub use stored::StoredResponses;
pub use tool_kinds::{
    CallTarget, CitableSource, ClientCallShape, CodeInterpreterOutcome, GatewayKind, GatewayOutcome, WebSearchOutcome,
};
pub use upstream::{ContextOverflow, DEFAULT_MAX_IDLE_CONNECTIONS, Upstream, UpstreamConfig, UpstreamError};
