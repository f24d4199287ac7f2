//! respgw's HTTP face: the axum router, API-key auth, request ids, request metrics, SSE framing,
//! WebSocket mode, pass-through forwarding, the accept loop and client-connection limits, and the
//! functions that build and serve a gateway process.
//!
//! Architecture invariant: handlers are thin — parse, validate, hand to the engine, frame the
//! result. No Responses semantics live here, and nothing here knows about other processes: a
//! worker passes in the listener, the shutdown signal and the metrics view it wants served.

mod app;
mod auth;
mod background;
mod connections;
mod conversations;
mod error;
mod event_sequence;
mod input_tokens;
mod json_body;
mod mcp_routes;
mod metrics;
mod options;
mod passthrough;
mod request_id;
mod responses;
mod serve;
mod sse;
mod tenants;
mod websocket;

pub use app::{AppConfig, router};
pub use auth::{ApiKeys, Tenant};
pub use metrics::{MetricsView, local_view};
pub use options::{ClientLimits, GatewayOptions, WebSocketLimits};
pub use respgw_engine::sealed::ReasoningKeys;
pub use respgw_engine::{BackgroundSettings, DEFAULT_MAX_IDLE_CONNECTIONS, Limits, UpstreamConfig};
pub use respgw_protocol::RequestLimits;
pub use serve::{build, serve_on};
pub use tenants::{DEFAULT_TENANT, KeySpec, TenantLimits, TenantSpec, TenantTable, hash_key};
