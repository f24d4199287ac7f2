//! What one gateway process needs to serve, independent of how it was started: every setting,
//! resolved once by the `respgw` binary from its command line and environment. The supervisor
//! serializes this to JSON for the workers it re-execs; workers read no other setting.

use std::time::Duration;

use respgw_engine::sealed::ReasoningKeys;
use respgw_engine::{BackgroundSettings, Limits, UpstreamConfig};
use respgw_mcp::McpTimeouts;
use respgw_telemetry::tracing_otlp::TracingConfig;
use respgw_tools::code_interpreter::SandboxSettings;
use respgw_tools::input_files::InputFileSettings;
use respgw_tools::mcp::RemoteMcpSettings;
use respgw_tools::web_search::WebSearchSettings;
use serde::{Deserialize, Serialize};

use crate::limits::RedisSettings;
use crate::tenants::{TenantLimits, TenantTable};

/// Configuration of a gateway worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayOptions {
    /// The model server.
    pub upstream: UpstreamConfig,
    /// `GW_DB_PATH`: a SQLite file path or `sqlite://` URL, or a `postgres://` URL (may hold a
    /// password: show it only through `respgw_store::redacted_location`).
    pub db_path: String,
    /// `GW_DB_POOL_SIZE`: database connections per worker process.
    #[serde(default = "default_db_pool_size")]
    pub db_pool_size: u32,
    /// `GW_DB_RESERVE_MB`: the SQLite store's disk-space reserve, in MiB (0: none).
    #[serde(default = "default_db_reserve_mb")]
    pub db_reserve_mb: u64,
    /// API keys of the tenant `default` (`--api-key`); authentication is off when neither these
    /// nor `tenants` hold a key.
    pub api_keys: Vec<String>,
    /// The keys file's tenants, read by the supervisor (at start and on SIGHUP).
    #[serde(default)]
    pub tenants: TenantTable,
    /// The keys file (`--api-keys-file`), for the supervisor to read again on SIGHUP.
    #[serde(default)]
    pub api_keys_file: Option<std::path::PathBuf>,
    /// Limits of tenants whose entry sets none (`--tenant-*`); also those of `default`.
    #[serde(default)]
    pub tenant_limits: TenantLimits,
    /// The Redis every gateway counting together keeps tenant limits in (`--redis-url`); `None`:
    /// this gateway counts alone.
    #[serde(default)]
    pub redis: Option<RedisSettings>,
    /// Largest request body accepted, in bytes (a larger one is refused with 413).
    pub max_body_bytes: usize,
    /// Caps on input items, tools, MCP servers, tool rounds and tool output fed to the model.
    #[serde(default)]
    pub limits: Limits,
    /// Where `/metrics` is served (`GW_METRICS_PATH`); `None` disables it.
    pub metrics_path: Option<String>,
    /// Seconds between two samples of the console's overview (`--console-sample-seconds`).
    #[serde(default = "default_console_sample_seconds")]
    pub console_sample_seconds: u64,
    /// Integrated mode: every request no gateway route serves is forwarded unchanged to this
    /// base URL (the model server's private address, e.g. `http://127.0.0.1:41234`).
    pub forward_other_routes_to: Option<String>,
    /// How long a draining worker waits for in-flight requests and streams.
    pub drain_timeout: Duration,
    /// Timeouts and the connection cap that keep slow or idle clients from holding a worker.
    pub client_limits: ClientLimits,
    /// WebSocket mode's idle timeout, pings and connection-local memory (`--websocket-*`).
    #[serde(default)]
    pub websocket: WebSocketLimits,
    /// How long a Messages stream may go without an event before it sends a `ping` event
    /// (`--messages-ping-interval`).
    #[serde(default = "default_messages_ping_interval")]
    pub messages_ping_interval: Duration,
    /// Offer `code_interpreter` (the supervisor checked that the sandbox works here).
    pub code_interpreter: bool,
    /// The sandbox's directory and limits (`--code-interpreter-*`); the same for every worker, so
    /// a conversation finds its container whichever worker serves it.
    pub code_interpreter_settings: SandboxSettings,
    /// Base URL of the Built-in MCP helper, when MCP servers are configured.
    pub mcp_helper_url: Option<String>,
    /// The Built-in MCP time limits (`--mcp-builtin-*-timeout-sec`): a call to the helper waits
    /// a little longer than the helper's own tool-call limit.
    #[serde(default)]
    pub mcp_timeouts: McpTimeouts,
    /// Remote (request-declared) MCP (`--mcp-request-remote-*`).
    #[serde(default)]
    pub remote_mcp: RemoteMcpSettings,
    /// `input_file` parts: size limits and the `file_url` fetch (`--input-file-*`).
    #[serde(default)]
    pub input_files: InputFileSettings,
    /// `web_search` and its profile (`--web-search-profile`); `None`: not offered.
    #[serde(default)]
    pub web_search: Option<WebSearchSettings>,
    /// Keys of `reasoning.encrypted_content` (the first seals); read or generated once by the
    /// supervisor so every worker opens what any worker sealed.
    #[serde(default)]
    pub reasoning_keys: ReasoningKeys,
    /// Span export (`--tracing-*`); only workers export.
    #[serde(default)]
    pub tracing: TracingConfig,
    /// Background responses: run slots per worker, lease, polling, retention (`--background-*`).
    #[serde(default)]
    pub background: BackgroundSettings,
    /// Files and vector stores: the upload limit, the embedding endpoint, ingestion and the
    /// vector cache (`--max-file-bytes`, `--embedding-*`, `--ingestion-concurrency`,
    /// `--vector-cache-mb`).
    #[serde(default)]
    pub retrieval: RetrievalOptions,
}

