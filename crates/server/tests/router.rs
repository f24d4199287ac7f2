//! The HTTP edge in process: the router as [`respgw_server::build`] makes it for a worker (SQLite
//! store in a temporary directory, the replay upstream on loopback), driven request by request
//! with `tower::ServiceExt::oneshot` — no sockets on the gateway's side, no child processes.
//! Error replies are checked for the one error shape; successful ones against the Open Responses
//! schema and, for streams, the SSE framing contract.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use respgw_mcp::McpTimeouts;
use respgw_server::{
    BackgroundSettings, ClientLimits, DEFAULT_MESSAGES_PING_INTERVAL, GatewayOptions, Limits, ReasoningKeys,
    TenantLimits, UpstreamConfig, WebSocketLimits, local_view,
};
use respgw_telemetry::Metrics;
use respgw_telemetry::tracing_otlp::TracingConfig;
use respgw_testkit::{ReplayUpstream, SchemaValidator, Step, check_stream};
use respgw_tools::code_interpreter::{DEFAULT_DISK_MB, DEFAULT_MAX_FILES, DEFAULT_TOTAL_DISK_MB, SandboxSettings};
use respgw_tools::input_files::InputFileSettings;
use respgw_tools::mcp::RemoteMcpSettings;
use serde_json::{Value, json};
use tempfile::TempDir;
use tower::ServiceExt;

/// The API key of [`Gateway::with_api_key`].
const API_KEY: &str = "sk-router-test";

/// A gateway router and what it runs against.
struct Gateway {
    router: Router,
    upstream: ReplayUpstream,
    _dir: TempDir,
}

impl Gateway {
    async fn new() -> Gateway {
        Gateway::build(Vec::new()).await
    }

    async fn with_api_key() -> Gateway {
        Gateway::build(vec![API_KEY.to_owned()]).await
    }

    async fn build(api_keys: Vec<String>) -> Gateway {
        Gateway::build_with(api_keys, |_, _| {}).await
    }

    /// A gateway whose options `adjust` changes (given the upstream's base URL).
    async fn build_with(api_keys: Vec<String>, adjust: impl FnOnce(&mut GatewayOptions, &str)) -> Gateway {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let upstream = ReplayUpstream::start().await.expect("the replay upstream starts");
        let mut options = options(&dir, upstream.base_url(), api_keys);
        adjust(&mut options, &upstream.base_url());
        let metrics = Metrics::new();
        let router = respgw_server::build(&options, metrics.clone(), local_view(metrics), None, std::future::pending())
            .await
            .expect("the gateway builds");
        Gateway { router, upstream, _dir: dir }
    }

    /// Send one request; the status, headers and body.
    async fn send(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.expect("the router answers");
        let status = response.status();
        let headers = response.headers().clone();
        let body = tokio::time::timeout(Duration::from_secs(10), axum::body::to_bytes(response.into_body(), 1 << 24))
            .await
            .expect("the body ends within 10 s")
            .expect("the body reads");
        Reply { status, headers, body: String::from_utf8(body.to_vec()).expect("a UTF-8 body") }
    }

    async fn post(&self, path: &str, content_type: &str, body: impl Into<Body>) -> Reply {
        let request = Request::post(path).header(header::CONTENT_TYPE, content_type).body(body.into());
        self.send(request.expect("a request")).await
    }

    async fn create(&self, body: Value) -> Reply {
        self.post("/v1/responses", "application/json", body.to_string()).await
    }
}

