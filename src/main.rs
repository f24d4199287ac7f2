//! `respgw`: the one binary. Parses the command line and hands off to the library crates.

use std::process::ExitCode;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use clap::{Args, Parser, Subcommand};
use respgw_server::{GatewayOptions, Limits, ReasoningKeys, RequestLimits, UpstreamConfig};
use respgw_supervisor::McpSetup;
use respgw_supervisor::integrated::IntegratedOptions;
use respgw_supervisor::standalone::StandaloneOptions;
use respgw_telemetry::tracing_otlp::{self, TracingConfig};
use respgw_tools::code_interpreter::{self as sandbox, SandboxSettings};
use respgw_tools::input_files::InputFileSettings;
use respgw_tools::mcp::{RemoteMcp, RemoteMcpSettings};
use respgw_tools::web_search::{EXA_API_KEY_ENV, EXA_SERVER_LABEL, FetchSettings, Profile, WebSearchSettings};

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
    #[arg(long, env = "GW_MCP_CONFIG_PATH", value_name = "PATH", required_unless_present = "web_search_exa_mcp_url")]
    config: Option<std::path::PathBuf>,

    /// Also serve Exa's MCP server at this URL under the label `exa` (the `exa_mcp` web search
    /// profile; `EXA_API_KEY` is added to it when set).
    #[arg(long, value_name = "URL")]
    web_search_exa_mcp_url: Option<String>,

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

    #[command(flatten)]
    code_interpreter_limits: CodeInterpreterArgs,

    /// An API key clients must present as `Authorization: Bearer <key>`. Repeatable; the
    /// environment form is comma-separated. No key: authentication is off.
    #[arg(long = "api-key", env = "GW_API_KEYS", value_name = "KEY", value_delimiter = ',', hide_env_values = true)]
    api_keys: Vec<String>,

    /// Response store: a SQLite file path or sqlite:// URL (the embedded default), or a
    /// postgres:// URL (several hosts sharing one database).
    #[arg(long, env = "GW_DB_PATH", default_value = "respgw.db", hide_env_values = true)]
    db_path: String,

    /// Database connections per worker process (PostgreSQL pool; SQLite reader connections).
    #[arg(long, env = "GW_DB_POOL_SIZE", default_value_t = respgw_store::DEFAULT_POOL_SIZE, value_parser = clap::value_parser!(u32).range(1..=1000))]
    db_pool_size: u32,

    /// Seconds allowed to connect to the upstream.
    #[arg(long, env = "GW_UPSTREAM_CONNECT_TIMEOUT", default_value_t = 10.0, value_parser = positive_seconds)]
    upstream_connect_timeout: f64,

    /// Longest upstream silence, in seconds, before a call fails with `upstream_timeout`
    /// (waiting for the first byte, or between two chunks).
    #[arg(long, env = "GW_UPSTREAM_TIMEOUT", default_value_t = 600.0, value_parser = positive_seconds)]
    upstream_timeout: f64,

    /// Largest request body accepted, in MiB (images arrive inline as data URLs); larger: 413.
    #[arg(long, env = "GW_MAX_BODY_MB", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_body_mb: u32,

    /// Most items in one request's `input` (inherited history not counted).
    #[arg(long, env = "GW_MAX_INPUT_ITEMS", default_value_t = 2048, value_parser = at_least_one)]
    max_input_items: usize,

    /// Most entries in one request's `tools`.
    #[arg(long, env = "GW_MAX_TOOLS", default_value_t = 128, value_parser = at_least_one)]
    max_tools: usize,

    /// Most `mcp` entries in one request's `tools`.
    #[arg(long, env = "GW_MAX_MCP_SERVERS", default_value_t = 16, value_parser = at_least_one)]
    max_mcp_servers: usize,

    /// Rounds of gateway tool calls per response; then the model must answer (`tool_choice: none`).
    #[arg(long, env = "GW_MAX_TOOL_ROUNDS", default_value_t = 15, value_parser = at_least_one)]
    max_tool_rounds: usize,

    /// Longest gateway tool result sent back to the model, in bytes; longer ones are cut and the
    /// model is told so.
    #[arg(long, env = "GW_MAX_TOOL_OUTPUT_BYTES", default_value_t = 65536, value_parser = at_least_one)]
    max_tool_output_bytes: usize,

    /// Seconds a stopping worker waits for in-flight requests and streams.
    #[arg(long, env = "GW_DRAIN_TIMEOUT", default_value_t = 30.0, value_parser = positive_seconds)]
    drain_timeout: f64,

    /// File of keys sealing `reasoning.encrypted_content`: lines `<id>:<base64 32 bytes>`, the
    /// first seals, all open (rotation). Else `GW_REASONING_KEYS` (same entries, comma-separated);
    /// else a random key for this run only.
    #[arg(long, env = "GW_REASONING_KEYS_FILE", value_name = "PATH")]
    reasoning_keys_file: Option<std::path::PathBuf>,

    /// Serve Prometheus metrics (no authentication).
    #[arg(long, env = "GW_METRICS_ENABLED", default_value = "true", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    metrics_enabled: bool,

    /// Path of the metrics endpoint.
    #[arg(long, env = "GW_METRICS_PATH", default_value = "/metrics")]
    metrics_path: String,

    #[command(flatten)]
    web_search: WebSearchArgs,

    #[command(flatten)]
    input_files: InputFileArgs,
}

