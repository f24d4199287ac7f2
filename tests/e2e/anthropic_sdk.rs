//! The official `anthropic` Python SDK (pinned in `tests/sdk/requirements.txt`) against the real
//! gateway's Messages API: `tests/sdk/anthropic_sdk_check.py` drives create, `messages.stream()`,
//! thinking, images, a tool loop, `count_tokens`, errors and the model list, validating every body
//! and event with the SDK's own models; this test then asserts, scenario by scenario, what the
//! replay upstream received — what the model was really asked.
//!
//! The SDK lives in the project's virtualenv, which `scripts/test` creates from
//! `tests/sdk/requirements.txt`; `RESPGW_PYTHON` may point at another interpreter.

use crate::common;

use base64::Engine as _;
use common::{Harness, tool_turn};
use respgw_testkit::toy_tokenizer;
use respgw_testkit::upstream::{Step, TokenizerRoutes};
use serde_json::{Value, json};

/// The gateway's API key in this test.
const KEY: &str = "sk-respgw-anthropic-test";

/// A 1×1 PNG, base64: the image the script sends.
const TINY_PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGP4z8DwHwAFAAH/iZk9HQAAAABJRU5ErkJggg==";

/// The text of the PDF the script sends.
const PDF_SENTENCE: &str = "The lighthouse keeper counts seventeen gulls every morning.";

/// The test Python has the pinned `anthropic` SDK.
fn anthropic_sdk() -> Result<(), String> {
    common::python_env()?;
    let imported = std::process::Command::new(common::test_python())
        .args(["-c", "import anthropic"])
        .output()
        .is_ok_and(|o| o.status.success());
    if imported {
        Ok(())
    } else {
        Err("the test Python has no `anthropic` package: scripts/test installs tests/sdk/requirements.txt".into())
    }
}

/// A loopback server answering every path with the 1×1 PNG; returns its base URL.
async fn png_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://127.0.0.1:{}", listener.local_addr().expect("addr").port());
    let png = base64::engine::general_purpose::STANDARD.decode(TINY_PNG_BASE64).expect("the PNG decodes");
    let app = axum::Router::new().fallback(move || {
        let png = png.clone();
        async move { ([(axum::http::header::CONTENT_TYPE, "image/png")], png) }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

/// `Paris.` in two chunks, with usage (12 prompt tokens, 3 completion tokens).
fn paris() -> Step {
    Step::text(&["Par", "is."], "stop", Some((12, 3)))
}

/// `text`, then vLLM's `finish_reason: "stop"` naming the stop string that ended it.
fn stopped_by(text: &str, stop: &str) -> Step {
    let chunks = [
        json!({"choices":[{"index":0,"delta":{"role":"assistant","content":text},"finish_reason":null}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop","stop_reason":stop}]}),
        json!({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14}}),
    ];
    let mut sse: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    sse.push("data: [DONE]\n\n".into());
    Step::Sse(sse)
}

/// Reasoning about a code interpreter run, then "The result of 2+2 is **4**.".
fn reasoning() -> Step {
    Step::cassette("chat_completion/vllm-code_interpreter-step2-stream.yaml")
}

/// The text of a chat message's content (string or parts).
fn chat_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// `(role, text)` of each chat message.
fn roles_and_texts(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("no messages: {body}"))
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or_default().to_owned(), chat_text(m)))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(r, t)| (r.to_string(), t.to_string())).collect()
}

/// The `{"fact": …}` lines the script printed, merged.
fn facts(stdout: &str) -> Value {
    let mut all = serde_json::Map::new();
    for line in stdout.lines() {
        if let Ok(Value::Object(mut o)) = serde_json::from_str::<Value>(line)
            && let Some(Value::Object(fact)) = o.remove("fact")
        {
            all.extend(fact);
        }
    }
    Value::Object(all)
}

