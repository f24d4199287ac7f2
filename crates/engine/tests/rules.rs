//! The engine's rules, one test each, in process: a real [`Engine`] over a SQLite store in a
//! temporary directory, the replay upstream on loopback (what it received is asserted on), and a
//! fake gateway tool standing in for an MCP tool, whose calls are recorded. Every stream is checked
//! against the sequence rules (numbered from 0, one terminal event, last), and every event and
//! response object against the Open Responses schema — except those of responses with gateway
//! tools, whose `mcp` declarations and `mcp_call` items the schema does not define. Background
//! runs (cancelling one mid tool call) use the same SQLite file for their event logs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use respgw_engine::{
    BackgroundRuns, BackgroundSettings, Engine, FunctionSpec, GatewayCall, GatewayKind, GatewayOutcome, GatewayTool,
    Limits, ResolvedTools, ResumeFrom, RunOutcome, ToolResolver, Upstream, UpstreamConfig,
};
use respgw_protocol::events::numbered_json;
use respgw_protocol::tools::ToolDeclaration;
use respgw_protocol::{ApiError, Capabilities, CreateResponseRequest, Item, ResponseEvent, ValidatedRequest};
use respgw_store::StoreOptions;
use respgw_store_api::{
    ConversationHistory, ConversationItemLookup, ConversationRecord, InputItemsList, InputItemsPage, NewConversation,
    NewResponse, ResponseStore, StoreError,
};
use respgw_telemetry::Metrics;
use respgw_testkit::sse::check_sequence;
use respgw_testkit::{ReplayUpstream, SchemaValidator, Step};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::mpsc;

/// The fake tool's function name, as the model sees and calls it (`mcp__<server>__<tool>`, as the
/// real MCP tools are named: replayed calls are named from the item's label and tool).
/// The tenant every response of these tests runs for.
const OWNER: &str = "default";

const TOOL_FUNCTION: &str = "mcp__calc__add";

