//! Shared end-to-end harness: a replay upstream (in-process, replaying recorded streams) in
//! front of which the real `respgw` binary runs as a child process on a loopback port chosen
//! at run time. Every response object and event the tests see is validated against the Open
//! Responses schema, and every stream against the gateway's framing contract.

use std::path::{Path, PathBuf};

use respgw_testkit::gateway::{GatewayProcess, http_client};
use respgw_testkit::postgres::TestSchema;
use respgw_testkit::schema::SchemaValidator;
use respgw_testkit::sse::check_stream;
use respgw_testkit::upstream::{ReplayUpstream, Step};
use serde_json::{Value, json};

/// A gateway in front of a replay upstream.
pub struct Harness {
    pub upstream: ReplayUpstream,
    pub gateway: GatewayProcess,
}

pub fn respgw_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_respgw"))
}

fn schema() -> &'static SchemaValidator {
    static SCHEMA: std::sync::OnceLock<SchemaValidator> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(|| SchemaValidator::load().expect("the Open Responses schema loads"))
}

/// The test Python: the project's `.venv` (created by `scripts/test` from
/// `tests/sdk/requirements.txt`), or `RESPGW_PYTHON`.
pub fn test_python() -> PathBuf {
    if let Some(p) = std::env::var_os("RESPGW_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

/// The test Python environment exists (`scripts/test` creates it).
pub fn python_env() -> Result<(), String> {
    respgw_testkit::prerequisites::file(&test_python(), "scripts/test installs .venv, or set RESPGW_PYTHON")
}

/// What a client script printed, and whether it exited successfully.
pub struct ScriptRun {
    pub succeeded: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Run `tests/sdk/<script> <base_url>` with [`test_python`] (and `envs`), loopback unproxied.
pub async fn run_sdk_script(script: &str, base_url: &str, envs: &[(&str, &str)]) -> ScriptRun {
    let python = test_python();
    assert!(
        python.exists(),
        "{} not found: run scripts/test (it installs .venv) or set RESPGW_PYTHON",
        python.display()
    );
    let output = tokio::process::Command::new(&python)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk").join(script))
        .arg(base_url)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .envs(envs.iter().copied())
        .output()
        .await
        .expect("python runs");
    ScriptRun {
        succeeded: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Environment for gateways a test starts itself: the code interpreter off (see `start_with`).
pub fn quiet_env() -> Vec<(String, String)> {
    vec![("GW_CODE_INTERPRETER".into(), "disabled".into())]
}

/// The standard `serve` arguments for a gateway in front of `upstream_url`.
pub fn serve_args(upstream_url: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> =
        ["serve", "--upstream", upstream_url, "--gateway-host", "127.0.0.1", "--gateway-port", "0"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Which store a test's gateway uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in the gateway's temporary working directory (the default).
    Sqlite,
    /// A fresh schema on the test PostgreSQL server (`respgw_testkit::postgres`).
    Postgres,
}

/// A [`Harness`] on a chosen [`Backend`]; the PostgreSQL schema is dropped after the gateway.
pub struct BackendHarness {
    pub harness: Harness,
    /// Held, never read: dropping it drops the schema, after the gateway (fields drop in order).
    _schema: Option<TestSchema>,
}

impl std::ops::Deref for BackendHarness {
    type Target = Harness;

    fn deref(&self) -> &Harness {
        &self.harness
    }
}

/// `$name(Backend::Sqlite)` and `$name(Backend::Postgres)` as the tests `$name::sqlite` and
/// `$name::postgres`, for each `async fn $name(backend: Backend)` listed.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::$name($crate::common::Backend::Sqlite).await;
            }

            #[tokio::test]
            async fn postgres() {
                respgw_testkit::skip_unless!(respgw_testkit::prerequisites::postgres());
                super::$name($crate::common::Backend::Postgres).await;
            }
        }
    )*};
}

impl Harness {
    pub async fn start() -> Harness {
        Self::start_with(&[], &[]).await
    }

    /// [`Harness::start`] on `backend`.
    pub async fn start_on(backend: Backend) -> BackendHarness {
        Self::start_on_with(backend, &[]).await
    }

    /// [`Harness::start_on`] with extra `serve` arguments.
    pub async fn start_on_with(backend: Backend, extra_args: &[&str]) -> BackendHarness {
        match backend {
            Backend::Sqlite => BackendHarness { harness: Self::start_with(extra_args, &[]).await, _schema: None },
            Backend::Postgres => {
                let schema = TestSchema::create().await.expect("a test schema on the PostgreSQL server");
                let url = schema.url();
                let args: Vec<&str> =
                    ["--db-path", url.as_str()].into_iter().chain(extra_args.iter().copied()).collect();
                let harness = Self::start_with(&args, &[]).await;
                BackendHarness { harness, _schema: Some(schema) }
            }
        }
    }

    /// Start with extra `serve` arguments and environment. The code interpreter is off unless
    /// `envs` turns it on (`GW_CODE_INTERPRETER=spawn`): probing the sandbox costs a second per
    /// start, and most tests do not need it.
    pub async fn start_with(extra_args: &[&str], envs: &[(&str, &str)]) -> Harness {
        let upstream = ReplayUpstream::start().await.expect("replay upstream starts");
        let mut envs: Vec<(String, String)> = envs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        if !envs.iter().any(|(k, _)| k == "GW_CODE_INTERPRETER") {
            envs.push(("GW_CODE_INTERPRETER".into(), "disabled".into()));
        }
        let gateway = GatewayProcess::spawn(respgw_bin(), &serve_args(&upstream.base_url(), extra_args), &envs)
            .await
            .expect("gateway starts");
        Harness { upstream, gateway }
    }

    /// Wait (bounded) until the gateway's log contains `needle`; its stderr is read
    /// asynchronously, so a line written just before readiness may arrive a moment later.
    pub async fn wait_for_log(&self, needle: &str) -> bool {
        for _ in 0..50 {
            if self.gateway.stderr_text().contains(needle) {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        false
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.gateway.base_url(), path)
    }

    /// Register a scenario: requests whose `model` is `name` get these upstream replies in order.
    pub fn scenario(&self, name: &str, steps: Vec<Step>) {
        self.upstream.add_scenario(name, steps);
    }

    /// Bodies the upstream received for a scenario.
    pub fn upstream_bodies(&self, name: &str) -> Vec<Value> {
        self.upstream.requests(name).into_iter().map(|r| r.body).collect()
    }

    /// The `messages` of each chat request the upstream received for a scenario, in order.
    pub fn upstream_messages(&self, name: &str) -> Vec<Vec<Value>> {
        self.upstream_bodies(name)
            .into_iter()
            .map(|body| body["messages"].as_array().cloned().unwrap_or_else(|| panic!("no messages: {body}")))
            .collect()
    }

    /// Non-stream `POST /v1/responses`; a 200 body is schema-validated (unless it uses gateway
    /// tools, whose items the Open Responses schema does not define).
    pub async fn create(&self, body: Value) -> (u16, Value) {
        let (status, _, json) =
            respgw_testkit::gateway::post_json(&self.url("/v1/responses"), &body).await.expect("request completes");
        let hosted = json["output"].as_array().is_some_and(|o| {
            o.iter().any(|i| {
                i["type"] == "code_interpreter_call" || i["type"].as_str().is_some_and(|t| t.starts_with("mcp_"))
            })
        }) || json["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["type"] != "function"));
        if status == 200 && !hosted {
            assert_valid_response(&json);
        } else if status != 200 {
            assert_error_shape(&json);
        }
        (status, json)
    }

    /// Streaming `POST /v1/responses`: returns the events, after checking framing and schema.
    pub async fn stream(&self, mut body: Value) -> Vec<Value> {
        body["stream"] = Value::Bool(true);
        let (status, text) =
            respgw_testkit::gateway::post_sse(&self.url("/v1/responses"), &body).await.expect("request completes");
        assert_eq!(status, 200, "stream answered {status}: {text}\n{}", self.gateway.stderr_text());
        let events = check_stream(&text).unwrap_or_else(|e| panic!("bad stream framing: {e:#}\n{text}"));
        for event in &events {
            if let Err(e) = schema().validate_event(event) {
                panic!("event does not match the schema: {e}\n{event:#}");
            }
        }
        events
    }

    /// Streaming `POST /v1/responses` for scenarios with gateway tools: framing is checked,
    /// and the schema only for the event types the Open Responses schema defines (it has none
    /// for code interpreter or MCP events and items).
    pub async fn stream_unchecked(&self, mut body: Value) -> Vec<Value> {
        body["stream"] = Value::Bool(true);
        let (status, text) =
            respgw_testkit::gateway::post_sse(&self.url("/v1/responses"), &body).await.expect("request completes");
        assert_eq!(status, 200, "stream answered {status}: {text}\n{}", self.gateway.stderr_text());
        check_stream(&text).unwrap_or_else(|e| panic!("bad stream framing: {e:#}\n{text}"))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(http_client().get(self.url(path))).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(http_client().delete(self.url(path))).await
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let response = http_client().get(self.url("/metrics")).send().await.expect("scrape");
        assert_eq!(response.status().as_u16(), 200, "/metrics");
        response.text().await.expect("metrics body")
    }

    pub async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.send().await.expect("request completes");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body reads");
        let json = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON reply ({status}): {text}"));
        (status, json)
    }
}

/// The keys of the two tenants of [`two_tenants`].
pub const ALPHA: &str = "sk-alpha-0123456789";
pub const BETA: &str = "sk-beta-0123456789";

/// A keys file in `dir` with tenants `alpha` (its entry's extra TOML lines, e.g. limits:
/// `alpha_limits`) and `beta`, keyed [`ALPHA`] and [`BETA`]; its path.
pub fn two_tenants(dir: &Path, alpha_limits: &str) -> String {
    let entry = |name: &str, key: &str, extra: &str| {
        format!("[[tenant]]\nname = \"{name}\"\nkeys = [\"{}\"]\n{extra}\n", respgw_server::hash_key(key))
    };
    let path = dir.join("keys.toml");
    std::fs::write(&path, entry("alpha", ALPHA, alpha_limits) + &entry("beta", BETA, "")).expect("keys file written");
    path.display().to_string()
}

pub fn assert_valid_response(response: &Value) {
    if let Err(e) = schema().validate_response(response) {
        panic!("response does not match the schema: {e}\n{response:#}");
    }
}

/// The reply of `POST /v1/responses/compact` matches the schema supplement's `CompactedResource`.
pub fn assert_valid_compacted(compacted: &Value) {
    if let Err(e) = schema().validate_compacted_response(compacted) {
        panic!("compacted response does not match the schema: {e}\n{compacted:#}");
    }
}

/// Whether the Open Responses schema defines events of this `type`.
pub fn schema_knows_event(event_type: &str) -> bool {
    schema().event_schema_name(event_type).is_some()
}

pub fn assert_valid_event(event: &Value) {
    if let Err(e) = schema().validate_event(event) {
        panic!("event does not match the schema: {e}\n{event:#}");
    }
}

/// Every error body is `{"error":{"message","type","param","code"}}` with all four keys.
pub fn assert_error_shape(body: &Value) {
    let error = body.get("error").and_then(Value::as_object).unwrap_or_else(|| panic!("not an error body: {body}"));
    for key in ["message", "type", "param", "code"] {
        assert!(error.contains_key(key), "error body lacks '{key}': {body}");
    }
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "error without message: {body}");
    assert!(error["type"].is_string(), "error type must be a string: {body}");
}

/// The `type`s of a list of events.
pub fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["type"].as_str().unwrap_or("?")).collect()
}

