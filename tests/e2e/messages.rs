//! The Anthropic Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`, and
//! `GET /v1/models` for Anthropic clients), request side: raw HTTP against a real gateway, with
//! what the scripted upstream received asserted for every mapping — system blocks and system
//! entries, images, PDF documents, tool calls and results, `tool_choice`, thinking and effort,
//! stop sequences and `top_k`, metadata — plus keys as `x-api-key` or `Bearer`, and errors in
//! Anthropic's shape with `request-id` on every reply. Bad input is a 4xx, never a 5xx.

use crate::common;

use base64::Engine as _;
use common::{ALPHA, BETA, Harness, two_tenants};
use respgw_testkit::gateway::http_client;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

const VERSION: &str = "2023-06-01";

/// A reply: status, `request-id`, `Retry-After`, and the JSON body.
struct Reply {
    status: u16,
    request_id: Option<String>,
    retry_after: Option<String>,
    body: Value,
}

async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.expect("request completes");
    let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let (status, request_id, retry_after) = (response.status().as_u16(), header("request-id"), header("retry-after"));
    let text = response.text().await.expect("body reads");
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("non-JSON reply ({status}): {text}"));
    Reply { status, request_id, retry_after, body }
}

/// `POST {path}` as Claude Code sends it (`anthropic-version`, `anthropic-beta`, key as `x-api-key`
/// if any).
async fn post(h: &Harness, path: &str, key: Option<&str>, body: &Value) -> Reply {
    let mut request = http_client()
        .post(h.url(path))
        .header("anthropic-version", VERSION)
        .header("anthropic-beta", "claude-code-20250219,interleaved-thinking-2025-05-14,effort-2025-11-24")
        .json(body);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    send(request).await
}

async fn create(h: &Harness, body: Value) -> Reply {
    post(h, "/v1/messages?beta=true", None, &body).await
}

/// An Anthropic error body with this type.
fn assert_anthropic_error(reply: &Reply, status: u16, kind: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.body["type"], "error", "{}", reply.body);
    assert_eq!(reply.body["error"]["type"], kind, "{}", reply.body);
    assert!(reply.body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", reply.body);
    assert!(reply.request_id.is_some(), "a request-id on every reply");
}

fn chunk(delta: Value, finish_reason: Value) -> String {
    let chunk = json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",
        "choices":[{"index":0,"delta":delta,"finish_reason":finish_reason}]});
    format!("data: {chunk}\n\n")
}

/// The model calls `name` with `arguments` under the id `id`.
fn tool_call(id: &str, name: &str, arguments: &str) -> Step {
    Step::Sse(vec![
        chunk(
            json!({"role":"assistant","tool_calls":[{"index":0,"id":id,"type":"function",
                "function":{"name":name,"arguments":arguments}}]}),
            Value::Null,
        ),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ])
}

