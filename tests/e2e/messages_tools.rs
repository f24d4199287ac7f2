//! Gateway tools for Messages clients end to end: `web_search_20250305` against a loopback
//! SearXNG stand-in, `code_execution_20250522` in the real sandbox, and `mcp_servers` dialling the
//! project's MCP test server — each a round trip over the scripted upstream (JSON and SSE), with
//! the upstream's request log showing that the tool's result reached the model, and a second
//! request replaying the reply's blocks so the model is given the same history again.

use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::header;
use axum::response::IntoResponse;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

use crate::common::{Harness, tool_turn};
use crate::mcp_remote::McpServer;

/// A SearXNG stand-in on a free loopback port: one hit per search, at `/hit` on itself. Records
/// each search's query.
async fn searxng() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://127.0.0.1:{}", listener.local_addr().expect("addr").port());
    let app = axum::Router::new().fallback(search).with_state((seen.clone(), base.clone()));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

async fn search(State((seen, base)): State<(Arc<Mutex<Vec<String>>>, String)>, request: Request) -> impl IntoResponse {
    let query = request.uri().query().unwrap_or_default().to_owned();
    let q = query.split('&').find_map(|pair| pair.strip_prefix("q=")).unwrap_or_default().to_owned();
    seen.lock().expect("lock").push(q.clone());
    let body = json!({"query": q, "results": [
        {"url": format!("{base}/hit"), "title": format!("Hit for {q}"), "content": "What the page says."}]});
    ([(header::CONTENT_TYPE, "application/json")], body.to_string())
}

/// A gateway offering web search through the stand-in, Remote MCP to loopback, and the sandbox.
async fn gateway(searxng_url: &str) -> Harness {
    Harness::start_with(
        &["--web-search-profile", "searxng", "--web-search-searxng-url", searxng_url],
        &[
            ("GW_WEB_SEARCH_ALLOW_PRIVATE_ADDRESSES", "true"),
            ("GW_MCP_REQUEST_REMOTE_URL_CHECKS", "false"),
            ("GW_CODE_INTERPRETER", "spawn"),
        ],
    )
    .await
}

/// Non-stream `POST /v1/messages`.
async fn create(h: &Harness, body: &Value) -> (u16, Value) {
    let (status, _, reply) =
        respgw_testkit::gateway::post_json(&h.url("/v1/messages"), body).await.expect("request completes");
    (status, reply)
}

/// Streaming `POST /v1/messages`: the events' data, after checking each frame's `event:` names
/// its data's `type` and the stream ends with `message_stop`.
async fn stream(h: &Harness, body: &Value) -> Vec<Value> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let response = reqwest::Client::new().post(h.url("/v1/messages")).json(&body).send().await.expect("request");
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.expect("stream reads");
    let events: Vec<Value> = text
        .trim_end()
        .split("\n\n")
        .map(|frame| {
            let (event, data) = frame.split_once('\n').unwrap_or_else(|| panic!("bad frame: {frame:?}"));
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").expect("data line")).expect("JSON");
            assert_eq!(Some(data["type"].as_str().unwrap_or_default()), event.strip_prefix("event: "), "{frame}");
            data
        })
        .collect();
    assert_eq!(events.last().map(|e| e["type"].clone()), Some(json!("message_stop")), "{text}");
    events
}