#[tokio::test]
async fn the_official_anthropic_sdk_parses_everything_and_the_model_gets_the_request() {
    respgw_testkit::skip_unless!(anthropic_sdk());
    let h = Harness::start_with(&["--api-key", KEY, "--input-file-fetch-exempt-host", "127.0.0.1"], &[]).await;
    h.upstream.serve_tokenizer(TokenizerRoutes::Vllm);
    h.scenario("plain", vec![paris(), paris()]);
    h.scenario("system", vec![paris()]);
    h.scenario("image", vec![paris()]);
    h.scenario("documents", vec![paris()]);
    h.scenario("thinking", vec![reasoning(), paris()]);
    h.scenario("stream", vec![paris()]);
    h.scenario("stream-thinking", vec![reasoning()]);
    h.scenario("tool", vec![tool_turn(&[("get_weather", json!({"city": "Paris"}))]), paris()]);
    h.scenario("count", vec![]);
    h.scenario(
        "limits",
        vec![
            Step::cassette("chat_completion/text-max_tokens-length-stream.yaml"),
            stopped_by("One, two, three. ", "END"),
        ],
    );
    let Step::Sse(chunks) = paris() else { unreachable!("Step::text is an SSE step") };
    h.scenario("broken", vec![Step::SseThenDrop { chunks: chunks[..2].to_vec() }]);
    h.scenario("gone", vec![Step::cassette("chat_completion/model-not-found-stream.yaml")]);
    h.scenario("bad", vec![]);

    let image_url = format!("{}/cat.png", png_server().await);
    let pdf = base64::engine::general_purpose::STANDARD.encode(respgw_testkit::pdf::text_pages(&[PDF_SENTENCE]));
    let envs =
        [("RESPGW_TEST_KEY", KEY), ("RESPGW_TEST_IMAGE_URL", image_url.as_str()), ("RESPGW_TEST_PDF", pdf.as_str())];
    let run = common::run_sdk_script("anthropic_sdk_check.py", h.gateway.base_url(), &envs).await;
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(run.succeeded, "SDK checks failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}", h.gateway.stderr_text());
    assert!(stdout.contains("anthropic sdk checks passed"), "{stdout}");
    let facts = facts(stdout);
    assert!(h.upstream.replay_errors().is_empty(), "{:?}", h.upstream.replay_errors());
    let scenarios =
        ["plain", "system", "image", "limits", "thinking", "stream", "broken", "stream-thinking", "tool", "gone"];
    for scenario in scenarios {
        assert_eq!(h.upstream.remaining_steps(scenario), 0, "every scripted turn of {scenario} was used");
    }

    // Plain: the one user message, the token limit, a stream (the gateway always streams upstream).
    let plain = h.upstream_bodies("plain");
    assert_eq!(plain.len(), 2, "the x-api-key and the Bearer request");
    for body in &plain {
        assert_eq!(roles_and_texts(body), pairs(&[("user", "Capital of France?")]));
        assert_eq!(body["max_completion_tokens"], 64, "{body}");
        assert_eq!(body["stream"], true);
        assert!(body.get("tools").is_none(), "{body}");
    }

    // System blocks become one system message (blocks a blank line apart); the turns follow in
    // order; sampling is passed on.
    let system = &h.upstream_bodies("system")[0];
    assert_eq!(
        roles_and_texts(system),
        pairs(&[
            ("system", "Be brief.\n\nAnswer in English."),
            ("user", "Capital of France?"),
            ("assistant", "Let me think."),
            ("user", "Just the name."),
        ]),
        "{system}"
    );
    assert_eq!((system["temperature"].as_f64(), system["top_p"].as_f64()), (Some(0.2), Some(0.9)), "{system}");
    assert_eq!(system["max_completion_tokens"], 100);
    assert_eq!(system["stop"], json!(["END"]), "stop_sequences reach the model: {system}");
    assert_eq!(system["top_k"], 40, "{system}");

    // Documents: the PDF's extracted text and the text document reach the model with the question.
    let documents = chat_text(&h.upstream_bodies("documents")[0]["messages"][0]);
    for expected in [PDF_SENTENCE, "The secret number is 42.", "Summarize both."] {
        assert!(documents.contains(expected), "{expected:?} reached the model: {documents}");
    }

    // Stop reasons: the token limit and the stop strings reach the model.
    let limits = h.upstream_bodies("limits");
    assert_eq!(limits[0]["max_completion_tokens"], 5);
    assert_eq!(limits[1]["stop"], json!(["END", "STOP"]));

    // Images: base64 as a data URL, a URL fetched by the gateway and sent the same way, then the text.
    let image = &h.upstream_bodies("image")[0];
    let parts = image["messages"][0]["content"].as_array().cloned().unwrap_or_default();
    let urls: Vec<&str> = parts.iter().filter_map(|p| p["image_url"]["url"].as_str()).collect();
    let data_url = format!("data:image/png;base64,{TINY_PNG_BASE64}");
    assert_eq!(urls, [data_url.as_str(), data_url.as_str()], "{image}");
    assert_eq!(chat_text(&image["messages"][0]), "What is in these images?");

    // Thinking: asked with a reasoning budget; the signed block replayed reaches the model as its
    // reasoning; the two forged replays never reached it.
    let thinking = h.upstream_bodies("thinking");
    assert_eq!(thinking.len(), 2, "forged thinking blocks are refused before the model");
    assert!(thinking[0]["reasoning_effort"].is_string(), "a thinking budget asks for reasoning: {}", thinking[0]);
    let assistant = &thinking[1]["messages"][1];
    assert_eq!(assistant["role"], "assistant", "{}", thinking[1]);
    assert!(assistant["reasoning_content"].as_str().is_some_and(|r| r.contains("code_interpreter")), "{assistant}");
    assert_eq!(chat_text(assistant).trim(), "The result of 2+2 is **4**.");
    assert_eq!(roles_and_texts(&thinking[1])[2], ("user".to_owned(), "And the capital of France?".to_owned()));
    let signature = facts["thinking_signature"].as_str().unwrap_or_default();
    assert!(!signature.is_empty() && !signature.contains("code_interpreter"), "the signature hides the reasoning");

    // Streams ask the same.
    assert_eq!(roles_and_texts(&h.upstream_bodies("stream")[0]), pairs(&[("user", "Capital of France?")]));
    assert!(h.upstream_bodies("stream-thinking")[0]["reasoning_effort"].is_string());

    // Tool loop: the tool offered as a function (`any` → `required`), then the call and its result.
    let tool = h.upstream_bodies("tool");
    assert_eq!(tool.len(), 2);
    assert_eq!(
        tool[0]["tools"],
        json!([{"type":"function","function":{"name":"get_weather","description":"Weather of a city.",
            "parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},
            "strict":false}}])
    );
    assert_eq!(tool[0]["tool_choice"], "required");
    let messages = tool[1]["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    let call = &messages[1]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    let arguments: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("arguments are JSON: {e}: {call}"));
    assert_eq!(arguments, json!({"city": "Paris"}));
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["tool_call_id"], call["id"]);
    assert_eq!(chat_text(&messages[2]), "18°C and sunny");
    assert!(facts["tool_use_id"].as_str().is_some_and(|id| !id.is_empty()), "{facts}");

    // count_tokens: counted by the upstream's tokenizer, on the chat request a reply would send.
    let counted: Vec<Value> =
        h.upstream.requests("count").into_iter().filter(|r| r.path == "/tokenize").map(|r| r.body).collect();
    assert_eq!(counted.len(), 1, "{counted:?}");
    assert_eq!(
        roles_and_texts(&counted[0]),
        pairs(&[("system", "Be brief."), ("user", "What is the weather in Paris?")])
    );
    assert_eq!(counted[0]["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(facts["count_tokens"].as_u64(), Some(toy_tokenizer::prompt_tokens(&counted[0])));

    // Refused requests never reach the model.
    assert!(h.upstream.requests("bad").is_empty(), "{:?}", h.upstream.requests("bad"));
}