/// The model thinks `thought`, then says `text`.
fn thought_then(thought: &str, text: &str) -> Step {
    Step::Sse(vec![
        chunk(json!({"role":"assistant","reasoning_content":thought}), Value::Null),
        chunk(json!({"content":text}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_owned(),
    ])
}

fn answer() -> Step {
    Step::text(&["Done."], "stop", Some((12, 2)))
}

fn base(model: &str, messages: Value) -> Value {
    json!({"model": model, "max_tokens": 256, "messages": messages})
}

#[tokio::test]
async fn system_blocks_and_system_entries_reach_the_model_in_place() {
    let h = Harness::start().await;
    h.scenario("sys", vec![answer()]);
    let mut body = base(
        "sys",
        json!([
            {"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]},
            {"role":"assistant","content":"Hello."},
            {"role":"system","content":"The user is in a hurry."},
            {"role":"user","content":"status?"}
        ]),
    );
    body["system"] = json!([
        {"type":"text","text":"You are a CLI."},
        {"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}},
        {"type":"text","text":"Use tools.","cache_control":{"type":"ephemeral","ttl":"1h"}}
    ]);
    body["context_management"] = json!({"edits":[{"type":"clear_thinking_20251015","keep":"all"}]});
    body["service_tier"] = json!("auto");
    let reply = create(&h, body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.request_id.is_some());
    assert_eq!(
        h.upstream_messages("sys")[0],
        vec![
            json!({"role":"system","content":"You are a CLI.\n\nBe brief.\n\nUse tools."}),
            json!({"role":"user","content":"hi"}),
            json!({"role":"assistant","content":"Hello."}),
            json!({"role":"system","content":"The user is in a hurry."}),
            json!({"role":"user","content":"status?"}),
        ]
    );
    let sent = &h.upstream_bodies("sys")[0];
    assert_eq!(sent["max_completion_tokens"], 256);
    assert!(sent.get("store").is_none() && sent.get("context_management").is_none());
}

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d,
    0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

#[tokio::test]
async fn images_and_documents_reach_the_model_through_the_input_file_path() {
    let h = Harness::start().await;
    h.scenario("look", vec![answer()]);
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let sentence = "The lighthouse keeper counts seventeen gulls.";
    let reply = create(
        &h,
        base(
            "look",
            json!([{"role":"user","content":[
                {"type":"image","source":{"type":"base64","media_type":"image/png","data":b64(PNG)}},
                {"type":"document","title":"gulls.pdf","source":{"type":"base64","media_type":"application/pdf","data":b64(&respgw_testkit::pdf::text_pages(&[sentence]))}},
                {"type":"document","source":{"type":"text","media_type":"text/plain","data":"A plain note."}},
                {"type":"text","text":"What do these say?"}
            ]}]),
        ),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let content = &h.upstream_messages("look")[0][0]["content"];
    assert_eq!(content[0]["type"], "image_url");
    assert_eq!(content[0]["image_url"]["url"], format!("data:image/png;base64,{}", b64(PNG)));
    let texts: Vec<&str> = content.as_array().unwrap().iter().filter_map(|p| p["text"].as_str()).collect();
    assert!(texts.iter().any(|t| t.contains(sentence)), "the PDF's text reaches the model: {content}");
    assert!(texts.iter().any(|t| t.contains("A plain note.")), "{content}");
    assert_eq!(texts.last(), Some(&"What do these say?"));

    let unreadable = create(
        &h,
        base(
            "look",
            json!([{"role":"user","content":[
                {"type":"text","text":"read"},
                {"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"%%%"}}
            ]}]),
        ),
    )
    .await;
    assert_anthropic_error(&unreadable, 400, "invalid_request_error");
    let message = unreadable.body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("messages[0].content[1]"), "names the block: {message}");
}

#[tokio::test]
async fn a_tool_use_round_trip_keeps_the_call_id_both_ways() {
    let h = Harness::start().await;
    h.scenario("tools", vec![tool_call("call_abc", "ls", r#"{"path":"."}"#), answer()]);
    let tools = json!([{"name":"ls","description":"List files","input_schema":{"type":"object",
        "properties":{"path":{"type":"string"}}},"cache_control":{"type":"ephemeral"}},
        {"name":"later","input_schema":{"type":"object"},"defer_loading":true}]);
    let mut first = base("tools", json!([{"role":"user","content":"list"}]));
    first["tools"] = tools.clone();
    let reply = create(&h, first).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let offered = &h.upstream_bodies("tools")[0]["tools"];
    assert_eq!(
        offered[0],
        json!({"type":"function","function":{"name":"ls","description":"List files",
            "parameters":{"type":"object","properties":{"path":{"type":"string"}}},"strict":false}})
    );
    assert_eq!(offered.as_array().map(Vec::len), Some(1), "a deferred tool waits for a tool_reference: {offered}");

    let mut second = base(
        "tools",
        json!([
            {"role":"user","content":"list"},
            {"role":"assistant","content":[{"type":"tool_use","id":"call_abc","name":"ls","input":{"path":"."}}]},
            {"role":"user","content":[
                {"type":"tool_result","tool_use_id":"call_abc","content":[{"type":"text","text":"a.txt b.txt"},
                    {"type":"tool_reference","tool_name":"later"}],"cache_control":{"type":"ephemeral"}},
                {"type":"text","text":"which is newer?"}
            ]}
        ]),
    );
    second["tools"] = tools;
    let reply = create(&h, second).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let messages = &h.upstream_messages("tools")[1];
    assert_eq!(messages[1]["tool_calls"][0]["id"], "call_abc");
    assert_eq!(messages[1]["tool_calls"][0]["function"], json!({"name":"ls","arguments":r#"{"path":"."}"#}));
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_call_id"], "call_abc");
    assert!(messages[2]["content"].to_string().contains("a.txt b.txt"), "{}", messages[2]);
    assert_eq!(messages[3], json!({"role":"user","content":"which is newer?"}));
    let offered = &h.upstream_bodies("tools")[1]["tools"];
    assert_eq!(offered[1]["function"]["name"], "later", "loaded by the tool_reference: {offered}");
}

#[tokio::test]
async fn tool_choice_variants_reach_the_upstream() {
    let h = Harness::start().await;
    h.scenario("choice", vec![answer(), answer(), answer(), answer()]);
    let tools = json!([{"name":"ls","input_schema":{"type":"object"}},{"name":"cat","input_schema":{"type":"object"}}]);
    for choice in [
        json!({"type":"any"}),
        json!({"type":"tool","name":"cat","disable_parallel_tool_use":true}),
        json!({"type":"none"}),
        json!({"type":"auto"}),
    ] {
        let mut body = base("choice", json!([{"role":"user","content":"go"}]));
        body["tools"] = tools.clone();
        body["tool_choice"] = choice;
        let reply = create(&h, body).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let sent = h.upstream_bodies("choice");
    assert_eq!(sent[0]["tool_choice"], "required");
    assert_eq!(sent[1]["tool_choice"], json!({"type":"function","function":{"name":"cat"}}));
    assert_eq!(sent[1]["parallel_tool_calls"], false);
    assert!(sent[2].get("tools").is_none() || sent[2]["tool_choice"] == "none", "{}", sent[2]);
    assert_eq!(sent[3]["tool_choice"], "auto");
    assert!(sent[3].get("parallel_tool_calls").is_none());

    let mut unknown = base("choice", json!([{"role":"user","content":"go"}]));
    unknown["tools"] = tools;
    unknown["tool_choice"] = json!({"type":"tool","name":"rm"});
    assert_anthropic_error(&create(&h, unknown).await, 400, "invalid_request_error");
}

#[tokio::test]
async fn thinking_effort_sampling_and_metadata_reach_the_upstream() {
    let h = Harness::start().await;
    h.scenario("knobs", vec![answer(), answer(), answer()]);
    let mut claude_code = base("knobs", json!([{"role":"user","content":"hi"}]));
    claude_code["max_tokens"] = json!(32000);
    claude_code["thinking"] = json!({"type":"adaptive","display":"omitted"});
    claude_code["output_config"] = json!({"effort":"high"});
    claude_code["metadata"] = json!({"user_id":"user_42"});
    assert_eq!(create(&h, claude_code).await.status, 200);
    let mut budgeted = base("knobs", json!([{"role":"user","content":"hi"}]));
    budgeted["max_tokens"] = json!(8192);
    budgeted["thinking"] = json!({"type":"enabled","budget_tokens":2048});
    budgeted["stop_sequences"] = json!(["END", "\n\nHuman:"]);
    budgeted["top_k"] = json!(40);
    budgeted["temperature"] = json!(0.3);
    budgeted["top_p"] = json!(0.9);
    assert_eq!(create(&h, budgeted).await.status, 200);
    let mut disabled = base("knobs", json!([{"role":"user","content":"hi"}]));
    disabled["thinking"] = json!({"type":"disabled"});
    assert_eq!(create(&h, disabled).await.status, 200);

    let sent = h.upstream_bodies("knobs");
    assert_eq!((&sent[0]["reasoning_effort"], &sent[0]["max_completion_tokens"]), (&json!("high"), &json!(32000)));
    assert_eq!(
        sent[0]["user"],
        Value::Null,
        "metadata.user_id is the response's user; the chat request does not carry one"
    );
    assert_eq!(sent[1]["reasoning_effort"], "low");
    assert_eq!(sent[1]["stop"], json!(["END", "\n\nHuman:"]));
    assert_eq!((&sent[1]["top_k"], &sent[1]["temperature"], &sent[1]["top_p"]), (&json!(40), &json!(0.3), &json!(0.9)));
    assert_eq!(sent[2]["reasoning_effort"], "none");
    assert!(sent[2].get("stop").is_none() && sent[2].get("top_k").is_none());
}

#[tokio::test]
async fn count_tokens_answers_the_upstreams_count() {
    let h = Harness::start().await;
    h.scenario("count", vec![Step::OneTokenCompletion]);
    let mut body = json!({"model":"count","messages":[{"role":"user","content":"how many tokens is this?"}]});
    body["system"] = json!("Be brief.");
    body["tools"] = json!([{"name":"ls","input_schema":{"type":"object"}}]);
    let reply = post(&h, "/v1/messages/count_tokens?beta=true", None, &body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let tokens = reply.body["input_tokens"].as_u64().expect("input_tokens");
    assert!(tokens > 5, "{}", reply.body);
    assert_eq!(reply.body.as_object().map(|o| o.len()), Some(1));
    assert!(reply.request_id.is_some());
    let counted = &h.upstream_bodies("count")[0];
    assert_eq!(counted["messages"][0], json!({"role":"system","content":"Be brief."}));
    assert_eq!(counted["tools"][0]["function"]["name"], "ls");
}

#[tokio::test]
async fn models_are_listed_in_anthropics_shape_for_anthropic_clients() {
    let h = Harness::start().await;
    h.scenario("alpha-model", vec![]);
    h.scenario("beta-model", vec![]);
    let anthropic = send(http_client().get(h.url("/v1/models")).header("anthropic-version", VERSION)).await;
    assert_eq!(anthropic.status, 200, "{}", anthropic.body);
    assert_eq!(
        anthropic.body,
        json!({"data":[
            {"type":"model","id":"alpha-model","display_name":"alpha-model","created_at":"1970-01-01T00:00:00Z",
             "lifecycle":"active","max_input_tokens":null},
            {"type":"model","id":"beta-model","display_name":"beta-model","created_at":"1970-01-01T00:00:00Z",
             "lifecycle":"active","max_input_tokens":null}
        ],"has_more":false,"first_id":"alpha-model","last_id":"beta-model"})
    );
    let openai = send(http_client().get(h.url("/v1/models"))).await;
    assert_eq!(openai.body["object"], "list", "other clients get the upstream's list as it is");
}

#[tokio::test]
async fn keys_come_as_x_api_key_or_bearer_and_failures_are_anthropic_shaped() {
    let h = Harness::start_with(&["--api-key", "sk-gateway"], &[]).await;
    h.scenario("keyed", vec![answer(), answer()]);
    let body = base("keyed", json!([{"role":"user","content":"hi"}]));
    assert_eq!(post(&h, "/v1/messages", Some("sk-gateway"), &body).await.status, 200);
    let bearer = send(http_client().post(h.url("/v1/messages")).bearer_auth("sk-gateway").json(&body)).await;
    assert_eq!(bearer.status, 200, "{}", bearer.body);
    for key in [None, Some("sk-wrong")] {
        let refused = post(&h, "/v1/messages", key, &body).await;
        assert_anthropic_error(&refused, 401, "authentication_error");
    }
    let requests = h.upstream.requests("keyed");
    assert_eq!(requests.len(), 2);
    assert!(
        requests.iter().all(|r| r.headers.get("x-api-key").is_none() && r.headers.get("authorization").is_none()),
        "the gateway's key never reaches the upstream"
    );
}

#[tokio::test]
async fn errors_on_messages_routes_are_anthropic_shaped() {
    let h = Harness::start_with(&["--max-body-mb", "1"], &[]).await;
    let ok = base("m", json!([{"role":"user","content":"hi"}]));

    let bad_json =
        send(http_client().post(h.url("/v1/messages")).header("content-type", "application/json").body("{\"model\":"))
            .await;
    assert_anthropic_error(&bad_json, 400, "invalid_request_error");

    let mut missing = ok.clone();
    missing.as_object_mut().unwrap().remove("max_tokens");
    let reply = create(&h, missing).await;
    assert_anthropic_error(&reply, 400, "invalid_request_error");
    assert_eq!(reply.body["error"]["message"], "Missing required parameter: 'max_tokens'.");

    let unknown_block = create(&h, base("m", json!([{"role":"user","content":[{"type":"video","url":"x"}]}]))).await;
    assert_anthropic_error(&unknown_block, 400, "invalid_request_error");
    assert!(unknown_block.body["error"]["message"].as_str().unwrap().starts_with("messages[0].content[0].type"));

    assert_anthropic_error(&post(&h, "/v1/messages/batches", None, &ok).await, 404, "not_found_error");
    let wrong_method = send(http_client().get(h.url("/v1/messages"))).await;
    assert_anthropic_error(&wrong_method, 405, "invalid_request_error");
    let text = send(http_client().post(h.url("/v1/messages")).header("content-type", "text/plain").body("hi")).await;
    assert_anthropic_error(&text, 415, "invalid_request_error");

    let mut huge = ok.clone();
    huge["messages"][0]["content"] = json!("x".repeat(1024 * 1024 + 10));
    assert_anthropic_error(&create(&h, huge).await, 413, "request_too_large");

    // The upstream has no script for this model and refuses it: an engine error, reshaped too.
    let refused_upstream = create(&h, base("no-such-scenario", json!([{"role":"user","content":"hi"}]))).await;
    assert!(refused_upstream.status >= 400, "{}", refused_upstream.body);
    assert_eq!(refused_upstream.body["type"], "error", "{}", refused_upstream.body);
    assert!(refused_upstream.request_id.is_some());
}

#[tokio::test]
async fn bad_input_is_a_4xx_never_a_5xx() {
    let h = Harness::start().await;
    let bodies = [
        json!([]),
        json!({"model":7,"max_tokens":1,"messages":[]}),
        json!({"model":"m","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}),
        json!({"model":"m","max_tokens":1,"messages":"hi"}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user"}]}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"file","file_id":"f"}}]}]}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"c","name":"n","input":[]}]}]}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"bash_20250124","name":"bash"}]}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{"type":"string"}}]}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"any"}}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled","budget_tokens":10}}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"temperature":"hot"}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"metadata":{"user_id":5}}),
        json!({"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"redacted_thinking","data":"junk"}]}]}),
    ];
    for body in bodies {
        let reply = create(&h, body.clone()).await;
        assert!((400..500).contains(&reply.status), "{body} → {} {}", reply.status, reply.body);
        assert_eq!(reply.body["type"], "error", "{body} → {}", reply.body);
    }
}

#[tokio::test]
async fn a_tenant_over_its_rate_gets_an_anthropic_429_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "requests_per_minute = 1");
    let h = Harness::start_with(&["--gateway-workers", "1", "--api-keys-file", &keys], &[]).await;
    h.scenario("rate", vec![answer()]);
    let body = base("rate", json!([{"role":"user","content":"hi"}]));
    assert_eq!(post(&h, "/v1/messages", Some(ALPHA), &body).await.status, 200);
    let limited = post(&h, "/v1/messages", Some(ALPHA), &body).await;
    assert_anthropic_error(&limited, 429, "rate_limit_error");
    assert!(limited.retry_after.is_some_and(|s| s.parse::<u64>().is_ok_and(|n| n >= 1)));
}

/// A sealed reasoning blob for `key`'s tenant, made by the gateway through the Responses API.
async fn sealed_thought(h: &Harness, key: &str, scenario: &str) -> (String, String) {
    let reply = send(http_client().post(h.url("/v1/responses")).bearer_auth(key).json(&json!({
        "model": scenario, "input": "think", "store": false, "include": ["reasoning.encrypted_content"]
    })))
    .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reasoning = &reply.body["output"][0];
    assert_eq!(reasoning["type"], "reasoning", "{}", reply.body);
    let text = reasoning["content"][0]["text"].as_str().expect("reasoning text").to_owned();
    (text, reasoning["encrypted_content"].as_str().expect("a sealed blob").to_owned())
}

#[tokio::test]
async fn thinking_signatures_are_checked_and_a_forged_or_edited_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "");
    let h = Harness::start_with(&["--api-keys-file", &keys], &[]).await;
    h.scenario("seal", vec![thought_then("Two plus two is four.", "4")]);
    let (thought, signature) = sealed_thought(&h, ALPHA, "seal").await;
    h.scenario("replay", vec![answer(), answer()]);
    let conversation = |thinking: Value| {
        base(
            "replay",
            json!([
                {"role":"user","content":"2+2?"},
                {"role":"assistant","content":[thinking, {"type":"text","text":"4"}]},
                {"role":"user","content":"and 3+3?"}
            ]),
        )
    };

    let replayed = post(
        &h,
        "/v1/messages",
        Some(ALPHA),
        &conversation(json!({"type":"thinking","thinking":thought,"signature":signature})),
    )
    .await;
    assert_eq!(replayed.status, 200, "{}", replayed.body);
    let omitted =
        post(&h, "/v1/messages", Some(ALPHA), &conversation(json!({"type":"redacted_thinking","data":signature})))
            .await;
    assert_eq!(omitted.status, 200, "{}", omitted.body);
    for messages in h.upstream_messages("replay") {
        assert_eq!(messages[1]["reasoning_content"], thought, "the model gets its reasoning back: {messages:?}");
    }

    let edited = post(
        &h,
        "/v1/messages",
        Some(ALPHA),
        &conversation(json!({"type":"thinking","thinking":"Two plus two is five.","signature":signature})),
    )
    .await;
    assert_anthropic_error(&edited, 400, "invalid_request_error");
    assert!(
        edited.body["error"]["message"].as_str().unwrap().contains("messages[1].content[0].thinking"),
        "{}",
        edited.body
    );
    let forged = post(
        &h,
        "/v1/messages",
        Some(ALPHA),
        &conversation(json!({"type":"thinking","thinking":thought,"signature":"rgw2.k.AAAAAAAAAAAAAAAAAAAAAAAAAAAA"})),
    )
    .await;
    assert_anthropic_error(&forged, 400, "invalid_request_error");
    assert!(
        forged.body["error"]["message"].as_str().unwrap().contains("messages[1].content[0].signature"),
        "{}",
        forged.body
    );
    let other_tenant = post(
        &h,
        "/v1/messages",
        Some(BETA),
        &conversation(json!({"type":"thinking","thinking":thought,"signature":signature})),
    )
    .await;
    assert_anthropic_error(&other_tenant, 400, "invalid_request_error");
    assert_eq!(h.upstream_messages("replay").len(), 2, "refused replays never reach the model");

    // The blocks a Messages reply carries come back as they are, the text shown or omitted.
    for display in ["summarized", "omitted"] {
        h.scenario("think", vec![thought_then("Three plus three is six.", "6"), answer()]);
        let mut asked = base("think", json!([{"role":"user","content":"3+3?"}]));
        asked["thinking"] = json!({"type":"adaptive","display":display});
        let reply = post(&h, "/v1/messages", Some(ALPHA), &asked).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let blocks = reply.body["content"].as_array().expect("content blocks").clone();
        assert_eq!(blocks[0]["type"], "thinking", "{}", reply.body);
        let mut replayed = asked.clone();
        replayed["messages"] = json!([
            {"role":"user","content":"3+3?"},
            {"role":"assistant","content":blocks},
            {"role":"user","content":"and 4+4?"}
        ]);
        let again = post(&h, "/v1/messages", Some(ALPHA), &replayed).await;
        assert_eq!(again.status, 200, "{display}: {}", again.body);
        let messages = h.upstream_messages("think").pop().expect("the replay reached the model");
        assert_eq!(messages[1]["reasoning_content"], "Three plus three is six.", "{display}: {messages:?}");
    }
}

#[tokio::test]
async fn a_stream_is_an_event_stream_counted_among_the_tenants_streams() {
    let dir = tempfile::tempdir().unwrap();
    let keys = two_tenants(dir.path(), "max_open_streams = 1");
    let h = Harness::start_with(&["--gateway-workers", "1", "--api-keys-file", &keys], &[]).await;
    h.scenario("streamed", vec![Step::text(&["Hel", "lo."], "stop", Some((5, 2)))]);
    let mut body = base("streamed", json!([{"role":"user","content":"hi"}]));
    body["stream"] = json!(true);
    let response = http_client()
        .post(h.url("/v1/messages?beta=true"))
        .header("x-api-key", ALPHA)
        .header("anthropic-version", VERSION)
        .json(&body)
        .send()
        .await
        .expect("stream opens");
    assert_eq!(response.status().as_u16(), 200);
    assert!(response.headers().get("request-id").is_some());
    assert!(
        response.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().starts_with("text/event-stream"),
        "{:?}",
        response.headers()
    );
    let text = response.text().await.expect("the stream ends");
    assert!(text.contains("event: message_start") && text.contains("event: message_stop"), "{text}");
    assert!(text.contains("Hel") && text.contains("lo."), "{text}");
    assert_eq!(h.upstream_bodies("streamed")[0]["stream"], true);
    let metrics = h.metrics().await;
    assert!(metrics.contains("route=\"/v1/messages\""), "Messages requests have their own route label");
}

#[tokio::test]
async fn the_mcp_connector_runs_a_remote_servers_tools_in_the_gateway() {
    let server = crate::mcp_remote::McpServer::start(&[]);
    let h = crate::mcp_remote::gateway(&[]).await;
    let call = chunk(
        json!({"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function",
            "function":{"name":"mcp__docs__echo","arguments":"{\"text\":\"hello remote\"}"}}]}),
        json!("tool_calls"),
    );
    h.scenario("connector", vec![Step::Sse(vec![call, "data: [DONE]\n\n".to_owned()]), answer()]);
    let mut body = base("connector", json!([{"role":"user","content":"echo it"}]));
    body["mcp_servers"] = json!([{"type":"url","url":server.url("/mcp"),"name":"docs",
        "tool_configuration":{"allowed_tools":["echo"]}}]);
    let reply = create(&h, body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let sent = h.upstream_bodies("connector");
    let offered: Vec<&str> =
        sent[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["mcp__docs__echo"]);
    let result = sent[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").expect("a tool result");
    assert_eq!(result["content"], "hello remote", "the gateway ran the call without asking the client");
    let text: Vec<&str> = reply.body["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(text.last(), Some(&"Done."));
}

#[tokio::test]
async fn server_tools_the_gateway_has_not_enabled_are_refused_naming_the_tool() {
    let h = Harness::start().await;
    for (tool, kind) in [
        (json!({"type":"web_search_20250305","name":"web_search"}), "web search"),
        (json!({"type":"code_execution_20250825","name":"code_execution"}), "code execution"),
    ] {
        let mut body = base("m", json!([{"role":"user","content":"hi"}]));
        body["tools"] = json!([{"name":"ls","input_schema":{"type":"object"}}, tool]);
        let reply = create(&h, body).await;
        assert_anthropic_error(&reply, 400, "invalid_request_error");
        let message = reply.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("tools[1]"), "{kind}: {message}");
    }
    let mut body = base("m", json!([{"role":"user","content":"hi"}]));
    body["mcp_servers"] = json!([{"type":"url","url":"https://mcp.example.com/mcp","name":"docs"}]);
    let reply = create(&h, body).await;
    assert!((400..500).contains(&reply.status), "{}", reply.body);
    assert!(reply.body["error"]["message"].as_str().unwrap().contains("mcp_servers[0]"), "{}", reply.body);
}

/// A first turn shaped like Claude Code's (2.1.x): three system blocks, a system-reminder text
/// before the prompt, a `role: "system"` entry after it, tools with JSON-Schema 2020-12 inputs and
/// a deferred placeholder, a JSON-string user id, adaptive thinking with its text omitted,
/// context-management edits, an effort, and a stream.
fn claude_code_first_turn(model: &str) -> Value {
    let schema = |properties: Value, required: &[&str]| {
        json!({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":properties,
            "required":required,"additionalProperties":false})
    };
    json!({
        "model": model,
        "messages": [
            {"role":"user","content":[
                {"type":"text","text":"<system-reminder>\nAttribution guidance.\n</system-reminder>\n"},
                {"type":"text","text":"Write the marker to a file."}
            ]},
            {"role":"system","content":[{"type":"text","text":"# Environment\nPrimary working directory: /work"}]}
        ],
        "system": [
            {"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328.abc; cc_entrypoint=sdk-cli;"},
            {"type":"text","text":"You are a Claude agent.","cache_control":{"type":"ephemeral"}},
            {"type":"text","text":"Main prompt.","cache_control":{"type":"ephemeral"}}
        ],
        "tools": [
            {"name":"Bash","description":"Run a command","input_schema":schema(
                json!({"command":{"type":"string"},"description":{"type":"string"}}), &["command"])},
            {"name":"Read","description":"Read a file","input_schema":schema(json!({"file_path":{"type":"string"}}), &["file_path"])},
            {"name":"DeferredToolPlaceholder","description":"Never call this tool.",
             "input_schema":{"type":"object","properties":{}},"defer_loading":true}
        ],
        "metadata": {"user_id": "{\"device_id\":\"9ce0\",\"account_uuid\":\"\",\"session_id\":\"213e\"}"},
        "max_tokens": 32000,
        "thinking": {"type":"adaptive","display":"omitted"},
        "context_management": {"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
        "output_config": {"effort":"high"},
        "stream": true
    })
}

#[tokio::test]
async fn claude_codes_first_turn_reaches_the_model_as_one_chat_request() {
    let h = Harness::start_with(&["--api-key", "sk-cc"], &[]).await;
    h.scenario("cc", vec![tool_call("toolu_1", "Bash", r#"{"command":"echo marker > m.txt"}"#)]);
    let response = http_client()
        .post(h.url("/v1/messages?beta=true"))
        .header("x-api-key", "sk-cc")
        .header("anthropic-version", VERSION)
        .header("anthropic-beta", "claude-code-20250219,context-management-2025-06-27,advanced-tool-use-2025-11-20")
        .header("x-app", "cli")
        .json(&claude_code_first_turn("cc"))
        .send()
        .await
        .expect("stream opens");
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.expect("the stream ends");
    assert!(text.contains("\"toolu_1\"") && text.contains("event: message_stop"), "{text}");

    let sent = &h.upstream_bodies("cc")[0];
    let roles: Vec<&str> = sent["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "system"], "the system entry stays where Claude Code put it");
    assert_eq!(
        sent["messages"][0]["content"], "You are a Claude agent.\n\nMain prompt.",
        "Claude Code's billing line is left out of the prompt"
    );
    let offered: Vec<&str> =
        sent["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["Bash", "Read"], "the deferred placeholder is not offered");
    assert_eq!(sent["tools"][0]["function"]["parameters"]["additionalProperties"], false);
    assert_eq!((&sent["reasoning_effort"], &sent["max_completion_tokens"]), (&json!("high"), &json!(32000)));
    assert_eq!(sent["stream"], true);
}

/// A SearXNG instance on loopback: every search answers one hit naming the query.
async fn searxng() -> String {
    use axum::extract::Query;
    let app = axum::Router::new().route(
        "/searxng/search",
        axum::routing::get(|Query(params): Query<std::collections::HashMap<String, String>>| async move {
            let query = params.get("q").cloned().unwrap_or_default();
            axum::Json(json!({"query": query, "number_of_results": 1, "results": [
                {"url": "https://searxng.example/hit", "title": format!("SearXNG hit for {query}"),
                 "content": "From the JSON API.", "engine": "duckduckgo", "score": 1.0}]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://127.0.0.1:{port}/searxng")
}

#[tokio::test]
async fn web_search_runs_in_the_gateway_for_a_messages_client() {
    let base_url = searxng().await;
    let h = Harness::start_with(&["--web-search-profile", "searxng", "--web-search-searxng-url", &base_url], &[]).await;
    h.scenario(
        "searching",
        vec![tool_call("call_ws", "web_search", r#"{"action":"search","query":"vllm releases"}"#), answer()],
    );
    let mut body = base("searching", json!([{"role":"user","content":"What is new in vLLM?"}]));
    body["tools"] = json!([{"type":"web_search_20250305","name":"web_search","max_uses":3}]);
    let reply = create(&h, body).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let sent = h.upstream_bodies("searching");
    assert_eq!(sent[0]["tools"][0]["function"]["name"], "web_search");
    let result = sent[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").expect("a tool result");
    assert!(result["content"].to_string().contains("SearXNG hit for vllm releases"), "{result}");
    let text: Vec<&str> = reply.body["content"].as_array().unwrap().iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(text.last(), Some(&"Done."));
}
