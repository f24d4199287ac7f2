//! One response from start to terminal event.
//!
//! [`Engine::prepare`] does everything that can still fail with a plain HTTP error (history
//! lookup for `previous_response_id`); [`PreparedResponse::run`] then streams: `created`,
//! `in_progress`, the upstream turn's item events, persistence, and exactly one terminal event
//! (`completed`, `incomplete` or `failed`, the latter preceded by an `error` event). The store
//! write happens before the terminal event leaves, so a client that saw `completed` can always
//! continue from it.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use respgw_protocol::events::StreamError;
use respgw_protocol::ids::{IdKind, new_id};
use respgw_protocol::response::{IncompleteDetails, ResponseError};
use respgw_protocol::{ApiError, Item, ResponseEvent, ResponseObject, ResponseStatus, Usage, ValidatedRequest};
use respgw_store::{NewResponse, ResponseStore, StoreError};
use respgw_telemetry::{Metrics, ToolType};
use tokio::sync::mpsc;

use crate::chat::ChatRequest;
use crate::turn::{OutputLog, TurnEnd, TurnState};
use crate::upstream::{Upstream, UpstreamEvent};

/// Shared, process-wide engine: the upstream client, the store and the metrics it records into.
pub struct Engine {
    upstream: Upstream,
    store: Arc<dyn ResponseStore>,
    metrics: Metrics,
}

/// Where a running response sends its events.
pub enum EventSink {
    /// Non-stream requests: events are not needed, only the outcome.
    Discard,
    /// SSE requests: a bounded channel to the connection; closed when the client goes away.
    Channel(mpsc::Sender<ResponseEvent>),
}

/// The client disconnected; the run stops and nothing is stored.
#[derive(Debug)]
pub struct ClientGone;

impl EventSink {
    async fn send(&mut self, event: ResponseEvent) -> Result<(), ClientGone> {
        match self {
            EventSink::Discard => Ok(()),
            EventSink::Channel(tx) => tx.send(event).await.map_err(|_| ClientGone),
        }
    }

    async fn closed(&self) {
        match self {
            EventSink::Discard => std::future::pending().await,
            EventSink::Channel(tx) => tx.closed().await,
        }
    }
}

/// How a run ended.
#[derive(Debug)]
pub enum RunOutcome {
    /// `completed` or `incomplete`, persisted when `store` is true.
    Finished(Box<ResponseObject>),
    /// `failed`; `error` says what to tell a non-stream client.
    Failed { response: Box<ResponseObject>, error: ApiError },
    /// The client went away; the upstream call was dropped and nothing was stored.
    ClientGone,
}

