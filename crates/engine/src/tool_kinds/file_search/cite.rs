//! `file_citation` annotations: where an answer cites a result `file_search` showed the model.
//!
//! The model is asked to cite a result by its number in square brackets, `[2]`. A marker is a
//! bracket group on one line — `[…]` or the full-width `【…】` some models write — whose entries
//! (separated by commas or semicolons) are all result numbers (`2`, `#2`, `^2`, `2†anything`) or
//! file names of results (case-insensitive); a group followed by `(` is a markdown link, not a
//! marker. Each entry naming a known result becomes one annotation of its file, at the marker's
//! first character (`index`, counted in characters as the reference API counts).
//!
//! [`find_citations`] is pure and works on a growing text: with `complete == false` it stops at
//! the first marker it cannot judge yet (not closed, or the character after it has not arrived),
//! so the list for a prefix is always a prefix of the list for the whole text. That is what lets
//! the stream send `response.output_text.annotation.added` as soon as a citation is complete.

use serde_json::{Value, json};

use super::Source;

/// Characters between the brackets of a marker at most.
const MAX_MARKER_CHARS: usize = 120;

/// The `file_citation` annotations of `text`, in order of position; `sources[n - 1]` is result `n`.
pub(super) fn find_citations(text: &str, sources: &[Source], complete: bool) -> Vec<Value> {
    let mut found = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let close_char = match chars[i] {
            '[' => ']',
            '【' => '】',
            _ => {
                i += 1;
                continue;
            }
        };
        let close = (i + 1..chars.len().min(i + 2 + MAX_MARKER_CHARS))
            .take_while(|&j| chars[j] != '\n' && chars[j] != chars[i])
            .find(|&j| chars[j] == close_char);
        let Some(close) = close else {
            let may_still_close =
                !chars[i + 1..].iter().any(|&c| c == '\n' || c == chars[i]) && chars.len() - i <= MAX_MARKER_CHARS + 1;
            if !complete && may_still_close {
                break;
            }
            i += 1;
            continue;
        };
        if close + 1 == chars.len() && !complete {
            // Whether a `(` makes it a link is not known yet.
            break;
        }
        if chars.get(close + 1) != Some(&'(') {
            let inside: String = chars[i + 1..close].iter().collect();
            if let Some(cited) = cited_sources(&inside, sources) {
                for source in cited {
                    found.push(json!({
                        "type": "file_citation",
                        "file_id": source.file_id,
                        "filename": source.filename,
                        "index": i,
                    }));
                }
            }
        }
        i = close + 1;
    }
    found
}

/// The sources a marker's inside names, when every entry is a result number or a file name.
fn cited_sources<'a>(inside: &str, sources: &'a [Source]) -> Option<Vec<&'a Source>> {
    let mut cited = Vec::new();
    for entry in inside.split([',', ';']).map(str::trim) {
        let number = entry.trim_start_matches(['#', '^']);
        let number = number.split_once('†').map_or(number, |(n, _)| n);
        if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
            let n: usize = number.parse().ok()?;
            if let Some(source) = n.checked_sub(1).and_then(|at| sources.get(at)) {
                cited.push(source);
            }
        } else if let Some(source) =
            sources.iter().find(|s| !entry.is_empty() && s.filename.eq_ignore_ascii_case(entry))
        {
            cited.push(source);
        } else {
            return None;
        }
    }
    Some(cited)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Vec<Source> {
        ["handbook.md", "pricing.pdf", "faq.txt"]
            .iter()
            .enumerate()
            .map(|(i, name)| Source { file_id: format!("file-{i}"), filename: (*name).into() })
            .collect()
    }

    fn cited(text: &str) -> Vec<(String, usize)> {
        find_citations(text, &sources(), true)
            .iter()
            .map(|a| (a["filename"].as_str().unwrap().to_owned(), a["index"].as_u64().unwrap() as usize))
            .collect()
    }

    #[test]
    fn numbered_markers_cite_their_results_at_the_marker() {
        assert_eq!(
            cited("Staff get 25 days [1]. Plans cost €5 [2, 3]."),
            [("handbook.md".into(), 18), ("pricing.pdf".into(), 37), ("faq.txt".into(), 37)]
        );
        assert_eq!(
            cited("Yes【2】 and [#1][^3]"),
            [("pricing.pdf".into(), 3), ("handbook.md".into(), 11), ("faq.txt".into(), 15)]
        );
        assert_eq!(cited("Per [Handbook.MD] and [3†faq]."), [("handbook.md".into(), 4), ("faq.txt".into(), 22)]);
    }

    #[test]
    fn other_brackets_are_not_citations() {
        assert!(cited("See [the docs](https://x.org), [1](https://y.org), [a, b], [9], [] and arr[0 .. 1]").is_empty());
        assert!(cited("[1\n] and [2").is_empty());
    }

    #[test]
    fn a_growing_text_yields_a_prefix_of_the_final_citations() {
        let text = "A [1]. B【2】 C [link](u) D [3, 1] E [2]";
        let all = find_citations(text, &sources(), true);
        assert_eq!(all.len(), 5);
        let chars: Vec<char> = text.chars().collect();
        for cut in 0..=chars.len() {
            let prefix: String = chars[..cut].iter().collect();
            let partial = find_citations(&prefix, &sources(), false);
            assert_eq!(partial[..], all[..partial.len()], "cut at {cut}");
        }
        assert_eq!(find_citations(text, &sources(), false).len(), 4, "the last marker waits for what follows");
    }
}
