//! `web_search_20250305` on the gateway's `web_search` tool: its declaration, the
//! `server_tool_use` + `web_search_tool_result` blocks a `web_search_call` item stands for, and
//! those blocks replayed as the item again.
//!
//! - Declaration: `allowed_domains` → `filters.allowed_domains`, `user_location` as it is,
//!   `max_uses` → the engine's `max_tool_calls` (see [`crate::server_tools`]). `blocked_domains`
//!   is refused: the gateway's search can only be limited to domains, not keep some out.
//! - Blocks: the call's `input` is `{"query"}` for a search (with `queries` when the model
//!   searched for several), and the model's arguments for the gateway's other actions (`open_page`,
//!   `find_in_page`). The result lists a `web_search_result` per page the model was shown (one for
//!   an opened page or a find in it), or is a `web_search_tool_result_error` (`unavailable`, or
//!   `invalid_tool_input` when the model's arguments lacked what the action needs).
//! - Citations: a `url_citation` the engine found in the answer (a link to a page the model was
//!   shown) is a `web_search_result_location` citation on its text block, quoting the start of
//!   what the model read of that page ([`PageTexts`]).
//! - Replay: each result's `encrypted_content` is the part of the tool result the model read for
//!   that page (base64url of its JSON), so the replayed item gives the model back exactly the
//!   text it saw. It is not sealed: it holds public web content the client may read, and a client
//!   that alters it changes its own history, as it could in any `tool_result`. An error replays
//!   as an error naming its code (the gateway's wording of it is not kept).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use respgw_protocol::ApiError;
use respgw_protocol::items::{Item, WebSearchAction, WebSearchCallItem, WebSearchSource};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ReplayedCall, invalid, typed};
use crate::reply::ContentBlock;

/// The `name` Anthropic's web search tool has, in declarations and `server_tool_use` blocks.
pub const TOOL_NAME: &str = "web_search";

/// A `web_search_20250305` declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct WebSearchDeclaration {
    /// `max_uses`: at most this many searches in the request.
    pub max_uses: Option<u64>,
    pub allowed_domains: Option<Vec<String>>,
    /// `user_location` (`{"type": "approximate", "city", "region", "country", "timezone"}`), the
    /// same shape the gateway's tool takes.
    pub user_location: Option<Value>,
}

#[derive(Deserialize)]
struct DeclarationFields {
    name: String,
    #[serde(default)]
    max_uses: Option<u64>,
    #[serde(default)]
    allowed_domains: Option<Vec<String>>,
    #[serde(default)]
    blocked_domains: Option<Vec<String>>,
    #[serde(default)]
    user_location: Option<Value>,
}

/// Parse a `web_search_20250305` declaration at `at`.
pub fn parse_declaration(value: Value, at: &str) -> Result<WebSearchDeclaration, ApiError> {
    let fields: DeclarationFields = typed(value, at)?;
    if fields.name != TOOL_NAME {
        return Err(invalid(&format!("{at}.name"), format!("the web search tool must be named '{TOOL_NAME}'")));
    }
    if fields.max_uses == Some(0) {
        return Err(invalid(&format!("{at}.max_uses"), "expected an integer of at least 1, got 0"));
    }
    if fields.blocked_domains.as_ref().is_some_and(|domains| !domains.is_empty()) {
        return Err(invalid(
            &format!("{at}.blocked_domains"),
            "this gateway's web search can be limited to domains (allowed_domains) but cannot leave domains out",
        ));
    }
    Ok(WebSearchDeclaration {
        max_uses: fields.max_uses,
        allowed_domains: fields.allowed_domains,
        user_location: fields.user_location.filter(|location| !location.is_null()),
    })
}

impl WebSearchDeclaration {
    /// The engine's `web_search` declaration.
    pub fn engine_tool(&self) -> Value {
        let mut tool = Map::new();
        tool.insert("type".into(), json!("web_search"));
        if let Some(domains) = &self.allowed_domains {
            tool.insert("filters".into(), json!({"allowed_domains": domains}));
        }
        if let Some(location) = &self.user_location {
            tool.insert("user_location".into(), location.clone());
        }
        Value::Object(tool)
    }
}

