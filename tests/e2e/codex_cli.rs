//! The real Codex CLI (npm `@openai/codex`, pinned in `tests/clients/package.json`) against the
//! real gateway, configured as a custom model provider (`wire_api = "responses"`). Codex always
//! streams, sends `store: false`, replays its whole history each turn, asks for
//! `reasoning.encrypted_content` and declares `namespace` and `web_search` tools.
//!
//! Between Codex and the gateway sits a [`ClientLog`], so each test sees what Codex sent and can
//! compare it with what the replay upstream received; both logs are written to
//! `$CARGO_TARGET_TMPDIR/client-logs/<test>.json`. Codex runs with a private `CODEX_HOME`,
//! update checks and analytics off; its only network peer is the gateway on loopback.
//!
//! `scripts/test` installs Codex (scripts/setup-test-clients); `RESPGW_CODEX` may point at another
//! `codex` binary.

use crate::common;

use std::path::{Path, PathBuf};

use common::Harness;
use respgw_testkit::ClientLog;
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

/// The pinned Codex CLI is installed (`scripts/setup-test-clients`), with the Node.js it runs on.
fn codex_installed() -> Result<(), String> {
    respgw_testkit::prerequisites::file(&codex_bin(), "scripts/setup-test-clients installs it, or set RESPGW_CODEX")?;
    respgw_testkit::prerequisites::program("node", "the Codex CLI is a Node.js program: Debian's nodejs")
}

fn codex_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RESPGW_CODEX") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/node_modules/.bin/codex")
}

/// Where Codex homes and workspaces go: never under /tmp, where Codex refuses to set up its helper
/// binaries (its shell sandbox re-executes itself as `codex-linux-sandbox` through them) and shell
/// commands then never run — and a CI checkout or target dir may well be under /tmp. So the user's
/// cache (`${XDG_CACHE_HOME:-~/.cache}/respgw/codex-tests`), like the quickstart's model cache.
fn codex_dirs() -> PathBuf {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME is set");
    let dir = cache.join("respgw/codex-tests");
    std::fs::create_dir_all(&dir).expect("a directory for Codex homes");
    dir
}

/// One Codex installation (its `CODEX_HOME`) and workspace, talking to `h` through a client log.
struct Codex {
    home: tempfile::TempDir,
    work: tempfile::TempDir,
    log: ClientLog,
}

impl Codex {
    async fn new(h: &Harness, model: &str, extra_config: &str) -> Codex {
        let bin = codex_bin();
        assert!(
            bin.exists(),
            "{} not found: run scripts/test (scripts/setup-test-clients) or set RESPGW_CODEX",
            bin.display()
        );
        let log = ClientLog::start(h.gateway.base_url()).await.expect("client log starts");
        let home = tempfile::tempdir_in(codex_dirs()).expect("temp dir");
        let work = tempfile::tempdir_in(codex_dirs()).expect("temp dir");
        let config = format!(
            r#"model = "{model}"
model_provider = "respgw"
check_for_update_on_startup = false
{extra_config}

[analytics]
enabled = false

# No plugin marketplace sync (`git ls-remote https://github.com/openai/plugins.git`) or update check.
[features]
plugins = false
in_app_updates = false

[model_providers.respgw]
name = "respgw"
base_url = "{base}/v1"
wire_api = "responses"
env_key = "RESPGW_CODEX_TEST_KEY"
request_max_retries = 0
stream_max_retries = 0
"#,
            base = log.base_url()
        );
        std::fs::write(home.path().join("config.toml"), config).expect("config written");
        Codex { home, work, log }
    }

