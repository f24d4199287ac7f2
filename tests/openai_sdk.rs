//! The official `openai` Python SDK against the real gateway: every reply and event must parse
//! into the SDK's typed classes (see `tests/sdk/openai_sdk_check.py`).
//!
//! The SDK lives in the project's virtualenv, which `scripts/test` creates from
//! `tests/sdk/requirements.txt`; `RESPGW_PYTHON` may point at another interpreter.

mod common;

use std::path::PathBuf;

use common::Harness;
use respgw_testkit::upstream::Step;

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("RESPGW_PYTHON") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python")
}

#[tokio::test]
async fn the_official_python_sdk_parses_everything() {
    let python = python();
    assert!(
        python.exists(),
        "{} not found: run scripts/test (it installs the openai SDK into .venv) or set RESPGW_PYTHON",
        python.display()
    );
    let h = Harness::start().await;
    let text = || Step::cassette("chat_completion/text-single-stream.yaml");
    h.scenario("text", (0..5).map(|_| text()).collect());
    h.scenario("reasoning", vec![Step::cassette("chat_completion/vllm-code_interpreter-step2-stream.yaml")]);
    let tool = || Step::cassette("chat_completion/vllm-code_interpreter-step1-stream.yaml");
    h.scenario("tool", vec![tool(), tool()]);
    h.scenario("cut", vec![Step::cassette("chat_completion/text-max_tokens-length-stream.yaml")]);
    h.scenario("gone", vec![Step::cassette("chat_completion/model-not-found-stream.yaml")]);

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/openai_sdk_check.py");
    let base_url = h.gateway.base_url().to_owned();
    let output = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(&base_url)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .output()
        .await
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "SDK checks failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}",
        h.gateway.stderr_text()
    );
    assert!(stdout.contains("checks passed"), "{stdout}");
}
