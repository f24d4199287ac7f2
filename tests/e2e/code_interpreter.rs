//! `code_interpreter` end to end: the recorded vLLM stream calls the tool, the gateway runs the
//! code in the real bubblewrap sandbox, loops back to the model with the result, and shows the
//! call with the reference API's events and item shapes.
//!
//! Needs bubblewrap and the sandbox's Python environment (`scripts/setup-code-interpreter`,
//! which `scripts/test` runs).

use crate::common;

use common::{Harness, assert_append_only, assert_results_follow_their_calls, final_response, kinds, turns};
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

const STEP1: &str = "chat_completion/vllm-code_interpreter-step1-stream.yaml";
const STEP2: &str = "chat_completion/vllm-code_interpreter-step2-stream.yaml";

async fn harness() -> Harness {
    let h = Harness::start_with(&[], &[("GW_CODE_INTERPRETER", "spawn")]).await;
    assert!(
        h.wait_for_log("code_interpreter is enabled").await,
        "the sandbox is not available here: run scripts/setup-code-interpreter\n{}",
        h.gateway.stderr_text()
    );
    h
}

fn ci_tool() -> Value {
    json!({"type":"code_interpreter","container":{"type":"auto"}})
}

/// Events other than those the Open Responses schema defines are checked by shape here.
fn stream_kinds(events: &[Value]) -> Vec<&str> {
    kinds(events)
}

#[tokio::test]
async fn the_model_calls_the_sandbox_and_answers_with_its_result() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let h = harness().await;
    h.scenario("minimax", vec![Step::cassette(STEP1), Step::cassette(STEP2)]);
    let events = h
        .stream_unchecked(json!({"model":"minimax","input":"What is 2+2? Use the tool.","tools":[ci_tool()],
            "include":["code_interpreter_call.outputs"]}))
        .await;
    let k = stream_kinds(&events);
    let at = |t: &str| k.iter().position(|x| *x == t).unwrap_or_else(|| panic!("no {t} in {k:?}"));
    assert!(at("response.code_interpreter_call.in_progress") < at("response.code_interpreter_call_code.delta"));
    assert!(at("response.code_interpreter_call_code.delta") < at("response.code_interpreter_call_code.done"));
    assert!(at("response.code_interpreter_call_code.done") < at("response.code_interpreter_call.interpreting"));
    assert!(at("response.code_interpreter_call.interpreting") < at("response.code_interpreter_call.completed"));
    let code: String = events
        .iter()
        .filter(|e| e["type"] == "response.code_interpreter_call_code.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(code, "2+2");

    let response = final_response(&events);
    assert_eq!(response["status"], "completed");
    let ci = response["output"].as_array().unwrap().iter().find(|i| i["type"] == "code_interpreter_call").unwrap();
    assert_eq!(ci["status"], "completed");
    assert_eq!(ci["code"], "2+2");
    assert!(ci["container_id"].as_str().unwrap().starts_with("cntr_"));
    assert_eq!(ci["outputs"], json!([{"type":"logs","logs":"4"}]));
    let answer = response["output"].as_array().unwrap().iter().rev().find(|i| i["type"] == "message").unwrap();
    assert!(answer["content"][0]["text"].as_str().unwrap().contains("**4**"));
    // Usage is summed over both model turns (344+446 in, 70+56 out).
    assert_eq!(
        (response["usage"]["input_tokens"].as_u64(), response["usage"]["output_tokens"].as_u64()),
        (Some(790), Some(126))
    );

    // The second upstream call carries the call and its result.
    let sent = h.upstream_bodies("minimax");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["tools"][0]["function"]["name"], "code_interpreter");
    let messages = sent[1]["messages"].as_array().unwrap();
    let call = messages.iter().find_map(|m| m["tool_calls"].as_array()).unwrap();
    assert_eq!(call[0]["function"]["name"], "code_interpreter");
    let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["content"], "4");
    assert_eq!(result["tool_call_id"], call[0]["id"]);
}

