//! The official `openai` Python SDK against the real gateway: every reply and event must parse
//! into the SDK's typed classes (see `tests/sdk/openai_sdk_check.py`).
//!
//! The SDK lives in the project's virtualenv, which `scripts/test` creates from
//! `tests/sdk/requirements.txt`; `RESPGW_PYTHON` may point at another interpreter.

use crate::common;

use common::Harness;
use respgw_testkit::upstream::Step;

#[tokio::test]
async fn the_official_python_sdk_parses_everything() {
    respgw_testkit::skip_unless!(common::python_env());
    let h = Harness::start().await;
    let text = || Step::cassette("chat_completion/text-single-stream.yaml");
    h.scenario("text", (0..5).map(|_| text()).collect());
    h.scenario("reasoning", vec![Step::cassette("chat_completion/vllm-code_interpreter-step2-stream.yaml")]);
    let tool = || Step::cassette("chat_completion/vllm-code_interpreter-step1-stream.yaml");
    h.scenario("tool", vec![tool(), tool()]);
    h.scenario("cut", vec![Step::cassette("chat_completion/text-max_tokens-length-stream.yaml")]);
    h.scenario("gone", vec![Step::cassette("chat_completion/model-not-found-stream.yaml")]);

    let run = common::run_sdk_script("openai_sdk_check.py", h.gateway.base_url(), &[]).await;
    let (stdout, stderr) = (&run.stdout, &run.stderr);
    assert!(run.succeeded, "SDK checks failed:\n{stdout}\n{stderr}\n--- gateway log ---\n{}", h.gateway.stderr_text());
    assert!(stdout.contains("checks passed"), "{stdout}");
}
