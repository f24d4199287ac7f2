//! `file_search`: searches of the tenant's vector stores, run by the gateway for the model.
//!
//! The model sees one function, `file_search`, taking `{"queries": ["…"]}` ([`function_spec`]). A
//! call's `file_search_call` item is announced without queries (with `…call.in_progress`) and
//! streams no arguments, as in the reference API; it is `…call.searching` while the search runs
//! and done with its `queries`, its `results` and the text the model was given (`model_result`,
//! kept for the conversation, shown to no client) — `completed`, or `failed` when the search could
//! not run (the model is told why, [`told`]). Clients see the results only with
//! `include: ["file_search_call.results"]`.
//!
//! Every result the model is shown gets a number, counted across the conversation's
//! `file_search_call` items in order ([`Sources`]), so a number means one file for the whole
//! conversation, in a continuation too. The model is asked to cite a result by its number in
//! square brackets; such markers in its answer become `file_citation` annotations (`cite.rs`).
//!
//! Executor: `respgw_tools::file_search::FileSearchTool` (`crates/tools/src/file_search/mod.rs`),
//! which runs `Retrieval::search` and implements the engine's `GatewayTool` itself.

mod cite;
mod told;

use respgw_protocol::ResponseEvent;
use respgw_protocol::ids::IdKind;
use respgw_protocol::items::{CallStatus, FileSearchCallItem, FileSearchResult, Item};
use respgw_protocol::tools::choice::AllowedTool;
use respgw_protocol::tools::file_search::FILE_SEARCH_FUNCTION;
use respgw_telemetry::ToolType;
use serde_json::{Value, json};

use super::choice::ChoiceRule;
use super::{CallPlace, CompletedCall};
use crate::gateway_tool::FunctionSpec;

pub const TOOL_TYPE: ToolType = ToolType::new("file_search");

/// The `include` value under which clients see a call's `results`.
pub const RESULTS_INCLUDE: &str = "file_search_call.results";

/// What one `file_search` call did.
#[derive(Debug, Clone, PartialEq)]
pub struct FileSearchOutcome {
    /// The queries searched, as the item shows them.
    pub queries: Vec<String>,
    /// The results, best first; or why the search could not run (told to the model).
    pub found: Result<Vec<FileSearchResult>, String>,
}

/// A file a result showed the model: what a `file_citation` of its number carries.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Source {
    file_id: String,
    filename: String,
}

/// The results file_search showed the model in the conversation so far, numbered from 1 in the
/// order shown: `[n]` in an answer cites the file of the n-th.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sources(Vec<Source>);

impl Sources {
    /// The results of the `file_search_call` items of `history`, in order.
    pub(crate) fn of<'a>(history: impl IntoIterator<Item = &'a Item>) -> Self {
        let mut sources = Sources::default();
        for item in history {
            if let Item::FileSearchCall(call) = item {
                sources.learn(call.results.as_deref().unwrap_or_default());
            }
        }
        sources
    }

    /// The number the next result shown gets.
    fn next_number(&self) -> usize {
        self.0.len() + 1
    }

    fn learn(&mut self, results: &[FileSearchResult]) {
        self.0.extend(results.iter().map(|r| Source { file_id: r.file_id.clone(), filename: r.filename.clone() }));
    }

    /// Announce the citations in `text` (message `item_id`) that became complete since the
    /// `file_citation`s in `annotations` (all of them when `complete`), and add them there.
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
        let known = annotations.iter().filter(|a| a["type"] == "file_citation").count();
        for annotation in cite::find_citations(text, &self.0, complete).into_iter().skip(known) {
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

/// How the model sees the tool: one function taking the queries to search with.
pub fn function_spec() -> FunctionSpec {
    FunctionSpec {
        name: FILE_SEARCH_FUNCTION.to_owned(),
        description: Some(
            "Search the files the user provided (their vector stores) for passages relevant to the \
             question.\n\nGive one or more short search queries in `queries`: the question in your own \
             words, or one query per part of a question with several parts. The tool returns the \
             best-matching passages, each numbered and with its file name. Cite the passages you use \
             by writing their number in square brackets, e.g. [2], right after the statement they \
             support."
                .to_owned(),
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "queries": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The search queries, one or more."
                }
            },
            "required": ["queries"],
            "additionalProperties": false
        }),
        strict: Some(true),
    }
}

pub(crate) fn allowed_by(entry: &AllowedTool) -> bool {
    matches!(entry, AllowedTool::FileSearch(_))
}

