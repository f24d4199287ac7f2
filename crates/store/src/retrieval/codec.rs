//! How retrieval rows become the interface's records, how embeddings are stored (little-endian
//! `f32`s in a blob), and how a lexical query is built from a user's text for each index.

use respgw_store_api::StoreError;
use respgw_store_api::retrieval::{
    BatchRecord, EmbeddingSpace, FileCounts, FileRecord, FileStatus, IngestionError, VectorStoreFileRecord,
    VectorStoreRecord, VectorStoreView,
};

use super::Row;
use super::sql::Dialect;

/// The most distinct terms a lexical query keeps (the first ones).
const MAX_QUERY_TERMS: usize = 64;

/// Column `i`, which must not be NULL.
pub(crate) fn int(row: &dyn Row, i: usize) -> Result<i64, StoreError> {
    row.int(i)?.ok_or_else(|| null(i))
}

pub(crate) fn text(row: &dyn Row, i: usize) -> Result<String, StoreError> {
    row.text(i)?.map(str::to_owned).ok_or_else(|| null(i))
}

pub(crate) fn opt_text(row: &dyn Row, i: usize) -> Result<Option<String>, StoreError> {
    Ok(row.text(i)?.map(str::to_owned))
}

fn null(i: usize) -> StoreError {
    StoreError::Corrupt(format!("retrieval column {i} is NULL"))
}

/// A count or size, which is never negative.
fn unsigned(row: &dyn Row, i: usize) -> Result<u64, StoreError> {
    let n = int(row, i)?;
    u64::try_from(n).map_err(|_| StoreError::Corrupt(format!("retrieval column {i} is negative ({n})")))
}

/// A JSON column (stored as text).
fn json(row: &dyn Row, i: usize) -> Result<serde_json::Value, StoreError> {
    let text = row.text(i)?.ok_or_else(|| null(i))?;
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("retrieval column {i}: {e}")))
}

fn opt_json(row: &dyn Row, i: usize) -> Result<Option<serde_json::Value>, StoreError> {
    match row.text(i)? {
        None => Ok(None),
        Some(_) => json(row, i).map(Some),
    }
}

/// JSON as stored.
pub(crate) fn encode_json(value: &serde_json::Value) -> String {
    value.to_string()
}

/// The days of an `expires_after` object (`{"anchor":"last_active_at","days":N}`), which
/// touching a vector store adds to its `last_active_at`.
pub(crate) fn expiry_days(expires_after: Option<&serde_json::Value>) -> Option<i64> {
    expires_after?.get("days")?.as_i64()
}

/// A file's row ([`super::sql`]'s `FILE_COLUMNS`).
pub(crate) fn file(row: &dyn Row) -> Result<FileRecord, StoreError> {
    Ok(FileRecord {
        id: text(row, 0)?,
        owner: text(row, 1)?,
        filename: text(row, 2)?,
        purpose: text(row, 3)?,
        bytes: unsigned(row, 4)?,
        created_at: int(row, 5)?,
        expires_at: row.int(6)?,
    })
}

/// A vector-store file's row (`FILE_IN_STORE_COLUMNS`).
pub(crate) fn vector_store_file(row: &dyn Row) -> Result<VectorStoreFileRecord, StoreError> {
    let last_error = match (opt_text(row, 8)?, opt_text(row, 9)?) {
        (Some(code), message) => Some(IngestionError { code, message: message.unwrap_or_default() }),
        (None, _) => None,
    };
    Ok(VectorStoreFileRecord {
        vector_store_id: text(row, 0)?,
        file_id: text(row, 1)?,
        owner: text(row, 2)?,
        status: FileStatus::parse(&text(row, 3)?)?,
        attributes: json(row, 4)?,
        chunking_strategy: json(row, 5)?,
        usage_bytes: unsigned(row, 6)?,
        created_at: int(row, 7)?,
        last_error,
        batch_id: opt_text(row, 10)?,
    })
}

/// An embedding space from its two nullable columns at `i` and `i + 1`.
pub(crate) fn space(row: &dyn Row, i: usize) -> Result<Option<EmbeddingSpace>, StoreError> {
    match (opt_text(row, i)?, row.int(i + 1)?) {
        (Some(model), Some(dimensions)) => {
            let dimensions = u32::try_from(dimensions)
                .map_err(|_| StoreError::Corrupt(format!("embedding dimensions {dimensions}")))?;
            Ok(Some(EmbeddingSpace { model, dimensions }))
        }
        _ => Ok(None),
    }
}

/// The file counts and usage at column `i` (`COUNT_COLUMNS`).
fn counts(row: &dyn Row, i: usize) -> Result<(FileCounts, u64), StoreError> {
    let counts = FileCounts {
        in_progress: unsigned(row, i)?,
        completed: unsigned(row, i + 1)?,
        failed: unsigned(row, i + 2)?,
        cancelled: unsigned(row, i + 3)?,
    };
    Ok((counts, unsigned(row, i + 4)?))
}