/// A gateway tool that adds two numbers and records the arguments of every call; asked to
/// (`"explode": true`), it panics, standing in for a tool with a bug; asked to `"hang"`, it never
/// answers, and records when its call is dropped (as a sandbox execution is killed then); given
/// `"sleep_ms"`, it takes that long.
struct RecordingTool {
    spec: FunctionSpec,
    kind: GatewayKind,
    calls: Mutex<Vec<String>>,
    /// Set when a hanging call's future is dropped.
    dropped: Arc<AtomicBool>,
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl RecordingTool {
    fn new() -> Self {
        RecordingTool {
            spec: FunctionSpec {
                name: TOOL_FUNCTION.into(),
                description: Some("Adds a and b.".into()),
                parameters: json!({"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}),
                strict: None,
            },
            kind: GatewayKind::Mcp { server_label: "calc".into(), tool_name: "add".into() },
            calls: Mutex::new(Vec::new()),
            dropped: Arc::new(AtomicBool::new(false)),
        }
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

#[async_trait]
impl GatewayTool for RecordingTool {
    fn spec(&self) -> &FunctionSpec {
        &self.spec
    }
    fn kind(&self) -> &GatewayKind {
        &self.kind
    }
    async fn call(&self, call: GatewayCall<'_>) -> GatewayOutcome {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push(call.arguments.to_owned());
        let args: Value = serde_json::from_str(call.arguments).unwrap_or_default();
        assert!(args["explode"] != true, "the calculator exploded");
        if args["hang"] == true {
            let _dropped = SetOnDrop(Arc::clone(&self.dropped));
            std::future::pending::<()>().await;
        }
        if let Some(sleep_ms) = args["sleep_ms"].as_u64() {
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
        }
        let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
        GatewayOutcome::Mcp(Ok(format!("{sum}")))
    }
}

/// Resolves any `mcp` declaration to the recording tool.
struct FakeResolver {
    tool: Arc<RecordingTool>,
}

#[async_trait]
impl ToolResolver for FakeResolver {
    fn capabilities(&self) -> Capabilities {
        Capabilities { builtin_mcp: true, ..Capabilities::default() }
    }
    async fn resolve(&self, request: &ValidatedRequest, _: &[Item], _: &str) -> Result<ResolvedTools, ApiError> {
        let declared = request.tools.iter().any(|t| matches!(t, ToolDeclaration::Mcp(_)));
        let tools: Vec<Arc<dyn GatewayTool>> = if declared { vec![self.tool.clone()] } else { Vec::new() };
        Ok(ResolvedTools { tools, shown_first: Vec::new() })
    }
}

/// How the engine's store saves: the real store's way, failing, or late.
#[derive(Clone, Copy, PartialEq)]
enum Saves {
    Normally,
    /// As an unreachable database would: `Unavailable`.
    Fail,
    /// After a pause, so a terminal event sent before the save finished would be seen early.
    Late,
}

/// The real store, its `save` changed as [`Saves`] says; reads go to the real store. Every
/// response handed to `save` is kept, to check what the engine asked to store.
struct WrappedStore {
    inner: Arc<dyn ResponseStore>,
    saves: Saves,
    saved: Mutex<Vec<NewResponse>>,
}

#[async_trait]
impl ResponseStore for WrappedStore {
    async fn save(&self, response: NewResponse) -> Result<(), StoreError> {
        self.saved.lock().unwrap_or_else(PoisonError::into_inner).push(response.clone());
        match self.saves {
            Saves::Normally => {}
            Saves::Fail => return Err(StoreError::Unavailable("the disk is full".into())),
            Saves::Late => tokio::time::sleep(Duration::from_millis(200)).await,
        }
        self.inner.save(response).await
    }
    async fn response(&self, owner: &str, id: &str) -> Result<Option<Value>, StoreError> {
        self.inner.response(owner, id).await
    }
    async fn history(&self, owner: &str, id: &str) -> Result<Option<Vec<Item>>, StoreError> {
        self.inner.history(owner, id).await
    }
    async fn input_items(
        &self,
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError> {
        self.inner.input_items(owner, id, page).await
    }
    async fn delete(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        self.inner.delete(owner, id).await
    }
    async fn create_conversation(&self, conversation: NewConversation) -> Result<(), StoreError> {
        self.inner.create_conversation(conversation).await
    }
    async fn conversation(&self, owner: &str, id: &str) -> Result<Option<ConversationRecord>, StoreError> {
        self.inner.conversation(owner, id).await
    }
    async fn update_conversation(
        &self,
        owner: &str,
        id: &str,
        metadata: serde_json::Map<String, Value>,
    ) -> Result<Option<ConversationRecord>, StoreError> {
        self.inner.update_conversation(owner, id, metadata).await
    }
    async fn delete_conversation(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        self.inner.delete_conversation(owner, id).await
    }
    async fn conversation_history(&self, owner: &str, id: &str) -> Result<Option<ConversationHistory>, StoreError> {
        self.inner.conversation_history(owner, id).await
    }
    async fn conversation_items(
        &self,
        owner: &str,
        id: &str,
        page: InputItemsPage,
    ) -> Result<Option<InputItemsList>, StoreError> {
        self.inner.conversation_items(owner, id, page).await
    }
    async fn append_conversation_items(
        &self,
        owner: &str,
        id: &str,
        items: Vec<Item>,
        max_items: usize,
    ) -> Result<Option<()>, StoreError> {
        self.inner.append_conversation_items(owner, id, items, max_items).await
    }
    async fn conversation_item(
        &self,
        owner: &str,
        id: &str,
        item_id: &str,
    ) -> Result<ConversationItemLookup<Item>, StoreError> {
        self.inner.conversation_item(owner, id, item_id).await
    }
    async fn delete_conversation_item(
        &self,
        owner: &str,
        id: &str,
        item_id: &str,
    ) -> Result<ConversationItemLookup<ConversationRecord>, StoreError> {
        self.inner.delete_conversation_item(owner, id, item_id).await
    }
}

/// One engine and everything around it.
struct Fixture {
    engine: Arc<Engine>,
    upstream: ReplayUpstream,
    tool: Arc<RecordingTool>,
    /// The real store under the engine's [`WrappedStore`].
    store: Arc<dyn ResponseStore>,
    /// The engine's store, with what it was asked to save.
    wrapped: Arc<WrappedStore>,
    _dir: TempDir,
}

impl Fixture {
    async fn new() -> Fixture {
        Fixture::build(Limits::default(), Saves::Normally).await
    }

    async fn build(limits: Limits, saves: Saves) -> Fixture {
        Fixture::build_with(limits, saves, false).await
    }

    /// With background responses on, over the same SQLite file.
    async fn with_background() -> Fixture {
        Fixture::build_with(Limits::default(), Saves::Normally, true).await
    }

    async fn build_with(limits: Limits, saves: Saves, background: bool) -> Fixture {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("responses.db");
        let stores = respgw_store::open_stores(
            path.to_str().expect("a UTF-8 path"),
            StoreOptions { pool_size: 2, ..StoreOptions::default() },
        )
        .await
        .expect("the SQLite store opens");
        let store = stores.responses;
        let upstream = ReplayUpstream::start().await.expect("the replay upstream starts");
        let client = Upstream::new(UpstreamConfig {
            base_url: upstream.base_url(),
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            max_idle_connections: 32,
        })
        .expect("the upstream client");
        let tool = Arc::new(RecordingTool::new());
        let wrapped = Arc::new(WrappedStore { inner: store.clone(), saves, saved: Mutex::new(Vec::new()) });
        let mut engine =
            Engine::new(client, wrapped.clone(), Arc::new(FakeResolver { tool: tool.clone() }), Metrics::new())
                .with_limits(limits);
        if background {
            let runs = BackgroundRuns::start(stores.background, BackgroundSettings::default(), Metrics::new())
                .await
                .expect("background runs start");
            engine = engine.with_background(runs);
        }
        Fixture { engine: Arc::new(engine), upstream, tool, store, wrapped, _dir: dir }
    }

    fn request(&self, body: Value) -> ValidatedRequest {
        CreateResponseRequest::from_slice(body.to_string().as_bytes())
            .expect("the request parses")
            .validate(&self.engine.capabilities())
            .expect("the request is valid")
    }

    /// Run `body` streaming, to the closed channel; the events, checked.
    async fn stream(&self, body: Value) -> Vec<ResponseEvent> {
        let schema = if declares_gateway_tools(&body) { Schema::Skip } else { Schema::Check };
        let prepared = self.engine.prepare(OWNER, self.request(body), Vec::new()).await.expect("the request prepares");
        let events = collect(prepared.spawn(16)).await;
        check_events(&events, schema);
        events
    }

    /// What the engine asked the store to save for the response `id`.
    fn saved(&self, id: &str) -> NewResponse {
        let saved = self.wrapped.saved.lock().unwrap_or_else(PoisonError::into_inner);
        saved.iter().find(|r| r.id == id).cloned().unwrap_or_else(|| panic!("{id} was not saved"))
    }

    /// The chat request bodies the upstream received for `model`.
    fn upstream_bodies(&self, model: &str) -> Vec<Value> {
        self.upstream.requests(model).into_iter().map(|r| r.body).collect()
    }
}

/// Every event of a stream, until the engine closes it.
async fn collect(mut events: mpsc::Receiver<ResponseEvent>) -> Vec<ResponseEvent> {
    let mut seen = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Some(event)) => seen.push(event),
            Ok(None) => return seen,
            Err(_) => panic!("the stream did not end within 10 s; so far: {:?}", kinds(&seen)),
        }
    }
}

fn kinds(events: &[ResponseEvent]) -> Vec<&'static str> {
    events.iter().map(ResponseEvent::kind).collect()
}

/// Whether events are checked against the Open Responses schema.
#[derive(Clone, Copy, PartialEq)]
enum Schema {
    Check,
    /// The response has gateway tools, which the schema does not define.
    Skip,
}

fn declares_gateway_tools(body: &Value) -> bool {
    body["tools"].as_array().is_some_and(|tools| tools.iter().any(|t| t["type"] != "function"))
}

/// The events as a client receives them (numbered), the sequence well formed (one terminal
/// event, and it is the last) and, with [`Schema::Check`], each valid against the schema (the
/// lifecycle events carry the whole response object, so it is checked too).
fn check_events(events: &[ResponseEvent], check_schema: Schema) {
    let numbered: Vec<Value> = events
        .iter()
        .enumerate()
        .map(|(i, event)| {
            let text = numbered_json(event, i as u64).expect("the event serializes");
            serde_json::from_str(&text).expect("the event is JSON")
        })
        .collect();
    if check_schema == Schema::Check {
        let schema = SchemaValidator::load().expect("the Open Responses schema loads");
        for event in &numbered {
            if let Err(e) = schema.validate_event(event) {
                panic!("{e}\n{event:#}");
            }
        }
    }
    if let Err(e) = check_sequence(&numbered) {
        panic!("{e:#}: {:?}", kinds(events));
    }
}

/// The response object of the stream's terminal event.
fn terminal(events: &[ResponseEvent]) -> Value {
    let response = events.last().and_then(ResponseEvent::terminal_response).expect("a terminal event last");
    serde_json::to_value(response).expect("the response serializes")
}

fn validate_response(response: &Value) {
    let schema = SchemaValidator::load().expect("the Open Responses schema loads");
    if let Err(e) = schema.validate_response(response) {
        panic!("{e}\n{response:#}");
    }
}

/// A model turn that calls the fake tool with `arguments`.
fn tool_call_turn(arguments: Value) -> Step {
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",
        "function":{"name":TOOL_FUNCTION,"arguments":arguments.to_string()}}]},"finish_reason":"tool_calls"}]});
    Step::Sse(vec![format!("data: {call}\n\n"), "data: [DONE]\n\n".into()])
}