/// What a worker would be given, with everything optional off.
fn options(dir: &TempDir, upstream: String, api_keys: Vec<String>) -> GatewayOptions {
    GatewayOptions {
        upstream: UpstreamConfig {
            base_url: upstream,
            api_key: None,
            connect_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            max_idle_connections: 32,
        },
        db_path: dir.path().join("responses.db").display().to_string(),
        db_pool_size: 2,
        db_reserve_mb: 0,
        api_keys,
        tenants: Default::default(),
        api_keys_file: None,
        tenant_limits: Default::default(),
        redis: None,
        max_body_bytes: 1 << 20,
        limits: Limits::default(),
        metrics_path: None,
        console_sample_seconds: respgw_server::DEFAULT_CONSOLE_SAMPLE_SECONDS,
        forward_other_routes_to: None,
        drain_timeout: Duration::from_secs(1),
        client_limits: ClientLimits {
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(5),
            max_connections: 16,
        },
        websocket: WebSocketLimits::default(),
        messages_ping_interval: DEFAULT_MESSAGES_PING_INTERVAL,
        code_interpreter: false,
        code_interpreter_settings: SandboxSettings {
            venv: dir.path().join("venv"),
            dir: dir.path().join("containers"),
            timeout: Duration::from_secs(5),
            memory_mb: 256,
            cpu_seconds: 5,
            max_concurrency: 1,
            max_queued: 1,
            queue_wait: Duration::from_secs(1),
            container_idle: Duration::from_secs(60),
            disk_mb: DEFAULT_DISK_MB,
            total_disk_mb: DEFAULT_TOTAL_DISK_MB,
            max_files: DEFAULT_MAX_FILES,
        },
        mcp_helper_url: None,
        mcp_timeouts: McpTimeouts::default(),
        remote_mcp: RemoteMcpSettings::default(),
        input_files: InputFileSettings::default(),
        web_search: None,
        reasoning_keys: ReasoningKeys::default(),
        tracing: TracingConfig::default(),
        background: BackgroundSettings::default(),
        retrieval: Default::default(),
    }
}

/// One reply, read whole.
struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The error of an error reply, checked for the one error shape and `status`.
    fn error(&self, status: u16) -> Value {
        assert_eq!(self.status.as_u16(), status, "{}", self.body);
        let body = self.json();
        let error = &body["error"];
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{body:#}");
        assert!(error["type"].is_string(), "{body:#}");
        for key in ["param", "code"] {
            assert!(error.get(key).is_some(), "the error has no `{key}`: {body:#}");
        }
        error.clone()
    }
}

fn schema() -> SchemaValidator {
    SchemaValidator::load().expect("the Open Responses schema loads")
}

