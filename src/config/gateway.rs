//! The gateway settings both modes share, declared once: `serve` takes them as they are,
//! `integrated` with the `--responses-` prefix (see `super::integrated`). [`GatewayArgs::resolve`]
//! turns them into the [`GatewayOptions`] every worker gets and the Built-in MCP helper's setup.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args};
use respgw_mcp::McpTimeouts;
use respgw_server::{
    BackgroundSettings, ClientLimits, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_IDLE_CONNECTIONS,
    DEFAULT_MESSAGES_PING_INTERVAL, EmbeddingOptions, GatewayOptions, Limits, ReasoningKeys, RedisFailureMode,
    RedisSettings, RequestLimits, RetrievalOptions, TenantLimits, TenantTable, UpstreamConfig, WebSocketLimits,
};
use respgw_supervisor::{ExaServer, McpSetup};
use respgw_telemetry::tracing_otlp::{TracingConfig, parse_collector_host, parse_sample_ratio};
use respgw_tools::code_interpreter::{self as sandbox, SandboxSettings};
use respgw_tools::input_files::InputFileSettings;
use respgw_tools::mcp::{RemoteMcp, RemoteMcpSettings};
use respgw_tools::web_search::{FetchSettings, Profile, WebSearchSettings};

use super::values::{at_least_one, hours_up_to_ten_years, positive_seconds, profile, seconds_up_to_a_day};

/// Gateway settings shared by both modes.
#[derive(Args)]
pub struct GatewayArgs {
    /// Longest upstream silence, in seconds, before a call fails with `upstream_timeout`
    /// (waiting for the first byte, or between two chunks).
    #[arg(long, env = "GW_UPSTREAM_TIMEOUT", default_value_t = 600.0, value_parser = positive_seconds, help_heading = "Gateway")]
    upstream_timeout: f64,

    /// Idle keep-alive connections to the model server each worker keeps for reuse; one that
    /// falls idle beyond these is closed.
    #[arg(long, env = "GW_UPSTREAM_MAX_IDLE_CONNECTIONS", default_value_t = DEFAULT_MAX_IDLE_CONNECTIONS, help_heading = "Gateway")]
    upstream_max_idle_connections: usize,

    /// Seconds a stopping worker waits for in-flight requests and streams.
    #[arg(long, env = "GW_DRAIN_TIMEOUT", default_value_t = 30.0, value_parser = positive_seconds, help_heading = "Gateway")]
    drain_timeout: f64,

    /// File of keys sealing `reasoning.encrypted_content` and compaction items: lines
    /// `<id>:<base64 32 bytes>`, the first seals, all open (rotation). Else --reasoning-keys; else
    /// a random key for this run only.
    #[arg(long, env = "GW_REASONING_KEYS_FILE", value_name = "PATH", help_heading = "Gateway")]
    reasoning_keys_file: Option<PathBuf>,

    /// The keys sealing `reasoning.encrypted_content` and compaction items themselves, comma-separated
    /// `<id>:<base64 32 bytes>` entries (used without --reasoning-keys-file). A secret: set it in
    /// the environment.
    #[arg(long, env = "GW_REASONING_KEYS", value_name = "ENTRIES", hide_env_values = true, help_heading = "Gateway")]
    reasoning_keys: Option<String>,

