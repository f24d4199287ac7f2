//! WebSocket mode: `GET /v1/responses` upgraded to a WebSocket, several responses over one
//! connection.
//!
//! Authentication happened before the upgrade (the API-key layer wraps this route, so a missing
//! key is a plain 401), and the upgrade counts among its tenant's open WebSockets (past the
//! tenant's `max_websockets`, 429). After it, each `response.create` text frame
//! ([`respgw_protocol::websocket`]) goes the way of a streaming `POST /v1/responses`: validate,
//! let the engine prepare, spawn the run, and send its events — numbered from 0 per response by
//! the same [`EventSequence`] as SSE — one JSON event per text frame. Responses run one at a
//! time, as in the reference API: a `response.create` that arrives while one is running is
//! answered with an `error` frame (`response_already_in_flight`) and the running one goes on. A
//! frame that cannot start a response gets an `error` frame with the HTTP status it would have
//! had; the connection stays usable. A client that goes away mid-response drops the event
//! channel, which cancels the run and its upstream call, as for SSE.
//!
//! A connection with no response in flight is *idle*: it is closed (1001) once it has been idle
//! for the idle timeout, and the connection cap may evict it to admit another client (1013; see
//! `crate::connections`); one with a response in flight is neither. The gateway pings every
//! connection at an interval, and closes one whose peer has not answered a ping by the next.
//!
//! Connection-local state: the conversation of the connection's last finished `store:false`
//! response stays in memory on the connection, so the next `response.create` may continue from it
//! with `previous_response_id` although no store holds it (Codex in WebSocket mode always sends
//! `store:false`). Only the most recent such response is kept, within bounds per connection and
//! per worker ([`local_state`]); other ids are looked up in the store.
//!
//! A plain `GET /v1/responses` without an upgrade is answered as before this route existed: 405,
//! with `Allow: GET, POST`.
//!
//! The HTTP server stops tracking a connection once it is upgraded, so draining is done here:
//! [`WebSocketDrain`] (installed by `serve_on`) tells connections the process is stopping; an idle
//! one closes at once with 1001 (going away), a busy one after its response's terminal event, and
//! `serve_on` waits for them within the drain timeout.

mod local_state;

use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use respgw_engine::{Engine, LocalConversation};
use respgw_protocol::events::numbered_json;
use respgw_protocol::websocket::{error_frame, parse_response_create};
use respgw_protocol::{ApiError, ErrorType, ResponseEvent};
use respgw_telemetry::SseStreamGuard;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::auth::{Admission, StreamSlot, Tenant, WebSocketSlot};
use crate::connections::{ConnectionEntry, UpgradedConnection};
use crate::error::HttpError;
use crate::event_sequence::EventSequence;
use crate::limits::Open;
use crate::options::WebSocketLimits;
use crate::request_id::RequestId;
use local_state::ConnectionState;
pub(crate) use local_state::LocalStates;

/// The route, as the metrics and error messages name it.
pub const ROUTE: &str = "/v1/responses";
/// The methods the route serves: `POST`, and `GET` with a WebSocket upgrade (a plain `GET` or
/// `HEAD` is a 405).
pub const ROUTE_ALLOW: &str = "GET, POST";
/// The `method` label of responses created over a WebSocket: one per `response.create`.
const METRICS_METHOD: &str = "WEBSOCKET";
/// Events buffered between the run and a slow client before the run waits.
const EVENT_BUFFER: usize = 64;
/// Events sent with one flush at most.
const MAX_BATCH_EVENTS: usize = 256;
/// Longest wait to write the close frame: a peer that reads nothing does not hold the connection.
const CLOSE_WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the WebSocket route needs.
#[derive(Clone)]
pub struct WebSocketMode {
    pub engine: Arc<Engine>,
    /// Largest frame (message) accepted, in bytes: the HTTP body limit.
    pub max_frame_bytes: usize,
    /// Idle timeout, ping interval and the bounds of connection-local state.
    pub limits: WebSocketLimits,
    /// The connection-local state of every connection of this worker.
    pub local_states: Arc<LocalStates>,
}

