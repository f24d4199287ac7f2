//! Cutting a file's text into overlapping chunks of tokens, as OpenAI's `chunking_strategy` says:
//! `static` with `max_chunk_size_tokens` (100..=4096) and `chunk_overlap_tokens` (at most half of
//! it), or `auto`, OpenAI's default of 800 tokens overlapping by 400.
//!
//! Tokens are counted with `cl100k_base`, the encoding of OpenAI's embedding models
//! (`text-embedding-3-*`, `-ada-002`), so a chunk fits the embedding model it is sent to. The
//! text is encoded once; each chunk is the exact byte span of its tokens, widened to whole
//! characters (a token may end inside a multi-byte character), so chunks are slices of the text
//! and nothing is re-decoded lossily.

use respgw_protocol::ApiError;
use serde_json::{Value, json};

/// OpenAI's default chunk size in tokens (`auto`).
pub const DEFAULT_MAX_CHUNK_TOKENS: usize = 800;
/// OpenAI's default overlap between consecutive chunks in tokens (`auto`).
pub const DEFAULT_CHUNK_OVERLAP_TOKENS: usize = 400;
/// Smallest `max_chunk_size_tokens` OpenAI accepts.
pub const MIN_CHUNK_TOKENS: usize = 100;
/// Largest `max_chunk_size_tokens` OpenAI accepts.
pub const MAX_CHUNK_TOKENS: usize = 4096;

/// How a file is cut: chunks of at most `max_tokens`, each starting `max_tokens - overlap_tokens`
/// tokens after the previous one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSettings {
    pub max_tokens: usize,
    pub overlap_tokens: usize,
}

impl Default for ChunkSettings {
    fn default() -> Self {
        ChunkSettings { max_tokens: DEFAULT_MAX_CHUNK_TOKENS, overlap_tokens: DEFAULT_CHUNK_OVERLAP_TOKENS }
    }
}

impl ChunkSettings {
    /// Parse a client's `chunking_strategy` (`param` names it in a 400): absent or `auto` is the
    /// default; `static` needs both sizes, within OpenAI's bounds.
    pub fn parse(value: Option<&Value>, param: &str) -> Result<ChunkSettings, ApiError> {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            return Ok(ChunkSettings::default());
        };
        let kind_path = format!("{param}.type");
        match value.get("type").and_then(Value::as_str) {
            Some("auto") => {
                if let Some(extra) = value.as_object().and_then(|o| o.keys().find(|k| k.as_str() != "type")) {
                    let path = format!("{param}.{extra}");
                    return Err(ApiError::invalid(
                        &path,
                        format!("{path} is not a field of an auto chunking strategy"),
                    ));
                }
                Ok(ChunkSettings::default())
            }
            Some("static") => {
                let static_path = format!("{param}.static");
                let Some(sizes) = value.get("static").filter(|s| s.is_object()) else {
                    return Err(ApiError::invalid(
                        &static_path,
                        format!(
                            "a static chunking strategy needs {static_path}: {{\"max_chunk_size_tokens\", \"chunk_overlap_tokens\"}}"
                        ),
                    ));
                };
                let size = |field: &str| {
                    let path = format!("{static_path}.{field}");
                    sizes
                        .get(field)
                        .and_then(Value::as_u64)
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| ApiError::invalid(&path, format!("{path} must be a whole number of tokens")))
                };
                let max_tokens = size("max_chunk_size_tokens")?;
                let overlap_tokens = size("chunk_overlap_tokens")?;
                if !(MIN_CHUNK_TOKENS..=MAX_CHUNK_TOKENS).contains(&max_tokens) {
                    let path = format!("{static_path}.max_chunk_size_tokens");
                    return Err(ApiError::invalid(
                        &path,
                        format!("{path} must be between {MIN_CHUNK_TOKENS} and {MAX_CHUNK_TOKENS}, not {max_tokens}"),
                    ));
                }
                if overlap_tokens > max_tokens / 2 {
                    let path = format!("{static_path}.chunk_overlap_tokens");
                    return Err(ApiError::invalid(
                        &path,
                        format!(
                            "{path} must not exceed half of max_chunk_size_tokens ({}), not {overlap_tokens}",
                            max_tokens / 2
                        ),
                    ));
                }
                Ok(ChunkSettings { max_tokens, overlap_tokens })
            }
            Some(other) => Err(ApiError::invalid(
                &kind_path,
                format!("{kind_path} '{other}' is not a chunking strategy: use auto or static"),
            )),
            None => Err(ApiError::invalid(&kind_path, format!("{param} needs a type: auto or static"))),
        }
    }

    /// The settings of a stored (already validated) strategy; anything unreadable is the default.
    pub fn from_stored(value: &Value) -> ChunkSettings {
        ChunkSettings::parse(Some(value), "chunking_strategy").unwrap_or_default()
    }

    /// The strategy as stored and reported: always `static`, with both sizes.
    pub fn to_json(self) -> Value {
        json!({"type": "static", "static": {
            "max_chunk_size_tokens": self.max_tokens,
            "chunk_overlap_tokens": self.overlap_tokens,
        }})
    }
}

