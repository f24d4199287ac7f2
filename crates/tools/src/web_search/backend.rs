//! Search backends, each speaking its service's real wire format:
//! DuckDuckGo's HTML result page, SearXNG's JSON API, the Brave Search API, and Exa's MCP tools
//! (`web_search_exa`, `crawling_exa`) through the Built-in MCP helper.
//!
//! Backends are operator-configured endpoints, not URLs the model chose, so they are reached with
//! a plain HTTP client (no address guard): tests and self-hosted SearXNG live on private networks.

use reqwest::header::{ACCEPT, HeaderValue, USER_AGENT};
use serde::Deserialize;
use serde_json::{Value, json};

use super::settings::{EXA_SERVER_LABEL, Profile, WebSearchSettings};
use crate::mcp::McpHelperClient;
use respgw_mcp::redact::error_chain;

/// One search result as the model gets it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SearchHit {
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
}

/// Hints a search may use.
#[derive(Debug, Clone, Default)]
pub struct SearchHints<'a> {
    /// How many results to ask for.
    pub count: usize,
    /// `allowed_domains`: backends that can restrict by domain do so (results are filtered anyway).
    pub domains: &'a [String],
    /// ISO country code from `user_location.country`.
    pub country: Option<&'a str>,
}

/// Where searches go.
#[derive(Clone)]
pub enum Backend {
    DuckDuckGo { url: String },
    Searxng { base_url: String },
    Brave { url: String, api_key: String },
    Exa { helper: McpHelperClient },
}

impl Backend {
    /// The backend of `settings`' profile. `brave_key` and `helper` are needed by their profiles.
    pub fn new(
        settings: &WebSearchSettings,
        brave_key: Option<String>,
        helper: Option<McpHelperClient>,
    ) -> Result<Backend, String> {
        Ok(match settings.profile {
            Profile::DuckduckgoPlusFetch => Backend::DuckDuckGo { url: settings.duckduckgo_url.clone() },
            Profile::Searxng => Backend::Searxng {
                base_url: settings.searxng_url.clone().ok_or("the searxng profile needs a SearXNG base URL")?,
            },
            Profile::Brave => Backend::Brave {
                url: settings.brave_url.clone(),
                api_key: brave_key.filter(|k| !k.trim().is_empty()).ok_or("the brave profile needs BRAVE_API_KEY")?,
            },
            Profile::ExaMcp => {
                Backend::Exa { helper: helper.ok_or("the exa_mcp profile needs the Built-in MCP helper")? }
            }
        })
    }

    /// Whether this backend opens pages itself (Exa crawls); otherwise the gateway fetches them.
    pub fn opens_pages(&self) -> bool {
        matches!(self, Backend::Exa { .. })
    }

    /// Search `query`; an error is a sentence for the model.
    pub async fn search(
        &self,
        http: &reqwest::Client,
        query: &str,
        hints: &SearchHints<'_>,
    ) -> Result<Vec<SearchHit>, String> {
        match self {
            Backend::DuckDuckGo { url } => {
                let url = with_query(url, &[("q", &scoped_query(query, hints.domains))])?;
                let body = get_text(http.get(url), "DuckDuckGo").await?;
                let hits = parse_duckduckgo(&body);
                // Rate-limited clients get a bot challenge page instead of results.
                if hits.is_empty() && body.contains("anomaly-modal") {
                    return Err("DuckDuckGo refused the search (a bot challenge); try again later.".to_owned());
                }
                Ok(hits)
            }
            Backend::Searxng { base_url } => {
                let endpoint = format!("{}/search", base_url.trim_end_matches('/'));
                let url = with_query(&endpoint, &[("q", &scoped_query(query, hints.domains)), ("format", "json")])?;
                let request = http.get(url);
                let body = get_text(request.header(ACCEPT, "application/json"), "SearXNG").await?;
                parse_searxng(&body)
            }
            Backend::Brave { url, api_key } => {
                let (q, count) = (scoped_query(query, hints.domains), hints.count.clamp(1, 20).to_string());
                let country = hints.country.map(str::to_ascii_lowercase);
                let mut params = vec![("q", q.as_str()), ("count", count.as_str())];
                if let Some(country) = &country {
                    params.push(("country", country));
                }
                let request = http
                    .get(with_query(url, &params)?)
                    .header(ACCEPT, "application/json")
                    .header("X-Subscription-Token", api_key.as_str());
                let body = get_text(request, "Brave Search").await?;
                parse_brave(&body)
            }
            Backend::Exa { helper } => {
                let mut arguments = json!({"query": query, "numResults": hints.count});
                if !hints.domains.is_empty() {
                    arguments["includeDomains"] = json!(hints.domains);
                }
                let text = call_exa(helper, "web_search_exa", arguments).await?;
                Ok(parse_exa(&text))
            }
        }
    }

