//! `code_interpreter_call` items: the code the gateway ran in its sandbox and what it produced.

use serde::{Deserialize, Serialize};

use super::CallStatus;

/// A `code_interpreter` call the gateway ran. All keys are always present (`outputs` is `null`
/// unless the request's `include` asks for them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeInterpreterCallItem {
    pub id: String,
    pub status: CallStatus,
    pub code: String,
    pub container_id: String,
    pub outputs: Option<Vec<CodeInterpreterOutput>>,
}

/// One output of a code interpreter call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CodeInterpreterOutput {
    /// Text the code printed (stdout, stderr) or the value of its last expression.
    Logs { logs: String },
    /// An image the code wrote, as a `data:image/png;base64,…` URL.
    Image { url: String },
}
