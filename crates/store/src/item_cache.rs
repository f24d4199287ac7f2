//! Decoded stored items by store key, so that continuing a history decodes each item once per
//! process rather than once per continuation (decoding is most of what a long history costs a
//! read: about 1 µs per item, against 0.1 µs to clone a decoded one). Conversation reads use it
//! too.
//!
//! Only reads fill it: an item is kept once something read it. Writes keep nothing, so a
//! continuation decodes the previous turn's new items once, and responses that are never
//! continued cost no memory. It also keeps a burst of streams from pinning memory: an item saved
//! at the end of a stream was allocated among the buffers of the streams being served, and keeping
//! it would hold those heap pages resident after the streams close.
//!
//! Always consistent without invalidation: an item's row never changes once written, and a key is
//! never handed out twice (SQLite `AUTOINCREMENT`, a PostgreSQL sequence), so a cached key can only
//! ever mean that one item. Deleted items are never asked for again (no stored history or
//! conversation names them: see the crate's invariant) and age out. Whether a response or
//! conversation exists is still read from the database on every read (the cache only replaces
//! decoding the rows that read returns).
//!
//! Bounded by an estimate of the memory each decoded item holds: its stored JSON's size (a
//! data-URL image can be megabytes; decoded text takes about as much) plus a fixed cost per entry
//! (the item's own struct, its small strings and the cache's slot), which is most of a short
//! message's. Evicts the least recently used (quick_cache's CLOCK-Pro: concurrent and weighted,
//! which a hand-rolled LRU is not).

use quick_cache::Weighter;
use respgw_protocol::Item;

use crate::StoreError;

/// Memory, estimated, of the decoded items kept per process.
pub const DEFAULT_ITEM_CACHE_BYTES: u64 = 16 << 20;

/// What an entry costs besides its JSON's size: an [`Item`] is 176 bytes, its id, role and status
/// strings are separate allocations, and the cache's slot and table hold a few words.
const ENTRY_OVERHEAD_BYTES: u64 = 384;

/// A cached item with the size of its stored JSON.
#[derive(Clone)]
struct Entry {
    item: Item,
    bytes: u64,
}

#[derive(Clone)]
struct ByBytes;

impl Weighter<i64, Entry> for ByBytes {
    fn weight(&self, _key: &i64, entry: &Entry) -> u64 {
        entry.bytes + ENTRY_OVERHEAD_BYTES
    }
}

/// Decoded items by store key (shared by a store's connections and threads).
pub(crate) struct ItemCache {
    cache: quick_cache::sync::Cache<i64, Entry, ByBytes>,
}

impl ItemCache {
    /// A cache holding decoded items of up to about `max_bytes` of memory (0 disables it).
    pub fn new(max_bytes: u64) -> Self {
        // quick_cache sizes its table from an estimate of the entries: assume ~1 KiB per item.
        let estimated_items = usize::try_from(max_bytes / 1024).unwrap_or(usize::MAX).max(16);
        Self { cache: quick_cache::sync::Cache::with_weighter(estimated_items, max_bytes, ByBytes) }
    }

    /// The item under `key`, if decoded before.
    pub fn get(&self, key: i64) -> Option<Item> {
        self.cache.get(&key).map(|entry| entry.item)
    }

    /// Keep `item`, stored under `key` as `bytes` bytes of JSON.
    fn keep(&self, key: i64, item: Item, bytes: usize) {
        self.cache.insert(key, Entry { item, bytes: bytes as u64 });
    }

    /// Items kept now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.cache.len()
    }

    /// Decode `body`, the stored JSON of the item under `key`, and keep the result.
    pub fn decode(&self, key: i64, body: &str) -> Result<Item, StoreError> {
        let item: Item = serde_json::from_str(body).map_err(|e| StoreError::Corrupt(format!("item {key}: {e}")))?;
        self.keep(key, item.clone(), body.len());
        Ok(item)
    }
}

#[cfg(test)]
mod tests {
    use respgw_protocol::items::{ContentPart, ItemStatus, MessageItem, MessageRole};

    use super::*;

    fn json(text: &str) -> String {
        let item = Item::Message(MessageItem {
            id: "msg_1".into(),
            role: MessageRole::User,
            status: ItemStatus::Completed,
            content: vec![ContentPart::InputText { text: text.into() }],
        });
        serde_json::to_string(&item).unwrap()
    }

    #[test]
    fn decoded_items_are_kept_and_bounded_by_their_stored_size() {
        let cache = ItemCache::new(64 << 10);
        assert!(cache.get(1).is_none());
        let item = cache.decode(1, &json("hello")).unwrap();
        assert_eq!(cache.get(1), Some(item.clone()));
        cache.keep(2, item.clone(), 100);
        assert_eq!(cache.get(2), Some(item));
        // Far more than fits: the oldest go, the cache never holds more than its budget.
        let big = json(&"x".repeat(4096));
        for key in 3..200 {
            cache.decode(key, &big).unwrap();
        }
        let kept = (3..200).filter(|&key| cache.get(key).is_some()).count();
        assert!(kept > 0 && kept as u64 * (big.len() as u64 + ENTRY_OVERHEAD_BYTES) <= 64 << 10, "{kept} kept");
        assert!(matches!(cache.decode(500, "{\"type\":\"nonsense\"}"), Err(StoreError::Corrupt(_))));
        assert!(cache.get(500).is_none());
    }
}
