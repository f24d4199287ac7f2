//! One response from start to terminal event.
//!
//! [`Engine::prepare`] does everything that can still fail with a plain HTTP error: reading the
//! input's files, the history lookup for `previous_response_id` and resolving the gateway's own
//! tools (which may ask remote servers).
//! [`PreparedResponse::run`] (or [`PreparedResponse::spawn`], `spawn.rs`, for a stream) then
//! runs: `created`, `in_progress`, what the tool kinds show and run first (`tool_kinds::RunHooks`),
//! then the tool loop — one upstream turn, the gateway tools it called, the next turn — until the
//! model answers or calls a client function; then persistence, and exactly one terminal event
//! (`completed`, `incomplete`, or `failed` preceded by an `error` event). The store write
//! happens before the terminal event leaves, so a client that saw `completed` can always
//! continue from it. Under `truncation: "auto"`, a model
//! turn the upstream refuses for its context window is sent again without the oldest
//! conversation turns ([`crate::truncation`]).

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use respgw_protocol::events::StreamError;
use respgw_protocol::ids::{IdKind, TurnStamp, new_id};
use respgw_protocol::request::Truncation;
use respgw_protocol::response::{IncompleteDetails, ResponseError};
use respgw_protocol::{ApiError, Item, ResponseEvent, ResponseObject, ResponseStatus, Usage, ValidatedRequest};
use respgw_store_api::{ConversationAppend, NewResponse, StoreError};
use respgw_telemetry::TokenCounts;

use crate::chat::{ChatRequest, ToolOffer};
use crate::compaction;
use crate::engine::Engine;
use crate::files::read_input_files;
use crate::gateway_tool::{GatewayCall, GatewayTool};
use crate::offer::{ToolMenu, TurnPhase};
use crate::rounds::{OpenRound, RoundLog};
use crate::sealed::{Purpose, open_sealed_items};
use crate::sink::EventSink;
use crate::tool_kinds::{self, CallTargets, GatewayToolState, PendingGatewayCall, RunHooks, client};
use crate::truncation::TurnDropper;
use crate::turn::{OutputLog, TurnEnd, TurnResult, TurnState};
use crate::upstream::UpstreamEvent;

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

/// The whole conversation of a `store:false` response that finished, kept by a WebSocket
/// connection so the next `response.create` on it can continue from it with
/// `previous_response_id` (connection-local state, as in the reference API's WebSocket mode).
#[derive(Debug, Clone)]
pub struct LocalConversation {
    pub response_id: String,
    /// Inherited items, input and output, unfiltered: what a stored conversation would hold.
    pub items: Vec<Item>,
}

