//! The Built-in MCP config file (`--mcp-config mcp.json`): parsing and validation.
//!
//! The shape is the common MCP client one (Claude Desktop's), keyed by server label:
//!
//! ```json
//! {"mcpServers": {
//!   "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
//!             "env": {"DEBUG": "0"}, "cwd": "/srv"},
//!   "docs":  {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer …"}},
//!   "old":   {"url": "https://legacy.example.com/sse"}
//! }}
//! ```
//!
//! Rules (each violation is a [`ConfigError`] naming the entry and the problem, so a bad file stops the
//! gateway at start-up instead of leaving a server silently missing):
//! - the root is an object with an `mcpServers` object (other root keys are ignored: Claude Desktop
//!   configs carry unrelated settings); a label appearing twice is an error (JSON parsers would keep the
//!   last one silently);
//! - labels are non-empty, at most 64 characters of `[A-Za-z0-9_-]` (they end up in tool names the model
//!   sees, `mcp__<label>__<tool>`, and in metric labels);
//! - an entry has exactly one of `command` (a local process speaking MCP on stdio) and `url` (a remote
//!   server); `args`/`env`/`cwd` belong to `command` entries, `headers` to `url` entries;
//! - `url` is absolute `http://` or `https://` with a host; `env` and `headers` map strings to strings, and
//!   headers must be valid HTTP header names and values;
//! - `transport` (or Claude Code's `type`, same values) is optional: `stdio` for command entries;
//!   `streamable-http` (also `http`, `streamable_http`, `streamableHttp`) or `sse` for URL entries. Without
//!   it a URL entry speaks streamable HTTP, unless its path ends in `/sse`, the legacy HTTP+SSE
//!   convention.
//!
//! Unknown keys inside an entry are not errors (other MCP clients add their own, e.g. `disabled`,
//! `autoApprove`); they are reported in [`McpConfig::warnings`] so the helper can log them — a typo such
//! as `header` then shows up in the log instead of vanishing.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::wire::TransportKind;

/// Longest accepted server label.
pub const MAX_LABEL_LEN: usize = 64;

/// Default of [`McpTimeouts::startup`].
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`McpTimeouts::tool_call`].
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// A parsed, validated `mcp.json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct McpConfig {
    /// The servers, keyed (and so ordered) by label.
    pub servers: BTreeMap<String, ServerEntry>,
    /// Things worth logging that are not errors (unknown keys), one sentence each.
    pub warnings: Vec<String>,
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerEntry {
    /// A local process speaking MCP over its stdin/stdout.
    Stdio(StdioServer),
    /// A remote server reached over HTTP.
    Url(UrlServer),
}

/// A `command` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StdioServer {
    /// The program (looked up in `PATH` when it has no `/`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to the child's environment.
    pub env: BTreeMap<String, String>,
    /// Working directory of the child; the helper's own when absent.
    pub cwd: Option<PathBuf>,
}

/// A `url` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlServer {
    /// The MCP endpoint (streamable HTTP) or the SSE endpoint (legacy transport).
    pub url: reqwest::Url,
    /// Headers sent with every request (typically `Authorization`).
    pub headers: BTreeMap<String, String>,
    /// Which HTTP transport to speak.
    pub transport: UrlTransport,
}

/// The two HTTP transports of MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UrlTransport {
    /// The current one: JSON-RPC over POST, responses as JSON or an SSE stream.
    StreamableHttp,
    /// The legacy HTTP+SSE transport (protocol 2024-11-05): a GET event stream plus a POST endpoint.
    Sse,
}

impl ServerEntry {
    /// The transport as reported by the helper's API.
    pub fn transport(&self) -> TransportKind {
        match self {
            ServerEntry::Stdio(_) => TransportKind::Stdio,
            ServerEntry::Url(UrlServer { transport: UrlTransport::StreamableHttp, .. }) => {
                TransportKind::StreamableHttp
            }
            ServerEntry::Url(UrlServer { transport: UrlTransport::Sse, .. }) => TransportKind::Sse,
        }
    }

