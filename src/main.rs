//! `respgw`: the one binary. Reads the configuration ([`config`]) and hands off to the library
//! crates.

mod config;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use respgw_server::GatewayOptions;
use respgw_supervisor::integrated::IntegratedOptions;
use respgw_supervisor::standalone::StandaloneOptions;
use respgw_telemetry::tracing_otlp::{self, TracingConfig};

use config::{Cli, Command};

fn main() -> ExitCode {
    // Before anything reads the environment.
    // SAFETY: these are the first statements of `main`: the Rust runtime starts no thread before
    // it, and no crate in the tree registers a constructor that could, so this is the only thread.
    let renamed = unsafe { config::apply_renamed_variables() };
    // SAFETY: still the only thread: nothing since the call above starts one.
    unsafe { config::unset_blank_values() };
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let cli_command = Cli::command();
    let cli = match cli_command.clone().try_get_matches_from(&args).and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(cli) => cli,
        Err(error) => {
            for warning in &renamed {
                eprintln!("respgw: warning: {warning}");
            }
            let code = config::report_parse_error(&error, &cli_command, &args);
            return ExitCode::from(u8::try_from(code).unwrap_or(2));
        }
    };
    let job = match Job::of(cli.command) {
        Ok(job) => job,
        Err(code) => return code,
    };
    // Only workers export spans, with the settings the supervisor resolved; every other process
    // just logs.
    let tracing_config = match &job {
        Job::Worker(options) => options.tracing.clone(),
        _ => TracingConfig::default(),
    };
    let _tracing = match tracing_otlp::init_subscriber(&tracing_config) {
        Ok(guard) => guard,
        Err(message) => {
            eprintln!("respgw: {message}");
            return ExitCode::FAILURE;
        }
    };
    for warning in renamed {
        tracing::warn!("{warning}");
    }
    // reqwest is built without a bundled TLS backend choice; use rustls with ring (faster to build).
    if rustls::crypto::ring::default_provider().install_default().is_err() {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    let result = match job {
        Job::Serve(options) => respgw_supervisor::standalone::run(options).map(|()| 0),
        Job::Integrated(options) => respgw_supervisor::integrated::run(options),
        Job::McpHelper(options) => run_mcp_helper(options),
        Job::Worker(options) => respgw_supervisor::worker::run(options).map(|()| 0),
        Job::PrintReference => {
            print!("{}", config::reference());
            Ok(0)
        }
        Job::HashKey(args) => hash_key(&args),
    };
    match result {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("respgw: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// What this process runs, with its settings resolved.
enum Job {
    Serve(StandaloneOptions),
    Integrated(IntegratedOptions),
    McpHelper(config::McpHelperOptions),
    Worker(GatewayOptions),
    PrintReference,
    HashKey(config::HashKeyArgs),
}

impl Job {
    /// The job of `command`; a setting that does not work is a usage error (exit code 2).
    fn of(command: Command) -> Result<Job, ExitCode> {
        let failed = |e: anyhow::Error| {
            eprintln!("respgw: {e:#}");
            ExitCode::FAILURE
        };
        match command {
            Command::Serve(args) => args.into_options().map(Job::Serve).map_err(|m| usage_error(&m)),
            Command::Integrated(args) => args.into_options().map(Job::Integrated).map_err(|m| usage_error(&m)),
            Command::McpHelper(args) => args.into_options().map(Job::McpHelper).map_err(failed),
            Command::Worker => respgw_supervisor::worker::inherited_options().map(Job::Worker).map_err(failed),
            Command::ConfigReference => Ok(Job::PrintReference),
            Command::HashKey(args) => Ok(Job::HashKey(args)),
        }
    }
}

/// `respgw hash-key`: the keys-file line of a key read from standard input, or of a new one.
fn hash_key(args: &config::HashKeyArgs) -> anyhow::Result<i32> {
    let key = if args.generate {
        let mut bytes = [0u8; 32];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
            .map_err(|_| anyhow::anyhow!("the system's random number generator failed"))?;
        let key = format!("sk-gw-{}", base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, bytes));
        println!("{key}");
        key
    } else {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        let key = line.trim_end_matches(['\r', '\n']).to_owned();
        anyhow::ensure!(!key.is_empty(), "no key on standard input (or use --generate for a new one)");
        key
    };
    println!("\"{}\"", respgw_server::hash_key(&key));
    Ok(0)
}

fn run_mcp_helper(options: config::McpHelperOptions) -> anyhow::Result<i32> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(respgw_mcp_helper::run(options.config, options.listen, options.settings))?;
    Ok(0)
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("respgw: {message}");
    ExitCode::from(2)
}
