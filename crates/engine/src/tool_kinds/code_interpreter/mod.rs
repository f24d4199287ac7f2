//! `code_interpreter`: Python the model writes, run by the gateway in its sandbox.
//!
//! The model sees one function, `code_interpreter`, taking `{"code": "…"}` ([`function_spec`]).
//! A call's `code_interpreter_call` item is announced (with `…call.in_progress`) as soon as the
//! model names the function; its code streams as `code_interpreter_call_code.delta` events,
//! decoded from the JSON arguments as they arrive ([`code_stream`]), and ends with
//! `…call_code.done`. The item stays open while the code runs (`…call.interpreting`), then is done
//! with its outputs (`…call.completed`; the item's status is `failed` when the code failed or
//! could not run). Files persist in the conversation's container ([`Container`]). Clients
//! see the outputs only with `include: ["code_interpreter_call.outputs"]`; the model sees them
//! as text in later turns (the logs, and a note for each image).
//!
//! Executor: `respgw_tools::code_interpreter::Sandbox`, adapted for the engine in
//! `crates/tools/src/resolver/code_interpreter.rs`.

mod code_stream;

use respgw_protocol::ResponseEvent;
use respgw_protocol::ids::{IdKind, is_own_id, new_id};
use respgw_protocol::items::{CallStatus, CodeInterpreterCallItem, CodeInterpreterOutput, Item};
use respgw_protocol::tools::choice::AllowedTool;
use respgw_protocol::tools::code_interpreter::CODE_INTERPRETER_FUNCTION;
use respgw_telemetry::ToolType;
use serde_json::json;

use super::choice::ChoiceRule;
use super::{CallPlace, CompletedCall};
use crate::gateway_tool::FunctionSpec;
use code_stream::CodeStream;

pub const TOOL_TYPE: ToolType = ToolType::new("code_interpreter");

/// What running the code produced (successfully or not: an exception or a timeout is still an
/// outcome, shown in the logs).
#[derive(Debug, Clone, PartialEq)]
pub struct CodeInterpreterOutcome {
    pub outputs: Vec<CodeInterpreterOutput>,
    /// False when the code failed or the sandbox could not run it.
    pub ok: bool,
}

/// How the model sees the tool.
pub fn function_spec() -> FunctionSpec {
    FunctionSpec {
        name: CODE_INTERPRETER_FUNCTION.to_owned(),
        description: Some(
            "Run Python 3 code in a sandbox with numpy, pandas and matplotlib, without network access. \
             Files under the working directory persist between calls of this conversation. The value \
             of the last expression and everything printed is returned; figures saved as PNG (or \
             shown with plt.show()) are shown to the user."
                .to_owned(),
        ),
        parameters: json!({
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run."}},
            "required": ["code"],
            "additionalProperties": false
        }),
        strict: Some(true),
    }
}

/// The conversation's container, which a response's calls share (files persist in it): the id its
/// items show, and the sandbox's container that id names for the response's tenant.
#[derive(Debug, Clone)]
pub struct Container {
    id: String,
    /// The sandbox's container for `id` and the response's tenant: another tenant naming the same
    /// container id gets another, fresh one ([`sandbox_container`]).
    sandbox: String,
}

impl Container {
    /// The last container this gateway made that `history` used (another system's id starts
    /// afresh), or a new one, for tenant `owner`.
    pub(crate) fn of(history: &[Item], owner: &str) -> Self {
        let id = history
            .iter()
            .rev()
            .find_map(|item| match item {
                Item::CodeInterpreterCall(c) if is_own_id(IdKind::Container, &c.container_id) => {
                    Some(c.container_id.clone())
                }
                _ => None,
            })
            .unwrap_or_else(|| new_id(IdKind::Container));
        Container { sandbox: sandbox_container(owner, &id), id }
    }

    #[cfg(test)]
    pub(crate) fn with_id(id: &str) -> Self {
        Container { id: id.to_owned(), sandbox: sandbox_container("", id) }
    }

    /// The container id, as the call items show it.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The sandbox's container the calls run in: what the executor is given.
    pub fn sandbox(&self) -> &str {
        &self.sandbox
    }
}

