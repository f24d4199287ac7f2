//! The real Claude Code (npm `@anthropic-ai/claude-code`, pinned in `tests/clients/package.json`)
//! in print mode against the real gateway's Messages API. Claude Code streams
//! `POST /v1/messages?beta=true` with its `anthropic-beta` list, three `system` blocks, a
//! `role: "system"` message inside `messages`, a dozen tools (one with `defer_loading`), adaptive
//! thinking, `context_management` and `output_config.effort`; it runs its tools (Bash, Read)
//! itself and sends their output back as `tool_result` blocks, replays signed thinking blocks
//! without their text, and retries without streaming when a stream ends with an `error` event.
//!
//! Between Claude Code and the gateway sits a [`ClientLog`], so each test sees what Claude Code
//! sent and can compare it with what the replay upstream received; both logs are written to
//! `$CARGO_TARGET_TMPDIR/client-logs/<test>.json`. Claude Code runs with a private `HOME` and
//! config dir, an environment of its own (no inherited `ANTHROPIC_*` variable), telemetry and
//! non-essential traffic off, no retries; its only network peer is the gateway on loopback. As
//! root it refuses `--dangerously-skip-permissions`, so Bash is allowed with `--allowedTools`.
//!
//! `scripts/test` installs Claude Code (scripts/setup-test-clients); `RESPGW_CLAUDE` may point at
//! another `claude` binary.

use crate::common;

use std::path::{Path, PathBuf};

use common::{Harness, tool_turn};
use respgw_testkit::ClientLog;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

/// The gateway's API key in these tests.
const KEY: &str = "sk-respgw-claude-code-test";

/// The pinned Claude Code is installed (`scripts/setup-test-clients`).
fn claude_installed() -> Result<(), String> {
    respgw_testkit::prerequisites::file(&claude_bin(), "scripts/setup-test-clients installs it, or set RESPGW_CLAUDE")
}

fn claude_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RESPGW_CLAUDE") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/node_modules/.bin/claude")
}

/// One Claude Code home and workspace, talking to `h` through a client log.
struct ClaudeCode {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    log: ClientLog,
}

/// What `claude -p --output-format json` reported, and its exit.
struct Run {
    succeeded: bool,
    /// The final JSON object (`result`, `is_error`, `num_turns`, …), `Null` if none was printed.
    result: Value,
    stdout: String,
    stderr: String,
}

impl ClaudeCode {
    async fn new(h: &Harness) -> ClaudeCode {
        let bin = claude_bin();
        assert!(bin.exists(), "{} not found: run scripts/setup-test-clients or set RESPGW_CLAUDE", bin.display());
        let log = ClientLog::start(h.gateway.base_url()).await.expect("client log starts");
        ClaudeCode { home: tempfile::tempdir().expect("temp dir"), work: tempfile::tempdir().expect("temp dir"), log }
    }

    /// `claude -p PROMPT --model MODEL --output-format json` plus `args`, with `key` as its API key.
    async fn run(&self, model: &str, prompt: &str, args: &[&str], key: &str) -> Run {
        let output = tokio::process::Command::new(claude_bin())
            .args(["-p", prompt, "--model", model, "--output-format", "json", "--no-session-persistence"])
            .args(args)
            .current_dir(self.work.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home.path())
            .env("CLAUDE_CONFIG_DIR", self.home.path().join(".claude"))
            .env("ANTHROPIC_BASE_URL", self.log.base_url())
            .env("ANTHROPIC_API_KEY", key)
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "0")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("claude runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let result = stdout.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok()).unwrap_or(Value::Null);
        Run {
            succeeded: output.status.success(),
            result,
            stdout,
            stderr: String::from_utf8_lossy(&output.stderr).into(),
        }
    }