/// The message a client accumulates from stream events, as the SDKs do.
fn accumulate(events: &[Value]) -> Value {
    let mut message = Value::Null;
    let mut partial: Vec<String> = Vec::new();
    for event in events {
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => message = event["message"].clone(),
            "content_block_start" => {
                message["content"].as_array_mut().unwrap().push(event["content_block"].clone());
                partial.push(String::new());
            }
            "content_block_delta" => {
                let index = event["index"].as_u64().unwrap() as usize;
                let delta = &event["delta"];
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => {
                        let text = format!(
                            "{}{}",
                            message["content"][index]["text"].as_str().unwrap(),
                            delta["text"].as_str().unwrap()
                        );
                        message["content"][index]["text"] = json!(text);
                    }
                    "citations_delta" => {
                        let block = message["content"][index].as_object_mut().unwrap();
                        block
                            .entry("citations")
                            .or_insert(json!([]))
                            .as_array_mut()
                            .unwrap()
                            .push(delta["citation"].clone());
                    }
                    "input_json_delta" => {
                        partial[index].push_str(delta["partial_json"].as_str().unwrap());
                        message["content"][index]["input"] = serde_json::from_str(&partial[index]).unwrap_or(json!({}));
                    }
                    other => panic!("unexpected delta {other}"),
                }
            }
            "message_delta" => {
                message["stop_reason"] = event["delta"]["stop_reason"].clone();
                for (key, value) in event["usage"].as_object().unwrap() {
                    message["usage"][key] = value.clone();
                }
            }
            _ => {}
        }
    }
    message
}

/// The block types of a message's content.
fn block_types(message: &Value) -> Vec<&str> {
    message["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect()
}

/// The `role: "tool"` messages of an upstream request.
fn tool_messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").cloned().collect()
}

/// The names of the tool calls of an upstream request's assistant messages.
fn called(body: &Value) -> Vec<String> {
    let messages = body["messages"].as_array().unwrap();
    let calls = messages.iter().filter_map(|m| m["tool_calls"].as_array()).flatten();
    calls.map(|c| c["function"]["name"].as_str().unwrap().to_owned()).collect()
}

/// The request a client sends next: the conversation so far, the reply's blocks as the
/// assistant's message, then a new user message.
fn replay(first: &Value, reply: &Value) -> Value {
    let mut next = first.clone();
    let messages = next["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": reply["content"]}));
    messages.push(json!({"role": "user", "content": "Thanks. And then?"}));
    next
}

