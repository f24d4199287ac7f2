//! `file_search`: the gateway searches the request tenant's vector stores for the model. The
//! declaration and its checks (which vector stores, how many results, ranking, attribute
//! filters), and the function name the model sees. Whether the vector stores are the tenant's is
//! checked when the engine resolves the tools (that needs the store).

use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::{Capabilities, ToolDeclaration, client_function_names, tool_not_enabled};
use crate::error::ApiError;
use crate::filters::Filter;

/// The function name under which the model sees `file_search`.
pub const FILE_SEARCH_FUNCTION: &str = "file_search";

/// Vector stores one declaration may search.
pub const MAX_VECTOR_STORES: usize = 10;

/// Results a search returns when the declaration does not say (the reference API's default).
pub const DEFAULT_MAX_NUM_RESULTS: u32 = 20;

/// The reference API's bounds of `max_num_results`.
const MAX_NUM_RESULTS: std::ops::RangeInclusive<i64> = 1..=50;

/// `{"type":"file_search","vector_store_ids":[…],"filters","max_num_results","ranking_options"}`,
/// echoed with every key present and the defaults filled in, as the reference API does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileSearchTool {
    #[serde(rename = "type")]
    pub kind: FileSearchToolType,
    /// The vector stores searched, in the order given, without duplicates.
    pub vector_store_ids: Vec<String>,
    /// Only files whose attributes pass are searched.
    #[serde(serialize_with = "filter_as_written")]
    pub filters: Option<Filter>,
    /// 1..=50.
    pub max_num_results: u32,
    pub ranking_options: RankingOptions,
}

/// The constant `"file_search"` tag of [`FileSearchTool`] (and of its `tool_choice`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileSearchToolType {
    FileSearch,
}

/// `ranking_options` of a file_search declaration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RankingOptions {
    /// Accepted and echoed; the gateway has one ranker.
    #[serde(default)]
    pub ranker: Ranker,
    /// Results scoring below it (0..=1) are dropped.
    #[serde(default)]
    pub score_threshold: f64,
    /// How much vector and lexical ranks count in the fusion (equally without it).
    #[serde(default)]
    pub hybrid_search: Option<HybridSearch>,
}

impl Default for RankingOptions {
    fn default() -> Self {
        RankingOptions { ranker: Ranker::Auto, score_threshold: 0.0, hybrid_search: None }
    }
}

/// The rankers the reference API names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Ranker {
    #[default]
    #[serde(rename = "auto")]
    Auto,
    #[serde(rename = "default-2024-11-15")]
    Default20241115,
}

/// `ranking_options.hybrid_search`: how vector and keyword matches are weighted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HybridSearch {
    pub embedding_weight: f64,
    pub text_weight: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSearchToolParam {
    #[serde(rename = "type")]
    kind: FileSearchToolType,
    #[serde(default)]
    vector_store_ids: Option<Vec<String>>,
    #[serde(default)]
    max_num_results: Option<i64>,
    #[serde(default)]
    ranking_options: Option<RankingOptions>,
    #[serde(default)]
    filters: Option<Value>,
}

/// A `file_search` declaration at `at`, when this gateway runs it and `earlier` holds none (nor
/// a function of the same name).
pub(super) fn parse(
    tool: Value,
    at: &str,
    earlier: &[ToolDeclaration],
    caps: &Capabilities,
) -> Result<FileSearchTool, ApiError> {
    if !caps.file_search {
        return Err(tool_not_enabled(at, "file_search"));
    }
    if earlier.iter().any(|t| matches!(t, ToolDeclaration::FileSearch(_))) {
        return Err(ApiError::invalid(format!("{at}.type"), "Declare file_search at most once."));
    }
    if earlier.iter().any(|t| client_function_names(t).iter().any(|n| n == FILE_SEARCH_FUNCTION)) {
        return Err(ApiError::invalid(
            format!("{at}.type"),
            format!(
                "A function tool is already named '{FILE_SEARCH_FUNCTION}', the name file_search is offered under."
            ),
        ));
    }
    let p: FileSearchToolParam =
        serde_path_to_error::deserialize(tool).map_err(|e| ApiError::from_path_error(at, e))?;
    let vector_store_ids = vector_store_ids(p.vector_store_ids, at)?;
    let max_num_results = match p.max_num_results {
        None => DEFAULT_MAX_NUM_RESULTS,
        Some(n) if MAX_NUM_RESULTS.contains(&n) => n as u32,
        Some(n) => {
            return Err(ApiError::invalid(
                format!("{at}.max_num_results"),
                format!("max_num_results must be between 1 and 50; got {n}."),
            ));
        }
    };
    let ranking_options = p.ranking_options.unwrap_or_default();
    check_ranking(&ranking_options, &format!("{at}.ranking_options"))?;
    let filters = match p.filters {
        None | Some(Value::Null) => None,
        Some(value) => Some(Filter::parse(&value, &format!("{at}.filters"))?),
    };
    Ok(FileSearchTool { kind: p.kind, vector_store_ids, filters, max_num_results, ranking_options })
}

