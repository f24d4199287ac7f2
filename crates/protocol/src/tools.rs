//! Tool declarations and `tool_choice`: what a request may ask the model to use, the rules that
//! make a declaration valid (spec §2.3, §2.4, §4.1 rules 1–12), and how the gateway's own tools
//! are named for the model.
//!
//! Three kinds of tool: client `function`s (the client runs them), `code_interpreter` and `mcp`
//! (the gateway runs them). Which gateway tools exist is a property of the running gateway
//! ([`Capabilities`]); declaring one that is not enabled is a clear 400. Everything here is pure:
//! checks that need the network (an MCP server's inventory, DNS of a remote URL) happen when the
//! engine resolves the tools.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The gateway tools this gateway runs, decided at start-up.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capabilities {
    /// `code_interpreter` has a working sandbox.
    pub code_interpreter: bool,
    /// Built-in MCP servers are configured (an MCP helper exists).
    pub builtin_mcp: bool,
    /// Request-declared (Remote) MCP servers may be dialled (`GW_MCP_REQUEST_REMOTE_ENABLED`).
    pub remote_mcp: bool,
    /// Remote MCP URLs must be https and name no local or IP-literal host
    /// (`GW_MCP_REQUEST_REMOTE_URL_CHECKS`).
    pub remote_url_checks: bool,
}

/// One entry of `tools`, as validated and as echoed in `response.tools`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolDeclaration {
    Function(FunctionTool),
    CodeInterpreter(CodeInterpreterTool),
    Mcp(McpTool),
}

/// A client-executed function tool, as echoed in `response.tools` (all keys present).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionTool {
    #[serde(rename = "type")]
    pub kind: FunctionToolType,
    pub name: String,
    pub description: Option<String>,
    pub parameters: Option<Map<String, Value>>,
    pub strict: Option<bool>,
}

/// The constant `"function"` tag of [`FunctionTool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FunctionToolType {
    Function,
}

/// `{"type":"code_interpreter","container":{"type":"auto"}}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CodeInterpreterTool {
    #[serde(rename = "type")]
    pub kind: CodeInterpreterToolType,
    /// Echoed as given (`{"type":"auto"}` by default); the gateway always manages containers itself.
    pub container: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodeInterpreterToolType {
    CodeInterpreter,
}

/// An MCP server declaration: Built-in (no `server_url`, names a configured server) or Remote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTool {
    #[serde(rename = "type")]
    pub kind: McpToolType,
    pub server_label: String,
    pub server_url: Option<String>,
    pub allowed_tools: Option<Vec<String>>,
    pub require_approval: Option<String>,
    pub server_description: Option<String>,
    /// Request-scoped credentials: never serialized, so never echoed nor stored.
    #[serde(skip)]
    pub credentials: McpCredentials,
    /// Always `null` in the echo: header values are secrets (see `credentials`).
    headers: Option<()>,
}

impl McpTool {
    /// Built-in mode: the server comes from the gateway's configuration.
    pub fn is_builtin(&self) -> bool {
        self.server_url.is_none()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpToolType {
    Mcp,
}

/// `authorization` and `headers` of a Remote MCP declaration. They exist for the duration of
/// the request only; `Debug` shows no values so they cannot reach a log.
#[derive(Clone, PartialEq, Default)]
pub struct McpCredentials {
    pub authorization: Option<String>,
    pub headers: BTreeMap<String, String>,
}

impl std::fmt::Debug for McpCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpCredentials")
            .field("authorization", &self.authorization.as_ref().map(|_| "<redacted>"))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// `tool_choice` as the gateway understands it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(ToolChoiceMode),
    Function(NamedFunction),
    Mcp(McpToolChoice),
    CodeInterpreter(CodeInterpreterChoice),
    AllowedTools(AllowedTools),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoiceMode {
    None,
    Auto,
    Required,
}

/// `{"type":"function","name":…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedFunction {
    #[serde(rename = "type")]
    pub kind: FunctionToolType,
    pub name: String,
}

/// `{"type":"mcp","server_label":…,"name":…}`: a server's tool, or any tool of that server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolChoice {
    #[serde(rename = "type")]
    pub kind: McpToolType,
    pub server_label: String,
    #[serde(default)]
    pub name: Option<String>,
}

