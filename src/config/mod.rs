//! The command line of `respgw`: every setting declared once, as a clap argument with its flag,
//! its `GW_*` variable and its default (so `--help` lists it), and resolved once here into the
//! options the supervisor, the workers and the MCP helper take. Library crates never read a
//! setting from the environment.
//!
//! - [`gateway`]: the gateway settings both modes share; [`integrated`]: `integrated`'s own and the
//!   shared ones under the `--responses-` prefix.
//! - [`deprecated`]: old variable names still honoured; [`environment`]: blank values and the
//!   variable named in a parse error.
//! - [`reference`]: docs/configuration.md, rendered from these declarations.

mod deprecated;
mod environment;
mod gateway;
mod integrated;
mod reference;
#[cfg(test)]
mod tests;
mod values;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use respgw_mcp::McpConfig;
use respgw_mcp_helper::HelperSettings;
use respgw_server::{DEFAULT_MAX_IDLE_CONNECTIONS, UpstreamConfig};
use respgw_supervisor::standalone::StandaloneOptions;
use respgw_tools::web_search::{EXA_SERVER_LABEL, exa_server_entry};

pub use deprecated::apply_to_environment as apply_renamed_variables;
pub use environment::{report_parse_error, unset_blank_values};
use gateway::{BuiltinMcpTimeoutArgs, ExaApiKeyArgs, GatewayArgs};
pub use integrated::IntegratedArgs;
use values::{non_negative_seconds, positive_seconds};

#[derive(Parser)]
#[command(
    name = "respgw",
    version,
    about = "An OpenAI-Responses-style API in front of any OpenAI-compatible model server"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
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
    /// Print the hash of an API key for the keys file (`--api-keys-file`): the key is read from
    /// standard input (one line), or made up with --generate and printed first.
    HashKey(HashKeyArgs),
    /// A worker process; started by `serve` and `integrated`, not by hand.
    #[command(hide = true)]
    Worker,
    /// Print the configuration reference (docs/configuration.md) in Markdown.
    #[command(hide = true)]
    ConfigReference,
}

/// The configuration reference in Markdown.
pub fn reference() -> String {
    reference::render(&Cli::command())
}

/// `respgw hash-key`.
#[derive(Args)]
pub struct HashKeyArgs {
    /// Make a new random key (32 bytes, URL-safe base64 after `sk-gw-`), print it, then its hash.
    #[arg(long)]
    pub generate: bool,
}

/// `respgw serve`: its own settings and the shared gateway settings.
#[derive(Args)]
pub struct ServeArgs {
    /// Upstream API base, including its `/v1` prefix (e.g. http://127.0.0.1:8000/v1).
    #[arg(long, env = "GW_UPSTREAM", value_name = "URL")]
    upstream: String,

    /// Bearer token sent to the upstream model server. A secret: set it in the environment.
    #[arg(long, env = "GW_UPSTREAM_API_KEY", value_name = "KEY", hide_env_values = true)]
    upstream_api_key: Option<String>,

    /// Seconds allowed to connect to the upstream.
    #[arg(long, env = "GW_UPSTREAM_CONNECT_TIMEOUT", default_value_t = 10.0, value_parser = positive_seconds)]
    upstream_connect_timeout: f64,

    /// Seconds to wait for `GET {upstream}/models` to answer before serving (0: do not wait).
    #[arg(long, env = "GW_UPSTREAM_READY_TIMEOUT", default_value_t = 1800.0, value_parser = non_negative_seconds)]
    upstream_ready_timeout: f64,

    /// Seconds between progress lines while waiting for the upstream.
    #[arg(long, env = "GW_UPSTREAM_READY_INTERVAL", default_value_t = 5.0, value_parser = positive_seconds)]
    upstream_ready_interval: f64,

    /// Address to listen on.
    #[arg(long, env = "GW_GATEWAY_HOST", default_value = "0.0.0.0")]
    gateway_host: String,