/// One chunk: a slice of the text and its length in tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    pub tokens: u32,
}

/// The tokenizer chunks are counted with, loaded on first use.
fn tokenizer() -> &'static tiktoken_rs::CoreBPE {
    tiktoken_rs::cl100k_base_singleton()
}

/// How many tokens `text` has.
pub fn count_tokens(text: &str) -> usize {
    tokenizer().encode_ordinary(text).len()
}

/// `text` cut into chunks by `settings`; none for a text of only whitespace. CPU-bound (about
/// a million tokens a second): run it on a blocking thread for large texts.
pub fn chunk(text: &str, settings: ChunkSettings) -> Vec<Chunk> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    let bpe = tokenizer();
    let tokens = bpe.encode_ordinary(text);
    // Byte offset of each token's end: the tokens' bytes, concatenated, are the text's.
    let mut ends = Vec::with_capacity(tokens.len());
    let mut offset = 0;
    for token in &tokens {
        offset += bpe.decode_bytes(std::slice::from_ref(token)).map(|b| b.len()).unwrap_or(0);
        ends.push(offset.min(text.len()));
    }
    let max = settings.max_tokens.max(1);
    let step = max.saturating_sub(settings.overlap_tokens).max(1);
    let mut chunks = Vec::new();
    let mut first = 0;
    loop {
        let last = (first + max).min(tokens.len());
        let start = if first == 0 { 0 } else { ends[first - 1] };
        let span = &text[char_floor(text, start)..char_ceil(text, ends[last - 1])];
        if !span.trim().is_empty() {
            chunks.push(Chunk { text: span.to_owned(), tokens: u32::try_from(last - first).unwrap_or(u32::MAX) });
        }
        if last == tokens.len() {
            break;
        }
        first += step;
    }
    chunks
}

/// The beginning of `text` that has at most `max_tokens` tokens (all of it when it is shorter),
/// ending on a character boundary.
pub fn truncate_to_tokens(text: &str, max_tokens: usize) -> &str {
    let bpe = tokenizer();
    let tokens = bpe.encode_ordinary(text);
    if tokens.len() <= max_tokens {
        return text;
    }
    let bytes = bpe.decode_bytes(&tokens[..max_tokens]).map(|b| b.len()).unwrap_or(0);
    &text[..char_floor(text, bytes.min(text.len()))]
}