/// What `tool_choice: {"type": "file_search"}` asks: a call of the tool's function.
pub(crate) fn forced() -> ChoiceRule<'static> {
    ChoiceRule::Function(FILE_SEARCH_FUNCTION.to_owned())
}

/// A `file_search_call` from its announcement until the search has run.
#[derive(Debug)]
pub struct CallItem {
    pub(super) item: FileSearchCallItem,
    pub(super) output_index: usize,
}

impl CallItem {
    pub(super) fn announce(place: CallPlace<'_>, events: &mut Vec<ResponseEvent>) -> Self {
        let item = FileSearchCallItem {
            id: place.turn.new_id(IdKind::FileSearchCall),
            status: CallStatus::InProgress,
            queries: Vec::new(),
            results: None,
            model_result: None,
        };
        let output_index = place.output_index;
        events
            .push(ResponseEvent::OutputItemAdded { output_index, item: Box::new(Item::FileSearchCall(item.clone())) });
        events.push(ResponseEvent::FileSearchCallInProgress { item_id: item.id.clone(), output_index });
        CallItem { item, output_index }
    }

    /// No argument events: the queries show on the finished item.
    pub(super) fn on_arguments(&self, _fragment: &str, _events: &mut [ResponseEvent]) {}

    /// A call without arguments is `{}` (no events either).
    pub(super) fn arguments_done(&self, arguments: &mut String) {
        if arguments.is_empty() {
            arguments.push_str("{}");
        }
    }

    pub(super) fn running_event(&self) -> ResponseEvent {
        ResponseEvent::FileSearchCallSearching { item_id: self.item.id.clone(), output_index: self.output_index }
    }

    /// The item with the queries, the results the model was shown (numbered after those of
    /// `sources`, which learns them) and the text it was given.
    pub(super) fn complete(self, outcome: FileSearchOutcome, sources: &mut Sources) -> CompletedCall {
        let done_event =
            ResponseEvent::FileSearchCallCompleted { item_id: self.item.id.clone(), output_index: self.output_index };
        let (status, results, model_result, ok) = match outcome.found {
            Ok(found) => {
                let (text, shown) = told::results(&outcome.queries, found, sources.next_number());
                sources.learn(&shown);
                (CallStatus::Completed, Some(shown), text, true)
            }
            Err(error) => (CallStatus::Failed, None, told::failure(&error), false),
        };
        let item = FileSearchCallItem {
            status,
            queries: outcome.queries,
            results,
            model_result: Some(model_result),
            ..self.item
        };
        CompletedCall { item: Item::FileSearchCall(item), ok, done_event }
    }
}

/// The item as a client sees it: never the text kept for the model; the results only when
/// `include` asks (else `null`).
pub(crate) fn present(item: &FileSearchCallItem, include: &[String]) -> FileSearchCallItem {
    let mut shown = item.clone();
    shown.model_result = None;
    if !include.iter().any(|i| i == RESULTS_INCLUDE) {
        shown.results = None;
    }
    shown
}

/// The function call the item stands for: its name, and the arguments rebuilt from its queries.
pub(crate) fn replayed_call(item: &FileSearchCallItem) -> (String, String) {
    (FILE_SEARCH_FUNCTION.to_owned(), json!({"queries": item.queries}).to_string())
}

/// Where the results of each `file_search_call` of a conversation start in its numbering, for
/// the items whose text for the model has to be rebuilt (a client's replay carries no
/// `model_result`).
pub(crate) struct Numbering<'a>(Vec<(&'a str, usize)>);