/// `input_file` settings of `serve`.
#[derive(Args)]
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
    #[arg(long, env = "GW_INPUT_FILE_ALLOW_PRIVATE_ADDRESSES", default_value = "false", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
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
    fn settings(self) -> InputFileSettings {
        InputFileSettings {
            max_bytes: self.input_file_max_kb as usize * 1024,
            max_text_bytes: self.input_file_max_text_kb as usize * 1024,
            max_pdf_pages: self.input_file_max_pdf_pages,
            fetch_timeout: Duration::from_secs_f64(self.input_file_fetch_timeout),
            allow_private_addresses: self.input_file_allow_private_addresses,
            exempt_hosts: self.input_file_fetch_exempt_hosts.into_iter().filter(|h| !h.trim().is_empty()).collect(),
        }
    }
}

/// `input_file` settings of `integrated`: the same as `serve`'s, with the `--responses-` prefix.
#[derive(Args)]
struct IntegratedInputFileArgs {
    /// Largest `input_file` accepted, in KiB (decoded `file_data` or a fetched `file_url`).
    #[arg(long = "responses-input-file-max-kb", env = "GW_INPUT_FILE_MAX_KB", default_value_t = 10240, value_parser = clap::value_parser!(u32).range(1..))]
    input_file_max_kb: u32,

    /// Most text the model gets from one input file, in KiB (longer: cut, model told).
    #[arg(long = "responses-input-file-max-text-kb", env = "GW_INPUT_FILE_MAX_TEXT_KB", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    input_file_max_text_kb: u32,

    /// Pages of a PDF input file whose text is extracted.
    #[arg(long = "responses-input-file-max-pdf-pages", env = "GW_INPUT_FILE_MAX_PDF_PAGES", default_value_t = 100, value_parser = at_least_one)]
    input_file_max_pdf_pages: usize,

    /// Seconds one `file_url` fetch may take.
    #[arg(long = "responses-input-file-fetch-timeout", env = "GW_INPUT_FILE_FETCH_TIMEOUT", default_value_t = 20.0, value_parser = positive_seconds)]
    input_file_fetch_timeout: f64,

    /// Let a `file_url` name loopback, private and link-local addresses.
    #[arg(long = "responses-input-file-allow-private-addresses", env = "GW_INPUT_FILE_ALLOW_PRIVATE_ADDRESSES", default_value = "false", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    input_file_allow_private_addresses: bool,

    /// A host a `file_url` may name despite the address rules (repeatable).
    #[arg(
        long = "responses-input-file-fetch-exempt-host",
        env = "GW_INPUT_FILE_FETCH_EXEMPT_HOSTS",
        value_name = "HOST",
        value_delimiter = ','
    )]
    input_file_fetch_exempt_hosts: Vec<String>,
}

impl IntegratedInputFileArgs {
    fn into_common(self) -> InputFileArgs {
        InputFileArgs {
            input_file_max_kb: self.input_file_max_kb,
            input_file_max_text_kb: self.input_file_max_text_kb,
            input_file_max_pdf_pages: self.input_file_max_pdf_pages,
            input_file_fetch_timeout: self.input_file_fetch_timeout,
            input_file_allow_private_addresses: self.input_file_allow_private_addresses,
            input_file_fetch_exempt_hosts: self.input_file_fetch_exempt_hosts,
        }
    }
}