/// A model turn that calls the client's function `get_weather`.
fn client_call_turn() -> Step {
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_9","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},"finish_reason":"tool_calls"}]});
    Step::Sse(vec![format!("data: {call}\n\n"), "data: [DONE]\n\n".into()])
}

fn calc_tool() -> Value {
    json!({"type":"mcp","server_label":"calc","require_approval":"never"})
}

fn output_types(response: &Value) -> Vec<&str> {
    response["output"].as_array().map(|o| o.iter().filter_map(|i| i["type"].as_str()).collect()).unwrap_or_default()
}

/// The terminal failure's shape: `error` then `response.failed`, nothing after it.
fn assert_ends_failed(events: &[ResponseEvent]) -> Value {
    let kinds = kinds(events);
    assert_eq!(kinds.first(), Some(&"response.created"), "{kinds:?}");
    assert_eq!(kinds[kinds.len().saturating_sub(2)..], ["error", "response.failed"], "{kinds:?}");
    assert_eq!(events.iter().filter(|e| e.terminal_response().is_some()).count(), 1, "{kinds:?}");
    let response = terminal(events);
    assert_eq!(response["status"], "failed");
    response
}

#[tokio::test]
async fn tool_loop_runs_the_gateway_tool_and_sends_its_result_to_the_next_turn() {
    let f = Fixture::new().await;
    f.upstream
        .add_scenario("loop", vec![tool_call_turn(json!({"a":2,"b":3})), Step::text(&["It is 5."], "stop", None)]);

    let events = f.stream(json!({"model":"loop","input":"What is 2+3?","tools":[calc_tool()],"stream":true})).await;

    assert_eq!(f.tool.calls(), [r#"{"a":2,"b":3}"#]);
    let bodies = f.upstream_bodies("loop");
    assert_eq!(bodies.len(), 2, "one turn to call the tool, one to answer");
    let messages = bodies[1]["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool"], "{messages:#?}");
    assert_eq!(messages[1]["tool_calls"][0]["function"]["name"], TOOL_FUNCTION);
    assert_eq!(messages[2]["tool_call_id"], messages[1]["tool_calls"][0]["id"]);
    assert_eq!(messages[2]["content"], "5");

    let response = terminal(&events);
    assert_eq!(response["status"], "completed");
    assert_eq!(output_types(&response), ["mcp_call", "message"]);
    assert_eq!(response["output"][0]["output"], "5");
    assert_eq!(response["output"][1]["content"][0]["text"], "It is 5.");
}

#[tokio::test]
async fn every_upstream_call_of_a_tool_loop_is_stored_as_a_timed_round() {
    let f = Fixture::new().await;
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",
        "function":{"name":TOOL_FUNCTION,"arguments":json!({"a":2,"b":3,"sleep_ms":60}).to_string()}}]},
        "finish_reason":"tool_calls"}]});
    let usage = json!({"choices":[],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}});
    let slow_call = Step::SlowSse {
        chunks: vec![format!("data: {call}\n\n"), format!("data: {usage}\n\n"), "data: [DONE]\n\n".into()],
        delay: Duration::from_millis(40),
    };
    f.upstream.add_scenario("rounds", vec![slow_call, Step::text(&["It is 5."], "stop", Some((20, 3)))]);

    let events = f.stream(json!({"model":"rounds","input":"What is 2+3?","tools":[calc_tool()],"stream":true})).await;

    let response = terminal(&events);
    assert_eq!(output_types(&response), ["mcp_call", "message"]);
    let id = response["id"].as_str().expect("an id");
    let rounds = f.saved(id).rounds;
    assert_eq!(rounds.len(), 2, "{rounds:?}");
    let (first, second) = (&rounds[0], &rounds[1]);
    assert_eq!(first.item_ids, [response["output"][0]["id"].as_str().expect("the call's id")]);
    assert_eq!(second.item_ids, [response["output"][1]["id"].as_str().expect("the message's id")]);
    assert_eq!((first.input_tokens, first.output_tokens), (11, 5));
    assert_eq!((second.input_tokens, second.output_tokens), (20, 3));
    assert!(first.tools_ms >= 60, "the tool slept 60 ms: {first:?}");
    assert_eq!(second.tools_ms, 0);
    assert!(first.duration_ms >= 80, "two 40 ms pauses between its chunks: {first:?}");
    let first_chunk = first.first_chunk_ms.expect("the first call's chunks arrived");
    assert!(first.started_ms <= first_chunk && first_chunk <= first.started_ms + first.duration_ms, "{first:?}");
    assert!(
        second.started_ms >= first.started_ms + first.duration_ms + first.tools_ms,
        "the second call is sent after the first ended and its tool ran: {rounds:?}"
    );
    assert!(second.first_chunk_ms.is_some_and(|at| at >= second.started_ms), "{second:?}");
}

