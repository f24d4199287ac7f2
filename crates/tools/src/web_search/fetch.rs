//! `open_page` done by the gateway itself: a guarded HTTP fetch and HTML → readable text. The same
//! guarded fetch reads `input_file` URLs ([`crate::input_files`]).
//!
//! The model picks the URL, so the fetch follows the Remote MCP address policy
//! ([`crate::net_guard`]) unless the operator turned it off
//! ([`FetchSettings::allow_private_addresses`]): host names are resolved by the
//! [`GuardedResolver`] (every connection, every redirect), IP-literal hosts and `localhost` names
//! are checked on the first URL and on every redirect target, and no proxy from the environment is
//! used. At most [`MAX_REDIRECTS`] redirects are followed, each of them checked. Hosts the
//! operator exempted ([`FetchSettings::exempt_hosts`]) skip the policy; nothing else does.
//!
//! Limits: one time limit for the whole fetch, and at most `max_bytes` of body (a longer page is
//! cut, and the result says so). The text comes from the charset the server declared, else a
//! `<meta charset>`/BOM, else UTF-8 (encoding_rs); HTML is rendered to plain text by html2text and
//! its `<title>` read with scraper.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderValue, USER_AGENT};

use super::settings::FetchSettings;
use crate::net_guard::{GuardedResolver, ensure_crypto_provider, ip_literal, non_public_reason};
use respgw_mcp::redact::error_chain;

/// Redirects followed per fetch.
const MAX_REDIRECTS: usize = 5;
/// Width html2text wraps lines at: wide, so sentences stay on one line for `find_in_page`.
const TEXT_WIDTH: usize = 200;

/// A page as the model gets it.
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedPage {
    /// The URL the content came from (after redirects).
    pub final_url: String,
    pub title: Option<String>,
    pub text: String,
    /// The body was longer than the limit and was cut.
    pub truncated: bool,
}

/// The gateway's page fetcher (one per process; cheap to clone).
#[derive(Clone)]
pub struct PageFetcher {
    client: reqwest::Client,
    settings: FetchSettings,
}

impl PageFetcher {
    pub fn new(settings: FetchSettings) -> Result<Self, String> {
        ensure_crypto_provider();
        let policy = Policy::of(&settings);
        let mut builder = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout.min(Duration::from_secs(10)))
            .redirect(checked_redirects(policy.clone()));
        if let Some(policy) = policy {
            builder = builder.no_proxy().dns_resolver(ExemptingResolver { guarded: GuardedResolver::system(), policy });
        }
        let client = builder.build().map_err(|e| format!("cannot build the page fetch client: {}", error_chain(&e)))?;
        Ok(PageFetcher { client, settings })
    }

    /// Fetch `url` and make it readable text. Every failure is a sentence for the model.
    pub async fn fetch(&self, url: &str) -> Result<FetchedPage, String> {
        let body =
            self.fetch_body(url, "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5", "web_search").await?;
        let (title, text) = render(&body.bytes, &body.content_type)?;
        Ok(FetchedPage { final_url: body.final_url, title, text, truncated: body.truncated })
    }

    /// Fetch `url` under the address policy and the limits: the body as it came (at most
    /// `max_bytes` of it), with its content type. `purpose` goes into the User-Agent. Every
    /// failure is a sentence naming the URL.
    pub async fn fetch_body(&self, url: &str, accept: &'static str, purpose: &str) -> Result<FetchedBody, String> {
        let parsed = reqwest::Url::parse(url).map_err(|_| format!("'{url}' is not a valid URL."))?;
        check_target(&parsed, Policy::of(&self.settings).as_ref())?;
        let user_agent = format!("respgw/{} ({purpose})", env!("CARGO_PKG_VERSION"));
        let response = self
            .client
            .get(parsed)
            .header(USER_AGENT, HeaderValue::from_str(&user_agent).unwrap_or(HeaderValue::from_static("respgw")))
            .header("accept", accept)
            .send()
            .await
            .map_err(|e| format!("Could not open {url}: {}", error_chain(&e)))?;
        let final_url = response.url().to_string();
        let status = response.status();
        if !status.is_success() {
            return Err(format!("Opening {url} failed: HTTP {status}."));
        }
        let content_type =
            response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
        let (bytes, truncated) =
            read_limited(response, self.settings.max_bytes).await.map_err(|e| format!("Could not read {url}: {e}"))?;
        Ok(FetchedBody { final_url, content_type, bytes, truncated })
    }
}

