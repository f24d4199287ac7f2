//! `web_search`: searches, page opening and find-in-page, run by the gateway for the model.
//!
//! The model sees one function, `web_search` ([`function_spec`]), whose arguments name an action.
//! A call's `web_search_call` item is announced without an action (with `…call.in_progress`)
//! and streams no arguments, as in the reference API; it is `…call.searching` while the action
//! runs and done with the action and the result the model was given (`model_result`, kept for
//! the conversation, shown to no client but the Messages face, which hands it back on replay) —
//! `completed` even when the search failed, since a failure is a result the model sees. The pages
//! a call showed the model become [`CitableSource`]s, kept for the response in [`Citations`]:
//! links to them in the answer are cited (`cite.rs`). Clients see an action's `sources` only with
//! `include: ["web_search_call.action.sources"]`.
//!
//! Executor: `respgw_tools::web_search::WebSearchTool` (`crates/tools/src/web_search/mod.rs`),
//! which implements the engine's `GatewayTool` itself.

mod cite;

use respgw_protocol::ResponseEvent;
use respgw_protocol::ids::IdKind;
use respgw_protocol::items::{CallStatus, Item, WebSearchAction, WebSearchCallItem};
use respgw_protocol::tools::choice::AllowedTool;
use respgw_protocol::tools::web_search::{MODEL_RESULT_INCLUDE, WEB_SEARCH_FUNCTION};
use respgw_telemetry::ToolType;
use serde_json::{Value, json};

use self::cite::find_citations;
use super::choice::ChoiceRule;
use super::{CallPlace, CompletedCall};
use crate::gateway_tool::FunctionSpec;

pub const TOOL_TYPE: ToolType = ToolType::new("web_search");

/// What one `web_search` action did.
#[derive(Debug, Clone, PartialEq)]
pub struct WebSearchOutcome {
    /// The public action, `sources` included (dropped from what clients see unless `include`
    /// asks).
    pub action: WebSearchAction,
    /// The JSON text the model is given as the tool result.
    pub model_result: String,
    /// Pages the model may cite from now on (search results, opened pages).
    pub citable: Vec<CitableSource>,
    /// False when the backend or the page fetch failed (counted as a tool error).
    pub ok: bool,
}

/// A URL the model saw, and the title a `url_citation` of it carries (its host when unknown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CitableSource {
    pub url: String,
    pub title: Option<String>,
}

/// The pages web_search showed the model so far in one response: links to them in its answers
/// become `url_citation` annotations.
#[derive(Debug, Clone, Default)]
pub(crate) struct Citations(Vec<CitableSource>);

impl Citations {
    /// Add the pages a call showed the model; the latest word on a page wins (an opened page's
    /// own title over a search's).
    fn learn(&mut self, sources: Vec<CitableSource>) {
        for source in sources {
            match self.0.iter_mut().find(|known| known.url == source.url) {
                Some(known) => {
                    if source.title.is_some() {
                        known.title = source.title;
                    }
                }
                None => self.0.push(source),
            }
        }
    }

    /// Announce the citations in `text` (message `item_id`) that became complete since the
    /// `url_citation`s in `annotations` (all of them when `complete`), and add them there.
    pub(super) fn annotate(
        &self,
        item_id: &str,
        output_index: usize,
        text: &str,
        annotations: &mut Vec<Value>,
        complete: bool,
        events: &mut Vec<ResponseEvent>,
    ) {
        if self.0.is_empty() {
            return;
        }
        let known = annotations.iter().filter(|a| a["type"] == "url_citation").count();
        for annotation in find_citations(text, &self.0, complete).into_iter().skip(known) {
            events.push(ResponseEvent::OutputTextAnnotationAdded {
                item_id: item_id.to_owned(),
                output_index,
                content_index: 0,
                annotation_index: annotations.len(),
                annotation: Box::new(annotation.clone()),
            });
            annotations.push(annotation);
        }
    }
}

/// How the model sees the tool: one function whose nullable parameters name the action.
pub fn function_spec() -> FunctionSpec {
    let nullable = |schema: Value| json!({"default": null, "anyOf": [schema, {"type": "null"}]});
    FunctionSpec {
        name: WEB_SEARCH_FUNCTION.to_owned(),
        description: Some(
            "Search the web, open a page, or find text inside an opened page.\n\nUse:\n\
             - `action=\"search\"` with `query`\n\
             - `action=\"open_page\"` with `url`\n\
             - `action=\"find_in_page\"` with `url` and `pattern`\n\n\
             The tool returns JSON containing the public action summary plus normalized\ndata for the model. \
             Cite pages you use as markdown links: ([site](url))."
                .to_owned(),
        ),
        parameters: json!({
            "additionalProperties": false,
            "properties": {
                "action": nullable(json!({"enum": ["search", "open_page", "find_in_page"], "type": "string"})),
                "query": nullable(json!({"type": "string"})),
                "queries": nullable(json!({"items": {"type": "string"}, "type": "array"})),
                "url": nullable(json!({"type": "string"})),
                "pattern": nullable(json!({"type": "string"})),
            },
            "type": "object"
        }),
        strict: None,
    }
}

