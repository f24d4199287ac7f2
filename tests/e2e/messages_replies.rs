//! `POST /v1/messages` replies end to end: the `message` body and Anthropic's event stream from a
//! real gateway over the scripted upstream — content blocks in order, thinking with its
//! signature, tool use, stop reasons, usage with cached tokens, pings, and a failure mid-stream.
//! Every test also checks what the upstream was asked.

use std::time::Duration;

use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

use crate::common::Harness;

/// One upstream chunk of choice 0 with this `delta` and, when given, `finish_reason` (plus any
/// `extra` keys on the choice).
fn chunk(delta: Value, finish: Option<&str>, extra: Value) -> Value {
    let mut choice = json!({"index": 0, "delta": delta, "finish_reason": finish});
    if let Value::Object(extra) = extra {
        choice.as_object_mut().unwrap().extend(extra);
    }
    json!({"choices": [choice]})
}

fn text(piece: &str) -> Value {
    chunk(json!({"content": piece}), None, Value::Null)
}

fn reasoning(piece: &str) -> Value {
    chunk(json!({"reasoning_content": piece}), None, Value::Null)
}

fn finish(reason: &str) -> Value {
    chunk(json!({}), Some(reason), Value::Null)
}

/// The usage chunk vLLM sends last with `stream_options.include_usage`.
fn usage(prompt: u64, cached: u64, completion: u64) -> Value {
    json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
        "total_tokens": prompt + completion, "prompt_tokens_details": {"cached_tokens": cached}}})
}

/// A 200 event stream of these chunks, then `[DONE]`.
fn upstream(chunks: Vec<Value>) -> Step {
    let mut frames: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    frames.push("data: [DONE]\n\n".into());
    Step::Sse(frames)
}

/// The keys of a `message` body, as the SDKs type it.
const MESSAGE_KEYS: [&str; 8] = ["content", "id", "model", "role", "stop_reason", "stop_sequence", "type", "usage"];

/// Check the shape every `message` has.
fn assert_message_shape(message: &Value) {
    let mut keys: Vec<&str> = message.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, MESSAGE_KEYS, "{message:#}");
    assert!(message["id"].as_str().unwrap().starts_with("msg_"), "{message}");
    assert_eq!((message["type"].as_str(), message["role"].as_str()), (Some("message"), Some("assistant")));
    for key in ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"] {
        assert!(message["usage"][key].is_u64(), "usage.{key}: {message}");
    }
}

/// Non-stream `POST /v1/messages`.
async fn create(h: &Harness, body: Value) -> (u16, Value) {
    let (status, headers, reply) =
        respgw_testkit::gateway::post_json(&h.url("/v1/messages"), &body).await.expect("request completes");
    assert!(headers.contains_key("request-id"), "{headers:?}");
    if status == 200 {
        assert_message_shape(&reply);
    }
    (status, reply)
}

