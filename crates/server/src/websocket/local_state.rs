//! WebSocket mode's connection-local state, bounded per connection and per worker.
//!
//! Each connection keeps the conversation of its last finished `store:false` response, so its
//! next `response.create` may continue from it although no store holds it. One [`LocalStates`]
//! per worker holds these conversations for all its connections and counts their size — the
//! length of their JSON, close to what their items hold in memory — so that memory stays bounded
//! however many quiet connections a worker has: a conversation larger than the per-connection
//! bound is not kept, and past the per-worker bound the longest-kept conversations are dropped,
//! oldest first. A connection whose conversation is gone continues from it as from any unknown
//! id: the store is asked, and answers `previous_response_not_found`.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use respgw_engine::LocalConversation;

/// The conversations kept by the WebSocket connections of one worker.
pub(crate) struct LocalStates {
    /// Most bytes one connection keeps.
    per_connection: usize,
    /// Most bytes all connections keep together.
    per_worker: usize,
    ledger: Mutex<Ledger>,
}

#[derive(Default)]
struct Ledger {
    /// What each connection keeps, by connection.
    kept: HashMap<u64, Kept>,
    /// Connections by when they kept what they keep: the order in which they lose it.
    order: BTreeMap<u64, u64>,
    /// Bytes kept in all.
    bytes: usize,
    next_connection: u64,
    next_stamp: u64,
}

/// One connection's kept conversation.
struct Kept {
    conversation: Arc<LocalConversation>,
    bytes: usize,
    /// Its key in [`Ledger::order`].
    stamp: u64,
}

impl LocalStates {
    pub(crate) fn new(per_connection: usize, per_worker: usize) -> Arc<LocalStates> {
        Arc::new(LocalStates { per_connection, per_worker, ledger: Mutex::new(Ledger::default()) })
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new connection's share, which keeps nothing yet.
    pub(crate) fn connection(self: &Arc<Self>) -> ConnectionState {
        let mut ledger = self.ledger();
        let id = ledger.next_connection;
        ledger.next_connection += 1;
        ConnectionState { states: Arc::clone(self), id }
    }

    /// Bytes kept by all connections.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.ledger().bytes
    }
}

impl Ledger {
    fn remove(&mut self, connection: u64) {
        if let Some(kept) = self.kept.remove(&connection) {
            self.order.remove(&kept.stamp);
            self.bytes -= kept.bytes;
        }
    }
}

/// One connection's share of [`LocalStates`]; what it keeps is dropped with it.
pub(crate) struct ConnectionState {
    states: Arc<LocalStates>,
    id: u64,
}

impl ConnectionState {
    /// Keep `conversation` in place of what the connection kept so far — unless it is larger than
    /// one connection may keep, and then nothing. Conversations other connections kept longest
    /// are dropped until all fit under the worker's bound.
    pub(crate) fn keep(&self, conversation: LocalConversation) {
        let bytes = json_len(&conversation);
        let states = &self.states;
        let mut ledger = states.ledger();
        ledger.remove(self.id);
        if bytes > states.per_connection || bytes > states.per_worker {
            tracing::info!(
                response_id = %conversation.response_id,
                bytes,
                "the conversation is too large to keep on the connection; it cannot be continued here"
            );
            return;
        }
        while ledger.bytes + bytes > states.per_worker {
            let Some((_, oldest)) = ledger.order.pop_first() else { break };
            if let Some(kept) = ledger.kept.remove(&oldest) {
                ledger.bytes -= kept.bytes;
                tracing::info!(
                    response_id = %kept.conversation.response_id,
                    bytes = kept.bytes,
                    "connection-local state of this worker full: dropped the oldest kept conversation"
                );
            }
        }
        let stamp = ledger.next_stamp;
        ledger.next_stamp += 1;
        ledger.order.insert(stamp, self.id);
        ledger.bytes += bytes;
        ledger.kept.insert(self.id, Kept { conversation: Arc::new(conversation), bytes, stamp });
    }

    /// The conversation the connection keeps, if it still does.
    pub(crate) fn current(&self) -> Option<Arc<LocalConversation>> {
        self.states.ledger().kept.get(&self.id).map(|kept| Arc::clone(&kept.conversation))
    }
}

impl Drop for ConnectionState {
    fn drop(&mut self) {
        self.states.ledger().remove(self.id);
    }
}

/// The length of a conversation's items as JSON (the largest size when they do not serialize,
/// which cannot be kept).
fn json_len(conversation: &LocalConversation) -> usize {
    let mut counter = ByteCounter(0);
    match serde_json::to_writer(&mut counter, &conversation.items) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

/// A writer that only counts what is written to it.
struct ByteCounter(usize);

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use respgw_protocol::Item;

    use super::*;

    /// A conversation of one user message of `text_len` letters.
    fn conversation(id: &str, text_len: usize) -> LocalConversation {
        let item: Item = serde_json::from_value(serde_json::json!({
            "type": "message", "id": "msg_1", "role": "user", "status": "completed", "content": [{"type": "input_text", "text": "x".repeat(text_len)}]
        }))
        .unwrap_or_else(|e| panic!("a message item: {e}"));
        LocalConversation { response_id: id.to_owned(), items: vec![item] }
    }

    fn kept_id(connection: &ConnectionState) -> Option<String> {
        connection.current().map(|c| c.response_id.clone())
    }

    #[test]
    fn a_connection_keeps_its_latest_conversation_only() {
        let states = LocalStates::new(10_000, 100_000);
        let connection = states.connection();
        connection.keep(conversation("resp_1", 100));
        connection.keep(conversation("resp_2", 100));
        assert_eq!(kept_id(&connection).as_deref(), Some("resp_2"));
        assert_eq!(states.bytes(), json_len(&conversation("resp_2", 100)));
    }

    #[test]
    fn a_conversation_over_the_connection_bound_is_not_kept() {
        let states = LocalStates::new(1_000, 100_000);
        let connection = states.connection();
        connection.keep(conversation("resp_small", 100));
        connection.keep(conversation("resp_large", 2_000));
        assert_eq!(kept_id(&connection), None, "the large one is not kept, and it replaced the small one");
        assert_eq!(states.bytes(), 0);
    }

    #[test]
    fn past_the_worker_bound_the_oldest_kept_conversations_go() {
        let one = json_len(&conversation("resp_0", 1_000));
        let states = LocalStates::new(10_000, 3 * one);
        let connections: Vec<ConnectionState> = (0..4).map(|_| states.connection()).collect();
        for (n, connection) in connections.iter().enumerate() {
            connection.keep(conversation(&format!("resp_{n}"), 1_000));
        }
        let kept: Vec<Option<String>> = connections.iter().map(kept_id).collect();
        assert_eq!(kept, [None, Some("resp_1".into()), Some("resp_2".into()), Some("resp_3".into())]);
        assert_eq!(states.bytes(), 3 * one);
        // Keeping anew puts a connection last in line.
        connections[1].keep(conversation("resp_1b", 1_000));
        connections[0].keep(conversation("resp_0b", 1_000));
        let kept: Vec<Option<String>> = connections.iter().map(kept_id).collect();
        assert_eq!(kept, [Some("resp_0b".into()), Some("resp_1b".into()), None, Some("resp_3".into())]);
    }

    #[test]
    fn a_closed_connection_gives_its_bytes_back() {
        let states = LocalStates::new(10_000, 100_000);
        let connection = states.connection();
        connection.keep(conversation("resp_1", 1_000));
        assert!(states.bytes() > 1_000);
        drop(connection);
        assert_eq!(states.bytes(), 0);
    }
}
