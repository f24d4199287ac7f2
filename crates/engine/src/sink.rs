//! [`EventSink`]: where a running response sends its events — nowhere (JSON reply), a channel
//! to the connection (SSE, WebSocket) or a background run's event log — so one run path serves
//! them all.

use respgw_protocol::ResponseEvent;
use tokio::sync::mpsc;

use crate::background::sink::BackgroundSink;

/// Where a running response sends its events. One run path serves both: a non-stream request
/// gets only the outcome, a streaming one every event.
pub(crate) enum EventSink {
    /// Non-stream requests: events are not needed, only the outcome.
    Discard,
    /// Streaming requests (SSE, WebSocket): a bounded channel to the connection; closed when the
    /// client goes away.
    Channel {
        tx: mpsc::Sender<ResponseEvent>,
        /// The terminal event was sent: nothing may follow it.
        ended: bool,
    },
    /// Background runs: the run's event log in the store (see `background::sink`).
    Background(Box<BackgroundSink>),
}

/// The client disconnected; the run stops and nothing is stored.
#[derive(Debug)]
pub(crate) struct ClientGone;

impl EventSink {
    pub(crate) fn channel(tx: mpsc::Sender<ResponseEvent>) -> Self {
        EventSink::Channel { tx, ended: false }
    }

    pub(crate) async fn send(&mut self, event: ResponseEvent) -> Result<(), ClientGone> {
        match self {
            EventSink::Discard => Ok(()),
            EventSink::Channel { tx, ended } => {
                let terminal = event.terminal_response().is_some();
                tx.send(event).await.map_err(|_| ClientGone)?;
                *ended |= terminal;
                Ok(())
            }
            EventSink::Background(sink) => sink.send(event).await,
        }
    }

    /// Whether events reach anyone (not [`EventSink::Discard`]): the costly ones need not be
    /// built otherwise.
    pub(crate) fn wants_events(&self) -> bool {
        !matches!(self, EventSink::Discard)
    }

    /// Whether the terminal event was sent.
    pub(crate) fn ended(&self) -> bool {
        match self {
            EventSink::Discard => false,
            EventSink::Channel { ended, .. } => *ended,
            EventSink::Background(sink) => sink.ended(),
        }
    }

    /// What the log says when the run stopped because this sink turned it away.
    pub(crate) fn why_stopped(&self) -> &'static str {
        match self {
            EventSink::Discard | EventSink::Channel { .. } => "client disconnected; response abandoned",
            EventSink::Background(sink) => sink.why_stopped(),
        }
    }

    /// Resolves when the run must stop: the client went away (or, for a background run, it was
    /// ended elsewhere).
    pub(crate) async fn closed(&self) {
        match self {
            EventSink::Discard => std::future::pending().await,
            EventSink::Channel { tx, .. } => tx.closed().await,
            EventSink::Background(sink) => sink.stopped().await,
        }
    }
}