    /// An API key clients must present as `Authorization: Bearer <key>` (or `x-api-key: <key>`),
    /// of the tenant `default`. Repeatable; the environment form is comma-separated. No key here
    /// nor in --api-keys-file: authentication is off (everything belongs to `default`).
    #[arg(
        long = "api-key",
        env = "GW_API_KEYS",
        value_name = "KEY",
        value_delimiter = ',',
        hide_env_values = true,
        help_heading = "Clients and limits"
    )]
    api_keys: Vec<String>,

    /// Tenants and the SHA-256 hashes of their keys (TOML, or JSON for a `.json` name; see
    /// docs/tenants.md). Read again on SIGHUP; an invalid file then keeps the keys in use.
    #[arg(long, env = "GW_API_KEYS_FILE", value_name = "PATH", help_heading = "Clients and limits")]
    api_keys_file: Option<PathBuf>,

    /// Requests per minute per tenant, for the whole gateway (with --redis-url, for every gateway on
    /// that Redis), for tenants whose entry sets none (0: no limit); beyond it, 429
    /// `rate_limit_exceeded` with `Retry-After`.
    #[arg(long, env = "GW_TENANT_REQUESTS_PER_MINUTE", default_value_t = 0, help_heading = "Clients and limits")]
    tenant_requests_per_minute: u32,

    /// Streaming responses (SSE or WebSocket) open at once per tenant, for the whole gateway (with
    /// --redis-url, for every gateway on that Redis), for tenants whose entry sets none (0: no
    /// limit); beyond it, 429 `rate_limit_exceeded`.
    #[arg(long, env = "GW_TENANT_MAX_OPEN_STREAMS", default_value_t = 0, help_heading = "Clients and limits")]
    tenant_max_open_streams: u32,

    /// WebSockets open at once per tenant and gateway, idle or busy, for tenants whose entry sets
    /// none (0: no limit); an upgrade beyond it gets 429 `rate_limit_exceeded`.
    #[arg(long, env = "GW_TENANT_MAX_WEBSOCKETS", default_value_t = 0, help_heading = "Clients and limits")]
    tenant_max_websockets: u32,

    /// Input + output tokens per minute per tenant (as the upstream's `usage` reports them,
    /// charged after each upstream call), for tenants whose entry sets none (0: no limit); once
    /// spent, requests get 429 `rate_limit_exceeded` until the minute ends.
    #[arg(long, env = "GW_TENANT_TOKENS_PER_MINUTE", default_value_t = 0, help_heading = "Clients and limits")]
    tenant_tokens_per_minute: u32,

    /// Input + output tokens per day (UTC) per tenant, for tenants whose entry sets none (0: no
    /// limit); once spent, requests get 429 `rate_limit_exceeded` until the day ends.
    #[arg(long, env = "GW_TENANT_TOKENS_PER_DAY", default_value_t = 0, help_heading = "Clients and limits")]
    tenant_tokens_per_day: u32,

    /// Redis URL (`redis://host:6379/0`) where tenant limits are counted, so that every gateway
    /// using it counts together; unset: each gateway counts its own (exactly, across its workers).
    #[arg(long, env = "GW_REDIS_URL", value_name = "URL", hide_env_values = true, help_heading = "Clients and limits")]
    redis_url: Option<String>,

    /// While the --redis-url Redis cannot be reached: `open` serves, counting in this gateway alone
    /// (logged, and `gw_responses_limits_redis_up` drops to 0); `closed` answers 503.
    #[arg(long, env = "GW_REDIS_FAILURE_MODE", value_enum, default_value_t = RedisFailure::Open, help_heading = "Clients and limits")]
    redis_failure_mode: RedisFailure,

    /// Largest request body accepted, in MiB (images arrive inline as data URLs); larger: 413.
    #[arg(long, env = "GW_MAX_BODY_MB", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Clients and limits")]
    max_body_mb: u32,

    /// Most items in one request's `input` (inherited history not counted).
    #[arg(long, env = "GW_MAX_INPUT_ITEMS", default_value_t = 2048, value_parser = at_least_one, help_heading = "Clients and limits")]
    max_input_items: usize,

    /// Most entries in one request's `tools`.
    #[arg(long, env = "GW_MAX_TOOLS", default_value_t = 128, value_parser = at_least_one, help_heading = "Clients and limits")]
    max_tools: usize,

    /// Most `mcp` entries in one request's `tools`.
    #[arg(long, env = "GW_MAX_MCP_SERVERS", default_value_t = 16, value_parser = at_least_one, help_heading = "Clients and limits")]
    max_mcp_servers: usize,

    /// Rounds of gateway tool calls per response; then the model must answer (`tool_choice: none`).
    #[arg(long, env = "GW_MAX_TOOL_ROUNDS", default_value_t = 15, value_parser = at_least_one, help_heading = "Clients and limits")]
    max_tool_rounds: usize,

    /// Longest gateway tool result sent back to the model, in bytes; longer ones are cut and the
    /// model is told so.
    #[arg(long, env = "GW_MAX_TOOL_OUTPUT_BYTES", default_value_t = 65536, value_parser = at_least_one, help_heading = "Clients and limits")]
    max_tool_output_bytes: usize,

    /// Most items one conversation (`/v1/conversations`) may hold: adding items past it is a 400
    /// that writes nothing, and so is a response whose input would pass it (checked before the
    /// model runs; the response's output is saved whole, even past it).
    #[arg(long, env = "GW_MAX_CONVERSATION_ITEMS", default_value_t = 5000, value_parser = at_least_one, help_heading = "Clients and limits")]
    max_conversation_items: usize,

    /// Response store: a SQLite file path or sqlite:// URL (the embedded default), or a
    /// postgres:// URL (several hosts sharing one database).
    #[arg(long, env = "GW_DB_PATH", default_value = "respgw.db", hide_env_values = true, help_heading = "Store")]
    db_path: String,

    /// Database connections per worker process (PostgreSQL pool; SQLite reader connections).
    #[arg(long, env = "GW_DB_POOL_SIZE", default_value_t = respgw_store::DEFAULT_POOL_SIZE, value_parser = clap::value_parser!(u32).range(1..=1000), help_heading = "Store")]
    db_pool_size: u32,

    /// SQLite: MiB of disk kept in reserve next to the database file (`<db>-reserve`; the default
    /// is the WAL's largest size, so that a checkpoint of any WAL fits). When the disk fills up the
    /// reserve is released so that deletes and WAL checkpoints still run while new responses are
    /// refused (503); it is made again once the disk has room (0: no reserve).
    #[arg(long, env = "GW_DB_RESERVE_MB", default_value_t = respgw_store::sqlite::DEFAULT_RESERVE_BYTES >> 20, value_parser = clap::value_parser!(u64).range(0..=1 << 20), help_heading = "Store")]
    db_reserve_mb: u64,

    /// Serve Prometheus metrics (no authentication).
    #[arg(long, env = "GW_METRICS_ENABLED", default_value = "true", value_parser = BoolishValueParser::new(), action = ArgAction::Set, help_heading = "Observability")]
    metrics_enabled: bool,

    /// Path of the metrics endpoint.
    #[arg(long, env = "GW_METRICS_PATH", default_value = "/metrics", help_heading = "Observability")]
    metrics_path: String,

    /// Seconds between two samples of the console's overview (`GET /v1/console/overview`): the
    /// gateway's merged metrics are sampled this often into a ring covering the last hour.
    #[arg(long, env = "GW_CONSOLE_SAMPLE_SECONDS", default_value_t = respgw_server::DEFAULT_CONSOLE_SAMPLE_SECONDS, value_parser = clap::value_parser!(u64).range(1..=60), help_heading = "Observability")]
    console_sample_seconds: u64,

    // Groups of settings, each under its own heading (declared last: a group's heading carries
    // over to the arguments declared after it).
    #[command(flatten)]
    client: ClientLimitArgs,

    #[command(flatten)]
    builtin_mcp: BuiltinMcpArgs,

    #[command(flatten)]
    remote_mcp: RemoteMcpArgs,

    #[command(flatten)]
    code_interpreter: CodeInterpreterArgs,

    #[command(flatten)]
    web_search: WebSearchArgs,

    #[command(flatten)]
    input_files: InputFileArgs,

    #[command(flatten)]
    retrieval: RetrievalArgs,

    #[command(flatten)]
    tracing: TracingArgs,

    #[command(flatten)]
    background: BackgroundArgs,
}

