//! Tool declarations: what a request may ask the model to use, the rules that make a declaration
//! valid, and how the gateway's own tools are named for the model. One module per tool kind holds
//! that kind's declaration and its parsing; [`choice`] holds `tool_choice`.
//!
//! Client tools (the client runs them): `function`s, also grouped in a `namespace` as Codex sends
//! them, `custom` tools and `local_shell`. Gateway tools (the gateway runs them):
//! `code_interpreter`, `file_search`, `mcp` and `web_search`. A `web_search` restricted to cached results
//! (`external_web_access: false`, what Codex sends by default) is accepted and left out of the
//! model's offer while no search backend is configured. Which gateway tools exist is a property of
//! the running gateway ([`Capabilities`]); declaring one that is not enabled is a clear 400.
//! Everything here is pure: checks that need the network (an MCP server's inventory, DNS of a
//! remote URL) happen when the engine resolves the tools.

pub mod choice;
pub mod code_interpreter;
pub mod custom;
pub mod file_search;
pub mod function;
pub mod local_shell;
pub mod mcp;
pub mod namespace;
pub mod web_search;

use serde::Serialize;
use serde_json::Value;

use self::code_interpreter::{CODE_INTERPRETER_FUNCTION, CodeInterpreterTool};
use self::custom::CustomTool;
use self::file_search::{FILE_SEARCH_FUNCTION, FileSearchTool};
use self::function::FunctionTool;
use self::local_shell::{LOCAL_SHELL_FUNCTION, LocalShellTool};
use self::mcp::McpTool;
use self::namespace::{NamespaceTool, namespaced_function_name};
use self::web_search::{OfflineWebSearch, WEB_SEARCH_FUNCTION, WEB_SEARCH_TYPES, WebSearchTool};
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
    /// `file_search` has the retrieval service (vector stores) to search.
    pub file_search: bool,
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
    FileSearch(FileSearchTool),
    /// A declaration accepted but not offered to the model (see [`OfflineWebSearch`]).
    OfflineWebSearch(OfflineWebSearch),
    Custom(CustomTool),
    LocalShell(LocalShellTool),
}

/// Tool types of the Responses API that this gateway does not run. A request naming one gets a
/// clear 400 rather than a silently missing tool.
const UNSUPPORTED_TOOL_TYPES: &[&str] = &["computer_use_preview", "image_generation"];

/// OpenAI's rule for function and schema names.
pub fn is_valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
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
            "function" => ToolDeclaration::Function(function::parse(tool, &at, &tools)?),
            "namespace" => ToolDeclaration::Namespace(namespace::parse(tool, &at, &tools)?),
            "custom" => ToolDeclaration::Custom(custom::parse(tool, &at, &tools)?),
            "local_shell" => ToolDeclaration::LocalShell(local_shell::parse(&at, &tools)?),
            "code_interpreter" => ToolDeclaration::CodeInterpreter(code_interpreter::parse(tool, &at, &tools, caps)?),
            "mcp" => ToolDeclaration::Mcp(mcp::parse(tool, &at, &tools, caps)?),
            "file_search" => ToolDeclaration::FileSearch(file_search::parse(tool, &at, &tools, caps)?),
            k if WEB_SEARCH_TYPES.contains(&k) => web_search::parse(tool, k, &at, &tools, caps)?,
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
        "file_search" => {
            "it runs only with the gateway's retrieval service (vector stores), which this gateway was \
             started without"
        }
        _ => "this gateway does not run it. Declare a function tool instead and run it in the client",
    };
    ApiError::invalid(format!("{at}.type"), format!("Tool type '{kind}' is not enabled on this gateway: {why}."))
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
        ToolDeclaration::FileSearch(_) => vec![FILE_SEARCH_FUNCTION.to_owned()],
        ToolDeclaration::Mcp(_) | ToolDeclaration::OfflineWebSearch(_) => Vec::new(),
    }
}

/// `plain` cut to leave room for a short hash of the (`first`, `second`) pair, which is appended,
/// so two different pairs never share a name within the 64 characters every upstream accepts.
fn hashed_function_name(plain: &str, first: &str, second: &str) -> String {
    // FNV-1a: tiny, stable across versions and platforms (unlike std's hasher).
    let hash = format!("{first}\u{0}{second}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    let suffix = format!("_{:08x}", hash as u32);
    let mut name: String = plain.chars().take(64 - suffix.len()).collect();
    name.push_str(&suffix);
    name
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) const ALL: Capabilities = Capabilities {
        code_interpreter: true,
        builtin_mcp: true,
        remote_mcp: true,
        remote_url_checks: true,
        web_search: true,
        file_search: true,
    };

    pub(crate) fn parse(tools: Value) -> Result<Vec<ToolDeclaration>, ApiError> {
        parse_tools(serde_json::from_value(tools).unwrap(), &ALL)
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
}
