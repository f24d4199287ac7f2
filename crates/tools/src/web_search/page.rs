//! Pure pieces of web_search: canonical URLs (the page cache's keys and the sources' form),
//! `allowed_domains`, and `find_in_page`.

use serde::Serialize;

/// Characters of context shown on each side of a `find_in_page` match.
const MATCH_CONTEXT: usize = 60;
/// Matches returned at most; the model can narrow its pattern.
const MAX_MATCHES: usize = 20;

/// The canonical form of an http(s) URL: scheme and host lower-case, the path `/` when empty,
/// the query kept, the fragment dropped. `None` for anything that is not an absolute http(s) URL.
pub fn canonical_url(raw: &str) -> Option<String> {
    let mut url = url::Url::parse(raw.trim()).ok()?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return None;
    }
    url.set_fragment(None);
    Some(url.to_string())
}

/// Whether `url`'s host is one of `allowed` or a subdomain of one (an empty list allows all).
pub fn domain_allowed(url: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let Some(host) =
        url::Url::parse(url).ok().and_then(|u| u.host_str().map(|h| h.trim_end_matches('.').to_ascii_lowercase()))
    else {
        return false;
    };
    allowed.iter().any(|domain| host == *domain || host.ends_with(&format!(".{domain}")))
}

/// One match of `find_in_page`: character offsets in the page text and the text around it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageMatch {
    pub start: usize,
    pub end: usize,
    pub text: String,
}

/// Case-insensitive, non-overlapping occurrences of `pattern` in `text`, with
/// [`MATCH_CONTEXT`] characters on each side; at most [`MAX_MATCHES`].
pub fn find_in_page(text: &str, pattern: &str) -> Vec<PageMatch> {
    // Fold each character on its own so offsets in the folded text are offsets in the original.
    let fold = |c: char| c.to_lowercase().next().unwrap_or(c);
    let haystack: Vec<char> = text.chars().collect();
    let folded: Vec<char> = haystack.iter().copied().map(fold).collect();
    let needle: Vec<char> = pattern.chars().map(fold).collect();
    let mut matches = Vec::new();
    if needle.is_empty() || needle.len() > folded.len() {
        return matches;
    }
    let mut i = 0;
    while i + needle.len() <= folded.len() && matches.len() < MAX_MATCHES {
        if folded[i..i + needle.len()] == needle[..] {
            let end = i + needle.len();
            let from = i.saturating_sub(MATCH_CONTEXT);
            let to = (end + MATCH_CONTEXT).min(haystack.len());
            matches.push(PageMatch { start: i, end, text: haystack[from..to].iter().collect() });
            i = end;
        } else {
            i += 1;
        }
    }
    matches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_canonical() {
        assert_eq!(canonical_url("HTTPS://Docs.VLLM.ai#top").as_deref(), Some("https://docs.vllm.ai/"));
        assert_eq!(canonical_url("http://x.org/a?b=1#c").as_deref(), Some("http://x.org/a?b=1"));
        assert_eq!(canonical_url("ftp://x.org/"), None);
        assert_eq!(canonical_url("not a url"), None);
    }

    #[test]
    fn allowed_domains_admit_the_domain_and_its_subdomains_only() {
        let allowed = vec!["vllm.ai".to_owned()];
        assert!(domain_allowed("https://vllm.ai/x", &allowed));
        assert!(domain_allowed("https://docs.vllm.ai/x", &allowed));
        assert!(!domain_allowed("https://notvllm.ai/x", &allowed));
        assert!(!domain_allowed("https://vllm.ai.evil.com/", &allowed));
        assert!(domain_allowed("https://anything.example/", &[]));
    }

    #[test]
    fn find_in_page_is_case_insensitive_with_context() {
        let text = format!("{}Deep Research is best for background work. {}", "x".repeat(70), "y".repeat(70));
        let found = find_in_page(&text, "IS BEST FOR");
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].start, found[0].end), (84, 95));
        assert!(found[0].text.starts_with(&"x".repeat(46)) && found[0].text.contains("is best for background"));
        assert_eq!(found[0].text.chars().count(), 60 + 11 + 60);
        assert_eq!(find_in_page("aaaa", "aa").len(), 2, "non-overlapping");
        assert!(find_in_page("abc", "").is_empty());
    }
}