    /// Run `codex exec --json …` and return its JSONL events; fails the test if Codex fails.
    async fn exec(&self, args: &[&str]) -> Vec<Value> {
        let output = tokio::process::Command::new(codex_bin())
            .arg("exec")
            .args(["--json", "--skip-git-repo-check"])
            .args(args)
            .current_dir(self.work.path())
            .env("CODEX_HOME", self.home.path())
            .env("RESPGW_CODEX_TEST_KEY", "respgw-test")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("codex runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "codex exec {args:?} failed:\n{stdout}\n{stderr}");
        let events: Vec<Value> = stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        assert!(
            events.iter().any(|e| e["type"] == "turn.completed"),
            "codex did not complete its turn:\n{stdout}\n{stderr}"
        );
        assert!(!events.iter().any(|e| e["type"] == "turn.failed"), "{stdout}");
        events
    }

    /// The `/v1/responses` bodies Codex sent, after checking it sent nothing else.
    fn sent(&self) -> Vec<Value> {
        let requests = self.log.requests();
        for r in &requests {
            assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/v1/responses"), "unexpected request");
        }
        requests.into_iter().map(|r| r.body).collect()
    }
}

/// The texts of the agent messages Codex printed.
fn agent_messages(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == "agent_message")
        .filter_map(|e| e["item"]["text"].as_str().map(str::to_owned))
        .collect()
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

/// What the gateway must have made of one Codex request: every developer/user text reached the
/// upstream in order (developer as system), every function — namespaced ones flattened to
/// `<namespace>__<name>` — was offered, and nothing else was (no `web_search`: no backend here).
fn assert_forwarded(sent: &Value, received: &Value) {
    let messages = received["messages"].as_array().expect("upstream messages");
    let mut upstream_texts = messages.iter().filter(|m| m["role"] == "system" || m["role"] == "user");
    for item in sent["input"].as_array().expect("input array") {
        let role = item["role"].as_str().unwrap_or_default();
        if item["type"] != "message" || !matches!(role, "developer" | "user" | "system") {
            continue;
        }
        let text: Vec<&str> =
            item["content"].as_array().expect("content parts").iter().filter_map(|p| p["text"].as_str()).collect();
        let expected_role = if role == "user" { "user" } else { "system" };
        let forwarded = upstream_texts.next().unwrap_or_else(|| panic!("input message not forwarded: {item}"));
        assert_eq!(forwarded["role"], expected_role);
        assert_eq!(chat_text(forwarded), text.join("\n\n"), "message text changed on the way");
    }
    let mut offered: Vec<String> = received["tools"]
        .as_array()
        .map(|t| t.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default();
    let mut declared: Vec<String> = Vec::new();
    for tool in sent["tools"].as_array().expect("tools array") {
        match tool["type"].as_str() {
            Some("function") => declared.push(tool["name"].as_str().unwrap_or_default().to_owned()),
            Some("namespace") => {
                for inner in tool["tools"].as_array().expect("namespace tools") {
                    declared.push(format!(
                        "{}__{}",
                        tool["name"].as_str().unwrap_or_default(),
                        inner["name"].as_str().unwrap_or_default()
                    ));
                }
            }
            Some("web_search") => assert_eq!(tool["external_web_access"], false),
            other => panic!("Codex declared a tool type this test does not expect: {other:?}"),
        }
    }
    offered.sort();
    declared.sort();
    assert_eq!(offered, declared, "the upstream was offered exactly the client's functions");
}

/// The Responses surface Codex 0.169 sends on every turn, which the gateway must accept.
fn assert_codex_surface(sent: &Value) {
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["store"], false);
    assert_eq!(sent["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(sent["reasoning"]["summary"], "auto");
    assert!(sent["prompt_cache_key"].is_string());
    assert!(sent["client_metadata"].is_object());
    assert!(sent["parallel_tool_calls"].is_boolean());
    let tools = sent["tools"].as_array().expect("tools");
    assert!(tools.iter().any(|t| t["type"] == "namespace"), "a namespace tool");
    assert!(tools.iter().any(|t| t["type"] == "web_search" && t["external_web_access"] == false));
    assert!(tools.iter().any(|t| t["type"] == "function" && t["strict"] == false));
    assert!(sent["input"].as_array().expect("input").iter().all(|i| i["id"].is_string()), "input items carry ids");
}

#[tokio::test]
async fn codex_exec_plain_answer_with_output_schema() {
    respgw_testkit::skip_unless!(codex_installed());
    let h = Harness::start().await;
    h.scenario("codex-plain", vec![Step::cassette("chat_completion/text-single-stream.yaml")]);
    let codex = Codex::new(&h, "codex-plain", "").await;
    let schema = codex.work.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}"#,
    )
    .expect("schema written");
    let events = codex.exec(&["--output-schema", schema.to_str().unwrap_or_default(), "Capital of France?"]).await;
    assert_eq!(agent_messages(&events), vec!["Paris.".to_owned()]);

    let (sent, received) = (codex.sent(), h.upstream_bodies("codex-plain"));
    write_logs("codex_exec_plain_answer_with_output_schema", &sent, &received);
    assert_eq!((sent.len(), received.len()), (1, 1));
    assert_codex_surface(&sent[0]);
    assert_forwarded(&sent[0], &received[0]);
    assert_eq!(sent[0]["text"]["format"]["type"], "json_schema");
    assert_eq!(received[0]["response_format"]["type"], "json_schema");
    assert_eq!(received[0]["response_format"]["json_schema"]["schema"], sent[0]["text"]["format"]["schema"]);
    // Codex's turn usage comes from `usage` in `response.completed`.
    let usage = events.iter().find(|e| e["type"] == "turn.completed").map(|e| &e["usage"]);
    assert!(usage.is_some_and(|u| u["input_tokens"].is_u64()), "{usage:?}");
}

#[tokio::test]
async fn codex_shell_tool_round_trip() {
    respgw_testkit::skip_unless!(codex_installed());
    let h = Harness::start().await;
    let call = Step::recorded_tool_call(
        "chat_completion/vllm-code_interpreter-step1-stream.yaml",
        "exec_command",
        r#"{"cmd":"echo respgw-shell-$((6*7))"}"#,
    )
    .expect("tool-call stream");
    h.scenario("codex-shell", vec![call, Step::cassette("chat_completion/text-single-stream.yaml")]);
    let codex = Codex::new(&h, "codex-shell", "").await;
    let events = codex.exec(&["Run the echo."]).await;
    let (sent, received) = (codex.sent(), h.upstream_bodies("codex-shell"));
    write_logs("codex_shell_tool_round_trip", &sent, &received);

    // Codex reports the command it ran (its output may arrive through a later event when the
    // machine is busy; what reached the model is checked below).
    let ran = events.iter().any(|e| {
        e["item"]["type"] == "command_execution"
            && e["item"]["command"].as_str().is_some_and(|c| c.contains("respgw-shell"))
    });
    assert!(ran, "Codex ran the command: {events:#?}");
    assert_eq!(agent_messages(&events).last().map(String::as_str), Some("Paris."));

    assert_eq!((sent.len(), received.len()), (2, 2));
    for (s, r) in sent.iter().zip(&received) {
        assert_forwarded(s, r);
    }
    // Codex replays our function_call (with its id and status) and its output.
    let input = sent[1]["input"].as_array().expect("input");
    let call = input.iter().find(|i| i["type"] == "function_call").expect("function_call replayed");
    assert_eq!(call["name"], "exec_command");
    let output_item = input.iter().find(|i| i["type"] == "function_call_output").expect("output sent");
    assert_eq!(output_item["call_id"], call["call_id"]);
    // … and the model sees its call and the command's output.
    let messages = received[1]["messages"].as_array().expect("messages");
    let assistant = messages.iter().find(|m| m["tool_calls"].is_array()).expect("assistant tool call");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "exec_command");
    assert_eq!(assistant["tool_calls"][0]["id"], call["call_id"]);
    let tool = messages.iter().find(|m| m["role"] == "tool").expect("tool result");
    assert_eq!(tool["tool_call_id"], call["call_id"]);
    assert!(chat_text(tool).contains("respgw-shell-42"), "{tool}");
}