/// Files and vector stores, as a worker gets them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetrievalOptions {
    /// Largest upload to `POST /v1/files`, in bytes (413 beyond it).
    pub max_file_bytes: usize,
    /// The embedding endpoint; `None`: search is lexical (BM25) only.
    pub embedding: Option<EmbeddingOptions>,
    /// Files one worker ingests at once.
    pub ingestion_concurrency: usize,
    /// Bytes of embeddings one worker keeps in memory across searches.
    pub vector_cache_bytes: usize,
}

/// An OpenAI-compatible `POST {base_url}/embeddings` endpoint and its model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbeddingOptions {
    pub model: String,
    /// e.g. `http://127.0.0.1:8000/v1` (the main upstream's unless set).
    pub base_url: String,
    /// Bearer token (the main upstream's unless set).
    pub api_key: Option<String>,
    /// Inputs per request.
    pub batch_size: usize,
    /// Tokens of one text sent to be embedded, at most (longer ones are embedded by their
    /// beginning); `None`: whole texts.
    #[serde(default)]
    pub max_input_tokens: Option<usize>,
}

/// The default of [`RetrievalOptions::max_file_bytes`]: 512 MiB.
pub const DEFAULT_MAX_FILE_BYTES: usize = 512 << 20;

impl Default for RetrievalOptions {
    fn default() -> Self {
        RetrievalOptions {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            embedding: None,
            ingestion_concurrency: 2,
            vector_cache_bytes: 256 << 20,
        }
    }
}

impl RetrievalOptions {
    /// What the retrieval crate is built with.
    pub fn settings(&self) -> respgw_retrieval::RetrievalSettings {
        respgw_retrieval::RetrievalSettings {
            embedding: self.embedding.as_ref().map(|e| respgw_retrieval::EmbeddingSettings {
                base_url: e.base_url.clone(),
                api_key: e.api_key.clone(),
                model: e.model.clone(),
                batch_size: e.batch_size,
                max_input_tokens: e.max_input_tokens,
            }),
            ingestion_concurrency: self.ingestion_concurrency,
            vector_cache_bytes: self.vector_cache_bytes,
        }
    }
}

/// The default of [`GatewayOptions::messages_ping_interval`].
pub const DEFAULT_MESSAGES_PING_INTERVAL: Duration = Duration::from_secs(10);

fn default_messages_ping_interval() -> Duration {
    DEFAULT_MESSAGES_PING_INTERVAL
}

/// The default of [`GatewayOptions::console_sample_seconds`].
pub const DEFAULT_CONSOLE_SAMPLE_SECONDS: u64 = 10;

fn default_console_sample_seconds() -> u64 {
    DEFAULT_CONSOLE_SAMPLE_SECONDS
}

fn default_db_pool_size() -> u32 {
    respgw_store::DEFAULT_POOL_SIZE
}

fn default_db_reserve_mb() -> u64 {
    respgw_store::sqlite::DEFAULT_RESERVE_BYTES >> 20
}

impl GatewayOptions {
    /// How the store is opened.
    pub fn store_options(&self) -> respgw_store::StoreOptions {
        respgw_store::StoreOptions { pool_size: self.db_pool_size, reserve_bytes: self.db_reserve_mb << 20 }
    }
}

/// What one worker allows its client connections (see `crate::connections`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientLimits {
    /// From accepting a connection, or from the first byte of a later request on it, until that
    /// request's head (request line and headers) is complete.
    pub header_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Longest pause while a request body is being received.
    pub body_timeout: Duration,
    /// Open client connections per worker (upgraded WebSocket connections included); at the cap,
    /// a new connection closes the longest-idle one, or is answered 503 when none is idle.
    pub max_connections: usize,
}

/// What one worker allows its WebSocket connections (see `crate::websocket`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WebSocketLimits {
    /// How long a WebSocket with no response in flight stays open.
    pub idle_timeout: Duration,
    /// Time between two pings on an open WebSocket; a peer that has not answered one by the next
    /// is taken for gone.
    pub ping_interval: Duration,
    /// Most bytes of `store:false` conversations one connection keeps to continue from.
    pub local_state_per_connection: usize,
    /// Most bytes of `store:false` conversations all the connections of one worker keep.
    pub local_state_per_worker: usize,
}

impl Default for WebSocketLimits {
    fn default() -> Self {
        WebSocketLimits {
            idle_timeout: Duration::from_secs(300),
            ping_interval: Duration::from_secs(30),
            local_state_per_connection: 32 << 20,
            local_state_per_worker: 256 << 20,
        }
    }
}