    /// The `/v1/messages` bodies Claude Code sent, after checking it sent nothing else.
    fn sent(&self) -> Vec<Value> {
        let requests = self.log.requests();
        for r in &requests {
            assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/messages?beta=true"), "unexpected request");
            assert!(
                r.headers.get("anthropic-beta").is_some_and(|b| b.to_str().is_ok_and(|b| b.contains("claude-code")))
            );
            assert_eq!(r.headers.get("x-api-key").and_then(|k| k.to_str().ok()), Some(KEY));
        }
        requests.into_iter().map(|r| r.body).collect()
    }
}

impl Run {
    /// The printed answer of a successful run.
    fn answer(&self) -> &str {
        assert!(self.succeeded, "claude failed:\n{}\n{}", self.stdout, self.stderr);
        assert_eq!(self.result["is_error"], false, "{}", self.result);
        self.result["result"].as_str().unwrap_or_default()
    }
}

/// "Paris." from a server whose prefix cache held `cached` of the `prompt` tokens.
fn paris_with_cached_prompt(prompt: u64, cached: u64) -> Step {
    let chunks = [
        json!({"choices":[{"index":0,"delta":{"role":"assistant","content":"Paris."},"finish_reason":null}]}),
        json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
        json!({"choices":[],"usage":{"prompt_tokens":prompt,"completion_tokens":3,"total_tokens":prompt + 3,
            "prompt_tokens_details":{"cached_tokens":cached}}}),
    ];
    let mut sse: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    sse.push("data: [DONE]\n\n".into());
    Step::Sse(sse)
}

/// Write what the client sent and what the upstream received, for a person reading a failure.
fn write_logs(test: &str, sent: &[Value], received: &[Value]) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("client-logs");
    let _ = std::fs::create_dir_all(&dir);
    let body = json!({"client_sent": sent, "upstream_received": received});
    let _ = std::fs::write(dir.join(format!("{test}.json")), serde_json::to_string_pretty(&body).unwrap_or_default());
}

/// The text of a chat message's content (string or parts).
fn chat_text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

/// The texts of a Messages `system` or `content` value (string or text blocks).
fn block_texts(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str().map(str::to_owned)).collect(),
        _ => Vec::new(),
    }
}

/// What the gateway must have made of one Claude Code request: every text of `system`, of the
/// `role: "system"` messages and of the user turns reached the model, in order; the tools Claude
/// Code declared were offered as functions with their schemas — those with `defer_loading` only
/// once a `tool_reference` in a tool result loaded them — and the token limit was passed on.
fn assert_forwarded(sent: &Value, received: &Value) {
    let upstream: Vec<(String, String)> = received["messages"]
        .as_array()
        .expect("upstream messages")
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or_default().to_owned(), chat_text(m)))
        .collect();
    let upstream_text =
        |role: &str| upstream.iter().filter(|(r, _)| r == role).map(|(_, t)| t.as_str()).collect::<Vec<_>>().join("\n");
    let system_text = upstream_text("system");
    // All but Claude Code's billing line, which the gateway keeps out of the prompt.
    let mut expected_system: Vec<String> = block_texts(&sent["system"])
        .into_iter()
        .filter(|text| !text.starts_with("x-anthropic-billing-header:"))
        .collect();
    assert!(!system_text.contains("x-anthropic-billing-header"), "Claude Code's billing line is not sent to the model");
    for message in sent["messages"].as_array().expect("messages") {
        if message["role"] == "system" {
            expected_system.extend(block_texts(&message["content"]));
        }
    }
    let mut from = 0;
    for text in &expected_system {
        let at = system_text[from..].find(text.as_str());
        assert!(at.is_some(), "system text did not reach the model in order: {text:.120}");
        from += at.unwrap_or_default() + text.len();
    }
    let user_text = upstream_text("user");
    for message in sent["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "user") {
        for text in block_texts(&message["content"]) {
            assert!(user_text.contains(&text), "user text did not reach the model: {text:.120}");
        }
    }

    let mut offered: Vec<(String, Value)> = received["tools"]
        .as_array()
        .expect("tools offered")
        .iter()
        .map(|t| (t["function"]["name"].as_str().unwrap_or_default().to_owned(), t["function"]["parameters"].clone()))
        .collect();
    let loaded: Vec<&Value> = sent["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .flat_map(|block| block["content"].as_array().into_iter().flatten())
        .filter(|inner| inner["type"] == "tool_reference")
        .map(|reference| &reference["tool_name"])
        .collect();
    let mut declared: Vec<(String, Value)> = sent["tools"]
        .as_array()
        .expect("tools declared")
        .iter()
        .filter(|t| t["defer_loading"] != true || loaded.contains(&&t["name"]))
        .map(|t| (t["name"].as_str().unwrap_or_default().to_owned(), t["input_schema"].clone()))
        .collect();
    offered.sort_by(|a, b| a.0.cmp(&b.0));
    declared.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(offered, declared, "the model is offered the tools Claude Code loaded, with their schemas");
    assert_eq!(received["max_completion_tokens"], sent["max_tokens"]);
}

