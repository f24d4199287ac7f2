//! `local_shell`: the client runs commands on its machine (`local_shell_call` items the client
//! runs); at most one per request.

use serde::{Deserialize, Serialize};

use super::{ToolDeclaration, client_function_names};
use crate::error::ApiError;

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

/// `{"type":"local_shell"}` at `at`: refused when `earlier` already puts `local_shell` in front of
/// the model.
pub(super) fn parse(at: &str, earlier: &[ToolDeclaration]) -> Result<LocalShellTool, ApiError> {
    if earlier.iter().any(|t| client_function_names(t).iter().any(|n| n == LOCAL_SHELL_FUNCTION)) {
        return Err(ApiError::invalid(format!("{at}.type"), "Declare local_shell at most once."));
    }
    Ok(LocalShellTool { kind: LocalShellToolType::LocalShell })
}
