//! `code_interpreter`: the gateway runs the model's Python in its sandbox. Its declaration, the
//! function name the model sees, and the rules (enabled on this gateway, at most once).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Capabilities, ToolDeclaration, tool_not_enabled};
use crate::error::ApiError;

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

/// The function name under which the model sees `code_interpreter`.
pub const CODE_INTERPRETER_FUNCTION: &str = "code_interpreter";

/// `{"type":"code_interpreter",…}` at `at`, when this gateway runs it and `earlier` holds none.
pub(super) fn parse(
    tool: Value,
    at: &str,
    earlier: &[ToolDeclaration],
    caps: &Capabilities,
) -> Result<CodeInterpreterTool, ApiError> {
    if !caps.code_interpreter {
        return Err(tool_not_enabled(at, "code_interpreter"));
    }
    if earlier.iter().any(|t| matches!(t, ToolDeclaration::CodeInterpreter(_))) {
        return Err(ApiError::invalid(format!("{at}.type"), "Declare code_interpreter at most once."));
    }
    let container = tool.get("container").cloned().unwrap_or_else(|| serde_json::json!({"type": "auto"}));
    Ok(CodeInterpreterTool { kind: CodeInterpreterToolType::CodeInterpreter, container })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::parse_tools;
    use crate::tools::tests::parse;
    use serde_json::json;

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
}
