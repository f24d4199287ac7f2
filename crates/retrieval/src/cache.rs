//! [`VectorCache`]: one worker's vector stores' embeddings kept in memory between searches.
//!
//! An entry is a store's vectors as read at one generation (or the fact that it had none); it is
//! current while the store's generation is unchanged. The entries together take at most the
//! budget (`vector_cache_bytes`): adding one evicts the least recently used first, and a store
//! larger than the whole budget is not kept (each search reads it afresh).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use respgw_store_api::retrieval::StoreVectors;

/// The cache; shared by the worker's searches.
pub struct VectorCache {
    budget: usize,
    inner: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    by_store: HashMap<String, Entry>,
    /// Bytes of all entries.
    bytes: usize,
    /// Ticks on every use; an entry's `used` is the tick of its last use.
    clock: u64,
}

struct Entry {
    generation: i64,
    vectors: Option<Arc<StoreVectors>>,
    bytes: usize,
    used: u64,
}

/// Bytes an entry is counted for: its floats, ids and file ids.
fn footprint(vectors: Option<&StoreVectors>) -> usize {
    vectors.map_or(0, |v| {
        v.vectors.len() * size_of::<f32>()
            + v.chunk_ids.len() * size_of::<i64>()
            + v.file_ids.iter().map(|f| f.len() + size_of::<String>()).sum::<usize>()
    })
}

impl VectorCache {
    pub fn new(budget: usize) -> Self {
        VectorCache { budget, inner: Mutex::new(Entries::default()) }
    }

    /// The store's cached vectors if they are of `generation`: `Some(None)` when it had none.
    pub fn get(&self, vector_store_id: &str, generation: i64) -> Option<Option<Arc<StoreVectors>>> {
        let mut entries = self.lock();
        entries.clock += 1;
        let clock = entries.clock;
        let entry = entries.by_store.get_mut(vector_store_id).filter(|e| e.generation == generation)?;
        entry.used = clock;
        Some(entry.vectors.clone())
    }

    /// Keep a store's vectors read at `generation`, evicting the least recently used entries to
    /// stay within the budget; a read larger than the budget replaces nothing and is not kept.
    pub fn put(&self, vector_store_id: &str, generation: i64, vectors: Option<Arc<StoreVectors>>) {
        let bytes = footprint(vectors.as_deref());
        let mut entries = self.lock();
        if let Some(old) = entries.by_store.remove(vector_store_id) {
            entries.bytes -= old.bytes;
        }
        if bytes > self.budget {
            return;
        }
        while entries.bytes + bytes > self.budget {
            let Some(oldest) = entries.by_store.iter().min_by_key(|(_, e)| e.used).map(|(id, _)| id.clone()) else {
                break;
            };
            if let Some(evicted) = entries.by_store.remove(&oldest) {
                entries.bytes -= evicted.bytes;
            }
        }
        entries.clock += 1;
        let used = entries.clock;
        entries.bytes += bytes;
        entries.by_store.insert(vector_store_id.to_owned(), Entry { generation, vectors, bytes, used });
    }

    /// Bytes the entries take.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vectors(generation: i64, chunks: usize) -> Option<Arc<StoreVectors>> {
        Some(Arc::new(StoreVectors {
            generation,
            dimensions: 4,
            chunk_ids: (0..chunks as i64).collect(),
            file_ids: vec![String::new(); chunks],
            vectors: vec![0.5; chunks * 4],
        }))
    }

    #[test]
    fn an_entry_is_current_until_the_generation_changes() {
        let cache = VectorCache::new(1 << 20);
        assert!(cache.get("vs_a", 1).is_none());
        cache.put("vs_a", 1, vectors(1, 3));
        assert_eq!(cache.get("vs_a", 1).flatten().map(|v| v.chunk_ids.len()), Some(3));
        assert!(cache.get("vs_a", 2).is_none());
        cache.put("vs_b", 7, None);
        assert_eq!(cache.get("vs_b", 7), Some(None));
    }

    #[test]
    fn the_least_recently_used_entry_is_evicted_to_fit() {
        let one = footprint(vectors(1, 10).as_deref());
        let cache = VectorCache::new(one * 2);
        cache.put("a", 1, vectors(1, 10));
        cache.put("b", 1, vectors(1, 10));
        assert!(cache.get("a", 1).is_some());
        cache.put("c", 1, vectors(1, 10));
        assert!(cache.get("b", 1).is_none(), "b was the least recently used");
        assert!(cache.get("a", 1).is_some() && cache.get("c", 1).is_some());
        assert_eq!(cache.bytes(), one * 2);
    }

    #[test]
    fn a_store_larger_than_the_budget_is_not_kept() {
        let cache = VectorCache::new(100);
        cache.put("small", 1, None);
        cache.put("huge", 1, vectors(1, 1000));
        assert!(cache.get("huge", 1).is_none());
        assert_eq!(cache.get("small", 1), Some(None));
    }
}
