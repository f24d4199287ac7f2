//! `reasoning` items: the model's reasoning for one model turn.

use serde::{Deserialize, Serialize};

/// The model's reasoning for one model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningItem {
    pub id: String,
    #[serde(default)]
    pub summary: Vec<SummaryText>,
    #[serde(default)]
    pub content: Vec<ReasoningText>,
    /// Opaque reasoning state a stateless client hands back; kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
}

impl ReasoningItem {
    /// The reasoning as one text: the raw reasoning when present, else the summaries.
    pub fn text(&self) -> String {
        let raw: Vec<&str> = self.content.iter().map(|c| c.text.as_str()).collect();
        if raw.iter().any(|t| !t.is_empty()) {
            return raw.concat();
        }
        self.summary.iter().map(|s| s.text.as_str()).collect::<Vec<_>>().join("\n\n")
    }
}

/// `{"type":"summary_text","text":…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "summary_text")]
pub struct SummaryText {
    pub text: String,
}

/// `{"type":"reasoning_text","text":…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "reasoning_text")]
pub struct ReasoningText {
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_text_falls_back_to_summary() {
        let r = ReasoningItem {
            id: "rs".into(),
            summary: vec![SummaryText { text: "a".into() }, SummaryText { text: "b".into() }],
            content: vec![],
            encrypted_content: None,
        };
        assert_eq!(r.text(), "a\n\nb");
    }
}
