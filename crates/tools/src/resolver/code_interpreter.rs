//! `code_interpreter` for the engine: the model's `{"code": "…"}` run in the [`Sandbox`], its
//! printout, last value and figures made the call's outputs. The engine side of the kind (its
//! item, events and history) is `respgw_engine::tool_kinds::code_interpreter`.

use async_trait::async_trait;
use base64::Engine as _;
use respgw_engine::tool_kinds::code_interpreter;
use respgw_engine::{CodeInterpreterOutcome, FunctionSpec, GatewayCall, GatewayKind, GatewayOutcome, GatewayTool};
use respgw_protocol::items::CodeInterpreterOutput;
use serde_json::Value;

use crate::code_interpreter::{ExecutionStatus, Sandbox};

/// `code_interpreter`: the model sends `{"code": "…"}`, the sandbox runs it.
pub(super) struct CodeInterpreterTool {
    sandbox: Sandbox,
    spec: FunctionSpec,
    kind: GatewayKind,
}

impl CodeInterpreterTool {
    pub(super) fn new(sandbox: Sandbox) -> Self {
        CodeInterpreterTool { sandbox, spec: code_interpreter::function_spec(), kind: GatewayKind::CodeInterpreter }
    }
}

#[async_trait]
impl GatewayTool for CodeInterpreterTool {
    fn spec(&self) -> &FunctionSpec {
        &self.spec
    }

    fn kind(&self) -> &GatewayKind {
        &self.kind
    }

    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome {
        let code = serde_json::from_str::<Value>(call.arguments)
            .ok()
            .and_then(|v| v.get("code").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_else(|| call.arguments.to_owned());
        match self.sandbox.execute(call.state.code_interpreter().sandbox(), &code).await {
            Ok(execution) => {
                let mut outputs = Vec::new();
                let mut logs = String::new();
                for text in [&execution.stdout, &execution.stderr] {
                    if !text.is_empty() {
                        logs.push_str(text);
                        if !logs.ends_with('\n') {
                            logs.push('\n');
                        }
                    }
                }
                let ran = matches!(execution.status, ExecutionStatus::Success | ExecutionStatus::Error);
                if !ran {
                    logs.push_str(&format!("[{}]\n", execution.status));
                }
                if !logs.is_empty() {
                    outputs.push(CodeInterpreterOutput::Logs { logs });
                }
                if let Some(result) = execution.result {
                    outputs.push(CodeInterpreterOutput::Logs { logs: result });
                }
                for png in &execution.images {
                    let data = base64::engine::general_purpose::STANDARD.encode(png);
                    outputs.push(CodeInterpreterOutput::Image { url: format!("data:image/png;base64,{data}") });
                }
                GatewayOutcome::CodeInterpreter(CodeInterpreterOutcome { outputs, ok: ran })
            }
            Err(e) => GatewayOutcome::CodeInterpreter(CodeInterpreterOutcome {
                outputs: vec![CodeInterpreterOutput::Logs { logs: format!("[{e}]") }],
                ok: false,
            }),
        }
    }
}