    /// Values that must never appear in an error text or a log line: header values (and the token of a
    /// `Bearer` value) and environment values. Longest first, so a secret containing another is replaced
    /// whole.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets: Vec<String> = match self {
            ServerEntry::Stdio(stdio) => stdio.env.values().cloned().collect(),
            ServerEntry::Url(url) => {
                let mut values = Vec::new();
                for value in url.headers.values() {
                    values.push(value.clone());
                    if let Some((scheme, token)) = value.split_once(' ')
                        && scheme.eq_ignore_ascii_case("bearer")
                    {
                        values.push(token.trim().to_owned());
                    }
                }
                // A token in the query string (`?apiKey=…`) is as secret as a header.
                for (_, value) in url.url.query_pairs() {
                    values.push(value.into_owned());
                }
                values
            }
        };
        // Very short values ("1", "on") are not secrets and would shred every message they occur in.
        secrets.retain(|s| s.len() >= 4);
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        secrets
    }
}

/// Why a config file was rejected. `Display` gives the whole sentence: file, entry, problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, when the config came from one.
    pub path: Option<PathBuf>,
    /// The server label the problem is in, when it is in one entry.
    pub entry: Option<String>,
    /// What is wrong, and where it helps, what would be right.
    pub problem: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid MCP config")?;
        if let Some(path) = &self.path {
            write!(f, " {}", path.display())?;
        }
        if let Some(entry) = &self.entry {
            write!(f, ": server {entry:?}")?;
        }
        write!(f, ": {}", self.problem)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    fn file(problem: impl Into<String>) -> Self {
        ConfigError { path: None, entry: None, problem: problem.into() }
    }

    fn entry(label: &str, problem: impl Into<String>) -> Self {
        ConfigError { path: None, entry: Some(label.to_owned()), problem: problem.into() }
    }
}

impl McpConfig {
    /// Reads and validates a config file; errors name the file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: Some(path.to_owned()),
            entry: None,
            problem: format!("cannot read the file: {e}"),
        })?;
        Self::from_json_str(&text).map_err(|mut e| {
            e.path = Some(path.to_owned());
            e
        })
    }

    /// Parses and validates config text.
    pub fn from_json_str(text: &str) -> Result<Self, ConfigError> {
        let root: RootDoc =
            serde_json::from_str(text).map_err(|e| ConfigError::file(format!("not valid JSON: {e}")))?;
        let Some(servers) = root.mcp_servers else {
            return Err(ConfigError::file(
                "the top-level object must have an \"mcpServers\" object, keyed by server label",
            ));
        };
        let mut config = McpConfig::default();
        for (label, value) in servers.0 {
            check_label(&label)?;
            if config.servers.contains_key(&label) {
                return Err(ConfigError::entry(&label, "is defined twice in \"mcpServers\""));
            }
            let entry = parse_entry(&label, value, &mut config.warnings)?;
            config.servers.insert(label, entry);
        }
        Ok(config)
    }
}

/// The root document. Only `mcpServers` matters; its entries keep their order and duplicates.
#[derive(Deserialize)]
struct RootDoc {
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<EntryList>,
}

/// `mcpServers` as a list of (label, value) pairs, so that a label given twice can be reported.
struct EntryList(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for EntryList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryListVisitor;
        impl<'de> Visitor<'de> for EntryListVisitor {
            type Value = EntryList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object keyed by server label (\"mcpServers\")")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EntryList, A::Error> {
                let mut entries = Vec::new();
                while let Some((label, value)) = map.next_entry::<String, Value>()? {
                    entries.push((label, value));
                }
                Ok(EntryList(entries))
            }
        }
        deserializer.deserialize_map(EntryListVisitor)
    }
}

fn check_label(label: &str) -> Result<(), ConfigError> {
    if label.is_empty() {
        return Err(ConfigError::entry(label, "the label is empty"));
    }
    if label.len() > MAX_LABEL_LEN {
        return Err(ConfigError::entry(label, format!("the label is longer than {MAX_LABEL_LEN} characters")));
    }
    if let Some(bad) = label.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(ConfigError::entry(
            label,
            format!("the label contains {bad:?}; labels may only use letters, digits, '_' and '-'"),
        ));
    }
    Ok(())
}

/// Keys of a `command` entry.
const STDIO_KEYS: [&str; 4] = ["command", "args", "env", "cwd"];
/// Keys of a `url` entry.
const URL_KEYS: [&str; 2] = ["url", "headers"];
/// Keys valid in either.
const COMMON_KEYS: [&str; 2] = ["transport", "type"];

