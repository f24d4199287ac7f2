//! MCP approvals end to end: `require_approval` on Built-in servers (the project's rmcp stdio test
//! server under the real MCP helper, and the npm `server-everything`) and Remote servers (the rmcp
//! HTTP test server behind a bearer token). A call that needs approval comes back as an
//! `mcp_approval_request` and the response completes; the client approves or denies it over
//! `previous_response_id` or by replaying the items with `store:false`. The test servers record
//! every tool call they get (`--call-log`), so each test knows whether the tool really ran; the
//! upstream's request log shows what the model was told. Streams are schema-checked where the
//! Open Responses schema defines the events and parsed with the official SDK's models otherwise
//! (`tests/sdk/sdk_models_check.py`); the Agents SDK's hosted MCP tool with an approval callback
//! runs `tests/sdk/agents_mcp_approvals_check.py`.

use crate::common;
use crate::mcp_remote::{self, McpServer};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::{Harness, assert_append_only, assert_results_follow_their_calls, final_response, kinds, tool_turn, turns};
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const TOKEN: &str = "T-approvals-token";

/// A gateway whose Built-in server `local` is the rmcp stdio test server, logging calls to `log`.
async fn builtin_gateway(dir: &Path, log: &Path) -> Harness {
    let bin = common::respgw_bin().with_file_name("respgw-mcp-test-stdio");
    assert!(bin.exists(), "{} is missing: run the suite with scripts/test (cargo test --workspace)", bin.display());
    let config = dir.join("mcp.json");
    let servers = json!({"local": {"command": bin, "args": ["--call-log", log]}});
    std::fs::write(&config, json!({"mcpServers": servers}).to_string()).unwrap();
    let path = config.display().to_string();
    Harness::start_with(&["--mcp-config", &path], &[("GW_MCP_HOSTED_STARTUP_TIMEOUT_SEC", "5")]).await
}

fn local(require_approval: Value) -> Value {
    json!({"type":"mcp","server_label":"local","require_approval":require_approval})
}

/// The tool calls a test server recorded, as `tool(arguments)`.
fn logged_calls(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|call| format!("{}({})", call["tool"].as_str().unwrap_or("?"), call["arguments"]))
        .collect()
}

fn answer(text: &str) -> Step {
    Step::text(&[text], "stop", None)
}

fn items<'a>(response: &'a Value, kind: &str) -> Vec<&'a Value> {
    response["output"].as_array().map(|o| o.iter().filter(|i| i["type"] == kind).collect()).unwrap_or_default()
}

fn output_types(response: &Value) -> Vec<&str> {
    response["output"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap_or("?")).collect()
}

fn approval(request: &Value, approve: bool, reason: Option<&str>) -> Value {
    let mut item = json!({"type":"mcp_approval_response","approval_request_id":request["id"],"approve":approve});
    if let Some(reason) = reason {
        item["reason"] = json!(reason);
    }
    item
}

/// The tool message answering the call `id` in one upstream request's messages.
fn tool_result<'a>(messages: &'a [Value], id: &str) -> &'a str {
    messages
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no result for {id}: {messages:#?}"))
}

fn assert_400(status: u16, body: &Value, param: &str, needle: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(body["error"]["param"], param, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle) && message.contains(param), "expected {needle:?} and {param:?} in {message:?}");
}

/// Streamed events: each one the Open Responses schema defines and that carries nothing of MCP
/// (the schema has no MCP items, tools or events) is validated against it; all of them, and the
/// final response, are parsed with the official SDK's models. Returns the SDK's report lines.
async fn check_events(events: &[Value]) -> Vec<Value> {
    for event in events {
        let kind = event["type"].as_str().unwrap_or_default();
        if common::schema_knows_event(kind) && !event.to_string().contains(r#""type":"mcp"#) {
            common::assert_valid_event(event);
        }
    }
    let mut values: Vec<Value> = events.iter().map(|e| json!({"event": e})).collect();
    values.push(json!({"response": final_response(events)}));
    sdk_parses(&values).await
}

