//! respgw's HTTP face: the axum router, API-key auth, request ids, SSE framing, pass-through
//! forwarding, and `serve` which ties them to a listener.
//!
//! Architecture invariant: handlers are thin — parse, validate, hand to the engine, frame the
//! result. No Responses semantics live here.

mod app;
mod auth;
mod error;
mod passthrough;
mod request_id;
mod responses;
mod serve;
mod sse;

pub use app::{AppConfig, router};
pub use auth::ApiKeys;
pub use respgw_engine::UpstreamConfig;
pub use serve::{ServeOptions, serve};