impl GatewayArgs {
    /// The options of every worker and the Built-in MCP helper's setup, checked (a bad value
    /// stops the start with a message naming the setting). `upstream` carries the mode's own
    /// upstream settings; this adds the idle timeout. `port` is the public port (it names the
    /// default code interpreter directory); `helper_url` an MCP helper that runs on its own.
    pub fn resolve(
        self,
        upstream: UpstreamConfig,
        port: u16,
        helper_url: Option<String>,
    ) -> Result<(GatewayOptions, McpSetup), String> {
        let web_search = self.web_search.settings()?;
        let exa = web_search
            .as_ref()
            .filter(|s| s.profile == Profile::ExaMcp)
            .map(|s| ExaServer { url: s.exa_mcp_url.clone(), api_key: self.web_search.exa.exa_api_key.clone() });
        let mcp_timeouts = self.builtin_mcp.timeouts.timeouts();
        let mcp =
            McpSetup::from_args(self.builtin_mcp.mcp_config, self.builtin_mcp.mcp_port, helper_url, exa, mcp_timeouts);
        let input_files = self.input_files.settings();
        let retrieval = self.retrieval.options(&upstream);
        let tracing = self.tracing.config();
        tracing.check()?;
        let options = GatewayOptions {
            upstream: UpstreamConfig {
                idle_timeout: Duration::from_secs_f64(self.upstream_timeout),
                max_idle_connections: self.upstream_max_idle_connections,
                ..upstream
            },
            code_interpreter: self.code_interpreter.code_interpreter == CodeInterpreterMode::Spawn,
            code_interpreter_settings: self.code_interpreter.settings(&self.db_path, port)?,
            db_path: self.db_path,
            db_pool_size: self.db_pool_size,
            db_reserve_mb: self.db_reserve_mb,
            api_keys: self.api_keys,
            tenants: match &self.api_keys_file {
                Some(path) => TenantTable::load(path)?,
                None => TenantTable::default(),
            },
            api_keys_file: self.api_keys_file,
            tenant_limits: TenantLimits {
                requests_per_minute: Some(self.tenant_requests_per_minute).filter(|n| *n > 0),
                max_open_streams: Some(self.tenant_max_open_streams).filter(|n| *n > 0),
                max_websockets: Some(self.tenant_max_websockets).filter(|n| *n > 0),
                tokens_per_minute: Some(self.tenant_tokens_per_minute).filter(|n| *n > 0),
                tokens_per_day: Some(self.tenant_tokens_per_day).filter(|n| *n > 0),
            },
            redis: self.redis_url.filter(|url| !url.is_empty()).map(|url| RedisSettings {
                url,
                failure_mode: match self.redis_failure_mode {
                    RedisFailure::Open => RedisFailureMode::Open,
                    RedisFailure::Closed => RedisFailureMode::Closed,
                },
            }),
            max_body_bytes: (self.max_body_mb as usize).saturating_mul(1024 * 1024),
            limits: Limits {
                request: RequestLimits {
                    max_input_items: self.max_input_items,
                    max_tools: self.max_tools,
                    max_mcp_servers: self.max_mcp_servers,
                    max_input_file_bytes: input_files.max_bytes,
                },
                max_tool_rounds: self.max_tool_rounds,
                max_tool_output_bytes: self.max_tool_output_bytes,
                max_conversation_items: self.max_conversation_items,
            },
            metrics_path: metrics_path(self.metrics_enabled, self.metrics_path)?,
            console_sample_seconds: self.console_sample_seconds,
            forward_other_routes_to: None,
            drain_timeout: Duration::from_secs_f64(self.drain_timeout),
            client_limits: self.client.limits(),
            websocket: self.client.websocket(),
            messages_ping_interval: Duration::from_secs_f64(self.client.messages_ping_interval),
            mcp_helper_url: None,
            mcp_timeouts,
            remote_mcp: self.remote_mcp.settings()?,
            web_search,
            input_files,
            reasoning_keys: reasoning_keys(self.reasoning_keys_file, self.reasoning_keys)?,
            tracing,
            background: self.background.settings(),
            retrieval,
        };
        Ok((options, mcp))
    }
}

fn metrics_path(enabled: bool, path: String) -> Result<Option<String>, String> {
    if !enabled {
        return Ok(None);
    }
    if !path.starts_with('/') || path.len() < 2 {
        return Err(format!("the metrics path must start with '/' and name a route, got '{path}'"));
    }
    Ok(Some(path))
}

/// The keys of `reasoning.encrypted_content` and compaction items: from the keys file, else the
/// keys given directly, else one random key shared by this run's workers (sealed blobs then die
/// with the gateway).
fn reasoning_keys(file: Option<PathBuf>, keys: Option<String>) -> Result<ReasoningKeys, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read the reasoning keys file '{}': {e}", path.display()))?;
        return ReasoningKeys::parse(&text).map_err(|e| format!("reasoning keys file '{}': {e}", path.display()));
    }
    match keys {
        Some(text) if !text.trim().is_empty() => {
            ReasoningKeys::parse(&text).map_err(|e| format!("--reasoning-keys (GW_REASONING_KEYS): {e}"))
        }
        _ => ReasoningKeys::ephemeral(),
    }
}

/// Built-in MCP: the servers the gateway runs in its MCP helper.
#[derive(Args)]
#[command(next_help_heading = "Built-in MCP")]
struct BuiltinMcpArgs {
    /// Built-in MCP servers (`{"mcpServers": {...}}`): respgw starts one MCP helper for all
    /// workers. Without it, Built-in MCP is disabled.
    #[arg(long, env = "GW_MCP_CONFIG_PATH", value_name = "PATH")]
    mcp_config: Option<PathBuf>,

    /// Loopback port of the MCP helper (0: any free port).
    #[arg(long, env = "GW_MCP_PORT", default_value_t = 0, requires = "mcp_config")]
    mcp_port: u16,

    #[command(flatten)]
    timeouts: BuiltinMcpTimeoutArgs,
}

/// The Built-in MCP time limits, the same in the gateway and in `respgw mcp-helper`.
#[derive(Args)]
#[command(next_help_heading = "Built-in MCP")]
pub struct BuiltinMcpTimeoutArgs {
    /// Seconds one Built-in MCP server may take to start: spawn or connect, `initialize`, first
    /// `tools/list`.
    #[arg(long, env = "GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC", default_value_t = McpTimeouts::default().startup.as_secs_f64(), value_parser = seconds_up_to_a_day)]
    mcp_builtin_startup_timeout_sec: f64,

