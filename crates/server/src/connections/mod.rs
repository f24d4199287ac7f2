//! The worker's accept loop and the driver of each client connection (hyper's HTTP/1 and HTTP/2,
//! upgrades included), with the limits that keep slow, silent or idle clients from holding it:
//!
//! - **Header timeout:** a connection must complete a request head within it, counted from its
//!   acceptance, or on a kept-alive connection from the first byte of the next request. This
//!   closes silent connections and clients that trickle their headers.
//! - **Idle timeout:** how long a kept-alive connection may wait for its next request.
//! - **Body timeout:** the longest pause while a request body arrives; a stalled body is answered
//!   408 and its connection closed.
//! - **Connection cap:** at most `max_connections` open sockets per worker. At the cap, a new
//!   connection makes room by closing the longest-idle connection (one with no request in flight:
//!   silent, trickling its headers, or kept alive), so idle sockets can never lock clients out;
//!   if every connection is busy, the newcomer is answered 503 `server_busy` and closed.
//!
//! A connection with a request in flight — an SSE stream included, for as long as it lasts — is
//! under none of these timeouts. An upgraded WebSocket connection times its own idleness (see
//! `crate::websocket`); it counts under the cap, and while it has no response in flight it is
//! idle for eviction like a kept-alive connection ([`UpgradedConnection`]). Hyper's own header-read timer is not used: it also runs while a kept-alive
//! connection waits for its next request, so it cannot tell idle from slow.
//!
//! An accept that fails for lack of descriptors closes the longest-idle connection and retries
//! with a growing pause (logged at most every ten seconds), so the worker keeps serving.

mod book;
mod service;
mod socket;
mod upgraded;

use std::convert::Infallible;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::IntoResponse;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::error::server_busy;
use crate::options::ClientLimits;
use book::{Admission, Book, Registration, Verdict};
use service::ConnectionService;
use socket::ClientSocket;
pub(crate) use upgraded::{ConnectionEntry, UpgradedConnection};

/// Connections being answered 503 at once; beyond that a newcomer is closed without a reply.
const MAX_REFUSING: usize = 64;
/// How long a refused connection gets to send its request and read the 503.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(2);
/// First pause after an accept failed for lack of resources; it doubles up to the next.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// Least time between two warnings of the same kind.
const WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// The client connections of one worker.
pub(crate) struct Connections {
    limits: ClientLimits,
    book: Arc<Book>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    tasks: TaskTracker,
    /// Raised when the worker drains: each connection finishes what is in flight, then closes.
    closing: watch::Sender<bool>,
    refusing: Arc<Semaphore>,
}

impl Connections {
    pub(crate) fn new(limits: ClientLimits) -> Self {
        let mut builder = auto::Builder::new(TokioExecutor::new());
        // The book times request heads (see above), not hyper.
        builder.http1().header_read_timeout(None);
        // WebSocket over HTTP/2 (RFC 8441) needs the extended CONNECT method.
        builder.http2().enable_connect_protocol();
        Connections {
            limits,
            book: Book::new(limits),
            builder: Arc::new(builder),
            tasks: TaskTracker::new(),
            closing: watch::Sender::new(false),
            refusing: Arc::new(Semaphore::new(MAX_REFUSING)),
        }
    }