    /// Port to listen on (0 picks a free port; the chosen address is printed on stdout).
    #[arg(long, env = "GW_GATEWAY_PORT", default_value_t = 5969)]
    gateway_port: u16,

    /// Worker processes sharing the port.
    #[arg(long, env = "GW_GATEWAY_WORKERS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=512))]
    gateway_workers: u16,

    /// Use an MCP helper that runs on its own (`respgw mcp-helper`) at this loopback URL.
    #[arg(
        long,
        env = "GW_MCP_BUILTIN_RUNTIME_URL",
        value_name = "URL",
        conflicts_with = "mcp_config",
        help_heading = "Built-in MCP"
    )]
    mcp_helper_url: Option<String>,

    #[command(flatten)]
    gateway: GatewayArgs,
}

impl ServeArgs {
    pub fn into_options(self) -> Result<StandaloneOptions, String> {
        let upstream = UpstreamConfig {
            base_url: self.upstream,
            api_key: self.upstream_api_key.filter(|k| !k.is_empty()),
            connect_timeout: Duration::from_secs_f64(self.upstream_connect_timeout),
            idle_timeout: Duration::ZERO,
            max_idle_connections: DEFAULT_MAX_IDLE_CONNECTIONS,
        };
        let (gateway, mcp) = self.gateway.resolve(upstream, self.gateway_port, self.mcp_helper_url)?;
        Ok(StandaloneOptions {
            host: self.gateway_host,
            port: self.gateway_port,
            workers: usize::from(self.gateway_workers),
            upstream_ready_timeout: Duration::from_secs_f64(self.upstream_ready_timeout),
            upstream_ready_interval: Duration::from_secs_f64(self.upstream_ready_interval),
            mcp,
            gateway,
        })
    }
}

/// `respgw mcp-helper`.
#[derive(Args)]
pub struct McpHelperArgs {
    /// The MCP servers, in the common `{"mcpServers": {...}}` JSON shape.
    #[arg(long, env = "GW_MCP_CONFIG_PATH", value_name = "PATH", required_unless_present = "web_search_exa_mcp_url")]
    config: Option<PathBuf>,

    /// Also serve Exa's MCP server at this URL under the label `exa` (the `exa_mcp` web search
    /// profile, whose gateway passes it; --exa-api-key is added to it when set).
    #[arg(long, value_name = "URL")]
    web_search_exa_mcp_url: Option<String>,

    #[command(flatten)]
    exa: ExaApiKeyArgs,

    /// Loopback address to serve the helper API on.
    #[arg(long, env = "GW_MCP_BUILTIN_LISTEN", default_value = "127.0.0.1:5981")]
    listen: SocketAddr,

    #[command(flatten)]
    timeouts: BuiltinMcpTimeoutArgs,
}

/// What `respgw mcp-helper` runs.
pub struct McpHelperOptions {
    pub config: McpConfig,
    pub listen: SocketAddr,
    pub settings: HelperSettings,
}

impl McpHelperArgs {
    /// The servers (the config file's, plus Exa's when asked) and the helper's settings.
    pub fn into_options(self) -> anyhow::Result<McpHelperOptions> {
        let mut config = match &self.config {
            Some(path) => McpConfig::load(path)?,
            None => McpConfig::default(),
        };
        if let Some(exa_url) = &self.web_search_exa_mcp_url {
            let entry = exa_server_entry(exa_url, self.exa.exa_api_key.as_deref()).map_err(anyhow::Error::msg)?;
            if config.servers.insert(EXA_SERVER_LABEL.to_owned(), entry).is_some() {
                config.warnings.push(format!(
                    "the MCP config's '{EXA_SERVER_LABEL}' server is replaced by the exa_mcp web search profile's"
                ));
            }
        }
        let settings = HelperSettings { timeouts: self.timeouts.timeouts(), ..HelperSettings::default() };
        Ok(McpHelperOptions { config, listen: self.listen, settings })
    }
}
