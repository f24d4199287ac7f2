//! respgw's own MCP test servers, built on rmcp's server side.
//!
//! One tool set ([`TestServer`]), served three ways:
//! - `respgw-mcp-test-stdio`: MCP on stdin/stdout (a Built-in MCP `command` entry);
//! - `respgw-mcp-test-http`: streamable HTTP at `/mcp` and the legacy HTTP+SSE transport at `/sse`
//!   (+ `/messages`) on `127.0.0.1:<port>`, optionally behind a bearer token ([`http_router`]).
//!
//! The tools, each there for a rule of the gateway to be tested against:
//!
//! | Tool | Does |
//! |---|---|
//! | `echo {text}` | returns `text` (annotated `readOnlyHint`) |
//! | `add {a, b}` | returns `a + b` (integers) |
//! | `fail {message?}` | returns an MCP tool error (`isError: true`) with `message` |
//! | `slow {ms}` | sleeps `ms` milliseconds, then returns `slept <ms> ms` |
//! | `ref_schema {point}` | its input schema uses `$ref`/`$defs`; returns `point (x, y)` |
//! | `image` | returns a 1×1 PNG and a text item |
//! | `crash` | stdio only: the process exits with status 3 without answering |
//! | `enable_extra` | makes tool `extra` appear and sends `notifications/tools/list_changed` |
//! | `enable_extra_silently` | makes tool `extra` appear without telling anyone (a stale client cache) |
//! | `extra` | returns `extra`; listed only once enabled |
//!
//! With a call log ([`SharedState::with_call_log`], `--call-log PATH` on both binaries), each tool
//! call is first appended to that file as one JSON line (`{"tool":…,"arguments":{…}}`), so a test
//! can tell whether, and with what, a tool was really called.
//!
//! [`exa`] is a different server: a stand-in for Exa's hosted MCP (`respgw-mcp-test-http --exa`).

pub mod exa;
pub mod legacy_sse;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Map, Value, json};

/// A 1×1 transparent PNG, base64.
const TINY_PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// State shared by every session of one server process (so that `enable_extra` over one HTTP session is
/// seen by the others, like a real server's changing tool set).
#[derive(Debug, Default)]
pub struct SharedState {
    extra_enabled: AtomicBool,
    /// Where each tool call is recorded, if anywhere.
    call_log: Option<PathBuf>,
}

impl SharedState {
    /// State whose tool calls are appended to `path`, one JSON line each.
    pub fn with_call_log(path: Option<PathBuf>) -> Self {
        SharedState { call_log: path, ..SharedState::default() }
    }

    /// Append the call to the call log. A test server that cannot write its log says so on stderr
    /// (the test reading the log then fails on the missing line).
    fn record_call(&self, name: &str, args: &Map<String, Value>) {
        let Some(path) = &self.call_log else { return };
        let line = json!({"tool": name, "arguments": args}).to_string();
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| writeln!(file, "{line}"));
        if let Err(e) = written {
            eprintln!("cannot append to the call log {}: {e}", path.display());
        }
    }
}

/// The test tool set. `stdio` adds the `crash` tool (exiting is only meaningful for a child process).
#[derive(Debug, Clone)]
pub struct TestServer {
    state: Arc<SharedState>,
    stdio: bool,
}

impl TestServer {
    /// A server for stdio (with `crash`) or HTTP (without).
    pub fn new(state: Arc<SharedState>, stdio: bool) -> Self {
        TestServer { state, stdio }
    }

