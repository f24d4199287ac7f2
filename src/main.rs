//! `respgw`: the one binary. Parses the command line and hands off to the library crates.

use std::process::ExitCode;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand};
use respgw_server::{GatewayOptions, UpstreamConfig};
use respgw_supervisor::McpSetup;
use respgw_supervisor::integrated::IntegratedOptions;
use respgw_supervisor::standalone::StandaloneOptions;
use respgw_telemetry::tracing_otlp::{self, TracingConfig};
use respgw_tools::mcp::{RemoteMcp, RemoteMcpSettings};

#[derive(Parser)]
#[command(
    name = "respgw",
    version,
    about = "An OpenAI-Responses-style API in front of any OpenAI-compatible model server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway in front of an upstream model server (standalone mode, default port 5969).
    Serve(ServeArgs),
    /// Own the model server's public port (default 8000): run the model server command given
    /// after `--` as a child on a private port (`{port}` in its arguments), serve the Responses
    /// routes, and forward everything else to it.
    Integrated(IntegratedArgs),
    /// The Built-in MCP helper: one MCP session per configured server, shared by all workers over
    /// a loopback HTTP API. `serve --mcp-config` starts it; run it yourself (e.g. as its own
    /// systemd unit) and point workers at it with `--mcp-helper-url`.
    McpHelper(McpHelperArgs),
    /// A worker process; started by `serve` and `integrated`, not by hand.
    #[command(hide = true)]
    Worker,
}

#[derive(Args)]
struct ServeArgs {
    /// Upstream API base, including its `/v1` prefix (e.g. http://127.0.0.1:8000/v1).
    #[arg(long, env = "GW_UPSTREAM", value_name = "URL")]
    upstream: String,

    /// Bearer token sent to the upstream model server.
    #[arg(long, env = "GW_UPSTREAM_API_KEY", value_name = "KEY", hide_env_values = true)]
    upstream_api_key: Option<String>,

    /// Address to listen on.
    #[arg(long, env = "GW_GATEWAY_HOST", default_value = "0.0.0.0")]
    gateway_host: String,

    /// Port to listen on (0 picks a free port; the chosen address is printed on stdout).
    #[arg(long, env = "GW_GATEWAY_PORT", default_value_t = 5969)]
    gateway_port: u16,

    /// Worker processes sharing the port.
    #[arg(long, env = "GW_GATEWAY_WORKERS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=512))]
    gateway_workers: u16,

    /// Seconds to wait for `GET {upstream}/models` to answer before serving (0: do not wait).
    #[arg(long, env = "GW_UPSTREAM_READY_TIMEOUT", default_value_t = 1800.0, value_parser = non_negative_seconds)]
    upstream_ready_timeout: f64,

    /// Seconds between progress lines while waiting for the upstream.
    #[arg(long, env = "GW_UPSTREAM_READY_INTERVAL", default_value_t = 5.0, value_parser = positive_seconds)]
    upstream_ready_interval: f64,

    #[command(flatten)]
    gateway: GatewayArgs,
}

#[derive(Args)]
struct McpHelperArgs {
    /// The MCP servers, in the common `{"mcpServers": {...}}` JSON shape.
    #[arg(long, env = "GW_MCP_CONFIG_PATH", value_name = "PATH")]
    config: std::path::PathBuf,

    /// Loopback address to serve the helper API on.
    #[arg(long, default_value = "127.0.0.1:5981")]
    listen: std::net::SocketAddr,
}

/// Gateway settings shared by both modes.
#[derive(Args)]
struct GatewayArgs {
    /// Built-in MCP servers (`{"mcpServers": {...}}`): respgw starts one MCP helper for all
    /// workers. Without it, Built-in MCP is disabled.
    #[arg(long, env = "GW_MCP_CONFIG_PATH", value_name = "PATH", conflicts_with = "mcp_helper_url")]
    mcp_config: Option<std::path::PathBuf>,

    /// Loopback port of the MCP helper (0: any free port).
    #[arg(long, env = "GW_MCP_PORT", default_value_t = 0, requires = "mcp_config")]
    mcp_port: u16,

    /// Use an MCP helper that runs on its own (`respgw mcp-helper`) at this loopback URL.
    #[arg(long, env = "GW_MCP_BUILTIN_RUNTIME_URL", value_name = "URL")]
    mcp_helper_url: Option<String>,

    /// Run model-written Python for the `code_interpreter` tool in a bubblewrap sandbox
    /// (`spawn`), or do not offer the tool (`disabled`). Without a working sandbox (see
    /// scripts/setup-code-interpreter) the tool is left out and the log says why.
    #[arg(long, env = "GW_CODE_INTERPRETER", value_enum, default_value_t = CodeInterpreterMode::Spawn)]
    code_interpreter: CodeInterpreterMode,

    /// An API key clients must present as `Authorization: Bearer <key>`. Repeatable; the
    /// environment form is comma-separated. No key: authentication is off.
    #[arg(long = "api-key", env = "GW_API_KEYS", value_name = "KEY", value_delimiter = ',', hide_env_values = true)]
    api_keys: Vec<String>,

