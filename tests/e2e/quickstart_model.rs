//! The quickstart's set-up end to end with a real model: `respgw integrated` runs llama.cpp's
//! `llama-server` serving SmolLM2-135M-Instruct as its child, and answers through it — non-stream
//! and streamed responses, a `previous_response_id` continuation, a stored response fetched back,
//! and `/v1/models` and `/v1/chat/completions` forwarded to the child; and `POST
//! /v1/responses/input_tokens` equal to llama-server's own count of the templated prompt (and to
//! the `usage.prompt_tokens` of a real completion). Every response object and event is validated
//! against the Open Responses schema. The model's words are not checked (a 135M model), only that
//! there are some; tool flows stay on the replay upstream.
//!
//! Needs llama-server and the model built/downloaded by `scripts/setup-local-model` (which
//! `scripts/test` runs; the cache is reused between runs).

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{assert_valid_event, assert_valid_response, final_response, respgw_bin};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::gateway::{GatewayProcess, http_client, post_json, post_sse};
use respgw_testkit::sse::check_stream;
use serde_json::{Value, json};

/// The name llama-server serves the model under (`--alias`), as in scripts/quickstart.
const MODEL: &str = "SmolLM2-135M-Instruct";
/// Few tokens keep the test quick on 2 shared cores.
const MAX_TOKENS: u64 = 12;

/// llama-server and the model are prepared (`scripts/setup-local-model --paths` succeeds).
fn local_model_prepared() -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup-local-model");
    match std::process::Command::new(&script).arg("--paths").output() {
        Ok(out) if out.status.success() => Ok(()),
        _ => Err("llama-server and the model are not prepared (scripts/setup-local-model builds them)".into()),
    }
}

/// `LLAMA_SERVER` and `MODEL` paths from `scripts/setup-local-model --paths`.
fn local_model_paths() -> (String, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup-local-model");
    let out = std::process::Command::new(&script).arg("--paths").output().expect("scripts/setup-local-model runs");
    assert!(
        out.status.success(),
        "llama-server and the model are not prepared: run scripts/setup-local-model (scripts/test does)\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the output of --paths: {text}"))
            .to_owned()
    };
    (value("LLAMA_SERVER="), value("MODEL="))
}

/// The text of a response's message output.
fn output_text(response: &Value) -> String {
    response["output"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["type"] == "message")
        .flat_map(|item| item["content"].as_array().into_iter().flatten())
        .filter_map(|part| part["text"].as_str())
        .collect()
}

/// A finished turn: completed, or cut at the token limit; with text and token counts.
fn assert_answered(response: &Value) {
    let status = response["status"].as_str().unwrap_or_default();
    assert!(status == "completed" || status == "incomplete", "unexpected status: {response:#}");
    if status == "incomplete" {
        assert_eq!(response["incomplete_details"]["reason"], "max_output_tokens", "{response:#}");
    }
    assert!(!output_text(response).trim().is_empty(), "no text: {response:#}");
    let usage = &response["usage"];
    assert!(usage["input_tokens"].as_u64().is_some_and(|n| n > 0), "{usage}");
    assert!(usage["output_tokens"].as_u64().is_some_and(|n| (1..=MAX_TOKENS).contains(&n)), "{usage}");
}

