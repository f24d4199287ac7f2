//! A deterministic toy tokenizer and chat template, so the replay upstream can count prompts the
//! way a real model server does (its tokenizer routes, `usage.prompt_tokens`, a context window)
//! and tests can compute the same numbers by hand.
//!
//! **Tokens of a text**: every maximal run of alphanumeric characters is one token, every other
//! character that is not whitespace is one token of its own, whitespace is none. So `"Hello,
//! world!"` is 4 tokens and `{"a":1}` is 7. The vocabulary adds no special tokens (no BOS), so
//! llama.cpp's `add_special` changes nothing.
//!
//! **The chat template** renders a chat-completions request (`tools`, then `messages`) as text:
//! - each tool: `<tool> {its function object as JSON} </tool>`, one line each;
//! - each message: `<|role|>` followed by its content (a string; or the text of its `text`
//!   parts, an image part being `<image>`), its `reasoning_content`, its `tool_calls` as JSON
//!   and its `tool_call_id`, those present, space-separated, one line each;
//! - then `<|assistant|>`, the generation prompt.
//!
//! A request's prompt tokens are the tokens of that text ([`prompt_tokens`]).

use serde_json::Value;

/// The tokens of `text` (see the module documentation).
pub fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut word_start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        if c.is_alphanumeric() {
            word_start.get_or_insert(i);
            continue;
        }
        if let Some(start) = word_start.take() {
            out.push(&text[start..i]);
        }
        if !c.is_whitespace() {
            out.push(&text[i..i + c.len_utf8()]);
        }
    }
    if let Some(start) = word_start {
        out.push(&text[start..]);
    }
    out
}

/// How many tokens `text` is.
pub fn count(text: &str) -> u64 {
    tokens(text).len() as u64
}

/// Token ids for `text`: a stable hash of each token (what `/tokenize` returns).
pub fn token_ids(text: &str) -> Vec<u64> {
    tokens(text)
        .into_iter()
        .map(|token| token.bytes().fold(7u64, |hash, b| hash.wrapping_mul(31).wrapping_add(u64::from(b))) % 50_000)
        .collect()
}

/// The prompt the chat template makes of a chat-completions request body.
pub fn render(body: &Value) -> String {
    let mut lines = Vec::new();
    for tool in body.get("tools").and_then(Value::as_array).into_iter().flatten() {
        lines.push(format!("<tool> {} </tool>", tool.get("function").unwrap_or(tool)));
    }
    for message in body.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("user");
        let mut line = vec![format!("<|{role}|>")];
        match message.get("content") {
            Some(Value::String(text)) => line.push(text.clone()),
            Some(Value::Array(parts)) => line.extend(parts.iter().map(|part| match part.get("text") {
                Some(Value::String(text)) => text.clone(),
                _ => "<image>".to_owned(),
            })),
            _ => {}
        }
        if let Some(reasoning) = message.get("reasoning_content").and_then(Value::as_str) {
            line.push(reasoning.to_owned());
        }
        if let Some(calls) = message.get("tool_calls").filter(|c| !c.is_null()) {
            line.push(calls.to_string());
        }
        if let Some(id) = message.get("tool_call_id").and_then(Value::as_str) {
            line.push(id.to_owned());
        }
        lines.push(line.join(" "));
    }
    lines.push("<|assistant|>".to_owned());
    lines.join("\n")
}

/// The prompt tokens of a chat-completions request body: the tokens of [`render`]'s text.
pub fn prompt_tokens(body: &Value) -> u64 {
    count(&render(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words_are_one_token_and_punctuation_one_each() {
        assert_eq!(tokens("Hello, world!"), ["Hello", ",", "world", "!"]);
        assert_eq!(count(r#"{"a":1}"#), 7);
        assert_eq!(count("  "), 0);
        assert_eq!(token_ids("a b a"), [token_ids("a")[0], token_ids("b")[0], token_ids("a")[0]]);
    }

    #[test]
    fn the_template_renders_tools_messages_and_the_generation_prompt() {
        let body = json!({
            "tools": [{"type":"function","function":{"name":"f"}}],
            "messages": [
                {"role":"system","content":"Be brief."},
                {"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"x"}}]},
                {"role":"assistant","content":null,"tool_calls":[{"id":"c1"}]},
                {"role":"tool","tool_call_id":"c1","content":"done"}
            ]
        });
        assert_eq!(
            render(&body),
            "<tool> {\"name\":\"f\"} </tool>\n<|system|> Be brief.\n<|user|> look <image>\n\
             <|assistant|> [{\"id\":\"c1\"}]\n<|tool|> done c1\n<|assistant|>"
        );
        // `<|system|>` is 5 tokens, "Be brief." 3.
        assert_eq!(prompt_tokens(&json!({"messages":[{"role":"system","content":"Be brief."}]})), 8 + 5);
    }
}
