//! The process model end to end: the real supervisor with real worker processes — load spread
//! over `SO_REUSEPORT` slots, a killed worker restarted with nothing stored lost, SIGTERM drain,
//! SIGHUP rolling restart, merged metrics, upstream readiness, and integrated mode.

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Harness, respgw_bin, serve_args};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use respgw_testkit::gateway::{GatewayProcess, http_client};
use respgw_testkit::upstream::Step;
use serde_json::{Value, json};

fn workers(gateway: &GatewayProcess) -> Vec<u32> {
    common::children(gateway.pid(), "worker")
}

fn signal(pid: u32, sig: libc::c_int) {
    let signal = Signal::try_from(sig).expect("a signal number");
    kill(Pid::from_raw(pid as libc::pid_t), signal).unwrap_or_else(|e| panic!("kill({pid}, {sig}): {e}"));
}

/// Wait (bounded) until `condition` holds.
async fn eventually(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < timeout, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that opens a new connection for every request, so SO_REUSEPORT can spread them.
fn fresh_connection_client() -> reqwest::Client {
    respgw_testkit::gateway::http_client(); // installs the TLS provider reqwest needs
    reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().expect("client")
}

async fn harness_with_workers(n: &str, extra: &[&str]) -> Harness {
    let mut args = vec!["--gateway-workers", n];
    args.extend_from_slice(extra);
    Harness::start_with(&args, &[]).await
}

#[tokio::test]
async fn load_spreads_over_the_workers() {
    let h = harness_with_workers("2", &[]).await;
    assert_eq!(workers(&h.gateway).len(), 2);
    let client = fresh_connection_client();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..60 {
        let response = client.get(h.url("/health")).send().await.unwrap();
        seen.insert(response.headers()["x-respgw-worker"].to_str().unwrap().to_owned());
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["0", "1"], "both workers served connections");
}

#[tokio::test]
async fn logs_off_a_terminal_carry_no_colour_codes() {
    let h = Harness::start().await;
    // The supervisor's and a worker's lines, a warning among them.
    assert!(h.wait_for_log("worker serving").await, "{}", h.gateway.stderr_text());
    let log = h.gateway.stderr_text();
    assert!(!log.contains('\x1b'), "stderr is a pipe, yet the log has escape sequences:\n{log:?}");
    assert!(log.contains(" WARN ") && log.contains(" INFO "), "levels as plain words:\n{log}");
}

#[tokio::test]
async fn a_killed_worker_is_restarted_and_nothing_stored_is_lost() {
    let h = harness_with_workers("2", &[]).await;
    h.upstream.add_repeating_scenario("m", Step::text(&["kept"], "stop", Some((3, 1))));
    let mut ids = Vec::new();
    for _ in 0..10 {
        let (status, body) = h.create(json!({"model":"m","input":"x"})).await;
        assert_eq!(status, 200);
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    let before = workers(&h.gateway);
    signal(before[0], libc::SIGKILL);
    eventually("the worker is replaced", Duration::from_secs(10), || {
        let now = workers(&h.gateway);
        now.len() == 2 && !now.contains(&before[0])
    })
    .await;
    let client = fresh_connection_client();
    for id in &ids {
        let response = client.get(h.url(&format!("/v1/responses/{id}"))).send().await.unwrap();
        assert_eq!(response.status(), 200, "{id} is still stored");
    }
    for _ in 0..10 {
        let response =
            client.post(h.url("/v1/responses")).json(&json!({"model":"m","input":"y"})).send().await.unwrap();
        assert_eq!(response.status(), 200);
    }
    assert!(h.wait_for_log("worker died; restarting it").await);
}

#[tokio::test]
async fn sigterm_lets_open_streams_finish_then_exits_zero() {
    let h = harness_with_workers("2", &["--drain-timeout", "20"]).await;
    let parts: Vec<String> = (0..6).map(|i| format!("part{i} ")).collect();
    h.scenario("slow", vec![Step::slow_text(&parts, Duration::from_millis(300))]);

    let mut response = http_client()
        .post(h.url("/v1/responses"))
        .json(&json!({"model":"slow","input":"x","stream":true}))
        .send()
        .await
        .unwrap();
    let mut body = String::new();
    let first = response.chunk().await.unwrap().expect("first bytes");
    body.push_str(&String::from_utf8_lossy(&first));
    signal(h.gateway.pid(), libc::SIGTERM);
    while let Some(bytes) = response.chunk().await.unwrap() {
        body.push_str(&String::from_utf8_lossy(&bytes));
    }
    let events = respgw_testkit::sse::check_stream(&body).expect("the stream ends properly");
    assert_eq!(events.last().unwrap()["type"], "response.completed");
    assert!(events.last().unwrap()["response"]["output"][0]["content"][0]["text"].as_str().unwrap().contains("part5"));

    let pid = h.gateway.pid();
    let mut status = 0;
    eventually("the supervisor exits", Duration::from_secs(15), || {
        // SAFETY: `status` is a live local c_int, the one place waitpid writes to; WNOHANG makes
        // the call return at once.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) == pid as libc::pid_t }
    })
    .await;
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "exit status {status}");
    assert!(http_client().get(h.url("/health")).send().await.is_err(), "no longer accepting");
}

#[tokio::test]
async fn sighup_replaces_every_worker_without_refusing_a_connection() {
    let h = harness_with_workers("2", &[]).await;
    let before = workers(&h.gateway);
    let client = fresh_connection_client();
    signal(h.gateway.pid(), libc::SIGHUP);
    let start = Instant::now();
    let mut served = 0;
    while start.elapsed() < Duration::from_secs(4) {
        let response = client.get(h.url("/health")).send().await.expect("no refused connection during the rollover");
        assert_eq!(response.status(), 200);
        served += 1;
        let now = workers(&h.gateway);
        if now.len() == 2
            && now.iter().all(|p| !before.contains(p))
            && h.gateway.stderr_text().contains("rolling restart finished")
        {
            break;
        }
    }
    assert!(served > 0);
    let after = workers(&h.gateway);
    assert!(after.iter().all(|p| !before.contains(p)), "every worker was replaced: {before:?} → {after:?}");
}

#[tokio::test]
async fn metrics_are_merged_across_workers_and_survive_a_killed_worker() {
    let h = harness_with_workers("3", &[]).await;
    h.upstream.add_repeating_scenario("m", Step::text(&["ok"], "stop", None));
    let client = fresh_connection_client();
    let post = |body: Value| client.post(h.url("/v1/responses")).json(&body).send();
    for _ in 0..12 {
        assert_eq!(post(json!({"model":"m","input":"x"})).await.unwrap().status(), 200);
    }
    for _ in 0..3 {
        assert_eq!(client.get(h.url("/v1/responses/resp_missing")).send().await.unwrap().status(), 404);
    }
    for _ in 0..2 {
        assert_eq!(post(json!({"model":"m"})).await.unwrap().status(), 400);
    }
    // Let every worker report (snapshots go out every second), then kill one.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let victims = workers(&h.gateway);
    signal(victims[1], libc::SIGKILL);
    eventually("the worker is replaced", Duration::from_secs(10), || {
        workers(&h.gateway).len() == 3 && !workers(&h.gateway).contains(&victims[1])
    })
    .await;
    for _ in 0..6 {
        assert_eq!(post(json!({"model":"m","input":"x"})).await.unwrap().status(), 200);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let text = client.get(h.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let posts = r#"gw_responses_http_requests_total{method="POST",route="/v1/responses",status="200"}"#;
    assert_eq!(common::sample(&text, posts), 18.0, "{text}");
    let missing = r#"gw_responses_http_requests_total{method="GET",route="/v1/responses/{response_id}",status="404"}"#;
    assert_eq!(common::sample(&text, missing), 3.0);
    assert_eq!(
        common::sample(&text, r#"gw_responses_http_requests_total{method="POST",route="/v1/responses",status="400"}"#),
        2.0
    );
    assert_eq!(
        common::sample(
            &text,
            r#"gw_responses_http_request_duration_seconds_count{method="POST",route="/v1/responses"}"#
        ),
        20.0
    );
    assert_eq!(common::sample(&text, "gw_responses_http_in_flight_requests"), 0.0);
    assert_eq!(common::sample(&text, "gw_responses_sse_connections_in_flight"), 0.0);
    assert!(!text.contains("/health") && !text.contains("route=\"/metrics\""), "health and metrics are not counted");
    for family in [
        "gw_responses_http_requests_total",
        "gw_responses_http_request_duration_seconds",
        "gw_responses_http_in_flight_requests",
        "gw_responses_sse_connections_in_flight",
        "gw_responses_sse_stream_duration_seconds",
        "gw_responses_tool_calls_requested_total",
        "gw_responses_tool_calls_executed_total",
        "gw_responses_tool_execution_duration_seconds",
        "gw_responses_tool_errors_total",
        "gw_responses_mcp_server_startup_total",
    ] {
        assert!(text.contains(&format!("# TYPE {family} ")), "{family} is exposed");
    }
    check_with_promtool(&text);
}

/// `promtool check metrics`, a test prerequisite (`respgw_testkit::prerequisites`).
fn check_with_promtool(text: &str) {
    use std::io::Write;
    if !respgw_testkit::prerequisites::present(respgw_testkit::prerequisites::program(
        "promtool",
        "Debian package prometheus; scripts/test installs it",
    )) {
        return;
    }
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!("promtool is installed but cannot run: {e}"),
    };
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("write");
    let out = child.wait_with_output().expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn sse_streams_are_counted_and_timed_apart_from_handlers() {
    let h = harness_with_workers("1", &[]).await;
    h.scenario("m", vec![Step::text(&["a", "b"], "stop", None)]);
    h.stream(json!({"model":"m","input":"x"})).await;
    let text = h.metrics().await;
    assert_eq!(common::sample(&text, r#"gw_responses_sse_stream_duration_seconds_count{route="/v1/responses"}"#), 1.0);
    assert_eq!(common::sample(&text, "gw_responses_sse_connections_in_flight"), 0.0);
}

#[tokio::test]
async fn function_calls_count_as_requested_tool_calls() {
    let h = harness_with_workers("1", &[]).await;
    h.scenario("ci", vec![Step::cassette("chat_completion/vllm-code_interpreter-step1-stream.yaml")]);
    let tool = json!({"type":"function","name":"code_interpreter","parameters":{"type":"object"}});
    assert_eq!(h.create(json!({"model":"ci","input":"2+2","tools":[tool]})).await.0, 200);
    let text = h.metrics().await;
    assert_eq!(common::sample(&text, r#"gw_responses_tool_calls_requested_total{tool_type="function"}"#), 1.0);
}

#[tokio::test]
async fn the_metrics_path_is_configurable_and_can_be_disabled() {
    let h = Harness::start_with(&[], &[("GW_METRICS_PATH", "/internal/prom")]).await;
    assert_eq!(http_client().get(h.url("/internal/prom")).send().await.unwrap().status(), 200);
    assert_eq!(http_client().get(h.url("/metrics")).send().await.unwrap().status(), 404);
    let off = Harness::start_with(&[], &[("GW_METRICS_ENABLED", "false")]).await;
    assert_eq!(http_client().get(off.url("/metrics")).send().await.unwrap().status(), 404);
}

#[tokio::test]
async fn metrics_and_health_need_no_key_when_auth_is_on() {
    let h = Harness::start_with(&["--api-key", "k"], &[]).await;
    assert_eq!(http_client().get(h.url("/metrics")).send().await.unwrap().status(), 200);
    assert_eq!(http_client().get(h.url("/health")).send().await.unwrap().status(), 200);
}

/// Run `respgw` to completion (bounded) and return its exit code and stderr.
async fn run_to_exit(args: &[String], timeout: Duration) -> (Option<i32>, String) {
    let child = tokio::process::Command::new(respgw_bin())
        .args(args)
        .envs(common::quiet_env())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("respgw starts");
    let out =
        tokio::time::timeout(timeout, child.wait_with_output()).await.expect("respgw exits in time").expect("wait");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test]
async fn an_upstream_that_never_answers_stops_the_start_with_a_clear_error() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let mut args = serve_args(&format!("http://127.0.0.1:{port}/v1"), &["--upstream-ready-timeout", "1"]);
    args.extend(["--db-path".into(), dir.path().join("x.db").display().to_string()]);
    let (code, stderr) = run_to_exit(&args, Duration::from_secs(20)).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("did not become ready"), "{stderr}");
}

#[tokio::test]
async fn an_unusable_store_stops_the_start_with_a_clear_error() {
    let h = respgw_testkit::upstream::ReplayUpstream::start().await.unwrap();
    let args = serve_args(&h.base_url(), &["--db-path", "/proc/no/such/dir/x.db"]);
    let (code, stderr) = run_to_exit(&args, Duration::from_secs(20)).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot open the response store"), "{stderr}");
}

/// The replay upstream as a separate binary (built by `cargo test --workspace`).
fn replay_upstream_bin() -> PathBuf {
    let bin = respgw_bin().with_file_name("respgw-replay-upstream");
    assert!(bin.exists(), "{} is missing: run the suite with `scripts/test` (cargo test --workspace)", bin.display());
    bin
}

fn integrated_args(db: &std::path::Path, child: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["integrated", "--host", "127.0.0.1", "--port", "0", "--responses-workers", "2"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(["--responses-db-path".into(), db.display().to_string(), "--".into()]);
    args.extend(child.iter().map(|s| s.to_string()));
    args
}

#[tokio::test]
async fn integrated_mode_serves_responses_and_forwards_everything_else() {
    let dir = tempfile::tempdir().unwrap();
    let replay = replay_upstream_bin();
    let args = integrated_args(
        &dir.path().join("i.db"),
        &[replay.to_str().unwrap(), "--port", "{port}", "--synthetic-text", "tiny-model"],
    );
    let gw = GatewayProcess::spawn(respgw_bin(), &args, &common::quiet_env()).await.expect("integrated mode starts");
    let base = gw.base_url().to_owned();
    let client = http_client();

    // Responses routes are the gateway's own, backed by the child.
    let (status, _, created) = respgw_testkit::gateway::post_json(
        &format!("{base}/v1/responses"),
        &json!({"model":"tiny-model","input":"hi"}),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["output"][0]["content"][0]["text"], "Hello from the replay upstream.");
    let id = created["id"].as_str().unwrap();
    assert_eq!(client.get(format!("{base}/v1/responses/{id}")).send().await.unwrap().status(), 200);

    // Everything else goes to the child unchanged, streaming included.
    let models: Value = client.get(format!("{base}/v1/models")).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["data"][0]["id"], "tiny-model");
    let chat = client
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model":"tiny-model","messages":[{"role":"user","content":"hi"}],"stream":true}))
        .send()
        .await
        .unwrap();
    assert!(chat.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    assert!(chat.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    let other = client.get(format!("{base}/tokenize?x=1")).send().await.unwrap();
    assert_eq!(other.status(), 404);
    let body = other.text().await.unwrap();
    assert!(body.contains("replay"), "the child's own 404 comes back unchanged: {body}");
    assert_eq!(client.get(format!("{base}/health")).send().await.unwrap().status(), 200);
    assert_eq!(client.get(format!("{base}/metrics")).send().await.unwrap().status(), 200);

    // When the model server dies, respgw exits with its code.
    let model_server = common::children(gw.pid(), "respgw-replay-upstream");
    assert_eq!(model_server.len(), 1);
    signal(model_server[0], libc::SIGKILL);
    let pid = gw.pid();
    let mut status = 0;
    eventually("respgw exits after its model server", Duration::from_secs(20), || {
        // SAFETY: `status` is a live local c_int, the one place waitpid writes to; WNOHANG makes
        // the call return at once.
        unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) == pid as libc::pid_t }
    })
    .await;
    assert!(libc::WIFEXITED(status), "{status}");
    assert_eq!(libc::WEXITSTATUS(status), 128 + libc::SIGKILL);
}

#[tokio::test]
async fn integrated_mode_needs_a_port_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let args = integrated_args(&dir.path().join("i.db"), &["/bin/true"]);
    let (code, stderr) = run_to_exit(&args, Duration::from_secs(20)).await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("{port}"), "{stderr}");
}
