//! Exercises [`GatewayProcess`] and the `respgw-replay-upstream` binary together: the replay binary
//! follows the same readiness protocol as the gateway (`listening on http://127.0.0.1:PORT` on stdout).

use std::path::Path;

use respgw_testkit::{GatewayProcess, post_json, post_sse};
use serde_json::json;

fn replay_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_respgw-replay-upstream"))
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|arg| arg.to_string()).collect()
}

#[tokio::test]
async fn harness_waits_for_readiness_and_kills_on_drop() {
    let process = GatewayProcess::spawn(
        replay_binary(),
        &args(&["--scenario", "paris=chat_completion/text-single-stream.yaml", "--synthetic-text", "bench"]),
        &[],
    )
    .await
    .unwrap();
    assert!(process.base_url().starts_with("http://127.0.0.1:"));
    assert!(process.workdir().is_dir());
    let url = format!("{}/v1/chat/completions", process.base_url());

    let (status, stream) = post_sse(&url, &json!({"model": "paris", "stream": true})).await.unwrap();
    assert_eq!(status, 200);
    assert!(stream.contains("\"content\":\"Paris\""), "{stream}");
    for _ in 0..3 {
        let (status, stream) = post_sse(&url, &json!({"model": "bench"})).await.unwrap();
        assert_eq!(status, 200);
        assert!(stream.ends_with("data: [DONE]\n\n"), "{stream}");
    }
    let (status, _headers, error) = post_json(&url, &json!({"model": "paris"})).await.unwrap();
    assert_eq!(status, 500);
    assert_eq!(error["error"]["message"], "replay: scenario `paris` has no steps left");

    let pid = process.pid();
    let workdir = process.workdir().to_owned();
    drop(process);
    #[cfg(target_os = "linux")]
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "child {pid} survived");
    assert!(!workdir.exists(), "the temporary working directory survived");
}

#[tokio::test]
async fn early_exit_reports_stderr() {
    let error = GatewayProcess::spawn(replay_binary(), &args(&["--no-such-flag"]), &[])
        .await
        .err()
        .expect("the process should fail to start");
    let message = format!("{error:#}");
    assert!(message.contains("exited before printing"), "{message}");
    assert!(message.contains("unknown argument `--no-such-flag`"), "{message}");
}