/// A body fetched by [`PageFetcher::fetch_body`].
#[derive(Debug, Clone, PartialEq)]
pub struct FetchedBody {
    /// The URL the body came from (after redirects).
    pub final_url: String,
    /// The `Content-Type` header, lower-cased (empty when absent).
    pub content_type: String,
    pub bytes: Vec<u8>,
    /// There was more than `max_bytes`; the rest was not read.
    pub truncated: bool,
}

/// The address policy when it is on: the hosts exempt from it (lower-case).
#[derive(Clone)]
struct Policy {
    exempt: Arc<Vec<String>>,
}

impl Policy {
    fn of(settings: &FetchSettings) -> Option<Policy> {
        (!settings.allow_private_addresses)
            .then(|| Policy { exempt: Arc::new(settings.exempt_hosts.iter().map(|h| normalize_host(h)).collect()) })
    }

    fn exempts(&self, host: &str) -> bool {
        self.exempt.contains(&normalize_host(host))
    }
}

fn normalize_host(host: &str) -> String {
    host.trim().trim_start_matches('[').trim_end_matches(']').trim_end_matches('.').to_ascii_lowercase()
}

/// The guarded resolver, except for exempt host names.
struct ExemptingResolver {
    guarded: GuardedResolver,
    policy: Policy,
}

impl reqwest::dns::Resolve for ExemptingResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        if !self.policy.exempts(name.as_str()) {
            return reqwest::dns::Resolve::resolve(&self.guarded, name);
        }
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            Ok(Box::new(addresses.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Scheme and — with the policy on — the address rules for one URL the fetch is about to follow.
fn check_target(url: &reqwest::Url, policy: Option<&Policy>) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("Only http and https pages can be opened, not '{}'.", url.scheme()));
    }
    let host = url.host_str().unwrap_or_default();
    if host.is_empty() {
        return Err("The URL has no host.".to_owned());
    }
    let Some(policy) = policy else { return Ok(()) };
    if policy.exempts(host) {
        return Ok(());
    }
    if let Some(address) = ip_literal(host)
        && let Some(reason) = non_public_reason(address)
    {
        tracing::debug!(%url, reason, "refused a page address");
        return Err(format!("Refusing to open {url}: the address is not allowed."));
    }
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return Err(format!("Refusing to open {url}: `localhost` names are not allowed."));
    }
    Ok(())
}

/// Follow at most [`MAX_REDIRECTS`] redirects, each one to a URL that passes [`check_target`].
fn checked_redirects(policy: Option<Policy>) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error("too many redirects");
        }
        match check_target(attempt.url(), policy.as_ref()) {
            Ok(()) => attempt.follow(),
            Err(reason) => attempt.error(reason),
        }
    })
}