/// How `serve_on` drains WebSocket connections: it raises `draining`, then waits until every
/// clone of `open` (one per connection, one in the router) is gone.
#[derive(Clone)]
pub struct WebSocketDrain {
    /// Becomes `true` when draining starts.
    pub draining: watch::Receiver<bool>,
    /// Never sent on: each holder counts as open until it drops its clone.
    #[expect(dead_code, reason = "held for its drop, which is what serve_on waits for")]
    pub open: mpsc::Sender<()>,
}

/// `GET /v1/responses`: upgrade to WebSocket mode, or 405 for a plain GET.
#[expect(clippy::too_many_arguments, reason = "an axum handler takes each extractor as an argument")]
pub async fn upgrade(
    State(mode): State<WebSocketMode>,
    tenant: Tenant,
    admission: Admission,
    RequestId(request_id): RequestId,
    drain: Option<Extension<WebSocketDrain>>,
    connection: Option<Extension<ConnectionEntry>>,
    method: Method,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(_) if !headers.contains_key(header::UPGRADE) => {
            let mut error = ApiError::method_not_allowed(method.as_str(), ROUTE);
            error.message = format!(
                "{method} {ROUTE} only opens a WebSocket ('Upgrade: websocket'); create responses with POST {ROUTE}."
            );
            let mut response = HttpError(error).into_response();
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(ROUTE_ALLOW));
            return response;
        }
        Err(rejection) => {
            let message = format!("Cannot open a WebSocket: {}", rejection.body_text());
            return HttpError(ApiError::invalid_body(message)).into_response();
        }
    };
    // Admitted with the WebSocket it opens, before the upgrade.
    let tenant_slot = match admission.admit(Some(Open::WebSocket)).await {
        Ok(slot) => slot,
        Err(limited) => return limited.into_response(),
    };
    let place = connection.map(|Extension(connection)| connection.upgrade());
    // The connection's log lines and upstream calls stay in the upgrade request's span.
    let span = tracing::Span::current();
    upgrade
        .max_message_size(mode.max_frame_bytes)
        .max_frame_size(mode.max_frame_bytes)
        .on_failed_upgrade(|e| tracing::debug!(error = %e, "WebSocket upgrade failed"))
        .on_upgrade(move |socket| {
            let drain = drain.map(|Extension(drain)| drain);
            let held = Held { place, _tenant_slot: tenant_slot, drain };
            Connection::new(mode, tenant, request_id, held).serve(socket).instrument(span)
        })
}

/// What a connection holds for as long as it is open.
struct Held {
    /// Its entry in the worker's connection book (none when served without one, as in tests of
    /// the router alone).
    place: Option<UpgradedConnection>,
    /// Counts it among its tenant's open WebSockets (when the tenant has a limit on them).
    _tenant_slot: Option<WebSocketSlot>,
    /// The process's drain signal, and this connection's share of the open count.
    drain: Option<WebSocketDrain>,
}

/// One WebSocket connection.
struct Connection {
    mode: WebSocketMode,
    /// The upgrade request's tenant: every response on the connection is run for it.
    tenant: Tenant,
    /// The upgrade request's id; response `n` on the connection is `<id>.<n>` upstream.
    request_id: String,
    /// Responses started so far.
    started: u64,
    /// The response whose events are being sent, if any.
    running: Option<RunningResponse>,
    held: Held,
    /// The connection is to close, with this frame, once no response runs (the process is
    /// stopping, the connection was evicted or idle too long).
    closing: Option<CloseFrame>,
    /// When the connection last became idle, or last got a request from its client.
    idle_since: Instant,
    /// A ping was sent and nothing has come from the client since.
    awaiting_pong: bool,
    /// The last finished `store:false` response's conversation (connection-local state).
    local: ConnectionState,
}

