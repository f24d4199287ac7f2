//! `function` tools: a client-executed function, its declaration and the rules that make it valid.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ToolDeclaration, client_function_names, is_valid_name};
use crate::error::ApiError;

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

pub(super) fn parse(tool: Value, at: &str, earlier: &[ToolDeclaration]) -> Result<FunctionTool, ApiError> {
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
