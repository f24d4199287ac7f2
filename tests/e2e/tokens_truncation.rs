//! `POST /v1/responses/input_tokens` and `truncation`, against the replay upstream counting with
//! its toy tokenizer (`respgw_testkit::toy_tokenizer`): the count equals what the upstream counts
//! for the chat request a response really sends, with each counting method; a context-window
//! overflow is a 400 `context_length_exceeded` (or `response.failed`) with truncation disabled,
//! and with `truncation: "auto"` the oldest turns are dropped, the retried request shows it, and
//! the response says so — also after a `GET`. The official Python SDK checks the same through
//! its typed classes (`tests/sdk/tokens_truncation_check.py`).

use crate::common;
use crate::on_both_backends;

use common::{Backend, Harness, assert_error_shape, final_response, kinds, tool_turn, turns};
use respgw_testkit::toy_tokenizer;
use respgw_testkit::upstream::{Step, TokenizerRoutes};
use serde_json::{Value, json};

/// `POST /v1/responses/input_tokens`.
async fn count(h: &Harness, body: &Value) -> (u16, Value) {
    let (status, _, json) = respgw_testkit::gateway::post_json(&h.url("/v1/responses/input_tokens"), body)
        .await
        .expect("request completes");
    if status != 200 {
        assert_error_shape(&json);
    }
    (status, json)
}

/// The count of `body`, which must succeed and have the reply's shape.
async fn count_ok(h: &Harness, body: &Value) -> u64 {
    let (status, reply) = count(h, body).await;
    assert_eq!(status, 200, "{reply}\n{}", h.gateway.stderr_text());
    assert_eq!(reply["object"], "response.input_tokens", "{reply}");
    assert_eq!(reply.as_object().map(|o| o.len()), Some(2), "{reply}");
    reply["input_tokens"].as_u64().unwrap_or_else(|| panic!("no count: {reply}"))
}

/// The chat requests the upstream received at `path`, in order.
fn requests_at(h: &Harness, path: &str) -> Vec<Value> {
    h.upstream.all_requests().into_iter().filter(|r| r.path == path).map(|r| r.body).collect()
}

/// The streamed chat requests (the responses' model turns) for `model`.
fn model_turns(h: &Harness, model: &str) -> Vec<Value> {
    requests_at(h, "/v1/chat/completions")
        .into_iter()
        .filter(|body| body["model"] == model && body["stream"] == true)
        .collect()
}

fn text(answer: &str) -> Step {
    Step::text(&[answer], "stop", Some((10, 2)))
}