/// A vector store's row with its counts (`STORE_COLUMNS`, `COUNT_COLUMNS`).
pub(crate) fn view(row: &dyn Row) -> Result<VectorStoreView, StoreError> {
    let record = VectorStoreRecord {
        id: text(row, 0)?,
        owner: text(row, 1)?,
        name: opt_text(row, 2)?,
        metadata: json(row, 3)?,
        created_at: int(row, 4)?,
        last_active_at: int(row, 5)?,
        expires_after: opt_json(row, 6)?,
        expires_at: row.int(7)?,
        embedding: space(row, 8)?,
        generation: int(row, 10)?,
    };
    let (file_counts, usage_bytes) = counts(row, 11)?;
    Ok(VectorStoreView { record, file_counts, usage_bytes })
}

/// A batch's row with its counts.
pub(crate) fn batch(row: &dyn Row) -> Result<BatchRecord, StoreError> {
    Ok(BatchRecord {
        id: text(row, 0)?,
        vector_store_id: text(row, 1)?,
        owner: text(row, 2)?,
        created_at: int(row, 3)?,
        cancelled: int(row, 4)? != 0,
        file_counts: counts(row, 5)?.0,
    })
}

/// An embedding as stored: its floats' little-endian bytes, one after another.
pub(crate) fn encode_embedding(embedding: &[f32]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(embedding.len() * 4);
    for x in embedding {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes
}

/// Append a stored embedding of `dimensions` floats to `out`.
pub(crate) fn decode_embedding(bytes: &[u8], dimensions: usize, out: &mut Vec<f32>) -> Result<(), StoreError> {
    if bytes.len() != dimensions * 4 {
        return Err(StoreError::Corrupt(format!(
            "a stored embedding has {} bytes, not the {} of {dimensions} floats",
            bytes.len(),
            dimensions * 4
        )));
    }
    out.extend(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])));
    Ok(())
}

/// The words of a user's query: its runs of letters and digits, lowercased, each once, at most
/// [`MAX_QUERY_TERMS`]. Everything else (quotes, operators, punctuation, emoji) separates words,
/// so no character of the query reaches an index's query syntax.
pub(crate) fn query_terms(query: &str) -> Vec<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        if !terms.contains(&word) {
            terms.push(word);
            if terms.len() == MAX_QUERY_TERMS {
                break;
            }
        }
    }
    terms
}

/// A lexical query matching chunks with any of `terms` (none: `None`, nothing matches): FTS5's
/// `text : ("a" OR "b")`, each term a quoted string; PostgreSQL's tsquery `'a' | 'b'`. The
/// statements that run it name the vector stores.
pub(crate) fn lexical_query(dialect: Dialect, terms: &[String]) -> Option<String> {
    if terms.is_empty() {
        return None;
    }
    // Terms hold letters and digits only: nothing in them needs escaping inside the quotes.
    Some(match dialect {
        Dialect::Sqlite => {
            let terms: Vec<String> = terms.iter().map(|t| format!("\"{t}\"")).collect();
            format!("text : ({})", terms.join(" OR "))
        }
        Dialect::Postgres => terms.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(" | "),
    })
}

/// The bytes a completed file's chunks take: their text, and 4 bytes per embedding float.
pub(crate) fn usage_bytes(text_bytes: usize, floats: usize) -> i64 {
    i64::try_from(text_bytes.saturating_add(floats.saturating_mul(4))).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_terms_keep_words_and_drop_syntax() {
        assert_eq!(query_terms("\"Hello\" AND (wörld*) NEAR( -x ^y 🦀"), ["hello", "and", "wörld", "near", "x", "y"]);
        assert!(query_terms("\"*^-():🦀 ").is_empty());
        assert_eq!(query_terms("a a A").len(), 1);
        assert_eq!(query_terms(&"w ".repeat(10)).len(), 1);
        let many: String = (0..100).map(|i| format!("t{i} ")).collect();
        assert_eq!(query_terms(&many).len(), MAX_QUERY_TERMS);
    }

    #[test]
    fn lexical_queries_quote_every_term() {
        let terms = query_terms("cat dog");
        assert_eq!(lexical_query(Dialect::Sqlite, &terms).as_deref(), Some("text : (\"cat\" OR \"dog\")"));
        assert_eq!(lexical_query(Dialect::Postgres, &terms).as_deref(), Some("'cat' | 'dog'"));
        assert_eq!(lexical_query(Dialect::Sqlite, &[]), None);
    }

    #[test]
    fn embeddings_round_trip_exactly() {
        let floats = [0.0, -0.0, 1.5, f32::MIN_POSITIVE, f32::MAX, -3.25e-7];
        let mut out = Vec::new();
        decode_embedding(&encode_embedding(&floats), floats.len(), &mut out).unwrap();
        assert_eq!(out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), floats.map(f32::to_bits));
        assert!(decode_embedding(&[0; 7], 2, &mut out).is_err());
    }
}
