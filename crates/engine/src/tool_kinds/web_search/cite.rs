//! `url_citation` annotations: where an answer links a page that `web_search` showed the model.
//!
//! Models cite with markdown links, `[label](url)`. A link whose URL is one of the response's
//! [`CitableSource`]s becomes an annotation covering the link — and the parentheses around it
//! when the model wrapped it the way the reference API's answers do, `([site](url))`. Indices
//! count characters (Unicode scalar values), as the reference API's do.
//!
//! [`find_citations`] is pure and works on a growing text: with `complete == false` it stops at
//! the first link it cannot judge yet (the character after it has not arrived), so the list it
//! returns for a prefix is always a prefix of the list for the whole text. That is what lets the
//! stream send `response.output_text.annotation.added` as soon as a citation is complete.

use serde_json::{Value, json};

use super::CitableSource;

/// The `url_citation` annotations of `text`, in order of position.
pub(super) fn find_citations(text: &str, sources: &[CitableSource], complete: bool) -> Vec<Value> {
    let mut found = Vec::new();
    if sources.is_empty() {
        return found;
    }
    let chars: Vec<char> = text.chars().collect();
    let len = chars.len();
    let mut i = 0;
    while i < len {
        if chars[i] != '[' {
            i += 1;
            continue;
        }
        let Some(link) = parse_link(&chars, i) else {
            i += 1;
            continue;
        };
        let Link { url_start, close } = link;
        if close + 1 == len && !complete {
            // Whether a `)` wraps the link is not known yet.
            break;
        }
        let url: String = chars[url_start..close].iter().collect();
        if let Some(source) = sources.iter().find(|s| same_page(&s.url, &url)) {
            let wrapped = i > 0 && chars[i - 1] == '(' && chars.get(close + 1) == Some(&')');
            let (start, end) = if wrapped { (i - 1, close + 2) } else { (i, close + 1) };
            found.push(json!({
                "type": "url_citation",
                "end_index": end,
                "start_index": start,
                "title": source.title.clone().unwrap_or_else(|| host_of(&url)),
                "url": url,
            }));
        }
        i = close + 1;
    }
    found
}

/// A complete markdown link starting at `[`: where its URL starts and the index of its `)`.
struct Link {
    url_start: usize,
    close: usize,
}

fn parse_link(chars: &[char], open: usize) -> Option<Link> {
    let label_end = (open + 1..chars.len()).take_while(|&j| chars[j] != '\n').find(|&j| chars[j] == ']')?;
    if chars.get(label_end + 1) != Some(&'(') {
        return None;
    }
    let url_start = label_end + 2;
    let close = (url_start..chars.len()).take_while(|&k| !chars[k].is_whitespace()).find(|&k| chars[k] == ')')?;
    (close > url_start).then_some(Link { url_start, close })
}

/// Whether two URLs name the same page: scheme and host compared case-insensitively, the
/// fragment and a trailing `/` ignored.
fn same_page(a: &str, b: &str) -> bool {
    normalize(a) == normalize(b)
}

/// The host part of a URL (what a citation is titled when the page's title is unknown).
fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or(rest);
    authority.rsplit_once('@').map_or(authority, |(_, host)| host).to_owned()
}

fn normalize(url: &str) -> String {
    let url = url.trim();
    let url = url.split_once('#').map_or(url, |(u, _)| u);
    let (origin, rest) = match url.find("://") {
        Some(p) => {
            let after = p + 3;
            let path_at = url[after..].find(['/', '?']).map_or(url.len(), |q| after + q);
            (url[..path_at].to_ascii_lowercase(), &url[path_at..])
        }
        None => (String::new(), url),
    };
    format!("{origin}{}", rest.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Vec<CitableSource> {
        vec![CitableSource { url: "https://docs.vllm.ai/en/latest/".into(), title: Some("vLLM docs".into()) }]
    }

    #[test]
    fn a_wrapped_link_to_a_source_is_cited_with_its_parentheses() {
        // Shaped like the reference API's answers: "… ([site](url))".
        let text = "Rates are 3.5%–3.75%. ([docs.vllm.ai](https://docs.vllm.ai/en/latest/))\nMore.";
        let found = find_citations(text, &sources(), true);
        assert_eq!(found.len(), 1);
        let (start, end) =
            (found[0]["start_index"].as_u64().unwrap() as usize, found[0]["end_index"].as_u64().unwrap() as usize);
        let span: String = text.chars().skip(start).take(end - start).collect();
        assert_eq!(span, "([docs.vllm.ai](https://docs.vllm.ai/en/latest/))");
        assert_eq!(found[0]["title"], "vLLM docs");
    }

    #[test]
    fn links_to_other_pages_are_not_citations() {
        let text = "See [elsewhere](https://example.com/) and [docs](https://DOCS.vllm.ai/en/latest).";
        let found = find_citations(text, &sources(), true);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0]["url"], "https://DOCS.vllm.ai/en/latest");
        assert_eq!(found[0]["start_index"], 42);
    }

    #[test]
    fn a_growing_text_yields_a_prefix_of_the_final_citations() {
        let text = "A ([d](https://docs.vllm.ai/en/latest/)) B [d](https://docs.vllm.ai/en/latest/)";
        let all = find_citations(text, &sources(), true);
        assert_eq!(all.len(), 2);
        for cut in 0..=text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let partial = find_citations(&text[..cut], &sources(), false);
            assert_eq!(partial[..], all[..partial.len()], "cut at {cut}");
        }
        assert_eq!(find_citations(text, &sources(), false).len(), 1, "the last link waits for what follows");
    }
}