/// The Messages surface Claude Code 2.1.328 sends on every turn, which the gateway must accept.
fn assert_claude_code_surface(sent: &Value) {
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["max_tokens"], 32000);
    assert_eq!(sent["thinking"]["type"], "adaptive");
    assert_eq!(sent["output_config"]["effort"], "high");
    assert!(sent["context_management"]["edits"].is_array());
    assert!(sent["metadata"]["user_id"].is_string());
    let system = sent["system"].as_array().expect("system blocks");
    assert_eq!(system.len(), 3);
    assert!(system.iter().any(|b| b["cache_control"]["type"] == "ephemeral"));
    let messages = sent["messages"].as_array().expect("messages");
    assert!(messages.iter().any(|m| m["role"] == "system"), "a role: system message inside messages");
    let tools = sent["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t["name"] == "Bash"));
    assert!(tools.iter().any(|t| t["defer_loading"] == true), "a deferred tool");
}

#[tokio::test]
async fn claude_code_prints_a_plain_answer() {
    respgw_testkit::skip_unless!(claude_installed());
    let h = Harness::start_with(&["--api-key", KEY], &[]).await;
    h.scenario("cc-plain", vec![paris_with_cached_prompt(1200, 1000)]);
    let claude = ClaudeCode::new(&h).await;
    let run = claude.run("cc-plain", "What is the capital of France?", &[], KEY).await;
    let (sent, received) = (claude.sent(), h.upstream_bodies("cc-plain"));
    write_logs("claude_code_prints_a_plain_answer", &sent, &received);
    assert_eq!(run.answer(), "Paris.");
    assert_eq!(run.result["num_turns"], 1, "{}", run.result);
    // Claude Code's usage comes from the stream's usage: the upstream's cached prompt tokens are
    // cache reads, the rest input tokens.
    let usage = &run.result["usage"];
    assert_eq!((&usage["input_tokens"], &usage["cache_read_input_tokens"]), (&json!(200), &json!(1000)), "{usage}");
    assert_eq!(usage["output_tokens"], 3, "{usage}");

    assert_eq!((sent.len(), received.len()), (1, 1));
    assert_claude_code_surface(&sent[0]);
    assert_forwarded(&sent[0], &received[0]);
    assert!(chat_text(&received[0]["messages"][0]).contains("You are a Claude agent"), "{}", received[0]);
}

