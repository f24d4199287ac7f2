//! `custom` tools: client tools taking free text (`custom_tool_call` items the client runs).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ToolDeclaration, client_function_names, is_valid_name};
use crate::error::ApiError;

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

#[derive(Deserialize)]
struct CustomToolParam {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    format: Option<Value>,
}

pub(super) fn parse(tool: Value, at: &str, earlier: &[ToolDeclaration]) -> Result<CustomTool, ApiError> {
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