/// `respgw integrated` in front of llama-server serving the model, with its store in `db`.
async fn start_integrated(db: &Path) -> GatewayProcess {
    let (llama_server, model) = local_model_paths();
    let args: Vec<String> = [
        "integrated",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--responses-db-path",
        db.to_str().unwrap(),
        "--",
        &llama_server,
        "--model",
        &model,
        "--alias",
        MODEL,
        "--jinja",
        "--ctx-size",
        "4096",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    GatewayProcess::spawn(respgw_bin(), &args, &common::quiet_env()).await.expect("integrated mode starts")
}

#[tokio::test]
async fn integrated_mode_serves_a_real_local_model() {
    respgw_testkit::skip_unless!(local_model_prepared());
    let dir = tempfile::tempdir().unwrap();
    let gw = start_integrated(&dir.path().join("quickstart.db")).await;
    let base = gw.base_url().to_owned();
    let client = http_client();
    let log = || gw.stderr_text();

    // Non-stream.
    let first_request = json!({"model":MODEL,"input":"Say hello.","max_output_tokens":MAX_TOKENS,"temperature":0});
    let (status, _, first) = post_json(&format!("{base}/v1/responses"), &first_request).await.unwrap();
    assert_eq!(status, 200, "{first}\n{}", log());
    assert_valid_response(&first);
    assert_answered(&first);
    let first_id = first["id"].as_str().unwrap();

    // Streamed: the deltas add up to the final text.
    let (status, text) = post_sse(
        &format!("{base}/v1/responses"),
        &json!({"model":MODEL,"input":"Count to three.","max_output_tokens":MAX_TOKENS,"stream":true}),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{text}\n{}", log());
    let events = check_stream(&text).unwrap_or_else(|e| panic!("bad stream framing: {e:#}\n{text}"));
    events.iter().for_each(assert_valid_event);
    assert_eq!(events[0]["type"], "response.created");
    let streamed = final_response(&events);
    assert_answered(streamed);
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(deltas, output_text(streamed));

    // A continuation: the model is sent the first turn as history, so it reads more tokens.
    let (status, _, second) = post_json(
        &format!("{base}/v1/responses"),
        &json!({"model":MODEL,"input":"Again, please.","previous_response_id":first_id,
                "max_output_tokens":MAX_TOKENS,"temperature":0}),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{second}\n{}", log());
    assert_valid_response(&second);
    assert_answered(&second);
    assert_eq!(second["previous_response_id"], first_id);
    let history_tokens = |r: &Value| r["usage"]["input_tokens"].as_u64().unwrap_or_default();
    assert!(history_tokens(&second) > history_tokens(&first), "{second:#}\n{first:#}");

    // The stored response comes back as it was answered.
    let stored: Value =
        client.get(format!("{base}/v1/responses/{first_id}")).send().await.unwrap().json().await.unwrap();
    assert_valid_response(&stored);
    for key in ["id", "status", "output", "usage", "model"] {
        assert_eq!(stored[key], first[key], "{key}");
    }

    // Everything else is llama-server's own answer.
    let models: Value = client.get(format!("{base}/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], MODEL, "{models}");
    assert_eq!(models["data"][0]["owned_by"], "llamacpp", "{models}");
    let chat: Value = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model":MODEL,"messages":[{"role":"user","content":"Say hi."}],"max_tokens":MAX_TOKENS}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(chat["object"], "chat.completion", "{chat}");
    assert!(chat["choices"][0]["message"]["content"].as_str().is_some_and(|t| !t.trim().is_empty()), "{chat}");

    // Stopping respgw stops the model server it started.
    let model_server = common::children(gw.pid(), "llama-server");
    assert_eq!(model_server.len(), 1, "{model_server:?}");
    kill(Pid::from_raw(gw.pid() as libc::pid_t), Signal::SIGTERM).expect("SIGTERM to respgw");
    let started = Instant::now();
    while Path::new(&format!("/proc/{}", model_server[0])).exists() {
        assert!(started.elapsed() < Duration::from_secs(60), "llama-server still runs after respgw stopped\n{}", log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The input token count is llama-server's own: its chat template applied to the conversation
/// the gateway would send (`/apply-template`), tokenized as its completion path does
/// (`/tokenize` with `add_special`) — and what a real completion of it reports as
/// `usage.prompt_tokens`. Both of llama-server's routes are reached through integrated mode's
/// forwarding.
#[tokio::test]
async fn input_token_count_is_llama_servers_own() {
    respgw_testkit::skip_unless!(local_model_prepared());
    let dir = tempfile::tempdir().unwrap();
    let gw = start_integrated(&dir.path().join("tokens.db")).await;
    let base = gw.base_url().to_owned();
    let client = http_client();
    let post = |path: &'static str, body: Value| {
        let request = client.post(format!("{base}{path}")).json(&body);
        async move {
            let response = request.send().await.expect("request completes");
            let status = response.status().as_u16();
            let json: Value = response.json().await.expect("a JSON reply");
            assert_eq!(status, 200, "{path}: {json}");
            json
        }
    };
    let parameters = json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]});
    let counted = post(
        "/v1/responses/input_tokens",
        json!({"model":MODEL,"input":"What is the weather in Paris?","instructions":"Be brief.",
               "tools":[{"type":"function","name":"get_weather","description":"Weather of a city.",
                         "parameters":parameters}]}),
    )
    .await;
    assert_eq!(counted["object"], "response.input_tokens", "{counted}");
    let counted =
        counted["input_tokens"].as_u64().unwrap_or_else(|| panic!("no count: {counted}\n{}", gw.stderr_text()));

    // The same conversation as the gateway sends it (function tools are strict by default).
    let chat = json!({"model":MODEL,
        "messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is the weather in Paris?"}],
        "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city.",
                  "parameters":parameters,"strict":true}}],
        "tool_choice":"auto"});
    let template = post("/apply-template", chat.clone()).await;
    let prompt = template["prompt"].as_str().unwrap_or_else(|| panic!("no prompt: {template}"));
    let tokens = post("/tokenize", json!({"content":prompt,"add_special":true})).await;
    let own = tokens["tokens"].as_array().map(|t| t.len() as u64);
    assert_eq!(Some(counted), own, "{prompt}");
    let mut one_token = chat;
    one_token["max_tokens"] = json!(1);
    let completion = post("/v1/chat/completions", one_token).await;
    assert_eq!(Some(counted), completion["usage"]["prompt_tokens"].as_u64(), "{completion}");
}
