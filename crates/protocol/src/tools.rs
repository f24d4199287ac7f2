//! Tool declarations and `tool_choice`: what a request may ask the model to use, the rules that
//! make a declaration valid, and how the gateway's own tools
//! are named for the model.
//!
//! Three kinds of tool: client `function`s (the client runs them; also grouped in a `namespace`,
//! as Codex sends them), `code_interpreter` and `mcp` (the gateway runs them). A `web_search`
//! restricted to cached results (`external_web_access: false`, what Codex sends by default) is
//! accepted and left out of the model's offer while no search backend is configured. Which gateway tools exist is a property of the running gateway
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
    /// `web_search` has a profile (`--web-search-profile`).
    pub web_search: bool,
}

/// One entry of `tools`, as validated and as echoed in `response.tools`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolDeclaration {
    Function(FunctionTool),
    Namespace(NamespaceTool),
    CodeInterpreter(CodeInterpreterTool),
    Mcp(McpTool),
    WebSearch(WebSearchTool),
    /// A declaration accepted but not offered to the model (see [`OfflineWebSearch`]).
    OfflineWebSearch(OfflineWebSearch),
    Custom(CustomTool),
    LocalShell(LocalShellTool),
}

/// `{"type":"custom","name":…,"description":…,"format":…}`: a client tool taking free text. The
/// model sees a function with one string argument `input`; its calls come back as
/// `custom_tool_call` items for the client to run. The gateway never runs them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CustomTool {
    #[serde(rename = "type")]
    pub kind: CustomToolType,
    pub name: String,
    pub description: Option<String>,
    /// Echoed as given (`{"type":"text"}` or a grammar); shown to the model in the description.
    pub format: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CustomToolType {
    Custom,
}

/// `{"type":"local_shell"}`: the client runs commands on its machine. The model sees a function
/// `local_shell`; its calls come back as `local_shell_call` items. The gateway never runs them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LocalShellTool {
    #[serde(rename = "type")]
    pub kind: LocalShellToolType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalShellToolType {
    LocalShell,
}

/// The function name under which the model sees `local_shell`.
pub const LOCAL_SHELL_FUNCTION: &str = "local_shell";

/// `{"type":"namespace","name":…,"description":…,"tools":[functions]}`: client functions grouped
/// under a name. The model sees each as one function (see [`namespaced_function_name`]); a call
/// comes back as a `function_call` with the function's own `name` and its `namespace`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamespaceTool {
    #[serde(rename = "type")]
    pub kind: NamespaceToolType,
    pub name: String,
    pub description: Option<String>,
    pub tools: Vec<FunctionTool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespaceToolType {
    Namespace,
}

/// A `web_search` declaration that allows no live web access (`external_web_access: false`,
/// Codex's default): the gateway has no offline index, and every search profile reaches the live
/// web, so the request runs without the tool rather than failing — with or without a profile
/// configured. Echoed as sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct OfflineWebSearch(pub Value);

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

/// `{"type":"web_search","filters":{"allowed_domains":[…]},"search_context_size","user_location"}`,
/// echoed with every key present (as the reference API does).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WebSearchTool {
    /// `web_search`, or one of its dated/preview spellings, echoed as given.
    #[serde(rename = "type")]
    pub kind: WebSearchToolType,
    pub filters: Option<WebSearchFilters>,
    pub search_context_size: SearchContextSize,
    /// Passed to backends that take a location hint; echoed as given.
    pub user_location: Option<Value>,
}

impl WebSearchTool {
    /// The domains every action is limited to (empty: no limit), lower-cased, without a leading dot.
    pub fn allowed_domains(&self) -> Vec<String> {
        self.filters
            .as_ref()
            .and_then(|f| f.allowed_domains.as_ref())
            .map(|d| d.iter().map(|d| d.trim().trim_start_matches('.').to_ascii_lowercase()).collect())
            .unwrap_or_default()
    }
}

/// `filters` of a web_search declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchFilters {
    #[serde(default)]
    pub allowed_domains: Option<Vec<String>>,
}

/// How much search context the model gets (how many results a search returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchContextSize {
    Low,
    #[default]
    Medium,
    High,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebSearchToolParam {
    #[serde(rename = "type")]
    kind: WebSearchToolType,
    #[serde(default)]
    filters: Option<WebSearchFilters>,
    #[serde(default)]
    search_context_size: Option<SearchContextSize>,
    #[serde(default)]
    user_location: Option<Value>,
}

