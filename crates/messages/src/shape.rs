//! [`ReplyShape`]: what the reply side needs to know of the request it answers — the request
//! side fills it in while translating, the reply side reads it while translating back.

/// What a Messages reply echoes or hides of its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyShape {
    /// The model name as the request gave it, echoed in `message.model`.
    pub model: String,
    /// Whether and how `thinking` blocks carry the model's reasoning text.
    pub thinking: ThinkingDisplay,
    /// The request's `stop_sequences`, to report which one ended the message.
    pub stop_sequences: Vec<String>,
}

/// `thinking.display`: the reasoning text itself, or only the signed block without its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ThinkingDisplay {
    /// `thinking` blocks carry the text (`summarized`, the default).
    #[default]
    Text,
    /// `thinking` blocks carry an empty text and the signature only (`omitted`).
    Omitted,
}