/// Streaming `POST /v1/messages`: the events as `(event name, data)`, after checking the
/// framing (`event:` then `data:`, the name being the data's `type`) and that the stream ends
/// with `message_stop` or `error` and nothing after.
async fn stream(h: &Harness, mut body: Value) -> Vec<(String, Value)> {
    body["stream"] = json!(true);
    let response = reqwest::Client::new().post(h.url("/v1/messages")).json(&body).send().await.expect("request");
    assert_eq!(response.status().as_u16(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/event-stream; charset=utf-8");
    assert_eq!(headers["cache-control"], "no-cache");
    assert!(headers.contains_key("request-id"));
    let text = response.text().await.expect("stream reads");
    assert!(text.ends_with("\n\n"), "{text}");
    let events: Vec<(String, Value)> = text
        .trim_end()
        .split("\n\n")
        .map(|frame| {
            let (event, data) = frame.split_once('\n').unwrap_or_else(|| panic!("bad frame: {frame:?}"));
            let name = event.strip_prefix("event: ").unwrap_or_else(|| panic!("no event line: {frame:?}"));
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").expect("data line")).expect("JSON data");
            assert_eq!(data["type"], name, "{frame}");
            (name.to_owned(), data)
        })
        .collect();
    let last = events.last().map(|(name, _)| name.as_str());
    assert!(matches!(last, Some("message_stop" | "error")), "{text}");
    events
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

/// The message a client accumulates from the events, as the SDKs do.
fn accumulate(events: &[(String, Value)]) -> Value {
    let mut message = Value::Null;
    let mut json_parts: Vec<String> = Vec::new();
    for (name, data) in events {
        match name.as_str() {
            "message_start" => message = data["message"].clone(),
            "content_block_start" => {
                assert_eq!(data["index"], message["content"].as_array().unwrap().len());
                message["content"].as_array_mut().unwrap().push(data["content_block"].clone());
                json_parts.push(String::new());
            }
            "content_block_delta" => {
                let index = data["index"].as_u64().unwrap() as usize;
                let block = &mut message["content"][index];
                let delta = &data["delta"];
                let append = |block: &mut Value, field: &str, more: &Value| {
                    block[field] = json!(format!("{}{}", block[field].as_str().unwrap(), more.as_str().unwrap()));
                };
                match delta["type"].as_str().unwrap() {
                    "text_delta" => append(block, "text", &delta["text"]),
                    "thinking_delta" => append(block, "thinking", &delta["thinking"]),
                    "signature_delta" => block["signature"] = delta["signature"].clone(),
                    "input_json_delta" => {
                        json_parts[index].push_str(delta["partial_json"].as_str().unwrap());
                        block["input"] = serde_json::from_str(&json_parts[index]).unwrap_or(json!({}));
                    }
                    other => panic!("unknown delta {other}"),
                }
            }
            "message_delta" => {
                message["stop_reason"] = data["delta"]["stop_reason"].clone();
                message["stop_sequence"] = data["delta"]["stop_sequence"].clone();
                for (key, count) in data["usage"].as_object().unwrap() {
                    message["usage"][key] = count.clone();
                }
            }
            _ => {}
        }
    }
    message
}

/// A reply with its id set aside, to compare a JSON reply with an accumulated stream.
fn without_id(mut message: Value) -> Value {
    message["id"] = Value::Null;
    message
}

#[tokio::test]
async fn a_text_answer_as_json_and_as_a_stream_with_cached_tokens() {
    let h = Harness::start().await;
    let answer = || upstream(vec![text("Hello"), text(" there."), finish("stop"), usage(100, 60, 5)]);
    h.scenario("plain", vec![answer(), answer()]);
    let request = json!({"model": "plain", "max_tokens": 256, "messages": [{"role": "user", "content": "Hi"}]});

    let (status, message) = create(&h, request.clone()).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["content"], json!([{"type": "text", "text": "Hello there."}]));
    assert_eq!((message["stop_reason"].as_str(), &message["stop_sequence"]), (Some("end_turn"), &Value::Null));
    assert_eq!(message["model"], "plain");
    assert_eq!(
        message["usage"],
        json!({"input_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 60,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 5, "service_tier": "standard"})
    );

    let events = stream(&h, request).await;
    assert_eq!(
        names(&events),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let start = &events[0].1["message"];
    assert_message_shape(start);
    assert_eq!((&start["content"], &start["stop_reason"]), (&json!([]), &Value::Null));
    assert_eq!(
        events[2].1,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    );
    assert_eq!(
        events[6].1,
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"input_tokens": 40, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 60, "output_tokens": 5}})
    );
    assert_eq!(without_id(accumulate(&events)), without_id(message));

    let asked = h.upstream_bodies("plain");
    assert_eq!(asked.len(), 2);
    for body in &asked {
        assert_eq!(body["messages"].as_array().unwrap().last().unwrap()["content"], "Hi");
    }
}

#[tokio::test]
async fn thinking_comes_first_with_a_signature_the_next_request_can_replay() {
    let h = Harness::start().await;
    let answer = || upstream(vec![reasoning("Two plus "), reasoning("two."), text("4"), finish("stop")]);
    h.scenario("think", vec![answer(), answer(), upstream(vec![text("Yes."), finish("stop")])]);
    let request = json!({"model": "think", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "2+2?"}]});

    let (status, message) = create(&h, request.clone()).await;
    assert_eq!(status, 200, "{message}");
    let content = message["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{message}");
    assert_eq!(
        (content[0]["type"].as_str(), content[0]["thinking"].as_str()),
        (Some("thinking"), Some("Two plus two."))
    );
    let signature = content[0]["signature"].as_str().unwrap();
    assert!(signature.starts_with("rgw2."), "{signature}");
    assert_eq!(content[1], json!({"type": "text", "text": "4"}));

    let events = stream(&h, request).await;
    assert_eq!(
        names(&events)[2..9],
        [
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta"
        ]
    );
    let kinds: Vec<&str> = events[3..6].iter().map(|(_, e)| e["delta"]["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["thinking_delta", "thinking_delta", "signature_delta"]);
    let streamed = accumulate(&events);
    assert_eq!(streamed["content"][0]["thinking"], "Two plus two.");

    // The block goes back as it came, and the gateway opens its signature.
    let replay = json!({"model": "think", "max_tokens": 2048, "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": streamed["content"]},
            {"role": "user", "content": "Sure?"}]});
    let (status, reply) = create(&h, replay).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["content"], json!([{"type": "text", "text": "Yes."}]));
    let asked = h.upstream_bodies("think");
    let replayed = asked[2]["messages"].to_string();
    assert!(replayed.contains("Two plus two."), "the model gets its reasoning back: {replayed}");
}