/// A response in progress on a connection.
struct RunningResponse {
    events: EventSequence,
    /// The run's task, which gives back its conversation when it ends (a `store:false` response
    /// that finished).
    conversation: JoinHandle<Option<LocalConversation>>,
    /// Counts the response as an open stream, and times it, until it ends or the client leaves.
    _open_stream: SseStreamGuard,
    /// Counts it among its tenant's open streams, as long (when the tenant has a limit on them).
    _slot: Option<StreamSlot>,
}

/// Why the connection loop stops.
struct ClientGone;

/// What woke the connection loop.
enum Input {
    /// A frame from the client, its departure (`None`) or a read error.
    Client(Option<Result<Message, axum::Error>>),
    /// The next event of the running response (`None`: it has ended).
    Event(Option<(ResponseEvent, u64)>),
    /// The process started draining.
    Draining,
    /// The connection cap evicted the connection to make room.
    Evicted,
    /// The connection has been idle for the idle timeout.
    IdleTimeout,
    /// Time to ping the client.
    PingDue,
}

impl Connection {
    fn new(mode: WebSocketMode, tenant: Tenant, request_id: String, held: Held) -> Self {
        let local = mode.local_states.connection();
        Connection {
            mode,
            tenant,
            request_id,
            started: 0,
            running: None,
            held,
            closing: None,
            idle_since: Instant::now(),
            awaiting_pong: false,
            local,
        }
    }

    async fn serve(mut self, socket: WebSocket) {
        let (mut sender, mut receiver) = socket.split();
        self.became_idle();
        let ping_interval = self.mode.limits.ping_interval;
        let mut pings = tokio::time::interval_at(Instant::now() + ping_interval, ping_interval);
        pings.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let idle_until = self.idle_since + self.mode.limits.idle_timeout;
            let idle = self.running.is_none();
            let input = tokio::select! {
                message = receiver.next() => Input::Client(message),
                event = next_event(&mut self.running) => Input::Event(event),
                () = until_draining(&mut self.held.drain), if self.closing.is_none() => Input::Draining,
                () = until_evicted(self.held.place.as_ref()), if self.closing.is_none() => Input::Evicted,
                () = tokio::time::sleep_until(idle_until), if idle && self.closing.is_none() => Input::IdleTimeout,
                _ = pings.tick() => Input::PingDue,
            };
            if matches!(input, Input::Client(Some(Ok(_)))) {
                self.awaiting_pong = false;
            }
            let step = match input {
                Input::Client(Some(Ok(Message::Text(text)))) => self.on_frame(text.as_bytes(), &mut sender).await,
                Input::Client(Some(Ok(Message::Binary(bytes)))) => self.on_frame(&bytes, &mut sender).await,
                // Pings are answered by the WebSocket layer itself.
                Input::Client(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => Ok(()),
                Input::Client(Some(Ok(Message::Close(_))) | None) => Err(ClientGone),
                Input::Client(Some(Err(e))) => {
                    tracing::debug!(error = %e, "WebSocket read failed");
                    Err(ClientGone)
                }
                Input::Event(Some(first)) => self.send_events(first, &mut sender).await,
                Input::Event(None) => {
                    self.settle().await;
                    Ok(())
                }
                Input::Draining => {
                    self.closing = Some(close_frame(close_code::AWAY, "The gateway is shutting down."));
                    Ok(())
                }
                Input::Evicted => {
                    tracing::debug!("idle WebSocket evicted to make room for another connection");
                    self.closing = Some(evicted_frame());
                    Ok(())
                }
                Input::IdleTimeout => {
                    let seconds = self.mode.limits.idle_timeout.as_secs_f64();
                    tracing::debug!(idle_timeout_s = seconds, "idle WebSocket timed out");
                    let reason = format!("Idle for {seconds} s with no response in flight; reconnect to continue.");
                    self.closing = Some(close_frame(close_code::AWAY, reason));
                    Ok(())
                }
                Input::PingDue => self.ping(&mut sender).await,
            };
            if step.is_err() {
                // Dropping the running response closes its channel: the run stops and its
                // upstream call is cancelled.
                if self.running.take().is_some() {
                    tracing::info!("WebSocket client left mid-response; the response is cancelled");
                }
                return;
            }
            if self.running.is_none()
                && let Some(frame) = self.closing.take()
            {
                let close = sender.send(Message::Close(Some(frame)));
                let _ = tokio::time::timeout(CLOSE_WRITE_TIMEOUT, close).await;
                return;
            }
        }
    }