/// The char boundary at or before `index`.
fn char_floor(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// The char boundary at or after `index`.
fn char_ceil(text: &str, mut index: usize) -> usize {
    while !text.is_char_boundary(index) {
        index += 1;
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize) -> String {
        (0..n).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_short_text_is_one_chunk_of_itself() {
        let chunks = chunk("Hello, world.", ChunkSettings::default());
        assert_eq!(chunks, vec![Chunk { text: "Hello, world.".into(), tokens: 4 }]);
        assert!(chunk(" \n\t", ChunkSettings::default()).is_empty());
    }

    #[test]
    fn chunks_have_at_most_max_tokens_and_overlap_by_the_overlap() {
        let text = words(1000);
        let total = count_tokens(&text);
        let settings = ChunkSettings { max_tokens: 200, overlap_tokens: 50 };
        let chunks = chunk(&text, settings);
        assert!(chunks.iter().all(|c| c.tokens <= 200 && count_tokens(&c.text) <= 201), "{chunks:?}");
        // Each chunk starts 150 tokens after the previous one, the last one ends the text.
        assert_eq!(chunks.len(), (total - 200).div_ceil(150) + 1);
        assert!(text.starts_with(&chunks[0].text));
        assert!(text.ends_with(&chunks[chunks.len() - 1].text));
        let tail_of_first: String =
            chunks[0].text.chars().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect();
        assert!(chunks[1].text.contains(&tail_of_first), "consecutive chunks overlap");
    }

    #[test]
    fn without_overlap_the_chunks_are_the_text() {
        let text = words(700);
        let chunks = chunk(&text, ChunkSettings { max_tokens: 100, overlap_tokens: 0 });
        assert_eq!(chunks.iter().map(|c| c.text.as_str()).collect::<String>(), text);
        assert_eq!(chunks.iter().map(|c| c.tokens as usize).sum::<usize>(), count_tokens(&text));
    }

    #[test]
    fn chunks_end_on_character_boundaries() {
        let text = "日本語のテキスト。".repeat(200);
        let chunks = chunk(&text, ChunkSettings { max_tokens: 101, overlap_tokens: 13 });
        assert!(chunks.len() > 3);
        assert!(chunks.iter().all(|c| text.contains(&c.text)));
    }

    #[test]
    fn texts_are_truncated_to_a_number_of_tokens() {
        let text = words(300);
        assert_eq!(truncate_to_tokens(&text, 10_000), text);
        let cut = truncate_to_tokens(&text, 50);
        assert!(text.starts_with(cut) && count_tokens(cut) <= 50 && count_tokens(cut) >= 49, "{cut}");
        let wide = "é".repeat(100);
        assert!(wide.starts_with(truncate_to_tokens(&wide, 7)));
    }

    #[test]
    fn strategies_parse_with_openai_bounds() {
        assert_eq!(ChunkSettings::parse(None, "chunking_strategy").unwrap(), ChunkSettings::default());
        assert_eq!(ChunkSettings::parse(Some(&json!({"type": "auto"})), "c").unwrap(), ChunkSettings::default());
        let static_ = json!({"type": "static", "static": {"max_chunk_size_tokens": 300, "chunk_overlap_tokens": 150}});
        let parsed = ChunkSettings::parse(Some(&static_), "c").unwrap();
        assert_eq!(parsed, ChunkSettings { max_tokens: 300, overlap_tokens: 150 });
        assert_eq!(parsed.to_json(), static_);
        assert_eq!(ChunkSettings::from_stored(&static_), parsed);

        let error = |value: Value| ChunkSettings::parse(Some(&value), "chunking_strategy").unwrap_err().param;
        assert_eq!(error(json!({"type": "fancy"})).as_deref(), Some("chunking_strategy.type"));
        assert_eq!(error(json!({"type": "static"})).as_deref(), Some("chunking_strategy.static"));
        assert_eq!(
            error(json!({"type": "static", "static": {"max_chunk_size_tokens": 50, "chunk_overlap_tokens": 0}}))
                .as_deref(),
            Some("chunking_strategy.static.max_chunk_size_tokens")
        );
        assert_eq!(
            error(json!({"type": "static", "static": {"max_chunk_size_tokens": 400, "chunk_overlap_tokens": 201}}))
                .as_deref(),
            Some("chunking_strategy.static.chunk_overlap_tokens")
        );
        assert_eq!(
            error(json!({"type": "static", "static": {"max_chunk_size_tokens": 400}})).as_deref(),
            Some("chunking_strategy.static.chunk_overlap_tokens")
        );
    }
}