    /// Seconds one Built-in MCP tool call may take.
    #[arg(long, env = "GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC", default_value_t = McpTimeouts::default().tool_call.as_secs_f64(), value_parser = seconds_up_to_a_day)]
    mcp_builtin_tool_timeout_sec: f64,
}

impl BuiltinMcpTimeoutArgs {
    pub fn timeouts(&self) -> McpTimeouts {
        McpTimeouts {
            startup: Duration::from_secs_f64(self.mcp_builtin_startup_timeout_sec),
            tool_call: Duration::from_secs_f64(self.mcp_builtin_tool_timeout_sec),
        }
    }
}

/// Remote MCP: servers that requests declare by URL.
#[derive(Args)]
#[command(next_help_heading = "Remote MCP")]
struct RemoteMcpArgs {
    /// Let requests declare Remote MCP servers (`mcp` tools with a `server_url`).
    #[arg(long, env = "GW_MCP_REQUEST_REMOTE_ENABLED", default_value = "true", value_parser = BoolishValueParser::new(), action = ArgAction::Set)]
    mcp_request_remote_enabled: bool,

    /// Apply the URL rules (https only, no localhost or IP-literal hosts) and the address policy
    /// (no loopback, private or link-local addresses, also after redirects) to Remote MCP servers.
    #[arg(long, env = "GW_MCP_REQUEST_REMOTE_URL_CHECKS", default_value = "true", value_parser = BoolishValueParser::new(), action = ArgAction::Set)]
    mcp_request_remote_url_checks: bool,

    /// Seconds to open a Remote MCP session: connect, TLS, `initialize`, `tools/list`.
    #[arg(long, env = "GW_MCP_REQUEST_REMOTE_CONNECT_TIMEOUT_SEC", default_value_t = RemoteMcpSettings::default().connect_timeout.as_secs_f64(), value_parser = seconds_up_to_a_day)]
    mcp_request_remote_connect_timeout_sec: f64,

    /// Seconds one Remote MCP tool call may take.
    #[arg(long, env = "GW_MCP_REQUEST_REMOTE_TOOL_TIMEOUT_SEC", default_value_t = RemoteMcpSettings::default().tool_timeout.as_secs_f64(), value_parser = seconds_up_to_a_day)]
    mcp_request_remote_tool_timeout_sec: f64,

    /// PEM certificates trusted for Remote MCP servers besides the system's roots (a private CA).
    #[arg(long, env = "GW_MCP_REQUEST_REMOTE_CA_FILE", value_name = "PATH")]
    mcp_request_remote_ca_file: Option<PathBuf>,
}

impl RemoteMcpArgs {
    /// The settings, checked here — CA file included — so that a bad value stops the start with
    /// a clear message instead of failing every worker.
    fn settings(self) -> Result<RemoteMcpSettings, String> {
        let settings = RemoteMcpSettings {
            enabled: self.mcp_request_remote_enabled,
            url_checks: self.mcp_request_remote_url_checks,
            connect_timeout: Duration::from_secs_f64(self.mcp_request_remote_connect_timeout_sec),
            tool_timeout: Duration::from_secs_f64(self.mcp_request_remote_tool_timeout_sec),
            ca_file: self.mcp_request_remote_ca_file,
        };
        RemoteMcp::new(settings.clone())
            .map_err(|e| format!("--mcp-request-remote-ca-file (GW_MCP_REQUEST_REMOTE_CA_FILE): {e}"))?;
        Ok(settings)
    }
}

/// `--code-interpreter` values.
/// `--redis-failure-mode`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RedisFailure {
    Open,
    Closed,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CodeInterpreterMode {
    Spawn,
    Disabled,
}

/// The code interpreter: whether it runs, its directory and limits.
#[derive(Args)]
#[command(next_help_heading = "Code interpreter")]
struct CodeInterpreterArgs {
    /// Run model-written Python for the `code_interpreter` tool in a bubblewrap sandbox
    /// (`spawn`), or do not offer the tool (`disabled`). Without a working sandbox (see
    /// scripts/setup-code-interpreter) the tool is left out and the log says why.
    #[arg(long, env = "GW_CODE_INTERPRETER", value_enum, default_value_t = CodeInterpreterMode::Spawn)]
    code_interpreter: CodeInterpreterMode,

    /// The Python venv with numpy, pandas and matplotlib that scripts/setup-code-interpreter
    /// made. Default: `${XDG_CACHE_HOME:-~/.cache}/respgw/code-interpreter-venv`.
    #[arg(long, env = "GW_CODE_INTERPRETER_VENV", value_name = "DIR")]
    code_interpreter_venv: Option<PathBuf>,

    /// Directory of the code interpreter's containers, one per respgw instance (shared by its
    /// workers; made 0700; containers of a previous run are deleted at start, this run's at exit).
    /// Default: `<db-path>-containers` beside a SQLite store, else
    /// `${XDG_STATE_HOME:-~/.local/state}/respgw/containers-<port>`.
    #[arg(long, env = "GW_CODE_INTERPRETER_DIR", value_name = "DIR")]
    code_interpreter_dir: Option<PathBuf>,

    /// Wall-clock seconds one execution may run.
    #[arg(long, env = "GW_CODE_INTERPRETER_TIMEOUT_SEC", default_value_t = 30.0, value_parser = positive_seconds)]
    code_interpreter_timeout_sec: f64,

    /// Address space of one execution, in MiB.
    #[arg(long, env = "GW_CODE_INTERPRETER_MEMORY_MB", default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_memory_mb: u64,

    /// CPU seconds one execution may use.
    #[arg(long, env = "GW_CODE_INTERPRETER_CPU_SEC", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_cpu_sec: u64,

    /// Executions running at once per worker. Default: the number of CPUs.
    #[arg(long, env = "GW_CODE_INTERPRETER_MAX_CONCURRENCY", value_name = "N", value_parser = at_least_one)]
    code_interpreter_max_concurrency: Option<usize>,

    /// Executions waiting for a slot beyond those, per worker; more fail as busy.
    #[arg(long, env = "GW_CODE_INTERPRETER_MAX_QUEUED", default_value_t = 32, value_parser = at_least_one)]
    code_interpreter_max_queued: usize,

