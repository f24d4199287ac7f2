//! Which functions the model is offered in each turn of the tool loop, and the `tool_choice`
//! sent with them.
//!
//! The client's functions and the gateway tools are offered together. What a `tool_choice` asks
//! is said by the kinds it names (`tool_kinds/choice.rs`); a forcing choice (`required`, a named
//! function, a gateway tool or a group of them) applies to the first turn only: once a gateway
//! tool has run, the model must be free to answer, or it would call tools forever.
//! `allowed_tools` narrows the offer in every turn. The last turn the loop allows is sent with
//! `tool_choice: "none"`, so the model answers with what it has.

use std::sync::Arc;

use respgw_protocol::tools::choice::{ToolChoice, ToolChoiceMode};
use respgw_protocol::{ApiError, ValidatedRequest};
use serde_json::json;

use crate::chat::ToolOffer;
use crate::gateway_tool::{FunctionSpec, GatewayTool};
use crate::tool_kinds::{CallTarget, ChoiceRule, choice, client};

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

/// Everything the model could be offered, with who runs each function.
pub struct ToolMenu {
    entries: Vec<(FunctionSpec, CallTarget)>,
}

impl ToolMenu {
    pub fn new(request: &ValidatedRequest, gateway: &[Arc<dyn GatewayTool>]) -> Self {
        let client = client::offered(request).into_iter().map(|(spec, shape)| (spec, CallTarget::Client(shape)));
        let gateway = gateway.iter().map(|t| (t.spec().clone(), CallTarget::Gateway(t.kind().clone())));
        ToolMenu { entries: client.chain(gateway).collect() }
    }

    /// Check that the tools `choice` forces are on the menu (for some kinds, e.g. an MCP server's
    /// tools, only known once the gateway tools are resolved).
    pub fn check_choice(&self, choice: &ToolChoice) -> Result<(), ApiError> {
        choice::check(choice, self.entries.iter().map(|(_, target)| target))
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
        let first = phase == TurnPhase::First;
        let (functions, tool_choice) = match choice::rule(choice) {
            ChoiceRule::Mode(m) => (all(), mode(m)),
            ChoiceRule::Allowed { mode: m, admits } => (self.select(&admits), mode(m)),
            ChoiceRule::Function(name) if first => (all(), json!({"type": "function", "function": {"name": name}})),
            ChoiceRule::OneOf(admits) if first => (self.select(&admits), json!("required")),
            ChoiceRule::Function(_) | ChoiceRule::OneOf(_) => (all(), json!("auto")),
        };
        let tool_choice = if phase == TurnPhase::Last { json!("none") } else { tool_choice };
        ToolOffer { functions, tool_choice }
    }

    fn select(&self, keep: &dyn Fn(&FunctionSpec, &CallTarget) -> bool) -> Vec<FunctionSpec> {
        self.entries.iter().filter(|(f, t)| keep(f, t)).map(|(f, _)| f.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use respgw_protocol::{Capabilities, CreateResponseRequest};
    use serde_json::Value;

    use crate::gateway_tool::test_tools::UncalledTool;
    use crate::tool_kinds::GatewayKind;

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
            file_search: true,
        };
        let req = CreateResponseRequest::from_slice(body.to_string().as_bytes()).unwrap().validate(&caps).unwrap();
        let gateway: Vec<Arc<dyn GatewayTool>> = vec![
            Arc::new(UncalledTool(spec("code_interpreter"), GatewayKind::CodeInterpreter)),
            Arc::new(UncalledTool(
                spec("mcp__docs__search"),
                GatewayKind::Mcp { server_label: "docs".into(), tool_name: "search".into() },
            )),
            Arc::new(UncalledTool(
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
