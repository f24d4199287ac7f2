//! `tool_choice` in terms of the functions offered, each kind answering for the choices that
//! name it: what a choice asks of a model turn ([`ChoiceRule`], [`rule`]), whether an
//! `allowed_tools` entry admits a function, and the check that a forced tool is offered at all
//! ([`check`]). `offer.rs` applies the rule to each turn without knowing any kind.

use respgw_protocol::ApiError;
use respgw_protocol::tools::choice::{AllowedTool, ToolChoice, ToolChoiceMode};

use super::{CallTarget, client, code_interpreter, file_search, mcp, web_search};
use crate::gateway_tool::FunctionSpec;

/// Whether a function is admitted, given how the model sees it and who runs it.
pub(crate) type Admits<'a> = Box<dyn Fn(&FunctionSpec, &CallTarget) -> bool + 'a>;

/// What a `tool_choice` asks of the model's turns.
pub(crate) enum ChoiceRule<'a> {
    /// `none`, `auto` or `required`, in every turn.
    Mode(ToolChoiceMode),
    /// `allowed_tools`: only the functions it admits are offered, in its mode, in every turn.
    Allowed { mode: ToolChoiceMode, admits: Admits<'a> },
    /// A call of this one function in the first turn; every function stays offered.
    Function(String),
    /// A call of one of the functions it admits in the first turn, and only those are offered
    /// (an MCP server named without a tool).
    OneOf(Admits<'a>),
}

/// What `choice` asks of the model's turns.
pub(crate) fn rule(choice: &ToolChoice) -> ChoiceRule<'_> {
    match choice {
        ToolChoice::Mode(mode) => ChoiceRule::Mode(*mode),
        ToolChoice::AllowedTools(a) => ChoiceRule::Allowed {
            mode: a.mode,
            admits: Box::new(|spec, target| a.tools.iter().any(|entry| allows(entry, spec, target))),
        },
        ToolChoice::Function(f) => ChoiceRule::Function(f.name.clone()),
        ToolChoice::CodeInterpreter(_) => code_interpreter::forced(),
        ToolChoice::WebSearch(_) => web_search::forced(),
        ToolChoice::FileSearch(_) => file_search::forced(),
        ToolChoice::Mcp(m) => mcp::forced(m),
    }
}

/// Whether an `allowed_tools` entry admits a function, given who runs it.
fn allows(entry: &AllowedTool, spec: &FunctionSpec, target: &CallTarget) -> bool {
    match target {
        CallTarget::Client(_) => client::allowed_by(entry, spec),
        CallTarget::Gateway(kind) => kind.allowed_by(entry),
        CallTarget::McpApproval { server_label, tool_name } => mcp::allowed_by(entry, server_label, tool_name),
    }
}

/// Check that every tool `choice` names is among `targets`, the functions offered (known only
/// once the gateway tools are resolved): a forced MCP tool must be one its server has.
pub(crate) fn check<'a>(
    choice: &ToolChoice,
    targets: impl Iterator<Item = &'a CallTarget> + Clone,
) -> Result<(), ApiError> {
    match choice {
        ToolChoice::Mcp(m) => mcp::check_choice(m, "tool_choice.name", targets),
        ToolChoice::AllowedTools(a) => {
            for (i, entry) in a.tools.iter().enumerate() {
                match entry {
                    AllowedTool::Mcp(m) => {
                        mcp::check_choice(m, &format!("tool_choice.tools[{i}].name"), targets.clone())?
                    }
                    AllowedTool::Function(_)
                    | AllowedTool::CodeInterpreter(_)
                    | AllowedTool::WebSearch(_)
                    | AllowedTool::FileSearch(_) => {}
                }
            }
            Ok(())
        }
        ToolChoice::Mode(_)
        | ToolChoice::Function(_)
        | ToolChoice::CodeInterpreter(_)
        | ToolChoice::WebSearch(_)
        | ToolChoice::FileSearch(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use respgw_protocol::tools::choice::parse_tool_choice;
    use serde_json::json;

    use crate::tool_kinds::GatewayKind;

    fn forced_function(choice: serde_json::Value) -> Option<String> {
        match rule(&parse_tool_choice(choice).unwrap()) {
            ChoiceRule::Function(name) => Some(name),
            ChoiceRule::Mode(_) | ChoiceRule::Allowed { .. } | ChoiceRule::OneOf(_) => None,
        }
    }

    #[test]
    fn a_choice_naming_a_tool_forces_its_function() {
        assert_eq!(forced_function(json!({"type":"function","name":"f"})).as_deref(), Some("f"));
        assert_eq!(forced_function(json!({"type":"code_interpreter"})).as_deref(), Some("code_interpreter"));
        assert_eq!(forced_function(json!({"type":"web_search"})).as_deref(), Some("web_search"));
        assert_eq!(forced_function(json!({"type":"file_search"})).as_deref(), Some("file_search"));
        let mcp_tool = json!({"type":"mcp","server_label":"docs","name":"fetch"});
        assert_eq!(forced_function(mcp_tool).as_deref(), Some("mcp__docs__fetch"));
        assert_eq!(forced_function(json!("required")), None);
    }

    #[test]
    fn an_mcp_server_without_a_tool_forces_one_of_its_tools() {
        let choice = parse_tool_choice(json!({"type":"mcp","server_label":"docs"})).unwrap();
        let ChoiceRule::OneOf(admits) = rule(&choice) else { panic!("not a group") };
        let spec = FunctionSpec { name: "x".into(), description: None, parameters: json!({}), strict: None };
        let tool_of =
            |label: &str| CallTarget::Gateway(GatewayKind::Mcp { server_label: label.into(), tool_name: "t".into() });
        assert!(admits(&spec, &tool_of("docs")));
        assert!(!admits(&spec, &tool_of("other")));
        assert!(!admits(&spec, &CallTarget::Gateway(GatewayKind::WebSearch)));
    }
}
