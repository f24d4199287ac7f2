//! `file_search`: the model's queries run over the request tenant's vector stores.
//!
//! [`FileSearch`] is the process-wide part (the worker's `Retrieval`).
//! [`FileSearch::check_vector_stores`] runs when a request's tools are resolved: every vector
//! store a declaration names must be the tenant's (another tenant's is "not found", like an
//! unknown one, and is never searched). [`FileSearch::run`] runs one call: its `{"queries": […]}`
//! (a lone `query` string is taken too) becomes one [`Retrieval::search`] with the declaration's
//! vector stores, `max_num_results`, `filters` and `score_threshold`; its results, or why the
//! search failed in a sentence the model can act on, are the call's outcome — a failure never
//! fails the response. The engine's adapter is `crates/tools/src/resolver/file_search.rs`.

use respgw_engine::FileSearchOutcome;
use respgw_protocol::items::FileSearchResult;
use respgw_protocol::tools::file_search::FileSearchTool as FileSearchDeclaration;
use respgw_protocol::{ApiError, ErrorType};
use respgw_retrieval::{HybridWeights, Retrieval, SearchError, SearchRequest, SearchResult};
use serde_json::Value;

/// Queries of one call that are searched (the rest are dropped).
pub const MAX_QUERIES: usize = 5;

/// File search in one process: the worker's retrieval service.
#[derive(Clone)]
pub struct FileSearch {
    retrieval: Retrieval,
}

impl FileSearch {
    pub fn new(retrieval: Retrieval) -> Self {
        FileSearch { retrieval }
    }

    /// Check that every vector store of the declaration at `tools[index]` is tenant `owner`'s,
    /// looking each up once: the first that is not is a 404 naming
    /// `tools[index].vector_store_ids[j]`.
    pub async fn check_vector_stores(
        &self,
        index: usize,
        declaration: &FileSearchDeclaration,
        owner: &str,
    ) -> Result<(), ApiError> {
        for (j, id) in declaration.vector_store_ids.iter().enumerate() {
            if self.retrieval.store().vector_store(owner, id).await?.is_none() {
                return Err(vector_store_not_found(id, &format!("tools[{index}].vector_store_ids[{j}]")));
            }
        }
        Ok(())
    }

    /// Run one call of tenant `owner`'s `declaration` with the model's `arguments`.
    pub async fn run(&self, owner: &str, declaration: &FileSearchDeclaration, arguments: &str) -> FileSearchOutcome {
        let queries = queries_of(arguments);
        if queries.is_empty() {
            let missing = "`queries` needs at least one non-empty search query.".to_owned();
            return FileSearchOutcome { queries, found: Err(missing) };
        }
        let request = SearchRequest {
            owner: owner.to_owned(),
            vector_store_ids: declaration.vector_store_ids.clone(),
            queries: queries.clone(),
            max_num_results: declaration.max_num_results as usize,
            filters: declaration.filters.clone(),
            score_threshold: Some(declaration.ranking_options.score_threshold).filter(|threshold| *threshold > 0.0),
            weights: declaration
                .ranking_options
                .hybrid_search
                .map(|h| HybridWeights { embedding: h.embedding_weight, text: h.text_weight }),
        };
        let found = match self.retrieval.search(&request).await {
            Ok(results) => Ok(results.into_iter().map(result_of).collect()),
            Err(e) => Err(describe(&e)),
        };
        FileSearchOutcome { queries, found }
    }
}

/// 404 for a vector store the tenant does not have (missing, or another tenant's).
fn vector_store_not_found(id: &str, param: &str) -> ApiError {
    ApiError {
        status: 404,
        error_type: ErrorType::InvalidRequestError,
        message: format!("Vector store '{id}' not found."),
        param: Some(param.to_owned()),
        code: Some("vector_store_not_found".to_owned()),
    }
}

/// The queries of the model's arguments: `queries` (a list, or one string) or `query`, trimmed,
/// without empty or repeated ones, at most [`MAX_QUERIES`].
fn queries_of(arguments: &str) -> Vec<String> {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let given = match (args.get("queries"), args.get("query")) {
        (Some(Value::Array(list)), _) => list.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        (Some(Value::String(one)), _) | (_, Some(Value::String(one))) => vec![one.clone()],
        _ => Vec::new(),
    };
    let mut queries: Vec<String> = Vec::new();
    for query in given {
        let query = query.trim();
        if !query.is_empty() && !queries.iter().any(|q| q == query) && queries.len() < MAX_QUERIES {
            queries.push(query.to_owned());
        }
    }
    queries
}

/// A search result as a `file_search_call` result: its chunks' text, best first.
fn result_of(found: SearchResult) -> FileSearchResult {
    FileSearchResult {
        file_id: found.file_id,
        filename: found.filename,
        score: found.score,
        attributes: found.attributes,
        text: found.content.join("\n\n"),
    }
}

/// Why a search failed, in words for the model (no internals: those go to the log).
fn describe(error: &SearchError) -> String {
    match error {
        SearchError::VectorStoreNotFound(id) => format!("Vector store '{id}' no longer exists."),
        SearchError::Embedding(detail) => {
            tracing::warn!(error = %detail, "file_search: the embedding endpoint failed");
            "The embedding service the search needs did not answer.".to_owned()
        }
        SearchError::Store(e) => {
            tracing::warn!(error = %e, "file_search: the store failed");
            "The file index could not be read.".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_taken_leniently_and_cleaned() {
        assert_eq!(queries_of(r#"{"queries":["a"," b ","a",""]}"#), ["a", "b"]);
        assert_eq!(queries_of(r#"{"query":"pto policy"}"#), ["pto policy"]);
        assert_eq!(queries_of(r#"{"queries":"one"}"#), ["one"]);
        assert!(queries_of("not json").is_empty());
        assert!(queries_of(r#"{"queries":[" "]}"#).is_empty());
        let many = serde_json::json!({"queries": (0..9).map(|i| format!("q{i}")).collect::<Vec<_>>()});
        assert_eq!(queries_of(&many.to_string()).len(), MAX_QUERIES);
    }

    #[test]
    fn failures_are_told_without_internals() {
        let told = describe(&SearchError::Embedding("connect error 10.0.0.5:8080".into()));
        assert!(!told.contains("10.0.0.5"), "{told}");
        assert!(describe(&SearchError::VectorStoreNotFound("vs_1".into())).contains("vs_1"));
    }
}
