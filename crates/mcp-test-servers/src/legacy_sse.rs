//! The legacy MCP HTTP+SSE transport (protocol 2024-11-05), server side, for testing the helper's client
//! of it. rmcp no longer ships this transport, so it is written here on top of rmcp's generic
//! sink/stream transport:
//!
//! - `GET /sse` opens an event stream per session; its first event is `endpoint` whose data is the URL to
//!   POST to (`/messages?session_id=<id>`), every further event is `message` with one JSON-RPC message;
//! - `POST /messages?session_id=<id>` takes one JSON-RPC message and answers `202 Accepted`; the reply
//!   arrives on the event stream.
//!
//! Closing the event stream ends the session.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::routing::{get, post};
use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt, stream};
use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use serde::Deserialize;

use crate::{SharedState, TestServer};

/// The open sessions: session id → the sender feeding that session's MCP server.
#[derive(Default)]
struct Sessions {
    next_id: AtomicU64,
    senders: Mutex<HashMap<String, mpsc::Sender<ClientJsonRpcMessage>>>,
}

#[derive(Clone)]
struct AppState {
    sessions: Arc<Sessions>,
    server: Arc<SharedState>,
}

/// `GET /sse` and `POST /messages`.
pub fn router(server: Arc<SharedState>) -> axum::Router {
    axum::Router::new()
        .route("/sse", get(open_stream))
        .route("/messages", post(post_message))
        .with_state(AppState { sessions: Arc::default(), server })
}

/// Removes its session when the event stream is dropped (client gone), which ends the MCP server task.
struct SessionGuard {
    sessions: Arc<Sessions>,
    id: String,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Ok(mut senders) = self.sessions.senders.lock() {
            senders.remove(&self.id);
        }
    }
}

async fn open_stream(State(app): State<AppState>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let id = format!("s{}", app.sessions.next_id.fetch_add(1, Ordering::SeqCst));
    let (to_server, from_client) = mpsc::channel::<ClientJsonRpcMessage>(16);
    let (to_client, from_server) = mpsc::channel::<ServerJsonRpcMessage>(16);
    if let Ok(mut senders) = app.sessions.senders.lock() {
        senders.insert(id.clone(), to_server);
    }
    let handler = TestServer::new(app.server.clone(), false);
    tokio::spawn(async move {
        // A client that never initializes just leaves; nothing to report.
        if let Ok(running) = handler.serve((to_client, from_client)).await {
            let _ = running.waiting().await;
        }
    });
    let guard = SessionGuard { sessions: app.sessions.clone(), id: id.clone() };
    let endpoint =
        stream::once(async move { Ok(Event::default().event("endpoint").data(format!("/messages?session_id={id}"))) });
    let messages = from_server.map(move |message| {
        let _keep_session_while_streaming = &guard;
        let data = serde_json::to_string(&message).unwrap_or_default();
        Ok(Event::default().event("message").data(data))
    });
    Sse::new(endpoint.chain(messages)).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[derive(Deserialize)]
struct SessionQuery {
    session_id: String,
}

async fn post_message(
    State(app): State<AppState>,
    Query(query): Query<SessionQuery>,
    Json(message): Json<ClientJsonRpcMessage>,
) -> StatusCode {
    let sender = app.sessions.senders.lock().ok().and_then(|senders| senders.get(&query.session_id).cloned());
    match sender {
        None => StatusCode::NOT_FOUND,
        Some(mut sender) => match sender.send(message).await {
            Ok(()) => StatusCode::ACCEPTED,
            Err(_) => StatusCode::GONE,
        },
    }
}