    /// Seconds a waiting execution waits for a slot before it fails as busy.
    #[arg(long, env = "GW_CODE_INTERPRETER_QUEUE_WAIT_SEC", default_value_t = sandbox::DEFAULT_QUEUE_WAIT_SEC as f64, value_parser = positive_seconds)]
    code_interpreter_queue_wait_sec: f64,

    /// Seconds an unused container is kept.
    #[arg(long, env = "GW_CODE_INTERPRETER_CONTAINER_IDLE_SEC", default_value_t = 1200, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_container_idle_sec: u64,

    /// Space one container's files may use, in MiB. A write past it fails with "no space left on
    /// device" in the sandbox. While code runs the files are in memory (tmpfs): each running
    /// execution may use this much RAM besides its address space.
    #[arg(long, env = "GW_CODE_INTERPRETER_DISK_MB", default_value_t = sandbox::DEFAULT_DISK_MB, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_disk_mb: u64,

    /// Space all containers of this instance may hold together, in MiB. An execution that does
    /// not fit evicts the least recently used idle containers; when none is idle it fails.
    #[arg(long, env = "GW_CODE_INTERPRETER_TOTAL_DISK_MB", default_value_t = sandbox::DEFAULT_TOTAL_DISK_MB, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_total_disk_mb: u64,

    /// Files, directories and links one container keeps between executions.
    #[arg(long, env = "GW_CODE_INTERPRETER_MAX_FILES", default_value_t = sandbox::DEFAULT_MAX_FILES, value_parser = clap::value_parser!(u64).range(1..=sandbox::MAX_FILES_LIMIT))]
    code_interpreter_max_files: u64,
}

impl CodeInterpreterArgs {
    /// The settings, with the directory defaulting to one of this instance (`db_path`, `port`).
    fn settings(&self, db_path: &str, port: u16) -> Result<SandboxSettings, String> {
        if self.code_interpreter_total_disk_mb < self.code_interpreter_disk_mb {
            return Err(format!(
                "--code-interpreter-total-disk-mb ({}) must be at least --code-interpreter-disk-mb ({})",
                self.code_interpreter_total_disk_mb, self.code_interpreter_disk_mb
            ));
        }
        let dir = match &self.code_interpreter_dir {
            Some(dir) => dir.clone(),
            None => default_code_interpreter_dir(db_path, port),
        };
        let venv = match self.code_interpreter_venv.as_ref().filter(|v| !v.as_os_str().is_empty()) {
            Some(venv) => venv.clone(),
            None => sandbox::default_venv(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")),
        };
        Ok(SandboxSettings {
            venv,
            // Absolute, so that every worker finds the same directory.
            dir: std::path::absolute(dir).map_err(|e| format!("cannot resolve the code interpreter directory: {e}"))?,
            timeout: Duration::from_secs_f64(self.code_interpreter_timeout_sec),
            memory_mb: self.code_interpreter_memory_mb,
            cpu_seconds: self.code_interpreter_cpu_sec,
            max_concurrency: self.code_interpreter_max_concurrency.unwrap_or_else(cpus),
            max_queued: self.code_interpreter_max_queued,
            queue_wait: Duration::from_secs_f64(self.code_interpreter_queue_wait_sec),
            container_idle: Duration::from_secs(self.code_interpreter_container_idle_sec),
            disk_mb: self.code_interpreter_disk_mb,
            total_disk_mb: self.code_interpreter_total_disk_mb,
            max_files: self.code_interpreter_max_files,
        })
    }
}

/// The containers' directory of an instance: beside its SQLite store (`respgw.db` →
/// `respgw.db-containers`, like SQLite's own `-wal` file), else under the user's state directory,
/// by port.
fn default_code_interpreter_dir(db_path: &str, port: u16) -> PathBuf {
    if !db_path.contains("://") || db_path.starts_with("sqlite://") {
        let file = db_path.strip_prefix("sqlite://").unwrap_or(db_path);
        let file = file.split('?').next().unwrap_or(file);
        if !file.is_empty() && file != ":memory:" {
            return PathBuf::from(format!("{file}-containers"));
        }
    }
    let state = match (std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()), std::env::var_os("HOME")) {
        (Some(dir), _) => PathBuf::from(dir),
        (None, Some(home)) => PathBuf::from(home).join(".local").join("state"),
        (None, None) => PathBuf::from("."),
    };
    state.join("respgw").join(format!("containers-{port}"))
}

fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// The `web_search` tool.
#[derive(Args)]
#[command(next_help_heading = "Web search")]
struct WebSearchArgs {
    /// Offer the `web_search` tool through this profile: duckduckgo_plus_fetch, exa_mcp, searxng,
    /// brave. Without it, web_search is not offered.
    #[arg(long, env = "GW_WEB_SEARCH_PROFILE", value_name = "NAME", value_parser = profile)]
    web_search_profile: Option<Profile>,

    /// DuckDuckGo's HTML search endpoint (profile duckduckgo_plus_fetch).
    #[arg(long, env = "GW_WEB_SEARCH_DUCKDUCKGO_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_DUCKDUCKGO_URL)]
    web_search_duckduckgo_url: String,

    /// Base URL of a SearXNG instance with the JSON format enabled (profile searxng).
    #[arg(long, env = "GW_WEB_SEARCH_SEARXNG_URL", value_name = "URL")]
    web_search_searxng_url: Option<String>,

    /// The Brave web search endpoint (profile brave).
    #[arg(long, env = "GW_WEB_SEARCH_BRAVE_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_BRAVE_URL)]
    web_search_brave_url: String,

    /// The Brave Search API subscription token (profile brave; required there). A secret: set it
    /// in the environment.
    #[arg(long, env = "BRAVE_API_KEY", value_name = "KEY", hide_env_values = true)]
    brave_api_key: Option<String>,

    /// Exa's MCP endpoint, served through the MCP helper as `exa` (profile exa_mcp).
    #[arg(long, env = "GW_WEB_SEARCH_EXA_MCP_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_EXA_MCP_URL)]
    web_search_exa_mcp_url: String,

