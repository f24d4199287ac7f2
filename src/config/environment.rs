//! The environment around the command line: the variables whose empty value means "unset", and
//! the note on a parse error that names the variable a bad value came from.

use std::ffi::OsString;

use clap::Command;
use clap::error::{ContextKind, ContextValue};

/// Variables where an empty (or blank) value means the default, as it always has for them.
/// Elsewhere an empty value is a value like any other.
const EMPTY_MEANS_UNSET: [&str; 12] = [
    "GW_TRACING_ENABLED",
    "GW_TRACING_SAMPLE_RATIO",
    "GW_OPENTELEMETRY_HOST",
    "GW_OPENTELEMETRY_PORT",
    "GW_OTEL_SERVICE_NAME",
    "GW_MCP_REQUEST_REMOTE_ENABLED",
    "GW_MCP_REQUEST_REMOTE_URL_CHECKS",
    "GW_MCP_REQUEST_REMOTE_CONNECT_TIMEOUT_SEC",
    "GW_MCP_REQUEST_REMOTE_TOOL_TIMEOUT_SEC",
    "GW_MCP_REQUEST_REMOTE_CA_FILE",
    "GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC",
    "GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC",
];

/// Removes the [`EMPTY_MEANS_UNSET`] variables that are blank.
///
/// # Safety
///
/// No other thread may exist: changing the environment races with any thread that reads it.
pub unsafe fn unset_blank_values() {
    for name in EMPTY_MEANS_UNSET {
        if std::env::var_os(name).is_some_and(|value| value.to_string_lossy().trim().is_empty()) {
            // SAFETY: this process has no other thread (the function's contract).
            unsafe { std::env::remove_var(name) };
        }
    }
}

/// Prints a command-line error as clap does, plus which environment variable the rejected value
/// came from when it did not come from `args`; returns the exit code.
pub fn report_parse_error(error: &clap::Error, cli: &Command, args: &[OsString]) -> i32 {
    let _ = error.print();
    if let Some(source) = value_source(error, cli, args) {
        eprintln!("note: {source}");
    }
    error.exit_code()
}

/// "the value comes from NAME='VALUE'" for a rejected value read from the environment.
fn value_source(error: &clap::Error, cli: &Command, args: &[OsString]) -> Option<String> {
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else { return None };
    let Some(ContextValue::String(value)) = error.get(ContextKind::InvalidValue) else { return None };
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let flag = format!("--{long}");
    let given = args.iter().filter_map(|a| a.to_str()).any(|a| a == flag || a.starts_with(&format!("{flag}=")));
    if given {
        return None;
    }
    let declared = cli.get_subcommands().flat_map(Command::get_arguments).find(|a| a.get_long() == Some(long))?;
    let name = declared.get_env()?.to_str()?;
    if std::env::var(name).ok()? != *value {
        return None;
    }
    Some(if declared.is_hide_env_values_set() {
        format!("the value comes from {name}")
    } else {
        format!("the value comes from {name}='{value}'")
    })
}