/// `{"type":"code_interpreter"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeInterpreterChoice {
    #[serde(rename = "type")]
    pub kind: CodeInterpreterToolType,
}

/// `{"type":"allowed_tools","mode":…,"tools":[…]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllowedTools {
    #[serde(rename = "type")]
    pub kind: AllowedToolsType,
    pub mode: ToolChoiceMode,
    pub tools: Vec<AllowedTool>,
}

/// One entry of `allowed_tools.tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AllowedTool {
    Function(NamedFunction),
    Mcp(McpToolChoice),
    CodeInterpreter(CodeInterpreterChoice),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllowedToolsType {
    AllowedTools,
}

/// Tool types of the Responses API that this gateway does not run. A request naming one gets a
/// clear 400 rather than a silently missing tool.
const UNSUPPORTED_TOOL_TYPES: &[&str] = &[
    "web_search",
    "web_search_preview",
    "web_search_2025_08_26",
    "file_search",
    "computer_use_preview",
    "image_generation",
    "local_shell",
    "custom",
];

/// OpenAI's rule for function and schema names.
pub fn is_valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[derive(Deserialize)]
struct FunctionToolParam {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
    #[serde(default)]
    strict: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpToolParam {
    #[serde(rename = "type")]
    _kind: McpToolType,
    server_label: String,
    #[serde(default)]
    server_url: Option<String>,
    #[serde(default)]
    connector_id: Option<String>,
    #[serde(default)]
    authorization: Option<String>,
    #[serde(default)]
    headers: Option<BTreeMap<String, String>>,
    #[serde(default)]
    allowed_tools: Option<AllowedToolsFilter>,
    #[serde(default)]
    require_approval: Option<Value>,
    #[serde(default)]
    server_description: Option<String>,
}

/// `allowed_tools` of an MCP declaration: a list of names, or `{"tool_names":[…]}`.
#[derive(Deserialize)]
#[serde(untagged)]
enum AllowedToolsFilter {
    Names(Vec<String>),
    Filter { tool_names: Vec<String> },
}

/// Parse and check `tools`.
pub fn parse_tools(raw: Vec<Value>, caps: &Capabilities) -> Result<Vec<ToolDeclaration>, ApiError> {
    let mut tools: Vec<ToolDeclaration> = Vec::with_capacity(raw.len());
    for (i, tool) in raw.into_iter().enumerate() {
        let at = format!("tools[{i}]");
        let kind = tool
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid(format!("{at}.type"), "Each tool needs a string 'type'."))?
            .to_owned();
        let declaration = match kind.as_str() {
            "function" => ToolDeclaration::Function(parse_function(tool, &at, &tools)?),
            "code_interpreter" => {
                if !caps.code_interpreter {
                    return Err(not_enabled(&at, "code_interpreter"));
                }
                if tools.iter().any(|t| matches!(t, ToolDeclaration::CodeInterpreter(_))) {
                    return Err(ApiError::invalid(format!("{at}.type"), "Declare code_interpreter at most once."));
                }
                let container = tool.get("container").cloned().unwrap_or_else(|| serde_json::json!({"type": "auto"}));
                ToolDeclaration::CodeInterpreter(CodeInterpreterTool {
                    kind: CodeInterpreterToolType::CodeInterpreter,
                    container,
                })
            }
            "mcp" => ToolDeclaration::Mcp(parse_mcp(tool, &at, &tools, caps)?),
            k if UNSUPPORTED_TOOL_TYPES.contains(&k) => return Err(not_enabled(&at, k)),
            k => return Err(ApiError::invalid(format!("{at}.type"), format!("Unknown tool type '{k}'."))),
        };
        tools.push(declaration);
    }
    Ok(tools)
}