    /// Accept connections from `listener` and serve `app` on them, until this future is dropped.
    pub(crate) async fn accept(&self, listener: &TcpListener, app: &Router) {
        let mut backoff = ACCEPT_BACKOFF_MIN;
        let (mut accept_failed, mut evicting, mut refusing) =
            (Warning::default(), Warning::default(), Warning::default());
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of descriptors (or memory): make room, wait a little, try again.
                    let evicted = self.book.evict_oldest_idle();
                    if accept_failed.due() {
                        tracing::warn!(error = %e, evicted, "cannot accept connections; retrying");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            };
            backoff = ACCEPT_BACKOFF_MIN;
            match self.book.admit() {
                Admission::Room(slot) => self.serve(stream, slot, app),
                Admission::MadeRoom(slot) => {
                    if evicting.due() {
                        tracing::warn!(
                            max_connections = self.limits.max_connections,
                            "connection cap reached: closing the longest-idle connections to admit new ones"
                        );
                    }
                    self.serve(stream, slot, app);
                }
                Admission::Full => {
                    if refusing.due() {
                        tracing::warn!(
                            max_connections = self.limits.max_connections,
                            "connection cap reached and every connection is busy: answering 503"
                        );
                    }
                    self.refuse(stream);
                }
            }
        }
    }

    /// Serve one admitted connection in its own task.
    fn serve(&self, stream: TcpStream, slot: book::Slot, app: &Router) {
        // Without TCP_NODELAY the last small write of a stream waits for the client's delayed
        // ACK (~40 ms on Linux): every SSE event must leave as soon as it is written.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let registration = self.book.register(Instant::now());
        let id = registration.id;
        let book = Arc::clone(&self.book);
        let socket = ClientSocket::new(stream, slot, Arc::clone(&book), id, Arc::clone(&registration.awaiting_request));
        let service =
            ConnectionService { app: app.clone(), book: Arc::clone(&book), id, body_timeout: self.limits.body_timeout };
        let builder = Arc::clone(&self.builder);
        let closing = self.closing.subscribe();
        self.tasks.spawn(async move {
            let connection = builder.serve_connection_with_upgrades(TokioIo::new(socket), service);
            drive(connection, &book, &registration, closing).await;
            book.forget(id);
        });
    }

    /// Answer a connection over the cap 503 and close it (or just close it when already
    /// answering [`MAX_REFUSING`] others).
    fn refuse(&self, stream: TcpStream) {
        let Ok(permit) = Arc::clone(&self.refusing).try_acquire_owned() else { return };
        self.tasks.spawn(async move {
            let _permit = permit;
            let reply = hyper::service::service_fn(|_| async { Ok::<_, Infallible>(server_busy().into_response()) });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.keep_alive(false);
            let connection = builder.serve_connection(TokioIo::new(stream), reply);
            let _ = tokio::time::timeout(REFUSAL_TIMEOUT, connection).await;
        });
    }

    /// Tell every connection to finish what is in flight and close.
    pub(crate) fn close_gracefully(&self) {
        self.closing.send_replace(true);
    }

    /// Wait until every connection's task has ended (upgraded sockets live on in their WebSocket).
    pub(crate) async fn closed(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}

/// One client connection as hyper drives it.
type Connection<'a> = auto::UpgradeableConnection<'a, TokioIo<ClientSocket>, ConnectionService, TokioExecutor>;

/// Serve one connection until it ends, closing it when the book says so.
async fn drive(
    connection: Connection<'_>,
    book: &Book,
    registration: &Registration,
    mut closing: watch::Receiver<bool>,
) {
    tokio::pin!(connection);
    let mut finishing = false;
    loop {
        let until = match book.verdict(registration.id, Instant::now()) {
            Verdict::Close => return,
            Verdict::Finish => {
                if !finishing {
                    finishing = true;
                    connection.as_mut().graceful_shutdown();
                }
                None
            }
            Verdict::Serve { until } => until,
        };
        let deadline = async move {
            match until {
                Some(instant) => tokio::time::sleep_until(instant).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "client connection ended with an error");
                }
                return;
            }
            () = registration.wake.notified() => {}
            () = deadline => {}
            _ = closing.wait_for(|closing| *closing), if !finishing => {
                finishing = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Accept errors about one connection (gone before it was accepted): nothing to wait for.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// One kind of warning, logged at most every [`WARNING_INTERVAL`].
#[derive(Default)]
struct Warning {
    last: Option<Instant>,
}

impl Warning {
    /// Whether to log it now (and note that it is).
    fn due(&mut self) -> bool {
        let now = Instant::now();
        if self.last.is_some_and(|at| now < at + WARNING_INTERVAL) {
            return false;
        }
        self.last = Some(now);
        true
    }
}