#[tokio::test]
async fn client_function_call_ends_the_response_without_another_turn() {
    let f = Fixture::new().await;
    f.upstream.add_scenario("client", vec![client_call_turn()]);
    let weather = json!({"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}});

    let events = f.stream(json!({"model":"client","input":"Weather in Paris?","tools":[weather],"stream":true})).await;

    let response = terminal(&events);
    assert_eq!(response["status"], "completed");
    assert_eq!(output_types(&response), ["function_call"]);
    assert_eq!(response["output"][0]["name"], "get_weather");
    assert_eq!(response["output"][0]["arguments"], r#"{"city":"Paris"}"#);
    assert_eq!(f.upstream_bodies("client").len(), 1, "the client runs its function before the model goes on");
    assert!(f.tool.calls().is_empty());
}

#[tokio::test]
async fn response_is_stored_before_the_terminal_event_is_sent() {
    let f = Fixture::build(Limits::default(), Saves::Late).await;
    f.upstream.add_scenario("stored", vec![Step::text(&["Hello."], "stop", None)]);
    let prepared = f
        .engine
        .prepare(OWNER, f.request(json!({"model":"stored","input":"hi","stream":true})), Vec::new())
        .await
        .expect("the request prepares");
    let id = prepared.id().to_owned();
    let mut events = prepared.spawn(1);

    // Read the store the moment the terminal event arrives, before anything else can happen.
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("the stream goes on")
            .expect("the stream has a terminal event");
        if event.terminal_response().is_some() {
            let stored = f.store.response(OWNER, &id).await.expect("the store reads");
            assert!(stored.is_some(), "response.completed arrived before the response was stored");
            break;
        }
    }
    let retrieved = f.engine.stored(OWNER).retrieve(&id).await.expect("the stored response is retrievable");
    validate_response(&retrieved);
    assert_eq!(retrieved["status"], "completed");
    assert_eq!(retrieved["output"][0]["content"][0]["text"], "Hello.");
}

#[tokio::test]
async fn upstream_error_ends_with_one_terminal_failure_and_stores_nothing() {
    let f = Fixture::new().await;
    f.upstream.add_scenario(
        "down",
        vec![Step::Status { status: 500, body: json!({"error":{"message":"the GPU caught fire"}}) }],
    );
    let prepared = f
        .engine
        .prepare(OWNER, f.request(json!({"model":"down","input":"hi","stream":true})), Vec::new())
        .await
        .unwrap();
    let id = prepared.id().to_owned();
    let events = collect(prepared.spawn(16)).await;
    check_events(&events, Schema::Check);

    let response = assert_ends_failed(&events);
    assert!(response["error"]["code"].is_string(), "{response:#}");
    assert_eq!(f.store.response(OWNER, &id).await.unwrap(), None);
}

#[tokio::test]
async fn upstream_cut_mid_stream_ends_with_one_terminal_failure_and_stores_nothing() {
    let f = Fixture::new().await;
    let Step::Sse(mut chunks) = Step::text(&["Half ", "an ", "answer"], "stop", None) else { unreachable!() };
    chunks.truncate(3);
    f.upstream.add_scenario("cut", vec![Step::SseThenDrop { chunks }]);
    let prepared = f
        .engine
        .prepare(OWNER, f.request(json!({"model":"cut","input":"hi","stream":true})), Vec::new())
        .await
        .unwrap();
    let id = prepared.id().to_owned();
    let events = collect(prepared.spawn(16)).await;
    check_events(&events, Schema::Check);

    assert_ends_failed(&events);
    assert!(kinds(&events).contains(&"response.output_text.delta"), "the answer had begun: {:?}", kinds(&events));
    assert_eq!(f.store.response(OWNER, &id).await.unwrap(), None);
}

#[tokio::test]
async fn store_failure_ends_with_one_terminal_failure() {
    let f = Fixture::build(Limits::default(), Saves::Fail).await;
    f.upstream.add_scenario("nosave", vec![Step::text(&["Hello."], "stop", None)]);

    let events = f.stream(json!({"model":"nosave","input":"hi","stream":true})).await;

    let response = assert_ends_failed(&events);
    assert!(!kinds(&events).contains(&"response.completed"), "{:?}", kinds(&events));
    assert_eq!(response["error"]["code"], "store_unavailable", "{response:#}");
}

#[tokio::test]
async fn store_failure_fails_a_non_stream_run() {
    let f = Fixture::build(Limits::default(), Saves::Fail).await;
    f.upstream.add_scenario("nosave", vec![Step::text(&["Hello."], "stop", None)]);
    let prepared =
        f.engine.prepare(OWNER, f.request(json!({"model":"nosave","input":"hi"})), Vec::new()).await.unwrap();

    match prepared.run().await {
        RunOutcome::Failed { response, error } => {
            assert_eq!(error.status, 503, "{error:?}");
            validate_response(&serde_json::to_value(&response).unwrap());
        }
        other => panic!("expected a failed run, got {other:?}"),
    }
}

#[tokio::test]
async fn panicking_tool_ends_with_one_terminal_failure_and_stores_nothing() {
    let f = Fixture::new().await;
    f.upstream.add_scenario("bug", vec![tool_call_turn(json!({"explode":true}))]);
    let request = f.request(json!({"model":"bug","input":"hi","tools":[calc_tool()],"stream":true}));
    let prepared = f.engine.prepare(OWNER, request, Vec::new()).await.unwrap();
    let id = prepared.id().to_owned();
    let events = collect(prepared.spawn(16)).await;
    check_events(&events, Schema::Skip);

    let response = assert_ends_failed(&events);
    assert_eq!(response["error"]["code"], "internal_error", "{response:#}");
    assert_eq!(f.tool.calls().len(), 1);
    assert_eq!(f.store.response(OWNER, &id).await.unwrap(), None);
}

#[tokio::test]
async fn continuation_sends_the_previous_conversation_before_the_new_input() {
    let f = Fixture::new().await;
    f.upstream.add_scenario(
        "chat",
        vec![Step::text(&["Hi, Ada."], "stop", None), Step::text(&["Your name is Ada."], "stop", None)],
    );
    let first = f.stream(json!({"model":"chat","input":"My name is Ada.","stream":true})).await;
    let first_id = terminal(&first)["id"].as_str().expect("an id").to_owned();

    let second = f
        .stream(json!({"model":"chat","input":"What is my name?","previous_response_id":first_id,"stream":true}))
        .await;

    assert_eq!(terminal(&second)["previous_response_id"], first_id.as_str());
    let bodies = f.upstream_bodies("chat");
    let messages: Vec<(&str, &str)> = bodies[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or_default(), m["content"].as_str().unwrap_or_default()))
        .collect();
    assert_eq!(
        messages,
        [("user", "My name is Ada."), ("assistant", "Hi, Ada."), ("user", "What is my name?")],
        "{bodies:#?}"
    );
}

#[tokio::test]
async fn max_tool_rounds_forces_a_last_turn_without_tools() {
    let f = Fixture::build(Limits { max_tool_rounds: 1, ..Limits::default() }, Saves::Normally).await;
    f.upstream.add_scenario(
        "greedy",
        vec![tool_call_turn(json!({"a":1,"b":1})), Step::text(&["Enough tools: 2."], "stop", None)],
    );

    let events = f.stream(json!({"model":"greedy","input":"Add forever.","tools":[calc_tool()],"stream":true})).await;

    let bodies = f.upstream_bodies("greedy");
    assert_eq!(bodies.len(), 2, "one round of tools, then the last turn");
    assert_ne!(bodies[0]["tool_choice"], "none");
    assert_eq!(bodies[1]["tool_choice"], "none", "{:#}", bodies[1]);
    assert_eq!(f.tool.calls().len(), 1);
    let response = terminal(&events);
    assert_eq!(response["status"], "completed");
    assert_eq!(output_types(&response), ["mcp_call", "message"]);
}

#[tokio::test]
async fn truncation_auto_applies_to_every_model_turn_of_the_tool_loop() {
    let f = Fixture::new().await;
    f.upstream
        .add_scenario("grow", vec![tool_call_turn(json!({"a":2,"b":3})), Step::text(&["It is 5."], "stop", None)]);
    let body = json!({"model":"grow","tools":[calc_tool()],"truncation":"auto","stream":true,"input":[
        {"role":"user","content":format!("An old question: {}", "word ".repeat(300))},
        {"role":"assistant","content":"An old answer."},
        {"role":"user","content":"What is 2+3?"}]});
    // The first model turn just fits; the second, with the tool's call and result, does not.
    f.upstream.serve_tokenizer(respgw_testkit::TokenizerRoutes::Vllm);
    let first_turn = f.engine.count_input_tokens(OWNER, f.request(body.clone()), Vec::new()).await.expect("a count");
    f.upstream.set_context_window(Some(first_turn + 10));

    let events = f.stream(body).await;

    let response = terminal(&events);
    assert_eq!(response["status"], "completed", "{response:#}");
    assert_eq!(response["truncation_details"], json!({"dropped_turns": 1, "dropped_items": 2}));
    let turns: Vec<Vec<String>> = f
        .upstream
        .requests("grow")
        .into_iter()
        .filter(|r| r.path == "/v1/chat/completions")
        .map(|r| {
            let messages = r.body["messages"].as_array().cloned().unwrap_or_default();
            messages.iter().map(|m| m["role"].as_str().unwrap_or_default().to_owned()).collect()
        })
        .collect();
    assert_eq!(
        turns,
        [
            vec!["user", "assistant", "user"],
            vec!["user", "assistant", "user", "assistant", "tool"],
            vec!["user", "assistant", "tool"],
        ]
    );
}

#[tokio::test]
async fn cancelling_a_background_run_drops_its_running_gateway_tool_and_starts_no_further_turn() {
    let f = Fixture::with_background().await;
    f.upstream.add_scenario("hang", vec![tool_call_turn(json!({"hang":true})), Step::text(&["Never."], "stop", None)]);
    let request = f.request(json!({"model":"hang","input":"x","tools":[calc_tool()],"background":true}));
    let prepared = f.engine.prepare(OWNER, request, Vec::new()).await.expect("the request prepares");
    let runs = Arc::clone(f.engine.background().expect("background runs are on"));
    let queued = prepared.start_background(&runs, ()).await.expect("the run starts");
    assert_eq!(serde_json::to_value(&queued).unwrap()["status"], "queued");
    for _ in 0..200 {
        if !f.tool.calls().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(f.tool.calls(), [r#"{"hang":true}"#], "the tool is running");

    let cancelled = f.engine.cancel_background(OWNER, &queued.id).await.expect("the run is cancelled");
    assert_eq!(cancelled["status"], "cancelled");
    for _ in 0..200 {
        if f.tool.dropped.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(f.tool.dropped.load(Ordering::SeqCst), "the running tool call was dropped");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(f.upstream_bodies("hang").len(), 1, "no further model turn");
    assert!(f.store.response(OWNER, &queued.id).await.unwrap().is_none(), "a cancelled response is not stored");

    // Its log ends with one terminal event, the cancelled response, numbered on from what ran.
    let mut events = f.engine.resume_background(OWNER, &queued.id, ResumeFrom::Start).await.expect("the log is kept");
    let mut logged = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(10), events.recv()).await.expect("the log ends") {
        logged.push(serde_json::from_str::<Value>(&event.data).expect("JSON"));
    }
    check_sequence(&logged).expect("one numbered stream");
    let last = logged.last().expect("events");
    assert_eq!(
        (last["type"].as_str(), last["response"]["status"].as_str()),
        (Some("response.failed"), Some("cancelled"))
    );
    assert!(logged.iter().any(|e| e["type"] == "response.mcp_call.in_progress"), "the tool call was logged");
}
