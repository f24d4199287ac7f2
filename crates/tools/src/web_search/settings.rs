//! Which web search this gateway runs: the shipped profiles and their settings, chosen once at
//! start-up (`--web-search-profile`) and handed to every worker.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use respgw_mcp::{ServerEntry, UrlServer, UrlTransport};

/// The MCP server label the `exa_mcp` profile provisions in the Built-in MCP helper.
pub const EXA_SERVER_LABEL: &str = "exa";

/// Default endpoints, each overridable (flags / `GW_WEB_SEARCH_*_URL`).
pub const DEFAULT_DUCKDUCKGO_URL: &str = "https://html.duckduckgo.com/html/";
pub const DEFAULT_BRAVE_URL: &str = "https://api.search.brave.com/res/v1/web/search";
pub const DEFAULT_EXA_MCP_URL: &str = "https://mcp.exa.ai/mcp?tools=web_search_exa,crawling_exa";

/// A shipped web search profile: where searches go and who opens pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// DuckDuckGo's HTML result page, read by the gateway; pages fetched by the gateway.
    DuckduckgoPlusFetch,
    /// Exa's hosted MCP server (`web_search_exa`, `crawling_exa`) through the Built-in MCP helper.
    ExaMcp,
    /// A self-hosted SearXNG instance's JSON API; pages fetched by the gateway.
    Searxng,
    /// The Brave Search API (`BRAVE_API_KEY`); pages fetched by the gateway.
    Brave,
}

impl Profile {
    pub const ALL: [Profile; 4] = [Profile::DuckduckgoPlusFetch, Profile::ExaMcp, Profile::Searxng, Profile::Brave];

    pub fn name(self) -> &'static str {
        match self {
            Profile::DuckduckgoPlusFetch => "duckduckgo_plus_fetch",
            Profile::ExaMcp => "exa_mcp",
            Profile::Searxng => "searxng",
            Profile::Brave => "brave",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Profile::ALL.into_iter().find(|p| p.name() == s.trim()).ok_or_else(|| {
            let names: Vec<&str> = Profile::ALL.iter().map(|p| p.name()).collect();
            format!("unknown web search profile '{s}'; expected one of: {}", names.join(", "))
        })
    }
}

/// Limits of the gateway's own page fetches (`open_page`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FetchSettings {
    /// The whole fetch: connect, redirects, body.
    pub timeout: Duration,
    /// Bytes of body read at most; a longer page is cut there (and says so).
    pub max_bytes: usize,
    /// Let pages on loopback, private and link-local addresses be opened. Off by default: the
    /// model chooses the URLs, so the Remote MCP address policy applies (also after redirects).
    pub allow_private_addresses: bool,
    /// Hosts (names or addresses, no port) exempt from the address policy while it is on — an
    /// intranet documentation server, say. Every other target, redirects included, is still checked.
    #[serde(default)]
    pub exempt_hosts: Vec<String>,
}

impl Default for FetchSettings {
    fn default() -> Self {
        FetchSettings {
            timeout: Duration::from_secs(20),
            max_bytes: 2 * 1024 * 1024,
            allow_private_addresses: false,
            exempt_hosts: Vec::new(),
        }
    }
}

/// Everything a worker needs to run `web_search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebSearchSettings {
    pub profile: Profile,
    /// DuckDuckGo's HTML endpoint (profile `duckduckgo_plus_fetch`).
    pub duckduckgo_url: String,
    /// The SearXNG instance's base URL (profile `searxng`; required there).
    pub searxng_url: Option<String>,
    /// The Brave web search endpoint (profile `brave`).
    pub brave_url: String,
    /// Exa's MCP endpoint (profile `exa_mcp`; the helper connects to it).
    pub exa_mcp_url: String,
    /// The Brave Search API subscription token (profile `brave`; `BRAVE_API_KEY`).
    #[serde(default)]
    pub brave_api_key: Option<String>,
    /// Time per search request to a backend.
    pub search_timeout: Duration,
    pub fetch: FetchSettings,
}

impl WebSearchSettings {
    /// A profile with the default endpoints and limits.
    pub fn new(profile: Profile) -> Self {
        WebSearchSettings {
            profile,
            duckduckgo_url: DEFAULT_DUCKDUCKGO_URL.to_owned(),
            searxng_url: None,
            brave_url: DEFAULT_BRAVE_URL.to_owned(),
            exa_mcp_url: DEFAULT_EXA_MCP_URL.to_owned(),
            brave_api_key: None,
            search_timeout: Duration::from_secs(15),
            fetch: FetchSettings::default(),
        }
    }