/// The `server_tool_use` input of a call: Anthropic's `{"query"}` for a search, the gateway's
/// own arguments for its other actions.
fn call_input(action: Option<&WebSearchAction>) -> Value {
    match action {
        Some(WebSearchAction::Search { query, queries, .. }) if queries.is_empty() || *queries == [query.clone()] => {
            json!({"query": query})
        }
        Some(WebSearchAction::Search { query, queries, .. }) => json!({"query": query, "queries": queries}),
        Some(WebSearchAction::OpenPage { url }) => json!({"action": "open_page", "url": url}),
        Some(WebSearchAction::FindInPage { url, pattern }) => {
            json!({"action": "find_in_page", "url": url, "pattern": pattern})
        }
        None => json!({}),
    }
}

/// The action a replayed call's `input` names.
fn action_of(input: &Map<String, Value>, results: &[Value]) -> WebSearchAction {
    let text = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
    match input.get("action").and_then(Value::as_str) {
        Some("open_page") => WebSearchAction::OpenPage { url: text("url") },
        Some("find_in_page") => {
            WebSearchAction::FindInPage { url: text("url"), pattern: text("pattern").unwrap_or_default() }
        }
        _ => WebSearchAction::Search {
            query: text("query").unwrap_or_default(),
            // One query searched alone is `queries: [query]` on the item (none without a query).
            queries: match input.get("queries").and_then(Value::as_array) {
                Some(queries) => queries.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                None => text("query").filter(|query| !query.is_empty()).into_iter().collect(),
            },
            sources: Some(
                results
                    .iter()
                    .filter_map(|hit| hit.get("url").and_then(Value::as_str))
                    .map(|url| WebSearchSource { url: url.to_owned() })
                    .collect(),
            ),
        },
    }
}

/// The blocks a `web_search_call` item stands for: its call and its result.
pub fn blocks(item: &WebSearchCallItem, id: String) -> Vec<ContentBlock> {
    let input = call_input(item.action.as_ref());
    let content = item.model_result.as_deref().map_or_else(|| json!([]), result_content);
    vec![
        ContentBlock::ServerToolUse { id: id.clone(), name: TOOL_NAME.to_owned(), input },
        ContentBlock::WebSearchToolResult { tool_use_id: id, content },
    ]
}

/// A `web_search_tool_result`'s `content` for the result the model was given.
fn result_content(model_result: &str) -> Value {
    let Ok(Value::Object(mut result)) = serde_json::from_str::<Value>(model_result) else {
        return error_content("unavailable");
    };
    if let Some(error) = result.get("error") {
        let required = error.as_str().is_some_and(|text| text.contains("is required"));
        return error_content(if required { "invalid_tool_input" } else { "unavailable" });
    }
    result.shift_remove("action");
    if let Some(Value::Array(hits)) = result.shift_remove("results") {
        return Value::Array(hits.iter().map(|hit| result_entry(hit, hit)).collect());
    }
    // An opened page (`page`) or a find in one (`url`, `title`, `matches`): one entry.
    let rest = Value::Object(result);
    let about = rest.get("page").unwrap_or(&rest).clone();
    json!([result_entry(&about, &rest)])
}

/// A `web_search_result` for the page `about` describes, carrying `shown` (what the model read).
fn result_entry(about: &Value, shown: &Value) -> Value {
    let url = about.get("url").and_then(Value::as_str).unwrap_or_default();
    let title = about.get("title").and_then(Value::as_str).unwrap_or(url);
    json!({
        "type": "web_search_result",
        "url": url,
        "title": title,
        "page_age": about.get("page_age").cloned().unwrap_or(Value::Null),
        "encrypted_content": URL_SAFE_NO_PAD.encode(shown.to_string()),
    })
}

fn error_content(code: &str) -> Value {
    json!({"type": "web_search_tool_result_error", "error_code": code})
}

/// A replayed `web_search_tool_result`'s `content`.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayedResult {
    /// What the model read of each page, decoded from the entries' `encrypted_content`.
    Shown(Vec<Value>),
    /// `web_search_tool_result_error` with its `error_code`.
    Error(String),
}

#[derive(Deserialize)]
struct ResultEntryFields {
    encrypted_content: String,
}

