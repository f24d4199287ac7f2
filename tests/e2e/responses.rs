//! `POST /v1/responses` end to end: real recorded upstream streams through the real binary,
//! checked event by event against the Open Responses schema and the reference sequences.

use crate::common;

use common::{Harness, final_response, kinds};
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

const TEXT: &str = "chat_completion/text-single-stream.yaml";

#[tokio::test]
async fn streams_plain_text_in_the_reference_order() {
    let h = Harness::start().await;
    h.scenario("text", vec![Step::cassette(TEXT)]);
    let events = h.stream(json!({"model":"text","input":"What is the capital of France?"})).await;
    assert_eq!(
        kinds(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let response = final_response(&events);
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][0]["content"][0]["text"], "Paris.");
    assert!(response["completed_at"].is_i64());
    // The recording has no usage chunk: counts are zero, the object is still there.
    assert_eq!(response["usage"]["total_tokens"], 0);
}

#[tokio::test]
async fn non_stream_reply_equals_the_streamed_terminal_response() {
    let h = Harness::start().await;
    h.scenario("text", vec![Step::cassette(TEXT), Step::cassette(TEXT)]);
    let (status, body) = h.create(json!({"model":"text","input":"capital?","instructions":"Be brief."})).await;
    assert_eq!(status, 200);
    let events = h.stream(json!({"model":"text","input":"capital?","instructions":"Be brief."})).await;
    let streamed = final_response(&events);
    let strip = |v: &Value| {
        let mut v = v.clone();
        for key in ["id", "created_at", "completed_at"] {
            v[key] = Value::Null;
        }
        for item in v["output"].as_array_mut().into_iter().flatten() {
            item["id"] = Value::Null;
        }
        v
    };
    assert_eq!(strip(&body), strip(streamed));
    assert_eq!(body["instructions"], "Be brief.");
}

#[tokio::test]
async fn one_response_id_and_item_ids_are_consistent_across_the_stream() {
    let h = Harness::start().await;
    h.scenario("text", vec![Step::cassette(TEXT)]);
    let events = h.stream(json!({"model":"text","input":"x"})).await;
    let id = events[0]["response"]["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("resp_"));
    let item_id = events[2]["item"]["id"].as_str().unwrap();
    for e in &events[3..9] {
        assert_eq!(e["item_id"].as_str().unwrap_or(item_id), item_id);
        assert_eq!(e["output_index"], 0);
    }
    assert_eq!(final_response(&events)["id"], id.as_str());
}

#[tokio::test]
async fn reasoning_content_becomes_a_reasoning_item_before_the_message() {
    let h = Harness::start().await;
    h.scenario("minimax", vec![Step::cassette("chat_completion/vllm-code_interpreter-step2-stream.yaml")]);
    let events = h.stream(json!({"model":"minimax","input":"2+2?"})).await;
    let k = kinds(&events);
    assert_eq!(k[2], "response.output_item.added");
    assert_eq!(events[2]["item"]["type"], "reasoning");
    assert!(k.contains(&"response.reasoning.delta"));
    let done_reasoning = k.iter().position(|t| *t == "response.reasoning.done").unwrap();
    let message_added = events
        .iter()
        .position(|e| e["type"] == "response.output_item.added" && e["item"]["type"] == "message")
        .unwrap();
    assert!(done_reasoning < message_added, "reasoning closes before the message opens");
    let response = final_response(&events);
    assert_eq!(response["output"][0]["type"], "reasoning");
    assert!(response["output"][0]["content"][0]["text"].as_str().unwrap().contains("code_interpreter tool"));
    assert_eq!(response["output"][1]["content"][0]["text"], "\n\nThe result of 2+2 is **4**.");
    assert_eq!(response["usage"]["input_tokens"], 446);
    assert_eq!(response["usage"]["output_tokens"], 56);
    assert_eq!(response["usage"]["total_tokens"], 502);
}

#[tokio::test]
async fn think_tags_in_content_become_reasoning() {
    let h = Harness::start().await;
    h.scenario("think", vec![Step::cassette("synthetic/zz-think-tags.yaml")]);
    let events = h.stream(json!({"model":"think","input":"hi"})).await;
    let response = final_response(&events);
    assert_eq!(response["output"][0]["type"], "reasoning");
    assert_eq!(response["output"][0]["content"][0]["text"], "I am thinking");
    assert_eq!(response["output"][1]["content"][0]["text"], "Answer");
    for e in &events {
        if e["type"] == "response.output_text.delta" {
            assert!(!e["delta"].as_str().unwrap().contains("think>"), "tags leak into text: {e}");
        }
    }
}

#[tokio::test]
async fn cached_and_reasoning_token_details_are_reported() {
    let h = Harness::start().await;
    h.scenario("final", vec![Step::cassette("synthetic/zz-text-final-stream.yaml")]);
    let (status, body) = h.create(json!({"model":"final","input":"hi"})).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["usage"],
        json!({"input_tokens":20,"input_tokens_details":{"cached_tokens":4,"cache_write_tokens":0},"output_tokens":3,
               "output_tokens_details":{"reasoning_tokens":1},"total_tokens":23})
    );
}

