//! The configuration surface: every `GW_*` variable the code names is a setting `--help` shows,
//! `integrated` has every shared setting of `serve` under the `--responses-` prefix, the
//! reference in docs/configuration.md is the one the binary renders, and renamed variables still
//! work.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Flags only `serve` has (its upstream, its socket, an external MCP helper).
const SERVE_ONLY: [&str; 9] = [
    "--upstream",
    "--upstream-api-key",
    "--upstream-connect-timeout",
    "--upstream-ready-timeout",
    "--upstream-ready-interval",
    "--gateway-host",
    "--gateway-port",
    "--gateway-workers",
    "--mcp-helper-url",
];
/// `integrated`'s own settings under the `--responses-` prefix.
const INTEGRATED_OWN: [&str; 2] = ["--responses-workers", "--responses-model-ready-timeout"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn respgw(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_respgw"));
    command.args(args).env("NO_COLOR", "1");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("respgw runs")
}

fn help(subcommand: &str) -> String {
    let output = respgw(&[subcommand, "--help"], &[]);
    assert!(output.status.success(), "{subcommand} --help: {output:?}");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

/// Each flag of a help text with the variable it names (`[env: NAME=…]`), if any.
fn flags(help: &str) -> BTreeMap<String, Option<String>> {
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in help.lines() {
        let trimmed = line.trim_start().trim_start_matches("-h, ");
        if trimmed.starts_with("--") && line.starts_with("  ") {
            let flag = trimmed.split([' ', '=']).next().unwrap_or(trimmed).to_owned();
            flags.insert(flag.clone(), None);
            current = Some(flag);
        }
        if let (Some(flag), Some(at)) = (&current, line.find("[env: ")) {
            let name = line[at + 6..].split(['=', ']']).next().unwrap_or_default().to_owned();
            flags.insert(flag.clone(), Some(name));
        }
    }
    flags
}

/// Every `GW_*` name in `text` (a name ending in `_`, as in `GW_MAX_*`, is a prefix).
fn gw_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("GW_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')).unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The Rust sources of the binary and the library crates, without tests.
fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("source directory").flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" && name != "target" {
                    walk(&path, out);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("src"), &mut files);
    walk(&root().join("crates"), &mut files);
    // The table of renamed variables names the old names on purpose.
    files.retain(|path| !path.ends_with("src/config/deprecated.rs"));
    files
}

#[test]
fn every_variable_the_code_names_is_in_help() {
    let helps = ["serve", "integrated", "mcp-helper"].map(help).join("\n");
    let documented: BTreeSet<String> = flags(&helps).into_values().flatten().collect();
    assert!(documented.contains("GW_TRACING_ENABLED"), "{documented:?}");
    let mut missing = Vec::new();
    for path in sources() {
        let text = std::fs::read_to_string(&path).expect("source reads");
        // Unit tests live at the end of a file, after `#[cfg(test)]`.
        let code = text.split("\n#[cfg(test)]").next().unwrap_or(&text);
        for name in gw_names(code) {
            let known = if name.ends_with('_') {
                documented.iter().any(|d| d.starts_with(&name))
            } else {
                documented.contains(&name)
            };
            if !known {
                missing.push(format!("{} names {name}", path.strip_prefix(root()).unwrap_or(&path).display()));
            }
        }
    }
    assert!(missing.is_empty(), "not a setting in any --help: {missing:#?}");
}

#[test]
fn every_setting_of_serve_has_a_variable_and_integrated_has_the_shared_ones_prefixed() {
    let serve = flags(&help("serve"));
    let integrated = flags(&help("integrated"));
    for (flag, env) in &serve {
        assert!(flag == "--help" || env.is_some(), "serve {flag} has no variable in --help");
    }
    let expected: BTreeMap<String, Option<String>> = serve
        .iter()
        .filter(|(flag, _)| *flag != "--help" && !SERVE_ONLY.contains(&flag.as_str()))
        .map(|(flag, env)| (format!("--responses-{}", &flag[2..]), env.clone()))
        .collect();
    let prefixed: BTreeMap<String, Option<String>> = integrated
        .into_iter()
        .filter(|(flag, _)| flag.starts_with("--responses-") && !INTEGRATED_OWN.contains(&flag.as_str()))
        .collect();
    assert_eq!(prefixed, expected);
}

#[test]
fn the_configuration_reference_is_current() {
    let output = respgw(&["config-reference"], &[]);
    assert!(output.status.success(), "{output:?}");
    let rendered = String::from_utf8(output.stdout).expect("UTF-8");
    let path = root().join("docs").join("configuration.md");
    if std::env::var("RESPGW_UPDATE_DOCS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().expect("docs directory")).expect("docs directory");
        std::fs::write(&path, &rendered).expect("docs/configuration.md written");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == rendered,
        "docs/configuration.md is not what `respgw config-reference` renders; \
         run `RESPGW_UPDATE_DOCS=1 cargo test --test e2e configuration::` and commit the result"
    );
    for name in flags(&help("serve")).into_values().flatten() {
        assert!(rendered.contains(&format!("`{name}`")), "{name} is missing from the reference");
    }
}

#[test]
fn a_renamed_variable_still_sets_its_setting_with_a_warning() {
    let output = respgw(
        &["serve", "--upstream", "http://127.0.0.1:9/v1"],
        &[("GW_MCP_HOSTED_TOOL_TIMEOUT_SEC", "0"), ("GW_CODE_INTERPRETER", "disabled")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("GW_MCP_HOSTED_TOOL_TIMEOUT_SEC is deprecated; use GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC"),
        "{stderr}"
    );
    assert!(stderr.contains("--mcp-builtin-tool-timeout-sec"), "{stderr}");
    assert!(stderr.contains("GW_MCP_BUILTIN_TOOL_TIMEOUT_SEC='0'"), "{stderr}");
}

#[test]
fn a_renamed_variable_is_warned_about_once_at_start_up() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let unreachable_store = dir.path().join("missing").join("respgw.db");
    let output = respgw(
        &[
            "serve",
            "--upstream",
            "http://127.0.0.1:9/v1",
            "--upstream-ready-timeout",
            "0",
            "--gateway-port",
            "0",
            "--db-path",
            unreachable_store.to_str().expect("UTF-8 path"),
        ],
        &[("GW_MCP_HOSTED_STARTUP_TIMEOUT_SEC", "5"), ("GW_CODE_INTERPRETER", "disabled")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let warning = "GW_MCP_HOSTED_STARTUP_TIMEOUT_SEC is deprecated; use GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
}

#[test]
fn a_bad_value_from_the_environment_names_its_variable() {
    let output =
        respgw(&["serve", "--upstream", "http://127.0.0.1:9/v1"], &[("GW_MCP_REQUEST_REMOTE_ENABLED", "maybe")]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("GW_MCP_REQUEST_REMOTE_ENABLED='maybe'"), "{stderr}");
}
