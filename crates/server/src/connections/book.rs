//! The book of one worker's client connections: how many sockets they hold, what each one is
//! doing, when it has waited too long, and which idle one gives way when the cap is reached.
//!
//! A connection is *busy* while a request is in flight on it — from the moment its head is
//! parsed until its response body has been sent, an SSE stream's whole life included. Only a
//! connection that is not busy waits under a deadline: the header timeout from its acceptance,
//! or from the first byte of a later request; the idle timeout between requests. The same
//! connections, oldest idle first, are the ones evicted.
//!
//! A connection that switched to WebSocket leaves the HTTP task's hands: its entry is then the
//! WebSocket's, which says when it is busy (a response in flight) and when idle, times its own
//! idleness, and is told when it was evicted — idle WebSockets give way at the cap like idle
//! HTTP connections.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::options::ClientLimits;

/// The connections of one worker.
pub(super) struct Book {
    limits: ClientLimits,
    ledger: Mutex<Ledger>,
}

struct Ledger {
    /// Accepted sockets still open, upgraded ones included: what the cap counts.
    open: usize,
    /// Connections whose HTTP task runs, by id.
    tracked: HashMap<u64, Tracked>,
    /// Connections with nothing in flight, by the instant they became so: eviction order.
    idle: BTreeSet<(Instant, u64)>,
    next_id: u64,
}

struct Tracked {
    /// Requests in flight (HTTP/2 may carry several); an upgrade stays in flight.
    in_flight: usize,
    wait: Wait,
    /// This connection's key in [`Ledger::idle`], while it is there.
    idle_since: Option<Instant>,
    /// Wakes the connection's task when its verdict may have changed.
    wake: Arc<Notify>,
    /// Raised while a kept-alive connection waits for the first byte of its next request.
    awaiting_request: Arc<AtomicBool>,
    /// The connection switched to WebSocket: the WebSocket forgets its entry, not the HTTP task.
    upgraded: bool,
}

/// What a connection with nothing in flight is waiting for.
#[derive(Clone, Copy)]
enum Wait {
    /// A request head, which must be complete by the deadline.
    Head { deadline: Instant },
    /// The next request on a kept-alive connection, which must start by the deadline.
    NextRequest { deadline: Instant },
    /// Nothing: requests are in flight.
    Busy,
    /// Its end: it was chosen to make room and closes once nothing is in flight.
    Evicted,
}

/// What a connection's task is to do now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Keep serving; look again at the deadline, if any.
    Serve { until: Option<Instant> },
    /// Close at once: nothing is in flight.
    Close,
    /// Finish what is in flight, then close.
    Finish,
}

/// The answer to a new socket.
pub(super) enum Admission {
    /// Under the cap.
    Room(Slot),
    /// At the cap: the longest-idle connection was told to close.
    MadeRoom(Slot),
    /// At the cap, and every connection is busy.
    Full,
}

/// A connection's entry, as its task, its socket and its service use it.
pub(super) struct Registration {
    pub id: u64,
    pub wake: Arc<Notify>,
    pub awaiting_request: Arc<AtomicBool>,
}

