//! `code_execution_20250522` on the gateway's `code_interpreter` (Python in its sandbox): the
//! declaration, the `server_tool_use` + `code_execution_tool_result` blocks a
//! `code_interpreter_call` item stands for, and those blocks replayed as the item again.
//!
//! - Only `code_execution_20250522` (Python) is offered: `code_execution_20250825` gives the
//!   model bash and a file editor, which the gateway's sandbox does not run, so it is refused.
//! - The call's `input` is `{"code"}`. Its result is a `code_execution_result`: the sandbox keeps
//!   one log of what the code printed, which is `stdout` with `return_code` 0 when the code ran,
//!   and `stderr` with `return_code` 1 when it failed (an exception, a timeout). Its `content` is
//!   empty: images the code wrote are not files the client could fetch (there is no Files API).
//! - Replay: the blocks become the item with the code and its log, so the model reads the same
//!   log as when the code ran (less the note about images, which are not replayed).

use respgw_protocol::ApiError;
use respgw_protocol::items::{CallStatus, CodeInterpreterCallItem, CodeInterpreterOutput};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ReplayedCall, invalid, typed};
use crate::reply::ContentBlock;

/// The `name` of Anthropic's code execution tool, in declarations and `server_tool_use` blocks.
pub const TOOL_NAME: &str = "code_execution";

#[derive(Deserialize)]
struct DeclarationFields {
    name: String,
}

/// Check a `code_execution_20250522` declaration at `at`.
pub fn parse_declaration(value: Value, at: &str) -> Result<(), ApiError> {
    let fields: DeclarationFields = typed(value, at)?;
    if fields.name != TOOL_NAME {
        return Err(invalid(&format!("{at}.name"), format!("the code execution tool must be named '{TOOL_NAME}'")));
    }
    Ok(())
}

/// The engine's `code_interpreter` declaration.
pub fn engine_tool() -> Value {
    json!({"type": "code_interpreter", "container": {"type": "auto"}})
}

/// The blocks a `code_interpreter_call` item stands for: its call and its result.
pub fn blocks(item: &CodeInterpreterCallItem, id: String) -> Vec<ContentBlock> {
    let log = log_of(item.outputs.as_deref().unwrap_or_default());
    let failed = item.status == CallStatus::Failed;
    let (stdout, stderr) = if failed { (String::new(), log) } else { (log, String::new()) };
    let content = json!({
        "type": "code_execution_result",
        "stdout": stdout,
        "stderr": stderr,
        "return_code": i32::from(failed),
        "content": [],
    });
    vec![
        ContentBlock::ServerToolUse { id: id.clone(), name: TOOL_NAME.to_owned(), input: json!({"code": item.code}) },
        ContentBlock::CodeExecutionToolResult { tool_use_id: id, content },
    ]
}

/// The sandbox's logs as one text, joined as the model reads them.
fn log_of(outputs: &[CodeInterpreterOutput]) -> String {
    let mut log = String::new();
    for output in outputs {
        if let CodeInterpreterOutput::Logs { logs } = output {
            if !log.is_empty() && !log.ends_with('\n') {
                log.push('\n');
            }
            log.push_str(logs);
        }
    }
    log
}

/// A replayed `code_execution_tool_result`'s `content`.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayedResult {
    /// `code_execution_result`.
    Ran { stdout: String, stderr: String, return_code: i64 },
    /// `code_execution_tool_result_error` with its `error_code`.
    Error(String),
}

#[derive(Deserialize)]
struct RanFields {
    #[serde(default)]
    stdout: String,
    #[serde(default)]
    stderr: String,
    return_code: i64,
}

#[derive(Deserialize)]
struct ErrorFields {
    error_code: String,
}

/// Parse a replayed `code_execution_tool_result`'s `content` at `at`.
pub fn parse_result(content: Value, at: &str) -> Result<ReplayedResult, ApiError> {
    match content.get("type").and_then(Value::as_str) {
        Some("code_execution_result") => typed::<RanFields>(content, at).map(|ran| ReplayedResult::Ran {
            stdout: ran.stdout,
            stderr: ran.stderr,
            return_code: ran.return_code,
        }),
        Some("code_execution_tool_result_error") => {
            typed::<ErrorFields>(content, at).map(|error| ReplayedResult::Error(error.error_code))
        }
        _ => Err(invalid(at, "expected a code_execution_result or a code_execution_tool_result_error")),
    }
}