/// A request whose history is resolved, ready to run.
pub struct PreparedResponse {
    engine: Arc<Engine>,
    request: ValidatedRequest,
    /// Inherited items (from `previous_response_id`) followed by this request's input.
    history: Vec<Item>,
    /// Store keys of the inherited items, so they are referenced rather than written again.
    inherited_keys: Vec<i64>,
    response: ResponseObject,
    /// Headers forwarded on upstream calls (e.g. `x-request-id`).
    upstream_headers: Vec<(&'static str, String)>,
}

fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Client-facing error for a store failure.
pub fn store_error(e: &StoreError) -> ApiError {
    match e {
        StoreError::Unavailable(detail) => ApiError::store_unavailable(detail),
        StoreError::Duplicate(_) | StoreError::Corrupt(_) | StoreError::MissingHistory(_) => {
            ApiError::internal(format!("The response store failed: {e}"))
        }
    }
}

impl Engine {
    pub fn new(upstream: Upstream, store: Arc<dyn ResponseStore>, metrics: Metrics) -> Self {
        Engine { upstream, store, metrics }
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    pub fn store(&self) -> &Arc<dyn ResponseStore> {
        &self.store
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Resolve history. Fails with 400 `previous_response_not_found` for an unknown id and 503
    /// when the store cannot be read.
    pub async fn prepare(
        self: &Arc<Self>,
        request: ValidatedRequest,
        upstream_headers: Vec<(&'static str, String)>,
    ) -> Result<PreparedResponse, ApiError> {
        let (mut history, inherited_keys) = match &request.previous_response_id {
            None => (Vec::with_capacity(request.input.len()), Vec::new()),
            Some(prev) => {
                let stored = self
                    .store
                    .conversation(prev)
                    .await
                    .map_err(|e| store_error(&e))?
                    .ok_or_else(|| ApiError::previous_response_not_found(prev))?;
                let keys = stored.iter().map(|s| s.key).collect();
                let mut items: Vec<Item> = Vec::with_capacity(stored.len() + request.input.len());
                items.extend(stored.into_iter().map(|s| s.item));
                (items, keys)
            }
        };
        history.extend(request.input.iter().cloned());
        let response = ResponseObject::in_progress(new_id(IdKind::Response), unix_now(), &request);
        Ok(PreparedResponse { engine: Arc::clone(self), request, history, inherited_keys, response, upstream_headers })
    }
}

impl PreparedResponse {
    /// The id the response will have.
    pub fn id(&self) -> &str {
        &self.response.id
    }

    /// Run to the terminal event, sending events to `sink`.
    pub async fn run(mut self, mut sink: EventSink) -> RunOutcome {
        let started = std::time::Instant::now();
        let outcome = self.run_inner(&mut sink).await;
        match &outcome {
            RunOutcome::Finished(r) => {
                tracing::info!(response_id = %r.id, status = ?r.status, elapsed_ms = started.elapsed().as_millis() as u64, "response finished")
            }
            RunOutcome::Failed { response, error } => {
                tracing::warn!(response_id = %response.id, code = ?error.code, message = %error.message, "response failed")
            }
            RunOutcome::ClientGone => {
                tracing::info!(response_id = %self.response.id, "client disconnected; response abandoned")
            }
        }
        outcome
    }

    async fn run_inner(&mut self, sink: &mut EventSink) -> RunOutcome {
        if sink.send(ResponseEvent::Created { response: self.response.clone() }).await.is_err()
            || sink.send(ResponseEvent::InProgress { response: self.response.clone() }).await.is_err()
        {
            return RunOutcome::ClientGone;
        }
        let mut log = OutputLog::default();
        let mut usage = Usage::default();
        let end = match self.stream_turn(sink, &mut log, &mut usage).await {
            Ok(end) => end,
            Err(TurnFailure::ClientGone) => return RunOutcome::ClientGone,
            Err(TurnFailure::Error(error)) => return self.fail(sink, log.items, error).await,
        };

        let response = &mut self.response;
        response.output = std::mem::take(&mut log.items);
        response.usage = Some(usage);
        match end {
            TurnEnd::Finished => {
                response.status = ResponseStatus::Completed;
                response.completed_at = Some(unix_now());
            }
            TurnEnd::Cut(reason) => {
                response.status = ResponseStatus::Incomplete;
                response.incomplete_details = Some(IncompleteDetails { reason });
            }
        }
        if self.request.store
            && let Err(e) = self.persist().await
        {
            tracing::error!(response_id = %self.response.id, error = %e, "could not store the response");
            let output = std::mem::take(&mut self.response.output);
            return self.fail(sink, output, store_error(&e)).await;
        }
        let terminal = match self.response.status {
            ResponseStatus::Incomplete => ResponseEvent::Incomplete { response: self.response.clone() },
            _ => ResponseEvent::Completed { response: self.response.clone() },
        };
        // A client that leaves now still gets its stored response; the outcome is the same.
        let _ = sink.send(terminal).await;
        RunOutcome::Finished(Box::new(self.response.clone()))
    }

    /// One upstream call, streamed into events.
    async fn stream_turn(
        &mut self,
        sink: &mut EventSink,
        log: &mut OutputLog,
        usage: &mut Usage,
    ) -> Result<TurnEnd, TurnFailure> {
        let body = ChatRequest::build(&self.request, &self.history);
        let upstream = self.engine.upstream.stream_chat(&body, &self.upstream_headers);
        let mut chunks = tokio::select! {
            r = upstream => r.map_err(|e| TurnFailure::Error(e.to_api_error()))?,
            () = sink.closed() => return Err(TurnFailure::ClientGone),
        };
        let mut state = TurnState::default();
        let mut events = Vec::new();
        loop {
            let next = tokio::select! {
                next = chunks.next() => next,
                () = sink.closed() => return Err(TurnFailure::ClientGone),
            };
            match next {
                None => break,
                Some(Ok(UpstreamEvent::Done)) => {
                    state.on_done();
                    break;
                }
                Some(Ok(UpstreamEvent::Chunk(chunk))) => state.on_chunk(chunk, log, &mut events),
                Some(Err(e)) => {
                    self.flush(sink, &mut events).await?;
                    return Err(TurnFailure::Error(e.to_api_error()));
                }
            }
            self.flush(sink, &mut events).await?;
        }
        let result = state.finish(log, &mut events);
        self.flush(sink, &mut events).await?;
        let result = result.map_err(|e| TurnFailure::Error(ApiError::upstream_unavailable(e)))?;
        if let Some(u) = &result.usage {
            usage.add(u);
        }
        for _ in &result.function_calls {
            self.engine.metrics.tool_requested(ToolType::Function);
        }
        Ok(result.end)
    }

    async fn flush(&self, sink: &mut EventSink, events: &mut Vec<ResponseEvent>) -> Result<(), TurnFailure> {
        for event in events.drain(..) {
            sink.send(event).await.map_err(|_| TurnFailure::ClientGone)?;
        }
        Ok(())
    }

    async fn persist(&self) -> Result<(), StoreError> {
        let response = serde_json::to_value(&self.response).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let status = match self.response.status {
            ResponseStatus::Incomplete => "incomplete",
            _ => "completed",
        };
        self.engine
            .store
            .save(NewResponse {
                id: self.response.id.clone(),
                previous_response_id: self.request.previous_response_id.clone(),
                model: self.request.model.clone(),
                created_at: self.response.created_at,
                status: status.to_owned(),
                response,
                inherited: self.inherited_keys.clone(),
                input: self.request.input.clone(),
                output: self.response.output.clone(),
            })
            .await
    }

    /// End with `error` + `response.failed`. Items finished before the failure stay in `output`.
    async fn fail(&mut self, sink: &mut EventSink, finished_items: Vec<Item>, error: ApiError) -> RunOutcome {
        let response = &mut self.response;
        response.status = ResponseStatus::Failed;
        response.output = finished_items;
        response.usage = None;
        response.completed_at = None;
        response.error = Some(ResponseError {
            code: error.code.clone().unwrap_or_else(|| "server_error".into()),
            message: error.message.clone(),
        });
        let stream_error = StreamError {
            error_type: error.error_type,
            code: error.code.clone(),
            message: error.message.clone(),
            param: error.param.clone(),
        };
        if sink.send(ResponseEvent::error(stream_error)).await.is_ok() {
            let _ = sink.send(ResponseEvent::Failed { response: self.response.clone() }).await;
        }
        RunOutcome::Failed { response: Box::new(self.response.clone()), error }
    }
}

enum TurnFailure {
    ClientGone,
    Error(ApiError),
}
