//! The command line as declared: one declaration per setting, in both modes.

use std::collections::BTreeSet;

use clap::{Arg, Args, CommandFactory, Parser};

use super::gateway::GatewayArgs;
use super::integrated::SHARED_PREFIX;
use super::{Cli, Command};

/// The settings only `integrated` has under the `--responses-` prefix.
const INTEGRATED_OWN_PREFIXED: [&str; 2] = ["responses-workers", "responses-model-ready-timeout"];

fn subcommand(name: &str) -> clap::Command {
    Cli::command().find_subcommand(name).cloned().unwrap_or_else(|| panic!("no `{name}` subcommand"))
}

fn by_id<'a>(command: &'a clap::Command, id: &str) -> &'a Arg {
    command.get_arguments().find(|a| a.get_id() == id).unwrap_or_else(|| panic!("no argument {id}"))
}

#[test]
fn the_command_line_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn integrated_takes_every_shared_setting_with_the_prefix_and_nothing_else() {
    let shared = GatewayArgs::augment_args(clap::Command::new("shared"));
    let (serve, integrated) = (subcommand("serve"), subcommand("integrated"));
    let mut expected: BTreeSet<String> = INTEGRATED_OWN_PREFIXED.iter().map(|s| s.to_string()).collect();
    for arg in shared.get_arguments() {
        let long = arg.get_long().expect("every shared setting has a flag");
        let (in_serve, in_integrated) =
            (by_id(&serve, arg.get_id().as_str()), by_id(&integrated, arg.get_id().as_str()));
        assert_eq!(in_serve.get_long(), Some(long));
        assert_eq!(in_integrated.get_long(), Some(format!("{SHARED_PREFIX}{long}").as_str()));
        for other in [in_serve, in_integrated] {
            assert_eq!(other.get_env(), arg.get_env(), "{long}");
            assert_eq!(other.get_default_values(), arg.get_default_values(), "{long}");
        }
        expected.insert(format!("{SHARED_PREFIX}{long}"));
    }
    let prefixed: BTreeSet<String> = integrated
        .get_arguments()
        .filter_map(Arg::get_long)
        .filter(|long| long.starts_with(SHARED_PREFIX))
        .map(str::to_owned)
        .collect();
    assert_eq!(prefixed, expected);
}

#[test]
fn every_flag_has_a_variable() {
    for name in ["serve", "integrated", "mcp-helper"] {
        for arg in subcommand(name).get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            // Set by the gateway that starts the helper; see its help.
            if long == "web-search-exa-mcp-url" && name == "mcp-helper" {
                continue;
            }
            assert!(arg.get_env().is_some(), "`{name} --{long}` has no environment variable");
        }
    }
}

#[test]
fn integrated_reads_the_prefixed_flags_into_the_shared_settings() {
    let cli = Cli::try_parse_from([
        "respgw",
        "integrated",
        "--port",
        "8123",
        "--responses-max-tools",
        "3",
        "--responses-tracing-sample-ratio",
        "0.5",
        "--responses-code-interpreter",
        "disabled",
        "--",
        "server",
        "--port",
        "{port}",
    ])
    .expect("valid command line");
    let Command::Integrated(args) = cli.command else { panic!("integrated") };
    let options = args.into_options().expect("valid settings");
    assert_eq!(options.port, 8123);
    assert_eq!(options.gateway.limits.request.max_tools, 3);
    assert_eq!(options.gateway.tracing.sample_ratio, 0.5);
    assert!(!options.gateway.code_interpreter);
    assert_eq!(options.model_command, ["server", "--port", "{port}"]);
}

#[test]
fn serve_rejects_a_sample_ratio_outside_zero_to_one() {
    let parsed = Cli::try_parse_from(["respgw", "serve", "--upstream", "http://x/v1", "--tracing-sample-ratio", "1.5"]);
    let error = parsed.err().expect("rejected").to_string();
    assert!(error.contains("--tracing-sample-ratio") && error.contains("0.0 to 1.0"), "{error}");
}

#[test]
fn serve_resolves_remote_and_builtin_mcp_settings() {
    let cli = Cli::try_parse_from([
        "respgw",
        "serve",
        "--upstream",
        "http://127.0.0.1:9/v1",
        "--mcp-request-remote-enabled",
        "off",
        "--mcp-request-remote-tool-timeout-sec",
        "2.5",
        "--mcp-builtin-tool-timeout-sec",
        "7",
        "--code-interpreter",
        "disabled",
    ])
    .expect("valid command line");
    let Command::Serve(args) = cli.command else { panic!("serve") };
    let options = args.into_options().expect("valid settings");
    assert!(!options.gateway.remote_mcp.enabled);
    assert_eq!(options.gateway.remote_mcp.tool_timeout, std::time::Duration::from_millis(2500));
    assert_eq!(options.gateway.mcp_timeouts.tool_call, std::time::Duration::from_secs(7));
}