fn not_enabled(at: &str, kind: &str) -> ApiError {
    ApiError::invalid(format!("{at}.type"), format!("Tool type '{kind}' is not enabled on this gateway."))
}

fn parse_function(tool: Value, at: &str, earlier: &[ToolDeclaration]) -> Result<FunctionTool, ApiError> {
    let f: FunctionToolParam = serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    if f.name.starts_with("mcp__") {
        return Err(ApiError::invalid(format!("{at}.name"), "Function tool names starting with 'mcp__' are reserved."));
    }
    if !is_valid_name(&f.name) {
        return Err(ApiError::invalid(
            format!("{at}.name"),
            "Function names must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-'.",
        ));
    }
    let clash = earlier.iter().any(|t| match t {
        ToolDeclaration::Function(g) => g.name == f.name,
        ToolDeclaration::CodeInterpreter(_) => f.name == CODE_INTERPRETER_FUNCTION,
        ToolDeclaration::Mcp(_) => false,
    });
    if clash {
        return Err(ApiError::invalid(format!("{at}.name"), format!("Duplicate function tool name '{}'.", f.name)));
    }
    if let Some(params) = &f.parameters
        && let Some(t) = params.get("type")
        && t != "object"
    {
        return Err(ApiError::invalid(
            format!("{at}.parameters.type"),
            "Function parameters must be a JSON schema of type 'object'.",
        ));
    }
    Ok(FunctionTool {
        kind: FunctionToolType::Function,
        name: f.name,
        description: f.description,
        parameters: f.parameters,
        strict: Some(f.strict.unwrap_or(true)),
    })
}

fn parse_mcp(tool: Value, at: &str, earlier: &[ToolDeclaration], caps: &Capabilities) -> Result<McpTool, ApiError> {
    let m: McpToolParam = serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    let field = |f: &str| format!("{at}.{f}");
    if m.server_label.is_empty()
        || m.server_label.len() > 64
        || !m.server_label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(ApiError::invalid(
            field("server_label"),
            "server_label must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-'.",
        ));
    }
    if m.connector_id.is_some() {
        return Err(ApiError::bad_input(field("connector_id"), "MCP `connector_id` declarations are not supported."));
    }
    match &m.require_approval {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s == "never" => {}
        Some(_) => {
            return Err(ApiError::bad_input(
                field("require_approval"),
                "MCP `require_approval` supports `never` only: this gateway has no approval flow.",
            ));
        }
    }
    if earlier.iter().any(|t| matches!(t, ToolDeclaration::Mcp(other) if other.server_label == m.server_label)) {
        return Err(ApiError::bad_input(
            field("server_label"),
            format!("Duplicate MCP declarations are not allowed for the same `server_label`: '{}'.", m.server_label),
        ));
    }
    match &m.server_url {
        None => {
            if m.headers.is_some() {
                return Err(ApiError::bad_input(
                    field("headers"),
                    "MCP `headers` are only supported when `server_url` is provided.",
                ));
            }
            if m.authorization.is_some() {
                return Err(ApiError::bad_input(
                    field("authorization"),
                    "MCP `authorization` is only supported when `server_url` is provided.",
                ));
            }
            if !caps.builtin_mcp {
                return Err(ApiError::bad_input(
                    field("server_label"),
                    "Built-in MCP tools were declared but no Built-in MCP servers are configured on this gateway.",
                ));
            }
        }
        Some(url) => {
            if !caps.remote_mcp {
                return Err(ApiError::bad_input(
                    field("server_url"),
                    "Request-declared (Remote) MCP servers are disabled on this gateway.",
                ));
            }
            check_remote_url(url, caps.remote_url_checks)
                .map_err(|msg| ApiError::bad_input(field("server_url"), msg))?;
            if m.authorization.is_none()
                && m.headers
                    .as_ref()
                    .is_some_and(|h| h.keys().filter(|k| k.eq_ignore_ascii_case("authorization")).count() > 1)
            {
                return Err(ApiError::bad_input(
                    field("headers"),
                    "MCP `headers` contains several `Authorization` header variants.",
                ));
            }
        }
    }
    let allowed_tools = m.allowed_tools.map(|f| match f {
        AllowedToolsFilter::Names(n) | AllowedToolsFilter::Filter { tool_names: n } => n,
    });
    Ok(McpTool {
        kind: McpToolType::Mcp,
        server_label: m.server_label,
        server_url: m.server_url,
        allowed_tools,
        require_approval: m.require_approval.and_then(|v| v.as_str().map(str::to_owned)),
        server_description: m.server_description,
        credentials: McpCredentials { authorization: m.authorization, headers: m.headers.unwrap_or_default() },
        headers: None,
    })
}