#[tokio::test]
async fn claude_code_runs_its_bash_tool_and_the_model_gets_the_output() {
    respgw_testkit::skip_unless!(claude_installed());
    let h = Harness::start_with(&["--api-key", KEY], &[]).await;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos());
    let marker = format!("respgw-cc-{}", nanos.unwrap_or_default());
    let command = format!("printf {marker} > marker.txt && cat marker.txt");
    // A recorded vLLM turn that reasons, then calls the tool: Claude Code gets a thinking block
    // (text omitted, as it asks) and replays it, signed, with the tool result.
    let arguments = json!({"command": command, "description": "Write the marker"}).to_string();
    let call = Step::recorded_tool_call("chat_completion/vllm-code_interpreter-step1-stream.yaml", "Bash", &arguments)
        .expect("tool-call stream");
    h.scenario("cc-bash", vec![call, Step::text(&["The marker ", "is written."], "stop", Some((1300, 5)))]);
    let claude = ClaudeCode::new(&h).await;
    let run = claude.run("cc-bash", "Write the marker file.", &["--allowedTools", "Bash"], KEY).await;
    let (sent, received) = (claude.sent(), h.upstream_bodies("cc-bash"));
    write_logs("claude_code_runs_its_bash_tool_and_the_model_gets_the_output", &sent, &received);
    assert_eq!(run.answer(), "The marker is written.");
    assert_eq!(std::fs::read_to_string(claude.work.path().join("marker.txt")).ok().as_deref(), Some(marker.as_str()));

    assert_eq!((sent.len(), received.len()), (2, 2));
    for (s, r) in sent.iter().zip(&received) {
        assert_claude_code_surface(s);
        assert_forwarded(s, r);
    }
    // Claude Code sends back our tool_use and the command's output …
    let messages = sent[1]["messages"].as_array().expect("messages");
    let assistant = messages.iter().rev().find(|m| m["role"] == "assistant").expect("the tool_use turn replayed");
    let tool_use = assistant["content"].as_array().and_then(|c| c.iter().find(|b| b["type"] == "tool_use").cloned());
    let tool_use = tool_use.expect("a tool_use block");
    assert_eq!((tool_use["name"].as_str(), &tool_use["input"]["command"]), (Some("Bash"), &json!(command)));
    let result = &messages.last().expect("the tool result turn")["content"][0];
    assert_eq!((result["type"].as_str(), &result["tool_use_id"]), (Some("tool_result"), &tool_use["id"]));
    assert_eq!(result["is_error"], false, "Claude Code ran the command: {result}");
    // It asked for thinking without its text (`display: omitted`), and replays the signed block.
    let thinking = assistant["content"].as_array().and_then(|c| c.iter().find(|b| b["type"] == "thinking").cloned());
    let thinking = thinking.expect("the thinking block replayed");
    assert_eq!(thinking["thinking"], "", "{thinking}");
    let signature = thinking["signature"].as_str().unwrap_or_default();
    assert!(!signature.is_empty() && !signature.contains("code_interpreter"), "a sealed signature: {thinking}");
    // … and the model sees its reasoning, its call and the output on the next turn.
    let upstream = received[1]["messages"].as_array().expect("messages");
    let call = upstream.iter().find(|m| m["tool_calls"].is_array()).expect("the assistant tool call");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "Bash");
    let reasoning = call["reasoning_content"].as_str().unwrap_or_default();
    assert!(reasoning.contains("call the code_interpreter tool"), "the model's reasoning is restored: {call}");
    let output = upstream.iter().find(|m| m["role"] == "tool").expect("the tool result");
    assert_eq!(output["tool_call_id"], call["tool_calls"][0]["id"]);
    assert_eq!(chat_text(output), marker, "the command's output reached the model");
}