/// The terminal event's response.
pub fn final_response(events: &[Value]) -> &Value {
    &events.last().expect("at least one event")["response"]
}

/// Child processes of `pid` whose command line contains `needle` (from /proc).
pub fn children(pid: u32, needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return found };
    for entry in entries.flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else { continue };
        // The parent pid is the second field after the parenthesised command name.
        let ppid =
            stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)).and_then(|p| p.parse().ok());
        let cmdline = std::fs::read(format!("/proc/{child}/cmdline")).unwrap_or_default();
        if ppid == Some(pid) && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(child);
        }
    }
    found.sort();
    found
}

/// Sum of one series (all its label sets) in a Prometheus text exposition.
pub fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(series))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// A chat history in short: each message's role, an assistant message's with the functions it
/// called (`assistant(web_search,web_search)`).
pub fn turns(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            let role = m["role"].as_str().unwrap_or("?");
            match m["tool_calls"].as_array() {
                Some(calls) => format!(
                    "{role}({})",
                    calls.iter().map(|c| c["function"]["name"].as_str().unwrap_or("?")).collect::<Vec<_>>().join(",")
                ),
                None => role.to_owned(),
            }
        })
        .collect()
}

/// Each request's messages start with every message of the request before it, byte for byte
/// (so an upstream's prefix cache can reuse the earlier round).
pub fn assert_append_only(requests: &[Vec<Value>]) {
    for (k, pair) in requests.windows(2).enumerate() {
        let (before, after) = (&pair[0], &pair[1]);
        let text = |ms: &[Value]| ms.iter().map(Value::to_string).collect::<Vec<_>>();
        assert!(
            after.len() > before.len() && text(&after[..before.len()]) == text(before),
            "request {} does not extend request {k}:\n{:#}\n---\n{:#}",
            k + 1,
            Value::Array(before.clone()),
            Value::Array(after.clone())
        );
    }
}