#[tokio::test]
async fn finish_reason_length_is_incomplete_max_output_tokens() {
    let h = Harness::start().await;
    let cassette = "chat_completion/text-max_tokens-length-stream.yaml";
    h.scenario("cut", vec![Step::cassette(cassette), Step::cassette(cassette)]);
    let events = h.stream(json!({"model":"cut","input":"long story","max_output_tokens":16})).await;
    assert_eq!(events.last().unwrap()["type"], "response.incomplete");
    let response = final_response(&events);
    assert_eq!(response["status"], "incomplete");
    assert_eq!(response["incomplete_details"], json!({"reason":"max_output_tokens"}));
    assert!(response["completed_at"].is_null());
    assert_eq!(response["max_output_tokens"], 16);
    assert_eq!(h.upstream_bodies("cut")[0]["max_completion_tokens"], 16);

    let (status, body) = h.create(json!({"model":"cut","input":"long story","max_output_tokens":16})).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("incomplete")));
}

#[tokio::test]
async fn finish_reason_content_filter_is_incomplete_content_filter() {
    let h = Harness::start().await;
    h.scenario("filter", vec![Step::cassette("synthetic/zz-content-filter.yaml")]);
    let events = h.stream(json!({"model":"filter","input":"x"})).await;
    let response = final_response(&events);
    assert_eq!(response["status"], "incomplete");
    assert_eq!(response["incomplete_details"]["reason"], "content_filter");
}