/// `vector_store_ids`: present, 1..=[`MAX_VECTOR_STORES`] distinct non-empty ids.
fn vector_store_ids(ids: Option<Vec<String>>, at: &str) -> Result<Vec<String>, ApiError> {
    let param = format!("{at}.vector_store_ids");
    let ids = ids.unwrap_or_default();
    if ids.is_empty() {
        return Err(ApiError::invalid(
            param,
            "file_search needs `vector_store_ids`: the ids of one or more of your vector stores to search.",
        ));
    }
    if ids.len() > MAX_VECTOR_STORES {
        return Err(ApiError::invalid(
            param,
            format!("file_search searches at most {MAX_VECTOR_STORES} vector stores; got {}.", ids.len()),
        ));
    }
    for (j, id) in ids.iter().enumerate() {
        if id.trim().is_empty() {
            return Err(ApiError::invalid(format!("{param}[{j}]"), "A vector store id must not be empty."));
        }
        if ids[..j].contains(id) {
            return Err(ApiError::invalid(format!("{param}[{j}]"), format!("Vector store '{id}' is listed twice.")));
        }
    }
    Ok(ids)
}

fn check_ranking(options: &RankingOptions, at: &str) -> Result<(), ApiError> {
    let threshold = options.score_threshold;
    if !(0.0..=1.0).contains(&threshold) {
        return Err(ApiError::invalid(
            format!("{at}.score_threshold"),
            format!("score_threshold must be between 0 and 1; got {threshold}."),
        ));
    }
    if let Some(h) = options.hybrid_search {
        for (name, weight) in [("embedding_weight", h.embedding_weight), ("text_weight", h.text_weight)] {
            if !weight.is_finite() || weight < 0.0 {
                return Err(ApiError::invalid(
                    format!("{at}.hybrid_search.{name}"),
                    format!("{name} must be a number of 0 or more; got {weight}."),
                ));
            }
        }
        if h.embedding_weight + h.text_weight <= 0.0 {
            return Err(ApiError::invalid(
                format!("{at}.hybrid_search"),
                "At least one of embedding_weight and text_weight must be above 0.",
            ));
        }
    }
    Ok(())
}

/// `filters` echoed as the client wrote it (`null` without one).
fn filter_as_written<S: Serializer>(filter: &Option<Filter>, serializer: S) -> Result<S::Ok, S::Error> {
    filter.as_ref().map(Filter::to_json).serialize(serializer)
}

#[cfg(test)]
mod tests {
    use crate::tools::choice::{check_tool_choice, parse_tool_choice};
    use crate::tools::tests::{ALL, parse};
    use crate::tools::{Capabilities, parse_tools};
    use serde_json::json;

    fn param_of(tools: serde_json::Value) -> (u16, Option<String>) {
        let e = parse(tools).unwrap_err();
        (e.status, e.param)
    }

    #[test]
    fn file_search_is_echoed_with_its_defaults() {
        let t = parse(json!([{"type":"file_search","vector_store_ids":["vs_1","vs_2"]}])).unwrap();
        assert_eq!(
            serde_json::to_value(&t[0]).unwrap(),
            json!({"type":"file_search","vector_store_ids":["vs_1","vs_2"],"filters":null,"max_num_results":20,
                "ranking_options":{"ranker":"auto","score_threshold":0.0,"hybrid_search":null}})
        );
        let t = parse(json!([{"type":"file_search","vector_store_ids":["vs_1"],"max_num_results":50,
            "ranking_options":{"ranker":"default-2024-11-15","score_threshold":0.5,
                "hybrid_search":{"embedding_weight":0.7,"text_weight":0.3}}}]))
        .unwrap();
        let echoed = serde_json::to_value(&t[0]).unwrap();
        assert_eq!(echoed["max_num_results"], 50);
        assert_eq!(echoed["ranking_options"]["ranker"], "default-2024-11-15");
        assert_eq!(echoed["ranking_options"]["hybrid_search"]["text_weight"], 0.3);
    }

