//! `web_search`: searches, page opening and find-in-page, run by the gateway for the model.
//!
//! The model sees one function, `web_search`, with three actions:
//! - `search` (`query`, `queries`): the profile's [`Backend`]; results filtered by
//!   `allowed_domains`; the result count follows `search_context_size`;
//! - `open_page` (`url`): the gateway's own guarded fetch ([`fetch`]), or Exa's crawler for the
//!   `exa_mcp` profile; the text is kept in the request's page cache;
//! - `find_in_page` (`url`, `pattern`): a case-insensitive search of a page opened earlier in the
//!   same response (the cache lives as long as the request's [`WebSearchTool`]; it is not stored).
//!
//! `allowed_domains` is enforced on every action. A failure of any kind — a backend down, a page
//! refused by the address policy, a missing argument — is an `"error"` in the result the model
//! gets; the `web_search_call` item still completes. [`WebSearch`] is the process-wide part
//! (settings, HTTP clients, backend); [`WebSearchTool`] the per-request one.

mod backend;
mod fetch;
mod page;
mod settings;

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use respgw_engine::tool_kinds::web_search::function_spec;
use respgw_engine::{
    CitableSource, FunctionSpec, GatewayCall, GatewayKind, GatewayOutcome, GatewayTool, WebSearchOutcome,
};
use respgw_protocol::items::{WebSearchAction, WebSearchSource};
use respgw_protocol::tools::web_search::{SearchContextSize, WebSearchTool as WebSearchDeclaration};
use serde_json::{Value, json};

pub use backend::{Backend, SearchHit, parse_brave, parse_duckduckgo, parse_exa, parse_searxng};
pub use fetch::{FetchedBody, FetchedPage, PageFetcher};
pub use page::{PageMatch, canonical_url, domain_allowed, find_in_page};
pub use settings::{
    DEFAULT_BRAVE_URL, DEFAULT_DUCKDUCKGO_URL, DEFAULT_EXA_MCP_URL, EXA_SERVER_LABEL, FetchSettings, Profile,
    WebSearchSettings, exa_server_entry,
};

use crate::mcp::McpHelperClient;

/// Distinct queries of one `search` action that are run (the rest are shown but not searched).
const MAX_QUERIES: usize = 3;

/// Web search in one process: the profile's backend, its HTTP client and the page fetcher.
#[derive(Clone)]
pub struct WebSearch {
    backend: Backend,
    http: reqwest::Client,
    fetcher: PageFetcher,
}

impl WebSearch {
    /// `helper` (the Built-in MCP helper) is needed by the `exa_mcp` profile; the `brave` profile
    /// needs `settings.brave_api_key`.
    pub fn new(settings: &WebSearchSettings, helper: Option<McpHelperClient>) -> Result<Self, String> {
        crate::net_guard::ensure_crypto_provider();
        let backend = Backend::new(settings, settings.brave_api_key.clone(), helper)?;
        let http = reqwest::Client::builder()
            .timeout(settings.search_timeout)
            .build()
            .map_err(|e| format!("cannot build the web search client: {e}"))?;
        Ok(WebSearch { backend, http, fetcher: PageFetcher::new(settings.fetch.clone())? })
    }

