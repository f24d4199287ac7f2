//! Built-in MCP end to end: the real supervisor starts the real MCP helper, which runs the
//! project's own rmcp test servers (stdio) and the ecosystem `@modelcontextprotocol/server-everything`
//! (npm, `scripts/setup-mcp-test-servers`); the replay upstream makes the model call their tools.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Harness, assert_append_only, assert_results_follow_their_calls, final_response, kinds, tool_turn, turns};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

/// A binary built next to `respgw` by `cargo test --workspace`.
fn sibling_bin(name: &str) -> PathBuf {
    let bin = common::respgw_bin().with_file_name(name);
    assert!(bin.exists(), "{} is missing: run the suite with scripts/test (cargo test --workspace)", bin.display());
    bin
}

/// The npm server and Node.js are installed (`scripts/setup-mcp-test-servers`).
fn server_everything_installed() -> Result<(), String> {
    respgw_testkit::prerequisites::program("node", "Debian package nodejs")?;
    respgw_testkit::prerequisites::file(&server_everything(), "scripts/setup-mcp-test-servers installs it")
}

fn server_everything() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("crates/mcp-test-servers/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// Write an MCP config with the given servers; returns its path (kept alive by `dir`).
fn config(dir: &Path, servers: Value) -> String {
    let path = dir.join("mcp.json");
    std::fs::write(&path, json!({"mcpServers": servers}).to_string()).unwrap();
    path.display().to_string()
}

fn local_servers() -> Value {
    json!({
        "local": {"command": sibling_bin("respgw-mcp-test-stdio")},
        "broken": {"command": "/nonexistent/mcp-server"}
    })
}

async fn harness(dir: &Path, servers: Value, extra_env: &[(&str, &str)]) -> Harness {
    let path = config(dir, servers);
    let mut env = vec![("GW_MCP_HOSTED_STARTUP_TIMEOUT_SEC", "5")];
    env.extend_from_slice(extra_env);
    Harness::start_with(&["--mcp-config", &path], &env).await
}

/// A model turn that calls `function` with `arguments`, then a final answer.
fn calls(function: &str, arguments: Value) -> Vec<Step> {
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",
        "function":{"name":function,"arguments":arguments.to_string()}}]},"finish_reason":"tool_calls"}]});
    vec![Step::Sse(vec![format!("data: {call}\n\n"), "data: [DONE]\n\n".into()]), Step::text(&["Done."], "stop", None)]
}

fn mcp_tool(label: &str) -> Value {
    json!({"type":"mcp","server_label":label,"require_approval":"never"})
}

fn item<'a>(response: &'a Value, kind: &str) -> &'a Value {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind}: {response}"))
}

#[tokio::test]
async fn a_builtin_mcp_call_streams_the_reference_events_and_feeds_the_result_back() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), local_servers(), &[]).await;
    h.scenario("m", calls("mcp__local__echo", json!({"text":"hello mcp"})));
    let events = h.stream_unchecked(json!({"model":"m","input":"echo it","tools":[mcp_tool("local")]})).await;
    let k = kinds(&events);
    let listing: Vec<&str> = k.iter().copied().filter(|t| t.contains("mcp_list_tools")).collect();
    assert_eq!(listing, ["response.mcp_list_tools.in_progress", "response.mcp_list_tools.completed"]);
    let call_events: Vec<&str> = k.iter().copied().filter(|t| t.starts_with("response.mcp_call")).collect();
    assert_eq!(call_events.first(), Some(&"response.mcp_call.in_progress"));
    assert_eq!(
        &call_events[call_events.len() - 2..],
        ["response.mcp_call_arguments.done", "response.mcp_call.completed"]
    );
    assert!(call_events.contains(&"response.mcp_call_arguments.delta"));

    let response = final_response(&events);
    assert_eq!(response["status"], "completed");
    let listing = item(response, "mcp_list_tools");
    assert_eq!(listing["server_label"], "local");
    assert!(listing["tools"].as_array().unwrap().iter().any(|t| t["name"] == "echo"));
    let call = item(response, "mcp_call");
    assert_eq!((call["server_label"].as_str(), call["name"].as_str()), (Some("local"), Some("echo")));
    assert_eq!(call["status"], "completed");
    assert_eq!(call["output"], "hello mcp");
    assert!(call["error"].is_null());

    let sent = h.upstream_bodies("m");
    let offered: Vec<&str> =
        sent[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(offered.contains(&"mcp__local__echo") && offered.contains(&"mcp__local__ref_schema"), "{offered:?}");
    let ref_schema = sent[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__local__ref_schema")
        .unwrap();
    let parameters = ref_schema["function"]["parameters"].to_string();
    assert!(
        !parameters.contains("$ref") && !parameters.contains("$defs"),
        "schemas are made safe for the upstream: {parameters}"
    );
    assert_eq!(
        ref_schema["function"]["parameters"]["properties"]["point"]["properties"]["x"],
        json!({"type":"number"})
    );
    let tool_message = sent[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(tool_message["content"], "hello mcp");
}

#[tokio::test]
async fn tool_failures_and_bad_arguments_are_failed_items_not_failed_responses() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), local_servers(), &[]).await;
    let mut steps = calls("mcp__local__fail", json!({"message":"the tool broke"}));
    steps.extend(calls("mcp__local__add", json!({"a":"not a number","b":2})));
    h.scenario("m", steps);
    for expected in ["the tool broke", "do not match the input schema"] {
        let events = h.stream_unchecked(json!({"model":"m","input":"x","tools":[mcp_tool("local")]})).await;
        assert!(kinds(&events).contains(&"response.mcp_call.failed"));
        let failed = events.iter().find(|e| e["type"] == "response.mcp_call.failed").unwrap();
        assert!(failed.get("error").is_none(), "no `error` key in the event: SDKs would treat it as fatal");
        let response = final_response(&events);
        assert_eq!(response["status"], "completed");
        let call = item(response, "mcp_call");
        assert_eq!(call["status"], "failed");
        assert!(call["error"].as_str().unwrap().contains(expected), "{call}");
    }
}