#[tokio::test]
async fn codex_exec_resume_keeps_sealed_upstream_reasoning() {
    respgw_testkit::skip_unless!(codex_installed());
    let h = Harness::start().await;
    h.scenario(
        "codex-reasoning",
        vec![
            Step::cassette("chat_completion/vllm-code_interpreter-step2-stream.yaml"),
            Step::cassette("chat_completion/text-single-stream.yaml"),
        ],
    );
    let codex = Codex::new(&h, "codex-reasoning", "").await;
    let first = codex.exec(&["What is 2+2?"]).await;
    assert!(agent_messages(&first).concat().contains("**4**"), "{first:#?}");
    let second = codex.exec(&["resume", "--last", "And the capital of France?"]).await;
    assert_eq!(agent_messages(&second), vec!["Paris.".to_owned()]);

    let (sent, received) = (codex.sent(), h.upstream_bodies("codex-reasoning"));
    write_logs("codex_exec_resume_keeps_sealed_upstream_reasoning", &sent, &received);
    assert_eq!((sent.len(), received.len()), (2, 2));
    for (s, r) in sent.iter().zip(&received) {
        assert_forwarded(s, r);
    }
    // The resumed session sends back the reasoning item as the gateway sealed it …
    let reasoning = sent[1]["input"].as_array().expect("input").iter().find(|i| i["type"] == "reasoning").cloned();
    let blob = reasoning.as_ref().and_then(|r| r["encrypted_content"].as_str()).unwrap_or_default();
    assert!(blob.starts_with("rgw2."), "sealed reasoning replayed: {reasoning:?}");
    // … which is unreadable on the wire, and opened again for the model.
    let assistant = received[1]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "assistant")
        .cloned()
        .expect("the first answer is replayed");
    let thought = assistant["reasoning_content"].as_str().unwrap_or_default();
    assert!(thought.contains("code_interpreter"), "the model sees its earlier reasoning: {assistant}");
    assert!(!blob.contains("code_interpreter"));
}