fn parse_entry(label: &str, value: Value, warnings: &mut Vec<String>) -> Result<ServerEntry, ConfigError> {
    let Value::Object(mut obj) = value else {
        return Err(ConfigError::entry(label, format!("must be an object, found {}", json_kind(&value))));
    };
    let transport = transport_field(label, &obj)?;
    for key in obj.keys() {
        if !STDIO_KEYS.contains(&key.as_str())
            && !URL_KEYS.contains(&key.as_str())
            && !COMMON_KEYS.contains(&key.as_str())
        {
            warnings.push(format!("MCP server {label:?}: unknown key {key:?} ignored"));
        }
    }
    match (obj.contains_key("command"), obj.contains_key("url")) {
        (true, true) => Err(ConfigError::entry(
            label,
            "has both \"command\" and \"url\"; an entry is either a local process (\"command\") \
             or a remote server (\"url\")",
        )),
        (false, false) => {
            Err(ConfigError::entry(label, "has neither \"command\" (a local process) nor \"url\" (a remote server)"))
        }
        (true, false) => {
            if let Some(key) = URL_KEYS.iter().find(|k| obj.contains_key(**k)) {
                return Err(ConfigError::entry(
                    label,
                    format!("\"{key}\" is only valid with \"url\", not with \"command\""),
                ));
            }
            if let Some(t) = transport
                && t != "stdio"
            {
                return Err(ConfigError::entry(
                    label,
                    format!("transport {t:?} does not fit a \"command\" entry (only \"stdio\")"),
                ));
            }
            parse_stdio(label, &mut obj).map(ServerEntry::Stdio)
        }
        (false, true) => {
            if let Some(key) = STDIO_KEYS.iter().find(|k| obj.contains_key(**k)) {
                return Err(ConfigError::entry(
                    label,
                    format!("\"{key}\" is only valid with \"command\", not with \"url\""),
                ));
            }
            parse_url(label, &mut obj, transport.as_deref()).map(ServerEntry::Url)
        }
    }
}

/// `transport` or `type` (Claude Code's name), normalised to lower case; both present must agree.
fn transport_field(label: &str, obj: &Map<String, Value>) -> Result<Option<String>, ConfigError> {
    let mut found: Option<String> = None;
    for key in COMMON_KEYS {
        let Some(value) = obj.get(key) else { continue };
        let Value::String(s) = value else {
            return Err(ConfigError::entry(label, format!("\"{key}\" must be a string, found {}", json_kind(value))));
        };
        let s = s.trim().to_ascii_lowercase();
        if let Some(prev) = &found
            && *prev != s
        {
            return Err(ConfigError::entry(label, "\"transport\" and \"type\" disagree"));
        }
        found = Some(s);
    }
    Ok(found)
}

fn parse_stdio(label: &str, obj: &mut Map<String, Value>) -> Result<StdioServer, ConfigError> {
    let command = match obj.remove("command") {
        Some(Value::String(s)) if !s.trim().is_empty() => s,
        Some(Value::String(_)) => return Err(ConfigError::entry(label, "\"command\" is empty")),
        Some(other) => {
            return Err(ConfigError::entry(
                label,
                format!("\"command\" must be a string, found {}", json_kind(&other)),
            ));
        }
        None => return Err(ConfigError::entry(label, "\"command\" is missing")),
    };
    let args = match obj.remove("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s),
                other => Err(ConfigError::entry(
                    label,
                    format!("\"args[{i}]\" must be a string, found {}", json_kind(&other)),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(ConfigError::entry(
                label,
                format!("\"args\" must be an array of strings, found {}", json_kind(&other)),
            ));
        }
    };
    let env = string_map(label, "env", obj.remove("env"))?;
    if let Some(name) = env.keys().find(|k| k.is_empty() || k.contains('=') || k.contains('\0')) {
        return Err(ConfigError::entry(label, format!("\"env\" has an invalid variable name {name:?}")));
    }
    let cwd = match obj.remove("cwd") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(PathBuf::from(s)),
        Some(Value::String(_)) => return Err(ConfigError::entry(label, "\"cwd\" is empty")),
        Some(other) => {
            return Err(ConfigError::entry(label, format!("\"cwd\" must be a string, found {}", json_kind(&other))));
        }
    };
    Ok(StdioServer { command, args, env, cwd })
}

