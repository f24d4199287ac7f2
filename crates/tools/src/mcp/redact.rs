//! Keeping secrets out of error texts and logs.
//!
//! A server's error messages can quote what it was given: an HTTP library may echo a URL with its
//! `?apiKey=`, a crashing child may print its environment. Every text the helper reports (`last_error`,
//! `error_text`, stderr lines in the log) goes through [`Redactor::clean`] first, which replaces the
//! entry's secret values (see `ServerEntry::secrets`) and bounds the length.

/// Longest error text reported, in characters (the seed's limit; long enough for a stack trace's head).
pub const MAX_ERROR_CHARS: usize = 4096;

/// What replaces a secret.
const MASK: &str = "[redacted]";

/// The secret values of one server entry.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is replaced whole.
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for these values (any order).
    pub fn new(mut secrets: Vec<String>) -> Self {
        secrets.retain(|s| !s.is_empty());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        Redactor { secrets }
    }

    /// `text` with every secret masked, cut to [`MAX_ERROR_CHARS`].
    pub fn clean(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        truncate_chars(out, MAX_ERROR_CHARS)
    }
}

/// `text` cut to at most `max` characters, marking the cut.
pub fn truncate_chars(text: String, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text,
        Some((byte, _)) => {
            let mut cut = text[..byte].to_owned();
            cut.push('…');
            cut
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_longest_secret_first() {
        let r = Redactor::new(vec!["tok123".into(), "Bearer tok123".into()]);
        assert_eq!(r.clean("header Bearer tok123 and tok123"), "header [redacted] and [redacted]");
    }

    #[test]
    fn truncates_long_texts() {
        let r = Redactor::default();
        let long = "é".repeat(MAX_ERROR_CHARS + 10);
        let cleaned = r.clean(&long);
        assert_eq!(cleaned.chars().count(), MAX_ERROR_CHARS + 1);
        assert!(cleaned.ends_with('…'));
        assert_eq!(r.clean("short"), "short");
    }
}
