//! The replay upstream's embedding model: a hashed bag of words, deterministic and meaningful
//! enough for retrieval tests — texts sharing words get close vectors.
//!
//! A text is cut into words (runs of letters and digits, lower-cased), each word is stemmed
//! crudely (a plural or `-ing`/`-ed`/`-ly` ending dropped), and each stem adds ±1 to one dimension
//! chosen by its hash (the sign from another bit of the hash, so collisions cancel rather than
//! pile up). The vector is L2-normalised; a text without words is the zero vector.

/// The dimension of the replay upstream's embeddings unless a test sets another.
pub const DEFAULT_DIMENSIONS: usize = 384;

/// The words of `text`, lower-cased and stemmed, in order.
pub fn stems(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(|word| stem(&word.to_lowercase()))
}

/// `text`'s embedding of `dimensions` floats.
pub fn embed(text: &str, dimensions: usize) -> Vec<f32> {
    let mut vector = vec![0f32; dimensions.max(1)];
    for stem in stems(text) {
        let hash = fnv1a(stem.as_bytes());
        let bucket = (hash % vector.len() as u64) as usize;
        vector[bucket] += if hash >> 63 == 1 { -1.0 } else { 1.0 };
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// How many words `text` has (the usage the upstream reports).
pub fn word_count(text: &str) -> usize {
    stems(text).count()
}

/// A crude stem: the word without a plural or an `-ing`/`-ed`/`-ly` ending, when at least
/// three letters remain.
fn stem(word: &str) -> String {
    let long_enough = |stem: &str| stem.chars().count() >= 3;
    for suffix in ["ing", "ed", "ly"] {
        if let Some(stem) = word.strip_suffix(suffix).filter(|s| long_enough(s)) {
            return stem.to_owned();
        }
    }
    if let Some(stem) = word.strip_suffix("ies").filter(|s| long_enough(s)) {
        return format!("{stem}y");
    }
    if let Some(stem) = word
        .strip_suffix("es")
        .filter(|s| long_enough(s) && ["ch", "sh", "s", "x", "z"].iter().any(|end| s.ends_with(end)))
    {
        return stem.to_owned();
    }
    match word.strip_suffix('s') {
        Some(stem) if long_enough(stem) && !stem.ends_with('s') => stem.to_owned(),
        _ => word.to_owned(),
    }
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn vectors_are_unit_length_and_deterministic() {
        let a = embed("The quick brown fox", 384);
        assert_eq!(a.len(), 384);
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-5);
        assert_eq!(a, embed("The quick brown fox", 384));
        assert_eq!(embed("", 8), vec![0.0; 8]);
    }

    #[test]
    fn texts_sharing_words_are_closer_than_unrelated_ones() {
        let query = embed("how do I reset my password", 384);
        let related = embed("To reset a password, open the account settings.", 384);
        let unrelated = embed("Bananas grow in tropical climates.", 384);
        assert!(cosine(&query, &related) > cosine(&query, &unrelated) + 0.1);
    }

    #[test]
    fn stems_ignore_case_and_common_endings() {
        assert_eq!(stems("Searching searched SEARCHES").collect::<Vec<_>>(), vec!["search"; 3]);
        assert_eq!(stems("files file policies boxes").collect::<Vec<_>>(), vec!["file", "file", "policy", "box"]);
        assert_eq!(word_count("a, b; c"), 3);
    }
}