impl Book {
    pub(super) fn new(limits: ClientLimits) -> Arc<Book> {
        Arc::new(Book {
            limits,
            ledger: Mutex::new(Ledger { open: 0, tracked: HashMap::new(), idle: BTreeSet::new(), next_id: 0 }),
        })
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a just-accepted socket: under the cap, or made by evicting the longest-idle
    /// connection.
    pub(super) fn admit(self: &Arc<Self>) -> Admission {
        let mut ledger = self.ledger();
        let evicted = ledger.open >= self.limits.max_connections;
        if evicted && !ledger.evict_oldest_idle() {
            return Admission::Full;
        }
        ledger.open += 1;
        let slot = Slot { book: Arc::clone(self) };
        if evicted { Admission::MadeRoom(slot) } else { Admission::Room(slot) }
    }

    /// Evict the longest-idle connection, if there is one (to free a descriptor).
    pub(super) fn evict_oldest_idle(&self) -> bool {
        self.ledger().evict_oldest_idle()
    }

    /// Start tracking an admitted connection: its header timeout runs from `now`.
    pub(super) fn register(&self, now: Instant) -> Registration {
        let mut ledger = self.ledger();
        let id = ledger.next_id;
        ledger.next_id += 1;
        let wake = Arc::new(Notify::new());
        let awaiting_request = Arc::new(AtomicBool::new(false));
        let tracked = Tracked {
            in_flight: 0,
            wait: Wait::Head { deadline: now + self.limits.header_timeout },
            idle_since: Some(now),
            wake: Arc::clone(&wake),
            awaiting_request: Arc::clone(&awaiting_request),
            upgraded: false,
        };
        ledger.tracked.insert(id, tracked);
        ledger.idle.insert((now, id));
        Registration { id, wake, awaiting_request }
    }

    /// The connection's HTTP task has ended: forget it, unless it switched to WebSocket.
    pub(super) fn forget(&self, id: u64) {
        let mut ledger = self.ledger();
        if ledger.tracked.get(&id).is_some_and(|tracked| !tracked.upgraded) {
            ledger.remove(id);
        }
    }

    /// The connection is switching to WebSocket: from now on the WebSocket reports on it, and
    /// is woken through the returned signal when the connection is evicted.
    pub(super) fn upgrade(&self, id: u64) -> Arc<Notify> {
        let mut ledger = self.ledger();
        let wake = Arc::new(Notify::new());
        if let Some(tracked) = ledger.tracked.get_mut(&id) {
            tracked.upgraded = true;
            tracked.wake = Arc::clone(&wake);
        }
        wake
    }

    /// The WebSocket has a response in flight from now on: it cannot be evicted. `false` when
    /// it was evicted already, and is to close.
    pub(super) fn websocket_busy(&self, id: u64) -> bool {
        let mut ledger = self.ledger();
        let Some(tracked) = ledger.tracked.get_mut(&id) else { return true };
        if matches!(tracked.wait, Wait::Evicted) {
            return false;
        }
        if let Some(since) = tracked.idle_since.take() {
            ledger.idle.remove(&(since, id));
        }
        true
    }

    /// The WebSocket has had nothing in flight since `now`: it can be evicted, after the
    /// connections idle for longer.
    pub(super) fn websocket_idle(&self, id: u64, now: Instant) {
        let mut ledger = self.ledger();
        let Some(tracked) = ledger.tracked.get_mut(&id) else { return };
        if matches!(tracked.wait, Wait::Evicted) {
            return;
        }
        let before = tracked.idle_since.replace(now);
        if let Some(since) = before {
            ledger.idle.remove(&(since, id));
        }
        ledger.idle.insert((now, id));
    }

    /// Whether the connection was chosen to make room.
    pub(super) fn is_evicted(&self, id: u64) -> bool {
        self.ledger().tracked.get(&id).is_some_and(|tracked| matches!(tracked.wait, Wait::Evicted))
    }

    /// The WebSocket has closed (or its upgrade failed): forget the connection.
    pub(super) fn forget_upgraded(&self, id: u64) {
        self.ledger().remove(id);
    }

    /// What the connection's task is to do at `now`.
    pub(super) fn verdict(&self, id: u64, now: Instant) -> Verdict {
        let ledger = self.ledger();
        let Some(tracked) = ledger.tracked.get(&id) else { return Verdict::Close };
        match tracked.wait {
            Wait::Busy => Verdict::Serve { until: None },
            Wait::Evicted if tracked.in_flight == 0 => Verdict::Close,
            Wait::Evicted => Verdict::Finish,
            Wait::Head { deadline } | Wait::NextRequest { deadline } if deadline <= now => Verdict::Close,
            Wait::Head { deadline } | Wait::NextRequest { deadline } => Verdict::Serve { until: Some(deadline) },
        }
    }

    /// A request's head was parsed: the connection is busy.
    pub(super) fn request_started(&self, id: u64) {
        let mut ledger = self.ledger();
        let Some(tracked) = ledger.tracked.get_mut(&id) else { return };
        tracked.in_flight += 1;
        tracked.awaiting_request.store(false, Ordering::Relaxed);
        if !matches!(tracked.wait, Wait::Evicted) {
            tracked.wait = Wait::Busy;
        }
        if let Some(since) = tracked.idle_since.take() {
            ledger.idle.remove(&(since, id));
        }
    }

    /// A request's response has been sent (or abandoned) at `now`.
    pub(super) fn request_finished(&self, id: u64, now: Instant) {
        let mut ledger = self.ledger();
        let Some(tracked) = ledger.tracked.get_mut(&id) else { return };
        tracked.in_flight = tracked.in_flight.saturating_sub(1);
        if tracked.in_flight > 0 {
            return;
        }
        if !matches!(tracked.wait, Wait::Evicted) {
            tracked.wait = Wait::NextRequest { deadline: now + self.limits.idle_timeout };
            tracked.idle_since = Some(now);
            tracked.awaiting_request.store(true, Ordering::Relaxed);
        }
        tracked.wake.notify_one();
        if tracked.idle_since.is_some() {
            ledger.idle.insert((now, id));
        }
    }

    /// The first byte of a new request arrived on a kept-alive connection at `now`: from here
    /// the header timeout applies.
    pub(super) fn request_head_started(&self, id: u64, now: Instant) {
        let mut ledger = self.ledger();
        let Some(tracked) = ledger.tracked.get_mut(&id) else { return };
        if matches!(tracked.wait, Wait::NextRequest { .. }) {
            tracked.wait = Wait::Head { deadline: now + self.limits.header_timeout };
            tracked.wake.notify_one();
        }
    }

    /// Sockets open now (upgraded ones included).
    #[cfg(test)]
    fn open(&self) -> usize {
        self.ledger().open
    }
}

impl Ledger {
    fn remove(&mut self, id: u64) {
        if let Some(tracked) = self.tracked.remove(&id)
            && let Some(since) = tracked.idle_since
        {
            self.idle.remove(&(since, id));
        }
    }