#[derive(Deserialize)]
struct ErrorFields {
    error_code: String,
}

/// Parse a replayed `web_search_tool_result`'s `content` at `at`.
pub fn parse_result(content: Value, at: &str) -> Result<ReplayedResult, ApiError> {
    match content {
        Value::Array(entries) => entries
            .into_iter()
            .enumerate()
            .map(|(i, entry)| {
                let entry_at = format!("{at}[{i}]");
                let fields: ResultEntryFields = typed(entry, &entry_at)?;
                URL_SAFE_NO_PAD
                    .decode(fields.encrypted_content.as_bytes())
                    .ok()
                    .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
                    .filter(Value::is_object)
                    .ok_or_else(|| {
                        invalid(
                            &format!("{entry_at}.encrypted_content"),
                            "expected the encrypted_content this gateway gave the result, unchanged",
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(ReplayedResult::Shown),
        Value::Object(_) => typed::<ErrorFields>(content, at).map(|error| ReplayedResult::Error(error.error_code)),
        _ => Err(invalid(at, "expected a list of web_search_result blocks or a web_search_tool_result_error")),
    }
}

/// The engine's `web_search_call` item for a replayed call and its result: the model is given
/// the same tool result as when the call ran.
pub fn replayed_item(call: &ReplayedCall, result: ReplayedResult) -> Value {
    let (action, model_result) = match result {
        ReplayedResult::Shown(shown) => {
            let action = action_of(&call.input, &shown);
            let model_result = match &action {
                WebSearchAction::Search { .. } => json!({"action": action, "results": shown}),
                WebSearchAction::OpenPage { .. } | WebSearchAction::FindInPage { .. } => {
                    let mut result = Map::new();
                    result.insert("action".into(), json!(action));
                    if let Some(Value::Object(rest)) = shown.into_iter().next() {
                        result.extend(rest);
                    }
                    Value::Object(result)
                }
            };
            (action, model_result)
        }
        ReplayedResult::Error(code) => {
            let action = action_of(&call.input, &[]);
            let model_result = json!({"action": action, "error": format!("The web search failed ({code}).")});
            (action, model_result)
        }
    };
    json!({
        "type": "web_search_call",
        "id": call.item_id,
        "status": "completed",
        "action": action,
        "model_result": model_result.to_string(),
    })
}

/// The longest `cited_text` of a citation, in characters (Anthropic quotes at most 150).
const CITED_TEXT_CHARS: usize = 150;

/// What the model read of each page web search showed it in one response, to quote in the
/// citations of its answer: a search hit's snippet (or title), an opened page's text, the matches
/// found in a page.
#[derive(Debug, Clone, Default)]
pub struct PageTexts(Vec<(String, String)>);

impl PageTexts {
    /// The pages of the web search items among `items`.
    pub fn of<'a>(items: impl IntoIterator<Item = &'a Item>) -> Self {
        let mut pages = PageTexts::default();
        for item in items {
            if let Item::WebSearchCall(call) = item {
                pages.learn(call);
            }
        }
        pages
    }

    /// Add the pages `item` showed the model (the first text seen for a page is kept).
    pub fn learn(&mut self, item: &WebSearchCallItem) {
        let Some(Value::Object(result)) = item.model_result.as_deref().and_then(|r| serde_json::from_str(r).ok())
        else {
            return;
        };
        let text_of = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
        let mut found: Vec<(Option<String>, Option<String>)> = Vec::new();
        if let Some(Value::Array(hits)) = result.get("results") {
            found.extend(hits.iter().map(|hit| {
                (text_of(hit.get("url")), text_of(hit.get("snippet")).or_else(|| text_of(hit.get("title"))))
            }));
        }
        if let Some(page) = result.get("page") {
            found.push((text_of(page.get("url")), text_of(page.get("text"))));
        }
        if let Some(Value::Array(matches)) = result.get("matches") {
            let joined: Vec<String> =
                matches.iter().map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned)).collect();
            found.push((text_of(result.get("url")), Some(joined.join(" … "))));
        }
        for (url, text) in found {
            if let (Some(url), Some(text)) = (url, text)
                && !self.0.iter().any(|(known, _)| *known == url)
            {
                self.0.push((url, text));
            }
        }
    }

    /// A `web_search_result_location` citation for a `url_citation` annotation of the answer:
    /// the page's URL and title, the start of what the model read of it as `cited_text`, and an
    /// `encrypted_index` naming the page (base64url of its URL; replay does not need it).
    pub fn citation(&self, annotation: &Value) -> Option<Value> {
        if annotation.get("type").and_then(Value::as_str) != Some("url_citation") {
            return None;
        }
        let url = annotation.get("url").and_then(Value::as_str)?;
        let read = self.0.iter().find(|(known, _)| known.trim_end_matches('/') == url.trim_end_matches('/'));
        let cited_text: String =
            read.map(|(_, text)| text.chars().take(CITED_TEXT_CHARS).collect()).unwrap_or_default();
        Some(json!({
            "type": "web_search_result_location",
            "url": url,
            "title": annotation.get("title").cloned().unwrap_or(Value::Null),
            "cited_text": cited_text,
            "encrypted_index": URL_SAFE_NO_PAD.encode(url),
        }))
    }
}

/// `usage.server_tool_use.web_search_requests`: the searches among `items`.
pub fn searches<'a>(items: impl IntoIterator<Item = &'a WebSearchCallItem>) -> u64 {
    let searches = items.into_iter().filter(|item| matches!(item.action, Some(WebSearchAction::Search { .. })));
    searches.count() as u64
}

#[cfg(test)]
mod tests {
    use respgw_protocol::items::CallStatus;

    use super::*;

    fn item(action: WebSearchAction, model_result: Value) -> WebSearchCallItem {
        WebSearchCallItem {
            id: "ws_1".into(),
            status: CallStatus::Completed,
            action: Some(action),
            model_result: Some(model_result.to_string()),
        }
    }

    /// A search for `query` alone, as the gateway records it.
    fn search(query: &str, urls: &[&str]) -> WebSearchAction {
        let sources = urls.iter().map(|url| WebSearchSource { url: (*url).to_owned() }).collect();
        let queries = if query.is_empty() { Vec::new() } else { vec![query.to_owned()] };
        WebSearchAction::Search { query: query.into(), queries, sources: Some(sources) }
    }

    /// The blocks of `item`, parsed back as a client replays them, and the item they become.
    fn round_trip(item: &WebSearchCallItem) -> Value {
        let blocks = blocks(item, "srvtoolu_ws_1".into());
        let [ContentBlock::ServerToolUse { input, .. }, ContentBlock::WebSearchToolResult { content, .. }] =
            blocks.as_slice()
        else {
            panic!("{blocks:?}")
        };
        let call = ReplayedCall { item_id: "ws_1".into(), input: input.as_object().unwrap().clone() };
        replayed_item(&call, parse_result(content.clone(), "content").unwrap())
    }

    #[test]
    fn a_search_is_a_query_and_one_result_per_page() {
        let result = json!({
            "action": search("rust", &["https://a.example/"]),
            "results": [{"url": "https://a.example/", "title": "A", "snippet": "about a"}],
        });
        let blocks = blocks(&item(search("rust", &["https://a.example/"]), result), "srvtoolu_ws_1".into());
        assert_eq!(
            serde_json::to_value(&blocks).unwrap(),
            json!([
                {"type": "server_tool_use", "id": "srvtoolu_ws_1", "name": "web_search", "input": {"query": "rust"}},
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_ws_1", "content": [{
                    "type": "web_search_result", "url": "https://a.example/", "title": "A", "page_age": null,
                    "encrypted_content": URL_SAFE_NO_PAD.encode(r#"{"url":"https://a.example/","title":"A","snippet":"about a"}"#),
                }]},
            ])
        );
    }

    #[test]
    fn replay_gives_the_model_the_result_it_saw() {
        let searched = item(
            search("rust", &["https://a.example/", "https://b.example/"]),
            json!({"action": search("rust", &["https://a.example/", "https://b.example/"]), "results": [
                {"url": "https://a.example/", "title": "A", "snippet": "about a"},
                {"url": "https://b.example/"},
            ]}),
        );
        let opened_action = WebSearchAction::OpenPage { url: Some("https://a.example/".into()) };
        let opened = item(
            opened_action.clone(),
            json!({"action": opened_action, "page": {"url": "https://a.example/", "title": "A", "text": "body", "truncated": false}}),
        );
        let found_action = WebSearchAction::FindInPage { url: Some("https://a.example/".into()), pattern: "bo".into() };
        let found = item(
            found_action.clone(),
            json!({"action": found_action, "url": "https://a.example/", "title": "A", "matches": ["body"]}),
        );
        let several = WebSearchAction::Search {
            query: "a".into(),
            queries: vec!["a".into(), "b".into()],
            sources: Some(vec![WebSearchSource { url: "https://a.example/".into() }]),
        };
        let searched_several =
            item(several.clone(), json!({"action": several, "results": [{"url": "https://a.example/"}]}));
        for original in [searched, searched_several, opened, found] {
            let replayed = round_trip(&original);
            assert_eq!(replayed["model_result"], json!(original.model_result.unwrap()));
            assert_eq!(replayed["action"], json!(original.action.unwrap()));
        }
    }

    #[test]
    fn a_failed_search_is_an_error_block_and_replays_as_one() {
        let action = search("", &[]);
        let failed =
            item(action.clone(), json!({"action": action, "results": [], "error": "`query` is required for search."}));
        let blocks = blocks(&failed, "srvtoolu_ws_1".into());
        let ContentBlock::WebSearchToolResult { content, .. } = &blocks[1] else { panic!() };
        assert_eq!(content, &json!({"type": "web_search_tool_result_error", "error_code": "invalid_tool_input"}));
        let replayed = round_trip(&failed);
        assert!(replayed["model_result"].as_str().unwrap().contains("The web search failed (invalid_tool_input)."));
    }

    #[test]
    fn a_link_to_a_page_the_model_read_is_cited_with_what_it_read() {
        let searched = Item::WebSearchCall(item(
            search("rust", &["https://a.example/"]),
            json!({"action": search("rust", &["https://a.example/"]), "results": [
                {"url": "https://a.example/", "title": "A", "snippet": "Rust is a language."}]}),
        ));
        let pages = PageTexts::of([&searched]);
        let annotation = json!({"type": "url_citation", "start_index": 0, "end_index": 9, "title": "A",
                                "url": "https://a.example"});
        assert_eq!(
            pages.citation(&annotation),
            Some(json!({"type": "web_search_result_location", "url": "https://a.example", "title": "A",
                        "cited_text": "Rust is a language.", "encrypted_index": URL_SAFE_NO_PAD.encode("https://a.example")}))
        );
        assert_eq!(pages.citation(&json!({"type": "file_citation"})), None);
    }

    #[test]
    fn an_altered_encrypted_content_is_refused() {
        let content = json!([{"type": "web_search_result", "url": "u", "title": "t", "encrypted_content": "not ours"}]);
        let error = parse_result(content, "messages[1].content[1].content").unwrap_err();
        assert_eq!(error.param.as_deref(), Some("messages[1].content[1].content[0].encrypted_content"));
    }

    #[test]
    fn declarations_map_onto_the_gateway_tool() {
        let declared = parse_declaration(
            json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 2, "allowed_domains": ["a.example"],
                   "user_location": {"type": "approximate", "country": "FR"}}),
            "tools[0]",
        )
        .unwrap();
        assert_eq!(declared.max_uses, Some(2));
        assert_eq!(
            declared.engine_tool(),
            json!({"type": "web_search", "filters": {"allowed_domains": ["a.example"]},
                   "user_location": {"type": "approximate", "country": "FR"}})
        );
        let blocked = json!({"type": "web_search_20250305", "name": "web_search", "blocked_domains": ["b.example"]});
        assert_eq!(
            parse_declaration(blocked, "tools[0]").unwrap_err().param.as_deref(),
            Some("tools[0].blocked_domains")
        );
        let misnamed = json!({"type": "web_search_20250305", "name": "search"});
        assert_eq!(parse_declaration(misnamed, "tools[0]").unwrap_err().param.as_deref(), Some("tools[0].name"));
    }
}