/// The `type` spellings of the web search tool (declarations and `tool_choice`).
pub const WEB_SEARCH_TYPES: &[&str] = &["web_search", "web_search_preview", "web_search_2025_08_26"];

/// An MCP server declaration: Built-in (no `server_url`, names a configured server) or Remote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTool {
    #[serde(rename = "type")]
    pub kind: McpToolType,
    pub server_label: String,
    pub server_url: Option<String>,
    pub allowed_tools: Option<Vec<String>>,
    /// Which tools need the client's approval before a call runs; absent means every tool does
    /// (see [`McpTool::needs_approval`]).
    pub require_approval: Option<RequireApproval>,
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

    /// Whether a call of `tool` must wait for the client's approval: with `"never"`, no; with
    /// `"always"` or no `require_approval`, yes; with lists, unless `never` names the tool (a tool
    /// in neither list needs approval, as in the reference API).
    pub fn needs_approval(&self, tool: &str) -> bool {
        match &self.require_approval {
            None | Some(RequireApproval::Always) => true,
            Some(RequireApproval::Never) => false,
            Some(RequireApproval::Lists { never, .. }) => !never.iter().flatten().any(|name| name == tool),
        }
    }

    /// The URL to connect to: `server_url` with the query the client gave (kept out of
    /// `server_url`, which is echoed and stored).
    pub fn connect_url(&self) -> Option<String> {
        let base = self.server_url.as_deref()?;
        Some(match &self.credentials.server_url_query {
            Some(query) => format!("{base}?{query}"),
            None => base.to_owned(),
        })
    }
}

/// `require_approval` of an MCP declaration: `"always"`, `"never"`, or tool lists
/// (`{"always":{"tool_names":[…]},"never":{"tool_names":[…]}}`). Echoed as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequireApproval {
    Always,
    Never,
    Lists { always: Option<Vec<String>>, never: Option<Vec<String>> },
}

impl Serialize for RequireApproval {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RequireApproval::Always => serializer.serialize_str("always"),
            RequireApproval::Never => serializer.serialize_str("never"),
            RequireApproval::Lists { always, never } => {
                let mut lists = Map::new();
                for (key, names) in [("always", always), ("never", never)] {
                    if let Some(names) = names {
                        lists.insert(key.into(), serde_json::json!({ "tool_names": names }));
                    }
                }
                lists.serialize(serializer)
            }
        }
    }
}

/// Parse `require_approval` (at `param`): a mode, or the two tool lists (a name in both is refused;
/// the `read_only` filter is not supported).
fn parse_require_approval(value: Option<Value>, param: &str) -> Result<Option<RequireApproval>, ApiError> {
    const EXPECTED: &str = "expected 'always', 'never' or an object {\"always\": {\"tool_names\": [...]}, \"never\": {\"tool_names\": [...]}}";
    let filter = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(mode)) if mode == "always" => return Ok(Some(RequireApproval::Always)),
        Some(Value::String(mode)) if mode == "never" => return Ok(Some(RequireApproval::Never)),
        Some(Value::Object(filter)) => filter,
        Some(_) => return Err(ApiError::invalid(param, format!("{param}: {EXPECTED}."))),
    };
    let mut lists = [None, None];
    for (key, list) in filter {
        let at = format!("{param}.{key}");
        let slot = match key.as_str() {
            "always" => 0,
            "never" => 1,
            _ => return Err(ApiError::invalid(at.clone(), format!("{at}: unknown field; {EXPECTED}."))),
        };
        let Value::Object(mut entry) = list else {
            return Err(ApiError::invalid(at.clone(), format!("{at}: expected an object with 'tool_names'.")));
        };
        if entry.contains_key("read_only") {
            return Err(ApiError::bad_input(
                format!("{at}.read_only"),
                format!("{at}.read_only: the `read_only` filter is not supported; list the tools in `tool_names`."),
            ));
        }
        let names = entry.remove("tool_names").unwrap_or(Value::Array(Vec::new()));
        if let Some(other) = entry.keys().next() {
            let at = format!("{at}.{other}");
            return Err(ApiError::invalid(at.clone(), format!("{at}: unknown field; expected 'tool_names'.")));
        }
        let names_at = format!("{at}.tool_names");
        let names: Vec<String> =
            serde_path_to_error::deserialize(names).map_err(|e| ApiError::from_path_error(&names_at, e))?;
        lists[slot] = Some(names);
    }
    let [always, never] = lists;
    if let (Some(always), Some(never)) = (&always, &never)
        && let Some(both) = always.iter().find(|name| never.contains(name))
    {
        return Err(ApiError::invalid(
            param,
            format!("{param}: the tool '{both}' is listed under both `always` and `never`."),
        ));
    }
    Ok(Some(RequireApproval::Lists { always, never }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpToolType {
    Mcp,
}

/// `authorization` and `headers` of a Remote MCP declaration, and the query of its `server_url`.
/// They exist for the duration of the request only; `Debug` shows no values so they cannot reach
/// a log.
#[derive(Clone, PartialEq, Default)]
pub struct McpCredentials {
    pub authorization: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// `server_url`'s query string (without `?`): often a key, so never echoed nor stored.
    pub server_url_query: Option<String>,
}

impl std::fmt::Debug for McpCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpCredentials")
            .field("authorization", &self.authorization.as_ref().map(|_| "<redacted>"))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("server_url_query", &self.server_url_query.as_ref().map(|_| "<redacted>"))
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
    WebSearch(WebSearchChoice),
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

/// `{"type":"web_search"}` (or a preview/dated spelling, echoed as given).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchChoice {
    #[serde(rename = "type")]
    pub kind: WebSearchToolType,
}

/// The spellings of the web search tool's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebSearchToolType {
    #[serde(rename = "web_search")]
    WebSearch,
    #[serde(rename = "web_search_preview")]
    WebSearchPreview,
    #[serde(rename = "web_search_2025_08_26")]
    WebSearch20250826,
}