pub(crate) fn allowed_by(entry: &AllowedTool) -> bool {
    matches!(entry, AllowedTool::WebSearch(_))
}

/// What `tool_choice: {"type": "web_search"}` asks: a call of the tool's function.
pub(crate) fn forced() -> ChoiceRule<'static> {
    ChoiceRule::Function(WEB_SEARCH_FUNCTION.to_owned())
}

/// A `web_search_call` from its announcement until the action has run.
#[derive(Debug)]
pub struct CallItem {
    pub(super) item: WebSearchCallItem,
    pub(super) output_index: usize,
}

impl CallItem {
    pub(super) fn announce(place: CallPlace<'_>, events: &mut Vec<ResponseEvent>) -> Self {
        let item = WebSearchCallItem {
            id: place.turn.new_id(IdKind::WebSearchCall),
            status: CallStatus::InProgress,
            action: None,
            model_result: None,
        };
        let output_index = place.output_index;
        events.push(ResponseEvent::OutputItemAdded { output_index, item: Box::new(Item::WebSearchCall(item.clone())) });
        events.push(ResponseEvent::WebSearchCallInProgress { item_id: item.id.clone(), output_index });
        CallItem { item, output_index }
    }

    /// No argument events: the action shows on the finished item.
    pub(super) fn on_arguments(&self, _fragment: &str, _events: &mut [ResponseEvent]) {}

    /// A call without arguments is `{}` (no events either).
    pub(super) fn arguments_done(&self, arguments: &mut String) {
        if arguments.is_empty() {
            arguments.push_str("{}");
        }
    }

    pub(super) fn running_event(&self) -> ResponseEvent {
        ResponseEvent::WebSearchCallSearching { item_id: self.item.id.clone(), output_index: self.output_index }
    }

    /// The item with the action and its result; the pages it showed join `citations`.
    pub(super) fn complete(self, outcome: WebSearchOutcome, citations: &mut Citations) -> CompletedCall {
        citations.learn(outcome.citable);
        let done_event =
            ResponseEvent::WebSearchCallCompleted { item_id: self.item.id.clone(), output_index: self.output_index };
        let item = WebSearchCallItem {
            // A failed search is a result the model sees; the call itself completed.
            status: CallStatus::Completed,
            action: Some(outcome.action),
            model_result: Some(outcome.model_result),
            ..self.item
        };
        CompletedCall { item: Item::WebSearchCall(item), ok: outcome.ok, done_event }
    }
}

/// The item as a client sees it: the result kept for the model only for the Messages face
/// ([`MODEL_RESULT_INCLUDE`]); search `sources` only when `include` asks (and never an empty list).
pub(crate) fn present(item: &WebSearchCallItem, include: &[String]) -> WebSearchCallItem {
    let mut shown = item.clone();
    if !include.iter().any(|i| i == MODEL_RESULT_INCLUDE) {
        shown.model_result = None;
    }
    if let Some(WebSearchAction::Search { sources, .. }) = &mut shown.action
        && (!include.iter().any(|i| i == "web_search_call.action.sources")
            || sources.as_ref().is_some_and(Vec::is_empty))
    {
        *sources = None;
    }
    shown
}

/// The function call the item stands for: its name, and the arguments rebuilt from its action.
pub(crate) fn replayed_call(item: &WebSearchCallItem) -> (String, String) {
    let arguments = match &item.action {
        Some(WebSearchAction::Search { query, queries, .. }) => {
            json!({"action": "search", "query": query, "queries": queries})
        }
        Some(WebSearchAction::OpenPage { url }) => json!({"action": "open_page", "url": url}),
        Some(WebSearchAction::FindInPage { url, pattern }) => {
            json!({"action": "find_in_page", "url": url, "pattern": pattern})
        }
        None => json!({}),
    };
    (WEB_SEARCH_FUNCTION.to_owned(), arguments.to_string())
}

/// The result the model was given (an earlier call's from another system may lack it).
pub(crate) fn result_text(item: &WebSearchCallItem) -> String {
    item.model_result
        .clone()
        .unwrap_or_else(|| json!({"error": "The result of this earlier web_search call is not available."}).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_kept_for_the_model_is_shown_to_the_messages_face_only() {
        let item = WebSearchCallItem {
            id: "ws_1".into(),
            status: CallStatus::Completed,
            action: Some(WebSearchAction::OpenPage { url: Some("https://a.example/".into()) }),
            model_result: Some("{\"page\":{}}".into()),
        };
        let every_responses_include =
            ["web_search_call.action.sources".to_owned(), "web_search_call.results".to_owned()];
        assert_eq!(present(&item, &every_responses_include).model_result, None);
        assert_eq!(present(&item, &[MODEL_RESULT_INCLUDE.to_owned()]).model_result, item.model_result);
    }
}