impl<'a> Numbering<'a> {
    pub(crate) fn of(history: &[&'a Item]) -> Self {
        let mut next = 1;
        let mut starts = Vec::new();
        for item in history {
            if let Item::FileSearchCall(call) = item {
                starts.push((call.id.as_str(), next));
                next += call.results.as_ref().map_or(0, Vec::len);
            }
        }
        Numbering(starts)
    }

    /// The text the model was given: the one kept, else rebuilt from the results, else a note
    /// that they are not available (a replay without `include: ["file_search_call.results"]`).
    pub(crate) fn result_text(&self, item: &FileSearchCallItem) -> String {
        if let Some(text) = &item.model_result {
            return text.clone();
        }
        match (&item.results, item.status) {
            (Some(results), _) => {
                let first = self.0.iter().find(|(id, _)| *id == item.id).map_or(1, |(_, n)| *n);
                told::results(&item.queries, results.clone(), first).0
            }
            (None, CallStatus::Failed) => told::failure("The search could not run."),
            (None, _) => told::unavailable(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(file: &str, text: &str) -> FileSearchResult {
        FileSearchResult {
            file_id: format!("file-{file}"),
            filename: format!("{file}.md"),
            score: 0.5,
            attributes: json!({}),
            text: text.into(),
        }
    }

    fn call(id: &str, results: Option<Vec<FileSearchResult>>, model_result: Option<&str>) -> Item {
        Item::FileSearchCall(FileSearchCallItem {
            id: id.into(),
            status: CallStatus::Completed,
            queries: vec!["q".into()],
            results,
            model_result: model_result.map(str::to_owned),
        })
    }

    #[test]
    fn results_are_shown_with_include_and_the_model_text_never() {
        let Item::FileSearchCall(item) = call("fs_1", Some(vec![result("a", "alpha")]), Some("[1] a.md")) else {
            unreachable!()
        };
        let plain = present(&item, &[]);
        assert_eq!((&plain.results, &plain.model_result), (&None, &None));
        let included = present(&item, &[RESULTS_INCLUDE.to_owned()]);
        assert_eq!(included.results, item.results);
        assert_eq!(included.model_result, None);
        let json = serde_json::to_value(Item::FileSearchCall(plain)).unwrap();
        assert_eq!(
            json,
            json!({"type":"file_search_call","id":"fs_1","status":"completed","queries":["q"],"results":null})
        );
    }

    #[test]
    fn numbers_continue_across_the_conversation() {
        let history = [
            call("fs_1", Some(vec![result("a", "alpha"), result("b", "beta")]), Some("kept")),
            call("fs_2", None, None),
            call("fs_3", Some(vec![result("c", "gamma")]), None),
        ];
        let sources = Sources::of(&history);
        assert_eq!(sources.next_number(), 4);
        let refs: Vec<&Item> = history.iter().collect();
        let numbering = Numbering::of(&refs);
        let Item::FileSearchCall(first) = &history[0] else { unreachable!() };
        assert_eq!(numbering.result_text(first), "kept");
        let Item::FileSearchCall(third) = &history[2] else { unreachable!() };
        let rebuilt = numbering.result_text(third);
        assert!(rebuilt.contains("[3] c.md") && rebuilt.contains("gamma"), "{rebuilt}");
        let Item::FileSearchCall(second) = &history[1] else { unreachable!() };
        assert!(numbering.result_text(second).contains("not available"));
    }

    #[test]
    fn a_completed_call_numbers_its_results_after_the_earlier_ones() {
        let mut sources = Sources::of(&[call("fs_1", Some(vec![result("a", "alpha")]), None)]);
        let place_events = &mut Vec::new();
        let turn = respgw_protocol::ids::TurnStamp::after(None);
        let place = CallPlace { turn, output_index: 2, container_id: "cntr" };
        let open = CallItem::announce(place, place_events);
        assert_eq!(place_events.len(), 2);
        let outcome = FileSearchOutcome {
            queries: vec!["beta?".into()],
            found: Ok(vec![result("b", "beta"), result("a", "a2")]),
        };
        let done = open.complete(outcome, &mut sources);
        let Item::FileSearchCall(item) = &done.item else { panic!() };
        assert!(done.ok && item.status == CallStatus::Completed);
        let told = item.model_result.as_deref().unwrap();
        assert!(told.contains("[2] b.md") && told.contains("[3] a.md"), "{told}");
        assert_eq!(sources.next_number(), 4);
        assert_eq!(item.queries, ["beta?"]);
    }

    #[test]
    fn a_failed_search_is_a_failed_item_the_model_is_told_about() {
        let mut sources = Sources::default();
        let turn = respgw_protocol::ids::TurnStamp::after(None);
        let open = CallItem::announce(CallPlace { turn, output_index: 0, container_id: "c" }, &mut Vec::new());
        let outcome =
            FileSearchOutcome { queries: vec!["x".into()], found: Err("The embedding service failed.".into()) };
        let done = open.complete(outcome, &mut sources);
        let Item::FileSearchCall(item) = &done.item else { panic!() };
        assert!(!done.ok);
        assert_eq!((item.status, item.results.as_ref()), (CallStatus::Failed, None));
        assert!(item.model_result.as_deref().unwrap().contains("The embedding service failed."));
        assert_eq!(sources.next_number(), 1);
    }
}