#[tokio::test]
async fn claude_code_with_a_wrong_key_fails_to_authenticate() {
    respgw_testkit::skip_unless!(claude_installed());
    let h = Harness::start_with(&["--api-key", KEY], &[]).await;
    h.scenario("cc-denied", vec![]);
    let claude = ClaudeCode::new(&h).await;
    let run = claude.run("cc-denied", "Hello?", &[], "sk-not-the-key").await;
    assert!(!run.succeeded, "{}", run.stdout);
    assert_eq!(run.result["is_error"], true, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(
        (run.result["api_error_status"].as_u64(), run.result["api_error_type"].as_str()),
        (Some(401), Some("authentication_error"))
    );
    assert!(run.result["result"].as_str().is_some_and(|r| r.starts_with("Failed to authenticate")), "{}", run.result);
    assert!(h.upstream.requests("cc-denied").is_empty());
}

#[tokio::test]
async fn claude_code_recovers_from_a_stream_error_event_with_a_non_streamed_retry() {
    respgw_testkit::skip_unless!(claude_installed());
    let h = Harness::start_with(&["--api-key", KEY], &[]).await;
    let Step::Sse(chunks) = Step::text(&["Par", "is."], "stop", Some((1200, 3))) else {
        unreachable!("Step::text is an SSE step")
    };
    // The upstream dies after the first words: the gateway ends the stream with an `error` event.
    let cut = Step::SseThenDrop { chunks: chunks[..2].to_vec() };
    h.scenario("cc-cut", vec![cut, Step::text(&["Par", "is."], "stop", Some((1200, 3)))]);
    let claude = ClaudeCode::new(&h).await;
    let run = claude.run("cc-cut", "What is the capital of France?", &[], KEY).await;
    let (sent, received) = (claude.sent(), h.upstream_bodies("cc-cut"));
    write_logs("claude_code_recovers_from_a_stream_error_event_with_a_non_streamed_retry", &sent, &received);
    assert_eq!(run.answer(), "Paris.");
    // Claude Code retried the same request without streaming, and the gateway answered it whole.
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!((&sent[0]["stream"], &sent[1]["stream"]), (&json!(true), &json!(false)));
    assert_eq!(sent[0]["messages"], sent[1]["messages"]);
    assert_eq!(received.len(), 2);
    assert_forwarded(&sent[1], &received[1]);
}

#[tokio::test]
async fn claude_code_answers_parallel_calls_in_order_and_reports_a_refused_one() {
    respgw_testkit::skip_unless!(claude_installed());
    let h = Harness::start_with(&["--api-key", KEY], &[]).await;
    // Two calls at once: one only prints, one writes a file, which Claude Code refuses in print
    // mode unless Bash is allowed (it is not, here).
    let calls = [
        ("Bash", json!({"command": "printf respgw-parallel-one", "description": "Print"})),
        ("Bash", json!({"command": "printf x > refused.txt", "description": "Write"})),
    ];
    h.scenario("cc-parallel", vec![tool_turn(&calls), Step::text(&["Done."], "stop", Some((1400, 2)))]);
    let claude = ClaudeCode::new(&h).await;
    let run = claude.run("cc-parallel", "Print, then write.", &[], KEY).await;
    let (sent, received) = (claude.sent(), h.upstream_bodies("cc-parallel"));
    write_logs("claude_code_answers_parallel_calls_in_order_and_reports_a_refused_one", &sent, &received);
    assert_eq!(run.answer(), "Done.");
    assert!(!claude.work.path().join("refused.txt").exists(), "the write was refused");

    assert_eq!((sent.len(), received.len()), (2, 2));
    assert_forwarded(&sent[1], &received[1]);
    let results = sent[1]["messages"].as_array().and_then(|m| m.last()).map(|m| m["content"].clone());
    let results = results.and_then(|c| c.as_array().cloned()).unwrap_or_default();
    let flags: Vec<(&str, bool)> = results
        .iter()
        .map(|r| (r["tool_use_id"].as_str().unwrap_or_default(), r["is_error"].as_bool().unwrap_or_default()))
        .collect();
    assert_eq!(flags, [("call_0", false), ("call_1", true)], "{results:#?}");

    let messages = received[1]["messages"].as_array().expect("messages");
    common::assert_results_follow_their_calls(messages);
    let outputs: Vec<(&str, String)> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| (m["tool_call_id"].as_str().unwrap_or_default(), chat_text(m)))
        .collect();
    assert_eq!(outputs.len(), 2, "{messages:#?}");
    assert_eq!(outputs[0], ("call_0", "respgw-parallel-one".to_owned()));
    assert_eq!(outputs[1].0, "call_1");
    assert!(outputs[1].1.contains("needs approval"), "the model is told the call was refused: {}", outputs[1].1);
}

