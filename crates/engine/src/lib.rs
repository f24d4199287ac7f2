//! The respgw engine: turns one validated request into a response.
//!
//! Data flows one way: [`Engine::prepare`] resolves history from the store →
//! [`PreparedResponse::run`] builds the upstream chat request ([`chat`]), streams it
//! ([`upstream`]), turns chunks into items and events ([`turn`]), persists the result and emits
//! the terminal event. The caller chooses the [`EventSink`]: SSE connections get every event,
//! non-stream requests only the outcome; both run the same code.
//!
//! Architecture invariant: the engine knows nothing of HTTP servers or processes; it talks to
//! the model server through [`Upstream`] and to storage through `respgw_store::ResponseStore`.

pub mod chat;
mod cite;
pub mod files;
pub mod gateway_tool;
mod offer;
mod run;
pub mod sealed;
pub mod think;
pub mod tool_kinds;
pub mod turn;
pub mod upstream;

pub use files::FileReader;
pub use gateway_tool::{FunctionSpec, GatewayCall, GatewayTool, ResolvedTools, ToolResolver};
pub use run::{ClientGone, Engine, EventSink, Limits, LocalConversation, PreparedResponse, RunOutcome, store_error};
pub use tool_kinds::{
    CallTarget, CitableSource, ClientCallShape, CodeInterpreterOutcome, GatewayKind, GatewayOutcome, WebSearchOutcome,
};
pub use upstream::{Upstream, UpstreamConfig, UpstreamError};