    /// Open `url` through the backend (Exa only): the page's text.
    pub async fn open(&self, url: &str) -> Result<String, String> {
        match self {
            Backend::Exa { helper } => {
                Ok(call_exa(helper, "crawling_exa", json!({"urls": [url]})).await?.trim().to_owned())
            }
            _ => Err("this backend does not open pages".to_owned()),
        }
    }
}

/// The query restricted to `domains` with `site:` operators (all three engines understand them).
fn scoped_query(query: &str, domains: &[String]) -> String {
    match domains {
        [] => query.to_owned(),
        [one] => format!("{query} site:{one}"),
        many => format!("{query} ({})", many.iter().map(|d| format!("site:{d}")).collect::<Vec<_>>().join(" OR ")),
    }
}

/// `base` with these query parameters added.
fn with_query(base: &str, params: &[(&str, &str)]) -> Result<url::Url, String> {
    let mut url = url::Url::parse(base).map_err(|e| format!("The search endpoint '{base}' is not a valid URL: {e}"))?;
    url.query_pairs_mut().extend_pairs(params);
    Ok(url)
}

async fn get_text(request: reqwest::RequestBuilder, service: &str) -> Result<String, String> {
    let request = request.header(USER_AGENT, HeaderValue::from_static(concat!("respgw/", env!("CARGO_PKG_VERSION"))));
    let response = request.send().await.map_err(|e| format!("{service} could not be reached: {}", error_chain(&e)))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{service} answered HTTP {status}."));
    }
    response.text().await.map_err(|e| format!("{service}'s answer could not be read: {}", error_chain(&e)))
}

async fn call_exa(helper: &McpHelperClient, tool: &str, arguments: Value) -> Result<String, String> {
    match helper.call(EXA_SERVER_LABEL, tool, arguments).await {
        Ok(outcome) if outcome.ok => Ok(outcome.output_text.unwrap_or_default()),
        Ok(outcome) => {
            Err(format!("Exa {tool} failed: {}", outcome.error_text.unwrap_or_else(|| "no reason given".into())))
        }
        Err(e) => Err(format!("Exa could not be reached: {e}")),
    }
}

fn squash(text: &str) -> Option<String> {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

macro_rules! selector {
    ($css:literal) => {{
        static SELECTOR: std::sync::LazyLock<scraper::Selector> =
            std::sync::LazyLock::new(|| scraper::Selector::parse($css).expect("a valid selector"));
        &*SELECTOR
    }};
}

/// DuckDuckGo's HTML result page (`html.duckduckgo.com/html/`): `.result` blocks with an
/// `a.result__a` link (often a `/l/?uddg=<target>` redirect) and a `.result__snippet`; ads
/// (`.result--ad`) skipped.
pub fn parse_duckduckgo(html: &str) -> Vec<SearchHit> {
    let document = scraper::Html::parse_document(html);
    let mut hits = Vec::new();
    for result in document.select(selector!(".result")) {
        if result.value().classes().any(|c| c == "result--ad") {
            continue;
        }
        let Some(link) = result.select(selector!("a.result__a")).next() else { continue };
        let Some(url) = link.value().attr("href").and_then(duckduckgo_target) else { continue };
        hits.push(SearchHit {
            url,
            title: squash(&link.text().collect::<String>()),
            snippet: result
                .select(selector!(".result__snippet"))
                .next()
                .and_then(|s| squash(&s.text().collect::<String>())),
        });
    }
    hits
}

/// The real target of a DuckDuckGo result link.
fn duckduckgo_target(href: &str) -> Option<String> {
    let absolute = if href.starts_with("//") { format!("https:{href}") } else { href.to_owned() };
    let url = url::Url::parse(&absolute).ok()?;
    if url.path().starts_with("/l/")
        && let Some((_, target)) = url.query_pairs().find(|(k, _)| k == "uddg")
    {
        return Some(target.into_owned());
    }
    matches!(url.scheme(), "http" | "https").then_some(absolute)
}

/// One result as SearXNG (`content`) and Brave (`description`) send it.
#[derive(Deserialize)]
struct WireHit {
    url: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default, alias = "content", alias = "description")]
    snippet: Option<String>,
}

/// SearXNG's `format=json`: `{"results":[{"url","title","content"}]}`.
pub fn parse_searxng(body: &str) -> Result<Vec<SearchHit>, String> {
    #[derive(Deserialize)]
    struct Page {
        #[serde(default)]
        results: Vec<WireHit>,
    }
    let page: Page = serde_json::from_str(body).map_err(|e| format!("SearXNG's answer is not its JSON format: {e}"))?;
    Ok(page
        .results
        .into_iter()
        .map(|h| SearchHit {
            url: h.url,
            title: h.title.as_deref().and_then(squash),
            snippet: h.snippet.as_deref().and_then(squash),
        })
        .collect())
}