    fn evict_oldest_idle(&mut self) -> bool {
        while let Some((_, id)) = self.idle.pop_first() {
            if let Some(tracked) = self.tracked.get_mut(&id) {
                tracked.idle_since = None;
                tracked.wait = Wait::Evicted;
                tracked.wake.notify_one();
                return true;
            }
        }
        false
    }
}

/// One socket's place under the cap, given back when the socket is closed.
pub(super) struct Slot {
    book: Arc<Book>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut ledger = self.book.ledger();
        ledger.open = ledger.open.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn book(max_connections: usize) -> Arc<Book> {
        Book::new(ClientLimits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections,
        })
    }

    #[test]
    fn a_new_connection_must_send_its_head_within_the_header_timeout() {
        let book = book(4);
        let now = Instant::now();
        let connection = book.register(now);
        let deadline = now + Duration::from_secs(10);
        assert_eq!(book.verdict(connection.id, now), Verdict::Serve { until: Some(deadline) });
        assert_eq!(book.verdict(connection.id, deadline), Verdict::Close);
    }

    #[test]
    fn a_busy_connection_has_no_deadline_and_an_idle_one_the_idle_timeout() {
        let book = book(4);
        let now = Instant::now();
        let connection = book.register(now);
        book.request_started(connection.id);
        assert_eq!(book.verdict(connection.id, now + Duration::from_secs(3600)), Verdict::Serve { until: None });
        let done = now + Duration::from_secs(100);
        book.request_finished(connection.id, done);
        assert!(connection.awaiting_request.load(Ordering::Relaxed));
        assert_eq!(book.verdict(connection.id, done), Verdict::Serve { until: Some(done + Duration::from_secs(60)) });
        let first_byte = done + Duration::from_secs(5);
        book.request_head_started(connection.id, first_byte);
        assert_eq!(
            book.verdict(connection.id, first_byte),
            Verdict::Serve { until: Some(first_byte + Duration::from_secs(10)) }
        );
    }

    #[test]
    fn at_the_cap_the_longest_idle_connection_is_evicted() {
        let book = book(2);
        let now = Instant::now();
        let slots: Vec<Admission> = (0..2).map(|_| book.admit()).collect();
        assert!(slots.iter().all(|a| matches!(a, Admission::Room(_))));
        let older = book.register(now);
        let newer = book.register(now + Duration::from_secs(1));
        let third = book.admit();
        assert!(matches!(third, Admission::MadeRoom(_)));
        assert_eq!(book.verdict(older.id, now), Verdict::Close);
        assert!(matches!(book.verdict(newer.id, now), Verdict::Serve { .. }));
        assert_eq!(book.open(), 3, "the evicted socket still counts until it is closed");
        drop((slots, third));
        assert_eq!(book.open(), 0);
    }

    #[test]
    fn busy_connections_are_never_evicted() {
        let book = book(1);
        let now = Instant::now();
        let _slot = book.admit();
        let streaming = book.register(now);
        book.request_started(streaming.id);
        assert!(matches!(book.admit(), Admission::Full), "nothing idle to evict");
        assert_eq!(book.verdict(streaming.id, now), Verdict::Serve { until: None });
    }

    #[test]
    fn an_idle_websocket_is_evicted_and_a_busy_one_is_not() {
        let book = book(2);
        let now = Instant::now();
        let slots: Vec<Admission> = (0..2).map(|_| book.admit()).collect();
        let upgrade = |at: Instant| {
            let connection = book.register(at);
            book.request_started(connection.id);
            let wake = book.upgrade(connection.id);
            book.forget(connection.id);
            (connection.id, wake)
        };
        let (busy, _) = upgrade(now);
        let (idle, _) = upgrade(now);
        book.websocket_idle(busy, now);
        book.websocket_idle(idle, now + Duration::from_secs(1));
        assert!(book.websocket_busy(busy), "the older one starts a response");
        assert!(matches!(book.admit(), Admission::MadeRoom(_)));
        assert!(book.is_evicted(idle) && !book.is_evicted(busy));
        assert!(!book.websocket_busy(idle), "an evicted WebSocket starts nothing more");
        assert!(matches!(book.admit(), Admission::Full), "a WebSocket with a response in flight stays");
        book.forget_upgraded(idle);
        book.forget_upgraded(busy);
        drop(slots);
    }

    #[test]
    fn an_evicted_connection_finishes_what_is_in_flight() {
        let book = book(1);
        let now = Instant::now();
        let connection = book.register(now);
        assert!(book.evict_oldest_idle());
        book.request_started(connection.id);
        assert_eq!(book.verdict(connection.id, now), Verdict::Finish);
        book.request_finished(connection.id, now);
        assert_eq!(book.verdict(connection.id, now), Verdict::Close);
    }
}