/// A request whose history and tools are resolved, ready to run.
pub struct PreparedResponse {
    engine: Arc<Engine>,
    request: ValidatedRequest,
    /// The tenant the response is run for: it owns what the response stores, and its history
    /// and tool state are only ever its own.
    owner: String,
    /// Inherited items (from `previous_response_id`) followed by this request's input.
    history: Vec<Item>,
    /// The stored response whose conversation `history` starts with: a save shares it by
    /// reference instead of writing it again.
    history_from: Option<String>,
    /// Inherited items that are in no store (continued from a [`LocalConversation`]): a
    /// `store:true` response saves them as part of its input.
    unstored_inherited: Vec<Item>,
    /// The conversation this response was created in, at the version its history was read at:
    /// the save appends to it only if nothing changed it meanwhile.
    conversation: Option<ConversationAppend>,
    response: ResponseObject,
    /// Headers forwarded on upstream calls (e.g. `x-request-id`).
    upstream_headers: Vec<(&'static str, String)>,
    gateway_tools: Vec<Arc<dyn GatewayTool>>,
    menu: ToolMenu,
    /// What the tool kinds do besides the calls of the model turns (before the first, after each).
    hooks: RunHooks,
    /// What the gateway tool kinds keep across this response's calls, each kind its own part.
    tool_state: GatewayToolState,
    /// Output items as produced, unfiltered: what history and the store keep.
    output: Vec<Item>,
    /// The turns of `history` that `truncation: "auto"` may drop, and those it dropped.
    turns: TurnDropper,
    /// The upstream calls made so far, timed from the start of the run; stored with the response.
    rounds: RoundLog,
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

impl Engine {
    /// Resolve history and tools for a response of tenant `owner`. Fails with 400
    /// `previous_response_not_found` for an id `owner` has not stored (another tenant's
    /// included), 503 when the store cannot be read, and 422 `bad_input` when a declared tool
    /// cannot be resolved.
    pub async fn prepare(
        self: &Arc<Self>,
        owner: &str,
        request: ValidatedRequest,
        upstream_headers: Vec<(&'static str, String)>,
    ) -> Result<PreparedResponse, ApiError> {
        self.prepare_continuing(owner, request, upstream_headers, None).await
    }

    /// [`Engine::prepare`], where `previous_response_id` may also name `local`, a connection's
    /// last `store:false` response, which no store holds.
    pub async fn prepare_continuing(
        self: &Arc<Self>,
        owner: &str,
        mut request: ValidatedRequest,
        upstream_headers: Vec<(&'static str, String)>,
        local: Option<&LocalConversation>,
    ) -> Result<PreparedResponse, ApiError> {
        open_sealed_items(self.seal.as_ref(), owner, &mut request.input, "input")?;
        read_input_files(self.files.as_deref(), owner, &mut request.input).await?;
        let mut unstored_inherited = Vec::new();
        let mut conversation = None;
        let (mut history, history_from) = match (&request.conversation, &request.previous_response_id) {
            (Some(id), _) => {
                let stored = self
                    .store
                    .conversation_history(owner, id)
                    .await?
                    .ok_or_else(|| ApiError::conversation_not_found(id, "conversation"))?;
                let limit = self.limits.max_conversation_items;
                if stored.items.len().saturating_add(request.input.len()) > limit {
                    return Err(ApiError::conversation_full("input", stored.items.len(), request.input.len(), limit));
                }
                conversation = Some(ConversationAppend { id: id.clone(), version: stored.version });
                let mut items = stored.items;
                items.reserve(request.input.len());
                (items, None)
            }
            (None, None) => (Vec::with_capacity(request.input.len()), None),
            (None, Some(prev)) if local.is_some_and(|l| &l.response_id == prev) => {
                let items = local.map(|l| l.items.clone()).unwrap_or_default();
                unstored_inherited.clone_from(&items);
                (items, None)
            }
            (None, Some(prev)) => {
                let mut stored = self
                    .store
                    .history(owner, prev)
                    .await?
                    .ok_or_else(|| ApiError::previous_response_not_found(prev))?;
                stored.reserve(request.input.len());
                (stored, Some(prev.clone()))
            }
        };
        if history.is_empty() && request.input.is_empty() {
            return Err(ApiError::invalid("input", "'input' must not be empty: the conversation holds no items yet."));
        }
        let input_start = history.len();
        history.extend(request.input.iter().cloned());
        let mut hooks = RunHooks::for_input(&history, input_start)?;
        let gateway_tools = hooks.tools_resolved(self.tools.resolve(&request, &history, owner).await, &request)?;
        let menu = ToolMenu::new(&request, &gateway_tools);
        menu.check_choice(&request.tool_choice)?;
        let tool_state = GatewayToolState::for_history(&history, owner);
        let response = ResponseObject::in_progress(new_id(IdKind::Response), unix_now(), &request);
        let turns = match request.truncation {
            Truncation::Auto => TurnDropper::new(&history, self.limits.max_tool_output_bytes),
            Truncation::Disabled => TurnDropper::default(),
        };
        Ok(PreparedResponse {
            engine: Arc::clone(self),
            request,
            owner: owner.to_owned(),
            history,
            history_from,
            unstored_inherited,
            conversation,
            response,
            upstream_headers,
            gateway_tools,
            menu,
            hooks,
            tool_state,
            output: Vec::new(),
            turns,
            rounds: RoundLog::start(),
        })
    }
}

/// Why a turn or tool run stopped the response early.
pub(crate) enum Stop {
    ClientGone,
    Error(ApiError),
}

impl PreparedResponse {
    /// The id the response will have.
    pub fn id(&self) -> &str {
        &self.response.id
    }

    /// The tenant it runs for.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// The chat request of the first model turn, as the run sends it (no turn dropped).
    pub(crate) fn first_turn_request(&self) -> serde_json::Value {
        let offer = self.menu.offer(&self.request.tool_choice, TurnPhase::First);
        ChatRequest::build(&self.request, &self.history, &offer, self.engine.limits.max_tool_output_bytes)
    }

    /// Headers forwarded on this response's upstream calls.
    pub(crate) fn upstream_headers(&self) -> &[(&'static str, String)] {
        &self.upstream_headers
    }

    /// The response as it stands before it runs (`in_progress`, no output).
    pub(crate) fn response(&self) -> &ResponseObject {
        &self.response
    }

    /// The response as the run left it, for ending a run that panicked.
    pub(crate) fn response_mut(&mut self) -> &mut ResponseObject {
        &mut self.response
    }

    /// Run to the outcome, for a non-stream request (no events). A streaming request runs on a
    /// task of its own instead: [`PreparedResponse::spawn`].
    pub async fn run(mut self) -> RunOutcome {
        self.run_to_end(&mut EventSink::Discard, false).await.0
    }

    /// Run, sending events to `sink`; when `keep_conversation` is set, also give back the
    /// conversation of a `store:false` response that finished (`completed` or `incomplete`), for
    /// a connection to continue from. Borrows the response rather than taking it, so that the
    /// run's future holds it once, in its task's caller.
    pub(crate) async fn run_to_end(
        &mut self,
        sink: &mut EventSink,
        keep_conversation: bool,
    ) -> (RunOutcome, Option<LocalConversation>) {
        let keep = keep_conversation && !self.request.store;
        let mut items = Vec::new();
        let outcome = self.run_observed(sink, keep.then_some(&mut items)).await;
        let conversation = match &outcome {
            RunOutcome::Finished(response) if keep => {
                Some(LocalConversation { response_id: response.id.clone(), items })
            }
            _ => None,
        };
        (outcome, conversation)
    }

    /// Run; when `conversation` is given, fill it with the history followed by the output.
    async fn run_observed(&mut self, sink: &mut EventSink, conversation: Option<&mut Vec<Item>>) -> RunOutcome {
        let started = Instant::now();
        let outcome = self.run_inner(sink).await;
        match &outcome {
            RunOutcome::Finished(r) => {
                tracing::info!(response_id = %r.id, status = ?r.status, elapsed_ms = started.elapsed().as_millis() as u64, "response finished")
            }
            RunOutcome::Failed { response, error } => {
                tracing::warn!(response_id = %response.id, code = ?error.code, message = %error.message, "response failed")
            }
            RunOutcome::ClientGone => tracing::info!(response_id = %self.response.id, "{}", sink.why_stopped()),
        }
        if let Some(conversation) = conversation {
            conversation.append(&mut self.history);
            conversation.append(&mut self.output);
        }
        outcome
    }

    async fn run_inner(&mut self, sink: &mut EventSink) -> RunOutcome {
        // A background run's `response.created` was logged when it was accepted; a sink that
        // discards events is sent none of these.
        let announced = matches!(sink, EventSink::Background(_)) || !sink.wants_events();
        if (!announced
            && sink.send(ResponseEvent::Created { response: Box::new(self.response.clone()) }).await.is_err())
            || (sink.wants_events()
                && sink.send(ResponseEvent::InProgress { response: Box::new(self.response.clone()) }).await.is_err())
        {
            return RunOutcome::ClientGone;
        }
        self.rounds = RoundLog::start();
        let mut log = OutputLog::default();
        let mut usage = Usage::default();
        let end = match self.tool_loop(sink, &mut log, &mut usage).await {
            Ok(end) => end,
            Err(Stop::ClientGone) => return RunOutcome::ClientGone,
            Err(Stop::Error(error)) => {
                self.output = std::mem::take(&mut log.items);
                return self.fail(sink, error).await;
            }
        };

        self.output = std::mem::take(&mut log.items);
        let presented: Vec<Item> = self.output.iter().map(|i| self.present(i)).collect();
        // Every upstream call of the loop is in `usage`: what the response reports is what the
        // tenant is counted for.
        let counts = TokenCounts {
            input: usage.input_tokens,
            output: usage.output_tokens,
            cached: usage.input_tokens_details.cached_tokens,
            reasoning: usage.output_tokens_details.reasoning_tokens,
        };
        self.engine.metrics.tokens(&self.owner, &self.request.model, counts);
        let response = &mut self.response;
        response.output = presented;
        response.usage = Some(usage);
        match end {
            TurnEnd::Finished => {
                response.status = ResponseStatus::Completed;
                response.completed_at = Some(unix_now());
            }
            TurnEnd::StopSequence(stop) => {
                response.status = ResponseStatus::Completed;
                response.completed_at = Some(unix_now());
                response.stop_sequence = Some(stop);
            }
            TurnEnd::Cut(reason) => {
                response.status = ResponseStatus::Incomplete;
                response.incomplete_details = Some(IncompleteDetails { reason });
            }
        }
        if self.request.store
            && let Err(e) = self.persist(sink).await
        {
            tracing::error!(response_id = %self.response.id, error = %e, "could not store the response");
            let error = match (&e, &self.history_from) {
                // The response it continues was deleted while this one ran: the client's doing.
                (StoreError::MissingHistory(_), Some(previous)) => ApiError::previous_response_not_found(previous),
                _ => ApiError::from(e),
            };
            return self.fail(sink, error).await;
        }
        if sink.wants_events() {
            let terminal = match self.response.status {
                ResponseStatus::Incomplete => ResponseEvent::Incomplete { response: Box::new(self.response.clone()) },
                _ => ResponseEvent::Completed { response: Box::new(self.response.clone()) },
            };
            // A client that leaves now still gets its stored response; the outcome is the same.
            let _ = sink.send(terminal).await;
        }
        RunOutcome::Finished(Box::new(self.response.clone()))
    }

    /// What the tool kinds show and run first, then model turns and the gateway tools they call,
    /// until the model is done.
    async fn tool_loop(
        &mut self,
        sink: &mut EventSink,
        log: &mut OutputLog,
        usage: &mut Usage,
    ) -> Result<TurnEnd, Stop> {
        let mut events = Vec::new();
        while let Some(call) = self.hooks.before_first_turn(&self.request, &self.engine.metrics, log, &mut events) {
            self.flush(sink, log, &mut events).await?;
            self.run_gateway_call(sink, log, call).await?;
        }
        self.flush(sink, log, &mut events).await?;
        let targets = CallTargets::new(&self.request, &self.gateway_tools);
        let mut phase = TurnPhase::First;
        let mut previous_turn = None;
        // At most one compaction per response: once compacted, what is left is what it kept.
        let mut compacted = false;
        let max_turns = self.engine.limits.max_tool_rounds.max(1) + 1;
        for turn in 1..=max_turns {
            let phase_now = if turn == max_turns { TurnPhase::Last } else { phase };
            let offer = self.menu.offer(&self.request.tool_choice, phase_now);
            if !compacted && self.over_compact_threshold(log, &offer) {
                let (engine, request, headers) = (&self.engine, &self.request, &self.upstream_headers);
                let owner = &self.owner;
                let compaction =
                    compaction::compact_in_response(engine, owner, request, &self.history, headers, sink, log).await?;
                self.engine.charge_tokens(&self.owner, &compaction).await;
                usage.add(&compaction);
                compacted = true;
            }
            let this_turn = TurnStamp::after(previous_turn);
            previous_turn = Some(this_turn);
            let mut round = self.rounds.begin(log.items.len());
            let result = self.stream_turn(sink, log, &offer, this_turn, targets.clone(), &mut round).await?;
            if let Some(u) = &result.usage {
                self.engine.charge_tokens(&self.owner, u).await;
                usage.add(u);
            }
            self.count_requested(&result);
            let TurnResult { end, usage: turn_usage, client_calls, gateway_calls, held_calls } = result;
            let runs_tools = !matches!(end, TurnEnd::Cut(_)) && !gateway_calls.is_empty();
            if runs_tools {
                for call in gateway_calls {
                    let started = Instant::now();
                    self.run_gateway_call(sink, log, call).await?;
                    round.tool_ran(started.elapsed());
                }
            }
            self.rounds.end(round, turn_usage.as_ref(), &log.items);
            if !runs_tools {
                return Ok(end);
            }
            if !client_calls.is_empty() || !held_calls.is_empty() {
                // The client has to run its functions, or approve calls, before the model can go on.
                return Ok(TurnEnd::Finished);
            }
            phase = TurnPhase::AfterToolUse;
        }
        Ok(TurnEnd::Finished)
    }

    /// Whether the request asked for compaction (`context_management`) and the next turn's
    /// request is estimated at its threshold or more ([`compaction::estimate_tokens`]).
    fn over_compact_threshold(&self, log: &OutputLog, offer: &ToolOffer) -> bool {
        let Some(threshold) = self.request.compact_threshold else { return false };
        let history = self.history.iter().chain(&log.items);
        let body = ChatRequest::build(&self.request, history, offer, self.engine.limits.max_tool_output_bytes);
        compaction::estimate_tokens(&body) >= threshold
    }

    fn count_requested(&self, result: &TurnResult) {
        let metrics = &self.engine.metrics;
        for _ in &result.client_calls {
            metrics.tool_requested(client::TOOL_TYPE);
        }
        for call in &result.gateway_calls {
            metrics.tool_requested(call.tool_type());
        }
        self.hooks.after_turn(&self.request, &result.held_calls, metrics);
    }

    /// One upstream call (the model turn `turn`), streamed into events; its chunks' arrival is
    /// timed on `round`.
    async fn stream_turn(
        &mut self,
        sink: &mut EventSink,
        log: &mut OutputLog,
        offer: &ToolOffer,
        turn: TurnStamp,
        targets: CallTargets,
        round: &mut OpenRound,
    ) -> Result<TurnResult, Stop> {
        let mut chunks = self.open_turn(sink, log, offer).await?;
        let mut state = TurnState::new(turn, targets, self.tool_state.clone());
        let mut events = Vec::new();
        loop {
            let next = tokio::select! {
                next = chunks.next() => next,
                () = sink.closed() => return Err(Stop::ClientGone),
            };
            match next {
                None => break,
                Some(Ok(UpstreamEvent::Done)) => {
                    round.chunk_arrived();
                    state.on_done();
                    break;
                }
                Some(Ok(UpstreamEvent::Chunk(chunk))) => {
                    round.chunk_arrived();
                    state.on_chunk(chunk, log, &mut events);
                }
                Some(Err(e)) => {
                    self.flush(sink, log, &mut events).await?;
                    return Err(Stop::Error(e.to_api_error()));
                }
            }
            self.flush(sink, log, &mut events).await?;
        }
        let result = state.finish(log, &mut events);
        self.flush(sink, log, &mut events).await?;
        result.map_err(|e| Stop::Error(ApiError::upstream_unavailable(e)))
    }

    /// Start the upstream call of one model turn. With `truncation: "auto"`, a context-window
    /// overflow drops the oldest turns and the call is made again (see [`crate::truncation`]).
    async fn open_turn(
        &mut self,
        sink: &mut EventSink,
        log: &OutputLog,
        offer: &ToolOffer,
    ) -> Result<crate::upstream::ChunkStream, Stop> {
        let mut attempt = 0;
        loop {
            let history = self.turns.kept(&self.history).chain(&log.items);
            let body = ChatRequest::build(&self.request, history, offer, self.engine.limits.max_tool_output_bytes);
            let upstream = self.engine.upstream.stream_chat(&body, &self.upstream_headers);
            let error = tokio::select! {
                r = upstream => match r {
                    Ok(chunks) => return Ok(chunks),
                    Err(e) => e,
                },
                () = sink.closed() => return Err(Stop::ClientGone),
            };
            let overflow = match error.context_overflow() {
                Some(overflow) if self.request.truncation == Truncation::Auto => overflow,
                _ => return Err(Stop::Error(error.to_api_error())),
            };
            self.turns.drop_more(&overflow, body.to_string().len(), attempt).map_err(Stop::Error)?;
            self.response.truncation_details = self.turns.details();
            if let Some(details) = &self.response.truncation_details {
                tracing::info!(
                    response_id = %self.response.id,
                    attempt = attempt + 1,
                    dropped_turns = details.dropped_turns,
                    dropped_items = details.dropped_items,
                    "context window exceeded; the oldest turns are dropped and the turn retried"
                );
            }
            attempt += 1;
        }
    }

    /// Run one gateway tool call: its "running" event, the call, its outcome on the item.
    async fn run_gateway_call(
        &mut self,
        sink: &mut EventSink,
        log: &mut OutputLog,
        call: PendingGatewayCall,
    ) -> Result<(), Stop> {
        if let Some(event) = call.running_event() {
            sink.send(event).await.map_err(|_| Stop::ClientGone)?;
        }
        let Some(tool) = self.gateway_tools.iter().find(|t| t.spec().name == call.function).cloned() else {
            // The call targets only name gateway tools, so this cannot happen; fail loudly if it does.
            return Err(Stop::Error(ApiError::internal(format!("no gateway tool named '{}'", call.function))));
        };
        let started = Instant::now();
        let arguments = GatewayCall { arguments: &call.arguments, state: &self.tool_state };
        let outcome = tokio::select! {
            outcome = tool.call(arguments) => outcome,
            () = sink.closed() => return Err(Stop::ClientGone),
        };
        let (tool_type, output_index) = (call.tool_type(), call.item.output_index());
        let done = call.complete(outcome, &mut self.tool_state).map_err(Stop::Error)?;
        self.engine.metrics.tool_executed(tool_type, started.elapsed(), done.ok);
        let presented = self.present(&done.item);
        log.items.push(done.item);
        sink.send(done.done_event).await.map_err(|_| Stop::ClientGone)?;
        sink.send(ResponseEvent::OutputItemDone { output_index, item: Box::new(presented) })
            .await
            .map_err(|_| Stop::ClientGone)
    }

    async fn flush(
        &self,
        sink: &mut EventSink,
        log: &mut OutputLog,
        events: &mut Vec<ResponseEvent>,
    ) -> Result<(), Stop> {
        self.seal_reasoning(log, events);
        for event in events.drain(..) {
            sink.send(event).await.map_err(|_| Stop::ClientGone)?;
        }
        Ok(())
    }

    /// When `include` asks for `reasoning.encrypted_content`, seal each finished reasoning item
    /// (in its `output_item.done` event and in the output log, the same blob in both).
    fn seal_reasoning(&self, log: &mut OutputLog, events: &mut [ResponseEvent]) {
        let Some(seal) = &self.engine.seal else { return };
        if !self.request.include.iter().any(|i| i == "reasoning.encrypted_content") {
            return;
        }
        for event in events.iter_mut() {
            let ResponseEvent::OutputItemDone { item, .. } = event else { continue };
            let Item::Reasoning(r) = item.as_mut() else { continue };
            match seal.seal(Purpose::Reasoning, &self.owner, &r.text()) {
                Ok(blob) => {
                    if let Some(Item::Reasoning(logged)) = log.items.iter_mut().find(|i| i.id() == r.id) {
                        logged.encrypted_content = Some(blob.clone());
                    }
                    r.encrypted_content = Some(blob);
                }
                Err(e) => tracing::error!(error = %e, "could not seal reasoning; sent without encrypted_content"),
            }
        }
    }

    /// An item as the client sees it (see [`tool_kinds::present`]).
    fn present(&self, item: &Item) -> Item {
        tool_kinds::present(item, &self.request.include)
    }

    /// Store the response: the object as the client sees it, and the unfiltered items the
    /// conversation continues from. A background run's save goes with its terminal event, in
    /// one transaction.
    async fn persist(&self, sink: &mut EventSink) -> Result<(), StoreError> {
        let response = serde_json::to_value(&self.response).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let status = match self.response.status {
            ResponseStatus::Incomplete => "incomplete",
            _ => "completed",
        };
        let response = NewResponse {
            id: self.response.id.clone(),
            owner: self.owner.clone(),
            previous_response_id: self.request.previous_response_id.clone(),
            model: self.request.model.clone(),
            created_at: self.response.created_at,
            status: status.to_owned(),
            response,
            history_from: self.history_from.clone(),
            input: self.unstored_inherited.iter().chain(&self.request.input).cloned().collect(),
            output: self.output.clone(),
            conversation: self.conversation.clone(),
            rounds: self.rounds.rounds().to_vec(),
        };
        match sink {
            EventSink::Background(sink) => {
                sink.save_with_terminal(response);
                Ok(())
            }
            _ => self.engine.store.save(response).await,
        }
    }

    /// End with `error` + `response.failed`. Items finished before the failure stay in `output`.
    async fn fail(&mut self, sink: &mut EventSink, error: ApiError) -> RunOutcome {
        self.response.output = self.output.iter().map(|i| self.present(i)).collect();
        end_failed(&mut self.response, &error, sink).await;
        RunOutcome::Failed { response: Box::new(self.response.clone()), error }
    }
}

/// Mark `response` failed with `error`, and end its stream with the `error` event and
/// `response.failed`.
pub(crate) async fn end_failed(response: &mut ResponseObject, error: &ApiError, sink: &mut EventSink) {
    response.status = ResponseStatus::Failed;
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
        let _ = sink.send(ResponseEvent::Failed { response: Box::new(response.clone()) }).await;
    }
}