#[tokio::test]
async fn omitted_thinking_carries_only_the_signature() {
    let h = Harness::start().await;
    let answer = || upstream(vec![reasoning("Private plan."), text("Done."), finish("stop")]);
    h.scenario("omit", vec![answer(), answer()]);
    let request = json!({"model": "omit", "max_tokens": 2048, "thinking": {"type": "adaptive", "display": "omitted"},
        "messages": [{"role": "user", "content": "Go"}]});

    let (status, message) = create(&h, request.clone()).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(
        (message["content"][0]["type"].as_str(), message["content"][0]["thinking"].as_str()),
        (Some("thinking"), Some(""))
    );
    assert!(message["content"][0]["signature"].as_str().unwrap().starts_with("rgw2."));

    let events = stream(&h, request).await;
    let deltas: Vec<&str> = events
        .iter()
        .filter(|(name, _)| name == "content_block_delta")
        .map(|(_, e)| e["delta"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, ["signature_delta", "text_delta"]);
    let whole: String = events.iter().map(|(_, e)| e.to_string()).collect();
    assert!(!whole.contains("Private plan"), "{whole}");
}

#[tokio::test]
async fn tool_calls_are_tool_use_blocks_with_streamed_input() {
    let h = Harness::start().await;
    let calls = || {
        upstream(vec![
            text("Checking."),
            chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_w1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": "}}]}),
                None,
                Value::Null,
            ),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), None, Value::Null),
            chunk(
                json!({"tool_calls": [{"index": 1, "id": "call_t2", "type": "function",
                "function": {"name": "get_time", "arguments": "{\"zone\": \"CET\"}"}}]}),
                None,
                Value::Null,
            ),
            finish("tool_calls"),
        ])
    };
    h.scenario("tools", vec![calls(), calls()]);
    let tools = json!([
        {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"name": "get_time", "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}}}
    ]);
    let request = json!({"model": "tools", "max_tokens": 512, "tools": tools,
        "messages": [{"role": "user", "content": "Weather and time in Paris?"}]});

    let (status, message) = create(&h, request.clone()).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(
        message["content"],
        json!([
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_w1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_t2", "name": "get_time", "input": {"zone": "CET"}}
        ])
    );

    let events = stream(&h, request).await;
    let blocks: Vec<String> = events
        .iter()
        .filter_map(|(name, e)| match name.as_str() {
            "content_block_start" => {
                Some(format!("start {} {}", e["index"], e["content_block"]["type"].as_str().unwrap()))
            }
            "content_block_delta" => Some(format!("delta {} {}", e["index"], e["delta"]["type"].as_str().unwrap())),
            "content_block_stop" => Some(format!("stop {}", e["index"])),
            _ => None,
        })
        .collect();
    assert_eq!(
        blocks,
        [
            "start 0 text",
            "delta 0 text_delta",
            "stop 0",
            "start 1 tool_use",
            "delta 1 input_json_delta",
            "delta 1 input_json_delta",
            "stop 1",
            "start 2 tool_use",
            "delta 2 input_json_delta",
            "stop 2"
        ]
    );
    assert_eq!(without_id(accumulate(&events)), without_id(message));

    let asked = h.upstream_bodies("tools");
    let offered: Vec<&str> =
        asked[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["get_weather", "get_time"]);
}

#[tokio::test]
async fn a_cut_answer_stops_for_max_tokens() {
    let h = Harness::start().await;
    let cut = || upstream(vec![text("Once upon a"), finish("length"), usage(10, 0, 3)]);
    h.scenario("cut", vec![cut(), cut()]);
    let request = json!({"model": "cut", "max_tokens": 3, "messages": [{"role": "user", "content": "A story"}]});

    let (status, message) = create(&h, request.clone()).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(
        (message["stop_reason"].as_str(), message["usage"]["output_tokens"].as_u64()),
        (Some("max_tokens"), Some(3))
    );
    let events = stream(&h, request).await;
    assert_eq!(accumulate(&events)["stop_reason"], "max_tokens");
    assert_eq!(h.upstream_bodies("cut")[0]["max_completion_tokens"], 3);
}