#[tokio::test]
async fn web_search_round_trip_and_replay() {
    let (base, seen) = searxng().await;
    let h = gateway(&base).await;
    h.scenario(
        "ws",
        vec![
            tool_turn(&[("web_search", json!({"action": "search", "query": "async_rust"}))]),
            Step::text(&["Rust has async ([the hit](", &format!("{base}/hit"), ")."], "stop", None),
            Step::text(&["Nothing more."], "stop", None),
        ],
    );
    let first = json!({"model": "ws", "max_tokens": 256,
        "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
        "messages": [{"role": "user", "content": "What about async in Rust?"}]});
    let (status, reply) = create(&h, &first).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(block_types(&reply), ["server_tool_use", "web_search_tool_result", "text"], "{reply:#}");
    let call = &reply["content"][0];
    assert_eq!((call["name"].as_str(), &call["input"]), (Some("web_search"), &json!({"query": "async_rust"})));
    assert!(call["id"].as_str().unwrap().starts_with("srvtoolu_ws_"), "{call}");
    let result = &reply["content"][1];
    assert_eq!(result["tool_use_id"], call["id"]);
    let hit = &result["content"][0];
    assert_eq!(
        (hit["type"].as_str(), hit["url"].as_str(), hit["title"].as_str()),
        (Some("web_search_result"), Some(format!("{base}/hit").as_str()), Some("Hit for async_rust"))
    );
    assert!(hit["encrypted_content"].as_str().is_some_and(|c| !c.is_empty()), "{hit}");
    // The link to the page is cited with what the model read of it.
    assert_eq!(
        reply["content"][2]["citations"],
        json!([{"type": "web_search_result_location", "url": format!("{base}/hit"), "title": "Hit for async_rust",
                "cited_text": "What the page says.", "encrypted_index": reply["content"][2]["citations"][0]["encrypted_index"]}])
    );
    assert_eq!(reply["stop_reason"], "end_turn");
    assert_eq!(reply["usage"]["server_tool_use"], json!({"web_search_requests": 1, "web_fetch_requests": 0}));
    assert_eq!(seen.lock().unwrap().as_slice(), ["async_rust"]);

    // The model was offered the gateway's function, searched once, and read the hit.
    let sent = h.upstream_bodies("ws");
    assert_eq!(sent[0]["tools"][0]["function"]["name"], "web_search");
    let searched = tool_messages(&sent[1]);
    assert_eq!(searched.len(), 1);
    assert!(searched[0]["content"].as_str().unwrap().contains("What the page says."), "{searched:?}");

    // Replayed, the blocks give the model the same call and the same result; nothing is searched.
    let (status, again) = create(&h, &replay(&first, &reply)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(block_types(&again), ["text"]);
    let sent = h.upstream_bodies("ws");
    assert_eq!(sent.len(), 3);
    assert_eq!(tool_messages(&sent[2]), searched);
    assert_eq!(called(&sent[2]), ["web_search"]);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn web_search_streams_its_call_and_result_blocks() {
    let (base, _) = searxng().await;
    let h = gateway(&base).await;
    h.scenario(
        "ws",
        vec![
            tool_turn(&[("web_search", json!({"action": "search", "query": "tokio"}))]),
            Step::text(&["Tokio is a runtime, see [this](", &format!("{base}/hit"), ")."], "stop", None),
        ],
    );
    let body = json!({"model": "ws", "max_tokens": 256,
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        "messages": [{"role": "user", "content": "What is tokio?"}]});
    let events = stream(&h, &body).await;
    let sequence: Vec<String> = events
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("content_block"))
        .map(|e| {
            let what = e["content_block"]["type"].as_str().or(e["delta"]["type"].as_str()).unwrap_or("");
            format!("{} {} {what}", e["type"].as_str().unwrap(), e["index"])
        })
        .collect();
    assert_eq!(
        sequence[..5],
        [
            "content_block_start 0 server_tool_use",
            "content_block_delta 0 input_json_delta",
            "content_block_stop 0 ",
            "content_block_start 1 web_search_tool_result",
            "content_block_stop 1 ",
        ]
        .map(String::from)
    );
    let message = accumulate(&events);
    assert_eq!(block_types(&message), ["server_tool_use", "web_search_tool_result", "text"]);
    assert_eq!(message["content"][0]["input"], json!({"query": "tokio"}));
    assert_eq!(message["content"][1]["content"][0]["title"], "Hit for tokio");
    assert_eq!(message["usage"]["server_tool_use"]["web_search_requests"], 1);
    assert_eq!(message["content"][2]["citations"][0]["cited_text"], "What the page says.");
    assert!(tool_messages(&h.upstream_bodies("ws")[1])[0]["content"].as_str().unwrap().contains("Hit for tokio"));
}

#[tokio::test]
async fn code_execution_round_trip_and_replay() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let (base, _) = searxng().await;
    let h = gateway(&base).await;
    assert!(h.wait_for_log("code_interpreter is enabled").await, "{}", h.gateway.stderr_text());
    h.scenario(
        "ci",
        vec![
            tool_turn(&[("code_interpreter", json!({"code": "print(6 * 7)"}))]),
            Step::text(&["It is 42."], "stop", None),
            Step::text(&["Still 42."], "stop", None),
        ],
    );
    let first = json!({"model": "ci", "max_tokens": 256,
        "tools": [{"type": "code_execution_20250522", "name": "code_execution"}],
        "messages": [{"role": "user", "content": "Compute 6 times 7."}]});
    let events = stream(&h, &first).await;
    let reply = accumulate(&events);
    assert_eq!(block_types(&reply), ["server_tool_use", "code_execution_tool_result", "text"], "{reply:#}");
    assert_eq!(reply["content"][0]["name"], "code_execution");
    assert_eq!(reply["content"][0]["input"], json!({"code": "print(6 * 7)"}));
    let ran = &reply["content"][1]["content"];
    assert_eq!(
        (ran["type"].as_str(), ran["stdout"].as_str().map(str::trim), ran["return_code"].as_i64()),
        (Some("code_execution_result"), Some("42"), Some(0)),
        "{ran}"
    );
    let sent = h.upstream_bodies("ci");
    let ran_for_model = tool_messages(&sent[1]);
    assert_eq!(ran_for_model[0]["content"].as_str().map(str::trim), Some("42"));

    let (status, again) = create(&h, &replay(&first, &reply)).await;
    assert_eq!(status, 200, "{again}");
    let sent = h.upstream_bodies("ci");
    assert_eq!(sent.len(), 3, "replay runs no code");
    assert_eq!(tool_messages(&sent[2]), ran_for_model);
    assert_eq!(called(&sent[2]), ["code_interpreter"]);
}

