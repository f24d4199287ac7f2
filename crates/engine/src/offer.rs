//! Which functions the model is offered in each turn of the tool loop, and the `tool_choice`
//! sent with them.
//!
//! The client's functions and the gateway tools are offered together. A forcing choice
//! (`required`, a named function, an MCP server or tool, `code_interpreter`) applies to the first
//! turn only: once a gateway tool has run, the model must be free to answer, or it would call
//! tools forever. `allowed_tools` narrows the offer in every turn. The last turn the loop allows
//! is sent with `tool_choice: "none"`, so the model answers with what it has.

use std::sync::Arc;

use respgw_protocol::tools::{
    AllowedTool, CODE_INTERPRETER_FUNCTION, CustomTool, LOCAL_SHELL_FUNCTION, McpToolChoice, ToolChoice,
    ToolChoiceMode, ToolDeclaration, WEB_SEARCH_FUNCTION, mcp_function_name, namespaced_function_name,
};
use respgw_protocol::{ApiError, ValidatedRequest};
use serde_json::json;

use crate::chat::{ToolOffer, function_spec};
use crate::gateway_tool::{FunctionSpec, GatewayKind, GatewayTool};

/// Where the loop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnPhase {
    /// No gateway tool has run yet.
    First,
    /// A gateway tool ran: forcing choices are lifted.
    AfterToolUse,
    /// The loop's last turn: no more tool calls.
    Last,
}

/// Everything the model could be offered, with where each function came from.
pub struct ToolMenu {
    entries: Vec<(FunctionSpec, Source)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Source {
    Client,
    Gateway(GatewayKind),
}

impl ToolMenu {
    pub fn new(request: &ValidatedRequest, gateway: &[Arc<dyn GatewayTool>]) -> Self {
        let client = request.tools.iter().flat_map(|t| match t {
            ToolDeclaration::Function(f) => vec![(function_spec(f), Source::Client)],
            ToolDeclaration::Namespace(ns) => ns
                .tools
                .iter()
                .map(|f| {
                    let mut spec = function_spec(f);
                    spec.name = namespaced_function_name(&ns.name, &f.name);
                    (spec, Source::Client)
                })
                .collect(),
            ToolDeclaration::Custom(c) => vec![(custom_spec(c), Source::Client)],
            ToolDeclaration::LocalShell(_) => vec![(local_shell_spec(), Source::Client)],
            _ => Vec::new(),
        });
        let gateway = gateway.iter().map(|t| (t.spec().clone(), Source::Gateway(t.kind().clone())));
        ToolMenu { entries: client.chain(gateway).collect() }
    }