/// Remote MCP URL rules (spec §4.1 rule 4): https only; `localhost`, `*.localhost` and IP-literal
/// hosts refused. With checks off, any http(s) URL with a host is accepted. (Names that resolve
/// to private addresses are refused later, when the URL is dialled.)
pub fn check_remote_url(url: &str, checks: bool) -> Result<(), String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| format!("Invalid MCP `server_url` '{url}'."))?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "https" && (checks || scheme != "http") {
        return Err(if checks {
            "Remote MCP `server_url` must use `https`.".to_owned()
        } else {
            "Remote MCP `server_url` must use http or https.".to_owned()
        });
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(bracketed) = host_port.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default()
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        return Err("Remote MCP `server_url` must include a host.".to_owned());
    }
    if checks {
        let lower = host.trim_end_matches('.').to_ascii_lowercase();
        if lower == "localhost" || lower.ends_with(".localhost") {
            return Err("Remote MCP host is denylisted: `localhost` and `.localhost` are not allowed.".to_owned());
        }
        if lower.parse::<std::net::IpAddr>().is_ok() {
            return Err("Remote MCP IP-literal hosts are not allowed.".to_owned());
        }
    }
    Ok(())
}

/// Parse `tool_choice`.
pub fn parse_tool_choice(v: Value) -> Result<ToolChoice, ApiError> {
    if let Value::String(s) = &v {
        return serde_json::from_value::<ToolChoiceMode>(v.clone()).map(ToolChoice::Mode).map_err(|_| {
            ApiError::invalid(
                "tool_choice",
                format!("Unknown tool_choice '{s}'; expected 'none', 'auto' or 'required'."),
            )
        });
    }
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
    let parsed = match kind.as_str() {
        "function" => serde_path_to_error::deserialize(v).map(ToolChoice::Function),
        "mcp" => serde_path_to_error::deserialize(v).map(ToolChoice::Mcp),
        "code_interpreter" => serde_path_to_error::deserialize(v).map(ToolChoice::CodeInterpreter),
        "allowed_tools" => serde_path_to_error::deserialize(v).map(ToolChoice::AllowedTools),
        "" => return Err(ApiError::invalid("tool_choice", "tool_choice must be a string or an object with a 'type'.")),
        other => {
            return Err(ApiError::invalid(
                "tool_choice.type",
                format!("tool_choice type '{other}' is not supported by this gateway."),
            ));
        }
    };
    parsed.map_err(|e| ApiError::from_path_error("tool_choice", e))
}

