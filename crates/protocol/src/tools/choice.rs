//! `tool_choice`: which of the declared tools the model may or must call, and the rules between
//! `tool_choice` and `tools`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ToolDeclaration;
use super::code_interpreter::CodeInterpreterToolType;
use super::file_search::FileSearchToolType;
use super::function::FunctionToolType;
use super::mcp::McpToolType;
use super::web_search::{WEB_SEARCH_TYPES, WebSearchToolType};
use crate::error::ApiError;

/// `tool_choice` as the gateway understands it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolChoice {
    Mode(ToolChoiceMode),
    Function(NamedFunction),
    Mcp(McpToolChoice),
    CodeInterpreter(CodeInterpreterChoice),
    WebSearch(WebSearchChoice),
    FileSearch(FileSearchChoice),
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

/// `{"type":"file_search"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSearchChoice {
    #[serde(rename = "type")]
    pub kind: FileSearchToolType,
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
    FileSearch(FileSearchChoice),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllowedToolsType {
    AllowedTools,
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
        "file_search" => serde_path_to_error::deserialize(v).map(ToolChoice::FileSearch),
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
const ALLOWED_TOOL_TYPES: &[&str] = &["function", "mcp", "code_interpreter", "web_search", "file_search"];

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
            "file_search" => serde_path_to_error::deserialize(entry).map(AllowedTool::FileSearch),
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
    let has_file_search = || tools.iter().any(|t| matches!(t, ToolDeclaration::FileSearch(_)));
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
        ToolChoice::FileSearch(_) if !has_file_search() => {
            missing("tool_choice.type".into(), "Tool choice 'file_search'".into())
        }
        ToolChoice::Mode(_)
        | ToolChoice::Function(_)
        | ToolChoice::Mcp(_)
        | ToolChoice::CodeInterpreter(_)
        | ToolChoice::WebSearch(_)
        | ToolChoice::FileSearch(_) => Ok(()),
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
                    AllowedTool::FileSearch(_) if !has_file_search() => {
                        return missing(format!("tool_choice.tools[{i}].type"), "Allowed tool 'file_search'".into());
                    }
                    AllowedTool::Function(_)
                    | AllowedTool::Mcp(_)
                    | AllowedTool::CodeInterpreter(_)
                    | AllowedTool::WebSearch(_)
                    | AllowedTool::FileSearch(_) => {}
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::tests::parse;
    use serde_json::json;

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
    fn mcp_tool_choice_needs_a_declaration() {
        let tools = parse(json!([{"type":"mcp","server_label":"docs"}])).unwrap();
        let choice = parse_tool_choice(json!({"type":"mcp","server_label":"other","name":"t"})).unwrap();
        let e = check_tool_choice(&choice, &tools).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (422, Some("tool_choice.server_label")));
        let ok = parse_tool_choice(json!({"type":"mcp","server_label":"docs"})).unwrap();
        assert!(check_tool_choice(&ok, &tools).is_ok());
    }
}