#[tokio::test]
async fn outputs_are_null_unless_included() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let h = harness().await;
    h.scenario("minimax", vec![Step::cassette(STEP1), Step::cassette(STEP2)]);
    let (status, body) = h.create(json!({"model":"minimax","input":"2+2?","tools":[ci_tool()]})).await;
    assert_eq!(status, 200, "{body}");
    let ci = body["output"].as_array().unwrap().iter().find(|i| i["type"] == "code_interpreter_call").unwrap();
    assert!(ci["outputs"].is_null() && ci.as_object().unwrap().contains_key("outputs"));
    assert_eq!(body["tools"], json!([ci_tool()]));
}

/// One tool-call chunk stream that runs `code`.
fn run_call(code: &str) -> Step {
    let args = json!({"code": code}).to_string();
    let call = json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",
        "function":{"name":"code_interpreter","arguments":args}}]},"finish_reason":"tool_calls"}]});
    Step::Sse(vec![format!("data: {call}\n\n"), "data: [DONE]\n\n".into()])
}

/// A turn that runs `code`, then the scripted final answer.
fn runs(code: &str) -> Vec<Step> {
    vec![run_call(code), Step::text(&["Done."], "stop", None)]
}

#[tokio::test]
async fn a_matplotlib_figure_becomes_an_image_output() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let h = harness().await;
    let code =
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.savefig('plot.png')\nprint('saved')";
    h.scenario("plot", runs(code));
    let (status, body) = h
        .create(json!({"model":"plot","input":"plot","tools":[ci_tool()],"include":["code_interpreter_call.outputs"]}))
        .await;
    assert_eq!(status, 200, "{body}");
    let ci = body["output"].as_array().unwrap().iter().find(|i| i["type"] == "code_interpreter_call").unwrap();
    let outputs = ci["outputs"].as_array().unwrap();
    assert!(
        outputs.iter().any(|o| o["type"] == "logs" && o["logs"].as_str().unwrap().contains("saved")),
        "{outputs:?}"
    );
    let image = outputs.iter().find(|o| o["type"] == "image").expect("an image output");
    let url = image["url"].as_str().unwrap();
    assert!(url.starts_with("data:image/png;base64,iVBORw0KGgo"), "a real PNG: {}", &url[..40.min(url.len())]);
}

#[tokio::test]
async fn an_exception_is_a_result_the_model_sees_not_a_failed_response() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let h = harness().await;
    h.scenario("boom", runs("1/0"));
    let (status, body) = h
        .create(json!({"model":"boom","input":"x","tools":[ci_tool()],"include":["code_interpreter_call.outputs"]}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "completed");
    let ci = body["output"].as_array().unwrap().iter().find(|i| i["type"] == "code_interpreter_call").unwrap();
    assert!(ci["outputs"][0]["logs"].as_str().unwrap().contains("ZeroDivisionError"), "{ci}");
    let tool_message = h.upstream_bodies("boom")[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert!(tool_message["content"].as_str().unwrap().contains("ZeroDivisionError"));
}

#[tokio::test]
async fn files_persist_in_the_conversation_container() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let h = harness().await;
    let mut steps = runs("open('note.txt', 'w').write('kept across turns')");
    steps.extend(runs("print(open('note.txt').read())"));
    h.scenario("files", steps);
    let include = json!(["code_interpreter_call.outputs"]);
    let (_, first) = h.create(json!({"model":"files","input":"write","tools":[ci_tool()],"include":include})).await;
    let (status, second) = h
        .create(json!({"model":"files","input":"read","tools":[ci_tool()],"include":include,"previous_response_id":first["id"]}))
        .await;
    assert_eq!(status, 200, "{second}");
    let container = |r: &Value| {
        r["output"].as_array().unwrap().iter().find(|i| i["type"] == "code_interpreter_call").unwrap()["container_id"]
            .clone()
    };
    assert_eq!(container(&first), container(&second), "the conversation keeps its container");
    let ci = second["output"].as_array().unwrap().iter().find(|i| i["type"] == "code_interpreter_call").unwrap();
    assert!(ci["outputs"][0]["logs"].as_str().unwrap().contains("kept across turns"), "{ci}");
    // The earlier call is part of the history the model sees.
    let messages = h.upstream_bodies("files")[2]["messages"].clone();
    assert!(messages.to_string().contains("note.txt"), "{messages}");
}