/// `web_search` settings of `serve`.
#[derive(Args)]
struct WebSearchArgs {
    /// Offer the `web_search` tool through this profile: duckduckgo_plus_fetch, exa_mcp, searxng,
    /// brave. Without it, web_search is not offered.
    #[arg(long, env = "GW_WEB_SEARCH_PROFILE", value_name = "NAME", value_parser = parse_profile)]
    web_search_profile: Option<Profile>,

    /// DuckDuckGo's HTML search endpoint (profile duckduckgo_plus_fetch).
    #[arg(long, env = "GW_WEB_SEARCH_DUCKDUCKGO_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_DUCKDUCKGO_URL)]
    web_search_duckduckgo_url: String,

    /// Base URL of a SearXNG instance with the JSON format enabled (profile searxng).
    #[arg(long, env = "GW_WEB_SEARCH_SEARXNG_URL", value_name = "URL")]
    web_search_searxng_url: Option<String>,

    /// The Brave web search endpoint (profile brave; the key comes from BRAVE_API_KEY).
    #[arg(long, env = "GW_WEB_SEARCH_BRAVE_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_BRAVE_URL)]
    web_search_brave_url: String,

    /// Exa's MCP endpoint, served through the MCP helper as `exa` (profile exa_mcp; EXA_API_KEY optional).
    #[arg(long, env = "GW_WEB_SEARCH_EXA_MCP_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_EXA_MCP_URL)]
    web_search_exa_mcp_url: String,

    /// Let `open_page` fetch loopback, private and link-local addresses. Off by default: the model
    /// chooses the URLs, so the Remote MCP address rules apply, also after redirects.
    #[arg(long, env = "GW_WEB_SEARCH_ALLOW_PRIVATE_ADDRESSES", default_value = "false", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
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
    fn settings(self) -> Result<Option<WebSearchSettings>, String> {
        let Some(profile) = self.web_search_profile else { return Ok(None) };
        let settings = WebSearchSettings {
            duckduckgo_url: self.web_search_duckduckgo_url,
            searxng_url: self.web_search_searxng_url.filter(|u| !u.is_empty()),
            brave_url: self.web_search_brave_url,
            exa_mcp_url: self.web_search_exa_mcp_url,
            fetch: FetchSettings {
                timeout: Duration::from_secs_f64(self.web_search_fetch_timeout),
                max_bytes: self.web_search_fetch_max_kb as usize * 1024,
                allow_private_addresses: self.web_search_allow_private_addresses,
                exempt_hosts: self.web_search_fetch_exempt_hosts.into_iter().filter(|h| !h.trim().is_empty()).collect(),
            },
            ..WebSearchSettings::new(profile)
        };
        settings.check(|name| std::env::var(name).ok())?;
        Ok(Some(settings))
    }
}

/// `web_search` settings of `integrated`: the same as `serve`'s, with the `--responses-` prefix.
#[derive(Args)]
struct IntegratedWebSearchArgs {
    /// Offer `web_search` through this profile: duckduckgo_plus_fetch, exa_mcp, searxng, brave.
    #[arg(long = "responses-web-search-profile", env = "GW_WEB_SEARCH_PROFILE", value_name = "NAME", value_parser = parse_profile)]
    profile: Option<Profile>,

    /// DuckDuckGo's HTML search endpoint (profile duckduckgo_plus_fetch).
    #[arg(long = "responses-web-search-duckduckgo-url", env = "GW_WEB_SEARCH_DUCKDUCKGO_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_DUCKDUCKGO_URL)]
    duckduckgo_url: String,

    /// Base URL of a SearXNG instance (profile searxng).
    #[arg(long = "responses-web-search-searxng-url", env = "GW_WEB_SEARCH_SEARXNG_URL", value_name = "URL")]
    searxng_url: Option<String>,

    /// The Brave web search endpoint (profile brave; key in BRAVE_API_KEY).
    #[arg(long = "responses-web-search-brave-url", env = "GW_WEB_SEARCH_BRAVE_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_BRAVE_URL)]
    brave_url: String,