    /// Ping the client, unless it has not answered the last ping: then it is taken for gone.
    async fn ping(&mut self, sender: &mut Sender) -> Result<(), ClientGone> {
        if self.awaiting_pong {
            tracing::info!("WebSocket client did not answer a ping; closing the connection");
            if self.running.take().is_some() {
                tracing::info!("the response in flight on it is cancelled");
            }
            self.closing = Some(close_frame(close_code::AWAY, "No answer to ping."));
            return Ok(());
        }
        self.awaiting_pong = true;
        let ping = sender.send(Message::Ping(Bytes::new()));
        match tokio::time::timeout(self.mode.limits.ping_interval, ping).await {
            Ok(sent) => sent.map_err(write_failed),
            Err(_) => {
                tracing::info!("WebSocket client reads nothing; closing the connection");
                Err(ClientGone)
            }
        }
    }

    /// Nothing is in flight on the connection from now: its idle time starts, and it may be
    /// evicted.
    fn became_idle(&mut self) {
        self.idle_since = Instant::now();
        if let Some(place) = &self.held.place {
            place.idle();
        }
    }

    /// Send `first` and the events of the running response that become ready while the other
    /// tasks run ([`EventSequence::gather_ready`]), up to [`MAX_BATCH_EVENTS`], as one flush.
    async fn send_events(&mut self, first: (ResponseEvent, u64), sender: &mut Sender) -> Result<(), ClientGone> {
        let mut batch = vec![first];
        if let Some(running) = self.running.as_mut() {
            running
                .events
                .gather_ready(|event| {
                    batch.push(event);
                    batch.len() < MAX_BATCH_EVENTS
                })
                .await;
        }
        for event in batch {
            self.feed_event(event, sender).await?;
        }
        sender.flush().await.map_err(write_failed)
    }

    /// Queue one event's text frame on the connection (written at the next flush, or sooner
    /// when the write buffer fills).
    async fn feed_event(
        &mut self,
        (event, number): (ResponseEvent, u64),
        sender: &mut Sender,
    ) -> Result<(), ClientGone> {
        if self.running.as_ref().is_some_and(|r| r.events.is_finished()) {
            self.settle().await;
        }
        match numbered_json(&event, number) {
            Ok(json) => sender.feed(Message::Text(json.into())).await.map_err(write_failed),
            Err(e) => {
                tracing::error!(error = %e, kind = event.kind(), "could not serialize an event");
                Ok(())
            }
        }
    }

    /// The running response has sent its terminal event: keep its conversation if it is one to
    /// continue from. The run returns right after its terminal event, so this waits briefly.
    async fn settle(&mut self) {
        let Some(running) = self.running.take() else { return };
        if let Ok(Some(conversation)) = running.conversation.await {
            self.local.keep(conversation);
        }
        self.became_idle();
    }

    /// A client frame: start a response, or answer with an `error` frame.
    async fn on_frame(&mut self, frame: &[u8], sender: &mut Sender) -> Result<(), ClientGone> {
        let was_idle = self.running.is_none();
        if was_idle
            && let Some(place) = &self.held.place
            && place.busy().is_err()
        {
            // Evicted a moment ago: the frame starts nothing, and the connection closes.
            self.closing = Some(evicted_frame());
            return Ok(());
        }
        let metrics = self.mode.engine.metrics().clone();
        let started_at = std::time::Instant::now();
        let in_flight = metrics.in_flight();
        let outcome = if was_idle { self.start(frame).await } else { Err(already_in_flight()) };
        drop(in_flight);
        if self.running.is_none() {
            // A frame that started nothing: the connection is idle again, counted from now.
            self.became_idle();
        }
        let status = outcome.as_ref().map_or_else(|e| e.status, |()| 200);
        metrics.record_request(METRICS_METHOD, ROUTE, status, started_at.elapsed());
        metrics.tenant_request(self.tenant.name(), status);
        match outcome {
            Ok(()) => Ok(()),
            Err(error) => send_text(sender, error_frame(&error)).await,
        }
    }