fn parse_url(label: &str, obj: &mut Map<String, Value>, transport: Option<&str>) -> Result<UrlServer, ConfigError> {
    let raw = match obj.remove("url") {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(ConfigError::entry(label, format!("\"url\" must be a string, found {}", json_kind(&other))));
        }
        None => return Err(ConfigError::entry(label, "\"url\" is missing")),
    };
    let url = reqwest::Url::parse(raw.trim())
        .map_err(|e| ConfigError::entry(label, format!("\"url\" {raw:?} is not an absolute URL: {e}")))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(ConfigError::entry(
            label,
            format!("\"url\" has scheme {:?}; only http:// and https:// are supported", url.scheme()),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(ConfigError::entry(label, format!("\"url\" {raw:?} has no host")));
    }
    let headers = string_map(label, "headers", obj.remove("headers"))?;
    for (name, value) in &headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(ConfigError::entry(label, format!("\"headers\" has an invalid header name {name:?}")));
        }
        // The value is not quoted back: it is usually a credential.
        if http::HeaderValue::from_str(value).is_err() {
            return Err(ConfigError::entry(
                label,
                format!("\"headers\" value of {name:?} is not a valid header value (control characters or non-ASCII)"),
            ));
        }
    }
    let transport = match transport {
        None => {
            if url.path().trim_end_matches('/').ends_with("/sse") {
                UrlTransport::Sse
            } else {
                UrlTransport::StreamableHttp
            }
        }
        Some("streamable-http" | "streamable_http" | "streamablehttp" | "http") => UrlTransport::StreamableHttp,
        Some("sse") => UrlTransport::Sse,
        Some(other) => {
            return Err(ConfigError::entry(
                label,
                format!("unknown transport {other:?} for a \"url\" entry; use \"streamable-http\" or \"sse\""),
            ));
        }
    };
    Ok(UrlServer { url, headers, transport })
}

/// An optional object of string values (`env`, `headers`).
fn string_map(label: &str, key: &str, value: Option<Value>) -> Result<BTreeMap<String, String>, ConfigError> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k, s)),
                other => Err(ConfigError::entry(
                    label,
                    format!("\"{key}.{k}\" must be a string, found {}", json_kind(&other)),
                )),
            })
            .collect(),
        Some(other) => Err(ConfigError::entry(
            label,
            format!("\"{key}\" must be an object of strings, found {}", json_kind(&other)),
        )),
    }
}

/// How a JSON value is named in error messages ("found a number").
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The two Built-in MCP time limits (`--mcp-builtin-*-timeout-sec`), the same in the helper and in
/// the workers that call it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct McpTimeouts {
    /// Starting one server: spawn or connect, `initialize`, first `tools/list`.
    pub startup: Duration,
    /// One tool call.
    pub tool_call: Duration,
}