#[tokio::test]
async fn continuations_list_tools_once_and_show_earlier_calls_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), local_servers(), &[]).await;
    let mut steps = calls("mcp__local__echo", json!({"text":"first"}));
    steps.push(Step::text(&["Second answer."], "stop", None));
    h.scenario("m", steps);
    let (_, first) = h.create(json!({"model":"m","input":"one","tools":[mcp_tool("local")]})).await;
    let (status, second) = h
        .create(json!({"model":"m","input":"two","tools":[mcp_tool("local")],"previous_response_id":first["id"]}))
        .await;
    assert_eq!(status, 200, "{second}");
    assert!(
        second["output"].as_array().unwrap().iter().all(|i| i["type"] != "mcp_list_tools"),
        "listed once per conversation"
    );
    let messages = h.upstream_bodies("m")[2]["messages"].clone();
    assert!(messages.to_string().contains("mcp__local__echo"), "earlier MCP calls are in the history: {messages}");
    assert!(messages.to_string().contains("first"));
}

#[tokio::test]
async fn parallel_calls_share_one_assistant_turn_and_every_round_extends_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), local_servers(), &[]).await;
    let echo = |text: &str| ("mcp__local__echo", json!({"text": text}));
    h.scenario(
        "m",
        vec![
            tool_turn(&[echo("a"), echo("b")]),
            tool_turn(&[echo("c")]),
            tool_turn(&[echo("d"), echo("e")]),
            Step::text(&["Done."], "stop", None),
            Step::text(&["Second answer."], "stop", None),
            Step::text(&["Second answer."], "stop", None),
        ],
    );
    let (status, first) = h.create(json!({"model":"m","input":"echo","tools":[mcp_tool("local")]})).await;
    assert_eq!(status, 200, "{first}");
    let sent = h.upstream_messages("m");
    assert_eq!(sent.len(), 4);
    assert_eq!(turns(&sent[1]), ["user", "assistant(mcp__local__echo,mcp__local__echo)", "tool", "tool"]);
    assert_eq!(
        turns(&sent[3]),
        [
            "user",
            "assistant(mcp__local__echo,mcp__local__echo)",
            "tool",
            "tool",
            "assistant(mcp__local__echo)",
            "tool",
            "assistant(mcp__local__echo,mcp__local__echo)",
            "tool",
            "tool"
        ]
    );
    let results: Vec<&str> =
        sent[3].iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(results, ["a", "b", "c", "d", "e"]);
    assert_results_follow_their_calls(&sent[3]);

    // The continuation's first request: the last round's messages, the answer, the new input.
    let (status, second) = h
        .create(json!({"model":"m","input":"two","tools":[mcp_tool("local")],"previous_response_id":first["id"]}))
        .await;
    assert_eq!(status, 200, "{second}");
    let sent = h.upstream_messages("m");
    let mut expected = sent[3].clone();
    expected.push(json!({"role":"assistant","content":"Done."}));
    expected.push(json!({"role":"user","content":"two"}));
    assert_eq!(sent[4], expected);
    // Every round, the continuation included, extends the request before it byte for byte.
    assert_append_only(&sent);

    // The output sent back by a stateless client gives the very same messages.
    let mut input = vec![json!({"role":"user","content":"echo"})];
    input.extend(first["output"].as_array().unwrap().iter().cloned());
    input.push(json!({"role":"user","content":"two"}));
    let (status, replayed) =
        h.create(json!({"model":"m","input":input,"store":false,"tools":[mcp_tool("local")]})).await;
    assert_eq!(status, 200, "{replayed}");
    let sent = h.upstream_messages("m");
    assert_eq!(serde_json::to_string(&sent[5]).unwrap(), serde_json::to_string(&sent[4]).unwrap());
}