    /// The tools currently offered, in definition order.
    pub fn tools(&self) -> Vec<Tool> {
        let mut defs = vec![
            json!({"name": "echo", "description": "Returns its text.",
                   "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                   "annotations": {"readOnlyHint": true}}),
            json!({"name": "add", "description": "Adds two integers.",
                   "inputSchema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                                   "required": ["a", "b"]}}),
            json!({"name": "fail", "description": "Always fails with a tool error.",
                   "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}),
            json!({"name": "slow", "description": "Sleeps for ms milliseconds, then answers.",
                   "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}}, "required": ["ms"]}}),
            json!({"name": "ref_schema", "description": "Takes a point; its schema uses $ref and $defs.",
                   "inputSchema": {"type": "object", "properties": {"point": {"$ref": "#/$defs/Point"}}, "required": ["point"],
                                   "$defs": {"Point": {"type": "object",
                                                       "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                                       "required": ["x", "y"]}}}}),
            json!({"name": "image", "description": "Returns a tiny PNG image.",
                   "inputSchema": {"type": "object"}}),
            json!({"name": "enable_extra", "description": "Adds the tool 'extra' and notifies the client.",
                   "inputSchema": {"type": "object"}}),
            json!({"name": "enable_extra_silently", "description": "Adds the tool 'extra' without notifying.",
                   "inputSchema": {"type": "object"}}),
        ];
        if self.stdio {
            defs.push(json!({"name": "crash", "description": "Makes the server process exit.", "inputSchema": {"type": "object"}}));
        }
        if self.state.extra_enabled.load(Ordering::SeqCst) {
            defs.push(
                json!({"name": "extra", "description": "Only listed once enabled.", "inputSchema": {"type": "object"}}),
            );
        }
        // These literals are valid `Tool`s; one that is not is a bug in this file, caught by every test.
        defs.into_iter().filter_map(|d| serde_json::from_value(d).ok()).collect()
    }

    async fn call(
        &self,
        name: &str,
        args: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        self.state.record_call(name, args);
        let text = |s: String| CallToolResult::success(vec![ContentBlock::text(s)]);
        match name {
            "echo" => text(args.get("text").and_then(Value::as_str).unwrap_or_default().to_owned()),
            "add" => {
                let a = args.get("a").and_then(Value::as_i64).unwrap_or_default();
                let b = args.get("b").and_then(Value::as_i64).unwrap_or_default();
                text(a.saturating_add(b).to_string())
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text(
                args.get("message").and_then(Value::as_str).unwrap_or("this tool always fails").to_owned(),
            )]),
            "slow" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or_default();
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text(format!("slept {ms} ms"))
            }
            "ref_schema" => {
                let point = args.get("point").cloned().unwrap_or(Value::Null);
                let coord = |k: &str| point.get(k).cloned().unwrap_or(Value::Null);
                text(format!("point ({}, {})", coord("x"), coord("y")))
            }
            "image" => {
                CallToolResult::success(vec![ContentBlock::image(TINY_PNG, "image/png"), ContentBlock::text("a pixel")])
            }
            "crash" if self.stdio => std::process::exit(3),
            "enable_extra" => {
                self.state.extra_enabled.store(true, Ordering::SeqCst);
                // A failed notification only means the client will learn of `extra` later.
                let _ = context.peer.notify_tool_list_changed().await;
                text("extra enabled".into())
            }
            "enable_extra_silently" => {
                self.state.extra_enabled.store(true, Ordering::SeqCst);
                text("extra enabled silently".into())
            }
            "extra" if self.state.extra_enabled.load(Ordering::SeqCst) => text("extra".into()),
            other => CallToolResult::error(vec![ContentBlock::text(format!("unknown tool {other:?}"))]),
        }
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tool_list_changed().build())
            .with_instructions("respgw MCP test server")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        Ok(CallToolResponse::Complete(self.call(&request.name, &args, &context).await))
    }
}

/// The HTTP server's routes: streamable HTTP at `/mcp`, legacy SSE at `/sse` + `/messages`. With
/// `require_token`, every request must carry `Authorization: Bearer <token>` (401 otherwise).
pub fn http_router(state: Arc<SharedState>, require_token: Option<String>) -> axum::Router {
    let factory_state = state.clone();
    let streamable = StreamableHttpService::new(
        move || Ok(TestServer::new(factory_state.clone(), false)),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", streamable).merge(legacy_sse::router(state));
    match require_token {
        None => router,
        Some(token) => {
            let expected: Arc<str> = format!("Bearer {token}").into();
            router.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
                let expected = expected.clone();
                async move { check_token(&expected, request, next).await }
            }))
        }
    }
}

async fn check_token(expected: &str, request: Request, next: Next) -> Response {
    let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if given == Some(expected) {
        next.run(request).await
    } else {
        (StatusCode::UNAUTHORIZED, "missing or wrong bearer token").into_response()
    }
}