    #[command(flatten)]
    exa: ExaApiKeyArgs,

    /// Let `open_page` fetch loopback, private and link-local addresses. Off by default: the model
    /// chooses the URLs, so the Remote MCP address rules apply, also after redirects.
    #[arg(long, env = "GW_WEB_SEARCH_ALLOW_PRIVATE_ADDRESSES", default_value = "false", value_parser = BoolishValueParser::new(), action = ArgAction::Set)]
    web_search_allow_private_addresses: bool,

    /// A host (name or address, no port) `open_page` may fetch despite the address rules, e.g. an
    /// intranet docs server. Repeatable; the environment form is comma-separated.
    #[arg(
        long = "web-search-fetch-exempt-host",
        env = "GW_WEB_SEARCH_FETCH_EXEMPT_HOSTS",
        value_name = "HOST",
        value_delimiter = ','
    )]
    web_search_fetch_exempt_hosts: Vec<String>,

    /// Seconds one `open_page` fetch may take (connect, redirects, body).
    #[arg(long, env = "GW_WEB_SEARCH_FETCH_TIMEOUT", default_value_t = 20.0, value_parser = positive_seconds)]
    web_search_fetch_timeout: f64,

    /// Largest page body `open_page` reads, in KiB; longer pages are cut.
    #[arg(long, env = "GW_WEB_SEARCH_FETCH_MAX_KB", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    web_search_fetch_max_kb: u32,
}

impl WebSearchArgs {
    /// The settings, checked (a profile's missing URL or key stops the start with a clear message).
    fn settings(&self) -> Result<Option<WebSearchSettings>, String> {
        let Some(profile) = self.web_search_profile else { return Ok(None) };
        let settings = WebSearchSettings {
            duckduckgo_url: self.web_search_duckduckgo_url.clone(),
            searxng_url: self.web_search_searxng_url.clone().filter(|u| !u.is_empty()),
            brave_url: self.web_search_brave_url.clone(),
            exa_mcp_url: self.web_search_exa_mcp_url.clone(),
            brave_api_key: self.brave_api_key.clone(),
            fetch: FetchSettings {
                timeout: Duration::from_secs_f64(self.web_search_fetch_timeout),
                max_bytes: self.web_search_fetch_max_kb as usize * 1024,
                allow_private_addresses: self.web_search_allow_private_addresses,
                exempt_hosts: non_blank(&self.web_search_fetch_exempt_hosts),
            },
            ..WebSearchSettings::new(profile)
        };
        settings.check()?;
        Ok(Some(settings))
    }
}

/// Exa's API key: for the gateway's `exa_mcp` profile, and for `respgw mcp-helper`, which adds it
/// to the Exa server's URL.
#[derive(Args)]
pub struct ExaApiKeyArgs {
    /// Exa's API key, added to the Exa MCP URL (profile exa_mcp; optional). A secret: set it in the
    /// environment.
    #[arg(long, env = "EXA_API_KEY", value_name = "KEY", hide_env_values = true)]
    pub exa_api_key: Option<String>,
}

/// `input_file` content parts.
#[derive(Args)]
#[command(next_help_heading = "Input files")]
struct InputFileArgs {
    /// Largest `input_file` accepted, in KiB: decoded `file_data`, or the body a `file_url`
    /// answered with. Larger: 400 naming the part.
    #[arg(long, env = "GW_INPUT_FILE_MAX_KB", default_value_t = 10240, value_parser = clap::value_parser!(u32).range(1..))]
    input_file_max_kb: u32,

    /// Most text the model gets from one input file (a text file's, or a PDF's extracted text),
    /// in KiB; longer text is cut and the model is told so.
    #[arg(long, env = "GW_INPUT_FILE_MAX_TEXT_KB", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    input_file_max_text_kb: u32,

    /// Pages of a PDF input file whose text is extracted; the model is told when pages were left out.
    #[arg(long, env = "GW_INPUT_FILE_MAX_PDF_PAGES", default_value_t = 100, value_parser = at_least_one)]
    input_file_max_pdf_pages: usize,

    /// Seconds one `file_url` fetch may take (connect, redirects, body).
    #[arg(long, env = "GW_INPUT_FILE_FETCH_TIMEOUT", default_value_t = 20.0, value_parser = positive_seconds)]
    input_file_fetch_timeout: f64,

    /// Let a `file_url` name loopback, private and link-local addresses. Off by default: the
    /// client chooses the URL, so the address rules of Remote MCP and open_page apply, also after
    /// redirects.
    #[arg(long, env = "GW_INPUT_FILE_ALLOW_PRIVATE_ADDRESSES", default_value = "false", value_parser = BoolishValueParser::new(), action = ArgAction::Set)]
    input_file_allow_private_addresses: bool,

    /// A host (name or address, no port) a `file_url` may name despite the address rules.
    /// Repeatable; the environment form is comma-separated.
    #[arg(
        long = "input-file-fetch-exempt-host",
        env = "GW_INPUT_FILE_FETCH_EXEMPT_HOSTS",
        value_name = "HOST",
        value_delimiter = ','
    )]
    input_file_fetch_exempt_hosts: Vec<String>,
}

impl InputFileArgs {
    fn settings(&self) -> InputFileSettings {
        InputFileSettings {
            max_bytes: self.input_file_max_kb as usize * 1024,
            max_text_bytes: self.input_file_max_text_kb as usize * 1024,
            max_pdf_pages: self.input_file_max_pdf_pages,
            fetch_timeout: Duration::from_secs_f64(self.input_file_fetch_timeout),
            allow_private_addresses: self.input_file_allow_private_addresses,
            exempt_hosts: non_blank(&self.input_file_fetch_exempt_hosts),
        }
    }
}

fn non_blank(hosts: &[String]) -> Vec<String> {
    hosts.iter().filter(|h| !h.trim().is_empty()).cloned().collect()
}

/// Files and vector stores: uploads, embeddings, ingestion and search.
#[derive(Args)]
#[command(next_help_heading = "Files and vector stores")]
struct RetrievalArgs {
    /// Largest upload to `POST /v1/files`, in bytes; larger: 413, nothing stored.
    #[arg(long, env = "GW_MAX_FILE_BYTES", default_value_t = DEFAULT_MAX_FILE_BYTES as u64, value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    max_file_bytes: u64,