    /// Exa's MCP endpoint (profile exa_mcp; EXA_API_KEY optional).
    #[arg(long = "responses-web-search-exa-mcp-url", env = "GW_WEB_SEARCH_EXA_MCP_URL", value_name = "URL", default_value = respgw_tools::web_search::DEFAULT_EXA_MCP_URL)]
    exa_mcp_url: String,

    /// Let `open_page` fetch loopback, private and link-local addresses.
    #[arg(long = "responses-web-search-allow-private-addresses", env = "GW_WEB_SEARCH_ALLOW_PRIVATE_ADDRESSES", default_value = "false", value_parser = BoolishValueParser::new(), action = clap::ArgAction::Set)]
    allow_private_addresses: bool,

    /// A host `open_page` may fetch despite the address rules (repeatable).
    #[arg(
        long = "responses-web-search-fetch-exempt-host",
        env = "GW_WEB_SEARCH_FETCH_EXEMPT_HOSTS",
        value_name = "HOST",
        value_delimiter = ','
    )]
    fetch_exempt_hosts: Vec<String>,

    /// Seconds one `open_page` fetch may take.
    #[arg(long = "responses-web-search-fetch-timeout", env = "GW_WEB_SEARCH_FETCH_TIMEOUT", default_value_t = 20.0, value_parser = positive_seconds)]
    fetch_timeout: f64,

    /// Largest page body `open_page` reads, in KiB.
    #[arg(long = "responses-web-search-fetch-max-kb", env = "GW_WEB_SEARCH_FETCH_MAX_KB", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(1..))]
    fetch_max_kb: u32,
}

impl IntegratedWebSearchArgs {
    fn into_common(self) -> WebSearchArgs {
        WebSearchArgs {
            web_search_profile: self.profile,
            web_search_duckduckgo_url: self.duckduckgo_url,
            web_search_searxng_url: self.searxng_url,
            web_search_brave_url: self.brave_url,
            web_search_exa_mcp_url: self.exa_mcp_url,
            web_search_allow_private_addresses: self.allow_private_addresses,
            web_search_fetch_exempt_hosts: self.fetch_exempt_hosts,
            web_search_fetch_timeout: self.fetch_timeout,
            web_search_fetch_max_kb: self.fetch_max_kb,
        }
    }
}

/// The Exa endpoint the MCP helper must provision, when the profile is `exa_mcp`.
fn exa_url(settings: &Option<WebSearchSettings>) -> Option<String> {
    settings.as_ref().filter(|s| s.profile == Profile::ExaMcp).map(|s| s.exa_mcp_url.clone())
}

fn parse_profile(raw: &str) -> Result<Profile, String> {
    raw.parse()
}

/// The code interpreter's directory and limits (`serve`).
#[derive(Args)]
struct CodeInterpreterArgs {
    /// Directory of the code interpreter's containers, one per respgw instance (shared by its
    /// workers; made 0700; containers of a previous run are deleted at start, this run's at exit).
    /// Default: `<db-path>-containers` beside a SQLite store, else
    /// `${XDG_STATE_HOME:-~/.local/state}/respgw/containers-<port>`.
    #[arg(long, env = sandbox::ENV_DIR, value_name = "DIR")]
    code_interpreter_dir: Option<std::path::PathBuf>,

    /// Wall-clock seconds one execution may run.
    #[arg(long, env = sandbox::ENV_TIMEOUT_SEC, default_value_t = 30.0, value_parser = positive_seconds)]
    code_interpreter_timeout_sec: f64,

    /// Address space of one execution, in MiB.
    #[arg(long, env = sandbox::ENV_MEMORY_MB, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_memory_mb: u64,

    /// CPU seconds one execution may use.
    #[arg(long, env = sandbox::ENV_CPU_SEC, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_cpu_sec: u64,

    /// Executions running at once per worker (default: the number of CPUs).
    #[arg(long, env = sandbox::ENV_MAX_CONCURRENCY, default_value_t = cpus(), value_parser = at_least_one)]
    code_interpreter_max_concurrency: usize,

    /// Executions waiting for a slot beyond those, per worker; more fail as busy.
    #[arg(long, env = sandbox::ENV_MAX_QUEUED, default_value_t = 32, value_parser = at_least_one)]
    code_interpreter_max_queued: usize,