    /// Response store: a SQLite file path or sqlite:// URL.
    #[arg(long, env = "GW_DB_PATH", default_value = "respgw.db")]
    db_path: String,

    /// Seconds allowed to connect to the upstream.
    #[arg(long, env = "GW_UPSTREAM_CONNECT_TIMEOUT", default_value_t = 10.0, value_parser = positive_seconds)]
    upstream_connect_timeout: f64,

    /// Longest upstream silence, in seconds, before a call fails with `upstream_timeout`
    /// (waiting for the first byte, or between two chunks).
    #[arg(long, env = "GW_UPSTREAM_TIMEOUT", default_value_t = 600.0, value_parser = positive_seconds)]
    upstream_timeout: f64,

    /// Largest request body accepted, in MiB (images arrive inline as data URLs).
    #[arg(long, env = "GW_MAX_BODY_MB", default_value_t = 64)]
    max_body_mb: usize,

    /// Seconds a stopping worker waits for in-flight requests and streams.
    #[arg(long, env = "GW_DRAIN_TIMEOUT", default_value_t = 30.0, value_parser = positive_seconds)]
    drain_timeout: f64,

    /// Serve Prometheus metrics (no authentication).
    #[arg(long, env = "GW_METRICS_ENABLED", default_value = "true", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    metrics_enabled: bool,

    /// Path of the metrics endpoint.
    #[arg(long, env = "GW_METRICS_PATH", default_value = "/metrics")]
    metrics_path: String,
}

/// `--code-interpreter` values.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CodeInterpreterMode {
    Spawn,
    Disabled,
}

#[derive(Args)]
struct IntegratedArgs {
    /// Built-in MCP servers (`{"mcpServers": {...}}`), served by one MCP helper for all workers.
    #[arg(long = "responses-mcp-config", env = "GW_MCP_CONFIG_PATH", value_name = "PATH")]
    mcp_config: Option<std::path::PathBuf>,

    /// Loopback port of the MCP helper (0: any free port).
    #[arg(long = "responses-mcp-port", env = "GW_MCP_PORT", default_value_t = 0, requires = "mcp_config")]
    mcp_port: u16,

    /// Run model-written Python for `code_interpreter` in a sandbox (`spawn`) or not (`disabled`).
    #[arg(long = "responses-code-interpreter", env = "GW_CODE_INTERPRETER", value_enum, default_value_t = CodeInterpreterMode::Spawn)]
    code_interpreter: CodeInterpreterMode,

    /// Public address (the model server's usual host).
    #[arg(long, default_value = "0.0.0.0")]
    host: String,

    /// Public port (the model server's usual port).
    #[arg(long, default_value_t = 8000)]
    port: u16,

    /// Worker processes sharing the port.
    #[arg(long = "responses-workers", env = "GW_GATEWAY_WORKERS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=512))]
    workers: u16,

    /// Seconds the model server may take to answer `GET /v1/models` (weights load slowly).
    #[arg(long = "responses-model-ready-timeout", default_value_t = 1800.0, value_parser = positive_seconds)]
    model_ready_timeout: f64,

    /// API keys for the public port (repeatable; `GW_API_KEYS` comma-separated).
    #[arg(
        long = "responses-api-key",
        env = "GW_API_KEYS",
        value_name = "KEY",
        value_delimiter = ',',
        hide_env_values = true
    )]
    api_keys: Vec<String>,

    /// Response store: a SQLite file path or sqlite:// URL.
    #[arg(long = "responses-db-path", env = "GW_DB_PATH", default_value = "respgw.db")]
    db_path: String,

    /// Longest model-server silence, in seconds, before a call fails with `upstream_timeout`.
    #[arg(long = "responses-upstream-timeout", env = "GW_UPSTREAM_TIMEOUT", default_value_t = 600.0, value_parser = positive_seconds)]
    upstream_timeout: f64,

    /// Largest request body accepted, in MiB.
    #[arg(long = "responses-max-body-mb", env = "GW_MAX_BODY_MB", default_value_t = 64)]
    max_body_mb: usize,

    /// Seconds a stopping worker waits for in-flight requests and streams.
    #[arg(long = "responses-drain-timeout", env = "GW_DRAIN_TIMEOUT", default_value_t = 30.0, value_parser = positive_seconds)]
    drain_timeout: f64,

    /// Serve Prometheus metrics (no authentication).
    #[arg(long = "responses-metrics-enabled", env = "GW_METRICS_ENABLED", default_value = "true", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    metrics_enabled: bool,

    /// Path of the metrics endpoint.
    #[arg(long = "responses-metrics-path", env = "GW_METRICS_PATH", default_value = "/metrics")]
    metrics_path: String,

    /// The model server command; `{port}` is replaced by its private port.
    #[arg(last = true, required = true, value_name = "MODEL SERVER COMMAND")]
    model_command: Vec<String>,
}

fn non_negative_seconds(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("expected a number of seconds (0 or more), got '{raw}'")),
    }
}