/// Parse `values` (`{"event":…}` / `{"response":…}`) with the official SDK's models; the report
/// lines (empty when the test Python is missing and the check is skipped).
async fn sdk_parses(values: &[Value]) -> Vec<Value> {
    if !respgw_testkit::prerequisites::present(common::python_env()) {
        return Vec::new();
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/sdk_models_check.py");
    let mut child = tokio::process::Command::new(common::test_python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(Value::Array(values.to_vec()).to_string().as_bytes()).await.expect("write values");
    drop(stdin);
    let output = child.wait_with_output().await.expect("python finishes");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("sdk models checked"),
        "the SDK's models reject what the gateway sent:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// The SDK model classes of the items in the events of `report` of `event_type`.
fn sdk_items<'a>(report: &'a [Value], event_type: &str) -> Vec<&'a str> {
    report.iter().filter(|r| r["event"] == event_type).filter_map(|r| r["item"].as_str()).collect()
}

/// Wait (bounded) for `line` in `/metrics`: workers report their counts every second.
async fn wait_for_metric(h: &Harness, line: &str) {
    for _ in 0..40 {
        if h.metrics().await.lines().any(|l| l == line) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no {line:?} in /metrics:\n{}", h.metrics().await);
}

#[tokio::test]
async fn builtin_always_holds_the_call_and_an_approval_over_previous_response_id_runs_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let h = builtin_gateway(dir.path(), &log).await;
    h.scenario("m", vec![tool_turn(&[("mcp__local__echo", json!({"text":"hello"}))]), answer("It said hello.")]);
    let tools = json!([local(json!("always"))]);

    let events = h.stream_unchecked(json!({"model":"m","input":"Echo hello.","tools":tools})).await;
    let first = final_response(&events);
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(output_types(first), ["mcp_list_tools", "mcp_approval_request"]);
    let request = items(first, "mcp_approval_request")[0];
    assert!(request["id"].as_str().is_some_and(|id| id.starts_with("mcpr_")), "{request}");
    assert_eq!((request["server_label"].as_str(), request["name"].as_str()), (Some("local"), Some("echo")));
    assert_eq!(request["arguments"], json!({"text":"hello"}).to_string());
    let request_events: Vec<&str> = events
        .iter()
        .filter(|e| e["item"]["type"] == "mcp_approval_request")
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(request_events, ["response.output_item.added", "response.output_item.done"]);
    assert!(!kinds(&events).iter().any(|k| k.starts_with("response.mcp_call")), "{:?}", kinds(&events));
    let report = check_events(&events).await;
    if !report.is_empty() {
        assert_eq!(sdk_items(&report, "response.output_item.done"), ["McpListTools", "McpApprovalRequest"]);
    }
    assert!(logged_calls(&log).is_empty(), "nothing ran before the approval: {:?}", logged_calls(&log));
    assert_eq!(h.upstream_bodies("m").len(), 1, "no further model turn in that response");
    wait_for_metric(&h, r#"gw_responses_mcp_approval_requests_total{server_label="local"} 1"#).await;

    let continued = json!({"model":"m","previous_response_id":first["id"],"tools":tools,
        "input":[approval(request, true, None)]});
    let events = h.stream_unchecked(continued).await;
    let second = final_response(&events);
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(output_types(second), ["mcp_call", "message"]);
    let call = items(second, "mcp_call")[0];
    assert_eq!(call["approval_request_id"], request["id"], "{call}");
    assert_eq!((call["status"].as_str(), call["output"].as_str()), (Some("completed"), Some("hello")));
    let call_events: Vec<&str> = events
        .iter()
        .filter(|e| e["item_id"] == call["id"] || e["item"]["id"] == call["id"])
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        call_events,
        [
            "response.output_item.added",
            "response.mcp_call.in_progress",
            "response.mcp_call_arguments.delta",
            "response.mcp_call_arguments.done",
            "response.mcp_call.completed",
            "response.output_item.done"
        ]
    );
    let report = check_events(&events).await;
    if !report.is_empty() {
        assert_eq!(sdk_items(&report, "response.output_item.done"), ["McpCall", "ResponseOutputMessage"]);
    }
    assert_eq!(logged_calls(&log), [r#"echo({"text":"hello"})"#]);

    // The model saw its call, then the approved call's result in its place, then answered.
    let requests = h.upstream_messages("m");
    assert_eq!(turns(&requests[1]), ["user", "assistant(mcp__local__echo)", "tool"]);
    assert_eq!(requests[1][1]["tool_calls"][0]["id"], request["id"]);
    assert_eq!(tool_result(&requests[1], request["id"].as_str().unwrap()), "The user approved this call.\n\nhello");
    assert_append_only(&requests);
    assert_results_follow_their_calls(&requests[1]);
    wait_for_metric(&h, r#"gw_responses_mcp_approval_responses_total{decision="approved",server_label="local"} 1"#)
        .await;

    // The stored conversation keeps all of it, and a later turn shows it the same way.
    h.scenario("later", vec![answer("Yes.")]);
    let (status, third) =
        h.create(json!({"model":"later","previous_response_id":second["id"],"input":"Sure?","tools":tools})).await;
    assert_eq!(status, 200, "{third}");
    let later = &h.upstream_messages("later")[0];
    assert_eq!(later[..requests[1].len()], requests[1][..], "the prompt grows by appending only");
    assert_eq!(turns(later), ["user", "assistant(mcp__local__echo)", "tool", "assistant", "user"]);
}

#[tokio::test]
async fn builtin_denial_tells_the_model_why_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let h = builtin_gateway(dir.path(), &log).await;
    h.scenario("m", vec![tool_turn(&[("mcp__local__add", json!({"a":2,"b":3}))]), answer("I did not add them.")]);
    let tools = json!([local(json!("always"))]);
    let (status, first) = h.create(json!({"model":"m","input":"Add 2 and 3.","tools":tools})).await;
    assert_eq!(status, 200, "{first}");
    let request = items(&first, "mcp_approval_request")[0].clone();

    let denied = approval(&request, false, Some("adding is not allowed today"));
    let (status, second) =
        h.create(json!({"model":"m","previous_response_id":first["id"],"tools":tools,"input":[denied]})).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(output_types(&second), ["message"]);
    assert!(logged_calls(&log).is_empty(), "{:?}", logged_calls(&log));
    let requests = h.upstream_messages("m");
    assert_eq!(turns(&requests[1]), ["user", "assistant(mcp__local__add)", "tool"]);
    assert_eq!(
        tool_result(&requests[1], request["id"].as_str().unwrap()),
        "The user denied this call; it did not run. Reason: adding is not allowed today"
    );
    assert_append_only(&requests);
    wait_for_metric(&h, r#"gw_responses_mcp_approval_responses_total{decision="denied",server_label="local"} 1"#).await;

    // The input items of the continuation show the answer as it was sent (with an id minted).
    let (status, input) = h.get(&format!("/v1/responses/{}/input_items", second["id"].as_str().unwrap())).await;
    assert_eq!(status, 200, "{input}");
    let stored = &input["data"][0];
    assert_eq!(stored["type"], "mcp_approval_response", "{input}");
    assert_eq!(
        (stored["approve"].as_bool(), stored["reason"].as_str()),
        (Some(false), Some("adding is not allowed today"))
    );
    assert!(stored["id"].as_str().is_some_and(|id| id.starts_with("mcpa_")), "{stored}");
}

#[tokio::test]
async fn tool_lists_hold_only_the_tools_that_need_approval_and_a_stateless_replay_continues() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let h = builtin_gateway(dir.path(), &log).await;
    h.scenario(
        "m",
        vec![
            tool_turn(&[
                ("mcp__local__echo", json!({"text":"free"})),
                ("mcp__local__add", json!({"a":1,"b":2})),
                ("mcp__local__slow", json!({"ms":1})),
            ]),
            answer("Echoed, added, and did not wait."),
        ],
    );
    let lists = json!({"never":{"tool_names":["echo"]},"always":{"tool_names":["add"]}});
    let tools = json!([local(lists.clone())]);

    let events = h.stream_unchecked(json!({"model":"m","input":"Do three things.","tools":tools,"store":false})).await;
    let first = final_response(&events).clone();
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(first["tools"][0]["require_approval"], lists, "echoed as sent");
    // `echo` is in `never`: it ran. `add` is in `always` and `slow` in neither list: both wait.
    let requests: Vec<&str> =
        items(&first, "mcp_approval_request").iter().map(|r| r["name"].as_str().unwrap_or("?")).collect();
    assert_eq!(requests, ["add", "slow"]);
    let ran: Vec<&Value> = items(&first, "mcp_call");
    assert_eq!((ran.len(), ran[0]["name"].as_str(), ran[0]["output"].as_str()), (1, Some("echo"), Some("free")));
    assert!(ran[0]["approval_request_id"].is_null(), "{}", ran[0]);
    assert_eq!(logged_calls(&log), [r#"echo({"text":"free"})"#]);
    assert_eq!(h.upstream_bodies("m").len(), 1, "the response ends with the requests");
    check_events(&events).await;
    assert_eq!(h.get(&format!("/v1/responses/{}", first["id"].as_str().unwrap())).await.0, 404, "store:false");

    // Stateless: the client replays the whole conversation with its answers.
    let add = items(&first, "mcp_approval_request")[0].clone();
    let slow = items(&first, "mcp_approval_request")[1].clone();
    let mut input = vec![json!({"role":"user","content":"Do three things."})];
    input.extend(first["output"].as_array().unwrap().iter().cloned());
    input.push(approval(&add, true, None));
    input.push(approval(&slow, false, None));
    let events = h.stream_unchecked(json!({"model":"m","input":input,"tools":tools,"store":false})).await;
    let second = final_response(&events);
    assert_eq!(output_types(second), ["mcp_call", "message"], "{second}");
    assert_eq!(items(second, "mcp_call")[0]["approval_request_id"], add["id"]);
    assert_eq!(items(second, "mcp_call")[0]["output"], "3");
    check_events(&events).await;
    assert_eq!(logged_calls(&log), [r#"echo({"text":"free"})"#, r#"add({"a":1,"b":2})"#]);
    let seen = &h.upstream_messages("m")[1];
    assert_eq!(
        turns(seen),
        ["user", "assistant(mcp__local__add,mcp__local__slow,mcp__local__echo)", "tool", "tool", "tool"]
    );
    assert_eq!(tool_result(seen, add["id"].as_str().unwrap()), "The user approved this call.\n\n3");
    assert_eq!(tool_result(seen, slow["id"].as_str().unwrap()), "The user denied this call; it did not run.");
    assert_eq!(tool_result(seen, ran[0]["id"].as_str().unwrap()), "free");
    assert_results_follow_their_calls(seen);

    // Replayed once more with everything that happened: nothing runs again.
    h.scenario("again", vec![answer("Nothing new.")]);
    input.extend(second["output"].as_array().unwrap().iter().cloned());
    input.push(json!({"role":"user","content":"Anything else?"}));
    let (status, third) = h.create(json!({"model":"again","input":input,"tools":tools,"store":false})).await;
    assert_eq!(status, 200, "{third}");
    assert_eq!(output_types(&third), ["message"]);
    assert_eq!(logged_calls(&log).len(), 2, "{:?}", logged_calls(&log));
    let again = &h.upstream_messages("again")[0];
    assert_eq!(again[..seen.len()], seen[..], "the replay tells the model the same as the live run");
}

#[tokio::test]
async fn bad_approval_responses_are_400s_naming_the_item() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let h = builtin_gateway(dir.path(), &log).await;
    h.scenario("m", vec![tool_turn(&[("mcp__local__echo", json!({"text":"x"}))]), answer("Done.")]);
    let tools = json!([local(json!("always"))]);
    let (_, first) = h.create(json!({"model":"m","input":"Echo x.","tools":tools})).await;
    let request = items(&first, "mcp_approval_request")[0].clone();

    // An id no request of the conversation has.
    let unknown = json!({"type":"mcp_approval_response","approval_request_id":"mcpr_nope","approve":true});
    let (status, body) = h
        .create(json!({"model":"m","previous_response_id":first["id"],"tools":tools,
            "input":[{"role":"user","content":"ok"}, unknown]}))
        .await;
    assert_400(status, &body, "input[1].approval_request_id", "mcpr_nope");
    let (status, body) = h.create(json!({"model":"m","tools":tools,"input":[unknown]})).await;
    assert_400(status, &body, "input[0].approval_request_id", "no mcp_approval_request");

    // Two answers to one request in one input.
    let twice = json!([approval(&request, true, None), approval(&request, false, None)]);
    let (status, body) =
        h.create(json!({"model":"m","previous_response_id":first["id"],"tools":tools,"input":twice})).await;
    assert_400(status, &body, "input[1]", "already answered");

    // A continuing request that does not declare the server again.
    let (status, body) = h
        .create(json!({"model":"m","previous_response_id":first["id"],"input":[approval(&request, true, None)]}))
        .await;
    assert_400(status, &body, "input[0]", "does not declare");
    // …or whose declaration no longer offers the tool.
    let narrowed = json!([{"type":"mcp","server_label":"local","require_approval":"always","allowed_tools":["add"]}]);
    let (status, body) = h
        .create(json!({"model":"m","previous_response_id":first["id"],"tools":narrowed,
            "input":[approval(&request, true, None)]}))
        .await;
    assert_400(status, &body, "input[0]", "does not offer");
    assert!(logged_calls(&log).is_empty(), "{:?}", logged_calls(&log));

    // Answered once, then a second time on the next request.
    let (status, second) = h
        .create(json!({"model":"m","previous_response_id":first["id"],"tools":tools,
            "input":[approval(&request, true, None)]}))
        .await;
    assert_eq!(status, 200, "{second}");
    let (status, body) = h
        .create(json!({"model":"m","previous_response_id":second["id"],"tools":tools,
            "input":[approval(&request, true, None)]}))
        .await;
    assert_400(status, &body, "input[0]", "already answered");
    assert_eq!(logged_calls(&log), [r#"echo({"text":"x"})"#], "the call ran once");

    // Malformed declarations and answers.
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[local(json!("sometimes"))]})).await;
    assert_400(status, &body, "tools[0].require_approval", "'always', 'never'");
    let (status, body) = h
        .create(json!({"model":"m","input":[{"type":"mcp_approval_response","approval_request_id":"mcpr_1",
            "approve":"yes"}],"tools":tools}))
        .await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("input[0].approve")), "{body}");
}

#[tokio::test]
async fn a_remote_approval_needs_the_authorization_again_and_runs_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let server = McpServer::start(&["--require-token", TOKEN, "--call-log", log.to_str().unwrap()]);
    let h = mcp_remote::gateway(&[]).await;
    h.scenario("m", vec![tool_turn(&[("mcp__files__echo", json!({"text":"remote"}))]), answer("It said remote.")]);
    let declaration =
        json!({"type":"mcp","server_label":"files","server_url":server.url("/mcp"),"require_approval":"always"});
    let mut with_token = declaration.clone();
    with_token["authorization"] = json!(TOKEN);

    let events = h.stream_unchecked(json!({"model":"m","input":"Echo remote.","tools":[with_token]})).await;
    let first = final_response(&events);
    let request = items(first, "mcp_approval_request")[0].clone();
    assert_eq!((request["server_label"].as_str(), request["name"].as_str()), (Some("files"), Some("echo")));
    check_events(&events).await;
    assert!(logged_calls(&log).is_empty(), "{:?}", logged_calls(&log));
    wait_for_metric(&h, r#"gw_responses_mcp_approval_requests_total{server_label="(remote)"} 1"#).await;

    // The token is not stored: approving without it is refused, naming the answer.
    let (status, body) = h
        .create(json!({"model":"m","previous_response_id":first["id"],"tools":[declaration],
            "input":[approval(&request, true, None)]}))
        .await;
    assert_400(status, &body, "input[0]", "`authorization` is never stored");
    assert!(!body.to_string().contains(TOKEN), "{body}");
    assert!(logged_calls(&log).is_empty(), "{:?}", logged_calls(&log));

    let events = h
        .stream_unchecked(json!({"model":"m","previous_response_id":first["id"],"tools":[with_token],
            "input":[approval(&request, true, None)]}))
        .await;
    let second = final_response(&events);
    assert_eq!(output_types(second), ["mcp_call", "message"], "{second}");
    assert_eq!(items(second, "mcp_call")[0]["output"], "remote");
    assert_eq!(items(second, "mcp_call")[0]["approval_request_id"], request["id"]);
    check_events(&events).await;
    assert_eq!(logged_calls(&log), [r#"echo({"text":"remote"})"#]);
    let requests = h.upstream_messages("m");
    assert_eq!(tool_result(&requests[1], request["id"].as_str().unwrap()), "The user approved this call.\n\nremote");
    assert_append_only(&requests);
    wait_for_metric(&h, r#"gw_responses_mcp_approval_responses_total{decision="approved",server_label="(remote)"} 1"#)
        .await;
    assert!(!h.metrics().await.contains(r#"server_label="files""#), "request-chosen labels stay out of metrics");
}

#[tokio::test]
async fn remote_tool_lists_and_a_stateless_denial() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let server = McpServer::start(&["--call-log", log.to_str().unwrap()]);
    let h = mcp_remote::gateway(&[]).await;
    h.scenario(
        "m",
        vec![
            tool_turn(&[("mcp__r__echo", json!({"text":"ok"})), ("mcp__r__add", json!({"a":5,"b":5}))]),
            answer("Echoed; adding was refused."),
        ],
    );
    let declaration = json!({"type":"mcp","server_label":"r","server_url":server.url("/mcp"),
        "require_approval":{"never":{"tool_names":["echo"]}}});
    let (status, first) =
        h.create(json!({"model":"m","input":"Echo and add.","tools":[declaration],"store":false})).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(output_types(&first), ["mcp_list_tools", "mcp_approval_request", "mcp_call"]);
    let request = items(&first, "mcp_approval_request")[0].clone();
    assert_eq!(request["name"], "add");
    assert_eq!(logged_calls(&log), [r#"echo({"text":"ok"})"#]);

    let mut input = vec![json!({"role":"user","content":"Echo and add."})];
    input.extend(first["output"].as_array().unwrap().iter().cloned());
    input.push(approval(&request, false, Some("no sums")));
    let events = h.stream_unchecked(json!({"model":"m","input":input,"tools":[declaration],"store":false})).await;
    let second = final_response(&events);
    assert_eq!(output_types(second), ["message"], "{second}");
    check_events(&events).await;
    assert_eq!(logged_calls(&log), [r#"echo({"text":"ok"})"#], "the denied call never reached the server");
    let seen = &h.upstream_messages("m")[1];
    assert_eq!(
        tool_result(seen, request["id"].as_str().unwrap()),
        "The user denied this call; it did not run. Reason: no sums"
    );
    assert_results_follow_their_calls(seen);
    wait_for_metric(&h, r#"gw_responses_mcp_approval_responses_total{decision="denied",server_label="(remote)"} 1"#)
        .await;
}

/// The npm `server-everything` and Node.js are installed (`scripts/setup-mcp-test-servers`).
fn server_everything() -> Result<PathBuf, String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("crates/mcp-test-servers/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    respgw_testkit::prerequisites::program("node", "Debian package nodejs")?;
    respgw_testkit::prerequisites::file(&path, "scripts/setup-mcp-test-servers installs it")?;
    Ok(path)
}

#[tokio::test]
async fn the_ecosystem_server_everything_waits_for_approval_too() {
    respgw_testkit::skip_unless!(server_everything().map(drop));
    let Ok(everything) = server_everything() else { return };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcp.json");
    let servers = json!({"everything": {"command": "node", "args": [everything, "stdio"]}});
    std::fs::write(&config, json!({"mcpServers": servers}).to_string()).unwrap();
    let h = Harness::start_with(
        &["--mcp-config", config.to_str().unwrap()],
        &[("GW_MCP_HOSTED_STARTUP_TIMEOUT_SEC", "20")],
    )
    .await;
    h.scenario("m", vec![tool_turn(&[("mcp__everything__echo", json!({"message":"approved echo"}))]), answer("Done.")]);
    let tools =
        json!([{"type":"mcp","server_label":"everything","require_approval":{"always":{"tool_names":["echo"]}}}]);
    let (status, first) = h.create(json!({"model":"m","input":"Echo.","tools":tools})).await;
    assert_eq!(status, 200, "{first}");
    let request = items(&first, "mcp_approval_request")[0].clone();
    assert!(items(&first, "mcp_call").is_empty(), "{first}");
    let (status, second) = h
        .create(json!({"model":"m","previous_response_id":first["id"],"tools":tools,
            "input":[approval(&request, true, None)]}))
        .await;
    assert_eq!(status, 200, "{second}");
    let call = items(&second, "mcp_call")[0];
    assert_eq!(call["approval_request_id"], request["id"]);
    assert!(call["output"].as_str().is_some_and(|o| o.contains("approved echo")), "{call}");
    let seen = tool_result(&h.upstream_messages("m")[1], request["id"].as_str().unwrap()).to_owned();
    assert!(seen.starts_with("The user approved this call.") && seen.contains("approved echo"), "{seen}");
}

#[tokio::test]
async fn the_agents_sdk_hosted_mcp_tool_approves_one_call_and_rejects_another() {
    respgw_testkit::skip_unless!(common::python_env());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls.jsonl");
    let h = builtin_gateway(dir.path(), &log).await;
    let both = || tool_turn(&[("mcp__local__echo", json!({"text":"hi"})), ("mcp__local__add", json!({"a":2,"b":3}))]);
    h.scenario("agents-approvals", vec![both(), answer("Echoed hi; adding was rejected.")]);
    h.scenario("agents-approvals-stream", vec![both(), answer("Echoed hi; adding was rejected.")]);

    let run = common::run_sdk_script("agents_mcp_approvals_check.py", h.gateway.base_url(), &[]).await;
    assert!(
        run.succeeded && run.stdout.contains("agents approvals checked"),
        "Agents SDK run failed:\n{}\n{}\n--- gateway log ---\n{}",
        run.stdout,
        run.stderr,
        h.gateway.stderr_text()
    );
    let reports: Vec<Value> = run.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    for (mode, model) in [("run", "agents-approvals"), ("stream", "agents-approvals-stream")] {
        let report = reports.iter().find(|r| r["mode"] == mode).unwrap_or_else(|| panic!("no {mode} report"));
        assert_eq!(report["final_output"], "Echoed hi; adding was rejected.", "{mode}: {report}");
        let asked: Vec<&str> = report["asked"].as_array().unwrap().iter().filter_map(|a| a["name"].as_str()).collect();
        assert_eq!(asked, ["echo", "add"], "{mode}: the callback saw both requests: {report}");
        let sent = h.upstream_messages(model);
        assert_eq!(sent.len(), 2, "{mode}: one turn made the calls, one answered");
        let ids: Vec<&str> = report["asked"].as_array().unwrap().iter().filter_map(|a| a["id"].as_str()).collect();
        assert_eq!(tool_result(&sent[1], ids[0]), "The user approved this call.\n\nhi", "{mode}");
        assert_eq!(
            tool_result(&sent[1], ids[1]),
            "The user denied this call; it did not run. Reason: adding is not allowed",
            "{mode}"
        );
        assert_results_follow_their_calls(&sent[1]);
        assert_append_only(&sent);
    }
    assert_eq!(logged_calls(&log), [r#"echo({"text":"hi"})"#, r#"echo({"text":"hi"})"#], "add never ran");
}