/// Cross-field rules between `tool_choice` and `tools` (contract failures → 422 `bad_input`).
/// Whether a named MCP tool exists is checked when the server's inventory is known.
pub fn check_tool_choice(choice: &ToolChoice, tools: &[ToolDeclaration]) -> Result<(), ApiError> {
    let has_function = |name: &str| tools.iter().any(|t| matches!(t, ToolDeclaration::Function(f) if f.name == name));
    let has_mcp = |label: &str| tools.iter().any(|t| matches!(t, ToolDeclaration::Mcp(m) if m.server_label == label));
    let has_ci = || tools.iter().any(|t| matches!(t, ToolDeclaration::CodeInterpreter(_)));
    let missing = |param: String, what: String| {
        Err(ApiError::bad_input(param, format!("{what} not found in 'tools' parameter.")))
    };
    match choice {
        ToolChoice::Mode(ToolChoiceMode::Required) if tools.is_empty() => {
            Err(ApiError::bad_input("tool_choice", "tool_choice 'required' needs at least one tool in 'tools'."))
        }
        ToolChoice::Function(f) if !has_function(&f.name) => {
            missing("tool_choice.name".into(), format!("Tool choice function '{}'", f.name))
        }
        ToolChoice::Mcp(m) if !has_mcp(&m.server_label) => {
            missing("tool_choice.server_label".into(), format!("MCP server '{}'", m.server_label))
        }
        ToolChoice::CodeInterpreter(_) if !has_ci() => {
            missing("tool_choice.type".into(), "Tool choice 'code_interpreter'".into())
        }
        ToolChoice::AllowedTools(a) => {
            for (i, entry) in a.tools.iter().enumerate() {
                match entry {
                    AllowedTool::Function(f) if !has_function(&f.name) => {
                        return missing(format!("tool_choice.tools[{i}].name"), format!("Allowed tool '{}'", f.name));
                    }
                    AllowedTool::Mcp(m) if !has_mcp(&m.server_label) => {
                        return missing(
                            format!("tool_choice.tools[{i}].server_label"),
                            format!("MCP server '{}'", m.server_label),
                        );
                    }
                    AllowedTool::CodeInterpreter(_) if !has_ci() => {
                        return missing(
                            format!("tool_choice.tools[{i}].type"),
                            "Allowed tool 'code_interpreter'".into(),
                        );
                    }
                    _ => {}
                }
            }
            if a.mode == ToolChoiceMode::Required && a.tools.is_empty() {
                return Err(ApiError::bad_input(
                    "tool_choice.tools",
                    "tool_choice allowed_tools with mode 'required' needs at least one tool.",
                ));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The function name under which the model sees `code_interpreter`.
pub const CODE_INTERPRETER_FUNCTION: &str = "code_interpreter";

/// The function name under which the model sees an MCP tool: `mcp__<label>__<tool>`, made of
/// characters every upstream accepts, at most 64 long. When the plain form would not fit or
/// needed characters replaced, a short hash of the real (label, tool) pair is appended, so two
/// different tools never share a name. Deterministic: the same pair always gets the same name,
/// in every turn and every worker.
pub fn mcp_function_name(server_label: &str, tool: &str) -> String {
    fn sanitize(s: &str) -> String {
        s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
    }
    let plain = format!("mcp__{}__{}", sanitize(server_label), sanitize(tool));
    let lossless = sanitize(tool) == tool && sanitize(server_label) == server_label;
    if lossless && plain.len() <= 64 {
        return plain;
    }
    // FNV-1a: tiny, stable across versions and platforms (unlike std's hasher).
    let hash = format!("{server_label}\u{0}{tool}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let suffix = format!("_{:08x}", hash as u32);
    let mut name: String = plain.chars().take(64 - suffix.len()).collect();
    name.push_str(&suffix);
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ALL: Capabilities =
        Capabilities { code_interpreter: true, builtin_mcp: true, remote_mcp: true, remote_url_checks: true };

    fn parse(tools: Value) -> Result<Vec<ToolDeclaration>, ApiError> {
        parse_tools(serde_json::from_value(tools).unwrap(), &ALL)
    }

    #[test]
    fn code_interpreter_echoes_its_container() {
        let t = parse(json!([{"type":"code_interpreter","container":{"type":"auto"}}])).unwrap();
        assert_eq!(
            serde_json::to_value(&t[0]).unwrap(),
            json!({"type":"code_interpreter","container":{"type":"auto"}})
        );
        let e = parse_tools(vec![json!({"type":"code_interpreter"})], &Capabilities::default()).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].type")));
    }

    #[test]
    fn remote_mcp_credentials_are_never_serialized() {
        let t = parse(json!([{"type":"mcp","server_label":"gh","server_url":"https://mcp.example.com/mcp",
            "authorization":"secret-token","headers":{"X-Api-Key":"secret-header"},"require_approval":"never"}]))
        .unwrap();
        let echo = serde_json::to_string(&t[0]).unwrap();
        assert!(!echo.contains("secret"), "{echo}");
        assert!(!format!("{t:?}").contains("secret"), "Debug must not show secrets");
        let ToolDeclaration::Mcp(m) = &t[0] else { panic!() };
        assert_eq!(m.credentials.authorization.as_deref(), Some("secret-token"));
    }

    #[test]
    fn mcp_rules_of_spec_section_4_1() {
        let bad = |tools: Value, param: &str| {
            let e = parse(tools).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{e:?}");
            e
        };
        let e = bad(
            json!([{"type":"mcp","server_label":"a"},{"type":"mcp","server_label":"a","server_url":"https://x.example"}]),
            "tools[1].server_label",
        );
        assert_eq!(e.status, 422);
        bad(json!([{"type":"mcp","server_label":"a","connector_id":"c"}]), "tools[0].connector_id");
        bad(json!([{"type":"mcp","server_label":"a","headers":{"k":"v"}}]), "tools[0].headers");
        bad(json!([{"type":"mcp","server_label":"a","authorization":"t"}]), "tools[0].authorization");
        bad(json!([{"type":"mcp","server_label":"a","require_approval":"always"}]), "tools[0].require_approval");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"http://x.example"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"https://localhost/mcp"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"https://api.localhost/mcp"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"https://10.0.0.1/mcp"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","server_url":"https://[::1]:8443/mcp"}]), "tools[0].server_url");
        bad(json!([{"type":"mcp","server_label":"a","bogus":1}]), "tools[0].bogus");
        let off = Capabilities { remote_mcp: false, ..ALL };
        let e = parse_tools(vec![json!({"type":"mcp","server_label":"a","server_url":"https://x.example"})], &off)
            .unwrap_err();
        assert_eq!(e.status, 422);
        let e = parse_tools(vec![json!({"type":"mcp","server_label":"a"})], &Capabilities::default()).unwrap_err();
        assert_eq!(e.status, 422);
        let checks_off = Capabilities { remote_url_checks: false, ..ALL };
        assert!(
            parse_tools(
                vec![json!({"type":"mcp","server_label":"a","server_url":"http://127.0.0.1:9/mcp"})],
                &checks_off
            )
            .is_ok()
        );
    }

    #[test]
    fn mcp_tool_choice_needs_a_declaration() {
        let tools = parse(json!([{"type":"mcp","server_label":"docs"}])).unwrap();
        let choice = parse_tool_choice(json!({"type":"mcp","server_label":"other","name":"t"})).unwrap();
        let e = check_tool_choice(&choice, &tools).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (422, Some("tool_choice.server_label")));
        let ok = parse_tool_choice(json!({"type":"mcp","server_label":"docs"})).unwrap();
        assert!(check_tool_choice(&ok, &tools).is_ok());
    }

    #[test]
    fn mcp_function_names_are_safe_short_and_distinct() {
        assert_eq!(mcp_function_name("docs", "search"), "mcp__docs__search");
        let dotted = mcp_function_name("docs", "search.v2");
        assert!(dotted.starts_with("mcp__docs__search_v2_") && is_valid_name(&dotted), "{dotted}");
        assert_ne!(mcp_function_name("docs", "search.v2"), mcp_function_name("docs", "search_v2"));
        let long = mcp_function_name(&"l".repeat(40), &"t".repeat(40));
        assert_eq!(long.len(), 64);
        assert!(is_valid_name(&long));
        assert_eq!(long, mcp_function_name(&"l".repeat(40), &"t".repeat(40)));
    }
}