fn positive_seconds(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a positive number of seconds, got '{raw}'")),
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

/// Remote MCP settings (`GW_MCP_REQUEST_REMOTE_ENABLED`, `_URL_CHECKS`, `_CONNECT_TIMEOUT_SEC`,
/// `_TOOL_TIMEOUT_SEC`, `_CA_FILE`; environment only), checked here — CA file included — so that a
/// bad value stops the start with a clear message instead of failing every worker.
fn remote_mcp_settings() -> Result<RemoteMcpSettings, String> {
    let settings = RemoteMcpSettings::from_env()?;
    RemoteMcp::new(settings.clone())?;
    Ok(settings)
}

impl ServeArgs {
    fn into_options(self) -> Result<StandaloneOptions, String> {
        let g = self.gateway;
        Ok(StandaloneOptions {
            host: self.gateway_host,
            port: self.gateway_port,
            workers: usize::from(self.gateway_workers),
            upstream_ready_timeout: Duration::from_secs_f64(self.upstream_ready_timeout),
            upstream_ready_interval: Duration::from_secs_f64(self.upstream_ready_interval),
            mcp: McpSetup::from_args(g.mcp_config, g.mcp_port, g.mcp_helper_url),
            gateway: GatewayOptions {
                upstream: UpstreamConfig {
                    base_url: self.upstream,
                    api_key: self.upstream_api_key.filter(|k| !k.is_empty()),
                    connect_timeout: Duration::from_secs_f64(g.upstream_connect_timeout),
                    idle_timeout: Duration::from_secs_f64(g.upstream_timeout),
                },
                db_path: g.db_path,
                api_keys: g.api_keys,
                max_body_bytes: g.max_body_mb.saturating_mul(1024 * 1024),
                metrics_path: metrics_path(g.metrics_enabled, g.metrics_path)?,
                forward_other_routes_to: None,
                drain_timeout: Duration::from_secs_f64(g.drain_timeout),
                code_interpreter: g.code_interpreter == CodeInterpreterMode::Spawn,
                mcp_helper_url: None,
                remote_mcp: remote_mcp_settings()?,
            },
        })
    }
}

impl IntegratedArgs {
    fn into_options(self) -> Result<IntegratedOptions, String> {
        Ok(IntegratedOptions {
            host: self.host,
            port: self.port,
            workers: usize::from(self.workers),
            model_command: self.model_command,
            model_ready_timeout: Duration::from_secs_f64(self.model_ready_timeout),
            mcp: McpSetup::from_args(self.mcp_config, self.mcp_port, None),
            gateway: GatewayOptions {
                // Filled in once the model server's private port is known.
                upstream: UpstreamConfig {
                    base_url: String::new(),
                    api_key: None,
                    connect_timeout: Duration::from_secs(10),
                    idle_timeout: Duration::from_secs_f64(self.upstream_timeout),
                },
                db_path: self.db_path,
                api_keys: self.api_keys,
                max_body_bytes: self.max_body_mb.saturating_mul(1024 * 1024),
                metrics_path: metrics_path(self.metrics_enabled, self.metrics_path)?,
                forward_other_routes_to: None,
                code_interpreter: self.code_interpreter == CodeInterpreterMode::Spawn,
                mcp_helper_url: None,
                remote_mcp: remote_mcp_settings()?,
                drain_timeout: Duration::from_secs_f64(self.drain_timeout),
            },
        })
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Tracing settings come from `GW_TRACING_*`/`GW_OPENTELEMETRY_*`/`GW_OTEL_SERVICE_NAME`. Every
    // process validates them (a bad value stops `serve` here); only workers export spans — they
    // are re-exec'd with the supervisor's environment.
    let tracing_config = match TracingConfig::from_env() {
        Ok(config) => config,
        Err(message) => return usage_error(&message),
    };
    let exports_spans = matches!(cli.command, Command::Worker);
    let _tracing = match tracing_otlp::init_subscriber(&TracingConfig {
        enabled: tracing_config.enabled && exports_spans,
        ..tracing_config
    }) {
        Ok(guard) => guard,
        Err(message) => {
            eprintln!("respgw: {message}");
            return ExitCode::FAILURE;
        }
    };
    // reqwest is built without a bundled TLS backend choice; use rustls with ring (faster to build).
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    let result = match cli.command {
        Command::Serve(args) => match args.into_options() {
            Ok(options) => respgw_supervisor::standalone::run(options).map(|()| 0),
            Err(message) => return usage_error(&message),
        },
        Command::Integrated(args) => match args.into_options() {
            Ok(options) => respgw_supervisor::integrated::run(options),
            Err(message) => return usage_error(&message),
        },
        Command::McpHelper(args) => run_mcp_helper(args),
        Command::Worker => respgw_supervisor::worker::run().map(|()| 0),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("respgw: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_mcp_helper(args: McpHelperArgs) -> anyhow::Result<i32> {
    let config = respgw_tools::mcp::McpConfig::load(&args.config)?;
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let settings = respgw_mcp_helper::HelperSettings::from_env()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(respgw_mcp_helper::run(config, args.listen, settings))?;
    Ok(0)
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("respgw: {message}");
    ExitCode::from(2)
}