    /// Check that a forced MCP tool exists on its server (only known once inventories are in).
    pub fn check_choice(&self, choice: &ToolChoice) -> Result<(), ApiError> {
        let mcp_choices: Vec<(&McpToolChoice, String)> = match choice {
            ToolChoice::Mcp(m) => vec![(m, "tool_choice.name".to_owned())],
            ToolChoice::AllowedTools(a) => a
                .tools
                .iter()
                .enumerate()
                .filter_map(|(i, t)| match t {
                    AllowedTool::Mcp(m) => Some((m, format!("tool_choice.tools[{i}].name"))),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        for (m, param) in mcp_choices {
            if let Some(name) = &m.name
                && !self.entries.iter().any(|(_, source)| matches_mcp(source, &m.server_label, Some(name)))
            {
                return Err(ApiError::bad_input(
                    param,
                    format!("`tool_choice.name` '{name}' is not a tool of MCP server '{}'.", m.server_label),
                ));
            }
        }
        Ok(())
    }

    /// The offer for one turn.
    pub fn offer(&self, choice: &ToolChoice, phase: TurnPhase) -> ToolOffer {
        let all = || self.entries.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>();
        let mode = |m: ToolChoiceMode| {
            let m = if phase == TurnPhase::AfterToolUse && m == ToolChoiceMode::Required {
                ToolChoiceMode::Auto
            } else {
                m
            };
            json!(match m {
                ToolChoiceMode::None => "none",
                ToolChoiceMode::Auto => "auto",
                ToolChoiceMode::Required => "required",
            })
        };
        let named = |name: &str| json!({"type": "function", "function": {"name": name}});
        let first = phase == TurnPhase::First;
        let (functions, tool_choice) = match choice {
            ToolChoice::Mode(m) => (all(), mode(*m)),
            ToolChoice::Function(f) if first => (all(), named(&f.name)),
            ToolChoice::CodeInterpreter(_) if first => (all(), named(CODE_INTERPRETER_FUNCTION)),
            ToolChoice::WebSearch(_) if first => (all(), named(WEB_SEARCH_FUNCTION)),
            ToolChoice::Mcp(m) if first => match &m.name {
                Some(tool) => (all(), named(&mcp_function_name(&m.server_label, tool))),
                // Any tool of that server: offer only its tools, and require a call.
                None => (self.select(|_, s| matches_mcp(s, &m.server_label, None)), json!("required")),
            },
            ToolChoice::Function(_)
            | ToolChoice::CodeInterpreter(_)
            | ToolChoice::WebSearch(_)
            | ToolChoice::Mcp(_) => (all(), json!("auto")),
            ToolChoice::AllowedTools(a) => (self.select(|f, s| a.tools.iter().any(|t| allows(t, f, s))), mode(a.mode)),
        };
        let tool_choice = if phase == TurnPhase::Last { json!("none") } else { tool_choice };
        ToolOffer { functions, tool_choice }
    }

    fn select(&self, keep: impl Fn(&FunctionSpec, &Source) -> bool) -> Vec<FunctionSpec> {
        self.entries.iter().filter(|(f, s)| keep(f, s)).map(|(f, _)| f.clone()).collect()
    }
}

/// The client functions whose calls are not reported as plain `function_call`s: functions of
/// `namespace` tools, `custom` tools and `local_shell`.
pub fn client_call_shapes(request: &ValidatedRequest) -> Vec<ClientFunction> {
    let mut shapes = Vec::new();
    for tool in &request.tools {
        match tool {
            ToolDeclaration::Namespace(ns) => shapes.extend(ns.tools.iter().map(|f| ClientFunction {
                flat_name: namespaced_function_name(&ns.name, &f.name),
                shape: ClientCallShape::Namespaced { namespace: ns.name.clone(), name: f.name.clone() },
            })),
            ToolDeclaration::Custom(c) => {
                shapes.push(ClientFunction { flat_name: c.name.clone(), shape: ClientCallShape::Custom })
            }
            ToolDeclaration::LocalShell(_) => shapes.push(ClientFunction {
                flat_name: LOCAL_SHELL_FUNCTION.to_owned(),
                shape: ClientCallShape::LocalShell,
            }),
            _ => {}
        }
    }
    shapes
}

/// A client function the model calls by `flat_name`, and how its calls are reported.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientFunction {
    pub flat_name: String,
    pub shape: ClientCallShape,
}

/// How a call is reported to the client.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientCallShape {
    /// A `function_call` with the function's own `name` and its `namespace`.
    Namespaced { namespace: String, name: String },
    /// A `custom_tool_call` whose `input` is the call's `input` argument.
    Custom,
    /// A `local_shell_call` whose `action` holds the command.
    LocalShell,
}

/// A `custom` tool as the model sees it: a function taking the free text as `input`.
fn custom_spec(tool: &CustomTool) -> FunctionSpec {
    let mut description = tool.description.clone().unwrap_or_default();
    if let Some(definition) = tool.format.as_ref().and_then(|f| f.get("definition")).and_then(|d| d.as_str()) {
        let syntax = tool.format.as_ref().and_then(|f| f.get("syntax")).and_then(|s| s.as_str()).unwrap_or("grammar");
        description.push_str(&format!("\n\nThe input must follow this {syntax}:\n{definition}"));
    }
    FunctionSpec {
        name: tool.name.clone(),
        description: (!description.is_empty()).then_some(description),
        parameters: json!({"type": "object", "properties": {"input": {"type": "string",
            "description": "The tool's input, as free text."}}, "required": ["input"], "additionalProperties": false}),
        strict: None,
    }
}

/// `local_shell` as the model sees it.
fn local_shell_spec() -> FunctionSpec {
    FunctionSpec {
        name: LOCAL_SHELL_FUNCTION.to_owned(),
        description: Some("Run a command on the user's machine and get its output.".to_owned()),
        parameters: json!({"type": "object", "properties": {
            "command": {"type": "array", "items": {"type": "string"}, "description": "The program and its arguments."},
            "workdir": {"type": "string", "description": "Working directory."},
            "timeout_ms": {"type": "integer", "description": "Time limit in milliseconds."}},
            "required": ["command"], "additionalProperties": false}),
        strict: None,
    }
}

/// Function names that belong to gateway tools, and what they are.
pub fn roster(gateway: &[Arc<dyn GatewayTool>]) -> Vec<(String, GatewayKind)> {
    gateway.iter().map(|t| (t.spec().name.clone(), t.kind().clone())).collect()
}

fn matches_mcp(source: &Source, label: &str, tool: Option<&str>) -> bool {
    matches!(source, Source::Gateway(GatewayKind::Mcp { server_label, tool_name })
        if server_label == label && tool.is_none_or(|t| t == tool_name))
}

/// Whether an `allowed_tools` entry admits a function, given where the function came from.
fn allows(entry: &AllowedTool, spec: &FunctionSpec, source: &Source) -> bool {
    match entry {
        AllowedTool::Function(f) => *source == Source::Client && spec.name == f.name,
        AllowedTool::CodeInterpreter(_) => *source == Source::Gateway(GatewayKind::CodeInterpreter),
        AllowedTool::WebSearch(_) => *source == Source::Gateway(GatewayKind::WebSearch),
        AllowedTool::Mcp(m) => matches_mcp(source, &m.server_label, m.name.as_deref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use respgw_protocol::{Capabilities, CreateResponseRequest};
    use serde_json::Value;

    use crate::gateway_tool::{GatewayCall, GatewayOutcome};

    struct Fake(FunctionSpec, GatewayKind);

    #[async_trait]
    impl GatewayTool for Fake {
        fn spec(&self) -> &FunctionSpec {
            &self.0
        }
        fn kind(&self) -> &GatewayKind {
            &self.1
        }
        async fn call(&self, _: GatewayCall<'_>) -> GatewayOutcome {
            GatewayOutcome::Mcp(Ok(String::new()))
        }
    }

    fn spec(name: &str) -> FunctionSpec {
        FunctionSpec { name: name.into(), description: None, parameters: json!({"type":"object"}), strict: None }
    }

    fn menu(body: Value) -> (ValidatedRequest, ToolMenu) {
        let caps = Capabilities {
            code_interpreter: true,
            builtin_mcp: true,
            remote_mcp: true,
            remote_url_checks: true,
            web_search: true,
        };
        let req = CreateResponseRequest::from_slice(body.to_string().as_bytes()).unwrap().validate(&caps).unwrap();
        let gateway: Vec<Arc<dyn GatewayTool>> = vec![
            Arc::new(Fake(spec("code_interpreter"), GatewayKind::CodeInterpreter)),
            Arc::new(Fake(
                spec("mcp__docs__search"),
                GatewayKind::Mcp { server_label: "docs".into(), tool_name: "search".into() },
            )),
            Arc::new(Fake(
                spec("mcp__docs__fetch"),
                GatewayKind::Mcp { server_label: "docs".into(), tool_name: "fetch".into() },
            )),
        ];
        let menu = ToolMenu::new(&req, &gateway);
        (req, menu)
    }

    fn names(offer: &ToolOffer) -> Vec<&str> {
        offer.functions.iter().map(|f| f.name.as_str()).collect()
    }

    const TOOLS: &str =
        r#"[{"type":"function","name":"weather"},{"type":"code_interpreter"},{"type":"mcp","server_label":"docs"}]"#;

    fn body(choice: Value) -> Value {
        json!({"model":"m","input":"x","tools":serde_json::from_str::<Value>(TOOLS).unwrap(),"tool_choice":choice})
    }

    #[test]
    fn client_and_gateway_functions_are_offered_together() {
        let (req, menu) = menu(body(json!("auto")));
        let offer = menu.offer(&req.tool_choice, TurnPhase::First);
        assert_eq!(names(&offer), ["weather", "code_interpreter", "mcp__docs__search", "mcp__docs__fetch"]);
        assert_eq!(offer.tool_choice, "auto");
    }

    #[test]
    fn forcing_choices_apply_to_the_first_turn_only() {
        for (choice, first) in [
            (json!("required"), json!("required")),
            (json!({"type":"function","name":"weather"}), json!({"type":"function","function":{"name":"weather"}})),
            (json!({"type":"code_interpreter"}), json!({"type":"function","function":{"name":"code_interpreter"}})),
            (
                json!({"type":"mcp","server_label":"docs","name":"fetch"}),
                json!({"type":"function","function":{"name":"mcp__docs__fetch"}}),
            ),
        ] {
            let (req, menu) = menu(body(choice.clone()));
            assert_eq!(menu.offer(&req.tool_choice, TurnPhase::First).tool_choice, first, "{choice}");
            assert_eq!(menu.offer(&req.tool_choice, TurnPhase::AfterToolUse).tool_choice, "auto", "{choice}");
        }
    }

    #[test]
    fn an_mcp_server_choice_offers_only_that_server() {
        let (req, menu) = menu(body(json!({"type":"mcp","server_label":"docs"})));
        let offer = menu.offer(&req.tool_choice, TurnPhase::First);
        assert_eq!(names(&offer), ["mcp__docs__search", "mcp__docs__fetch"]);
        assert_eq!(offer.tool_choice, "required");
    }

    #[test]
    fn allowed_tools_narrow_every_turn() {
        let (req, menu) = menu(body(json!({"type":"allowed_tools","mode":"required","tools":[
            {"type":"function","name":"weather"},{"type":"mcp","server_label":"docs","name":"search"}]})));
        let first = menu.offer(&req.tool_choice, TurnPhase::First);
        assert_eq!(names(&first), ["weather", "mcp__docs__search"]);
        assert_eq!(first.tool_choice, "required");
        let later = menu.offer(&req.tool_choice, TurnPhase::AfterToolUse);
        assert_eq!(names(&later), ["weather", "mcp__docs__search"]);
        assert_eq!(later.tool_choice, "auto");
    }

    #[test]
    fn the_last_turn_forbids_tool_calls() {
        let (req, menu) = menu(body(json!("required")));
        assert_eq!(menu.offer(&req.tool_choice, TurnPhase::Last).tool_choice, "none");
    }

    #[test]
    fn a_forced_mcp_tool_must_exist_on_its_server() {
        let (req, menu) = menu(body(json!({"type":"mcp","server_label":"docs","name":"nope"})));
        let e = menu.check_choice(&req.tool_choice).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (422, Some("tool_choice.name")));
    }
}