    /// Seconds a waiting execution waits for a slot before it fails as busy.
    #[arg(long, env = sandbox::ENV_QUEUE_WAIT_SEC, default_value_t = sandbox::DEFAULT_QUEUE_WAIT_SEC as f64, value_parser = positive_seconds)]
    code_interpreter_queue_wait_sec: f64,

    /// Seconds an unused container is kept.
    #[arg(long, env = sandbox::ENV_CONTAINER_IDLE_SEC, default_value_t = 1200, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_container_idle_sec: u64,

    /// Space one container's files may use, in MiB. A write past it fails with "no space left on
    /// device" in the sandbox. While code runs the files are in memory (tmpfs): each running
    /// execution may use this much RAM besides its address space.
    #[arg(long, env = sandbox::ENV_DISK_MB, default_value_t = sandbox::DEFAULT_DISK_MB, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_disk_mb: u64,

    /// Space all containers of this instance may hold together, in MiB. An execution that does
    /// not fit evicts the least recently used idle containers; when none is idle it fails.
    #[arg(long, env = sandbox::ENV_TOTAL_DISK_MB, default_value_t = sandbox::DEFAULT_TOTAL_DISK_MB, value_parser = clap::value_parser!(u64).range(1..))]
    code_interpreter_total_disk_mb: u64,

    /// Files, directories and links one container keeps between executions.
    #[arg(long, env = sandbox::ENV_MAX_FILES, default_value_t = sandbox::DEFAULT_MAX_FILES, value_parser = clap::value_parser!(u64).range(1..=sandbox::MAX_FILES_LIMIT))]
    code_interpreter_max_files: u64,
}

/// The code interpreter's directory and limits (`integrated`; see `serve --help`).
#[derive(Args)]
struct IntegratedCodeInterpreterArgs {
    /// Directory of the code interpreter's containers, one per respgw instance. Default:
    /// `<db-path>-containers` beside a SQLite store, else
    /// `${XDG_STATE_HOME:-~/.local/state}/respgw/containers-<port>`.
    #[arg(long = "responses-code-interpreter-dir", env = sandbox::ENV_DIR, value_name = "DIR")]
    dir: Option<std::path::PathBuf>,

    /// Wall-clock seconds one execution may run.
    #[arg(long = "responses-code-interpreter-timeout-sec", env = sandbox::ENV_TIMEOUT_SEC, default_value_t = 30.0, value_parser = positive_seconds)]
    timeout_sec: f64,

    /// Address space of one execution, in MiB.
    #[arg(long = "responses-code-interpreter-memory-mb", env = sandbox::ENV_MEMORY_MB, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    memory_mb: u64,

    /// CPU seconds one execution may use.
    #[arg(long = "responses-code-interpreter-cpu-sec", env = sandbox::ENV_CPU_SEC, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    cpu_sec: u64,

    /// Executions running at once per worker (default: the number of CPUs).
    #[arg(long = "responses-code-interpreter-max-concurrency", env = sandbox::ENV_MAX_CONCURRENCY, default_value_t = cpus(), value_parser = at_least_one)]
    max_concurrency: usize,

    /// Executions waiting for a slot beyond those, per worker; more fail as busy.
    #[arg(long = "responses-code-interpreter-max-queued", env = sandbox::ENV_MAX_QUEUED, default_value_t = 32, value_parser = at_least_one)]
    max_queued: usize,

    /// Seconds a waiting execution waits for a slot before it fails as busy.
    #[arg(long = "responses-code-interpreter-queue-wait-sec", env = sandbox::ENV_QUEUE_WAIT_SEC, default_value_t = sandbox::DEFAULT_QUEUE_WAIT_SEC as f64, value_parser = positive_seconds)]
    queue_wait_sec: f64,

    /// Seconds an unused container is kept.
    #[arg(long = "responses-code-interpreter-container-idle-sec", env = sandbox::ENV_CONTAINER_IDLE_SEC, default_value_t = 1200, value_parser = clap::value_parser!(u64).range(1..))]
    container_idle_sec: u64,

    /// Space one container's files may use, in MiB (in memory while code runs).
    #[arg(long = "responses-code-interpreter-disk-mb", env = sandbox::ENV_DISK_MB, default_value_t = sandbox::DEFAULT_DISK_MB, value_parser = clap::value_parser!(u64).range(1..))]
    disk_mb: u64,

