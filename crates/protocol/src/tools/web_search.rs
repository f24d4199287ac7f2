//! `web_search`: the gateway searches the web through its configured backend. The live
//! declaration and its checks, the cached-only declaration accepted without a backend, the
//! `type` spellings, and the function name the model sees.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Capabilities, ToolDeclaration, tool_not_enabled};
use crate::error::ApiError;

/// `{"type":"web_search","filters":{"allowed_domains":[…]},"search_context_size","user_location"}`,
/// echoed with every key present (as the reference API does).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WebSearchTool {
    /// `web_search`, or one of its dated/preview spellings, echoed as given.
    #[serde(rename = "type")]
    pub kind: WebSearchToolType,
    pub filters: Option<WebSearchFilters>,
    pub search_context_size: SearchContextSize,
    /// Passed to backends that take a location hint; echoed as given.
    pub user_location: Option<Value>,
}

impl WebSearchTool {
    /// The domains every action is limited to (empty: no limit), lower-cased, without a leading dot.
    pub fn allowed_domains(&self) -> Vec<String> {
        self.filters
            .as_ref()
            .and_then(|f| f.allowed_domains.as_ref())
            .map(|d| d.iter().map(|d| d.trim().trim_start_matches('.').to_ascii_lowercase()).collect())
            .unwrap_or_default()
    }
}

/// `filters` of a web_search declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSearchFilters {
    #[serde(default)]
    pub allowed_domains: Option<Vec<String>>,
}

/// How much search context the model gets (how many results a search returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchContextSize {
    Low,
    #[default]
    Medium,
    High,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebSearchToolParam {
    #[serde(rename = "type")]
    kind: WebSearchToolType,
    #[serde(default)]
    filters: Option<WebSearchFilters>,
    #[serde(default)]
    search_context_size: Option<SearchContextSize>,
    #[serde(default)]
    user_location: Option<Value>,
}

/// The spellings of the web search tool's `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebSearchToolType {
    #[serde(rename = "web_search")]
    WebSearch,
    #[serde(rename = "web_search_preview")]
    WebSearchPreview,
    #[serde(rename = "web_search_2025_08_26")]
    WebSearch20250826,
}

/// The `type` spellings of the web search tool (declarations and `tool_choice`).
pub const WEB_SEARCH_TYPES: &[&str] = &["web_search", "web_search_preview", "web_search_2025_08_26"];

/// A `web_search` declaration that allows no live web access (`external_web_access: false`,
/// Codex's default): the gateway has no offline index, and every search profile reaches the live
/// web, so the request runs without the tool rather than failing — with or without a profile
/// configured. Echoed as sent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct OfflineWebSearch(pub Value);

/// The `include` value under which items keep their `model_result` (the result the model was
/// shown) as clients see them. Not a Responses `include` value (validation refuses it): only the
/// Messages face sets it, after validation, to hand that result to its client for replay.
pub const MODEL_RESULT_INCLUDE: &str = "web_search_call.model_result";

/// The function name under which the model sees `web_search`.
pub const WEB_SEARCH_FUNCTION: &str = "web_search";

/// A `web_search` declaration (`kind` is its `type` spelling) at `at`: offline when it allows no
/// live web access, else live, which needs a search backend. At most one per request.
pub(super) fn parse(
    tool: Value,
    kind: &str,
    at: &str,
    earlier: &[ToolDeclaration],
    caps: &Capabilities,
) -> Result<ToolDeclaration, ApiError> {
    if tool.get("external_web_access") == Some(&Value::Bool(false)) {
        if earlier.iter().any(is_web_search) {
            return Err(ApiError::invalid(format!("{at}.type"), "Duplicate `web_search` tools are not allowed."));
        }
        return Ok(ToolDeclaration::OfflineWebSearch(OfflineWebSearch(tool)));
    }
    if !caps.web_search {
        return Err(tool_not_enabled(at, kind));
    }
    if earlier.iter().any(is_web_search) {
        return Err(ApiError::invalid(format!("{at}.type"), "Declare web_search at most once."));
    }
    parse_live(tool, at).map(ToolDeclaration::WebSearch)
}

fn parse_live(tool: Value, at: &str) -> Result<WebSearchTool, ApiError> {
    let w: WebSearchToolParam = serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    if let Some(domains) = w.filters.as_ref().and_then(|f| f.allowed_domains.as_ref()) {
        for (i, domain) in domains.iter().enumerate() {
            let bare = domain.trim().trim_start_matches('.');
            if bare.is_empty() || bare.contains(['/', ':', ' ', '?', '#', '@']) {
                return Err(ApiError::invalid(
                    format!("{at}.filters.allowed_domains[{i}]"),
                    format!(
                        "'{domain}' is not a domain name (give a host such as 'example.com', without scheme or path)."
                    ),
                ));
            }
        }
    }
    Ok(WebSearchTool {
        kind: w.kind,
        filters: w.filters,
        search_context_size: w.search_context_size.unwrap_or_default(),
        user_location: w.user_location,
    })
}

/// Any `web_search` declaration, live or offline (at most one per request).
fn is_web_search(tool: &ToolDeclaration) -> bool {
    matches!(tool, ToolDeclaration::WebSearch(_) | ToolDeclaration::OfflineWebSearch(_))
}

#[cfg(test)]
mod tests {
    use crate::tools::choice::{check_tool_choice, parse_tool_choice};
    use crate::tools::tests::{ALL, parse};
    use crate::tools::{Capabilities, parse_tools};
    use serde_json::json;

    #[test]
    fn web_search_is_echoed_with_every_key_and_checked() {
        let t = parse(json!([{"type":"web_search","filters":{"allowed_domains":["docs.vllm.ai"]}}])).unwrap();
        assert_eq!(
            serde_json::to_value(&t[0]).unwrap(),
            json!({"type":"web_search","filters":{"allowed_domains":["docs.vllm.ai"]},"search_context_size":"medium","user_location":null})
        );
        let e = parse(json!([{"type":"web_search","filters":{"allowed_domains":["https://x.org/a"]}}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].filters.allowed_domains[0]"));
        let e = parse(json!([{"type":"web_search","search_context_size":"huge"}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[0].search_context_size"));
        let e = parse(json!([{"type":"web_search"},{"type":"function","name":"web_search"}])).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools[1].name"));
        let off = Capabilities { web_search: false, ..ALL };
        let e = parse_tools(vec![json!({"type":"web_search_preview"})], &off).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].type")));
        let choice = parse_tool_choice(json!({"type":"web_search"})).unwrap();
        assert!(check_tool_choice(&choice, &[]).is_err());
        assert!(check_tool_choice(&choice, &t).is_ok());
    }

    #[test]
    fn cached_only_web_search_is_accepted_without_a_backend() {
        let t = parse_tools(vec![json!({"type":"web_search","external_web_access":false})], &Capabilities::default())
            .unwrap();
        assert_eq!(serde_json::to_value(&t[0]).unwrap(), json!({"type":"web_search","external_web_access":false}));
        for live in [json!({"type":"web_search"}), json!({"type":"web_search","external_web_access":true})] {
            let e = parse_tools(vec![live], &Capabilities::default()).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].type")));
        }
        assert!(parse_tools(vec![], &Capabilities::default()).unwrap().is_empty(), "tools: [] is fine");
    }
}
