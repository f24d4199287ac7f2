//! `namespace` tools: client functions grouped under a name, as Codex sends them, and the flat
//! function names under which the model sees them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::function::{self, FunctionTool};
use super::{ToolDeclaration, client_function_names, hashed_function_name, is_valid_name};
use crate::error::ApiError;

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

#[derive(Deserialize)]
struct NamespaceToolParam {
    name: String,
    #[serde(default)]
    description: Option<String>,
    tools: Vec<Value>,
}

pub(super) fn parse(tool: Value, at: &str, earlier: &[ToolDeclaration]) -> Result<NamespaceTool, ApiError> {
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
        let f = function::parse(inner, &inner_at, &[])?;
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
/// are shortened with a hash, like [`mcp_function_name`](super::mcp::mcp_function_name)).
pub fn namespaced_function_name(namespace: &str, function: &str) -> String {
    let plain = format!("{namespace}__{function}");
    if plain.len() <= 64 {
        return plain;
    }
    hashed_function_name(&plain, namespace, function)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::is_valid_name;
    use crate::tools::tests::parse;
    use serde_json::json;

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
}