    /// Validate and prepare the frame's request, then let the engine spawn its run.
    async fn start(&mut self, frame: &[u8]) -> Result<(), ApiError> {
        let engine = &self.mode.engine;
        // Each `response.create` counts against the tenant's limits like a streamed request over
        // HTTP: admitted with the stream it opens, in one step.
        let slot = self.tenant.admit(Some(Open::Stream)).await.map_err(|limited| limited.error)?.slot;
        let request = parse_response_create(frame)?.validate(&engine.capabilities())?;
        if request.background {
            // A WebSocket response lives as long as its connection; a detached one is created
            // over HTTP.
            return Err(ApiError::invalid(
                "background",
                "Background responses are created with POST /v1/responses, not over a WebSocket.",
            ));
        }
        self.started += 1;
        let request_id = format!("{}.{}", self.request_id, self.started);
        let local = self.local.current();
        let headers = vec![("x-request-id", request_id)];
        let prepared = engine.prepare_continuing(self.tenant.name(), request, headers, local.as_deref()).await?;
        drop(local);
        let open_stream = engine.metrics().sse_stream(ROUTE);
        let (events, conversation) = prepared.spawn_keeping_conversation(EVENT_BUFFER);
        self.running = Some(RunningResponse {
            events: EventSequence::new(events),
            conversation,
            _open_stream: open_stream,
            _slot: slot,
        });
        Ok(())
    }
}

type Sender = futures::stream::SplitSink<WebSocket, Message>;

async fn send_text(sender: &mut Sender, text: String) -> Result<(), ClientGone> {
    sender.send(Message::Text(text.into())).await.map_err(write_failed)
}

fn write_failed(e: axum::Error) -> ClientGone {
    tracing::debug!(error = %e, "WebSocket write failed");
    ClientGone
}

/// The next event of the running response; pending forever when none runs (so `select!` waits
/// for the client alone), `None` when the running one has ended.
async fn next_event(running: &mut Option<RunningResponse>) -> Option<(ResponseEvent, u64)> {
    match running {
        Some(running) => running.events.next().await,
        None => std::future::pending().await,
    }
}

/// Resolves when the process starts draining; never without a drain signal.
async fn until_draining(drain: &mut Option<WebSocketDrain>) {
    let Some(drain) = drain else { return std::future::pending().await };
    if drain.draining.wait_for(|draining| *draining).await.is_err() {
        // The server is gone without draining: nothing will say so again.
        std::future::pending::<()>().await;
    }
}

/// Resolves once the connection is evicted; never without a connection book.
async fn until_evicted(place: Option<&UpgradedConnection>) {
    match place {
        Some(place) => place.evicted().await,
        None => std::future::pending().await,
    }
}

fn close_frame(code: u16, reason: impl Into<String>) -> CloseFrame {
    CloseFrame { code, reason: reason.into().into() }
}

/// How an evicted connection is closed: 1013, try again later.
fn evicted_frame() -> CloseFrame {
    close_frame(
        close_code::AGAIN,
        "The gateway is at its connection limit: this idle WebSocket was closed to make room; reconnect to continue.",
    )
}

/// A second `response.create` while one runs: responses on a connection are sequential.
fn already_in_flight() -> ApiError {
    ApiError {
        status: 409,
        error_type: ErrorType::InvalidRequestError,
        message: "A response is already in progress on this connection; send the next 'response.create' after its \
                  terminal event, or open another connection."
            .into(),
        param: None,
        code: Some("response_already_in_flight".into()),
    }
}
