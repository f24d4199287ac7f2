//! `respgw config-reference`: the configuration reference (docs/configuration.md) in Markdown,
//! rendered from the command-line declarations so that it cannot drift from them.

use std::fmt::Write;

use clap::{Arg, Command};

use super::deprecated;
use super::integrated::SHARED_PREFIX;

/// The commands an operator configures, in the order the reference shows them.
const COMMANDS: [&str; 3] = ["serve", "integrated", "mcp-helper"];

/// The whole reference for `cli` (the `respgw` command).
pub fn render(cli: &Command) -> String {
    let mut out = intro();
    for name in COMMANDS {
        let Some(command) = cli.find_subcommand(name) else { continue };
        let about = command.get_about().map(|a| one_line(&a.to_string())).unwrap_or_default();
        let about = about.trim_end_matches('.');
        let _ = write!(
            out,
            "\n## `respgw {name}`\n\n{about}.\n\n| Flag | Environment variable | Default | Description |\n|---|---|---|---|\n"
        );
        for arg in command.get_arguments().filter(|a| !a.is_hide_set()) {
            let _ = writeln!(out, "| {} | {} | {} | {} |", flag(arg), env(arg), default(arg), description(arg));
        }
    }
    out
}

fn intro() -> String {
    let renamed: Vec<String> = deprecated::RENAMED.iter().map(|(old, new)| format!("`{old}` (now `{new}`)")).collect();
    format!(
        "# Configuration reference

<!-- Generated from the command-line declarations (src/config/) by `respgw config-reference`;
`RESPGW_UPDATE_DOCS=1 cargo test --test e2e configuration::` rewrites it. Do not edit by hand. -->

Every setting of respgw is a command-line flag, and nearly every one also an environment variable;
they are listed below by command with their defaults (`respgw <command> --help` shows the same). A
flag wins over its variable, and a variable over the default. Boolean settings take `true`/`false`
(also `1`/`0`, `yes`/`no`, `on`/`off`); a repeatable flag (`--api-key`, `--*-exempt-host`) is a
comma-separated list in its variable. `respgw integrated` takes the gateway settings of `serve`
with the `--{SHARED_PREFIX}` prefix (`--max-tools` is `--{SHARED_PREFIX}max-tools` there) and the same variables,
so that they cannot clash with the model server's own flags after `--`.

Secrets — the API keys (`GW_API_KEYS`, `GW_UPSTREAM_API_KEY`, `BRAVE_API_KEY`, `EXA_API_KEY`), the
reasoning keys (`GW_REASONING_KEYS`) and a database URL holding a password (`GW_DB_PATH`) — belong
in the environment (e.g. a systemd `EnvironmentFile=`): a command line is visible to every user of
the machine. `--help` never shows these variables' values.

The supervisor reads the settings once and hands them to its workers and its MCP helper. Read from
the environment directly are only `RUST_LOG` (the log filter, default `info`), `NO_COLOR` (no
colour codes in the log even on a terminal) and the standard `OTEL_BSP_*` variables of the span
exporter. Old names still honoured, with a warning at start-up:
{}.
",
        renamed.join(", ")
    )
}

fn flag(arg: &Arg) -> String {
    match arg.get_long() {
        Some(long) => format!("`--{long}`"),
        None => {
            let value = arg.get_value_names().and_then(|names| names.first()).map(|name| format!(" <{name}>"));
            format!("`--{}...`", value.unwrap_or_default())
        }
    }
}

fn env(arg: &Arg) -> String {
    arg.get_env().map(|name| format!("`{}`", name.to_string_lossy())).unwrap_or_default()
}

fn default(arg: &Arg) -> String {
    let values: Vec<String> = arg.get_default_values().iter().map(|v| format!("`{}`", v.to_string_lossy())).collect();
    values.join(", ")
}

fn description(arg: &Arg) -> String {
    let mut text = arg.get_help().map(|h| one_line(&h.to_string())).unwrap_or_default();
    if !text.is_empty() && !text.ends_with('.') {
        text.push('.');
    }
    let choices: Vec<String> =
        arg.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| format!("`{}`", v.get_name())).collect();
    if !choices.is_empty() {
        let _ = write!(text, " One of {}.", choices.join(", "));
    }
    text.replace('|', "\\|")
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