/// Brave's web search: `{"web":{"results":[{"url","title","description"}]}}`.
pub fn parse_brave(body: &str) -> Result<Vec<SearchHit>, String> {
    #[derive(Deserialize)]
    struct Page {
        #[serde(default)]
        web: Option<Web>,
    }
    #[derive(Deserialize)]
    struct Web {
        #[serde(default)]
        results: Vec<WireHit>,
    }
    let page: Page =
        serde_json::from_str(body).map_err(|e| format!("Brave Search's answer is not its JSON format: {e}"))?;
    Ok(page
        .web
        .map(|w| w.results)
        .unwrap_or_default()
        .into_iter()
        .map(|h| SearchHit {
            url: h.url,
            title: h.title.as_deref().and_then(squash),
            // Brave marks query words with <strong>; the model does not need the markup.
            snippet: h.snippet.as_deref().map(strip_tags).as_deref().and_then(squash),
        })
        .collect())
}

fn strip_tags(text: &str) -> String {
    scraper::Html::parse_fragment(text).root_element().text().collect()
}

/// Exa's `web_search_exa` text: blocks separated by blank lines with `Title:`, `URL:` and `Text:`
/// fields (continuation lines belong to the field before); blocks without a URL are skipped.
pub fn parse_exa(text: &str) -> Vec<SearchHit> {
    let mut hits = Vec::new();
    const LABELS: [&str; 3] = ["Title:", "URL:", "Text:"];
    for block in text.split("\n\n") {
        // Title, URL, Text.
        let mut fields: [Option<String>; 3] = [None, None, None];
        let mut current = None;
        for line in block.lines() {
            match LABELS.iter().position(|label| line.starts_with(label)) {
                Some(i) => {
                    fields[i] = Some(line[LABELS[i].len()..].trim().to_owned());
                    current = Some(i);
                }
                None => {
                    if let Some(value) = current.and_then(|i| fields[i].as_mut()) {
                        value.push(' ');
                        value.push_str(line.trim());
                    }
                }
            }
        }
        let [title, url, snippet] = fields;
        if let Some(url) = url.filter(|u| !u.is_empty()) {
            hits.push(SearchHit {
                url,
                title: title.as_deref().and_then(squash),
                snippet: snippet.as_deref().and_then(squash),
            });
        }
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duckduckgo_results_skip_ads_and_unwrap_redirect_links() {
        let html = r#"<div class="results">
          <div class="result results_links result--ad"><a class="result__a" href="https://ads.example/">Ad</a></div>
          <div class="result results_links results_links_deep web-result">
            <h2 class="result__title"><a rel="nofollow" class="result__a" href="//duckduckgo.com/l/?uddg=https%3A%2F%2Fdocs.vllm.ai%2Fen%2Flatest%2F&amp;rut=abc">vLLM <b>docs</b></a></h2>
            <a class="result__snippet" href="x">Welcome to   vLLM</a>
          </div>
          <div class="result"><a class="result__a" href="https://github.com/vllm-project/vllm">GitHub</a></div>
        </div>"#;
        let hits = parse_duckduckgo(html);
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].url, "https://docs.vllm.ai/en/latest/");
        assert_eq!(
            (hits[0].title.as_deref(), hits[0].snippet.as_deref()),
            (Some("vLLM docs"), Some("Welcome to vLLM"))
        );
        assert_eq!(hits[1].url, "https://github.com/vllm-project/vllm");
    }

    #[test]
    fn exa_blocks_are_read_field_by_field() {
        let text = "Title: vLLM docs\nURL: https://docs.vllm.ai/\nText: Fast\ninference.\n\nTitle: no url\n\nURL: https://x.org/";
        let hits = parse_exa(text);
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].snippet.as_deref(), Some("Fast inference."));
        assert_eq!(hits[1].title, None);
    }

    #[test]
    fn json_backends_read_their_formats_and_reject_others() {
        let s = parse_searxng(
            r#"{"query":"q","results":[{"url":"https://a.org/","title":"A","content":"x","engine":"bing"}]}"#,
        )
        .unwrap();
        assert_eq!(s[0].title.as_deref(), Some("A"));
        let b = parse_brave(r#"{"type":"search","web":{"results":[{"url":"https://b.org/","title":"B","description":"<strong>b</strong> text"}]}}"#).unwrap();
        assert_eq!(b[0].snippet.as_deref(), Some("b text"));
        assert!(parse_brave("<html>").is_err());
        assert_eq!(scoped_query("q", &["a.org".into(), "b.org".into()]), "q (site:a.org OR site:b.org)");
    }
}