    /// The embedding model of vector stores, served at `{--embedding-base-url}/embeddings`
    /// (OpenAI-compatible). Without it, search is lexical (BM25) only; with it, hybrid (vector and
    /// lexical, fused).
    #[arg(long, env = "GW_EMBEDDING_MODEL", value_name = "MODEL")]
    embedding_model: Option<String>,

    /// Base URL of the embedding endpoint, e.g. `http://127.0.0.1:8081/v1`; default: the model
    /// server's (the upstream's) base URL.
    #[arg(long, env = "GW_EMBEDDING_BASE_URL", value_name = "URL")]
    embedding_base_url: Option<String>,

    /// Bearer token of the embedding endpoint; default: the upstream's key. A secret: set it in
    /// the environment.
    #[arg(long, env = "GW_EMBEDDING_API_KEY", value_name = "KEY", hide_env_values = true)]
    embedding_api_key: Option<String>,

    /// Texts per `/embeddings` request while ingesting.
    #[arg(long, env = "GW_EMBEDDING_BATCH_SIZE", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=2048))]
    embedding_batch_size: u32,

    /// Tokens of one text sent to the embedding model, at most: longer chunks and queries are
    /// embedded by their beginning (the stored chunk and the lexical index keep all of it). For
    /// models that read fewer tokens than a chunk holds (e.g. 512). Default: whole texts.
    #[arg(long, env = "GW_EMBEDDING_MAX_INPUT_TOKENS", value_name = "TOKENS", value_parser = clap::value_parser!(u32).range(1..))]
    embedding_max_input_tokens: Option<u32>,

    /// Files each worker ingests at once (extracted, chunked, embedded and indexed in the
    /// background).
    #[arg(long, env = "GW_INGESTION_CONCURRENCY", default_value_t = 2, value_parser = at_least_one)]
    ingestion_concurrency: usize,

    /// MiB of vector-store embeddings each worker keeps in memory between searches (least
    /// recently used dropped first).
    #[arg(long, env = "GW_VECTOR_CACHE_MB", default_value_t = 256)]
    vector_cache_mb: u32,
}

impl RetrievalArgs {
    /// The options, the embedding endpoint defaulting to `upstream`'s base URL and key.
    fn options(&self, upstream: &UpstreamConfig) -> RetrievalOptions {
        RetrievalOptions {
            max_file_bytes: usize::try_from(self.max_file_bytes).unwrap_or(usize::MAX),
            embedding: self.embedding_model.as_ref().filter(|m| !m.trim().is_empty()).map(|model| EmbeddingOptions {
                model: model.clone(),
                base_url: self
                    .embedding_base_url
                    .clone()
                    .filter(|u| !u.trim().is_empty())
                    .unwrap_or_else(|| upstream.base_url.clone()),
                api_key: self.embedding_api_key.clone().filter(|k| !k.is_empty()).or_else(|| upstream.api_key.clone()),
                batch_size: self.embedding_batch_size as usize,
                max_input_tokens: self.embedding_max_input_tokens.map(|n| n as usize),
            }),
            ingestion_concurrency: self.ingestion_concurrency,
            vector_cache_bytes: (self.vector_cache_mb as usize).saturating_mul(1024 * 1024),
        }
    }
}

/// Limits on client connections, per worker.
#[derive(Args)]
#[command(next_help_heading = "Clients and limits")]
struct ClientLimitArgs {
    /// Seconds a client has to send a complete request head (request line and headers), counted
    /// from the connection's start, or from the first byte of a later request on it. Silent
    /// connections and clients trickling their headers are closed after it.
    #[arg(long, env = "GW_CLIENT_HEADER_TIMEOUT", default_value_t = 10.0, value_parser = positive_seconds)]
    client_header_timeout: f64,

    /// Seconds a kept-alive client connection may wait for its next request (longer than the
    /// usual 60 s of load balancers and proxies in front, so that they close first).
    #[arg(long, env = "GW_CLIENT_IDLE_TIMEOUT", default_value_t = 75.0, value_parser = positive_seconds)]
    client_idle_timeout: f64,

    /// Longest pause, in seconds, while a request body is received; a stalled body is answered 408.
    #[arg(long, env = "GW_CLIENT_BODY_TIMEOUT", default_value_t = 30.0, value_parser = positive_seconds)]
    client_body_timeout: f64,

    /// Open client connections per worker, WebSocket connections included. At the cap a new
    /// connection closes the longest-idle one (or gets a 503 when all are busy). Lowered at start
    /// to what the worker's open-files limit can hold.
    #[arg(long, env = "GW_MAX_CLIENT_CONNECTIONS", default_value_t = 8192, value_parser = at_least_one)]
    max_client_connections: usize,

    /// Seconds a WebSocket with no response in flight stays open; then it is closed with code
    /// 1001. Such a WebSocket is idle for the connection cap too: it gives way to a new connection.
    #[arg(long, env = "GW_WEBSOCKET_IDLE_TIMEOUT", default_value_t = 300.0, value_parser = positive_seconds)]
    websocket_idle_timeout: f64,

    /// Seconds between two pings the gateway sends on an open WebSocket; a peer that has not
    /// answered one by the next is taken for gone and closed.
    #[arg(long, env = "GW_WEBSOCKET_PING_INTERVAL", default_value_t = 30.0, value_parser = positive_seconds)]
    websocket_ping_interval: f64,

    /// Seconds a Messages stream (`POST /v1/messages`) may go without an event before it sends a
    /// `ping` event, so that clients and proxies keep the connection while the model is silent.
    #[arg(long, env = "GW_MESSAGES_PING_INTERVAL", default_value_t = DEFAULT_MESSAGES_PING_INTERVAL.as_secs_f64(), value_parser = positive_seconds)]
    messages_ping_interval: f64,

    /// KiB of `store:false` conversation one WebSocket keeps to continue from (connection-local
    /// state); a larger one is not kept, and continuing it is `previous_response_not_found`.
    #[arg(long, env = "GW_WEBSOCKET_LOCAL_STATE_MAX_KB", default_value_t = 32768)]
    websocket_local_state_max_kb: u32,