fn weather_tool() -> Value {
    json!([{"type":"function","name":"get_weather","description":"Weather of a city.",
            "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}])
}

/// With each counting method, the count is the upstream's count of exactly what a response with
/// the same body sends, and follows instructions, tools and `previous_response_id` history.
async fn counts_what_a_response_sends(routes: TokenizerRoutes) {
    let h = Harness::start().await;
    h.upstream.serve_tokenizer(routes);
    let fallback = routes == TokenizerRoutes::None;
    let counts_take_a_step = || {
        if fallback {
            h.scenario("m", vec![Step::OneTokenCompletion]);
        }
    };

    counts_take_a_step();
    let plain = count_ok(&h, &json!({"model":"m","input":"Hello, world!","instructions":"Be brief."})).await;
    let by_hand = toy_tokenizer::prompt_tokens(&json!({"messages":[
        {"role":"system","content":"Be brief."},{"role":"user","content":"Hello, world!"}]}));
    assert_eq!(plain, by_hand);
    counts_take_a_step();
    let without_instructions = count_ok(&h, &json!({"model":"m","input":"Hello, world!"})).await;
    assert_eq!(without_instructions, plain - toy_tokenizer::count("<|system|> Be brief."));

    // Tools: what a response really sends, counted by the upstream's own tokenizer.
    let body = json!({"model":"m","input":"Weather in Paris?","instructions":"Be brief.","tools":weather_tool()});
    counts_take_a_step();
    let with_tools = count_ok(&h, &body).await;
    assert!(with_tools > plain, "{with_tools} <= {plain}");
    h.scenario("m", vec![text("Sunny.")]);
    let (status, first) = h.create(body.clone()).await;
    assert_eq!(status, 200, "{first}");
    let sent = model_turns(&h, "m");
    assert_eq!(with_tools, toy_tokenizer::prompt_tokens(&sent[0]));

    // History from `previous_response_id`.
    let next = json!({"model":"m","previous_response_id":first["id"],"input":"And tomorrow?","tools":weather_tool()});
    counts_take_a_step();
    let continued = count_ok(&h, &next).await;
    h.scenario("m", vec![text("Rain.")]);
    assert_eq!(h.create(next).await.0, 200);
    let sent = model_turns(&h, "m");
    assert_eq!(continued, toy_tokenizer::prompt_tokens(&sent[1]));
    assert!(continued > with_tools);

    // History from a conversation.
    let (status, conversation) = h
        .send(
            respgw_testkit::gateway::http_client()
                .post(h.url("/v1/conversations"))
                .json(&json!({"items":[{"role":"user","content":"Remember: the colour is blue."},
                             {"role":"assistant","content":[{"type":"output_text","text":"Noted."}]}]})),
        )
        .await;
    assert_eq!(status, 200, "{conversation}");
    let in_conversation = json!({"model":"m","conversation":conversation["id"],"input":"Which colour?"});
    counts_take_a_step();
    let conversation_count = count_ok(&h, &in_conversation).await;
    h.scenario("m", vec![text("Blue.")]);
    assert_eq!(h.create(in_conversation).await.0, 200);
    let sent = model_turns(&h, "m");
    assert_eq!(conversation_count, toy_tokenizer::prompt_tokens(&sent[2]));
    let (status, error) = count(&h, &json!({"model":"m","conversation":"conv_nope","input":"x"})).await;
    assert_eq!((status, error["error"]["code"].as_str()), (404, Some("conversation_not_found")));

    let (status, error) = count(&h, &json!({"model":"m","previous_response_id":"resp_nope","input":"x"})).await;
    assert_eq!((status, error["error"]["code"].as_str()), (400, Some("previous_response_not_found")));

    // The method was probed once and then used alone.
    let counted = 5;
    let tokenize = requests_at(&h, "/tokenize");
    let templates = requests_at(&h, "/apply-template");
    let one_token: Vec<Value> =
        requests_at(&h, "/v1/chat/completions").into_iter().filter(|body| body["stream"] == false).collect();
    match routes {
        TokenizerRoutes::Vllm => {
            assert_eq!(tokenize.len(), counted);
            assert!(tokenize.iter().all(|b| b["messages"].is_array() && b["add_generation_prompt"] == true));
            assert!(tokenize[2]["tools"][0]["function"]["name"] == "get_weather", "{}", tokenize[2]);
            assert_eq!((templates.len(), one_token.len()), (0, 0));
        }
        TokenizerRoutes::LlamaCpp => {
            // One vLLM-style probe (llama.cpp answers it with no count), then template + tokenize.
            assert_eq!(tokenize.iter().filter(|b| b["messages"].is_array()).count(), 1);
            assert_eq!(
                tokenize.iter().filter(|b| b["content"].is_string() && b["add_special"] == true).count(),
                counted
            );
            assert_eq!((templates.len(), one_token.len()), (counted, 0));
            assert_eq!(templates[2]["tools"][0]["function"]["name"], "get_weather");
            assert!(templates.iter().all(|b| b.get("stream").is_none()));
        }
        TokenizerRoutes::None => {
            assert_eq!((tokenize.len(), templates.len()), (1, 1));
            assert_eq!(one_token.len(), counted);
            assert!(one_token.iter().all(|b| b["max_tokens"] == 1 && b.get("stream_options").is_none()));
        }
    }
    assert!(h.upstream.replay_errors().iter().all(|e| e.contains("no route")), "{:?}", h.upstream.replay_errors());
}

#[tokio::test]
async fn input_tokens_with_vllm_tokenize() {
    counts_what_a_response_sends(TokenizerRoutes::Vllm).await;
}

#[tokio::test]
async fn input_tokens_with_llama_cpp_apply_template() {
    counts_what_a_response_sends(TokenizerRoutes::LlamaCpp).await;
}

#[tokio::test]
async fn input_tokens_with_a_one_token_completion() {
    counts_what_a_response_sends(TokenizerRoutes::None).await;
}

#[tokio::test]
async fn input_tokens_is_only_a_post_route() {
    let h = Harness::start().await;
    let (status, body) = h.get("/v1/responses/input_tokens").await;
    assert_eq!((status, body["error"]["code"].as_str()), (405, Some("method_not_allowed")));
    let (status, body) = count(&h, &json!({"input":"x"})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("model")));
}

/// A conversation of three turns whose first is long (a client function call and its output
/// included), ready for a fourth; the upstream enforces a window the whole does not fit but the
/// last two turns do. Returns the fourth request's body.
async fn long_conversation(h: &Harness) -> Value {
    let long = "word ".repeat(300);
    h.scenario("t", vec![tool_turn(&[("get_weather", json!({"city":"Paris"}))]), text("Sunny."), text("Noted.")]);
    let (status, first) =
        h.create(json!({"model":"t","input":format!("Long question: {long}"),"tools":weather_tool()})).await;
    assert_eq!(status, 200, "{first}");
    let call_id = first["output"][0]["call_id"].as_str().expect("a function call").to_owned();
    let (status, second) = h
        .create(json!({"model":"t","previous_response_id":first["id"],"tools":weather_tool(),
                       "input":[{"type":"function_call_output","call_id":call_id,"output":long}]}))
        .await;
    assert_eq!(status, 200, "{second}");
    let (status, third) = h.create(json!({"model":"t","previous_response_id":second["id"],"input":"Short one?"})).await;
    assert_eq!(status, 200, "{third}");
    let next = json!({"model":"t","previous_response_id":third["id"],"input":"And the last one?"});
    h.upstream.serve_tokenizer(TokenizerRoutes::Vllm);
    let whole = count_ok(h, &next).await;
    // The first turn is over 600 tokens: without it the rest fits.
    h.upstream.set_context_window(Some(whole - 100));
    next
}

async fn truncation_disabled_is_a_400_context_length_exceeded(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let next = long_conversation(&h).await;
    let sent_before = model_turns(&h, "t").len();

    let (status, error) = h.create(next.clone()).await;
    assert_eq!(status, 400, "{error}");
    let error = &error["error"];
    assert_eq!(
        (error["type"].as_str(), error["code"].as_str(), error["param"].as_str()),
        (Some("invalid_request_error"), Some("context_length_exceeded"), Some("input"))
    );
    assert!(error["message"].as_str().is_some_and(|m| m.contains("tokens requested; the window is")), "{error}");

    let events = h.stream(next).await;
    assert_eq!(kinds(&events)[events.len() - 2..], ["error", "response.failed"]);
    let failed = final_response(&events);
    assert_eq!(failed["error"]["code"], "context_length_exceeded");
    assert!(failed.get("truncation_details").is_none());
    // One refused request each, never retried.
    assert_eq!(model_turns(&h, "t").len(), sent_before + 2);
}

async fn truncation_auto_drops_the_oldest_turns(backend: Backend) {
    let h = Harness::start_on(backend).await;
    let mut next = long_conversation(&h).await;
    next["truncation"] = json!("auto");
    let sent_before = model_turns(&h, "t").len();
    h.scenario("t", vec![text("Last."), text("Streamed.")]);

    let (status, response) = h.create(next.clone()).await;
    assert_eq!(status, 200, "{response}\n{}", h.gateway.stderr_text());
    assert_eq!(response["output"][0]["content"][0]["text"], "Last.");
    let dropped = json!({"dropped_turns": 1, "dropped_items": 4});
    assert_eq!(response["truncation_details"], dropped);

    // The upstream saw the whole conversation refused, then the same without its first turn —
    // the call and its output gone together.
    let sent = model_turns(&h, "t");
    assert_eq!(sent.len(), sent_before + 2);
    let (refused, retried) = (&sent[sent_before], &sent[sent_before + 1]);
    let messages = |body: &Value| body["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        turns(&messages(refused)),
        ["user", "assistant(get_weather)", "tool", "assistant", "user", "assistant", "user"]
    );
    assert_eq!(turns(&messages(retried)), ["user", "assistant", "user"]);
    assert_eq!(messages(retried)[..], messages(refused)[4..]);
    common::assert_results_follow_their_calls(&messages(retried));

    // The count survives storage.
    let (status, stored) = h.get(&format!("/v1/responses/{}", response["id"].as_str().unwrap_or_default())).await;
    assert_eq!(status, 200);
    assert_eq!(stored["truncation_details"], dropped);

    // Streamed: every event valid, the terminal response carries the count.
    let events = h.stream(next).await;
    assert_eq!(kinds(&events).last(), Some(&"response.completed"));
    assert_eq!(final_response(&events)["truncation_details"], dropped);
}

on_both_backends!(truncation_disabled_is_a_400_context_length_exceeded, truncation_auto_drops_the_oldest_turns);

/// The official Python SDK: `responses.input_tokens.count` parses into `InputTokenCountResponse`
/// and equals the upstream's count; truncation disabled raises `BadRequestError` with
/// `context_length_exceeded`; `auto` succeeds and reports what it dropped, also on retrieval.
async fn the_python_sdk_counts_and_truncates(backend: Backend) {
    respgw_testkit::skip_unless!(common::python_env());
    let h = Harness::start_on(backend).await;
    h.upstream.serve_tokenizer(TokenizerRoutes::Vllm);
    let long = "word ".repeat(200);
    let conversation = json!({"messages":[
        {"role":"user","content":format!("First: {long}")},
        {"role":"assistant","content":"ok"},
        {"role":"user","content":"Second?"},
        {"role":"assistant","content":"ok"},
        {"role":"user","content":"Third?"}]});
    let whole = toy_tokenizer::prompt_tokens(&conversation);
    h.upstream.set_context_window(Some(whole - 100));
    h.scenario("long", vec![text("Fits now."), text("Streamed.")]);
    let expected = toy_tokenizer::prompt_tokens(&json!({"messages":[
        {"role":"system","content":"Be brief."},{"role":"user","content":"Hello, world!"}]}));

    let (whole, expected) = (whole.to_string(), expected.to_string());
    let run = common::run_sdk_script(
        "tokens_truncation_check.py",
        h.gateway.base_url(),
        &[("EXPECTED_INPUT_TOKENS", &expected), ("WHOLE_CONVERSATION_TOKENS", &whole)],
    )
    .await;
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(run.succeeded, "SDK checks failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}", h.gateway.stderr_text());
    assert!(stdout.contains("checks passed"), "{stdout}");

    // What the upstream saw: the count, the refused requests, the retried one without turn 1.
    let tokenize = requests_at(&h, "/tokenize");
    assert_eq!(tokenize.len(), 2, "{tokenize:?}");
    let sent = model_turns(&h, "long");
    let shapes: Vec<Vec<String>> =
        sent.iter().map(|b| turns(b["messages"].as_array().unwrap_or(&Vec::new()))).collect();
    let whole_shape = ["user", "assistant", "user", "assistant", "user"];
    let kept_shape = ["user", "assistant", "user"];
    assert_eq!(shapes, [&whole_shape[..], &whole_shape, &whole_shape, &kept_shape, &whole_shape, &kept_shape]);
}

on_both_backends!(the_python_sdk_counts_and_truncates);