#[tokio::test]
async fn a_client_function_turn_after_a_gateway_tool_turn_is_a_turn_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), local_servers(), &[]).await;
    h.scenario(
        "m",
        vec![
            tool_turn(&[("mcp__local__echo", json!({"text": "looked up"}))]),
            tool_turn(&[("lookup", json!({"key": "k"}))]),
            Step::text(&["Found."], "stop", None),
            Step::text(&["Found."], "stop", None),
        ],
    );
    let tools = json!([mcp_tool("local"),
        {"type":"function","name":"lookup","parameters":{"type":"object","properties":{"key":{"type":"string"}}}}]);
    let (status, first) = h.create(json!({"model":"m","input":"find k","tools":tools})).await;
    assert_eq!(status, 200, "{first}");
    let call = item(&first, "function_call");
    let output = json!({"type":"function_call_output","call_id":call["call_id"],"output":"v"});
    let (status, second) =
        h.create(json!({"model":"m","input":[output],"tools":tools,"previous_response_id":first["id"]})).await;
    assert_eq!(status, 200, "{second}");
    let sent = h.upstream_messages("m");
    assert_eq!(turns(&sent[1]), ["user", "assistant(mcp__local__echo)", "tool"]);
    assert_eq!(turns(&sent[2]), ["user", "assistant(mcp__local__echo)", "tool", "assistant(lookup)", "tool"]);
    assert_results_follow_their_calls(&sent[2]);
    assert_append_only(&sent);

    let mut input = vec![json!({"role":"user","content":"find k"})];
    input.extend(first["output"].as_array().unwrap().iter().cloned());
    input.push(output);
    let (status, replayed) = h.create(json!({"model":"m","input":input,"store":false,"tools":tools})).await;
    assert_eq!(status, 200, "{replayed}");
    let sent = h.upstream_messages("m");
    assert_eq!(serde_json::to_string(&sent[3]).unwrap(), serde_json::to_string(&sent[2]).unwrap());
}

#[tokio::test]
async fn an_unknown_or_down_server_is_a_422_before_anything_streams() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), local_servers(), &[]).await;
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[mcp_tool("nope")]})).await;
    assert_eq!((status, body["error"]["type"].as_str()), (422, Some("bad_input")));
    assert!(body["error"]["message"].as_str().unwrap().contains("Unknown MCP server_label"));
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[mcp_tool("broken")]})).await;
    assert_eq!(status, 422, "{body}");
    let (status, _) = h
        .create(json!({"model":"m","input":"x","tools":[mcp_tool("local")],"tool_choice":{"type":"mcp","server_label":"local","name":"nope"}}))
        .await;
    assert_eq!(status, 422);
}

#[tokio::test]
async fn discovery_routes_report_servers_tools_and_their_states() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), local_servers(), &[]).await;
    let (status, list) = h.get("/v1/mcp/servers").await;
    assert_eq!(status, 200);
    let by_label = |l: &str| list["data"].as_array().unwrap().iter().find(|s| s["server_label"] == l).unwrap().clone();
    assert_eq!(by_label("local")["available"], true);
    assert_eq!(by_label("broken")["available"], false);
    assert!(by_label("broken")["last_error"].as_str().is_some());
    let (status, tools) = h.get("/v1/mcp/servers/local/tools").await;
    assert_eq!(status, 200);
    assert!(tools["data"].as_array().unwrap().iter().any(|t| t["name"] == "echo"));
    assert_eq!(h.get("/v1/mcp/servers/nope/tools").await.0, 404);
    assert_eq!(h.get("/v1/mcp/servers/broken/tools").await.0, 409);

    // Startup outcomes reach the gateway's metrics (polled from the helper).
    let mut text = String::new();
    for _ in 0..50 {
        text = h.metrics().await;
        if text.contains(r#"server_label="broken",status="error""#) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(text.contains(r#"gw_responses_mcp_server_startup_total{server_label="local",status="ok"}"#), "{text}");
    assert!(text.contains(r#"gw_responses_mcp_server_startup_total{server_label="broken",status="error"}"#));
}

#[tokio::test]
async fn without_mcp_config_discovery_is_empty() {
    let h = Harness::start().await;
    assert_eq!(h.get("/v1/mcp/servers").await, (200, json!({"object":"list","data":[]})));
    assert_eq!(h.get("/v1/mcp/servers/any/tools").await.0, 404);
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[mcp_tool("any")]})).await;
    assert_eq!((status, body["error"]["type"].as_str()), (422, Some("bad_input")));
}