fn weather_tool() -> Value {
    json!({"type":"function","name":"get_weather","description":"Weather for a city",
           "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}})
}

#[tokio::test]
async fn client_function_call_is_returned_with_streamed_arguments() {
    let h = Harness::start().await;
    h.scenario("ci", vec![Step::cassette("chat_completion/vllm-code_interpreter-step1-stream.yaml")]);
    let tool = json!({"type":"function","name":"code_interpreter","parameters":{"type":"object","properties":{"code":{"type":"string"}}}});
    let events = h.stream(json!({"model":"ci","input":"compute 2+2","tools":[tool],"tool_choice":"required"})).await;
    let k = kinds(&events);
    assert!(!k.contains(&"response.code_interpreter_call.interpreting"), "no spurious hosted-tool events");
    let call_added = events
        .iter()
        .find(|e| e["type"] == "response.output_item.added" && e["item"]["type"] == "function_call")
        .unwrap();
    assert_eq!(call_added["item"]["arguments"], "");
    assert_eq!(call_added["item"]["status"], "in_progress");
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let done = events.iter().find(|e| e["type"] == "response.function_call_arguments.done").unwrap();
    assert_eq!(deltas, done["arguments"].as_str().unwrap(), "deltas add up to the final arguments");
    let response = final_response(&events);
    assert_eq!(response["status"], "completed");
    let call = response["output"].as_array().unwrap().iter().find(|i| i["type"] == "function_call").unwrap();
    assert_eq!(call["call_id"], "call_369c3680bcf04639839f7036");
    assert_eq!(call["name"], "code_interpreter");
    assert_eq!(serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(), json!({"code":"2+2"}));
    // The tool choice went upstream for real.
    let sent = &h.upstream_bodies("ci")[0];
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["tools"][0]["function"]["name"], "code_interpreter");
    assert_eq!(response["tools"][0]["strict"], true);
    assert!(response["tools"][0]["description"].is_null());
}

#[tokio::test]
async fn every_tool_choice_form_is_sent_upstream() {
    let h = Harness::start().await;
    let steps = (0..4).map(|_| Step::text(&["ok"], "stop", None)).collect();
    h.scenario("tc", steps);
    let tools = json!([weather_tool(), {"type":"function","name":"other","parameters":{"type":"object"}}]);
    for choice in [json!("auto"), json!("none"), json!("required"), json!({"type":"function","name":"get_weather"})] {
        let (status, body) = h.create(json!({"model":"tc","input":"x","tools":tools,"tool_choice":choice})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["tool_choice"], choice);
    }
    let sent: Vec<Value> = h.upstream_bodies("tc").iter().map(|b| b["tool_choice"].clone()).collect();
    assert_eq!(
        sent,
        [json!("auto"), json!("none"), json!("required"), json!({"type":"function","function":{"name":"get_weather"}})]
    );
}

#[tokio::test]
async fn sampling_and_format_parameters_reach_the_upstream() {
    let h = Harness::start().await;
    h.scenario("p", vec![Step::text(&["{}"], "stop", Some((5, 1)))]);
    let schema =
        json!({"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false});
    let (status, body) = h
        .create(json!({"model":"p","input":"x","temperature":0.2,"top_p":0.9,"max_output_tokens":64,
            "reasoning":{"effort":"low"},"max_tool_calls":3,
            "text":{"format":{"type":"json_schema","name":"answer","schema":schema,"strict":true}}}))
        .await;
    assert_eq!(status, 200);
    let sent = &h.upstream_bodies("p")[0];
    assert_eq!(sent["temperature"], 0.2);
    assert_eq!(sent["top_p"], 0.9);
    assert_eq!(sent["max_completion_tokens"], 64);
    assert_eq!(sent["reasoning_effort"], "low");
    assert_eq!(sent["response_format"]["json_schema"]["schema"], schema);
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["max_tool_calls"], 3);
    assert_eq!(body["reasoning"], json!({"effort":"low","summary":null}));
    assert_eq!(body["text"]["format"]["name"], "answer");
}

#[tokio::test]
async fn input_items_of_every_kind_are_sent_as_chat_messages() {
    let h = Harness::start().await;
    h.scenario("items", vec![Step::text(&["done"], "stop", None)]);
    let input = json!([
        {"type":"message","role":"developer","content":[{"type":"input_text","text":"Be terse."}]},
        {"role":"user","content":[{"type":"input_text","text":"What is in the image?"},
                                  {"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}]},
        {"type":"message","role":"assistant","id":"msg_prev","status":"completed",
         "content":[{"type":"output_text","text":"Checking.","annotations":[],"logprobs":[]}]},
        {"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},
        {"type":"function_call_output","call_id":"call_1","output":"sunny"}
    ]);
    let (status, _) = h.create(json!({"model":"items","input":input,"tools":[weather_tool()]})).await;
    assert_eq!(status, 200);
    let sent = &h.upstream_bodies("items")[0]["messages"];
    assert_eq!(
        sent,
        &json!([
            {"role":"system","content":"Be terse."},
            {"role":"user","content":[{"type":"text","text":"What is in the image?"},
                {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}]},
            {"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_1","type":"function",
                "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
            {"role":"tool","tool_call_id":"call_1","content":"sunny"}
        ])
    );
}

#[tokio::test]
async fn upstream_http_error_while_streaming_ends_with_error_then_failed() {
    let h = Harness::start().await;
    h.scenario("gone", vec![Step::cassette("chat_completion/model-not-found-stream.yaml")]);
    let events = h.stream(json!({"model":"gone","input":"x"})).await;
    assert_eq!(kinds(&events), ["response.created", "response.in_progress", "error", "response.failed"]);
    assert_eq!(events[2]["error"]["code"], "404");
    assert!(events[2]["error"]["message"].as_str().unwrap().contains("does not exist"));
    let response = final_response(&events);
    assert_eq!(response["status"], "failed");
    assert_eq!(response["error"]["code"], "404");
    assert!(response["usage"].is_null());
    // A failed response is not stored.
    let id = response["id"].as_str().unwrap();
    assert_eq!(h.get(&format!("/v1/responses/{id}")).await.0, 404);
}

#[tokio::test]
async fn upstream_http_error_without_streaming_keeps_its_status_class() {
    let h = Harness::start().await;
    h.scenario("gone", vec![Step::cassette("chat_completion/model-not-found-stream.yaml")]);
    h.scenario("boom", vec![Step::Status { status: 503, body: json!({"error":{"message":"overloaded"}}) }]);
    let (status, body) = h.create(json!({"model":"gone","input":"x"})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("does not exist"));
    let (status, body) = h.create(json!({"model":"boom","input":"x"})).await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["message"], "overloaded");
}

#[tokio::test]
async fn upstream_dropping_mid_stream_fails_the_response_and_stores_nothing() {
    let h = Harness::start().await;
    let chunk = |text: &str| {
        format!("data: {}\n\n", json!({"choices":[{"index":0,"delta":{"content":text},"finish_reason":null}]}))
    };
    h.scenario("drop", vec![Step::SseThenDrop { chunks: vec![chunk("Hel"), chunk("lo")] }]);
    let events = h.stream(json!({"model":"drop","input":"x"})).await;
    let k = kinds(&events);
    assert_eq!(&k[k.len() - 2..], ["error", "response.failed"]);
    assert!(k.contains(&"response.output_text.delta"), "deltas sent before the drop are kept");
    assert_eq!(events[k.len() - 2]["error"]["code"], "upstream_unavailable");
    let id = final_response(&events)["id"].as_str().unwrap();
    assert_eq!(h.get(&format!("/v1/responses/{id}")).await.0, 404);
}

#[tokio::test]
async fn silent_upstream_times_out_with_upstream_timeout() {
    let h = Harness::start_with(&["--upstream-timeout", "0.5"], &[]).await;
    h.scenario("hang", vec![Step::Hang, Step::Hang]);
    let (status, body) = h.create(json!({"model":"hang","input":"x"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (504, Some("upstream_timeout")));
    let events = h.stream(json!({"model":"hang","input":"x"})).await;
    assert_eq!(events[events.len() - 2]["error"]["code"], "upstream_timeout");
}

#[tokio::test]
async fn unreachable_upstream_is_502_upstream_unavailable() {
    // Bind and drop a listener: its port is then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gateway = respgw_testkit::gateway::GatewayProcess::spawn(
        common::respgw_bin(),
        &common::serve_args(&format!("http://127.0.0.1:{port}/v1"), &["--upstream-ready-timeout", "0"]),
        &common::quiet_env(),
    )
    .await
    .unwrap();
    let (status, _, body) = respgw_testkit::gateway::post_json(
        &format!("{}/v1/responses", gateway.base_url()),
        &json!({"model":"m","input":"x"}),
    )
    .await
    .unwrap();
    assert_eq!(status, 502);
    assert_eq!(body["error"]["code"], "upstream_unavailable");
}

#[tokio::test]
async fn request_id_is_echoed_and_forwarded_upstream() {
    let h = Harness::start().await;
    h.scenario("text", vec![Step::cassette(TEXT)]);
    let response = respgw_testkit::gateway::http_client()
        .post(h.url("/v1/responses"))
        .header("x-request-id", "req-abc-123")
        .json(&json!({"model":"text","input":"x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "req-abc-123");
    let recorded = h.upstream.requests("text");
    assert_eq!(recorded[0].headers["x-request-id"], "req-abc-123");
}

#[tokio::test]
async fn health_is_an_empty_object() {
    let h = Harness::start().await;
    assert_eq!(h.get("/health").await, (200, json!({})));
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_error_shape() {
    let h = Harness::start().await;
    let (status, body) = h.get("/v1/nope").await;
    assert_eq!(status, 404);
    common::assert_error_shape(&body);
    let (status, body) = h.send(respgw_testkit::gateway::http_client().put(h.url("/v1/responses"))).await;
    assert_eq!(status, 405);
    common::assert_error_shape(&body);
}
