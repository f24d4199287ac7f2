//! respgw's HTTP face: the axum router, API-key auth, request ids, request metrics, SSE framing,
//! WebSocket mode, pass-through forwarding, the accept loop and client-connection limits, and the
//! functions that build and serve a gateway process.
//!
//! # Files
//!
//! - `app.rs`: the router (every route and its handler; every own error reply gets the JSON error
//!   shape, every 405 its `Allow`). `error.rs`: [`respgw_protocol::ApiError`] as an HTTP reply, and
//!   the errors of the HTTP edge itself.
//! - `connections/`: the worker's own accept loop on hyper-util (HTTP/1 and h2c, upgrades included)
//!   and the client limits — `book.rs` keeps each connection's state (busy from request head to the
//!   end of the response body, deadlines for the rest, oldest-idle eviction at the cap, WebSockets
//!   with no response in flight included); `upgraded.rs` is the entry a WebSocket holds after the
//!   upgrade; `socket.rs` holds a connection's place under the cap until the socket closes;
//!   `service.rs` times out stalled request bodies and marks busy/idle.
//! - `auth.rs`: API keys (SHA-256 digests compared in constant time); it gives each request its
//!   [`Tenant`] as a request extension, admits the request under the tenant's limits and adds its
//!   `x-ratelimit-*` headers, or answers 429 `rate_limit_exceeded` with `Retry-After`.
//! - `limits/`: the limits counted for the whole gateway — `mod.rs` the [`Limiter`] (admit, open
//!   stream or WebSocket, charge tokens; the headers' quotas); `shared.rs` the counters the workers
//!   share (a memory region of per-tenant atomics: GCRA, open counts per worker row, token
//!   windows); `redis.rs` the same counted in Redis for several gateways (Lua scripts, stream
//!   leases, the failure mode), `redis_direct.rs` the admissions' direct connection to it;
//!   `relayed_usage.rs` the tokens of relayed completions.
//!   `tenants.rs`: the keys file (`--api-keys-file`) parsed and checked into the [`TenantTable`]
//!   that [`GatewayOptions`] carries.
//! - `request_id.rs`: request ids and the request span. `metrics.rs`: request metrics (label values
//!   from fixed sets) and `/metrics`. `json_body.rs`: the content-type check of JSON bodies.
//! - `responses.rs`: the `/v1/responses*` handlers (create, retrieve, delete, input items,
//!   compact); `input_tokens.rs`: `POST /v1/responses/input_tokens`; `conversations.rs`: the
//!   `/v1/conversations*` handlers; `background.rs`: cancel, the resumed background stream and
//!   `BackgroundDrain`; `files.rs`: the `/v1/files` handlers (the multipart upload read as it
//!   streams, held to `--max-file-bytes`); `vector_stores.rs`: the `/v1/vector_stores*` handlers
//!   (both on [`respgw_retrieval::Retrieval`]); `mcp_routes.rs`: Built-in MCP discovery; `passthrough.rs`: `GET /v1/models`,
//!   `POST /v1/chat/completions`, and in integrated mode the fallback that forwards every unknown
//!   path to the model server.
//! - `console/`: the operator console's JSON API (`/v1/console/…`, `docs/console-api.md`) —
//!   `mod.rs` its state, router, scope (an admin sees every tenant) and query parsing; one file
//!   per area (session, responses, conversations, background runs, files and vector stores) over
//!   the store's `ConsoleStore` and the owner's ordinary reads; `console/overview.rs`:
//!   `GET /v1/console/overview`, the last hour's per-step points from an [`OverviewView`] (the
//!   supervisor's samples of the merged metrics in a worker, [`local_overview`] in a process
//!   serving alone).
//! - `messages/`: the Anthropic Messages face — `mod.rs` the `POST /v1/messages` and
//!   `POST /v1/messages/count_tokens` handlers (translated by `respgw_messages` into the engine's
//!   request, same tenants and limits) and `anthropic_errors`, the layer that gives every error of
//!   these routes Anthropic's shape and every reply a `request-id`; `reply.rs` the outcome framed as
//!   a `message` body or Anthropic's event stream.
//! - `event_sequence.rs`: one response's numbered events for any transport (`sequence_number` from
//!   0, the end after the terminal event; it makes nothing up — the engine ends every stream) and
//!   the batching rule both transports use (`gather_ready`: the events a run produces in turns with
//!   its upstream connection go out in one write). `sse.rs`: SSE framing and `[DONE]`.
//! - `websocket/`: WebSocket mode — the upgrade of `GET /v1/responses`, one connection's loop
//!   (frames in, events out, one response at a time), its idle timeout and pings, its draining
//!   (`WebSocketDrain`), and its connection-local state (`local_state.rs`: the last finished
//!   `store:false` response's conversation, bounded per connection and per worker by JSON size,
//!   oldest dropped first).
//! - `options.rs`: [`GatewayOptions`], what a worker needs (serializable); `serve.rs`: [`build`] and
//!   [`serve_on`] (serve a given listener until a given shutdown future, then drain within a bound).
//!
//! Architecture invariant: handlers are thin — parse, validate, hand to the engine, frame the
//! result. No Responses semantics live here, and nothing here knows about other processes: a
//! worker passes in the listener, the shutdown signal and the metrics view it wants served.
//! SSE and WebSocket differ only in framing: both run the engine's one event stream through
//! `EventSequence`.

mod app;
mod auth;
mod background;
mod connections;
mod console;
mod conversations;
mod error;
mod event_sequence;
mod files;
mod input_tokens;
mod json_body;
pub mod limits;
mod mcp_routes;
mod messages;
mod metrics;
mod options;
mod passthrough;
mod request_id;
mod responses;
mod serve;
mod sse;
mod tenants;
mod vector_stores;
mod websocket;

pub use app::{AppConfig, router};
pub use auth::{ApiKeys, Tenant};
pub use console::overview::{OverviewView, local_overview};
pub use limits::{Limiter, RedisFailureMode, RedisSettings};
pub use metrics::{MetricsView, local_view};
pub use options::{
    ClientLimits, DEFAULT_CONSOLE_SAMPLE_SECONDS, DEFAULT_MAX_FILE_BYTES, DEFAULT_MESSAGES_PING_INTERVAL,
    EmbeddingOptions, GatewayOptions, RetrievalOptions, WebSocketLimits,
};
pub use respgw_engine::sealed::ReasoningKeys;
pub use respgw_engine::{BackgroundSettings, DEFAULT_MAX_IDLE_CONNECTIONS, Limits, UpstreamConfig};
pub use respgw_protocol::RequestLimits;
pub use serve::{build, build_sharing, serve_on};
pub use tenants::{DEFAULT_TENANT, KeySpec, TenantLimits, TenantSpec, TenantTable, hash_key};
