//! `respgw integrated`'s arguments: its own (public address, the model server command) and the
//! shared [`GatewayArgs`] under the `--responses-` prefix — the same declarations as `serve`'s,
//! renamed when the command is built, so the two cannot drift apart.

use std::time::Duration;

use clap::{ArgMatches, Args, Command, FromArgMatches};
use respgw_server::{DEFAULT_MAX_IDLE_CONNECTIONS, UpstreamConfig};
use respgw_supervisor::integrated::IntegratedOptions;

use super::gateway::GatewayArgs;
use super::values::positive_seconds;

/// The prefix of the shared gateway flags in `integrated`, which shares its command line with the
/// model server's.
pub const SHARED_PREFIX: &str = "responses-";

/// Seconds allowed to connect to the model server (on loopback).
const MODEL_SERVER_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything `respgw integrated` takes.
pub struct IntegratedArgs {
    own: IntegratedOwnArgs,
    gateway: GatewayArgs,
}

/// The settings only `integrated` has.
#[derive(Args)]
struct IntegratedOwnArgs {
    /// Public address (the model server's usual host).
    #[arg(long, env = "GW_GATEWAY_HOST", default_value = "0.0.0.0")]
    host: String,

    /// Public port (the model server's usual port).
    #[arg(long, env = "GW_GATEWAY_PORT", default_value_t = 8000)]
    port: u16,

    /// Worker processes sharing the port.
    #[arg(long = "responses-workers", env = "GW_GATEWAY_WORKERS", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=512))]
    workers: u16,

    /// Seconds the model server may take to answer `GET /v1/models` (weights load slowly).
    #[arg(long = "responses-model-ready-timeout", env = "GW_UPSTREAM_READY_TIMEOUT", default_value_t = 1800.0, value_parser = positive_seconds)]
    model_ready_timeout: f64,

    /// The model server command; `{port}` is replaced by its private port.
    #[arg(last = true, required = true, value_name = "MODEL SERVER COMMAND")]
    model_command: Vec<String>,
}

/// `cmd` with the shared gateway arguments `add` gives it, under the `--responses-` prefix.
fn with_prefixed_shared_args(cmd: Command, add: fn(Command) -> Command) -> Command {
    let shared: Vec<clap::Id> = add(Command::new("shared")).get_arguments().map(|a| a.get_id().clone()).collect();
    add(cmd).mut_args(|arg| match arg.get_long().filter(|_| shared.contains(arg.get_id())) {
        Some(long) => {
            let long = format!("{SHARED_PREFIX}{long}");
            arg.long(long)
        }
        None => arg,
    })
}

impl Args for IntegratedArgs {
    fn augment_args(cmd: Command) -> Command {
        with_prefixed_shared_args(IntegratedOwnArgs::augment_args(cmd), GatewayArgs::augment_args)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        with_prefixed_shared_args(IntegratedOwnArgs::augment_args_for_update(cmd), GatewayArgs::augment_args_for_update)
    }
}

impl FromArgMatches for IntegratedArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(IntegratedArgs {
            own: IntegratedOwnArgs::from_arg_matches(matches)?,
            gateway: GatewayArgs::from_arg_matches(matches)?,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        self.own.update_from_arg_matches(matches)?;
        self.gateway.update_from_arg_matches(matches)
    }
}

impl IntegratedArgs {
    pub fn into_options(self) -> Result<IntegratedOptions, String> {
        let own = self.own;
        // The model server's address is filled in once its private port is known.
        let upstream = UpstreamConfig {
            base_url: String::new(),
            api_key: None,
            connect_timeout: MODEL_SERVER_CONNECT_TIMEOUT,
            idle_timeout: Duration::ZERO,
            max_idle_connections: DEFAULT_MAX_IDLE_CONNECTIONS,
        };
        let (gateway, mcp) = self.gateway.resolve(upstream, own.port, None)?;
        Ok(IntegratedOptions {
            host: own.host,
            port: own.port,
            workers: usize::from(own.workers),
            model_command: own.model_command,
            model_ready_timeout: Duration::from_secs_f64(own.model_ready_timeout),
            mcp,
            gateway,
        })
    }
}