    /// Space all containers of this instance may hold together, in MiB.
    #[arg(long = "responses-code-interpreter-total-disk-mb", env = sandbox::ENV_TOTAL_DISK_MB, default_value_t = sandbox::DEFAULT_TOTAL_DISK_MB, value_parser = clap::value_parser!(u64).range(1..))]
    total_disk_mb: u64,

    /// Files, directories and links one container keeps between executions.
    #[arg(long = "responses-code-interpreter-max-files", env = sandbox::ENV_MAX_FILES, default_value_t = sandbox::DEFAULT_MAX_FILES, value_parser = clap::value_parser!(u64).range(1..=sandbox::MAX_FILES_LIMIT))]
    max_files: u64,
}

impl IntegratedCodeInterpreterArgs {
    fn into_common(self) -> CodeInterpreterArgs {
        CodeInterpreterArgs {
            code_interpreter_dir: self.dir,
            code_interpreter_timeout_sec: self.timeout_sec,
            code_interpreter_memory_mb: self.memory_mb,
            code_interpreter_cpu_sec: self.cpu_sec,
            code_interpreter_max_concurrency: self.max_concurrency,
            code_interpreter_max_queued: self.max_queued,
            code_interpreter_queue_wait_sec: self.queue_wait_sec,
            code_interpreter_container_idle_sec: self.container_idle_sec,
            code_interpreter_disk_mb: self.disk_mb,
            code_interpreter_total_disk_mb: self.total_disk_mb,
            code_interpreter_max_files: self.max_files,
        }
    }
}

