//! The quickstart's set-up end to end with a real model: `respgw integrated` runs llama.cpp's
//! `llama-server` serving SmolLM2-135M-Instruct as its child, and answers through it — non-stream
//! and streamed responses, a `previous_response_id` continuation, a stored response fetched back,
//! and `/v1/models` and `/v1/chat/completions` forwarded to the child; and `POST
//! /v1/responses/input_tokens` equal to llama-server's own count of the templated prompt (and to
//! the `usage.prompt_tokens` of a real completion). Every response object and event is validated
//! against the Open Responses schema. The model's words are not checked (a 135M model), only that
//! there are some; tool flows stay on the replay upstream. And the quickstart's file search: a
//! second llama-server serving the embedding model all-MiniLM-L6-v2 as respgw's embedder, whose
//! vectors put similar sentences closer than unrelated ones, and through which the README's
//! walk-through (`tests/sdk/quickstart_file_search_check.py`) finds files by meaning alone.
//!
//! Needs llama-server and the models built/downloaded by `scripts/setup-local-model` (which
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
/// The name the embedding llama-server serves all-MiniLM-L6-v2 under, as in scripts/quickstart.
const EMBEDDING_MODEL: &str = "all-MiniLM-L6-v2";
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

/// The paths `scripts/setup-local-model --paths` prints.
struct LocalModel {
    llama_server: String,
    model: String,
    embedding_model: String,
}

/// `LLAMA_SERVER`, `MODEL` and `EMBEDDING_MODEL` from `scripts/setup-local-model --paths`.
fn local_model_paths() -> LocalModel {
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
    LocalModel {
        llama_server: value("LLAMA_SERVER="),
        model: value("MODEL="),
        embedding_model: value("EMBEDDING_MODEL="),
    }
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

/// `respgw integrated` in front of llama-server serving the model, with its store in `db` and
/// `extra` gateway flags.
async fn start_integrated(db: &Path, extra: &[&str]) -> GatewayProcess {
    let LocalModel { llama_server, model, .. } = local_model_paths();
    let mut args: Vec<&str> = vec!["integrated", "--host", "127.0.0.1", "--port", "0", "--responses-db-path"];
    args.push(db.to_str().unwrap());
    args.extend_from_slice(extra);
    args.extend_from_slice(&[
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
    ]);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    GatewayProcess::spawn(respgw_bin(), &args, &common::quiet_env()).await.expect("integrated mode starts")
}

/// A llama-server serving all-MiniLM-L6-v2 on `/v1/embeddings` with scripts/quickstart's flags;
/// killed when dropped.
struct EmbeddingServer {
    _child: tokio::process::Child,
    base_url: String,
}

impl EmbeddingServer {
    async fn start(dir: &Path) -> EmbeddingServer {
        let LocalModel { llama_server, embedding_model, .. } = local_model_paths();
        // A port free now, for llama-server to bind (it has no way to report one it picked).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let log = std::fs::File::create(dir.join("embedding-server.log")).unwrap();
        let mut child = tokio::process::Command::new(&llama_server)
            .args(["--model", &embedding_model, "--alias", EMBEDDING_MODEL, "--embeddings", "--pooling", "mean"])
            .args(["--ctx-size", "512", "--batch-size", "512", "--ubatch-size", "512", "--parallel", "1"])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("llama-server starts");
        let base_url = format!("http://127.0.0.1:{port}");
        let client = http_client();
        let started = Instant::now();
        loop {
            let health = client.get(format!("{base_url}/health")).send().await;
            if health.is_ok_and(|r| r.status().is_success()) {
                break;
            }
            let log = || std::fs::read_to_string(dir.join("embedding-server.log")).unwrap_or_default();
            assert!(child.try_wait().unwrap().is_none(), "the embedding server exited:\n{}", log());
            assert!(started.elapsed() < Duration::from_secs(120), "the embedding server is not ready:\n{}", log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        EmbeddingServer { _child: child, base_url }
    }
}

/// Cosine of two vectors.
fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (norm(a) * norm(b))
}

#[tokio::test]
async fn integrated_mode_serves_a_real_local_model() {
    respgw_testkit::skip_unless!(local_model_prepared());
    let dir = tempfile::tempdir().unwrap();
    let gw = start_integrated(&dir.path().join("quickstart.db"), &[]).await;
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
    let gw = start_integrated(&dir.path().join("tokens.db"), &[]).await;
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

/// The quickstart's file search: all-MiniLM-L6-v2 on a second llama-server gives unit vectors of
/// 384 dimensions that put a paraphrase closer than an unrelated sentence; respgw, with it as its
/// embedder, indexes uploaded files and finds each by a question that shares no word with it (so by
/// the vectors, not the words), and a question is answered from the file found
/// (`tests/sdk/quickstart_file_search_check.py`, the README's walk-through).
#[tokio::test]
async fn file_search_through_a_real_embedding_model() {
    respgw_testkit::skip_unless!(local_model_prepared());
    respgw_testkit::skip_unless!(common::python_env());
    let dir = tempfile::tempdir().unwrap();
    let embedder = EmbeddingServer::start(dir.path()).await;

    let sentences = ["A man is eating food.", "Someone is having a meal.", "The stock market fell sharply today."];
    let (status, _, reply) = post_json(
        &format!("{}/v1/embeddings", embedder.base_url),
        &json!({"model": EMBEDDING_MODEL, "input": sentences}),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{reply}");
    let vectors: Vec<Vec<f64>> = reply["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
        .collect();
    assert_eq!(vectors.len(), 3);
    for v in &vectors {
        assert_eq!(v.len(), 384);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "not a unit vector: {norm}");
    }
    let (paraphrase, unrelated) = (cosine(&vectors[0], &vectors[1]), cosine(&vectors[0], &vectors[2]));
    assert!(paraphrase > 0.5 && unrelated < 0.2, "paraphrase {paraphrase}, unrelated {unrelated}");

    let embedding_base = format!("{}/v1", embedder.base_url);
    let gw = start_integrated(
        &dir.path().join("file-search.db"),
        &[
            "--responses-embedding-model",
            EMBEDDING_MODEL,
            "--responses-embedding-base-url",
            &embedding_base,
            "--responses-embedding-max-input-tokens",
            "256",
        ],
    )
    .await;
    let run = common::run_sdk_script("quickstart_file_search_check.py", gw.base_url(), &[]).await;
    assert!(run.succeeded, "{}\n{}\n{}", run.stdout, run.stderr, gw.stderr_text());
    let report: Value = serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout));
    assert_eq!(report["top"].as_object().map(|m| m.len()), Some(3), "{report}");
    assert!(report["answer"].as_str().is_some_and(|t| !t.trim().is_empty()), "{report}");
}