/// The engine's `code_interpreter_call` item for a replayed call and its result.
pub fn replayed_item(call: &ReplayedCall, result: ReplayedResult) -> Value {
    let code = call.input.get("code").and_then(Value::as_str).unwrap_or_default();
    let (log, ok) = match result {
        ReplayedResult::Ran { stdout, stderr, return_code } => {
            let log = match (stdout.is_empty(), stderr.is_empty()) {
                (_, true) => stdout,
                (true, false) => stderr,
                (false, false) => format!("{stdout}\n{stderr}"),
            };
            (log, return_code == 0)
        }
        ReplayedResult::Error(code) => (format!("The code could not run ({code})."), false),
    };
    let outputs = if log.is_empty() { json!([]) } else { json!([{"type": "logs", "logs": log}]) };
    json!({
        "type": "code_interpreter_call",
        "id": call.item_id,
        "status": if ok { "completed" } else { "failed" },
        "code": code,
        "container_id": "",
        "outputs": outputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(status: CallStatus, logs: &[&str]) -> CodeInterpreterCallItem {
        CodeInterpreterCallItem {
            id: "ci_1".into(),
            status,
            code: "print(6*7)".into(),
            container_id: "cntr_1".into(),
            outputs: Some(logs.iter().map(|logs| CodeInterpreterOutput::Logs { logs: (*logs).to_owned() }).collect()),
        }
    }

    #[test]
    fn a_run_is_its_code_and_its_log_as_stdout() {
        let blocks = blocks(&item(CallStatus::Completed, &["42\n"]), "srvtoolu_ci_1".into());
        assert_eq!(
            serde_json::to_value(&blocks).unwrap(),
            json!([
                {"type": "server_tool_use", "id": "srvtoolu_ci_1", "name": "code_execution", "input": {"code": "print(6*7)"}},
                {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_ci_1", "content": {
                    "type": "code_execution_result", "stdout": "42\n", "stderr": "", "return_code": 0, "content": []}},
            ])
        );
    }

    #[test]
    fn a_failed_run_is_its_log_as_stderr_with_return_code_1() {
        let blocks = blocks(&item(CallStatus::Failed, &["Traceback", "ZeroDivisionError"]), "srvtoolu_ci_1".into());
        let ContentBlock::CodeExecutionToolResult { content, .. } = &blocks[1] else { panic!() };
        assert_eq!(content["stderr"], "Traceback\nZeroDivisionError");
        assert_eq!(content["return_code"], 1);
    }

    #[test]
    fn replay_is_the_code_and_the_same_log() {
        for status in [CallStatus::Completed, CallStatus::Failed] {
            let original = item(status, &["a", "b\n"]);
            let blocks = blocks(&original, "srvtoolu_ci_1".into());
            let [ContentBlock::ServerToolUse { input, .. }, ContentBlock::CodeExecutionToolResult { content, .. }] =
                blocks.as_slice()
            else {
                panic!()
            };
            let call = ReplayedCall { item_id: "ci_1".into(), input: input.as_object().unwrap().clone() };
            let replayed = replayed_item(&call, parse_result(content.clone(), "content").unwrap());
            assert_eq!(replayed["code"], "print(6*7)");
            assert_eq!(replayed["outputs"], json!([{"type": "logs", "logs": "a\nb\n"}]));
            assert_eq!(replayed["status"], json!(status));
        }
    }

    #[test]
    fn the_tool_must_be_named_code_execution() {
        let at = "tools[1]";
        assert!(parse_declaration(json!({"type": "code_execution_20250522", "name": "code_execution"}), at).is_ok());
        let misnamed = json!({"type": "code_execution_20250522", "name": "python"});
        assert_eq!(parse_declaration(misnamed, at).unwrap_err().param.as_deref(), Some("tools[1].name"));
    }
}