#[tokio::test]
async fn codex_compaction_sends_no_tools_and_continues() {
    respgw_testkit::skip_unless!(codex_installed());
    let h = Harness::start().await;
    let reasoning = || Step::cassette("chat_completion/vllm-code_interpreter-step2-stream.yaml");
    h.scenario(
        "codex-compact",
        vec![reasoning(), reasoning(), Step::cassette("chat_completion/text-single-stream.yaml")],
    );
    // The recorded turn reports 446 input tokens: over this limit, so Codex compacts before its next turn.
    let codex = Codex::new(&h, "codex-compact", "model_auto_compact_token_limit = 300").await;
    codex.exec(&["first"]).await;
    let events = codex.exec(&["resume", "--last", "second"]).await;
    assert_eq!(agent_messages(&events).last().map(String::as_str), Some("Paris."));

    let (sent, received) = (codex.sent(), h.upstream_bodies("codex-compact"));
    write_logs("codex_compaction_sends_no_tools_and_continues", &sent, &received);
    assert_eq!((sent.len(), received.len()), (3, 3));
    assert_eq!(sent[1]["tools"], json!([]), "the compaction request declares no tools");
    assert!(received[1].get("tools").is_none(), "so the upstream is offered none");
    for (s, r) in sent.iter().zip(&received) {
        assert_forwarded(s, r);
    }
    // The summary the model wrote (the recorded answer) is what the next turn starts from.
    let summary_sent = sent[2]["input"]
        .as_array()
        .expect("input")
        .iter()
        .any(|i| i["role"] == "user" && i["content"].to_string().contains("The result of 2+2 is **4**."));
    assert!(summary_sent, "{:#}", sent[2]["input"]);
}

#[tokio::test]
async fn codex_image_input_reaches_the_model() {
    respgw_testkit::skip_unless!(codex_installed());
    let h = Harness::start().await;
    h.scenario("codex-image", vec![Step::cassette("chat_completion/text-single-stream.yaml")]);
    let codex = Codex::new(&h, "codex-image", "").await;
    let image = codex.work.path().join("pixel.png");
    std::fs::write(&image, TINY_PNG).expect("image written");
    codex.exec(&["What is in this image?", "--image", image.to_str().unwrap_or_default()]).await;

    let (sent, received) = (codex.sent(), h.upstream_bodies("codex-image"));
    write_logs("codex_image_input_reaches_the_model", &sent, &received);
    let part = sent[0]["input"]
        .as_array()
        .expect("input")
        .iter()
        .flat_map(|i| i["content"].as_array().cloned().unwrap_or_default())
        .find(|p| p["type"] == "input_image")
        .expect("Codex sent the image");
    let url = part["image_url"].as_str().unwrap_or_default();
    assert!(url.starts_with("data:image/png;base64,"), "{part}");
    let forwarded = received[0]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|p| p["type"] == "image_url")
        .expect("the upstream got the image");
    assert_eq!(forwarded["image_url"]["url"], url);
    if let Some(detail) = part["detail"].as_str() {
        assert_eq!(forwarded["image_url"]["detail"], detail);
    }
}

/// A 1×1 PNG.
const TINY_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d,
    0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

#[tokio::test]
async fn tampered_or_foreign_encrypted_reasoning_is_a_clear_400() {
    respgw_testkit::skip_unless!(codex_installed());
    let h = Harness::start().await;
    h.scenario(
        "sealed",
        vec![
            Step::cassette("chat_completion/vllm-code_interpreter-step2-stream.yaml"),
            Step::cassette("chat_completion/text-single-stream.yaml"),
        ],
    );
    let (status, first) = h
        .create(json!({"model":"sealed","input":"2+2?","store":false,"include":["reasoning.encrypted_content"]}))
        .await;
    assert_eq!(status, 200, "{first}");
    let reasoning = first["output"].as_array().expect("output").iter().find(|i| i["type"] == "reasoning").cloned();
    let reasoning = reasoning.expect("a reasoning item");
    let blob = reasoning["encrypted_content"].as_str().expect("sealed when asked").to_owned();

    let replay = |encrypted: &str| {
        json!({"model":"sealed","store":false,"input":[
            {"role":"user","content":"2+2?"},
            {"type":"reasoning","id":reasoning["id"],"summary":[],"encrypted_content":encrypted},
            {"role":"user","content":"and now?"}]})
    };
    let mut tampered = blob.clone().into_bytes();
    let at = tampered.len() - 2;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    for bad in [
        String::from_utf8(tampered).unwrap_or_default(),
        "gAAAAABforeign".to_owned(),
        blob.replacen("rgw2.", "rgw2.x", 1),
    ] {
        let (status, error) = h.create(replay(&bad)).await;
        assert_eq!(status, 400, "{error}");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(error["error"]["code"], "invalid_encrypted_content");
        assert_eq!(error["error"]["param"], "input[1].encrypted_content");
    }
    let (status, ok) = h.create(replay(&blob)).await;
    assert_eq!(status, 200, "{ok}");
    let received = h.upstream_bodies("sealed");
    assert_eq!(received.len(), 2, "rejected replays never reached the upstream");
    assert!(received[1]["messages"][1]["reasoning_content"].as_str().is_some_and(|t| t.contains("code_interpreter")));
}