    /// KiB of `store:false` conversations all the WebSockets of one worker keep; past it the
    /// oldest kept one is dropped, and continuing it is `previous_response_not_found`.
    #[arg(long, env = "GW_WEBSOCKET_LOCAL_STATE_WORKER_MAX_KB", default_value_t = 262144)]
    websocket_local_state_worker_max_kb: u32,
}

impl ClientLimitArgs {
    fn limits(&self) -> ClientLimits {
        ClientLimits {
            header_timeout: Duration::from_secs_f64(self.client_header_timeout),
            idle_timeout: Duration::from_secs_f64(self.client_idle_timeout),
            body_timeout: Duration::from_secs_f64(self.client_body_timeout),
            max_connections: self.max_client_connections,
        }
    }

    fn websocket(&self) -> WebSocketLimits {
        WebSocketLimits {
            idle_timeout: Duration::from_secs_f64(self.websocket_idle_timeout),
            ping_interval: Duration::from_secs_f64(self.websocket_ping_interval),
            local_state_per_connection: self.websocket_local_state_max_kb as usize * 1024,
            local_state_per_worker: self.websocket_local_state_worker_max_kb as usize * 1024,
        }
    }
}

/// OpenTelemetry span export (workers only).
#[derive(Args)]
#[command(next_help_heading = "Observability")]
struct TracingArgs {
    /// Export spans over OTLP/gRPC (needs the `otlp` cargo feature, on by default).
    #[arg(long, env = "GW_TRACING_ENABLED", default_value = "false", value_parser = BoolishValueParser::new(), action = ArgAction::Set)]
    tracing_enabled: bool,

    /// Share of new traces sampled, 0.0–1.0; a request arriving with a `traceparent` follows its
    /// sampled flag.
    #[arg(long, env = "GW_TRACING_SAMPLE_RATIO", value_name = "RATIO", default_value_t = TracingConfig::default().sample_ratio, value_parser = parse_sample_ratio)]
    tracing_sample_ratio: f64,

    /// Host of the OTLP/gRPC collector.
    #[arg(long, env = "GW_OPENTELEMETRY_HOST", value_name = "HOST", default_value_t = TracingConfig::default().collector_host, value_parser = parse_collector_host)]
    opentelemetry_host: String,

    /// Port of the OTLP/gRPC collector.
    #[arg(long, env = "GW_OPENTELEMETRY_PORT", value_name = "PORT", default_value_t = TracingConfig::default().collector_port, value_parser = clap::value_parser!(u16).range(1..))]
    opentelemetry_port: u16,

    /// `service.name` of the exported resource.
    #[arg(long, env = "GW_OTEL_SERVICE_NAME", value_name = "NAME", default_value_t = TracingConfig::default().service_name)]
    otel_service_name: String,
}

impl TracingArgs {
    fn config(&self) -> TracingConfig {
        TracingConfig {
            enabled: self.tracing_enabled,
            sample_ratio: self.tracing_sample_ratio,
            collector_host: self.opentelemetry_host.clone(),
            collector_port: self.opentelemetry_port,
            service_name: self.otel_service_name.clone(),
        }
    }
}

/// Background responses (`background: true`).
#[derive(Args)]
#[command(next_help_heading = "Background responses")]
struct BackgroundArgs {
    /// Background responses one worker runs at once; more are accepted and wait, `queued`.
    #[arg(long, env = "GW_BACKGROUND_MAX_RUNNING", default_value_t = 16, value_parser = at_least_one)]
    background_max_running: usize,

    /// Background responses that may wait `queued` at once in the whole gateway (every worker
    /// and host on the store); one more is refused with 429.
    #[arg(long, env = "GW_BACKGROUND_MAX_QUEUED", default_value_t = 1000, value_parser = at_least_one)]
    background_max_queued: usize,

    /// Background responses one tenant may have waiting `queued` at once in the whole gateway;
    /// one more is refused with 429.
    #[arg(long, env = "GW_BACKGROUND_MAX_QUEUED_PER_TENANT", default_value_t = 100, value_parser = at_least_one)]
    background_max_queued_per_tenant: usize,

    /// Seconds a background stream may go without an event before it sends an SSE comment
    /// (`: keep-alive`), so that clients and proxies keep the connection.
    #[arg(long, env = "GW_BACKGROUND_KEEP_ALIVE", default_value_t = 15.0, value_parser = seconds_up_to_a_day)]
    background_keep_alive: f64,

    /// Seconds a background response's lease holds; the worker running it renews it every third
    /// of that. A response whose worker (or host) died is failed by another worker within about
    /// 4/3 of this.
    #[arg(long, env = "GW_BACKGROUND_LEASE", default_value_t = 15.0, value_parser = seconds_up_to_a_day)]
    background_lease: f64,

    /// Milliseconds between looks at the store for what other processes changed (cancels, new
    /// events of a followed response) when it cannot notify (SQLite); PostgreSQL notifies, and
    /// is polled every third of the lease as a fallback.
    #[arg(long, env = "GW_BACKGROUND_POLL_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(5..=60_000))]
    background_poll_ms: u64,

    /// Hours the events of a finished background response are kept, so its stream can be
    /// resumed; the response itself stays.
    #[arg(long, env = "GW_BACKGROUND_RETENTION_HOURS", default_value_t = 24.0, value_parser = hours_up_to_ten_years)]
    background_retention_hours: f64,
}

impl BackgroundArgs {
    fn settings(&self) -> BackgroundSettings {
        BackgroundSettings {
            max_running: self.background_max_running,
            lease: Duration::from_secs_f64(self.background_lease),
            poll_interval: Duration::from_millis(self.background_poll_ms),
            retention: Duration::from_secs_f64(self.background_retention_hours * 3600.0),
            max_queued: self.background_max_queued as u64,
            max_queued_per_tenant: self.background_max_queued_per_tenant as u64,
            keep_alive: Duration::from_secs_f64(self.background_keep_alive),
        }
    }
}