#[tokio::test]
async fn an_unreachable_helper_is_503_on_discovery() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let h = Harness::start_with(&["--mcp-helper-url", &format!("http://127.0.0.1:{port}")], &[]).await;
    assert_eq!(h.get("/v1/mcp/servers").await.0, 503);
    assert_eq!(h.get("/v1/mcp/servers/x/tools").await.0, 503);
}

#[tokio::test]
async fn a_killed_helper_fails_calls_as_items_then_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness(dir.path(), json!({"local": {"command": sibling_bin("respgw-mcp-test-stdio")}}), &[]).await;
    let mut steps = calls("mcp__local__echo", json!({"text":"before"}));
    // The call that is running when the helper dies sleeps far longer than the test needs, so the
    // kill always lands while it is in flight, however loaded the machine is.
    steps.extend(calls("mcp__local__slow", json!({"ms": 60_000})));
    steps.extend(calls("mcp__local__echo", json!({"text":"after"})));
    h.scenario("m", steps);
    let run = |text: &'static str| {
        let h = &h;
        async move {
            let (status, body) = h.create(json!({"model":"m","input":text,"tools":[mcp_tool("local")]})).await;
            (status, body)
        }
    };
    let (_, before) = run("before").await;
    assert_eq!(item(&before, "mcp_call")["status"], "completed");

    let helper = common::children(h.gateway.pid(), "mcp-helper");
    assert_eq!(helper.len(), 1);
    let requested = || async { common::sample(&h.metrics().await, "gw_responses_tool_calls_requested_total") };
    let requested_before = requested().await;
    let during = tokio::spawn({
        let url = h.url("/v1/responses");
        async move {
            respgw_testkit::gateway::post_json(&url, &json!({"model":"m","input":"during","tools":[mcp_tool("local")]}))
                .await
                .unwrap()
        }
    });
    // The model has asked for the slow call once the counter moves; give the dispatch a moment.
    let mut dispatched = false;
    for _ in 0..250 {
        if requested().await > requested_before {
            dispatched = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(dispatched, "the model's slow call was never requested");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = kill(Pid::from_raw(helper[0] as libc::pid_t), Signal::SIGKILL);
    let (status, _, during) = during.await.unwrap();
    assert_eq!(status, 200, "{during}");
    let call = item(&during, "mcp_call");
    assert_eq!(call["status"], "failed", "a dead helper fails the call as an item: {call}");
    assert!(!call["error"].as_str().unwrap_or_default().is_empty());
    // The supervisor restarts the helper (and with it the stdio server); calls work again.
    let mut after = Value::Null;
    for _ in 0..100 {
        let (status, servers) = h.get("/v1/mcp/servers").await;
        if status == 200 && servers["data"][0]["available"] == true {
            let (status, body) = run("after").await;
            assert_eq!(status, 200, "{body}");
            after = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(item(&after, "mcp_call")["status"], "completed", "{after}");
    assert!(h.wait_for_log("the MCP helper died; restarting it").await);
}

#[tokio::test]
async fn the_ecosystem_server_everything_works_through_the_gateway() {
    respgw_testkit::skip_unless!(server_everything_installed());
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({"everything": {"command": "node", "args": [server_everything(), "stdio"]}});
    let h = harness(dir.path(), servers, &[("GW_MCP_HOSTED_STARTUP_TIMEOUT_SEC", "20")]).await;
    h.scenario("m", calls("mcp__everything__echo", json!({"message":"from the gateway"})));
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[mcp_tool("everything")]})).await;
    assert_eq!(status, 200, "{body}");
    let call = item(&body, "mcp_call");
    assert_eq!(call["status"], "completed", "{call}");
    assert!(call["output"].as_str().unwrap().contains("from the gateway"));
}