#[tokio::test]
async fn unparsable_json_is_a_400_saying_where_it_broke() {
    let gw = Gateway::new().await;
    let error = gw.post("/v1/responses", "application/json", r#"{"model":"m","input":"#).await.error(400);
    assert_eq!(error["type"], "invalid_request_error");
    assert_eq!(error["param"], Value::Null, "no field to name in a body that does not parse: {error:#}");
    assert!(error["message"].as_str().unwrap_or_default().contains("line 1, column"), "{error:#}");
    assert!(gw.upstream.all_requests().is_empty());
}

#[tokio::test]
async fn malformed_field_is_a_400_naming_it_in_param() {
    let gw = Gateway::new().await;
    let error = gw.create(json!({"model":7,"input":"hi"})).await.error(400);
    assert_eq!(error["param"], "model", "{error:#}");
    assert!(gw.upstream.all_requests().is_empty());
}

#[tokio::test]
async fn unknown_input_item_type_is_a_400_naming_the_type() {
    let gw = Gateway::new().await;
    let error = gw.create(json!({"model":"m","input":[{"type":"hologram","content":"hi"}]})).await.error(400);
    assert_eq!(error["param"], "input[0].type", "{error:#}");
    let message = error["message"].as_str().unwrap_or_default();
    for internal in ["untagged", "variant", "enum"] {
        assert!(!message.contains(internal), "parser internals in {message:?}");
    }
}

#[tokio::test]
async fn unknown_tool_type_is_a_400_naming_the_tool() {
    let gw = Gateway::new().await;
    let error = gw.create(json!({"model":"m","input":"hi","tools":[{"type":"teleport"}]})).await.error(400);
    assert!(error["param"].as_str().unwrap_or_default().starts_with("tools[0]"), "{error:#}");
}

#[tokio::test]
async fn text_plain_body_is_a_415() {
    let gw = Gateway::new().await;
    let reply = gw.post("/v1/responses", "text/plain", r#"{"model":"m","input":"hi"}"#).await;
    reply.error(415);
    assert!(gw.upstream.all_requests().is_empty());
}

#[tokio::test]
async fn wrong_method_is_a_405_with_allow() {
    let gw = Gateway::new().await;
    let request = Request::put("/v1/responses/resp_123").body(Body::empty()).expect("a request");
    let reply = gw.send(request).await;
    let error = reply.error(405);
    assert_eq!(error["code"], "method_not_allowed");
    let allow = reply.headers.get(header::ALLOW).and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(allow.contains("GET") && allow.contains("DELETE"), "Allow: {allow:?}");
}

#[tokio::test]
async fn unknown_response_id_is_a_404() {
    let gw = Gateway::new().await;
    let request = Request::get("/v1/responses/resp_does_not_exist").body(Body::empty()).expect("a request");
    let error = gw.send(request).await.error(404);
    assert_eq!(error["type"], "invalid_request_error");
}

#[tokio::test]
async fn missing_or_wrong_api_key_is_a_401() {
    let gw = Gateway::with_api_key().await;
    gw.upstream.add_scenario("m", vec![Step::text(&["Hi."], "stop", None)]);
    let body = json!({"model":"m","input":"hi"}).to_string();

    let missing = gw.create(json!({"model":"m","input":"hi"})).await;
    assert_eq!(missing.error(401)["type"], "authentication_error");
    assert_eq!(missing.headers.get(header::WWW_AUTHENTICATE).map(|v| v.as_bytes()), Some(&b"Bearer"[..]));

    let wrong = Request::post("/v1/responses")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, "Bearer sk-wrong")
        .body(Body::from(body.clone()))
        .expect("a request");
    gw.send(wrong).await.error(401);
    assert!(gw.upstream.all_requests().is_empty(), "nothing reached the model without a key");

    let right = Request::post("/v1/responses")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {API_KEY}"))
        .body(Body::from(body))
        .expect("a request");
    assert_eq!(gw.send(right).await.status, StatusCode::OK);
}

#[tokio::test]
async fn the_console_page_is_public_with_its_security_headers() {
    let gw = Gateway::with_api_key().await;
    let get = |path: &str| Request::get(path).body(Body::empty()).expect("a request");
    let page = gw.send(get("/console/")).await;
    assert_eq!(page.status, StatusCode::OK, "no key needed for the page: {}", page.body);
    let csp = page.headers.get(header::CONTENT_SECURITY_POLICY).and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert_eq!(csp, respgw_console::CONTENT_SECURITY_POLICY);
    assert!(page.body.contains("app.js"));
    assert_eq!(gw.send(get("/console/app.js")).await.status, StatusCode::OK);

    let redirect = gw.send(get("/console")).await;
    assert_eq!(redirect.status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(redirect.headers.get(header::LOCATION).map(|v| v.as_bytes()), Some(&b"/console/"[..]));
    assert_eq!(gw.send(get("/console/missing.js")).await.error(404)["code"], "not_found");
    let post = Request::post("/console/").body(Body::empty()).expect("a request");
    assert_eq!(gw.send(post).await.error(405)["code"], "method_not_allowed");
    // The data behind it is not public.
    assert_eq!(gw.send(get("/v1/responses/resp_1")).await.error(401)["type"], "authentication_error");
}

#[tokio::test]
async fn non_stream_create_returns_a_schema_valid_response_that_can_be_retrieved() {
    let gw = Gateway::new().await;
    gw.upstream.add_scenario("m", vec![Step::text(&["Hello ", "there."], "stop", Some((5, 2)))]);

    let reply = gw.create(json!({"model":"m","input":"hi"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let response = reply.json();
    schema().validate_response(&response).unwrap_or_else(|e| panic!("{e}\n{response:#}"));
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][0]["content"][0]["text"], "Hello there.");
    assert_eq!(gw.upstream.requests("m")[0].body["messages"][0]["content"], "hi");

    let id = response["id"].as_str().expect("an id");
    let retrieved = gw.send(Request::get(format!("/v1/responses/{id}")).body(Body::empty()).expect("a request")).await;
    assert_eq!(retrieved.status, StatusCode::OK, "{}", retrieved.body);
    assert_eq!(retrieved.json()["output"], response["output"]);
}

#[tokio::test]
async fn stream_create_is_a_framed_schema_valid_stream_ending_with_done() {
    let gw = Gateway::new().await;
    gw.upstream.add_scenario("m", vec![Step::text(&["Hello ", "there."], "stop", None)]);

    let reply = gw.create(json!({"model":"m","input":"hi","stream":true})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let content_type = reply.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    let events = check_stream(&reply.body).unwrap_or_else(|e| panic!("{e:#}\n{}", reply.body));
    let schema = schema();
    for event in &events {
        schema.validate_event(event).unwrap_or_else(|e| panic!("{e}\n{event:#}"));
    }
    let last = events.last().expect("events");
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["output"][0]["content"][0]["text"], "Hello there.");
}

#[tokio::test]
async fn stream_with_upstream_failure_ends_failed_and_framed() {
    let gw = Gateway::new().await;
    gw.upstream.add_scenario("m", vec![Step::Status { status: 500, body: json!({"error":{"message":"boom"}}) }]);

    let reply = gw.create(json!({"model":"m","input":"hi","stream":true})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let events = check_stream(&reply.body).unwrap_or_else(|e| panic!("{e:#}\n{}", reply.body));
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types[types.len().saturating_sub(2)..], ["error", "response.failed"], "{types:?}");
    let schema = schema();
    for event in &events {
        schema.validate_event(event).unwrap_or_else(|e| panic!("{e}\n{event:#}"));
    }
}

/// Integrated mode forwards the model server's completion routes; a stream there counts against
/// the tenant's open streams until its body ends, and the tokens of every completion are charged.
#[tokio::test]
async fn integrated_mode_counts_completion_streams_and_charges_their_tokens() {
    let gateway = Gateway::build_with(vec![API_KEY.to_owned()], |options, upstream| {
        options.forward_other_routes_to = Some(upstream.trim_end_matches("/v1").to_owned());
        options.tenant_limits =
            TenantLimits { max_open_streams: Some(1), tokens_per_day: Some(100), ..TenantLimits::default() };
    })
    .await;
    let completion = json!({"id":"cmpl-1","object":"text_completion","created":1,"model":"legacy",
        "choices":[{"index":0,"text":"Hi.","finish_reason":"stop","logprobs":null}],
        "usage":{"prompt_tokens":30,"completion_tokens":10,"total_tokens":40}});
    gateway.upstream.add_repeating_scenario("legacy", Step::Status { status: 200, body: completion.clone() });
    let chunk = |text: &str| format!("data: {}\n\n", json!({"choices":[{"index":0,"text":text,"finish_reason":null}]}));
    let usage = json!({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}});
    let chunks = vec![chunk("slow"), chunk("ly"), format!("data: {usage}\n\n"), "data: [DONE]\n\n".to_owned()];
    gateway.upstream.add_repeating_scenario("slow", Step::SlowSse { chunks, delay: Duration::from_millis(300) });
    let post = |path: &str, body: Value| {
        Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::AUTHORIZATION, format!("Bearer {API_KEY}"))
            .body(Body::from(body.to_string()))
            .expect("a request")
    };
    let header = |reply: &Reply, name: &str| reply.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);

    // A JSON completion: relayed as it is, its 40 tokens charged.
    let reply = gateway.send(post("/v1/completions", json!({"model":"legacy","prompt":"hi"}))).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.json(), completion);

    // One stream open: a second is refused before the upstream sees it, a JSON request is not.
    let open = gateway
        .router
        .clone()
        .oneshot(post("/v1/completions", json!({"model":"slow","prompt":"hi","stream":true})))
        .await
        .expect("the router answers");
    assert_eq!(open.status(), StatusCode::OK);
    assert_eq!(open.headers()["x-ratelimit-remaining-tokens"], "60", "the JSON completion's 40 were charged");
    let refused = gateway.send(post("/v1/chat/completions", json!({"model":"slow","messages":[],"stream":true}))).await;
    let error = refused.error(429);
    assert!(error["message"].as_str().is_some_and(|m| m.contains("1 streaming responses")), "{error}");
    let plain = gateway.send(post("/v1/completions", json!({"model":"legacy","prompt":"hi"}))).await;
    assert_eq!(plain.status, StatusCode::OK, "{}", plain.body);
    assert_eq!(gateway.upstream.requests("slow").len(), 1, "the refused stream never reached the upstream");

    // The stream asked for usage on the client's behalf, kept it from the client, and charged it.
    let body = axum::body::to_bytes(open.into_body(), 1 << 20).await.expect("the stream ends");
    let text = String::from_utf8_lossy(&body);
    assert!(text.ends_with("data: [DONE]\n\n") && !text.contains("usage"), "{text}");
    assert_eq!(gateway.upstream.requests("slow")[0].body["stream_options"], json!({"include_usage": true}));

    // Its slot is free again; 40 + 40 + 7 tokens are spent.
    let again = gateway.send(post("/v1/completions", json!({"model":"slow","prompt":"hi","stream":true}))).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(header(&again, "x-ratelimit-remaining-tokens").as_deref(), Some("13"));
}