impl CodeInterpreterArgs {
    /// The settings, with the directory defaulting to one of this instance (`db_path`, `port`).
    fn settings(self, db_path: &str, port: u16) -> Result<SandboxSettings, String> {
        if self.code_interpreter_total_disk_mb < self.code_interpreter_disk_mb {
            return Err(format!(
                "--code-interpreter-total-disk-mb ({}) must be at least --code-interpreter-disk-mb ({})",
                self.code_interpreter_total_disk_mb, self.code_interpreter_disk_mb
            ));
        }
        Ok(SandboxSettings {
            // Absolute, so that every worker finds the same directory.
            dir: std::path::absolute(
                self.code_interpreter_dir.unwrap_or_else(|| default_code_interpreter_dir(db_path, port)),
            )
            .map_err(|e| format!("cannot resolve the code interpreter directory: {e}"))?,
            timeout: Duration::from_secs_f64(self.code_interpreter_timeout_sec),
            memory_mb: self.code_interpreter_memory_mb,
            cpu_seconds: self.code_interpreter_cpu_sec,
            max_concurrency: self.code_interpreter_max_concurrency,
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
fn default_code_interpreter_dir(db_path: &str, port: u16) -> std::path::PathBuf {
    if !db_path.contains("://") || db_path.starts_with("sqlite://") {
        let file = db_path.strip_prefix("sqlite://").unwrap_or(db_path);
        let file = file.split('?').next().unwrap_or(file);
        if !file.is_empty() && file != ":memory:" {
            return std::path::PathBuf::from(format!("{file}-containers"));
        }
    }
    let state = match (std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()), std::env::var_os("HOME")) {
        (Some(dir), _) => std::path::PathBuf::from(dir),
        (None, Some(home)) => std::path::PathBuf::from(home).join(".local").join("state"),
        (None, None) => std::path::PathBuf::from("."),
    };
    state.join("respgw").join(format!("containers-{port}"))
}

fn cpus() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
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

    #[command(flatten)]
    web_search: IntegratedWebSearchArgs,

    #[command(flatten)]
    input_files: IntegratedInputFileArgs,

    /// Run model-written Python for `code_interpreter` in a sandbox (`spawn`) or not (`disabled`).
    #[arg(long = "responses-code-interpreter", env = "GW_CODE_INTERPRETER", value_enum, default_value_t = CodeInterpreterMode::Spawn)]
    code_interpreter: CodeInterpreterMode,

    #[command(flatten)]
    code_interpreter_limits: IntegratedCodeInterpreterArgs,

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

    /// Response store: a SQLite file path or sqlite:// URL, or a postgres:// URL.
    #[arg(long = "responses-db-path", env = "GW_DB_PATH", default_value = "respgw.db", hide_env_values = true)]
    db_path: String,

    /// Database connections per worker process (PostgreSQL pool; SQLite reader connections).
    #[arg(long = "responses-db-pool-size", env = "GW_DB_POOL_SIZE", default_value_t = respgw_store::DEFAULT_POOL_SIZE, value_parser = clap::value_parser!(u32).range(1..=1000))]
    db_pool_size: u32,

    /// Longest model-server silence, in seconds, before a call fails with `upstream_timeout`.
    #[arg(long = "responses-upstream-timeout", env = "GW_UPSTREAM_TIMEOUT", default_value_t = 600.0, value_parser = positive_seconds)]
    upstream_timeout: f64,

    /// Largest request body accepted, in MiB; larger: 413.
    #[arg(long = "responses-max-body-mb", env = "GW_MAX_BODY_MB", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_body_mb: u32,

    /// Most items in one request's `input` (inherited history not counted).
    #[arg(long = "responses-max-input-items", env = "GW_MAX_INPUT_ITEMS", default_value_t = 2048, value_parser = at_least_one)]
    max_input_items: usize,

    /// Most entries in one request's `tools`.
    #[arg(long = "responses-max-tools", env = "GW_MAX_TOOLS", default_value_t = 128, value_parser = at_least_one)]
    max_tools: usize,

    /// Most `mcp` entries in one request's `tools`.
    #[arg(long = "responses-max-mcp-servers", env = "GW_MAX_MCP_SERVERS", default_value_t = 16, value_parser = at_least_one)]
    max_mcp_servers: usize,

    /// Rounds of gateway tool calls per response; then the model must answer.
    #[arg(long = "responses-max-tool-rounds", env = "GW_MAX_TOOL_ROUNDS", default_value_t = 15, value_parser = at_least_one)]
    max_tool_rounds: usize,

    /// Longest gateway tool result sent back to the model, in bytes (longer: cut, model told).
    #[arg(long = "responses-max-tool-output-bytes", env = "GW_MAX_TOOL_OUTPUT_BYTES", default_value_t = 65536, value_parser = at_least_one)]
    max_tool_output_bytes: usize,

    /// Seconds a stopping worker waits for in-flight requests and streams.
    #[arg(long = "responses-drain-timeout", env = "GW_DRAIN_TIMEOUT", default_value_t = 30.0, value_parser = positive_seconds)]
    drain_timeout: f64,

    /// File of keys sealing `reasoning.encrypted_content` (see `serve --help`).
    #[arg(long = "responses-reasoning-keys-file", env = "GW_REASONING_KEYS_FILE", value_name = "PATH")]
    reasoning_keys_file: Option<std::path::PathBuf>,

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

fn at_least_one(raw: &str) -> Result<usize, String> {
    match raw.parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("expected a whole number of at least 1, got '{raw}'")),
    }
}

/// The `--max-*` caps (and the input file size cap) as the engine takes them.
fn limits(
    input_items: usize,
    tools: usize,
    mcp_servers: usize,
    tool_rounds: usize,
    tool_output: usize,
    input_files: &InputFileSettings,
) -> Limits {
    Limits {
        request: RequestLimits {
            max_input_items: input_items,
            max_tools: tools,
            max_mcp_servers: mcp_servers,
            max_input_file_bytes: input_files.max_bytes,
        },
        max_tool_rounds: tool_rounds,
        max_tool_output_bytes: tool_output,
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
        let web_search = g.web_search.settings()?;
        let code_interpreter_settings = g.code_interpreter_limits.settings(&g.db_path, self.gateway_port)?;
        let input_files = g.input_files.settings();
        Ok(StandaloneOptions {
            host: self.gateway_host,
            port: self.gateway_port,
            workers: usize::from(self.gateway_workers),
            upstream_ready_timeout: Duration::from_secs_f64(self.upstream_ready_timeout),
            upstream_ready_interval: Duration::from_secs_f64(self.upstream_ready_interval),
            mcp: McpSetup::from_args(g.mcp_config, g.mcp_port, g.mcp_helper_url, exa_url(&web_search)),
            gateway: GatewayOptions {
                upstream: UpstreamConfig {
                    base_url: self.upstream,
                    api_key: self.upstream_api_key.filter(|k| !k.is_empty()),
                    connect_timeout: Duration::from_secs_f64(g.upstream_connect_timeout),
                    idle_timeout: Duration::from_secs_f64(g.upstream_timeout),
                },
                db_path: g.db_path,
                db_pool_size: g.db_pool_size,
                api_keys: g.api_keys,
                max_body_bytes: (g.max_body_mb as usize).saturating_mul(1024 * 1024),
                limits: limits(
                    g.max_input_items,
                    g.max_tools,
                    g.max_mcp_servers,
                    g.max_tool_rounds,
                    g.max_tool_output_bytes,
                    &input_files,
                ),
                metrics_path: metrics_path(g.metrics_enabled, g.metrics_path)?,
                forward_other_routes_to: None,
                drain_timeout: Duration::from_secs_f64(g.drain_timeout),
                code_interpreter: g.code_interpreter == CodeInterpreterMode::Spawn,
                code_interpreter_settings,
                mcp_helper_url: None,
                remote_mcp: remote_mcp_settings()?,
                web_search,
                input_files,
                reasoning_keys: reasoning_keys(g.reasoning_keys_file)?,
            },
        })
    }
}

/// The keys of `reasoning.encrypted_content`: from the keys file, else `GW_REASONING_KEYS`, else
/// one random key shared by this run's workers (sealed reasoning then dies with the gateway).
fn reasoning_keys(file: Option<std::path::PathBuf>) -> Result<ReasoningKeys, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read the reasoning keys file '{}': {e}", path.display()))?;
        return ReasoningKeys::parse(&text).map_err(|e| format!("reasoning keys file '{}': {e}", path.display()));
    }
    match std::env::var("GW_REASONING_KEYS") {
        Ok(text) if !text.trim().is_empty() => {
            ReasoningKeys::parse(&text).map_err(|e| format!("GW_REASONING_KEYS: {e}"))
        }
        _ => ReasoningKeys::ephemeral(),
    }
}