/// `{"type":"allowed_tools","mode":…,"tools":[…]}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllowedTools {
    #[serde(rename = "type")]
    pub kind: AllowedToolsType,
    pub mode: ToolChoiceMode,
    pub tools: Vec<AllowedTool>,
}

/// One entry of `allowed_tools.tools` (parsed by its `type`, see [`parse_tool_choice`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AllowedTool {
    Function(NamedFunction),
    Mcp(McpToolChoice),
    CodeInterpreter(CodeInterpreterChoice),
    WebSearch(WebSearchChoice),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllowedToolsType {
    AllowedTools,
}

/// Tool types of the Responses API that this gateway does not run. A request naming one gets a
/// clear 400 rather than a silently missing tool.
const UNSUPPORTED_TOOL_TYPES: &[&str] = &["file_search", "computer_use_preview", "image_generation"];

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
    allowed_tools: Option<Value>,
    #[serde(default)]
    require_approval: Option<Value>,
    #[serde(default)]
    server_description: Option<String>,
}

/// `allowed_tools` of an MCP declaration: a list of names, or `{"tool_names":[…]}` (`null`: all).
fn parse_allowed_tools(value: Option<Value>, at: &str) -> Result<Option<Vec<String>>, ApiError> {
    let names = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(mut filter)) => match filter.remove("tool_names") {
            Some(names) => (names, format!("{at}.allowed_tools.tool_names")),
            None => return Ok(None),
        },
        Some(names) => (names, format!("{at}.allowed_tools")),
    };
    let (names, param) = names;
    serde_path_to_error::deserialize::<_, Vec<String>>(names).map(Some).map_err(|e| {
        let e = ApiError::from_path_error(&param, e);
        match (&e.param, e.message.contains("expected an array")) {
            (Some(p), true) if p == &param => ApiError::invalid(
                param.clone(),
                format!("{param}: expected an array of tool names or an object with 'tool_names'."),
            ),
            _ => e,
        }
    })
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
                    return Err(tool_not_enabled(&at, "code_interpreter"));
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
            "namespace" => ToolDeclaration::Namespace(parse_namespace(tool, &at, &tools)?),
            "custom" => ToolDeclaration::Custom(parse_custom(tool, &at, &tools)?),
            "local_shell" => {
                if tools.iter().any(|t| client_function_names(t).iter().any(|n| n == LOCAL_SHELL_FUNCTION)) {
                    return Err(ApiError::invalid(format!("{at}.type"), "Declare local_shell at most once."));
                }
                ToolDeclaration::LocalShell(LocalShellTool { kind: LocalShellToolType::LocalShell })
            }
            k if WEB_SEARCH_TYPES.contains(&k) && tool.get("external_web_access") == Some(&Value::Bool(false)) => {
                if tools.iter().any(is_web_search) {
                    return Err(ApiError::invalid(
                        format!("{at}.type"),
                        "Duplicate `web_search` tools are not allowed.",
                    ));
                }
                ToolDeclaration::OfflineWebSearch(OfflineWebSearch(tool))
            }
            k if WEB_SEARCH_TYPES.contains(&k) => {
                if !caps.web_search {
                    return Err(tool_not_enabled(&at, k));
                }
                if tools.iter().any(is_web_search) {
                    return Err(ApiError::invalid(format!("{at}.type"), "Declare web_search at most once."));
                }
                ToolDeclaration::WebSearch(parse_web_search(tool, &at)?)
            }
            k if UNSUPPORTED_TOOL_TYPES.contains(&k) => return Err(tool_not_enabled(&at, k)),
            k => return Err(ApiError::invalid(format!("{at}.type"), format!("Unknown tool type '{k}'."))),
        };
        tools.push(declaration);
    }
    Ok(tools)
}