    /// What the profile needs that is missing or malformed, as one start-up error naming the
    /// flag or variable to set.
    pub fn check(&self) -> Result<(), String> {
        let url = |flag: &str, value: &str| {
            url::Url::parse(value)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
                .map(|_| ())
                .ok_or_else(|| format!("{flag}: '{value}' is not an http(s) URL"))
        };
        match self.profile {
            Profile::DuckduckgoPlusFetch => url("--web-search-duckduckgo-url", &self.duckduckgo_url),
            Profile::Brave => {
                url("--web-search-brave-url", &self.brave_url)?;
                if self.brave_api_key.as_deref().is_none_or(|k| k.trim().is_empty()) {
                    return Err(
                        "web search profile 'brave' needs the API key in BRAVE_API_KEY (--brave-api-key)".into()
                    );
                }
                Ok(())
            }
            Profile::Searxng => match &self.searxng_url {
                Some(base) => url("--web-search-searxng-url", base),
                None => {
                    Err("web search profile 'searxng' needs --web-search-searxng-url (GW_WEB_SEARCH_SEARXNG_URL), \
                             the base URL of a SearXNG instance with the JSON format enabled"
                        .to_owned())
                }
            },
            Profile::ExaMcp => url("--web-search-exa-mcp-url", &self.exa_mcp_url),
        }
    }

    /// The URL the MCP helper dials for Exa: the configured one plus `exaApiKey` when a key is
    /// given (`EXA_API_KEY`).
    pub fn exa_url_with_key(base: &str, key: Option<&str>) -> String {
        match key.map(str::trim).filter(|k| !k.is_empty()) {
            None => base.to_owned(),
            Some(key) => match url::Url::parse(base) {
                Ok(mut url) => {
                    url.query_pairs_mut().append_pair("exaApiKey", key);
                    url.to_string()
                }
                Err(_) => base.to_owned(),
            },
        }
    }
}

/// The Built-in MCP server the `exa_mcp` profile provisions in the helper: Exa's endpoint (plus
/// `exaApiKey` when `EXA_API_KEY` is set; the helper keeps query values out of its logs).
pub fn exa_server_entry(base_url: &str, api_key: Option<&str>) -> Result<ServerEntry, String> {
    let with_key = WebSearchSettings::exa_url_with_key(base_url, api_key);
    let url = reqwest::Url::parse(&with_key).map_err(|e| format!("--web-search-exa-mcp-url '{base_url}': {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("--web-search-exa-mcp-url '{base_url}' is not an http(s) URL"));
    }
    Ok(ServerEntry::Url(UrlServer { url, headers: Default::default(), transport: UrlTransport::StreamableHttp }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_profile_names_the_choices() {
        assert_eq!("exa_mcp".parse::<Profile>(), Ok(Profile::ExaMcp));
        let e = "google".parse::<Profile>().unwrap_err();
        assert_eq!(
            e,
            "unknown web search profile 'google'; expected one of: duckduckgo_plus_fetch, exa_mcp, searxng, brave"
        );
    }

    #[test]
    fn profiles_say_what_they_are_missing() {
        assert!(WebSearchSettings::new(Profile::DuckduckgoPlusFetch).check().is_ok());
        assert!(WebSearchSettings::new(Profile::Searxng).check().unwrap_err().contains("--web-search-searxng-url"));
        assert!(WebSearchSettings::new(Profile::Brave).check().unwrap_err().contains("BRAVE_API_KEY"));
        let brave = WebSearchSettings { brave_api_key: Some("k".into()), ..WebSearchSettings::new(Profile::Brave) };
        assert!(brave.check().is_ok());
        let bad = WebSearchSettings { searxng_url: Some("ftp://x".into()), ..WebSearchSettings::new(Profile::Searxng) };
        assert!(bad.check().is_err());
        assert_eq!(
            WebSearchSettings::exa_url_with_key(DEFAULT_EXA_MCP_URL, Some("k-1")),
            "https://mcp.exa.ai/mcp?tools=web_search_exa,crawling_exa&exaApiKey=k-1"
        );
        assert_eq!(WebSearchSettings::exa_url_with_key(DEFAULT_EXA_MCP_URL, None), DEFAULT_EXA_MCP_URL);
    }
}