impl IntegratedArgs {
    fn into_options(self) -> Result<IntegratedOptions, String> {
        let web_search = self.web_search.into_common().settings()?;
        let code_interpreter_settings =
            self.code_interpreter_limits.into_common().settings(&self.db_path, self.port)?;
        let input_files = self.input_files.into_common().settings();
        Ok(IntegratedOptions {
            host: self.host,
            port: self.port,
            workers: usize::from(self.workers),
            model_command: self.model_command,
            model_ready_timeout: Duration::from_secs_f64(self.model_ready_timeout),
            mcp: McpSetup::from_args(self.mcp_config, self.mcp_port, None, exa_url(&web_search)),
            gateway: GatewayOptions {
                // Filled in once the model server's private port is known.
                upstream: UpstreamConfig {
                    base_url: String::new(),
                    api_key: None,
                    connect_timeout: Duration::from_secs(10),
                    idle_timeout: Duration::from_secs_f64(self.upstream_timeout),
                },
                db_path: self.db_path,
                db_pool_size: self.db_pool_size,
                api_keys: self.api_keys,
                max_body_bytes: (self.max_body_mb as usize).saturating_mul(1024 * 1024),
                limits: limits(
                    self.max_input_items,
                    self.max_tools,
                    self.max_mcp_servers,
                    self.max_tool_rounds,
                    self.max_tool_output_bytes,
                    &input_files,
                ),
                metrics_path: metrics_path(self.metrics_enabled, self.metrics_path)?,
                forward_other_routes_to: None,
                code_interpreter: self.code_interpreter == CodeInterpreterMode::Spawn,
                code_interpreter_settings,
                mcp_helper_url: None,
                remote_mcp: remote_mcp_settings()?,
                web_search,
                input_files,
                reasoning_keys: reasoning_keys(self.reasoning_keys_file)?,
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
    let mut config = match &args.config {
        Some(path) => respgw_mcp::McpConfig::load(path)?,
        None => respgw_mcp::McpConfig::default(),
    };
    if let Some(exa_url) = &args.web_search_exa_mcp_url {
        let key = std::env::var(EXA_API_KEY_ENV).ok();
        let entry = respgw_tools::web_search::exa_server_entry(exa_url, key.as_deref()).map_err(anyhow::Error::msg)?;
        if config.servers.insert(EXA_SERVER_LABEL.to_owned(), entry).is_some() {
            tracing::warn!(
                "the MCP config's '{EXA_SERVER_LABEL}' server is replaced by the exa_mcp web search profile's"
            );
        }
    }
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