/// The body, at most `limit` bytes of it; `true` when there was more.
async fn read_limited(response: reqwest::Response, limit: usize) -> Result<(Vec<u8>, bool), String> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| error_chain(&e))?;
        let room = limit - body.len();
        if chunk.len() >= room {
            body.extend_from_slice(&chunk[..room]);
            // Stop reading: the rest is never downloaded.
            return Ok((body, chunk.len() > room || stream.next().await.is_some()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// Title and readable text of a body of this content type.
fn render(body: &[u8], content_type: &str) -> Result<(Option<String>, String), String> {
    let is_html = content_type.contains("html") || (content_type.is_empty() && looks_like_html(body));
    let is_text = content_type.starts_with("text/") || content_type.contains("json") || content_type.contains("xml");
    if !is_html && !is_text && !content_type.is_empty() {
        return Err(format!("The page's content type '{content_type}' cannot be shown as text."));
    }
    let declared = content_type.split(';').find_map(|p| p.trim().strip_prefix("charset=")).map(|c| c.trim_matches('"'));
    let encoding = declared
        .and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()))
        .or_else(|| encoding_rs::Encoding::for_bom(body).map(|(e, _)| e))
        .or_else(|| if is_html { meta_charset(body) } else { None })
        .unwrap_or(encoding_rs::UTF_8);
    let (decoded, _, _) = encoding.decode(body);
    if !is_html {
        return Ok((None, decoded.into_owned()));
    }
    let title = scraper::Html::parse_document(&decoded)
        .select(&TITLE_SELECTOR)
        .next()
        .map(|t| t.text().collect::<String>().split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|t| !t.is_empty());
    // No markdown-ish decoration (`**bold**` would break `find_in_page` on the visible text);
    // link targets listed as footnotes, so the model can open them next.
    let text = html2text::config::plain_no_decorate()
        .link_footnotes(true)
        .string_from_read(decoded.as_bytes(), TEXT_WIDTH)
        .map_err(|e| format!("The page's HTML could not be rendered as text: {e}"))?;
    Ok((title, text.trim().to_owned()))
}

static TITLE_SELECTOR: std::sync::LazyLock<scraper::Selector> =
    std::sync::LazyLock::new(|| scraper::Selector::parse("title").expect("a valid selector"));

fn looks_like_html(body: &[u8]) -> bool {
    let head = String::from_utf8_lossy(&body[..body.len().min(512)]).to_ascii_lowercase();
    head.contains("<html") || head.contains("<!doctype html")
}

/// The charset an HTML document declares in its first KiB (`<meta charset=…>` or the
/// `http-equiv` form). A byte scan, because the declaration must be read before decoding.
fn meta_charset(body: &[u8]) -> Option<&'static encoding_rs::Encoding> {
    let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
    let at = head.find("charset=")? + "charset=".len();
    let label: String = head[at..]
        .trim_start_matches(['"', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .collect();
    encoding_rs::Encoding::for_label(label.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_text_in_its_declared_charset() {
        // "Café" in windows-1252, declared by a meta tag only.
        let mut body = b"<html><head><meta charset=\"windows-1252\"><title> Le  Caf\xe9 </title></head><body><h1>Caf\xe9</h1><p>Open <b>daily</b>. <a href=\"/menu\">Menu</a></p><script>var x=1;</script></body></html>".to_vec();
        let (title, text) = render(&body, "text/html").unwrap();
        assert_eq!(title.as_deref(), Some("Le Café"));
        assert!(text.contains("Café") && text.contains("Open daily.") && !text.contains("var x"), "{text}");
        assert!(text.contains("/menu"), "link targets are kept: {text}");
        // The header's charset wins over the document's.
        body = "<p>naïve</p>".as_bytes().to_vec();
        assert!(render(&body, "text/html; charset=utf-8").unwrap().1.contains("naïve"));
        assert!(render(b"%PDF-1.7", "application/pdf").is_err());
        assert_eq!(render(b"plain", "text/plain").unwrap(), (None, "plain".to_owned()));
    }

    #[test]
    fn the_guard_refuses_local_targets_unless_disabled_or_exempt() {
        let url = |s: &str| reqwest::Url::parse(s).unwrap();
        let on = Policy::of(&FetchSettings::default());
        for target in [
            "http://127.0.0.1:8080/",
            "http://[::1]/",
            "http://10.1.2.3/",
            "http://169.254.169.254/latest/",
            "http://localhost:9/",
            "http://api.localhost/",
            "http://2130706433/",
        ] {
            assert!(check_target(&url(target), on.as_ref()).is_err(), "{target}");
            assert!(check_target(&url(target), None).is_ok(), "{target}");
        }
        assert!(check_target(&url("https://example.com/"), on.as_ref()).is_ok());
        assert!(check_target(&url("file:///etc/passwd"), None).is_err());
        let exempt = Policy::of(&FetchSettings { exempt_hosts: vec!["10.1.2.3".into()], ..FetchSettings::default() });
        assert!(check_target(&url("http://10.1.2.3:81/"), exempt.as_ref()).is_ok());
        assert!(check_target(&url("http://10.1.2.4/"), exempt.as_ref()).is_err());
    }
}