#[tokio::test]
async fn custom_and_local_shell_calls_go_back_to_the_client_unexecuted() {
    respgw_testkit::skip_unless!(codex_installed());
    let h = Harness::start().await;
    let shell = Step::recorded_tool_call(
        "chat_completion/vllm-code_interpreter-step1-stream.yaml",
        "local_shell",
        r#"{"command":["touch","/tmp/respgw-must-not-exist"],"workdir":"/w"}"#,
    )
    .expect("tool-call stream");
    let patch = Step::recorded_tool_call(
        "chat_completion/vllm-code_interpreter-step1-stream.yaml",
        "apply_patch",
        r#"{"input":"*** Begin Patch\n*** End Patch"}"#,
    )
    .expect("tool-call stream");
    h.scenario("older-codex", vec![shell, patch, Step::cassette("chat_completion/text-single-stream.yaml")]);
    let tools = json!([{"type":"local_shell"},
        {"type":"custom","name":"apply_patch","description":"Edit files.","format":{"type":"text"}}]);

    let (status, first) =
        h.create(json!({"model":"older-codex","input":"list files","tools":tools,"store":false})).await;
    assert_eq!(status, 200, "{first}");
    let call = first["output"].as_array().expect("output").iter().find(|i| i["type"] == "local_shell_call").cloned();
    let call = call.expect("a local_shell_call item");
    assert_eq!(
        call["action"],
        json!({"type":"exec","command":["touch","/tmp/respgw-must-not-exist"],"env":{},
        "timeout_ms":null,"working_directory":"/w","user":null})
    );
    assert!(!Path::new("/tmp/respgw-must-not-exist").exists(), "the gateway never runs client tools");

    let events = h
        .stream_unchecked(json!({"model":"older-codex","tools":tools,"store":false,"input":[
            {"role":"user","content":"list files"}, call,
            {"type":"local_shell_call_output","id":call["id"],"call_id":call["call_id"],"output":"a.txt"}]}))
        .await;
    let done = events.iter().filter(|e| e["type"] == "response.output_item.done").map(|e| e["item"].clone());
    let custom = done.into_iter().find(|i| i["type"] == "custom_tool_call").expect("a custom_tool_call item");
    assert_eq!(
        (custom["name"].as_str(), custom["input"].as_str()),
        (Some("apply_patch"), Some("*** Begin Patch\n*** End Patch"))
    );

    let (status, last) = h
        .create(json!({"model":"older-codex","tools":tools,"store":false,"input":[
            {"role":"user","content":"patch it"}, custom,
            {"type":"custom_tool_call_output","call_id":custom["call_id"],"output":"Done!"}]}))
        .await;
    assert_eq!(status, 200, "{last}");
    let received = h.upstream_bodies("older-codex");
    let offered: Vec<&str> =
        received[0]["tools"].as_array().expect("tools").iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert_eq!(offered, ["local_shell", "apply_patch"]);
    let messages = received[1]["messages"].as_array().expect("messages");
    assert_eq!(messages[1]["tool_calls"][0]["function"]["name"], "local_shell");
    assert_eq!(messages[2], json!({"role":"tool","tool_call_id":call["call_id"],"content":"a.txt"}));
    let messages = received[2]["messages"].as_array().expect("messages");
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["arguments"],
        json!({"input": "*** Begin Patch\n*** End Patch"}).to_string()
    );
    assert_eq!(messages[2], json!({"role":"tool","tool_call_id":custom["call_id"],"content":"Done!"}));
}