/// The 400 for a tool type this gateway does not run: which type, why, and how an operator turns
/// it on (or, for a type the gateway never runs, what the client can do instead).
pub fn tool_not_enabled(at: &str, kind: &str) -> ApiError {
    let why = match kind {
        "code_interpreter" => {
            "it runs only with its sandbox, and this gateway was started with `--code-interpreter disabled` \
             or found no working sandbox at start-up (its log says which). An operator enables it by \
             installing the sandbox (scripts/setup-code-interpreter) and starting respgw with \
             `--code-interpreter spawn` (the default)"
        }
        k if WEB_SEARCH_TYPES.contains(&k) => {
            "it runs only with a search backend, and this gateway was started without one. An operator \
             enables it with `--web-search-profile`"
        }
        _ => "this gateway does not run it. Declare a function tool instead and run it in the client",
    };
    ApiError::invalid(format!("{at}.type"), format!("Tool type '{kind}' is not enabled on this gateway: {why}."))
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
    let clash = earlier.iter().any(|t| client_function_names(t).contains(&f.name));
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

fn parse_web_search(tool: Value, at: &str) -> Result<WebSearchTool, ApiError> {
    let w: WebSearchToolParam = serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    if let Some(domains) = w.filters.as_ref().and_then(|f| f.allowed_domains.as_ref()) {
        for (i, domain) in domains.iter().enumerate() {
            let bare = domain.trim().trim_start_matches('.');
            if bare.is_empty() || bare.contains(['/', ':', ' ', '?', '#', '@']) {
                return Err(ApiError::invalid(
                    format!("{at}.filters.allowed_domains[{i}]"),
                    format!(
                        "'{domain}' is not a domain name (give a host such as 'example.com', without scheme or path)."
                    ),
                ));
            }
        }
    }
    Ok(WebSearchTool {
        kind: w.kind,
        filters: w.filters,
        search_context_size: w.search_context_size.unwrap_or_default(),
        user_location: w.user_location,
    })
}

/// Any `web_search` declaration, live or offline (at most one per request).
fn is_web_search(tool: &ToolDeclaration) -> bool {
    matches!(tool, ToolDeclaration::WebSearch(_) | ToolDeclaration::OfflineWebSearch(_))
}

/// The function names a declaration puts in front of the model.
pub fn client_function_names(tool: &ToolDeclaration) -> Vec<String> {
    match tool {
        ToolDeclaration::Function(f) => vec![f.name.clone()],
        ToolDeclaration::Namespace(ns) => {
            ns.tools.iter().map(|f| namespaced_function_name(&ns.name, &f.name)).collect()
        }
        ToolDeclaration::Custom(c) => vec![c.name.clone()],
        ToolDeclaration::LocalShell(_) => vec![LOCAL_SHELL_FUNCTION.to_owned()],
        ToolDeclaration::CodeInterpreter(_) => vec![CODE_INTERPRETER_FUNCTION.to_owned()],
        ToolDeclaration::WebSearch(_) => vec![WEB_SEARCH_FUNCTION.to_owned()],
        ToolDeclaration::Mcp(_) | ToolDeclaration::OfflineWebSearch(_) => Vec::new(),
    }
}

#[derive(Deserialize)]
struct CustomToolParam {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    format: Option<Value>,
}

fn parse_custom(tool: Value, at: &str, earlier: &[ToolDeclaration]) -> Result<CustomTool, ApiError> {
    let c: CustomToolParam = serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    if !is_valid_name(&c.name) || c.name.starts_with("mcp__") {
        return Err(ApiError::invalid(
            format!("{at}.name"),
            "Custom tool names must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-' (and not start with 'mcp__').",
        ));
    }
    if earlier.iter().any(|t| client_function_names(t).contains(&c.name)) {
        return Err(ApiError::invalid(format!("{at}.name"), format!("Duplicate tool name '{}'.", c.name)));
    }
    Ok(CustomTool { kind: CustomToolType::Custom, name: c.name, description: c.description, format: c.format })
}

#[derive(Deserialize)]
struct NamespaceToolParam {
    name: String,
    #[serde(default)]
    description: Option<String>,
    tools: Vec<Value>,
}

fn parse_namespace(tool: Value, at: &str, earlier: &[ToolDeclaration]) -> Result<NamespaceTool, ApiError> {
    let ns: NamespaceToolParam =
        serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    if !is_valid_name(&ns.name) {
        return Err(ApiError::invalid(
            format!("{at}.name"),
            "Namespace names must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-'.",
        ));
    }
    if earlier.iter().any(|t| matches!(t, ToolDeclaration::Namespace(other) if other.name == ns.name)) {
        return Err(ApiError::invalid(format!("{at}.name"), format!("Duplicate namespace '{}'.", ns.name)));
    }
    let mut functions: Vec<FunctionTool> = Vec::with_capacity(ns.tools.len());
    for (i, inner) in ns.tools.into_iter().enumerate() {
        let inner_at = format!("{at}.tools[{i}]");
        if inner.get("type").and_then(Value::as_str) != Some("function") {
            return Err(ApiError::invalid(
                format!("{inner_at}.type"),
                "A namespace holds function tools only ('type': 'function').",
            ));
        }
        let f = parse_function(inner, &inner_at, &[])?;
        if functions.iter().any(|g| g.name == f.name) {
            return Err(ApiError::invalid(
                format!("{inner_at}.name"),
                format!("Duplicate function '{}' in namespace '{}'.", f.name, ns.name),
            ));
        }
        let flat = namespaced_function_name(&ns.name, &f.name);
        let clash = earlier.iter().any(|t| client_function_names(t).contains(&flat));
        if clash {
            return Err(ApiError::invalid(
                format!("{inner_at}.name"),
                format!("Duplicate function tool name '{flat}'."),
            ));
        }
        functions.push(f);
    }
    Ok(NamespaceTool {
        kind: NamespaceToolType::Namespace,
        name: ns.name,
        description: ns.description,
        tools: functions,
    })
}

/// The single function name under which the model sees `function` of namespace `namespace`:
/// `<namespace>__<function>`, kept within the 64 characters every upstream accepts (longer pairs
/// are shortened with a hash, like [`mcp_function_name`]).
pub fn namespaced_function_name(namespace: &str, function: &str) -> String {
    let plain = format!("{namespace}__{function}");
    if plain.len() <= 64 {
        return plain;
    }
    let hash = format!("{namespace}\u{0}{function}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let suffix = format!("_{:08x}", hash as u32);
    let mut name: String = plain.chars().take(64 - suffix.len()).collect();
    name.push_str(&suffix);
    name
}

fn parse_mcp(tool: Value, at: &str, earlier: &[ToolDeclaration], caps: &Capabilities) -> Result<McpTool, ApiError> {
    let m: McpToolParam = serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    let allowed_tools = parse_allowed_tools(m.allowed_tools, at)?;
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
    let require_approval = parse_require_approval(m.require_approval, &field("require_approval"))?;
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
            if has_userinfo(url) {
                let param = field("server_url");
                return Err(ApiError::invalid(
                    param.clone(),
                    format!(
                        "{param}: credentials in the URL (user:password@host) are not accepted, because the URL \
                         is echoed and stored; send them in `authorization` (or `headers`) instead."
                    ),
                ));
            }
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
    // The query of a Remote server's URL often carries a key (`?token=…`, `?api_key=…`): it is
    // used to connect but never echoed nor stored.
    let (server_url, server_url_query) = match m.server_url {
        Some(url) => {
            let (base, query) = split_query(&url);
            (Some(base), query)
        }
        None => (None, None),
    };
    Ok(McpTool {
        kind: McpToolType::Mcp,
        server_label: m.server_label,
        server_url,
        allowed_tools,
        require_approval,
        server_description: m.server_description,
        credentials: McpCredentials {
            authorization: m.authorization,
            headers: m.headers.unwrap_or_default(),
            server_url_query,
        },
        headers: None,
    })
}

/// `url` without its query and fragment, and the query (without `?`) when there is one.
fn split_query(url: &str) -> (String, Option<String>) {
    let without_fragment = url.split('#').next().unwrap_or_default();
    match without_fragment.split_once('?') {
        Some((base, query)) if !query.is_empty() => (base.to_owned(), Some(query.to_owned())),
        Some((base, _)) => (base.to_owned(), None),
        None => (without_fragment.to_owned(), None),
    }
}

/// Whether `url`'s authority holds a `user[:password]@` part.
fn has_userinfo(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or_default().contains('@')
}

/// Remote MCP URL rules: https only; `localhost`, `*.localhost` and IP-literal
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
        k if WEB_SEARCH_TYPES.contains(&k) => serde_path_to_error::deserialize(v).map(ToolChoice::WebSearch),
        "allowed_tools" => return parse_allowed_tools_choice(v).map(ToolChoice::AllowedTools),
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

#[derive(Deserialize)]
struct AllowedToolsParam {
    mode: ToolChoiceMode,
    tools: Vec<Value>,
}

/// The entry types of `allowed_tools.tools`.
const ALLOWED_TOOL_TYPES: &[&str] = &["function", "mcp", "code_interpreter", "web_search"];

/// `{"type":"allowed_tools","mode":…,"tools":[…]}`, each entry parsed by its `type`.
fn parse_allowed_tools_choice(v: Value) -> Result<AllowedTools, ApiError> {
    let param: AllowedToolsParam =
        serde_path_to_error::deserialize(v).map_err(|e| ApiError::from_path_error("tool_choice", e))?;
    let mut tools = Vec::with_capacity(param.tools.len());
    for (i, entry) in param.tools.into_iter().enumerate() {
        let at = format!("tool_choice.tools[{i}]");
        let kind = match entry.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            _ => {
                return Err(ApiError::invalid(
                    format!("{at}.type"),
                    format!("{at}.type: each allowed tool needs a string 'type'."),
                ));
            }
        };
        let parsed = match kind.as_str() {
            "function" => serde_path_to_error::deserialize(entry).map(AllowedTool::Function),
            "mcp" => serde_path_to_error::deserialize(entry).map(AllowedTool::Mcp),
            "code_interpreter" => serde_path_to_error::deserialize(entry).map(AllowedTool::CodeInterpreter),
            k if WEB_SEARCH_TYPES.contains(&k) => serde_path_to_error::deserialize(entry).map(AllowedTool::WebSearch),
            other => {
                return Err(ApiError::invalid(
                    format!("{at}.type"),
                    format!(
                        "{at}.type: unknown allowed tool type '{other}'; expected one of {}.",
                        ALLOWED_TOOL_TYPES.join(", ")
                    ),
                ));
            }
        };
        tools.push(parsed.map_err(|e| ApiError::from_path_error(&at, e))?);
    }
    Ok(AllowedTools { kind: AllowedToolsType::AllowedTools, mode: param.mode, tools })
}

/// Cross-field rules between `tool_choice` and `tools` (contract failures → 422 `bad_input`).
/// Whether a named MCP tool exists is checked when the server's inventory is known.
pub fn check_tool_choice(choice: &ToolChoice, tools: &[ToolDeclaration]) -> Result<(), ApiError> {
    let has_function = |name: &str| tools.iter().any(|t| matches!(t, ToolDeclaration::Function(f) if f.name == name));
    let has_mcp = |label: &str| tools.iter().any(|t| matches!(t, ToolDeclaration::Mcp(m) if m.server_label == label));
    let has_ci = || tools.iter().any(|t| matches!(t, ToolDeclaration::CodeInterpreter(_)));
    let has_web_search = || tools.iter().any(|t| matches!(t, ToolDeclaration::WebSearch(_)));
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
        ToolChoice::WebSearch(_) if !has_web_search() => {
            missing("tool_choice.type".into(), "Tool choice 'web_search'".into())
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
                    AllowedTool::WebSearch(_) if !has_web_search() => {
                        return missing(format!("tool_choice.tools[{i}].type"), "Allowed tool 'web_search'".into());
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

/// The function name under which the model sees `web_search`.
pub const WEB_SEARCH_FUNCTION: &str = "web_search";

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

    const ALL: Capabilities = Capabilities {
        code_interpreter: true,
        builtin_mcp: true,
        remote_mcp: true,
        remote_url_checks: true,
        web_search: true,
    };

    fn parse(tools: Value) -> Result<Vec<ToolDeclaration>, ApiError> {
        parse_tools(serde_json::from_value(tools).unwrap(), &ALL)
    }

    #[test]
    fn require_approval_modes_and_lists_decide_which_calls_wait() {
        let mcp = |require_approval: Value| {
            let mut tool = json!({"type":"mcp","server_label":"docs"});
            if !require_approval.is_null() {
                tool["require_approval"] = require_approval;
            }
            match parse(json!([tool])).map(|mut t| t.remove(0)) {
                Ok(ToolDeclaration::Mcp(m)) => Ok(m),
                Ok(other) => panic!("{other:?}"),
                Err(e) => Err(e),
            }
        };
        let decide = |m: &McpTool| ["read", "write", "other"].map(|t| m.needs_approval(t));
        assert_eq!(decide(&mcp(json!("never")).unwrap()), [false, false, false]);
        assert_eq!(decide(&mcp(json!("always")).unwrap()), [true, true, true]);
        assert_eq!(decide(&mcp(Value::Null).unwrap()), [true, true, true], "absent: as in the reference API");
        let lists = json!({"never":{"tool_names":["read"]},"always":{"tool_names":["write"]}});
        let m = mcp(lists.clone()).unwrap();
        assert_eq!(decide(&m), [false, true, true], "a tool in neither list needs approval");
        assert_eq!(serde_json::to_value(&m).unwrap()["require_approval"], lists, "echoed as sent");
        assert_eq!(decide(&mcp(json!({"never":{"tool_names":["read","other"]}})).unwrap()), [false, true, false]);
        assert_eq!(serde_json::to_value(mcp(json!("never")).unwrap()).unwrap()["require_approval"], "never");

        let refused = |value: Value, param: &str, status: u16| {
            let e = mcp(value).unwrap_err();
            assert_eq!((e.param.as_deref(), e.status), (Some(param), status), "{e:?}");
            e
        };
        let e = refused(json!("sometimes"), "tools[0].require_approval", 400);
        assert!(e.message.contains("'always', 'never'"), "{e:?}");
        refused(json!(true), "tools[0].require_approval", 400);
        refused(json!({"maybe":{"tool_names":[]}}), "tools[0].require_approval.maybe", 400);
        refused(json!({"always":["a"]}), "tools[0].require_approval.always", 400);
        refused(json!({"always":{"tool_names":"a"}}), "tools[0].require_approval.always.tool_names", 400);
        refused(json!({"always":{"tool_names":["a"],"x":1}}), "tools[0].require_approval.always.x", 400);
        refused(json!({"never":{"read_only":true}}), "tools[0].require_approval.never.read_only", 422);
        let e = refused(
            json!({"always":{"tool_names":["a"]},"never":{"tool_names":["a"]}}),
            "tools[0].require_approval",
            400,
        );
        assert!(e.message.contains("'a'"), "{e:?}");
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
    fn a_tool_that_is_off_says_why_and_how_an_operator_turns_it_on() {
        let off = |tool: Value| parse_tools(vec![tool], &Capabilities::default()).unwrap_err().message;
        let code = off(json!({"type":"code_interpreter"}));
        assert!(code.contains("--code-interpreter disabled") && code.contains("--code-interpreter spawn"), "{code}");
        assert!(code.contains("scripts/setup-code-interpreter"), "{code}");
        let search = off(json!({"type":"web_search"}));
        assert!(search.contains("--web-search-profile"), "{search}");
        let never = off(json!({"type":"image_generation"}));
        assert!(never.contains("does not run it") && never.contains("function tool"), "{never}");
    }

    #[test]
    fn web_search_is_echoed_with_every_key_and_checked() {
        let t = parse(json!([{"type":"web_search","filters":{"allowed_domains":["docs.vllm.ai"]}}])).unwrap();
        assert_eq!(
            serde_json::to_value(&t[0]).unwrap(),
            json!({"type":"web_search","filters":{"allowed_domains":["docs.vllm.ai"]},"search_context_size":"medium","user_location":null})
        );
        let e = parse(json!([{"type":"web_search","filters":{"allowed_domains":["https://x.org/a"]}}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].filters.allowed_domains[0]"));
        let e = parse(json!([{"type":"web_search","search_context_size":"huge"}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].search_context_size"));
        let e = parse(json!([{"type":"web_search"},{"type":"function","name":"web_search"}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[1].name"));
        let off = Capabilities { web_search: false, ..ALL };
        let e = parse_tools(vec![json!({"type":"web_search_preview"})], &off).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].type")));
        let choice = parse_tool_choice(json!({"type":"web_search"})).unwrap();
        assert!(check_tool_choice(&choice, &[]).is_err());
        assert!(check_tool_choice(&choice, &t).is_ok());
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
        bad(json!([{"type":"mcp","server_label":"a","require_approval":"sometimes"}]), "tools[0].require_approval");
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
    fn remote_mcp_urls_keep_secrets_out_of_the_echo() {
        let e = parse(json!([{"type":"mcp","server_label":"a","server_url":"https://user:pass@mcp.example.com/mcp"}]))
            .unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].server_url")));
        assert!(e.message.contains("authorization") && !e.message.contains("pass@"), "{}", e.message);
        let t = parse(
            json!([{"type":"mcp","server_label":"a","server_url":"https://mcp.example.com/mcp?token=s3cret&x=1"}]),
        )
        .unwrap();
        let echo = serde_json::to_string(&t[0]).unwrap();
        assert!(echo.contains("\"server_url\":\"https://mcp.example.com/mcp\"") && !echo.contains("s3cret"), "{echo}");
        assert!(!format!("{t:?}").contains("s3cret"));
        let ToolDeclaration::Mcp(m) = &t[0] else { panic!() };
        assert_eq!(m.connect_url().as_deref(), Some("https://mcp.example.com/mcp?token=s3cret&x=1"));
    }

    #[test]
    fn allowed_tools_entries_are_parsed_by_type_in_our_words() {
        let e =
            parse_tool_choice(json!({"type":"allowed_tools","mode":"auto","tools":[{"type":"teleport"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice.tools[0].type"));
        assert!(e.message.contains("expected one of function, mcp"), "{}", e.message);
        let e =
            parse_tool_choice(json!({"type":"allowed_tools","mode":"auto","tools":[{"type":"function"}]})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice.tools[0].name"));
        let e = parse(json!([{"type":"mcp","server_label":"a","allowed_tools":5}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].allowed_tools"));
        assert!(e.message.contains("array of tool names"), "{}", e.message);
        let t = parse(json!([{"type":"mcp","server_label":"a","allowed_tools":{"tool_names":["x"]}}])).unwrap();
        let ToolDeclaration::Mcp(m) = &t[0] else { panic!() };
        assert_eq!(m.allowed_tools, Some(vec!["x".to_owned()]));
    }

    #[test]
    fn namespaces_hold_functions_under_flat_names() {
        let t = parse(json!([{"type":"namespace","name":"multi_agent_v1","description":"agents","tools":[
            {"type":"function","name":"close_agent","strict":false,"parameters":{"type":"object"}},
            {"type":"function","name":"spawn_agent","parameters":{"type":"object"}}]}]))
        .unwrap();
        let ToolDeclaration::Namespace(ns) = &t[0] else { panic!("{t:?}") };
        assert_eq!(ns.tools[0].strict, Some(false));
        assert_eq!(namespaced_function_name(&ns.name, &ns.tools[1].name), "multi_agent_v1__spawn_agent");
        let long = namespaced_function_name(&"n".repeat(40), &"f".repeat(40));
        assert!(long.len() == 64 && is_valid_name(&long), "{long}");
        let e =
            parse(json!([{"type":"namespace","name":"ns","tools":[{"type":"mcp","server_label":"x"}]}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].tools[0].type"));
        let e = parse(json!([{"type":"function","name":"ns__f"},{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f"}]}]))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[1].tools[0].name"));
    }

    #[test]
    fn custom_and_local_shell_tools_are_client_tools() {
        let t = parse(json!([{"type":"custom","name":"apply_patch","description":"Patch files",
            "format":{"type":"grammar","syntax":"lark","definition":"start: /.+/"}},{"type":"local_shell"}]))
        .unwrap();
        assert!(matches!(&t[0], ToolDeclaration::Custom(c) if c.name == "apply_patch"));
        assert_eq!(serde_json::to_value(&t[1]).unwrap(), json!({"type":"local_shell"}));
        let e = parse(json!([{"type":"local_shell"},{"type":"local_shell"}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[1].type"));
        let e = parse(json!([{"type":"function","name":"apply_patch"},{"type":"custom","name":"apply_patch"}]))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[1].name"));
    }

    #[test]
    fn cached_only_web_search_is_accepted_without_a_backend() {
        let t = parse_tools(vec![json!({"type":"web_search","external_web_access":false})], &Capabilities::default())
            .unwrap();
        assert_eq!(serde_json::to_value(&t[0]).unwrap(), json!({"type":"web_search","external_web_access":false}));
        for live in [json!({"type":"web_search"}), json!({"type":"web_search","external_web_access":true})] {
            let e = parse_tools(vec![live], &Capabilities::default()).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].type")));
        }
        assert!(parse_tools(vec![], &Capabilities::default()).unwrap().is_empty(), "tools: [] is fine");
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