    /// The tool for one request's declaration.
    pub fn tool(&self, declaration: &WebSearchDeclaration) -> WebSearchTool {
        WebSearchTool {
            search: self.clone(),
            spec: function_spec(),
            kind: GatewayKind::WebSearch,
            allowed_domains: declaration.allowed_domains(),
            context: declaration.search_context_size,
            country: declaration
                .user_location
                .as_ref()
                .and_then(|l| l.get("country"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            pages: Mutex::default(),
        }
    }
}

/// A page opened in this request.
#[derive(Debug, Clone)]
struct CachedPage {
    title: Option<String>,
    text: String,
}

/// `web_search` for one request: its filters and hints, and the pages it opened.
pub struct WebSearchTool {
    search: WebSearch,
    spec: FunctionSpec,
    kind: GatewayKind,
    allowed_domains: Vec<String>,
    context: SearchContextSize,
    country: Option<String>,
    /// Opened pages by canonical URL, for `find_in_page`.
    pages: Mutex<HashMap<String, CachedPage>>,
}

/// The model's arguments, every field optional (the action is inferred when missing).
#[derive(Debug, Default, serde::Deserialize)]
struct Arguments {
    action: Option<String>,
    query: Option<String>,
    queries: Option<Vec<String>>,
    url: Option<String>,
    pattern: Option<String>,
}

impl WebSearchTool {
    /// Results per search and page characters shown to the model, by `search_context_size`.
    fn budget(&self) -> (usize, usize) {
        match self.context {
            SearchContextSize::Low => (5, 8_000),
            SearchContextSize::Medium => (8, 20_000),
            SearchContextSize::High => (12, 50_000),
        }
    }

    fn allowed(&self, url: &str) -> bool {
        domain_allowed(url, &self.allowed_domains)
    }

    async fn run(&self, arguments: &str) -> WebSearchOutcome {
        let args = match serde_json::from_str::<Value>(arguments) {
            Ok(Value::Object(map)) => serde_json::from_value::<Arguments>(Value::Object(map)).unwrap_or_default(),
            _ => Arguments::default(),
        };
        let action = args.action.clone().unwrap_or_else(|| {
            if args.pattern.is_some() {
                "find_in_page".into()
            } else if args.url.is_some() {
                "open_page".into()
            } else {
                "search".into()
            }
        });
        match action.as_str() {
            "open_page" => self.open_page(args.url).await,
            "find_in_page" => self.find(args.url, args.pattern.unwrap_or_default()),
            _ => self.search(args.query, args.queries).await,
        }
    }

    async fn search(&self, query: Option<String>, queries: Option<Vec<String>>) -> WebSearchOutcome {
        let queries: Vec<String> = match queries.filter(|q| !q.is_empty()) {
            Some(list) => list,
            None => query.clone().into_iter().collect(),
        };
        let query = query.or_else(|| queries.first().cloned()).unwrap_or_default();
        let (count, _) = self.budget();
        let mut hits: Vec<SearchHit> = Vec::new();
        let mut errors = Vec::new();
        let mut searched: Vec<String> = Vec::new();
        for q in std::iter::once(&query).chain(queries.iter()) {
            if q.trim().is_empty() || searched.contains(q) || searched.len() == MAX_QUERIES {
                continue;
            }
            searched.push(q.clone());
            let hints =
                backend::SearchHints { count, domains: &self.allowed_domains, country: self.country.as_deref() };
            match self.search.backend.search(&self.search.http, q, &hints).await {
                Ok(found) => {
                    for mut hit in found {
                        let Some(canonical) = canonical_url(&hit.url) else { continue };
                        if self.allowed(&canonical) && !hits.iter().any(|h| h.url == canonical) && hits.len() < count {
                            hit.url = canonical;
                            hits.push(hit);
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        let sources: Vec<WebSearchSource> = hits.iter().map(|h| WebSearchSource { url: h.url.clone() }).collect();
        let action = WebSearchAction::Search { query, queries, sources: Some(sources) };
        let mut result = json!({"action": action, "results": hits});
        let ok = if searched.is_empty() {
            result["error"] = json!("`query` is required for search.");
            false
        } else if hits.is_empty() && !errors.is_empty() {
            result["error"] = json!(errors.join(" "));
            false
        } else {
            true
        };
        let citable = hits.iter().map(|h| CitableSource { url: h.url.clone(), title: h.title.clone() }).collect();
        WebSearchOutcome { action, model_result: result.to_string(), citable, ok }
    }

    async fn open_page(&self, url: Option<String>) -> WebSearchOutcome {
        let action = WebSearchAction::OpenPage { url: url.clone() };
        let failed = |action: WebSearchAction, error: String| WebSearchOutcome {
            model_result: json!({"action": action, "error": error}).to_string(),
            action,
            citable: Vec::new(),
            ok: false,
        };
        let Some(url) = url.filter(|u| !u.trim().is_empty()) else {
            return failed(action, "`url` is required for open_page.".into());
        };
        let Some(canonical) = canonical_url(&url) else {
            return failed(action, format!("'{url}' is not an http(s) URL."));
        };
        if !self.allowed(&canonical) {
            return failed(action, "URL is not allowed by `filters.allowed_domains`.".into());
        }
        let (_, max_chars) = self.budget();
        let page = if self.search.backend.opens_pages() {
            self.search.backend.open(&canonical).await.map(|text| FetchedPage {
                final_url: canonical.clone(),
                title: None,
                text,
                truncated: false,
            })
        } else {
            self.search.fetcher.fetch(&canonical).await
        };
        let page = match page {
            Ok(page) => page,
            Err(e) => return failed(action, e),
        };
        // A redirect may leave the allowed domains; the content is then not shown.
        if !self.allowed(&page.final_url) {
            return failed(action, "The page redirected to a URL not allowed by `filters.allowed_domains`.".into());
        }
        let shown: String = page.text.chars().take(max_chars).collect();
        let cut = page.truncated || shown.len() < page.text.len();
        let result = json!({
            "action": action,
            "page": {"url": canonical, "title": page.title, "text": shown, "truncated": cut},
        });
        let title = page.title.clone();
        self.pages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(canonical.clone(), CachedPage { title: page.title, text: page.text });
        WebSearchOutcome {
            action,
            model_result: result.to_string(),
            citable: vec![CitableSource { url: canonical, title }],
            ok: true,
        }
    }

    fn find(&self, url: Option<String>, pattern: String) -> WebSearchOutcome {
        let action = WebSearchAction::FindInPage { url: url.clone(), pattern: pattern.clone() };
        let error = |e: &str| json!({"action": action, "error": e});
        let canonical = url.as_deref().and_then(canonical_url);
        let (result, ok) = match (&canonical, pattern.is_empty()) {
            (None, _) => (error("`url` (an http(s) URL) is required for find_in_page."), false),
            (_, true) => (error("`pattern` is required for find_in_page."), false),
            (Some(c), false) if !self.allowed(c) => (error("URL is not allowed by `filters.allowed_domains`."), false),
            (Some(c), false) => match self.pages.lock().unwrap_or_else(PoisonError::into_inner).get(c) {
                None => (
                    error(
                        "Page is not available in the request-local web_search page cache. Open it with open_page first.",
                    ),
                    false,
                ),
                Some(page) => {
                    let matches = find_in_page(&page.text, &pattern);
                    (json!({"action": action, "url": c, "title": page.title, "matches": matches}), true)
                }
            },
        };
        WebSearchOutcome { model_result: result.to_string(), action, citable: Vec::new(), ok }
    }
}

#[async_trait]
impl GatewayTool for WebSearchTool {
    fn spec(&self) -> &FunctionSpec {
        &self.spec
    }

    fn kind(&self) -> &GatewayKind {
        &self.kind
    }

    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome {
        GatewayOutcome::WebSearch(self.run(call.arguments).await)
    }
}
