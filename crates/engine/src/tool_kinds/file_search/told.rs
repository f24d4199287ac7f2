//! The text a `file_search` call gives the model: each result numbered, with its file's name and
//! id, then its text — within [`MAX_CHARS`], so a search never floods the context; the results
//! that did not fit are not shown (and so not listed on the item either). A failure is one short
//! sentence the model can act on.

use respgw_protocol::items::FileSearchResult;

/// Characters of result text one call gives the model at most.
pub(super) const MAX_CHARS: usize = 16_000;

/// A result cut to fit gets at least this many characters, else it is left out.
const MIN_CUT_CHARS: usize = 400;

/// The text for the model, and the results it shows (cut to what it shows), numbered from `first`.
pub(super) fn results(
    queries: &[String],
    found: Vec<FileSearchResult>,
    first: usize,
) -> (String, Vec<FileSearchResult>) {
    let asked = queries.iter().map(|q| format!("\"{q}\"")).collect::<Vec<_>>().join(", ");
    if found.is_empty() {
        return (
            format!("File search found nothing for {asked}. Try other words, or answer without the files."),
            Vec::new(),
        );
    }
    let mut text = format!(
        "File search results for {asked}. Cite a result you use by its number in square brackets, e.g. \
         [{first}], right after the statement it supports.\n"
    );
    let mut budget = MAX_CHARS;
    let mut shown = Vec::new();
    for mut result in found {
        let length = result.text.chars().count();
        if length > budget {
            if budget < MIN_CUT_CHARS {
                break;
            }
            result.text = result.text.chars().take(budget).collect::<String>() + "…";
        }
        budget = budget.saturating_sub(length);
        let number = first + shown.len();
        text.push_str(&format!("\n[{number}] {} (file_id: {})\n{}\n", result.filename, result.file_id, result.text));
        shown.push(result);
        if budget == 0 {
            break;
        }
    }
    (text, shown)
}

/// What the model is told when the search could not run.
pub(super) fn failure(error: &str) -> String {
    format!("File search failed: {error} Answer without the files, or try again later.")
}

/// What the model is told of an earlier call whose results a client's replay left out.
pub(super) fn unavailable() -> String {
    "The results of this earlier file_search call are not available.".to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn result(name: &str, text: String) -> FileSearchResult {
        FileSearchResult {
            file_id: format!("file-{name}"),
            filename: name.into(),
            score: 0.9,
            attributes: json!({}),
            text,
        }
    }

    #[test]
    fn results_are_numbered_with_their_file_names_and_ids() {
        let found = vec![result("a.md", "alpha text".into()), result("b.pdf", "beta text".into())];
        let (text, shown) = results(&["vacation days".into()], found, 5);
        assert_eq!(shown.len(), 2);
        assert!(text.contains("\"vacation days\""), "{text}");
        assert!(text.contains("[5] a.md (file_id: file-a.md)\nalpha text"), "{text}");
        assert!(text.contains("[6] b.pdf (file_id: file-b.pdf)\nbeta text"), "{text}");
    }

    #[test]
    fn what_does_not_fit_is_cut_or_left_out() {
        let big = "x".repeat(MAX_CHARS - 100);
        let found = vec![result("a", big.clone()), result("b", "y".repeat(1000)), result("c", "z".repeat(10))];
        let (text, shown) = results(&["q".into()], found, 1);
        assert_eq!(shown.len(), 1, "100 characters left are too few for a cut result");
        assert!(!text.contains("[2]"));
        let found = vec![result("a", "x".repeat(MAX_CHARS - 1000)), result("b", "y".repeat(5000))];
        let (text, shown) = results(&["q".into()], found, 1);
        assert_eq!(shown.len(), 2);
        assert_eq!(shown[1].text.chars().count(), 1001, "cut to the budget, with an ellipsis");
        assert!(text.len() < MAX_CHARS + 500);
    }

    #[test]
    fn nothing_found_says_so() {
        let (text, shown) = results(&["q".into()], Vec::new(), 1);
        assert!(shown.is_empty() && text.contains("found nothing"), "{text}");
    }
}