/// The sandbox container that container id `container_id` names for tenant `owner`: the same
/// pair always gives the same container, and another owner naming the same id gets another one —
/// a container id copied from another tenant's items opens a fresh, empty container. It has the
/// container id format (`cntr_` + a UUID v7 shape; the bits come from SHA-256 of the pair, so
/// its time field means nothing), so the sandbox can use it as a directory name.
fn sandbox_container(owner: &str, container_id: &str) -> String {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [owner, container_id] {
        context.update(&(part.len() as u64).to_be_bytes());
        context.update(part.as_bytes());
    }
    let digest = context.finish();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest.as_ref()[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x70; // version 7
    bytes[8] = (bytes[8] & 0x3f) | 0x80; // RFC 4122 variant
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("cntr_{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

pub(crate) fn allowed_by(entry: &AllowedTool) -> bool {
    matches!(entry, AllowedTool::CodeInterpreter(_))
}

/// What `tool_choice: {"type": "code_interpreter"}` asks: a call of the tool's function.
pub(crate) fn forced() -> ChoiceRule<'static> {
    ChoiceRule::Function(CODE_INTERPRETER_FUNCTION.to_owned())
}

/// A `code_interpreter_call` from its announcement until the code has run.
#[derive(Debug)]
pub struct CallItem {
    pub(super) item: CodeInterpreterCallItem,
    pub(super) output_index: usize,
    /// The code decoded so far from the streaming arguments.
    code: CodeStream,
}

impl CallItem {
    pub(super) fn announce(place: CallPlace<'_>, events: &mut Vec<ResponseEvent>) -> Self {
        let item = CodeInterpreterCallItem {
            id: place.turn.new_id(IdKind::CodeInterpreterCall),
            status: CallStatus::InProgress,
            code: String::new(),
            container_id: place.container_id.to_owned(),
            outputs: None,
        };
        let output_index = place.output_index;
        events.push(ResponseEvent::OutputItemAdded {
            output_index,
            item: Box::new(Item::CodeInterpreterCall(item.clone())),
        });
        events.push(ResponseEvent::CodeInterpreterCallInProgress { item_id: item.id.clone(), output_index });
        CallItem { item, output_index, code: CodeStream::default() }
    }

    /// The code the call runs (complete once the arguments are).
    pub fn code(&self) -> &str {
        &self.item.code
    }

    pub(super) fn on_arguments(&mut self, fragment: &str, events: &mut Vec<ResponseEvent>) {
        let delta = self.code.push(fragment);
        if !delta.is_empty() {
            events.push(ResponseEvent::CodeInterpreterCallCodeDelta {
                item_id: self.item.id.clone(),
                output_index: self.output_index,
                delta,
            });
        }
    }

    pub(super) fn arguments_done(&mut self, arguments: &str, events: &mut Vec<ResponseEvent>) {
        let (code, rest) = std::mem::take(&mut self.code).finish(arguments);
        let (item_id, output_index) = (self.item.id.clone(), self.output_index);
        if !rest.is_empty() {
            events.push(ResponseEvent::CodeInterpreterCallCodeDelta {
                item_id: item_id.clone(),
                output_index,
                delta: rest,
            });
        }
        events.push(ResponseEvent::CodeInterpreterCallCodeDone { item_id, output_index, code: code.clone() });
        self.item.code = code;
    }

    pub(super) fn running_event(&self) -> ResponseEvent {
        ResponseEvent::CodeInterpreterCallInterpreting {
            item_id: self.item.id.clone(),
            output_index: self.output_index,
        }
    }

    pub(super) fn complete(self, outcome: CodeInterpreterOutcome) -> CompletedCall {
        let done_event = ResponseEvent::CodeInterpreterCallCompleted {
            item_id: self.item.id.clone(),
            output_index: self.output_index,
        };
        let item = CodeInterpreterCallItem {
            status: if outcome.ok { CallStatus::Completed } else { CallStatus::Failed },
            outputs: Some(outcome.outputs),
            ..self.item
        };
        CompletedCall { item: Item::CodeInterpreterCall(item), ok: outcome.ok, done_event }
    }
}

/// The item as a client sees it: outputs only when `include` asks.
pub(crate) fn present(item: &CodeInterpreterCallItem, include: &[String]) -> CodeInterpreterCallItem {
    if include.iter().any(|i| i == "code_interpreter_call.outputs") {
        item.clone()
    } else {
        CodeInterpreterCallItem { outputs: None, ..item.clone() }
    }
}

/// The function call the item stands for: its name and arguments.
pub(crate) fn replayed_call(item: &CodeInterpreterCallItem) -> (String, String) {
    (CODE_INTERPRETER_FUNCTION.to_owned(), json!({"code": item.code}).to_string())
}

/// What the model is told the code produced: its logs, and a note for the images.
pub(crate) fn result_text(item: &CodeInterpreterCallItem) -> String {
    let outputs = item.outputs.as_deref().unwrap_or_default();
    let mut text = String::new();
    let mut images = 0;
    for output in outputs {
        match output {
            CodeInterpreterOutput::Logs { logs } => {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(logs);
            }
            CodeInterpreterOutput::Image { .. } => images += 1,
        }
    }
    if images > 0 {
        text.push_str(&format!("\n[{images} image(s) produced and shown to the user]"));
    }
    if text.trim().is_empty() {
        text = "(no output)".into();
    }
    text
}

#[cfg(test)]
mod tenant_tests {
    use super::*;

    #[test]
    fn sandbox_container_is_per_tenant_and_stable() {
        let id = new_id(IdKind::Container);
        let alpha = sandbox_container("alpha", &id);
        assert_eq!(alpha, sandbox_container("alpha", &id), "the same pair, the same container");
        assert_ne!(alpha, sandbox_container("beta", &id), "another tenant, another container");
        assert_ne!(alpha, sandbox_container("alph", &format!("a{id}")), "the pair is encoded unambiguously");
        assert!(is_own_id(IdKind::Container, &alpha), "{alpha}");
        let uuid = alpha.strip_prefix("cntr_").expect("a container id");
        assert_eq!((uuid.len(), &uuid[14..15], uuid.to_ascii_lowercase()), (36, "7", uuid.to_owned()), "{uuid}");
    }
}
