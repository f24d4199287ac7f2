//! Error texts of MCP clients: one line per error chain ([`error_chain`]), without rmcp's Rust type
//! names ([`tidy`]), and without secrets ([`Redactor`]).
//!
//! A server's error messages can quote what it was given: an HTTP library may echo a URL with its
//! `?apiKey=`, a crashing child may print its environment, a hostile Remote server may echo its bearer
//! token. Every text the MCP helper reports (`last_error`, `error_text`, stderr lines in the log) and
//! every text a Remote MCP session produces (422 messages, failed `mcp_call` items) goes through
//! [`Redactor::clean`] first, which replaces the secret values (a Built-in entry's
//! `ServerEntry::secrets`; a Remote declaration's `authorization` and `headers` values) and bounds the
//! length.

/// Longest error text reported, in characters (long enough for a stack trace's head).
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
        truncate_chars(self.mask(text), MAX_ERROR_CHARS)
    }

    /// `text` with every secret masked, whatever its length (a tool's output).
    pub fn mask(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), MASK);
            }
        }
        out
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

/// An error and its sources on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// rmcp's error texts name Rust types (`Transport [rmcp::transport::worker::WorkerTransport<…>] error`);
/// an operator or a client reading the error needs the rest of the sentence, not the type.
pub fn tidy(text: &str) -> String {
    let mut out = text.to_owned();
    while let Some(start) = out.find(" [rmcp::") {
        let Some(len) = out[start..].find(']') else { break };
        out.replace_range(start..start + len + 1, "");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tidy_drops_rust_type_names() {
        assert_eq!(
            tidy("Send message error Transport [rmcp::transport::worker::WorkerTransport<a::B<c::D>>] error: HTTP 401"),
            "Send message error Transport error: HTTP 401"
        );
        assert_eq!(tidy("plain"), "plain");
    }

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