#[tokio::test]
async fn a_deferred_tool_loaded_by_claude_codes_tool_search_is_offered_to_the_model() {
    respgw_testkit::skip_unless!(claude_installed());
    let h = Harness::start_with(&["--api-key", KEY], &[]).await;
    // NotebookEdit is one of the deferred tools Claude Code lists by name; ToolSearch loads it.
    let search = json!({"query": "select:NotebookEdit", "max_results": 5});
    h.scenario("cc-deferred", vec![tool_turn(&[("ToolSearch", search)]), Step::text(&["Loaded."], "stop", None)]);
    let claude = ClaudeCode::new(&h).await;
    let run = claude.run("cc-deferred", "Load the notebook tool.", &[], KEY).await;
    let (sent, received) = (claude.sent(), h.upstream_bodies("cc-deferred"));
    write_logs("a_deferred_tool_loaded_by_claude_codes_tool_search_is_offered_to_the_model", &sent, &received);
    assert_eq!(run.answer(), "Loaded.");

    assert_eq!((sent.len(), received.len()), (2, 2));
    let offered = |body: &Value| -> Vec<String> {
        let tools = body["tools"].as_array().cloned().unwrap_or_default();
        tools.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect()
    };
    assert!(!offered(&received[0]).contains(&"NotebookEdit".to_owned()), "not offered before it is loaded");
    // Claude Code answers with a tool_reference and declares the tool, still deferred …
    let notebook = sent[1]["tools"].as_array().and_then(|t| t.iter().find(|t| t["name"] == "NotebookEdit").cloned());
    assert_eq!(notebook.map(|t| t["defer_loading"].clone()), Some(json!(true)), "{:#}", sent[1]["tools"]);
    // … and from then on the model is offered it.
    assert!(offered(&received[1]).contains(&"NotebookEdit".to_owned()), "{:?}", offered(&received[1]));
    for (s, r) in sent.iter().zip(&received) {
        assert_forwarded(s, r);
    }
}

#[tokio::test]
async fn claude_code_reads_an_image_and_the_model_sees_it() {
    respgw_testkit::skip_unless!(claude_installed());
    let h = Harness::start_with(&["--api-key", KEY], &[]).await;
    let claude = ClaudeCode::new(&h).await;
    let image = claude.work.path().join("pixel.png");
    std::fs::write(&image, TINY_PNG).expect("image written");
    let read = json!({"file_path": image.to_str().unwrap_or_default()});
    h.scenario("cc-read", vec![tool_turn(&[("Read", read)]), Step::text(&["A pixel."], "stop", Some((1500, 2)))]);
    let run = claude.run("cc-read", "What is in pixel.png?", &[], KEY).await;
    let (sent, received) = (claude.sent(), h.upstream_bodies("cc-read"));
    write_logs("claude_code_reads_an_image_and_the_model_sees_it", &sent, &received);
    assert_eq!(run.answer(), "A pixel.");

    // Claude Code's Read tool answers with an image block …
    let result = &sent[1]["messages"].as_array().and_then(|m| m.last()).expect("the tool result turn")["content"][0];
    assert_eq!(result["content"][0]["type"], "image", "{result}");
    let data = result["content"][0]["source"]["data"].as_str().unwrap_or_default();
    // … which reaches the model with the tool's answer, as a data URL.
    let messages = received[1]["messages"].as_array().expect("messages");
    let after_call = messages.iter().skip_while(|m| !m["tool_calls"].is_array()).skip(1);
    let urls: Vec<&str> = after_call
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .filter_map(|part| part["image_url"]["url"].as_str())
        .collect();
    assert_eq!(urls, [format!("data:image/png;base64,{data}").as_str()], "{messages:#?}");
}

/// A 1×1 PNG.
const TINY_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d,
    0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];