    #[test]
    fn rejects_missing_empty_or_repeated_vector_store_ids() {
        let at = |p: &str| (400, Some(p.to_owned()));
        assert_eq!(param_of(json!([{"type":"file_search"}])), at("tools[0].vector_store_ids"));
        assert_eq!(param_of(json!([{"type":"file_search","vector_store_ids":[]}])), at("tools[0].vector_store_ids"));
        assert_eq!(
            param_of(json!([{"type":"function","name":"f"},{"type":"file_search","vector_store_ids":["a",""]}])),
            at("tools[1].vector_store_ids[1]")
        );
        assert_eq!(
            param_of(json!([{"type":"file_search","vector_store_ids":["a","b","a"]}])),
            at("tools[0].vector_store_ids[2]")
        );
        let many: Vec<String> = (0..11).map(|i| format!("vs_{i}")).collect();
        assert_eq!(param_of(json!([{"type":"file_search","vector_store_ids":many}])), at("tools[0].vector_store_ids"));
        assert_eq!(
            param_of(json!([{"type":"file_search","vector_store_ids":"vs_1"}])),
            at("tools[0].vector_store_ids")
        );
    }

    #[test]
    fn rejects_max_num_results_outside_1_to_50() {
        for n in [0, 51, -3] {
            let e = parse(json!([{"type":"file_search","vector_store_ids":["vs_1"],"max_num_results":n}])).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].max_num_results")), "{n}");
            assert!(e.message.contains("between 1 and 50"), "{}", e.message);
        }
    }

    #[test]
    fn rejects_bad_ranking_options_and_unknown_keys() {
        let with = |extra: serde_json::Value| {
            let mut tool = json!({"type":"file_search","vector_store_ids":["vs_1"]});
            tool.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            param_of(json!([tool])).1.unwrap()
        };
        assert_eq!(
            with(json!({"ranking_options":{"score_threshold":1.5}})),
            "tools[0].ranking_options.score_threshold"
        );
        assert_eq!(with(json!({"ranking_options":{"ranker":"best"}})), "tools[0].ranking_options.ranker");
        assert_eq!(
            with(json!({"ranking_options":{"hybrid_search":{"embedding_weight":-1,"text_weight":1}}})),
            "tools[0].ranking_options.hybrid_search.embedding_weight"
        );
        assert_eq!(with(json!({"vector_store":"vs_1"})), "tools[0].vector_store");
    }

    #[test]
    fn filters_are_parsed_under_the_tools_path_and_echoed_as_written() {
        let filters = json!({"type":"and","filters":[{"type":"eq","key":"team","value":"hr"},
            {"type":"in","key":"year","value":[2024,2025]}]});
        let t = parse(json!([{"type":"file_search","vector_store_ids":["vs_1"],"filters":filters}])).unwrap();
        assert_eq!(serde_json::to_value(&t[0]).unwrap()["filters"], filters);
        let at = |f: serde_json::Value| param_of(json!([{"type":"file_search","vector_store_ids":["a"],"filters":f}]));
        assert_eq!(at(json!({"type":"eq","value":1})), (400, Some("tools[0].filters.key".into())));
        assert_eq!(
            at(json!({"type":"or","filters":[{"type":"near","key":"a","value":1}]})),
            (400, Some("tools[0].filters.filters[0].type".into()))
        );
        let null = parse(json!([{"type":"file_search","vector_store_ids":["a"],"filters":null}])).unwrap();
        assert_eq!(serde_json::to_value(&null[0]).unwrap()["filters"], serde_json::Value::Null);
    }

    #[test]
    fn file_search_is_declared_once_and_owns_its_function_name() {
        let twice =
            json!([{"type":"file_search","vector_store_ids":["a"]},{"type":"file_search","vector_store_ids":["b"]}]);
        assert_eq!(param_of(twice), (400, Some("tools[1].type".into())));
        let after = json!([{"type":"file_search","vector_store_ids":["a"]},{"type":"function","name":"file_search"}]);
        assert_eq!(param_of(after), (400, Some("tools[1].name".into())));
        let before = json!([{"type":"function","name":"file_search"},{"type":"file_search","vector_store_ids":["a"]}]);
        assert_eq!(param_of(before), (400, Some("tools[1].type".into())));
    }

    #[test]
    fn file_search_needs_the_capability_and_can_be_forced() {
        let off = Capabilities { file_search: false, ..ALL };
        let e = parse_tools(vec![json!({"type":"file_search","vector_store_ids":["a"]})], &off).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some("tools[0].type")));
        let t = parse(json!([{"type":"file_search","vector_store_ids":["a"]}])).unwrap();
        let choice = parse_tool_choice(json!({"type":"file_search"})).unwrap();
        assert!(check_tool_choice(&choice, &t).is_ok());
        let e = check_tool_choice(&choice, &[]).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice.type"));
        let allowed = parse_tool_choice(json!({"type":"allowed_tools","mode":"auto","tools":[{"type":"file_search"}]}));
        assert!(check_tool_choice(&allowed.unwrap(), &t).is_ok());
    }
}
