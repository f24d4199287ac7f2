//! Cutting a file's text into overlapping chunks of tokens, as its vector-store file's
//! `chunking_strategy` says ([`ChunkingStrategy`], validated and resolved on the wire by
//! `respgw_protocol::vector_stores`; `auto` is OpenAI's 800 tokens overlapping by 400).
//!
//! Tokens are counted with `cl100k_base`, the encoding of OpenAI's embedding models
//! (`text-embedding-3-*`, `-ada-002`), so a chunk fits the embedding model it is sent to. The
//! text is encoded once; each chunk is the exact byte span of its tokens, widened to whole
//! characters (a token may end inside a multi-byte character), so chunks are slices of the text
//! and nothing is re-decoded lossily.

use respgw_protocol::vector_stores::ChunkingStrategy;

/// The strategy a stored vector-store file was added with (`auto` if it cannot be read).
pub fn stored_strategy(value: &serde_json::Value) -> ChunkingStrategy {
    ChunkingStrategy::parse(value, "chunking_strategy").unwrap_or(ChunkingStrategy::AUTO)
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

/// `text` cut into chunks by `strategy`; none for a text of only whitespace. CPU-bound: run it
/// on a blocking thread for large texts.
pub fn chunk(text: &str, strategy: ChunkingStrategy) -> Vec<Chunk> {
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
    let max = (strategy.max_chunk_size_tokens as usize).max(1);
    let step = max.saturating_sub(strategy.chunk_overlap_tokens as usize).max(1);
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

    fn strategy(max: u32, overlap: u32) -> ChunkingStrategy {
        ChunkingStrategy { max_chunk_size_tokens: max, chunk_overlap_tokens: overlap }
    }

    fn words(n: usize) -> String {
        (0..n).map(|i| format!("word{i}")).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_short_text_is_one_chunk_of_itself() {
        let chunks = chunk("Hello, world.", ChunkingStrategy::AUTO);
        assert_eq!(chunks, vec![Chunk { text: "Hello, world.".into(), tokens: 4 }]);
        assert!(chunk(" \n\t", ChunkingStrategy::AUTO).is_empty());
    }

    #[test]
    fn chunks_have_at_most_max_tokens_and_overlap_by_the_overlap() {
        let text = words(1000);
        let total = count_tokens(&text);
        let chunks = chunk(&text, strategy(200, 50));
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
        let chunks = chunk(&text, strategy(100, 0));
        assert_eq!(chunks.iter().map(|c| c.text.as_str()).collect::<String>(), text);
        assert_eq!(chunks.iter().map(|c| c.tokens as usize).sum::<usize>(), count_tokens(&text));
    }

    #[test]
    fn chunks_end_on_character_boundaries() {
        let text = "日本語のテキスト。".repeat(200);
        let chunks = chunk(&text, strategy(101, 13));
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
    fn a_stored_strategy_is_read_back() {
        let stored = serde_json::json!({"type": "static", "static": {"max_chunk_size_tokens": 300, "chunk_overlap_tokens": 150}});
        assert_eq!(stored_strategy(&stored), strategy(300, 150));
        assert_eq!(stored_strategy(&serde_json::json!({"type": "auto"})), ChunkingStrategy::AUTO);
    }
}