#[tokio::test]
async fn mcp_connector_round_trip_stream_and_replay() {
    const TOKEN: &str = "mcp-token-for-messages";
    let server = McpServer::start(&["--require-token", TOKEN]);
    let (base, _) = searxng().await;
    let h = gateway(&base).await;
    h.scenario(
        "mcp",
        vec![
            tool_turn(&[("mcp__docs__echo", json!({"text": "hello from mcp"}))]),
            Step::text(&["It echoed."], "stop", None),
            Step::text(&["Done."], "stop", None),
        ],
    );
    let first = json!({"model": "mcp", "max_tokens": 256,
        "mcp_servers": [{"type": "url", "url": server.url("/mcp"), "name": "docs", "authorization_token": TOKEN,
                         "tool_configuration": {"allowed_tools": ["echo"]}}],
        "messages": [{"role": "user", "content": "Echo something."}]});
    let events = stream(&h, &first).await;
    let reply = accumulate(&events);
    assert_eq!(block_types(&reply), ["mcp_tool_use", "mcp_tool_result", "text"], "{reply:#}");
    let call = &reply["content"][0];
    assert_eq!(
        (call["name"].as_str(), call["server_name"].as_str(), &call["input"]),
        (Some("echo"), Some("docs"), &json!({"text": "hello from mcp"}))
    );
    assert!(call["id"].as_str().unwrap().starts_with("mcptoolu_"), "{call}");
    let result = &reply["content"][1];
    assert_eq!(result["tool_use_id"], call["id"]);
    assert_eq!(result["is_error"], false);
    assert_eq!(result["content"], json!([{"type": "text", "text": "hello from mcp"}]));

    // The model was offered the allowed tool only and read its result.
    let sent = h.upstream_bodies("mcp");
    let offered: Vec<&str> =
        sent[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["mcp__docs__echo"]);
    let echoed = tool_messages(&sent[1]);
    assert_eq!(echoed[0]["content"], "hello from mcp");

    // Replayed (as JSON this time), the call and its result reach the model as they were.
    let (status, again) = create(&h, &replay(&first, &reply)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(block_types(&again), ["text"]);
    let sent = h.upstream_bodies("mcp");
    assert_eq!(sent.len(), 3);
    assert_eq!(tool_messages(&sent[2]), echoed);
    assert_eq!(called(&sent[2]), ["mcp__docs__echo"]);
}

#[tokio::test]
async fn gateway_tools_not_enabled_and_bad_replays_are_refused_in_anthropics_shape() {
    let h =
        Harness::start_with(&[], &[("GW_CODE_INTERPRETER", "disabled"), ("GW_MCP_REQUEST_REMOTE_ENABLED", "false")])
            .await;
    let ask = |extra: Value| {
        let mut body = json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    for (extra, param) in [
        (json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}), "tools[0]"),
        (json!({"tools": [{"type": "code_execution_20250522", "name": "code_execution"}]}), "tools[0]"),
        (json!({"mcp_servers": [{"type": "url", "url": "http://127.0.0.1:9/mcp", "name": "docs"}]}), "mcp_servers[0]"),
        (json!({"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}), "tools[0].type"),
        (
            json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
                {"type": "server_tool_use", "id": "srvtoolu_ws_1", "name": "web_search", "input": {"query": "q"}}]}]}),
            "messages[1].content[0]",
        ),
    ] {
        let (status, reply) = create(&h, &ask(extra.clone())).await;
        assert_eq!(status, 400, "{extra} → {reply}");
        assert_eq!(reply["type"], "error");
        assert_eq!(reply["error"]["type"], "invalid_request_error");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(param), "{extra} → {message}");
    }
    assert!(h.upstream_bodies("m").is_empty(), "nothing reached the model");
}