#[tokio::test]
async fn two_sandbox_rounds_are_two_assistant_turns_in_every_later_request() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let h = harness().await;
    let again = || Step::text(&["Again."], "stop", None);
    h.scenario(
        "rounds",
        vec![run_call("print(6)"), run_call("print(6 * 7)"), Step::text(&["Done."], "stop", None), again(), again()],
    );
    let include = json!(["code_interpreter_call.outputs"]);
    let (status, first) =
        h.create(json!({"model":"rounds","input":"compute","tools":[ci_tool()],"include":include})).await;
    assert_eq!(status, 200, "{first}");
    let sent = h.upstream_messages("rounds");
    assert_eq!(sent.len(), 3);
    assert_eq!(turns(&sent[1]), ["user", "assistant(code_interpreter)", "tool"]);
    assert_eq!(turns(&sent[2]), ["user", "assistant(code_interpreter)", "tool", "assistant(code_interpreter)", "tool"]);
    let results: Vec<&str> =
        sent[2].iter().filter(|m| m["role"] == "tool").map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(results, ["6\n", "42\n"]);
    assert_results_follow_their_calls(&sent[2]);
    assert_append_only(&sent);

    let (status, second) = h
        .create(json!({"model":"rounds","input":"again","tools":[ci_tool()],"include":include,
                       "previous_response_id":first["id"]}))
        .await;
    assert_eq!(status, 200, "{second}");
    let sent = h.upstream_messages("rounds");
    let mut expected = sent[2].clone();
    expected.push(json!({"role":"assistant","content":"Done."}));
    expected.push(json!({"role":"user","content":"again"}));
    assert_eq!(sent[3], expected);
    assert_append_only(&sent);

    let mut input = vec![json!({"role":"user","content":"compute"})];
    input.extend(first["output"].as_array().unwrap().iter().cloned());
    input.push(json!({"role":"user","content":"again"}));
    let (status, replayed) =
        h.create(json!({"model":"rounds","input":input,"store":false,"tools":[ci_tool()],"include":include})).await;
    assert_eq!(status, 200, "{replayed}");
    let sent = h.upstream_messages("rounds");
    assert_eq!(serde_json::to_string(&sent[4]).unwrap(), serde_json::to_string(&sent[3]).unwrap());
}

#[tokio::test]
async fn a_disabled_code_interpreter_is_not_offered_and_is_refused() {
    let h = Harness::start_with(&["--code-interpreter", "disabled"], &[]).await;
    let (status, body) = h.create(json!({"model":"m","input":"x","tools":[ci_tool()]})).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("tools[0].type")));
}

#[tokio::test]
async fn code_interpreter_metrics_are_recorded() {
    respgw_testkit::skip_unless!(respgw_testkit::prerequisites::code_interpreter_sandbox());
    let h = harness().await;
    h.scenario("minimax", vec![Step::cassette(STEP1), Step::cassette(STEP2)]);
    h.create(json!({"model":"minimax","input":"2+2?","tools":[ci_tool()]})).await;
    let text = h.metrics().await;
    for series in [
        r#"gw_responses_tool_calls_requested_total{tool_type="code_interpreter"} 1"#,
        r#"gw_responses_tool_calls_executed_total{tool_type="code_interpreter"} 1"#,
        r#"gw_responses_tool_execution_duration_seconds_count{tool_type="code_interpreter"} 1"#,
    ] {
        assert!(text.contains(series), "missing {series}\n{text}");
    }
    assert!(!text.contains(r#"gw_responses_tool_errors_total{tool_type="code_interpreter"}"#));
}
