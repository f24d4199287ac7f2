//! `respgw`: the one binary. Parses the command line and hands off to the library crates.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use respgw_server::{ServeOptions, serve};

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
    /// Run the gateway in front of an upstream model server (standalone mode).
    Serve(ServeArgs),
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
}

fn positive_seconds(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("expected a positive number of seconds, got '{raw}'")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    // reqwest is built without a bundled TLS backend choice; use rustls with ring (faster to build).
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("respgw: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(args) => runtime.block_on(serve(ServeOptions {
            upstream: upstream_config(&args),
            host: args.gateway_host,
            port: args.gateway_port,
            db_path: args.db_path,
            api_keys: args.api_keys,
            max_body_bytes: args.max_body_mb.saturating_mul(1024 * 1024),
        })),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("respgw: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn upstream_config(args: &ServeArgs) -> respgw_server::UpstreamConfig {
    respgw_server::UpstreamConfig {
        base_url: args.upstream.clone(),
        api_key: args.upstream_api_key.clone().filter(|k| !k.is_empty()),
        connect_timeout: Duration::from_secs_f64(args.upstream_connect_timeout),
        idle_timeout: Duration::from_secs_f64(args.upstream_timeout),
    }
}
