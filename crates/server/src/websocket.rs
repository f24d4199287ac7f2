//! WebSocket mode: `GET /v1/responses` upgraded to a WebSocket, several responses over one
//! connection.
//!
//! Authentication happened before the upgrade (the API-key layer wraps this route, so a missing
//! key is a plain 401). After it, each `response.create` text frame
//! ([`respgw_protocol::websocket`]) goes the way of a streaming `POST /v1/responses`: validate,
//! let the engine prepare, spawn the run, and send its events — numbered from 0 per response by
//! the same [`EventSequence`] as SSE — one JSON event per text frame. Responses run one at a
//! time, as in the reference API: a `response.create` that arrives while one is running is
//! answered with an `error` frame (`response_already_in_flight`) and the running one goes on. A
//! frame that cannot start a response gets an `error` frame with the HTTP status it would have
//! had; the connection stays usable. A client that goes away mid-response drops the event
//! channel, which cancels the run and its upstream call, as for SSE.
//!
//! Connection-local state: the conversation of the connection's last finished `store:false`
//! response stays in memory on the connection, so the next `response.create` may continue from it
//! with `previous_response_id` although no store holds it (Codex in WebSocket mode always sends
//! `store:false`). Only the most recent such response is kept; other ids are looked up in the store.
//!
//! A plain `GET /v1/responses` without an upgrade is answered as before this route existed: 405,
//! with `Allow: GET, POST`.
//!
//! The HTTP server stops tracking a connection once it is upgraded, so draining is done here:
//! [`WebSocketDrain`] (installed by `serve_on`) tells connections the process is stopping; an idle
//! one closes at once with 1001 (going away), a busy one after its response's terminal event, and
//! `serve_on` waits for them within the drain timeout.

use std::sync::Arc;
use std::time::Instant;

use axum::Extension;
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
use tracing::Instrument;

use crate::auth::{StreamSlot, Tenant};
use crate::error::HttpError;
use crate::event_sequence::EventSequence;
use crate::request_id::RequestId;

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

/// What the WebSocket route needs.
#[derive(Clone)]
pub struct WebSocketMode {
    pub engine: Arc<Engine>,
    /// Largest frame (message) accepted, in bytes: the HTTP body limit.
    pub max_frame_bytes: usize,
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
pub async fn upgrade(
    State(mode): State<WebSocketMode>,
    tenant: Tenant,
    RequestId(request_id): RequestId,
    drain: Option<Extension<WebSocketDrain>>,
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
    // The connection's log lines and upstream calls stay in the upgrade request's span.
    let span = tracing::Span::current();
    upgrade
        .max_message_size(mode.max_frame_bytes)
        .max_frame_size(mode.max_frame_bytes)
        .on_failed_upgrade(|e| tracing::debug!(error = %e, "WebSocket upgrade failed"))
        .on_upgrade(move |socket| {
            let drain = drain.map(|Extension(drain)| drain);
            Connection::new(mode, tenant, request_id, drain).serve(socket).instrument(span)
        })
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
    /// The process's drain signal, and this connection's share of the open count.
    drain: Option<WebSocketDrain>,
    /// The process is stopping: close once no response runs.
    going_away: bool,
    /// The last finished `store:false` response's conversation (connection-local state).
    local: Option<LocalConversation>,
}

/// A response in progress on a connection.
struct RunningResponse {
    events: EventSequence,
    /// The run's task, which gives back its conversation when it ends (a `store:false` response
    /// that finished).
    conversation: JoinHandle<Option<LocalConversation>>,
    /// Counts the response as an open stream, and times it, until it ends or the client leaves.
    _open_stream: SseStreamGuard,
    /// Counts it among its tenant's open streams, as long.
    _slot: StreamSlot,
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
}

impl Connection {
    fn new(mode: WebSocketMode, tenant: Tenant, request_id: String, drain: Option<WebSocketDrain>) -> Self {
        Connection { mode, tenant, request_id, started: 0, running: None, drain, going_away: false, local: None }
    }

    async fn serve(mut self, socket: WebSocket) {
        let (mut sender, mut receiver) = socket.split();
        loop {
            let input = tokio::select! {
                message = receiver.next() => Input::Client(message),
                event = next_event(&mut self.running) => Input::Event(event),
                () = until_draining(&mut self.drain), if !self.going_away => Input::Draining,
            };
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
                    self.going_away = true;
                    Ok(())
                }
            };
            if step.is_ok() && self.going_away && self.running.is_none() {
                let close = CloseFrame { code: close_code::AWAY, reason: "The gateway is shutting down.".into() };
                let _ = sender.send(Message::Close(Some(close))).await;
                return;
            }
            if step.is_err() {
                // Dropping the running response closes its channel: the run stops and its
                // upstream call is cancelled.
                if self.running.take().is_some() {
                    tracing::info!("WebSocket client left mid-response; the response is cancelled");
                }
                return;
            }
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
        if let Some(running) = self.running.take()
            && let Ok(Some(conversation)) = running.conversation.await
        {
            self.local = Some(conversation);
        }
    }

    /// A client frame: start a response, or answer with an `error` frame.
    async fn on_frame(&mut self, frame: &[u8], sender: &mut Sender) -> Result<(), ClientGone> {
        let metrics = self.mode.engine.metrics().clone();
        let started_at = Instant::now();
        let in_flight = metrics.in_flight();
        let outcome = if self.running.is_some() { Err(already_in_flight()) } else { self.start(frame).await };
        drop(in_flight);
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
        // Each `response.create` counts against the tenant's limits like a request over HTTP.
        self.tenant.take_request().map_err(|limited| limited.error)?;
        let slot = self.tenant.open_stream().map_err(|limited| limited.error)?;
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
        let local = self.local.as_ref();
        let prepared =
            engine.prepare_continuing(self.tenant.name(), request, vec![("x-request-id", request_id)], local).await?;
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