/// Each tool message answers a call of the assistant message before it, in the calls' order.
pub fn assert_results_follow_their_calls(messages: &[Value]) {
    let mut pending: Vec<String> = Vec::new();
    for m in messages {
        if let Some(id) = m["tool_call_id"].as_str() {
            assert_eq!(pending.first().map(String::as_str), Some(id), "{:#}", Value::Array(messages.to_vec()));
            pending.remove(0);
        } else {
            assert!(pending.is_empty(), "calls without results: {:#}", Value::Array(messages.to_vec()));
            pending = m["tool_calls"]
                .as_array()
                .map(|calls| calls.iter().filter_map(|c| c["id"].as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
        }
    }
}

/// One scripted model turn calling these functions at once (one tool call per upstream index,
/// ids `call_0`, `call_1`, …), ending with `finish_reason: tool_calls`.
pub fn tool_turn(calls: &[(&str, Value)]) -> Step {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (function, arguments))| {
            json!({"index":i,"id":format!("call_{i}"),"type":"function",
                   "function":{"name":function,"arguments":arguments.to_string()}})
        })
        .collect();
    let chunk = json!({"choices":[{"index":0,"delta":{"tool_calls":tool_calls},"finish_reason":"tool_calls"}]});
    Step::Sse(vec![format!("data: {chunk}\n\n"), "data: [DONE]\n\n".into()])
}