impl Default for McpTimeouts {
    fn default() -> Self {
        McpTimeouts { startup: DEFAULT_STARTUP_TIMEOUT, tool_call: DEFAULT_TOOL_TIMEOUT }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<McpConfig, ConfigError> {
        McpConfig::from_json_str(&value.to_string())
    }

    fn error(value: Value) -> ConfigError {
        match parse(value) {
            Ok(config) => panic!("expected an error, got {config:?}"),
            Err(e) => e,
        }
    }

    /// The error must name the entry and say what is wrong.
    fn assert_entry_error(value: Value, label: &str, needle: &str) {
        let e = error(value);
        assert_eq!(e.entry.as_deref(), Some(label), "{e}");
        assert!(e.to_string().contains(needle), "{e:?} should mention {needle:?}");
        assert!(e.to_string().contains(&format!("server {label:?}")), "{e}");
    }

    #[test]
    fn parses_command_and_url_entries() {
        let config = parse(json!({"mcpServers": {
            "files": {"command": "npx", "args": ["-y", "pkg"], "env": {"A": "b"}, "cwd": "/tmp"},
            "docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer abcd"}},
            "old": {"url": "http://127.0.0.1:9/sse"},
            "forced": {"url": "http://127.0.0.1:9/events", "transport": "sse"},
            "typed": {"url": "http://127.0.0.1:9/x", "type": "http"}
        }}))
        .expect("valid");
        assert_eq!(config.servers.keys().collect::<Vec<_>>(), ["docs", "files", "forced", "old", "typed"]);
        let ServerEntry::Stdio(files) = &config.servers["files"] else { panic!("stdio") };
        assert_eq!(files.command, "npx");
        assert_eq!(files.args, ["-y", "pkg"]);
        assert_eq!(files.env["A"], "b");
        assert_eq!(files.cwd.as_deref(), Some(Path::new("/tmp")));
        assert_eq!(config.servers["files"].transport(), TransportKind::Stdio);
        assert_eq!(config.servers["docs"].transport(), TransportKind::StreamableHttp);
        assert_eq!(config.servers["old"].transport(), TransportKind::Sse);
        assert_eq!(config.servers["forced"].transport(), TransportKind::Sse);
        assert_eq!(config.servers["typed"].transport(), TransportKind::StreamableHttp);
        assert!(config.warnings.is_empty());
    }

    #[test]
    fn empty_server_list_is_valid() {
        assert!(parse(json!({"mcpServers": {}})).expect("valid").servers.is_empty());
    }

    #[test]
    fn ignores_other_root_keys() {
        let config = parse(json!({"globalShortcut": "x", "mcpServers": {"a": {"command": "x"}}})).expect("valid");
        assert_eq!(config.servers.len(), 1);
    }

    #[test]
    fn rejects_malformed_json() {
        let e = McpConfig::from_json_str("{\"mcpServers\": {").expect_err("invalid");
        assert!(e.problem.contains("not valid JSON"), "{e}");
    }

    #[test]
    fn rejects_missing_mcp_servers_root_key() {
        let e = error(json!({"servers": {}}));
        assert!(e.problem.contains("mcpServers"), "{e}");
        assert_eq!(e.entry, None);
    }

    #[test]
    fn rejects_non_object_mcp_servers() {
        let e = error(json!({"mcpServers": []}));
        assert!(e.problem.contains("keyed by server label"), "{e}");
    }

    #[test]
    fn rejects_duplicate_labels() {
        let e = McpConfig::from_json_str(r#"{"mcpServers": {"a": {"command": "x"}, "a": {"command": "y"}}}"#)
            .expect_err("duplicate");
        assert_eq!(e.entry.as_deref(), Some("a"));
        assert!(e.problem.contains("twice"), "{e}");
    }

    #[test]
    fn rejects_empty_label() {
        assert_entry_error(json!({"mcpServers": {"": {"command": "x"}}}), "", "empty");
    }

    #[test]
    fn rejects_label_with_invalid_characters() {
        assert_entry_error(json!({"mcpServers": {"my server": {"command": "x"}}}), "my server", "' '");
        assert_entry_error(json!({"mcpServers": {"a.b": {"command": "x"}}}), "a.b", "'.'");
    }

    #[test]
    fn rejects_label_longer_than_64() {
        let long = "a".repeat(65);
        assert_entry_error(json!({"mcpServers": {long.clone(): {"command": "x"}}}), &long, "longer than 64");
        let ok = "a".repeat(64);
        assert!(parse(json!({"mcpServers": {ok: {"command": "x"}}})).is_ok());
    }

    #[test]
    fn rejects_non_object_entry() {
        assert_entry_error(json!({"mcpServers": {"a": "npx"}}), "a", "must be an object");
    }

    #[test]
    fn rejects_entry_with_both_command_and_url() {
        assert_entry_error(json!({"mcpServers": {"a": {"command": "x", "url": "http://h/mcp"}}}), "a", "both");
    }

    #[test]
    fn rejects_entry_with_neither_command_nor_url() {
        assert_entry_error(json!({"mcpServers": {"a": {"args": ["x"]}}}), "a", "neither");
    }

    #[test]
    fn rejects_empty_or_non_string_command() {
        assert_entry_error(json!({"mcpServers": {"a": {"command": " "}}}), "a", "\"command\" is empty");
        assert_entry_error(json!({"mcpServers": {"a": {"command": ["npx"]}}}), "a", "\"command\" must be a string");
    }

    #[test]
    fn rejects_non_string_args() {
        assert_entry_error(json!({"mcpServers": {"a": {"command": "x", "args": ["ok", 3]}}}), "a", "args[1]");
        assert_entry_error(json!({"mcpServers": {"a": {"command": "x", "args": "-y"}}}), "a", "array of strings");
    }

    #[test]
    fn rejects_non_string_env_values() {
        assert_entry_error(json!({"mcpServers": {"a": {"command": "x", "env": {"PORT": 80}}}}), "a", "env.PORT");
        assert_entry_error(json!({"mcpServers": {"a": {"command": "x", "env": ["A=b"]}}}), "a", "object of strings");
        assert_entry_error(json!({"mcpServers": {"a": {"command": "x", "env": {"A=B": "c"}}}}), "a", "variable name");
    }

    #[test]
    fn rejects_bad_cwd() {
        assert_entry_error(json!({"mcpServers": {"a": {"command": "x", "cwd": 1}}}), "a", "\"cwd\" must be a string");
    }

    #[test]
    fn rejects_headers_on_command_entry() {
        assert_entry_error(
            json!({"mcpServers": {"a": {"command": "x", "headers": {"A": "b"}}}}),
            "a",
            "\"headers\" is only valid with \"url\"",
        );
    }

    #[test]
    fn rejects_command_keys_on_url_entry() {
        assert_entry_error(
            json!({"mcpServers": {"a": {"url": "http://h/mcp", "env": {"A": "b"}}}}),
            "a",
            "\"env\" is only valid with \"command\"",
        );
    }

    #[test]
    fn rejects_relative_or_malformed_url() {
        assert_entry_error(json!({"mcpServers": {"a": {"url": "/mcp"}}}), "a", "not an absolute URL");
        assert_entry_error(json!({"mcpServers": {"a": {"url": 5}}}), "a", "\"url\" must be a string");
    }

    #[test]
    fn rejects_schemes_other_than_http_and_https() {
        assert_entry_error(json!({"mcpServers": {"a": {"url": "ws://h/mcp"}}}), "a", "only http:// and https://");
        assert_entry_error(json!({"mcpServers": {"a": {"url": "file:///tmp/x"}}}), "a", "only http:// and https://");
    }

    #[test]
    fn accepts_http_and_https() {
        assert!(parse(json!({"mcpServers": {"a": {"url": "http://h/mcp"}, "b": {"url": "HTTPS://h/mcp"}}})).is_ok());
    }

    #[test]
    fn rejects_non_string_headers() {
        assert_entry_error(
            json!({"mcpServers": {"a": {"url": "http://h/", "headers": {"X": true}}}}),
            "a",
            "headers.X",
        );
        assert_entry_error(
            json!({"mcpServers": {"a": {"url": "http://h/", "headers": "X: y"}}}),
            "a",
            "object of strings",
        );
    }

    #[test]
    fn rejects_invalid_header_name_or_value_without_echoing_the_value() {
        assert_entry_error(
            json!({"mcpServers": {"a": {"url": "http://h/", "headers": {"Bad Name": "v"}}}}),
            "a",
            "header name",
        );
        let e =
            error(json!({"mcpServers": {"a": {"url": "http://h/", "headers": {"Authorization": "Bearer s3cret\n"}}}}));
        assert!(e.problem.contains("not a valid header value"), "{e}");
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn rejects_unknown_transport() {
        assert_entry_error(
            json!({"mcpServers": {"a": {"url": "http://h/", "transport": "websocket"}}}),
            "a",
            "websocket",
        );
        assert_entry_error(json!({"mcpServers": {"a": {"command": "x", "transport": "sse"}}}), "a", "only \"stdio\"");
        assert_entry_error(
            json!({"mcpServers": {"a": {"url": "http://h/", "transport": {"type": "sse"}}}}),
            "a",
            "must be a string",
        );
        assert_entry_error(
            json!({"mcpServers": {"a": {"url": "http://h/", "transport": "sse", "type": "http"}}}),
            "a",
            "disagree",
        );
    }

    #[test]
    fn warns_about_unknown_keys() {
        let config = parse(json!({"mcpServers": {"a": {"command": "x", "disabled": false}}})).expect("valid");
        assert_eq!(config.warnings.len(), 1);
        assert!(config.warnings[0].contains("\"disabled\""));
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mcp.json");
        std::fs::write(&path, r#"{"mcpServers": {"a": {"url": "ftp://h/"}}}"#).expect("write");
        let e = McpConfig::load(&path).expect_err("invalid");
        let text = e.to_string();
        assert!(text.contains("mcp.json") && text.contains("server \"a\"") && text.contains("ftp"), "{text}");
        let missing = McpConfig::load(&dir.path().join("nope.json")).expect_err("missing");
        assert!(missing.to_string().contains("cannot read"), "{missing}");
    }

    #[test]
    fn secrets_cover_headers_bearer_tokens_query_and_env() {
        let config = parse(json!({"mcpServers": {
            "u": {"url": "https://h/mcp?apiKey=querysecret", "headers": {"Authorization": "Bearer tok123", "X": "on"}},
            "s": {"command": "x", "env": {"TOKEN": "envsecret"}}
        }}))
        .expect("valid");
        let u = config.servers["u"].secrets();
        assert_eq!(u, ["Bearer tok123", "querysecret", "tok123"]);
        assert_eq!(config.servers["s"].secrets(), ["envsecret"]);
    }
}
