//! A connection's entry in the book as the WebSocket route sees it. Every request carries its
//! connection's [`ConnectionEntry`] (a request extension); the WebSocket route turns it into an
//! [`UpgradedConnection`] when it accepts an upgrade, and from then on tells the book when the
//! WebSocket is busy and when idle, and learns when it was evicted to make room.

use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::book::Book;

/// The connection a request arrived on.
#[derive(Clone)]
pub(crate) struct ConnectionEntry {
    book: Arc<Book>,
    id: u64,
}

impl ConnectionEntry {
    pub(super) fn new(book: Arc<Book>, id: u64) -> Self {
        ConnectionEntry { book, id }
    }

    /// The connection switches to WebSocket: its entry now lives as long as the returned value.
    /// It starts busy (an upgrade is in flight).
    pub(crate) fn upgrade(self) -> UpgradedConnection {
        let evicted = self.book.upgrade(self.id);
        UpgradedConnection { book: self.book, id: self.id, evicted }
    }
}

/// A WebSocket connection's entry in the book; forgotten when dropped.
pub(crate) struct UpgradedConnection {
    book: Arc<Book>,
    id: u64,
    /// Notified when the connection is evicted.
    evicted: Arc<Notify>,
}

/// The connection was chosen to make room, and is to close.
pub(crate) struct Evicted;

impl UpgradedConnection {
    /// A response is in flight: the connection cannot be evicted until it is idle again.
    pub(crate) fn busy(&self) -> Result<(), Evicted> {
        if self.book.websocket_busy(self.id) { Ok(()) } else { Err(Evicted) }
    }

    /// Nothing is in flight from now on: the connection may be evicted.
    pub(crate) fn idle(&self) {
        self.book.websocket_idle(self.id, Instant::now());
    }

    /// Resolves once the connection has been evicted.
    pub(crate) async fn evicted(&self) {
        while !self.book.is_evicted(self.id) {
            self.evicted.notified().await;
        }
    }
}

impl Drop for UpgradedConnection {
    fn drop(&mut self) {
        self.book.forget_upgraded(self.id);
    }
}