#[tokio::test]
async fn an_invalid_config_is_a_clear_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp.json");
    std::fs::write(&path, r#"{"mcpServers": {"bad label!": {"command": "x"}}}"#).unwrap();
    let upstream = respgw_testkit::upstream::ReplayUpstream::start().await.unwrap();
    let mut args = common::serve_args(&upstream.base_url(), &["--mcp-config", path.to_str().unwrap()]);
    args.extend(["--db-path".into(), dir.path().join("x.db").display().to_string()]);
    let out = tokio::process::Command::new(common::respgw_bin())
        .args(&args)
        .envs(common::quiet_env())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bad label!") && stderr.contains("mcp.json"), "{stderr}");
}

#[tokio::test]
async fn tool_rounds_and_tool_output_fed_to_the_model_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let servers = json!({"local": {"command": sibling_bin("respgw-mcp-test-stdio")}});
    let h = harness(dir.path(), servers, &[("GW_MAX_TOOL_ROUNDS", "1"), ("GW_MAX_TOOL_OUTPUT_BYTES", "10")]).await;
    h.scenario("m", calls("mcp__local__echo", json!({"text":"0123456789abcdefghij"})));
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[mcp_tool("local")]})).await;
    assert_eq!(status, 200, "{body}");
    // The client sees the whole tool output …
    assert_eq!(item(&body, "mcp_call")["output"], "0123456789abcdefghij");
    let sent = h.upstream_bodies("m");
    assert_eq!(sent.len(), 2, "one tool round, then the answer");
    // … the model sees the first 10 bytes and is told the rest was cut.
    let tool_message = sent[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(
        tool_message["content"],
        "0123456789\n[output truncated by the gateway: the first 10 of 20 bytes are shown]"
    );
    // After the last allowed round the model is made to answer.
    assert_eq!(sent[0]["tool_choice"], "auto");
    assert_eq!(sent[1]["tool_choice"], "none");
}

/// `respgw mcp-helper` run on its own (as `respgw-mcp-helper.service` runs it) on `port`.
fn spawn_helper(config: &str, port: u16) -> tokio::process::Child {
    tokio::process::Command::new(common::respgw_bin())
        .args(["mcp-helper", "--config", config, "--listen", &format!("127.0.0.1:{port}")])
        .env("GW_MCP_BUILTIN_STARTUP_TIMEOUT_SEC", "5")
        .kill_on_drop(true)
        .spawn()
        .expect("the helper starts")
}

/// Wait until the helper on `port` reports its server `local` available.
async fn wait_for_helper(port: u16) {
    let client = respgw_testkit::gateway::http_client();
    for _ in 0..150 {
        if let Ok(reply) = client.get(format!("http://127.0.0.1:{port}/servers")).send().await
            && let Ok(servers) = reply.json::<Value>().await
            && servers.to_string().contains("\"available\":true")
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the MCP helper on port {port} never reported its server available");
}

#[tokio::test]
async fn an_independently_run_helper_restarts_while_the_gateway_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), json!({"local": {"command": sibling_bin("respgw-mcp-test-stdio")}}));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut helper = spawn_helper(&path, port);
    wait_for_helper(port).await;
    let h = Harness::start_with(&["--mcp-helper-url", &format!("http://127.0.0.1:{port}")], &[]).await;
    let mut steps = calls("mcp__local__echo", json!({"text":"before"}));
    steps.extend(calls("mcp__local__echo", json!({"text":"after"})));
    h.scenario("m", steps);
    h.scenario("plain", vec![Step::text(&["Still here."], "stop", None)]);
    let with_tool = |text: &'static str| json!({"model":"m","input":text,"tools":[mcp_tool("local")]});

    let (status, before) = h.create(with_tool("before")).await;
    assert_eq!(status, 200, "{before}");
    assert_eq!(item(&before, "mcp_call")["status"], "completed", "{before}");

    // The helper stops (as `systemctl restart respgw-mcp-helper` stops it): the gateway keeps
    // serving everything that does not need it, and says the helper is unreachable.
    helper.kill().await.unwrap();
    helper.wait().await.unwrap();
    assert_eq!(h.get("/health").await.0, 200);
    let (status, plain) = h.create(json!({"model":"plain","input":"hello"})).await;
    assert_eq!((status, plain["status"].as_str()), (200, Some("completed")), "{plain}");
    assert_eq!(h.get("/v1/mcp/servers").await.0, 503);

    // The helper is back on the same address: Built-in MCP works again, without a gateway restart.
    let _helper = spawn_helper(&path, port);
    wait_for_helper(port).await;
    let (status, after) = h.create(with_tool("after")).await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(item(&after, "mcp_call")["status"], "completed", "{after}");
    assert_eq!(h.get("/v1/mcp/servers").await.0, 200);
}
