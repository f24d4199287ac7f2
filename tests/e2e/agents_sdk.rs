//! The OpenAI Agents SDK (PyPI `openai-agents`, pinned in `tests/sdk/requirements.txt`) against
//! the real gateway: an agent with a function tool through `Runner.run` (default `store`),
//! `Runner.run_streamed` (`store=False`), `previous_response_id` chaining and `to_input_list()`
//! replay (see `tests/sdk/agents_sdk_check.py`). A [`ClientLog`] between the SDK and the gateway
//! records what the SDK sent, compared here with what the replay upstream received; both are
//! written to `$CARGO_TARGET_TMPDIR/client-logs/agents_sdk.json`.

use crate::common;

use std::path::Path;

use common::Harness;
use respgw_testkit::ClientLog;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

/// The model calls `get_weather` the way the recorded vLLM stream called its tool.
fn weather_call() -> Step {
    Step::recorded_tool_call(
        "chat_completion/vllm-code_interpreter-step1-stream.yaml",
        "get_weather",
        r#"{"city": "Paris"}"#,
    )
    .expect("tool-call stream")
}

fn answer() -> Step {
    Step::cassette("chat_completion/text-single-stream.yaml")
}

fn chat_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// The chat messages of an upstream request as `role: text` lines (tool calls by name).
fn transcript(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            let calls: Vec<&str> = m["tool_calls"]
                .as_array()
                .map(|c| c.iter().filter_map(|c| c["function"]["name"].as_str()).collect())
                .unwrap_or_default();
            format!(
                "{}: {}{}",
                m["role"].as_str().unwrap_or("?"),
                chat_text(m),
                if calls.is_empty() { String::new() } else { format!(" calls {calls:?}") }
            )
        })
        .collect()
}

#[tokio::test]
async fn agents_sdk_runs_chains_and_replays_through_the_gateway() {
    respgw_testkit::skip_unless!(common::python_env());
    let h = Harness::start().await;
    h.scenario("agents-run", vec![weather_call(), answer()]);
    h.scenario("agents-stream", vec![weather_call(), answer()]);
    h.scenario("agents-chain", vec![weather_call(), answer(), answer()]);
    h.scenario("agents-replay", vec![weather_call(), answer(), answer()]);
    let log = ClientLog::start(h.gateway.base_url()).await.expect("client log starts");

    let run =
        common::run_sdk_script("agents_sdk_check.py", &log.base_url(), &[("OPENAI_AGENTS_DISABLE_TRACING", "1")]).await;
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(
        run.succeeded && stdout.contains("agents checks passed"),
        "Agents SDK run failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}",
        h.gateway.stderr_text()
    );
    let reports: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let report =
        |mode: &str| reports.iter().find(|r| r["mode"] == mode).cloned().unwrap_or_else(|| panic!("no {mode} report"));
    let sent = |model: &str| -> Vec<Value> {
        log.requests().into_iter().map(|r| r.body).filter(|b| b["model"] == model).collect()
    };
    let all_sent: Vec<Value> = log.requests().into_iter().map(|r| r.body).collect();
    let all_received: Vec<Value> = h.upstream.all_requests().into_iter().map(|r| r.body).collect();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("client-logs");
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(
        dir.join("agents_sdk.json"),
        serde_json::to_string_pretty(&json!({"client_sent": all_sent, "upstream_received": all_received}))
            .unwrap_or_default(),
    );

    // Every mode: the tool ran in the SDK, its result reached the model, the model's answer came back.
    for (mode, model) in
        [("run", "agents-run"), ("stream", "agents-stream"), ("chain", "agents-chain"), ("replay", "agents-replay")]
    {
        let r = report(mode);
        assert_eq!(r["final_output"], "Paris.", "{mode}: {r}");
        assert_eq!(r["tool_calls"], json!(["Paris"]), "{mode}: {r}");
        let received = h.upstream_bodies(model);
        let with_result = transcript(&received[1]);
        assert!(with_result.iter().any(|l| l == "tool: sunny in Paris"), "{mode}: {with_result:#?}");
        assert!(with_result.iter().any(|l| l.ends_with(r#"calls ["get_weather"]"#)), "{mode}: {with_result:#?}");
        assert_eq!(with_result[0], "system: Answer briefly.");
        for body in sent(model) {
            assert_eq!(body["tools"][0]["name"], "get_weather", "{mode}");
        }
    }

    // store=False is sent as such, and nothing of that run can be fetched afterwards.
    let stream_sent = sent("agents-stream");
    assert!(stream_sent.iter().all(|b| b["store"] == false && b["stream"] == true), "{stream_sent:#?}");
    let streamed = report("stream");
    assert!(streamed["event_types"].as_array().is_some_and(|t| t.contains(&json!("response.completed"))));
    let id = streamed["last_response_id"].as_str().expect("response id");
    assert_eq!(h.get(&format!("/v1/responses/{id}")).await.0, 404);

    // previous_response_id: the second run sends only its new input; the gateway rebuilds the rest.
    let chain_sent = sent("agents-chain");
    assert_eq!(chain_sent.len(), 3);
    let first_id = chain_sent[2]["previous_response_id"].as_str().expect("chained");
    assert_eq!(h.get(&format!("/v1/responses/{first_id}")).await.0, 200, "the default store=true kept the first run");
    let chained = transcript(&h.upstream_bodies("agents-chain")[2]);
    for line in ["user: Weather in Paris?", "tool: sunny in Paris", "assistant: Paris.", "user: And tomorrow?"] {
        assert!(chained.iter().any(|l| l == line), "missing {line:?} in {chained:#?}");
    }

    // to_input_list(): user messages without `type`, the gateway's own items with ids and statuses.
    let replay_sent = sent("agents-replay");
    assert_eq!(replay_sent.len(), 3);
    let input = replay_sent[2]["input"].as_array().expect("input list");
    assert!(input.iter().any(|i| i.get("type").is_none() && i["role"] == "user"), "{input:#?}");
    let call = input.iter().find(|i| i["type"] == "function_call").expect("function_call replayed");
    assert!(call["id"].as_str().is_some_and(|id| id.starts_with("fc_")) && call["status"] == "completed", "{call}");
    assert!(input.iter().any(|i| i["type"] == "message" && i["role"] == "assistant" && i["id"].is_string()));
    assert!(replay_sent[2].get("previous_response_id").is_none_or(Value::is_null));
    let replayed = transcript(&h.upstream_bodies("agents-replay")[2]);
    for line in ["user: Weather in Paris?", "tool: sunny in Paris", "assistant: Paris.", "user: And tomorrow?"] {
        assert!(replayed.iter().any(|l| l == line), "missing {line:?} in {replayed:#?}");
    }
    assert_eq!(transcript(&h.upstream_bodies("agents-replay")[2]).len(), chained.len(), "replay and chaining agree");
}