#[tokio::test]
async fn the_stop_sequence_the_upstream_names_is_reported() {
    let h = Harness::start().await;
    // vLLM names the stop string in `stop_reason`, SGLang in `matched_stop`.
    let stopped = |key: &str| upstream(vec![text("1, 2, 3"), chunk(json!({}), Some("stop"), json!({key: "END"}))]);
    h.scenario(
        "stop",
        vec![stopped("stop_reason"), stopped("matched_stop"), upstream(vec![text("1"), finish("stop")])],
    );
    let request = json!({"model": "stop", "max_tokens": 64, "stop_sequences": ["END", "HALT"],
        "messages": [{"role": "user", "content": "Count"}]});

    let (status, message) = create(&h, request.clone()).await;
    assert_eq!(status, 200, "{message}");
    assert_eq!(
        (message["stop_reason"].as_str(), message["stop_sequence"].as_str()),
        (Some("stop_sequence"), Some("END"))
    );
    let events = stream(&h, request.clone()).await;
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"], json!({"stop_reason": "stop_sequence", "stop_sequence": "END"}));
    // An upstream that does not say which string stopped it: the model ended its turn.
    let (_, message) = create(&h, request).await;
    assert_eq!((message["stop_reason"].as_str(), &message["stop_sequence"]), (Some("end_turn"), &Value::Null));
    assert_eq!(h.upstream_bodies("stop")[0]["stop"], json!(["END", "HALT"]));
}

#[tokio::test]
async fn a_silent_upstream_gets_pings_between_events() {
    let h = Harness::start_with(&["--messages-ping-interval", "0.1"], &[]).await;
    let chunks = [text("Slow"), text(" answer."), finish("stop")]
        .iter()
        .map(|c| format!("data: {c}\n\n"))
        .chain(["data: [DONE]\n\n".to_owned()])
        .collect();
    h.scenario("slow", vec![Step::SlowSse { chunks, delay: Duration::from_millis(450) }]);
    let events =
        stream(&h, json!({"model": "slow", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]})).await;
    let names = names(&events);
    assert_eq!(names[..2], ["message_start", "ping"]);
    let first_delta = names.iter().position(|n| *n == "content_block_delta").unwrap();
    let second_delta = names.iter().rposition(|n| *n == "content_block_delta").unwrap();
    let pings_between = names[first_delta..second_delta].iter().filter(|n| **n == "ping").count();
    assert!(pings_between >= 2, "{names:?}");
    assert_eq!(accumulate(&events)["content"][0]["text"], "Slow answer.");
}

#[tokio::test]
async fn an_upstream_failing_mid_stream_ends_it_with_an_error_event() {
    let h = Harness::start().await;
    let chunks = vec![format!("data: {}\n\n", text("Half an ans"))];
    h.scenario("drop", vec![Step::SseThenDrop { chunks: chunks.clone() }, Step::SseThenDrop { chunks }]);
    let request = json!({"model": "drop", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]});

    let events = stream(&h, request.clone()).await;
    assert_eq!(names(&events), ["message_start", "ping", "content_block_start", "content_block_delta", "error"]);
    let error = &events[4].1;
    assert_eq!(error["error"]["type"], "overloaded_error", "{error}");
    assert!(error["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{error}");

    let (status, body) = create(&h, request).await;
    assert_eq!(
        (status, body["type"].as_str(), body["error"]["type"].as_str()),
        (529, Some("error"), Some("overloaded_error")),
        "{body}"
    );
    assert_eq!(h.upstream_bodies("drop").len(), 2);
}

#[tokio::test]
async fn a_client_that_leaves_cancels_the_upstream_call() {
    let h = Harness::start().await;
    let chunks: Vec<String> = (0..40).map(|i| format!("data: {}\n\n", text(&format!("{i} ")))).collect();
    h.scenario("leave", vec![Step::SlowSse { chunks, delay: Duration::from_millis(100) }]);
    let body =
        json!({"model": "leave", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "Hi"}]});
    let mut response = reqwest::Client::new().post(h.url("/v1/messages")).json(&body).send().await.expect("request");
    // Read until the answer has started, then hang up.
    let mut seen = String::new();
    while !seen.contains("content_block_delta") {
        let chunk = response.chunk().await.expect("chunk").expect("more body");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(response);
    for _ in 0..50 {
        if h.upstream.unfinished_streams("leave") > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(h.upstream.unfinished_streams("leave"), 1, "the upstream call was cut short");
}
